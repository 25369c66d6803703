//! The analytics tables (partitions, groups, versions) beside the pairs, in the same
//! pass over a capture. `dissector/protocol/tables.py` is the oracle: its per-pair
//! functions, run on bodies the Python decoder decoded, give the same rows.
//!
//! For a pair of an API some table reads, each side is decoded into a sparse tree: only
//! the fields with table roles (`table_model::Facts`, compiled from the Python
//! declaration) are kept, every other field is stepped over with the checks the Python
//! decoder makes. The rows are then read from the trees by the same rules as the Python
//! functions, which read dicts. Anything Python would report (a field cut short, a
//! record-batch anomaly, bytes it reads otherwise) stops the walk: the pair's facts are
//! then asked of the Python decoder (`Observed::Defer`), so both give the same rows. The
//! one anomaly read here is batches past the frame's decompression budget in a field
//! not expanded (`records::table_records`), which both count by their headers.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::cursor::Cursor;
use crate::kafka::model::{Direction, Kind, Model, NoSpec, Node, MAX_DEPTH};
use crate::kafka::records::{table_records, Budget, Expansion, DEFAULT_MAX_DECOMPRESSED};
use crate::kafka::summary::{
    is_assumed, lossy, read_int, read_length, read_sized, read_uvarint, request_start,
    response_start, skip_elements, skip_field, skip_value, uuid_text, Start, Stop, TopicNames, R,
    SHORT,
};
use crate::kafka::table_model::{
    Acquired, ContextFills, Facts, GroupRole, PartitionRole, TablesModel, VersionRole,
    MAX_CONTEXT_SLOTS, MAX_ENTRY_COLUMNS, MAX_VALUE_SLOTS,
};
use crate::rows::{Dict as Words, Nullable};
use crate::types::{Counters, Exchange, KafkaFrame};

// ------------------------------------------------------------------ sparse bodies

/// A decoded value of a field with table roles (what the Python decoder's dict holds).
#[derive(Debug)]
pub enum Val<'a> {
    Null,
    Int(i64),
    Text(Cow<'a, str>),
    /// A bytes value: its length.
    Bytes(usize),
    /// A records value: counts, and the offsets of its data records when expanded.
    Records {
        records: u64,
        bytes: u64,
        offsets: Vec<i64>,
    },
    /// An array of structs or ints.
    List(Vec<Val<'a>>),
    /// An array of values no table reads one by one (strings, bytes...): its length.
    Items(u64),
    Dict(Dict<'a>),
    Bool(bool),
    /// Another kind of value (float).
    Other,
}

/// A struct: the members with table roles, in the dict's order (plain members, then
/// tagged ones in wire order), by node; `nonempty`: the dict has any key at all.
#[derive(Debug, Default)]
pub struct Dict<'a> {
    pub members: Vec<(u32, Val<'a>)>,
    pub nonempty: bool,
}

impl<'a> Dict<'a> {
    fn find<'s>(&'s self, model: &Model, pick: impl Fn(&Facts) -> bool) -> Option<&'s Val<'a>> {
        self.members
            .iter()
            .find(|(id, _)| pick(model.facts(model.node(*id))))
            .map(|(_, v)| v)
    }

    fn int(&self, model: &Model, pick: impl Fn(&Facts) -> bool) -> Option<i64> {
        match self.find(model, pick) {
            Some(Val::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn text<'s>(&'s self, model: &Model, pick: impl Fn(&Facts) -> bool) -> Option<&'s str> {
        match self.find(model, pick) {
            Some(Val::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// The member of the lowest rank among those `rank` gives one (the first of equal
    /// ranks). A plain loop: the iterator chain (`filter_map`, `min_by_key`) kept its
    /// (rank, value) state in unaligned stack slots, stalling every step on
    /// store-to-load forwarding: most of `Reader::entries`' time on a long-poll
    /// capture, which ranks the members of every partition entry.
    fn ranked<'s>(
        &'s self,
        model: &Model,
        rank: impl Fn(&Facts) -> Option<u8>,
        fits: impl Fn(&Val<'a>) -> bool,
    ) -> Option<&'s Val<'a>> {
        let mut best: Option<(u8, &'s Val<'a>)> = None;
        for (id, v) in &self.members {
            let Some(r) = rank(model.facts(model.node(*id))) else {
                continue;
            };
            if best.is_none_or(|(b, _)| r < b) && fits(v) {
                best = Some((r, v));
            }
        }
        best.map(|(_, v)| v)
    }
}

static EMPTY: Dict<'static> = Dict {
    members: Vec::new(),
    nonempty: false,
};

/// One side's walk: the fields with table roles kept, the rest checked and skipped.
struct Sparse<'m> {
    model: &'m Model,
    tables: &'m TablesModel,
    flexible: bool,
    /// records.py's frame budgets: decompression, and (expanded) the records kept.
    budget: Budget,
    items: u64,
    expand: bool,
    /// What the records fields' anomalies count (the pairs' counters have them already).
    scratch: Counters,
}

impl<'m> Sparse<'m> {
    fn dict<'a>(&mut self, n: &Node, cur: &mut Cursor<'a>, depth: usize) -> R<Dict<'a>> {
        if depth > MAX_DEPTH {
            return Err(Stop("depth"));
        }
        let model = self.model;
        let plain = model.plain(n);
        let mut d = Dict {
            members: Vec::new(),
            nonempty: !plain.is_empty(),
        };
        // Slots made first and filled in place: a (member, value) pair built and then
        // pushed was read back in other widths than it was written, stalling on
        // store-to-load forwarding (perf annotate: most of this function's own time).
        d.members
            .resize_with(usize::from(n.table_members), || (0, Val::Null));
        let mut kept = 0;
        for &id in plain {
            let m = model.node(id);
            if m.tables {
                if kept == d.members.len() {
                    d.members.push((id, Val::Null));
                }
                let slot = &mut d.members[kept];
                slot.0 = id;
                self.value_into(m, cur, depth, &mut slot.1)?;
                kept += 1;
            } else {
                skip_field(model, m, cur, self.flexible, depth)?;
            }
        }
        d.members.truncate(kept);
        if !self.flexible {
            return Ok(d);
        }
        if cur.eat(0) {
            // the usual empty tag section
            return Ok(d);
        }
        let tagged = model.tagged(n);
        let count = read_uvarint(cur)?;
        if count > cur.left() as u64 {
            return Err(SHORT);
        }
        let mut seen: u64 = 0;
        for _ in 0..count {
            let tag = read_uvarint(cur)?;
            let size = usize::try_from(read_uvarint(cur)?).map_err(|_| SHORT)?;
            let chunk = cur.take(size)?;
            d.nonempty = true; // known or not, the tag is a key of the dict
            let Some(i) = tagged
                .iter()
                .position(|&id| model.node(id).tag == Some(tag))
            else {
                continue;
            };
            if i >= 64 || seen & (1 << i) != 0 {
                // Python keeps the last value at the first one's place: not mirrored
                return Err(Stop("duplicate_tag"));
            }
            seen |= 1 << i;
            let m = model.node(tagged[i]);
            // A known tag decodes from its own bytes; what it leaves unread is ignored.
            let mut sub = Cursor::new(chunk, 0);
            if m.tables {
                let v = self.value(m, &mut sub, depth)?;
                d.members.push((tagged[i], v));
            } else {
                skip_field(model, m, &mut sub, true, depth)?;
            }
        }
        Ok(d)
    }

    /// `value` written where it is kept: an int (most members) in place, the rest
    /// moved there. Returned and then moved into the dict's list, every value was
    /// read back right after being written in other widths, stalling on store-to-load
    /// forwarding (perf annotate: two thirds of `dict`'s own time).
    fn value_into<'a>(
        &mut self,
        m: &Node,
        cur: &mut Cursor<'a>,
        depth: usize,
        out: &mut Val<'a>,
    ) -> R<()> {
        if !m.array && m.kind.is_int() && !self.model.facts(m).odd {
            *out = Val::Int(int64(cur, m.kind)?);
        } else {
            *out = self.value(m, cur, depth)?;
        }
        Ok(())
    }

    fn value<'a>(&mut self, m: &Node, cur: &mut Cursor<'a>, depth: usize) -> R<Val<'a>> {
        let facts = self.model.facts(m);
        if facts.odd {
            return Err(Stop("odd"));
        }
        if m.array {
            return self.array(m, cur, depth);
        }
        Ok(match m.kind {
            Kind::Struct => {
                if m.nullable && self.flexible && cur.u8()? == 255 {
                    return Ok(Val::Null);
                }
                Val::Dict(self.dict(m, cur, depth + 1)?)
            }
            Kind::Records => match read_sized(cur, self.flexible, true)? {
                None => Val::Null,
                Some(data) => self.records(data)?,
            },
            Kind::Str => match read_sized(cur, self.flexible, false)? {
                None => Val::Null,
                Some(raw) => Val::Text(lossy(raw)),
            },
            Kind::Uuid => Val::Text(Cow::Owned(uuid_text(&cur.array::<16>()?))),
            Kind::Bytes => match read_sized(cur, self.flexible, true)? {
                None => Val::Null,
                Some(raw) => Val::Bytes(raw.len()),
            },
            k if k.is_int() => Val::Int(int64(cur, k)?),
            Kind::Bool => Val::Bool(cur.u8()? != 0),
            _ => {
                skip_value(self.model, m, cur, self.flexible, depth)?;
                Val::Other
            }
        })
    }

    fn array<'a>(&mut self, m: &Node, cur: &mut Cursor<'a>, depth: usize) -> R<Val<'a>> {
        let count = read_length(cur, self.flexible, true)?;
        if count < 0 {
            return Ok(Val::Null);
        }
        let count = count as u64;
        if count > cur.left() as u64 {
            return Err(Stop("array_count"));
        }
        if count > self.tables.max_array_items {
            return Err(Stop("array_limit"));
        }
        let bounded = usize::try_from(count.min(64)).unwrap_or(64);
        match m.kind {
            Kind::Struct => {
                let mut items = Vec::with_capacity(bounded);
                for _ in 0..count {
                    items.push(Val::Dict(self.dict(m, cur, depth + 1)?));
                }
                Ok(Val::List(items))
            }
            k if k.is_int() => {
                let mut items = Vec::with_capacity(bounded);
                for _ in 0..count {
                    items.push(Val::Int(int64(cur, k)?));
                }
                Ok(Val::List(items))
            }
            _ => {
                skip_elements(self.model, m, cur, self.flexible, depth, count)?;
                Ok(Val::Items(count))
            }
        }
    }

    fn records<'a>(&mut self, data: &[u8]) -> R<Val<'a>> {
        let mut x = self
            .expand
            .then(|| Expansion::new(self.items, self.tables.item_overhead));
        let counted = table_records(data, &mut self.budget, x.as_mut(), &mut self.scratch);
        if let Some(x) = &x {
            self.items = x.items;
        }
        let (records, bytes) = counted.ok_or(Stop("records"))?;
        Ok(Val::Records {
            records,
            bytes,
            offsets: x.map(|x| x.offsets).unwrap_or_default(),
        })
    }
}

