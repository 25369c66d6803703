"""The partition table: one row per (pair, topic, partition) of the data-path APIs.

Produce, Fetch, ShareFetch, ListOffsets, OffsetCommit, OffsetFetch and
TxnOffsetCommit name the partitions they touch; this module decodes their full
bodies and lays out what each partition entry says (offsets, watermarks, committed
offsets, records), with request and response entries of one pair merged by (group,
topic, partition). EndTxn names no partition: each of its pairs is one row without
topic and partition, saying whether the transaction's offsets were committed.

Entries are found generically: an array whose items name a topic (``name``,
``topic``, ``topic_name`` or ``topic_id``) and hold an array whose name mentions
partitions; the partition index is the entry itself (an int) or its
``partition_index``/``partition``/``index`` field. Field names are Apache's
(snake_case). From the table: produce-to-fetch latency and per-partition
throughput here; consumer lag in ``dissector.analytics.lag``.
"""

from __future__ import annotations

import bisect
import os
import sys
import types
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dissector.options import AnySource
from dissector.protocol.errors import error_name
from dissector.protocol.pairs import DecodedExchange

if TYPE_CHECKING:
    import pandas as pd

    from dissector.stages import Exchange
    from dissector.tls import KeyLogs

Source = str | os.PathLike[str] | AnySource | Iterable[str | os.PathLike[str] | AnySource]

# The APIs this table covers, by Kafka's names, and the role each plays for the
# derived quantities (throughput, lag, produce-to-fetch latency).
PARTITION_APIS: dict[str, str] = {
    "Produce": "produce",
    "Fetch": "fetch",
    "ShareFetch": "fetch",
    "ListOffsets": "offsets",
    "OffsetCommit": "commit",
    "OffsetFetch": "commit",
    "TxnOffsetCommit": "commit",
    "EndTxn": "transaction",
}
# APIs whose pair is one row of its own: their bodies name no partition.
_PAIR_ROW_APIS = frozenset({"EndTxn"})
# Responses whose record batches are expanded: the delivered offset range needs the
# offsets of the records, which the counting parse does not keep.
_EXPAND_RESPONSES = frozenset({"Fetch", "ShareFetch"})
_TOPIC_KEYS = ("topic", "topic_name", "name")
_PARTITION_KEYS = ("partition_index", "partition", "index")
# Scalars of enclosing structs that every partition entry below them inherits.
_CONTEXT_KEYS = (
    "group_id",
    "member_id",
    "member_epoch",
    "generation_id_or_member_epoch",
    "acks",
    "transactional_id",
    "isolation_level",
)
_MAX_DEPTH = 8  # bodies nest a few levels; a walk never goes deeper
_REQ, _RESP = 0, 1

# column -> (direction looked at first, field names in Apache's specs, first found wins)
_ENTRY_FIELDS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "fetch_offset": ((_REQ,), ("fetch_offset",)),
    "base_offset": ((_RESP,), ("base_offset",)),
    "high_watermark": ((_RESP,), ("high_watermark",)),
    "last_stable_offset": ((_RESP,), ("last_stable_offset",)),
    # the request's log_start_offset is a follower's own; only the broker's is kept
    "log_start_offset": ((_RESP,), ("log_start_offset",)),
    "offset": ((_RESP,), ("offset",)),
    "committed_offset": ((_RESP, _REQ), ("committed_offset",)),
    "leader_epoch": (
        (_RESP, _REQ),
        ("leader_epoch", "committed_leader_epoch", "current_leader_epoch"),
    ),
    # ListOffsets: what was asked for (-1 latest, -2 earliest, else a time in ms)
    "timestamp": ((_REQ,), ("timestamp",)),
}

