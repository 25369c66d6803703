//! Stage 2: TCP packets -> in-order byte chunks per connection direction.
//! Its Python twin, the test oracle, is `tests/oracle/tcp.py` (its module docstring
//! states the policies; they hold here with the same defaults and counter names).
//!
//! Where this port differs from the Python stage, on purpose:
//!
//! * Buffered out-of-order segments live in a `BTreeMap` keyed by unwrapped sequence
//!   number, and adjacent ones are coalesced (merging the smaller into the larger), so
//!   inserting and draining cost O(log n) whatever the order the bytes come in. The
//!   bytes, chunk boundaries and time stamps released are the same; an overlapping copy
//!   that disagrees with several coalesced segments counts one `tcp_overlap_conflict`.
//! * Memory is bounded for files too: besides the byte bounds, buffered segments are
//!   capped in number per direction and overall (a one-byte segment costs far more
//!   than one byte), connections silent for `file_idle_timeout_ns` of capture time
//!   close as `idle` (`tcp_idle_close`) and at most `max_connections` stay open (the
//!   least recently active one closes as `idle`, `tcp_connection_limit`). Idleness is
//!   measured on a clock that never runs backwards and moves at most half the timeout
//!   per packet, so one bogus time stamp cannot expire every connection.
//! * A SYN with a new ISN on a connection active within `suspect_syn_window_ns` is not
//!   taken at its word: the next packet decides. If it answers the new ISN (SYN-ACK,
//!   acknowledgements, data in the new sequence space) the 4-tuple was reused; if it
//!   continues the old sequence space the SYN was spoofed or stale and the connection
//!   goes on (`tcp_suspect_syn`).
//! * An RST is refuted when its sender carries on with new bytes past the RST, or the
//!   peer still sends new bytes after `rst_grace_ns` (bytes continuing the stream, not
//!   stray ones far ahead): a real reset leaves no one to send them
//!   (`tcp_suspect_rst`). Payload seen while a connection stands reset is
//!   counted in `tcp_data_after_rst`.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use crate::counter::Counter;
use crate::types::{
    Chunk, CloseReason, Counters, Endpoint, Event, Packet, StreamClose, StreamOpen, Ts, ACK, FIN,
    RST, SYN,
};

/// A segment starting this far beyond the next expected byte is not this connection's
/// data (TCP windows are at most 1 GiB).
const MAX_AHEAD: i64 = 1 << 30;
/// An RST is believed if its sequence number is this close to the expected one; a
/// receiver ignores RSTs far outside its window, so must we.
const RST_WINDOW: i64 = 1 << 24;
/// Bytes after an RST refute it only if they start at most this far past the next
/// expected byte.
const REFUTE_AHEAD: i64 = 1 << 20;
/// Closing connections are checked for their grace every this many packets.
const SWEEP_EVERY: u64 = 1024;
const NIL: usize = usize::MAX;

#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Close connections silent this long (live capture). None: the file's own policy,
    /// `file_idle_timeout_ns`.
    pub idle_timeout_ns: Option<i64>,
    /// Out-of-order bytes buffered per direction before its first hole is skipped.
    pub max_buffered_bytes: u64,
    /// Out-of-order bytes buffered across all connections.
    pub max_total_buffered_bytes: u64,
    /// Peer packets acknowledging past a hole that prove the capture lost its bytes.
    pub ack_gap_packets: u64,
    /// Capture time an acknowledged hole is waited for before it is skipped.
    pub ack_gap_ns: i64,
    /// Wait after both FINs for the segments of holes still open.
    pub close_grace_ns: i64,
    /// Wait after an RST for the peer's data already in flight.
    pub rst_grace_ns: i64,
    /// Closed 4-tuples remembered to keep stream indexes of their late packets.
    pub closed_memory: usize,
    /// Capture-time silence after which a connection of a file is closed as idle
    /// (None: never). Kafka brokers drop connections idle for 10 minutes
    /// (`connections.max.idle.ms`), and a real capture shows one used again after
    /// exactly 600 s: an hour is well past that.
    pub file_idle_timeout_ns: Option<i64>,
    /// Open connections at most; beyond it the least recently active one closes.
    pub max_connections: usize,
    /// Buffered segments per direction before its first hole is skipped.
    pub max_buffered_segments: usize,
    /// Buffered segments across all connections.
    pub max_total_buffered_segments: usize,
    /// A SYN with a new ISN this soon after the connection's last packet is suspect
    /// (0: never, every such SYN starts a new connection as in the Python stage).
    pub suspect_syn_window_ns: i64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            idle_timeout_ns: None,
            max_buffered_bytes: 4 << 20,
            max_total_buffered_bytes: 256 << 20,
            ack_gap_packets: 16,
            ack_gap_ns: 200_000_000,
            close_grace_ns: 2_000_000_000,
            rst_grace_ns: 1_000_000_000,
            closed_memory: 1 << 16,
            file_idle_timeout_ns: Some(3_600_000_000_000),
            max_connections: 1 << 18,
            max_buffered_segments: 1 << 16,
            max_total_buffered_segments: 1 << 20,
            suspect_syn_window_ns: 100_000_000,
        }
    }
}

/// (src, sport, dst, dport) of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirKey(IpAddr, u16, IpAddr, u16);

impl DirKey {
    /// The connection's key, and whether this direction goes from its `lo` endpoint.
    fn conn(&self) -> (ConnKey, bool) {
        let (src, dst) = ((self.0, self.1), (self.2, self.3));
        if src <= dst {
            (ConnKey { lo: src, hi: dst }, true)
        } else {
            (ConnKey { lo: dst, hi: src }, false)
        }
    }
}

/// A connection's 4-tuple with its endpoints in a fixed order, so that both directions
/// find it with one lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConnKey {
    lo: Endpoint,
    hi: Endpoint,
}

impl Hash for ConnKey {
    /// One write of the packed key: SipHash (which keeps hostile 4-tuples from
    /// colliding) costs per call, and this runs for every packet.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut buf = [0u8; 38];
        let mut n = 0;
        for (addr, port) in [self.lo, self.hi] {
            let (tag, len) = match addr {
                IpAddr::V4(a) => {
                    buf[n + 1..n + 5].copy_from_slice(&a.octets());
                    (4, 4)
                }
                IpAddr::V6(a) => {
                    buf[n + 1..n + 17].copy_from_slice(&a.octets());
                    (6, 16)
                }
            };
            buf[n] = tag;
            n += 1 + len;
            buf[n..n + 2].copy_from_slice(&port.to_le_bytes());
            n += 2;
        }
        state.write(&buf[..n]);
    }
}

fn reversed(k: &DirKey) -> DirKey {
    DirKey(k.2, k.3, k.0, k.1)
}

/// Signed distance from `b` to `a` in 32-bit sequence space, in [-2^31, 2^31).
#[inline]
fn delta32(a: u32, b: u32) -> i64 {
    a.wrapping_sub(b) as i32 as i64
}

/// The unwrapped sequence number nearest to `reference` with these low 32 bits.
#[inline]
fn unwrap(seq: u32, reference: i64) -> i64 {
    reference.saturating_add(delta32(seq, reference as u32))
}

