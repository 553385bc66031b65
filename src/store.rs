//! The device's durable state and the contract every local store keeps.
//!
//! A local store holds four things (PROTOCOL §7): `meta` (deviceId, counter,
//! cursor, clock), `base` rows (last known server state, with marks),
//! `pending` ops (the outbox, ordered by `at`, which is unique and increasing
//! per device), `rejections` and `conflicts` (until dismissed) and the sync state
//! ([`SyncState`]: attempts, the attempt in flight, what is in doubt, counters). The engine never writes a
//! store piecemeal: every logical step is one [`Txn`], committed whole or not
//! at all. [`MemoryStore`] is the in-memory store; the browser's IndexedDB
//! store lives in the wasm adapter. Both pass the contract suite
//! (`testing::store_contract`, built for tests only).

use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::conflict::Conflict;
use crate::following::Following;
use crate::index_def::{EntriesFor, EntryRange};
use crate::known_schema::KnownSchema;
use crate::protocol::{Op, OpId, Row, RowKey};
use crate::sync_state::SyncState;

/// The device's own record: who it is and how far it has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Random UUID v4, born at the first open of the database.
    pub device_id: String,
    /// The highest counter number reserved so far (see [`crate::ids`]).
    pub counter: u64,
    /// The pull cursor: the seq of the last change merged into `base`.
    pub cursor: u64,
    /// The `at` clock. As stored, its `last_at` may lag the outbox's last
    /// key: a recording writes its op, not this record ([`Meta::with_queued`]).
    pub clock: Clock,
}

impl Meta {
    /// A fresh device.
    pub fn fresh(device_id: String) -> Meta {
        Meta { device_id, counter: 0, cursor: 0, clock: Clock::default() }
    }

    /// Whether `other` (of the same device) is nowhere further on than this
    /// record: then a step planned from this one is what it would have been
    /// planned from `other` — the same numbers and `at`s are still free.
    pub fn covers(&self, other: &Meta) -> bool {
        self.device_id == other.device_id && self.join(other) == *self
    }

    /// The record as a planner must see it: its clock's last `at` joined
    /// with the largest `at` still queued in the outbox (`last_queued`, its
    /// last key). A recording writes its op, not this record (PROTOCOL §7,
    /// "The last `at` taken"): while an op is queued its key holds its
    /// `at`, and the step that takes it out writes the record
    /// ([`Txn::meta_written`]).
    pub fn with_queued(&self, last_queued: Option<u64>) -> Meta {
        let mut m = self.clone();
        m.clock.last_at = m.clock.last_at.max(last_queued.unwrap_or(0));
        m
    }

    /// The join of two copies of the meta record (this engine's and the one in
    /// the database, which another tab may have moved): every number at its max.
    pub fn join(&self, other: &Meta) -> Meta {
        Meta {
            device_id: self.device_id.clone(),
            counter: self.counter.max(other.counter),
            cursor: self.cursor.max(other.cursor),
            clock: self.clock.join(&other.clock),
        }
    }
}

/// An op refused by the server, kept with its reason until the user dismisses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// The refused op.
    pub op: Op,
    /// The server's reason, word for word.
    pub reason: String,
    /// The server's code.
    pub code: String,
    /// How many times the op was sent before the verdict came.
    #[serde(default)]
    pub attempts: u32,
    /// A later op of this device on the same row was applied since: the row
    /// stands past this refusal, which stays listed until dismissed.
    #[serde(default)]
    pub superseded: bool,
}

/// A device's refusals by op, few and rarely written: a sorted vector (a
/// tree is one copy of its insert and removal code per key and value type
/// in the wasm, several KB each).
pub type Rejections = litemap::LiteMap<OpId, Rejection>;

/// The concurrent overwrites shown, by id: at most
/// [`crate::conflict::MAX_CONFLICTS`], a sorted vector as the refusals.
pub type Conflicts = litemap::LiteMap<String, Conflict>;

