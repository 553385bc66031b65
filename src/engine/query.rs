//! Queries of the visible rows, the indexes that serve them, and what
//! changed for live queries (PROTOCOL §7, "Queries").
//!
//! Indexes are kept over the rows as the app sees them (its schema
//! version's names, tombstones out): declared by the server's schema
//! (`"indexes"` of a table, its newest names) and by the app at open
//! ([`super::Config::indexes`]). They follow the replica through the keys it marks
//! touched; a new schema, or rows hidden or shown again, rebuilds them.

use std::borrow::Cow;

use super::Engine;
use crate::index_def::EntriesFor;
use crate::names::Names;
use crate::protocol::{Row, RowKey};
use crate::query::{self, Explain, IndexDef, Indexes, Query, Source};
use crate::store::Want;

/// What the device's queries read, kept by the engine.
#[derive(Debug, Clone, Default)]
pub struct View {
    indexes: Indexes,
    /// What the indexes were built for (their definitions, the schema, hidden or not).
    built: Option<Built>,
    changes: Changes,
    /// Over a lazy store: tables with an index not filled yet, their rows
    /// not all read (filled at the first query, once they are).
    unfilled: Names,
    /// The indexes whose entries the store keeps (PROTOCOL §7, "Indexes on disk").
    disk: Option<EntriesFor>,
}

/// Which tables' visible rows changed since the last [`Engine::take_changes`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// The tables a row of which may have changed.
    pub tables: Names,
    /// Anything may have changed (a schema, rows hidden or shown, a reopen).
    pub all: bool,
    /// Per changed table, its changed rows as queries see them now
    /// (`None`: gone), while they are few and all held; `None` when not
    /// (a pull's page, rows not held): a live query is then read again.
    pub rows: litemap::LiteMap<String, Option<ChangedRows>>,
}

/// Changed rows as queries see them now (`None`: gone).
pub type ChangedRows = Vec<(RowKey, Option<Row>)>;

/// The most changed rows of a table a live query is updated from (more: it
/// is read again, which costs what its page costs, not what changed).
const ROWS_TOLD: usize = 64;

impl Changes {
    /// Whether a query of `table` may see a change.
    pub fn touches(&self, table: &str) -> bool {
        self.all || self.tables.contains(table)
    }

    /// The changed rows of `table`, if all are known (see [`Changes::rows`]).
    pub fn rows_of(&self, table: &str) -> Option<&[(RowKey, Option<Row>)]> {
        if self.all {
            return None;
        }
        self.rows.get(table).and_then(|r| r.as_deref())
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.tables.is_empty()
    }
}

/// What the indexes were built for: the schema (its version, `ETag`, length) and whether rows were hidden.
type Built = (Option<(u32, Option<String>, usize)>, bool);

struct Visible<'e>(&'e Engine);

impl Source for Visible<'_> {
    fn get(&self, key: &RowKey) -> Option<Cow<'_, Row>> {
        let e = self.0;
        e.replica.visible(key).map(|r| e.app_cow(&key.table, r))
    }

    fn scan(&self, table: &str, f: &mut dyn FnMut(&RowKey, &Row)) {
        let e = self.0;
        for (k, r) in e.replica.table(table) {
            f(&k, &e.app_cow(table, r));
        }
    }
}

impl Engine {
    /// The indexes the device keeps: the app's, then the schema's (in the
    /// app's names for the fields it knows).
    pub fn index_defs(&self) -> Vec<IndexDef> {
        let mut defs: Vec<IndexDef> = self.config.indexes.clone();
        if let Some((_, schema)) = &self.schema {
            for (table, rules) in &schema.tables {
                let names = schema.names_at(self.config.schema, table);
                for fields in &rules.indexes {
                    let fields = fields.iter().map(|f| names.get(f).unwrap_or(f).clone()).collect();
                    defs.push(IndexDef { table: table.clone(), fields });
                }
            }
        }
        defs
    }

    /// Brings the indexes up to the replica, and notes what changed.
    fn settle(&mut self) {
        let touched = self.replica.take_touched();
        let hidden = self.hides_rows();
        // Compared without a copy: this runs after every step and before every query.
        let same = self.view.built.as_ref().is_some_and(|(schema, h)| {
            *h == hidden
                && match (schema, &self.schema) {
                    (None, None) => true,
                    (Some((v, etag, len)), Some((k, s))) => *v == s.version && *etag == k.etag && *len == k.text.len(),
                    _ => false,
                }
        });
        if !same {
            let for_what: Built = (self.schema.as_ref().map(|(k, s)| (s.version, k.etag.clone(), k.text.len())), hidden);
            let defs = self.index_defs();
            let mut indexes = Indexes::new(defs);
            let tables: Names = indexes.defs().into_iter().map(|d| d.table).collect();
            self.view.unfilled.clear();
            if !self.hides_rows() {
                for table in &tables {
                    if self.replica.missing(vec![Want::table(table)]).is_empty() {
                        self.fill(&mut indexes, table);
                    } else {
                        self.view.unfilled.insert(table);
                    }
                }
            }
            self.view.indexes = indexes;
            self.keep_was_of_filled();
            self.view.built = Some(for_what);
            self.view.changes.all = true;
            return;
        }
        for (key, was) in touched {
            if self.view.indexes.covers(&key.table) && !self.view.unfilled.contains(&key.table) {
                let old = was.as_ref().map(|r| self.app_cow(&key.table, Cow::Borrowed(r)));
                let new = self.replica.visible(&key).map(|r| self.app_cow(&key.table, r));
                self.view.indexes.put(&key, old.as_deref(), new.as_deref());
            }
            // As queries see it now, if held (a lazy store's row not held is not known).
            let now = self
                .replica
                .missing(vec![Want::row(&key)])
                .is_empty()
                .then(|| self.replica.visible(&key).map(|r| self.app_cow(&key.table, r).into_owned()));
            let told = self.view.changes.rows.entry(key.table.clone()).or_insert_with(|| Some(Vec::new()));
            match (told.as_mut(), now) {
                (Some(rows), Some(now)) if rows.len() < ROWS_TOLD || rows.iter().any(|(k, _)| *k == key) => {
                    rows.retain(|(k, _)| *k != key);
                    rows.push((key.clone(), now.filter(|r| !r.is_deleted())));
                }
                _ => *told = None,
            }
            self.view.changes.tables.insert(&key.table);
        }
    }