#[inline]
fn len64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Position of `pos` inside something starting at `origin`, if it fits in memory.
#[inline]
fn offset(pos: i64, origin: i64) -> Option<usize> {
    usize::try_from(pos.checked_sub(origin)?).ok()
}

/// `dq[from..from + other.len()] == other`, without making the deque contiguous.
fn deque_eq(dq: &VecDeque<u8>, from: usize, other: &[u8]) -> bool {
    let (a, b) = dq.as_slices();
    let Some(to) = from.checked_add(other.len()) else {
        return false;
    };
    if to > dq.len() {
        return false;
    }
    if to <= a.len() {
        return a[from..to] == *other;
    }
    if from >= a.len() {
        return b[from - a.len()..to - a.len()] == *other;
    }
    let split = a.len() - from;
    a[from..] == other[..split] && b[..to - a.len()] == other[split..]
}

/// Where a packet's bytes begin in the stream, and that packet: each keeps its own
/// capture time, so frames released after a hole are timed by the packets that carried
/// them, not by the latest packet of the run. A stream position, not an offset in its
/// run, so that coalescing runs never rewrites the marks already held.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: i64,
    ts: Ts,
    frame: u64,
}

/// A buffered out-of-order run of bytes (segments coalesced), the packets that brought
/// them (`marks`, at least one, in byte order) and the bytes missing after them (snaplen).
#[derive(Debug)]
struct Seg {
    data: VecDeque<u8>,
    missing: u64,
    marks: VecDeque<Mark>,
}

impl Seg {
    fn len(&self) -> i64 {
        len64(self.data.len())
    }

    /// Append `right` (which starts where `self` ends), copying the smaller side of the
    /// bytes and of the marks: a run grown one segment at a time, from either end, costs
    /// linear time.
    fn absorb(&mut self, mut right: Seg) {
        if self.data.len() >= right.data.len() {
            self.data.append(&mut right.data);
        } else {
            let mut data = right.data;
            data.reserve(self.data.len());
            for &b in self.data.iter().rev() {
                data.push_front(b);
            }
            self.data = data;
        }
        self.missing = right.missing;
        if self.marks.len() >= right.marks.len() {
            self.marks.append(&mut right.marks);
        } else {
            let mut marks = right.marks;
            for &m in self.marks.iter().rev() {
                marks.push_front(m);
            }
            self.marks = marks;
        }
    }
}

/// Buffered totals and the directions ordered by buffered bytes, for the global bound.
#[derive(Debug, Default)]
struct BufIndex {
    total: u64,
    total_segs: u64,
    /// (bytes, creation order reversed, slot, side) of every direction holding segments:
    /// the last is the biggest backlog, the oldest direction on ties (as Python's max).
    by_size: BTreeSet<(u64, Reverse<u64>, usize, usize)>,
}

impl BufIndex {
    /// `segs` counts the packets' marks of a direction's runs (at least one per run):
    /// what a hostile stream of tiny segments costs.
    fn update(&mut self, d: &Dir, old_bytes: u64, old_segs: usize) {
        let segs = d.nmarks;
        self.total = self
            .total
            .saturating_sub(old_bytes)
            .saturating_add(d.buffered);
        self.total_segs = self
            .total_segs
            .saturating_sub(old_segs as u64)
            .saturating_add(segs as u64);
        if old_bytes == d.buffered && (old_segs == 0) == (segs == 0) {
            return;
        }
        if old_segs > 0 {
            self.by_size
                .remove(&(old_bytes, Reverse(d.order), d.slot, d.side));
        }
        if segs > 0 {
            self.by_size
                .insert((d.buffered, Reverse(d.order), d.slot, d.side));
        }
    }
}

/// What a direction's operations need besides the direction.
struct Ctx<'a> {
    cfg: &'a TcpConfig,
    counters: &'a mut Counters,
    out: &'a mut Vec<Event>,
    buf: &'a mut BufIndex,
}

/// One direction of a connection: the sender's byte stream.
#[derive(Debug)]
struct Dir {
    key: DirKey,
    stream: u32,
    order: u64, // creation order, for ties of the global bound
    slot: usize,
    side: usize,
    next: Option<i64>, // unwrapped sequence number of the next byte
    base: Option<u32>, // first 32-bit seq seen (the ISN if SYN seen)
    syn: bool,
    fin: Option<i64>, // unwrapped seq where the FIN sits
    segs: BTreeMap<i64, Seg>,
    buffered: u64,
    nmarks: usize,   // marks of all `segs`: the buffered packets (pieces)
    resync: bool,    // the next chunk does not continue the previous one
    lost: u64,       // bytes skipped before the next chunk
    lost_lost: bool, // some of `lost` went with packets never seen (not snaplen)
    last_seq: i64,   // last delivered segment, to check retransmitted copies
    last_data: Vec<u8>,
    // Peer packets acknowledging past our next byte (the capture lost bytes the
    // receiver got): how many since `next` was `ack_hole`, since when, how far.
    ack_count: u64,
    ack_hole: Option<i64>,
    ack_since: Ts,
    ack_max: i64,
    ack_top: i64, // the highest byte ever acknowledged past the next expected one
}

impl Dir {
    fn new(key: DirKey, stream: u32, slot: usize, side: usize) -> Dir {
        Dir {
            key,
            stream,
            order: u64::from(stream) * 2 + side as u64,
            slot,
            side,
            next: None,
            base: None,
            syn: false,
            fin: None,
            segs: BTreeMap::new(),
            buffered: 0,
            nmarks: 0,
            resync: false,
            lost: 0,
            lost_lost: false,
            last_seq: 0,
            last_data: Vec::new(),
            ack_count: 0,
            ack_hole: None,
            ack_since: 0,
            ack_max: 0,
            ack_top: i64::MIN,
        }
    }

    fn src(&self) -> Endpoint {
        (self.key.0, self.key.1)
    }

    fn dst(&self) -> Endpoint {
        (self.key.2, self.key.3)
    }

    fn first_key(&self) -> Option<i64> {
        self.segs.keys().next().copied()
    }

    fn nxt(&self) -> i64 {
        self.next.unwrap_or(0)
    }

    fn set_last(&mut self, seq: i64, data: &[u8]) {
        self.last_seq = seq;
        self.last_data.clear();
        self.last_data.extend_from_slice(data);
    }

    fn emit(&mut self, data: Vec<u8>, ts: Ts, frame: u64, ctx: &mut Ctx) {
        ctx.out.push(Event::Chunk(Chunk {
            stream: self.stream,
            src: self.src(),
            dst: self.dst(),
            data,
            ts_ns: ts,
            frame,
            resync: self.resync,
            lost: self.lost,
            snapped: self.lost > 0 && !self.lost_lost,
        }));
        self.resync = false;
        self.lost = 0;
        self.lost_lost = false;
    }