/// An int field of kind `kind` as the tables keep it (i64; a u64 past it is a value
/// Python's dict holds and the columns cannot: the walk stops).
#[inline]
fn int64(cur: &mut Cursor<'_>, kind: Kind) -> R<i64> {
    i64::try_from(read_int(cur, kind)?).map_err(|_| Stop("int_range"))
}

/// One side of a pair as the tables read it.
#[derive(Debug)]
pub enum Side<'a> {
    /// No frame on this side.
    Absent,
    Body(Dict<'a>),
    /// No layout describes it: the Python decoder's error, no body.
    Unsupported(NoSpec),
}

impl<'a> Side<'a> {
    fn body(&self) -> &Dict<'a> {
        match self {
            Side::Body(d) => d,
            _ => &EMPTY,
        }
    }

    fn error(&self) -> Option<&str> {
        match self {
            Side::Unsupported(no_spec) => Some(&no_spec.text),
            _ => None,
        }
    }
}

/// (api_key, version, direction) of a side decoded by an assumed layout.
type AssumedKey = (i16, i16, Direction);

/// One side, as `protocol.messages` decodes it (and its assumed-version trial); Err when
/// the Python decoder would report a problem the tables do not mirror.
fn decode_side<'a>(
    model: &Model,
    tables: &TablesModel,
    frame_cap: u64,
    start: R<Start<'_>>,
    buf: &'a [u8],
    expand: bool,
) -> R<(Side<'a>, Option<AssumedKey>)> {
    let (layout, at, key) = match start? {
        Start::Unsupported(no_spec) => return Ok((Side::Unsupported(no_spec), None)),
        Start::Body { layout, at, key } => (layout, at, key),
    };
    let assumed = is_assumed(model, layout, key.0, key.1);
    let mut walk = Sparse {
        model,
        tables,
        flexible: layout.flexible,
        budget: Budget::for_frame_capped(buf.len() as u64, DEFAULT_MAX_DECOMPRESSED, frame_cap),
        items: tables.item_budget,
        expand,
        scratch: Counters::default(),
    };
    let mut cur = Cursor::new(buf, at);
    let walked = walk.dict(model.node(layout.root), &mut cur, 0);
    let exact = walked.is_ok() && cur.pos() == buf.len();
    let describe = |u: &crate::kafka::model::Unsupported| {
        Side::Unsupported(u.describe(key.0, key.1, layout.direction))
    };
    match (walked, assumed) {
        // an assumed layout must consume the body exactly (`messages._assumed`)
        (_, true) if !exact => match &model.unsupported {
            Some(u) => Ok((describe(u), None)),
            None => Err(Stop("unsupported_version")),
        },
        (Ok(d), true) => Ok((Side::Body(d), Some((key.0, key.1, layout.direction)))),
        // bytes after a known layout's body are no error of Python's
        (Ok(d), false) => Ok((Side::Body(d), None)),
        (Err(stop), _) => Err(stop),
    }
}

/// Both sides of a pair, the assumed-version rule settled (`messages.settle_assumed`).
fn decode_pair<'a>(
    model: &Model,
    tables: &TablesModel,
    frame_cap: u64,
    api_key: i16,
    api_version: i16,
    request: Option<&'a [u8]>,
    response: Option<&'a [u8]>,
) -> R<[Side<'a>; 2]> {
    let expand = tables.expand_responses.contains(&api_key);
    let mut sides = [(Side::Absent, None), (Side::Absent, None)];
    if let Some(buf) = request {
        sides[0] = decode_side(
            model,
            tables,
            frame_cap,
            request_start(model, buf),
            buf,
            false,
        )?;
    }
    if let Some(buf) = response {
        let start = response_start(model, buf, api_key, api_version);
        sides[1] = decode_side(model, tables, frame_cap, start, buf, expand)?;
    }
    let newer = sides.iter().any(|(s, _)| {
        matches!(
            s,
            Side::Unsupported(NoSpec {
                key_known: true,
                ..
            })
        )
    });
    let [(req, req_assumed), (resp, resp_assumed)] = sides;
    let settle = |side: Side<'a>, assumed: Option<AssumedKey>| match assumed {
        Some((key, version, dir)) if newer => match &model.unsupported {
            Some(u) => Ok(Side::Unsupported(u.describe(key, version, dir))),
            None => Err(Stop("unsupported_version")),
        },
        _ => Ok(side),
    };
    Ok([settle(req, req_assumed)?, settle(resp, resp_assumed)?])
}

// ------------------------------------------------------------------ facts

/// One partitions-table row as a pair's bodies give it (`tables.PartitionFacts`); its
/// texts borrowed from the bodies where they can be (rows are many, and short-lived).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionFacts<'t> {
    pub group_id: Option<Cow<'t, str>>,
    pub member_id: Option<Cow<'t, str>>,
    pub member_epoch: Option<i64>,
    pub acks: Option<i64>,
    pub transactional_id: Option<Cow<'t, str>>,
    pub isolation_level: Option<i64>,
    pub txn_committed: Option<bool>,
    pub topic: Option<Cow<'t, str>>,
    pub topic_id: Option<Cow<'t, str>>,
    pub partition: Option<i64>,
    pub error_code: Option<i64>,
    pub records: Option<i64>,
    pub record_bytes: Option<i64>,
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    /// One per `TablesModel::entry_columns` (the rest None).
    pub entry_values: EntryValues,
}

/// The entry columns' values of a row, by `TablesModel::entry_columns`.
pub type EntryValues = [Option<i64>; MAX_ENTRY_COLUMNS];

/// One groups-table row as a membership call's bodies give it (`tables.GroupFacts`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupFacts {
    pub group_id: Option<String>,
    pub member_id: Option<String>,
    pub group_instance_id: Option<String>,
    pub request_generation: Option<i64>,
    pub generation: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Option<i64>,
    pub assignment_bytes: Option<i64>,
    pub assigned_partitions: Option<i64>,
    pub error_code: Option<i64>,
}

/// What one ApiVersions exchange tells of its connection (`tables.Negotiation`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Negotiation {
    pub software: Option<(Option<String>, Option<String>)>,
    /// (api_key, min, max) in the response's order (a later entry of a key wins).
    pub advertised: Option<Vec<(i64, i64, i64)>>,
    pub error: Option<String>,
}

/// Everything the tables take from one pair (`tables.PairFacts`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairFacts<'t> {
    pub partitions: Vec<PartitionFacts<'t>>,
    pub group: Option<GroupFacts>,
    pub negotiation: Option<Negotiation>,
    pub decode_errors: u32,
}

/// A context value as `_context_of` keeps it: text or int.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CtxVal<'t> {
    Text(&'t str),
    Int(i64),
}

type Context<'t> = [Option<CtxVal<'t>>; MAX_CONTEXT_SLOTS];

/// One partition entry found in a body (`tables.partition_entries`), handed on as it
/// is found: its context is the walk's, borrowed (copied into each entry, it was most
/// of the bytes the merge moved).
struct Found<'c, 't, 'a> {
    ctx: &'c Context<'t>,
    name: Option<&'t str>,
    tid: Option<&'t str>,
    index: Option<i64>,
    /// The entry's dict; None for a bare index (or an empty dict: both read as {}).
    entry: Option<&'t Dict<'a>>,
}

