//! Stage 2b: TLS decryption, between TCP reassembly and Kafka framing.
//!
//! A connection whose first bytes are a TLS ClientHello is taken by this stage: its
//! records are read in both directions (`conn`), decrypted with the secrets of the key
//! log(s) (`keylog`, `cipher`), and the application plaintext goes on to framing as
//! ordinary chunks, one per TCP chunk that completed records, so that framing,
//! correlation and everything after see what a plaintext connection would give them.
//! Every other connection passes through untouched (one map look-up per chunk).
//!
//! Each TLS connection ends with one outcome (`conn::Outcome`), counted once under its
//! `tls_*` counter and in `summary()` with version and cipher suite; bytes are counted
//! as read through (`tls_record_bytes`) or given up (`tls_bytes`). A connection that
//! is TLS but whose handshake the capture missed is found by framing's TLS detection
//! instead and counted here when the session says so (`note_without_handshake`).

pub mod cipher;
pub mod conn;
pub mod handshake;
pub mod keylog;

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use crate::counter::Counter;
use crate::types::{Chunk, Counters, Endpoint, Fnv, Ts};

use conn::{Conn, Env, Fed, Outcome};
use keylog::{KeyLog, KeyLogTail, Secret};

/// Bytes all TLS connections may buffer at once (partial records, held records,
/// hellos); past it the connection that would grow is given up (`tls_buffer_limit`).
pub const MAX_TOTAL_BUFFERED: usize = 256 << 20;
/// TLS 1.2 session ids remembered for resumption; past it the memory starts afresh.
const MAX_SESSIONS: usize = 1 << 16;
/// Capture time between two reads of a growing key log (live runs).
const REREAD_NS: Ts = 20_000_000;

/// Where secrets come from: the run's key logs (parsed once, shared by its captures),
/// and, for live runs, the files to read on as they grow.
#[derive(Debug, Clone, Default)]
pub struct KeySource {
    pub log: Arc<KeyLog>,
    /// Files to re-read when a handshake's secret is missing (live runs).
    pub follow: Vec<std::path::PathBuf>,
}

/// One connection's entry: taken (TLS from its first byte) or passed through.
enum Slot {
    Plain,
    Tls(Box<Conn>),
}

/// (version, cipher suite, outcome) -> connections: the report's TLS table. Version and
/// suite are 0 when the capture never showed them.
pub type Summary = BTreeMap<(u16, u16, Outcome), u64>;

pub struct TlsStage {
    keys: Arc<KeyLog>,
    extra: KeyLog,
    tails: Vec<KeyLogTail>,
    generation: u64,
    last_read: Option<Ts>,
    slots: HashMap<u32, Slot, BuildHasherDefault<Fnv>>,
    sessions: HashMap<Vec<u8>, Secret>,
    buffered: usize,
    summary: Summary,
    /// Streams given up since the session last asked (their TLS is not decoded).
    pub undecoded: Vec<GivenUp>,
    scratch: Vec<u8>,
}

/// A connection whose TLS is not decoded from here on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenUp {
    pub stream: u32,
    /// Set when a capture hole ended its decryption: everything either side sent from
    /// then on is unreadable, so framing must treat it as lost (requests still open
    /// most likely had their response in it).
    pub hole: Option<HoleEnd>,
}

/// Where a capture hole ended a connection's decryption (`GivenUp::hole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoleEnd {
    pub client: Endpoint,
    pub server: Endpoint,
    pub ts_ns: Ts,
}

