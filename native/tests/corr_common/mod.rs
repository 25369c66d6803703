//! Shared by the corr_* tests: a small `Versions`, endpoints, and frame/chunk builders.
#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};

use _core::kafka::model::Model;
use _core::types::{Chunk, Endpoint, KafkaFrame, Versions};

/// The keys the tests build requests of; `keys_are_the_spec_models` checks them
/// against the model's.
pub const PRODUCE: i16 = 0;
pub const SASL_HANDSHAKE: i16 = 17;

/// The spec model exported from the bundled specs, as the core gets it at run time
/// (`native/tests/data/spec-model.json.gz`, written by `scripts/native-test-model`).
pub fn spec_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/spec-model.json.gz");
            let file = std::fs::File::open(path).expect("tests/data/spec-model.json.gz");
            let mut text = String::new();
            flate2::read::GzDecoder::new(file)
                .read_to_string(&mut text)
                .expect("gzip of the spec model");
            Arc::new(Model::from_json(&text).expect("the exported spec model"))
        })
        .clone()
}

/// Keys 0..=92 with versions 0..=20 exist; Produce v9+ is flexible (facts the tests
/// choose, wider than Kafka's). Produce's acks is read by the exported spec model, by
/// the field it names, as the core reads it.
pub struct TestVersions;

impl Versions for TestVersions {
    fn known(&self, api_key: i16, version: i16) -> bool {
        (0..=92).contains(&api_key) && (0..=20).contains(&version)
    }
    fn request_flexible(&self, api_key: i16, version: i16) -> bool {
        api_key == PRODUCE && version >= 9
    }
    fn request_acks(&self, api_key: i16, version: i16, body: &[u8]) -> Option<i64> {
        spec_model().request_acks(api_key, version, body)
    }
}

pub fn versions() -> Arc<TestVersions> {
    Arc::new(TestVersions)
}

pub fn ep(last: u8, port: u16) -> Endpoint {
    (IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)), port)
}

pub fn client() -> Endpoint {
    ep(1, 50000)
}

pub fn broker() -> Endpoint {
    ep(2, 9092)
}

/// A request payload (no size prefix): header v1 with client id "cli", then `tail`.
pub fn req(corr: i32, key: i16, version: i16, tail: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&key.to_be_bytes());
    p.extend_from_slice(&version.to_be_bytes());
    p.extend_from_slice(&corr.to_be_bytes());
    p.extend_from_slice(&3i16.to_be_bytes());
    p.extend_from_slice(b"cli");
    p.extend_from_slice(tail);
    p
}

/// A response payload: correlation id, then `tail`.
pub fn resp(corr: i32, tail: &[u8]) -> Vec<u8> {
    let mut p = corr.to_be_bytes().to_vec();
    p.extend_from_slice(tail);
    p
}

/// Size-prefixed on the wire.
pub fn wire(payload: &[u8]) -> Vec<u8> {
    let mut w = (payload.len() as i32).to_be_bytes().to_vec();
    w.extend_from_slice(payload);
    w
}

/// A whole request on the wire (Metadata v1-ish, as the Python framing tests).
pub fn wire_req(corr: i32) -> Vec<u8> {
    wire(&req(corr, 18, 3, b"\x00"))
}

pub fn chunk(src: Endpoint, dst: Endpoint, data: &[u8], n: u64, resync: bool, lost: u64) -> Chunk {
    Chunk {
        stream: 0,
        src,
        dst,
        data: data.to_vec(),
        ts_ns: n as i64 * 1000,
        frame: n,
        resync,
        lost,
        snapped: false,
    }
}

pub fn frame(payload: &[u8], src: Endpoint, dst: Endpoint, n: u64) -> KafkaFrame {
    KafkaFrame {
        stream: 0,
        src,
        dst,
        payload: payload.to_vec(),
        first_ts_ns: n as i64 * 1000,
        last_ts_ns: n as i64 * 1000,
        first_frame: n,
        last_frame: n,
        after_gap: false,
        tls: false,
        missing: 0,
        snapped: false,
        end_lost: false,
    }
}

/// A deterministic byte source for junk inputs (no crate needed).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
