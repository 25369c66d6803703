//! The Python face: `dissector._core`, bindings only (the pipeline they bind is
//! `crate::pipeline`). The module itself and the capture facts are `module`; the column
//! buffers `columns`; exchanges, frames and endpoints `exchange`; live capture `live`;
//! key logs `tls`.
//!
//! `Model` holds the spec model exported by `dissector/protocol/export.py`.
//! `Analyzer` runs captures (a path, bytes in memory, or link frames fed one by one)
//! through the stages and hands back either column batches of the pairs table or the
//! exchanges themselves (for the full-body decoder). Pairs whose summary the native
//! interpreter cannot finish cleanly are summarised by a Python callback (the full
//! decoder), so decode-error wording lives in one place.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::capture::{open_path, LinkDecoder, PacketReader};
use crate::counter::Counter;
use crate::kafka::model::Model as SpecModel;
use crate::kafka::session::{Session, SessionConfig};
use crate::kafka::summary::TopicNames;
use crate::kafka::table_model::MAX_ENTRY_COLUMNS;
use crate::pipeline::{self, batch_full, not_summarised, Fallback, RowSink, Stages, Summaries};
use crate::python::tls::{summary_lines, KeyLog, TlsConnections};
use crate::rows::queueing::LongPollRule;
use crate::rows::tables::{
    EntryValues, GroupFacts, Negotiation, PairFacts, PartitionFacts, TableSink, Wanted,
};
use crate::rows::{RowBuilder, SummaryColumns};
use crate::tls::{KeySource, Summary as TlsSummary};
use crate::types::{Counters, Exchange};

mod columns;
mod exchange;
mod live;
mod module;
mod tls;

#[pyclass(frozen, module = "dissector._core")]
pub struct Model {
    inner: Arc<SpecModel>,
}

#[pymethods]
impl Model {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        let inner = SpecModel::from_json(json).map_err(PyValueError::new_err)?;
        Ok(Model {
            inner: Arc::new(inner),
        })
    }
}

enum Source {
    Reader(PacketReader),
    Live { decoder: LinkDecoder },
}

/// A file queued to continue the open capture (`chain_path`, `chain_bytes`): opened
/// only when the previous one ends, so a long set holds one reader at a time; or a
/// Python callable that hands the next files over one by one (`chain_next`).
enum ChainedInput {
    Path(PathBuf),
    Bytes(Vec<u8>),
    Next(Py<PyAny>),
}

struct ChainedFile {
    name: String,
    input: ChainedInput,
}

impl ChainedFile {
    fn open(self) -> PyResult<PacketReader> {
        match self.input {
            ChainedInput::Path(path) => {
                open_path(&path).map_err(|e| PyOSError::new_err(e.to_string()))
            }
            ChainedInput::Bytes(data) => {
                let source: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(data));
                PacketReader::new(source)
                    .map_err(|e| PyValueError::new_err(format!("{}: {e}", self.name)))
            }
            ChainedInput::Next(_) => Err(PyRuntimeError::new_err("not a file")),
        }
    }
}

/// A `chain_next` callable's `wire.core.NextFile`, read by attribute.
#[derive(FromPyObject)]
struct PyNextFile<'py> {
    name: String,
    source: Bound<'py, PyAny>,
}

/// A connection found to carry TLS not decrypted: its capture and stream.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct TlsStream {
    capture: String,
    stream: u32,
}

/// What a `chain_next` callable returns: the next file (a path, or a capture's bytes)
/// and its name, or None when the set has no more files.
fn next_from(py: Python<'_>, next: &Py<PyAny>) -> PyResult<Option<ChainedFile>> {
    let got = next.call0(py)?;
    let got = got.bind(py);
    if got.is_none() {
        return Ok(None);
    }
    let PyNextFile { name, source: what } = got.extract()?;
    let input = if let Ok(data) = what.cast::<PyBytes>() {
        ChainedInput::Bytes(data.as_bytes().to_vec())
    } else {
        ChainedInput::Path(what.extract()?)
    };
    Ok(Some(ChainedFile { name, input }))
}

/// Options of one analysis run, as `dissector.options.Options` gives them.
#[derive(Clone)]
struct RunOptions {
    session: SessionConfig,
    tls: KeySource,
}

