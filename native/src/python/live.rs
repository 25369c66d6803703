//! Live capture inside the core: `PcapHandle` and `LiveRun`.
//!
//! Two threads of the core's own, no Python call per frame or per batch: the capture
//! thread reads libpcap's ring (`crate::capture::pcap`), writes `--write-pcap`, and runs the
//! wire stages (link, TCP, framing, correlation); the rows thread summarises the
//! exchanges it hands over and builds row columns. Python takes the rows built so far
//! as column buffers (`take_columns`, then Arrow) whenever it likes, e.g. once per view
//! refresh. Memory is bounded: the hand-over channel holds a few batches, and the rows
//! thread waits once `max_waiting` rows are not taken (the kernel ring then fills and
//! drops, which libpcap counts and the reassembler flags as capture gaps).
//!
//! Stopping: `stop(drain)` records the time; with `drain` the capture thread goes on
//! with frames captured before that time (what the kernel ring still holds) and ends at
//! the first newer frame or once the ring is empty; then the session is finished (open
//! requests become unanswered rows) and the rows thread ends (`done()`).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyException, PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::columns::pair_columns;
use super::{Analyzer, PyFallback, Source};
use crate::capture::pcap::{self, Handle, OpenOptions, PcapError, Stats};
use crate::capture::pcapwrite::PcapWriter;
use crate::capture::LinkDecoder;
use crate::counter::Counter;
use crate::kafka::model::Model as SpecModel;
use crate::kafka::session::Session;
use crate::pipeline::{RowSink, Summaries};
use crate::rows::RowBuilder;
use crate::types::{Counters, Exchange};

pyo3::create_exception!(
    dissector._core,
    CaptureError,
    PyException,
    "A live capture cannot start or go on: args are (kind, message), kind one of \
     missing, no_such_device, permission, bad_filter, other."
);

/// Exchanges handed from the capture thread to the rows thread at a time.
const BATCH: usize = 256;
/// Frames per `pcap_dispatch` call: between calls the capture thread looks at stop
/// requests and publishes its counters.
const DISPATCH_FRAMES: i32 = 4096;
/// Longest wait for frames before looking at a stop request again; as long as the
/// handle's block timeout (`source.BLOCK_TIMEOUT_MS`), so a drain waits twice that.
const POLL_MS: i32 = 50;
/// How often counters, drop counts and open requests are published to Python.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Safety bound on the drain after a stop (it ends by itself at the first newer frame
/// or an empty ring; this only matters when decoding the ring is very slow).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

