//! Stage 4: Kafka frames of a connection -> request/response exchanges.
//! Its Python twin, the test oracle, is `tests/oracle/correlate.py`.
//!
//! Which side is the broker: a port in `broker_ports` says so; otherwise (heuristic on)
//! the frames settle it, once, for the whole connection (see `settle_role`): a frame
//! that answers a held request header of a known API by its correlation id, or else a
//! plausible request header, which must come from the initiator when the SYN was seen
//! (Kafka clients open their connections; a response can parse as a plausible request
//! header, e.g. a small correlation id reads as Produce's api_key and version). Frames
//! of a connection whose role cannot be settled are held (bounded) and counted as
//! non-Kafka if it never settles.
//!
//! Requests match responses by correlation id per connection. Kafka answers in request
//! order, so a response that skips the oldest open request is counted; the skipped
//! request stays open and is reported `unanswered` if nothing answers it. Produce with
//! acks=0 expects no response. After a successful SaslHandshake v0 the SASL tokens
//! travel as raw size-prefixed frames without Kafka headers until authentication ends;
//! those become `sasl_token` exchanges.
//!
//! Differs from Python on purpose (issue #11): a response whose request is not open yet
//! is held (bounded) instead of becoming an orphan at once, because after a capture hole
//! the reassembler releases the request direction late, after the responses. A request
//! that arrives with the correlation id of a held response pairs with it
//! (`late_request_pairs`). Held responses become orphans, in their order, as soon as
//! they cannot be answered any more: a request or an answered response with a higher
//! correlation id (clients number requests upwards), the bounds, a long wait, or the
//! connection's end.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::counter::Counter;
use crate::cursor::be_i32;
use crate::kafka::header::{
    body_offset, is_plausible_request, peek_correlation_id, peek_request, peek_request_cut,
    request_like_id, RequestStart, StartCheck,
};
use crate::types::{
    Counters, Endpoint, Exchange, ExchangeKind, KafkaFrame, StreamOpen, Ts, Versions,
};

pub const DEFAULT_BROKER_PORTS: [u16; 11] = [
    9092, 9093, 9094, 9095, 9096, 9097, 9098, 9099, 19092, 29092, 39092,
];

// Bounds that keep memory flat on hostile or lossy traffic.
pub const MAX_OPEN_REQUESTS: usize = 10_000;
pub const MAX_HELD_FRAMES: usize = 16;
/// Responses waiting for a late request, per connection: count and bytes.
pub const MAX_HELD_RESPONSES: usize = 64;
pub const MAX_HELD_RESPONSE_BYTES: usize = 8 << 20;
/// A held response older than this (capture time) when a later response arrives is
/// given up: the reassembler releases a direction held back by a hole well before.
pub const MAX_RESPONSE_HOLD_NS: Ts = 5_000_000_000;
/// Request correlation ids remembered per connection to judge resync candidates.
pub const RECENT_REQUEST_IDS: usize = 64;
/// A response candidate after a hole may answer a request not framed yet (its
/// direction held back by a hole of its own): ids up to this far above the highest
/// request id seen are taken as such.
pub const RESYNC_ID_LEAD: i64 = 1024;

#[derive(Debug, Clone)]
pub struct CorrelationConfig {
    pub broker_ports: Vec<u16>,
    pub heuristic: bool,
    pub max_frame: u32,
    pub sasl_handshake_key: i16,
    pub produce_key: i16,
}

struct Open {
    seq: u64,
    frame: KafkaFrame,
    api_key: i16,
    api_version: i16,
    client_id: Option<String>,
    /// A hole in the response direction after this request may hold its response.
    gap: bool,
}

/// Open requests by correlation id, in the order they were sent (Python's dict order:
/// the oldest is evicted first, and leftovers are reported in that order).
#[derive(Default)]
struct Pending {
    by_id: HashMap<i32, (u64, Open)>,
    order: BTreeMap<u64, i32>,
    next: u64,
}

impl Pending {
    fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The caller pops an open request of the same id first.
    fn insert(&mut self, corr: i32, open: Open) {
        let seq = self.next;
        self.next += 1;
        if let Some((old, _)) = self.by_id.insert(corr, (seq, open)) {
            self.order.remove(&old);
        }
        self.order.insert(seq, corr);
    }

    fn pop(&mut self, corr: i32) -> Option<Open> {
        let (seq, open) = self.by_id.remove(&corr)?;
        self.order.remove(&seq);
        Some(open)
    }

