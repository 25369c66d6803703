"""The package layout and the import graph agree with the README's "Layout" table.

The rank of each stage folder is read from that table (the test holds no copy of it),
every module under ``dissector/`` is parsed with ``ast``, and every import, at module
level or inside a function, must point to the same folder or to a lower rank. Folders
of equal rank (live, spark) must not import each other, the facade must not import the
CLI, and no shipped module may import the test oracle. Within a folder too, the modules
import each other without a circle.
"""

from __future__ import annotations

import ast
import graphlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dissector"
README = ROOT / "README.md"

# A row of the README table: | `dissector/protocol/` | 1 | protocol | ... |
_ROW = re.compile(r"^\|\s*`dissector/([a-z_]*/?)[^`]*`\s*\|\s*(\d+|-)\s*\|\s*([a-z]+)\s*\|")
_TOP = ""  # the folder key of the top-level modules (``dissector/*.py``)
_FACADE = "__init__"
_NATIVE = "_core"  # the compiled core, built by maturin into dissector._core


@dataclass(frozen=True)
class Rank:
    folder: str  # "protocol", "" for top-level modules, "__init__" for the facade
    rank: int | None  # None: the facade, which may reach any folder but the CLI
    stage: str


def readme_ranks(text: str) -> dict[str, Rank]:
    """The Layout section's table: folder -> rank."""
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    ranks: dict[str, Rank] = {}
    for line in section.splitlines():
        m = _ROW.match(line)
        if m is None:
            continue
        path, rank, stage = m.groups()
        folder = path.rstrip("/")
        if folder == "__init__.py":
            folder = _FACADE
        ranks[folder] = Rank(folder, None if rank == "-" else int(rank), stage)
    return ranks


def _package_of(path: Path, root: Path = ROOT) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1]


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it sits
    (module level, inside functions, under ``if TYPE_CHECKING:``); ``root``: the folder
    that holds the ``dissector`` package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package_of(path, root)
                base = pkg[: len(pkg) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # ``from dissector import wire`` imports the sub-package, not the facade
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                if _is_module(candidate, root):
                    out.append((node.lineno, candidate))
                else:
                    out.append((node.lineno, module))
    return out


def _is_module(name: str, root: Path = ROOT) -> bool:
    parts = name.split(".")
    if parts[0] != "dissector" or len(parts) < 2:
        return False
    if parts[1] == _NATIVE:
        return True
    target = root.joinpath(*parts)
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def folder_of_module(name: str) -> str:
    """Folder key of a ``dissector`` module name."""
    parts = name.split(".")
    if len(parts) == 1:
        return _FACADE
    if parts[1] == _NATIVE:
        return "wire"  # the compiled half of the wire stage
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return _TOP


def folder_of_file(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    if rel.parts == ("__init__.py",):
        return _FACADE
    return rel.parts[0] if len(rel.parts) > 1 else _TOP


def shipped_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def violations(ranks: dict[str, Rank]) -> list[str]:
    found: list[str] = []
    for path in shipped_modules():
        here = ranks[folder_of_file(path)]
        for line, module in imported_modules(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if module == "tests" or module.startswith("tests."):
                found.append(f"{where}: the test oracle is not shipped")
                continue
            if module != "dissector" and not module.startswith("dissector."):
                continue
            there = ranks[folder_of_module(module)]
            if there.folder == here.folder or (there.folder == _FACADE and module == "dissector"):
                continue  # same folder; or a facade attribute such as __version__
            if here.rank is None:  # the facade
                if there.stage == "cli":
                    found.append(f"{where}: the public API must not depend on the CLI")
                continue
            if there.rank is None:
                found.append(f"{where}: stage modules import stages, not the facade")
            elif there.rank > here.rank:
                found.append(
                    f"{where}: upward ({here.stage} {here.rank} -> {there.stage} {there.rank})"
                )
            elif there.rank == here.rank:
                found.append(f"{where}: {here.stage} and {there.stage} are siblings")
    return found


@pytest.fixture(scope="module")
def ranks() -> dict[str, Rank]:
    return readme_ranks(README.read_text(encoding="utf-8"))


def test_readme_table_names_every_folder(ranks: dict[str, Rank]) -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    listed = {f for f in ranks if f not in (_TOP, _FACADE)}
    assert folders - listed == set(), "folders missing from the README Layout table"
    assert listed - folders == set(), "README Layout rows naming no folder"
    assert {_TOP, _FACADE} <= set(ranks)


def test_no_upward_or_sibling_imports(ranks: dict[str, Rank]) -> None:
    assert violations(ranks) == []


def test_checker_sees_imports_inside_functions(tmp_path: Path) -> None:
    # The checker must not be blind to lazy imports, the usual way upward imports hide.
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from dissector.cli import app\n    import tests.oracle\n")
    found = [m for _, m in imported_modules(src)]
    assert "dissector.cli.app" in found
    assert "tests.oracle" in found


def test_ranks_order_the_stages(ranks: dict[str, Rank]) -> None:
    # The order the README promises: vocabulary < protocol < wire < table < analytics
    # < live, spark < cli.
    r = {k: v.rank for k, v in ranks.items()}
    assert r[_TOP] < r["protocol"] < r["wire"] < r["table"] < r["analytics"]
    assert r["analytics"] < r["live"] == r["spark"] < r["cli"]


# ---------------------------------------------------------------- no import circle
#
# The graph has an edge for every import statement of a shipped module, wherever it
# sits: at module level, inside a function (a lazy import closes a circle as surely as
# one at the top, it only hides it until the function runs), and under ``if
# TYPE_CHECKING:``. Those never run, so they cannot fail an import; they are counted
# anyway because they are dependencies all the same: the annotations name the other
# module's types (``typing.get_type_hints`` imports them), and two modules that need
# each other's types cannot be read, tested or moved one without the other. A module
# does not get an edge to the packages above it (importing ``dissector.wire.core``
# runs ``dissector/wire/__init__.py`` first, which is already importing when one of
# its modules runs); an import of a name from a package's ``__init__`` is an edge to it.


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules among ``paths`` it imports (see above)."""
    names = {module_name(p, root): p for p in paths}
    return {
        name: {m for _, m in imported_modules(path, root) if m in names and m != name}
        for name, path in names.items()
    }


def import_circle(graph: dict[str, set[str]]) -> list[str]:
    """A circle of ``graph`` (its first module repeated at the end), or [] when none."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_import_circle() -> None:
    graph = import_graph(shipped_modules())
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # it read the package
    assert import_circle(graph) == [], "move what both need into a module below them"


def test_circle_check_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "dissector" / "wire"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "dissector" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "a.py").write_text("from dissector.wire import b\n")
    (pkg / "b.py").write_text("def f():\n    from dissector.wire.c import g\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
    )
    (pkg / "d.py").write_text("from dissector.wire import a\n")  # outside the circle
    graph = import_graph(sorted(tmp_path.rglob("*.py")), tmp_path)
    assert graph["dissector.wire.a"] == {"dissector.wire.b"}
    assert graph["dissector.wire.c"] == {"dissector.wire.a"}
    circle = import_circle(graph)
    assert circle[0] == circle[-1]
    assert set(circle) == {"dissector.wire.a", "dissector.wire.b", "dissector.wire.c"}
    graph["dissector.wire.c"] = set()
    assert import_circle(graph) == []
