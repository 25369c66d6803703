"""Per-group percentiles over plain numpy arrays, equal to the pandas steps they replace
(bit for bit): the report's connection and produce-to-fetch tables take percentiles per
connection and per topic, where a Python function per group (a ``groupby`` lambda, or a
Series per group) cost most of their time, and more the more groups a capture has.

Two percentile rules, both linear interpolation between closest ranks
(``stats.PERCENTILE_INTERPOLATION``), which round differently:

* ``SERIES``: ``Series.quantile``, which is ``np.quantile`` (numpy's ``_lerp``: from
  the upper neighbour when the fraction is 0.5 or more);
* ``GROUPBY``: pandas' ``GroupBy.quantile`` (``a + (b - a) * fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Rule = Literal["series", "groupby"]
SERIES: Rule = "series"
GROUPBY: Rule = "groupby"


@dataclass(frozen=True, slots=True)
class SortedGroups:
    """Each group's values (nulls left out), ascending, one group after another."""

    values: npt.NDArray[np.float64]
    starts: npt.NDArray[np.int64]
    """Per group (0 .. n - 1): where its values start in ``values``."""
    counts: npt.NDArray[np.int64]
    """Per group: how many values it has (0: none, or all null)."""


def sorted_groups(ids: npt.ArrayLike, values: npt.ArrayLike, groups: int) -> SortedGroups:
    """``values`` (float, NaN: null) grouped by ``ids`` (0 .. ``groups`` - 1)."""
    import numpy as np

    known = ~np.isnan(np.asarray(values, dtype=np.float64))
    keys = np.asarray(ids, dtype=np.int64)[known]
    numbers = np.asarray(values, dtype=np.float64)[known]
    # by value, then by group keeping that order (faster than a lexsort of both; equal
    # values are interchangeable, so any order of them gives the same arrays)
    order = np.argsort(numbers)
    order = order[np.argsort(keys[order], kind="stable")]
    counts = np.bincount(keys, minlength=groups).astype(np.int64)
    starts = np.zeros(groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return SortedGroups(numbers[order], starts, counts)


def quantile(groups: SortedGroups, q: float, rule: Rule) -> npt.NDArray[np.float64]:
    """Per group, the ``q`` quantile of its values by ``rule``; NaN for a group with none."""
    import numpy as np

    counts = groups.counts
    out = np.full(len(counts), np.nan)
    has = counts > 0
    if not has.any():
        return out
    n, start = counts[has], groups.starts[has]
    # both: the virtual index (n - 1) * q, its floor and fraction
    virtual = (n - 1) * q
    below = np.floor(virtual)
    fraction = virtual - below
    low = below.astype(np.int64)
    high = np.minimum(low + 1, n - 1)
    a, b = groups.values[start + low], groups.values[start + high]
    diff = b - a
    if rule == GROUPBY:
        # pandas takes the lower neighbour alone when there is no fraction
        picked = np.where(fraction == 0.0, a, a + diff * fraction)
    else:
        picked = np.where(fraction >= 0.5, b - diff * (1 - fraction), a + diff * fraction)
    out[has] = picked
    return out


def largest(groups: SortedGroups) -> npt.NDArray[np.float64]:
    """Per group, its largest value (the last of its sorted ones); NaN for a group with
    none."""
    import numpy as np

    out = np.full(len(groups.counts), np.nan)
    has = groups.counts > 0
    out[has] = groups.values[groups.starts[has] + groups.counts[has] - 1]
    return out
