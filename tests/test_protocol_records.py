"""parse_records against independent encoders and readers.

Encoders: kafka-python 3.0.12's record builders (with python-snappy, lz4, zstandard
and xxhash as its codecs), aiokafka's record builders (cramjam codecs), librdkafka
(the real capture), and hand-assembled batches whose compression and CRCs come from
zlib, zstandard, lz4 and crc32c. Readers used as oracles: kafka-python's
MemoryRecords, xxhash.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import crc32c
import lz4.frame as lz4_frame  # kafka-python's lz4 codec; a dev dependency
import pytest
import snappy  # python-snappy: kafka-python's snappy codec; a dev dependency
import xxhash  # kafka-python's old-Kafka lz4 framing; a dev dependency
import zstandard  # kafka-python's zstd codec; a dev dependency
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder

from dissector.protocol.records import (
    CODEC_NAMES,
    ERROR_CODES,
    FRAME_BUDGET_CAP,
    FRAME_RATIO,
    Budget,
    current_frame_budget,
    frame_budget,
    parse_records,
)

CAPTURES = Path(__file__).resolve().parents[1].parent / "shared" / "captures"
TANSU = CAPTURES / "local-tansu-confluent-kafka.pcapng"

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS_BY_MAGIC = {0: (0, 1, 2, 3), 1: (0, 1, 2, 3), 2: (0, 1, 2, 3, 4)}
MAGIC_CODEC = [(m, c) for m, cs in CODECS_BY_MAGIC.items() for c in cs]

Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


# --- helpers: building with kafka-python, reading with kafka-python ------------------


def kp_build(
    magic: int,
    codec: int,
    records: list[Rec],
    *,
    offset: int = 0,
    **producer: Any,
) -> bytes:
    builder = MemoryRecordsBuilder(magic, codec, batch_size=1 << 30, offset=offset, **producer)
    for ts, key, value, headers in records:
        assert builder.append(ts, key, value, headers if magic == 2 else None) is not None
    builder.close()
    return bytes(builder.buffer())


def kp_read(buf: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None, list[Any]]]:
    """Every record as kafka-python's reader sees it (offset, ts, key, value, headers)."""
    out = []
    reader = MemoryRecords(buf)
    while reader.has_next():
        batch = reader.next_batch()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


def ours(buf: bytes, **kw: Any) -> list[tuple[int, int | None, bytes | None, bytes | None, list]]:
    rs = parse_records(buf, expand=True, **kw)
    assert rs.items is not None
    return [
        (r["offset"], r["timestamp"], r["key"], r["value"], list(r["headers"]))
        for item in rs.items
        for r in item["records"]
    ]


