"""What the partitions, groups and versions tables read from message bodies.

One declaration, two readers. The field names below (Apache's, snake_case) say which
fields play which role in a table ("topic name", "partition index", "committed
offset", "group id", "generation"...). ``export.py`` compiles them into the model the
native core interprets (``native/src/rows/tables.rs``: one pass over each capture for
every table), and the functions here read the same roles from bodies the Python
decoder decoded: the core's fallback for the rare pairs it cannot read as Python
would (malformed bodies), and the test oracle.

Partition entries are found generically: an array whose entries name a topic (a
topic-name field or ``topic_id``) and hold an array whose name mentions partitions;
the partition index is the entry itself (an int) or its partition-index field.
Request and response entries of one pair are merged by (group, topic, partition).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dissector.protocol.families import (
    GROUP_MEMBERSHIP,
    LONG_POLLS,
    NEGOTIATION,
    PARTITION_ROLES,
    by_name,
    names,
)
from dissector.protocol.keys import ApiKey
from dissector.protocol.spec import INT_TYPES, REQUEST, RESPONSE, Field, Layout
from dissector.stages import Decoder

# ----------------------------------------------------------------- partitions

PARTITION_APIS: Mapping[str, str] = by_name(PARTITION_ROLES)
"""``families.PARTITION_ROLES`` by Kafka's names: the APIs of the partitions table and
the role each plays for the derived quantities."""

PAIR_ROW_APIS = frozenset(names((ApiKey.END_TXN,)))
"""APIs whose pair is one row of its own: their bodies name no partition. The row has
the request's context fields, the response's error_code and ``TXN_COMMITTED_FIELD``."""
TXN_COMMITTED_FIELD = "committed"
"""EndTxn request: true commits the transaction, false aborts it."""

EXPAND_RESPONSES = frozenset(names(LONG_POLLS))
"""Responses whose record batches are expanded (the long polls, Fetch and ShareFetch):
the delivered offset range needs the offsets of the records, which counting does not
keep."""

TOPIC_NAME_FIELDS = ("topic", "topic_name", "name")
"""Role "topic name" of a partition-array's owner: the first non-empty text wins."""
TOPIC_ID_FIELD = "topic_id"
PARTITION_ARRAY_MARK = "partition"
"""An array whose name holds this lists partition entries (the first non-null one)."""
PARTITION_INDEX_FIELDS = ("partition_index", "partition", "index")
"""Role "partition index" of a partition entry: the first int wins."""
SKIPPED_ARRAY_PREFIX = "forgotten"
"""Arrays named so (partitions leaving a fetch session) are not entries of the pair."""
MAX_DEPTH = 8
"""Bodies nest a few levels; the search for entries never goes deeper."""

CONTEXT_FIELDS: Mapping[str, tuple[str, ...]] = {
    "group_id": ("group_id",),
    "member_id": ("member_id",),
    # the generation id or member epoch; member_epoch wins wherever it is given
    "member_epoch": ("member_epoch", "generation_id_or_member_epoch"),
    "acks": ("acks",),
    "transactional_id": ("transactional_id",),
    "isolation_level": ("isolation_level",),
}
"""Scalars of the structs that enclose an entry, inherited by it (the innermost given
wins), by column; text columns keep text values, the others int values."""
TEXT_CONTEXT = frozenset({"group_id", "member_id", "transactional_id"})
CONTEXT_NAMES: tuple[str, ...] = tuple(n for names in CONTEXT_FIELDS.values() for n in names)
GROUP_KEY_CONTEXT = "group_id"
"""The context field that, with topic and partition, merges request and response
entries."""


@dataclass(frozen=True, slots=True)
class EntryColumn:
    """A column read from a partition entry: the first int among ``fields`` on the
    first side (of ``sides``) that has a non-empty entry; ``nested`` (struct, member)
    is looked at after ``fields`` on each side."""

    column: str
    sides: tuple[str, ...]
    fields: tuple[str, ...]
    nested: tuple[str, str] | None = None