/// Request and response entries merged by (group, topic, partition) (`tables._merge`).
struct Merged<'t, 'a> {
    ctx: Context<'t>,
    topic: &'t str,
    tid: Option<&'t str>,
    partition: Option<i64>,
    sides: [Option<&'t Dict<'a>>; 2],
}

/// Most pairs name a few partitions: their merge keys are compared in a scan, and an
/// index is only built past this many.
const SMALL_MERGE: usize = 32;

/// What the rows read of one side's entry, gathered in one look at its members.
#[derive(Default)]
struct EntryView<'t> {
    /// By value slot; `present` says which are set (kept small: two per row).
    values: [i64; MAX_VALUE_SLOTS],
    present: u32,
    records: Option<i64>,
    bytes: Option<i64>,
    offsets: Vec<&'t [i64]>,
    acquired: Option<(i64, i64)>,
}

impl EntryView<'_> {
    fn value(&self, slot: usize) -> Option<i64> {
        (slot < MAX_VALUE_SLOTS && self.present & (1 << slot) != 0).then(|| self.values[slot])
    }

    /// As `default()`, keeping the offsets' allocation (values past `present` are
    /// never read).
    fn reset(&mut self) {
        self.present = 0;
        self.records = None;
        self.bytes = None;
        self.offsets.clear();
        self.acquired = None;
    }

    /// Keep the first value a slot is given (`dict.get` finds a name's one value).
    fn set(&mut self, slot: usize, value: i64) {
        if slot < MAX_VALUE_SLOTS && self.present & (1 << slot) == 0 {
            self.values[slot] = value;
            self.present |= 1 << slot;
        }
    }
}

const REQ: usize = 0;
const RESP: usize = 1;

fn side_index(d: Direction) -> usize {
    match d {
        Direction::Request => REQ,
        Direction::Response => RESP,
    }
}

/// The rules of `protocol/tables.py`, on sparse bodies.
struct Reader<'m> {
    model: &'m Model,
    tables: &'m TablesModel,
}

