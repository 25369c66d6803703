"""The groups table and the rebalance timeline, against the bundled capture's ledger,
tshark's Kafka dissector, the group fields of other APIs (OffsetCommit), a
third-party capture's independent counts, and hand-built timelines."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dissector.analytics.groups import (
    GROUP_COLUMN_NAMES,
    GROUP_COLUMNS,
    group_row,
    groups,
    rebalances,
)
from dissector.analytics.partitions import DecodedExchange, partitions, table
from dissector.protocol.messages import Decoded
from dissector.stages import Endpoint
from tests.oracle.correlate import Exchange

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"
LEDGER = json.loads((REPO / "captures" / "kafka-4-mixed.drivers.json").read_text())
SHARED = REPO.parent / "shared" / "captures"
TSHARK = shutil.which("tshark")
SLACK = pd.Timedelta(milliseconds=500)


@pytest.fixture(scope="module")
def calls() -> pd.DataFrame:
    return groups(CAPTURE)


def _group_ops() -> list[dict[str, Any]]:
    return [
        op
        for driver in LEDGER["drivers"]
        for op in driver["operations"]
        if op["group_id"] and op["group_protocol"] and "consume" in op["op"]
    ]


def test_columns(calls: pd.DataFrame) -> None:
    assert tuple(calls.columns) == GROUP_COLUMN_NAMES
    assert calls.attrs["counters"]["pairs"] == len(calls)


def test_every_consuming_group_of_the_ledger_with_its_protocol_and_client(
    calls: pd.DataFrame,
) -> None:
    ops = _group_ops()
    assert len(ops) == 7
    for op in ops:
        mine = calls[calls["group_id"] == op["group_id"]]
        assert set(mine["group_protocol"]) == {op["group_protocol"]}, op["group_id"]
        assert set(mine["client_id"]) == {op["client_id"]}
        start, end = (
            pd.Timestamp(op["started"], unit="s", tz="UTC"),
            pd.Timestamp(op["finished"], unit="s", tz="UTC"),
        )
        assert (mine["request_time"] >= start - SLACK).all()
        assert (mine["response_time"] <= end + SLACK).all()


def test_generations_agree_with_the_offset_commits(calls: pd.DataFrame) -> None:
    """The member id and generation/epoch a group's OffsetCommit carries (a different
    API, read by the partition table) are those of the generation it committed in."""
    timeline = rebalances(calls)
    commits = partitions(CAPTURE)
    commits = commits[(commits["api_name"] == "OffsetCommit") & commits["member_id"].notna()]
    checked = 0
    for group, c in commits.groupby("group_id"):
        rounds = timeline[timeline["group_id"] == group]
        assert len(rounds), group
        for commit in c.drop_duplicates(["stream", "correlation_id"]).itertuples():
            current = rounds[rounds["start_time"] <= commit.request_time].iloc[-1]
            assert current["generation"] == commit.member_epoch, group
            assert commit.member_id in current["member_ids"]
            checked += 1
    assert checked >= 5


def test_rebalance_rounds_of_single_member_groups(calls: pd.DataFrame) -> None:
    timeline = rebalances(calls)
    assert set(timeline["group_id"]) == {op["group_id"] for op in _group_ops()}
    assert (timeline["members"] == 1).all()  # each group had one consumer (ledger)
    assert (timeline["duration_ms"] >= 0).all()
    assert (timeline["end_time"] >= timeline["start_time"]).all()
    classic = timeline[timeline["group_protocol"] == "classic"]
    assert (classic["leader"] == classic["member_ids"].map(lambda m: m[0])).all()
    # KIP-848 and KIP-932: the first heartbeat (epoch 0) is answered with a new epoch
    for protocol in ("consumer", "share"):
        epochs = timeline[timeline["group_protocol"] == protocol]
        assert len(epochs) == 1 and epochs["generation"].iloc[0] > 0


def _tshark(display_filter: str, fields: list[str]) -> list[list[str]]:
    cmd = [TSHARK, "-r", str(CAPTURE), "-d", "tcp.port==9094,kafka", "-Y", display_filter,
           "-T", "fields", "-E", "separator=\t", "-E", "aggregator=|"]  # fmt: skip
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_generation_and_member_ids_equal_tsharks(calls: pd.DataFrame) -> None:
    fields = ["tcp.stream", "kafka.correlation_id", "kafka.generation_id", "kafka.member_id"]
    keyed = calls.set_index(["stream", "correlation_id"])
    requests = _tshark(
        "(kafka.request_key == 12 || kafka.request_key == 14) && !kafka.unsupported_api_version",
        fields,
    )
    responses = _tshark("kafka.response_key == 11 && !kafka.unsupported_api_version", fields)
    assert requests and responses
    for stream, corr, generation, members in requests:
        row = keyed.loc[(int(stream), int(corr))]
        assert row["request_generation"] == int(generation)
        assert row["member_id"] == members.split("|")[0]
    for stream, corr, generation, members in responses:
        row = keyed.loc[(int(stream), int(corr))]
        assert row["generation"] == int(generation)
        ours = row["member_id"] if isinstance(row["member_id"], str) else ""
        assert ours in members.split("|")


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared captures not present")
def test_tansu_capture_membership_calls_match_the_readme() -> None:
    df = groups(SHARED / "local-tansu-confluent-kafka.pcapng")
    counts = df.groupby(["api_name", "api_version"]).size().to_dict()
    # README: JoinGroup v5 x2, Heartbeat v3 x1, LeaveGroup v1 x1, SyncGroup v3 x1
    assert counts == {
        ("JoinGroup", 5): 2, ("Heartbeat", 3): 1, ("LeaveGroup", 1): 1, ("SyncGroup", 3): 1,
    }  # fmt: skip


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared captures not present")
def test_shared_single_call_captures() -> None:
    for name, api in (
        ("deepflow-11-join-group-v7.pcap", "JoinGroup"),
        ("deepflow-13-leave-group-v4.pcap", "LeaveGroup"),
        ("deepflow-14-sync-group-v5.pcap", "SyncGroup"),
    ):
        df = groups(SHARED / name)
        assert list(df["api_name"]) == [api], name
        assert df["group_id"].notna().all() and df["member_id"].notna().all()


S = 10**9


def _call(api: str, t: float, member: str, **kw: Any) -> dict[str, Any]:
    base = {
        "capture": "c", "group_id": "g", "api_name": api, "member_id": member,
        "request_time": int(t * S), "response_time": int(t * S) + 1000, "error_code": 0,
        "group_protocol": "consumer" if api == "ConsumerGroupHeartbeat" else "classic",
    }  # fmt: skip
    return base | kw


def test_classic_rounds_hand_built() -> None:
    rows = [
        _call("JoinGroup", 0.0, "a", error_code=79, generation=-1),  # MEMBER_ID_REQUIRED
        _call("JoinGroup", 0.1, "a", generation=1, leader="a", protocol_name="range"),
        _call("SyncGroup", 0.2, "a", request_generation=1, generation=1),
        _call("Heartbeat", 3.0, "a", request_generation=1, error_code=27),  # REBALANCE_IN_P.
        _call("JoinGroup", 3.5, "b", generation=2, leader="a"),
        _call("JoinGroup", 3.1, "a", generation=2, leader="a", response_time=int(3.6 * S)),
        _call("Heartbeat", 3.55, "c", request_generation=1, error_code=22, fenced=True),
        _call("SyncGroup", 3.7, "b", request_generation=2, generation=2),
        _call("SyncGroup", 3.8, "a", request_generation=2, generation=2),
    ]
    timeline = rebalances(table(rows, GROUP_COLUMNS))
    assert list(timeline["generation"]) == [1, 2]
    first, second = timeline.iloc[0], timeline.iloc[1]
    assert first["start_time"] == pd.Timestamp(0, tz="UTC")  # the refused first join
    assert first["duration_ms"] == pytest.approx(200.001)  # to the SyncGroup answer
    assert first["errors"] == 2 and first["calls"] == 4
    assert second["member_ids"] == ["a", "b"] and second["leader"] == "a"
    assert second["start_time"] == pd.Timestamp(int(3.1 * S), tz="UTC")
    assert second["duration_ms"] == pytest.approx(700.001)
    assert second["fenced"] == 1


def test_consumer_epochs_hand_built() -> None:
    beat = "ConsumerGroupHeartbeat"
    rows = [
        _call(beat, 0.0, "a", request_generation=0, generation=1),
        _call(beat, 1.0, "a", request_generation=1, generation=1),
        _call(beat, 2.0, "b", request_generation=0, generation=2),
        _call(beat, 2.5, "a", request_generation=1, generation=2),
        _call(beat, 2.7, "c", request_generation=5, error_code=110, fenced=True),
        _call(beat, 4.0, "b", request_generation=-1, generation=-1),  # leaves
    ]
    timeline = rebalances(table(rows, GROUP_COLUMNS))
    assert list(timeline["generation"]) == [1, 2]
    second = timeline.iloc[1]
    assert second["member_ids"] == ["a", "b"]
    assert second["duration_ms"] == pytest.approx(500.001)  # b moved at 2.0, a at 2.5
    assert (second["calls"], second["errors"], second["fenced"]) == (4, 1, 1)


def _dx(api: str, request: Any, response: Any) -> DecodedExchange:
    ex = Exchange(
        stream=0, client=Endpoint("10.0.0.1", 1), broker=Endpoint("10.0.0.2", 9092), kind="pair"
    )
    return DecodedExchange(
        "c", ex, api, Decoded(header={}, body=request), Decoded(header={}, body=response)
    )


def test_group_row_survives_partial_and_odd_bodies() -> None:
    for request, response in (
        (None, None),
        ({}, {}),
        ({"group_id": 5, "members": "x"}, {"member_id": 7, "assignment": {"topic_partitions": 3}}),
        ({"members": [1, None]}, {"members": [{"error_code": "x"}], "error_code": None}),
        ({"member_epoch": True}, {"assignment": {"topic_partitions": [None, {"partitions": 1}]}}),
    ):
        row = group_row(_dx("ConsumerGroupHeartbeat", request, response))
        assert set(row) == set(GROUP_COLUMN_NAMES)
    row = group_row(
        _dx("LeaveGroup", {"group_id": "g", "members": [{"member_id": "m1"}]},
            {"members": [{"member_id": "m1", "error_code": 25}], "error_code": 0})
    )  # fmt: skip
    assert (row["member_id"], row["error_name"], row["fenced"]) == ("m1", "UNKNOWN_MEMBER_ID", True)


def test_cli_writes_both_tables(calls: pd.DataFrame, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dissector.cli import main

    parts_out, groups_out = tmp_path / "p.parquet", tmp_path / "g.jsonl"
    args = ["analyze", str(CAPTURE), "--quiet", "--partitions", str(parts_out)]
    result = CliRunner().invoke(main, [*args, "--groups", str(groups_out)])
    assert result.exit_code == 0, result.output
    assert len(pd.read_parquet(parts_out)) == len(partitions(CAPTURE))
    lines = groups_out.read_text().splitlines()
    assert [json.loads(line)["correlation_id"] for line in lines] == list(calls["correlation_id"])
    bad = CliRunner().invoke(main, ["analyze", str(CAPTURE), "--groups", str(tmp_path / "g.txt")])
    assert bad.exit_code != 0 and "use one of" in bad.output
