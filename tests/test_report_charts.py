"""The report's SVG charts: the numbers each draws (``analytics.series``) against
aggregates computed here from the pairs frame with plain pandas groupbys, and the SVG
itself (well-formed XML, one named group per series, axis labels and legends).

Real data: the bundled capture (its README's ledger: 427 pairs, errors of 11 kinds,
consumer groups, two brokers) and the heuristic-port capture (one broker)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dissector.analytics import charts, report, series, stats, svg

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"
ONE_BROKER = REPO / "captures" / "heuristic-port-19192.pcapng"
SVG = "{http://www.w3.org/2000/svg}"
ERRORS = ("error", "malformed")
UNIT_WORDS = ("ms", "bytes", "per second", "seconds since", "rows", "fraction")


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return report.analyze([BUNDLED])


def _when(df: pd.DataFrame) -> pd.Series:
    return df["request_time"].fillna(df["response_time"])


def _api(df: pd.DataFrame) -> pd.Series:
    """api_name, orphans named as the report names them."""
    orphan = df["status"].eq("orphan_response").fillna(False).astype(bool)
    names = df["api_name"].astype(object)
    assert not (names.isna() & ~orphan).any()  # the bundled capture: every request named
    return names.where(~orphan, stats.ORPHAN_LABEL).astype(str)


def _buckets(df: pd.DataFrame, width: int) -> pd.Series:
    return _when(df).dt.floor(f"{width}s")


def test_traffic_bands_are_requests_per_second_by_api(df: pd.DataFrame) -> None:
    data = series.traffic(df)
    assert data is not None and data.per == "per second"  # 427 pairs over about 42 s
    width = data.buckets.width_s
    counts = df.groupby([_buckets(df, width), _api(df)]).size().unstack(fill_value=0)
    full = pd.date_range(counts.index.min(), counts.index.max(), freq=f"{width}s")
    counts = counts.reindex(full, fill_value=0)
    ranked = _api(df).value_counts()
    ranked = sorted(ranked.items(), key=lambda kv: (-kv[1], kv[0]))
    top = [name for name, _ in ranked[: series.MAX_SERIES]]
    assert [b.name for b in data.requests] == [*top, series.OTHER]
    for band in data.requests:
        expected = (
            counts[[c for c in counts.columns if c not in top]].sum(axis=1)
            if band.name == series.OTHER
            else counts[band.name]
        )
        np.testing.assert_allclose(band.values, expected.to_numpy() / width)
    assert sum(b.values.sum() for b in data.requests) * width == len(df)
    assert len(data.buckets.edges) == len(full) + 1
    # bytes in and out per second, in the chart's unit
    divisor = {"B": 1, "KiB": 1024, "MiB": 1024**2}[data.byte_unit]
    wire = df.groupby(_buckets(df, width))[["request_size", "response_size"]].sum()
    wire = wire.reindex(full, fill_value=0)
    for band, column in zip(data.bytes, ("request_size", "response_size"), strict=True):
        np.testing.assert_allclose(band.values * divisor * width, wire[column].to_numpy())


def test_latency_cdfs_are_each_apis_sorted_latencies(df: pd.DataFrame) -> None:
    curves = series.latency_cdfs(df)
    timed = df[df["latency_ms"].notna()]
    by_api = timed.groupby(_api(timed))["latency_ms"]
    assert len(curves) == min(series.MAX_SERIES, by_api.ngroups)
    assert [c.name for c in curves][:3] == ["ApiVersions", "Metadata", "FindCoordinator"]
    for curve in curves:
        expected = np.sort(by_api.get_group(curve.name).to_numpy(dtype=float))
        np.testing.assert_allclose(curve.values, np.clip(expected, 1e-3, None))
        assert curve.p99 == pytest.approx(np.percentile(np.clip(expected, 1e-3, None), 99))
        assert curve.label.startswith(f"{curve.name} (n={len(expected)}, p99 ")


def test_latency_points_are_every_timed_pair_once(df: pd.DataFrame) -> None:
    points = series.latency_points(df)
    assert points is not None
    timed = df[df["latency_ms"].notna()]
    assert sum(len(p.x) for p in points.series) == len(timed)
    assert len(points.errors.x) == int(timed["status"].isin(ERRORS).sum())
    assert points.errors.label == f"error ({len(points.errors.x)})"
    got = np.sort(np.concatenate([p.y for p in points.series]))
    np.testing.assert_allclose(
        got, np.sort(np.clip(timed["latency_ms"].to_numpy(float), 1e-3, None))
    )
    # the slowest API of the capture (by p99 service time) has a colour of its own
    slowest = timed.groupby(_api(timed))["service_ms"].quantile(0.99).idxmax()
    assert slowest in {p.name for p in points.series}


def test_percentile_lines_are_p50_and_p99_per_bucket(df: pd.DataFrame) -> None:
    data = series.latency_percentiles(df)
    assert data is not None
    width = data.width_s
    timed = df[df["service_ms"].notna()]
    grouped = timed.groupby([_buckets(timed, width), _api(timed)])["service_ms"]
    p50, p99 = grouped.quantile(0.5), grouped.quantile(0.99)
    assert data.apis
    for line in data.apis:
        rows = p99.xs(line.name, level=1)
        np.testing.assert_allclose(line.p99, rows.to_numpy(float))
        np.testing.assert_allclose(line.p50, p50.xs(line.name, level=1).to_numpy(float))
        assert len(line.x) == len(rows)
    brokers = timed["broker_ip"].astype(str) + ":" + timed["broker_port"].astype(str)
    assert [b.name for b in data.brokers] == sorted(set(brokers))
    by_broker = timed.groupby([_buckets(timed, width), brokers])["service_ms"].quantile(0.99)
    for line in data.brokers:
        np.testing.assert_allclose(line.p99, by_broker.xs(line.name, level=1).to_numpy(float))


def test_matrix_is_p99_service_latency_per_api_and_broker(df: pd.DataFrame) -> None:
    matrix = series.latency_matrix(df)
    assert matrix is not None and len(matrix.brokers) == 2  # ports 9092 and 9094
    timed = df[df["service_ms"].notna()]
    brokers = timed["broker_ip"].astype(str) + ":" + timed["broker_port"].astype(str)
    p99 = timed.groupby([_api(timed), brokers])["service_ms"].quantile(0.99).unstack()
    expected = p99.loc[list(matrix.apis), list(matrix.brokers)].to_numpy(float)
    np.testing.assert_allclose(matrix.values, expected, equal_nan=True)


def test_error_bars_are_rows_per_status_and_errors_by_api(df: pd.DataFrame) -> None:
    data = series.error_bars(df)
    assert data is not None
    statuses = df["status"].value_counts()
    assert {b.name: b.value for b in data.statuses} == {k: float(v) for k, v in statuses.items()}
    rows = df[df["status"].isin(ERRORS)]
    error = rows["error_name"].astype(object).where(rows["error_name"].notna(), rows["status"])
    table = rows.groupby([error.astype(str), _api(rows)]).size().unstack(fill_value=0)
    assert set(data.errors) == set(table.index)
    for band in data.by_api:
        expected = table.reindex(list(data.errors))[band.name].to_numpy(float)
        np.testing.assert_array_equal(band.values, expected)
    totals = np.sum([b.values for b in data.by_api], axis=0)
    assert list(totals) == sorted(totals, reverse=True)  # the most frequent first


def test_time_series_of_errors_groups_throttling_and_connections(df: pd.DataFrame) -> None:
    errors = series.error_timeline(df)
    assert errors is not None
    rows = df[df["status"].isin(ERRORS)]
    error = rows["error_name"].astype(object).where(rows["error_name"].notna(), rows["status"])
    totals = error.value_counts()
    named = {b.name: int(b.values.sum()) for b in errors.bands}
    shown = {k: v for k, v in named.items() if k != series.OTHER}
    assert all(totals[k] == v for k, v in shown.items())
    assert sum(named.values()) == len(rows)

    groups = series.group_activity(df)
    assert groups is not None
    width = groups.stacked.buckets.width_s
    calls = df["api_key"].isin(list(stats.GROUP_ACTIVITY)).sum()
    assert sum(b.values.sum() for b in groups.stacked.bands) * width == pytest.approx(calls)
    rebalancing = df["error_name"].isin(stats.REBALANCE_ERROR_NAMES).fillna(False)
    assert (
        groups.rebalance.sum() == rebalancing[df["api_key"].isin(list(stats.GROUP_ACTIVITY))].sum()
    )

    throttle = series.throttle(df)
    assert throttle is not None
    assert throttle.throttled.sum() == (df["throttle_ms"].fillna(0) > 0).sum()

    churn = series.connection_churn(df)
    assert churn is not None
    connections = df[_when(df).notna()].groupby(["capture", "stream"]).ngroups
    assert churn.opened.sum() == churn.closed.sum() == connections == 100  # README: tshark
    assert churn.active.max() <= connections


def test_size_histograms_count_every_sized_row(df: pd.DataFrame) -> None:
    requests, responses = series.size_histograms(df)
    assert isinstance(requests, series.Histogram) and isinstance(responses, series.Histogram)
    for hist, column in ((requests, "request_size"), (responses, "response_size")):
        sizes = df[column].dropna()
        sizes = sizes[sizes > 0].to_numpy(float)
        assert hist.counts.sum() == len(sizes)
        assert hist.edges[0] == sizes.min() and hist.largest == sizes.max()
        assert hist.median == np.median(sizes)


# -- the SVG ---------------------------------------------------------------------------


def _svg(draw: object, frame: pd.DataFrame) -> ET.Element:
    text = draw(frame)  # type: ignore[operator]
    assert "url(" not in text  # a page inlines many charts: no references between them
    return ET.fromstring(text)


def _series_names(root: ET.Element) -> list[str]:
    return [g.get("data-name", "") for g in root.iter(SVG + "g") if g.get("class") == "series"]


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(SVG + "text")]


def test_every_chart_is_well_formed_svg_with_titles_axes_and_legends(df: pd.DataFrame) -> None:
    one = report.analyze([ONE_BROKER])
    for frame in (df, one):
        for chart_id, (_, draw) in charts.CHARTS.items():
            root = _svg(draw, frame)
            assert root.tag == SVG + "svg" and root.get("viewBox"), chart_id
            words = " ".join(_texts(root))
            axes = [g for g in root.iter(SVG + "g") if g.get("class") == "x-axis"]
            if axes:  # else one line saying why there is nothing to draw
                assert any(w in words for w in UNIT_WORDS), (chart_id, words)
            else:
                assert words.startswith("No "), (chart_id, words)
            assert root.get("aria-label"), chart_id
            legends = [g for g in root.iter(SVG + "g") if g.get("class") == "legend"]
            if len(_series_names(root)) > 1 and chart_id not in ("sizes", "errors"):
                assert legends, chart_id


def test_svg_series_and_labels_are_the_series_numbers(df: pd.DataFrame) -> None:
    traffic = series.traffic(df)
    assert traffic is not None
    root = _svg(charts.traffic_over_time, df)
    names = [b.name for b in traffic.requests] + [b.name for b in traffic.bytes]
    assert _series_names(root) == names
    texts = _texts(root)
    assert {*names} <= set(texts)  # each in the legend
    assert "requests per second" in texts and traffic.buckets.label in texts

    bars = series.error_bars(df)
    assert bars is not None
    root = _svg(charts.error_breakdown, df)
    texts = _texts(root)
    # each status bar and each error bar labelled with its count
    for bar in bars.statuses:
        assert bar.name in texts and f"{int(bar.value):,}" in texts
    for error, total in zip(
        bars.errors, np.sum([b.values for b in bars.by_api], axis=0), strict=True
    ):
        assert error in texts and f"{int(total):,}" in texts

    cdfs = series.latency_cdfs(df)
    root = _svg(charts.latency_cdf, df)
    assert _series_names(root) == [c.name for c in cdfs]
    assert [c.label for c in cdfs] == [t for t in _texts(root) if " (n=" in t]

    matrix = series.latency_matrix(df)
    assert matrix is not None
    texts = _texts(_svg(charts.broker_api_matrix, df))
    finite = matrix.values[np.isfinite(matrix.values)]
    cells = [t for t in texts if t and t[0].isdigit()]
    for value in finite:
        assert svg.plain_number(value) in cells
    assert {*matrix.apis, *matrix.brokers} <= set(texts)


def test_charts_of_a_capture_without_errors_or_groups_say_so() -> None:
    df = report.analyze([ONE_BROKER])
    texts = _texts(_svg(charts.group_activity, df))
    if series.group_activity(df) is None:
        assert texts == ["No consumer-group or share-group traffic"]
    if series.error_timeline(df) is None:
        assert _texts(_svg(charts.error_timeline, df)) == ["No errors in this capture"]
    empty = df.iloc[:0]
    for chart_id, (_, draw) in charts.CHARTS.items():
        root = _svg(draw, empty)  # no rows: a message, never a crash
        assert _texts(root), chart_id


def test_coordinates_are_written_as_python_formats_them() -> None:
    """``svg._coords`` writes tenths with Arrow: the text ``f"{v:.1f}"`` gives for each
    value after numpy's rounding, on random values, halves of tenths, values rounding
    to -0.0, large ones, and values it leaves to Python (NaN, infinite, too large)."""
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.uniform(-2000.0, 2000.0, 50_000),
            rng.uniform(-0.3, 0.3, 5_000),
            np.arange(-1000, 1000) / 100 + 0.05,  # x.x5: on the rounding edge
            [0.0, -0.0, -0.04, 0.05, -0.05, 0.95, 9.95, 1e11 + 0.05, -1e11],
        ]
    )
    expected = [f"{v:.1f}" for v in np.round(values, 1).tolist()]
    assert svg._coords(values) == expected
    assert "-0.0" in expected  # the sign of a negative value rounded to zero is kept
    odd = np.array([1.25, np.nan, np.inf, -np.inf, 3e15])
    assert svg._coords(odd) == [f"{v:.1f}" for v in np.round(odd, 1).tolist()]
    assert svg._coords(np.zeros(0)) == []
