"""Load Apache Kafka's JSON message specs into ``spec.SpecSet``.

Sources, in order of precedence for a given (api_key, version, direction):

1. Apache Kafka JSON message specs given with ``--specs``: a directory of them, or
   a kafka-clients jar (Maven Central), which carries them as common/message/*.json.
   A newer jar adds newer versions; an older one adds versions later releases removed.
2. The specs shipped with the package (``bundled``: the protocol facts of the newest
   kafka-clients jar's specs, then of older releases for the versions Kafka removed),
   each layer in turn.

Every layout is Apache's own description of that version; nothing is widened or
guessed (the assumed-version rule for versions newer than all of them is
``messages.ASSUMED_VERSION_RULE``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from collections.abc import Iterable, Iterator
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
    return spec_from_dict(data, origin)


def spec_from_dict(data: dict[str, Any], origin: str) -> JsonSpec | None:
    """One spec file's JSON object; None for the files that are not messages (headers)."""
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


# ---------------------------------------------------------------- combination


def add_json_specs(specs: SpecSet, json_specs: Iterable[JsonSpec], source: str) -> None:
    """Every valid version of each spec, unless an earlier source already gave it."""
    for js in json_specs:
        # a key the bundled names lack (a vendor's, or a newer Kafka's) is named by its spec
        specs.names.setdefault(js.api_key, js.name.removesuffix("Request").removesuffix("Response"))
        if js.valid is not None:
            for v in range(js.valid[0], js.valid[1] + 1):
                specs.add(json_layout(js, v, f"{source}:{js.origin}" if source else js.origin))