ENTRY_COLUMNS: tuple[EntryColumn, ...] = (
    EntryColumn("fetch_offset", (REQUEST,), ("fetch_offset",)),
    EntryColumn("base_offset", (RESPONSE,), ("base_offset",)),
    EntryColumn("high_watermark", (RESPONSE,), ("high_watermark",)),
    EntryColumn("last_stable_offset", (RESPONSE,), ("last_stable_offset",)),
    # the request's log_start_offset is a follower's own; only the broker's is kept
    EntryColumn("log_start_offset", (RESPONSE,), ("log_start_offset",)),
    EntryColumn("offset", (RESPONSE,), ("offset",)),
    EntryColumn("committed_offset", (RESPONSE, REQUEST), ("committed_offset",)),
    EntryColumn(
        "leader_epoch",
        (RESPONSE, REQUEST),
        ("leader_epoch", "committed_leader_epoch", "current_leader_epoch"),
        # ShareFetch and ShareAcknowledge nest the leader epoch
        nested=("current_leader", "leader_epoch"),
    ),
    # ListOffsets: what was asked for (-1 latest, -2 earliest, else a time in ms)
    EntryColumn("timestamp", (REQUEST,), ("timestamp",)),
)
ENTRY_ERROR_FIELD = "error_code"
"""The partition's error, in the response entry; else the response's own."""
TOP_ERROR_FIELD = "error_code"
ACQUIRED_RECORDS = ("acquired_records", "first_offset", "last_offset")
"""ShareFetch: the offset ranges the member acquired (array, first, last)."""
PRODUCE_BASE_COLUMN = "base_offset"
"""Produce: offsets written are base_offset .. base_offset + records - 1."""
FETCH_START_COLUMN = "fetch_offset"
"""Fetch: offsets delivered are the data records' at or after fetch_offset."""


# ----------------------------------------------------------------- groups

GROUP_APIS: Mapping[str, str] = by_name(GROUP_MEMBERSHIP)
"""``families.GROUP_MEMBERSHIP`` by Kafka's names: the membership APIs and the group
protocol each belongs to."""

GROUP_FIELDS: Mapping[str, tuple[str, ...]] = {
    "group_id": ("group_id",),
    "member_id": ("member_id",),
    # the first one given (non-empty) wins
    "instance_id": ("group_instance_id", "instance_id"),
    # the first int wins: member epoch (KIP-848/932), else generation id
    "generation": ("member_epoch", "generation_id"),
    "protocol_type": ("protocol_type",),
    "protocol_name": ("protocol_name",),
    "leader": ("leader",),
    "error": ("error_code",),
    # arrays of members: the response's members, else the request's assignments, else
    # its members (LeaveGroup v3+)
    "member_list": ("members", "assignments"),
    "assignment": ("assignment",),
}
"""Top-level fields of membership requests and responses, by role."""
MEMBER_LIST_ORDER: tuple[tuple[str, str], ...] = (
    (RESPONSE, "members"),
    (REQUEST, "assignments"),
    (REQUEST, "members"),
)
MEMBER_ITEM_FIELDS: Mapping[str, str] = {"member_id": "member_id", "error": "error_code"}
"""Members of a member list's entries: a LeaveGroup v3+ request's single member, the
first non-zero member error of a response."""
ASSIGNED_TOPICS = ("topic_partitions", "partitions")
"""A heartbeat response's assignment: topics (array), each with partitions (array)."""
SINGLE_MEMBER_APIS = frozenset(names((ApiKey.LEAVE_GROUP,)))
"""APIs whose old versions name their one member at the top level (members = 1)."""
FENCING_ERRORS = frozenset(
    {
        "FENCED_MEMBER_EPOCH",
        "STALE_MEMBER_EPOCH",
        "UNKNOWN_MEMBER_ID",
        "FENCED_INSTANCE_ID",
        "ILLEGAL_GENERATION",
    }
)
"""Errors that mean the broker no longer accepts the member as it is."""


# ----------------------------------------------------------------- versions

NEGOTIATION_API = NEGOTIATION.api_name
NO_RESPONSE = "no response"
NO_API_KEYS = "no api_keys in the response"
"""``negotiation_error`` when the ApiVersions request got no response, or one that
lists no range."""
SOFTWARE_FIELDS = ("client_software_name", "client_software_version")
ADVERTISED_FIELDS = ("api_keys", "api_key", "min_version", "max_version")
"""The response's array of advertised ranges, and its entries' key, min and max."""


