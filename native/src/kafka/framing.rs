//! Stage 3: in-order chunks of one direction -> size-prefixed Kafka frames.
//! Its Python twin, the test oracle, is `tests/oracle/framing.py` (resync, TLS detection).
//!
//! Every Kafka message is a big-endian int32 size and that many bytes. Losing sync is
//! the hard part: after a TCP gap, or when the capture starts mid-connection, the next
//! bytes are usually not a size prefix. Frame starts are then tried only at chunk
//! starts (clients and brokers write each message with its own send call) and accepted
//! only when plausible for the sender's role (`header::StartCheck`). Everything skipped
//! is counted, with the Python stage's counter names.
//!
//! A hole of known size (`Chunk::lost`) inside a frame whose size prefix was captured
//! does not lose sync: the frame's end, and so the next frame's start, follow by
//! sequence arithmetic (as Wireshark goes on after "previous segment not captured").
//! That frame goes on to correlation as holed (`KafkaFrame::missing`, `end_lost`), to
//! be paired by its header and flagged. Holes that may have swallowed whole frames are
//! reported to correlation (`take_lost`). A frame's last time is the latest-arriving
//! packet among its bytes (chunks released after a hole carry their own times).
//!
//! TLS differs from Python on purpose (issue #11): bytes that look like a TLS record
//! header make the direction only *suspected* TLS. It is concluded when the next record
//! header sits where the first record ends (or at close, or after `TLS_TENTATIVE_MAX`
//! bytes without contradiction); a broken record chain or a whole Kafka frame at a chunk
//! start clears the suspicion (`tls_false_alarm`) and framing resumes. The TLS counters
//! (`tls_connections_directions`, `tls_bytes`) are added when TLS is concluded, so they
//! end up equal to Python's whenever Python was right.

use std::sync::Arc;

use crate::counter::Counter;
use crate::cursor::be_i32;
use crate::kafka::header::{looks_like_tls, StartCheck};
use crate::types::{Chunk, Counters, Endpoint, KafkaFrame, Ts, Versions};

/// Correlation's check of a frame start found after losing sync, given the candidate's
/// bytes after its size prefix (`Framer::feed_checked`): refused (`Some(false)`), or
/// None while the bytes that decide are not all there.
pub type Confirm<'a> = &'a dyn Fn(&[u8]) -> Option<bool>;

/// The broker's socket.request.max.bytes default; a bigger size prefix means we are not
/// looking at a frame boundary (or at Kafka at all).
pub const DEFAULT_MAX_FRAME: u32 = 100 * 1024 * 1024;

/// Bytes enough to judge a resync candidate: size prefix, request header and a client_id
/// of ordinary length, or a response size and the next size prefix.
pub const PROBE_BYTES: usize = 512;

/// A TLS record's length is at most 2^14 plus 2048 bytes of expansion (RFC 5246 6.2.3).
const MAX_TLS_RECORD: u64 = 16384 + 2048;
/// Record headers found back to back, the detected one included, that conclude TLS.
const TLS_CONFIRM_RECORDS: u32 = 2;
/// Suspected-TLS bytes after which TLS is concluded without a verdict (bounds the wait
/// when a gap hid the record boundaries).
pub const TLS_TENTATIVE_MAX: u64 = 64 * 1024;

/// Following the record chain of a direction suspected to carry TLS.
#[derive(Debug, Clone, Default)]
struct TlsProbe {
    bytes: u64,    // bytes taken as TLS so far, counted once concluded
    need: u64,     // bytes left of the current record before the next header
    head: [u8; 5], // a record header split across chunks
    head_len: usize,
    records: u32, // record headers found back to back
    blind: bool,  // a gap since detection: record boundaries unknown
}

enum Walk {
    Undecided,
    Confirmed,
    Broken(usize), // offset in the data where a record header should have been
}

