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

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::conflict::Conflict;
use crate::following::Following;
use crate::known_schema::KnownSchema;
use crate::protocol::{Op, OpId, Row, RowKey};
pub use crate::query::disk::{Entries, EntriesFor, EntryChange, EntryRange};
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
    /// The `at` clock.
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

/// One atomic step of the device's state. Apply in field order: meta, base
/// puts, pending deletes then puts, rejection deletes then puts.
///
/// A base row put with no cells ([`Row::is_gone`]) removes the row: the
/// rows of a space the user left go that way, through the same log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Txn {
    /// The whole meta record, when it changed.
    pub meta: Option<Meta>,
    /// Base rows to put.
    pub put_base: Vec<(RowKey, Row)>,
    /// Pending ops to delete, by `at`.
    pub delete_pending: Vec<u64>,
    /// Pending ops to put (key: `op.at`).
    pub put_pending: Vec<Op>,
    /// Rejections to delete, by opId.
    pub delete_rejections: Vec<OpId>,
    /// Rejections to put (key: `op.opId`).
    pub put_rejections: Vec<Rejection>,
    /// Conflicts to delete, by id (PROTOCOL §2a).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_conflicts: Vec<String>,
    /// Conflicts to put (key: their id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub put_conflicts: Vec<Conflict>,
    /// The whole sync state, when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncState>,
    /// The server's schema, when the device learned a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<KnownSchema>,
    /// The spaces the device follows, when they changed (whole record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<Following>,
    /// The indexes whose entries the store keeps from now on: unless it
    /// keeps them already, it builds every entry again, from its own base
    /// rows, in this step (PROTOCOL §7, "Indexes on disk").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries_for: Option<EntriesFor>,
}

