//! Record batches inside `records` fields: counts, bytes, codecs, CRC checks, budgets.
//! The native twin of the counting part of `dissector/protocol/records.py` (its
//! `expand=False` path); that module is the oracle (`tests/test_native_records.py`
//! compares the two), so error codes and their wording follow it.
//!
//! Every entry of a record set starts with `offset int64, length int32` and keeps its
//! magic byte at byte 16, so one framing loop serves magic 0, 1 and 2 alike.
//!
//! Bounds, whatever the bytes: decompressed output never exceeds the frame's
//! [`Budget`] (streaming decoders read at most `remaining + 1` bytes), every length is
//! checked against the bytes present before use, errors are capped at [`MAX_ERRORS`]
//! (the rest counted), and the work is linear in input plus budget: a decompression
//! that fails or overruns is charged what it produced, so a frame of many small bombs
//! cannot multiply the budget.

use std::fmt;
use std::io::Read;

use crate::counter::Counter;
use crate::cursor::{be_i16, be_i32, be_i64, be_u32, le_u16, le_u32, Cursor, Fault};
use crate::types::Counters;

/// Codec names by their id in the batch attributes; bit i of `RecordsSummary::codecs`.
pub const CODEC_NAMES: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// Bit of `RecordsSummary::codecs` for codec ids 5-7, which records.py calls "unknown".
pub const CODEC_UNKNOWN_BIT: u8 = 1 << 5;
/// Name records.py gives codec ids without a name.
pub const CODEC_UNKNOWN_NAME: &str = "unknown";

/// records.py's default `max_decompressed`: the per-frame budget.
pub const DEFAULT_MAX_DECOMPRESSED: u64 = 64 * 1024 * 1024;
/// A large frame (a 50 MB Fetch response) may decompress to this many times its size:
/// still linear in the input, and far below a bomb's 10 000:1 (records.py's FRAME_RATIO).
pub const FRAME_RATIO: u64 = 32;
/// ... but never past this many bytes, whatever the frame's size (records.py's
/// FRAME_BUDGET_CAP; a larger `max_decompressed` raises it).
pub const FRAME_BUDGET_CAP: u64 = 256 * 1024 * 1024;
/// Errors listed per `records` field; the rest are counted in one `too_many_errors`.
pub const MAX_ERRORS: usize = 64;
/// Kafka itself allows one level of wrapper messages.
pub const MAX_NESTING: u32 = 2;

const ENTRY: usize = 12; // offset int64, length int32
const MAGIC_AT: usize = 16;
const V2_HEADER: usize = 61;
const V2_CRC_FROM: usize = 21; // CRC-32C covers attributes .. end of batch
const V2_CRC_AT: usize = 17;
const V2_ATTRIBUTES_AT: usize = 21;
const V2_COUNT_AT: usize = 57;
const V2_MIN_RECORD: i64 = 6;
const LEGACY_HEADER: usize = 18; // offset, size, crc, magic, attributes
const LEGACY_MIN_SIZE: [usize; 2] = [14, 22]; // crc..value lengths for magic 0 and 1
const LEGACY_CRC_AT: usize = 12;
const LEGACY_ATTRIBUTES_AT: usize = 17;
const LEGACY_TIMESTAMP: usize = 8;

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER: usize = 16;
const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";
const LZ4_MAGIC: &[u8] = b"\x04\x22\x4d\x18";
const GZIP_MAGIC: &[u8] = b"\x1f\x8b";
const READ_CHUNK: usize = 64 * 1024;

/// What one `records` field holds, as the summary columns need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsSummary {
    pub records: u64,
    pub bytes: u64,
    /// Bit i set when a batch used codec `CODEC_NAMES[i]`; `CODEC_UNKNOWN_BIT` for ids 5-7.
    pub codecs: u8,
    /// "<snake_case_code>: <detail>" as records.py words them (its ERROR_CODES).
    pub errors: Vec<String>,
    pub partial_batches: u64,
    /// Complete entries: v2 batches and magic 0/1 top-level messages.
    pub batches: u64,
}

impl RecordsSummary {
    /// Codec names of `codecs`, in `CODEC_NAMES` order then "unknown".
    pub fn codec_names(&self) -> Vec<&'static str> {
        codec_names(self.codecs)
    }
}

/// Names of the codecs in a `codecs` mask (several fields' masks may be OR-ed first).
pub fn codec_names(mask: u8) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = CODEC_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if mask & CODEC_UNKNOWN_BIT != 0 {
        out.push(CODEC_UNKNOWN_NAME);
    }
    out
}

/// The `compression` column as summary.py builds it: sorted distinct names joined by ",".
pub fn compression_label(mask: u8) -> Option<String> {
    let mut names = codec_names(mask);
    if names.is_empty() {
        return None;
    }
    names.sort_unstable();
    Some(names.join(","))
}

/// Decompression budget shared by every `records` field of one frame (and capped per
/// capture), so that a frame of many small bombs cannot multiply it.
#[derive(Debug, Clone)]
pub struct Budget {
    pub remaining: u64,
    /// Bytes charged so far: decompressed output, including that of failed attempts.
    pub used: u64,
}

impl Budget {
    pub fn per_frame(max_decompressed: u64) -> Self {
        Budget {
            remaining: max_decompressed,
            used: 0,
        }
    }

    /// The budget of a frame of `frame_bytes` bytes, as the Python decoder gives it:
    /// `max_decompressed`, or FRAME_RATIO times the frame's size if that is more, up to
    /// FRAME_BUDGET_CAP: a fixed cap, not one an attacker's frame size raises.
    pub fn for_frame(frame_bytes: u64, max_decompressed: u64) -> Self {
        Budget::for_frame_capped(
            frame_bytes,
            max_decompressed,
            max_decompressed.max(FRAME_BUDGET_CAP),
        )
    }

    /// [`Budget::for_frame`] with the cap a run chose (`--max-decompressed`): never more
    /// than `cap`, however large the frame or `max_decompressed` (records.py's
    /// `Budget.for_frame` with `cap`).
    pub fn for_frame_capped(frame_bytes: u64, max_decompressed: u64, cap: u64) -> Self {
        let scaled = frame_bytes.saturating_mul(FRAME_RATIO);
        Budget::per_frame(cap.min(max_decompressed.max(scaled)))
    }

    fn charge(&mut self, n: u64) {
        let n = n.min(self.remaining);
        self.remaining -= n;
        self.used += n;
    }
}

