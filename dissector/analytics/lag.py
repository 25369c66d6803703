"""Consumer lag from the partitions table: the broker's measure and the fetcher's.

**Committed lag** (``committed_lag``: a time series; ``lag_at_end``: at the end of the
capture) is what ``kafka-consumer-groups --describe`` calls LAG: per group and
partition, the partition's log-end offset minus the group's committed offset. Each
input is the newest one seen, in capture time:

* log-end offset, per partition: a Produce response's last offset + 1, a Fetch
  response's high watermark, or a ListOffsets response to a read_uncommitted LATEST
  query (timestamp -1), each at its response's time;
* committed offset, per group and partition: an OffsetCommit answered without error
  (at its response's time), an OffsetFetch response (-1: the group has none), or a
  TxnOffsetCommit answered without error once its transaction commits (at the response
  to the transactional id's next EndTxn; an aborted transaction drops it).

Its lag in time is the age of the oldest unconsumed record: the evaluation time minus
the request time of the Produce that wrote the record at the committed offset, 0 when
nothing is unconsumed, and null when the capture did not see that Produce (the record
was written before the capture began or on a connection not captured, or the offset is
a transaction marker's).

**Position lag** (``position_lag``) is the consumer's fetch position against the high
watermark, per Fetch at its response's time, as the consumer's own records-lag metric
counts it: the high watermark minus the position once the response's records are in
(the last data record delivered + 1, else the fetch offset). A long poll answered with
the records just produced is caught up, 0. A response that ends in a transaction
marker leaves the position on the marker, 1 more than the client's metric, until the
next Fetch starts past it. Position lag says how far the fetcher trails, not what the
group has processed: a consumer that prefetched many records and works through them
slowly sends no Fetch meanwhile, so its last position lag goes stale while its
committed lag grows.

All functions are pure: a partitions DataFrame (``dissector.partitions``) in, a table
out, typed by the column contracts below (documented in README.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dissector.protocol.families import GROUP_COMMITS, names
from dissector.protocol.keys import ApiKey

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

    Mask = npt.NDArray[np.bool_]  # per row: whether it is one of those
    Ints = npt.NDArray[np.int64]  # per row: a value, ``_NONE`` for null
    Codes = npt.NDArray[np.int32]  # per row: a code (-1: null)
    Times = npt.NDArray[np.datetime64]  # per row: a naive UTC time (NaT: none)

# ListOffsets: the timestamp that asks for the log end, and the isolation level whose
# answer is the high watermark (read_committed answers the last stable offset).
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0

PARTITION_KEYS = ["capture", "topic", "partition"]
GROUP_KEYS = ["capture", "group_id", "topic", "partition"]
_TIME = "datetime64[ns, UTC]"

# The APIs each input is read from, by the names of the ``api_name`` column.
_PRODUCE = ApiKey.PRODUCE.api_name
_FETCH = ApiKey.FETCH.api_name
_LIST_OFFSETS = ApiKey.LIST_OFFSETS.api_name
_END_TXN = ApiKey.END_TXN.api_name
_TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT.api_name
_GROUP_COMMITS = names(GROUP_COMMITS)

Columns = tuple[tuple[str, str, str], ...]
"""(name, pandas dtype, meaning): a table's contract."""

LOG_END_COLUMNS: Columns = (
    ("capture", "string", "path of the capture file"),
    ("topic", "string", "topic"),
    ("partition", "Int64", "partition"),
    ("time", _TIME, "response time of the pair that told the log-end offset"),
    ("log_end_offset", "Int64", "offset the next record written will take"),
    ("log_end_api", "string", "Produce (last offset + 1), Fetch or ListOffsets"),
    ("client_id", "string", "client of that pair"),
)

COMMIT_COLUMNS: Columns = (
    ("capture", "string", "path of the capture file"),
    ("group_id", "string", "consumer group"),
    ("topic", "string", "topic"),
    ("partition", "Int64", "partition"),
    ("time", _TIME, "when the committed offset took effect or was read"),
    ("committed_offset", "Int64", "the group's committed offset (null: the group has none)"),
    ("committed_api", "string", "OffsetCommit, OffsetFetch or TxnOffsetCommit"),
    ("client_id", "string", "client of that pair"),
)

_INPUT_COLUMNS: Columns = (
    ("committed_offset", "Int64", "the group's committed offset, newest seen"),
    ("committed_api", "string", "OffsetCommit, OffsetFetch or TxnOffsetCommit"),
    ("committed_time", _TIME, "when that committed offset took effect or was read"),
    ("committed_age_ms", "Float64", "evaluation time minus committed_time"),
    ("log_end_offset", "Int64", "the partition's log-end offset, newest seen"),
    ("log_end_api", "string", "Produce, Fetch or ListOffsets"),
    ("log_end_time", _TIME, "response time of the pair that told it"),
    ("log_end_age_ms", "Float64", "evaluation time minus log_end_time"),
    ("lag", "Int64", "log_end_offset - committed_offset (null: an input unknown or "
     "the log end seen is behind the commit)"),
    ("time_lag_ms", "Float64", "age of the oldest unconsumed record (0: none; null: "
     "its Produce is not in the capture)"),
)  # fmt: skip

