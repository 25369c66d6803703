//! The analytics tables' part of the spec model (`dissector/protocol/tables.py`, written
//! out by `export.py`): the roles fields play in the partitions, groups and versions
//! tables, and the few facts about those tables the rows need (which APIs, which
//! columns, which errors fence a member). Nothing here knows Kafka by itself: every
//! key, field and column comes from the JSON.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::types::{Direction, SmallKeyMap};

/// A node without table roles (`Node::facts`).
pub const NO_FACTS: u32 = u32::MAX;

/// The most value slots a partition entry has (`tables.VALUE_FIELDS`): an entry's values
/// are gathered into an array of this size. A model with more is refused at load.
pub const MAX_VALUE_SLOTS: usize = 16;

/// The most context slots (`tables.CONTEXT_NAMES`): a context is an array of this size.
pub const MAX_CONTEXT_SLOTS: usize = 8;

/// Role of a field in ShareFetch's acquired offset ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    Array,
    First,
    Last,
}

/// Roles of a membership call's fields (`tables.GROUP_FIELDS`, `MEMBER_ITEM_FIELDS`,
/// `ASSIGNED_TOPICS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupRole {
    GroupId,
    MemberId,
    InstanceId,
    Generation,
    ProtocolType,
    ProtocolName,
    Leader,
    Error,
    MemberList,
    Assignment,
    MemberMemberId,
    MemberError,
    AssignedTopics,
    AssignedPartitions,
}

impl GroupRole {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "group_id" => GroupRole::GroupId,
            "member_id" => GroupRole::MemberId,
            "instance_id" => GroupRole::InstanceId,
            "generation" => GroupRole::Generation,
            "protocol_type" => GroupRole::ProtocolType,
            "protocol_name" => GroupRole::ProtocolName,
            "leader" => GroupRole::Leader,
            "error" => GroupRole::Error,
            "member_list" => GroupRole::MemberList,
            "assignment" => GroupRole::Assignment,
            "member_member_id" => GroupRole::MemberMemberId,
            "member_error" => GroupRole::MemberError,
            "assigned_topics" => GroupRole::AssignedTopics,
            "assigned_partitions" => GroupRole::AssignedPartitions,
            other => return Err(format!("unknown group role {other:?}")),
        })
    }
}

/// Roles of ApiVersions fields (`tables.SOFTWARE_FIELDS`, `ADVERTISED_FIELDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRole {
    SoftwareName,
    SoftwareVersion,
    Advertised,
    AdvertisedKey,
    AdvertisedMin,
    AdvertisedMax,
}

impl VersionRole {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "software_0" => VersionRole::SoftwareName,
            "software_1" => VersionRole::SoftwareVersion,
            "advertised" => VersionRole::Advertised,
            "advertised_0" => VersionRole::AdvertisedKey,
            "advertised_1" => VersionRole::AdvertisedMin,
            "advertised_2" => VersionRole::AdvertisedMax,
            other => return Err(format!("unknown version role {other:?}")),
        })
    }
}

/// The table roles of one field.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Slot of a context field (`tables.CONTEXT_NAMES`).
    pub context: Option<u8>,
    /// A struct array searched for partition entries.
    pub entries: bool,
    /// Rank of a topic-name field (`tables.TOPIC_NAME_FIELDS`).
    pub topic_name: Option<u8>,
    pub topic_id: bool,
    /// An array whose name says it lists partitions.
    pub partition_array: bool,
    /// Rank of a partition-index field (`tables.PARTITION_INDEX_FIELDS`).
    pub partition_index: Option<u8>,
    /// Slot of an int a partition entry's columns read (`tables.VALUE_FIELDS`).
    pub value: Option<u16>,
    pub records: bool,
    /// A struct of a partition entry holding a nested value (ShareFetch's leader).
    pub nested: bool,
    pub acquired: Option<Acquired>,
    /// The response's own error code.
    pub top_error: bool,
    /// A pair-row API's request flag: its transaction commits (true) or aborts.
    pub committed: bool,
    pub group: Option<GroupRole>,
    /// Precedence of a group role among the fields that play it (0 first).
    pub rank: u8,
    pub version: Option<VersionRole>,
    /// Named like a role its type cannot play: the pair is left to the Python decoder.
    pub odd: bool,
}

#[derive(Deserialize)]
pub(crate) struct JFacts {
    #[serde(default)]
    context: Option<u8>,
    #[serde(default)]
    entries: bool,
    #[serde(default)]
    topic_name: Option<u8>,
    #[serde(default)]
    topic_id: bool,
    #[serde(default)]
    partition_array: bool,
    #[serde(default)]
    partition_index: Option<u8>,
    #[serde(default)]
    value: Option<u16>,
    #[serde(default)]
    records: bool,
    #[serde(default)]
    nested: bool,
    #[serde(default)]
    acquired: Option<String>,
    #[serde(default)]
    top_error: bool,
    #[serde(default)]
    committed: bool,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    rank: u8,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    odd: bool,
}

