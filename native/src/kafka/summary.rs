//! Stage 5 (summary only): a pair's bodies -> the analytics columns, by interpreting the
//! exported layouts (`dissector/protocol/summary.py` semantics).
//!
//! One pass per frame, in wire order: every field moves the cursor (validated exactly as
//! the Python decoder validates it), but only fields with a role are looked at, and
//! only what a column needs is kept. Python's walk visits a decoded dict in insertion
//! order, which is wire order, so a streaming pass sees values in the same order.
//!
//! Anything Python would report in `decode_error` (a field cut short, an unknown
//! version, bytes after the body) makes the summary `defer`: the caller re-runs that
//! pair through the Python decoder for the exact wording. Record-batch anomalies are
//! not deferred: they are summarised here (`records: <code>: <detail>`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::counter::Counter;
use crate::cursor::{be_i16, Cursor, Fault, VARINT_BYTES};
use crate::kafka::model::{role, Direction, Kind, Layout, Model, NoSpec, Node, Step};
use crate::kafka::records::{summarize_records, Budget, CODEC_NAMES};
use crate::types::{Counters, Versions};

/// Distinct topics kept per pair; a frame of millions of names keeps this many.
pub const MAX_TOPICS: usize = 10_000;
/// Distinct topic ids remembered per capture.
pub const MAX_KNOWN_IDS: usize = 1 << 20;

/// topic_id -> name, learnt from the responses the model lists (`summary.TopicNames`).
/// One lives per capture; ids resolve only for pairs after the response that named them.
#[derive(Debug, Default, Clone)]
pub struct TopicNames {
    names: HashMap<String, String>,
}

impl TopicNames {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn name(&self, topic_id: &str) -> Option<&str> {
        self.names.get(topic_id).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every id -> name known so far (the glue hands them to Python for deferred pairs).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.names.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn learn(&mut self, id: String, name: String, counters: &mut Counters) {
        if self.names.len() >= MAX_KNOWN_IDS && !self.names.contains_key(&id) {
            counters.inc(Counter::SummaryTopicIdsDropped);
            return;
        }
        self.names.insert(id, name);
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub error_code: Option<i64>,
    pub error_name: Option<Arc<str>>,
    pub error_count: u32,
    pub topics: Vec<String>,
    pub partitions: Option<u64>,
    pub records: Option<u64>,
    pub record_bytes: Option<u64>,
    pub compression: Option<String>,
    pub throttle_ms: Option<i64>,
    /// Record-batch anomalies only ("records: <code>: <detail>"); any other decode
    /// problem defers.
    pub decode_error: Option<String>,
    /// How many record-batch anomalies the pair had (listed or not).
    pub record_errors: u32,
    /// Python's `rows` would mark the row malformed (never set without `defer` today).
    pub fatal: bool,
    /// Re-run this pair through the Python decoder: see `defer_reason`.
    pub defer: bool,
    pub defer_reason: Option<&'static str>,
    /// One value per `Model::extracts` column.
    pub extracts: Vec<Option<i64>>,
    /// The version whose layout decoded a pair newer than the model (`Model::assumed_layout`).
    pub assumed_version: Option<i64>,
}

/// Why a walk stopped: the first Python-visible problem, in short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop(pub &'static str);

pub(crate) type R<T> = Result<T, Stop>;

pub(crate) const SHORT: Stop = Stop("short");

// ------------------------------------------------------------------ reads

impl From<Fault> for Stop {
    #[inline]
    fn from(fault: Fault) -> Stop {
        match fault {
            Fault::Short => SHORT,
            Fault::LongVarint => Stop("varint"),
        }
    }
}

/// An unsigned varint as `compile.read_uvarint` reads it (5 bytes, up to 35 bits).
#[inline]
pub(crate) fn read_uvarint(cur: &mut Cursor<'_>) -> R<u64> {
    Ok(cur.uvarint(VARINT_BYTES)?)
}

/// A length or count: -1 (or any negative) is null.
#[inline]
pub(crate) fn read_length(cur: &mut Cursor<'_>, flexible: bool, wide: bool) -> R<i64> {
    if flexible {
        Ok(read_uvarint(cur)? as i64 - 1)
    } else if wide {
        Ok(i64::from(cur.i32()?))
    } else {
        Ok(i64::from(cur.i16()?))
    }
}

/// Bytes of a sized value (string, bytes, records); None when null.
#[inline]
pub(crate) fn read_sized<'a>(
    cur: &mut Cursor<'a>,
    flexible: bool,
    wide: bool,
) -> R<Option<&'a [u8]>> {
    let n = read_length(cur, flexible, wide)?;
    if n < -1 {
        // -1 is null; any other negative length is an error the Python decoder words
        return Err(Stop("bad_length"));
    }
    if n < 0 {
        return Ok(None);
    }
    let n = usize::try_from(n).map_err(|_| SHORT)?;
    Ok(Some(cur.take(n)?))
}

/// The request header's client_id: any negative length reads as null, as the
/// Python header reader (`messages.py`) and Kafka's own header parser take it.
fn skip_client_id(cur: &mut Cursor<'_>) -> R<()> {
    let n = read_length(cur, false, false)?;
    if n >= 0 {
        cur.take(usize::try_from(n).map_err(|_| SHORT)?)?;
    }
    Ok(())
}

#[inline]
pub(crate) fn read_int(cur: &mut Cursor<'_>, kind: Kind) -> R<i128> {
    Ok(match kind {
        Kind::I8 => i128::from(cur.i8()?),
        Kind::I16 => i128::from(cur.i16()?),
        Kind::I32 => i128::from(cur.i32()?),
        Kind::I64 => i128::from(cur.i64()?),
        Kind::U8 => i128::from(cur.u8()?),
        Kind::U16 => i128::from(cur.u16()?),
        Kind::U32 => i128::from(cur.u32()?),
        Kind::U64 => i128::from(cur.u64()?),
        _ => return Err(Stop("not an int")),
    })
}

/// The text of a uuid as `compile.uuid_text` writes it.
pub(crate) fn uuid_text(raw: &[u8]) -> String {
    let chars = uuid_chars(raw);
    String::from_utf8_lossy(&chars).into_owned() // hex digits and dashes: never replaced
}

/// Python's `bytes.decode("utf-8", "replace")`, borrowed when nothing is replaced;
/// the common valid case checked by `from_utf8`, cheaper than the lossy scan.
#[inline]
pub(crate) fn lossy(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(raw),
    }
}

