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

import os
import sys
import types
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dissector import schema
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
    import pyarrow as pa

    from dissector.options import Options
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
    options: Options | None = None,
) -> pd.DataFrame:
    """One row per (pair, topic, partition) of Produce, Fetch, ShareFetch,
    ShareAcknowledge, ListOffsets, OffsetCommit, OffsetFetch and TxnOffsetCommit, and one
    per EndTxn pair, from the native core's pass over the captures (``tls``: key logs for
    Kafka over TLS). ``df.attrs["counters"]`` counts pairs, decode errors and entries
    without a partition index."""
    from dissector.analytics.frames import tables_of

    frames = tables_of(
        source, ports=ports, specs=specs, tls=tls, options=options, tables=["partitions"]
    )
    return frames.partitions


# ----------------------------------------------------------------- derived quantities


def _landed(df: pd.DataFrame) -> pd.Series:
    """Rows whose records reached the broker as far as the capture shows: answered
    without error, or sent with acks=0 (no answer expected)."""
    answered = df["response_time"].notna() & df["error_code"].fillna(0).eq(0)
    return answered | df["acks"].eq(0).fillna(False)


THROUGHPUT_INPUTS = (
    "capture", "topic", "partition", "api_name", "records", "record_bytes", "request_time",
    "response_time", "error_code", "acks",
)  # fmt: skip
"""The partitions table's columns ``throughput`` reads."""


def throughput(parts: pd.DataFrame, window: str | None = None) -> pd.DataFrame:
    """Records and bytes per second per topic/partition, for producers (Produce
    requests answered without error, or sent with acks=0) and consumers
    (Fetch/ShareFetch responses without error; their record counts include
    transaction markers, as on the wire).

    ``window`` (a pandas frequency such as ``"1s"``): rates per time bin, over the
    bin's length; None: totals over the span between the first and last pair (rates
    are null when that span is zero).
    """
    return throughput_rates(throughput_totals(parts, window), window)


def throughput_totals(parts: pd.DataFrame, window: str | None = None) -> pd.DataFrame:
    """``throughput``'s totals (pairs, records, record_bytes, first_time, last_time) per
    topic/partition and role: totals of any part of the table's rows, which
    ``combined_totals`` adds up (a long capture's table read a chunk at a time)."""
    # only the columns read: a long capture's table has hundreds of thousands of rows
    data = parts[list(THROUGHPUT_INPUTS)]
    data = data.assign(role=data["api_name"].map(PARTITION_APIS))
    data = data[data["role"].isin(("produce", "fetch")) & data["records"].notna() & _landed(data)]
    data = data.assign(
        time=data["request_time"].where(data["role"] == "produce", data["response_time"])
    )
    if window is not None:
        data = data.assign(window_start=data["time"].dt.floor(window))
    # observed: categorical keys (a lean frame of the core's dictionaries) group as strings
    grouped = data.groupby(_throughput_keys(window), dropna=False, sort=True, observed=True)
    return grouped.agg(
        pairs=("records", "size"),
        records=("records", "sum"),
        record_bytes=("record_bytes", "sum"),
        first_time=("time", "min"),
        last_time=("time", "max"),
    ).reset_index()


TOTALS_CHUNK_ROWS = 65_536
"""Rows of the partitions table ``throughput_totals_in_table`` aggregates at a time."""


def throughput_totals_in_table(table: pa.Table) -> pd.DataFrame:
    """``throughput_totals`` (no window) of the whole partitions table as the core gives
    it (Arrow), filtered and grouped in Arrow a chunk of rows at a time, each chunk's
    totals then added up: no pandas frame of every row and memory for one chunk (a long
    capture's table has hundreds of thousands of rows). The keys come as strings."""
    return merged_throughput_totals(throughput_chunks(table))


def throughput_chunks(table: pa.Table) -> list[pa.Table]:
    """The totals of ``table`` (the partitions table, or a batch of it) a chunk of
    ``TOTALS_CHUNK_ROWS`` rows at a time, keys as strings: what
    ``merged_throughput_totals`` adds up. A consumer of the core's batches adds up each
    batch's as it comes, and need not keep the rows."""
    import pyarrow as pa

    data = table.select(list(THROUGHPUT_INPUTS))
    chunks = data.to_batches(TOTALS_CHUNK_ROWS)
    parts = [_chunk_totals(pa.Table.from_batches([b])) for b in chunks]
    return parts or [_chunk_totals(data)]  # an empty table: empty totals, typed


