//! Records that cross the stages of the native core.
//!
//! They mirror the Python dataclasses of the same stages (the test oracle's
//! `tests/oracle/capture.py` `Packet`, `tests/oracle/tcp.py` `StreamOpen/Chunk/StreamClose`,
//! and `dissector/stages.py`'s `Frame` and `Exchange`) so that the pure-Python pipeline
//! under `tests/oracle/` stays a field-by-field oracle for this one.
//! Data flows one way: capture -> tcp -> framing -> correlate -> summary -> rows.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use crate::counter::Counter;

/// Nanoseconds since the Unix epoch, UTC.
pub type Ts = i64;

/// (address, port) of one side of a TCP connection.
pub type Endpoint = (IpAddr, u16);

/// Which side of an exchange a layout or a frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Request,
    Response,
}

/// A multiply-rotate hash for the per-pair lookups by small integer keys (layouts,
/// error names): the tables are fixed at load, so SipHash's flood resistance buys
/// nothing there and costs a tenth of a pair's time.
#[derive(Default, Clone, Copy)]
pub struct SmallKeyHasher(u64);

impl Hasher for SmallKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i16(&mut self, n: i16) {
        self.write_u64(n as u64);
    }

    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }
}

pub type SmallKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<SmallKeyHasher>>;

/// FNV-1a for maps keyed by the core's own ids (TLS connections by stream): no attacker
/// chooses the keys, and SipHash showed in profiles where such maps are hit per chunk.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Event counts every stage adds to, one slot per registered `Counter` (the enum
/// generated from `dissector/anomalies.py`): counting is an array index, and a name
/// the registry lacks does not compile. Names appear only where counts leave the core
/// (`Counter::name`, at the Python boundary and in the test drivers' output).
/// A slot is None until first counted, so a count of 0 that was added still shows, as
/// a name counted with 0 does in the Python stages' dict.
#[derive(Clone)]
pub struct Counters {
    counts: [Option<u64>; Counter::ALL.len()],
}

/// The counted names and counts only (what a failing test wants to read).
impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(c, n)| (c.name(), n)))
            .finish()
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            counts: [None; Counter::ALL.len()],
        }
    }
}

impl Counters {
    #[inline]
    pub fn add(&mut self, counter: Counter, n: u64) {
        let slot = &mut self.counts[counter as usize];
        *slot = Some(slot.unwrap_or(0) + n);
    }

    #[inline]
    pub fn inc(&mut self, counter: Counter) {
        self.add(counter, 1);
    }

    /// Take back counts (a stage that re-attributes what it counted); a counter that
    /// reaches zero disappears, as if never counted.
    pub fn sub(&mut self, counter: Counter, n: u64) {
        let slot = &mut self.counts[counter as usize];
        if let Some(v) = slot {
            *slot = Some(*v - n.min(*v)).filter(|&left| left > 0);
        }
    }

    /// Add another stage's counts (a stage that ran on another thread).
    pub fn merge(&mut self, other: &Counters) {
        for (counter, n) in other.iter() {
            self.add(counter, n);
        }
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.counts[counter as usize].unwrap_or(0)
    }

    /// The counters counted, in the registry's (alphabetical) order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL
            .iter()
            .zip(&self.counts)
            .filter_map(|(&c, n)| Some((c, (*n)?)))
    }
}

/// TCP flag bits of `Packet::flags`.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// One TCP segment as the capture stage hands it on (`tests/oracle/capture.py` `Packet`).
/// `payload` borrows the reader's buffer: a stage that keeps bytes copies them.
#[derive(Debug, Clone)]
pub struct Packet<'a> {
    pub frame: u64, // 1-based position in the capture, as tshark's frame.number
    pub ts_ns: Ts,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: &'a [u8],
    pub missing: u32, // payload bytes the IP length announces but the snaplen cut off
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Fin,
    Rst,
    Reused,
    EndOfCapture,
    Idle,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Fin => "fin",
            CloseReason::Rst => "rst",
            CloseReason::Reused => "reused",
            CloseReason::EndOfCapture => "end_of_capture",
            CloseReason::Idle => "idle",
        }
    }
}

#[derive(Debug, Clone)]
pub struct StreamOpen {
    pub stream: u32, // connection index in this capture, like tshark's tcp.stream
    pub initiator: Endpoint,
    pub responder: Endpoint,
    pub syn_seen: bool,
}

/// In-order payload bytes of one direction (`tcp.Chunk`).
#[derive(Debug, Clone)]
pub struct Chunk {
    pub stream: u32,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub data: Vec<u8>,
    pub ts_ns: Ts, // time of the packet that delivered these bytes
    pub frame: u64,
    pub resync: bool, // data does not continue the previous bytes of this direction
    pub lost: u64,    // bytes known to be missing just before `data` (0 if unknown)
    /// All of `lost` was cut by the snap length (packets seen, their bytes not kept),
    /// none lost with a whole packet.
    pub snapped: bool,
}

#[derive(Debug, Clone)]
pub struct StreamClose {
    pub stream: u32,
    pub reason: CloseReason,
}

#[derive(Debug, Clone)]
pub enum Event {
    Open(StreamOpen),
    Chunk(Chunk),
    Close(StreamClose),
}

