"""Reduce a decoded request/response pair to the analytics columns of ``dissector.schema``.

The rules read the field names of Apache's specs generically (``error_code``,
``throttle_time_ms``, arrays whose name mentions topics or partitions), so a new
API needs no code here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dissector.protocol.decode import Decoded
from dissector.protocol.errors import error_name

# Responses that tell which name a topic id stands for.
_ID_SOURCES = frozenset({3, 19, 75})
_TOPIC_NAME_KEYS = ("topic", "topic_name", "name")
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass
class TopicNames:
    """topic_id -> name, learnt from Metadata, CreateTopics and DescribeTopicPartitions.

    One object lives per capture (or per analysis run); ids are only resolved for
    pairs seen after the response that named them, as a live tool would.
    """

    names: dict[str, str] = field(default_factory=dict)

    def learn(self, api_key: int, response_body: dict[str, Any] | None) -> int:
        """Record the ids a response names; returns how many were new."""
        if api_key not in _ID_SOURCES or not response_body:
            return 0
        added = 0
        for topic in response_body.get("topics") or ():
            if not isinstance(topic, dict):
                continue
            tid, name = topic.get("topic_id"), topic.get("name")
            if isinstance(tid, str) and isinstance(name, str) and tid != _ZERO_UUID:
                if self.names.get(tid) != name:
                    added += 1
                self.names[tid] = name
        return added

    def name(self, topic_id: str) -> str | None:
        return self.names.get(topic_id)

    def annotate(self, body: dict[str, Any] | None) -> None:
        """Add ``topic_name`` beside every known ``topic_id`` that has no name next to it."""
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


def _is_error_key(key: str) -> bool:
    return key == "error_code" or key.endswith("_error_code")


def _errors(body: dict[str, Any] | None) -> tuple[int | None, int]:
    """(top-level code else first non-zero nested one, count of non-zero codes)."""
    if not body:
        return None, 0
    top = body.get("error_code")
    first: int | None = top if isinstance(top, int) else None
    count = 0
    for d in _dicts(body):
        for k, v in d.items():
            if _is_error_key(k) and isinstance(v, int) and not isinstance(v, bool):
                if first is None:
                    first = v
                if v:
                    count += 1
                    if first == 0:
                        first = v
    return first, count


def _topics(body: dict[str, Any] | None, names: TopicNames, out: dict[str, None]) -> None:
    """Names of topics: struct fields ``topic``/``topic_name``, ``name`` in an element of
    a topic array or of an array whose elements list partitions, else a known topic id."""
    for d in _dicts(body):
        for key, value in d.items():
            if not isinstance(value, list):
                continue
            for item in value:
                if isinstance(item, str) and "topic" in key:
                    out.setdefault(item)
                elif isinstance(item, dict):
                    _topic_of(key, item, names, out)
    if body:
        for key in ("topic", "topic_name"):
            value = body.get(key)
            if isinstance(value, str):
                out.setdefault(value)


def _topic_of(key: str, item: dict[str, Any], names: TopicNames, out: dict[str, None]) -> None:
    for field_name in ("topic", "topic_name"):
        value = item.get(field_name)
        if isinstance(value, str) and value:
            out.setdefault(value)
            return
    value = item.get("name")
    topic_like = "topic" in key or any("partition" in k for k in item)
    if isinstance(value, str) and value and topic_like:
        out.setdefault(value)
        return
    tid = item.get("topic_id")
    if isinstance(tid, str) and tid != _ZERO_UUID:
        out.setdefault(names.name(tid) or tid)


def _partitions(body: dict[str, Any] | None) -> int | None:
    """Entries of arrays whose name mentions partitions (list of structs or of indexes)."""
    if not body:
        return None
    total: int | None = None
    for d in _dicts(body):
        for key, value in d.items():
            if "partition" in key and isinstance(value, list):
                if any(isinstance(x, list) for x in value):
                    continue
                total = (total or 0) + len(value)
    return total


def _records(body: dict[str, Any] | None) -> tuple[int | None, int | None, list[str]]:
    records: int | None = None
    size: int | None = None
    codecs: list[str] = []
    for d in _dicts(body):
        for value in d.values():
            if hasattr(value, "records") and hasattr(value, "codecs"):
                records = (records or 0) + int(value.records)
                size = (size or 0) + int(value.bytes)
                codecs.extend(value.codecs)
            elif isinstance(value, dict) and set(value) <= {"size", "error"} and "size" in value:
                size = (size or 0) + int(value["size"])
    return records, size, codecs


def summarize(
    api_key: int,
    api_version: int,
    request: Decoded | None,
    response: Decoded | None,
    topics: TopicNames,
) -> Summary:
    req_body = request.body if request is not None else None
    resp_body = response.body if response is not None else None
    if response is not None and response.error is None:
        topics.learn(api_key, resp_body)
    s = Summary()
    s.error_code, s.error_count = _errors(resp_body)
    if s.error_code is not None:
        s.error_name = error_name(s.error_code)
    seen: dict[str, None] = {}
    _topics(req_body, topics, seen)
    _topics(resp_body, topics, seen)
    s.topics = list(seen)
    counts = [c for c in (_partitions(req_body), _partitions(resp_body)) if c is not None]
    s.partitions = max(counts) if counts else None
    r1, b1, c1 = _records(req_body)
    r2, b2, c2 = _records(resp_body)
    if r1 is not None or r2 is not None:
        s.records = (r1 or 0) + (r2 or 0)
    if b1 is not None or b2 is not None:
        s.record_bytes = (b1 or 0) + (b2 or 0)
    codecs = sorted(set(c1 + c2))
    s.compression = ",".join(codecs) if codecs else None
    if resp_body:
        throttle = resp_body.get("throttle_time_ms")
        if isinstance(throttle, int):
            s.throttle_ms = throttle
    notes = []
    for side, d in (("request", request), ("response", response)):
        if d is not None and d.error:
            notes.append(f"{side}: {d.error}")
    s.decode_error = "; ".join(notes) if notes else None
    return s
