"""End-to-end conformance on third-party captures (../shared/captures).

Expected values come from that folder's README, which an independent decoder
produced (tshark reassembly + kafka-python), and from tshark run here; none of
them come from this project's output.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import dissector

# file -> (ports to pass or None, {(api_name, version): count of requests},
#          pairs matched, orphan responses, unanswered requests)
EXPECTED: dict[str, tuple[list[int] | None, dict[tuple[str, int], int], int, int, int]] = {
    "ndpi-kafka.pcapng": (
        None,
        {
            ("Produce", 3): 2,
            ("Produce", 9): 1,
            ("Metadata", 2): 4,
            ("Metadata", 12): 1,
            ("ApiVersions", 0): 4,
            ("ApiVersions", 3): 1,
            ("InitProducerId", 4): 1,
        },
        11,
        3,
        3,
    ),
    "ndpi-kafka-2024.pcap": (
        None,
        {("Produce", 3): 2, ("Metadata", 2): 4, ("ApiVersions", 0): 4},
        7,
        3,
        3,
    ),
    "ndpi-kafka-2023.pcapng": (
        None,
        {("ApiVersions", 3): 1, ("Metadata", 12): 1, ("InitProducerId", 4): 1, ("Produce", 9): 1},
        4,
        0,
        0,
    ),
    "go-sniffer-kafka.pcap": (None, {("Produce", 1): 1, ("Metadata", 0): 1}, 2, 0, 0),
    "deepflow-00-produce-v2.pcap": (None, {("Produce", 2): 1}, 1, 0, 0),
    "deepflow-00-produce-v7-sw8.pcap": (None, {("Produce", 7): 1}, 1, 0, 0),
    "deepflow-00-produce-v9.pcap": (None, {("Produce", 9): 1}, 1, 0, 0),
    "deepflow-produce-v9-old.pcap": (None, {("Produce", 9): 1}, 0, 0, 1),
    "deepflow-18-api-versions-v3.pcap": (None, {("ApiVersions", 3): 1}, 1, 0, 0),
    "deepflow-11-join-group-v7.pcap": (None, {("JoinGroup", 7): 1}, 1, 0, 0),
    "deepflow-13-leave-group-v4.pcap": (None, {("LeaveGroup", 4): 1}, 1, 0, 0),
    "deepflow-14-sync-group-v5.pcap": (None, {("SyncGroup", 5): 1}, 1, 0, 0),
    "deepflow-01-fetch-v12-ok.pcap": (None, {("Fetch", 12): 1}, 1, 0, 0),
    "deepflow-01-fetch-v12-perf.pcap": (None, {("Fetch", 12): 1}, 1, 0, 0),
    "deepflow-mixed-with-unsupported.pcap": (
        None,
        {("Fetch", 13): 1, ("OffsetCommit", 8): 1, ("Heartbeat", 4): 1},
        3,
        0,
        0,
    ),
    "arkime-kafka.pcap": (None, {("ListOffsets", 0): 1}, 0, 0, 1),
    "local-tansu-confluent-kafka.pcapng": (
        None,
        {
            ("Produce", 10): 16,
            ("Fetch", 16): 7,
            ("ListOffsets", 7): 10,
            ("Metadata", 12): 11,
            ("OffsetCommit", 9): 4,
            ("OffsetFetch", 9): 2,
            ("FindCoordinator", 2): 3,
            ("JoinGroup", 5): 2,
            ("Heartbeat", 3): 1,
            ("LeaveGroup", 1): 1,
            ("SyncGroup", 3): 1,
            ("ListGroups", 5): 1,
            ("ApiVersions", 3): 13,
            ("CreateTopics", 4): 1,
            ("DescribeConfigs", 1): 1,
            ("ConsumerGroupDescribe", 0): 1,
            ("GetTelemetrySubscriptions", 0): 9,
        },
        84,
        0,
        0,
    ),
}

REQUEST_STATUSES = {"ok", "error", "no_response", "unanswered", "malformed"}


def _analyze(shared: Path, name: str) -> pd.DataFrame:
    ports = EXPECTED[name][0]
    return dissector.analyze(shared / name, ports=ports)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_requests_pairs_and_unmatched_match_independent_counts(
    shared_captures: Path, name: str
) -> None:
    _, requests, matched, orphans, unanswered = EXPECTED[name]
    df = _analyze(shared_captures, name)
    req_rows = df[df["status"].isin(REQUEST_STATUSES)]
    seen = Counter(zip(req_rows["api_name"], req_rows["api_version"].astype(int), strict=True))
    assert dict(seen) == requests
    assert int(df["response_time"].notna().sum() - (df["status"] == "orphan_response").sum()) == (
        matched
    )
    assert int((df["status"] == "orphan_response").sum()) == orphans
    assert int((df["status"] == "unanswered").sum()) == unanswered
    assert not (df["status"] == "malformed").any(), df[df["status"] == "malformed"].to_dict(
        "records"
    )


def test_tansu_records_per_codec(shared_captures: Path) -> None:
    df = _analyze(shared_captures, "local-tansu-confluent-kafka.pcapng")
    produce = df[df["api_name"] == "Produce"]
    assert len(produce) == 16
    per_codec = produce.groupby("compression")["records"].sum().to_dict()
    assert per_codec == {"gzip": 250, "lz4": 250, "snappy": 250, "zstd": 250}
    assert df["stream"].nunique() == 13


def test_ndpi_merged_has_nine_streams_and_three_produced_records(shared_captures: Path) -> None:
    df = _analyze(shared_captures, "ndpi-kafka.pcapng")
    produce = df[df["api_name"] == "Produce"]
    assert int(produce["records"].sum()) == 3
    assert set(produce["compression"].dropna()) == {"none"}


def _tshark_times(tshark: str, path: Path, port: int, direction: str) -> set[int]:
    """Epoch ns of frames where tshark finishes a Kafka PDU sent to (or from) ``port``."""
    field = "tcp.dstport" if direction == "request" else "tcp.srcport"
    out = subprocess.run(
        [
            tshark,
            "-r",
            str(path),
            "-Y",
            f"kafka && {field}=={port}",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    times = set()
    for line in out.split():
        sec, _, frac = line.partition(".")
        times.add(int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]))
    return times


@pytest.mark.parametrize(
    "name", ["ndpi-kafka.pcapng", "local-tansu-confluent-kafka.pcapng", "go-sniffer-kafka.pcap"]
)
def test_pair_times_are_tshark_pdu_times(shared_captures: Path, tshark: str, name: str) -> None:
    path = shared_captures / name
    df = _analyze(shared_captures, name)
    req_ns = {int(t.value) for t in df["request_time"].dropna()}
    resp_ns = {int(t.value) for t in df["response_time"].dropna()}
    assert req_ns and req_ns <= _tshark_times(tshark, path, 9092, "request")
    assert resp_ns and resp_ns <= _tshark_times(tshark, path, 9092, "response")
    assert (df["latency_ms"].dropna() >= 0).all()


def test_every_capture_runs_without_crash(shared_captures: Path) -> None:
    for path in sorted(shared_captures.glob("*.pcap*")):
        df = dissector.analyze(path)
        assert list(df.columns) == list(dissector.COLUMN_NAMES)