fn capture_error(e: &PcapError) -> PyErr {
    let kind = match e {
        PcapError::Missing(_) => "missing",
        PcapError::NoSuchDevice(_) => "no_such_device",
        PcapError::Permission(_) => "permission",
        PcapError::BadFilter(_) => "bad_filter",
        PcapError::Other(_) => "other",
    };
    CaptureError::new_err((kind, e.to_string()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An I/O error worded as Python words an OSError ("[Errno 28] No space left on
/// device"), as the messages of the rest of the live command are.
fn os_error_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => {
            let suffix = format!(" (os error {code})");
            format!(
                "[Errno {code}] {}",
                text.strip_suffix(&suffix).unwrap_or(&text)
            )
        }
        None => text,
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Interfaces libpcap can capture on.
#[pyfunction]
fn pcap_devices() -> PyResult<Vec<String>> {
    pcap::devices().map_err(|e| capture_error(&e))
}

/// Compile a capture filter without an interface (raises `CaptureError`).
#[pyfunction]
fn pcap_check_filter(filter: &str, snaplen: i32) -> PyResult<()> {
    pcap::check_filter(filter, snaplen).map_err(|e| capture_error(&e))
}

/// An activated libpcap handle: filter set, non-blocking. `LiveRun` takes it over.
#[pyclass(frozen, module = "dissector._core")]
pub struct PcapHandle {
    // libpcap handles are not thread-safe: one user at a time.
    inner: Mutex<Option<Handle>>,
    #[pyo3(get)]
    linktype: u32,
}

#[pymethods]
impl PcapHandle {
    #[new]
    fn new(
        iface: &str,
        filter: &str,
        snaplen: i32,
        buffer_bytes: i32,
        timeout_ms: i32,
    ) -> PyResult<Self> {
        let opts = OpenOptions {
            snaplen,
            buffer_bytes,
            timeout_ms,
            filter: filter.to_owned(),
        };
        let h = Handle::open(iface, &opts).map_err(|e| capture_error(&e))?;
        Ok(PcapHandle {
            linktype: h.linktype,
            inner: Mutex::new(Some(h)),
        })
    }

    /// libpcap's counters now.
    fn stats(&self) -> PyResult<PcapStats> {
        let inner = lock(&self.inner);
        let Some(h) = inner.as_ref() else {
            return Err(PyRuntimeError::new_err("the handle is closed or in use"));
        };
        let s = h.stats().map_err(|e| capture_error(&e))?;
        Ok(PcapStats::from(s))
    }

    fn close(&self) {
        *lock(&self.inner) = None;
    }
}

/// What the capture thread, the rows thread and Python share.
struct Shared {
    sink: Mutex<RowSink>,
    /// Signalled when rows are added or taken, and when the rows thread ends.
    changed: Condvar,
    max_waiting: usize,
    stop: AtomicBool,
    drain: AtomicBool,
    stop_ns: AtomicI64,
    rows_done: AtomicBool,
    frames: AtomicU64,
    stats: Mutex<Stats>,
    wire_counters: Mutex<Counters>,
    summary_counters: Mutex<Counters>,
    open_requests: Mutex<Vec<(i16, u64)>>,
    /// Why the capture ended early (the interface went away, a panic, a Python error).
    failure: Mutex<Option<String>>,
    /// `--write-pcap` failed: the file is incomplete.
    pcap_error: Mutex<Option<String>>,
}

impl Shared {
    fn request_stop(&self, drain: bool) {
        if !self.stop.swap(true, Ordering::AcqRel) {
            self.drain.store(drain, Ordering::Release);
            self.stop_ns.store(now_ns(), Ordering::Release);
        }
        self.changed.notify_all();
    }

    fn fail(&self, why: String) {
        lock(&self.failure).get_or_insert(why);
        self.request_stop(true);
    }
}

/// A live capture running on the core's threads; rows are taken with `take_columns`.
#[pyclass(frozen, module = "dissector._core")]
pub struct LiveRun {
    shared: Arc<Shared>,
    model: Arc<SpecModel>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    #[pyo3(get)]
    linktype: u32,
}

#[pymethods]
impl LiveRun {
    /// Start capturing: `analyzer` has a live source open (`open_live`); `handle` is
    /// taken over. `write_pcap`: also save the frames (.pcapng, else pcap).
    #[new]
    #[pyo3(signature = (analyzer, handle, write_pcap=None, snaplen=262_144, max_waiting=1 << 18))]
    fn new(
        mut analyzer: PyRefMut<'_, Analyzer>,
        handle: PyRef<'_, PcapHandle>,
        write_pcap: Option<String>,
        snaplen: u32,
        max_waiting: usize,
    ) -> PyResult<Self> {
        let linktype = handle.linktype;
        let Some(pcap) = lock(&handle.inner).take() else {
            return Err(PyRuntimeError::new_err(
                "the pcap handle is closed or in use",
            ));
        };
        let writer = match write_pcap.as_deref() {
            Some(path) => Some(PcapWriter::create(path, linktype, snaplen).map_err(|e| {
                PyOSError::new_err(format!("cannot write {path}: {}", os_error_text(&e)))
            })?),
            None => None,
        };
        let (decoder, session, summaries, sink) = take_parts(&mut analyzer)?;
        let model = analyzer.model.clone();
        let shared = Arc::new(Shared {
            sink: Mutex::new(sink),
            changed: Condvar::new(),
            max_waiting: max_waiting.max(1),
            stop: AtomicBool::new(false),
            drain: AtomicBool::new(false),
            stop_ns: AtomicI64::new(i64::MAX),
            rows_done: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            stats: Mutex::new(Stats::default()),
            wire_counters: Mutex::new(Counters::default()),
            summary_counters: Mutex::new(Counters::default()),
            open_requests: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            pcap_error: Mutex::new(None),
        });
        let (tx, rx) = sync_channel::<Vec<Exchange>>(8);
        let capture = CaptureThread {
            handle: pcap,
            decoder,
            session,
            writer,
            write_path: write_pcap.unwrap_or_default(),
            linktype,
            tx,
            shared: shared.clone(),
            counters: Counters::default(),
            frame_no: 0,
        };
        let rows_shared = shared.clone();
        let threads = vec![
            std::thread::Builder::new()
                // Thread names show in top/ps (15 characters at most there).
                .name("kd-capture".into())
                .spawn(move || capture.run())
                .map_err(|e| PyOSError::new_err(e.to_string()))?,
            std::thread::Builder::new()
                .name("kd-rows".into())
                .spawn(move || rows_loop(summaries, rx, &rows_shared))
                .map_err(|e| PyOSError::new_err(e.to_string()))?,
        ];
        Ok(LiveRun {
            shared,
            model,
            threads: Mutex::new(threads),
            linktype,
        })
    }

    /// Ask the capture to end; with `drain`, frames captured before now are still read.
    #[pyo3(signature = (drain=true))]
    fn stop(&self, drain: bool) {
        self.shared.request_stop(drain);
    }

    /// Wait up to `timeout` seconds until at least `min_rows` rows are waiting or the
    /// run has ended; returns whether it has ended (every row built).
    fn wait(&self, py: Python<'_>, timeout: f64, min_rows: usize) -> bool {
        let shared = self.shared.clone();
        let limit = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
        py.detach(move || {
            let sink = lock(&shared.sink);
            let (_sink, _) = shared
                .changed
                .wait_timeout_while(sink, limit, |s| {
                    s.waiting() < min_rows && !shared.rows_done.load(Ordering::Acquire)
                })
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            shared.rows_done.load(Ordering::Acquire)
        })
    }

    /// Whether every row is built (the capture and rows threads have ended).
    fn done(&self) -> bool {
        self.shared.rows_done.load(Ordering::Acquire)
    }

    /// Wait (up to `timeout` seconds) for the threads to end; True when they have.
    fn join(&self, py: Python<'_>, timeout: f64) -> bool {
        if !self.wait(py, timeout, usize::MAX) {
            return false;
        }
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.threads));
        py.detach(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        true
    }

    /// Rows built since the last call, as column buffers (see `Analyzer.take_columns`).
    fn take_columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let shared = self.shared.clone();
        let extracts = self.model.extracts.len();
        let rows = py.detach(move || {
            let mut sink = lock(&shared.sink);
            let mut fresh = RowBuilder::new(extracts);
            fresh.long_poll = sink.rows.long_poll.clone();
            let rows = std::mem::replace(&mut sink.rows, fresh);
            drop(sink);
            shared.changed.notify_all();
            rows
        });
        pair_columns(py, &rows, &self.model)
    }

    /// Rows built and not taken yet.
    fn rows_waiting(&self, py: Python<'_>) -> usize {
        let shared = self.shared.clone();
        py.detach(move || lock(&shared.sink).waiting())
    }

    /// Frames read from the interface so far.
    fn frames(&self) -> u64 {
        self.shared.frames.load(Ordering::Acquire)
    }

    /// libpcap's counters, as last read (every 50 ms, and at the end).
    fn stats(&self) -> PcapStats {
        PcapStats::from(*lock(&self.shared.stats))
    }

    /// Counters of both threads (as last published: every 50 ms, and at the end).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut all = lock(&self.shared.wire_counters).clone();
        all.merge(&lock(&self.shared.summary_counters));
        let out = PyDict::new(py);
        for (k, v) in all.iter() {
            out.set_item(k.name(), v)?;
        }
        Ok(out)
    }

    /// Requests waiting for a response, by api_key (as last published).
    fn open_requests(&self) -> HashMap<i16, u64> {
        lock(&self.shared.open_requests).iter().copied().collect()
    }

    /// Why the capture ended early, if it did.
    fn error(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }

    /// Why writing the pcap failed, if it did.
    fn pcap_error(&self) -> Option<String> {
        lock(&self.shared.pcap_error).clone()
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        self.shared.request_stop(false);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.threads));
        if threads.is_empty() {
            return;
        }
        // The rows thread may need the GIL (Python summaries): release it while joining.
        Python::attach(|py| {
            py.detach(move || {
                for t in threads {
                    let _ = t.join();
                }
            });
        });
    }
}

