"""``lag.lag_at_end`` on Arrow and numpy: the same rows from the partitions rows of the
core (dictionary strings, nanosecond times), without a pandas frame.

A Spark task computes each capture's lag at its end from the partitions rows it keeps
(``spark.analytics.LagRows``); building a pandas frame of them and running the pandas
function was a tenth of the task's work on a long-poll capture, and the task's one use
of pandas. The pandas function (``lag.lag_at_end``) stays the
definition, documented there step by step; this module follows the same steps on
numpy arrays and is tested equal to it on the bundled and shared captures and on
mutants of them (``tests/test_lag_arrow.py``):

* commits: OffsetCommit/OffsetFetch entries answered without error, and TxnOffsetCommit
  entries whose transaction's next EndTxn (sent at or after their response) committed,
  at that EndTxn's response; in time order (stable), up to the capture's time; the
  last per (capture, group_id, topic, partition);
* log ends: Produce (last offset + 1), Fetch (high watermark), ListOffsets (LATEST,
  read_uncommitted), in time then offset order, stale ones (below one told before on
  the partition) dropped, up to the capture's time; the last per partition;
* the Produce that wrote the committed offset: of the Produce rows of the partition,
  the last one, in pandas' (quicksort) order of first offsets, starting at or before it,
  if it reaches it;
* the group's latest position lag on the partition: Fetch entries answered, in
  response-time order (stable), their client's group the one its group commits name.

Keys compare nulls as equal values, as pandas' merges and ``drop_duplicates`` do; the
rows come sorted by (capture, group_id, topic, partition), nulls last. Times in
milliseconds are pandas' ``total_seconds()`` (whole seconds plus the fraction) times
1000, so that the floats are the same to the last bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dissector.analytics.lag import (
    _END_TXN,
    _FETCH,
    _GROUP_COMMITS,
    _LIST_OFFSETS,
    _PRODUCE,
    _TXN_OFFSET_COMMIT,
    INPUTS,
    LAG_COLUMNS,
    LATEST_TIMESTAMP,
    READ_UNCOMMITTED,
    dense_ids,
    group_max,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Ints = npt.NDArray[np.int64]
    Mask = npt.NDArray[np.bool_]

NS_PER_S = 1_000_000_000
_GROUP_COMMITS_T: tuple[str, ...] = tuple(_GROUP_COMMITS)


@dataclass(frozen=True)
class _Text:
    """A string column: per row a code into ``words`` (-1: null)."""

    codes: Ints
    words: list[str]

    def rank(self) -> Ints:
        """Per row: the rank of its word in sorted order, nulls after every word."""
        import numpy as np

        order = sorted(range(len(self.words)), key=self.words.__getitem__)
        ranks = np.empty(len(self.words) + 1, dtype=np.int64)
        ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
        ranks[-1] = len(order)  # code -1 takes the last slot
        return ranks[self.codes]

    def code(self, word: str) -> int:
        """The code of ``word``, or -2 (matches no row) when no row has it."""
        return self.words.index(word) if word in self.words else -2

    def among(self, words: tuple[str, ...]) -> Mask:
        import numpy as np

        return np.isin(self.codes, [self.code(w) for w in words])

    def array(self, rows: Ints) -> pa.Array:
        """The words of ``rows`` (-1: a null row) as a string array."""
        import numpy as np
        import pyarrow as pa

        codes = self.codes[rows] if len(rows) else np.zeros(0, dtype=np.int64)
        missing = (rows < 0) | (codes < 0) if len(rows) else np.zeros(0, dtype=bool)
        indices = pa.array(np.where(missing, 0, codes), mask=missing)
        words = pa.array(self.words or [""], pa.string())
        return words.take(indices)


@dataclass(frozen=True)
class _Ints:
    """An int64 (or timestamp, as ns) column: values (0 where null) and validity."""

    values: Ints
    valid: Mask

    def at(self, rows: Ints) -> _Ints:
        """The values of ``rows`` (-1: null)."""
        import numpy as np

        inside = rows >= 0
        picked = np.where(inside, rows, 0)
        return _Ints(np.where(inside, self.values[picked], 0), inside & self.valid[picked])


def _text(table: pa.Table, name: str) -> _Text:
    import numpy as np
    import pyarrow as pa

    column = table.column(name)
    array = column.chunk(0) if column.num_chunks else pa.array([], pa.string())
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    codes = np.asarray(array.indices.fill_null(-1), dtype=np.int64)
    return _Text(codes, [str(w) for w in array.dictionary.to_pylist()])


def _ints(table: pa.Table, name: str) -> _Ints:
    import numpy as np
    import pyarrow as pa

    column = table.column(name)
    array = column.chunk(0) if column.num_chunks else pa.array([], pa.int64())
    if pa.types.is_timestamp(array.type):
        array = array.view(pa.int64())
    elif pa.types.is_boolean(array.type):
        array = array.cast(pa.int64())
    valid = np.asarray(array.is_valid(), dtype=bool)
    return _Ints(np.asarray(array.fill_null(0), dtype=np.int64), valid)


@dataclass(frozen=True)
class _Parts:
    """The partitions rows lag reads (``lag.INPUTS``), as numpy columns."""

    capture: _Text
    topic: _Text
    api: _Text
    client: _Text
    group: _Text
    txid: _Text
    partition: _Ints
    request_time: _Ints
    response_time: _Ints
    error_code: _Ints
    first_offset: _Ints
    last_offset: _Ints
    fetch_offset: _Ints
    high_watermark: _Ints
    offset: _Ints
    timestamp: _Ints
    isolation_level: _Ints
    committed_offset: _Ints
    txn_committed: _Ints

    @classmethod
    def of(cls, table: pa.Table) -> _Parts:
        rows = table.unify_dictionaries().combine_chunks()
        return cls(
            capture=_text(rows, "capture"),
            topic=_text(rows, "topic"),
            api=_text(rows, "api_name"),
            client=_text(rows, "client_id"),
            group=_text(rows, "group_id"),
            txid=_text(rows, "transactional_id"),
            partition=_ints(rows, "partition"),
            request_time=_ints(rows, "request_time"),
            response_time=_ints(rows, "response_time"),
            error_code=_ints(rows, "error_code"),
            first_offset=_ints(rows, "first_offset"),
            last_offset=_ints(rows, "last_offset"),
            fetch_offset=_ints(rows, "fetch_offset"),
            high_watermark=_ints(rows, "high_watermark"),
            offset=_ints(rows, "offset"),
            timestamp=_ints(rows, "timestamp"),
            isolation_level=_ints(rows, "isolation_level"),
            committed_offset=_ints(rows, "committed_offset"),
            txn_committed=_ints(rows, "txn_committed"),
        )

    @property
    def ok(self) -> Mask:
        """Answered, without error for the entry (``lag._ok``)."""
        error = self.error_code
        return self.response_time.valid & (~error.valid | (error.values == 0))

    def keys(self, rows: Ints, group: Ints | None = None) -> list[Ints]:
        """(capture, [group,] topic, partition) of ``rows`` as int64 columns, null a
        value of its own (``group``: the group codes to use instead of the rows')."""
        import numpy as np

        partition = self.partition
        columns = [self.capture.codes[rows]]
        if group is not None:
            columns.append(group)
        columns.append(self.topic.codes[rows])
        columns.append(np.where(partition.valid[rows], 0, 1))
        columns.append(partition.values[rows])
        return columns


def _ids(*key_sets: list[Ints]) -> list[Ints]:
    """One id per distinct key (columns of equal count), the same across ``key_sets``."""
    import numpy as np

    sizes = [len(keys[0]) for keys in key_sets]
    columns = [np.concatenate(c) for c in zip(*key_sets, strict=True)]
    packed = np.zeros(sum(sizes), dtype=np.int64)
    bits = 0
    for column in columns:
        low = int(column.min(initial=0))
        width = (int(column.max(initial=0)) - low).bit_length()
        bits += width
        if bits > 62:  # too wide to pack: (ids so far, column) ranked, column by column
            packed = np.zeros(sum(sizes), dtype=np.int64)
            for column in columns:
                _, codes = np.unique(column, return_inverse=True)
                pair = packed * (int(codes.max(initial=0)) + 1) + codes.reshape(-1)
                _, packed = np.unique(pair, return_inverse=True)
                packed = packed.reshape(-1).astype(np.int64)
            break
        packed = (packed << width) | (column - low)
    _, ids = np.unique(packed, return_inverse=True)
    return np.split(ids.reshape(-1).astype(np.int64), np.cumsum(sizes)[:-1])


def _last_of(ids: Ints) -> Ints:
    """Positions of the last row of each id, in row order (``drop_duplicates(keep=
    "last")``)."""
    import numpy as np

    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    _, first_reversed = np.unique(ids[::-1], return_index=True)
    return np.sort(len(ids) - 1 - first_reversed)


def _found(ids: Ints, wanted: Ints) -> Ints:
    """Per ``wanted`` id: the position of the row of ``ids`` (distinct) with it, or -1."""
    import numpy as np

    order = np.argsort(ids, kind="stable")
    at = np.searchsorted(ids[order], wanted)
    at = np.minimum(at, max(len(ids) - 1, 0))
    hit = (ids[order][at] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
    return np.where(hit, order[at] if len(ids) else 0, -1)


@dataclass(frozen=True)
class _Events:
    """Input events, in time order: the partitions row each comes from, its time."""

    rows: Ints
    times: Ints


def _before(parts: _Parts, events: _Events, limits: _Ints) -> Mask:
    """Per event: at or before its capture's time (``lag_at_end.until_end``); a row
    without a capture, or of a capture without a time, never is."""
    capture = parts.capture.codes[events.rows]
    known = (capture >= 0) & limits.valid[capture]
    return known & (events.times <= limits.values[capture])


def _kept(events: _Events, keep: Mask) -> _Events:
    return _Events(events.rows[keep], events.times[keep])


def _pick(values: Ints, at: Ints) -> _Ints:
    """``values[at]``, null where ``at`` is -1 (``_found``'s miss)."""
    import numpy as np

    hit = at >= 0
    picked = values[np.maximum(at, 0)] if len(values) else np.zeros(len(at), dtype=np.int64)
    return _Ints(np.where(hit, picked, 0), hit)


def _commits(parts: _Parts) -> tuple[_Events, Ints]:
    """Every committed offset told (``lag.commit_events``) and its offset (-1: none)."""
    import numpy as np

    known = (
        parts.ok & (parts.group.codes >= 0) & parts.partition.valid & parts.committed_offset.valid
    )
    direct = np.flatnonzero(known & parts.api.among(_GROUP_COMMITS_T))
    rows, times = [direct], [parts.response_time.values[direct]]
    txn_rows, txn_times = _transaction_commits(parts, known)
    if len(txn_rows):
        rows.append(txn_rows)
        times.append(txn_times)
    all_rows, all_times = np.concatenate(rows), np.concatenate(times)
    order = np.argsort(all_times, kind="stable")
    events = _Events(all_rows[order], all_times[order])
    offsets = parts.committed_offset.values[events.rows]
    return events, np.where(offsets >= 0, offsets, -1)


def _transaction_commits(parts: _Parts, known: Mask) -> tuple[Ints, Ints]:
    """TxnOffsetCommit rows whose transaction committed, and the time (the response to
    the first EndTxn of their transactional id sent at or after their response,
    answered without error) (``lag._transaction_commits``); in their response order."""
    import numpy as np

    api = parts.api.codes
    offsets = np.flatnonzero(
        known & (api == parts.api.code(_TXN_OFFSET_COMMIT)) & (parts.txid.codes >= 0)
    )
    ends = np.flatnonzero(
        (api == parts.api.code(_END_TXN))
        & parts.ok
        & parts.request_time.valid
        & (parts.txid.codes >= 0)
        & parts.txn_committed.valid
    )
    empty = np.zeros(0, dtype=np.int64)
    if len(offsets) == 0 or len(ends) == 0:
        return empty, empty
    offsets = offsets[np.argsort(parts.response_time.values[offsets], kind="stable")]
    ends = ends[np.argsort(parts.request_time.values[ends], kind="stable")]
    key_of = [[parts.capture.codes[r], parts.txid.codes[r]] for r in (offsets, ends)]
    offset_ids, end_ids = _ids(*key_of)
    sent = parts.request_time.values[ends]
    kept_rows, kept_times = [], []
    for i, row in enumerate(offsets):
        same = np.flatnonzero(end_ids == offset_ids[i])
        later = same[sent[same] >= parts.response_time.values[row]]
        if len(later) == 0:
            continue
        end = ends[later[0]]
        if parts.txn_committed.values[end] == 1:
            kept_rows.append(row)
            kept_times.append(parts.response_time.values[end])
    return np.asarray(kept_rows, dtype=np.int64), np.asarray(kept_times, dtype=np.int64)


def _log_ends(parts: _Parts) -> tuple[_Events, Ints]:
    """Every log-end offset told but stale ones (``lag.log_end_events``), with it."""
    import numpy as np

    ok = parts.ok & parts.partition.valid
    api = parts.api.codes
    produce = np.flatnonzero(ok & (api == parts.api.code(_PRODUCE)) & parts.last_offset.valid)
    watermark = parts.high_watermark
    fetch = np.flatnonzero(
        ok & (api == parts.api.code(_FETCH)) & watermark.valid & (watermark.values >= 0)
    )
    level, offset = parts.isolation_level, parts.offset
    latest = np.flatnonzero(
        ok
        & (api == parts.api.code(_LIST_OFFSETS))
        & parts.timestamp.valid
        & (parts.timestamp.values == LATEST_TIMESTAMP)
        & (~level.valid | (level.values == READ_UNCOMMITTED))
        & offset.valid
        & (offset.values >= 0)
    )
    rows = np.concatenate([produce, fetch, latest])
    told = np.concatenate(
        [parts.last_offset.values[produce] + 1, watermark.values[fetch], offset.values[latest]]
    )
    times = parts.response_time.values[rows]
    order = np.lexsort((told, times))  # stable: time, then the larger offset last
    rows, told, times = rows[order], told[order], times[order]
    (ids,) = _ids(parts.keys(rows))
    seen = np.empty_like(told)
    by_partition = np.argsort(ids, kind="stable")
    bounds = np.flatnonzero(np.diff(ids[by_partition])) + 1
    for positions in np.split(by_partition, bounds):
        seen[positions] = np.maximum.accumulate(told[positions])
    fresh = told >= seen
    return _Events(rows[fresh], times[fresh]), told[fresh]


def _produced_at(parts: _Parts, rows: Ints, offsets: Ints) -> _Ints:
    """Per (partitions row, offset): the request time of the Produce of its partition
    whose written range holds the offset (``lag._produced_at``)."""
    import numpy as np

    out = _Ints(np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=bool))
    produced = np.flatnonzero(
        (parts.api.codes == parts.api.code(_PRODUCE)) & parts.first_offset.valid
    )
    wanted = np.flatnonzero(offsets >= 0)
    if len(produced) == 0 or len(wanted) == 0:
        return out
    # pandas sorts the ranges by first offset with numpy's quicksort: the same order
    produced = produced[np.argsort(parts.first_offset.values[produced], kind="quicksort")]
    produced_ids, wanted_ids = _ids(parts.keys(produced), parts.keys(rows[wanted]))
    first = parts.first_offset.values[produced]
    for i, at in enumerate(wanted):
        same = np.flatnonzero(produced_ids == wanted_ids[i])
        k = int(np.searchsorted(first[same], offsets[at], side="right")) - 1
        if k < 0:
            continue
        row = produced[same[k]]
        last = parts.last_offset
        if last.valid[row] and last.values[row] >= offsets[at]:
            out.values[at] = parts.request_time.values[row]
            out.valid[at] = parts.request_time.valid[row]
    return out


def _groups_of_clients(parts: _Parts, rows: Ints) -> Ints:
    """Per row: the code of the one group its (capture, client_id) names in group
    commits, -1 when none or several (``lag._groups_by_client``)."""
    import numpy as np

    named = np.flatnonzero(
        (parts.group.codes >= 0)
        & (parts.client.codes >= 0)
        & (parts.capture.codes >= 0)
        & parts.api.among(_GROUP_COMMITS_T)
    )
    groups: dict[tuple[int, int], set[int]] = {}
    for row in named:
        key = (int(parts.capture.codes[row]), int(parts.client.codes[row]))
        groups.setdefault(key, set()).add(int(parts.group.codes[row]))
    one = {key: next(iter(g)) for key, g in groups.items() if len(g) == 1}
    pairs = zip(parts.capture.codes[rows].tolist(), parts.client.codes[rows].tolist(), strict=True)
    return np.asarray([one.get(p, -1) for p in pairs], dtype=np.int64)


def _positions(parts: _Parts, limits: _Ints) -> tuple[_Events, Ints, Ints]:
    """Fetch entries answered with a position, up to their capture's time, whose
    client's group is known: (events, group codes, position lags) (``lag._positions``)."""
    import numpy as np

    watermark, fetched = parts.high_watermark, parts.fetch_offset
    rows = np.flatnonzero(
        (parts.api.codes == parts.api.code(_FETCH))
        & parts.ok
        & parts.partition.valid
        & fetched.valid
        & (fetched.values >= 0)
        & watermark.valid
        & (watermark.values >= 0)
    )
    rows = rows[np.argsort(parts.response_time.values[rows], kind="stable")]
    events = _Events(rows, parts.response_time.values[rows])
    events = _kept(events, _before(parts, events, limits))
    rows = events.rows
    last = parts.last_offset
    position = np.where(last.valid[rows], last.values[rows] + 1, fetched.values[rows])
    lag = np.maximum(watermark.values[rows] - position, 0)
    group = _groups_of_clients(parts, rows)
    known = group >= 0
    return _Events(rows[known], events.times[known]), group[known], lag[known]


def _ms(delta: Ints) -> npt.NDArray[np.float64]:
    """Nanoseconds as milliseconds, as pandas' ``Series.dt.total_seconds() * 1000``."""
    import numpy as np

    seconds, residual = np.divmod(delta, NS_PER_S)
    result = seconds + residual / NS_PER_S
    if len(delta) and np.abs(delta).max() > 2**53:
        # pandas nudges a result that rounded onto a whole second off it
        fixable = (residual != 0) & (np.abs(seconds) < 2**52)
        whole = seconds.astype(np.float64)
        result = np.where(fixable & (result == whole), np.nextafter(result, result + 1), result)
        result = np.where(fixable & (result == whole + 1), np.nextafter(result, result - 1), result)
    return np.asarray(result * 1000, dtype=np.float64)


def _limits(parts: _Parts, end: Mapping[str, int] | None) -> _Ints:
    """Per capture code: the evaluation time (``lag.evaluation_times``): ``end``'s,
    else the latest request or response time of its rows."""
    import numpy as np

    words = parts.capture.words
    values = np.zeros(len(words), dtype=np.int64)
    valid = np.zeros(len(words), dtype=bool)
    for times in (parts.request_time, parts.response_time):
        rows = np.flatnonzero(times.valid & (parts.capture.codes >= 0))
        codes = parts.capture.codes[rows]
        floor = np.full(len(words), np.iinfo(np.int64).min)
        np.maximum.at(floor, codes, times.values[rows])
        seen = np.zeros(len(words), dtype=bool)
        seen[codes] = True
        values = np.where(seen & (~valid | (floor > values)), floor, values)
        valid |= seen
    for i, word in enumerate(words):
        if end is not None and word in end:
            values[i], valid[i] = end[word], True
    return _Ints(values, valid)


def lag_at_end_arrow(table: pa.Table, end: Mapping[str, int] | None = None) -> pa.Table:
    """``lag.lag_at_end`` of a partitions table of the core (at least ``lag.INPUTS``;
    dictionary or plain strings, timestamps) as Arrow: ``LAG_COLUMNS`` in order, strings,
    int64, float64 and UTC nanosecond timestamps. ``end``: each capture's evaluation
    time, nanoseconds since the epoch (else its latest request or response time).
    Every Fetch row is read: give ``LagRows``' rows, or the whole table."""
    import numpy as np

    parts = _Parts.of(table)
    limits = _limits(parts, end)
    commits, committed = _commits(parts)
    keep = _before(parts, commits, limits)
    commits, committed = _kept(commits, keep), committed[keep]
    if len(commits.rows) == 0:
        return _empty()
    (commit_ids,) = _ids(parts.keys(commits.rows, parts.group.codes[commits.rows]))
    last = _last_of(commit_ids)
    rows, committed_time, committed = commits.rows[last], commits.times[last], committed[last]

    ends, told = _log_ends(parts)
    keep = _before(parts, ends, limits)
    ends, told = _kept(ends, keep), told[keep]
    end_ids, wanted = _ids(parts.keys(ends.rows), parts.keys(rows))
    newest = _last_of(end_ids)
    at = _found(end_ids[newest], wanted)
    log_end_row = _pick(ends.rows[newest], at)
    log_end, log_end_time = _pick(told[newest], at), _pick(ends.times[newest], at)

    limit = limits.values[parts.capture.codes[rows]]
    has_commit = committed >= 0
    lag_valid = has_commit & log_end.valid & (log_end.values >= committed)
    lag = _Ints(np.where(lag_valid, log_end.values - committed, 0), lag_valid)
    produced = _produced_at(parts, rows, committed)
    waited = np.maximum(_ms(limit - produced.values), 0.0)

    positions, position_group, position_lag = _positions(parts, limits)
    position_ids, wanted = _ids(
        parts.keys(positions.rows, position_group), parts.keys(rows, parts.group.codes[rows])
    )
    latest = _last_of(position_ids)
    at = _found(position_ids[latest], wanted)
    out = _Row(
        rows=rows,
        limit=limit,
        committed=_Ints(np.where(has_commit, committed, 0), has_commit),
        committed_time=committed_time,
        log_end_row=np.where(log_end_row.valid, log_end_row.values, -1),
        log_end=log_end,
        log_end_time=log_end_time,
        lag=lag,
        time_lag=np.where(lag.values == 0, 0.0, waited),
        time_lag_valid=lag_valid & ((lag.values == 0) | produced.valid),
        position_row=np.where(at >= 0, _pick(positions.rows[latest], at).values, -1),
        position_lag=_pick(position_lag[latest], at),
        position_time=_pick(positions.times[latest], at),
    )
    return _table(parts, out)


@dataclass(frozen=True)
class _Row:
    """The lag rows' columns before they are Arrow, one entry per (group, partition)."""

    rows: Ints  # the commit's partitions row: capture, group_id, topic, partition, api
    limit: Ints
    committed: _Ints
    committed_time: Ints
    log_end_row: Ints  # -1: no log end seen
    log_end: _Ints
    log_end_time: _Ints
    lag: _Ints
    time_lag: npt.NDArray[np.float64]
    time_lag_valid: Mask
    position_row: Ints  # -1: no position
    position_lag: _Ints
    position_time: _Ints


def _notes(out: _Row) -> list[str | None]:
    """Why a figure is unknown (``lag._note``), per row."""
    notes: list[str | None] = []
    for i in range(len(out.rows)):
        said = []
        if not out.committed.valid[i]:
            said.append("no committed offset")
        if not out.log_end.valid[i]:
            said.append("no log-end offset seen")
        elif out.committed.valid[i] and out.log_end.values[i] < out.committed.values[i]:
            said.append("log-end offset seen is behind the commit")
        if out.lag.valid[i] and out.lag.values[i] > 0 and not out.time_lag_valid[i]:
            offset = int(out.committed.values[i])
            said.append(f"offset {offset} not seen produced: time lag unknown")
        notes.append("; ".join(said) or None)
    return notes


def _table(parts: _Parts, out: _Row) -> pa.Table:
    """The lag rows as Arrow, sorted by (capture, group_id, topic, partition)."""
    import numpy as np
    import pyarrow as pa

    rows = out.rows
    order = np.lexsort(
        (
            parts.partition.values[rows],
            ~parts.partition.valid[rows],
            parts.topic.rank()[rows],
            parts.group.rank()[rows],
            parts.capture.rank()[rows],
        )
    )
    stamp = pa.timestamp("ns", tz="UTC")

    def ints(values: _Ints, kind: pa.DataType | None = None) -> pa.Array:
        array = pa.array(values.values[order], mask=~values.valid[order])
        return array if kind is None else array.view(kind)

    def floats(values: npt.NDArray[np.float64], valid: Mask) -> pa.Array:
        return pa.array(values[order], pa.float64(), mask=~valid[order])

    everywhere = np.ones(len(rows), dtype=bool)
    notes = _notes(out)
    limit = _Ints(out.limit, everywhere)
    committed_time = _Ints(out.committed_time, everywhere)
    log_end_age = _ms(out.limit - out.log_end_time.values)
    position_age = _ms(out.limit - out.position_time.values)
    columns = {
        "capture": parts.capture.array(rows[order]),
        "group_id": parts.group.array(rows[order]),
        "topic": parts.topic.array(rows[order]),
        "partition": ints(_Ints(parts.partition.values[rows], parts.partition.valid[rows])),
        "end_time": ints(limit, stamp),
        "committed_offset": ints(out.committed),
        "committed_api": parts.api.array(rows[order]),
        "committed_time": ints(committed_time, stamp),
        "committed_age_ms": floats(_ms(out.limit - out.committed_time), everywhere),
        "log_end_offset": ints(out.log_end),
        "log_end_api": parts.api.array(out.log_end_row[order]),
        "log_end_time": ints(out.log_end_time, stamp),
        "log_end_age_ms": floats(log_end_age, out.log_end_time.valid),
        "lag": ints(out.lag),
        "time_lag_ms": floats(out.time_lag, out.time_lag_valid),
        "position_client_id": parts.client.array(out.position_row[order]),
        "position_lag": ints(out.position_lag),
        "position_time": ints(out.position_time, stamp),
        "position_age_ms": floats(position_age, out.position_time.valid),
        "note": pa.array([notes[i] for i in order], pa.string()),
    }
    if list(columns) != [c[0] for c in LAG_COLUMNS]:  # the contract and this must agree
        raise RuntimeError("lag_at_end_arrow's columns differ from LAG_COLUMNS")
    return pa.table(columns)


def _empty() -> pa.Table:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "Int64": pa.int64(),
        "Float64": pa.float64(),
        "datetime64[ns, UTC]": pa.timestamp("ns", tz="UTC"),
    }
    return pa.schema([pa.field(n, types[t]) for n, t, _ in LAG_COLUMNS]).empty_table()


