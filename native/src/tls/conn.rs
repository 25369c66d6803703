//! One TLS connection: records of both directions -> application plaintext.
//!
//! The client direction starts with a ClientHello (that is how the stage picked the
//! connection); the ServerHello fixes version and cipher suite. From then on:
//!
//! - TLS 1.2: each direction's ChangeCipherSpec switches it to its record key (derived
//!   from the master secret of the key log, found by client random or session id, or
//!   derived from a pre-master secret found by client random or, for an RSA key
//!   exchange, by its encrypted form; the extended master secret hashes the handshake
//!   messages, kept until then in a `Transcript`); records are opened with that
//!   direction's sequence number.
//! - TLS 1.3: every record after the ServerHello is encrypted: first with the handshake
//!   traffic key, then, after that direction's Finished, with the application traffic
//!   key (moved on by each KeyUpdate). A key log may hold only the application secrets
//!   (some tools write just those): a record the handshake key cannot open, or that no
//!   handshake key is known for, is tried once with the application key.
//!
//! A hole in a direction's bytes whose size TCP knows (a lost segment) need not end it:
//! a hole inside one record costs that record (the sequence number moves on by one and
//! the record's remaining bytes are skipped); a hole across record boundaries is crossed
//! by finding the first record after it whose header parses and that opens at one of the
//! sequence numbers the hole can have skipped (`Hunt`; the AEAD tag confirms both the
//! boundary and the number). The plaintext after a hole goes on marked as after a gap.
//!
//! Whatever cannot be decrypted ends the connection's decryption with one `Outcome`;
//! its remaining bytes are counted (`tls_bytes`), never guessed at. Buffers are bounded:
//! a partial record (at most one record) and, while waiting for a secret, the held
//! bytes (`HOLD_MAX`); the stage also bounds their sum over all connections.

use crate::counter::Counter;
use crate::types::Endpoint;

use super::cipher::{self, RecordKey, Suite, TLS12, TLS13};
use super::handshake::{
    self, HandshakeReader, Message, ServerHello, CLIENT_HELLO, CLIENT_KEY_EXCHANGE, FINISHED,
    KEY_UPDATE, SERVER_HELLO, SERVER_HELLO_DONE,
};
use super::keylog::{KeyLog, PreMaster, Secret, Secrets};

/// Record content types (RFC 8446 5.1).
const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const HEARTBEAT: u8 = 24;

/// Largest record fragment: 2^14 plus the expansion TLS 1.2 allows (RFC 5246 6.2.3);
/// TLS 1.3 allows 2^14 + 256 (RFC 8446 5.2).
pub const MAX_RECORD_12: usize = (1 << 14) + 2048;
pub const MAX_RECORD_13: usize = (1 << 14) + 256;
/// Bytes a direction holds while its secret is awaited (a live run's key log not
/// written yet); past it the connection is given up.
pub const HOLD_MAX: usize = 1 << 20;
/// TLS 1.2 handshake bytes kept for an extended master secret (hellos, certificate
/// chains, key exchanges: a few KiB); a longer handshake is not kept.
pub const MAX_TRANSCRIPT: usize = 256 * 1024;
/// Bytes of AEAD work a search after a hole may spend (a few milliseconds) before the
/// connection is given up: bytes crafted to look like record headers cost no more.
const MAX_HUNT_WORK: usize = 8 << 20;
/// Smallest TLS record: a header, the tag and (TLS 1.3) the inner content type.
const MIN_RECORD: u64 = 5 + 16 + 1;

/// How a connection ended up; one per connection, counted under `counter()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Decrypted,
    NoSecret,
    NoHandshake,
    UnsupportedVersion,
    UnsupportedSuite,
    DecryptFailed,
    CaptureGap,
    BadRecord,
    BufferLimit,
}

impl Outcome {
    pub fn counter(self) -> Counter {
        match self {
            Outcome::Decrypted => Counter::TlsDecryptedConnections,
            Outcome::NoSecret => Counter::TlsNoSecret,
            Outcome::NoHandshake => Counter::TlsNoHandshake,
            Outcome::UnsupportedVersion => Counter::TlsUnsupportedVersion,
            Outcome::UnsupportedSuite => Counter::TlsUnsupportedSuite,
            Outcome::DecryptFailed => Counter::TlsDecryptFailed,
            Outcome::CaptureGap => Counter::TlsCaptureGap,
            Outcome::BadRecord => Counter::TlsBadRecord,
            Outcome::BufferLimit => Counter::TlsBufferLimit,
        }
    }

    /// The word the summary table shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Decrypted => "decrypted",
            Outcome::NoSecret => "no_secret",
            Outcome::NoHandshake => "no_handshake",
            Outcome::UnsupportedVersion => "unsupported_version",
            Outcome::UnsupportedSuite => "unsupported_suite",
            Outcome::DecryptFailed => "decrypt_failed",
            Outcome::CaptureGap => "capture_gap",
            Outcome::BadRecord => "bad_record",
            Outcome::BufferLimit => "buffer_limit",
        }
    }
}

