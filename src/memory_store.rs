//! The device's state in memory, with the one way to apply a step to it
//! ([`Tables`]), and the in-memory local store built on it: what the
//! simulator, the native tests and the store contract's reference run on.
//! It keeps the indexes' entries as IndexedDB does (PROTOCOL §7, "Indexes
//! on disk"), in the step that writes the rows.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::following::Following;
use crate::index_def::{Entries, EntriesFor, EntryRange};
use crate::known_schema::KnownSchema;
use crate::protocol::{Op, Row, RowKey};
use crate::store::{LocalStore, Meta, Provided, ProvidedRows, Snapshot, StoreError, Txn, Want};
use crate::sync_state::SyncState;

/// The state a store keeps, with the one way to apply a [`Txn`] to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    /// The meta record.
    pub meta: Option<Meta>,
    /// Base rows by key.
    pub base: BTreeMap<RowKey, Row>,
    /// Pending ops by `at`.
    pub pending: BTreeMap<u64, Op>,
    /// Rejections by opId.
    pub rejections: crate::store::Rejections,
    /// Conflicts by id.
    pub conflicts: crate::store::Conflicts,
    /// The sync state.
    pub sync: Option<SyncState>,
    /// The server's schema as last fetched.
    pub schema: Option<KnownSchema>,
    /// The spaces the device follows.
    pub following: Option<Following>,
    /// The indexes whose entries are kept.
    pub entries_for: Option<EntriesFor>,
    /// Index entries of the base rows, by index.
    pub entries: Entries,
}

impl Tables {
    /// Applies a step.
    pub fn apply(&mut self, txn: &Txn) {
        // Entries are kept step by step while the same indexes are kept
        // under the same schema; otherwise built again once the step is in.
        let schema_changes = txn.schema.as_ref().is_some_and(|s| Some(s) != self.schema.as_ref());
        let keep = txn.entries_for.clone().or_else(|| self.entries_for.clone());
        let rebuild = keep.is_some() && (keep != self.entries_for || schema_changes);
        let step_by_step = keep.as_ref().filter(|_| !rebuild);
        let schema = step_by_step.filter(|_| !txn.put_base.is_empty()).and_then(|_| self.parsed_schema());
        let mut changes = Vec::new();
        if let Some(m) = txn.meta_written() {
            // Joined, never overwritten: see [`LocalStore::commit`].
            self.meta = Some(self.meta.as_ref().map_or_else(|| m.clone(), |stored| m.join(stored)));
        }
        for (k, r) in &txn.put_base {
            let new = (!r.is_gone()).then_some(r);
            if let Some(f) = step_by_step {
                f.changes(schema.as_ref(), k, self.base.get(k), new, &mut changes);
            }
            match new {
                None => self.base.remove(k),
                Some(r) => self.base.insert(k.clone(), r.clone()),
            };
        }
        for at in &txn.delete_pending {
            self.pending.remove(at);
        }
        for op in &txn.put_pending {
            self.pending.insert(op.at, op.clone());
        }
        txn.apply_notices(&mut self.rejections, &mut self.conflicts);
        if let Some(s) = &txn.sync {
            self.sync = Some(s.clone());
        }
        if let Some(s) = &txn.schema {
            self.schema = Some(s.clone());
        }
        if let Some(f) = &txn.following {
            self.following = Some(f.clone());
        }
        crate::index_def::apply(&mut self.entries, &changes);
        if let (true, Some(f)) = (rebuild, &keep) {
            self.entries = f.build(self.parsed_schema().as_ref(), self.base.iter());
            self.entries_for = Some(f.clone());
        }
    }

    /// The meta record as [`LocalStore::update`] hands it to a planner:
    /// with the outbox's last key ([`Meta::with_queued`]).
    pub fn stored_meta(&self) -> Option<Meta> {
        Some(self.meta.as_ref()?.with_queued(self.pending.keys().next_back().copied()))
    }

    /// The known schema, parsed (`None`: none known, or it does not parse:
    /// rows are then spelled as stored, as the engine does).
    fn parsed_schema(&self) -> Option<crate::schema::Schema> {
        self.schema.as_ref().and_then(|k| crate::schema::Schema::from_json(&k.text).ok())
    }

    /// The entries the kept indexes would have if built now from the base
    /// rows: what the entries kept step by step must equal.
    pub fn entries_built(&self) -> Option<Entries> {
        Some(self.entries_for.as_ref()?.build(self.parsed_schema().as_ref(), self.base.iter()))
    }

