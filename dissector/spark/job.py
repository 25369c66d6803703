"""A fleet-wide run on Apache Spark: the session, the job (load, summarise, write) and
its report. The ``kafka-dissector spark`` command (``dissector.cli.spark``) drives it."""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from dissector.options import Options
from dissector.spark.aggregate import (
    DEFAULT_TOP,
    DEFAULT_WINDOW,
    summaries,
    summary_tables,
    window_micros,
)
from dissector.spark.analytics import ANALYTICS_TABLES, arrow_schema
from dissector.spark.keylogs import ship_options
from dissector.spark.partials import PARTIAL_TABLES, partial_schemas
from dissector.spark.read import (
    DEFAULT_GLOB,
    Fleet,
    MissingPathError,
    Plan,
    capture_groups,
    decode_frame,
    list_captures,
    load,
    plan_units,
    resolve_paths,
    spark_read_budget,
)
from dissector.spark.tasks import (
    UNANSWERED_TABLE,
    DecodeConfig,
    Progress,
    partials_folder,
    refused_tables,
)
from dissector.spark.typemap import CAPTURES_TABLE, PAIRS_TABLE, captures_arrow_schema
from dissector.spark.write import filesystem_for, python_writable, write_pairs

if TYPE_CHECKING:
    import pyarrow as pa
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
# (Spark's default, INT96, reads back as naive local times), and the Python workers
# forked by ``dissector.spark.daemon`` (PySpark imported from where it is installed,
# not from the zip Spark puts first on their path).
JOB_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.python.daemon.module": "dissector.spark.daemon",
}

# Tables with the pairs' columns: written by the tasks with frame's Parquet writer.
PAIRS_SHAPED = ("pairs", "unanswered_requests")
# Tables that keep one file per capture task (the others are small: one file).
PER_TASK = (*PAIRS_SHAPED, *ANALYTICS_TABLES)

PYTHON_ENV = "PYSPARK_PYTHON"
PYTHON_CONF = "spark.pyspark.python"
LOG_LEVEL_QUIET = "ERROR"

# log4j2 for a driver JVM started by us: nothing on the console, from the first line on
# (setLogLevel comes too late for the start-up warnings). The root stays at WARN and
# the appender drops everything: PySpark's JVM counts as a shell, and Spark announces a
# "default log level" (WARN) whenever the root's level differs from it. A failure
# reaches the command as an exception, which it reports in one line; --verbose shows
# Spark's log and traces.
_QUIET_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = off
"""


def launched_by_spark_submit() -> bool:
    """True in a driver started by spark-submit: PySpark then joins the JVM it was given."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_conf(master: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings for ``master``; ``extra`` wins over ours."""
    conf = dict(JOB_CONF)
    if is_local(master):
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
    if is_local(master):
        return sys.executable
    return None


# The driver JVM of a local master (it is the executor too) compiles with C1 alone. Its
# share of the work is small (the tasks' Python decodes; Spark plans, schedules and
# merges small partial tables), but C2, the optimizing compiler, spent 11 s of CPU on
# every job, on a 2-core machine beside the tasks: C1 alone spends about 2 s, and the
# job gets faster (docs/spark.md, "Local runs").
LOCAL_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def is_local(master: str | None) -> bool:
    """Whether ``master`` runs Spark in this process's JVM (``local``, ``local[N]``...)."""
    return master is not None and master.startswith("local")


@contextmanager
def _driver_java_options(conf: dict[str, str], master: str | None, quiet: bool) -> Iterator[None]:
    """The options of the driver JVM we are about to start: for a local master
    ``LOCAL_JAVA_OPTIONS``, and when ``quiet`` a quiet log4j2 configuration (a file
    that lives while the JVM starts). Options the user gives win whole."""
    key = "spark.driver.extraJavaOptions"
    if key in conf or launched_by_spark_submit():
        yield  # the user's JVM options win; setLogLevel still quiets the rest
        return
    options = list(LOCAL_JAVA_OPTIONS) if is_local(master) else []
    with tempfile.TemporaryDirectory(prefix="kafka-dissector-") as tmp:
        if quiet:
            path = os.path.join(tmp, "log4j2.properties")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(_QUIET_LOG4J2)
            options.append(f"-Dlog4j2.configurationFile=file:{path}")
        if options:
            conf[key] = " ".join(options)
        yield  # the JVM reads its options and the file at start-up only


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
    with _driver_java_options(settings, master, quiet):
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    if quiet:
        session.sparkContext.setLogLevel(LOG_LEVEL_QUIET)
        # py4j logs a lost JVM connection with a traceback through Python's logging;
        # the command reports the failure itself.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
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