/// What a connection needs from the stage while it reads records.
pub struct Env<'a> {
    pub keys: &'a KeyLog,
    pub extra: &'a KeyLog,
    /// Master secrets of TLS 1.2 sessions decrypted earlier in this capture, by
    /// session id (an abbreviated handshake resumes one).
    pub sessions: &'a std::collections::HashMap<Vec<u8>, Secret>,
    /// A missing secret may still come (a live run re-reads its key log): hold the
    /// records instead of giving up.
    pub may_wait: bool,
    /// Grows whenever the key log gained lines: held records are read again only then.
    pub generation: u64,
}

impl Env<'_> {
    fn secrets(&self, client_random: &[u8; 32]) -> Option<Secrets> {
        let a = self.extra.by_random(client_random);
        let b = self.keys.by_random(client_random);
        match (a, b) {
            (Some(a), Some(b)) => Some(Secrets {
                master: a.master.or(b.master),
                client_handshake: a.client_handshake.or(b.client_handshake),
                server_handshake: a.server_handshake.or(b.server_handshake),
                client_traffic: a.client_traffic.or(b.client_traffic),
                server_traffic: a.server_traffic.or(b.server_traffic),
            }),
            (a, b) => a.or(b).copied(),
        }
    }

    fn pre_master(&self, client_random: &[u8; 32]) -> Option<&PreMaster> {
        self.extra
            .pre_master_by_random(client_random)
            .or_else(|| self.keys.pre_master_by_random(client_random))
    }

    fn pre_master_rsa(&self, encrypted_prefix: &[u8; 8]) -> Option<&PreMaster> {
        self.extra
            .pre_master_by_rsa(encrypted_prefix)
            .or_else(|| self.keys.pre_master_by_rsa(encrypted_prefix))
    }

    fn master_by_session(&self, session_id: &[u8]) -> Option<Secret> {
        if session_id.is_empty() {
            return None;
        }
        self.extra
            .by_session(session_id)
            .or_else(|| self.keys.by_session(session_id))
            .or_else(|| self.sessions.get(session_id))
            .copied()
    }
}

/// Result of reading one record.
enum Step {
    Next,
    /// The record needs what is not known yet: keep it and what follows.
    Hold(Wait),
    Fail(Outcome),
}

/// What held records wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The peer's ServerHello (capture order put this direction's record first).
    Peer,
    /// A secret the key log does not hold yet, as of this key log generation.
    Secret(u64),
}

/// TLS 1.3 state of one direction.
#[derive(Default)]
struct Tls13Dir {
    handshake_key: Option<RecordKey>,
    /// The current application traffic secret (moved on by KeyUpdate).
    app_secret: Option<Vec<u8>>,
    in_app: bool,
}

/// The TLS 1.2 handshake messages a pre-master secret needs, in the order both peers
/// hash them (RFC 7627 4: ClientHello up to and including ClientKeyExchange).
#[derive(Default)]
struct Transcript {
    client_hello: Vec<u8>,
    /// ServerHello up to and including ServerHelloDone.
    server: Vec<u8>,
    /// The client's messages after its hello, up to and including ClientKeyExchange.
    client: Vec<u8>,
    server_done: bool,
    client_done: bool,
    /// A message went by without its body, or the handshake was too long to keep.
    lost: bool,
    /// First 8 bytes of an RSA key exchange's encrypted pre-master secret.
    rsa_prefix: Option<[u8; 8]>,
}

impl Transcript {
    fn len(&self) -> usize {
        self.client_hello.len() + self.server.len() + self.client.len()
    }

    fn note(&mut self, d: usize, m: &Message) {
        if self.lost {
            return;
        }
        let Some(body) = m.body.as_deref() else {
            let past = if d == 0 {
                self.client_done
            } else {
                self.server_done
            };
            self.lost |= !past;
            return;
        };
        let part = match (d, m.kind) {
            (0, CLIENT_HELLO) => {
                self.client_hello.clear();
                &mut self.client_hello
            }
            (0, _) if !self.client_done => &mut self.client,
            (1, _) if !self.server_done => &mut self.server,
            _ => return,
        };
        let len = body.len() as u32;
        part.push(m.kind);
        part.extend_from_slice(&len.to_be_bytes()[1..]);
        part.extend_from_slice(body);
        match (d, m.kind) {
            (0, CLIENT_KEY_EXCHANGE) => {
                self.client_done = true;
                // RSA: a 2-byte length, then the encrypted pre-master secret.
                self.rsa_prefix = body.get(2..10).and_then(|p| p.try_into().ok());
            }
            (1, SERVER_HELLO_DONE) => self.server_done = true,
            _ => {}
        }
        if self.len() > MAX_TRANSCRIPT {
            *self = Transcript {
                lost: true,
                ..Transcript::default()
            };
        }
    }

