//! Kafka request/response header peeks used by framing resync and correlation.
//! Its Python twin, the test oracle, is `tests/oracle/kafka_header.py`.
//!
//! Correlation needs api_key, api_version, correlation_id and client_id, which sit at
//! the same offsets in request header v1 and v2 (client_id stays a classic nullable
//! string in flexible header v2). Which requests use header v0, and which versions
//! exist, comes from the spec model through `Versions`.

use crate::cursor::{be_i16, be_i32, Cursor, VARINT_BYTES};
use crate::types::Versions;

/// The correlation-relevant part of a request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStart {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// Offset after client_id (before header v2 tagged fields).
    pub header_end: usize,
}

/// The request header's fixed fields and client_id, or None if the bytes are too short.
pub fn peek_request(payload: &[u8], versions: &dyn Versions) -> Option<RequestStart> {
    let api_key = be_i16(payload, 0)?;
    let api_version = be_i16(payload, 2)?;
    let correlation_id = be_i32(payload, 4)?;
    let bare = |end| RequestStart {
        api_key,
        api_version,
        correlation_id,
        client_id: None,
        header_end: end,
    };
    if versions.request_header_v0(api_key, api_version) {
        // Header v0 has no client_id at all.
        return Some(bare(8));
    }
    let id_len = be_i16(payload, 8)?;
    if id_len < 0 {
        return Some(bare(10));
    }
    let end = 10 + id_len as usize;
    let raw = payload.get(10..end)?;
    Some(RequestStart {
        client_id: Some(String::from_utf8_lossy(raw).into_owned()),
        ..bare(end)
    })
}

/// The request header of a frame not captured whole (`KafkaFrame::holed`): as
/// `peek_request`, but a client_id cut off by the hole or the snap length is left out
/// (None) rather than failing the header: key, version and correlation id suffice.
pub fn peek_request_cut(payload: &[u8], versions: &dyn Versions) -> Option<RequestStart> {
    peek_request(payload, versions).or_else(|| {
        Some(RequestStart {
            api_key: be_i16(payload, 0)?,
            api_version: be_i16(payload, 2)?,
            correlation_id: be_i32(payload, 4)?,
            client_id: None,
            header_end: payload.len(),
        })
    })
}

pub fn peek_correlation_id(payload: &[u8]) -> Option<i32> {
    be_i32(payload, 0)
}

/// Strict test that a frame is a Kafka request, for finding Kafka on unknown ports and
/// for judging resync candidates.
pub fn is_plausible_request(payload: &[u8], versions: &dyn Versions) -> bool {
    match peek_request(payload, versions) {
        Some(s) if s.correlation_id >= 0 && versions.known(s.api_key, s.api_version) => {
            s.client_id.as_deref().is_none_or(is_printable)
        }
        _ => false,
    }
}

/// The correlation id of a request header of a known API, whatever its version (a
/// newer client's request the specs cannot decode yet), with the same checks on the
/// correlation id and client id as `is_plausible_request`. Weaker than that test: used
/// only to match a response to it.
pub fn request_like_id(payload: &[u8], versions: &dyn Versions) -> Option<i32> {
    let s = peek_request(payload, versions)?;
    let printable = s.client_id.as_deref().is_none_or(is_printable);
    (s.correlation_id >= 0 && printable && versions.known_key(s.api_key))
        .then_some(s.correlation_id)
}

/// Python's `str.isprintable`, closely enough for client ids: ASCII exactly; beyond
/// ASCII, controls, separators other than the space, format characters, private use
/// and noncharacters are not printable. (Unassigned code points, which Python also
/// rejects, are accepted here: telling them apart needs the Unicode tables.)
pub fn is_printable(s: &str) -> bool {
    s.chars().all(|c| {
        let u = c as u32;
        if u < 0x80 {
            return (0x20..0x7f).contains(&u);
        }
        !(c.is_control()
            || matches!(u,
                0x00a0 | 0x00ad | 0x061c | 0x070f | 0x08e2 | 0x180e | 0x1680
                | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x206f | 0x3000 | 0xfeff
                | 0x0600..=0x0605 | 0x06dd | 0x110bd | 0x110cd
                | 0xfff9..=0xfffb | 0x13430..=0x1343f | 0x1bca0..=0x1bca3
                | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f
                | 0xe000..=0xf8ff | 0xf0000..=0x10ffff
                | 0xfdd0..=0xfdef)
            || (u & 0xfffe) == 0xfffe)
    })
}

/// A TLS record starts with content type 0x14-0x17 and version 0x03 0x0N.
pub fn looks_like_tls(buf: &[u8]) -> bool {
    matches!(buf, [0x14..=0x17, 0x03, 0x00..=0x04, ..])
}

/// What a resync candidate must look like, by the role of the sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartCheck {
    /// Client -> broker: a plausible request header.
    Request,
    /// Broker -> client: responses carry no type, so a sane size that ends at or
    /// beyond the bytes we have, or is followed by another sane size prefix.
    Response,
    /// Role unknown yet: either of the above.
    Either,
}

impl StartCheck {
    /// Is `probe` (the first bytes of the candidate, at most the probe window) a
    /// plausible frame start? `full` is everything buffered from the candidate on.
    pub fn check(self, probe: &[u8], full: &[u8], versions: &dyn Versions, max_frame: u32) -> bool {
        match self {
            StartCheck::Request => request_start(probe, versions),
            StartCheck::Response => response_start(probe, full, max_frame),
            StartCheck::Either => {
                request_start(probe, versions) || response_start(probe, full, max_frame)
            }
        }
    }
}

fn request_start(probe: &[u8], versions: &dyn Versions) -> bool {
    let Some(size) = be_i32(probe, 0) else {
        return false;
    };
    if size < 8 {
        return false;
    }
    let end = (4 + size as usize).min(probe.len());
    probe
        .get(4..end)
        .is_some_and(|p| is_plausible_request(p, versions))
}

fn response_start(probe: &[u8], full: &[u8], max_frame: u32) -> bool {
    if probe.len() < 8 {
        return false;
    }
    let sane = |n: i32| n >= 4 && n as i64 <= max_frame as i64;
    let Some(size) = be_i32(probe, 0) else {
        return false;
    };
    if !sane(size) {
        return false;
    }
    let end = 4 + size as usize;
    // The next prefix is read from everything buffered, not only the probe window (a
    // frame over ~508 bytes has it beyond); tests/oracle/kafka_header.py does the same.
    match be_i32(full, end) {
        Some(next) => sane(next),
        None => true, // ends at (or just before) the data we have: nothing to check
    }
}

/// Offset of the request body: after the header, and after header v2's tagged fields
/// when `flexible`. None when the tagged fields run past the bytes.
pub fn body_offset(payload: &[u8], start: &RequestStart, flexible: bool) -> Option<usize> {
    let mut cur = Cursor::new(payload, start.header_end);
    if flexible {
        let n_tags = cur.uvarint(VARINT_BYTES).ok()?;
        // Every tag takes at least two bytes: the count is bounded by what is there.
        for _ in 0..n_tags {
            cur.uvarint(VARINT_BYTES).ok()?; // the tag
            let size = cur.uvarint(VARINT_BYTES).ok()?;
            cur.skip(usize::try_from(size).ok()?).ok()?;
        }
    }
    (cur.pos() <= payload.len()).then_some(cur.pos())
}
