"""The bundled captures decode with the shipped specs alone (issue #22, Done when): no row
says ``unsupported_version`` without ``--specs``. The one request of a version no Kafka has
(the raw driver's ApiVersions v99 probe) was refused by the broker (KIP-511): its row is
``version_refused``, once per probe the drivers' ledgers record, with the broker's error.
TLS captures are read with the key logs recorded beside them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "captures"
PROBE_OP = "api_versions_unsupported_version"  # scripts/testbed/raw_driver.py


def _bundled() -> list[Path]:
    return sorted([*CAPTURES.glob("*.pcap*"), *CAPTURES.glob("tls/*.pcap*")])


def _analyze(capture: Path) -> pd.DataFrame:
    keys = capture.with_suffix(".keys")
    return dissector.analyze(capture, tls_keylog=[keys] if keys.exists() else ())


def _operations(ledger: Any) -> Iterator[dict[str, Any]]:
    for driver in ledger.get("drivers", []):
        yield from driver.get("operations", [])


@pytest.mark.parametrize("capture", _bundled(), ids=lambda p: p.relative_to(CAPTURES).as_posix())
def test_no_bundled_row_needs_newer_specs(capture: Path) -> None:
    df = _analyze(capture)
    errors = df["decode_error"].astype("string")
    assert not errors.str.contains("unsupported_version", regex=False, na=False).any(), capture
    assert not errors.str.contains("unknown_api_key", regex=False, na=False).any(), capture
    refused = df[errors.str.contains("version_refused", regex=False, na=False)]
    ledger_path = capture.with_name(capture.name.removesuffix(".pcapng") + ".drivers.json")
    probes = []
    if ledger_path.exists():
        ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
        probes = [op for op in _operations(ledger) if op.get("op") == PROBE_OP]
    assert sorted(refused["client_id"]) == sorted(op["client_id"] for op in probes)
    for op in probes:
        [row] = refused[refused["client_id"] == op["client_id"]].itertuples()
        assert row.api_version == op["detail"]["request_version"]
        assert row.status == "error" and row.error_name == "UNSUPPORTED_VERSION"
        assert row.decode_error.split("; ") == [row.decode_error]  # one part: the request's
        assert op["detail"]["response_error_code"] == 35


def test_the_bundled_probe_is_there() -> None:
    """The test above would pass on captures without any probe: one must be bundled."""
    df = _analyze(CAPTURES / "kafka-4-mixed.pcapng")
    assert df["decode_error"].str.contains("version_refused", na=False).sum() == 1