    /// The handshake hash of an extended master secret, when every message is here.
    fn session_hash(&self, hash: cipher::Hash) -> Option<Vec<u8>> {
        let whole = !self.lost && self.server_done && self.client_done;
        let parts = [&self.client_hello, &self.server, &self.client];
        whole.then(|| cipher::digest(hash, &parts))
    }
}

/// After a hole across record boundaries: the bytes after it, searched for the first
/// record that opens.
struct Hunt {
    buf: Vec<u8>,
    /// Offsets before this one were tried.
    scanned: usize,
    /// The sequence number the hole began at (records lost are counted from it).
    from: u64,
    /// The lowest sequence number the first record after the hole can have, and how
    /// many records beyond it the hole can have swallowed.
    seq: u64,
    more: u64,
    /// AEAD bytes spent so far.
    work: usize,
}

#[derive(Default)]
struct Dir {
    partial: Vec<u8>, // a record not complete yet (header included)
    held: Vec<u8>,    // records waiting for a secret
    waiting: Option<Wait>,
    key: Option<RecordKey>,
    /// TLS 1.2: the key that this direction's ChangeCipherSpec switches to.
    pending: Option<RecordKey>,
    tls13: Tls13Dir,
    handshake: HandshakeReader,
    seen: bool,
    /// Bytes still to skip: the rest of a record a hole broke.
    skip: usize,
    hunt: Option<Hunt>,
    /// Plaintext bytes lost in a hole, for the next plaintext (0: not known).
    gap: Option<u64>,
}

impl Dir {
    fn buffered(&self) -> usize {
        let hunt = self.hunt.as_ref().map_or(0, |h| h.buf.capacity());
        self.partial.capacity() + self.held.capacity() + self.handshake.held() + hunt
    }
}

/// What one call on a connection did, for the stage's counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fed {
    /// Bytes read through as records (handshake, decrypted, change cipher spec).
    pub read: u64,
    /// Bytes given up (after a failure, or lost records' remains after a hole).
    pub dropped: u64,
    /// A hole was crossed: records it cost (the one it broke, those it swallowed).
    pub resynced: Option<u64>,
}

pub struct Conn {
    pub client: Endpoint,
    pub server: Endpoint,
    /// Capture time and frame of the connection's latest chunk.
    pub last: (crate::types::Ts, u64),
    pub client_hello: Option<handshake::ClientHello>,
    pub server_hello: Option<ServerHello>,
    pub suite: Option<Suite>,
    pub outcome: Option<Outcome>,
    dirs: [Dir; 2],
    /// Secrets looked up and record keys installed.
    keyed: bool,
    /// The TLS 1.2 master secret used (remembered by session id for resumptions).
    pub master: Option<Secret>,
    /// TLS 1.2 handshake messages, kept until the keys are derived.
    transcript: Transcript,
    /// The outcome was counted (when decryption failed, before the close).
    pub reported: bool,
    /// Bytes read through so far (counted as `tls_bytes` instead if it is given up).
    pub read: u64,
}

/// A record header: type, legacy version, fragment length.
fn header_ok(h: &[u8]) -> Option<usize> {
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    let known = matches!(h[0], CHANGE_CIPHER_SPEC..=HEARTBEAT);
    (known && h[1] == 3 && h[2] <= 4 && len <= MAX_RECORD_12).then_some(len)
}

/// Does `data`, the first bytes of a connection, start a TLS ClientHello record?
pub fn starts_client_hello(data: &[u8]) -> bool {
    let want = [Some(HANDSHAKE), Some(3)];
    data.first().copied() == want[0]
        && data.get(1).is_none_or(|b| Some(*b) == want[1])
        && data.get(2).is_none_or(|b| *b <= 4)
        && data.get(5).is_none_or(|b| *b == CLIENT_HELLO)
}

impl Conn {
    pub fn new(client: Endpoint, server: Endpoint) -> Self {
        let mut conn = Conn {
            client,
            server,
            last: (0, 0),
            client_hello: None,
            server_hello: None,
            suite: None,
            outcome: None,
            dirs: Default::default(),
            keyed: false,
            master: None,
            transcript: Transcript::default(),
            reported: false,
            read: 0,
        };
        // Until the ServerHello tells the version, a pre-master secret may need them.
        conn.keep_transcript(true);
        conn
    }

    pub fn buffered(&self) -> usize {
        self.dirs[0].buffered() + self.dirs[1].buffered() + self.transcript.len()
    }