    /// The tables as a snapshot (the base rows decoded: the replica packs
    /// them — in tests and the simulator as soon as there are a few).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            base_chunks: Vec::new(),
            meta: self.meta.clone(),
            base: self.base.iter().map(|(k, r)| (k.clone(), r.clone())).collect(),
            pending: self.pending.values().cloned().collect(),
            rejections: self.rejections.values().cloned().collect(),
            conflicts: self.conflicts.values().cloned().collect(),
            sync: self.sync.clone(),
            schema: self.schema.clone(),
            following: self.following.clone(),
            lazy: false,
            provided: Vec::new(),
            more_on_disk: false,
            entries_for: self.entries_for.clone(),
        }
    }

    /// A lazy snapshot: no base row but those of keys with pending ops.
    pub fn lazy_snapshot(&self) -> Snapshot {
        let mut s = self.snapshot();
        s.base = Vec::new();
        s.lazy = true;
        let wants: Vec<Want> = s.pending.iter().map(|op| Want::row(&op.place())).collect();
        s.provided = self.read_base(&wants);
        s.more_on_disk = !self.base.is_empty();
        s
    }

    /// The base rows of each span, widened by a few rows on each side (as
    /// a store of chunks answers with whole chunks), so that what is held
    /// overlaps and meets in every way.
    pub fn read_base(&self, wants: &[Want]) -> Vec<Provided> {
        const WIDEN: usize = 3;
        const PIECE: usize = 4;
        let mut out = Vec::with_capacity(wants.len());
        for w in wants {
            let from =
                self.base.range(..w.from.clone()).rev().nth(WIDEN - 1).map(|(k, _)| k.clone()).unwrap_or_else(|| RowKey::new("", ""));
            let to = match &w.to {
                None => None,
                Some(to) => self.base.range(to.clone()..).nth(WIDEN - 1).map(|(k, _)| k.clone()),
            };
            let upper = match &to {
                Some(t) => std::ops::Bound::Excluded(t.clone()),
                None => std::ops::Bound::Unbounded,
            };
            let rows: Vec<(RowKey, Row)> =
                self.base.range((std::ops::Bound::Included(from.clone()), upper)).map(|(k, r)| (k.clone(), r.clone())).collect();
            // In pieces of a few rows, as a store of chunks answers.
            let pieces: Vec<&[(RowKey, Row)]> = if rows.is_empty() { vec![&rows[..]] } else { rows.chunks(PIECE).collect() };
            for (i, piece) in pieces.iter().enumerate() {
                let start = if i == 0 { from.clone() } else { piece[0].0.clone() };
                let end = match pieces.get(i + 1) {
                    Some(next) => Some(next[0].0.clone()),
                    None => to.clone(),
                };
                out.push(Provided { from: start, to: end, rows: ProvidedRows::Rows(piece.to_vec()) });
            }
        }
        out
    }
}

/// An in-memory local store. Survives an engine's "crash" (drop and reopen),
/// and can be told to fail its next commits, to test aborted transactions.
#[derive(Debug, Default)]
pub struct MemoryStore {
    tables: RefCell<Tables>,
    fail_next: RefCell<u32>,
    /// How many times it was cleared under its users ([`MemoryStore::clear_under`]).
    generation: std::cell::Cell<u64>,
    /// The generation its own connection (the store used directly) opened.
    seen: std::cell::Cell<u64>,
    /// Opens lazily: base rows are read on demand ([`LocalStore::read_base`]).
    lazy: std::cell::Cell<bool>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// A store that opens lazily, as a browser's does past a few rows.
    pub fn lazy() -> Self {
        let s = Self::default();
        s.lazy.set(true);
        s
    }
    /// Makes the next `n` commits fail without writing anything.
    pub fn fail_next_commits(&self, n: u32) {
        *self.fail_next.borrow_mut() = n;
    }
    /// A copy of what the store holds.
    pub fn tables(&self) -> Tables {
        self.tables.borrow().clone()
    }
    /// What clearing a site's data does to its database: everything goes,
    /// and every connection open on it is closed under its user (a
    /// connection made after opens the empty database).
    pub fn clear_under(&self) {
        *self.tables.borrow_mut() = Tables::default();
        self.generation.set(self.generation.get() + 1);
    }
    fn usable(&self) -> Result<(), StoreError> {
        closed_unless(self.seen.get() == self.generation.get())
    }
}

fn closed_unless(open: bool) -> Result<(), StoreError> {
    if open {
        Ok(())
    } else {
        Err(StoreError::Closed("the database connection is closed".into()))
    }
}

/// One context's connection to a [`MemoryStore`] that several contexts share
/// (a tab's and its worker's to one IndexedDB database): a clear closes each
/// connection under its own context, and each opens again on its own.
#[derive(Debug)]
pub struct MemoryConnection {
    store: std::rc::Rc<MemoryStore>,
    seen: std::cell::Cell<u64>,
}

impl MemoryConnection {
    /// A new connection (it opens the database as it is now).
    pub fn new(store: std::rc::Rc<MemoryStore>) -> Self {
        let seen = std::cell::Cell::new(store.generation.get());
        MemoryConnection { store, seen }
    }
    fn usable(&self) -> Result<(), StoreError> {
        closed_unless(self.seen.get() == self.store.generation.get())
    }
}

