"""Decode whole request and response frames: header, then the body by its layout."""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dissector.protocol import compile as kc
from dissector.protocol.diskcache import load_or_build
from dissector.protocol.families import request_header_version, response_header_version
from dissector.protocol.keys import ApiKey
from dissector.protocol.spec import REQUEST, RESPONSE, Field, Layout, SpecSet

UNSUPPORTED_VERSION = 35
_API_VERSIONS = int(ApiKey.API_VERSIONS)  # compared once a response: a plain int is cheaper

_REQ_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


@dataclass(slots=True)
class Decoded:
    """One decoded frame. ``body`` keeps what was decoded even when ``error`` is set."""

    header: dict[str, Any]
    body: dict[str, Any] | None
    error: str | None = None
    trailing: int = 0
    api_key: int | None = None
    api_version: int | None = None
    notes: list[str] = field(default_factory=list)
    # The layout the body was decoded with (ApiVersions may fall back to v0's), so
    # the summary can read it by a plan made once per layout instead of by looking.
    layout: Layout | None = None
    # Set when the version is newer than the specs and the body was decoded with the
    # newest known layout (ASSUMED_VERSION_RULE); ``unsupported`` keeps the error the
    # frame carries if the pair's assumption is taken back (``settle_assumed``).
    assumed_version: int | None = None
    unsupported: str | None = None
    # Set on an ApiVersions response the broker wrote in this layout version instead of
    # the request's, to refuse the request's version (KIP-511; ``settle_assumed``).
    fallback_version: int | None = None


@dataclass(frozen=True, slots=True)
class FrameReader:
    """How a frame of one (api_key, version, direction) is read (``Registry.reader``)."""

    layout: Layout | None  # None: no spec describes it
    client_id: bool  # a request header with a client_id (header v1 and v2)
    tagged: bool  # a header with tagged fields (request v2, response v1)
    records: bool  # the layout has a records field: decoded inside a frame budget


def _records_hook(expand: bool) -> kc.RecordsHook:
    try:
        from dissector.protocol.records import current_frame_budget, parse_records
    except ImportError:  # the record-batch module is optional for the engine
        return kc.raw_records

    def hook(data: Any) -> Any:
        try:
            # Every records field of the frame shares its budget (see _frame_scope).
            return parse_records(data, expand=expand, budget=current_frame_budget())
        except Exception as exc:  # a record parser bug must not lose the message
            return {"size": len(data), "error": f"{type(exc).__name__}: {exc}"}

    return hook