/// Hex digits and dashes of a uuid's text.
const UUID_TEXT: usize = 36;

/// `uuid_text` without the heap: the characters in place.
fn uuid_chars(raw: &[u8]) -> [u8; UUID_TEXT] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; UUID_TEXT];
    let mut at = 0;
    for (i, b) in raw.iter().take(16).enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1; // the dash already there
        }
        out[at] = HEX[usize::from(b >> 4)];
        out[at + 1] = HEX[usize::from(b & 0xf)];
        at += 2;
    }
    out
}

/// A text value as found, without a heap copy: a string's text borrowed from the frame
/// when it is valid UTF-8 (replaced as Python decodes it otherwise), a uuid's 16 bytes
/// (its text is made only for the distinct ones a row keeps). Equal when their texts are.
#[derive(Debug, Clone)]
enum Word<'a> {
    Str(Cow<'a, str>),
    Uuid([u8; 16]),
}

impl Word<'_> {
    /// The text; borrowed for a string.
    fn text(&self) -> Cow<'_, str> {
        match self {
            Word::Str(text) => Cow::Borrowed(text),
            Word::Uuid(raw) => Cow::Owned(uuid_text(raw)),
        }
    }

    /// Is this the text `other`? (a uuid is compared in its text form, on the stack)
    fn is(&self, other: &str) -> bool {
        match self {
            Word::Str(text) => text == other,
            Word::Uuid(raw) => uuid_chars(raw) == other.as_bytes(),
        }
    }
}

impl PartialEq for Word<'_> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Word::Uuid(a), Word::Uuid(b)) => a == b, // same bytes, same text
            (Word::Str(a), Word::Str(b)) => a == b,
            (Word::Str(a), Word::Uuid(_)) => other.is(a),
            (Word::Uuid(_), Word::Str(b)) => self.is(b),
        }
    }
}

impl Eq for Word<'_> {}

impl std::hash::Hash for Word<'_> {
    /// The text's bytes, as `eq` compares texts.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Word::Str(text) => text.as_bytes().hash(state),
            Word::Uuid(raw) => uuid_chars(raw)[..].hash(state),
        }
    }
}

/// A value that decodes to a Python str: a string (raw bytes) or a uuid.
#[derive(Clone, Copy)]
enum Text<'a> {
    Str(&'a [u8]),
    Uuid([u8; 16]),
}

impl<'a> Text<'a> {
    fn text(self) -> String {
        match self {
            Text::Str(raw) => String::from_utf8_lossy(raw).into_owned(),
            Text::Uuid(raw) => uuid_text(&raw),
        }
    }

    /// The text, borrowed from the frame where it can be (topics are compared per
    /// pair, and only the distinct ones become the column's strings).
    fn word(self) -> Word<'a> {
        match self {
            Text::Str(raw) => Word::Str(lossy(raw)),
            Text::Uuid(raw) => Word::Uuid(raw),
        }
    }

    fn is_empty(self) -> bool {
        matches!(self, Text::Str(raw) if raw.is_empty())
    }
}

// ------------------------------------------------------------------ topics

/// A topic as found: a name, or an id resolved at the end of the pair (Python learns
/// from the response before it scans either side).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Cand<'a> {
    Name(Word<'a>),
    Id(Word<'a>),
}

/// Distinct topic candidates in first-seen order, bounded. Most pairs name a few
/// topics: they are deduplicated by a scan, and a set is only built past `SMALL`.
#[derive(Default)]
struct Topics<'a> {
    order: Vec<Cand<'a>>,
    seen: Option<HashSet<Cand<'a>>>,
    truncated: bool,
}

const SMALL: usize = 32;

impl<'a> Topics<'a> {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn contains(&self, c: &Cand<'a>) -> bool {
        match &self.seen {
            Some(set) => set.contains(c),
            None => self.order.contains(c),
        }
    }

    fn remember(&mut self, c: &Cand<'a>) {
        if let Some(set) = &mut self.seen {
            set.insert(c.clone());
        } else if self.order.len() >= SMALL {
            self.seen = Some(self.order.iter().cloned().chain([c.clone()]).collect());
        }
    }

    fn add(&mut self, c: Cand<'a>) {
        if self.contains(&c) {
            return;
        }
        if self.order.len() >= MAX_TOPICS {
            self.truncated = true;
            return;
        }
        self.remember(&c);
        self.order.push(c);
    }

    /// `c` as if it had been added when `len()` was `mark` (an entry's own topic
    /// comes before the topics found inside it).
    fn add_at(&mut self, mark: usize, c: Cand<'a>) {
        if self.order.len() == mark {
            return self.add(c);
        }
        if self.contains(&c) {
            if let Some(i) = self.order.iter().position(|x| *x == c) {
                if i > mark {
                    let moved = self.order.remove(i);
                    self.order.insert(mark, moved);
                }
            }
            return;
        }
        if self.order.len() >= MAX_TOPICS {
            self.truncated = true;
            return;
        }
        self.remember(&c);
        self.order.insert(mark.min(self.order.len()), c);
    }
}

// ------------------------------------------------------------------ one side's scan

#[derive(Default)]
struct Scan<'a> {
    topics: Topics<'a>,
    first_nonzero_error: Option<i128>,
    saw_error_code: bool,
    error_count: u32,
    partitions: Option<u64>,
    records: Option<u64>,
    record_bytes: Option<u64>,
    codecs: u8,
    record_errors: Vec<String>,
    top_error: Option<i128>,
    throttle: Option<i128>,
    top_topic: Option<String>,
    top_topic_name: Option<String>,
    learned: Vec<(String, String)>,
}

impl Scan<'_> {
    /// The topics the body's top level names (`topic`, then `topic_name`), after those
    /// of its entries.
    fn top_names(&self) -> impl Iterator<Item = Cow<'_, str>> {
        [&self.top_topic, &self.top_topic_name]
            .into_iter()
            .flatten()
            .map(|t| Cow::Borrowed(t.as_str()))
    }
}

/// What an entry of an item array says about its topic (`summary._topic_of`).
#[derive(Default)]
struct Item<'a> {
    topic: Option<Text<'a>>,
    topic_name: Option<Text<'a>>,
    name: Option<Text<'a>>,
    topic_id: Option<Text<'a>>,
    partition_key: bool,
    learn_id: Option<Text<'a>>,
    learn_name: Option<Text<'a>>,
}

