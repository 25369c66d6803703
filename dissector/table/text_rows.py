"""Tables as CSV or JSON lines, a batch of rows at a time, each column turned into text by
Arrow compute (issue #21).

``analyze -o x.jsonl`` of 1.5M pairs first built a dict per row (a MemoryError at 1.6
GB), then a Python string per cell (80 s). Here each batch of ``BATCH_ROWS`` rows is an
Arrow record batch; every column becomes an array of cell texts (numbers cast by Arrow,
a dictionary's words encoded once in Python and taken by their codes, times from their
distinct seconds), and ``binary_join_element_wise`` joins the cells and the fixed text
between them (keys, separators) into the lines, whose bytes go to the file as one
buffer. Memory is one batch's, time a few Arrow kernels per column and batch.

The text is the one the earlier per-row writers gave, byte for byte: JSON lines as
``json.dumps`` of each row (``jsonable``: NaN is null, times ISO 8601), CSV as pandas'
``to_csv`` (the csv module's minimal quoting; a batch's times with the digits its most
precise one needs). ``pyarrow.csv.write_csv`` is not used: it quotes every string and
writes times and floats its own way, so the files would change. A ``TextStyle`` holds
what differs between the pairs table (strings spreadsheet-safe in CSV, JSON in UTF-8)
and the analytics tables (``analytics.partitions.export_table``'s text).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from dissector.schema import COLUMNS, frame_dtype

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

BATCH_ROWS = 16_384
"""Rows turned into text at once: the writers' memory is bounded by this."""

_KINDS = {c.name: c.kind for c in COLUMNS}


# Spreadsheets run a cell that starts with one of these as a formula (OWASP's "CSV
# injection"); a leading apostrophe makes it text and is what they hide on display.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09,)}


def visible_text(value: str) -> str:
    """A wire string with its control characters (ESC, NUL, ...) written as ``\\xNN``,
    for outputs a person reads (CSV, HTML): a client id must not drive a terminal."""
    return value.translate(_CONTROL)


