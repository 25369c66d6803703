"""Compile a ``Layout`` into a decoder function.

Two back ends produce the same dicts:

* ``generate`` emits specialised Python source per layout (nested arrays inlined
  as loops, runs of fixed-width fields merged into one ``struct`` unpack) and
  ``exec``s it: the fast path.
* ``closures`` builds one small closure per field. It tracks the field path and
  keeps what it decoded so far, so it is what explains a failure: the fast path
  simply raises, and the caller re-runs the closure decoder to say which field
  at which offset went wrong.

Both bound every allocation by the bytes present: a count or length larger than
what remains is an error, never an allocation. ``benchmarks/decode_speed.py``
compares them.
"""

from __future__ import annotations

import hashlib
import keyword
import linecache
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dissector.protocol.spec import Field, Layout
from dissector.protocol.varint import VarintError, read_uvarint

RecordsHook = Callable[[Any], Any]
"""Turns the bytes of a ``records`` field into the value kept in the body."""

DecodeFn = Callable[[bytes, int], tuple[dict[str, Any], int]]

FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint8": ("B", 1),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "uint64": ("Q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
}

UNKNOWN_TAGS = "_unknown_tags"

# Decoded elements cost about a hundred times their wire bytes as Python objects: an
# array of a million empty strings is 2 MB on the wire and gigabytes decoded. No Kafka
# message has arrays near this long (records travel as bytes), so a longer one is an
# attack or garbage, and the decode stops there with the field named (issue #11).
MAX_ARRAY_ITEMS = 1_000_000

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


class Short(Exception):
    """Raised by the fast path; the closure decoder then explains it."""


@dataclass
class DecodeFailure(Exception):
    """Where and why a decode stopped, with the part decoded so far."""

    reason: str
    offset: int
    path: list[str] = field(default_factory=list)
    partial: Any = None

    def field_path(self) -> str:
        out = ""
        for part in self.path:
            out += part if part.startswith("[") or not out else "." + part
        return out or "<body>"

    def message(self) -> str:
        return f"{self.field_path()}: {self.reason} at offset {self.offset}"


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def raw_records(data: Any) -> Any:
    """Fallback records hook: keep only the size."""
    return {"size": len(data)}


# ---------------------------------------------------------------- generated code

# Names the generated code uses for itself; a field's local never takes one of these.
_RESERVED = frozenset(
    {"buf", "p", "L", "buf0", "p0", "count", "d", "tag", "size", "unknown", "decode", "_"}
    | {"list", "range", "len", "None", "True", "False"}
)


class _Gen:
    """State of one generation: the helper functions emitted so far, the names the
    code refers to (``ns``) and the locals taken, so each local is named after its
    field and unique in the function (a struct's dict is built after all its
    fields, nested ones included, so a nested ``name`` must not clobber an outer one)."""

    def __init__(self, records: RecordsHook) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_uv": read_uvarint,
            "_Short": Short,
            "_uuid": uuid_text,
            "_REC": records,
            "_unpack": struct.unpack_from,
            "_i16": _I16,
            "_i32": _I32,
            "_no_tags": unknown_tags_only,
        }
        self.unpackers: dict[str, str] = {}  # struct format -> its name in ns
        self.taken: set[str] = set(_RESERVED)

    def local(self, base: str) -> str:
        """A fresh local named after a field: ``name``, then ``name_2``..."""
        stem = _identifier(base)
        name, n = stem, 1
        while name in self.taken:
            n += 1
            name = f"{stem}_{n}"
        self.taken.add(name)
        return name

    def function(self, base: str) -> str:
        """A fresh module-level name: helpers are globals of one shared namespace."""
        name, n = base, 1
        while name in self.ns:
            n += 1
            name = f"{base}_{n}"
        self.ns[name] = None  # taken; exec defines it
        return name

    def unpacker(self, types: list[str]) -> str:
        """The shared ``unpack_from`` of a run of fixed-width types, named after them."""
        fmt = ">" + "".join(FIXED[t][0] for t in types)
        name = self.unpackers.get(fmt)
        if name is None:
            name = "_" + "_".join(types)
            self.unpackers[fmt] = name
            self.ns[name] = struct.Struct(fmt).unpack_from
        return name


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text) or "field"
    if ident[0].isdigit() or ident.startswith("_") or keyword.iskeyword(ident):
        ident = "f_" + ident.lstrip("_")
    return ident


