//! The TLS stage on hostile input: truncated records, the largest record lengths,
//! garbage after a valid handshake, a wrong key, and a million ClientHellos. Each ends
//! in a counter, never a panic; bytes are accounted for (read or given up); memory stays
//! bounded and time linear.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use _core::counter::Counter;
use _core::tls::keylog::KeyLog;
use _core::tls::{KeySource, TlsStage};
use _core::types::{Chunk, Counters, Endpoint};

const CLIENT: Endpoint = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000);
const SERVER: Endpoint = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 9095);

fn record(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut r = vec![kind, 3, 3];
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

fn handshake(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut h = vec![kind];
    h.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    h.extend_from_slice(body);
    h
}

fn client_hello(random: [u8; 32]) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend_from_slice(&random);
    b.push(0); // session id
    b.extend_from_slice(&[0, 2, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    b.extend_from_slice(&[1, 0]); // no compression
    b.extend_from_slice(&[0, 7, 0, 0x2b, 0, 3, 2, 3, 4]); // supported_versions: 1.3
    record(22, &handshake(1, &b))
}

fn server_hello() -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend_from_slice(&[0x55; 32]);
    b.push(0);
    b.extend_from_slice(&[0x13, 0x01, 0]);
    b.extend_from_slice(&[0, 6, 0, 0x2b, 0, 2, 3, 4]);
    record(22, &handshake(2, &b))
}

fn chunk(stream: u32, from_client: bool, data: Vec<u8>) -> Chunk {
    let (src, dst) = if from_client {
        (CLIENT, SERVER)
    } else {
        (SERVER, CLIENT)
    };
    Chunk {
        stream,
        src,
        dst,
        data,
        ts_ns: 1,
        frame: 1,
        resync: false,
        lost: 0,
        snapped: false,
    }
}

fn stage_with(keys: &str) -> TlsStage {
    TlsStage::new(&KeySource {
        log: Arc::new(KeyLog::parse(keys)),
        follow: Vec::new(),
    })
}

/// Feed chunks through the stage and close; (counters, plaintext bytes, bytes fed).
fn run(stage: &mut TlsStage, chunks: Vec<Chunk>) -> (Counters, usize, u64) {
    let mut counters = Counters::default();
    let mut plain = Vec::new();
    let mut fed = 0u64;
    let mut streams = Vec::new();
    for ch in chunks {
        fed += ch.data.len() as u64;
        if !streams.contains(&ch.stream) {
            streams.push(ch.stream);
        }
        assert!(stage
            .chunk(ch, || true, &mut counters, &mut plain)
            .is_none());
    }
    for s in streams {
        stage.close(s, &mut counters, &mut plain);
    }
    let bytes = plain.iter().map(|c| c.data.len()).sum();
    (counters, bytes, fed)
}

fn secrets_line(random: [u8; 32]) -> String {
    let cr: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let s = "11".repeat(32);
    format!(
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET {cr} {s}\nSERVER_HANDSHAKE_TRAFFIC_SECRET {cr} {s}\n\
         CLIENT_TRAFFIC_SECRET_0 {cr} {s}\nSERVER_TRAFFIC_SECRET_0 {cr} {s}\n"
    )
}

fn accounted(c: &Counters, fed: u64) {
    assert_eq!(
        c.get(Counter::TlsBytes) + c.get(Counter::TlsRecordBytes),
        fed,
        "{c:?}"
    );
}

#[test]
fn a_truncated_record_at_the_end_is_counted() {
    let mut stage = stage_with("");
    let mut hello = client_hello([1; 32]);
    hello.truncate(hello.len() - 10);
    let (c, plain, fed) = run(&mut stage, vec![chunk(1, true, hello)]);
    assert_eq!(plain, 0);
    assert_eq!(c.get(Counter::TlsNoHandshake), 1);
    assert_eq!(c.get(Counter::TlsConnections), 1);
    accounted(&c, fed);
}

#[test]
fn the_largest_record_lengths() {
    let random = [2; 32];
    // 2^14 + 2048 is the most TLS 1.2 allows: read (and refused by the key); one more is
    // no record at all. TLS 1.3 allows 2^14 + 256 only.
    for (len, outcome) in [
        (16384 + 2048, Counter::TlsBadRecord),
        (16384 + 256, Counter::TlsDecryptFailed),
        (16384 + 2049, Counter::TlsBadRecord),
    ] {
        let mut stage = stage_with(&secrets_line(random));
        let mut big = vec![23, 3, 3];
        big.extend_from_slice(&(len as u16).to_be_bytes());
        big.resize(5 + len, 0xAB);
        let chunks = vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, big[..7000].to_vec()),
            chunk(1, false, big[7000..].to_vec()),
        ];
        let (c, plain, fed) = run(&mut stage, chunks);
        assert_eq!(plain, 0);
        assert_eq!(c.get(outcome), 1, "{len}: {c:?}");
        accounted(&c, fed);
    }
}