    /// Keep (or stop keeping) the bodies of every handshake message.
    fn keep_transcript(&mut self, keep: bool) {
        for dir in &mut self.dirs {
            dir.handshake.keep_all = keep;
        }
        if !keep {
            self.transcript = Transcript::default();
        }
    }

    /// A direction had bytes before this chunk (a gap now breaks its record chain).
    pub fn seen(&self, d: usize) -> bool {
        self.dirs[d].seen
    }

    pub fn fail(&mut self, outcome: Outcome) -> u64 {
        if self.outcome.is_none() {
            self.outcome = Some(outcome);
        }
        let mut dropped = 0;
        for dir in &mut self.dirs {
            let hunted = dir.hunt.as_ref().map_or(0, |h| h.buf.len());
            dropped += (dir.partial.len() + dir.held.len() + hunted) as u64;
            *dir = Dir {
                seen: dir.seen,
                ..Dir::default()
            };
        }
        self.transcript = Transcript::default();
        dropped
    }

    /// Feed the bytes of direction `d` (0: from the client); application plaintext is
    /// appended to `out`.
    pub fn feed(&mut self, d: usize, data: &[u8], env: &Env<'_>, out: &mut Vec<u8>) -> Fed {
        self.dirs[d].seen = true;
        if self.outcome.is_some() {
            return Fed {
                dropped: data.len() as u64,
                ..Fed::default()
            };
        }
        let mut data = data;
        if self.dirs[d].skip > 0 {
            let n = self.dirs[d].skip.min(data.len());
            self.dirs[d].skip -= n;
            data = &data[n..];
            if data.is_empty() {
                return Fed {
                    dropped: n as u64,
                    ..Fed::default()
                };
            }
            let mut fed = self.feed(d, data, env, out);
            fed.dropped += n as u64;
            return fed;
        }
        if self.dirs[d].hunt.is_some() {
            return self.hunt(d, data, env, out);
        }
        if self.dirs[d].waiting.is_some() {
            self.dirs[d].held.extend_from_slice(data);
            if self.dirs[d].held.len() > HOLD_MAX {
                let dropped = self.fail(Outcome::BufferLimit);
                return Fed {
                    dropped,
                    ..Fed::default()
                };
            }
            return Fed::default();
        }
        self.feed_records(d, data, env, out)
    }

    /// Held records of direction `d`, read again when what they wait for may have come
    /// (the peer's hello, or new key log lines).
    pub fn retry(&mut self, d: usize, env: &Env<'_>, out: &mut Vec<u8>) -> Fed {
        let ready = match self.dirs[d].waiting {
            None => false,
            Some(Wait::Peer) => self.server_hello.is_some(),
            Some(Wait::Secret(gen)) => gen != env.generation,
        };
        if !ready || self.outcome.is_some() {
            return Fed::default();
        }
        let held = std::mem::take(&mut self.dirs[d].held);
        self.dirs[d].waiting = None;
        self.feed_records(d, &held, env, out)
    }

    /// `lost` bytes of direction `d` are missing before its next bytes (a capture hole
    /// of known size). Some when decryption can go on after it (the direction reads
    /// application records with a known key): the bytes of the broken record given up,
    /// and the records known lost now (a hole inside one record: 1; across records:
    /// counted when the search ends, `Fed::resynced`).
    /// None ends the connection (the caller counts it as `CaptureGap`).
    pub fn gap(&mut self, d: usize, lost: u64) -> Option<Fed> {
        let tls13 = self.server_hello.as_ref().map(|s| s.version) == Some(TLS13);
        let dir = &mut self.dirs[d];
        let ready = dir.waiting.is_none()
            && dir.hunt.is_none()
            && (!tls13 || dir.tls13.in_app)
            && self.outcome.is_none();
        let key = dir.key.as_ref().filter(|_| ready)?;
        let mut lost = lost;
        let from = key.seq;
        let mut seq = key.seq;
        let dropped = dir.partial.len() as u64;
        if dir.skip > 0 {
            // Already skipping a broken record: the hole starts inside it.
            if (dir.skip as u64) > lost {
                dir.skip -= lost as usize;
                return Some(Fed::default());
            }
            lost -= dir.skip as u64;
            dir.skip = 0;
        } else if dir.partial.len() >= 5 {
            let len = header_ok(&dir.partial)?;
            let need = (5 + len - dir.partial.len()) as u64;
            // The record the hole began in is lost, whatever the hole's length.
            seq += 1;
            if lost < need {
                dir.skip = (need - lost) as usize;
                let plain = !tls13 && dir.partial[0] == APPLICATION_DATA;
                dir.gap = Some(if plain {
                    (len - key.overhead()) as u64
                } else {
                    0
                });
                dir.partial.clear();
                if let Some(k) = dir.key.as_mut() {
                    k.seq = seq;
                }
                return Some(Fed {
                    dropped,
                    resynced: Some(1),
                    ..Fed::default()
                });
            }
            lost -= need;
        }
        dir.partial.clear();
        // The hole holds whole records and the start of the one it ends in: at most one
        // per smallest record, none if it ends on a record boundary.
        dir.hunt = Some(Hunt {
            buf: Vec::new(),
            scanned: 0,
            from,
            seq,
            more: lost / MIN_RECORD + 1,
            work: 0,
        });
        dir.gap = Some(0);
        Some(Fed {
            dropped,
            ..Fed::default()
        })
    }

