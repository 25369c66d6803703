//! Stage 6: exchanges and their summaries -> column buffers of the pairs table.
//!
//! One `RowBuilder` accumulates rows column by column (the layout Arrow wants), so the
//! Python side builds a table from a handful of buffers instead of one object per pair.
//! Column names and meanings are `dissector/schema.py`'s; this module only fills them.
//! Strings are dictionary-encoded as they arrive: a capture repeats the same few
//! addresses, API names, client ids and statuses over every row.

pub mod columns;
pub mod queueing;
pub mod tables;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::rows::columns::{ColumnKind, PairColumn};
use crate::rows::queueing::{LongPollRule, PollInput, Queued};
use crate::types::{Exchange, ExchangeKind, KafkaFrame, Ts};

/// Values of one nullable column.
#[derive(Debug, Default)]
pub struct Nullable<T> {
    pub values: Vec<T>,
    pub valid: Vec<bool>,
}

impl<T: Default + Copy> Nullable<T> {
    pub fn push(&mut self, v: Option<T>) {
        self.valid.push(v.is_some());
        self.values.push(v.unwrap_or_default());
    }

    pub(crate) fn clear(&mut self) {
        self.values.clear();
        self.valid.clear();
    }

    fn reserve(&mut self, rows: usize) {
        self.values.reserve(rows);
        self.valid.reserve(rows);
    }
}

/// A dictionary-encoded string column: `indices[i] == -1` is null.
#[derive(Debug, Default)]
pub struct Dict {
    pub indices: Vec<i32>,
    pub words: Vec<String>,
    lookup: HashMap<String, i32>,
    // The word of the previous row: a column mostly repeats it (the capture path, a
    // connection's client id, the status), and comparing is cheaper than hashing.
    last: Option<i32>,
    // Addresses by value: formatting one per row costs more than the whole row.
    addresses: HashMap<IpAddr, i32>,
}

impl Dict {
    fn index(&mut self, s: &str) -> i32 {
        if let Some(i) = self.last.filter(|&i| self.words[i as usize] == s) {
            return i;
        }
        let i = match self.lookup.get(s) {
            Some(&i) => i,
            None => {
                let i = self.words.len() as i32;
                self.words.push(s.to_owned());
                self.lookup.insert(s.to_owned(), i);
                i
            }
        };
        self.last = Some(i);
        i
    }

    pub fn push_address(&mut self, ip: IpAddr) {
        let i = match self.addresses.get(&ip) {
            Some(&i) => i,
            None => {
                let i = self.index(&ip.to_string());
                self.addresses.insert(ip, i);
                i
            }
        };
        self.indices.push(i);
    }

    pub fn push(&mut self, s: Option<&str>) {
        let i = match s {
            Some(s) => self.index(s),
            None => -1,
        };
        self.indices.push(i);
    }

    pub(crate) fn clear(&mut self) {
        self.indices.clear();
        self.words.clear();
        self.lookup.clear();
        self.addresses.clear();
        self.last = None;
    }
}

/// A list-of-strings column (topics): offsets into dictionary indices.
#[derive(Debug)]
pub struct DictList {
    pub offsets: Vec<i32>,
    pub items: Dict,
}

impl Default for DictList {
    fn default() -> Self {
        DictList {
            offsets: vec![0],
            items: Dict::default(),
        }
    }
}

impl DictList {
    pub fn push<'a>(&mut self, words: impl IntoIterator<Item = &'a str>) {
        for w in words {
            let i = self.items.index(w);
            self.items.indices.push(i);
        }
        self.offsets.push(self.items.indices.len() as i32);
    }

    fn clear(&mut self) {
        self.offsets.clear();
        self.offsets.push(0);
        self.items.clear();
    }
}

/// The summary columns of one row, as the summary stage (or the Python fallback) gives them.
#[derive(Debug, Default, Clone)]
pub struct SummaryColumns {
    pub error_code: Option<i64>,
    pub error_name: Option<Arc<str>>,
    pub error_count: Option<i64>,
    pub topics: Vec<String>,
    pub partitions: Option<i64>,
    pub records: Option<i64>,
    pub record_bytes: Option<i64>,
    pub compression: Option<String>,
    pub throttle_ms: Option<i64>,
    pub decode_error: Option<String>,
    /// The decode failure makes the frame unreadable (status becomes malformed).
    pub fatal: bool,
    pub extracts: Vec<Option<i64>>,
    /// The layout version a pair newer than the specs was decoded with.
    pub assumed_version: Option<i64>,
}

