"""error_name against three independent sources: kio's enum, kafka-python's exception
classes and Wireshark's value strings. The table itself is generated from the newest
kafka-clients jar's Errors enum (scripts/specs/generate.py)."""

from __future__ import annotations

import inspect
import shutil
import subprocess

import kafka.errors as kerrors
import pytest
from kio.schema.errors import ErrorCode

from dissector.protocol.errors import ERROR_NAMES, error_name, error_retriable

# kafka-python keeps pre-rename spellings for these codes; Apache Kafka's Errors.java
# uses the kio spelling. Each pair is (kafka-python message, Kafka's current name).
KAFKA_PYTHON_LEGACY_NAMES = {
    -1: ("UNKNOWN", "UNKNOWN_SERVER_ERROR"),
    0: ("NO_ERROR", "NONE"),
    6: ("NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER"),  # renamed by KIP-392
    10: ("MESSAGE_SIZE_TOO_LARGE", "MESSAGE_TOO_LARGE"),
    17: ("INVALID_TOPIC", "INVALID_TOPIC_EXCEPTION"),
    39: ("INVALID_REPLICATION_ASSIGNMENT", "INVALID_REPLICA_ASSIGNMENT"),
}


def _kafka_python_codes() -> dict[int, str]:
    out: dict[int, str] = {}
    for cls in vars(kerrors).values():
        if (
            inspect.isclass(cls)
            and issubclass(cls, kerrors.BrokerResponseError)
            and cls.errno is not None
        ):
            out.setdefault(cls.errno, cls.message)
    return out


def test_spot_checks() -> None:
    assert error_name(0) == "NONE"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(35) == "UNSUPPORTED_VERSION"
    assert error_name(58) == "SASL_AUTHENTICATION_FAILED"
    assert error_retriable(3) is True
    assert error_retriable(35) is False


def test_covers_every_kio_code() -> None:
    assert len(ErrorCode) > 100
    for member in ErrorCode:
        assert error_name(int(member.value)) == member.name.upper()
        assert error_retriable(int(member.value)) == member.retriable
    kio_codes = {int(m.value) for m in ErrorCode}
    # the shipped table is of a newer Kafka than kio's (4.2): only codes added since
    assert kio_codes <= set(ERROR_NAMES)
    assert min(set(ERROR_NAMES) - kio_codes) > max(kio_codes)


def test_agrees_with_kafka_python() -> None:
    theirs = _kafka_python_codes()
    assert len(theirs) > 100
    compared = 0
    for code, their_name in theirs.items():
        ours = error_name(code)
        assert ours is not None, f"kafka-python defines {code} ({their_name}), we do not"
        if code in KAFKA_PYTHON_LEGACY_NAMES:
            old, new = KAFKA_PYTHON_LEGACY_NAMES[code]
            assert (their_name, ours) == (old, new)
        else:
            assert ours == their_name, code
            compared += 1
    assert compared > 100


def test_covers_every_code_wireshark_knows() -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    out = subprocess.run(
        ["tshark", "-G", "values"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    codes = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] == "V" and parts[1] == "kafka.error":
            value = int(parts[2])
            codes.add(value - (1 << 32) if value >= 1 << 31 else value)  # stored unsigned
    assert {-1, 0, 3, 35} <= codes
    assert len(codes) > 50
    assert all(error_name(code) is not None for code in codes), sorted(
        c for c in codes if error_name(c) is None
    )


@pytest.mark.parametrize("code", [-2, 32767, -32768, 10**9, 1.0, None, "3", True, b"\x00"])
def test_unknown_or_odd_input_gives_none(code: object) -> None:
    assert error_name(code) is None  # type: ignore[arg-type]
    assert error_retriable(code) is None  # type: ignore[arg-type]


def test_numpy_integers_accepted() -> None:
    np = pytest.importorskip("numpy")
    assert error_name(np.int16(3)) == "UNKNOWN_TOPIC_OR_PARTITION"
