"""Real captures: our bodies against kafka-python 3's own decoder, value by value."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Any

import pytest

from dissector.protocol import decode_request, decode_response

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
pytestmark = pytest.mark.skipif(not CAPTURES.is_dir(), reason="../shared/captures is absent")


@functools.cache
def _kafka_python_classes() -> dict[tuple[int, bool], Any]:
    import kafka.protocol as kp
    from kafka.protocol.api_message import ApiMessage

    for info in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" not in info.name and "generate" not in info.name:
            importlib.import_module(info.name)
    out: dict[tuple[int, bool], Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__name__.endswith(("Request", "Response")) and cls._class_version is None:
            out[(cls.API_KEY, cls.is_request())] = cls
    return out


def _same(ours: Any, theirs: Any, where: str) -> int:
    """Compare; returns how many leaf values were compared."""
    if hasattr(ours, "records") and hasattr(ours, "codecs"):
        # kafka-python's to_dict renders record bytes as lossy text: records are
        # checked by the record-batch tests instead.
        return 0
    if isinstance(ours, dict):
        assert isinstance(theirs, dict), where
        # kafka-python renames a few fields (json_patch, e.g. authorized_operations);
        # a name it lacks is matched by position, which both take from the spec.
        their_names = list(theirs)
        n = 0
        for i, (key, value) in enumerate(ours.items()):
            if key == "_unknown_tags":
                continue
            name = key if key in theirs else their_names[i]
            n += _same(value, theirs[name], f"{where}.{key}")
        return n
    if isinstance(ours, list):
        assert isinstance(theirs, list) and len(ours) == len(theirs), where
        pairs = enumerate(zip(ours, theirs, strict=True))
        return sum(_same(a, b, f"{where}[{i}]") for i, (a, b) in pairs)
    if isinstance(ours, bytes):
        assert ours == bytes(theirs), where
        return 1
    if ours == "00000000-0000-0000-0000-000000000000" and theirs is None:
        return 1  # kafka-python shows the all-zero (null) uuid as None
    if ours == -(2**31) and theirs is None:
        return 1  # and authorized_operations' "not requested" sentinel as None
    assert ours == (str(theirs) if isinstance(ours, str) and theirs is not None else theirs), where
    return 1


def test_bodies_agree_with_kafka_python_decoder() -> None:
    from tests.oracle.pipeline import iter_exchanges

    classes = _kafka_python_classes()
    paths = sorted(str(p) for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng"))
    frames = leaves = 0
    for _, ex in iter_exchanges(paths, ports=[9092, 36333]):
        if ex.api_key is None or ex.api_version is None:
            continue
        for frame, is_request in ((ex.request, True), (ex.response, False)):
            cls = classes.get((ex.api_key, is_request))
            if frame is None or cls is None:
                continue
            if not cls.min_version <= ex.api_version <= cls.max_version:
                continue
            if ex.api_key == 18 and not is_request:
                continue  # kafka-python's header choice for ApiVersions differs by version
            theirs = cls.decode(frame.payload, version=ex.api_version, header=True).to_dict(
                json=False
            )
            if is_request:
                ours = decode_request(frame.payload)
            else:
                ours = decode_response(frame.payload, ex.api_key, ex.api_version)
            assert ours.error is None
            leaves += _same(ours.body, theirs, f"{ex.api_key}v{ex.api_version}")
            frames += 1
    assert frames > 150
    assert leaves > 1500
