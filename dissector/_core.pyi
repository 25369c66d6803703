# Type stub of the native core (native/src/python.rs and python/live.rs, built by maturin
# into dissector._core).
# Keep it in step with the #[pymethods] there: mypy checks dissector/wire against it, and
# scripts/run-tests checks it against the built module (python -m mypy.stubtest dissector._core).

import os
from collections.abc import Callable
from typing import Any, Self, final

__all__ = [
    "Analyzer",
    "CaptureError",
    "CaptureFacts",
    "InterfaceFacts",
    "KeyLog",
    "KnownTopics",
    "LiveRun",
    "Model",
    "PcapHandle",
    "TlsConnections",
    "__version__",
    "counter_names",
    "pcap_check_filter",
    "pcap_devices",
    "scan_facts",
    "scan_facts_bytes",
]

__version__: str

_ColumnBuffer = tuple[Any, ...]
"""One column as the core hands it over: a tag ("i64", "f64", "dict", "list", ...) then
its buffers; ``dissector.wire.core._arrow_column`` reads them."""

_FrameTuple = tuple[str, int, str, int, bytes, int, int, int, int, bool]
"""src ip, src port, dst ip, dst port, payload, first/last ts (ns), first/last frame,
after_gap."""

_ExchangeTuple = tuple[
    str,  # capture
    int,  # stream
    str,  # client ip
    int,  # client port
    str,  # broker ip
    int,  # broker port
    str,  # kind (dissector.stages.ExchangeKind)
    _FrameTuple | None,  # request
    _FrameTuple | None,  # response
    int | None,  # api_key
    int | None,  # api_version
    int | None,  # correlation_id
    str | None,  # client_id
    str | None,  # note
]

_Fallback = Callable[[int, int, bytes | None, bytes | None, str], tuple[Any, ...]]
"""(api_key, api_version, request, response, capture) -> the summary columns of a pair
the native interpreter deferred."""

_TablesFallback = Callable[[int, int, bytes | None, bytes | None, KnownTopics], Any]
"""(api_key, api_version, request, response, topic names learnt) -> the
``protocol.tables.PairFacts`` of a pair the native reading of the tables left to Python."""

@final
class KnownTopics:
    """The topic names the core learnt so far in a capture (``protocol.tables.Names``)."""

    def name(self, topic_id: str) -> str | None: ...

@final
class Model:
    """The exported spec model (``dissector.protocol.export``), parsed once."""

    def __new__(cls, json: str) -> Self: ...

@final
class KeyLog:
    """NSS key log files and texts (native/src/python_tls.rs), parsed once for a run."""

    def __new__(
        cls, paths: list[str] = ..., texts: list[str] = ..., follow: bool = False
    ) -> Self: ...
    @property
    def entries(self) -> int: ...
    @property
    def bad_lines(self) -> int: ...

@final
class TlsConnections:
    """TLS connections of a capture by version, cipher suite and outcome."""

    @property
    def capture(self) -> str: ...
    @property
    def version(self) -> str | None: ...
    @property
    def cipher_suite(self) -> str | None: ...
    @property
    def outcome(self) -> str: ...
    @property
    def connections(self) -> int: ...

@final
class Analyzer:
    def __new__(
        cls,
        model: Model,
        broker_ports: list[int],
        heuristic: bool,
        max_frame: int,
        idle_timeout_ns: int | None,
        fallback: _Fallback | None,
        exchanges: bool = False,
        keep_keys: list[int] = ...,
        frame_budget: int = ...,
        capture_budget: int = ...,
        tls_keys: KeyLog | None = None,
        tables: bool = False,
        tables_fallback: _TablesFallback | None = None,
        pairs: bool = True,
    ) -> Self: ...
    def open_path(self, name: str, path: str | bytes | os.PathLike[str]) -> None: ...
    def open_bytes(self, name: str, data: bytes) -> None: ...
    def chain_path(self, name: str, path: str | bytes | os.PathLike[str]) -> None: ...
    def chain_bytes(self, name: str, data: bytes) -> None: ...
    def chain_next(self, next: Callable[[], tuple[str, str | bytes] | None]) -> None: ...
    def open_live(self, name: str) -> None: ...
    def run(self, max_rows: int) -> bool: ...
    def take_columns(self) -> dict[str, _ColumnBuffer]: ...
    def take_tables(self) -> dict[str, Any]: ...
    def take_exchanges(self) -> list[_ExchangeTuple]: ...
    def counters(self) -> dict[str, int]: ...
    def tls_streams(self) -> list[tuple[str, int]]: ...
    def tls_connections(self) -> list[TlsConnections]: ...
    def open_requests(self) -> list[tuple[int, int]]: ...
    def rows_waiting(self) -> int: ...
    def bytes_read(self) -> int: ...

@final
class InterfaceFacts:
    """One capture interface: link type, snaplen (0: none), pcapng if_name."""

    @property
    def linktype(self) -> int: ...
    @property
    def snaplen(self) -> int: ...
    @property
    def name(self) -> str | None: ...

@final
class CaptureFacts:
    """What a capture file says about where and when it was recorded
    (``dissector.wire.sets.FileFacts``)."""

    @property
    def format(self) -> str: ...
    @property
    def link_types(self) -> list[int]: ...
    @property
    def interfaces(self) -> list[InterfaceFacts]: ...
    @property
    def records(self) -> int: ...
    @property
    def first_ts_ns(self) -> int | None: ...
    @property
    def last_ts_ns(self) -> int | None: ...
    @property
    def min_ts_ns(self) -> int | None: ...
    @property
    def max_ts_ns(self) -> int | None: ...
    @property
    def damaged(self) -> bool: ...

def scan_facts(path: str | bytes | os.PathLike[str]) -> CaptureFacts: ...
def scan_facts_bytes(data: bytes) -> CaptureFacts: ...

class CaptureError(Exception):
    """A live capture cannot start or go on: args are (kind, message), kind one of
    missing, no_such_device, permission, bad_filter, other."""

def pcap_devices() -> list[str]: ...
def pcap_check_filter(filter: str, snaplen: int) -> None: ...

@final
class PcapHandle:
    """An activated libpcap handle (filter set, non-blocking); ``LiveRun`` takes it over."""

    @property
    def linktype(self) -> int: ...
    def __new__(
        cls, iface: str, filter: str, snaplen: int, buffer_bytes: int, timeout_ms: int
    ) -> Self: ...
    def stats(self) -> tuple[int, int, int]: ...
    def close(self) -> None: ...

@final
class LiveRun:
    """A live capture on the core's own threads (capture, rows)."""

    @property
    def linktype(self) -> int: ...
    def __new__(
        cls,
        analyzer: Analyzer,
        handle: PcapHandle,
        write_pcap: str | None = None,
        snaplen: int = 262144,
        max_waiting: int = ...,
    ) -> Self: ...
    def stop(self, drain: bool = True) -> None: ...
    def wait(self, timeout: float, min_rows: int) -> bool: ...
    def done(self) -> bool: ...
    def join(self, timeout: float) -> bool: ...
    def take_columns(self) -> dict[str, _ColumnBuffer]: ...
    def rows_waiting(self) -> int: ...
    def frames(self) -> int: ...
    def stats(self) -> tuple[int, int, int]: ...
    def counters(self) -> dict[str, int]: ...
    def open_requests(self) -> list[tuple[int, int]]: ...
    def error(self) -> str | None: ...
    def pcap_error(self) -> str | None: ...

def counter_names() -> list[str]:
    """Every counter name the core may produce (native/src/counter.rs)."""