    /// The plaintext bytes lost in a hole before the plaintext just produced, once.
    pub fn take_gap(&mut self, d: usize) -> Option<u64> {
        self.dirs[d].gap.take()
    }

    /// Bytes after a hole across record boundaries: the first record there that opens
    /// at one of the sequence numbers the hole can have skipped ends the search.
    fn hunt(&mut self, d: usize, data: &[u8], env: &Env<'_>, out: &mut Vec<u8>) -> Fed {
        let tls13 = self.server_hello.as_ref().map(|s| s.version) == Some(TLS13);
        let dir = &mut self.dirs[d];
        let (Some(mut h), Some(key)) = (dir.hunt.take(), dir.key.as_mut()) else {
            return Fed::default();
        };
        h.buf.extend_from_slice(data);
        let mut scratch = Vec::new();
        // The first record boundary after the hole is within one record of its end.
        let last_start = 5 + MAX_RECORD_12;
        let mut p = h.scanned;
        while p <= last_start && p + 5 <= h.buf.len() {
            let kind = h.buf[p];
            let kind_ok = if tls13 {
                kind == APPLICATION_DATA
            } else {
                matches!(kind, ALERT | HANDSHAKE | APPLICATION_DATA)
            };
            let len = header_ok(&h.buf[p..]).filter(|_| kind_ok);
            let Some(len) = len else {
                p += 1;
                continue;
            };
            if h.buf.len() < p + 5 + len {
                break; // the whole record first
            }
            let header: [u8; 5] = h.buf[p..p + 5].try_into().unwrap_or_default();
            let fragment = &h.buf[p + 5..p + 5 + len];
            let mut found = None;
            for s in h.seq..=h.seq.saturating_add(h.more) {
                if h.work > MAX_HUNT_WORK {
                    break;
                }
                h.work += len;
                scratch.clear();
                if key.open_at(s, &header, fragment, &mut scratch).is_ok() {
                    found = Some(s);
                    break;
                }
            }
            if h.work > MAX_HUNT_WORK {
                p = last_start + 1;
                break;
            }
            if let Some(s) = found {
                key.seq = s;
                let rest = h.buf.split_off(p);
                let mut fed = self.feed_records(d, &rest, env, out);
                fed.dropped += p as u64;
                fed.resynced = Some(s - h.from);
                return fed;
            }
            p += 1;
        }
        if p > last_start {
            let held = h.buf.len() as u64;
            return Fed {
                dropped: held + self.fail(Outcome::CaptureGap),
                ..Fed::default()
            };
        }
        h.scanned = p;
        self.dirs[d].hunt = Some(h);
        Fed::default()
    }

    pub fn holding(&self) -> bool {
        self.dirs.iter().any(|d| d.waiting.is_some())
    }

    fn feed_records(&mut self, d: usize, data: &[u8], env: &Env<'_>, out: &mut Vec<u8>) -> Fed {
        let mut fed = Fed::default();
        let mut pos = 0;
        if !self.dirs[d].partial.is_empty() {
            let mut partial = std::mem::take(&mut self.dirs[d].partial);
            if partial.len() < 5 {
                let n = (5 - partial.len()).min(data.len());
                partial.extend_from_slice(&data[..n]);
                pos = n;
                if partial.len() < 5 {
                    self.dirs[d].partial = partial;
                    return fed;
                }
            }
            let Some(len) = header_ok(&partial) else {
                fed.dropped =
                    (partial.len() + data.len() - pos) as u64 + self.fail(Outcome::BadRecord);
                return fed;
            };
            let n = (5 + len - partial.len()).min(data.len() - pos);
            partial.extend_from_slice(&data[pos..pos + n]);
            pos += n;
            if partial.len() < 5 + len {
                self.dirs[d].partial = partial;
                return fed;
            }
            match self.record(d, &partial, env, out) {
                Step::Next => fed.read += partial.len() as u64,
                Step::Hold(wait) => {
                    partial.extend_from_slice(&data[pos..]);
                    self.hold(d, partial, wait);
                    return fed;
                }
                Step::Fail(o) => {
                    fed.dropped = (partial.len() + data.len() - pos) as u64 + self.fail(o);
                    return fed;
                }
            }
            partial.clear();
            self.dirs[d].partial = partial; // keep the allocation for the next straddler
        }
        while pos < data.len() {
            let rest = &data[pos..];
            if rest.len() < 5 {
                self.dirs[d].partial.extend_from_slice(rest);
                return fed;
            }
            let Some(len) = header_ok(rest) else {
                fed.dropped += rest.len() as u64 + self.fail(Outcome::BadRecord);
                return fed;
            };
            if rest.len() < 5 + len {
                self.dirs[d].partial.extend_from_slice(rest);
                return fed;
            }
            match self.record(d, &rest[..5 + len], env, out) {
                Step::Next => fed.read += (5 + len) as u64,
                Step::Hold(wait) => {
                    self.hold(d, rest.to_vec(), wait);
                    return fed;
                }
                Step::Fail(o) => {
                    fed.dropped += rest.len() as u64 + self.fail(o);
                    return fed;
                }
            }
            pos += 5 + len;
        }
        fed
    }