#[pyclass(module = "dissector._core")]
pub struct Analyzer {
    model: Arc<SpecModel>,
    opts: RunOptions,
    counters: Counters,
    capture: String,
    // A reader is Send but not Sync; the Mutex makes the object shareable (Python may
    // use it from another thread than the one that made it), never contended.
    source: std::sync::Mutex<Option<Source>>,
    /// Files that continue the open capture, in order (a capture set).
    chained: VecDeque<ChainedFile>,
    /// Bytes read from the finished files of the open capture (progress).
    bytes_done: u64,
    session: Option<Session>,
    tls: Vec<(String, u32)>,
    tls_table: Vec<(String, TlsSummary)>,
    summaries: Summaries<PyFallback>,
    sink: RowSink,
    stages: Stages,
}

#[pymethods]
impl Analyzer {
    /// `fallback(api_key, api_version, request, response, capture)` returns the summary
    /// columns of a pair the native interpreter deferred (see `summary_from_python`).
    #[new]
    ///
    /// `tables`: the analytics tables to build besides the pairs (`take_tables`), by
    /// name: `partitions`, `groups`, `versions` (any name builds the versions table too;
    /// a table not named has its APIs' bodies left unread); none: no tables;
    /// `tables_fallback(api_key, api_version, request, response, topic_names)` returns the
    /// `protocol.tables.PairFacts` of a pair the native reading leaves to Python;
    /// `pairs`: build the pairs' rows (off when only the tables are wanted);
    /// `wire_thread`: run the wire stages on a thread of their own beside the summaries
    /// (off: both on the calling thread, for a caller given one core: `Stages`).
    #[pyo3(signature = (model, broker_ports, heuristic, max_frame, idle_timeout_ns, fallback, exchanges=false, keep_keys=Vec::new(), frame_budget=64 << 20, frame_cap=256 << 20, capture_budget=1 << 32, tls_keys=None, tables=Vec::new(), tables_fallback=None, pairs=true, wire_thread=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        model: &Model,
        broker_ports: Vec<u16>,
        heuristic: bool,
        max_frame: u32,
        idle_timeout_ns: Option<i64>,
        fallback: Option<Py<PyAny>>,
        exchanges: bool,
        keep_keys: Vec<i16>,
        frame_budget: u64,
        frame_cap: u64,
        capture_budget: u64,
        tls_keys: Option<PyRef<'_, KeyLog>>,
        tables: Vec<String>,
        tables_fallback: Option<Py<PyAny>>,
        pairs: bool,
        wire_thread: bool,
    ) -> PyResult<Self> {
        let m = model.inner.clone();
        let session = SessionConfig {
            broker_ports,
            heuristic,
            max_frame,
            idle_timeout_ns,
            sasl_handshake_key: m.sasl_handshake_key,
            produce_key: m.produce_key,
        };
        let extracts = m.extracts.len();
        let mut rows = RowBuilder::new(extracts);
        rows.long_poll = LongPollRule::from_model(&m);
        let tables = match Wanted::of(&tables).map_err(PyValueError::new_err)? {
            None => None,
            Some(wanted) => {
                Some(TableSink::new(m.clone(), frame_cap, wanted).ok_or_else(|| {
                    PyValueError::new_err("the spec model has no tables section (an older export)")
                })?)
            }
        };
        Ok(Analyzer {
            model: m.clone(),
            opts: RunOptions {
                session,
                tls: tls_keys.map(|k| k.source.clone()).unwrap_or_default(),
            },
            counters: Counters::default(),
            capture: String::new(),
            source: std::sync::Mutex::new(None),
            chained: VecDeque::new(),
            bytes_done: 0,
            session: None,
            tls: Vec::new(),
            tls_table: Vec::new(),
            summaries: Summaries::new(
                m,
                frame_budget,
                frame_cap,
                capture_budget,
                PyFallback {
                    summary: fallback,
                    tables: tables_fallback,
                },
                tables,
            ),
            sink: RowSink::new(rows, exchanges, pairs, keep_keys),
            stages: if wire_thread {
                Stages::Threaded
            } else {
                Stages::Inline
            },
        })
    }

    /// Start a capture file (pcap/pcapng, optionally gzip-compressed).
    /// `path` is taken as the OS gives it (a `str` with surrogate escapes, bytes or a
    /// `PathLike`): a name that is not UTF-8 opens all the same.
    fn open_path(&mut self, name: String, path: PathBuf) -> PyResult<()> {
        let reader = open_path(path).map_err(|e| PyOSError::new_err(e.to_string()))?;
        self.start(name, Source::Reader(reader));
        Ok(())
    }

    /// Start a capture held in memory (e.g. a Spark task's binaryFile content).
    fn open_bytes(&mut self, name: String, data: Vec<u8>) -> PyResult<()> {
        let source: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(data));
        let reader = PacketReader::new(source).map_err(|e| PyValueError::new_err(e.to_string()))?;
        self.start(name, Source::Reader(reader));
        Ok(())
    }

    /// Queue a capture file that continues the open capture (the next file of a
    /// rotated set): TCP connections, partial frames and open requests carry over into
    /// it and frame numbers run on; rows keep the open capture's name (`name` only
    /// names the file in errors). The header is checked now; the file is opened when
    /// the one before it ends.
    fn chain_path(&mut self, name: String, path: PathBuf) -> PyResult<()> {
        self.check_open()?;
        open_path(&path).map_err(|e| PyOSError::new_err(e.to_string()))?;
        self.chained.push_back(ChainedFile {
            name,
            input: ChainedInput::Path(path),
        });
        Ok(())
    }

    /// Files that continue the open capture, handed over one at a time by
    /// `next() -> wire.core.NextFile | None` when the file before ends: a long set
    /// costs the memory of one file.
    fn chain_next(&mut self, next: Py<PyAny>) -> PyResult<()> {
        self.check_open()?;
        self.chained.push_back(ChainedFile {
            name: String::new(),
            input: ChainedInput::Next(next),
        });
        Ok(())
    }

    /// `chain_path` for a capture held in memory.
    fn chain_bytes(&mut self, name: String, data: Vec<u8>) -> PyResult<()> {
        self.check_open()?;
        crate::capture::check_bytes(&data)
            .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
        self.chained.push_back(ChainedFile {
            name,
            input: ChainedInput::Bytes(data),
        });
        Ok(())
    }

    /// Start a live source: `LiveRun` takes it over and feeds it on its capture thread.
    fn open_live(&mut self, name: String) {
        self.start(
            name,
            Source::Live {
                decoder: LinkDecoder::default(),
            },
        );
    }

    /// Run the open capture until at least `max_rows` rows (or exchanges), or `TABLE_ROWS`
    /// analytics-table rows, are waiting or the capture ends; returns False once it has
    /// ended (and was finished).
    fn run(&mut self, py: Python<'_>, max_rows: usize) -> PyResult<bool> {
        loop {
            let finished = self.chained.is_empty();
            if !self.run_file(py, max_rows)? {
                return Ok(true); // rows to take first
            }
            // The file ended: the next one of the set continues the capture.
            match self.next_chained(py)? {
                Some(next) => self.next_file(next)?,
                None => {
                    if !finished {
                        // A `chain_next` had no more: the state ends here.
                        let mut out = Vec::new();
                        if let Some(session) = self.session.as_mut() {
                            session.finish(&mut self.counters, &mut out);
                        }
                        self.consume_here(out)?;
                    }
                    self.end_capture();
                    return Ok(false);
                }
            }
            if batch_full(&self.sink, &self.summaries, max_rows) {
                return Ok(true);
            }
        }
    }

    /// Rows built so far as column buffers (then forgotten): name -> tuple, see
    /// `dissector/wire/core.py`.
    fn take_columns<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = columns::pair_columns(py, &self.sink.rows, &self.model)?;
        self.sink.rows.clear();
        Ok(out)
    }

    /// Analytics table rows built so far and their counters (then forgotten); None
    /// unless the analyzer builds tables. Versions rows come when a capture ends.
    fn take_tables(&mut self, py: Python<'_>) -> PyResult<Option<columns::TablesBatch>> {
        let Some(sink) = self.summaries.tables.as_mut() else {
            return Ok(None);
        };
        let counters = std::mem::take(&mut sink.counters);
        columns::tables_batch(py, sink.take(), &counters).map(Some)
    }

    /// Exchanges kept so far (exchanges mode), then forgotten (`exchange::Exchange`).
    fn take_exchanges(&mut self, py: Python<'_>) -> PyResult<Vec<Py<exchange::Exchange>>> {
        self.sink
            .exchanges
            .drain(..)
            .map(|(capture, ex)| exchange::exchange(py, &capture, &ex))
            .collect()
    }

    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (k, v) in self.counters.iter() {
            out.set_item(k.name(), v)?;
        }
        Ok(out)
    }

    /// The connections found to carry TLS.
    fn tls_streams(&self) -> Vec<TlsStream> {
        let open = self
            .session
            .as_ref()
            .map(|s| (&self.capture, s.tls_streams()));
        let open = open
            .iter()
            .flat_map(|(capture, streams)| streams.iter().map(|s| ((*capture).clone(), *s)));
        self.tls
            .iter()
            .cloned()
            .chain(open)
            .map(|(capture, stream)| TlsStream { capture, stream })
            .collect()
    }

    /// TLS connections by capture, version, cipher suite and outcome.
    fn tls_connections(&self) -> Vec<TlsConnections> {
        let mut out = Vec::new();
        for (capture, summary) in &self.tls_table {
            out.extend(summary_lines(capture, summary));
        }
        if let Some(session) = self.session.as_ref() {
            out.extend(summary_lines(&self.capture, session.tls_summary()));
        }
        out
    }

    /// Requests waiting for a response now, by api_key (live views).
    fn open_requests(&self) -> std::collections::HashMap<i16, u64> {
        self.session
            .as_ref()
            .map(Session::open_requests)
            .unwrap_or_default()
            .into_iter()
            .collect()
    }

    /// Rows (or exchanges) built and not taken yet.
    fn rows_waiting(&self) -> usize {
        self.sink.waiting()
    }

    fn bytes_read(&mut self) -> u64 {
        let bytes_done = self.bytes_done;
        match self.source_mut().as_ref() {
            Some(Source::Reader(r)) => bytes_done + r.bytes_read(),
            _ => self.counters.get(Counter::BytesRead),
        }
    }
}

