//! The sans-io sync engine of one device: events in, steps and transactions out.
//!
//! The engine never does I/O. Its caller (the browser adapter, the simulator,
//! any other client) feeds it what happened — an edit to record, a push
//! answered, a pull page, a request failed — and gets back what to do next:
//! a [`Txn`] to commit atomically, and a [`Step`] (send this push, send this
//! pull, ask what the server remembers, wait until then, done, blocked).
//! Time, ids and randomness come in from the caller.
//!
//! | concern | file |
//! |---|---|
//! | recording edits (numbers, `at`s, one transaction each) | `record.rs` |
//! | the sync cycle (attempts, answers, failures, retry limits, reconciliation) | `cycle.rs` |
//! | the schema on the device: edits checked as the server would | `check.rs` |
//! | reading rows and statuses, following other contexts (`absorb`) | this file |
//!
//! Recording an edit is a read-modify-write of the stored meta record, so that
//! several engines on one database (tabs, a Service Worker) never reuse a
//! number or an `at`:
//!
//! ```text
//! let draft = engine.draft(table, row_id, fields)?;      // checks shapes, changes nothing
//! // in ONE store transaction: read meta, then
//! let (txn, rec) = engine.plan_record(draft, &stored_meta, now)?;  // write txn
//! // after the commit:
//! engine.recorded(rec);        // the op is now visible and queued
//! ```
//!
//! Every step of a sync cycle returns the [`Txn`] to commit **before** the
//! step is carried out: a push's txn records "attempt n of these ops is
//! going out" ([`SyncState`]), so a reload, another tab or the Service Worker
//! never shows a sent op as merely queued.

mod check;
mod cycle;
mod inspect;
mod lazy_query;
mod query;
mod reads;
mod record;
mod salvage;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attempt::{Backoff, InFlight, Phase, Recovery, RowStatus};
use crate::conflict::{self, Conflict};
use crate::following::{Following, SpaceInfo};
use crate::ids::{IdBlock, SplitMix};
use crate::outbox::Outbox;
use crate::protocol::{Op, OpId, PushRequest, Row, RowKey, ShapeError, SpacesPullRequest, DEFAULT_PULL_LIMIT, MAX_JUDGED_PER_PUSH};
use crate::replica::Replica;
use crate::store::{Meta, Rejection, Snapshot, Txn};
pub use crate::sync_state::{CycleLog, Metrics, RetryPolicy, SyncState, VerdictLog};
pub use reads::CACHE_BYTES;

pub use inspect::{Followed, Inspection, Queued};
pub use lazy_query::{LazyQuery, Next};
pub use query::{Changes, View};
pub use record::{plan_block, Draft, Recorded};

/// Tunables of an engine. The defaults are the protocol's.
#[derive(Debug, Clone)]
pub struct Config {
    /// Most ops per push (the server judges at most 1000).
    pub max_batch: usize,
    /// Pull page size.
    pub pull_limit: usize,
    /// Backoff base, ms.
    pub retry_base_ms: u64,
    /// Backoff cap, ms.
    pub retry_cap_ms: u64,
    /// Seed of the engine's randomness (jitter, attempt keys). Inject real
    /// entropy in production, a fixed seed in tests.
    pub seed: u64,
    /// The op schema version the app writes.
    pub schema: u32,
    /// When to stop retrying on its own and ask the server what it remembers.
    pub retry: RetryPolicy,
    /// How many numbers (rowIds and opIds) are reserved at once
    /// ([`crate::ids::BLOCK`] by default; tests use small blocks to cross
    /// their edges).
    pub id_block: u64,
    /// Indexes the app keeps on the device, besides the schema's.
    pub indexes: Vec<crate::query::IndexDef>,
    /// Over a lazy store: the bytes of base rows kept read between steps.
    pub cache_bytes: usize,
    /// Whether this context asks the store to keep its indexes' entries
    /// (PROTOCOL §7, "Indexes on disk"): not yet by default in a browser,
    /// where one IndexedDB record per entry makes building them slow.
    pub indexes_on_disk: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_batch: MAX_JUDGED_PER_PUSH,
            pull_limit: DEFAULT_PULL_LIMIT,
            retry_base_ms: 1_000,
            retry_cap_ms: 300_000,
            seed: 0,
            schema: 1,
            retry: RetryPolicy::default(),
            id_block: crate::ids::BLOCK,
            indexes: Vec::new(),
            cache_bytes: reads::CACHE_BYTES,
            indexes_on_disk: true,
        }
    }
}

