"""Apache Kafka protocol knowledge as two client libraries hold it: a test oracle.

kafka-python 3.x ships Apache's JSON specs as package data and hand-written schemas of
the versions Kafka 4.0 removed (``kafka.protocol.old``); kio ships generated dataclasses
of the Kafka 4.2 generation. The package reads none of them (it ships its own table,
``dissector/protocol/data``); tests compare that table with these independent readings.
Both libraries are dev extras.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

from dissector.protocol.sources import JsonSpec, parse_json_spec
from dissector.protocol.spec import PRIMITIVES, REQUEST, RESPONSE, Field, Layout


def iter_kafka_python_specs() -> Iterator[JsonSpec]:
    root = resources.files("kafka.protocol.schemas.resources")
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            spec = parse_json_spec(entry.read_text(encoding="utf-8"), entry.name)
            if spec is not None:
                yield spec


# ---------------------------------------------------------------- kio classes

# kio gives time fields richer Python types and drops Apache's "Ms" suffix from
# their names; these are the wire types behind its kafka_type labels.
_KIO_TYPES: dict[str, str] = {
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
_KIO_TIME_TYPES = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not types.NoneType]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def kio_fields(cls: type, depth: int = 0) -> tuple[Field, ...]:
    if depth > 32:
        raise ValueError(f"kio class {cls.__name__} nests too deep")
    out: list[Field] = []
    for f in dataclasses.fields(cls):
        annotation, nullable = _unwrap_optional(f.type)
        array = typing.get_origin(annotation) is tuple
        if array:
            annotation, _ = _unwrap_optional(typing.get_args(annotation)[0])
        tag = f.metadata.get("tag")
        name = f.name
        if dataclasses.is_dataclass(annotation):
            kind = "struct"
            members = kio_fields(typing.cast(type, annotation), depth + 1)
        else:
            kafka_type = str(f.metadata["kafka_type"])
            kind = _KIO_TYPES.get(kafka_type, kafka_type)
            if kafka_type in _KIO_TIME_TYPES:
                name += "_ms"
            members = ()
            if kind not in PRIMITIVES:
                raise ValueError(f"kio {cls.__name__}.{f.name}: unknown type {kafka_type}")
        out.append(
            Field(
                name=name,
                type=kind,
                array=array,
                nullable=nullable,
                tag=None if tag is None else int(tag),
                fields=members,
            )
        )
    return tuple(out)


def iter_kio_layouts(
    wanted: Callable[[int, int, str], bool] = lambda key, version, direction: True,
) -> Iterator[Layout]:
    """kio's classes reflected; ``wanted`` avoids importing modules we do not need."""
    from kio.schema.index import api_key_map, schema_name_map
    from kio.static.constants import EntityType

    directions: dict[Any, str] = {EntityType.request: REQUEST, EntityType.response: RESPONSE}
    for api_key, name in api_key_map.items():
        for version, entities in schema_name_map[name].items():
            for entity_type, direction in directions.items():
                path = typing.cast(dict[Any, str], entities).get(entity_type)
                if path is None or not wanted(int(api_key), int(version), direction):
                    continue
                cls = pkgutil.resolve_name(path)
                yield Layout(
                    api_key=int(api_key),
                    version=int(version),
                    direction=direction,
                    flexible=bool(cls.__flexible__),
                    fields=kio_fields(cls),
                    source="kio",
                )


def kafka_api_names() -> dict[int, str]:
    from kafka.protocol.api_key import ApiKey

    return {int(k): k.name for k in ApiKey}


# ---------------------------------------------------------------- kafka-python old schemas


def _old_type(t: Any, name: str) -> tuple[str, bool, tuple[Field, ...]]:
    from kafka.protocol.old import types as old

    if isinstance(t, old.Array) and not isinstance(t, old.CompactArray):
        kind, _, members = _old_type(t.array_of, name)
        return kind, True, members
    if isinstance(t, old.Schema):
        return "struct", False, old_fields(t)
    simple: dict[Any, str] = {
        old.Int8: "int8",
        old.Int16: "int16",
        old.Int32: "int32",
        old.Int64: "int64",
        old.Float64: "float64",
        old.Boolean: "bool",
        old.UUID: "uuid",
        old.Bytes: "bytes",
    }
    if t in simple:
        kind = simple[t]
        # kafka-python types message sets as plain bytes; Apache calls them records.
        if kind == "bytes" and name in ("records", "message_set"):
            kind = "records"
        return kind, False, ()
    if isinstance(t, old.String) and not isinstance(t, old.CompactString):
        return "string", False, ()
    raise ValueError(f"unsupported kafka-python type {t!r} for {name}")


def old_fields(schema: Any) -> tuple[Field, ...]:
    out: list[Field] = []
    for name, t in zip(schema.names, schema.fields, strict=True):
        kind, array, members = _old_type(t, name)
        out.append(Field(name=name, type=kind, array=array, fields=members))
    return tuple(out)


def iter_old_layouts() -> Iterator[Layout]:
    """kafka-python's hand-written non-flexible schemas, one per (key, version, direction)."""
    import kafka.protocol.old as old_pkg
    from kafka.protocol.old import types as old_types
    from kafka.protocol.old.api import Request, Response

    for info in pkgutil.iter_modules(old_pkg.__path__):
        module = importlib.import_module(f"{old_pkg.__name__}.{info.name}")
        for obj in vars(module).values():
            if not (isinstance(obj, type) and obj.__module__ == module.__name__):
                continue
            if not issubclass(obj, Request | Response):
                continue
            if not isinstance(getattr(obj, "SCHEMA", None), old_types.Schema):
                continue
            if obj.__dict__.get("FLEXIBLE_VERSION") or getattr(obj, "FLEXIBLE_VERSION", False):
                continue
            cls: Any = obj  # a kafka-python Request/Response class
            try:
                fields = old_fields(cls.SCHEMA)
            except ValueError:
                continue  # flexible (compact) schemas: the JSON specs cover those
            yield Layout(
                api_key=int(cls.API_KEY),
                version=int(cls.API_VERSION),
                direction=REQUEST if issubclass(obj, Request) else RESPONSE,
                flexible=False,
                fields=fields,
                source="kafka-python-old",
            )