    fn hold(&mut self, d: usize, bytes: Vec<u8>, wait: Wait) {
        let dir = &mut self.dirs[d];
        dir.waiting = Some(wait);
        dir.held = bytes;
    }

    /// One whole record (header and fragment).
    fn record(&mut self, d: usize, rec: &[u8], env: &Env<'_>, out: &mut Vec<u8>) -> Step {
        let header: [u8; 5] = [rec[0], rec[1], rec[2], rec[3], rec[4]];
        let fragment = &rec[5..];
        let kind = header[0];
        let version = self.server_hello.as_ref().map(|s| s.version);
        if version == Some(TLS13) && fragment.len() > MAX_RECORD_13 {
            return Step::Fail(Outcome::BadRecord);
        }
        if self.dirs[d].key.is_some() && kind != CHANGE_CIPHER_SPEC {
            return self.encrypted(d, &header, fragment, out);
        }
        match kind {
            HANDSHAKE => self.plain_handshake(d, fragment),
            CHANGE_CIPHER_SPEC => match version {
                // TLS 1.3 sends it only for middleboxes (RFC 8446 D.4), the client's even
                // before the ServerHello when a HelloRetryRequest came first.
                Some(TLS13) | None => Step::Next,
                Some(_) => self.change_cipher_spec(d, env),
            },
            APPLICATION_DATA => match version {
                Some(TLS13) => {
                    if !self.keyed {
                        match self.key13(env) {
                            Step::Next => {}
                            other => return other,
                        }
                    }
                    self.encrypted(d, &header, fragment, out)
                }
                // Not a 1.3 record before the peer's hello: wait for it.
                None if d == 0 => Step::Hold(Wait::Peer),
                _ => Step::Fail(Outcome::BadRecord),
            },
            // A plaintext alert (a refused handshake) or heartbeat carries no data.
            ALERT | HEARTBEAT => Step::Next,
            _ => Step::Fail(Outcome::BadRecord),
        }
    }

    fn plain_handshake(&mut self, d: usize, fragment: &[u8]) -> Step {
        let mut msgs: Vec<Message> = Vec::new();
        self.dirs[d].handshake.feed(fragment, &mut msgs);
        if self.dirs[d].handshake.too_long {
            return Step::Fail(Outcome::BadRecord);
        }
        for m in msgs {
            if self.dirs[d].handshake.keep_all {
                self.transcript.note(d, &m);
            }
            match (d, m.kind, m.body) {
                (0, CLIENT_HELLO, Some(body)) => match handshake::parse_client_hello(&body) {
                    Some(ch) => self.client_hello = Some(ch),
                    None => return Step::Fail(Outcome::BadRecord),
                },
                (1, SERVER_HELLO, Some(body)) => {
                    let Some(sh) = handshake::parse_server_hello(&body) else {
                        return Step::Fail(Outcome::BadRecord);
                    };
                    if sh.hello_retry {
                        continue; // a second ClientHello and ServerHello follow
                    }
                    let step = self.server_hello(sh);
                    if !matches!(step, Step::Next) {
                        return step;
                    }
                }
                _ => {}
            }
        }
        Step::Next
    }

    fn server_hello(&mut self, sh: ServerHello) -> Step {
        let (version, id) = (sh.version, sh.cipher_suite);
        self.server_hello = Some(sh);
        // Only a TLS 1.2 key exchange may need the handshake messages.
        self.keep_transcript(version == TLS12);
        if self.client_hello.is_none() {
            return Step::Fail(Outcome::NoHandshake);
        }
        if version != TLS12 && version != TLS13 {
            return Step::Fail(Outcome::UnsupportedVersion);
        }
        let Some(suite) = cipher::suite(version, id) else {
            return Step::Fail(Outcome::UnsupportedSuite);
        };
        self.suite = Some(suite);
        // Secrets are looked up at the first record that needs them: a live run's key
        // log may get its line only after the hello went by.
        Step::Next
    }

