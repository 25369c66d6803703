"""``kafka-dissector spark``: fleet-wide analysis of many captures on Apache Spark.

Runs the same way locally (``--master local[*]``) and on a cluster::

    spark-submit --master yarn ... dissector/cli/spark.py hdfs:///captures/ -o hdfs:///out

(see docs/spark.md). Absolute imports, so the file also works as spark-submit's
main script, outside its package.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Run as spark-submit's main script: Python put this file's folder (dissector/cli/) first
    # on the import path, where its modules could shadow top-level ones of the same name.
    # The package itself comes from --py-files or site-packages.
    sys.path.pop(0)

import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import click

from dissector.cli.common import (
    chain_options,
    chain_rule,
    max_decompressed_option,
    max_frame_option,
    outputs,
    pass_options,
    probe_writable_folder,
    tls_key_logs,
    tls_keylog_option,
)
from dissector.options import Options
from dissector.spark.aggregate import DEFAULT_TOP, DEFAULT_WINDOW, summaries
from dissector.spark.analytics import ANALYTICS_TABLES, parse_tables
from dissector.spark.job import (
    JobReport,
    ProgressState,
    build_session,
    collect_report,
    describe_failure,
    join_path,
    new_progress,
    run_job,
    watching,
    worker_import_hint,
)
from dissector.spark.read import DEFAULT_GLOB, MissingPathError, load
from dissector.tls import KeyLogError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


PROGRESS_EVERY = 10.0  # seconds between progress lines on a terminal


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
    if report.sets:
        files = sum(len(s) for s in report.sets)
        click.echo(
            f"note: {files} files read as {len(report.sets)} captures (capture sets: the "
            "captures table lists their files; --no-chain reads them apart)",
            err=True,
        )
    for name, rows in report.tables.items():
        where = f" -> {join_path(out_dir, name)}" if out_dir else ""
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


def _check_failed(report: JobReport, missing_fails: bool = True) -> None:
    """The failure rule of the commands that take captures (analyze, decode, report): the
    others are written and the run exits non-zero, the failed and missing ones named above.
    ``missing_fails`` False (--skip-missing): a path that matched nothing is no failure."""
    _check_all_failed(report)
    missing = len(report.missing) if missing_fails else 0
    problems = []
    if report.failed:
        problems.append(
            f"{report.failed} of {report.captures} captures failed to decode "
            "(flagged in pairs and captures)"
        )
    if missing:
        problems.append(f"{_paths(missing)} matched nothing (--skip-missing: no failure for those)")
    if problems:
        raise click.ClickException("; ".join(problems))


def _paths(n: int) -> str:
    return "1 path" if n == 1 else f"{n} paths"


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
    help="paths and globs that match nothing are named on stderr and skipped, the rest read "
    "and written, and the run exits 1; with this flag they do not make it fail (e.g. a glob "
    "over rotated hours of which some are empty)",
)
@click.option(
    "--analytics",
    "analytics",
    default="all",
    show_default=True,
    help="analytics tables to write besides the pairs and summaries: comma-separated "
    f"{', '.join(ANALYTICS_TABLES)}, or all, or none (built in the pass that decodes the "
    "pairs; the APIs only an unnamed table reads are not decoded)",
)
@click.option("--conf", "confs", multiple=True, help="extra Spark setting KEY=VALUE (repeatable)")
@click.option(
    "--progress-every",
    default=None,
    type=click.FloatRange(min=0.1),
    help="seconds between progress lines on stderr (files and bytes decoded); "
    f"default: every {PROGRESS_EVERY:g} s when stderr is a terminal, else none",
)
@click.option("-v", "--verbose", is_flag=True, help="Spark's own log (WARN), traces, progress bars")
@partial(tls_keylog_option, hadoop=True)
@max_frame_option
@max_decompressed_option
@chain_options
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
    progress_every: float | None,
    verbose: bool,
    tls_keylog: tuple[str, ...] = (),
    max_frame: int | None = None,
    max_decompressed: int | None = None,
    chain: str = "auto",
    no_chain: bool = False,
    chain_gap: float = 3600.0,
) -> None:
    """Decode PATHS (capture files, directories or globs on any Hadoop path) on Spark.

    Writes to OUT_DIR: pairs/ (the pairs DataFrame contract, one row per pair),
    captures/ (one row per capture: failed?, error, counters), summary tables
    (latency percentiles per API/version, broker, client_id and topic, error rates,
    top errors, unanswered requests and throughput per time window) and the analytics
    tables partitions/, groups/, versions/ and lag/ (see --analytics).
    """
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
    options = pass_options(
        ports=ports,
        max_frame=max_frame,
        max_decompressed=max_decompressed,
        tls=tls_key_logs(tls_keylog, ship=True),
        chain=chain_rule(chain, no_chain, chain_gap),
    )
    if out_dir is not None:
        _check_output_folder(out_dir)
    if progress_every is None and sys.stderr.isatty():
        progress_every = PROGRESS_EVERY
    job = _Job(
        options, window, top, recursive, glob or None, skip_missing, tables, progress_every, verbose
    )
    with warnings.catch_warnings():
        if not verbose:
            # PySpark warns on every pandas conversion about pandas versions it has not
            # certified; it would land between the summary lines.
            warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
        # Inside a running application (a notebook, a test) reuse its session, leave it up.
        owned = SparkSession.getActiveSession() is None
        asked_early = threading.Event()
        with _on_sigint(partial(_held_while_starting, asked_early)):
            try:
                spark = _off_the_main_thread(
                    partial(build_session, master, conf=_parse_conf(confs), quiet=not verbose)
                )
            except Exception as exc:
                if verbose:
                    raise
                raise click.ClickException(f"Spark did not start: {describe_failure(exc)}") from exc
        try:
            if asked_early.is_set():
                raise KeyboardInterrupt  # Spark is up now: stopped below, as at any end
            cancelled = False
            with _cancelled_on_ctrl_c(spark) as asked:
                try:
                    _run(spark, paths, out_dir, job)
                except Exception:
                    if not asked.is_set():
                        raise
                    cancelled = True
            if asked.is_set():
                if out_dir is not None:
                    done = outputs()
                    if cancelled:
                        done.incomplete.append(f"{out_dir} (the cancelled job's tables)")
                    else:  # Ctrl-C came as the job ended: what it wrote is whole
                        done.written.append(out_dir)
                raise KeyboardInterrupt
        finally:
            if owned:
                spark.stop()


# How often a Ctrl-C'd run asks Spark again to cancel its jobs (those started since).
CANCEL_EVERY_S = 0.2


def _check_output_folder(out_dir: str) -> None:
    """A local output folder that cannot be written fails the command before Spark
    starts (it failed the first task, after Spark's start-up, with a task's error)."""
    from dissector.spark.write import local_folder

    local = local_folder(out_dir)
    if local is not None:
        probe_writable_folder(local, out_dir)


@contextmanager
def _on_sigint(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` takes SIGINT inside the block. Python delivers signals to the main
    thread alone: on another (a notebook's worker) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _held_while_starting(asked: threading.Event, signum: int, frame: Any) -> None:
    """SIGINT while Spark starts: noted in ``asked``, acted on once Spark is up (and
    then stopped). Interrupted inside PySpark's start-up, the JVM it was launching
    stayed up with no one left to stop it, and printed a Java trace after the command
    ended."""
    if not asked.is_set():
        click.echo("interrupting: Spark is starting, it is stopped once up", err=True)
    asked.set()


def _off_the_main_thread(start: Callable[[], SparkSession]) -> SparkSession:
    """``start()`` run on a thread of its own: a SparkContext started on the main
    thread replaces the Ctrl-C handler with PySpark's, which raises inside the py4j
    call under way (py4j then logs tracebacks) for the rest of the start-up."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="kafka-dissector-spark-start") as pool:
        return pool.submit(start).result()


