"""The shipped spec set is complete, faithful to Apache's jars, and agrees with the
client libraries' own readings of the protocol (kio, kafka-python: dev extras)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from dissector.protocol import api_name, get_registry, supported_apis
from dissector.protocol.bundled import bundled_layers, bundled_release, load_specs
from dissector.protocol.sources import parse_versions, snake, strip_json_comments
from dissector.protocol.spec import REQUEST, RESPONSE, Field
from tests.oracle.spec_libraries import (
    iter_kafka_python_specs,
    iter_kio_layouts,
    iter_old_layouts,
    kafka_api_names,
)

kio_index = pytest.importorskip("kio.schema.index")

Combo = tuple[int, int, str]


def _kafka_clients_jar(version: str) -> Path | None:
    """kafka-clients from Maven Central, where scripts/kafka-broker's cache keeps it."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    jar = root.joinpath(
        "kafka-dissector", "m2", "org", "apache", "kafka", "kafka-clients", version
    ) / (f"kafka-clients-{version}.jar")
    return jar if jar.is_file() else None


def _jar_combinations(jar: Path) -> set[Combo]:
    """validVersions of every message spec in a jar, read with zipfile and json only."""
    out: set[Combo] = set()
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if not (name.startswith("common/message/") and name.endswith(".json")):
                continue
            spec = json.loads(strip_json_comments(archive.read(name).decode()))
            if spec.get("type") not in (REQUEST, RESPONSE) or spec["validVersions"] == "none":
                continue
            low, _, high = spec["validVersions"].partition("-")
            for v in range(int(low), int(high or low) + 1):
                out.add((int(spec["apiKey"]), v, spec["type"]))
    return out


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


def test_shipped_layers_hold_exactly_what_their_jars_describe() -> None:
    """Each layer's release: the union of the jars' validVersions is what we decode."""
    expected: set[Combo] = set()
    for layer in bundled_layers():
        jar = _kafka_clients_jar(layer.release)
        if jar is None:
            pytest.skip(f"kafka-clients-{layer.release}.jar not cached (./scripts/run-tests)")
        expected |= _jar_combinations(jar)
    have = set(get_registry().specs.combinations())
    assert sorted(expected ^ have) == []


def test_layouts_equal_what_the_jar_gives_through_specs() -> None:
    """The prose-free shipped copy decodes as the jar itself does (--specs JAR)."""
    reg = get_registry()
    for layer in bundled_layers():
        jar = _kafka_clients_jar(layer.release)
        if jar is None:
            pytest.skip(f"kafka-clients-{layer.release}.jar not cached (./scripts/run-tests)")
        from_jar = load_specs([jar])
        for combo in {(s.api_key, s.direction) for s in layer.specs}:
            for version, layout in from_jar.layouts.get(combo, {}).items():
                if not layout.source.startswith("specs-dir:"):
                    continue
                ours = reg.specs.get(combo[0], version, combo[1])
                if ours is not None and ours.source == f"kafka-clients-{layer.release}":
                    assert ours.fields == layout.fields, (combo, version)
                    assert ours.flexible == layout.flexible, (combo, version)


def test_shipped_specs_cover_everything_the_client_libraries_know() -> None:
    """kio (Kafka 4.2) and kafka-python's specs and hand-written schemas: all decodable."""
    have = set(get_registry().specs.combinations())
    old = {(lay.api_key, lay.version, lay.direction) for lay in iter_old_layouts()}
    assert sorted((_kio_combinations() | _json_combinations() | old) - have) == []
    assert bundled_release() == "4.4.0"


def test_every_key_version_and_direction_is_decodable() -> None:
    reg = get_registry()
    have = set(reg.specs.combinations())
    keys = {k for k, _, _ in have}
    # 4-7: the ZooKeeper-era inter-broker APIs, from the 3.9 layer
    assert keys == set(range(0, 95))
    # spot checks from Apache's protocol history
    history = {0: range(0, 14), 1: range(0, 19), 2: range(0, 12), 3: range(0, 14), 18: range(6)}
    for key, versions in history.items():
        for v in versions:
            assert (key, v, REQUEST) in have and (key, v, RESPONSE) in have
    # both directions of every version
    assert {(k, v) for k, v, d in have if d == REQUEST} == {(k, v) for k, v, _ in have}
    assert reg.compile_all() == len(have)


def test_every_supported_api_has_a_name_including_removed_keys() -> None:
    table = {a.api_key: a for a in supported_apis()}
    assert set(range(0, 95)) <= set(table)
    assert table[4].name == "LeaderAndIsr" and table[4].request_versions == tuple(range(8))
    assert table[68].name == "ConsumerGroupHeartbeat"
    assert table[78].name == "ShareFetch"
    assert table[78].request_versions == (0, 1, 2)
    assert all(not api_name(k).startswith("Unknown") for k in range(0, 95))
    # kafka-python names every key it knows the same way
    for key, name in kafka_api_names().items():
        assert api_name(key) == name