impl TlsStage {
    pub fn new(source: &KeySource) -> Self {
        let mut extra = KeyLog::default();
        let mut tails = Vec::new();
        for path in &source.follow {
            // Read again from the start: lines written since the run parsed `log` count.
            let mut tail = KeyLogTail::new(path.clone());
            let _ = tail.read_new(&mut extra);
            tails.push(tail);
        }
        TlsStage {
            keys: Arc::clone(&source.log),
            extra,
            tails,
            generation: 0,
            last_read: None,
            slots: HashMap::default(),
            sessions: HashMap::new(),
            buffered: 0,
            summary: Summary::new(),
            undecoded: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Secrets found inside the capture (pcapng Decryption Secrets Blocks).
    pub fn add_secrets(&mut self, text: &str, counters: &mut Counters) {
        let mut log = KeyLog::parse(text);
        if log.bad_lines > 0 {
            counters.add(Counter::TlsKeylogBadLines, log.bad_lines);
            log.bad_lines = 0;
        }
        self.extra.merge(&log);
        self.generation += 1;
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Did this stage take the connection (its TLS handshake is in the capture)?
    pub fn owns(&self, stream: u32) -> bool {
        matches!(self.slots.get(&stream), Some(Slot::Tls(_)))
    }

    /// A connection found to carry TLS by framing (its handshake was not captured).
    pub fn note_without_handshake(&mut self, counters: &mut Counters) {
        counters.inc(Counter::TlsConnections);
        counters.inc(Outcome::NoHandshake.counter());
        *self
            .summary
            .entry((0, 0, Outcome::NoHandshake))
            .or_default() += 1;
    }

    /// Route one chunk: handed back when the connection is not TLS (`candidate` is asked
    /// on its first chunk only: is the connection Kafka's at all?); else taken, and the
    /// plaintext it completed pushed onto `plain`.
    pub fn chunk(
        &mut self,
        ch: Chunk,
        candidate: impl FnOnce() -> bool,
        counters: &mut Counters,
        plain: &mut Vec<Chunk>,
    ) -> Option<Chunk> {
        let TlsStage {
            keys,
            extra,
            tails,
            generation,
            last_read,
            slots,
            sessions,
            buffered,
            summary,
            undecoded,
            scratch,
        } = self;
        let conn = match slots.get_mut(&ch.stream) {
            Some(Slot::Plain) => return Some(ch),
            Some(Slot::Tls(conn)) => conn,
            None => {
                if !(conn::starts_client_hello(&ch.data) && candidate()) {
                    slots.insert(ch.stream, Slot::Plain);
                    return Some(ch);
                }
                counters.inc(Counter::TlsConnections);
                let slot = slots
                    .entry(ch.stream)
                    .or_insert_with(|| Slot::Tls(Box::new(Conn::new(ch.src, ch.dst))));
                let Slot::Tls(conn) = slot else {
                    return Some(ch);
                };
                conn
            }
        };
        let client = conn.client;
        let server = conn.server;
        conn.last = (ch.ts_ns, ch.frame);
        let d = usize::from(ch.src != client);
        let before = conn.buffered();
        if !conn.seen(d) {
            counters.inc(Counter::TlsConnectionsDirections);
        }
        let mut outs: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut out = std::mem::take(scratch);
        out.clear();
        let crossed = if ch.lost > 0 && conn.seen(d) {
            conn.gap(d, ch.lost)
        } else {
            None
        };
        if let Some(fed) = crossed {
            counters.inc(Counter::TlsGaps);
            count(counters, fed);
        }
        if (ch.resync || ch.lost > 0) && conn.seen(d) && crossed.is_none() {
            // A hole of unknown size, or one decryption cannot cross (no application
            // key yet): the record sequence is lost from here.
            let dropped = conn.fail(Outcome::CaptureGap) + ch.data.len() as u64;
            count(
                counters,
                Fed {
                    dropped,
                    ..Fed::default()
                },
            );
        } else {
            let env = Env {
                keys,
                extra,
                sessions,
                may_wait: !tails.is_empty(),
                generation: *generation,
            };
            let fed = conn.feed(d, &ch.data, &env, &mut out);
            conn.read += fed.read;
            count(counters, fed);
        }
        if !out.is_empty() {
            outs.push((d, out));
        } else {
            *scratch = out;
        }
        if conn.holding() && conn.outcome.is_none() {
            // Waiting for the peer's hello, or (live) for a secret: read the key logs
            // on, then try the held records again.
            reread(tails, extra, generation, last_read, ch.ts_ns);
            let env = Env {
                keys,
                extra,
                sessions,
                may_wait: !tails.is_empty(),
                generation: *generation,
            };
            for dd in 0..2 {
                let mut o = Vec::new();
                let fed = conn.retry(dd, &env, &mut o);
                conn.read += fed.read;
                count(counters, fed);
                if !o.is_empty() {
                    outs.push((dd, o));
                }
            }
        }
        let after = conn.buffered();
        *buffered = (*buffered + after).saturating_sub(before);
        if *buffered > MAX_TOTAL_BUFFERED && after > before {
            *buffered = buffered.saturating_sub(after);
            let dropped = conn.fail(Outcome::BufferLimit);
            count(
                counters,
                Fed {
                    dropped,
                    ..Fed::default()
                },
            );
        }
        if let Some(o) = conn.outcome {
            if !conn.reported {
                report(conn, o, counters, summary);
                let hole = (o == Outcome::CaptureGap).then_some(HoleEnd {
                    client,
                    server,
                    ts_ns: ch.ts_ns,
                });
                undecoded.push(GivenUp {
                    stream: ch.stream,
                    hole,
                });
            }
        }
        for (dd, bytes) in outs {
            counters.add(Counter::TlsPlaintextBytes, bytes.len() as u64);
            // The first plaintext after a hole: framing resyncs (and bridges a hole of
            // known plaintext size inside a Kafka frame), its rows say after a gap.
            let gap = conn.take_gap(dd);
            let (src, dst) = if dd == 0 {
                (client, server)
            } else {
                (server, client)
            };
            plain.push(Chunk {
                stream: ch.stream,
                src,
                dst,
                data: bytes,
                ts_ns: ch.ts_ns,
                frame: ch.frame,
                resync: gap.is_some(),
                lost: gap.unwrap_or(0),
                snapped: false,
            });
        }
        None
    }

    /// The connection closed: its outcome, if not counted yet.
    /// A connection still waiting for its secret (live) reads the key logs once more
    /// first: the plaintext that frees goes onto `plain`.
    pub fn close(&mut self, stream: u32, counters: &mut Counters, plain: &mut Vec<Chunk>) {
        let Some(slot) = self.slots.remove(&stream) else {
            return;
        };
        let Slot::Tls(mut conn) = slot else {
            return;
        };
        self.buffered = self.buffered.saturating_sub(conn.buffered());
        if conn.holding() && conn.outcome.is_none() && !self.tails.is_empty() {
            self.last_read = None;
            let now = conn.last.0;
            reread(
                &mut self.tails,
                &mut self.extra,
                &mut self.generation,
                &mut self.last_read,
                now,
            );
            let env = Env {
                keys: &self.keys,
                extra: &self.extra,
                sessions: &self.sessions,
                may_wait: true,
                generation: self.generation,
            };
            for d in 0..2 {
                let mut o = Vec::new();
                let fed = conn.retry(d, &env, &mut o);
                conn.read += fed.read;
                count(counters, fed);
                if !o.is_empty() {
                    counters.add(Counter::TlsPlaintextBytes, o.len() as u64);
                    let (src, dst) = if d == 0 {
                        (conn.client, conn.server)
                    } else {
                        (conn.server, conn.client)
                    };
                    plain.push(Chunk {
                        stream,
                        src,
                        dst,
                        data: o,
                        ts_ns: now,
                        frame: conn.last.1,
                        resync: false,
                        lost: 0,
                        snapped: false,
                    });
                }
            }
        }
        let (o, dropped) = conn.close();
        count(
            counters,
            Fed {
                dropped,
                ..Fed::default()
            },
        );
        if !conn.reported {
            report(&mut conn, o, counters, &mut self.summary);
            if o != Outcome::Decrypted {
                // Given up at its close: nothing of it comes after for framing to lose.
                self.undecoded.push(GivenUp { stream, hole: None });
            }
        }
        if o == Outcome::Decrypted {
            self.remember_session(&conn);
        }
    }

    fn remember_session(&mut self, conn: &Conn) {
        let (Some(master), Some(sh)) = (conn.master, conn.server_hello.as_ref()) else {
            return;
        };
        if sh.session_id.is_empty() {
            return;
        }
        if self.sessions.len() >= MAX_SESSIONS {
            self.sessions.clear();
        }
        self.sessions.insert(sh.session_id.clone(), master);
    }

    /// The end of the capture: every connection still open gets its outcome.
    pub fn finish(&mut self, counters: &mut Counters, plain: &mut Vec<Chunk>) {
        let mut streams: Vec<u32> = self.slots.keys().copied().collect();
        streams.sort_unstable();
        for s in streams {
            self.close(s, counters, plain);
        }
    }
}

/// Read the followed key logs on (at most every `REREAD_NS` of capture time); the
/// generation grows when they gained entries.
fn reread(
    tails: &mut [KeyLogTail],
    extra: &mut KeyLog,
    generation: &mut u64,
    last_read: &mut Option<Ts>,
    now: Ts,
) {
    if tails.is_empty() || last_read.is_some_and(|t| now.saturating_sub(t) < REREAD_NS) {
        return;
    }
    *last_read = Some(now);
    let before = extra.entries();
    for tail in tails.iter_mut() {
        let _ = tail.read_new(extra);
    }
    if extra.entries() != before {
        *generation += 1;
    }
}

/// Count a connection's outcome, once. A connection not decrypted to the end counts
/// all its bytes as `tls_bytes`, as framing counts a TLS connection it cannot read.
fn report(conn: &mut Conn, o: Outcome, counters: &mut Counters, summary: &mut Summary) {
    conn.reported = true;
    counters.inc(o.counter());
    *summary.entry(summary_key(conn, o)).or_default() += 1;
    if o != Outcome::Decrypted && conn.read > 0 {
        counters.sub(Counter::TlsRecordBytes, conn.read);
        counters.add(Counter::TlsBytes, conn.read);
        conn.read = 0;
    }
}

fn summary_key(conn: &Conn, o: Outcome) -> (u16, u16, Outcome) {
    let sh = conn.server_hello.as_ref();
    (
        sh.map_or(0, |s| s.version),
        sh.map_or(0, |s| s.cipher_suite),
        o,
    )
}

/// Records lost in a hole decryption went on after (`tls_gaps` counts the holes).
fn count_resync(counters: &mut Counters, records: Option<u64>) {
    if let Some(n) = records {
        counters.add(Counter::TlsRecordsLost, n);
    }
}

fn count(counters: &mut Counters, fed: Fed) {
    count_resync(counters, fed.resynced);
    if fed.read > 0 {
        counters.add(Counter::TlsRecordBytes, fed.read);
    }
    if fed.dropped > 0 {
        counters.add(Counter::TlsBytes, fed.dropped);
    }
}