/// One atomic step of the device's state. Apply in field order: meta, base
/// puts, pending deletes then puts, rejection deletes then puts.
///
/// A base row put with no cells ([`Row::is_gone`]) removes the row: the
/// rows of a space the user left go that way, through the same log.
///
/// Not a record itself: the other contexts are told it record by record
/// ([`crate::told`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Txn {
    /// The whole meta record, when it changed.
    pub meta: Option<Meta>,
    /// Base rows to put.
    pub put_base: Vec<(RowKey, Row)>,
    /// Pending ops to delete, by `at`.
    pub delete_pending: Vec<u64>,
    /// Pending ops to put, in `at` order (key: `op.at`; IndexedDB keeps a
    /// recording's many ops together, in runs: `wasm::idb_store::runs`).
    pub put_pending: Vec<Op>,
    /// Rejections to delete, by opId.
    pub delete_rejections: Vec<OpId>,
    /// Rejections to put (key: `op.opId`).
    pub put_rejections: Vec<Rejection>,
    /// Conflicts to delete, by id (PROTOCOL §2a).
    pub delete_conflicts: Vec<String>,
    /// Conflicts to put (key: their id).
    pub put_conflicts: Vec<Conflict>,
    /// The whole sync state, when it changed.
    pub sync: Option<SyncState>,
    /// The server's schema, when the device learned a new one.
    pub schema: Option<KnownSchema>,
    /// The spaces the device follows, when they changed (whole record).
    pub following: Option<Following>,
    /// The indexes whose entries the store keeps from now on: unless it
    /// keeps them already, it builds every entry again, from its own base
    /// rows, in this step (PROTOCOL §7, "Indexes on disk").
    pub entries_for: Option<EntriesFor>,
}

impl Txn {
    /// The meta record this step writes (joined with the stored one by the
    /// store): its own, with the largest `at` it takes out of the outbox
    /// kept in the clock — once an op leaves, the record is what still
    /// holds its `at` ([`Meta::with_queued`]). A step that takes ops out
    /// carries the record (the engine's verdict steps always do).
    pub fn meta_written(&self) -> Option<Meta> {
        let m = self.meta.as_ref()?;
        Some(m.with_queued(self.delete_pending.iter().copied().max()))
    }

    /// Whether it changes what an app reads besides the sync state and the
    /// followed spaces: rows, queued ops, refusals, the schema (the meta
    /// record's counters and cursor are no such change).
    pub fn changes_data(&self) -> bool {
        !self.put_base.is_empty()
            || !self.delete_pending.is_empty()
            || !self.put_pending.is_empty()
            || !self.put_rejections.is_empty()
            || !self.delete_rejections.is_empty()
            || !self.put_conflicts.is_empty()
            || !self.delete_conflicts.is_empty()
            || self.schema.is_some()
    }

    /// Whether the step writes more than the meta record and pending ops
    /// (what [`LocalStore::update`] may write).
    pub fn touches_more_than_meta_and_pending(&self) -> bool {
        !(self.put_base.is_empty()
            && self.entries_for.is_none()
            && self.put_rejections.is_empty()
            && self.delete_rejections.is_empty()
            && self.put_conflicts.is_empty()
            && self.delete_conflicts.is_empty()
            && self.sync.is_none()
            && self.schema.is_none()
            && self.following.is_none())
    }

    /// Whether the step writes nothing.
    pub fn is_empty(&self) -> bool {
        self.meta.is_none()
            && self.put_base.is_empty()
            && self.delete_pending.is_empty()
            && self.put_pending.is_empty()
            && self.delete_rejections.is_empty()
            && self.put_rejections.is_empty()
            && self.delete_conflicts.is_empty()
            && self.put_conflicts.is_empty()
            && self.sync.is_none()
            && self.schema.is_none()
            && self.following.is_none()
            && self.entries_for.is_none()
    }

