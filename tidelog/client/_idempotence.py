"""Sequence numbers of an idempotent producer (Kafka's TransactionManager, minus transactions).

Every batch of an idempotent producer carries (producer id, epoch, base sequence); the partition
leader remembers the last five batches per producer, answers a retried duplicate with the offset
it gave the first time, and refuses a gap. Retries are therefore safe as long as a retried batch
is sent with the same sequence and no newer batch of the partition overtakes it. The rules:

* A new batch gets the partition's next sequence when first drained; at most ``max_in_flight``
  batches per partition are in flight (Kafka's limit of 5 is what the leader remembers).
* A retried batch (it keeps its sequence) is sent only when nothing else of its partition is in
  flight and it is the first unacknowledged batch; the accumulator keeps retried batches in
  sequence order at the head of the queue, so everything behind waits.
* OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is not the first unacknowledged one just means an
  earlier batch is being retried: retry it too. For the first one (the leader lost our state) and
  for UNKNOWN_PRODUCER_ID, and after a sequenced batch fails for good (a gap would follow), bump
  the producer epoch (KIP-360): once nothing is in flight, InitProducerId with the current id and
  epoch, and every partition's sequences restart at 0.

Sequences are Kafka's: an int32 per partition that wraps from 2**31-1 to 0
(``DefaultRecordBatch.incrementSequence``), so a producer may send more than 2**31 records to a
partition and a batch may span the wrap (base 2**31-2 with 3 records ends at 0). Every sum and
comparison of sequences goes through :func:`increment_sequence` and :func:`sequence_before`.

Pure: the sender calls these methods from the I/O loop; nothing here does I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidelog.client.records import TopicPartition
from tidelog.invariants import check

if TYPE_CHECKING:  # _accumulator imports the sequence arithmetic from here
    from tidelog.client._accumulator import ProducerBatch

__all__ = ["SEQUENCE_MAX", "IdempotenceState", "increment_sequence", "sequence_before"]

#: Kafka's sequence is an int32: after this comes 0.
SEQUENCE_MAX = 0x7FFFFFFF
_SEQUENCE_SPACE = SEQUENCE_MAX + 1
#: Two sequences of one partition in flight or queued are never this far apart (5 batches of at
#: most limits.BATCH_RECORDS_MAX records), so the nearer way round the circle says which is first.
_SEQUENCE_HALF = _SEQUENCE_SPACE // 2


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past 2**31-1 to 0, exactly as Kafka's
    ``DefaultRecordBatch.incrementSequence`` (the leader checks with the same rule)."""
    if not 0 <= sequence <= SEQUENCE_MAX or not 0 <= increment <= SEQUENCE_MAX:
        raise ValueError(f"sequence {sequence} + {increment} is outside 0..{SEQUENCE_MAX}")
    if sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - sequence) - 1
    return sequence + increment


