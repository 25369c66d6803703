"""End to end: real Apache Kafka traffic against the drivers' and the broker's own records.

Two cases run the same checks:
- ``recorded``: the committed ``captures/kafka-4-mixed.pcapng`` with its ledger
  (``captures/kafka-4-mixed.drivers.json``); no broker needed.
- ``live`` (marker ``broker``): starts the test bed broker (scripts/kafka-broker) once per
  session, runs every driver while dumpcap records ``lo`` (scapy if dumpcap cannot), then
  analyses that capture.

Oracles, none of them kafka-dissector: what each client reported (the ledger), what the
broker stored (its log segments, read with Kafka's DumpLogSegments), and tshark's Kafka
dissector for request counts and versions.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from dissector.schema import COLUMN_NAMES
from scripts.testbed.broker_log import parse_dump, records_by_topic_codec
from scripts.testbed.capture import Capture
from scripts.testbed.scenario import run_scenario
from scripts.testbed.tshark_counts import TsharkCounts, count
from tests.conftest import KAFKA_BROKER

REPO = Path(__file__).resolve().parent.parent
RECORDED_CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"
RECORDED_LEDGER = REPO / "captures" / "kafka-4-mixed.drivers.json"

ANSWERED = ("ok", "error")
SHARE_APIS = (
    "ShareGroupHeartbeat",
    "ShareFetch",
    "ShareAcknowledge",
    "ShareGroupDescribe",
    "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
)


@dataclass(frozen=True)
class Run:
    """One analysed capture together with its independent records."""

    capture: Path
    doc: dict[str, Any]
    df: pd.DataFrame
    tshark: TsharkCounts

    def operations(self) -> Iterator[dict[str, Any]]:
        for ledger in self.doc["drivers"]:
            yield from ledger["operations"]

    def rows(self, client_id: str, api: str | None = None, port: int | None = None) -> pd.DataFrame:
        df = self.df
        mask = df["client_id"] == client_id
        if api is not None:
            mask &= df["api_name"] == api
        if port is not None:
            mask &= df["broker_port"] == port
        return df[mask.fillna(False)]


def analysed(capture: Path, doc: dict[str, Any]) -> Run:
    ports = (doc["broker"]["plaintext_port"], doc["broker"]["sasl_port"])
    return Run(capture, doc, dissector.analyze(capture), count(capture, ports))


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def recorded_run(tshark: str) -> Run:
    return analysed(RECORDED_CAPTURE, json.loads(RECORDED_LEDGER.read_text()))


@pytest.fixture(scope="session")
def live_run(kafka_broker: None, tshark: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("broker-e2e")
    result = run_scenario(
        out, "e2e", preset="full", prefix=f"e2e{os.getpid()}", drivers=list(DRIVER_ORDER)
    )
    doc = json.loads(result.ledger.read_text())
    assert result.ok, f"drivers failed: {result.exit_codes}\n{doc['driver_logs_tail']}"
    return analysed(result.capture, doc)


DRIVER_ORDER = ("confluent", "kafka-python", "aiokafka", "java", "raw")
FUTURE_API_VERSIONS_OP = "api_versions_unsupported_version"


@pytest.fixture(
    params=[
        pytest.param("recorded", id="recorded"),
        pytest.param("live", marks=[pytest.mark.broker, pytest.mark.slow], id="live"),
    ]
)
def run(request: pytest.FixtureRequest) -> Run:
    return request.getfixturevalue(f"{request.param}_run")


# ---------------------------------------------------------------- checks


def test_columns_follow_the_contract(run: Run) -> None:
    assert tuple(run.df.columns) == COLUMN_NAMES
    assert len(run.df) > 0


def test_drivers_did_what_they_set_out_to(run: Run) -> None:
    """The test bed itself: every driver exited 0 and every operation went as planned."""
    assert all(rc == 0 for rc in run.doc["exit_codes"].values()), run.doc["exit_codes"]
    failed = [(op["client_id"], op["op"]) for op in run.operations() if not op["ok"]]
    assert failed == []


def test_every_operation_appears_as_answered_pairs(run: Run) -> None:
    missing = []
    for op in run.operations():
        if op["op"] == FUTURE_API_VERSIONS_OP:
            continue  # its own test below
        for api in op["apis"]:
            rows = run.rows(op["client_id"], api, op["port"])
            answered = rows[rows["status"].isin(ANSWERED) & (rows["response_size"] > 0)]
            if answered.empty:
                missing.append((op["client_id"], op["op"], api, sorted(set(rows["status"]))))
    assert missing == []


def _produced_by_dissector(run: Run, prefix: str) -> tuple[Counter[tuple[str, str]], list[Any]]:
    """Records in acknowledged Produce pairs per (topic, codec), and rows it can't attribute."""
    produce = run.df[(run.df["api_name"] == "Produce") & (run.df["status"] == "ok")]
    out: Counter[tuple[str, str]] = Counter()
    ambiguous = []
    for row in produce.itertuples():
        topics = list(row.topics)
        codecs = [] if pd.isna(row.compression) else str(row.compression).split(",")
        if not topics or not topics[0].startswith(f"{prefix}-"):
            continue
        if len(topics) != 1 or len(codecs) != 1 or pd.isna(row.records):
            ambiguous.append((row.client_id, topics, row.compression, row.records))
            continue
        out[(topics[0], codecs[0])] += int(row.records)
    return out, ambiguous