    /// Fills `table`'s indexes from the visible rows; over a lazy store the
    /// table is kept whole from now on (an index holds every row of it, so
    /// a row it changes must be held to take its old entry out).
    fn fill(&mut self, indexes: &mut Indexes, table: &str) {
        self.keep_whole(table);
        if self.sees_as_stored(table) {
            indexes.fill_raw(table, self.replica.table_raw(table));
        } else {
            indexes.fill(table, self.replica.table(table).map(|(k, r)| (k, self.app_cow(table, r))));
        }
    }

    /// Touched rows keep what they were in the tables whose indexes are
    /// filled: what an index takes out (an unfilled one takes nothing).
    fn keep_was_of_filled(&mut self) {
        let tables: Names = self.view.indexes.defs().into_iter().map(|d| d.table).filter(|t| !self.view.unfilled.contains(t)).collect();
        self.replica.keep_was(tables);
    }

    // ----- indexes on disk -------------------------------------------------

    /// The indexes the store should keep for this context: its own, and
    /// those the store keeps already for the same app version (another
    /// context may have declared more: the union, so that two contexts
    /// never take turns building).
    pub fn entries_wanted(&self) -> EntriesFor {
        let mut all: Vec<IndexDef> = self.index_defs();
        if let Some(disk) = self.view.disk.as_ref().filter(|d| d.app_schema == self.config.schema) {
            all.extend(disk.defs.iter().cloned());
        }
        // Sorted, each once (by insertion: a handful, and no sort's code in the wasm).
        let mut defs: Vec<IndexDef> = Vec::with_capacity(all.len());
        for d in all.into_iter().filter(|d| !d.fields.is_empty()) {
            if let Err(at) = defs.binary_search(&d) {
                defs.insert(at, d);
            }
        }
        EntriesFor { defs, app_schema: self.config.schema, defaults_shown: true }
    }

    /// What to ask the store to keep, when it keeps other entries than this
    /// context wants (or none, and there is an index): the store builds them
    /// all from its rows in that step. Asked at open and with a new schema
    /// only — a context of another app version does not take turns with it.
    pub fn entries_to_keep(&self) -> Option<EntriesFor> {
        if !self.config.indexes_on_disk {
            return None;
        }
        let wanted = self.entries_wanted();
        (!wanted.defs.is_empty() && self.view.disk.as_ref() != Some(&wanted)).then_some(wanted)
    }

    /// The indexes the store keeps, when they are those this context
    /// wants: then its entries answer this context's queries.
    pub fn entries_on_disk(&self) -> Option<&EntriesFor> {
        self.view.disk.as_ref().filter(|d| **d == self.entries_wanted())
    }

    /// What this context last heard the store keeps.
    pub fn entries_heard(&self) -> Option<&EntriesFor> {
        self.view.disk.as_ref()
    }

    /// The store keeps these indexes from now on (read at open, written by
    /// this context, or heard from another).
    pub fn kept_on_disk(&mut self, disk: Option<EntriesFor>) {
        self.view.disk = disk;
    }

    /// Brings the indexes up, and fills `table`'s if it waited for its
    /// rows and they are all held now.
    fn settle_for(&mut self, table: &str) {
        self.settle();
        if self.view.unfilled.contains(table) && self.replica.missing(vec![Want::table(table)]).is_empty() {
            let mut indexes = std::mem::take(&mut self.view.indexes);
            self.fill(&mut indexes, table);
            self.view.indexes = indexes;
            self.view.unfilled.remove(table);
            self.keep_was_of_filled();
        }
        debug_assert!(self.replica.missing(vec![Want::table(table)]).is_empty(), "a query of {table} ran before its rows were read");
    }

    /// What changed for queries since the last call (the first call: all).
    pub fn take_changes(&mut self) -> Changes {
        self.settle();
        std::mem::take(&mut self.view.changes)
    }

    /// The visible rows `q` asks for, in its order: none while rows are hidden.
    pub fn query(&mut self, table: &str, q: &Query) -> Vec<(RowKey, Row)> {
        self.settle_for(table);
        if self.hides_rows() {
            return Vec::new();
        }
        query::run(&Visible(self), &self.view.indexes, table, q)
    }

    /// How many visible rows match `q`'s filters.
    pub fn count(&mut self, table: &str, q: &Query) -> usize {
        self.settle_for(table);
        if self.hides_rows() {
            return 0;
        }
        query::count(&Visible(self), &self.view.indexes, table, q)
    }

    /// Which index (or a scan) serves `q`.
    pub fn explain(&mut self, table: &str, q: &Query) -> Explain {
        self.settle();
        query::explain(&self.view.indexes, table, q)
    }
}