    /// TLS 1.3: the record keys of both directions from the key log.
    fn key13(&mut self, env: &Env<'_>) -> Step {
        let (Some(suite), Some(ch)) = (self.suite, self.client_hello.as_ref()) else {
            return Step::Fail(Outcome::NoHandshake);
        };
        let s = env.secrets(&ch.random).unwrap_or_default();
        if s.client_traffic.is_none() && s.server_traffic.is_none() {
            return self.missing_secret(env);
        }
        let pairs = [
            (s.client_handshake, s.client_traffic),
            (s.server_handshake, s.server_traffic),
        ];
        for (dir, (hs, app)) in self.dirs.iter_mut().zip(pairs) {
            dir.tls13 = Tls13Dir {
                handshake_key: hs.and_then(|h| cipher::key13(suite, h.as_bytes())),
                app_secret: app.map(|a| a.as_bytes().to_vec()),
                in_app: false,
            };
        }
        self.keyed = true;
        Step::Next
    }

    fn missing_secret(&self, env: &Env<'_>) -> Step {
        if env.may_wait {
            Step::Hold(Wait::Secret(env.generation))
        } else {
            Step::Fail(Outcome::NoSecret)
        }
    }

    /// TLS 1.2: this direction switches to its record key.
    fn change_cipher_spec(&mut self, d: usize, env: &Env<'_>) -> Step {
        if !self.keyed {
            match self.key12(env) {
                Step::Next => {}
                other => return other,
            }
        }
        match self.dirs[d].pending.take() {
            Some(k) => {
                self.dirs[d].key = Some(k);
                Step::Next
            }
            None => Step::Fail(Outcome::BadRecord), // a second ChangeCipherSpec
        }
    }

    fn key12(&mut self, env: &Env<'_>) -> Step {
        let (Some(suite), Some(ch), Some(sh)) = (
            self.suite,
            self.client_hello.as_ref(),
            self.server_hello.as_ref(),
        ) else {
            return Step::Fail(Outcome::NoHandshake);
        };
        let master = env
            .secrets(&ch.random)
            .and_then(|s| s.master)
            .or_else(|| env.master_by_session(&sh.session_id))
            .or_else(|| self.master_from_pre_master(suite, env));
        let Some(master) = master else {
            return self.missing_secret(env);
        };
        let Some((c, s)) = cipher::keys12(suite, master.as_bytes(), &ch.random, &sh.random) else {
            return Step::Fail(Outcome::NoSecret);
        };
        self.keep_transcript(false);
        self.dirs[0].pending = Some(c);
        self.dirs[1].pending = Some(s);
        self.master = Some(master);
        self.keyed = true;
        Step::Next
    }

    /// The master secret of a pre-master secret in the key log (RFC 5246 8.1; RFC 7627 4
    /// when the extended master secret was negotiated).
    fn master_from_pre_master(&self, suite: Suite, env: &Env<'_>) -> Option<Secret> {
        let (ch, sh) = (self.client_hello.as_ref()?, self.server_hello.as_ref()?);
        let t = &self.transcript;
        let pms = env.pre_master(&ch.random).or_else(|| {
            let prefix = t
                .rsa_prefix
                .filter(|_| cipher::rsa_key_exchange(suite.id))?;
            env.pre_master_rsa(&prefix)
        })?;
        let mut master = [0u8; 48];
        if sh.extended_master_secret {
            let hash = t.session_hash(suite.hash)?;
            cipher::prf12(
                suite.hash,
                pms.as_bytes(),
                b"extended master secret",
                &hash,
                &mut master,
            )?;
        } else {
            let mut seed = [0u8; 64];
            seed[..32].copy_from_slice(&ch.random);
            seed[32..].copy_from_slice(&sh.random);
            cipher::prf12(
                suite.hash,
                pms.as_bytes(),
                b"master secret",
                &seed,
                &mut master,
            )?;
        }
        Secret::new(&master)
    }

    fn encrypted(
        &mut self,
        d: usize,
        header: &[u8; 5],
        fragment: &[u8],
        out: &mut Vec<u8>,
    ) -> Step {
        let tls13 = self.server_hello.as_ref().map(|s| s.version) == Some(TLS13);
        let start = out.len();
        if tls13 && !self.dirs[d].tls13.in_app {
            return self.encrypted13_handshake(d, header, fragment, out);
        }
        let Some(key) = self.dirs[d].key.as_mut() else {
            return Step::Fail(Outcome::NoSecret);
        };
        if key.open(header, fragment, out).is_err() {
            return Step::Fail(Outcome::DecryptFailed);
        }
        let kind = if tls13 {
            match inner_type(out, start) {
                Some(k) => k,
                None => return Step::Fail(Outcome::DecryptFailed),
            }
        } else {
            header[0]
        };
        self.after_open(d, kind, out, start)
    }

