"""Captures replayed onto ``lo`` by tcpreplay while the live path captures them.

Shared by the live tests that compare a live run with ``dissector.analyze`` of the
replayed file: tcpreplay sends the file's packets as they are (paced), so every row
must be equal but for the times, which are the replay's. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector.live import LiveCapture
from dissector.live.loop import Tick

IFACE = "lo"
REPLAY_PPS = 5000  # captures of a few thousand packets: about a second each at most
START_S = 0.5  # the capture's ring is open before this; the wait only spares a race
SETTLE_S = 0.5  # loopback delivery after tcpreplay returns
JOIN_S = 30.0
TIMEOUT_S = 60.0

# The replay's own: when a packet was sent (paced), and what follows from it.
TIMING = {
    "capture",
    "request_time",
    "response_time",
    "latency_ms",
    "first_byte_ms",
    "fetch_wait",
    "service_ms",
    "queue_ms",
}

NEEDS = [
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="live capture on lo needs root (or CAP_NET_RAW+CAP_NET_ADMIN)",
    ),
    pytest.mark.skipif(
        not (shutil.which("tcpreplay") and shutil.which("tcprewrite")),
        reason="tcpreplay/tcprewrite not installed (apt-get install tcpreplay)",
    ),
]


def run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=TIMEOUT_S)


def port_moved(src: Path, out: Path, ports: dict[int, int]) -> Path:
    """``src`` with its TCP/UDP ports rewritten (pcap), each to a private port that
    nothing else on ``lo`` uses (the broker test bed holds 9092-9096)."""
    portmap = ",".join(f"{a}:{b}" for a, b in ports.items())
    run(["tcprewrite", f"--portmap={portmap}", "-i", str(src), "-o", str(out)])
    return out


def replay(path: Path, pps: int = REPLAY_PPS) -> None:
    run(["tcpreplay", "-q", "-i", IFACE, f"--pps={pps}", str(path)])


def rows(tables: list[pa.Table] | pa.Table) -> list[dict[str, Any]]:
    """Every row with every column but the replay's timing, in (stream, correlation
    id) order."""
    table = pa.concat_tables(tables) if isinstance(tables, list) else tables
    keep = [c for c in table.column_names if c not in TIMING]
    out = table.select(keep).to_pylist()
    return sorted(out, key=lambda r: (r["stream"], r["correlation_id"] or -1, r["api_key"]))


def frame_rows(df: Any) -> list[dict[str, Any]]:
    """``rows`` of an analyzed DataFrame."""
    return rows(pa.Table.from_pandas(df, preserve_index=False))


class Capture:
    """A ``LiveCapture``'s Arrow tables, collected on a thread (bounded join)."""

    def __init__(self, cap: LiveCapture) -> None:
        self.cap = cap
        self.tables: list[pa.Table] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()
        time.sleep(START_S)

    def _collect(self) -> None:
        try:
            for item in self.cap.tables(eager=True):
                if not isinstance(item, Tick):
                    self.tables.append(item)
        except BaseException as exc:  # surfaced in finish()
            self.error = exc

    def finish(self) -> list[pa.Table]:
        time.sleep(SETTLE_S)
        self.cap.stop("test")
        self._thread.join(JOIN_S)
        assert not self._thread.is_alive(), "live capture did not stop"
        if self.error is not None:
            raise self.error
        return self.tables
