"""The Tidelog data source for PySpark: ``spark.read/readStream.format("tidelog")`` and
``df.write/writeStream.format("tidelog")``, as Spark's Kafka source and sink.

The only module of Tidelog that imports pyspark. It is a thin shell over the pure core: options
are parsed by :mod:`tidelog.spark.options`, reads are planned by :mod:`tidelog.spark.planner`,
and the I/O is :mod:`tidelog.spark.cluster` (a ``Consumer`` per input partition, an idempotent
``Producer`` per write task, ``Admin`` lookups on the driver). Every class here is pickled to
Spark's Python workers, so none holds a client: each opens what it needs inside the method that
runs on the worker, and the streaming reader's driver-side ``Admin`` is left out of its pickle.

>>> from tidelog.spark import register
>>> register(spark)
>>> spark.read.format("tidelog").option("bootstrap.servers", "127.0.0.1:9092") \\
...     .option("subscribe", "events").load()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tidelog.client import Admin
from tidelog.spark import planner
from tidelog.spark.arrow import check_sink_schema, source_schema_ddl
from tidelog.spark.cluster import (
    look_up_partitions,
    look_up_timestamps,
    read_range,
    write_batches,
)
from tidelog.spark.offsets import (
    SparkOptionError,
    TopicPartition,
    offsets_from_dict,
    offsets_to_dict,
)
from tidelog.spark.options import (
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
    security_kwargs,
)
from tidelog.spark.ranges import InputRange

__all__ = ["TidelogDataSource", "register"]

log = logging.getLogger("tidelog.spark")


def register(spark: SparkSession) -> None:
    """Make ``format("tidelog")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(TidelogDataSource)


class TidelogDataSource(DataSource):
    """Format ``tidelog``: Spark's Kafka source and sink for a Tidelog cluster."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> str:
        # Spark asks for the schema at load(), before it knows whether the query is a batch or a
        # streaming one: options fail here when they are wrong for both (an unknown name, a
        # malformed value), and the rest when the query is planned (reader, streamReader).
        options = dict(self.options)
        try:
            parsed = parse_source_options(options, streaming=False)
        except SparkOptionError as batch_error:
            try:
                parsed = parse_source_options(options, streaming=True)
            except SparkOptionError:
                raise batch_error from None
        return source_schema_ddl(parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(dict(self.options), streaming=False)
        for warning in options.warnings:
            log.warning("%s", warning)
        return TidelogBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TidelogStreamReader(parse_source_options(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            # Spark's Kafka sink refuses it too: a log is appended to, never replaced.
            raise SparkOptionError("mode", "Save mode Overwrite not allowed for Tidelog. "
                                   "Allowed save modes are Append and ErrorIfExists (default).")
        return TidelogBatchWriter(_sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return TidelogStreamWriter(_sink_options(self.options, schema))


def _sink_options(raw: Any, schema: StructType) -> SinkOptions:
    options = parse_sink_options(dict(raw))
    check_sink_schema([(f.name, f.dataType.simpleString()) for f in schema.fields],
                      topic_option=options.topic)
    return options


def _input_partitions(plan: planner.ReadPlan) -> list[InputPartition]:
    """One Spark input partition per offset range: its ``value`` is the InputRange (plain
    values, pickled to the worker as they are)."""
    for note in (*plan.data_loss, *plan.warnings):
        log.warning("%s", note)
    return [InputPartition(piece) for piece in plan.ranges]


def _read(partition: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    piece: InputRange | None = partition.value
    if piece is not None:
        yield from read_range(piece, options)


class TidelogBatchReader(DataSourceReader):
    """A batch read: planned on the driver from the partitions' offsets now."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        with Admin(options.bootstrap_servers, client_id="tidelog-spark-driver",
                   **security_kwargs(options.security)) as admin:
            infos = look_up_partitions(admin, options)
            start_ts = look_up_timestamps(admin, options,
                                          planner.timestamps_to_look_up(options.starting, infos))
            end_ts = look_up_timestamps(admin, options,
                                        planner.timestamps_to_look_up(options.ending, infos))
        plan = planner.plan_batch(options, infos, start_timestamp_offsets=start_ts,
                                  end_timestamp_offsets=end_ts)
        # Spark wants at least one input partition; an empty read gets one that reads nothing.
        return _input_partitions(plan) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read: offsets are Spark's per-partition JSON, kept in the checkpoint.
    Runs on the driver (Spark's streaming source runner) except ``read``, which runs on
    workers from a pickle without the driver's Admin."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Admin | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = _now_ms()
        # What latestOffset last learned, for the partitions(start, end) call Spark makes next
        # for the same micro-batch: one lookup per batch, not two. None after a restart, when
        # Spark re-plans a checkpointed batch without asking latestOffset first.
        self._latest_infos: dict[TopicPartition, planner.PartitionInfo] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.options.bootstrap_servers, client_id="tidelog-spark-driver",
                                **security_kwargs(self.options.security))
        return self._admin

    def _partitions(self) -> dict[TopicPartition, planner.PartitionInfo]:
        return look_up_partitions(self._admin_client(), self.options)

    def initialOffset(self) -> dict[str, Any]:
        infos = self._partitions()
        start_ts = look_up_timestamps(self._admin_client(), self.options,
                                      planner.timestamps_to_look_up(self.options.starting, infos))
        start = planner.initial_offsets(self.options, infos, start_timestamp_offsets=start_ts)
        for note in start.data_loss:
            log.warning("%s", note)
        return offsets_to_dict(start.offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # The target of an availableNow run: the high watermarks now; no batch goes past them.
        self._available_now = {tp: info.high_watermark
                               for tp, info in self._partitions().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_dict(start)
        infos = self._latest_infos = self._partitions()
        max_rows = _max_rows(limit)
        end = planner.next_end_offsets(self.options, begin, infos, max_rows=max_rows,
                                       available_now=self._available_now)
        min_rows = self.options.min_offsets_per_trigger
        if min_rows is not None and self._available_now is None and planner.delay_batch(
                min_rows, begin, end, now_ms=_now_ms(), last_trigger_ms=self._last_trigger_ms,
                max_trigger_delay_ms=self.options.max_trigger_delay_ms):
            return start
        if end != begin:
            self._last_trigger_ms = _now_ms()
        return offsets_to_dict(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        infos, self._latest_infos = self._latest_infos, None
        plan = planner.plan_micro_batch(self.options, offsets_from_dict(start),
                                        offsets_from_dict(end), infos or self._partitions())
        return _input_partitions(plan)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to do: the query's offsets live in Spark's checkpoint, not in a group.
        pass

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def _max_rows(limit: ReadLimit) -> int | None:
    if isinstance(limit, ReadMaxRows):
        # Spark 4.3's dataclass field is max_rows (its docstrings say maxRows).
        return int(limit.max_rows)
    return None


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class WrittenRecords(WriterCommitMessage):
    """A write task's report: how many records it produced (acknowledged at acks=all)."""

    records: int


class TidelogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("tidelog")``: each task produces its rows, acks=all, idempotent."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return WrittenRecords(write_batches(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("Tidelog sink: %d records written", _count(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records of the tasks that succeeded stay in the log: the sink is at-least-once.
        log.warning("Tidelog sink: write aborted after %d records were written",
                    _count(messages))


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("tidelog")``: as the batch writer, per micro-batch."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return WrittenRecords(write_batches(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("Tidelog sink: batch %d, %d records written", batchId, _count(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("Tidelog sink: batch %d aborted after %d records were written", batchId,
                    _count(messages))


def _count(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, WrittenRecords))
