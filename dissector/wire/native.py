"""The compiled core (``dissector._core``) as the wire stage loads it, and the column
buffers it hands over read as Arrow arrays (``wire.core`` for the pairs, ``wire.tables``
for the analytics tables, ``wire.sets`` for the file facts all start here)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from dissector._core import _ColumnBuffer as ColumnBuffer


_loaded: ModuleType | None = None


def native() -> ModuleType:
    """The compiled core, or an ImportError that says what to do."""
    global _loaded
    # Once loaded, as it is: called for every column of every batch (thousands per long
    # capture), where the environment lookup below cost a few microseconds each.
    if _loaded is not None:
        return _loaded
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
    _loaded = _core
    return _core


def arrow_column(col: ColumnBuffer) -> pa.Array:
    """One column buffer of the core as an Arrow array, built from the buffers as they
    are (no per-value Python objects; ``pa.array`` would also import pandas, and
    ``take``/``cast`` ``pyarrow.compute``: see ``arrow_cast``)."""
    import pyarrow as pa

    from dissector.arrow_cast import take

    _core = native()

    def validity(bits: bytes | None) -> pa.Buffer | None:
        return pa.py_buffer(bits) if bits is not None else None

    if isinstance(col, _core.Int64Column | _core.Float64Column):
        kind = pa.int64() if isinstance(col, _core.Int64Column) else pa.float64()
        buffers = [validity(col.validity), pa.py_buffer(col.values)]
        return pa.Array.from_buffers(kind, len(col.values) // 8, buffers, null_count=col.null_count)
    if isinstance(col, _core.DictColumn):
        idx = pa.Array.from_buffers(
            pa.int32(),
            len(col.indices) // 4,
            [validity(col.validity), pa.py_buffer(col.indices)],
            null_count=col.null_count,
        )
        return pa.DictionaryArray.from_arrays(idx, strings(col.word_offsets, col.word_data))
    if isinstance(col, _core.BoolColumn):
        buffers = [validity(col.validity), pa.py_buffer(col.values)]
        return pa.Array.from_buffers(pa.bool_(), col.length, buffers, null_count=col.null_count)
    if isinstance(col, _core.Int64ListColumn):
        items = pa.Array.from_buffers(
            pa.int64(), len(col.values) // 8, [None, pa.py_buffer(col.values)]
        )
        return pa.ListArray.from_buffers(
            pa.list_(pa.int64()),
            len(col.offsets) // 4 - 1,
            [None, pa.py_buffer(col.offsets)],
            children=[items],
        )
    if isinstance(col, _core.StrListColumn):
        idx = pa.Array.from_buffers(
            pa.int32(), len(col.items) // 4, [None, pa.py_buffer(col.items)]
        )
        values = take(strings(col.word_offsets, col.word_data), idx)
        return pa.ListArray.from_buffers(
            pa.list_(pa.string()),
            len(col.offsets) // 4 - 1,
            [None, pa.py_buffer(col.offsets)],
            children=[values],
        )
    raise TypeError(f"not a column buffer of the core: {type(col).__name__}")


def strings(offsets: bytes, data: bytes) -> pa.Array:
    import pyarrow as pa

    n = len(offsets) // 4 - 1
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
