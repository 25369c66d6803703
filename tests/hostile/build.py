"""Builders of crafted captures for the hostile-input suite.

Hostile parts are spliced between two copies of a real recorded capture
(captures/kafka-4-mixed.pcapng, real clients and a real broker), so every test can
check that the valid pairs before and after the hostile part survive.
"""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"

LINKTYPE_ETHERNET = 1
ETH = b"\x00\x00\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x01" + b"\x08\x00"
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def real_frames(path: Path = MIXED) -> list[tuple[int, bytes]]:
    """(ts_ns, Ethernet frame) of a real capture, read with dpkt (not our reader)."""
    import dpkt

    with open(path, "rb") as fh:
        reader = dpkt.pcapng.Reader(fh) if path.suffix == ".pcapng" else dpkt.pcap.Reader(fh)
        return [(round(ts * 1e9), bytes(buf)) for ts, buf in reader]


def shift_ports(frame: bytes, delta: int, broker_ports: tuple[int, ...] = (9092, 9094)) -> bytes:
    """The same frame on another client port (a separate connection)."""
    if len(frame) < 38 or frame[12:14] != b"\x08\x00":
        return frame
    t = 14 + (frame[14] & 0x0F) * 4
    sport, dport = struct.unpack_from(">HH", frame, t)
    if dport in broker_ports:
        sport = (sport + delta) % 65536
    elif sport in broker_ports:
        dport = (dport + delta) % 65536
    return frame[:t] + struct.pack(">HH", sport, dport) + frame[t + 4 :]


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_frame(
    src: str,
    dst: str,
    sport: int,
    dport: int,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    *,
    ip_total_length: int | None = None,
) -> bytes:
    """An Ethernet/IPv4/TCP frame; ``ip_total_length`` lets the IP header lie."""
    tcp = struct.pack(
        ">HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32, 5 << 4, flags, 65535, 0, 0
    )
    length = 20 + len(tcp) + len(payload)
    ip = struct.pack(
        ">BBHHHBBH4s4s",
        0x45, 0, ip_total_length if ip_total_length is not None else length, 0, 0x4000, 64, 6,
        0, bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))),
    )  # fmt: skip
    ip = ip[:10] + struct.pack(">H", checksum(ip)) + ip[12:]
    return ETH + ip + tcp + payload


def write_pcap(path: Path, frames: Iterable[tuple[int, bytes]], *, compress: bool = False) -> Path:
    """Classic pcap, nanosecond timestamps, Ethernet."""
    opener = gzip.open if compress else open
    with opener(path, "wb") as out:  # type: ignore[operator]
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, LINKTYPE_ETHERNET))
        for ts, frame in frames:
            out.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(frame), len(frame)))
            out.write(frame)
    return path


def sandwich(
    hostile: Iterable[tuple[int, bytes]], *, gap_s: int = 10
) -> Iterator[tuple[int, bytes]]:
    """A real capture, the hostile frames, then the real capture again on other ports."""
    frames = real_frames()
    yield from frames
    end = frames[-1][0] + gap_s * 10**9
    last = end
    for ts, frame in hostile:
        last = max(last, ts)
        yield ts, frame
    base = max(last, end) + gap_s * 10**9 - frames[0][0]
    for ts, frame in frames:
        yield ts + base, shift_ports(frame, 1000)


@dataclass
class Outcome:
    returncode: int
    seconds: float
    stdout: str
    stderr: str


# The peak is the child's own VmHWM: ru_maxrss survives exec on Linux, so a child of a
# large pytest process would report its parent's peak instead of its own.
PEAK_RSS = """
def peak_rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024
"""

ANALYZE = (
    PEAK_RSS
    + """
import json, sys
import dissector
df = dissector.analyze(sys.argv[1])
print(json.dumps({
    "rows": len(df),
    "ok": int(df["status"].isin(["ok", "error"]).sum()),
    "statuses": {k: int(v) for k, v in df["status"].value_counts().items()},
    "counters": df.attrs["counters"],
    "decode_errors": sorted(set(df["decode_error"].dropna().tolist()))[:50],
    "flags": sorted({f for fl in df["flags"] for f in fl}),
    "peak_rss": peak_rss(),
}))
"""
)