/// The per-capture cap a caller holds: each frame's [`Budget`] is the smaller of the
/// per-frame budget and what the capture has left, and the capture's allowance grows
/// by `ratio` bytes per byte of frame, so total decompression stays linear in input.
#[derive(Debug, Clone)]
pub struct CaptureBudget {
    pub remaining: u64,
    pub per_frame: u64,
    pub ratio: u64,
}

/// Defaults of [`CaptureBudget::default`]: real Kafka data rarely compresses past
/// 100:1, while a record bomb reaches 10 000:1.
pub const DEFAULT_CAPTURE_BASE: u64 = 256 * 1024 * 1024;
pub const DEFAULT_CAPTURE_RATIO: u64 = 256;

impl Default for CaptureBudget {
    fn default() -> Self {
        CaptureBudget::new(
            DEFAULT_CAPTURE_BASE,
            DEFAULT_MAX_DECOMPRESSED,
            DEFAULT_CAPTURE_RATIO,
        )
    }
}

impl CaptureBudget {
    pub fn new(base: u64, per_frame: u64, ratio: u64) -> Self {
        CaptureBudget {
            remaining: base,
            per_frame,
            ratio,
        }
    }

    /// The budget for one frame of `frame_bytes` bytes ([`Budget::for_frame`], within
    /// what the capture has left); hand it back to `settle`.
    pub fn frame(&mut self, frame_bytes: u64) -> Budget {
        self.remaining = self
            .remaining
            .saturating_add(frame_bytes.saturating_mul(self.ratio));
        let wanted = Budget::for_frame(frame_bytes, self.per_frame).remaining;
        Budget::per_frame(wanted.min(self.remaining))
    }

    pub fn settle(&mut self, frame: &Budget) {
        self.remaining = self.remaining.saturating_sub(frame.used);
    }
}

/// Count what one `records` field holds (records.py's `parse_records(data)` without
/// `expand`), decompressing within `budget`. Every error is also counted in
/// `counters` as `records_<code>`, listed or not.
pub fn summarize_records(
    data: &[u8],
    budget: &mut Budget,
    counters: &mut Counters,
) -> RecordsSummary {
    let mut ctx = Ctx {
        budget,
        counters,
        out: RecordsSummary::default(),
        dropped: 0,
        unbudgeted: false,
        expand: None,
    };
    ctx.out.bytes = data.len() as u64;
    walk_top(&mut ctx, data);
    if ctx.dropped > 0 {
        let n = ctx.dropped;
        ctx.out
            .errors
            .push(format!("too_many_errors: {n} more not listed"));
    }
    if ctx.out.partial_batches > 0 {
        ctx.counters
            .add(Counter::RecordsPartialBatches, ctx.out.partial_batches);
    }
    ctx.out
}

// --- internals -------------------------------------------------------------------

/// The prefix of the record-batch counters (`anomalies.RECORDS_COUNTER_PREFIX`).
const COUNTER_PREFIX: &str = "records_";

/// The code `records.py` writes for an anomaly, the name of its counter without the
/// prefix (`records_crc_mismatch` -> `crc_mismatch`).
pub fn record_error_code(counter: Counter) -> &'static str {
    let name = counter.name();
    debug_assert!(
        name.starts_with(COUNTER_PREFIX),
        "{name} is no record error"
    );
    name.strip_prefix(COUNTER_PREFIX).unwrap_or(name)
}

struct Ctx<'a> {
    budget: &'a mut Budget,
    counters: &'a mut Counters,
    out: RecordsSummary,
    dropped: u64,
    /// Whether an anomaly other than `decompression_limit` was met (listed or dropped).
    unbudgeted: bool,
    /// Set for `table_records` with expansion: records are read one by one.
    expand: Option<&'a mut Expansion>,
}

impl Ctx<'_> {
    /// A record-batch anomaly: counted as its `records_*` counter and listed under its
    /// code, the counter's name without the prefix (`records.py`'s wording).
    fn error(&mut self, counter: Counter, detail: impl fmt::Display) {
        self.counters.inc(counter);
        self.unbudgeted |= counter != Counter::RecordsDecompressionLimit;
        // Garbage input can hold one anomaly per dozen bytes: keep the list bounded.
        if self.out.errors.len() < MAX_ERRORS {
            let code = record_error_code(counter);
            self.out.errors.push(format!("{code}: {detail}"));
        } else {
            self.dropped += 1;
        }
    }

    fn codec(&mut self, codec: u8) {
        self.out.batches += 1;
        self.out.codecs |= if (codec as usize) < CODEC_NAMES.len() {
            1 << codec
        } else {
            CODEC_UNKNOWN_BIT
        };
    }
}

/// Where an entry sits, worded as records.py does ("batch 3 at offset 120").
#[derive(Clone, Copy)]
struct At {
    index: usize,
    pos: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch {} at offset {}", self.index, self.pos)
    }
}

/// One step of the framing loop.
enum Entry {
    /// A complete entry, ending at this offset.
    Whole(usize),
    /// The data ends inside this entry.
    Partial,
    /// Its length field is negative.
    Negative,
}

/// The entry at `pos` of `buf` (`pos < buf.len()`).
fn entry_at(buf: &[u8], pos: usize) -> Entry {
    let Some(size) = be_i32(buf, pos + 8).filter(|_| buf.len() - pos >= ENTRY) else {
        return Entry::Partial;
    };
    let Ok(size) = usize::try_from(size) else {
        return Entry::Negative;
    };
    match (pos + ENTRY).checked_add(size) {
        Some(end) if end <= buf.len() => Entry::Whole(end),
        _ => Entry::Partial,
    }
}

fn walk_top(ctx: &mut Ctx, buf: &[u8]) {
    let mut pos = 0;
    let mut index = 0;
    // Each pass moves pos forward by at least ENTRY bytes or returns.
    while pos < buf.len() {
        let at = At { index, pos };
        let end = match entry_at(buf, pos) {
            Entry::Partial => {
                ctx.out.partial_batches += 1;
                return;
            }
            Entry::Negative => {
                ctx.error(
                    Counter::RecordsBadBatchLength,
                    format_args!("negative length in {at}"),
                );
                return;
            }
            Entry::Whole(end) => end,
        };
        match buf.get(pos + MAGIC_AT).filter(|_| end - pos > MAGIC_AT) {
            None => ctx.error(
                Counter::RecordsBadBatchLength,
                format_args!("{at} too short"),
            ),
            Some(2) => v2_batch(ctx, buf, pos, end, at),
            Some(&m @ (0 | 1)) => legacy_top(ctx, buf, pos, end, m, at),
            Some(m) => ctx.error(Counter::RecordsUnknownMagic, format_args!("{m} in {at}")),
        }
        pos = end;
        index += 1;
    }
}

