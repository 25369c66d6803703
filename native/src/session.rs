//! One packet source through reassembly, framing and correlation (`pipeline.Session`).
//! OWNER: framing/correlate helper.
//!
//! Contract: `Session::new(cfg, versions)`; `packet(&pkt, counters, out)` pushes the
//! exchanges that packet completes onto `out`; `finish(counters, out)` at the end;
//! `tls_streams()` lists connections found to carry TLS.

use std::sync::Arc;

use crate::types::{Counters, Exchange, Packet, Versions};

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub broker_ports: Vec<u16>,
    pub heuristic: bool,
    pub max_frame: u32,
    pub idle_timeout_ns: Option<i64>,
    /// API key of SaslHandshake, and the Produce rule for acks=0 (api key, name of the
    /// request field): given by the Python spec model, never hard-coded.
    pub sasl_handshake_key: i16,
    pub produce_key: i16,
}

pub struct Session {
    _cfg: SessionConfig,
    _versions: Arc<dyn Versions + Send + Sync>,
}

impl Session {
    pub fn new(cfg: SessionConfig, versions: Arc<dyn Versions + Send + Sync>) -> Self {
        Session { _cfg: cfg, _versions: versions }
    }

    pub fn packet(&mut self, _pkt: &Packet<'_>, _counters: &mut Counters, _out: &mut Vec<Exchange>) {}

    pub fn finish(&mut self, _counters: &mut Counters, _out: &mut Vec<Exchange>) {}

    pub fn tls_streams(&self) -> &[u32] {
        &[]
    }
}
