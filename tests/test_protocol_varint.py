"""The one varint reader (``protocol.varint``) and the zigzag step records put on top.

The bytes come from independent encoders: kio's ``write_unsigned_varint`` /
``write_unsigned_varlong`` for unsigned values and kafka-python's ``encode_varint``
(zigzag) for the signed ones of the record format.
"""

from __future__ import annotations

import io

import pytest
from kafka.record.util import encode_varint
from kio.serial.writers import write_unsigned_varint, write_unsigned_varlong

from dissector.protocol import records
from dissector.protocol.varint import VarintError, read_uvarint

U32 = [0, 1, 127, 128, 255, 300, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1]
U64 = [2**35, 2**49 + 5, 2**63 - 1]
SIGNED = [0, -1, 1, -64, 63, 64, -65, 2**31 - 1, -(2**31), 2**40, -(2**63), 2**63 - 1]


def _kio(value: int, *, wide: bool = False) -> bytes:
    out = io.BytesIO()
    (write_unsigned_varlong if wide else write_unsigned_varint)(out, value)
    return out.getvalue()


def _zigzag(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


@pytest.mark.parametrize("value", U32)
def test_unsigned_values_as_kio_writes_them(value: int) -> None:
    raw = _kio(value)
    buf = b"\xaa" + raw + b"\xbb"  # read in the middle of a buffer
    assert read_uvarint(buf, 1) == (value, 1 + len(raw))
    assert read_uvarint(buf, 1, 1 + len(raw)) == (value, 1 + len(raw))


@pytest.mark.parametrize("value", U64)
def test_varlongs_need_their_ten_bytes(value: int) -> None:
    raw = _kio(value, wide=True)
    assert read_uvarint(raw, 0, len(raw), 10) == (value, len(raw))
    with pytest.raises(VarintError, match="longer than 5 bytes") as info:
        read_uvarint(raw, 0)
    assert not info.value.cut


def test_bounds_are_checked() -> None:
    raw = _kio(2**20)  # three bytes
    with pytest.raises(VarintError, match="runs past the end") as info:
        read_uvarint(raw, 0, 2)  # ``end`` cuts it, though the buffer goes on
    assert info.value.cut
    with pytest.raises(VarintError) as info:
        read_uvarint(raw[:2], 0)
    assert info.value.cut
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_uvarint(b"\xff" * 6, 0)


@pytest.mark.parametrize("value", SIGNED)
def test_records_zigzag_on_top(value: int) -> None:
    raw = _zigzag(value)
    assert records._varint(raw, 0, len(raw), 10) == (value, len(raw))


def test_records_keep_their_anomaly_words() -> None:
    with pytest.raises(records._Bad) as info:
        records._varint(_zigzag(2**40), 0, 6, 5)
    assert (info.value.code, info.value.detail) == ("bad_varint", "longer than 5 bytes")
    with pytest.raises(records._Bad) as info:
        records._varint(_zigzag(-(2**20)), 0, 2, 5)
    assert (info.value.code, info.value.detail) == ("bad_varint", "cut off")