    /// Applies the step's refusals and conflicts to a copy of them (the
    /// store's, or a context's in memory): deletes, then puts.
    pub fn apply_notices(&self, rejections: &mut Rejections, conflicts: &mut Conflicts) {
        for id in &self.delete_rejections {
            rejections.remove(id);
        }
        for r in &self.put_rejections {
            rejections.insert(r.op.op_id.clone(), r.clone());
        }
        for id in &self.delete_conflicts {
            conflicts.remove(id);
        }
        for c in &self.put_conflicts {
            conflicts.insert(c.id.clone(), c.clone());
        }
    }

    /// Adds `later`, a step planned after this one, so both commit as one:
    /// later puts and deletes apply after this step's, as in two commits.
    pub fn then(&mut self, later: Txn) {
        if later.meta.is_some() {
            self.meta = later.meta;
        }
        self.put_base.extend(later.put_base);
        // A pending op put here and deleted later must not come back: deletes
        // of the later step drop this step's puts of the same `at`.
        self.put_pending.retain(|op| !later.delete_pending.contains(&op.at));
        self.delete_pending.extend(later.delete_pending);
        self.put_pending.extend(later.put_pending);
        self.put_rejections.retain(|r| !later.delete_rejections.contains(&r.op.op_id));
        self.delete_rejections.extend(later.delete_rejections);
        self.put_rejections.extend(later.put_rejections);
        self.put_conflicts.retain(|c| !later.delete_conflicts.contains(&c.id));
        self.delete_conflicts.extend(later.delete_conflicts);
        self.put_conflicts.extend(later.put_conflicts);
        if later.sync.is_some() {
            self.sync = later.sync;
        }
        if later.schema.is_some() {
            self.schema = later.schema;
        }
        if later.following.is_some() {
            self.following = later.following;
        }
        if later.entries_for.is_some() {
            self.entries_for = later.entries_for;
        }
    }
}

/// A span of base rows a step is about to read (PROTOCOL §7, "The lazy
/// store"): every row from `from` up to, not including, `to` (`None`: to
/// the last). An engine opened lazily asks its store for the spans it does
/// not hold before the step runs — the step itself stays pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// The first key of the span.
    pub from: RowKey,
    /// The first key past it.
    pub to: Option<RowKey>,
}

impl Want {
    /// One row.
    pub fn row(key: &RowKey) -> Want {
        Want { from: key.clone(), to: Some(RowKey { space: format!("{}\0", key.space), ..key.clone() }) }
    }
    /// Every row named `table/row_id`, in any space.
    pub fn named(table: &str, row_id: &str) -> Want {
        Want { from: RowKey::new(table, row_id), to: Some(RowKey::new(table, format!("{row_id}\0"))) }
    }
    /// Every row of a table.
    pub fn table(table: &str) -> Want {
        Want { from: RowKey::new(table, ""), to: Some(RowKey::new(format!("{table}\0"), "")) }
    }
    /// Every row.
    pub fn all() -> Want {
        Want { from: RowKey::new("", ""), to: None }
    }
    /// Whether `key` is in the span.
    pub fn holds(&self, key: &RowKey) -> bool {
        spans(&self.from, self.to.as_ref(), key)
    }
    /// Whether the span shares a key with `[from, to)` (`to: None`: to the last).
    pub fn meets(&self, from: &RowKey, to: Option<&RowKey>) -> bool {
        to.is_none_or(|to| *to > self.from) && self.to.as_ref().is_none_or(|end| from < end)
    }
}

/// Whether `key` is in `[from, to)` (`to: None`: to the last): a [`Want`]'s
/// span, or a held run's.
pub fn spans(from: &RowKey, to: Option<&RowKey>, key: &RowKey) -> bool {
    key >= from && to.is_none_or(|to| key < to)
}

/// What a store read for a [`Want`]: every base row it holds in `[from,
/// to)` — a span at least as wide as the one wanted (a store answers with
/// whole chunks).
#[derive(Debug, Clone, PartialEq)]
pub struct Provided {
    /// The first key of the span answered for.
    pub from: RowKey,
    /// The first key past it (`None`: to the last).
    pub to: Option<RowKey>,
    /// The rows.
    pub rows: ProvidedRows,
}