# ---------------------------------------------------------------------------
# The rows the lag reads, batch by batch
# ---------------------------------------------------------------------------
# A consumer that keeps the partitions table's rows as the core's batches come (a
# Spark task, a report) keeps only those: most of a long capture's rows are Fetch
# entries the lag never reads.


def lag_inputs(partitions: pa.Table) -> pa.Table:
    """The columns of a partitions batch that ``lag.lag_at_end`` reads
    (``lag.INPUTS``), in one chunk per column with one dictionary each."""
    return partitions.select(list(INPUTS)).unify_dictionaries().combine_chunks()


def column_codes(column: pa.ChunkedArray) -> Ints:
    """A one-chunk dictionary column's indices as numpy int64, -1 for null (a group
    of its own, as ``groupby(dropna=False)`` has it)."""
    import numpy as np
    import pyarrow as pa

    indices = column.chunk(0).indices if column.num_chunks else pa.array([], pa.int32())
    return np.asarray(indices.fill_null(-1) if indices.null_count else indices, dtype=np.int64)


def column_int64s(column: pa.ChunkedArray, fill: int) -> Ints:
    """A one-chunk int64 (or timestamp) column as numpy int64, ``fill`` for null."""
    import numpy as np
    import pyarrow as pa

    array = column.chunk(0) if column.num_chunks else pa.array([], pa.int64())
    if pa.types.is_timestamp(array.type):
        array = array.view(pa.int64())
    return np.asarray(array.fill_null(fill) if array.null_count else array, dtype=np.int64)