    /// Skip to `target`: the bytes before it were cut by the snap length (`snapped`)
    /// or went with packets the capture never saw.
    fn skip_to(&mut self, target: i64, snapped: bool, ctx: &mut Ctx) {
        let nxt = self.nxt();
        if target > nxt {
            let gap = (target - nxt) as u64;
            ctx.counters.inc(Counter::TcpGaps);
            ctx.counters.add(Counter::TcpGapBytes, gap);
            self.lost = self.lost.saturating_add(gap);
            self.lost_lost |= !snapped;
            self.resync = true;
            self.next = Some(target);
        }
    }

    /// Bytes up to `target` are known to be missing (cut by the snap length from the
    /// packet `ts`/`frame`): skip them, and say so at once with an empty chunk of that
    /// packet, so that framing can end a frame cut there without waiting for more bytes.
    fn lose_after(&mut self, target: i64, ts: Ts, frame: u64, ctx: &mut Ctx) {
        let target = match self.first_key() {
            Some(first) if first < target => first,
            _ => target,
        };
        if target > self.nxt() {
            self.skip_to(target, true, ctx);
            self.emit(Vec::new(), ts, frame, ctx);
        }
    }

    /// Release buffered segments that now continue the stream, after `lead` (bytes just
    /// delivered by the packet `ts`/`frame`). Every packet's bytes go out as a chunk of
    /// their own, with its time: framing times a frame by the packets that carried it.
    fn drain(&mut self, lead: Option<(&[u8], Ts, u64)>, ctx: &mut Ctx) {
        let (old_bytes, old_marks) = (self.buffered, self.nmarks);
        if let Some((data, ts, frame)) = lead {
            if !data.is_empty() {
                self.emit(data.to_vec(), ts, frame, ctx);
            }
        }
        loop {
            let nxt = self.nxt();
            let Some(entry) = self.segs.first_entry() else {
                break;
            };
            if *entry.key() > nxt {
                break;
            }
            let (sseq, seg) = entry.remove_entry();
            self.buffered = self.buffered.saturating_sub(seg.data.len() as u64);
            self.nmarks = self.nmarks.saturating_sub(seg.marks.len());
            let send = sseq.saturating_add(seg.len());
            if send > nxt {
                let skip = offset(nxt, sseq).unwrap_or(0);
                let data = Vec::from(seg.data);
                self.next = Some(send);
                let at = |m: &Mark| offset(m.seq, sseq).unwrap_or(0);
                for (i, m) in seg.marks.iter().enumerate() {
                    let end = seg.marks.get(i + 1).map_or(data.len(), at);
                    let lo = at(m).max(skip);
                    if end > lo {
                        let piece = &data[lo..end];
                        self.last_seq = sseq.saturating_add(len64(lo));
                        self.last_data.clear();
                        self.last_data.extend_from_slice(piece);
                        self.emit(piece.to_vec(), m.ts, m.frame, ctx);
                    }
                }
            }
            if seg.missing > 0 {
                let last = seg.marks.back().map_or((0, 0), |m| (m.ts, m.frame));
                self.lose_after(
                    send.saturating_add_unsigned(seg.missing),
                    last.0,
                    last.1,
                    ctx,
                );
            }
        }
        ctx.buf.update(self, old_bytes, old_marks);
    }

    /// Give up on the bytes before the first buffered segment and release what follows.
    fn skip_hole(&mut self, ctx: &mut Ctx) {
        let Some(first) = self.first_key() else {
            return;
        };
        self.skip_to(first, false, ctx);
        self.drain(None, ctx);
    }

    /// Insert an out-of-order segment, keeping buffered segments disjoint (first data
    /// wins) and coalescing it with the segments it touches.
    fn buffer(&mut self, start: i64, data: &[u8], missing: u64, ts: Ts, frame: u64, ctx: &mut Ctx) {
        let (old_bytes, old_segs) = (self.buffered, self.nmarks);
        let end = start.saturating_add(len64(data.len()));
        let mut cur = start;
        let mut conflicts = 0u64;
        let differs = |seg: &Seg, seg_start: i64, lo: i64, hi: i64| -> bool {
            if hi <= lo {
                return false;
            }
            match (offset(lo, seg_start), offset(lo, start), offset(hi, start)) {
                (Some(at), Some(a), Some(b)) => !deque_eq(&seg.data, at, &data[a..b]),
                _ => false,
            }
        };
        if let Some((&pseq, prev)) = self.segs.range(..start).next_back() {
            let pend = pseq.saturating_add(prev.len());
            if pend > cur {
                let hi = pend.min(end);
                conflicts += u64::from(differs(prev, pseq, cur, hi));
                cur = hi;
            }
        }
        // Ranges of `data` between buffered segments (overlaps only), then its tail.
        let mut holes: Vec<(i64, i64)> = Vec::new();
        for (&nseq, seg) in self.segs.range(start..end) {
            if cur >= end {
                break;
            }
            if nseq > cur {
                holes.push((cur, nseq));
            }
            let nend = nseq.saturating_add(seg.len());
            conflicts += u64::from(differs(seg, nseq, nseq, nend.min(end)));
            cur = cur.max(nend);
        }
        let tail = (cur < end || (missing > 0 && cur == end)).then_some((cur, end));
        if conflicts > 0 {
            ctx.counters.add(Counter::TcpOverlapConflict, conflicts);
        }
        if holes.is_empty() && tail.is_none() {
            ctx.counters.inc(Counter::TcpRetransmission);
            return;
        }
        let pieces = holes.into_iter().map(|(lo, hi)| (lo, hi, 0));
        for (lo, hi, piece_missing) in pieces.chain(tail.map(|(lo, hi)| (lo, hi, missing))) {
            let (Some(a), Some(b)) = (offset(lo, start), offset(hi, start)) else {
                continue;
            };
            let Some(bytes) = data.get(a..b) else {
                continue;
            };
            self.buffered = self.buffered.saturating_add(bytes.len() as u64);
            self.insert_seg(lo, bytes, piece_missing, ts, frame);
        }
        ctx.buf.update(self, old_bytes, old_segs);
    }

    /// Buffer `bytes` at `key` (a position no buffered byte covers), coalesced with the
    /// segments it touches.
    fn insert_seg(&mut self, key: i64, bytes: &[u8], missing: u64, ts: Ts, frame: u64) {
        let new = |bytes: &[u8], missing| Seg {
            data: VecDeque::from(bytes.to_vec()),
            missing,
            marks: VecDeque::from([Mark {
                seq: key,
                ts,
                frame,
            }]),
        };
        if let Some(existing) = self.segs.get_mut(&key) {
            // Only a bytes-less segment (bytes missing after its position) can share a
            // position. Drained in Python's order, the older one's missing bytes count
            // from this position; a newer bytes-less one adds nothing.
            if bytes.is_empty() || !existing.data.is_empty() {
                return;
            }
            let missing = existing.missing.saturating_sub(bytes.len() as u64);
            let told = existing.marks.back().copied();
            *existing = new(bytes, missing);
            // The bytes still missing after these were told by the older packet: its
            // mark, past the bytes, times their loss.
            if let Some(told) = told.filter(|_| missing > 0) {
                existing.marks.push_back(Mark {
                    seq: key.saturating_add(len64(bytes.len())),
                    ..told
                });
                self.nmarks += 1;
            }
            self.join_next(key);
            return;
        }
        self.nmarks += 1;
        let end = key.saturating_add(len64(bytes.len()));
        if !bytes.is_empty() {
            if let Some((&pkey, prev)) = self.segs.range_mut(..key).next_back() {
                if Self::joins(prev, pkey, key) {
                    prev.absorb(new(bytes, missing));
                    self.join_next(pkey);
                    return;
                }
            }
            if missing == 0 && self.segs.get(&end).is_some_and(|s| !s.data.is_empty()) {
                if let Some(next) = self.segs.remove(&end) {
                    let mut seg = new(bytes, 0);
                    seg.absorb(next);
                    self.segs.insert(key, seg);
                    return;
                }
            }
        }
        self.segs.insert(key, new(bytes, missing));
    }

