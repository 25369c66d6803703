"""Consumer lag (dissector.analytics.lag) on hand-built partition rows, whose expected
figures are worked out by hand in each test, and on the bundled real capture against
what its clients did and what the broker stored (the capture's ledger).

The live check against Kafka's own ``kafka-consumer-groups --describe`` is
tests/test_broker_lag.py (marker ``broker``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dissector.analytics.lag import (
    COMMIT_COLUMNS,
    LAG_COLUMNS,
    LOG_END_COLUMNS,
    POSITION_COLUMNS,
    SERIES_COLUMNS,
    commit_events,
    committed_lag,
    evaluation_times,
    evaluation_times_in_table,
    lag_at_end,
    log_end_events,
    newest_fetches,
    position_lag,
    superseded_fetches,
    superseded_in_table,
)
from dissector.analytics.partitions import PARTITION_COLUMNS, partitions, table
from tests.test_partitions import _consumers, _log_end_before

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"
LEDGER = json.loads((REPO / "captures" / "kafka-4-mixed.drivers.json").read_text())
S = 10**9  # one second in ns
MS = 10**6


def _row(**kw: Any) -> dict[str, Any]:
    base = {"capture": "c", "stream": 1, "topic": "t", "partition": 0, "error_code": 0}
    return base | kw


def _produce(first: int, last: int, at: int, **kw: Any) -> dict[str, Any]:
    return _row(api_name="Produce", client_id="p", request_time=at, response_time=at + MS,
                records=last - first + 1, first_offset=first, last_offset=last,
                base_offset=first, acks=-1, **kw)  # fmt: skip


def _commit(offset: int, at: int, group: str = "g", **kw: Any) -> dict[str, Any]:
    return _row(api_name="OffsetCommit", client_id="c", group_id=group, request_time=at,
                response_time=at + MS, committed_offset=offset, **kw)  # fmt: skip


def _fetch(offset: int, hw: int, at: int, took: int = MS, **kw: Any) -> dict[str, Any]:
    return _row(api_name="Fetch", client_id="c", request_time=at, response_time=at + took,
                fetch_offset=offset, high_watermark=hw, **kw)  # fmt: skip


def _df(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return table(rows, PARTITION_COLUMNS)


def _one(df: pd.DataFrame) -> Any:
    assert len(df) == 1, df
    return df.iloc[0]


# ---------------------------------------------------------------- committed lag


def test_lag_at_end_is_log_end_minus_commit_with_ages_and_time_lag() -> None:
    parts = _df([
        _produce(0, 4, 0),
        _produce(5, 9, 2 * S),
        _commit(5, 3 * S),
        _row(api_name="Heartbeat", request_time=10 * S),  # the capture's last pair
    ])  # fmt: skip
    row = _one(lag_at_end(parts))
    assert (row.committed_offset, row.log_end_offset, row.lag) == (5, 10, 5)
    assert (row.committed_api, row.log_end_api) == ("OffsetCommit", "Produce")
    assert row.end_time == pd.Timestamp(10 * S, tz="UTC")
    assert row.committed_age_ms == pytest.approx(7000 - 1)  # answered at 3 s + 1 ms
    assert row.log_end_age_ms == pytest.approx(8000 - 1)
    # the oldest unconsumed record, offset 5, was sent at 2 s
    assert row.time_lag_ms == pytest.approx(8000)
    assert pd.isna(row.note)
    # an explicit end time; an earlier one leaves out what came after it
    later = _one(lag_at_end(parts, end={"c": pd.Timestamp(20 * S, tz="UTC")}))
    assert later.time_lag_ms == pytest.approx(18000)
    before = _one(lag_at_end(parts, end={"c": pd.Timestamp(3 * S + MS, tz="UTC")}))
    assert (before.lag, before.committed_age_ms, before.log_end_age_ms) == (5, 0, 1000)
    assert lag_at_end(parts, end={"c": pd.Timestamp(2 * S + MS, tz="UTC")}).empty


def test_newest_input_wins_and_caught_up_is_zero() -> None:
    parts = _df([
        _produce(0, 9, 0),
        _fetch(0, 10, 1 * S, first_offset=0, last_offset=9, records=10),
        _commit(10, 2 * S),
        _commit(10, 3 * S, group="h"),
        _commit(4, 4 * S, group="h"),  # an older offset committed later: it stands
    ])  # fmt: skip
    end = lag_at_end(parts).set_index("group_id")
    assert end.loc["g", "lag"] == 0 and end.loc["g", "time_lag_ms"] == 0
    assert end.loc["g", "log_end_api"] == "Fetch"
    assert end.loc["h", "committed_offset"] == 4 and end.loc["h", "lag"] == 6


def test_refused_and_unanswered_commits_do_not_count() -> None:
    parts = _df([
        _produce(0, 9, 0),
        _commit(3, 1 * S),
        _commit(8, 2 * S, error_code=25),  # UNKNOWN_MEMBER_ID
        _row(api_name="OffsetCommit", group_id="g", request_time=3 * S, committed_offset=9),
    ])  # fmt: skip
    row = _one(lag_at_end(parts))
    assert (row.committed_offset, row.lag) == (3, 7)


def test_offset_fetch_without_offset_says_none() -> None:
    """OffsetFetch answers -1 for a partition the group never committed."""
    rows = [
        _produce(0, 9, 0),
        _row(api_name="OffsetFetch", group_id="g", request_time=S, response_time=S + MS,
             committed_offset=-1),
    ]  # fmt: skip
    row = _one(lag_at_end(_df(rows)))
    assert pd.isna(row.committed_offset) and pd.isna(row.lag) and pd.isna(row.time_lag_ms)
    assert row.committed_api == "OffsetFetch"
    assert row.note == "no committed offset"
    # a later commit replaces the "none"; an OffsetFetch after it reads it back
    parts = _df([
        *rows,
        _commit(4, 2 * S),
        _row(api_name="OffsetFetch", group_id="g", request_time=3 * S,
             response_time=3 * S + MS, committed_offset=4),
    ])  # fmt: skip
    row = _one(lag_at_end(parts))
    assert (row.committed_offset, row.committed_api, row.lag) == (4, "OffsetFetch", 6)


def test_list_offsets_counts_only_for_the_latest_read_uncommitted_query() -> None:
    def listed(ts: int, offset: int, at: int, isolation: int | None = 0) -> dict[str, Any]:
        return _row(api_name="ListOffsets", request_time=at, response_time=at + MS,
                    timestamp=ts, offset=offset, isolation_level=isolation)  # fmt: skip

    parts = _df([
        _produce(0, 9, 0),
        _commit(2, S),
        listed(-1, 12, 2 * S),  # latest: the log end
        listed(-2, 0, 3 * S),  # earliest: not the log end
        listed(-1, 11, 4 * S, isolation=1),  # read_committed: last stable offset
        listed(1_700_000_000_000, 3, 5 * S),  # by time
        listed(-1, 13, 6 * S, isolation=None),  # v0: no isolation level, uncommitted
    ])  # fmt: skip
    events = log_end_events(parts)
    assert list(events["log_end_offset"]) == [10, 12, 13]
    assert list(events["log_end_api"]) == ["Produce", "ListOffsets", "ListOffsets"]
    row = _one(lag_at_end(parts))
    assert (row.log_end_offset, row.lag) == (13, 11)
    # offsets 10-12 were written by no Produce in the capture: the time lag is still known
    # because offset 2 was
    assert row.time_lag_ms == pytest.approx((6 * S + MS) / MS)


def test_transactional_offsets_count_when_their_transaction_commits() -> None:
    def txn_commit(offset: int, at: int) -> dict[str, Any]:
        return _row(api_name="TxnOffsetCommit", group_id="g", transactional_id="tx",
                    request_time=at, response_time=at + MS, committed_offset=offset)  # fmt: skip

    def end_txn(committed: bool, at: int, **kw: Any) -> dict[str, Any]:
        return _row(api_name="EndTxn", transactional_id="tx", topic=None, partition=None,
                    request_time=at, response_time=at + MS, txn_committed=committed,
                    **kw)  # fmt: skip

    parts = _df([
        _produce(0, 9, 0),
        txn_commit(3, 1 * S),
        end_txn(True, 2 * S),
        txn_commit(6, 3 * S),
        end_txn(True, 4 * S, error_code=51),  # CONCURRENT_TRANSACTIONS: still open
        end_txn(False, 5 * S),  # aborted: 6 never counts
        txn_commit(8, 6 * S),  # still pending at the end: does not count yet
    ])  # fmt: skip
    events = commit_events(parts)
    assert list(events["committed_offset"]) == [3]
    assert list(events["time"]) == [pd.Timestamp(2 * S + MS, tz="UTC")]
    assert list(events["committed_api"]) == ["TxnOffsetCommit"]
    assert _one(lag_at_end(parts)).lag == 7


def test_log_end_behind_the_commit_is_unknown_lag_not_negative() -> None:
    """A commit beyond the log end seen: the capture missed the log end's advance."""
    parts = _df([_produce(0, 4, 0), _commit(8, S)])
    row = _one(lag_at_end(parts))
    assert pd.isna(row.lag) and pd.isna(row.time_lag_ms)
    assert row.note == "log-end offset seen is behind the commit"
    nothing = _one(lag_at_end(_df([_commit(8, S)])))
    assert pd.isna(nothing.lag) and nothing.note == "no log-end offset seen"
    # the record at the committed offset was written before the capture began
    unseen = _one(lag_at_end(_df([_produce(5, 9, 0), _commit(2, S)])))
    assert unseen.lag == 8 and pd.isna(unseen.time_lag_ms)
    assert unseen.note == "offset 2 not seen produced: time lag unknown"