struct Walker<'m, 'b, 'a> {
    model: &'m Model,
    flexible: bool,
    scan: &'b mut Scan<'a>,
    budget: &'b mut Budget,
    counters: &'b mut Counters,
    extracts: &'b mut [Option<i64>],
    /// The bytes are a prefix of the body (the rest was not captured): arrays are read
    /// into as far as the bytes go, and an item's topic counts even when its end is cut.
    prefix: bool,
}

impl<'m, 'a> Walker<'m, '_, 'a> {
    fn field(
        &mut self,
        n: &'m Node,
        cur: &mut Cursor<'a>,
        depth: usize,
        item: Option<&mut Item<'a>>,
    ) -> R<()> {
        if n.roles & role::VISIT == 0 {
            return skip_field(self.model, n, cur, self.flexible, depth);
        }
        if n.array {
            return self.array(n, cur, depth);
        }
        match n.kind {
            Kind::Struct => {
                if n.nullable && self.flexible && cur.u8()? == 255 {
                    return Ok(());
                }
                if n.roles & role::SIZE_STRUCT != 0 {
                    return Err(Stop("size_struct"));
                }
                self.members(n, cur, depth + 1, None)
            }
            Kind::Records => self.records(cur),
            Kind::Str | Kind::Uuid => {
                let text = if n.kind == Kind::Uuid {
                    Some(Text::Uuid(cur.array()?))
                } else {
                    read_sized(cur, self.flexible, false)?.map(Text::Str)
                };
                self.text_roles(n, text, item);
                Ok(())
            }
            k if k.is_int() => {
                let v = read_int(cur, k)?;
                self.int_roles(n, v);
                Ok(())
            }
            _ => skip_field(self.model, n, cur, self.flexible, depth),
        }
    }

    /// A `records` value: its batches counted into the scan.
    fn records(&mut self, cur: &mut Cursor<'a>) -> R<()> {
        let Some(data) = read_sized(cur, self.flexible, true)? else {
            return Ok(());
        };
        if self.prefix {
            return Ok(()); // record counts of a cut body are not reported
        }
        let s = &mut self.scan;
        if data.is_empty() {
            // what `summarize_records` finds in no bytes (a long poll's partitions)
            s.records.get_or_insert(0);
            s.record_bytes.get_or_insert(0);
            return Ok(());
        }
        let r = summarize_records(data, self.budget, self.counters);
        s.records = Some(s.records.unwrap_or(0).saturating_add(r.records));
        s.record_bytes = Some(s.record_bytes.unwrap_or(0).saturating_add(r.bytes));
        s.codecs |= r.codecs;
        if !r.errors.is_empty() {
            s.record_errors.extend(r.errors);
        }
        Ok(())
    }

    #[inline]
    fn int_roles(&mut self, n: &Node, v: i128) {
        let s = &mut self.scan;
        if n.roles & role::ERROR != 0 {
            s.saw_error_code = true;
            if v != 0 {
                s.error_count = s.error_count.saturating_add(1);
                s.first_nonzero_error.get_or_insert(v);
            }
        }
        if n.roles & role::TOP_ERROR != 0 {
            s.top_error = Some(v);
        }
        if n.roles & role::THROTTLE != 0 {
            s.throttle = Some(v);
        }
        if let Some(slot) = n.extract {
            if let Some(out) = self.extracts.get_mut(usize::from(slot)) {
                *out = i64::try_from(v).ok();
            }
        }
    }

    #[inline]
    fn text_roles(&mut self, n: &Node, text: Option<Text<'a>>, item: Option<&mut Item<'a>>) {
        let r = n.roles;
        if r & role::TOP_TOPIC != 0 {
            let value = text.map(Text::text);
            if &*n.name == "topic" {
                self.scan.top_topic = value;
            } else {
                self.scan.top_topic_name = value;
            }
        }
        let Some(item) = item else { return };
        if r & role::ITEM_TOPIC != 0 {
            item.topic = text;
        }
        if r & role::ITEM_TOPIC_NAME != 0 {
            item.topic_name = text;
        }
        if r & role::ITEM_NAME != 0 {
            item.name = text;
        }
        if r & role::ITEM_TOPIC_ID != 0 {
            item.topic_id = text;
        }
        if r & role::LEARN_ID != 0 {
            item.learn_id = text;
        }
        if r & role::LEARN_NAME != 0 {
            item.learn_name = text;
        }
    }

    /// A struct's members: plain ones in order, then its tagged section.
    fn members(
        &mut self,
        n: &'m Node,
        cur: &mut Cursor<'a>,
        depth: usize,
        mut item: Option<&mut Item<'a>>,
    ) -> R<()> {
        if depth > crate::kafka::model::MAX_DEPTH {
            return Err(Stop("depth"));
        }
        let model = self.model;
        for &step in model.walk_steps(n) {
            match step {
                Step::Skip(size) => cur.skip(size as usize)?,
                // what `member` -> `field` does with a member it has nothing to read in
                Step::Pass(id) => skip_field(model, model.node(id), cur, self.flexible, depth)?,
                Step::Visit(id) => self.member(model.node(id), cur, depth, item.as_deref_mut())?,
                Step::Int(id) => {
                    let m = model.node(id);
                    let v = read_int(cur, m.kind)?;
                    self.int_roles(m, v);
                }
                Step::Records(_) => self.records(cur)?,
            }
        }
        if !self.flexible {
            return Ok(());
        }
        if cur.eat(0) {
            // the usual empty tag section
            return Ok(());
        }
        let tagged = model.tagged(n);
        let count = read_uvarint(cur)?;
        if count > cur.left() as u64 {
            return Err(SHORT);
        }
        let mut seen: u64 = 0; // bit i: tagged[i] already read (duplicates would overwrite)
        for _ in 0..count {
            let tag = read_uvarint(cur)?;
            let size = usize::try_from(read_uvarint(cur)?).map_err(|_| SHORT)?;
            let chunk = cur.take(size)?;
            let Some(i) = tagged
                .iter()
                .position(|&id| model.node(id).tag == Some(tag))
            else {
                continue; // unknown tags are kept raw by Python: nothing a column reads
            };
            if i >= 64 || seen & (1 << i) != 0 {
                return Err(Stop("duplicate_tag"));
            }
            seen |= 1 << i;
            // A known tag decodes from its own bytes; what it leaves unread is ignored.
            let mut sub = Cursor::new(chunk, 0);
            self.member(model.node(tagged[i]), &mut sub, depth, item.as_deref_mut())?;
        }
        Ok(())
    }

    /// One member of a struct; an entry of an item array notes its keys as Python's
    /// `any("partition" in k for k in item)` sees them (present members only).
    #[inline]
    fn member(
        &mut self,
        m: &'m Node,
        cur: &mut Cursor<'a>,
        depth: usize,
        item: Option<&mut Item<'a>>,
    ) -> R<()> {
        if m.roles & role::ITEM_ODD != 0 {
            return Err(Stop("item_odd"));
        }
        if let Some(item) = item {
            item.partition_key |= m.roles & role::PARTITION_KEY != 0;
            return self.field(m, cur, depth, Some(item));
        }
        self.field(m, cur, depth, None)
    }

    fn array(&mut self, n: &'m Node, cur: &mut Cursor<'a>, depth: usize) -> R<()> {
        let count = read_length(cur, self.flexible, true)?;
        if count < 0 {
            return Ok(()); // null: Python's value is None, which no rule reads
        }
        let mut count = count as u64;
        if count > cur.left() as u64 {
            if !self.prefix {
                return Err(Stop("array_count"));
            }
            // Every element takes a byte at least: one more than the bytes left meets
            // the cut, whatever the count says.
            count = cur.left() as u64 + 1;
        }
        if n.roles & role::PARTITIONS != 0 {
            let s = &mut self.scan;
            s.partitions = Some(s.partitions.unwrap_or(0).saturating_add(count));
        }
        match n.kind {
            Kind::Struct => self.struct_items(n, cur, depth, count),
            Kind::Str | Kind::Uuid if n.roles & role::TOPIC_STRINGS != 0 => {
                self.topic_strings(n, cur, count)
            }
            _ => skip_elements(self.model, n, cur, self.flexible, depth, count),
        }
    }

    fn struct_items(
        &mut self,
        n: &'m Node,
        cur: &mut Cursor<'a>,
        depth: usize,
        count: u64,
    ) -> R<()> {
        let items = n.roles & (role::TOPIC_OF_ITEMS | role::GENERIC) != 0;
        let learn = n.roles & role::LEARN_TOPICS != 0;
        let topic_array = n.roles & role::TOPIC_ARRAY != 0;
        if items {
            // most entries name a topic: grow once (bounded: the count is untrusted)
            let expected = usize::try_from(count.min(SMALL as u64)).unwrap_or(SMALL);
            self.scan.topics.order.reserve(expected);
        }
        for _ in 0..count {
            if !items && !learn {
                self.members(n, cur, depth + 1, None)?;
                continue;
            }
            let mark = self.scan.topics.len();
            let mut item = Item::default();
            let read = self.members(n, cur, depth + 1, Some(&mut item));
            if items && (read.is_ok() || self.prefix) {
                if let Some(c) = self.topic_of(topic_array, &item) {
                    self.scan.topics.add_at(mark, c);
                }
            }
            // An entry cut after its id and name still names the topic (Python's
            // `TopicNames.learn` reads the partial entry the same way).
            if learn && (read.is_ok() || self.prefix) {
                if let (Some(id), Some(name)) = (item.learn_id, item.learn_name) {
                    let id = id.text();
                    if id != self.model.zero_uuid {
                        self.scan.learned.push((id, name.text()));
                    }
                }
            }
            read?;
        }
        Ok(())
    }

    /// `summary._topic_of`, on the values its entry held.
    fn topic_of(&self, topic_array: bool, item: &Item<'a>) -> Option<Cand<'a>> {
        // `item.get("topic") or item.get("topic_name")`: an empty topic gives way.
        let first = match item.topic {
            Some(t) if !t.is_empty() => Some(t),
            _ => item.topic_name,
        };
        if let Some(t) = first {
            return Some(Cand::Name(t.word()));
        }
        if let Some(name) = item.name {
            if !name.is_empty() && (topic_array || item.partition_key) {
                return Some(Cand::Name(name.word()));
            }
        }
        let id = item.topic_id?.word();
        let zero = match &id {
            Word::Uuid(raw) => self.model.zero_uuid_bytes.as_ref() == Some(raw),
            Word::Str(text) => *text == self.model.zero_uuid,
        };
        (!zero).then_some(Cand::Id(id))
    }

    fn topic_strings(&mut self, n: &Node, cur: &mut Cursor<'a>, count: u64) -> R<()> {
        // Python reads the entries only when the first one is a str (not null).
        let mut first_is_text = false;
        for i in 0..count {
            let text = if n.kind == Kind::Uuid {
                Some(Text::Uuid(cur.array()?))
            } else {
                read_sized(cur, self.flexible, false)?.map(Text::Str)
            };
            if i == 0 {
                first_is_text = text.is_some();
            }
            if let (true, Some(t)) = (first_is_text, text) {
                self.scan.topics.add(Cand::Name(t.word()));
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ skipping

/// Move past one field without looking at it, checking what Python's decoder checks.
pub(crate) fn skip_field(
    model: &Model,
    n: &Node,
    cur: &mut Cursor<'_>,
    flexible: bool,
    depth: usize,
) -> R<()> {
    if n.array {
        let count = read_length(cur, flexible, true)?;
        if count < 0 {
            return Ok(());
        }
        let count = count as u64;
        if count > cur.left() as u64 {
            return Err(Stop("array_count"));
        }
        return skip_elements(model, n, cur, flexible, depth, count);
    }
    skip_value(model, n, cur, flexible, depth)
}

pub(crate) fn skip_elements(
    model: &Model,
    n: &Node,
    cur: &mut Cursor<'_>,
    flexible: bool,
    depth: usize,
    count: u64,
) -> R<()> {
    if let Some(size) = n.fixed {
        let total = count.checked_mul(size as u64).ok_or(SHORT)?;
        return Ok(cur.skip(usize::try_from(total).map_err(|_| SHORT)?)?);
    }
    for _ in 0..count {
        skip_value(model, n, cur, flexible, depth)?;
    }
    Ok(())
}

/// One value of `n`'s type (one element, for arrays).
pub(crate) fn skip_value(
    model: &Model,
    n: &Node,
    cur: &mut Cursor<'_>,
    flexible: bool,
    depth: usize,
) -> R<()> {
    if let Some(size) = n.fixed {
        return Ok(cur.skip(size)?);
    }
    match n.kind {
        Kind::Str => read_sized(cur, flexible, false).map(drop),
        Kind::Bytes | Kind::Records => read_sized(cur, flexible, true).map(drop),
        Kind::Struct => {
            if n.nullable && !n.array && flexible && cur.u8()? == 255 {
                return Ok(());
            }
            skip_members(model, n, cur, flexible, depth + 1)
        }
        _ => Err(Stop("no size")), // fixed kinds have `fixed` set
    }
}

fn skip_members(
    model: &Model,
    n: &Node,
    cur: &mut Cursor<'_>,
    flexible: bool,
    depth: usize,
) -> R<()> {
    if depth > crate::kafka::model::MAX_DEPTH {
        return Err(Stop("depth"));
    }
    for &step in model.skip_steps(n) {
        match step {
            Step::Skip(size) => cur.skip(size as usize)?,
            Step::Pass(id) | Step::Visit(id) | Step::Int(id) | Step::Records(id) => {
                skip_field(model, model.node(id), cur, flexible, depth)?
            }
        }
    }
    if flexible {
        if cur.eat(0) {
            // the usual empty tag section
            return Ok(());
        }
        skip_tags(model, model.tagged(n), cur, depth)?;
    }
    Ok(())
}

/// A tagged-field section: known tags must decode from their bytes, as in Python.
fn skip_tags(model: &Model, tagged: &[u32], cur: &mut Cursor<'_>, depth: usize) -> R<()> {
    let count = read_uvarint(cur)?;
    if count > cur.left() as u64 {
        return Err(SHORT);
    }
    for _ in 0..count {
        let tag = read_uvarint(cur)?;
        let size = usize::try_from(read_uvarint(cur)?).map_err(|_| SHORT)?;
        let chunk = cur.take(size)?;
        if let Some(&id) = tagged.iter().find(|&&id| model.node(id).tag == Some(tag)) {
            skip_field(
                model,
                model.node(id),
                &mut Cursor::new(chunk, 0),
                true,
                depth,
            )?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ headers

/// Where one side's body starts and the layout that reads it, or the decode_error of a
/// side no layout describes (`Unsupported::text`).
pub(crate) enum Start<'m> {
    /// `key`: the side's own (api_key, version), as its decoder reads them.
    Body {
        layout: &'m Layout,
        at: usize,
        key: (i16, i16),
    },
    Unsupported(NoSpec),
}

/// A side no layout decodes: its words when the model has them, else defer to Python.
fn unsupported<'m>(model: &Model, api_key: i16, version: i16, dir: Direction) -> R<Start<'m>> {
    match &model.unsupported {
        Some(u) => Ok(Start::Unsupported(u.describe(api_key, version, dir))),
        None => Err(Stop("unsupported_version")),
    }
}

/// Where the body starts in a request frame, and its layout (`messages.decode_request`).
pub(crate) fn request_start<'m>(model: &'m Model, buf: &[u8]) -> R<Start<'m>> {
    let mut cur = Cursor::new(buf, 0);
    let api_key = cur.i16()?;
    let version = cur.i16()?;
    cur.skip(4)?; // correlation_id
    let found = model
        .layout(api_key, version, Direction::Request)
        .or_else(|| model.assumed_layout(api_key, version, Direction::Request));
    let Some(layout) = found else {
        // Python reads the client_id before it looks for a layout: a cut one is its error.
        if !model.header_v0_requests.contains(&(api_key, version)) {
            skip_client_id(&mut cur)?;
        }
        return unsupported(model, api_key, version, Direction::Request);
    };
    if layout.header_version >= 1 {
        // client_id stays a legacy nullable string even in header v2
        skip_client_id(&mut cur)?;
    }
    if layout.header_version >= 2 {
        if let Err(stop) = header_tags(&mut cur) {
            // the header's tags belong to the assumed layout's trial (`messages._assumed`)
            return match model.layout(api_key, version, Direction::Request) {
                Some(_) => Err(stop),
                None => unsupported(model, api_key, version, Direction::Request),
            };
        }
    }
    Ok(Start::Body {
        layout,
        at: cur.pos(),
        key: (api_key, version),
    })
}

/// The response's layout and body start (`messages.decode_response`, its ApiVersions rule).
pub(crate) fn response_start<'m>(
    model: &'m Model,
    buf: &[u8],
    api_key: i16,
    api_version: i16,
) -> R<Start<'m>> {
    let mut cur = Cursor::new(buf, 0);
    cur.skip(4)?; // correlation_id
    let version = fallback_version(model, buf, api_key, api_version).unwrap_or(api_version);
    let found = model
        .layout(api_key, version, Direction::Response)
        .or_else(|| model.assumed_layout(api_key, version, Direction::Response));
    let Some(layout) = found else {
        return unsupported(model, api_key, api_version, Direction::Response);
    };
    if layout.header_version >= 1 {
        if let Err(stop) = header_tags(&mut cur) {
            return match model.layout(api_key, version, Direction::Response) {
                Some(_) => Err(stop),
                None => unsupported(model, api_key, api_version, Direction::Response),
            };
        }
    }
    Ok(Start::Body {
        layout,
        at: cur.pos(),
        key: (api_key, api_version),
    })
}

/// The layout version of an ApiVersions response the broker wrote to refuse the request's
/// version (error 35 in v0's layout, KIP-511), if this response is one.
fn fallback_version(model: &Model, buf: &[u8], api_key: i16, api_version: i16) -> Option<i16> {
    let fb = model.fallback;
    let code = be_i16(buf, 4)?;
    (api_key == fb.api_key && api_version > 0 && code == fb.error_code).then_some(fb.version)
}

fn header_tags(cur: &mut Cursor<'_>) -> R<()> {
    let count = read_uvarint(cur)?;
    if count > cur.left() as u64 {
        return Err(SHORT);
    }
    for _ in 0..count {
        read_uvarint(cur)?;
        let size = usize::try_from(read_uvarint(cur)?).map_err(|_| SHORT)?;
        cur.skip(size)?;
    }
    Ok(())
}

/// A top-level int field of a request body (Produce's acks for correlation).
pub fn top_int_field(model: &Model, layout: &Layout, body: &[u8], field: &str) -> Option<i64> {
    let root = model.node(layout.root);
    let mut cur = Cursor::new(body, 0);
    for &id in model.plain(root) {
        let n = model.node(id);
        if &*n.name == field {
            return if n.kind.is_int() && !n.array {
                i64::try_from(read_int(&mut cur, n.kind).ok()?).ok()
            } else {
                None
            };
        }
        skip_field(model, n, &mut cur, layout.flexible, 1).ok()?;
    }
    None // tagged top-level ints are not needed by correlation
}

/// The model answers the wire stages' questions (framing, correlation); reading a
/// top-level int of a body takes this module's walk, so the impl lives here: the model
/// does not depend on the summary.
impl Versions for Model {
    fn known(&self, api_key: i16, version: i16) -> bool {
        self.layout(api_key, version, Direction::Request).is_some()
            || (self.specless_keys.contains(&api_key)
                && (0..=self.specless_max_version).contains(&version))
    }

    fn request_flexible(&self, api_key: i16, version: i16) -> bool {
        self.layout(api_key, version, Direction::Request)
            .is_some_and(|l| l.flexible)
    }

    fn request_header_v0(&self, api_key: i16, version: i16) -> bool {
        self.header_v0_requests.contains(&(api_key, version))
    }

    fn request_int_field(
        &self,
        api_key: i16,
        version: i16,
        body: &[u8],
        field: &str,
    ) -> Option<i64> {
        let layout = self.layout(api_key, version, Direction::Request)?;
        top_int_field(self, layout, body, field)
    }

    fn request_acks(&self, api_key: i16, version: i16, body: &[u8]) -> Option<i64> {
        if api_key != self.produce_key {
            return None;
        }
        self.request_int_field(api_key, version, body, &self.acks_field)
    }
}

// ------------------------------------------------------------------ one side, one pair

/// Walk one frame's body into `scan`. Returns whether it decoded as Python would
/// without an error (trailing bytes are not one), and why to defer, if so.
#[allow(clippy::too_many_arguments)]
fn walk_side<'a>(
    model: &Model,
    layout: &Layout,
    buf: &'a [u8],
    start: usize,
    scan: &mut Scan<'a>,
    budget: &mut Budget,
    counters: &mut Counters,
    extracts: &mut [Option<i64>],
) -> (bool, Option<Stop>) {
    let mut w = Walker {
        model,
        flexible: layout.flexible,
        scan,
        budget,
        counters,
        extracts,
        prefix: false,
    };
    let mut cur = Cursor::new(buf, start);
    let root = model.node(layout.root);
    let result = w.members(root, &mut cur, 0, None);
    if result.is_err() {
        // values read before a decode failure are not Python's: keep none of this side's
        clear_extracts(model, layout.direction, extracts);
    }
    match result {
        Err(stop) => (false, Some(stop)),
        Ok(()) if cur.pos() != buf.len() => (true, Some(Stop("trailing_bytes"))),
        Ok(()) => (true, None),
    }
}

/// A pair for Python to summarise; extracts of a side that decoded cleanly are kept.
fn deferred(reason: Stop, extracts: Vec<Option<i64>>) -> Summary {
    Summary {
        defer: true,
        defer_reason: Some(reason.0),
        extracts,
        ..Default::default()
    }
}

/// What the captured prefix of a side cut by the snap length or a capture hole tells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CutFacts {
    /// A non-zero error code read in a response's captured bytes: the top-level one,
    /// else the first nested one. None: none seen (the cut ones may hold any).
    pub error_code: Option<i64>,
    pub error_name: Option<Arc<str>>,
    /// Topic names read whole in the captured bytes (ids resolved as far as known;
    /// ids named in a cut response of a source of names are learnt).
    pub topics: Vec<String>,
    pub throttle_ms: Option<i64>,
}

