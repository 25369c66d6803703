"""Holes in a TLS stream (lost segments): decryption goes on after them.

A real TLS capture (``captures/tls``) cut into 64-byte TCP segments (a record spans
several, as on a network with loss), segments then removed with editcap; the oracle is
the whole capture, analysed the same way. Which TLS records a removed segment touched is
found here from the segments' own bytes (record headers walked from each direction's
first byte), not by the dissector: a hole inside one record costs that record, a hole
from a record's first byte on costs every record it touches, and each pair after the
hole is the whole capture's pair.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

import dissector
from tests import field_transforms as ft

TLS = Path(__file__).resolve().parents[1] / "captures" / "tls"
MSS = 64
BROKER_PORT = 9095


@dataclass
class Direction:
    """One TCP direction: its bytes, and where each segment and each TLS record lies."""

    sport: int
    dport: int
    data: bytearray = field(default_factory=bytearray)
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # frame, start, end
    records: list[tuple[int, int]] = field(default_factory=list)  # start, end

    def walk_records(self) -> None:
        at = 0
        while at + 5 <= len(self.data):
            end = at + 5 + struct.unpack_from("!H", self.data, at + 3)[0]
            self.records.append((at, end))
            at = end


def layout(frames: list[ft.Frame]) -> list[Direction]:
    dirs: dict[bytes, Direction] = {}
    for i, (_ts, f) in enumerate(frames):
        lay = ft._tcp_layout(f)
        size = ft.tcp_payload_len(f)
        if lay is None or size == 0:
            continue
        ip, tcp, data = lay
        key = f[ip + 12 : ip + 20] + f[tcp : tcp + 4]
        d = dirs.setdefault(key, Direction(*struct.unpack_from("!HH", f, tcp)))
        d.segments.append((i, len(d.data), len(d.data) + size))
        d.data += f[data : data + size]
    for d in dirs.values():
        d.walk_records()
    return list(dirs.values())


def server_segment(
    dirs: list[Direction], where: str, late: slice = slice(-6, -2)
) -> tuple[Direction, int, int]:
    """A broker-side segment of an application record (``late``: which of the
    connection's records; the handshake's take at most the first 7): inside a record's
    body, or starting a record. (direction, segment index in it, records it touches)."""
    for d in dirs:
        if d.sport != BROKER_PORT or len(d.records) < 14:
            continue
        for n, (_i, s, e) in enumerate(d.segments):
            for rs, re_ in d.records[late]:
                inside = rs + 5 <= s and e < re_
                head = s == rs and e < re_
                if (where == "inside" and inside) or (where == "head" and head):
                    touched = sum(1 for a, b in d.records if a < e and s < b)
                    return d, n, touched
    raise AssertionError(f"no {where} segment in the capture")


def editcap(whole: Path, out: Path, frames: list[int]) -> Path:
    tool = shutil.which("editcap")
    if tool is None:
        pytest.skip("editcap is not installed (scripts/run-tests installs it)")
    subprocess.run([tool, str(whole), str(out), *(str(i + 1) for i in frames)], check=True)
    return out


@pytest.fixture(scope="module", params=["tls13-kafka-python", "tls12-kafka-python"])
def capture(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[ft.Frame], Path, pd.DataFrame]:
    name = request.param
    frames = ft.resegment(ft.read_frames(TLS / f"{name}.pcapng"), MSS)
    whole = ft.write_pcap(tmp_path_factory.mktemp(name) / "whole.pcap", frames)
    df = dissector.analyze(whole, tls_keylog=TLS / f"{name}.keys")
    assert df.attrs["counters"]["tls_decrypted_connections"] == 7
    return name, frames, whole, df


def _pairs(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["client_port", "correlation_id", "api_key", "status", "request_time"]
    return df[cols].astype({"status": str}).set_index(["client_port", "correlation_id"])


def _compare(whole: pd.DataFrame, damaged: pd.DataFrame, port: int, lost: int) -> None:
    """Every pair of the whole capture is there; on the holed connection at most
    ``lost`` (one per record lost) lost their response in the hole (``response_lost``,
    flagged capture_gap: never a plain ``unanswered``), and those after the hole are the
    whole capture's, the first flagged capture_gap."""
    w, d = _pairs(whole).sort_index(), _pairs(damaged).sort_index()
    assert list(w.index) == list(d.index)
    changed = w.index[(w["status"] != d["status"]) | (w["api_key"] != d["api_key"])]
    assert 1 <= len(changed) <= lost
    assert {p for p, _ in changed} == {port}
    assert set(d.loc[changed, "status"]) == {"response_lost"}
    flags = damaged.set_index(["client_port", "correlation_id"]).loc[changed, "flags"]
    assert all("capture_gap" in list(f) for f in flags)
    conn = damaged[damaged["client_port"] == port].sort_values("correlation_id")
    after = conn[conn["correlation_id"] > max(c for _, c in changed)]
    assert len(after) >= 1  # decryption went on: later pairs decoded and answered
    assert set(after["status"]) <= {"ok", "error"}
    assert "capture_gap" in list(after["flags"].iloc[0])


