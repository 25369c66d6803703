"""The port heuristic on real traffic: a broker on a port that is not a default one.

`captures/heuristic-port-19192.pcapng` holds three connections to a Kafka 4.4 broker on
127.0.0.1:19192, cut from a real long-poll run (captures/README.md says how). Two are the
broker's own Java clients: their first request is ApiVersions v5, newer than the specs,
and their AddPartitionsToTxn/WriteTxnMarkers responses start with a small correlation id,
which reads as a plausible Produce request header. The heuristic once took those
responses for requests and turned both connections around (every response an orphan,
every request unanswered). Oracles: the same capture with `--ports 19192`, where the
heuristic is off, and tshark's Kafka dissector decoding port 19192.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import dissector
from scripts.testbed.tshark_counts import count

CAPTURE = Path(__file__).resolve().parents[1] / "captures" / "heuristic-port-19192.pcapng"
PORT = 19192


@pytest.fixture(scope="module")
def by_heuristic() -> pd.DataFrame:
    return dissector.analyze(CAPTURE)


@pytest.fixture(scope="module")
def by_port() -> pd.DataFrame:
    return dissector.analyze(CAPTURE, ports=[PORT])


def test_every_connection_is_found_with_the_broker_on_its_port(by_heuristic: pd.DataFrame) -> None:
    counters = by_heuristic.attrs["counters"]
    assert counters["kafka_found_by_heuristic"] == 3
    assert counters.get("orphan_responses", 0) == 0
    assert counters.get("duplicate_correlation_ids", 0) == 0
    assert set(by_heuristic["broker_port"]) == {PORT}
    assert set(by_heuristic["status"]) == {"ok"}


def test_rows_equal_those_with_the_port_given(
    by_heuristic: pd.DataFrame, by_port: pd.DataFrame
) -> None:
    pd.testing.assert_frame_equal(by_heuristic, by_port)
    found = dict(by_heuristic.attrs["counters"])
    assert found.pop("kafka_found_by_heuristic") == 3
    assert found == dict(by_port.attrs["counters"])


def test_requests_match_tshark(by_heuristic: pd.DataFrame) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    ts = count(CAPTURE, (PORT,))
    ours = Counter(zip(by_heuristic["api_key"], by_heuristic["api_version"], strict=True))
    theirs = Counter(
        (key, version)
        for key, vs in ts.request_versions.items()
        for version, n in vs.items()
        for _ in range(n)
    )
    assert sum(theirs.values()) == sum(ts.requests.values()) == len(by_heuristic)
    assert ours == theirs
    assert Counter(by_heuristic["client_id"]) == ts.client_ids
