"""The anomaly registry: every counter, decode_error code and row flag, in one table.

Like Wireshark's expert-info table, each thing the pipeline can notice has one
entry: what it is called, which stage notices it, how bad it is, and one line
saying what it means. The stages keep using plain strings (the hot paths stay
cheap); ``tests/test_anomalies.py`` scans the Python and Rust sources so that a
name used there and missing here, or registered here and used nowhere, fails.

Kinds:

* ``counter``: a name in ``Counters`` (``df.attrs["counters"]``, printed by the CLI).
* ``decode_error``: a code that starts a ``decode_error`` cell or part of one
  (``request: unsupported_version: ...``). A body that fails elsewhere is described
  by its field path instead: ``response: topics[0].name: ... at offset 42``.
* ``record_error``: a code inside a records field, listed in ``decode_error`` as
  ``records: <code>: <detail>``; the native core also counts each as ``records_<code>``.
* ``flag``: a value of the ``flags`` column.
* ``note``: a remark on one decoded frame (``Decoded.notes``, shown by ``decode``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Kind(StrEnum):
    COUNTER = "counter"
    DECODE_ERROR = "decode_error"
    RECORD_ERROR = "record_error"
    FLAG = "flag"
    NOTE = "note"


class Severity(StrEnum):
    INFO = "info"  # normal traffic, counted so totals add up
    WARNING = "warning"  # something was lost, skipped or guessed
    ERROR = "error"  # the input is damaged or breaks the protocol


class Stage(StrEnum):
    """The stages of the README's table, in data-flow order."""

    CAPTURE = "capture"
    TCP = "tcp"
    TLS = "tls"
    FRAMING = "framing"
    CORRELATE = "correlate"
    PROTOCOL = "protocol"
    RECORDS = "records"
    SUMMARY = "summary"
    ROWS = "rows"


STAGE_ORDER: Final[tuple[Stage, ...]] = tuple(Stage)
SEVERITY_ORDER: Final[tuple[Severity, ...]] = tuple(Severity)
RECORDS_COUNTER_PREFIX: Final = "records_"


@dataclass(frozen=True, slots=True)
class Anomaly:
    name: str
    kind: Kind
    stage: Stage
    severity: Severity
    description: str


_C, _D, _R, _F, _N = Kind.COUNTER, Kind.DECODE_ERROR, Kind.RECORD_ERROR, Kind.FLAG, Kind.NOTE
_I, _W, _E = Severity.INFO, Severity.WARNING, Severity.ERROR
_CAP, _TCP, _FRM, _COR = Stage.CAPTURE, Stage.TCP, Stage.FRAMING, Stage.CORRELATE
_TLS = Stage.TLS
_PRO, _REC, _SUM, _ROW = Stage.PROTOCOL, Stage.RECORDS, Stage.SUMMARY, Stage.ROWS

