"""Prometheus metrics of a controller, in a per-node registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ControllerMetrics:
    """The gauges and histograms a controller exports (names prefixed ``tidelog_controller_``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "tidelog_controller_"
        self.active = Gauge(p + "active", "1 while this controller is the active controller",
                            registry=registry)
        self.metadata_offset = Gauge(p + "metadata_offset",
                                     "last committed metadata offset applied here",
                                     registry=registry)
        self.commit_index = Gauge(p + "raft_commit_index", "Raft commit index",
                                  registry=registry)
        self.leader_epoch = Gauge(p + "quorum_leader_epoch", "the quorum's leader epoch",
                                  registry=registry)
        self.registered_brokers = Gauge(p + "registered_brokers", "registered brokers",
                                        registry=registry)
        self.fenced_brokers = Gauge(p + "fenced_brokers", "registered brokers that are fenced",
                                    registry=registry)
        self.topics = Gauge(p + "topics", "topics", registry=registry)
        self.partitions = Gauge(p + "partitions", "partitions", registry=registry)
        self.offline_partitions = Gauge(p + "offline_partitions", "partitions without a leader",
                                        registry=registry)
        self.pending_batches = Gauge(p + "pending_batches",
                                     "proposed metadata batches not yet committed",
                                     registry=registry)
        self.event_queue_time = Histogram(
            p + "event_queue_time_seconds",
            "time from receiving a write to answering it (includes the Raft commit)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
            registry=registry)
        self.writes = Counter(p + "writes", "metadata writes handled, by RPC and outcome",
                              ["rpc", "outcome"], registry=registry)
        self.leader_elections = Counter(
            p + "leader_elections", "partition leader changes to a new live leader committed "
            "by the quorum, by kind: unclean = the new leader was not in the ISR (Kafka's "
            "LeaderElectionRateAndTimeMs count and UncleanLeaderElectionsPerSec). Counted only "
            "by the active controller that proposed them, so sum() over controllers counts "
            "each once; going offline is not an election", ["kind"], registry=registry)
        self.raft_pre_vote_rounds = Counter(
            p + "raft_pre_vote_rounds", "pre-vote rounds this voter asked for after its "
            "connection to the Raft leader ended (controller/raft/prevote.py)", registry=registry)
        self.raft_fast_elections = Counter(
            p + "raft_fast_elections", "elections this voter started on a pre-vote majority, "
            "before the election timeout (the leader's process had died)", registry=registry)
        self._raft_counted = {"pre_vote_rounds": 0, "fast_elections": 0}
        # Both children exist from the start, so rate() and alerts see 0 rather than nothing.
        self._clean_elections = self.leader_elections.labels("clean")
        self._unclean_elections = self.leader_elections.labels("unclean")

    def count_raft_patches(self, counts: dict[str, int]) -> None:
        """The Raft node's running counts (RaftQuorum.patch_counts) into the counters."""
        for name, counter in (("pre_vote_rounds", self.raft_pre_vote_rounds),
                              ("fast_elections", self.raft_fast_elections)):
            now = counts.get(name, 0)
            if now > self._raft_counted[name]:
                counter.inc(now - self._raft_counted[name])
                self._raft_counted[name] = now

    def count_elections(self, clean: int, unclean: int) -> None:
        if clean:
            self._clean_elections.inc(clean)
        if unclean:
            self._unclean_elections.inc(unclean)
