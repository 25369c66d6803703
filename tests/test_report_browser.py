"""The HTML report in headless Chromium at common desktop widths: every table fits its
box (no column pushed behind a horizontal scrollbar) and sorts when its header is clicked.

Measured in the browser itself (WebDriver, through chromedriver): a table overflows when
its box's scrollWidth exceeds its clientWidth.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dissector.analytics import report
from tests.test_report import (
    BUNDLED,
    CHROMIUM_ARGS,
    _call,
    _chromium,
    _webdriver,
    parse,
    plt_imread,
    table_rows,
)

WIDTHS = (1400, 1920)
SHOTS = Path(tempfile.gettempdir()) / "kafka-dissector-report-shots"
"""Screenshots are left here for a person to look at (CI keeps none)."""

OVERFLOW_PROBE = """
document.querySelectorAll('details').forEach(d => { d.open = true; });
return [...document.querySelectorAll('div.scroll')].map(box => {
  const folded = box.parentElement.tagName === 'DETAILS';
  const heading = folded ? box.parentElement.previousElementSibling : box.previousElementSibling;
  return {table: (heading || {}).id || '', scroll: box.scrollWidth, client: box.clientWidth};
});
"""

LAYOUT_PROBE = """
const top = id => document.getElementById(id).getBoundingClientRect().top + window.scrollY;
const overview = document.getElementById('overview').getBoundingClientRect();
return {
  page: document.scrollingElement.scrollWidth, inner: window.innerWidth,
  overviewBottom: overview.bottom + window.scrollY, trouble: top('trouble'),
  troubleErrors: top('table-trouble-errors'), errors: top('errors'),
  height: document.scrollingElement.scrollHeight,
  folded: [...document.querySelectorAll('details')].filter(d => !d.open).length,
};
"""

SORT_PROBE = """
const table = document.querySelector(arguments[0]);
const col = arguments[1];
const header = table.tHead.rows[0].cells[col];
const values = () => [...table.tBodies[0].rows].map(r => {
  const c = r.cells[col];
  return c.hasAttribute('data-v') ? parseFloat(c.getAttribute('data-v')) : c.textContent;
});
header.click();
const first = values();
header.click();
return {first, second: values(), sort: header.getAttribute('aria-sort')};
"""


# The box of an element's text itself (a block's own box spans the whole column).
HEADING_PROBE = """
const el = document.querySelector(arguments[0]);
const range = document.createRange();
range.selectNodeContents(el);
const r = range.getBoundingClientRect();
return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, text: el.textContent};
"""

NO_KAFKA_PROBE = """
return {page: document.scrollingElement.scrollWidth, inner: window.innerWidth,
        height: document.scrollingElement.scrollHeight,
        images: document.querySelectorAll('img, svg').length,
        sections: [...document.querySelectorAll('section')].map(s => s.id),
        text: document.body.innerText};
