"""The HTML report, checked as a reader would see it.

The page is parsed (sections, charts, tables), opened in headless Chromium (a
screenshot, and the DOM through chromedriver: every section shown, every chart
drawn by the browser), and its facts are compared with the bundled capture's
README (the drivers' ledger and tshark), not with the report's own numbers.
"""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import dissector
from dissector.analytics import charts, plots, report
from dissector.analytics.lag import lag_at_end
from dissector.cli import main
from dissector.table.frame import records_to_frame
from tests.oracle.rows import PairRecord

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"
EXAMPLE = REPO / "reports" / "kafka-4-mixed.html"
CHART_IDS = tuple(charts.CHARTS)
EXAMPLE_COMMAND = (
    "kafka-dissector report captures/kafka-4-mixed.pcapng -o reports/kafka-4-mixed.html"
)

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Page(HTMLParser):
    """What a page is made of: section ids, images, inline SVG charts, tables and their
    text."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[dict[str, str]] = []
        self.charts: list[dict[str, str]] = []
        self.external: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self._table: str | None = None
        self._last_h3: str | None = None
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag == "img":
            self.images.append(a)
        if tag == "svg" and "chart" in a.get("class", "").split():
            self.charts.append(a)
        if tag == "script":
            self._in_script = True
            if a.get("src"):
                self.external.append(a["src"])
        for attr in ("src", "href"):
            value = a.get(attr, "")
            if value and not value.startswith(("data:", "#")):
                self.external.append(value)
        if tag == "h3":
            self._last_h3 = a.get("id", "")
        if tag == "table":
            self._table = self._last_h3 or f"table{len(self.tables)}"
            self.tables[self._table] = []
        if tag == "tr" and self._table:
            self._row = []
        if tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        if tag == "table":
            self._table = None
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if not self._in_script:
            self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def table_rows(page: Page, table_id: str) -> list[dict[str, str]]:
    rows = page.tables[f"table-{table_id}"]
    header, body = rows[0], rows[1:]
    return [dict(zip(header, r, strict=True)) for r in body]


@pytest.fixture(scope="module")
def bundled_df() -> pd.DataFrame:
    if not BUNDLED.is_file():
        pytest.skip(f"bundled capture missing: {BUNDLED}")
    return report.analyze([BUNDLED])


@pytest.fixture(scope="module")
def bundled_html(
    bundled_df: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("report") / "kafka-4-mixed.html"
    report.write_report(bundled_df, path)
    return path, path.read_text(encoding="utf-8")


# -- structure --------------------------------------------------------------------


def test_report_has_every_section_and_inline_svg_charts(bundled_html: tuple[Path, str]) -> None:
    page = parse(bundled_html[1])
    assert page.sections == list(report.SECTION_IDS)
    assert page.images == []  # no raster images: every chart is inline SVG
    figures = chart_svgs(bundled_html[1])
    assert list(figures) == [c for c in report_chart_order()] and len(figures) == len(CHART_IDS)
    for chart_id, root in figures.items():
        width, height = (float(v) for v in root.get("viewBox", "").split()[2:])
        assert width >= 500 and height >= 250, chart_id
        assert root.get("aria-label"), chart_id  # what a screen reader says of it
        words = " ".join(t.text or "" for t in root.iter(SVG + "text"))
        assert any(w in words for w in UNIT_WORDS), (chart_id, words)
        # drawn, not an empty frame: series groups, each with a shape
        groups = [g for g in root.iter(SVG + "g") if g.get("class") == "series"]
        assert groups, chart_id
        assert all(len(list(g)) for g in groups), chart_id
        assert "url(" not in ET.tostring(root, encoding="unicode")


SVG = "{http://www.w3.org/2000/svg}"


def report_chart_order() -> list[str]:
    """Chart ids in the page's order (sections in order, charts in each)."""
    order = ["latency-cdf", "latency-time", "latency-percentiles", "broker-api", "traffic",
             "throttle", "connections", "errors", "error-timeline", "groups", "sizes"]  # fmt: skip
    assert sorted(order) == sorted(CHART_IDS)
    return order


def chart_svgs(html: str) -> dict[str, ET.Element]:
    """Each ``<figure id="chart-ID">``'s SVG, parsed as XML (a browser is lenient; an
    XML parser is not, so a malformed chart fails here)."""
    found = re.findall(r'<figure id="chart-([^"]+)">\s*(<svg\b.*?</svg>)', html, re.S)
    return {chart_id: ET.fromstring(svg) for chart_id, svg in found}