impl Analyzer {
    /// Run the open file until at least `max_rows` rows (or exchanges) are waiting or
    /// the file ends; true once it has ended. The capture's state is finished (open
    /// requests unanswered) only at the end of its last file.
    fn run_file(&mut self, py: Python<'_>, max_rows: usize) -> PyResult<bool> {
        // Taken out while running, so that rows can be built between packets.
        let (Some(Source::Reader(mut reader)), Some(mut session)) =
            (self.source_mut().take(), self.session.take())
        else {
            return Err(PyRuntimeError::new_err("no capture file is open"));
        };
        self.sink.rows.reserve(max_rows);
        // The GIL is released while packets are read and summarised (`pipeline::run_file`):
        // Python may go on meanwhile (the CLI imports pyarrow while the core runs); the
        // rare Python summaries take it back for their call.
        let last_file = self.chained.is_empty();
        let stages = self.stages;
        let Analyzer {
            counters,
            summaries,
            sink,
            ..
        } = &mut *self;
        let (result, ended, reader, session) = py.detach(move || {
            let (result, ended) = pipeline::run_file(
                &mut reader,
                &mut session,
                summaries,
                sink,
                counters,
                last_file,
                max_rows,
                stages,
            );
            (result, ended, reader, session)
        });
        *self.source_mut() = Some(Source::Reader(reader));
        self.session = Some(session);
        self.absorb_counters();
        result?;
        Ok(ended)
    }