def test_series_rows_at_each_commit_and_log_end_change() -> None:
    parts = _df([
        _produce(0, 4, 0),  # before the group's first commit: no row
        _commit(0, 1 * S),
        _produce(5, 9, 2 * S),
        _fetch(0, 10, 3 * S, first_offset=0, last_offset=9, records=10),  # same log end
        _commit(10, 4 * S),
        _produce(10, 11, 5 * S),
    ])  # fmt: skip
    series = committed_lag(parts)
    assert tuple(series.columns) == tuple(c[0] for c in SERIES_COLUMNS)
    assert list(series["event"]) == ["commit", "log_end", "commit", "log_end"]
    assert list(series["lag"]) == [5, 10, 0, 2]
    assert list(series["time_lag_ms"].astype(float)) == pytest.approx([1001, 2001, 0, 1])
    assert list(series["log_end_api"]) == ["Produce", "Produce", "Fetch", "Produce"]
    # the inputs' ages at each row: the commit row's own input is 0 ms old
    assert series["committed_age_ms"].iloc[2] == 0
    assert series["log_end_age_ms"].iloc[2] == pytest.approx(1000)
    assert (series["lag"] >= 0).all() and (series["time_lag_ms"] >= 0).all()
    end = _one(lag_at_end(parts))
    assert end.lag == series["lag"].iloc[-1]


