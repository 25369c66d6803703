"""The analytics tables' contracts: partitions, groups and versions columns.

(name, pandas dtype, meaning) per column, in order. The pandas functions
(``dissector.partitions`` ...), the native core's Arrow columns
(``dissector.wire.tables``), Spark and the exports are all built from these; the
README documents them. The entry columns of the partitions table (``fetch_offset``
on) are the ones ``dissector.protocol.tables.ENTRY_COLUMNS`` reads, in its order.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

Contract = tuple[tuple[str, str, str], ...]

PAIR_IDENTITY: Contract = (
    ("capture", "string", "path of the capture file"),
    ("stream", "Int64", "TCP connection index within the capture"),
    ("correlation_id", "Int64", "correlation id of the pair"),
    ("client_id", "string", "client_id from the request header"),
    ("request_time", "datetime64[ns, UTC]", "request complete"),
    ("response_time", "datetime64[ns, UTC]", "response complete (null: no response)"),
)
"""The columns that name the pair a partitions or groups row comes from."""

PARTITION_COLUMNS: Contract = (
    *PAIR_IDENTITY,
    (
        "api_name",
        "string",
        "one of Produce, Fetch, ShareFetch, ShareAcknowledge, ListOffsets, OffsetCommit, "
        "OffsetFetch, TxnOffsetCommit, EndTxn",
    ),
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
    ("fetch_offset", "Int64", "fetch_offset of the partition entry (fetch_offset)"),
    ("base_offset", "Int64", "base_offset of the partition entry (base_offset)"),
    ("high_watermark", "Int64", "high_watermark of the partition entry (high_watermark)"),
    (
        "last_stable_offset",
        "Int64",
        "last_stable_offset of the partition entry (last_stable_offset)",
    ),
    ("log_start_offset", "Int64", "log_start_offset of the partition entry (log_start_offset)"),
    ("offset", "Int64", "offset of the partition entry (offset)"),
    ("committed_offset", "Int64", "committed_offset of the partition entry (committed_offset)"),
    (
        "leader_epoch",
        "Int64",
        "leader_epoch of the partition entry (leader_epoch, committed_leader_epoch, "
        "current_leader_epoch, current_leader.leader_epoch)",
    ),
    ("timestamp", "Int64", "timestamp of the partition entry (timestamp)"),
)

GROUP_COLUMNS: Contract = (
    *PAIR_IDENTITY,
    ("latency_ms", "Float64", "response complete minus request complete"),
    ("api_name", "string", "JoinGroup, SyncGroup, Heartbeat, LeaveGroup, *GroupHeartbeat"),
    ("api_version", "Int64", "API version of the request"),
    ("group_protocol", "string", "classic, consumer (KIP-848), share (KIP-932), streams"),
    ("group_id", "string", "the group"),
    ("member_id", "string", "the member (the id the broker gave, else the one sent)"),
    ("group_instance_id", "string", "static membership id"),
    ("request_generation", "Int64", "generation id or member epoch the request carried"),
    ("generation", "Int64", "generation id (JoinGroup) or member epoch (heartbeats) answered"),
    ("protocol_type", "string", "JoinGroup/SyncGroup protocol type, e.g. consumer"),
    ("protocol_name", "string", "chosen assignor, e.g. range"),
    ("leader", "string", "JoinGroup: the leader's member id"),
    ("members", "Int64", "members listed (JoinGroup response, SyncGroup/LeaveGroup request)"),
    ("assignment_bytes", "Int64", "SyncGroup: bytes of the member's assignment"),
    ("assigned_partitions", "Int64", "heartbeats: partitions in the assignment answered"),
    ("error_code", "Int64", "top-level error, else the first non-zero member error"),
    ("error_name", "string", "Kafka's name for error_code"),
    ("fenced", "boolean", "the error fences the member (epoch/generation/member id)"),
)

VERSION_COLUMNS: Contract = (
    ("capture", "string", "path of the capture file"),
    ("stream", "Int64", "TCP connection index within the capture"),
    ("client_id", "string", "client_id of the connection's first request"),
    ("client_software_name", "string", "ApiVersions v3+: the client library's name"),
    ("client_software_version", "string", "ApiVersions v3+: the client library's version"),
    ("negotiation_version", "Int64", "version of the connection's ApiVersions request"),
    ("negotiation_error", "string", "why the ApiVersions response could not be read"),
    ("api_key", "Int64", "API the client used on the connection"),
    ("api_name", "string", "its name"),
    ("requests", "Int64", "requests of that API on the connection"),
    ("versions_used", "object", "distinct versions the client sent, ascending"),
    ("broker_min", "Int64", "lowest version the broker advertised (null: not seen)"),
    ("broker_max", "Int64", "highest version the broker advertised (null: not seen)"),
    ("within_broker_range", "boolean", "every version used lies in the advertised range"),
    ("spec_max", "Int64", "newest request version the loaded specs know"),
    ("unknown_versions", "object", "versions used that the loaded specs do not know"),
)

CONTRACTS: dict[str, Contract] = {
    "partitions": PARTITION_COLUMNS,
    "groups": GROUP_COLUMNS,
    "versions": VERSION_COLUMNS,
}
"""The tables by name, in the order a run produces them."""


def names(contract: Contract) -> tuple[str, ...]:
    return tuple(c[0] for c in contract)


# Cached: every batch of every table the core hands over is typed by them (pyarrow's
# types and schemas are immutable), and building them anew cost a tenth of a
# millisecond a table batch.
@functools.cache
def arrow_type(dtype: str, *, dictionary: bool = False) -> pa.DataType:
    """A contract's pandas dtype as Arrow (``object`` columns are lists of ints);
    ``dictionary``: strings dictionary-encoded (int32 codes), as the core builds them."""
    import pyarrow as pa

    types = {
        "string": pa.dictionary(pa.int32(), pa.string()) if dictionary else pa.string(),
        "Int64": pa.int64(),
        "Float64": pa.float64(),
        "boolean": pa.bool_(),
        "datetime64[ns, UTC]": pa.timestamp("ns", tz="UTC"),
        "object": pa.list_(pa.int64()),
    }
    return types[dtype]


@functools.cache
def arrow_schema(contract: Contract, *, dictionary: bool = False) -> pa.Schema:
    import pyarrow as pa

    fields = [
        pa.field(name, arrow_type(dtype, dictionary=dictionary)) for name, dtype, _ in contract
    ]
    return pa.schema(fields)
