"""captures/README.md is what its generator writes (``python -m scripts.testbed.readme``):
the template ``scripts/testbed/captures_readme.md.in`` with the mixed capture's ledger
summary and tshark's counts filled in. A section written into the README alone is lost
the next time the generator runs, so both are edited together."""

from __future__ import annotations

import shutil

import pytest

from scripts.testbed.readme import REPO_ROOT, render


def test_the_readme_is_the_rendered_template() -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (scripts/run-tests installs it)")
    written = (REPO_ROOT / "captures" / "README.md").read_text()
    assert written == render().rstrip("\n") + "\n"
