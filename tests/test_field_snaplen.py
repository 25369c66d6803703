"""Snap-length captures (``tcpdump -s N``), against the whole original capture.

Oracle: ``captures/kafka-4-mixed.pcapng`` read whole, and the same file cut by
``editcap -s N`` (Wireshark's tool, independent of this project). Every frame header
(size, api key, version, correlation id) lies in the captured bytes at 96, 128 and 512
bytes a packet on this loopback capture (66 bytes of Ethernet, IP and TCP headers with
timestamps), so every pair must still be found and timed by ``orig_len`` and TCP
sequence arithmetic: the same pairs, statuses ``unanswered`` exactly where the original
has them, the same sizes and latencies; the rows a cut touched flagged ``truncated`` and
their cut side named in ``decode_error``; the bytes not captured counted. What the
captured bytes of a cut body hold is decoded: its error code (status ``error``) or,
when none is read there, status ``unknown``; the topics named (of a cut request too:
each topic of the original whose name or id lies whole in the captured bytes, and no
other). tshark's reading of the same cut copy is the second oracle.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from dissector.options import Options
from dissector.wire.core import iter_exchanges
from tests import tshark_kafka as tsk

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
    whole: pd.DataFrame, snaplen: int, tmp_path: Path, tshark: str, tshark_whole: tsk.Messages
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
        # as objects: the status categories differ (a cut copy has `unknown` too)
        assert a.loc[untouched, col].astype(object).equals(b.loc[untouched, col].astype(object))
    assert not b["flags"].map(lambda f: "capture_gap" in list(f)).any()
    counters = got.attrs["counters"]
    assert counters["snaplen_truncated"] > 0 and counters["tcp_gap_bytes"] > 0
    assert "resyncs" not in counters and "resync_skipped_bytes" not in counters
    check_cut_rows(a.loc[flagged[flagged].index], b[flagged], notes[flagged])
    # tshark's reading of the same cut copy: the pairs it makes are ours, and any error
    # code it reads there we read too (where it decodes that API as we do: checked on
    # the whole original, since its Kafka dissector misreads some newer versions).
    tsk.agrees(tshark, cut, got)
    seen = tsk.read(tshark, cut, [9092])
    for key, resp in seen.responses.items():
        name = f"{key[0]}/{key[1]}"
        if name not in b.index or not any(resp.errors):
            continue
        before, row = a.loc[name], b.loc[name]
        read_whole = tshark_whole.responses.get(key)
        if read_whole is None or not _tshark_reads_like_us(read_whole.errors, before):
            continue
        assert row["status"] == "error", f"{name}: tshark reads error {resp.errors} in the cut copy"
        assert row["error_code"] in resp.errors or row["error_code"] == before["error_code"]


def _tshark_reads_like_us(errors: tuple[int, ...], row: pd.Series) -> bool:
    """tshark's error codes of a whole response say what our row says."""
    nonzero = [e for e in errors if e]
    if row["status"] == "error":
        return row["error_code"] in nonzero
    return row["status"] == "ok" and not nonzero


def check_cut_rows(before: pd.DataFrame, cut: pd.DataFrame, notes: pd.Series) -> None:
    """The rows a snap length cut, against the original's: a response cut short is
    `error` with the original's code when an error code lies in its captured bytes,
    else `unknown` (never `ok`: the cut bytes may hold one); a row whose response was
    captured whole keeps the original's status and code; the topics read in captured
    bytes are the original's (or a topic id whose naming response was cut)."""
    errors_found = errors_cut = 0
    for key, row in cut.iterrows():
        o = before.loc[key]
        if o["status"] == "unanswered":
            assert row["status"] == "unanswered", key
        elif "response_incomplete" in notes[key]:
            assert row["status"] in ("error", "unknown"), (key, row["status"])
            errors_cut += o["status"] == "error"
            if row["status"] == "error":
                assert o["status"] == "error" and row["error_code"] == o["error_code"], key
                errors_found += 1
            else:
                assert pd.isna(row["error_code"]), key
            assert pd.isna(row["error_count"]), key  # the cut bytes may hold more
        else:
            assert row["status"] == o["status"], key
            assert row["error_code"] == o["error_code"], key
        for topic in row["topics"]:
            assert topic in list(o["topics"]) or UUID.fullmatch(topic), (key, topic)
    # Error codes lie in captured bytes for some of the responses cut (96 bytes a
    # packet: 15 of 29; 128: 20 of 26; 512 cuts no response with an error).
    assert errors_found > 0 or errors_cut == 0


