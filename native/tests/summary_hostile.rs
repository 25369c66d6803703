//! The summary walk on hostile frames (issue #11) and on hand-built ones whose columns
//! are known. The model is a small hand-written one in `export.py`'s JSON shape; the
//! differential test against Python (tests/test_native_summary.py) covers the real one.

use std::time::Instant;

use _core::counter::Counter;
use _core::kafka::model::{Direction, Model, MAX_DEPTH};
use _core::kafka::records::Budget;
use _core::kafka::summary::{summarize, Summary, TopicNames, MAX_TOPICS};
use _core::types::{Counters, Versions};
use serde_json::{json, Value};

const ROLE_NAMES: [&str; 21] = [
    "visit",
    "error",
    "partitions",
    "topic_array",
    "topic_of_items",
    "topic_strings",
    "records",
    "size_struct",
    "item_topic",
    "item_topic_name",
    "item_name",
    "item_topic_id",
    "partition_key",
    "top_error",
    "throttle",
    "top_topic",
    "learn_topics",
    "learn_id",
    "learn_name",
    "generic",
    "item_odd",
];

/// Role bits in this test's numbering (the JSON's `roles` table says it to the reader).
fn r(names: &[&str]) -> u32 {
    names
        .iter()
        .map(|n| 1u32 << ROLE_NAMES.iter().position(|x| x == n).expect("role name"))
        .sum()
}

fn f(name: &str, ty: &str, roles: u32) -> Value {
    json!({"name": name, "type": ty, "roles": roles})
}

fn array(name: &str, ty: &str, roles: u32, fields: Vec<Value>) -> Value {
    json!({"name": name, "type": ty, "array": true, "roles": roles, "fields": fields})
}

fn layout(
    api_key: i16,
    version: i16,
    direction: &str,
    flexible: bool,
    header: u8,
    fields: Vec<Value>,
) -> Value {
    json!({"api_key": api_key, "version": version, "direction": direction, "flexible": flexible,
           "header_version": header, "generic": false, "fields": fields})
}

fn model_json(layouts: Vec<Value>) -> String {
    let roles: serde_json::Map<String, Value> = ROLE_NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), json!(1u32 << i)))
        .collect();
    json!({
        "format": 1,
        "roles": roles,
        "api_names": {"1": "Fetch", "3": "Metadata", "18": "ApiVersions", "1000": "Vendor"},
        "errors": {"0": "NONE", "3": "UNKNOWN_TOPIC_OR_PARTITION"},
        "id_sources": [3],
        "zero_uuid": "00000000-0000-0000-0000-000000000000",
        "produce": {"api_key": 0, "acks_field": "acks"},
        "sasl_handshake_key": 17,
        "specless_keys": {"api_keys": [4, 5, 6, 7], "max_version": 15},
        "unsupported_version_fallback": {"api_key": 18, "error_code": 35, "version": 0},
        "extracts": [{"column": "max_wait_ms", "direction": "request", "api_keys": [1], "field": "max_wait_ms"}],
        "layouts": layouts,
    })
    .to_string()
}

