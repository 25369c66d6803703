"""Rows -> pandas DataFrame, and the file exports (Parquet, CSV, JSON lines).

The dtypes come from ``schema.COLUMNS`` so that an empty capture still yields a
frame with every contract column, typed.

Parquet has one writer for every command (``analyze -o``, ``live -o`` and the
``spark`` job's pairs table): ``write_pairs_parquet`` / ``open_pairs_parquet`` with the
schema of ``pairs_arrow_schema``, so the files read back alike whoever wrote them.
Times are stored as UTC microseconds (Parquet TIMESTAMP_MICROS, adjusted to UTC):
Spark reads no nanosecond timestamps, and a fleet table must load in Spark.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

from dissector.schema import (
    COLUMN_NAMES,
    COLUMNS,
    NEVER_NULL,
    PANDAS_DTYPES,
    Kind,
    arrow_type,
    frame_dtype,
)
from dissector.stages import PairRecord
from dissector.table.text_rows import write_frame_text
from dissector.tables_schema import Contract, arrow_schema

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

_PANDAS_DTYPES = PANDAS_DTYPES
"""The wide pandas dtypes of each kind: what a pairs Parquet file reads back as."""


EXPORT_FORMATS = (".parquet", ".csv", ".jsonl", ".json")

PARQUET_TIME_UNIT = "us"
"""Parquet's time resolution: the finest Spark can read (nanoseconds are floored)."""


def records_to_frame(records: Iterable[PairRecord]) -> pd.DataFrame:
    """The contract frame of ``records``, in the in-memory dtypes (``frame_dtype``)."""
    return compact_frame(_wide_frame(records))