SERIES_COLUMNS: Columns = (
    ("capture", "string", "path of the capture file"),
    ("time", _TIME, "evaluation time: a commit, or a change of the log-end offset"),
    ("group_id", "string", "consumer group"),
    ("topic", "string", "topic"),
    ("partition", "Int64", "partition"),
    ("event", "string", "commit or log_end: the input that changed"),
    *_INPUT_COLUMNS,
)

POSITION_COLUMNS: Columns = (
    ("capture", "string", "path of the capture file"),
    ("time", _TIME, "response time of the Fetch"),
    ("client_id", "string", "client of the Fetch"),
    ("group_id", "string", "the group the client's own commits name (null: none or several)"),
    ("topic", "string", "topic"),
    ("partition", "Int64", "partition"),
    ("fetch_offset", "Int64", "the consumer's position when it asked (Fetch request)"),
    ("position", "Int64", "its position once the response's records are in: the last "
     "data record delivered + 1, else fetch_offset"),
    ("high_watermark", "Int64", "the partition's high watermark (Fetch response)"),
    ("position_lag", "Int64", "high_watermark - position, at least 0"),
    ("position_lag_ms", "Float64", "response time minus the Produce request that wrote the "
     "record at position (0: caught up; null: that Produce is not in the capture)"),
)  # fmt: skip

LAG_COLUMNS: Columns = (
    ("capture", "string", "path of the capture file"),
    ("group_id", "string", "consumer group"),
    ("topic", "string", "topic"),
    ("partition", "Int64", "partition"),
    ("end_time", _TIME, "evaluation time: the end of the capture"),
    *_INPUT_COLUMNS,
    ("position_client_id", "string", "client of the group's latest Fetch of the partition"),
    ("position_lag", "Int64", "position lag at that Fetch"),
    ("position_time", _TIME, "response time of that Fetch"),
    ("position_age_ms", "Float64", "end_time minus position_time"),
    ("note", "string", "why a figure is unknown"),
)


# ----------------------------------------------------------------- helpers


def typed(df: pd.DataFrame, columns: Columns) -> pd.DataFrame:
    """``df`` with exactly the contract's columns, in order and of its dtypes."""
    import pandas as pd

    out = {}
    for name, dtype, _ in columns:
        values = df[name] if name in df.columns else pd.Series(None, index=df.index, dtype=object)
        out[name] = values.astype(dtype) if str(values.dtype) != dtype else values
    return pd.DataFrame(out, index=df.index).reset_index(drop=True)


def _ok(parts: pd.DataFrame) -> pd.Series:
    """Pairs answered, without error for the entry."""
    return parts["response_time"].notna() & parts["error_code"].fillna(0).eq(0)


def _ms(delta: pd.Series) -> pd.Series:
    return (delta.dt.total_seconds() * 1000).astype("Float64")


INPUTS = (
    *PARTITION_KEYS, "api_name", "client_id", "group_id", "request_time", "response_time",
    "error_code", "first_offset", "last_offset", "fetch_offset", "high_watermark", "offset",
    "timestamp", "isolation_level", "committed_offset", "transactional_id", "txn_committed",
)  # fmt: skip
"""The partitions table's columns the measures read."""


def _inputs(parts: pd.DataFrame) -> pd.DataFrame:
    """``parts`` with only the columns read (``INPUTS``): the filters and sorts below
    then copy a third of a long capture's table, not all of it."""
    if list(parts.columns) == list(INPUTS):
        return parts
    return parts[list(INPUTS)]


def _limits(events: pd.DataFrame, chosen: Mapping[str, object]) -> Times:
    """Per row of ``events``: its capture's time in ``chosen`` as naive UTC numpy
    datetimes (NaT for captures it does not name), looked up once per capture: a
    per-row lookup walks Python objects, seconds on a long capture's tables."""
    import numpy as np
    import pandas as pd

    captures = events["capture"].astype("category")
    at = pd.to_datetime(
        pd.Series([chosen.get(c) for c in captures.cat.categories], dtype=object), utc=True
    )
    # a code of -1 (no capture) takes the NaT appended last
    limits = np.append(at.dt.tz_convert(None).to_numpy(), np.datetime64("NaT", "ns"))
    return limits[captures.cat.codes.to_numpy()]


def _partition_ids(*frames: pd.DataFrame) -> list[pd.Series]:
    """One integer per (capture, topic, partition), the same across ``frames``: the
    ``by`` key of ``merge_asof``, which otherwise compares the keys as Python objects."""
    import pandas as pd

    keys = pd.concat([f[PARTITION_KEYS] for f in frames], ignore_index=True)
    ids = keys.groupby(PARTITION_KEYS, dropna=False, sort=False).ngroup().to_numpy()
    out, start = [], 0
    for f in frames:
        out.append(pd.Series(ids[start : start + len(f)], index=f.index))
        start += len(f)
    return out


