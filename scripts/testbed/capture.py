"""Record loopback traffic to the test bed broker's ports into a capture file.

dumpcap (Wireshark's capture engine) on `lo` with a BPF filter on the broker ports; when
dumpcap is missing or cannot open the interface, scapy's sniffer (root) writes a pcap.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any


def bpf_filter(ports: tuple[int, ...]) -> str:
    return " or ".join(f"tcp port {p}" for p in ports)


def drop_loopback_echoes(packets: Any, window: int = 16, within_s: float = 0.01) -> list[Any]:
    """Drop the second sighting of a loopback packet: the same bytes among the last few
    packets and within 10 ms (a real TCP retransmission waits at least the 200 ms RTO)."""
    kept: list[Any] = []
    recent: list[tuple[bytes, float]] = []
    for pkt in packets:
        raw, ts = bytes(pkt), float(pkt.time)
        if any(raw == r and ts - t < within_s for r, t in recent):
            recent = [(r, t) for r, t in recent if r != raw]
            continue
        kept.append(pkt)
        recent = [*recent[-(window - 1) :], (raw, ts)]
    return kept


@dataclass
class Capture:
    """Context manager: capture starts on enter and is complete on disk after exit."""

    path: Path
    ports: tuple[int, ...] = (9092, 9094)
    interface: str = "lo"
    settle_s: float = 1.0
    # "dumpcap" tries dumpcap first and falls back to scapy; "scapy" uses scapy only.
    prefer: str = "dumpcap"
    tool: str = ""
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _sniffer: Any = field(default=None, repr=False)

    def __enter__(self) -> Capture:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self.path.unlink()
        if self.prefer == "dumpcap" and shutil.which("dumpcap") and self._start_dumpcap():
            self.tool = "dumpcap"
        else:
            self._start_scapy()
        return self

    def _start_dumpcap(self) -> bool:
        proc = subprocess.Popen(
            [
                "dumpcap",
                "-q",
                "-i",
                self.interface,
                "-f",
                bpf_filter(self.ports),
                "-w",
                str(self.path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # dumpcap creates the file once the interface is open; give it a bounded wait.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if self.path.exists() and self.path.stat().st_size > 0:
                self._proc = proc
                time.sleep(0.3)
                return True
            time.sleep(0.1)
        proc.kill()
        proc.wait(5)
        return False

    def _start_scapy(self) -> None:
        from scapy.all import AsyncSniffer

        self._sniffer = AsyncSniffer(iface=self.interface, filter=bpf_filter(self.ports))
        self._sniffer.start()
        self.tool = "scapy"
        time.sleep(0.5)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Late packets (FINs, the broker's last responses) are still in flight when the
        # drivers return, and the kernel hands packets to the capture in batches.
        time.sleep(self.settle_s)
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
            self._proc = None
        if self._sniffer is not None:
            from scapy.all import wrpcap

            packets = self._sniffer.stop()
            # scapy's Linux socket sees each loopback packet twice (outgoing, incoming).
            packets = drop_loopback_echoes(packets)
            wrpcap(str(self.path), packets)
            self._sniffer = None
