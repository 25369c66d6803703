//! Hostile `records` fields (issue #11) and the codec paths of kafka/records.rs, each input
//! built here with the encoders of the crate's own dependencies (zstd, flate2,
//! lz4_flex, snap) and CRCs from crc32c / crc32fast. The differential test against
//! records.py lives in tests/test_native_records.py.

use std::io::Write;
use std::time::{Duration, Instant};

use _core::counter::Counter;
use _core::kafka::records::{
    summarize_records, Budget, CaptureBudget, RecordsSummary, CODEC_UNKNOWN_BIT, FRAME_BUDGET_CAP,
    FRAME_RATIO, MAX_ERRORS,
};
use _core::types::Counters;

const MIB: u64 = 1024 * 1024;
const NONE: i16 = 0;
const GZIP: i16 = 1;
const SNAPPY: i16 = 2;
const LZ4: i16 = 3;
const ZSTD: i16 = 4;

// --- builders ----------------------------------------------------------------------

/// A v2 batch around `body` (records, compressed by the caller), CRC-32C fixed.
fn v2_batch(attributes: i16, body: &[u8], count: i32) -> Vec<u8> {
    let mut b = Vec::with_capacity(61 + body.len());
    b.extend_from_slice(&0i64.to_be_bytes()); // base offset
    b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, set below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&(count - 1).max(0).to_be_bytes()); // last offset delta
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// The smallest valid v2 record: length 6, then six zero bytes (attributes,
/// timestamp delta, offset delta, null-free empty key and value as 0, no headers).
const TINY_RECORD: [u8; 7] = [0x0c, 0, 0, 0, 0, 0, 0];

fn tiny_records(n: usize) -> Vec<u8> {
    TINY_RECORD.repeat(n)
}