_JAVA_OOM = re.compile(r"java\.lang\.OutOfMemoryError: ([^\n]*)")
_JAVA_ERROR = re.compile(r"((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)): ([^\n]*)")
_PYTHON_ERROR = re.compile(r"^(\w+(?:Error|Exception)): (.*)$", re.MULTILINE)
_JVM_GONE = (
    "Connection refused",
    "Answer from Java side is empty",
    "Error while sending or receiving",
    "Py4JNetworkError",
)


def memory_setting(master: str | None) -> str:
    """The setting that gives the tasks' JVM more heap: the driver's in local mode."""
    local = master is None or master.startswith("local")
    return "spark.driver.memory" if local else "spark.executor.memory"


def describe_failure(exc: BaseException, master: str | None = None) -> str:
    """One line for a Spark job that failed, with the setting to change where known;
    the traces stay for ``--verbose``."""
    text = f"{type(exc).__name__}: {exc}"
    memory = memory_setting(master)
    oom = _JAVA_OOM.search(text)
    if oom is not None:
        return (
            f"Spark ran out of JVM memory (java.lang.OutOfMemoryError: {oom.group(1).strip()}): "
            f"raise {memory}"
        )
    if "Python worker exited unexpectedly" in text or "Python worker failed" in text:
        return (
            "a Spark Python worker died (out of memory?): raise "
            "spark.executor.memoryOverhead, or set spark.executor.pyspark.memory"
        )
    if any(marker in text for marker in _JVM_GONE):
        return f"Spark's JVM stopped during the job (out of memory?): raise {memory}"
    if type(exc).__name__ == "PythonException":
        found = _PYTHON_ERROR.findall(text)
        if found:
            name, message = found[-1]
            return f"a Spark task failed: {name}: {message}"
    java = _JAVA_ERROR.findall(text)
    if java:
        name, message = java[-1]  # the innermost cause
        return f"the Spark job failed: {name}: {message.strip()}"
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return f"the Spark job failed: {first.strip()}"


@dataclass
class JobReport:
    captures: int = 0
    failed: int = 0
    pairs: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (capture, error)
    missing: list[str] = field(default_factory=list)  # paths skipped: matched nothing
    tables: dict[str, int] = field(default_factory=dict)  # output name -> rows
    seconds: float = 0.0
    sets: list[tuple[str, ...]] = field(default_factory=list)  # files read as one capture


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


def report_from_captures(captures: pa.Table, max_failures: int = 20) -> JobReport:
    """``collect_report`` for a captures table the driver already holds."""
    rows = captures.select(["capture", "pairs", "failed", "error"]).to_pylist()
    failed = sorted((r["capture"], r["error"] or "") for r in rows if r["failed"])
    return JobReport(
        captures=len(rows),
        failed=len(failed),
        pairs=sum(r["pairs"] or 0 for r in rows),
        failures=failed[:max_failures],
    )


# ---------------------------------------------------------------- progress


@dataclass(frozen=True)
class ProgressState:
    """How far the decode stage is: capture files and their bytes done, of the total."""

    files_done: int
    files: int
    bytes_done: int
    bytes: int
    seconds: float

    def line(self) -> str:
        mb = 1e6
        share = f" ({self.bytes_done / self.bytes:.0%})" if self.bytes else ""
        return (
            f"decoding: {self.files_done} of {self.files} files, "
            f"{self.bytes_done / mb:.1f} of {self.bytes / mb:.1f} MB{share}, "
            f"{self.seconds:.0f} s"
        )


