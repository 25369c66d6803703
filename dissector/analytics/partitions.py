"""The partition table: one row per (pair, topic, partition) of the data-path APIs.

Produce, Fetch, ShareFetch, ShareAcknowledge, ListOffsets, OffsetCommit, OffsetFetch
and TxnOffsetCommit name the partitions they touch; the table lays out what each
partition entry says (offsets, watermarks, committed offsets, records), with request
and response entries of one pair merged by (group, topic, partition). EndTxn names no
partition: each of its pairs is one row without topic and partition, saying whether the
transaction's offsets were committed. Which fields play which role is declared once, in
``dissector.protocol.tables``; the native core reads them in its one pass over each
capture (``dissector.wire.tables``). From the table: produce-to-fetch latency and
per-partition throughput here; consumer lag in ``dissector.analytics.lag``.
"""

from __future__ import annotations

import bisect
import os
import sys
import types
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dissector.options import AnySource
from dissector.protocol.errors import error_name
from dissector.protocol.pairs import DecodedExchange
from dissector.protocol.tables import (
    ENTRY_COLUMNS,
    EXPAND_RESPONSES,
    PAIR_ROW_APIS,
    PARTITION_APIS,
    Names,
    partition_entries,
    partition_facts,
)
from dissector.table.frame import ParquetTableWriter, contract_frame
from dissector.tables_schema import PARTITION_COLUMNS, Contract, names

if TYPE_CHECKING:
    import pandas as pd

    from dissector.tls import KeyLogs

Source = str | os.PathLike[str] | AnySource | Iterable[str | os.PathLike[str] | AnySource]

__all__ = [
    "EXPAND_RESPONSES",
    "PARTITION_APIS",
    "PARTITION_COLUMNS",
    "PARTITION_COLUMN_NAMES",
    "ParquetTableWriter",
    "export_table",
    "partition_entries",
    "partition_rows",
    "partitions",
    "produce_to_fetch",
    "table",
    "throughput",
]

PARTITION_COLUMN_NAMES: tuple[str, ...] = names(PARTITION_COLUMNS)


def partition_rows(
    dx: DecodedExchange, topic_names: Names, counters: Counter[str] | None = None
) -> list[dict[str, Any]]:
    """The partition rows of one decoded pair (column order: ``PARTITION_COLUMN_NAMES``),
    read by the Python decoder: the test oracle of the native pass."""
    ex = dx.exchange
    rows = []
    pair_row = dx.api_name in PAIR_ROW_APIS  # its one row has no partition: not counted
    for f in partition_facts(dx.api_name or "", dx.request_body(), dx.response_body(), topic_names):
        if f.partition is None and counters is not None and not pair_row:
            counters["entries_without_partition"] += 1
        rows.append(
            {
                "capture": dx.capture,
                "stream": ex.stream,
                "correlation_id": ex.correlation_id,
                "client_id": ex.client_id,
                "request_time": ex.request.last_ts_ns if ex.request is not None else None,
                "response_time": ex.response.last_ts_ns if ex.response is not None else None,
                "api_name": dx.api_name,
                "api_version": ex.api_version,
                "group_id": f.group_id,
                "member_id": f.member_id,
                "member_epoch": f.member_epoch,
                "acks": f.acks,
                "transactional_id": f.transactional_id,
                "isolation_level": f.isolation_level,
                "txn_committed": f.txn_committed,
                "topic": f.topic,
                "topic_id": f.topic_id,
                "partition": f.partition,
                "error_code": f.error_code,
                "error_name": error_name(f.error_code) if f.error_code is not None else None,
                "records": f.records,
                "record_bytes": f.record_bytes,
                "first_offset": f.first_offset,
                "last_offset": f.last_offset,
                **{c.column: v for c, v in zip(ENTRY_COLUMNS, f.entry_values, strict=True)},
            }
        )
    return rows


def table(rows: Iterable[dict[str, Any]], columns: Contract) -> pd.DataFrame:
    """Rows (dicts) -> a DataFrame typed by a column contract (``table.frame.contract_frame``)."""
    return contract_frame(rows, columns)


def partitions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    """One row per (pair, topic, partition) of Produce, Fetch, ShareFetch,
    ShareAcknowledge, ListOffsets, OffsetCommit, OffsetFetch and TxnOffsetCommit, and one
    per EndTxn pair, from the native core's pass over the captures (``tls``: key logs for
    Kafka over TLS). ``df.attrs["counters"]`` counts pairs, decode errors and entries
    without a partition index."""
    from dissector.analytics.frames import tables_of

    return tables_of(source, ports=ports, specs=specs, tls=tls).partitions


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

    # only the columns read: a long capture's table has hundreds of thousands of rows
    columns = ["capture", "topic", "partition", "api_name", "records", "record_bytes"]
    columns += ["request_time", "response_time", "error_code", "acks"]
    data = parts[columns]
    data = data.assign(role=data["api_name"].map(PARTITION_APIS))
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


def _apis_of(role: str) -> list[str]:
    return [api for api, r in PARTITION_APIS.items() if r == role]


def _produced_ranges(parts: pd.DataFrame) -> pd.DataFrame:
    produced = parts[parts["api_name"].isin(_apis_of("produce"))]
    return produced[produced["first_offset"].notna()].sort_values("request_time")


def produce_to_fetch(parts: pd.DataFrame) -> pd.DataFrame:
    """Per Produce batch and consuming client: the time from the Produce request that
    wrote the batch's first offset to the first Fetch/ShareFetch response that
    delivered that offset to the client, when both are in the capture."""
    import pandas as pd

    produced = _produced_ranges(parts)
    fetched = parts[
        parts["api_name"].isin(_apis_of("fetch")) & parts["first_offset"].notna()
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
    batches (produced before it) whose first offset lies in its delivered range.
    Columns are read as lists first: iterating Arrow-backed rows costs far more."""
    pending: list[tuple[int, int]] = []  # (first offset, batch row number), sorted
    rows = []
    produced_at = batches["request_time"].tolist()
    firsts = batches["first_offset"].tolist()
    captures, topics = batches["capture"].tolist(), batches["topic"].tolist()
    partitions, records = batches["partition"].tolist(), batches["records"].tolist()
    producers = batches["client_id"].tolist()
    answered = fetches["response_time"].tolist()
    starts, ends = fetches["first_offset"].tolist(), fetches["last_offset"].tolist()
    next_batch = 0
    for fetch_time, start, end in zip(answered, starts, ends, strict=True):
        while next_batch < len(produced_at) and produced_at[next_batch] <= fetch_time:
            bisect.insort(pending, (int(firsts[next_batch]), next_batch))
            next_batch += 1
        lo = bisect.bisect_left(pending, (int(start), -1))
        hi = bisect.bisect_right(pending, (int(end), len(produced_at)))
        for offset, i in pending[lo:hi]:
            rows.append(
                {
                    "capture": captures[i],
                    "topic": topics[i],
                    "partition": partitions[i],
                    "offset": offset,
                    "records": records[i],
                    "producer_client_id": producers[i],
                    "consumer_client_id": consumer if isinstance(consumer, str) else None,
                    "produce_time": produced_at[i],
                    "fetch_time": fetch_time,
                    "latency_ms": (fetch_time - produced_at[i]).total_seconds() * 1000,
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
