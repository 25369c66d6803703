"""dissector.analytics.stats on real captures, checked against independent computations.

Expected values come from numpy/plain Python over the raw columns, from the
counts in ../shared/captures/README.md (an independent decoder) and from Apache
Kafka release facts; never from stats' own output.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dissector
from dissector.analytics import stats
from dissector.table.frame import records_to_frame
from tests.oracle.rows import PairRecord
from tests.shared_readme import EXPECTED

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"
SHARED = REPO.parent / "shared" / "captures"
TANSU = SHARED / "local-tansu-confluent-kafka.pcapng"
NDPI = SHARED / "ndpi-kafka.pcapng"


def _analyze(path: Path) -> pd.DataFrame:
    if not path.is_file():
        pytest.skip(f"capture not present: {path.name} (bundled capture or ../shared/captures)")
    return dissector.analyze(path)


@pytest.fixture(scope="module", params=["bundled", "tansu", "ndpi"])
def real(request: pytest.FixtureRequest) -> pd.DataFrame:
    path = {"bundled": BUNDLED, "tansu": TANSU, "ndpi": NDPI}[request.param]
    return _analyze(path)


@pytest.fixture(scope="module")
def tansu() -> pd.DataFrame:
    return _analyze(TANSU)


def _event_ns(df: pd.DataFrame) -> list[int]:
    out = []
    for req, resp in zip(df["request_time"], df["response_time"], strict=True):
        t = req if not pd.isna(req) else resp
        if not pd.isna(t):
            out.append(int(t.value))
    return out


def _name(value: object, status: object, missing: str) -> object:
    """A missing API name or client id: an orphan response's request is not captured."""
    if not pd.isna(value):
        return value
    return "orphan response (request not captured)" if status == "orphan_response" else missing


def _api_rows(df: pd.DataFrame, name: str, version: object) -> pd.DataFrame:
    keep = [
        _name(n, s, stats.UNKNOWN_API_LABEL) == name
        and ((pd.isna(v) and pd.isna(version)) or (not pd.isna(v) and v == version))
        for n, v, s in zip(df["api_name"], df["api_version"], df["status"], strict=True)
    ]
    return df[keep]


def _floats(values: pd.Series) -> list[float]:
    return [float(v) for v in values if not pd.isna(v)]


# -- breakdown per API ------------------------------------------------------------


def test_per_api_counts_match_value_counts(real: pd.DataFrame) -> None:
    table = stats.per_api(real)
    expected = Counter(
        (_name(name, s, stats.UNKNOWN_API_LABEL), None if pd.isna(v) else int(v))
        for name, v, s in zip(real["api_name"], real["api_version"], real["status"], strict=True)
    )
    got = {
        (row.api_name, None if pd.isna(row.api_version) else int(row.api_version)): row.count
        for row in table.itertuples()
    }
    assert got == dict(expected)
    assert table["count"].sum() == len(real)
    assert list(table["count"]) == sorted(table["count"], reverse=True)


def test_per_api_latency_percentiles_equal_numpy(real: pd.DataFrame) -> None:
    table = stats.per_api(real)
    checked = 0
    for row in table.itertuples():
        lat = np.array(_floats(_api_rows(real, row.api_name, row.api_version)["latency_ms"]))
        if len(lat) == 0:
            assert math.isnan(row.p99_ms)
            continue
        assert row.p50_ms == pytest.approx(np.percentile(lat, 50), rel=1e-12)
        assert row.p90_ms == pytest.approx(np.percentile(lat, 90), rel=1e-12)
        assert row.p99_ms == pytest.approx(np.percentile(lat, 99), rel=1e-12)
        assert row.max_ms == pytest.approx(lat.max(), rel=1e-12)
        checked += 1
    assert checked > 0


def test_per_api_bytes_errors_and_rate(real: pd.DataFrame) -> None:
    table = stats.per_api(real)
    times = _event_ns(real)
    span = (max(times) - min(times)) / 1e9
    for row in table.itertuples():
        rows = _api_rows(real, row.api_name, row.api_version)
        assert row.bytes_in == sum(int(v) for v in rows["request_size"] if not pd.isna(v))
        assert row.bytes_out == sum(int(v) for v in rows["response_size"] if not pd.isna(v))
        errors = sum(s in ("error", "malformed") for s in rows["status"])
        assert row.errors == errors
        assert row.error_rate == pytest.approx(errors / len(rows))
        assert row.unanswered == sum(s == "unanswered" for s in rows["status"])
        assert row.throttled == sum(1 for t in rows["throttle_ms"] if not pd.isna(t) and t > 0)
        assert row.rate_per_s == pytest.approx(len(rows) / span, rel=1e-9)


def test_overall_latency_summary_equals_numpy(real: pd.DataFrame) -> None:
    lat = np.array(_floats(real["latency_ms"]))
    summary = stats.latency_summary(real)
    assert summary["p99_ms"] == pytest.approx(np.percentile(lat, 99), rel=1e-12)
    assert summary["max_ms"] == pytest.approx(lat.max())


# -- other dimensions -------------------------------------------------------------


