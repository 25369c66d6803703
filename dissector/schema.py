"""The pairs DataFrame contract: column names, their meaning and their types.

Every output (pandas frame, Parquet/CSV/JSON export, report, Spark schema) is
built from this one table, so a column is renamed or added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


class Kind(StrEnum):
    """A column's kind: what ``arrow_type`` and ``PANDAS_DTYPES`` (and Spark's
    ``dissector.spark.typemap.spark_type``) turn into a concrete type."""

    STR = "str"
    INT = "int"
    FLOAT = "float"
    TIMESTAMP = "timestamp"
    STR_LIST = "str_list"
    # Kinds used only by Spark's per-capture trailer (spark.typemap.CAPTURE_INFO).
    BOOL = "bool"
    COUNTER_MAP = "counter_map"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str  # a Kind: str, int, float, timestamp, str_list (bool, counter_map: Spark only)
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("capture", "str", "path of the capture file the pair came from"),
    Column("stream", "int", "TCP connection index within the capture (like tshark's tcp.stream)"),
    Column("client_ip", "str", "address of the Kafka client"),
    Column("client_port", "int", "port of the Kafka client"),
    Column("broker_ip", "str", "address of the broker"),
    Column("broker_port", "int", "port of the broker"),
    Column("request_time", "timestamp", "UTC time of the packet that completed the request"),
    Column("response_time", "timestamp", "UTC time of the packet that completed the response"),
    Column("latency_ms", "float", "response complete minus request complete, milliseconds"),
    Column("first_byte_ms", "float", "first response packet minus request complete, milliseconds"),
    Column("api_key", "int", "Kafka API key"),
    Column("api_name", "str", "Kafka API name, e.g. Produce"),
    Column("api_version", "int", "API version of the request"),
    Column("correlation_id", "int", "correlation id shared by request and response"),
    Column("client_id", "str", "client_id from the request header"),
    Column("request_size", "int", "request bytes on the wire including the 4-byte size prefix"),
    Column("response_size", "int", "response bytes on the wire including the 4-byte size prefix"),
    Column(
        "status",
        "str",
        "ok | error | no_response | unanswered | response_lost | unknown | orphan_response | "
        "malformed (Status)",
    ),
    Column("error_code", "int", "top-level error code, else the first non-zero nested one"),
    Column("error_name", "str", "Kafka's name of error_code, e.g. UNKNOWN_TOPIC_OR_PARTITION"),
    Column("error_count", "int", "number of non-zero error codes anywhere in the response"),
    Column("topics", "str_list", "topic names the pair touches"),
    Column("partitions", "int", "number of partitions the pair touches"),
    Column("records", "int", "records carried (produced or fetched)"),
    Column("record_bytes", "int", "bytes of record batches carried"),
    Column("compression", "str", "codecs of the record batches: none, gzip, snappy, lz4, zstd"),
    Column("throttle_ms", "int", "throttle_time_ms from the response"),
    Column("decode_error", "str", "why a frame could not be (fully) decoded, else null"),
    Column(
        "flags",
        "str_list",
        "facts about the pair that are not decode errors: capture_gap (bytes before it "
        "were not captured: first pair of a connection caught mid-stream or after lost "
        "packets), negative_latency (capture timestamps ran backwards)",
    ),
    Column("max_wait_ms", "int", "max_wait_ms of a Fetch/ShareFetch request (long-poll bound)"),
    Column("min_bytes", "int", "min_bytes of a Fetch/ShareFetch request"),
    Column(
        "fetch_wait",
        "str",
        "empty_poll | data | early: how an answered long poll (Fetch, ShareFetch) ended, "
        "null for other rows (stats.SERVICE_LATENCY_RULE)",
    ),
    Column(
        "service_ms",
        "float",
        "latency without the long-poll wait: latency_ms, less max_wait_ms for an empty "
        "poll (null when that wait is unknown)",
    ),
    Column(
        "queue_ms",
        "float",
        "time the request waited behind earlier requests (and throttles) of its "
        "connection before the broker read it (stats.QUEUEING_RULE); null without a request",
    ),
    Column(
        "inflight",
        "int",
        "earlier requests of the connection still unanswered when this one was sent; "
        "null without a request",
    ),
    Column(
        "assumed_version",
        "int",
        "for a version newer than the specs: the newest known version whose layout "
        "decoded both bodies exactly (messages.ASSUMED_VERSION_RULE), else null",
    ),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

TABLE_FORMATS: tuple[str, ...] = (".parquet", ".csv", ".jsonl", ".json")
"""The files a table (the pairs, the analytics tables) is written as, chosen by the
extension (``table.frame.export``, ``analytics.partitions.export_table``)."""

SUMMARY_COLUMNS: tuple[str, ...] = (
    "error_code",
    "error_name",
    "error_count",
    "topics",
    "partitions",
    "records",
    "record_bytes",
    "compression",
    "throttle_ms",
    "decode_error",
    "assumed_version",
)
"""The columns a pair's body summary fills, in the table's order: the fields of
``protocol.summary.Summary``, ``wire.core.FallbackSummary`` and the core's
``SummaryColumns`` (``tests/test_column_twins.py`` holds them to this list)."""


class Status(StrEnum):
    """The ``status`` column's values. A StrEnum: members equal (and hash as) their text,
    so ``df["status"].eq(Status.UNANSWERED)`` and ``rec.status in ERROR_STATUSES`` work
    on plain strings read back from any file."""

    OK = "ok"
    ERROR = "error"  # a non-zero Kafka error code
    NO_RESPONSE = "no_response"  # none expected (Produce acks=0)
    UNANSWERED = "unanswered"  # expected, not in the capture
    # Not in the capture, but after a capture hole in that connection's responses: the
    # answer was most likely among the bytes lost (flag capture_gap). Not unanswered.
    RESPONSE_LOST = "response_lost"
    # Answered, but the bytes that tell ok from error were not captured (snap length or
    # a hole cut the response before its last error code) and none seen was non-zero.
    UNKNOWN = "unknown"
    ORPHAN_RESPONSE = "orphan_response"  # its request is not in the capture
    MALFORMED = "malformed"  # a body that could not be decoded


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)

ERROR_STATUSES: tuple[str, ...] = (Status.ERROR.value, Status.MALFORMED.value)
"""Rows counted as errors: a non-zero Kafka error code, or a message that could not be
decoded (CLI table, live view, report, stats, Spark: one rule)."""

UNANSWERED_STATUSES: tuple[str, ...] = (Status.UNANSWERED.value,)
"""Requests that expected a response and got none within the capture. Produce with
acks=0 (status ``no_response``) expects none and is not counted; nor is a request whose
response fell in a capture hole (``response_lost``: the capture lost it, not the broker)."""

LOST_STATUSES: tuple[str, ...] = (Status.RESPONSE_LOST.value,)
"""Requests whose response was most likely in a capture hole (flag ``capture_gap``):
listed beside the unanswered ones, counted apart from them."""


PANDAS_DTYPES: dict[str, str] = {
    Kind.STR: "string",
    Kind.INT: "Int64",
    Kind.FLOAT: "Float64",
    Kind.TIMESTAMP: "datetime64[ns, UTC]",
    Kind.STR_LIST: "object",
}
"""The pandas dtype of each kind of the pairs frame (nullable extension dtypes)."""


def arrow_type(kind: str, *, time_unit: str = "ns", list_item: str = "item") -> pa.DataType:
    """The one kind -> Arrow type map (the core's batches, Parquet files, Spark's batches).

    ``time_unit``: the core's times are nanoseconds; Parquet and Spark hold microseconds.
    ``list_item``: the name of a list's item field ("element" is what Parquet and Spark
    call it, so a schema read back from any writer's file equals the one written).
    """
    import pyarrow as pa

    by_kind: dict[str, pa.DataType] = {
        Kind.STR: pa.string(),
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.TIMESTAMP: pa.timestamp(time_unit, tz="UTC"),
        Kind.STR_LIST: pa.list_(pa.field(list_item, pa.string())),
        Kind.BOOL: pa.bool_(),
        Kind.COUNTER_MAP: pa.map_(pa.string(), pa.int64()),
    }
    try:
        return by_kind[kind]
    except KeyError:
        raise ValueError(f"column kind {kind!r} has no Arrow type; add it here") from None


# Values of the fetch_wait column and the share of max_wait_ms that makes an empty
# fetch a long poll that waited (the rule text is analytics.stats.SERVICE_LATENCY_RULE;
# the native core gets these through the exported model).
LONG_POLL_WAIT_SHARE = 0.9
"""An empty fetch that took at least this share of its max_wait_ms waited it out.
Timers and the network make the measured wait a little shorter or longer than the
configured one; 90% keeps a poll that ended on its timer apart from one that ended
early (an error, a new leader, a partition that got data)."""

FETCH_WAIT_EMPTY_POLL = "empty_poll"
FETCH_WAIT_DATA = "data"
FETCH_WAIT_EARLY = "early"
FETCH_WAIT_CLASSES: tuple[str, ...] = (FETCH_WAIT_EMPTY_POLL, FETCH_WAIT_DATA, FETCH_WAIT_EARLY)


FRAME_DTYPES: dict[str, str] = {
    # The in-memory pandas frame (``dissector.analyze``) is compact: a capture has
    # hundreds of thousands of pairs and few distinct strings (issue #10: under 150
    # bytes per pair). Every string column is a ``category`` (categories sorted, so
    # sorting matches the strings'), each integer the width of its Kafka wire field (or
    # the smallest that holds it), and the list columns Arrow-backed lists
    # (``list<item: string>[pyarrow]``: iterating, ``tolist`` and ``to_dict`` give
    # Python lists). Files keep the wide types of ``kind`` (Parquet: string, int64,
    # list<string>), so Spark and other readers are unchanged; ``frame.compact_frame``
    # turns such a frame back into these dtypes.
    #
    # ``topics`` keeps string items although the core hands them dictionary-encoded
    # (``list<dictionary<int32, string>>`` would save ~10 bytes per pair): exploded,
    # such a column is pandas' Arrow ``dictionary`` dtype, on which ``.str``,
    # ``sort_values``, ``max`` and ``astype("category")`` (with nulls) fail in pandas 3.
    #
    # Columns the native core fills on every row (``NEVER_NULL``) are plain numpy ints.
    "stream": "int32",
    "client_port": "uint16",
    "broker_port": "uint16",
    # Numbers that may be null are Arrow-backed (``int32[pyarrow]``, ``double[pyarrow]``):
    # null is ``pd.NA`` as in pandas' masked ``Int32``/``Float64`` (comparisons and
    # arithmetic propagate it, aggregations skip it), but Arrow keeps one validity bit
    # per value where the masked arrays keep a byte. Scalars read from them are Python
    # ``int``/``float``, not numpy ones.
    "api_key": "int16[pyarrow]",
    "api_version": "int16[pyarrow]",
    "correlation_id": "int32[pyarrow]",
    # 4 + a frame length that is an int32 on the wire: fits 32 bits unsigned.
    "request_size": "uint32[pyarrow]",
    "response_size": "uint32[pyarrow]",
    "error_code": "int16[pyarrow]",
    "error_count": "int32[pyarrow]",
    "partitions": "int32[pyarrow]",
    # Both bounded by the frame's int32 length.
    "records": "int32[pyarrow]",
    "record_bytes": "int32[pyarrow]",
    "throttle_ms": "int32[pyarrow]",
    "max_wait_ms": "int32[pyarrow]",
    "min_bytes": "int32[pyarrow]",
    "inflight": "int32[pyarrow]",
    "assumed_version": "int16[pyarrow]",
}


NEVER_NULL: frozenset[str] = frozenset({"stream", "client_port", "broker_port"})
"""Integer columns with a value on every row: every pair has a connection, and a
connection its two ports (``native/src/rows/mod.rs``, ``RowBuilder::push``). Their frame
dtypes carry no null mask; a file whose such column holds a null is not a pairs table."""


KIND_DTYPES = {
    "str": "category",
    "int": "int64[pyarrow]",
    "float": "double[pyarrow]",
    "timestamp": "datetime64[ns, UTC]",
    "str_list": "list<item: string>[pyarrow]",
}
"""The in-memory frame's dtype of each kind, unless ``schema.FRAME_DTYPES`` names one."""


def frame_dtype(name: str, kind: str) -> str:
    """The in-memory frame's dtype of one contract column (``schema.FRAME_DTYPES``)."""
    return FRAME_DTYPES.get(name, KIND_DTYPES[kind])
