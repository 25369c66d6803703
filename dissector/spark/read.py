"""Captures on any Hadoop-compatible path -> the decode stage's units -> a ``Fleet``.

The driver expands the paths and lists the files through Hadoop's FileSystem (in the
JVM: local paths, ``hdfs://``, ``s3a://``, ``abfss://``, ``gs://`` and globs work
wherever the cluster is configured for them, with its credentials). Files named on the
command line are always read; a directory contributes the files whose name matches
the glob (captures by default, not README.md or .json); a path that matches nothing
fails the job or, asked to, is skipped and reported.

Each file then becomes a *unit*, what one task decodes (``tasks.decode_partition``):

* a local file (``file:``; the same path on every node) is a row naming it; the task
  opens it and the core streams it from disk. The rows are spread one unit per task,
  largest first, so that a long capture does not start last;
* any other file is read by Spark's ``binaryFile`` source, one file per task, and its
  bytes come with the row: the task must hold the whole file, so a file larger than
  the memory a task has (``spark_read_budget``) is not read but flagged, with the
  setting to raise.

A capture is not splittable (TCP reassembly needs it whole), so one capture is decoded
by exactly one task; the decoding is the offline pipeline's core, so the Spark rows are
the pandas rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from dissector.options import ChainRule, Options
from dissector.spark.keylogs import ship_options
from dissector.spark.tasks import (
    FACTS_SCHEMA,
    UNIT_SCHEMA,
    CaptureResult,
    DecodeConfig,
    Progress,
    RowOutput,
    decode_partition,
    facts_from_rows,
    facts_partition,
    facts_row,
    flag_table,
    local_path,
    output_arrow_schema,
)
from dissector.spark.typemap import (
    CAPTURE_INFO,
    CAPTURES_TABLE,
    INFO_COLUMN,
    PAIRS_TABLE,
    TABLE_COLUMN,
    spark_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MAX_CAPTURE_BYTES = (1 << 31) - 1 - (1 << 20)
"""Largest capture Spark can read whole: a binary value is below 2 GiB (minus room for
the row)."""

DEFAULT_GLOB = "*.{pcap,pcapng,cap,pcap.gz,pcapng.gz}"
"""Which files of a directory are read (Hadoop glob syntax, matched on the name)."""

# Spark packs small files into one read task unless opening a file "costs" as much as
# a whole task; with this cost every file Spark reads gets its own task (and core).
ONE_FILE_PER_TASK_CONF = {"spark.sql.files.openCostInBytes": str(1 << 40)}

RESERVED_HEAP = 300 << 20  # Spark's reserved JVM memory (UnifiedMemoryManager)


class MissingPathError(FileNotFoundError):
    """A path given to read matches no file or directory."""

    def __init__(self, path: str) -> None:
        super().__init__(f"no such file or directory: {path}")
        self.path = path


@dataclass(frozen=True)
class Targets:
    """The paths to read, expanded on the driver."""

    files: tuple[str, ...] = ()  # named (or matched by a glob) on the command line
    directories: tuple[str, ...] = ()  # listed, filtered by the glob
    missing: tuple[str, ...] = ()  # matched nothing (kept only when skipping)


@dataclass(frozen=True)
class CaptureFile:
    """One file to decode: its URI as Hadoop spells it (the rows' ``capture``) and size."""

    uri: str
    size: int


def _jvm_fs(spark: SparkSession) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    if jvm is None:  # only a stopped context has no gateway
        raise RuntimeError("the SparkContext is stopped: it has no JVM gateway")
    return jvm, spark.sparkContext._jsc.hadoopConfiguration()


def resolve_paths(
    spark: SparkSession, paths: Iterable[str], *, skip_missing: bool = False
) -> Targets:
    """Expand globs and sort each path into files and directories, on the driver.

    A path that matches nothing raises ``MissingPathError`` unless ``skip_missing``.
    """
    jvm, conf = _jvm_fs(spark)
    files: list[str] = []
    directories: list[str] = []
    missing: list[str] = []
    for path in paths:
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        statuses = hpath.getFileSystem(conf).globStatus(hpath)
        if not statuses:  # None for a plain path that does not exist, [] for a glob
            if not skip_missing:
                raise MissingPathError(path)
            missing.append(path)
            continue
        for status in statuses:
            target = directories if status.isDirectory() else files
            target.append(status.getPath().toString())
    return Targets(tuple(dict.fromkeys(files)), tuple(dict.fromkeys(directories)), tuple(missing))


def _hidden(name: str) -> bool:
    """Spark's rule for files and folders a scan leaves out."""
    return name.startswith(("_", "."))


def list_captures(
    spark: SparkSession,
    targets: Targets,
    *,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
) -> list[CaptureFile]:
    """The files to decode, in the order given (a directory's sorted by name).

    Named files are read whatever their name; a directory contributes its files whose
    name matches ``glob`` (Hadoop's ``GlobFilter``; None: every file), and with
    ``recursive`` those of its sub-directories. Names starting with ``_`` or ``.`` are
    hidden, as in Spark's file scans.
    """
    jvm, conf = _jvm_fs(spark)
    hadoop = jvm.org.apache.hadoop.fs
    found: dict[str, int] = {}
    for uri in targets.files:
        hpath = hadoop.Path(uri)
        found[uri] = int(hpath.getFileSystem(conf).getFileStatus(hpath).getLen())
    accept = hadoop.GlobFilter(glob) if glob else None
    pending = [hadoop.Path(d) for d in targets.directories]
    while pending:
        folder = pending.pop(0)
        fs = folder.getFileSystem(conf)
        matched = fs.listStatus(folder, accept) if accept is not None else fs.listStatus(folder)
        files = []
        for status in matched:
            uri = status.getPath().toString()
            if not status.isDirectory() and not _hidden(uri.rsplit("/", 1)[-1]):
                files.append((uri, int(status.getLen())))
        for uri, size in sorted(files):
            found.setdefault(uri, size)
        if recursive:
            subfolders = [s.getPath() for s in fs.listStatus(folder) if s.isDirectory()]
            pending += [p for p in subfolders if not _hidden(p.getName())]
    return [CaptureFile(uri, size) for uri, size in found.items()]


@dataclass(frozen=True)
class Plan:
    """How the files are read: units the tasks open themselves, files Spark reads (one
    per task) and files refused without reading (uri, size, why)."""

    local_units: tuple[tuple[CaptureFile, ...], ...] = ()
    spark_reads: tuple[CaptureFile, ...] = ()
    refused: tuple[tuple[str, int, str], ...] = ()

    @property
    def sets(self) -> tuple[tuple[str, ...], ...]:
        """The units of several files: capture sets, each read as one capture."""
        return tuple(tuple(f.uri for f in u) for u in self.local_units if len(u) > 1)

    @property
    def files(self) -> int:
        units = sum(len(u) for u in self.local_units)
        return units + len(self.spark_reads) + len(self.refused)

    @property
    def bytes(self) -> int:
        units = sum(f.size for u in self.local_units for f in u)
        return units + sum(f.size for f in self.spark_reads)


@dataclass(frozen=True)
class Budget:
    """The largest file a task can hold whole, and the setting that raises it."""

    max_bytes: int
    setting: str = ""

    def refusal(self, size: int) -> str:
        why = f"too large: {size} bytes, over the {self.max_bytes} bytes a task can hold"
        return f"{why}; raise {self.setting}" if self.setting else why


Grouping = Callable[[Sequence[CaptureFile]], Sequence[Sequence[str]]]
"""Local files -> the URIs of each capture set, in reading order (``capture_groups``)."""


def plan_units(
    files: Sequence[CaptureFile],
    *,
    spark_budget: Budget,
    max_bytes: int | None = None,
    local_reads: bool = True,
    group: Grouping | None = None,
) -> Plan:
    """Sort the files into local units, Spark reads and refusals.

    ``max_bytes`` (given) refuses larger files of any kind; Spark reads are refused over
    ``spark_budget``. ``local_reads`` False has Spark read local files too. ``group``
    forms the capture sets among the local files (None: one file per unit); each set is
    one unit, read by one task as one capture.
    """
    local: list[CaptureFile] = []
    reads: list[CaptureFile] = []
    refused: list[tuple[str, int, str]] = []
    for f in files:
        is_local = local_reads and local_path(f.uri) is not None
        if max_bytes is not None and f.size > max_bytes:
            refused.append((f.uri, f.size, Budget(max_bytes).refusal(f.size)))
        elif not is_local and f.size > spark_budget.max_bytes:
            refused.append((f.uri, f.size, spark_budget.refusal(f.size)))
        elif is_local:
            local.append(f)
        else:
            reads.append(f)
    by_uri = {f.uri: f for f in local}
    groups = group(local) if group is not None and len(local) > 1 else [[f.uri] for f in local]
    units = [tuple(by_uri[uri] for uri in members) for members in groups]
    if sorted(f.uri for u in units for f in u) != sorted(by_uri):
        raise RuntimeError("capture sets must hold every local file exactly once")
    units.sort(key=lambda u: -sum(f.size for f in u))  # largest first: no long tail
    return Plan(tuple(units), tuple(reads), tuple(refused))


def capture_groups(
    spark: SparkSession, files: Sequence[CaptureFile], rule: ChainRule
) -> list[tuple[str, ...]]:
    """The capture sets among local ``files`` under ``rule`` (``dissector.wire.sets``):
    each file's facts are read where the file is (a native walk over its record headers:
    by a Spark job on a cluster, by the driver's threads in local mode, where the driver
    is the one node), the driver groups them (``group_sets``, a pure function of the
    facts). A file whose facts cannot be read stands alone (decoding it says why)."""
    from dissector.wire.sets import group_sets

    uris = [f.uri for f in files]
    if rule.mode == "none" or len(uris) < 2:
        return [(uri,) for uri in uris]
    cores = max(spark.sparkContext.defaultParallelism, 1)
    if (spark.sparkContext.master or "").startswith("local"):
        from concurrent.futures import ThreadPoolExecutor

        # The core's scan runs without the GIL: the threads read files in parallel.
        with ThreadPoolExecutor(max_workers=cores) as pool:
            facts_rows = list(pool.map(facts_row, uris))
    else:
        facts_rows = facts_on_executors(spark, uris, min(len(uris), cores * 2))
    facts, unread = facts_from_rows(facts_rows)
    sets = group_sets(facts, rule)
    return [tuple(str(f) for f in s.files) for s in sets] + [(uri,) for uri in unread]


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)