/// What was read of the captured prefix of each side not captured whole (`read_cut`),
/// before its topics are named (`CutScan::facts`).
pub struct CutScan<'a> {
    request: Scan<'a>,
    response: Scan<'a>,
}

/// Read the captured prefix of each side not captured whole (`request`/`response`:
/// header and body up to the cut) as far as it goes, keeping only what is certain: the
/// values read before the cut. Counts (partitions, records, errors) are not: the rest
/// of the body holds more. Nothing here defers to Python: the cut is no decode error.
///
/// Topic ids that a cut response of a source of names names whole are learnt here, as
/// from a whole response: read before the pair's whole sides are summarized, so that
/// the pair's own ids are named by them (Python: `protocol.pairs.decode_exchanges`).
pub fn read_cut<'a>(
    model: &Model,
    topics: &mut TopicNames,
    api_key: i16,
    api_version: i16,
    request: Option<&'a [u8]>,
    response: Option<&'a [u8]>,
    counters: &mut Counters,
) -> CutScan<'a> {
    let mut extracts = vec![None; model.extracts.len()];
    let mut budget = Budget::for_frame(0, 0);
    let mut scans = [Scan::default(), Scan::default()];
    let [req_scan, resp_scan] = &mut scans;
    let sides = [
        (request.map(|b| (request_start(model, b), b)), req_scan),
        (
            response.map(|b| (response_start(model, b, api_key, api_version), b)),
            resp_scan,
        ),
    ];
    for (side, scan) in sides {
        let Some((Ok(Start::Body { layout, at, .. }), buf)) = side else {
            continue;
        };
        let mut w = Walker {
            model,
            flexible: layout.flexible,
            scan,
            budget: &mut budget,
            counters,
            extracts: &mut extracts,
            prefix: true,
        };
        let mut cur = Cursor::new(buf, at);
        // Stops at the cut: what was read before it is in the scan.
        let _ = w.members(model.node(layout.root), &mut cur, 0, None);
    }
    let [request, mut response] = scans;
    if model.is_id_source(api_key) {
        for (id, name) in response.learned.drain(..) {
            topics.learn(id, name, counters);
        }
    }
    CutScan { request, response }
}