def _distinct_colours(rgb: np.ndarray) -> int:
    packed = (rgb * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    return len(np.unique(packed))


def plt_imread(png: bytes) -> np.ndarray:
    from matplotlib import image

    return image.imread(io.BytesIO(png), format="png")


def test_report_is_self_contained(bundled_html: tuple[Path, str]) -> None:
    html = bundled_html[1]
    page = parse(html)
    assert page.external == []
    assert "<link" not in html and "@import" not in html and "url(" not in html


# -- facts, against the capture's README (ledger + tshark) --------------------------


def test_report_facts_match_the_capture_readme(bundled_html: tuple[Path, str]) -> None:
    page = parse(bundled_html[1])
    text = " ".join(page.text)
    # tshark: 100 TCP connections; PLAINTEXT 9092 and SASL_PLAINTEXT 9094.
    assert "TCP connections 100" in " ".join(text.split())
    assert "127.0.0.1:9092" in text and "127.0.0.1:9094" in text
    # Broker: Apache Kafka 4.4.0; the report may only claim a release not newer.
    claims = re.findall(r"is (newer than )?Apache Kafka (\d+)\.(\d+)", text)
    assert claims
    for newer, major, minor in claims:
        assert (int(major), int(minor)) <= ((4, 3) if newer else (4, 4))
    # Errors the clients provoked and reported themselves (README ledger table).
    errors = {row["error"]: row for row in table_rows(page, "top-errors")}
    for name, api in [
        ("TOPIC_ALREADY_EXISTS", "CreateTopics"),
        ("SASL_AUTHENTICATION_FAILED", "SaslAuthenticate"),
        ("UNKNOWN_TOPIC_OR_PARTITION", "Metadata"),
        ("OFFSET_OUT_OF_RANGE", "Fetch"),
        ("UNSUPPORTED_VERSION", "ApiVersions"),
    ]:
        assert api in errors[name]["APIs"]
    # Client versions the ledger lists (the clients' own version strings).
    assert "apache-kafka-java 4.3.1" in text
    assert "confluent-kafka-python 2.16.1-rdkafka-2.16.0" in text
    assert "kafka-python 3.0.12" in text
    # kafka-python's Produce v2: Kafka 4 dropped it and never answered.
    missing = table_rows(page, "unanswered")
    assert any(r["API"] == "Produce" and r["v"] == "2" for r in missing)
    # tshark request counts per API (complete), summed over versions in the table.
    per_api: dict[str, int] = {}
    for row in table_rows(page, "per-api"):
        per_api[row["API"]] = per_api.get(row["API"], 0) + int(row["requests"].replace(",", ""))
    assert per_api["ApiVersions"] == 100
    assert per_api["Metadata"] == 83
    assert per_api["FindCoordinator"] == 31
    assert per_api["ShareGroupHeartbeat"] == 3


def test_slowest_table_is_sorted(bundled_html: tuple[Path, str], bundled_df: pd.DataFrame) -> None:
    # ranked by service time (latency less a long poll's wait): the first of each cell
    rows = table_rows(parse(bundled_html[1]), "slowest")
    shown = [float(r["service / latency ms"].split(" / ")[0].replace(",", "")) for r in rows]
    assert len(rows) == report.SLOWEST_N
    assert shown == sorted(shown, reverse=True)
    top = float(bundled_df["service_ms"].astype("float64").max())
    assert shown[0] == pytest.approx(top, rel=0.01)


def test_report_analysis_equals_the_library_analysis(bundled_df: pd.DataFrame) -> None:
    plain = dissector.analyze(BUNDLED)
    pd.testing.assert_frame_equal(
        bundled_df.reset_index(drop=True), plain.reset_index(drop=True), check_like=False
    )
    assert bundled_df.attrs["counters"] == plain.attrs["counters"]
    software = bundled_df.attrs[report.CLIENT_SOFTWARE_ATTR]
    # Every confluent-kafka client id of the ledger that sent ApiVersions v3+.
    assert "mix-cfk-admin" in software["confluent-kafka-python 2.16.1-rdkafka-2.16.0"]
    assert "mix-java-share-admin" in software["apache-kafka-java 4.3.1"]
    # aiokafka sends ApiVersions v0, which names no software.
    assert not any(c.startswith("mix-aio-") for cs in software.values() for c in cs)


def test_groups_match_the_ledger_and_tshark(bundled_df: pd.DataFrame, tshark: str) -> None:
    groups = bundled_df.attrs[report.GROUPS_ATTR]
    # captures/README.md, "Records delivered to the application, per consuming group".
    assert {g: n["protocol"] for g, n in groups.items()} == {
        "mix-group-classic": "classic",
        "mix-group-consumer": "consumer",
        "mix-group-scram": "classic",
        "mix-kp-group": "classic",
        "mix-kp-old-group": "classic",
        "mix-aio-group": "classic",
        "mix-share-group": "share",
    }
    # tshark decodes JoinGroup: each response follows its request on the same stream.
    out = subprocess.run(
        [tshark, "-r", str(BUNDLED), "-d", "tcp.port==9094,kafka", "-d", "tcp.port==9092,kafka",
         "-Y", "kafka.api_key == 11", "-T", "fields", "-e", "tcp.stream",
         "-e", "kafka.consumer_group", "-e", "kafka.generation_id", "-e", "kafka.error"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    pending: dict[str, str] = {}
    expected: dict[str, set[int]] = {}
    for line in out.splitlines():
        stream, group, generation, error = [*line.split("\t"), "", "", ""][:4]
        if group:
            pending[stream] = group
        elif generation and stream in pending:
            target = expected.setdefault(pending.pop(stream), set())
            if error == "0" and int(generation) >= 0:
                target.add(int(generation))
    classic = {g: set(n["generations"]) for g, n in groups.items() if n["protocol"] == "classic"}
    assert classic == expected
    assert expected["mix-kp-group"] == {1, 2}  # kafka-python rejoined once
    joins = {g: n["calls"].get("JoinGroup", 0) for g, n in groups.items()}
    assert sum(joins.values()) == 11  # tshark: 11 JoinGroup requests
    page = parse(report.render(bundled_df))
    rows = {r["group id"]: r for r in table_rows(page, "groups")}
    assert rows["mix-kp-group"]["rebalances completed"] == "2"
    assert rows["mix-share-group"]["protocol"] == "share"


def test_note_group_call_rules() -> None:
    from types import SimpleNamespace as D

    from dissector.protocol.notes import GroupNote, note_group_call

    groups: dict[str, GroupNote] = {}
    note = note_group_call
    note(
        groups,
        11,
        "JoinGroup",
        D(body={"group_id": "g", "member_id": ""}),
        D(body={"error_code": 79, "generation_id": -1, "member_id": "m1"}),
    )
    note(
        groups,
        11,
        "JoinGroup",
        D(body={"group_id": "g", "member_id": "m1"}),
        D(body={"error_code": 0, "generation_id": 7, "member_id": "m1"}),
    )
    note(
        groups,
        13,
        "LeaveGroup",
        D(body={"group_id": "g", "members": [{"member_id": "m2"}]}),
        D(body={"error_code": 0}),
    )
    note(
        groups,
        76,
        "ShareGroupHeartbeat",
        D(body={"group_id": "s", "member_epoch": 0}),
        D(body={"error_code": 0, "member_epoch": 3, "member_id": "x"}),
    )
    note(
        groups,
        76,
        "ShareGroupHeartbeat",
        D(body={"group_id": "s", "member_epoch": -1}),
        D(body={"error_code": 0, "member_epoch": -1}),
    )
    note(groups, 12, "Heartbeat", D(body=None), None)  # undecodable: nothing to note
    note(groups, 3, "Metadata", D(body={"group_id": "nope"}), None)  # not membership
    assert groups["g"].as_dict() == {
        "protocol": "classic",
        "members": 2,
        "generations": [7],
        "calls": {"JoinGroup": 2, "LeaveGroup": 1},
        "errors": 1,
    }
    assert groups["s"].as_dict()["generations"] == [3]
    assert set(groups) == {"g", "s"}
    # Without report.analyze, the table says how to get it rather than showing nothing.
    page = parse(report.render(records_to_frame([_record("c")])))
    assert "Not collected" in " ".join(page.text)


# -- robustness -------------------------------------------------------------------


def _record(client_id: str | None, **kw: object) -> PairRecord:
    base: dict[str, object] = dict(
        capture="x.pcap", stream=0, client_ip="127.0.0.1", client_port=5000,
        broker_ip="127.0.0.1", broker_port=9092, request_time=1_700_000_000_000_000_000,
        response_time=1_700_000_000_001_000_000, latency_ms=1.0, first_byte_ms=1.0,
        api_key=3, api_name="Metadata", api_version=12, correlation_id=1,
        client_id=client_id, request_size=40, response_size=80, status="ok",
    )  # fmt: skip
    base.update(kw)
    return PairRecord(**base)  # type: ignore[arg-type]


def test_hostile_strings_are_escaped() -> None:
    evil = '<script>alert("x")</script><img src=http://example.invalid/x>'
    df = records_to_frame([_record(evil, topics=[evil])])
    html = report.render(df)
    page = parse(html)
    assert page.external == []
    # The page's own script (table sorting) is its only one.
    assert html.count("<script") == 1 and "<script>alert" not in html
    # Table cells hold <wbr> break hints, which split the text into pieces.
    assert evil in "".join(page.text)


def test_orphans_and_missing_clients_are_named_for_what_they_are() -> None:
    orphan = _record(
        None, api_key=None, api_name=None, api_version=None, request_time=None,
        latency_ms=None, first_byte_ms=None, request_size=None, status="orphan_response",
    )  # fmt: skip
    nameless = _record(None, correlation_id=2)
    df = records_to_frame([orphan, nameless])
    df.attrs["tls_streams"] = [0]
    page = parse(report.render(df))
    label = "orphan response (request not captured)"
    assert [r["API"] for r in table_rows(page, "per-api")] == ["Metadata", label]
    clients = {r["client id"] for r in table_rows(page, "per-client")}
    assert clients == {label, "(none)"}
    text = " ".join(" ".join(page.text).split())
    # Stream 0 is a stream's index, not a count of streams.
    assert "TLS (not decoded) 1 connection (tcp.stream 0)" in text


def test_capture_without_kafka_names_itself_and_its_connections() -> None:
    # captures/README.md: one TLS 1.3 connection on port 9096 (tshark), no Kafka rows.
    path = REPO / "captures" / "tls-on-kafka-port.pcapng"
    if not path.is_file():
        pytest.skip(f"capture missing: {path}")
    df = report.analyze([path])
    assert len(df) == 0
    page = parse(report.render(df))
    text = " ".join(" ".join(page.text).split())
    assert "no capture" not in text
    assert "capture files " + str(path) in text
    assert "Kafka traffic report: tls-on-kafka-port.pcapng" in text
    # one page saying why, not empty charts
    assert page.sections == list(report.NO_KAFKA_SECTION_IDS) and not page.charts
    assert "No Kafka found: the capture held 1 TCP connection; TLS on 2 connection" in text
    assert "TLS (not decoded) 1 connection (tcp.stream 0)" in text


def test_empty_input_is_the_no_kafka_page_tiny_renders_every_section() -> None:
    page = parse(report.render(records_to_frame([])))
    assert page.sections == list(report.NO_KAFKA_SECTION_IDS) and not page.charts
    assert "No Kafka found: the capture held no packets" in " ".join(page.text)
    page = parse(report.render(records_to_frame([_record("only-one")])))
    assert page.sections == list(report.SECTION_IDS)
    assert len(page.charts) == len(CHART_IDS)


def test_cli_writes_report_and_rejects_bad_input(tmp_path: Path) -> None:
    if not BUNDLED.is_file():
        pytest.skip(f"bundled capture missing: {BUNDLED}")
    runner = CliRunner()
    out = tmp_path / "sub" / "r.html"
    result = runner.invoke(main, ["report", str(BUNDLED), "-o", str(out), "--title", "T <1>"])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "wrote" in result.output
    page = parse(out.read_text(encoding="utf-8"))
    assert "T <1>" in page.text
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    result = runner.invoke(main, ["report", str(bad), "-o", str(tmp_path / "b.html")])
    assert result.exit_code != 0
    assert "not a pcap" in result.output
    assert not (tmp_path / "b.html").exists()
    result = runner.invoke(main, ["report", str(BUNDLED), "--ports", "http"])
    assert result.exit_code != 0 and "ports" in result.output


# -- the example report in reports/ ---------------------------------------------


def test_example_report_is_generated_by_the_documented_command() -> None:
    if not EXAMPLE.is_file():
        pytest.fail(f"missing example report; run: {EXAMPLE_COMMAND}")
    html = EXAMPLE.read_text(encoding="utf-8")
    page = parse(html)
    assert page.sections == list(report.SECTION_IDS)
    assert len(page.charts) == len(CHART_IDS) and page.external == []
    # The footer names the command that wrote it; a hand edit would not keep it.
    assert f"<code>{EXAMPLE_COMMAND}</code>" in html


# -- in a real browser ----------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (apt-get install chromium chromium-driver)")


def test_chromium_screenshot_shows_a_page(bundled_html: tuple[Path, str], tmp_path: Path) -> None:
    browser = _chromium()
    shot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, *CHROMIUM_ARGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
             "--window-size=1280,4000", bundled_html[0].as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    pixels = plt_imread(shot.read_bytes())
    assert pixels.shape[:2] == (4000, 1280)
    flat = pixels[..., :3].reshape(-1, 3)
    # The dark header band, the charts' colours and text: far from a blank page.
    assert (flat.sum(axis=1) < 0.5).mean() > 0.005
    assert _distinct_colours(flat) > 500
    top = pixels[:40, :, :3]
    assert top.mean() < 0.3  # the header band is dark


@contextlib.contextmanager
def _webdriver(timeout_s: float = 20.0) -> Iterator[str]:
    driver = shutil.which("chromedriver")
    if driver is None:
        pytest.skip("chromedriver is not installed (apt-get install chromium-driver)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if _call(base + "/status")["value"].get("ready"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("chromedriver did not become ready")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _call(url: str, payload: object = None, method: str | None = None) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        url, data=data, method=method or ("POST" if data else "GET"),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


DOM_PROBE = """
const sections = [...document.querySelectorAll('section')].map(s => ({
  id: s.id, height: s.getBoundingClientRect().height,
  title: s.querySelector('h2') ? s.querySelector('h2').textContent : ''}));
const charts = [...document.querySelectorAll('svg.chart')].map(c => ({
  width: c.getBoundingClientRect().width, height: c.getBoundingClientRect().height,
  texts: c.querySelectorAll('text').length}));
const images = document.images.length;
const links = [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'));
return {sections, charts, images, links, title: document.title,
        width: document.documentElement.scrollWidth};
"""


def test_browser_renders_every_section_and_draws_every_chart(
    bundled_html: tuple[Path, str],
) -> None:
    _chromium()
    with tempfile.TemporaryDirectory() as profile, _webdriver() as base:
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "args": [*CHROMIUM_ARGS, f"--user-data-dir={profile}",
                                 "--window-size=1280,1000"],
                    },
                }
            }
        }  # fmt: skip
        session = _call(base + "/session", caps)["value"]["sessionId"]
        url = f"{base}/session/{session}"
        try:
            _call(url + "/url", {"url": bundled_html[0].as_uri()})
            dom = _call(url + "/execute/sync", {"script": DOM_PROBE, "args": []})["value"]
            shot = base64.b64decode(_call(url + "/screenshot")["value"])
        finally:
            _call(url, method="DELETE")
    assert [s["id"] for s in dom["sections"]] == list(report.SECTION_IDS)
    assert all(s["height"] > 50 and s["title"] for s in dom["sections"])
    assert dom["images"] == 0 and len(dom["charts"]) == len(CHART_IDS)
    for chart in dom["charts"]:
        assert chart["width"] > 300 and chart["height"] > 150 and chart["texts"] > 5
    assert dom["links"] == [f"#{s}" for s in report.SECTION_IDS]
    assert dom["title"].startswith("Kafka traffic report")
    # The page fits the window: wide tables scroll inside their box.
    assert dom["width"] <= 1280
    assert plt_imread(shot).shape[1] == 1280


