"""Whole-pipeline fuzzing: random mutations of real captures never raise, hang or balloon.

A bounded, seeded loop (CI runs it by default; ``KAFKA_DISSECTOR_FUZZ=N`` runs N
mutations per capture for a longer session). A mutated file may stop being a
capture at all: that must be a ``CaptureError`` (a clear one-line error), never
anything else.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

import dissector
from tests.conftest import CAPTURES, SHARED_CAPTURES
from tests.oracle.capture import CaptureError

ROUNDS = int(os.environ.get("KAFKA_DISSECTOR_FUZZ", "12"))
MAX_SECONDS_PER_FILE = 30


def _sources() -> list[Path]:
    found = sorted(CAPTURES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        found += sorted(p for p in SHARED_CAPTURES.glob("*.pcap*") if p.stat().st_size < 4 << 20)
    return found


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 24)):
        op = rng.random()
        pos = rng.randrange(len(buf)) if buf else 0
        if op < 0.5 and buf:
            buf[pos] = rng.randrange(256)
        elif op < 0.65 and buf:
            # a length-like field: extreme values are what break parsers
            value = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF])
            buf[pos : pos + 4] = value.to_bytes(4, rng.choice(["big", "little"]))
        elif op < 0.8:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif op < 0.95 and buf:
            del buf[pos : pos + rng.randint(1, 64)]
        else:
            buf = buf[: rng.randrange(len(buf) + 1)]
    return bytes(buf)


@pytest.mark.parametrize("source", _sources(), ids=lambda p: p.name)
def test_mutated_captures_never_raise(tmp_path: Path, source: Path) -> None:
    rng = random.Random(source.name)
    data = source.read_bytes()
    analysed = 0
    for i in range(ROUNDS):
        path = tmp_path / f"m{i}{source.suffix}"
        path.write_bytes(mutate(data, rng))
        t0 = time.perf_counter()
        try:
            df = dissector.analyze(path)
        except CaptureError:
            continue  # the mutation broke the file header: a clean, named error
        took = time.perf_counter() - t0
        assert took < MAX_SECONDS_PER_FILE, f"{path.name}: {took:.1f} s"
        assert set(dissector.COLUMN_NAMES) <= set(df.columns)
        analysed += 1
    assert analysed > 0  # the loop did exercise the pipeline
