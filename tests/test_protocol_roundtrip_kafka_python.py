"""A second independent encoder: kafka-python 3's ApiMessage classes.

For every (api_key, version, direction) kafka-python's JSON-driven classes cover,
random values are drawn from kafka-python's own field tree, encoded by
kafka-python (header included), and decoded by us.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.protocol import decode_request, decode_response
from tests.test_protocol_kafka_python import _kafka_python_classes

SETTINGS = settings(
    max_examples=3,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _combos() -> list[tuple[int, int, bool]]:
    out = []
    for (key, is_request), cls in _kafka_python_classes().items():
        if key in (18,) and not is_request:
            continue  # ApiVersions responses: kafka-python's header differs by version
        for v in range(cls.min_version, cls.max_version + 1):
            out.append((key, v, is_request))
    return sorted(out)


COMBOS = _combos()


def _primitive(type_str: str) -> st.SearchStrategy[Any]:
    if type_str in _INTS:
        return st.integers(*_INTS[type_str])
    if type_str == "bool":
        return st.booleans()
    if type_str == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if type_str == "string":
        return st.text(max_size=6)
    if type_str in ("bytes", "records"):
        return st.binary(max_size=8)
    if type_str == "uuid":
        return st.uuids()
    if type_str == "bitfield":
        # kafka-python's json_patch types authorized-operations int32s as bit sets;
        # None stands for INT32_MIN ("not requested").
        return st.none() | st.sets(st.integers(0, 30), max_size=4)
    raise AssertionError(type_str)


def _fields(struct: Any, version: int) -> list[Any]:
    return [f for f in struct._fields if f.for_version_q(version)]


def tree_strategy(struct: Any, version: int) -> st.SearchStrategy[dict[str, Any]]:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for f in _fields(struct, version):
        if f.is_struct_array():
            s: st.SearchStrategy[Any] = st.lists(tree_strategy(f.array_of, version), max_size=2)
        elif f.is_struct():
            s = tree_strategy(f, version)
        elif f.is_array():
            s = st.lists(_primitive(f.array_of.type_str), max_size=3)
        else:
            s = _primitive(f.type_str)
        if f.nullable_for_version_q(version) and not f.tagged_field_q(version):
            s = st.none() | s
        parts[f.name] = s
    return st.fixed_dictionaries(parts)


def build(struct: Any, version: int, tree: dict[str, Any]) -> dict[str, Any]:
    """kafka-python keyword arguments: nested structs become its data-class instances."""
    kwargs: dict[str, Any] = {}
    for f in _fields(struct, version):
        value = tree[f.name]
        if value is not None and f.is_struct_array():
            value = [f.array_of(**build(f.array_of, version, item)) for item in value]
        elif value is not None and f.is_struct():
            value = f(**build(f, version, value))
        kwargs[f.name] = value
    return kwargs


def assert_same(struct: Any, version: int, tree: dict[str, Any], got: Any, where: str) -> None:
    assert isinstance(got, dict), f"{where}: {got!r}"
    fields = _fields(struct, version)
    ours = [k for k in got if k != "_unknown_tags"]
    untagged = [f for f in fields if not f.tagged_field_q(version)]
    for i, f in enumerate(fields):
        value = tree[f.name]
        name = f.name if f.name in got else (ours[i] if i < len(ours) else None)
        if name is None or name not in got:
            assert f.tagged_field_q(version), f"{where}.{f.name}: missing"
            continue  # kafka-python leaves out a tagged field holding its default
        _assert_value(f, version, value, got[name], f"{where}.{f.name}")
    assert len([k for k in ours if k in {f.name for f in untagged}]) <= len(untagged)


def _assert_value(f: Any, version: int, value: Any, got: Any, where: str) -> None:
    if value is None:
        if f.type_str == "bitfield":
            assert got == -(2**31), where
        elif f.type_str == "uuid":
            assert got == str(uuid.UUID(int=0)), where
        else:
            assert got is None, f"{where}: {got!r}"
    elif f.is_struct_array():
        assert isinstance(got, list) and len(got) == len(value), where
        for i, (item, g) in enumerate(zip(value, got, strict=True)):
            assert_same(f.array_of, version, item, g, f"{where}[{i}]")
    elif f.is_struct():
        assert_same(f, version, value, got, where)
    elif f.type_str == "bitfield":
        assert got == sum(1 << b for b in value), where
    elif f.type_str == "records":
        size = got.bytes if hasattr(got, "bytes") else got["size"]
        assert size == len(value), where
    elif f.type_str == "uuid":
        assert got == str(value), where
    elif f.is_array() and f.array_of.type_str == "uuid":
        assert got == [str(v) for v in value], where
    else:
        assert got == value, f"{where}: {got!r} != {value!r}"


@pytest.mark.parametrize(
    ("api_key", "version", "is_request"),
    COMBOS,
    ids=[f"{k}-v{v}-{'request' if r else 'response'}" for k, v, r in COMBOS],
)
def test_kafka_python_encoded_messages_decode_to_the_same_values(
    api_key: int, version: int, is_request: bool
) -> None:
    cls = _kafka_python_classes()[(api_key, is_request)]

    @SETTINGS
    @given(tree_strategy(cls._struct, version))
    def check(tree: dict[str, Any]) -> None:
        msg = cls[version](**build(cls._struct, version, tree))
        msg.with_header(correlation_id=99, client_id="kp")
        frame = msg.encode(header=True)
        out = decode_request(frame) if is_request else decode_response(frame, api_key, version)
        assert out.error is None, out.error
        assert out.notes == []
        assert out.trailing == 0
        assert out.header["correlation_id"] == 99
        assert_same(cls._struct, version, tree, out.body, "body")

    check()
