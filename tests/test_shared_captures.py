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
from tests.shared_readme import EXPECTED

REQUEST_STATUSES = {
    "ok",
    "error",
    "no_response",
    "unanswered",
    "response_lost",
    "unknown",
    "malformed",
}
# The independent count's "unanswered" is every request without its response in the
# capture; ours tells apart those whose response the capture lost (a hole the client
# acknowledged: arkime-kafka.pcap's 71 response bytes), flagged capture_gap.
NOT_ANSWERED = {"unanswered", "response_lost"}


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
    assert int(df["status"].isin(NOT_ANSWERED).sum()) == unanswered
    lost = df[df["status"] == "response_lost"]
    assert all("capture_gap" in flags for flags in lost["flags"])
    assert int(df.attrs["counters"].get("tcp_gaps", 0)) >= (1 if len(lost) else 0)
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
