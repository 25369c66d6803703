"""fetch_wait, service_ms, queue_ms and inflight from the native core (issue #13 §1, §2).

A hand-built capture with known timing: real request and response bytes taken from
the bundled capture of real clients (captures/kafka-4-mixed.pcapng), re-timed onto one
connection, with correlation ids renumbered, one response's throttle_time_ms set and
one Produce's acks set to 0. The expected values are worked out by hand from the times
chosen here (stats.SERVICE_LATENCY_RULE, stats.QUEUEING_RULE), not read from the code.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import dissector
from dissector.options import Options
from dissector.wire.core import iter_exchanges
from tests.conftest import CAPTURES

MIXED = CAPTURES / "kafka-4-mixed.pcapng"
CLIENT, BROKER = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
T0_NS = 1_700_000_000_000_000_000


def _real_pairs() -> dict[str, Any]:
    """One real exchange of each kind the test needs, by role."""
    found: dict[str, Any] = {}
    for _, ex in iter_exchanges([str(MIXED)], Options()):
        if ex.kind != "pair" or ex.request is None or ex.response is None:
            continue
        name = {3: "metadata", 0: "produce", 1: "fetch"}.get(ex.api_key)
        if name == "metadata" and ex.api_version == 13:
            found.setdefault("metadata", ex)
        elif name == "produce" and ex.api_version == 10:
            found.setdefault("produce", ex)
        elif name == "fetch" and ex.api_version == 16:
            # data (records in the response) and empty answers, told apart by size
            key = "fetch_data" if len(ex.response.payload) > 200 else "fetch_empty"
            found.setdefault(key, ex)
    assert set(found) == {"metadata", "produce", "fetch_data", "fetch_empty"}
    return found


def _with_corr(request: bytes, corr: int) -> bytes:
    return request[:4] + struct.pack(">i", corr) + request[8:]


def _response_with_corr(response: bytes, corr: int) -> bytes:
    return struct.pack(">i", corr) + response[4:]


def _flexible_body_offset(request: bytes) -> int:
    """Where a request body starts after a v2 header (key, version, corr, client_id,
    one empty tagged-field section)."""
    (id_len,) = struct.unpack_from(">h", request, 8)
    offset = 10 + max(id_len, 0)
    assert request[offset] == 0, "tagged fields of the header are expected empty"
    return offset + 1


def _with_acks_zero(request: bytes) -> bytes:
    body = _flexible_body_offset(request)
    # Produce v10: transactional_id (compact nullable string), then acks (int16).
    assert request[body] == 0, "a producer without transactional id is expected"
    return request[: body + 1] + struct.pack(">h", 0) + request[body + 3 :]


def _with_throttle(response: bytes, throttle_ms: int) -> bytes:
    # Metadata v13 response: correlation id, empty header tags, throttle_time_ms first.
    assert response[4] == 0
    return response[:5] + struct.pack(">i", throttle_ms) + response[9:]


@dataclass
class Step:
    at_ms: float
    from_client: bool
    payload: bytes


def _write_capture(path: Path, steps: list[Step]) -> None:
    from scapy.all import IP, TCP, Ether, wrpcap

    seq = {True: 1000, False: 5000}
    packets = []

    def tcp(from_client: bool, flags: str, data: bytes, at_ms: float) -> Any:
        (sip, sport), (dip, dport) = (CLIENT, BROKER) if from_client else (BROKER, CLIENT)
        ports = {"sport": sport, "dport": dport, "flags": flags}
        segment = TCP(**ports, seq=seq[from_client], ack=seq[not from_client])
        pkt = Ether() / IP(src=sip, dst=dip) / segment / data
        # Exact to the nanosecond (a float of seconds since 1970 is not).
        pkt.time = Decimal(T0_NS + round(at_ms * 1_000_000)) / Decimal(1_000_000_000)
        return pkt

    packets.append(tcp(True, "S", b"", -2.0))
    seq[True] += 1
    packets.append(tcp(False, "SA", b"", -1.5))
    seq[False] += 1
    packets.append(tcp(True, "A", b"", -1.0))
    for step in sorted(steps, key=lambda s: s.at_ms):
        data = struct.pack(">i", len(step.payload)) + step.payload
        packets.append(tcp(step.from_client, "PA", data, step.at_ms))
        seq[step.from_client] += len(data)
    wrpcap(str(path), packets, nano=True)


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("scapy", reason="scapy builds the hand-made capture")
    real = _real_pairs()
    meta, produce = real["metadata"], real["produce"]
    data, empty = real["fetch_data"], real["fetch_empty"]
    steps: list[Step] = []
    corr = iter(range(100, 200))

    def pair(ex: Any, sent: float, answered: float | None, *, request: bytes | None = None,
             response: bytes | None = None) -> int:  # fmt: skip
        c = next(corr)
        steps.append(Step(sent, True, _with_corr(request or ex.request.payload, c)))
        if answered is not None:
            body = response or ex.response.payload
            steps.append(Step(answered, False, _response_with_corr(body, c)))
        return c

    # Three requests pipelined, answered in order at 5, 6 and 7 ms.
    pair(meta, 0.0, 5.0)
    pair(meta, 1.0, 6.0)
    pair(meta, 2.0, 7.0)
    # A response throttled for 10 ms: the broker reads the next request at 31 ms.
    pair(meta, 20.0, 21.0, response=_with_throttle(meta.response.payload, 10))
    pair(meta, 25.0, 40.0)
    # A fetch returning data, and an acks=0 Produce sent while it is open.
    pair(data, 45.0, 60.0)
    pair(produce, 50.0, None, request=_with_acks_zero(produce.request.payload))
    # An empty long poll that waited out max_wait_ms (500), then one that returned early.
    pair(empty, 100.0, 603.0)
    pair(empty, 700.0, 720.0)
    # An unanswered request; the next one is answered and counts it in flight.
    pair(meta, 800.0, None)
    pair(meta, 810.0, 815.0)
    path = tmp_path_factory.mktemp("queueing") / "timed.pcap"
    _write_capture(path, steps)
    df = dissector.analyze(path)
    return path, df.sort_values("request_time").reset_index(drop=True)


def test_columns_have_the_hand_worked_values(timed: Any) -> None:
    _, df = timed
    assert (
        list(df["api_name"])
        == ["Metadata"] * 5 + ["Fetch", "Produce", "Fetch", "Fetch"] + ["Metadata"] * 2
    )
    assert list(df["status"]) == ["ok"] * 6 + ["no_response", "ok", "ok", "unanswered", "ok"]
    assert df["throttle_ms"].tolist()[3] == 10
    assert df["max_wait_ms"].tolist()[7:9] == [500, 500]
    assert df["inflight"].tolist() == [0, 1, 2, 0, 0, 0, 1, 0, 0, 0, 1]
    assert df["queue_ms"].tolist() == pytest.approx(
        [0.0, 4.0, 4.0, 0.0, 6.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0]
    )
    fetch_wait = df["fetch_wait"].astype("object").where(df["fetch_wait"].notna(), None)
    assert fetch_wait.tolist() == [None] * 5 + ["data", None, "empty_poll", "early", None, None]
    service = df["service_ms"].astype("object").where(df["service_ms"].notna(), None).tolist()
    assert service[:6] == pytest.approx([5.0, 5.0, 5.0, 1.0, 15.0, 15.0])
    assert service[6] is None and service[9] is None  # no latency: no service time
    assert service[7:9] == pytest.approx([3.0, 20.0])  # 503 - 500; early: its latency
    assert service[10] == pytest.approx(5.0)


def test_parquet_carries_the_same_columns(timed: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from dissector.cli import main

    path, df = timed
    out = tmp_path / "pairs.parquet"
    # analyze -o writes Parquet straight from the core's Arrow batches (no pandas).
    result = CliRunner().invoke(main, ["analyze", str(path), "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out).to_pandas().sort_values("request_time").reset_index(drop=True)
    for name in ("fetch_wait", "service_ms", "queue_ms", "inflight"):
        got = table[name].astype("object").where(table[name].notna(), None).tolist()
        want = df[name].astype("object").where(df[name].notna(), None).tolist()
        assert got == want, name