def is_fetch(rows: pa.Table) -> Mask:
    """Per row of a ``lag_inputs`` table (numpy bool): a Fetch entry."""
    words = rows.column("api_name").chunk(0).dictionary.to_pylist()
    return column_codes(rows.column("api_name")) == (words.index(_FETCH) if _FETCH in words else -2)


def needed_fetches(rows: pa.Table) -> Ints:
    """Positions (numpy) of the Fetch rows of ``rows`` (``lag_inputs``) that
    ``lag.lag_at_end`` may read at its default evaluation time (the capture's end,
    which no row is after): ``lag.superseded_fetches``' rule. Of the answered Fetch
    entries with a high watermark (its ``log_end`` reads), per (capture, client_id,
    topic, partition) the latest of those at the highest high watermark, and the
    latest with a fetch offset (its ``position`` reads); ties all kept. A row this
    drops from part of a capture's rows ``superseded_fetches`` drops from all of them:
    a later or higher one in the part is one in the whole (a row at the partition's
    highest watermark is at its client's highest too). So ``lag_at_end`` of what is
    kept, batch after batch, is ``lag_at_end`` of the whole table."""
    import numpy as np

    if rows.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    fetch = is_fetch(rows)
    times = column_int64s(rows.column("response_time"), np.iinfo(np.int64).min)
    watermark = column_int64s(rows.column("high_watermark"), -1)
    log_end = (
        fetch
        & np.asarray(rows.column("response_time").is_valid())
        & (column_int64s(rows.column("error_code"), 0) == 0)
        & np.asarray(rows.column("partition").is_valid())
        & (watermark >= 0)
    )
    at = np.flatnonzero(log_end)
    if at.size == 0:
        return at
    keys = [column_codes(rows.column(c))[at] for c in ("capture", "client_id", "topic")]
    group = dense_ids(*keys, column_int64s(rows.column("partition"), 0)[at])
    groups = int(group.max()) + 1
    time, watermark = times[at], watermark[at]
    at_highest = watermark == group_max(group, watermark, None, groups)[group]
    latest_at_highest = group_max(group, time, at_highest, groups)[group]
    position = column_int64s(rows.column("fetch_offset"), -1)[at] >= 0
    latest_position = group_max(group, time, position, groups)[group]
    kept = (at_highest & (time == latest_at_highest)) | (position & (time == latest_position))
    return at[kept]
