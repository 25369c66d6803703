"""Where live frames come from: one libpcap handle (pcapy-ng), read in batches.

Why pcapy-ng (libpcap) and not scapy: on loopback (a busy 2-core VM) pcapy-ng with
a 32 MiB ring lost no packet at any rate the sender reached (up to ~48,000 packets/s,
300,000 packets in a row), with or without our per-frame parse, while scapy's
``sniff`` lost 10-55 % at 10,000 packets/s and ~90 % from 30,000/s, and its raw
socket 60-70 % from 30,000/s (it also sees every loopback packet twice). libpcap
reports its own drop counts (``pcap_stats``), sizes the kernel ring and compiles BPF
in-process. Method and numbers: ``benchmarks/live_capture.py``.
"""

from __future__ import annotations

import select
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dissector.options import DEFAULT_BROKER_PORTS

DEFAULT_SNAPLEN = 262_144  # libpcap's default; loopback MTU is 65,536
DEFAULT_BUFFER_MIB = 32  # kernel ring; absorbs bursts while Python decodes
BATCH = 1024  # frames per read call
BLOCK_TIMEOUT_MS = 50  # TPACKET_V3 hands over a partly filled block after this long

# libpcap's pcap_activate() results (pcap/pcap.h); pcapy returns them unchanged.
_PCAP_ERRORS = {
    -1: "generic error",
    -5: "no such device",
    -6: "monitor mode not supported",
    -8: "permission denied",
    -9: "interface is not up",
    -11: "permission denied for promiscuous mode",
}
_PCAP_PERM_DENIED = (-8, -11)
_PCAP_NO_SUCH_DEVICE = -5

# DLT values that differ from the LINKTYPE values stored in files (libpcap's table).
_DLT_TO_LINKTYPE = {12: 101, 14: 101}

_PRIVILEGE_HINT = (
    "capturing needs root or the CAP_NET_RAW and CAP_NET_ADMIN capabilities "
    "(e.g. sudo, or: sudo setcap cap_net_raw,cap_net_admin=eip <path of the python binary>)"
)


class LiveError(Exception):
    """The capture cannot start: no such interface, no privileges, a bad filter, ..."""


@dataclass(frozen=True, slots=True)
class CaptureStats:
    """libpcap's counters (pcap_stats): packets received, dropped by the kernel
    buffer, dropped by the interface or driver."""

    received: int = 0
    dropped: int = 0
    if_dropped: int = 0


def default_filter(ports: Iterable[int] | None = None) -> str:
    """The BPF filter for the broker ports (the usual Kafka ports when none are given)."""
    chosen = sorted(set(ports)) if ports else sorted(DEFAULT_BROKER_PORTS)
    return "tcp and (" + " or ".join(f"port {p}" for p in chosen) + ")"


# ---------------------------------------------------------------------------
# Packet source: libpcap through pcapy-ng


def _import_pcapy() -> Any:
    try:
        import pcapy
    except ImportError as exc:
        raise LiveError(
            "live capture needs pcapy-ng (libpcap bindings): pip install 'kafka-dissector[live]'"
        ) from exc
    return pcapy