def sample_records(n: int, *, big: int = 0) -> list[Rec]:
    out: list[Rec] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = b"" if i % 7 == 3 else (f"value {i} ".encode() * (1 + i % 4))
        headers = [("trace", f"t{i}".encode()), ("null", None)] if i % 2 else []
        out.append((1_700_000_000_000 + i * 37, key, value, headers))
    if big:
        # Several xerial (32 KiB) and lz4 (64 KiB) blocks in one batch.
        out.append((1_700_000_001_000, b"big", bytes(range(256)) * (big // 256), []))
    return out


def v2_rebuild(batch: bytes, *, attributes: int | None = None, body: bytes | None = None) -> bytes:
    """Re-assemble a v2 batch with new attributes and/or records section, fixing the
    length and the CRC-32C (computed by the crc32c package)."""
    header = bytearray(batch[:61])
    records = batch[61:] if body is None else body
    if attributes is not None:
        struct.pack_into(">h", header, 21, attributes)
    struct.pack_into(">i", header, 8, len(header) - 12 + len(records))
    crc = crc32c.crc32c(bytes(header[21:]) + records)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records


def xerial(payload: bytes, block: int = 32 * 1024) -> bytes:
    out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for i in range(0, len(payload), block):
        chunk = snappy.compress(payload[i : i + block])
        out += [struct.pack(">i", len(chunk)), chunk]
    return b"".join(out)


# --- round trips against kafka-python -------------------------------------------------


@pytest.mark.parametrize(("magic", "codec"), MAGIC_CODEC)
def test_kafka_python_builder_round_trip(magic: int, codec: int) -> None:
    records = sample_records(30, big=200_000)
    buf = kp_build(magic, codec, records, offset=100)
    rs = parse_records(buf, expand=True)
    assert rs.errors == []
    assert rs.partial_batches == 0
    assert rs.bytes == len(buf)
    assert rs.records == len(records)
    if codec == 0 and magic < 2:
        assert rs.batches == len(records)  # each legacy message is its own batch
        assert rs.codecs == ["none"] * len(records)
    else:
        assert rs.batches == 1
        assert rs.codecs == [CODEC_NAMES[codec]]

    got = ours(buf)
    assert got == kp_read(buf)  # second oracle: kafka-python's reader
    assert [(k, v) for _, _, k, v, _ in got] == [(k, v) for _, k, v, _ in records]
    if magic == 2:
        assert [h for *_, h in got] == [h for *_, h in records]
        assert [ts for _, ts, *_ in got] == [ts for ts, *_ in records]
        assert [o for o, *_ in got] == list(range(100, 100 + len(records)))
    if magic == 1:
        assert [ts for _, ts, *_ in got] == [ts for ts, *_ in records]
    if magic == 0:
        assert all(ts is None for _, ts, *_ in got)

    # The fast path (no expand) counts the same.
    fast = parse_records(buf)
    assert (fast.batches, fast.records, fast.codecs, fast.errors, fast.items) == (
        rs.batches,
        rs.records,
        rs.codecs,
        [],
        None,
    )


# aiokafka refuses LZ4 for magic 0 (it does not write Kafka 0.8's broken checksum).
@pytest.mark.parametrize(("magic", "codec"), [mc for mc in MAGIC_CODEC if mc != (0, LZ4)])
def test_aiokafka_builder_round_trip(magic: int, codec: int) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioDefault
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacy

    records = sample_records(12, big=70_000)
    if magic == 2:
        builder: Any = AioDefault(2, codec, 0, -1, -1, -1, batch_size=1 << 30)
        for i, (ts, key, value, headers) in enumerate(records):
            assert builder.append(i, ts, key, value, headers) is not None
    else:
        builder = AioLegacy(magic, codec, batch_size=1 << 30)
        for i, (ts, key, value, _) in enumerate(records):
            assert builder.append(i, ts, key, value) is not None
    buf = bytes(builder.build())
    rs = parse_records(buf)
    assert rs.errors == []
    assert rs.records == len(records)
    got = ours(buf)
    assert got == kp_read(buf)
    assert [(k, v) for _, _, k, v, _ in got] == [(k, v) for _, k, v, _ in records]


def test_several_batches_and_offsets() -> None:
    a = kp_build(2, GZIP, sample_records(5), offset=0)
    b = kp_build(2, 0, sample_records(3), offset=5)
    c = kp_build(1, SNAPPY, sample_records(4), offset=0)
    buf = a + b + c
    rs = parse_records(buf, expand=True)
    assert rs.errors == []
    assert (rs.batches, rs.records, rs.codecs) == (3, 12, ["gzip", "none", "snappy"])
    assert ours(buf) == kp_read(buf)
    assert rs.items is not None
    assert [i["magic"] for i in rs.items] == [2, 2, 1]
    # Producers write base offset 0 and put the builder's offset in the deltas.
    assert [r["offset"] for r in rs.items[1]["records"]] == [5, 6, 7]


def test_magic1_wrapper_offsets_relative_to_wrapper() -> None:
    # A broker-assigned wrapper offset turns inner relative offsets into absolute ones.
    buf = bytearray(kp_build(1, GZIP, sample_records(4)))
    struct.pack_into(">q", buf, 0, 1003)  # wrapper carries the last inner offset
    got = ours(bytes(buf))
    assert [o for o, *_ in got] == [1000, 1001, 1002, 1003]
    assert got == kp_read(bytes(buf))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    magic=st.sampled_from([1, 2]),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    base_ts=st.integers(min_value=0, max_value=2**41),
    recs=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10**6),
            st.none() | st.binary(max_size=64),
            st.none() | st.binary(max_size=300),
            st.lists(
                st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3
            ),
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_hypothesis_round_trip(
    magic: int, codec: int, base_ts: int, recs: list[tuple[int, Any, Any, Any]]
) -> None:
    if magic == 1 and codec == ZSTD:
        codec = GZIP  # zstd needs magic 2
    records: list[Rec] = [(base_ts + d, k, v, h if magic == 2 else []) for d, k, v, h in recs]
    buf = kp_build(magic, codec, records)
    rs = parse_records(buf, expand=True)
    assert rs.errors == []
    assert rs.records == len(records)
    got = ours(buf)
    assert got == kp_read(buf)
    assert [(ts, k, v, h) for _, ts, k, v, h in got] == records
    assert json.loads(json.dumps(rs.to_json()))["records"] == len(records)


# --- v2 batch fields --------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, ZSTD])
def test_transactional_producer_fields(codec: int) -> None:
    records = sample_records(6)
    buf = kp_build(
        2,
        codec,
        records,
        offset=42,
        transactional=True,
        producer_id=123456789,
        producer_epoch=7,
        base_sequence=99,
    )
    rs = parse_records(buf, expand=True)
    assert rs.errors == []
    assert rs.items is not None
    item = rs.items[0]
    theirs = MemoryRecords(buf).next_batch()
    assert theirs.validate_crc()
    assert item["crc_ok"] is True
    assert item["crc"] == theirs.crc
    assert item["is_transactional"] is theirs.is_transactional is True
    assert item["is_control"] is theirs.is_control_batch is False
    assert item["producer_id"] == theirs.producer_id == 123456789
    assert item["producer_epoch"] == theirs.producer_epoch == 7
    assert item["base_sequence"] == theirs.base_sequence == 99
    assert item["base_offset"] == theirs.base_offset == 0
    assert item["last_offset_delta"] == theirs.last_offset_delta == 47
    assert [r["offset"] for r in item["records"]] == list(range(42, 48))
    assert item["first_timestamp"] == theirs.first_timestamp == records[0][0]
    assert item["max_timestamp"] == theirs.max_timestamp == max(r[0] for r in records)
    assert item["compression"] == CODEC_NAMES[codec]
    assert item["timestamp_type"] == "create_time" and theirs.timestamp_type == 0
    assert item["magic"] == 2


@pytest.mark.parametrize(("kind", "name"), [(0, "ABORT"), (1, "COMMIT")])
def test_control_batch(kind: int, name: str) -> None:
    # Brokers write control batches; build the record with kafka-python and set the
    # control bit (attributes bit 5) as the broker would.
    builder = DefaultRecordBatchBuilder(2, 0, True, 5000, 3, 0, batch_size=1 << 20)
    builder.append(0, 1_700_000_000_000, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 9), [])
    plain = bytes(builder.build())
    attributes = struct.unpack_from(">h", plain, 21)[0] | 0x20
    buf = v2_rebuild(plain, attributes=attributes)
    theirs = MemoryRecords(buf).next_batch()
    assert theirs.is_control_batch and theirs.validate_crc()
    assert [r.type for r in theirs] == [kind]
    rs = parse_records(buf, expand=True)
    assert rs.errors == [] and rs.records == 1
    assert rs.items is not None
    assert rs.items[0]["is_control"] is True
    assert rs.items[0]["is_transactional"] is True
    assert rs.items[0]["control_type"] == name
    assert rs.items[0]["records"][0]["control_type"] == name


def test_log_append_time_uses_max_timestamp() -> None:
    plain = kp_build(2, 0, sample_records(3))
    attributes = struct.unpack_from(">h", plain, 21)[0] | 0x08
    buf = v2_rebuild(plain, attributes=attributes)
    got = ours(buf)
    assert got == kp_read(buf)
    assert {ts for _, ts, *_ in got} == {max(r[0] for r in sample_records(3))}


# --- codec framings ----------------------------------------------------------------------


def _records_section(magic2_batch: bytes) -> bytes:
    return magic2_batch[61:]


@pytest.mark.parametrize(
    ("framing", "codec"),
    [
        ("snappy-raw", SNAPPY),
        ("snappy-xerial", SNAPPY),
        ("snappy-framed", SNAPPY),
        ("gzip-two-members", GZIP),
        ("zstd-no-content-size", ZSTD),
        ("lz4-linked-blocks", LZ4),
        ("lz4-block-checksums", LZ4),
    ],
)
def test_codec_framings(framing: str, codec: int) -> None:
    records = sample_records(40, big=300_000)
    plain = kp_build(2, 0, records)
    section = _records_section(plain)
    if framing == "snappy-raw":
        body = snappy.compress(section)
    elif framing == "snappy-xerial":
        body = xerial(section)
    elif framing == "snappy-framed":
        body = snappy.StreamCompressor().compress(section)
        assert body.startswith(b"\xff\x06\x00\x00sNaPpY")
    elif framing == "gzip-two-members":
        half = len(section) // 2
        body = zlib_gzip(section[:half]) + zlib_gzip(section[half:])
    elif framing == "zstd-no-content-size":
        body = zstandard.ZstdCompressor(write_content_size=False).compress(section)
    elif framing == "lz4-linked-blocks":
        body = lz4_frame.compress(
            section, block_linked=True, block_size=lz4_frame.BLOCKSIZE_MAX64KB
        )
    else:
        body = lz4_frame.compress(section, block_checksum=True, content_checksum=True)
    buf = v2_rebuild(plain, attributes=codec, body=body)
    rs = parse_records(buf, expand=True)
    assert rs.errors == []
    assert rs.codecs == [CODEC_NAMES[codec]]
    assert ours(buf) == ours(plain)
    assert [(k, v, h) for _, _, k, v, h in ours(buf)] == [(k, v, h) for _, k, v, h in records]


def zlib_gzip(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def test_old_kafka_lz4_header_checksum() -> None:
    """Magic 0 LZ4 carries Kafka 0.8's wrong frame header checksum (KAFKA-3160)."""
    buf = kp_build(0, LZ4, sample_records(10))
    value_len_at = 8 + 4 + 4 + 1 + 1 + 4  # offset, size, crc, magic, attrs, key(-1)
    frame = buf[value_len_at + 4 :]
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    right = (xxhash.xxh32(frame[4:descriptor_end]).intdigest() >> 8) & 0xFF
    assert frame[descriptor_end] != right, "expected the broken checksum"
    assert frame[descriptor_end] == (xxhash.xxh32(frame[:descriptor_end]).intdigest() >> 8) & 0xFF
    rs = parse_records(buf)
    assert (rs.errors, rs.records) == ([], 10)
    # Only magic 0 is forgiven: the same broken frame in a v2 batch is corrupt, as
    # Kafka's own reader says for magic >= 1.
    plain = kp_build(2, 0, sample_records(10))
    broken = v2_rebuild(plain, attributes=LZ4, body=kafka_codec.lz4_encode_old_kafka(plain[61:]))
    rs = parse_records(broken)
    assert rs.records == 0
    assert [e.split(":")[0] for e in rs.errors] == ["decompression_failed"]
    fixed = v2_rebuild(plain, attributes=LZ4, body=kafka_codec.lz4_encode(plain[61:]))
    assert (parse_records(fixed).errors, parse_records(fixed).records) == ([], 10)


def test_xxh32_matches_xxhash() -> None:
    from dissector.protocol.records import _xxh32

    rng = random.Random(7)
    for n in [*range(40), 100, 1000]:
        data = rng.randbytes(n)
        for seed in (0, 1, 0xFFFFFFFF):
            assert _xxh32(data, seed) == xxhash.xxh32(data, seed=seed).intdigest()


# --- anomalies ---------------------------------------------------------------------------


def test_partial_final_batch_is_not_an_error() -> None:
    a = kp_build(2, 0, sample_records(5))
    b = kp_build(2, GZIP, sample_records(7), offset=5)
    for cut in (1, 11, 12, 30, 61, len(b) - 1):
        rs = parse_records(a + b[:cut])
        assert (rs.batches, rs.records, rs.partial_batches, rs.errors) == (1, 5, 1, [])
        # kafka-python's reader also stops before the cut batch.
        assert len(kp_read(a + b[:cut])) == 5


def test_crc_mismatch_reported_not_fatal() -> None:
    buf = bytearray(kp_build(2, 0, sample_records(4)))
    buf[-3] ^= 0x40  # inside the last record's header value
    theirs = MemoryRecords(bytes(buf)).next_batch()
    assert not theirs.validate_crc()
    rs = parse_records(bytes(buf), expand=True)
    assert rs.records == 4
    assert rs.errors == ["crc_mismatch: batch 0 at offset 0"]
    assert rs.items is not None and rs.items[0]["crc_ok"] is False

    legacy = bytearray(kp_build(1, 0, sample_records(2)))
    legacy[-1] ^= 0x01
    rs = parse_records(bytes(legacy))
    assert rs.records == 2
    assert [e.split(":")[0] for e in rs.errors] == ["crc_mismatch"]


def test_double_wrapped_legacy_and_nesting_bound() -> None:
    inner = kp_build(1, 0, sample_records(3))

    def wrap(payload: bytes) -> bytes:
        # One magic-1 gzip wrapper around payload, CRC-32 from zlib.
        value = zlib_gzip(payload)
        body = struct.pack(">bbq", 1, GZIP, 0) + struct.pack(">i", -1)
        body += struct.pack(">i", len(value)) + value
        crc = zlib.crc32(body)
        return struct.pack(">qiI", 0, len(body) + 4, crc) + body

    once = wrap(inner)
    assert (parse_records(once).records, parse_records(once).errors) == (3, [])
    twice = wrap(once)
    rs = parse_records(twice)
    assert (rs.records, rs.errors) == (3, [])  # decoded, though Kafka would refuse it
    thrice = wrap(twice)
    rs = parse_records(thrice)
    assert rs.records == 0
    assert [e.split(":")[0] for e in rs.errors] == ["nesting_too_deep"]


def test_huge_counts_are_errors_not_allocations() -> None:
    plain = kp_build(2, 0, sample_records(3))
    header = bytearray(plain)
    struct.pack_into(">i", header, 57, 2**31 - 1)
    buf = v2_rebuild(bytes(header))
    rs = parse_records(buf, expand=True)
    assert rs.records == 3
    assert [e.split(":")[0] for e in rs.errors] == ["record_count_mismatch"]

    struct.pack_into(">i", header, 57, -5)
    rs = parse_records(v2_rebuild(bytes(header)))
    assert "bad_record_count" in {e.split(":")[0] for e in rs.errors}

    # One record claiming 2**31-1 headers in a few bytes.
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
    builder.append(0, 0, b"k", b"v", [])
    batch = bytearray(builder.build())
    assert batch[-1] == 0  # header count varint
    zigzag_max = b"\xfe\xff\xff\xff\x0f"
    body = bytes(batch[61:-1]) + zigzag_max
    body = bytes([body[0] + 4 * 2]) + body[1:]  # record length grows by 4 (zigzag *2)
    rs = parse_records(v2_rebuild(bytes(batch), body=body), expand=True)
    assert rs.records == 1
    assert [e.split(":")[0] for e in rs.errors] == ["bad_header_count"]


def test_unknown_codec_and_magic() -> None:
    plain = kp_build(2, 0, sample_records(2))
    rs = parse_records(v2_rebuild(plain, attributes=5))
    assert rs.codecs == ["unknown"]
    assert rs.errors == ["unknown_codec: 5 in batch 0 at offset 0"]
    bad_magic = bytearray(plain)
    bad_magic[16] = 3
    rs = parse_records(bytes(bad_magic) + plain)
    assert rs.batches == 1 and rs.records == 2
    assert rs.errors == ["unknown_magic: 3 in batch 0 at offset 0"]


def test_bad_varint() -> None:
    plain = kp_build(2, 0, [(0, b"k", b"v", [])])
    body = b"\xff" * 6  # a record length varint that never ends
    rs = parse_records(v2_rebuild(plain, body=body))
    assert rs.errors and rs.errors[0].startswith("bad_varint: ")
    assert rs.records == 0


def test_to_json_uses_base64() -> None:
    buf = kp_build(2, 0, [(5, b"\x00\xffkey", b"hello", [("h", b"\x01\x02")])])
    doc = json.loads(json.dumps(parse_records(buf, expand=True).to_json()))
    assert doc["bytes_encoding"] == "base64"
    record = doc["items"][0]["records"][0]
    assert base64.b64decode(record["key"]) == b"\x00\xffkey"
    assert record["key_text"] is None
    assert record["value_text"] == "hello"
    assert base64.b64decode(record["headers"][0][1]) == b"\x01\x02"
    assert record["timestamp_iso"] == "1970-01-01T00:00:00.005Z"


def test_empty_and_none_like_inputs() -> None:
    rs = parse_records(b"")
    assert (rs.batches, rs.records, rs.bytes, rs.errors, rs.partial_batches) == (0, 0, 0, [], 0)
    rs = parse_records(memoryview(kp_build(2, 0, sample_records(2))))
    assert rs.records == 2
    rs = parse_records(bytearray(kp_build(1, 0, sample_records(2))), expand=True)
    assert rs.records == 2
    rs = parse_records(None, expand=True)  # a null records field
    assert (rs.records, rs.errors, rs.items) == (0, [], [])
    rs = parse_records(12)  # type: ignore[arg-type]
    assert (rs.records, rs.errors) == (0, ["bad_input: int"])


# --- fuzz and bombs -------------------------------------------------------------------


def _seeds() -> list[bytes]:
    return [
        kp_build(2, GZIP, sample_records(8)),
        kp_build(2, 0, sample_records(8)),
        kp_build(2, LZ4, sample_records(8)),
        kp_build(2, ZSTD, sample_records(8)),
        kp_build(2, SNAPPY, sample_records(8)),
        kp_build(1, SNAPPY, sample_records(8)),
        kp_build(0, LZ4, sample_records(8)),
        kp_build(0, 0, sample_records(3)),
    ]


def _check(rs: Any, data: bytes) -> None:
    assert rs.bytes == len(data)
    assert rs.records >= 0 and rs.batches >= 0
    assert len(rs.errors) <= 65
    for err in rs.errors:
        assert err.split(":")[0] in ERROR_CODES, err
    assert not any(e.startswith("internal_error") for e in rs.errors), rs.errors
    json.dumps(rs.to_json())


def test_fuzz_truncations_and_bit_flips() -> None:
    rng = random.Random(1234)
    cases = 0
    for seed in _seeds():
        for cut in range(0, len(seed), max(1, len(seed) // 60)):
            data = seed[:cut]
            _check(parse_records(data, expand=True), data)
            cases += 1
        for _ in range(150):
            data = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            _check(parse_records(bytes(data), expand=True, max_decompressed=1 << 20), bytes(data))
            cases += 1
    assert cases > 1000


def test_fuzz_random_bytes() -> None:
    rng = random.Random(99)
    for i in range(1500):
        data = rng.randbytes(rng.randint(0, 300))
        if i % 3 == 0 and len(data) > 17:  # make the magic byte plausible
            data = data[:16] + bytes([i % 3]) + data[17:]
        _check(parse_records(data, expand=bool(i % 2)), data)


def test_fuzz_hypothesis_garbage_after_valid_header() -> None:
    plain = kp_build(2, 0, sample_records(2))

    @settings(max_examples=200, deadline=None)
    @given(body=st.binary(max_size=200), codec=st.integers(0, 7))
    def run(body: bytes, codec: int) -> None:
        data = v2_rebuild(plain, attributes=codec, body=body)
        _check(parse_records(data, expand=True, max_decompressed=1 << 16), data)

    run()


BOMB_SCRIPT = textwrap.dedent(
    """
    import resource, sys, time, zlib
    import zstandard, lz4.frame
    from dissector.protocol.records import parse_records
    import crc32c, struct

    ZERO = bytes(1 << 20)
    GIB = 1024  # chunks of 1 MiB

    def gzip_bomb():
        c = zlib.compressobj(1, zlib.DEFLATED, 31)
        return b"".join(c.compress(ZERO) for _ in range(GIB)) + c.flush()

    def zstd_bomb():
        c = zstandard.ZstdCompressor().compressobj()
        return b"".join(c.compress(ZERO) for _ in range(GIB)) + c.flush()

    def lz4_bomb():
        c = lz4.frame.LZ4FrameCompressor(block_linked=False)
        return c.begin() + b"".join(c.compress(ZERO) for _ in range(256)) + c.flush()

    def snappy_lie():
        # A raw snappy block whose length preamble claims 4 GiB - 1.
        return b"\\xff\\xff\\xff\\xff\\x0f" + b"\\x00" * 64

    TINY = 8 << 20  # decompressed bytes of 7-byte records (the smallest valid ones)

    def tiny_records():
        # Each record: length 6, attributes, ts delta, offset delta, empty key,
        # empty value, no headers; all zero bytes but the length.
        c = zstandard.ZstdCompressor().compressobj()
        chunk = b"\x0c" + bytes(6)
        block = chunk * (1 << 17)
        return b"".join(c.compress(block) for _ in range(TINY // len(block))) + c.flush()

    def batch(codec, body, count=1):
        header = bytearray(61)
        struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49 + len(body), 0, 2, 0, codec,
                         0, 0, 0, -1, -1, -1, count)
        struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + body))
        return bytes(header) + body

    kind = sys.argv[1]
    if kind == "tiny":
        data = batch(4, tiny_records(), count=TINY // (7 << 17) * (1 << 17))
        limit = TINY
    else:
        codec, body = {"gzip": (1, gzip_bomb), "zstd": (4, zstd_bomb), "lz4": (3, lz4_bomb),
                       "snappy": (2, snappy_lie)}[kind]
        data = batch(codec, body())
        limit = 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    rs = parse_records(data, expand=True, max_decompressed=limit)
    took = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kept = sum(len(i["records"]) for i in rs.items)
    print(len(data), took, (after - before) // 1024, rs.records, kept, "|".join(rs.errors))
    """
)


@pytest.mark.parametrize("kind", ["gzip", "zstd", "lz4", "snappy", "tiny"])
def test_decompression_bomb_is_bounded(kind: str) -> None:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, kind],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    size, took, grew_mib, records, kept, errors = proc.stdout.split(maxsplit=5)
    assert int(size) < 6_000_000  # the test data itself stays small
    assert float(took) < 20.0
    assert int(grew_mib) < 200  # far less than the 256 MiB-1 GiB inside, or 1.2M dicts
    if kind == "tiny":
        # All 1.2 million records counted, a bounded number kept as dicts.
        assert int(records) == (8 << 20) // 7 // (1 << 17) * (1 << 17)
        assert 0 < int(kept) <= 4 * (8 << 20) // 512
        assert errors.strip().startswith("expand_limit: "), errors
        assert "|" not in errors, errors  # and nothing else
    else:
        assert errors.strip().startswith("decompression_limit: "), errors


def test_expand_keeps_a_bounded_prefix() -> None:
    records = [(i, None, b"v%d" % i, []) for i in range(3000)]
    for magic, codec in ((2, 0), (2, GZIP), (1, GZIP), (1, 0)):
        buf = kp_build(magic, codec, records)
        rs = parse_records(buf, expand=True, max_decompressed=200_000)
        assert rs.records == 3000  # all counted
        kept = ours(buf, max_decompressed=200_000)
        assert 0 < len(kept) < 3000
        assert kept == kp_read(buf)[: len(kept)]
        assert [e.split(":")[0] for e in rs.errors] == ["expand_limit"]


def test_budget_is_shared_across_batches() -> None:
    one = kp_build(2, GZIP, [(0, None, bytes(300_000), [])])
    rs = parse_records(one * 4, max_decompressed=700_000)
    assert rs.batches == 4
    # Two decompressed and walked; past the budget each header's count (1) is taken.
    assert rs.records == 4
    assert [e.split(":")[0] for e in rs.errors] == ["decompression_limit"] * 2
    # The overrun spent the rest of the budget: the last batch is not tried again.
    assert rs.errors[1].endswith("output over 0 bytes in batch 3 at offset 1194")


# --- real traffic ------------------------------------------------------------------------


def _produce_payloads(capture: Path, port: int = 9092) -> list[bytes]:
    if not capture.exists():
        pytest.skip(f"{capture} absent (shared captures folder not beside the repo)")
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    out = subprocess.run(
        [
            *("tshark", "-r", str(capture), "-d", f"tcp.port=={port},kafka"),
            *("-Y", "kafka.api_key == 0", "-T", "fields", "-e", "tcp.payload"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [bytes.fromhex(line) for line in out.split()]


def _find_v2_batches(frame: bytes) -> list[bytes]:
    """Record batches located by layout alone: magic 2 at +16, a length that fits, and a
    CRC-32C (crc32c package) that matches."""
    found = []
    pos = 0
    while pos + 61 <= len(frame):
        length = struct.unpack_from(">i", frame, pos + 8)[0]
        end = pos + 12 + length
        if (
            frame[pos + 16] == 2
            and length >= 49
            and end <= len(frame)
            and crc32c.crc32c(frame[pos + 21 : end]) == struct.unpack_from(">I", frame, pos + 17)[0]
        ):
            found.append(frame[pos:end])
            pos = end
        else:
            pos += 1
    return found


def test_librdkafka_capture_counts_per_codec() -> None:
    payloads = _produce_payloads(TANSU)
    assert len(payloads) == 16
    per_codec: dict[str, int] = {}
    batches = 0
    for frame in payloads:
        for batch in _find_v2_batches(frame):
            batches += 1
            rs = parse_records(batch, expand=True)
            assert rs.errors == [] and rs.batches == 1
            codec = rs.codecs[0]
            per_codec[codec] = per_codec.get(codec, 0) + rs.records
            assert ours(batch) == kp_read(batch)
            assert rs.items is not None
            for r in rs.items[0]["records"]:
                assert r["value_text"].startswith(f"{codec} message ")
    assert batches == 16
    assert per_codec == {"gzip": 250, "lz4": 250, "snappy": 250, "zstd": 250}


def test_skywalking_header_capture() -> None:
    frames = _produce_payloads(CAPTURES / "deepflow-00-produce-v7-sw8.pcap", 36333)
    batches = [b for f in frames for b in _find_v2_batches(f)]
    assert len(batches) == 1
    rs = parse_records(batches[0], expand=True)
    assert rs.errors == [] and rs.records == 1
    assert rs.items is not None
    assert [k for k, _ in rs.items[0]["records"][0]["headers"]] == ["sw8"]
    assert ours(batches[0]) == kp_read(batches[0])


# Counts from ../shared/captures/README.md (an independent decoder's).
@pytest.mark.parametrize(
    ("capture", "port", "batches", "records"),
    [
        ("ndpi-kafka.pcapng", 9092, 3, 3),
        ("ndpi-kafka-2023.pcapng", 9092, 1, 1),
        ("deepflow-00-produce-v9.pcap", 36333, 1, 1),
        ("deepflow-produce-v9-old.pcap", 36333, 1, 1),
    ],
)
def test_uncompressed_v2_captures(capture: str, port: int, batches: int, records: int) -> None:
    frames = _produce_payloads(CAPTURES / capture, port)
    found = [b for f in frames for b in _find_v2_batches(f)]
    assert len(found) == batches
    total = 0
    for batch in found:
        rs = parse_records(batch, expand=True)
        assert (rs.errors, rs.codecs) == ([], ["none"])
        assert ours(batch) == kp_read(batch)
        total += rs.records
    assert total == records


def _find_legacy_set(frame: bytes) -> bytes:
    """The magic 0/1 messages of a Produce request, located by layout: magic 0 or 1 at
    +16, a size that fits, and a CRC-32 (zlib) that matches; contiguous ones joined."""
    pos = 0
    found: list[tuple[int, int]] = []
    while pos + 26 <= len(frame):
        size = struct.unpack_from(">i", frame, pos + 8)[0]
        end = pos + 12 + size
        if (
            frame[pos + 16] in (0, 1)
            and size >= 14
            and end <= len(frame)
            and zlib.crc32(frame[pos + 16 : end]) == struct.unpack_from(">I", frame, pos + 12)[0]
        ):
            found.append((pos, end))
            pos = end
        else:
            pos += 1
    assert found, "no message set found"
    assert all(a[1] == b[0] for a, b in itertools.pairwise(found))
    return frame[found[0][0] : found[-1][1]]


@pytest.mark.parametrize(
    ("capture", "magic", "value_start"),
    [
        ("deepflow-00-produce-v2.pcap", 1, b"Message without compression"),
        ("go-sniffer-kafka.pcap", 0, b'{"agent": {'),
    ],
)
def test_legacy_captures(capture: str, magic: int, value_start: bytes) -> None:
    frames = _produce_payloads(CAPTURES / capture)
    sets = [_find_legacy_set(f) for f in frames if len(f) > 100]  # requests, not responses
    assert len(sets) == 1
    rs = parse_records(sets[0], expand=True)
    assert (rs.errors, rs.batches, rs.records, rs.codecs) == ([], 1, 1, ["none"])
    assert rs.items is not None
    assert rs.items[0]["magic"] == magic
    assert rs.items[0]["records"][0]["value"].startswith(value_start)
    assert ours(sets[0]) == kp_read(sets[0])


# --- budgets per frame, and record errors in the pairs rows (issue #11) -------------------


def test_frame_budget_is_shared_by_every_field_of_a_frame() -> None:
    one = kp_build(2, GZIP, [(0, None, bytes(300_000), [])])
    assert current_frame_budget() is None
    with frame_budget(max_decompressed=700_000) as budget:
        assert current_frame_budget() is budget
        first = parse_records(one * 2, budget=current_frame_budget())
        left = budget.remaining
        second = parse_records(one, budget=current_frame_budget())
    assert current_frame_budget() is None
    assert first.errors == []
    # Alone, the second field would fit: the frame's budget is what ran out.
    assert parse_records(one, max_decompressed=700_000).errors == []
    assert 0 < left < 100_000
    assert second.errors == [
        f"decompression_limit: gzip output over {left} bytes in batch 0 at offset 0"
    ]
    assert second.records == 1  # the header's count, flagged by the error
    assert budget.remaining == 0


def test_large_frames_get_a_budget_in_proportion() -> None:
    small, large = Budget.for_frame(1000), Budget.for_frame(4 << 20)
    assert small == Budget.per_frame()  # 64 MiB, and four times that for kept records
    assert large.remaining == FRAME_RATIO * (4 << 20)
    assert large.items == small.items  # kept records stay bounded by the default
    # A fixed cap, whatever the frame's size (a 32 MB frame once bought 1 GiB).
    assert Budget.for_frame(32 << 20).remaining == FRAME_BUDGET_CAP == 256 << 20
    assert Budget.for_frame(1 << 30, max_decompressed=512 << 20).remaining == 512 << 20
    # a run's own cap (--max-decompressed) bounds every frame, small ones too, and a
    # larger one lets a large frame scale past the default
    assert Budget.for_frame(1000, cap=1 << 20).remaining == 1 << 20
    assert Budget.for_frame(1 << 40, cap=3 << 20).remaining == 3 << 20
    assert Budget.for_frame(32 << 20, cap=2 << 30).remaining == FRAME_RATIO * (32 << 20)
    assert Budget.for_frame(1000, cap=2 << 30) == small


def _kio_frame(entity: Any, **header: Any) -> bytes:
    import dataclasses
    import io

    from kio.serial import entity_writer

    cls = type(entity)
    header_cls = cls.__header_schema__
    names = {f.name for f in dataclasses.fields(header_cls)}
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(**{k: v for k, v in header.items() if k in names}))
    entity_writer(cls)(buf, entity)
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


def produce_pair(partitions: list[bytes]) -> tuple[bytes, bytes]:
    """A Produce v3 request holding one records field per partition, and its response,
    size-prefixed, both written by kio (an independent encoder)."""
    pytest.importorskip("kio")
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.produce.v3 import request as rq
    from kio.schema.produce.v3 import response as rs

    data = tuple(rq.PartitionProduceData(index=i, records=p) for i, p in enumerate(partitions))
    request = rq.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(rq.TopicProduceData(name="bombs", partition_data=data),),
    )
    answers = tuple(
        rs.PartitionProduceResponse(
            index=i, error_code=ErrorCode.none, base_offset=0, log_append_time=None
        )
        for i in range(len(partitions))
    )
    response = rs.ProduceResponse(
        responses=(rs.TopicProduceResponse(name="bombs", partition_responses=answers),),
        throttle_time=datetime.timedelta(0),
    )
    header = {"request_api_key": 0, "request_api_version": 3, "correlation_id": 7}
    return _kio_frame(request, client_id="t", **header), _kio_frame(response, correlation_id=7)


def write_conversation(path: Path, request: bytes, response: bytes) -> None:
    """One TCP connection (handshake, the request, the response) as a pcap of
    scapy-built Ethernet frames."""
    pytest.importorskip("scapy")
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    client, broker = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
    seq = {client: 1000, broker: 5000}
    frames: list[bytes] = []

    def send(src: tuple[str, int], dst: tuple[str, int], flags: str, data: bytes = b"") -> None:
        ack = seq[dst] if flags != "S" else 0
        tcp = TCP(sport=src[1], dport=dst[1], seq=seq[src], ack=ack, flags=flags)
        packet = Ether() / IP(src=src[0], dst=dst[0]) / tcp
        frames.append(bytes(packet / Raw(data)) if data else bytes(packet))
        seq[src] += len(data) or (1 if "S" in flags else 0)

    send(client, broker, "S")
    send(broker, client, "SA")
    send(client, broker, "A")
    for src, dst, data in ((client, broker, request), (broker, client, response)):
        for i in range(0, len(data), 1400):
            send(src, dst, "PA", data[i : i + 1400])
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000, i, len(frame), len(frame)))
            f.write(frame)


def test_record_errors_reach_the_pairs_row(tmp_path: Path) -> None:
    import dissector

    bad_crc = bytearray(kp_build(2, ZSTD, sample_records(5)))
    bad_crc[20] ^= 0x01  # a byte of the CRC-32C
    bomb = kp_build(2, ZSTD, [(0, None, bytes(65 << 20), [])])  # 65 MiB of zeros
    assert len(bomb) < 100_000
    good = kp_build(2, GZIP, sample_records(4))
    path = tmp_path / "produce.pcap"
    write_conversation(path, *produce_pair([bytes(bad_crc), bomb, good]))

    df = dissector.analyze(path)
    assert len(df) == 1
    row = df.iloc[0]
    # A bad CRC or a bomb is not a malformed frame: the pair stays a plain pair.
    assert (row["api_name"], row["status"], row["partitions"]) == ("Produce", "ok", 3)
    assert row["records"] == 5 + 1 + 4  # the bomb by its header's count
    assert row["compression"] == "gzip,zstd"
    parts = row["decode_error"].split("; ")
    assert parts[0] == "records: crc_mismatch: batch 0 at offset 0"
    assert parts[1].startswith("records: decompression_limit: zstd output over ")
    assert parts[1].endswith(" bytes in batch 0 at offset 0")
    # The bomb spent the frame's budget: the good batch after it is counted by its
    # header and flagged too, not decompressed on a budget the bomb already used.
    assert parts[2:] == [
        "records: decompression_limit: gzip output over 0 bytes in batch 0 at offset 0"
    ]

    decoded = list(dissector.decode(path))
    assert decoded[0]["summary"]["record_errors"] == 3


BOMB_PARTITIONS_SCRIPT = textwrap.dedent(
    """
    import resource, struct, sys, time
    import crc32c, zstandard
    import dissector
    sys.path.insert(0, sys.argv[3])
    from test_protocol_records import produce_pair, write_conversation

    n = (64 << 20) // 7  # 64 MiB of the smallest records: 7 bytes each
    body = zstandard.ZstdCompressor(level=3).compress((b"\\x0c" + bytes(6)) * n)
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49 + len(body), 0, 2, 0, 4,
                     0, 0, 0, -1, -1, -1, n)
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + body))
    partitions = int(sys.argv[2])
    path = sys.argv[4]
    write_conversation(path, *produce_pair([bytes(header) + body] * partitions))
    start = time.monotonic()
    if sys.argv[1] == "analyze":
        row = dissector.analyze(path).iloc[0]
        out = [int(row["records"]), row["status"], row["decode_error"]]
    else:
        pair = next(iter(dissector.decode(path, records=True)))
        out = [pair["summary"]["records"], pair["summary"]["record_errors"], ""]
    took = time.monotonic() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(n, took, rss, *out, sep="\\t")
    """
)


def _bomb_partitions(tmp_path: Path, mode: str, partitions: int) -> list[str]:
    pytest.importorskip("kio")
    pytest.importorskip("scapy")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [
            *(sys.executable, "-c", BOMB_PARTITIONS_SCRIPT, mode, str(partitions)),
            *(str(root / "tests"), str(tmp_path / "bomb.pcap")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.rstrip("\n").split("\t")


def test_zstd_record_bomb_in_100_partitions_analyzes_in_bounded_time(tmp_path: Path) -> None:
    """Was >120 s: each field had its own 64 MiB budget and every record was walked."""
    n, took, _, records, status, error = _bomb_partitions(tmp_path, "analyze", 100)
    assert float(took) < 60.0
    assert int(records) == 100 * int(n)  # one walked, 99 by their header's count
    assert status == "ok"
    listed = error.split("; ")
    assert all(e.startswith("records: decompression_limit: zstd output over ") for e in listed[:8])
    assert listed[8:] == ["records: too_many_errors: 91 more not listed"]


def test_decode_records_on_a_bomb_in_20_partitions_stays_bounded(tmp_path: Path) -> None:
    """``decode --records`` reached 8.3 GB here: now the frame shares one budget for
    decompression and for kept records."""
    n, took, rss_mib, records, record_errors, _ = _bomb_partitions(tmp_path, "decode", 20)
    assert int(rss_mib) < 1500
    assert float(took) < 120.0
    assert int(records) == 20 * int(n)
    # The first field: expand_limit; the other 19: decompression_limit and expand_limit.
    assert int(record_errors) == 1 + 19 * 2
