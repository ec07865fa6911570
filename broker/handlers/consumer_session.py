"""Consumer fetch sessions (Kafka's KIP-227 for consumers): the broker's end of a consumer's
BrokerService.FetchStream that asked for one (``FetchRequest.open_session``; broker.proto).

Why: a consumer long-polls each leader for every partition it is assigned there, about twice a
second when idle. Without a session each request lists every partition and the broker reads
each one again and answers each one, so a consumer of 10,000 idle partitions keeps a broker busy
confirming that nothing changed. With a session the consumer lists only the partitions whose
fetch offset or leader epoch changed, and the broker evaluates those and the ones whose high
watermark, leadership or existence changed since (the dirty set), and answers only those with
something new.

The bookkeeping is the followers' pure core, :class:`~broker.replication.fetch_session.
LeaderSession` (validation, dirty set, what an answer includes), keyed by partition key; this
shell adds what differs for consumers:

* topics are named by **name** in requests (listed and forgotten): the session keeps which key
  each name resolved to, so a topic deleted and created again under the same name is a new
  partition, and the old one answers UNKNOWN_TOPIC_ID once and is forgotten by the consumer;
* the read is the consumer's (whole batches below the high watermark, leaders only), and a
  partition is dirty when its **high watermark** moves (not at every append), its role or leader
  epoch changes, or it is deleted (:class:`~broker.delayed.ConsumerFetchWaiters`, indexed by
  partition: a broker may have many consumers);
* **ACLs**: the gate checks the partitions a request lists. A session's other partitions were
  checked when they were listed, so a session does not outlive a change of the ACLs: the next
  incremental request after one is refused (INVALID_FETCH_SESSION_EPOCH) and the consumer's
  full request is checked again, partition by partition;
* one session request at a time per stream (the consumer sends the next after the answer): a
  second one in flight is refused and the session forgotten.

No follower ISR bookkeeping (repeated fetches) applies: a consumer's fetch changes nothing on
the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Iterable
from typing import NamedTuple, cast

from tidelog import limits
from tidelog.broker.handlers.common import HandlerRegistry, error_code, set_error
from tidelog.broker.handlers.fetch import (
    FetchSessionStats,
    ParkedRounds,
    count_consumer_out,
    partition_limit,
)
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replication.fetch_session import FULL_SESSION_EPOCH, LeaderSession, Refusal
from tidelog.errors import (
    InvalidFetchSessionEpochError,
    InvalidFetchSizeError,
    TidelogError,
    UnknownServerError,
)
from tidelog.v1 import broker_pb2 as pb

__all__ = ["ConsumerFetchSession"]

log = logging.getLogger("tidelog.broker.replica_manager")

#: Partitions one consumer session may hold: what one full request may list. (Followers'
#: sessions hold more: one broker may lead nearly every partition of a 100,000-partition
#: cluster; a consumer spread that wide sends several requests' worth as one session's growth.)
CONSUMER_SESSION_PARTITIONS_MAX = limits.PARTITIONS_PER_REQUEST_MAX

class _Answer(NamedTuple):
    """A partition's answer in the making (the message is built once, in the response)."""

    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    batches: list[bytes]
    size: int
    refused: pb.FetchResponse.PartitionData | None  # the whole answer, when it is an error
    partition: Partition | None


_Answers = dict[PartitionKey, _Answer]
#: A listed partition whose name did not resolve: (name, its answer).
_Unresolved = list[tuple[str, pb.FetchResponse.PartitionData]]