"""


def _ink(pixels: Any, box: dict[str, float]) -> float:
    """Share of dark pixels (text) in ``box`` of a screenshot; the box must be in it."""
    top, bottom = int(box["top"]), int(box["bottom"]) + 1
    left, right = int(box["left"]), int(box["right"]) + 1
    assert 0 <= top < bottom <= pixels.shape[0] and 0 <= left < right <= pixels.shape[1], box
    grey = pixels[top:bottom, left:right, :3].mean(axis=2)
    background = float(np.median(grey))
    return float((grey < background - 0.25).mean())


@pytest.fixture(scope="module")
def bundled_df() -> pd.DataFrame:
    if not BUNDLED.is_file():
        pytest.skip(f"bundled capture missing: {BUNDLED}")
    return report.analyze([BUNDLED])


def _two_captures(df: pd.DataFrame) -> pd.DataFrame:
    """The bundled capture as two files three years apart: a report of several captures
    (a capture column, per-capture facts, a timeline note)."""
    later = df.copy()
    later["capture"] = "captures/kafka-4-mixed-again.pcapng"
    for col in ("request_time", "response_time"):
        later[col] = later[col] + pd.Timedelta(days=3 * 365)
    both = pd.concat([df, later], ignore_index=True)
    both.attrs = dict(df.attrs)
    counters = dict(df.attrs.get("counters") or {})
    both.attrs["counters"] = {k: 2 * v for k, v in counters.items()}
    both.attrs[report.CAPTURES_ATTR] = [str(BUNDLED), "captures/kafka-4-mixed-again.pcapng"]
    return both


@pytest.fixture(scope="module")
def pages(bundled_df: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("reports")
    paths = {"bundled": out / "bundled.html", "two-captures": out / "two.html"}
    report.write_report(bundled_df, paths["bundled"])
    report.write_report(_two_captures(bundled_df), paths["two-captures"])
    return paths


@pytest.fixture(scope="module")
def browser() -> Iterator[str]:
    _chromium()
    with _webdriver() as base:
        yield base


def _in_browser(base: str, page: Path, width: int, scripts: list[tuple[str, list[Any]]]) -> Any:
    with tempfile.TemporaryDirectory() as profile:
        args = [*CHROMIUM_ARGS, f"--user-data-dir={profile}", f"--window-size={width},1000"]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": {"args": args}}}}  # fmt: skip
        session = _call(base + "/session", caps)["value"]["sessionId"]
        url = f"{base}/session/{session}"
        try:
            _call(url + "/url", {"url": page.as_uri()})
            results = [
                _call(url + "/execute/sync", {"script": script, "args": args})["value"]
                for script, args in scripts
            ]
            inner = _call(url + "/execute/sync", {"script": "return window.innerWidth", "args": []})
            shot = base64.b64decode(_call(url + "/screenshot")["value"])
        finally:
            _call(url, method="DELETE")
    SHOTS.mkdir(exist_ok=True)
    (SHOTS / f"{page.stem}-{width}.png").write_bytes(shot)
    return results, inner["value"], shot


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["bundled", "two-captures"])
def test_no_table_overflows_its_box(
    browser: str, pages: dict[str, Path], name: str, width: int
) -> None:
    (boxes,), inner, shot = _in_browser(browser, pages[name], width, [(OVERFLOW_PROBE, [])])
    assert inner > width - 40  # the window really is that wide (less a scrollbar)
    assert plt_imread(shot).shape[1] == inner
    tables = {b["table"] for b in boxes}
    assert {"table-slowest", "table-unanswered", "table-per-api", "table-queueing"} <= tables
    overflowing = [b for b in boxes if b["scroll"] > b["client"]]
    assert overflowing == []


def test_several_captures_get_a_capture_column_and_a_timeline_note(
    pages: dict[str, Path],
) -> None:
    page = parse(pages["two-captures"].read_text(encoding="utf-8"))
    slowest = table_rows(page, "slowest")
    assert {r["capture"] for r in slowest} == {"kafka-4-mixed.pcapng", "kafka-4-mixed-again.pcapng"}
    captures = table_rows(page, "captures")
    assert [r["capture"] for r in captures] == [
        "kafka-4-mixed.pcapng",
        "kafka-4-mixed-again.pcapng",
    ]
    assert [r["rows"] for r in captures] == ["427", "427"]
    text = " ".join(" ".join(page.text).split())
    assert "charts over time show kafka-4-mixed.pcapng alone" in text
    single = parse(pages["bundled"].read_text(encoding="utf-8"))
    assert "capture" not in table_rows(single, "slowest")[0]
    assert "table-captures" not in single.tables


def test_tables_sort_when_a_header_is_clicked(
    browser: str, pages: dict[str, Path], bundled_df: pd.DataFrame
) -> None:
    # per-api column 11 is "bytes in": cells mix B and KiB, so sorting their text would be
    # wrong; column 0 is the API name (text).
    header = parse(pages["bundled"].read_text(encoding="utf-8")).tables["table-per-api"][0]
    assert header[11] == "bytes in" and header[0] == "API"
    # a long table starts folded (<details>) under its heading
    scripts = [("#table-per-api + details table", [11]), ("#table-per-api + details table", [0])]
    results, _, _ = _in_browser(
        browser, pages["bundled"], 1400, [(SORT_PROBE, list(a)) for a in scripts]
    )
    numbers, names = results
    assert numbers["first"] == sorted(numbers["first"])
    assert numbers["second"] == sorted(numbers["first"], reverse=True)
    # The largest request bytes of any API and version, from the raw column.
    sizes = bundled_df.groupby(["api_name", "api_version"], dropna=False)["request_size"].sum()
    assert numbers["second"][0] == float(sizes.max())
    assert names["first"] == sorted(names["first"], key=str.casefold)  # as a reader sorts
    assert names["sort"] == "descending"


@pytest.mark.parametrize("width", [800, 1400, 1920])
def test_trouble_leads_and_the_page_fits_the_window(
    browser: str, pages: dict[str, Path], width: int
) -> None:
    """At every width the Trouble section follows the overview, its first table is in
    the first screens, long lists start folded, and nothing widens the page itself (a
    wide table scrolls inside its own box)."""
    (layout, heading), inner, shot = _in_browser(
        browser, pages["bundled"], width, [(LAYOUT_PROBE, []), (HEADING_PROBE, ["#trouble h2"])]
    )
    assert layout["page"] <= layout["inner"] == inner
    # The screenshot (the first screen, as a reader opens the page) shows the Trouble
    # heading: its box is inside the shot and holds dark text on the light page.
    pixels = plt_imread(shot)
    assert pixels.shape[1] >= inner
    assert _ink(pixels, heading) > 0.05, heading
    assert 0 <= layout["trouble"] - layout["overviewBottom"] < 60
    assert layout["troubleErrors"] < {800: 2000, 1400: 1000, 1920: 1000}[width]
    assert layout["troubleErrors"] < layout["errors"]
    assert layout["folded"] >= 3  # API versions seen, per API, versions...


@pytest.fixture(scope="module")
def no_kafka_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the bundled TLS capture without its keys: no Kafka pair."""
    capture = BUNDLED.parent / "tls-on-kafka-port.pcapng"
    path = tmp_path_factory.mktemp("reports") / "no-kafka.html"
    report.write_report(report.analyze([capture]), path)
    return path


@pytest.mark.parametrize("width", [800, 1400, 1920])
def test_no_kafka_page_is_one_screen_saying_why(
    browser: str, no_kafka_page: Path, width: int
) -> None:
    """A capture without Kafka gets one short page: no chart frames, no empty tables, the
    sentence saying what the capture held on the first screen (in the screenshot)."""
    (page, sentence), inner, shot = _in_browser(
        browser, no_kafka_page, width, [(NO_KAFKA_PROBE, []), (HEADING_PROBE, ["#overview p"])]
    )
    assert page["page"] <= page["inner"] == inner
    assert page["images"] == 0 and page["sections"] == ["overview", "capture"]
    assert page["height"] <= 1000  # the window's height: nothing to scroll for
    text = " ".join(page["text"].split())
    assert "No Kafka in this capture" in text
    assert "TLS on 2 connection directions without its session keys" in text
    assert "--tls-keylog" in sentence["text"]
    assert _ink(plt_imread(shot), sentence) > 0.03, sentence
