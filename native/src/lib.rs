//! kafka-dissector's native core: the per-packet and per-pair path.
//!
//! packets (capture) -> TCP streams (tcp) -> plaintext (tls) -> Kafka frames (framing) -> exchanges
//! (correlate, session) -> summaries (model, summary, records) -> columns (rows) -> Python;
//! beside the pairs, the analytics tables' rows (table_model, tables).

pub mod capture;
pub mod counter;
pub mod cursor;
pub mod kafka;
pub mod pipeline;
pub mod rows;
pub mod tcp;
pub mod tls;
pub mod types;

mod python;

// Frames are allocated on the wire thread and freed on the summary thread: see Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
