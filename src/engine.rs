//! The sans-io sync engine of one device: events in, steps and transactions out.
//!
//! The engine never does I/O. Its caller (the browser adapter, the simulator,
//! any other client) feeds it what happened — an edit to record, a push
//! answered, a pull page, a request failed — and gets back what to do next:
//! a [`Txn`] to commit atomically, and a [`Step`] (send this push, send this
//! pull, wait until then, done, blocked). Time, ids and randomness come in
//! from the caller.
//!
//! Recording an edit is a read-modify-write of the stored meta record, so that
//! several engines on one database (tabs, a Service Worker) never reuse a
//! number or an `at`:
//!
//! ```text
//! let draft = engine.draft(table, row_id, fields)?;      // checks shapes, changes nothing
//! // in ONE store transaction: read meta, then
//! let (txn, rec) = engine.plan_record(draft, &stored_meta, now);  // write txn
//! // after the commit:
//! engine.recorded(rec);        // the op is now visible and queued
//! ```

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::attempt::{Backoff, Failure, InFlight, Phase, Recovery, RowStatus};
use crate::ids::{self, IdBlock, SplitMix};
use crate::outbox::Outbox;
use crate::protocol::{
    check_fields, check_row_id, check_table, Fields, Op, OpId, Outcome, PullResponse, PushRequest, PushResponse, Row, RowKey, ShapeError,
    Value, DEFAULT_PULL_LIMIT, DELETED, MAX_JUDGED_PER_PUSH,
};
use crate::replica::Replica;
use crate::store::{Meta, Rejection, Snapshot, Txn};

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
    /// No reserved id is left; the adapter must reserve a block first.
    #[error("no reserved id left: reserve a block")]
    IdsExhausted,
}

/// A checked edit, not yet recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    table: String,
    row_id: String,
    fields: Fields,
}

/// An op planned inside a store transaction; hand it back to
/// [`Engine::recorded`] once that transaction committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The ops, as stored, in the order of their drafts.
    pub ops: Vec<Op>,
    meta: Meta,
    block: Option<IdBlock>,
}

/// What the caller should do next in a sync cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send this push (its attemptKey is the one in flight).
    Push(PushRequest),
    /// Send this pull.
    Pull {
        /// The cursor to pull after.
        cursor: u64,
        /// The page size.
        limit: usize,
    },
    /// The cycle is over: outbox empty (or nothing more to push) and pulled to the head.
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
    /// Ops sent (counting every attempt).
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
}

/// Counters over the engine's life, for dashboards and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Push attempts sent.
    pub attempts: u64,
    /// Attempts that ended with an unknown outcome.
    pub unknown_outcomes: u64,
    /// Late answers to old attempts, ignored.
    pub stale_acks_ignored: u64,
    /// Ops answered `applied`.
    pub applied: u64,
    /// Ops answered `duplicate`.
    pub duplicates: u64,
    /// Ops answered `rejected`.
    pub rejected: u64,
    /// Times sync became recovery-required.
    pub recovery_required: u64,
    /// Pull pages merged.
    pub pulls: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct OpState {
    attempts: u32,
    unknown: bool,
}

/// The sync engine of one device.
#[derive(Debug, Clone)]
pub struct Engine {
    meta: Meta,
    ids: IdBlock,
    replica: Replica,
    outbox: Outbox,
    rejections: BTreeMap<OpId, Rejection>,
    in_flight: Option<InFlight>,
    pull_in_flight: Option<u64>,
    op_state: HashMap<OpId, OpState>,
    backoff: Backoff,
    retry_at: Option<u64>,
    recovery: Option<Recovery>,
    max_batch: usize,
    config: Config,
    rng: SplitMix,
    attempt_seq: u64,
    report: SyncReport,
    metrics: Metrics,
    empty_answers: u32,
}

/// How many "nothing judged, call again now" answers in a row before backing off.
const MAX_EMPTY_ANSWERS: u32 = 3;

