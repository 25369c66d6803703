"""Every (api_key, version, direction): bytes from an independent encoder decode back.

Oracles (none of them our code):
* kio's serializer (``kio.serial.entity_writer``) for every version kio generates
  (the Kafka 4.2 generation); random values are drawn from kio's own dataclass
  fields and the expected values are kio's, converted to wire units.
* kafka-python's hand-written ``kafka.protocol.old`` schemas for the versions
  Kafka 4.0 removed; values are drawn from those schemas and compared by position.

Examples per combination are bounded (``EXAMPLES``) so the whole file stays
within CI's budget.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import pkgutil
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.protocol import Registry, decode_request, decode_response, get_registry
from dissector.protocol.bundled import bundled_release
from dissector.protocol.spec import REQUEST, RESPONSE

kio_index = pytest.importorskip("kio.schema.index")
kio_serial = pytest.importorskip("kio.serial")
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

EXAMPLES = 6
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_TIME_TYPES = {"timedelta_i32", "timedelta_i64", "datetime_i64"}


# ---------------------------------------------------------------- kio side


def _kio_combos() -> list[tuple[int, int, str, str]]:
    out = []
    kinds = {EntityType.request: REQUEST, EntityType.response: RESPONSE}
    for key, name in kio_index.api_key_map.items():
        for version, entities in kio_index.schema_name_map[name].items():
            for et, direction in kinds.items():
                if et in entities:
                    out.append((int(key), int(version), direction, entities[et]))
    return sorted(out)


KIO_COMBOS = _kio_combos()


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not types.NoneType]
        return args[0], True
    return annotation, False


_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTS:
        return st.integers(*_INTS[kafka_type])
    if kafka_type == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i64":
        # kio goes through float seconds: stay where that is exact.
        return st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "datetime_i64":
        return st.integers(0, 2**40).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        )
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "string":
        return st.text(max_size=6)
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=8)
    if kafka_type == "uuid":
        return st.uuids()
    raise AssertionError(f"no strategy for {kafka_type}")


def kio_strategy(cls: type, depth: int = 0) -> st.SearchStrategy[Any]:
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        annotation, optional = _unwrap(f.type)
        array = typing.get_origin(annotation) is tuple
        inner = _unwrap(typing.get_args(annotation)[0])[0] if array else annotation
        if dataclasses.is_dataclass(inner):
            element = kio_strategy(typing.cast(type, inner), depth + 1)
        else:
            element = _primitive(f.metadata["kafka_type"])
        strategy = (
            st.lists(element, max_size=2 if depth < 2 else 1).map(tuple) if array else element
        )
        if optional:
            strategy = st.none() | strategy
        kwargs[f.name] = strategy
    return st.builds(cls, **kwargs)


def _wire(kafka_type: str | None, value: Any) -> Any:
    """kio's value in the units on the wire (what our decoder reports)."""
    if value is None:
        if kafka_type == "uuid":
            return _ZERO_UUID
        if kafka_type == "datetime_i64":
            return -1
        return None
    if kafka_type == "error_code":
        return int(value.value)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return round(value.total_seconds() * 1000)
    if kafka_type == "datetime_i64":
        return round(value.timestamp() * 1000)
    if kafka_type == "uuid":
        return str(value)
    if kafka_type in ("string", "bool", "float64"):
        return value
    if kafka_type in ("bytes", "records"):
        return bytes(value)
    return int(value)


# Fields Apache renamed after kio's generation (Kafka 4.2), the bytes unchanged (see
# test_protocol_specs.RENAMED_SINCE_KIO); kio's id_ is a Python keyword guard.
KIO_RENAMED = {
    "generation_id": "generation_id_or_member_epoch",
    "id_": "id",
    "acceptable_recovery_lag": "acceptable_recovery_lag_legacy",
}


def assert_same_kio(entity: Any, got: Any, path: str) -> None:
    assert isinstance(got, dict), f"{path}: expected a struct, got {got!r}"
    for f in dataclasses.fields(entity):
        kafka_type = f.metadata.get("kafka_type")
        name = f.name + ("_ms" if kafka_type in _TIME_TYPES else "")
        if name not in got and KIO_RENAMED.get(name) in got:
            name = KIO_RENAMED[name]
        value = getattr(entity, f.name)
        where = f"{path}.{name}"
        if name not in got:
            assert f.metadata.get("tag") is not None, f"{where}: missing"
            continue  # kio omits a tagged field that holds its default
        _assert_value(kafka_type, value, got[name], where)