def test_superseded_fetches_are_the_ones_lag_at_end_never_reads() -> None:
    """Worked by hand: of the answered Fetch entries up to the capture's end, the latest
    telling the partition's highest log end (a lower one told later is stale) and the
    newest per client and partition (its position) stay, ties both; failed ones and
    ones after the end do not count; everything else is never dropped."""
    parts = _df([
        _produce(0, 9, 0),                                   # 0: not a Fetch
        _fetch(0, 10, 1 * S),                                # 1: c's older fetch
        _fetch(0, 10, 2 * S),                                # 2: c's newest: stays
        _fetch(0, 10, 2 * S),                                # 3: the same time: stays
        _fetch(0, 10, 1 * S) | {"client_id": "d"},           # 4: d's newest: stays
        _fetch(0, 12, 3 * S, error_code=6),                  # 5: failed, newer: dropped
        _fetch(0, 10, 4 * S, topic="u"),                     # 6: another partition: stays
        _fetch(-1, 11, 5 * S) | {"client_id": "d"},          # 7: log end only: stays
        _fetch(0, 12, 20 * S),                               # 8: after the end: dropped
        _commit(5, 6 * S),                                   # 9
        _fetch(-1, 9, 7 * S) | {"client_id": "d"},           # 10: newer, stale: dropped
    ])  # fmt: skip
    chosen = {"c": pd.Timestamp(10 * S, tz="UTC")}
    dropped = list(superseded_fetches(parts, chosen))
    assert dropped == [False, True, False, False, False, True, False, False, True, False, True]
    # d's newest position (row 4) stays although row 7 tells a newer log end
    assert evaluation_times(parts) == {"c": pd.Timestamp(20 * S + MS, tz="UTC")}