# (name, kind, stage, severity, description)
_TABLE: Final[tuple[tuple[str, Kind, Stage, Severity, str], ...]] = (
    # ---- capture: the file and the link/IP/TCP headers
    ("bytes_read", _C, _CAP, _I, "bytes read from the capture file (after gunzip)"),
    ("frames", _C, _CAP, _I, "packet records read from the capture"),
    (
        "chained_files",
        _C,
        _CAP,
        _I,
        "files read as the continuation of the capture before them (a capture set)",
    ),
    ("tcp_packets", _C, _CAP, _I, "TCP segments handed to reassembly"),
    ("truncated_file", _C, _CAP, _E, "the file ends inside a record; reading stopped there"),
    ("bad_record", _C, _CAP, _E, "a record or block of impossible length; reading stopped"),
    ("read_error", _C, _CAP, _E, "an I/O error or corrupt gzip stream ended reading early"),
    ("bad_timestamp", _C, _CAP, _E, "a record whose timestamp cannot be converted; skipped"),
    ("bad_pcapng_option", _C, _CAP, _W, "a pcapng option runs past its block; options ignored"),
    (
        "caplen_exceeds_wire_len",
        _C,
        _CAP,
        _W,
        "records claiming more captured bytes than were on the wire",
    ),
    (
        "pcapng_unknown_interface",
        _C,
        _CAP,
        _W,
        "packets on an interface never described; read as the first one (or Ethernet)",
    ),
    ("pcapng_interface_limit", _C, _CAP, _W, "interface descriptions past the bound; ignored"),
    ("pcapng_simple_packet_block", _C, _CAP, _W, "simple packet blocks (no timestamp: time 0)"),
    ("unknown_linktype", _C, _CAP, _W, "packets of a link type not decoded; skipped"),
    ("bad_link_header", _C, _CAP, _E, "link-layer header cut short or invalid; packet skipped"),
    ("non_ip", _C, _CAP, _I, "packets that are not IPv4/IPv6 (ARP, LLDP...); skipped"),
    ("bad_ip_header", _C, _CAP, _E, "IP header cut short or invalid; packet skipped"),
    ("bad_ip_length", _C, _CAP, _E, "IP total length larger than the frame; packet skipped"),
    ("ip_total_length_zero", _C, _CAP, _I, "IP total length 0 (segmentation offload); trusted"),
    ("ip_fragment", _C, _CAP, _I, "IP fragments seen (reassembled into datagrams)"),
    ("ip_reassembled", _C, _CAP, _I, "IP datagrams reassembled from fragments"),
    (
        "ip_fragments_timeout",
        _C,
        _CAP,
        _W,
        "fragments whose datagram was not whole in 30 s (v6: 60 s)",
    ),
    ("ip_fragments_evicted", _C, _CAP, _W, "fragments dropped: too many datagrams pending at once"),
    (
        "ip_fragments_bad",
        _C,
        _CAP,
        _E,
        "fragments of a datagram that cannot be made (overlaps differ)",
    ),
    ("ip_fragments_cut", _C, _CAP, _W, "fragments cut by the snap length; cannot be placed"),
    ("ip_fragments_incomplete", _C, _CAP, _W, "fragments whose datagram was not whole at the end"),
    ("tunnel_vxlan", _C, _CAP, _I, "VXLAN layers opened (UDP 4789); rows use the inner addresses"),
    ("tunnel_geneve", _C, _CAP, _I, "GENEVE layers opened (UDP 6081)"),
    ("tunnel_gre", _C, _CAP, _I, "GRE layers opened (IP, MPLS or Ethernet inside)"),
    ("tunnel_erspan", _C, _CAP, _I, "ERSPAN type I, II or III layers opened (over GRE)"),
    ("tunnel_ip_in_ip", _C, _CAP, _I, "IP-in-IP layers opened (IPv4/IPv6 in IPv4/IPv6)"),
    ("tunnel_mpls", _C, _CAP, _I, "MPLS label stacks opened"),
    ("tunnel_too_deep", _C, _CAP, _W, "packets nested in more than 8 tunnel layers; skipped"),
    ("bad_tunnel_header", _C, _CAP, _E, "tunnel header cut short or invalid; packet skipped"),
    ("non_tcp", _C, _CAP, _I, "IP packets that are not TCP or a tunnel (UDP, ICMP...); skipped"),
    ("bad_tcp_header", _C, _CAP, _E, "TCP header cut short or invalid; packet skipped"),
    ("snaplen_truncated", _C, _CAP, _W, "TCP payload cut by the snap length: bytes lost"),
    # ---- tcp: reassembly per direction
    ("tcp_streams", _C, _TCP, _I, "TCP connections seen"),
    ("tcp_port_reuse", _C, _TCP, _I, "a new connection on the 4-tuple of a closed one"),
    ("tcp_after_close", _C, _TCP, _W, "segments with payload after the connection closed"),
    ("tcp_after_close_bytes", _C, _TCP, _W, "payload bytes of tcp_after_close segments"),
    ("tcp_idle_close", _C, _TCP, _I, "connections closed for idleness (no FIN or RST seen)"),
    ("tcp_connection_limit", _C, _TCP, _W, "oldest connection closed: too many open at once"),
    ("tcp_gaps", _C, _TCP, _W, "holes in a byte stream (bytes never captured)"),
    ("tcp_gap_bytes", _C, _TCP, _W, "bytes missing in tcp_gaps"),
    ("tcp_acked_gap", _C, _TCP, _W, "holes skipped because the peer acknowledged past them"),
    ("tcp_rst_ignored", _C, _TCP, _W, "RSTs far outside the window; ignored"),
    ("tcp_data_after_rst", _C, _TCP, _W, "payload on a connection after its RST"),
    ("tcp_suspect_rst", _C, _TCP, _W, "RSTs taken back: later traffic shows the connection lived"),
    ("tcp_suspect_syn", _C, _TCP, _W, "SYNs on a live connection never confirmed as a reuse"),
    ("tcp_out_of_window", _C, _TCP, _W, "segments too far ahead of the stream; dropped"),
    ("tcp_out_of_order", _C, _TCP, _I, "segments that arrived ahead of a hole; buffered"),
    ("tcp_buffer_limit", _C, _TCP, _W, "a direction buffered too much; holes skipped"),
    ("tcp_global_buffer_limit", _C, _TCP, _W, "all directions buffered too much; holes skipped"),
    ("tcp_keepalive", _C, _TCP, _I, "keep-alive probes (one old byte); ignored"),
    ("tcp_retransmission", _C, _TCP, _I, "segments resent with bytes already delivered"),
    ("tcp_overlap", _C, _TCP, _I, "segments overlapping bytes already delivered"),
    ("tcp_overlap_conflict", _C, _TCP, _W, "overlapping bytes that differ; the first copy kept"),
    # ---- tls: decryption of connections whose handshake is captured (one outcome each)
    ("tls_connections", _C, _TLS, _I, "TLS connections (handshake captured or not)"),
    ("tls_decrypted_connections", _C, _TLS, _I, "TLS connections decrypted to the end"),
    ("tls_no_secret", _C, _TLS, _W, "TLS connections with no key log secret for them"),
    ("tls_no_handshake", _C, _TLS, _W, "TLS connections whose handshake the capture lacks"),
    ("tls_unsupported_version", _C, _TLS, _W, "TLS connections of a version not decrypted"),
    ("tls_unsupported_suite", _C, _TLS, _W, "TLS connections of a cipher suite not decrypted"),
    ("tls_decrypt_failed", _C, _TLS, _E, "TLS connections a record of failed to decrypt"),
    ("tls_capture_gap", _C, _TLS, _W, "TLS connections that lost bytes; decryption stopped"),
    ("tls_gaps", _C, _TLS, _W, "holes of known size in TLS streams being decrypted"),
    ("tls_records_lost", _C, _TLS, _W, "TLS records lost in holes decryption went on after"),
    ("tls_bad_record", _C, _TLS, _E, "TLS connections with an impossible record or hello"),
    ("tls_buffer_limit", _C, _TLS, _W, "TLS connections that held too much; given up"),
    ("tls_record_bytes", _C, _TLS, _I, "TLS record bytes read (hellos, decrypted records)"),
    ("tls_plaintext_bytes", _C, _TLS, _I, "plaintext bytes decrypted and passed to framing"),
    ("tls_keylog_bad_lines", _C, _TLS, _W, "key log lines in the capture that fit no form"),
    ("tls_secrets_limit", _C, _CAP, _W, "Decryption Secrets Blocks past the bound; ignored"),
    # ---- framing: 4-byte size prefixes, resync, TLS
    ("kafka_frames", _C, _FRM, _I, "size-prefixed frames cut from the streams"),
    ("bad_frame_size", _C, _FRM, _E, "a size prefix that cannot be a Kafka frame"),
    ("resyncs", _C, _FRM, _W, "times framing found a frame boundary again after losing it"),
    ("resync_skipped_bytes", _C, _FRM, _W, "bytes skipped while looking for a frame boundary"),
    (
        "resync_unconfirmed",
        _C,
        _FRM,
        _W,
        "frame starts after a hole refused: their correlation id fits no request",
    ),
    (
        "frames_cut_by_gap",
        _C,
        _FRM,
        _W,
        "frames a TCP hole fell inside (paired by their header, body not decoded)",
    ),
    ("truncated_frames", _C, _FRM, _W, "frames cut off by the end of the stream"),
    ("truncated_frame_bytes", _C, _FRM, _W, "bytes of truncated_frames"),
    ("non_kafka_bytes", _C, _FRM, _I, "bytes of directions that never made a Kafka frame"),
    ("non_kafka_directions", _C, _FRM, _I, "connection directions that are not Kafka"),
    ("tls_connections_directions", _C, _FRM, _I, "connection directions carrying TLS"),
    ("tls_bytes", _C, _FRM, _I, "bytes of TLS not decrypted"),
    ("tls_false_alarm", _C, _FRM, _I, "bytes that looked like TLS and were not"),
    # ---- correlate: requests to responses
    ("non_kafka_frames", _C, _COR, _I, "frames of connections not taken for Kafka"),
    ("kafka_found_by_heuristic", _C, _COR, _I, "connections on other ports taken for Kafka"),
    ("malformed_requests", _C, _COR, _E, "request frames whose header cannot be read"),
    (
        "unsupported_version_requests",
        _C,
        _COR,
        _W,
        "requests of a known API in a version without a spec",
    ),
    ("unknown_api_key_requests", _C, _COR, _W, "requests of an API key without a spec"),
    ("duplicate_correlation_ids", _C, _COR, _W, "a correlation id reused while still open"),
    ("open_requests_evicted", _C, _COR, _W, "unanswered requests dropped: too many open"),
    ("orphan_responses", _C, _COR, _W, "responses without a request"),
    ("responses_out_of_order", _C, _COR, _W, "responses answering other than the oldest request"),
    ("late_request_pairs", _C, _COR, _I, "pairs whose response was seen before the request"),
    ("sasl_raw_tokens", _C, _COR, _I, "raw SASL tokens (after SaslHandshake v0)"),
    (
        "request_header_truncated",
        _D,
        _COR,
        _E,
        "the request header (key, version, correlation id, client id) cannot be read",
    ),
    ("duplicate_correlation_id", _D, _COR, _W, "unanswered: a later request reused its id"),
    ("evicted", _D, _COR, _W, "unanswered: dropped from the open requests (limit reached)"),
    ("request_incomplete", _D, _ROW, _W, "request bytes not captured (hole or snap length)"),
    ("response_incomplete", _D, _ROW, _W, "response bytes not captured (hole or snap length)"),
    # ---- protocol: messages
    ("unknown_api_key", _D, _PRO, _W, "no spec knows this API key; body not decoded"),
    (
        "unsupported_version",
        _D,
        _PRO,
        _W,
        "version newer than the specs, not decodable by the newest layout; status kept",
    ),
    (
        "version_refused",
        _D,
        _PRO,
        _I,
        "ApiVersions version the broker refused too (KIP-511); body unread by both",
    ),
    (
        "unsupported_version",
        _N,
        _PRO,
        _I,
        "ApiVersions error 35 answered in the v0 layout; decoded as v0",
    ),
    ("fast_path_failed", _N, _PRO, _E, "generated decoder failed where the closures did (a bug)"),
    # ---- records: record batches inside Produce/Fetch/...
    ("records_partial_batches", _C, _REC, _I, "batches cut at the fetch size limit (normal)"),
    ("bad_input", _R, _REC, _E, "records field is not bytes"),
    ("bad_batch_length", _R, _REC, _E, "entry length negative or too small for its header"),
    ("bad_message_size", _R, _REC, _E, "magic 0/1 message shorter than its fixed fields"),
    ("bad_length", _R, _REC, _E, "key, value or header length below -1"),
    ("bad_record_count", _R, _REC, _E, "negative records count in a v2 batch header"),
    ("bad_header_count", _R, _REC, _E, "record header count negative or past the bytes left"),
    ("bad_header_key", _R, _REC, _E, "record header with a null key"),
    ("bad_varint", _R, _REC, _E, "varint too long for its type, or cut off"),
    ("bad_compressed_message", _R, _REC, _E, "compressed magic 0/1 wrapper with a null value"),
    ("bad_record_length", _R, _REC, _E, "v2 record shorter than its minimum fields"),
    ("crc_mismatch", _R, _REC, _E, "batch or message CRC does not match its bytes"),
    ("decompression_failed", _R, _REC, _E, "compressed data the codec rejects"),
    ("decompression_limit", _R, _REC, _W, "decompression would pass the budget; stopped"),
    ("unknown_codec", _R, _REC, _E, "compression codec id not defined by Kafka"),
    ("unknown_magic", _R, _REC, _E, "magic byte other than 0, 1 or 2"),
    ("nesting_too_deep", _R, _REC, _E, "compressed message nested in compressed messages"),
    ("record_count_mismatch", _R, _REC, _E, "v2 header count differs from the records found"),
    ("record_length_mismatch", _R, _REC, _E, "record fields do not end where its length says"),
    ("message_size_mismatch", _R, _REC, _E, "magic 0/1 fields do not end where its size says"),
    ("expand_limit", _R, _REC, _W, "expanded records past the item budget: counted, not kept"),
    ("trailing_bytes", _R, _REC, _W, "bytes after the last record of a batch"),
    ("truncated_record", _R, _REC, _E, "record runs past the end of its batch"),
    ("truncated_batch", _R, _REC, _E, "entry cut short inside a decompressed message set"),
    ("too_many_errors", _R, _REC, _W, "more record errors than are listed"),
    ("internal_error", _R, _REC, _E, "a record parser bug; what was read before it is kept"),
    # ---- summary: the analytics columns
    ("summary_deferred", _C, _SUM, _I, "pairs the native summary left to the Python decoder"),
    ("summary_topics_truncated", _C, _SUM, _W, "pairs naming more topics than a row keeps"),
    (
        "assumed_version_pairs",
        _C,
        _SUM,
        _W,
        "pairs of a version newer than the specs decoded by the newest layout",
    ),
    ("summary_topic_ids_dropped", _C, _SUM, _W, "topic ids not learnt: the id table is full"),
    (
        "queueing_rows_forced",
        _C,
        _SUM,
        _W,
        "rows taken before their turn (1,024 waiting): queue_ms/inflight approximate",
    ),
    (
        "queueing_answers_dropped",
        _C,
        _SUM,
        _W,
        "response times past 10,000 per connection forgotten: later inflight may be low",
    ),
    (
        "queueing_connections_dropped",
        _C,
        _SUM,
        _W,
        "connection queueing state dropped past 65,536 connections",
    ),
    # ---- rows
    (
        "capture_gap",
        _F,
        _ROW,
        _W,
        "bytes of or before this pair were lost (or the capture began late)",
    ),
    ("truncated", _F, _ROW, _W, "bytes of this pair were cut by the capture's snap length"),
    ("negative_latency", _F, _ROW, _W, "capture timestamps ran backwards across the pair"),
    ("tls", _F, _ROW, _I, "the pair was decrypted from a TLS connection"),
)