ProgressCallback = Callable[[ProgressState], None]


def new_progress(spark: SparkSession) -> Progress:
    sc = spark.sparkContext
    return Progress(files=sc.accumulator(0), bytes=sc.accumulator(0))


@contextmanager
def watching(
    progress: Progress, plan: Plan, callback: ProgressCallback | None, every: float
) -> Iterator[None]:
    """Call ``callback`` every ``every`` seconds while the body runs (the tasks add to
    ``progress`` as each capture is done; Spark updates the driver's values as tasks end)."""
    if callback is None:
        yield
        return
    started = time.monotonic()
    stop = threading.Event()

    def state() -> ProgressState:
        return ProgressState(
            int(progress.files.value),
            plan.files,
            int(progress.bytes.value),
            plan.bytes,
            time.monotonic() - started,
        )

    shown = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            callback(state())
            shown.set()

    thread = threading.Thread(target=run, name="kafka-dissector-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if shown.is_set():  # a long run ends with the final count
        callback(state())


# ---------------------------------------------------------------- the job


@dataclass(frozen=True)
class JobSettings:
    """What a run decodes and writes, besides the paths and the output directory."""

    options: Options = field(default_factory=Options)
    window: str = DEFAULT_WINDOW
    top: int = DEFAULT_TOP
    recursive: bool = False
    glob: str | None = DEFAULT_GLOB
    skip_missing: bool = False
    mode: str = "overwrite"
    analytics: tuple[str, ...] = ANALYTICS_TABLES
    max_bytes: int | None = None
    local_reads: bool = True


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
    max_bytes: int | None = None,
    local_reads: bool = True,
    on_progress: ProgressCallback | None = None,
    progress_every: float = 10.0,
) -> JobReport:
    """Decode the captures once, with the ``analytics`` tables (partitions, groups,
    versions, lag; ``()`` skips them) in the same pass; write pairs, captures, the summaries
    and the analytics tables as Parquet under ``out_dir``.

    Where pyarrow can write ``out_dir`` (``write.python_writable``) the tasks write the
    pairs and analytics tables themselves and hand Spark one row per capture; the
    summaries are then computed by Spark from the pairs Parquet just written. Elsewhere
    (e.g. ``s3a://``), and with ``out_dir`` None (nothing written: the tables are
    counted), the rows go through Spark, kept on disk while the tables are written.
    ``on_progress`` is called every ``progress_every`` seconds while captures decode.
    Key logs of ``options.tls`` given as URIs are read through Hadoop and shipped to the
    tasks, as ``load`` does.
    """
    started = time.monotonic()
    # Also in a session built elsewhere: Parquet times must be UTC microseconds.
    key = "spark.sql.parquet.outputTimestampType"
    spark.conf.set(key, JOB_CONF[key])
    settings = JobSettings(
        # Before any work: a key log that cannot be read stops the job in one line.
        options=ship_options(spark, options or Options()),
        window=window,
        top=top,
        recursive=recursive,
        glob=glob,
        skip_missing=skip_missing,
        mode=mode,
        analytics=tuple(n for n in ANALYTICS_TABLES if n in set(analytics)),
        max_bytes=max_bytes,
        local_reads=local_reads,
    )
    paths = list(paths)
    direct = out_dir is not None and mode in ("overwrite", "append") and python_writable(out_dir)
    if direct:
        report = _run_direct(spark, paths, out_dir or "", settings, on_progress, progress_every)
    else:
        report = _run_through_spark(spark, paths, out_dir, settings, on_progress, progress_every)
    report.seconds = time.monotonic() - started
    return report


def plan_job(
    spark: SparkSession, paths: list[str], settings: JobSettings
) -> tuple[Plan, tuple[str, ...]]:
    """The decode plan of ``paths`` and the paths skipped because they match nothing."""
    if not paths:
        raise ValueError("no capture paths given")
    targets = resolve_paths(spark, paths, skip_missing=settings.skip_missing)
    if not targets.files and not targets.directories:
        raise MissingPathError(", ".join(targets.missing))
    files = list_captures(spark, targets, recursive=settings.recursive, glob=settings.glob)
    plan = plan_units(
        files,
        spark_budget=spark_read_budget(spark),
        max_bytes=settings.max_bytes,
        local_reads=settings.local_reads,
        group=partial(capture_groups, spark, rule=settings.options.chain),
    )
    return plan, targets.missing