def _broker_stored(run: Run) -> Counter[tuple[str, str]]:
    stored: Counter[tuple[str, str]] = Counter()
    for topic, per_codec in run.doc["broker_log"]["records_by_topic_codec"].items():
        for codec, n in per_codec.items():
            stored[(topic, codec)] += n
    return stored


def test_ledger_agrees_with_what_the_broker_stored(run: Run) -> None:
    """The clients' own count per topic and codec equals the broker's log (test bed check)."""
    claimed: Counter[tuple[str, str]] = Counter()
    for op in run.operations():
        if op["op"].startswith("produce") and op["records"]:
            claimed[(op["topic"], op["codec"] or "none")] += op["records"]
    assert claimed == _broker_stored(run)


def test_produced_records_per_topic_and_codec(run: Run) -> None:
    produced, ambiguous = _produced_by_dissector(run, run.doc["prefix"])
    assert ambiguous == []
    assert produced == _broker_stored(run)


def _aborted_and_markers(run: Run, topics: list[str]) -> int:
    aborted = sum(
        op["records"]
        for op in run.operations()
        if op["op"].endswith("_abort") and op["topic"] in topics
    )
    markers = sum(
        b["count"]
        for b in run.doc["broker_log"]["batches"]
        if b["control"] and b["topic"] in topics
    )
    return aborted + markers


def test_fetched_records_cover_what_consumers_delivered(run: Run) -> None:
    """Fetch responses carry every record a consumer delivered; on transactional topics they
    may also carry aborted records and transaction markers, which consumers drop."""
    checked = 0
    for op in run.operations():
        if op["op"] not in ("consume", "consume_sasl_scram", "consume_old_versions"):
            continue
        topics = op["detail"].get("topics") or [op["topic"]]
        fetch = run.rows(op["client_id"], "Fetch", op["port"])
        fetched = int(fetch.loc[fetch["status"] == "ok", "records"].fillna(0).sum())
        slack = _aborted_and_markers(run, topics)
        assert op["records"] <= fetched <= op["records"] + slack, (op["client_id"], fetched)
        checked += 1
    assert checked >= 5


def test_share_group_apis_present_and_decoded(run: Run) -> None:
    share = run.df[run.df["api_name"].isin(SHARE_APIS)]
    seen = set(share.loc[share["status"].isin(ANSWERED), "api_name"])
    assert seen == set(SHARE_APIS)
    assert share["decode_error"].isna().all()
    [consume] = [op for op in run.operations() if op["op"] == "share_consume"]
    fetch = run.rows(consume["client_id"], "ShareFetch")
    assert fetch["topics"].map(lambda t: consume["topic"] in list(t)).any()
    assert int(fetch["records"].fillna(0).sum()) == consume["records"]


def test_sasl_exchange_is_followed_by_decoded_traffic(run: Run) -> None:
    """SaslHandshake then SaslAuthenticate (once for PLAIN; twice for SCRAM, whose client
    sends client-first and client-final messages, RFC 5802), then ordinary requests on the
    same connection decode."""
    checked = 0
    for op in run.operations():
        mechanism = op["detail"].get("mechanism")
        if mechanism is None or op["op"] == "sasl_wrong_password":
            continue
        rows = run.rows(op["client_id"], port=op["port"])
        auth = rows[rows["api_name"] == "SaslAuthenticate"]
        assert (rows.loc[rows["api_name"] == "SaslHandshake", "status"] == "ok").any()
        assert (auth["status"] == "ok").all() and not auth.empty
        per_stream = auth.groupby("stream").size()
        assert set(per_stream) == {1 if mechanism == "PLAIN" else 2}, per_stream.to_dict()
        after = rows[rows["stream"].isin(per_stream.index)]
        data_api = "Produce" if op["op"].startswith("produce") else "Fetch"
        assert (after.loc[after["api_name"] == data_api, "status"] == "ok").any()
        checked += 1
    assert checked >= 3


