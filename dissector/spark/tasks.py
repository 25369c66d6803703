"""Inside a Spark task: capture units -> Arrow (pairs, analytics tables, one trailer
row per capture file).

``decode_partition`` is the function handed to ``DataFrame.mapInArrow`` over the job's
unit rows (``UNIT_SCHEMA``): ``files``, the capture URIs of one *unit* (what one task
decodes: a list of files, so that a capture set can be one unit), and ``content``, the
bytes Spark read for a one-file unit, or null.

* **Reading.** A local file (a ``file:`` URI: the same path on every node, as for the
  output) is opened by the core itself, which streams it from disk: no copy of the
  capture in the JVM or in Python. Other paths (``hdfs://``, ``s3a://``, ...) arrive as
  the row's ``content``, read by Spark's ``binaryFile`` source, and go to the core from
  that buffer (``options.CaptureBytes``): no temporary file.
* **Rows.** The core's Arrow batches, cast by Arrow to Spark's units
  (``dissector.table.frame.pairs_table``: dictionaries -> strings, ns -> us): no Python
  object per pair. The analytics tables (partitions, groups, versions) come from the
  same pass of the core, batch by batch beside the pairs (``spark.analytics.PassTables``;
  lag from the capture's partitions rows at its end): each capture is read once. The
  task's Parquet writer takes them as the core built them, writing Spark's units itself
  (``analytics.PARQUET_AS_SPARK``); rows handed to Spark are cast.
* **Where they go.** With ``DecodeConfig.output`` (a directory pyarrow can write), the
  task writes each table's rows to its own Parquet file there (``ParquetOutput``; the
  pairs with frame's writer, as ``analyze -o``) and hands Spark only the trailer rows:
  the JVM never holds a pair. Without it, the rows themselves go to Spark
  (``RowOutput``, ``typemap.decoded_arrow_schema``), at most ``spark_batch_rows`` a batch.

A capture that cannot be decoded never fails the task: its pairs (those decoded before
the error) are kept, one flagged row says why (``status`` malformed, ``decode_error``
``capture_failed: ...``) and its trailer row has ``failed`` set.

This module needs pyarrow and the offline pipeline, never pyspark.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa

from dissector.accounting import Counters
from dissector.options import AnySource, CaptureBytes, CaptureSet, Options
from dissector.schema import Status
from dissector.spark.analytics import (
    PARQUET_AS_SPARK,
    PassTables,
    arrow_schema,
    in_spark_units,
    struct_column,
    struct_fields,
    written_as_is,
)
from dissector.spark.partials import SummaryPartials
from dissector.spark.typemap import (
    CAPTURE_INFO,
    CAPTURES_TABLE,
    INFO_COLUMN,
    PAIRS_TABLE,
    captures_arrow_schema,
    decoded_arrow_schema,
)

CAPTURE_FAILED = "capture_failed"
"""Prefix of ``decode_error`` on the row that flags a capture that failed to decode."""

FAILED_STATUS = Status.MALFORMED.value
EMPTY_ERROR = "empty file: 0 bytes, not a capture"

UNIT_SCHEMA = "files array<string>, content binary"
"""The decode stage's input rows (Spark DDL): a unit's capture URIs, in order, and the
bytes of a one-file unit read by Spark (null: the task opens the local files)."""

UNANSWERED_TABLE = "unanswered_requests"
"""Pairs-shaped summary table: the requests without a response in their capture."""


def partials_folder(token: str) -> str:
    """The folder under the output where the tasks of job ``token`` write the
    summaries' partial tables (the driver merges and removes it)."""
    return f"_summary-parts-{token}"


CORE_BATCH_ROWS = 65_536  # rows per core batch (and Parquet row group)
SPARK_BATCH_ROWS = 8_192  # rows per Arrow batch handed to the JVM


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """What every task needs; pickled into the tasks, so only plain data (and the
    progress accumulators, which Spark ships to tasks by design)."""

    options: Options = field(default_factory=Options)
    tables: tuple[str, ...] = ()  # analytics tables made in the same pass
    output: str | None = None  # a directory pyarrow can write; None: rows go to Spark
    token: str = ""  # the job's file-name token (with ``output``)
    batch_rows: int = CORE_BATCH_ROWS
    spark_batch_rows: int = SPARK_BATCH_ROWS
    progress: Any = None  # ``Progress`` accumulators, or None
    # With ``output``: the throughput windows' length (microseconds) of the summaries'
    # partial tables the task writes beside the pairs (``spark.partials``); None: none.
    window_us: int | None = None
    # The core reads a step ahead, and reads packets, on threads of their own
    # (``wire.core.iter_tables``' ``ahead``): set in each task by the cores Spark gave
    # it (``task_config``).
    core_ahead: bool = True