def _run_direct(
    spark: SparkSession,
    paths: list[str],
    out_dir: str,
    settings: JobSettings,
    on_progress: ProgressCallback | None,
    every: float,
) -> JobReport:
    """The tasks write pairs and analytics tables; Spark summarises the pairs files."""
    import pyarrow.parquet as pq

    from dissector.table.frame import write_pairs_parquet

    plan, missing = plan_job(spark, paths, settings)
    location = (
        out_dir if "://" in out_dir or out_dir.startswith("file:") else os.path.abspath(out_dir)
    )
    filesystem, base = filesystem_for(location)
    token = uuid.uuid4().hex[:12]  # this job's files, told apart from an appended job's
    written = (PAIRS_TABLE, CAPTURES_TABLE, UNANSWERED_TABLE, *settings.analytics)
    if settings.mode == "overwrite":  # the tasks create the folders they write in
        for name in written:
            filesystem.delete_dir_contents(f"{base}/{name}", missing_dir_ok=True)
    progress = new_progress(spark)
    window_us = window_micros(spark, settings.window)
    config = DecodeConfig(
        options=settings.options,
        tables=settings.analytics,
        output=location,
        token=token,
        progress=progress,
        window_us=window_us,
    )
    with watching(progress, plan, on_progress, every):
        trailers = decode_frame(spark, plan, config).toArrow()
    import pyarrow as pa

    for name in written:
        filesystem.create_dir(f"{base}/{name}", recursive=True)
    flags, refused = refused_tables(plan.refused)
    captures = pa.concat_tables([trailers.cast(captures_arrow_schema()), refused])
    if flags.num_rows:
        write_pairs_parquet(
            flags, f"{base}/{PAIRS_TABLE}/part-refused-{token}.parquet", filesystem=filesystem
        )
    pq.write_table(
        captures, f"{base}/{CAPTURES_TABLE}/part-00000-{token}.parquet", filesystem=filesystem
    )
    _schema_files(filesystem, base, token, settings.analytics)
    report = report_from_captures(captures)
    report.missing = list(missing)
    report.sets = list(plan.sets)
    # The summaries are small: Spark merges the partial tables the tasks wrote (four
    # jobs over a fraction of the pairs' rows; the pairs are not read again), the driver
    # writes them. unanswered_requests is not among them: the tasks wrote it.
    parts = f"{base}/{partials_folder(token)}"
    _partial_schema_files(filesystem, parts, token)
    where = f"{location}/{partials_folder(token)}"
    read = spark.read.parquet
    partials = {n: read(f"{where}/{n}/part-*-{token}.parquet") for n in PARTIAL_TABLES}
    tables = summary_tables(partials, window_us=window_us, top=settings.top)
    filesystem.delete_dir(parts)
    for name, table in tables.items():
        if settings.mode == "overwrite":
            filesystem.delete_dir_contents(f"{base}/{name}", missing_dir_ok=True)
        filesystem.create_dir(f"{base}/{name}", recursive=True)
        pq.write_table(table, f"{base}/{name}/part-00000-{token}.parquet", filesystem=filesystem)
    for name in (*written, *tables):
        report.tables[name] = _parquet_rows(filesystem, f"{base}/{name}")
    report.tables = {n: report.tables[n] for n in _table_order(settings.analytics)}
    return report


def _table_order(analytics: tuple[str, ...]) -> list[str]:
    """The tables in the order the command lists them."""
    from dissector.spark.aggregate import SUMMARY_TABLES

    return [PAIRS_TABLE, CAPTURES_TABLE, *SUMMARY_TABLES, *analytics]


