"""The spec model as JSON for the native core (``dissector._core``).

Rust holds no protocol knowledge of its own: everything it needs to walk a frame and
fill the summary columns is computed here, from the same objects the Python decoder
and ``summary`` use, and handed over once per run:

* every layout (api_key, version, direction) with its flexible flag, the header
  version ``decode`` would use for it, and its field tree;
* per field, the summary roles ``summary.field_plan`` derives from names and types
  (error codes, partition and topic arrays, topic-naming members, records, the
  top-level error_code / throttle_time_ms / topic strings), so Rust only interprets;
* API names, error names, which responses teach topic_id -> name, the header quirks
  (ApiVersions), the keys correlation needs (Produce and its ``acks``, SaslHandshake),
  and the "extract" columns (top-level ints copied into extra columns).

It takes whatever decoder object the pipeline uses (the ``dissector.protocol``
package, a ``BoundDecoder`` from ``decoder_for(--specs)``, or a ``Registry``), so
extra spec directories reach Rust too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dissector.protocol import families as _families
from dissector.protocol import messages as _messages
from dissector.protocol import names as _names
from dissector.protocol import summary as _summary
from dissector.protocol import tables as _tables
from dissector.protocol.errors import ERROR_NAMES
from dissector.protocol.keys import ApiKey, api_names
from dissector.protocol.spec import INT_TYPES, REQUEST, RESPONSE, Field, Layout
from dissector.stages import NOT_MALFORMED_PREFIXES

FORMAT = 1

# Produce's request field that says whether a response will come (the core reads it;
# the test oracle's twin is tests/oracle/kafka_header.produce_acks).
PRODUCE_ACKS_FIELD = "acks"

# The APIs the broker may hold open as long polls (Fetch, ShareFetch).
_LONG_POLLS = _families.names(_families.LONG_POLLS)

# Extra columns: (column, direction, API names, top-level field). Issue #13 wants the
# consumer's wait and size settings next to each Fetch/ShareFetch pair.
EXTRACTS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("max_wait_ms", REQUEST, _LONG_POLLS, "max_wait_ms"),
    ("min_bytes", REQUEST, _LONG_POLLS, "min_bytes"),
)

# Long polls (issue #13 §1): a request whose layout fills this extract column is one the
# broker may hold up to that many ms; the fetch_wait/service_ms columns follow
# stats.SERVICE_LATENCY_RULE. (The disk cache is keyed by this file, not schema.py: a new
# wait share there needs KAFKA_DISSECTOR_CACHE=off or a cache clear to reach the core.)
LONG_POLL_COLUMN = "max_wait_ms"


def _long_poll() -> dict[str, Any]:
    from dissector import schema

    return {
        "column": LONG_POLL_COLUMN,
        "wait_share": schema.LONG_POLL_WAIT_SHARE,
        "failed_statuses": list(schema.ERROR_STATUSES),
        "classes": {
            "empty_poll": schema.FETCH_WAIT_EMPTY_POLL,
            "data": schema.FETCH_WAIT_DATA,
            "early": schema.FETCH_WAIT_EARLY,
        },
    }


# Role bits of one field, as summary.py reads it. Rust keeps the same numbering.
ROLE_VISIT = 1 << 0  # the summary may read this field or something inside it
ROLE_ERROR = 1 << 1  # an integer named like an error code
ROLE_PARTITIONS = 1 << 2  # array whose entries count as partitions
ROLE_TOPIC_ARRAY = 1 << 3  # array whose name mentions topics
ROLE_TOPIC_OF_ITEMS = 1 << 4  # struct entries may name a topic (summary.array_step)
ROLE_TOPIC_STRINGS = 1 << 5  # entries are strings/uuids of a topic array
ROLE_RECORDS = 1 << 6
ROLE_SIZE_STRUCT = 1 << 7  # a struct that reads like the records hook's size summary
ROLE_ITEM_TOPIC = 1 << 8  # member "topic" of an entry
ROLE_ITEM_TOPIC_NAME = 1 << 9  # member "topic_name"
ROLE_ITEM_NAME = 1 << 10  # member "name"
ROLE_ITEM_TOPIC_ID = 1 << 11  # member "topic_id"
ROLE_PARTITION_KEY = 1 << 12  # member whose name mentions partitions (an entry's keys)
ROLE_TOP_ERROR = 1 << 13  # the body's own error_code (summary.summarize)
ROLE_THROTTLE = 1 << 14  # the body's throttle_time_ms
ROLE_TOP_TOPIC = 1 << 15  # the body's own topic / topic_name string (summary.summarize)
ROLE_LEARN_TOPICS = 1 << 16  # the response's topics array that TopicNames.learn reads
ROLE_LEARN_ID = 1 << 17  # its entries' topic_id
ROLE_LEARN_NAME = 1 << 18  # its entries' name
ROLE_GENERIC = 1 << 19  # a struct summary walks generically (wire order of its tags)
ROLE_ITEM_ODD = 1 << 20  # a topic-naming member that is not a string: Rust defers

ROLES: dict[str, int] = {
    name.removeprefix("ROLE_").lower(): value
    for name, value in globals().items()
    if name.startswith("ROLE_") and isinstance(value, int)
}

_ITEM_ROLES = {
    "topic": ROLE_ITEM_TOPIC,
    "topic_name": ROLE_ITEM_TOPIC_NAME,
    "name": ROLE_ITEM_NAME,
    "topic_id": ROLE_ITEM_TOPIC_ID,
}


def _registry(obj: Any) -> _messages.Registry:
    """The registry behind a decoder object: Registry, BoundDecoder or the package."""
    if isinstance(obj, _messages.Registry):
        return obj
    registry = getattr(obj, "registry", None)
    if isinstance(registry, _messages.Registry):
        return registry
    get = getattr(obj, "get_registry", None)
    if callable(get):
        found = get()
        if isinstance(found, _messages.Registry):
            return found
    raise TypeError(f"no spec registry behind {type(obj).__name__}")


def _step_roles(f: Field) -> int:
    """Roles of one field as summary.field_step/array_step decide them (names and types)."""
    roles = 0
    if f.array:
        step = _summary.array_step(f)
        if step is not None:
            plan = step[2]
            roles |= ROLE_VISIT
            roles |= ROLE_PARTITIONS if plan.partitions else 0
            roles |= ROLE_TOPIC_ARRAY if plan.topic_array else 0
            roles |= ROLE_TOPIC_OF_ITEMS if plan.topic_of_items else 0
            roles |= ROLE_TOPIC_STRINGS if plan.topic_strings else 0
        return roles
    step = _summary.field_step(f)
    if step is None:
        return roles
    roles |= ROLE_VISIT
    op = step[0]
    if op == _summary.OP_RECORDS:
        roles |= ROLE_RECORDS
    elif op == _summary.OP_ERROR:
        roles |= ROLE_ERROR
    elif op == _summary.OP_STRUCT and _looks_like_size(f):
        roles |= ROLE_SIZE_STRUCT
    return roles


def _looks_like_size(f: Field) -> bool:
    """A struct whose decoded dict can pass summary's records-size test: only ``size``
    (and ``error``) among the members that are always present."""
    plain = {m.name for m in f.fields if m.tag is None}
    return "size" in {m.name for m in f.fields} and plain <= {"size", "error"}


def _is_generic(fields: tuple[Field, ...]) -> bool:
    plan = _summary.field_plan(fields)
    return bool(plan) and plan[0][0] == _summary.OP_GENERIC


def _field(
    f: Field,
    roles: int,
    under_generic: bool,
    learn: bool,
    path: _tables.Path = (),
    table_roles: dict[_tables.Path, _tables.Roles] | None = None,
) -> dict[str, Any]:
    """One field with its roles; ``roles`` holds what its parent gives it, ``path`` is its
    place in the layout, ``table_roles`` the layout's roles for the analytics tables."""
    roles |= _step_roles(f)
    if under_generic:
        roles |= ROLE_VISIT  # summary walks every value of such a struct (OP_GENERIC)
    if f.type in INT_TYPES and not f.array and _summary.is_error_key(f.name):
        roles |= ROLE_ERROR  # generic walks check every int by its name
    members_generic = f.type == "struct" and (under_generic or _is_generic(f.fields))
    if members_generic and f.type == "struct":
        roles |= ROLE_GENERIC
    item_topics = bool(roles & ROLE_TOPIC_OF_ITEMS) or (f.array and members_generic)
    out: dict[str, Any] = {"name": f.name, "type": f.type}
    if f.array:
        out["array"] = True
    if f.nullable and f.type == "struct" and not f.array:
        out["nullable"] = True
    if f.tag is not None:
        out["tag"] = f.tag
    if f.fields:
        out["fields"] = [
            _field(
                m,
                _member_roles(m, item_topics, learn),
                members_generic,
                False,
                (*path, i),
                table_roles,
            )
            for i, m in enumerate(f.fields)
        ]
    if roles:
        out["roles"] = roles
    table = (table_roles or {}).get(path)
    if table:
        out["table"] = table
    return out