#[derive(Debug, Default)]
pub struct RowBuilder {
    pub capture: Dict,
    pub stream: Nullable<i64>,
    pub client_ip: Dict,
    pub client_port: Nullable<i64>,
    pub broker_ip: Dict,
    pub broker_port: Nullable<i64>,
    pub request_time: Nullable<i64>,
    pub response_time: Nullable<i64>,
    pub latency_ms: Nullable<f64>,
    pub first_byte_ms: Nullable<f64>,
    pub api_key: Nullable<i64>,
    pub api_name: Dict,
    pub api_version: Nullable<i64>,
    pub correlation_id: Nullable<i64>,
    pub client_id: Dict,
    pub request_size: Nullable<i64>,
    pub response_size: Nullable<i64>,
    pub status: Dict,
    pub error_code: Nullable<i64>,
    pub error_name: Dict,
    pub error_count: Nullable<i64>,
    pub topics: DictList,
    pub partitions: Nullable<i64>,
    pub records: Nullable<i64>,
    pub record_bytes: Nullable<i64>,
    pub compression: Dict,
    pub throttle_ms: Nullable<i64>,
    pub decode_error: Dict,
    pub flags: DictList,
    pub extracts: Vec<Nullable<i64>>,
    pub fetch_wait: Dict,
    pub service_ms: Nullable<f64>,
    pub queue_ms: Nullable<f64>,
    pub inflight: Nullable<i64>,
    /// The fetch_wait/service_ms rule; None (a model without it): latency as service.
    pub long_poll: Option<LongPollRule>,
    pub assumed_version: Nullable<i64>,
    pub len: usize,
}

/// The API name of raw SASL token exchanges (no Kafka header): a row label, not a key.
pub const SASL_TOKEN_API_NAME: &str = "SaslToken";

/// Row flags kept apart from decode errors (issue #13 §6).
pub const CAPTURE_GAP: &str = "capture_gap";
/// Bytes of the pair were cut by the capture's snap length (the packets were seen).
pub const TRUNCATED: &str = "truncated";
/// Decode notes of a side not captured whole (its body is not decoded).
pub const REQUEST_INCOMPLETE: &str = "request_incomplete";
pub const RESPONSE_INCOMPLETE: &str = "response_incomplete";
pub const NEGATIVE_LATENCY: &str = "negative_latency";
pub const TLS: &str = "tls";

/// The `status` column's words (`dissector.schema.Status`, the one definition: a test
/// compares this list with it through `_core.status_words`).
pub mod status {
    pub const OK: &str = "ok";
    pub const ERROR: &str = "error";
    pub const NO_RESPONSE: &str = "no_response";
    pub const UNANSWERED: &str = "unanswered";
    pub const RESPONSE_LOST: &str = "response_lost";
    pub const UNKNOWN: &str = "unknown";
    pub const ORPHAN_RESPONSE: &str = "orphan_response";
    pub const MALFORMED: &str = "malformed";
    pub const ALL: [&str; 8] = [
        OK,
        ERROR,
        NO_RESPONSE,
        UNANSWERED,
        RESPONSE_LOST,
        UNKNOWN,
        ORPHAN_RESPONSE,
        MALFORMED,
    ];
}

/// The status of an exchange before its bodies are looked at. A request left open
/// after a hole in its connection's responses (`Exchange::gap`, no other reason noted)
/// most likely had its answer in the hole: `response_lost`, not `unanswered`.
fn base_status(ex: &Exchange) -> &'static str {
    match ex.kind {
        ExchangeKind::Pair | ExchangeKind::SaslToken => status::OK,
        ExchangeKind::NoResponse => status::NO_RESPONSE,
        ExchangeKind::Unanswered if ex.gap && ex.note.is_none() => status::RESPONSE_LOST,
        ExchangeKind::Unanswered => status::UNANSWERED,
        ExchangeKind::OrphanResponse => status::ORPHAN_RESPONSE,
        ExchangeKind::Malformed => status::MALFORMED,
    }
}

fn ms(ns: Ts) -> f64 {
    ns as f64 / 1_000_000.0
}

