"""Versions newer than the specs, decoded with the newest known layout (issue #13 §5).

The bundled capture holds real Kafka 4.4 ApiVersions v5 exchanges, the newest version
the shipped specs (Kafka 4.4) know. Specs that lag are made by taking v5 out of the
shipped set: the assumed-v4 decode must then agree field by field with the v5 decode
Apache's own spec gives. Real v5 exchanges relabelled v6 (a version no spec knows) fit
v5's layout and are decoded as v5; bytes that do not fit the newest layout exactly (a
response cut short or with a byte too many, the capture's hand-written v4-shaped v99
request when no broker refused it) keep ``unsupported_version``, in the native core and the
Python decoder alike. The capture's v99, which the broker refused (KIP-511), is
``version_refused``: no specs would decode it.
(tshark 4.0 on this machine does not know ApiVersions v5, so it cannot serve.)
"""

from __future__ import annotations

import copy
import json
import math
import struct
from pathlib import Path

import pandas as pd
import pytest
from test_cli_counters import Conversation, write_capture

import dissector
from dissector.analytics import stats
from dissector.analytics.summary_table import unsupported_rows as stats_unsupported
from dissector.options import Options
from dissector.protocol import get_registry, messages
from dissector.protocol.export import model_dict
from dissector.protocol.spec import REQUEST, RESPONSE
from dissector.table.frame import records_to_frame
from dissector.wire.core import iter_exchanges
from dissector.wire.full_decode import iter_decoded
from tests.oracle.pipeline import iter_pairs

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"
API_VERSIONS = 18


def _lagging_registry() -> messages.Registry:
    """The shipped specs without ApiVersions v5: a decoder one Kafka release behind."""
    specs = copy.deepcopy(get_registry().specs)
    for direction in (REQUEST, RESPONSE):
        del specs.layouts[(API_VERSIONS, direction)][5]
    return messages.Registry(specs)


@pytest.fixture(scope="module")
def installed() -> pd.DataFrame:
    return dissector.analyze(str(CAPTURE))