UUID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def tshark_whole(tshark: str) -> tsk.Messages:
    return tsk.read(tshark, ORIGINAL, [9092])


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            yield from _dicts(v)


def _written(name: str, prefix: bytes, topic_id: str | None) -> bool:
    """Do the captured bytes hold this topic whole: its name as a Kafka string (int16
    length, or a compact string's length + 1 as one varint byte), or its id's 16 bytes?"""
    text = name.encode()
    forms = [struct.pack(">h", len(text)) + text]
    if len(text) < 127:
        forms.append(bytes([len(text) + 1]) + text)
    if topic_id is not None:
        forms.append(uuid.UUID(topic_id).bytes)
    return any(form in prefix for form in forms)


@pytest.mark.skipif(EDITCAP is None, reason="editcap (Wireshark) is not installed")
@pytest.mark.parametrize("snaplen", [96, 128, 512])
def test_cut_requests_name_the_topics_in_their_captured_bytes(
    whole: pd.DataFrame, snaplen: int, tmp_path: Path
) -> None:
    """A request cut by the snap length names the topics its captured bytes hold: the
    original's topics (a topic id whose naming response was cut stays an id, of one of
    them), each of them whose name or id lies whole in those bytes, the same in the
    pairs table (native core) and in ``decode`` (the Python decoder)."""
    assert EDITCAP is not None
    cut = tmp_path / f"s{snaplen}.pcapng"
    subprocess.run([EDITCAP, "-s", str(snaplen), str(ORIGINAL), str(cut)], check=True)
    a, b = _keyed(whole), _keyed(dissector.analyze(cut))
    lines = {f"{d['stream']}/{d['correlation_id']}": d for d in dissector.decode(cut)}
    # The ids the original names (responses of Metadata, CreateTopics, ...).
    names: dict[str, str] = {}
    for d in dissector.decode(ORIGINAL):
        for item in _dicts(d["response"]):
            tid, name = item.get("topic_id"), item.get("name")
            if isinstance(tid, str) and isinstance(name, str) and uuid.UUID(tid).int:
                names[tid] = name  # (the zero id stands for "no id")
    ids = {name: tid for tid, name in names.items()}

    def payloads(path: Path) -> dict[str, bytes]:
        return {
            f"{ex.stream}/{ex.correlation_id}": ex.request.payload
            for _, ex in iter_exchanges([str(path)], Options())
            if ex.request is not None and ex.correlation_id is not None
        }

    whole_bytes, cut_bytes = payloads(ORIGINAL), payloads(cut)
    checked = named = 0
    for key, row in b.iterrows():
        if "request_incomplete" not in str(row["decode_error"]):
            continue
        topics = list(row["topics"])
        assert topics == lines[key]["summary"]["topics"], key  # native == Python
        want = list(a.loc[key, "topics"])
        assert {names.get(t, t) for t in topics} <= set(want), (key, topics, want)
        prefix = cut_bytes[key]
        assert whole_bytes[key].startswith(prefix), key  # the captured bytes, as sent
        # The body: after api key, version, correlation id and client id (which may
        # spell a topic's name, as clients name themselves after theirs).
        client_id = struct.unpack_from(">h", prefix, 8)[0] if len(prefix) >= 10 else 0
        body = prefix[10 + max(client_id, 0) :]
        for topic in want:
            if _written(topic, body, ids.get(topic)):
                assert topic in topics or ids.get(topic) in topics, (key, topic, topics)
                named += 1
        checked += 1
    # 96 bytes a packet leave 30 of Kafka: no request body there holds a whole topic;
    # 128: 74 topics of 225 cut requests; 512: the 3 cut requests' topics.
    assert checked > 0 and (named > 0 or snaplen == 96), (checked, named)