class Registry:
    """Layouts plus their compiled decoders, compiled on first use and cached."""

    def __init__(
        self, specs: SpecSet, backend: str = "generate", *, parse_records: bool = True
    ) -> None:
        self.specs = specs
        # One flat lookup: correlation and decoding ask for layouts several times a pair.
        self._layouts = {
            (api_key, version, direction): layout
            for (api_key, direction), versions in specs.layouts.items()
            for version, layout in versions.items()
        }
        self.backend = backend
        self.parse_records = parse_records
        self._fast: dict[tuple[int, int, str, bool], kc.DecodeFn] = {}
        self._slow: dict[tuple[int, int, str, bool], kc.DecodeFn] = {}
        self._prefix: dict[tuple[int, int, str], kc.DecodeFn] = {}
        self._has_records: dict[tuple[int, int, str], bool] = {}
        self._readers: dict[tuple[int, int, str], FrameReader] = {}

    def reader(self, api_key: int, version: int, direction: str) -> FrameReader:
        """What decoding a frame of (api_key, version, direction) needs besides its
        bytes, worked out once: ``decode`` reads a million frames of a few kinds, and
        asking the layout, header-version and records questions each time cost more than
        decoding small bodies."""
        key = (api_key, version, direction)
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = self._new_reader(api_key, version, direction)
        return reader

    def _new_reader(self, api_key: int, version: int, direction: str) -> FrameReader:
        layout = self.layout(api_key, version, direction)
        if direction == REQUEST:
            # an unknown version: read as header v1 (client_id, no tags) unless v0
            client_id = request_header_version(api_key, version, flexible=False) != 0
            tagged = layout is not None and _request_header_tagged(layout)
        else:
            client_id = False
            tagged = layout is not None and _response_header_tagged(layout)
        records = layout is not None and self.has_records(layout)
        return FrameReader(layout, client_id, tagged, records)

    def layout(self, api_key: int, version: int, direction: str) -> Layout | None:
        return self._layouts.get((api_key, version, direction))

    def layouts(self) -> Iterable[Layout]:
        """Every layout of the specs, in no particular order."""
        return self._layouts.values()

    def decoder(self, layout: Layout, expand: bool) -> kc.DecodeFn:
        key = (layout.api_key, layout.version, layout.direction, expand)
        fn = self._fast.get(key)  # one dict lookup per message once compiled
        if fn is None:
            build = kc.generate if self.backend == "generate" else kc.closures
            fn = self._fast[key] = build(layout, self._hook(layout, expand))
        return fn

    def explainer(self, layout: Layout, expand: bool) -> kc.DecodeFn:
        key = (layout.api_key, layout.version, layout.direction, expand)
        fn = self._slow.get(key)
        if fn is None:
            fn = self._slow[key] = kc.closures(layout, self._hook(layout, expand))
        return fn

    def prefix_reader(self, layout: Layout) -> kc.DecodeFn:
        """The closures reading a message's captured prefix (``kc.closures`` prefix)."""
        key = (layout.api_key, layout.version, layout.direction)
        fn = self._prefix.get(key)
        if fn is None:
            fn = self._prefix[key] = kc.closures(layout, self._hook(layout, False), prefix=True)
        return fn

    def _hook(self, layout: Layout, expand: bool) -> kc.RecordsHook:
        # A layout without records fields never calls the hook: not importing the
        # record-batch module for it keeps a rare Python-decoded pair cheap.
        if self.parse_records and self.has_records(layout):
            return _records_hook(expand)
        return kc.raw_records

    def has_records(self, layout: Layout) -> bool:
        """Whether the layout has a ``records`` field (at any depth)."""
        key = (layout.api_key, layout.version, layout.direction)
        found = self._has_records.get(key)
        if found is None:
            found = self._has_records[key] = _any_records(layout.fields)
        return found

    def compile_all(self) -> int:
        """Compile every layout now (a test and the benchmark use this)."""
        count = 0
        for (api_key, direction), versions in self.specs.layouts.items():
            for version in versions:
                layout = self.specs.get(api_key, version, direction)
                if layout is not None:
                    self.decoder(layout, False)
                    count += 1
        return count


@functools.cache
def _registry_for(spec_dirs: tuple[str, ...], backend: str) -> Registry:
    if spec_dirs:
        return Registry(_load_specs(spec_dirs), backend)
    # The installed specs only change with the packages: see diskcache.
    return Registry(load_or_build("specs", _load_specs), backend)


def _load_specs(spec_dirs: tuple[str, ...] = ()) -> SpecSet:
    # Imported on use: a run that loads the specs from the start-up cache never needs
    # the readers (nor their imports: zipfile, importlib.resources, about 10 ms).
    from dissector.protocol.bundled import load_specs

    return load_specs(spec_dirs)


def get_registry(spec_dirs: Iterable[str | Path] = (), backend: str = "generate") -> Registry:
    """The shared registry for these spec directories (built once per process)."""
    if not spec_dirs and backend == "generate":
        return _default_registry()
    return _registry_for(tuple(str(Path(d)) for d in spec_dirs), backend)


@functools.cache
def _default_registry() -> Registry:
    return _registry_for((), "generate")


def _no_budget(_frame_bytes: int, cap: int | None = None) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


@functools.cache
def _frame_budget_type() -> Callable[[int, int | None], AbstractContextManager[Any]]:
    try:
        from dissector.protocol.records import MAX_DECOMPRESSED, frame_budget
    except ImportError:  # the record-batch module is optional for the engine
        return _no_budget

    def scope(frame_bytes: int, cap: int | None = None) -> AbstractContextManager[Any]:
        return frame_budget(frame_bytes, MAX_DECOMPRESSED, cap)

    return scope


