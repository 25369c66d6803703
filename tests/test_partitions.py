"""The partition table and what is derived from it, against independent sources:
the bundled capture's ledger (what each client itself did and what the broker stored
in its log), tshark's Kafka dissector, a third-party capture's producer log, and
hand-built inputs."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dissector.analytics.partitions import (
    PARTITION_COLUMN_NAMES,
    PARTITION_COLUMNS,
    combined_totals,
    export_table,
    partition_entries,
    partitions,
    produce_to_fetch,
    table,
    throughput,
    throughput_rates,
    throughput_totals,
    throughput_totals_in_table,
)

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"
LEDGER = json.loads((REPO / "captures" / "kafka-4-mixed.drivers.json").read_text())
SHARED = REPO.parent / "shared" / "captures"
TSHARK = shutil.which("tshark")
# Wall clocks of the ledger and the capture are the same host's; a little slack for
# the time between a client's call returning and the ledger noting it.
SLACK = pd.Timedelta(milliseconds=500)


@pytest.fixture(scope="module")
def parts() -> pd.DataFrame:
    return partitions(CAPTURE)


def _ops() -> list[dict[str, Any]]:
    return [op for driver in LEDGER["drivers"] for op in driver["operations"]]


def _broker_offsets() -> dict[str, int]:
    """Next offset per topic as the broker's own log segments say (control batches
    take offsets too)."""
    out: Counter[str] = Counter()
    for batch in LEDGER["broker_log"]["batches"]:
        out[batch["topic"]] += batch["count"]
    return dict(out)


def _producers(topic: str) -> list[dict[str, Any]]:
    return [o for o in _ops() if o["topic"] == topic and "Produce" in o["apis"] and o["records"]]


def _log_end_before(topic: str, start: float) -> int:
    """The log end offset a consumer starting at ``start`` (ledger clock) finds: the
    broker log's when every producer of the topic had finished, else the records of
    the producers that had (only plain topics are written after a consumer ran)."""
    producers = _producers(topic)
    if all(o["finished"] < start for o in producers):
        return _broker_offsets()[topic]
    assert not any(
        b["transactional"] for b in LEDGER["broker_log"]["batches"] if b["topic"] == topic
    )
    return sum(o["records"] for o in producers if o["finished"] < start)


def _consumers() -> list[dict[str, Any]]:
    return [o for o in _ops() if o["op"] == "consume" and o["detail"].get("per_topic")]


def _ts(seconds: float) -> pd.Timestamp:
    return pd.Timestamp(seconds, unit="s", tz="UTC")


def _landed_produce(parts: pd.DataFrame) -> pd.DataFrame:
    p = parts[parts["api_name"] == "Produce"]
    return p[p["response_time"].notna() & p["error_code"].eq(0)]


def test_columns_and_types(parts: pd.DataFrame) -> None:
    assert tuple(parts.columns) == PARTITION_COLUMN_NAMES
    assert str(parts["request_time"].dtype) == "datetime64[ns, UTC]"
    assert set(parts["api_name"]) == {
        "Produce", "Fetch", "ShareFetch", "ShareAcknowledge", "ListOffsets", "OffsetCommit",
        "OffsetFetch", "EndTxn",
    }  # fmt: skip
    assert parts.attrs["counters"]["pairs"] == parts.groupby(["stream", "correlation_id"]).ngroups


def test_acknowledged_records_per_client_and_topic_match_the_ledger(parts: pd.DataFrame) -> None:
    expected: Counter[tuple[str, str]] = Counter()
    for op in _ops():
        if "Produce" in op["apis"] and op["records"]:
            expected[(op["client_id"], op["topic"])] += op["records"]
    produced = _landed_produce(parts)
    got = Counter()
    for row in produced.itertuples():
        got[(row.client_id, row.topic)] += row.records
    assert got == expected


def test_refused_and_unanswered_produce_are_not_landed(parts: pd.DataFrame) -> None:
    produce = parts[parts["api_name"] == "Produce"]
    raw = produce[produce["client_id"] == "mix-kp-raw-produce"]
    assert list(raw["error_name"]) == ["UNKNOWN_TOPIC_OR_PARTITION"]  # ledger: error_codes [3]
    assert raw["first_offset"].isna().all()
    too_old = produce[produce["client_id"] == "mix-kp-too-old"]
    assert too_old["response_time"].isna().all() and list(too_old["records"]) == [1]


def test_produce_offsets_tile_the_broker_log(parts: pd.DataFrame) -> None:
    """Batches written per topic, in base-offset order, follow each other; the broker
    log's control batches (transaction markers) are the only gaps."""
    markers = Counter(b["topic"] for b in LEDGER["broker_log"]["batches"] if b["control"])
    produced = _landed_produce(parts).sort_values("first_offset")
    for topic, rows in produced.groupby("topic"):
        spans = list(zip(rows["first_offset"], rows["last_offset"], strict=True))
        gaps = sum(b[0] - a[1] - 1 for a, b in itertools.pairwise(spans))
        assert spans[0][0] == 0
        trailing = _broker_offsets()[topic] - 1 - spans[-1][1]
        assert gaps + trailing == markers[topic], topic


