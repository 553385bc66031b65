//! Indexes over the visible rows of a table: for each declared list of
//! fields, the rows sorted by those fields' values (one order, `value.rs`),
//! ties by rowId then space. Kept entry by entry as rows change, so a
//! query reads what it returns, not the table.

use std::borrow::Borrow;

use super::entries::{Builder, Entries};
use super::{field, sortkey};
use crate::protocol::{Row, RowKey, Value};
use crate::replica::Found;

pub use crate::index_def::IndexDef;

/// One kept index.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Its fields.
    pub fields: Vec<String>,
    /// Its entries, in order: the [`sortkey`] bytes of the index's values,
    /// then of the row (its tie-break).
    pub entries: Entries,
}

impl Index {
    /// Appends the entry of a visible row (none for a deleted one): its
    /// values, then its row. Says whether there is one.
    fn entry(&self, out: &mut Vec<u8>, key: &RowKey, row: Option<&Row>) -> bool {
        self.entry_of(out, (&key.row_id, &key.space), row)
    }

    fn entry_of(&self, out: &mut Vec<u8>, key: (&str, &str), row: Option<&Row>) -> bool {
        Self::entry_in(&self.fields, out, key, row)
    }

    /// [`Index::entry`] of an index of `fields` (the one spelling of an
    /// entry, in memory and on disk).
    pub(crate) fn entry_for(fields: &[String], out: &mut Vec<u8>, key: &RowKey, row: Option<&Row>) -> bool {
        Self::entry_in(fields, out, (&key.row_id, &key.space), row)
    }

    fn entry_in(fields: &[String], out: &mut Vec<u8>, (row_id, space): (&str, &str), row: Option<&Row>) -> bool {
        let Some(row) = row.filter(|r| !r.is_deleted()) else { return false };
        for f in fields {
            sortkey::value(out, field(row, f));
        }
        sortkey::row(out, row_id, space);
        true
    }

    /// [`Index::entry_of`] of a row still encoded: only its indexed values are read.
    fn entry_packed(out: &mut Vec<u8>, (row_id, space): (&str, &str), bytes: &[u8], names: &[&str], values: &mut Vec<Value>) -> bool {
        match crate::chunks::project(bytes, names, values) {
            Ok(false) => {
                for v in values.iter() {
                    sortkey::value(out, v);
                }
                sortkey::row(out, row_id, space);
                true
            }
            // A deleted row has no entry.
            Ok(true) => false,
            Err(e) => {
                debug_assert!(false, "a packed row was checked when it was packed: {e}");
                false
            }
        }
    }

    /// A row changed from `old` to `new` (as the app sees them).
    fn put(&mut self, key: &RowKey, old: Option<&Row>, new: Option<&Row>) {
        let (mut was, mut is) = (Vec::new(), Vec::new());
        let had = self.entry(&mut was, key, old);
        let has = self.entry(&mut is, key, new);
        if had && has && was == is {
            return;
        }
        if had {
            self.entries.remove(&was);
        }
        if has {
            self.entries.insert(&is);
        }
    }

    /// The row an entry names, in `table`.
    pub fn row_of(&self, table: &str, entry: &[u8]) -> Option<RowKey> {
        sortkey::row_of(entry, self.fields.len()).map(|(id, space)| RowKey::in_space(space, table, id))
    }
}

/// Every kept index, by table.
#[derive(Debug, Clone, Default)]
pub struct Indexes {
    tables: litemap::LiteMap<String, Vec<Index>>,
}

impl Indexes {
    /// Empty indexes for these definitions (duplicates kept once).
    pub fn new(defs: impl IntoIterator<Item = IndexDef>) -> Self {
        let mut tables: litemap::LiteMap<String, Vec<Index>> = litemap::LiteMap::new();
        // Sorted and distinct, kept by insertion (few definitions; a set is
        // a tree's code in the wasm for nothing).
        let mut unique: Vec<IndexDef> = Vec::new();
        for d in defs {
            if let Err(at) = unique.binary_search(&d) {
                unique.insert(at, d);
            }
        }
        for d in unique {
            if d.fields.is_empty() {
                continue;
            }
            tables.entry(d.table).or_default().push(Index { fields: d.fields, ..Index::default() });
        }
        Indexes { tables }
    }

    /// The definitions kept.
    pub fn defs(&self) -> Vec<IndexDef> {
        self.tables.iter().flat_map(|(t, ix)| ix.iter().map(|i| IndexDef { table: t.clone(), fields: i.fields.clone() })).collect()
    }

    /// Whether `table` has an index.
    pub fn covers(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    /// The indexes of a table.
    pub fn of(&self, table: &str) -> &[Index] {
        self.tables.get(table).map_or(&[], Vec::as_slice)
    }

    /// Fills the (empty) indexes of `table` from every one of its rows, in
    /// one walk of them: each row is read (and spelled for the app) once,
    /// however many indexes the table has.
    pub fn fill<K: Borrow<RowKey>, R: Borrow<Row>>(&mut self, table: &str, rows: impl Iterator<Item = (K, R)>) {
        self.fill_by(table, rows, |i, _, out, (key, row), _| i.entry(out, key.borrow(), Some(row.borrow())));
    }

    /// [`Indexes::fill`] from rows as the replica keeps them, keys borrowed
    /// and packed rows read for their indexed values alone — for a table
    /// whose rows the app sees as stored (no field renamed for it). At 1M
    /// rows this is what the first query after opening waits for.
    pub fn fill_raw<'r>(&mut self, table: &str, rows: impl Iterator<Item = ((&'r str, &'r str), Found<'r>)>) {
        self.fill_by(table, rows, |i, names, out, (key, row), values| match row {
            Found::Packed(bytes) => Index::entry_packed(out, *key, bytes, names, values),
            Found::Fresh(row) => i.entry_of(out, *key, Some(row)),
        });
    }

    /// Fills the (empty) indexes of `table` from `rows`, `entry` appending
    /// a row's entry in an index (given its field names and a buffer of
    /// values) and saying whether it has one. Each index's entries are
    /// gathered, sorted and packed as they come (an insert per row would
    /// cost a search per row).
    fn fill_by<T>(
        &mut self,
        table: &str,
        rows: impl Iterator<Item = T>,
        entry: impl Fn(&Index, &[&str], &mut Vec<u8>, &T, &mut Vec<Value>) -> bool,
    ) {
        let Some(ix) = self.tables.get_mut(table) else { return };
        let mut built: Vec<Builder> = ix.iter().map(|_| Builder::default()).collect();
        let mut values = Vec::new();
        let names: Vec<Vec<&str>> = ix.iter().map(|i| i.fields.iter().map(String::as_str).collect()).collect();
        for row in rows {
            for ((i, b), names) in ix.iter().zip(&mut built).zip(&names) {
                if entry(i, names, &mut b.bytes, &row, &mut values) {
                    b.ended();
                }
            }
        }
        for (i, b) in ix.iter_mut().zip(built) {
            i.entries = b.finish();
        }
    }

    /// A row's visible state (as the app sees it) changed from `old` to
    /// `new`: `None` or a tombstone is no row.
    pub fn put(&mut self, key: &RowKey, old: Option<&Row>, new: Option<&Row>) {
        if let Some(ix) = self.tables.get_mut(&key.table) {
            for i in ix {
                i.put(key, old, new);
            }
        }
    }
}