impl TlsProbe {
    fn walk(&mut self, data: &[u8]) -> Walk {
        let mut pos = 0usize;
        while pos < data.len() {
            let left = (data.len() - pos) as u64;
            if self.need > 0 {
                let take = self.need.min(left);
                self.need -= take;
                pos += take as usize;
                continue;
            }
            let header_at = pos;
            while self.head_len < 5 && pos < data.len() {
                self.head[self.head_len] = data[pos];
                self.head_len += 1;
                pos += 1;
            }
            if self.head_len < 5 {
                break;
            }
            self.head_len = 0;
            let len = u64::from(u16::from_be_bytes([self.head[3], self.head[4]]));
            if !looks_like_tls(&self.head) || len > MAX_TLS_RECORD {
                return Walk::Broken(header_at);
            }
            self.records += 1;
            self.need = len;
            if self.records >= TLS_CONFIRM_RECORDS {
                return Walk::Confirmed;
            }
        }
        Walk::Undecided
    }

    /// The next chunk does not start at a record boundary we know of.
    fn inside_record(&self) -> bool {
        self.blind || self.need > 0 || self.head_len > 0
    }
}

/// A frame a capture hole fell into after its size prefix was captured: where it ends,
/// and so where the next frame starts, is known by sequence arithmetic (as Wireshark
/// goes on with the next PDU after "previous segment not captured"), so framing stays
/// in sync and the frame itself still goes on to be paired, marked as holed.
struct Holed {
    prefix: Vec<u8>, // payload bytes before the first hole
    size: u64,       // the payload's size by its prefix
    missing: u64,    // payload bytes not captured so far
    left: u64,       // bytes of the frame still to come
    snapped: bool,   // every missing byte was cut by the snap length
    first_ts: Ts,
    first_frame: u64,
    last_ts: Ts,
    last_frame: u64,
    after_gap: bool,
}

enum Tls {
    No,
    Suspected(TlsProbe),
    Yes,
}

/// Cuts one direction of one connection into size-prefixed frames.
pub struct Framer {
    pub stream: u32,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub max_frame: u32,
    check: StartCheck,
    versions: Arc<dyn Versions + Send + Sync>,
    tls: Tls,
    buf: Vec<u8>,
    holed: Option<Holed>,
    /// Capture times around a hole that may have swallowed whole frames of this
    /// direction (framing lost sync): the packets before and after it, for correlation
    /// to take (`take_lost`).
    lost_at: Option<(Ts, Ts)>,
    /// Capture time of the last chunk fed.
    seen_ts: Ts,
    synced: bool,
    resync_pending: bool,
    after_gap: bool,
    first_ts: Ts,
    first_frame: u64,
    /// The latest-arriving packet (highest frame number) among the bytes of the frame
    /// in `buf`: when the capture had all of them. After a hole the chunks of held
    /// segments come with their own, older, times.
    last_ts: Ts,
    last_frame: u64,
    // A TLS suspicion was cleared while handling the current chunk: look-alikes further
    // in it are not suspected again (each clearing re-probes the rest of the chunk, so
    // one per chunk keeps the work linear).
    cleared_in_chunk: bool,
    /// Bytes fed outside TLS, and whether a frame was ever cut: a direction that never
    /// frames although its bytes were tried and refused is not Kafka (HTTP on a Kafka
    /// port): at close what it counted as framing trouble is taken back (`own`).
    fed: u64,
    framed: bool,
    own: Vec<(Counter, u64)>,
    /// This direction's bytes are TLS plaintext (its frames carry the `tls` flag).
    pub decrypted: bool,
}

/// Counts by which a direction shows that its bytes were tried as frames and refused.
const REJECTIONS: [Counter; 2] = [Counter::BadFrameSize, Counter::ResyncSkippedBytes];

impl Framer {
    pub fn new(
        stream: u32,
        src: Endpoint,
        dst: Endpoint,
        check: StartCheck,
        versions: Arc<dyn Versions + Send + Sync>,
        max_frame: u32,
    ) -> Self {
        Framer {
            stream,
            src,
            dst,
            max_frame,
            check,
            versions,
            tls: Tls::No,
            buf: Vec::new(),
            holed: None,
            lost_at: None,
            seen_ts: 0,
            synced: true,
            resync_pending: false,
            after_gap: false,
            first_ts: 0,
            first_frame: 0,
            last_ts: 0,
            last_frame: 0,
            cleared_in_chunk: false,
            fed: 0,
            framed: false,
            own: Vec::new(),
            decrypted: false,
        }
    }