impl CutScan<'_> {
    /// The facts the prefixes tell, topic ids named as far as `topics` knows them.
    pub fn facts(&self, model: &Model, topics: &TopicNames) -> CutFacts {
        let (req_scan, resp_scan) = (&self.request, &self.response);
        let mut out = CutFacts::default();
        let code = match resp_scan.top_error {
            Some(top) if top != 0 => Some(top),
            _ => resp_scan.first_nonzero_error,
        };
        out.error_code = code.and_then(|c| i64::try_from(c).ok());
        out.error_name = out.error_code.and_then(|c| model.error_name(c));
        out.throttle_ms = resp_scan.throttle.and_then(|t| i64::try_from(t).ok());
        for scan in [req_scan, resp_scan] {
            let names = scan.topics.order.iter().map(|c| resolve(topics, c));
            for name in names.chain(scan.top_names()) {
                if out.topics.len() < MAX_TOPICS && !out.topics.iter().any(|t| *t == name) {
                    out.topics.push(name.into_owned());
                }
            }
        }
        out
    }
}

/// The summary columns of one pair; `request`/`response` are whole frame payloads
/// (header + body, no size prefix). See the module doc for `defer`.
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    model: &Model,
    topics: &mut TopicNames,
    api_key: i16,
    api_version: i16,
    request: Option<&[u8]>,
    response: Option<&[u8]>,
    budget: &mut Budget,
    counters: &mut Counters,
) -> Summary {
    let mut extracts = vec![None; model.extracts.len()];
    let mut resp_scan = Scan::default();
    let mut req_scan = Scan::default();
    // The response first: Python learns topic ids from it before scanning either side
    // (learnt after the request's walk: ids only resolve in `combine`).
    let mut resp = response.map(|buf| {
        let start = response_start(model, buf, api_key, api_version);
        side(
            model,
            start,
            buf,
            &mut resp_scan,
            budget,
            counters,
            &mut extracts,
        )
    });
    let mut req = request.map(|buf| {
        let start = request_start(model, buf);
        side(
            model,
            start,
            buf,
            &mut req_scan,
            budget,
            counters,
            &mut extracts,
        )
    });
    // settle_assumed: when a side's version is unknown to specs that know its key, a
    // side decoded by an assumed layout is taken back to unsupported too.
    let newer_side = [&resp, &req].into_iter().flatten().any(|o| {
        matches!(
            o,
            Outcome::Unsupported(NoSpec {
                key_known: true,
                ..
            })
        )
    });
    let mut assumed = None;
    for (outcome, dir) in [
        (&mut resp, Direction::Response),
        (&mut req, Direction::Request),
    ] {
        if let Some(Outcome::Clean {
            assumed: Some(version),
            key,
        }) = outcome
        {
            if !newer_side {
                assumed = Some(i64::from(*version));
                continue;
            }
            let (side_key, side_version) = *key;
            *outcome = Some(match &model.unsupported {
                Some(u) => Outcome::Unsupported(u.describe(side_key, side_version, dir)),
                None => Outcome::Stop {
                    stop: Stop("unsupported_version"),
                    decoded: false,
                },
            });
            clear_extracts(model, dir, &mut extracts);
        }
    }
    // settle_refused: a request version the broker refused too (KIP-511) says so.
    let refused =
        response.is_some_and(|buf| fallback_version(model, buf, api_key, api_version).is_some());
    if refused {
        if let Some(Outcome::Unsupported(no_spec)) = &mut req {
            let refused_text = model.unsupported.as_ref().and_then(|u| {
                no_spec
                    .key_known
                    .then(|| u.refused(api_key, api_version))
                    .flatten()
            });
            if let Some(text) = refused_text {
                no_spec.text = text;
            }
        }
    }
    // Python learns from a response it decoded without error (trailing bytes are not one).
    let learn = matches!(
        resp,
        Some(Outcome::Clean { .. } | Outcome::Stop { decoded: true, .. })
    );
    if learn && model.is_id_source(api_key) {
        for (id, name) in resp_scan.learned.drain(..) {
            topics.learn(id, name, counters);
        }
    }
    // Python's words for a failed side come from its decoder, except "no layout".
    for outcome in [&resp, &req].into_iter().flatten() {
        if let Outcome::Stop { stop, .. } = outcome {
            return deferred(*stop, extracts);
        }
    }
    let empty = Scan::default();
    let scan_of = |o: &Option<Outcome>, scan| match o {
        None => None,
        Some(Outcome::Clean { .. }) => Some(scan),
        Some(_) => Some(&empty),
    };
    let mut out = combine(
        model,
        topics,
        scan_of(&req, &req_scan),
        scan_of(&resp, &resp_scan),
        extracts,
        counters,
    );
    out.assumed_version = assumed;
    let (req_error, resp_error) = (unsupported_text(&req), unsupported_text(&resp));
    if let Some(errors) = decode_errors(req_error, resp_error) {
        out.fatal = [req_error, resp_error]
            .into_iter()
            .flatten()
            .any(|e| model.unsupported.as_ref().is_some_and(|u| u.is_fatal(e)));
        out.decode_error = Some(match out.decode_error.take() {
            Some(records) => format!("{errors}; {records}"),
            None => errors,
        });
    }
    out
}