/// The link decoder, session, summaries and row sink of an analyzer with a live source
/// open; the analyzer keeps empty ones.
#[allow(clippy::type_complexity)]
fn take_parts(
    a: &mut Analyzer,
) -> PyResult<(LinkDecoder, Session, Summaries<PyFallback>, RowSink)> {
    if !matches!(a.source_mut(), Some(Source::Live { .. })) || a.session.is_none() {
        return Err(PyRuntimeError::new_err(
            "no live source is open (open_live)",
        ));
    }
    let Some(Source::Live { decoder, .. }) = a.source_mut().take() else {
        unreachable!("checked above");
    };
    let Some(session) = a.session.take() else {
        unreachable!("checked above");
    };
    let empty_summaries = Summaries::new(
        a.model.clone(),
        a.summaries.frame_budget,
        a.summaries.frame_cap,
        a.summaries.capture_budget,
        PyFallback {
            summary: None,
            tables: None,
        },
        None,
    );
    let empty_sink = RowSink::new(
        RowBuilder::new(a.model.extracts.len()),
        a.sink.exchanges_mode,
        true,
        Vec::new(),
    );
    let summaries = std::mem::replace(&mut a.summaries, empty_summaries);
    let sink = std::mem::replace(&mut a.sink, empty_sink);
    Ok((decoder, session, summaries, sink))
}