impl Engine {
    /// Opens an engine on a loaded snapshot.
    pub fn open(snapshot: Snapshot, config: Config) -> Result<Engine, EngineError> {
        let meta = snapshot.meta.ok_or(EngineError::NoMeta)?;
        let replica = Replica::new(snapshot.base, &snapshot.pending);
        let outbox = Outbox::new(snapshot.pending);
        let rejections = snapshot.rejections.into_iter().map(|r| (r.op.op_id.clone(), r)).collect();
        let mut rng = SplitMix::new(config.seed);
        let attempt_seq = rng.next_u64() >> 40;
        Ok(Engine {
            report: SyncReport { cursor: meta.cursor, ..SyncReport::default() },
            meta,
            ids: IdBlock::default(),
            replica,
            outbox,
            rejections,
            in_flight: None,
            pull_in_flight: None,
            op_state: HashMap::new(),
            backoff: Backoff { base_ms: config.retry_base_ms, cap_ms: config.retry_cap_ms, failures: 0 },
            retry_at: None,
            recovery: None,
            max_batch: config.max_batch.clamp(1, MAX_JUDGED_PER_PUSH),
            config,
            rng,
            attempt_seq,
            metrics: Metrics::default(),
            empty_answers: 0,
        })
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

    /// How many reserved numbers are left before a new block is needed.
    pub fn ids_left(&self) -> u64 {
        if self.ids.is_empty() {
            0
        } else {
            self.ids.last - self.ids.next + 1
        }
    }

    /// Plans the reservation of a new block of numbers, to write in a store
    /// transaction that read `stored` (the meta record in the database).
    pub fn plan_reserve(&self, stored: &Meta) -> (Txn, IdBlock) {
        let mut meta = self.meta.join(stored);
        let mut block = IdBlock::default();
        meta.counter = block.reserve_after(meta.counter);
        (Txn { meta: Some(meta), ..Txn::default() }, block)
    }

    /// The reservation committed: the block is this engine's.
    pub fn reserved(&mut self, block: IdBlock, stored: &Meta) {
        self.meta = self.meta.join(stored);
        self.meta.counter = self.meta.counter.max(block.last);
        self.ids = block;
    }

    /// A new rowId (`<deviceId>-<n>`) from the reserved block.
    pub fn new_row_id(&mut self) -> Result<String, EngineError> {
        let n = self.ids.take().ok_or(EngineError::IdsExhausted)?;
        Ok(ids::row_id(&self.meta.device_id, n))
    }

    // ----- recording edits -----------------------------------------------

    /// Checks an edit's shapes (PROTOCOL §1–2). Changes nothing.
    pub fn draft(&self, table: &str, row_id: &str, fields: Fields) -> Result<Draft, EngineError> {
        let path = |p: &str, what: &str| ShapeError { path: p.into(), problem: what.into() };
        check_table(table).map_err(|w| path("table", w))?;
        check_row_id(row_id).map_err(|w| path("rowId", w))?;
        check_fields(&fields).map_err(|e| path(&format!("fields{}", e.path), &e.problem))?;
        Ok(Draft { table: table.into(), row_id: row_id.into(), fields })
    }

    /// A draft that marks a row deleted (`true`) or restores it (`false`).
    pub fn draft_deleted(&self, table: &str, row_id: &str, deleted: bool) -> Result<Draft, EngineError> {
        let mut f = Fields::new();
        f.insert(DELETED.into(), Value::Bool(deleted));
        self.draft(table, row_id, f)
    }

    /// Turns a draft into an op, inside the store transaction that read
    /// `stored`: takes a number (reserving a block if needed) and an `at`.
    /// Write the returned txn; then call [`Engine::recorded`].
    pub fn plan_record(&mut self, draft: Draft, stored: &Meta, now: u64) -> (Txn, Recorded) {
        self.plan_records(vec![draft], stored, now)
    }

    /// [`Engine::plan_record`] for many drafts at once: one step, so they are
    /// recorded together or not at all, each with its own number and `at`
    /// (increasing in the order given).
    pub fn plan_records(&mut self, drafts: Vec<Draft>, stored: &Meta, now: u64) -> (Txn, Recorded) {
        let mut meta = self.meta.join(stored);
        let mut block = None::<IdBlock>;
        let mut ops = Vec::with_capacity(drafts.len());
        for draft in drafts {
            // Numbers of the engine's block first, then of blocks reserved in this step.
            let n = match self.ids.take().or_else(|| block.as_mut().and_then(IdBlock::take)) {
                Some(n) => n,
                None => {
                    let mut b = IdBlock::default();
                    meta.counter = b.reserve_after(meta.counter);
                    let n = b.take().unwrap_or(meta.counter);
                    block = Some(b);
                    n
                }
            };
            let at = meta.clock.advance(now);
            ops.push(Op {
                op_id: ids::op_id(&meta.device_id, n),
                table: draft.table,
                row_id: draft.row_id,
                fields: draft.fields,
                at,
                schema: self.config.schema,
            });
        }
        let txn = Txn { meta: Some(meta.clone()), put_pending: ops.clone(), ..Txn::default() };
        (txn, Recorded { ops, meta, block })
    }

    /// The record transaction committed: the op is queued and visible.
    pub fn recorded(&mut self, rec: Recorded) {
        self.meta = self.meta.join(&rec.meta);
        if let Some(b) = rec.block {
            self.ids = b;
        }
        for op in rec.ops {
            self.replica.add_pending(&op);
            self.outbox.insert(op);
        }
    }

    // ----- reading ---------------------------------------------------------

    /// The visible row (base ⊕ pending), `None` if absent or deleted.
    pub fn row(&self, key: &RowKey) -> Option<&Row> {
        self.replica.visible(key).filter(|r| !r.is_deleted())
    }

    /// The visible rows of a table, tombstones hidden, in rowId order.
    pub fn rows(&self, table: &str) -> Vec<(&RowKey, &Row)> {
        self.replica.table(table).into_iter().filter(|(_, r)| !r.is_deleted()).collect()
    }

    /// Every visible row, tombstones included (for checks).
    pub fn all_visible(&self) -> BTreeMap<RowKey, Row> {
        self.replica.all_visible()
    }

    /// The base row of a key (last known server state).
    pub fn base(&self, key: &RowKey) -> Option<&Row> {
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

    /// Counters over the engine's life.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The recovery sync waits for, if any.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// When the engine wants to try again after a failure (ms).
    pub fn retry_at(&self) -> Option<u64> {
        self.retry_at
    }

    /// The attemptKey in flight, if a push is out.
    pub fn in_flight(&self) -> Option<&str> {
        self.in_flight.as_ref().map(|f| f.key.as_str())
    }

    /// The sync status of one row (PROTOCOL §7).
    pub fn status(&self, key: &RowKey) -> RowStatus {
        let ops: Vec<&Op> = self.outbox.on_row(key).collect();
        let attempts = ops.iter().filter_map(|o| self.op_state.get(&o.op_id)).map(|s| s.attempts).max().unwrap_or(0);
        let mut st = RowStatus { phase: Phase::Synced, reason: None, code: None, pending_ops: ops.len(), attempts, next_retry_at: None };
        if !ops.is_empty() {
            st.next_retry_at = self.retry_at;
            if let Some(r) = &self.recovery {
                st.phase = Phase::RecoveryRequired;
                st.reason = Some(r.message.clone());
                st.code = Some(r.code.clone());
            } else if self.in_flight.as_ref().is_some_and(|f| ops.iter().any(|o| f.op_ids.contains(&o.op_id))) {
                st.phase = Phase::AwaitingAck;
            } else if ops.iter().any(|o| self.op_state.get(&o.op_id).is_some_and(|s| s.unknown)) {
                st.phase = Phase::UnknownOutcome;
            } else {
                st.phase = Phase::Pending;
            }
            return st;
        }
        if let Some(r) = self.rejections.values().rev().find(|r| &r.op.row_key() == key) {
            st.phase = Phase::Rejected;
            st.reason = Some(r.reason.clone());
            st.code = Some(r.code.clone());
        }
        st
    }

    /// Dismisses a rejection (the user has seen it).
    pub fn dismiss(&mut self, op_id: &OpId) -> Option<Txn> {
        self.rejections.remove(op_id)?;
        Some(Txn { delete_rejections: vec![op_id.clone()], ..Txn::default() })
    }

    // ----- sync ------------------------------------------------------------

    /// Starts a sync cycle now (whatever the backoff says: the caller decided).
    pub fn start_sync(&mut self, now: u64) -> Step {
        let _ = now;
        self.report = SyncReport { cursor: self.meta.cursor, ..SyncReport::default() };
        self.retry_at = None;
        self.in_flight = None;
        self.pull_in_flight = None;
        self.empty_answers = 0;
        self.next_step()
    }

    /// The step after the current one: push while ops wait, else pull.
    fn next_step(&mut self) -> Step {
        if let Some(r) = &self.recovery {
            return Step::Blocked(r.clone());
        }
        if !self.outbox.is_empty() {
            return Step::Push(self.new_attempt());
        }
        self.pull_in_flight = Some(self.meta.cursor);
        Step::Pull { cursor: self.meta.cursor, limit: self.config.pull_limit }
    }

    fn new_attempt(&mut self) -> PushRequest {
        self.attempt_seq += 1;
        let key = format!("{}:a{}", self.meta.device_id, self.attempt_seq);
        let batch = self.outbox.next_batch(self.max_batch);
        for op in &batch {
            self.op_state.entry(op.op_id.clone()).or_default().attempts += 1;
        }
        self.metrics.attempts += 1;
        self.report.pushed += batch.len();
        self.in_flight = Some(InFlight { key: key.clone(), op_ids: batch.iter().map(|o| o.op_id.clone()).collect() });
        PushRequest { attempt_key: key, batch }
    }

    /// A push answer arrived. `None`: it answers an attempt that is not the one
    /// in flight, and was ignored (nothing changed). Otherwise commit the txn,
    /// then do the step.
    pub fn on_push_response(&mut self, resp: PushResponse, now: u64) -> Option<(Txn, Step)> {
        let Some(flight) = self.in_flight.as_ref().filter(|f| f.key == resp.attempt_key) else {
            self.metrics.stale_acks_ignored += 1;
            self.report.ignored_stale_acks += 1;
            return None;
        };
        if resp.verdicts.len() > flight.op_ids.len() || resp.verdicts.iter().zip(&flight.op_ids).any(|(v, id)| &v.op_id != id) {
            let key = flight.key.clone();
            let step = self.on_push_failed(&key, Failure::BadResponse("verdicts do not match the batch".into()), now)?;
            return Some((Txn::default(), step));
        }
        if resp.verdicts.is_empty() {
            // "Nothing judged, call again now" — but not forever.
            self.empty_answers += 1;
            if self.empty_answers > MAX_EMPTY_ANSWERS {
                let key = flight.key.clone();
                let step = self.on_push_failed(&key, Failure::BadResponse("the server judged nothing, repeatedly".into()), now)?;
                return Some((Txn::default(), step));
            }
        } else {
            self.empty_answers = 0;
        }
        self.in_flight = None;
        self.backoff.reset();
        let mut txn = Txn::default();
        let mut base_at: HashMap<RowKey, usize> = HashMap::new();
        for v in resp.verdicts {
            self.apply_verdict(v.op_id, v.outcome, &mut txn, &mut base_at);
        }
        if !txn.is_empty() {
            txn.meta = Some(self.meta.clone());
        }
        Some((txn, self.next_step()))
    }

    /// Puts `row` as the base row of `key` in `txn`, once per key (`at` indexes `txn.put_base`).
    fn put_base(txn: &mut Txn, at: &mut HashMap<RowKey, usize>, key: RowKey, row: Row) {
        match at.get(&key) {
            Some(i) => txn.put_base[*i].1 = row,
            None => {
                at.insert(key.clone(), txn.put_base.len());
                txn.put_base.push((key, row));
            }
        }
    }

    fn apply_verdict(&mut self, op_id: OpId, outcome: Outcome, txn: &mut Txn, base_at: &mut HashMap<RowKey, usize>) {
        self.op_state.remove(&op_id);
        let Some(op) = self.outbox.remove(&op_id) else {
            return;
        };
        txn.delete_pending.push(op.at);
        let key = op.row_key();
        match outcome {
            Outcome::Applied | Outcome::Duplicate => {
                if outcome == Outcome::Applied {
                    self.report.applied += 1;
                    self.metrics.applied += 1;
                } else {
                    self.report.duplicate += 1;
                    self.metrics.duplicates += 1;
                }
                let still = self.outbox.has_row(&key);
                let base = self.replica.fold(&op, still);
                Self::put_base(txn, base_at, key, base);
            }
            Outcome::Rejected { reason, code, row } => {
                self.report.rejected += 1;
                self.metrics.rejected += 1;
                if let Some(r) = &row {
                    for c in r.cells.values() {
                        self.meta.clock.observe(c.mark.at);
                    }
                }
                let remain: Vec<Op> = self.outbox.on_row(&key).cloned().collect();
                if let Some(base) = self.replica.reject(&key, row.as_ref(), remain.iter()) {
                    Self::put_base(txn, base_at, key, base);
                }
                let rej = Rejection { op, reason, code };
                txn.put_rejections.push(rej.clone());
                self.rejections.insert(op_id, rej);
            }
        }
    }

    /// The server refused the attempt in flight without judging it (e.g. a 401
    /// that a fresh token fixes): drop it and send the ops again in a new attempt.
    pub fn abandon_attempt(&mut self, attempt_key: &str) -> Step {
        if self.in_flight.as_ref().is_some_and(|f| f.key == attempt_key) {
            self.in_flight = None;
        }
        self.next_step()
    }

    /// A push got no usable answer. `None` if `attempt_key` is not the attempt in
    /// flight (ignored). The ops stay queued, same opIds.
    pub fn on_push_failed(&mut self, attempt_key: &str, failure: Failure, now: u64) -> Option<Step> {
        let flight = self.in_flight.take_if(|f| f.key == attempt_key)?;
        if failure.outcome_unknown() {
            self.metrics.unknown_outcomes += 1;
            for id in &flight.op_ids {
                self.op_state.entry(id.clone()).or_default().unknown = true;
            }
        }
        Some(self.after_failure(failure, now))
    }

    fn after_failure(&mut self, failure: Failure, now: u64) -> Step {
        if let Some(r) = failure.recovery() {
            return self.require_recovery(r);
        }
        match failure {
            Failure::PayloadTooLarge if self.max_batch > 1 => {
                self.max_batch = (self.max_batch / 2).max(1);
                self.next_step()
            }
            Failure::PayloadTooLarge => self.require_recovery(Recovery {
                code: "payload_too_large".into(),
                message: "a single op is larger than the server accepts".into(),
            }),
            Failure::RateLimited { retry_after_ms } => self.wait(now + retry_after_ms),
            _ => {
                let d = self.backoff.next_delay(&mut self.rng);
                self.wait(now + d)
            }
        }
    }

    fn wait(&mut self, until: u64) -> Step {
        self.retry_at = Some(until);
        self.report.cursor = self.meta.cursor;
        Step::Wait { until, report: self.report.clone() }
    }

    /// Marks sync as blocked until the user acts (also for storage failures
    /// seen by the adapter). Returns the blocked step.
    pub fn require_recovery(&mut self, r: Recovery) -> Step {
        if self.recovery.is_none() {
            self.metrics.recovery_required += 1;
        }
        self.in_flight = None;
        self.pull_in_flight = None;
        self.recovery = Some(r.clone());
        Step::Blocked(r)
    }

    /// The user acted (signed in again, …): sync may go on.
    pub fn clear_recovery(&mut self) {
        self.recovery = None;
        self.backoff.reset();
    }

    /// A pull page arrived. `None` if no pull from that cursor is in flight
    /// (a late page: ignored). Otherwise commit the txn (rows and cursor
    /// together), then do the step.
    pub fn on_pull_response(&mut self, cursor: u64, page: PullResponse, now: u64) -> Option<(Txn, Step)> {
        let _ = now;
        if self.pull_in_flight != Some(cursor) {
            return None;
        }
        self.pull_in_flight = None;
        self.backoff.reset();
        let mut txn = Txn::default();
        let mut base_at: HashMap<RowKey, usize> = HashMap::new();
        for change in &page.changes {
            for c in change.row.cells.values() {
                self.meta.clock.observe(c.mark.at);
            }
            if let Some(base) = self.replica.merge_remote(&change.key, &change.row) {
                Self::put_base(&mut txn, &mut base_at, change.key.clone(), base);
            }
        }
        self.meta.cursor = self.meta.cursor.max(page.cursor);
        txn.meta = Some(self.meta.clone());
        self.metrics.pulls += 1;
        self.report.pulled += page.changes.len();
        self.report.cursor = self.meta.cursor;
        let step = if page.has_more && page.cursor > cursor {
            self.pull_in_flight = Some(self.meta.cursor);
            Step::Pull { cursor: self.meta.cursor, limit: self.config.pull_limit }
        } else if !self.outbox.is_empty() && self.recovery.is_none() {
            // Edits made during the pull: push them in this cycle too.
            Step::Push(self.new_attempt())
        } else {
            Step::Done(self.report.clone())
        };
        Some((txn, step))
    }

    /// A pull got no usable answer. `None` if no pull from that cursor is in flight.
    pub fn on_pull_failed(&mut self, cursor: u64, failure: Failure, now: u64) -> Option<Step> {
        if self.pull_in_flight != Some(cursor) {
            return None;
        }
        self.pull_in_flight = None;
        Some(self.after_failure(failure, now))
    }

    /// Applies a step that another engine on the same database committed
    /// (heard over a broadcast), so this engine's memory matches the store.
    pub fn absorb(&mut self, txn: &Txn) {
        if let Some(m) = &txn.meta {
            self.meta = self.meta.join(m);
        }
        let mut touched: Vec<RowKey> = Vec::new();
        for (k, r) in &txn.put_base {
            self.replica.put_base(k, r);
            touched.push(k.clone());
        }
        for at in &txn.delete_pending {
            if let Some(op) = self.outbox.remove_at(*at) {
                self.op_state.remove(&op.op_id);
                touched.push(op.row_key());
            }
        }
        for op in &txn.put_pending {
            touched.push(op.row_key());
            self.outbox.insert(op.clone());
        }
        for id in &txn.delete_rejections {
            self.rejections.remove(id);
        }
        for r in &txn.put_rejections {
            self.rejections.insert(r.op.op_id.clone(), r.clone());
        }
        touched.sort();
        touched.dedup();
        for key in touched {
            let ops: Vec<Op> = self.outbox.on_row(&key).cloned().collect();
            self.replica.rebuild(&key, ops.iter());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_server::MemoryServer;
    use crate::schema::Schema;

    fn engine(dev: &str) -> Engine {
        let snap = Snapshot { meta: Some(Meta::fresh(dev.into())), ..Snapshot::default() };
        Engine::open(snap, Config::default()).unwrap()
    }

    fn fields(pairs: &[(&str, Value)]) -> Fields {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    fn set(reps: i64) -> Fields {
        fields(&[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", reps.into())])
    }

    /// Records without a store (the meta the engine knows is the stored one).
    fn record(e: &mut Engine, row: &str, f: Fields, now: u64) -> Op {
        let d = e.draft("sets", row, f).unwrap();
        let meta = e.meta().clone();
        let (_txn, rec) = e.plan_record(d, &meta, now);
        let op = rec.ops[0].clone();
        e.recorded(rec);
        op
    }

    /// Runs one sync cycle against a memory server, no faults.
    fn sync(e: &mut Engine, s: &mut MemoryServer, now: u64) -> SyncReport {
        let mut step = e.start_sync(now);
        loop {
            step = match step {
                Step::Push(req) => {
                    let resp = s.push("u", &req).unwrap();
                    e.on_push_response(resp, now).unwrap().1
                }
                Step::Pull { cursor, limit } => e.on_pull_response(cursor, s.pull("u", cursor, limit), now).unwrap().1,
                Step::Done(r) => return r,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn bad_input_is_refused_and_changes_nothing() {
        let e = engine("d");
        assert!(matches!(e.draft("Sets", "r", set(1)), Err(EngineError::BadInput(_))));
        let err = e.draft("sets", "r", fields(&[("_x", 1.0.into())])).unwrap_err();
        assert_eq!(err.to_string(), "invalid edit: fields._x: field names starting with _ are reserved");
        assert_eq!(e.pending_len(), 0);
        assert_eq!(e.meta().counter, 0);
    }

    #[test]
    fn op_ids_and_row_ids_share_one_counter_and_at_is_monotonic() {
        let mut e = engine("d");
        let a = record(&mut e, "d-x", set(1), 100);
        let b = record(&mut e, "d-x", set(2), 50);
        assert_eq!((a.op_id.as_str(), b.op_id.as_str()), ("d:1", "d:2"));
        assert_eq!((a.at, b.at), (100, 101));
        assert_eq!(e.new_row_id().unwrap(), "d-3");
        assert_eq!(e.meta().counter, ids::BLOCK);
    }

    #[test]
    fn two_engines_on_one_store_never_share_a_number() {
        let mut a = engine("d");
        let mut b = engine("d");
        let mut stored = a.meta().clone();
        let mut seen = std::collections::HashSet::new();
        for i in 0..(3 * ids::BLOCK) {
            let e = if i % 3 == 0 { &mut a } else { &mut b };
            let d = e.draft("sets", "r", set(1)).unwrap();
            let (txn, rec) = e.plan_record(d, &stored, i);
            stored = txn.meta.clone().unwrap();
            assert!(seen.insert(rec.ops[0].op_id.clone()), "number reused");
            assert!(seen.insert(OpId::new(format!("at{}", rec.ops[0].at))), "at reused");
            e.recorded(rec);
        }
    }

    #[test]
    fn many_drafts_in_one_step_take_distinct_numbers_across_blocks_and_increasing_ats() {
        let mut a = engine("d");
        let mut b = engine("d");
        let mut stored = a.meta().clone();
        let mut seen = std::collections::HashSet::new();
        let mut last_at = 0;
        for (round, n) in [(0u64, 5usize), (1, 3 * ids::BLOCK as usize + 7), (2, 1), (3, ids::BLOCK as usize)] {
            let e = if round % 2 == 0 { &mut a } else { &mut b };
            let drafts = (0..n).map(|_| e.draft("sets", "r", set(1)).unwrap()).collect();
            let (txn, rec) = e.plan_records(drafts, &stored, 10);
            stored = txn.meta.clone().unwrap();
            assert_eq!(txn.put_pending, rec.ops);
            assert_eq!(rec.ops.len(), n);
            for op in &rec.ops {
                assert!(seen.insert(op.op_id.clone()), "number reused: {}", op.op_id.as_str());
                let num: u64 = op.op_id.as_str().rsplit(':').next().unwrap().parse().unwrap();
                assert!(num <= stored.counter, "number {num} beyond the stored counter {}", stored.counter);
                assert!(op.at > last_at, "at not increasing");
                last_at = op.at;
            }
            e.recorded(rec);
        }
        assert_eq!(a.pending_len() + b.pending_len(), 5 + 3 * ids::BLOCK as usize + 7 + 1 + ids::BLOCK as usize);
    }

    #[test]
    fn a_late_answer_to_an_old_attempt_is_ignored_and_changes_nothing() {
        let mut e = engine("d");
        let mut s = MemoryServer::new(Schema::workout());
        record(&mut e, "d-1", set(5), 10);
        let Step::Push(first) = e.start_sync(0) else { panic!() };
        let late = s.push("u", &first).unwrap();
        // The first attempt times out; a new attempt goes out.
        assert!(matches!(e.on_push_failed(&first.attempt_key, Failure::Timeout, 0), Some(Step::Wait { .. })));
        assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::UnknownOutcome);
        let Step::Push(second) = e.start_sync(5_000) else { panic!() };
        assert_ne!(first.attempt_key, second.attempt_key);
        assert_eq!(first.batch, second.batch, "same ops, same opIds");
        let before = (e.pending_len(), e.all_visible());
        assert!(e.on_push_response(late, 5_001).is_none());
        assert_eq!((e.pending_len(), e.all_visible()), before);
        assert_eq!(e.metrics().stale_acks_ignored, 1);
        assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::AwaitingAck);
        let resp = s.push("u", &second).unwrap();
        assert_eq!(resp.verdicts[0].outcome, Outcome::Duplicate);
        e.on_push_response(resp, 5_002).unwrap();
        assert_eq!(e.pending_len(), 0);
        assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::Synced);
    }

    #[test]
    fn a_rejected_op_disappears_keeps_its_reason_and_the_row_is_rebuilt() {
        let mut e = engine("d");
        let mut s = MemoryServer::new(Schema::workout());
        record(&mut e, "d-1", set(5), 10);
        sync(&mut e, &mut s, 11);
        record(&mut e, "d-1", fields(&[("reps", 500i64.into())]), 20);
        record(&mut e, "d-1", fields(&[("weightKg", 90.0.into())]), 21);
        let key = RowKey::new("sets", "d-1");
        assert_eq!(e.row(&key).unwrap().get("reps"), Some(&Value::Number(500.0)));
        let r = sync(&mut e, &mut s, 22);
        assert_eq!((r.applied, r.rejected), (1, 1));
        let row = e.row(&key).unwrap();
        assert_eq!(row.get("reps"), Some(&Value::Number(5.0)), "the rejected op is not visible");
        assert_eq!(row.get("weightKg"), Some(&Value::Number(90.0)), "the op after it stays");
        let st = e.status(&key);
        assert_eq!((st.phase, st.reason.as_deref()), (Phase::Rejected, Some("reps must be at most 100")));
        let id = e.rejections().next().unwrap().op.op_id.clone();
        assert!(e.dismiss(&id).is_some());
        assert_eq!(e.status(&key).phase, Phase::Synced);
    }

    #[test]
    fn pulled_echoes_change_nothing_and_other_devices_converge() {
        let mut s = MemoryServer::new(Schema::workout());
        let (mut a, mut b) = (engine("a"), engine("b"));
        record(&mut a, "a-1", set(5), 10);
        sync(&mut a, &mut s, 11);
        let before = a.all_visible();
        let r = sync(&mut a, &mut s, 12);
        assert_eq!(r.pulled, 0, "cursor already past our own change");
        let mut fresh = engine("a");
        sync(&mut fresh, &mut s, 13);
        assert_eq!(fresh.all_visible(), before);
        sync(&mut b, &mut s, 14);
        assert_eq!(b.all_visible(), a.all_visible());
    }

    #[test]
    fn an_edit_made_after_seeing_a_remote_edit_wins_whatever_the_clocks() {
        let mut s = MemoryServer::new(Schema::workout());
        let (mut a, mut b) = (engine("a"), engine("b"));
        record(&mut a, "a-1", set(5), 1_000_000);
        sync(&mut a, &mut s, 0);
        sync(&mut b, &mut s, 0);
        record(&mut b, "a-1", fields(&[("reps", 6i64.into())]), 10); // b's clock is far behind
        sync(&mut b, &mut s, 0);
        sync(&mut a, &mut s, 0);
        assert_eq!(a.row(&RowKey::new("sets", "a-1")).unwrap().get("reps"), Some(&Value::Number(6.0)));
    }

    #[test]
    fn deletes_hide_rows_and_restores_bring_them_back() {
        let mut s = MemoryServer::new(Schema::workout());
        let (mut a, mut b) = (engine("a"), engine("b"));
        record(&mut a, "a-1", set(5), 10);
        let d = a.draft_deleted("sets", "a-1", true).unwrap();
        let m = a.meta().clone();
        let (_, rec) = a.plan_record(d, &m, 11);
        a.recorded(rec);
        assert!(a.rows("sets").is_empty());
        sync(&mut a, &mut s, 12);
        sync(&mut b, &mut s, 12);
        assert!(b.rows("sets").is_empty());
        assert!(b.all_visible().values().next().unwrap().is_deleted(), "the tombstone travelled");
        let d = b.draft_deleted("sets", "a-1", false).unwrap();
        let m = b.meta().clone();
        let (_, rec) = b.plan_record(d, &m, 13);
        b.recorded(rec);
        assert_eq!(b.rows("sets").len(), 1);
    }

    #[test]
    fn failures_back_off_and_auth_and_schema_require_recovery() {
        let mut e = engine("d");
        record(&mut e, "d-1", set(5), 10);
        let Step::Push(req) = e.start_sync(0) else { panic!() };
        let Some(Step::Wait { until, .. }) = e.on_push_failed(&req.attempt_key, Failure::Network("offline".into()), 1000) else { panic!() };
        assert!((1000..=2000).contains(&until));
        let Step::Push(req) = e.start_sync(until) else { panic!() };
        let step = e.on_push_failed(&req.attempt_key, Failure::SchemaTooNew("v2".into()), until).unwrap();
        assert!(matches!(step, Step::Blocked(ref r) if r.code == "schema_too_new"));
        assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::RecoveryRequired);
        assert!(matches!(e.start_sync(0), Step::Blocked(_)));
        assert_eq!(e.pending_len(), 1, "nothing lost");
        e.clear_recovery();
        assert!(matches!(e.start_sync(0), Step::Push(_)));
    }

    #[test]
    fn payload_too_large_halves_the_batch() {
        let mut e = engine("d");
        for i in 0..10 {
            record(&mut e, &format!("d-{i}"), set(5), 10 + i);
        }
        let Step::Push(req) = e.start_sync(0) else { panic!() };
        assert_eq!(req.batch.len(), 10);
        let Some(Step::Push(req2)) = e.on_push_failed(&req.attempt_key, Failure::PayloadTooLarge, 0) else { panic!() };
        assert_eq!(req2.batch.len(), 10, "the limit halves to 500: the 10 ops still fit");
        let mut e2 = Engine::open(
            Snapshot { meta: Some(Meta::fresh("x".into())), ..Snapshot::default() },
            Config { max_batch: 8, ..Config::default() },
        )
        .unwrap();
        for i in 0..10 {
            record(&mut e2, &format!("x-{i}"), set(5), 10 + i);
        }
        let Step::Push(r) = e2.start_sync(0) else { panic!() };
        let Some(Step::Push(r2)) = e2.on_push_failed(&r.attempt_key, Failure::PayloadTooLarge, 0) else { panic!() };
        assert_eq!(r2.batch.len(), 4);
    }

    #[test]
    fn empty_answers_are_called_again_at_once_then_backed_off() {
        let mut e = engine("d");
        record(&mut e, "d-1", set(5), 10);
        let Step::Push(mut req) = e.start_sync(0) else { panic!() };
        for _ in 0..MAX_EMPTY_ANSWERS {
            let empty = PushResponse { attempt_key: req.attempt_key.clone(), verdicts: vec![], now: None };
            let Some((_, Step::Push(next))) = e.on_push_response(empty, 0) else { panic!("call again now") };
            req = next;
        }
        let empty = PushResponse { attempt_key: req.attempt_key.clone(), verdicts: vec![], now: None };
        assert!(matches!(e.on_push_response(empty, 0), Some((_, Step::Wait { .. }))));
        assert_eq!(e.pending_len(), 1, "nothing lost");
    }

    #[test]
    fn a_1200_op_queue_drains_in_two_pushes() {
        let mut e = engine("d");
        let mut s = MemoryServer::new(Schema::workout());
        for i in 0..1200 {
            record(&mut e, &format!("d-r{i}"), set(5), 10 + i);
        }
        let mut pushes = 0;
        let mut step = e.start_sync(0);
        loop {
            step = match step {
                Step::Push(req) => {
                    pushes += 1;
                    e.on_push_response(s.push("u", &req).unwrap(), 0).unwrap().1
                }
                Step::Pull { cursor, limit } => e.on_pull_response(cursor, s.pull("u", cursor, limit), 0).unwrap().1,
                Step::Done(_) => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(pushes, 2);
        assert_eq!(e.pending_len(), 0);
        assert_eq!(s.rows("u").len(), 1200);
    }

    #[test]
    fn absorb_follows_another_engine_on_the_same_database() {
        let mut s = MemoryServer::new(Schema::workout());
        let (mut a, mut b) = (engine("d"), engine("d"));
        let d = a.draft("sets", "d-1", set(5)).unwrap();
        let m = a.meta().clone();
        let (txn, rec) = a.plan_record(d, &m, 10);
        a.recorded(rec);
        b.absorb(&txn);
        assert_eq!(b.all_visible(), a.all_visible());
        let mut step = b.start_sync(0);
        let mut txns = vec![];
        loop {
            step = match step {
                Step::Push(req) => {
                    let (t, st) = b.on_push_response(s.push("u", &req).unwrap(), 0).unwrap();
                    txns.push(t);
                    st
                }
                Step::Pull { cursor, limit } => {
                    let (t, st) = b.on_pull_response(cursor, s.pull("u", cursor, limit), 0).unwrap();
                    txns.push(t);
                    st
                }
                _ => break,
            }
        }
        for t in &txns {
            a.absorb(t);
        }
        assert_eq!(a.pending_len(), 0);
        assert_eq!(a.all_visible(), b.all_visible());
        assert_eq!(a.cursor(), b.cursor());
    }
}
