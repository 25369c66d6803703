"""Fleet-wide analysis of many captures on Apache Spark.

Layout (each module imports only the ones above it):

* ``typemap``: the Spark and Arrow schemas, built from ``dissector.schema.COLUMNS``.
* ``decode``: what runs inside a Spark task: one capture's bytes -> Arrow batches of
  pair rows plus one trailer row describing the capture. Needs pyarrow, not pyspark.
* ``read``: ``load(spark, paths)`` -> a ``Fleet`` (pairs and per-capture status).
* ``analytics``: the partitions, groups and versions tables, run by the pandas
  functions themselves inside the tasks (one pass over each capture for all three).
* ``aggregate``: the fleet summary tables (latency percentiles, errors, unanswered
  requests, throughput), plain DataFrame -> DataFrame functions.

``dissector.spark.job`` wires these into the ``kafka-dissector spark`` command.
"""

from __future__ import annotations

__all__ = ["CAPTURE_FAILED", "Fleet", "load"]

from dissector.spark.read import Fleet, load
from dissector.spark.tasks import CAPTURE_FAILED