struct CaptureThread {
    handle: Handle,
    /// Link layers, tunnels and IP fragments (what one frame alone cannot finish).
    decoder: LinkDecoder,
    session: Session,
    writer: Option<PcapWriter<BufWriter<File>>>,
    write_path: String,
    linktype: u32,
    tx: SyncSender<Vec<Exchange>>,
    shared: Arc<Shared>,
    counters: Counters,
    frame_no: u64,
}

impl CaptureThread {
    fn run(mut self) {
        let mut out: Vec<Exchange> = Vec::with_capacity(BATCH);
        let mut published = Instant::now();
        let mut flushed = Instant::now();
        let mut drain_limit: Option<Instant> = None;
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            let mut stop_ns = None;
            if stopping {
                if !self.shared.drain.load(Ordering::Acquire) {
                    break;
                }
                let limit = *drain_limit.get_or_insert_with(|| Instant::now() + DRAIN_LIMIT);
                if Instant::now() >= limit {
                    break;
                }
                stop_ns = Some(self.shared.stop_ns.load(Ordering::Acquire));
            }
            let (got, past_stop) = self.dispatch(stop_ns, &mut out);
            let n = match got {
                Ok(n) => n,
                Err(e) => {
                    self.shared
                        .fail(format!("capture on the interface failed: {e}"));
                    break;
                }
            };
            if !out.is_empty() {
                let batch = std::mem::replace(&mut out, Vec::with_capacity(BATCH));
                if self.tx.send(batch).is_err() {
                    break;
                }
            }
            if past_stop {
                break;
            }
            if n == 0 {
                // A partly filled ring block is handed over after the handle's timeout:
                // while draining, wait that long once more before calling it empty.
                let waited = self
                    .handle
                    .wait(if stopping { 2 * POLL_MS } else { POLL_MS });
                if stopping && !waited {
                    break;
                }
            }
            if published.elapsed() >= PUBLISH_EVERY {
                self.publish();
                published = Instant::now();
            }
            if flushed.elapsed() >= FLUSH_EVERY {
                self.flush_pcap();
                flushed = Instant::now();
            }
        }
        self.decoder.finish(&mut self.counters);
        self.session.finish(&mut self.counters, &mut out);
        if !out.is_empty() {
            let _ = self.tx.send(out);
        }
        self.flush_pcap();
        self.writer = None;
        self.publish();
        lock(&self.shared.open_requests).clear();
        // Dropping `tx` (with self) ends the rows thread's loop.
    }

    /// One `pcap_dispatch`: frames through the wire stages; batches of exchanges go to
    /// the rows thread as they fill. Returns the frames read and whether a frame newer
    /// than the stop time was seen.
    fn dispatch(
        &mut self,
        stop_ns: Option<i64>,
        out: &mut Vec<Exchange>,
    ) -> (Result<usize, PcapError>, bool) {
        let CaptureThread {
            handle,
            decoder,
            session,
            writer,
            write_path,
            linktype,
            tx,
            shared,
            counters,
            frame_no,
        } = self;
        let mut past_stop = false;
        let got = handle.dispatch(DISPATCH_FRAMES, |ts_ns, data, wire_len| {
            if stop_ns.is_some_and(|s| ts_ns > s) {
                past_stop = true;
                return false;
            }
            *frame_no += 1;
            counters.add(Counter::BytesRead, data.len() as u64);
            let failed = writer
                .as_mut()
                .and_then(|w| w.write(ts_ns, data, wire_len).err());
            if let Some(e) = failed {
                *writer = None;
                lock(&shared.pcap_error).get_or_insert(format!(
                    "writing {write_path} failed: {}",
                    os_error_text(&e)
                ));
                shared.request_stop(true);
            }
            if let Some(pkt) = decoder.decode_link(*linktype, ts_ns, *frame_no, data, counters) {
                session.packet(&pkt, counters, out);
            }
            if out.len() >= BATCH {
                let batch = std::mem::replace(out, Vec::with_capacity(BATCH));
                // The rows thread is gone only when it failed; the frames go on being
                // counted until the stop it requested is seen.
                let _ = tx.send(batch);
            }
            true
        });
        shared.frames.store(*frame_no, Ordering::Release);
        (got, past_stop)
    }

    fn publish(&self) {
        if let Ok(s) = self.handle.stats() {
            *lock(&self.shared.stats) = s;
        }
        *lock(&self.shared.wire_counters) = self.counters.clone();
        *lock(&self.shared.open_requests) = self.session.open_requests();
        self.shared.frames.store(self.frame_no, Ordering::Release);
    }

    fn flush_pcap(&mut self) {
        let failed = self.writer.as_mut().and_then(|w| w.flush().err());
        if let Some(e) = failed {
            self.writer = None;
            lock(&self.shared.pcap_error).get_or_insert(format!(
                "writing {} failed: {}",
                self.write_path,
                os_error_text(&e)
            ));
            self.shared.request_stop(true);
        }
    }
}