/// The rows of a [`Provided`] span, as the store holds them.
#[derive(Debug, Clone, PartialEq)]
pub enum ProvidedRows {
    /// A chunk as stored ([`crate::chunks`]).
    Chunk(Vec<u8>),
    /// Decoded, in key order (a store in memory).
    Rows(Vec<(RowKey, Row)>),
}

/// Everything a store holds, as loaded at open.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The meta record (created by [`LocalStore::open`] if missing).
    pub meta: Option<Meta>,
    /// Base chunks as stored ([`crate::chunks`]), kept packed by the
    /// replica rather than decoded at open; `base` applies over them.
    #[serde(skip)]
    pub base_chunks: Vec<Vec<u8>>,
    /// Base rows (over `base_chunks`, in order: a row with no cell removes).
    pub base: Vec<(RowKey, Row)>,
    /// Pending ops, in `at` order.
    pub pending: Vec<Op>,
    /// Rejections not yet dismissed.
    pub rejections: Vec<Rejection>,
    /// Conflicts, dismissed ones too (PROTOCOL §2a).
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// The sync state, if one was ever stored.
    #[serde(default)]
    pub sync: Option<SyncState>,
    /// The server's schema, if the device ever fetched it.
    #[serde(default)]
    pub schema: Option<KnownSchema>,
    /// The spaces the device follows, if it ever pulled them.
    #[serde(default)]
    pub following: Option<Following>,
    /// The store reads base rows on demand ([`LocalStore::read_base`]):
    /// `base_chunks` is empty, and `base` holds only what was written since
    /// the chunks (the store's log).
    #[serde(skip)]
    pub lazy: bool,
    /// Of a lazy store: the base rows of the keys with pending ops, read at open.
    #[serde(skip)]
    pub provided: Vec<Provided>,
    /// Of a lazy store: it holds base rows besides `base` (its chunks).
    #[serde(skip)]
    pub more_on_disk: bool,
    /// The indexes whose entries the store keeps, if any.
    #[serde(default)]
    pub entries_for: Option<EntriesFor>,
}

/// What can go wrong in a local store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be opened at all (e.g. IndexedDB is unavailable).
    #[error("local storage is unavailable: {0}")]
    Unavailable(String),
    /// A transaction failed or was aborted; nothing of it was written.
    #[error("local transaction failed: {0}")]
    TxnFailed(String),
    /// Stored data does not decode.
    #[error("local data is corrupt: {0}")]
    Corrupt(String),
    /// The connection was closed under the library (the site's data
    /// cleared, storage evicted, another context's version change): nothing
    /// of the transaction was written; [`LocalStore::reconnect`] opens it again.
    #[error("local storage was closed under the library: {0}")]
    Closed(String),
    /// The context's own `close()` closed the database while the call was
    /// under way: it ends as a call after `close()` does (no loss, nothing to heal).
    #[error("the database was closed")]
    ClosedByApp,
    /// The browser's storage quota is used up: nothing of the transaction
    /// was written, and no edit can be until space is freed.
    #[error("local storage is full: {0}")]
    Full(String),
}