class PcapSource:
    """One live libpcap handle in non-blocking mode, read in batches with a timeout.

    Non-blocking plus ``select`` because with TPACKET_V3 a blocking read waits for
    the next packet however long that takes, so a quiet interface would never let
    the loop see a stop request.
    """

    def __init__(
        self,
        iface: str,
        bpf: str,
        *,
        snaplen: int = DEFAULT_SNAPLEN,
        buffer_bytes: int = DEFAULT_BUFFER_MIB << 20,
    ) -> None:
        pcapy = _import_pcapy()
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        _check_interface(pcapy, iface)
        _check_filter(pcapy, bpf, snaplen)
        cap = pcapy.create(iface)
        cap.set_snaplen(snaplen)
        cap.set_promisc(False)
        cap.set_timeout(BLOCK_TIMEOUT_MS)
        cap.set_buffer_size(buffer_bytes)
        try:
            status = cap.activate()
        except pcapy.PcapError as exc:
            raise _activation_error(pcapy, iface, str(exc)) from exc
        if status is not None and status < 0:
            raise _activation_error(
                pcapy, iface, _PCAP_ERRORS.get(status, f"error {status}"), status
            )
        try:
            cap.setfilter(bpf)
        except pcapy.PcapError as exc:
            cap.close()
            raise LiveError(f"bad capture filter {bpf!r} on {iface}: {exc}") from exc
        cap.setnonblock(1)
        self._cap = cap
        self._error = pcapy.PcapError
        self._fd = cap.getfd()
        self._batched = hasattr(cap, "next_batch")  # pcapy-ng >= 2.0
        self._meta = struct.Struct("=IIII")
        dlt = cap.datalink()
        self.linktype = _DLT_TO_LINKTYPE.get(dlt, dlt)

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        """Up to ``BATCH`` frames as (ts_ns, bytes); empty after ``timeout`` seconds idle."""
        frames = self._read_now()
        if frames or timeout <= 0:
            return frames
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
        except InterruptedError:  # a signal arrived: let the caller look at it
            return []
        return self._read_now() if ready else []

    def _read_now(self) -> list[tuple[int, bytes]]:
        try:
            return self._read_batch()
        except self._error as exc:  # e.g. the interface went away
            raise LiveError(f"capture on {self.iface} failed: {exc}") from exc

    def _read_batch(self) -> list[tuple[int, bytes]]:
        if self._batched:
            data, meta = self._cap.next_batch(BATCH)
            unpack = self._meta.unpack_from
            out = []
            for i in range(0, len(meta), 16):
                sec, usec, off, caplen = unpack(meta, i)
                out.append((sec * 1_000_000_000 + usec * 1000, data[off : off + caplen]))
            return out
        out = []
        for _ in range(BATCH):
            hdr, data = self._cap.next()
            if hdr is None or not hdr.getcaplen():
                break
            sec, usec = hdr.getts()
            out.append((sec * 1_000_000_000 + usec * 1000, data))
        return out

    def stats(self) -> CaptureStats:
        received, dropped, if_dropped = self._cap.stats()
        return CaptureStats(received, dropped, if_dropped)

    def close(self) -> None:
        self._cap.close()


def _check_interface(pcapy: Any, iface: str) -> None:
    try:
        names = pcapy.findalldevs()
    except pcapy.PcapError:
        return  # cannot list (some platforms need privileges): let activation say why
    if iface not in names:
        raise LiveError(
            f"no such network interface: {iface!r} (available: {', '.join(names) or 'none'})"
        )


def _check_filter(pcapy: Any, bpf: str, snaplen: int) -> None:
    """Compile the filter without a handle, so a typo is reported before privileges are."""
    try:
        pcapy.compile(pcapy.DLT_EN10MB, snaplen, bpf, 1, 0)
    except pcapy.PcapError as exc:
        raise LiveError(f"bad capture filter {bpf!r}: {exc}") from exc


def _activation_error(pcapy: Any, iface: str, reason: str, status: int = 0) -> LiveError:
    if status in _PCAP_PERM_DENIED or "permission" in reason.lower():
        return LiveError(f"no permission to capture on {iface}: {_PRIVILEGE_HINT}")
    if status == _PCAP_NO_SUCH_DEVICE or "no such device" in reason.lower():
        return LiveError(f"no such network interface: {iface!r}")
    # pcap_activate's code carries no text; open_live fails the same way with one.
    try:
        pcapy.open_live(iface, 128, 0, 1).close()
    except pcapy.PcapError as exc:
        reason = str(exc)
        if "permission" in reason.lower():
            return LiveError(f"no permission to capture on {iface}: {_PRIVILEGE_HINT}")
    return LiveError(f"cannot capture on {iface}: {reason}")
