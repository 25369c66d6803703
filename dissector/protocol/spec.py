"""The internal spec model: one resolved wire layout per (api_key, version, direction).

Every source of protocol knowledge (Apache's JSON message specs, kio's generated
classes, kafka-python's hand-written schemas of removed versions) is reduced to
this one model, so the decoder compiler only ever sees a ``Layout``.

Nullability of strings, bytes and arrays does not change their wire form (a -1 or
compact 0 length means null in every version), so the model keeps it only for
structs, where KIP-893 adds a one-byte presence marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIMITIVES: frozenset[str] = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float64",
        "bool",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)

INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
"""The integer field types of the specs."""

REQUEST = "request"
RESPONSE = "response"


@dataclass(frozen=True, slots=True)
class Field:
    """One field as it appears on the wire in one version."""

    name: str
    type: str  # a PRIMITIVES member, or "struct"
    array: bool = False
    nullable: bool = False  # only meaningful for a (non-array) struct
    tag: int | None = None  # set when the field travels in the tagged-field section
    fields: tuple[Field, ...] = ()  # members of a struct, or of each array element

    def wire(self, flexible: bool) -> tuple[object, ...]:
        """The shape that decides the bytes: names excluded.

        In a non-flexible version an array of one-field structs is byte-for-byte an
        array of that field, so both spellings get the same shape.
        """
        if (
            self.array
            and not flexible
            and self.type == "struct"
            and len(self.fields) == 1
            and not self.fields[0].array
        ):
            inner = self.fields[0]
            return (
                inner.type,
                True,
                False,
                self.tag,
                tuple(f.wire(flexible) for f in inner.fields),
            )
        return (
            self.type,
            self.array,
            self.nullable and self.type == "struct" and not self.array,
            self.tag,
            tuple(f.wire(flexible) for f in self.fields),
        )


@dataclass(frozen=True, slots=True)
class Layout:
    api_key: int
    version: int
    direction: str
    flexible: bool
    fields: tuple[Field, ...]
    source: str  # where the layout came from, e.g. "kafka-python-json"

    def wire(self) -> tuple[object, ...]:
        return (self.flexible, tuple(f.wire(self.flexible) for f in self.fields))


@dataclass
class SpecSet:
    """All layouts known, by (api_key, direction) then version."""

    layouts: dict[tuple[int, str], dict[int, Layout]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    def add(self, layout: Layout, *, replace: bool = False) -> bool:
        versions = self.layouts.setdefault((layout.api_key, layout.direction), {})
        if layout.version in versions and not replace:
            return False
        versions[layout.version] = layout
        return True

    def get(self, api_key: int, version: int, direction: str) -> Layout | None:
        return self.layouts.get((api_key, direction), {}).get(version)

    def versions(self, api_key: int, direction: str) -> list[int]:
        return sorted(self.layouts.get((api_key, direction), {}))

    def keys(self) -> list[int]:
        return sorted({k for k, _ in self.layouts})

    def combinations(self) -> list[tuple[int, int, str]]:
        return sorted((k, v, d) for (k, d), versions in self.layouts.items() for v in versions)