def _assert_value(kafka_type: str | None, value: Any, got: Any, where: str) -> None:
    if dataclasses.is_dataclass(value):
        assert_same_kio(value, got, where)
    elif isinstance(value, tuple):
        assert isinstance(got, list) and len(got) == len(value), f"{where}: {got!r} vs {value!r}"
        for i, (v, g) in enumerate(zip(value, got, strict=True)):
            _assert_value(kafka_type, v, g, f"{where}[{i}]")
    elif kafka_type == "records" and value is not None:
        size = got.bytes if hasattr(got, "bytes") else got["size"]
        assert size == len(value), f"{where}: records size {size} != {len(value)}"
    else:
        assert got == _wire(kafka_type, value), f"{where}: {got!r} != {_wire(kafka_type, value)!r}"


def _kio_frame(cls: Any, value: Any, direction: str, key: int, version: int) -> bytes:
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    if direction == REQUEST:
        names = {f.name for f in dataclasses.fields(header_cls)}
        hdr: dict[str, Any] = {
            "request_api_key": key,
            "request_api_version": version,
            "correlation_id": 4242,
        }
        if "client_id" in names:
            hdr["client_id"] = "oracle"
        kio_serial.entity_writer(header_cls)(buf, header_cls(**hdr))
    else:
        kio_serial.entity_writer(header_cls)(buf, header_cls(correlation_id=4242))
    kio_serial.entity_writer(cls)(buf, value)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("api_key", "version", "direction", "path"),
    KIO_COMBOS,
    ids=[f"{k}-v{v}-{d}" for k, v, d, _ in KIO_COMBOS],
)
def test_kio_encoded_messages_decode_to_the_same_values(
    api_key: int, version: int, direction: str, path: str
) -> None:
    cls = pkgutil.resolve_name(path)

    @SETTINGS
    @given(kio_strategy(cls))
    def check(value: Any) -> None:
        frame = _kio_frame(cls, value, direction, api_key, version)
        if direction == REQUEST:
            out = decode_request(frame)
            assert out.header["client_id"] == "oracle"
        else:
            if api_key == 18 and getattr(value, "error_code", None) == ErrorCode(35):
                return  # the v0 fallback for UNSUPPORTED_VERSION is tested separately
            out = decode_response(frame, api_key, version)
        assert out.error is None, out.error
        assert out.notes == []
        assert out.trailing == 0
        assert out.header["correlation_id"] == 4242
        assert_same_kio(value, out.body, "body")
        # the closure back end (used to explain failures) reads the same
        if direction == REQUEST:
            slow = decode_request(frame, registry=_closures())
        else:
            slow = decode_response(frame, api_key, version, registry=_closures())
        assert (slow.body, slow.error, slow.trailing) == (out.body, None, 0)

    check()


@functools.cache
def _closures() -> Registry:
    return Registry(get_registry().specs, "closures")


# ---------------------------------------------------------------- kafka-python old schemas


def _removed_combos() -> list[tuple[int, int, str]]:
    """What the shipped specs take from an older release's layer (versions Kafka removed)."""
    reg = get_registry()
    newest = f"kafka-clients-{bundled_release()}"
    return [
        (k, v, d)
        for k, v, d in reg.specs.combinations()
        if reg.layout(k, v, d).source != newest  # type: ignore[union-attr]
    ]


# kafka-python's message classes carry API_KEY, SCHEMA...: typed Any, since the
# package ships no type information.
def _old_classes() -> dict[tuple[int, int, str], Any]:
    import importlib

    import kafka.protocol.old as old_pkg
    from kafka.protocol.old.api import Request, Response

    out: dict[tuple[int, int, str], Any] = {}
    for info in pkgutil.iter_modules(old_pkg.__path__):
        module = importlib.import_module(f"{old_pkg.__name__}.{info.name}")
        for obj in vars(module).values():
            if not (isinstance(obj, type) and obj.__module__ == module.__name__):
                continue
            if issubclass(obj, Request | Response) and hasattr(obj, "API_VERSION"):
                d = REQUEST if issubclass(obj, Request) else RESPONSE
                cls: Any = obj
                out[(cls.API_KEY, cls.API_VERSION, d)] = cls
    return out