fn test_model() -> Model {
    let item_topics = r(&["visit", "topic_array", "topic_of_items"]);
    let layouts = vec![
        // Metadata v1 request: an array of one-string structs
        layout(
            3,
            1,
            "request",
            false,
            1,
            vec![array(
                "topics",
                "struct",
                item_topics,
                vec![f("name", "string", r(&["visit", "item_name"]))],
            )],
        ),
        layout(
            3,
            1,
            "response",
            false,
            0,
            vec![f("throttle_time_ms", "int32", r(&["visit", "throttle"]))],
        ),
        // Metadata v12 response (flexible): learns topic ids
        layout(3, 12, "request", true, 2, vec![]),
        layout(
            3,
            12,
            "response",
            true,
            1,
            vec![
                f("throttle_time_ms", "int32", r(&["visit", "throttle"])),
                array(
                    "brokers",
                    "struct",
                    0,
                    vec![f("node_id", "int32", 0), f("host", "string", 0)],
                ),
                array(
                    "topics",
                    "struct",
                    item_topics | r(&["learn_topics"]),
                    vec![
                        f("error_code", "int16", r(&["visit", "error"])),
                        f("name", "string", r(&["visit", "item_name", "learn_name"])),
                        f(
                            "topic_id",
                            "uuid",
                            r(&["visit", "item_topic_id", "learn_id"]),
                        ),
                        array(
                            "partitions",
                            "struct",
                            r(&["visit", "partitions", "partition_key"]),
                            vec![
                                f("error_code", "int16", r(&["visit", "error"])),
                                f("partition_index", "int32", 0),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        // Fetch v13 request: topics by id only
        layout(
            1,
            13,
            "request",
            true,
            2,
            vec![
                f("max_wait_ms", "int32", 0),
                array(
                    "topics",
                    "struct",
                    item_topics,
                    vec![
                        f("topic_id", "uuid", r(&["visit", "item_topic_id"])),
                        array(
                            "partitions",
                            "int32",
                            r(&["visit", "partitions", "partition_key"]),
                            vec![],
                        ),
                    ],
                ),
            ],
        ),
        // ApiVersions: v3 answers "unsupported version" in the v0 layout
        layout(
            18,
            0,
            "response",
            false,
            0,
            vec![
                f("error_code", "int16", r(&["visit", "error", "top_error"])),
                array("api_keys", "struct", 0, vec![f("api_key", "int16", 0)]),
            ],
        ),
        layout(
            18,
            3,
            "response",
            true,
            0,
            vec![
                f("error_code", "int16", r(&["visit", "error", "top_error"])),
                f("throttle_time_ms", "int32", r(&["visit", "throttle"])),
            ],
        ),
        // entries whose own name comes after the topics nested in them
        layout(
            1001,
            0,
            "request",
            false,
            1,
            vec![array(
                "groups",
                "struct",
                r(&["visit"]),
                vec![array(
                    "topic_partitions",
                    "struct",
                    r(&["visit", "topic_array", "topic_of_items", "partitions"]),
                    vec![
                        array(
                            "topics",
                            "string",
                            r(&["visit", "topic_array", "topic_strings"]),
                            vec![],
                        ),
                        f("name", "string", r(&["visit", "item_name"])),
                    ],
                )],
            )],
        ),
        // a vendor request with tagged fields, one of them a known topic string
        layout(
            1000,
            0,
            "request",
            true,
            2,
            vec![
                f("count", "int32", 0),
                json!({"name": "topic", "type": "string", "tag": 0, "roles": r(&["visit", "top_topic"])}),
                json!({"name": "note", "type": "int32", "tag": 1}),
            ],
        ),
    ];
    Model::from_json(&model_json(layouts)).expect("test model")
}

fn run(
    model: &Model,
    names: &mut TopicNames,
    key: i16,
    version: i16,
    req: Option<&[u8]>,
    resp: Option<&[u8]>,
) -> (Summary, Counters) {
    let mut budget = Budget::per_frame(64 << 20);
    let mut counters = Counters::default();
    let s = summarize(
        model,
        names,
        key,
        version,
        req,
        resp,
        &mut budget,
        &mut counters,
    );
    (s, counters)
}

fn request_header(key: i16, version: i16, flexible: bool) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&7i32.to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes()); // null client_id
    if flexible {
        out.push(0); // no header tags
    }
    out
}

fn compact_str(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8 + 1);
    out.extend_from_slice(s.as_bytes());
}

const ID_A: [u8; 16] = [0xab; 16];

/// A Metadata v12 response: topic "orders" with id ID_A and two partitions, one failing.
fn metadata_v12_response() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&9i32.to_be_bytes()); // correlation id
    b.push(0); // header tags
    b.extend_from_slice(&5i32.to_be_bytes()); // throttle
    b.push(2); // one broker
    b.extend_from_slice(&1i32.to_be_bytes());
    compact_str(&mut b, "host");
    b.push(0);
    b.push(3); // two topics
    for (name, id) in [("orders", ID_A), ("zero", [0u8; 16])] {
        b.extend_from_slice(&0i16.to_be_bytes());
        compact_str(&mut b, name);
        b.extend_from_slice(&id);
        b.push(3); // two partitions
        for (code, index) in [(0i16, 0i32), (3, 1)] {
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&index.to_be_bytes());
            b.push(0);
        }
        b.push(0);
    }
    b.push(0);
    b
}

fn fetch_v13_request(id: [u8; 16]) -> Vec<u8> {
    let mut b = request_header(1, 13, true);
    b.extend_from_slice(&500i32.to_be_bytes());
    b.push(2); // one topic
    b.extend_from_slice(&id);
    b.push(4); // three partitions
    for p in 0..3i32 {
        b.extend_from_slice(&p.to_be_bytes());
    }
    b.push(0);
    b.push(0);
    b
}