// --- magic 2 ---------------------------------------------------------------------

fn v2_batch(ctx: &mut Ctx, buf: &[u8], pos: usize, end: usize, at: At) {
    let (Some(crc), Some(attributes), Some(count), Some(covered)) = (
        be_u32(buf, pos + V2_CRC_AT),
        be_i16(buf, pos + V2_ATTRIBUTES_AT),
        be_i32(buf, pos + V2_COUNT_AT),
        buf.get(pos + V2_CRC_FROM..end)
            .filter(|_| end - pos >= V2_HEADER),
    ) else {
        ctx.error(
            Counter::RecordsBadBatchLength,
            format_args!("{at}: {} bytes, header needs {V2_HEADER}", end - pos),
        );
        return;
    };
    if crc32c::crc32c(covered) != crc {
        ctx.error(Counter::RecordsCrcMismatch, at);
    }
    let codec = (attributes & 0x07) as u8;
    ctx.codec(codec);
    let mut count = i64::from(count);
    if count < 0 {
        ctx.error(
            Counter::RecordsBadRecordCount,
            format_args!("{count} in {at}"),
        );
        count = 0;
    }
    let body = buf.get(pos + V2_HEADER..end).unwrap_or_default();
    if ctx.expand.is_some() {
        let base = be_i64(buf, pos).unwrap_or_default();
        let control = attributes & 0x20 != 0;
        ctx.out.records += v2_expanded(ctx, body, codec, count, base, control, at);
        return;
    }
    if codec == 0 {
        ctx.out.records += walk_v2_records(ctx, body, count, at);
        return;
    }
    match decompress(ctx, codec, body, 2, &at) {
        Ok(data) => ctx.out.records += walk_v2_records(ctx, &data, count, at),
        // Past the budget the header's count is all there is: take it, flagged.
        Err(Outcome::Limit) => ctx.out.records += count as u64,
        Err(Outcome::Failed) => {}
    }
}

/// Records found in `body`, stepping over them by their length prefixes (building
/// nothing); anomalies are reported as records.py words them.
fn walk_v2_records(ctx: &mut Ctx, body: &[u8], count: i64, at: At) -> u64 {
    let total = body.len();
    let mut pos = 0usize;
    let mut found: i64 = 0;
    // Each record takes at least 7 bytes, so this runs at most total / 7 times.
    while found < count && pos < total {
        let (length, start) = match varint(body, pos, 5) {
            Ok(v) => v,
            Err(detail) => {
                ctx.error(
                    Counter::RecordsBadVarint,
                    format_args!("{detail}: record {found} length in {at}"),
                );
                return found as u64;
            }
        };
        // start <= total and length < 2^35: no overflow in i64.
        if length < 0 || start as i64 + length > total as i64 {
            ctx.error(
                Counter::RecordsTruncatedRecord,
                format_args!("record {found} in {at}"),
            );
            return found as u64;
        }
        if length < V2_MIN_RECORD {
            ctx.error(
                Counter::RecordsBadRecordLength,
                format_args!("{length} for record {found} in {at}"),
            );
            return found as u64;
        }
        let end = start + length as usize;
        // Each record's fields are read too, so the summary lists every anomaly that
        // `decode --records` does (issue #21: an 11-byte varint inside a record).
        if let Err((code, detail)) = v2_record_offset_delta(&body[start..end]) {
            ctx.error(code, format_args!("{detail}: record {found} in {at}"));
        }
        pos = end;
        found += 1;
    }
    if found < count {
        ctx.error(
            Counter::RecordsRecordCountMismatch,
            format_args!("header says {count}, found {found} in {at}"),
        );
    } else if pos < total {
        ctx.error(
            Counter::RecordsTrailingBytes,
            format_args!("{} after record {} in {at}", total - pos, found - 1),
        );
    }
    found as u64
}

/// Zigzag varint (max_bytes 5) or varlong (10) as Kafka's record format uses; returns
/// (value, offset after it) or records.py's wording of what is wrong.
fn varint(buf: &[u8], pos: usize, max_bytes: u32) -> Result<(i64, usize), String> {
    let mut cur = Cursor::new(buf, pos);
    match cur.varint(max_bytes) {
        Ok(value) => Ok((value, cur.pos())),
        Err(Fault::Short) => Err("cut off".into()),
        Err(Fault::LongVarint) => Err(format!("longer than {max_bytes} bytes")),
    }
}

// --- magic 0 and 1 ---------------------------------------------------------------

/// One magic 0/1 message: what counting needs of it.
struct Legacy<'a> {
    offset: i64,
    magic: u8,
    attributes: u8,
    value: Option<&'a [u8]>,
}

fn legacy_top(ctx: &mut Ctx, buf: &[u8], pos: usize, end: usize, magic: u8, at: At) {
    let where_ = at.to_string();
    let Some(wrapper) = legacy_message(ctx, buf, pos, end, magic, &where_) else {
        return;
    };
    let codec = wrapper.attributes & 0x07;
    ctx.codec(codec);
    if ctx.expand.is_some() {
        ctx.out.records += legacy_expanded(ctx, &wrapper, end - pos, &where_);
        return;
    }
    ctx.out.records += if codec == 0 {
        1
    } else {
        legacy_inner(ctx, &wrapper, 1, &where_)
    };
}

fn legacy_message<'a>(
    ctx: &mut Ctx,
    buf: &'a [u8],
    pos: usize,
    end: usize,
    magic: u8,
    where_: &str,
) -> Option<Legacy<'a>> {
    // Callers checked that the magic byte (0 or 1) lies inside the entry.
    let size = end - pos - ENTRY;
    if size < LEGACY_MIN_SIZE[usize::from(magic & 1)] {
        ctx.error(
            Counter::RecordsBadMessageSize,
            format_args!("{size} in {where_}"),
        );
        return None;
    }
    let crc = be_u32(buf, pos + LEGACY_CRC_AT)?;
    let attributes = *buf.get(pos + LEGACY_ATTRIBUTES_AT)?;
    if crc32fast::hash(buf.get(pos + MAGIC_AT..end)?) != crc {
        ctx.error(
            Counter::RecordsCrcMismatch,
            format_args!("message at offset {pos} in {where_}"),
        );
    }
    let mut p = pos + LEGACY_HEADER;
    if magic == 1 {
        p += LEGACY_TIMESTAMP;
    }
    let (value, p) = match i32_bytes(buf, p, end).and_then(|(_key, p)| i32_bytes(buf, p, end)) {
        Ok(v) => v,
        Err((code, detail)) => {
            ctx.error(
                code,
                format_args!("{detail}: message at offset {pos} in {where_}"),
            );
            return None;
        }
    };
    if p != end {
        ctx.error(
            Counter::RecordsMessageSizeMismatch,
            format_args!("{} bytes left at offset {pos} in {where_}", end - p),
        );
    }
    Some(Legacy {
        offset: be_i64(buf, pos)?,
        magic,
        attributes,
        value,
    })
}

