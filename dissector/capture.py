"""Stage 1: capture files (and live sources) -> TCP packets.

Contract used by the later stages:

* ``Packet`` is one captured TCP segment with its IP endpoints.
* ``read_packets(path, counters)`` yields the TCP packets of a pcap or pcapng file
  (format detected by magic, not extension) in capture order. Non-TCP frames and
  frames that cannot be parsed are counted in ``counters``, never raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .accounting import Counters

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10


@dataclass(slots=True)
class Packet:
    frame: int  # 1-based position in the capture, as tshark's frame.number
    ts_ns: int  # capture time, nanoseconds since the Unix epoch (UTC)
    src: str  # IP address as text
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int  # TCP flags byte
    payload: bytes  # TCP payload bytes present in the capture
    missing: int = 0  # payload bytes the IP length announces but the snaplen cut off


class CaptureError(Exception):
    """The file is not a capture we can read (bad magic, unreadable header)."""


def read_packets(path: str, counters: Counters) -> Iterator[Packet]:
    raise NotImplementedError  # filled in by the capture stage work
