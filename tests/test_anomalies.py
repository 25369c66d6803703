"""The anomaly registry against the code: every name used is registered, every
registered name is used, and the README shows the registry as the command prints it.

The sources are scanned, not imported: a counter added in a Python stage fails here
until it has an entry. The native core (``native/src/**/*.rs``) counts by the
``Counter`` enum generated from the registry, so there an unregistered name does not
compile; the scan of its variants finds registered names no stage counts any more.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from dissector import anomalies as an
from dissector.cli import main
from dissector.protocol import decode_request, decode_response
from dissector.protocol.records import ERROR_CODES
from dissector.stages import TLS, TRUNCATED
from tests.oracle import rows

REPO = Path(__file__).resolve().parents[1]
PY_ROOT = REPO / "dissector"
# The pure-Python stages (the core's oracle) count under the same names as the core.
ORACLE_ROOT = REPO / "tests" / "oracle"
RUST_ROOT = REPO / "native" / "src"

# Python calls that pass a counter name through rather than naming one.
PASS_THROUGH = {
    ("framing.py", "name"),  # FrameSplitter._count(name, n) -> counters.add(name, n)
}

# Rust counts by `Counter` variant (the enum generated from the registry); the
# record-batch anomalies name theirs in `ctx.error(Counter::RecordsX, ..)` or in a
# `(Counter::RecordsX, detail)` fault.
_RUST_VARIANT = re.compile(r"\bCounter::([A-Z]\w*)")
_RUST_RECORD_ERROR = re.compile(r"(?:ctx\.error\(|[(|]\s*\()\s*Counter::(Records\w+)\s*,")
_RUST_LINE_COMMENT = re.compile(r"//.*")


def python_counter_names(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """Counter names in ``counters.add("x")``/``self._count("x")`` calls: name -> files,
    and the calls whose name is not a literal (outside ``PASS_THROUGH``)."""
    found: dict[str, set[str]] = {}
    dynamic: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not _is_counter_call(node):
                continue
            assert isinstance(node, ast.Call)
            arg = node.args[0]
            literals = [
                n.value
                for n in ast.walk(arg)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            for name in literals:
                found.setdefault(name, set()).add(path.name)
            if not literals and (path.name, ast.unparse(arg)) not in PASS_THROUGH:
                dynamic.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found, dynamic


def _is_counter_call(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
        return False
    attr = node.func.attr
    receiver = ast.unparse(node.func.value).lower()
    return attr == "_count" or (attr == "add" and "counter" in receiver)


def _rust_code(path: Path) -> str:
    """A Rust file without comments and without its unit tests (a variant named only
    in a test is not counted by any stage)."""
    text = path.read_text().split("#[cfg(test)]\nmod tests")[0]
    return _RUST_LINE_COMMENT.sub("", text)


def _variant_names() -> dict[str, str]:
    return {an.rust_variant(n): n for n in an.counter_names()}


def rust_counter_names(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """Counter names of the ``Counter::X`` variants the stages use (name -> files), and
    the variants no registered name has (which would not compile)."""
    names = _variant_names()
    found: dict[str, set[str]] = {}
    unknown: list[str] = []
    for path in sorted(root.rglob("*.rs")):
        if path.name == Path(an.RUST_COUNTER_MODULE).name:
            continue
        for variant in _RUST_VARIANT.findall(_rust_code(path)):
            if variant in names:
                found.setdefault(names[variant], set()).add(path.name)
            elif variant not in {"ALL"}:
                unknown.append(f"{path.name}: Counter::{variant}")
    return found, unknown


def rust_record_error_codes(root: Path) -> set[str]:
    names = _variant_names()
    text = _rust_code(root / "kafka" / "records.rs")
    return {
        names[v].removeprefix(an.RECORDS_COUNTER_PREFIX) for v in _RUST_RECORD_ERROR.findall(text)
    }


def all_source_text() -> str:
    paths = [*PY_ROOT.rglob("*.py"), *ORACLE_ROOT.rglob("*.py"), *RUST_ROOT.rglob("*.rs")]
    return "\n".join(p.read_text() for p in paths if p.name != "anomalies.py")


# ------------------------------------------------------------------ the scanners


def test_python_scanner_finds_counters_of_every_form(tmp_path: Path) -> None:
    (tmp_path / "stage.py").write_text(
        "def f(self, counters, ok):\n"
        "    counters.add('plain')\n"
        "    self._counters.add('a' if ok else 'b', 3)\n"
        "    self._count('via_helper')\n"
        "    seen.add('not_a_counter')\n"
        "    counters.add(computed)\n"
    )
    found, dynamic = python_counter_names(tmp_path)
    assert set(found) == {"plain", "a", "b", "via_helper"}
    assert dynamic == ["stage.py:6: counters.add(computed)"]


def test_rust_scanner_finds_counter_variants_outside_comments_and_tests(tmp_path: Path) -> None:
    (tmp_path / "stage.rs").write_text(
        "fn f() { counters.inc(Counter::TcpGaps); ctx.counters\n    .add(Counter::BytesRead, n);\n"
        "  let c = Counter::ReadError; // Counter::NonTcp\n"
        "  counters.inc(Counter::NoSuchThing); }\n"
        "#[cfg(test)]\nmod tests {\n  fn t() { c.inc(Counter::NonIp); }\n}\n"
    )
    found, unknown = rust_counter_names(tmp_path)
    assert set(found) == {"tcp_gaps", "bytes_read", "read_error"}
    assert unknown == ["stage.rs: Counter::NoSuchThing"]


# ------------------------------------------------------------------ code -> registry


def python_counters() -> tuple[dict[str, set[str]], list[str]]:
    """``python_counter_names`` of the package and of the oracle, merged."""
    found, dynamic = python_counter_names(PY_ROOT)
    oracle, oracle_dynamic = python_counter_names(ORACLE_ROOT)
    for name, files in oracle.items():
        found.setdefault(name, set()).update(files)
    return found, dynamic + oracle_dynamic


def test_every_python_counter_is_registered() -> None:
    found, dynamic = python_counters()
    assert len(found) > 40  # the scan sees the stages' counters at all
    assert dynamic == [], "counter names the scan cannot read: name them literally"
    missing = {n: sorted(f) for n, f in found.items() if n not in an.counter_names()}
    assert missing == {}, "register these in dissector/anomalies.py"


def test_every_native_counter_is_registered() -> None:
    # The compiler holds the stages to the generated enum; this checks the scan that
    # `test_every_registered_counter_is_used` relies on sees the variants at all.
    found, unknown = rust_counter_names(RUST_ROOT)
    assert len(found) > 40
    assert unknown == []


def test_record_errors_are_exactly_the_records_stage_codes() -> None:
    registered = set(an.by_kind(an.Kind.RECORD_ERROR))
    assert registered == set(ERROR_CODES)
    assert rust_record_error_codes(RUST_ROOT) <= registered


def test_correlation_notes_are_registered() -> None:
    """The notes correlate.py puts into decode_error (``note=`` or ``_unanswered``)."""
    tree = ast.parse((ORACLE_ROOT / "correlate.py").read_text())
    notes: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        args = [k.value for k in node.keywords if k.arg == "note"]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "_unanswered":
            args += node.args[3:4]
        notes |= {a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    assert notes == {"request_header_truncated", "duplicate_correlation_id", "evicted"}
    assert notes <= set(an.by_kind(an.Kind.DECODE_ERROR))


def test_protocol_decode_errors_start_with_registered_codes() -> None:
    codes = set(an.by_kind(an.Kind.DECODE_ERROR))
    unknown_key = decode_request(b"\x7f\x00\x00\x00\x00\x00\x00\x01\xff\xff")
    newer = decode_request(b"\x00\x03\x7f\x00\x00\x00\x00\x01\xff\xff")
    unknown_response = decode_response(b"\x00\x00\x00\x01", 32000, 0)
    for decoded in (unknown_key, newer, unknown_response):
        assert decoded.error is not None
        assert decoded.error.split(":")[0] in codes, decoded.error


def test_row_flags_are_registered() -> None:
    flags = {rows.CAPTURE_GAP, rows.NEGATIVE_LATENCY, TLS, TRUNCATED}
    assert set(an.by_kind(an.Kind.FLAG)) == flags


# ------------------------------------------------------------------ registry -> code


def test_every_registered_counter_is_used() -> None:
    used = set(python_counters()[0]) | set(rust_counter_names(RUST_ROOT)[0])
    stale = sorted(set(an.by_kind(an.Kind.COUNTER)) - used)
    assert stale == [], "no stage counts these any more: remove them from the registry"


@pytest.mark.parametrize("kind", [an.Kind.DECODE_ERROR, an.Kind.FLAG, an.Kind.NOTE])
def test_every_registered_code_appears_in_the_sources(kind: an.Kind) -> None:
    text = all_source_text()
    stale = [
        name for name in an.by_kind(kind) if not re.search(rf"[\"']{re.escape(name)}[:\"']", text)
    ]
    assert stale == []


# ------------------------------------------------------------------ the table itself


def test_entries_are_unique_and_described() -> None:
    keys = [(a.kind, a.name) for a in an.ANOMALIES]
    assert len(keys) == len(set(keys))
    for a in an.ANOMALIES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", a.name), a.name
        assert a.description and "\n" not in a.description and len(a.description) <= 80


def test_native_records_counters_resolve_to_their_record_error() -> None:
    entry = an.lookup("records_crc_mismatch")
    assert entry is not None and entry.kind == an.Kind.RECORD_ERROR
    assert an.lookup("no_such_counter") is None


def test_readme_section_is_the_commands_markdown() -> None:
    result = CliRunner().invoke(main, ["anomalies", "--markdown"])
    assert result.exit_code == 0, result.output
    readme = (REPO / "README.md").read_text()
    match = re.search(r"<!-- anomalies:start -->\n(.*?)<!-- anomalies:end -->", readme, re.S)
    assert match is not None, "README lacks the anomalies section"
    assert match.group(1) == result.output, "regenerate: kafka-dissector anomalies --markdown"
    assert result.output.count("\n") == len(an.ANOMALIES) + 2


def test_command_filters_and_prints_a_table() -> None:
    result = CliRunner().invoke(main, ["anomalies", "--kind", "flag"])
    assert result.exit_code == 0, result.output
    assert "capture_gap" in result.output and "negative_latency" in result.output
    assert "tcp_gaps" not in result.output


# ------------------------------------------------------------------ the native Counter enum


def test_native_counter_enum_is_the_registry() -> None:
    # The built core's Counter enum (native/src/counter.rs, generated from the registry)
    # holds exactly the registry's counter names; debug builds of the core (cargo test)
    # refuse to count any other name, so a stage cannot drift from the registry.
    from dissector import _core

    names = _core.counter_names()
    assert len(names) == len(set(names))
    assert set(names) == an.counter_names()


def test_native_counter_module_is_generated_from_the_registry() -> None:
    path = REPO / an.RUST_COUNTER_MODULE
    assert path.read_text(encoding="utf-8") == an.rust_counter_module(), (
        "run scripts/native-counters"
    )
