//! The pure-Rust pipeline (`pipeline`): a capture file through the wire stages,
//! summaries and the row sink with no Python at all (`NoFallback`), as examples and
//! other Rust callers use it.

use std::sync::Arc;

use _core::capture::open_path;
use _core::counter::Counter;
use _core::kafka::model::Model;
use _core::kafka::session::{Session, SessionConfig};
use _core::pipeline::{run_file, NoFallback, RowSink, Stages, Summaries};
use _core::rows::{Nullable, RowBuilder};
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

const MIXED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../captures/kafka-4-mixed.pcapng"
);

/// A row's identity and what its bodies gave: (stream, correlation id, api key,
/// request time, error code, records), None where null.
type RowKey = [Option<i64>; 6];

/// What a run of the mixed capture gave: its rows, and the wire stages' counts.
struct Ran {
    rows: Vec<RowKey>,
    steps: usize,
    frames: u64,
    tcp_packets: u64,
}

/// The mixed capture through the pipeline in steps of at least `max_rows` rows, the
/// halves placed by `stages`.
fn run_mixed(stages: Stages, max_rows: usize) -> Ran {
    let model = Arc::new(bare_model());
    let cfg = SessionConfig {
        broker_ports: vec![9092, 9094],
        heuristic: false,
        max_frame: 100 << 20,
        idle_timeout_ns: None,
        sasl_handshake_key: model.sasl_handshake_key,
        produce_key: model.produce_key,
    };
    let mut reader = open_path(MIXED).expect("capture");
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
    let (mut rows, mut steps) = (Vec::new(), 0);
    loop {
        let (result, ended) = run_file(
            &mut reader,
            &mut session,
            &mut summaries,
            &mut sink,
            &mut counters,
            true,
            max_rows,
            stages,
        );
        assert!(result.is_ok());
        steps += 1;
        if ended {
            sink.take_all_held();
        }
        rows.extend(row_keys(&sink.rows));
        sink.rows.clear();
        if ended {
            break;
        }
        assert!(steps < 10_000, "the run does not end");
    }
    Ran {
        rows,
        steps,
        frames: counters.get(Counter::Frames),
        tcp_packets: counters.get(Counter::TcpPackets),
    }
}

fn row_keys(rows: &RowBuilder) -> Vec<RowKey> {
    let at = |c: &Nullable<i64>, i: usize| c.valid[i].then(|| c.values[i]);
    (0..rows.len)
        .map(|i| {
            [
                at(&rows.stream, i),
                at(&rows.correlation_id, i),
                at(&rows.api_key, i),
                at(&rows.request_time, i),
                at(&rows.error_code, i),
                at(&rows.records, i),
            ]
        })
        .collect()
}

#[test]
fn a_capture_runs_through_the_pipeline_without_python() {
    // One step reads the whole (small) capture: max_rows is far above its pairs.
    let ran = run_mixed(Stages::Threaded, 1 << 20);
    // captures/README.md: dumpcap recorded 1814 packets, every one TCP to or from a
    // broker port; the pairs' rows came out of the row sink.
    assert_eq!(ran.frames, 1814);
    assert_eq!(ran.tcp_packets, 1814);
    assert!(ran.rows.len() > 400, "{} rows", ran.rows.len());
    assert_eq!(ran.steps, 1);
}

#[test]
fn the_halves_on_one_thread_give_what_two_threads_give() {
    let whole = run_mixed(Stages::Threaded, 1 << 20);
    for max_rows in [1, 37, 1 << 20] {
        for stages in [Stages::Threaded, Stages::Inline] {
            let ran = run_mixed(stages, max_rows);
            assert_eq!(
                (ran.frames, ran.tcp_packets),
                (whole.frames, whole.tcp_packets),
                "{stages:?}, steps of {max_rows} rows"
            );
            // the same rows in the same order, whatever the steps
            assert!(
                ran.rows == whole.rows,
                "{stages:?}, steps of {max_rows} rows: {} rows against {}",
                ran.rows.len(),
                whole.rows.len()
            );
            // exchanges go to the summaries 256 at a time (`BATCH`): a full step ends
            // after the first batch of this capture's two
            if max_rows < 256 {
                assert!(ran.steps >= 2, "{stages:?}: {} steps", ran.steps);
            }
        }
    }
}
