"""Memory that does not grow with the output (issue #21): ``decode`` and ``analyze
--partitions`` to CSV / JSON lines, each run in a fresh process whose own peak RSS
(``VmHWM``) is read at its exit, on a small and an eight times larger capture made by
the benchmark scripts' generators (``benchmarks/scale.py``). A writer that kept every
line or row would grow with them; these may grow by a bounded amount (allocator and
Arrow pools) only. No timing: ``benchmarks/scale.py`` prints the figures at a million.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="VmHWM needs Linux /proc"
)

_PROBE = """
import sys
from dissector.cli.app import main
args, out = sys.argv[1:-1], sys.argv[-1]
if args[0] == "decode":
    with open(out, "w", encoding="utf-8") as sink:
        sys.stdout = sink
        main(args, standalone_mode=False)
    sys.stdout = sys.__stdout__
else:
    main(args, standalone_mode=False)
with open("/proc/self/status") as status:
    kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(kib * 1024)
"""

MIB = 2**20


@pytest.fixture
def scale(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/scale.py`` (which imports ``writers.py`` beside it)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    return importlib.import_module("scale")


def _peak(args: list[str], out: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args, str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def test_decode_memory_does_not_grow_with_the_pairs(scale: ModuleType, tmp_path: Path) -> None:
    peaks = {}
    for pairs in (5_000, 40_000):
        capture = tmp_path / f"pairs-{pairs}.pcap"
        scale.make_capture(capture, pairs)
        out = tmp_path / f"decode-{pairs}.jsonl"
        peaks[pairs] = _peak(["decode", str(capture)], out)
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == pairs
        assert [json.loads(lines[i])["correlation_id"] for i in (0, -1)] == [0, pairs - 1]
    # 35,000 more lines (33 MB of text) may not cost more than a few MiB
    assert peaks[40_000] - peaks[5_000] < 16 * MIB, {k: v // MIB for k, v in peaks.items()}


@pytest.mark.parametrize("ext", [".jsonl", ".csv"])
def test_partitions_text_memory_does_not_grow_with_the_rows(
    scale: ModuleType, ext: str, tmp_path: Path
) -> None:
    peaks = {}
    for rows in (100_000, 400_000):
        capture = tmp_path / f"parts-{rows}.pcap"
        scale.make_partitions_capture(capture, rows)
        out = tmp_path / f"parts-{rows}{ext}"
        args = ["analyze", str(capture), "--quiet", "--partitions", str(out)]
        peaks[rows] = _peak(args, out)
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == rows + (ext == ".csv")
        if ext == ".jsonl":
            last = json.loads(lines[-1])
            assert (last["api_name"], last["partition"], last["committed_offset"]) == (
                "OffsetFetch",
                rows - 1,
                1000 + rows - 1,
            )
    # Both are several of the core's steps (51,200 rows: a batch of 256 exchanges); the
    # peaks of such runs differ by up to ~40 MiB from run to run (allocator pools). The
    # table the pass kept and made a frame of took 300 (CSV) to 700 MiB (JSON) more at
    # 400,000 rows than at 100,000; the exchanges read ahead of a full step made steps
    # of 512,000 rows (250 MiB).
    assert peaks[400_000] - peaks[100_000] < 64 * MIB, {k: v // MIB for k, v in peaks.items()}