    fn oldest(&self) -> Option<&Open> {
        let (_, corr) = self.order.first_key_value()?;
        self.by_id.get(corr).map(|(_, o)| o)
    }

    fn pop_oldest(&mut self) -> Option<(i32, Open)> {
        let (_, corr) = self.order.pop_first()?;
        self.by_id.remove(&corr).map(|(_, o)| (corr, o))
    }
}

struct Conn {
    stream: u32,
    a: Endpoint,
    b: Endpoint,
    /// The TCP handshake was seen: `a` opened the connection, so it is the client.
    syn_seen: bool,
    broker: Option<Endpoint>,
    pending: Pending,
    held: Vec<KafkaFrame>,
    non_kafka: bool,
    sasl_handshake_ids: HashSet<i32>,
    sasl_raw: bool,
    sasl_token: Option<(KafkaFrame, u64)>,
    /// Requests seen so far: the next one's `Exchange::seq`.
    next_seq: u64,
    /// Responses whose request is not open (yet), with their correlation id.
    early: VecDeque<(i32, KafkaFrame)>,
    early_bytes: usize,
    /// Capture time of the latest hole in the request direction that may hold whole
    /// requests: responses without a request after it are flagged.
    request_gap: Option<Ts>,
    /// Holes noted before the roles were settled (by sender; at most one each).
    unsettled_gaps: Vec<(Endpoint, Ts, Ts)>,
    /// The correlation ids of the latest requests (bounded), and the highest one:
    /// what a frame start found after a hole is checked against (`confirms_start`).
    recent_ids: VecDeque<i32>,
    highest_id: Option<i32>,
}

impl Conn {
    fn saw_request_id(&mut self, corr: i32) {
        if self.recent_ids.len() >= RECENT_REQUEST_IDS {
            self.recent_ids.pop_front();
        }
        self.recent_ids.push_back(corr);
        self.highest_id = Some(self.highest_id.map_or(corr, |h| h.max(corr)));
    }

    /// Can a response with this correlation id come now? One of a request still open,
    /// or of one not framed yet (above every id seen, by at most `RESYNC_ID_LEAD`).
    /// Nothing known (no request seen yet) proves nothing either way.
    fn may_answer(&self, corr: i32) -> bool {
        let Some(highest) = self.highest_id else {
            return true;
        };
        let lead = i64::from(corr) - i64::from(highest);
        self.pending.by_id.contains_key(&corr) || (1..=RESYNC_ID_LEAD).contains(&lead)
    }

    /// Can a request with this correlation id come now? Not one still open nor one of
    /// the latest requests: clients number their requests and do not reuse an id.
    fn may_ask(&self, corr: i32) -> bool {
        !self.pending.by_id.contains_key(&corr) && !self.recent_ids.contains(&corr)
    }

    /// A hole in the bytes `src` sent between capture times `from` and `to`.
    fn frames_lost(&mut self, src: Endpoint, from: Ts, to: Ts) {
        match self.broker {
            Some(broker) if broker == src => {
                for (_, open) in self.pending.by_id.values_mut() {
                    if open.frame.last_ts_ns <= to {
                        open.gap = true;
                    }
                }
            }
            Some(_) => self.request_gap = Some(from),
            None => match self.unsettled_gaps.iter_mut().find(|g| g.0 == src) {
                Some(g) => g.2 = to,
                None => self.unsettled_gaps.push((src, from, to)),
            },
        }
    }

    fn client(&self) -> Endpoint {
        if self.broker == Some(self.b) {
            self.a
        } else {
            self.b
        }
    }
}

/// Everything a frame handler reads besides the connection.
struct Ctx<'a> {
    cfg: &'a CorrelationConfig,
    versions: &'a dyn Versions,
}

pub struct Correlator {
    cfg: CorrelationConfig,
    versions: Arc<dyn Versions + Send + Sync>,
    // By stream index: indexes are given in order of opening, so iteration follows
    // Python's dict order.
    conns: BTreeMap<u32, Conn>,
}

impl Correlator {
    pub fn new(cfg: CorrelationConfig, versions: Arc<dyn Versions + Send + Sync>) -> Self {
        Correlator {
            cfg,
            versions,
            conns: BTreeMap::new(),
        }
    }

    // -- connection lifecycle -------------------------------------------------

