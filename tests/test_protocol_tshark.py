"""Real captures: our decoded fields against tshark's (-T json), field by field.

For every frame both tools decode, the values tshark shows for a field are compared
as a multiset with the values of the matching field anywhere in our header and
body (record batches excluded: tshark's record fields reuse the same names).
Frames tshark marks malformed, or whose version it does not know, have their body
skipped by tshark's own verdict; their header (size, key, version, correlation id,
client id) is still compared, since tshark reads it before it gives up on the body.
Every capture must compare something, and every capture not named in
``HEADER_ONLY`` must compare body fields too: a test that compares nothing passes
whatever the decoder does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dissector.protocol import decode_request, decode_response

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
TSHARK = shutil.which("tshark")
PORTS = (9092, 36333)

# tshark field -> our field name (Apache's, snake_case).
MAPPING: dict[str, tuple[str, ...]] = {
    "kafka.correlation_id": ("correlation_id",),
    "kafka.client_id": ("client_id",),
    "kafka.required_acks": ("acks",),
    "kafka.timeout": ("timeout_ms",),
    "kafka.topic_name": ("name", "topic"),
    "kafka.partition_id": ("index", "partition_index", "partition"),
    "kafka.error": ("error_code",),
    "kafka.throttle_time": ("throttle_time_ms",),
    "kafka.log_start_offset": ("log_start_offset",),
    "kafka.group_id": ("group_id",),
    "kafka.member_id": ("member_id",),
    "kafka.generation_id": ("generation_id", "generation_id_or_member_epoch"),
    "kafka.session_timeout": ("session_timeout_ms",),
    "kafka.rebalance_timeout": ("rebalance_timeout_ms",),
    "kafka.protocol_type": ("protocol_type",),
    "kafka.api_versions_api_key": ("api_key",),
    "kafka.api_versions_min_version": ("min_version",),
    "kafka.api_versions_max_version": ("max_version",),
    "kafka.broker_nodeid": ("node_id",),
    "kafka.broker_host": ("host",),
    "kafka.broker_port": ("port",),
    # tshark labels Metadata's controller id with the broker node-id field
    "kafka.node_id": ("node_id", "controller_id"),
    "kafka.cluster_id": ("cluster_id",),
    "kafka.rack": ("rack",),
    "kafka.is_internal": ("is_internal",),
    "kafka.host": ("host",),
    "kafka.port": ("port",),
    "kafka.leader_id": ("leader_id",),
    "kafka.min_bytes": ("min_bytes",),
    "kafka.max_bytes": ("max_bytes",),
    "kafka.max_wait_time": ("max_wait_ms",),
    "kafka.isolation_level": ("isolation_level",),
    "kafka.fetch_session_id": ("session_id",),
    "kafka.fetch_session_epoch": ("session_epoch",),
    "kafka.high_watermark": ("high_watermark",),
    "kafka.last_stable_offset": ("last_stable_offset",),
    "kafka.replica": ("replica_id",),
    "kafka.transactional_id": ("transactional_id",),
    "kafka.client_software_name": ("client_software_name",),
    "kafka.client_software_version": ("client_software_version",),
}
RECORD_SUBTREES = ("Message Set", "Record Batch", "Records")
# Top-level header fields of a tshark PDU -> ours (see _ours_by_frame).
HEADER_FIELDS: dict[str, str] = {
    "kafka.len": "len",
    "kafka.api_key": "api_key",
    "kafka.request_key": "api_key",
    "kafka.response_key": "api_key",
    "kafka.api_version": "api_version",
    "kafka.response.version": "api_version",
    "kafka.correlation_id": "correlation_id",
    "kafka.client_id": "client_id",
}
# Captures whose every frame tshark 4.0 cannot decode past the header: it knows
# Produce up to v8 and Fetch up to v11 (v9 and v12 are the first flexible versions),
# and answers without their request are "Request missing" to it.
HEADER_ONLY: dict[str, str] = {
    "deepflow-00-produce-v9.pcap": "Produce v9",
    "deepflow-produce-v9-old.pcap": "Produce v9",
    "deepflow-01-fetch-v12-ok.pcap": "Fetch v12",
    "deepflow-01-fetch-v12-perf.pcap": "Fetch v12",
    "deepflow-01-fetch-v12-unknown.pcap": "Fetch v12",
}

pytestmark = [
    pytest.mark.skipif(not CAPTURES.is_dir(), reason="../shared/captures is absent"),
    pytest.mark.skipif(TSHARK is None, reason="tshark is not installed"),
]


def _tshark_frames(path: Path) -> list[dict[str, Any]]:
    args = [str(TSHARK), "-r", str(path), "-T", "json", "-J", "kafka tcp"]
    for port in PORTS:
        args += ["-d", f"tcp.port=={port},kafka"]
    out = subprocess.run(args, capture_output=True, timeout=120, check=True).stdout
    frames: list[dict[str, Any]] = []
    for packet in json.loads(out or b"[]"):
        layers = packet["_source"]["layers"]
        kafka = layers.get("kafka")
        if kafka is None:
            continue
        ports = (int(layers["tcp"]["tcp.srcport"]), int(layers["tcp"]["tcp.dstport"]))
        for pdu in kafka if isinstance(kafka, list) else [kafka]:
            malformed = "_ws.malformed" in layers or "_ws.expert" in json.dumps(pdu)
            frames.append({"pdu": pdu, "malformed": malformed, "ports": ports})
    return frames


def _collect_tshark(node: Any, out: dict[str, list[str]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if any(key.startswith(s) for s in RECORD_SUBTREES):
                continue
            if key in MAPPING and isinstance(value, str):
                out.setdefault(key, []).append(value)
            elif key in MAPPING and isinstance(value, list):
                out.setdefault(key, []).extend(v for v in value if isinstance(v, str))
            else:
                _collect_tshark(value, out)
    elif isinstance(node, list):
        for item in node:
            _collect_tshark(item, out)


def _collect_ours(node: Any, names: tuple[str, ...], out: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in names and (value is None or isinstance(value, str | int)):
                out.append(_as_tshark(value))
            elif isinstance(value, dict | list):
                _collect_ours(value, names, out)
    elif isinstance(node, list):
        for item in node:
            _collect_ours(item, names, out)


def _as_tshark(value: Any) -> str:
    if value is None:
        return "[ Null ]"
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


Key = tuple[int, int, str, int]  # client port, broker port, direction, correlation id


def _ours_by_frame(path: Path) -> dict[Key, dict[str, Any]]:
    from tests.oracle.pipeline import iter_exchanges

    out: dict[Key, dict[str, Any]] = {}
    for _, ex in iter_exchanges([str(path)], ports=PORTS):
        if ex.api_key is None or ex.api_version is None:
            continue
        ports = (ex.client.port, ex.broker.port)
        pair = {"api_key": ex.api_key, "api_version": ex.api_version}
        if ex.request is not None:
            d = decode_request(ex.request.payload)
            assert d.error is None, (path.name, d.error)
            head = {**pair, "len": len(ex.request.payload), **d.header}
            out[(*ports, "request", ex.correlation_id or 0)] = {
                "h": d.header,
                "b": d.body,
                "head": head,
            }
        if ex.response is not None:
            d = decode_response(ex.response.payload, ex.api_key, ex.api_version)
            assert d.error is None, (path.name, d.error)
            head = {**pair, "len": len(ex.response.payload), **d.header}
            out[(*ports, "response", ex.correlation_id or 0)] = {
                "h": d.header,
                "b": d.body,
                "head": head,
            }
    return out


def _capture_files() -> list[Path]:
    if not CAPTURES.is_dir():
        return []
    return sorted(p for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng"))


@pytest.mark.parametrize("path", _capture_files(), ids=lambda p: p.name)
def test_fields_agree_with_tshark(path: Path) -> None:
    ours = _ours_by_frame(path)
    compared = Counter[str]()
    header = Counter[str]()
    for frame in _tshark_frames(path):
        pdu = frame["pdu"]
        if not isinstance(pdu, dict):
            continue
        direction = "request" if "kafka.request_key" in pdu else "response"
        src, dst = frame["ports"]
        client, broker = (src, dst) if direction == "request" else (dst, src)
        corr = pdu.get("kafka.correlation_id")
        mine = ours.get((client, broker, direction, int(corr))) if corr is not None else None
        if mine is None:
            continue  # e.g. a response whose request is not in the capture
        for field, ours_name in HEADER_FIELDS.items():
            if isinstance(pdu.get(field), str):
                value = _as_tshark(mine["head"].get(ours_name))
                assert pdu[field] == value, (path.name, direction, corr, field)
                header[field] += 1
        if frame["malformed"]:
            continue
        theirs: dict[str, list[str]] = {}
        _collect_tshark(pdu, theirs)
        for field, values in theirs.items():
            got: list[str] = []
            _collect_ours({"h": mine["h"], "b": mine["b"]}, MAPPING[field], got)
            if field == "kafka.error" and not got:
                continue
            assert Counter(values) == Counter(got), (path.name, direction, corr, field)
            if field not in HEADER_FIELDS:
                compared[field] += len(values)
    assert header["kafka.correlation_id"] > 0, f"{path.name}: compared no frame at all"
    if path.name in HEADER_ONLY:
        assert header["kafka.api_version"] + header["kafka.response.version"] > 0
    else:
        assert sum(compared.values()) > 0, f"{path.name}: compared no body field"
    if path.name == "local-tansu-confluent-kafka.pcapng":
        # tshark 4.0 knows few of the versions librdkafka 2.x sends; it still
        # decodes ApiVersions, group and admin frames of this capture.
        assert sum(compared.values()) > 50
    if path.name == "ndpi-kafka.pcapng":
        assert compared["kafka.topic_name"] >= 5
        assert compared["kafka.node_id"] >= 4