    /// Add to a shared counter, remembering it as this direction's own before its first frame.
    fn count(&mut self, counters: &mut Counters, counter: Counter, n: u64) {
        counters.add(counter, n);
        if !self.framed {
            match self.own.iter_mut().find(|(k, _)| *k == counter) {
                Some((_, v)) => *v += n,
                None => self.own.push((counter, n)),
            }
        }
    }

    fn recount_as_non_kafka(&mut self, counters: &mut Counters) {
        for (counter, n) in self.own.drain(..) {
            counters.sub(counter, n);
        }
        counters.add(Counter::NonKafkaBytes, self.fed);
        counters.inc(Counter::NonKafkaDirections);
    }

    /// TLS concluded: everything this direction carries from now on is counted, not framed.
    pub fn is_tls(&self) -> bool {
        matches!(self.tls, Tls::Yes)
    }

    /// TLS suspected but not concluded yet.
    pub fn tls_suspected(&self) -> bool {
        matches!(self.tls, Tls::Suspected(_))
    }

    /// Bytes held for a frame not complete yet (bounded by `max_frame` plus one chunk).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Push the frames this chunk completes onto `out` (frame starts found after losing
    /// sync are not checked against the connection: see `feed_checked`).
    pub fn feed(&mut self, chunk: Chunk, counters: &mut Counters, out: &mut Vec<KafkaFrame>) {
        self.feed_checked(chunk, &|_| Some(true), counters, out);
    }

    /// `feed`, where a frame start found after losing sync must also satisfy `confirm`
    /// (given the candidate's bytes after its size prefix): correlation's check that its
    /// correlation id fits the other direction's requests (`Correlator::confirms_start`).
    pub fn feed_checked(
        &mut self,
        chunk: Chunk,
        confirm: Confirm<'_>,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) {
        self.cleared_in_chunk = false;
        match self.tls {
            Tls::Yes => {
                counters.add(Counter::TlsBytes, chunk.data.len() as u64);
                return;
            }
            Tls::Suspected(_) => {
                self.fed += chunk.data.len() as u64;
                return self.feed_suspected(chunk, confirm, counters, out);
            }
            Tls::No => {}
        }
        // Bytes of this direction came before: a break in them is a hole, even one of
        // unknown size (TLS cannot always tell how much plaintext a lost record held),
        // not the start of a direction seen mid-connection (its first frame says so:
        // after_gap).
        let had_bytes = self.fed > 0;
        self.fed += chunk.data.len() as u64;
        let before = std::mem::replace(&mut self.seen_ts, chunk.ts_ns);
        let mut chunk = chunk;
        if chunk.resync && !self.bridge(&chunk, counters, out) {
            self.lose_sync(counters);
            if chunk.lost > 0 || had_bytes {
                self.lost_at = Some((before, chunk.ts_ns));
            }
        }
        if self.holed.is_some() {
            match self.fill_holed(chunk, out) {
                Some(rest) => chunk = rest,
                None => return,
            }
        }
        if self.buf.is_empty() {
            self.start_at(chunk.ts_ns, chunk.frame);
            if self.synced {
                match self.whole_frame(chunk) {
                    Ok(frame) => {
                        out.push(frame);
                        return;
                    }
                    Err(chunk) => return self.append_and_cut(&chunk, confirm, counters, out),
                }
            }
        }
        if !self.synced {
            return self.probe(chunk.data, chunk.ts_ns, chunk.frame, confirm, counters, out);
        }
        self.append_and_cut(&chunk, confirm, counters, out);
    }

    /// A hole may have swallowed whole frames of this direction since the last call:
    /// the capture times of the packets before and after it.
    pub fn take_lost(&mut self) -> Option<(Ts, Ts)> {
        self.lost_at.take()
    }

