"""The pairs DataFrame contract: column names, their meaning and their types.

Every output (pandas frame, Parquet/CSV/JSON export, report, Spark schema) is
built from this one table, so a column is renamed or added in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str  # one of: str, int, float, timestamp, str_list
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
        "ok | error | no_response | unanswered | orphan_response | malformed",
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
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

STATUSES: tuple[str, ...] = (
    "ok",
    "error",
    "no_response",
    "unanswered",
    "orphan_response",
    "malformed",
)

FRAME_DTYPES: dict[str, str] = {
    # The in-memory pandas frame (``dissector.analyze``) is compact: a capture has
    # hundreds of thousands of pairs and few distinct strings. Every string column is a
    # ``category`` (categories sorted, so sorting matches the strings'), each integer
    # the nullable width of its Kafka wire field (or the smallest that holds it), and
    # the list columns Arrow-backed lists (``list<item: string>[pyarrow]``: iterating,
    # ``tolist`` and ``to_dict`` give Python lists). Files keep the wide types of
    # ``kind`` (Parquet: string, int64, list<string>), so Spark and other readers are
    # unchanged; ``frame.compact_frame`` turns such a frame back into these dtypes.
    # A column not named here gets the default of its kind (``frame.KIND_DTYPES``).
    "stream": "Int32",
    "client_port": "UInt16",
    "broker_port": "UInt16",
    "api_key": "Int16",
    "api_version": "Int16",
    "correlation_id": "Int32",
    # 4 + a frame length that is an int32 on the wire: fits 32 bits unsigned.
    "request_size": "UInt32",
    "response_size": "UInt32",
    "error_code": "Int16",
    "error_count": "Int32",
    "partitions": "Int32",
    # Both bounded by the frame's int32 length.
    "records": "Int32",
    "record_bytes": "Int32",
    "throttle_ms": "Int32",
    "max_wait_ms": "Int32",
    "min_bytes": "Int32",
}