def _jvm_bytes(text: str) -> int | None:
    """A JVM memory setting ("1g", "512m", "4096") in bytes (a bare number: MiB)."""
    match = _SIZE.match(text)
    if match is None:
        return None
    scale = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    return int(match.group(1)) * scale[match.group(2).lower()]


def spark_read_budget(spark: SparkSession) -> Budget:
    """The largest file a task can hold when Spark reads it.

    Such a file is one ``binaryFile`` value in the JVM and its Arrow copy on the way to
    Python, in the executor's share of the heap that Spark does not reserve, divided
    among the tasks that run at once; never over Spark's 2 GiB limit for a value. In
    local mode the executor is the driver: the heap is ``spark.driver.memory``.
    """
    sc = spark.sparkContext
    conf = sc.getConf()
    if (sc.master or "").startswith("local"):
        setting = "spark.driver.memory"
        runtime = sc._jvm.java.lang.Runtime.getRuntime() if sc._jvm is not None else None
        heap = int(runtime.maxMemory()) if runtime is not None else 1 << 30
        cores = max(sc.defaultParallelism, 1)
    else:
        setting = "spark.executor.memory"
        heap = _jvm_bytes(conf.get(setting, "1g")) or 1 << 30
        cores = int(conf.get("spark.executor.cores", "1") or 1)
    fraction = float(conf.get("spark.memory.fraction", "0.6"))
    share = int((heap - RESERVED_HEAP) * fraction) // cores // 2
    now = conf.get(setting, "1g")
    return Budget(max(min(share, MAX_CAPTURE_BYTES), 0), f"{setting} (now {now})")