    /// Coalesce the segment at `key` with the one starting where it ends.
    fn join_next(&mut self, key: i64) {
        let Some(cur) = self.segs.get(&key) else {
            return;
        };
        let end = key.saturating_add(cur.len());
        if Self::joins(cur, key, end) && self.segs.get(&end).is_some_and(|s| !s.data.is_empty()) {
            if let Some(next) = self.segs.remove(&end) {
                if let Some(cur) = self.segs.get_mut(&key) {
                    cur.absorb(next);
                }
            }
        }
    }

    /// `seg` at `seg_start` ends exactly at `at`, with no bytes known missing after it.
    fn joins(seg: &Seg, seg_start: i64, at: i64) -> bool {
        seg.missing == 0 && !seg.data.is_empty() && seg_start.saturating_add(seg.len()) == at
    }

    fn deliver_in_order(
        &mut self,
        payload: &[u8],
        missing: u64,
        ts: Ts,
        frame: u64,
        ctx: &mut Ctx,
    ) {
        let start = self.nxt();
        let end = start.saturating_add(len64(payload.len()));
        let first = self.first_key();
        if first.is_some_and(|f| f < end) {
            // Overlaps bytes buffered earlier: first data wins, so merge via the buffer.
            self.buffer(start, payload, missing, ts, frame, ctx);
            self.drain(None, ctx);
            return;
        }
        self.next = Some(end);
        if !payload.is_empty() {
            self.set_last(start, payload);
        }
        if missing > 0 {
            if !payload.is_empty() {
                self.emit(payload.to_vec(), ts, frame, ctx);
            }
            self.lose_after(end.saturating_add_unsigned(missing), ts, frame, ctx);
            if !self.segs.is_empty() {
                self.drain(None, ctx);
            }
        } else if first == Some(end) {
            // Fills the hole: this packet's chunk, then the buffered ones.
            self.drain(Some((payload, ts, frame)), ctx);
        } else if !payload.is_empty() {
            self.emit(payload.to_vec(), ts, frame, ctx);
        }
    }

    /// A segment starting before the next expected byte: retransmission or overlap.
    fn old_data(
        &mut self,
        start: i64,
        payload: &[u8],
        missing: u64,
        ts: Ts,
        frame: u64,
        ctx: &mut Ctx,
    ) {
        let nxt = self.nxt();
        let end = start.saturating_add(len64(payload.len()));
        let covered = end.saturating_add_unsigned(missing) <= nxt;
        if covered && payload.len() <= 1 && start == nxt - 1 {
            // Keep-alive: its byte (if any) is filler, often zero, not a conflicting copy.
            ctx.counters.inc(Counter::TcpKeepalive);
            return;
        }
        self.check_delivered(start, payload, ctx);
        if covered {
            ctx.counters.inc(Counter::TcpRetransmission);
            return;
        }
        ctx.counters.inc(Counter::TcpOverlap);
        if end > nxt {
            let fresh = offset(nxt, start)
                .and_then(|at| payload.get(at..))
                .unwrap_or(&[]);
            if self.first_key().is_some_and(|f| f < end) {
                // Later bytes are already buffered: first data wins, so only fill the hole.
                self.buffer(nxt, fresh, missing, ts, frame, ctx);
                self.drain(None, ctx);
                return;
            }
            self.deliver_in_order(fresh, missing, ts, frame, ctx);
        } else {
            self.lose_after(end.saturating_add_unsigned(missing), ts, frame, ctx);
            if !self.segs.is_empty() {
                self.drain(None, ctx);
            }
        }
    }

    /// Count a retransmitted copy that disagrees with the last delivered segment.
    fn check_delivered(&self, start: i64, payload: &[u8], ctx: &mut Ctx) {
        let last = &self.last_data;
        let lo = start.max(self.last_seq);
        let hi = start
            .saturating_add(len64(payload.len()))
            .min(self.last_seq.saturating_add(len64(last.len())))
            .min(self.nxt());
        if hi <= lo {
            return;
        }
        let ours = offset(lo, start)
            .zip(offset(hi, start))
            .and_then(|(a, b)| payload.get(a..b));
        let theirs = offset(lo, self.last_seq)
            .zip(offset(hi, self.last_seq))
            .and_then(|(a, b)| last.get(a..b));
        if let (Some(ours), Some(theirs)) = (ours, theirs) {
            if ours != theirs {
                ctx.counters.inc(Counter::TcpOverlapConflict);
            }
        }
    }

    /// The peer acknowledged bytes of this direction beyond its next expected byte.
    fn ack_evidence(&mut self, ack: u32, now: Ts, ctx: &mut Ctx) {
        let Some(nxt) = self.next else { return };
        let target = unwrap(ack, nxt);
        if self.ack_hole != Some(nxt) {
            self.ack_hole = Some(nxt);
            self.ack_count = 0;
            self.ack_since = now;
            self.ack_max = target;
        }
        self.ack_count = self.ack_count.saturating_add(1);
        self.ack_max = self.ack_max.max(target);
        self.ack_top = self.ack_top.max(target);
        if !self.segs.is_empty() {
            self.skip_acked(now, ctx);
        }
    }

    /// Skip holes the peer acknowledged, once the evidence outlasts reordering:
    /// `ack_gap_packets` peer packets or `ack_gap_ns` of capture time mean the bytes
    /// were lost by the capture, not late.
    fn skip_acked(&mut self, now: Ts, ctx: &mut Ctx) {
        if self.ack_count >= ctx.cfg.ack_gap_packets
            || now.saturating_sub(self.ack_since) >= ctx.cfg.ack_gap_ns
        {
            ctx.counters.inc(Counter::TcpAckedGap);
            let target = self.ack_max;
            while !self.segs.is_empty() && self.nxt() < target {
                self.skip_hole(ctx);
            }
        }
    }

    /// Over a per-direction bound: skip holes until back under it.
    fn relieve(&mut self, ctx: &mut Ctx) {
        let (max_bytes, max_segs) = (ctx.cfg.max_buffered_bytes, ctx.cfg.max_buffered_segments);
        let over = |d: &Dir| d.buffered > max_bytes || d.nmarks > max_segs;
        if !over(self) {
            return;
        }
        ctx.counters.inc(Counter::TcpBufferLimit);
        while over(self) && !self.segs.is_empty() {
            self.skip_hole(ctx);
        }
    }

