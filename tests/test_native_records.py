"""The native records stage (native/src/kafka/records.rs) against records.py, its oracle.

Every blob is a ``records`` field: the raw bytes of each records field the Python
decoder meets in the bundled and shared captures, batches built by kafka-python's
and aiokafka's record builders (independent encoders) for every magic and codec,
and mutations of them (CRC flips, truncations, bad lengths, bit flips). The Rust
example ``records_dump`` reads them as length-prefixed blobs and prints one JSON line
each; both sides must agree on records, bytes, batches, partial batches, codecs,
error codes and their wording (except the codec library's own text in
``decompression_failed``) and on the budget left.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from kafka.record import MemoryRecordsBuilder

from dissector.protocol import compile as kc
from dissector.protocol.messages import Registry, decode_request, decode_response, get_registry
from dissector.protocol.records import Budget, parse_records
from dissector.protocol.spec import Layout
from tests.oracle.pipeline import iter_exchanges

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
BUNDLED = ROOT / "captures"
SHARED = Path(os.environ.get("KAFKA_DISSECTOR_SHARED") or ROOT.parent / "shared") / "captures"

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
MAGIC_CODEC = [(m, c) for m in (0, 1) for c in range(4)] + [(2, c) for c in range(5)]
# What the codec library says differs between Rust and Python; the code must not.
LIBRARY_WORDED = ("decompression_failed",)


# --- the native side -------------------------------------------------------------------


@pytest.fixture(scope="session")
def dump_exe() -> Path:
    if shutil.which("cargo") is None:
        pytest.skip("cargo not installed")
    proc = subprocess.run(
        ["cargo", "build", "--quiet", "--example", "records_dump", "--message-format=json"],
        cwd=NATIVE,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("executable") and msg["target"]["name"] == "records_dump":
            return Path(msg["executable"])
    raise AssertionError("cargo built no records_dump executable")


def native(
    exe: Path, blobs: list[bytes], tmp: Path, *, budget: int | None = None, shared: bool = False
) -> list[dict[str, Any]]:
    path = tmp / "blobs.bin"
    path.write_bytes(b"".join(struct.pack(">I", len(b)) + b for b in blobs))
    args = [str(exe), str(path)]
    if budget is not None:
        args += ["--budget", str(budget)]
    if shared:
        args.append("--shared")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


# --- the oracle side -------------------------------------------------------------------


def python(
    blobs: list[bytes], *, budget: int | None = None, shared: bool = False
) -> list[dict[str, Any]]:
    limit = budget if budget is not None else Budget.per_frame().remaining
    frame = Budget.per_frame(limit)
    out = []
    for blob in blobs:
        if not shared:
            frame = Budget.per_frame(limit)
        rs = parse_records(blob, budget=frame)
        out.append(
            {
                "records": rs.records,
                "bytes": rs.bytes,
                "batches": rs.batches,
                "partial_batches": rs.partial_batches,
                "codecs": sorted(set(rs.codecs)),
                "errors": rs.errors,
                "budget_left": frame.remaining,
            }
        )
    return out


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    errors = [e.split(":")[0] if e.startswith(LIBRARY_WORDED) else e for e in row["errors"]]
    got = {k: row[k] for k in ("records", "bytes", "batches", "partial_batches", "budget_left")}
    got.update(codecs=sorted(row["codecs"]), errors=errors)
    if any(e in LIBRARY_WORDED for e in errors):
        # A failed decompression is charged what it produced; Python cannot always
        # tell and charges an upper bound (its buffer), so budgets may differ.
        del got["budget_left"]
    return got


def assert_same(exe: Path, blobs: list[bytes], tmp: Path, **kw: Any) -> list[dict[str, Any]]:
    rust = native(exe, blobs, tmp, **kw)
    oracle = python(blobs, **kw)
    assert len(rust) == len(oracle) == len(blobs)
    for i, (r, p) in enumerate(zip(rust, oracle, strict=True)):
        if any(e in LIBRARY_WORDED for e in comparable(p)["errors"]):
            r = {**r, "budget_left": p["budget_left"]}
        assert comparable(r) == comparable(p), f"blob {i}: {blobs[i][:80].hex()}"
    return rust


# --- blobs -------------------------------------------------------------------------------


def sample_records(n: int, *, big: int = 0) -> list[tuple[int, bytes | None, bytes, list[Any]]]:
    out: list[tuple[int, bytes | None, bytes, list[Any]]] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = b"" if i % 7 == 3 else f"value {i} ".encode() * (1 + i % 4)
        headers = [("trace", f"t{i}".encode())] if i % 2 else []
        out.append((1_700_000_000_000 + i * 37, key, value, headers))
    if big:
        out.append((1_700_000_001_000, b"big", bytes(range(256)) * (big // 256), []))
    return out


def kp_build(magic: int, codec: int, n: int = 20, *, big: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(magic, codec, batch_size=1 << 30)
    for ts, key, value, headers in sample_records(n, big=big):
        assert builder.append(ts, key, value, headers if magic == 2 else None) is not None
    builder.close()
    return bytes(builder.buffer())


def aio_build(magic: int, codec: int, n: int = 12) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    builder: Any
    if magic == 2:
        builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, batch_size=1 << 30)
        for i, (ts, key, value, headers) in enumerate(sample_records(n, big=70_000)):
            assert builder.append(i, ts, key, value, headers) is not None
    else:
        builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 30)
        for i, (ts, key, value, _) in enumerate(sample_records(n, big=70_000)):
            assert builder.append(i, ts, key, value) is not None
    return bytes(builder.build())


def v2_batch(codec: int, body: bytes, count: int) -> bytes:
    """A v2 batch header around ``body`` (compressed by the caller), CRC by crc32c."""
    header = bytearray(61)
    struct.pack_into(
        ">qiibIhiqqqhii", header, 0, 0, 49 + len(body), 0, 2, 0, codec, 0, 0, 0, -1, -1, -1, count
    )
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


def built_blobs() -> list[bytes]:
    blobs = [kp_build(m, c) for m, c in MAGIC_CODEC]
    blobs += [kp_build(m, c, 3, big=200_000) for m, c in MAGIC_CODEC]
    blobs += [aio_build(m, c) for m, c in MAGIC_CODEC if (m, c) != (0, LZ4)]
    blobs.append(b"".join(blobs[:5]))  # several entries of mixed magic in one field
    return blobs


def mutations(seed: bytes, rng: random.Random) -> Iterator[bytes]:
    for cut in sorted({1, 11, 12, 16, 17, 60, 61, 62, len(seed) // 2, len(seed) - 1}):
        if 0 < cut < len(seed):
            yield seed[:cut]
    flip = bytearray(seed)
    flip[min(20, len(seed) - 1)] ^= 0x01  # a CRC byte of v2, the attributes of legacy
    yield bytes(flip)
    for length in (-1, 0, 4, 5, 48, 49, len(seed)):
        bad = bytearray(seed)
        struct.pack_into(">i", bad, 8, length)
        yield bytes(bad)
    for magic in (3, 255):
        bad = bytearray(seed)
        bad[16] = magic
        yield bytes(bad)
    if seed[16] == 2:
        for count in (-5, 0, 1, 1_000_000):
            bad = bytearray(seed)
            struct.pack_into(">i", bad, 57, count)
            yield bytes(bad)
        for codec in (5, 7):
            bad = bytearray(seed)
            bad[22] = (bad[22] & 0xF8) | codec
            yield bytes(bad)
    for _ in range(12):
        bad = bytearray(seed)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        yield bytes(bad)


def _capture_hook(sink: list[bytes]) -> kc.RecordsHook:
    def hook(data: Any) -> Any:
        sink.append(bytes(data))
        return kc.raw_records(data)

    return hook


class _Capturing(Registry):
    """A registry whose records hook keeps the raw bytes of every records field."""

    def __init__(self, sink: list[bytes]) -> None:
        super().__init__(get_registry().specs)
        self.sink = sink

    def _hook(self, layout: Layout, expand: bool) -> kc.RecordsHook:
        return _capture_hook(self.sink)


def records_fields(capture: Path) -> list[bytes]:
    sink: list[bytes] = []
    reg = _Capturing(sink)
    for _, ex in iter_exchanges([str(capture)]):
        if ex.api_key is None or ex.api_version is None:
            continue
        if ex.request is not None:
            decode_request(ex.request.payload, registry=reg)
        if ex.response is not None:
            decode_response(ex.response.payload, ex.api_key, ex.api_version, registry=reg)
    return sink


# --- tests -------------------------------------------------------------------------------


def test_builders_every_magic_and_codec(dump_exe: Path, tmp_path: Path) -> None:
    blobs = built_blobs()
    rust = assert_same(dump_exe, blobs, tmp_path)
    # Not vacuous: the builders' records are all there, every codec was seen.
    assert all(r["errors"] == [] for r in rust)
    assert rust[0]["records"] == 20
    assert {c for r in rust for c in r["codecs"]} == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_mutated_batches(dump_exe: Path, tmp_path: Path) -> None:
    rng = random.Random(11)
    blobs = [m for seed in built_blobs() for m in mutations(seed, rng)]
    rust = assert_same(dump_exe, blobs, tmp_path, budget=1 << 20)
    codes = {e.split(":")[0] for r in rust for e in r["errors"]}
    # The mutations reach the error paths they aim at.
    for code in (
        "crc_mismatch",
        "bad_batch_length",
        "unknown_magic",
        "unknown_codec",
        "record_count_mismatch",
        "bad_record_count",
        "decompression_failed",
    ):
        assert code in codes, code
    assert any(r["partial_batches"] for r in rust)


def test_budget_limits_agree(dump_exe: Path, tmp_path: Path) -> None:
    blobs = [kp_build(m, c, 3, big=200_000) for m, c in MAGIC_CODEC if c]
    for budget in (0, 1000, 150_000, 250_000):
        rust = assert_same(dump_exe, blobs, tmp_path, budget=budget)
        limited = [any(e.startswith("decompression_limit") for e in r["errors"]) for r in rust]
        # Each batch holds a little over 200 000 bytes.
        assert all(limited) if budget < 200_000 else not any(limited)
    # One frame: the fields share the budget, and a spent budget stays spent.
    rust = assert_same(dump_exe, blobs, tmp_path, budget=500_000, shared=True)
    assert rust[0]["errors"] == [] and rust[-1]["budget_left"] == 0


def test_zstd_record_bomb_in_many_partitions(dump_exe: Path, tmp_path: Path) -> None:
    """64 MiB of 7-byte records in 6 KB, once per partition of one frame: the frame's
    budget is spent once, later partitions take their header count, flagged."""
    zstandard = pytest.importorskip("zstandard")
    n = (64 << 20) // 7
    body = zstandard.ZstdCompressor(level=19).compress((b"\x0c" + bytes(6)) * n)
    bomb = v2_batch(ZSTD, body, n)
    assert len(bomb) < 10_000
    blobs = [bomb] * 20
    rust = assert_same(dump_exe, blobs, tmp_path, shared=True)
    assert rust[0]["errors"] == [] and rust[0]["records"] == n
    assert all(r["records"] == n for r in rust)
    assert all(r["errors"][0].startswith("decompression_limit: zstd") for r in rust[1:])


@pytest.mark.parametrize("where", ["bundled", "shared"])
def test_capture_records_fields(dump_exe: Path, tmp_path: Path, where: str) -> None:
    folder = BUNDLED if where == "bundled" else SHARED
    captures = sorted(p for p in folder.glob("*.pcap*")) if folder.is_dir() else []
    if not captures:
        pytest.skip(f"{folder} absent")
    blobs = [b for c in captures for b in records_fields(c)]
    # Both folders hold Produce and Fetch traffic: none found is a broken collector.
    assert blobs, f"no records fields found in {folder}"
    rust = assert_same(dump_exe, blobs, tmp_path)
    assert sum(r["records"] for r in rust) > 0
    if where == "shared":
        # The shared README's count for the librdkafka capture: 1000 records in Produce,
        # some also read back by Fetch.
        assert sum(r["records"] for r in rust) >= 1000
