"""The report leads with trouble: a Trouble section right under the overview whose tables
agree with counts made here from the pairs frame, long polls ranked by service time and
marked, long lists folded, and the chart fixes (no API twice in a legend; legend
markers drawn at a readable size)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

from dissector.analytics import plots, report, stats
from dissector.table.frame import records_to_frame
from tests.test_report import _record, parse, table_rows

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "captures" / "kafka-4-mixed.pcapng"


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return report.analyze([BUNDLED])


@pytest.fixture(scope="module")
def page(df: pd.DataFrame) -> object:
    return parse(report.render(df))


def test_trouble_comes_right_after_the_overview(page: object) -> None:
    assert page.sections[:3] == ["overview", "trouble", "capture"]  # type: ignore[attr-defined]


def test_errors_by_code_and_api_count_every_error_row(df: pd.DataFrame, page: object) -> None:
    errors = df[df["status"].isin(["error", "malformed"])]
    label = (
        errors["error_name"]
        .astype("object")
        .where(
            errors["error_name"].notna() & (errors["error_name"] != "NONE"),
            errors["status"].astype("object"),
        )
    )
    want = (
        pd.Series(1, index=errors.index).groupby([label, errors["api_name"].astype("object")]).sum()
    )
    rows = table_rows(page, "trouble-errors")  # type: ignore[arg-type]
    shown = {(r["error"].replace("\u200b", ""), r["API"]): int(r["rows"]) for r in rows}
    assert len(rows) == min(report.TROUBLE_ROWS, len(want))
    for key, count in shown.items():
        assert want[key] == count, key
    # worst first
    counts = [int(r["rows"]) for r in rows]
    assert counts == sorted(counts, reverse=True) and counts[0] == want.max()


def test_unanswered_and_hot_connections(df: pd.DataFrame, page: object) -> None:
    rows = table_rows(page, "trouble-unanswered")  # type: ignore[arg-type]
    unanswered = df[df["status"] == "unanswered"]
    assert sum(int(r["requests"]) for r in rows) == len(unanswered)
    hot = table_rows(page, "trouble-connections")  # type: ignore[arg-type]
    queue = df.assign(q=stats.as_float(df["queue_ms"]))
    per_stream = queue[queue["q"] > 0].groupby("stream")["q"].sum().sort_values(ascending=False)
    assert [int(r["tcp.stream"]) for r in hot] == list(per_stream.index[: len(hot)])
    assert len(hot) == min(report.TROUBLE_ROWS, len(per_stream))


def test_throttled_responses_by_client_and_api(df: pd.DataFrame) -> None:
    """The bundled capture has no quota: throttle times are laid on some of its Produce
    and Fetch responses, and the table must count, sum and rank them as pandas does."""
    assert "trouble-throttled" not in parse(report.render(df)).tables  # type: ignore[attr-defined]
    throttled = df.copy()
    answered = throttled.index[throttled["response_time"].notna()]
    chosen = [i for i in answered if throttled.at[i, "api_name"] in ("Produce", "Fetch")][:9]
    assert len(chosen) == 9
    for n, i in enumerate(chosen):
        throttled.at[i, "throttle_ms"] = 100 * (n + 1)
    rows = table_rows(parse(report.render(throttled)), "trouble-throttled")  # type: ignore[arg-type]
    marked = throttled.loc[chosen]
    want = (
        marked.assign(ms=marked["throttle_ms"].astype(float))
        .groupby([marked["client_id"].astype(object), marked["api_name"].astype(object)])["ms"]
        .agg(["size", "max", "sum"])
    )
    shown = {
        (r["client id"], r["API"]): (
            int(r["responses"]),
            r["max throttle ms"],
            r["total throttle ms"],
        )
        for r in rows
    }
    assert shown == {
        key: (int(v["size"]), report.fmt_ms(v["max"]), report.fmt_ms(v["sum"]))
        for key, v in want.iterrows()
    }
    totals = [float(r["total throttle ms"].replace(",", "")) for r in rows]
    assert totals == sorted(totals, reverse=True)  # worst first


def test_slowest_are_ranked_by_service_time_and_long_polls_marked(
    df: pd.DataFrame, page: object
) -> None:
    service = stats.service_latency(df)
    polls = df[service["fetch_wait"] == "empty_poll"]
    assert len(polls) == 4 and (stats.as_float(polls["latency_ms"]) > 500).all()
    rows = table_rows(page, "slowest")  # type: ignore[arg-type]
    services = [float(r["service / latency ms"].split(" / ")[0].replace(",", "")) for r in rows]
    assert services == sorted(services, reverse=True)
    top = service["service_ms"].astype("float64").nlargest(len(rows)).tolist()
    assert services == pytest.approx(top, rel=5e-3)  # cells keep 3-4 significant digits
    # the empty long polls (over 500 ms latency, a few ms of service) are not on top...
    assert not any("long poll" in r["status"] for r in rows[:5])
    # ...and their rows, ranked alone, say why their latency is long
    ranked = report.service_pair_table(report.by_service_time(polls, len(polls)))
    for cell, latency, svc in zip(
        ranked["status_error"], ranked["latency_ms"], ranked["service_ms"], strict=True
    ):
        assert report.fmt_status(cell) == "ok, long poll (empty poll)"
        assert float(latency) > 500 > float(svc)


def test_long_lists_are_folded(df: pd.DataFrame) -> None:
    html = report.render(df)
    facts = stats.capture_facts(df)
    assert len(facts.api_versions) > report.FOLD_ITEMS
    assert f"API versions seen ({len(facts.api_versions)})" in html
    assert '<details class="fold"><summary>' in html
    assert f"and {len(facts.api_versions) - report.FOLD_ITEMS // 2} more" in html
    per_api = stats.per_api(df)
    assert len(per_api) > report.COLLAPSE_ROWS
    assert '<details class="long"><summary>' in html


def test_notable_apis_never_lists_an_api_twice() -> None:
    # Produce is both the slowest and the busiest here: it led the legend twice.
    records = [
        _record("c", correlation_id=i, api_key=0, api_name="Produce", latency_ms=50.0 + i)
        for i in range(30)
    ] + [_record("c", correlation_id=100 + i, latency_ms=1.0) for i in range(5)]
    frame = records_to_frame(records)
    picked = plots.notable_apis(frame)
    assert picked[0] == "Produce"
    assert len(picked) == len(set(picked))


def test_scatter_legend_markers_are_readable_in_a_crowded_plot() -> None:
    records = [
        _record("c", correlation_id=i, request_time=1_700_000_000_000_000_000 + i * 1_000_000)
        for i in range(6000)
    ]
    fig = plots.latency_over_time(records_to_frame(records))
    legend = fig.axes[0].get_legend()
    handles = getattr(legend, "legend_handles", None) or legend.legendHandles
    sizes = [h.get_sizes()[0] for h in handles if hasattr(h, "get_sizes")]
    assert sizes and min(sizes) >= plots.LEGEND_MARKER_AREA
    assert all(h.get_alpha() in (None, 1.0) for h in handles)