/// How one side of a pair decoded.
enum Outcome {
    /// As Python would, without error; `assumed`: by a newer version's layout.
    Clean {
        assumed: Option<i16>,
        key: (i16, i16),
    },
    /// No layout describes it (or an assumed one did not fit).
    Unsupported(NoSpec),
    /// Anything else Python would report: the pair is deferred for its words.
    /// `decoded`: the body decoded and only bytes after it remain.
    Stop { stop: Stop, decoded: bool },
}

fn unsupported_text(outcome: &Option<Outcome>) -> Option<&str> {
    match outcome {
        Some(Outcome::Unsupported(no_spec)) => Some(no_spec.text.as_str()),
        _ => None,
    }
}

/// Walk one side from its start; an assumed layout that does not consume the body
/// exactly leaves the side unsupported (`messages._assumed`).
#[allow(clippy::too_many_arguments)]
fn side<'a>(
    model: &Model,
    start: R<Start<'_>>,
    buf: &'a [u8],
    scan: &mut Scan<'a>,
    budget: &mut Budget,
    counters: &mut Counters,
    extracts: &mut [Option<i64>],
) -> Outcome {
    let (layout, at, key) = match start {
        Err(stop) => {
            return Outcome::Stop {
                stop,
                decoded: false,
            }
        }
        Ok(Start::Unsupported(no_spec)) => return Outcome::Unsupported(no_spec),
        Ok(Start::Body { layout, at, key }) => (layout, at, key),
    };
    let (api_key, api_version) = key;
    let assumed = is_assumed(model, layout, api_key, api_version).then_some(layout.version);
    let (decoded, stop) = walk_side(model, layout, buf, at, scan, budget, counters, extracts);
    match (stop, assumed) {
        (None, _) => Outcome::Clean { assumed, key },
        (Some(stop), None) => Outcome::Stop { stop, decoded },
        (Some(stop), Some(_)) => match &model.unsupported {
            Some(u) => {
                *scan = Scan::default();
                clear_extracts(model, layout.direction, extracts);
                Outcome::Unsupported(u.describe(api_key, api_version, layout.direction))
            }
            None => Outcome::Stop {
                stop,
                decoded: false,
            },
        },
    }
}

