"""Kafka record data: magic 0/1 message sets and magic 2 record batches.

``parse_records(data)`` reads the bytes of a Kafka field of type ``records`` (Produce
request, Fetch response, ...) and returns a :class:`RecordSet`: counts, codecs and
anomalies, plus every batch and record when ``expand=True``.

Rules it keeps, whatever the bytes:

* It never raises and never hangs. Anomalies go to ``RecordSet.errors`` as
  ``"<snake_case_code>: <detail>"`` strings (codes in :data:`ERROR_CODES`).
* Allocation is bounded by the input plus ``max_decompressed``, a budget shared by
  every decompression in one call, or in one frame when the caller passes the same
  :class:`Budget` to every ``records`` field of it (``frame_budget()`` does that for
  the decoder's records hook). gzip streams through zlib's ``max_length``; the other
  codecs decompress into a buffer that may grow up to the budget, never past it. A
  decompression that fails or overruns the budget is charged what it produced (an
  upper bound where the codec cannot tell), so a frame of many small bombs costs
  no more than one: work stays linear in input plus budget.
* A compressed v2 batch past the budget is reported (``decompression_limit``) and
  counted by its header's records count, the only count left.
* Counts and lengths read from the wire are checked against the bytes that remain
  before anything is sized from them. With ``expand=True`` the kept batches
  and records are bounded too (``ITEM_BUDGET_FACTOR * max_decompressed``, error
  ``expand_limit``): past that, records are counted but not kept.
* Without ``expand`` nothing per record is built: a batch is counted by walking the
  length prefixes of its records, which also checks the header's records count, and
  each record's fields are read (not kept), so both modes report the same anomalies.
* A batch whose declared length runs past the end of the data is a *partial* batch
  (brokers cut Fetch responses at the byte limit), counted in ``partial_batches``,
  not an error, and its records are not counted: franz-go and Kafka's clients do the
  same. The same cut inside a decompressed message set is an error.
* CRCs (CRC-32C for magic 2, CRC-32 for magic 0/1) are checked and reported, never
  fatal.

Every entry of a record set starts with ``offset int64, length int32`` and keeps its
magic byte at byte 16, so one framing loop serves all three formats and an anomaly
inside one entry never desynchronises the next.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import cramjam

from dissector.json_values import jsonable
from dissector.protocol.varint import VarintError, read_uvarint

__all__ = [
    "CODEC_NAMES",
    "CONTROL_TYPES",
    "ERROR_CODES",
    "MAX_DECOMPRESSED",
    "Budget",
    "RecordSet",
    "current_frame_budget",
    "frame_budget",
    "parse_records",
]

CODEC_NAMES: Final[tuple[str, ...]] = ("none", "gzip", "snappy", "lz4", "zstd")

# Kafka's ControlRecordType (clients/.../record/ControlRecordType.java): the int16
# "type" in a control record's key. No installed package ships this table; ABORT and
# COMMIT are checked against kafka-python's reader in the tests.
CONTROL_TYPES: Final[dict[int, str]] = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

ERROR_CODES: Final[frozenset[str]] = frozenset(
    {
        "bad_input",  # not bytes, bytearray or memoryview
        "bad_batch_length",  # entry length too small for its header, or negative
        "bad_message_size",  # magic 0/1 message shorter than its fixed fields
        "bad_length",  # key/value/header length below -1
        "bad_record_count",  # negative records count in a v2 header
        "bad_header_count",  # header count negative or larger than the bytes left
        "bad_header_key",  # null header key
        "bad_varint",  # varint longer than its type allows, or cut off
        "bad_compressed_message",  # compressed magic 0/1 wrapper with null value
        "crc_mismatch",
        "decompression_failed",
        "decompression_limit",  # would exceed max_decompressed
        "unknown_codec",
        "unknown_magic",
        "nesting_too_deep",  # compressed message inside compressed message, too deep
        "record_count_mismatch",  # v2 header count differs from records found
        "record_length_mismatch",  # record fields do not end where its length says
        "bad_record_length",  # v2 record shorter than its six one-byte minimum fields
        "expand_limit",  # expand=True stopped keeping records: item budget spent
        "message_size_mismatch",  # magic 0/1 fields do not end where its size says
        "trailing_bytes",  # bytes after the last record of a batch
        "truncated_record",  # record runs past the end of its batch
        "truncated_batch",  # entry cut short inside a decompressed message set
        "too_many_errors",
        "internal_error",  # a bug here; the result holds what was read before it
    }
)

MAX_ERRORS: Final = 64
MAX_DECOMPRESSED: Final = 64 * 1024 * 1024  # default budget of one call or one frame
# A large frame (a 50 MB Fetch response) may decompress to this many times its size:
# still linear in the input, and far below a bomb's 10 000:1.
FRAME_RATIO: Final = 32
# ... but never past this many bytes, whatever the frame's size (issue #21: a 32 MB
# frame of bombs bought 1 GiB of output and 2.3 GB of memory). Below max_decompressed
# it has no effect: raising max_decompressed raises the cap with it.
FRAME_BUDGET_CAP: Final = 256 * 1024 * 1024
# expand=True keeps records as Python objects, several times the size of their bytes:
# bound them too, by ITEM_BUDGET_FACTOR * max_decompressed at ITEM_OVERHEAD + length
# bytes each (a dict of ten entries and its strings take about that).
ITEM_BUDGET_FACTOR: Final = 4
ITEM_OVERHEAD: Final = 512
_V2_MIN_RECORD: Final = 6
MAX_NESTING: Final = 2  # Kafka itself allows one level of wrapper messages

_ENTRY = struct.Struct(">qi")  # offset/baseOffset, size/batchLength
_MAGIC_AT: Final = 16
_I32 = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")


def _compile(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], struct.Struct]:
    return tuple(n for n, _ in fields), struct.Struct(">" + "".join(f for _, f in fields))


# Fixed headers as data: (name, struct format), compiled once.
_V2_NAMES, _V2 = _compile(
    (
        ("base_offset", "q"),
        ("batch_length", "i"),
        ("partition_leader_epoch", "i"),
        ("magic", "b"),
        ("crc", "I"),
        ("attributes", "h"),
        ("last_offset_delta", "i"),
        ("first_timestamp", "q"),
        ("max_timestamp", "q"),
        ("producer_id", "q"),
        ("producer_epoch", "h"),
        ("base_sequence", "i"),
        ("record_count", "i"),
    )
)
_V2_CRC_FROM: Final = 21  # CRC-32C covers attributes .. end of batch
_V2_MIN_LENGTH: Final = _V2.size - _ENTRY.size

_LEGACY_NAMES, _LEGACY = _compile(
    (("offset", "q"), ("message_size", "i"), ("crc", "I"), ("magic", "b"), ("attributes", "b"))
)
_TIMESTAMP = struct.Struct(">q")
_LEGACY_MIN_SIZE: Final = (14, 22)  # crc..value lengths for magic 0 and magic 1

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = 16
_SNAPPY_FRAMED_MAGIC: Final = b"\xff\x06\x00\x00sNaPpY"
_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_CRAMJAM_FULL: Final = "failed to write whole buffer"
# zlib output per call, so that a failing gzip stream is charged what it produced.
_GZIP_STEP: Final = 256 * 1024
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

Item = dict[str, Any]


@dataclass
class Budget:
    """What decompression (and ``expand``'s kept items) may still use.

    One budget serves every ``records`` field of one frame, so a Produce of a
    hundred partitions cannot multiply it.
    """

    remaining: int
    items: int  # bytes of kept records expand=True may still add; -1 once spent

    @classmethod
    def per_frame(cls, max_decompressed: int = MAX_DECOMPRESSED) -> Budget:
        limit = max(0, max_decompressed)
        return cls(remaining=limit, items=ITEM_BUDGET_FACTOR * limit)

    @classmethod
    def for_frame(
        cls, frame_bytes: int, max_decompressed: int = MAX_DECOMPRESSED, cap: int | None = None
    ) -> Budget:
        """``max_decompressed``, or FRAME_RATIO times the frame's size if that is more,
        up to ``cap``: FRAME_BUDGET_CAP (or ``max_decompressed`` if larger) unless a run
        chose one (``--max-decompressed``, ``Options.max_decompressed``), a fixed cap, not
        one that grows with the frame. Kept records (``expand``) stay bounded by
        ``max_decompressed`` alone."""
        limit = max(0, max_decompressed)
        top = max(limit, FRAME_BUDGET_CAP) if cap is None else max(0, cap)
        return cls(
            remaining=min(top, max(limit, FRAME_RATIO * frame_bytes)),
            items=ITEM_BUDGET_FACTOR * limit,
        )

    def charge(self, n: int) -> None:
        self.remaining -= min(max(n, 0), self.remaining)


_FRAME_BUDGET: ContextVar[Budget | None] = ContextVar("records_frame_budget", default=None)


class frame_budget:  # lower case: it reads like a function, ``with frame_budget():``
    """Context in which every records field shares one :class:`Budget` (the one
    ``current_frame_budget()`` returns): enter it once per decoded frame."""

    __slots__ = ("_token", "budget")

    def __init__(
        self, frame_bytes: int = 0, max_decompressed: int = MAX_DECOMPRESSED, cap: int | None = None
    ) -> None:
        self.budget = Budget.for_frame(frame_bytes, max_decompressed, cap)
        self._token: Token[Budget | None] | None = None

    def __enter__(self) -> Budget:
        self._token = _FRAME_BUDGET.set(self.budget)
        return self.budget

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _FRAME_BUDGET.reset(self._token)
            self._token = None


def current_frame_budget() -> Budget | None:
    """The budget of the frame being decoded, or None outside ``frame_budget()``."""
    return _FRAME_BUDGET.get()


@dataclass
class RecordSet:
    """What one ``records`` field holds.

    ``batches`` counts complete entries: v2 batches, and magic 0/1 top-level
    messages (a compressed wrapper is one batch holding its inner messages).
    ``records`` counts records in them (inner messages for wrappers). ``bytes`` is
    the input length. ``codecs`` has one name per batch. ``items`` (only with
    ``expand=True``) has one dict per batch, each with a ``records`` list; when the
    item budget runs out (error ``expand_limit``) it holds a prefix of them.
    ``partial_batches`` is 1 when the data ends inside a batch, else 0.
    """

    batches: int = 0
    records: int = 0
    bytes: int = 0
    codecs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    items: list[Item] | None = None
    partial_batches: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable copy; every bytes value becomes a base64 (RFC 4648) string."""
        return {
            "batches": self.batches,
            "records": self.records,
            "bytes": self.bytes,
            "partial_batches": self.partial_batches,
            "codecs": list(self.codecs),
            "errors": list(self.errors),
            "bytes_encoding": "base64",
            "items": None if self.items is None else [jsonable(i) for i in self.items],
        }


def parse_records(
    data: bytes | bytearray | memoryview | None,
    *,
    expand: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
    budget: Budget | None = None,
) -> RecordSet:
    """Parse a Kafka ``records`` field (any mix of magic 0, 1 and 2 entries).

    Without ``expand`` only counts are kept; uncompressed v2 batches are counted from
    their records-count field, validated by walking the record length prefixes.
    Compressed batches are decompressed (within ``max_decompressed``, shared by the
    whole call, or within ``budget``, shared with the caller's other fields and left
    spent by this call) so that their count is checked, not trusted; past the budget
    the header's count is taken.
    """
    if data is None:  # a null records field
        return RecordSet(items=[] if expand else None)
    if not isinstance(data, bytes | bytearray | memoryview):
        return RecordSet(items=[] if expand else None, errors=[f"bad_input: {type(data).__name__}"])
    buf = data if isinstance(data, bytes) else bytes(data)
    if budget is None:
        budget = Budget.per_frame(max_decompressed)
    ctx = _Ctx(expand=expand, budget=budget)
    result = RecordSet(bytes=len(buf), items=[] if expand else None)
    try:
        _walk_top(ctx, buf)
    except Exception as exc:  # never raise on bad input; a bug here is reported, not fatal
        ctx.error("internal_error", f"{type(exc).__name__}: {exc}")
    result.batches = ctx.batches
    result.records = ctx.records
    result.codecs = ctx.codecs
    result.errors = ctx.finish_errors()
    result.partial_batches = ctx.partial_batches
    if expand:
        result.items = ctx.items
    return result


# --- internals -------------------------------------------------------------------


class _Bad(Exception):
    """An anomaly inside one record or one compressed payload."""

    def __init__(self, code: str, detail: str, produced: int = 0) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.produced = produced  # decompressed bytes spent before the failure


@dataclass
class _Ctx:
    expand: bool
    budget: Budget
    batches: int = 0
    records: int = 0
    partial_batches: int = 0
    codecs: list[str] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dropped_errors: int = 0
    expand_limited: bool = False
    limit_hit: bool = False  # the last decompression ran past the budget

    def error(self, code: str, detail: str) -> None:
        # Garbage input can hold one anomaly per dozen bytes: keep the list bounded.
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{code}: {detail}")
        else:
            self.dropped_errors += 1

    def keep(self, size: int, where: str) -> bool:
        """Whether expand may keep one more record of ``size`` bytes."""
        cost = size + ITEM_OVERHEAD
        if self.budget.items >= cost:
            self.budget.items -= cost
            return True
        if not self.expand_limited:  # report once per field
            self.error("expand_limit", f"records from {where} on are counted, not kept")
            self.expand_limited = True
        self.budget.items = -1  # keep a prefix: nothing after the first refusal
        return False

    def finish_errors(self) -> list[str]:
        if self.dropped_errors:
            return [*self.errors, f"too_many_errors: {self.dropped_errors} more not listed"]
        return self.errors


@dataclass(slots=True)
class _Legacy:
    """One magic 0/1 message; key/value are views into the buffer."""

    offset: int
    magic: int
    crc: int
    crc_ok: bool
    attributes: int
    timestamp: int | None
    key: memoryview | None
    value: memoryview | None


def _entries(buf: bytes) -> Iterator[tuple[int, int, int]]:
    """Yield (index, start, end) of each complete entry; the last yield may be a
    partial entry, signalled by end == -1, or a bad length, by end == -2."""
    pos = 0
    total = len(buf)
    index = 0
    while pos < total:
        if total - pos < _ENTRY.size:
            yield index, pos, -1
            return
        size = _ENTRY.unpack_from(buf, pos)[1]
        if size < 0:
            yield index, pos, -2
            return
        end = pos + _ENTRY.size + size
        if end > total:
            yield index, pos, -1
            return
        yield index, pos, end
        pos = end
        index += 1


def _walk_top(ctx: _Ctx, buf: bytes) -> None:
    for index, pos, end in _entries(buf):
        if end == -1:
            ctx.partial_batches += 1
            return
        if end == -2:
            ctx.error("bad_batch_length", f"negative length in batch {index} at offset {pos}")
            return
        if end - pos <= _MAGIC_AT:
            ctx.error("bad_batch_length", f"batch {index} at offset {pos} too short")
            continue
        magic = buf[pos + _MAGIC_AT]
        if magic == 2:
            _v2_batch(ctx, buf, pos, end, index)
        elif magic in (0, 1):
            _legacy_top(ctx, buf, pos, end, index)
        else:
            ctx.error("unknown_magic", f"{magic} in batch {index} at offset {pos}")


# --- magic 2 ---------------------------------------------------------------------


@functools.cache
def _crc32c() -> Callable[[Any], int]:
    """CRC-32C, imported at the first v2 batch: the crc32c package imports
    importlib.metadata (about 20 ms), which a frame without records (the native core's
    rare deferred pairs, ApiVersions and the like) should not pay."""
    import crc32c

    return crc32c.crc32c


def _v2_batch(ctx: _Ctx, buf: bytes, pos: int, end: int, index: int) -> None:
    where = f"batch {index} at offset {pos}"
    if end - pos < _V2.size:
        ctx.error("bad_batch_length", f"{where}: {end - pos} bytes, header needs {_V2.size}")
        return
    header = dict(zip(_V2_NAMES, _V2.unpack_from(buf, pos), strict=True))
    crc_ok = _crc32c()(memoryview(buf)[pos + _V2_CRC_FROM : end]) == header["crc"]
    if not crc_ok:
        ctx.error("crc_mismatch", where)
    attributes = header["attributes"]
    codec = attributes & 0x07
    ctx.batches += 1
    ctx.codecs.append(CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else "unknown")
    count = header["record_count"]
    if count < 0:
        ctx.error("bad_record_count", f"{count} in {where}")
        count = 0

    # Records are walked in place when uncompressed: no copy of the batch.
    data: bytes | None = buf
    start, stop = pos + _V2.size, end
    if codec:
        out = _decompress(ctx, codec, memoryview(buf)[start:end], magic=2, where=where)
        # int indexing on bytes is several times faster than on a memoryview
        data = out.tobytes() if isinstance(out, memoryview) else out
        start, stop = 0, len(data) if data is not None else 0
    # Decided before the walk, so that a kept batch holds every record that was kept.
    records: list[Item] | None = [] if ctx.expand and ctx.keep(_V2.size, where) else None
    if data is not None:
        ctx.records += _v2_records(ctx, header, data, start, stop, count, where, records)
    elif ctx.limit_hit:
        ctx.records += count  # past the budget the header's count is all there is
    if records is not None:
        ctx.items.append(_v2_item(header, crc_ok, pos, records))


def _v2_item(header: dict[str, int], crc_ok: bool, pos: int, records: list[Item]) -> Item:
    attributes = header["attributes"]
    is_control = bool(attributes & 0x20)
    codec = attributes & 0x07
    item: Item = dict(header)
    item.update(
        byte_offset=pos,
        crc_ok=crc_ok,
        compression=CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})",
        timestamp_type="log_append_time" if attributes & 0x08 else "create_time",
        is_transactional=bool(attributes & 0x10),
        is_control=is_control,
        has_delete_horizon=bool(attributes & 0x40),
        control_type=records[0].get("control_type") if is_control and records else None,
        first_timestamp_iso=_iso(header["first_timestamp"]),
        max_timestamp_iso=_iso(header["max_timestamp"]),
        records=records,
    )
    return item