/// Errors of the engine's API. Bad input changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// An edit breaks the protocol's shapes.
    #[error("invalid edit: {0}")]
    BadInput(#[from] ShapeError),
    /// The snapshot has no meta record (the store must create it at open).
    #[error("the local database has no meta record")]
    NoMeta,
    /// The stored base rows do not decode.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// No reserved id is left; the adapter must reserve a block first.
    #[error("no reserved id left: reserve a block")]
    IdsExhausted,
    /// No `at` larger than the last one is left on this device (its clock
    /// reached 2^53-1): the edit is refused rather than share an `at`.
    #[error("this device's clock has no later time left (2^53-1 reached); the edit was not recorded")]
    ClockExhausted,
    /// The user may not write in the edit's space, by what the device last
    /// learned (a viewer, or a space the user left): the judge's code and words.
    #[error("{0}")]
    Denied(#[from] crate::space::Denied),
    /// The database belongs to another user than the one named.
    #[error("this database belongs to user {owner:?}, not {named:?}: open one database per user")]
    WrongUser {
        /// The user the database belongs to.
        owner: String,
        /// The user named.
        named: String,
    },
    /// An edit while the token in use is another user's than the
    /// database's (the server said so): it would be queued for the owner,
    /// and sent into their account once their token is back.
    #[error("{0}; the edit was not recorded")]
    TokenOfAnotherUser(String),
}

/// What the caller should do next in a sync cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this push (its attemptKey is the one in flight).
    Push(PushRequest),
    /// Ask the server what it remembers of these ops (`POST /v1/verdicts`),
    /// then hand the answer to [`Engine::on_verdicts`].
    Reconcile(Vec<OpId>),
    /// Send this pull (`POST /v1/pull`: every followed space at once), then
    /// hand the answer, with this request, to [`Engine::on_pull_response`].
    Pull(SpacesPullRequest),
    /// The cycle is over: outbox empty (or nothing more to push) and pulled
    /// to the head — or, paced, its push answered with edits recorded
    /// meanwhile left for the next cycle ([`Engine::start_paced_sync`]).
    Done(SyncReport),
    /// The cycle stopped on a failure; start a new one at `until` (ms).
    Wait {
        /// When to try again.
        until: u64,
        /// What the cycle did before it stopped.
        report: SyncReport,
    },
    /// Sync cannot go on without the user.
    Blocked(Recovery),
}

/// What one sync cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    /// Ops sent in this cycle, each counted once however many attempts it took.
    pub pushed: usize,
    /// Ops answered `applied`.
    pub applied: usize,
    /// Ops answered `duplicate`.
    pub duplicate: usize,
    /// Ops answered `rejected`.
    pub rejected: usize,
    /// Changes pulled.
    pub pulled: usize,
    /// The cursor after the cycle.
    pub cursor: u64,
    /// Late answers to old attempts that were ignored.
    pub ignored_stale_acks: usize,
    /// Ops settled by asking the server what it remembers.
    pub reconciled: usize,
    /// Ops the server was asked about and does not know (never judged).
    pub unknown: usize,
}