# (name, pandas dtype, meaning): the table's contract, documented in README.md.
PARTITION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("capture", "string", "path of the capture file"),
    ("stream", "Int64", "TCP connection index within the capture"),
    ("correlation_id", "Int64", "correlation id of the pair"),
    ("client_id", "string", "client_id from the request header"),
    ("request_time", "datetime64[ns, UTC]", "request complete"),
    ("response_time", "datetime64[ns, UTC]", "response complete (null: no response)"),
    ("api_name", "string", f"one of {', '.join(PARTITION_APIS)}"),
    ("api_version", "Int64", "API version of the request"),
    ("group_id", "string", "group (OffsetCommit, OffsetFetch, TxnOffsetCommit, ShareFetch)"),
    ("member_id", "string", "group member id where the API carries one"),
    ("member_epoch", "Int64", "generation id or member epoch where the API carries one"),
    ("acks", "Int64", "Produce: acks of the request (0: no response expected)"),
    ("transactional_id", "string", "Produce, TxnOffsetCommit, EndTxn: the transactional id"),
    ("isolation_level", "Int64", "Fetch, ListOffsets: 0 read_uncommitted, 1 read_committed"),
    ("txn_committed", "boolean", "EndTxn: true commits the transaction, false aborts it"),
    ("topic", "string", "topic name (the topic id when no name for it was seen)"),
    ("topic_id", "string", "topic id (Fetch v13+, Produce v13+, ShareFetch)"),
    ("partition", "Int64", "partition index"),
    ("error_code", "Int64", "partition error code, else the response's top-level one"),
    ("error_name", "string", "Kafka's name for error_code"),
    ("records", "Int64", "records carried (Produce request, Fetch/ShareFetch response)"),
    ("record_bytes", "Int64", "bytes of the record batches carried"),
    ("first_offset", "Int64", "first offset written (Produce) or delivered (Fetch, ShareFetch)"),
    ("last_offset", "Int64", "last offset written (Produce) or delivered (Fetch, ShareFetch)"),
    *(
        (name, "Int64", f"{name} of the partition entry ({', '.join(fields)})")
        for name, (_, fields) in _ENTRY_FIELDS.items()
    ),
)
PARTITION_COLUMN_NAMES: tuple[str, ...] = tuple(c[0] for c in PARTITION_COLUMNS)


# ----------------------------------------------------------------- decoded exchanges


def decoded_exchanges(
    source: Source,
    apis: Collection[str],
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    expand: Collection[str] = (),
    counters: Counter[str] | None = None,
    tls: KeyLogs | None = None,
) -> Iterator[tuple[DecodedExchange, Any]]:
    """(decoded exchange, the capture's TopicNames) for every exchange of ``apis``
    (``wire.full_decode``). ``expand``: APIs whose responses' record batches are expanded
    into records."""
    from dissector.wire.full_decode import decoded_exchanges as decoded

    def wanted(_ex: Exchange, api: str | None) -> bool:
        return api in apis

    def expanded(api: str, request: bool) -> bool:
        return not request and api in expand

    return decoded(
        source, wanted, ports=ports, specs=specs, expand=expanded, counts=counters, tls=tls
    )


# ----------------------------------------------------------------- partition entries


@dataclass(slots=True)
class _Entry:
    context: dict[str, Any]
    topic: str | None
    topic_id: str | None
    partition: int | None
    sides: list[dict[str, Any] | None] = field(default_factory=lambda: [None, None])