def _v2_records(
    ctx: _Ctx,
    header: dict[str, int],
    body: bytes,
    pos: int,
    total: int,
    count: int,
    where: str,
    out: list[Item] | None,
) -> int:
    """Walk the records in ``body[pos:total]``; return how many were found. Each
    record is skipped by its length prefix, so a bad record never hides the next one."""
    if out is None:
        found, pos, bad = _skip_v2_records(ctx, body, pos, total, count, where)
        if bad is not None:
            code, before, after = bad
            ctx.error(code, f"{before}record {found}{after} in {where}")
            return found
    else:
        found, pos, stopped = _expand_v2_records(ctx, header, body, pos, total, count, where, out)
        if stopped:
            return found
    if found < count:
        ctx.error("record_count_mismatch", f"header says {count}, found {found} in {where}")
    elif pos < total:
        ctx.error("trailing_bytes", f"{total - pos} after record {found - 1} in {where}")
    return found


def _skip_v2_records(
    ctx: _Ctx, body: bytes, pos: int, total: int, count: int, where: str
) -> tuple[int, int, tuple[str, str, str] | None]:
    """Step over up to ``count`` records by their length prefixes, building nothing.

    Returns (records found, offset after them, anomaly that stopped the walk or
    None); such an anomaly is (code, text before and after "record N" in its
    message). Each record's fields are checked as ``_v2_record`` reads them, and what
    is wrong inside one is reported as expand reports it, so the summary (and the
    pairs table) lists every anomaly ``decode --records`` does (issue #21: an 11-byte
    varint inside a record passed ``analyze``). This runs for every record of every
    batch, so one- and two-byte lengths (records under 8 KiB) are decoded inline.
    """
    found = 0
    while found < count and pos < total:
        byte = body[pos]
        if byte < 0x80:
            length, start = (byte >> 1) ^ -(byte & 1), pos + 1
        elif pos + 1 < total and body[pos + 1] < 0x80:
            raw = (byte & 0x7F) | (body[pos + 1] << 7)
            length, start = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            try:
                length, start = _varint(body, pos, total, 5)
            except _Bad as bad:
                return found, pos, (bad.code, f"{bad.detail}: ", " length")
        if length < 0 or start + length > total:
            return found, pos, ("truncated_record", "", "")
        if length < _V2_MIN_RECORD:  # also keeps the walk at >= 7 bytes a record
            return found, pos, ("bad_record_length", f"{length} for ", "")
        pos = start + length
        try:
            _check_v2_record(body, start, pos)
        except _Bad as bad:
            ctx.error(bad.code, f"{bad.detail}: record {found} in {where}")
        found += 1
    return found, pos, None


