"""A fleet-wide run on Apache Spark: the session, the job (load, summarise, write) and
its report. The ``kafka-dissector spark`` command (``dissector.cli.spark``) drives it."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dissector.options import Options
from dissector.spark.aggregate import DEFAULT_TOP, DEFAULT_WINDOW, summaries
from dissector.spark.analytics import ANALYTICS_TABLES, load_analytics
from dissector.spark.read import (
    DEFAULT_GLOB,
    ONE_FILE_PER_TASK_CONF,
    Fleet,
    load,
)
from dissector.spark.write import python_writable, write_pairs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"
DEFAULT_MASTER = "local[*]"

# Settings for a single-machine run: no web UI, few shuffle partitions (the summary
# tables are small), the driver on loopback so nothing listens on other interfaces.
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.sql.shuffle.partitions": "4",
}

# For every run: UTC output (the contract's times are UTC instants; windows start on
# UTC boundaries), Parquet times as UTC-adjusted microseconds like ``analyze -o``'s
# (Spark's default, INT96, reads back as naive local times), one capture per task.
JOB_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    **ONE_FILE_PER_TASK_CONF,
}

# Tables with the pairs' columns: written by the tasks with frame's Parquet writer.
PAIRS_SHAPED = ("pairs", "unanswered_requests")
# Tables that keep one file per capture task (the others are small: one file).
PER_TASK = (*PAIRS_SHAPED, *ANALYTICS_TABLES)

PYTHON_ENV = "PYSPARK_PYTHON"
PYTHON_CONF = "spark.pyspark.python"
LOG_LEVEL_QUIET = "ERROR"

# log4j2 for a driver JVM started by us: errors only, from the first line on
# (setLogLevel comes too late for the start-up warnings). The root stays at WARN and
# the appender drops what is below ERROR: PySpark's JVM counts as a shell, and Spark
# announces a "default log level" (WARN) whenever the root's level differs from it.
# A failed task's stack trace is left out too (logged again by the executor): the
# command reports the failure itself; --verbose shows it all.
_QUIET_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
"""


def launched_by_spark_submit() -> bool:
    """True in a driver started by spark-submit: PySpark then joins the JVM it was given."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_conf(master: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings for ``master``; ``extra`` wins over ours."""
    conf = dict(JOB_CONF)
    if master is not None and master.startswith("local"):
        conf.update(LOCAL_CONF)
    conf.update(extra or {})
    return conf


def worker_python(master: str | None, conf: Mapping[str, str]) -> str | None:
    """The interpreter Python workers should run, when ours must say it; else None.

    PySpark starts workers with ``$PYSPARK_PYTHON``, else ``python3`` from the PATH: for
    a driver run from a virtualenv that is not activated (or installed with pipx) that is
    another Python, without pyarrow or this package. So ``spark.pyspark.python``, which
    only spark-submit honours, is honoured here too, and a local master defaults to the
    driver's own interpreter. A cluster keeps its own default (see docs/spark.md).
    """
    if launched_by_spark_submit() or os.environ.get(PYTHON_ENV):
        return None  # the user's choice, or spark-submit's from its settings, stands
    if conf.get(PYTHON_CONF):
        return conf[PYTHON_CONF]
    if master is not None and master.startswith("local"):
        return sys.executable
    return None


@contextmanager
def _quiet_log4j2(conf: dict[str, str]) -> Iterator[None]:
    """Point the driver JVM we are about to start at a quiet log4j2 configuration."""
    key = "spark.driver.extraJavaOptions"
    if key in conf or launched_by_spark_submit():
        yield  # the user's JVM options win; setLogLevel still quiets the rest
        return
    with tempfile.TemporaryDirectory(prefix="kafka-dissector-") as tmp:
        path = os.path.join(tmp, "log4j2.properties")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(_QUIET_LOG4J2)
        conf[key] = f"-Dlog4j2.configurationFile=file:{path}"
        yield  # the JVM reads the file at start-up only