/// The sync engine of one device.
#[derive(Debug, Clone)]
pub struct Engine {
    meta: Meta,
    ids: IdBlock,
    replica: Replica,
    outbox: Outbox,
    rejections: crate::store::Rejections,
    /// Edits of this device that lost to concurrent ones, by id, dismissed
    /// ones too (PROTOCOL §2a).
    conflicts: crate::store::Conflicts,
    /// The durable, shared part: attempts, flight, recovery, counters.
    sync: SyncState,
    /// Whether `sync` changed since it was last handed out in a txn.
    sync_dirty: bool,
    /// The attempt this engine sent and waits for (an attempt another
    /// context sent shows in `sync.flight`, never here).
    in_flight: Option<InFlight>,
    /// The ops this engine asked the server about, and whether a person asked (no push after).
    reconcile_in_flight: Option<(Vec<OpId>, bool)>,
    /// The pull this engine waits for, and when it left.
    pull_in_flight: Option<(SpacesPullRequest, u64)>,
    /// The spaces this device follows (stored; pulls move it).
    following: Following,
    /// Whether `following` changed since the last pull's txn stored it.
    following_moved: bool,
    backoff: Backoff,
    max_batch: usize,
    config: Config,
    rng: SplitMix,
    attempt_seq: u64,
    report: SyncReport,
    empty_answers: u32,
    /// This cycle is the probe of a refusal that came due: the `refused`
    /// stop lets it send ([`Engine::start_sync`]).
    probe_refused: bool,
    /// The server's schema as last fetched (stored), parsed.
    schema: Option<(crate::known_schema::KnownSchema, crate::schema::Schema)>,
    /// The schema version the last pull answer named.
    server_schema: Option<u32>,
    /// The `ETag` of the server's schema, as the last pull named it.
    server_schema_tag: Option<String>,
    /// When this cycle started before the backoff's time (a person's
    /// `sync()`), that time: its failures neither count toward the retry
    /// limits nor move the backoff.
    early: Option<u64>,
    /// The ops sent in this cycle (for [`SyncReport::pushed`]).
    pushed: std::collections::HashSet<OpId>,
    /// This cycle is paced ([`Engine::start_paced_sync`]), with the last
    /// `at` queued when it began: it pushes what was queued then, not what
    /// was recorded while it ran.
    paced: Option<u64>,
    /// Why the last request of this engine got no usable answer, in words.
    last_failure: Option<String>,
    /// The cycle running in this context, as the inspector will show it.
    cycle: CycleLog,
    view: View,
    /// Over a lazy store: the tables read whole, kept so between steps.
    whole: crate::names::Names,
}

/// How many "nothing judged, call again now" answers in a row before backing off.
const MAX_EMPTY_ANSWERS: u32 = 3;

impl Engine {
    /// Opens an engine on a loaded snapshot.
    pub fn open(snapshot: Snapshot, config: Config) -> Result<Engine, EngineError> {
        // The last `at` taken is the record's or a queued op's (PROTOCOL §7).
        let last_queued = snapshot.pending.iter().map(|op| op.at).max();
        let meta = snapshot.meta.ok_or(EngineError::NoMeta)?.with_queued(last_queued);
        let replica = if snapshot.lazy {
            Replica::open_lazy(snapshot.provided, snapshot.base, &snapshot.pending)?
        } else {
            Replica::open(snapshot.base_chunks, snapshot.base, &snapshot.pending)?
        };
        let outbox = Outbox::new(snapshot.pending);
        // Put one by one (appended as the store lists them), not collected:
        // a collect sorts, one more sort in the wasm for each type.
        let mut rejections = crate::store::Rejections::new();
        for r in snapshot.rejections {
            crate::protocol::put(&mut rejections, r.op.op_id.clone(), r);
        }
        let mut conflicts = crate::store::Conflicts::new();
        for c in snapshot.conflicts {
            crate::protocol::put(&mut conflicts, c.id.clone(), c);
        }
        let sync = snapshot.sync.unwrap_or_default();
        let mut rng = SplitMix::new(config.seed);
        let attempt_seq = rng.next_u64() >> 40;
        let mut engine = Engine {
            report: SyncReport { cursor: meta.cursor, ..SyncReport::default() },
            meta,
            ids: IdBlock::default(),
            replica,
            outbox,
            rejections,
            conflicts,
            sync,
            sync_dirty: false,
            in_flight: None,
            reconcile_in_flight: None,
            pull_in_flight: None,
            backoff: Backoff { base_ms: config.retry_base_ms, cap_ms: config.retry_cap_ms, failures: 0 },
            max_batch: config.max_batch.clamp(1, MAX_JUDGED_PER_PUSH),
            config,
            rng,
            attempt_seq,
            empty_answers: 0,
            probe_refused: false,
            schema: None,
            server_schema: None,
            server_schema_tag: None,
            following: snapshot.following.unwrap_or_default(),
            following_moved: false,
            early: None,
            pushed: std::collections::HashSet::new(),
            paced: None,
            last_failure: None,
            cycle: CycleLog::default(),
            view: View::default(),
            whole: crate::names::Names::new(),
        };
        if let Some(known) = &snapshot.schema {
            engine.absorb_schema(known);
        }
        engine.kept_on_disk(snapshot.entries_for);
        engine.prune_sync();
        Ok(engine)
    }