def _expand_v2_records(
    ctx: _Ctx,
    header: dict[str, int],
    body: bytes,
    pos: int,
    total: int,
    count: int,
    where: str,
    out: list[Item],
) -> tuple[int, int, bool]:
    """Like ``_skip_v2_records``, keeping each record (while the item budget lasts).

    Returns (found, offset after them, whether an anomaly stopped the walk; it is
    recorded already).
    """
    env = _RecordEnv(
        base_offset=header["base_offset"],
        first_timestamp=header["first_timestamp"],
        max_timestamp=header["max_timestamp"],
        log_append=bool(header["attributes"] & 0x08),
        is_control=bool(header["attributes"] & 0x20),
    )
    found = 0
    while found < count and pos < total:
        try:
            length, start = _varint(body, pos, total, 5)
        except _Bad as bad:
            ctx.error(bad.code, f"{bad.detail}: record {found} length in {where}")
            return found, pos, True
        if length < 0 or start + length > total:
            ctx.error("truncated_record", f"record {found} in {where}")
            return found, pos, True
        if length < _V2_MIN_RECORD:
            ctx.error("bad_record_length", f"{length} for record {found} in {where}")
            return found, pos, True
        try:
            if ctx.keep(length, f"record {found} in {where}"):
                out.append(_v2_record(env, body, start, start + length))
            else:  # counted, not kept: still checked, as without expand
                _check_v2_record(body, start, start + length)
        except _Bad as bad:
            ctx.error(bad.code, f"{bad.detail}: record {found} in {where}")
        pos = start + length
        found += 1
    return found, pos, False


