"""Version skew per connection: what the broker advertised (ApiVersions) against
what the client then used, and which requests used versions the specs do not know.

One row per (capture, connection, api_key) the client sent. The broker's range
comes from the ApiVersions response on the same connection (clients negotiate once
per connection, first); it is null when the capture holds no readable one, e.g. a
connection already open when the capture started or an ApiVersions version newer
than the specs (its decode error is then in ``negotiation_error``).
"""

from __future__ import annotations

import os
import sys
import types
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dissector.analytics.partitions import Source, table
from dissector.protocol.pairs import decoder_for_specs

if TYPE_CHECKING:
    import pandas as pd

    from dissector.tls import KeyLogs

NEGOTIATION_API = "ApiVersions"

VERSION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("capture", "string", "path of the capture file"),
    ("stream", "Int64", "TCP connection index within the capture"),
    ("client_id", "string", "client_id of the connection's first request"),
    ("client_software_name", "string", "ApiVersions v3+: the client library's name"),
    ("client_software_version", "string", "ApiVersions v3+: the client library's version"),
    ("negotiation_version", "Int64", "version of the connection's ApiVersions request"),
    ("negotiation_error", "string", "why the ApiVersions response could not be read"),
    ("api_key", "Int64", "API the client used on the connection"),
    ("api_name", "string", "its name"),
    ("requests", "Int64", "requests of that API on the connection"),
    ("versions_used", "object", "distinct versions the client sent, ascending"),
    ("broker_min", "Int64", "lowest version the broker advertised (null: not seen)"),
    ("broker_max", "Int64", "highest version the broker advertised (null: not seen)"),
    ("within_broker_range", "boolean", "every version used lies in the advertised range"),
    ("spec_max", "Int64", "newest request version the loaded specs know"),
    ("unknown_versions", "object", "versions used that the loaded specs do not know"),
)
VERSION_COLUMN_NAMES: tuple[str, ...] = tuple(c[0] for c in VERSION_COLUMNS)


@dataclass
class _Connection:
    capture: str
    stream: int
    client_id: str | None = None
    software: tuple[str | None, str | None] = (None, None)
    negotiation_version: int | None = None
    negotiation_error: str | None = None
    advertised: dict[int, tuple[int, int]] = field(default_factory=dict)
    used: dict[int, Counter[int]] = field(default_factory=dict)


def _advertised(body: dict[str, Any] | None) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    entries = body.get("api_keys") if isinstance(body, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        key, low, high = entry.get("api_key"), entry.get("min_version"), entry.get("max_version")
        if type(key) is int and type(low) is int and type(high) is int:
            out[key] = (low, high)
    return out


def _negotiate(conn: _Connection, ex: Any, decoder: Any) -> None:
    """Read one ApiVersions exchange into the connection (the last one read wins: a
    client retries with v0 when the broker refused its version)."""
    from dissector.protocol.messages import settle_assumed

    conn.negotiation_version = ex.api_version
    request = decoder.decode_request(ex.request.payload) if ex.request is not None else None
    decoded = (
        decoder.decode_response(ex.response.payload, ex.api_key, ex.api_version)
        if ex.response is not None
        else None
    )
    settle_assumed(request, decoded)  # a version newer than the specs: both sides or neither
    if request is not None:
        body = request.body or {}
        name, version = body.get("client_software_name"), body.get("client_software_version")
        if isinstance(name, str) or isinstance(version, str):
            conn.software = (name, version)
    if decoded is None:
        conn.negotiation_error = "no response"
        return
    advertised = _advertised(decoded.body)
    if advertised:
        conn.advertised = advertised
        conn.negotiation_error = decoded.error
    else:
        conn.negotiation_error = decoded.error or "no api_keys in the response"


def _spec_versions(decoder: Any) -> dict[int, tuple[int, ...]]:
    return {s.api_key: tuple(s.request_versions) for s in decoder.supported_apis()}


def versions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    """The version-skew view: one row per (capture, connection, api_key) used.
    ``df.attrs["counters"]`` counts exchanges without an API (SASL tokens, orphan
    responses), which have no version to compare."""
    from dissector.options import Options, capture_paths
    from dissector.wire.core import iter_exchanges

    decoder = decoder_for_specs(specs)
    counters: Counter[str] = Counter()
    conns: dict[tuple[str, int], _Connection] = {}
    negotiation_key: int | None = None
    for path, ex in iter_exchanges(
        capture_paths(source),
        Options(ports=frozenset(ports) if ports is not None else None, tls=tls),
        decoder=decoder,
    ):
        if ex.api_key is None or ex.api_version is None:
            counters["exchanges_without_api"] += 1
            continue
        conn = conns.get((path, ex.stream))
        if conn is None:
            conn = conns[(path, ex.stream)] = _Connection(path, ex.stream, ex.client_id)
        conn.used.setdefault(ex.api_key, Counter())[ex.api_version] += 1
        if negotiation_key is None and decoder.api_name(ex.api_key) == NEGOTIATION_API:
            negotiation_key = ex.api_key
        if ex.api_key == negotiation_key:
            _negotiate(conn, ex, decoder)
    known = _spec_versions(decoder)
    rows = [row for conn in conns.values() for row in _rows(conn, decoder, known)]
    df = table(rows, VERSION_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


def _rows(
    conn: _Connection, decoder: Any, known: dict[int, tuple[int, ...]]
) -> Iterable[dict[str, Any]]:
    for api_key, counts in sorted(conn.used.items()):
        used = sorted(counts)
        spec = known.get(api_key, ())
        low, high = conn.advertised.get(api_key, (None, None))
        within = None
        if low is not None and high is not None:
            within = all(low <= v <= high for v in used)
        yield {
            "capture": conn.capture,
            "stream": conn.stream,
            "client_id": conn.client_id,
            "client_software_name": conn.software[0],
            "client_software_version": conn.software[1],
            "negotiation_version": conn.negotiation_version,
            "negotiation_error": conn.negotiation_error,
            "api_key": api_key,
            "api_name": decoder.api_name(api_key),
            "requests": sum(counts.values()),
            "versions_used": used,
            "broker_min": low,
            "broker_max": high,
            "within_broker_range": within,
            "spec_max": max(spec) if spec else None,
            "unknown_versions": [v for v in used if v not in spec],
        }


# ``dissector.analytics.versions`` is both this module and the function users call (see partitions).
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return versions(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
