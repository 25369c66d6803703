"""Pairs-shaped tables written by the tasks themselves, with ``dissector.table.frame``'s writer.

Spark's own Parquet writer cannot store the pandas metadata that ``analyze -o`` and
``live -o`` store, so a Spark pairs table would read back with other dtypes. Here each
task writes its partition with ``frame.open_pairs_parquet`` (same schema, same
metadata, times as UTC microseconds), through pyarrow's file systems: local paths
(the same path on every node: a shared mount, or the one machine of ``local[*]``),
``s3://``, ``gs://``, ``hdfs://`` (with libhdfs). ``python_writable`` says whether
pyarrow can open a location; for others (e.g. ``s3a://``) the job falls back to
Spark's writer, which keeps the Arrow types but not the pandas metadata.

A task writes ``.<name>.<attempt>.tmp`` and renames it: a retried or speculative
attempt never leaves half a file under the name readers see (dot files are hidden
from Spark, pyarrow and pandas).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa

from dissector.table.frame import open_pairs_parquet, pairs_table, write_pairs_parquet

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

WRITTEN_SCHEMA = "file string, rows long"
WRITE_MODES = ("overwrite", "append")


def filesystem_for(location: str) -> tuple[Any, str]:
    """pyarrow's file system for ``location`` and the path on it.

    Raises (``ValueError``, ``OSError``, ``pyarrow.ArrowException``) when pyarrow has no
    file system for it.
    """
    from pyarrow import fs

    local = local_folder(location)
    if local is not None:
        return fs.LocalFileSystem(), local
    return fs.FileSystem.from_uri(location)


def local_folder(location: str) -> str | None:
    """The path of an output ``location`` on the local file system (a plain path, a
    drive letter, ``file:``), absolute; None for another file system."""
    parts = urlsplit(location)
    if not parts.scheme or len(parts.scheme) == 1:  # a plain path (or a drive letter)
        return os.path.abspath(location)
    if parts.scheme == "file":
        return parts.path
    return None


def python_writable(location: str) -> bool:
    """Whether the tasks can write ``location`` through pyarrow (checked on the driver)."""
    try:
        filesystem_for(location)
    except (ValueError, OSError, pa.ArrowException):
        return False
    return True


def _write_partition(
    batches: Iterator[pa.RecordBatch], location: str, token: str
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: this partition's rows -> one Parquet file (none if empty)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    filesystem, base = filesystem_for(location)
    name = f"part-{partition:05d}-{token}.parquet"
    temporary = f"{base}/.{name}.{attempt}.tmp"
    writer = None
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = open_pairs_parquet(temporary, filesystem=filesystem)
            writer.write_table(pairs_table(batch))
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return
    filesystem.move(temporary, f"{base}/{name}")
    yield pa.RecordBatch.from_pydict({"file": [name], "rows": [rows]})


def write_pairs(df: DataFrame, location: str, *, mode: str = "overwrite") -> int:
    """Write ``df`` (contract columns) under ``location`` as one file per partition.

    Returns the rows written. ``overwrite`` empties the directory first; ``append``
    adds files beside the ones there. A table without rows still gets one (empty)
    file, so that readers find its schema.
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {WRITE_MODES}: {mode!r}")
    from dissector.schema import COLUMN_NAMES

    if not urlsplit(location).scheme:
        # Relative to the driver's directory, as Spark's writer would resolve it; a
        # task's working directory is another one.
        location = os.path.abspath(location)
    filesystem, base = filesystem_for(location)
    if mode == "overwrite":
        filesystem.delete_dir_contents(base, missing_dir_ok=True)
    filesystem.create_dir(base, recursive=True)
    token = uuid.uuid4().hex[:12]  # one job's files, told apart from an appended job's
    write = partial(_write_partition, location=location, token=token)
    written = df.select(*COLUMN_NAMES).mapInArrow(write, WRITTEN_SCHEMA).collect()
    if not written:
        from dissector.table.frame import records_to_frame

        write_pairs_parquet(
            records_to_frame([]), f"{base}/part-00000-{token}.parquet", filesystem=filesystem
        )
    return sum(int(r["rows"]) for r in written)
