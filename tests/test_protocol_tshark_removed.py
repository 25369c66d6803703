"""Removed versions that no library schema confirms, checked against tshark instead.

WriteTxnMarkers v0, AlterReplicaLogDirs v0 and DescribeLogDirs v0 (request) come
from Apache's JSON widened below ``validVersions`` with nothing in kafka-python to
check them against. tshark 4.0 still dissects these versions: a frame laid out by
the widened layout must be read by tshark, field for field, as we read it.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dissector.protocol import decode_request, decode_response, get_registry
from dissector.protocol.spec import REQUEST, RESPONSE, Field

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
dpkt = pytest.importorskip("dpkt")

_FMT = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "bool": "?"}


def encode(fields: tuple[Field, ...], value: dict[str, Any]) -> bytes:
    """Non-flexible encoding of a value by a layout (the bytes tshark will read)."""
    out = b""
    for f in fields:
        v = value[f.name]
        if f.array:
            out += struct.pack(">i", len(v))
            for item in v:
                out += encode(f.fields, item) if f.type == "struct" else _scalar(f, item)
        elif f.type == "struct":
            out += encode(f.fields, v)
        else:
            out += _scalar(f, v)
    return out


def _scalar(f: Field, v: Any) -> bytes:
    if f.type == "string":
        raw = v.encode()
        return struct.pack(">h", len(raw)) + raw
    return struct.pack(">" + _FMT[f.type], v)


CASES: list[tuple[int, dict[str, Any], dict[str, Any] | None, dict[str, str]]] = [
    (
        27,
        {
            "markers": [
                {
                    "producer_id": 4001,
                    "producer_epoch": 7,
                    "transaction_result": True,
                    "topics": [{"name": "ledger", "partition_indexes": [3, 5]}],
                    "coordinator_epoch": 12,
                }
            ]
        },
        # tshark 4.0 reads a throttle_time_ms at the start of the v0 response that
        # Apache's spec (and its comment on the removed v0) does not have, so only
        # the request is compared.
        None,
        {
            "kafka.producer_id": "4001",
            "kafka.producer_epoch": "7",
            "kafka.transaction_result": "1",
            "kafka.topic_name": "ledger",
            "kafka.partition_id": "5",
            "kafka.coordinator_epoch": "12",
        },
    ),
    (
        34,
        {"dirs": [{"path": "/data/a", "topics": [{"name": "logs", "partitions": [0, 1]}]}]},
        {
            "throttle_time_ms": 9,
            "results": [
                {
                    "topic_name": "logs",
                    "partitions": [
                        {"partition_index": 0, "error_code": 0},
                        {"partition_index": 1, "error_code": 57},
                    ],
                }
            ],
        },
        {
            "kafka.log_dir": "/data/a",
            "kafka.topic_name": "logs",
            "kafka.partition_id": "1",
            "kafka.throttle_time": "9",
            "kafka.error": "57",
        },
    ),
    (
        35,
        {"topics": [{"topic": "metrics", "partitions": [2, 4, 8]}]},
        None,
        {"kafka.topic_name": "metrics", "kafka.partition_id": "8"},
    ),
]


def _pcap(path: Path, frames: list[bytes]) -> None:
    with path.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        seq = {True: 1000, False: 5000}
        for i, payload in enumerate(frames):
            to_broker = i % 2 == 0
            tcp = dpkt.tcp.TCP(
                sport=40000 if to_broker else 9092,
                dport=9092 if to_broker else 40000,
                seq=seq[to_broker],
                ack=seq[not to_broker],
                flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH,
                data=payload,
            )
            seq[to_broker] += len(payload)
            ip = dpkt.ip.IP(
                src=bytes([127, 0, 0, 1 if to_broker else 2]),
                dst=bytes([127, 0, 0, 2 if to_broker else 1]),
                p=dpkt.ip.IP_PROTO_TCP,
                data=tcp,
            )
            ip.len = len(bytes(ip))
            eth = dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
            writer.writepkt(bytes(eth), ts=1_700_000_000 + i)


def _leaves(node: Any, out: dict[str, list[str]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                out.setdefault(key, []).append(value)
            else:
                _leaves(value, out)
    elif isinstance(node, list):
        for item in node:
            _leaves(item, out)


@pytest.mark.parametrize(("api_key", "request_value", "response_value", "expect"), CASES)
def test_widened_layout_is_read_the_same_by_tshark(
    tmp_path: Path,
    api_key: int,
    request_value: dict[str, Any],
    response_value: dict[str, Any] | None,
    expect: dict[str, str],
) -> None:
    reg = get_registry()
    req_layout = reg.layout(api_key, 0, REQUEST)
    # from Apache 3.9.1's own spec (Kafka 4.0 removed the version), not from a client library
    assert req_layout is not None and req_layout.source == "kafka-clients-3.9.1"
    request = (
        struct.pack(">hhih", api_key, 0, 31, 2) + b"ck" + encode(req_layout.fields, request_value)
    )
    frames = [struct.pack(">i", len(request)) + request]
    ours_req = decode_request(request)
    assert ours_req.error is None and ours_req.trailing == 0
    assert ours_req.body == request_value
    if response_value is not None:
        resp_layout = reg.layout(api_key, 0, RESPONSE)
        assert resp_layout is not None
        response = struct.pack(">i", 31) + encode(resp_layout.fields, response_value)
        frames.append(struct.pack(">i", len(response)) + response)
        ours_resp = decode_response(response, api_key, 0)
        assert ours_resp.error is None and ours_resp.trailing == 0
        assert ours_resp.body == response_value
    pcap = tmp_path / "frames.pcap"
    _pcap(pcap, frames)
    out = subprocess.run(
        [str(TSHARK), "-r", str(pcap), "-T", "json", "-J", "kafka"],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    packets = json.loads(out)
    pdus = [p["_source"]["layers"]["kafka"] for p in packets]
    assert len(pdus) == len(frames)
    for pdu in pdus:
        assert "_ws.malformed" not in json.dumps(pdu)
        assert "_ws.expert" not in json.dumps(pdu), pdu
    seen: dict[str, list[str]] = {}
    for pdu in pdus:
        _leaves(pdu, seen)
    for field, value in expect.items():
        assert value in seen.get(field, []), (field, seen.get(field))
    # tshark's lengths agree with the frames we built: nothing left over or missing
    assert [int(p["kafka.len"]) for p in pdus] == [len(f) - 4 for f in frames]