def unit_frame(spark: SparkSession, plan: Plan) -> DataFrame:
    """The decode stage's input (``tasks.UNIT_SCHEMA``): one row per unit, one unit per
    task. Local units are rows naming their files; Spark reads the others."""
    from pyspark.sql import functions as F

    parts = []
    if plan.local_units or not plan.spark_reads:
        parts.append(local_unit_frame(spark, [[f.uri for f in u] for u in plan.local_units]))
    if plan.spark_reads:
        # Spark plans file splits when an action runs: the setting stays on the session.
        for key, value in ONE_FILE_PER_TASK_CONF.items():
            spark.conf.set(key, value)
        read = spark.read.format("binaryFile").load([f.uri for f in plan.spark_reads])
        parts.append(read.select(F.array("path").alias("files"), "content"))
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    return frame


def facts_on_executors(spark: SparkSession, uris: list[str], tasks: int) -> list[dict[str, Any]]:
    """``facts_row`` of each of ``uris``, read by ``tasks`` Spark tasks where the files
    are (a cluster's nodes): rows of ``FACTS_SCHEMA``, in no set order."""
    names = driver_rows(spark, pa.table({"uri": pa.array(uris, pa.string())}), "uri string", tasks)
    rows: list[dict[str, Any]] = (
        names.mapInArrow(facts_partition, spark_schema(FACTS_SCHEMA)).toArrow().to_pylist()
    )
    return rows