class ConsumerFetchSession:
    """The broker's end of one consumer's session FetchStream (see the module doc). Registered
    with the registry's consumer waiters while the stream is open; the stream's end must call
    :meth:`close`."""

    def __init__(self, registry: HandlerRegistry) -> None:
        self._registry = registry
        self._core: LeaderSession[PartitionKey, pb.FetchRequest.PartitionData] = LeaderSession(
            partitions_max=CONSUMER_SESSION_PARTITIONS_MAX)
        self._rounds = ParkedRounds()
        self._serving = False
        self._closed = False
        #: The key each listed (name, partition) resolved to, and the name of each key.
        self._key_of: dict[tuple[str, int], PartitionKey] = {}
        self._name_of: dict[PartitionKey, str] = {}
        #: The ACLs the session's partitions were checked against (Checks.acl_version).
        self._acl_version: object = None
        self.stats = FetchSessionStats()
        registry.consumer_waiters.add_session(self)

    # --- FetchSessionWaiter (broker.delayed) ---------------------------------------------------

    @property
    def replica_id(self) -> int:
        return -1

    @property
    def parked(self) -> bool:
        return self._rounds.parked

    def mark_dirty(self, key: Hashable) -> None:
        if self._core.mark_dirty(cast(PartitionKey, key)) is not None:
            self._rounds.event.set()

    def mark_all_dirty(self) -> None:
        if self._core.mark_all_dirty():
            self._rounds.event.set()

    def wake(self) -> None:
        self._rounds.event.set()

    # --- the stream ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Partitions the session holds."""
        return len(self._core)

    def close(self) -> None:
        """The stream ended: stop being woken."""
        if self._closed:
            return
        self._closed = True
        self._forget_all()
        self._registry.consumer_waiters.remove_session(self)
        self._rounds.event.set()

    def _forget_all(self) -> None:
        self._registry.consumer_waiters.untrack(self, tuple(self._core.keys()))
        self._core.reset()
        self._key_of.clear()
        self._name_of.clear()

    def _refuse(self, error: TidelogError) -> pb.FetchResponse:
        self.stats.refused += 1
        self._forget_all()
        return pb.FetchResponse(error_code=error_code(error.code), error_message=error.message)

    def refusal_for_acls(self, acl_version: object) -> pb.FetchResponse | None:
        """The stream calls this before the gate checks a session request, with the gate's
        current ACLs (Checks.acl_version): an incremental request after they changed is refused
        (its session's partitions were checked against the old ones) and the session forgotten;
        None when the request may go on."""
        if acl_version is self._acl_version:
            return None
        self._acl_version = acl_version
        if self._core.expected_epoch == FULL_SESSION_EPOCH:
            return None
        return self._refuse(InvalidFetchSessionEpochError(
            "the ACLs changed since this fetch session's partitions were checked: send a full "
            "request"))

    async def serve(self, request: pb.FetchRequest) -> pb.FetchResponse:
        """One session request of the stream, after the gate (denied topics removed)."""
        if self._serving:
            self._serving = False  # the round in flight answers now, its partitions gone
            self._rounds.event.set()
            return self._refuse(InvalidFetchSessionEpochError(
                "one fetch session request at a time: send the next after the answer"))
        self._serving = True
        try:
            return await self._serve(request)
        finally:
            self._serving = False

    async def _serve(self, request: pb.FetchRequest) -> pb.FetchResponse:
        max_bytes = request.max_bytes or limits.FETCH_BYTES_MAX_DEFAULT
        if max_bytes < 0:
            return self._refuse(InvalidFetchSizeError(
                f"max_bytes must be > 0, got {request.max_bytes}"))
        now = time.monotonic()
        deadline = now + min(max(request.max_wait_ms, 0), limits.FETCH_WAIT_MS_MAX) / 1000
        full = request.session_epoch == FULL_SESSION_EPOCH
        if full:
            self._forget_all()
        answers: _Answers = {}
        unresolved: _Unresolved = []
        listed, new, forgotten = self._resolve(request, unresolved)
        forgotten += [key for topic in request.forgotten for p in topic.partitions
                      if (key := self._key_of.pop((topic.name, p), None)) is not None]
        decision = self._core.begin_round(
            session_epoch=request.session_epoch, replica_id=-1, broker_epoch=-1,
            listed=listed, forgotten=forgotten, now_ms=int(now * 1000))
        stats = self.stats
        stats.rounds += 1
        if isinstance(decision, Refusal):
            return self._refuse(decision.error)
        waiters = self._registry.consumer_waiters
        waiters.untrack(self, forgotten)
        for key in forgotten:
            self._name_of.pop(key, None)
        waiters.track(self, new)
        stats.full_rounds += decision.full
        stats.listed += len(listed)
        stats.forgotten += len(forgotten)
        self._rounds.event.clear()
        total, urgent = self._evaluate(decision.evaluate, answers, 0, max_bytes)
        total, more = await self._rounds.gather(
            self._core.take_dirty,
            lambda keys, so_far: self._evaluate(keys, answers, so_far, max_bytes),
            total, urgent or bool(unresolved), request.min_bytes, deadline,
            lambda: self._closed or not self._serving)
        evaluated = len(decision.evaluate) + more
        stats.end_round(self._registry, "consumer", len(listed), evaluated, len(answers))
        return self._response(answers, unresolved, decision.next_session_epoch)

    def _resolve(self, request: pb.FetchRequest, unresolved: _Unresolved
                 ) -> tuple[list[tuple[PartitionKey, pb.FetchRequest.PartitionData]],
                            list[PartitionKey], list[PartitionKey]]:
        """The request's listed partitions as session keys, which of them are new to the
        session, and the keys their names meant before (a topic created again under its old
        name: the old one leaves the session). A name that does not resolve is answered in
        ``unresolved`` and stays out of the session."""
        registry = self._registry
        listed: list[tuple[PartitionKey, pb.FetchRequest.PartitionData]] = []
        new: list[PartitionKey] = []
        replaced: list[PartitionKey] = []
        for topic in request.topics:
            for data in topic.partitions:
                topic_id, _, error = registry.lookup(None, topic.name, data.partition_id)
                if topic_id is None:
                    answer = _blank(data.partition_id)
                    set_error(registry, answer, error or UnknownServerError(
                        f"{topic.name}-{data.partition_id} did not resolve"), None,
                        data.partition_id, "fetch")
                    unresolved.append((topic.name, answer))
                    continue
                key: PartitionKey = (topic_id, data.partition_id)
                old = self._key_of.get((topic.name, data.partition_id))
                if old is not None and old != key:
                    replaced.append(old)
                if key not in self._core:
                    new.append(key)
                self._key_of[(topic.name, data.partition_id)] = key
                self._name_of[key] = topic.name
                listed.append((key, data))
        return listed, new, replaced

    def _evaluate(self, keys: Iterable[PartitionKey], answers: _Answers, total: int,
                  max_bytes: int) -> tuple[int, bool]:
        """Evaluate ``keys`` at their cached fetch into ``answers`` (those the answer includes);
        returns (bytes answered, whether one answered an error: the answer goes now)."""
        registry, core = self._registry, self._core
        errors = False
        for key in keys:
            data = core.fetch_of(key)
            if data is None:
                continue  # forgotten meanwhile
            topic_id, partition, error = registry.lookup(key[0], "", key[1])
            high_watermark = log_start_offset = log_end_offset = -1
            batches: list[bytes] = []
            size = 0
            if error is None and partition is not None:
                limit, error = partition_limit(data)
                if error is None:
                    budget = max(min(limit, max_bytes - total), 1)
                    try:
                        read = partition.read_for_consumer(data.fetch_offset,
                                                           data.current_leader_epoch, budget)
                        high_watermark = read.high_watermark
                        log_start_offset = read.log_start_offset
                        log_end_offset = read.log_end_offset
                        batches = list(read.batches)
                        size = sum(len(b) for b in batches)
                        if batches and total > 0 and size > max_bytes - total:
                            batches, size = [], 0  # does not fit behind earlier ones (KIP-74)
                    except TidelogError as e:
                        error = e
                    except Exception as e:  # a bug: answer it, keep serving the rest
                        log.exception("broker %d: fetch of %s failed", registry.broker_id,
                                      partition.name)
                        error = UnknownServerError(f"{type(e).__name__}: {e}")
            refused = None
            if error is not None:
                refused = _blank(key[1])
                set_error(registry, refused, error, topic_id, key[1], "fetch")
                batches, size = [], 0
            more = size == 0 and error is None and 0 <= data.fetch_offset < high_watermark
            if core.on_evaluated(key, high_watermark=high_watermark,
                                 log_start_offset=log_start_offset, records=size > 0,
                                 error=error is not None, diverging=False, more=more):
                previous = answers.get(key)
                if previous is not None:
                    total -= previous.size
                answers[key] = _Answer(high_watermark, log_start_offset, log_end_offset,
                                       batches, size, refused, partition)
                total += size
                errors = errors or error is not None
        return total, errors

    def _response(self, answers: _Answers, unresolved: _Unresolved,
                  next_session_epoch: int) -> pb.FetchResponse:
        """The answer, built in place (a PartitionData added to a response by value is copied
        whole, batches included: twice the cost of building it there)."""
        response = pb.FetchResponse(next_session_epoch=next_session_epoch)
        topics: dict[tuple[str, bytes], pb.FetchResponse.TopicData] = {}
        for key, a in answers.items():
            where = (self._name_of.get(key, ""), key[0])
            topic = topics.get(where)
            if topic is None:
                topic = topics[where] = response.topics.add(name=where[0], topic_id=where[1])
            if a.refused is not None:
                topic.partitions.append(a.refused)
                continue
            answer = topic.partitions.add(
                partition_id=key[1], high_watermark=a.high_watermark,
                last_stable_offset=a.high_watermark, log_start_offset=a.log_start_offset,
                log_end_offset=a.log_end_offset)
            if a.batches:
                answer.batches.extend(a.batches)
                if a.partition is not None:
                    count_consumer_out(a.partition, a.batches, a.size)
        for name, refused in unresolved:
            response.topics.add(name=name).partitions.append(refused)
        return response


def _blank(partition_id: int) -> pb.FetchResponse.PartitionData:
    return pb.FetchResponse.PartitionData(partition_id=partition_id, high_watermark=-1,
                                          last_stable_offset=-1, log_start_offset=-1,
                                          log_end_offset=-1)