def csv_safe(value: str) -> str:
    """A wire string made safe for a spreadsheet: control characters escaped as ``\\xNN``
    and a leading formula character neutralised. Parquet and JSON keep the real value."""
    text = visible_text(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


@dataclass(frozen=True, slots=True)
class TextStyle:
    """What differs between the tables' text: how a string becomes a JSON string
    (``json.dumps`` with or without ``ensure_ascii``) and what a string cell of CSV
    holds before the csv module's quoting."""

    json_string: Callable[[str], str]
    csv_string: Callable[[str], str]


def _plain(value: str) -> str:
    return value


PAIRS_STYLE = TextStyle(json.encoder.encode_basestring, csv_safe)
"""The pairs table: JSON strings in UTF-8 (``ensure_ascii=False``), CSV strings made
safe for a spreadsheet (``csv_safe``)."""

TABLES_STYLE = TextStyle(json.encoder.encode_basestring_ascii, _plain)
"""The analytics tables (``--partitions``, ``--groups``): ``json.dumps``' defaults, CSV
strings as they are."""


# --- writers --------------------------------------------------------------------------


def write_table_text(table: pa.Table, path: str, ext: str) -> None:
    """A pairs table (``core`` Arrow) to a CSV or JSON lines file, batch by batch."""
    with open(path, "wb") as fh:
        batches = pairs_batches(table)
        write_batches(batches, fh, ext, PAIRS_STYLE, header=True, names=table.schema.names)


def write_frame_text(df: pd.DataFrame, fh: IO[Any], ext: str, *, header: bool) -> None:
    """The rows of a pairs frame as CSV (``header``: the column line first) or JSON lines,
    appended to the open file ``fh`` (text or binary): a file written in pieces reads
    back as one written at once."""
    names = [str(n) for n in df.columns]
    write_batches(frame_batches(df), fh, ext, PAIRS_STYLE, header=header, names=names)


def write_batches(
    batches: Iterable[pa.RecordBatch],
    fh: IO[Any],
    ext: str,
    style: TextStyle,
    *,
    header: bool,
    names: list[str] | None = None,
) -> int:
    """Each batch's rows appended to ``fh`` as CSV or JSON lines; rows written. CSV's
    column line comes first when ``header`` (from ``names`` when no batch comes)."""
    rows = 0
    for batch in batches:
        if header and ext == ".csv":
            _write(fh, csv_header(batch.schema.names))
        header = False
        if batch.num_rows:
            _write(fh, batch_text(batch, ext, style))
            rows += batch.num_rows
    if header and ext == ".csv" and names is not None:
        _write(fh, csv_header(names))
    return rows


class TextTableWriter:
    """One analytics table written to CSV or JSON lines batch by batch as the pass makes
    it (a ``wire.tables.TableWriter``): the text ``export_table`` writes of the whole
    frame, in memory that does not grow with the table."""

    def __init__(self, path: str, names: list[str]) -> None:
        import os

        self.ext = os.path.splitext(path)[1].lower()
        self.names = names
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._header = True
        self.rows = 0

    def __call__(self, batch: pa.Table) -> None:
        self.rows += write_batches(
            table_batches(batch), self._file, self.ext, TABLES_STYLE, header=self._header
        )
        self._header = False

    def close(self) -> None:
        try:
            if self._header:  # no batch came: CSV keeps its column line
                write_batches([], self._file, self.ext, TABLES_STYLE, header=True, names=self.names)
        finally:
            self._file.close()


def _write(fh: IO[Any], text: pa.Buffer | bytes) -> None:
    if isinstance(fh, io.TextIOBase):
        fh.write(memoryview(text).tobytes().decode("utf-8"))
    else:
        fh.write(memoryview(text))


# --- batches --------------------------------------------------------------------------


def table_batches(table: pa.Table, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of ``table`` at a time, each one record batch (chunks combined,
    dictionaries unified): batches fall on the same rows however the table is chunked."""
    import pyarrow as pa

    for start in range(0, table.num_rows, rows):
        part = table.slice(start, rows)
        yield pa.RecordBatch.from_arrays(
            [column.combine_chunks() for column in part.columns], schema=part.schema
        )


def pairs_batches(table: pa.Table, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The batches of a pairs table of the core, its numbers in the pandas frame's ranges
    (``core.frame_numbers``: what ``dissector.analyze`` shows is what is written)."""
    import pyarrow as pa

    from dissector.wire.core import frame_numbers

    for batch in table_batches(table, rows):
        columns = []
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            kind = _KINDS.get(name)
            if kind == "int" and pa.types.is_integer(column.type):
                column = frame_numbers(name, frame_dtype(name, kind), column)
            columns.append(column)
        yield pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def frame_batches(df: pd.DataFrame, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of a frame at a time as Arrow."""
    import pyarrow as pa

    for start in range(0, len(df), rows):
        part = df.iloc[start : start + rows]
        arrays = [_frame_column(part[name]) for name in part.columns]
        yield pa.RecordBatch.from_arrays(arrays, names=[str(n) for n in part.columns])


def _frame_column(series: pd.Series) -> pa.Array:
    import pyarrow as pa

    try:
        array = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # mixed Python objects (not a column of the contract): written as their str
        return pa.array([None if v is None else str(v) for v in series.tolist()], pa.string())
    # an Arrow-backed column of several chunks (frames concatenated) comes as it is held
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


# --- lines ----------------------------------------------------------------------------


def csv_header(names: list[str]) -> bytes:
    return (",".join(csv_field(str(n)) for n in names) + "\n").encode("utf-8")


def batch_text(batch: pa.RecordBatch, ext: str, style: TextStyle) -> pa.Buffer:
    """The batch's rows as CSV or JSON lines: one buffer of UTF-8 text."""
    import pyarrow.compute as pc

    names = batch.schema.names
    text: Callable[[Any, TextStyle], pa.Array] = _csv_text if ext == ".csv" else _json_text
    cells = [text(column, style) for column in batch.columns]
    if ext == ".csv":
        pieces = _interleave(cells, [""] + [","] * (len(names) - 1), "\n")
    else:
        keys = [
            f"{', ' if i else '{'}{json.encoder.encode_basestring(n)}: "
            for i, n in enumerate(names)
        ]
        pieces = _interleave(cells, keys, "}\n")
    lines = pc.binary_join_element_wise(*pieces, _text(""))
    return _data(lines)


def _interleave(cells: list[pa.Array], before: list[str], end: str) -> list[Any]:
    pieces: list[Any] = []
    for lead, cell in zip(before, cells, strict=True):
        if lead:
            pieces.append(_text(lead))
        pieces.append(cell)
    pieces.append(_text(end))
    return pieces


def _data(lines: pa.Array) -> pa.Buffer:
    """The characters of a string array without nulls, one after the other."""
    import numpy as np

    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    first, last = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    data = lines.buffers()[2]
    return data.slice(first, last - first) if data is not None else b""


def _text(value: str) -> pa.Scalar:
    import pyarrow as pa

    return pa.scalar(value, pa.large_string())


# --- one column as cell texts ---------------------------------------------------------
# Each returns a large_string array without nulls, a cell's text per row.


@dataclass(frozen=True, slots=True)
class _Format:
    """The text of a cell of one output format, by what it holds."""

    missing: str  # null (and NaN)
    string: Callable[[str], str]  # a string, ready to stand in the line
    item: Callable[[str], str]  # a string inside a list
    true: str
    false: str
    infinity: str
    time_sep: str  # between date and time
    time_quote: str
    list_open: str
    list_sep: str
    list_close: str
    per_value_digits: bool  # each time its own fraction digits (isoformat), else the batch's
    quote: bool  # cells with special characters get the csv module's quotes


def _json_format(style: TextStyle) -> _Format:
    return _Format(
        missing="null",
        string=style.json_string,
        item=style.json_string,
        true="true",
        false="false",
        infinity="Infinity",
        time_sep="T",
        time_quote='"',
        list_open="[",
        list_sep=", ",
        list_close="]",
        per_value_digits=True,
        quote=False,
    )


def _csv_format(style: TextStyle) -> _Format:
    return _Format(
        missing="",
        string=lambda v: csv_field(style.csv_string(v)),
        item=style.csv_string,
        true="True",
        false="False",
        infinity="inf",
        time_sep=" ",
        time_quote="",
        list_open="",
        list_sep=";",
        list_close="",
        per_value_digits=False,
        quote=True,
    )


def _json_text(column: pa.Array, style: TextStyle) -> pa.Array:
    return _cells(column, _json_format(style))


def _csv_text(column: pa.Array, style: TextStyle) -> pa.Array:
    return _cells(column, _csv_format(style))


def _cells(column: pa.Array, fmt: _Format) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_dictionary(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _word_cells(column, fmt.string, fmt.missing)
    if pa.types.is_integer(kind):
        return _filled(pc.cast(column, pa.large_string()), fmt.missing)
    if pa.types.is_floating(kind):
        return _float_cells(column, fmt)
    if pa.types.is_boolean(kind):
        return _filled(pc.if_else(column, _text(fmt.true), _text(fmt.false)), fmt.missing)
    if pa.types.is_timestamp(kind):
        return _stamp_cells(column, fmt)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _list_cells(column, fmt)
    if pa.types.is_null(kind):
        return pa.array([fmt.missing] * len(column), pa.large_string())
    return _python_cells(column.to_pylist(), fmt)


def _filled(cells: pa.Array, missing: str) -> pa.Array:
    import pyarrow as pa

    cells = cells.cast(pa.large_string())
    return cells.fill_null(_text(missing)) if cells.null_count else cells


def _word_cells(column: pa.Array, encode: Callable[[str], str], missing: str) -> pa.Array:
    """Strings: each distinct word encoded once, the rows take theirs by its code."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    words = [missing if w is None else encode(w) for w in column.dictionary.to_pylist()]
    codes = column.indices
    if column.null_count:
        codes = codes.cast(pa.int64()).fill_null(len(words))
    return pc.take(pa.array([*words, missing], pa.large_string()), codes)


def _float_cells(column: pa.Array, fmt: _Format) -> pa.Array:
    """Floats as Python's ``repr`` writes them (what ``json.dumps`` and pandas'
    ``to_csv`` write). Arrow's cast gives the same shortest digits, but its own notation
    (``1`` for 1.0, exponents from 1e+10): it is kept where it is ``repr``'s (a plain
    decimal between 1e-4 and 1e16, ``.0`` added to a whole number), the rest (rare: NaN,
    infinities, huge or tiny values) is ``repr``'s own."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.cast(pa.float64())
    text = pc.cast(column, pa.large_string())
    size = pc.abs(column)
    in_range = pc.or_(
        pc.and_(pc.greater_equal(size, 1e-4), pc.less(size, 1e16)), pc.equal(column, 0.0)
    )
    plain = pc.and_(in_range, pc.invert(pc.match_substring(text, "e"))).fill_null(False)
    whole = pc.and_(plain, pc.invert(pc.match_substring(text, ".")))
    if pc.any(whole).as_py():
        text = pc.if_else(whole, pc.binary_join_element_wise(text, _text(".0"), _text("")), text)
    other = pc.and_(pc.invert(plain), pc.is_valid(column))
    if pc.any(other).as_py():
        values = column.filter(other).to_pylist()
        texts = pa.array([_float_text(v, fmt) for v in values], pa.large_string())
        text = pc.replace_with_mask(text, other, texts)
    return _filled(text, fmt.missing)


def _float_text(value: float, fmt: _Format) -> str:
    # jsonable and pandas: NaN is a missing value; json.dumps writes JavaScript's infinity
    if value != value:
        return fmt.missing
    if math.isinf(value):
        return fmt.infinity if value > 0 else "-" + fmt.infinity
    return repr(value)


def _stamp_cells(column: pa.Array, fmt: _Format) -> pa.Array:
    """UTC times: ``pandas.Timestamp.isoformat`` of each in JSON (nine fraction digits
    when its nanoseconds say something, else six when its microseconds do, else none);
    in CSV as pandas' ``to_csv`` writes a column, every time of the batch with the
    digits the most precise one needs. The dates are formatted once per distinct second."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    valid = np.asarray(column.is_valid())
    ns = column.cast(pa.int64()).fill_null(0).to_numpy()
    seconds, fraction = np.divmod(ns, 10**9 // _unit_divisor(column.type.unit))
    fraction = fraction * _unit_divisor(column.type.unit)
    distinct, which = np.unique(seconds, return_inverse=True)
    dates = pc.strftime(
        pa.array(distinct, pa.timestamp("s")), format=f"%Y-%m-%d{fmt.time_sep}%H:%M:%S"
    )
    whole = pc.take(dates.cast(pa.large_string()), pa.array(which.reshape(-1)))
    nine = fraction % 1000 != 0
    six = fraction != 0
    if not fmt.per_value_digits:  # the batch's digits for every time of it
        nine = np.full(len(ns), bool((nine & valid).any()))
        six = np.full(len(ns), bool((six & valid).any()))
    parts = [_text(fmt.time_quote), whole]
    if six.any():
        digits = np.where(nine, fraction + 10**9, fraction // 1000 + 10**6)
        text = pc.utf8_slice_codeunits(pc.cast(pa.array(digits), pa.large_string()), 1)
        dot = pc.binary_join_element_wise(_text("."), text, _text(""))
        parts.append(pc.if_else(pa.array(six), dot, _text("")))
    parts += [_text("+00:00" + fmt.time_quote)]
    cells = pc.binary_join_element_wise(*parts, _text(""))
    if not valid.all():
        cells = pc.if_else(pa.array(valid), cells, _text(fmt.missing))
    return cells.cast(pa.large_string())


def _unit_divisor(unit: str) -> int:
    """Nanoseconds in one tick of a time unit."""
    return {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]


def _list_cells(column: pa.Array, fmt: _Format) -> pa.Array:
    """A list per cell: its items as text joined (JSON: ``[a, b]``; CSV: ``a;b``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    items = column.flatten()
    item_format = _item_format(fmt)
    texts = _cells(items, item_format)
    lengths = pc.list_value_length(column).fill_null(0).to_numpy()
    offsets = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rebuilt = pa.LargeListArray.from_arrays(pa.array(offsets), texts, mask=pc.is_null(column))
    joined = pc.binary_join(rebuilt, _text(fmt.list_sep))
    if fmt.list_open or fmt.list_close:
        joined = pc.binary_join_element_wise(
            _text(fmt.list_open), joined, _text(fmt.list_close), _text("")
        )
    cells = _filled(joined, fmt.missing)
    return _quoted(cells) if fmt.quote else cells


def _item_format(fmt: _Format) -> _Format:
    """A list item's format: strings as ``item`` says, never quoted alone (CSV quotes
    the joined cell)."""
    from dataclasses import replace

    return replace(fmt, string=fmt.item, quote=False)


def _python_cells(values: list[Any], fmt: _Format) -> pa.Array:
    """A column of a type the rules above do not know: ``json.dumps(jsonable(v))`` of
    each value in JSON, ``str(v)`` in CSV."""
    import pyarrow as pa

    from dissector.json_values import jsonable

    if fmt.quote:
        texts = [fmt.missing if v is None else csv_field(str(v)) for v in values]
    else:
        texts = [json.dumps(jsonable(v), ensure_ascii=False) for v in values]
    return pa.array(texts, pa.large_string())


# --- the csv module's quoting ---------------------------------------------------------


@functools.cache
def _csv_specials() -> str:
    """The characters for which the csv module (pandas' ``to_csv`` writes through it)
    quotes a field, with pandas' settings: the delimiter, the quote, and the line ends
    its version quotes (3.11 leaves a lone ``\\r`` unquoted, later versions do not)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    found = ""
    for char in ',"\r\n':
        out.seek(0)
        out.truncate()
        writer.writerow(["a" + char, "b"])
        if out.getvalue().startswith('"'):
            found += char
    return found


def csv_field(text: str) -> str:
    if any(c in text for c in _csv_specials()):
        return '"' + text.replace('"', '""') + '"'
    return text


def _quoted(cells: pa.Array) -> pa.Array:
    """``csv_field`` of each cell, vectorised."""
    import re

    import pyarrow.compute as pc

    special = pc.match_substring_regex(cells, "[" + re.escape(_csv_specials()) + "]")
    if not pc.any(special).as_py():
        return cells
    doubled = pc.replace_substring(cells, '"', '""')
    wrapped = pc.binary_join_element_wise(_text('"'), doubled, _text('"'), _text(""))
    return pc.if_else(special, wrapped, cells)