def _hand_built_fetches() -> pd.DataFrame:
    return table([
        _produce(0, 9, 0),                                   # 0: not a Fetch
        _fetch(0, 10, 1 * S),                                # 1: c's older fetch
        _fetch(0, 10, 2 * S),                                # 2: c's newest: stays
        _fetch(0, 10, 2 * S),                                # 3: the same time: stays
        _fetch(0, 10, 1 * S) | {"client_id": "d"},           # 4: d's newest: stays
        _fetch(0, 12, 3 * S, error_code=6),                  # 5: failed, newer: dropped
        _fetch(0, 10, 4 * S, topic="u"),                     # 6: another partition: stays
        _fetch(-1, 11, 5 * S) | {"client_id": "d"},          # 7: log end only: stays
        _fetch(0, 12, 20 * S),                               # 8: after the end: dropped
        _commit(5, 6 * S),                                   # 9
        _fetch(-1, 9, 7 * S) | {"client_id": "d"},           # 10: newer, stale: dropped
        _fetch(0, 10, 8 * S) | {"client_id": None},          # 11: no client id: its own
        _fetch(0, 10, 8 * S) | {"partition": None},          # 12: no partition: dropped
    ], PARTITION_COLUMNS)  # fmt: skip


def _arrow_tables() -> list[tuple[str, pd.DataFrame, Any]]:
    """(name, frame, the core's Arrow table) of real captures: one read alone, two read
    in a row (chunks with dictionaries of their own), the shared ones when present."""
    import pyarrow as pa

    from dissector.options import Options
    from dissector.wire.core import capture_tables

    sources: list[tuple[str, Any]] = [
        (name, REPO / "captures" / name)
        for name in ("kafka-4-longpoll-rotation.pcapng", "kafka-4-lag.pcapng")
    ]
    sources.append(("two in a row", [CAPTURE, REPO / "captures" / "kafka-4-lag.pcapng"]))
    shared = REPO.parent / "shared" / "captures"
    if shared.is_dir():
        sources += [(p.name, p) for p in sorted(shared.glob("*.pcap*"))]
    out = []
    for name, source in sources:
        tables = capture_tables(source, Options())
        out.append((name, tables.frame("partitions"), tables.partitions))
    hand = _hand_built_fetches()
    out.append(("hand-built", hand, pa.Table.from_pandas(hand, preserve_index=False)))
    return out


