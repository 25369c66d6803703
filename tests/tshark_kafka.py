"""tshark's reading of a capture's Kafka messages, as a second oracle for damaged copies.

Wireshark's Kafka dissector frames each TCP stream itself, pairs a response with its
request by correlation id (``kafka.request_frame``) and lists every error code it
decodes (``kafka.error``). The field tests compare the pairs the dissector finds in a
copy with packets removed or cut by a snap length with what tshark finds in that same
copy, beside the whole original capture.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

FIELDS = (
    "frame.number",
    "tcp.stream",
    "tcp.srcport",
    "kafka.correlation_id",
    "kafka.request_key",
    "kafka.api_version",
    "kafka.request_frame",
    "kafka.error",
)


@dataclass(frozen=True, slots=True)
class Request:
    frame: int
    api_key: int
    api_version: int


@dataclass(frozen=True, slots=True)
class Response:
    frame: int
    request_frame: int | None  # None: tshark found no request for it
    errors: tuple[int, ...]  # every error code tshark decoded, in order


@dataclass(frozen=True, slots=True)
class Messages:
    """By (tcp.stream, correlation id): the requests and the responses tshark found."""

    requests: dict[tuple[int, int], Request]
    responses: dict[tuple[int, int], Response]

    def answered(self, key: tuple[int, int]) -> bool:
        """tshark found the request and, after it, a response with its correlation id
        (tshark links some of them only: ``request_frame`` is left empty for versions
        its dissector does not decode)."""
        resp = self.responses.get(key)
        req = self.requests.get(key)
        return resp is not None and req is not None and resp.frame > req.frame


def _ints(cell: str) -> list[int]:
    return [int(v) for v in cell.split(",") if v]


def read(tshark: str, path: Path, broker_ports: Iterable[int]) -> Messages:
    """Every Kafka message tshark decodes in ``path`` (one per correlation id and
    direction: a frame carrying several messages gives each its own entry)."""
    ports = sorted(set(broker_ports))
    decode_as = [a for p in ports for a in ("-d", f"tcp.port=={p},kafka")]
    fields = [a for f in FIELDS for a in ("-e", f)]
    out = subprocess.run(
        [
            tshark,
            "-n",
            "-r",
            str(path),
            *decode_as,
            "-Y",
            "kafka",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            *fields,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    requests: dict[tuple[int, int], Request] = {}
    responses: dict[tuple[int, int], Response] = {}
    for line in out.splitlines():
        frame, stream, sport, ids, keys, versions, req_frames, errors = line.split("\t")
        corr_ids = _ints(ids)
        if int(sport) in ports:
            linked = _ints(req_frames)
            for i, cid in enumerate(corr_ids):
                back = linked[i] if i < len(linked) else None
                # Error codes are listed per frame: kept whole when it holds one message.
                codes = tuple(_ints(errors)) if len(corr_ids) == 1 else ()
                responses.setdefault((int(stream), cid), Response(int(frame), back, codes))
        else:
            for cid, key, ver in zip(corr_ids, _ints(keys), _ints(versions), strict=False):
                requests.setdefault((int(stream), cid), Request(int(frame), key, ver))
    return Messages(requests, responses)


# Statuses of rows that got their response.
ANSWERED = ("ok", "error", "unknown")


def agrees(tshark: str, path: Path, got: pd.DataFrame) -> int:
    """tshark's reading of the same damaged copy, the second oracle: every pair tshark
    finds there is a pair here, of the same API and version, and nothing tshark saw
    answered is shown without its answer. (After a hole tshark frames nothing more of
    that stream; returns how many answered rows here tshark did not pair.)"""
    seen = read(tshark, path, got["broker_port"].dropna().astype(int))
    rows = {
        (int(r.stream), int(r.correlation_id)): r
        for r in got.itertuples()
        if r.correlation_id is not pd.NA
    }
    for key, req in seen.requests.items():
        if not seen.answered(key):
            continue
        assert key in rows, f"{key}: tshark pairs it, the dissector has no row"
        r = rows[key]
        assert r.status in ANSWERED, f"{key}: tshark pairs it, shown {r.status}"
        assert (r.api_key, r.api_version) == (req.api_key, req.api_version), key
    answered = [k for k, r in rows.items() if r.status in ANSWERED]
    return sum(not seen.answered(k) for k in answered)