def sequence_before(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes before ``b`` of the same partition, across the wrap (serial
    number arithmetic, RFC 1982: ``b`` is less than half the circle ahead of ``a``)."""
    return 0 < (b - a) % _SEQUENCE_SPACE < _SEQUENCE_HALF


class IdempotenceState:
    """Producer id and epoch, and per-partition sequences and in-flight batches."""

    def __init__(self, *, enabled: bool, max_in_flight: int) -> None:
        if max_in_flight < 1 or (enabled and max_in_flight > 5):
            raise ValueError("max_in_flight must be 1..5 with idempotence (the leader keeps 5)")
        self.enabled = enabled
        self.max_in_flight = max_in_flight
        self.producer_id = -1
        self.producer_epoch = -1
        self.epoch_bump_needed = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self._last_acked: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, list[ProducerBatch[Any]]] = {}

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def needs_producer_id(self) -> bool:
        return self.enabled and (not self.has_producer_id or self.epoch_bump_needed)

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new id or epoch: every partition's sequences restart at 0."""
        check(producer_id >= 0 and producer_epoch >= 0,
              f"InitProducerId gave producer id {producer_id} epoch {producer_epoch}")
        check(not self.total_in_flight(),
              f"sequences reset with {self.total_in_flight()} batches in flight")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.epoch_bump_needed = False
        self._next_sequence.clear()
        self._last_acked.clear()

    def request_epoch_bump(self) -> None:
        if self.enabled and self.has_producer_id:
            self.epoch_bump_needed = True

    # ------------------------------------------------------------------ draining
    def can_send(self, batch: ProducerBatch[Any]) -> bool:
        in_flight = self._in_flight.get(batch.tp, ())
        if not self.enabled:
            return len(in_flight) < self.max_in_flight
        if self.needs_producer_id:
            return False
        if batch.has_sequence:
            return not in_flight and self.is_first_unacked(batch)
        return len(in_flight) < self.max_in_flight

    def on_drain(self, batch: ProducerBatch[Any]) -> None:
        """The batch is about to be sent: stamp it (first time) and count it in flight."""
        if self.enabled and not batch.has_sequence:
            seq = self._next_sequence.get(batch.tp, 0)
            batch.stamp(
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=seq,
            )
            self._next_sequence[batch.tp] = increment_sequence(seq, batch.record_count)
        self._in_flight.setdefault(batch.tp, []).append(batch)

    def on_response(self, batch: ProducerBatch[Any]) -> None:
        """The batch's request came back (whatever the outcome)."""
        in_flight = self._in_flight.get(batch.tp)
        if in_flight is not None and batch in in_flight:
            in_flight.remove(batch)
            if not in_flight:
                del self._in_flight[batch.tp]

    def rollback(self, batch: ProducerBatch[Any]) -> None:
        """Undo ``on_drain``'s stamp of a batch that could not be built (it was never sent); it
        is the last one stamped for its partition, so the sequence goes back to its base."""
        if self.enabled and batch.has_sequence and batch.producer_epoch == self.producer_epoch:
            after = increment_sequence(batch.base_sequence, batch.record_count)
            if self._next_sequence.get(batch.tp) == after:
                self._next_sequence[batch.tp] = batch.base_sequence
            batch.unstamp()

    def on_acked(self, batch: ProducerBatch[Any]) -> None:
        if self.enabled and batch.has_sequence and batch.producer_epoch == self.producer_epoch:
            last = self._last_acked.get(batch.tp)
            if last is None or sequence_before(last, batch.last_sequence):
                self._last_acked[batch.tp] = batch.last_sequence

    def is_first_unacked(self, batch: ProducerBatch[Any]) -> bool:
        last = self._last_acked.get(batch.tp)
        first = 0 if last is None else increment_sequence(last, 1)
        return batch.base_sequence == first

    def next_sequence(self, tp: TopicPartition) -> int:
        """The sequence the partition's next new batch gets."""
        return self._next_sequence.get(tp, 0)

    def set_sequences(self, tp: TopicPartition, *, next_sequence: int,
                      last_acked: int | None) -> None:
        """Put the partition's sequences where they would be after that many records (tests of
        the wrap start a partition just below 2**31-1 this way; nothing may be in flight)."""
        check(0 <= next_sequence <= SEQUENCE_MAX, f"next sequence {next_sequence} out of range")
        check(last_acked is None or 0 <= last_acked <= SEQUENCE_MAX,
              f"last acked sequence {last_acked} out of range")
        check(not self.in_flight(tp), f"{tp}: sequences set with batches in flight")
        self._next_sequence[tp] = next_sequence
        if last_acked is None:
            self._last_acked.pop(tp, None)
        else:
            self._last_acked[tp] = last_acked

    def in_flight(self, tp: TopicPartition) -> int:
        return len(self._in_flight.get(tp, ()))

    def total_in_flight(self) -> int:
        return sum(len(v) for v in self._in_flight.values())