def test_superseded_in_arrow_equals_the_frame_functions() -> None:
    """The report's Arrow/numpy reading of the lag's inputs (``evaluation_times_in_table``,
    ``superseded_in_table``) gives the rows the pandas functions give, on real captures
    (strings dictionary-encoded by the core, several chunks) and on hand-built rows with
    null keys; at the end of each capture and at an earlier time."""
    checked = 0
    for name, parts, arrow in _arrow_tables():
        chosen = evaluation_times(parts)
        assert evaluation_times_in_table(arrow) == chosen, name
        # times given for some captures, or all (then the table's own are not read)
        for given in (dict(list(chosen.items())[:1]), chosen, {**chosen, "other": pd.NaT}):
            later = {c: t + pd.Timedelta(seconds=1) for c, t in given.items()}
            got_times = evaluation_times_in_table(arrow, later)
            assert got_times == evaluation_times(parts, later) == {**chosen, **later}, name
        at_end = {"end": chosen}
        at_end["halfway"] = {
            c: t - (t - parts["request_time"].min()) / 2 for c, t in chosen.items()
        }
        for when, times in at_end.items():
            expected = superseded_fetches(parts, times)
            got = superseded_in_table(arrow, times)
            assert (got == expected).all(), (name, when)
            checked += int(expected.sum())
    for name, parts, arrow in _arrow_tables()[:3]:
        # the report's way: superseded rows left out first, lag_at_end told so
        chosen = evaluation_times(parts)
        kept = parts[~superseded_in_table(arrow, chosen)]
        pd.testing.assert_frame_equal(
            lag_at_end(kept, chosen, reduced=True), lag_at_end(parts, chosen), obj=name
        )
    hand = _hand_built_fetches()
    chosen = {"c": pd.Timestamp(10 * S, tz="UTC")}
    dropped = superseded_fetches(hand, chosen)
    assert list(dropped) == [False, True, False, False, False, True, False, False, True,
                             False, True, False, True]  # fmt: skip
    assert checked > 1000


def test_superseded_fetches_of_chunks_equal_the_whole() -> None:
    """The report reads the table's keys a chunk at a time: evaluation times, newest
    Fetch entries and each chunk's superseded rows equal those of the whole table."""
    parts = partitions(REPO / "captures" / "kafka-4-longpoll-rotation.pcapng")
    chosen = evaluation_times(parts)
    whole = superseded_fetches(parts, chosen)
    for size in (61, 1000):
        chunks = [parts.iloc[i : i + size] for i in range(0, len(parts), size)]
        assert evaluation_times(chunks) == chosen
        newest = newest_fetches(chunks, chosen)
        pieces = [superseded_fetches(chunk, chosen, newest) for chunk in chunks]
        assert (np.concatenate(pieces) == whole).all()
    assert 0 < whole.sum() < len(parts)


@pytest.mark.parametrize("name", ["kafka-4-longpoll-rotation.pcapng", "kafka-4-lag.pcapng"])
def test_lag_at_end_equals_the_last_of_the_unreduced_series(name: str) -> None:
    """``lag_at_end`` reads only the newest Fetch entries (``superseded_fetches``);
    ``committed_lag`` and ``position_lag`` read every row. Per group and partition, the
    lag at the end is the last row of each series (inputs at their newest; ages and the
    time lag are of another evaluation time)."""
    parts = partitions(REPO / "captures" / name)
    assert superseded_fetches(parts, evaluation_times(parts)).sum() > 100
    end = lag_at_end(parts).set_index(["group_id", "topic", "partition"])
    keys = ["group_id", "topic", "partition"]
    series = committed_lag(parts).drop_duplicates(keys, keep="last").set_index(keys)
    assert len(end) == len(series) > 0
    for column in ("committed_offset", "log_end_offset", "lag"):
        assert end[column].equals(series.loc[end.index, column]), column
    pos = position_lag(parts)
    pos = pos[pos["group_id"].notna()].drop_duplicates(keys, keep="last").set_index(keys)
    with_position = end[end["position_lag"].notna()]
    assert len(with_position) == len(pos) > 0
    assert with_position["position_lag"].equals(pos.loc[with_position.index, "position_lag"])
    assert (with_position["position_client_id"] == pos.loc[with_position.index, "client_id"]).all()


# ---------------------------------------------------------------- position lag