    /// Closing: every hole becomes a gap, and so do the last bytes never seen: before
    /// the FIN, or (no FIN seen) acknowledged by the peer. Those go out as an empty chunk
    /// with `lost` at `now` (the connection's last packet): framing learns that its last
    /// frames may be in the hole, and correlation that the responses still awaited may
    /// be there.
    fn finish(&mut self, now: Ts, ctx: &mut Ctx) {
        while !self.segs.is_empty() {
            self.skip_hole(ctx);
        }
        let Some(nxt) = self.next else { return };
        let acked = self.ack_top.max(nxt);
        // The FIN takes a sequence number the peer acknowledges: not a byte.
        let end = self.fin.unwrap_or(acked);
        if end > nxt {
            self.skip_to(end, false, ctx);
            self.emit(Vec::new(), now, 0, ctx);
        }
    }

    fn complete(&self) -> bool {
        self.segs.is_empty()
            && self
                .fin
                .is_none_or(|fin| self.next.is_some_and(|n| n >= fin))
    }
}

/// A SYN with a new ISN on a live connection, waiting for the traffic to tell whether
/// the 4-tuple was reused or the SYN is a stray.
#[derive(Debug)]
struct PendingSyn {
    side: usize,
    isn: u32,
    ack: u32,
    flags: u8,
    ts: Ts,
    frame: u64,
    payload: Vec<u8>,
    missing: u32,
}

#[derive(Debug)]
struct Conn {
    stream: u32,
    dirs: [Dir; 2], // [0] is the direction of the packet that opened it
    last_ts: Ts,    // the idle clock at its latest packet
    seen_ts: Ts,    // capture time of its latest packet
    rst: bool,
    rst_from: usize,
    rst_seq: i64,
    rst_ts: Ts,
    closing_since: Option<Ts>,
    closing_ticket: u64,
    pending_syn: Option<Box<PendingSyn>>,
    lru_prev: usize, // towards the most recently active
    lru_next: usize,
}

impl Conn {
    fn pair(&mut self, side: usize) -> (&mut Dir, &mut Dir) {
        let [a, b] = &mut self.dirs;
        if side == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    fn wants_close(&self) -> bool {
        self.rst || (self.dirs[0].fin.is_some() && self.dirs[1].fin.is_some())
    }

    fn close_reason(&self) -> CloseReason {
        if self.rst {
            CloseReason::Rst
        } else {
            CloseReason::Fin
        }
    }

    fn close_due(&self, now: Ts, cfg: &TcpConfig) -> bool {
        let complete = self.dirs[0].complete() && self.dirs[1].complete();
        if complete && !self.rst {
            return true;
        }
        let waited = now.saturating_sub(self.closing_since.unwrap_or(now));
        waited
            > if complete {
                cfg.rst_grace_ns
            } else {
                cfg.close_grace_ns
            }
    }

    /// One packet's effect on the connection (`_segment` of the Python stage).
    fn segment(&mut self, side: usize, pkt: &Packet<'_>, ctx: &mut Ctx) {
        let flags = pkt.flags;
        let now = pkt.ts_ns;
        let mut seq = pkt.seq;
        self.seen_ts = now;
        let (d, peer) = self.pair(side);
        if flags & SYN != 0 {
            if !d.syn {
                d.syn = true;
                if d.next.is_none() {
                    d.base = Some(seq);
                    d.next = Some(i64::from(seq) + 1);
                }
            }
            seq = seq.wrapping_add(1);
        } else if d.next.is_none() {
            d.base = Some(seq);
            d.next = Some(i64::from(seq));
            d.resync = true; // mid-connection: what came before is unknown
        }
        let Some(nxt) = d.next else { return };
        if flags & ACK != 0 {
            // Acknowledging more than the capture holds happens only when it lost bytes
            // (or reordered them).
            if let Some(pnext) = peer.next {
                if delta32(pkt.ack, pnext as u32) > 0 {
                    peer.ack_evidence(pkt.ack, now, ctx);
                }
            }
        }
        if flags & RST != 0 {
            let at = unwrap(seq, nxt);
            if at.saturating_sub(nxt).saturating_abs() > RST_WINDOW {
                ctx.counters.inc(Counter::TcpRstIgnored);
            } else {
                self.rst = true;
                self.rst_from = side;
                self.rst_seq = at;
                self.rst_ts = now;
            }
            return; // data on an RST is diagnostic text, not stream bytes
        }
        let payload = pkt.payload;
        let missing = u64::from(pkt.missing);
        let start = unwrap(seq, nxt);
        if !payload.is_empty() || missing > 0 {
            if start == nxt && missing == 0 && d.segs.is_empty() {
                // The common case.
                d.next = Some(nxt.saturating_add(len64(payload.len())));
                d.set_last(nxt, payload);
                d.emit(payload.to_vec(), now, pkt.frame, ctx);
            } else if start == nxt {
                d.deliver_in_order(payload, missing, now, pkt.frame, ctx);
            } else if start < nxt {
                d.old_data(start, payload, missing, now, pkt.frame, ctx);
            } else if start - nxt > MAX_AHEAD {
                ctx.counters.inc(Counter::TcpOutOfWindow);
                return;
            } else {
                d.buffer(start, payload, missing, now, pkt.frame, ctx);
                ctx.counters.inc(Counter::TcpOutOfOrder);
                if d.ack_count > 0 && d.ack_hole == Some(nxt) {
                    d.skip_acked(now, ctx);
                }
                d.relieve(ctx);
            }
            if flags & FIN != 0 && d.fin.is_none() {
                d.fin = Some(
                    start
                        .saturating_add(len64(payload.len()))
                        .saturating_add_unsigned(missing),
                );
            }
        } else if flags & FIN != 0 && d.fin.is_none() {
            d.fin = Some(start);
        }
    }

    /// Does this packet show the connection outlived its RST? Its sender carrying on
    /// past the RST, or the peer sending new bytes after the RST grace.
    fn refutes_rst(&self, side: usize, pkt: &Packet<'_>, cfg: &TcpConfig) -> bool {
        if pkt.flags & RST != 0 || pkt.payload.is_empty() {
            return false;
        }
        let d = &self.dirs[side];
        let seq = if pkt.flags & SYN != 0 {
            pkt.seq.wrapping_add(1)
        } else {
            pkt.seq
        };
        let late = pkt.ts_ns.saturating_sub(self.rst_ts) > cfg.rst_grace_ns;
        let Some(nxt) = d.next else { return late };
        let start = unwrap(seq, nxt);
        // New bytes that continue the stream (allowing for a few lost segments): a
        // stray segment of some other connection lands anywhere in sequence space.
        let new_bytes = start.saturating_add(len64(pkt.payload.len())) > nxt
            && start.saturating_sub(nxt) <= REFUTE_AHEAD;
        if side == self.rst_from {
            new_bytes && start >= self.rst_seq
        } else {
            new_bytes && late
        }
    }

    /// Does this packet answer the pending SYN's new ISN rather than the old stream?
    fn answers_pending(&self, side: usize, pkt: &Packet<'_>) -> bool {
        let Some(p) = &self.pending_syn else {
            return false;
        };
        let Some(old) = self.dirs[p.side].next else {
            return true;
        };
        let new = p.isn.wrapping_add(1);
        let n = if side == p.side {
            pkt.seq
        } else if pkt.flags & ACK != 0 {
            pkt.ack
        } else {
            return false;
        };
        delta32(n, new).abs() < delta32(n, old as u32).abs()
    }
}

#[derive(Debug, Clone, Copy)]
struct ClosedEntry {
    stream: u32,
    base: [Option<u32>; 2], // first seq of the direction from `lo`, then from `hi`
    generation: u64,
}

/// Per-direction TCP reassembly with tshark-compatible stream indexes.
pub struct Reassembler {
    cfg: TcpConfig,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    open: usize,
    // Open connections: slot, and whether its side 0 goes from the key's `lo` endpoint.
    dirs: HashMap<ConnKey, (usize, bool)>,
    // 4-tuple -> stream and first seq of that direction, of closed connections; the
    // queue gives the eviction order (oldest close first), stale entries skipped.
    closed: HashMap<ConnKey, ClosedEntry>,
    closed_order: VecDeque<(ConnKey, u64)>,
    closed_generation: u64,
    // Connections waiting for their close grace, in the order they started waiting.
    closing: BTreeMap<u64, usize>,
    closing_tickets: u64,
    lru_head: usize,
    lru_tail: usize,
    buf: BufIndex,
    next_stream: u32,
    fed: u64,
    clock: Ts,
    last_stream: Option<u32>,
}

impl Reassembler {
    pub fn new(cfg: TcpConfig) -> Self {
        Reassembler {
            cfg,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            dirs: HashMap::new(),
            closed: HashMap::new(),
            closed_order: VecDeque::new(),
            closed_generation: 0,
            closing: BTreeMap::new(),
            closing_tickets: 0,
            lru_head: NIL,
            lru_tail: NIL,
            buf: BufIndex::default(),
            next_stream: 0,
            fed: 0,
            clock: 0,
            last_stream: None,
        }
    }