    /// A hole of `chunk.lost` bytes before `chunk`: bridged when it falls inside a frame
    /// whose size prefix was captured (true), or sync is lost (false). A hole running
    /// past that frame's end ends it too, and loses sync unless it ends exactly there.
    fn bridge(
        &mut self,
        chunk: &Chunk,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) -> bool {
        let lost = chunk.lost;
        if lost == 0 || !self.synced {
            self.end_holed(true, out);
            return false;
        }
        if self.holed.is_none() {
            let Some(size) = be_i32(&self.buf, 0) else {
                return false; // the hole is at (or in) a size prefix: the next one is unknown
            };
            let total = 4 + size.max(0) as u64;
            let prefix = self.buf.split_off(4);
            self.buf.clear();
            self.count(counters, Counter::FramesCutByGap, 1);
            self.holed = Some(Holed {
                left: total - 4 - prefix.len() as u64,
                size: total - 4,
                prefix,
                missing: 0,
                snapped: true,
                first_ts: self.first_ts,
                first_frame: self.first_frame,
                last_ts: self.last_ts,
                last_frame: self.last_frame,
                after_gap: self.after_gap,
            });
            self.after_gap = false;
        }
        let Some(h) = self.holed.as_mut() else {
            return false;
        };
        h.snapped &= chunk.snapped;
        let inside = lost.min(h.left);
        h.missing += inside;
        h.left -= inside;
        if h.left > 0 {
            return true;
        }
        // The hole ran to the frame's end. Cut by the snap length, its last byte was on
        // the packet of this (empty) chunk; lost, its time is unknown.
        if chunk.snapped && chunk.frame > h.last_frame {
            h.last_ts = chunk.ts_ns;
            h.last_frame = chunk.frame;
        }
        let beyond = lost > inside;
        self.end_holed(!chunk.snapped, out);
        !beyond
    }

    /// Feed the holed frame the bytes it still expects; the rest of the chunk (from the
    /// next frame's start) is returned.
    fn fill_holed(&mut self, mut chunk: Chunk, out: &mut Vec<KafkaFrame>) -> Option<Chunk> {
        let h = self.holed.as_mut()?;
        let take = usize::try_from(h.left).map_or(chunk.data.len(), |l| l.min(chunk.data.len()));
        if take > 0 && chunk.frame > h.last_frame {
            h.last_ts = chunk.ts_ns;
            h.last_frame = chunk.frame;
        }
        h.left -= take as u64;
        if h.left == 0 {
            self.end_holed(false, out);
        }
        if take == chunk.data.len() {
            return None;
        }
        chunk.data.drain(..take);
        Some(chunk)
    }

    /// Hand on the holed frame, if any (`end_lost`: its last byte was not captured).
    fn end_holed(&mut self, end_lost: bool, out: &mut Vec<KafkaFrame>) {
        let Some(h) = self.holed.take() else {
            return;
        };
        // Everything not in `payload`: lost, or captured after the first hole.
        let missing = h.size - h.prefix.len() as u64;
        out.push(KafkaFrame {
            stream: self.stream,
            src: self.src,
            dst: self.dst,
            payload: h.prefix,
            first_ts_ns: h.first_ts,
            last_ts_ns: h.last_ts,
            first_frame: h.first_frame,
            last_frame: h.last_frame,
            after_gap: h.after_gap,
            tls: self.decrypted,
            missing,
            snapped: h.snapped,
            end_lost: end_lost || h.left > 0,
        });
        self.framed = true;
    }

    /// End of this direction: a partial frame left over is counted, not lost silently.
    pub fn close(&mut self, counters: &mut Counters) {
        if let Some(h) = self.holed.take() {
            // Its end is beyond the capture: counted like any frame cut off by the end.
            self.count(counters, Counter::TruncatedFrames, 1);
            self.count(
                counters,
                Counter::TruncatedFrameBytes,
                4 + h.prefix.len() as u64,
            );
        }
        if self.tls_suspected() {
            // Nothing contradicted the suspicion: conclude as Python does at once.
            self.conclude_tls(counters);
        }
        if !self.buf.is_empty() && !self.is_tls() {
            let n = self.buf.len() as u64;
            if self.synced {
                self.count(counters, Counter::TruncatedFrames, 1);
                self.count(counters, Counter::TruncatedFrameBytes, n);
            } else {
                self.count(counters, Counter::ResyncSkippedBytes, n);
            }
        }
        self.buf = Vec::new();
        let refused = self
            .own
            .iter()
            .any(|(k, v)| *v > 0 && REJECTIONS.contains(k));
        if !self.framed && !self.is_tls() && refused {
            self.recount_as_non_kafka(counters);
        }
    }

