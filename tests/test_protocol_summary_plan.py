"""The summary's per-layout plans give exactly what the generic walk gives.

``summarize`` reads a body by a plan made from its layout (only the fields that can
change a column); without a layout it walks every value. Both implement the same
rules, so on every pair of the recorded captures, whole and cut short (partial
bodies of malformed frames), the two must agree field for field. The columns
themselves are checked against tshark and the client ledgers elsewhere
(test_shared_captures, test_broker_e2e); this test guards the shortcut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from dissector.protocol import Decoded, TopicNames, decode_request, decode_response, summarize
from tests.oracle.correlate import Exchange
from tests.oracle.pipeline import iter_exchanges

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
# Cut points per payload for the partial-body check: bounded work per frame.
CUTS = 12


def _captures(shared: Path | None) -> list[Path]:
    found = sorted(CAPTURES.glob("*.pcap*"))
    if shared is not None:
        found += sorted(shared.glob("*.pcap*"))
    return found


def _pairs(paths: list[Path]) -> Iterator[Exchange]:
    for path in paths:
        for _, ex in iter_exchanges(str(path)):
            if ex.api_key is not None and ex.api_version is not None:
                yield ex


def _both(
    api_key: int, api_version: int, req: Decoded | None, resp: Decoded | None
) -> tuple[object, object]:
    """(summary by plan, summary by the generic walk), each with fresh topic names."""
    planned = summarize(api_key, api_version, req, resp, TopicNames())
    blind = [dataclasses.replace(d, layout=None) if d is not None else None for d in (req, resp)]
    walked = summarize(api_key, api_version, blind[0], blind[1], TopicNames())
    return planned, walked


def _decode(ex: Exchange, cut: int | None) -> tuple[Decoded | None, Decoded | None]:
    assert ex.api_key is not None and ex.api_version is not None
    req = resp = None
    if ex.request is not None:
        payload = ex.request.payload
        req = decode_request(payload[:cut] if cut is not None else payload)
    if ex.response is not None:
        payload = ex.response.payload
        resp = decode_response(
            payload[:cut] if cut is not None else payload, ex.api_key, ex.api_version
        )
    return req, resp


@pytest.fixture(scope="module")
def exchanges(request: pytest.FixtureRequest) -> list[Exchange]:
    try:
        shared: Path | None = request.getfixturevalue("shared_captures")
    except pytest.skip.Exception:
        shared = None
    found = list(_pairs(_captures(shared)))
    if not found:
        pytest.skip("no recorded captures with Kafka pairs found")
    return found


def test_plans_agree_with_the_walk_on_whole_pairs(exchanges: list[Exchange]) -> None:
    compared = 0
    for ex in exchanges:
        req, resp = _decode(ex, None)
        planned, walked = _both(ex.api_key or 0, ex.api_version or 0, req, resp)
        assert planned == walked, (ex.stream, ex.api_key, ex.api_version, ex.correlation_id)
        compared += 1
    assert compared > 400  # kafka-4-mixed alone holds several hundred pairs


def test_plans_agree_with_the_walk_on_partial_bodies(exchanges: list[Exchange]) -> None:
    partial = 0
    for ex in exchanges:
        longest = max(
            (len(f.payload) for f in (ex.request, ex.response) if f is not None), default=0
        )
        for i in range(1, CUTS + 1):
            req, resp = _decode(ex, longest * i // (CUTS + 1))
            planned, walked = _both(ex.api_key or 0, ex.api_version or 0, req, resp)
            assert planned == walked, (ex.stream, ex.api_key, ex.api_version, i)
            partial += any(d is not None and d.error and d.body for d in (req, resp))
    assert partial > 100  # cut frames do leave partial bodies behind
