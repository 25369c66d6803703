"""What a user can set for an analysis run, shared by the native core and the oracle.

Kept apart from the stages so that the shipped path (``dissector.wire.core``) does not
import the pure-Python stages just to read the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dissector.tls import KeyLogs

DEFAULT_BROKER_PORTS: frozenset[int] = frozenset(
    {9092, 9093, 9094, 9095, 9096, 9097, 9098, 9099, 19092, 29092, 39092}
)
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # bytes after the size prefix


@dataclass(frozen=True, slots=True)
class Options:
    ports: frozenset[int] | None = None  # broker ports; None: the usual Kafka ports
    heuristic: bool | None = None  # find Kafka on other ports; default: on unless ports given
    max_frame: int = DEFAULT_MAX_FRAME
    # Close connections silent this long (live capture: connections that never
    # FIN/RST would otherwise be held for the whole run). None: the core's default.
    idle_timeout_s: float | None = None
    # TLS secrets to decrypt Kafka over TLS with (``dissector.tls.key_logs``).
    tls: KeyLogs | None = None

    @property
    def broker_ports(self) -> frozenset[int]:
        return self.ports if self.ports is not None else DEFAULT_BROKER_PORTS

    @property
    def find_kafka_by_heuristic(self) -> bool:
        return self.heuristic if self.heuristic is not None else self.ports is None


@dataclass(frozen=True, slots=True)
class CaptureBytes:
    """A capture held in memory (a Spark task's file content), read in place by the
    native core; its rows' ``capture`` is ``name``. Accepted wherever a path is by the
    exchange-level passes (``dissector.partitions``, ``groups``, ``versions``)."""

    name: str
    data: bytes | bytearray | memoryview


CaptureSource = str | CaptureBytes
"""What the core reads: a capture file's path, or a capture held in memory."""


def capture_paths(source: object) -> list[CaptureSource]:
    """One path or several, as a list of strings (``CaptureBytes`` kept as they are)."""
    import os

    if isinstance(source, str | os.PathLike | CaptureBytes):
        source = [source]
    return [p if isinstance(p, CaptureBytes) else os.fspath(p) for p in source]  # type: ignore[attr-defined]
