//! The pipeline after the wire stages, in Rust alone: summaries (stage 5: a pair's
//! bodies -> its summary columns and the analytics tables' facts), the row sink (stage 6:
//! summarised pairs -> column buffers, in queueing order) and `run_file`, the run of one
//! capture file through the wire stages and these (on two threads, or on one: `Stages`). `python/mod.rs` and
//! `python/live.rs` only bind it to Python: their `Fallback` is the Python decoder.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;

use crate::capture::PacketReader;
use crate::counter::Counter;
use crate::kafka::model::Model;
use crate::kafka::records::Budget;
use crate::kafka::session::Session;
use crate::kafka::summary::{read_cut, summarize, CutFacts, TopicNames, MAX_TOPICS};
use crate::rows::queueing::{Queued, Queueing, Timing};
use crate::rows::tables::{Observed, PairFacts, TableSink};
use crate::rows::{RowBuilder, SummaryColumns};
use crate::types::{Counters, Exchange, ExchangeKind, KafkaFrame};

/// What the native reading leaves to a fuller decoder: the summary of a pair it
/// deferred (malformed bodies, versions the model does not describe) and the tables'
/// facts of a pair it could not read.
pub trait Fallback {
    type Error;

    fn summary(
        &self,
        api_key: i16,
        api_version: i16,
        request: Option<&[u8]>,
        response: Option<&[u8]>,
        capture: &str,
    ) -> Result<SummaryColumns, Self::Error>;

    fn facts(
        &self,
        api_key: i16,
        api_version: i16,
        ex: &Exchange,
        topics: &Arc<TopicNames>,
    ) -> Result<PairFacts<'static>, Self::Error>;
}

/// No fuller decoder (cargo tests, examples): a deferred pair's row says it was not
/// summarised, and the tables get no facts of it.
pub struct NoFallback;

impl Fallback for NoFallback {
    type Error = std::convert::Infallible;

    fn summary(
        &self,
        _api_key: i16,
        _api_version: i16,
        _request: Option<&[u8]>,
        _response: Option<&[u8]>,
        _capture: &str,
    ) -> Result<SummaryColumns, Self::Error> {
        Ok(not_summarised())
    }

    fn facts(
        &self,
        _api_key: i16,
        _api_version: i16,
        _ex: &Exchange,
        _topics: &Arc<TopicNames>,
    ) -> Result<PairFacts<'static>, Self::Error> {
        Ok(PairFacts::default())
    }
}

/// The summary of a deferred pair when no fuller decoder is there.
pub fn not_summarised() -> SummaryColumns {
    SummaryColumns {
        decode_error: Some("not summarised".to_owned()),
        ..Default::default()
    }
}

/// Stage 5, summaries: one pair's bodies -> its summary columns. Its state is the
/// capture's (topic ids learnt so far, decompression budget left), so pairs pass through
/// it in capture order.
pub struct Summaries<F> {
    pub model: Arc<Model>,
    pub frame_budget: u64,
    /// The most one frame may decompress to (`Budget::for_frame_capped`).
    pub frame_cap: u64,
    pub capture_budget: u64,
    pub capture_budget_left: u64,
    /// Shared with what a fallback call holds (the Python binding's `KnownTopics`;
    /// copied on the next change only if it is kept past the call).
    pub topics: Arc<TopicNames>,
    /// Summaries and table facts of the pairs the native reading leaves over.
    pub fallback: F,
    pub capture: String,
    pub counters: Counters,
    /// The analytics tables, when asked for.
    pub tables: Option<TableSink>,
    /// Exchanges the wire stages read ahead of a full step (`run_file`).
    pub read_ahead: ReadAhead,
}

/// Exchanges read but not summarised when a step filled up: up to the channel's depth
/// of batches were on their way, and one exchange can make thousands of table rows (a
/// Fetch of many partitions), so summarising them all overran the step by ~9 batches
/// (512,000 partition rows in one step of 200-partition OffsetFetch pairs, 500 MB).
/// They are summarised first by the next step instead, raw bytes being far smaller
/// than their rows.
#[derive(Default)]
pub struct ReadAhead {
    batches: VecDeque<Vec<Exchange>>,
    /// The file ended after these were read: the step that drains them ends it.
    file_ended: bool,
}

/// A pair and what the summary stage made of it: the row's API name and columns (None
/// for exchanges that are not decoded, or when exchanges are wanted instead of rows).
pub struct Summarised {
    pub ex: Exchange,
    pub api_name: Option<Arc<str>>,
    pub columns: Option<SummaryColumns>,
}