def _schema_files(filesystem: Any, base: str, token: str, analytics: tuple[str, ...]) -> None:
    """An empty file in each table folder this job left without one, so that readers
    (Spark, pandas) find the table's schema."""
    import pyarrow.parquet as pq

    from dissector.table.frame import pairs_arrow_schema

    pairs = pairs_arrow_schema()
    schemas = {
        PAIRS_TABLE: pairs,
        UNANSWERED_TABLE: pairs,
        **{n: arrow_schema(n) for n in analytics},
    }
    for name, schema in schemas.items():
        folder = f"{base}/{name}"
        if not _parquet_files(filesystem, folder):
            pq.write_table(
                schema.empty_table(), f"{folder}/part-00000-{token}.parquet", filesystem=filesystem
            )


def _partial_schema_files(filesystem: Any, parts: str, token: str) -> None:
    """An empty file in each partial table's folder no task wrote to (no pair of that
    kind in the whole job: no errors, say), so that Spark reads an empty table."""
    import pyarrow.parquet as pq

    for name, schema in partial_schemas().items():
        folder = f"{parts}/{name}"
        if not _parquet_files(filesystem, folder):
            filesystem.create_dir(folder, recursive=True)
            pq.write_table(
                schema.empty_table(), f"{folder}/part-empty-{token}.parquet", filesystem=filesystem
            )


def _parquet_files(filesystem: Any, folder: str) -> list[str]:
    """The visible Parquet files of a table folder (as Spark and pandas see them)."""
    from pyarrow import fs

    infos = filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    return sorted(
        i.path
        for i in infos
        if i.type == fs.FileType.File
        and not i.base_name.startswith(("_", "."))
        and i.base_name.endswith(".parquet")
    )


def _parquet_rows(filesystem: Any, folder: str) -> int:
    """Rows of a table folder, from the files' footers (no Spark job)."""
    import pyarrow.parquet as pq

    total = 0
    for path in _parquet_files(filesystem, folder):
        with filesystem.open_input_file(path) as fh:
            total += pq.ParquetFile(fh).metadata.num_rows
    return total


def _run_through_spark(
    spark: SparkSession,
    paths: list[str],
    out_dir: str | None,
    settings: JobSettings,
    on_progress: ProgressCallback | None,
    every: float,
) -> JobReport:
    """The rows go through Spark (kept on local disk, not in memory, while the tables
    are written); every table is written by Spark's writer."""
    from pyspark import StorageLevel

    progress = new_progress(spark)
    fleet = load(
        spark,
        paths,
        options=settings.options,
        recursive=settings.recursive,
        glob=settings.glob,
        skip_missing=settings.skip_missing,
        tables=settings.analytics,
        max_bytes=settings.max_bytes,
        local_reads=settings.local_reads,
        storage=StorageLevel.DISK_ONLY,
        progress=progress,
    )
    try:
        with watching(progress, fleet.plan, on_progress, every):
            report = collect_report(fleet)  # the first action: decodes into the cache
        report.missing = list(fleet.missing)
        report.sets = list(fleet.plan.sets)
        tables: dict[str, DataFrame] = {PAIRS_TABLE: fleet.pairs, CAPTURES_TABLE: fleet.captures}
        tables.update(summaries(fleet.pairs, window=settings.window, top=settings.top))
        tables.update(fleet.tables)
        ours = out_dir is not None and settings.mode in ("overwrite", "append")
        ours = ours and python_writable(out_dir)  # type: ignore[arg-type]
        for name, df in tables.items():
            if out_dir is None:
                report.tables[name] = df.count()
                continue
            where = join_path(out_dir, name)
            if name in PAIRS_SHAPED and ours:
                write_pairs(df, where, mode=settings.mode)
            else:
                # The pairs keep one file per capture task; the summaries are small.
                target = df if name in PER_TASK else df.coalesce(1)
                target.write.mode(settings.mode).parquet(where)
            # Read back by Spark: counts what a reader gets, and proves Spark reads it.
            report.tables[name] = spark.read.parquet(where).count()
    finally:
        fleet.unpersist()
    return report


def join_path(base: str, name: str) -> str:
    """Join for local paths and URIs alike (``os.path.join`` would break ``s3a://``)."""
    return base.rstrip("/") + "/" + name
