"""The native core's module graph has no circle, file by file and stage by stage.

Every ``native/src/**/*.rs`` is a module (``lib.rs`` the crate root, ``x/mod.rs`` the
module ``x``, ``x/y.rs`` the module ``x::y``). A module depends on another when its code
names it: a ``crate::`` path (``use`` or inline), a ``super::``/``self::`` path, or a
child module by its bare name (``exchange::register``). Declaring a child (``mod x;``)
is not a use, nor is a unit-test module's ``use super::*``. The graph must be acyclic
at module granularity, and so must the graph of the stages (the crate's top-level
modules: ``capture``, ``tcp``, ``tls``, ``kafka``, ``rows``, ...), so the data flow
packets -> streams -> (TLS) -> frames -> pairs -> rows reads one way through the crate.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "native" / "src"

Module = tuple[str, ...]

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_UNIT_TESTS = re.compile(r"#\[cfg\(test\)\]\s*mod tests\b")
_CHILD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", re.M)
_ROOTED = re.compile(r"\b(crate|super|self)::")
_IDENT = re.compile(r"\w+")


def module_of(path: Path, src: Path) -> Module:
    parts = path.relative_to(src).with_suffix("").parts
    if parts == ("lib",):
        return ()
    if parts[-1] == "mod":
        return tuple(parts[:-1])
    return tuple(parts)


def code(path: Path) -> str:
    """The file's code without comments, string literals and its unit-test module."""
    text = _STRING.sub('""', _COMMENT.sub("", path.read_text(encoding="utf-8")))
    return _UNIT_TESTS.split(text, maxsplit=1)[0]


def _paths_after(text: str, at: int) -> Iterator[list[str]]:
    """The paths written from ``text[at]`` on: ``a::b::C`` or ``a::{b, c::d}`` groups."""
    segments: list[str] = []
    pos = at
    while True:
        m = _IDENT.match(text, pos)
        if m is None:
            if text.startswith("{", pos):
                yield from _group(text, pos, segments)
            else:
                yield segments
            return
        segments = [*segments, m.group()]
        pos = m.end()
        if not text.startswith("::", pos):
            yield segments
            return
        pos += 2


def _group(text: str, brace: int, prefix: list[str]) -> Iterator[list[str]]:
    depth, start = 0, brace + 1
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
        if (text[i] == "," and depth == 1) or depth == 0:
            item = text[start:i].strip()
            if item and item != "self":
                for tail in _paths_after(item, 0):
                    yield [*prefix, *tail]
            elif item == "self":
                yield prefix
            start = i + 1
            if depth == 0:
                return


def _resolve(path: list[str], modules: set[Module]) -> Module | None:
    """The longest prefix of ``path`` that is a module."""
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in modules:
            return tuple(path[:n])
    return () if path else None


def module_graph(src: Path) -> dict[Module, dict[Module, str]]:
    """module -> {module it names: where (file:line)}; self-references left out."""
    files = {module_of(p, src): p for p in sorted(src.rglob("*.rs"))}
    modules = set(files)
    graph: dict[Module, dict[Module, str]] = {m: {} for m in modules}
    for module, path in files.items():
        text = code(path)
        children = set(_CHILD.findall(text))
        starts = [(m.start(), m.group(1), m.end()) for m in _references(text, children)]
        for start, root, end in starts:
            if root == "crate":
                base: list[str] = []
            elif root == "super":
                base = list(module[:-1])
            elif root == "self":
                base = list(module)
            else:  # a child named bare
                base, end = list(module), start
            for tail in _paths_after(text, end):
                target = _resolve(base + tail, modules)
                if target is not None and target != module:
                    line = text.count("\n", 0, start) + 1
                    graph[module].setdefault(target, f"{path.relative_to(src)}:{line}")
    return graph


def _references(text: str, children: set[str]) -> Iterator[re.Match[str]]:
    yield from _ROOTED.finditer(text)
    if children:
        bare = re.compile(r"(?<![\w:])(" + "|".join(sorted(children)) + r")::")
        yield from bare.finditer(text)


def stage_graph(graph: dict[Module, dict[Module, str]]) -> dict[Module, dict[Module, str]]:
    """The same edges between top-level modules (the crate root left out)."""
    out: dict[Module, dict[Module, str]] = {}
    for module, targets in graph.items():
        if not module:
            continue
        out.setdefault(module[:1], {})
        for target, where in targets.items():
            if target and target[:1] != module[:1]:
                out[module[:1]].setdefault(target[:1], where)
    return out


def cycles(graph: dict[Module, dict[Module, str]]) -> list[list[str]]:
    """Each circle found (as 'a -> b (file:line)' steps), by depth-first search."""
    found: list[list[str]] = []
    state: dict[Module, int] = {}  # 1: on the current path, 2: done
    path: list[Module] = []

    def visit(node: Module) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == 1:
                loop = [*path[path.index(target) :], target]
                found.append(
                    [f"{_name(a)} -> {_name(b)} ({graph[a][b]})" for a, b in pairwise(loop)]
                )
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _name(module: Module) -> str:
    return "::".join(("crate", *module))


def test_the_scan_sees_the_crate() -> None:
    graph = module_graph(SRC)
    assert ("kafka", "summary") in graph[("rows", "tables")]
    assert ("kafka", "model") in graph[("kafka", "summary")]
    assert ("python", "exchange") in graph[("python",)]  # a child named bare
    assert ("cursor",) in graph[("kafka", "header")]
    assert len(graph) > 30


def test_the_native_modules_form_no_circle() -> None:
    assert cycles(module_graph(SRC)) == []


def test_the_native_stages_form_no_circle() -> None:
    stages = stage_graph(module_graph(SRC))
    assert {("capture",), ("tcp",), ("tls",), ("kafka",), ("rows",)} <= set(stages)
    assert cycles(stages) == []


def test_a_circle_is_found_whatever_way_it_is_written(tmp_path: Path) -> None:
    (tmp_path / "lib.rs").write_text("pub mod a;\npub mod b;\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "mod.rs").write_text(
        "pub mod inner;\n// crate::b is named in a comment only\npub fn f() { inner::g() }\n"
    )
    (tmp_path / "a" / "inner.rs").write_text(
        "use crate::{b::{self}, a::inner as me};\npub fn g() { b::h() }\n"
        "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::b::x;\n}\n"
    )
    (tmp_path / "b.rs").write_text('pub fn h() { let _ = "crate::a"; super::a::f() }\n')
    graph = module_graph(tmp_path)
    assert graph[("a",)] == {("a", "inner"): "a/mod.rs:3"}
    assert set(graph[("a", "inner")]) == {("b",)}
    assert set(graph[("b",)]) == {("a",)}
    assert cycles(graph) == [
        [
            "crate::a -> crate::a::inner (a/mod.rs:3)",
            "crate::a::inner -> crate::b (a/inner.rs:1)",
            "crate::b -> crate::a (b.rs:1)",
        ]
    ]
    assert cycles(stage_graph(graph)) == [
        ["crate::a -> crate::b (a/inner.rs:1)", "crate::b -> crate::a (b.rs:1)"]
    ]
