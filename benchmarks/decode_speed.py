"""Decode speed of the protocol stage: generated code vs compiled closures.

    python benchmarks/decode_speed.py [CAPTURE...] [--seconds S] [--runs R] [--synthetic N]

The frames of the captures (default: every capture in ../shared/captures) are
collected once through the pipeline, then decoded again and again for about S
seconds per row. With --synthetic N, N messages per (api_key, version, direction)
encoded by kio with fixed values are added, so every layout is exercised.

Rows (messages/s and MB/s of frame payload):
  generate-no-rec   generated code, record batches only measured (engine alone)
  generate          the default back end (specialised Python source per layout),
                    record batches summarised by dissector.protocol.records
  closures-no-rec   the closure-tree back end (what explains failures), engine alone
  closures          the closure-tree back end, record batches summarised
  generate+records  generated code, record batches expanded into records
  first-compile     one-off cost of compiling all layouts, both back ends
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dissector.protocol.messages import (  # noqa: E402
    Registry,
    decode_request,
    decode_response,
    get_registry,
)

DEFAULT_DIR = REPO.parent / "shared" / "captures"
Frame = tuple[bytes, int | None, int | None]  # payload, api_key (responses), version


def capture_frames(paths: list[str]) -> list[Frame]:
    from tests.oracle.pipeline import iter_exchanges

    frames: list[Frame] = []
    for _, ex in iter_exchanges(paths, ports=[9092, 36333]):
        if ex.api_key is None or ex.api_version is None:
            continue
        if ex.request is not None:
            frames.append((ex.request.payload, None, None))
        if ex.response is not None:
            frames.append((ex.response.payload, ex.api_key, ex.api_version))
    return frames


def synthetic_frames(per_combo: int) -> list[Frame]:
    """kio-encoded messages holding only defaults/empty arrays: one per layout."""
    sys.path.insert(0, str(REPO / "tests"))
    import io
    import pkgutil

    from hypothesis import strategies as st  # noqa: F401  (imported by the helper)
    from test_protocol_roundtrip import KIO_COMBOS, _kio_frame, kio_strategy

    frames: list[Frame] = []
    for key, version, direction, path in KIO_COMBOS:
        cls = pkgutil.resolve_name(path)
        value = kio_strategy(cls).example()
        frame = _kio_frame(cls, value, direction, key, version)
        for _ in range(per_combo):
            frames.append((frame, None, None) if direction == "request" else (frame, key, version))
    del io
    return frames


def run(
    frames: list[Frame], registry: Registry, records: bool, seconds: float
) -> tuple[float, float]:
    total = sum(len(f[0]) for f in frames)
    for payload, key, version in frames:  # compile outside the timing
        _one(payload, key, version, registry, records)
    rounds = 0
    started = time.perf_counter()
    while True:
        for payload, key, version in frames:
            _one(payload, key, version, registry, records)
        rounds += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    return rounds * len(frames) / elapsed, rounds * total / elapsed / 1e6


def _one(payload: bytes, key: int | None, version: int | None, reg: Registry, rec: bool) -> None:
    if key is None or version is None:
        decode_request(payload, records=rec, registry=reg)
    else:
        decode_response(payload, key, version, records=rec, registry=reg)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("captures", nargs="*")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--synthetic", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs per row")
    args = parser.parse_args()
    paths = args.captures or sorted(
        str(p) for p in DEFAULT_DIR.glob("*") if p.suffix in (".pcap", ".pcapng")
    )
    frames = capture_frames(paths) if paths else []
    if args.synthetic:
        frames += synthetic_frames(args.synthetic)
    if not frames:
        sys.exit("no frames: give captures or --synthetic N")
    specs = get_registry().specs
    generate = Registry(specs, "generate")
    closures = Registry(specs, "closures")
    size = sum(len(f[0]) for f in frames)
    print(
        f"{len(frames)} frames, {size / 1e6:.2f} MB per round, {len(specs.combinations())} layouts"
    )
    print(
        f"first-compile  generate {timed(generate.compile_all):.2f} s, "
        f"closures {timed(closures.compile_all):.2f} s"
    )
    raw = Registry(specs, "generate", parse_records=False)
    raw_closures = Registry(specs, "closures", parse_records=False)
    for name, reg, rec in (
        ("generate-no-rec", raw, False),
        ("closures-no-rec", raw_closures, False),
        ("generate", generate, False),
        ("closures", closures, False),
        ("generate+records", generate, True),
    ):
        rate, mbs = max(run(frames, reg, rec, args.seconds) for _ in range(args.runs))
        print(f"{name:<17} {rate:>10,.0f} msg/s {mbs:>8.1f} MB/s")


if __name__ == "__main__":
    main()