def test_position_lag_at_the_response_time_is_never_negative() -> None:
    """A long poll at offset 53 waits for the Produce that writes 53-54 and delivers
    them: the consumer is caught up (the former per-request measure said lag 2 at
    -10 ms). A response delivering 53-54 while the log end is 60 leaves 5 to fetch."""
    t = 100 * S
    parts = _df([
        _produce(0, 52, 0),
        _fetch(53, 55, t, took=12 * MS, first_offset=53, last_offset=54, records=2),
        _produce(53, 54, t + 10 * MS),
        _produce(55, 59, t + 20 * MS),
        _fetch(53, 60, t + 30 * MS, took=MS, first_offset=53, last_offset=54, records=2),
        _fetch(55, 60, t + 40 * MS, took=MS),  # no records (cut by max bytes)
        _commit(60, t + S),
    ])  # fmt: skip
    pos = position_lag(parts)
    assert tuple(pos.columns) == tuple(c[0] for c in POSITION_COLUMNS)
    assert list(pos["position"]) == [55, 55, 55]
    assert list(pos["position_lag"]) == [0, 5, 5]
    # offset 55 was sent at t + 20 ms; the responses came at t + 31 and t + 41 ms
    assert list(pos["position_lag_ms"].astype(float)) == pytest.approx([0, 11, 21])
    assert list(pos["time"]) == [pd.Timestamp(t + d * MS, tz="UTC") for d in (12, 31, 41)]
    assert set(pos["group_id"]) == {"g"}  # client c commits for g
    row = _one(lag_at_end(parts))
    assert (row.position_client_id, row.position_lag) == ("c", 5)
    assert row.position_age_ms == pytest.approx(1000 + 1 - 41)


def test_rows_missing_their_keys_or_times_are_left_out() -> None:
    """What a damaged capture gives: entries without a partition index, responses whose
    request was not captured (no request time, no request fields)."""
    parts = _df([
        _produce(0, 9, 0),
        _produce(10, 19, S, partition=None),
        _commit(4, 2 * S),
        _commit(6, 3 * S, partition=None),
        _fetch(0, 30, 4 * S, partition=None, first_offset=0, last_offset=9),
        _row(api_name="OffsetFetch", request_time=None, response_time=5 * S,
             committed_offset=7),  # orphan response: no group
        _row(api_name="EndTxn", topic=None, partition=None, request_time=None,
             response_time=6 * S, txn_committed=None),
    ])  # fmt: skip
    row = _one(lag_at_end(parts))
    assert (row.committed_offset, row.log_end_offset, row.lag) == (4, 10, 6)
    assert len(committed_lag(parts)) == 1 and position_lag(parts).empty


def test_empty_input_keeps_the_columns() -> None:
    empty = table([], PARTITION_COLUMNS)
    for frame, columns in (
        (lag_at_end(empty), LAG_COLUMNS),
        (committed_lag(empty), SERIES_COLUMNS),
        (position_lag(empty), POSITION_COLUMNS),
        (log_end_events(empty), LOG_END_COLUMNS),
        (commit_events(empty), COMMIT_COLUMNS),
    ):
        assert frame.empty
        assert [(c, str(frame[c].dtype)) for c in frame.columns] == [
            (name, dtype) for name, dtype, _ in columns
        ]


# ---------------------------------------------------------------- the bundled capture


@pytest.fixture(scope="module")
def parts() -> pd.DataFrame:
    return partitions(CAPTURE)


def _broker_log_end() -> dict[str, int]:
    """Next offset per topic in the broker's own log (markers take offsets too); the
    bundled capture's topics have one partition each."""
    out: dict[str, int] = {}
    for batch in LEDGER["broker_log"]["batches"]:
        assert batch["partition"] == 0
        out[batch["topic"]] = out.get(batch["topic"], 0) + batch["count"]
    return out


