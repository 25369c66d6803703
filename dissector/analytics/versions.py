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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dissector.analytics.partitions import Source
from dissector.protocol.tables import NEGOTIATION_API
from dissector.tables_schema import VERSION_COLUMNS, names

if TYPE_CHECKING:
    import pandas as pd

    from dissector.options import Options
    from dissector.tls import KeyLogs

__all__ = [
    "NEGOTIATION_API",
    "VERSION_COLUMNS",
    "VERSION_COLUMN_NAMES",
    "client_software",
    "versions",
]

VERSION_COLUMN_NAMES: tuple[str, ...] = names(VERSION_COLUMNS)


def versions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
    options: Options | None = None,
) -> pd.DataFrame:
    """The version-skew view: one row per (capture, connection, api_key) used, from the
    native core's pass over the captures. ``df.attrs["counters"]`` counts exchanges
    without an API (SASL tokens, orphan responses), which have no version to compare.
    ``tls``: key logs for Kafka over TLS."""
    from dissector.analytics.frames import tables_of

    frames = tables_of(
        source, ports=ports, specs=specs, tls=tls, options=options, tables=["versions"]
    )
    return frames.versions


# ``dissector.analytics.versions`` is both this module and the function users call (see partitions).
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return versions(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


def client_software(
    pairs: pd.DataFrame, table: pd.DataFrame, missing: str = "(none)"
) -> dict[str, list[str]]:
    """Client software (KIP-511: ApiVersions v3+ names it) -> the client ids that
    named it, sorted: the software of each connection of the versions ``table``, with
    the client ids of the connection's ApiVersions requests in the pairs table
    ``pairs``: those not empty (a Java client's SASL handshake sends its first
    ApiVersions with an empty client id), else ``missing``."""
    import pandas as pd

    named = table[table["client_software_name"].fillna("").ne("")]
    named = named.drop_duplicates(["capture", "stream"])
    if named.empty:
        return {}
    software = [
        f"{name} {version if isinstance(version, str) else ''}".strip()
        for name, version in zip(
            named["client_software_name"], named["client_software_version"], strict=True
        )
    ]
    connections = pd.DataFrame(
        {"capture": named["capture"].astype(object), "stream": named["stream"].astype("int64"),
         "software": software}
    )  # fmt: skip
    asked = pairs[pairs["api_name"].astype(object).eq(NEGOTIATION_API)]
    asked = pd.DataFrame(
        {"capture": asked["capture"].astype(object), "stream": asked["stream"].astype("int64"),
         "client": asked["client_id"].astype(object)}
    )  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for (_, _, name), clients in connections.merge(asked, on=["capture", "stream"]).groupby(
        ["capture", "stream", "software"]
    )["client"]:
        given = {c for c in clients if isinstance(c, str) and c}
        seen.update((name, c) for c in given or {missing})
    out: dict[str, list[str]] = {}
    for name, client in sorted(seen):
        out.setdefault(name, []).append(client)
    return out