type Bad = (Counter, String);

/// An int32-length-prefixed byte field at `pos` (None for length -1).
fn i32_bytes(buf: &[u8], pos: usize, end: usize) -> Result<(Option<&[u8]>, usize), Bad> {
    let length = be_i32(buf, pos).filter(|_| pos + 4 <= end).ok_or((
        Counter::RecordsTruncatedRecord,
        "length cut off".to_string(),
    ))?;
    let pos = pos + 4;
    if length == -1 {
        return Ok((None, pos));
    }
    let Ok(n) = usize::try_from(length) else {
        return Err((Counter::RecordsBadLength, length.to_string()));
    };
    match buf
        .get(pos..pos.saturating_add(n))
        .filter(|_| pos + n <= end)
    {
        Some(v) => Ok((Some(v), pos + n)),
        None => Err((
            Counter::RecordsTruncatedRecord,
            format!("field of {length} bytes"),
        )),
    }
}

/// The decompressed messages of a compressed wrapper, or None once its fault (a null
/// value, a codec failure) is reported.
fn wrapper_inner(ctx: &mut Ctx, wrapper: &Legacy, where_: &str) -> Option<Vec<u8>> {
    let Some(value) = wrapper.value else {
        ctx.error(
            Counter::RecordsBadCompressedMessage,
            format_args!("null value in {where_}"),
        );
        return None;
    };
    decompress(
        ctx,
        wrapper.attributes & 0x07,
        value,
        wrapper.magic,
        &where_,
    )
    .ok()
}

/// Messages inside a compressed wrapper (recursing into nested wrappers up to
/// MAX_NESTING).
fn legacy_inner(ctx: &mut Ctx, wrapper: &Legacy, depth: u32, where_: &str) -> u64 {
    let Some(inner) = wrapper_inner(ctx, wrapper, where_) else {
        return 0;
    };
    let mut count = 0;
    let mut pos = 0;
    let mut index = 0;
    while pos < inner.len() {
        let here = format!("inner message {index} of {where_}");
        let end = match entry_at(&inner, pos) {
            Entry::Whole(end) => end,
            Entry::Partial => {
                ctx.error(Counter::RecordsTruncatedBatch, here);
                break;
            }
            Entry::Negative => {
                ctx.error(Counter::RecordsBadBatchLength, here);
                break;
            }
        };
        pos_step(ctx, &inner, pos, end, depth, &here, &mut count);
        pos = end;
        index += 1;
    }
    count
}

fn pos_step(
    ctx: &mut Ctx,
    inner: &[u8],
    pos: usize,
    end: usize,
    depth: u32,
    here: &str,
    count: &mut u64,
) {
    let magic = match inner.get(pos + MAGIC_AT).filter(|_| end - pos > MAGIC_AT) {
        None => return ctx.error(Counter::RecordsBadMessageSize, here),
        Some(&m @ (0 | 1)) => m,
        Some(m) => return ctx.error(Counter::RecordsUnknownMagic, format_args!("{m} in {here}")),
    };
    let Some(message) = legacy_message(ctx, inner, pos, end, magic, here) else {
        return;
    };
    if message.attributes & 0x07 == 0 {
        *count += 1;
    } else if depth >= MAX_NESTING {
        ctx.error(Counter::RecordsNestingTooDeep, here);
    } else {
        *count += legacy_inner(ctx, &message, depth + 1, here);
    }
}

// --- the tables' reading: counts, and the offsets of expanded records ----------------

/// What records.py's `parse_records(expand=True)` keeps of the records it expands, as
/// far as the partitions table reads it: the offsets of the data records (not those of
/// control batches), within its item budget.
#[derive(Debug)]
pub struct Expansion {
    /// Bytes kept records may still take (records.py's `Budget.items`).
    pub items: u64,
    /// What each kept batch or record costs beyond its bytes (records.py's ITEM_OVERHEAD).
    pub overhead: u64,
    pub offsets: Vec<i64>,
    /// Something records.py would report (or not keep) was met.
    pub failed: bool,
}

impl Expansion {
    pub fn new(items: u64, overhead: u64) -> Self {
        Expansion {
            items,
            overhead,
            offsets: Vec::new(),
            failed: false,
        }
    }

    /// Keep one more batch header or record of `size` bytes (records.py's `keep`).
    fn keep(&mut self, size: usize) -> bool {
        let cost = (size as u64).saturating_add(self.overhead);
        if self.items >= cost {
            self.items -= cost;
            return true;
        }
        self.failed = true; // records.py reports expand_limit and keeps no more
        false
    }
}

/// (records, bytes) of one `records` field as records.py's `parse_records` counts them,
/// and with `expand` the offsets of its data records; None when records.py would report
/// an anomaly in the field (the tables then leave the pair to the Python decoder, so the
/// reading here only has to be right where records.py finds nothing wrong). One anomaly
/// is read here, unexpanded: batches past the frame's decompression budget, which both
/// count by their headers' records counts (as the pairs' `records` does). A large frame
/// of compressed batches (a record bomb, or a budget set low) is then no reason to
/// decode it again in Python: 32 MB of zstd bombs took that decoder 42 s.
/// `scratch` receives the anomalies' counters, which the pairs' counters count already:
/// the caller keeps one for many calls (a Fetch response has a field per partition, and
/// a fresh `Counters` is a 2 KB memset each).
pub fn table_records(
    data: &[u8],
    budget: &mut Budget,
    expand: Option<&mut Expansion>,
    scratch: &mut Counters,
) -> Option<(u64, u64)> {
    let expanding = expand.is_some();
    let mut ctx = Ctx {
        budget,
        counters: scratch,
        out: RecordsSummary::default(),
        dropped: 0,
        unbudgeted: false,
        expand,
    };
    ctx.out.bytes = data.len() as u64;
    walk_top(&mut ctx, data);
    let failed = ctx.expand.as_ref().is_some_and(|x| x.failed);
    let clean = if expanding {
        ctx.out.errors.is_empty() && ctx.dropped == 0 && !failed
    } else {
        !ctx.unbudgeted
    };
    debug_assert!(expanding || ctx.expand.is_none());
    clean.then_some((ctx.out.records, ctx.out.bytes))
}

