//! The spec model as handed over by Python (`dissector/protocol/export.py`): layouts per
//! (api_key, version, direction), header versions, API and error names, and the few
//! protocol facts the wire stages need.
//!
//! `Model::from_json` compiles every layout's field tree once into flat nodes (children
//! as index ranges, constant wire sizes precomputed), so the per-pair walk in
//! `summary.rs` only follows indices. Nothing here knows Kafka by itself: every key,
//! name and role comes from the JSON.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::kafka::table_model::{Facts, JFacts, JTables, TablesModel, NO_FACTS};
// Shared with table_model (which the model parses its tables section with): kept in
// types so that neither module depends on the other both ways.
pub use crate::types::{Direction, SmallKeyHasher, SmallKeyMap};

/// Deepest field nesting accepted from the JSON (Kafka's specs nest about five levels);
/// it bounds the recursion of every walk over wire data.
pub const MAX_DEPTH: usize = 32;

/// The only format this reader understands (`export.FORMAT`).
const FORMAT: u32 = 1;

/// Internal role bits of a node. The JSON names them (its `roles` table); their
/// numbers there are translated to these at load, so Python may renumber freely.
pub mod role {
    pub const VISIT: u32 = 1 << 0;
    pub const ERROR: u32 = 1 << 1;
    pub const PARTITIONS: u32 = 1 << 2;
    pub const TOPIC_ARRAY: u32 = 1 << 3;
    pub const TOPIC_OF_ITEMS: u32 = 1 << 4;
    pub const TOPIC_STRINGS: u32 = 1 << 5;
    pub const RECORDS: u32 = 1 << 6;
    pub const SIZE_STRUCT: u32 = 1 << 7;
    pub const ITEM_TOPIC: u32 = 1 << 8;
    pub const ITEM_TOPIC_NAME: u32 = 1 << 9;
    pub const ITEM_NAME: u32 = 1 << 10;
    pub const ITEM_TOPIC_ID: u32 = 1 << 11;
    pub const PARTITION_KEY: u32 = 1 << 12;
    pub const TOP_ERROR: u32 = 1 << 13;
    pub const THROTTLE: u32 = 1 << 14;
    pub const TOP_TOPIC: u32 = 1 << 15;
    pub const LEARN_TOPICS: u32 = 1 << 16;
    pub const LEARN_ID: u32 = 1 << 17;
    pub const LEARN_NAME: u32 = 1 << 18;
    pub const GENERIC: u32 = 1 << 19;
    pub const ITEM_ODD: u32 = 1 << 20;

    pub(crate) const NAMES: [(&str, u32); 21] = [
        ("visit", VISIT),
        ("error", ERROR),
        ("partitions", PARTITIONS),
        ("topic_array", TOPIC_ARRAY),
        ("topic_of_items", TOPIC_OF_ITEMS),
        ("topic_strings", TOPIC_STRINGS),
        ("records", RECORDS),
        ("size_struct", SIZE_STRUCT),
        ("item_topic", ITEM_TOPIC),
        ("item_topic_name", ITEM_TOPIC_NAME),
        ("item_name", ITEM_NAME),
        ("item_topic_id", ITEM_TOPIC_ID),
        ("partition_key", PARTITION_KEY),
        ("top_error", TOP_ERROR),
        ("throttle", THROTTLE),
        ("top_topic", TOP_TOPIC),
        ("learn_topics", LEARN_TOPICS),
        ("learn_id", LEARN_ID),
        ("learn_name", LEARN_NAME),
        ("generic", GENERIC),
        ("item_odd", ITEM_ODD),
    ];

    /// Any role an entry of an item array reads.
    pub const ITEM_ANY: u32 =
        ITEM_TOPIC | ITEM_TOPIC_NAME | ITEM_NAME | ITEM_TOPIC_ID | PARTITION_KEY | ITEM_ODD;
}

/// Wire type of a node (of each element, for arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F64,
    Bool,
    Str,
    Bytes,
    Records,
    Uuid,
    Struct,
}