    /// A TLS 1.3 record before this direction's Finished: the handshake key, or the
    /// application key at sequence 0 when the key log lacks the handshake secret or the
    /// handshake is over.
    fn encrypted13_handshake(
        &mut self,
        d: usize,
        header: &[u8; 5],
        fragment: &[u8],
        out: &mut Vec<u8>,
    ) -> Step {
        let start = out.len();
        let suite = self.suite;
        let dir = &mut self.dirs[d];
        if let Some(hk) = dir.tls13.handshake_key.as_mut() {
            if hk.open(header, fragment, out).is_ok() {
                let Some(kind) = inner_type(out, start) else {
                    return Step::Fail(Outcome::DecryptFailed);
                };
                return self.after_open(d, kind, out, start);
            }
        }
        let app = dir
            .tls13
            .app_secret
            .as_deref()
            .zip(suite)
            .and_then(|(s, suite)| cipher::key13(suite, s));
        let Some(mut app) = app else {
            return Step::Fail(Outcome::NoSecret);
        };
        if app.open(header, fragment, out).is_err() {
            return Step::Fail(Outcome::DecryptFailed);
        }
        dir.tls13.in_app = true;
        dir.tls13.handshake_key = None;
        dir.key = Some(app);
        let Some(kind) = inner_type(out, start) else {
            return Step::Fail(Outcome::DecryptFailed);
        };
        self.after_open(d, kind, out, start)
    }

    /// The plaintext of an opened record sits in `out[start..]`: application data stays,
    /// anything else is read (handshake) or dropped (alerts).
    fn after_open(&mut self, d: usize, kind: u8, out: &mut Vec<u8>, start: usize) -> Step {
        match kind {
            APPLICATION_DATA => Step::Next,
            HANDSHAKE => {
                let mut msgs = Vec::new();
                self.dirs[d].handshake.feed(&out[start..], &mut msgs);
                out.truncate(start);
                for m in msgs {
                    let step = self.encrypted_handshake_message(d, m.kind);
                    if !matches!(step, Step::Next) {
                        return step;
                    }
                }
                Step::Next
            }
            _ => {
                out.truncate(start);
                Step::Next
            }
        }
    }

    fn encrypted_handshake_message(&mut self, d: usize, kind: u8) -> Step {
        let Some(suite) = self.suite else {
            return Step::Next;
        };
        if self.server_hello.as_ref().map(|s| s.version) != Some(TLS13) {
            return Step::Next; // TLS 1.2: Finished (or renegotiation, not followed)
        }
        let dir = &mut self.dirs[d];
        match kind {
            FINISHED if !dir.tls13.in_app => {
                let Some(app) = dir.tls13.app_secret.as_deref() else {
                    return Step::Fail(Outcome::NoSecret);
                };
                dir.key = cipher::key13(suite, app);
                dir.tls13.in_app = true;
                dir.tls13.handshake_key = None;
            }
            KEY_UPDATE if dir.tls13.in_app => {
                let next = dir
                    .tls13
                    .app_secret
                    .as_deref()
                    .and_then(|s| cipher::next_secret13(suite.hash, s));
                let Some(next) = next else {
                    return Step::Fail(Outcome::DecryptFailed);
                };
                dir.key = cipher::key13(suite, &next);
                dir.tls13.app_secret = Some(next);
            }
            _ => {}
        }
        Step::Next
    }

    /// The outcome when the connection closes: decrypted unless something said otherwise.
    pub fn close(&mut self) -> (Outcome, u64) {
        if let Some(o) = self.outcome {
            return (o, 0);
        }
        let o = if self.dirs.iter().any(|d| d.hunt.is_some()) {
            // It ended before a record after the hole opened.
            Outcome::CaptureGap
        } else if self.holding() && self.server_hello.is_some() {
            Outcome::NoSecret
        } else if !self.keyed {
            // The hellos, or the first encrypted record, never came.
            Outcome::NoHandshake
        } else {
            Outcome::Decrypted
        };
        let dropped = if o == Outcome::Decrypted {
            // A partial record at the end: the rest never came.
            self.dirs.iter().map(|d| d.partial.len() as u64).sum()
        } else {
            self.fail(o)
        };
        self.outcome = Some(o);
        (o, dropped)
    }
}

/// TLS 1.3 inner plaintext: content, type, zero padding (RFC 8446 5.4). The padding and
/// type are cut off `out`; None when the record is all zeros.
fn inner_type(out: &mut Vec<u8>, start: usize) -> Option<u8> {
    let last = out[start..].iter().rposition(|b| *b != 0)?;
    let kind = out[start + last];
    out.truncate(start + last);
    Some(kind)
}
