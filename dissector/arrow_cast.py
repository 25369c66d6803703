"""Arrow casts and takes of the pairs path, without importing ``pyarrow.compute``.

``Array.cast`` and ``Array.take`` import ``pyarrow.compute`` on first use, and that
module builds a Python wrapper with a docstring for every compute function: 50-100 ms
of a command's start-up. The kernels themselves live in ``pyarrow._compute`` (5 ms to
import), which ``pyarrow.compute`` re-exports (``call_function``, ``CastOptions``):
the casts here call them there, and fall back to the public methods should a pyarrow
release move them. A cast that only renames the type over the same buffers (``int64``
as a timestamp, a list's item field renamed) is a zero-copy ``view``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def retype_column(
    column: pa.ChunkedArray | pa.Array, target: pa.DataType, *, safe: bool = True
) -> pa.ChunkedArray | pa.Array:
    """``column.cast(target, safe=safe)``, chunk by chunk, the same result."""
    import pyarrow as pa

    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        chunks = [retype_array(c, target, safe=safe) for c in column.chunks]
        return pa.chunked_array(chunks, type=target)
    return retype_array(column, target, safe=safe)


def retype_array(arr: pa.Array, target: pa.DataType, *, safe: bool = True) -> pa.Array:
    """``arr.cast(target, safe=safe)``: a view when only the type's name changes."""
    if arr.type == target:
        return arr
    if _same_layout(arr.type, target):
        return arr.view(target)
    kernels = _kernels()
    if kernels is None:
        return arr.cast(target, safe=safe)
    call, options = kernels
    how = options.safe(target) if safe else options.unsafe(target)
    return call("cast", [arr], how)


def take(values: pa.Array, indices: pa.Array) -> pa.Array:
    """``values.take(indices)``."""
    kernels = _kernels()
    if kernels is None:
        return values.take(indices)
    return kernels[0]("take", [values, indices])


@functools.cache
def _kernels() -> tuple[Any, Any] | None:
    """(call_function, CastOptions) of Arrow's compute kernels, or None."""
    try:
        from pyarrow._compute import CastOptions, call_function
    except ImportError:  # moved in some pyarrow release: the public (slower) route
        return None
    return call_function, CastOptions


def _same_layout(source: pa.DataType, target: pa.DataType) -> bool:
    """A view gives the cast's result: same buffers, only the type's name differs."""
    import pyarrow as pa

    t = pa.types
    if t.is_int64(source) and t.is_timestamp(target):  # int64 are times in target's unit
        return True
    if t.is_list(source) and t.is_list(target):  # e.g. list<item> -> list<element>
        return source.value_type == target.value_type
    return False