    pub fn open(&mut self, ev: &StreamOpen) {
        let broker = self.broker_by_port(ev);
        self.conns.insert(
            ev.stream,
            Conn {
                stream: ev.stream,
                a: ev.initiator,
                b: ev.responder,
                syn_seen: ev.syn_seen,
                broker,
                pending: Pending::default(),
                held: Vec::new(),
                non_kafka: false,
                sasl_handshake_ids: HashSet::new(),
                sasl_raw: false,
                sasl_token: None,
                next_seq: 0,
                early: VecDeque::new(),
                early_bytes: 0,
                request_gap: None,
                unsettled_gaps: Vec::new(),
                recent_ids: VecDeque::new(),
                highest_id: None,
            },
        );
    }

    /// A hole between capture times `from` and `to` in the bytes `src` sent may hold
    /// whole frames: the requests open by `to` may have lost their response in it (if
    /// `src` is the broker), and responses after `from` without a request may have
    /// lost it (if the client).
    pub fn frames_lost(&mut self, stream: u32, src: Endpoint, from: Ts, to: Ts) {
        if let Some(conn) = self.conns.get_mut(&stream) {
            conn.frames_lost(src, from, to);
        }
    }

    pub fn is_kafka_candidate(&self, stream: u32) -> bool {
        self.conns
            .get(&stream)
            .is_some_and(|c| c.broker.is_some() || self.cfg.heuristic)
    }

    /// The resync check for frames sent by `src` (fixed when its framer is made).
    pub fn start_check(&self, stream: u32, src: Endpoint) -> StartCheck {
        match self.conns.get(&stream).and_then(|c| c.broker) {
            None => StartCheck::Either,
            Some(broker) if broker == src => StartCheck::Response,
            Some(_) => StartCheck::Request,
        }
    }

    /// Does the connection's state confirm a frame start framing found after losing
    /// sync in what `src` sends? `payload` is the candidate's bytes after its size
    /// prefix; None while its correlation id is not all there. A response must answer
    /// a request that may be waiting for it (`Conn::may_answer`), a request must not
    /// repeat an id (`Conn::may_ask`): a look-alike header inside a body after a hole
    /// carries an arbitrary correlation id, and is refused. Raw SASL tokens (no header)
    /// and connections whose roles are not settled are not checked.
    pub fn confirms_start(&self, stream: u32, src: Endpoint, payload: &[u8]) -> Option<bool> {
        let Some(conn) = self.conns.get(&stream) else {
            return Some(true);
        };
        let Some(broker) = conn.broker else {
            return Some(true);
        };
        if conn.sasl_raw || conn.sasl_token.is_some() {
            return Some(true);
        }
        if src == broker {
            peek_correlation_id(payload).map(|corr| conn.may_answer(corr))
        } else {
            be_i32(payload, 4).map(|corr| conn.may_ask(corr))
        }
    }

    pub fn close(&mut self, stream: u32, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let Some(mut conn) = self.conns.remove(&stream) else {
            return;
        };
        if conn.broker.is_none() || conn.non_kafka {
            counters.add(Counter::NonKafkaFrames, conn.held.len() as u64);
            return;
        }
        release_early(&mut conn, |_| true, counters, out);
        while let Some((corr, req)) = conn.pending.pop_oldest() {
            out.push(unanswered(&conn, corr, req, None));
        }
        if let Some((token, seq)) = conn.sasl_token.take() {
            out.push(sasl(&conn, token, seq, None));
        }
    }

    pub fn close_all(&mut self, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let streams: Vec<u32> = self.conns.keys().copied().collect();
        for stream in streams {
            self.close(stream, counters, out);
        }
    }

    /// Requests waiting for their response right now, by api_key (ascending).
    pub fn open_requests(&self) -> Vec<(i16, u64)> {
        let mut by_key: BTreeMap<i16, u64> = BTreeMap::new();
        for conn in self.conns.values() {
            for (_, open) in conn.pending.by_id.values() {
                *by_key.entry(open.api_key).or_default() += 1;
            }
        }
        by_key.into_iter().collect()
    }

    // -- frames ---------------------------------------------------------------

    pub fn frame(&mut self, f: KafkaFrame, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let ctx = Ctx {
            cfg: &self.cfg,
            versions: self.versions.as_ref(),
        };
        let Some(conn) = self.conns.get_mut(&f.stream) else {
            counters.inc(Counter::NonKafkaFrames);
            return;
        };
        on_frame(&ctx, conn, f, counters, out);
    }