impl Kind {
    fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "int8" => Kind::I8,
            "int16" => Kind::I16,
            "int32" => Kind::I32,
            "int64" => Kind::I64,
            "uint8" => Kind::U8,
            "uint16" => Kind::U16,
            "uint32" => Kind::U32,
            "uint64" => Kind::U64,
            "float64" => Kind::F64,
            "bool" => Kind::Bool,
            "string" => Kind::Str,
            "bytes" => Kind::Bytes,
            "records" => Kind::Records,
            "uuid" => Kind::Uuid,
            "struct" => Kind::Struct,
            _ => return None,
        })
    }

    /// Bytes of one value when they never vary (struct sizes are computed per node).
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            Kind::I8 | Kind::U8 | Kind::Bool => Some(1),
            Kind::I16 | Kind::U16 => Some(2),
            Kind::I32 | Kind::U32 => Some(4),
            Kind::I64 | Kind::U64 | Kind::F64 => Some(8),
            Kind::Uuid => Some(16),
            _ => None,
        }
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            Kind::I8
                | Kind::I16
                | Kind::I32
                | Kind::I64
                | Kind::U8
                | Kind::U16
                | Kind::U32
                | Kind::U64
        )
    }
}

/// One field of one layout, compiled.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: Box<str>,
    pub kind: Kind,
    pub array: bool,
    /// A struct with a presence byte in flexible versions (KIP-893).
    pub nullable: bool,
    pub tag: Option<u64>,
    pub roles: u32,
    /// Members of a struct: `kids[plain.0 .. plain.1]` then `kids[tagged.0 .. tagged.1]`.
    pub plain: (u32, u32),
    pub tagged: (u32, u32),
    /// Wire size of one value (one element of an array) when it is constant.
    pub fixed: Option<usize>,
    /// Bytes of a struct's plain members when they are all fixed (its tag section may
    /// follow): lets a walk skip them in one step.
    pub plain_fixed: Option<usize>,
    /// Index into `Model::extracts` of the column this top-level field fills.
    pub extract: Option<u16>,
    /// A struct's plain members as the summary walk takes them: `Model::steps[walk.0 ..
    /// walk.1]` (runs of fixed members nothing reads merged into one skip).
    pub walk: (u32, u32),
    /// The same for skipping the whole struct (every run of fixed members merged).
    pub skip: (u32, u32),
    /// Index into `Model::facts` of this field's table roles (`NO_FACTS`: none).
    pub facts: u32,
    /// This field or one inside it has table roles: the tables' walk reads it.
    pub tables: bool,
    /// Members of a struct the tables' walk reads (`tables` set): what it keeps of one.
    pub table_members: u16,
}

/// One step over a struct's plain members, compiled once (`Model::compile_steps`) so
/// the per-pair walk dispatches per step rather than per field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Consecutive fixed-size members, none an array, moved over in one bounds check.
    Skip(u32),
    /// A member moved over by `summary::skip_field` (variable size, nothing read).
    Pass(u32),
    /// A member the walk looks at (a role, or a key an item array notes).
    Visit(u32),
    /// A visited int member, read for its roles (what `Visit` comes to for it).
    Int(u32),
    /// A visited `records` member, summarised (what `Visit` comes to for it).
    Records(u32),
}

#[derive(Debug, Clone)]
pub struct Layout {
    pub api_key: i16,
    pub version: i16,
    pub direction: Direction,
    pub flexible: bool,
    /// Request header 0/1/2 or response header 0/1, as `protocol/messages.py` reads it.
    pub header_version: u8,
    /// The body, as a struct node.
    pub root: u32,
}

#[derive(Debug, Clone)]
pub struct Extract {
    pub column: String,
    pub direction: Direction,
    pub api_keys: Vec<i16>,
    pub field: String,
}

/// An answer in an older layout when the error says the version is unsupported
/// (ApiVersions: the broker answers with v0 so the client can retry).
#[derive(Debug, Clone, Copy)]
pub struct Fallback {
    pub api_key: i16,
    pub error_code: i16,
    pub version: i16,
}