def _emit_uvarint(out: list[str], ind: str, var: str) -> None:
    out.append(f"{ind}{var} = buf[p]")
    out.append(f"{ind}if {var} < 128:")
    out.append(f"{ind}    p += 1")
    out.append(f"{ind}else:")
    out.append(f"{ind}    {var}, p = _uv(buf, p)")


def _emit_length(out: list[str], ind: str, var: str, flexible: bool, wide: bool) -> None:
    """Read a length/count into var: -1 means null."""
    if flexible:
        _emit_uvarint(out, ind, var)
        out.append(f"{ind}{var} -= 1")
    elif wide:
        out.append(f"{ind}{var} = _i32(buf, p)[0]")
        out.append(f"{ind}p += 4")
    else:
        out.append(f"{ind}{var} = _i16(buf, p)[0]")
        out.append(f"{ind}p += 2")


def _emit_sized(g: _Gen, out: list[str], ind: str, f: Field, target: str, flexible: bool) -> None:
    """A string, bytes or records value into the assignment target."""
    n = g.local(f"{f.name}_len")
    _emit_length(out, ind, n, flexible, wide=f.type != "string")
    out.append(f"{ind}if {n} < 0:")
    out.append(f"{ind}    if {n} < -1:")  # -1 is null; below it no length is legal
    out.append(f"{ind}        raise _Short")
    out.append(f"{ind}    {target} = None")
    out.append(f"{ind}else:")
    out.append(f"{ind}    if {n} > L - p:")
    out.append(f"{ind}        raise _Short")
    if f.type == "string":
        out.append(f"{ind}    {target} = buf[p:p + {n}].decode('utf-8', 'replace')")
    elif f.type == "bytes":
        out.append(f"{ind}    {target} = buf[p:p + {n}]")
    else:
        out.append(f"{ind}    {target} = _REC(buf[p:p + {n}])")
    out.append(f"{ind}    p += {n}")


def _emit_scalar(g: _Gen, out: list[str], ind: str, f: Field, target: str, flexible: bool) -> None:
    if f.type in FIXED:
        out.append(f"{ind}{target} = {g.unpacker([f.type])}(buf, p)[0]")
        out.append(f"{ind}p += {FIXED[f.type][1]}")
    elif f.type == "uuid":
        out.append(f"{ind}if p + 16 > L:")
        out.append(f"{ind}    raise _Short")
        out.append(f"{ind}{target} = _uuid(buf[p:p + 16])")
        out.append(f"{ind}p += 16")
    else:
        _emit_sized(g, out, ind, f, target, flexible)


def _emit_struct(
    g: _Gen, out: list[str], ind: str, fields: tuple[Field, ...], flexible: bool, name: str
) -> str:
    """Decode a struct's fields into locals, then build its dict in one literal.

    Returns the name of the local holding the dict. Partial results are not kept
    here: on failure the closure decoder re-runs and keeps them.
    """
    run: list[tuple[Field, str]] = []
    members: list[tuple[str, str]] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            _emit_scalar(g, out, ind, run[0][0], run[0][1], flexible)
        else:
            types = [f.type for f, _ in run]
            out.append(f"{ind}{', '.join(v for _, v in run)} = {g.unpacker(types)}(buf, p)")
            out.append(f"{ind}p += {sum(FIXED[t][1] for t in types)}")
        run.clear()

    for f in fields:
        if f.tag is not None:
            continue
        var = g.local(f.name)
        members.append((f.name, var))
        if f.type in FIXED and not f.array:
            run.append((f, var))
            continue
        flush()
        _emit_field(g, out, ind, f, var, flexible)
    flush()
    d = g.local(name)
    out.append(f"{ind}{d} = {{{', '.join(f'{key!r}: {var}' for key, var in members)}}}")
    if flexible:
        _emit_tag_section(g, out, ind, [f for f in fields if f.tag is not None], d, name)
    return d


