"""The broker's metadata listener: follow the committed metadata log, build images, publish them.

Two layers, as the house style asks:

- :class:`MetadataLoader` is the pure core (Kafka's MetadataLoader). It takes FetchMetadataResponse
  messages one at a time and turns each into at most one :class:`MetadataUpdate`: the records are
  replayed in offset order through :class:`~tidelog.metadata.delta.MetadataDelta` on top of the
  current image, or a snapshot replaces the image. It checks that offsets are contiguous (a gap
  raises :class:`MetadataGapError`; the stream is then re-requested from the right offset),
  skips records it already has (a new stream may overlap), and computes this broker's
  :class:`~tidelog.metadata.delta.LocalReplicaChanges`: from the delta for records, and by
  comparing the old and new images for a snapshot (:func:`local_changes_between`). No I/O, no
  clock: unit tests feed it messages.
- :class:`MetadataListener` is the thin shell. It keeps one FetchMetadata stream open to some
  controller (committed data is the same on every voter; it prefers the active one because a
  voter cut off from the quorum stops advancing), fails over to another on a stream error, an
  end of stream or silence (controllers send a progress message every second when idle, so no
  message for ``idle_timeout_ms`` means that controller is gone or stopped), and publishes
  each update to the subscribed publishers, in order, one at a time.

Granularity: one update per message that changed the image (a message holds up to 5000
records). Publishers are awaited before the next message is read, so the gRPC stream's flow
control is the queue between the controller and the replica manager (bounded by its window) and
no update is ever dropped or reordered. ``offset`` is the offset of the last image *every*
publisher has processed; the broker reports it in its heartbeats, so the controller's "caught up"
and controlled-shutdown decisions mean "the replica manager has acted on it".

Replay is per committed batch, all or nothing, exactly as the controllers replay it (one invalid
record makes the whole batch a no-op): FetchMetadataResponse carries the batch boundaries
(``batch_record_counts``) and never splits a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from tidelog.broker.controller_client import BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, ControllerClient
from tidelog.errors import (
    InconsistentClusterIdError,
    InvalidRecordError,
    NotControllerError,
    TidelogError,
    error_for_code,
)
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.delta import LocalPartition, LocalReplicaChanges, MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import image_from_snapshot
from tidelog.v1 import controller_pb2, metadata_pb2
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "STREAM_IDLE_TIMEOUT_MS_DEFAULT",
    "ListenerStats",
    "MetadataGapError",
    "MetadataListener",
    "MetadataLoader",
    "MetadataPublisher",
    "MetadataUpdate",
    "local_changes_between",
]

log = logging.getLogger("tidelog.broker.metadata")

#: No message on a stream for this long: the controller is gone or stopped; use another.
#: Controllers send a progress message every second when idle (FETCH_METADATA_IDLE_MS).
STREAM_IDLE_TIMEOUT_MS_DEFAULT = 3_000
#: While waiting for a message, how often to check whether another controller became active.
ACTIVE_CHECK_MS = 250
#: Gaps in a row on one stream before it is treated as broken (switch controller, back off).
GAPS_IN_A_ROW_MAX = 3
#: A publisher taking longer than this is logged (it is not cancelled: a half-done
#: become-leader would be worse than a slow one).
PUBLISH_SLOW_MS = 2_000
#: Publishers per listener (replica manager, group coordinator, metadata cache, ...).
PUBLISHERS_MAX = 64

check(
    ACTIVE_CHECK_MS < STREAM_IDLE_TIMEOUT_MS_DEFAULT,
    "the active check must come within the stream idle timeout",
)


class MetadataGapError(Exception):
    """A message starts after the next offset this broker needs: re-request from there."""

    def __init__(self, *, expected_offset: int, base_offset: int) -> None:
        super().__init__(f"metadata stream skipped offsets {expected_offset}..{base_offset - 1}")
        self.expected_offset = expected_offset
        self.base_offset = base_offset


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """One change of the broker's image, as publishers receive it (Kafka's delta + manifest)."""

    previous_image: MetadataImage
    image: MetadataImage
    #: The delta the records were replayed into; None when a snapshot was loaded (then
    #: ``local_changes`` compares the two images instead).
    delta: MetadataDelta | None
    #: What this broker must do: delete, lead (at the registration's leader epoch) or follow.
    local_changes: LocalReplicaChanges
    #: Why records were no-ops at replay (normally empty), e.g. "offset 42: topic ... exists".
    ignored: tuple[str, ...] = ()

    @property
    def is_snapshot(self) -> bool:
        return self.delta is None


class MetadataPublisher(Protocol):
    """Anything that acts on metadata: the replica manager, a metadata cache, a test recorder."""

    def on_metadata_update(
        self, update: MetadataUpdate, image: MetadataImage
    ) -> Awaitable[None] | None:
        """Called once per update, in offset order; may be a coroutine (it is awaited)."""


def local_changes_between(
    previous: MetadataImage, image: MetadataImage, broker_id: int
) -> LocalReplicaChanges:
    """What ``broker_id`` must do to go from ``previous`` to ``image`` (after a snapshot load).

    Same rule as ``MetadataDelta.local_changes``: a partition is listed when its registration
    differs (a new topic id counts as new), a deletion when the broker hosted it before and does
    not now (topic gone, or removed from the replicas).
    """
    deletes: list[LocalPartition] = []
    leaders: list[LocalPartition] = []
    followers: list[LocalPartition] = []
    for topic, partition_id, before in previous.topics.iter_partitions():
        if broker_id not in before.replicas:
            continue
        now = image.topics.partition(topic.topic_id, partition_id)
        if now is None or broker_id not in now.replicas:
            deletes.append(LocalPartition(topic.name, topic.topic_id, partition_id, before))
    for topic, partition_id, now in image.topics.iter_partitions():
        if broker_id not in now.replicas:
            continue
        if previous.topics.partition(topic.topic_id, partition_id) == now:
            continue
        entry = LocalPartition(topic.name, topic.topic_id, partition_id, now)
        (leaders if now.leader == broker_id else followers).append(entry)
    return LocalReplicaChanges(
        deletes=tuple(sorted(deletes, key=_local_order)),
        leaders=tuple(sorted(leaders, key=_local_order)),
        followers=tuple(sorted(followers, key=_local_order)),
    )


def _local_order(partition: LocalPartition) -> tuple[str, int]:
    return partition.topic_name, partition.partition_id


# --- the pure core ----------------------------------------------------------------------------


class MetadataLoader:
    """Applies FetchMetadataResponse messages to an image, in order (see the module doc)."""

    def __init__(
        self, *, broker_id: int, cluster_id: str, image: MetadataImage | None = None
    ) -> None:
        if broker_id < 0:
            raise InvariantViolation(f"broker id {broker_id} is negative")
        self._broker_id = broker_id
        self._cluster_id = cluster_id
        self._image = image if image is not None else MetadataImage.empty()
        self._committed_offset = -1

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def offset(self) -> int:
        """The offset of the last record applied (-1 when none)."""
        return self._image.offset

    @property
    def next_offset(self) -> int:
        """The first offset this loader still needs: where a new stream must start."""
        return self._image.offset + 1

    @property
    def committed_offset(self) -> int:
        """The highest committed offset a controller has told us about (-1 when none)."""
        return self._committed_offset

    @property
    def is_caught_up(self) -> bool:
        return self._committed_offset >= 0 and self.offset >= self._committed_offset

    def load(self, message: controller_pb2.FetchMetadataResponse) -> MetadataUpdate | None:
        """Apply one message; the update it makes, or None when the image did not change.

        Raises the error code's TidelogError for an error message (NOT_CONTROLLER,
        INCONSISTENT_CLUSTER_ID...), MetadataGapError when the message starts past
        ``next_offset``, InvalidRecordError / UnsupportedVersionError for a bad snapshot.
        """
        if message.error_code != ErrorCode.NONE:
            raise error_for_code(message.error_code, message.error_message)
        self._committed_offset = max(self._committed_offset, message.committed_offset)
        previous = self._image
        image = previous
        if message.HasField("snapshot"):
            image = self._snapshot_image(message.snapshot, previous)
        snapshot_loaded = image is not previous
        delta: MetadataDelta | None = None
        ignored: list[str] = []
        batches = self._unapplied(message, image.offset)
        if batches:
            delta = MetadataDelta(image)
            for base_offset, records in batches:
                # All or nothing per committed batch, exactly as the controllers replayed it.
                reason = delta.replay_batch(records, base_offset)
                if reason is not None:
                    ignored.append(reason)
            image = delta.apply()
        if image is previous:
            return None
        if image.offset < previous.offset:
            raise InvariantViolation(
                f"the image went back from offset {previous.offset} to {image.offset}")
        if snapshot_loaded:
            # The delta (if records followed the snapshot) does not start from ``previous``.
            local_changes = local_changes_between(previous, image, self._broker_id)
            delta = None
        else:
            assert delta is not None
            local_changes = delta.local_changes(self._broker_id)
        self._image = image
        return MetadataUpdate(previous, image, delta, local_changes, tuple(ignored))

    def _snapshot_image(
        self, snapshot: metadata_pb2.MetadataSnapshot, current: MetadataImage
    ) -> MetadataImage:
        if snapshot.metadata_offset < current.offset:
            # Older than what we have (another controller's stream overlapping ours): keep ours.
            return current
        image = image_from_snapshot(snapshot, cluster_id=self._cluster_id)
        if image.offset == current.offset:
            if image.digest() == current.digest():
                return current
            # Same offset, different content: our per-record replay disagreed with the
            # controllers' (see the module doc). Theirs is authoritative.
            log.warning("metadata image at offset %d differs from the controller's snapshot; "
                        "taking the snapshot", image.offset)
        return image

    def _unapplied(
        self, message: controller_pb2.FetchMetadataResponse, applied_offset: int
    ) -> list[tuple[int, Sequence[metadata_pb2.MetadataRecord]]]:
        """The message's committed batches (base offset, records) this image does not have yet.

        Raises MetadataGapError when the message starts past the next offset, or when the next
        offset falls inside one of its batches (re-requesting from there gets a snapshot).
        """
        expected = applied_offset + 1
        base = message.base_offset
        if base > expected:
            raise MetadataGapError(expected_offset=expected, base_offset=base)
        records: Sequence[metadata_pb2.MetadataRecord] = message.records
        counts = list(message.batch_record_counts) or ([len(records)] if records else [])
        if sum(counts) != len(records) or any(c <= 0 for c in counts):
            raise InvalidRecordError(
                f"metadata message at offset {base} has {len(records)} records but batch "
                f"counts {counts}")
        batches: list[tuple[int, Sequence[metadata_pb2.MetadataRecord]]] = []
        start = 0
        for count in counts:
            offset = base + start
            if offset >= expected:
                batches.append((offset, records[start : start + count]))
            elif offset + count > expected:
                raise MetadataGapError(expected_offset=expected, base_offset=offset)
            start += count
        return batches


# --- the stream shell -------------------------------------------------------------------------


@dataclass(slots=True)
class ListenerStats:
    """Counters for logs, metrics and tests."""

    messages: int = 0
    updates: int = 0
    snapshots: int = 0
    records: int = 0
    ignored_records: int = 0
    gaps: int = 0
    streams_opened: int = 0
    publisher_errors: int = 0
    stream_voters: list[int] = field(default_factory=list)  # the last few, newest last


class _SwitchVoter(Exception):
    """End the current stream and continue on ``voter_id`` (after a pause when ``pause``)."""

    def __init__(self, voter_id: int, why: str, *, pause: bool) -> None:
        super().__init__(why)
        self.voter_id = voter_id
        self.why = why
        self.pause = pause


class MetadataListener:
    """Follows the metadata log over FetchMetadata and publishes updates (see the module doc)."""

    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        client: ControllerClient,
        publishers: Sequence[MetadataPublisher] = (),
        idle_timeout_ms: int = STREAM_IDLE_TIMEOUT_MS_DEFAULT,
        on_fatal: Callable[[TidelogError], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not (idle_timeout_ms > 0 and len(publishers) <= PUBLISHERS_MAX):
            raise InvariantViolation(
                f"idle timeout {idle_timeout_ms} ms, {len(publishers)} publishers (max "
                f"{PUBLISHERS_MAX})")
        self._broker_id = broker_id
        self._cluster_id = cluster_id
        self._client = client
        self._loader = MetadataLoader(broker_id=broker_id, cluster_id=cluster_id)
        self._publishers: list[MetadataPublisher] = list(publishers)
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._on_fatal = on_fatal
        self._rng = rng if rng is not None else random.Random()
        self._image = self._loader.image  # the last image every publisher has processed
        self._progress = asyncio.Condition()
        self._publish_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._failure: TidelogError | None = None
        self._has_caught_up = False
        self._pauses = 0  # pauses since the last message that applied (backoff exponent)
        self._gaps_in_a_row = 0
        self.stats = ListenerStats()

    # --- views ---------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The last image every publisher has processed."""
        return self._image

    @property
    def offset(self) -> int:
        """The offset of :attr:`image`: what the broker reports as applied in heartbeats."""
        return self._image.offset

    @property
    def committed_offset(self) -> int:
        """The highest committed offset a controller has reported (-1 before the first message)."""
        return self._loader.committed_offset

    @property
    def is_caught_up(self) -> bool:
        """The image has every record a controller has said is committed: true now, and
        false again for the moment each new batch is applied."""
        return self._loader.committed_offset >= 0 and self.offset >= self._loader.committed_offset

    @property
    def has_caught_up(self) -> bool:
        """:attr:`is_caught_up` held at least once since this listener started: the start-up
        gate (Kafka's broker serves once its metadata first caught up, and does not stop
        serving each time a new batch is being applied: its leader epochs fence what is
        stale)."""
        return self._has_caught_up

    @property
    def failure(self) -> TidelogError | None:
        """The fatal error that stopped the listener (INCONSISTENT_CLUSTER_ID...), if any."""
        return self._failure

    # --- subscribers and waiting ---------------------------------------------------------------

    async def subscribe(self, publisher: MetadataPublisher) -> None:
        """Add a publisher. If metadata was loaded already, it first gets everything so far as
        one update from the empty image (its local changes list every local partition)."""
        async with self._publish_lock:
            check(len(self._publishers) < PUBLISHERS_MAX, "too many metadata publishers")
            image = self._image
            if image.offset >= 0:
                empty = MetadataImage.empty()
                update = MetadataUpdate(
                    empty, image, None, local_changes_between(empty, image, self._broker_id))
                await self._publish_to(publisher, update)
            self._publishers.append(publisher)

    async def wait_for_offset(self, offset: int, timeout_ms: int) -> bool:
        """Wait until :attr:`offset` reaches ``offset``; False on timeout. Raises the fatal
        error if the listener stopped on one."""
        image = await self.wait_for_image(lambda image: image.offset >= offset, timeout_ms)
        return image is not None

    async def wait_for_image(
        self, predicate: Callable[[MetadataImage], bool], timeout_ms: int
    ) -> MetadataImage | None:
        """The first published image (the current one included) for which ``predicate`` holds,
        or None after ``timeout_ms``."""
        if timeout_ms < 0:
            raise InvariantViolation(f"timeout {timeout_ms} ms is negative")

        def ready() -> bool:
            return self._failure is not None or predicate(self._image)

        async with self._progress:
            try:
                await asyncio.wait_for(self._progress.wait_for(ready), timeout_ms / 1000)
            except TimeoutError:
                return None
        if self._failure is not None:
            raise self._failure
        return self._image

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        check(self._task is None, "the listener runs once")
        self._task = asyncio.create_task(self._run(), name=f"metadata-listener-{self._broker_id}")

    async def stop(self) -> None:
        """Stop following (idempotent). Does not close the shared controller client."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the stream loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        voter = self._client.preferred_voter()
        try:
            while True:
                try:
                    await self._follow(voter)
                except _SwitchVoter as switch:
                    log.info("broker %d: metadata stream from controller %d ends: %s",
                             self._broker_id, voter, switch.why)
                    voter = switch.voter_id
                    if switch.pause:
                        await self._pause()
        except TidelogError as error:
            await self._fail(error)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug: say so loudly and stop, rather than spin
            log.exception("broker %d: metadata listener failed", self._broker_id)
            await self._fail(TidelogError(f"metadata listener failed: {error!r}"))

    async def _follow(self, voter: int) -> None:
        """Stream from ``voter`` until something ends it (always by raising _SwitchVoter)."""
        request = controller_pb2.FetchMetadataRequest(
            cluster_id=self._cluster_id, broker_id=self._broker_id,
            from_offset=self._loader.next_offset)
        self.stats.streams_opened += 1
        self.stats.stream_voters = [*self.stats.stream_voters[-9:], voter]
        call = self._client.stub(voter).FetchMetadata(request)
        try:
            while True:
                message = await self._read(call, voter)
                try:
                    update = self._load(message, voter)
                except MetadataGapError as gap:
                    self.stats.gaps += 1
                    self._gaps_in_a_row += 1
                    log.warning("broker %d: %s from controller %d; re-requesting from %d",
                                self._broker_id, gap, voter, gap.expected_offset)
                    if self._gaps_in_a_row >= GAPS_IN_A_ROW_MAX:
                        self._gaps_in_a_row = 0
                        raise _SwitchVoter(self._client.next_voter(voter), str(gap),
                                           pause=True) from None
                    raise _SwitchVoter(voter, str(gap), pause=False) from None
                # The stream works: failures and gaps so far are behind us.
                self._pauses = 0
                self._gaps_in_a_row = 0
                if update is not None:
                    await self._publish(update)
                self._maybe_prefer_active(voter)
        finally:
            call.cancel()

    async def _read(self, call: Any, voter: int) -> controller_pb2.FetchMetadataResponse:
        """The next message; while waiting, give up on a silent controller, and move to the
        active one as soon as it is known to be another (a hung controller may hold this
        stream open and silent while the rest of the quorum has moved on)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._idle_timeout_s
        read = asyncio.ensure_future(call.read())
        try:
            while not read.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise self._abandon(
                        voter, f"no message for {self._idle_timeout_s * 1000:.0f} ms",
                        pause=False)
                await asyncio.wait({read}, timeout=min(remaining, ACTIVE_CHECK_MS / 1000))
                if not read.done():
                    self._maybe_prefer_active(voter)
        finally:
            if not read.done():
                read.cancel()
        try:
            message = read.result()
        except grpc.aio.AioRpcError as error:
            raise self._abandon(voter, f"{error.code().name}: {error.details()}",
                                pause=True) from None
        if message is grpc.aio.EOF:
            raise self._abandon(voter, "the controller ended the stream", pause=True)
        assert isinstance(message, controller_pb2.FetchMetadataResponse)
        self.stats.messages += 1
        return message

    def _load(
        self, message: controller_pb2.FetchMetadataResponse, voter: int
    ) -> MetadataUpdate | None:
        try:
            return self._loader.load(message)
        except NotControllerError as error:
            hint = message.controller.controller_id
            target = hint if hint in self._client.voter_ids and hint != voter else None
            raise _SwitchVoter(target if target is not None else self._client.next_voter(voter),
                               str(error), pause=target is None) from None
        except InconsistentClusterIdError:
            raise
        except TidelogError as error:
            if error.retriable:
                raise _SwitchVoter(self._client.next_voter(voter), str(error),
                                   pause=True) from None
            raise

    def _abandon(self, voter: int, why: str, *, pause: bool) -> _SwitchVoter:
        """Leave a controller that stopped answering; it is no longer assumed active either,
        so that neither this loop nor the next call goes straight back to it."""
        self._client.forget_active(voter, why=f"metadata stream: {why}")
        return _SwitchVoter(self._client.next_voter(voter), why, pause=pause)

    def _maybe_prefer_active(self, voter: int) -> None:
        active = self._client.active_id
        if active is not None and active != voter:
            raise _SwitchVoter(active, f"controller {active} is active; following it", pause=False)

    async def _pause(self) -> None:
        self._pauses += 1
        cap_ms = min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** min(self._pauses - 1, 16))
        await asyncio.sleep((cap_ms / 2 + self._rng.random() * cap_ms / 2) / 1000)

    # --- publishing ----------------------------------------------------------------------------

    async def _publish(self, update: MetadataUpdate) -> None:
        self.stats.updates += 1
        self.stats.snapshots += int(update.is_snapshot)
        self.stats.records += update.image.offset - update.previous_image.offset
        self.stats.ignored_records += len(update.ignored)
        for reason in update.ignored:
            log.warning("broker %d: metadata record was a no-op at replay: %s",
                        self._broker_id, reason)
        async with self._publish_lock:
            for publisher in list(self._publishers):
                await self._publish_to(publisher, update)
            async with self._progress:
                self._image = update.image
                self._has_caught_up = self._has_caught_up or self.is_caught_up
                self._progress.notify_all()

    async def _publish_to(self, publisher: MetadataPublisher, update: MetadataUpdate) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            result = publisher.on_metadata_update(update, update.image)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            # The image moves on regardless (Kafka's loader does the same): one publisher's bug
            # must not stop the broker from following leadership changes.
            self.stats.publisher_errors += 1
            log.exception("broker %d: metadata publisher %r failed at offset %d",
                          self._broker_id, publisher, update.image.offset)
        elapsed_ms = (loop.time() - started) * 1000
        if elapsed_ms > PUBLISH_SLOW_MS:
            log.warning("broker %d: metadata publisher %r took %.0f ms at offset %d",
                        self._broker_id, publisher, elapsed_ms, update.image.offset)

    async def _fail(self, error: TidelogError) -> None:
        log.error("broker %d: metadata listener stopped: %s", self._broker_id, error)
        self._failure = error
        async with self._progress:
            self._progress.notify_all()
        if self._on_fatal is not None:
            self._on_fatal(error)
