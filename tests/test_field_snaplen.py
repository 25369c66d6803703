"""Snap-length captures (``tcpdump -s N``), against the whole original capture.

Oracle: ``captures/kafka-4-mixed.pcapng`` read whole, and the same file cut by
``editcap -s N`` (Wireshark's tool, independent of this project). Every frame header
(size, api key, version, correlation id) lies in the captured bytes at 96, 128 and 512
bytes a packet on this loopback capture (66 bytes of Ethernet, IP and TCP headers with
timestamps), so every pair must still be found and timed by ``orig_len`` and TCP
sequence arithmetic: the same pairs, statuses ``unanswered`` exactly where the original
has them, the same sizes and latencies; the rows a cut touched flagged ``truncated`` and
their cut side named in ``decode_error``; the bytes not captured counted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import dissector

REPO = Path(__file__).resolve().parents[1]
ORIGINAL = REPO / "captures" / "kafka-4-mixed.pcapng"
EDITCAP = shutil.which("editcap")


@pytest.fixture(scope="module")
def whole() -> pd.DataFrame:
    return dissector.analyze(ORIGINAL)


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    key = df["stream"].astype(str) + "/" + df["correlation_id"].astype("string").fillna("-")
    return df.assign(key=key).set_index("key")


@pytest.mark.skipif(EDITCAP is None, reason="editcap (Wireshark) is not installed")
@pytest.mark.parametrize("snaplen", [96, 128, 512])
def test_snap_length_capture_gives_every_pair(
    whole: pd.DataFrame, snaplen: int, tmp_path: Path
) -> None:
    assert EDITCAP is not None
    cut = tmp_path / f"s{snaplen}.pcapng"
    subprocess.run([EDITCAP, "-s", str(snaplen), str(ORIGINAL), str(cut)], check=True)
    got = dissector.analyze(cut)
    assert len(got) == len(whole)
    a, b = _keyed(whole), _keyed(got)
    assert a.index.is_unique and b.index.is_unique
    b = b.loc[a.index]
    # The same pairs: answered where the original is, sizes and times by sequence numbers.
    assert ((a["status"] == "unanswered") == (b["status"] == "unanswered")).all()
    for col in ("api_key", "api_version", "request_size", "response_size"):
        assert a[col].equals(b[col]), col
    both = a["latency_ms"].notna()
    assert b["latency_ms"].notna().equals(both)
    assert ((a["latency_ms"] - b["latency_ms"]).abs()[both] < 1e-6).all()
    # What a cut touched says so, and nothing else does.
    flagged = b["flags"].map(lambda f: "truncated" in list(f)).astype(bool)
    notes = b["decode_error"].astype("string").fillna("")
    incomplete = notes.str.contains("request_incomplete|response_incomplete").astype(bool)
    assert (flagged == incomplete).all()
    assert flagged.sum() > 0
    untouched = ~flagged
    for col in ("status", "error_code", "records", "topics"):
        assert a.loc[untouched, col].equals(b.loc[untouched, col]), col
    assert not b["flags"].map(lambda f: "capture_gap" in list(f)).any()
    counters = got.attrs["counters"]
    assert counters["snaplen_truncated"] > 0 and counters["tcp_gap_bytes"] > 0
    assert "resyncs" not in counters and "resync_skipped_bytes" not in counters