def _frame_scope(
    registry: Registry, layout: Layout, frame_bytes: int, cap: int | None = None
) -> AbstractContextManager[Any]:
    """One decompression budget for all records fields of one decode of a frame, so
    that a Produce of many partitions cannot multiply it (issue #11), at most ``cap``
    bytes (None: ``records.FRAME_BUDGET_CAP``). A layout without records fields needs
    none, nor the record-batch module's import (about 15 ms, the cost of a run whose
    only Python-decoded pair is an ApiVersions)."""
    if not registry.has_records(layout):
        return contextlib.nullcontext()
    return _frame_budget_type()(frame_bytes, cap)


def _any_records(fields: Iterable[Field]) -> bool:
    return any(f.type == "records" or _any_records(f.fields) for f in fields)


def _decode_body(
    registry: Registry,
    layout: Layout,
    buf: bytes,
    start: int,
    expand: bool,
    out: Decoded,
    cap: int | None = None,
) -> int:
    """Fill out.body/out.error; returns the end offset. The fast path raises on bad
    bytes; the closure decoder then says where, and keeps the partial body."""
    try:
        with _frame_scope(registry, layout, len(buf), cap):
            out.body, end = registry.decoder(layout, expand)(buf, start)
        return end
    except Exception:  # bad bytes (or a generator bug): let the closures explain
        pass
    try:
        # The second decode starts with a full budget.
        with _frame_scope(registry, layout, len(buf), cap):
            out.body, end = registry.explainer(layout, expand)(buf, start)
    except kc.DecodeFailure as exc:
        out.body, out.error = exc.partial, exc.message()
        return len(buf)
    except Exception as exc:
        out.error = f"<body>: {type(exc).__name__}: {exc} at offset {start}"
        return len(buf)
    # The explaining decoder succeeded where the generated one failed: a bug, not bad
    # bytes. The body is right; say so, so tests and users can see it.
    out.notes.append("fast_path_failed")
    return end


def decode_request(
    payload: bytes | bytearray | memoryview,
    *,
    records: bool = False,
    registry: Registry | None = None,
    max_decompressed: int | None = None,
    prefix: bool = False,
) -> Decoded:
    """A request frame without its 4-byte size prefix: header v0/v1/v2, then body.
    ``max_decompressed``: the most its record batches may decompress to (None:
    ``records.FRAME_BUDGET_CAP``). ``prefix``: the payload is the captured start of a
    frame cut short; its body is read as far as it goes (``Registry.prefix_reader``)."""
    buf = payload if type(payload) is bytes else bytes(payload)
    reg = registry or _default_registry()
    if len(buf) < 8:
        return Decoded(header={}, body=None, error=f"header: {len(buf)} bytes, need 8", trailing=0)
    api_key, version, correlation_id = _REQ_FIXED.unpack_from(buf, 0)
    header: dict[str, Any] = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
    }
    out = Decoded(header=header, body=None, api_key=api_key, api_version=version)
    reader = reg.reader(api_key, version, REQUEST)
    p = 8
    if reader.client_id:  # header v0 has none
        # client_id stays a legacy nullable string even in header v2.
        if len(buf) < p + 2:
            out.error = f"header.client_id: length needs 2 bytes, {len(buf) - p} left at offset {p}"
            return out
        n = _I16(buf, p)[0]
        p += 2
        if n >= 0:
            if n > len(buf) - p:
                out.error = (
                    f"header.client_id: string of length {n} needs {n} bytes, "
                    f"{len(buf) - p} left at offset {p}"
                )
                return out
            header["client_id"] = buf[p : p + n].decode("utf-8", "replace")
            p += n
        else:
            header["client_id"] = None
    if reader.layout is None:

        def body_with(d: Decoded, lay: Layout) -> Decoded:
            tagged = _request_header_tagged(lay)
            return _header_tags_and_body(reg, lay, buf, p, records, d, tagged, max_decompressed)

        return _assumed(reg, api_key, version, REQUEST, out, body_with)
    if prefix:
        return _read_prefix(reg, reader, buf, p, out, max_decompressed)
    return _read_rest(reg, reader, buf, p, records, out, max_decompressed)


