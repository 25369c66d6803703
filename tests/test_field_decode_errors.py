"""Every decode error ``decode --records`` finds, ``analyze`` reports on the row (issue #21).

Captures: ``captures/kafka-4-mixed.pcapng`` with bytes overwritten at exact offsets of
its Kafka frames (found by their own bytes in the file). Oracle: the ``decode`` command's
full Python decoder with record expansion (``dissector.decode(records=True)``, what
``decode --records`` prints): the pairs table (native summary, deferring to Python only
where it must) must name the same anomalies in ``decode_error``, with the same status.
The issue's two examples first (a non-nullable string of length -2, an 11-byte varint
inside a record), then a seeded sweep over every single-packet frame.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

import dissector

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"


def _frame_at(data: bytes, api_key: int, version: int, correlation: int, client: bytes) -> int:
    """File offset of the request header (after the size prefix) of one request."""
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    at = data.find(header)
    assert at > 0 and data.find(header, at + 1) < 0, "the request is in one packet, once"
    return at


def _rows(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    df = dissector.analyze(path)
    out = {}
    for row in df.to_dict("records"):
        if not pd.isna(row["correlation_id"]):
            out[(int(row["stream"]), int(row["correlation_id"]))] = row
    return out


def _decoded(path: Path) -> list[dict[str, Any]]:
    return [d for d in dissector.decode(path, records=True) if d["correlation_id"] is not None]


def _error(row: dict[str, Any]) -> str | None:
    value = row["decode_error"]
    return value if isinstance(value, str) else None


def _pair(path: Path, client: str, correlation: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(decode's line, analyze's row) of one request."""
    (line,) = [
        d for d in _decoded(path) if d["client_id"] == client and d["correlation_id"] == correlation
    ]
    return line, _rows(path)[(line["stream"], correlation)]


def _mutated(tmp_path: Path, name: str, edit: Callable[[bytearray], None]) -> Path:
    data = bytearray(MIXED.read_bytes())
    edit(data)
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def test_negative_string_length_is_reported_by_analyze(tmp_path: Path) -> None:
    client = b"mix-aio-produce-gzip"

    def edit(data: bytearray) -> None:
        body = _frame_at(bytes(data), 0, 7, 3, client) + 10 + len(client)
        # Produce v7: transactional_id (-1), acks, timeout_ms, topic count, topic name
        assert data[body : body + 2] == b"\xff\xff" and data[body + 12 : body + 14] == b"\x00\x0c"
        data[body + 12 : body + 14] = struct.pack(">h", -2)

    line, row = _pair(_mutated(tmp_path, "neg-string.pcapng", edit), client.decode(), 3)
    want = line["summary"]["decode_error"]
    assert want == (
        "request: topic_data[0].name: string length -2 is negative (only -1, null, is "
        "allowed) at offset 42"
    )
    assert (line["status"], row["status"]) == ("malformed", "malformed")
    assert _error(row) == want


def test_eleven_byte_record_varint_is_reported_by_analyze(tmp_path: Path) -> None:
    client = b"mix-kp-produce-none"

    def edit(data: bytearray) -> None:
        frame = _frame_at(bytes(data), 0, 9, 4, client)
        batch = data.find(b"\x00" * 8, frame)  # base offset 0: the one batch
        assert data[batch + 16] == 2  # magic 2
        record = batch + 61  # length varint (2 bytes), attributes, timestamp delta
        assert data[record : record + 3] == b"\xb2\x03\x00"
        data[record + 3 : record + 14] = b"\xff" * 10 + b"\x01"  # a varlong of 11 bytes

    line, row = _pair(_mutated(tmp_path, "long-varint.pcapng", edit), client.decode(), 4)
    want = line["summary"]["decode_error"]
    # the batch's CRC no longer matches; the bad record is counted and stepped over by
    # its length, and the four after it read clean
    assert want == (
        "records: crc_mismatch: batch 0 at offset 0; "
        "records: bad_varint: longer than 10 bytes: record 0 in batch 0 at offset 0"
    )
    assert _error(row) == want
    assert row["records"] == line["summary"]["records"] == 5
    assert row["status"] == line["status"] == "ok"


# Decompression failures are worded by each side's library (zlib / flate2, lz4 / lz4_flex):
# the code and the batch must agree, not the library's message.
_LIBRARY_WORDS = re.compile(r"(decompression_failed: \w+): [^;]*? (in batch)")


def _normal(error: str | None) -> str | None:
    return None if error is None else _LIBRARY_WORDS.sub(r"\1: \2", error)


def _single_packet_frames(data: bytes) -> list[tuple[int, int, int]]:
    """(file offset, length, header bytes) of the frames carried whole by one packet."""
    spots = []
    for _, ex in dissector.iter_exchanges(MIXED):
        for frame, header in ((ex.request, 8), (ex.response, 4)):
            if frame is None or frame.first_frame != frame.last_frame:
                continue
            blob = struct.pack(">i", len(frame.payload)) + frame.payload
            at = data.find(blob)
            if at > 0 and data.find(blob, at + 1) < 0 and len(frame.payload) > header + 2:
                spots.append((at + 4, len(frame.payload), header))
    return spots


# "<code>: <detail>: record N in batch": a record's fields (not its length prefix) are bad
_INSIDE_A_RECORD = re.compile(r"records: \w+: [^;]*?: record \d+ in batch")

MUTATIONS: dict[str, Callable[[random.Random], bytes]] = {
    "int16 -2": lambda _rng: b"\xff\xfe",
    "long varint": lambda _rng: b"\xff" * 6,
    "int32 -2": lambda _rng: b"\xff\xff\xff\xfe",
    "random byte": lambda rng: bytes([rng.randrange(256)]),
}


def _mutant(data: bytes, spots: list[tuple[int, int, int]], kind: str, path: Path) -> Path:
    """One overwrite at a seeded offset after the header of each frame (the size prefix
    and request header stay: the pairs stay the same)."""
    rng = random.Random(kind)
    out = bytearray(data)
    for at, length, header in spots:
        k = rng.randrange(header, length - 1)
        patch = MUTATIONS[kind](rng)[: length - k]
        out[at + k : at + k + len(patch)] = patch
    path.write_bytes(bytes(out))
    return path


def test_every_decode_error_reaches_the_row(tmp_path: Path) -> None:
    data = MIXED.read_bytes()
    spots = _single_packet_frames(data)
    assert len(spots) > 400
    seen = {"compared": 0, "with_error": 0, "inside_records": 0}
    for kind in sorted(MUTATIONS):
        path = _mutant(data, spots, kind, tmp_path / "mutant.pcapng")
        rows = _rows(path)
        for line in _decoded(path):
            row = rows[(line["stream"], line["correlation_id"])]
            want = (line["summary"] or {}).get("decode_error")
            where = (kind, line["stream"], line["correlation_id"])
            assert _normal(_error(row)) == _normal(want), where
            assert row["status"] == line["status"], where
            seen["compared"] += 1
            seen["with_error"] += want is not None
            # anomalies only a record-by-record read finds (issue #21's blind spot)
            seen["inside_records"] += bool(want and _INSIDE_A_RECORD.search(want))
    assert seen["compared"] > 1600 and seen["with_error"] > 300, seen
    assert seen["inside_records"] > 0, seen