    /// Attempts of ops no longer queued are history: drop them.
    fn prune_sync(&mut self) {
        let outbox = &self.outbox;
        self.sync.ops.retain(|id, _| outbox.get(id).is_some());
    }

    // ----- names -------------------------------------------------------

    /// This device's id.
    pub fn device_id(&self) -> &str {
        &self.meta.device_id
    }

    /// The meta record as this engine knows it.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The user this database belongs to: named at open, or learned from the
    /// first pull answer (its personal space). `None` until then.
    pub fn user(&self) -> Option<&str> {
        self.following.user()
    }

    /// Binds the database to `user` (the app named it at open). Refuses a
    /// database that belongs to someone else; returns the txn that stores
    /// the binding the first time.
    pub fn bind_user(&mut self, user: &str) -> Result<Option<Txn>, EngineError> {
        match self.user() {
            Some(owner) if owner == user => Ok(None),
            Some(owner) => Err(EngineError::WrongUser { owner: owner.to_owned(), named: user.to_owned() }),
            None => {
                self.following.personal = Some(crate::space::personal(user));
                Ok(Some(Txn { following: Some(self.following.clone()), ..Txn::default() }))
            }
        }
    }

    /// Whether rows are kept from the app: the token in use is another
    /// user's than the database's (until a request proves it is the owner's).
    pub fn hides_rows(&self) -> bool {
        self.sync.recovery.as_ref().is_some_and(|r| r.code == crate::attempt::WRONG_USER)
    }

    /// Why the last request got no usable answer, in words (`None` after an answer).
    pub fn last_failure(&self) -> Option<&str> {
        self.last_failure.as_deref().or(self.sync.last_error.as_deref())
    }

    // ----- reading ---------------------------------------------------------

