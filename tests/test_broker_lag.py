"""Consumer lag against Kafka's own account of it.

Two cases run the same checks: ``recorded``, the committed captures/kafka-4-lag.pcapng
with what the clients and Kafka's tools said then (captures/kafka-4-lag.json), and
``live`` (marker ``broker``), the same scenario run now on the test bed broker.

scripts/testbed/lag_scenario.py runs a producer and four consumer groups (caught up,
lagging with a prefetch, new from the earliest offset, committing in transactions with
the last one aborted) while dumpcap records ``lo``, then, before the capture stops,
``kafka-consumer-groups --describe`` and GetOffsetShell over the SASL listener.

Oracles, none of them kafka-dissector: describe's CURRENT-OFFSET, LOG-END-OFFSET and
LAG per group and partition, GetOffsetShell's log-end offsets, and the producer's own
delivery reports (records per partition, each record's timestamp).

The capture is read twice: the plaintext port alone holds only the clients' traffic,
so the figures must come from their commits, produces and fetches; both ports add the
tools' own OffsetFetch and ListOffsets, which become the newest inputs.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import dissector
from dissector.analytics.lag import (
    commit_events,
    committed_lag,
    lag_at_end,
    log_end_events,
    position_lag,
)
from scripts.testbed.lag_scenario import PLAINTEXT_PORT, SASL_PORT, LagRun, run_lag_scenario

RECORDED = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-lag.json"


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("recorded", id="recorded"),
        pytest.param("live", marks=pytest.mark.broker, id="live"),
    ],
)
def run(request: pytest.FixtureRequest) -> LagRun:
    """The scenario's record, its ``capture`` the capture file's path."""
    if request.param == "recorded":
        recorded = LagRun.from_json(RECORDED.read_text())
        return replace(recorded, capture=str(RECORDED.parent / recorded.capture))
    request.getfixturevalue("kafka_broker")
    out = request.getfixturevalue("tmp_path_factory").mktemp("lag")
    result = run_lag_scenario(out, f"lag{os.getpid()}")
    assert result.errors == []
    return replace(result, capture=str(out / result.capture))


@pytest.fixture(scope="module")
def clients_only(run: LagRun) -> pd.DataFrame:
    return dissector.partitions(Path(run.capture), ports=(PLAINTEXT_PORT,))


@pytest.fixture(scope="module")
def with_tools(run: LagRun) -> pd.DataFrame:
    return dissector.partitions(Path(run.capture), ports=(PLAINTEXT_PORT, SASL_PORT))


def _ours(run: LagRun, frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["group_id"].isin(run.groups.values()) & frame["topic"].eq(run.topic)]


def _as_describe(run: LagRun, parts: pd.DataFrame) -> dict[tuple[str, int], tuple]:
    end = _ours(run, lag_at_end(parts))

    def value(v: object) -> int | None:
        return None if pd.isna(v) else int(v)  # type: ignore[call-overload]

    return {
        (r.group_id, int(r.partition)): (
            value(r.committed_offset),
            value(r.log_end_offset),
            value(r.lag),
        )
        for r in end.itertuples()
    }


def _describe(run: LagRun) -> dict[tuple[str, int], tuple]:
    return {
        (r.group, r.partition): (r.current_offset, r.log_end_offset, r.lag)
        for r in run.describe
        if r.topic == run.topic
    }


def test_the_scenario_made_every_kind_of_lag(run: LagRun) -> None:
    """The test bed itself: describe lists every group on every partition, the
    caught-up group has lag 0, the others lag somewhere."""
    described = _describe(run)
    assert set(described) == {(g, p) for g in run.groups.values() for p in range(3)}
    lag_by_group = Counter[str]()
    for (group, _), (_, _, lag) in described.items():
        lag_by_group[group] += lag or 0
    assert lag_by_group[run.groups["caught-up"]] == 0
    for role in ("prefetch", "earliest", "txn"):
        assert lag_by_group[run.groups[role]] > 0, role


def test_produced_records_equal_the_producers_ledger_and_the_log_end(
    run: LagRun, clients_only: pd.DataFrame
) -> None:
    produce = clients_only[
        clients_only["api_name"].eq("Produce")
        & clients_only["topic"].eq(run.topic)
        & clients_only["error_code"].eq(0)
        & clients_only["response_time"].notna()
    ]
    seen = produce.groupby("partition")["records"].sum().astype(int).to_dict()
    assert seen == run.produced
    assert run.log_end == run.produced  # a fresh topic, no transactions: one offset a record


@pytest.mark.parametrize("capture", ["clients_only", "with_tools"])
def test_end_of_capture_equals_describe(
    run: LagRun, capture: str, request: pytest.FixtureRequest
) -> None:
    """Committed offset, log-end offset and lag per group and partition."""
    parts = request.getfixturevalue(capture)
    assert _as_describe(run, parts) == _describe(run)
    end = _ours(run, lag_at_end(parts))
    log_end = dict(zip(end["partition"], end["log_end_offset"], strict=False))
    assert log_end == run.log_end  # GetOffsetShell


def test_inputs_come_from_where_they_should(
    run: LagRun, clients_only: pd.DataFrame, with_tools: pd.DataFrame
) -> None:
    """Clients only: commits from OffsetCommit, or TxnOffsetCommit for the
    transactional group; with the tools: describe's OffsetFetch and GetOffsetShell's
    ListOffsets are the newest inputs, 0 ms old at the end."""
    end = _ours(run, lag_at_end(clients_only))
    txn = end["group_id"].eq(run.groups["txn"])
    assert set(end.loc[txn, "committed_api"]) == {"TxnOffsetCommit"}
    assert set(end.loc[~txn, "committed_api"]) == {"OffsetCommit"}
    assert set(end["log_end_api"]) <= {"Fetch", "Produce"}
    tools = _ours(run, lag_at_end(with_tools))
    assert set(tools["committed_api"]) == {"OffsetFetch"}
    assert set(tools["log_end_api"]) == {"ListOffsets"}
    assert (tools["log_end_age_ms"] == 0).all()
    for frame in (end, tools):
        for col in ("committed_age_ms", "log_end_age_ms", "position_age_ms"):
            assert (frame[col] >= 0).all(), col


def test_aborted_transactional_offsets_are_not_committed(
    run: LagRun, clients_only: pd.DataFrame
) -> None:
    """The txn group's last TxnOffsetCommit went beyond what the broker kept: it was in
    the aborted transaction."""
    txn = clients_only[
        clients_only["api_name"].eq("TxnOffsetCommit")
        & clients_only["group_id"].eq(run.groups["txn"])
    ]
    last_sent = txn.sort_values("request_time").groupby("partition")["committed_offset"].last()
    kept = {p: c for (g, p), (c, _, _) in _describe(run).items() if g == run.groups["txn"]}
    assert any(last_sent[p] > kept[p] for p in kept), (last_sent.to_dict(), kept)
    ends = clients_only[clients_only["api_name"].eq("EndTxn")]
    assert not ends.sort_values("request_time")["txn_committed"].iloc[-1]


def test_a_new_group_has_no_offset_and_earliest_is_not_the_log_end(
    run: LagRun, clients_only: pd.DataFrame
) -> None:
    """The group new to the topic asks for its offsets (OffsetFetch answers -1: none)
    and resets to the earliest offset (ListOffsets timestamp -2, answered 0), which is
    no log end: the log end seen only grows."""
    commits = commit_events(clients_only)
    mine = commits[commits["group_id"].eq(run.groups["earliest"])]
    first = mine.drop_duplicates("partition", keep="first")
    assert len(first) == 3
    assert first["committed_api"].eq("OffsetFetch").all()
    assert first["committed_offset"].isna().all()
    earliest = clients_only[
        clients_only["api_name"].eq("ListOffsets") & clients_only["timestamp"].eq(-2)
    ]
    assert not earliest.empty and earliest["offset"].eq(0).all()
    listed = log_end_events(clients_only)
    listed = listed[listed["topic"].eq(run.topic)]
    for _, offsets in listed.groupby("partition")["log_end_offset"]:
        assert offsets.is_monotonic_increasing


@pytest.mark.parametrize("capture", ["clients_only", "with_tools"])
def test_no_negative_lag_anywhere(
    run: LagRun, capture: str, request: pytest.FixtureRequest
) -> None:
    parts = request.getfixturevalue(capture)  # of ``run``
    checks = {
        "series": (committed_lag(parts), ("lag", "time_lag_ms", "committed_age_ms",
                                          "log_end_age_ms")),
        "end": (lag_at_end(parts), ("lag", "time_lag_ms", "committed_age_ms",
                                    "log_end_age_ms", "position_lag", "position_age_ms")),
        "position": (position_lag(parts), ("position_lag", "position_lag_ms")),
    }  # fmt: skip
    for name, (frame, columns) in checks.items():
        assert len(frame) > 0, name
        for col in columns:
            assert not (frame[col].dropna() < 0).any(), (name, col)
    series = checks["series"][0]
    # With both inputs known, lag is known: nothing was missed on the way.
    both = series["committed_offset"].notna() & series["log_end_offset"].notna()
    assert series.loc[both, "lag"].notna().all()


def test_series_ends_where_the_end_table_is(run: LagRun, clients_only: pd.DataFrame) -> None:
    series = _ours(run, committed_lag(clients_only))
    last = series.groupby(["group_id", "partition"]).last()
    end = _ours(run, lag_at_end(clients_only)).set_index(["group_id", "partition"])
    assert last["lag"].to_dict() == end["lag"].to_dict()


def test_time_lag_is_the_age_of_the_record_at_the_committed_offset(
    run: LagRun, clients_only: pd.DataFrame
) -> None:
    """Against the producer's record timestamps (CreateTime, taken when it was handed
    the record, so a few ms before its Produce request): the tool's age is no older,
    and younger by no more than the producer's batching delay plus slack."""
    end = _ours(run, lag_at_end(clients_only))
    checked = 0
    for r in end.itertuples():
        if r.lag == 0:
            assert r.time_lag_ms == 0
            continue
        created = run.create_ms[int(r.partition)][int(r.committed_offset)]
        oracle_ms = (r.end_time - pd.Timestamp(created, unit="ms", tz="UTC")).total_seconds()
        oracle_ms *= 1000
        assert -2 <= oracle_ms - r.time_lag_ms <= 500, (r.group_id, r.partition)
        checked += 1
    assert checked >= 5


def test_prefetched_position_goes_stale_while_committed_lag_stands(
    run: LagRun, clients_only: pd.DataFrame
) -> None:
    """The prefetching group's last Fetch is older than its last commit, and its
    position lag there is below its committed lag on every partition."""
    end = _ours(run, lag_at_end(clients_only))
    mine = end[end["group_id"].eq(run.groups["prefetch"])]
    assert len(mine) == 3
    assert (mine["position_time"] < mine["committed_time"]).all()
    assert (mine["position_lag"] < mine["lag"]).all()
    assert set(mine["position_client_id"]) == {run.clients["prefetch"]}