# -- the charts themselves --------------------------------------------------------

UNIT_WORDS = ("ms", "bytes", "per second", "seconds since", "rows", "fraction", "B ")


def test_every_chart_fits_its_figure(bundled_df: pd.DataFrame) -> None:
    """Charts are saved at their figure's size (no "tight" bounding box, which draws each
    twice): nothing drawn may lie outside the figure, or the PNG would clip it. Also a
    capture with one broker (the narrowest heat map)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dissector.analytics import plots

    one_broker = report.analyze([REPO / "captures" / "heuristic-port-19192.pcapng"])
    for chart_id, draw, df in [
        (chart_id, draw, df)
        for df in (bundled_df, one_broker)
        for chart_id, (_, draw) in plots.CHARTS.items()
    ]:
        fig = draw(df)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        drawn, size = fig.get_tightbbox(canvas.get_renderer()), fig.bbox_inches
        assert drawn.x0 >= 0 and drawn.y0 >= 0, (chart_id, drawn)
        assert drawn.x1 <= size.x1 and drawn.y1 <= size.y1, (chart_id, drawn, size)


def test_every_chart_has_titles_units_and_legends(bundled_df: pd.DataFrame) -> None:
    from dissector.analytics import plots

    for chart_id, (title, draw) in plots.CHARTS.items():
        fig = draw(bundled_df)
        axes = [ax for ax in fig.axes if ax.axison]
        assert axes, chart_id
        assert any(ax.get_title() for ax in axes), chart_id
        for ax in axes:
            labels = f"{ax.get_xlabel()} {ax.get_ylabel()} {ax.get_title()}"
            assert any(w in labels for w in UNIT_WORDS), (chart_id, labels)
        series = sum(len(ax.get_legend_handles_labels()[0]) for ax in axes)
        legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
        if series > 1 and chart_id != "sizes":
            assert legends, chart_id
        assert title  # the report's caption heading
    # The same API has the same colour in every chart of a report.
    colors = plots.api_colors(["Produce", "Fetch", "Metadata"])
    assert plots.api_colors(["Produce", "Fetch", "Metadata"]) == colors
    assert len(set(map(str, colors.values()))) == len(colors)
    from matplotlib.colors import to_hex

    many = plots.api_colors([f"api{i}" for i in range(50)])  # the 12 error APIs and more
    assert len({to_hex(c) for c in many.values()}) == len(many)


def test_group_chart_marks_rebalances() -> None:
    from dissector.analytics import plots

    recs = [
        _record("m1", api_key=11, api_name="JoinGroup", api_version=9),
        _record(
            "m2", api_key=12, api_name="Heartbeat", api_version=4, status="error",
            error_code=27, error_name="REBALANCE_IN_PROGRESS",
            request_time=1_700_000_002_000_000_000, response_time=1_700_000_002_001_000_000,
        ),
    ]  # fmt: skip
    fig = plots.group_activity(records_to_frame(recs))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert {"join", "heartbeat", "rebalance in progress"} <= set(labels)


def _tick_texts(fig: object) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # type: ignore[arg-type]
    texts = []
    for ax in fig.axes:  # type: ignore[attr-defined]
        for axis in (ax.xaxis, ax.yaxis):
            ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
            texts += [t.label1.get_text() for t in ticks if t.label1.get_visible()]
    return [t for t in texts if t]


def test_log_axes_over_narrow_ranges_have_plain_separate_labels() -> None:
    # Latencies between 27.3 and 27.7 ms, sizes between 27 and 28 bytes: less than a decade.
    recs = [
        _record("c", correlation_id=i, latency_ms=27.3 + i * 0.1, request_size=27 + i % 2,
                response_size=27 + i % 2, response_time=1_700_000_000_000_000_000 + i)
        for i in range(5)
    ]  # fmt: skip
    df = records_to_frame(recs)
    for draw in (plots.latency_cdf, plots.latency_over_time, plots.size_distributions):
        fig = draw(df)
        texts = _tick_texts(fig)
        assert texts, draw.__name__
        assert not [t for t in texts if "10^" in t or "times" in t or "×" in t], texts
        # Labels of one axis never overlap: their boxes are apart.
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                boxes = sorted(
                    (t.label1.get_window_extent() for t in axis.get_major_ticks()
                     if t.label1.get_visible() and t.label1.get_text()),
                    key=lambda b: (b.x0, b.y0),
                )  # fmt: skip
                for a, b in itertools.pairwise(boxes):
                    assert not a.overlaps(b), (draw.__name__, texts)
    assert plots.plain_number(27.4) == "27.4" and plots.plain_number(1e5) == "100,000"
    assert plots.plain_number(0.001) == "0.001"


def test_latency_over_time_colours_the_slowest_apis_and_marks_errors() -> None:
    t0 = 1_700_000_000_000_000_000
    busy = [_record("c", correlation_id=i, api_name=f"Busy{i % 10}", request_time=t0 + i,
                    response_time=t0 + i + 1_000_000) for i in range(200)]  # fmt: skip
    slow = _record("c", correlation_id=999, api_key=29, api_name="DescribeAcls",
                   latency_ms=2000.0, request_time=t0, response_time=t0 + 2 * 10**9)  # fmt: skip
    failed = _record("c", correlation_id=1000, status="error", error_code=15,
                     error_name="COORDINATOR_NOT_AVAILABLE")  # fmt: skip
    df = records_to_frame([*busy, slow, failed])
    labels = plots.latency_over_time(df).axes[0].get_legend_handles_labels()[1]
    # The rarest API is the slowest: it gets a colour of its own, not 'other'.
    assert "DescribeAcls" in labels
    assert "error (1)" in labels


def test_low_volume_long_capture_rates_are_per_hour_everywhere() -> None:
    # 6 requests over 5 hours: per second would read 0.00 everywhere.
    recs = [
        _record("c", correlation_id=i, request_time=(1_700_000_000 + 3600 * i) * 10**9,
                response_time=(1_700_000_000 + 3600 * i) * 10**9 + 10**6)
        for i in range(6)
    ]  # fmt: skip
    df = records_to_frame(recs)
    page = parse(report.render(df))
    per_api = table_rows(page, "per-api")
    assert per_api[0]["per h"] == "1.20"  # 6 requests / 5 h
    text = " ".join(page.text)
    assert "Requests per hour stacked by API" in text
    top = plots.traffic_over_time(df).axes[0]
    assert top.get_ylabel() == "requests per hour"
    assert "0.00" not in [c for r in per_api for c in r.values()]


# -- partitions and versions ----------------------------------------------------


def _ledger_produced() -> dict[str, int]:
    """Records each topic's producers had acknowledged, as the drivers' ledger says."""
    ledger = json.loads((REPO / "captures" / "kafka-4-mixed.drivers.json").read_text())
    out: dict[str, int] = {}
    for driver in ledger["drivers"]:
        for op in driver["operations"]:
            if "Produce" in op["apis"] and op["records"]:
                out[op["topic"]] = out.get(op["topic"], 0) + op["records"]
    return out


def test_partition_section_of_captures_without_partition_rows(bundled_df: pd.DataFrame) -> None:
    """Pairs but no Produce/Fetch/offset API (a capture of group calls only): the
    partitions table is empty, each of the section's tables says so."""
    import dataclasses

    tables = bundled_df.attrs[report.TABLES_ATTR].arrow
    empty = dataclasses.replace(tables, partitions=tables.partitions.slice(0, 0))
    df = bundled_df.copy()
    df.attrs = {**bundled_df.attrs, report.TABLES_ATTR: report.AnalyticsTables(empty)}
    blocks = report.sections._partitions(df).blocks
    assert [getattr(b, "rows", None) for b in blocks] == [(), (), ()]
    assert [getattr(b, "empty", None) for b in blocks] == [
        "No Produce or Fetch records in this capture.",
        report.NO_GROUP_OFFSETS,
        "No batch both produced and fetched in this capture.",
    ]