/// One v2 batch, its records read one by one (records.py's `_expand_v2_records`).
fn v2_expanded(
    ctx: &mut Ctx,
    body: &[u8],
    codec: u8,
    count: i64,
    base: i64,
    control: bool,
    at: At,
) -> u64 {
    let data;
    let records = if codec == 0 {
        body
    } else {
        match decompress(ctx, codec, body, 2, &at) {
            Ok(out) => {
                data = out;
                &data[..]
            }
            Err(_) => return 0, // reported: the field is not clean
        }
    };
    let Some(x) = ctx.expand.as_deref_mut() else {
        return 0;
    };
    if !x.keep(V2_HEADER) {
        return 0;
    }
    let total = records.len();
    let mut pos = 0usize;
    let mut found: i64 = 0;
    while found < count && pos < total {
        let Ok((length, start)) = varint(records, pos, 5) else {
            x.failed = true;
            return found as u64;
        };
        // start <= total and length < 2^35: no overflow in i64.
        if length < V2_MIN_RECORD || start as i64 + length > total as i64 {
            x.failed = true;
            return found as u64;
        }
        let end = start + length as usize;
        if !x.keep(length as usize) {
            return found as u64;
        }
        match v2_record_offset_delta(&records[start..end])
            .ok()
            .and_then(|d| base.checked_add(d))
        {
            Some(offset) if !control => x.offsets.push(offset),
            Some(_) => {} // transaction markers are not data the fetch delivered
            None => {
                x.failed = true;
                return found as u64;
            }
        }
        pos = end;
        found += 1;
    }
    if found < count || pos < total {
        x.failed = true; // record_count_mismatch or trailing_bytes
    }
    found as u64
}

/// A v2 record's offset delta, read as records.py's `_v2_record` reads the record
/// (attributes, timestamp and offset deltas, key, value, headers, nothing left), or
/// what is wrong with it in records.py's words (code, detail).
fn v2_record_offset_delta(rec: &[u8]) -> Result<i64, Bad> {
    let bad_varint = |detail: String| (Counter::RecordsBadVarint, detail);
    if rec.is_empty() {
        return Err((Counter::RecordsTruncatedRecord, "no attributes".into()));
    }
    let (_timestamp_delta, p) = varint(rec, 1, 10).map_err(bad_varint)?;
    let (delta, p) = varint(rec, p, 5).map_err(bad_varint)?;
    let (_, p) = var_bytes(rec, p)?; // key
    let (_, p) = var_bytes(rec, p)?; // value
    let (headers, mut p) = varint(rec, p, 5).map_err(bad_varint)?;
    // each header takes at least 2 bytes
    if headers < 0 || headers > ((rec.len() - p) / 2) as i64 {
        return Err((Counter::RecordsBadHeaderCount, headers.to_string()));
    }
    for _ in 0..headers {
        let (null_key, q) = var_bytes(rec, p)?;
        if null_key {
            return Err((Counter::RecordsBadHeaderKey, "null".into()));
        }
        p = var_bytes(rec, q)?.1;
    }
    if p != rec.len() {
        return Err((
            Counter::RecordsRecordLengthMismatch,
            format!("{} bytes left", rec.len() - p),
        ));
    }
    Ok(delta)
}

/// A varint-length byte field: (is null, offset after it), or records.py's complaint.
fn var_bytes(buf: &[u8], pos: usize) -> Result<(bool, usize), Bad> {
    let (length, pos) =
        varint(buf, pos, 5).map_err(|detail| (Counter::RecordsBadVarint, detail))?;
    if length == -1 {
        return Ok((true, pos));
    }
    if length < -1 {
        return Err((Counter::RecordsBadLength, length.to_string()));
    }
    // length < 2^35 and pos <= buf.len(): no overflow
    match pos.checked_add(length as usize) {
        Some(end) if end <= buf.len() => Ok((false, end)),
        _ => Err((
            Counter::RecordsTruncatedRecord,
            format!("field of {length} bytes"),
        )),
    }
}

/// A magic 0/1 top-level entry read with expansion (records.py's `_legacy_top`):
/// its record count; the offsets of the messages kept go to the expansion.
fn legacy_expanded(ctx: &mut Ctx, wrapper: &Legacy, size: usize, where_: &str) -> u64 {
    let kept = ctx
        .expand
        .as_deref_mut()
        .is_some_and(|x| x.keep(LEGACY_HEADER));
    if wrapper.attributes & 0x07 == 0 {
        if let Some(x) = ctx.expand.as_deref_mut() {
            if kept && x.keep(size) {
                x.offsets.push(wrapper.offset);
            }
        }
        return 1;
    }
    let mut out = Vec::new();
    let (count, _) = legacy_inner_expanded(ctx, wrapper, 1, where_, &mut out);
    if let Some(x) = ctx.expand.as_deref_mut() {
        x.offsets.extend(out);
    }
    count
}

/// Messages inside a compressed wrapper with their offsets (records.py's `_legacy_inner`
/// with `out`): magic 1 inner offsets are relative to the wrapper's, unless that would
/// make them negative. Returns (count, offset of the last one).
fn legacy_inner_expanded(
    ctx: &mut Ctx,
    wrapper: &Legacy,
    depth: u32,
    where_: &str,
    out: &mut Vec<i64>,
) -> (u64, Option<i64>) {
    let Some(inner) = wrapper_inner(ctx, wrapper, where_) else {
        return (0, None);
    };
    let first_kept = out.len();
    let mut count = 0;
    let mut last: Option<i64> = None;
    let mut pos = 0;
    let mut index = 0;
    while pos < inner.len() {
        let here = format!("inner message {index} of {where_}");
        let Entry::Whole(end) = entry_at(&inner, pos) else {
            ctx.error(Counter::RecordsTruncatedBatch, here);
            return (count, last);
        };
        let Some(&magic @ (0 | 1)) = inner.get(pos + MAGIC_AT).filter(|_| end - pos > MAGIC_AT)
        else {
            ctx.error(Counter::RecordsBadMessageSize, here);
            return (count, last);
        };
        let Some(message) = legacy_message(ctx, &inner, pos, end, magic, &here) else {
            return (count, last);
        };
        if message.attributes & 0x07 != 0 {
            if depth >= MAX_NESTING {
                ctx.error(Counter::RecordsNestingTooDeep, here);
                return (count, last);
            }
            let (found, nested_last) = legacy_inner_expanded(ctx, &message, depth + 1, &here, out);
            count += found;
            last = nested_last.or(last);
        } else {
            count += 1;
            last = Some(message.offset);
            if ctx.expand.as_deref_mut().is_some_and(|x| x.keep(end - pos)) {
                out.push(message.offset);
            }
        }
        pos = end;
        index += 1;
    }
    if wrapper.magic >= 1 {
        if let Some(l) = last {
            // A producer's wrapper has offset 0 and its inner offsets 0..n-1: a negative
            // base, and Kafka keeps the inner offsets then.
            let Some(base) = wrapper.offset.checked_sub(l) else {
                ctx.error(Counter::RecordsInternalError, "offset out of range");
                return (count, last);
            };
            if base >= 0 {
                for o in &mut out[first_kept..] {
                    match o.checked_add(base) {
                        Some(v) => *o = v,
                        None => ctx.error(Counter::RecordsInternalError, "offset out of range"),
                    }
                }
                last = l.checked_add(base);
            }
        }
    }
    (count, last)
}