impl<'m> Reader<'m> {
    fn facts(&self, id: u32) -> &'m Facts {
        self.model.facts(self.model.node(id))
    }

    fn context_of<'t>(&self, body: &'t Dict<'_>, outer: &Context<'t>) -> Context<'t> {
        let mut ctx = *outer;
        for (id, v) in &body.members {
            let Some(slot) = self.facts(*id).context else {
                continue;
            };
            let value = match v {
                Val::Int(i) => CtxVal::Int(*i),
                Val::Text(t) => CtxVal::Text(t),
                _ => continue,
            };
            if let Some(s) = ctx.get_mut(usize::from(slot)) {
                *s = Some(value);
            }
        }
        ctx
    }

    /// (topic name, topic id) an entry names, if any (`tables._topic_of`).
    fn topic_of<'t>(&self, item: &'t Dict<'_>) -> Option<(Option<&'t str>, Option<&'t str>)> {
        let name = item
            .ranked(
                self.model,
                |f| f.topic_name,
                |v| matches!(v, Val::Text(t) if !t.is_empty()),
            )
            .and_then(|v| match v {
                Val::Text(t) => Some(&**t),
                _ => None,
            });
        let tid = item.text(self.model, |f| f.topic_id);
        (name.is_some() || tid.is_some()).then_some((name, tid))
    }

    /// The first non-null array of an entry whose name says it lists partitions.
    fn partition_array<'t, 'a>(&self, item: &'t Dict<'a>) -> Option<&'t [Val<'a>]> {
        item.members.iter().find_map(|(id, v)| {
            if !self.facts(*id).partition_array {
                return None;
            }
            match v {
                Val::List(items) => Some(&items[..]),
                Val::Items(_) => Some(&[][..]),
                _ => None,
            }
        })
    }

    fn entries<'t, 'a>(
        &self,
        body: &'t Dict<'a>,
        outer: &Context<'t>,
        depth: usize,
        found: &mut dyn FnMut(Found<'_, 't, 'a>),
    ) {
        if depth > self.tables.max_depth {
            return;
        }
        let ctx = self.context_of(body, outer);
        for (id, v) in &body.members {
            if !self.facts(*id).entries {
                continue;
            }
            let Val::List(items) = v else { continue };
            for item in items {
                let Val::Dict(item) = item else { continue };
                let topic = self.topic_of(item);
                let parts = topic.and_then(|_| self.partition_array(item));
                let (Some((name, tid)), Some(parts)) = (topic, parts) else {
                    self.entries(item, &ctx, depth + 1, found);
                    continue;
                };
                for p in parts {
                    let (index, entry) = match p {
                        Val::Int(i) => (Some(*i), None),
                        Val::Dict(d) => {
                            let index = d
                                .ranked(
                                    self.model,
                                    |f| f.partition_index,
                                    |v| matches!(v, Val::Int(_)),
                                )
                                .and_then(|v| match v {
                                    Val::Int(i) => Some(*i),
                                    _ => None,
                                });
                            (index, Some(d).filter(|d| d.nonempty))
                        }
                        _ => continue,
                    };
                    found(Found {
                        ctx: &ctx,
                        name,
                        tid,
                        index,
                        entry,
                    });
                }
            }
        }
    }

    fn merge<'t, 'a>(
        &self,
        request: &'t Dict<'a>,
        response: &'t Dict<'a>,
        names: &'t TopicNames,
    ) -> Vec<Merged<'t, 'a>> {
        type Key<'t> = (Option<CtxVal<'t>>, &'t str, Option<i64>);
        let g = self.tables.group_key_slot;
        let empty: Context<'t> = [None; MAX_CONTEXT_SLOTS];
        let pair_context = self.context_of(request, &empty);
        let mut merged: Vec<Merged<'t, 'a>> = Vec::new();
        let mut index: Option<HashMap<Key<'t>, usize>> = None;
        // The last topic id looked up and the name learnt for it: a topic's partitions
        // follow each other, and comparing ids is cheaper than hashing one per entry.
        let mut last: Option<(&'t str, Option<&'t str>)> = None;
        for (side, body) in [(REQ, request), (RESP, response)] {
            // A response lists its partitions in its request's order: the row after the
            // last one matched is tried first (a key is in one row at most, so this is
            // the row the search would find), before a search of them all.
            let mut hint = 0;
            self.entries(body, &pair_context, 0, &mut |f| {
                let learnt = f.tid.and_then(|t| match last {
                    Some((id, name)) if id == t => name,
                    _ => {
                        let name = names.name(t).filter(|n| !n.is_empty());
                        last = Some((t, name));
                        name
                    }
                });
                let topic: &'t str = f.name.or(learnt).or(f.tid).unwrap_or_default();
                let group = f.ctx.get(g).copied().flatten();
                let key = (group, topic, f.index);
                let same = |m: &Merged<'t, 'a>| {
                    m.partition == f.index
                        && m.topic == topic
                        && m.ctx.get(g).copied().flatten() == group
                };
                let known = match &index {
                    _ if merged.get(hint).is_some_and(same) => Some(hint),
                    Some(index) => index.get(&key).copied(),
                    None => merged.iter().position(same),
                };
                let at = match known {
                    Some(at) => at,
                    None => {
                        merged.push(Merged {
                            ctx: *f.ctx,
                            topic,
                            tid: f.tid,
                            partition: f.index,
                            sides: [None, None],
                        });
                        let at = merged.len() - 1;
                        if let Some(index) = index.as_mut() {
                            index.insert(key, at);
                        } else if merged.len() > SMALL_MERGE {
                            let keyed = merged.iter().enumerate().map(|(i, m)| {
                                ((m.ctx.get(g).copied().flatten(), m.topic, m.partition), i)
                            });
                            index = Some(keyed.collect());
                        }
                        at
                    }
                };
                hint = at + 1;
                let row = &mut merged[at];
                for (mine, theirs) in row.ctx.iter_mut().zip(f.ctx) {
                    if theirs.is_some() {
                        *mine = *theirs;
                    }
                }
                if row.tid.is_none_or(str::is_empty) {
                    row.tid = f.tid;
                }
                row.sides[side] = f.entry;
            });
        }
        merged
    }

    /// One side's entry as the rows read it, into `out` (None: no entry, or an empty
    /// one): the view of the row before is reused (built anew and returned, the view
    /// was copied twice a row).
    fn view_into<'t>(&self, side: Option<&'t Dict<'_>>, out: &mut Option<EntryView<'t>>) {
        let Some(d) = side else {
            *out = None;
            return;
        };
        let v = out.get_or_insert_with(EntryView::default);
        v.reset();
        let mut value = |slot: Option<u16>, i: i64| {
            if let Some(slot) = slot.map(usize::from).filter(|&s| s < MAX_VALUE_SLOTS) {
                v.set(slot, i);
            }
        };
        for (id, member) in &d.members {
            let f = self.facts(*id);
            match member {
                Val::Int(i) => value(f.value, *i),
                Val::Dict(inner) if f.nested => {
                    for (id, member) in &inner.members {
                        if let Val::Int(i) = member {
                            value(self.facts(*id).value, *i);
                        }
                    }
                }
                _ => {}
            }
        }
        for (id, member) in &d.members {
            match member {
                Val::Records {
                    records,
                    bytes,
                    offsets,
                } => {
                    v.records = Some(v.records.unwrap_or(0).saturating_add(*records as i64));
                    v.bytes = Some(v.bytes.unwrap_or(0).saturating_add(*bytes as i64));
                    v.offsets.push(offsets);
                }
                Val::List(ranges) if self.facts(*id).acquired == Some(Acquired::Array) => {
                    v.acquired = self.acquired(ranges);
                }
                _ => {}
            }
        }
    }

    fn entry_value(&self, views: &[Option<EntryView<'_>>; 2], column: usize) -> Option<i64> {
        let c = &self.tables.entry_columns[column];
        for &side in &c.sides {
            let Some(v) = &views[side_index(side)] else {
                continue;
            };
            for slot in c.slots.iter().copied().chain(c.nested).map(usize::from) {
                if let Some(value) = v.value(slot) {
                    return Some(value);
                }
            }
        }
        None
    }

    fn entry_error(&self, views: &[Option<EntryView<'_>>; 2], top: Option<i64>) -> Option<i64> {
        let slot = usize::from(self.tables.entry_error_slot);
        let code = views[RESP].as_ref().and_then(|v| v.value(slot));
        match (code, top) {
            (Some(c), _) if c != 0 => Some(c),
            (_, Some(t)) if t != 0 => Some(t),
            (c, t) => c.or(t),
        }
    }

    fn acquired(&self, ranges: &[Val<'_>]) -> Option<(i64, i64)> {
        let mut span: Option<(i64, i64)> = None;
        for r in ranges {
            let Val::Dict(r) = r else { continue };
            let Some(first) = r.int(self.model, |f| f.acquired == Some(Acquired::First)) else {
                continue;
            };
            let last = r
                .int(self.model, |f| f.acquired == Some(Acquired::Last))
                .unwrap_or(first);
            span = Some(match span {
                None => (first, last),
                Some((a, b)) => (a.min(first), b.max(last)),
            });
        }
        span
    }

    fn offset_range(
        &self,
        role: PartitionRole,
        views: &[Option<EntryView<'_>>; 2],
        records: Option<i64>,
        values: &[Option<i64>],
        code: Option<i64>,
    ) -> (Option<i64>, Option<i64>) {
        match role {
            PartitionRole::Produce => {
                let Some(base) = values[self.tables.produce_base_column] else {
                    return (None, None);
                };
                let n = records.unwrap_or(0);
                if base < 0 || n == 0 || code.is_some_and(|c| c != 0) {
                    return (None, None);
                }
                match base.checked_add(n - 1) {
                    Some(last) => (Some(base), Some(last)),
                    None => (None, None), // past int64: no offset a log can hold
                }
            }
            PartitionRole::Fetch => {
                let resp = views[RESP].as_ref();
                if let Some((first, last)) = resp.and_then(|v| v.acquired) {
                    return (Some(first), Some(last)); // ShareFetch: what the member acquired
                }
                let start = values[self.tables.fetch_start_column];
                let offsets = resp
                    .into_iter()
                    .flat_map(|v| v.offsets.iter().copied().flatten());
                let delivered = offsets.filter(|&&o| start.is_none_or(|s| o >= s));
                delivered.fold((None, None), |(lo, hi): (Option<i64>, Option<i64>), &o| {
                    (
                        Some(lo.map_or(o, |l| l.min(o))),
                        Some(hi.map_or(o, |h| h.max(o))),
                    )
                })
            }
            PartitionRole::Other => (None, None),
        }
    }

    fn context_column<'t>(
        &self,
        ctx: &Context<'t>,
        column: usize,
    ) -> (Option<&'t str>, Option<i64>) {
        let c = &self.tables.context[column];
        for &slot in &c.slots {
            if let Some(Some(v)) = ctx.get(usize::from(slot)) {
                return match (c.text, v) {
                    (true, CtxVal::Text(t)) => (Some(t), None),
                    (false, CtxVal::Int(i)) => (None, Some(*i)),
                    _ => (None, None),
                };
            }
        }
        (None, None)
    }

    /// The rows of one pair, each handed to `emit` as it is made (a long Fetch response
    /// has thousands: they are not collected).
    fn partitions<'t>(
        &self,
        role: PartitionRole,
        request: &'t Dict<'_>,
        response: &'t Dict<'_>,
        names: &'t TopicNames,
        emit: &mut dyn FnMut(&PartitionFacts<'t>),
    ) {
        let top = response.int(self.model, |f| f.top_error);
        let columns = self.tables.entry_columns.len();
        let mut views: [Option<EntryView<'t>>; 2] = [None, None];
        for m in self.merge(request, response, names) {
            self.view_into(m.sides[REQ], &mut views[REQ]);
            self.view_into(m.sides[RESP], &mut views[RESP]);
            let mut facts = PartitionFacts {
                topic: Some(Cow::Borrowed(m.topic)),
                topic_id: m.tid.map(Cow::Borrowed),
                partition: m.partition,
                ..Default::default()
            };
            let values = &mut facts.entry_values;
            for (c, v) in values.iter_mut().enumerate().take(columns) {
                *v = self.entry_value(&views, c);
            }
            let code = self.entry_error(&views, top);
            let counted = |v: &Option<EntryView<'_>>| {
                v.as_ref().map_or((None, None), |v| (v.records, v.bytes))
            };
            let ((req_n, req_b), (resp_n, resp_b)) = (counted(&views[REQ]), counted(&views[RESP]));
            let records = add(req_n, resp_n);
            let (first, last) = self.offset_range(role, &views, records, values, code);
            facts.error_code = code;
            facts.records = records;
            facts.record_bytes = add(req_b, resp_b);
            facts.first_offset = first;
            facts.last_offset = last;
            self.fill_context(&mut facts, &m.ctx);
            emit(&facts);
        }
    }

    /// The context columns of a row, from the context its entry inherited.
    fn fill_context<'t>(&self, facts: &mut PartitionFacts<'t>, ctx: &Context<'t>) {
        for (i, c) in self.tables.context.iter().enumerate() {
            let (text, int) = self.context_column(ctx, i);
            match c.fills {
                ContextFills::GroupId => facts.group_id = text.map(Cow::Borrowed),
                ContextFills::MemberId => facts.member_id = text.map(Cow::Borrowed),
                ContextFills::MemberEpoch => facts.member_epoch = int,
                ContextFills::Acks => facts.acks = int,
                ContextFills::TransactionalId => facts.transactional_id = text.map(Cow::Borrowed),
                ContextFills::IsolationLevel => facts.isolation_level = int,
                ContextFills::Nothing => {}
            }
        }
    }

    /// The one row of a pair that names no partition (`tables._pair_row`: EndTxn): the
    /// request's context fields, the response's error code, the commit flag.
    fn pair_row<'t>(&self, request: &'t Dict<'_>, response: &'t Dict<'_>) -> PartitionFacts<'t> {
        let empty: Context<'t> = [None; MAX_CONTEXT_SLOTS];
        let ctx = self.context_of(request, &empty);
        let committed = match request.find(self.model, |f| f.committed) {
            Some(Val::Bool(b)) => Some(*b),
            _ => None,
        };
        let mut facts = PartitionFacts {
            error_code: response.int(self.model, |f| f.top_error),
            txn_committed: committed,
            entry_values: [None; MAX_ENTRY_COLUMNS],
            ..Default::default()
        };
        self.fill_context(&mut facts, &ctx);
        facts
    }

    // --- membership calls

    fn group_value<'t, 'a>(
        &self,
        d: &'t Dict<'a>,
        role: GroupRole,
        rank: u8,
    ) -> Option<&'t Val<'a>> {
        d.find(self.model, |f| f.group == Some(role) && f.rank == rank)
    }

    /// `body.get(name)` as text for the first ranks of a role that is given (truthy),
    /// in `bodies` order; else the last one looked at (`tables._first_given`).
    fn first_given(&self, bodies: &[&Dict<'_>], role: GroupRole) -> Option<String> {
        let ranks = self.group_ranks(role);
        let mut last: Option<&Val<'_>> = None;
        for body in bodies {
            for rank in 0..ranks {
                last = self.group_value(body, role, rank);
                if let Some(Val::Text(t)) = last {
                    if !t.is_empty() {
                        return Some(t.to_string());
                    }
                }
            }
        }
        match last {
            Some(Val::Text(t)) => Some(t.to_string()),
            _ => None,
        }
    }

    fn group_ranks(&self, role: GroupRole) -> u8 {
        self.tables.group_ranks.get(&role).copied().unwrap_or(1)
    }

    fn first_int(&self, body: &Dict<'_>, role: GroupRole) -> Option<i64> {
        (0..self.group_ranks(role)).find_map(|rank| match self.group_value(body, role, rank) {
            Some(Val::Int(v)) => Some(*v),
            _ => None,
        })
    }

    fn group(&self, api_key: i16, req: &Dict<'_>, resp: &Dict<'_>, answered: bool) -> GroupFacts {
        let code = self.group_error(resp);
        let request_generation = self.first_int(req, GroupRole::Generation);
        let mut generation = self.first_int(resp, GroupRole::Generation);
        if generation.is_none() && answered && code == Some(0) {
            generation = request_generation; // SyncGroup/Heartbeat accepted the one sent
        }
        let text = |d: &Dict<'_>, role| match self.group_value(d, role, 0) {
            Some(Val::Text(t)) => Some(t.to_string()),
            _ => None,
        };
        let assignment = self.group_value(resp, GroupRole::Assignment, 0);
        GroupFacts {
            group_id: text(req, GroupRole::GroupId),
            member_id: self.member_id(req, resp),
            group_instance_id: self.first_given(&[req], GroupRole::InstanceId),
            request_generation,
            generation,
            protocol_type: self.first_given(&[resp, req], GroupRole::ProtocolType),
            protocol_name: self.first_given(&[resp, req], GroupRole::ProtocolName),
            leader: text(resp, GroupRole::Leader).filter(|t| !t.is_empty()),
            members: self.members(api_key, req, resp),
            assignment_bytes: match assignment {
                Some(Val::Bytes(n)) => Some(*n as i64),
                _ => None,
            },
            assigned_partitions: match assignment {
                Some(Val::Dict(a)) => Some(self.assigned(a)),
                _ => None,
            },
            error_code: code,
        }
    }

    fn member_list<'t, 'a>(&self, d: &'t Dict<'a>, rank: u8) -> Option<&'t Val<'a>> {
        self.group_value(d, GroupRole::MemberList, rank)
            .filter(|v| matches!(v, Val::List(_) | Val::Items(_)))
    }

    fn member_id(&self, req: &Dict<'_>, resp: &Dict<'_>) -> Option<String> {
        for body in [resp, req] {
            if let Some(Val::Text(t)) = self.group_value(body, GroupRole::MemberId, 0) {
                if !t.is_empty() {
                    return Some(t.to_string());
                }
            }
        }
        // the single member a LeaveGroup v3+ names: the request's last member list
        let last = self.tables.member_lists.checked_sub(1)?;
        match self.member_list(req, last) {
            Some(Val::List(items)) if items.len() == 1 => match &items[0] {
                Val::Dict(m) => m
                    .text(self.model, |f| f.group == Some(GroupRole::MemberMemberId))
                    .map(str::to_owned),
                _ => None,
            },
            _ => None,
        }
    }

    fn members(&self, api_key: i16, req: &Dict<'_>, resp: &Dict<'_>) -> Option<i64> {
        for rank in 0..self.tables.member_lists {
            for body in [resp, req] {
                match self.member_list(body, rank) {
                    Some(Val::List(items)) => return Some(items.len() as i64),
                    Some(Val::Items(n)) => return Some(*n as i64),
                    _ => {}
                }
            }
        }
        let named = matches!(self.group_value(req, GroupRole::MemberId, 0), Some(Val::Text(t)) if !t.is_empty());
        (self.tables.single_member_keys.contains(&api_key) && named).then_some(1)
    }

    fn assigned(&self, assignment: &Dict<'_>) -> i64 {
        let Some(Val::List(topics)) =
            assignment.find(self.model, |f| f.group == Some(GroupRole::AssignedTopics))
        else {
            return 0;
        };
        let mut count = 0i64;
        for t in topics {
            let Val::Dict(t) = t else { continue };
            match t.find(self.model, |f| {
                f.group == Some(GroupRole::AssignedPartitions)
            }) {
                Some(Val::List(p)) => count += p.len() as i64,
                Some(Val::Items(n)) => count += *n as i64,
                _ => {}
            }
        }
        count
    }

    fn group_error(&self, resp: &Dict<'_>) -> Option<i64> {
        let top = match self.group_value(resp, GroupRole::Error, 0) {
            Some(Val::Int(v)) => Some(*v),
            _ => None,
        };
        if top.is_some_and(|t| t != 0) {
            return top;
        }
        if let Some(Val::List(members)) = self.member_list(resp, 0) {
            for m in members {
                let Val::Dict(m) = m else { continue };
                if let Some(code) = m.int(self.model, |f| f.group == Some(GroupRole::MemberError)) {
                    if code != 0 {
                        return Some(code);
                    }
                }
            }
        }
        top
    }

    // --- ApiVersions

    fn negotiation(&self, req: &Side<'_>, resp: &Side<'_>) -> Negotiation {
        let mut software = None;
        if !matches!(req, Side::Absent) {
            let body = req.body();
            let field = |role| match body.find(self.model, |f| f.version == Some(role)) {
                Some(Val::Text(t)) => Some(t.to_string()),
                _ => None,
            };
            let (name, version) = (
                field(VersionRole::SoftwareName),
                field(VersionRole::SoftwareVersion),
            );
            if name.is_some() || version.is_some() {
                software = Some((name, version));
            }
        }
        let texts = &self.tables.negotiation_texts;
        if matches!(resp, Side::Absent) {
            return Negotiation {
                software,
                advertised: None,
                error: Some(texts.no_response.clone()),
            };
        }
        let mut advertised = Vec::new();
        if let Some(Val::List(entries)) = resp
            .body()
            .find(self.model, |f| f.version == Some(VersionRole::Advertised))
        {
            for e in entries {
                let Val::Dict(e) = e else { continue };
                let get = |role| e.int(self.model, |f| f.version == Some(role));
                if let (Some(k), Some(lo), Some(hi)) = (
                    get(VersionRole::AdvertisedKey),
                    get(VersionRole::AdvertisedMin),
                    get(VersionRole::AdvertisedMax),
                ) {
                    advertised.push((k, lo, hi));
                }
            }
        }
        let error = resp.error().map(str::to_owned);
        if advertised.is_empty() {
            return Negotiation {
                software,
                advertised: None,
                error: Some(error.unwrap_or_else(|| texts.no_api_keys.clone())),
            };
        }
        Negotiation {
            software,
            advertised: Some(advertised),
            error,
        }
    }
}

fn add(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// The sides of one pair a table reads, decoded for the tables (the trees its facts
/// borrow from); Err: leave the pair to the Python decoder.
pub fn decode_for_tables<'a>(
    model: &Model,
    frame_cap: u64,
    api_key: i16,
    api_version: i16,
    request: Option<&'a [u8]>,
    response: Option<&'a [u8]>,
) -> Result<[Side<'a>; 2], Stop> {
    let tables = model.tables.as_ref().ok_or(Stop("no tables"))?;
    decode_pair(
        model,
        tables,
        frame_cap,
        api_key,
        api_version,
        request,
        response,
    )
}

/// The facts of one pair, read from its decoded sides (`decode_for_tables`); its
/// partitions-table rows are handed to `emit` as they are made, not collected.
pub fn pair_facts<'t>(
    model: &Model,
    names: &'t TopicNames,
    api_key: i16,
    sides: &'t [Side<'_>; 2],
    emit: &mut dyn FnMut(&PartitionFacts<'t>),
) -> PairFacts<'t> {
    let Some(tables) = model.tables.as_ref() else {
        return PairFacts::default();
    };
    let [req, resp] = sides;
    let reader = Reader { model, tables };
    let mut facts = PairFacts {
        decode_errors: sides.iter().filter(|s| s.error().is_some()).count() as u32,
        ..Default::default()
    };
    if tables.pair_row_keys.contains(&api_key) {
        emit(&reader.pair_row(req.body(), resp.body()));
    } else if let Some(&role) = tables.partition_apis.get(&api_key) {
        reader.partitions(role, req.body(), resp.body(), names, emit);
    }
    if tables.group_apis.contains_key(&api_key) {
        let answered = !matches!(resp, Side::Absent);
        facts.group = Some(reader.group(api_key, req.body(), resp.body(), answered));
    }
    if tables.negotiation_key == Some(api_key) {
        facts.negotiation = Some(reader.negotiation(req, resp));
    }
    facts
}