/// Forget the extract values read from one direction (its decode was not Python's).
fn clear_extracts(model: &Model, direction: Direction, extracts: &mut [Option<i64>]) {
    for (slot, e) in model.extracts.iter().enumerate() {
        if e.direction == direction {
            if let Some(v) = extracts.get_mut(slot) {
                *v = None;
            }
        }
    }
}

/// `summary._decode_errors`: each failed side's error, named by its side.
fn decode_errors(request: Option<&str>, response: Option<&str>) -> Option<String> {
    match (request, response) {
        (Some(q), Some(r)) => Some(format!("request: {q}; response: {r}")),
        (Some(q), None) => Some(format!("request: {q}")),
        (None, Some(r)) => Some(format!("response: {r}")),
        (None, None) => None,
    }
}

/// Was `layout` taken by the assumed-version rule for this pair (not found by its own
/// version, nor by the ApiVersions v0 fallback)?
pub(crate) fn is_assumed(model: &Model, layout: &Layout, api_key: i16, api_version: i16) -> bool {
    model
        .assumed_layout(api_key, api_version, layout.direction)
        .is_some_and(|a| std::ptr::eq(a, layout))
        && model
            .layout(api_key, api_version, layout.direction)
            .is_none()
}

fn combine(
    model: &Model,
    names: &TopicNames,
    req: Option<&Scan<'_>>,
    resp: Option<&Scan<'_>>,
    extracts: Vec<Option<i64>>,
    counters: &mut Counters,
) -> Summary {
    let mut out = Summary {
        extracts,
        ..Default::default()
    };
    // The distinct names, borrowed where they can be until the end.
    let found = [req, resp]
        .into_iter()
        .flatten()
        .map(|s| s.topics.len() + 2)
        .sum::<usize>();
    let mut picked: Vec<Cow<'_, str>> = Vec::with_capacity(found.min(MAX_TOPICS));
    let mut seen: Option<HashSet<Cow<'_, str>>> = None; // built past SMALL names
    let mut truncated = false;
    let mut errors: Vec<&str> = Vec::new();
    let mut codecs = 0u8;
    for scan in [req, resp].into_iter().flatten() {
        truncated |= scan.topics.truncated;
        // A candidate the request had was settled then (picked, a duplicate, or past
        // the bound, which set `truncated`): the response's copy changes nothing.
        let settled = req.filter(|r| !std::ptr::eq(*r, scan));
        let found = scan
            .topics
            .order
            .iter()
            .filter(|c| !settled.is_some_and(|r| r.topics.contains(c)))
            .map(|c| resolve(names, c));
        for name in found.chain(scan.top_names()) {
            let known = match &seen {
                Some(set) => set.contains(&name),
                None => picked.contains(&name),
            };
            if known {
                continue;
            }
            if picked.len() >= MAX_TOPICS {
                truncated = true;
                continue;
            }
            if let Some(set) = &mut seen {
                set.insert(name.clone());
            } else if picked.len() >= SMALL {
                seen = Some(picked.iter().cloned().chain([name.clone()]).collect());
            }
            picked.push(name);
        }
        out.records = sum(out.records, scan.records);
        out.record_bytes = sum(out.record_bytes, scan.record_bytes);
        codecs |= scan.codecs;
        errors.extend(scan.record_errors.iter().map(String::as_str));
        out.partitions = match (out.partitions, scan.partitions) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    out.topics = picked.into_iter().map(Cow::into_owned).collect();
    if truncated {
        counters.inc(Counter::SummaryTopicsTruncated);
    }
    if let Some(r) = resp {
        out.error_count = r.error_count;
        let code = match r.top_error {
            Some(top) if top != 0 => Some(top),
            _ => r
                .first_nonzero_error
                .or(if r.saw_error_code { Some(0) } else { None }),
        };
        out.error_code = code.and_then(|c| i64::try_from(c).ok());
        out.error_name = out.error_code.and_then(|c| model.error_name(c));
        out.throttle_ms = r.throttle.and_then(|t| i64::try_from(t).ok());
    }
    out.compression = compression(codecs);
    out.record_errors = u32::try_from(errors.len()).unwrap_or(u32::MAX);
    out.decode_error = record_errors_text(&errors, model.max_record_errors_listed);
    out
}

/// A candidate's topic name: an id is looked up in the names learnt
/// (`names.name(tid) or tid`: an empty learnt name gives way to the id).
fn resolve<'n>(names: &'n TopicNames, c: &'n Cand<'_>) -> Cow<'n, str> {
    match c {
        Cand::Name(n) => n.text(),
        Cand::Id(Word::Uuid(raw)) => {
            let chars = uuid_chars(raw);
            let text = lossy(&chars); // hex and dashes: borrowed
            match names.name(&text).filter(|n| !n.is_empty()) {
                Some(name) => Cow::Borrowed(name),
                None => Cow::Owned(text.into_owned()),
            }
        }
        Cand::Id(Word::Str(id)) => match names.name(id).filter(|n| !n.is_empty()) {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Borrowed(id),
        },
    }
}