def test_partition_section_matches_the_ledger_and_the_library(
    bundled_html: tuple[Path, str], bundled_df: pd.DataFrame
) -> None:
    page = parse(bundled_html[1])
    assert page.sections[page.sections.index("topics") + 1 : -2] == ["partitions", "versions"]
    rows = table_rows(page, "partition-throughput")
    produced: dict[str, int] = {}
    for r in rows:
        if r["side"] == "producer":
            produced[r["topic"]] = produced.get(r["topic"], 0) + int(r["records"].replace(",", ""))
    assert produced == _ledger_produced()
    # The consumer side and the lag table are the library's tables, summarised.
    parts = dissector.partitions(BUNDLED)
    thr = dissector.analytics.partitions.throughput(parts)
    fetched = thr[thr["role"] == "fetch"].groupby("topic")["records"].sum().to_dict()
    consumed: dict[str, int] = {}
    for r in rows:
        if r["side"] == "consumer":
            consumed[r["topic"]] = consumed.get(r["topic"], 0) + int(r["records"].replace(",", ""))
    assert consumed == {k: int(v) for k, v in fetched.items()} and consumed
    # The lag table is lag_at_end at the end of the capture (its last pair), largest
    # lag first and unknown lag last.
    ends = bundled_df[["request_time", "response_time"]].max(axis=1).max()
    lag = lag_at_end(parts, end={str(BUNDLED): ends})
    lag_rows = table_rows(page, "consumer-lag")
    assert len(lag_rows) == len(lag) > 0
    shown = [r["lag (offsets)"] for r in lag_rows]
    known = [int(v.replace(",", "")) for v in shown if v != "–"]
    assert known == sorted(known, reverse=True) and known[0] > 0
    assert shown[len(known) :] == ["–"] * (len(shown) - len(known))
    cells = {(r["group id"], r["topic"], r["partition"]): r for r in lag_rows}
    assert len(cells) == len(lag_rows)
    for row in lag.itertuples():
        cell = cells[(row.group_id, row.topic, report.fmt_int(row.partition))]
        assert cell["lag (offsets)"] == report.fmt_int(row.lag)
        assert cell["time lag ms"] == report.fmt_ms(row.time_lag_ms)
        assert cell["committed"] == report.fmt_int(row.committed_offset)
        assert cell["log end"] == report.fmt_int(row.log_end_offset)
        # Both measures' ages: the committed lag's inputs and the position's Fetch.
        assert cell["commit age ms"] == report.fmt_ms(row.committed_age_ms)
        assert cell["log-end age ms"] == report.fmt_ms(row.log_end_age_ms)
        assert cell["position lag"] == report.fmt_int(row.position_lag)
        assert cell["fetch age ms"] == report.fmt_ms(row.position_age_ms)
    assert any(r["log-end age ms"] != "–" for r in lag_rows)
    p2f = dissector.analytics.partitions.produce_to_fetch(parts)
    p2f_rows = {r["topic"]: r for r in table_rows(page, "produce-to-fetch")}
    assert set(p2f_rows) == set(p2f["topic"])
    for topic, g in p2f.groupby("topic"):
        assert int(p2f_rows[topic]["batches delivered"]) == len(g)
        assert p2f_rows[topic]["max ms"] == report.fmt_ms(g["latency_ms"].max())


