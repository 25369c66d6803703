"""Reduce a decoded request/response pair to the analytics columns of ``dissector.schema``.

The rules read the field names of Apache's specs generically (``error_code``,
``throttle_time_ms``, arrays whose name mentions topics or partitions), so a new
API needs no code here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dissector.protocol.errors import error_name
from dissector.protocol.families import TOPIC_ID_SOURCES
from dissector.protocol.messages import Decoded, settle_assumed
from dissector.protocol.spec import INT_TYPES, Field, Layout

_TOPIC_NAME_KEYS = ("topic", "topic_name", "name")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass
class TopicNames:
    """topic_id -> name, learnt from Metadata, CreateTopics and DescribeTopicPartitions.

    One object lives per capture (or per analysis run); ids are only resolved for
    pairs seen after the response that named them, as a live tool would.
    """

    names: dict[str, str] = field(default_factory=dict)

    def learn(self, api_key: int, response_body: dict[str, Any] | None) -> int:
        """Record the ids a response names; returns how many were new."""
        if api_key not in TOPIC_ID_SOURCES or not response_body:
            return 0
        added = 0
        for topic in response_body.get("topics") or ():
            if not isinstance(topic, dict):
                continue
            tid, name = topic.get("topic_id"), topic.get("name")
            if isinstance(tid, str) and isinstance(name, str) and tid != ZERO_UUID:
                if self.names.get(tid) != name:
                    added += 1
                self.names[tid] = name
        return added

    def name(self, topic_id: str) -> str | None:
        return self.names.get(topic_id)

    def annotate(self, body: dict[str, Any] | None) -> None:
        """Add ``topic_name`` beside every known ``topic_id`` that has no name next to it."""
        if not self.names:  # no id learnt yet (most captures): nothing to walk for
            return
        for d in _dicts(body):
            tid = d.get("topic_id")
            if isinstance(tid, str) and not any(
                isinstance(d.get(k), str) for k in _TOPIC_NAME_KEYS
            ):
                known = self.names.get(tid)
                if known is not None:
                    d["topic_name"] = known


@dataclass
class Summary:
    error_code: int | None = None
    error_name: str | None = None
    error_count: int = 0
    topics: list[str] = field(default_factory=list)
    partitions: int | None = None
    records: int | None = None
    record_bytes: int | None = None
    compression: str | None = None
    throttle_ms: int | None = None
    decode_error: str | None = None
    # Anomalies inside records fields (bad CRC, decompression limit, ...): listed in
    # decode_error as "records: <code>: <detail>", counted here. They do not make the
    # frame malformed.
    record_errors: int = 0
    # Records fields that end inside a batch (a Fetch cut at its byte limit: normal),
    # counted as ``records_partial_batches``.
    partial_batches: int = 0
    # The newest known version whose layout decoded a pair of a newer version
    # (messages.ASSUMED_VERSION_RULE), else None.
    assumed_version: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (``dataclasses.asdict``'s result, without its deep copy
        of every value: ``decode`` makes one per pair)."""
        # A plain dataclass keeps its fields in __dict__ in field order (__init__ sets
        # them so); a copy of it is the cheapest dict of them.
        out = dict(self.__dict__)
        out["topics"] = list(self.topics)
        return out


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    """Every dict inside a decoded body, depth first in field order."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            yield v
            stack.extend(reversed([x for x in v.values() if isinstance(x, dict | list)]))
        elif isinstance(v, list):
            stack.extend(reversed([x for x in v if isinstance(x, dict | list)]))


@dataclass(slots=True)
class _Scan:
    """What one walk over a decoded body finds (one pass: this runs for every pair)."""

    names: TopicNames
    topics: dict[str, None]
    first_nonzero_error: int | None = None
    saw_error_code: bool = False
    error_count: int = 0
    partitions: int | None = None
    records: int | None = None
    record_bytes: int | None = None
    codecs: list[str] = field(default_factory=list)
    record_errors: list[str] = field(default_factory=list)
    partial_batches: int = 0


def is_error_key(key: str) -> bool:
    return key == "error_code" or key.endswith("_error_code")


def _walk(d: dict[str, Any], scan: _Scan, depth: int = 0) -> None:
    if depth > 64:
        return  # decoded bodies nest a few levels; never recurse without bound
    for key, value in d.items():
        kind = type(value)
        if kind is int:
            if is_error_key(key):
                scan.saw_error_code = True
                if value:
                    scan.error_count += 1
                    if scan.first_nonzero_error is None:
                        scan.first_nonzero_error = value
        elif kind is list:
            _walk_list(key, value, scan, depth)
        elif kind is dict:
            if "size" in value and len(value) <= 2 and set(value) <= {"size", "error"}:
                _add_records_size(value, scan)
            else:
                _walk(value, scan, depth + 1)
        elif kind is not str and kind is not bytes and hasattr(value, "codecs"):
            _add_record_set(value, scan)


def _add_record_set(value: Any, scan: _Scan) -> None:
    """A records field parsed by protocol.records (a RecordSet)."""
    scan.records = (scan.records or 0) + int(value.records)
    scan.record_bytes = (scan.record_bytes or 0) + int(value.bytes)
    scan.codecs.extend(value.codecs)
    scan.partial_batches += int(getattr(value, "partial_batches", 0))
    if value.errors:
        scan.record_errors.extend(value.errors)


def _add_records_size(value: dict[str, Any], scan: _Scan) -> None:
    """A records field the hook only sized: raw, or its parser failed (``error``)."""
    scan.record_bytes = (scan.record_bytes or 0) + int(value["size"])
    error = value.get("error")
    if error:
        scan.record_errors.append(f"internal_error: {error}")


def _walk_list(key: str, value: list[Any], scan: _Scan, depth: int) -> None:
    first = value[0] if value else None
    if "partition" in key and type(first) is not list:
        # entries of arrays whose name mentions partitions (structs or indexes)
        scan.partitions = (scan.partitions or 0) + len(value)
    if type(first) is dict:
        topic_array = "topic" in key
        for item in value:
            if type(item) is dict:
                _topic_of(topic_array, item, scan)
                _walk(item, scan, depth + 1)
    elif type(first) is str and "topic" in key:
        for item in value:
            if type(item) is str:
                scan.topics.setdefault(item)


def _topic_of(topic_array: bool, item: dict[str, Any], scan: _Scan) -> None:
    """Names of topics: struct fields ``topic``/``topic_name``, ``name`` in an element of
    a topic array or of an array whose elements list partitions, else a known topic id."""
    value = item.get("topic") or item.get("topic_name")
    if type(value) is str:
        scan.topics.setdefault(value)
        return
    value = item.get("name")
    # any() only runs for items that have a name: `and` stops early otherwise
    if type(value) is str and value and (topic_array or any("partition" in k for k in item)):
        scan.topics.setdefault(value)
        return
    tid = item.get("topic_id")
    if type(tid) is str and tid != ZERO_UUID:
        scan.topics.setdefault(scan.names.name(tid) or tid)


def _scan(decoded: Decoded | None, names: TopicNames, topics: dict[str, None]) -> _Scan:
    body = decoded.body if decoded is not None else None
    if not body:
        return _NOTHING_FOUND
    scan = _NOTHING_FOUND
    layout = decoded.layout if decoded is not None else None
    if layout is not None:
        steps = _plan_of(layout)
        if steps:  # many small admin bodies have nothing a column reads
            scan = _Scan(names, topics)
            _run(steps, body, scan)
    else:  # a body decoded elsewhere: no layout to plan by
        scan = _Scan(names, topics)
        _walk(body, scan)
    for key in ("topic", "topic_name"):
        value = body.get(key)
        if type(value) is str:
            topics.setdefault(value)
    return scan


# The scan of a side nothing is read from (no body, or no field a column reads): one
# shared object, only ever read (``summarize`` reads scans, the walks fill fresh ones).
_NOTHING_FOUND = _Scan(TopicNames(), {})


# --- plans: the walk above, specialised once per layout ---------------------------
#
# ``_walk`` looks at every value of every dict, which for large bodies of things
# no column needs (ApiVersions' hundreds of api_keys entries, Metadata's brokers,
# replica lists) costs more than decoding them. A plan lists, per struct and in
# field order, only the fields that can change a summary, as decided from the
# layout by the same rules; ``_run`` then visits those. Values are still checked
# at run time exactly as ``_walk`` checks them (partial bodies of malformed frames
# lack fields; null arrays and structs are None), so both give the same summary.

# The plan's vocabulary: a step is (op, field name, sub-plan). Public because
# export.py derives the native core's role bits from the same steps (field_step,
# array_step, field_plan), so the core and this module read the same fields.
OP_ERROR = 0  # an integer field named like an error code
OP_ARRAY = 1
OP_STRUCT = 2  # a nested (non-array) struct
OP_RECORDS = 3
OP_GENERIC = 4  # a struct the plan does not describe: walked by ``_walk``

_TOPIC_ITEM_KEYS = frozenset({"topic", "topic_name", "topic_id"})

Step = tuple[int, str, Any]


@dataclass(frozen=True, slots=True)
class _ArrayPlan:
    partitions: bool  # the name mentions partitions: entries count as partitions
    topic_array: bool  # the name mentions topics
    topic_of_items: bool  # struct entries may name a topic (``_topic_of``)
    items: tuple[Step, ...] | None  # what to read in struct entries (None: nothing)
    topic_strings: bool  # entries are strings or uuids of a topic array


def field_plan(fields: tuple[Field, ...]) -> tuple[Step, ...]:
    plain = [f for f in fields if f.tag is None]
    tagged = [f for f in fields if f.tag is not None]
    steps = [s for s in map(field_step, plain) if s is not None]
    tagged_steps = [s for s in map(field_step, tagged) if s is not None]
    if len(tagged_steps) > 1:
        # Tagged fields enter the dict in wire order, which the layout does not fix;
        # order decides the first error and the topic order, so walk such a struct.
        return ((OP_GENERIC, "", None),)
    return tuple(steps + tagged_steps)


def field_step(f: Field) -> Step | None:
    if f.array:
        return array_step(f)
    if f.type == "struct":
        sub = field_plan(f.fields)
        # a struct of just ``size`` (and ``error``) reads like a records summary
        looks_like_size = "size" in {m.name for m in f.fields}
        return (OP_STRUCT, f.name, sub) if sub or looks_like_size else None
    if f.type == "records":
        return (OP_RECORDS, f.name, None)
    if f.type in INT_TYPES and is_error_key(f.name):
        return (OP_ERROR, f.name, None)
    return None


def array_step(f: Field) -> Step | None:
    items: tuple[Step, ...] | None = None
    topic_of_items = False
    if f.type == "struct":
        items = field_plan(f.fields) or None
        topic_of_items = _may_name_topic("topic" in f.name, f.fields)
    plan = _ArrayPlan(
        partitions="partition" in f.name,
        topic_array="topic" in f.name,
        topic_of_items=topic_of_items,
        items=items,
        topic_strings=f.type in ("string", "uuid") and "topic" in f.name,
    )
    if plan.partitions or plan.items or plan.topic_of_items or plan.topic_strings:
        return (OP_ARRAY, f.name, plan)
    return None


def _may_name_topic(topic_array: bool, members: tuple[Field, ...]) -> bool:
    """Can ``_topic_of`` find a topic in entries with these fields? (Its run-time
    checks still apply: this only rules out entries that can never name one.)"""
    names = [m.name for m in members]
    if any(n in _TOPIC_ITEM_KEYS for n in names):
        return True
    return "name" in names and (topic_array or any("partition" in n for n in names))


# Plans by layout identity: layouts live in their registry for the whole process,
# and each entry holds its layout, so an id is never reused while its entry exists.
_PLANS: dict[int, tuple[Layout, tuple[Step, ...]]] = {}
_MAX_PLANS = 1 << 14


def _plan_of(layout: Layout) -> tuple[Step, ...]:
    entry = _PLANS.get(id(layout))
    if entry is None or entry[0] is not layout:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        entry = _PLANS[id(layout)] = (layout, field_plan(layout.fields))
    return entry[1]


def _run(steps: tuple[Step, ...], d: dict[str, Any], scan: _Scan) -> None:
    for op, key, arg in steps:
        if op == OP_GENERIC:
            _walk(d, scan)
            return
        value = d.get(key)
        if value is None:
            continue
        if op == OP_ARRAY:
            if type(value) is list:
                _run_array(arg, value, scan)
        elif op == OP_ERROR:
            if type(value) is int:
                scan.saw_error_code = True
                if value:
                    scan.error_count += 1
                    if scan.first_nonzero_error is None:
                        scan.first_nonzero_error = value
        elif type(value) is dict:  # a struct, or the records hook's size summary
            if "size" in value and len(value) <= 2 and set(value) <= {"size", "error"}:
                _add_records_size(value, scan)
            elif op == OP_STRUCT:
                _run(arg, value, scan)
            else:
                _walk(value, scan)
        elif op == OP_RECORDS and hasattr(value, "codecs"):
            _add_record_set(value, scan)


def _run_array(plan: _ArrayPlan, value: list[Any], scan: _Scan) -> None:
    first = value[0] if value else None
    if plan.partitions and type(first) is not list:
        scan.partitions = (scan.partitions or 0) + len(value)
    if type(first) is dict:
        items = plan.items
        if plan.topic_of_items:
            for item in value:
                if type(item) is dict:
                    _topic_of(plan.topic_array, item, scan)
                    if items:
                        _run(items, item, scan)
        elif items:
            for item in value:
                if type(item) is dict:
                    _run(items, item, scan)
    elif plan.topic_strings and type(first) is str:
        for item in value:
            if type(item) is str:
                scan.topics.setdefault(item)


def _error_code(body: dict[str, Any] | None, scan: _Scan) -> int | None:
    """The top-level error code, else the first non-zero nested one, else 0 if any."""
    top = body.get("error_code") if body else None
    if type(top) is int and top:
        return top
    if scan.first_nonzero_error is not None:
        return scan.first_nonzero_error
    return 0 if scan.saw_error_code else None


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def summarize(
    api_key: int,
    api_version: int,
    request: Decoded | None,
    response: Decoded | None,
    topics: TopicNames,
) -> Summary:
    # This runs for every pair: the Summary is built in one call, not field by field.
    assumed = settle_assumed(request, response)
    resp_body = response.body if response is not None else None
    if response is not None and response.error is None:
        topics.learn(api_key, resp_body)
    seen: dict[str, None] = {}
    req = _scan(request, topics, seen)
    resp = _scan(response, topics, seen)
    code = _error_code(resp_body, resp)
    throttle = resp_body.get("throttle_time_ms") if resp_body else None
    codecs = req.codecs + resp.codecs if req.codecs or resp.codecs else None
    record_errors = req.record_errors + resp.record_errors
    decode_error = None
    if record_errors or (request and request.error) or (response and response.error):
        decode_error = _join_errors(
            _decode_errors(request, response), _records_errors(record_errors)
        )
    return Summary(
        error_code=code,
        error_name=error_name(code) if code is not None else None,
        error_count=resp.error_count,
        topics=list(seen),
        partitions=_max(req.partitions, resp.partitions),
        records=_sum(req.records, resp.records),
        record_bytes=_sum(req.record_bytes, resp.record_bytes),
        compression=",".join(sorted(set(codecs))) if codecs else None,
        throttle_ms=throttle if type(throttle) is int else None,
        decode_error=decode_error,
        record_errors=len(record_errors),
        partial_batches=req.partial_batches + resp.partial_batches,
        assumed_version=assumed,
    )


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None or a >= b else b


# Record errors listed in one row's decode_error; a Produce of many partitions with a
# bad batch in each would otherwise make the cell as long as the frame.
MAX_RECORD_ERRORS_LISTED = 8


def _records_errors(errors: list[str]) -> str | None:
    if not errors:
        return None
    listed = [f"records: {e}" for e in errors[:MAX_RECORD_ERRORS_LISTED]]
    if len(errors) > MAX_RECORD_ERRORS_LISTED:
        listed.append(
            f"records: too_many_errors: {len(errors) - MAX_RECORD_ERRORS_LISTED} more not listed"
        )
    return "; ".join(listed)


def _join_errors(*parts: str | None) -> str | None:
    present = [p for p in parts if p]
    return "; ".join(present) if present else None


def _decode_errors(request: Decoded | None, response: Decoded | None) -> str | None:
    req_error = request.error if request is not None else None
    resp_error = response.error if response is not None else None
    if req_error and resp_error:
        return f"request: {req_error}; response: {resp_error}"
    if req_error:
        return f"request: {req_error}"
    if resp_error:
        return f"response: {resp_error}"
    return None