/// Stage 6, rows: summarised pairs -> column buffers, each row built when every earlier
/// request of its connection has been (`queueing`); or the exchanges themselves.
pub struct RowSink {
    pub exchanges_mode: bool,
    /// Rows mode builds the pairs' rows (not when only the tables are wanted).
    pub rows_mode: bool,
    /// Rows mode: exchanges of these API keys are kept too (the report's notes).
    pub keep_keys: Vec<i16>,
    pub rows: RowBuilder,
    pub exchanges: Vec<(String, Exchange)>,
    pub capture: String,
    pub queueing: Queueing<HeldRow>,
    ready: Vec<(HeldRow, Queued)>, // scratch: held rows whose turn came
}

/// A row waiting for the earlier requests of its connection (`queueing`): its exchange
/// without payload bytes (the sizes are kept) and its summary.
pub struct HeldRow {
    ex: Exchange,
    api_name: Option<Arc<str>>,
    columns: Option<SummaryColumns>,
    sizes: (Option<i64>, Option<i64>),
}

/// A frame without its bytes: what a held row still needs (times, flags).
fn without_payload(f: &KafkaFrame) -> KafkaFrame {
    KafkaFrame {
        payload: Vec::new(),
        ..*f
    }
}

/// Exchanges handed from the wire stages to the summaries, and on to the rows, at a time.
pub const BATCH: usize = 256;

/// Analytics-table rows after which a step ends, whatever `max_rows` says: a Fetch
/// response of a long-poll consumer gives a row per partition, so the tables outgrow
/// the pairs, and their column buffers are copied once more when taken; smaller steps
/// keep that copy small (measured on a 33 MB capture: 20 MB less peak, the same time).
const TABLE_ROWS: usize = 16_384;

/// Whether the rows waiting (pairs, and the analytics tables' rows) fill a step.
pub fn batch_full<F: Fallback>(sink: &RowSink, summaries: &Summaries<F>, max_rows: usize) -> bool {
    let tables = summaries.tables_waiting();
    sink.waiting() + tables >= max_rows || tables >= TABLE_ROWS
}

impl<F: Fallback> Summaries<F> {
    /// The summary stage of a run, no capture started yet.
    pub fn new(
        model: Arc<Model>,
        frame_budget: u64,
        frame_cap: u64,
        capture_budget: u64,
        fallback: F,
        tables: Option<TableSink>,
    ) -> Self {
        Summaries {
            model,
            frame_budget,
            frame_cap,
            capture_budget,
            capture_budget_left: capture_budget,
            topics: Arc::default(),
            fallback,
            capture: String::new(),
            counters: Counters::default(),
            tables,
            read_ahead: ReadAhead::default(),
        }
    }

    /// A new capture: topic ids, budgets and the tables' per-capture state start afresh.
    pub fn start(&mut self, capture: &str) {
        self.capture = capture.to_owned();
        self.topics = Arc::default();
        self.capture_budget_left = self.capture_budget;
        self.read_ahead = ReadAhead::default(); // a capture given up mid-way left them
        if let Some(tables) = self.tables.as_mut() {
            tables.start(capture);
        }
    }

    pub fn tables_waiting(&self) -> usize {
        self.tables.as_ref().map_or(0, TableSink::waiting)
    }

    /// The tables' view of one exchange, after its summary (which learnt topic names).
    fn observe_tables(&mut self, ex: &Exchange) -> Result<(), F::Error> {
        let Some(tables) = self.tables.as_mut() else {
            return Ok(());
        };
        if let Observed::Defer = tables.observe(ex, &self.topics) {
            let facts = match (ex.api_key, ex.api_version) {
                (Some(key), Some(version)) => {
                    self.fallback.facts(key, version, ex, &self.topics)?
                }
                _ => PairFacts::default(),
            };
            if let Some(tables) = self.tables.as_mut() {
                tables.apply(ex, facts);
            }
        }
        Ok(())
    }

    /// The summaries of a batch of exchanges, in order (none in exchanges mode).
    pub fn batch(
        &mut self,
        batch: Vec<Exchange>,
        exchanges_mode: bool,
    ) -> Result<Vec<Summarised>, F::Error> {
        let mut out = Vec::with_capacity(batch.len());
        for ex in batch {
            let (api_name, columns) = if exchanges_mode {
                (None, None)
            } else {
                let summarised = self.summarise(&ex)?;
                self.observe_tables(&ex)?;
                summarised
            };
            out.push(Summarised {
                ex,
                api_name,
                columns,
            });
        }
        Ok(out)
    }