def build_session(
    master: str | None = None,
    *,
    app_name: str = "kafka-dissector",
    conf: Mapping[str, str] | None = None,
    quiet: bool = False,
) -> SparkSession:
    """A SparkSession; ``master`` None keeps spark-submit's master (else local[*]).

    ``quiet``: JVM log at ERROR and no console progress bar (the command's default).
    """
    from pyspark.sql import SparkSession

    if master is None and not launched_by_spark_submit():
        master = DEFAULT_MASTER
    settings = session_conf(master, conf)
    python = worker_python(master, settings)
    if python is not None:
        os.environ[PYTHON_ENV] = python  # read once, when the SparkContext starts
    if quiet:
        settings.setdefault("spark.ui.showConsoleProgress", "false")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    with _quiet_log4j2(settings) if quiet else nullcontext():
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    if quiet:
        session.sparkContext.setLogLevel(LOG_LEVEL_QUIET)
    return session


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def worker_import_hint(exc: BaseException) -> str | None:
    """One line for a job that failed because Python workers lack a module, else None."""
    match = _MISSING_MODULE.search(str(exc))
    if match is None:
        return None
    python = os.environ.get(PYTHON_ENV) or "python3"
    return (
        f"Spark's Python workers ({python}) cannot import {match.group(1)!r}: run them "
        f"with a Python that has kafka-dissector installed (--conf {PYTHON_CONF}=PATH, "
        "or a packed virtualenv; see docs/spark.md)"
    )


@dataclass
class JobReport:
    captures: int = 0
    failed: int = 0
    pairs: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (capture, error)
    missing: list[str] = field(default_factory=list)  # paths skipped: matched nothing
    tables: dict[str, int] = field(default_factory=dict)  # output name -> rows
    seconds: float = 0.0


def collect_report(fleet: Fleet, max_failures: int = 20) -> JobReport:
    """Capture counts and the first failures, from the (small) captures table."""
    from pyspark.sql import functions as F

    caps = fleet.captures
    row = caps.agg(
        F.count(F.lit(1)).alias("captures"),
        F.sum(F.col("failed").cast("long")).alias("failed"),
        F.sum("pairs").alias("pairs"),
    ).first()
    report = JobReport(
        captures=int(row["captures"] or 0) if row else 0,
        failed=int(row["failed"] or 0) if row else 0,
        pairs=int(row["pairs"] or 0) if row else 0,
    )
    bad = caps.where("failed").select("capture", "error").orderBy("capture").limit(max_failures)
    report.failures = [(r["capture"], r["error"]) for r in bad.collect()]
    return report


def run_job(
    spark: SparkSession,
    paths: Iterable[str],
    out_dir: str | None,
    *,
    options: Options | None = None,
    window: str = DEFAULT_WINDOW,
    top: int = DEFAULT_TOP,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
    skip_missing: bool = False,
    mode: str = "overwrite",
    analytics: Iterable[str] = ANALYTICS_TABLES,
) -> JobReport:
    """Decode the captures once; write pairs, captures and the summaries as Parquet,
    and the ``analytics`` tables (partitions, groups, versions, lag: a second pass over
    each capture, by the full decoder; ``()`` skips it).

    ``out_dir`` None computes everything without writing (the CLI then prints).
    The pairs-shaped tables go through ``dissector.table.frame``'s Parquet writer (same
    schema and dtypes as ``analyze -o``) wherever pyarrow can write ``out_dir``.
    """
    started = time.monotonic()
    paths = list(paths)
    # Also in a session built elsewhere: Parquet times must be UTC microseconds.
    key = "spark.sql.parquet.outputTimestampType"
    spark.conf.set(key, JOB_CONF[key])
    fleet = load(
        spark,
        list(paths),
        options=options,
        recursive=recursive,
        glob=glob,
        skip_missing=skip_missing,
    )
    extra = None
    try:
        tables = {"pairs": fleet.pairs, "captures": fleet.captures}
        tables.update(summaries(fleet.pairs, window=window, top=top))
        extra = load_analytics(
            spark,
            paths,
            tuple(analytics),
            options=options,
            recursive=recursive,
            glob=glob,
            skip_missing=skip_missing,
        )
        tables.update(extra.tables)
        report = collect_report(fleet)
        report.missing = list(fleet.missing)
        ours = out_dir is not None and mode in ("overwrite", "append")
        ours = ours and python_writable(out_dir)  # type: ignore[arg-type]
        for name, df in tables.items():
            if out_dir is None:
                report.tables[name] = df.count()
                continue
            where = join_path(out_dir, name)
            if name in PAIRS_SHAPED and ours:
                write_pairs(df, where, mode=mode)
            else:
                # The pairs keep one file per capture task; the summaries are small.
                target = df if name in PER_TASK else df.coalesce(1)
                target.write.mode(mode).parquet(where)
            # Read back by Spark: counts what a reader gets, and proves Spark reads it.
            report.tables[name] = spark.read.parquet(where).count()
    finally:
        fleet.unpersist()
        if extra is not None:
            extra.unpersist()
    report.seconds = time.monotonic() - started
    return report


def join_path(base: str, name: str) -> str:
    """Join for local paths and URIs alike (``os.path.join`` would break ``s3a://``)."""
    return base.rstrip("/") + "/" + name
