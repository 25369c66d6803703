"""Shared test fixtures: where the conformance captures are, and the tshark oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"
# Third-party captures provided beside the checkout; never copied into the repo.
SHARED_CAPTURES = REPO.parent / "shared" / "captures"


@pytest.fixture(scope="session")
def shared_captures() -> Path:
    if not SHARED_CAPTURES.is_dir():
        pytest.skip(f"conformance captures not present: {SHARED_CAPTURES} (../shared/captures)")
    return SHARED_CAPTURES


@pytest.fixture(scope="session")
def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (apt-get install tshark); it is the oracle here")
    return path