impl Facts {
    pub(crate) fn from_json(j: &JFacts) -> Result<Facts, String> {
        let acquired = match j.acquired.as_deref() {
            None => None,
            Some("array") => Some(Acquired::Array),
            Some("first") => Some(Acquired::First),
            Some("last") => Some(Acquired::Last),
            Some(other) => return Err(format!("unknown acquired role {other:?}")),
        };
        if j.value.is_some_and(|v| usize::from(v) >= MAX_VALUE_SLOTS) {
            return Err(format!("value slot past {MAX_VALUE_SLOTS}"));
        }
        Ok(Facts {
            context: j.context,
            entries: j.entries,
            topic_name: j.topic_name,
            topic_id: j.topic_id,
            partition_array: j.partition_array,
            partition_index: j.partition_index,
            value: j.value,
            records: j.records,
            nested: j.nested,
            acquired,
            top_error: j.top_error,
            committed: j.committed,
            group: j.group.as_deref().map(GroupRole::parse).transpose()?,
            rank: j.rank,
            version: j.version.as_deref().map(VersionRole::parse).transpose()?,
            odd: j.odd,
        })
    }
}

/// What a partitions-table row takes from the API of its pair (`tables.PARTITION_APIS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRole {
    /// Offsets written: base_offset .. base_offset + records - 1.
    Produce,
    /// Offsets delivered: acquired ranges, else data records at or after fetch_offset.
    Fetch,
    /// No offset range.
    Other,
}

/// A context column of the partitions table (`tables.CONTEXT_FIELDS`): the value of its
/// first slot the context holds, if of the column's kind.
#[derive(Debug, Clone, Deserialize)]
pub struct ContextColumn {
    pub column: String,
    pub text: bool,
    pub slots: Vec<u8>,
    /// Which column of the table it fills (from `column`, at load).
    #[serde(skip)]
    pub fills: ContextFills,
}

/// The partitions-table column a context column fills.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ContextFills {
    GroupId,
    MemberId,
    MemberEpoch,
    Acks,
    TransactionalId,
    IsolationLevel,
    /// A column this build has no place for.
    #[default]
    Nothing,
}

impl ContextFills {
    fn of(column: &str) -> Self {
        match column {
            "group_id" => ContextFills::GroupId,
            "member_id" => ContextFills::MemberId,
            "member_epoch" => ContextFills::MemberEpoch,
            "acks" => ContextFills::Acks,
            "transactional_id" => ContextFills::TransactionalId,
            "isolation_level" => ContextFills::IsolationLevel,
            _ => ContextFills::Nothing,
        }
    }
}

/// The most entry columns (`tables.ENTRY_COLUMNS`): a row's entry values are an array of
/// this size. A model with more is refused at load.
pub const MAX_ENTRY_COLUMNS: usize = 16;

/// An entry column (`tables.ENTRY_COLUMNS`): the first int among `slots` (then `nested`)
/// on the first side of `sides` with a non-empty entry.
#[derive(Debug, Clone)]
pub struct EntryColumn {
    pub column: String,
    pub sides: Vec<Direction>,
    pub slots: Vec<u16>,
    pub nested: Option<u16>,
}

#[derive(Deserialize)]
struct JEntryColumn {
    column: String,
    sides: Vec<String>,
    slots: Vec<u16>,
    nested: Option<u16>,
}

#[derive(Deserialize)]
pub(crate) struct JTables {
    partition_apis: HashMap<String, String>,
    #[serde(default)]
    pair_row_apis: Vec<i16>,
    expand_responses: Vec<i16>,
    context: Vec<ContextColumn>,
    group_key_slot: u8,
    entry_columns: Vec<JEntryColumn>,
    entry_error_slot: u16,
    produce_base_column: usize,
    fetch_start_column: usize,
    max_depth: usize,
    group_apis: HashMap<String, String>,
    single_member_keys: Vec<i16>,
    group_ranks: HashMap<String, u8>,
    member_lists: u8,
    fencing_errors: Vec<String>,
    negotiation_texts: NegotiationTexts,
    negotiation_key: Option<i16>,
    request_versions: HashMap<String, Vec<i16>>,
    max_array_items: u64,
    item_budget_factor: u64,
    item_overhead: u64,
}

/// `negotiation_error` of an ApiVersions exchange that tells no ranges.
#[derive(Debug, Clone, Deserialize)]
pub struct NegotiationTexts {
    pub no_response: String,
    pub no_api_keys: String,
}

