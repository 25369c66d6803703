"""Why a capture gave no Kafka pair, in one sentence, from the stage counters.

The counters account for every packet (``dissector/anomalies.py``): frames read, TCP
connections, directions that never made a Kafka frame and their bytes, TLS, packets
that were not TCP (UDP, ICMP...) or not IP. When no pair came out, they say what the
capture held instead; the CLI table and the report print this instead of an empty
table that reads like an answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NoKafka:
    """What a capture without one Kafka pair held instead."""

    headline: str  # "no Kafka found"
    held: tuple[str, ...]  # what was there, one phrase each
    hint: str  # what the user may try

    def sentence(self) -> str:
        held = "; ".join(self.held) if self.held else "nothing"
        return (
            f"{self.headline[:1].upper()}{self.headline[1:]}: the capture held {held}. {self.hint}"
        )


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def no_kafka(
    rows: int,
    counters: Mapping[str, int],
    tls_streams: Sequence[int] = (),
    ports: frozenset[int] | None = None,
) -> NoKafka | None:
    """None when there are Kafka rows; else what the counters say was there."""
    if rows:
        return None
    held: list[str] = []
    frames = counters.get("frames", 0)
    if not frames:
        held.append("no packets")
    streams = counters.get("tcp_streams", 0)
    if streams:
        phrase = _n(streams, "TCP connection")
        other = counters.get("non_kafka_directions", 0)
        skipped = counters.get("non_kafka_bytes", 0)
        if other:
            phrase += (
                f" whose traffic was not Kafka ({_n(skipped, 'byte')}"
                f" on {_n(other, 'direction')} that never made a Kafka frame)"
            )
        elif skipped:
            # --ports: connections on other ports are not read at all, only counted
            phrase += f" carrying {_n(skipped, 'byte')} on ports not taken for Kafka"
        elif not counters.get("kafka_frames", 0) and not tls_streams:
            phrase += " without payload to read"
        held.append(phrase)
    tls = counters.get("tls_connections_directions", 0)
    if tls:
        held.append(f"TLS on {_n(tls, 'connection direction')} without its session keys")
    non_tcp = counters.get("non_tcp", 0)
    if non_tcp:
        verb = "is" if non_tcp == 1 else "are"
        held.append(f"{_n(non_tcp, 'IP packet')} that {verb} not TCP (UDP, ICMP...)")
    non_ip = counters.get("non_ip", 0)
    if non_ip:
        held.append(
            f"{_n(non_ip, 'packet')} that {'is' if non_ip == 1 else 'are'} not IP (ARP, LLDP...)"
        )
    if tls:
        hint = (
            "Kafka over TLS is decrypted with the session keys: give the client's or the "
            "broker's key log (SSLKEYLOGFILE format) with --tls-keylog, or a pcapng that "
            "carries them (Decryption Secrets Block)."
        )
    elif ports:
        listed = ",".join(str(p) for p in sorted(ports))
        hint = (
            f"Only ports {listed} were taken for Kafka (--ports); leave it out to let the "
            "heuristic look at every port."
        )
    elif streams:
        hint = (
            "Kafka on the usual ports (9092-9099, 19092, 29092, 39092) or recognised by its "
            "request headers on any other port was not there; if a broker listens on an "
            "unusual port, name it with --ports."
        )
    else:
        hint = "Kafka runs over TCP: capture the brokers' ports (e.g. tcp port 9092)."
    return NoKafka("no Kafka found", tuple(held), hint)
