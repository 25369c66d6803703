//! The long-poll and queueing columns of the pairs table (issue #13 §1, §2).
//!
//! `fetch_wait`/`service_ms` follow `stats.SERVICE_LATENCY_RULE` row by row; which
//! requests are long polls comes from the exported spec model (the extract column that
//! holds a request's max_wait_ms), never from API keys here.
//!
//! `queue_ms`/`inflight` follow `stats.QUEUEING_RULE`: per connection, requests are
//! taken in the order they were sent (`Exchange::seq`), keeping the latest earlier
//! response time + throttle and the response times still ahead of the next request
//! (pruned as request times advance). A row whose earlier requests are not all settled
//! yet (an acks=0 Produce sent behind an open request, a response out of order) is
//! held until they are, so the values are final when the row is built. Responses
//! without a request count as earlier than the requests taken after they arrive.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::counter::Counter;
use crate::kafka::model::Model;
use crate::types::{Counters, Ts};

/// Rows held per connection waiting for earlier requests; past it the oldest is taken
/// with what is known (its earlier requests still open count as in flight).
pub const MAX_HELD_ROWS: usize = 1024;
/// Response times kept per connection ahead of the next request.
pub const MAX_ANSWERS: usize = 10_000;
/// Connections with state at once; past it the lowest stream with nothing held goes.
pub const MAX_CONNECTIONS: usize = 65_536;

/// The `SERVICE_LATENCY_RULE` as the exported model gives it.
#[derive(Debug, Clone)]
pub struct LongPollRule {
    slot: usize,
    api_keys: Vec<i16>,
    wait_share: f64,
    failed: Vec<String>,
    pub empty_poll: String,
    pub data: String,
    pub early: String,
}

/// What `LongPollRule::classify` reads of one row.
pub struct PollInput<'a> {
    pub api_key: Option<i64>,
    pub latency_ms: Option<f64>,
    pub records: Option<i64>,
    pub record_bytes: Option<i64>,
    pub extracts: &'a [Option<i64>],
    pub status: &'a str,
}

impl LongPollRule {
    pub fn from_model(m: &Model) -> Option<Self> {
        let lp = m.long_poll.as_ref()?;
        let slot = m.extracts.iter().position(|e| e.column == lp.column)?;
        Some(LongPollRule {
            slot,
            api_keys: m.extracts[slot].api_keys.clone(),
            wait_share: lp.wait_share,
            failed: lp.failed_statuses.clone(),
            empty_poll: lp.classes.empty_poll.clone(),
            data: lp.classes.data.clone(),
            early: lp.classes.early.clone(),
        })
    }

    /// (fetch_wait class, service_ms) of one row.
    pub fn classify(&self, r: &PollInput<'_>) -> (Option<&str>, Option<f64>) {
        let Some(latency) = r.latency_ms else {
            return (None, None);
        };
        let poll = r
            .api_key
            .is_some_and(|k| self.api_keys.iter().any(|&a| i64::from(a) == k));
        if !poll {
            return (None, Some(latency));
        }
        if r.records.unwrap_or(0) > 0 || r.record_bytes.unwrap_or(0) > 0 {
            return (Some(&self.data), Some(latency));
        }
        // A zero or negative bound is no wait to subtract: unknown.
        let wait = r
            .extracts
            .get(self.slot)
            .copied()
            .flatten()
            .filter(|w| *w > 0);
        let empty_poll = match wait {
            Some(w) => latency >= self.wait_share * w as f64,
            // Brokers answer errors at once: an empty answer without one waited.
            None => !self.failed.iter().any(|s| s == r.status),
        };
        if !empty_poll {
            return (Some(&self.early), Some(latency));
        }
        let service = wait.map(|w| (latency - w as f64).max(0.0));
        (Some(&self.empty_poll), service)
    }
}

/// The times of one row that queueing reads.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub request: Option<Ts>,
    pub response: Option<Ts>,
    pub throttle_ms: Option<i64>,
    /// The request expects a response (false for Produce with acks=0).
    pub waits: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Queued {
    pub queue_ms: Option<f64>,
    pub inflight: Option<i64>,
}

struct Conn<T> {
    next_seq: u64,
    held: BTreeMap<u64, (Timing, T)>,
    busy_until: Option<Ts>,
    answers: BinaryHeap<Reverse<Ts>>,
    never: u64,
}

impl<T> Default for Conn<T> {
    fn default() -> Self {
        Conn {
            next_seq: 0,
            held: BTreeMap::new(),
            busy_until: None,
            answers: BinaryHeap::new(),
            never: 0,
        }
    }
}

