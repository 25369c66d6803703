"""``kafka-dissector spark``: fleet-wide analysis of many captures on Apache Spark.

Runs the same way locally (``--master local[*]``) and on a cluster::

    spark-submit --master yarn ... dissector/spark_job.py hdfs:///captures/ -o hdfs:///out

(see docs/spark.md). Absolute imports, so the file also works as spark-submit's
main script, outside its package.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Run as spark-submit's main script: Python put this file's folder (dissector/) first
    # on the import path, where its modules could shadow top-level ones of the same name.
    # The package itself comes from --py-files or site-packages.
    sys.path.pop(0)

import os
import re
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from dissector.options import Options
from dissector.sparkfleet.aggregate import DEFAULT_TOP, DEFAULT_WINDOW, summaries
from dissector.sparkfleet.analytics import ANALYTICS_TABLES, load_analytics, parse_tables
from dissector.sparkfleet.read import (
    DEFAULT_GLOB,
    ONE_FILE_PER_TASK_CONF,
    Fleet,
    MissingPathError,
    load,
)
from dissector.sparkfleet.write import python_writable, write_pairs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    and the ``analytics`` tables (partitions, groups, versions: a second pass over
    each capture, by the full decoder; ``()`` skips it).

    ``out_dir`` None computes everything without writing (the CLI then prints).
    The pairs-shaped tables go through ``dissector.frame``'s Parquet writer (same
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
            where = _join(out_dir, name)
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


def _join(base: str, name: str) -> str:
    """Join for local paths and URIs alike (``os.path.join`` would break ``s3a://``)."""
    return base.rstrip("/") + "/" + name


def _parse_conf(items: tuple[str, ...]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE: {item!r}", param_hint="--conf")
        conf[key.strip()] = value
    return conf


def _echo_report(report: JobReport, out_dir: str | None) -> None:
    click.echo(
        f"{report.captures} captures ({report.failed} failed to decode), "
        f"{report.pairs} pairs, {report.seconds:.1f} s"
    )
    for capture, error in report.failures:
        click.echo(f"  failed: {capture}: {error}", err=True)
    for path in report.missing:
        click.echo(f"  skipped (no such file or directory): {path}", err=True)
    for name, rows in report.tables.items():
        where = f" -> {_join(out_dir, name)}" if out_dir else ""
        click.echo(f"  {name}: {rows} rows{where}")


def _echo_table(title: str, rows: list, columns: list[str]) -> None:
    import pandas as pd

    # object dtype: integer columns with nulls stay integers instead of turning float.
    cells = [[round(v, 3) if isinstance(v, float) else v for v in row] for row in rows]
    table = pd.DataFrame(cells, columns=columns, dtype=object)
    click.echo(f"\n{title}")
    click.echo(table.to_string(index=False, na_rep="-") if rows else "(none)")


def _times_as_text(df: DataFrame) -> DataFrame:
    """Timestamps formatted by Spark in the session's zone (UTC), not Python's local one."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    return df.select(
        *(
            F.date_format(f.name, "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(f.name)
            if isinstance(f.dataType, TimestampType)
            else F.col(f.name)
            for f in df.schema.fields
        )
    )


def _check_all_failed(report: JobReport) -> None:
    if report.captures and report.failed == report.captures:
        raise click.ClickException(
            f"every capture ({report.captures}) failed to decode; first: {report.failures[0][1]}"
        )


@click.command("spark")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--master",
    default=None,
    help="Spark master URL, e.g. local[*] or yarn (default: spark-submit's, else local[*])",
)
@click.option(
    "-o",
    "--output-dir",
    "out_dir",
    default=None,
    help="directory (any Hadoop path) for the Parquet tables; without it, print a summary",
)
@click.option("--ports", default=None, help="broker ports, comma-separated")
@click.option(
    "--window", default=DEFAULT_WINDOW, show_default=True, help="throughput window length"
)
@click.option("--top", default=DEFAULT_TOP, show_default=True, type=int, help="top errors kept")
@click.option("--recursive", is_flag=True, help="descend into directories")
@click.option(
    "--glob",
    default=DEFAULT_GLOB,
    show_default=True,
    help="which files of a directory to read (Hadoop glob on the name; '*' for all); "
    "files named explicitly are always read",
)
@click.option(
    "--skip-missing",
    is_flag=True,
    help="skip paths and globs that match nothing (listed on stderr) instead of failing",
)
@click.option(
    "--analytics",
    "analytics",
    default="all",
    show_default=True,
    help="analytics tables to write besides the pairs and summaries: comma-separated "
    f"{', '.join(ANALYTICS_TABLES)}, or all, or none (each capture is read once more and "
    "its exchanges decoded in full)",
)
@click.option("--conf", "confs", multiple=True, help="extra Spark setting KEY=VALUE (repeatable)")
@click.option("-v", "--verbose", is_flag=True, help="Spark's own log (WARN) and progress bars")
def spark_command(
    paths: tuple[str, ...],
    master: str | None,
    out_dir: str | None,
    ports: str | None,
    window: str,
    top: int,
    recursive: bool,
    glob: str,
    skip_missing: bool,
    analytics: str,
    confs: tuple[str, ...],
    verbose: bool,
) -> None:
    """Decode PATHS (capture files, directories or globs on any Hadoop path) on Spark.

    Writes to OUT_DIR: pairs/ (the pairs DataFrame contract, one row per pair),
    captures/ (one row per capture: failed?, error, counters), summary tables
    (latency percentiles per API/version, broker, client_id and topic, error rates,
    top errors, unanswered requests and throughput per time window) and the analytics
    tables partitions/, groups/ and versions/ (see --analytics).
    """
    from dissector.cli import parse_ports

    if top < 1:
        raise click.BadParameter("must be at least 1", param_hint="--top")
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise click.ClickException(
            "the spark command needs pyspark: pip install 'kafka-dissector[spark]' (and Java 17+)"
        ) from exc

    try:
        tables = parse_tables(analytics)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--analytics") from None
    options = Options(ports=parse_ports(ports))
    job = _Job(options, window, top, recursive, glob or None, skip_missing, tables)
    with warnings.catch_warnings():
        if not verbose:
            # PySpark warns on every pandas conversion about pandas versions it has not
            # certified; it would land between the summary lines.
            warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        # Inside a running application (a notebook, a test) reuse its session, leave it up.
        owned = SparkSession.getActiveSession() is None
        spark = build_session(master, conf=_parse_conf(confs), quiet=not verbose)
        try:
            _run(spark, paths, out_dir, job)
        finally:
            if owned:
                spark.stop()


@dataclass(frozen=True)
class _Job:
    """The command's settings for one run."""

    options: Options
    window: str
    top: int
    recursive: bool
    glob: str | None
    skip_missing: bool
    analytics: tuple[str, ...] = ANALYTICS_TABLES


def _run(spark: SparkSession, paths: tuple[str, ...], out_dir: str | None, job: _Job) -> None:
    """The command's work, with its failures turned into one-line errors."""
    from pyspark.errors import AnalysisException

    try:
        if out_dir is None:
            _print_summary(spark, paths, job)
            return
        report = run_job(
            spark,
            paths,
            out_dir,
            options=job.options,
            window=job.window,
            top=job.top,
            recursive=job.recursive,
            glob=job.glob,
            skip_missing=job.skip_missing,
            analytics=job.analytics,
        )
        _echo_report(report, out_dir)
        _check_all_failed(report)
    except MissingPathError as exc:
        raise click.ClickException(f"{exc} (--skip-missing skips such paths)") from exc
    except AnalysisException as exc:
        # e.g. a path that cannot be listed: Spark's message names it.
        raise click.ClickException(str(exc).splitlines()[0]) from exc
    except click.ClickException:
        raise
    except Exception as exc:
        hint = worker_import_hint(exc)
        if hint is None:
            raise
        raise click.ClickException(hint) from exc


def _print_summary(spark: SparkSession, paths: tuple[str, ...], job: _Job) -> None:
    started = time.monotonic()
    fleet = load(
        spark,
        list(paths),
        options=job.options,
        recursive=job.recursive,
        glob=job.glob,
        skip_missing=job.skip_missing,
    )
    try:
        report = collect_report(fleet)
        report.missing = list(fleet.missing)
        report.seconds = time.monotonic() - started
        _echo_report(report, None)
        _check_all_failed(report)
        tables = summaries(fleet.pairs, window=job.window, top=job.top)
        for name in ("latency_by_api", "latency_by_broker", "top_errors", "unanswered_summary"):
            df = _times_as_text(tables[name])
            _echo_table(name, df.limit(50).collect(), df.columns)
    finally:
        fleet.unpersist()


if __name__ == "__main__":
    # spark-submit runs this file as its main script.
    spark_command()