    /// The next file queued, asking a `chain_next` callable (kept while it gives files).
    fn next_chained(&mut self, py: Python<'_>) -> PyResult<Option<ChainedFile>> {
        while let Some(file) = self.chained.pop_front() {
            let ChainedInput::Next(next) = &file.input else {
                return Ok(Some(file));
            };
            if let Some(got) = next_from(py, next)? {
                self.chained.push_front(file);
                return Ok(Some(got));
            }
        }
        Ok(None)
    }

    /// Continue the open capture with the next file of its set.
    fn next_file(&mut self, next: ChainedFile) -> PyResult<()> {
        let frames_before = match self.source_mut().take() {
            Some(Source::Reader(r)) => {
                self.bytes_done += r.bytes_read();
                r.last_frame()
            }
            _ => 0,
        };
        let mut reader = next.open()?;
        reader.set_frames_before(frames_before);
        self.counters.inc(Counter::ChainedFiles);
        *self.source_mut() = Some(Source::Reader(reader));
        Ok(())
    }

    fn check_open(&mut self) -> PyResult<()> {
        match self.source_mut() {
            Some(Source::Reader(_)) => Ok(()),
            _ => Err(PyRuntimeError::new_err(
                "no capture file is open to continue",
            )),
        }
    }

    fn source_mut(&mut self) -> &mut Option<Source> {
        self.source
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&mut self, name: String, source: Source) {
        self.end_capture();
        self.capture = name;
        *self.source_mut() = Some(source);
        self.chained.clear();
        self.bytes_done = 0;
        let mut session = Session::new(self.opts.session.clone(), self.model.clone());
        session.set_keys(&self.opts.tls);
        self.session = Some(session);
        // Captures are independent: topic ids, budgets and queues start afresh.
        self.summaries.start(&self.capture);
        self.sink.start(&self.capture);
    }