def _capture_ends(parts: pd.DataFrame) -> pd.Series:
    """Latest request or response time per capture."""
    times = parts[["capture", "request_time", "response_time"]]
    latest = times[["request_time", "response_time"]].max(axis=1)
    # observed: a categorical capture column (a lean frame) gives its captures only
    return latest.groupby(times["capture"], observed=True).max()


def evaluation_times(
    parts: pd.DataFrame | Iterable[pd.DataFrame], end: Mapping[str, pd.Timestamp] | None = None
) -> dict[str, pd.Timestamp]:
    """``lag_at_end``'s evaluation time per capture: ``end``'s, else the latest request
    or response time of the capture's partition rows (``parts``: the table, or its rows
    in chunks)."""
    import pandas as pd

    chunks = [parts] if isinstance(parts, pd.DataFrame) else parts
    ends: dict[str, pd.Timestamp] = {}
    for chunk in chunks:
        for capture, at in _capture_ends(chunk).items():
            known = ends.get(capture)
            if known is None or pd.isna(known) or (not pd.isna(at) and at > known):
                ends[capture] = at
    return {**ends, **dict(end or {})}


FETCH_INPUTS = (
    *PARTITION_KEYS, "client_id", "api_name", "request_time", "response_time", "error_code",
    "fetch_offset", "high_watermark",
)  # fmt: skip
"""The columns ``superseded_fetches`` and ``evaluation_times`` read."""
_CLIENT_KEYS = ["capture", "client_id", "topic", "partition"]


def superseded_fetches(
    parts: pd.DataFrame, chosen: Mapping[str, pd.Timestamp], newest: pd.DataFrame | None = None
) -> Mask:
    """Per row (a numpy bool array): a Fetch entry that ``lag_at_end`` at the times
    ``chosen`` (one per capture, as ``evaluation_times`` gives) does not read. Of the
    answered Fetch entries up to its capture's time it reads, per partition, the latest
    of those telling the highest log end (the last event at the highest log end seen is
    the newest that is not stale: ``log_end_events``), and per client and partition the
    latest (its position: a client's group is the one its commits name); ties all kept.
    The rest, most rows of a long capture's table, can be left out before the frame is
    built: the lag is the same.

    ``newest``: ``newest_fetches`` of the whole table when ``parts`` is a chunk of it."""
    if newest is None:
        newest = newest_fetches(parts, chosen)
    fetch, log_end, position = _fetch_reads(parts, chosen)
    keys = parts[_CLIENT_KEYS].reset_index(drop=True)
    top = keys.merge(_newest_of(newest, PARTITION_KEYS), on=PARTITION_KEYS, how="left")
    latest = keys.merge(newest, on=_CLIENT_KEYS, how="left")
    times = parts["response_time"].reset_index(drop=True)
    watermark = parts["high_watermark"].reset_index(drop=True)
    highest = _equal(watermark, top["high_watermark"]) & _equal(times, top["log_end"])
    needed = (log_end & highest) | (position & _equal(times, latest["position"]))
    return fetch & ~needed


def newest_fetches(
    parts: pd.DataFrame | Iterable[pd.DataFrame], chosen: Mapping[str, pd.Timestamp]
) -> pd.DataFrame:
    """Per client and partition (capture, client_id, topic, partition), of its answered
    Fetch entries up to its capture's time that ``lag_at_end`` may read: the highest
    log end told (``high_watermark``), the latest response telling it (``log_end``) and
    the latest response (``position``). ``parts``: the table, or its rows in chunks."""
    import pandas as pd

    chunks = [parts] if isinstance(parts, pd.DataFrame) else parts
    frames = []
    for chunk in chunks:
        _, log_end, position = _fetch_reads(chunk, chosen)
        times = chunk["response_time"]
        read = chunk[[*_CLIENT_KEYS, "high_watermark"]].assign(
            log_end=times.where(log_end), position=times.where(position)
        )
        frames.append(_newest_of(read[log_end], _CLIENT_KEYS))
    if not frames:  # a table without rows
        return pd.DataFrame(columns=[*_CLIENT_KEYS, "high_watermark", "log_end", "position"])
    return _newest_of(pd.concat(frames, ignore_index=True), _CLIENT_KEYS)