#[derive(Debug)]
pub struct Model {
    pub nodes: Vec<Node>,
    pub kids: Vec<u32>,
    pub layouts: Vec<Layout>,
    pub steps: Vec<Step>,
    index: SmallKeyMap<(i16, i16, Direction), u32>,
    /// `index` as arrays: `dense[api_key][version]` holds the request and response
    /// layout indices (`NO_LAYOUT` if none), for the per-pair lookups.
    dense: Vec<Vec<[u32; 2]>>,
    /// `assumed` as an array by api_key, per direction (`NO_LAYOUT` if none).
    dense_assumed: Vec<[u32; 2]>,
    /// (api_key, direction) -> the layout that decodes versions newer than it
    /// (`messages.ASSUMED_VERSION_RULE`, decided in Python: `assumed_layouts`).
    assumed: SmallKeyMap<(i16, Direction), u32>,
    api_names: HashMap<i16, Arc<str>>,
    errors: SmallKeyMap<i64, Arc<str>>,
    pub id_sources: Vec<i16>,
    pub zero_uuid: String,
    /// The 16 bytes whose text is `zero_uuid`, when it is a uuid's text as
    /// `compile.uuid_text` writes it (lowercase hex, dashes after bytes 4, 6, 8, 10):
    /// ids are compared raw, without making their text.
    pub zero_uuid_bytes: Option<[u8; 16]>,
    pub produce_key: i16,
    pub acks_field: String,
    pub sasl_handshake_key: i16,
    pub specless_keys: Vec<i16>,
    pub header_v0_requests: Vec<(i16, i16)>,
    pub specless_max_version: i16,
    pub fallback: Fallback,
    pub extracts: Vec<Extract>,
    pub long_poll: Option<LongPoll>,
    /// Record-batch errors listed in one pair's decode_error before a count (None: all).
    pub max_record_errors_listed: Option<usize>,
    /// The words for a side no layout decodes; None (an older model): such pairs defer.
    pub unsupported: Option<Unsupported>,
    /// Table roles of the nodes that have some (`Node::facts`).
    pub facts: Vec<Facts>,
    /// The analytics tables' section; None (an older model): no tables.
    pub tables: Option<TablesModel>,
}

/// A side no spec describes: its decode_error, and whether specs know its key (the
/// version is then newer or older than theirs, which `settle_assumed` looks at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSpec {
    pub text: String,
    pub key_known: bool,
}

/// `messages._unsupported` as data: templates with `{direction}`, `{api_key}`,
/// `{version}`, `{lowest}`, `{highest}`, each key's known versions, and the error
/// prefixes that leave a row's status alone (`stages.is_fatal`).
#[derive(Debug, Clone)]
pub struct Unsupported {
    version_text: String,
    unknown_key_text: String,
    /// `messages.VERSION_REFUSED_TEXT` (`{api_key}`, `{version}`), when the model has it.
    refused_text: Option<String>,
    known: SmallKeyMap<(i16, Direction), (i16, i16)>,
    not_malformed: Vec<String>,
}

impl Unsupported {
    /// One side of (api_key, version) that no spec describes.
    pub fn describe(&self, api_key: i16, version: i16, direction: Direction) -> NoSpec {
        NoSpec {
            text: self.text(api_key, version, direction),
            key_known: self.known.contains_key(&(api_key, direction)),
        }
    }

    /// The decode_error of one side of (api_key, version) that no spec describes.
    fn text(&self, api_key: i16, version: i16, direction: Direction) -> String {
        let dir = match direction {
            Direction::Request => "request",
            Direction::Response => "response",
        };
        let filled = |template: &str| {
            template
                .replace("{direction}", dir)
                .replace("{api_key}", &api_key.to_string())
        };
        match self.known.get(&(api_key, direction)) {
            None => filled(&self.unknown_key_text),
            Some((lowest, highest)) => filled(&self.version_text)
                .replace("{version}", &version.to_string())
                .replace("{lowest}", &lowest.to_string())
                .replace("{highest}", &highest.to_string()),
        }
    }

    /// The decode_error of a request the broker refused (`messages.settle_refused`).
    pub fn refused(&self, api_key: i16, version: i16) -> Option<String> {
        self.refused_text.as_ref().map(|template| {
            template
                .replace("{api_key}", &api_key.to_string())
                .replace("{version}", &version.to_string())
        })
    }

    /// Does this decode error make the row malformed?
    pub fn is_fatal(&self, error: &str) -> bool {
        !self
            .not_malformed
            .iter()
            .any(|p| error.starts_with(p.as_str()))
    }
}

// ------------------------------------------------------------------ JSON shapes

