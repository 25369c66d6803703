"""Load protocol knowledge from installed packages into ``spec.SpecSet``.

Sources, in order of precedence for a given (api_key, version, direction):

1. Apache Kafka JSON message specs given with ``--specs``: a directory of them, or
   a kafka-clients jar (Maven Central), which carries them as common/message/*.json.
   A newer jar adds newer versions; an older one (3.x) adds versions 4.0 removed.
2. Apache's JSON specs shipped as package data by kafka-python 3.x.
3. kio's generated classes (the Kafka 4.2 generation): reflected dataclasses.
4. Versions Kafka 4.0 removed (below a JSON spec's ``validVersions``): Apache kept
   each field's ``versions`` range when it raised ``validVersions`` (ListOffsets
   v0's MaxNumOffsets is still described as "0"), so the JSON spec is widened down
   to version 0. Each widened layout is checked against kafka-python's
   hand-written schema for that version (kafka/protocol/old) where one exists:
   source ``json-widened-checked`` when they agree byte for byte,
   ``json-widened-unverified`` when no hand-written schema exists or it disagrees
   (the one disagreement, DescribeLogDirs v0 request, is a kafka-python defect:
   it types the partition list as one int32). A hand-written schema is used only
   for a removed version no JSON spec describes.

Nothing here is copied from those packages: their data is read at run time.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import re
import types
import typing
import zipfile
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Final

from dissector.protocol.spec import PRIMITIVES, REQUEST, RESPONSE, Field, Layout, SpecSet

MAX_VERSION = 0x7FFF

VersionRange = tuple[int, int] | None

_SNAKE_1 = re.compile(r"(.)([A-Z][a-z]+)")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake(name: str) -> str:
    """Apache's CamelCase field name as snake_case (the spelling kafka-python and kio use)."""
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()


def parse_versions(text: str | None) -> VersionRange:
    """Apache's version range syntax: "3+", "1-4", "2", "none"."""
    if text is None:
        return None
    text = str(text).strip()
    if not text or text == "none":
        return None
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        low, high = text.split("-", 1)
        return (int(low), int(high))
    return (int(text), int(text))


def in_range(version: int, versions: VersionRange) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def strip_json_comments(text: str) -> str:
    """Apache's spec files carry // comments, which JSON does not allow."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


# ---------------------------------------------------------------- Apache JSON specs


@dataclasses.dataclass(frozen=True)
class JsonSpec:
    """One parsed Apache message spec file."""

    api_key: int
    direction: str
    name: str
    valid: VersionRange
    flexible: VersionRange
    fields: tuple[dict[str, Any], ...]
    common: dict[str, dict[str, Any]]
    origin: str


# Apache's largest message spec is about 40 KB: a file or jar entry past this is not one
# (issue #21: a 1 MB jar whose entry inflated to 1 GiB took 2.6 GB).
MAX_SPEC_BYTES: Final = 4 * 1024 * 1024
# Nesting of the JSON itself (Apache's specs: under 20); json.loads would recurse until
# RecursionError on a hostile file.
MAX_JSON_DEPTH: Final = 64


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in JSON ``text`` (strings skipped): one
    linear pass, no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json_spec(text: str, origin: str) -> JsonSpec | None:
    if len(text) > MAX_SPEC_BYTES:
        raise ValueError(f"{origin}: {len(text):,} bytes, too large for a message spec")
    text = strip_json_comments(text)
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"{origin}: JSON nested deeper than {MAX_JSON_DEPTH}, not a message spec")
    data = json.loads(text)
    if not isinstance(data, dict):
        return None
    if data.get("type") not in (REQUEST, RESPONSE) or "apiKey" not in data:
        return None
    return JsonSpec(
        api_key=int(data["apiKey"]),
        direction=data["type"],
        name=str(data.get("name", "")),
        valid=parse_versions(data.get("validVersions")),
        flexible=parse_versions(data.get("flexibleVersions")),
        fields=tuple(data.get("fields", ())),
        common={c["name"]: c for c in data.get("commonStructs", ())},
        origin=origin,
    )


def _json_type(
    raw: dict[str, Any], spec: JsonSpec, version: int, flexible: bool, depth: int
) -> tuple[str, bool, tuple[Field, ...]]:
    type_text = str(raw["type"])
    array = type_text.startswith("[]")
    base = type_text[2:] if array else type_text
    if base in PRIMITIVES:
        return base, array, ()
    if depth > 32:
        raise ValueError(f"{spec.origin}: struct nesting too deep at {raw.get('name')}")
    members = raw.get("fields")
    if members is None:
        common = spec.common.get(base)
        if common is None:
            raise ValueError(f"{spec.origin}: unknown type {base!r}")
        members = common.get("fields", ())
    return "struct", array, _json_fields(members, spec, version, flexible, depth + 1)


def _json_fields(
    raw_fields: Iterable[dict[str, Any]],
    spec: JsonSpec,
    version: int,
    flexible: bool,
    depth: int = 0,
) -> tuple[Field, ...]:
    out: list[Field] = []
    for raw in raw_fields:
        if not in_range(version, parse_versions(raw.get("versions"))):
            continue
        tag: int | None = None
        if raw.get("tag") is not None:
            tagged = parse_versions(raw.get("taggedVersions", raw.get("versions")))
            if in_range(version, tagged):
                if not flexible:
                    continue  # tagged fields exist only in flexible versions
                tag = int(raw["tag"])
        kind, array, members = _json_type(raw, spec, version, flexible, depth)
        out.append(
            Field(
                name=snake(str(raw["name"])),
                type=kind,
                array=array,
                nullable=in_range(version, parse_versions(raw.get("nullableVersions"))),
                tag=tag,
                fields=members,
            )
        )
    return tuple(out)


def json_layout(spec: JsonSpec, version: int, source: str) -> Layout:
    flexible = in_range(version, spec.flexible)
    return Layout(
        api_key=spec.api_key,
        version=version,
        direction=spec.direction,
        flexible=flexible,
        fields=_json_fields(spec.fields, spec, version, flexible),
        source=source,
    )


def iter_json_dir(directory: Path) -> Iterator[JsonSpec]:
    for path in sorted(directory.glob("*.json")):
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)  # a larger file is refused unread
        spec = parse_json_spec(raw.decode("utf-8"), str(path.name))
        if spec is not None:
            yield spec


def iter_json_jar(jar: Path) -> Iterator[JsonSpec]:
    """Apache's kafka-clients jar carries the specs as ``common/message/*.json``."""
    with zipfile.ZipFile(jar) as archive:
        for name in sorted(archive.namelist()):
            if name.endswith(".json") and "/message/" in f"/{name}":
                with archive.open(name) as entry:
                    # inflate no more than a spec can be: the entry's stated size may lie
                    raw = entry.read(MAX_SPEC_BYTES + 1)
                text = raw.decode("utf-8")
                spec = parse_json_spec(text, f"{jar.name}!{name}")
                if spec is not None:
                    yield spec