    #[allow(clippy::type_complexity)]
    fn summarise(
        &mut self,
        ex: &Exchange,
    ) -> Result<(Option<Arc<str>>, Option<SummaryColumns>), F::Error> {
        let (Some(key), Some(version)) = (ex.api_key, ex.api_version) else {
            let name = if ex.kind == ExchangeKind::SaslToken {
                Some(crate::rows::SASL_TOKEN_API_NAME)
            } else {
                None
            };
            return Ok((name.map(Arc::from), None));
        };
        // A side not captured whole is not decoded (its row says so: rows/mod.rs).
        let (request, response) = (payload(&ex.request, false), payload(&ex.response, false));
        // A side not captured whole: what its captured bytes tell (rows/mod.rs words the
        // status), read first: ids its cut naming response names whole name this pair's.
        let (cut_request, cut_response) = (payload(&ex.request, true), payload(&ex.response, true));
        let response_cut = cut_response.is_some();
        let cut = (cut_request.is_some() || response_cut).then(|| {
            read_cut(
                &self.model,
                Arc::make_mut(&mut self.topics),
                key,
                version,
                cut_request,
                cut_response,
                &mut self.counters,
            )
        });
        // One decompression budget per frame as the Python decoder sizes it (records.py),
        // within what is left of the capture's.
        let frame_bytes = request
            .map_or(0, <[u8]>::len)
            .max(response.map_or(0, <[u8]>::len));
        let mut budget =
            Budget::for_frame_capped(frame_bytes as u64, self.frame_budget, self.frame_cap);
        budget.remaining = budget.remaining.min(self.capture_budget_left);
        let before = budget.remaining;
        let s = summarize(
            &self.model,
            Arc::make_mut(&mut self.topics),
            key,
            version,
            request,
            response,
            &mut budget,
            &mut self.counters,
        );
        self.capture_budget_left = self
            .capture_budget_left
            .saturating_sub(before.saturating_sub(budget.remaining));
        let columns = if s.defer {
            self.counters.inc(Counter::SummaryDeferred);
            self.fallback
                .summary(key, version, request, response, &self.capture)?
        } else {
            SummaryColumns {
                error_code: s.error_code,
                error_name: s.error_name,
                error_count: Some(i64::from(s.error_count)),
                topics: s.topics,
                partitions: s.partitions.map(|v| v as i64),
                records: s.records.map(|v| v as i64),
                record_bytes: s.record_bytes.map(|v| v as i64),
                compression: s.compression,
                throttle_ms: s.throttle_ms,
                decode_error: s.decode_error,
                fatal: s.fatal,
                extracts: s.extracts,
                assumed_version: s.assumed_version,
            }
        };
        let mut columns = columns;
        if let Some(cut) = cut {
            add_cut_facts(
                &mut columns,
                cut.facts(&self.model, &self.topics),
                response_cut,
            );
        }
        if columns.assumed_version.is_some() {
            self.counters.inc(Counter::AssumedVersionPairs);
        }
        Ok((Some(self.model.shared_api_name(key)), Some(columns)))
    }
}

/// A side's payload when it was captured whole (`holed` false) or cut short (`holed`
/// true), else None.
fn payload(frame: &Option<KafkaFrame>, holed: bool) -> Option<&[u8]> {
    frame
        .as_ref()
        .filter(|f| f.holed() == holed)
        .map(|f| f.payload.as_slice())
}

/// What the captured bytes of the sides cut short tell, added to a pair's columns: the
/// topics named there, after the row's own (each once); of a response, the error code
/// read. Its error count is unknown: its other error codes were not captured. (The
/// Python twin: `protocol.pairs.cut_facts` and `add_topics`.)
fn add_cut_facts(columns: &mut SummaryColumns, facts: CutFacts, response_cut: bool) {
    for topic in facts.topics {
        if columns.topics.len() < MAX_TOPICS && !columns.topics.contains(&topic) {
            columns.topics.push(topic);
        }
    }
    if response_cut {
        columns.error_code = facts.error_code;
        columns.error_name = facts.error_name;
        columns.error_count = None;
        columns.throttle_ms = facts.throttle_ms;
    }
}