def run_child(args: list[str], timeout: float) -> Outcome:
    """Run a Python child and time it; the child reports its own peak RSS (``PEAK_RSS``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {args}") from None
    return Outcome(proc.returncode, time.perf_counter() - t0, out, err)


def analyze_child(path: Path, timeout: float = 120) -> tuple[dict, Outcome]:
    import json

    outcome = run_child(["-c", ANALYZE, str(path)], timeout)
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    assert "Traceback" not in outcome.stderr
    return json.loads(outcome.stdout.strip().splitlines()[-1]), outcome


# ---------------------------------------------------------------- Kafka messages


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def request(api_key: int, version: int, corr: int, client_id: str | None, body: bytes) -> bytes:
    """A non-flexible request (header v1), size prefix included."""
    return sized(struct.pack(">hhi", api_key, version, corr) + _str(client_id) + body)


def response(corr: int, body: bytes) -> bytes:
    return sized(struct.pack(">i", corr) + body)


def api_versions(corr: int, client_id: str = "hostile-test") -> tuple[bytes, bytes]:
    """ApiVersions v0 request and its answer (error 0, one api range)."""
    body = struct.pack(">hi", 0, 1) + struct.pack(">hhh", 18, 0, 3)
    return request(18, 0, corr, client_id, b""), response(corr, body)


def v2_batch(records_payload: bytes, count: int, codec: int = 0, *, bad_crc: bool = False) -> bytes:
    """A magic-2 record batch around already encoded (and maybe compressed) records."""
    import crc32c

    after_crc = (
        struct.pack(">hiqqqhii", codec, max(count - 1, 0), 0, 0, -1, -1, -1, count)
        + records_payload
    )
    crc = crc32c.crc32c(after_crc) ^ (0xFFFFFFFF if bad_crc else 0)
    body = struct.pack(">ibI", 0, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(body)) + body


def tiny_records(n: int) -> bytes:
    """n records with null key and empty value: 7 bytes each on the wire."""
    one = bytes(
        [6 * 2, 0, 0, 0, 1, 0, 0]
    )  # length 6 (zigzag), attrs, ts, off, key -1, value 0, headers 0
    return one * n


def produce_v3(corr: int, topic: str, batches: list[bytes], acks: int = 1) -> tuple[bytes, bytes]:
    parts = b"".join(struct.pack(">ii", i, len(b)) + b for i, b in enumerate(batches))
    body = _str(None) + struct.pack(">hi", acks, 30000) + struct.pack(">i", 1) + _str(topic)
    body += struct.pack(">i", len(batches)) + parts
    resp_parts = b"".join(struct.pack(">ihqq", i, 0, 0, -1) for i in range(len(batches)))
    resp = struct.pack(">i", 1) + _str(topic) + struct.pack(">i", len(batches)) + resp_parts
    return request(0, 3, corr, "hostile-producer", body), response(
        corr, resp + struct.pack(">i", 0)
    )


def metadata_v1_many_topics(corr: int, n: int) -> tuple[bytes, bytes]:
    """A Metadata v1 request naming n empty topics (2 bytes each) and a short answer."""
    req = request(3, 1, corr, "hostile-metadata", struct.pack(">i", n) + b"\x00\x00" * n)
    resp = response(corr, struct.pack(">iii", 0, 1, 0))
    return req, resp


# ---------------------------------------------------------------- TCP conversations


@dataclass
class Conversation:
    """One TCP connection written packet by packet (client side first)."""

    client: tuple[str, int] = ("127.0.0.10", 40000)
    broker: tuple[str, int] = ("127.0.0.20", 9092)
    t_ns: int = 1_700_000_000 * 10**9
    step_ns: int = 100_000
    seq_c: int = 1000
    seq_b: int = 9_000_000
    mss: int = 1400

    def __post_init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []

    def _emit(self, from_client: bool, flags: int, payload: bytes = b"", **kw: int) -> None:
        src, dst = (self.client, self.broker) if from_client else (self.broker, self.client)
        seq, ack = (self.seq_c, self.seq_b) if from_client else (self.seq_b, self.seq_c)
        seq = kw.pop("seq", seq)
        self.frames.append(
            (self.t_ns, tcp_frame(src[0], dst[0], src[1], dst[1], seq, ack, flags, payload, **kw))
        )
        self.t_ns += self.step_ns

    def handshake(self) -> Conversation:
        self._emit(True, SYN)
        self.seq_c += 1
        self._emit(False, SYN | ACK)
        self.seq_b += 1
        self._emit(True, ACK)
        return self

    def send(self, from_client: bool, data: bytes, *, lose: bool = False) -> Conversation:
        """Data in mss-sized segments; ``lose`` leaves them out of the capture."""
        for i in range(0, len(data), self.mss):
            piece = data[i : i + self.mss]
            if not lose:
                self._emit(from_client, PSH | ACK, piece)
            if from_client:
                self.seq_c += len(piece)
            else:
                self.seq_b += len(piece)
        return self

    def pair(self, req: bytes, resp: bytes) -> Conversation:
        return self.send(True, req).send(False, resp)

    def close(self) -> Conversation:
        self._emit(True, FIN | ACK)
        self.seq_c += 1
        self._emit(False, FIN | ACK)
        self.seq_b += 1
        self._emit(True, ACK)
        return self