def local_unit_frame(spark: SparkSession, units: list[list[str]]) -> DataFrame:
    """Rows of ``tasks.UNIT_SCHEMA`` naming the files of each local unit, in order, each
    row in a partition of its own (``driver_rows``)."""
    table = pa.table(
        {
            "files": pa.array(units, pa.list_(pa.string())),
            "content": pa.nulls(len(units), pa.binary()),
        }
    )
    return driver_rows(spark, table, UNIT_SCHEMA, len(units))


def driver_rows(spark: SparkSession, table: pa.Table, schema: str, partitions: int) -> DataFrame:
    """The driver's ``table`` (Spark DDL ``schema``) as a frame of ``partitions``
    partitions (consecutive rows together), made by the JVM alone: a range of row
    numbers in that many partitions, joined with the table, which the driver hands over
    as Arrow and Spark broadcasts. A frame of the driver's rows built from a list or an
    RDD goes through a Python worker of its own in every task (pickled rows), beside the
    one that reads them: about 1 s of CPU a job with ``local[2]`` (two more worker
    processes, each starting up), for a few file names."""
    from pyspark.sql import functions as F

    rows = table.num_rows
    numbered = table.append_column("_row", pa.array(range(rows), pa.int64()))
    listed = spark.createDataFrame(numbered, f"{schema}, _row bigint")
    numbers = spark.range(0, rows, 1, max(min(partitions, rows), 1)).withColumnRenamed("id", "_row")
    return numbers.join(F.broadcast(listed), "_row").select(*table.column_names)


def decode_frame(spark: SparkSession, plan: Plan, config: DecodeConfig) -> DataFrame:
    """The decode stage: ``decode_partition`` over ``unit_frame`` (lazy)."""
    schema = spark_schema(output_arrow_schema(config))
    return unit_frame(spark, plan).mapInArrow(partial(decode_partition, config=config), schema)


@dataclass(frozen=True)
class Fleet:
    """The decoded captures, rows held by Spark (cached): pairs, one status row per
    capture file, and the analytics tables asked for."""

    decoded: DataFrame
    cached: DataFrame | None = None  # what ``unpersist`` releases
    missing: tuple[str, ...] = ()  # paths skipped because they matched nothing
    analytics: tuple[str, ...] = ()  # analytics tables decoded
    plan: Plan = Plan()  # the files and how they are read

    def _rows(self, table: str) -> DataFrame:
        from pyspark.sql import functions as F

        return self.decoded.where(F.col(TABLE_COLUMN) == table)

    @property
    def pairs(self) -> DataFrame:
        """The pairs table: ``dissector.schema.COLUMNS``, in order, one row per pair."""
        from dissector.schema import COLUMN_NAMES

        return self._rows(PAIRS_TABLE).select(*COLUMN_NAMES)

    @property
    def captures(self) -> DataFrame:
        """One row per capture file: ``capture`` plus ``typemap.CAPTURE_INFO``."""
        from pyspark.sql import functions as F

        info = [F.col(f"{INFO_COLUMN}.{c.name}").alias(c.name) for c in CAPTURE_INFO]
        return self._rows(CAPTURES_TABLE).select("capture", *info)

    @property
    def tables(self) -> dict[str, DataFrame]:
        """The analytics tables, columns as the pandas functions return them."""
        from dissector.spark.analytics import struct_column

        return {n: self._rows(n).select(f"{struct_column(n)}.*") for n in self.analytics}

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