def test_last_commit_and_high_watermark_equal_the_broker_log(parts: pd.DataFrame) -> None:
    commits = parts[(parts["api_name"] == "OffsetCommit") & parts["error_code"].eq(0)]
    fetches = parts[parts["api_name"] == "Fetch"]
    checked = 0
    for op in _consumers():
        mine = commits[commits["group_id"] == op["group_id"]].sort_values("request_time")
        last = mine.groupby("topic")["committed_offset"].last()
        hw = fetches[fetches["client_id"] == op["client_id"]].groupby("topic")["high_watermark"]
        for topic in op["detail"]["per_topic"]:
            end = _log_end_before(topic, op["started"])
            assert hw.max()[topic] == end, (op["client_id"], topic)
            if op["detail"].get("committed_partitions") or "OffsetCommit" in op["apis"]:
                assert last[topic] == end, (op["group_id"], topic)
                checked += 1
    assert checked >= 10


def test_produce_to_fetch_matches_every_consumed_batch(parts: pd.DataFrame) -> None:
    p2f = produce_to_fetch(parts)
    produced = _landed_produce(parts)
    ops_by_client = defaultdict(list)
    for op in _ops():
        ops_by_client[op["client_id"]].append(op)
    checked = 0
    for op in _consumers():
        for topic in op["detail"]["per_topic"]:
            before = {o["client_id"] for o in _producers(topic) if o["finished"] < op["started"]}
            batches = produced[(produced["topic"] == topic) & produced["client_id"].isin(before)]
            mine = p2f[(p2f["consumer_client_id"] == op["client_id"]) & (p2f["topic"] == topic)]
            assert sorted(mine["offset"]) == sorted(batches["first_offset"]), topic
            for row in mine.itertuples():
                producer_op = next(
                    o for o in ops_by_client[row.producer_client_id] if o["topic"] == topic
                )
                assert _ts(producer_op["started"]) - SLACK <= row.produce_time
                assert row.produce_time <= _ts(producer_op["finished"]) + SLACK
                assert _ts(op["started"]) - SLACK <= row.fetch_time
                assert row.fetch_time <= _ts(op["finished"]) + SLACK
                assert row.latency_ms > 0
                checked += 1
    assert checked >= 15
    # The share consumer is matched through the records it acquired.
    share = p2f[p2f["consumer_client_id"] == "mix-java-share-consumer"]
    assert list(share["records"]) == [10]


