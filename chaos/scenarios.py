"""The named chaos scenarios and their schedules: pure data and a pure, seeded planner.

A :class:`Scenario` says what to break and when (its :class:`FaultSpec` s), what the clients
do (producers' acks, group members), how the topic is configured, and so what the cluster
promises (:attr:`Scenario.promise`: acks=all, min.insync.replicas 2 of 3, no unclean leader
election, unless the scenario is about acks). :func:`plan` turns a scenario, a seed and a run
duration into a :class:`Schedule`: each fault with the second it starts and the second it is
healed, counted from the workload's start. The runner (chaos/runner.py) resolves each fault's
*target* on the live cluster when the fault starts (which broker leads partition 0 then, which
controller is active, which broker coordinates the group) and drives it through the
chaos/nemesis Fault protocol.

Nothing here opens a socket or reads a clock: ``plan(scenario, seed, duration_s)`` is a
function of its arguments, so a seed replays a run's schedule exactly (``tidelog chaos run
random --seed 7``), and the unit tests check every scenario's plan.

Fault kinds (``FaultSpec.kind``) and what the runner makes of them:

* ``kill``, ``pause``, ``restart``: kill -9, SIGSTOP, graceful restart of ``target``;
* ``kill-cluster``: kill -9 of every node at once;
* ``partition``: the links of ``shape`` cut (``isolate``, ``isolate-active-controller``,
  ``broker-from-controllers``, ``majority-minority``, ``bridge``);
* ``slow``, ``flaky``: latency with jitter, or TCP resets on a share of the connections plus
  sliced data, on every link of ``target``;
* ``kill-member``: a consumer-group member process joins the workload's group, takes its
  share of the partitions, and is killed with kill -9 (heal: a new member joins).

Targets (resolved by the runner when the fault starts): ``leader`` (the broker leading
partition 0), ``follower-1`` / ``follower-2`` (partition 0's other replicas, by id),
``active-controller``, ``coordinator`` (the broker coordinating the workload's group),
``broker-<i>`` / ``controller-<i>`` (a node by its index, 1-based: the planner picks these for
the random mix), or ``""`` when the kind needs none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Final, Literal, TypeAlias

from tidelog.chaos.checkers import Promise
from tidelog.chaos.history import Acks

__all__ = [
    "DURATION_S_DEFAULT",
    "LINK_KINDS",
    "SCENARIOS",
    "SHAPES",
    "FaultSpec",
    "PlannedFault",
    "Scenario",
    "Schedule",
    "get",
    "plan",
]

FaultKind: TypeAlias = Literal["kill", "pause", "restart", "kill-cluster", "partition", "slow",
                               "flaky", "kill-member"]
Shape: TypeAlias = Literal["", "isolate", "isolate-active-controller",
                           "broker-from-controllers", "majority-minority", "bridge"]
#: Kinds that need the cluster's links routed through proxies (a cluster the runner starts).
LINK_KINDS: Final = frozenset({"partition", "slow", "flaky"})
SHAPES: Final = ("isolate", "isolate-active-controller", "broker-from-controllers",
                 "majority-minority", "bridge")
#: A scenario's workload runs this long unless ``--duration`` says otherwise.
DURATION_S_DEFAULT: Final = 20.0
#: The shortest run: a warm-up, one fault held briefly, and time to recover.
DURATION_S_MIN: Final = 6.0
DURATION_S_MAX: Final = 3_600.0
#: The workload runs this long before the first fault (a baseline for the throughput), and at
#: least this long after the last heal (to measure recovery).
WARMUP_S: Final = 3.0
COOLDOWN_S: Final = 3.0
#: The broker session timeout the runner's clusters use; a pause must outlast it.
SESSION_TIMEOUT_S: Final = 3.0
#: The random mix: faults held this long, with this much calm between them.
RANDOM_HOLD_S: Final = (2.0, 5.0)
RANDOM_GAP_S: Final = (1.0, 3.0)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault of a scenario: what, on whom, when (``at_s``: seconds after the warm-up)
    and how long it is held (seconds)."""

    kind: FaultKind
    target: str = ""
    shape: Shape = ""
    at_s: float = 1.0
    hold_s: float = 5.0

    def __post_init__(self) -> None:
        if (self.kind == "partition") != (self.shape != ""):
            raise ValueError(f"{self.kind}: a shape goes with a partition and only with one")
        if self.shape and self.shape not in SHAPES:
            raise ValueError(f"unknown partition shape {self.shape!r} (shapes: {SHAPES})")
        if self.at_s < 0:
            raise ValueError(f"at_s must be >= 0, got {self.at_s}")
        if self.hold_s <= 0:
            raise ValueError(f"hold_s must be positive, got {self.hold_s}")

    @property
    def needs_links(self) -> bool:
        return self.kind in LINK_KINDS

    def describe(self) -> str:
        what = f"{self.kind} {self.shape}".strip()
        return f"{what} {self.target}".strip() + f" for {self.hold_s:g} s"


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named scenario (see the module docstring). ``faults`` empty and ``random`` set: the
    planner draws a mix from the seed."""

    name: str
    description: str
    faults: tuple[FaultSpec, ...] = ()
    random: bool = False
    acks: Acks = "all"
    #: One producer per entry, none idempotent; empty: two producers of ``acks`` (with
    #: acks=all one idempotent, one not)
    producer_acks: tuple[Acks, ...] = ()
    partitions: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    assign_consumers: int = 1
    group_consumers: int = 2
    #: Sends per second, all producers together.
    rate_per_s: float = 100.0
    topic_configs: tuple[tuple[str, str], ...] = field(default=())

    @property
    def needs_links(self) -> bool:
        return self.random or any(f.needs_links for f in self.faults)

    @property
    def min_duration_s(self) -> float:
        """The shortest run that holds every fault for its whole hold."""
        if self.random:
            return DURATION_S_MIN
        end = max((f.at_s + f.hold_s for f in self.faults), default=0.0)
        return max(DURATION_S_MIN, WARMUP_S + end + COOLDOWN_S)

    @property
    def promise(self) -> Promise:
        return Promise(3, self.min_insync_replicas, self.unclean_leader_election)

    def with_acks(self, acks: Acks) -> Scenario:
        """This scenario with producers of ``acks`` (min.insync.replicas is kept: acks=1
        and 0 writes are not covered by it, so their losses are reported, not failures)."""
        return replace(self, acks=acks, producer_acks=())

    @property
    def acks_label(self) -> str:
        return "+".join(self.producer_acks) if self.producer_acks else self.acks


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """A fault of a schedule: started at ``start_s``, healed at ``heal_s`` (seconds from the
    workload's start)."""

    spec: FaultSpec
    start_s: float
    heal_s: float


@dataclass(frozen=True, slots=True)
class Schedule:
    scenario: str
    seed: int
    duration_s: float
    faults: tuple[PlannedFault, ...]

    def events(self) -> list[tuple[float, str, int]]:
        """``(second, "start"|"heal", fault index)`` in the order the runner applies them: by
        time, a heal before a start at the same second, then by index."""
        out = [(f.start_s, "start", i) for i, f in enumerate(self.faults)]
        out += [(f.heal_s, "heal", i) for i, f in enumerate(self.faults)]
        return sorted(out, key=lambda e: (e[0], e[1] != "heal", e[2]))


def plan(scenario: Scenario, seed: int, duration_s: float = DURATION_S_DEFAULT) -> Schedule:
    """The schedule of ``scenario`` for a run of ``duration_s`` seconds (see the module
    docstring): each fault starts ``at_s`` after the warm-up and is healed after its whole
    hold (a pause shorter than the session timeout would test something else), so a run too
    short for the scenario is refused. ValueError naming the bound."""
    if not DURATION_S_MIN <= duration_s <= DURATION_S_MAX:
        raise ValueError(f"duration must be within {DURATION_S_MIN:g}..{DURATION_S_MAX:g} s, "
                         f"got {duration_s:g}")
    if duration_s < scenario.min_duration_s:
        raise ValueError(f"scenario {scenario.name} needs a duration of at least "
                         f"{scenario.min_duration_s:g} s, got {duration_s:g}")
    specs = _random_mix(seed, duration_s) if scenario.random else scenario.faults
    planned = tuple(PlannedFault(spec, round(WARMUP_S + spec.at_s, 3),
                                 round(WARMUP_S + spec.at_s + spec.hold_s, 3))
                    for spec in specs)
    return Schedule(scenario.name, seed, duration_s, planned)


def _random_mix(seed: int, duration_s: float) -> tuple[FaultSpec, ...]:
    """Faults one after another until the window is full, each drawn from the seed: its kind,
    its target (a node by index, the leader or the active controller) and its hold."""
    rng = random.Random(seed)
    window = duration_s - WARMUP_S - COOLDOWN_S
    specs: list[FaultSpec] = []
    t = 0.0
    # Bounded: t grows by at least RANDOM_GAP_S[0] + RANDOM_HOLD_S[0] per fault.
    while True:
        hold = round(rng.uniform(*RANDOM_HOLD_S), 1)
        if t + hold > window:
            break
        specs.append(replace(_random_fault(rng), at_s=round(t, 3), hold_s=hold))
        t += hold + round(rng.uniform(*RANDOM_GAP_S), 1)
    return tuple(specs)


def _random_fault(rng: random.Random) -> FaultSpec:
    node = rng.choice(["leader", f"broker-{rng.randint(1, 3)}", "active-controller",
                       f"controller-{rng.randint(1, 3)}"])
    broker = rng.choice(["leader", f"broker-{rng.randint(1, 3)}"])
    kinds: tuple[FaultKind, ...] = ("kill", "pause", "restart", "partition", "slow", "flaky")
    kind = rng.choice(kinds)
    if kind == "partition":
        shape: Shape = rng.choice(SHAPES)
        target = {"isolate": node, "broker-from-controllers": broker}.get(shape, "")
        return FaultSpec("partition", target, shape)
    return FaultSpec(kind, broker if kind in ("slow", "flaky") else node)


def _scenarios() -> tuple[Scenario, ...]:
    pause_s = SESSION_TIMEOUT_S + 2.0  # past the session timeout: the broker is fenced
    return (
        Scenario("kill-leader", "kill -9 the broker leading partition 0; start it again",
                 (FaultSpec("kill", "leader", at_s=1.0, hold_s=5.0),)),
        Scenario("kill-controller", "kill -9 the active controller; start it again",
                 (FaultSpec("kill", "active-controller", at_s=1.0, hold_s=5.0),)),
        Scenario("pause-broker", f"SIGSTOP the leader of partition 0 for {pause_s:g} s (past "
                 f"the {SESSION_TIMEOUT_S:g} s session timeout), then SIGCONT",
                 (FaultSpec("pause", "leader", at_s=1.0, hold_s=pause_s),)),
        Scenario("restart-broker", "stop the leader of partition 0 gracefully (controlled "
                 "shutdown), start it again",
                 (FaultSpec("restart", "leader", at_s=1.0, hold_s=2.0),)),
        Scenario("kill-cluster", "kill -9 every controller and broker at once, start them all "
                 "again", (FaultSpec("kill-cluster", at_s=1.0, hold_s=2.0),)),
        Scenario("isolate-broker", "cut every link of the leader of partition 0",
                 (FaultSpec("partition", "leader", "isolate", at_s=1.0, hold_s=6.0),)),
        Scenario("isolate-controller", "cut every link of the active controller",
                 (FaultSpec("partition", "", "isolate-active-controller", 1.0, 6.0),)),
        Scenario("broker-from-controllers", "cut the leader of partition 0 from the "
                 "controllers only (it still reaches the other brokers)",
                 (FaultSpec("partition", "leader", "broker-from-controllers", 1.0, 6.0),)),
        Scenario("majority-minority", "split the cluster: 1 controller and 1 broker apart from "
                 "the rest", (FaultSpec("partition", "", "majority-minority", 1.0, 6.0),)),
        Scenario("bridge", "two sides that reach each other only through one controller",
                 (FaultSpec("partition", "", "bridge", 1.0, 6.0),)),
        Scenario("slow-link", "200 ms ± 100 ms latency on every link of the leader of "
                 "partition 0", (FaultSpec("slow", "leader", at_s=1.0, hold_s=6.0),)),
        Scenario("flaky-link", "TCP resets on a third of the connections and data sliced "
                 "into small pieces, on every link of the leader of partition 0",
                 (FaultSpec("flaky", "leader", at_s=1.0, hold_s=6.0),)),
        Scenario("kill-member", "a consumer-group member process joins the workload's group "
                 "and is killed with kill -9; a new one joins",
                 (FaultSpec("kill-member", at_s=0.5, hold_s=8.0),)),
        Scenario("kill-coordinator", "kill -9 the broker coordinating the workload's "
                 "consumer group; start it again",
                 (FaultSpec("kill", "coordinator", at_s=1.0, hold_s=5.0),)),
        Scenario("random", "a mix of process, partition and link faults drawn from --seed",
                 random=True),
        Scenario("unclean-loss", "built to lose data: an acks=1 and an acks=all producer, "
                 "min.insync.replicas 1, unclean leader election on, 1 partition, no consumer "
                 "but the drain; the followers paused until they leave the ISR, the leader "
                 "killed, the followers resumed (an unclean election)",
                 (FaultSpec("pause", "follower-1", at_s=0.0, hold_s=7.0),
                  FaultSpec("pause", "follower-2", at_s=0.0, hold_s=7.0),
                  FaultSpec("kill", "leader", at_s=5.5, hold_s=8.0)),
                 acks="1", producer_acks=("1", "all"), partitions=1, min_insync_replicas=1,
                 unclean_leader_election=True, assign_consumers=0, group_consumers=0,
                 topic_configs=(("unclean.leader.election.enable", "true"),)),
    )


SCENARIOS: Final[dict[str, Scenario]] = {s.name: s for s in _scenarios()}


def get(name: str) -> Scenario:
    """The scenario named ``name``; KeyError naming the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r} (scenarios: "
                       f"{', '.join(SCENARIOS)})") from None