@dataclass(frozen=True, slots=True)
class Progress:
    """Spark accumulators the tasks add to as each capture file is done; the driver
    reads them (updated when a task ends) to show files and bytes done."""

    files: Any
    bytes: Any


@dataclass(slots=True)
class CaptureResult:
    """How one capture (a file, or a capture set) went; becomes its ``captures`` row."""

    files: list[str]
    size_bytes: int
    pairs: int = 0
    failed: bool = False
    error: str | None = None
    decode_seconds: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in CAPTURE_INFO}


class CaptureFailed(Exception):
    """Decoding one capture stopped; the message names the cause."""


def describe_error(exc: BaseException) -> str:
    """One line saying why: the cause's type, then its message."""
    if isinstance(exc, CaptureFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc or type(exc).__name__}"


# ---------------------------------------------------------------- small tables


def flag_table(capture: str, error: str) -> pa.Table:
    """The pairs row standing for a capture that failed: status malformed, why in
    decode_error (Spark's units, as ``pairs_table`` gives)."""
    from dissector.table.frame import pairs_arrow_schema

    why = f"{CAPTURE_FAILED}: {error}"
    schema = pairs_arrow_schema()
    values = {"capture": capture, "status": FAILED_STATUS, "decode_error": why}
    arrays = [pa.array([values.get(f.name)], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def trailer_table(captures: Iterable[tuple[str, CaptureResult]]) -> pa.Table:
    """``captures`` rows (``typemap.captures_arrow_schema``)."""
    rows = [{"capture": capture, **result.as_dict()} for capture, result in captures]
    return pa.Table.from_pylist(rows, schema=captures_arrow_schema())


def refused_tables(captures: Iterable[tuple[str, int, str]]) -> tuple[pa.Table, pa.Table]:
    """Flag rows (pairs) and trailers (captures) for files no task read: (capture, size
    in bytes, why) each."""
    flags, trailers = [], []
    for capture, size_bytes, why in captures:
        flags.append(flag_table(capture, why))
        result = CaptureResult([capture], size_bytes, failed=True, error=why)
        trailers.append((capture, result))
    from dissector.table.frame import pairs_arrow_schema

    pairs = pa.concat_tables(flags) if flags else pairs_arrow_schema().empty_table()
    return pairs, trailer_table(trailers)


def with_capture_names(table: pa.Table, names: dict[str, str]) -> pa.Table:
    """``table`` with each ``capture`` value renamed by ``names`` (the local paths the
    core opened -> their URIs); the core's capture column is dictionary-encoded, so
    only the dictionary is renamed."""
    index = table.schema.get_field_index("capture")
    column = table.column(index)
    if not pa.types.is_dictionary(column.type):
        raise TypeError(f"the core's capture column is {column.type}, not a dictionary")
    chunks = []
    for chunk in column.chunks:
        words = [names.get(w, w) for w in chunk.dictionary.to_pylist()]
        chunks.append(pa.DictionaryArray.from_arrays(chunk.indices, pa.array(words, pa.string())))
    return table.set_column(index, table.field(index), pa.chunked_array(chunks, column.type))


def unanswered(pairs: pa.Table) -> pa.Table:
    """The rows of ``pairs`` that are unanswered requests (``analytics.stats``' rule)."""
    import pyarrow.compute as pc

    from dissector.schema import UNANSWERED_STATUSES

    wanted = pa.array(UNANSWERED_STATUSES, pa.string())
    return pairs.filter(pc.is_in(pairs.column("status"), value_set=wanted))


# ---------------------------------------------------------------- outputs


class Output(Protocol):
    """Where a task's tables go; each call returns the batches to hand Spark."""

    def pairs(self, table: pa.Table) -> Iterator[pa.RecordBatch]: ...
    def flag(self, table: pa.Table) -> Iterator[pa.RecordBatch]: ...
    def table(self, name: str, table: pa.Table) -> Iterator[pa.RecordBatch]: ...
    def trailer(self, capture: str, result: CaptureResult) -> Iterator[pa.RecordBatch]: ...
    def finish(self) -> None: ...
    def abort(self) -> None: ...


class RowOutput:
    """The rows themselves go to Spark: ``typemap.decoded_arrow_schema`` with one struct
    column per analytics table."""

    def __init__(self, tables: tuple[str, ...], batch_rows: int) -> None:
        self.schema = decoded_arrow_schema(struct_fields(tables))
        self.batch_rows = batch_rows

    def pairs(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        from dissector.table.frame import pairs_table

        yield from self._rows(PAIRS_TABLE, pairs_table(table).columns, [])

    def flag(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        return self.pairs(table)

    def table(self, name: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        rows = in_spark_units(table, name).combine_chunks()
        structs = pa.StructArray.from_arrays(
            [c.chunk(0) if c.num_chunks else pa.array([], c.type) for c in rows.columns],
            fields=list(arrow_schema(name)),
        )
        yield from self._rows(name, [rows.column("capture")], [(struct_column(name), structs)])

    def trailer(self, capture: str, result: CaptureResult) -> Iterator[pa.RecordBatch]:
        info = pa.array([result.as_dict()], type=self.schema.field(INFO_COLUMN).type)
        capture_col = pa.array([capture], pa.string())
        yield from self._rows(CAPTURES_TABLE, [capture_col], [(INFO_COLUMN, info)])

    def _rows(
        self, kind: str, pair_columns: list[Any], others: list[tuple[str, pa.Array]]
    ) -> Iterator[pa.RecordBatch]:
        """A table of ``self.schema`` where only the given columns are set: the pairs
        columns (all of them, or ``capture`` alone) and ``others`` by name."""
        n = len(pair_columns[0])
        if n == 0:
            return
        given = dict(others)
        if len(pair_columns) == 1:
            given["capture"] = pair_columns[0]
        else:
            names = self.schema.names[1 : 1 + len(pair_columns)]
            given.update(zip(names, pair_columns, strict=True))
        arrays = [pa.repeat(pa.scalar(kind, pa.string()), n)]
        for f in list(self.schema)[1:]:
            arrays.append(given[f.name] if f.name in given else pa.nulls(n, f.type))
        yield from pa.Table.from_arrays(arrays, schema=self.schema).to_batches(self.batch_rows)

    def finish(self) -> None:
        pass

    def abort(self) -> None:
        pass


class ParquetOutput:
    """Each table's rows to one Parquet file per task under ``location/<table>/``; Spark
    gets the trailer rows (``typemap.captures_arrow_schema``) alone. The pairs also go,
    filtered, to ``unanswered_requests`` (the one summary that is rows, not counts).

    A file is written as ``.<name>.<attempt>.tmp`` and renamed when the task is done:
    a failed, retried or speculative attempt never leaves half a file under the name
    readers see (dot files are hidden from Spark, pyarrow and pandas). A table without
    rows in this task gets no file.

    With ``summary``, the pairs are also folded into the summaries' partial tables
    (``spark.partials``), written when the task ends under ``location/<partials>/``.

    The pairs are held until ``hold_rows`` of them are there (or a flag row, or the
    task's end, comes): the core's batches are cut by its pairs and table rows
    together, so a long-poll capture gives its pairs in pieces of a few thousand, and
    each piece written and folded on its own cost a row group and a round of the
    partials' hash aggregations (half of the partials' time on such a capture).
    """

    def __init__(
        self,
        location: str,
        token: str,
        partition: int,
        attempt: int,
        summary: SummaryPartials | None = None,
        hold_rows: int = CORE_BATCH_ROWS,
    ) -> None:
        from dissector.spark.write import filesystem_for

        self.filesystem, self.base = filesystem_for(location)
        self.name = f"part-{partition:05d}-{token}.parquet"
        self.attempt = attempt
        self.writers: dict[str, Any] = {}
        self.summary = summary
        self.partials = partials_folder(token)
        self.hold_rows = hold_rows
        self.held: list[pa.Table] = []  # pairs (Parquet schema) not written yet
        self.held_rows = 0

    def _temporary(self, table: str) -> str:
        return f"{self.base}/{table}/.{self.name}.{self.attempt}.tmp"

    def _writer(self, table: str, schema: pa.Schema | None = None) -> Any:
        writer = self.writers.get(table)
        if writer is None:
            import pyarrow.parquet as pq

            from dissector.table.frame import open_pairs_parquet

            where = self._temporary(table)
            self.filesystem.create_dir(f"{self.base}/{table}", recursive=True)
            if table in (PAIRS_TABLE, UNANSWERED_TABLE):
                writer = open_pairs_parquet(where, filesystem=self.filesystem)
            elif schema is not None:
                writer = pq.ParquetWriter(
                    where, schema, filesystem=self.filesystem, **PARQUET_AS_SPARK
                )
            else:
                writer = pq.ParquetWriter(where, arrow_schema(table), filesystem=self.filesystem)
            self.writers[table] = writer
        return writer

    def pairs(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        from dissector.table.frame import pairs_table

        if table.num_rows:
            self.held.append(pairs_table(table))
            self.held_rows += table.num_rows
            if self.held_rows >= self.hold_rows:
                self._write_held()
        return iter(())

    def _write_held(self) -> None:
        """The pairs held, as one piece: written, filtered, folded."""
        if not self.held:
            return
        rows = pa.concat_tables(self.held)
        self.held, self.held_rows = [], 0
        self._writer(PAIRS_TABLE).write_table(rows)
        lost = unanswered(rows)
        if lost.num_rows:
            self._writer(UNANSWERED_TABLE).write_table(lost)
        if self.summary is not None:
            self.summary.add(rows)

    def flag(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """The row flagging a failed capture: a pairs row, not a pair to summarise
        (after the pairs held, which came before it)."""
        from dissector.table.frame import pairs_table

        self._write_held()
        self._writer(PAIRS_TABLE).write_table(pairs_table(table))
        return iter(())

    def table(self, name: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        if table.num_rows and written_as_is(name):
            self._writer(name, table.schema).write_table(table)
        elif table.num_rows:
            self._writer(name).write_table(in_spark_units(table, name))
        return iter(())

    def trailer(self, capture: str, result: CaptureResult) -> Iterator[pa.RecordBatch]:
        yield from trailer_table([(capture, result)]).to_batches()

    def finish(self) -> None:
        self._write_held()
        if self.summary is not None:
            for name, table in self.summary.tables():
                self._writer(f"{self.partials}/{name}", table.schema).write_table(table)
        writers, self.writers = self.writers, {}
        for writer in writers.values():
            writer.close()
        for table in writers:
            final = f"{self.base}/{table}/{self.name}"
            self.filesystem.move(self._temporary(table), final)

    def abort(self) -> None:
        self.held, self.held_rows = [], 0
        writers, self.writers = self.writers, {}
        for table, writer in writers.items():
            try:
                writer.close()
                self.filesystem.delete_file(self._temporary(table))
            except Exception:  # the task is failing anyway; Spark reports why
                pass


# ---------------------------------------------------------------- capture sets

FACTS_SCHEMA = pa.schema(
    [
        pa.field("uri", pa.string()),
        pa.field("error", pa.string()),
        pa.field("format", pa.string()),
        pa.field("link_types", pa.list_(pa.int64())),
        pa.field(
            "interfaces",
            pa.list_(
                pa.struct(
                    [
                        pa.field("linktype", pa.int64()),
                        pa.field("snaplen", pa.int64()),
                        pa.field("name", pa.string()),
                    ]
                )
            ),
        ),
        pa.field("records", pa.int64()),
        pa.field("first_ns", pa.int64()),
        pa.field("last_ns", pa.int64()),
        pa.field("min_ns", pa.int64()),
        pa.field("max_ns", pa.int64()),
        pa.field("damaged", pa.bool_()),
    ]
)
"""One row per file of the facts stage: ``wire.sets.FileFacts`` (named by URI), or the
error that kept the file from being read."""


def facts_row(uri: str) -> dict[str, Any]:
    """The facts of a local capture file as a ``FACTS_SCHEMA`` row (a native walk over
    its record headers: no packet decoded)."""
    from dataclasses import asdict

    from dissector.wire.sets import file_facts

    path = local_path(uri)
    try:
        if path is None:
            raise CaptureFailed(f"not a local file: {uri}")
        facts = file_facts(path)
    except Exception as exc:  # such a file stands alone; decoding it says why
        return {"uri": uri, "error": describe_error(exc)}
    row = {f.name: getattr(facts, f.name) for f in FACTS_SCHEMA if hasattr(facts, f.name)}
    row["interfaces"] = [asdict(i) for i in facts.interfaces]
    row["link_types"] = list(facts.link_types)
    return {**row, "uri": uri, "error": None}


def facts_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: rows of ``uri`` -> ``FACTS_SCHEMA`` rows."""
    for batch in batches:
        rows = [facts_row(uri) for uri in batch.column("uri").to_pylist()]
        yield pa.RecordBatch.from_pylist(rows, schema=FACTS_SCHEMA)


def facts_from_rows(rows: Iterable[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    """``FACTS_SCHEMA`` rows -> (``FileFacts`` with the URI as source, URIs without facts)."""
    from dissector.wire.sets import FileFacts, Interface

    facts, unread = [], []
    for row in rows:
        if row["error"] is not None:
            unread.append(row["uri"])
            continue
        facts.append(
            FileFacts(
                source=row["uri"],
                format=row["format"],
                link_types=tuple(row["link_types"]),
                interfaces=tuple(Interface(**i) for i in row["interfaces"]),
                records=row["records"],
                first_ns=row["first_ns"],
                last_ns=row["last_ns"],
                min_ns=row["min_ns"],
                max_ns=row["max_ns"],
                damaged=row["damaged"],
            )
        )
    return facts, unread


# ---------------------------------------------------------------- decoding


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI as Hadoop spells it (``file:/a b``,
    ``file:///a``), else None. Hadoop's path strings are not percent-encoded."""
    if not uri.startswith("file:"):
        return None
    rest = uri[len("file:") :]
    if rest.startswith("//"):  # file:///path or file://localhost/path
        host, _, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            return None
        rest = "/" + path
    return rest


def capture_source(uris: list[str], content: Any) -> tuple[AnySource, int, dict[str, str]]:
    """What the core reads for one unit, its size in bytes, and the names to give its
    rows (the local paths the core opens -> their URIs).

    ``content`` (the bytes Spark read for a one-file unit) wins; else the files must be
    local to this node. Several files are one capture set, read in the order given.
    """
    if content is not None:
        data = memoryview(content)
        return CaptureBytes(uris[0], data), data.nbytes, {}
    paths = []
    size = 0
    for uri in uris:
        path = local_path(uri)
        if path is None:
            raise CaptureFailed(f"not a local file and no content read by Spark: {uri}")
        try:
            size += os.path.getsize(path)
        except OSError as exc:
            raise CaptureFailed(f"{type(exc).__name__}: {uri}: {exc.strerror or exc}") from None
        paths.append(path)
    names = dict(zip(paths, uris, strict=True))
    source: AnySource = paths[0] if len(paths) == 1 else CaptureSet(tuple(paths))
    return source, size, names


def _decoded(
    source: AnySource,
    names: dict[str, str],
    config: DecodeConfig,
    counters: Counters,
    result: CaptureResult,
) -> Iterator[tuple[str, pa.Table]]:
    """(table name, rows) of one unit as the core's pass gives them: the pairs
    (``PAIRS_TABLE``, the core's Arrow) and, in the same pass, the analytics tables of
    ``config.tables`` (the core's Arrow; ``lag`` in Spark's units); ``capture`` renamed
    by ``names``. An error that stops decoding ends them and is noted in ``result``
    (only the decoding's errors: the caller's, e.g. writing, propagate); the rows before
    it stay, as for ``analyze``.
    """
    from dissector.wire.core import iter_tables

    def rename(table: pa.Table) -> pa.Table:
        return with_capture_names(table, names) if names else table

    analytics = PassTables(config.tables, rename) if config.tables else None
    try:
        if result.size_bytes == 0:
            raise CaptureFailed(EMPTY_ERROR)
        tables = iter_tables(
            [source],
            config.options,
            counters=counters,
            batch_rows=config.batch_rows,
            tables=analytics.collector() if analytics is not None else None,
            ahead=config.core_ahead,
        )
        for table in tables:
            if analytics is not None:
                yield from analytics.drain()
            yield PAIRS_TABLE, rename(table)
        if analytics is not None:
            yield from analytics.finish()
    except Exception as exc:  # one bad capture must not fail the fleet job
        result.failed = True
        result.error = describe_error(exc)
    if result.failed and analytics is not None:
        yield from analytics.drain()  # what the pass built before the error


def decode_capture(
    uris: list[str], content: Any, config: DecodeConfig, out: Output
) -> Iterator[pa.RecordBatch]:
    """Every table of one unit (a capture file, or the files of a capture set read as
    one capture) into ``out``, from one pass of the core; yields what goes to Spark."""
    started = time.monotonic()
    counters = Counters()
    capture = uris[0]  # a set's rows carry its first file's name
    result = CaptureResult(files=list(uris), size_bytes=0)
    source: AnySource | None = None
    names: dict[str, str] = {}
    try:
        source, result.size_bytes, names = capture_source(uris, content)
    except CaptureFailed as exc:
        result.failed, result.error = True, describe_error(exc)
    if source is not None:
        for name, table in _decoded(source, names, config, counters, result):
            if name == PAIRS_TABLE:
                result.pairs += table.num_rows
                yield from out.pairs(table)
            else:
                yield from out.table(name, table)
    if result.failed:
        yield from out.flag(flag_table(capture, result.error or ""))
    result.decode_seconds = time.monotonic() - started
    result.counters = counters.as_dict()
    if config.progress is not None:
        config.progress.files.add(len(uris))
        config.progress.bytes.add(result.size_bytes)
    yield from out.trailer(capture, result)


def unit_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[list[str], Any]]:
    """(capture URIs, content buffer or None) of each unit row, read in place."""
    for batch in batches:
        files = batch.column("files")
        contents = batch.column("content")
        for i in range(batch.num_rows):
            content = contents[i]
            yield files[i].as_py(), content.as_buffer() if content.is_valid else None


def task_config(config: DecodeConfig) -> DecodeConfig:
    """``config`` for the running task: the core reads ahead on a thread of its own,
    and reads packets on another, only when Spark gave the task more than one core
    (``spark.task.cpus``). Spark runs a task per core it was given, so with one each
    those threads only compete with the other tasks' work for the same cores: on 2
    cores with 2 tasks of a long-poll capture, the thread ahead cost 6% more CPU and 7%
    more time a task; the packets' thread 8% more CPU (0.778 s against 0.719 s a task,
    mean of 10 alternating in one process)."""
    from pyspark import TaskContext  # only inside a task: pyspark is on its path there

    ctx = TaskContext.get()
    cpus = ctx.cpus() if ctx is not None else 1
    return replace(config, core_ahead=cpus > 1)


def open_output(config: DecodeConfig) -> Output:
    """This task's output: Parquet files under ``config.output``, or rows to Spark."""
    if config.output is None:
        return RowOutput(config.tables, config.spark_batch_rows)
    from pyspark import TaskContext  # only inside a task: pyspark is on its path there

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    summary = SummaryPartials(config.window_us) if config.window_us else None
    return ParquetOutput(
        config.output, config.token, partition, attempt, summary, hold_rows=config.batch_rows
    )


def decode_units(
    units: Iterable[tuple[list[str], Any]], config: DecodeConfig, out: Output
) -> Iterator[pa.RecordBatch]:
    """Every unit's tables into ``out``: a unit of several files is a capture set, read
    by the core as one continuous capture."""
    try:
        for files, content in units:
            yield from decode_capture(files, content, config, out)
    except BaseException:
        out.abort()
        raise
    out.finish()


def decode_partition(
    batches: Iterable[pa.RecordBatch], config: DecodeConfig
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: unit rows (``UNIT_SCHEMA``) -> trailer rows, or every
    row when ``config.output`` is None."""
    # PySpark's worker runs a full collection after every task. What lives now (the
    # modules a first task imported, caches; the last task's garbage is gone) lives on:
    # frozen, it is not traversed again (that walk over pyarrow's, pandas' and our
    # modules' objects took 0.04 to 0.07 s of CPU a task).
    gc.freeze()
    config = task_config(config)
    yield from decode_units(unit_rows(batches), config, open_output(config))


def output_arrow_schema(config: DecodeConfig) -> pa.Schema:
    """What ``decode_partition`` hands Spark under ``config``."""
    if config.output is None:
        return decoded_arrow_schema(struct_fields(config.tables))
    return captures_arrow_schema()
