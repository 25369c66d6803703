"""dissector.analytics.grouped against the library steps it stands in for: numpy's
``quantile`` and pandas' ``Series.quantile`` and ``GroupBy.quantile``, on data with
ties, nulls, one-value and empty groups (equal bit for bit: the report shows
full-precision numbers in its sort keys)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dissector.analytics import grouped

QUANTILES = (0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Ids 0 .. 299 (some unused, some of one value), latency-like values with ties and
    NaN (a whole group of NaN among them)."""
    rng = np.random.default_rng(seed)
    n = 20_000
    ids = rng.integers(0, 280, n)
    ids[:5] = 290  # a group of five values
    ids[5] = 295  # a group of one value
    values = np.round(rng.lognormal(0.0, 2.5, n), rng.integers(0, 4))  # ties
    values[rng.random(n) < 0.1] = np.nan
    values[ids == 7] = np.nan  # a group with no value
    return ids, values, 300


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_series_rule_is_numpy_quantile_and_series_quantile(seed: int) -> None:
    ids, values, size = _data(seed)
    groups = grouped.sorted_groups(ids, values, size)
    for q in QUANTILES:
        got = grouped.quantile(groups, q, grouped.SERIES)
        for group in range(size):
            mine = values[(ids == group) & ~np.isnan(values)]
            if not len(mine):
                assert np.isnan(got[group])
                continue
            expected = np.quantile(mine, q)
            assert got[group] == expected, (q, group)
            if group % 10 == 0:  # the pandas step itself on some (slower)
                assert got[group] == pd.Series(values[ids == group]).quantile(q), (q, group)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_groupby_rule_is_pandas_groupby_quantile(seed: int) -> None:
    ids, values, size = _data(seed)
    groups = grouped.sorted_groups(ids, values, size)
    series = pd.Series(values)
    for q in QUANTILES:
        got = grouped.quantile(groups, q, grouped.GROUPBY)
        expected = series.groupby(ids).quantile(q).reindex(range(size)).to_numpy()
        np.testing.assert_array_equal(got, expected)
    # the rules differ (else one would do): numpy's rounds from the upper neighbour
    differs = grouped.quantile(groups, 0.99, grouped.SERIES) != grouped.quantile(
        groups, 0.99, grouped.GROUPBY
    )
    assert differs.any()


def test_no_values() -> None:
    groups = grouped.sorted_groups(np.zeros(0, np.int64), np.zeros(0), 3)
    assert np.isnan(grouped.quantile(groups, 0.5, grouped.SERIES)).all()
