"""Peak memory against capture size: ``iter_pairs`` flat, ``analyze`` linear in pairs.

    python benchmarks/memory.py [CAPTURE] [--copies 1,3] [--port P]

For each size (the capture, then ``N`` copies of it with shifted client ports, as
``throughput.py --repeat`` makes them) a fresh process runs ``dissector.iter_pairs`` to
the end, and another ``dissector.analyze``; each prints its peak RSS (``VmHWM``, Linux).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from throughput import LONGPOLL, SHARED, enlarge

# The peak is the process's own VmHWM: ru_maxrss of a child started by a large parent
# (this one, after enlarging a capture in memory) can report the parent's peak instead.
_PROBE = """
import sys
import dissector
mode, path = sys.argv[1], sys.argv[2]
if mode == "iter_pairs":
    rows = sum(1 for _ in dissector.iter_pairs(path))
else:
    rows = len(dissector.analyze(path))
with open("/proc/self/status") as status:
    kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(rows, kib * 1024)
"""


def peak(mode: str, path: Path) -> tuple[int, int]:
    """Rows and peak RSS (bytes) of one fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, str(path)],
        capture_output=True, text=True, check=True, timeout=1800,
    ).stdout.split()  # fmt: skip
    return int(out[0]), int(out[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path)
    ap.add_argument("--copies", default="1,3", help="sizes as copies of the capture")
    ap.add_argument("--port", type=int, default=9092, help="broker port (for the copies)")
    args = ap.parse_args()
    capture = args.capture or (LONGPOLL if LONGPOLL.exists() else SHARED)
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (int(c) for c in args.copies.split(",")):
            path = capture
            if copies > 1:
                path = Path(tmp) / f"x{copies}.pcap"
                enlarge(capture, copies, path, args.port)
            for mode in ("iter_pairs", "analyze"):
                rows, rss = peak(mode, path)
                print(f"{capture.name} x{copies}: {mode:10} {rows:>9,} pairs, "
                      f"peak RSS {rss / 2**20:.0f} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
