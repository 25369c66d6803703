"""The native summary (native/src/kafka/summary.rs) against Python's rows.build_record.

Python is the oracle: every exchange of the bundled and shared captures goes through
``pipeline.iter_exchanges`` + ``rows.build_record``; its payloads and the exported model
(``protocol.export``) go to the Rust driver ``native/examples/summarize_dump.rs``, and
every column must agree. The native side may defer a pair to Python, but only where
Python's decoder reports a problem (a field cut short, an unsupported version, bytes
after the body), and it must defer every such pair.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dissector.protocol import decoder_for
from dissector.protocol.export import export_model, model_dict
from dissector.protocol.records import RecordSet
from dissector.stages import is_fatal
from tests.oracle.pipeline import iter_exchanges
from tests.oracle.rows import build_record

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
BUNDLED = sorted((ROOT / "captures").glob("*.pcap*"))
SHARED_DIR = ROOT.parent / "shared" / "captures"
SHARED = sorted(p for p in SHARED_DIR.glob("*.pcap*")) if SHARED_DIR.is_dir() else []

COLUMNS = (
    "error_code",
    "error_name",
    "error_count",
    "topics",
    "partitions",
    "record_bytes",
    "throttle_ms",
)
RECORD_COLUMNS = ("records", "compression")

# Defer reasons for bytes Python decodes without complaint but the walk does not mirror.
NOT_MIRRORED = frozenset({"duplicate_tag"})

needs_cargo = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo not installed")


@dataclass
class Pair:
    capture: str
    api_key: int
    api_version: int
    request: bytes | None
    response: bytes | None
    row: dict[str, Any]
    python_problem: str | None  # what Python's decoder reported, if anything
    record_errors: list[str]
    request_body: dict[str, Any] | None
    summary_error: str | None = None  # Python's Summary.decode_error
    surfaces_record_errors: bool = False  # Python's summary lists record errors itself
    no_spec_only: bool = False  # every problem is a side no spec describes (see below)
    fatal: bool = False  # stages.is_fatal of the two sides


# A side no layout describes is settled by the native summary itself, in the decoder's
# words (export.py hands them over); any other problem defers to the Python decoder.
# (A request the broker refused too, messages.settle_refused, is one of those.)
NO_SPEC = ("unsupported_version:", "unknown_api_key:", "version_refused:")


def _no_spec_only(*decoded: Any) -> bool:
    failed = [d for d in decoded if d is not None and (d.error or d.trailing)]
    return bool(failed) and all(
        d.error and d.error.startswith(NO_SPEC) and not d.trailing for d in failed
    )


def _problem(decoded: Any, side: str) -> str | None:
    if decoded is None:
        return None
    if decoded.error:
        return f"{side}: {decoded.error}"
    if decoded.trailing:
        return f"{side}: {decoded.trailing} trailing bytes"
    return None


def _record_sets(value: Any) -> list[RecordSet]:
    """RecordSets of a decoded body in wire (dict insertion) order."""
    if isinstance(value, RecordSet):
        return [value]
    if isinstance(value, dict):
        return [r for v in value.values() for r in _record_sets(v)]
    if isinstance(value, list):
        return [r for v in value for r in _record_sets(v)]
    return []


def collect(captures: list[Path], decoder: Any) -> list[Pair]:
    pairs: list[Pair] = []
    topics: Any = None
    current = None
    for path, ex in iter_exchanges([str(c) for c in captures], decoder=decoder):
        if path != current:
            current, topics = path, decoder.TopicNames()
        row = build_record(path, ex, decoder, topics).as_dict()
        if ex.api_key is None or ex.api_version is None:
            continue
        req = decoder.decode_request(ex.request.payload) if ex.request is not None else None
        resp = (
            decoder.decode_response(ex.response.payload, ex.api_key, ex.api_version)
            if ex.response is not None
            else None
        )
        problems = [p for p in (_problem(req, "request"), _problem(resp, "response")) if p]
        errors = [
            e
            for d in (req, resp)
            if d is not None
            for rs in _record_sets(d.body)
            for e in rs.errors
        ]
        summary = decoder.summarize(ex.api_key, ex.api_version, req, resp, decoder.TopicNames())
        pairs.append(
            Pair(
                capture=path,
                api_key=ex.api_key,
                api_version=ex.api_version,
                request=bytes(ex.request.payload) if ex.request is not None else None,
                response=bytes(ex.response.payload) if ex.response is not None else None,
                row=row,
                python_problem="; ".join(problems) or None,
                record_errors=errors,
                request_body=req.body if req is not None else None,
                summary_error=summary.decode_error,
                surfaces_record_errors=hasattr(summary, "record_errors"),
                no_spec_only=_no_spec_only(req, resp),
                fatal=is_fatal(req, resp),
            )
        )
    return pairs


def _payload(data: bytes | None) -> bytes:
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def run_native(pairs: list[Pair], model_json: str, tmp: Path) -> list[dict[str, Any]]:
    model = tmp / "model.json"
    model.write_text(model_json)
    dump = bytearray()
    current = None
    for p in pairs:
        if p.capture != current:
            current = p.capture
            dump += b"C"
        dump += b"P" + struct.pack(">hh", p.api_key, p.api_version)
        dump += _payload(p.request) + _payload(p.response)
    dump_path = tmp / "pairs.bin"
    dump_path.write_bytes(bytes(dump))
    command = ["cargo", "run", "--quiet", "--example", "summarize_dump", "--"]
    out = subprocess.run(
        [*command, str(model), str(dump_path)],
        cwd=NATIVE,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == len(pairs)
    return lines


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Pair, dict[str, Any]]]:
    if shutil.which("cargo") is None:
        pytest.skip("cargo not installed")
    decoder = decoder_for()
    pairs = collect(BUNDLED + SHARED, decoder)
    native = run_native(pairs, export_model(decoder), tmp_path_factory.mktemp("native"))
    return list(zip(pairs, native, strict=True))


def _label(p: Pair) -> str:
    return f"{Path(p.capture).name} api {p.api_key} v{p.api_version}"


@needs_cargo
def test_native_defers_exactly_where_python_reports_a_problem(compared) -> None:  # type: ignore[no-untyped-def]
    assert len(compared) > 400  # bundled and shared captures hold several hundred pairs
    reasons: Counter[str] = Counter()
    settled = 0
    for p, n in compared:
        problem = p.python_problem is not None and not p.no_spec_only
        assert n["defer"] == problem, (_label(p), p.python_problem, n)
        if n["defer"]:
            reasons[n["defer_reason"]] += 1
        if p.no_spec_only:
            assert (n["decode_error"], n["fatal"]) == (p.summary_error, p.fatal), _label(p)
            settled += 1
    # Kafka 4.4's ApiVersions v5 (heuristic-port-19192, kafka-4-mixed): no spec describes it
    assert settled > 0
    deferred = sum(reasons.values())
    # Deferred pairs are the rare path: versions newer than the installed specs
    # (Kafka 4.4's ApiVersions v5, a deliberate v99) and the shared captures' broken frames.
    assert deferred <= len(compared) // 20, reasons
    explained = {"unsupported_version", "short", "array_count", "trailing_bytes"}
    assert set(reasons) <= explained, reasons


@needs_cargo
def test_native_columns_equal_build_record(compared) -> None:  # type: ignore[no-untyped-def]
    checked = Counter[str]()
    for p, n in compared:
        if n["defer"]:
            continue
        for column in COLUMNS:
            assert n[column] == p.row[column], (_label(p), column, n[column], p.row[column])
            if p.row[column] not in (None, []):
                checked[column] += 1
        assert n["fatal"] == p.fatal, _label(p)
    # every column was compared on real values, not only on empty ones
    assert all(checked[c] > 0 for c in COLUMNS), checked


@needs_cargo
def test_native_record_columns_equal_build_record(compared) -> None:  # type: ignore[no-untyped-def]
    live = [(p, n) for p, n in compared if not n["defer"]]
    for p, n in live:
        for column in RECORD_COLUMNS:
            assert n[column] == p.row[column], (_label(p), column, n[column], p.row[column])
        if p.surfaces_record_errors:
            expected = p.summary_error
        else:  # before Python listed them: all of them, in wire order
            expected = "; ".join(f"records: {e}" for e in p.record_errors) or None
        assert n["decode_error"] == expected, _label(p)
        assert n["record_errors"] == len(p.record_errors), _label(p)


@needs_cargo
def test_extract_columns_are_the_request_fields(compared) -> None:  # type: ignore[no-untyped-def]
    fetches = 0
    for p, n in compared:
        if n["defer"]:
            continue
        body = p.request_body or {}
        wanted = p.row["api_name"] in ("Fetch", "ShareFetch")
        for column in ("max_wait_ms", "min_bytes"):
            expected = body.get(column) if wanted else None
            assert n["extracts"][column] == expected, (_label(p), column)
        fetches += wanted
    assert fetches > 10


def test_export_describes_every_layout_and_the_header_quirks() -> None:
    decoder = decoder_for()
    model = model_dict(decoder)
    registry = decoder.registry
    assert len(model["layouts"]) == len(registry.specs.combinations())
    by_key = {(x["api_key"], x["version"], x["direction"]): x for x in model["layouts"]}
    # ApiVersions keeps response header v0 in flexible versions; other flexible ones v1
    api_versions = by_key[(18, 3, "response")]
    assert api_versions["flexible"] and api_versions["header_version"] == 0
    assert by_key[(3, 12, "response")]["header_version"] == 1
    assert by_key[(3, 12, "request")]["header_version"] == 2
    assert by_key[(3, 0, "request")]["header_version"] == 1
    assert model["api_names"]["0"] == "Produce"
    assert model["errors"]["3"] == "UNKNOWN_TOPIC_OR_PARTITION"
    fetch = next(e for e in model["extracts"] if e["column"] == "max_wait_ms")
    assert fetch["api_keys"] == sorted(
        {k for k, _, _ in registry.specs.combinations()}
        & {k for k in range(-1, 2000) if decoder.api_name(k) in ("Fetch", "ShareFetch")}
    )


def test_export_honours_extra_spec_directories(tmp_path: Path) -> None:
    spec = """{
      "apiKey": 1000, "type": "request", "name": "VendorPingRequest",
      "validVersions": "0-1", "flexibleVersions": "1+",
      "fields": [
        { "name": "Topic", "type": "string", "versions": "0+" },
        { "name": "Count", "type": "int32", "versions": "1+" }
      ]
    }"""
    (tmp_path / "VendorPingRequest.json").write_text(spec)
    plain = model_dict(decoder_for())
    extra = model_dict(decoder_for([tmp_path]))
    keys = {(x["api_key"], x["version"], x["direction"]) for x in extra["layouts"]}
    assert (1000, 1, "request") in keys
    assert not any(x["api_key"] == 1000 for x in plain["layouts"])
    layout = next(x for x in extra["layouts"] if (x["api_key"], x["version"]) == (1000, 1))
    assert layout["header_version"] == 2
    top = {f["name"]: f.get("roles", 0) for f in layout["fields"]}
    assert top["topic"] & extra["roles"]["top_topic"]


@needs_cargo
def test_kafka_4_4_api_versions_reach_the_native_summary(tmp_path: Path) -> None:
    """ApiVersions v5 (Kafka 4.4), known to the shipped specs, is summarised natively and
    equal to Python's; the capture's v99, which the broker refused (KIP-511), is
    version_refused in both."""
    capture = ROOT / "captures" / "kafka-4-mixed.pcapng"
    installed = decoder_for()
    pairs = [p for p in collect([capture], installed) if p.api_key == 18]
    native = run_native(pairs, export_model(installed), tmp_path)
    seen = 0
    for p, n in zip(pairs, native, strict=True):
        assert n["defer"] == (p.python_problem is not None and not p.no_spec_only), _label(p)
        if p.api_version == 5:
            seen += 1
            assert not n["defer"]
            for column in COLUMNS:
                assert n[column] == p.row[column], column
        if p.api_version == 99:
            assert p.no_spec_only and not n["defer"]
            assert n["decode_error"] == p.summary_error, _label(p)
            assert n["decode_error"].startswith("request: version_refused: ")
    assert seen


def _python_summary(decoder: Any, p: Pair) -> tuple[dict[str, Any], str | None, list[str]]:
    """What build_record computes from the payloads alone (fresh topic names)."""
    req = decoder.decode_request(p.request) if p.request is not None else None
    resp = (
        decoder.decode_response(p.response, p.api_key, p.api_version)
        if p.response is not None
        else None
    )
    s = decoder.summarize(p.api_key, p.api_version, req, resp, decoder.TopicNames())
    problems = [x for x in (_problem(req, "request"), _problem(resp, "response")) if x]
    errors = [
        e for d in (req, resp) if d is not None for rs in _record_sets(d.body) for e in rs.errors
    ]
    summary = dict(vars(s), no_spec_only=_no_spec_only(req, resp), fatal=is_fatal(req, resp))
    return summary, "; ".join(problems) or None, errors


def _mutants(pairs: list[Pair], per_pair: int, seed: int) -> list[Pair]:
    """Each pair with single bytes overwritten or its tail cut, reproducibly."""
    import random

    rng = random.Random(seed)
    out: list[Pair] = []
    for p in pairs:
        for _ in range(per_pair):
            side = "request" if p.response is None or rng.random() < 0.5 else "response"
            data = getattr(p, side)
            if not data:
                continue
            raw = bytearray(data)
            if rng.random() < 0.2:
                raw = raw[: rng.randrange(len(raw))]
            else:
                for _ in range(rng.randint(1, 3)):
                    value = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
                    raw[rng.randrange(len(raw))] = value
            fields = dict(vars(p))
            fields[side] = bytes(raw)
            fields["capture"] = f"mutant-{len(out)}"  # fresh topic names for each
            out.append(Pair(**fields))
    return out


@needs_cargo
def test_mutated_frames_defer_or_agree(compared, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Broken bytes: wherever Python's decoder reports nothing, every column agrees;
    wherever it reports a problem, the native walk defers (and never crashes)."""
    decoder = decoder_for()
    pairs = _mutants([p for p, _ in compared], per_pair=12, seed=11)
    native = run_native(pairs, export_model(decoder), tmp_path)
    agreed = deferred = settled = 0
    for p, n in zip(pairs, native, strict=True):
        summary, problem, _errors = _python_summary(decoder, p)
        if summary["no_spec_only"]:
            assert not n["defer"], (_label(p), problem, n)
            assert n["decode_error"] == summary["decode_error"], (_label(p), n)
            assert n["fatal"] == summary["fatal"], (_label(p), n)
            settled += 1
        elif problem is not None:
            assert n["defer"], (_label(p), problem, n)
        if n["defer"]:
            # beyond Python's problems, only what the walk does not mirror: a known
            # tag given twice (Python keeps the last value at the first one's place)
            assert problem is not None or n["defer_reason"] in NOT_MIRRORED, (_label(p), n)
            deferred += 1
            continue
        agreed += 1
        for column in COLUMNS:
            assert n[column] == summary[column], (_label(p), column, n[column], summary[column])
    assert agreed > 1000 and deferred > 1000 and settled > 10, (agreed, deferred, settled)


def test_export_takes_any_decoder_the_pipeline_uses() -> None:
    import dissector.protocol as protocol
    from dissector.protocol.messages import get_registry
    from dissector.protocol.notes import NotingDecoder

    expected = export_model(decoder_for())
    for decoder in (
        protocol,
        get_registry(),
        NotingDecoder(protocol),
        NotingDecoder(decoder_for()),
    ):
        assert export_model(decoder) == expected
    with pytest.raises(TypeError):
        export_model(object())