    /// Stream index of the last packet fed (tshark's `tcp.stream`), None before any.
    pub fn last_stream(&self) -> Option<u32> {
        self.last_stream
    }

    pub fn open_connections(&self) -> usize {
        self.open
    }

    pub fn buffered_bytes(&self) -> u64 {
        self.buf.total
    }

    pub fn buffered_segments(&self) -> u64 {
        self.buf.total_segs
    }

    /// Push the events this packet releases onto `out`.
    pub fn feed(&mut self, pkt: &Packet<'_>, counters: &mut Counters, out: &mut Vec<Event>) {
        self.fed += 1;
        let now = pkt.ts_ns;
        if !self.closing.is_empty() && self.fed.is_multiple_of(SWEEP_EVERY) {
            self.sweep(now, counters, out);
        }
        self.advance_clock(now);
        self.expire_idle(counters, out);
        let key = pkt_key(pkt);
        let (conn_key, from_lo) = key.conn();
        let mut loc = self
            .dirs
            .get(&conn_key)
            .map(|&(slot, lo0)| (slot, usize::from(from_lo != lo0)));
        if let Some((slot, side)) = loc {
            self.check_rst(slot, side, pkt, counters);
            let due = self
                .conn(slot)
                .is_some_and(|c| c.closing_since.is_some() && c.close_due(now, &self.cfg));
            if due {
                // Past its grace: this packet comes after the close.
                let reason = self.conn(slot).map_or(CloseReason::Fin, Conn::close_reason);
                self.close(slot, reason, counters, out);
                loc = None;
            }
        }
        let (slot, side) = match loc {
            None => match self.lookup_closed(key, conn_key, from_lo, pkt, counters, out) {
                Some(found) => {
                    self.open_event(found, pkt, out);
                    found
                }
                None => return,
            },
            Some(found) => match self.check_syn(found, pkt, counters, out) {
                Some(found) => found,
                None => return,
            },
        };
        self.touch(slot);
        let closing = {
            let Reassembler {
                cfg, conns, buf, ..
            } = self;
            let Some(conn) = conns.get_mut(slot).and_then(Option::as_mut) else {
                return;
            };
            let mut ctx = Ctx {
                cfg,
                counters: &mut *counters,
                out: &mut *out,
                buf,
            };
            conn.segment(side, pkt, &mut ctx);
            self.last_stream = Some(conn.stream);
            conn.closing_since.is_some() || (pkt.flags & (FIN | RST) != 0 && conn.wants_close())
        };
        if closing {
            self.try_close(slot, now, counters, out);
        }
        if self.buf.total > self.cfg.max_total_buffered_bytes
            || self.buf.total_segs > self.cfg.max_total_buffered_segments as u64
        {
            self.relieve_global(counters, out);
        }
    }

    /// End of capture: release every connection's data (holes become gaps).
    ///
    /// A connection already closing (FIN both ways or RST, waiting for late segments)
    /// keeps that reason; the others close with `end_of_capture`.
    pub fn flush(&mut self, counters: &mut Counters, out: &mut Vec<Event>) {
        let mut open: Vec<(u32, usize)> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| c.as_ref().map(|c| (c.stream, slot)))
            .collect();
        open.sort_unstable();
        for (_, slot) in open {
            let reason = match self.conn(slot) {
                Some(c) if c.wants_close() => c.close_reason(),
                Some(_) => CloseReason::EndOfCapture,
                None => continue,
            };
            self.close(slot, reason, counters, out);
        }
    }

    // ------------------------------------------------------------ connections

    fn conn(&self, slot: usize) -> Option<&Conn> {
        self.conns.get(slot).and_then(Option::as_ref)
    }

    fn conn_mut(&mut self, slot: usize) -> Option<&mut Conn> {
        self.conns.get_mut(slot).and_then(Option::as_mut)
    }

    fn new_conn(&mut self, key: DirKey, counters: &mut Counters, out: &mut Vec<Event>) -> usize {
        while self.open >= self.cfg.max_connections && self.lru_tail != NIL {
            counters.inc(Counter::TcpConnectionLimit);
            self.close(self.lru_tail, CloseReason::Idle, counters, out);
        }
        let stream = self.next_stream;
        self.next_stream = self.next_stream.saturating_add(1);
        counters.inc(Counter::TcpStreams);
        let slot = self.free.pop().unwrap_or(self.conns.len());
        let conn = Conn {
            stream,
            dirs: [
                Dir::new(key, stream, slot, 0),
                Dir::new(reversed(&key), stream, slot, 1),
            ],
            last_ts: 0,
            seen_ts: 0,
            rst: false,
            rst_from: 0,
            rst_seq: 0,
            rst_ts: 0,
            closing_since: None,
            closing_ticket: 0,
            pending_syn: None,
            lru_prev: NIL,
            lru_next: NIL,
        };
        if slot == self.conns.len() {
            self.conns.push(Some(conn));
        } else {
            self.conns[slot] = Some(conn);
        }
        self.open += 1;
        let (conn_key, from_lo) = key.conn();
        self.dirs.insert(conn_key, (slot, from_lo));
        self.lru_push_front(slot);
        slot
    }