def _read_rest(
    reg: Registry,
    reader: FrameReader,
    buf: bytes,
    p: int,
    records: bool,
    out: Decoded,
    cap: int | None,
) -> Decoded:
    """``_header_tags_and_body`` for a known layout, by its reader: the path of nearly
    every frame, so a body without records skips the budget scope and its checks."""
    layout = reader.layout
    assert layout is not None
    if reader.records:
        return _header_tags_and_body(reg, layout, buf, p, records, out, reader.tagged, cap)
    if reader.tagged:
        p = _header_tags(buf, p, out)
        if p < 0:
            return out
    out.layout = layout
    try:
        out.body, end = reg.decoder(layout, records)(buf, p)
    except Exception:  # bad bytes: _decode_body's closures explain where
        end = _decode_body(reg, layout, buf, p, records, out, cap)
    out.trailing = max(len(buf) - end, 0)
    return out


def _read_prefix(
    reg: Registry, reader: FrameReader, buf: bytes, p: int, out: Decoded, cap: int | None
) -> Decoded:
    """The rest of a frame's captured prefix: header tags, then the body as far as the
    bytes go (``out.error`` says where they end; ``out.body`` holds what was read)."""
    layout = reader.layout
    assert layout is not None
    if reader.tagged:
        p = _header_tags(buf, p, out)
        if p < 0:
            return out
    out.layout = layout
    end = len(buf)
    try:
        with _frame_scope(reg, layout, len(buf), cap):
            out.body, end = reg.prefix_reader(layout)(buf, p)
    except kc.DecodeFailure as exc:
        out.body, out.error = exc.partial, exc.message()
    except Exception as exc:  # a bug must not lose the row
        out.error = f"<body>: {type(exc).__name__}: {exc} at offset {p}"
    out.trailing = max(len(buf) - end, 0)
    return out


def _header_tags_and_body(
    reg: Registry,
    layout: Layout,
    buf: bytes,
    p: int,
    records: bool,
    out: Decoded,
    tagged_header: bool,
    cap: int | None = None,
) -> Decoded:
    """The rest of a frame after the fixed header: its tagged fields (flexible header
    versions), then the body (decompressing at most ``cap`` bytes); fills ``out`` and
    returns it."""
    if tagged_header:
        p = _header_tags(buf, p, out)
        if p < 0:
            return out
    out.layout = layout
    end = _decode_body(reg, layout, buf, p, records, out, cap)
    out.trailing = max(len(buf) - end, 0)
    return out


def _header_tags(buf: bytes, p: int, out: Decoded) -> int:
    """The offset after the header's tagged fields (read into ``out.header``), or -1
    with ``out.error`` set when they are malformed."""
    try:
        return _read_header_tags(buf, p, out.header)
    except kc.DecodeFailure as exc:
        out.error = f"header.{exc.message()}"
        return -1


def _read_header_tags(buf: bytes, p: int, header: dict[str, Any]) -> int:
    if p < len(buf) and buf[p] == 0:
        return p + 1  # the usual empty section
    try:
        return kc._read_tags(buf, p, {}, header)
    except kc.DecodeFailure as exc:
        # Name the section, as the body's tags are named: "header._tagged_fields: ...".
        exc.path.insert(0, "_tagged_fields")
        raise


