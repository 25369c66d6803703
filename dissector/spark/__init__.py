"""Fleet-wide analysis of many captures on Apache Spark.

Layout (each module imports only the ones above it):

* ``typemap``: the Spark and Arrow schemas, built from ``dissector.schema.COLUMNS``.
* ``analytics``: the partitions, groups and versions tables' contracts, and their rows
  for one capture (the pandas functions themselves, run inside the task).
* ``tasks``: what runs inside a Spark task: a unit of capture files -> the core's
  Arrow batches of pairs (and the analytics tables), written to Parquet by the task or
  handed to Spark, plus one trailer row per capture file. Needs pyarrow, not pyspark.
* ``keylogs``: TLS key logs on Hadoop paths, read on the driver and shipped to the
  tasks as text (``dissector.tls.is_uri`` tells them from local files).
* ``read``: listing and planning on the driver; ``load(spark, paths)`` -> a ``Fleet``
  (pairs, per-capture status and analytics tables, held by Spark).
* ``aggregate``: the fleet summary tables (latency percentiles, errors, unanswered
  requests, throughput), plain DataFrame -> DataFrame functions.

``dissector.spark.job`` wires these into the ``kafka-dissector spark`` command;
``daemon`` is the Python workers' daemon the job names to Spark (standard library only).

The names below are imported on first use: the workers' daemon imports this package
before it forks, and must not start the threads pyarrow starts when imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector.lazy import lazy_attributes

if TYPE_CHECKING:
    from dissector.spark.read import Fleet, load
    from dissector.spark.tasks import CAPTURE_FAILED

__getattr__ = lazy_attributes(
    __name__, {"Fleet": "read", "load": "read", "CAPTURE_FAILED": "tasks"}, globals()
)

__all__ = ["CAPTURE_FAILED", "Fleet", "load"]