impl LocalStore for MemoryConnection {
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        self.usable()?;
        self.store.open_tables(fresh)
    }
    async fn commit(&self, txn: &Txn) -> Result<(), StoreError> {
        self.usable()?;
        self.store.commit_tables(txn)
    }
    async fn read_sync(&self) -> Result<Option<SyncState>, StoreError> {
        self.usable()?;
        Ok(self.store.tables.borrow().sync.clone())
    }
    async fn update(&self, _durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        self.usable()?;
        self.store.update_tables(plan)
    }
    async fn read_base(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        self.usable()?;
        Ok(self.store.tables.borrow().read_base(wants))
    }
    async fn read_entries(&self, range: &EntryRange) -> Result<Vec<Vec<u8>>, StoreError> {
        self.usable()?;
        Ok(range.read(&self.store.tables.borrow().entries))
    }
    async fn reconnect(&self) -> Result<(), StoreError> {
        self.seen.set(self.store.generation.get());
        Ok(())
    }
}

impl MemoryStore {
    /// Whether an injected failure takes this transaction.
    fn fails(&self) -> bool {
        let mut fail = self.fail_next.borrow_mut();
        if *fail > 0 {
            *fail -= 1;
            return true;
        }
        false
    }
}

impl MemoryStore {
    fn open_tables(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        let mut t = self.tables.borrow_mut();
        if t.meta.is_none() {
            t.meta = Some(fresh);
        }
        if self.lazy.get() {
            return Ok(t.lazy_snapshot());
        }
        Ok(t.snapshot())
    }

    fn commit_tables(&self, txn: &Txn) -> Result<(), StoreError> {
        if self.fails() {
            return Err(StoreError::TxnFailed("injected failure".into()));
        }
        self.tables.borrow_mut().apply(txn);
        Ok(())
    }

    fn update_tables(&self, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        let stored = self.tables.borrow().stored_meta().ok_or_else(|| StoreError::Corrupt("no meta record".into()))?;
        let Some(txn) = plan(&stored) else { return Ok(false) };
        if txn.touches_more_than_meta_and_pending() {
            return Err(StoreError::TxnFailed("an update writes meta and pending ops only".into()));
        }
        if self.fails() {
            return Err(StoreError::TxnFailed("injected failure".into()));
        }
        self.tables.borrow_mut().apply(&txn);
        Ok(true)
    }
}

impl LocalStore for MemoryStore {
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        self.usable()?;
        self.open_tables(fresh)
    }

    async fn commit(&self, txn: &Txn) -> Result<(), StoreError> {
        self.usable()?;
        self.commit_tables(txn)
    }

    async fn read_sync(&self) -> Result<Option<SyncState>, StoreError> {
        self.usable()?;
        Ok(self.tables.borrow().sync.clone())
    }

    async fn update(&self, _durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        self.usable()?;
        self.update_tables(plan)
    }

    async fn read_base(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        self.usable()?;
        Ok(self.tables.borrow().read_base(wants))
    }

    async fn read_entries(&self, range: &EntryRange) -> Result<Vec<Vec<u8>>, StoreError> {
        self.usable()?;
        Ok(range.read(&self.tables.borrow().entries))
    }

    async fn reconnect(&self) -> Result<(), StoreError> {
        self.seen.set(self.generation.get());
        Ok(())
    }
}

// Native only: the property tests and the executor are not built for wasm32.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn run(f: impl std::future::Future<Output = Result<(), String>>) {
        if let Err(e) = pollster::block_on(f) {
            panic!("{e}");
        }
    }

    #[test]
    fn memory_store_keeps_the_contract() {
        run(crate::testing::store_contract::open_creates_meta_once(&MemoryStore::new()));
        run(crate::testing::store_contract::commit_then_reopen(&MemoryStore::new()));
        run(crate::testing::store_contract::deletes(&MemoryStore::new()));
        run(crate::testing::store_contract::base_rows_are_keyed_by_table_and_row(&MemoryStore::new()));
        run(crate::testing::store_contract::engine_steps_survive_reopen(&MemoryStore::new()));
        run(crate::testing::store_contract::a_write_assuming_a_moved_record_writes_nothing(&MemoryStore::new()));
        run(crate::testing::store_contract::the_last_at_taken_is_the_records_or_the_outboxs(&MemoryStore::new()));
        run(crate::testing::store_contract::lazy_reads_answer_every_row_of_a_span(&MemoryStore::lazy(), || async {}));
        run(crate::testing::store_contract::index_entries_follow_the_base_rows(&MemoryStore::new(), || async {}));
    }

    #[test]
    fn a_failed_commit_writes_nothing() {
        let s = MemoryStore::new();
        pollster::block_on(s.open(Meta::fresh("d".into()))).unwrap();
        s.fail_next_commits(1);
        let txn = Txn { meta: Some(Meta::fresh("x".into())), ..Txn::default() };
        assert!(pollster::block_on(s.commit(&txn)).is_err());
        assert_eq!(s.tables().meta.map(|m| m.device_id), Some("d".into()));
    }
}