def test_bundled_capture_no_negative_lag_and_commits_equal_the_log(parts: pd.DataFrame) -> None:
    end = lag_at_end(parts)
    series = committed_lag(parts)
    pos = position_lag(parts)
    assert len(end) and len(series) and len(pos)
    for frame, cols in ((end, ("lag", "time_lag_ms", "committed_age_ms", "log_end_age_ms")),
                        (series, ("lag", "time_lag_ms", "committed_age_ms", "log_end_age_ms")),
                        (pos, ("position_lag", "position_lag_ms"))):  # fmt: skip
        for col in cols:
            assert (frame[col].dropna() >= 0).all(), col
    # Every consumer here read a topic nobody wrote to any more and committed what it
    # read: its committed offset is the broker's log end, lag 0.
    log_end = _broker_log_end()
    consumers = [
        op for d in LEDGER["drivers"] for op in d["operations"]
        if op["op"] == "consume" and op["detail"].get("per_topic") and "OffsetCommit" in op["apis"]
    ]  # fmt: skip
    checked = 0
    for op in consumers:
        for topic in op["detail"]["per_topic"]:
            row = end[(end["group_id"] == op["group_id"]) & (end["topic"] == topic)]
            if all(o["finished"] < op["started"] for o in _producers(topic)):
                assert list(row["committed_offset"]) == [log_end[topic]], (op["group_id"], topic)
                assert list(row["lag"]) == [0] and list(row["time_lag_ms"]) == [0]
                checked += 1
    assert checked >= 5


def test_bundled_capture_position_lag_starts_at_the_log_end_and_ends_at_zero(
    parts: pd.DataFrame,
) -> None:
    """Each consumer read topics nobody was writing to: its first Fetch asked from 0
    with the high watermark at the broker's log end then, position lag only falls,
    and ends at 0 when it polled again."""
    pos = position_lag(parts)
    checked = 0
    for op in _consumers():
        mine = pos[pos["client_id"] == op["client_id"]]
        assert set(mine["group_id"]) == {op["group_id"]}
        for topic in op["detail"]["per_topic"]:
            series = mine[mine["topic"] == topic]
            first = series.iloc[0]
            assert first.fetch_offset == 0
            assert first.high_watermark == _log_end_before(topic, op["started"])
            assert series["position_lag"].is_monotonic_decreasing
            if len(series) > 1:
                assert series["position_lag"].iloc[-1] == 0
                assert series["position_lag_ms"].iloc[-1] == 0
            checked += 1
    assert checked >= 15


def _producers(topic: str) -> list[dict[str, Any]]:
    return [
        o for d in LEDGER["drivers"] for o in d["operations"]
        if o["topic"] == topic and "Produce" in o["apis"] and o["records"]
    ]  # fmt: skip


def test_dense_ids_rank_as_numpy_unique() -> None:
    # superseded_in_table's ids, ranked by a table over short ranges, against the sort
    # np.unique does: short and wide ranges, nulls (_NONE), several keys.
    from dissector.analytics.lag import _NONE, dense_ids

    def by_unique(*keys: Any) -> Any:
        ids = np.zeros(len(keys[0]), dtype=np.int64)
        for key in keys:
            values, inverse = np.unique(key, return_inverse=True)
            _, ids = np.unique(ids * len(values) + inverse.reshape(-1), return_inverse=True)
            ids = ids.reshape(-1)
        return ids

    rng = np.random.default_rng(7)
    kinds = [
        lambda n: rng.integers(-1, 20, n),  # dictionary codes, -1 null
        lambda n: rng.integers(0, 10**12, n),  # wide: sorted
        lambda n: np.where(rng.random(n) < 0.2, _NONE, rng.integers(0, 50, n)),
        lambda n: np.where(rng.random(n) < 0.5, _NONE, rng.integers(-(10**15), 10**15, n)),
    ]
    for _ in range(200):
        n = int(rng.integers(1, 500))
        keys = [kinds[int(rng.integers(0, 4))](n).astype(np.int64) for _ in range(3)]
        for count in (1, 2, 3):
            assert (dense_ids(*keys[:count]) == by_unique(*keys[:count])).all()