/// One size-prefixed Kafka message (`dissector.stages.Frame`).
#[derive(Debug, Clone)]
pub struct KafkaFrame {
    pub stream: u32,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub payload: Vec<u8>, // message bytes after the 4-byte size prefix
    pub first_ts_ns: Ts,
    pub last_ts_ns: Ts,
    pub first_frame: u64,
    pub last_frame: u64,
    pub after_gap: bool, // the first frame accepted after a resync
    pub tls: bool,       // decrypted from a TLS connection
    /// A hole fell inside the frame after its size prefix: `payload` holds the bytes
    /// before the first hole only, `missing` the payload bytes beyond them.
    pub missing: u64,
    /// Every missing byte was cut by the snap length (else some were lost).
    pub snapped: bool,
    /// The frame's last byte was not captured: `last_ts_ns` is its last captured byte's.
    pub end_lost: bool,
}

impl KafkaFrame {
    /// The frame's size on the wire, its bytes not captured included.
    pub fn wire_size(&self) -> u64 {
        self.payload.len() as u64 + self.missing + 4
    }

    /// Some of its bytes were not captured.
    pub fn holed(&self) -> bool {
        self.missing > 0 || self.end_lost
    }

    /// When its last byte was captured; None when it was not.
    pub fn end_ts(&self) -> Option<Ts> {
        (!self.end_lost).then_some(self.last_ts_ns)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    Pair,
    NoResponse,
    Unanswered,
    OrphanResponse,
    SaslToken,
    Malformed,
}

/// A request with its response, or one of them alone (`dissector.stages.Exchange`).
#[derive(Debug, Clone)]
pub struct Exchange {
    pub stream: u32,
    pub client: Endpoint,
    pub broker: Endpoint,
    pub kind: ExchangeKind,
    pub request: Option<KafkaFrame>,
    pub response: Option<KafkaFrame>,
    pub api_key: Option<i16>,
    pub api_version: Option<i16>,
    pub correlation_id: Option<i32>,
    pub client_id: Option<String>,
    pub note: Option<String>,
    /// Position of the request among the requests of its connection, in the order they
    /// were sent (None for a response without a request): the queueing columns are
    /// computed in this order (`rows/queueing.rs`).
    pub seq: Option<u64>,
    /// A capture hole may hold this exchange's missing part (its response or request).
    pub gap: bool,
}

/// Versions are int16 on the wire but no API has come near this many.
pub const MAX_PROBED_VERSION: i16 = 128;

/// What the spec model tells the wire stages about versions (`kafka_header.VersionCheck`).
/// Implemented by `model::Model`, built from the Python spec model; never hard-coded.
pub trait Versions {
    /// (api_key, version) exists in the spec model.
    fn known(&self, api_key: i16, version: i16) -> bool;
    /// Some version of this api_key exists: a request of an unknown version of a known
    /// API is a version skew, not an unknown API.
    fn known_key(&self, api_key: i16) -> bool {
        (0..MAX_PROBED_VERSION).any(|v| self.known(api_key, v))
    }
    /// The request of (api_key, version) uses request header v2 (flexible).
    fn request_flexible(&self, api_key: i16, version: i16) -> bool;
    /// The request of (api_key, version) uses request header v0 (no client_id; in
    /// Kafka's history only ControlledShutdown v0). Additive, hence the default.
    fn request_header_v0(&self, _api_key: i16, _version: i16) -> bool {
        false
    }
    /// The request's `acks` (Produce's field the spec model names, `Model::acks_field`)
    /// from its body (`body` starts after the request header, header tagged fields
    /// included); None for other APIs, or when the layout or the bytes do not allow it.
    /// Correlation expects no response to acks=0.
    fn request_acks(&self, _api_key: i16, _version: i16, _body: &[u8]) -> Option<i64> {
        None
    }
    /// An integer field at the top level of a request body (as `request_acks`), read by
    /// walking the layout; None when the layout or the bytes do not allow it.
    fn request_int_field(
        &self,
        _api_key: i16,
        _version: i16,
        _body: &[u8],
        _field: &str,
    ) -> Option<i64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Counters;
    use crate::counter::Counter;

    #[test]
    fn counters_add_take_back_and_list_in_registry_order() {
        let mut c = Counters::default();
        c.add(Counter::RecordsCrcMismatch, 2);
        c.inc(Counter::BytesRead);
        c.add(Counter::TcpGaps, 0); // counted with 0: listed, as in the Python stages
        assert_eq!(c.get(Counter::BytesRead), 1);
        assert_eq!(c.get(Counter::RecordsCrcMismatch), 2);
        c.sub(Counter::RecordsCrcMismatch, 5); // more than counted: gone, not wrapped
        let listed: Vec<_> = c.iter().collect();
        assert_eq!(listed, [(Counter::BytesRead, 1), (Counter::TcpGaps, 0)]);
        assert_eq!(format!("{c:?}"), r#"{"bytes_read": 1, "tcp_gaps": 0}"#);
        let mut all = Counters::default();
        all.merge(&c);
        all.merge(&c);
        assert_eq!(all.get(Counter::BytesRead), 2);
    }

    #[test]
    fn names_and_variants_round_trip() {
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i, "Counters indexes its slots by the variant");
            assert_eq!(Counter::named(c.name()), Some(c));
        }
        assert_eq!(Counter::named("no_such_counter"), None);
    }
}