    fn broker_by_port(&self, ev: &StreamOpen) -> Option<Endpoint> {
        let ports = &self.cfg.broker_ports;
        let init_known = ports.contains(&ev.initiator.1);
        let resp_known = ports.contains(&ev.responder.1);
        if resp_known && (!init_known || ev.syn_seen) {
            Some(ev.responder)
        } else if init_known && !resp_known {
            Some(ev.initiator)
        } else {
            None
        }
    }
}

fn on_frame(
    ctx: &Ctx,
    conn: &mut Conn,
    f: KafkaFrame,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    if conn.non_kafka {
        counters.inc(Counter::NonKafkaFrames);
        return;
    }
    match conn.broker {
        None => settle_role(ctx, conn, f, counters, out),
        Some(broker) if f.src == broker => on_response(conn, f, counters, out),
        Some(_) => on_request(ctx, conn, f, counters, out),
    }
}

fn settle_role(
    ctx: &Ctx,
    conn: &mut Conn,
    f: KafkaFrame,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    if !ctx.cfg.heuristic {
        conn.non_kafka = true;
        counters.inc(Counter::NonKafkaFrames);
        return;
    }
    if let Some(broker) = role_from(ctx, conn, &f) {
        conn.broker = Some(broker);
        counters.inc(Counter::KafkaFoundByHeuristic);
        for (src, from, to) in std::mem::take(&mut conn.unsettled_gaps) {
            conn.frames_lost(src, from, to);
        }
        for h in std::mem::take(&mut conn.held) {
            on_frame(ctx, conn, h, counters, out);
        }
        on_frame(ctx, conn, f, counters, out);
        return;
    }
    conn.held.push(f);
    if conn.held.len() > MAX_HELD_FRAMES {
        conn.non_kafka = true;
        counters.add(Counter::NonKafkaFrames, conn.held.len() as u64);
        conn.held = Vec::new();
    }
}

/// The broker, if `f` settles it: first a request/response pair (a held request header
/// of a known API, any version, from the other side, whose correlation id `f` starts
/// with: a request of a version newer than the specs, like a new client's first
/// ApiVersions, is answered before any plausible request shows up), else `f` as a
/// plausible request header from a side that may send requests.
fn role_from(ctx: &Ctx, conn: &Conn, f: &KafkaFrame) -> Option<Endpoint> {
    if may_request(conn, f.dst) {
        if let Some(corr) = peek_correlation_id(&f.payload) {
            let answered = conn
                .held
                .iter()
                .any(|h| h.src == f.dst && request_like_id(&h.payload, ctx.versions) == Some(corr));
            if answered {
                return Some(f.src);
            }
        }
    }
    (may_request(conn, f.src) && is_plausible_request(&f.payload, ctx.versions)).then_some(f.dst)
}

/// Can `side` be the client? When the SYN was seen only the initiator can.
fn may_request(conn: &Conn, side: Endpoint) -> bool {
    !conn.syn_seen || side == conn.a
}

