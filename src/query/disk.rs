//! Indexes kept on disk (PROTOCOL §7, "Indexes on disk"): the entries of
//! every declared index over the **base rows** (the rows as the server
//! last confirmed them), kept by the store itself in the transaction that
//! writes the rows — so a context that holds no row (a lazy store) can
//! find rows by their values, and a crash leaves rows and entries together.
//!
//! Why the store spells them, and why of base rows: only the store knows,
//! inside its transaction, what a row was before the step (every context
//! of a device writes to it; a context's memory may lag another's step by
//! a broadcast). Queued ops stay out: every context holds the whole
//! outbox in memory, so a query lays the rows with queued ops over what
//! the entries find — the same split as base and pending everywhere else.
//!
//! What is kept is named by [`EntriesFor`]: the definitions and the
//! schema version the app spells fields in. The rest comes from the store
//! (its known schema): a step that changes either builds them all again.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::index::{Index, IndexDef};
use crate::protocol::{Row, RowKey};
use crate::schema::Schema;

/// Which indexes the entries on disk are of, and the schema version the
/// app names their fields in. Stored and told to other contexts as one
/// string ([`EntriesFor::spell`]): a derived encoding weighs kilobytes of wasm.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntriesFor {
    /// The definitions, sorted, each once.
    pub defs: Vec<IndexDef>,
    /// The schema version the app reads in.
    pub app_schema: u32,
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
        let mut out = format!("{}:", self.app_schema);
        for d in &self.defs {
            let id = d.id();
            out += &format!("{}:{id}", id.len());
        }
        out
    }

    /// Reads [`EntriesFor::spell`] back.
    pub fn read(s: &str) -> Option<EntriesFor> {
        let (app, mut rest) = s.split_once(':')?;
        let mut defs = Vec::new();
        while !rest.is_empty() {
            let (id, r) = take_part(rest)?;
            defs.push(IndexDef::from_id(id)?);
            rest = r;
        }
        Some(EntriesFor { defs, app_schema: app.parse().ok()? })
    }

    /// The definitions of `table`, as indexes to spell entries with.
    pub fn of<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a IndexDef> + 'a {
        self.defs.iter().filter(move |d| d.table == table)
    }

    /// Whether an index of `table` is kept.
    pub fn covers(&self, table: &str) -> bool {
        self.of(table).next().is_some()
    }

    /// A base row as the app spells it: the entries are of the fields the
    /// app names (`schema`: the store's known schema, if any).
    fn spelled<'r>(&self, schema: Option<&Schema>, table: &str, row: &'r Row) -> Cow<'r, Row> {
        match schema {
            Some(s) => s.row_at(self.app_schema, table, row),
            None => Cow::Borrowed(row),
        }
    }

    /// What a base row going from `old` to `new` changes in the entries.
    pub fn changes(&self, schema: Option<&Schema>, key: &RowKey, old: Option<&Row>, new: Option<&Row>, out: &mut Vec<EntryChange>) {
        if !self.covers(&key.table) {
            return;
        }
        let old = old.map(|r| self.spelled(schema, &key.table, r));
        let new = new.map(|r| self.spelled(schema, &key.table, r));
        diff(self.of(&key.table), key, old.as_deref(), new.as_deref(), out);
    }

    /// Each entry of one base row: `f` gets the index's place in
    /// [`EntriesFor::defs`] and the entry.
    pub fn each_entry(&self, schema: Option<&Schema>, key: &RowKey, row: &Row, mut f: impl FnMut(usize, Vec<u8>)) {
        if !self.covers(&key.table) {
            return;
        }
        let row = self.spelled(schema, &key.table, row);
        for (i, def) in self.defs.iter().enumerate() {
            if def.table == key.table {
                if let Some(e) = entry(def, key, Some(&row)) {
                    f(i, e);
                }
            }
        }
    }

    /// Every entry of `rows` (the base rows, in any order), by index.
    pub fn build<'a>(&self, schema: Option<&Schema>, rows: impl Iterator<Item = (&'a RowKey, &'a Row)>) -> Entries {
        let ids: Vec<String> = self.defs.iter().map(IndexDef::id).collect();
        let mut sets: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); ids.len()];
        for (key, row) in rows {
            self.each_entry(schema, key, row, |i, e| {
                sets[i].insert(e);
            });
        }
        ids.into_iter().zip(sets).collect()
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

/// The entry of a row (none for a deleted one or no row) in `def`.
pub fn entry(def: &IndexDef, key: &RowKey, row: Option<&Row>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    Index::entry_for(&def.fields, &mut out, key, row).then_some(out)
}

/// What a row going from `old` to `new` (as the app sees them) changes in
/// the entries of `defs`: each changed entry taken out, then put.
pub fn diff<'a>(defs: impl Iterator<Item = &'a IndexDef>, key: &RowKey, old: Option<&Row>, new: Option<&Row>, out: &mut Vec<EntryChange>) {
    for def in defs {
        let (was, is) = (entry(def, key, old), entry(def, key, new));
        if was == is {
            continue;
        }
        let index = def.id();
        if let Some(e) = was {
            out.push(EntryChange { index: index.clone(), entry: e, put: false });
        }
        if let Some(e) = is {
            out.push(EntryChange { index, entry: e, put: true });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Cell, Mark, Value};

    fn row(exercise: &str) -> Row {
        let mut r = Row::default();
        r.cells.insert("exercise".into(), Cell { value: Value::from(exercise), mark: Mark { at: 1, op_id: "d:1".into() } });
        r
    }

    #[test]
    fn a_changed_value_moves_its_entry_and_an_unchanged_one_writes_nothing() {
        let def = IndexDef { table: "sets".into(), fields: vec!["exercise".into()] };
        let key = RowKey::new("sets", "r1");
        let mut out = Vec::new();
        diff([&def].into_iter(), &key, Some(&row("squat")), Some(&row("squat")), &mut out);
        assert!(out.is_empty());
        diff([&def].into_iter(), &key, Some(&row("squat")), Some(&row("bench")), &mut out);
        assert_eq!(out.iter().map(|c| c.put).collect::<Vec<_>>(), [false, true]);
        assert_eq!(out[1].entry, entry(&def, &key, Some(&row("bench"))).unwrap());
        out.clear();
        diff([&def].into_iter(), &key, None, Some(&row("bench")), &mut out);
        assert_eq!(out.len(), 1, "a new row puts one entry");
    }

    #[test]
    fn what_is_kept_reads_back_as_spelled() {
        let kept = EntriesFor {
            defs: vec![
                IndexDef { table: "sets".into(), fields: vec!["exercise".into(), "at".into()] },
                IndexDef { table: "a:b".into(), fields: vec!["é:1".into(), String::new()] },
            ],
            app_schema: 3,
        };
        assert_eq!(EntriesFor::read(&kept.spell()), Some(kept.clone()));
        let json = serde_json::to_string(&kept).unwrap();
        assert_eq!(serde_json::from_str::<EntriesFor>(&json).unwrap(), kept);
        assert_eq!(EntriesFor::read("3:9:5:sets"), None, "a length past the end");
        assert_eq!(EntriesFor::read("x:"), None);
    }

    #[test]
    fn index_names_on_disk_never_collide() {
        let a = IndexDef { table: "a".into(), fields: vec!["b:c".into()] };
        let b = IndexDef { table: "a".into(), fields: vec!["b".into(), "c".into()] };
        assert_ne!(a.id(), b.id());
    }
}