@dataclass(slots=True)
class _RecordEnv:
    """What every record of one v2 batch needs from its header."""

    base_offset: int
    first_timestamp: int
    max_timestamp: int
    log_append: bool
    is_control: bool
    # Records of a batch mostly share their second: format each second once.
    seconds: dict[int, str | None] = field(default_factory=dict)


def _v2_record(env: _RecordEnv, buf: bytes, pos: int, end: int) -> Item:
    if pos >= end:
        raise _Bad("truncated_record", "no attributes")
    pos += 1  # record attributes: unused by Kafka so far
    ts_delta, pos = _varint(buf, pos, end, 10)
    offset_delta, pos = _varint(buf, pos, end, 5)
    key, pos = _var_bytes(buf, pos, end)
    value, pos = _var_bytes(buf, pos, end)
    n_headers, pos = _varint(buf, pos, end, 5)
    if n_headers < 0 or n_headers > (end - pos) // 2:  # each header takes >= 2 bytes
        raise _Bad("bad_header_count", str(n_headers))
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(n_headers):
        h_key, pos = _var_bytes(buf, pos, end)
        if h_key is None:
            raise _Bad("bad_header_key", "null")
        h_value, pos = _var_bytes(buf, pos, end)
        headers.append((h_key.decode("utf-8", "replace"), h_value))
    if pos != end:
        raise _Bad("record_length_mismatch", f"{end - pos} bytes left")
    # LOG_APPEND_TIME: the broker's time (max_timestamp) applies to every record.
    timestamp = env.max_timestamp if env.log_append else env.first_timestamp + ts_delta
    record: Item = {
        "offset": env.base_offset + offset_delta,
        "timestamp": timestamp,
        "timestamp_iso": _iso(timestamp, env.seconds),
        "key": key,
        "key_text": _text(key),
        "value": value,
        "value_text": _text(value),
        "headers": headers,
    }
    if env.is_control:
        record["control_type"] = _control_type(key)
    return record