def test_versions_section_lists_each_clients_versions(
    bundled_html: tuple[Path, str], bundled_df: pd.DataFrame
) -> None:
    page = parse(bundled_html[1])
    rows = table_rows(page, "version-skew")
    shown = {(r["client id"], r["API"]): r["versions used"] for r in rows}
    v = dissector.versions(BUNDLED)
    expected: dict[tuple[str, str], set[int]] = {}
    for r in v.itertuples():
        key = (r.client_id if isinstance(r.client_id, str) else "–", r.api_name)
        expected.setdefault(key, set()).update(int(x) for x in r.versions_used)
    assert set(shown) == set(expected)
    for key, used in expected.items():
        assert shown[key] == ", ".join(map(str, sorted(used)))
    # README: the raw socket's ApiVersions request used a version the broker refused
    # (UNSUPPORTED_VERSION): outside the range it advertised, and beyond the specs.
    flagged = [r for r in rows if r["flag"] != "–"]
    assert rows[: len(flagged)] == flagged  # flagged rows first
    raw = [r for r in flagged if r["API"] == "ApiVersions" and "outside" in r["flag"]]
    assert len(raw) == 1 and "unknown to the specs" in raw[0]["flag"]
    refused = bundled_df[bundled_df["error_name"].astype("object").eq("UNSUPPORTED_VERSION")]
    assert raw[0]["client id"] in set(refused["client_id"].astype("object"))