/// Summaries and rows of the exchanges the capture thread hands over.
fn rows_loop(mut summaries: Summaries<PyFallback>, rx: Receiver<Vec<Exchange>>, shared: &Shared) {
    let mut published = Instant::now();
    for batch in rx.iter() {
        let done = match summaries.batch(batch, false) {
            Ok(done) => done,
            Err(e) => {
                shared.fail(format!("summarising failed: {e}"));
                continue;
            }
        };
        let mut sink = lock(&shared.sink);
        sink.consume(done);
        // Nobody takes the rows: wait rather than grow (the kernel ring absorbs, then
        // drops and counts).
        while sink.waiting() >= shared.max_waiting && !shared.stop.load(Ordering::Acquire) {
            sink = shared
                .changed
                .wait_timeout(sink, Duration::from_millis(100))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(sink);
        shared.changed.notify_all();
        if published.elapsed() >= PUBLISH_EVERY {
            *lock(&shared.summary_counters) = summaries.counters.clone();
            published = Instant::now();
        }
    }
    let mut sink = lock(&shared.sink);
    // Rows still waiting for an earlier request that never came: taken as they are.
    sink.take_all_held();
    std::mem::take(&mut sink.queueing.bounded).count(&mut summaries.counters);
    *lock(&shared.summary_counters) = summaries.counters.clone();
    shared.rows_done.store(true, Ordering::Release);
    drop(sink);
    shared.changed.notify_all();
}

/// libpcap's counters (`pcap::Stats`): packets received, dropped by the kernel ring,
/// dropped by the interface or driver.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct PcapStats {
    received: u64,
    dropped: u64,
    if_dropped: u64,
}

impl From<Stats> for PcapStats {
    fn from(s: Stats) -> Self {
        PcapStats {
            received: s.received,
            dropped: s.dropped,
            if_dropped: s.if_dropped,
        }
    }
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    m.add_class::<PcapHandle>()?;
    m.add_class::<LiveRun>()?;
    m.add_class::<PcapStats>()?;
    m.add_function(wrap_pyfunction!(pcap_devices, m)?)?;
    m.add_function(wrap_pyfunction!(pcap_check_filter, m)?)?;
    Ok(())
}