@contextmanager
def _cancelled_on_ctrl_c(spark: SparkSession) -> Iterator[threading.Event]:
    """Ctrl-C cancels the running Spark jobs and the command then exits 130 (app.py),
    naming what it leaves behind. PySpark's own handler raises KeyboardInterrupt inside
    a py4j call, which comes back as a 'job failed' error; here the first Ctrl-C asks
    Spark to cancel (from a thread: the main thread may be inside py4j) and lets the job
    end, a second one interrupts at once. The run is several Spark jobs, and one that
    starts after the Ctrl-C (it came while none ran) is cancelled too: the asking
    repeats until the run ends."""
    asked = threading.Event()
    ended = threading.Event()

    def cancel_until_ended() -> None:
        while not ended.is_set():
            try:
                spark.sparkContext.cancelAllJobs()
            except Exception:  # the run ended and Spark is stopping: nothing to cancel
                return
            ended.wait(CANCEL_EVERY_S)

    def on_sigint(signum: int, frame: Any) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        threading.Thread(
            target=cancel_until_ended, name="kafka-dissector-cancel", daemon=True
        ).start()

    with _on_sigint(on_sigint):
        try:
            yield asked
        finally:
            ended.set()


@dataclass(frozen=True)
class _Job:
    """The command's settings for one run."""

    options: Options
    window: str
    top: int
    recursive: bool
    glob: str | None
    skip_missing: bool  # a path that matches nothing does not fail the run
    analytics: tuple[str, ...] = ANALYTICS_TABLES
    progress_every: float | None = None  # None: no progress lines
    verbose: bool = False


