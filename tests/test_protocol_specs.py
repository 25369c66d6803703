"""The combined spec set is complete, and its sources agree with each other."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from dissector.protocol import api_name, get_registry, supported_apis
from dissector.protocol.sources import (
    iter_kafka_python_specs,
    iter_kio_layouts,
    iter_old_layouts,
    load_specs,
    parse_versions,
    snake,
)
from dissector.protocol.spec import REQUEST, RESPONSE, Field

kio_index = pytest.importorskip("kio.schema.index")

# Versions that existed but that no installed package describes: the v0 of the
# delegation-token APIs (removed in Kafka 4.0), AlterPartition v0-1 (inter-broker)
# and the early-access v0 of the share-group APIs (Kafka 4.0). --specs DIR with an
# older Apache spec set fills them.
NOT_DESCRIBED = {(k, 0) for k in (38, 39, 40, 41, 76, 77, 78, 79)} | {(56, 0), (56, 1)}


Combo = tuple[int, int, str]


def _kio_combinations() -> set[Combo]:
    """What kio's version index lists, read from the index, not from our SpecSet."""
    return {
        (int(key), v, direction)
        for key, name in kio_index.api_key_map.items()
        for v in kio_index.schema_name_map[name]
        for direction in (REQUEST, RESPONSE)
    }


def _json_combinations() -> set[Combo]:
    """What the validVersions of kafka-python's copy of Apache's JSON specs cover."""
    out: set[Combo] = set()
    for spec in iter_kafka_python_specs():
        assert spec.valid is not None
        out.update(
            (spec.api_key, v, spec.direction) for v in range(spec.valid[0], spec.valid[1] + 1)
        )
    return out


def _expected_combinations() -> set[Combo]:
    """Every (key, version, direction) the libraries know of, plus the removed versions.

    Built from the libraries directly, not from our SpecSet: kio's version index,
    kafka-python's validVersions, and versions 0..lowest-1 (every API began at 0).
    """
    versions: dict[int, set[int]] = {}
    for key, v, _ in _kio_combinations() | _json_combinations():
        versions.setdefault(key, set()).add(v)
    out: set[Combo] = set()
    for key, vs in versions.items():
        for v in range(0, max(vs) + 1):
            if (key, v) not in NOT_DESCRIBED:
                out.update({(key, v, REQUEST), (key, v, RESPONSE)})
    return out


def test_every_key_version_and_direction_is_decodable() -> None:
    reg = get_registry()
    have = set(reg.specs.combinations())
    expected = _expected_combinations()
    assert sorted(expected - have) == []
    assert sorted(have - expected) == []
    keys = {k for k, _, _ in have}
    assert keys == set(range(0, 4)) | set(range(8, 93))
    # spot checks from Apache's protocol history
    history = {0: range(0, 14), 1: range(0, 19), 2: range(0, 12), 3: range(0, 14)}
    for key, versions in history.items():
        for v in versions:
            assert (key, v, REQUEST) in have and (key, v, RESPONSE) in have
    assert reg.compile_all() == len(expected)


def test_every_supported_api_has_a_name_including_removed_keys() -> None:
    table = {a.api_key: a for a in supported_apis()}
    assert set(range(0, 93)) <= set(table)
    for key in range(4, 8):
        assert table[key].request_versions == ()
    assert table[68].name == "ConsumerGroupHeartbeat"
    assert table[78].name == "ShareFetch"
    assert table[78].request_versions == (1, 2)
    assert all(not api_name(k).startswith("Unknown") for k in range(0, 93))


def _names(fields: tuple[Field, ...]) -> tuple[object, ...]:
    return tuple((f.name, _names(f.fields)) for f in fields)