// --- decompression ---------------------------------------------------------------

/// Why a decompression gave no data (already reported).
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Limit,
    Failed,
}

/// A codec's failure before it is reported: output over the limit, or bad data.
#[derive(Debug)]
enum Fail {
    Limit(String),
    Bad(String),
}

fn limit_error(name: &str, limit: u64) -> Fail {
    Fail::Limit(format!("{name} output over {limit} bytes"))
}

/// Decompress within the budget; on failure report it and say which kind. The budget
/// is charged what the codec produced, whether it succeeded or not.
fn decompress(
    ctx: &mut Ctx,
    codec: u8,
    data: &[u8],
    magic: u8,
    where_: &dyn fmt::Display,
) -> Result<Vec<u8>, Outcome> {
    if usize::from(codec) >= CODEC_NAMES.len() {
        ctx.error(
            Counter::RecordsUnknownCodec,
            format_args!("{codec} in {where_}"),
        );
        return Err(Outcome::Failed);
    }
    let limit = ctx.budget.remaining;
    let mut produced = 0u64;
    if data.is_empty() && (codec == 3 || codec == 4) {
        // The frame decoders read no frame as no output; records.py's reject it.
        let name = CODEC_NAMES[usize::from(codec)];
        ctx.error(
            Counter::RecordsDecompressionFailed,
            format_args!("{name}: empty input in {where_}"),
        );
        return Err(Outcome::Failed);
    }
    let result = match codec {
        1 => gunzip(data, limit, &mut produced),
        2 => unsnappy(data, limit, &mut produced),
        3 => unlz4(data, limit, magic == 0, &mut produced),
        _ => unzstd(data, limit, &mut produced),
    };
    match result {
        Ok(out) => {
            ctx.budget.charge(out.len() as u64);
            Ok(out)
        }
        Err(Fail::Limit(detail)) => {
            ctx.budget.charge(limit);
            ctx.error(
                Counter::RecordsDecompressionLimit,
                format_args!("{detail} in {where_}"),
            );
            Err(Outcome::Limit)
        }
        Err(Fail::Bad(detail)) => {
            ctx.budget.charge(produced);
            ctx.error(
                Counter::RecordsDecompressionFailed,
                format_args!("{detail} in {where_}"),
            );
            Err(Outcome::Failed)
        }
    }
}

thread_local! {
    // A zstd decompression context costs more to create (and zero) than a small batch
    // costs to decompress: one per thread, reset per stream.
    static ZSTD: std::cell::RefCell<Option<zstd::stream::raw::Decoder<'static>>> =
        const { std::cell::RefCell::new(None) };
    // The staging buffer of every bounded read, allocated (and zeroed) once per thread.
    static CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn with_chunk<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    CHUNK.with(|cell| {
        let mut chunk = cell.borrow_mut();
        if chunk.len() < READ_CHUNK {
            chunk.resize(READ_CHUNK, 0);
        }
        f(&mut chunk[..READ_CHUNK])
    })
}

/// zstd frames (several in a row, as the streaming reader takes them) within `limit`.
fn unzstd(data: &[u8], limit: u64, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

    let bad = |e: std::io::Error| Fail::Bad(format!("zstd: {e}"));
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::stream::raw::Decoder::new().map_err(bad)?);
        }
        let Some(dec) = slot.as_mut() else {
            return Err(Fail::Bad("zstd: no context".into()));
        };
        dec.reinit().map_err(bad)?;
        with_chunk(|chunk| {
            let mut out = Vec::new();
            let mut input = InBuffer::around(data);
            loop {
                let room = (limit - out.len() as u64)
                    .saturating_add(1)
                    .min(READ_CHUNK as u64) as usize;
                let mut ob = OutBuffer::around(&mut chunk[..room]);
                let hint = dec.run(&mut input, &mut ob).map_err(bad)?;
                let n = ob.pos();
                *produced += n as u64;
                if out.len() as u64 + n as u64 > limit {
                    return Err(limit_error("zstd", limit));
                }
                out.extend_from_slice(&chunk[..n]);
                let consumed_all = input.pos() == data.len();
                if hint == 0 {
                    if consumed_all {
                        return Ok(out);
                    }
                    dec.reinit().map_err(bad)?; // the next frame of a concatenation
                } else if consumed_all && n < room {
                    return Err(Fail::Bad("zstd: incomplete frame".into()));
                }
            }
        })
    })
}

/// Read a streaming decoder to its end, failing once it yields more than `limit`
/// bytes; `produced` tracks the output so far, for the budget.
fn read_bounded(
    reader: Result<Box<dyn Read + '_>, String>,
    limit: u64,
    name: &str,
    produced: &mut u64,
) -> Result<Vec<u8>, Fail> {
    let mut reader = reader.map_err(|e| Fail::Bad(format!("{name}: {e}")))?;
    with_chunk(|chunk| read_chunks(&mut *reader, chunk, limit, name, produced))
}