def _is_text(f: Field) -> bool:
    """Decodes to a Python str (the summary's ``type(value) is str`` tests)."""
    return f.type in ("string", "uuid") and not f.array


def _member_roles(m: Field, item_topics: bool, learn: bool) -> int:
    roles = 0
    if item_topics:
        if m.name in _ITEM_ROLES:
            # _topic_of's `or` and truthiness tests are only mirrored for text values
            roles |= _ITEM_ROLES[m.name] if _is_text(m) else ROLE_ITEM_ODD
        if "partition" in m.name:
            roles |= ROLE_PARTITION_KEY
        if roles:
            roles |= ROLE_VISIT
    if learn and m.name == "topic_id" and _is_text(m):
        roles |= ROLE_LEARN_ID | ROLE_VISIT
    if learn and m.name == "name" and _is_text(m):
        roles |= ROLE_LEARN_NAME | ROLE_VISIT
    return roles


def _top_roles(layout: Layout, f: Field) -> tuple[int, bool]:
    """Roles the body's own fields get from summarize/_scan/TopicNames.learn."""
    roles = 0
    learn = False
    is_int = f.type in INT_TYPES and not f.array
    if is_int and f.name == "error_code":
        roles |= ROLE_TOP_ERROR | ROLE_VISIT
    if is_int and f.name == "throttle_time_ms":
        roles |= ROLE_THROTTLE | ROLE_VISIT
    if _is_text(f) and f.name in ("topic", "topic_name"):
        roles |= ROLE_TOP_TOPIC | ROLE_VISIT
    if (
        layout.direction == RESPONSE
        and layout.api_key in _families.TOPIC_ID_SOURCES
        and f.name == "topics"
        and f.array
        and f.type == "struct"
    ):
        roles |= ROLE_LEARN_TOPICS | ROLE_VISIT
        learn = True
    return roles, learn


