//! Header peeks: request header fields, plausibility, resync start checks, body offset.

mod corr_common;

use _core::kafka::header::{
    body_offset, is_plausible_request, is_printable, looks_like_tls, peek_request, StartCheck,
};
use _core::types::Versions;
use corr_common::*;

/// TestVersions plus one header-v0 request, as the model reports ControlledShutdown v0.
struct WithHeaderV0;

impl Versions for WithHeaderV0 {
    fn known(&self, k: i16, v: i16) -> bool {
        TestVersions.known(k, v)
    }
    fn request_flexible(&self, k: i16, v: i16) -> bool {
        TestVersions.request_flexible(k, v)
    }
    fn request_header_v0(&self, k: i16, v: i16) -> bool {
        (k, v) == (7, 0)
    }
}

#[test]
fn peeks_key_version_correlation_id_and_client_id() {
    let p = req(42, 18, 3, b"rest");
    let s = peek_request(&p, &TestVersions).expect("header");
    assert_eq!((s.api_key, s.api_version, s.correlation_id), (18, 3, 42));
    assert_eq!((s.client_id.as_deref(), s.header_end), (Some("cli"), 13));
}

#[test]
fn null_client_id_header_v0_and_truncation() {
    let mut p = req(1, 3, 1, b"");
    p[8..10].copy_from_slice(&(-1i16).to_be_bytes());
    let s = peek_request(&p[..10], &TestVersions).expect("null client id");
    assert_eq!((s.client_id, s.header_end), (None, 10));
    // Header v0 has no client_id: 8 bytes are enough.
    let v0 = [0, 7, 0, 0, 0, 0, 0, 9];
    assert_eq!(
        peek_request(&v0, &WithHeaderV0).map(|s| s.header_end),
        Some(8)
    );
    assert_eq!(peek_request(&v0, &TestVersions), None);
    // A client_id longer than the bytes, or fewer than 8 bytes: nothing.
    assert_eq!(peek_request(&req(1, 3, 1, b"")[..12], &TestVersions), None);
    assert_eq!(peek_request(&[0, 3, 0, 1, 0, 0, 0], &TestVersions), None);
}

#[test]
fn plausible_request_needs_known_version_non_negative_id_and_printable_client_id() {
    assert!(is_plausible_request(&req(1, 3, 1, b""), &TestVersions));
    assert!(!is_plausible_request(&req(1, 3, 99, b""), &TestVersions));
    assert!(!is_plausible_request(&req(-1, 3, 1, b""), &TestVersions));
    let mut p = req(1, 3, 1, b"");
    p[10] = 0x07;
    assert!(!is_plausible_request(&p, &TestVersions));
}

#[test]
fn printable_follows_python_for_client_ids() {
    for s in ["cli", "consumer-1 x", "é", "\u{fffd}", "日本", ""] {
        assert!(is_printable(s), "{s:?}");
    }
    for s in [
        "a\tb", "\u{7f}", "\u{a0}", "\u{200b}", "\u{2028}", "\u{feff}", "\u{e000}", "\u{ffff}",
    ] {
        assert!(!is_printable(s), "{s:?}");
    }
}

#[test]
fn start_checks_by_role() {
    let max = 1 << 20;
    let request = wire(&req(1, 3, 1, b""));
    assert!(StartCheck::Request.check(&request, &request, &TestVersions, max));
    assert!(StartCheck::Either.check(&request, &request, &TestVersions, max));
    let response = [wire(&resp(1, b"\x00\x00")), wire(&resp(2, b""))].concat();
    assert!(StartCheck::Response.check(&response, &response, &TestVersions, max));
    assert!(!StartCheck::Request.check(&response, &response, &TestVersions, max));
    // A response size whose end is followed by an insane size prefix.
    let bad = [&wire(&resp(1, b""))[..], &[0x80, 0, 0, 0][..]].concat();
    assert!(!StartCheck::Response.check(&bad, &bad, &TestVersions, max));
    // Ending beyond the bytes we have is accepted: nothing to check after it.
    let long = [&(5000i32).to_be_bytes()[..], &[0u8; 10][..]].concat();
    assert!(StartCheck::Response.check(&long, &long, &TestVersions, max));
    assert!(!StartCheck::Response.check(&[0, 0, 0, 9], &[0, 0, 0, 9], &TestVersions, max));
}

#[test]
fn body_offset_skips_header_tagged_fields_within_the_bytes() {
    let p = req(1, PRODUCE, 9, &[2, 0, 1, 0xaa, 5, 0, 9, 9]);
    let s = peek_request(&p, &TestVersions).expect("header");
    assert_eq!(body_offset(&p, &s, true), Some(s.header_end + 6));
    assert_eq!(body_offset(&p, &s, false), Some(s.header_end));
    // A tag whose size runs past the bytes, a varint that never ends, a huge tag count.
    for tail in [
        &[1u8, 0, 50][..],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0xff, 0xff, 0xff, 0x7f, 0, 0],
    ] {
        let p = req(1, PRODUCE, 9, tail);
        let s = peek_request(&p, &TestVersions).expect("header");
        assert_eq!(body_offset(&p, &s, true), None, "{tail:?}");
    }
}

#[test]
fn tls_record_start() {
    assert!(looks_like_tls(&[0x16, 0x03, 0x01]));
    assert!(looks_like_tls(&[0x17, 0x03, 0x04, 0x00]));
    assert!(!looks_like_tls(&[0x16, 0x03, 0x05]));
    assert!(!looks_like_tls(&[0x18, 0x03, 0x01]));
    assert!(!looks_like_tls(&[0x16, 0x03]));
}
