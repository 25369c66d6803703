"""Counters every stage adds to, so that nothing seen is silently dropped.

One ``Counters`` object lives per analysis run and is handed to each stage;
there is no module-level state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class Counters:
    """Named event counts, e.g. ``packets``, ``non_tcp``, ``tcp_gap_bytes``.

    Stages use stable snake_case names (the anomaly catalogue) so that
    the CLI summary, the report and tests can read them.
    """

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def merge(self, counts: Mapping[str, int]) -> None:
        """Add another run's counts (the native core's, a capture's): the one place
        counts of several runs are added up (``sum_counts`` is built on it)."""
        for name, n in counts.items():
            self.counts[name] += n

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def sum_counts(runs: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The counters of several runs (captures, capture sets) added up, by name in
    sorted order (``Counters.merge``)."""
    total = Counters()
    for counts in runs:
        total.merge(counts)
    return total.as_dict()
