"""``dissector.json_values.jsonable``: the one rule every JSON output follows.

Expected values are written out by hand from the standards they follow: RFC 4648's
base64 test vectors, ISO 8601 as ``datetime.isoformat`` writes it, JSON's lack of NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from dissector.json_values import jsonable
from dissector.protocol.records import RecordSet, parse_records

# RFC 4648 section 10
RFC4648 = [(b"", ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foo", "Zm9v"), (b"foobar", "Zm9vYmFy")]


@pytest.mark.parametrize(("raw", "text"), RFC4648)
def test_bytes_of_every_kind_are_base64(raw: bytes, text: str) -> None:
    for value in (raw, bytearray(raw), memoryview(raw)):
        assert jsonable(value) == text


def test_containers_are_walked_and_tuples_become_lists() -> None:
    value = {"k": (b"foo", [b"f", None, 1, "x", True]), 3: {"inner": b"fo"}}
    assert jsonable(value) == {"k": ["Zm9v", ["Zg==", None, 1, "x", True]], 3: {"inner": "Zm8="}}


def test_missing_values_are_null_and_json_stays_strict() -> None:
    for missing in (math.nan, np.float64("nan"), pd.NA, pd.NaT, np.datetime64("NaT")):
        assert jsonable(missing) is None, repr(missing)
    # strict JSON: no NaN token ever reaches the text
    assert json.dumps(jsonable([math.nan, 1.5]), allow_nan=False) == "[null, 1.5]"


def test_times_are_iso_8601_and_numpy_scalars_python() -> None:
    ts = pd.Timestamp("2024-05-01T12:34:56.789012345Z")
    assert jsonable(ts) == "2024-05-01T12:34:56.789012345+00:00"
    assert jsonable(datetime(2024, 5, 1, 12, 0, tzinfo=UTC)) == "2024-05-01T12:00:00+00:00"
    for value, expected in ((np.int64(7), 7), (np.bool_(True), True), (np.float32(0.5), 0.5)):
        out = jsonable(value)
        assert out == expected and type(out) is type(expected)
    assert jsonable(np.array([1, 2])) == [1, 2]


def test_record_sets_and_dataclasses() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        raw: bytes

    assert jsonable(Point(1, b"foo")) == {"x": 1, "raw": "Zm9v"}
    empty = parse_records(b"", expand=True)
    assert isinstance(empty, RecordSet)
    assert jsonable({"records": empty})["records"]["bytes_encoding"] == "base64"


def test_as_json_default_only_sees_what_json_cannot_write() -> None:
    text = json.dumps({"a": b"foobar", "n": 1, "s": "x"}, default=jsonable)
    assert json.loads(text) == {"a": "Zm9vYmFy", "n": 1, "s": "x"}
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        json.dumps({"o": object()}, default=jsonable)


def test_decode_line_encoder_writes_what_json_dumps_writes() -> None:
    """``decode``'s line encoder (``cli.decode.line_encoder``, orjson) against
    ``json.dumps`` with the project's ``jsonable``: every line of a real capture with its
    record batches expanded (bytes, record sets, unicode client ids) reads back as the
    same values, one compact UTF-8 line each; and the values orjson's fast path refuses
    (keys that are tag numbers, integers beyond 64 bits) or JSON has no word for."""
    from pathlib import Path

    import dissector
    from dissector.cli.decode import line_encoder

    encode = line_encoder()

    def dumps(value: object) -> str:
        return json.dumps(value, default=jsonable, ensure_ascii=False)

    capture = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
    lines = list(dissector.decode(capture, records=True))
    assert len(lines) > 400
    for item in lines:
        line = encode(item)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(dumps(item))
    assert encode({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}\n'.encode()
    odd = {
        "floats": [-0.0, 1e300, 0.1],
        "text": 'é\u2028"\\\n\x00 🙂',
        "bytes": b"\x00\xff",
        "tuple": (1, None, True),
        "nested": [{"k": [{}]}],
        "tags": {7: b"\x01"},  # an unknown tagged field, keyed by its number
        "big": 1 << 70,
    }
    assert json.loads(encode(odd)) == json.loads(dumps(odd))
    assert json.loads(encode({"tags": {7: b"\x01"}})) == {"tags": {"7": "AQ=="}}
    # JSON has no NaN: null, where json.dumps writes JavaScript's word
    assert json.loads(encode({"x": [math.nan, math.inf]})) == {"x": [None, None]}
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        encode({"o": object()})