def _emit_field(g: _Gen, out: list[str], ind: str, f: Field, target: str, flexible: bool) -> None:
    if f.array:
        _emit_array(g, out, ind, f, target, flexible)
    elif f.type == "struct":
        if f.nullable and flexible:
            out.append(f"{ind}if buf[p] == 255:")
            out.append(f"{ind}    p += 1")
            out.append(f"{ind}    {target} = None")
            out.append(f"{ind}else:")
            out.append(f"{ind}    p += 1")
            ind += "    "
        sub = _emit_struct(g, out, ind, f.fields, flexible, f"{f.name}_struct")
        out.append(f"{ind}{target} = {sub}")
    else:
        _emit_scalar(g, out, ind, f, target, flexible)


def _emit_array(g: _Gen, out: list[str], ind: str, f: Field, target: str, flexible: bool) -> None:
    n = g.local(f"{f.name}_count")
    _emit_length(out, ind, n, flexible, wide=True)
    out.append(f"{ind}if {n} < 0:")
    out.append(f"{ind}    {target} = None")
    out.append(f"{ind}elif {n} > L - p or {n} > {MAX_ARRAY_ITEMS}:")
    out.append(f"{ind}    raise _Short")
    out.append(f"{ind}else:")
    ind += "    "
    if f.type in FIXED:
        fmt, size = FIXED[f.type]
        out.append(f"{ind}{target} = list(_unpack('>%d{fmt}' % {n}, buf, p))")
        out.append(f"{ind}p += {n} * {size}")
        return
    lst = g.local(f"{f.name}_list")
    out.append(f"{ind}{lst} = []")
    out.append(f"{ind}for _ in range({n}):")
    inner = ind + "    "
    if f.type == "struct":
        sub = _emit_struct(g, out, inner, f.fields, flexible, f"{f.name}_item")
        out.append(f"{inner}{lst}.append({sub})")
    else:
        v = g.local(f"{f.name}_item")
        _emit_scalar(g, out, inner, f, v, flexible)
        out.append(f"{inner}{lst}.append({v})")
    out.append(f"{ind}{target} = {lst}")


def _emit_tag_section(
    g: _Gen, out: list[str], ind: str, tagged: list[Field], d: str, owner: str
) -> None:
    n = g.local(f"{owner}_tag_count")
    _emit_uvarint(out, ind, n)
    out.append(f"{ind}if {n}:")
    fn = _tag_function(g, tagged, owner)
    out.append(f"{ind}    p = {fn}(buf, p, {n}, {d})")


def unknown_tags_only(buf: bytes, p: int, count: int, d: dict[str, Any]) -> int:
    """A tagged-field section of a struct that has no known tags: keep them raw."""
    if count > len(buf) - p:
        raise Short
    unknown = d[UNKNOWN_TAGS] = {}
    for _ in range(count):
        tag, p = read_uvarint(buf, p)
        size, p = read_uvarint(buf, p)
        if size > len(buf) - p:
            raise Short
        unknown[tag] = buf[p : p + size]
        p += size
    return p


def _tag_function(g: _Gen, tagged: list[Field], owner: str) -> str:
    """A helper that walks one tagged-field section; known tags decode from their slice."""
    if not tagged:
        return "_no_tags"
    name = g.function("_tags_of_" + _identifier(owner))
    # Its own function: its locals need not avoid the ones of the caller.
    outer_taken, g.taken = g.taken, set(_RESERVED)
    body: list[str] = [
        f"def {name}(buf0, p0, count, d):",
        "    if count > len(buf0) - p0:",
        "        raise _Short",
        "    unknown = None",
        "    for _ in range(count):",
        "        tag, p0 = _uv(buf0, p0)",
        "        size, p0 = _uv(buf0, p0)",
        "        if size > len(buf0) - p0:",
        "            raise _Short",
        "        buf = buf0[p0:p0 + size]",
        "        p = 0",
        "        L = size",
    ]
    keyword_ = "if"
    for f in tagged:
        body.append(f"        {keyword_} tag == {f.tag}:  # {f.name}")
        keyword_ = "elif"
        _emit_field(g, body, "            ", f, f"d[{f.name!r}]", True)
    body.append("        else:")
    body.append("            if unknown is None:")
    body.append(f"                unknown = d[{UNKNOWN_TAGS!r}] = {{}}")
    body.append("            unknown[tag] = buf")
    body.append("        p0 += size")
    body.append("    return p0")
    g.taken = outer_taken
    g.lines.extend(body)
    g.lines.append("")
    return name