def _echo_progress(state: ProgressState) -> None:
    click.echo(state.line(), err=True)


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
            skip_missing=True,  # named and counted: _check_failed decides the exit
            analytics=job.analytics,
            on_progress=_echo_progress if job.progress_every else None,
            progress_every=job.progress_every or PROGRESS_EVERY,
        )
        _echo_report(report, out_dir)
        _check_failed(report, missing_fails=not job.skip_missing)
    except (MissingPathError, KeyLogError) as exc:  # nothing to read, or a key log
        raise click.ClickException(str(exc)) from exc
    except AnalysisException as exc:
        # e.g. a path that cannot be listed: Spark's message names it.
        raise click.ClickException(str(exc).splitlines()[0]) from exc
    except click.ClickException:
        raise
    except Exception as exc:
        hint = worker_import_hint(exc)
        if hint is not None:
            raise click.ClickException(hint) from exc
        if job.verbose:
            raise
        line = describe_failure(exc, spark.sparkContext.master)
        raise click.ClickException(f"{line} (--verbose shows Spark's log)") from exc


def _print_summary(spark: SparkSession, paths: tuple[str, ...], job: _Job) -> None:
    started = time.monotonic()
    progress = new_progress(spark)
    fleet = load(
        spark,
        list(paths),
        options=job.options,
        recursive=job.recursive,
        glob=job.glob,
        skip_missing=True,  # named and counted: _check_failed decides the exit
        progress=progress,
    )
    try:
        show = _echo_progress if job.progress_every else None
        with watching(progress, fleet.plan, show, job.progress_every or PROGRESS_EVERY):
            report = collect_report(fleet)  # the first action: decodes into the cache
        report.missing = list(fleet.missing)
        report.sets = list(fleet.plan.sets)
        report.seconds = time.monotonic() - started
        _echo_report(report, None)
        _check_all_failed(report)
        tables = summaries(fleet.pairs, window=job.window, top=job.top)
        for name in ("latency_by_api", "latency_by_broker", "top_errors", "unanswered_summary"):
            df = _times_as_text(tables[name])
            _echo_table(name, df.limit(50).collect(), df.columns)
        _check_failed(report, missing_fails=not job.skip_missing)
    finally:
        fleet.unpersist()


if __name__ == "__main__":
    # spark-submit runs this file as its main script.
    spark_command()