    /// The visible row (base ⊕ pending), `None` if absent or deleted.
    pub fn row(&self, key: &RowKey) -> Option<Cow<'_, Row>> {
        self.replica.visible(key).filter(|r| !r.is_deleted())
    }

    /// Where `table/row_id` lives on this device: the key of its visible
    /// copy (a tombstone too), the personal space's first when several
    /// spaces hold one; `None` when no space does.
    pub fn locate(&self, table: &str, row_id: &str) -> Option<RowKey> {
        self.replica.named(table, row_id).into_iter().next().map(|(k, _)| k)
    }

    /// The key a status of `table/row_id` is about when no space is named:
    /// where the row lives; else where its latest queued or refused op went
    /// (a row gone with a space the user left still shows its refusal);
    /// else the personal space.
    pub fn status_key(&self, table: &str, row_id: &str) -> RowKey {
        if let Some(k) = self.locate(table, row_id) {
            return k;
        }
        let named = |o: &&Op| o.table == table && o.row_id == row_id;
        let queued = self.outbox.iter().filter(named).last();
        let refused = || self.rejections.values().map(|r| &r.op).filter(named).max_by_key(|o| o.at);
        match queued.or_else(refused) {
            Some(op) => op.place(),
            None => RowKey::new(table, row_id),
        }
    }

    /// The spaces this device follows, as stored.
    pub fn following(&self) -> &Following {
        &self.following
    }

    /// The user's spaces as the app lists them: the personal one first.
    pub fn spaces(&self) -> Vec<SpaceInfo> {
        self.following.list()
    }

    /// The visible rows of a table, tombstones hidden, in rowId order.
    pub fn rows(&self, table: &str) -> Vec<(Cow<'_, RowKey>, Cow<'_, Row>)> {
        self.replica.table(table).filter(|(_, r)| !r.is_deleted()).collect()
    }

    /// Every visible row, tombstones included (for checks).
    pub fn all_visible(&self) -> BTreeMap<RowKey, Row> {
        self.replica.all_visible()
    }

    /// The base row of a key (last known server state).
    pub fn base(&self, key: &RowKey) -> Option<Row> {
        self.replica.base(key)
    }

    /// The pending ops, in order.
    pub fn pending(&self) -> impl Iterator<Item = &Op> {
        self.outbox.iter()
    }

    /// How many ops are pending.
    pub fn pending_len(&self) -> usize {
        self.outbox.len()
    }

    /// Rejections not yet dismissed.
    pub fn rejections(&self) -> impl Iterator<Item = &Rejection> {
        self.rejections.values()
    }

    /// The pull cursor.
    pub fn cursor(&self) -> u64 {
        self.meta.cursor
    }

    /// Counters over the database's life (stored, shared by every context).
    pub fn metrics(&self) -> &Metrics {
        &self.sync.metrics
    }

    /// Whether the sync state changed since it last went out with a txn.
    pub fn sync_unsaved(&self) -> bool {
        self.sync_dirty
    }

    /// The durable sync state as this engine knows it.
    pub fn sync_state(&self) -> &SyncState {
        &self.sync
    }

    /// The recovery sync waits for, if any.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.sync.recovery.as_ref()
    }

    /// When the next attempt is due after a failure (ms).
    pub fn retry_at(&self) -> Option<u64> {
        self.sync.next_retry_at
    }

    /// The attemptKey this engine has in flight, if it sent a push.
    pub fn in_flight(&self) -> Option<&str> {
        self.in_flight.as_ref().map(|f| f.key.as_str())
    }

    /// The sync status of one row the device knows — a row it holds (a
    /// tombstone too), has ops queued for, or holds a refusal of — or `None`
    /// for a row it has never seen: such a row has no sync status.
    pub fn known_status(&self, key: &RowKey) -> Option<RowStatus> {
        // Under another user's token only the queue's rows are told (they
        // read `recovery-required`): the rows and refusals are another person's.
        let shown = !self.hides_rows();
        let known = self.outbox.on_row(key).next().is_some()
            || (shown && (self.replica.visible(key).is_some() || self.rejections.values().any(|r| &r.op.place() == key)));
        known.then(|| self.status(key))
    }

    /// The sync status of one row (PROTOCOL §7), the same in every context
    /// that shares the database: it reads the shared sync state. It tells
    /// where the row stands now: queued ops first; else the newest refusal on
    /// the row that no later applied edit of this device has superseded (by
    /// setting again every field it was about: that one stays in
    /// [`Engine::rejections`] only).
    pub fn status(&self, key: &RowKey) -> RowStatus {
        let ops: Vec<&Op> = self.outbox.on_row(key).collect();
        let attempts = ops.iter().filter_map(|o| self.sync.ops.get(&o.op_id)).map(|s| s.attempts).max().unwrap_or(0);
        let conflicts = self
            .conflicts
            .values()
            .filter(|c| !c.dismissed && c.table == key.table && c.row_id == key.row_id && self.local_space(c) == key.space)
            .count();
        let mut st =
            RowStatus { phase: Phase::Synced, reason: None, code: None, pending_ops: ops.len(), attempts, next_retry_at: None, conflicts };
        if !ops.is_empty() {
            st.next_retry_at = self.sync.next_retry_at;
            let flying = self.sync.flight.as_ref().is_some_and(|f| ops.iter().any(|o| f.op_ids.contains(&o.op_id)));
            let sent = || ops.iter().any(|o| self.sync.ops.get(&o.op_id).is_some_and(|a| a.attempts > 0));
            // Exhausted retries stop the ops that reached a limit; an edit never
            // sent has reached none: it is queued, and says so.
            let stops_this_row = |r: &Recovery| r.code != cycle::RETRIES_EXHAUSTED || sent();
            if let Some(r) = self.sync.recovery.as_ref().filter(|r| stops_this_row(r)) {
                st.phase = Phase::RecoveryRequired;
                st.reason = Some(r.message.clone());
                st.code = Some(r.code.as_str().to_owned());
            } else if flying {
                st.phase = Phase::AwaitingAck;
            } else if ops.iter().any(|o| self.sync.ops.get(&o.op_id).is_some_and(|s| s.unknown)) {
                st.phase = Phase::UnknownOutcome;
                // Why no answer came, the same words in every context.
                st.reason = self.sync.last_error.clone();
            } else {
                st.phase = Phase::Pending;
                if sent() {
                    st.reason = self.sync.last_error.clone();
                }
            }
            return st;
        }
        let standing = self.rejections.values().filter(|r| !r.superseded && &r.op.place() == key).max_by_key(|r| r.op.at);
        if let Some(r) = standing {
            st.phase = Phase::Rejected;
            st.reason = Some(r.reason.clone());
            st.code = Some(r.code.as_str().to_owned());
            st.attempts = r.attempts;
        }
        st
    }

    /// Conflicts not dismissed (PROTOCOL §2a), oldest lost edit first.
    pub fn conflicts(&self) -> Vec<&Conflict> {
        let v: Vec<&Conflict> = self.conflicts.values().filter(|c| !c.dismissed).collect();
        crate::cold_sort::sorted_by(v, |a, b| (a.mine.at, &a.id).cmp(&(b.mine.at, &b.id)))
    }

    /// The space a conflict's row is keyed by on this device (empty: the personal one).
    fn local_space<'a>(&self, c: &'a Conflict) -> &'a str {
        c.space.as_deref().map_or("", |s| self.following.local(s))
    }

    /// Dismisses a conflict (a person has seen it): it stays stored, marked,
    /// so a later copy of its row that still tells of it does not bring it
    /// back. `None`: no such conflict, or dismissed already.
    pub fn dismiss_conflict(&mut self, id: &str) -> Option<Txn> {
        let c = self.conflicts.get_mut(id).filter(|c| !c.dismissed)?;
        c.dismissed = true;
        Some(Txn { put_conflicts: vec![c.clone()], ..Txn::default() })
    }

    /// Takes the conflicts a server copy of a row tells of (a pulled change,
    /// a verdict's row) into `txn`: new ones only, so a dismissed one stays
    /// dismissed; past [`conflict::MAX_CONFLICTS`] the oldest lost edit goes.
    pub(crate) fn notice_conflicts(&mut self, key: &RowKey, row: &Row, txn: &mut Txn) {
        if row.notes.is_none() {
            return;
        }
        let space = self.following.name(&key.space).map(str::to_owned);
        // The row's space names the author of an unnamed write: the owner of
        // a personal space (this user's, or another's shared with them).
        let owner: Option<std::sync::Arc<str>> = space.as_deref().and_then(crate::space::personal_owner).map(Into::into);
        let shared = (!key.space.is_empty()).then_some(key.space.as_str());
        let found: Vec<Conflict> = conflict::found_in(&self.meta.device_id, key, shared, row).collect();
        for mut c in found {
            if self.conflicts.contains_key(&c.id) {
                continue;
            }
            if c.theirs.user.is_none() {
                c.theirs.user = owner.clone();
            }
            txn.put_conflicts.push(c.clone());
            self.conflicts.insert(c.id.clone(), c);
        }
        while self.conflicts.len() > conflict::MAX_CONFLICTS {
            let Some(oldest) = self.conflicts.values().min_by(|a, b| (a.mine.at, &a.id).cmp(&(b.mine.at, &b.id))).map(|c| c.id.clone())
            else {
                break;
            };
            self.conflicts.remove(&oldest);
            txn.put_conflicts.retain(|c| c.id != oldest);
            txn.delete_conflicts.push(oldest);
        }
    }

    /// Dismisses a rejection (the user has seen it).
    pub fn dismiss(&mut self, op_id: &OpId) -> Option<Txn> {
        self.rejections.remove(op_id)?;
        Some(Txn { delete_rejections: vec![op_id.clone()], ..Txn::default() })
    }

    /// The sync state changed: hand it out with the next txn.
    fn touch(&mut self) {
        self.sync_dirty = true;
    }

    /// Adds the sync state to `txn` if it changed since it was last handed out.
    fn with_sync(&mut self, mut txn: Txn) -> Txn {
        if std::mem::take(&mut self.sync_dirty) {
            txn.sync = Some(self.sync.clone());
        }
        txn
    }

    /// Stamps a step about to be committed: one that brings a new schema
    /// asks the store to keep the indexes it declares; one that writes base rows or
    /// the followed spaces takes the next [`SyncState::base_version`], so
    /// the other contexts can tell whether they have heard it; one that
    /// writes the sync state, the next [`SyncState::step`].
    pub fn stamp(&mut self, txn: &mut Txn) {
        // A new schema may declare indexes (PROTOCOL §7, "Indexes on disk").
        if txn.schema.is_some() && txn.entries_for.is_none() {
            txn.entries_for = self.entries_to_keep();
        }
        if let Some(f) = &txn.entries_for {
            self.kept_on_disk(Some(f.clone()));
        }
        if !txn.put_base.is_empty() || txn.following.is_some() {
            self.sync.base_version += 1;
            match &mut txn.sync {
                Some(s) => s.base_version = self.sync.base_version,
                None => txn.sync = Some(self.sync.clone()),
            }
        }
        if let Some(s) = &mut txn.sync {
            self.sync.step += 1;
            s.step = self.sync.step;
        }
    }

    /// Whether the store holds a step this engine has not heard of (its
    /// broadcast is still on the way): then build on the store, not on memory.
    pub fn missed(&self, stored: Option<&SyncState>) -> bool {
        stored.is_some_and(|s| s.base_version > self.sync.base_version)
    }

    /// Applies a step that another engine on the same database committed
    /// (heard over a broadcast), so this engine's memory matches the store.
    /// A step of base rows this engine already holds (it reloaded from a
    /// store that had it, and may have built on it since) is no news.
    pub fn absorb(&mut self, txn: &Txn) {
        let writes_base = !txn.put_base.is_empty() || txn.following.is_some();
        let heard = |s: &SyncState| s.base_version > 0 && s.base_version <= self.sync.base_version;
        if writes_base && txn.sync.as_ref().is_some_and(heard) {
            return;
        }
        if let Some(m) = &txn.meta {
            self.meta = self.meta.join(m);
        }
        // A recording carries its ops, not always the record (PROTOCOL §7).
        self.meta = self.meta.with_queued(txn.put_pending.iter().map(|op| op.at).max());
        let mut touched: Vec<RowKey> = Vec::new();
        for (k, r) in &txn.put_base {
            self.replica.put_base(k, r);
            touched.push(k.clone());
        }
        for at in &txn.delete_pending {
            if let Some(op) = self.outbox.remove_at(*at) {
                self.sync.ops.remove(&op.op_id);
                touched.push(op.place());
            }
        }
        for op in &txn.put_pending {
            touched.push(op.place());
            self.outbox.insert(op.clone());
        }
        txn.apply_notices(&mut self.rejections, &mut self.conflicts);
        // An older copy than the one held is not news (see `SyncState::step`).
        if let Some(s) = txn.sync.as_ref().filter(|s| s.step > self.sync.step) {
            self.sync = s.clone();
            self.prune_sync();
            // Another context's step is newer than this one's last failure:
            // what it says of the last request (an answer, or its own failure)
            // is the truth now, as in every other context.
            self.last_failure = None;
        }
        if let Some(k) = &txn.schema {
            self.absorb_schema(k);
        }
        if let Some(f) = &txn.following {
            self.following = f.clone();
        }
        if let Some(f) = &txn.entries_for {
            self.kept_on_disk(Some(f.clone()));
        }
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            let ops: Vec<Op> = self.outbox.on_row(&key).cloned().collect();
            self.replica.rebuild(&key, ops.iter());
        }
    }

    /// Takes the sync state as stored now (read by the context that starts a
    /// cycle, under the database's lock, so that counters and attempts moved
    /// by another context are never overwritten with an older copy).
    pub fn adopt_sync(&mut self, stored: Option<SyncState>) {
        if let Some(s) = stored {
            self.sync = s;
            self.prune_sync();
        }
    }
}

#[cfg(test)]
mod conflict_tests;
#[cfg(test)]
mod query_tests;
#[cfg(test)]
mod spaces_tests;
#[cfg(test)]
mod tests;
