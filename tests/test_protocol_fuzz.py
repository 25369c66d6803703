"""Bounded fuzzing: random bytes, truncations, bit flips and huge counts never crash,
hang or allocate beyond the input's size."""

from __future__ import annotations

import functools
import random
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.protocol import Decoded, Registry, decode_request, decode_response, get_registry
from dissector.protocol.compile import DecodeFailure
from dissector.protocol.spec import REQUEST, RESPONSE

FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
COMBOS = get_registry().specs.combinations()
# A decode of a few dozen bytes must stay far below what a count of 2**31 would
# allocate if it were trusted.
MEMORY_SLACK = 1024 * 1024


def _decode_any(frame: bytes, key: int, version: int, direction: str) -> Decoded:
    if direction == REQUEST:
        return decode_request(frame)
    return decode_response(frame, key, version)


def _request_header(key: int, version: int) -> bytes:
    layout = get_registry().layout(key, version, REQUEST)
    head = struct.pack(">hhih", key, version, 1, 1) + b"x"
    return head + (b"\x00" if layout is not None and layout.flexible else b"")


def _response_header(key: int, version: int) -> bytes:
    layout = get_registry().layout(key, version, RESPONSE)
    flexible = layout is not None and layout.flexible and key != 18
    return struct.pack(">i", 1) + (b"\x00" if flexible else b"")


def _frame(key: int, version: int, direction: str, body: bytes) -> bytes:
    if direction == REQUEST:
        return _request_header(key, version) + body
    return _response_header(key, version) + body


@FUZZ
@given(st.sampled_from(COMBOS), st.binary(max_size=512))
def test_random_bodies_never_raise(combo: tuple[int, int, str], body: bytes) -> None:
    key, version, direction = combo
    started = time.monotonic()
    out = _decode_any(_frame(key, version, direction, body), key, version, direction)
    assert isinstance(out, Decoded)
    assert out.error is None or " at offset " in out.error
    assert time.monotonic() - started < 2.0


@FUZZ
@given(st.binary(max_size=256), st.integers(-5, 100), st.integers(-3, 20))
def test_random_frames_with_any_key_never_raise(body: bytes, key: int, version: int) -> None:
    assert isinstance(decode_request(struct.pack(">hhi", key, version, 0) + body), Decoded)
    assert isinstance(decode_response(body, key, version), Decoded)


@pytest.mark.parametrize("count", [0x7FFFFFFF, 0x10000000, 65536])
def test_huge_counts_everywhere_are_bounded(count: int) -> None:
    """Every combination, with a huge int32 and a huge varint at every early offset."""
    big32 = struct.pack(">i", count)
    varint = bytearray()
    n = count
    while n >= 0x80:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    frames = [
        (key, version, direction, _frame(key, version, direction, b"\x01" * pad + filler * 4))
        for key, version, direction in COMBOS
        for pad in range(0, 12, 3)
        for filler in (big32, bytes(varint))
    ]
    for key, version, direction, frame in frames:  # compiles every decoder once
        assert isinstance(_decode_any(frame, key, version, direction), Decoded)
    tracemalloc.start()
    try:
        started = time.monotonic()
        for key, version, direction, frame in frames:
            assert isinstance(_decode_any(frame, key, version, direction), Decoded)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 30
    assert peak < MEMORY_SLACK


def test_truncations_and_bit_flips_of_real_shaped_frames() -> None:
    """Valid frames from kio's encoder, cut at every offset and with random bit flips."""
    pytest.importorskip("kio")
    from tests.test_protocol_decode import metadata_v12_request

    rng = random.Random(1234)
    frame = metadata_v12_request()
    for cut in range(len(frame) + 1):
        out = decode_request(frame[:cut])
        assert isinstance(out, Decoded)
        if 0 < cut < len(frame) and cut >= 12:
            assert out.error is not None
    for _ in range(2000):
        mutated = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(mutated))
            mutated[i] ^= 1 << rng.randrange(8)
        assert isinstance(decode_request(bytes(mutated)), Decoded)


@functools.cache
def _backends() -> tuple[Registry, Registry]:
    specs = get_registry().specs
    return (
        Registry(specs, "generate", parse_records=False),
        Registry(specs, "closures", parse_records=False),
    )


@FUZZ
@given(st.sampled_from(COMBOS), st.binary(max_size=320))
def test_generated_and_closure_decoders_agree(combo: tuple[int, int, str], buf: bytes) -> None:
    """The two back ends are built independently from the same layout: on any bytes
    both succeed with the same body and end offset, or both fail."""
    generated, closures = _backends()
    layout = get_registry().layout(*combo)
    assert layout is not None
    try:
        expected: tuple[object, int] | None = closures.decoder(layout, False)(buf, 0)
    except DecodeFailure:
        expected = None
    try:
        got: tuple[object, int] | None = generated.decoder(layout, False)(buf, 0)
    except Exception:
        got = None
    assert got == expected