def _v5(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[(df["api_key"] == API_VERSIONS) & (df["api_version"] == 5)]
    return rows.set_index(["stream", "correlation_id"]).sort_index()


def test_the_rule_picks_the_newest_flexible_layout() -> None:
    reg = get_registry()
    newest = reg.specs.versions(API_VERSIONS, REQUEST)[-1]
    layout = messages.assumed_layout(reg, API_VERSIONS, newest + 1, REQUEST)
    assert layout is not None and layout.version == newest and layout.flexible
    assert messages.assumed_layout(reg, API_VERSIONS, newest, REQUEST) is None  # known
    # SaslHandshake never became flexible: a newer version stays unsupported
    sasl = reg.specs.versions(17, REQUEST)
    assert not reg.layout(17, sasl[-1], REQUEST).flexible
    assert messages.assumed_layout(reg, 17, sasl[-1] + 1, REQUEST) is None
    exported = {(k, d): v for k, d, v in model_dict(reg)["assumed_layouts"]}
    assert exported[(API_VERSIONS, REQUEST)] == newest
    assert exported[(API_VERSIONS, RESPONSE)] == reg.specs.versions(API_VERSIONS, RESPONSE)[-1]
    assert (17, REQUEST) not in exported


def _exchanges(version: int) -> list[tuple[bytes, bytes]]:
    """Real ApiVersions (request, response) payloads of ``version`` in the bundled capture."""
    out = []
    for _, ex in iter_exchanges([str(CAPTURE)], Options()):
        if ex.api_key == API_VERSIONS and ex.api_version == version and ex.response is not None:
            out.append((bytes(ex.request.payload), bytes(ex.response.payload)))
    assert out, f"no ApiVersions v{version} exchange in the bundled capture"
    return out


def test_kafka_4_4_v5_decodes_as_sent_and_the_v4_shaped_v99_is_refused(
    installed: pd.DataFrame,
) -> None:
    """The shipped specs know v5. The capture's deliberate v99 request is v4-shaped:
    KIP-1242 gave v5 requests two plain (untagged) fields, ClusterId and NodeId, which
    it lacks, so v5's layout does not fit. The broker refused v99 (error 35 in the v0
    layout, read here from the response bytes and the raw driver's ledger), so the row
    says version_refused, not unsupported_version: no newer specs would decode it."""
    v5 = _v5(installed)
    assert len(v5) == len(_exchanges(5)) > 0
    assert v5["assumed_version"].isna().all() and v5["decode_error"].isna().all()
    [v99] = installed[installed["api_version"] == 99].itertuples()
    assert pd.isna(v99.assumed_version)
    assert v99.decode_error == (
        "request: version_refused: api_key 18 version 99 is refused by the broker too "
        "(error 35 answered in the v0 layout, KIP-511): it reads no body of it, nor does the "
        "dissector"
    )
    assert v99.status == "error" and v99.error_name == "UNSUPPORTED_VERSION"
    assert not stats_unsupported(installed).any()
    [(request, response)] = _exchanges(99)
    assert struct.unpack_from(">h", response, 4) == (35,)  # the broker's own answer
    ledger = json.loads(CAPTURE.with_suffix(".drivers.json").read_text(encoding="utf-8"))
    refused = [
        op
        for driver in ledger["drivers"]
        for op in driver["operations"]
        if op["op"] == "api_versions_unsupported_version"
    ]
    assert [op["detail"]["response_error_code"] for op in refused] == [35]
    as_v4 = messages.decode_request(_relabelled(request, 4))
    assert as_v4.error is None and as_v4.trailing == 0  # v4's layout, exactly
    v5_fields = {f.name for f in get_registry().layout(API_VERSIONS, 5, REQUEST).fields}
    assert v5_fields - set(as_v4.body) == {"cluster_id", "node_id"}
    assert "assumed_version_pairs" not in installed.attrs["counters"]
    assert installed.attrs["counters"]["unsupported_version_requests"] == 1


def test_v5_responses_decode_as_v4_field_by_field_like_kafka_4_4() -> None:
    lagging = _lagging_registry()
    for _, response in _exchanges(5):
        mine = messages.decode_response(response, API_VERSIONS, 5, registry=lagging)
        theirs = messages.decode_response(response, API_VERSIONS, 5)
        assert mine.error is None and theirs.error is None
        assert mine.assumed_version == 4 and theirs.assumed_version is None
        assert mine.trailing == theirs.trailing == 0
        assert mine.header == theirs.header
        assert mine.body == theirs.body
        assert len(mine.body["api_keys"]) > 10  # the broker's list, not an empty decode


def _relabelled(payload: bytes, version: int) -> bytes:
    return payload[:2] + struct.pack(">h", version) + payload[4:]


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _rows(cap: Path) -> list[pd.DataFrame]:
    """The rows of the native core and of the pure-Python oracle, by client port."""
    native = dissector.analyze(str(cap))
    oracle = records_to_frame(list(iter_pairs(str(cap))))
    # The per-connection columns by stats' pandas rules, the core's oracle for them.
    derived = stats.service_latency_by_rule(oracle).join(stats.queueing_by_rule(oracle))
    oracle[list(derived.columns)] = derived
    return [df.sort_values("client_port").reset_index(drop=True) for df in (native, oracle)]


def _values(column: pd.Series) -> list[object]:
    """Values with every kind of null as None (the oracle's frame has float NaN)."""
    out: list[object] = []
    for v in column:
        null = v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))
        listed = hasattr(v, "__len__") and not isinstance(v, str)
        out.append(None if null else list(v) if listed else v)
    return out


def test_pairs_that_fit_decode_and_the_others_stay_unsupported(tmp_path: Path) -> None:
    """A real v5 exchange sent as v6 (a version no spec knows) fits v5's layout: its row
    equals the v5 row but for the version columns. The same with a response one byte
    longer or shorter does not fit: the pair keeps unsupported_version, in the native
    core and the Python pipeline alike."""
    request, response = _exchanges(5)[0]
    newer = _relabelled(request, 6)
    cap = write_capture(
        tmp_path / "v6.pcap",
        [Conversation(40000, 9092, [(_framed(request), _framed(response))]),
         Conversation(40001, 9092, [(_framed(newer), _framed(response))]),
         Conversation(40002, 9092, [(_framed(newer), _framed(response + b"\x00"))]),
         Conversation(40003, 9092, [(_framed(newer), _framed(response[:-1]))])],
    )  # fmt: skip
    native, oracle = _rows(cap)
    same = [c for c in native.columns if c not in ("api_version", "assumed_version")]
    same = [c for c in same if c not in ("stream", "client_port", "request_time", "response_time")]
    same = [c for c in same if c not in ("latency_ms", "first_byte_ms", "request_size")]
    for df in (native, oracle):
        original, fits, longer, shorter = (df.iloc[i] for i in range(4))
        assert pd.isna(original["assumed_version"]) and original["api_version"] == 5
        assert fits["assumed_version"] == 5 and fits["api_version"] == 6
        for column in same:
            assert str(fits[column]) == str(original[column]), column
        for bad in (longer, shorter):
            assert pd.isna(bad["assumed_version"]) and bad["status"] == "ok"
            parts = [p.split(": ")[:2] for p in bad["decode_error"].split("; ")]
            assert parts == [[side, "unsupported_version"] for side in ("request", "response")]
    for column in native.columns.drop(["request_time", "response_time"]):  # ns ints there
        assert _values(native[column]) == _values(oracle[column]), column
    assert dissector.analyze(str(cap)).attrs["counters"]["assumed_version_pairs"] == 1


