"""What a report holds: the page's records (sections, cards, facts, tables, charts),
the section list, the ``df.attrs`` keys ``analyze`` fills, and the analytics tables of
the captures (``AnalyticsTables``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.wire.tables import CaptureTables


TABLE_ROW_LIMIT = 50
"""Longer tables are cut (the note says how many rows were left out)."""


SLOWEST_N = 20


CLIENT_SOFTWARE_ATTR = "client_software"
"""``df.attrs`` key: {"name version": [client ids]} from ApiVersions v3+ requests."""


PER_API_ROW_LIMIT = 200


VERSION_ROW_LIMIT = 300
"""The version view has a row per client and API: a few hundred in a busy capture."""


@dataclass(frozen=True, slots=True)
class Header:
    label: str
    numeric: bool = False


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    svg: Markup
    """One SVG document (``analytics.charts``), inlined in the page."""
    caption: str
    kind: str = "chart"


@dataclass(frozen=True, slots=True)
class TableBlock:
    id: str
    title: str
    headers: tuple[Header, ...]
    rows: tuple[tuple[str, ...], ...]
    keys: tuple[tuple[str, ...], ...] = ()
    """Per cell, the value the table sorts by ("" = by its text): numbers unformatted."""
    empty: str = "Nothing to show."
    note: str = ""
    more: int = 0
    css: str = ""
    kind: str = "table"


@dataclass(frozen=True, slots=True)
class Card:
    label: str
    value: str
    tone: str = ""


@dataclass(frozen=True, slots=True)
class Folded:
    """A long list in a fact: its first items shown, the whole list behind a <details>."""

    short: str
    full: str

    def __str__(self) -> str:  # tests and text readers see the whole list
        return self.full


FOLD_ITEMS = 12
"""A fact listing more items than this shows the first ones and folds the rest."""


COLLAPSE_ROWS = 25
"""A table longer than this starts collapsed (<details>): the page leads with trouble."""


@dataclass(frozen=True, slots=True)
class Section:
    id: str
    title: str
    intro: str = ""
    cards: tuple[Card, ...] = ()
    facts: tuple[tuple[str, str | Folded], ...] = ()
    blocks: tuple[Chart | TableBlock, ...] = field(default_factory=tuple)


SECTION_IDS: tuple[str, ...] = (
    "overview",
    "trouble",
    "capture",
    "latency",
    "queueing",
    "traffic",
    "errors",
    "slowest",
    "unanswered",
    "groups",
    "clients",
    "brokers",
    "topics",
    "partitions",
    "versions",
    "sizes",
    "definitions",
)
"""Every report has these sections, in this order (tests and links rely on them)."""


CAPTURES_ATTR = "captures"
"""``df.attrs`` key: the capture files analysed, including those without one Kafka pair."""


TROUBLE_ROWS = 10
"""Rows per Trouble table: the worst; the sections below have the rest."""


TABLES_ATTR = "tables"
"""``df.attrs`` key: the ``AnalyticsTables`` of the captures (``analyze`` computes them)."""


@dataclass(frozen=True, eq=False)
class AnalyticsTables:
    """``dissector.partitions``, ``groups`` and ``versions`` of the report's captures,
    from the same pass as the pairs: kept as the core's Arrow tables
    (``wire.tables.CaptureTables``), each frame built when asked for (the partitions
    table of a long capture has hundreds of thousands of rows).

    Kept in ``df.attrs``: pandas deep-copies attrs on every derived frame and compares
    them on concat, so the holder copies as itself and compares by identity (the tables
    are never changed after ``analyze``)."""

    arrow: CaptureTables
    throughput_parts: tuple[pa.Table, ...] | None = None
    """``partitions.throughput_chunks`` of every partitions row, added up as the pass
    went, when ``arrow.partitions`` keeps only the rows read after it
    (``report.analyze(digest=True)``); None: computed from ``arrow.partitions``."""

    @property
    def partitions(self) -> pd.DataFrame:
        return self.arrow.frame("partitions")

    def partitions_of(self, columns: Iterable[str], rows: Any = None) -> pd.DataFrame:
        """The partitions table with only ``columns`` (a third of the memory and time of
        the whole frame for the report's derived tables); ``rows``: only the rows of
        boolean mask, applied in Arrow before the frame is built. A lean frame: its
        text columns are categories in string order, the core's dictionaries (a
        million rows of decoded text took 300 MB more); the lag and produce_to_fetch
        read them as they read text."""
        import pandas as pd
        import pyarrow as pa

        from dissector.tables_schema import PARTITION_COLUMNS
        from dissector.wire.tables import to_series

        wanted = set(columns)
        table = self.arrow.partitions
        data = {}
        # a column at a time: only one column's filtered copy is held at once
        for entry in (c for c in PARTITION_COLUMNS if c[0] in wanted):
            name = entry[0]
            column = table.column(name)
            column = column if rows is None else column.filter(rows)
            if pa.types.is_dictionary(column.type):
                data[name] = _sorted_categories(column.to_pandas())
            else:
                data[name] = to_series(column, entry[1])
            del column
        df = pd.DataFrame(data)
        df.attrs["counters"] = dict(self.arrow.counters.get("partitions", {}))
        return df

    @property
    def groups(self) -> pd.DataFrame:
        return self.arrow.frame("groups")

    @property
    def versions(self) -> pd.DataFrame:
        return self.arrow.frame("versions")

    def __deepcopy__(self, memo: dict[int, object]) -> AnalyticsTables:
        return self


def _sorted_categories(values: pd.Series) -> pd.Series:
    """A categorical column with its categories in string order (a dictionary's are in
    the order the core met them), so that sorting by it sorts as text does."""
    words = values.cat.categories
    return values.cat.reorder_categories(sorted(words, key=str))


def analytics_tables(df: pd.DataFrame) -> AnalyticsTables | None:
    tables = df.attrs.get(TABLES_ATTR)
    return tables if isinstance(tables, AnalyticsTables) else None


NO_KAFKA_SECTION_IDS: tuple[str, ...] = ("overview", "capture")
"""A capture without one Kafka pair gets these: what it held instead, not empty charts."""


FILTER_ATTR = "filter"
"""``df.attrs`` key: (--filter text, rows before it) when the rows were filtered."""


GROUPS_ATTR = "groups"
"""``df.attrs`` key: {group_id: {protocol, members, generations, calls, errors}}."""