@pytest.mark.parametrize("where", ["inside", "head"])
def test_decryption_goes_on_after_a_lost_segment(
    capture: tuple[str, list[ft.Frame], Path, pd.DataFrame], where: str, tmp_path: Path
) -> None:
    name, frames, whole, whole_df = capture
    d, n, touched = server_segment(layout(frames), where)
    frame = d.segments[n][0]
    damaged = dissector.analyze(
        editcap(whole, tmp_path / "holed.pcap", [frame]), tls_keylog=TLS / f"{name}.keys"
    )
    c = damaged.attrs["counters"]
    assert c["tcp_gaps"] == 1
    assert c["tls_gaps"] == 1
    assert c["tls_records_lost"] == touched == 1
    assert c["tls_decrypted_connections"] == c["tls_connections"] == 7
    assert "tls_capture_gap" not in c
    port = int(damaged.loc[damaged["status"] == "response_lost", "client_port"].iloc[0])
    _compare(whole_df, damaged, port, touched)


def test_a_hole_over_several_records_costs_each_of_them(
    capture: tuple[str, list[ft.Frame], Path, pd.DataFrame], tmp_path: Path
) -> None:
    name, frames, whole, whole_df = capture
    d, n, _ = server_segment(layout(frames), "head", slice(7, -6))
    # From a record's first byte to past the next record's header: a whole record and
    # the head of the next go (their boundary, and the sequence, lost with them).
    start = d.segments[n][1]
    next_start = next(b for a, b in d.records if a == start)
    cut = [(i, e) for i, s, e in d.segments if s >= start and s <= next_start]
    gone = [i for i, _ in cut]
    end = max(e for _, e in cut)
    touched = sum(1 for a, b in d.records if a < end and start < b)
    assert touched >= 2
    damaged = dissector.analyze(
        editcap(whole, tmp_path / "holed.pcap", gone), tls_keylog=TLS / f"{name}.keys"
    )
    c = damaged.attrs["counters"]
    assert c["tls_gaps"] == 1
    assert c["tls_records_lost"] == touched
    assert c["tls_decrypted_connections"] == 7
    port = int(damaged.loc[damaged["status"] == "response_lost", "client_port"].iloc[0])
    _compare(whole_df, damaged, port, touched)


def test_a_hole_in_the_handshake_ends_the_connections_decryption(
    capture: tuple[str, list[ft.Frame], Path, pd.DataFrame], tmp_path: Path
) -> None:
    """Before the application keys are in use the record sequence cannot be found
    again: that connection is counted once as tls_capture_gap, the others decrypted."""
    name, frames, whole, whole_df = capture
    d = next(d for d in layout(frames) if d.sport == BROKER_PORT and len(d.records) >= 14)
    first_end = d.records[0][1]  # the ServerHello record; the next ones are the handshake's
    frame = next(i for i, s, _e in d.segments if s >= first_end + MSS)
    damaged = dissector.analyze(
        editcap(whole, tmp_path / "holed.pcap", [frame]), tls_keylog=TLS / f"{name}.keys"
    )
    c = damaged.attrs["counters"]
    assert c["tls_capture_gap"] == 1
    assert c["tls_decrypted_connections"] == 6
    # That connection keeps only requests decrypted before the hole (its later bytes are
    # counted, not guessed at); their responses went into what could not be decrypted,
    # so they are response_lost with capture_gap, never plainly unanswered. The other
    # connections' pairs are all there.
    mine = damaged[damaged["client_port"] == d.dport]
    assert 0 < len(mine) < (whole_df["client_port"] == d.dport).sum()
    assert set(mine["status"].astype(str)) == {"response_lost"}
    assert all("capture_gap" in list(f) for f in mine["flags"])
    rest = whole_df[whole_df["client_port"] != d.dport]
    others = damaged[damaged["client_port"] != d.dport]
    assert _pairs(rest).sort_index().equals(_pairs(others).sort_index())