def _newest_of(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``newest_fetches`` rows (or single reads) combined per ``keys``: the highest
    ``high_watermark``, the latest ``log_end`` among the rows telling it, the latest
    ``position``."""
    by = [frame[k] for k in keys]
    highest = frame["high_watermark"].groupby(by, dropna=False, observed=True).transform("max")
    at_highest = frame["log_end"].where(frame["high_watermark"].eq(highest).fillna(False))
    grouped = frame.assign(log_end=at_highest).groupby(
        keys, dropna=False, observed=True, sort=False
    )
    return grouped.agg(
        high_watermark=("high_watermark", "max"),
        log_end=("log_end", "max"),
        position=("position", "max"),
    ).reset_index()


def _fetch_reads(
    parts: pd.DataFrame, chosen: Mapping[str, pd.Timestamp]
) -> tuple[Mask, Mask, Mask]:
    """Per row (numpy bool arrays): a Fetch entry; one ``lag_at_end`` may read for its
    log end (answered, with a high watermark, up to its capture's time); and for its
    position (also with a fetch offset)."""
    fetch = parts["api_name"].eq(_FETCH).fillna(False).to_numpy(dtype=bool)
    before = parts["response_time"].dt.tz_convert(None).to_numpy() <= _limits(parts, chosen)
    answered = (_ok(parts) & parts["partition"].notna()).to_numpy(dtype=bool)
    watermark = parts["high_watermark"].ge(0).fillna(False).to_numpy(dtype=bool)
    log_end = fetch & before & answered & watermark
    position = log_end & parts["fetch_offset"].ge(0).fillna(False).to_numpy(dtype=bool)
    return fetch, log_end, position


def evaluation_times_in_table(
    table: pa.Table, end: Mapping[str, pd.Timestamp] | None = None
) -> dict[str, pd.Timestamp]:
    """``evaluation_times`` of the whole partitions table as the core gives it (Arrow),
    on integer codes with numpy."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    capture, captures = _codes(table.column("capture"))
    given = dict(end or {})
    seen_codes = np.unique(capture[capture >= 0])
    if all(captures[c] in given for c in seen_codes.tolist()):
        return given  # every capture's time is given: the table's own are not read
    request = _ints(table.column("request_time").cast(pa.int64()))
    response = _ints(table.column("response_time").cast(pa.int64()))
    named = capture >= 0
    latest = group_max(capture[named], np.maximum(request, response)[named], None,
                        size=len(captures))  # fmt: skip
    seen = np.bincount(capture[named], minlength=len(captures)) > 0
    found = {
        str(c): pd.Timestamp(int(at), tz="UTC") if at != _NONE else pd.NaT
        for c, at, present in zip(captures, latest.tolist(), seen.tolist(), strict=True)
        if present
    }
    return {**found, **given}


def superseded_in_table(table: pa.Table, chosen: Mapping[str, pd.Timestamp]) -> Mask:
    """``superseded_fetches`` of the whole partitions table as the core gives it (Arrow,
    its strings dictionary-encoded), computed on integer codes with numpy: the same
    rows, without a pandas frame of every row (a long capture's table has hundreds of
    thousands, most of them Fetch entries)."""
    import numpy as np

    rows = _FetchRows.of(table, chosen)
    fetch, log_end, position = rows.fetch, rows.log_end, rows.position
    client = dense_ids(rows.partition_id, rows.client)  # per (partition, client_id)
    # per client and partition (``newest_fetches``): the highest log end told, the
    # latest response telling it, the latest response
    hwm = group_max(client, rows.watermark, log_end)
    at_highest = log_end & (rows.watermark == hwm[client])
    told = group_max(client, rows.time, at_highest)
    latest = group_max(client, rows.time, position)
    # per partition (``_newest_of`` of those): the highest of the clients', the latest
    # response telling it
    clients = np.flatnonzero(np.bincount(client, weights=log_end, minlength=len(hwm)) > 0)
    part_of_client = np.zeros(len(hwm), dtype=np.int64)
    part_of_client[client] = rows.partition_id
    parts = part_of_client[clients]
    top = group_max(parts, hwm[clients], None, size=rows.partitions)
    top_told = group_max(parts, told[clients], hwm[clients] == top[parts], size=rows.partitions)
    pid = rows.partition_id
    highest = (rows.watermark == top[pid]) & (rows.time == top_told[pid]) & (top_told[pid] != _NONE)
    newest_position = (rows.time == latest[client]) & (latest[client] != _NONE)
    needed = (log_end & highest) | (position & newest_position)
    return fetch & ~needed


_NONE = -(2**63)
"""Integer columns' stand-in for a null, below every value (so a max skips it)."""


@dataclass(frozen=True, slots=True)
class _FetchRows:
    """The columns ``superseded_in_table`` reads, as numpy arrays: key codes (a null a
    code of its own), response times in ns and high watermarks (``_NONE`` for null),
    and the masks of ``_fetch_reads``."""

    fetch: Mask
    log_end: Mask
    position: Mask
    client: Codes
    """Per row, the code of its client_id."""
    partition_id: Ints
    """Per row, one id per (capture, topic, partition), 0 .. ``partitions`` - 1."""
    partitions: int
    time: Ints
    watermark: Ints

    @classmethod
    def of(cls, table: pa.Table, chosen: Mapping[str, pd.Timestamp]) -> _FetchRows:
        """The arrays of ``table``: each column read, turned into what is kept of it and
        let go before the next (a long capture's column is a few MB each)."""
        import numpy as np
        import pyarrow as pa

        time = _ints(table.column("response_time").cast(pa.int64()))
        capture, captures = _codes(table.column("capture"))
        # a null capture (code -1) takes the limit appended last: none
        limits = np.array([_ns(chosen.get(c)) for c in captures] + [_NONE], dtype=np.int64)
        limit = limits[capture]
        ok = (time != _NONE) & (limit != _NONE) & (time <= limit)
        del limit
        api, apis = _codes(table.column("api_name"))
        fetch = np.isin(api, [i for i, name in enumerate(apis) if name == _FETCH])
        del api
        error = _ints(table.column("error_code"))
        ok &= (error == 0) | (error == _NONE)  # answered without error, up to the time
        del error
        partition = _ints(table.column("partition"))
        ok &= partition != _NONE
        topic, _ = _codes(table.column("topic"))
        partition_id = dense_ids(capture, topic, partition)
        del capture, topic, partition
        watermark = _ints(table.column("high_watermark"))
        log_end = fetch & ok & (watermark >= 0)
        del ok
        offset = _ints(table.column("fetch_offset"))
        position = log_end & (offset >= 0)
        del offset
        client, _ = _codes(table.column("client_id"))
        return cls(
            fetch=fetch,
            log_end=log_end,
            position=position,
            client=client,
            partition_id=partition_id,
            partitions=int(partition_id.max()) + 1 if len(partition_id) else 0,
            time=time,
            watermark=watermark,
        )


def _ns(at: object) -> int:
    import pandas as pd

    if at is None or pd.isna(at):
        return _NONE
    return int(pd.Timestamp(at).value)


def _codes(column: pa.ChunkedArray) -> tuple[Codes, list[str]]:
    """A dictionary (or plain) column's per-row codes (-1: null) and its values."""
    import numpy as np
    import pyarrow as pa

    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    # one dictionary for every chunk: a code means one value throughout
    column = pa.table({"c": column}).unify_dictionaries().column("c")
    chunks = column.chunks
    values = chunks[0].dictionary.to_pylist() if chunks else []
    codes = [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in chunks]
    return (np.concatenate(codes).astype(np.int32) if codes else np.zeros(0, np.int32)), values


def _ints(column: pa.ChunkedArray) -> Ints:
    """An integer column as int64, ``_NONE`` for null."""
    import numpy as np
    import pyarrow as pa

    filled = column.cast(pa.int64()).fill_null(_NONE)
    return np.asarray(filled.to_numpy(), dtype=np.int64)


def dense_ids(*keys: Ints | Codes) -> Ints:
    """One id per distinct combination of the integer ``keys`` (0 .. n - 1), in the
    order of the combinations (the first key most significant)."""
    import numpy as np

    ids = np.zeros(len(keys[0]), dtype=np.int64)
    span = 1  # ids lie in 0 .. span - 1
    for key in keys:
        inverse, count = _ranks(key)
        ids, span = ids * count + inverse, span * count
        if span > _DENSE_SPAN:  # ranked again before the product grows too wide
            ids, span = _ranks(ids)
    ids, _ = _ranks(ids)  # ranks keep the order: the same ids as ranking at each step
    return ids


_DENSE_SPAN = 1 << 24
"""Widest range of ids ``dense_ids`` combines before ranking them again."""


def _ranks(values: Ints | Codes) -> tuple[Ints, int]:
    """Per value, its rank among the distinct ``values`` (as ``np.unique``'s inverse),
    and how many there are. Codes, partitions and the ids built of them lie in a short
    range: ranked by a table over that range, without the sort ``np.unique`` does
    (the sorts were most of the lag's time on a long capture); ``_NONE`` (a null) ranks
    first."""
    import numpy as np

    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        return np.zeros(0, np.int64), 0
    null = values == _NONE
    known = values[~null] if null.any() else values
    lo, hi = (int(known.min()), int(known.max())) if len(known) else (0, 0)
    if hi - lo > 4 * len(values) + 1024:  # a wide range: sort
        unique, inverse = np.unique(values, return_inverse=True)
        return inverse.reshape(-1).astype(np.int64), len(unique)
    shift = 1 if null.any() else 0
    offset = np.where(null, 0, values - lo + shift) if shift else values - lo
    present = np.zeros(hi - lo + 1 + shift, dtype=bool)
    present[offset] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return rank[offset], int(rank[-1]) + 1


def group_max(ids: Ints | Codes, values: Ints, mask: Mask | None, size: int | None = None) -> Ints:
    """Per id (0 .. size - 1): the largest of ``values`` over the rows of ``mask``
    (all when None); ``_NONE`` where none."""
    import numpy as np

    out = np.full(int(ids.max()) + 1 if size is None and len(ids) else size or 0, _NONE, np.int64)
    if mask is None:
        np.maximum.at(out, ids, values)
    else:
        np.maximum.at(out, ids[mask], values[mask])
    return out


def _equal(values: pd.Series, wanted: pd.Series) -> Mask:
    """Per row: its value is the one ``wanted`` (a null never is)."""
    return values.eq(wanted).fillna(False).to_numpy(dtype=bool)


# ----------------------------------------------------------------- inputs


def log_end_events(parts: pd.DataFrame) -> pd.DataFrame:
    """Every log-end offset the capture tells, in time order, but for stale ones (lower
    than one told before: see below) (``LOG_END_COLUMNS``)."""
    import pandas as pd

    parts = _inputs(parts)

    ok, api = _ok(parts) & parts["partition"].notna(), parts["api_name"]
    produce = parts[ok & api.eq(_PRODUCE) & parts["last_offset"].notna()]
    fetch = parts[ok & api.eq(_FETCH) & parts["high_watermark"].ge(0).fillna(False)]
    latest = parts[
        ok
        & api.eq(_LIST_OFFSETS)
        & parts["timestamp"].eq(LATEST_TIMESTAMP).fillna(False)
        & parts["isolation_level"].fillna(READ_UNCOMMITTED).eq(READ_UNCOMMITTED)
        & parts["offset"].ge(0).fillna(False)
    ]
    frames = [
        produce.assign(log_end_offset=produce["last_offset"] + 1),
        fetch.assign(log_end_offset=fetch["high_watermark"]),
        latest.assign(log_end_offset=latest["offset"]),
    ]
    out = pd.concat(frames, ignore_index=True) if any(len(f) for f in frames) else frames[0]
    out = out.rename(columns={"response_time": "time", "api_name": "log_end_api"})
    # equal times: the larger offset is the newer news
    out = out.sort_values(["time", "log_end_offset"], kind="stable")
    # A log end never shrinks. A lower one after a higher one is a response the broker
    # built before the other but whose packets came later (responses on different
    # connections cross on the wire, measured: a Fetch 1 ms behind a newer one): stale.
    seen = out.groupby(list(PARTITION_KEYS), sort=False, dropna=False)["log_end_offset"].cummax()
    out = out[out["log_end_offset"].ge(seen).fillna(True)]
    return typed(out, LOG_END_COLUMNS)


def commit_events(parts: pd.DataFrame) -> pd.DataFrame:
    """Every committed offset the capture tells, in time order (``COMMIT_COLUMNS``)."""
    import pandas as pd

    parts = _inputs(parts)

    known = (
        _ok(parts)
        & parts["group_id"].notna()
        & parts["partition"].notna()
        & parts["committed_offset"].notna()
    )
    direct = parts[known & parts["api_name"].isin(_GROUP_COMMITS)]
    direct = direct.rename(columns={"response_time": "time", "api_name": "committed_api"})
    txn = _transaction_commits(parts[known & parts["api_name"].eq(_TXN_OFFSET_COMMIT)], parts)
    out = pd.concat([direct, txn], ignore_index=True) if len(txn) else direct
    # -1 (OffsetFetch: no offset committed) says the group has none
    out = out.assign(committed_offset=out["committed_offset"].where(out["committed_offset"] >= 0))
    return typed(out.sort_values("time", kind="stable"), COMMIT_COLUMNS)


def _transaction_commits(offsets: pd.DataFrame, parts: pd.DataFrame) -> pd.DataFrame:
    """TxnOffsetCommit entries whose transaction committed, timed at that EndTxn's
    response: the first EndTxn of the same transactional id sent after the
    TxnOffsetCommit was answered, and answered without error."""
    import pandas as pd

    ends = parts[
        parts["api_name"].eq(_END_TXN)
        & _ok(parts)
        & parts["request_time"].notna()
        & parts["transactional_id"].notna()
        & parts["txn_committed"].notna()
    ]
    offsets = offsets[offsets["transactional_id"].notna()]
    if offsets.empty or ends.empty:
        return offsets.iloc[:0].rename(columns={"response_time": "time"})
    keys = ["capture", "transactional_id"]
    ends = ends[[*keys, "request_time", "response_time", "txn_committed"]].rename(
        columns={"request_time": "end_sent", "response_time": "end_answered"}
    )
    matched = pd.merge_asof(
        _plain_keys(offsets.drop(columns="txn_committed"), keys).sort_values("response_time"),
        _plain_keys(ends, keys).sort_values("end_sent"),
        left_on="response_time",
        right_on="end_sent",
        by=keys,
        direction="forward",
    )
    done = matched[matched["txn_committed"].eq(True)]
    return done.assign(time=done["end_answered"], committed_api=_TXN_OFFSET_COMMIT)


def _plain_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``merge_asof`` matches ``by`` keys as plain Python objects."""
    return df.assign(**{k: df[k].astype(object) for k in keys})


def _produced_at(parts: pd.DataFrame, frame: pd.DataFrame, offsets: str) -> pd.Series:
    """Per row of ``frame``: the request time of the Produce (answered without error)
    whose written range holds the row's ``offsets`` value, NaT when none in the capture."""
    import numpy as np
    import pandas as pd

    naive = np.full(len(frame), np.datetime64("NaT", "ns"))
    produced = parts[parts["api_name"].eq(_PRODUCE) & parts["first_offset"].notna()]
    wanted = frame[PARTITION_KEYS].assign(offset=frame[offsets].to_numpy(), row=range(len(frame)))
    wanted = wanted[wanted["offset"].notna()]
    if len(produced) and len(wanted):
        ranges = produced[["first_offset", "last_offset", "request_time"]]
        ranges_id, wanted_id = _partition_ids(produced, wanted)
        ranges = ranges.astype({"first_offset": "int64", "last_offset": "int64"})
        ranges = ranges.assign(key=ranges_id)
        wanted = wanted[["offset", "row"]].astype({"offset": "int64"}).assign(key=wanted_id)
        found = pd.merge_asof(
            wanted.sort_values("offset"),
            ranges.sort_values("first_offset"),
            left_on="offset",
            right_on="first_offset",
            by="key",
            direction="backward",
        )
        found = found[found["last_offset"].ge(found["offset"]).fillna(False)]
        # numpy's naive UTC times: a tz-aware column would go through one object per row
        naive[found["row"].to_numpy()] = found["request_time"].dt.tz_convert(None).to_numpy()
    return pd.Series(naive, index=frame.index).dt.tz_localize("UTC")


def _as_of(frame: pd.DataFrame, events: pd.DataFrame, keys: list[str], at: str) -> pd.DataFrame:
    """``frame`` (sorted by ``time``) with, per row, the columns of the newest of its
    ``keys``' ``events`` (sorted by their time column ``at``) at or before its time; on
    equal times the last event wins."""
    import pandas as pd

    left, right = _plain_keys(frame, keys), _plain_keys(events, keys)
    return pd.merge_asof(left, right, left_on="time", right_on=at, by=keys)


def _measures(frame: pd.DataFrame, parts: pd.DataFrame, at: pd.Series) -> pd.DataFrame:
    """Lag, lag in time and the inputs' ages of rows holding both inputs, at ``at``."""
    committed, log_end = frame["committed_offset"], frame["log_end_offset"]
    lag = (log_end - committed).where((log_end >= committed).fillna(False).astype(bool))
    produced = _produced_at(parts, frame, "committed_offset")
    waited = _ms(at - produced).clip(lower=0)
    caught_up = lag.eq(0).fillna(False).astype(bool)
    time_lag = waited.mask(caught_up, 0.0).where(lag.notna())
    return frame.assign(
        lag=lag,
        time_lag_ms=time_lag,
        committed_age_ms=_ms(at - frame["committed_time"]),
        log_end_age_ms=_ms(at - frame["log_end_time"]),
    )


# ----------------------------------------------------------------- committed lag


def committed_lag(parts: pd.DataFrame) -> pd.DataFrame:
    """Committed lag per group and partition as a time series (``SERIES_COLUMNS``): a row
    at each commit event of the group and partition, and at each change of the
    partition's log-end offset from the group's first commit event on."""
    import pandas as pd

    parts = _inputs(parts)

    commits, ends = commit_events(parts), log_end_events(parts)
    if commits.empty:
        return typed(commits.iloc[:0], SERIES_COLUMNS)
    since = commits.groupby(GROUP_KEYS, dropna=False)["time"].min().rename("since").reset_index()
    changed = ends["log_end_offset"].ne(ends.groupby(PARTITION_KEYS)["log_end_offset"].shift())
    ticks = ends[changed].merge(since, on=PARTITION_KEYS)
    ticks = ticks[ticks["time"] >= ticks["since"]]
    rows = pd.concat(
        [
            commits[[*GROUP_KEYS, "time"]].assign(event="commit"),
            ticks[[*GROUP_KEYS, "time"]].assign(event="log_end"),
        ],
        ignore_index=True,
    ).sort_values("time", kind="stable")
    # A commit and a log-end change at the same instant are one evaluation.
    rows = rows.drop_duplicates([*GROUP_KEYS, "time"], keep="first")
    rows = _as_of(
        rows,
        commits[[*GROUP_KEYS, "time", "committed_offset", "committed_api"]].rename(
            columns={"time": "committed_time"}
        ),
        GROUP_KEYS,
        "committed_time",
    )
    rows = _as_of(
        rows,
        ends[[*PARTITION_KEYS, "time", "log_end_offset", "log_end_api"]].rename(
            columns={"time": "log_end_time"}
        ),
        PARTITION_KEYS,
        "log_end_time",
    )
    rows = rows.astype({k: dtype for k, dtype, _ in SERIES_COLUMNS[:6]})
    return typed(_measures(rows, parts, rows["time"]), SERIES_COLUMNS)


def lag_at_end(
    parts: pd.DataFrame, end: Mapping[str, pd.Timestamp] | None = None, *, reduced: bool = False
) -> pd.DataFrame:
    """Committed lag per group and partition at the end of each capture (``LAG_COLUMNS``),
    with the inputs' ages and the group's latest position lag on the partition.

    ``end``: evaluation time per capture, inputs after it left out (so an earlier time
    gives the lag as of then); by default, and for captures it does not name, the latest
    request or response time of the capture's partition rows. ``reduced``: ``parts``
    already lacks the Fetch entries superseded at those times (``superseded_fetches`` or
    ``superseded_in_table`` of the whole table): not looked for again.
    """
    import pandas as pd

    parts = _inputs(parts)

    chosen = evaluation_times(parts, end)
    if not reduced:
        parts = parts[~superseded_fetches(parts, chosen)]

    def until_end(events: pd.DataFrame) -> pd.DataFrame:
        return events[events["time"].dt.tz_convert(None).to_numpy() <= _limits(events, chosen)]

    commits = until_end(commit_events(parts))
    if commits.empty:  # no lag to tell: the log ends (most rows, often) are not read
        return typed(commits.iloc[:0], LAG_COLUMNS)
    ends = until_end(log_end_events(parts))
    last = commits.drop_duplicates(GROUP_KEYS, keep="last").rename(
        columns={"time": "committed_time"}
    )
    newest = ends.drop_duplicates(PARTITION_KEYS, keep="last").rename(
        columns={"time": "log_end_time"}
    )
    out = last.drop(columns="client_id").merge(
        newest.drop(columns="client_id"), on=PARTITION_KEYS, how="left"
    )
    out["end_time"] = pd.to_datetime(out["capture"].map(chosen).astype(object), utc=True)
    out = _measures(out, parts, out["end_time"])
    out = _with_position(out, until_end(_positions(parts, waits=False)))
    out["note"] = [_note(row) for row in out.itertuples(index=False)]
    return typed(out.sort_values(GROUP_KEYS, kind="stable"), LAG_COLUMNS)


def _with_position(out: pd.DataFrame, positions: pd.DataFrame) -> pd.DataFrame:
    """The group's latest position lag on each partition, with its age."""
    positions = positions[positions["group_id"].notna()]
    latest = positions.drop_duplicates(GROUP_KEYS, keep="last")[
        [*GROUP_KEYS, "client_id", "position_lag", "time"]
    ].rename(columns={"client_id": "position_client_id", "time": "position_time"})
    merged = out.merge(latest, on=GROUP_KEYS, how="left")
    return merged.assign(position_age_ms=_ms(merged["end_time"] - merged["position_time"]))


def _note(row: Any) -> str | None:
    import pandas as pd

    notes = []
    if pd.isna(row.committed_offset):
        notes.append("no committed offset")
    if pd.isna(row.log_end_offset):
        notes.append("no log-end offset seen")
    elif not pd.isna(row.committed_offset) and row.log_end_offset < row.committed_offset:
        notes.append("log-end offset seen is behind the commit")
    if not pd.isna(row.lag) and row.lag > 0 and pd.isna(row.time_lag_ms):
        notes.append(f"offset {int(row.committed_offset)} not seen produced: time lag unknown")
    return "; ".join(notes) or None


# ----------------------------------------------------------------- position lag


def _groups_by_client(parts: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(capture, client_id) -> the group its commits name, when it names exactly one."""
    named = parts[
        parts["group_id"].notna()
        & parts["client_id"].notna()
        & parts["api_name"].isin(_GROUP_COMMITS)
    ]
    out: dict[tuple[str, str], str] = {}
    for (capture, client), groups in named.groupby(["capture", "client_id"])["group_id"]:
        unique = groups.unique()
        if len(unique) == 1:
            out[(capture, client)] = unique[0]
    return out


def _group_of_client(rows: pd.DataFrame, groups: dict[tuple[str, str], str]) -> pd.Series:
    """Per row: the group of its (capture, client_id) in ``groups``, else null; one
    lookup per distinct pair (the rows are a long capture's Fetch entries)."""
    import numpy as np
    import pandas as pd

    keys = rows[["capture", "client_id"]]
    pair_id = keys.groupby(["capture", "client_id"], dropna=False).ngroup().to_numpy()
    _, first = np.unique(pair_id, return_index=True)  # a row of each pair, by pair id
    per_pair = [groups.get((c, k)) for c, k in keys.iloc[first].itertuples(index=False)]
    return pd.Series(per_pair, dtype=object).take(pair_id).set_axis(rows.index)


def position_lag(parts: pd.DataFrame) -> pd.DataFrame:
    """Position lag per Fetch answered without error (``POSITION_COLUMNS``), in
    response-time order: the high watermark minus the consumer's position once the
    response's records are in (as the consumer's records-lag metric counts it)."""
    return _positions(parts, waits=True)


def _positions(parts: pd.DataFrame, *, waits: bool) -> pd.DataFrame:
    """``position_lag``; ``waits=False``: position_lag_ms left null (``lag_at_end``
    reads the rest only: finding the Produce of every Fetch's position was a third of
    its time on a long capture)."""
    parts = _inputs(parts)
    fetch = parts[
        parts["api_name"].eq(_FETCH)
        & _ok(parts)
        & parts["partition"].notna()
        & parts["fetch_offset"].ge(0).fillna(False)
        & parts["high_watermark"].ge(0).fillna(False)
    ]
    fetch = fetch.sort_values("response_time", kind="stable").reset_index(drop=True)
    # last_offset: the last data record delivered at or after fetch_offset
    position = (fetch["last_offset"] + 1).fillna(fetch["fetch_offset"])
    lag = (fetch["high_watermark"] - position).clip(lower=0)
    fetch = fetch.assign(position=position)
    if waits:
        produced = _produced_at(parts, fetch, "position")
        waited = _ms(fetch["response_time"] - produced).clip(lower=0)
        fetch = fetch.assign(position_lag_ms=waited.mask(lag.eq(0).astype(bool), 0.0))
    groups = _groups_by_client(parts)
    out = fetch.assign(
        time=fetch["response_time"],
        group_id=_group_of_client(fetch, groups) if len(fetch) else None,
        position_lag=lag,
    )
    return typed(out, POSITION_COLUMNS)
