"""Captures on any Hadoop-compatible path -> a ``Fleet`` of decoded pairs.

Reading goes through Spark's ``binaryFile`` source and ``mapInArrow``:

* the JVM lists and opens the files through Hadoop's FileSystem, so local paths,
  ``hdfs://``, ``s3a://``, ``abfss://``, ``gs://`` and globs work wherever the
  cluster is configured for them, with its credentials; a Python Data Source would
  have to reach those stores from Python itself;
* a capture is not splittable (TCP reassembly needs it whole), and ``binaryFile``
  never splits a file, so one capture is decoded by exactly one task;
* the decoding is the offline pipeline itself, run in Python workers over Arrow
  batches, so the Spark rows are the pandas rows.

The driver expands the paths first (``resolve_paths``, through Hadoop's FileSystem):
files named on the command line are always read, a directory contributes only the
files whose name matches the glob (captures by default, not README.md or .json), and
a path that matches nothing fails the job or, asked to, is skipped and reported.

Spark's file scan never hands a file of 0 bytes to a task, and files over
``MAX_CAPTURE_BYTES`` are filtered out before they are read, so ``load`` compares the
listed files with the decoded ones and flags the files that were never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from dissector.options import Options
from dissector.spark.tasks import DecodeConfig, decode_batches, failed_batch
from dissector.spark.typemap import CAPTURE_INFO, INFO_COLUMN, decoded_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MAX_CAPTURE_BYTES = (1 << 31) - 1 - (1 << 20)
"""Largest capture read: a Spark binary value is below 2 GiB (minus room for the row)."""

EMPTY_ERROR = "empty file: Spark's file scan does not read files of 0 bytes"

DEFAULT_GLOB = "*.{pcap,pcapng,cap,pcap.gz,pcapng.gz}"
"""Which files of a directory are read (Hadoop glob syntax, matched on the name)."""


class MissingPathError(FileNotFoundError):
    """A path given to read matches no file or directory."""

    def __init__(self, path: str) -> None:
        super().__init__(f"no such file or directory: {path}")
        self.path = path


@dataclass(frozen=True)
class Targets:
    """The paths to read, expanded on the driver."""

    files: tuple[str, ...] = ()  # named (or matched by a glob) on the command line
    directories: tuple[str, ...] = ()  # listed by Spark, filtered by the glob
    missing: tuple[str, ...] = ()  # matched nothing (kept only when skipping)


def resolve_paths(
    spark: SparkSession, paths: Iterable[str], *, skip_missing: bool = False
) -> Targets:
    """Expand globs and sort each path into files and directories, on the driver.

    A path that matches nothing raises ``MissingPathError`` unless ``skip_missing``.
    Spark would fail such a path only when the job runs; expanding here also
    avoids Spark's noisy probing of a glob as if it were a directory.
    """
    jvm = spark.sparkContext._jvm
    if jvm is None:  # only a stopped context has no gateway
        raise RuntimeError("the SparkContext is stopped: it has no JVM gateway")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
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


# Spark packs small files into one read task unless opening a file "costs" as much as
# a whole task; with this cost every capture gets its own task (and its own core).
ONE_FILE_PER_TASK_CONF = {"spark.sql.files.openCostInBytes": str(1 << 40)}


@dataclass(frozen=True)
class Fleet:
    """The decoded captures (cached): pair rows plus one status row per capture."""

    decoded: DataFrame
    cached: DataFrame | None = None  # what ``unpersist`` releases
    missing: tuple[str, ...] = ()  # paths skipped because they matched nothing

    @property
    def pairs(self) -> DataFrame:
        """The pairs table: ``dissector.schema.COLUMNS``, in order, one row per pair."""
        from pyspark.sql import functions as F

        return self.decoded.where(F.col(INFO_COLUMN).isNull()).drop(INFO_COLUMN)

    @property
    def captures(self) -> DataFrame:
        """One row per capture: ``capture`` plus ``typemap.CAPTURE_INFO``."""
        from pyspark.sql import functions as F

        info = [F.col(f"{INFO_COLUMN}.{c.name}").alias(c.name) for c in CAPTURE_INFO]
        return self.decoded.where(F.col(INFO_COLUMN).isNotNull()).select("capture", *info)

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


def read_binary(
    spark: SparkSession,
    targets: Targets,
    *,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
    max_bytes: int = MAX_CAPTURE_BYTES,
) -> DataFrame:
    """``binaryFile`` rows (path, content) of the captures, one task per capture.

    ``glob`` filters the files found in ``targets.directories`` (None: every file);
    ``targets.files`` are read whatever their name. Files over ``max_bytes`` are left
    out without being read (``binaryFile`` applies a filter on ``length`` before it
    loads a file); ``load`` flags them.

    Sets ``ONE_FILE_PER_TASK_CONF`` on the session: Spark plans file splits when an
    action runs, so the setting must stay in effect (it only changes how file scans
    of this session are split into tasks).
    """
    from pyspark.sql import functions as F

    if not targets.files and not targets.directories:
        raise ValueError("no capture paths given")
    for key, value in ONE_FILE_PER_TASK_CONF.items():
        spark.conf.set(key, value)
    parts = []
    if targets.files:
        parts.append(spark.read.format("binaryFile").load(list(targets.files)))
    if targets.directories:
        reader = spark.read.format("binaryFile")
        if recursive:
            reader = reader.option("recursiveFileLookup", "true")
        if glob:
            reader = reader.option("pathGlobFilter", glob)
        parts.append(reader.load(list(targets.directories)))
    files = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    return files.where(F.col("length") <= max_bytes).select("path", "content")


def load(
    spark: SparkSession,
    paths: str | Iterable[str],
    *,
    options: Options | None = None,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
    skip_missing: bool = False,
    batch_rows: int = 4096,
    max_bytes: int = MAX_CAPTURE_BYTES,
) -> Fleet:
    """Decode every capture under ``paths`` (files, directories or globs) and cache it.

    Runs one Spark job (the decoding); the rows stay cached (memory, then disk) for
    the tables built from them until ``Fleet.unpersist``. Each row's ``capture`` is
    the file's full URI as Spark lists it (``file:/...``, ``hdfs://...``). ``glob``
    selects the files of directories (see ``read_binary``); a path matching nothing
    raises ``MissingPathError``, or with ``skip_missing`` lands in ``Fleet.missing``.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    config = DecodeConfig(options=options or Options(), batch_rows=batch_rows)
    given = [paths] if isinstance(paths, str) else list(paths)
    if not given:
        raise ValueError("no capture paths given")
    targets = resolve_paths(spark, given, skip_missing=skip_missing)
    if not targets.files and not targets.directories:
        raise MissingPathError(", ".join(targets.missing))
    binary = read_binary(spark, targets, recursive=recursive, glob=glob, max_bytes=max_bytes)
    listed = [path_string(uri) for uri in binary.inputFiles()]
    decoded = binary.mapInArrow(partial(_decode, config=config), decoded_spark_schema())
    cached = decoded.persist(StorageLevel.MEMORY_AND_DISK)
    trailers = cached.where(F.col(INFO_COLUMN).isNotNull()).select("capture").collect()
    unread = sorted(set(listed) - {r["capture"] for r in trailers})
    if unread:
        batch = failed_batch(_why_unread(spark, unread, max_bytes))
        table = pa.Table.from_batches([batch])
        decoded = cached.unionByName(spark.createDataFrame(table, decoded_spark_schema()))
    else:
        decoded = cached
    return Fleet(decoded, cached, targets.missing)