ANOMALIES: Final[tuple[Anomaly, ...]] = tuple(Anomaly(*row) for row in _TABLE)


def by_kind(kind: Kind) -> dict[str, Anomaly]:
    """Entries of one kind by name."""
    return {a.name: a for a in ANOMALIES if a.kind == kind}


def lookup(name: str, kind: Kind = Kind.COUNTER) -> Anomaly | None:
    """The entry of a counter (or other kind) name; for a native ``records_<code>``
    counter, the record error it counts."""
    found = by_kind(kind).get(name)
    if found is None and kind == Kind.COUNTER and name.startswith(RECORDS_COUNTER_PREFIX):
        found = by_kind(Kind.RECORD_ERROR).get(name.removeprefix(RECORDS_COUNTER_PREFIX))
    return found


def counter_names() -> frozenset[str]:
    """Every counter name the pipelines may produce, ``records_<code>`` included."""
    record_counters = {RECORDS_COUNTER_PREFIX + n for n in by_kind(Kind.RECORD_ERROR)}
    return frozenset(by_kind(Kind.COUNTER)) | record_counters


def ordered(entries: Iterable[Anomaly] = ANOMALIES) -> list[Anomaly]:
    """Stage (data-flow order), then kind, then name."""
    kinds = tuple(Kind)
    return sorted(entries, key=lambda a: (STAGE_ORDER.index(a.stage), kinds.index(a.kind), a.name))


