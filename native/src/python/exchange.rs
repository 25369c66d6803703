//! Exchanges handed to Python in exchanges mode (the full-body decoder, the report's
//! observers) as typed records, read by name in `dissector/wire/core.py`: every fact
//! the pairs table's row is built from crosses, so `decode` and `analyze` say the same
//! about a pair (holes, snap length, TLS, a response that may be in a hole).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::types::{
    Endpoint as CoreEndpoint, Exchange as CoreExchange, ExchangeKind, KafkaFrame, Ts,
};

/// One side of a TCP connection (`types::Endpoint`): the address as text.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Endpoint {
    ip: String,
    port: u16,
}

/// One Kafka message as found in a TCP direction (`types::KafkaFrame`).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Frame {
    stream: u32,
    src: Py<Endpoint>,
    dst: Py<Endpoint>,
    /// The message bytes after the size prefix (before the first hole, if any).
    payload: Py<PyBytes>,
    first_ts_ns: Ts,
    last_ts_ns: Ts,
    first_frame: u64,
    last_frame: u64,
    after_gap: bool,
    tls: bool,
    missing: u64,
    snapped: bool,
    end_lost: bool,
    /// `types::KafkaFrame::holed`, `end_ts_ns` and `wire_size`: the stage record's
    /// derived facts, read once a pair by the decoders (as `dissector.stages.Frame`'s).
    holed: bool,
    end_ts_ns: Option<Ts>,
    wire_size: u64,
}

/// One request/response exchange of a capture (`types::Exchange`).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Exchange {
    capture: String,
    stream: u32,
    client: Py<Endpoint>,
    broker: Py<Endpoint>,
    /// `dissector.stages.ExchangeKind`'s value.
    kind: &'static str,
    request: Option<Py<Frame>>,
    response: Option<Py<Frame>>,
    api_key: Option<i16>,
    api_version: Option<i16>,
    correlation_id: Option<i32>,
    client_id: Option<String>,
    note: Option<String>,
    gap: bool,
}

fn endpoint(py: Python<'_>, e: &CoreEndpoint) -> PyResult<Py<Endpoint>> {
    let (ip, port) = *e;
    Py::new(
        py,
        Endpoint {
            ip: ip.to_string(),
            port,
        },
    )
}

fn kind_name(kind: ExchangeKind) -> &'static str {
    match kind {
        ExchangeKind::Pair => "pair",
        ExchangeKind::NoResponse => "no_response",
        ExchangeKind::Unanswered => "unanswered",
        ExchangeKind::OrphanResponse => "orphan_response",
        ExchangeKind::SaslToken => "sasl_token",
        ExchangeKind::Malformed => "malformed",
    }
}

fn frame(py: Python<'_>, f: &KafkaFrame) -> PyResult<Py<Frame>> {
    Py::new(
        py,
        Frame {
            stream: f.stream,
            src: endpoint(py, &f.src)?,
            dst: endpoint(py, &f.dst)?,
            payload: PyBytes::new(py, &f.payload).unbind(),
            first_ts_ns: f.first_ts_ns,
            last_ts_ns: f.last_ts_ns,
            first_frame: f.first_frame,
            last_frame: f.last_frame,
            after_gap: f.after_gap,
            tls: f.tls,
            missing: f.missing,
            snapped: f.snapped,
            end_lost: f.end_lost,
            holed: f.holed(),
            end_ts_ns: f.end_ts(),
            wire_size: f.wire_size(),
        },
    )
}

/// The Python record of one exchange of `capture`.
pub fn exchange(py: Python<'_>, capture: &str, ex: &CoreExchange) -> PyResult<Py<Exchange>> {
    let side = |f: &Option<KafkaFrame>| f.as_ref().map(|f| frame(py, f)).transpose();
    Py::new(
        py,
        Exchange {
            capture: capture.to_owned(),
            stream: ex.stream,
            client: endpoint(py, &ex.client)?,
            broker: endpoint(py, &ex.broker)?,
            kind: kind_name(ex.kind),
            request: side(&ex.request)?,
            response: side(&ex.response)?,
            api_key: ex.api_key,
            api_version: ex.api_version,
            correlation_id: ex.correlation_id,
            client_id: ex.client_id.clone(),
            note: ex.note.clone(),
            gap: ex.gap,
        },
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Endpoint>()?;
    m.add_class::<Frame>()?;
    m.add_class::<Exchange>()?;
    Ok(())
}
