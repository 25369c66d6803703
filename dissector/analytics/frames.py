"""The analytics tables as pandas frames, from one native pass over the captures."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dissector.options import AnySource
from dissector.tables_schema import CONTRACTS

if TYPE_CHECKING:
    import pandas as pd

    from dissector.options import Options
    from dissector.tls import KeyLogs
    from dissector.wire.tables import CaptureTables

Source = str | os.PathLike[str] | AnySource | Iterable[str | os.PathLike[str] | AnySource]


@dataclass(frozen=True)
class AnalyticsFrames:
    """``dissector.partitions``, ``groups`` and ``versions`` of the same captures."""

    partitions: pd.DataFrame
    groups: pd.DataFrame
    versions: pd.DataFrame

    @classmethod
    def of(cls, tables: CaptureTables) -> AnalyticsFrames:
        return cls(tables.frame("partitions"), tables.frame("groups"), tables.frame("versions"))


def tables_of(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
    options: Options | None = None,
    tables: Collection[str] = tuple(CONTRACTS),
) -> AnalyticsFrames:
    """The three tables of ``source`` (one path, or several read in a row; files of one
    rotated recording read as one capture, as by ``analyze``), in one pass of the native
    core. A capture that cannot be read raises, as ``analyze`` does. ``options``: the
    pass's options (``ports``/``tls`` laid over them); ``tables``: those built (the
    others come empty, at no cost)."""
    from dissector.options import keyword_options
    from dissector.protocol.pairs import decoder_for_specs
    from dissector.wire.core import capture_tables

    options = keyword_options(options, ports=ports, tls=tls)
    built = capture_tables(source, options, decoder=decoder_for_specs(specs), tables=tables)
    return AnalyticsFrames.of(built)