    fn end_capture(&mut self) {
        // Rows still waiting for an earlier request that never came: taken as they are.
        self.sink.take_all_held();
        if let Some(tables) = self.summaries.tables.as_mut() {
            tables.end_capture();
        }
        // The bounds that made queue_ms/inflight approximate, counted per run.
        std::mem::take(&mut self.sink.queueing.bounded).count(&mut self.counters);
        if let Some(session) = self.session.take() {
            if !session.tls_summary().is_empty() {
                self.tls_table
                    .push((self.capture.clone(), session.tls_summary().clone()));
            }
            self.tls.extend(
                session
                    .tls_streams()
                    .iter()
                    .map(|s| (self.capture.clone(), *s)),
            );
        }
        *self.source_mut() = None;
    }

    /// Summarise and build rows on this thread (live sources, the end of a capture).
    fn consume_here(&mut self, out: Vec<Exchange>) -> PyResult<()> {
        let done = self.summaries.batch(out, self.sink.exchanges_mode);
        self.absorb_counters();
        self.sink.consume(done?);
        Ok(())
    }

    fn absorb_counters(&mut self) {
        let counted = std::mem::take(&mut self.summaries.counters);
        self.counters.merge(&counted);
    }
}

/// The Python decoder as the pipeline's `Fallback`: `summary(api_key, api_version,
/// request, response, capture)` returns a `wire.core.FallbackSummary`, `tables(api_key,
/// api_version, request, response, topic_names)` a `protocol.tables.PairFacts`. Both run
/// with the GIL released (see `run`): they take it back for their one call.
pub(crate) struct PyFallback {
    pub(crate) summary: Option<Py<PyAny>>,
    pub(crate) tables: Option<Py<PyAny>>,
}

impl Fallback for PyFallback {
    type Error = PyErr;

    fn summary(
        &self,
        key: i16,
        version: i16,
        request: Option<&[u8]>,
        response: Option<&[u8]>,
        capture: &str,
    ) -> PyResult<SummaryColumns> {
        let Some(cb) = self.summary.as_ref() else {
            return Ok(not_summarised());
        };
        Python::attach(|py| {
            let req = request.map(|b| PyBytes::new(py, b));
            let resp = response.map(|b| PyBytes::new(py, b));
            let got = cb.call1(py, (key, version, req, resp, capture))?;
            let s: PyFallbackSummary = got.bind(py).extract()?;
            Ok(SummaryColumns {
                error_code: s.error_code,
                error_name: s.error_name.map(Arc::from),
                error_count: s.error_count,
                topics: s.topics,
                partitions: s.partitions,
                records: s.records,
                record_bytes: s.record_bytes,
                compression: s.compression,
                throttle_ms: s.throttle_ms,
                decode_error: s.decode_error,
                fatal: s.fatal,
                extracts: s.extracts,
                assumed_version: s.assumed_version,
            })
        })
    }

    fn facts(
        &self,
        key: i16,
        version: i16,
        ex: &Exchange,
        topics: &Arc<TopicNames>,
    ) -> PyResult<PairFacts<'static>> {
        let Some(cb) = self.tables.as_ref() else {
            return Ok(PairFacts::default());
        };
        Python::attach(|py| {
            let req = ex.request.as_ref().map(|f| PyBytes::new(py, &f.payload));
            let resp = ex.response.as_ref().map(|f| PyBytes::new(py, &f.payload));
            let names = KnownTopics {
                names: Arc::clone(topics),
            };
            let got = cb.call1(py, (key, version, req, resp, names))?;
            let facts: PyPairFacts = got.bind(py).extract()?;
            Ok(facts.into())
        })
    }
}

/// The topic names learnt so far in the capture, for a pair the tables' native reading
/// leaves to Python (`protocol.tables.Names`): shared, not copied.
#[pyclass(frozen, module = "dissector._core")]
pub struct KnownTopics {
    names: Arc<TopicNames>,
}

#[pymethods]
impl KnownTopics {
    /// The name learnt for a topic id, if any.
    fn name(&self, topic_id: &str) -> Option<String> {
        self.names.name(topic_id).map(str::to_owned)
    }
}