# ----------------------------------------------------------------- facts of one pair


class Names(Protocol):
    """topic_id -> name as learnt so far (``summary.TopicNames``)."""

    def name(self, topic_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """One partitions-table row as the bodies of a pair give it (the pair's identity
    columns come from its exchange). ``entry_values``: one per ``ENTRY_COLUMNS``."""

    group_id: str | None
    member_id: str | None
    member_epoch: int | None
    acks: int | None
    transactional_id: str | None
    isolation_level: int | None
    txn_committed: bool | None
    topic: str | None
    topic_id: str | None
    partition: int | None
    error_code: int | None
    records: int | None
    record_bytes: int | None
    first_offset: int | None
    last_offset: int | None
    entry_values: list[int | None]


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """One groups-table row as the bodies of a membership call give it."""

    group_id: str | None
    member_id: str | None
    group_instance_id: str | None
    request_generation: int | None
    generation: int | None
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: int | None
    assignment_bytes: int | None
    assigned_partitions: int | None
    error_code: int | None


@dataclass(frozen=True, slots=True)
class Negotiation:
    """What one ApiVersions exchange tells of its connection: the client software
    (when the request names any), the broker's advertised ranges (when the response
    lists any) and why the response could not be read (None: it could)."""

    software: tuple[str | None, str | None] | None
    advertised: dict[int, tuple[int, int]] | None
    error: str | None


@dataclass(frozen=True, slots=True)
class PairFacts:
    """Everything the tables take from one pair's bodies (``pair_facts``)."""

    partitions: list[PartitionFacts] = field(default_factory=list)
    group: GroupFacts | None = None
    negotiation: Negotiation | None = None
    decode_errors: int = 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


# --- partition entries

_REQ, _RESP = 0, 1
_INT64_MAX = (1 << 63) - 1
_SIDE = {REQUEST: _REQ, RESPONSE: _RESP}


@dataclass(slots=True)
class _Entry:
    context: dict[str, Any]
    topic: str | None
    topic_id: str | None
    partition: int | None
    sides: list[dict[str, Any] | None] = field(default_factory=lambda: [None, None])


def _topic_of(item: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """(topic name, topic id) an array item names, or None if it names no topic."""
    name = next((v for k in TOPIC_NAME_FIELDS if isinstance(v := item.get(k), str) and v), None)
    tid = item.get(TOPIC_ID_FIELD)
    tid = tid if isinstance(tid, str) else None
    if name is None and tid is None:
        return None
    return name, tid


def _partition_array(item: dict[str, Any]) -> list[Any] | None:
    for key, value in item.items():
        if PARTITION_ARRAY_MARK in key and isinstance(value, list):
            return value
    return None


def _partition_index(p: Any) -> tuple[int | None, dict[str, Any]]:
    if type(p) is int:  # arrays of bare indexes (OffsetFetch request, forgotten topics)
        return p, {}
    if not isinstance(p, dict):
        return None, {}
    for key in PARTITION_INDEX_FIELDS:
        value = p.get(key)
        if type(value) is int:
            return value, p
    return None, p


def _context_of(body: dict[str, Any], outer: dict[str, Any]) -> dict[str, Any]:
    ctx = dict(outer)
    for key in CONTEXT_NAMES:
        value = body.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            ctx[key] = value
    return ctx


def partition_entries(
    body: dict[str, Any] | None, context: dict[str, Any] | None = None, depth: int = 0
) -> Iterator[tuple[dict[str, Any], tuple[str | None, str | None], int | None, dict[str, Any]]]:
    """(context, (topic, topic_id), partition, entry) for every partition entry of a body.

    ``context`` holds the context fields (``CONTEXT_FIELDS``) of the structs that
    enclose the entry.
    """
    if not isinstance(body, dict) or depth > MAX_DEPTH:
        return
    ctx = _context_of(body, context or {})
    for key, value in body.items():
        if not isinstance(value, list) or key.startswith(SKIPPED_ARRAY_PREFIX):
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


def _merge(request: dict[str, Any], response: dict[str, Any], names: Names) -> list[_Entry]:
    """Request and response entries of one pair, joined by (group, topic, partition)."""
    merged: dict[tuple[Any, ...], _Entry] = {}
    # Responses rarely repeat the request's group: its top-level fields apply to both.
    pair_context = _context_of(request, {})
    for side, body in ((_REQ, request), (_RESP, response)):
        for ctx, (name, tid), index, entry in partition_entries(body, pair_context):
            topic = name or (names.name(tid) if tid is not None else None) or tid
            key = (ctx.get(GROUP_KEY_CONTEXT), topic, index)
            row = merged.get(key)
            if row is None:
                row = merged[key] = _Entry(dict(ctx), topic, tid, index)
            else:
                row.context.update(ctx)
                row.topic_id = row.topic_id or tid
            row.sides[side] = entry
    return list(merged.values())


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


def _record_offsets(items: list[dict[str, Any]] | None) -> Iterator[int]:
    for batch in items or ():
        if not isinstance(batch, dict) or batch.get("is_control"):
            continue  # transaction markers are written by the coordinator, not produced
        for record in _list(batch.get("records")):
            offset = record.get("offset") if isinstance(record, dict) else None
            if type(offset) is int:
                yield offset


def _entry_value(entry: _Entry, column: EntryColumn) -> int | None:
    for side in column.sides:
        values = entry.sides[_SIDE[side]]
        if not values:
            continue
        for name in column.fields:
            value = values.get(name)
            if type(value) is int:
                return value
        if column.nested is not None:
            outer = values.get(column.nested[0])
            if isinstance(outer, dict):
                value = outer.get(column.nested[1])
                if type(value) is int:
                    return value
    return None


def _acquired(entry: dict[str, Any] | None) -> list[tuple[int, int]]:
    array, first, last = ACQUIRED_RECORDS
    out = []
    for r in _list((entry or {}).get(array)):
        if isinstance(r, dict) and type(r.get(first)) is int:
            end = r.get(last)
            out.append((r[first], end if type(end) is int else r[first]))
    return out


def _offset_range(
    role: str, entry: _Entry, records: int | None, offsets: list[int], values: dict[str, Any]
) -> tuple[int | None, int | None]:
    if role == "produce":
        base = values[PRODUCE_BASE_COLUMN]
        if base is None or base < 0 or not records or values["error_code"]:
            return None, None
        if base + records - 1 > _INT64_MAX:
            return None, None  # no offset a log can hold (a damaged base_offset)
        return base, base + records - 1
    if role != "fetch":
        return None, None
    acquired = _acquired(entry.sides[_RESP])
    if acquired:  # ShareFetch: the records this member acquired
        return min(a for a, _ in acquired), max(b for _, b in acquired)
    start = values[FETCH_START_COLUMN]
    delivered = [o for o in offsets if start is None or o >= start]
    if not delivered:
        return None, None
    return min(delivered), max(delivered)


def _entry_error(entry: _Entry, top: Any) -> int | None:
    values = entry.sides[_RESP]
    code = values.get(ENTRY_ERROR_FIELD) if values else None
    if type(code) is int and code:
        return code
    if type(top) is int and top:
        return top
    return code if type(code) is int else (top if type(top) is int else None)


def partition_facts(
    api_name: str, request: dict[str, Any], response: dict[str, Any], names: Names
) -> list[PartitionFacts]:
    """The partitions-table rows of one pair's bodies ({} where a side is absent)."""
    if api_name in PAIR_ROW_APIS:
        return [_pair_row(request, response)]
    role = PARTITION_APIS.get(api_name, "")
    out = []
    for entry in _merge(request, response, names):
        values: dict[str, Any] = {c.column: _entry_value(entry, c) for c in ENTRY_COLUMNS}
        code = _entry_error(entry, response.get(TOP_ERROR_FIELD))
        values["error_code"] = code
        req_n, req_b, _ = _records(entry.sides[_REQ])
        resp_n, resp_b, offsets = _records(entry.sides[_RESP])
        records = _add(req_n, resp_n)
        first, last = _offset_range(role, entry, records, offsets, values)
        ctx = entry.context
        out.append(
            PartitionFacts(
                **_context_columns(ctx),
                txn_committed=None,
                topic=entry.topic,
                topic_id=entry.topic_id,
                partition=entry.partition,
                error_code=code,
                records=records,
                record_bytes=_add(req_b, resp_b),
                first_offset=first,
                last_offset=last,
                entry_values=[values[c.column] for c in ENTRY_COLUMNS],
            )
        )
    return out


def _pair_row(request: dict[str, Any], response: dict[str, Any]) -> PartitionFacts:
    """The one row of a pair that names no partition (EndTxn)."""
    ctx = _context_of(request, {})
    code = _int(response.get(TOP_ERROR_FIELD))
    committed = request.get(TXN_COMMITTED_FIELD)
    return PartitionFacts(
        **_context_columns(ctx),
        txn_committed=committed if isinstance(committed, bool) else None,
        topic=None,
        topic_id=None,
        partition=None,
        error_code=code,
        records=None,
        record_bytes=None,
        first_offset=None,
        last_offset=None,
        entry_values=[None] * len(ENTRY_COLUMNS),
    )


def _context_columns(ctx: dict[str, Any]) -> dict[str, Any]:
    """Every context column (``CONTEXT_FIELDS``) of a row, by name."""
    return {column: _context_value(ctx, column) for column in CONTEXT_FIELDS}


def _context_value(ctx: dict[str, Any], column: str) -> Any:
    """A context column: the value of its first field the context holds, if of the
    column's kind."""
    for name in CONTEXT_FIELDS[column]:
        if name in ctx:
            value = ctx[name]
            return _str(value) if column in TEXT_CONTEXT else _int(value)
    return None


# --- group membership calls


def _member_id(request: dict[str, Any], response: dict[str, Any]) -> str | None:
    """The id the broker assigned (JoinGroup, first heartbeat), else the one sent, else
    the single member a LeaveGroup v3+ names."""
    (key,) = GROUP_FIELDS["member_id"]
    for body in (response, request):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    members = request.get(MEMBER_LIST_ORDER[-1][1])
    if isinstance(members, list) and len(members) == 1 and isinstance(members[0], dict):
        return _str(members[0].get(MEMBER_ITEM_FIELDS["member_id"]))
    return None


def _members(api: str, request: dict[str, Any], response: dict[str, Any]) -> int | None:
    bodies = {REQUEST: request, RESPONSE: response}
    for side, key in MEMBER_LIST_ORDER:
        value = bodies[side].get(key)
        if isinstance(value, list):
            return len(value)
    (key,) = GROUP_FIELDS["member_id"]
    return 1 if api in SINGLE_MEMBER_APIS and request.get(key) else None


def _assigned_partitions(response: dict[str, Any]) -> int | None:
    (key,) = GROUP_FIELDS["assignment"]
    assignment = response.get(key)
    if not isinstance(assignment, dict):
        return None
    topics, partitions = ASSIGNED_TOPICS
    count = 0
    for topic in _list(assignment.get(topics)):
        parts = topic.get(partitions) if isinstance(topic, dict) else None
        count += len(parts) if isinstance(parts, list) else 0
    return count


def _group_error(response: dict[str, Any]) -> int | None:
    (key,) = GROUP_FIELDS["error"]
    top = _int(response.get(key))
    if top:
        return top
    for member in _list(response.get(MEMBER_LIST_ORDER[0][1])):
        code = _int(member.get(MEMBER_ITEM_FIELDS["error"])) if isinstance(member, dict) else None
        if code:
            return code
    return top


def _first_int(body: dict[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = _int(body.get(name))
        if value is not None:
            return value
    return None


def _first_given(bodies: tuple[dict[str, Any], ...], names: tuple[str, ...]) -> str | None:
    """The first truthy value of ``names`` in ``bodies`` (``a or b or ...``), as text."""
    value: Any = None
    for body in bodies:
        for name in names:
            value = body.get(name)
            if value:
                return _str(value)
    return _str(value)


def group_facts(
    api_name: str, request: dict[str, Any], response: dict[str, Any], answered: bool
) -> GroupFacts:
    """The groups-table row of one membership call's bodies; ``answered``: a response
    frame was captured (decoded or not)."""
    code = _group_error(response)
    generations = GROUP_FIELDS["generation"]
    request_generation = _first_int(request, generations)
    generation = _first_int(response, generations)
    if generation is None and answered and code == 0:
        generation = request_generation  # SyncGroup/Heartbeat accepted the one sent
    (assignment_key,) = GROUP_FIELDS["assignment"]
    assignment = response.get(assignment_key)
    return GroupFacts(
        group_id=_str(request.get(GROUP_FIELDS["group_id"][0])),
        member_id=_member_id(request, response),
        group_instance_id=_first_given((request,), GROUP_FIELDS["instance_id"]),
        request_generation=request_generation,
        generation=generation,
        protocol_type=_first_given((response, request), GROUP_FIELDS["protocol_type"]),
        protocol_name=_first_given((response, request), GROUP_FIELDS["protocol_name"]),
        leader=_str(response.get(GROUP_FIELDS["leader"][0])) or None,
        members=_members(api_name, request, response),
        assignment_bytes=len(assignment) if isinstance(assignment, bytes) else None,
        assigned_partitions=_assigned_partitions(response),
        error_code=code,
    )


# --- ApiVersions


def _advertised(body: dict[str, Any] | None) -> dict[int, tuple[int, int]]:
    array, key_field, low_field, high_field = ADVERTISED_FIELDS
    out: dict[int, tuple[int, int]] = {}
    entries = body.get(array) if isinstance(body, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        key, low, high = entry.get(key_field), entry.get(low_field), entry.get(high_field)
        if type(key) is int and type(low) is int and type(high) is int:
            out[key] = (low, high)
    return out


def negotiation(request: Any, response: Any) -> Negotiation:
    """What one ApiVersions exchange (decoded sides, None where absent) tells."""
    software = None
    if request is not None:
        body = request.body or {}
        name, version = (body.get(f) for f in SOFTWARE_FIELDS)
        if isinstance(name, str) or isinstance(version, str):
            software = (name, version)
    if response is None:
        return Negotiation(software, None, NO_RESPONSE)
    advertised = _advertised(response.body)
    if advertised:
        return Negotiation(software, advertised, response.error)
    return Negotiation(software, None, response.error or NO_API_KEYS)


# --- one pair, as the native core's fallback asks


def _body(decoded: Any) -> dict[str, Any]:
    body = decoded.body if decoded is not None else None
    return body if isinstance(body, dict) else {}


def decode_pair(
    decoder: Decoder,
    api_key: int,
    api_version: int,
    request: bytes | None,
    response: bytes | None,
) -> tuple[Any, Any]:
    """Both sides decoded as the tables read them (a delivered offset range needs the
    records of the responses in ``EXPAND_RESPONSES``), the assumed-version rule settled."""
    from dissector.protocol.messages import settle_assumed

    expand = decoder.api_name(api_key) in EXPAND_RESPONSES
    req = decoder.decode_request(request) if request is not None else None
    resp = (
        decoder.decode_response(response, api_key, api_version, records=expand)
        if response is not None
        else None
    )
    settle_assumed(req, resp)  # a version newer than the specs: both sides or neither
    return req, resp


def pair_facts(
    decoder: Decoder,
    api_key: int,
    api_version: int,
    request: bytes | None,
    response: bytes | None,
    names: Names,
) -> PairFacts:
    """What every table takes from one pair, by the Python decoder."""
    req, resp = decode_pair(decoder, api_key, api_version, request, response)
    api = decoder.api_name(api_key)
    errors = sum(1 for s in (req, resp) if s is not None and s.error)
    parts = []
    if api in PARTITION_APIS:
        parts = partition_facts(api, _body(req), _body(resp), names)
    group = None
    if api in GROUP_APIS:
        group = group_facts(api, _body(req), _body(resp), resp is not None)
    settled = negotiation(req, resp) if api == NEGOTIATION_API else None
    return PairFacts(parts, group, settled, errors)


# ----------------------------------------------------------------- the model's roles

# The roles of the fields a table reads, as the native core interprets them
# (``export.py`` writes them into the model beside each field, ``native/src/rows/tables.rs``
# reads them). A field whose name says it plays a role but whose type cannot is
# marked ``odd``: the core leaves such a pair to the functions above.

_TEXT = frozenset({"string", "uuid"})

Path = tuple[int, ...]
"""A field's place in its layout: member indices from the body down."""
Roles = dict[str, Any]


def _is_int(f: Field) -> bool:
    return f.type in INT_TYPES and not f.array


def _is_text(f: Field) -> bool:
    return f.type in _TEXT and not f.array


VALUE_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            *(n for c in ENTRY_COLUMNS for n in c.fields),
            ENTRY_ERROR_FIELD,
            *(".".join(c.nested) for c in ENTRY_COLUMNS if c.nested),
        ]
    )
)
"""The int fields of a partition entry the rows read, by slot (nested ones dotted)."""


def _looks_like_size(f: Field) -> bool:
    """A struct member a partition entry's records sum would take for a records size
    (``_records``)."""
    plain = {m.name for m in f.fields if m.tag is None}
    return (
        f.type == "struct"
        and not f.array
        and "size" in {m.name for m in f.fields}
        and plain <= {"size", "error"}
    )


def _can_name_topic(fields: tuple[Field, ...]) -> bool:
    """Can an item with these fields name a topic (``_topic_of``) and list partitions?"""
    names_topic = any(
        (m.name in TOPIC_NAME_FIELDS or m.name == TOPIC_ID_FIELD) and _is_text(m) for m in fields
    )
    return names_topic and any(PARTITION_ARRAY_MARK in m.name and m.array for m in fields)


def _is_entry_array(m: Field) -> bool:
    return m.array and m.type == "struct" and not m.name.startswith(SKIPPED_ARRAY_PREFIX)


def _may_yield(fields: tuple[Field, ...], depth: int) -> bool:
    """Can ``partition_entries`` of a struct with these fields, at ``depth``, yield?"""
    if depth > MAX_DEPTH:
        return False
    return any(
        _can_name_topic(m.fields) or _may_yield(m.fields, depth + 1)
        for m in fields
        if _is_entry_array(m)
    )


class _Roles:
    """Roles by path, filled by the walks below."""

    def __init__(self) -> None:
        self.by_path: dict[Path, Roles] = {}

    def add(self, path: Path, **roles: Any) -> None:
        self.by_path.setdefault(path, {}).update(roles)


def _partition_roles(fields: tuple[Field, ...], at: Path, depth: int, out: _Roles) -> None:
    """Roles of a struct searched for partition entries at ``depth``, and of what the
    search reaches below it."""
    for i, m in enumerate(fields):
        if m.name in CONTEXT_NAMES and (_is_int(m) or _is_text(m)):
            out.add((*at, i), context=CONTEXT_NAMES.index(m.name))
        if not _is_entry_array(m):
            continue
        topic_entries = _can_name_topic(m.fields)
        deeper = _may_yield(m.fields, depth + 1)
        if not (topic_entries or deeper):
            continue
        out.add((*at, i), entries=True)
        if topic_entries:
            _item_roles(m.fields, (*at, i), out)
        if deeper:
            _partition_roles(m.fields, (*at, i), depth + 1, out)


def _item_roles(fields: tuple[Field, ...], at: Path, out: _Roles) -> None:
    """Roles of an entry that may name a topic and list its partitions."""
    for i, m in enumerate(fields):
        if m.name in TOPIC_NAME_FIELDS and _is_text(m):
            out.add((*at, i), topic_name=TOPIC_NAME_FIELDS.index(m.name))
        if m.name == TOPIC_ID_FIELD and _is_text(m):
            out.add((*at, i), topic_id=True)
        if PARTITION_ARRAY_MARK in m.name and m.array:
            out.add((*at, i), partition_array=True)
            if m.type == "struct":
                _partition_entry_roles(m.fields, (*at, i), out)


def _partition_entry_roles(fields: tuple[Field, ...], at: Path, out: _Roles) -> None:
    nested = {c.nested[0]: c.nested for c in ENTRY_COLUMNS if c.nested}
    array, first, last = ACQUIRED_RECORDS
    for i, m in enumerate(fields):
        here = (*at, i)
        if m.name in PARTITION_INDEX_FIELDS and _is_int(m):
            out.add(here, partition_index=PARTITION_INDEX_FIELDS.index(m.name))
        if m.name in VALUE_FIELDS and _is_int(m):
            out.add(here, value=VALUE_FIELDS.index(m.name))
        if m.type == "records" and not m.array:
            out.add(here, records=True)
        if _looks_like_size(m):
            out.add(here, odd=True)
        if m.name in nested and m.type == "struct" and not m.array:
            for j, n in enumerate(m.fields):
                if n.name == nested[m.name][1] and _is_int(n):
                    out.add((*here, j), value=VALUE_FIELDS.index(".".join(nested[m.name])))
                    out.add(here, nested=True)
        if m.name == array and m.array and m.type == "struct":
            for j, n in enumerate(m.fields):
                if n.name in (first, last) and _is_int(n):
                    out.add((*here, j), acquired="first" if n.name == first else "last")
                    out.add(here, acquired="array")


# The type each group role needs; a field of another type is odd.
_GROUP_KINDS: Mapping[str, str] = {
    "group_id": "text",
    "member_id": "text",
    "instance_id": "text",
    "generation": "int",
    "protocol_type": "text",
    "protocol_name": "text",
    "leader": "text",
    "error": "int",
    "member_list": "array",
    "assignment": "assignment",
}


def _kind_fits(f: Field, kind: str) -> bool:
    if kind == "text":
        return _is_text(f)
    if kind == "int":
        return _is_int(f)
    if kind == "array":
        return f.array
    return not f.array and f.type in ("bytes", "struct")  # an assignment


def _group_roles(layout: Layout, out: _Roles) -> None:
    topics, partitions = ASSIGNED_TOPICS
    for i, m in enumerate(layout.fields):
        role = next((r for r, names in GROUP_FIELDS.items() if m.name in names), None)
        if role is None:
            continue
        if role == "member_list" and (layout.direction, m.name) not in MEMBER_LIST_ORDER:
            continue
        if not _kind_fits(m, _GROUP_KINDS[role]):
            out.add((i,), odd=True)
            continue
        if role == "member_list":
            rank = MEMBER_LIST_ORDER.index((layout.direction, m.name))
        else:
            rank = GROUP_FIELDS[role].index(m.name)
        out.add((i,), group=role, rank=rank)
        if role == "member_list" and m.type == "struct":
            for j, n in enumerate(m.fields):
                for item_role, name in MEMBER_ITEM_FIELDS.items():
                    if n.name == name:
                        fits = _kind_fits(n, _GROUP_KINDS[item_role])
                        out.add(
                            (i, j), **({"group": f"member_{item_role}"} if fits else {"odd": True})
                        )
        if role == "assignment" and m.type == "struct":
            for j, t in enumerate(m.fields):
                if t.name == topics and t.array and t.type == "struct":
                    out.add((i, j), group="assigned_topics")
                    for k, p in enumerate(t.fields):
                        if p.name == partitions and p.array:
                            out.add((i, j, k), group="assigned_partitions")


def _version_roles(layout: Layout, out: _Roles) -> None:
    if layout.direction == REQUEST:
        for i, m in enumerate(layout.fields):
            if m.name in SOFTWARE_FIELDS:
                slot = f"software_{SOFTWARE_FIELDS.index(m.name)}"
                out.add((i,), **({"version": slot} if _is_text(m) else {"odd": True}))
        return
    array, *members = ADVERTISED_FIELDS
    for i, m in enumerate(layout.fields):
        if m.name == array and m.array and m.type == "struct":
            out.add((i,), version="advertised")
            for j, n in enumerate(m.fields):
                if n.name in members and _is_int(n):
                    out.add((i, j), version=f"advertised_{members.index(n.name)}")


def layout_roles(layout: Layout, api_name: str) -> dict[Path, Roles]:
    """The table roles of a layout's fields by path (empty for layouts no table reads)."""
    out = _Roles()
    if api_name in PARTITION_APIS:
        _partition_roles(layout.fields, (), 0, out)
        if api_name in PAIR_ROW_APIS and layout.direction == REQUEST:
            for i, m in enumerate(layout.fields):
                if m.name == TXN_COMMITTED_FIELD and m.type == "bool" and not m.array:
                    out.add((i,), committed=True)
        if layout.direction == RESPONSE:
            for i, m in enumerate(layout.fields):
                if m.name == TOP_ERROR_FIELD and _is_int(m):
                    out.add((i,), top_error=True)
    if api_name in GROUP_APIS:
        _group_roles(layout, out)
    if api_name == NEGOTIATION_API:
        _version_roles(layout, out)
    return out.by_path