#[derive(Deserialize)]
struct JModel {
    format: u32,
    roles: HashMap<String, u32>,
    api_names: HashMap<String, String>,
    errors: HashMap<String, String>,
    id_sources: Vec<i16>,
    zero_uuid: String,
    produce: JProduce,
    sasl_handshake_key: i16,
    specless_keys: JSpecless,
    #[serde(default)]
    header_v0_requests: Vec<(i16, i16)>,
    unsupported_version_fallback: JFallback,
    #[serde(default)]
    assumed_layouts: Vec<(i16, String, i16)>,
    #[serde(default)]
    max_record_errors_listed: Option<usize>,
    extracts: Vec<JExtract>,
    #[serde(default)]
    long_poll: Option<LongPoll>,
    #[serde(default)]
    unsupported: Option<JUnsupported>,
    #[serde(default)]
    tables: Option<JTables>,
    layouts: Vec<JLayout>,
}

#[derive(Deserialize)]
struct JUnsupported {
    version_text: String,
    unknown_key_text: String,
    #[serde(default)]
    refused_text: Option<String>,
    /// [api_key, direction, lowest, highest]
    known: Vec<(i16, String, i16, i16)>,
    not_malformed: Vec<String>,
}

/// How the long-poll columns are told apart (`export._long_poll`, the rule is
/// `stats.SERVICE_LATENCY_RULE`): which extract column holds a request's long-poll
/// bound, the share of it an empty answer must have waited, and the class names.
#[derive(Debug, Clone, Deserialize)]
pub struct LongPoll {
    pub column: String,
    pub wait_share: f64,
    pub failed_statuses: Vec<String>,
    pub classes: LongPollClasses,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LongPollClasses {
    pub empty_poll: String,
    pub data: String,
    pub early: String,
}

#[derive(Deserialize)]
struct JProduce {
    api_key: i16,
    acks_field: String,
}

#[derive(Deserialize)]
struct JSpecless {
    api_keys: Vec<i16>,
    max_version: i16,
}

#[derive(Deserialize)]
struct JFallback {
    api_key: i16,
    error_code: i16,
    version: i16,
}

#[derive(Deserialize)]
struct JExtract {
    column: String,
    direction: String,
    api_keys: Vec<i16>,
    field: String,
}

#[derive(Deserialize)]
struct JLayout {
    api_key: i16,
    version: i16,
    direction: String,
    flexible: bool,
    header_version: u8,
    fields: Vec<JField>,
}

#[derive(Deserialize)]
struct JField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    array: bool,
    #[serde(default)]
    nullable: bool,
    #[serde(default)]
    tag: Option<u64>,
    #[serde(default)]
    fields: Vec<JField>,
    #[serde(default)]
    roles: u32,
    #[serde(default)]
    table: Option<JFacts>,
}

fn direction(text: &str) -> Result<Direction, String> {
    match text {
        "request" => Ok(Direction::Request),
        "response" => Ok(Direction::Response),
        other => Err(format!("unknown direction {other:?}")),
    }
}

/// JSON role number -> internal role bits, by the names both sides share.
struct RoleMap(Vec<(u32, u32)>);

impl RoleMap {
    fn new(json: &HashMap<String, u32>) -> Result<Self, String> {
        let mut pairs = Vec::with_capacity(role::NAMES.len());
        for (name, bit) in role::NAMES {
            let theirs = json
                .get(name)
                .ok_or_else(|| format!("role {name:?} missing from the model"))?;
            pairs.push((*theirs, bit));
        }
        Ok(RoleMap(pairs))
    }

    fn translate(&self, json_roles: u32) -> u32 {
        self.0
            .iter()
            .filter(|(theirs, _)| json_roles & theirs != 0)
            .fold(0, |acc, (_, ours)| acc | ours)
    }
}

struct Builder<'r> {
    nodes: Vec<Node>,
    kids: Vec<u32>,
    roles: &'r RoleMap,
    facts: Vec<Facts>,
}