def refused_frame(spark: SparkSession, plan: Plan, config: DecodeConfig) -> DataFrame | None:
    """The rows (``RowOutput``'s schema) standing for the files refused unread."""
    if not plan.refused:
        return None
    out = RowOutput(config.tables, config.spark_batch_rows)
    batches: list[pa.RecordBatch] = []
    for capture, size, why in plan.refused:
        batches += out.pairs(flag_table(capture, why))
        result = CaptureResult([capture], size, failed=True, error=why)
        batches += out.trailer(capture, result)
    table = pa.Table.from_batches(batches, schema=out.schema)
    return spark.createDataFrame(table, spark_schema(out.schema))


def load(
    spark: SparkSession,
    paths: str | Iterable[str],
    *,
    options: Options | None = None,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
    skip_missing: bool = False,
    tables: Iterable[str] = (),
    max_bytes: int | None = None,
    local_reads: bool = True,
    storage: Any = None,
    progress: Progress | None = None,
) -> Fleet:
    """Decode every capture under ``paths`` (files, directories or globs), rows cached.

    The rows are computed by the first action on the ``Fleet`` and kept (``storage``,
    default memory then disk) for the tables built from them until ``Fleet.unpersist``.
    Each row's ``capture`` is the file's URI as Hadoop spells it (``file:/...``,
    ``hdfs://...``). ``glob`` selects the files of directories (``list_captures``); a
    path matching nothing raises ``MissingPathError``, or with ``skip_missing`` lands in
    ``Fleet.missing``. ``tables``: analytics tables to make in the same pass.
    ``max_bytes`` refuses larger files unread (flagged rows); files Spark must read are
    refused over what a task can hold anyway (``spark_read_budget``). Key logs of
    ``options.tls`` given as URIs (``hdfs://``, ``file:/``, a folder) are read here
    through Hadoop and shipped to the tasks (``keylogs.ship_key_logs``).
    """
    from pyspark import StorageLevel

    from dissector.spark.analytics import ANALYTICS_TABLES

    given = [paths] if isinstance(paths, str) else list(paths)
    if not given:
        raise ValueError("no capture paths given")
    targets = resolve_paths(spark, given, skip_missing=skip_missing)
    if not targets.files and not targets.directories:
        raise MissingPathError(", ".join(targets.missing))
    files = list_captures(spark, targets, recursive=recursive, glob=glob)
    options = ship_options(spark, options or Options())
    plan = plan_units(
        files,
        spark_budget=spark_read_budget(spark),
        max_bytes=max_bytes,
        local_reads=local_reads,
        group=partial(capture_groups, spark, rule=options.chain),
    )
    wanted = tuple(n for n in ANALYTICS_TABLES if n in set(tables))
    config = DecodeConfig(options=options, tables=wanted, progress=progress)
    decoded = decode_frame(spark, plan, config)
    cached = decoded.persist(storage if storage is not None else StorageLevel.MEMORY_AND_DISK)
    refused = refused_frame(spark, plan, config)
    rows = cached if refused is None else cached.unionByName(refused)
    return Fleet(rows, cached, targets.missing, wanted, plan)


def path_string(uri: str) -> str:
    """A listed file's URI as Hadoop's ``Path.toString`` spells it.

    ``inputFiles`` gives ``file:///a%20b`` where the rows say ``file:/a b``.
    """
    parts = urlsplit(uri)
    if not parts.scheme:
        return unquote(uri)
    authority = f"//{parts.netloc}" if parts.netloc else ""
    return f"{parts.scheme}:{authority}{unquote(parts.path)}"
