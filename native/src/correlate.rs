//! Stage 4: Kafka frames of a connection -> request/response exchanges.
//! Port of `dissector/correlate.py`. OWNER: framing/correlate helper.