// ------------------------------------------------------------------ columns

/// One column of a table as the Python side takes it (`dissector/wire/native.py` `arrow_column`).
#[derive(Debug)]
pub enum Column {
    I64(Nullable<i64>),
    F64(Nullable<f64>),
    Bool(Nullable<bool>),
    Str(Words),
    /// A list of ints per row: offsets into `values`.
    I64List {
        offsets: Vec<i32>,
        values: Vec<i64>,
    },
}

/// A table's rows as columns, in its contract's order.
pub struct TableColumns {
    pub columns: Vec<(String, Column)>,
    pub len: usize,
}

fn str_col(words: &mut Words) -> Column {
    Column::Str(std::mem::take(words))
}

fn int_col(values: &mut Nullable<i64>) -> Column {
    Column::I64(std::mem::take(values))
}

/// The pair's identity columns, shared by the partitions and groups tables.
#[derive(Default)]
struct Identity {
    capture: Words,
    stream: Nullable<i64>,
    correlation_id: Nullable<i64>,
    client_id: Words,
    request_time: Nullable<i64>,
    response_time: Nullable<i64>,
}

/// A pair's identity columns as its rows share them: the words interned once per pair,
/// not once per row (a long-poll Fetch response gives a row per partition).
#[derive(Clone, Copy)]
struct IdentityIds {
    capture: i32,
    stream: i64,
    correlation_id: Option<i64>,
    client_id: i32,
    request_time: Option<i64>,
    response_time: Option<i64>,
}

