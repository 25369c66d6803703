"""The generated decoders are readable: printed by ``kafka-dissector codegen``, named
after the fields, checked in as a snapshot, and shown line by line in tracebacks.

Refresh the snapshot after a deliberate generator change with
``UPDATE_SNAPSHOTS=1 pytest tests/test_protocol_codegen.py`` and review the diff.
"""

from __future__ import annotations

import linecache
import os
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner

from dissector.cli import main
from dissector.protocol import decode_response, get_registry
from dissector.protocol.compile import generate, generated_source, source_name
from dissector.protocol.spec import RESPONSE, Field, Layout

SNAPSHOT = Path(__file__).resolve().parent / "snapshots" / "api_versions_v3_response.py.txt"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
API_VERSIONS = 18


def _api_versions_v3() -> Layout:
    layout = get_registry().layout(API_VERSIONS, 3, RESPONSE)
    assert layout is not None
    return layout


def test_api_versions_v3_response_source_matches_the_snapshot() -> None:
    source = generated_source(_api_versions_v3())
    if UPDATE:
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(source)
    assert source == SNAPSHOT.read_text(), "generator changed: UPDATE_SNAPSHOTS=1 and review"


def test_locals_are_named_after_the_fields() -> None:
    source = generated_source(_api_versions_v3())
    for line in (
        "api_key, min_version, max_version = _int16_int16_int16(buf, p)",
        "throttle_time_ms = _int32(buf, p)[0]",
        "body = {'error_code': error_code, 'api_keys': api_keys, "
        "'throttle_time_ms': throttle_time_ms}",
        "elif tag == 3:  # zk_migration_ready",
    ):
        assert line in source


def test_a_nested_field_does_not_clobber_an_outer_one_of_the_same_name() -> None:
    """An outer ``name`` is read before an array whose items also have a ``name``; the
    outer dict is built after the array, so the inner local must differ."""
    inner = Field("items", "struct", array=True, fields=(Field("name", "string"),))
    layout = Layout(999, 0, RESPONSE, False, (Field("name", "string"), inner), "test")
    decode = generate(layout)
    buf = b"\x00\x05outer" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x01b"
    body, end = decode(buf, 0)
    assert body == {"name": "outer", "items": [{"name": "a"}, {"name": "b"}]}
    assert end == len(buf)
    assert "name_2 = " in generated_source(layout)


def test_codegen_command_prints_the_source_by_key_or_name() -> None:
    runner = CliRunner()
    by_name = runner.invoke(main, ["codegen", "ApiVersions", "3", "response"])
    by_key = runner.invoke(main, ["codegen", "18", "3", "response"])
    assert by_name.exit_code == 0, by_name.output
    assert by_name.output == by_key.output == generated_source(_api_versions_v3())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["NoSuchApi", "0", "request"], "unknown API 'NoSuchApi'"),
        (["Fetch", "999", "request"], "known versions 0-"),
        (["Fetch", "0", "sideways"], "'sideways' is not one of"),
    ],
)
def test_codegen_command_rejects_what_has_no_layout(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["codegen", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_a_decode_failure_traceback_shows_the_generated_line() -> None:
    layout = _api_versions_v3()
    decode = get_registry().decoder(layout, False)
    # error_code 0, then a compact array of 2 entries whose first one is cut short
    buf = b"\x00\x00" + b"\x03" + b"\x00\x00\x00"
    with pytest.raises(Exception) as info:
        decode(buf, 0)
    text = "".join(traceback.format_exception(info.value))
    assert f'File "{source_name(layout, generated_source(layout))}"' in text
    assert "api_key, min_version, max_version = _int16_int16_int16(buf, p)" in text


def test_generated_source_is_in_linecache_under_its_name() -> None:
    layout = _api_versions_v3()
    source = generated_source(layout)
    get_registry().decoder(layout, False)
    name = source_name(layout, source)
    assert linecache.getlines(name) == source.splitlines(True)
    linecache.checkcache()  # what traceback printing does: the entry must survive it
    assert linecache.getlines(name) == source.splitlines(True)


def test_the_snapshot_layout_still_decodes_a_real_answer() -> None:
    """The snapshot is the decoder used on the wire, not a separate rendering."""
    frame = (
        b"\x00\x00\x00\x07"  # correlation id (ApiVersions keeps response header v0)
        + b"\x00\x00"  # error_code
        + b"\x02"  # compact array of 1
        + b"\x00\x12\x00\x00\x00\x04\x00"  # ApiVersions 0-4, no tags
        + b"\x00\x00\x00\x00"  # throttle_time_ms
        + b"\x00"  # no tagged fields
    )
    out = decode_response(frame, API_VERSIONS, 3)
    assert out.error is None
    assert out.body == {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time_ms": 0,
    }