def _header_version(layout: Layout) -> int:
    """Header version of this layout (request v0/1/2, response v0/1): ``families``' rule."""
    if layout.direction == REQUEST:
        return _families.request_header_version(layout.api_key, layout.version, layout.flexible)
    return _families.response_header_version(layout.api_key, layout.flexible)


def _layout(layout: Layout, api_name: str) -> dict[str, Any]:
    generic = _is_generic(layout.fields)
    table_roles = _tables.layout_roles(layout, api_name)
    fields = []
    for i, f in enumerate(layout.fields):
        roles, learn = _top_roles(layout, f)
        fields.append(_field(f, roles, generic, learn, (i,), table_roles))
    return {
        "api_key": layout.api_key,
        "version": layout.version,
        "direction": layout.direction,
        "flexible": layout.flexible,
        "header_version": _header_version(layout),
        "generic": generic,
        "fields": fields,
    }


def _api_keys(registry: _messages.Registry, wanted: tuple[str, ...]) -> list[int]:
    keys = set(api_names()) | set(registry.specs.keys())
    return sorted(k for k in keys if _names.api_name(k, registry) in wanted)


def _assumed_layouts(registry: _messages.Registry) -> list[list[Any]]:
    out: list[list[Any]] = []
    for api_key, direction in sorted(registry.specs.layouts):
        versions = registry.specs.versions(api_key, direction)
        if versions and _messages.assumed_layout(registry, api_key, versions[-1] + 1, direction):
            out.append([api_key, direction, versions[-1]])
    return out


def _known_versions(registry: _messages.Registry) -> list[list[Any]]:
    """[api_key, direction, lowest, highest] of every key and direction with specs."""
    out: list[list[Any]] = []
    for api_key, direction in sorted(registry.specs.layouts):
        versions = registry.specs.versions(api_key, direction)
        if versions:
            out.append([int(api_key), direction, versions[0], versions[-1]])
    return out


def model_dict(registry_or_decoder: Any) -> dict[str, Any]:
    registry = _registry(registry_or_decoder)
    layouts = sorted(registry.layouts(), key=lambda x: (x.api_key, x.version, x.direction))
    api_keys = sorted(set(api_names()) | set(registry.specs.keys()))
    return {
        "format": FORMAT,
        "roles": ROLES,
        "api_names": {str(k): _names.api_name(k, registry) for k in api_keys},
        "errors": {str(code): name for code, (name, _retriable) in ERROR_NAMES.items()},
        "id_sources": sorted(int(k) for k in _families.TOPIC_ID_SOURCES),
        "zero_uuid": _summary.ZERO_UUID,
        "produce": {"api_key": int(ApiKey.PRODUCE), "acks_field": PRODUCE_ACKS_FIELD},
        "sasl_handshake_key": int(ApiKey.SASL_HANDSHAKE),
        # requests whose header is v0 (no client_id), whether or not a spec describes them
        "header_v0_requests": sorted([int(k), v] for k, v in _families.HEADER_V0_REQUESTS),
        # keys no installed spec describes, still plausible for framing heuristics
        "specless_keys": {
            "api_keys": list(_messages.SPECLESS_KEYS),
            "max_version": _messages.SPECLESS_MAX_VERSION,
        },
        # (api_key, direction, version): the layout a newer version of that key and
        # direction is decoded with (messages.ASSUMED_VERSION_RULE decides which)
        "assumed_layouts": _assumed_layouts(registry),
        "unsupported_version_fallback": {
            "api_key": int(_families.NEGOTIATION),
            "error_code": _messages.UNSUPPORTED_VERSION,
            "version": 0,
        },
        # a side no layout (nor the assumed one) decodes: its decode_error, in the
        # decoder's words, and whether it makes the row malformed (stages.is_fatal)
        "unsupported": {
            "version_text": _messages.UNSUPPORTED_VERSION_TEXT,
            "unknown_key_text": _messages.UNKNOWN_API_KEY_TEXT,
            # a request of a version the broker answered with the fallback (settle_refused)
            "refused_text": _messages.VERSION_REFUSED_TEXT,
            "known": _known_versions(registry),
            "not_malformed": list(NOT_MALFORMED_PREFIXES),
        },
        # decode_error lists this many record-batch errors per pair, then a count
        # (None: all; summary.py before it listed them)
        "max_record_errors_listed": _summary.MAX_RECORD_ERRORS_LISTED,
        "extracts": [
            {
                "column": column,
                "direction": direction,
                "api_keys": _api_keys(registry, api_names),
                "field": field_name,
            }
            for column, direction, api_names, field_name in EXTRACTS
        ],
        "long_poll": _long_poll(),
        "tables": _tables_section(registry),
        "layouts": [_layout(x, _names.api_name(x.api_key, registry)) for x in layouts],
    }