    /// A frame starts in the packet `ts`/`frame_no`.
    fn start_at(&mut self, ts: Ts, frame_no: u64) {
        self.first_ts = ts;
        self.first_frame = frame_no;
        self.last_ts = ts;
        self.last_frame = frame_no;
    }

    /// Bytes of the packet `ts`/`frame_no` joined the frame in `buf`.
    fn saw(&mut self, ts: Ts, frame_no: u64) {
        if frame_no > self.last_frame {
            self.last_ts = ts;
            self.last_frame = frame_no;
        }
    }

    fn append_and_cut(
        &mut self,
        chunk: &Chunk,
        confirm: Confirm<'_>,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) {
        self.buf.extend_from_slice(&chunk.data);
        self.saw(chunk.ts_ns, chunk.frame);
        if let Some(rest) = self.cut(chunk.ts_ns, chunk.frame, counters, out) {
            self.probe(rest, chunk.ts_ns, chunk.frame, confirm, counters, out);
        }
    }

    /// The chunk is exactly one frame (the usual case: one message per send and
    /// segment): its bytes become the payload without going through the buffer.
    fn whole_frame(&mut self, chunk: Chunk) -> Result<KafkaFrame, Chunk> {
        match be_i32(&chunk.data, 0) {
            Some(size)
                if size >= 0
                    && size as u32 <= self.max_frame
                    && size as usize + 4 == chunk.data.len() => {}
            _ => return Err(chunk),
        }
        let mut payload = chunk.data;
        payload.drain(..4);
        let frame = KafkaFrame {
            stream: self.stream,
            src: self.src,
            dst: self.dst,
            payload,
            first_ts_ns: chunk.ts_ns,
            last_ts_ns: chunk.ts_ns,
            first_frame: chunk.frame,
            last_frame: chunk.frame,
            after_gap: self.after_gap,
            tls: self.decrypted,
            missing: 0,
            snapped: false,
            end_lost: false,
        };
        self.after_gap = false;
        self.framed = true;
        Ok(frame)
    }

    fn lose_sync(&mut self, counters: &mut Counters) {
        if !self.buf.is_empty() {
            let n = self.buf.len() as u64;
            if self.synced {
                self.count(counters, Counter::FramesCutByGap, 1);
            }
            self.count(counters, Counter::ResyncSkippedBytes, n);
            self.buf.clear();
        }
        self.synced = false;
        self.resync_pending = true;
    }

    /// Out of sync: `buf` holds a candidate frame that began at a chunk start. The
    /// candidate grows until it can be judged (a header may arrive in several small
    /// segments); when rejected, the newest chunk's start is the next candidate.
    /// A loop, not recursion: a cleared TLS suspicion hands back bytes to probe again.
    fn probe(
        &mut self,
        mut data: Vec<u8>,
        ts: Ts,
        frame_no: u64,
        confirm: Confirm<'_>,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) {
        loop {
            if self.buf.is_empty() && self.resync_pending && looks_like_tls(&data) {
                match self.suspect_tls(&data, ts, frame_no, counters) {
                    Suspect::Taken => return,
                    Suspect::Reprobe(rest) => {
                        data = rest;
                        continue;
                    }
                    Suspect::NotTls => {}
                }
            }
            self.buf.extend_from_slice(&data);
            self.saw(ts, frame_no);
            let mut verdict = self.judge_confirmed(confirm, counters);
            if verdict == Some(false) && self.buf.len() > data.len() {
                let n = (self.buf.len() - data.len()) as u64;
                self.count(counters, Counter::ResyncSkippedBytes, n);
                self.buf.clear();
                self.buf.extend_from_slice(&data);
                self.start_at(ts, frame_no);
                verdict = self.judge_confirmed(confirm, counters);
            }
            match verdict {
                None => return,
                Some(false) => {
                    let n = self.buf.len() as u64;
                    self.count(counters, Counter::ResyncSkippedBytes, n);
                    self.buf.clear();
                    return;
                }
                Some(true) => {
                    self.synced = true;
                    self.resync_pending = false;
                    self.after_gap = true;
                    self.count(counters, Counter::Resyncs, 1);
                    match self.cut(ts, frame_no, counters, out) {
                        Some(rest) => data = rest,
                        None => return,
                    }
                }
            }
        }
    }

