//! Stage 2: TCP packets -> in-order byte chunks per connection direction.
//! Port of `dissector/tcp.py`. OWNER: tcp helper.

use crate::types::{Counters, Event, Packet};

#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Close connections silent this long (live capture). None: the file's own policy.
    pub idle_timeout_ns: Option<i64>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig { idle_timeout_ns: None }
    }
}

pub struct Reassembler {
    _cfg: TcpConfig,
}

impl Reassembler {
    pub fn new(cfg: TcpConfig) -> Self {
        Reassembler { _cfg: cfg }
    }

    /// Push the events this packet releases onto `out`.
    pub fn feed(&mut self, _pkt: &Packet<'_>, _counters: &mut Counters, _out: &mut Vec<Event>) {}

    /// End of capture: release what is left.
    pub fn flush(&mut self, _counters: &mut Counters, _out: &mut Vec<Event>) {}
}