def merged_throughput_totals(parts: Sequence[pa.Table]) -> pd.DataFrame:
    """``throughput_totals`` (no window) from ``throughput_chunks`` of all the rows."""
    import pandas as pd
    import pyarrow as pa

    keys = _throughput_keys(None)
    grouped = (
        pa.concat_tables(parts)
        .group_by(keys, use_threads=False)
        .aggregate(
            [
                ("pairs", "sum"),
                ("records", "sum"),
                ("record_bytes", "sum"),
                ("first_time", "min"),
                ("last_time", "max"),
            ]
        )
    )
    out = grouped.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get).rename(
        columns={
            "pairs_sum": "pairs",
            "records_sum": "records",
            "record_bytes_sum": "record_bytes",
            "first_time_min": "first_time",
            "last_time_max": "last_time",
        }
    )
    # keys as text: categorical keys (the dictionaries) would sort by dictionary order
    out = out.astype({"capture": "string", "topic": "string", "role": "object"})
    columns = [*keys, "pairs", "records", "record_bytes", "first_time", "last_time"]
    return out.sort_values(keys, na_position="last", kind="stable")[columns].reset_index(drop=True)


def _chunk_totals(data: pa.Table) -> pa.Table:
    """``throughput_totals`` of some rows of the partitions table, in Arrow, the keys as
    strings (each chunk of the core's table has dictionaries of its own). Filtered and
    grouped on the dictionaries' codes, each name made text once per group: the text of
    every row took most of this table's time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    api = _one_chunk(data.column("api_name"))
    produce = _among(api, _apis_of("produce"))
    fetch = _among(api, _apis_of("fetch"))
    answered = pc.and_(
        pc.is_valid(data.column("response_time")),
        pc.equal(pc.fill_null(data.column("error_code"), 0), 0),
    )
    landed = pc.or_(answered, pc.fill_null(pc.equal(data.column("acks"), 0), False))
    keep = pc.and_(pc.and_(pc.or_(produce, fetch), pc.is_valid(data.column("records"))), landed)
    data, produce = data.filter(keep), produce.filter(keep)
    capture, topic = _one_chunk(data.column("capture")), _one_chunk(data.column("topic"))
    rows = pa.table(
        {
            "capture": _codes_of(capture),
            "topic": _codes_of(topic),
            "partition": data.column("partition"),
            "role": produce,
            "records": data.column("records"),
            "record_bytes": data.column("record_bytes"),
            "time": pc.if_else(produce, data.column("request_time"), data.column("response_time")),
        }
    )
    every = pc.CountOptions(mode="all")
    # a sum of nulls is 0, as pandas sums
    sums = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)
    totals = rows.group_by(_throughput_keys(None), use_threads=False).aggregate(
        [
            ("records", "count", every),
            ("records", "sum", sums),
            ("record_bytes", "sum", sums),
            ("time", "min"),
            ("time", "max"),
        ]
    )
    names = {
        "records_count": "pairs",
        "records_sum": "records",
        "record_bytes_sum": "record_bytes",
        "time_min": "first_time",
        "time_max": "last_time",
    }
    totals = totals.rename_columns([names.get(c, c) for c in totals.column_names])
    role = pc.if_else(totals.column("role"), "produce", "fetch")
    totals = totals.set_column(totals.schema.get_field_index("role"), "role", role)
    for name, column in (("capture", capture), ("topic", topic)):
        at = totals.schema.get_field_index(name)
        totals = totals.set_column(at, name, _texts_of(column, totals.column(name)))
    return totals


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """A column of one chunk (a batch's) as an array (its one dictionary, if any)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _among(column: pa.Array, names: list[str]) -> pa.Array:
    """Per row: its text is one of ``names`` (null: no); a dictionary's values tested
    once each, not once per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(names, pa.string())
    if not pa.types.is_dictionary(column.type):
        return pc.fill_null(pc.is_in(column, value_set=wanted), False)
    listed = pc.is_in(column.dictionary, value_set=wanted)
    return pc.fill_null(pc.take(listed, column.indices), False)


def _codes_of(column: pa.Array) -> pa.Array:
    """A text column's dictionary codes (a plain one's own values), null where null."""
    import pyarrow as pa

    return column.indices if pa.types.is_dictionary(column.type) else column


def _texts_of(column: pa.Array, codes: pa.ChunkedArray) -> pa.ChunkedArray:
    """The texts of ``codes`` (``_codes_of(column)``'s values) as strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        return codes
    return pc.take(column.dictionary, codes).cast(pa.string())


def combined_totals(totals: list[pd.DataFrame], window: str | None = None) -> pd.DataFrame:
    """``throughput_totals`` of parts of a table's rows (at least one part, maybe
    empty) as those of the whole table."""
    import pandas as pd

    if not totals:
        raise ValueError("no totals to combine: give those of at least one (empty) chunk")
    if len(totals) == 1:
        return totals[0]
    grouped = pd.concat(totals, ignore_index=True).groupby(
        _throughput_keys(window), dropna=False, sort=True, observed=True
    )
    return grouped.agg(
        pairs=("pairs", "sum"),
        records=("records", "sum"),
        record_bytes=("record_bytes", "sum"),
        first_time=("first_time", "min"),
        last_time=("last_time", "max"),
    ).reset_index()


def throughput_rates(totals: pd.DataFrame, window: str | None = None) -> pd.DataFrame:
    """``throughput_totals`` with the rates per second: over ``window``, else over the
    span from the first to the last pair (null when that span is zero)."""
    import pandas as pd

    out = totals.copy()
    if window is not None:
        seconds = pd.Series(pd.Timedelta(window).total_seconds(), index=out.index)
    else:
        seconds = (out["last_time"] - out["first_time"]).dt.total_seconds()
    seconds = seconds.where(seconds > 0)
    out["records_per_s"] = out["records"].astype("Float64") / seconds
    out["bytes_per_s"] = out["record_bytes"].astype("Float64") / seconds
    return out


def _throughput_keys(window: str | None) -> list[str]:
    keys = ["capture", "topic", "partition", "role"]
    return [*keys, "window_start"] if window is not None else keys


def _apis_of(role: str) -> list[str]:
    return [api for api, r in PARTITION_APIS.items() if r == role]


def _produced_ranges(parts: pd.DataFrame) -> pd.DataFrame:
    produced = parts[parts["api_name"].isin(_apis_of("produce"))]
    return produced[produced["first_offset"].notna()].sort_values("request_time")


def produce_to_fetch(parts: pd.DataFrame) -> pd.DataFrame:
    """Per Produce batch and consuming client: the time from the Produce request that
    wrote the batch's first offset to the first Fetch/ShareFetch response that
    delivered that offset to the client, when both are in the capture.

    Each client's fetch responses of a partition, in time order, deliver the batches
    produced by then (request time at or before the response) whose first offset lies
    in the response's delivered range, each batch once: the first such response. Rows
    come per partition and client, in delivery order."""
    import pandas as pd

    produced = _produced_ranges(parts)
    fetched = parts[
        parts["api_name"].isin(_apis_of("fetch")) & parts["first_offset"].notna()
    ].sort_values("response_time")
    batch, fetch = _deliveries(produced, fetched)
    batches, fetches = produced.iloc[batch], fetched.iloc[fetch]

    def column(rows: pd.DataFrame, name: str) -> pd.Series:
        return rows[name].reset_index(drop=True)

    out = pd.DataFrame(
        {
            "capture": column(batches, "capture"),
            "topic": column(batches, "topic"),
            "partition": column(batches, "partition"),
            "offset": column(batches, "first_offset"),
            "records": column(batches, "records"),
            "producer_client_id": column(batches, "client_id"),
            "consumer_client_id": column(fetches, "client_id"),
            "produce_time": column(batches, "request_time"),
            "fetch_time": column(fetches, "response_time"),
        }
    )
    waited = (out["fetch_time"] - out["produce_time"]).dt.total_seconds() * 1000
    return out.assign(latency_ms=waited.astype("Float64"))


def _deliveries(produced: pd.DataFrame, fetched: pd.DataFrame) -> tuple[Any, Any]:
    """(batch row, fetch row) positions in ``produced`` and ``fetched`` of each
    delivery (``produce_to_fetch``), vectorised: every (fetch, batch of its partition
    whose first offset lies in the fetch's range) candidate, kept when the batch was
    produced by the fetch's time, then the first fetch in time order per (client,
    batch). The candidates are the batches the fetch responses carried: bounded by the
    capture."""
    import numpy as np
    import pandas as pd

    if produced.empty or fetched.empty:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    keys = ["capture", "topic", "partition"]
    both = pd.concat([produced[keys], fetched[keys]], ignore_index=True)
    ids = both.groupby(keys, dropna=False, sort=False, observed=True).ngroup().to_numpy()
    batch_part, fetch_part = ids[: len(produced)], ids[len(produced) :]
    first = produced["first_offset"].to_numpy(dtype=np.int64)
    start = fetched["first_offset"].to_numpy(dtype=np.int64)
    end = fetched["last_offset"].fillna(fetched["first_offset"]).to_numpy(dtype=np.int64)
    # (partition, offset) as one sortable int64: offsets by rank among those in play
    values = np.unique(np.concatenate([first, start, end]))
    width = len(values) + 1
    batch_key = batch_part * width + np.searchsorted(values, first)
    # batches in (partition, first offset, produce order): a fetch's range is a slice
    order = np.lexsort((np.arange(len(first)), batch_key))
    sorted_keys = batch_key[order]
    lo = np.searchsorted(sorted_keys, fetch_part * width + np.searchsorted(values, start), "left")
    hi = np.searchsorted(sorted_keys, fetch_part * width + np.searchsorted(values, end), "right")
    counts = np.clip(hi - lo, 0, None)
    fetch = np.repeat(np.arange(len(fetched)), counts)
    offsets = np.arange(len(fetch)) - np.repeat(np.cumsum(counts) - counts, counts)
    batch = order[np.repeat(lo, counts) + offsets]
    consumer = pd.factorize(fetched["client_id"], use_na_sentinel=False)[0]
    # A batch waits from its produce time: a response at or after it may deliver it
    # (a response without a time, sorted last, delivers what waited before it).
    group = pd.Series(fetch_part * (consumer.max() + 1) + consumer)
    seen = pd.Series(_naive(fetched["response_time"])).groupby(group).ffill()
    produced_at = _naive(produced["request_time"])
    waiting = produced_at[batch] <= seen.to_numpy()[fetch]
    batch, fetch = batch[waiting], fetch[waiting]
    # the first fetch (in time order) of each client to deliver each batch
    pick = np.lexsort((fetch, batch, consumer[fetch]))
    firsts = np.ones(len(pick), dtype=bool)
    same = (consumer[fetch][pick][1:] == consumer[fetch][pick][:-1]) & (
        batch[pick][1:] == batch[pick][:-1]
    )
    firsts[1:] = ~same
    batch, fetch = batch[pick][firsts], fetch[pick][firsts]
    # partition and client by first fetch, then each fetch's batches by offset
    part_rank = _first_seen(fetch_part)
    client_rank = _first_seen(fetch_part * (consumer.max() + 1) + consumer)
    shown = np.lexsort((batch, first[batch], fetch, client_rank[fetch], part_rank[fetch]))
    return batch[shown], fetch[shown]


def _naive(times: pd.Series) -> Any:
    """UTC times as numpy datetime64 (a tz-aware column gives one object per row)."""
    return times.dt.tz_convert(None).to_numpy()


def _first_seen(labels: Any) -> Any:
    """Per position: where its label first occurs (ranks groups by first appearance)."""
    import numpy as np

    _, index, inverse = np.unique(labels, return_index=True, return_inverse=True)
    return index[inverse]


# ----------------------------------------------------------------- export

TABLE_FORMATS = schema.TABLE_FORMATS


def export_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write a table in the format its extension names (.parquet, .csv, .jsonl/.json);
    list cells become ';'-joined text in CSV. The text formats are what ``analyze
    --partitions``/``--groups`` write batch by batch (``text_rows.TABLES_STYLE``)."""
    target = os.fspath(path)
    ext = os.path.splitext(target)[1].lower()
    if ext == ".parquet":
        df.to_parquet(target, index=False)
    elif ext in (".csv", ".jsonl", ".json"):
        from dissector.table.text_rows import TABLES_STYLE, frame_batches, write_batches

        names = [str(n) for n in df.columns]
        with open(target, "wb") as fh:
            write_batches(frame_batches(df), fh, ext, TABLES_STYLE, header=True, names=names)
    else:
        raise ValueError(f"unknown output format {ext!r}: use one of {', '.join(TABLE_FORMATS)}")


# ``dissector.analytics.partitions`` is both this module and the function users call: importing
# the submodule rebinds the package attribute to the module, so the module is callable.
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return partitions(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