#[test]
fn random_bytes_after_a_valid_handshake() {
    let random = [3; 32];
    let mut seed = 0x1234_5678_u32;
    let garbage: Vec<u8> = (0..100_000)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as u8
        })
        .collect();
    let mut stage = stage_with(&secrets_line(random));
    let (c, plain, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, garbage.clone()),
            chunk(1, true, garbage),
        ],
    );
    assert_eq!(plain, 0);
    assert_eq!(c.get(Counter::TlsConnections), 1);
    assert_eq!(
        c.get(Counter::TlsBadRecord) + c.get(Counter::TlsDecryptFailed),
        1,
        "{c:?}"
    );
    accounted(&c, fed);
}

#[test]
fn an_application_record_under_a_wrong_key() {
    let random = [4; 32];
    let mut stage = stage_with(&secrets_line(random));
    let (c, _, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, record(23, &[0x42; 64])),
        ],
    );
    assert_eq!(c.get(Counter::TlsDecryptFailed), 1);
    accounted(&c, fed);
}

#[test]
fn a_gap_stops_decryption_and_is_counted() {
    let random = [5; 32];
    let mut stage = stage_with(&secrets_line(random));
    let mut late = chunk(1, false, record(23, &[0; 40]));
    late.resync = true;
    let (c, _, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            late,
        ],
    );
    assert_eq!(c.get(Counter::TlsCaptureGap), 1);
    accounted(&c, fed);
}

#[test]
fn a_million_client_hellos_in_linear_time() {
    let mut stage = stage_with("");
    let mut counters = Counters::default();
    let mut plain = Vec::new();
    let n: u32 = 1_000_000;
    let mut fed = 0u64;
    for i in 0..n {
        let mut random = [0u8; 32];
        random[..4].copy_from_slice(&i.to_be_bytes());
        let hello = client_hello(random);
        fed += hello.len() as u64;
        let taken = stage.chunk(chunk(i, true, hello), || true, &mut counters, &mut plain);
        assert!(taken.is_none());
        // Connections close as the capture goes on (the TCP stage bounds how many stay
        // open); a tenth stays open to the end.
        if i % 10 != 0 {
            stage.close(i, &mut counters, &mut plain);
        }
    }
    stage.finish(&mut counters, &mut plain);
    assert_eq!(counters.get(Counter::TlsConnections), u64::from(n));
    assert_eq!(counters.get(Counter::TlsNoHandshake), u64::from(n));
    accounted(&counters, fed);
    assert!(plain.is_empty());
}

