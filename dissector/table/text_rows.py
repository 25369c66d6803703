"""The pairs table as CSV or JSON lines, a column at a time and a batch of rows at a time.

``analyze -o x.jsonl`` of 1.5M pairs built a dict per row of the whole frame (issue #21:
a MemoryError at 1.6 GB, 99 s without a limit). Here each batch of rows becomes the
contract's frame (``core.table_to_frame``: the same values, dtypes and saturation as
``dissector.analyze``), and each column of it is turned into text once: a category's
words are encoded once, not once a row. Memory is one batch's, whatever the table's
length. The text is the one the earlier per-row writers gave (``json.dumps`` of
``jsonable(row)``; pandas' ``to_csv`` of the frame, strings made spreadsheet-safe).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from dissector.schema import COLUMNS

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

BATCH_ROWS = 16_384
"""Rows turned into text at once: the writers' memory is bounded by this."""

_KINDS = {c.name: c.kind for c in COLUMNS}
_encode_json_string: Callable[[str], str] = json.encoder.encode_basestring


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


def table_frames(table: pa.Table, rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """The contract's frame of each batch of ``rows`` rows of a pairs table."""
    from dissector.wire.core import table_to_frame

    for start in range(0, table.num_rows, rows):
        yield table_to_frame(table.slice(start, rows))


def write_table_text(table: pa.Table, path: str, ext: str) -> None:
    """A pairs table (``core`` Arrow) to a CSV or JSON lines file, batch by batch: the
    whole table is never a frame."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        first = True
        for frame in table_frames(table):
            write_frame_text(frame, fh, ext, header=first)
            first = False
        if first and ext == ".csv":  # no rows: the column line still
            fh.write(",".join(table.column_names) + "\n")


def write_frame_text(df: pd.DataFrame, fh: IO[str], ext: str, *, header: bool) -> None:
    """The rows of ``df`` as CSV (``header``: the column line first) or JSON lines,
    appended to the open text file ``fh`` (a file written in pieces reads back as one
    written at once)."""
    for start in range(0, len(df), BATCH_ROWS):
        part = df.iloc[start : start + BATCH_ROWS]
        if ext == ".csv":
            _write_csv(part, fh, header=header and start == 0)
        else:
            _write_jsonl(part, fh)
    if ext == ".csv" and header and len(df) == 0:
        _write_csv(df, fh, header=True)


def _write_jsonl(df: pd.DataFrame, fh: IO[str]) -> None:
    names = list(df.columns)
    cells = [_json_cells(df[name], _KINDS.get(name)) for name in names]
    template = "{" + ", ".join(f"{_encode_json_string(str(n))}: %s" for n in names) + "}\n"
    fh.write("".join(template % row for row in zip(*cells, strict=True)))


def _write_csv(df: pd.DataFrame, fh: IO[str], *, header: bool) -> None:
    # pandas' to_csv writes through the csv module with these settings
    writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    names = list(df.columns)
    if header:
        writer.writerow(names)
    cells = [_csv_cells(df[name], _KINDS.get(name)) for name in names]
    writer.writerows(zip(*cells, strict=True))


# --- one column as text ---------------------------------------------------------------


def _values(series: pd.Series) -> list[Any]:
    """A column's values as Python objects, a missing one as None."""
    import pyarrow as pa

    array = series.array
    arrow = getattr(array, "_pa_array", None)  # ArrowExtensionArray
    if isinstance(arrow, pa.ChunkedArray | pa.Array):
        return list(arrow.to_pylist())
    mask = series.isna().to_numpy()
    values = series.to_numpy(dtype=object).tolist()
    return [None if m else v for v, m in zip(values, mask, strict=True)] if mask.any() else values


def _category_cells(series: pd.Series, word: Callable[[str], str], missing: str) -> list[str]:
    """A category column: each word encoded once, the codes looked up."""
    cat = series.cat
    words = [word(str(w)) for w in cat.categories] + [missing]
    return [words[c] for c in cat.codes.tolist()]  # code -1 (missing): the last


def _json_cells(series: pd.Series, kind: str | None) -> list[str]:
    if kind == "str" and hasattr(series, "cat"):
        return _category_cells(series, _encode_json_string, "null")
    if kind == "timestamp":
        return _stamp_cells(series, "T", quoted=True)
    if kind == "float":
        return _number_cells(_values(series), "null", _json_float)
    if kind == "int":
        return _number_cells(_values(series), "null", str)
    if kind == "str_list":
        return [
            "null" if v is None else "[" + ", ".join(map(_encode_json_string, v)) + "]"
            for v in _values(series)
        ]
    from dissector.json_values import jsonable  # a column outside the contract

    return [json.dumps(jsonable(v), ensure_ascii=False) for v in series.tolist()]


def _csv_cells(series: pd.Series, kind: str | None) -> list[str]:
    if kind == "str" and hasattr(series, "cat"):
        return _category_cells(series, csv_safe, "")
    if kind == "timestamp":
        return _stamp_cells(series, " ", quoted=False)
    if kind == "float":
        return _number_cells(_values(series), "", _csv_float)
    if kind == "int":
        return _number_cells(_values(series), "", str)
    if kind == "str_list":
        return ["" if v is None else ";".join(map(csv_safe, v)) for v in _values(series)]
    return ["" if v is None else str(v) for v in _values(series)]


def _number_cells(values: list[Any], missing: str, text: Callable[[Any], str]) -> list[str]:
    """Numbers as text: ``missing`` for None, NaN (pandas' missing float) and the
    infinities as ``text`` says, the rest by ``repr``/``str`` (what both ``json.dumps``
    and pandas' ``to_csv`` write for a Python int or float)."""
    if all(v is not None and v == v and v not in _INFINITIES for v in values):
        return list(map(repr, values))  # repr of an int is its str
    return [missing if v is None else text(v) for v in values]


_INFINITIES = (math.inf, -math.inf)


def _json_float(v: float) -> str:
    # jsonable: NaN (pandas' missing float) is null; json.dumps: infinities as JavaScript's
    if v != v:
        return "null"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(float(v))


def _csv_float(v: float) -> str:
    return "" if v != v else repr(float(v))


def _stamp_cells(series: pd.Series, sep: str, *, quoted: bool) -> list[str]:
    """The UTC times of a column as text, a missing one as JSON's null or CSV's empty
    cell. JSON (``quoted``): ``pandas.Timestamp.isoformat`` of each (nine digits when
    its nanoseconds say something, else six when its microseconds do, else none). CSV:
    as pandas' ``to_csv`` writes a column, every time of the batch with the digits the
    most precise one needs."""
    import datetime

    mask = series.isna().to_numpy()
    stamps = series.dt.tz_convert("UTC").array.asi8.tolist() if len(series) else []
    present = [ns for ns, missing in zip(stamps, mask, strict=True) if not missing]
    column_digits = None if quoted else _digits(present)
    seconds_text: dict[int, str] = {}  # the rows of a batch share few seconds
    out = []
    for ns, missing in zip(stamps, mask, strict=True):
        if missing:
            out.append("null" if quoted else "")
            continue
        seconds, fraction = divmod(ns, 1_000_000_000)
        whole = seconds_text.get(seconds)
        if whole is None:
            moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
            whole = seconds_text[seconds] = f"{moment:%Y-%m-%d}{sep}{moment:%H:%M:%S}"
        digits = column_digits
        if digits is None:  # this time's own: isoformat's rule
            digits = 9 if fraction % 1000 else 6 if fraction else 0
        if digits == 9:
            text = f"{whole}.{fraction:09d}+00:00"
        elif digits == 6:
            text = f"{whole}.{fraction // 1000:06d}+00:00"
        else:
            text = f"{whole}+00:00"
        out.append(f'"{text}"' if quoted else text)
    return out


def _digits(stamps: list[int]) -> int:
    """Fraction digits that show every one of these times exactly: 9, 6 or 0."""
    if any(ns % 1000 for ns in stamps):
        return 9
    return 6 if any(ns % 1_000_000_000 for ns in stamps) else 0