#[test]
fn a_flexible_response_gives_every_column_and_teaches_topic_ids() {
    let model = test_model();
    let mut names = TopicNames::new();
    let req = request_header(3, 12, true)
        .into_iter()
        .chain([0])
        .collect::<Vec<u8>>();
    let resp = metadata_v12_response();
    let (s, _) = run(&model, &mut names, 3, 12, Some(&req), Some(&resp));
    assert!(!s.defer, "{s:?}");
    assert_eq!(s.topics, ["orders", "zero"]);
    assert_eq!(s.throttle_ms, Some(5));
    assert_eq!(s.error_code, Some(3)); // the first non-zero nested code
    assert_eq!(s.error_name.as_deref(), Some("UNKNOWN_TOPIC_OR_PARTITION"));
    assert_eq!(s.error_count, 2);
    assert_eq!(s.partitions, Some(4));
    // the zero uuid is never learnt
    assert_eq!(names.len(), 1);
    assert_eq!(
        names.name("abababab-abab-abab-abab-abababababab"),
        Some("orders")
    );

    // a later Fetch by id resolves the name; an unknown id stays an id
    let (s, _) = run(
        &model,
        &mut names,
        1,
        13,
        Some(&fetch_v13_request(ID_A)),
        None,
    );
    assert_eq!(s.topics, ["orders"]);
    assert_eq!(s.partitions, Some(3));
    assert_eq!(s.extracts, [Some(500)]);
    assert_eq!(s.error_code, None);
    let (s, _) = run(
        &model,
        &mut names,
        1,
        13,
        Some(&fetch_v13_request([1; 16])),
        None,
    );
    assert_eq!(s.topics, ["01010101-0101-0101-0101-010101010101"]);
}

#[test]
fn every_cut_of_a_frame_defers_and_nothing_is_learnt() {
    let model = test_model();
    let full = metadata_v12_response();
    for cut in 0..full.len() {
        let mut names = TopicNames::new();
        let (s, _) = run(&model, &mut names, 3, 12, None, Some(&full[..cut]));
        assert!(s.defer, "cut at {cut}: {s:?}");
        assert!(names.is_empty(), "cut at {cut} taught ids");
    }
    let mut longer = full.clone();
    longer.push(0);
    let mut names = TopicNames::new();
    let (s, _) = run(&model, &mut names, 3, 12, None, Some(&longer));
    assert_eq!((s.defer, s.defer_reason), (true, Some("trailing_bytes")));
    assert_eq!(
        names.len(),
        1,
        "Python learns from a response with trailing bytes (no decode error)"
    );
}

