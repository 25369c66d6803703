"""Rows -> pandas DataFrame, and the file exports (Parquet, CSV, JSON lines).

The dtypes come from ``schema.COLUMNS`` so that an empty capture still yields a
frame with every contract column, typed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .rows import PairRecord
from .schema import COLUMN_NAMES, COLUMNS

if TYPE_CHECKING:
    import pandas as pd

_PANDAS_DTYPES = {
    "str": "string",
    "int": "Int64",
    "float": "Float64",
    "timestamp": "datetime64[ns, UTC]",
    "str_list": "object",
}

EXPORT_FORMATS = (".parquet", ".csv", ".jsonl", ".json")


def records_to_frame(records: Iterable[PairRecord]) -> pd.DataFrame:
    import pandas as pd

    columns: dict[str, list] = {name: [] for name in COLUMN_NAMES}
    for rec in records:
        for name in COLUMN_NAMES:
            columns[name].append(getattr(rec, name))
    data = {}
    for col in COLUMNS:
        values = columns[col.name]
        if col.kind == "timestamp":
            data[col.name] = pd.to_datetime(
                pd.array(values, dtype="Int64"), unit="ns", utc=True
            ).astype(_PANDAS_DTYPES["timestamp"])
        elif col.kind == "str_list":
            data[col.name] = pd.Series(values, dtype="object")
        else:
            data[col.name] = pd.array(values, dtype=_PANDAS_DTYPES[col.kind])
    return pd.DataFrame(data, columns=list(COLUMN_NAMES))


def export(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write the frame in the format its file extension names."""
    target = os.fspath(path)
    ext = os.path.splitext(target)[1].lower()
    if ext == ".parquet":
        df.to_parquet(target, index=False)
    elif ext == ".csv":
        flat = df.copy()
        # CSV has no lists: lists become one ';'-separated cell.
        for col in COLUMNS:
            if col.kind == "str_list":
                flat[col.name] = flat[col.name].map(_list_cell)
            elif col.kind == "str":
                flat[col.name] = flat[col.name].map(csv_safe, na_action="ignore")
        flat.to_csv(target, index=False)
    elif ext in (".jsonl", ".json"):
        with open(target, "w", encoding="utf-8") as fh:
            for row in df.to_dict(orient="records"):
                fh.write(json.dumps(_jsonable(row), ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"unknown output format {ext!r}: use one of {', '.join(EXPORT_FORMATS)}")


# Spreadsheets run a cell that starts with one of these as a formula (OWASP's "CSV
# injection"); a leading apostrophe makes it text and is what they hide on display.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09,)}


def csv_safe(value: str) -> str:
    """A wire string made safe for a spreadsheet: control characters escaped as ``\\xNN``
    and a leading formula character neutralised. Parquet and JSON keep the real value."""
    text = value.translate(_CONTROL)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _list_cell(items: list[str] | None) -> str:
    return ";".join(csv_safe(t) for t in items) if items is not None else ""


def _jsonable(row: dict) -> dict:
    import pandas as pd

    out = {}
    for key, value in row.items():
        if isinstance(value, pd.Timestamp):
            out[key] = value.isoformat()
        elif isinstance(value, list):
            out[key] = value
        elif value is None or (not isinstance(value, list | tuple) and pd.isna(value)):
            out[key] = None
        elif hasattr(value, "item"):
            out[key] = value.item()
        else:
            out[key] = value
    return out