def decode_response(
    payload: bytes | bytearray | memoryview,
    api_key: int,
    api_version: int,
    *,
    records: bool = False,
    registry: Registry | None = None,
    max_decompressed: int | None = None,
    prefix: bool = False,
) -> Decoded:
    """A response frame without its size prefix, given its request's key and version
    (``max_decompressed``, ``prefix``: as ``decode_request``'s)."""
    buf = payload if type(payload) is bytes else bytes(payload)
    reg = registry or _default_registry()
    out = Decoded(header={}, body=None, api_key=api_key, api_version=api_version)
    if len(buf) < 4:
        out.error = f"header.correlation_id: int32 needs 4 bytes, {len(buf)} left at offset 0"
        return out
    out.header["correlation_id"] = _I32(buf, 0)[0]
    p = 4
    version = api_version
    # A broker answers an ApiVersions version it does not support with error 35 in
    # the v0 layout, so the client can retry with a version from the list.
    if (
        api_key == _API_VERSIONS
        and version > 0
        and len(buf) >= 6
        and _I16(buf, 4)[0] == UNSUPPORTED_VERSION
    ):
        version = 0
        out.fallback_version = version
        out.notes.append("unsupported_version: body decoded with the v0 layout")
    reader = reg.reader(api_key, version, RESPONSE)
    if reader.layout is None:

        def body_with(d: Decoded, lay: Layout) -> Decoded:
            tagged = _response_header_tagged(lay)
            return _header_tags_and_body(reg, lay, buf, p, records, d, tagged, max_decompressed)

        return _assumed(reg, api_key, api_version, RESPONSE, out, body_with)
    if prefix:
        return _read_prefix(reg, reader, buf, p, out, max_decompressed)
    return _read_rest(reg, reader, buf, p, records, out, max_decompressed)


def _request_header_tagged(layout: Layout) -> bool:
    """Request header v2 has tagged fields (``families.request_header_version``)."""
    return request_header_version(layout.api_key, layout.version, layout.flexible) == 2


def _response_header_tagged(layout: Layout) -> bool:
    """Response header v1 has tagged fields (``families.response_header_version``)."""
    return response_header_version(layout.api_key, layout.flexible) == 1


ASSUMED_VERSION_RULE = (
    "a request or response of a version newer than the newest the specs know is decoded "
    "with that newest version's layout (and its header versions) when that version is "
    "flexible (tagged fields let Kafka grow a message without breaking older readers) and "
    "both the request and the response decode without error, consuming their bodies "
    "exactly; the row says so in assumed_version and keeps status ok/error by its error "
    "codes. Otherwise the pair stays unsupported_version, bodies undecoded."
)


def assumed_layout(registry: Registry, api_key: int, version: int, direction: str) -> Layout | None:
    """The layout ASSUMED_VERSION_RULE decodes (api_key, version) with, if any: the
    newest known version's, when ``version`` is newer and that layout is flexible."""
    versions = registry.specs.versions(api_key, direction)
    if not versions or version <= versions[-1]:
        return None
    newest = registry.layout(api_key, versions[-1], direction)
    return newest if newest is not None and newest.flexible else None


def _assumed(
    reg: Registry,
    api_key: int,
    version: int,
    direction: str,
    out: Decoded,
    decode_with: Callable[[Decoded, Layout], Decoded],
) -> Decoded:
    """A frame of a version the specs do not know: ASSUMED_VERSION_RULE's decode when
    it consumes the body exactly, else the unsupported_version error alone."""
    unsupported = _unsupported(reg, api_key, version, direction)
    layout = assumed_layout(reg, api_key, version, direction)
    if layout is not None:
        trial = Decoded(
            header=dict(out.header),
            body=None,
            api_key=out.api_key,
            api_version=out.api_version,
            notes=list(out.notes),
        )
        decode_with(trial, layout)
        if trial.error is None and trial.trailing == 0:
            trial.assumed_version = layout.version
            trial.unsupported = unsupported
            return trial
    out.error = unsupported
    return out


