//! Stage 1: capture files (pcap, pcapng, gzip-compressed either) and link frames -> TCP packets.
//! Port of `dissector/capture.py`. OWNER: capture helper.
//!
//! Contract:
//! * `PacketReader::new(source)` sniffs the magic (gzip, pcap either byte order / us / ns,
//!   pcapng) of any `Read`, and `next_packet` yields TCP packets in capture order,
//!   counting everything else (non-IP, non-TCP, fragments, truncation, bad timestamps...)
//!   with the Python stage's counter names. Memory is bounded by one read buffer.
//! * `decode_link` turns one link-layer frame into a TCP packet (live capture uses it).

use std::io::Read;

use crate::types::{Counters, Packet, Ts};

/// The file is not a capture we can read (bad magic, unreadable header).
#[derive(Debug)]
pub struct CaptureError(pub String);

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub struct PacketReader {
    _source: Box<dyn Read + Send>,
}

impl PacketReader {
    pub fn new(source: Box<dyn Read + Send>) -> Result<Self, CaptureError> {
        Ok(PacketReader { _source: source })
    }

    /// The next TCP packet, or None at the end of the capture (or on an unreadable rest,
    /// which is counted, never raised).
    pub fn next_packet(&mut self, _counters: &mut Counters) -> Option<Packet<'_>> {
        None
    }
}

/// One link-layer frame (tcpdump LINKTYPE_*) -> TCP packet, or None (counted).
pub fn decode_link<'a>(
    _linktype: u32,
    _ts_ns: Ts,
    _frame: u64,
    _data: &'a [u8],
    _counters: &mut Counters,
) -> Option<Packet<'a>> {
    None
}
