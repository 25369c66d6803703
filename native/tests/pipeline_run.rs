//! The pure-Rust pipeline (`pipeline`): a capture file through the wire stages,
//! summaries and the row sink with no Python at all (`NoFallback`), as examples and
//! other Rust callers use it.

use std::sync::Arc;

use _core::capture::open_path;
use _core::counter::Counter;
use _core::kafka::model::Model;
use _core::kafka::session::{Session, SessionConfig};
use _core::pipeline::{run_file, NoFallback, RowSink, Summaries};
use _core::rows::RowBuilder;
use _core::types::Counters;
use serde_json::json;

/// A spec model without layouts: enough for the wire stages (frames are cut by their
/// size prefix on the broker ports) and for rows naming what they could not decode.
fn bare_model() -> Model {
    // The role bits the model must name (`export.ROLES`), numbered as export.py does.
    let names = [
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
    let roles: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), json!(1u32 << i)))
        .collect();
    let text = json!({
        "format": 1,
        "roles": roles,
        "api_names": {},
        "errors": {},
        "id_sources": [],
        "zero_uuid": "00000000-0000-0000-0000-000000000000",
        "produce": {"api_key": 0, "acks_field": "acks"},
        "sasl_handshake_key": 17,
        "specless_keys": {"api_keys": [], "max_version": 15},
        "unsupported_version_fallback": {"api_key": 18, "error_code": 35, "version": 0},
        "extracts": [],
        "layouts": [],
    })
    .to_string();
    Model::from_json(&text).expect("bare model")
}

#[test]
fn a_capture_runs_through_the_pipeline_without_python() {
    let capture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../captures/kafka-4-mixed.pcapng"
    );
    let model = Arc::new(bare_model());
    let cfg = SessionConfig {
        broker_ports: vec![9092, 9094],
        heuristic: false,
        max_frame: 100 << 20,
        idle_timeout_ns: None,
        sasl_handshake_key: model.sasl_handshake_key,
        produce_key: model.produce_key,
    };
    let mut reader = open_path(capture).expect("capture");
    let mut session = Session::new(cfg, model.clone());
    let mut summaries = Summaries::new(
        model.clone(),
        64 << 20,
        256 << 20,
        1 << 32,
        NoFallback,
        None,
    );
    let mut sink = RowSink::new(RowBuilder::new(0), false, true, Vec::new());
    let mut counters = Counters::default();
    summaries.start("mixed");
    sink.start("mixed");
    // One step reads the whole (small) capture: max_rows is far above its pairs.
    let (result, ended) = run_file(
        &mut reader,
        &mut session,
        &mut summaries,
        &mut sink,
        &mut counters,
        true,
        1 << 20,
    );
    assert!(result.is_ok() && ended);
    sink.take_all_held();
    // captures/README.md: dumpcap recorded 1814 packets, every one TCP to or from a
    // broker port; the pairs' rows came out of the row sink.
    assert_eq!(counters.get(Counter::Frames), 1814);
    assert_eq!(counters.get(Counter::TcpPackets), 1814);
    assert!(sink.rows.len > 400, "{} rows", sink.rows.len);
}