/// "; "-join of the notes present.
pub fn join_notes(notes: &[Option<&str>]) -> Option<String> {
    let present: Vec<&str> = notes
        .iter()
        .flatten()
        .copied()
        .filter(|s| !s.is_empty())
        .collect();
    if present.is_empty() {
        None
    } else {
        Some(present.join("; "))
    }
}

/// One built column of the pairs table, borrowed for handing over.
#[derive(Clone, Copy)]
pub enum ColumnRef<'a> {
    Int(&'a Nullable<i64>),
    Float(&'a Nullable<f64>),
    Str(&'a Dict),
    StrList(&'a DictList),
}

impl ColumnRef<'_> {
    /// Whether this buffer holds what the schema says the column holds (timestamps are
    /// int64 nanoseconds).
    pub fn holds(self, kind: ColumnKind) -> bool {
        matches!(
            (self, kind),
            (ColumnRef::Int(_), ColumnKind::Int | ColumnKind::Timestamp)
                | (ColumnRef::Float(_), ColumnKind::Float)
                | (ColumnRef::Str(_), ColumnKind::Str)
                | (ColumnRef::StrList(_), ColumnKind::StrList)
        )
    }
}

impl RowBuilder {
    /// The buffer of a column (`columns.rs`, generated from `schema.COLUMNS`).
    pub fn column(&self, column: PairColumn) -> ColumnRef<'_> {
        use ColumnRef::{Float, Int, Str, StrList};
        match column {
            PairColumn::Capture => Str(&self.capture),
            PairColumn::Stream => Int(&self.stream),
            PairColumn::ClientIp => Str(&self.client_ip),
            PairColumn::ClientPort => Int(&self.client_port),
            PairColumn::BrokerIp => Str(&self.broker_ip),
            PairColumn::BrokerPort => Int(&self.broker_port),
            PairColumn::RequestTime => Int(&self.request_time),
            PairColumn::ResponseTime => Int(&self.response_time),
            PairColumn::LatencyMs => Float(&self.latency_ms),
            PairColumn::FirstByteMs => Float(&self.first_byte_ms),
            PairColumn::ApiKey => Int(&self.api_key),
            PairColumn::ApiName => Str(&self.api_name),
            PairColumn::ApiVersion => Int(&self.api_version),
            PairColumn::CorrelationId => Int(&self.correlation_id),
            PairColumn::ClientId => Str(&self.client_id),
            PairColumn::RequestSize => Int(&self.request_size),
            PairColumn::ResponseSize => Int(&self.response_size),
            PairColumn::Status => Str(&self.status),
            PairColumn::ErrorCode => Int(&self.error_code),
            PairColumn::ErrorName => Str(&self.error_name),
            PairColumn::ErrorCount => Int(&self.error_count),
            PairColumn::Topics => StrList(&self.topics),
            PairColumn::Partitions => Int(&self.partitions),
            PairColumn::Records => Int(&self.records),
            PairColumn::RecordBytes => Int(&self.record_bytes),
            PairColumn::Compression => Str(&self.compression),
            PairColumn::ThrottleMs => Int(&self.throttle_ms),
            PairColumn::DecodeError => Str(&self.decode_error),
            PairColumn::Flags => StrList(&self.flags),
            PairColumn::FetchWait => Str(&self.fetch_wait),
            PairColumn::ServiceMs => Float(&self.service_ms),
            PairColumn::QueueMs => Float(&self.queue_ms),
            PairColumn::Inflight => Int(&self.inflight),
            PairColumn::AssumedVersion => Int(&self.assumed_version),
        }
    }

    pub fn new(extract_columns: usize) -> Self {
        RowBuilder {
            extracts: (0..extract_columns).map(|_| Nullable::default()).collect(),
            ..RowBuilder::default()
        }
    }

    /// Push the row of one exchange. `api_name` is the spec model's name of its key
    /// (or the SASL token name); `summary` is None for rows that are not decoded.
    pub fn push(
        &mut self,
        capture: &str,
        ex: &Exchange,
        api_name: Option<&str>,
        summary: Option<&SummaryColumns>,
        queued: Queued,
    ) {
        let req_done = ex.request.as_ref().and_then(KafkaFrame::end_ts);
        let resp_done = ex.response.as_ref().and_then(KafkaFrame::end_ts);
        let (latency, first_byte) = match (&ex.response, req_done) {
            // A request completed at time 0 is taken as unknown, as the Python rows do.
            (Some(resp), Some(done)) if done != 0 => (
                resp_done.map(|t| ms(t.saturating_sub(done))),
                Some(ms(resp.first_ts_ns.saturating_sub(done))),
            ),
            _ => (None, None),
        };
        let frames = || ex.request.iter().chain(ex.response.iter());
        let lost = |f: &KafkaFrame| f.after_gap || (f.holed() && !f.snapped);
        let after_gap = ex.gap || frames().any(lost);
        let truncated = frames().any(|f| f.holed() && f.snapped);
        let incomplete = join_notes(&[
            ex.request
                .as_ref()
                .is_some_and(KafkaFrame::holed)
                .then_some(REQUEST_INCOMPLETE),
            ex.response
                .as_ref()
                .is_some_and(KafkaFrame::holed)
                .then_some(RESPONSE_INCOMPLETE),
        ]);

        self.capture.push(Some(capture));
        self.stream.push(Some(i64::from(ex.stream)));
        self.client_ip.push_address(ex.client.0);
        self.client_port.push(Some(i64::from(ex.client.1)));
        self.broker_ip.push_address(ex.broker.0);
        self.broker_port.push(Some(i64::from(ex.broker.1)));
        self.request_time.push(req_done);
        self.response_time.push(resp_done);
        self.latency_ms.push(latency);
        self.first_byte_ms.push(first_byte);
        self.api_key.push(ex.api_key.map(i64::from));
        self.api_name.push(api_name);
        self.api_version.push(ex.api_version.map(i64::from));
        self.correlation_id.push(ex.correlation_id.map(i64::from));
        self.client_id.push(ex.client_id.as_deref());
        self.request_size
            .push(ex.request.as_ref().map(|f| f.wire_size() as i64));
        self.response_size
            .push(ex.response.as_ref().map(|f| f.wire_size() as i64));

        let mut status = base_status(ex);
        let malformed_note = if ex.kind == ExchangeKind::Malformed {
            ex.note.as_deref()
        } else {
            None
        };
        let mut flags: Vec<&str> = Vec::new();
        if after_gap {
            flags.push(CAPTURE_GAP);
        }
        if truncated {
            flags.push(TRUNCATED);
        }
        if latency.is_some_and(|l| l < 0.0) {
            flags.push(NEGATIVE_LATENCY);
        }
        if ex.request.as_ref().is_some_and(|f| f.tls) || ex.response.as_ref().is_some_and(|f| f.tls)
        {
            flags.push(TLS);
        }
        match summary {
            None => {
                self.error_code.push(None);
                self.error_name.push(None);
                self.error_count.push(None);
                self.topics.push(std::iter::empty());
                self.partitions.push(None);
                self.records.push(None);
                self.record_bytes.push(None);
                self.compression.push(None);
                self.throttle_ms.push(None);
                let joined = join_notes(&[malformed_note, incomplete.as_deref()]);
                self.decode_error.push(joined.as_deref());
                for col in &mut self.extracts {
                    col.push(None);
                }
                self.assumed_version.push(None);
            }
            Some(s) => {
                let response_cut = ex.response.as_ref().is_some_and(KafkaFrame::holed);
                if s.decode_error.is_some() && s.fatal {
                    status = status::MALFORMED;
                } else if status == status::OK && s.error_code.is_some_and(|c| c != 0) {
                    status = status::ERROR;
                } else if status == status::OK && response_cut {
                    // No error code seen in what was captured; the cut bytes may hold one.
                    status = status::UNKNOWN;
                }
                self.error_code.push(s.error_code);
                self.error_name.push(s.error_name.as_deref());
                self.error_count.push(s.error_count);
                self.topics.push(s.topics.iter().map(String::as_str));
                self.partitions.push(s.partitions);
                self.records.push(s.records);
                self.record_bytes.push(s.record_bytes);
                self.compression.push(s.compression.as_deref());
                self.throttle_ms.push(s.throttle_ms);
                let note = if ex.kind == ExchangeKind::Malformed {
                    None
                } else {
                    ex.note.as_deref()
                };
                let joined = join_notes(&[
                    malformed_note,
                    note,
                    incomplete.as_deref(),
                    s.decode_error.as_deref(),
                ]);
                self.decode_error.push(joined.as_deref());
                for (i, col) in self.extracts.iter_mut().enumerate() {
                    col.push(s.extracts.get(i).copied().flatten());
                }
                self.assumed_version.push(s.assumed_version);
            }
        }
        self.status.push(Some(status));
        self.flags.push(flags);
        let (class, service) = match &self.long_poll {
            Some(rule) => rule.classify(&PollInput {
                api_key: ex.api_key.map(i64::from),
                latency_ms: latency,
                records: summary.and_then(|s| s.records),
                record_bytes: summary.and_then(|s| s.record_bytes),
                extracts: summary.map_or(&[], |s| s.extracts.as_slice()),
                status,
            }),
            None => (None, latency),
        };
        self.fetch_wait.push(class);
        self.service_ms.push(service);
        self.queue_ms.push(queued.queue_ms);
        self.inflight.push(queued.inflight);
        self.len += 1;
    }

    /// Sizes of the last row pushed, for a row whose frames were emptied while it waited
    /// for its turn (`queueing`).
    pub fn set_last_sizes(&mut self, request: Option<i64>, response: Option<i64>) {
        if let (Some(r), Some(s)) = (
            self.request_size.values.last_mut(),
            self.response_size.values.last_mut(),
        ) {
            *r = request.unwrap_or_default();
            *s = response.unwrap_or_default();
        }
    }

    /// Room for `rows` more rows in every column at once: growing each of them step by
    /// step, row after row, costs more than the rows themselves (bounded: a batch's size).
    pub fn reserve(&mut self, rows: usize) {
        let rows = rows.min(1 << 20);
        for d in [
            &mut self.capture,
            &mut self.client_ip,
            &mut self.broker_ip,
            &mut self.api_name,
            &mut self.client_id,
            &mut self.status,
            &mut self.error_name,
            &mut self.compression,
            &mut self.decode_error,
            &mut self.fetch_wait,
        ] {
            d.indices.reserve(rows);
        }
        for l in [&mut self.topics, &mut self.flags] {
            l.offsets.reserve(rows);
        }
        for n in [
            &mut self.stream,
            &mut self.client_port,
            &mut self.broker_port,
            &mut self.request_time,
            &mut self.response_time,
            &mut self.api_key,
            &mut self.api_version,
            &mut self.correlation_id,
            &mut self.request_size,
            &mut self.response_size,
            &mut self.error_code,
            &mut self.error_count,
            &mut self.partitions,
            &mut self.records,
            &mut self.record_bytes,
            &mut self.throttle_ms,
            &mut self.inflight,
            &mut self.assumed_version,
        ] {
            n.reserve(rows);
        }
        for e in &mut self.extracts {
            e.reserve(rows);
        }
        for f in [
            &mut self.latency_ms,
            &mut self.first_byte_ms,
            &mut self.service_ms,
            &mut self.queue_ms,
        ] {
            f.reserve(rows);
        }
    }

    pub fn clear(&mut self) {
        self.capture.clear();
        self.stream.clear();
        self.client_ip.clear();
        self.client_port.clear();
        self.broker_ip.clear();
        self.broker_port.clear();
        self.request_time.clear();
        self.response_time.clear();
        self.latency_ms.clear();
        self.first_byte_ms.clear();
        self.api_key.clear();
        self.api_name.clear();
        self.api_version.clear();
        self.correlation_id.clear();
        self.client_id.clear();
        self.request_size.clear();
        self.response_size.clear();
        self.status.clear();
        self.error_code.clear();
        self.error_name.clear();
        self.error_count.clear();
        self.topics.clear();
        self.partitions.clear();
        self.records.clear();
        self.record_bytes.clear();
        self.compression.clear();
        self.throttle_ms.clear();
        self.decode_error.clear();
        self.flags.clear();
        for col in &mut self.extracts {
            col.clear();
        }
        self.fetch_wait.clear();
        self.service_ms.clear();
        self.queue_ms.clear();
        self.inflight.clear();
        self.assumed_version.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{PairColumn, RowBuilder};

    #[test]
    fn every_column_buffer_holds_the_schema_kind() {
        let rows = RowBuilder::new(0);
        for c in PairColumn::ALL {
            assert!(
                rows.column(c).holds(c.kind()),
                "{} is not a {:?}",
                c.name(),
                c.kind()
            );
        }
    }
}
