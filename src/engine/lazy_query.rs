//! A query over a lazy store, read from the indexes kept on disk
//! (PROTOCOL §7, "Queries over indexes on disk"): the engine names what to
//! read next — a batch of entries, the rows they name — and the driver
//! reads it, until the answer is whole. The answer is the one the indexes
//! in memory give: the same choice of index, the same bounds, every row
//! checked against the whole query ([`crate::query::Hits`]).
//!
//! The entries are of the base rows; the rows with queued ops are laid
//! over them from memory (every context holds its outbox): a row's entry
//! is passed over when it has queued ops, and its visible row is checked
//! instead, sorted in with the rest.

use std::borrow::Cow;

use super::Engine;
use crate::index_def::EntryRange;
use crate::protocol::{Row, RowKey};
use crate::query::{self, sortkey, DiskPlan, Hits, Query};
use crate::store::Want;

/// Entries read at a time when the read cannot stop at a limit: its rows
/// read together.
const BATCH: usize = 256;

/// Entries read past the limit of an ordered read, for the rows its
/// filters or queued edits pass over (another batch follows if short).
const SLACK: usize = 8;

/// A query under way.
#[derive(Debug, Clone)]
pub struct LazyQuery {
    table: String,
    q: Query,
    plan: DiskPlan,
    /// The rows gathered so far (of the entries checked).
    hits: Hits,
    /// Entries read and not yet checked, in the read's order.
    unchecked: Vec<Vec<u8>>,
    /// Where the next read starts (forward) or ends (from the end).
    next: Option<Vec<u8>>,
    /// Every entry of the range is read; or an ordered read has enough.
    done: bool,
}

/// What a query needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// These entries ([`crate::store::LocalStore::read_entries`]), handed
    /// back with [`LazyQuery::took`].
    Entries(EntryRange),
    /// These base rows ([`crate::store::LocalStore::read_base`], then
    /// [`Engine::provide`]).
    Rows(Vec<Want>),
    /// The answer.
    Done(Vec<(RowKey, Row)>),
}

impl LazyQuery {
    /// Takes the entries [`Next::Entries`] asked for.
    pub fn took(&mut self, asked: &EntryRange, entries: Vec<Vec<u8>>) {
        if entries.len() < asked.limit {
            self.done = true;
        }
        if let Some(last) = entries.last() {
            self.next = Some(if self.plan.reverse {
                last.clone()
            } else {
                // The least byte string after `last`.
                let mut after = last.clone();
                after.push(0);
                after
            });
        }
        self.unchecked.extend(entries);
    }

    fn range(&self) -> EntryRange {
        let (mut from, mut to) = (self.plan.from.clone(), self.plan.to.clone());
        match (&self.next, self.plan.reverse) {
            (Some(n), false) => from = n.clone(),
            (Some(n), true) => to = n.clone(),
            (None, _) => {}
        }
        // An ordered read needs its page (and a few more); then batches.
        let limit = match (self.plan.ordered, self.q.limit) {
            (true, Some(l)) if self.next.is_none() => l + SLACK,
            _ => BATCH,
        };
        EntryRange { index: self.plan.def.id(), from, to: Some(to), reverse: self.plan.reverse, limit }
    }
}

impl Engine {
    /// `q` served by an index kept on disk: when the store keeps this
    /// context's indexes and one fits (`None`: read the table whole).
    pub fn lazy_query(&self, table: &str, q: &Query) -> Option<LazyQuery> {
        let disk = self.entries_on_disk()?;
        let plan = query::plan_on_disk(disk.defs.iter(), table, q)?;
        let done = plan.from > plan.to;
        let hits = Hits::across_reads(q, plan.ordered);
        Some(LazyQuery { table: table.to_owned(), q: q.clone(), plan, hits, unchecked: Vec::new(), next: None, done })
    }

    /// The rows of `table` with queued ops: laid over the entries.
    fn queued_rows(&self, table: &str) -> Vec<RowKey> {
        let mut keys: Vec<RowKey> = Vec::new();
        for op in self.outbox.iter().filter(|o| o.table == table) {
            let key = op.place();
            if let Err(at) = keys.binary_search(&key) {
                keys.insert(at, key);
            }
        }
        keys
    }

    fn app_visible(&self, key: &RowKey) -> Option<Cow<'_, Row>> {
        self.replica.visible(key).map(|r| self.app_cow(&key.table, r))
    }

    /// What `lq` needs next; call again once it is read.
    pub fn lazy_next(&mut self, lq: &mut LazyQuery) -> Next {
        if self.hides_rows() {
            return Next::Done(Vec::new());
        }
        let queued = self.queued_rows(&lq.table);
        let n = lq.plan.def.fields.len();
        // The rows of the entries read: read them first, all together.
        let keys: Vec<RowKey> =
            lq.unchecked.iter().filter_map(|e| sortkey::row_of(e, n).map(|(id, space)| RowKey::in_space(space, &lq.table, id))).collect();
        let wants: Vec<Want> = keys.iter().filter(|k| queued.binary_search(k).is_err()).map(Want::row).collect();
        let missing = self.missing(wants);
        if !missing.is_empty() {
            return Next::Rows(missing);
        }
        for key in keys.iter().filter(|k| queued.binary_search(k).is_err()) {
            let Some(row) = self.app_visible(key) else { continue };
            if !lq.hits.take(&lq.q, key, &row) {
                lq.done = true;
                break;
            }
        }
        lq.unchecked.clear();
        if !lq.done {
            return Next::Entries(lq.range());
        }
        // The rows with queued ops, and then the answer's: held now, all of them.
        let missing = self.missing(queued.iter().map(Want::row).collect());
        if !missing.is_empty() {
            return Next::Rows(missing);
        }
        let mut hits = lq.hits.clone();
        for key in &queued {
            if let Some(row) = self.app_visible(key) {
                hits.take_any(&lq.q, key, &row);
            }
        }
        let keys = hits.keys(&lq.q);
        let missing = self.missing(keys.iter().map(Want::row).collect());
        if !missing.is_empty() {
            return Next::Rows(missing);
        }
        // A row taken from an earlier read may have moved since (another
        // context's step between two reads): what it is now is what is answered.
        Next::Done(
            keys.into_iter()
                .filter_map(|k| self.app_visible(&k).filter(|r| lq.q.matches(&k, r)).map(|r| (k.clone(), r.into_owned())))
                .collect(),
        )
    }
}
