"""Protocol vocabulary stays in ``dissector/protocol/``: no module outside it names a
Kafka API by a string literal (they go through ``protocol.families`` or ``ApiKey``), and
the families there agree with the specs.

The names checked are every API name of the compiled specs (the bundled generation,
the inter-broker keys Kafka 4.0 removed included), so a literal of a newly added API is
caught too. Docstrings are prose and are not checked. Nothing is allow-listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dissector.protocol import families
from dissector.protocol.keys import ApiKey, api_names
from dissector.protocol.messages import get_registry
from dissector.protocol.spec import REQUEST, RESPONSE

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dissector"
PROTOCOL = PACKAGE / "protocol"


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def api_name_literals(source: str, api_names_: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every string constant of ``source`` that is an API name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and node.value in api_names_
    )


def _spec_api_names() -> set[str]:
    registry = get_registry()
    return set(api_names().values()) | set(registry.specs.names.values())


def test_no_api_name_literal_outside_protocol() -> None:
    names = _spec_api_names()
    assert {"Produce", "Fetch", "JoinGroup", "ApiVersions"} <= names  # the scan has teeth
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PROTOCOL in path.parents:
            continue
        for line, value in api_name_literals(path.read_text(encoding="utf-8"), names):
            found.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert found == [], "name APIs through dissector.protocol.families or ApiKey"


def rust_api_name_literals(source: str, api_names_: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every Rust string literal of ``source`` that is an API name
    (comments left out: they may name what a function mirrors)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        code = re.sub(r"//.*", "", line)
        found += [(number, s) for s in re.findall(r'"([^"\\]*)"', code) if s in api_names_]
    return found


def test_no_api_name_literal_in_the_native_core() -> None:
    # The core learns every API it names from the exported model (issue #23): a literal
    # in Rust would be protocol knowledge the specs cannot update.
    # native/tests may spell a hand-made model's API names: that is the model fed in.
    names = _spec_api_names()
    found = []
    paths = [
        *(ROOT / "native" / "src").rglob("*.rs"),
        *(ROOT / "native" / "examples").rglob("*.rs"),
    ]
    assert len(paths) > 20  # the scan has teeth
    for path in sorted(paths):
        text = path.read_text(encoding="utf-8")
        for line, value in rust_api_name_literals(text, names):
            found.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert found == [], "the core names APIs through the exported spec model"


def test_rust_scan_sees_literals_but_not_comments() -> None:
    src = '// Fetch: a comment\nlet a = "Produce"; // "JoinGroup"\nlet b = ("x", "OffsetCommit");\n'
    want = [(2, "Produce"), (3, "OffsetCommit")]
    assert rust_api_name_literals(src, _spec_api_names()) == want


def test_scan_sees_literals_but_not_docstrings() -> None:
    src = (
        '"""Fetch"""\n'
        "def f(df):\n"
        '    """JoinGroup"""\n'
        '    return df[df.api_name == "Fetch"], {"x": ("OffsetCommit",)}, f"{df}Produce"\n'
    )
    # an f-string's literal part counts too
    want = [(4, "Fetch"), (4, "OffsetCommit"), (4, "Produce")]
    assert api_name_literals(src, _spec_api_names()) == want


def test_families_name_apis_of_the_specs() -> None:
    # Every member of a family is an API the compiled specs describe in both directions.
    registry = get_registry()
    members = {
        *families.GROUP_MEMBERSHIP,
        *families.LONG_POLLS,
        *families.TOPIC_ID_SOURCES,
        *families.PARTITION_ROLES,
        *families.GROUP_COMMITS,
        *families.COMMITS,
        families.CLASSIC_JOIN,
        families.CLASSIC_SYNC,
        families.NEGOTIATION,
    }
    for key in members:
        for direction in (REQUEST, RESPONSE):
            assert registry.specs.versions(key, direction), (key, direction)
    assert set(families.COMMITS) == {
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.TXN_OFFSET_COMMIT,
    }
    assert set(families.GROUP_COMMITS) < set(families.COMMITS)


def test_header_version_rule_against_the_specs() -> None:
    # The rule of KIP-482 as the specs state it: a flexible request has header v2, a
    # flexible response v1, but ApiVersions' response (any version) and ControlledShutdown
    # v0's request (header v0, no client_id) are the exceptions; Apache's JSON spells the
    # latter out in RequestHeader.json ("ControlledShutdown v0 ... header version 0").
    registry = get_registry()
    seen = set()
    for (api_key, direction), by_version in registry.specs.layouts.items():
        for version, layout in by_version.items():
            if direction == REQUEST:
                got = families.request_header_version(api_key, version, layout.flexible)
                want = 2 if layout.flexible else 1
                if api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
                    want = 0
            else:
                got = families.response_header_version(api_key, layout.flexible)
                want = 0 if api_key == ApiKey.API_VERSIONS else (1 if layout.flexible else 0)
            assert got == want, (api_key, version, direction)
            seen.add((direction, got))
    assert {(REQUEST, 1), (REQUEST, 2), (RESPONSE, 0), (RESPONSE, 1)} <= seen