fn read_chunks(
    reader: &mut dyn Read,
    chunk: &mut [u8],
    limit: u64,
    name: &str,
    produced: &mut u64,
) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::new();
    loop {
        let room = (limit - out.len() as u64)
            .saturating_add(1)
            .min(READ_CHUNK as u64) as usize;
        let n = match reader.read(&mut chunk[..room]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Fail::Bad(format!("{name}: {e}"))),
        };
        if n == 0 {
            return Ok(out);
        }
        *produced += n as u64;
        if out.len() as u64 + n as u64 > limit {
            return Err(limit_error(name, limit));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

// gzip ---------------------------------------------------------------------------

/// gzip (or zlib) members as Java's GZIPInputStream reads them: concatenated gzip
/// members are read on, other trailing bytes ignored.
fn gunzip(data: &[u8], limit: u64, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::new();
    let mut rest = data;
    loop {
        let used = inflate_member(rest, &mut out, limit, produced)?;
        rest = rest.get(used..).unwrap_or_default();
        if !rest.starts_with(GZIP_MAGIC) {
            return Ok(out);
        }
    }
}

fn cut_off() -> Fail {
    Fail::Bad("gzip: stream cut off".into())
}

fn gz_bad(what: &str) -> Fail {
    Fail::Bad(format!("gzip: {what}"))
}

/// One gzip member or zlib stream (told apart by the gzip magic, as zlib's
/// auto-detection does), appended to `out`; returns the bytes it took.
fn inflate_member(
    data: &[u8],
    out: &mut Vec<u8>,
    limit: u64,
    produced: &mut u64,
) -> Result<usize, Fail> {
    if !data.starts_with(GZIP_MAGIC) {
        let mut z = flate2::Decompress::new(true);
        return inflate(&mut z, data, out, limit, produced);
    }
    let start = gzip_header_end(data)?;
    let before = out.len();
    let mut z = flate2::Decompress::new(false);
    let body = data.get(start..).unwrap_or_default();
    let used = start + inflate(&mut z, body, out, limit, produced)?;
    let trailer = data.get(used..used + 8).ok_or_else(cut_off)?;
    let member = out.get(before..).unwrap_or_default();
    if le_u32(trailer, 0) != Some(crc32fast::hash(member)) {
        return Err(gz_bad("incorrect data check"));
    }
    if le_u32(trailer, 4) != Some(member.len() as u32) {
        return Err(gz_bad("incorrect length check"));
    }
    Ok(used + 8)
}

/// Where the deflate data of a gzip member starts (RFC 1952), checked as zlib does.
fn gzip_header_end(data: &[u8]) -> Result<usize, Fail> {
    const FHCRC: u8 = 0x02;
    const FEXTRA: u8 = 0x04;
    const FNAME: u8 = 0x08;
    const FCOMMENT: u8 = 0x10;
    let fixed = data.get(..10).ok_or_else(cut_off)?;
    if fixed[2] != 8 {
        return Err(gz_bad("unknown compression method"));
    }
    let flags = fixed[3];
    if flags & 0xE0 != 0 {
        return Err(gz_bad("unknown header flags set"));
    }
    let mut p = 10usize;
    if flags & FEXTRA != 0 {
        let n = le_u16(data, p).ok_or_else(cut_off)?;
        p += 2 + usize::from(n);
        if p > data.len() {
            return Err(cut_off());
        }
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let zero = data
                .get(p..)
                .and_then(|d| d.iter().position(|&b| b == 0))
                .ok_or_else(cut_off)?;
            p += zero + 1;
        }
    }
    if flags & FHCRC != 0 {
        let stored = le_u16(data, p).ok_or_else(cut_off)?;
        if stored != (crc32fast::hash(&data[..p]) & 0xFFFF) as u16 {
            return Err(gz_bad("header crc mismatch"));
        }
        p += 2;
    }
    Ok(p)
}

/// Inflate one stream from `data` into `out`, at most `limit` bytes in all; returns
/// the input bytes it took.
fn inflate(
    z: &mut flate2::Decompress,
    data: &[u8],
    out: &mut Vec<u8>,
    limit: u64,
    produced: &mut u64,
) -> Result<usize, Fail> {
    with_chunk(|chunk| inflate_into(z, data, out, limit, produced, chunk))
}

fn inflate_into(
    z: &mut flate2::Decompress,
    data: &[u8],
    out: &mut Vec<u8>,
    limit: u64,
    produced: &mut u64,
    chunk: &mut [u8],
) -> Result<usize, Fail> {
    loop {
        let room = (limit - out.len() as u64)
            .saturating_add(1)
            .min(READ_CHUNK as u64) as usize;
        let (in_before, out_before) = (z.total_in(), z.total_out());
        let input = data.get(z.total_in() as usize..).unwrap_or_default();
        let status = z
            .decompress(input, &mut chunk[..room], flate2::FlushDecompress::None)
            .map_err(|e| gz_bad(&e.to_string()))?;
        let n = (z.total_out() - out_before) as usize;
        *produced += n as u64;
        if out.len() as u64 + n as u64 > limit {
            return Err(limit_error("gzip", limit));
        }
        out.extend_from_slice(&chunk[..n]);
        if status == flate2::Status::StreamEnd {
            return Ok(z.total_in() as usize);
        }
        if z.total_in() == in_before && n == 0 {
            return Err(cut_off()); // no progress: the input ran out mid-stream
        }
    }
}

// snappy -------------------------------------------------------------------------

/// Snappy as Kafka clients write it: xerial blocks (Java), the official framing
/// format, or one raw block (librdkafka and others).
fn unsnappy(data: &[u8], limit: u64, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    if data.starts_with(XERIAL_MAGIC) {
        return unxerial(data, limit, produced);
    }
    if data.starts_with(SNAPPY_FRAMED_MAGIC) {
        let reader: Box<dyn Read> = Box::new(snap::read::FrameDecoder::new(data));
        return read_bounded(Ok(reader), limit, "snappy", produced);
    }
    snappy_block(data, limit, produced)
}

fn snappy_block(block: &[u8], limit: u64, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    // A raw block starts with its uncompressed length: check it before allocating.
    let declared =
        snap::raw::decompress_len(block).map_err(|e| Fail::Bad(format!("snappy: {e}")))?;
    if declared as u64 > limit {
        return Err(limit_error("snappy", limit));
    }
    let mut out = vec![0u8; declared];
    *produced += declared as u64;
    let n = snap::raw::Decoder::new()
        .decompress(block, &mut out)
        .map_err(|e| Fail::Bad(format!("snappy: {e}")))?;
    out.truncate(n);
    Ok(out)
}