def source_name(layout: Layout, source: str) -> str:
    """The pseudo file name of a layout's generated code in tracebacks and linecache.

    The digest tells apart two spec sets (``--specs``) with different layouts for the
    same key and version, which would otherwise share (and overwrite) one entry."""
    digest = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"<kafka api_key {layout.api_key} v{layout.version} {layout.direction} {digest}>"


def _build(layout: Layout, records: RecordsHook) -> tuple[str, dict[str, Any]]:
    g = _Gen(records)
    main: list[str] = ["def decode(buf, p):", "    L = len(buf)"]
    top = _emit_struct(g, main, "    ", layout.fields, layout.flexible, "body")
    main.append(f"    return {top}, p")
    header = [
        f"# api_key {layout.api_key} v{layout.version} {layout.direction}"
        f" ({'flexible' if layout.flexible else 'fixed'} version; layout from {layout.source})",
        "# decode(buf, p) -> (body, end offset); raises on bad bytes, and the closure",
        "# decoder then explains where (dissector.protocol.compile.closures).",
        *(f"# {name} = struct.Struct({fmt!r}).unpack_from" for fmt, name in g.unpackers.items()),
        "",
    ]
    return "\n".join([*header, *g.lines, *main]) + "\n", g.ns


def generated_source(layout: Layout) -> str:
    """The Python source ``generate`` compiles for this layout (``kafka-dissector codegen``)."""
    return _build(layout, raw_records)[0]


def generate(layout: Layout, records: RecordsHook = raw_records) -> DecodeFn:
    """Specialised decoder for one layout: ``fn(buf, p) -> (body, end_offset)``.

    The source is registered with ``linecache`` so that a traceback through it
    shows the generated line, like one through a file.
    """
    source, ns = _build(layout, records)
    filename = source_name(layout, source)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)
    fn: DecodeFn = ns["decode"]
    return fn


# ---------------------------------------------------------------- closures

Reader = Callable[[bytes, int], tuple[Any, int]]


def _fail(reason: str, offset: int) -> DecodeFailure:
    return DecodeFailure(reason=reason, offset=offset)


def _need(buf: bytes, p: int, n: int, what: str) -> None:
    if n > len(buf) - p:
        raise _fail(f"{what} needs {n} bytes, {max(len(buf) - p, 0)} left", p)


def _uvarint_checked(buf: bytes, p: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, p)
    except VarintError as exc:
        raise _fail(str(exc), p) from None


def _length_reader(flexible: bool, wide: bool) -> Reader:
    if flexible:

        def compact(buf: bytes, p: int) -> tuple[int, int]:
            n, q = _uvarint_checked(buf, p)
            return n - 1, q

        return compact
    unpack, size = (_I32, 4) if wide else (_I16, 2)

    def legacy(buf: bytes, p: int) -> tuple[int, int]:
        _need(buf, p, size, "length")
        return unpack(buf, p)[0], p + size

    return legacy


def _scalar_reader(kind: str, flexible: bool, records: RecordsHook) -> Reader:
    if kind in FIXED:
        fmt, size = FIXED[kind]
        unpack = struct.Struct(">" + fmt).unpack_from

        def fixed(buf: bytes, p: int) -> tuple[Any, int]:
            _need(buf, p, size, kind)
            return unpack(buf, p)[0], p + size

        return fixed
    if kind == "uuid":

        def uuid_reader(buf: bytes, p: int) -> tuple[Any, int]:
            _need(buf, p, 16, "uuid")
            return uuid_text(buf[p : p + 16]), p + 16

        return uuid_reader
    length = _length_reader(flexible, wide=kind != "string")

    def sized(buf: bytes, p: int) -> tuple[Any, int]:
        n, q = length(buf, p)
        if n < -1:
            # -1 is null; Kafka's readers refuse any other negative length (issue #21)
            raise _fail(f"{kind} length {n} is negative (only -1, null, is allowed)", p)
        if n < 0:
            return None, q
        _need(buf, q, n, f"{kind} of length {n}")
        raw = buf[q : q + n]
        if kind == "string":
            return raw.decode("utf-8", "replace"), q + n
        if kind == "records":
            return records(raw), q + n
        return raw, q + n

    return sized