def test_deliberate_errors_show_with_their_names(run: Run) -> None:
    missing = []
    for op in run.operations():
        for err in op["errors"]:
            rows = run.rows(op["client_id"], err["api"], op["port"])
            if not (rows["error_name"] == err["error"]).any():
                missing.append((op["client_id"], err, sorted(set(rows["error_name"].dropna()))))
    assert missing == []


def test_unanswered_request_from_a_too_old_client(run: Run) -> None:
    """Kafka 4 closes the connection on Produce v2 without answering; the request's one
    record is still visible in it."""
    ops = [op for op in run.operations() if op["detail"].get("unanswered")]
    assert ops
    for op in ops:
        for api, version in op["detail"]["unanswered"].items():
            rows = run.rows(op["client_id"], api, op["port"])
            rows = rows[rows["api_version"] == version]
            assert not rows.empty and (rows["status"] == "unanswered").all()
            assert rows["records"].sum() == op["detail"]["records_in_unanswered_request"]


def test_future_api_versions_request_gets_unsupported_version(run: Run) -> None:
    """A request at a version the broker does not know is answered with ApiVersions v0 and
    UNSUPPORTED_VERSION (KIP-511); the pair is an error, not a decoding failure."""
    [op] = [op for op in run.operations() if op["op"] == FUTURE_API_VERSIONS_OP]
    rows = run.rows(op["client_id"], "ApiVersions", op["port"])
    assert len(rows) == 1
    assert rows["status"].tolist() == ["error"]
    assert rows["error_name"].tolist() == ["UNSUPPORTED_VERSION"]
    assert rows["api_version"].tolist() == [op["detail"]["request_version"]]
    assert rows["response_size"].tolist() == [op["detail"]["response_size"]]


def _decode_problems(run: Run) -> pd.DataFrame:
    return run.df[run.df["decode_error"].notna()]


def test_no_row_is_malformed(run: Run) -> None:
    """Nothing is malformed; the only decode notes allowed say a version is newer than the
    dissector knows (what Wireshark calls an unsupported version), or that the broker
    refused it too (KIP-511)."""
    malformed = run.df[run.df["status"] == "malformed"]
    assert malformed[["client_id", "api_name", "api_version"]].to_dict("records") == []
    notes = _decode_problems(run)["decode_error"]
    other = [
        note
        for note in notes
        if not all(
            ": unsupported_version: " in part or ": version_refused: " in part
            for part in str(note).split("; ")
        )
    ]
    assert other == []


def _undecoded(df: pd.DataFrame) -> set[tuple[str, int]]:
    undecoded = df[df["decode_error"].notna()]
    return set(zip(undecoded["api_name"], undecoded["api_version"].astype(int), strict=True))


def test_with_the_shipped_specs_only_the_deliberate_future_version_is_undecoded(
    run: Run,
) -> None:
    # The shipped specs are Kafka 4.4's (the test bed's release): ApiVersions v5 of the
    # broker's own inter-broker clients decodes. v99 is the deliberate one, written in
    # v4's shape: v5's layout (two more plain fields, ClusterId and NodeId) does not fit
    # it (messages.ASSUMED_VERSION_RULE), and the broker refused it (UNSUPPORTED_VERSION
    # in the v0 layout, KIP-511), so the row is version_refused, no unsupported_version.
    assert _undecoded(run.df) == {("ApiVersions", 99)}
    v99 = run.df[run.df["api_version"] == 99]
    assert len(v99) and v99["assumed_version"].isna().all()
    assert (v99["error_name"] == "UNSUPPORTED_VERSION").all()
    assert v99["decode_error"].str.startswith("request: version_refused: ").all()
    assert not run.df["decode_error"].str.contains("unsupported_version", na=False).any()


