"""The Arrow conversions of the pairs path, done without ``pyarrow.compute``.

``Array.cast`` imports ``pyarrow.compute`` on first use, and that import (its kernels
and the docstrings of every compute function) costs a command's start-up 50-100 ms of
CPU. The conversions the pairs path needs are buffer moves: a new type over the same
buffers (``int64`` as a timestamp, a list item renamed), a rescale of 64-bit times,
or a dictionary of strings spelled out. They are done here with ``Array.view`` and
numpy (which pyarrow imports anyway); anything else falls back to ``cast``, with the
same result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_INT32_MAX = 2**31 - 1
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def retype_column(
    column: pa.ChunkedArray | pa.Array, target: pa.DataType, *, safe: bool = True
) -> pa.ChunkedArray | pa.Array:
    """``column.cast(target, safe=safe)``, chunk by chunk, without ``pyarrow.compute``
    where a buffer move does it. A time to a coarser unit is truncated as ``cast``
    truncates (towards zero) when ``safe`` is false."""
    import pyarrow as pa

    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        chunks = [retype_array(c, target, safe=safe) for c in column.chunks]
        return pa.chunked_array(chunks, type=target)
    return retype_array(column, target, safe=safe)


def retype_array(arr: pa.Array, target: pa.DataType, *, safe: bool = True) -> pa.Array:
    """One array as ``target`` (see ``retype_column``)."""
    import pyarrow as pa

    source = arr.type
    if source == target:
        return arr
    if _same_layout(source, target):
        return arr.view(target)
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target) and source.tz == target.tz:
        factor, rest = divmod(_PER_SECOND[source.unit], _PER_SECOND[target.unit])
        if factor > 1 and not rest and not safe:
            return _coarser_times(arr, target, factor)
    if (
        pa.types.is_dictionary(source)
        and pa.types.is_string(source.value_type)
        and pa.types.is_string(target)
    ):
        decoded = _decoded_strings(arr)
        if decoded is not None:
            return decoded
    return arr.cast(target, safe=safe)


def take_strings(words: pa.Array, indices: np.ndarray, valid: np.ndarray | None) -> pa.Array | None:
    """``words.take(indices)`` for a ``string`` array of words, as a ``string`` array
    (null where ``valid`` is false); None when the result would not fit ``string``'s
    32-bit offsets (the caller then takes the ``pyarrow.compute`` route)."""
    import numpy as np
    import pyarrow as pa

    n = len(indices)
    if len(words) == 0:  # nothing to take: right only when nothing is asked for
        if n == 0 or (valid is not None and not valid.any()):
            return pa.nulls(n, pa.string())
        return None
    w_valid, w_offsets_buf, w_data_buf = words.buffers()
    if w_valid is not None and words.null_count:
        return None  # a null word: rare, left to take()
    w_offsets = np.frombuffer(w_offsets_buf, np.int32)[words.offset : words.offset + len(words) + 1]
    data = np.frombuffer(w_data_buf, np.uint8) if w_data_buf is not None else np.empty(0, np.uint8)
    idx = indices.astype(np.int64, copy=False)
    if valid is not None:
        idx = np.where(valid, idx, 0)  # a null slot's index may be anything
    if n and (idx.min() < 0 or idx.max() >= len(words)):
        return None
    starts = w_offsets[:-1][idx].astype(np.int64)
    lengths = (w_offsets[1:] - w_offsets[:-1])[idx].astype(np.int64)
    if valid is not None:
        lengths[~valid] = 0
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total > _INT32_MAX:
        return None
    # Byte i of the result is byte starts[k] + (i - offsets[k]) of the words, k its item.
    shift = np.repeat(starts - offsets[:-1], lengths)
    out = data[np.arange(total, dtype=np.int64) + shift]
    validity = None
    nulls = 0
    if valid is not None:
        nulls = int(n - np.count_nonzero(valid))
        if nulls:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(),
        n,
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)],
        null_count=nulls,
    )


def _same_layout(source: pa.DataType, target: pa.DataType) -> bool:
    """A view gives the cast's result: same buffers, only the type's name differs."""
    import pyarrow as pa

    t = pa.types
    if t.is_int64(source) and t.is_timestamp(target):  # int64 are times in target's unit
        return True
    if t.is_list(source) and t.is_list(target):  # e.g. list<item> -> list<element>
        return source.value_type == target.value_type
    return False


def _coarser_times(arr: pa.Array, target: pa.DataType, factor: int) -> pa.Array:
    """64-bit times divided by ``factor``, truncated towards zero as ``cast`` does."""
    import numpy as np
    import pyarrow as pa

    validity, values_buf = arr.buffers()
    end = arr.offset + len(arr)
    values = np.frombuffer(values_buf, np.int64)[:end]
    # Floor division, then one step back towards zero for negative non-multiples.
    out = values // factor
    out += (values < 0) & (values % factor != 0)
    whole = pa.Array.from_buffers(
        target, end, [validity, pa.py_buffer(out)], null_count=-1 if arr.null_count else 0
    )
    return whole.slice(arr.offset, len(arr)) if arr.offset else whole


def _decoded_strings(arr: pa.DictionaryArray) -> pa.Array | None:
    """A dictionary of strings spelled out as a ``string`` array (None: use cast)."""
    import numpy as np

    indices = arr.indices
    validity, values_buf = indices.buffers()
    end = indices.offset + len(indices)
    raw = np.frombuffer(values_buf, np.dtype(str(indices.type)))[:end]  # "int32" etc.
    valid = None
    if validity is not None and indices.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[:end]
        valid = bits.astype(bool)
    whole = take_strings(arr.dictionary, raw, valid)
    if whole is None:
        return None
    return whole.slice(indices.offset, len(indices)) if indices.offset else whole
