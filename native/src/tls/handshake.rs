//! Handshake messages: the stream of them in one direction, and the two hellos whose
//! fields decryption needs (parsed by Rusticata's `tls-parser`).
//!
//! Handshake messages (4-byte header: type, 24-bit length) may span records and records
//! may hold several; `HandshakeReader` follows them across records, keeping the body
//! of the hellos (bounded by `MAX_HELLO`), of every message while `keep_all` is set (a
//! TLS 1.2 handshake whose pre-master secret may come from the key log: bounded the same)
//! and just the types of the others.

use tls_parser::{
    parse_tls_client_hello_extensions, parse_tls_handshake_client_hello,
    parse_tls_handshake_server_hello, parse_tls_server_hello_extensions, TlsExtension,
};

pub const CLIENT_HELLO: u8 = 1;
pub const SERVER_HELLO: u8 = 2;
pub const SERVER_HELLO_DONE: u8 = 14;
pub const CLIENT_KEY_EXCHANGE: u8 = 16;
pub const FINISHED: u8 = 20;
pub const KEY_UPDATE: u8 = 24;

/// A hello larger than this is not one a Kafka client or broker sends (they are a few
/// hundred bytes; post-quantum key shares bring a ClientHello to about 2 KiB).
pub const MAX_HELLO: usize = 64 * 1024;

/// `SHA-256("HelloRetryRequest")`: the random of a ServerHello that is a
/// HelloRetryRequest (RFC 8446 4.1.3).
const HELLO_RETRY_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
    0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHello {
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
    /// The negotiated version: supported_versions when present (TLS 1.3), else the
    /// legacy version field.
    pub version: u16,
    pub cipher_suite: u16,
    pub extended_master_secret: bool,
    pub hello_retry: bool,
}

fn random32(b: &[u8]) -> Option<[u8; 32]> {
    b.try_into().ok()
}

pub fn parse_client_hello(body: &[u8]) -> Option<ClientHello> {
    let (_, ch) = parse_tls_handshake_client_hello(body).ok()?;
    // Extensions are not needed to decrypt; a malformed list does not matter here.
    if let Some(ext) = ch.ext {
        let _ = parse_tls_client_hello_extensions(ext);
    }
    Some(ClientHello {
        random: random32(ch.random)?,
        session_id: ch.session_id.unwrap_or_default().to_vec(),
    })
}

pub fn parse_server_hello(body: &[u8]) -> Option<ServerHello> {
    let (_, sh) = parse_tls_handshake_server_hello(body).ok()?;
    let mut version = sh.version.0;
    let mut ems = false;
    if let Some(ext) = sh.ext {
        let (_, exts) = parse_tls_server_hello_extensions(ext).ok()?;
        for e in exts {
            match e {
                TlsExtension::SupportedVersions(v) => {
                    if let Some(v) = v.first() {
                        version = v.0;
                    }
                }
                TlsExtension::ExtendedMasterSecret => ems = true,
                _ => {}
            }
        }
    }
    let random = random32(sh.random)?;
    Some(ServerHello {
        random,
        session_id: sh.session_id.unwrap_or_default().to_vec(),
        version,
        cipher_suite: sh.cipher.0,
        extended_master_secret: ems,
        hello_retry: random == HELLO_RETRY_RANDOM,
    })
}

/// One handshake message as the reader hands it on: its type, and its body when it is
/// a hello (or any message, with `keep_all`).
#[derive(Debug, PartialEq, Eq)]
pub struct Message {
    pub kind: u8,
    pub body: Option<Vec<u8>>,
}

/// Follows the handshake messages of one direction across records.
#[derive(Debug, Default)]
pub struct HandshakeReader {
    head: [u8; 4],
    head_len: usize,
    need: usize,        // body bytes left of the current message
    kind: u8,           // type of the current message
    body: Vec<u8>,      // the current hello's body so far
    keep: bool,         // the current message's body is kept
    pub too_long: bool, // a hello past MAX_HELLO was met
    /// Keep the body of every message, not only the hellos'.
    pub keep_all: bool,
}

impl HandshakeReader {
    /// Feed handshake bytes; complete messages are pushed onto `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<Message>) {
        while !data.is_empty() {
            if self.need == 0 && self.head_len < 4 {
                let n = (4 - self.head_len).min(data.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
                self.head_len += n;
                data = &data[n..];
                if self.head_len < 4 {
                    return;
                }
                self.kind = self.head[0];
                self.need = usize::from(self.head[1]) << 16
                    | usize::from(self.head[2]) << 8
                    | usize::from(self.head[3]);
                let hello = matches!(self.kind, CLIENT_HELLO | SERVER_HELLO);
                self.keep = hello || self.keep_all;
                if self.keep && self.need > MAX_HELLO {
                    // Only a hello that long is impossible; another message (a long
                    // certificate chain) goes by with no body.
                    self.too_long |= hello;
                    self.keep = false;
                }
                self.body.clear();
                if self.need == 0 {
                    self.emit(out);
                    continue;
                }
            }
            let n = self.need.min(data.len());
            if self.keep {
                self.body.extend_from_slice(&data[..n]);
            }
            self.need -= n;
            data = &data[n..];
            if self.need == 0 {
                self.emit(out);
            }
        }
    }

    fn emit(&mut self, out: &mut Vec<Message>) {
        out.push(Message {
            kind: self.kind,
            body: self.keep.then(|| std::mem::take(&mut self.body)),
        });
        self.head_len = 0;
        self.keep = false;
    }

    /// Bytes held for a hello not complete yet.
    pub fn held(&self) -> usize {
        self.body.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_followed_across_records() {
        let mut r = HandshakeReader::default();
        let mut out = Vec::new();
        // A Finished of 3 bytes split over two records, then a KeyUpdate of 1 byte and
        // the start of a third message in the same record.
        r.feed(&[FINISHED, 0, 0, 3, 0xaa], &mut out);
        assert!(out.is_empty());
        r.feed(&[0xbb, 0xcc, KEY_UPDATE, 0, 0, 1, 0, 4, 0], &mut out);
        assert_eq!(
            out,
            vec![
                Message {
                    kind: FINISHED,
                    body: None
                },
                Message {
                    kind: KEY_UPDATE,
                    body: None
                }
            ]
        );
    }

    #[test]
    fn an_oversized_hello_is_skipped_not_held() {
        let mut r = HandshakeReader::default();
        let mut out = Vec::new();
        r.feed(&[CLIENT_HELLO, 0x10, 0, 0], &mut out);
        r.feed(&vec![0u8; 100_000], &mut out);
        assert!(r.too_long);
        assert_eq!(r.held(), 0);
        assert!(out.is_empty());
    }
}