def test_kio_reflection_agrees_with_apache_json_for_every_shared_version() -> None:
    reg = get_registry()
    shared = 0
    for layout in iter_kio_layouts():
        json_layout = reg.layout(layout.api_key, layout.version, layout.direction)
        assert json_layout is not None
        if json_layout.source == "kio":
            continue
        shared += 1
        where = (layout.api_key, layout.version, layout.direction)
        assert json_layout.wire() == layout.wire(), where
        assert _names(json_layout.fields) == _names(layout.fields), where
    # every version both kio and the JSON specs describe, and only those
    assert shared == len(_kio_combinations() & _json_combinations())


# kafka-python's hand-written schemas disagree with Apache's spec here; checked by
# hand against the spec's field list: CreatePartitions v0-1 nests the assignment as
# one int32 array (Apache: an array of broker-id arrays), and DescribeLogDirs v0
# types the partition list as one int32. (Its DescribeAcls v2 is written
# non-flexible although Apache makes v2 flexible; flexible versions are skipped.)
KAFKA_PYTHON_DEFECTS = {(37, 0, REQUEST), (37, 1, REQUEST), (35, 0, REQUEST)}


def test_json_layouts_agree_with_kafka_python_hand_written_schemas() -> None:
    reg = get_registry()
    compared = 0
    disagree = set()
    for hand in iter_old_layouts():
        ours = reg.layout(hand.api_key, hand.version, hand.direction)
        if ours is None or ours.flexible:
            continue
        compared += 1
        if ours.wire() != hand.wire():
            disagree.add((hand.api_key, hand.version, hand.direction))
    assert compared > 200
    assert disagree == KAFKA_PYTHON_DEFECTS


def test_version_range_syntax() -> None:
    assert parse_versions("3+") == (3, 0x7FFF)
    assert parse_versions("1-4") == (1, 4)
    assert parse_versions("2") == (2, 2)
    assert parse_versions("none") is None
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
    assert snake("ISRNodes") == "isr_nodes"
    assert snake("TopicId") == "topic_id"


def test_a_specs_directory_adds_versions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dissector.protocol.messages import Registry, decode_request
    from dissector.protocol.sources import load_specs

    spec = """// a vendor's new API, in Apache's format
    {
      "apiKey": 1000, "type": "request", "name": "VendorPingRequest",
      "validVersions": "0-1", "flexibleVersions": "1+",
      "fields": [
        { "name": "Message", "type": "string", "versions": "0+" },
        { "name": "Count", "type": "int32", "versions": "1+" },
        { "name": "Note", "type": "string", "versions": "1+", "taggedVersions": "1+",
          "tag": 0, "nullableVersions": "1+" }
      ]
    }"""
    (tmp_path / "VendorPingRequest.json").write_text(spec)
    reg = Registry(load_specs([tmp_path]))
    frame = (
        bytes.fromhex("03e8 0001 00000005 0001 61")
        + b"\x00"
        + b"\x03hi"
        + bytes.fromhex("0000002a 01 00 03 03 6f6b")
    )
    out = decode_request(frame, registry=reg)
    assert out.error is None
    assert out.body == {"message": "hi", "count": 42, "note": "ok"}


