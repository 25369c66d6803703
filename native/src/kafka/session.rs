//! One packet source through reassembly, framing and correlation (its Python twin, the
//! test oracle: `tests/oracle/pipeline.py`).
//!
//! Contract: `Session::new(cfg, versions)`; `packet(&pkt, counters, out)` pushes the
//! exchanges that packet completes onto `out`; `event(ev, counters, out)` does the same
//! for one TCP event (what `packet` does for each event the reassembler releases);
//! `finish(counters, out)` at the end; `tls_streams()` lists connections found to carry
//! TLS not decrypted; `open_requests()` counts the requests waiting for a response.
//! TLS connections whose handshake is captured go through the TLS stage (`tls`) first;
//! `set_keys` gives it the run's key logs.

use std::collections::HashMap;
use std::sync::Arc;

use crate::counter::Counter;
use crate::kafka::correlate::{CorrelationConfig, Correlator};
use crate::kafka::framing::Framer;
use crate::tcp::{Reassembler, TcpConfig};
use crate::tls::{KeySource, Summary as TlsSummary, TlsStage};
use crate::types::{Chunk, Counters, Endpoint, Event, Exchange, KafkaFrame, Packet, Ts, Versions};

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
    tls_noted: std::collections::HashSet<u32>,
    tls: TlsStage,
    events: Vec<Event>,      // scratch: the events of one packet
    frames: Vec<KafkaFrame>, // scratch: the frames of one chunk
    plain: Vec<Chunk>,       // scratch: the plaintext chunks of one TLS chunk
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
            tls_noted: std::collections::HashSet::new(),
            tls: TlsStage::new(&KeySource::default()),
            events: Vec::new(),
            frames: Vec::new(),
            plain: Vec::new(),
        }
    }

    /// The secrets TLS connections are decrypted with (before the first packet).
    pub fn set_keys(&mut self, keys: &KeySource) {
        self.tls = TlsStage::new(keys);
    }

    /// Secrets found in the capture itself (pcapng Decryption Secrets Blocks).
    pub fn add_secrets(&mut self, text: &str, counters: &mut Counters) {
        self.tls.add_secrets(text, counters);
    }

    /// TLS connections by version, cipher suite and outcome.
    pub fn tls_summary(&self) -> &TlsSummary {
        self.tls.summary()
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
        let mut plain = std::mem::take(&mut self.plain);
        self.tls.finish(counters, &mut plain);
        for p in plain.drain(..) {
            self.frame_chunk(p, true, counters, out);
        }
        self.plain = plain;
        self.note_undecoded(counters);
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
                let mut plain = std::mem::take(&mut self.plain);
                self.tls.close(close.stream, counters, &mut plain);
                for p in plain.drain(..) {
                    self.frame_chunk(p, true, counters, out);
                }
                self.plain = plain;
                self.note_undecoded(counters);
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

    /// A chunk of a TLS connection is decrypted first; its plaintext (or any other
    /// connection's bytes) goes on to framing.
    fn chunk(&mut self, ch: Chunk, counters: &mut Counters, out: &mut Vec<Exchange>) {
        let mut plain = std::mem::take(&mut self.plain);
        let corr = &self.corr;
        let framers = &self.framers;
        let stream = ch.stream;
        let candidate = || framers.contains_key(&stream) || corr.is_kafka_candidate(stream);
        if let Some(ch) = self.tls.chunk(ch, candidate, counters, &mut plain) {
            self.frame_chunk(ch, false, counters, out);
        }
        for p in plain.drain(..) {
            self.frame_chunk(p, true, counters, out);
        }
        self.plain = plain;
        self.note_undecoded(counters);
    }

    fn note_undecoded(&mut self, counters: &mut Counters) {
        while let Some(given_up) = self.tls.undecoded.pop() {
            self.note_tls_stream(given_up.stream, true, counters);
            // What either side sent after a hole that ended decryption is lost to
            // framing: every request open then most likely had its answer in it
            // (response_lost). Open up to the end of time: the packet that showed the
            // hole may have been held back behind it and be older than the last requests.
            if let Some(end) = given_up.hole {
                let stream = given_up.stream;
                self.corr
                    .frames_lost(stream, end.server, end.ts_ns, Ts::MAX);
                self.corr
                    .frames_lost(stream, end.client, end.ts_ns, end.ts_ns);
            }
        }
    }

    fn frame_chunk(
        &mut self,
        ch: Chunk,
        decrypted: bool,
        counters: &mut Counters,
        out: &mut Vec<Exchange>,
    ) {
        let stream = ch.stream;
        let mut frames = std::mem::take(&mut self.frames);
        let Some(i) = self.framer_for(stream, ch.src, ch.dst) else {
            counters.add(Counter::NonKafkaBytes, ch.data.len() as u64);
            self.frames = frames;
            return;
        };
        let Some(framer) = self.framers.get_mut(&stream).and_then(|fs| fs.get_mut(i)) else {
            self.frames = frames;
            return;
        };
        framer.decrypted = decrypted;
        let was_tls = framer.is_tls();
        let src = ch.src;
        // A frame start found after a hole must fit the other direction's requests.
        let corr = &self.corr;
        let confirm = |payload: &[u8]| corr.confirms_start(stream, src, payload);
        framer.feed_checked(ch, &confirm, counters, &mut frames);
        let now_tls = framer.is_tls();
        let lost = framer.take_lost();
        if let Some((from, to)) = lost {
            self.corr.frames_lost(stream, src, from, to);
        }
        if !frames.is_empty() {
            counters.add(Counter::KafkaFrames, frames.len() as u64);
            for frame in frames.drain(..) {
                self.corr.frame(frame, counters, out);
            }
        }
        self.frames = frames;
        if now_tls && !was_tls {
            self.note_tls(stream, counters);
        }
    }

    /// The index (in `framers[stream]`) of this direction's framer, made on its first
    /// chunk; None when the connection is not a Kafka candidate.
    fn framer_for(&mut self, stream: u32, src: Endpoint, dst: Endpoint) -> Option<usize> {
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
        Some(i)
    }

    fn close_framers(&mut self, stream: u32, counters: &mut Counters) {
        let Some(framers) = self.framers.remove(&stream) else {
            return;
        };
        for mut framer in framers {
            let was_tls = framer.is_tls();
            framer.close(counters);
            if framer.is_tls() && !was_tls {
                self.note_tls(stream, counters);
            }
        }
    }

    /// A connection carries TLS not decrypted: framing found it (the handshake was not
    /// captured: counted here) or the TLS stage gave it up (counted there).
    fn note_tls(&mut self, stream: u32, counters: &mut Counters) {
        let owned = self.tls.owns(stream);
        self.note_tls_stream(stream, owned, counters);
    }

    fn note_tls_stream(&mut self, stream: u32, owned: bool, counters: &mut Counters) {
        if self.tls_noted.insert(stream) {
            if !owned {
                self.tls.note_without_handshake(counters);
            }
            self.tls_streams.push(stream);
        }
    }
}
