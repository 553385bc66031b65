//! What an index is (a table and its fields, as the app names them), and
//! what a store keeps of indexes (PROTOCOL §7, "Indexes on disk"): which
//! ones, their entries, a read of them. Data alone, below every module that
//! reads or writes them: how an entry is spelled is `query`'s, how a store
//! keeps them is each store's.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// An index to keep: a table and its fields, as the app names them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexDef {
    /// The table.
    pub table: String,
    /// Its fields, the first sorting first.
    pub fields: Vec<String>,
}

impl IndexDef {
    /// The index's name on disk: its table and fields, each with its
    /// length first (names may hold any character).
    pub fn id(&self) -> String {
        let mut out = String::new();
        for part in std::iter::once(&self.table).chain(&self.fields) {
            out += &format!("{}:{part}", part.len());
        }
        out
    }
}

/// Which indexes the entries on disk are of, and the schema version the
/// app names their fields in. Stored and told to other contexts as one
/// string ([`EntriesFor::spell`]): a derived encoding weighs kilobytes of wasm.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntriesFor {
    /// The definitions, sorted, each once.
    pub defs: Vec<IndexDef>,
    /// The schema version the app reads in.
    pub app_schema: u32,
    /// Spelled with the schema's defaults shown in rows that lack the field
    /// (PROTOCOL §3b): entries kept before they were are built again.
    pub defaults_shown: bool,
}

/// Takes `<length>:<that many bytes>` off the front of `s`.
fn take_part(s: &str) -> Option<(&str, &str)> {
    let (len, rest) = s.split_once(':')?;
    let len: usize = len.parse().ok()?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

impl IndexDef {
    /// The definition an [`IndexDef::id`] names.
    pub fn from_id(id: &str) -> Option<IndexDef> {
        let (table, mut rest) = take_part(id)?;
        let mut fields = Vec::new();
        while !rest.is_empty() {
            let (f, r) = take_part(rest)?;
            fields.push(f.to_owned());
            rest = r;
        }
        Some(IndexDef { table: table.to_owned(), fields })
    }
}

impl EntriesFor {
    /// The record: the app's schema version, then each definition's
    /// [`IndexDef::id`] with its length first.
    pub fn spell(&self) -> String {
        let shown = if self.defaults_shown { "+" } else { "" };
        let mut out = format!("{shown}{}:", self.app_schema);
        for d in &self.defs {
            let id = d.id();
            out += &format!("{}:{id}", id.len());
        }
        out
    }

    /// Reads [`EntriesFor::spell`] back.
    pub fn read(s: &str) -> Option<EntriesFor> {
        let (defaults_shown, s) = match s.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (app, mut rest) = s.split_once(':')?;
        let mut defs = Vec::new();
        while !rest.is_empty() {
            let (id, r) = take_part(rest)?;
            defs.push(IndexDef::from_id(id)?);
            rest = r;
        }
        Some(EntriesFor { defs, app_schema: app.parse().ok()?, defaults_shown })
    }

    /// The definitions of `table`, as indexes to spell entries with.
    pub fn of<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a IndexDef> + 'a {
        self.defs.iter().filter(move |d| d.table == table)
    }

    /// Whether an index of `table` is kept.
    pub fn covers(&self, table: &str) -> bool {
        self.of(table).next().is_some()
    }
}

impl Serialize for EntriesFor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spell())
    }
}

impl<'de> Deserialize<'de> for EntriesFor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        EntriesFor::read(&s).ok_or_else(|| serde::de::Error::custom("not a list of indexes"))
    }
}

/// Index entries as a store in memory keeps them: by index ([`IndexDef::id`]).
pub type Entries = BTreeMap<String, BTreeSet<Vec<u8>>>;

/// A read of one index's entries: from `from` (inclusive) to `to`
/// (exclusive; `None`: to the index's end), in order or from the end, at
/// most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRange {
    /// The index ([`IndexDef::id`]).
    pub index: String,
    /// The least entry read.
    pub from: Vec<u8>,
    /// Where the read ends, that entry not included.
    pub to: Option<Vec<u8>>,
    /// From the end of the range.
    pub reverse: bool,
    /// At most this many.
    pub limit: usize,
}

impl EntryRange {
    /// The entries of the range in `entries` (a store in memory).
    pub fn read(&self, entries: &Entries) -> Vec<Vec<u8>> {
        let Some(set) = entries.get(&self.index) else { return Vec::new() };
        let upper = match &self.to {
            Some(to) if *to <= self.from => return Vec::new(),
            Some(to) => std::ops::Bound::Excluded(to.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let range = set.range((std::ops::Bound::Included(self.from.clone()), upper));
        if self.reverse {
            range.rev().take(self.limit).cloned().collect()
        } else {
            range.take(self.limit).cloned().collect()
        }
    }
}

/// Applies `changes` to `entries`, in order.
pub fn apply(entries: &mut Entries, changes: &[EntryChange]) {
    for c in changes {
        let set = entries.entry(c.index.clone()).or_default();
        if c.put {
            set.insert(c.entry.clone());
        } else {
            set.remove(&c.entry);
        }
    }
}

/// One change to an index's entries on disk, applied in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryChange {
    /// The index ([`IndexDef::id`]).
    pub index: String,
    /// The entry's [`super::sortkey`] bytes.
    pub entry: Vec<u8>,
    /// Put (`true`) or taken out.
    pub put: bool,
}