def _names(fields: tuple[Field, ...]) -> tuple[object, ...]:
    return tuple((f.name, _names(f.fields)) for f in fields)


# Field names Apache changed after kio's generation (Kafka 4.2), the bytes unchanged:
# TxnOffsetCommit's GenerationId became GenerationIdOrMemberEpoch (KIP-1251), kio spells
# AssignReplicasToDirs' Id as id_ (a Python keyword guard), StreamsGroupHeartbeat's
# AcceptableRecoveryLag became AcceptableRecoveryLagLegacy.
RENAMED_SINCE_KIO = {
    (28, 3, REQUEST),
    (28, 4, REQUEST),
    (28, 5, REQUEST),
    (73, 0, REQUEST),
    (73, 0, RESPONSE),
    (88, 0, RESPONSE),
}


def test_kio_reflection_agrees_with_apache_json_for_every_shared_version() -> None:
    reg = get_registry()
    shared = 0
    renamed = set()
    for layout in iter_kio_layouts():
        json_layout = reg.layout(layout.api_key, layout.version, layout.direction)
        assert json_layout is not None
        shared += 1
        where = (layout.api_key, layout.version, layout.direction)
        assert json_layout.wire() == layout.wire(), where
        if _names(json_layout.fields) != _names(layout.fields):
            renamed.add(where)
    assert renamed == RENAMED_SINCE_KIO
    # every version kio describes
    assert shared == len(_kio_combinations())


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
    from dissector.protocol.bundled import load_specs
    from dissector.protocol.messages import Registry, decode_request

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


def test_a_jar_of_specs_is_read_like_a_directory(tmp_path: Path) -> None:
    # The layout of a kafka-clients jar: specs under common/message/, classes beside.
    from importlib import resources

    jar = tmp_path / "clients.jar"
    # kafka-python's copy of the two specs: not the bundled data, to read them from a jar
    src = resources.files("kafka.protocol.schemas.resources")
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/kafka/Some.class", b"\xca\xfe\xba\xbe")
        for name in ("MetadataRequest.json", "MetadataResponse.json"):
            archive.writestr(f"common/message/{name}", (src / name).read_text())
    specs = load_specs([jar])
    layout = specs.get(3, 12, REQUEST)
    assert layout is not None and layout.source.startswith("specs-dir:clients.jar!")
    assert layout.wire() == load_specs().get(3, 12, REQUEST).wire()  # type: ignore[union-attr]


def test_kafka_4_4_api_versions_v5_decodes_without_specs() -> None:
    """Kafka 4.4's ApiVersions v5 in the committed capture: the shipped specs know it."""
    capture = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
    from dissector.wire.full_decode import iter_decoded

    rows = [r for r in iter_decoded([str(capture)], api=18)]
    v5 = [r for r in rows if r["api_version"] == 5]
    assert v5
    for r in v5:
        assert "error" not in r["request"] and "error" not in r["response"]
        assert r["request"]["body"]["client_software_name"] == "apache-kafka-java"
        assert r["response"]["body"]["error_code"] == 0


def test_a_bound_decoder_drives_the_pipeline_with_extra_specs(tmp_path: Path) -> None:
    """--specs still adds what the shipped specs lack: a vendor API key of its own."""
    from dissector.protocol import decoder_for

    (tmp_path / "VendorPingRequest.json").write_text(
        '{"apiKey": 1000, "type": "request", "name": "VendorPingRequest",'
        ' "validVersions": "0", "flexibleVersions": "none",'
        ' "fields": [{"name": "Message", "type": "string", "versions": "0+"}]}'
    )
    decoder = decoder_for([tmp_path])
    frame = bytes.fromhex("03e8 0000 00000005 0001 61") + b"\x00\x02hi"
    assert decoder.decode_request(frame).body == {"message": "hi"}
    assert decoder.api_name(1000) == "VendorPing"
    assert decoder_for().decode_request(frame).error is not None


def test_a_bound_decoder_pickles_for_worker_processes() -> None:
    import pickle

    from dissector.protocol import decoder_for

    decoder = decoder_for()
    clone = pickle.loads(pickle.dumps(decoder))
    frame = bytes.fromhex("0012 0000 00000007 ffff")  # ApiVersions v0 request, null client id
    assert clone.decode_request(frame).header == decoder.decode_request(frame).header
    assert clone.decode_request(frame).body == {}
    assert clone.api_name(18) == "ApiVersions"