def test_throughput_totals_are_the_ledger_and_rates_follow_the_span(parts: pd.DataFrame) -> None:
    out = throughput(parts)
    produced = out[out["role"] == "produce"].set_index("topic")
    expected: Counter[str] = Counter()
    for op in _ops():
        if "Produce" in op["apis"] and op["records"]:
            expected[op["topic"]] += op["records"]
    assert produced["records"].to_dict() == dict(expected)
    span = (produced["last_time"] - produced["first_time"]).dt.total_seconds()
    multi = produced[span > 0]
    assert len(multi) >= 2
    ratio = multi["records"] / span[span > 0]
    assert (multi["records_per_s"].astype(float) - ratio).abs().max() < 1e-9
    assert produced.loc[span == 0, "records_per_s"].isna().all()


def _row(**kw: Any) -> dict[str, Any]:
    base = {"capture": "c", "stream": 1, "topic": "t", "partition": 0, "error_code": 0}
    return base | kw


def test_throughput_hand_built_windows() -> None:
    t0 = 1_700_000_000 * 10**9
    rows = [
        _row(api_name="Produce", request_time=t0, response_time=t0 + 1, records=10,
             record_bytes=100, acks=-1),
        _row(api_name="Produce", request_time=t0 + 2 * 10**9, response_time=None, records=30,
             record_bytes=300, acks=0),
        # refused: not counted
        _row(api_name="Produce", request_time=t0 + 10**9, response_time=t0 + 10**9 + 5,
             records=99, record_bytes=999, acks=-1, error_code=3),
        # asked for acks but never answered: not counted
        _row(api_name="Produce", request_time=t0 + 10**9, response_time=None, records=7,
             record_bytes=70, acks=1),
        _row(api_name="Fetch", request_time=t0, response_time=t0 + 5 * 10**8, records=40,
             record_bytes=400),
    ]  # fmt: skip
    df = table(rows, PARTITION_COLUMNS)
    whole = throughput(df).set_index("role")
    assert whole.loc["produce", "records"] == 40
    assert whole.loc["produce", "records_per_s"] == pytest.approx(20.0)
    assert whole.loc["produce", "bytes_per_s"] == pytest.approx(200.0)
    assert pd.isna(whole.loc["fetch", "records_per_s"])  # one response: no span
    binned = throughput(df, window="1s")
    prod = binned[binned["role"] == "produce"].sort_values("window_start")
    assert list(prod["records"]) == [10, 30]
    assert list(prod["records_per_s"].astype(float)) == [10.0, 30.0]


@pytest.mark.parametrize("window", [None, "1s"])
def test_throughput_of_chunks_added_up_equals_the_whole(window: str | None) -> None:
    """The report reads a long capture's table a chunk at a time: the totals of any split
    of the rows, added up, give the whole table's throughput."""
    parts = partitions(REPO / "captures" / "kafka-4-longpoll-rotation.pcapng")
    whole = throughput(parts, window)
    for cuts in ([700], [1, 2, 500, 501, 1999], list(range(0, len(parts), 97))):
        chunks = [parts.iloc[a:b] for a, b in itertools.pairwise([0, *cuts, len(parts)])]
        totals = combined_totals([throughput_totals(c, window) for c in chunks], window)
        pd.testing.assert_frame_equal(throughput_rates(totals, window), whole)
    assert len(whole) > 5 and whole["pairs"].sum() > 1000