REMOVED = _removed_combos()
OLD_CLASSES = _old_classes()
# kafka-python's hand-written schemas disagree with Apache's spec here (see
# test_protocol_specs.KAFKA_PYTHON_DEFECTS): DescribeLogDirs v0 types the partition
# list as one int32. Those are checked against tshark instead.
KAFKA_PYTHON_DEFECTS = {(35, 0, REQUEST)}
CHECKED = [c for c in REMOVED if c in OLD_CLASSES and c not in KAFKA_PYTHON_DEFECTS]


def old_strategy(t: Any) -> st.SearchStrategy[Any]:
    from kafka.protocol.old import types as old

    if isinstance(t, old.Array):
        return st.lists(old_strategy(t.array_of), max_size=2)
    if isinstance(t, old.Schema):
        return st.tuples(*[old_strategy(f) for f in t.fields])
    if isinstance(t, old.String):
        return st.text(max_size=6)
    table: dict[Any, st.SearchStrategy[Any]] = {
        old.Int8: st.integers(-(2**7), 2**7 - 1),
        old.Int16: st.integers(-(2**15), 2**15 - 1),
        old.Int32: st.integers(-(2**31), 2**31 - 1),
        old.Int64: st.integers(-(2**63), 2**63 - 1),
        old.Boolean: st.booleans(),
        old.Bytes: st.binary(max_size=8),
    }
    return table[t]


def assert_same_positional(schema: Any, values: Any, got: Any, where: str) -> None:
    from kafka.protocol.old import types as old

    if isinstance(schema, old.Schema):
        assert isinstance(got, dict), f"{where}: {got!r}"
        ours = list(got.values())
        assert len(ours) == len(schema.fields), f"{where}: {list(got)} vs {schema.names}"
        for name, t, v, g in zip(schema.names, schema.fields, values, ours, strict=True):
            assert_same_positional(t, v, g, f"{where}.{name}")
    elif isinstance(schema, old.Array):
        assert isinstance(got, list) and len(got) == len(values), f"{where}: {got!r}"
        for i, (v, g) in enumerate(zip(values, got, strict=True)):
            assert_same_positional(schema.array_of, v, g, f"{where}[{i}]")
    elif isinstance(got, dict) and len(got) == 1 and not hasattr(got, "records"):
        # an array of one-field structs is, on the wire, an array of that field
        assert_same_positional(schema, values, next(iter(got.values())), where)
    elif hasattr(got, "records"):
        assert got.bytes == len(values), where
    else:
        assert got == values, f"{where}: {got!r} != {values!r}"


def test_removed_versions_without_an_independent_schema_are_exactly_these() -> None:
    # Taken from Apache's older jars (3.9.1, 4.0.0) with no kafka-python schema to check
    # them against: the ZooKeeper-era inter-broker APIs 4-7, WriteTxnMarkers v0,
    # AlterReplicaLogDirs v0, the delegation-token v0s, AlterPartition v0-1, the share
    # group APIs' early-access v0; and DescribeLogDirs v0's request, where kafka-python
    # types the partition list as a single int32 (Apache: an array). Each equals its
    # jar's own reading (test_protocol_specs); 27, 34 and 35 also tshark's
    # (test_protocol_tshark_removed).
    unverified = set(REMOVED) - set(CHECKED)
    both = {REQUEST, RESPONSE}
    expected = {
        (k, v, d)
        for k, top in ((4, 7), (5, 4), (6, 8), (7, 3))
        for v in range(top + 1)
        for d in both
    }
    expected |= {(k, 0, d) for k in (27, 34, 38, 39, 40, 41, 76, 77, 78, 79) for d in both}
    expected |= {(56, v, d) for v in (0, 1) for d in both} | {(35, 0, REQUEST)}
    assert unverified == expected
    assert len(CHECKED) == 41


@pytest.mark.parametrize(("api_key", "version", "direction"), CHECKED)
def test_removed_versions_match_kafka_python_hand_written_schemas(
    api_key: int, version: int, direction: str
) -> None:
    layout = get_registry().layout(api_key, version, direction)
    assert layout is not None
    cls = OLD_CLASSES[(api_key, version, direction)]

    @SETTINGS
    @given(old_strategy(cls.SCHEMA))
    def check(values: tuple[Any, ...]) -> None:
        msg = cls(*values)
        msg.with_header(correlation_id=77, client_id="old")
        frame = msg.encode(header=True)
        if direction == REQUEST:
            out = decode_request(frame)
        else:
            out = decode_response(frame, api_key, version)
        assert out.error is None, out.error
        assert out.notes == []
        assert out.trailing == 0
        assert out.header["correlation_id"] == 77
        assert_same_positional(cls.SCHEMA, values, out.body, "body")

    check()