impl RowSink {
    /// The row stage of a run: rows (`rows_mode`) or the exchanges themselves
    /// (`exchanges_mode`); `keep_keys`: exchanges also kept beside the rows.
    pub fn new(
        rows: RowBuilder,
        exchanges_mode: bool,
        rows_mode: bool,
        keep_keys: Vec<i16>,
    ) -> Self {
        RowSink {
            exchanges_mode,
            rows_mode,
            keep_keys,
            rows,
            exchanges: Vec::new(),
            capture: String::new(),
            queueing: Queueing::default(),
            ready: Vec::new(),
        }
    }

    /// A new capture: its rows are named after it, its connections queue afresh.
    pub fn start(&mut self, capture: &str) {
        self.capture = capture.to_owned();
        self.queueing = Queueing::default();
    }

    /// Rows (or exchanges) built and not taken yet.
    pub fn waiting(&self) -> usize {
        if self.exchanges_mode {
            self.exchanges.len()
        } else {
            self.rows.len
        }
    }

    pub fn consume(&mut self, batch: Vec<Summarised>) {
        for Summarised {
            ex,
            api_name,
            columns,
        } in batch
        {
            if self.exchanges_mode {
                self.exchanges.push((self.capture.clone(), ex));
                continue;
            }
            if self.rows_mode {
                self.emit(&ex, api_name, columns);
            }
            if ex.api_key.is_some_and(|k| self.keep_keys.contains(&k)) {
                self.exchanges.push((self.capture.clone(), ex));
            }
        }
    }

    /// Build the row now when every earlier request of its connection was, else hold it
    /// (`queueing`); then the held rows whose turn came.
    fn emit(&mut self, ex: &Exchange, api_name: Option<Arc<str>>, columns: Option<SummaryColumns>) {
        let timing = Timing {
            request: ex.request.as_ref().and_then(KafkaFrame::end_ts),
            response: ex.response.as_ref().and_then(KafkaFrame::end_ts),
            throttle_ms: columns.as_ref().and_then(|c| c.throttle_ms),
            waits: ex.kind != ExchangeKind::NoResponse,
        };
        match ex.seq {
            Some(seq) if !self.queueing.ready(ex.stream, ex.seq) => {
                let held = HeldRow {
                    ex: Exchange {
                        request: ex.request.as_ref().map(without_payload),
                        response: ex.response.as_ref().map(without_payload),
                        client_id: ex.client_id.clone(),
                        note: ex.note.clone(),
                        ..*ex
                    },
                    api_name,
                    columns,
                    sizes: (
                        ex.request.as_ref().map(|f| f.wire_size() as i64),
                        ex.response.as_ref().map(|f| f.wire_size() as i64),
                    ),
                };
                self.queueing.hold(ex.stream, seq, timing, held);
            }
            _ => {
                let q = self.queueing.take(ex.stream, ex.seq, &timing);
                self.rows
                    .push(&self.capture, ex, api_name.as_deref(), columns.as_ref(), q);
            }
        }
        self.take_held(ex.stream, false);
    }

    fn take_held(&mut self, stream: u32, all: bool) {
        let mut ready = std::mem::take(&mut self.ready);
        self.queueing.drain(stream, all, &mut ready);
        for (h, q) in ready.drain(..) {
            self.rows.push(
                &self.capture,
                &h.ex,
                h.api_name.as_deref(),
                h.columns.as_ref(),
                q,
            );
            self.rows.set_last_sizes(h.sizes.0, h.sizes.1);
        }
        self.ready = ready;
    }

    /// Rows still waiting for an earlier request that never came: taken as they are.
    pub fn take_all_held(&mut self) {
        for stream in self.queueing.held_streams() {
            self.take_held(stream, true);
        }
    }
}

/// Where a step runs its two halves: the wire stages (capture, TCP, framing,
/// correlation: packets -> exchanges) and the summaries (exchanges -> rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stages {
    /// The wire stages on a thread of their own, the summaries on the caller's, batches
    /// handed over a bounded channel: each about half the work, two cores busy.
    Threaded,
    /// Both on the caller's thread in turn, a batch at a time: for a caller given one
    /// core (a Spark task runs one task per core), where the second thread only
    /// competes with the other tasks for the same cores and its hand-overs cost CPU
    /// (a long-poll capture's Spark task: 0.719 s of CPU instead of 0.778, mean of 10).
    Inline,
}