impl Builder<'_> {
    /// A struct node for `fields`, members compiled depth first. Returns its index.
    fn struct_node(
        &mut self,
        name: &str,
        fields: &[JField],
        flexible: bool,
        depth: usize,
    ) -> Result<u32, String> {
        let root = JField {
            name: name.to_owned(),
            ty: "struct".to_owned(),
            array: false,
            nullable: false,
            tag: None,
            fields: Vec::new(),
            roles: 0,
            table: None,
        };
        self.node(&root, fields, flexible, depth)
    }

    fn node(
        &mut self,
        f: &JField,
        members: &[JField],
        flexible: bool,
        depth: usize,
    ) -> Result<u32, String> {
        if depth > MAX_DEPTH {
            return Err(format!("field {:?} nests deeper than {MAX_DEPTH}", f.name));
        }
        let kind = Kind::parse(&f.ty)
            .ok_or_else(|| format!("field {:?}: unknown type {:?}", f.name, f.ty))?;
        let mut member_ids = Vec::with_capacity(members.len());
        for m in members {
            member_ids.push((
                m.tag.is_some(),
                self.node(m, &m.fields, flexible, depth + 1)?,
            ));
        }
        let plain_start = self.kids.len() as u32;
        self.kids.extend(
            member_ids
                .iter()
                .filter(|(tagged, _)| !tagged)
                .map(|(_, id)| *id),
        );
        let tagged_start = self.kids.len() as u32;
        self.kids.extend(
            member_ids
                .iter()
                .filter(|(tagged, _)| *tagged)
                .map(|(_, id)| *id),
        );
        let end = self.kids.len() as u32;
        let facts = match &f.table {
            Some(j) => {
                self.facts
                    .push(Facts::from_json(j).map_err(|e| format!("{}: {e}", f.name))?);
                (self.facts.len() - 1) as u32
            }
            None => NO_FACTS,
        };
        let table_members = member_ids
            .iter()
            .filter(|(_, id)| self.nodes[*id as usize].tables)
            .count();
        let tables = facts != NO_FACTS || table_members > 0;
        let plain_fixed = if kind == Kind::Struct {
            self.plain_fixed(plain_start, tagged_start)
        } else {
            None
        };
        let fixed = if kind == Kind::Struct {
            // no tag section to read and nothing variable among the members
            plain_fixed.filter(|_| !flexible && tagged_start == end)
        } else {
            kind.fixed_size()
        };
        self.nodes.push(Node {
            name: f.name.clone().into_boxed_str(),
            kind,
            array: f.array,
            nullable: f.nullable && kind == Kind::Struct && !f.array,
            tag: f.tag,
            roles: self.roles.translate(f.roles),
            plain: (plain_start, tagged_start),
            tagged: (tagged_start, end),
            fixed,
            plain_fixed,
            extract: None,
            walk: (0, 0),
            skip: (0, 0),
            facts,
            tables,
            table_members: u16::try_from(table_members).unwrap_or(u16::MAX),
        });
        Ok((self.nodes.len() - 1) as u32)
    }

    /// Total size of plain members that are all fixed, non-array and never null.
    fn plain_fixed(&self, plain_start: u32, tagged_start: u32) -> Option<usize> {
        let mut total = 0usize;
        for &id in &self.kids[plain_start as usize..tagged_start as usize] {
            let n = &self.nodes[id as usize];
            if n.array || n.nullable {
                return None;
            }
            total = total.checked_add(n.fixed?)?;
        }
        Some(total)
    }
}

