"""The report's sections, in page order: each from the pairs frame (and the
analytics tables in its ``attrs``), built of ``derived`` tables, charts and facts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from markupsafe import Markup

from dissector import schema
from dissector.analytics import charts, series, stats
from dissector.analytics.no_kafka import no_kafka
from dissector.analytics.report.derived import (
    P2F_INPUTS,
    by_service_time,
    capture_ends,
    capture_names,
    carrying,
    errors_by_code_and_api,
    fetch_wait_table,
    hot_connections,
    known_max_wait,
    partition_throughput,
    produce_to_fetch_summary,
    release_memory,
    table_lag,
    throttling,
    timeline_rows,
    unanswered_by_api,
    version_skew,
)
from dissector.analytics.report.formatting import (
    Column,
    breakdown_metrics,
    capture_column,
    fmt_bytes,
    fmt_capture,
    fmt_duration,
    fmt_int,
    fmt_ms,
    fmt_pct,
    fmt_rate,
    fmt_text,
    fmt_time,
    frame_table,
    listed,
    pair_columns,
    pair_table,
    service_pair_columns,
    service_pair_table,
    time_format,
)
from dissector.analytics.report.model import (
    CLIENT_SOFTWARE_ATTR,
    FILTER_ATTR,
    GROUPS_ATTR,
    PER_API_ROW_LIMIT,
    SECTION_IDS,
    SLOWEST_N,
    TROUBLE_ROWS,
    VERSION_ROW_LIMIT,
    Card,
    Chart,
    Folded,
    Section,
    TableBlock,
    analytics_tables,
)

if TYPE_CHECKING:
    import pandas as pd


def chart(chart_id: str, df: pd.DataFrame, caption: str) -> Chart:
    title, draw = charts.CHARTS[chart_id]
    return Chart(id=chart_id, title=title, svg=Markup(draw(df)), caption=caption)


def _overview(df: pd.DataFrame) -> Section:
    lat = stats.service_summary(df)
    polls = stats.long_poll_summary(df)
    errors = int(df["status"].isin(stats.ERROR_STATUSES).sum())
    missing = int(df["status"].isin(stats.UNANSWERED_STATUSES).sum())
    lost = int(df["status"].isin(schema.LOST_STATUSES).sum())
    rate = errors / len(df) if len(df) else math.nan
    poll_label = "empty long polls"
    if polls["polls"]:
        poll_label += f" (p50 {fmt_ms(polls['p50_ms'])} ms)"
    return Section(
        id="overview",
        title="Overview",
        intro="Headline latency is service latency: Fetch/ShareFetch long-poll waits are left "
        "out and counted on their own (see Latency).",
        cards=(
            Card("rows (pairs)", fmt_int(len(df))),
            Card("span", fmt_duration(stats.span_seconds(df))),
            Card("errors", f"{errors:,} ({fmt_pct(rate)})", "bad" if errors else ""),
            Card("unanswered", fmt_int(missing), "warn" if missing else ""),
            *([Card("responses lost (capture holes)", fmt_int(lost), "warn")] if lost else []),
            Card("p50 service latency", f"{fmt_ms(lat['p50_ms'])} ms"),
            Card("p99 service latency", f"{fmt_ms(lat['p99_ms'])} ms"),
            Card(poll_label, fmt_int(polls["polls"])),
            Card("bytes in", fmt_bytes(stats.as_float(df[stats.BYTES_IN_COLUMN]).sum())),
            Card("bytes out", fmt_bytes(stats.as_float(df[stats.BYTES_OUT_COLUMN]).sum())),
        ),
    )


def _connections_text(df: pd.DataFrame, facts: stats.CaptureFacts) -> str:
    counters = df.attrs.get("counters") or {}
    streams = counters.get("tcp_streams")
    if streams is None:
        return fmt_int(facts.connections)
    return f"{fmt_int(streams)} ({fmt_int(facts.connections)} with Kafka pairs)"


def _tls_text(streams: Sequence[int]) -> str:
    count = len(streams)
    plural = "s" if count != 1 else ""
    return f"{count} connection{plural} (tcp.stream {', '.join(map(str, streams))})"


def _capture(df: pd.DataFrame, facts: stats.CaptureFacts) -> Section:
    counters = df.attrs.get("counters") or {}
    tls = df.attrs.get("tls_streams") or []
    rows: list[tuple[str, str | Folded]] = [
        ("capture files", ", ".join(capture_names(df)) or "–"),
        ("first packet", fmt_time(facts.first)),
        ("last packet", fmt_time(facts.last)),
        ("span", fmt_duration(facts.span_s)),
        ("rows by status", ", ".join(f"{k} {v:,}" for k, v in facts.statuses.items()) or "–"),
        ("TCP connections", _connections_text(df, facts)),
        (f"brokers ({len(facts.brokers)})", ", ".join(facts.brokers) or "–"),
        (f"client hosts ({len(facts.client_ips)})", listed(facts.client_ips)),
        (f"client ids ({len(facts.client_ids)})", listed(facts.client_ids)),
        ("Kafka version", _kafka_versions_text(facts)),
        ("client software", _software_text(df)),
        (f"API versions seen ({len(facts.api_versions)})", listed(facts.api_versions)),
        ("versions newer than the specs", _newer_versions_text(df)),
    ]
    filtered = _filter_text(df)
    if filtered:
        rows.insert(1, ("filter", filtered))
    sets_text = _capture_sets_text(df)
    if sets_text:
        rows.append(("capture sets", sets_text))
    from dissector.analytics.summary_table import tls_lines

    decrypted = tls_lines(df.attrs.get("tls") or [])
    if decrypted:
        rows.append(("TLS connections", "; ".join(decrypted)))
    if tls:
        rows.append(("TLS (not decoded)", _tls_text(tls)))
    if counters:
        rows.append(("stage counters", listed([f"{k} {v:,}" for k, v in counters.items()])))
    alone = stats.timeline_capture(df)
    if alone is not None:
        rows.append(("time charts", _timeline_note(alone)))
    blocks: tuple[TableBlock, ...] = ()
    if len(facts.captures) > 1:
        blocks = (
            frame_table(
                "captures",
                "Per capture file",
                stats.per_capture(df),
                (
                    ("capture", "capture", fmt_capture, False),
                    ("first", "first (UTC)", fmt_time, False),
                    ("last", "last (UTC)", fmt_time, False),
                    ("span_s", "span", lambda v: fmt_duration(float(v)), False),  # type: ignore[arg-type]
                    ("rows", "rows", fmt_int, True),
                    ("connections", "connections", fmt_int, True),
                ),
            ),
        )
    return Section(id="capture", title="Capture", facts=tuple(rows), blocks=blocks)


def _capture_sets_text(df: pd.DataFrame) -> str:
    """The files read as one continuous capture (rows carry the first file's name)."""
    from dissector.table.analysis import CAPTURE_SETS_ATTR

    parts = []
    for entry in df.attrs.get(CAPTURE_SETS_ATTR) or []:
        files = entry["files"]
        if len(files) > 1:
            parts.append(
                f"{Path(entry['capture']).name}: {len(files)} files read as one capture "
                f"({Path(files[0]).name} to {Path(files[-1]).name})"
            )
    return "; ".join(parts)


def _timeline_note(capture: str) -> str:
    return (
        f"the captures lie far apart in time, so charts over time show {Path(capture).name} "
        "alone (the one with most rows); tables and totals cover every capture"
    )


def _kafka_versions_text(facts: stats.CaptureFacts) -> str:
    if len(facts.kafka_floors) <= 1:
        return stats.describe_kafka_floor(facts.kafka_floor)
    return "; ".join(
        stats.describe_kafka_floor(floor, f"broker {broker}")
        for broker, floor in facts.kafka_floors.items()
    )


def _newer_versions_text(df: pd.DataFrame) -> str:
    """Which API versions the specs do not know, and how their pairs were decoded
    (``messages.ASSUMED_VERSION_RULE``); the full view per connection is
    ``dissector.versions``."""
    from dissector.analytics.summary_table import assumed_rows, refused_rows, unsupported_rows

    if df.empty:
        return "none"
    undecoded, assumed, refused = unsupported_rows(df), assumed_rows(df), refused_rows(df)
    newer = df.assign(_undecoded=undecoded, _assumed=assumed, _refused=refused)[
        undecoded | assumed | refused
    ]
    if newer.empty:
        return "none"
    parts = []
    keys = ["api_name", "api_version"]
    for (name, version), g in newer.groupby(keys, sort=True, observed=True):
        how = []
        if int(g["_undecoded"].sum()):
            how.append(f"{int(g['_undecoded'].sum()):,} not decoded")
        if int(g["_refused"].sum()):
            how.append(f"{int(g['_refused'].sum()):,} refused by the broker too")
        if int(g["_assumed"].sum()):
            layout = int(g["assumed_version"].dropna().iloc[0])
            how.append(f"{int(g['_assumed'].sum()):,} decoded as v{layout}")
        parts.append(f"{name} v{int(version)} ({', '.join(how)})")
    return "; ".join(parts)


def _software_text(df: pd.DataFrame) -> str:
    software = df.attrs.get(CLIENT_SOFTWARE_ATTR)
    if software is None:
        return "not collected (use kafka-dissector report or report.analyze)"
    if not software:
        return "no client named its software (ApiVersions v3+ requests carry it)"
    parts = []
    for name, clients in software.items():
        plural = "s" if len(clients) != 1 else ""
        parts.append(f"{name} ({len(clients)} client id{plural})")
    return ", ".join(parts)


def _latency(df: pd.DataFrame) -> Section:
    table = stats.per_api(df)
    timeline = timeline_rows(df)
    return Section(
        id="latency",
        title="Latency per API",
        intro="Latency is from the packet completing a request to the packet completing its "
        "response, as seen where the capture was taken. " + stats.SERVICE_LATENCY_RULE,
        blocks=(
            frame_table(
                "fetch-wait",
                "Fetch and ShareFetch: long polls apart from service",
                fetch_wait_table(df),
                (
                    ("fetch_wait", "fetch_wait", fmt_text, False),
                    ("count", "pairs", fmt_int, True),
                    ("p50_ms", "p50 latency ms", fmt_ms, True),
                    ("p99_ms", "p99 latency ms", fmt_ms, True),
                    ("service_p50_ms", "p50 service ms", fmt_ms, True),
                    ("service_p99_ms", "p99 service ms", fmt_ms, True),
                ),
                empty="No answered Fetch or ShareFetch.",
                note="max_wait_ms known for "
                f"{known_max_wait(df)} of them; without it an empty poll's service time is "
                "unknown and it is left out of headline percentiles.",
            ),
            chart(
                "latency-cdf",
                df,
                "Cumulative share of requests answered within a latency, per API (busiest "
                f"{_n_series()}). Where a curve crosses the p99 line is that API's p99.",
            ),
            chart(
                "latency-time",
                timeline,
                "Every answered request at its time. Coloured: the busiest and the slowest "
                "APIs (by p99 service latency); red rings: errors; hollow: empty long polls.",
            ),
            chart(
                "latency-percentiles",
                timeline,
                "Service latency (long-poll waits left out) per time bucket: p99 solid, p50 "
                "dotted; per API (the busiest and slowest) and per broker.",
            ),
            chart(
                "broker-api",
                df,
                "p99 service latency of each API on each broker (busiest APIs first); blank: "
                "that broker answered none.",
            ),
            frame_table(
                "per-api",
                "Per API and version",
                table,
                (
                    ("api_name", "API", fmt_text, False),
                    ("api_version", "v", fmt_int, True),
                    *breakdown_metrics(df),
                ),
                limit=PER_API_ROW_LIMIT,
                note="Latency percentiles here are raw (long polls included): compare Fetch "
                "with the table above.",
            ),
        ),
    )


def _n_series() -> int:
    return series.MAX_SERIES


def _queueing(df: pd.DataFrame) -> Section:
    return Section(
        id="queueing",
        title="Pipelining and head-of-line queueing",
        intro=stats.QUEUEING_RULE,
        blocks=(
            frame_table(
                "queueing",
                "Per client",
                stats.queueing_per_client(df),
                (
                    ("client_id", "client id", fmt_text, False),
                    ("connections", "connections", fmt_int, True),
                    ("requests", "requests", fmt_int, True),
                    ("pipelined", "sent with others in flight", fmt_int, True),
                    ("mean_inflight", "mean in flight", lambda v: f"{float(v):.2f}", True),  # type: ignore[arg-type]
                    ("max_inflight", "max in flight", fmt_int, True),
                    ("queued", "queued", fmt_int, True),
                    ("queue_total_ms", "queue total ms", fmt_ms, True),
                    ("queue_p99_ms", "queue p99 ms", fmt_ms, True),
                    ("queue_max_ms", "queue max ms", fmt_ms, True),
                ),
                empty="No requests.",
                note="A request's latency includes its queue time: subtract queue_ms for the "
                "broker's own time.",
            ),
        ),
    )


def _traffic(df: pd.DataFrame) -> Section:
    timeline = timeline_rows(df)
    _, per = series.rate_unit(df)
    return Section(
        id="traffic",
        title="Traffic over time",
        blocks=(
            chart(
                "traffic",
                timeline,
                f"Requests {per} stacked by API, and wire bytes {per}: in = requests "
                "(client to broker), out = responses (broker to client).",
            ),
            chart(
                "throttle",
                timeline,
                "Responses whose throttle_time_ms was above 0 (a broker quota delayed the "
                "client), and the longest throttle asked in each bucket.",
            ),
            chart(
                "connections",
                timeline,
                "Connections by the first and last Kafka message seen on each (a connection "
                "open before the capture started counts from its first message), and how many "
                "were active.",
            ),
        ),
    )


def _errors(df: pd.DataFrame) -> Section:
    top = stats.top_errors(df, 25)
    return Section(
        id="errors",
        title="Errors",
        intro=f"Error rows: status {' or '.join(stats.ERROR_STATUSES)} (a non-zero Kafka error "
        "code anywhere in the response, or a message that could not be decoded).",
        blocks=(
            chart("errors", df, "Rows per status, and the most frequent errors by API."),
            chart(
                "error-timeline",
                timeline_rows(df),
                f"Error rows per time bucket by error code (the {series.MAX_ERROR_SERIES} most "
                "frequent; the legend gives each one's total).",
            ),
            frame_table(
                "top-errors",
                "Top errors",
                top,
                (
                    ("error", "error", fmt_text, False),
                    ("count", "rows", fmt_int, True),
                    ("share", "share of rows", fmt_pct, True),
                    ("apis", "APIs", fmt_text, False),
                    ("client_ids", "client ids", fmt_text, False),
                    ("first_seen", "first (UTC)", time_format(df), False),
                    ("last_seen", "last (UTC)", time_format(df), False),
                ),
                empty="No errors in this capture.",
            ),
        ),
    )


def _slowest(df: pd.DataFrame) -> Section:
    return Section(
        id="slowest",
        title="Slowest requests",
        intro="Ranked by service time: latency less the time a Fetch/ShareFetch long poll "
        "waited on the broker for data (an empty long poll's long latency is the wait it "
        "asked for, not slowness; its status says long poll). Find a pair in Wireshark with "
        "tcp.stream == stream and kafka.correlation_id == corr id.",
        blocks=(
            frame_table(
                "slowest",
                f"The {SLOWEST_N} slowest request/response pairs by service time",
                service_pair_table(by_service_time(df, SLOWEST_N)),
                service_pair_columns(df),
                empty="No answered requests.",
                css="pairs",
            ),
        ),
    )


def _trouble(df: pd.DataFrame) -> Section:
    """What needs a look first, each part ranked worst first (at most ``TROUBLE_ROWS``)."""
    errors = errors_by_code_and_api(df)
    missing = unanswered_by_api(df)
    throttled = throttling(df)
    slow = by_service_time(df, TROUBLE_ROWS)
    hot = hot_connections(df)
    when = time_format(df)
    n_errors, n_missing = int(errors["count"].sum()), int(missing["count"].sum())
    n_throttled = int(throttled["count"].sum())
    said = [
        f"{n_errors:,} error rows"
        + (f" ({len(errors)} kinds by error and API)" if n_errors else ""),
        f"{n_missing:,} requests unanswered",
        f"{n_throttled:,} responses throttled by a quota",
        f"{len(hot):,} connections with head-of-line queueing",
    ]
    if not slow.empty:
        top = slow.iloc[0]
        said.append(
            f"the slowest service time {fmt_ms(top['service_ms'])} ms ({fmt_text(top['api_name'])})"
        )
    blocks: list[TableBlock] = []
    if n_errors:
        blocks.append(
            frame_table(
                "trouble-errors",
                "Errors by code and API",
                errors,
                (
                    ("error", "error", fmt_text, False),
                    ("api", "API", fmt_text, False),
                    ("count", "rows", fmt_int, True),
                    ("clients", "client ids", fmt_text, False),
                    ("first", "first (UTC)", when, False),
                    ("last", "last (UTC)", when, False),
                ),
                limit=TROUBLE_ROWS,
                note="Every error row: section Errors.",
            )
        )
    if n_missing:
        blocks.append(
            frame_table(
                "trouble-unanswered",
                "Unanswered requests by API",
                missing,
                (
                    ("api", "API", fmt_text, False),
                    ("count", "requests", fmt_int, True),
                    ("clients", "client ids", fmt_text, False),
                ),
                limit=TROUBLE_ROWS,
                note="Each of them: section Unanswered requests.",
            )
        )
    if n_throttled:
        blocks.append(
            frame_table(
                "trouble-throttled",
                "Throttled responses by client and API",
                throttled,
                (
                    ("client", "client id", fmt_text, False),
                    ("api", "API", fmt_text, False),
                    ("count", "responses", fmt_int, True),
                    ("max_ms", "max throttle ms", fmt_ms, True),
                    ("total_ms", "total throttle ms", fmt_ms, True),
                ),
                limit=TROUBLE_ROWS,
            )
        )
    if not slow.empty:
        blocks.append(
            frame_table(
                "trouble-slowest",
                f"The {TROUBLE_ROWS} slowest by service time",
                service_pair_table(slow),
                service_pair_columns(df),
                css="pairs",
                note="Long polls are ranked by their service time, not by the wait they asked "
                "for; more in section Slowest requests.",
            )
        )
    if not hot.empty:
        several = len(set(df["capture"].dropna().unique().astype(str))) > 1
        capture: tuple[Column, ...] = (
            (("capture", "capture", fmt_capture, False),) if several else ()
        )
        blocks.append(
            frame_table(
                "trouble-connections",
                "Hot connections: requests queued behind others",
                hot,
                (
                    *capture,
                    ("stream", "tcp.stream", fmt_int, True),
                    ("client", "client id", fmt_text, False),
                    ("broker", "broker", fmt_text, False),
                    ("requests", "requests", fmt_int, True),
                    ("max_inflight", "max in flight", fmt_int, True),
                    ("queued", "queued", fmt_int, True),
                    ("queue_total_ms", "queue total ms", fmt_ms, True),
                    ("queue_max_ms", "queue max ms", fmt_ms, True),
                    ("service_p99_ms", "p99 service ms", fmt_ms, True),
                ),
                limit=TROUBLE_ROWS,
                note="queue_ms: how long a request waited behind earlier ones on its "
                "connection before the broker could start on it (section Pipelining).",
            )
        )
    return Section(
        id="trouble",
        title="Trouble",
        intro="; ".join(said) + ".",
        blocks=tuple(blocks),
    )


def _unanswered(df: pd.DataFrame) -> Section:
    return Section(
        id="unanswered",
        title="Unanswered requests",
        intro="Requests that expected a response and got none before the capture ended "
        "(Produce with acks=0 expects none and is not listed).",
        blocks=(
            frame_table(
                "unanswered",
                "Requests without a response",
                pair_table(stats.unanswered(df)),
                pair_columns(df),
                empty="Every request that expected a response got one.",
                css="pairs",
            ),
        ),
    )


def _groups(df: pd.DataFrame) -> Section:
    return Section(
        id="groups",
        title="Consumer-group and share-group activity",
        intro="Group coordination calls over time: classic groups (join, sync, heartbeat, "
        "leave), KIP-848 consumer groups and KIP-932 share groups (heartbeats, share fetch "
        "and acknowledge), offset commits and fetches. Every member joins once per classic "
        f"rebalance; responses with {', '.join(stats.REBALANCE_ERROR_NAMES)} mark one.",
        blocks=(
            chart(
                "groups",
                timeline_rows(df),
                f"Group API calls {series.rate_unit(df)[1]}, stacked by activity.",
            ),
            frame_table(
                "group-summary",
                "Group calls by protocol and activity",
                stats.group_activity_summary(df),
                (
                    ("protocol", "protocol", fmt_text, False),
                    ("activity", "activity", fmt_text, False),
                    ("calls", "calls", fmt_int, True),
                    ("errors", "errors", fmt_int, True),
                    ("rebalance_in_progress", "rebalance in progress", fmt_int, True),
                ),
                empty="No consumer-group or share-group traffic.",
            ),
            _group_table(df),
        ),
    )


def _group_table(df: pd.DataFrame) -> TableBlock:
    import pandas as pd

    notes = df.attrs.get(GROUPS_ATTR)
    rows = [
        {
            "group": group,
            "protocol": note["protocol"],
            "members": note["members"],
            "generations": ", ".join(map(str, note["generations"])) or "–",
            "rebalances": len(note["generations"]) if note["protocol"] == "classic" else None,
            "calls": ", ".join(f"{k} {v}" for k, v in note["calls"].items()),
            "errors": note["errors"],
        }
        for group, note in (notes or {}).items()
    ]
    return frame_table(
        "groups",
        "Groups",
        pd.DataFrame(rows),
        (
            ("group", "group id", fmt_text, False),
            ("protocol", "protocol", fmt_text, False),
            ("members", "members", fmt_int, True),
            ("rebalances", "rebalances completed", fmt_int, True),
            ("generations", "generations / member epochs", fmt_text, False),
            ("calls", "membership calls", fmt_text, False),
            ("errors", "errors", fmt_int, True),
        ),
        empty="No group membership calls."
        if notes is not None
        else "Not collected: make the report with kafka-dissector report or report.analyze.",
        note="Classic groups: one generation per completed rebalance (successful JoinGroup). "
        "KIP-848 consumer and KIP-932 share groups: member epochs the coordinator assigned.",
    )


def _dimension(df: pd.DataFrame, by: str, section_id: str, title: str, note: str) -> Section:
    # Quotas are set per client: throttling belongs in the client table.
    extra: Mapping[str, tuple[Column, ...]] = {
        "client": (("throttled", "throttled", fmt_int, True),),
    }
    key_columns: Mapping[str, tuple[Column, ...]] = {
        "client": (("client_id", "client id", fmt_text, False),),
        "broker": (("broker", "broker", fmt_text, False),),
        "topic": (("topic", "topic", fmt_text, False),),
    }
    return Section(
        id=section_id,
        title=title,
        blocks=(
            frame_table(
                f"per-{by}",
                f"Per {by}",
                stats.breakdown(df, by),
                (*key_columns[by], *breakdown_metrics(df), *extra.get(by, ())),
                note=note,
            ),
        ),
    )


NOT_COLLECTED = "Not collected: make the report with kafka-dissector report or report.analyze."


NO_GROUP_OFFSETS = (
    "No consumer group offsets (OffsetCommit, OffsetFetch, TxnOffsetCommit) in this capture."
)


def _partitions(df: pd.DataFrame) -> Section:
    import pandas as pd

    tables = analytics_tables(df)
    empty_parts = pd.DataFrame(columns=["capture", "topic", "partition"])
    none = NOT_COLLECTED if tables is None else None
    traffic, lag, p2f = empty_parts, empty_parts, empty_parts
    if tables is not None:
        # Each table from the partitions rows and columns it reads (a long capture's
        # table has hundreds of thousands of rows): lean frames, one at a time.
        traffic = partition_throughput(tables.arrow.partitions, tables.throughput_parts)
        release_memory()
        lag = table_lag(tables, capture_ends(df))
        p2f = produce_to_fetch_summary(
            tables.partitions_of(P2F_INPUTS, rows=carrying(tables, "first_offset"))
        )
    return Section(
        id="partitions",
        title="Partitions",
        intro="From the decoded bodies of Produce, Fetch, ShareFetch, ListOffsets, "
        "OffsetCommit, OffsetFetch, TxnOffsetCommit and EndTxn (dissector.partitions, one "
        "row per pair and partition); the tables below are its throughput, the consumer "
        "lag of dissector.analytics.lag and produce_to_fetch.",
        blocks=(
            frame_table(
                "partition-throughput",
                "Throughput per partition",
                traffic,
                (
                    *capture_column(traffic),
                    ("topic", "topic", fmt_text, False),
                    ("partition", "partition", fmt_int, True),
                    ("role", "side", fmt_text, False),
                    ("pairs", "pairs", fmt_int, True),
                    ("records", "records", fmt_int, True),
                    ("record_bytes", "record bytes", fmt_bytes, True),
                    ("records_per_s", "records/s", fmt_rate, True),
                    ("bytes_per_s", "bytes/s", fmt_rate, True),
                ),
                empty=none or "No Produce or Fetch records in this capture.",
                limit=PER_API_ROW_LIMIT,
                note="producer: Produce requests answered without error or sent with acks=0; "
                "consumer: Fetch/ShareFetch responses without error (their records include "
                "transaction markers). Rates are over the span from the first to the last "
                "such pair (–: one pair, no span).",
            ),
            frame_table(
                "consumer-lag",
                "Consumer lag per group and partition, at the end of the capture",
                lag,
                (
                    *capture_column(lag),
                    ("group_id", "group id", fmt_text, False),
                    ("topic", "topic", fmt_text, False),
                    ("partition", "partition", fmt_int, True),
                    ("lag", "lag (offsets)", fmt_int, True),
                    ("time_lag_ms", "time lag ms", fmt_ms, True),
                    ("committed_offset", "committed", fmt_int, True),
                    ("committed_age_ms", "commit age ms", fmt_ms, True),
                    ("log_end_offset", "log end", fmt_int, True),
                    ("log_end_age_ms", "log-end age ms", fmt_ms, True),
                    ("position_lag", "position lag", fmt_int, True),
                    ("position_age_ms", "fetch age ms", fmt_ms, True),
                    ("note", "note", fmt_text, False),
                ),
                empty=none or NO_GROUP_OFFSETS,
                limit=PER_API_ROW_LIMIT,
                note="Largest lag first. lag: what kafka-consumer-groups --describe calls "
                "LAG, the partition's log-end offset minus the group's committed offset, "
                "each the newest seen (log end: Produce response's last offset + 1, Fetch "
                "high watermark, ListOffsets latest; committed: OffsetCommit answered "
                "without error, OffsetFetch response, TxnOffsetCommit once its "
                "transaction committed). time lag: age of the oldest unconsumed record, "
                "since the Produce that wrote the record at the committed offset (–: not "
                "in the capture). ages: how old each input is at the end of the capture. "
                "position lag: at the group's latest Fetch of the partition, the high "
                "watermark minus the consumer's position after that response (the "
                "consumer's records-lag); it goes stale while a consumer fetches nothing, "
                "e.g. working through prefetched records.",
            ),
            frame_table(
                "produce-to-fetch",
                "Produce to fetch latency per topic",
                p2f,
                (
                    *capture_column(p2f),
                    ("topic", "topic", fmt_text, False),
                    ("deliveries", "batches delivered", fmt_int, True),
                    ("records", "records", fmt_int, True),
                    ("consumers", "consumers", fmt_int, True),
                    ("p50_ms", "p50 ms", fmt_ms, True),
                    ("p90_ms", "p90 ms", fmt_ms, True),
                    ("p99_ms", "p99 ms", fmt_ms, True),
                    ("max_ms", "max ms", fmt_ms, True),
                ),
                empty=none or "No batch both produced and fetched in this capture.",
                limit=PER_API_ROW_LIMIT,
                note="Per produced batch and consuming client: from the Produce request that "
                "wrote the batch to the first Fetch/ShareFetch response that delivered it.",
            ),
        ),
    )


def _versions(df: pd.DataFrame) -> Section:
    import pandas as pd

    tables = analytics_tables(df)
    skew = version_skew(tables.versions) if tables is not None else pd.DataFrame(columns=["x"])
    flagged = int(skew["flagged"].sum()) if "flagged" in skew.columns else 0
    return Section(
        id="versions",
        title="Versions",
        intro="Version skew (dissector.versions): per client and API, the versions the "
        "client sent against the range the broker advertised in its ApiVersions response "
        "on the same connection.",
        blocks=(
            frame_table(
                "version-skew",
                f"Versions used per client and API ({flagged} flagged)",
                skew,
                (
                    *capture_column(skew),
                    ("flag", "flag", fmt_text, False),
                    ("client_id", "client id", fmt_text, False),
                    ("software", "software", fmt_text, False),
                    ("api_name", "API", fmt_text, False),
                    ("connections", "connections", fmt_int, True),
                    ("requests", "requests", fmt_int, True),
                    ("versions_used", "versions used", fmt_text, False),
                    ("broker_range", "broker range", fmt_text, False),
                    ("spec_max", "specs up to", fmt_int, True),
                ),
                empty=NOT_COLLECTED if tables is None else "No Kafka requests in this capture.",
                limit=VERSION_ROW_LIMIT,
                note="Flagged first: outside broker range = a version used lies outside the "
                "range the broker advertised; unknown to the specs = a version newer than the "
                "loaded specs. broker range: not seen when the connection's ApiVersions "
                "exchange is not in the capture (opened before it started) or unreadable. "
                "software: from ApiVersions v3+ requests.",
            ),
        ),
    )


def _sizes(df: pd.DataFrame) -> Section:
    return Section(
        id="sizes",
        title="Sizes",
        blocks=(
            chart(
                "sizes",
                df,
                "Distribution of request and response sizes on the wire, size prefix included.",
            ),
        ),
    )


def _definitions(command: str) -> Section:
    facts = [(name, text) for name, text in stats.METRIC_DOCS.items()]
    facts.append(("percentiles", f"exact, {stats.PERCENTILE_INTERPOLATION} interpolation"))
    facts.append(("service latency, fetch_wait", stats.SERVICE_LATENCY_RULE))
    facts.append(("queue_ms, inflight", stats.QUEUEING_RULE))
    facts.append(
        (
            "rates",
            "per second, or per minute or hour when the capture's request rate "
            "is below 1 per second (per minute): one unit for the whole report",
        )
    )
    facts.append(("regenerate", command))
    return Section(id="definitions", title="Definitions", facts=tuple(facts))


def _filter_text(df: pd.DataFrame) -> str | None:
    applied = df.attrs.get(FILTER_ATTR)
    if not applied:
        return None
    text, before = applied
    return (
        f"{text} ({fmt_int(len(df))} of {fmt_int(before)} rows; the partitions, groups and "
        "versions tables are of every row)"
    )


def _no_kafka_overview(df: pd.DataFrame, ports: frozenset[int] | None) -> Section:
    applied = df.attrs.get(FILTER_ATTR)
    if applied:
        from dissector.analytics.summary_table import FILTER_ABSENT_ATTR

        unknown = "; ".join(df.attrs.get(FILTER_ABSENT_ATTR) or ())
        return Section(
            id="overview",
            title="No row matches the filter",
            intro=f"The filter {applied[0]!r} matched none of the {fmt_int(applied[1])} rows"
            + (f" ({unknown} among them)." if unknown else "."),
        )
    counters = df.attrs.get("counters") or {}
    absent = no_kafka(0, counters, df.attrs.get("tls_streams") or (), ports)
    assert absent is not None
    return Section(
        id="overview",
        title="No Kafka in this capture",
        intro=absent.sentence(),
        facts=tuple(("held", phrase) for phrase in absent.held),
    )


def _no_kafka_capture(df: pd.DataFrame, command: str) -> Section:
    counters = df.attrs.get("counters") or {}
    tls = df.attrs.get("tls_streams") or []
    rows: list[tuple[str, str]] = [("capture files", ", ".join(capture_names(df)) or "–")]
    if tls:
        rows.append(("TLS (not decoded)", _tls_text(tls)))
    if counters:
        rows.append(("stage counters", ", ".join(f"{k} {v:,}" for k, v in counters.items())))
    rows.append(("regenerate", command))
    return Section(id="capture", title="Capture", facts=tuple(rows))


def sections(
    df: pd.DataFrame,
    command: str,
    *,
    ports: frozenset[int] | None = None,
    facts: stats.CaptureFacts | None = None,
) -> list[Section]:
    """The page's sections (``facts``: ``stats.capture_facts(df)`` when the caller has
    them already: they take a pass over every row)."""
    if df.empty:
        return [_no_kafka_overview(df, ports), _no_kafka_capture(df, command)]
    out = [
        _overview(df),
        _trouble(df),
        _capture(df, facts or stats.capture_facts(df)),
        _latency(df),
        _queueing(df),
        _traffic(df),
        _errors(df),
        _slowest(df),
        _unanswered(df),
        _groups(df),
        _dimension(df, "client", "clients", "Clients", "Grouped by the client_id header field."),
        _dimension(df, "broker", "brokers", "Brokers", "Grouped by broker address and port."),
        _dimension(
            df,
            "topic",
            "topics",
            "Topics",
            "A pair that touches several topics counts, with its bytes, under each of them.",
        ),
        _partitions(df),
        _versions(df),
        _sizes(df),
        _definitions(command),
    ]
    assert tuple(s.id for s in out) == SECTION_IDS
    return out