def test_capture_without_produce_or_fetch_says_none() -> None:
    # captures/README.md: no Produce or Fetch; ApiVersions v3x1 and v5x2, all known to
    # the shipped specs (Kafka 4.4).
    path = REPO / "captures" / "heuristic-port-19192.pcapng"
    if not path.is_file():
        pytest.skip(f"capture missing: {path}")
    page = parse(report.render(report.analyze([path])))
    text = " ".join(" ".join(page.text).split())
    assert "No Produce or Fetch records in this capture." in text
    assert "table-partition-throughput" not in page.tables
    api_versions = [r for r in table_rows(page, "version-skew") if r["API"] == "ApiVersions"]
    assert not [r for r in api_versions if "unknown to the specs" in r["flag"]]
    assert any("5" in r["versions used"].split(", ") for r in api_versions)
    assert sum(int(r["requests"]) for r in api_versions) == 3


def test_a_failing_capture_leaves_the_tables_of_the_others(tmp_path: Path) -> None:
    path = REPO / "captures" / "heuristic-port-19192.pcapng"
    if not path.is_file():
        pytest.skip(f"capture missing: {path}")
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    failures: list[tuple[str, str]] = []
    df = report.analyze([bad, path, path], failures=failures)
    assert [f[0] for f in failures] == [str(bad)]
    page = parse(report.render(df))
    one = dissector.versions(path)
    rows = table_rows(page, "version-skew")
    # The same capture twice: every request counted twice.
    assert sum(int(r["requests"]) for r in rows) == 2 * int(one["requests"].sum())
    # A frame not made by report.analyze has no tables: the sections say so.
    plain = parse(report.render(records_to_frame([_record("only-one")])))
    assert "table-version-skew" not in plain.tables
    # three partition tables, the version table and the groups table
    assert " ".join(plain.text).count(report.NOT_COLLECTED) == 5


