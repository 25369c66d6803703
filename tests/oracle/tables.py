"""The partitions, groups and versions tables by the Python full decoder: the oracle of
the native core's pass (``native/src/rows/tables.rs``).

Every exchange of the captures comes from the core (``wire.core.iter_exchanges``), is
decoded whole by ``dissector.protocol`` (``protocol.pairs.decode_exchanges``, which
learns topic names as it goes) and read by the shipped per-pair functions of
``dissector.protocol.tables``; this module only adds what a whole pass adds (the pair's
identity columns, the per-connection state of the versions view, the counters).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dissector.analytics.groups import group_row
from dissector.analytics.partitions import partition_rows, table
from dissector.options import Options, capture_paths
from dissector.protocol.pairs import DecodedExchange, decode_exchanges, decoder_for_specs
from dissector.protocol.tables import (
    EXPAND_RESPONSES,
    GROUP_APIS,
    NEGOTIATION_API,
    PARTITION_APIS,
    decode_pair,
    negotiation,
)
from dissector.stages import Exchange
from dissector.tables_schema import GROUP_COLUMNS, PARTITION_COLUMNS, VERSION_COLUMNS
from dissector.tls import KeyLogs
from dissector.wire.core import iter_exchanges

Source = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


def _options(ports: Iterable[int] | None, tls: KeyLogs | None) -> Options:
    return Options(ports=frozenset(ports) if ports is not None else None, tls=tls)


def _decoded(
    source: Source,
    apis: Iterable[str],
    ports: Iterable[int] | None,
    specs: Iterable[str | os.PathLike[str]],
    counters: Counter[str],
    expand: frozenset[str] = frozenset(),
    tls: KeyLogs | None = None,
) -> Iterator[tuple[DecodedExchange, Any]]:
    wanted_apis = frozenset(apis)
    decoder = decoder_for_specs(specs)
    options = _options(ports, tls)
    exchanges = iter_exchanges(capture_paths(source), options, decoder=decoder)

    def wanted(_ex: Exchange, api: str | None) -> bool:
        return api in wanted_apis

    def expanded(api: str, request: bool) -> bool:
        return not request and api in expand

    return decode_exchanges(exchanges, decoder, wanted, expand=expanded, counts=counters)


def python_partitions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    counters: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    expand = EXPAND_RESPONSES
    for dx, names in _decoded(source, PARTITION_APIS, ports, specs, counters, expand, tls):
        rows.extend(partition_rows(dx, names, counters))
    df = table(rows, PARTITION_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


def python_groups(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    counters: Counter[str] = Counter()
    decoded = _decoded(source, GROUP_APIS, ports, specs, counters, tls=tls)
    rows = [group_row(dx) for dx, _ in decoded]
    df = table(rows, GROUP_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


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


def python_versions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    decoder = decoder_for_specs(specs)
    counters: Counter[str] = Counter()
    conns: dict[tuple[str, int], _Connection] = {}
    options = _options(ports, tls)
    for path, ex in iter_exchanges(capture_paths(source), options, decoder=decoder):
        if ex.api_key is None or ex.api_version is None:
            counters["exchanges_without_api"] += 1
            continue
        conn = conns.get((path, ex.stream))
        if conn is None:
            conn = conns[(path, ex.stream)] = _Connection(path, ex.stream, ex.client_id)
        conn.used.setdefault(ex.api_key, Counter())[ex.api_version] += 1
        if decoder.api_name(ex.api_key) == NEGOTIATION_API:
            # the last one read wins: a client retries with v0 when its version was refused
            req, resp = decode_pair(
                decoder,
                ex.api_key,
                ex.api_version,
                ex.request.payload if ex.request is not None else None,
                ex.response.payload if ex.response is not None else None,
            )
            n = negotiation(req, resp)
            conn.negotiation_version = ex.api_version
            if n.software is not None:
                conn.software = n.software
            if n.advertised is not None:
                conn.advertised = n.advertised
            conn.negotiation_error = n.error
    known = {s.api_key: tuple(s.request_versions) for s in decoder.supported_apis()}
    rows = [row for conn in conns.values() for row in _version_rows(conn, decoder, known)]
    df = table(rows, VERSION_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


def _version_rows(
    conn: _Connection, decoder: Any, known: dict[int, tuple[int, ...]]
) -> Iterator[dict[str, Any]]:
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