impl Model {
    pub fn from_json(text: &str) -> Result<Model, String> {
        let j: JModel = serde_json::from_str(text).map_err(|e| format!("model JSON: {e}"))?;
        if j.format != FORMAT {
            return Err(format!(
                "model format {} (this build reads {FORMAT})",
                j.format
            ));
        }
        let roles = RoleMap::new(&j.roles)?;
        let extracts = j
            .extracts
            .iter()
            .map(|e| {
                Ok(Extract {
                    column: e.column.clone(),
                    direction: direction(&e.direction)?,
                    api_keys: e.api_keys.clone(),
                    field: e.field.clone(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut b = Builder {
            nodes: Vec::new(),
            kids: Vec::new(),
            roles: &roles,
            facts: Vec::new(),
        };
        let mut layouts = Vec::with_capacity(j.layouts.len());
        let mut index = SmallKeyMap::default();
        for jl in &j.layouts {
            let dir = direction(&jl.direction)?;
            let root = b.struct_node("", &jl.fields, jl.flexible, 0)?;
            let layout = Layout {
                api_key: jl.api_key,
                version: jl.version,
                direction: dir,
                flexible: jl.flexible,
                header_version: jl.header_version,
                root,
            };
            if index
                .insert((jl.api_key, jl.version, dir), layouts.len() as u32)
                .is_some()
            {
                return Err(format!(
                    "layout {} v{} {:?} given twice",
                    jl.api_key, jl.version, dir
                ));
            }
            layouts.push(layout);
        }
        let mut assumed = SmallKeyMap::default();
        for (api_key, dir_text, version) in &j.assumed_layouts {
            let dir = direction(dir_text)?;
            let &i = index
                .get(&(*api_key, *version, dir))
                .ok_or_else(|| format!("assumed layout {api_key} v{version} {dir:?} not given"))?;
            assumed.insert((*api_key, dir), i);
        }
        let unsupported = match j.unsupported {
            None => None,
            Some(u) => {
                let mut known = SmallKeyMap::default();
                for (api_key, dir_text, lowest, highest) in &u.known {
                    known.insert((*api_key, direction(dir_text)?), (*lowest, *highest));
                }
                Some(Unsupported {
                    version_text: u.version_text,
                    unknown_key_text: u.unknown_key_text,
                    refused_text: u.refused_text,
                    known,
                    not_malformed: u.not_malformed,
                })
            }
        };
        let (dense, dense_assumed) = dense_index(&index, &assumed);
        let tables = j
            .tables
            .map(|t| TablesModel::from_json(t, crate::kafka::records::DEFAULT_MAX_DECOMPRESSED))
            .transpose()?;
        let mut model = Model {
            nodes: b.nodes,
            kids: b.kids,
            layouts,
            steps: Vec::new(),
            index,
            dense,
            dense_assumed,
            assumed,
            api_names: parse_keys::<i16, String>(&j.api_names, "api name")?
                .into_iter()
                .map(|(k, v)| (k, Arc::from(v)))
                .collect(),
            errors: parse_keys::<i64, String>(&j.errors, "error code")?
                .into_iter()
                .map(|(k, v)| (k, Arc::from(v.as_str())))
                .collect(),
            id_sources: j.id_sources,
            zero_uuid_bytes: uuid_bytes(&j.zero_uuid),
            zero_uuid: j.zero_uuid,
            produce_key: j.produce.api_key,
            acks_field: j.produce.acks_field,
            sasl_handshake_key: j.sasl_handshake_key,
            specless_keys: j.specless_keys.api_keys,
            header_v0_requests: j.header_v0_requests,
            specless_max_version: j.specless_keys.max_version,
            fallback: Fallback {
                api_key: j.unsupported_version_fallback.api_key,
                error_code: j.unsupported_version_fallback.error_code,
                version: j.unsupported_version_fallback.version,
            },
            extracts,
            long_poll: j.long_poll,
            max_record_errors_listed: j.max_record_errors_listed,
            unsupported,
            facts: b.facts,
            tables,
        };
        model.bind_extracts()?;
        model.compile_steps();
        Ok(model)
    }

    /// Fill every struct node's `walk` and `skip` steps; runs after `bind_extracts`,
    /// which adds the VISIT role the walk steps depend on.
    fn compile_steps(&mut self) {
        let mut steps = Vec::new();
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if n.kind != Kind::Struct {
                continue;
            }
            let plain = &self.kids[n.plain.0 as usize..n.plain.1 as usize];
            let start = steps.len() as u32;
            // `Walker::member` looks at these roles even on members it does not visit.
            let looked_at = role::VISIT | role::ITEM_ODD | role::PARTITION_KEY;
            push_steps(&self.nodes, plain, looked_at, &mut steps);
            let middle = steps.len() as u32;
            push_steps(&self.nodes, plain, 0, &mut steps);
            let end = steps.len() as u32;
            let n = &mut self.nodes[i];
            n.walk = (start, middle);
            n.skip = (middle, end);
        }
        self.steps = steps;
    }

    /// Mark the top-level int fields the extract columns copy.
    fn bind_extracts(&mut self) -> Result<(), String> {
        if self.extracts.len() > u16::MAX as usize {
            return Err("too many extract columns".to_owned());
        }
        for li in 0..self.layouts.len() {
            let l = &self.layouts[li];
            let root = &self.nodes[l.root as usize];
            let mut marks = Vec::new();
            for (slot, e) in self.extracts.iter().enumerate() {
                if e.direction != l.direction || !e.api_keys.contains(&l.api_key) {
                    continue;
                }
                let found = self.kids[root.plain.0 as usize..root.tagged.1 as usize]
                    .iter()
                    .copied()
                    .find(|&id| {
                        let n = &self.nodes[id as usize];
                        &*n.name == e.field.as_str() && n.kind.is_int() && !n.array
                    });
                if let Some(id) = found {
                    marks.push((id, slot as u16));
                }
            }
            for (id, slot) in marks {
                let n = &mut self.nodes[id as usize];
                n.extract = Some(slot);
                n.roles |= role::VISIT;
            }
        }
        Ok(())
    }

    /// Asked per side of every pair: the arrays answer for keys and versions in
    /// `0..DENSE_LIMIT`, the map for any other number a spec may give.
    #[inline]
    pub fn layout(&self, api_key: i16, version: i16, direction: Direction) -> Option<&Layout> {
        let at = if (0..DENSE_LIMIT).contains(&api_key) && (0..DENSE_LIMIT).contains(&version) {
            self.dense.get(api_key as usize)?.get(version as usize)?[direction as usize]
        } else {
            *self.index.get(&(api_key, version, direction))?
        };
        self.layouts.get(at as usize)
    }

    /// The layout a version newer than every known one is decoded with, if any.
    #[inline]
    pub fn assumed_layout(
        &self,
        api_key: i16,
        version: i16,
        direction: Direction,
    ) -> Option<&Layout> {
        let at = if (0..DENSE_LIMIT).contains(&api_key) {
            self.dense_assumed.get(api_key as usize)?[direction as usize]
        } else {
            *self.assumed.get(&(api_key, direction))?
        };
        let layout = self.layouts.get(at as usize)?;
        (version > layout.version).then_some(layout)
    }

    /// The compiled steps of a struct node's plain members (`Node::walk`).
    #[inline]
    pub fn walk_steps(&self, n: &Node) -> &[Step] {
        &self.steps[n.walk.0 as usize..n.walk.1 as usize]
    }

    /// The compiled steps that move over a struct node's plain members (`Node::skip`).
    #[inline]
    pub fn skip_steps(&self, n: &Node) -> &[Step] {
        &self.steps[n.skip.0 as usize..n.skip.1 as usize]
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    /// The table roles of a node (`Facts::default()` when it has none).
    pub fn facts(&self, n: &Node) -> &Facts {
        static NONE: std::sync::OnceLock<Facts> = std::sync::OnceLock::new();
        match self.facts.get(n.facts as usize) {
            Some(f) => f,
            None => NONE.get_or_init(Facts::default),
        }
    }

    /// Plain members of a struct node, in wire order.
    pub fn plain(&self, n: &Node) -> &[u32] {
        &self.kids[n.plain.0 as usize..n.plain.1 as usize]
    }

    pub fn tagged(&self, n: &Node) -> &[u32] {
        &self.kids[n.tagged.0 as usize..n.tagged.1 as usize]
    }

    /// Kafka's name for an API key, `Unknown(k)` otherwise (`names.api_name`). Borrowed
    /// for known keys: it is asked once per row.
    pub fn api_name(&self, api_key: i16) -> Cow<'_, str> {
        match self.api_names.get(&api_key) {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(format!("Unknown({api_key})")),
        }
    }

    /// The name as a shared string: a row held for later keeps it without a copy.
    pub fn shared_api_name(&self, api_key: i16) -> Arc<str> {
        match self.api_names.get(&api_key) {
            Some(name) => Arc::clone(name),
            None => Arc::from(format!("Unknown({api_key})")),
        }
    }

    pub fn error_name(&self, code: i64) -> Option<Arc<str>> {
        self.errors.get(&code).cloned()
    }

    pub fn is_id_source(&self, api_key: i16) -> bool {
        self.id_sources.contains(&api_key)
    }

    pub fn extract_columns(&self) -> impl Iterator<Item = &str> {
        self.extracts.iter().map(|e| e.column.as_str())
    }
}

/// The bytes of a uuid written as `compile.uuid_text` writes one, else None.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let t = text.as_bytes();
    if t.len() != 36 || [8, 13, 18, 23].iter().any(|&i| t[i] != b'-') {
        return None;
    }
    let digits: Vec<u8> = t.iter().copied().filter(|&c| c != b'-').collect();
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None, // upper case is not how the text is written
    };
    let mut out = [0u8; 16];
    if digits.len() != 32 {
        return None;
    }
    for (o, pair) in out.iter_mut().zip(digits.chunks(2)) {
        *o = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Layout indices in a marker no layout has: `Model::layout` finds nothing there.
const NO_LAYOUT: u32 = u32::MAX;

/// api_keys and versions below this are looked up in the dense tables (Kafka's are
/// under a hundred); others, negative ones included, in the maps, so a spec with odd
/// numbers never sizes the tables.
const DENSE_LIMIT: i16 = 1024;

type Dense = (Vec<Vec<[u32; 2]>>, Vec<[u32; 2]>);

/// The layout and assumed-layout maps as arrays by api_key (and version).
fn dense_index(
    index: &SmallKeyMap<(i16, i16, Direction), u32>,
    assumed: &SmallKeyMap<(i16, Direction), u32>,
) -> Dense {
    let slot = |k: i16| usize::try_from(k).ok().filter(|_| k < DENSE_LIMIT);
    let mut dense: Vec<Vec<[u32; 2]>> = Vec::new();
    for (&(key, version, dir), &i) in index {
        let (Some(k), Some(v)) = (slot(key), slot(version)) else {
            continue;
        };
        if dense.len() <= k {
            dense.resize(k + 1, Vec::new());
        }
        if dense[k].len() <= v {
            dense[k].resize(v + 1, [NO_LAYOUT; 2]);
        }
        dense[k][v][dir as usize] = i;
    }
    let mut by_key: Vec<[u32; 2]> = Vec::new();
    for (&(key, dir), &i) in assumed {
        let Some(k) = slot(key) else { continue };
        if by_key.len() <= k {
            by_key.resize(k + 1, [NO_LAYOUT; 2]);
        }
        by_key[k][dir as usize] = i;
    }
    (dense, by_key)
}

/// Steps over `plain` members: a member with a role in `looked_at` is visited, runs of
/// fixed-size non-array members are merged into one skip, any other member is passed.
fn push_steps(nodes: &[Node], plain: &[u32], looked_at: u32, steps: &mut Vec<Step>) {
    let first = steps.len(); // steps before this belong to other nodes: never merged into
    for &id in plain {
        let m = &nodes[id as usize];
        if m.roles & looked_at != 0 {
            // `Walker::member` on a member with no item key role and no array reads
            // it as its kind says: those dispatches are decided here, once.
            let plain = m.roles & role::VISIT != 0
                && m.roles & (role::ITEM_ODD | role::PARTITION_KEY) == 0
                && !m.array;
            steps.push(match m.kind {
                k if plain && k.is_int() => Step::Int(id),
                Kind::Records if plain => Step::Records(id),
                _ => Step::Visit(id),
            });
            continue;
        }
        // `skip_field` moves a fixed-size non-array member by its size, whatever it is
        // (a nullable struct has no size in the flexible versions that give it a byte).
        match (m.array, m.fixed.and_then(|f| u32::try_from(f).ok())) {
            (false, Some(size)) => match steps[first..].last_mut() {
                Some(Step::Skip(run)) if run.checked_add(size).is_some() => *run += size,
                _ => steps.push(Step::Skip(size)),
            },
            _ => steps.push(Step::Pass(id)),
        }
    }
}

fn parse_keys<K: std::str::FromStr + std::hash::Hash + Eq, V: Clone>(
    map: &HashMap<String, V>,
    what: &str,
) -> Result<HashMap<K, V>, String> {
    map.iter()
        .map(|(k, v)| {
            k.parse::<K>()
                .map(|k| (k, v.clone()))
                .map_err(|_| format!("bad {what} key {k:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::uuid_bytes;

    #[test]
    fn uuid_bytes_reads_only_the_text_uuid_text_writes() {
        let raw = uuid_bytes("0123abcd-ef01-2345-6789-abcdef012345").expect("canonical");
        assert_eq!(raw[..4], [0x01, 0x23, 0xab, 0xcd]);
        assert_eq!(raw[15], 0x45);
        assert_eq!(
            uuid_bytes("00000000-0000-0000-0000-000000000000"),
            Some([0; 16])
        );
        for odd in [
            "0123ABCD-ef01-2345-6789-abcdef012345", // upper case
            "0123abcdef01-2345-6789-abcdef012345-", // dashes elsewhere
            "0123abcd-ef01-2345-6789-abcdef01234",  // short
            "0123abcd-ef01-2345-6789-abcdef01234g", // not hex
            "",
        ] {
            assert_eq!(uuid_bytes(odd), None, "{odd}");
        }
    }
}