def _struct_reader(
    fields: tuple[Field, ...], flexible: bool, records: RecordsHook, prefix: bool = False
) -> Reader:
    plain = [(f.name, _field_reader(f, flexible, records, prefix)) for f in fields if f.tag is None]
    tagged = {
        f.tag: (f.name, _field_reader(f, flexible, records, prefix))
        for f in fields
        if f.tag is not None
    }

    def read_struct(buf: bytes, p: int) -> tuple[Any, int]:
        d: dict[str, Any] = {}
        name = ""
        try:
            for name, reader in plain:
                d[name], p = reader(buf, p)
            if flexible:
                name = "_tagged_fields"
                p = _read_tags(buf, p, tagged, d)
        except DecodeFailure as exc:
            if exc.partial is not None:
                d[name] = exc.partial
            elif prefix:
                # The field the cut fell in was begun: its name is known (a struct
                # whose partition field was reached is a partition entry, as the native
                # core's walk of a prefix reads it).
                d[name] = None
            exc.path.insert(0, name)
            exc.partial = d
            raise
        return d, p

    return read_struct


def _read_tags(buf: bytes, p: int, tagged: dict[Any, tuple[str, Reader]], d: dict[str, Any]) -> int:
    count, p = _uvarint_checked(buf, p)
    if count > len(buf) - p:
        raise _fail(f"tagged field count {count} exceeds the {len(buf) - p} bytes left", p)
    for _ in range(count):
        tag, p = _uvarint_checked(buf, p)
        size, p = _uvarint_checked(buf, p)
        _need(buf, p, size, f"tagged field {tag}")
        chunk = buf[p : p + size]
        if tag in tagged:
            name, reader = tagged[tag]
            try:
                d[name], _ = reader(chunk, 0)
            except DecodeFailure as exc:
                exc.offset += p
                exc.path.insert(0, name)
                raise
        else:
            d.setdefault(UNKNOWN_TAGS, {})[tag] = chunk
        p += size
    return p


def _field_reader(f: Field, flexible: bool, records: RecordsHook, prefix: bool = False) -> Reader:
    if f.type == "struct":
        element = _struct_reader(f.fields, flexible, records, prefix)
    else:
        element = _scalar_reader(f.type, flexible, records)
    if f.array:
        return _array_reader(element, flexible, prefix)
    if f.type == "struct" and f.nullable and flexible:

        def nullable_struct(buf: bytes, p: int) -> tuple[Any, int]:
            _need(buf, p, 1, "struct presence marker")
            if buf[p] == 255:
                return None, p + 1
            return element(buf, p + 1)

        return nullable_struct
    return element


def _array_reader(element: Reader, flexible: bool, prefix: bool = False) -> Reader:
    length = _length_reader(flexible, wide=True)

    def read_array(buf: bytes, p: int) -> tuple[Any, int]:
        n, q = length(buf, p)
        if n < 0:
            return None, q
        if n > len(buf) - q:
            if not prefix:
                raise _fail(f"array count {n} exceeds the {len(buf) - q} bytes left", p)
            # The bytes are a prefix of the message: its entries are read until the cut
            # (each takes a byte at least: one more than the bytes left meets it).
            n = len(buf) - q + 1
        if n > MAX_ARRAY_ITEMS:
            raise _fail(f"array count {n} exceeds the decode limit of {MAX_ARRAY_ITEMS}", p)
        items: list[Any] = []
        for i in range(n):
            try:
                value, q = element(buf, q)
            except DecodeFailure as exc:
                if exc.partial is not None:
                    items.append(exc.partial)
                exc.path.insert(0, f"[{i}]")
                exc.partial = items
                raise
            items.append(value)
        return items, q

    return read_array


def closures(layout: Layout, records: RecordsHook = raw_records, prefix: bool = False) -> DecodeFn:
    """Closure-tree decoder for one layout; raises DecodeFailure with partial results.
    ``prefix``: the bytes are the captured start of a message cut short (snap length,
    capture hole): an array whose count runs past them is read up to the cut, and the
    partial result names the field the cut fell in."""
    reader = _struct_reader(layout.fields, layout.flexible, records, prefix)

    def decode(buf: bytes, p: int) -> tuple[dict[str, Any], int]:
        try:
            body, q = reader(buf, p)
        except DecodeFailure as exc:
            if exc.path and exc.path[0] == "":
                exc.path.pop(0)
            raise
        except (IndexError, UnicodeDecodeError, struct.error) as exc:
            raise _fail(f"unexpected {type(exc).__name__}: {exc}", p) from None
        return body, q

    return decode