def test_per_client_and_broker_partition_all_rows(real: pd.DataFrame) -> None:
    clients = stats.per_client(real)
    expected = Counter(
        _name(c, s, stats.MISSING_LABEL)
        for c, s in zip(real["client_id"], real["status"], strict=True)
    )
    assert dict(zip(clients["client_id"], clients["count"], strict=True)) == dict(expected)
    brokers = stats.per_broker(real)
    expected_brokers = Counter(
        f"{ip}:{port}" for ip, port in zip(real["broker_ip"], real["broker_port"], strict=True)
    )
    assert dict(zip(brokers["broker"], brokers["count"], strict=True)) == dict(expected_brokers)
    assert brokers["bytes_in"].sum() == sum(int(v) for v in real["request_size"].dropna())


def test_per_topic_counts_each_topic_of_a_pair(real: pd.DataFrame) -> None:
    expected: Counter[str] = Counter()
    for topics in real["topics"]:
        expected.update({str(t) for t in (topics if topics is not None else [])})
    table = stats.per_topic(real)
    assert dict(zip(table["topic"], table["count"], strict=True)) == dict(expected)


def test_throttled_counts_per_client() -> None:
    t0 = 1_700_000_000_000_000_000
    recs = [
        PairRecord(capture="x", stream=0, client_ip="10.0.0.1", client_port=1, broker_ip="b",
                   broker_port=9092, request_time=t0 + i, response_time=t0 + i + 5,
                   latency_ms=0.1, first_byte_ms=0.1, api_key=0, api_name="Produce",
                   api_version=9, correlation_id=i, client_id=client, request_size=10,
                   response_size=10, status="ok", throttle_ms=throttle)
        for i, (client, throttle) in enumerate([("a", 0), ("a", 250), ("b", None), ("a", 7)])
    ]  # fmt: skip
    table = stats.per_client(records_to_frame(recs))
    assert dict(zip(table["client_id"], table["throttled"], strict=True)) == {"a": 2, "b": 0}


def test_tansu_breakdown_matches_independent_counts(tansu: pd.DataFrame) -> None:
    # ../shared/captures/README.md, from an independent decoder.
    readme = EXPECTED["local-tansu-confluent-kafka.pcapng"][1]
    table = stats.per_api(tansu)
    got = {(r.api_name, int(r.api_version)): r.count for r in table.itertuples()}
    assert got == readme
    produce = table[table["api_name"] == "Produce"].iloc[0]
    assert produce["records"] == 1000  # the producer's log: 1000 delivered


@pytest.fixture(scope="module")
def bundled() -> pd.DataFrame:
    return _analyze(BUNDLED)


# captures/README.md, "What tshark 4.0.17 sees": request counts per API key (complete).
BUNDLED_TSHARK_REQUESTS = {
    0: 25,
    1: 13,
    2: 15,
    3: 83,
    8: 5,
    9: 12,
    10: 31,
    11: 11,
    12: 2,
    13: 5,
    14: 6,
    15: 2,
    16: 2,
    17: 11,
    18: 100,
    19: 5,
    20: 2,
    21: 1,
    22: 11,
    24: 13,
    26: 4,
    27: 4,
    29: 1,
    30: 1,
    31: 1,
    32: 2,
    35: 1,
    36: 18,
    37: 2,
    42: 1,
    44: 1,
    47: 1,
    50: 1,
    55: 1,
    60: 4,
    66: 1,
    68: 3,
    69: 2,
    75: 4,
    76: 3,
    77: 4,
    78: 1,
    79: 1,
    83: 1,
    84: 1,
    85: 1,
    86: 1,
    87: 2,
    90: 2,
    91: 1,
    92: 1,
}


def test_bundled_per_api_matches_tshark_request_counts(bundled: pd.DataFrame) -> None:
    table = stats.per_api(bundled)
    by_key: Counter[int] = Counter()
    names = dict(zip(bundled["api_name"], bundled["api_key"], strict=True))
    for row in table.itertuples():
        if row.api_name in names and not pd.isna(names[row.api_name]):
            by_key[int(names[row.api_name])] += row.count
    assert dict(by_key) == BUNDLED_TSHARK_REQUESTS


def test_bundled_group_activity_matches_tshark(bundled: pd.DataFrame) -> None:
    summary = stats.group_activity_summary(bundled)
    got = dict(zip(summary["activity"], summary["calls"], strict=True))
    assert got == {
        "join": 11,
        "sync": 6,
        "heartbeat": 2,
        "leave": 5,
        "offset commit": 5,
        "offset fetch": 12,
        "find coordinator": 31,
        "consumer-group heartbeat": 3,
        "share-group heartbeat": 3,
        "share fetch": 1,
        "share acknowledge": 1,
    }
    protocols = set(summary["protocol"])
    assert {"share group (KIP-932)", "consumer group (KIP-848)"} <= protocols