@pytest.fixture(scope="session")
def broker_clients_jar() -> Path:
    """The broker's own kafka-clients jar: Apache's JSON specs of the release under test."""
    fetched = subprocess.run(
        [str(KAFKA_BROKER), "fetch"], capture_output=True, text=True, timeout=600, check=False
    )
    if fetched.returncode != 0:
        pytest.fail(f"scripts/kafka-broker fetch failed:\n{fetched.stderr[-2000:]}")
    env = subprocess.run(
        [str(KAFKA_BROKER), "env"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    libs = Path(dict(line.split("=", 1) for line in env.split())["KAFKA_BROKER_LIBS"])
    (jar,) = libs.glob("kafka-clients-*.jar")
    return jar


def test_with_the_brokers_own_specs_only_the_deliberate_future_version_is_undecoded(
    run: Run, broker_clients_jar: Path
) -> None:
    df = dissector.analyze(run.capture, specs=[broker_clients_jar])
    assert _undecoded(df) == {("ApiVersions", 99)}
    assert not (df["status"] == "malformed").any()


def test_request_counts_and_versions_match_tshark(run: Run) -> None:
    requests = run.df[run.df["status"] != "orphan_response"]
    keys = requests["api_key"].astype(int)
    ours = Counter(zip(keys, requests["api_version"].astype(int), strict=True))
    theirs = Counter(
        {
            (key, version): n
            for key, versions in run.tshark.request_versions.items()
            for version, n in versions.items()
        }
    )
    assert ours == theirs


def test_latency_is_non_negative_and_bounded(run: Run) -> None:
    answered = run.df[run.df["status"].isin(ANSWERED)]
    span_ms = (run.doc["finished"] - run.doc["started"]) * 1000
    assert (answered["latency_ms"] >= 0).all()
    assert (answered["latency_ms"] <= span_ms).all()


# ---------------------------------------------------------------- the test bed's own parts


def _echo_server() -> tuple[socket.socket, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            for _ in range(100):  # bounded: the client sends 5 messages then closes
                data = conn.recv(100)
                if not data:
                    return
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize("prefer", ["dumpcap", "scapy"])
def test_capture_records_each_loopback_segment_once(
    prefer: str, tshark: str, tmp_path: Path
) -> None:
    """Five request/echo exchanges on loopback: tshark must find five data segments each
    way in the file (scapy's raw socket would see every loopback packet twice)."""
    if prefer == "dumpcap" and shutil.which("dumpcap") is None:
        pytest.skip("dumpcap is not installed (it comes with tshark)")
    server, thread = _echo_server()
    port = server.getsockname()[1]
    path = tmp_path / f"echo-{prefer}.pcap"
    with server, Capture(path, ports=(port,), prefer=prefer, settle_s=0.5) as cap:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            for i in range(5):
                client.sendall(b"ping %d" % i)
                assert client.recv(100) == b"ping %d" % i
        thread.join(10)
    assert cap.tool == prefer
    out = subprocess.run(
        [tshark, "-n", "-r", str(path), "-Y", "tcp.len > 0", "-T", "fields", "-e", "tcp.dstport"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    to_server = out.count(str(port))
    assert (to_server, len(out) - to_server, len(set(out))) == (5, 5, 2)


DUMP_SAMPLE = """\
Dumping /state/data/mix-txn-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 19 count: 20 baseSequence: 0 lastSequence: 19 producerId: 1 \
producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false \
deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795362662960 size: 296 magic: 2 \
compresscodec: lz4 crc: 208180814 isvalid: true
baseOffset: 20 lastOffset: 20 count: 1 baseSequence: -1 lastSequence: -1 producerId: 1 \
producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true \
deleteHorizonMs: OptionalLong.empty position: 296 CreateTime: 1795362663030 size: 78 magic: 2 \
compresscodec: none crc: 210744238 isvalid: true
Dumping /state/data/mix-kp-old-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 14 count: 15 baseSequence: 0 lastSequence: 14 producerId: 7 \
producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false \
deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795362673253 size: 233 magic: 2 \
compresscodec: gzip crc: 424105176 isvalid: true
"""


def test_broker_log_parser_reads_dump_log_segments_output() -> None:
    batches = parse_dump(DUMP_SAMPLE)
    assert [(b.topic, b.partition, b.count, b.codec, b.control) for b in batches] == [
        ("mix-txn", 0, 20, "lz4", False),
        ("mix-txn", 0, 1, "none", True),
        ("mix-kp-old", 0, 15, "gzip", False),
    ]
    assert records_by_topic_codec(batches) == {"mix-txn": {"lz4": 20}, "mix-kp-old": {"gzip": 15}}