    /// A packet of an unknown 4-tuple: new connection, or late packet of a closed one.
    fn lookup_closed(
        &mut self,
        key: DirKey,
        conn_key: ConnKey,
        from_lo: bool,
        pkt: &Packet<'_>,
        counters: &mut Counters,
        out: &mut Vec<Event>,
    ) -> Option<(usize, usize)> {
        if let Some(closed) = self.closed.get(&conn_key) {
            let base = closed.base[usize::from(!from_lo)];
            let new_syn = pkt.flags & SYN != 0 && pkt.flags & ACK == 0 && Some(pkt.seq) != base;
            if !new_syn {
                self.last_stream = Some(closed.stream);
                if !pkt.payload.is_empty() {
                    counters.inc(Counter::TcpAfterClose);
                    counters.add(Counter::TcpAfterCloseBytes, pkt.payload.len() as u64);
                }
                return None;
            }
            counters.inc(Counter::TcpPortReuse);
            self.closed.remove(&conn_key);
        }
        Some((self.new_conn(key, counters, out), 0))
    }

    fn open_event(&self, (slot, side): (usize, usize), pkt: &Packet<'_>, out: &mut Vec<Event>) {
        let Some(conn) = self.conn(slot) else { return };
        let d = &conn.dirs[side];
        let syn = pkt.flags & SYN != 0;
        let (initiator, responder) = if syn && pkt.flags & ACK != 0 {
            (d.dst(), d.src())
        } else {
            (d.src(), d.dst())
        };
        out.push(Event::Open(StreamOpen {
            stream: conn.stream,
            initiator,
            responder,
            syn_seen: syn,
        }));
    }

    /// A packet of an open connection: settle a pending suspect SYN, or take a new SYN.
    /// Returns where the packet goes on, None when it stops here.
    fn check_syn(
        &mut self,
        (slot, side): (usize, usize),
        pkt: &Packet<'_>,
        counters: &mut Counters,
        out: &mut Vec<Event>,
    ) -> Option<(usize, usize)> {
        let flags = pkt.flags;
        let bare_syn = flags & SYN != 0 && flags & ACK == 0;
        let conn = self.conn(slot)?;
        let base = conn.dirs[side].base;
        if let Some(pending_side) = conn.pending_syn.as_ref().map(|p| p.side) {
            if side == pending_side && bare_syn && Some(pkt.seq) != base {
                // The SYN again, or yet another ISN: still undecided, the latest counts.
                self.hold_syn(slot, side, pkt);
                return None;
            }
            if conn.answers_pending(side, pkt) {
                return Some(self.confirm_reuse(slot, side, counters, out));
            }
            counters.inc(Counter::TcpSuspectSyn);
            self.conn_mut(slot)?.pending_syn = None;
        }
        let conn = self.conn(slot)?;
        if !bare_syn || base.is_none() || Some(pkt.seq) == base {
            return Some((slot, side));
        }
        let window = self.cfg.suspect_syn_window_ns;
        let quiet = window <= 0 || self.clock.saturating_sub(conn.last_ts) >= window;
        if conn.closing_since.is_some() || quiet {
            counters.inc(Counter::TcpPortReuse);
            let reason = if conn.rst {
                CloseReason::Rst
            } else {
                CloseReason::Reused
            };
            self.close(slot, reason, counters, out);
            let fresh = (self.new_conn(pkt_key(pkt), counters, out), 0);
            self.open_event(fresh, pkt, out);
            return Some(fresh);
        }
        self.hold_syn(slot, side, pkt);
        None
    }

    fn hold_syn(&mut self, slot: usize, side: usize, pkt: &Packet<'_>) {
        let Some(conn) = self.conn_mut(slot) else {
            return;
        };
        let stream = conn.stream;
        conn.pending_syn = Some(Box::new(PendingSyn {
            side,
            isn: pkt.seq,
            ack: pkt.ack,
            flags: pkt.flags,
            ts: pkt.ts_ns,
            frame: pkt.frame,
            payload: pkt.payload.to_vec(),
            missing: pkt.missing,
        }));
        self.last_stream = Some(stream);
        self.touch(slot);
    }

    /// The traffic after a pending SYN answered its new ISN: the 4-tuple was reused.
    /// Close the old connection, open the new one with that SYN, and return where the
    /// packet at hand (from `side` of the old connection) goes.
    fn confirm_reuse(
        &mut self,
        slot: usize,
        side: usize,
        counters: &mut Counters,
        out: &mut Vec<Event>,
    ) -> (usize, usize) {
        let Some(conn) = self.conn_mut(slot) else {
            return (slot, side);
        };
        let Some(p) = conn.pending_syn.take() else {
            return (slot, side);
        };
        let key = conn.dirs[p.side].key;
        let reason = if conn.rst {
            CloseReason::Rst
        } else {
            CloseReason::Reused
        };
        counters.inc(Counter::TcpPortReuse);
        self.close(slot, reason, counters, out);
        let fresh = self.new_conn(key, counters, out);
        let syn = Packet {
            frame: p.frame,
            ts_ns: p.ts,
            src: key.0,
            dst: key.2,
            sport: key.1,
            dport: key.3,
            seq: p.isn,
            ack: p.ack,
            flags: p.flags,
            payload: &p.payload,
            missing: p.missing,
        };
        self.open_event((fresh, 0), &syn, out);
        self.touch(fresh);
        let Reassembler {
            cfg, conns, buf, ..
        } = self;
        if let Some(conn) = conns.get_mut(fresh).and_then(Option::as_mut) {
            let mut ctx = Ctx {
                cfg,
                counters: &mut *counters,
                out: &mut *out,
                buf,
            };
            conn.segment(0, &syn, &mut ctx);
        }
        (fresh, usize::from(side != p.side))
    }