def test_bundled_errors_include_the_provoked_ones(bundled: pd.DataFrame) -> None:
    top = stats.top_errors(bundled, 100)
    # captures/README.md: errors the clients provoked and saw themselves.
    provoked = {
        ("TOPIC_ALREADY_EXISTS", "CreateTopics"),
        ("SASL_AUTHENTICATION_FAILED", "SaslAuthenticate"),
        ("UNKNOWN_TOPIC_OR_PARTITION", "Metadata"),
        ("OFFSET_OUT_OF_RANGE", "Fetch"),
        ("UNKNOWN_TOPIC_OR_PARTITION", "Produce"),
        ("UNSUPPORTED_VERSION", "ApiVersions"),
    }
    seen = {(row.error, api) for row in top.itertuples() for api in row.apis.split(", ")}
    assert provoked <= seen
    sasl = top[top["error"] == "SASL_AUTHENTICATION_FAILED"]["count"].iloc[0]
    assert sasl >= 2


def test_bundled_facts(bundled: pd.DataFrame) -> None:
    facts = stats.capture_facts(bundled)
    assert facts.connections == 100  # tshark: 100 TCP connections
    assert facts.brokers == ("127.0.0.1:9092", "127.0.0.1:9094")
    # The broker is Apache Kafka 4.4.0: the floor from what it accepted must not be
    # newer, and ShareFetch v2 (accepted here) first shipped in 4.2.
    # "newer than 4.3" (it answered ApiVersions v5, new in 4.4) is also consistent.
    assert facts.kafka_floor is not None
    floor = tuple(int(p) for p in facts.kafka_floor.removeprefix("newer than ").split("."))
    assert (4, 2) <= floor <= ((4, 3) if facts.kafka_floor.startswith("newer") else (4, 4))
    # One broker process behind both listeners: each listener's floor is consistent
    # with Kafka 4.4.0 on its own.
    assert set(facts.kafka_floors) == {"127.0.0.1:9092", "127.0.0.1:9094"}
    for floor_text in facts.kafka_floors.values():
        assert floor_text is not None
        release = tuple(int(p) for p in floor_text.removeprefix("newer than ").split("."))
        assert release <= ((4, 3) if floor_text.startswith("newer") else (4, 4))
    # The unanswered Produce v2 of kafka-python (Kafka 4 dropped v0-v2).
    missing = stats.unanswered(bundled)
    assert ("Produce", 2) in set(zip(missing["api_name"], missing["api_version"], strict=True))


# -- time series ------------------------------------------------------------------