def settle_assumed(*decoded: Decoded | None) -> int | None:
    """One pair's assumption, both sides or neither (ASSUMED_VERSION_RULE): when a side
    of a newer version could not be decoded, the sides that were are taken back to
    unsupported_version too. Returns the layout version the pair was decoded with.
    A request the broker refused (``settle_refused``) says so."""
    for d in decoded:
        if d is not None and (d.assumed_version is not None or d.fallback_version is not None):
            break
    else:  # nothing assumed, nothing refused: nearly every pair, twice each
        return None
    sides = [d for d in decoded if d is not None]
    assumed = [d for d in sides if d.assumed_version is not None]
    if not assumed:
        settle_refused(sides)
        return None
    if any(d.error and d.error.startswith("unsupported_version") for d in sides):
        for d in assumed:
            d.body, d.error, d.layout = None, d.unsupported, None
            d.assumed_version = d.unsupported = None
            d.trailing = 0
        settle_refused(sides)
        return None
    return assumed[0].assumed_version


def settle_refused(sides: Iterable[Decoded]) -> None:
    """An ApiVersions request of a version no spec knows, answered in the fallback layout
    with UNSUPPORTED_VERSION: the broker does not know the version either and refused it
    without reading the body (KIP-511: it parses no body of an unsupported version). Newer
    specs would not help, so its error is VERSION_REFUSED_TEXT, not unsupported_version."""
    sides = list(sides)
    if not any(d.fallback_version is not None for d in sides):
        return
    for d in sides:
        if (
            d.api_key == ApiKey.API_VERSIONS
            and d.api_version is not None
            and d.fallback_version is None
            and d.error is not None
            and d.error.startswith("unsupported_version:")
        ):
            d.error = VERSION_REFUSED_TEXT.format(api_key=int(d.api_key), version=d.api_version)


# The decode_error of a side no spec describes. Templates (not f-strings) because the
# native summary fills the same words for the pairs it settles without this decoder
# (export.py hands them over with each key's known versions).
UNSUPPORTED_VERSION_PREFIX = "unsupported_version: no "
"""How ``decode_error`` starts for a version newer than the specs (the summary table
counts those rows by it)."""
UNSUPPORTED_VERSION_TEXT = (
    UNSUPPORTED_VERSION_PREFIX + "{direction} spec for api_key {api_key} version {version} "
    "(known {lowest}-{highest})"
)
UNKNOWN_API_KEY_TEXT = "unknown_api_key: no {direction} spec for api_key {api_key}"
# An ApiVersions request the broker refused (``settle_refused``). One part of a
# decode_error, whose parts are joined by "; ": none inside.
VERSION_REFUSED_PREFIX = "version_refused: "
"""How ``decode_error`` starts for a version the broker refused too."""
VERSION_REFUSED_TEXT = (
    VERSION_REFUSED_PREFIX + "api_key {api_key} version {version} is refused by the broker too "
    "(error 35 answered in the v0 layout, KIP-511): it reads no body of it, nor does the "
    "dissector"
)


def _unsupported(reg: Registry, api_key: int, version: int, direction: str) -> str:
    versions = reg.specs.versions(api_key, direction)
    if not versions:
        return UNKNOWN_API_KEY_TEXT.format(direction=direction, api_key=int(api_key))
    return UNSUPPORTED_VERSION_TEXT.format(
        direction=direction,
        api_key=int(api_key),
        version=int(version),
        lowest=versions[0],
        highest=versions[-1],
    )


# Kafka 4.0 removed the inter-broker keys 4-7 and no installed spec describes them;
# for framing heuristics any small version of them is plausible.
SPECLESS_KEYS = range(ApiKey.LEADER_AND_ISR, ApiKey.CONTROLLED_SHUTDOWN + 1)
SPECLESS_MAX_VERSION = 15


def is_known_version(api_key: int, api_version: int, registry: Registry | None = None) -> bool:
    """Is there a request spec for (api_key, api_version)? Used by framing heuristics."""
    reg = registry or get_registry()
    if reg.layout(api_key, api_version, REQUEST) is not None:
        return True
    return api_key in SPECLESS_KEYS and 0 <= api_version <= SPECLESS_MAX_VERSION


def request_is_flexible(api_key: int, api_version: int, registry: Registry | None = None) -> bool:
    """Does this request use header v2 (flexible versions)? False when unknown."""
    layout = (registry or get_registry()).layout(api_key, api_version, REQUEST)
    return layout is not None and layout.flexible
