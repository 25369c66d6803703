"""Bounded fuzzing: random bytes, truncations, bit flips and huge counts never crash,
hang or allocate beyond the input's size."""

from __future__ import annotations

import functools
import random
import re
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.protocol import Decoded, Registry, decode_request, decode_response, get_registry
from dissector.protocol.compile import DecodeFailure
from dissector.protocol.spec import REQUEST, RESPONSE, Field, Layout

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


# ------------------------------------------------------------------ real frames cut short

BUNDLED = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
# "<field path>: <reason> at offset N"; the path is "header", "header.<field>", or
# body fields joined by dots with [i] for array elements.
_NAMED = re.compile(r"^(?P<path>[a-z_][a-z0-9_.\[\]]*): .+ at offset (?P<offset>\d+)$")
_HEADER_FIELDS = {"correlation_id", "client_id", "request_api_key", "request_api_version"}


@functools.cache
def _real_frames() -> list[tuple[int, int, str, bytes, Layout]]:
    """The shortest complete frame of each (key, version, direction) in the bundled
    capture that decodes cleanly to its last byte."""
    from tests.oracle.pipeline import iter_exchanges

    shortest: dict[tuple[int, int, str], bytes] = {}
    for _, ex in iter_exchanges([str(BUNDLED)]):
        if ex.api_key is None or ex.api_version is None:
            continue
        for direction, frame in ((REQUEST, ex.request), (RESPONSE, ex.response)):
            if frame is None:
                continue
            combo = (ex.api_key, ex.api_version, direction)
            if combo not in shortest or len(frame.payload) < len(shortest[combo]):
                shortest[combo] = frame.payload
    frames = []
    for (key, version, direction), payload in sorted(shortest.items()):
        out = _decode_any(payload, key, version, direction)
        # A version newer than the specs decodes only whole, by the newest layout
        # (ASSUMED_VERSION_RULE): cut, it is unsupported_version, as
        # test_assumed_version checks; it names no field here.
        assumed = out.assumed_version is not None
        if out.error is None and out.trailing == 0 and out.layout is not None and not assumed:
            # the layout decoded with: ApiVersions answers error 35 in v0's
            frames.append((key, version, direction, payload, out.layout))
    return frames


def _path_exists(layout_fields: tuple[Field, ...], path: str) -> bool:
    """Does ``a[0].b.c`` name fields of the layout (array indexes dropped)? A struct's
    tagged-field section is ``<struct>._tagged_fields``."""
    fields = layout_fields
    for part in re.sub(r"\[\d+\]", "", path).removesuffix("._tagged_fields").split("."):
        match = next((f for f in fields if f.name == part), None)
        if match is None:
            return False
        fields = match.fields
    return True


def test_short_frames_name_the_field_that_is_cut() -> None:
    """Every complete frame of the bundled capture, cut at every length: the decode
    returns, says which header or body field ran out, at an offset inside the cut
    frame, and the field is one of the layout's."""
    if not BUNDLED.is_file():
        pytest.skip("bundled capture absent")
    frames = _real_frames()
    assert len({f[0] for f in frames}) >= 10  # many APIs, both directions
    assert {f[2] for f in frames} == {REQUEST, RESPONSE}
    cuts = 0
    for key, version, direction, payload, layout in frames:
        for n in range(len(payload)):
            out = _decode_any(payload[:n], key, version, direction)
            where = f"api {key} v{version} {direction} cut at {n}: {out.error}"
            assert out.error is not None, where
            if out.error.startswith("header: "):  # fewer than the 8 fixed request bytes
                assert direction == REQUEST and n < 8, where
                continue
            if layout.version != version and 4 <= n < 6:  # error 35 not yet in sight
                assert out.error.startswith("unsupported_version: "), where
                continue
            named = _NAMED.match(out.error)
            assert named is not None, where
            assert int(named["offset"]) <= n, where
            path = named["path"]
            if path.startswith("header"):
                assert path.removeprefix("header.") in _HEADER_FIELDS | {"_tagged_fields"}, where
            else:
                assert path == "_tagged_fields" or _path_exists(layout.fields, path), where
            cuts += 1
    assert cuts > 1000