def test_timeseries_buckets_equal_counter_of_seconds(real: pd.DataFrame) -> None:
    times = _event_ns(real)
    width = stats.auto_bucket_seconds((max(times) - min(times)) / 1e9)
    ts = stats.timeseries(real)
    assert ts.attrs["bucket_s"] == width
    expected = Counter(t // (width * 1_000_000_000) * width for t in times)
    got = {int(ts_index.value // 1_000_000_000): n for ts_index, n in ts["requests"].items()}
    assert {k: v for k, v in got.items() if v} == dict(expected)
    # Every bucket between first and last is present, empty ones as zero.
    assert len(ts) == (max(expected) - min(expected)) // width + 1
    assert ts["bytes_in"].sum() == sum(int(v) for v in real["request_size"].dropna())
    assert (ts["requests_per_s"] == ts["requests"] / width).all()


def test_per_second_series_of_a_months_long_capture_is_refused() -> None:
    df = _analyze(NDPI)  # merges captures from April and December 2023
    with pytest.raises(ValueError, match="wider buckets"):
        stats.timeseries(df, 1)
    assert len(stats.timeseries(df)) <= 600


def test_timeseries_wider_buckets_keep_totals(real: pd.DataFrame) -> None:
    ts = stats.timeseries(real, 86400)
    assert ts["requests"].sum() == len(_event_ns(real))
    assert (ts["requests_per_s"] == ts["requests"] / 86400).all()
    by_api = stats.timeseries_by(real, "api_name", 86400)
    assert int(by_api.to_numpy().sum()) == len(_event_ns(real))


def test_auto_bucket_keeps_chart_size_bounded() -> None:
    assert stats.auto_bucket_seconds(7.0) == 1
    assert stats.auto_bucket_seconds(3600.0) == 10
    assert stats.auto_bucket_seconds(86400.0 * 30) * 600 >= 86400 * 30


# -- errors, slow, unanswered -----------------------------------------------------


def test_top_errors_equal_counter(real: pd.DataFrame) -> None:
    expected = Counter(
        (name if not pd.isna(name) else status)
        for name, status in zip(real["error_name"], real["status"], strict=True)
        if status in ("error", "malformed")
    )
    top = stats.top_errors(real, 50)
    assert dict(zip(top["error"], top["count"], strict=True)) == dict(expected)


def test_slowest_is_sorted_and_starts_at_max(real: pd.DataFrame) -> None:
    slow = stats.slowest(real, 5)
    lat = _floats(real["latency_ms"])
    assert len(slow) == min(5, len(lat))
    assert list(slow["latency_ms"]) == sorted(lat, reverse=True)[: len(slow)]


def test_ndpi_unanswered_and_orphans() -> None:
    df = _analyze(NDPI)
    # README: 3 requests without response, 3 responses without request.
    missing = stats.unanswered(df)
    assert len(missing) == 3
    assert set(missing["status"]) == {"unanswered"}
    assert missing["latency_ms"].isna().all()
    # Orphan responses have no request_time: their time comes from the response.
    orphans = df[df["status"] == "orphan_response"]
    assert len(orphans) == 3
    assert stats.timeseries(df)["requests"].sum() == len(df)


# -- group activity ---------------------------------------------------------------


def test_tansu_group_activity_counts(tansu: pd.DataFrame) -> None:
    summary = stats.group_activity_summary(tansu)
    got = dict(zip(summary["activity"], summary["calls"], strict=True))
    # README counts: JoinGroup x2, SyncGroup x1, Heartbeat x1, LeaveGroup x1,
    # OffsetCommit x4, OffsetFetch x2, FindCoordinator x3.
    assert got == {
        "join": 2,
        "sync": 1,
        "heartbeat": 1,
        "leave": 1,
        "offset commit": 4,
        "offset fetch": 2,
        "find coordinator": 3,
    }
    series = stats.group_activity(tansu, 1)
    assert int(series.drop(columns=[stats.REBALANCE_LABEL]).to_numpy().sum()) == 14
    # The series spans the whole capture, like the other time series.
    assert len(series) == len(stats.timeseries(tansu, 1))


def test_share_group_and_rebalance_signals() -> None:
    base = dict(
        capture="x",
        client_ip="10.0.0.1",
        client_port=5000,
        broker_ip="10.0.0.2",
        broker_port=9092,
        latency_ms=1.0,
        first_byte_ms=1.0,
        correlation_id=1,
        client_id="c",
        request_size=10,
        response_size=20,
    )
    t0 = 1_700_000_000_000_000_000
    recs = [
        PairRecord(
            stream=0,
            request_time=t0,
            response_time=t0 + 10**6,
            api_key=76,
            api_name="ShareGroupHeartbeat",
            api_version=1,
            status="ok",
            **base,
        ),
        PairRecord(
            stream=0,
            request_time=t0 + 2 * 10**9,
            response_time=t0 + 2 * 10**9 + 1,
            api_key=12,
            api_name="Heartbeat",
            api_version=4,
            status="error",
            error_code=27,
            error_name="REBALANCE_IN_PROGRESS",
            **base,
        ),
        PairRecord(
            stream=0,
            request_time=t0 + 2 * 10**9 + 5,
            response_time=t0 + 3 * 10**9,
            api_key=11,
            api_name="JoinGroup",
            api_version=9,
            status="ok",
            **base,
        ),
    ]
    df = records_to_frame(recs)
    series = stats.group_activity(df, 1)
    assert list(series.columns) == [
        "join",
        "heartbeat",
        "share-group heartbeat",
        stats.REBALANCE_LABEL,
    ]
    assert series["share-group heartbeat"].tolist() == [1, 0, 0]
    assert series[stats.REBALANCE_LABEL].tolist() == [0, 0, 1]
    assert series["join"].tolist() == [0, 0, 1]


# -- capture facts ----------------------------------------------------------------


def test_tansu_capture_facts(tansu: pd.DataFrame) -> None:
    facts = stats.capture_facts(tansu)
    assert facts.connections == 13  # README: 13 streams
    assert facts.brokers == ("127.0.0.1:9092",)
    assert facts.rows == 84
    assert "Fetch v16" in facts.api_versions
    times = _event_ns(tansu)
    assert facts.span_s == pytest.approx((max(times) - min(times)) / 1e9, abs=1e-6)
    # Fetch v16 (KIP-951) and ConsumerGroupDescribe v0 (KIP-848) first shipped in
    # Apache Kafka 3.7 and 3.8 respectively: the floor is the later one.
    assert facts.kafka_floor == "3.8"
    assert facts.kafka_floors == {"127.0.0.1:9092": "3.8"}


@pytest.mark.parametrize(
    ("seen", "floor"),
    [
        ([(0, 3)], "0.11"),  # Produce v3: message format v2 (KIP-98), Kafka 0.11
        ([(0, 3), (18, 3)], "2.4"),  # ApiVersions v3: flexible, KIP-511, Kafka 2.4
        ([(0, 99)], "newer than"),
        ([(71, 0)], None),  # telemetry keys are not in the release table
        ([], None),
    ],
)
def test_kafka_release_floor(seen: list[tuple[int, int]], floor: str | None) -> None:
    got = stats.kafka_release_floor(seen)
    if floor == "newer than":
        assert got is not None and got.startswith("newer than")
    else:
        assert got == floor


# -- degenerate input -------------------------------------------------------------


def test_empty_frame_gives_empty_tables() -> None:
    df = records_to_frame([])
    for by in stats.GROUP_KEYS:
        table = stats.breakdown(df, by)
        assert table.empty and "p99_ms" in table.columns
    assert stats.timeseries(df).empty
    assert stats.top_errors(df).empty
    assert stats.slowest(df).empty
    assert stats.unanswered(df).empty
    assert stats.group_activity(df).empty
    facts = stats.capture_facts(df)
    assert facts.rows == 0 and facts.first is None and facts.kafka_floor is None
    assert math.isnan(stats.latency_summary(df)["p99_ms"])


def test_unknown_breakdown_is_a_clear_error(tansu: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="unknown breakdown"):
        stats.breakdown(tansu, "partition")


def test_metric_definitions_are_plain_data() -> None:
    # The Spark job imports these: only str/float/int/tuple/dict, no pandas.
    def plain(value: object) -> bool:
        if isinstance(value, str | int | float):
            return True
        if isinstance(value, tuple):
            return all(plain(v) for v in value)
        if isinstance(value, dict):
            return all(plain(k) and plain(v) for k, v in value.items())
        return False

    for name in (
        "ERROR_STATUSES",
        "UNANSWERED_STATUSES",
        "PERCENTILES",
        "GROUP_KEYS",
        "GROUP_ACTIVITY",
        "REBALANCE_ERROR_NAMES",
        "BYTES_IN_COLUMN",
        "BYTES_OUT_COLUMN",
        "EVENT_TIME_COLUMNS",
        "METRIC_DOCS",
    ):
        assert plain(getattr(stats, name)), name
    assert set(stats.ERROR_STATUSES) | set(stats.UNANSWERED_STATUSES) <= set(
        dissector.schema.STATUSES
    )


def test_describe_kafka_floor_reads_as_a_sentence() -> None:
    assert stats.describe_kafka_floor("3.8").startswith("broker is Apache Kafka 3.8 or newer")
    assert stats.describe_kafka_floor("newer than 4.3").startswith(
        "broker is newer than Apache Kafka 4.3"
    )
    assert "not enough" in stats.describe_kafka_floor(None)
    assert stats.describe_kafka_floor("2.4", "broker b:1").startswith("broker b:1 is Apache")


# -- the same definitions in Spark SQL --------------------------------------------

_SPARK_SCHEMA = (
    "api_name string, api_version int, status string, latency_ms double, "
    "request_size long, response_size long, records long, throttle_ms long, "
    "request_time timestamp, response_time timestamp"
)


def _plain(value: object) -> object:
    if value is None or (not isinstance(value, list) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    return value.item() if hasattr(value, "item") else value


@pytest.mark.spark
def test_sql_definitions_give_the_same_numbers_in_spark(bundled: pd.DataFrame, spark: Any) -> None:
    columns = [c.split()[0] for c in _SPARK_SCHEMA.split(", ")]
    rows = [tuple(_plain(v) for v in r) for r in bundled[columns].itertuples(index=False)]
    spark.createDataFrame(rows, _SPARK_SCHEMA).createOrReplaceTempView("pairs")
    aggs = ", ".join(f"{expr} AS {name}" for name, expr in stats.SQL_AGGREGATES.items())
    got = {
        (r["api_name"], r["api_version"]): r.asDict()
        for r in spark.sql(
            f"SELECT api_name, api_version, {aggs} FROM pairs GROUP BY api_name, api_version"
        ).collect()
    }
    event = stats.SQL_COLUMNS["event_time"]
    first, last = spark.sql(f"SELECT min({event}), max({event}) FROM pairs").first()
    table = stats.per_api(bundled)
    assert len(got) == len(table)
    for row in table.itertuples():
        orphan = row.api_name == stats.ORPHAN_LABEL
        name = None if row.api_name == stats.UNKNOWN_API_LABEL or orphan else row.api_name
        version = None if pd.isna(row.api_version) else int(row.api_version)
        other = got[(name, version)]
        for col in ("count", "errors", "unanswered", "bytes_in", "bytes_out", "records",
                    "throttled"):  # fmt: skip
            assert other[col] == getattr(row, col), (name, version, col)
        for col in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
            mine = getattr(row, col)
            if other[col] is None:
                assert math.isnan(mine)
            else:
                assert other[col] == pytest.approx(mine, rel=1e-9, abs=1e-9), (name, col)
    assert (last - first).total_seconds() == pytest.approx(stats.span_seconds(bundled), abs=1e-5)


# -- long polls and head-of-line queueing -------------------------------------------

MS = 1_000_000  # ns


def _pair(stream: int, sent_ms: float | None, answered_ms: float | None, **kw: Any) -> PairRecord:
    t0 = 1_700_000_000_000_000_000
    sent = None if sent_ms is None else t0 + round(sent_ms * MS)
    answered = None if answered_ms is None else t0 + round(answered_ms * MS)
    latency = None if sent is None or answered is None else (answered - sent) / MS
    status = "ok" if sent is not None and answered is not None else "unanswered"
    if sent is None:
        status = "orphan_response"
    base: dict[str, Any] = dict(
        capture="hand.pcap", stream=stream, client_ip="10.0.0.1", client_port=40000 + stream,
        broker_ip="10.0.0.2", broker_port=9092, request_time=sent, response_time=answered,
        latency_ms=latency, first_byte_ms=latency, api_key=3, api_name="Metadata",
        api_version=12, correlation_id=None, client_id="c", request_size=40,
        response_size=None if answered is None else 80, status=status,
    )  # fmt: skip
    base.update(kw)
    return PairRecord(**base)


def _fetch(latency_ms: float, **kw: Any) -> PairRecord:
    return _pair(0, 0.0, latency_ms, api_key=1, api_name="Fetch", api_version=16, **kw)


def test_fetch_wait_without_max_wait_falls_back_to_empty_answers() -> None:
    df = records_to_frame(
        [
            _fetch(500.0, records=0, record_bytes=0),  # empty: a poll that waited
            _fetch(2.0, records=None, record_bytes=None),  # empty, no batches at all
            _fetch(30.0, records=12, record_bytes=900),  # data
            _fetch(3.0, records=0, status="error", error_code=1, error_name="OFFSET_OUT_OF_RANGE"),
            _pair(0, 0.0, 700.0),  # not a fetch: never a long poll
            _pair(0, 0.0, None, api_key=1, api_name="Fetch"),  # unanswered: no class
            _pair(0, 0.0, 400.0, api_key=78, api_name="ShareFetch", records=0),
        ]
    )
    got = stats.service_latency(df)
    assert list(got["fetch_wait"].astype("object").fillna("-")) == [
        "empty_poll", "empty_poll", "data", "early", "-", "-", "empty_poll",
    ]  # fmt: skip
    # The wait of an empty poll is unknown without max_wait_ms: left out, not guessed.
    service = got["service_ms"].tolist()
    assert math.isnan(service[0]) and math.isnan(service[1]) and math.isnan(service[6])
    assert service[2:4] == pytest.approx([30.0, 3.0]) and service[4] == pytest.approx(700.0)
    headline = stats.service_summary(df)
    assert headline["max_ms"] == pytest.approx(700.0)
    assert headline["p50_ms"] == pytest.approx(float(np.percentile([30.0, 3.0, 700.0], 50)))
    polls = stats.long_poll_summary(df)
    assert polls["polls"] == 3 and polls["max_ms"] == pytest.approx(500.0)


def test_fetch_wait_uses_max_wait_when_the_frame_has_it() -> None:
    df = records_to_frame(
        [
            _fetch(503.0, records=0, max_wait_ms=500),  # waited out its 500 ms
            _fetch(451.0, records=0, max_wait_ms=500),  # 90.2% of 500: ended on its timer
            _fetch(120.0, records=0, max_wait_ms=500),  # empty but early: something ended it
            _fetch(510.0, records=4, max_wait_ms=500),  # data after waiting: the latency
            _fetch(40.0, records=0),  # max_wait unknown for this one: fallback rule
            _fetch(8.0, records=0, max_wait_ms=0),  # max_wait 0: no wait to subtract
        ]
    )
    got = stats.service_latency(df)
    assert list(got["fetch_wait"]) == ["empty_poll", "empty_poll", "early", "data",
                                       "empty_poll", "empty_poll"]  # fmt: skip
    service = got["service_ms"].tolist()
    assert service[:4] == pytest.approx([3.0, 0.0, 120.0, 510.0])
    assert math.isnan(service[4]) and math.isnan(service[5])
    assert stats.long_poll_summary(df)["polls"] == 4


def test_queueing_on_hand_built_connections() -> None:
    df = records_to_frame(
        [
            # Connection 0: three pipelined requests, answered in order.
            _pair(0, 0.0, 5.0),
            _pair(0, 1.0, 6.0),
            _pair(0, 2.0, 7.0),
            _pair(0, 20.0, 21.0),  # sent after everything was answered
            # Connection 1: a throttled response mutes the connection for 10 ms more.
            _pair(1, 0.0, 5.0, throttle_ms=10),
            _pair(1, 6.0, 16.0),
            # Connection 2: a response to a request sent before the capture began.
            _pair(2, None, 3.0),
            _pair(2, 1.0, 4.0),
            # Connection 3: acks=0 expects nothing; an unanswered request stays in flight.
            _pair(3, 0.0, None, status="no_response"),
            _pair(3, 1.0, None),
            _pair(3, 2.0, 3.0),
            _pair(3, 10.0, 11.0),
        ]
    )
    # Rows in a shuffled order: the result follows the rows, not their order.
    shuffled = df.sample(frac=1.0, random_state=7)
    got = stats.queueing(shuffled).loc[df.index]
    assert got["queue_ms"].tolist()[:6] == pytest.approx([0.0, 4.0, 4.0, 0.0, 0.0, 9.0])
    assert math.isnan(got["queue_ms"].iloc[6])
    assert got["queue_ms"].tolist()[7:] == pytest.approx([2.0, 0.0, 0.0, 0.0, 0.0])
    assert got["inflight"].tolist() == [0, 1, 2, 0, 0, 0, pd.NA, 1, 0, 0, 1, 1]
    per_client = stats.queueing_per_client(df).set_index("client_id").loc["c"]
    assert per_client["connections"] == 4 and per_client["requests"] == 11
    assert per_client["pipelined"] == 5 and per_client["max_inflight"] == 2
    assert per_client["queued"] == 4
    assert per_client["queue_total_ms"] == pytest.approx(4 + 4 + 9 + 2)


def _queueing_by_definition(df: pd.DataFrame) -> tuple[list[float], list[object]]:
    """QUEUEING_RULE, straight from the raw columns: every earlier row of the same
    connection, compared pairwise (quadratic, fine for a few hundred rows)."""
    rows = list(df.itertuples(index=False))
    queue: list[float] = []
    inflight: list[object] = []
    for me in rows:
        if pd.isna(me.request_time):
            queue.append(math.nan)
            inflight.append(pd.NA)
            continue
        ends, open_ = [], 0
        for other in rows:
            if (other.capture, other.stream) != (me.capture, me.stream) or other is me:
                continue
            earlier = pd.isna(other.request_time) or (other.request_time, other.correlation_id) < (
                me.request_time,
                me.correlation_id,
            )
            if not earlier:
                continue
            if pd.isna(other.response_time):
                open_ += other.status != "no_response"
                continue
            throttle = 0 if pd.isna(other.throttle_ms) else max(int(other.throttle_ms), 0)
            ends.append(other.response_time + pd.Timedelta(milliseconds=throttle))
            open_ += other.response_time > me.request_time
        wait = max(ends, default=me.request_time) - me.request_time
        queue.append(max(wait.total_seconds() * 1000, 0.0))
        inflight.append(open_)
    return queue, inflight


def test_queueing_on_the_bundled_capture_matches_the_definition(bundled: pd.DataFrame) -> None:
    got = stats.queueing(bundled)
    queue, inflight = _queueing_by_definition(bundled)
    assert got["queue_ms"].tolist() == pytest.approx(queue, abs=1e-3, nan_ok=True)
    assert got["inflight"].tolist() == inflight
    # The capture has pipelining (librdkafka sends while waiting) and head-of-line waits.
    assert max(inflight) >= 2 and max(queue) > 100
    # Without throttling, a request never waits longer than its own latency: responses
    # on a connection come back in request order.
    answered = bundled["latency_ms"].notna().to_numpy() & (
        bundled["throttle_ms"].fillna(0).to_numpy() == 0
    )
    lat = bundled["latency_ms"].astype("float64").to_numpy()
    assert (got["queue_ms"].to_numpy()[answered] <= lat[answered] + 1e-6).all()


# -- rates, time series of the report's panels ----------------------------------------


def test_rate_unit_follows_the_capture_rate() -> None:
    def frame(n: int, every_s: float) -> pd.DataFrame:
        return records_to_frame(
            [
                _pair(0, i * every_s * 1000, i * every_s * 1000 + 1, correlation_id=i)
                for i in range(n)
            ]
        )

    assert stats.rate_unit(frame(50, 0.1)) == (1.0, "per s")  # ~10 per second
    assert stats.rate_unit(frame(10, 30.0)) == (60.0, "per min")  # 2 per minute
    assert stats.rate_unit(frame(5, 3600.0)) == (3600.0, "per h")  # 1 per hour


def test_panel_series_on_hand_built_rows() -> None:
    rows = [
        _pair(0, 0.0, 10.0, correlation_id=1),
        _pair(0, 100.0, 130.0, correlation_id=2, status="error", error_code=15,
              error_name="COORDINATOR_NOT_AVAILABLE"),
        _pair(1, 1500.0, 1502.0, correlation_id=1, throttle_ms=250),
        _pair(1, 2500.0, 2501.0, correlation_id=2, status="error", error_code=15,
              error_name="COORDINATOR_NOT_AVAILABLE"),
        _pair(2, 2600.0, 2610.0, correlation_id=1, broker_ip="10.0.0.3", status="malformed"),
        _pair(2, 2700.0, 3200.0, correlation_id=2, broker_ip="10.0.0.3", api_key=1,
              api_name="Fetch", api_version=16, records=0),  # an empty long poll
    ]  # fmt: skip
    df = records_to_frame(rows)
    errors = stats.error_timeseries(df, 1)
    assert errors.attrs["bucket_s"] == 1 and len(errors) == 3
    assert list(errors.columns) == ["COORDINATOR_NOT_AVAILABLE", "malformed"]
    assert errors["COORDINATOR_NOT_AVAILABLE"].tolist() == [1, 0, 1]
    assert errors["malformed"].tolist() == [0, 0, 1]
    throttle = stats.throttle_timeseries(df, 1)
    assert throttle["throttled"].tolist() == [0, 1, 0]
    assert throttle["max_throttle_ms"].tolist() == [0.0, 250.0, 0.0]
    churn = stats.connection_timeseries(df, 1)
    assert churn["opened"].tolist() == [1, 1, 1] and churn["closed"].tolist() == [1, 0, 2]
    assert churn["active"].tolist() == [1, 1, 2]
    series = stats.latency_timeseries(df, "broker", 1)
    # The empty poll's wait is not service time: the second broker's last bucket has
    # only the malformed pair's 10 ms.
    start = series["time"].min()
    by_key = {
        (int((t - start).total_seconds()), k): (n, p50)
        for t, k, n, p50 in series[["time", "key", "count", "p50_ms"]].itertuples(index=False)
    }
    assert by_key[(2, "10.0.0.3:9092")] == (1, pytest.approx(10.0))
    assert by_key[(0, "10.0.0.2:9092")] == (2, pytest.approx(20.0))
    matrix = stats.latency_matrix(df, "count")
    assert matrix.loc["Metadata", "10.0.0.2:9092"] == 4
    assert matrix.loc["Metadata", "10.0.0.3:9092"] == 1
    assert "Fetch" not in matrix.index  # only a long poll: no service time


def test_captures_far_apart_get_their_own_timeline() -> None:
    near = records_to_frame(
        [_pair(0, 0.0, 1.0, capture="a.pcap"), _pair(0, 5000.0, 5001.0, capture="b.pcap")]
    )
    assert stats.timeline_capture(near) is None
    year_ms = 365 * 86_400_000.0
    far = records_to_frame(
        [
            _pair(0, 0.0, 1.0, capture="old.pcap"),
            _pair(0, year_ms, year_ms + 1, capture="new.pcap"),
            _pair(0, year_ms + 10, year_ms + 11, capture="new.pcap", correlation_id=2),
        ]
    )
    assert stats.timeline_capture(far) == "new.pcap"
    table = stats.per_capture(far)
    assert table["capture"].tolist() == ["old.pcap", "new.pcap"]
    assert table["rows"].tolist() == [1, 2]


def test_cli_summary_percentiles_are_service_time_and_polls_are_counted() -> None:
    """The CLI table's p50/p99 leave out long-poll waits (stats.SERVICE_LATENCY_RULE);
    the empty polls get their own column. Expected values worked out by hand."""
    from dissector.analytics.summary_table import api_summary
    from dissector.table.frame import records_to_frame
    from tests.oracle.rows import PairRecord

    def fetch(latency: float, records: int | None) -> PairRecord:
        return PairRecord(
            capture="c", stream=1, client_ip="127.0.0.1", client_port=1, broker_ip="127.0.0.1",
            broker_port=9092, request_time=1, response_time=2, latency_ms=latency,
            first_byte_ms=latency, api_key=1, api_name="Fetch", api_version=16,
            correlation_id=1, client_id="c", request_size=10, response_size=10, status="ok",
            records=records, max_wait_ms=500,
        )  # fmt: skip

    # two empty polls that waited out max_wait (500 ms) and two fetches with data
    rows = [fetch(501.0, 0), fetch(503.0, None), fetch(2.0, 5), fetch(4.0, 7)]
    summary = api_summary(records_to_frame(rows)).iloc[0]
    assert summary["long_polls"] == 2
    service = [1.0, 3.0, 2.0, 4.0]  # empty polls: latency - max_wait
    assert summary["p50_ms"] == pytest.approx(float(np.percentile(service, 50)))
    assert summary["p99_ms"] == pytest.approx(float(np.percentile(service, 99)))


def test_status_words_of_the_core_are_the_schemas() -> None:
    """One vocabulary: every status the native core writes is a ``schema.Status`` and
    every ``schema.Status`` is one the core can write."""
    from dissector import _core

    assert _core.status_words() == list(dissector.schema.STATUSES)


def test_connection_churn_counts_each_capture_and_stream_once() -> None:
    """``connection_timeseries`` tells connections apart by codes of capture and stream:
    the counts of grouping the rows by the two as text (the definition), on two real
    captures read together (the same stream numbers recur in both) and on the rows of
    one of them with its capture name and some stream numbers missing."""
    lag = REPO / "captures" / "kafka-4-lag.pcapng"
    both = dissector.analyze([BUNDLED, lag])
    assert both["capture"].nunique() == 2
    assert set(both.loc[both["capture"].astype(str).str.endswith("lag.pcapng"), "stream"]) & set(
        both.loc[both["capture"].astype(str).str.endswith("mixed.pcapng"), "stream"]
    )
    holes = both.copy()
    holes["capture"] = holes["capture"].astype("object").where(holes.index % 7 != 0)
    holes["stream"] = holes["stream"].astype("Int64").where(holes.index % 11 != 0)
    for df in (both, holes):
        got = stats.connection_timeseries(df, 1)
        frame, _ = stats._bucketed(df, 1)
        text = pd.DataFrame(
            {
                "capture": df.loc[frame.index, "capture"].astype("object").fillna(""),
                "stream": df.loc[frame.index, "stream"].astype("object"),
                "bucket": frame["bucket"],
            }
        )
        spans = text.groupby(["capture", "stream"], dropna=False)["bucket"].agg(["min", "max"])
        assert got["opened"].tolist() == (
            spans["min"].value_counts().reindex(got.index, fill_value=0).tolist()
        )
        assert got["closed"].tolist() == (
            spans["max"].value_counts().reindex(got.index, fill_value=0).tolist()
        )
        assert int(got["opened"].sum()) == len(spans) > 2