impl Identity {
    /// Interns the pair's words: called for its first row only, so that a pair with
    /// no row adds no word to a column's dictionary.
    fn ids(&mut self, capture: &str, ex: &Exchange) -> IdentityIds {
        IdentityIds {
            capture: self.capture.index(capture),
            stream: i64::from(ex.stream),
            correlation_id: ex.correlation_id.map(i64::from),
            client_id: ex
                .client_id
                .as_deref()
                .map_or(-1, |c| self.client_id.index(c)),
            request_time: ex.request.as_ref().and_then(KafkaFrame::end_ts),
            response_time: ex.response.as_ref().and_then(KafkaFrame::end_ts),
        }
    }

    fn push_ids(&mut self, ids: &IdentityIds) {
        self.capture.indices.push(ids.capture);
        self.stream.push(Some(ids.stream));
        self.correlation_id.push(ids.correlation_id);
        self.client_id.indices.push(ids.client_id);
        self.request_time.push(ids.request_time);
        self.response_time.push(ids.response_time);
    }

    fn reserve(&mut self, rows: usize) {
        self.capture.indices.reserve(rows);
        self.stream.reserve(rows);
        self.correlation_id.reserve(rows);
        self.client_id.indices.reserve(rows);
        self.request_time.reserve(rows);
        self.response_time.reserve(rows);
    }

    fn push(&mut self, capture: &str, ex: &Exchange) {
        self.capture.push(Some(capture));
        self.stream.push(Some(i64::from(ex.stream)));
        self.correlation_id.push(ex.correlation_id.map(i64::from));
        self.client_id.push(ex.client_id.as_deref());
        self.request_time
            .push(ex.request.as_ref().and_then(KafkaFrame::end_ts));
        self.response_time
            .push(ex.response.as_ref().and_then(KafkaFrame::end_ts));
    }

    fn take(&mut self, out: &mut Vec<(String, Column)>) {
        out.push(("capture".into(), str_col(&mut self.capture)));
        out.push(("stream".into(), int_col(&mut self.stream)));
        out.push(("correlation_id".into(), int_col(&mut self.correlation_id)));
        out.push(("client_id".into(), str_col(&mut self.client_id)));
        out.push(("request_time".into(), int_col(&mut self.request_time)));
        out.push(("response_time".into(), int_col(&mut self.response_time)));
    }
}

#[derive(Default)]
struct PartitionColumns {
    id: Identity,
    api_name: Words,
    api_version: Nullable<i64>,
    group_id: Words,
    member_id: Words,
    member_epoch: Nullable<i64>,
    acks: Nullable<i64>,
    transactional_id: Words,
    isolation_level: Nullable<i64>,
    txn_committed: Nullable<bool>,
    topic: Words,
    topic_id: Words,
    partition: Nullable<i64>,
    error_code: Nullable<i64>,
    error_name: Words,
    records: Nullable<i64>,
    record_bytes: Nullable<i64>,
    first_offset: Nullable<i64>,
    last_offset: Nullable<i64>,
    entries: Vec<Nullable<i64>>,
    len: usize,
    /// Rows of the last step taken: the next step's columns are sized for as many
    /// (steps end at about `pipeline::TABLE_ROWS`), not grown by doubling and copying.
    last_len: usize,
}

/// Most rows a step's partitions columns are sized for in advance.
const RESERVE_ROWS: usize = 1 << 17;

/// Rows the first step's partitions columns are sized for: a step ends once some
/// 16,384 table rows wait (`pipeline::TABLE_ROWS`), and a few more come with the
/// exchanges summarised last; grown from nothing by doubling, the columns were copied
/// at every doubling (untouched, the room reserved takes no memory).
const FIRST_ROWS: usize = 20_000;

impl PartitionColumns {
    fn reserve(&mut self, rows: usize) {
        self.id.reserve(rows);
        for words in [
            &mut self.api_name,
            &mut self.group_id,
            &mut self.member_id,
            &mut self.transactional_id,
            &mut self.topic,
            &mut self.topic_id,
            &mut self.error_name,
        ] {
            words.indices.reserve(rows);
        }
        for ints in [
            &mut self.api_version,
            &mut self.member_epoch,
            &mut self.acks,
            &mut self.isolation_level,
            &mut self.partition,
            &mut self.error_code,
            &mut self.records,
            &mut self.record_bytes,
            &mut self.first_offset,
            &mut self.last_offset,
        ] {
            ints.reserve(rows);
        }
        self.txn_committed.reserve(rows);
        for col in &mut self.entries {
            col.reserve(rows);
        }
    }
}

/// What all the partitions rows of one pair share, found at its first row.
#[derive(Clone, Copy)]
struct PairRowIds {
    id: IdentityIds,
    api_name: i32,
    api_version: i64,
    /// The API's one row names no partition by design (`tables.pair_row_keys`).
    pair_row: bool,
    /// The last error code's name in the error_name column (codes repeat in a pair).
    error: Option<(i64, i32)>,
}

#[derive(Default)]
struct GroupColumns {
    id: Identity,
    latency_ms: Nullable<f64>,
    api_name: Words,
    api_version: Nullable<i64>,
    group_protocol: Words,
    group_id: Words,
    member_id: Words,
    group_instance_id: Words,
    request_generation: Nullable<i64>,
    generation: Nullable<i64>,
    protocol_type: Words,
    protocol_name: Words,
    leader: Words,
    members: Nullable<i64>,
    assignment_bytes: Nullable<i64>,
    assigned_partitions: Nullable<i64>,
    error_code: Nullable<i64>,
    error_name: Words,
    fenced: Nullable<bool>,
    len: usize,
}

#[derive(Default)]
struct VersionColumns {
    capture: Words,
    stream: Nullable<i64>,
    client_id: Words,
    software_name: Words,
    software_version: Words,
    negotiation_version: Nullable<i64>,
    negotiation_error: Words,
    api_key: Nullable<i64>,
    api_name: Words,
    requests: Nullable<i64>,
    used: (Vec<i32>, Vec<i64>),
    broker_min: Nullable<i64>,
    broker_max: Nullable<i64>,
    within: Nullable<bool>,
    spec_max: Nullable<i64>,
    unknown: (Vec<i32>, Vec<i64>),
    len: usize,
}

fn int_list(list: &mut (Vec<i32>, Vec<i64>), len: usize) -> Column {
    let (mut offsets, values) = std::mem::take(list);
    if offsets.is_empty() {
        offsets.push(0);
    }
    debug_assert_eq!(offsets.len(), len + 1);
    Column::I64List { offsets, values }
}

fn push_list(list: &mut (Vec<i32>, Vec<i64>), values: impl IntoIterator<Item = i64>) {
    if list.0.is_empty() {
        list.0.push(0);
    }
    list.1.extend(values);
    list.0.push(i32::try_from(list.1.len()).unwrap_or(i32::MAX));
}

/// What one connection showed for the versions table.
#[derive(Default)]
struct Connection {
    stream: u32,
    client_id: Option<String>,
    software: (Option<String>, Option<String>),
    negotiation_version: Option<i64>,
    negotiation_error: Option<String>,
    advertised: HashMap<i64, (i64, i64)>,
    used: BTreeMap<i16, BTreeMap<i16, u64>>,
}

/// The tables' counters, as the Python functions attach them to their frames.
#[derive(Debug, Default, Clone)]
pub struct TableCounters {
    pub partitions: BTreeMap<&'static str, u64>,
    pub groups: BTreeMap<&'static str, u64>,
    pub versions: BTreeMap<&'static str, u64>,
    /// Pairs whose facts were asked of the Python decoder.
    pub deferred: u64,
}

fn count(map: &mut BTreeMap<&'static str, u64>, name: &'static str, n: u64) {
    *map.entry(name).or_insert(0) += n;
}

/// What `TableSink::observe` did with a pair.
pub enum Observed {
    /// Nothing more to do (read natively, or no table reads it).
    Done,
    /// Ask the Python decoder for its facts and hand them to `TableSink::apply`.
    Defer,
}

/// Which of the tables a sink builds. The versions table always: it reads the
/// ApiVersions exchanges and a counter a pair. Without the partitions table the bodies
/// of the APIs only it reads (Fetch, Produce...: most of a capture's bytes) are not
/// decoded at all; without the groups table, those of the membership calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub partitions: bool,
    pub groups: bool,
}

