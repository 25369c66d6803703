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
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from dissector.pipeline import Options
from dissector.sparkfleet.aggregate import DEFAULT_TOP, DEFAULT_WINDOW, summaries
from dissector.sparkfleet.read import ONE_FILE_PER_TASK_CONF, Fleet, load

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
# UTC boundaries) and one capture per task.
JOB_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    **ONE_FILE_PER_TASK_CONF,
}


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


def build_session(
    master: str | None = None,
    *,
    app_name: str = "kafka-dissector",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession; ``master`` None keeps spark-submit's master (else local[*])."""
    from pyspark.sql import SparkSession

    if master is None and not launched_by_spark_submit():
        master = DEFAULT_MASTER
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@dataclass
class JobReport:
    captures: int = 0
    failed: int = 0
    pairs: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (capture, error)
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
    glob: str | None = None,
    mode: str = "overwrite",
) -> JobReport:
    """Decode the captures once; write pairs, captures and the summaries as Parquet.

    ``out_dir`` None computes everything without writing (the CLI then prints).
    """
    started = time.monotonic()
    fleet = load(spark, list(paths), options=options, recursive=recursive, glob=glob)
    try:
        tables = {"pairs": fleet.pairs, "captures": fleet.captures}
        tables.update(summaries(fleet.pairs, window=window, top=top))
        report = collect_report(fleet)
        for name, df in tables.items():
            if out_dir is not None:
                # The pairs keep one file per capture task; the summaries are small.
                target = df if name == "pairs" else df.coalesce(1)
                target.write.mode(mode).parquet(_join(out_dir, name))
                report.tables[name] = spark.read.parquet(_join(out_dir, name)).count()
            else:
                report.tables[name] = df.count()
    finally:
        fleet.unpersist()
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
@click.option("--glob", default=None, help="only files matching this name pattern, e.g. *.pcap*")
@click.option("--conf", "confs", multiple=True, help="extra Spark setting KEY=VALUE (repeatable)")
def spark_command(
    paths: tuple[str, ...],
    master: str | None,
    out_dir: str | None,
    ports: str | None,
    window: str,
    top: int,
    recursive: bool,
    glob: str | None,
    confs: tuple[str, ...],
) -> None:
    """Decode PATHS (capture files, directories or globs on any Hadoop path) on Spark.

    Writes to OUT_DIR: pairs/ (the pairs DataFrame contract, one row per pair),
    captures/ (one row per capture: failed?, error, counters) and summary tables:
    latency percentiles per API/version, broker, client_id and topic, error rates,
    top errors, unanswered requests and throughput per time window.
    """
    from dissector.cli import parse_ports

    if top < 1:
        raise click.BadParameter("must be at least 1", param_hint="--top")
    from pyspark.sql import SparkSession

    options = Options(ports=parse_ports(ports))
    # Inside a running application (a notebook, a test) reuse its session, leave it up.
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, conf=_parse_conf(confs))
    from pyspark.errors import AnalysisException

    try:
        if out_dir is None:
            _print_summary(spark, paths, options, window, top, recursive, glob)
            return
        report = run_job(
            spark,
            paths,
            out_dir,
            options=options,
            window=window,
            top=top,
            recursive=recursive,
            glob=glob,
        )
        _echo_report(report, out_dir)
        _check_all_failed(report)
    except AnalysisException as exc:
        # e.g. a path that does not exist: Spark's message names it.
        raise click.ClickException(str(exc).splitlines()[0]) from exc
    finally:
        if owned:
            spark.stop()


def _print_summary(
    spark: SparkSession,
    paths: tuple[str, ...],
    options: Options,
    window: str,
    top: int,
    recursive: bool,
    glob: str | None,
) -> None:
    started = time.monotonic()
    fleet = load(spark, list(paths), options=options, recursive=recursive, glob=glob)
    try:
        report = collect_report(fleet)
        report.seconds = time.monotonic() - started
        _echo_report(report, None)
        _check_all_failed(report)
        tables = summaries(fleet.pairs, window=window, top=top)
        for name in ("latency_by_api", "latency_by_broker", "top_errors", "unanswered_summary"):
            df = _times_as_text(tables[name])
            _echo_table(name, df.limit(50).collect(), df.columns)
    finally:
        fleet.unpersist()


if __name__ == "__main__":
    # spark-submit runs this file as its main script.
    spark_command()
