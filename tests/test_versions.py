"""The version-skew view against tshark (request versions, the ranges brokers
advertised), the bundled capture's ledger (clients pinned to old versions, a hand
written ApiVersions v99) and Apache's JSON specs of the broker's own version."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from dissector.analytics.versions import VERSION_COLUMN_NAMES, versions
from scripts.testbed.tshark_counts import count

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"
LEDGER = json.loads((REPO / "captures" / "kafka-4-mixed.drivers.json").read_text())
SHARED = REPO.parent / "shared" / "captures"
TSHARK = shutil.which("tshark")


@pytest.fixture(scope="module")
def view() -> pd.DataFrame:
    return versions(CAPTURE)


def _op(client_id: str) -> dict:
    return next(
        op for d in LEDGER["drivers"] for op in d["operations"] if op["client_id"] == client_id
    )


def test_columns(view: pd.DataFrame) -> None:
    assert tuple(view.columns) == VERSION_COLUMN_NAMES
    assert not view.duplicated(["capture", "stream", "api_key"]).any()


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_request_versions_match_tshark(view: pd.DataFrame) -> None:
    theirs = count(CAPTURE, (9092, 9094)).request_versions
    ours: dict[int, Counter[int]] = {}
    for row in view.itertuples():
        # versions_used holds distinct versions; a connection of this capture uses one per
        # API, so its requests count for that version (a second one would break equality)
        ours.setdefault(row.api_key, Counter())[row.versions_used[0]] += row.requests
    assert {k: dict(v) for k, v in ours.items()} == {k: dict(v) for k, v in theirs.items()}


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_advertised_ranges_match_tshark(view: pd.DataFrame) -> None:
    cmd = [TSHARK, "-n", "-r", str(CAPTURE), "-d", "tcp.port==9094,kafka",
           "-Y", "kafka.response_key == 18", "-T", "fields", "-e", "tcp.stream",
           "-e", "kafka.api_versions.api_key", "-e", "kafka.api_versions.min_version",
           "-e", "kafka.api_versions.max_version"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    advertised: dict[int, dict[int, tuple[int, int]]] = {}
    for line in out.splitlines():
        stream, keys, lows, highs = line.split("\t")
        if keys:
            triples = zip(keys.split(","), lows.split(","), highs.split(","), strict=True)
            advertised[int(stream)] = {int(k): (int(lo), int(hi)) for k, lo, hi in triples}
    compared = 0
    for row in view[view["broker_min"].notna()].itertuples():
        if row.stream in advertised and row.api_key in advertised[row.stream]:
            assert (row.broker_min, row.broker_max) == advertised[row.stream][row.api_key]
            compared += 1
    assert compared >= 100


def test_pinned_old_clients_and_the_hand_written_v99(view: pd.DataFrame) -> None:
    for client_id in ("mix-kp-old-produce", "mix-kp-old-consume"):
        for api, version in _op(client_id)["detail"]["expect_versions"].items():
            rows = view[(view["client_id"] == client_id) & (view["api_name"] == api)]
            assert list(rows["versions_used"]) == [[version]]
            assert rows["within_broker_range"].all()
    raw = view[view["client_id"] == "mix-raw-apiversions-v99"]
    assert list(raw["versions_used"]) == [[99]]
    assert list(raw["unknown_versions"]) == [[99]]
    # the broker answers UNSUPPORTED_VERSION with its own ApiVersions range
    assert raw["within_broker_range"].eq(False).all()
    assert int(raw["broker_max"].iloc[0]) < 99


def test_versions_newer_than_the_specs_are_listed(view: pd.DataFrame) -> None:
    """The raw driver's ApiVersions v99 is the one version the shipped specs (Kafka 4.4)
    do not hold; every unknown version is one the spec set does not hold."""
    unknown = view[view["unknown_versions"].map(len) > 0]
    assert len(unknown)
    assert (unknown["spec_max"] < unknown["unknown_versions"].map(max)).all()
    assert set(unknown["api_name"]) == {"ApiVersions"}
    assert set(unknown["unknown_versions"].map(tuple)) == {(99,)}
    # Kafka 4.4's own clients' ApiVersions v5 negotiations are read
    v5 = view[view["negotiation_version"] == 5]
    assert len(v5) and v5["negotiation_error"].isna().all()
    assert v5["broker_min"].notna().all()


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared captures not present")
def test_mid_connection_capture_has_no_negotiation() -> None:
    """ndpi-kafka-2024 starts mid-connection (README): connections whose ApiVersions is
    not in the capture have no broker range, others do."""
    df = versions(SHARED / "ndpi-kafka-2024.pcap")
    assert df["requests"].sum() == 10  # README: 10 requests
    has_range = df.groupby("stream")["broker_min"].apply(lambda s: s.notna().any())
    negotiated = df.groupby("stream")["api_name"].apply(lambda s: "ApiVersions" in set(s))
    for stream, ok in has_range.items():
        if ok:
            assert negotiated[stream]
