"""Where live frames come from: one libpcap handle, opened and read by the native core.

The core loads libpcap when a capture starts (``native/src/capture/pcap.rs``) and reads its
memory-mapped ring (TPACKET_V3 on Linux) on a thread of its own, so no Python code runs
per frame or per batch of frames. libpcap reports its own drop counts
(``pcap_stats``), sizes the kernel ring and compiles BPF in-process; scapy's sniffing
lost 10-90 % of loopback packets where libpcap lost none (``benchmarks/live_capture.py``).
This module opens the handle and turns libpcap's failures into ``LiveError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from dissector.options import DEFAULT_BROKER_PORTS

DEFAULT_SNAPLEN = 262_144  # libpcap's default; loopback MTU is 65,536
DEFAULT_BUFFER_MIB = 64  # kernel ring: ~200,000 Kafka packets (0.7 s at 300,000/s)
BLOCK_TIMEOUT_MS = 50  # TPACKET_V3 hands over a partly filled block after this long

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


def _core() -> ModuleType:
    from dissector.wire.native import native

    return native()


class PcapSource:
    """One activated libpcap handle (filter set, non-blocking): ``LiveCapture`` hands it
    to the core's capture thread (``handle``), which then owns it."""

    def __init__(
        self,
        iface: str,
        bpf: str,
        *,
        snaplen: int = DEFAULT_SNAPLEN,
        buffer_bytes: int = DEFAULT_BUFFER_MIB << 20,
    ) -> None:
        core = _core()
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        _check_interface(core, iface)
        _check_filter(core, bpf, snaplen)
        # libpcap takes an int: 2 GiB - 1 at most.
        size = max(min(buffer_bytes, (1 << 31) - 1), 1 << 16)
        try:
            self.handle = core.PcapHandle(iface, bpf, snaplen, size, BLOCK_TIMEOUT_MS)
        except core.CaptureError as exc:
            raise _capture_error(exc, iface, bpf) from None
        self.linktype: int = self.handle.linktype

    def stats(self) -> CaptureStats:
        s = self.handle.stats()
        return CaptureStats(s.received, s.dropped, s.if_dropped)

    def close(self) -> None:
        self.handle.close()


def _capture_error(exc: Exception, iface: str, bpf: str) -> LiveError:
    kind, message = exc.args if len(exc.args) == 2 else ("other", str(exc))
    if kind == "permission":
        return LiveError(f"no permission to capture on {iface}: {_PRIVILEGE_HINT}")
    if kind == "bad_filter":
        return LiveError(f"bad capture filter {bpf!r} on {iface}: {message}")
    return LiveError(message)


def _check_interface(core: ModuleType, iface: str) -> None:
    try:
        names = core.pcap_devices()
    except core.CaptureError as exc:
        if exc.args and exc.args[0] == "missing":
            raise LiveError(exc.args[1]) from None
        return  # cannot list (some platforms need privileges): let activation say why
    if iface not in names:
        raise LiveError(
            f"no such network interface: {iface!r} (available: {', '.join(names) or 'none'})"
        )


def _check_filter(core: ModuleType, bpf: str, snaplen: int) -> None:
    """Compile the filter without a handle, so a typo is reported before privileges are."""
    try:
        core.pcap_check_filter(bpf, snaplen)
    except core.CaptureError as exc:
        kind, message = exc.args
        if kind == "bad_filter":
            raise LiveError(f"bad capture filter {bpf!r}: {message}") from None
        raise LiveError(message) from None
