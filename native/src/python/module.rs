//! The `dissector._core` module: its classes and functions, and the capture facts.
//! Apart from `python/mod.rs` so that registering `live` does not make the Analyzer's
//! module depend on `live`, which depends on it (tests/test_layout_native.py).

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use super::tls::{KeyLog, TlsConnections};
use super::{columns, exchange, live, Analyzer, KnownTopics, Model, TlsStream};
use crate::capture::{scan_path, FileFacts};
use crate::types::Ts;

/// One capture interface of `CaptureFacts` (`capture::InterfaceFacts`).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct InterfaceFacts {
    linktype: u32,
    snaplen: u32,
    name: Option<String>,
}

/// What a capture file says about where and when it was recorded
/// (`capture::FileFacts`): what decides whether files chain into one capture.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct CaptureFacts {
    format: &'static str,
    link_types: Vec<u32>,
    interfaces: Vec<Py<InterfaceFacts>>,
    records: u64,
    first_ts_ns: Option<Ts>,
    last_ts_ns: Option<Ts>,
    min_ts_ns: Option<Ts>,
    max_ts_ns: Option<Ts>,
    damaged: bool,
}

fn facts_object(py: Python<'_>, f: FileFacts) -> PyResult<CaptureFacts> {
    let interfaces = f
        .interfaces
        .into_iter()
        .map(|i| {
            Py::new(
                py,
                InterfaceFacts {
                    linktype: i.linktype,
                    snaplen: i.snaplen,
                    name: i.name,
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(CaptureFacts {
        format: f.format,
        link_types: f.link_types,
        interfaces,
        records: f.records,
        first_ts_ns: f.first_ts_ns,
        last_ts_ns: f.last_ts_ns,
        min_ts_ns: f.min_ts_ns,
        max_ts_ns: f.max_ts_ns,
        damaged: f.damaged,
    })
}

/// The facts of a capture file: every record header is read, no packet decoded.
#[pyfunction]
fn scan_facts(py: Python<'_>, path: PathBuf) -> PyResult<CaptureFacts> {
    let facts = py
        .detach(|| scan_path(path))
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    facts_object(py, facts)
}

/// `scan_facts` of a capture held in memory.
#[pyfunction]
fn scan_facts_bytes(py: Python<'_>, data: &[u8]) -> PyResult<CaptureFacts> {
    let facts =
        crate::capture::scan_slice(data).map_err(|e| PyValueError::new_err(e.to_string()))?;
    facts_object(py, facts)
}

/// Every counter name the core may produce (`counter::Counter`, generated from
/// `dissector/anomalies.py`): tests compare the built module with the registry.
#[pyfunction]
fn counter_names() -> Vec<&'static str> {
    crate::counter::Counter::ALL
        .iter()
        .map(|c| c.name())
        .collect()
}

/// Every word the core writes in the pairs table's `status` column (`rows::status`):
/// tests compare them with `dissector.schema.Status`, the one definition.
#[pyfunction]
fn status_words() -> Vec<&'static str> {
    crate::rows::status::ALL.to_vec()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Model>()?;
    m.add_class::<Analyzer>()?;
    m.add_class::<KnownTopics>()?;
    m.add_class::<KeyLog>()?;
    m.add_class::<TlsConnections>()?;
    m.add_class::<CaptureFacts>()?;
    m.add_class::<InterfaceFacts>()?;
    m.add_class::<TlsStream>()?;
    m.add_function(wrap_pyfunction!(scan_facts, m)?)?;
    m.add_function(wrap_pyfunction!(scan_facts_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(counter_names, m)?)?;
    m.add_function(wrap_pyfunction!(status_words, m)?)?;
    exchange::register(m)?;
    columns::register(m)?;
    live::register(m)?;
    Ok(())
}