    /// Is `buf` a plausible frame start: Some(true), Some(false), or None (need more bytes).
    fn judge(&self, buf: &[u8]) -> Option<bool> {
        let size = be_i32(buf, 0)?;
        if size < 0 || size as u32 > self.max_frame {
            return Some(false);
        }
        let need = (4 + size as usize).min(PROBE_BYTES);
        if buf.len() < need {
            return None;
        }
        let probe = &buf[..buf.len().min(PROBE_BYTES)];
        Some(
            self.check
                .check(probe, buf, self.versions.as_ref(), self.max_frame),
        )
    }

    /// `judge` on `buf`, and the connection must not refuse the candidate: a false
    /// header inside a body after a hole carries a correlation id nothing waits for.
    /// The id is read as soon as its bytes are there, before the probe window fills:
    /// a candidate waiting for more bytes would swallow the next real frame's start.
    /// Refusals are counted.
    fn judge_confirmed(&mut self, confirm: Confirm<'_>, counters: &mut Counters) -> Option<bool> {
        let plausible = self.judge(&self.buf);
        if plausible == Some(false) {
            return plausible;
        }
        if self.buf.get(4..).and_then(confirm) == Some(false) {
            counters.inc(Counter::ResyncUnconfirmed);
            return Some(false);
        }
        plausible
    }

    /// A whole Kafka frame, plausible for the sender's role, at the start of `data`:
    /// evidence strong enough to clear a TLS suspicion.
    fn kafka_frame_at_start(&self, data: &[u8]) -> bool {
        match be_i32(data, 0) {
            Some(size)
                if size >= 0
                    && size as u32 <= self.max_frame
                    && 4 + size as usize <= data.len() =>
            {
                self.judge(data) == Some(true)
            }
            _ => false,
        }
    }

    /// Cut the complete frames out of `buf`. Returns bytes to probe again when a TLS
    /// suspicion raised here was cleared at once.
    fn cut(
        &mut self,
        ts: Ts,
        frame_no: u64,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) -> Option<Vec<u8>> {
        let mut pos = 0usize;
        while let Some(size) = be_i32(&self.buf, pos) {
            if size < 0 || size as u32 > self.max_frame {
                let rest = self.buf.split_off(pos);
                self.buf.clear();
                if looks_like_tls(&rest) {
                    match self.suspect_tls(&rest, ts, frame_no, counters) {
                        Suspect::Taken => return None,
                        Suspect::Reprobe(again) => return Some(again),
                        Suspect::NotTls => {}
                    }
                }
                self.count(counters, Counter::BadFrameSize, 1);
                self.count(counters, Counter::ResyncSkippedBytes, rest.len() as u64);
                self.synced = false;
                self.resync_pending = false;
                return None;
            }
            let end = pos + 4 + size as usize;
            let Some(payload) = self.buf.get(pos + 4..end) else {
                break;
            };
            out.push(KafkaFrame {
                stream: self.stream,
                src: self.src,
                dst: self.dst,
                payload: payload.to_vec(),
                first_ts_ns: self.first_ts,
                last_ts_ns: self.last_ts,
                first_frame: self.first_frame,
                last_frame: self.last_frame,
                after_gap: self.after_gap,
                tls: self.decrypted,
                missing: 0,
                snapped: false,
                end_lost: false,
            });
            self.after_gap = false;
            self.framed = true;
            pos = end;
            // A following frame in the same chunk starts in this packet.
            self.start_at(ts, frame_no);
        }
        if pos > 0 {
            self.buf.drain(..pos);
        }
        None
    }

