//! Indexes over the visible rows of a table: for each declared list of
//! fields, the rows sorted by those fields' values (one order, `value.rs`),
//! ties by rowId then space. Kept entry by entry as rows change, so a
//! query reads what it returns, not the table.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::rc::Rc;

use super::{field, sortkey};
use crate::protocol::{Row, RowKey};

/// An index to keep: a table and its fields, as the app names them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexDef {
    /// The table.
    pub table: String,
    /// Its fields, the first sorting first.
    pub fields: Vec<String>,
}

/// An index entry: the [`sortkey`] bytes of the index's values, then of
/// the row (its tie-break), shared by the ordered set and the row's lookup.
pub type Entry = Rc<[u8]>;

/// A row's entry, found by its row: hashed and compared by the entry's tie
/// (the bytes after the values), so the lookup holds no copy of the row's
/// id — only a second pointer to the one entry.
#[derive(Debug, Clone)]
struct ByRow {
    entry: Entry,
    /// Where the tie starts in `entry`.
    tie: u32,
}

impl ByRow {
    fn tie(&self) -> &[u8] {
        self.entry.get(self.tie as usize..).unwrap_or_default()
    }
}

impl PartialEq for ByRow {
    fn eq(&self, other: &Self) -> bool {
        self.tie() == other.tie()
    }
}

impl Eq for ByRow {}

impl std::hash::Hash for ByRow {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.tie().hash(h);
    }
}

impl std::borrow::Borrow<[u8]> for ByRow {
    fn borrow(&self) -> &[u8] {
        self.tie()
    }
}

/// One kept index.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Its fields.
    pub fields: Vec<String>,
    /// Its entries, in order.
    pub entries: BTreeSet<Entry>,
    /// Each indexed row's entry, to take it out when the row changes.
    of_row: HashSet<ByRow>,
}

impl Index {
    /// The entry of a visible row (none for a deleted one): its values, then its row.
    fn entry(&self, key: &RowKey, row: Option<&Row>) -> Option<ByRow> {
        let row = row.filter(|r| !r.is_deleted())?;
        let mut bytes = Vec::with_capacity(16 * self.fields.len() + key.row_id.len() + key.space.len() + 5);
        for f in &self.fields {
            sortkey::value(&mut bytes, field(row, f));
        }
        let tie = u32::try_from(bytes.len()).ok()?;
        sortkey::row(&mut bytes, &key.row_id, &key.space);
        Some(ByRow { entry: bytes.into(), tie })
    }

    fn put(&mut self, key: &RowKey, row: Option<&Row>) {
        let new = self.entry(key, row);
        let mut tie = Vec::with_capacity(key.row_id.len() + key.space.len() + 5);
        sortkey::row(&mut tie, &key.row_id, &key.space);
        match (self.of_row.get(tie.as_slice()), &new) {
            (Some(old), Some(new)) if old.entry == new.entry => return,
            (Some(_), _) => {
                if let Some(old) = self.of_row.take(tie.as_slice()) {
                    self.entries.remove(&old.entry);
                }
            }
            (None, _) => {}
        }
        if let Some(new) = new {
            self.entries.insert(new.entry.clone());
            self.of_row.insert(new);
        }
    }

    /// Takes a row into an index being filled: its entry goes to `pending`
    /// (sorted and built in one pass by [`Index::finish`]; an insert per row
    /// costs a search per row).
    fn gather(&mut self, key: &RowKey, row: &Row, pending: &mut Vec<Entry>) {
        if let Some(e) = self.entry(key, Some(row)) {
            pending.push(e.entry.clone());
            self.of_row.insert(e);
        }
    }

    fn finish(&mut self, mut pending: Vec<Entry>) {
        pending.sort_unstable();
        self.entries = pending.into_iter().collect();
    }

    /// The row an entry names, in `table`.
    pub fn row_of(&self, table: &str, entry: &[u8]) -> Option<RowKey> {
        sortkey::row_of(entry, self.fields.len()).map(|(id, space)| RowKey::in_space(space, table, id))
    }
}

/// Every kept index, by table.
#[derive(Debug, Clone, Default)]
pub struct Indexes {
    tables: BTreeMap<String, Vec<Index>>,
}

impl Indexes {
    /// Empty indexes for these definitions (duplicates kept once).
    pub fn new(defs: impl IntoIterator<Item = IndexDef>) -> Self {
        let mut tables: BTreeMap<String, Vec<Index>> = BTreeMap::new();
        for d in defs.into_iter().collect::<BTreeSet<_>>() {
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
        let Some(ix) = self.tables.get_mut(table) else { return };
        let mut pending: Vec<Vec<Entry>> = vec![Vec::new(); ix.len()];
        for (key, row) in rows {
            for (i, p) in ix.iter_mut().zip(&mut pending) {
                i.gather(key.borrow(), row.borrow(), p);
            }
        }
        for (i, p) in ix.iter_mut().zip(pending) {
            i.finish(p);
        }
    }

    /// A row's visible state (as the app sees it) changed: `None` or a
    /// tombstone takes it out.
    pub fn put(&mut self, key: &RowKey, row: Option<&Row>) {
        if let Some(ix) = self.tables.get_mut(&key.table) {
            for i in ix {
                i.put(key, row);
            }
        }
    }
}
