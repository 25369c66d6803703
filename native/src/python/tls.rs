//! The Python face of TLS decryption: `dissector._core.KeyLog`, the secrets of a run.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::tls::cipher::{suite_name, version_name};
use crate::tls::keylog::{KeyLog as Log, KeyLogTail};
use crate::tls::{KeySource, Summary};

/// NSS key log files and texts, parsed once for a run. `follow`: the files are read on
/// as they grow when a handshake's secret is missing (live runs).
#[pyclass(frozen, module = "dissector._core")]
pub struct KeyLog {
    pub source: KeySource,
}

#[pymethods]
impl KeyLog {
    #[new]
    #[pyo3(signature = (paths=Vec::new(), texts=Vec::new(), follow=false))]
    fn new(py: Python<'_>, paths: Vec<String>, texts: Vec<String>, follow: bool) -> PyResult<Self> {
        py.detach(|| {
            let mut log = Log::default();
            for path in &paths {
                let mut tail = KeyLogTail::new(PathBuf::from(path));
                match tail.read_new(&mut log) {
                    Ok(()) => tail.finish(&mut log),
                    // Followed (live): a client creates its key log at its first handshake.
                    Err(e) if follow && e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(PyOSError::new_err(format!(
                            "{path}: cannot read the key log: {e}"
                        )))
                    }
                }
            }
            for text in &texts {
                log.add_text(text);
            }
            let follow = if follow {
                paths.iter().map(PathBuf::from).collect()
            } else {
                Vec::new()
            };
            Ok(KeyLog {
                source: KeySource {
                    log: Arc::new(log),
                    follow,
                },
            })
        })
    }

    /// Client randoms and session ids with secrets.
    #[getter]
    fn entries(&self) -> usize {
        self.source.log.entries()
    }

    /// Lines that fit no key log form.
    #[getter]
    fn bad_lines(&self) -> u64 {
        self.source.log.bad_lines
    }
}

/// One line of the TLS table: connections of a capture by version, suite and outcome.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct TlsConnections {
    pub capture: String,
    /// None when the capture never showed them (no ServerHello).
    pub version: Option<String>,
    pub cipher_suite: Option<String>,
    pub outcome: String,
    pub connections: u64,
}

#[pymethods]
impl TlsConnections {
    fn __repr__(&self) -> String {
        format!(
            "TlsConnections(capture={:?}, version={:?}, cipher_suite={:?}, outcome={:?}, connections={})",
            self.capture, self.version, self.cipher_suite, self.outcome, self.connections
        )
    }
}

/// The table lines of one capture's summary.
pub fn summary_lines(capture: &str, summary: &Summary) -> Vec<TlsConnections> {
    summary
        .iter()
        .map(|((version, suite, outcome), n)| TlsConnections {
            capture: capture.to_owned(),
            version: (*version != 0).then(|| version_name(*version)),
            cipher_suite: (*suite != 0).then(|| suite_name(*suite)),
            outcome: outcome.as_str().to_owned(),
            connections: *n,
        })
        .collect()
}