def iter_json_source(source: Path) -> Iterator[JsonSpec]:
    """A directory of Apache JSON specs, or a jar/zip holding them (kafka-clients)."""
    if source.is_dir():
        yield from iter_json_dir(source)
    elif zipfile.is_zipfile(source):
        yield from iter_json_jar(source)
    else:
        raise ValueError(f"{source}: neither a directory of JSON specs nor a jar")


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


# ---------------------------------------------------------------- combination


def load_specs(spec_dirs: Iterable[str | Path] = ()) -> SpecSet:
    """Combine every source into one SpecSet (see the module doc for precedence)."""
    specs = SpecSet(names=kafka_api_names())
    json_specs: dict[tuple[int, str], JsonSpec] = {}
    for directory in spec_dirs:
        for js in iter_json_source(Path(directory)):
            json_specs.setdefault((js.api_key, js.direction), js)
            # a key newer than kafka-python's enum is named by its spec
            specs.names.setdefault(
                js.api_key, js.name.removesuffix("Request").removesuffix("Response")
            )
            if js.valid is not None:
                for v in range(js.valid[0], js.valid[1] + 1):
                    specs.add(json_layout(js, v, f"specs-dir:{js.origin}"))
    for js in iter_kafka_python_specs():
        # Widening below starts from kafka-python's copy even when --specs gives
        # another: the widening is checked against kafka-python's hand-written
        # schemas, and Apache 4.0.0's own files dropped some v0-only fields.
        json_specs[(js.api_key, js.direction)] = js
        if js.valid is not None:
            for v in range(js.valid[0], js.valid[1] + 1):
                specs.add(json_layout(js, v, "kafka-python-json"))
    for layout in iter_kio_layouts(lambda k, v, d: specs.get(k, v, d) is None):
        specs.add(layout)
    _add_removed_versions(specs, json_specs)
    return specs


def _add_removed_versions(specs: SpecSet, json_specs: dict[tuple[int, str], JsonSpec]) -> None:
    old = {(lay.api_key, lay.version, lay.direction): lay for lay in iter_old_layouts()}
    # Every Kafka API started at version 0, so a spec whose lowest valid version is
    # above 0 had its older versions removed (KIP-896 did this in Kafka 4.0).
    lowest = {key: min(specs.versions(*key)) for key in specs.layouts if specs.versions(*key)}
    for (api_key, direction), low in lowest.items():
        js = json_specs.get((api_key, direction))
        for v in range(low):
            hand = old.get((api_key, v, direction))
            widened = json_layout(js, v, "json-widened") if js is not None else None
            if widened is not None and not widened.fields:
                widened = None
            if widened is not None:
                checked = hand is not None and hand.wire() == widened.wire()
                source = "json-widened-checked" if checked else "json-widened-unverified"
                specs.add(dataclasses.replace(widened, source=source))
            elif hand is not None:
                specs.add(hand)
