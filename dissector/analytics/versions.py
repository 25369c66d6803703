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

    from dissector.tls import KeyLogs

__all__ = ["NEGOTIATION_API", "VERSION_COLUMNS", "VERSION_COLUMN_NAMES", "versions"]

VERSION_COLUMN_NAMES: tuple[str, ...] = names(VERSION_COLUMNS)


def versions(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    """The version-skew view: one row per (capture, connection, api_key) used, from the
    native core's pass over the captures. ``df.attrs["counters"]`` counts exchanges
    without an API (SASL tokens, orphan responses), which have no version to compare.
    ``tls``: key logs for Kafka over TLS."""
    from dissector.analytics.frames import tables_of

    return tables_of(source, ports=ports, specs=specs, tls=tls).versions


# ``dissector.analytics.versions`` is both this module and the function users call (see partitions).
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return versions(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