def markdown_table(entries: Iterable[Anomaly] = ANOMALIES) -> str:
    """The table as GitHub markdown (the README section is this text)."""
    lines = ["| name | kind | stage | severity | meaning |", "|---|---|---|---|---|"]
    for a in ordered(entries):
        lines.append(f"| `{a.name}` | {a.kind} | {a.stage} | {a.severity} | {a.description} |")
    return "\n".join(lines) + "\n"


RUST_COUNTER_MODULE: Final = "native/src/counter.rs"
"""The native core's ``Counter`` enum, generated from this table by
``scripts/native-counters`` (``rust_counter_module``)."""


def rust_variant(name: str) -> str:
    """The native core's ``Counter`` variant of a counter name (``tcp_gaps`` -> ``TcpGaps``)."""
    return "".join(part.capitalize() for part in name.split("_"))


def rust_counter_module() -> str:
    """The text of ``RUST_COUNTER_MODULE``: one variant per counter name
    (``counter_names``, sorted) with its name. The core counts by variant, so a name
    not registered here does not compile; the built module's ``counter_names()`` is
    compared with this table by ``tests/test_anomalies.py``."""
    names = sorted(counter_names())
    variants = [(rust_variant(n), n) for n in names]
    lines = [
        "//! Every counter name the pipelines may produce: generated from",
        "//! dissector/anomalies.py by scripts/native-counters (do not edit; run it after",
        "//! changing the registry). Stages count by variant (`Counters` has a slot per",
        "//! variant); names leave the core only through `Counter::name`.",
        "",
        "/// A registered counter (`dissector.anomalies.counter_names()`).",
        "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]",
        "pub enum Counter {",
        *(f"    {v}," for v, _ in variants),
        "}",
        "",
        "impl Counter {",
        f"    pub const ALL: [Counter; {len(variants)}] = [",
        *(f"        Counter::{v}," for v, _ in variants),
        "    ];",
        "",
        '    /// The counter\'s name in the output (`df.attrs["counters"]`).',
        "    pub const fn name(self) -> &'static str {",
        "        match self {",
        *(f'            Counter::{v} => "{n}",' for v, n in variants),
        "        }",
        "    }",
        "",
        "    /// The counter of a name; None for a name the registry does not hold.",
        "    pub fn named(name: &str) -> Option<Counter> {",
        "        match name {",
        *(f'            "{n}" => Some(Counter::{v}),' for v, n in variants),
        "            _ => None,",
        "        }",
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"