/// A magic 0/1 message (offset, size, CRC-32 over magic..end) with key null.
fn legacy(magic: u8, attributes: u8, value: Option<&[u8]>) -> Vec<u8> {
    let mut m = vec![magic, attributes];
    if magic == 1 {
        m.extend_from_slice(&0i64.to_be_bytes());
    }
    m.extend_from_slice(&(-1i32).to_be_bytes());
    match value {
        Some(v) => {
            m.extend_from_slice(&(v.len() as i32).to_be_bytes());
            m.extend_from_slice(v);
        }
        None => m.extend_from_slice(&(-1i32).to_be_bytes()),
    }
    let mut out = 0i64.to_be_bytes().to_vec();
    out.extend_from_slice(&((m.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&m).to_be_bytes());
    out.extend_from_slice(&m);
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn lz4(data: &[u8]) -> Vec<u8> {
    let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 1).unwrap()
}

fn snappy_raw(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(data).unwrap()
}

fn run(data: &[u8], budget: u64) -> (RecordsSummary, Budget, Counters) {
    let mut b = Budget::per_frame(budget);
    let mut c = Counters::default();
    let s = summarize_records(data, &mut b, &mut c);
    (s, b, c)
}

fn codes(s: &RecordsSummary) -> Vec<&str> {
    s.errors
        .iter()
        .map(|e| e.split(':').next().unwrap_or(""))
        .collect()
}

// --- plain paths -----------------------------------------------------------------

#[test]
fn every_codec_counts_its_records() {
    let records = tiny_records(1000);
    let bodies: [(i16, Vec<u8>); 5] = [
        (NONE, records.clone()),
        (GZIP, gzip(&records)),
        (SNAPPY, snappy_raw(&records)),
        (LZ4, lz4(&records)),
        (ZSTD, zstd(&records)),
    ];
    let mut all = Vec::new();
    for (codec, body) in &bodies {
        let batch = v2_batch(*codec, body, 1000);
        let (s, b, _) = run(&batch, 64 * MIB);
        assert_eq!(
            (s.records, s.batches, s.errors.len()),
            (1000, 1, 0),
            "codec {codec}: {:?}",
            s.errors
        );
        assert_eq!(s.codecs, 1 << codec);
        assert_eq!(s.bytes, batch.len() as u64);
        // Only decompressed output is charged.
        assert_eq!(b.used, if *codec == NONE { 0 } else { 7000 });
        all.extend_from_slice(&batch);
    }
    let (s, _, _) = run(&all, 64 * MIB);
    assert_eq!((s.records, s.batches, s.codecs), (5000, 5, 0b11111));
    assert_eq!(
        _core::kafka::records::compression_label(s.codecs).as_deref(),
        Some("gzip,lz4,none,snappy,zstd")
    );
}

#[test]
fn crc_mismatch_is_reported_not_fatal() {
    let mut batch = v2_batch(ZSTD, &zstd(&tiny_records(10)), 10);
    batch[20] ^= 0xFF;
    let (s, _, c) = run(&batch, MIB);
    assert_eq!(s.records, 10);
    assert_eq!(
        s.errors,
        vec!["crc_mismatch: batch 0 at offset 0".to_string()]
    );
    assert_eq!(c.get(Counter::RecordsCrcMismatch), 1);

    let mut message = legacy(1, 0, Some(b"v"));
    let last = message.len() - 1;
    message[last] ^= 1;
    let (s, _, _) = run(&message, MIB);
    assert_eq!(s.records, 1);
    assert_eq!(
        s.errors,
        vec!["crc_mismatch: message at offset 0 in batch 0 at offset 0".to_string()]
    );
}

#[test]
fn partial_trailing_batch_is_counted_not_an_error() {
    let one = v2_batch(NONE, &tiny_records(3), 3);
    let mut data = one.clone();
    data.extend_from_slice(&one[..one.len() - 5]);
    let (s, _, c) = run(&data, MIB);
    assert_eq!((s.records, s.batches, s.partial_batches), (3, 1, 1));
    assert!(s.errors.is_empty());
    assert_eq!(c.get(Counter::RecordsPartialBatches), 1);
}

#[test]
fn legacy_wrappers_gzip_snappy_xerial_lz4_old_kafka() {
    let inner: Vec<u8> = (0..4).flat_map(|_| legacy(1, 0, Some(b"value"))).collect();
    let mut xerial = b"\x82SNAPPY\x00".to_vec();
    xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
    for part in inner.chunks(50) {
        let block = snappy_raw(part);
        xerial.extend_from_slice(&(block.len() as i32).to_be_bytes());
        xerial.extend_from_slice(&block);
    }
    for (codec, value) in [
        (1u8, gzip(&inner)),
        (2, snappy_raw(&inner)),
        (2, xerial),
        (3, lz4(&inner)),
    ] {
        let (s, _, _) = run(&legacy(1, codec, Some(&value)), MIB);
        assert_eq!(
            (s.records, s.batches, s.errors.len()),
            (4, 1, 0),
            "codec {codec}: {:?}",
            s.errors
        );
    }
    // Kafka 0.8's LZ4: header checksum over the magic number too (KAFKA-3160).
    let inner0: Vec<u8> = (0..3).flat_map(|_| legacy(0, 0, Some(b"v"))).collect();
    let mut frame = lz4(&inner0);
    let flags = frame[4];
    let hc_at = 6 + if flags & 0x08 != 0 { 8 } else { 0 };
    frame[hc_at] = (twox_hash::XxHash32::oneshot(0, &frame[..hc_at]) >> 8) as u8;
    let (s, _, _) = run(&legacy(0, 3, Some(&frame)), MIB);
    assert_eq!((s.records, s.errors.len()), (3, 0), "{:?}", s.errors);
    // The same frame in a magic 1 wrapper is not excused.
    let (s, _, _) = run(&legacy(1, 3, Some(&frame)), MIB);
    assert_eq!(codes(&s), vec!["decompression_failed"]);
}

// --- hostile (issue #11) -----------------------------------------------------------

/// 64 MiB of 7-byte records compress to a few KB; a Produce of 100 such partitions
/// shares one frame budget: the first is walked, the rest take their header count,
/// each flagged, in time linear in the input.
#[test]
fn zstd_record_bomb_in_100_partitions_is_linear() {
    let n = (64 * MIB / 7) as usize;
    let body = zstd(&tiny_records(n));
    assert!(body.len() < 64 * 1024, "bomb body {} bytes", body.len());
    let bomb = v2_batch(ZSTD, &body, n as i32);
    let mut frame = Budget::per_frame(64 * MIB);
    let mut counters = Counters::default();
    let start = Instant::now();
    let summaries: Vec<RecordsSummary> = (0..100)
        .map(|_| summarize_records(&bomb, &mut frame, &mut counters))
        .collect();
    let took = start.elapsed();
    assert!(summaries[0].errors.is_empty(), "{:?}", summaries[0].errors);
    assert!(summaries.iter().all(|s| s.records == n as u64));
    for s in &summaries[1..] {
        assert_eq!(codes(s), vec!["decompression_limit"]);
    }
    assert_eq!(counters.get(Counter::RecordsDecompressionLimit), 99);
    // The first walk left 4 bytes; the second partition's overrun spent them.
    assert_eq!((frame.remaining, frame.used), (0, 64 * MIB));
    // One decompression of 64 MiB, not 100 (debug build: generous).
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// A bomb that fails at its very end (bad content checksum) is charged what it
/// produced, so repeating it in every partition does not repeat the work.
#[test]
fn failing_bombs_spend_the_budget_once() {
    let data = vec![0u8; 8 * MIB as usize];
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    enc.include_checksum(true).unwrap();
    enc.write_all(&data).unwrap();
    let mut body = enc.finish().unwrap();
    let last = body.len() - 1;
    body[last] ^= 0xFF; // the content checksum
    let bomb = v2_batch(ZSTD, &body, 1);
    let mut frame = Budget::per_frame(16 * MIB);
    let mut counters = Counters::default();
    let out: Vec<RecordsSummary> = (0..50)
        .map(|_| summarize_records(&bomb, &mut frame, &mut counters))
        .collect();
    assert_eq!(codes(&out[0]), vec!["decompression_failed"]);
    assert_eq!(codes(&out[1]), vec!["decompression_failed"]);
    assert!(out[2..]
        .iter()
        .all(|s| codes(s) == vec!["decompression_limit"]));
    assert_eq!(frame.remaining, 0);
    assert_eq!(frame.used, 16 * MIB);
}

#[test]
fn bombs_of_every_codec_stop_at_the_budget() {
    let zeros = vec![0u8; 16 * MIB as usize];
    let cases: [(i16, Vec<u8>, &str); 3] = [
        (GZIP, gzip(&zeros), "gzip"),
        (LZ4, lz4(&zeros), "lz4"),
        (ZSTD, zstd(&zeros), "zstd"),
    ];
    for (codec, body, name) in cases {
        let (s, b, _) = run(&v2_batch(codec, &body, 1), MIB);
        assert_eq!(
            s.errors,
            vec![format!(
                "decompression_limit: {name} output over {MIB} bytes in batch 0 at offset 0"
            )]
        );
        assert_eq!((s.records, b.remaining), (1, 0));
    }
    // A raw snappy block that claims 4 GiB - 1: refused before any allocation.
    let mut lie = vec![0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
    lie.extend_from_slice(&[0; 64]);
    let (s, _, _) = run(&v2_batch(SNAPPY, &lie, 1), MIB);
    assert_eq!(codes(&s), vec!["decompression_limit"]);
    // Xerial blocks with lying lengths.
    for length in [-1i32, i32::MAX, 1000] {
        let mut x = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        x.extend_from_slice(&length.to_be_bytes());
        x.extend_from_slice(b"abc");
        let (s, _, _) = run(&v2_batch(SNAPPY, &x, 1), MIB);
        assert_eq!(s.errors, vec![format!("decompression_failed: snappy: xerial block of {length} bytes in batch 0 at offset 0")]);
    }
}

#[test]
fn capture_budget_grows_with_input_only() {
    let n = (4 * MIB / 7) as usize;
    let bomb = v2_batch(ZSTD, &zstd(&tiny_records(n)), n as i32);
    let mut capture = CaptureBudget::new(10 * MIB, 64 * MIB, 16);
    let mut limited = 0;
    let mut counters = Counters::default();
    for _ in 0..20 {
        let mut frame = capture.frame(bomb.len() as u64);
        let s = summarize_records(&bomb, &mut frame, &mut counters);
        capture.settle(&frame);
        limited += usize::from(!s.errors.is_empty());
    }
    // 10 MiB base (+ a few KB of credit) decompress two bombs; the rest are flagged.
    assert_eq!(limited, 18);
    assert!(capture.remaining < MIB);
}

#[test]
fn large_frames_get_a_budget_in_proportion() {
    assert_eq!(Budget::for_frame(1000, 64 * MIB).remaining, 64 * MIB);
    assert_eq!(
        Budget::for_frame(4 * MIB, 64 * MIB).remaining,
        FRAME_RATIO * 4 * MIB
    );
    // A fixed cap, whatever the frame's size (a 32 MB frame once bought 1 GiB).
    assert_eq!(Budget::for_frame(u64::MAX, 0).remaining, FRAME_BUDGET_CAP);
    assert_eq!(
        Budget::for_frame(32 * MIB, 64 * MIB).remaining,
        FRAME_BUDGET_CAP
    );
    assert_eq!(Budget::for_frame(32 * MIB, 512 * MIB).remaining, 512 * MIB);
    // A run's own cap (--max-decompressed) bounds every frame, small ones too, and a
    // larger one lets a large frame scale past the default.
    assert_eq!(Budget::for_frame_capped(1000, 64 * MIB, MIB).remaining, MIB);
    assert_eq!(
        Budget::for_frame_capped(u64::MAX, 64 * MIB, 3 * MIB).remaining,
        3 * MIB
    );
    assert_eq!(
        Budget::for_frame_capped(32 * MIB, 64 * MIB, 2048 * MIB).remaining,
        FRAME_RATIO * 32 * MIB
    );
    assert_eq!(
        Budget::for_frame_capped(1000, 64 * MIB, 2048 * MIB).remaining,
        64 * MIB
    );
    // Within the capture's allowance all the same.
    let mut capture = CaptureBudget::new(0, 64 * MIB, 2);
    assert_eq!(capture.frame(10 * MIB).remaining, 20 * MIB);
}

#[test]
fn lengths_and_counts_from_the_wire_are_checked() {
    // Negative entry length, then garbage: reported, the walk stops.
    let mut data = v2_batch(NONE, &tiny_records(1), 1);
    data[8..12].copy_from_slice(&(-7i32).to_be_bytes());
    let (s, _, _) = run(&data, MIB);
    assert_eq!(
        s.errors,
        vec!["bad_batch_length: negative length in batch 0 at offset 0".to_string()]
    );
    // A length of i32::MAX: a partial batch, nothing sized from it.
    data[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    let (s, _, _) = run(&data, MIB);
    assert_eq!((s.partial_batches, s.errors.len()), (1, 0));
    // A records count of i32::MAX over two records.
    let (s, _, _) = run(&v2_batch(NONE, &tiny_records(2), i32::MAX), MIB);
    assert_eq!(s.records, 2);
    assert_eq!(
        s.errors,
        vec![format!(
            "record_count_mismatch: header says {}, found 2 in batch 0 at offset 0",
            i32::MAX
        )]
    );
    // A record length varint of ten bytes.
    let mut body = vec![0xFF; 10];
    body.push(0);
    let (s, _, _) = run(&v2_batch(NONE, &body, 1), MIB);
    assert_eq!(
        s.errors,
        vec!["bad_varint: longer than 5 bytes: record 0 length in batch 0 at offset 0".to_string()]
    );
    // A record whose length runs past the batch, one too short to be a record.
    let (s, _, _) = run(&v2_batch(NONE, &[0x7E, 0, 0], 1), MIB);
    assert_eq!(codes(&s), vec!["truncated_record"]);
    let (s, _, _) = run(&v2_batch(NONE, &[0x08, 0, 0, 0, 0], 1), MIB);
    assert_eq!(
        s.errors,
        vec!["bad_record_length: 4 for record 0 in batch 0 at offset 0".to_string()]
    );
    // Codec ids 5-7 and an unknown magic.
    let (s, _, _) = run(&v2_batch(7, &[1, 2, 3], 1), MIB);
    assert_eq!(
        (codes(&s), s.codecs),
        (vec!["unknown_codec"], CODEC_UNKNOWN_BIT)
    );
    let mut m3 = v2_batch(NONE, &tiny_records(1), 1);
    m3[16] = 3;
    let (s, _, _) = run(&m3, MIB);
    assert_eq!(
        s.errors,
        vec!["unknown_magic: 3 in batch 0 at offset 0".to_string()]
    );
}

#[test]
fn nested_wrappers_stop_at_the_nesting_bound() {
    let mut value = legacy(1, 0, Some(b"x"));
    for _ in 0..4 {
        value = legacy(1, 1, Some(&gzip(&value)));
    }
    let (s, _, c) = run(&value, MIB);
    assert_eq!(s.records, 0);
    assert_eq!(codes(&s), vec!["nesting_too_deep"]);
    assert_eq!(c.get(Counter::RecordsNestingTooDeep), 1);
    // A wrapper with a null value.
    let (s, _, _) = run(&legacy(1, 2, None), MIB);
    assert_eq!(
        s.errors,
        vec!["bad_compressed_message: null value in batch 0 at offset 0".to_string()]
    );
}

#[test]
fn error_floods_are_listed_up_to_the_cap_and_counted() {
    // 20 000 entries of 17 bytes with magic 9: one unknown_magic each.
    let mut entry = [0u8; 17];
    entry[8..12].copy_from_slice(&5i32.to_be_bytes());
    entry[16] = 9;
    let data = entry.repeat(20_000);
    let (s, _, c) = run(&data, MIB);
    assert_eq!(s.errors.len(), MAX_ERRORS + 1);
    assert_eq!(
        s.errors[MAX_ERRORS],
        format!("too_many_errors: {} more not listed", 20_000 - MAX_ERRORS)
    );
    assert_eq!(c.get(Counter::RecordsUnknownMagic), 20_000);
}

#[test]
fn random_and_mutated_input_never_panics() {
    // A small xorshift: no rand crate, same cases every run.
    let mut state: u64 = 0x9E3779B97F4A7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let records = tiny_records(50);
    let seeds = [
        v2_batch(GZIP, &gzip(&records), 50),
        v2_batch(SNAPPY, &snappy_raw(&records), 50),
        v2_batch(LZ4, &lz4(&records), 50),
        v2_batch(ZSTD, &zstd(&records), 50),
        legacy(1, 1, Some(&gzip(&legacy(1, 0, Some(b"abc"))))),
        legacy(0, 3, Some(&lz4(&legacy(0, 0, Some(b"abc"))))),
    ];
    let mut cases = 0;
    for seed in &seeds {
        for cut in 0..seed.len() {
            let (s, _, _) = run(&seed[..cut], 1 << 16);
            assert!(s.errors.len() <= MAX_ERRORS + 1);
            cases += 1;
        }
        for _ in 0..300 {
            let mut data = seed.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % data.len() as u64) as usize;
                data[at] ^= 1 << (next() % 8);
            }
            let (s, b, _) = run(&data, 1 << 16);
            assert!(b.used <= 1 << 16);
            assert_eq!(s.bytes, data.len() as u64);
            cases += 1;
        }
    }
    for _ in 0..2000 {
        let len = (next() % 300) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if len > 17 {
            data[16] = (next() % 3) as u8;
        }
        run(&data, 1 << 16);
        cases += 1;
    }
    assert!(cases > 3000);
}

// --- lz4 frame variants ------------------------------------------------------------

fn lz4_with(data: &[u8], info: lz4_flex::frame::FrameInfo) -> Vec<u8> {
    let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Every frame option lz4_flex writes (checksums, content size, linked blocks, blocks
/// over 64 KiB, two frames in a row) counts all records; a damaged checksum or size
/// fails the batch instead.
#[test]
fn lz4_frame_options_count_and_damage_fails() {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};

    let n = 30_000; // 210 000 bytes: four 64 KiB blocks
    let records = tiny_records(n);
    let checked = |mode: BlockMode, data: &[u8]| {
        let info = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(mode)
            .block_checksums(true)
            .content_checksum(true)
            .content_size(Some(data.len() as u64));
        lz4_with(data, info)
    };
    let mut two = lz4_with(&records[..7 * 1000], FrameInfo::new());
    two.extend_from_slice(&checked(BlockMode::Independent, &records[7 * 1000..]));
    let good = [
        lz4_with(&records, FrameInfo::new()),
        checked(BlockMode::Independent, &records),
        checked(BlockMode::Linked, &records),
        lz4_with(&records, FrameInfo::new().block_size(BlockSize::Max4MB)),
        two,
    ];
    for (i, body) in good.iter().enumerate() {
        let (s, b, _) = run(&v2_batch(LZ4, body, n as i32), 64 * MIB);
        assert_eq!(
            (s.records, s.errors.len()),
            (n as u64, 0),
            "frame {i}: {:?}",
            s.errors
        );
        assert_eq!(b.used, records.len() as u64, "frame {i}");
    }
    let framed = checked(BlockMode::Independent, &records);
    let mut bad_content = framed.clone();
    let last = bad_content.len() - 1;
    bad_content[last] ^= 1;
    let mut bad_block = framed.clone();
    bad_block[30] ^= 0x55; // inside the first block: its checksum no longer matches
    let mut bad_size = framed;
    bad_size[6] ^= 1; // content size, and with it the header checksum
    for (name, body) in [
        ("content", bad_content),
        ("block", bad_block),
        ("size", bad_size),
    ] {
        let (s, _, _) = run(&v2_batch(LZ4, &body, n as i32), 64 * MIB);
        assert_eq!(
            codes(&s),
            ["decompression_failed"],
            "{name}: {:?}",
            s.errors
        );
        assert_eq!(s.records, 0, "{name}");
    }
    // Over the budget: the limit error, and the header's count.
    let (s, _, _) = run(&v2_batch(LZ4, &good[1], n as i32), 100_000);
    assert_eq!(codes(&s), ["decompression_limit"], "{:?}", s.errors);
    assert_eq!(s.records, n as u64);
}