#[test]
fn fifty_million_empty_topic_names_are_counted_not_kept() {
    let model = test_model();
    // Issue #11's 100 MB frame in release builds; a tenth of it in debug, where each
    // element costs ~0.5 us (the walk is linear in the bytes either way).
    let n: usize = if cfg!(debug_assertions) {
        5_000_000
    } else {
        50_000_000
    };
    let mut req = request_header(3, 1, false);
    req.reserve(4 + 2 * n);
    req.extend_from_slice(&(n as i32).to_be_bytes());
    req.resize(req.len() + 2 * n, 0); // each name: int16 length 0
    let started = Instant::now();
    let (s, _) = run(&model, &mut TopicNames::new(), 3, 1, Some(&req), None);
    assert!(!s.defer, "{s:?}");
    assert!(s.topics.is_empty()); // an empty name names no topic (Python's `value and ...`)
    assert!(
        started.elapsed().as_secs() < 60,
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn distinct_topics_are_bounded_per_pair_and_counted() {
    let model = test_model();
    let n = MAX_TOPICS + 5_000;
    let mut req = request_header(3, 1, false);
    req.extend_from_slice(&(n as i32).to_be_bytes());
    for i in 0..n {
        let name = format!("t{i:07}");
        req.extend_from_slice(&(name.len() as i16).to_be_bytes());
        req.extend_from_slice(name.as_bytes());
    }
    let (s, counters) = run(&model, &mut TopicNames::new(), 3, 1, Some(&req), None);
    assert!(!s.defer);
    assert_eq!(s.topics.len(), MAX_TOPICS);
    assert_eq!(s.topics[0], "t0000000");
    assert_eq!(counters.get(Counter::SummaryTopicsTruncated), 1);
}

#[test]
fn counts_and_lengths_beyond_the_bytes_defer_without_allocating() {
    let model = test_model();
    // array count i32::MAX with four bytes behind it
    let mut req = request_header(3, 1, false);
    req.extend_from_slice(&i32::MAX.to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0]);
    let (s, _) = run(&model, &mut TopicNames::new(), 3, 1, Some(&req), None);
    assert_eq!((s.defer, s.defer_reason), (true, Some("array_count")));
    // a string length past the end
    let mut req = request_header(3, 1, false);
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&i16::MAX.to_be_bytes());
    let (s, _) = run(&model, &mut TopicNames::new(), 3, 1, Some(&req), None);
    assert_eq!((s.defer, s.defer_reason), (true, Some("short")));
    // a compact count of 2^35 - 1 (the largest five-byte varint), and a sixth byte
    for varint in [
        &[0xff, 0xff, 0xff, 0xff, 0x7f][..],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..],
    ] {
        let mut resp = vec![0, 0, 0, 9, 0, 0, 0, 0, 5];
        resp.extend_from_slice(varint);
        let (s, _) = run(&model, &mut TopicNames::new(), 3, 12, None, Some(&resp));
        assert!(s.defer, "{varint:?}");
    }
    // a tagged-field section announcing more fields than bytes
    let mut req = request_header(1000, 0, true);
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&[0xff, 0xff, 0x03]);
    let (s, _) = run(&model, &mut TopicNames::new(), 1000, 0, Some(&req), None);
    assert_eq!((s.defer, s.defer_reason), (true, Some("short")));
    // unknown versions and keys
    let req = request_header(3, 99, false);
    let (s, _) = run(&model, &mut TopicNames::new(), 3, 99, Some(&req), None);
    assert_eq!(
        (s.defer, s.defer_reason),
        (true, Some("unsupported_version"))
    );
}

#[test]
fn tagged_fields_decode_from_their_own_bytes() {
    let model = test_model();
    let mut req = request_header(1000, 0, true);
    req.extend_from_slice(&1i32.to_be_bytes());
    req.push(3); // three tagged fields: unknown 9, topic (with a spare byte), note
    req.extend_from_slice(&[9, 2, 0xde, 0xad]);
    req.extend_from_slice(&[0, 5, 4, b'a', b'b', b'c', 0xee]);
    req.extend_from_slice(&[1, 4, 0, 0, 0, 1]);
    let (s, _) = run(&model, &mut TopicNames::new(), 1000, 0, Some(&req), None);
    assert!(!s.defer, "{s:?}");
    assert_eq!(s.topics, ["abc"]);
    // a known tag whose bytes are too few for its type
    let mut bad = request_header(1000, 0, true);
    bad.extend_from_slice(&1i32.to_be_bytes());
    bad.extend_from_slice(&[1, 1, 2, 0, 0]);
    let (s, _) = run(&model, &mut TopicNames::new(), 1000, 0, Some(&bad), None);
    assert!(s.defer);
    // a known tag given twice
    let mut twice = request_header(1000, 0, true);
    twice.extend_from_slice(&1i32.to_be_bytes());
    twice.extend_from_slice(&[2, 1, 4, 0, 0, 0, 1, 1, 4, 0, 0, 0, 2]);
    let (s, _) = run(&model, &mut TopicNames::new(), 1000, 0, Some(&twice), None);
    assert_eq!((s.defer, s.defer_reason), (true, Some("duplicate_tag")));
}

#[test]
fn invalid_utf8_is_replaced_as_python_does() {
    let model = test_model();
    let mut req = request_header(3, 1, false);
    req.extend_from_slice(&1i32.to_be_bytes());
    let raw = b"a\xffb\xed\xa0\x80c\xe2\x82";
    req.extend_from_slice(&(raw.len() as i16).to_be_bytes());
    req.extend_from_slice(raw);
    let (s, _) = run(&model, &mut TopicNames::new(), 3, 1, Some(&req), None);
    // bytes.decode("utf-8", "replace") gives 'a\ufffdb\ufffd\ufffd\ufffdc\ufffd'
    assert_eq!(s.topics, ["a\u{fffd}b\u{fffd}\u{fffd}\u{fffd}c\u{fffd}"]);
}

