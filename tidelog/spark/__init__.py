"""Tidelog for Spark: a Kafka-like source and sink for PySpark (Spark 4's Python Data Source API).

Built so far is the pure core, which imports no pyspark and does no I/O:

* :mod:`tidelog.spark.options` — the source's and sink's options, named and checked as Spark's
  Kafka source and sink do (without the ``kafka.`` prefix, case-insensitive);
* :mod:`tidelog.spark.offsets` — Spark's per-topic-partition offsets JSON (a streaming query's
  checkpointed offsets);
* :mod:`tidelog.spark.ranges` — offset ranges, ``minPartitions`` splitting and
  ``maxOffsetsPerTrigger`` rate limiting, as Spark computes them;
* :mod:`tidelog.spark.planner` — batch and micro-batch read plans from the partitions' log start
  offsets and high watermarks.

The DataSource shell (``tidelog/spark/datasource.py``, the only module that may import pyspark)
comes next; see docs/spark.md.
"""
