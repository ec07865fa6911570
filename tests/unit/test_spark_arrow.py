"""tidelog.spark.arrow: consumed records into Spark's Kafka schema as Arrow, sink rows out of it.

What it checks, without Spark or a cluster: a batch of records becomes an Arrow batch whose
schema is the source's (with and without headers) and whose columns hold the records' keys,
values, offsets, timestamps (ms → µs UTC), timestamp types and headers; the sink's column checks
give Spark's message for each missing or mistyped column; a written batch is grouped by topic
and partition with rows in order, strings UTF-8 encoded, null values kept as tombstones, the
topic option winning over the column, and a null topic refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pytest

from tidelog.spark.arrow import (
    SparkSchemaError,
    arrow_schema,
    check_sink_schema,
    records_to_arrow,
    sink_groups,
    source_schema_ddl,
)


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    offset: int
    timestamp_ms: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


RECORDS = [Record(b"k0", b"v0", 7, 1_700_000_000_123, 0, (("h", b"x"), ("n", None))),
           Record(None, None, 8, 1_700_000_000_456, 1)]


def test_records_become_an_arrow_batch_in_the_source_schema() -> None:
    batch = records_to_arrow(RECORDS, topic="t", partition=3, include_headers=True)
    assert batch.schema == arrow_schema(True)
    rows = batch.to_pylist()
    assert [(r["key"], r["value"], r["topic"], r["partition"], r["offset"], r["timestampType"])
            for r in rows] == [(b"k0", b"v0", "t", 3, 7, 0), (None, None, "t", 3, 8, 1)]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == \
        [1_700_000_000_123_000, 1_700_000_000_456_000]
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[1]["headers"] == []
    plain = records_to_arrow(RECORDS, topic="t", partition=3, include_headers=False)
    assert plain.schema == arrow_schema(False) and "headers" not in plain.schema.names


def test_the_ddl_and_the_arrow_schema_name_the_same_columns() -> None:
    for headers in (False, True):
        # Top-level names only: a struct's fields are written "key: string".
        names = re.findall(r"(?:^|, )(\w+) ", source_schema_ddl(headers))
        assert arrow_schema(headers).names == names


@pytest.mark.parametrize(("fields", "topic", "column", "message"), [
    ([("key", "string")], "t", "value", "Required attribute 'value' not found"),
    ([("value", "int")], "t", "value", "value attribute type must be a string or binary"),
    ([("value", "string"), ("key", "int")], "t", "key", "key attribute type must be"),
    ([("value", "binary")], None, "topic", "topic option required when no 'topic' attribute"),
    ([("value", "binary"), ("topic", "binary")], None, "topic", "topic attribute type must"),
    ([("value", "binary"), ("partition", "bigint")], "t", "partition",
     "partition attribute type must be an int"),
    ([("value", "binary"), ("headers", "array<string>")], "t", "headers",
     "headers attribute type must be an array of struct<key: string, value: binary>"),
])
def test_each_bad_sink_column_gets_sparks_message(fields: list[tuple[str, str]],
                                                  topic: str | None, column: str,
                                                  message: str) -> None:
    with pytest.raises(SparkSchemaError, match=message) as failure:
        check_sink_schema(fields, topic_option=topic)
    assert failure.value.option == column


def test_good_sink_columns_are_accepted_in_any_case() -> None:
    found = check_sink_schema([("VALUE", "string"), ("Key", "binary"), ("topic", "string"),
                               ("partition", "int"),
                               ("headers", "array<struct<key:string,value:binary>>"),
                               ("other", "double")], topic_option=None)
    assert (found.topic, found.key, found.partition, found.headers) == (True, True, True, True)


def test_one_topic_and_no_partition_column_is_one_group_as_is() -> None:
    batch = pa.RecordBatch.from_pydict({"key": ["a", None], "value": ["1", None]})
    [group] = sink_groups(batch, topic_option="out")
    assert (group.topic, group.partition, group.values, group.keys, group.headers) == \
        ("out", None, [b"1", None], [b"a", None], None)


def test_rows_are_grouped_by_topic_and_partition_in_order() -> None:
    batch = pa.RecordBatch.from_pydict({
        "topic": ["a", "b", "a", "a"], "partition": [0, 0, 1, 0],
        "value": [b"1", b"2", b"3", b"4"],
        "headers": [[{"key": "h", "value": b"x"}], None, [], None]})
    groups = sink_groups(batch, topic_option=None)
    assert [(g.topic, g.partition, g.values, g.headers) for g in groups] == [
        ("a", 0, [b"1", b"4"], [(("h", b"x"),), ()]), ("b", 0, [b"2"], [()]),
        ("a", 1, [b"3"], [()])]
    assert all(g.keys is None for g in groups)
    # The topic option wins over the column.
    assert {g.topic for g in sink_groups(batch, topic_option="x")} == {"x"}


def test_a_null_topic_is_refused() -> None:
    batch = pa.RecordBatch.from_pydict({"topic": ["a", None], "value": [b"1", b"2"]})
    with pytest.raises(SparkSchemaError, match="null topic present in the data"):
        sink_groups(batch, topic_option=None)


def test_offsets_with_gaps_and_empty_batches() -> None:
    # A compacted log's records have gaps between offsets; each keeps its own.
    gappy = [Record(b"k", b"v", 3, 1_000, 0), Record(b"k", b"w", 9, 2_000, 0)]
    batch = records_to_arrow(gappy, topic="t", partition=0, include_headers=False)
    assert batch.column("offset").to_pylist() == [3, 9]
    empty = records_to_arrow([], topic="t", partition=0, include_headers=True)
    assert empty.num_rows == 0 and empty.schema == arrow_schema(True)
