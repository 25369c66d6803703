"""The stages wired together: packets -> streams -> frames -> exchanges -> rows.

``Session`` runs one packet source (a capture file or a live interface) through
reassembly, framing and correlation. ``iter_exchanges`` and ``iter_pairs``
stream over one or many capture files, so memory follows the number of open
connections, not the capture length.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dissector.accounting import Counters
from dissector.options import Options, capture_paths
from tests.oracle.capture import Packet, read_packets
from tests.oracle.correlate import CorrelationConfig, Correlator, Exchange
from tests.oracle.framing import Framer
from tests.oracle.kafka_header import VersionCheck
from tests.oracle.rows import Decoder, PairRecord, build_record
from tests.oracle.tcp import Chunk, Endpoint, Reassembler, StreamClose, StreamOpen

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def correlation_config(
    options: Options, known: VersionCheck, flexible: VersionCheck
) -> CorrelationConfig:
    return CorrelationConfig(
        known=known,
        flexible_request=flexible,
        broker_ports=options.broker_ports,
        heuristic=options.find_kafka_by_heuristic,
        max_frame=options.max_frame,
    )


def _default_decoder() -> Any:
    from dissector import protocol

    return protocol


@dataclass
class Session:
    """One packet source through reassembly, framing and correlation."""

    options: Options = field(default_factory=Options)
    counters: Counters = field(default_factory=Counters)
    decoder: Any = field(default_factory=_default_decoder)
    tls_streams: list[int] = field(default_factory=list)  # connections found to carry TLS

    def __post_init__(self) -> None:
        idle = self.options.idle_timeout_s
        self._tcp = Reassembler(
            self.counters, idle_timeout_ns=int(idle * 1e9) if idle is not None else None
        )
        self._corr = Correlator(
            self.counters,
            correlation_config(
                self.options, self.decoder.is_known_version, self.decoder.request_is_flexible
            ),
        )
        # stream -> sender -> its framer; by stream so that a close finds its framers
        # without scanning every open connection's (quadratic over a long capture).
        self._framers: dict[int, dict[Endpoint, Framer]] = {}

    def packet(self, pkt: Packet) -> list[Exchange]:
        out: list[Exchange] = []
        for ev in self._tcp.feed(pkt):
            # Chunks are nearly every event: dispatched here, without a call.
            out += self._chunk(ev) if type(ev) is Chunk else self._event(ev)
        return out

    def finish(self) -> list[Exchange]:
        out: list[Exchange] = []
        for ev in self._tcp.flush():
            out.extend(self._event(ev))
        for stream in list(self._framers):
            self._close_framers(stream)
        out.extend(self._corr.close_all())
        return out

    def _event(self, ev: StreamOpen | Chunk | StreamClose) -> list[Exchange]:
        if isinstance(ev, Chunk):
            return self._chunk(ev)
        if isinstance(ev, StreamOpen):
            self._corr.open(ev)
            return []
        self._close_framers(ev.stream)
        return self._corr.close(ev.stream)

    def _chunk(self, ch: Chunk) -> list[Exchange]:
        senders = self._framers.get(ch.stream)
        framer = senders.get(ch.src) if senders is not None else None
        if framer is None:
            if not self._corr.is_kafka_candidate(ch.stream):
                self.counters.add("non_kafka_bytes", len(ch.data))
                return []
            framer = Framer(
                ch.stream,
                ch.src,
                ch.dst,
                self.counters,
                self._corr.start_check(ch.stream, ch.src),
                self.options.max_frame,
                functools.partial(self._corr.confirms_start, ch.stream, ch.src),
            )
            self._framers.setdefault(ch.stream, {})[ch.src] = framer
        out: list[Exchange] = []
        was_tls = framer.tls
        frames = framer.feed(ch)
        if framer.lost_at is not None:
            self._corr.frames_lost(ch.stream, ch.src, *framer.lost_at)
            framer.lost_at = None
        if frames:
            self.counters.add("kafka_frames", len(frames))
            for frame in frames:
                out += self._corr.frame(frame)
        if framer.tls and not was_tls and ch.stream not in self.tls_streams:
            self.tls_streams.append(ch.stream)
        return out

    def open_requests(self) -> Counter[int]:
        """Requests waiting for a response right now, by api_key (for live views)."""
        return self._corr.open_requests()

    def _close_framers(self, stream: int) -> None:
        for framer in self._framers.pop(stream, {}).values():
            framer.close()


def iter_packet_exchanges(packets: Iterable[Packet], session: Session) -> Iterator[Exchange]:
    """Exchanges of any packet source (file or live), as soon as each is complete."""
    for pkt in packets:
        yield from session.packet(pkt)
    yield from session.finish()


def iter_exchanges(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    options: Options | None = None,
    counters: Counters | None = None,
    decoder: Decoder | None = None,
    sessions: list[Session] | None = None,
) -> Iterator[tuple[str, Exchange]]:
    """(capture path, exchange) for every exchange in the captures, in capture order.

    ``sessions``, when given, receives each capture's ``Session`` (e.g. which
    connections carry TLS) for callers that report on them.
    """
    opts = options or Options(ports=frozenset(ports) if ports is not None else None)
    counters = counters if counters is not None else Counters()
    decoder = decoder or _default_decoder()
    for path in capture_paths(source):
        session = Session(opts, counters, decoder)
        if sessions is not None:
            sessions.append(session)
        for ex in iter_packet_exchanges(read_packets(path, counters), session):
            yield path, ex


def iter_pairs(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    options: Options | None = None,
    counters: Counters | None = None,
    decoder: Decoder | None = None,
    sessions: list[Session] | None = None,
) -> Iterator[PairRecord]:
    """Stream the pair records of one or many captures (the DataFrame's rows)."""
    decoder = decoder or _default_decoder()
    counters = counters if counters is not None else Counters()
    topics_by_capture: dict[str, Any] = {}
    exchanges = iter_exchanges(
        source,
        ports=ports,
        options=options,
        counters=counters,
        decoder=decoder,
        sessions=sessions,
    )
    for path, ex in exchanges:
        topics = topics_by_capture.get(path)
        if topics is None:
            topics_by_capture.clear()  # captures are independent: forget the previous one
            topics = topics_by_capture[path] = decoder.TopicNames()
        rec = build_record(path, ex, decoder, topics, counters)
        if rec.assumed_version is not None:
            counters.add("assumed_version_pairs")
        yield rec