@pytest.mark.parametrize("chunk_rows", [65_536, 97])
def test_throughput_totals_in_arrow_equal_the_frame_function(
    chunk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report aggregates the core's Arrow table (``throughput_totals_in_table``, a
    chunk of rows at a time): the totals ``throughput_totals`` gives for the pandas frame
    of the same table, on real captures (one alone, two read in a row: chunks with
    dictionaries of their own, the shared ones when present)."""
    from dissector.analytics import partitions as module
    from dissector.options import Options
    from dissector.wire.core import capture_tables

    monkeypatch.setattr(module, "TOTALS_CHUNK_ROWS", chunk_rows)  # 97: totals of many chunks
    sources: list[Any] = [REPO / "captures" / "kafka-4-longpoll-rotation.pcapng"]
    sources.append([CAPTURE, REPO / "captures" / "kafka-4-lag.pcapng"])
    if SHARED.is_dir():
        sources += sorted(SHARED.glob("*.pcap*"))
    pairs = 0
    for source in sources:
        tables = capture_tables(source, Options())
        expected = throughput_totals(tables.frame("partitions"))
        got = throughput_totals_in_table(tables.partitions)
        expected = expected.astype({"capture": "string", "topic": "string", "role": "object"})
        pd.testing.assert_frame_equal(got, expected.reset_index(drop=True), check_dtype=False)
        assert list(got.dtypes) == list(expected.dtypes), source
        pairs += int(got["pairs"].sum())
    assert pairs > 1000


def _deliveries_by_definition(parts: pd.DataFrame) -> list[tuple[Any, ...]]:
    """produce_to_fetch's rows straight from its definition, by brute force: for each
    produced batch and each client fetching its partition, the earliest response at
    or after the batch's produce request whose delivered range holds its first offset."""
    produced = parts[(parts["api_name"] == "Produce") & parts["first_offset"].notna()]
    fetched = parts[parts["api_name"].isin(["Fetch", "ShareFetch"]) & parts["first_offset"].notna()]
    out = []
    for b in produced.itertuples():
        same = fetched[
            (fetched["capture"] == b.capture)
            & (fetched["topic"] == b.topic)
            & (fetched["partition"] == b.partition)
        ]
        for client, mine in same.groupby("client_id", dropna=False):
            holds = mine[
                (mine["first_offset"] <= b.first_offset)
                & (mine["last_offset"] >= b.first_offset)
                & (mine["response_time"] >= b.request_time)
            ]
            if len(holds):
                at = holds["response_time"].min()
                out.append((b.topic, b.partition, b.first_offset, b.client_id, client, at))
    return sorted(out)


@pytest.mark.parametrize(
    "name", ["kafka-4-mixed.pcapng", "kafka-4-lag.pcapng", "kafka-4-longpoll-rotation.pcapng"]
)
def test_produce_to_fetch_equals_its_definition_by_brute_force(name: str) -> None:
    parts = partitions(REPO / "captures" / name)
    p2f = produce_to_fetch(parts)
    ours = sorted(
        zip(p2f["topic"], p2f["partition"], p2f["offset"], p2f["producer_client_id"],
            p2f["consumer_client_id"], p2f["fetch_time"], strict=True)
    )  # fmt: skip
    assert ours == _deliveries_by_definition(parts) and len(ours) > 20
    waited = (p2f["fetch_time"] - p2f["produce_time"]).dt.total_seconds() * 1000
    assert (p2f["latency_ms"].astype(float) == waited).all() and (waited >= 0).all()


def test_produce_to_fetch_first_delivery_per_client_hand_built() -> None:
    """A client that reads a batch again (a seek back) counts its first delivery only;
    another client counts its own; a response timed before a batch's produce request
    (clocks of merged captures) does not deliver it, a later one does."""
    s = 10**9
    rows = [
        _row(api_name="Produce", client_id="p", request_time=2 * s, response_time=2 * s + 1,
             records=5, first_offset=0, last_offset=4, acks=-1),
        _row(api_name="Produce", client_id="p", request_time=2 * s, response_time=2 * s + 1,
             records=5, first_offset=5, last_offset=9, acks=-1),
        _row(api_name="Fetch", client_id="c", request_time=1 * s, response_time=1 * s + 1,
             first_offset=5, last_offset=9, records=5),  # before the produce: skewed
        _row(api_name="Fetch", client_id="c", request_time=3 * s, response_time=3 * s,
             first_offset=0, last_offset=9, records=10),
        _row(api_name="Fetch", client_id="c", request_time=5 * s, response_time=5 * s,
             first_offset=0, last_offset=9, records=10),  # read again
        _row(api_name="Fetch", client_id="d", request_time=4 * s, response_time=4 * s,
             first_offset=5, last_offset=9, records=5),
    ]  # fmt: skip
    df = table(rows, PARTITION_COLUMNS)
    p2f = produce_to_fetch(df)
    latency = p2f["latency_ms"].astype(float)
    got = list(zip(p2f["consumer_client_id"], p2f["offset"], latency, strict=True))
    assert got == [("c", 0, 1000.0), ("c", 5, 1000.0), ("d", 5, 2000.0)]
    assert len(_deliveries_by_definition(df)) == 3