def test_only_a_broker_refusal_makes_an_unknown_version_refused(tmp_path: Path) -> None:
    """The capture's v99 request, answered by the broker's real refusal (error 35 in the
    v0 layout), is version_refused with the broker's error as its status; the same
    request unanswered, or answered by a real v5 response (no refusal), keeps
    unsupported_version: only the broker's answer says newer specs would not help. The
    native core and the Python pipeline agree."""
    request, refusal = _exchanges(99)[0]
    _, v5_response = _exchanges(5)[0]
    corr = request[4:8]
    answered = corr + v5_response[4:]  # a normal answer under the v99 request's id
    cap = write_capture(
        tmp_path / "v99.pcap",
        [Conversation(40000, 9092, [(_framed(request), _framed(refusal))]),
         Conversation(40001, 9092, [(_framed(request), b"")]),
         Conversation(40002, 9092, [(_framed(request), _framed(answered))])],
    )  # fmt: skip
    native, oracle = _rows(cap)
    for df in (native, oracle):
        refused, unanswered, normal = (df.iloc[i] for i in range(3))
        assert refused["decode_error"].startswith("request: version_refused: api_key 18 ")
        assert (refused["status"], refused["error_name"]) == ("error", "UNSUPPORTED_VERSION")
        assert unanswered["status"] == "unanswered"
        assert unanswered["decode_error"].startswith("request: unsupported_version: ")
        parts = [p.split(": ")[:2] for p in normal["decode_error"].split("; ")]
        assert parts == [[side, "unsupported_version"] for side in ("request", "response")]
        assert normal["status"] == "ok"
    for column in ("status", "error_name", "decode_error", "api_version"):
        assert _values(native[column]) == _values(oracle[column]), column


def test_a_pair_is_assumed_whole_or_not_at_all() -> None:
    request, response = _exchanges(5)[0]
    good = messages.decode_request(_relabelled(request, 6))
    assert good.assumed_version == 5 and good.error is None and good.body
    bad = messages.decode_response(response + b"\x00", API_VERSIONS, 6)
    assert bad.assumed_version is None and bad.body is None
    assert bad.error.startswith("unsupported_version")
    assert messages.settle_assumed(good, bad) is None
    assert good.body is None and good.error.startswith("unsupported_version")
    assert good.assumed_version is None


def test_decode_command_marks_assumed_sides(tmp_path: Path) -> None:
    request, response = _exchanges(5)[0]
    cap = write_capture(
        tmp_path / "v6.pcap",
        [Conversation(40001, 9092, [(_framed(_relabelled(request, 6)), _framed(response))])],
    )
    [item] = list(iter_decoded([str(cap)], api=API_VERSIONS))
    assert item["request"]["assumed_version"] == item["response"]["assumed_version"] == 5
    assert item["summary"]["assumed_version"] == 5
    assert item["request"]["header"]["request_api_version"] == 6
    assert item["response"]["body"] == messages.decode_response(response, API_VERSIONS, 5).body


def test_cli_table_counts_assumed_rows_apart_from_unsupported() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "analyze", str(CAPTURE)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if "assumed" in line and "┃" in line)
    cells = [c.strip() for c in header.strip("┃").split("┃")]
    rows = {}
    for line in lines:
        values = [c.strip() for c in line.strip("│").split("│")]
        if len(values) == len(cells) and values[0] == "ApiVersions":
            rows[int(values[1])] = dict(zip(cells, values, strict=True))
    assert (rows[99]["assumed"], rows[99]["unsupported"]) == ("0", "0")
    assert (rows[5]["assumed"], rows[5]["unsupported"]) == ("0", "0")
    assert "unsupported:" not in proc.stdout  # the shipped specs know every version sent
    assert "refused: 1 row asking for an ApiVersions version the broker does not" in proc.stdout
    assert "assumed_version_pairs" not in proc.stdout


def test_report_names_the_newer_versions_and_how_they_were_decoded(
    installed: pd.DataFrame,
) -> None:
    pytest.importorskip("jinja2")
    from dissector.analytics.report.sections import _newer_versions_text

    text = _newer_versions_text(installed)
    assert text == "ApiVersions v99 (1 refused by the broker too)"
    assert _newer_versions_text(installed[installed["api_version"] < 99]) == "none"