def _topic_of(item: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """(topic name, topic id) an array item names, or None if it names no topic."""
    name = next((v for k in _TOPIC_KEYS if isinstance(v := item.get(k), str) and v), None)
    tid = item.get("topic_id")
    tid = tid if isinstance(tid, str) else None
    if name is None and tid is None:
        return None
    return name, tid


def _partition_array(item: dict[str, Any]) -> list[Any] | None:
    for key, value in item.items():
        if "partition" in key and isinstance(value, list):
            return value
    return None


def _partition_index(p: Any) -> tuple[int | None, dict[str, Any]]:
    if type(p) is int:  # arrays of bare indexes (OffsetFetch request, forgotten topics)
        return p, {}
    if not isinstance(p, dict):
        return None, {}
    for key in _PARTITION_KEYS:
        value = p.get(key)
        if type(value) is int:
            return value, p
    return None, p


def _context_of(body: dict[str, Any], outer: dict[str, Any]) -> dict[str, Any]:
    ctx = dict(outer)
    for key in _CONTEXT_KEYS:
        value = body.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            ctx[key] = value
    return ctx


def partition_entries(
    body: dict[str, Any] | None, context: dict[str, Any] | None = None, depth: int = 0
) -> Iterator[tuple[dict[str, Any], tuple[str | None, str | None], int | None, dict[str, Any]]]:
    """(context, (topic, topic_id), partition, entry) for every partition entry of a body.

    ``context`` holds the group/member fields of the structs that enclose the entry.
    Arrays named ``forgotten_*`` (partitions leaving a fetch session) are not
    entries of the pair.
    """
    if not isinstance(body, dict) or depth > _MAX_DEPTH:
        return
    ctx = _context_of(body, context or {})
    for key, value in body.items():
        if not isinstance(value, list) or key.startswith("forgotten"):
            continue
        for item in value:
            if not isinstance(item, dict):
                continue
            topic = _topic_of(item)
            parts = _partition_array(item) if topic is not None else None
            if parts is None or topic is None:
                yield from partition_entries(item, ctx, depth + 1)
                continue
            for p in parts:
                if type(p) is int or isinstance(p, dict):
                    index, entry = _partition_index(p)
                    yield ctx, topic, index, entry


def _merge(request: dict[str, Any], response: dict[str, Any], names: Any) -> list[_Entry]:
    """Request and response entries of one pair, joined by (group, topic, partition)."""
    merged: dict[tuple[Any, ...], _Entry] = {}
    # Responses rarely repeat the request's group: its top-level fields apply to both.
    pair_context = _context_of(request, {})
    for side, body in ((_REQ, request), (_RESP, response)):
        for ctx, (name, tid), index, entry in partition_entries(body, pair_context):
            topic = name or (names.name(tid) if tid is not None else None) or tid
            key = (ctx.get("group_id"), topic, index)
            row = merged.get(key)
            if row is None:
                row = merged[key] = _Entry(dict(ctx), topic, tid, index)
            else:
                row.context.update(ctx)
                row.topic_id = row.topic_id or tid
            row.sides[side] = entry
    return list(merged.values())


# ----------------------------------------------------------------- rows


def _records(entry: dict[str, Any] | None) -> tuple[int | None, int | None, list[int]]:
    """(records, bytes, offsets of delivered data records) of an entry's record sets."""
    if not entry:
        return None, None, []
    count: int | None = None
    size: int | None = None
    offsets: list[int] = []
    for value in entry.values():
        if hasattr(value, "codecs") and hasattr(value, "records"):
            count = (count or 0) + int(value.records)
            size = (size or 0) + int(value.bytes)
            offsets.extend(_record_offsets(value.items))
        elif isinstance(value, dict) and "size" in value and set(value) <= {"size", "error"}:
            size = (size or 0) + int(value["size"])  # records the parser could not read
    return count, size, offsets


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _record_offsets(items: list[dict[str, Any]] | None) -> Iterator[int]:
    for batch in items or ():
        if not isinstance(batch, dict) or batch.get("is_control"):
            continue  # transaction markers are written by the coordinator, not produced
        for record in _list(batch.get("records")):
            offset = record.get("offset") if isinstance(record, dict) else None
            if type(offset) is int:
                yield offset


def _field(entry: _Entry, directions: tuple[int, ...], names: tuple[str, ...]) -> int | None:
    for side in directions:
        values = entry.sides[side]
        if not values:
            continue
        for name in names:
            value = values.get(name)
            if type(value) is int:
                return value
        leader = values.get("current_leader")  # ShareFetch nests the leader epoch
        if isinstance(leader, dict) and "leader_epoch" in names:
            value = leader.get("leader_epoch")
            if type(value) is int:
                return value
    return None


def _offset_range(
    role: str, entry: _Entry, records: int | None, offsets: list[int], values: dict[str, Any]
) -> tuple[int | None, int | None]:
    if role == "produce":
        base = values["base_offset"]
        if base is None or base < 0 or not records or values["error_code"]:
            return None, None
        return base, base + records - 1
    if role != "fetch":
        return None, None
    acquired = _acquired(entry.sides[_RESP])
    if acquired:  # ShareFetch: the records this member acquired
        return min(a for a, _ in acquired), max(b for _, b in acquired)
    start = values["fetch_offset"]
    delivered = [o for o in offsets if start is None or o >= start]
    if not delivered:
        return None, None
    return min(delivered), max(delivered)


def _acquired(entry: dict[str, Any] | None) -> list[tuple[int, int]]:
    out = []
    for r in _list((entry or {}).get("acquired_records")):
        if isinstance(r, dict) and type(r.get("first_offset")) is int:
            last = r.get("last_offset")
            out.append((r["first_offset"], last if type(last) is int else r["first_offset"]))
    return out


def _error(entry: _Entry, top: Any) -> int | None:
    values = entry.sides[_RESP]
    code = values.get("error_code") if values else None
    if type(code) is int and code:
        return code
    if type(top) is int and top:
        return top
    return code if type(code) is int else (top if type(top) is int else None)


def partition_rows(
    dx: DecodedExchange, names: Any, counters: Counter[str] | None = None
) -> list[dict[str, Any]]:
    """The partition rows of one decoded pair (column order: ``PARTITION_COLUMN_NAMES``)."""
    request, response = dx.request_body(), dx.response_body()
    if dx.api_name in _PAIR_ROW_APIS:
        return [_pair_row(dx, request, response)]
    role = PARTITION_APIS.get(dx.api_name or "", "")
    rows = []
    for entry in _merge(request, response, names):
        if entry.partition is None and counters is not None:
            counters["entries_without_partition"] += 1
        values: dict[str, Any] = {
            name: _field(entry, dirs, fields) for name, (dirs, fields) in _ENTRY_FIELDS.items()
        }
        code = _error(entry, response.get("error_code"))
        values["error_code"] = code
        req_n, req_b, _ = _records(entry.sides[_REQ])
        resp_n, resp_b, offsets = _records(entry.sides[_RESP])
        records = _add(req_n, resp_n)
        first, last = _offset_range(role, entry, records, offsets, values)
        rows.append(
            {
                **_pair_columns(dx, entry.context),
                "topic": entry.topic,
                "topic_id": entry.topic_id,
                "partition": entry.partition,
                "error_code": code,
                "error_name": error_name(code) if code is not None else None,
                "records": records,
                "record_bytes": _add(req_b, resp_b),
                "first_offset": first,
                "last_offset": last,
                **values,
            }
        )
    return rows


def _pair_columns(dx: DecodedExchange, ctx: dict[str, Any]) -> dict[str, Any]:
    """The columns every row of a pair shares: its identity and the context fields."""
    ex = dx.exchange
    epoch = ctx.get("member_epoch", ctx.get("generation_id_or_member_epoch"))
    return {
        "capture": dx.capture,
        "stream": ex.stream,
        "correlation_id": ex.correlation_id,
        "client_id": ex.client_id,
        "request_time": ex.request.last_ts_ns if ex.request is not None else None,
        "response_time": ex.response.last_ts_ns if ex.response is not None else None,
        "api_name": dx.api_name,
        "api_version": ex.api_version,
        "group_id": _str(ctx.get("group_id")),
        "member_id": _str(ctx.get("member_id")),
        "member_epoch": epoch if type(epoch) is int else None,
        "acks": _int(ctx.get("acks")),
        "transactional_id": _str(ctx.get("transactional_id")),
        "isolation_level": _int(ctx.get("isolation_level")),
    }


def _pair_row(
    dx: DecodedExchange, request: dict[str, Any], response: dict[str, Any]
) -> dict[str, Any]:
    """The one row of a pair that names no partition (EndTxn)."""
    code = response.get("error_code")
    code = code if type(code) is int else None
    committed = request.get("committed")
    return {
        **_pair_columns(dx, _context_of(request, {})),
        "error_code": code,
        "error_name": error_name(code) if code is not None else None,
        "txn_committed": committed if isinstance(committed, bool) else None,
    }


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def table(
    rows: Iterable[dict[str, Any]], columns: tuple[tuple[str, str, str], ...]
) -> pd.DataFrame:
    """Rows (dicts) -> a DataFrame typed by a column contract; empty input keeps every column."""
    import pandas as pd

    data: dict[str, list[Any]] = {name: [] for name, _, _ in columns}
    for row in rows:
        for name in data:
            data[name].append(row.get(name))
    out = {}
    for name, dtype, _ in columns:
        values = data[name]
        if dtype.startswith("datetime64"):
            out[name] = pd.to_datetime(pd.array(values, dtype="Int64"), unit="ns", utc=True)
        elif dtype == "object":
            out[name] = pd.Series(values, dtype="object")
        else:
            out[name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(out, columns=[c[0] for c in columns])


def partitions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    """One row per (pair, topic, partition) of Produce, Fetch, ShareFetch, ListOffsets,
    OffsetCommit, OffsetFetch and TxnOffsetCommit, and one per EndTxn pair.
    ``df.attrs["counters"]`` counts pairs, decode errors
    and entries without a partition index."""
    counters: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    for dx, names in decoded_exchanges(
        source,
        PARTITION_APIS,
        ports=ports,
        tls=tls,
        specs=specs,
        expand=_EXPAND_RESPONSES,
        counters=counters,
    ):
        rows.extend(partition_rows(dx, names, counters))
    df = table(rows, PARTITION_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


# ----------------------------------------------------------------- derived quantities


def _landed(df: pd.DataFrame) -> pd.Series:
    """Rows whose records reached the broker as far as the capture shows: answered
    without error, or sent with acks=0 (no answer expected)."""
    answered = df["response_time"].notna() & df["error_code"].fillna(0).eq(0)
    return answered | df["acks"].eq(0).fillna(False)


def throughput(parts: pd.DataFrame, window: str | None = None) -> pd.DataFrame:
    """Records and bytes per second per topic/partition, for producers (Produce
    requests answered without error, or sent with acks=0) and consumers
    (Fetch/ShareFetch responses without error; their record counts include
    transaction markers, as on the wire).

    ``window`` (a pandas frequency such as ``"1s"``): rates per time bin, over the
    bin's length; None: totals over the span between the first and last pair (rates
    are null when that span is zero).
    """
    import pandas as pd

    role = parts["api_name"].map(PARTITION_APIS)
    data = parts.assign(role=role)
    data = data[data["role"].isin(("produce", "fetch")) & data["records"].notna() & _landed(data)]
    data = data.assign(
        time=data["request_time"].where(data["role"] == "produce", data["response_time"])
    )
    keys = ["capture", "topic", "partition", "role"]
    if window is not None:
        data = data.assign(window_start=data["time"].dt.floor(window))
        keys.append("window_start")
    grouped = data.groupby(keys, dropna=False, sort=True)
    out = grouped.agg(
        pairs=("records", "size"),
        records=("records", "sum"),
        record_bytes=("record_bytes", "sum"),
        first_time=("time", "min"),
        last_time=("time", "max"),
    ).reset_index()
    if window is not None:
        seconds = pd.Series(pd.Timedelta(window).total_seconds(), index=out.index)
    else:
        seconds = (out["last_time"] - out["first_time"]).dt.total_seconds()
    seconds = seconds.where(seconds > 0)
    out["records_per_s"] = out["records"].astype("Float64") / seconds
    out["bytes_per_s"] = out["record_bytes"].astype("Float64") / seconds
    return out


def _produced_ranges(parts: pd.DataFrame) -> pd.DataFrame:
    produced = parts[(parts["api_name"].map(PARTITION_APIS) == "produce")]
    return produced[produced["first_offset"].notna()].sort_values("request_time")


def produce_to_fetch(parts: pd.DataFrame) -> pd.DataFrame:
    """Per Produce batch and consuming client: the time from the Produce request that
    wrote the batch's first offset to the first Fetch/ShareFetch response that
    delivered that offset to the client, when both are in the capture."""
    import pandas as pd

    produced = _produced_ranges(parts)
    fetched = parts[
        (parts["api_name"].map(PARTITION_APIS) == "fetch") & parts["first_offset"].notna()
    ].sort_values("response_time")
    rows = []
    by_partition = produced.groupby(["capture", "topic", "partition"], sort=False)
    for (capture, topic, partition), fetches in fetched.groupby(
        ["capture", "topic", "partition"], sort=False
    ):
        try:
            batches = by_partition.get_group((capture, topic, partition))
        except KeyError:
            continue
        for consumer, mine in fetches.groupby("client_id", sort=False, dropna=False):
            rows.extend(_match_deliveries(batches, mine, consumer))
    columns = [
        "capture", "topic", "partition", "offset", "records", "producer_client_id",
        "consumer_client_id", "produce_time", "fetch_time", "latency_ms",
    ]  # fmt: skip
    out = pd.DataFrame(rows, columns=columns)
    out["latency_ms"] = out["latency_ms"].astype("Float64")
    return out


def _match_deliveries(batches: pd.DataFrame, fetches: pd.DataFrame, consumer: Any) -> list[dict]:
    """Walk one consumer's fetch responses in time order; each delivers the pending
    batches (produced before it) whose first offset lies in its delivered range."""
    pending: list[tuple[int, int]] = []  # (first offset, batch row number), sorted
    rows = []
    batch_rows = list(batches.itertuples(index=False))
    next_batch = 0
    for f in fetches.itertuples(index=False):
        while next_batch < len(batch_rows) and batch_rows[next_batch].request_time <= (
            f.response_time
        ):
            bisect.insort(pending, (int(batch_rows[next_batch].first_offset), next_batch))
            next_batch += 1
        lo = bisect.bisect_left(pending, (int(f.first_offset), -1))
        hi = bisect.bisect_right(pending, (int(f.last_offset), len(batch_rows)))
        for offset, i in pending[lo:hi]:
            b = batch_rows[i]
            rows.append(
                {
                    "capture": b.capture,
                    "topic": b.topic,
                    "partition": b.partition,
                    "offset": offset,
                    "records": b.records,
                    "producer_client_id": b.client_id,
                    "consumer_client_id": consumer if isinstance(consumer, str) else None,
                    "produce_time": b.request_time,
                    "fetch_time": f.response_time,
                    "latency_ms": (f.response_time - b.request_time).total_seconds() * 1000,
                }
            )
        del pending[lo:hi]
    return rows


# ----------------------------------------------------------------- export

TABLE_FORMATS = (".parquet", ".csv", ".jsonl", ".json")


def export_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write a table in the format its extension names (.parquet, .csv, .jsonl/.json);
    list cells become ';'-joined text in CSV."""
    import json

    target = os.fspath(path)
    ext = os.path.splitext(target)[1].lower()
    if ext == ".parquet":
        df.to_parquet(target, index=False)
    elif ext == ".csv":
        flat = df.copy()
        for name in flat.columns:
            if flat[name].dtype == object:
                flat[name] = flat[name].map(_csv_cell)
        flat.to_csv(target, index=False)
    elif ext in (".jsonl", ".json"):
        with open(target, "w", encoding="utf-8") as fh:
            for row in df.to_dict(orient="records"):
                fh.write(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n")
    else:
        raise ValueError(f"unknown output format {ext!r}: use one of {', '.join(TABLE_FORMATS)}")


def _csv_cell(value: Any) -> Any:
    return ";".join(map(str, value)) if isinstance(value, list | tuple) else value


def _json_value(value: Any) -> Any:
    import pandas as pd

    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    if value is pd.NaT:
        return None
    return value.item() if hasattr(value, "item") else value


# ``dissector.analytics.partitions`` is both this module and the function users call: importing
# the submodule rebinds the package attribute to the module, so the module is callable.
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return partitions(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