def test_produce_to_fetch_latency_hand_built() -> None:
    s = 10**9
    rows = [
        _row(api_name="Produce", client_id="p", request_time=0, response_time=1, records=5,
             first_offset=0, last_offset=4, acks=-1),
        _row(api_name="Produce", client_id="p", request_time=2 * s, response_time=2 * s + 1,
             records=5, first_offset=5, last_offset=9, acks=-1),
        _row(api_name="OffsetCommit", client_id="c", group_id="g", request_time=9 * s,
             committed_offset=10),
        # consumer reads 0-4 at 3 s (hw 10), 5-9 at 4 s, then is caught up
        _row(api_name="Fetch", client_id="c", request_time=3 * s, response_time=3 * s + 10,
             fetch_offset=0, high_watermark=10, first_offset=0, last_offset=4, records=5),
        _row(api_name="Fetch", client_id="c", request_time=4 * s, response_time=4 * s + 20,
             fetch_offset=5, high_watermark=10, first_offset=5, last_offset=9, records=5),
        _row(api_name="Fetch", client_id="c", request_time=5 * s, response_time=6 * s,
             fetch_offset=10, high_watermark=10, records=0),
    ]  # fmt: skip
    df = table(rows, PARTITION_COLUMNS)
    p2f = produce_to_fetch(df)
    assert list(p2f["offset"]) == [0, 5]
    assert list(p2f["latency_ms"].astype(float)) == pytest.approx([3000.0 + 1e-5, 2000.0 + 2e-5])


def test_partition_entries_generic_and_hostile() -> None:
    body = {
        "group_id": "g",
        "topics": [
            {"name": "a", "partition_indexes": [0, 1]},
            {"topic_id": "id-b", "partitions": [{"partition": 3, "fetch_offset": 7}]},
            {"name": "c", "partitions": [{"no_index": 1}, "junk", None]},
        ],
        "forgotten_topics_data": [{"topic_id": "id-b", "partitions": [9]}],
        "groups": [{"group_id": "h", "topics": [{"name": "d", "partitions": [{"index": 2}]}]}],
    }
    got = [(c.get("group_id"), t, p) for c, t, p, _ in partition_entries(body)]
    assert got == [
        ("g", ("a", None), 0),
        ("g", ("a", None), 1),
        ("g", (None, "id-b"), 3),
        ("g", ("c", None), None),  # counted by partitions(): entries_without_partition
        ("h", ("d", None), 2),
    ]
    # nesting deeper than any Kafka body is cut off, not followed
    deep: dict[str, Any] = {"x": []}
    node = deep
    for _ in range(10_000):
        child: dict[str, Any] = {"x": []}
        node["x"].append(child)
        node = child
    node["x"].append({"name": "z", "partitions": [0]})
    assert list(partition_entries(deep)) == []
    for junk in (None, [], "text", {"topics": "x"}, {"topics": [1, 2, {"name": 5}]}):
        assert list(partition_entries(junk)) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".jsonl"])