def _check_v2_record(buf: bytes, pos: int, end: int) -> None:
    """Raise what ``_v2_record`` would raise for the record in ``buf[pos:end]``, building
    nothing (the same reads in the same order; keep the two in step)."""
    if pos >= end:
        raise _Bad("truncated_record", "no attributes")
    pos = _varint(buf, pos + 1, end, 10)[1]  # after attributes: timestamp delta
    pos = _varint(buf, pos, end, 5)[1]  # offset delta
    pos = _var_span(buf, pos, end)[1]  # key
    pos = _var_span(buf, pos, end)[1]  # value
    n_headers, pos = _varint(buf, pos, end, 5)
    if n_headers < 0 or n_headers > (end - pos) // 2:
        raise _Bad("bad_header_count", str(n_headers))
    for _ in range(n_headers):
        length, pos = _var_span(buf, pos, end)
        if length == -1:
            raise _Bad("bad_header_key", "null")
        pos = _var_span(buf, pos, end)[1]
    if pos != end:
        raise _Bad("record_length_mismatch", f"{end - pos} bytes left")


def _control_type(key: bytes | None) -> str | None:
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    kind = _CONTROL_KEY.unpack_from(key)[1]
    return CONTROL_TYPES.get(kind, f"UNKNOWN({kind})")