/// A durable local store: one atomic transaction per step.
#[allow(async_fn_in_trait)]
pub trait LocalStore {
    /// Loads everything; if there is no meta record yet, stores `fresh` first
    /// (in one transaction, so two engines opening at once agree on the device).
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError>;
    /// Commits one step, whole or not at all. The meta record
    /// ([`Txn::meta_written`]) is joined with the stored one ([`Meta::join`]:
    /// every number at its max), never written over it: a context that has
    /// not yet heard of another's reserved numbers or `at`s must not hand
    /// them out again.
    async fn commit(&self, txn: &Txn) -> Result<(), StoreError>;
    /// Reads the stored sync state alone (a cycle starts from it, under the
    /// lock, so what another context moved is built on, not overwritten).
    async fn read_sync(&self) -> Result<Option<SyncState>, StoreError>;
    /// The one read-modify-write: reads the stored meta record, as a planner
    /// must see it ([`Meta::with_queued`]: with the outbox's last key read in
    /// the same transaction), and writes what `plan` makes of it — meta and
    /// pending ops only; `None` writes nothing. Returns whether it wrote.
    /// With `durable`, completes only once the write is flushed to disk.
    async fn update(&self, durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError>;
    /// [`LocalStore::update`] without waiting on the read: `txn` (meta and
    /// pending ops only) was planned from `assumed`, the meta record as this
    /// context last knew it, and is written only if the stored record (as
    /// [`LocalStore::update`] sees it) is nowhere further on
    /// ([`Meta::covers`]); else nothing is written and
    /// `Ok(false)` says to plan again from what is stored. A store that can
    /// queue the writes behind the read in one transaction (IndexedDB) saves
    /// the round trip between them; this default reads first.
    async fn write_assuming(&self, durable: bool, assumed: &Meta, txn: &Txn) -> Result<bool, StoreError> {
        self.update(durable, &mut |stored| assumed.covers(stored).then(|| txn.clone())).await
    }
    /// Reads the base rows of each span, for an engine opened lazily
    /// ([`Snapshot::lazy`]); a store that loads every row at open is never asked.
    async fn read_base(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        let _ = wants;
        Err(StoreError::Unavailable("this store reads every base row at open".into()))
    }
    /// Reads index entries the store keeps ([`Txn::entries_for`]; PROTOCOL
    /// §7, "Indexes on disk"), as they stand after every committed step.
    async fn read_entries(&self, range: &EntryRange) -> Result<Vec<Vec<u8>>, StoreError> {
        let _ = range;
        Err(StoreError::Unavailable("this store keeps no index entries".into()))
    }
    /// [`LocalStore::read_entries`], with the base rows they name when the
    /// store keeps them beside the entries (IndexedDB: each entry's value),
    /// each over its own one-row span, read in the same transaction; a
    /// store that does not answers none (they are read by span then).
    async fn read_entries_with_rows(&self, range: &EntryRange) -> Result<(Vec<Vec<u8>>, Vec<Provided>), StoreError> {
        Ok((self.read_entries(range).await?, Vec::new()))
    }
    /// Folds the base rows written since the last compaction into the
    /// chunks (a store that keeps no log has nothing to do): afterwards
    /// every base row committed before the call is in a chunk.
    async fn compact(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Lets the database go (another context may then upgrade or delete it).
    fn close(&self) {}
    /// Opens the database again after its connection was closed under the
    /// library ([`StoreError::Closed`]); a cleared database comes back empty.
    async fn reconnect(&self) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("this store cannot be opened again".into()))
    }
}

/// Contexts of one device share one store.
impl<S: LocalStore> LocalStore for std::rc::Rc<S> {
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        S::open(self, fresh).await
    }
    async fn commit(&self, txn: &Txn) -> Result<(), StoreError> {
        S::commit(self, txn).await
    }
    async fn read_sync(&self) -> Result<Option<SyncState>, StoreError> {
        S::read_sync(self).await
    }
    async fn update(&self, durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        S::update(self, durable, plan).await
    }
    async fn write_assuming(&self, durable: bool, assumed: &Meta, txn: &Txn) -> Result<bool, StoreError> {
        S::write_assuming(self, durable, assumed, txn).await
    }
    async fn read_base(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        S::read_base(self, wants).await
    }
    async fn read_entries(&self, range: &EntryRange) -> Result<Vec<Vec<u8>>, StoreError> {
        S::read_entries(self, range).await
    }
    async fn read_entries_with_rows(&self, range: &EntryRange) -> Result<(Vec<Vec<u8>>, Vec<Provided>), StoreError> {
        S::read_entries_with_rows(self, range).await
    }
    async fn compact(&self) -> Result<(), StoreError> {
        S::compact(self).await
    }
    fn close(&self) {
        S::close(self)
    }
    async fn reconnect(&self) -> Result<(), StoreError> {
        S::reconnect(self).await
    }
}