/// `summary._records_errors`: each as "records: <error>", the first `limit` of them,
/// then how many more there were.
fn record_errors_text(errors: &[&str], limit: Option<usize>) -> Option<String> {
    if errors.is_empty() {
        return None;
    }
    let shown = limit.map_or(errors.len(), |l| l.min(errors.len()));
    let mut listed: Vec<String> = errors[..shown]
        .iter()
        .map(|e| format!("records: {e}"))
        .collect();
    if shown < errors.len() {
        listed.push(format!(
            "records: too_many_errors: {} more not listed",
            errors.len() - shown
        ));
    }
    Some(listed.join("; "))
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// Codec names of the batches, sorted and comma-joined as Python's summary does.
/// Bits past `CODEC_NAMES` stand for codec ids records.py calls "unknown".
fn compression(codecs: u8) -> Option<String> {
    if codecs == 0 {
        return None;
    }
    let mut names: Vec<&str> = CODEC_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| codecs & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if codecs >> CODEC_NAMES.len() != 0 {
        names.push("unknown");
    }
    names.sort_unstable();
    Some(names.join(","))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::HashSet;

    use super::{uuid_text, Word};

    #[test]
    fn words_are_equal_and_hash_alike_when_their_texts_are() {
        let raw = [0xab; 16];
        let text = uuid_text(&raw);
        let (a, b) = (Word::Uuid(raw), Word::Str(Cow::Owned(text.clone())));
        // Both directions: the Uuid/Str comparison is written out per side.
        assert!(a == b);
        assert!(b == a);
        assert!(Word::Uuid([0xac; 16]) != b);
        assert!(Word::Str(Cow::Borrowed("x")) != a);
        let set: HashSet<Word<'_>> = [a.clone()].into_iter().collect();
        assert!(set.contains(&b));
        assert_eq!(a.text(), text);
    }
}