def _keys_named(registry: _messages.Registry, names: Mapping[str, Any]) -> dict[str, Any]:
    """{api_key: value} of the APIs ``names`` maps by name (the keys these specs give)."""
    keys = set(api_names()) | set(registry.specs.keys())
    out = {}
    for key in sorted(keys):
        name = _names.api_name(key, registry)
        if name in names:
            out[str(key)] = names[name]
    return out


def _tables_section(registry: _messages.Registry) -> dict[str, Any]:
    """What the native core needs besides the field roles to lay out the partitions,
    groups and versions tables (``protocol.tables`` declares it all)."""
    from dissector.protocol import compile as _compile
    from dissector.protocol import records as _records

    t = _tables
    slots = t.VALUE_FIELDS
    columns = [c.column for c in t.ENTRY_COLUMNS]
    negotiation = _keys_named(registry, {t.NEGOTIATION_API: True})
    return {
        "partition_apis": _keys_named(registry, t.PARTITION_APIS),
        "pair_row_apis": [int(k) for k in _keys_named(registry, dict.fromkeys(t.PAIR_ROW_APIS))],
        "expand_responses": [
            int(k) for k in _keys_named(registry, dict.fromkeys(t.EXPAND_RESPONSES))
        ],
        "context": [
            {
                "column": column,
                "text": column in t.TEXT_CONTEXT,
                "slots": [t.CONTEXT_NAMES.index(n) for n in names],
            }
            for column, names in t.CONTEXT_FIELDS.items()
        ],
        "group_key_slot": t.CONTEXT_NAMES.index(t.GROUP_KEY_CONTEXT),
        "entry_columns": [
            {
                "column": c.column,
                "sides": list(c.sides),
                "slots": [slots.index(n) for n in c.fields],
                "nested": slots.index(".".join(c.nested)) if c.nested else None,
            }
            for c in t.ENTRY_COLUMNS
        ],
        "entry_error_slot": slots.index(t.ENTRY_ERROR_FIELD),
        "produce_base_column": columns.index(t.PRODUCE_BASE_COLUMN),
        "fetch_start_column": columns.index(t.FETCH_START_COLUMN),
        "max_depth": t.MAX_DEPTH,
        "group_apis": _keys_named(registry, t.GROUP_APIS),
        "single_member_keys": [
            int(k) for k in _keys_named(registry, dict.fromkeys(t.SINGLE_MEMBER_APIS))
        ],
        "group_ranks": {role: len(names) for role, names in t.GROUP_FIELDS.items()},
        "member_lists": len(t.MEMBER_LIST_ORDER),
        "fencing_errors": sorted(t.FENCING_ERRORS),
        "negotiation_texts": {"no_response": t.NO_RESPONSE, "no_api_keys": t.NO_API_KEYS},
        "negotiation_key": int(next(iter(negotiation))) if negotiation else None,
        "request_versions": {
            str(s.api_key): list(s.request_versions) for s in _names.supported_apis(registry)
        },
        "max_array_items": _compile.MAX_ARRAY_ITEMS,
        "item_budget_factor": _records.ITEM_BUDGET_FACTOR,
        "item_overhead": _records.ITEM_OVERHEAD,
    }


def export_model(registry_or_decoder: Any) -> str:
    """The JSON that ``Model::from_json`` reads (compact: it is parsed once per run)."""
    return json.dumps(model_dict(registry_or_decoder), separators=(",", ":"))
