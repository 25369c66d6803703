//! kafka/records.rs read for the analytics tables (`table_records`): counts, and with an
//! `Expansion` the offsets of the data records, as records.py's `parse_records(expand=True)`
//! keeps them; None wherever records.py would report an anomaly. The differential test
//! against records.py on real and damaged captures is tests/test_native_tables.py.

use _core::kafka::records::{table_records, Budget, Expansion, DEFAULT_MAX_DECOMPRESSED};
use _core::types::Counters;

const ITEMS: u64 = 256 * 1024 * 1024; // records.py's item budget of a frame
const OVERHEAD: u64 = 512;

fn zigzag(v: i64) -> u8 {
    u8::try_from((v << 1) ^ (v >> 63)).expect("a small value")
}

/// A v2 record: attributes, timestamp delta 0, `delta`, null key and value, `headers`
/// (the count written as given, then nothing), behind its length.
fn record(delta: i64, headers: i64) -> Vec<u8> {
    let body = [0, 0, zigzag(delta), zigzag(-1), zigzag(-1), zigzag(headers)];
    let mut r = vec![zigzag(body.len() as i64)];
    r.extend_from_slice(&body);
    r
}

/// A v2 batch at `base` holding `records` (uncompressed), CRC-32C fixed.
fn batch(base: i64, attributes: i16, records: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = records.concat();
    let mut b = Vec::new();
    b.extend_from_slice(&base.to_be_bytes());
    b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, set below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&((records.len() as i32) - 1).max(0).to_be_bytes());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&(records.len() as i32).to_be_bytes());
    b.extend_from_slice(&body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn expand(data: &[u8], items: u64) -> (Option<(u64, u64)>, Vec<i64>) {
    let mut budget = Budget::for_frame(data.len() as u64, DEFAULT_MAX_DECOMPRESSED);
    let mut x = Expansion::new(items, OVERHEAD);
    let got = table_records(data, &mut budget, Some(&mut x), &mut Counters::default());
    (got, x.offsets)
}

#[test]
fn data_records_give_their_offsets_and_control_batches_none() {
    let data = [
        batch(100, 0, &[record(0, 0), record(1, 0), record(2, 0)]),
        batch(103, 0x20, &[record(0, 0)]), // a transaction marker
        batch(104, 0, &[record(0, 0), record(5, 0)]),
    ]
    .concat();
    let (got, offsets) = expand(&data, ITEMS);
    assert_eq!(got, Some((6, data.len() as u64)));
    assert_eq!(offsets, vec![100, 101, 102, 104, 109]);
}

#[test]
fn a_cut_last_batch_is_not_an_anomaly() {
    let whole = batch(7, 0, &[record(0, 0)]);
    let cut = batch(8, 0, &[record(0, 0), record(1, 0)]);
    let data = [whole.clone(), cut[..cut.len() - 3].to_vec()].concat();
    let (got, offsets) = expand(&data, ITEMS);
    assert_eq!(got, Some((1, data.len() as u64)));
    assert_eq!(offsets, vec![7]);
}

#[test]
fn anomalies_inside_a_record_leave_the_field_to_python_counted_or_expanded() {
    // a header count past the record's bytes: counting reads each record's fields too
    // (issue #21: the pairs table lists what `decode --records` finds)
    let data = batch(0, 0, &[record(0, 3)]);
    let mut budget = Budget::for_frame(data.len() as u64, DEFAULT_MAX_DECOMPRESSED);
    assert_eq!(
        table_records(&data, &mut budget, None, &mut Counters::default()),
        None
    );
    assert_eq!(expand(&data, ITEMS).0, None);
}

#[test]
fn the_item_budget_is_records_pys() {
    let data = batch(0, 0, &[record(0, 0), record(1, 0)]);
    // the batch header (61 bytes) and two records of 6 bytes, each with its overhead
    let needed = 61 + OVERHEAD + 2 * (6 + OVERHEAD);
    assert!(expand(&data, needed).0.is_some());
    assert_eq!(expand(&data, needed - 1).0, None);
}

#[test]
fn a_bad_crc_or_a_damaged_record_is_an_anomaly() {
    let mut data = batch(0, 0, &[record(0, 0)]);
    let last = data.len() - 1;
    data[last] ^= 0x01; // the CRC no longer matches
    assert_eq!(expand(&data, ITEMS).0, None);
    let mut budget = Budget::for_frame(data.len() as u64, DEFAULT_MAX_DECOMPRESSED);
    assert_eq!(
        table_records(&data, &mut budget, None, &mut Counters::default()),
        None
    );
}