impl Wanted {
    /// The tables named (`partitions`, `groups`, `versions`); None when none is, an
    /// error naming the first unknown name.
    pub fn of(names: &[String]) -> Result<Option<Wanted>, String> {
        if let Some(unknown) = names
            .iter()
            .find(|n| !matches!(n.as_str(), "partitions" | "groups" | "versions"))
        {
            return Err(format!(
                "unknown table {unknown:?}: one of partitions, groups, versions"
            ));
        }
        let named = |table: &str| names.iter().any(|n| n == table);
        Ok((!names.is_empty()).then(|| Wanted {
            partitions: named("partitions"),
            groups: named("groups"),
        }))
    }
}

/// The tables of a run, built exchange by exchange in capture order.
pub struct TableSink {
    model: Arc<Model>,
    wanted: Wanted,
    /// The most one frame's record batches may decompress to (`--max-decompressed`).
    frame_cap: u64,
    capture: String,
    partitions: PartitionColumns,
    groups: GroupColumns,
    versions: VersionColumns,
    connections: Vec<Connection>,
    by_stream: HashMap<u32, usize>,
    pub counters: TableCounters,
}

impl TableSink {
    /// None when the model has no tables section.
    pub fn new(model: Arc<Model>, frame_cap: u64, wanted: Wanted) -> Option<Self> {
        let columns = model.tables.as_ref()?.entry_columns.len();
        let partitions = PartitionColumns {
            entries: (0..columns).map(|_| Nullable::default()).collect(),
            ..Default::default()
        };
        Some(TableSink {
            model,
            wanted,
            frame_cap,
            capture: String::new(),
            partitions,
            groups: GroupColumns::default(),
            versions: VersionColumns::default(),
            connections: Vec::new(),
            by_stream: HashMap::new(),
            counters: TableCounters::default(),
        })
    }

    fn tables(&self) -> &TablesModel {
        self.model
            .tables
            .as_ref()
            .expect("TableSink::new checked it")
    }

    pub fn start(&mut self, capture: &str) {
        self.capture = capture.to_owned();
    }

    /// Rows built and not taken yet.
    pub fn waiting(&self) -> usize {
        self.partitions.len + self.groups.len + self.versions.len
    }

    /// Whether an API's bodies are read for a wanted table.
    fn reads(&self, api_key: i16) -> bool {
        let t = self.tables();
        (self.wanted.partitions && t.partition_apis.contains_key(&api_key))
            || (self.wanted.groups && t.group_apis.contains_key(&api_key))
            || t.negotiation_key == Some(api_key)
    }

