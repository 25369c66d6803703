"""The compiled core (``dissector._core``) as the wire stage loads it, and the column
buffers it hands over read as Arrow arrays (``wire.core`` for the pairs, ``wire.tables``
for the analytics tables, ``wire.sets`` for the file facts all start here)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pyarrow as pa

# One column as the core hands it over (``Analyzer.take_columns``, ``take_tables``): a tag,
# then its buffers as bytes (values, validity bits or None, offsets, dictionary words)
# and counts, by tag. ``arrow_column`` reads them.
Numbers = tuple[Literal["i64", "f64"], bytes, bytes | None, int]  # values, validity, nulls
Words = tuple[Literal["dict"], bytes, bytes | None, int, bytes, bytes]  # + word offsets, data
Bools = tuple[Literal["bool"], bytes, bytes | None, int, int]  # + length
IntLists = tuple[Literal["i64list"], bytes, bytes]  # offsets, values
WordLists = tuple[Literal["list"], bytes, bytes, bytes, bytes]  # offsets, word indices, words
ColumnBuffer = Numbers | Words | Bools | IntLists | WordLists


def native() -> ModuleType:
    """The compiled core, or an ImportError that says what to do."""
    # The core's allocator (mimalloc, native/Cargo.toml) reads its options when the module
    # loads. With transparent huge pages each first touch of its arenas zeroes 2 MiB: a
    # fresh process (the CLI) spent up to a third of its CPU there, for 50 MB more
    # memory. A user's own setting wins.
    os.environ.setdefault("MIMALLOC_ALLOW_THP", "0")
    try:
        from dissector import _core
    except ImportError as exc:
        raise ImportError(
            "kafka-dissector's native core (dissector._core) is not importable: install the "
            "package with pip (it compiles native/; a .zip of the sources cannot carry it; "
            f"for Spark executors see docs/spark.md): {exc}"
        ) from exc
    return _core


def arrow_column(spec: ColumnBuffer) -> pa.Array:
    """One column buffer of the core as an Arrow array, built from the buffers as they
    are (no per-value Python objects; ``pa.array`` would also import pandas, and
    ``take``/``cast`` ``pyarrow.compute``: see ``arrow_cast``)."""
    import pyarrow as pa

    from dissector.arrow_cast import take

    if spec[0] == "i64" or spec[0] == "f64":
        tag, values, bits, nulls = spec
        kind = pa.int64() if tag == "i64" else pa.float64()
        buffers = [pa.py_buffer(bits) if bits is not None else None, pa.py_buffer(values)]
        return pa.Array.from_buffers(kind, len(values) // 8, buffers, null_count=nulls)
    if spec[0] == "dict":
        _, indices, bits, nulls, w_offsets, w_data = spec
        words = strings(w_offsets, w_data)
        validity = pa.py_buffer(bits) if bits is not None else None
        idx = pa.Array.from_buffers(
            pa.int32(), len(indices) // 4, [validity, pa.py_buffer(indices)], null_count=nulls
        )
        return pa.DictionaryArray.from_arrays(idx, words)
    if spec[0] == "bool":
        _, values, bits, nulls, n = spec
        buffers = [pa.py_buffer(bits) if bits is not None else None, pa.py_buffer(values)]
        return pa.Array.from_buffers(pa.bool_(), n, buffers, null_count=nulls)
    if spec[0] == "i64list":
        _, offsets, values = spec
        items = pa.Array.from_buffers(pa.int64(), len(values) // 8, [None, pa.py_buffer(values)])
        return pa.ListArray.from_buffers(
            pa.list_(pa.int64()),
            len(offsets) // 4 - 1,
            [None, pa.py_buffer(offsets)],
            children=[items],
        )
    if spec[0] == "list":
        _, offsets, items, w_offsets, w_data = spec
        idx = pa.Array.from_buffers(pa.int32(), len(items) // 4, [None, pa.py_buffer(items)])
        values = take(strings(w_offsets, w_data), idx)
        return pa.ListArray.from_buffers(
            pa.list_(pa.string()),
            len(offsets) // 4 - 1,
            [None, pa.py_buffer(offsets)],
            children=[values],
        )
    raise ValueError(f"unknown column buffer {spec[0]!r}")


def strings(offsets: bytes, data: bytes) -> pa.Array:
    import pyarrow as pa

    n = len(offsets) // 4 - 1
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
