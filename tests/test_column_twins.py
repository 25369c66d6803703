"""The pairs table's columns are declared once (``schema.COLUMNS``); the records that
carry a row or a pair's summary across stages, languages and the Python/Rust boundary
must name exactly those columns. A column added in one place only fails here.

Records held to the schema: ``stages.PairRecord`` (a whole row), the Python
``protocol.summary.Summary`` and ``wire.core.FallbackSummary`` (the summary columns,
``schema.SUMMARY_COLUMNS``), the stub's ``_FallbackSummary`` (what the core reads of it),
the core's ``SummaryColumns``, ``PyFallbackSummary`` and ``Summary`` (read from the Rust
source), and the column buffers the core hands over (``Analyzer.take_columns``).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from dissector.options import Options
from dissector.protocol.export import EXTRACTS
from dissector.protocol.summary import Summary
from dissector.schema import COLUMN_NAMES, SUMMARY_COLUMNS
from dissector.stages import PairRecord
from dissector.wire.core import FallbackSummary, new_analyzer, open_capture

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "native" / "src"

# Fields that are not columns, each with why.
SUMMARY_ONLY = {
    "record_errors": "counted as a stage counter, listed in decode_error",
    "partial_batches": "counted as records_partial_batches",
}
FALLBACK_ONLY = {
    "fatal": "makes the row's status malformed",
    "extracts": "the model's extract columns (max_wait_ms, min_bytes), in the model's order",
}
RUST_SUMMARY_ONLY = {
    "record_errors": SUMMARY_ONLY["record_errors"],
    "fatal": FALLBACK_ONLY["fatal"],
    "extracts": FALLBACK_ONLY["extracts"],
    "defer": "the pair goes to the Python decoder",
    "defer_reason": "why it goes",
}


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _without(names: list[str], extra: dict[str, str]) -> list[str]:
    return [n for n in names if n not in extra]


def _rust_struct_fields(path: Path, struct: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    found = re.search(rf"^(?:pub )?struct {struct} \{{\n(.*?)^\}}", text, re.S | re.M)
    assert found, f"struct {struct} not found in {path}"
    return re.findall(r"^\s+(?:pub(?:\([a-z]+\))? )?(\w+):", found.group(1), re.M)


def _stub_properties(protocol: str) -> list[str]:
    tree = ast.parse((REPO / "dissector" / "_core.pyi").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == protocol:
            return [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
    raise AssertionError(f"{protocol} not in _core.pyi")


def test_summary_columns_are_pairs_table_columns_in_its_order() -> None:
    assert set(SUMMARY_COLUMNS) <= set(COLUMN_NAMES)
    assert list(SUMMARY_COLUMNS) == [c for c in COLUMN_NAMES if c in SUMMARY_COLUMNS]


def test_pair_record_fields_are_the_columns_in_order() -> None:
    assert tuple(_fields(PairRecord)) == COLUMN_NAMES


def test_python_summaries_carry_the_summary_columns() -> None:
    assert _without(_fields(Summary), SUMMARY_ONLY) == list(SUMMARY_COLUMNS)
    assert _without(_fields(FallbackSummary), FALLBACK_ONLY) == list(SUMMARY_COLUMNS)
    assert set(FALLBACK_ONLY) <= set(_fields(FallbackSummary))
    # What the core reads of a FallbackSummary, as the stub types it.
    assert _stub_properties("_FallbackSummary") == _fields(FallbackSummary)


def test_rust_summary_records_carry_the_summary_columns() -> None:
    fallback = _fields(FallbackSummary)
    assert _rust_struct_fields(NATIVE / "rows" / "mod.rs", "SummaryColumns") == fallback
    assert _rust_struct_fields(NATIVE / "python" / "mod.rs", "PyFallbackSummary") == fallback
    rust_summary = _rust_struct_fields(NATIVE / "kafka" / "summary.rs", "Summary")
    assert _without(rust_summary, RUST_SUMMARY_ONLY) == list(SUMMARY_COLUMNS)
    assert set(RUST_SUMMARY_ONLY) <= set(rust_summary)


def test_core_hands_over_every_column_once() -> None:
    """The core's buffers: the schema's columns in its order, the model's extract
    columns (``export.EXTRACTS``) after them."""
    analyzer = new_analyzer(Options())
    open_capture(analyzer, str(REPO / "captures" / "kafka-4-mixed.pcapng"))
    analyzer.run(100)
    names = list(analyzer.take_columns())
    extracts = [column for column, *_ in EXTRACTS]
    assert names == [c for c in COLUMN_NAMES if c not in extracts] + extracts
