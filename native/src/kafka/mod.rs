//! Kafka frames out of TCP streams, paired into exchanges, and what a pair's bodies say.
//!
//! Wire: `header` (the request/response header peeks), `framing` (stage 3: chunks ->
//! frames), `correlate` (stage 4: frames -> exchanges), `session` (one packet source
//! through reassembly, TLS, framing and correlation). Bodies: `model` (the spec model
//! exported by Python), `records` (record batches), `summary` (stage 5: bodies -> the
//! analytics columns), `table_model` (the analytics tables' field roles).

pub mod correlate;
pub mod framing;
pub mod header;
pub mod model;
pub mod records;
pub mod session;
pub mod summary;
pub mod table_model;