    /// One exchange, in capture order (after its summary, which learnt topic names).
    pub fn observe(&mut self, ex: &Exchange, names: &TopicNames) -> Observed {
        let (Some(api_key), Some(api_version)) = (ex.api_key, ex.api_version) else {
            count(&mut self.counters.versions, "exchanges_without_api", 1);
            return Observed::Done;
        };
        let at = match self.by_stream.get(&ex.stream) {
            Some(&at) => at,
            None => {
                self.connections.push(Connection {
                    stream: ex.stream,
                    client_id: ex.client_id.clone(),
                    ..Default::default()
                });
                self.by_stream.insert(ex.stream, self.connections.len() - 1);
                self.connections.len() - 1
            }
        };
        *self.connections[at]
            .used
            .entry(api_key)
            .or_default()
            .entry(api_version)
            .or_insert(0) += 1;
        if !self.reads(api_key) {
            return Observed::Done;
        }
        // A side not captured whole (a capture hole, the snap length) is not decoded.
        let whole = |f: &&KafkaFrame| !f.holed();
        let request = ex
            .request
            .as_ref()
            .filter(whole)
            .map(|f| f.payload.as_slice());
        let response = ex
            .response
            .as_ref()
            .filter(whole)
            .map(|f| f.payload.as_slice());
        let model = Arc::clone(&self.model);
        match decode_for_tables(
            &model,
            self.frame_cap,
            api_key,
            api_version,
            request,
            response,
        ) {
            Ok(sides) => {
                let api_name = model.api_name(api_key);
                let mut ids = None;
                let partitions = self.wanted.partitions;
                let mut row = |f: &PartitionFacts<'_>| {
                    if partitions {
                        self.partition_row(ex, &api_name, &mut ids, f);
                    }
                };
                let facts = pair_facts(&model, names, api_key, &sides, &mut row);
                self.apply(ex, facts);
                Observed::Done
            }
            Err(_) => {
                self.counters.deferred += 1;
                Observed::Defer
            }
        }
    }

    /// The facts of one observed pair (read natively, or by the Python decoder).
    pub fn apply(&mut self, ex: &Exchange, facts: PairFacts<'_>) {
        let (Some(api_key), Some(api_version)) = (ex.api_key, ex.api_version) else {
            return;
        };
        let model = Arc::clone(&self.model);
        let tables = model.tables.as_ref().expect("TableSink::new checked it");
        let api_name = model.api_name(api_key);
        let errors = u64::from(facts.decode_errors);
        if self.wanted.partitions && tables.partition_apis.contains_key(&api_key) {
            count(&mut self.counters.partitions, "pairs", 1);
            count(&mut self.counters.partitions, "decode_errors", errors);
            let mut ids = None;
            for f in &facts.partitions {
                self.partition_row(ex, &api_name, &mut ids, f);
            }
        }
        if let Some(protocol) = tables
            .group_apis
            .get(&api_key)
            .filter(|_| self.wanted.groups)
        {
            count(&mut self.counters.groups, "pairs", 1);
            count(&mut self.counters.groups, "decode_errors", errors);
            let group = facts.group.clone().unwrap_or_default();
            self.push_group(ex, &api_name, api_version, protocol, &group);
        }
        if let (Some(n), Some(&at)) = (&facts.negotiation, self.by_stream.get(&ex.stream)) {
            // the last one read wins: a client retries with v0 when its version was refused
            let conn = &mut self.connections[at];
            conn.negotiation_version = Some(i64::from(api_version));
            if let Some(software) = &n.software {
                conn.software = software.clone();
            }
            if let Some(advertised) = &n.advertised {
                conn.advertised = advertised
                    .iter()
                    .map(|&(k, lo, hi)| (k, (lo, hi)))
                    .collect();
            }
            conn.negotiation_error = n.error.clone();
        }
    }

    /// One partitions-table row of an exchange (a partition API's, with its version);
    /// `ids`: what its rows share, None before the pair's first row.
    fn partition_row(
        &mut self,
        ex: &Exchange,
        api_name: &str,
        ids: &mut Option<PairRowIds>,
        f: &PartitionFacts<'_>,
    ) {
        let pair = match ids {
            Some(pair) => pair,
            None => {
                let (Some(api_key), Some(version)) = (ex.api_key, ex.api_version) else {
                    return;
                };
                let pair_row = self.tables().pair_row_keys.contains(&api_key);
                let p = &mut self.partitions;
                if p.len == 0 {
                    let rows = if p.last_len > 0 {
                        p.last_len
                    } else {
                        FIRST_ROWS
                    };
                    p.reserve(rows.min(RESERVE_ROWS));
                }
                ids.insert(PairRowIds {
                    id: p.id.ids(&self.capture, ex),
                    api_name: p.api_name.index(api_name),
                    api_version: i64::from(version),
                    pair_row,
                    error: None,
                })
            }
        };
        // a pair row has no partition by design: not an entry without one
        if f.partition.is_none() && !pair.pair_row {
            count(
                &mut self.counters.partitions,
                "entries_without_partition",
                1,
            );
        }
        let error_name = match (f.error_code, pair.error) {
            (None, _) => -1,
            (Some(code), Some((last, name))) if code == last => name,
            (Some(code), _) => {
                let name = self.model.error_name(code);
                let name = name.map_or(-1, |n| self.partitions.error_name.index(&n));
                pair.error = Some((code, name));
                name
            }
        };
        let p = &mut self.partitions;
        p.id.push_ids(&pair.id);
        p.api_name.indices.push(pair.api_name);
        p.api_version.push(Some(pair.api_version));
        p.group_id.push(f.group_id.as_deref());
        p.member_id.push(f.member_id.as_deref());
        p.member_epoch.push(f.member_epoch);
        p.acks.push(f.acks);
        p.transactional_id.push(f.transactional_id.as_deref());
        p.isolation_level.push(f.isolation_level);
        p.txn_committed.push(f.txn_committed);
        p.topic.push(f.topic.as_deref());
        p.topic_id.push(f.topic_id.as_deref());
        p.partition.push(f.partition);
        p.error_code.push(f.error_code);
        p.error_name.indices.push(error_name);
        p.records.push(f.records);
        p.record_bytes.push(f.record_bytes);
        p.first_offset.push(f.first_offset);
        p.last_offset.push(f.last_offset);
        for (i, col) in p.entries.iter_mut().enumerate() {
            col.push(f.entry_values.get(i).copied().flatten());
        }
        p.len += 1;
    }

    fn push_group(
        &mut self,
        ex: &Exchange,
        api_name: &str,
        version: i16,
        protocol: &str,
        f: &GroupFacts,
    ) {
        let tables = self
            .model
            .tables
            .as_ref()
            .expect("TableSink::new checked it");
        let error_name = f.error_code.and_then(|c| self.model.error_name(c));
        let fenced = error_name
            .as_deref()
            .map(|n| tables.fencing_errors.iter().any(|e| e == n));
        let g = &mut self.groups;
        g.id.push(&self.capture, ex);
        let req = ex
            .request
            .as_ref()
            .and_then(KafkaFrame::end_ts)
            .filter(|&t| t != 0);
        let resp = ex
            .response
            .as_ref()
            .and_then(KafkaFrame::end_ts)
            .filter(|&t| t != 0);
        g.latency_ms.push(match (req, resp) {
            (Some(q), Some(r)) => Some(r.wrapping_sub(q) as f64 / 1e6),
            _ => None,
        });
        g.api_name.push(Some(api_name));
        g.api_version.push(Some(i64::from(version)));
        g.group_protocol.push(Some(protocol));
        g.group_id.push(f.group_id.as_deref());
        g.member_id.push(f.member_id.as_deref());
        g.group_instance_id.push(f.group_instance_id.as_deref());
        g.request_generation.push(f.request_generation);
        g.generation.push(f.generation);
        g.protocol_type.push(f.protocol_type.as_deref());
        g.protocol_name.push(f.protocol_name.as_deref());
        g.leader.push(f.leader.as_deref());
        g.members.push(f.members);
        g.assignment_bytes.push(f.assignment_bytes);
        g.assigned_partitions.push(f.assigned_partitions);
        g.error_code.push(f.error_code);
        g.error_name.push(error_name.as_deref());
        g.fenced.push(fenced);
        g.len += 1;
    }

    /// The capture ended: the versions rows of its connections.
    pub fn end_capture(&mut self) {
        let model = Arc::clone(&self.model);
        let tables = model.tables.as_ref().expect("TableSink::new checked it");
        let v = &mut self.versions;
        for conn in self.connections.drain(..) {
            for (&api_key, counts) in &conn.used {
                let used: Vec<i16> = counts.keys().copied().collect();
                let spec = tables
                    .request_versions
                    .get(&api_key)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let range = conn.advertised.get(&i64::from(api_key)).copied();
                v.capture.push(Some(&self.capture));
                v.stream.push(Some(i64::from(conn.stream)));
                v.client_id.push(conn.client_id.as_deref());
                v.software_name.push(conn.software.0.as_deref());
                v.software_version.push(conn.software.1.as_deref());
                v.negotiation_version.push(conn.negotiation_version);
                v.negotiation_error.push(conn.negotiation_error.as_deref());
                v.api_key.push(Some(i64::from(api_key)));
                v.api_name.push(Some(&model.api_name(api_key)));
                v.requests.push(Some(
                    counts.values().sum::<u64>().min(i64::MAX as u64) as i64
                ));
                push_list(&mut v.used, used.iter().map(|&u| i64::from(u)));
                v.broker_min.push(range.map(|r| r.0));
                v.broker_max.push(range.map(|r| r.1));
                v.within.push(range.map(|(lo, hi)| {
                    used.iter()
                        .all(|&u| lo <= i64::from(u) && i64::from(u) <= hi)
                }));
                v.spec_max.push(spec.iter().max().map(|&m| i64::from(m)));
                push_list(
                    &mut v.unknown,
                    used.iter()
                        .filter(|u| !spec.contains(u))
                        .map(|&u| i64::from(u)),
                );
                v.len += 1;
            }
        }
        self.by_stream.clear();
    }

    /// The rows built so far (then forgotten), per table in the contracts' order.
    pub fn take(&mut self) -> [(&'static str, TableColumns); 3] {
        let tables = self
            .model
            .tables
            .as_ref()
            .expect("TableSink::new checked it");
        let p = &mut self.partitions;
        let mut cols = Vec::new();
        p.id.take(&mut cols);
        cols.push(("api_name".into(), str_col(&mut p.api_name)));
        cols.push(("api_version".into(), int_col(&mut p.api_version)));
        cols.push(("group_id".into(), str_col(&mut p.group_id)));
        cols.push(("member_id".into(), str_col(&mut p.member_id)));
        cols.push(("member_epoch".into(), int_col(&mut p.member_epoch)));
        cols.push(("acks".into(), int_col(&mut p.acks)));
        cols.push(("transactional_id".into(), str_col(&mut p.transactional_id)));
        cols.push(("isolation_level".into(), int_col(&mut p.isolation_level)));
        let committed = Column::Bool(std::mem::take(&mut p.txn_committed));
        cols.push(("txn_committed".into(), committed));
        cols.push(("topic".into(), str_col(&mut p.topic)));
        cols.push(("topic_id".into(), str_col(&mut p.topic_id)));
        cols.push(("partition".into(), int_col(&mut p.partition)));
        cols.push(("error_code".into(), int_col(&mut p.error_code)));
        cols.push(("error_name".into(), str_col(&mut p.error_name)));
        cols.push(("records".into(), int_col(&mut p.records)));
        cols.push(("record_bytes".into(), int_col(&mut p.record_bytes)));
        cols.push(("first_offset".into(), int_col(&mut p.first_offset)));
        cols.push(("last_offset".into(), int_col(&mut p.last_offset)));
        for (c, values) in tables.entry_columns.iter().zip(p.entries.iter_mut()) {
            cols.push((c.column.clone(), int_col(values)));
        }
        p.last_len = p.len;
        let partitions = TableColumns {
            columns: cols,
            len: std::mem::take(&mut p.len),
        };

        let g = &mut self.groups;
        let mut cols = Vec::new();
        g.id.take(&mut cols);
        cols.push((
            "latency_ms".into(),
            Column::F64(std::mem::take(&mut g.latency_ms)),
        ));
        cols.push(("api_name".into(), str_col(&mut g.api_name)));
        cols.push(("api_version".into(), int_col(&mut g.api_version)));
        cols.push(("group_protocol".into(), str_col(&mut g.group_protocol)));
        cols.push(("group_id".into(), str_col(&mut g.group_id)));
        cols.push(("member_id".into(), str_col(&mut g.member_id)));
        cols.push((
            "group_instance_id".into(),
            str_col(&mut g.group_instance_id),
        ));
        cols.push((
            "request_generation".into(),
            int_col(&mut g.request_generation),
        ));
        cols.push(("generation".into(), int_col(&mut g.generation)));
        cols.push(("protocol_type".into(), str_col(&mut g.protocol_type)));
        cols.push(("protocol_name".into(), str_col(&mut g.protocol_name)));
        cols.push(("leader".into(), str_col(&mut g.leader)));
        cols.push(("members".into(), int_col(&mut g.members)));
        cols.push(("assignment_bytes".into(), int_col(&mut g.assignment_bytes)));
        cols.push((
            "assigned_partitions".into(),
            int_col(&mut g.assigned_partitions),
        ));
        cols.push(("error_code".into(), int_col(&mut g.error_code)));
        cols.push(("error_name".into(), str_col(&mut g.error_name)));
        cols.push(("fenced".into(), Column::Bool(std::mem::take(&mut g.fenced))));
        let groups = TableColumns {
            columns: cols,
            len: std::mem::take(&mut g.len),
        };

        let v = &mut self.versions;
        let len = std::mem::take(&mut v.len);
        let cols = vec![
            ("capture".into(), str_col(&mut v.capture)),
            ("stream".into(), int_col(&mut v.stream)),
            ("client_id".into(), str_col(&mut v.client_id)),
            ("client_software_name".into(), str_col(&mut v.software_name)),
            (
                "client_software_version".into(),
                str_col(&mut v.software_version),
            ),
            (
                "negotiation_version".into(),
                int_col(&mut v.negotiation_version),
            ),
            (
                "negotiation_error".into(),
                str_col(&mut v.negotiation_error),
            ),
            ("api_key".into(), int_col(&mut v.api_key)),
            ("api_name".into(), str_col(&mut v.api_name)),
            ("requests".into(), int_col(&mut v.requests)),
            ("versions_used".into(), int_list(&mut v.used, len)),
            ("broker_min".into(), int_col(&mut v.broker_min)),
            ("broker_max".into(), int_col(&mut v.broker_max)),
            (
                "within_broker_range".into(),
                Column::Bool(std::mem::take(&mut v.within)),
            ),
            ("spec_max".into(), int_col(&mut v.spec_max)),
            ("unknown_versions".into(), int_list(&mut v.unknown, len)),
        ];
        let versions = TableColumns { columns: cols, len };
        [
            ("partitions", partitions),
            ("groups", groups),
            ("versions", versions),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::Wanted;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn wanted_tables_by_name() {
        assert_eq!(Wanted::of(&[]), Ok(None));
        let all = Wanted {
            partitions: true,
            groups: true,
        };
        let named = names(&["versions", "groups", "partitions"]);
        assert_eq!(Wanted::of(&named), Ok(Some(all)));
        let versions = Wanted {
            partitions: false,
            groups: false,
        };
        assert_eq!(Wanted::of(&names(&["versions"])), Ok(Some(versions)));
        let wrong = Wanted::of(&names(&["groups", "lag"])).unwrap_err();
        assert!(wrong.contains("\"lag\""), "{wrong}");
    }
}