fn on_request(
    ctx: &Ctx,
    conn: &mut Conn,
    f: KafkaFrame,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    let versions = ctx.versions;
    if conn.sasl_raw {
        if !is_plausible_request(&f.payload, versions) {
            let seq = take_seq(conn);
            return raw_token(conn, f, seq, counters, out);
        }
        conn.sasl_raw = false;
    }
    let seq = take_seq(conn);
    let start = if f.holed() {
        peek_request_cut(&f.payload, versions)
    } else {
        peek_request(&f.payload, versions)
    };
    let Some(start) = start else {
        counters.inc(Counter::MalformedRequests);
        out.push(Exchange {
            stream: conn.stream,
            client: conn.client(),
            broker: conn.broker.unwrap_or(f.dst),
            kind: ExchangeKind::Malformed,
            request: Some(f),
            response: None,
            api_key: None,
            api_version: None,
            correlation_id: None,
            client_id: None,
            note: Some("request_header_truncated".to_owned()),
            seq: Some(seq),
            gap: false,
        });
        return;
    };
    let known = versions.known(start.api_key, start.api_version);
    if !known {
        if versions.known_key(start.api_key) {
            counters.inc(Counter::UnsupportedVersionRequests);
        } else {
            counters.inc(Counter::UnknownApiKeyRequests);
        }
    }
    let corr = start.correlation_id;
    conn.saw_request_id(corr);
    // Held responses with a lower id answered requests that will not come any more.
    release_early(conn, |id| id < corr, counters, out);
    if let Some(dup) = conn.pending.pop(corr) {
        counters.inc(Counter::DuplicateCorrelationIds);
        out.push(unanswered(
            conn,
            corr,
            dup,
            Some("duplicate_correlation_id"),
        ));
    }
    let flexible = known && versions.request_flexible(start.api_key, start.api_version);
    if start.api_key == ctx.cfg.produce_key
        && acks(versions, &f.payload, &start, flexible) == Some(0)
    {
        out.push(Exchange {
            stream: conn.stream,
            client: conn.client(),
            broker: f.dst,
            kind: ExchangeKind::NoResponse,
            request: Some(f),
            response: None,
            api_key: Some(start.api_key),
            api_version: Some(start.api_version),
            correlation_id: Some(corr),
            client_id: start.client_id,
            note: None,
            seq: Some(seq),
            gap: false,
        });
        return;
    }
    if start.api_key == ctx.cfg.sasl_handshake_key && start.api_version == 0 {
        conn.sasl_handshake_ids.insert(corr);
    }
    let open = Open {
        seq,
        frame: f,
        api_key: start.api_key,
        api_version: start.api_version,
        client_id: start.client_id,
        gap: false,
    };
    if let Some(i) = conn.early.iter().position(|(id, _)| *id == corr) {
        // Its response came first (the request direction was held back by a hole).
        let Some((_, resp)) = conn.early.remove(i) else {
            return;
        };
        conn.early_bytes -= resp.payload.len();
        counters.inc(Counter::LateRequestPairs);
        if conn
            .pending
            .oldest()
            .is_some_and(|o| o.frame.last_frame < open.frame.last_frame)
        {
            counters.inc(Counter::ResponsesOutOfOrder);
        }
        out.push(answer(conn, corr, open, resp));
        return;
    }
    conn.pending.insert(corr, open);
    if conn.pending.len() > MAX_OPEN_REQUESTS {
        if let Some((oldest, req)) = conn.pending.pop_oldest() {
            counters.inc(Counter::OpenRequestsEvicted);
            // Handshake ids are a subset of the open requests: bounded with them.
            conn.sasl_handshake_ids.remove(&oldest);
            out.push(unanswered(conn, oldest, req, Some("evicted")));
        }
    }
}

/// Produce's acks, read through the spec model (the field it names) from the body after
/// the header.
fn acks(
    versions: &dyn Versions,
    payload: &[u8],
    start: &RequestStart,
    flexible: bool,
) -> Option<i64> {
    let body = payload.get(body_offset(payload, start, flexible)?..)?;
    versions.request_acks(start.api_key, start.api_version, body)
}

fn on_response(conn: &mut Conn, f: KafkaFrame, counters: &mut Counters, out: &mut Vec<Exchange>) {
    if let Some((token, seq)) = conn.sasl_token.take() {
        out.push(sasl(conn, token, seq, Some(f)));
        return;
    }
    let corr = peek_correlation_id(&f.payload);
    let Some(corr) = corr else {
        counters.inc(Counter::OrphanResponses);
        out.push(orphan(conn, f, None));
        return;
    };
    let Some(req) = conn.pending.pop(corr) else {
        return hold_early(conn, corr, f, counters, out);
    };
    // Answers come in request order: held responses with a lower id will not be
    // answered by a request still to come.
    release_early(conn, |id| id < corr, counters, out);
    if conn
        .pending
        .oldest()
        .is_some_and(|o| o.frame.last_frame < req.frame.last_frame)
    {
        counters.inc(Counter::ResponsesOutOfOrder);
    }
    out.push(answer(conn, corr, req, f));
}

/// A response whose request is not open: keep it for a request arriving late.
fn hold_early(
    conn: &mut Conn,
    corr: i32,
    f: KafkaFrame,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    let now = f.last_ts_ns;
    release_early_while(
        conn,
        |(_, r), _, _| r.last_ts_ns.saturating_add(MAX_RESPONSE_HOLD_NS) < now,
        counters,
        out,
    );
    if f.payload.len() > MAX_HELD_RESPONSE_BYTES {
        // Too big to hold: an orphan now, after those held before it.
        release_early(conn, |_| true, counters, out);
        counters.inc(Counter::OrphanResponses);
        out.push(orphan(conn, f, Some(corr)));
        return;
    }
    conn.early_bytes += f.payload.len();
    conn.early.push_back((corr, f));
    release_early_while(
        conn,
        |_, n, bytes| n > MAX_HELD_RESPONSES || bytes > MAX_HELD_RESPONSE_BYTES,
        counters,
        out,
    );
}