    /// Payload on a connection standing reset is counted; a packet proving the RST
    /// did not end the connection takes the RST back.
    fn check_rst(&mut self, slot: usize, side: usize, pkt: &Packet<'_>, counters: &mut Counters) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if !conn.rst || pkt.payload.is_empty() {
            return;
        }
        counters.inc(Counter::TcpDataAfterRst);
        if !conn.refutes_rst(side, pkt, &self.cfg) {
            return;
        }
        counters.inc(Counter::TcpSuspectRst);
        conn.rst = false;
        if conn.closing_since.is_some() && !conn.wants_close() {
            conn.closing_since = None;
            self.closing.remove(&conn.closing_ticket);
        }
    }

    fn try_close(&mut self, slot: usize, now: Ts, counters: &mut Counters, out: &mut Vec<Event>) {
        let ticket = self.closing_tickets;
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if !conn.wants_close() {
            return;
        }
        if conn.closing_since.is_none() {
            conn.closing_since = Some(now);
            conn.closing_ticket = ticket;
            self.closing.insert(ticket, slot);
            self.closing_tickets += 1;
        }
        if conn.close_due(now, &self.cfg) {
            let reason = conn.close_reason();
            self.close(slot, reason, counters, out);
        }
    }

    /// Close connections whose grace has passed, in the order they started waiting.
    /// Capture time runs forward, so the scan stops at the first one that cannot be
    /// due by time yet.
    fn sweep(&mut self, now: Ts, counters: &mut Counters, out: &mut Vec<Event>) {
        let shortest = self.cfg.close_grace_ns.min(self.cfg.rst_grace_ns);
        let mut due = Vec::new();
        for &slot in self.closing.values() {
            let Some(conn) = self.conn(slot) else {
                continue;
            };
            if conn.close_due(now, &self.cfg) {
                due.push((slot, conn.close_reason()));
            } else if now.saturating_sub(conn.closing_since.unwrap_or(now)) <= shortest {
                break;
            }
        }
        for (slot, reason) in due {
            self.close(slot, reason, counters, out);
        }
    }

    /// Close the least recently active connections while they have been silent too
    /// long: each check either closes one or stops, so this is O(1) amortised.
    fn expire_idle(&mut self, counters: &mut Counters, out: &mut Vec<Event>) {
        let Some(idle) = self.idle_timeout() else {
            return;
        };
        while let Some(conn) = self.conn(self.lru_tail) {
            if self.clock.saturating_sub(conn.last_ts) <= idle {
                break;
            }
            counters.inc(Counter::TcpIdleClose);
            self.close(self.lru_tail, CloseReason::Idle, counters, out);
        }
    }

    fn close(
        &mut self,
        slot: usize,
        reason: CloseReason,
        counters: &mut Counters,
        out: &mut Vec<Event>,
    ) {
        self.lru_unlink(slot);
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        {
            let mut ctx = Ctx {
                cfg: &self.cfg,
                counters: &mut *counters,
                out: &mut *out,
                buf: &mut self.buf,
            };
            for d in conn.dirs.iter_mut() {
                d.finish(conn.seen_ts, &mut ctx);
            }
        }
        if conn.pending_syn.is_some() {
            counters.inc(Counter::TcpSuspectSyn); // never answered
        }
        out.push(Event::Close(StreamClose {
            stream: conn.stream,
            reason,
        }));
        if conn.closing_since.is_some() {
            self.closing.remove(&conn.closing_ticket);
        }
        let (conn_key, from_lo) = conn.dirs[0].key.conn();
        if let Entry::Occupied(e) = self.dirs.entry(conn_key) {
            if e.get().0 == slot {
                e.remove();
            }
        }
        let mut base = [conn.dirs[0].base, conn.dirs[1].base];
        if !from_lo {
            base.swap(0, 1);
        }
        self.remember_closed(conn_key, conn.stream, base);
        self.free.push(slot);
        self.open -= 1;
    }

    /// Remember a closed connection; `closed_memory` counts directions, like the Python
    /// stage's table of 4-tuples, so it holds half as many connections.
    fn remember_closed(&mut self, key: ConnKey, stream: u32, base: [Option<u32>; 2]) {
        self.closed_generation += 1;
        let generation = self.closed_generation;
        self.closed.insert(
            key,
            ClosedEntry {
                stream,
                base,
                generation,
            },
        );
        self.closed_order.push_back((key, generation));
        while self.closed.len() > self.cfg.closed_memory / 2 {
            let Some((old, g)) = self.closed_order.pop_front() else {
                break;
            };
            if let Entry::Occupied(e) = self.closed.entry(old) {
                if e.get().generation == g {
                    e.remove();
                }
            }
        }
        // Re-closed and reused 4-tuples leave stale queue entries: drop them now and
        // then, so the queue stays within a constant factor of the table.
        if self.closed_order.len() > 2 * self.closed.len() + 64 {
            let closed = &self.closed;
            self.closed_order
                .retain(|(k, g)| closed.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    /// Over a global bound: skip the holes of the direction holding most bytes.
    fn relieve_global(&mut self, counters: &mut Counters, out: &mut Vec<Event>) {
        counters.inc(Counter::TcpGlobalBufferLimit);
        let Reassembler {
            cfg, conns, buf, ..
        } = self;
        while buf.total > cfg.max_total_buffered_bytes
            || buf.total_segs > cfg.max_total_buffered_segments as u64
        {
            let Some(&(_, _, slot, side)) = buf.by_size.last() else {
                break;
            };
            let Some(d) = conns
                .get_mut(slot)
                .and_then(Option::as_mut)
                .map(|c| &mut c.dirs[side])
            else {
                break;
            };
            let mut ctx = Ctx {
                cfg,
                counters: &mut *counters,
                out: &mut *out,
                buf: &mut *buf,
            };
            while !d.segs.is_empty() {
                d.skip_hole(&mut ctx);
            }
            if !d.segs.is_empty() {
                break;
            }
        }
    }

    // ------------------------------------------------------------ recency list

    /// Capture time for idleness: it never runs backwards, and one packet moves it
    /// forward by at most half the idle timeout, so a single bogus time stamp far in the
    /// future cannot expire every connection.
    fn advance_clock(&mut self, now: Ts) {
        if self.fed == 1 {
            self.clock = now;
        } else if now > self.clock {
            let step = self
                .idle_timeout()
                .map_or(i64::MAX, |idle| (idle / 2).max(1));
            self.clock = now.min(self.clock.saturating_add(step));
        }
    }

    fn idle_timeout(&self) -> Option<i64> {
        self.cfg.idle_timeout_ns.or(self.cfg.file_idle_timeout_ns)
    }

    /// The connection in `slot` just had a packet.
    fn touch(&mut self, slot: usize) {
        let clock = self.clock;
        if let Some(conn) = self.conn_mut(slot) {
            conn.last_ts = clock;
        }
        if self.lru_head != slot {
            self.lru_unlink(slot);
            self.lru_push_front(slot);
        }
    }

    fn lru_push_front(&mut self, slot: usize) {
        let head = self.lru_head;
        if let Some(conn) = self.conn_mut(slot) {
            conn.lru_prev = NIL;
            conn.lru_next = head;
        } else {
            return;
        }
        if let Some(old) = self.conn_mut(head) {
            old.lru_prev = slot;
        }
        self.lru_head = slot;
        if self.lru_tail == NIL {
            self.lru_tail = slot;
        }
    }

    fn lru_unlink(&mut self, slot: usize) {
        let Some(conn) = self.conn_mut(slot) else {
            return;
        };
        let (prev, next) = (conn.lru_prev, conn.lru_next);
        conn.lru_prev = NIL;
        conn.lru_next = NIL;
        if self.lru_head != slot && prev == NIL {
            return; // not linked
        }
        match self.conn_mut(prev) {
            Some(p) => p.lru_next = next,
            None => self.lru_head = next,
        }
        match self.conn_mut(next) {
            Some(n) => n.lru_prev = prev,
            None => self.lru_tail = prev,
        }
    }
}

fn pkt_key(pkt: &Packet<'_>) -> DirKey {
    DirKey(pkt.src, pkt.sport, pkt.dst, pkt.dport)
}