/// The wire stages' next step: one packet read into exchanges (`out`), or, at the end
/// of the file, the capture finished when it is the set's `last_file`; true then.
fn wire_step(
    reader: &mut PacketReader,
    session: &mut Session,
    counters: &mut Counters,
    last_file: bool,
    out: &mut Vec<Exchange>,
) -> bool {
    // Secrets the capture carries (pcapng Decryption Secrets Blocks) precede the
    // connections they are for.
    for text in reader.take_secrets() {
        session.add_secrets(&text, counters);
    }
    match reader.next_packet(counters) {
        Some(pkt) => {
            session.packet(&pkt, counters, out);
            false
        }
        None => {
            // The next file of a set carries the state on.
            if last_file {
                session.finish(counters, out);
            }
            true
        }
    }
}

/// Run one capture file until at least `max_rows` rows (or exchanges) are waiting or the
/// file ends; returns the summaries' result and whether the file ended. The wire stages
/// count into `counters`; `stages` says on which threads the halves run. The capture's
/// state is finished (open requests unanswered) at the end of its `last_file` only.
#[allow(clippy::too_many_arguments)]
pub fn run_file<F: Fallback>(
    reader: &mut PacketReader,
    session: &mut Session,
    summaries: &mut Summaries<F>,
    sink: &mut RowSink,
    counters: &mut Counters,
    last_file: bool,
    max_rows: usize,
    stages: Stages,
) -> (Result<(), F::Error>, bool) {
    // Exchanges read ahead by an earlier step come first, a batch at a time.
    let mut drained = false;
    while let Some(batch) = summaries.read_ahead.batches.pop_front() {
        drained = true;
        let result = summaries
            .batch(batch, sink.exchanges_mode)
            .map(|b| sink.consume(b));
        if result.is_err() {
            summaries.read_ahead = ReadAhead::default();
            return (result, false);
        }
        if batch_full(sink, summaries, max_rows) {
            break;
        }
    }
    if summaries.read_ahead.batches.is_empty()
        && std::mem::take(&mut summaries.read_ahead.file_ended)
    {
        return (Ok(()), true);
    }
    if drained && batch_full(sink, summaries, max_rows) {
        return (Ok(()), false);
    }
    if stages == Stages::Inline {
        // A batch of exchanges read, then summarised, until the rows fill the step or
        // the file ends: nothing is read ahead of a full step.
        let mut out = Vec::with_capacity(BATCH);
        loop {
            let ended = wire_step(reader, session, counters, last_file, &mut out);
            if !ended && out.len() < BATCH {
                continue;
            }
            let batch = std::mem::replace(&mut out, Vec::with_capacity(BATCH));
            let result = summaries
                .batch(batch, sink.exchanges_mode)
                .map(|b| sink.consume(b));
            if result.is_err() || ended {
                return (result, ended);
            }
            if batch_full(sink, summaries, max_rows) {
                return (Ok(()), false);
            }
        }
    }
    let stop = AtomicBool::new(false);
    let mut wire_counters = Counters::default();
    let (tx, rx) = sync_channel::<Vec<Exchange>>(8);
    let exchanges_mode = sink.exchanges_mode;
    let (result, ended) = std::thread::scope(|scope| {
        let producer = scope.spawn(|| {
            // Owned here: the next stage's loop ends when this sender is dropped.
            let tx = tx;
            let mut out = Vec::with_capacity(BATCH);
            loop {
                let ended = wire_step(reader, session, &mut wire_counters, last_file, &mut out);
                if ended || out.len() >= BATCH {
                    let batch = std::mem::replace(&mut out, Vec::with_capacity(BATCH));
                    if tx.send(batch).is_err() || ended {
                        return ended;
                    }
                    if stop.load(Ordering::Relaxed) {
                        return false;
                    }
                }
            }
        });
        // Summaries and rows on this thread: a third thread for either costs more
        // in hand-overs than it gains on two cores (measured).
        let mut result = Ok(());
        let mut full = false;
        for batch in rx.iter() {
            if full {
                summaries.read_ahead.batches.push_back(batch);
                continue;
            }
            if result.is_ok() {
                result = summaries
                    .batch(batch, exchanges_mode)
                    .map(|b| sink.consume(b));
            }
            if result.is_err() || batch_full(sink, summaries, max_rows) {
                full = result.is_ok();
                stop.store(true, Ordering::Relaxed);
            }
        }
        // A panic on the wire side ends the capture as if it were cut there.
        let ended = producer.join().unwrap_or(true);
        if ended && !summaries.read_ahead.batches.is_empty() {
            // the file ends once what was read ahead is summarised
            summaries.read_ahead.file_ended = true;
            return (result, false);
        }
        (result, ended)
    });
    counters.merge(&wire_counters);
    (result, ended)
}
