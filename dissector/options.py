"""What a user can set for an analysis run, shared by the native core and the oracle.

Kept apart from the stages so that the shipped path (``dissector.wire.core``) does not
import the pure-Python stages just to read the defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dissector.tls import KeyLogs

DEFAULT_BROKER_PORTS: frozenset[int] = frozenset(
    {9092, 9093, 9094, 9095, 9096, 9097, 9098, 9099, 19092, 29092, 39092}
)
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # bytes after the size prefix
# A capture may decompress 4 GiB in all (the core's capture budget): a larger per-frame
# cap could never be used.
MAX_DECOMPRESSED_LIMIT = 4 * 1024**3

ChainMode = Literal["auto", "none", "all"]
CHAIN_MODES: tuple[ChainMode, ...] = ("auto", "none", "all")


@dataclass(frozen=True, slots=True)
class ChainRule:
    """Which of several capture files are read as one continuous capture (a capture
    set: TCP connections, frames cut by a file boundary and open requests carry over).

    ``auto``: files chain when they look like one rotated recording (``dissector.wire.sets``
    states the rule: same name pattern, link types and interfaces, time ranges one after
    the other, at most ``max_gap_s`` apart); ``none``: every file is a capture of its
    own; ``all``: the files are one capture, in time order.
    """

    mode: ChainMode = "auto"
    # Beyond an hour of silence the core closes every connection of a file anyway
    # (native/src/tcp/, file_idle_timeout_ns): nothing could carry over.
    max_gap_s: float = 3600.0
    # Timestamps jitter by microseconds across a rotation (several capture queues):
    # a next file may start this much before the previous one ended.
    overlap_s: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in CHAIN_MODES:
            raise ValueError(f"chain mode {self.mode!r}: use one of {', '.join(CHAIN_MODES)}")
        if not self.max_gap_s >= 0 or not self.overlap_s >= 0:
            raise ValueError("chain max_gap_s and overlap_s must be >= 0")


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
    # How several capture files group into continuous captures (capture sets).
    chain: ChainRule = field(default_factory=ChainRule)
    # The most bytes the record batches of one Kafka frame may decompress to: a frame
    # gets 32 times its size, at least 64 MiB, never more than this (None: 256 MiB,
    # ``protocol.records.FRAME_BUDGET_CAP``).
    max_decompressed: int | None = None

    def __post_init__(self) -> None:
        if self.max_decompressed is not None and not (
            1 <= self.max_decompressed <= MAX_DECOMPRESSED_LIMIT
        ):
            top = MAX_DECOMPRESSED_LIMIT
            raise ValueError(f"max_decompressed {self.max_decompressed}: give 1 to {top} bytes")

    @property
    def broker_ports(self) -> frozenset[int]:
        return self.ports if self.ports is not None else DEFAULT_BROKER_PORTS

    @property
    def find_kafka_by_heuristic(self) -> bool:
        return self.heuristic if self.heuristic is not None else self.ports is None


def keyword_options(
    options: Options | None,
    *,
    ports: Iterable[int] | None = None,
    tls: KeyLogs | None = None,
) -> Options:
    """``options`` (``Options()`` when None) with the ports and key logs a keyword API
    was given laid over it: the one way a function that takes ``ports=``/``tls=`` builds
    the ``Options`` its pass runs with, so every other field (``max_frame``, ``chain``,
    ...) reaches the pass as the caller set it."""
    base = options if options is not None else Options()
    return dataclasses.replace(
        base,
        ports=frozenset(ports) if ports is not None else base.ports,
        tls=tls if tls is not None else base.tls,
    )


@dataclass(frozen=True, slots=True)
class CaptureBytes:
    """A capture held in memory (a Spark task's file content), read in place by the
    native core; its rows' ``capture`` is ``name``. Accepted wherever a path is by the
    exchange-level passes (``dissector.partitions``, ``groups``, ``versions``)."""

    name: str
    data: bytes | bytearray | memoryview


CaptureSource = str | CaptureBytes
"""What the core reads: a capture file's path, or a capture held in memory."""


def source_name(source: CaptureSource) -> str:
    """The name a capture's rows carry: its path (``text_path``), or ``CaptureBytes.name``."""
    return source.name if isinstance(source, CaptureBytes) else text_path(source)


def text_path(path: str) -> str:
    """A file name as rows, outputs and messages carry it: as it is, or, when the OS
    gave bytes that are not UTF-8 (a ``str`` holding surrogate escapes, which Arrow,
    Parquet and JSON cannot store), those bytes written ``\\xNN``, as Python's
    ``backslashreplace`` does (``caf\\xe9.pcap``). Valid UTF-8 names are unchanged."""
    import os

    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


@dataclass(frozen=True, slots=True)
class CaptureSet:
    """Capture files read as one continuous capture, in the order given: the next
    file of a rotated recording continues the TCP connections, frames and open
    requests of the one before. Rows carry ``name``, the first file's name; a
    one-file set is that file. Built by ``dissector.wire.sets.capture_sets`` (the
    chain rule), or by hand to override it.

    ``files`` is a tuple, or any sequence: the core takes each file only when the one
    before has ended, so a sequence whose items fetch their bytes on access (a
    distributed task reading a set) holds one file in memory at a time (``file_names``
    reads each item once more, for its name)."""

    files: Sequence[CaptureSource]

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("a capture set needs at least one file")

    @property
    def name(self) -> str:
        return source_name(self.files[0])

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(source_name(f) for f in self.files)


AnySource = CaptureSource | CaptureSet
"""A capture file, a capture in memory, or a set of them read as one capture."""


def capture_paths(source: object) -> list[AnySource]:
    """One path or several, as a list of strings (``CaptureBytes`` and ``CaptureSet``
    kept as they are)."""
    import os

    if isinstance(source, str | bytes | os.PathLike | CaptureBytes | CaptureSet):
        source = [source]
    # fsdecode: a bytes path (any name the OS gives) becomes the str os.open takes back
    return [p if isinstance(p, CaptureBytes | CaptureSet) else os.fsdecode(p) for p in source]  # type: ignore[attr-defined]