def compact_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A frame of the contract columns in their in-memory dtypes (``frame_dtype``), from
    the wide ones (a pairs Parquet file read back, ``records_to_frame``'s rows)."""
    import pandas as pd
    import pyarrow as pa

    out = {}
    for col in COLUMNS:
        if col.name not in df.columns:
            continue
        values = df[col.name]
        want = frame_dtype(col.name, col.kind)
        if col.kind == "str":
            out[col.name] = _sorted_category(values)
        elif col.kind == "str_list":
            lists = [None if v is None else list(v) for v in values.astype(object)]
            arrow = pa.array(lists, type=pa.list_(pa.string()))
            out[col.name] = pd.Series(pd.arrays.ArrowExtensionArray(arrow), index=df.index)
        elif str(values.dtype) != want:
            if col.name in NEVER_NULL and values.isna().any():
                raise ValueError(f"not a pairs table: column {col.name!r} holds nulls")
            out[col.name] = values.astype(want)
        else:
            out[col.name] = values
    extra = [c for c in df.columns if c not in out]
    frame = pd.DataFrame(out, index=df.index)
    for name in extra:
        frame[name] = df[name]
    frame.attrs = dict(df.attrs)
    return frame


def _sorted_category(values: pd.Series) -> pd.Series:
    """Strings as a category of ``str`` words in string order (as ``core.table_to_frame``
    builds them), so that sorting the column sorts its strings."""
    import pandas as pd

    objects = values.astype(object)
    words = pd.Index(sorted({str(v) for v in objects.dropna()}), dtype="str")
    return pd.Series(pd.Categorical(objects, categories=words), index=values.index)


def _wide_frame(records: Iterable[PairRecord]) -> pd.DataFrame:
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
    df = pd.DataFrame(data, columns=list(COLUMN_NAMES))
    return df


def export(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write the frame in the format its file extension names."""
    target = os.fspath(path)
    ext = os.path.splitext(target)[1].lower()
    if ext == ".parquet":
        write_pairs_parquet(df, target)
    elif ext in (".csv", ".jsonl", ".json"):
        with open(target, "w", encoding="utf-8", newline="") as fh:
            write_text_rows(df, fh, ext, header=True)
    else:
        raise ValueError(f"unknown output format {ext!r}: use one of {', '.join(EXPORT_FORMATS)}")


def write_text_rows(df: pd.DataFrame, fh: IO[str], ext: str, *, header: bool) -> None:
    """The rows of ``df`` as CSV (``header``: with the column line first) or JSON lines,
    appended to the open text file ``fh``: a file written in pieces (``live -o``) reads
    back as one written at once. A batch of rows at a time (``text_rows``)."""
    write_frame_text(df, fh, ext, header=header)


def _arrow_type(kind: str) -> pa.DataType:
    # "element": the item name Parquet (and Spark) give a list, so the schema read back
    # from any writer's file equals this one.
    return arrow_type(kind, time_unit=PARQUET_TIME_UNIT, list_item="element")


@functools.cache
def pairs_arrow_schema() -> pa.Schema:
    """The Arrow schema of every pairs Parquet file, from ``schema.COLUMNS``.

    It carries the pandas metadata of an empty contract frame, so that
    ``pandas.read_parquet`` restores the contract's dtypes (``string``, ``Int64``,
    ``Float64``) for every writer, including Spark tasks that never built a frame.
    """
    import pyarrow as pa

    fields = [pa.field(c.name, _arrow_type(c.kind)) for c in COLUMNS]
    return pa.schema(fields, metadata={b"pandas": _pandas_metadata()})


def _pandas_metadata() -> bytes:
    """pandas' own description of an empty contract frame. Importing pandas costs a
    third of a second, which a Parquet-only run does not otherwise pay: the blob is kept
    with the start-up cache, named by the pandas version and the columns."""
    import hashlib

    from dissector.protocol.diskcache import load_or_build, package_version

    def build() -> bytes:
        import pyarrow as pa

        meta = pa.Schema.from_pandas(_wide_frame([]), preserve_index=False).metadata
        return bytes(meta[b"pandas"])

    columns = hashlib.sha256(repr([(c.name, c.kind) for c in COLUMNS]).encode()).hexdigest()
    version = package_version("pandas")
    return load_or_build(f"pairs-pandas-meta-{version}-{columns[:12]}", build)


def pairs_table(data: pd.DataFrame | pa.Table | pa.RecordBatch) -> pa.Table:
    """``data`` (a contract frame, or Arrow with the contract columns) in the Parquet schema.

    Times are floored to microseconds; every other cast must be lossless.
    """
    import pyarrow as pa

    from dissector.arrow_cast import retype_column

    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif not isinstance(data, pa.Table):
        data = pa.Table.from_pandas(data, preserve_index=False)
    schema = pairs_arrow_schema()
    missing = [name for name in schema.names if name not in data.column_names]
    if missing:
        raise ValueError(f"not a pairs table: missing columns {missing}")
    columns = [
        retype_column(data.column(f.name), f.type, safe=not pa.types.is_timestamp(f.type))
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def write_pairs_parquet(
    data: pd.DataFrame | pa.Table | pa.RecordBatch,
    where: str | os.PathLike[str],
    *,
    filesystem: Any = None,
) -> int:
    """Write the pairs as one Parquet file at ``where`` (a path on ``filesystem``); rows written."""
    import pyarrow.parquet as pq

    table = pairs_table(data)
    path = os.fspath(where)
    if filesystem is None and _not_utf8(path):
        # pyarrow takes paths as UTF-8 text: a local name of other bytes is opened here
        with open(path, "wb") as fh:
            pq.write_table(table, fh, **parquet_options())
    else:
        pq.write_table(table, path, filesystem=filesystem, **parquet_options())
    return table.num_rows


def _not_utf8(path: str) -> bool:
    """A name the OS gave as bytes that are not UTF-8 (``str`` with surrogate escapes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def open_pairs_parquet(
    where: str | os.PathLike[str], *, filesystem: Any = None
) -> pq.ParquetWriter:
    """A writer for a pairs file built in pieces (``write_table(pairs_table(...))`` per piece).

    Each piece becomes a row group. The writer keeps each row group's footer metadata
    (about 30 KiB) until it closes, so a long run writes large pieces (``live.sinks``).
    """
    import pyarrow.parquet as pq

    return pq.ParquetWriter(
        os.fspath(where), pairs_arrow_schema(), filesystem=filesystem, **parquet_options()
    )


def parquet_options() -> dict[str, Any]:
    """Writer options of every pairs file: Parquet's defaults (snappy, statistics,
    dictionary pages), except that time columns get no dictionary. A capture's times
    are nearly all distinct, so a dictionary only adds a page and an index per value:
    without it the file is smaller (3.84 MB instead of 4.05 MB for 94,345 pairs) and
    written with about 10 ms less CPU."""
    dictionary = [c.name for c in COLUMNS if c.kind != Kind.TIMESTAMP]
    return {"use_dictionary": dictionary}


# ----------------------------------------------------------------- analytics tables


def contract_frame(rows: Iterable[dict[str, Any]], columns: Contract) -> pd.DataFrame:
    """Rows (dicts) -> a DataFrame typed by a column contract; empty input keeps every column."""
    import pandas as pd

    data: dict[str, list[Any]] = {name: [] for name, _, _ in columns}
    for row in rows:
        for name in data:
            data[name].append(row.get(name))
    out = {}
    for name, dtype, _ in columns:
        values = data[name]
        if dtype.startswith("datetime64"):
            out[name] = pd.to_datetime(pd.array(values, dtype="Int64"), unit="ns", utc=True)
        elif dtype == "object":
            out[name] = pd.Series(values, dtype="object")
        else:
            out[name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(out, columns=[c[0] for c in columns])


class ParquetTableWriter:
    """One analytics table written to Parquet batch by batch as the pass makes it (a
    ``wire.tables.TableWriter``): memory stays flat whatever the capture's size. The
    file is what ``export_table`` writes of the frame: the contract's columns and
    types, strings plain, and pandas' metadata, so ``pandas.read_parquet`` gives the
    contract's dtypes."""

    def __init__(self, path: str | os.PathLike[str], contract: Contract) -> None:
        import pyarrow.parquet as pq

        metadata = {b"pandas": _table_pandas_metadata(contract)}
        self.schema = arrow_schema(contract).with_metadata(metadata)
        self._writer = pq.ParquetWriter(os.fspath(path), self.schema)
        self.rows = 0

    def __call__(self, batch: pa.Table) -> None:
        import pyarrow as pa

        from dissector.arrow_cast import retype_column

        columns = [retype_column(batch.column(f.name), f.type) for f in self.schema]
        self._writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.rows += batch.num_rows

    def close(self) -> None:
        self._writer.close()


def _table_pandas_metadata(contract: Contract) -> bytes:
    """pandas' description of an empty contract frame, kept with the start-up cache: a
    run that writes Parquet only need not import pandas (a third of a second)."""
    import hashlib

    from dissector.protocol.diskcache import load_or_build, package_version

    def build() -> bytes:
        import pyarrow as pa

        meta = pa.Schema.from_pandas(contract_frame([], contract), preserve_index=False).metadata
        return bytes(meta[b"pandas"])

    digest = hashlib.sha256(repr(contract).encode()).hexdigest()[:12]
    return load_or_build(f"table-pandas-meta-{package_version('pandas')}-{digest}", build)