#[test]
fn garbage_after_every_header_never_panics() {
    let model = test_model();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for l in &model.layouts {
        for _ in 0..2_000 {
            let len = (next() % 64) as usize;
            let mut body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let (req, resp) = match l.direction {
                Direction::Request => {
                    let mut h = request_header(l.api_key, l.version, l.flexible);
                    h.append(&mut body);
                    (Some(h), None)
                }
                Direction::Response => (None, Some(body)),
            };
            let mut names = TopicNames::new();
            let _ = run(
                &model,
                &mut names,
                l.api_key,
                l.version,
                req.as_deref(),
                resp.as_deref(),
            );
        }
    }
}

#[test]
fn nesting_deeper_than_the_bound_is_refused_at_load() {
    let mut field = f("leaf", "int8", 0);
    for i in 0..=MAX_DEPTH + 1 {
        field = json!({"name": format!("s{i}"), "type": "struct", "fields": [field]});
    }
    let err = Model::from_json(&model_json(vec![layout(
        3,
        1,
        "request",
        false,
        1,
        vec![field],
    )]))
    .unwrap_err();
    assert!(err.contains("deeper"), "{err}");
    assert!(Model::from_json("{\"format\": 2}").is_err());
}

#[test]
fn versions_come_from_the_model() {
    let model = test_model();
    assert!(model.known(3, 12) && !model.known(3, 99));
    assert!(model.known(5, 15) && !model.known(5, 16)); // keys no spec describes
    assert!(model.request_flexible(1, 13) && !model.request_flexible(3, 1));
    let body = fetch_v13_request(ID_A);
    let header_len = request_header(1, 13, true).len();
    assert_eq!(
        model.request_int_field(1, 13, &body[header_len..], "max_wait_ms"),
        Some(500)
    );
    assert_eq!(
        model.request_int_field(1, 13, &body[header_len..header_len + 2], "max_wait_ms"),
        None
    );
    assert_eq!(
        model.request_int_field(1, 13, &body[header_len..], "topics"),
        None
    );
    assert_eq!(model.api_name(3), "Metadata");
    assert_eq!(model.api_name(999), "Unknown(999)");
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

#[test]
fn an_entry_names_its_topic_before_the_topics_inside_it() {
    // summary._run_array calls _topic_of(item) before walking the item's members
    let model = test_model();
    let mut req = request_header(1001, 0, false);
    req.extend_from_slice(&1i32.to_be_bytes()); // one group
    req.extend_from_slice(&2i32.to_be_bytes()); // two entries
    for (inner, own) in [(["b", "a"], "a"), (["c", "b"], "d")] {
        req.extend_from_slice(&2i32.to_be_bytes());
        for t in inner {
            string(&mut req, t);
        }
        string(&mut req, own);
    }
    let (s, _) = run(&model, &mut TopicNames::new(), 1001, 0, Some(&req), None);
    assert!(!s.defer, "{s:?}");
    assert_eq!(s.topics, ["a", "b", "d", "c"]);
    assert_eq!(s.partitions, Some(2));
}

#[test]
fn an_unsupported_version_answer_is_read_in_the_fallback_layout() {
    let model = test_model();
    let mut resp = vec![0, 0, 0, 1];
    resp.extend_from_slice(&35i16.to_be_bytes());
    resp.extend_from_slice(&1i32.to_be_bytes());
    resp.extend_from_slice(&18i16.to_be_bytes());
    let (s, _) = run(&model, &mut TopicNames::new(), 18, 3, None, Some(&resp));
    assert!(!s.defer, "{s:?}");
    assert_eq!((s.error_code, s.throttle_ms), (Some(35), None));
    // the same bytes with another error are a v3 body with bytes left over
    resp[5] = 36;
    let (s, _) = run(&model, &mut TopicNames::new(), 18, 3, None, Some(&resp));
    assert!(s.defer);
}

#[test]
fn layouts_are_found_by_exact_numbers_also_outside_the_dense_tables() {
    // keys and versions below, inside and past the arrays `Model::layout` indexes
    let numbers: [(i16, i16); 5] = [(7, 0), (7, 3), (1500, 2), (8, 2000), (9, -1)];
    let mut layouts: Vec<Value> = numbers
        .iter()
        .flat_map(|&(k, v)| {
            ["request", "response"]
                .map(|d| layout(k, v, d, true, 1, vec![f("x", "int32", r(&["visit"]))]))
        })
        .collect();
    layouts.push(layout(7, 1, "request", true, 1, vec![]));
    let mut j: Value = serde_json::from_str(&model_json(layouts)).unwrap();
    j["assumed_layouts"] = json!([[7, "request", 3], [1500, "response", 2]]);
    let model = Model::from_json(&j.to_string()).expect("model");
    for &(k, v) in &numbers {
        for d in [Direction::Request, Direction::Response] {
            let l = model.layout(k, v, d).expect("listed layout");
            assert_eq!((l.api_key, l.version, l.direction), (k, v, d));
        }
    }
    let req = Direction::Request;
    assert!(model.layout(7, 1, Direction::Response).is_none());
    for (k, v) in [
        (7, 2),
        (7, 4),
        (1500, 1),
        (8, 1999),
        (9, -2),
        (-7, 0),
        (i16::MAX, i16::MAX),
    ] {
        assert!(model.layout(k, v, req).is_none(), "{k} v{v}");
    }
    assert_eq!(model.assumed_layout(7, 9, req).map(|l| l.version), Some(3));
    assert!(model.assumed_layout(7, 3, req).is_none()); // not newer
    assert!(model.assumed_layout(7, 9, Direction::Response).is_none());
    let resp = model.assumed_layout(1500, 5, Direction::Response);
    assert_eq!(resp.map(|l| (l.api_key, l.version)), Some((1500, 2)));
    assert!(model.assumed_layout(1501, 5, Direction::Response).is_none());
}

#[test]
fn fixed_members_skipped_together_leave_the_read_ones_in_place() {
    // response: fixed runs around an error code and the throttle, a string and an array
    // between them, and entries whose fixed members frame a partition key
    let item_topics = r(&["visit", "topic_array", "topic_of_items"]);
    let fields = vec![
        f("a", "int64", 0),
        f("b", "int8", 0),
        f("throttle_time_ms", "int32", r(&["visit", "throttle"])),
        f("c", "int16", 0),
        f("s", "string", 0),
        f("d", "uuid", 0),
        f("error_code", "int16", r(&["visit", "error", "top_error"])),
        array(
            "topics",
            "struct",
            item_topics,
            vec![
                f("w", "int32", 0),
                f("name", "string", r(&["visit", "item_name"])),
                f("x", "int64", 0),
                f("partition_index", "int32", r(&["partition_key"])),
                f("y", "int16", 0),
            ],
        ),
        f("e", "int32", 0),
    ];
    let layouts = vec![
        layout(5, 0, "request", false, 1, vec![]),
        layout(5, 0, "response", false, 0, fields),
    ];
    let model = Model::from_json(&model_json(layouts)).expect("model");
    let req = request_header(5, 0, false);
    let mut resp = 1i32.to_be_bytes().to_vec(); // correlation id
    resp.extend_from_slice(&[0xee; 9]); // a, b
    resp.extend_from_slice(&250i32.to_be_bytes());
    resp.extend_from_slice(&[0xee; 2]); // c
    string(&mut resp, "skip me");
    resp.extend_from_slice(&[0xee; 16]); // d
    resp.extend_from_slice(&3i16.to_be_bytes());
    resp.extend_from_slice(&2i32.to_be_bytes()); // two topics
    for name in ["left", "right"] {
        resp.extend_from_slice(&[0xee; 4]);
        string(&mut resp, name);
        resp.extend_from_slice(&[0xee; 14]); // x, partition_index, y
    }
    resp.extend_from_slice(&[0xee; 4]); // e
    let mut names = TopicNames::new();
    let (s, _) = run(&model, &mut names, 5, 0, Some(&req), Some(&resp));
    assert!(!s.defer, "{:?}", s.defer_reason);
    assert_eq!(s.throttle_ms, Some(250));
    assert_eq!(s.error_code, Some(3));
    assert_eq!(s.topics, ["left", "right"]);
    // every cut, inside a merged run or not, defers the pair (a count cut from its
    // entries is refused before them)
    for cut in 4..resp.len() {
        let (s, _) = run(&model, &mut names, 5, 0, Some(&req), Some(&resp[..cut]));
        let reason = s.defer_reason;
        assert!(
            matches!(reason, Some("short" | "array_count")),
            "cut at {cut}: {reason:?}"
        );
    }
}
