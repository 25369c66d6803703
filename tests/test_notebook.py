"""notebooks/: every notebook runs top to bottom in a fresh kernel (nbclient), and is
committed with the outputs of such a run, so that its charts show when it is browsed.

The kernel is this interpreter (a kernelspec written to a temporary JUPYTER_PATH),
so the test needs no `ipykernel install` and sees the same installed packages.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL_NAME = "kafka-dissector-test"
TIME_LIMIT_S = 120  # the walkthrough is meant to take well under 30 s


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_is_a_walkthrough_notebook() -> None:
    assert [p.name for p in _notebooks()] == ["analyse-a-capture.ipynb"]


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pytest.importorskip("ipykernel", reason="ipykernel runs the notebook (pip install ipykernel)")
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kafka-dissector test",
        "language": "python",
        # This checkout's dissector, even where another copy is installed.
        "env": {"PYTHONPATH": str(NOTEBOOKS.parent)},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    # Keep the kernel's runtime files out of the user's home.
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    return KERNEL_NAME


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, kernel: str) -> None:
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    # Run from scratch: the committed outputs must not stand in for this run's.
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=TIME_LIMIT_S,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.monotonic()
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    elapsed = time.monotonic() - start
    assert elapsed < TIME_LIMIT_S
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # four dissector charts and one pandas plot
    tables = [o for o in outputs if "text/html" in o.get("data", {})]
    assert len(tables) >= 8
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "TCP connections" in text
    assert "tcp.stream ==" in text


# An absolute path of the machine that ran the notebook (POSIX home, temp or work
# directories, or a Windows drive): outputs must show paths relative to notebooks/.
ABSOLUTE_PATH = re.compile(r"/(?:home|root|tmp|work|Users)/|\b[A-Z]:\\")


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_is_committed_with_the_outputs_of_one_run(path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # One run, top to bottom, in a fresh kernel: counts 1, 2, 3... with no gaps.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # the charts a reader sees on the repository's page
    text = json.dumps([o for o in outputs])
    assert not ABSOLUTE_PATH.findall(text)  # run from notebooks/, paths relative
    # The cells that show long polls and queueing ran with the code they show.
    assert "service:" in text and "queue_total_ms" in text