/// The tables section of the model.
#[derive(Debug, Clone)]
pub struct TablesModel {
    pub partition_apis: SmallKeyMap<i16, PartitionRole>,
    /// APIs whose pair is one row of its own (`tables.PAIR_ROW_APIS`: EndTxn).
    pub pair_row_keys: Vec<i16>,
    pub expand_responses: Vec<i16>,
    pub context: Vec<ContextColumn>,
    pub context_slots: usize,
    pub group_key_slot: usize,
    pub entry_columns: Vec<EntryColumn>,
    pub entry_error_slot: u16,
    pub produce_base_column: usize,
    pub fetch_start_column: usize,
    pub max_depth: usize,
    /// api_key -> group protocol (classic, consumer, share, streams).
    pub group_apis: SmallKeyMap<i16, Arc<str>>,
    pub single_member_keys: Vec<i16>,
    /// How many field names play each group role (its ranks).
    pub group_ranks: HashMap<GroupRole, u8>,
    /// How many member lists there are (`tables.MEMBER_LIST_ORDER`: the rank of each).
    pub member_lists: u8,
    pub fencing_errors: Vec<String>,
    pub negotiation_texts: NegotiationTexts,
    pub negotiation_key: Option<i16>,
    /// api_key -> the request versions the specs know, ascending.
    pub request_versions: SmallKeyMap<i16, Vec<i16>>,
    pub max_array_items: u64,
    /// Bytes of kept records an expanded frame may hold (records.py's item budget).
    pub item_budget: u64,
    pub item_overhead: u64,
}

fn key(text: &str) -> Result<i16, String> {
    text.parse::<i16>()
        .map_err(|_| format!("bad api key {text:?} in the tables section"))
}

fn side(text: &str) -> Result<Direction, String> {
    match text {
        "request" => Ok(Direction::Request),
        "response" => Ok(Direction::Response),
        other => Err(format!("unknown side {other:?}")),
    }
}

impl TablesModel {
    /// `max_decompressed`: the per-frame decompression budget the item budget scales.
    pub(crate) fn from_json(j: JTables, max_decompressed: u64) -> Result<TablesModel, String> {
        let mut partition_apis = SmallKeyMap::default();
        for (k, role) in &j.partition_apis {
            let role = match role.as_str() {
                "produce" => PartitionRole::Produce,
                "fetch" => PartitionRole::Fetch,
                _ => PartitionRole::Other,
            };
            partition_apis.insert(key(k)?, role);
        }
        let mut group_apis = SmallKeyMap::default();
        for (k, protocol) in &j.group_apis {
            group_apis.insert(key(k)?, Arc::from(protocol.as_str()));
        }
        let mut request_versions = SmallKeyMap::default();
        for (k, versions) in &j.request_versions {
            let mut versions = versions.clone();
            versions.sort_unstable();
            request_versions.insert(key(k)?, versions);
        }
        let mut group_ranks = HashMap::new();
        for (role, n) in &j.group_ranks {
            group_ranks.insert(GroupRole::parse(role)?, *n);
        }
        let entry_columns = j
            .entry_columns
            .into_iter()
            .map(|c| {
                Ok(EntryColumn {
                    sides: c
                        .sides
                        .iter()
                        .map(|s| side(s))
                        .collect::<Result<_, String>>()?,
                    column: c.column,
                    slots: c.slots,
                    nested: c.nested,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let context_slots = j
            .context
            .iter()
            .flat_map(|c| c.slots.iter().map(|&s| usize::from(s) + 1))
            .max()
            .unwrap_or(0)
            .max(usize::from(j.group_key_slot) + 1);
        if j.produce_base_column >= entry_columns.len()
            || j.fetch_start_column >= entry_columns.len()
        {
            return Err("tables: offset-range column out of range".to_owned());
        }
        if context_slots > MAX_CONTEXT_SLOTS {
            return Err(format!(
                "tables: more than {MAX_CONTEXT_SLOTS} context slots"
            ));
        }
        if entry_columns.len() > MAX_ENTRY_COLUMNS {
            return Err(format!(
                "tables: more than {MAX_ENTRY_COLUMNS} entry columns"
            ));
        }
        let slots = entry_columns
            .iter()
            .flat_map(|c| c.slots.iter().copied().chain(c.nested))
            .chain([j.entry_error_slot]);
        if slots.map(usize::from).any(|s| s >= MAX_VALUE_SLOTS) {
            return Err(format!("tables: a value slot past {MAX_VALUE_SLOTS}"));
        }
        let mut context = j.context;
        for c in &mut context {
            c.fills = ContextFills::of(&c.column);
        }
        Ok(TablesModel {
            partition_apis,
            pair_row_keys: j.pair_row_apis,
            expand_responses: j.expand_responses,
            context,
            context_slots,
            group_key_slot: usize::from(j.group_key_slot),
            entry_columns,
            entry_error_slot: j.entry_error_slot,
            produce_base_column: j.produce_base_column,
            fetch_start_column: j.fetch_start_column,
            max_depth: j.max_depth,
            group_apis,
            single_member_keys: j.single_member_keys,
            group_ranks,
            member_lists: j.member_lists,
            fencing_errors: j.fencing_errors,
            negotiation_texts: j.negotiation_texts,
            negotiation_key: j.negotiation_key,
            request_versions,
            max_array_items: j.max_array_items,
            item_budget: j.item_budget_factor.saturating_mul(max_decompressed),
            item_overhead: j.item_overhead,
        })
    }
}
