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
use std::collections::BTreeSet;

use super::index::{Index, IndexDef};
use crate::index_def::{Entries, EntriesFor, EntryChange};
use crate::protocol::{Row, RowKey};
use crate::schema::Schema;

impl EntriesFor {
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
            defaults_shown: true,
        };
        assert_eq!(EntriesFor::read(&kept.spell()), Some(kept.clone()));
        let before = EntriesFor { defaults_shown: false, ..kept.clone() };
        assert_eq!(EntriesFor::read(&before.spell()), Some(before.clone()), "as kept before defaults were shown");
        assert_ne!(EntriesFor::read(&before.spell()), Some(kept.clone()), "built again");
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
