"""The native core's Python face: captures in, Arrow tables of pairs (or exchanges) out.

The per-packet and per-pair work (capture reading, TCP reassembly, framing,
correlation, summary decode) runs in ``dissector._core`` (Rust, ``native/``). This
module hands it the spec model compiled by ``dissector.protocol`` (protocol
knowledge stays there), turns its column buffers into Arrow, and summarises the rare
pairs the native interpreter defers (malformed bodies, versions it has no layout
for) with the full Python decoder, so decode-error wording has one source.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from dissector.accounting import Counters
from dissector.options import (
    AnySource,
    CaptureBytes,
    CaptureSet,
    CaptureSource,
    Options,
    source_name,
)
from dissector.schema import COLUMNS, arrow_type, frame_dtype
from dissector.stages import CaptureError, Endpoint, Exchange, Frame
from dissector.tables_schema import CONTRACTS
from dissector.wire.native import arrow_column, native

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector._core import Analyzer, KeyLog, LiveRun, Model, PcapHandle, TablesBatch
    from dissector._core import Exchange as CoreExchange
    from dissector._core import Frame as CoreFrame
    from dissector.protocol.messages import Decoded
    from dissector.protocol.summary import TopicNames
    from dissector.stages import Decoder, PairRecord
    from dissector.tls import KeyLogs
    from dissector.wire.native import ColumnBuffer
    from dissector.wire.tables import CaptureTables, TableCollector

ArrowColumn = TypeVar("ArrowColumn", "pa.Array", "pa.ChunkedArray")
"""One column of a table (chunked) or of a record batch: functions give back what they took."""

BATCH_ROWS = 65_536
"""Rows per Arrow batch: memory of a streaming run is bounded by this, not the capture."""


def _default_decoder() -> Decoder:
    from dissector import protocol

    return protocol


@dataclass(frozen=True)
class _Model:
    native: Model
    extracts: tuple[tuple[str, str, str], ...]  # (column, direction, field)


_MODELS: dict[tuple[str, ...], _Model] = {}


def _model(decoder: Decoder) -> _Model:
    """The exported spec model of a decoder, built once per spec set and process."""
    _core = native()

    key = tuple(getattr(decoder, "spec_dirs", ()))
    model = _MODELS.get(key)
    if model is None:
        if key:
            text, extracts = _exported(decoder)
        else:  # the installed specs: kept with the start-up cache (0.7 s to build)
            from dissector.protocol.diskcache import load_or_build

            # The extracts are stored beside the text: parsing the whole JSON again for
            # them would cost every start-up about 10 ms.
            text, extracts = load_or_build("native-model-extracts", lambda: _exported(decoder))
        model = _MODELS[key] = _Model(_core.Model(text), extracts)
    return model


def _exported(decoder: Decoder) -> tuple[str, tuple[tuple[str, str, str], ...]]:
    """The spec model as the core reads it (JSON text), and its extract columns."""
    from dissector.protocol.export import export_model

    text = export_model(decoder)
    doc = json.loads(text)
    extracts = tuple((e["column"], e["direction"], e["field"]) for e in doc.get("extracts", ()))
    return text, extracts


@dataclass(frozen=True, slots=True)
class FallbackSummary:
    """The summary columns of a pair the native interpreter deferred, as the Python
    decoder gives them (the core reads them by attribute: ``PyFallbackSummary``)."""

    error_code: int | None
    error_name: str | None
    error_count: int | None
    topics: list[str]
    partitions: int | None
    records: int | None
    record_bytes: int | None
    compression: str | None
    throttle_ms: int | None
    decode_error: str | None
    fatal: bool  # the decode failure makes the frame unreadable (status malformed)
    extracts: list[int | None]  # the model's extract columns, in order
    assumed_version: int | None


class _Fallback:
    """Summaries of deferred pairs by the Python decoder; topic names per capture."""

    def __init__(self, decoder: Decoder, extracts: tuple[tuple[str, str, str], ...]) -> None:
        self.decoder = decoder
        self.extracts = extracts
        self.capture: str | None = None
        self.topics: TopicNames | None = None

    def __call__(
        self, api_key: int, api_version: int, req: bytes | None, resp: bytes | None, capture: str
    ) -> FallbackSummary:
        from dissector.stages import is_fatal

        if capture != self.capture:
            self.capture, self.topics = capture, self.decoder.TopicNames()
        d = self.decoder
        request = d.decode_request(req) if req is not None else None
        response = d.decode_response(resp, api_key, api_version) if resp is not None else None
        s = d.summarize(api_key, api_version, request, response, self.topics)
        bodies = {"request": request, "response": response}
        extracts = [_int_field(bodies[direction], name) for _, direction, name in self.extracts]
        return FallbackSummary(
            error_code=s.error_code,
            error_name=s.error_name,
            error_count=s.error_count,
            topics=list(s.topics),
            partitions=s.partitions,
            records=s.records,
            record_bytes=s.record_bytes,
            compression=s.compression,
            throttle_ms=s.throttle_ms,
            decode_error=s.decode_error,
            fatal=bool(s.decode_error) and is_fatal(request, response),
            extracts=extracts,
            assumed_version=s.assumed_version,
        )


def _int_field(decoded: Decoded | None, name: str) -> int | None:
    body = getattr(decoded, "body", None) if decoded is not None else None
    value = body.get(name) if isinstance(body, dict) else None
    return value if type(value) is int else None


def new_analyzer(
    options: Options,
    decoder: Decoder | None = None,
    *,
    exchanges: bool = False,
    keep_keys: Iterable[int] = (),
    tables: Collection[str] = (),
    pairs: bool = True,
    capture_budget: int | None = None,
    wire_thread: bool = True,
) -> Analyzer:
    """The core for one run; ``tables``: also build the analytics tables named
    (``wire.tables``; any name builds the versions table too; a table not named costs
    nothing: its APIs' bodies are not read for it); ``pairs``: build
    the pairs' rows (off: the tables alone); ``capture_budget``: bytes one capture may
    decompress in all (None: the core's default, 4 GiB); ``wire_thread``: the core reads
    packets on a thread of its own while it summarises the last ones (off: both on the
    thread that calls it, for a caller given one core)."""
    decoder = decoder or _default_decoder()
    if options.max_decompressed is not None:
        # Imports the Python decoder (messages, compile, summary: some 30 ms of every
        # start-up), so only when a cap asks for it; the run imports it on demand else.
        from dissector.protocol.bound_decoder import with_max_decompressed

        decoder = with_max_decompressed(decoder, options.max_decompressed)
    model = _model(decoder)
    _core = native()
    idle = options.idle_timeout_s
    budget = {"capture_budget": capture_budget} if capture_budget is not None else {}
    if options.max_decompressed is not None:  # the same cap for the core and the decoder
        budget["frame_cap"] = options.max_decompressed
    tls_keys = native_key_log(options.tls) if options.tls else None
    fallback = None
    if tables:
        from dissector.wire.tables import TablesFallback

        fallback = TablesFallback(decoder)
    return _core.Analyzer(
        model.native,
        sorted(options.broker_ports),
        options.find_kafka_by_heuristic,
        options.max_frame,
        int(idle * 1e9) if idle is not None else None,
        _Fallback(decoder, model.extracts),
        exchanges=exchanges,
        keep_keys=list(keep_keys),
        tls_keys=tls_keys,
        tables=sorted(tables),
        tables_fallback=fallback,
        pairs=pairs,
        wire_thread=wire_thread,
        **budget,
    )


def native_key_log(logs: KeyLogs) -> KeyLog:
    """The core's parsed key log (read now: a file changed since an earlier run counts)."""
    from dissector.tls import KeyLogError

    try:
        return native().KeyLog(list(logs.paths), list(logs.texts), logs.follow)
    except OSError as exc:
        raise KeyLogError(f"TLS {exc}") from None


def open_capture(analyzer: Analyzer, path: AnySource) -> None:
    """Start a capture file (or ``options.CaptureBytes``, or a ``CaptureSet`` read as
    one continuous capture); a file that is not a capture raises ``CaptureError``."""
    if isinstance(path, CaptureSet):
        _open_file(analyzer, path.files[0])
        if len(path.files) > 1:
            analyzer.chain_next(_NextFiles(path.files))
        return
    _open_file(analyzer, path)


@dataclass(frozen=True, slots=True)
class NextFile:
    """The next file of a capture set as ``Analyzer.chain_next`` reads it: its name, and
    its path or bytes."""

    name: str
    source: str | os.PathLike[str] | bytes


class _NextFiles:
    """A set's further files, handed to the core one at a time when the file before
    ends (``Analyzer.chain_next``): a set held as bytes is copied into the core one
    file at a time, and a lazy sequence (``CaptureSet.files``) is read only then. A
    file that cannot be read raises from ``Analyzer.run``: ``OSError`` naming a path,
    ``ValueError`` naming bytes."""

    def __init__(self, files: Sequence[CaptureSource]) -> None:
        self.files = files
        self.at = 1

    def __call__(self) -> NextFile | None:
        if self.at >= len(self.files):
            return None
        f = self.files[self.at]
        self.at += 1
        if isinstance(f, CaptureBytes):
            return NextFile(f.name, bytes(f.data))
        return NextFile(source_name(f), f)


def _open_file(analyzer: Analyzer, path: CaptureSource) -> None:
    """Start a capture file."""
    if isinstance(path, CaptureBytes):
        try:
            analyzer.open_bytes(path.name, bytes(path.data))
        except ValueError as exc:
            raise CaptureError(f"{path.name}: {exc}") from None
        return
    name = source_name(path)  # errors name the file as its rows would
    try:
        analyzer.open_path(name, path)
    except OSError as exc:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{name}: no such file") from None
        if os.path.isdir(path):
            raise IsADirectoryError(f"{name}: is a directory") from None
        # the core shows the name with U+FFFD for bytes that are not UTF-8: its words follow
        shown, text = os.fsencode(path).decode("utf-8", "replace") + ": ", str(exc)
        raise CaptureError(f"{name}: {text.removeprefix(shown)}") from None


# ---------------------------------------------------------------- rows -> Arrow


@functools.cache
def arrow_schema() -> pa.Schema:
    """The pairs table as Arrow: ``schema.COLUMNS``."""
    import pyarrow as pa

    def field_type(kind: str) -> pa.DataType:
        # Strings stay dictionary-encoded as the core built them: the frame takes the
        # codes as categories, Parquet writes them as they are.
        if kind == "str":
            return pa.dictionary(pa.int32(), pa.string())
        return arrow_type(kind)

    return pa.schema([pa.field(c.name, field_type(c.kind)) for c in COLUMNS])


def columns_to_table(cols: dict[str, ColumnBuffer], schema: pa.Schema) -> pa.Table:
    """The core's column buffers as a table of ``schema``."""
    import pyarrow as pa

    from dissector.arrow_cast import retype_array

    arrays = [retype_array(arrow_column(cols[field.name]), field.type) for field in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# ---------------------------------------------------------------- runs


@dataclass
class Run:
    """What one analysis run saw besides its rows."""

    counters: Counters
    tls_streams: list[int]
    schema: pa.Schema
    sets: list[CaptureSet]  # the captures read, each a set of files (most of one file)
    tls: list[TlsRow] = dataclass_field(default_factory=list)


@dataclass
class Batch:
    """What the core produced in one step: column buffers, the exchanges kept for an
    observer, and how far into the capture it has read."""

    columns: dict[str, ColumnBuffer]
    exchanges: list[CoreExchange]
    bytes_read: int
    tables: TablesBatch | None
    """The analytics tables' buffers (``Analyzer.take_tables``; None unless asked)."""


def _step(analyzer: Analyzer, batch_rows: int) -> tuple[Batch, bool]:
    """One step of the core: its batch, and whether the capture has more."""
    more = analyzer.run(batch_rows)
    batch = Batch(
        analyzer.take_columns(),
        list(analyzer.take_exchanges()),
        analyzer.bytes_read(),
        analyzer.take_tables(),
    )
    return batch, more


def _batches(
    analyzer: Analyzer,
    batch_rows: int,
    meanwhile: Callable[[], object] | None = None,
    ahead: bool = True,
) -> Iterator[Batch]:
    """The open capture's batches, produced on a worker thread one step ahead.

    The core releases the GIL while it reads and summarises, so the caller's Python
    work (``meanwhile()``, called once the worker has started: importing pyarrow on a
    cold start; building the previous batch's table) runs on the second core
    meanwhile. Only the worker touches the analyzer until it ends; at most two batches
    wait, so memory stays bounded by ``batch_rows``.

    ``ahead=False``: the core runs on the caller's thread, a step at a time, for a
    caller given one core (a Spark task), where the worker thread would only compete
    with the other tasks' for it (such a caller's analyzer reads packets on the same
    thread too: ``new_analyzer(wire_thread=False)``).
    """
    if not ahead:
        if meanwhile is not None:
            meanwhile()
        more = True
        while more:
            batch, more = _step(analyzer, batch_rows)
            yield batch
        return

    import queue
    import threading

    ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            more = True
            while more and not stop.is_set():
                batch, more = _step(analyzer, batch_rows)
                if not put(("batch", batch)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the caller, raised there
            put(("error", exc))

    worker = threading.Thread(target=work, name="kafka-dissector-core", daemon=True)
    try:
        # In the try: a Ctrl-C can cut start() short (it waits for the thread to run)
        # with the thread made, and the caller must not touch the analyzer until the
        # worker has let it go.
        worker.start()
        if meanwhile is not None:
            meanwhile()
        while True:
            kind, item = ready.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        # Not alive: ended, or not yet running, and then it sees `stop` before it
        # touches the analyzer.
        if worker.is_alive():
            worker.join()


def iter_tables(
    paths: Iterable[AnySource],
    options: Options,
    *,
    decoder: Decoder | None = None,
    counters: Counters | None = None,
    tls: TlsSeen | None = None,
    batch_rows: int = BATCH_ROWS,
    on_batch: Callable[[Batch], object] | None = None,
    keep_keys: Iterable[int] = (),
    tables: TableCollector | None = None,
    pairs: bool = True,
    meanwhile: Callable[[], object] | None = None,
    ahead: bool = True,
) -> Iterator[pa.Table]:
    """Arrow tables of the pairs of each capture, in capture order, ``batch_rows`` at a
    time; several files are grouped into capture sets first (``options.chain``, see
    ``sets``). ``counters`` receives the core's counters and ``tls`` the TLS
    connections it found, once the pass ends; ``on_batch(batch)`` sees each ``Batch``
    (progress displays, observers of the kept exchanges); ``tables`` (a
    ``wire.tables.TableCollector``) receives the analytics tables built in the same pass
    (those it wants: ``TableCollector.wanted``);
    ``pairs=False`` builds no pairs (the tables alone: nothing is yielded);
    ``meanwhile()`` runs on this thread while the core reads each capture (imports the
    caller needs after the pass: see ``_batches``); ``ahead=False`` runs the core on
    this thread alone, its reading of packets too (a caller given one core: see
    ``_batches``)."""
    from dissector.wire.sets import capture_sets

    decoder = decoder or _default_decoder()
    sources = capture_sets(paths, options.chain)
    analyzer = new_analyzer(
        options,
        decoder,
        keep_keys=keep_keys,
        tables=tables.wanted if tables is not None else (),
        pairs=pairs,
        wire_thread=ahead,
    )

    def imports() -> None:
        arrow_schema()
        if meanwhile is not None:
            meanwhile()

    try:
        for path in sources:
            open_capture(analyzer, path)
            # pyarrow (0.15 s to import) is imported while the core reads the capture.
            for batch in _batches(analyzer, batch_rows, meanwhile=imports, ahead=ahead):
                table = columns_to_table(batch.columns, arrow_schema())
                if tables is not None and batch.tables is not None:
                    tables.add(batch.tables)
                if on_batch is not None:
                    on_batch(batch)
                if table.num_rows:
                    yield table
    finally:
        _end_of_pass(analyzer, counters, tls)


def _end_of_pass(analyzer: Analyzer, counters: Counters | None, tls: TlsSeen | None) -> None:
    """What the core counted and found, handed to the caller's records."""
    if counters is not None:
        counters.merge(analyzer.counters())
    if tls is not None:
        tls.streams.extend(s.stream for s in analyzer.tls_streams())
        tls.connections.extend(tls_connections(analyzer))


class TlsRow(TypedDict):
    """The TLS connections of a capture with one version, cipher suite and outcome
    (``df.attrs["tls"]``)."""

    capture: str
    version: str | None
    cipher_suite: str | None
    outcome: str
    connections: int


@dataclass
class TlsSeen:
    """The TLS a pass found: ``streams``, the connections that carry TLS not decrypted
    (``df.attrs["tls_streams"]``); ``connections``, all of them by capture, version,
    cipher suite and outcome (``df.attrs["tls"]``)."""

    streams: list[int] = dataclass_field(default_factory=list)
    connections: list[TlsRow] = dataclass_field(default_factory=list)


def tls_connections(analyzer: Analyzer) -> list[TlsRow]:
    """The run's TLS connections by capture, version, cipher suite and outcome."""
    return [
        TlsRow(
            capture=t.capture,
            version=t.version,
            cipher_suite=t.cipher_suite,
            outcome=t.outcome,
            connections=t.connections,
        )
        for t in analyzer.tls_connections()
    ]


def analyze_table(
    paths: list[AnySource],
    options: Options,
    *,
    decoder: Decoder | None = None,
    on_batch: Callable[[Batch], object] | None = None,
    keep_keys: Iterable[int] = (),
    analytics: TableCollector | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[pa.Table, Run]:
    """The pairs of the captures as one table, and what the pass saw besides them
    (``meanwhile``: see ``iter_tables``)."""
    from dissector.wire.sets import capture_sets

    counters = Counters()
    tls = TlsSeen()
    sets = capture_sets(paths, options.chain)
    tables = list(
        iter_tables(
            sets,
            options,
            decoder=decoder,
            counters=counters,
            tls=tls,
            on_batch=on_batch,
            keep_keys=keep_keys,
            tables=analytics,
            meanwhile=meanwhile,
        )
    )
    import pyarrow as pa  # after the run: iter_tables imports it while the core works

    schema = arrow_schema()
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    return table, Run(counters, tls.streams, schema, sets, tls.connections)


def capture_tables(
    sources: AnySource | os.PathLike[str] | Iterable[AnySource | os.PathLike[str]],
    options: Options | None = None,
    *,
    decoder: Decoder | None = None,
    counters: Counters | None = None,
    tables: Collection[str] = tuple(CONTRACTS),
) -> CaptureTables:
    """The partitions, groups and versions tables of a capture (a path, an
    ``options.CaptureBytes`` held in memory and read in place, or an ``options.CaptureSet``
    of rotated files read as one capture), in one pass of the native core, as Arrow (see
    ``CaptureTables``). Several sources are read in a row into the same tables, as
    ``dissector.partitions([...])`` does (files of one rotated recording chained by
    ``options.chain``, as ``analyze`` chains them).

    ``options``: ports and limits (``Options()`` when None); ``decoder``: a spec set
    (``protocol.decoder_for(--specs)``), the installed specs when None; ``counters``:
    receives the pass's stage counters (the pairs' ``df.attrs["counters"]``);
    ``tables``: the tables built (the others left empty, their APIs' bodies not read for
    them; the versions table is always built). A source that cannot be read raises
    ``CaptureError`` (or ``OSError``), as ``analyze`` does.
    """
    from dissector.options import capture_paths
    from dissector.wire.tables import TableCollector

    collector = TableCollector(wanted=frozenset(tables))
    paths = capture_paths(sources)
    for _ in iter_tables(
        paths,
        options or Options(),
        decoder=decoder,
        counters=counters,
        tables=collector,
        pairs=False,
    ):
        pass  # no pairs: the loop only drives the pass
    return collector.result()


def table_to_frame(table: pa.Table) -> pd.DataFrame:
    """The pandas frame of the contract (``schema.frame_dtype``: categories, narrow ints,
    Arrow-backed nullable numbers and lists) from an Arrow table, without a Python object
    per value: strings go over as dictionary codes, the rest stays in Arrow memory (or
    becomes numpy for the columns that are never null)."""
    import pandas as pd

    kinds = {c.name: c.kind for c in COLUMNS}
    data: dict[str, Any] = {}
    for field in table.schema:
        column = table.column(field.name)
        kind = kinds.get(field.name)
        if kind == "str":
            data[field.name] = _category(column)
        elif kind == "str_list":
            data[field.name] = pd.arrays.ArrowExtensionArray(column)
        elif kind in ("int", "float"):
            data[field.name] = _numbers(field.name, column, frame_dtype(field.name, kind))
        else:
            data[field.name] = column.to_pandas()
    return pd.DataFrame(data, columns=table.column_names)


def _numbers(name: str, column: pa.ChunkedArray, dtype_name: str) -> Any:
    """A column cast to its frame dtype: Arrow-backed as it is, or a numpy array."""
    import pandas as pd

    dtype = pd.api.types.pandas_dtype(dtype_name)
    typed = frame_numbers(name, dtype_name, column)
    if isinstance(dtype, pd.ArrowDtype):
        return pd.arrays.ArrowExtensionArray(typed)
    return typed.to_numpy()


def frame_numbers(name: str, dtype_name: str, column: ArrowColumn) -> ArrowColumn:
    """A number column as Arrow in the type of its frame dtype ``dtype_name``, with the
    values the frame holds (``_saturated``): what the text writers write of the core's
    table is what ``dissector.analyze`` shows. A numpy dtype has no nulls: a null is
    an error, as is a value past its range (a safe cast)."""
    import pandas as pd
    import pyarrow as pa

    dtype = pd.api.types.pandas_dtype(dtype_name)
    if isinstance(dtype, pd.ArrowDtype):
        return column if column.type == dtype.pyarrow_dtype else _saturated(column, dtype)
    if column.null_count:
        raise ValueError(f"column {name!r} holds nulls, its dtype {dtype_name} has none")
    return column.cast(pa.from_numpy_dtype(dtype))


def _saturated(column: ArrowColumn, dtype: pd.ArrowDtype) -> ArrowColumn:
    """Cast to a narrower integer type, values past its range held at its bounds: only a
    hostile frame gets there (record counts summed from forged batch headers, already
    flagged in decode_error), and one such pair must not fail the whole table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    target = dtype.pyarrow_dtype
    if pa.types.is_integer(target) and pa.types.is_integer(column.type):
        info = np.iinfo(target.to_pandas_dtype())
        low = pc.max_element_wise(column, int(info.min), skip_nulls=False)  # nulls stay null
        column = pc.min_element_wise(low, int(info.max), skip_nulls=False)
    return column.cast(target)


def _category(column: pa.ChunkedArray) -> pd.Categorical:
    """A string column as a Categorical with sorted categories, from its dictionary codes."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    column = column.unify_dictionaries()
    words = column.chunk(0).dictionary if column.num_chunks else pa.array([], pa.string())
    order = np.argsort(np.asarray(words.to_pylist(), dtype=object), kind="stable")
    # rank[i]: where dictionary word i lands among the sorted categories.
    rank = np.empty(len(order) + 1, dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    rank[-1] = -1  # null
    parts = [
        np.asarray(c.indices.fill_null(-1) if c.null_count else c.indices, dtype=np.int32)
        for c in column.chunks
    ]
    codes = rank[np.concatenate(parts)] if parts else np.empty(0, np.int32)
    cats = pd.Index(np.asarray(words.to_pylist(), dtype=object)[order], dtype="str")
    return pd.Categorical.from_codes(codes, categories=cats)


# ---------------------------------------------------------------- exchanges


def iter_exchanges(
    paths: Iterable[AnySource],
    options: Options,
    *,
    decoder: Decoder | None = None,
    counters: Counters | None = None,
    batch: int = 4096,
) -> Iterator[tuple[str, Exchange]]:
    """(capture path, exchange) for every exchange as the stage records
    (``stages.Exchange``); several files are grouped into capture sets as by
    ``iter_tables`` (a set's exchanges carry its first file's path)."""
    for x in iter_core_exchanges(paths, options, decoder=decoder, counters=counters, batch=batch):
        yield x.capture, exchange_record(x)


def iter_core_exchanges(
    paths: Iterable[AnySource],
    options: Options,
    *,
    decoder: Decoder | None = None,
    counters: Counters | None = None,
    batch: int = 4096,
) -> Iterator[CoreExchange]:
    """Every exchange as the core's own record (a ``stages.ExchangeView`` that names its
    capture), for the full-body decoder: read as it comes, not copied."""
    from dissector.wire.sets import capture_sets

    sources = capture_sets(paths, options.chain)
    analyzer = new_analyzer(options, decoder, exchanges=True)
    try:
        for path in sources:
            open_capture(analyzer, path)
            for b in _batches(analyzer, batch):
                yield from b.exchanges
    finally:
        _end_of_pass(analyzer, counters, None)


def exchange_record(x: CoreExchange) -> Exchange:
    """The stage record of an exchange the core handed over, read field by field (the
    record types imported once: an import statement here cost more than the record)."""
    client, broker = x.client, x.broker
    return Exchange(
        stream=x.stream,
        client=Endpoint(client.ip, client.port),
        broker=Endpoint(broker.ip, broker.port),
        kind=x.kind,
        request=_frame_record(x.request),
        response=_frame_record(x.response),
        api_key=x.api_key,
        api_version=x.api_version,
        correlation_id=x.correlation_id,
        client_id=x.client_id,
        note=x.note,
        gap=x.gap,
    )


def _frame_record(f: CoreFrame | None) -> Frame | None:
    if f is None:
        return None
    src, dst = f.src, f.dst
    return Frame(
        stream=f.stream,
        src=Endpoint(src.ip, src.port),
        dst=Endpoint(dst.ip, dst.port),
        payload=f.payload,
        first_ts_ns=f.first_ts_ns,
        last_ts_ns=f.last_ts_ns,
        first_frame=f.first_frame,
        last_frame=f.last_frame,
        after_gap=f.after_gap,
        missing=f.missing,
        snapped=f.snapped,
        end_lost=f.end_lost,
        tls=f.tls,
    )


def iter_pairs(
    paths: Iterable[AnySource],
    options: Options,
    *,
    decoder: Decoder | None = None,
    counters: Counters | None = None,
    batch_rows: int = 4096,
) -> Iterator[PairRecord]:
    """``stages.PairRecord`` per pair, streaming: memory follows ``batch_rows``."""
    for table in iter_tables(
        paths, options, decoder=decoder, counters=counters, batch_rows=batch_rows
    ):
        yield from _records(table)


def _records(table: pa.Table) -> list[PairRecord]:
    import pyarrow as pa

    from dissector.stages import PairRecord

    for name in ("request_time", "response_time"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table.column(name).cast(pa.int64()))
    out = []
    for row in table.to_pylist():
        row["topics"] = row["topics"] or []
        row["flags"] = row["flags"] or []
        out.append(PairRecord(**row))
    return out


LIVE_CAPTURE_BUDGET = (1 << 64) - 1


class LiveSession:
    """The native core set up for a live source; ``start`` hands it a libpcap handle
    and the core's own threads capture (``_core.LiveRun``)."""

    def __init__(self, options: Options, decoder: Decoder | None, label: str) -> None:
        self.decoder = decoder or _default_decoder()
        # A live run has no end: a total decompression budget would run out after hours
        # and leave later record batches undecoded. The per-frame budget still bounds each
        # pair (against decompression bombs).
        self._analyzer = new_analyzer(options, self.decoder, capture_budget=LIVE_CAPTURE_BUDGET)
        self._analyzer.open_live(label)
        self._schema = arrow_schema()

    def start(self, handle: PcapHandle, write_pcap: str | None, snaplen: int) -> LiveRun:
        """Start capturing on ``handle`` (a ``_core.PcapHandle``, taken over); an
        unwritable ``write_pcap`` raises OSError."""
        return native().LiveRun(self._analyzer, handle, write_pcap, snaplen)

    def table(self, columns: dict[str, ColumnBuffer]) -> pa.Table:
        """Column buffers taken from the run as a table of ``arrow_schema()``."""
        return columns_to_table(columns, self._schema)

    def open_requests(self, run: LiveRun) -> dict[str, int]:
        """Requests waiting for a response now, by API name."""
        name = self.decoder.api_name
        return {name(key): n for key, n in run.open_requests().items()}


def table_records(table: pa.Table) -> list[PairRecord]:
    """``stages.PairRecord`` per row of a pairs table: one Python object per pair, for
    callers who want rows rather than Arrow."""
    return _records(table)