def _varint(buf: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """Zigzag varint (max_bytes 5) or varlong (10) as Kafka's record format uses."""
    if pos < end:
        raw = buf[pos]
        if raw < 0x80:  # one byte, inlined: most deltas and counts of a record
            return (raw >> 1) ^ -(raw & 1), pos + 1
    try:
        raw, pos = read_uvarint(buf, pos, end, max_bytes)
    except VarintError as exc:
        detail = "cut off" if exc.cut else f"longer than {max_bytes} bytes"
        raise _Bad("bad_varint", detail) from None
    return (raw >> 1) ^ -(raw & 1), pos  # the zigzag step, inline: a hot path


def _var_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    # _var_span's reads, inline: this runs for every key and value that expand keeps
    raw = buf[pos] if pos < end else 0x80
    if raw < 0x80:
        length, pos = (raw >> 1) ^ -(raw & 1), pos + 1
    else:
        length, pos = _varint(buf, pos, end, 5)
    if length == -1:
        return None, pos
    if length < -1:
        raise _Bad("bad_length", str(length))
    if pos + length > end:
        raise _Bad("truncated_record", f"field of {length} bytes")
    return buf[pos : pos + length], pos + length


def _var_span(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(length, offset after the field) of a varint-length byte field; -1: null."""
    raw = buf[pos] if pos < end else 0x80
    if raw < 0x80:  # one-byte length, inlined: this runs for every key and value
        length, pos = (raw >> 1) ^ -(raw & 1), pos + 1
    else:
        length, pos = _varint(buf, pos, end, 5)
    if length == -1:
        return -1, pos
    if length < -1:
        raise _Bad("bad_length", str(length))
    if pos + length > end:
        raise _Bad("truncated_record", f"field of {length} bytes")
    return length, pos + length


# --- magic 0 and 1 ---------------------------------------------------------------


def _legacy_top(ctx: _Ctx, buf: bytes, pos: int, end: int, index: int) -> None:
    where = f"batch {index} at offset {pos}"
    wrapper = _legacy_message(ctx, buf, pos, end, where)
    if wrapper is None:
        return
    codec = wrapper.attributes & 0x07
    ctx.batches += 1
    ctx.codecs.append(CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else "unknown")
    kept: list[_Legacy] | None = [] if ctx.expand and ctx.keep(_LEGACY.size, where) else None
    if codec == 0:
        found = 1
        if kept is not None and ctx.keep(end - pos, where):
            kept.append(wrapper)
    else:
        found = _legacy_inner(ctx, wrapper, 1, where, kept)[0]
    ctx.records += found
    if kept is not None:
        ctx.items.append(_legacy_item(wrapper, pos, kept))


def _legacy_message(ctx: _Ctx, buf: bytes, pos: int, end: int, where: str) -> _Legacy | None:
    # Callers checked that the magic byte (0 or 1) lies inside the entry.
    size = end - pos - _ENTRY.size
    if size < _LEGACY_MIN_SIZE[buf[pos + _MAGIC_AT]]:
        ctx.error("bad_message_size", f"{size} in {where}")
        return None
    offset, _, crc, magic, attributes = _LEGACY.unpack_from(buf, pos)
    view = memoryview(buf)
    crc_ok = zlib.crc32(view[pos + _MAGIC_AT : end]) == crc
    if not crc_ok:
        ctx.error("crc_mismatch", f"message at offset {pos} in {where}")
    p = pos + _LEGACY.size
    timestamp = None
    if magic == 1:
        timestamp = _TIMESTAMP.unpack_from(buf, p)[0]
        p += _TIMESTAMP.size
    try:
        key, p = _i32_bytes(buf, view, p, end)
        value, p = _i32_bytes(buf, view, p, end)
    except _Bad as bad:
        ctx.error(bad.code, f"{bad.detail}: message at offset {pos} in {where}")
        return None
    if p != end:
        ctx.error("message_size_mismatch", f"{end - p} bytes left at offset {pos} in {where}")
    return _Legacy(offset, magic, crc, crc_ok, attributes, timestamp, key, value)


def _i32_bytes(buf: bytes, view: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    if pos + _I32.size > end:
        raise _Bad("truncated_record", "length cut off")
    length = _I32.unpack_from(buf, pos)[0]
    pos += _I32.size
    if length == -1:
        return None, pos
    if length < -1:
        raise _Bad("bad_length", str(length))
    if pos + length > end:
        raise _Bad("truncated_record", f"field of {length} bytes")
    return view[pos : pos + length], pos + length


def _legacy_inner(
    ctx: _Ctx, wrapper: _Legacy, depth: int, where: str, out: list[_Legacy] | None
) -> tuple[int, int | None]:
    """Count the messages inside a compressed wrapper and return (count, offset of the
    last one); with ``out``, also keep them there (while the item budget lasts), with
    Kafka's offset and timestamp rules applied: magic 1 inner offsets are relative to
    the wrapper's, and LOG_APPEND_TIME gives every message the wrapper's timestamp."""
    if wrapper.value is None:
        ctx.error("bad_compressed_message", f"null value in {where}")
        return 0, None
    data = _decompress(ctx, wrapper.attributes & 0x07, wrapper.value, wrapper.magic, where)
    if data is None:
        return 0, None
    inner_buf = data if isinstance(data, bytes) else data.tobytes()
    first_kept = len(out) if out is not None else 0
    count = 0
    last: int | None = None
    for index, pos, end in _entries(inner_buf):
        here = f"inner message {index} of {where}"
        if end < 0:
            ctx.error("truncated_batch" if end == -1 else "bad_batch_length", here)
            break
        if end - pos <= _MAGIC_AT:
            ctx.error("bad_message_size", here)
            continue
        magic = inner_buf[pos + _MAGIC_AT]
        if magic not in (0, 1):
            ctx.error("unknown_magic", f"{magic} in {here}")
            continue
        message = _legacy_message(ctx, inner_buf, pos, end, here)
        if message is None:
            continue
        if message.attributes & 0x07:
            if depth >= MAX_NESTING:
                ctx.error("nesting_too_deep", here)
                continue
            found, nested_last = _legacy_inner(ctx, message, depth + 1, here, out)
            count += found
            last = nested_last if nested_last is not None else last
            continue
        count += 1
        last = message.offset
        if out is not None and ctx.keep(end - pos, here):
            out.append(message)
    if wrapper.magic >= 1 and last is not None:
        # A producer's wrapper has offset 0 and its inner offsets 0..n-1, which gives a
        # negative base: Kafka keeps the inner offsets then, and so do we.
        base = wrapper.offset - last
        log_append = bool(wrapper.attributes & 0x08)
        for message in out[first_kept:] if out is not None else ():
            if base >= 0:
                message.offset += base
            if log_append:
                message.timestamp = wrapper.timestamp
        if base >= 0:
            last += base
    return count, last


def _legacy_item(wrapper: _Legacy, pos: int, inner: list[_Legacy]) -> Item:
    codec = wrapper.attributes & 0x07
    return {
        "byte_offset": pos,
        "base_offset": wrapper.offset,
        "magic": wrapper.magic,
        "crc": wrapper.crc,
        "crc_ok": wrapper.crc_ok,
        "attributes": wrapper.attributes,
        "compression": CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})",
        "timestamp_type": _legacy_ts_type(wrapper),
        "timestamp": wrapper.timestamp,
        "timestamp_iso": _iso(wrapper.timestamp),
        "is_transactional": False,
        "is_control": False,
        "control_type": None,
        "partition_leader_epoch": None,
        "producer_id": None,
        "producer_epoch": None,
        "base_sequence": None,
        "records": [_legacy_record(m, wrapper) for m in inner],
    }


def _legacy_ts_type(message: _Legacy) -> str | None:
    if message.magic == 0:
        return None
    return "log_append_time" if message.attributes & 0x08 else "create_time"


def _legacy_record(message: _Legacy, wrapper: _Legacy) -> Item:
    key = None if message.key is None else message.key.tobytes()
    value = None if message.value is None else message.value.tobytes()
    return {
        "offset": message.offset,
        "timestamp": message.timestamp,
        "timestamp_iso": _iso(message.timestamp),
        "timestamp_type": _legacy_ts_type(wrapper),
        "key": key,
        "key_text": _text(key),
        "value": value,
        "value_text": _text(value),
        "headers": [],
        "crc_ok": message.crc_ok,
    }


# --- decompression ---------------------------------------------------------------


def _decompress(
    ctx: _Ctx, codec: int, data: memoryview, magic: int, where: str
) -> bytes | memoryview | None:
    """Decompress within ctx.budget; on failure record the anomaly and return None
    (``ctx.limit_hit`` tells a budget overrun from bad data). The budget is charged
    what the codec produced, failed or not."""
    ctx.limit_hit = False
    if codec >= len(CODEC_NAMES):
        ctx.error("unknown_codec", f"{codec} in {where}")
        return None
    limit = ctx.budget.remaining
    try:
        if codec == 1:
            out: bytes | memoryview = _gunzip(data, limit)
        elif codec == 2:
            out = _unsnappy(data, limit)
        elif codec == 3:
            out = _unlz4(data, limit, old_kafka=magic == 0)
        else:
            out = _bounded(cramjam.zstd.decompress_into, data, limit, "zstd")
    except _Bad as bad:
        ctx.error(bad.code, f"{bad.detail} in {where}")
        ctx.limit_hit = bad.code == "decompression_limit"
        # An overrun produced the whole budget: charging less would let the next
        # field of the frame do that work again.
        ctx.budget.charge(limit if ctx.limit_hit else bad.produced)
        return None
    except Exception as exc:  # codec libraries raise assorted types on corrupt input
        ctx.error("decompression_failed", f"{CODEC_NAMES[codec]}: {exc} in {where}")
        return None
    ctx.budget.charge(len(out))
    return out


def _limit(name: str, limit: int) -> _Bad:
    return _Bad("decompression_limit", f"{name} output over {limit} bytes")


def _gunzip(data: memoryview, limit: int) -> bytes:
    """Streaming gzip with zlib's max_length: never holds more than limit + 1 bytes,
    produced in steps so that a stream that fails late is charged what it made."""
    parts: list[bytes] = []
    produced = 0
    rest: bytes | memoryview = data
    while True:
        stream = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
        pending: bytes | memoryview = rest
        # Each pass makes output or takes input, or stops: bounded by both.
        while not stream.eof:
            try:
                chunk = stream.decompress(pending, min(_GZIP_STEP, limit - produced + 1))
            except zlib.error as exc:
                raise _Bad("decompression_failed", f"gzip: {exc}", produced) from None
            produced += len(chunk)
            if produced > limit:
                raise _limit("gzip", limit)
            parts.append(chunk)
            pending = stream.unconsumed_tail
            if not chunk and not pending:
                raise _Bad("decompression_failed", "gzip: stream cut off", produced)
        rest = stream.unused_data
        # Java's GZIPInputStream reads concatenated members; other trailing bytes it ignores.
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(parts)


def _bounded(
    into: Callable[[Any, bytearray], int], data: bytes | memoryview, limit: int, name: str
) -> memoryview:
    """cramjam's ``decompress_into`` stops with "failed to write whole buffer" once the
    output buffer is full, so grow a buffer up to ``limit`` and never past it."""
    # Kafka payloads often compress 5-10x; start near that, grow 8x so a retry
    # (which decompresses again from the start) stays rare and cheap.
    size = min(limit, max(256 * 1024, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = into(data, out)
        except cramjam.DecompressionError as exc:
            if _CRAMJAM_FULL not in str(exc):
                # How much came out before the failure is unknown: charge the buffer.
                raise _Bad("decompression_failed", f"{name}: {exc}", size) from None
            if size >= limit:
                raise _limit(name, limit) from None
            size = min(limit, size * 8)
            continue
        return memoryview(out)[:n]


def _unsnappy(data: memoryview, limit: int) -> bytes | memoryview:
    """Snappy as Kafka clients write it: xerial blocks (Java), the official framing
    format, or one raw block (librdkafka and others)."""
    if data[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
        return _unxerial(data, limit)
    if data[: len(_SNAPPY_FRAMED_MAGIC)] == _SNAPPY_FRAMED_MAGIC:
        return _bounded(cramjam.snappy.decompress_into, data, limit, "snappy")
    return _snappy_block(data, limit)


def _snappy_block(block: memoryview, limit: int) -> memoryview:
    # A raw block starts with its uncompressed length: check it before allocating.
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > limit:
        raise _limit("snappy", limit)
    out = bytearray(declared)
    try:
        n = cramjam.snappy.decompress_raw_into(block, out)
    except cramjam.DecompressionError as exc:
        raise _Bad("decompression_failed", f"snappy: {exc}", declared) from None
    return memoryview(out)[:n]


def _unxerial(data: memoryview, limit: int) -> bytes:
    if len(data) < _XERIAL_HEADER:
        raise _Bad("decompression_failed", "snappy: xerial header cut off")
    parts: list[memoryview] = []
    produced = 0
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + _I32.size > len(data):
            raise _Bad("decompression_failed", "snappy: xerial block length cut off")
        length = _I32.unpack_from(data, pos)[0]
        pos += _I32.size
        if length < 0 or pos + length > len(data):
            raise _Bad("decompression_failed", f"snappy: xerial block of {length} bytes")
        try:
            block = _snappy_block(data[pos : pos + length], limit - produced)
        except _Bad as bad:
            bad.produced += produced
            raise
        produced += len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


def _unlz4(data: memoryview, limit: int, *, old_kafka: bool) -> memoryview:
    if old_kafka:
        # Kafka 0.8/0.9 (magic 0) computed the frame header checksum over the magic
        # number too (KAFKA-3160); Kafka ignores it for magic 0, so put the right one.
        data = _fix_lz4_header_checksum(data)
    return _bounded(cramjam.lz4.decompress_into, data, limit, "lz4")


def _fix_lz4_header_checksum(data: memoryview) -> memoryview:
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        return data
    flags = data[4]
    hc_at = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if hc_at >= len(data):
        return data
    fixed = bytearray(data)
    fixed[hc_at] = (_xxh32(bytes(data[4:hc_at])) >> 8) & 0xFF
    return memoryview(fixed)


_P1: Final = 2654435761
_P2: Final = 2246822519
_P3: Final = 3266489917
_P4: Final = 668265263
_P5: Final = 374761393
_M32: Final = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, only needed for the few bytes of an LZ4 frame descriptor."""
    n = len(data)
    pos = 0
    if n >= 16:
        lanes = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                word = int.from_bytes(data[pos : pos + 4], "little")
                lanes[i] = (_rotl((lanes[i] + word * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        acc = _rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)
    else:
        acc = seed + _P5
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        word = int.from_bytes(data[pos : pos + 4], "little")
        acc = (_rotl((acc + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


# --- presentation ----------------------------------------------------------------


def _iso(ms: int | None, seconds: dict[int, str | None] | None = None) -> str | None:
    """UTC ISO-8601 with milliseconds ("2024-01-02T03:04:05.678Z"); None for Kafka's
    "no timestamp" (-1) and for values no datetime can hold. ``seconds`` caches the
    text of whole seconds for a run of nearby timestamps."""
    if ms is None or ms < 0:
        return None
    second, milli = divmod(ms, 1000)
    if seconds is not None and second in seconds:
        prefix = seconds[second]
    else:
        try:
            prefix = (_EPOCH + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%S")
        except OverflowError:
            prefix = None
        if seconds is not None:
            if len(seconds) > 1024:
                seconds.clear()
            seconds[second] = prefix
    return None if prefix is None else f"{prefix}.{milli:03d}Z"


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.isprintable() or all(c.isprintable() or c in "\t\r\n" for c in text):
        return text
    return None
