"""Counters the CLI shows: non-Kafka connections, and requests the specs cannot decode.

The captures are built here with scapy (TCP handshake, data, FIN), so the bytes each
connection carried are known independently of the dissector.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

import dissector
from dissector.accounting import Counters
from tests.oracle.framing import Framer
from tests.oracle.kafka_header import request_start_check
from tests.oracle.tcp import Chunk

scapy_all = pytest.importorskip("scapy.all")

CLIENT_IP, BROKER_IP = "10.1.0.1", "10.1.0.2"


@dataclass(frozen=True)
class Conversation:
    """One TCP connection: client port, server port, and the (request, response) bytes."""

    client_port: int
    server_port: int
    exchanges: list[tuple[bytes, bytes]]

    @property
    def payload_bytes(self) -> int:
        return sum(len(a) + len(b) for a, b in self.exchanges)


def write_capture(path: Path, conversations: list[Conversation], start: float = 1.7e9) -> Path:
    """A pcap of the conversations, one after the other, each opened and closed cleanly."""
    packets = []
    t = start
    for conv in conversations:
        for pkt in _conversation_packets(conv):
            pkt.time = t
            t += 0.001
            packets.append(pkt)
    scapy_all.wrpcap(str(path), packets)
    return path


def _conversation_packets(conv: Conversation) -> list:
    ip_c = scapy_all.IP(src=CLIENT_IP, dst=BROKER_IP)
    ip_s = scapy_all.IP(src=BROKER_IP, dst=CLIENT_IP)
    cp, sp = conv.client_port, conv.server_port
    TCP = scapy_all.TCP
    cseq, sseq = 1000, 5000
    out = [
        scapy_all.Ether() / ip_c / TCP(sport=cp, dport=sp, flags="S", seq=cseq),
        scapy_all.Ether() / ip_s / TCP(sport=sp, dport=cp, flags="SA", seq=sseq, ack=cseq + 1),
        scapy_all.Ether() / ip_c / TCP(sport=cp, dport=sp, flags="A", seq=cseq + 1, ack=sseq + 1),
    ]
    cseq, sseq = cseq + 1, sseq + 1
    for request, response in conv.exchanges:
        out.append(
            scapy_all.Ether()
            / ip_c
            / TCP(sport=cp, dport=sp, flags="PA", seq=cseq, ack=sseq)
            / scapy_all.Raw(request)
        )
        cseq += len(request)
        out.append(
            scapy_all.Ether()
            / ip_s
            / TCP(sport=sp, dport=cp, flags="PA", seq=sseq, ack=cseq)
            / scapy_all.Raw(response)
        )
        sseq += len(response)
    out += [
        scapy_all.Ether() / ip_c / TCP(sport=cp, dport=sp, flags="FA", seq=cseq, ack=sseq),
        scapy_all.Ether() / ip_s / TCP(sport=sp, dport=cp, flags="FA", seq=sseq, ack=cseq + 1),
        scapy_all.Ether() / ip_c / TCP(sport=cp, dport=sp, flags="A", seq=cseq + 1, ack=sseq + 1),
    ]
    return out


def kafka_request(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
    """A request with header v1 (client id "t"), size-prefixed."""
    msg = struct.pack(">hhih", api_key, version, corr, 1) + b"t" + body
    return struct.pack(">i", len(msg)) + msg


def kafka_response(corr: int, body: bytes) -> bytes:
    msg = struct.pack(">i", corr) + body
    return struct.pack(">i", len(msg)) + msg


# ApiVersions v0: error_code 0 and an empty api_keys array.
API_VERSIONS_V0 = (
    kafka_request(18, 0, 1),
    kafka_response(1, struct.pack(">hi", 0, 0)),
)

HTTP = (
    b"GET /index.html HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 13\r\n\r\n<html></html>",
)


def _counters(path: Path) -> dict[str, int]:
    return dissector.analyze(str(path)).attrs["counters"]


def test_http_on_kafka_port_and_on_other_port_counts_as_non_kafka(tmp_path: Path) -> None:
    convs = [Conversation(40000, 9092, [HTTP, HTTP]), Conversation(40001, 8080, [HTTP])]
    df = dissector.analyze(str(write_capture(tmp_path / "http.pcap", convs)))
    counters = df.attrs["counters"]
    assert len(df) == 0
    # Every HTTP byte, both directions of both connections, and nothing called framing trouble.
    assert counters["non_kafka_bytes"] == sum(c.payload_bytes for c in convs)
    assert counters["non_kafka_directions"] == 4
    for trouble in ("bad_frame_size", "resync_skipped_bytes", "truncated_frames"):
        assert trouble not in counters, counters


def test_kafka_next_to_http_keeps_its_rows_and_counters(tmp_path: Path) -> None:
    http = Conversation(40000, 9092, [HTTP])
    kafka = Conversation(40002, 9092, [API_VERSIONS_V0])
    df = dissector.analyze(str(write_capture(tmp_path / "mixed.pcap", [http, kafka])))
    counters = df.attrs["counters"]
    assert df["status"].tolist() == ["ok"] and df["api_name"].tolist() == ["ApiVersions"]
    assert counters["non_kafka_bytes"] == http.payload_bytes
    assert counters["non_kafka_directions"] == 2
    assert counters["kafka_frames"] == 2


def test_newer_version_and_unknown_key_are_counted_apart(tmp_path: Path) -> None:
    convs = [
        Conversation(
            40003,
            9092,
            [
                (kafka_request(3, 200, 7, b"\x00" * 8), kafka_response(7, b"\x00" * 8)),
                (kafka_request(999, 0, 8), kafka_response(8, b"\x00\x00")),
                API_VERSIONS_V0,
            ],
        )
    ]
    df = dissector.analyze(str(write_capture(tmp_path / "new.pcap", convs)))
    counters = df.attrs["counters"]
    assert counters["unsupported_version_requests"] == 1
    assert counters["unknown_api_key_requests"] == 1
    assert "unknown_api_requests" not in counters
    newer = df[df["api_key"] == 3].iloc[0]
    # The bytes are fine, only our specs are old: the row is ok and says why it is bare.
    assert newer["status"] == "ok" and "unsupported_version" in newer["decode_error"]


# -- the framer alone ----------------------------------------------------------

_C, _B = ("10.0.0.1", 50000), ("10.0.0.2", 9092)


def _framer(counters: Counters) -> Framer:
    return Framer(0, _C, _B, counters, request_start_check(lambda k, v: k < 100), 1 << 20)


def _chunk(data: bytes, frame: int, resync: bool = False) -> Chunk:
    return Chunk(0, _C, _B, data, frame * 1000, frame, resync, 0)


def test_direction_that_never_frames_is_recounted_as_non_kafka_at_close() -> None:
    c = Counters()
    f = _framer(c)
    data = [b"GET / HTTP/1.1\r\n", b"Host: x\r\n\r\n", b"more text"]
    for n, d in enumerate(data):
        f.feed(_chunk(d, n))
    assert c["bad_frame_size"] == 1  # while open, the trouble shows
    f.close()
    assert c.as_dict() == {"non_kafka_bytes": sum(map(len, data)), "non_kafka_directions": 1}


def test_direction_that_recovers_keeps_its_framing_counters() -> None:
    c = Counters()
    f = _framer(c)
    f.feed(_chunk(struct.pack(">i", 1 << 30) + b"junk", 1))
    (frame,) = f.feed(_chunk(kafka_request(18, 3, 5), 2))
    f.close()
    assert frame.after_gap
    assert c["bad_frame_size"] == 1 and c["resync_skipped_bytes"] == 8
    assert c["non_kafka_bytes"] == 0 and c["non_kafka_directions"] == 0


def test_direction_with_only_a_partial_frame_stays_truncated() -> None:
    c = Counters()
    f = _framer(c)
    f.feed(_chunk(kafka_request(18, 3, 5)[:7], 1))
    f.close()
    assert c.as_dict() == {"truncated_frame_bytes": 7, "truncated_frames": 1}
