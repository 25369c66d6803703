//! One packet source through reassembly, framing and correlation (its Python twin, the
//! test oracle: `tests/oracle/pipeline.py`).
//!
//! Contract: `Session::new(cfg, versions)`; `packet(&pkt, counters, out)` pushes the
//! exchanges that packet completes onto `out`; `event(ev, counters, out)` does the same
//! for one TCP event (what `packet` does for each event the reassembler releases);
//! `finish(counters, out)` at the end; `tls_streams()` lists connections found to carry
//! TLS; `open_requests()` counts the requests waiting for a response.

use std::collections::HashMap;
use std::sync::Arc;

use crate::correlate::{CorrelationConfig, Correlator};
use crate::framing::Framer;
use crate::tcp::{Reassembler, TcpConfig};
use crate::types::{Chunk, Counters, Endpoint, Event, Exchange, KafkaFrame, Packet, Versions};

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
    cfg: SessionConfig,
    versions: Arc<dyn Versions + Send + Sync>,
    tcp: Reassembler,
    corr: Correlator,
    // stream -> the framers of its directions (at most two), by stream so that a close
    // finds them without scanning every open connection's.
    framers: HashMap<u32, Vec<Framer>>,
    tls_streams: Vec<u32>,
    events: Vec<Event>,      // scratch: the events of one packet
    frames: Vec<KafkaFrame>, // scratch: the frames of one chunk
}

impl Session {
    pub fn new(cfg: SessionConfig, versions: Arc<dyn Versions + Send + Sync>) -> Self {
        // Other fields (the tcp helper's to add) keep their defaults.
        #[allow(clippy::needless_update)]
        let tcp = Reassembler::new(TcpConfig {
            idle_timeout_ns: cfg.idle_timeout_ns,
            ..TcpConfig::default()
        });
        let corr = Correlator::new(
            CorrelationConfig {
                broker_ports: cfg.broker_ports.clone(),
                heuristic: cfg.heuristic,
                max_frame: cfg.max_frame,
                sasl_handshake_key: cfg.sasl_handshake_key,
                produce_key: cfg.produce_key,
            },
            versions.clone(),
        );
        Session {
            cfg,
            versions,
            tcp,
            corr,
            framers: HashMap::new(),
            tls_streams: Vec::new(),
            events: Vec::new(),
            frames: Vec::new(),
        }
    }

    pub fn packet(&mut self, pkt: &Packet<'_>, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let mut events = std::mem::take(&mut self.events);
        self.tcp.feed(pkt, counters, &mut events);
        for ev in events.drain(..) {
            self.event(ev, counters, out);
        }
        self.events = events;
    }

    pub fn finish(&mut self, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let mut events = std::mem::take(&mut self.events);
        self.tcp.flush(counters, &mut events);
        for ev in events.drain(..) {
            self.event(ev, counters, out);
        }
        self.events = events;
        let mut streams: Vec<u32> = self.framers.keys().copied().collect();
        streams.sort_unstable();
        for stream in streams {
            self.close_framers(stream, counters);
        }
        self.corr.close_all(counters, out);
    }

    /// Feed one TCP event.
    pub fn event(&mut self, ev: Event, counters: &mut Counters, out: &mut Vec<Exchange>) {
        match ev {
            Event::Chunk(ch) => self.chunk(ch, counters, out),
            Event::Open(open) => self.corr.open(&open),
            Event::Close(close) => {
                self.close_framers(close.stream, counters);
                self.corr.close(close.stream, counters, out);
            }
        }
    }

    pub fn tls_streams(&self) -> &[u32] {
        &self.tls_streams
    }

    /// Requests waiting for a response right now, by api_key (for live views).
    pub fn open_requests(&self) -> Vec<(i16, u64)> {
        self.corr.open_requests()
    }

    fn chunk(&mut self, ch: Chunk, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let stream = ch.stream;
        let mut frames = std::mem::take(&mut self.frames);
        let Some(framer) = self.framer_for(stream, ch.src, ch.dst) else {
            counters.add("non_kafka_bytes", ch.data.len() as u64);
            self.frames = frames;
            return;
        };
        let was_tls = framer.is_tls();
        framer.feed(ch, counters, &mut frames);
        let now_tls = framer.is_tls();
        if !frames.is_empty() {
            counters.add("kafka_frames", frames.len() as u64);
            for frame in frames.drain(..) {
                self.corr.frame(frame, counters, out);
            }
        }
        self.frames = frames;
        if now_tls && !was_tls {
            self.note_tls(stream);
        }
    }

    /// The framer of this direction, made on its first chunk; None when the connection
    /// is not a Kafka candidate.
    fn framer_for(&mut self, stream: u32, src: Endpoint, dst: Endpoint) -> Option<&mut Framer> {
        let known = self
            .framers
            .get(&stream)
            .and_then(|fs| fs.iter().position(|f| f.src == src));
        if known.is_none() && !self.corr.is_kafka_candidate(stream) {
            return None;
        }
        let framers = self.framers.entry(stream).or_default();
        let i = match known {
            Some(i) => i,
            None => {
                let check = self.corr.start_check(stream, src);
                framers.push(Framer::new(
                    stream,
                    src,
                    dst,
                    check,
                    self.versions.clone(),
                    self.cfg.max_frame,
                ));
                framers.len() - 1
            }
        };
        framers.get_mut(i)
    }

    fn close_framers(&mut self, stream: u32, counters: &mut Counters) {
        let Some(framers) = self.framers.remove(&stream) else {
            return;
        };
        for mut framer in framers {
            let was_tls = framer.is_tls();
            framer.close(counters);
            if framer.is_tls() && !was_tls {
                self.note_tls(stream);
            }
        }
    }

    fn note_tls(&mut self, stream: u32) {
        if !self.tls_streams.contains(&stream) {
            self.tls_streams.push(stream);
        }
    }
}