    /// `data` starts like a TLS record: suspect TLS, or not even that (the first record
    /// header is impossible: frame on as if no TLS), or the suspicion broke within
    /// `data` (its rest is to be probed as Kafka).
    fn suspect_tls(
        &mut self,
        data: &[u8],
        ts: Ts,
        frame_no: u64,
        counters: &mut Counters,
    ) -> Suspect {
        if self.cleared_in_chunk {
            return Suspect::NotTls;
        }
        self.buf.clear();
        let mut probe = TlsProbe::default();
        let walk = probe.walk(data);
        probe.bytes = data.len() as u64;
        match walk {
            Walk::Broken(0) => {
                counters.inc(Counter::TlsFalseAlarm);
                Suspect::NotTls
            }
            Walk::Broken(at) => {
                self.tls_false_alarm(at as u64, ts, frame_no, counters);
                Suspect::Reprobe(data[at..].to_vec())
            }
            Walk::Confirmed => {
                self.tls = Tls::Suspected(probe);
                self.conclude_tls(counters);
                Suspect::Taken
            }
            Walk::Undecided => {
                let over = probe.bytes > TLS_TENTATIVE_MAX;
                self.tls = Tls::Suspected(probe);
                if over {
                    self.conclude_tls(counters);
                }
                Suspect::Taken
            }
        }
    }

    fn feed_suspected(
        &mut self,
        chunk: Chunk,
        confirm: Confirm<'_>,
        counters: &mut Counters,
        out: &mut Vec<KafkaFrame>,
    ) {
        let inside = match &mut self.tls {
            Tls::Suspected(p) => {
                if chunk.resync {
                    p.blind = true;
                    p.need = 0;
                    p.head_len = 0;
                }
                p.inside_record()
            }
            _ => return,
        };
        if inside && self.kafka_frame_at_start(&chunk.data) {
            let held = probe_bytes(&self.tls);
            self.tls_false_alarm(held, chunk.ts_ns, chunk.frame, counters);
            return self.probe(chunk.data, chunk.ts_ns, chunk.frame, confirm, counters, out);
        }
        let Tls::Suspected(p) = &mut self.tls else {
            return;
        };
        let walk = if p.blind {
            Walk::Undecided
        } else {
            p.walk(&chunk.data)
        };
        match walk {
            Walk::Broken(at) => {
                let held = p.bytes + at as u64;
                self.tls_false_alarm(held, chunk.ts_ns, chunk.frame, counters);
                let mut rest = chunk.data;
                rest.drain(..at);
                self.probe(rest, chunk.ts_ns, chunk.frame, confirm, counters, out);
            }
            Walk::Confirmed => {
                p.bytes += chunk.data.len() as u64;
                self.conclude_tls(counters);
            }
            Walk::Undecided => {
                p.bytes += chunk.data.len() as u64;
                if p.bytes > TLS_TENTATIVE_MAX {
                    self.conclude_tls(counters);
                }
            }
        }
    }

    fn conclude_tls(&mut self, counters: &mut Counters) {
        counters.inc(Counter::TlsConnectionsDirections);
        counters.add(Counter::TlsBytes, probe_bytes(&self.tls));
        self.tls = Tls::Yes;
        self.buf = Vec::new();
    }

    /// The suspicion did not hold: the bytes taken as TLS are skipped, and what follows
    /// (where a record header or a Kafka frame was expected) is the next candidate.
    fn tls_false_alarm(&mut self, skipped: u64, ts: Ts, frame_no: u64, counters: &mut Counters) {
        counters.inc(Counter::TlsFalseAlarm);
        self.count(counters, Counter::ResyncSkippedBytes, skipped);
        self.cleared_in_chunk = true;
        self.tls = Tls::No;
        self.buf.clear();
        self.synced = false;
        // No second suspicion on the same bytes: the candidate is judged as Kafka only.
        self.resync_pending = false;
        self.start_at(ts, frame_no);
    }
}

enum Suspect {
    NotTls,
    Taken,
    Reprobe(Vec<u8>),
}

fn probe_bytes(tls: &Tls) -> u64 {
    match tls {
        Tls::Suspected(p) => p.bytes,
        _ => 0,
    }
}
