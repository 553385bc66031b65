//! Indexes over the visible rows of a table: for each declared list of
//! fields, the rows sorted by those fields' values (one order, `value.rs`),
//! ties by rowId then space. Kept entry by entry as rows change, so a
//! query reads what it returns, not the table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use super::field;
use super::value::{cmp_text, Key};
use crate::protocol::{Row, RowKey};

/// An index to keep: a table and its fields, as the app names them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexDef {
    /// The table.
    pub table: String,
    /// Its fields, the first sorting first.
    pub fields: Vec<String>,
}

/// A row's place in the tie-break order, or an end of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tie {
    /// Below every row.
    Bottom,
    /// A row: its id and space.
    Row(String, String),
    /// Above every row.
    Top,
}

impl Ord for Tie {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering::*;
        match (self, other) {
            (Tie::Row(a, s), Tie::Row(b, t)) => cmp_text(a, b).then_with(|| cmp_text(s, t)),
            (Tie::Bottom, Tie::Bottom) | (Tie::Top, Tie::Top) => Equal,
            (Tie::Bottom, _) | (_, Tie::Top) => Less,
            (Tie::Top, _) | (_, Tie::Bottom) => Greater,
        }
    }
}

impl PartialOrd for Tie {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One entry: the values of the index's fields, then the row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// The values (or ends, in a bound), shared with the row's record of them.
    pub values: Rc<[Key]>,
    /// The row (or an end, in a bound).
    pub tie: Tie,
}

impl Entry {
    /// The row's key in `table`, `None` for a bound.
    pub fn key(&self, table: &str) -> Option<RowKey> {
        match &self.tie {
            Tie::Row(id, space) => Some(RowKey::in_space(space.clone(), table, id.clone())),
            _ => None,
        }
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
    of_row: HashMap<(String, String), Rc<[Key]>>,
}

impl Index {
    fn values(&self, row: Option<&Row>) -> Option<Rc<[Key]>> {
        row.filter(|r| !r.is_deleted()).map(|r| self.fields.iter().map(|f| Key::Val(field(r, f).clone())).collect())
    }

    fn put(&mut self, key: &RowKey, row: Option<&Row>) {
        let id = (key.row_id.clone(), key.space.clone());
        let tie = Tie::Row(key.row_id.clone(), key.space.clone());
        let new = self.values(row);
        match (self.of_row.get(&id), &new) {
            (Some(old), Some(new)) if old == new => return,
            (Some(_), _) => {
                if let Some(old) = self.of_row.remove(&id) {
                    self.entries.remove(&Entry { values: old, tie: tie.clone() });
                }
            }
            (None, _) => {}
        }
        if let Some(values) = new {
            self.entries.insert(Entry { values: values.clone(), tie });
            self.of_row.insert(id, values);
        }
    }

    /// Fills an empty index at once: entries sorted first, then built in
    /// one pass (an insert per row costs a search per row).
    fn fill<'r>(&mut self, rows: impl Iterator<Item = (&'r RowKey, &'r Row)>) {
        let mut entries = Vec::new();
        for (key, row) in rows {
            if let Some(values) = self.values(Some(row)) {
                self.of_row.insert((key.row_id.clone(), key.space.clone()), values.clone());
                entries.push(Entry { values, tie: Tie::Row(key.row_id.clone(), key.space.clone()) });
            }
        }
        entries.sort_unstable();
        self.entries = entries.into_iter().collect();
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

    /// Fills the (empty) indexes of `table` from every one of its rows.
    pub fn fill<'r>(&mut self, table: &str, rows: &[(&'r RowKey, std::borrow::Cow<'r, Row>)]) {
        if let Some(ix) = self.tables.get_mut(table) {
            for i in ix {
                i.fill(rows.iter().map(|(k, r)| (*k, r.as_ref())));
            }
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
