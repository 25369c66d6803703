"""Kafka's variable-length integers: the one unsigned reader.

Unsigned varints (7 bits a byte, least significant group first, high bit set while
more follow) carry the lengths, counts and tags of flexible messages (``compile``).
The record format (v2) stores signed values zigzag-encoded in them (0, -1, 1, -2 ...
as 0, 1, 2, 3 ...): ``records`` takes this reader and applies the zigzag step on top
(inline there, as the hot path of the Python record decoder). The bounds are checked:
the value must end before ``end`` and within ``max_bytes`` (5 for a 32-bit varint, 10
for a varlong).
"""

from __future__ import annotations


class VarintError(Exception):
    """A varint cut off by the end of its bytes (``cut``) or longer than allowed."""

    def __init__(self, message: str, *, cut: bool) -> None:
        super().__init__(message)
        self.cut = cut


def read_uvarint(buf: bytes, p: int, end: int = -1, max_bytes: int = 5) -> tuple[int, int]:
    """(value, offset after it) of the unsigned varint at ``p``; ``end`` -1: the
    buffer's end."""
    if end < 0:
        end = len(buf)
    value = 0
    shift = 0
    for _ in range(max_bytes):
        if p >= end:
            raise VarintError("varint runs past the end", cut=True)
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes", cut=False)