/// `protocol.tables.PartitionFacts`, read by attribute.
#[derive(FromPyObject)]
struct PyPartitionFacts {
    group_id: Option<String>,
    member_id: Option<String>,
    member_epoch: Option<i64>,
    acks: Option<i64>,
    transactional_id: Option<String>,
    isolation_level: Option<i64>,
    txn_committed: Option<bool>,
    topic: Option<String>,
    topic_id: Option<String>,
    partition: Option<i64>,
    error_code: Option<i64>,
    records: Option<i64>,
    record_bytes: Option<i64>,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    entry_values: Vec<Option<i64>>,
}

/// `protocol.tables.GroupFacts`.
#[derive(FromPyObject)]
struct PyGroupFacts {
    group_id: Option<String>,
    member_id: Option<String>,
    group_instance_id: Option<String>,
    request_generation: Option<i64>,
    generation: Option<i64>,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: Option<i64>,
    assignment_bytes: Option<i64>,
    assigned_partitions: Option<i64>,
    error_code: Option<i64>,
}

/// `protocol.tables.Negotiation`.
#[derive(FromPyObject)]
struct PyNegotiation {
    software: Option<(Option<String>, Option<String>)>,
    advertised: Option<std::collections::HashMap<i64, (i64, i64)>>,
    error: Option<String>,
}

/// `protocol.tables.PairFacts`.
#[derive(FromPyObject)]
struct PyPairFacts {
    partitions: Vec<PyPartitionFacts>,
    group: Option<PyGroupFacts>,
    negotiation: Option<PyNegotiation>,
    decode_errors: u32,
}

/// The entry columns' values as the core keeps them (a list past the model's columns
/// could only come from a model this build refused).
fn entry_values(values: &[Option<i64>]) -> EntryValues {
    let mut out: EntryValues = [None; MAX_ENTRY_COLUMNS];
    for (o, v) in out.iter_mut().zip(values) {
        *o = *v;
    }
    out
}

impl From<PyPairFacts> for PairFacts<'static> {
    fn from(f: PyPairFacts) -> Self {
        PairFacts {
            partitions: f
                .partitions
                .into_iter()
                .map(|p| PartitionFacts {
                    group_id: p.group_id.map(Cow::Owned),
                    member_id: p.member_id.map(Cow::Owned),
                    member_epoch: p.member_epoch,
                    acks: p.acks,
                    transactional_id: p.transactional_id.map(Cow::Owned),
                    isolation_level: p.isolation_level,
                    txn_committed: p.txn_committed,
                    topic: p.topic.map(Cow::Owned),
                    topic_id: p.topic_id.map(Cow::Owned),
                    partition: p.partition,
                    error_code: p.error_code,
                    records: p.records,
                    record_bytes: p.record_bytes,
                    first_offset: p.first_offset,
                    last_offset: p.last_offset,
                    entry_values: entry_values(&p.entry_values),
                })
                .collect(),
            group: f.group.map(|g| GroupFacts {
                group_id: g.group_id,
                member_id: g.member_id,
                group_instance_id: g.group_instance_id,
                request_generation: g.request_generation,
                generation: g.generation,
                protocol_type: g.protocol_type,
                protocol_name: g.protocol_name,
                leader: g.leader,
                members: g.members,
                assignment_bytes: g.assignment_bytes,
                assigned_partitions: g.assigned_partitions,
                error_code: g.error_code,
            }),
            negotiation: f.negotiation.map(|n| Negotiation {
                software: n.software,
                advertised: n
                    .advertised
                    .map(|a| a.into_iter().map(|(k, (lo, hi))| (k, lo, hi)).collect()),
                error: n.error,
            }),
            decode_errors: f.decode_errors,
        }
    }
}

/// The Python decoder's summary of a deferred pair (`dissector.wire.core.FallbackSummary`),
/// read by attribute.
#[derive(FromPyObject)]
struct PyFallbackSummary {
    error_code: Option<i64>,
    error_name: Option<String>,
    error_count: Option<i64>,
    topics: Vec<String>,
    partitions: Option<i64>,
    records: Option<i64>,
    record_bytes: Option<i64>,
    compression: Option<String>,
    throttle_ms: Option<i64>,
    decode_error: Option<String>,
    fatal: bool,
    extracts: Vec<Option<i64>>,
    assumed_version: Option<i64>,
}
