//! Kafka request/response header peeks used by framing resync and correlation.
//! Port of `dissector/kafka_header.py`. OWNER: framing/correlate helper.
