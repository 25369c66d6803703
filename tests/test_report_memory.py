"""``report`` on a million and a half pairs stays in the memory of the pass (issue #21).

The capture is ``benchmarks/writers.py``'s: 1.5M ApiVersions pairs in 46 MB, the size
of the issue's case (it took 1.4-1.5 GB then, 0.75-1 GB before the freed memory of the
core's threads was handed back). Oracle for the bound: the same process writing the
pairs to Parquet (``analyze -o x.parquet``, written batch by batch from Arrow): the pass
alone. A report aggregates, so past the pass it may keep what it shows, not a second
copy of the rows: its peak stays within 64 MiB of the Parquet writer's, and under the
issue's 1 GB. Each peak is the child's own ``VmHWM`` (Linux); the report's page is read
to check it covers every pair.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAIRS = 1_500_000

_PROBE = """
import sys
from dissector.cli.app import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(kib * 1024)
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM needs Linux /proc"),
]


def _peak(*command: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *command],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def test_report_peak_is_the_passes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("writers", REPO / "benchmarks" / "writers.py")
    assert spec is not None and spec.loader is not None
    writers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writers)
    capture = tmp_path / "pairs.pcap"
    writers.make_capture(capture, PAIRS)
    parquet = _peak("analyze", str(capture), "-o", str(tmp_path / "x.parquet"), "--quiet")
    page = tmp_path / "r.html"
    peak = _peak("report", str(capture), "-o", str(page))
    assert peak < parquet + 64 * 2**20, (peak >> 20, parquet >> 20)
    assert peak < 2**30
    assert f"{PAIRS:,} Kafka request/response pairs" in page.read_text(encoding="utf-8")