/// Turn the held responses whose id satisfies `gone` into orphans, in arrival order.
fn release_early(
    conn: &mut Conn,
    gone: impl Fn(i32) -> bool,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    if conn.early.is_empty() {
        return;
    }
    let mut keep = VecDeque::new();
    for (id, resp) in std::mem::take(&mut conn.early) {
        if gone(id) {
            conn.early_bytes -= resp.payload.len();
            counters.inc(Counter::OrphanResponses);
            out.push(orphan(conn, resp, Some(id)));
        } else {
            keep.push_back((id, resp));
        }
    }
    conn.early = keep;
}

/// Turn the oldest held responses into orphans while `over(oldest, count, bytes)`.
fn release_early_while(
    conn: &mut Conn,
    over: impl Fn(&(i32, KafkaFrame), usize, usize) -> bool,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    while let Some(first) = conn.early.front() {
        if !over(first, conn.early.len(), conn.early_bytes) {
            break;
        }
        let Some((id, resp)) = conn.early.pop_front() else {
            break;
        };
        conn.early_bytes -= resp.payload.len();
        counters.inc(Counter::OrphanResponses);
        out.push(orphan(conn, resp, Some(id)));
    }
}

/// The next request's position on its connection (`Exchange::seq`).
fn take_seq(conn: &mut Conn) -> u64 {
    let seq = conn.next_seq;
    conn.next_seq += 1;
    seq
}

fn raw_token(
    conn: &mut Conn,
    f: KafkaFrame,
    seq: u64,
    counters: &mut Counters,
    out: &mut Vec<Exchange>,
) {
    if let Some((prev, prev_seq)) = conn.sasl_token.take() {
        out.push(sasl(conn, prev, prev_seq, None));
    }
    conn.sasl_token = Some((f, seq));
    counters.inc(Counter::SaslRawTokens);
}

fn answer(conn: &mut Conn, corr: i32, req: Open, f: KafkaFrame) -> Exchange {
    if conn.sasl_handshake_ids.remove(&corr) {
        // Raw tokens follow only when the handshake succeeded (error_code 0).
        conn.sasl_raw = f.payload.get(4..6) == Some(&[0, 0][..]);
    }
    Exchange {
        stream: conn.stream,
        client: conn.client(),
        broker: f.src,
        kind: ExchangeKind::Pair,
        request: Some(req.frame),
        response: Some(f),
        api_key: Some(req.api_key),
        api_version: Some(req.api_version),
        correlation_id: Some(corr),
        client_id: req.client_id,
        note: None,
        seq: Some(req.seq),
        gap: false,
    }
}

fn orphan(conn: &Conn, f: KafkaFrame, corr: Option<i32>) -> Exchange {
    // Its request may be in a hole of the request direction before it.
    let gap = conn.request_gap.is_some_and(|at| at <= f.last_ts_ns);
    Exchange {
        stream: conn.stream,
        client: conn.client(),
        broker: f.src,
        kind: ExchangeKind::OrphanResponse,
        request: None,
        response: Some(f),
        api_key: None,
        api_version: None,
        correlation_id: corr,
        client_id: None,
        note: None,
        seq: None,
        gap,
    }
}

fn sasl(conn: &Conn, token: KafkaFrame, seq: u64, answer: Option<KafkaFrame>) -> Exchange {
    Exchange {
        stream: conn.stream,
        client: conn.client(),
        broker: conn.broker.unwrap_or(token.dst),
        kind: ExchangeKind::SaslToken,
        request: Some(token),
        response: answer,
        api_key: None,
        api_version: None,
        correlation_id: None,
        client_id: None,
        note: None,
        seq: Some(seq),
        gap: false,
    }
}

/// A request that got no answer in the capture; `gap`: Kafka answers every request but
/// acks=0 Produce, so one still open after a hole in the responses most likely had its
/// response there (its row's status says so: `rows::status_of`).
fn unanswered(conn: &Conn, corr: i32, req: Open, note: Option<&str>) -> Exchange {
    Exchange {
        stream: conn.stream,
        client: conn.client(),
        broker: req.frame.dst,
        kind: ExchangeKind::Unanswered,
        request: Some(req.frame),
        response: None,
        api_key: Some(req.api_key),
        api_version: Some(req.api_version),
        correlation_id: Some(corr),
        client_id: req.client_id,
        note: note.map(str::to_owned),
        seq: Some(req.seq),
        gap: req.gap,
    }
}