impl<T> Conn<T> {
    fn step(&mut self, seq: Option<u64>, t: &Timing, bounded: &mut Bounded) -> Queued {
        if let Some(s) = seq {
            // A row taken past a gap (the bound) moves the order on; one that comes
            // after its gap was skipped is taken as it comes.
            self.next_seq = self.next_seq.max(s + 1);
        }
        let mut q = Queued::default();
        if let Some(sent) = t.request {
            while let Some(&Reverse(r)) = self.answers.peek() {
                if r > sent {
                    break;
                }
                self.answers.pop();
            }
            q.inflight =
                Some(i64::try_from(self.answers.len() as u64 + self.never).unwrap_or(i64::MAX));
            let wait = self.busy_until.map_or(0, |b| b.saturating_sub(sent).max(0));
            q.queue_ms = Some(wait as f64 / 1_000_000.0);
        }
        if let Some(resp) = t.response {
            let throttle = t.throttle_ms.unwrap_or(0).max(0).saturating_mul(1_000_000);
            let end = resp.saturating_add(throttle);
            self.busy_until = Some(self.busy_until.map_or(end, |b| b.max(end)));
            self.answers.push(Reverse(resp));
            if self.answers.len() > MAX_ANSWERS {
                self.answers.pop();
                bounded.answers_dropped += 1;
            }
        } else if t.request.is_some() && t.waits {
            // Never answered in the capture: in flight for every later request.
            self.never += 1;
        }
        q
    }
}

/// How often a bound made the columns approximate (each is a counter of the run).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Bounded {
    /// Rows taken before their turn: `MAX_HELD_ROWS` rows were already waiting.
    pub rows_forced: u64,
    /// Response times forgotten past `MAX_ANSWERS` (later `inflight` may be lower).
    pub answers_dropped: u64,
    /// Connections whose state was dropped past `MAX_CONNECTIONS`.
    pub connections_dropped: u64,
}

impl Bounded {
    /// Adds the bounds that were hit to the run's counters (the names are literal so
    /// that `tests/test_anomalies.py` can check each is registered).
    pub fn count(self, counters: &mut Counters) {
        if self.rows_forced > 0 {
            counters.add(Counter::QueueingRowsForced, self.rows_forced);
        }
        if self.answers_dropped > 0 {
            counters.add(Counter::QueueingAnswersDropped, self.answers_dropped);
        }
        if self.connections_dropped > 0 {
            counters.add(
                Counter::QueueingConnectionsDropped,
                self.connections_dropped,
            );
        }
    }
}

/// Per-connection queueing state of one capture; `T` is a row waiting for its turn.
pub struct Queueing<T> {
    conns: BTreeMap<u32, Conn<T>>,
    pub bounded: Bounded,
}

impl<T> Default for Queueing<T> {
    fn default() -> Self {
        Queueing {
            conns: BTreeMap::new(),
            bounded: Bounded::default(),
        }
    }
}

fn conn_in<'a, T>(
    conns: &'a mut BTreeMap<u32, Conn<T>>,
    bounded: &mut Bounded,
    stream: u32,
) -> &'a mut Conn<T> {
    if !conns.contains_key(&stream) && conns.len() >= MAX_CONNECTIONS {
        let idle = conns
            .iter()
            .find(|(_, c)| c.held.is_empty())
            .map(|(k, _)| *k);
        if let Some(k) = idle {
            conns.remove(&k);
            bounded.connections_dropped += 1;
        }
    }
    conns.entry(stream).or_default()
}

impl<T> Queueing<T> {
    /// The row can be taken now: every earlier request of its connection was.
    pub fn ready(&mut self, stream: u32, seq: Option<u64>) -> bool {
        let c = conn_in(&mut self.conns, &mut self.bounded, stream);
        c.held.is_empty() && seq.is_none_or(|s| s <= c.next_seq)
    }

    /// Take a ready row (see `ready`).
    pub fn take(&mut self, stream: u32, seq: Option<u64>, t: &Timing) -> Queued {
        let c = conn_in(&mut self.conns, &mut self.bounded, stream);
        c.step(seq, t, &mut self.bounded)
    }

    /// Keep a row until its earlier requests are taken (`drain` hands it back).
    pub fn hold(&mut self, stream: u32, seq: u64, t: Timing, row: T) {
        conn_in(&mut self.conns, &mut self.bounded, stream)
            .held
            .insert(seq, (t, row));
    }

    /// Held rows of `stream` whose turn has come (all of them when `all`), in order.
    pub fn drain(&mut self, stream: u32, all: bool, out: &mut Vec<(T, Queued)>) {
        let Some(c) = self.conns.get_mut(&stream) else {
            return;
        };
        while let Some(&seq) = c.held.keys().next() {
            let turn = all || seq <= c.next_seq;
            if !(turn || c.held.len() > MAX_HELD_ROWS) {
                break;
            }
            if !turn {
                self.bounded.rows_forced += 1;
            }
            let Some((t, row)) = c.held.remove(&seq) else {
                break;
            };
            let q = c.step(Some(seq), &t, &mut self.bounded);
            out.push((row, q));
        }
    }

    /// Streams with held rows (the capture's end takes them all).
    pub fn held_streams(&self) -> Vec<u32> {
        self.conns
            .iter()
            .filter(|(_, c)| !c.held.is_empty())
            .map(|(k, _)| *k)
            .collect()
    }
}