def test_export_round_trip(parts: pd.DataFrame, tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"p{ext}"
    export_table(parts, out)
    if ext == ".parquet":
        back = pd.read_parquet(out)
        assert list(back.columns) == list(PARTITION_COLUMN_NAMES)
        assert back["committed_offset"].sum() == parts["committed_offset"].sum()
    elif ext == ".csv":
        back = pd.read_csv(out)
        assert len(back) == len(parts)
    else:
        lines = out.read_text().splitlines()
        assert len(lines) == len(parts)
        assert json.loads(lines[0])["api_name"] == parts["api_name"].iloc[0]


def test_empty_input_keeps_the_columns() -> None:
    df = table([], PARTITION_COLUMNS)
    assert tuple(df.columns) == PARTITION_COLUMN_NAMES and df.empty
    assert produce_to_fetch(df).empty and throughput(df).empty


# ----------------------------------------------------------------- tshark


def _tshark(fields: list[str], display_filter: str) -> list[list[str]]:
    cmd = [TSHARK, "-r", str(CAPTURE), "-d", "tcp.port==9094,kafka", "-Y", display_filter,
           "-T", "fields", "-E", "separator=\t", "-E", "aggregator=|"]  # fmt: skip
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def _split(cell: str) -> list[str]:
    return cell.split("|") if cell else []


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_committed_offsets_equal_tsharks(parts: pd.DataFrame) -> None:
    rows = _tshark(
        ["tcp.stream", "kafka.correlation_id", "kafka.topic_name", "kafka.partition_id",
         "kafka.offset"],
        "kafka.request_key == 8 && !kafka.unsupported_api_version",
    )  # fmt: skip
    assert rows
    commits = parts[parts["api_name"] == "OffsetCommit"]
    for stream, corr, topics, pids, offsets in rows:
        theirs = sorted(
            zip(_split(topics), map(int, _split(pids)), map(int, _split(offsets)), strict=True)
        )
        mine = commits[
            (commits["stream"] == int(stream)) & (commits["correlation_id"] == int(corr))
        ]
        ours = sorted(zip(mine["topic"], mine["partition"], mine["committed_offset"], strict=True))
        assert ours == theirs


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_produce_base_offsets_equal_tsharks(parts: pd.DataFrame) -> None:
    rows = _tshark(
        ["tcp.stream", "kafka.correlation_id", "kafka.topic_name", "kafka.partition_id",
         "kafka.offset", "kafka.log_start_offset"],
        "kafka.response_key == 0 && !kafka.unsupported_api_version && kafka.offset",
    )  # fmt: skip
    assert len(rows) >= 5
    produce = parts[parts["api_name"] == "Produce"]
    for stream, corr, topics, pids, offsets, starts in rows:
        mine = produce[
            (produce["stream"] == int(stream)) & (produce["correlation_id"] == int(corr))
        ]
        ours = sorted(zip(mine["topic"], mine["partition"], mine["base_offset"], strict=True))
        theirs = sorted(
            zip(_split(topics), map(int, _split(pids)), map(int, _split(offsets)), strict=True)
        )
        assert ours == theirs
        if starts:
            assert sorted(mine["log_start_offset"]) == sorted(map(int, _split(starts)))


# ----------------------------------------------------------------- shared captures


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared captures not present")
def test_tansu_capture_produced_records_match_the_producer_log() -> None:
    df = partitions(SHARED / "local-tansu-confluent-kafka.pcapng")
    produced = throughput(df)
    produced = produced[produced["role"] == "produce"]
    assert produced["records"].sum() == 1000  # README: the producer's log says 1000 delivered
    # README: 16 Produce v10 requests, 7 Fetch, 4 OffsetCommit, 2 OffsetFetch, 10 ListOffsets
    pairs = df.groupby("api_name")[["stream", "correlation_id"]].apply(
        lambda g: len(g.drop_duplicates())
    )
    assert pairs.to_dict() == {
        "Produce": 16, "Fetch": 7, "OffsetCommit": 4, "OffsetFetch": 2, "ListOffsets": 10,
    }  # fmt: skip


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared captures not present")
def test_every_shared_capture_gives_a_table() -> None:
    for path in sorted(SHARED.glob("*.pcap*")):
        df = partitions(path)
        assert tuple(df.columns) == PARTITION_COLUMN_NAMES, path.name
        assert df["partition"].notna().all() or df.attrs["counters"].get(
            "entries_without_partition"
        ), path.name


def test_public_api_is_callable_after_the_module_is_imported() -> None:
    import dissector

    df = dissector.partitions(CAPTURE, ports=[9092])  # the SASL port left out
    assert len(df) and "mix-sasl" not in set(df["topic"])
