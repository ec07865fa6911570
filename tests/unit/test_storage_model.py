"""The partition log against a simple in-memory model, under random operation sequences.

A hypothesis state machine drives one PartitionLog on a real RocksDB (small segments, so rolls
and retention happen) through appends as leader, new leader epochs, HW updates, truncation,
truncation to a fresh start, log start moves, retention by size and time, and close/reopen. A
plain model -- a list of batches, the log start, HW, LEO and epoch entries -- predicts every
outcome except which segments retention removes; there the test checks the rules that must hold
(only a prefix of whole batches, only below the HW, never a batch holding the log start offset,
removed bytes reported exactly). After every step the log must equal the model and pass its own
invariants. Failing sequences shrink to a short script.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidelog.broker.storage import LogConfig, PartitionLog, Storage
from tidelog.data_dir import format_data_dir
from tidelog.record_batch import NewRecord, build_batch, parse_batch, validate_batch

CLUSTER = "model-cluster"
TOPIC = bytes(range(16))
#: About three small batches per segment; a new segment at least every 1.5 s of append time.
CONFIG = LogConfig(segment_bytes=200, segment_ms=1_500)


@dataclass
class StoredBatch:
    base_offset: int
    next_offset: int
    data: bytes


@dataclass
class Model:
    batches: list[StoredBatch] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)

    def assign_epoch(self, epoch: int, start: int) -> None:
        if self.epochs and self.epochs[-1][0] == epoch:
            return
        if self.epochs and self.epochs[-1][1] == start:
            self.epochs.pop()
        self.epochs.append((epoch, start))

    def start_at(self, offset: int) -> None:
        self.batches, self.epochs = [], []
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset

    def cut(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.base_offset < offset]
        self.epochs = [e for e in self.epochs if e[1] < offset]
        self.log_end_offset = offset
        self.high_watermark = min(self.high_watermark, offset)

    def advance_start(self, offset: int) -> None:
        before = [e for e in self.epochs if e[1] <= offset]
        after = [e for e in self.epochs if e[1] > offset]
        self.epochs = ([(before[-1][0], offset)] if before else []) + after
        self.log_start_offset = offset

    def visible(self) -> list[bytes]:
        return [b.data for b in self.batches if b.next_offset > self.log_start_offset]


class PartitionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tidelog-model-"))
        format_data_dir(self.dir, CLUSTER, 0)
        self.storage = Storage.open(self.dir, cluster_id=CLUSTER, node_id=0)
        self.log: PartitionLog = self.storage.get_or_create_log(TOPIC, 0, config=CONFIG)
        self.model = Model()
        self.epoch = 0
        self.now_ms = 10_000

    def teardown(self) -> None:
        self.storage.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- operations ------------------------------------------------------------------------

    @rule(count=st.integers(1, 4), new_epoch=st.booleans(), elapsed_ms=st.integers(0, 700))
    def append_as_leader(self, count: int, new_epoch: bool, elapsed_ms: int) -> None:
        self.epoch += new_epoch
        self.now_ms += elapsed_ms
        records = [NewRecord(None, b"r%d" % i, timestamp_ms=self.now_ms) for i in range(count)]
        batch = validate_batch(build_batch(records, now_ms=self.now_ms))
        info = self.log.append_as_leader(batch, leader_epoch=self.epoch, now_ms=self.now_ms)
        m = self.model
        assert info.base_offset == m.log_end_offset
        data = self.log.read(info.base_offset, 1).batches[0]
        assert parse_batch(data).partition_leader_epoch == self.epoch
        m.batches.append(StoredBatch(info.base_offset, info.last_offset + 1, data))
        m.assign_epoch(self.epoch, info.base_offset)
        m.log_end_offset = info.last_offset + 1

    @rule()
    def become_leader(self) -> None:
        self.epoch += 1
        assert self.log.maybe_assign_epoch_start_offset(self.epoch)
        self.model.assign_epoch(self.epoch, self.model.log_end_offset)

    @rule(hw=st.integers(-2, 60))
    def update_high_watermark(self, hw: int) -> None:
        m = self.model
        m.high_watermark = min(max(hw, m.log_start_offset), m.log_end_offset)
        assert self.log.update_high_watermark(hw) == m.high_watermark

    @rule(back=st.integers(0, 12))
    def truncate_to(self, back: int) -> None:
        m = self.model
        offset = max(0, m.log_end_offset - back)
        new_leo = self.log.truncate_to(offset)
        if offset >= m.log_end_offset:
            assert new_leo == m.log_end_offset
            # An epoch entry at the LEO holds no data: Kafka's truncateTo drops it.
            m.epochs = [e for e in m.epochs if e[1] < m.log_end_offset]
        elif offset <= m.log_start_offset:
            m.start_at(offset)
        else:
            holder = next(b for b in m.batches if b.base_offset <= offset < b.next_offset)
            if holder.base_offset < m.log_start_offset:
                m.start_at(m.log_start_offset)
            else:
                m.cut(holder.base_offset)
        assert new_leo == m.log_end_offset

    @rule(ahead=st.integers(0, 5))
    def truncate_fully_and_start_at(self, ahead: int) -> None:
        offset = self.model.log_end_offset + ahead
        self.log.truncate_fully_and_start_at(offset)
        self.model.start_at(offset)

    @precondition(lambda self: self.model.high_watermark > self.model.log_start_offset)
    @rule(data=st.data())
    def increment_log_start_offset(self, data: st.DataObject) -> None:
        m = self.model
        offset = data.draw(st.integers(m.log_start_offset + 1, m.high_watermark))
        assert self.log.maybe_increment_log_start_offset(offset)
        before = list(m.batches)
        m.advance_start(offset)
        self._check_removed_prefix(before, removed_bytes=None)

    @rule(retention_bytes=st.integers(-1, 600), retention_ms=st.integers(-1, 3_000),
          elapsed_ms=st.integers(0, 3_000))
    def enforce_retention(self, retention_bytes: int, retention_ms: int, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        m = self.model
        old_start = m.log_start_offset
        removed = self.log.enforce_retention(
            self.now_ms, retention_ms=retention_ms, retention_bytes=retention_bytes
        )
        new_start = self.log.log_start_offset
        assert old_start <= new_start <= m.high_watermark
        before = list(m.batches)
        if new_start != old_start:
            m.advance_start(new_start)
        self._check_removed_prefix(before, removed_bytes=removed)

    @rule()
    def reopen(self) -> None:
        self.storage.close()
        self.storage = Storage.open(self.dir, cluster_id=CLUSTER, node_id=0)
        self.log = self.storage.log(TOPIC, 0)
        self.log.config = CONFIG

    def _check_removed_prefix(self, before: list[StoredBatch], removed_bytes: int | None) -> None:
        """What the log dropped is a prefix of whole batches below the HW, none holding the log
        start offset; the model keeps the rest."""
        m = self.model
        stored = [s for s in self.log.segments]
        first_kept = stored[0].base_offset if stored else m.log_end_offset
        kept = [b for b in before if b.base_offset >= first_kept]
        dropped = before[: len(before) - len(kept)]
        assert all(b.next_offset <= m.high_watermark for b in dropped)
        assert all(b.next_offset <= m.log_start_offset for b in dropped)
        if removed_bytes is not None:
            assert removed_bytes == sum(len(b.data) for b in dropped)
        m.batches = kept

    # --- the log equals the model ----------------------------------------------------------

    @invariant()
    def log_matches_model(self) -> None:
        log, m = self.log, self.model
        log.check_invariants()
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
            m.log_start_offset, m.high_watermark, m.log_end_offset)
        assert log.epoch_entries == m.epochs
        assert log.size_bytes == sum(len(b.data) for b in m.batches)
        got = log.read(m.log_start_offset, 1 << 30).batches
        assert got == m.visible()
        if m.epochs:
            assert log.end_offset_for_epoch(m.epochs[-1][0]) == (m.epochs[-1][0],
                                                                 m.log_end_offset)


PartitionLogMachine.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPartitionLogModel = PartitionLogMachine.TestCase
