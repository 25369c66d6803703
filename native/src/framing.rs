//! Stage 3: in-order chunks of one direction -> size-prefixed Kafka frames.
//! Port of `dissector/framing.py` (resync, TLS detection). OWNER: framing/correlate helper.