fn unxerial(data: &[u8], limit: u64, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    if data.len() < XERIAL_HEADER {
        return Err(Fail::Bad("snappy: xerial header cut off".into()));
    }
    let mut out = Vec::new();
    let mut pos = XERIAL_HEADER;
    // Each pass moves pos on by at least the 4-byte length.
    while pos < data.len() {
        let length = be_i32(data, pos)
            .ok_or_else(|| Fail::Bad("snappy: xerial block length cut off".into()))?;
        pos += 4;
        let block = usize::try_from(length)
            .ok()
            .and_then(|n| data.get(pos..pos.checked_add(n)?))
            .ok_or_else(|| Fail::Bad(format!("snappy: xerial block of {length} bytes")))?;
        let part = snappy_block(block, limit - out.len() as u64, produced)?;
        out.extend_from_slice(&part);
        pos += block.len();
    }
    Ok(out)
}

// lz4 ----------------------------------------------------------------------------

fn unlz4(data: &[u8], limit: u64, old_kafka: bool, produced: &mut u64) -> Result<Vec<u8>, Fail> {
    let fixed;
    let data = if old_kafka {
        // Kafka 0.8/0.9 (magic 0) computed the frame header checksum over the magic
        // number too (KAFKA-3160); Kafka ignores it for magic 0, so put the right one.
        fixed = fix_lz4_header_checksum(data);
        fixed.as_deref().unwrap_or(data)
    } else {
        data
    };
    if let Some(out) = unlz4_independent(data, limit) {
        *produced += out.len() as u64;
        return Ok(out);
    }
    // Linked blocks, dictionaries, legacy or damaged frames: the general decoder, which
    // also words every error (a damaged frame is decoded twice, bounded both times).
    let reader: Box<dyn Read> = Box::new(lz4_flex::frame::FrameDecoder::new(data));
    read_bounded(Ok(reader), limit, "lz4", produced)
}

thread_local! {
    // One block's output, zeroed once per thread: the frame decoder allocates and zeroes
    // a 64 KiB+ window per batch, more work than a small batch's decompression.
    static LZ4_BLOCK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

// LZ4 frame format (lz4_Frame_format.md): FLG bits.
const LZ4_VERSION_MASK: u8 = 0xC0;
const LZ4_VERSION_01: u8 = 0x40;
const LZ4_BLOCK_INDEPENDENT: u8 = 0x20;
const LZ4_BLOCK_CHECKSUM: u8 = 0x10;
const LZ4_CONTENT_SIZE: u8 = 0x08;
const LZ4_CONTENT_CHECKSUM: u8 = 0x04;
const LZ4_RESERVED_FLG: u8 = 0x02;
const LZ4_DICT_ID: u8 = 0x01;
const LZ4_UNCOMPRESSED_BLOCK: u32 = 0x8000_0000;

/// The frames of `data` when every one has independent blocks and everything checks
/// (header, block and content checksums, content size, block sizes, `limit`), each
/// block decoded with the block API into one reused buffer; `None` hands the input to
/// the general decoder (linked blocks, dictionary ids, legacy frames, any anomaly).
fn unlz4_independent(data: &[u8], limit: u64) -> Option<Vec<u8>> {
    LZ4_BLOCK.with(|cell| {
        let mut block = cell.borrow_mut();
        let mut out = Vec::new();
        let mut pos = 0;
        // Each frame takes at least its 7-byte header and 4-byte end mark.
        while pos < data.len() {
            pos = lz4_frame(data, pos, limit, &mut block, &mut out)?;
        }
        Some(out)
    })
}

/// One independent-block frame at `pos` appended to `out`; the offset after it.
fn lz4_frame(
    data: &[u8],
    mut pos: usize,
    limit: u64,
    block: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Option<usize> {
    let start = out.len();
    let (flags, bd) = (*data.get(pos + 4)?, *data.get(pos + 5)?);
    let wanted = LZ4_VERSION_01 | LZ4_BLOCK_INDEPENDENT;
    if !data.get(pos..)?.starts_with(LZ4_MAGIC)
        || flags & (LZ4_VERSION_MASK | LZ4_BLOCK_INDEPENDENT | LZ4_RESERVED_FLG | LZ4_DICT_ID)
            != wanted
        || bd & 0x8F != 0
        || !(4..=7).contains(&(bd >> 4))
    {
        return None;
    }
    let max_block = 1usize << (8 + 2 * (bd >> 4)); // 64 KiB, 256 KiB, 1 MiB, 4 MiB
    let descriptor_end = pos + 6 + if flags & LZ4_CONTENT_SIZE != 0 { 8 } else { 0 };
    let descriptor = data.get(pos + 4..descriptor_end)?;
    if *data.get(descriptor_end)? != (twox_hash::XxHash32::oneshot(0, descriptor) >> 8) as u8 {
        return None;
    }
    let content_size = match flags & LZ4_CONTENT_SIZE {
        0 => None,
        _ => Some(Cursor::new(descriptor, 2).u64_le().ok()?),
    };
    pos = descriptor_end + 1;
    if block.len() < max_block {
        block.resize(max_block, 0);
    }
    loop {
        let word = le_u32(data, pos)?;
        pos += 4;
        if word == 0 {
            break;
        }
        let len = (word & !LZ4_UNCOMPRESSED_BLOCK) as usize;
        let raw = data.get(pos..pos.checked_add(len)?)?;
        if len > max_block {
            return None;
        }
        pos += len;
        if flags & LZ4_BLOCK_CHECKSUM != 0 {
            let sum = le_u32(data, pos)?;
            pos += 4;
            if twox_hash::XxHash32::oneshot(0, raw) != sum {
                return None;
            }
        }
        let part = if word & LZ4_UNCOMPRESSED_BLOCK != 0 {
            raw
        } else {
            let n = lz4_flex::block::decompress_into(raw, &mut block[..max_block]).ok()?;
            &block[..n]
        };
        if out.len() as u64 + part.len() as u64 > limit {
            return None;
        }
        out.extend_from_slice(part);
    }
    let content = out.get(start..)?;
    if content_size.is_some_and(|n| n != content.len() as u64) {
        return None;
    }
    if flags & LZ4_CONTENT_CHECKSUM != 0 {
        let sum = le_u32(data, pos)?;
        pos += 4;
        if twox_hash::XxHash32::oneshot(0, content) != sum {
            return None;
        }
    }
    Some(pos)
}

fn fix_lz4_header_checksum(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 7 || !data.starts_with(LZ4_MAGIC) {
        return None;
    }
    let flags = data[4];
    let hc_at = 6 + if flags & 0x08 != 0 { 8 } else { 0 } + if flags & 0x01 != 0 { 4 } else { 0 };
    let descriptor = data.get(4..hc_at).filter(|_| hc_at < data.len())?;
    let mut fixed = data.to_vec();
    fixed[hc_at] = (twox_hash::XxHash32::oneshot(0, descriptor) >> 8) as u8;
    Some(fixed)
}