impl Txn {
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

/// Of what a store read, only the spans `wants` names, each row decoded:
/// a query that needs a few rows of many chunks keeps those rows, not
/// their chunks (PROTOCOL §7, "Queries over indexes on disk"). Each want
/// is answered for exactly where a read answered for it.
pub fn narrow(provided: Vec<Provided>, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
    let mut out = Vec::new();
    for p in provided {
        let meets: Vec<&Want> = wants.iter().filter(|w| w.meets(&p.from, p.to.as_ref())).collect();
        if meets.is_empty() {
            continue;
        }
        // The rows of the read: an encoding-4 chunk is searched as stored
        // (each row checked, only the wanted ones decoded); else decoded.
        let (bytes, starts, decoded) = match p.rows {
            ProvidedRows::Chunk(bytes) => match crate::chunks::split_chunk(&bytes)? {
                Some(starts) => (bytes, starts, Vec::new()),
                None => (Vec::new(), Vec::new(), crate::chunks::decode_chunk(&bytes)?),
            },
            ProvidedRows::Rows(rows) => (Vec::new(), Vec::new(), rows),
        };
        let n = if starts.is_empty() { decoded.len() } else { starts.len() };
        let key_at = |i: usize| -> Result<RowKey, StoreError> {
            if starts.is_empty() {
                return Ok(decoded[i].0.clone());
            }
            let (t, r, s) = crate::chunks::key_of(&bytes[starts[i] as usize..])?;
            Ok(RowKey { table: t.to_owned(), row_id: r.to_owned(), space: s.to_owned() })
        };
        for w in meets {
            let from = if w.from > p.from { w.from.clone() } else { p.from.clone() };
            let to = match (&w.to, &p.to) {
                (Some(a), Some(b)) => Some(if a < b { a.clone() } else { b.clone() }),
                (a, b) => a.clone().or_else(|| b.clone()),
            };
            // The first row at or past `from`, by bisection.
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if key_at(mid)? < from {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let mut rows = Vec::new();
            for i in lo..n {
                let key = key_at(i)?;
                if !spans(&from, to.as_ref(), &key) {
                    break;
                }
                rows.push(if starts.is_empty() {
                    decoded[i].clone()
                } else {
                    let end = starts.get(i + 1).map_or(bytes.len(), |e| *e as usize);
                    crate::chunks::decode_row(&bytes[starts[i] as usize..end])?
                });
            }
            out.push(Provided { from, to, rows: ProvidedRows::Rows(rows) });
        }
    }
    Ok(out)
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
    /// Commits one step, whole or not at all. The meta record is joined
    /// with the stored one ([`Meta::join`]: every number at its max), never
    /// written over it: a context that has not yet heard of another's
    /// reserved numbers or `at`s must not hand them out again.
    async fn commit(&self, txn: &Txn) -> Result<(), StoreError>;
    /// Reads the stored sync state alone (a cycle starts from it, under the
    /// lock, so what another context moved is built on, not overwritten).
    async fn read_sync(&self) -> Result<Option<SyncState>, StoreError>;
    /// The one read-modify-write: reads the stored meta record and, in the
    /// same transaction, writes what `plan` makes of it — meta and pending
    /// ops only; `None` writes nothing. Returns whether it wrote. With
    /// `durable`, completes only once the write is flushed to disk.
    async fn update(&self, durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError>;
    /// [`LocalStore::update`] without waiting on the read: `txn` (meta and
    /// pending ops only) was planned from `assumed`, the meta record as this
    /// context last knew it, and is written only if the stored record is
    /// nowhere further on ([`Meta::covers`]); else nothing is written and
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
    pub rejections: BTreeMap<OpId, Rejection>,
    /// Conflicts by id.
    pub conflicts: BTreeMap<String, Conflict>,
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
        if let Some(m) = &txn.meta {
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
        for id in &txn.delete_rejections {
            self.rejections.remove(id);
        }
        for r in &txn.put_rejections {
            self.rejections.insert(r.op.op_id.clone(), r.clone());
        }
        for id in &txn.delete_conflicts {
            self.conflicts.remove(id);
        }
        for c in &txn.put_conflicts {
            self.conflicts.insert(c.id.clone(), c.clone());
        }
        if let Some(s) = &txn.sync {
            self.sync = Some(s.clone());
        }
        if let Some(s) = &txn.schema {
            self.schema = Some(s.clone());
        }
        if let Some(f) = &txn.following {
            self.following = Some(f.clone());
        }
        crate::query::disk::apply(&mut self.entries, &changes);
        if let (true, Some(f)) = (rebuild, &keep) {
            self.entries = f.build(self.parsed_schema().as_ref(), self.base.iter());
            self.entries_for = Some(f.clone());
        }
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
        let stored = self.tables.borrow().meta.clone().ok_or_else(|| StoreError::Corrupt("no meta record".into()))?;
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
    fn a_read_narrowed_keeps_the_wanted_rows_alone_and_answers_where_it_read() {
        let row = |n: f64| {
            let mut r = Row::default();
            r.cells.insert("reps".into(), crate::protocol::Cell { value: crate::protocol::Value::Number(n), mark: crate::protocol::Mark { at: 1, op_id: OpId::new("s:1") } });
            r
        };
        let keys: Vec<RowKey> = ["a", "b", "c", "d", "e"].iter().map(|id| RowKey::new("sets", *id)).collect();
        let rows: Vec<(RowKey, Row)> = keys.iter().enumerate().map(|(i, k)| (k.clone(), row(i as f64))).collect();
        let chunk = crate::chunks::encode_snapshot(&rows).unwrap();
        let read = |r: ProvidedRows| vec![Provided { from: RowKey::new("", ""), to: Some(RowKey::new("sets", "d")), rows: r }];
        let wants = [Want::row(&keys[1]), Want { from: keys[2].clone(), to: None }, Want::row(&RowKey::new("sets", "bb"))];
        for provided in [read(ProvidedRows::Chunk(chunk.clone())), read(ProvidedRows::Rows(rows.clone()))] {
            let got = narrow(provided, &wants).unwrap();
            let spans: Vec<(String, Option<String>, Vec<String>)> = got
                .iter()
                .map(|p| {
                    let ids = match &p.rows {
                        ProvidedRows::Rows(r) => r.iter().map(|(k, _)| k.row_id.clone()).collect(),
                        ProvidedRows::Chunk(_) => panic!("decoded"),
                    };
                    (p.from.row_id.clone(), p.to.as_ref().map(|t| t.row_id.clone()), ids)
                })
                .collect();
            assert_eq!(
                spans,
                [
                    ("b".into(), Some("b".into()), vec!["b".into()]),
                    ("c".into(), Some("d".into()), vec!["c".into()]),
                    ("bb".into(), Some("bb".into()), vec![]),
                ],
                "one row; a span cut where the read ended (d, e unread); a row that is not there"
            );
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