def test_svg_and_png_charts_draw_the_same_set() -> None:
    """The report's SVG charts and the PNG ones (``plots``, for notebooks) are drawn for
    one list of ids and titles (``series.CHART_TITLES``): a chart added to one drawer
    and not the other would be silently left out of ``CHARTS``."""
    from dissector.analytics import charts, plots, series

    assert set(charts._DRAW) == set(series.CHART_TITLES) == set(plots._DRAW)
    assert list(charts.CHARTS) == list(plots.CHARTS) == list(series.CHART_TITLES)


def test_breakable_marks_a_break_after_each_underscore_and_slash() -> None:
    """Table text gets a break opportunity after each underscore and slash, its markup
    escaped (no break inside an entity) and its control characters written visibly."""
    from dissector.analytics.report.page import breakable

    assert str(breakable("SASL_AUTHENTICATION_FAILED")) == ("SASL_<wbr>AUTHENTICATION_<wbr>FAILED")
    assert str(breakable("a/b<c>&'_\x1b")) == "a/<wbr>b&lt;c&gt;&amp;&#39;_<wbr>\\x1b"
    assert str(breakable("__")) == "_<wbr>_<wbr>" and str(breakable("")) == ""


def test_produce_to_fetch_summary_is_each_topics_percentiles() -> None:
    """The produce-to-fetch table (every topic at once on arrays) holds, per capture and
    topic, what pandas gives for that topic's deliveries alone: their count, records,
    distinct consumers, Series.quantile percentiles and max, on a real capture with
    18 topics."""
    from dissector.analytics.partitions import produce_to_fetch
    from dissector.analytics.report.derived import P2F_INPUTS, carrying

    tables = report.analyze([BUNDLED]).attrs["tables"]
    parts = tables.partitions_of(P2F_INPUTS, rows=carrying(tables, "first_offset"))
    got = report.produce_to_fetch_summary(parts)
    p2f = produce_to_fetch(parts)
    assert len(got) == 18
    for row in got.itertuples(index=False):
        mine = p2f[(p2f["capture"] == row.capture) & (p2f["topic"] == row.topic)]
        latency = mine["latency_ms"].astype("float64").dropna()
        assert row.deliveries == len(mine) > 0
        assert row.records == int(mine["records"].fillna(0).sum())
        assert row.consumers == mine["consumer_client_id"].nunique(dropna=False)
        for q, value in ((0.5, row.p50_ms), (0.9, row.p90_ms), (0.99, row.p99_ms)):
            assert value == latency.quantile(q)
        assert row.max_ms == latency.max()
