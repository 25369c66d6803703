"""Raw frames of a live run to a pcap or pcapng file (``--write-pcap``)."""

from __future__ import annotations

import os
import struct
import sys
from typing import Any, BinaryIO

from dissector.live.source import LiveError


class PcapWriter:
    """Writes captured frames as pcapng (``.pcapng``) or pcap (anything else) with dpkt.

    Timestamps are libpcap's microseconds, kept exact. The wire length of a frame
    is not reported by the batch reader, so it is written equal to the captured length.
    """

    def __init__(self, path: str | os.PathLike[str], linktype: int, snaplen: int) -> None:
        import dpkt

        self.path = os.fspath(path)
        try:
            self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise LiveError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self._ng = self.path.lower().endswith(".pcapng")
        if self._ng:
            self._writer: Any = dpkt.pcapng.Writer(self._file, snaplen=snaplen, linktype=linktype)
            little = sys.byteorder == "little"
            self._epb = (
                dpkt.pcapng.EnhancedPacketBlockLE if little else dpkt.pcapng.EnhancedPacketBlock
            )
        else:
            self._writer = dpkt.pcap.Writer(self._file, snaplen=snaplen, linktype=linktype)
            self._hdr = struct.Struct(("<" if sys.byteorder == "little" else ">") + "IIII")
        self.frames = 0
        self.error: str | None = None

    def write(self, ts_ns: int, data: bytes) -> None:
        usec = ts_ns // 1000
        if self._ng:
            self._writer.writepkt(
                self._epb(
                    ts_high=usec >> 32,
                    ts_low=usec & 0xFFFFFFFF,
                    caplen=len(data),
                    pkt_len=len(data),
                    pkt_data=data,
                )
            )
        else:
            # dpkt's pcap writer takes float seconds; the header is written directly
            # so microseconds stay exact.
            sec, frac = divmod(usec, 1_000_000)
            self._file.write(self._hdr.pack(sec, frac, len(data), len(data)) + data)
        self.frames += 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Flush and close; a failure is kept in ``error`` (the capture goes on)."""
        if self._file.closed:
            return
        try:
            self._file.flush()
        except OSError as exc:
            self.error = self.error or f"writing {self.path} failed: {exc}"
        try:
            self._file.close()
        except OSError as exc:  # the buffered bytes it could not flush
            self.error = self.error or f"writing {self.path} failed: {exc}"