def _kafka_clients_jar(version: str) -> Path | None:
    """kafka-clients from Maven Central, where scripts/kafka-broker's cache keeps it."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    jar = (
        root
        / "kafka-dissector"
        / "m2"
        / "org"
        / "apache"
        / "kafka"
        / "kafka-clients"
        / version
        / f"kafka-clients-{version}.jar"
    )
    return jar if jar.is_file() else None


def test_a_jar_of_specs_is_read_like_a_directory(tmp_path: Path) -> None:
    # The layout of a kafka-clients jar: specs under common/message/, classes beside.
    from importlib import resources

    jar = tmp_path / "clients.jar"
    src = resources.files("kafka.protocol.schemas.resources")
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/kafka/Some.class", b"\xca\xfe\xba\xbe")
        for name in ("MetadataRequest.json", "MetadataResponse.json"):
            archive.writestr(f"common/message/{name}", (src / name).read_text())
    specs = load_specs([jar])
    layout = specs.get(3, 12, REQUEST)
    assert layout is not None and layout.source.startswith("specs-dir:clients.jar!")
    assert layout.wire() == load_specs().get(3, 12, REQUEST).wire()  # type: ignore[union-attr]


def test_removed_versions_match_apache_3_9_specs() -> None:
    """Kafka 3.9's own specs still list the versions 4.0 removed: every widened layout
    must equal 3.9's, and 3.9 fills what no installed package describes."""
    jar = _kafka_clients_jar("3.9.1")
    if jar is None:
        pytest.skip("kafka-clients-3.9.1.jar not in the cache (mvn dependency:get)")
    base = get_registry().specs
    old = load_specs([jar])
    widened = [c for c in base.combinations() if base.get(*c).source.startswith("json-widened")]  # type: ignore[union-attr]
    # What widening must cover, from the two spec sets alone: the versions 3.9 has and
    # the installed packages lack, of the APIs they still have, less what no JSON
    # spec describes.
    installed = _kio_combinations() | _json_combinations()
    keys = {k for k, _, _ in installed}
    removed = {c for c in old.combinations() if old.get(*c).source.startswith("specs-dir:")}  # type: ignore[union-attr]
    expected = {
        c for c in removed - installed if c[0] in keys and (c[0], c[1]) not in NOT_DESCRIBED
    }
    assert sorted(widened) == sorted(expected)
    for combo in widened:
        native = old.get(*combo)
        assert native is not None and native.source.startswith("specs-dir:"), combo
        assert native.wire() == base.get(*combo).wire(), combo  # type: ignore[union-attr]
    filled = {(k, v) for k, v, _ in set(old.combinations()) - set(base.combinations())}
    assert {kv for kv in NOT_DESCRIBED if kv[0] in (38, 39, 40, 41, 56)} <= filled
    assert {k for k, _ in filled} >= {4, 5, 6, 7}


def test_a_newer_kafka_clients_jar_decodes_api_versions_v5() -> None:
    """Kafka 4.4's ApiVersions v5, beyond the installed specs, in the committed capture."""
    jar = _kafka_clients_jar("4.4.0")
    capture = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
    if jar is None or not capture.is_file():
        pytest.skip("kafka-clients-4.4.0.jar (scripts/kafka-broker fetch) or capture absent")
    from dissector.wire.full_decode import iter_decoded

    rows = [r for r in iter_decoded([str(capture)], api=18, specs=[str(jar)])]
    v5 = [r for r in rows if r["api_version"] == 5]
    assert v5
    for r in v5:
        assert "error" not in r["request"] and "error" not in r["response"]
        assert r["request"]["body"]["client_software_name"] == "apache-kafka-java"
        assert r["response"]["body"]["error_code"] == 0


def test_a_bound_decoder_drives_the_pipeline_with_extra_specs() -> None:
    jar = _kafka_clients_jar("4.4.0")
    capture = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
    if jar is None or not capture.is_file():
        pytest.skip("kafka-clients-4.4.0.jar (scripts/kafka-broker fetch) or capture absent")
    from dissector.protocol import decoder_for
    from tests.oracle.pipeline import iter_pairs

    rows = list(iter_pairs(str(capture), decoder=decoder_for([jar])))
    undecoded = {(r.api_name, r.api_version) for r in rows if r.decode_error}
    # only the driver's deliberate ApiVersions v99 stays undecoded with Kafka 4.4's specs
    assert undecoded == {("ApiVersions", 99)}
    assert any(r.api_name == "ApiVersions" and r.api_version == 5 for r in rows)


def test_a_bound_decoder_pickles_for_worker_processes() -> None:
    import pickle

    from dissector.protocol import decoder_for

    decoder = decoder_for()
    clone = pickle.loads(pickle.dumps(decoder))
    frame = bytes.fromhex("0012 0000 00000007 ffff")  # ApiVersions v0 request, null client id
    assert clone.decode_request(frame).header == decoder.decode_request(frame).header
    assert clone.decode_request(frame).body == {}
    assert clone.api_name(18) == "ApiVersions"
