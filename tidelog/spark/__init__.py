"""Tidelog for Spark: a Kafka-like source and sink for PySpark (Spark 4's Python Data Source API).

>>> from tidelog.spark import register
>>> register(spark)                     # format("tidelog") is now known to this session
>>> df = (spark.read.format("tidelog")
...       .option("bootstrap.servers", "127.0.0.1:9092")
...       .option("subscribe", "events").load())

The pure core imports no pyspark and does no I/O:

* :mod:`tidelog.spark.options` — the source's and sink's options, named and checked as Spark's
  Kafka source and sink do (without the ``kafka.`` prefix, case-insensitive);
* :mod:`tidelog.spark.offsets` — Spark's per-topic-partition offsets JSON (a streaming query's
  checkpointed offsets);
* :mod:`tidelog.spark.ranges` — offset ranges, ``minPartitions`` splitting and
  ``maxOffsetsPerTrigger`` rate limiting, as Spark computes them;
* :mod:`tidelog.spark.planner` — batch and micro-batch read plans from the partitions' log start
  offsets and high watermarks;
* :mod:`tidelog.spark.arrow` — records into Arrow batches in Spark's Kafka schema, and the
  sink's column checks.

Around it, :mod:`tidelog.spark.cluster` does the I/O through the public client, and
:mod:`tidelog.spark.datasource` (the only module that imports pyspark) is the DataSource shell.
Installed with the ``spark`` extra: ``pip install 'tidelog[spark]'``. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``tidelog`` format with a SparkSession. pyspark is imported here, not when
    ``tidelog.spark`` is, so the pure modules work without it."""
    from tidelog.spark.datasource import register as register_data_source

    register_data_source(spark)