/// A TLS 1.3 application record of `secrets_line`'s traffic secret, sealed by another
/// AEAD implementation (RustCrypto's) at record number `seq`.
fn sealed(seq: u64, plaintext: &[u8]) -> Vec<u8> {
    use _core::tls::cipher::{expand_label, Hash};
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    let secret = [0x11u8; 32];
    let mut key = [0u8; 16];
    let mut iv = [0u8; 12];
    expand_label(Hash::Sha256, &secret, b"key", &mut key).unwrap();
    expand_label(Hash::Sha256, &secret, b"iv", &mut iv).unwrap();
    for (n, s) in iv[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    let mut body = plaintext.to_vec();
    body.push(23); // inner content type: application data
    let header = [23, 3, 3, 0, 0];
    let mut header = header;
    header[3..].copy_from_slice(&((body.len() + 16) as u16).to_be_bytes());
    let c = aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap();
    let tag = c
        .encrypt_in_place_detached((&iv).into(), &header, &mut body)
        .unwrap();
    let mut rec = header.to_vec();
    rec.extend_from_slice(&body);
    rec.extend_from_slice(&tag);
    rec
}

/// Only the application secrets of `secrets_line` (the first record of each direction
/// then opens with the application key: the direction reads application records).
fn app_secrets_line(random: [u8; 32]) -> String {
    let cr: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let s = "11".repeat(32);
    format!("CLIENT_TRAFFIC_SECRET_0 {cr} {s}\nSERVER_TRAFFIC_SECRET_0 {cr} {s}\n")
}

fn after_hole(lost: u64, data: Vec<u8>) -> Chunk {
    let mut ch = chunk(1, false, data);
    ch.resync = true;
    ch.lost = lost;
    ch
}

#[test]
fn a_hole_across_records_is_crossed_at_the_record_that_opens() {
    let random = [6; 32];
    let mut stage = stage_with(&app_secrets_line(random));
    // Record 0 opens with the application key; records 1-3 go into a 300-byte hole with
    // the head of record 4, whose tail comes first after it; record 5 opens at number 5.
    let rec4 = sealed(4, &[0x44; 50]);
    let mut after = rec4[20..].to_vec();
    after.extend_from_slice(&sealed(5, &[0x55; 30]));
    after.extend_from_slice(&sealed(6, &[0x66; 30]));
    let (c, plain, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, sealed(0, &[0x10; 40])),
            after_hole(300, after),
        ],
    );
    assert_eq!(c.get(Counter::TlsGaps), 1);
    assert_eq!(c.get(Counter::TlsRecordsLost), 5 - 1, "{c:?}");
    assert_eq!(c.get(Counter::TlsDecryptedConnections), 1, "{c:?}");
    assert_eq!(plain, 40 + 30 + 30);
    accounted(&c, fed);
}

#[test]
fn a_hole_inside_a_record_costs_that_record() {
    let random = [7; 32];
    let mut stage = stage_with(&app_secrets_line(random));
    let rec1 = sealed(1, &[0x11; 100]);
    let (c, plain, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, sealed(0, &[0x10; 40])),
            chunk(1, false, rec1[..30].to_vec()),
            after_hole(20, [&rec1[50..], &sealed(2, &[0x22; 10])[..]].concat()),
        ],
    );
    assert_eq!(c.get(Counter::TlsGaps), 1);
    assert_eq!(c.get(Counter::TlsRecordsLost), 1);
    assert_eq!(c.get(Counter::TlsDecryptedConnections), 1, "{c:?}");
    assert_eq!(plain, 40 + 10);
    // the 20 bytes of the hole were never fed; the rest of the broken record is given up
    accounted(&c, fed);
}

#[test]
fn look_alike_headers_after_a_hole_end_the_search_in_bounded_work() {
    let random = [8; 32];
    let mut stage = stage_with(&app_secrets_line(random));
    // 64 KiB of fake application record headers with garbage bodies: none opens.
    let mut fake = Vec::new();
    while fake.len() < 64 * 1024 {
        fake.extend_from_slice(&record(23, &[0x5a; 64]));
    }
    let started = std::time::Instant::now();
    let (c, plain, fed) = run(
        &mut stage,
        vec![
            chunk(1, true, client_hello(random)),
            chunk(1, false, server_hello()),
            chunk(1, false, sealed(0, &[0x10; 40])),
            after_hole(1 << 20, fake),
        ],
    );
    assert_eq!(c.get(Counter::TlsGaps), 1);
    assert_eq!(c.get(Counter::TlsCaptureGap), 1, "{c:?}");
    assert_eq!(plain, 40);
    assert!(started.elapsed().as_secs() < 5);
    accounted(&c, fed);
}