def _why_unread(
    spark: SparkSession, unread: list[str], max_bytes: int
) -> list[tuple[str, int, str]]:
    """(capture, size, why) for listed files that no task decoded.

    A file of 0 bytes yields no ``binaryFile`` row at all, a file over ``max_bytes``
    was filtered out; asking for the ``length`` column alone reads no content.
    """
    rows = spark.read.format("binaryFile").load(unread).select("path", "length").collect()
    sizes = {r["path"]: int(r["length"]) for r in rows}
    out = []
    for capture in unread:
        size = sizes.get(capture, 0)
        why = (
            f"too large: {size} bytes, over the {max_bytes} bytes a task reads whole"
            if size
            else EMPTY_ERROR
        )
        out.append((capture, size, why))
    return out


def path_string(uri: str) -> str:
    """A listed file's URI as the ``path`` column spells it (Hadoop ``Path.toString``).

    ``inputFiles`` gives ``file:///a%20b`` where the rows say ``file:/a b``.
    """
    parts = urlsplit(uri)
    if not parts.scheme:
        return unquote(uri)
    authority = f"//{parts.netloc}" if parts.netloc else ""
    return f"{parts.scheme}:{authority}{unquote(parts.path)}"


def _decode(batches: Iterator[pa.RecordBatch], config: DecodeConfig) -> Iterator[pa.RecordBatch]:
    return decode_batches(batches, config)
