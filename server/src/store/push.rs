//! The push loop, once for both backends (PROTOCOL §3): lock → load → judge →
//! remember → write, under the user's lock, judged again from the start when
//! another writer remembered one of the batch's ops first.
//!
//! A backend brings only its SQL, as a [`PushTxn`]: how it takes the user's
//! lock, loads rows and verdicts, remembers verdicts, writes rows and the head.
//! The order of the steps, the rule "remember before write", the retry on a
//! conflict, the faults and the probes live here, and nowhere else.

use marksync::judge::{Judgement, Limits, RowWrite};
use marksync::protocol::Op;
use marksync::schema::Schema;

use super::{
    answered_by_another_writer, judge_loaded, verdict_columns, PushControl, PushError, SavedVerdict, StoreError,
    StoredRow, VerdictColumns, MAX_JUDGE_ATTEMPTS,
};

/// The distinct row keys and opIds of the ops that may be judged, in batch order.
pub(crate) struct BatchKeys<'a> {
    /// (table, rowId) of every row the batch edits, once each.
    pub(crate) rows: Vec<(&'a str, &'a str)>,
    /// Every opId of the batch, once each.
    pub(crate) ops: Vec<&'a str>,
}

impl<'a> BatchKeys<'a> {
    /// The keys of the first [`marksync::protocol::MAX_JUDGED_PER_PUSH`] ops.
    pub(crate) fn of(batch: &'a [Op]) -> BatchKeys<'a> {
        let judged = &batch[..batch.len().min(marksync::protocol::MAX_JUDGED_PER_PUSH)];
        let mut seen_rows = std::collections::HashSet::with_capacity(judged.len());
        let mut seen_ops = std::collections::HashSet::with_capacity(judged.len());
        let mut keys = BatchKeys { rows: Vec::with_capacity(judged.len()), ops: Vec::with_capacity(judged.len()) };
        for op in judged {
            if seen_rows.insert((op.table.as_str(), op.row_id.as_str())) {
                keys.rows.push((op.table.as_str(), op.row_id.as_str()));
            }
            if seen_ops.insert(op.op_id.as_str()) {
                keys.ops.push(op.op_id.as_str());
            }
        }
        keys
    }
}

/// One push transaction of a backend: the SQL of each step. Every method runs
/// inside the transaction that [`PushBackend::begin`] opened.
#[allow(async_fn_in_trait)]
pub(crate) trait PushTxn: Sized {
    /// Step 1: makes sure the user's head row exists, takes the user's lock
    /// (held until commit or rollback) and returns the head.
    async fn lock(&mut self, user: &str, ctl: &PushControl) -> Result<i64, StoreError>;
    /// Step 2: the stored rows of the batch's row keys and the saved verdicts
    /// of its opIds, one query each.
    async fn load(
        &mut self,
        user: &str,
        keys: &BatchKeys<'_>,
    ) -> Result<(Vec<StoredRow>, Vec<SavedVerdict>), StoreError>;
    /// Step 4: inserts the verdicts unless one is already remembered
    /// (`ON CONFLICT DO NOTHING`); how many were inserted.
    async fn remember(&mut self, user: &str, verdicts: &VerdictColumns) -> Result<usize, StoreError>;
    /// Step 5: upserts the rows the batch moved.
    async fn write_rows(&mut self, user: &str, writes: &[RowWrite]) -> Result<(), StoreError>;
    /// Step 5: the user's new head.
    async fn write_head(&mut self, user: &str, head: u64) -> Result<(), StoreError>;
    /// Tells the other server processes on this database that the user's
    /// head grew, delivered only if and when the transaction commits
    /// (PostgreSQL `NOTIFY`). Nothing for a backend one process owns (SQLite).
    async fn announce(&mut self, user: &str, head: u64) -> Result<(), StoreError> {
        let _ = (user, head);
        Ok(())
    }
    /// Commits: the verdicts, rows and head become durable together.
    async fn commit(self) -> Result<(), StoreError>;
    /// Rolls back: nothing of the attempt is kept.
    async fn rollback(self) -> Result<(), StoreError>;
}

/// A backend that opens push transactions.
#[allow(async_fn_in_trait)]
pub(crate) trait PushBackend {
    /// Its transaction.
    type Txn: PushTxn;
    /// Opens a write transaction (SQLite: `BEGIN IMMEDIATE` on the single writer).
    async fn begin(&self) -> Result<Self::Txn, StoreError>;
}

/// Judges `batch` for `user` in one transaction under the user's lock,
/// persists the judgement — verdicts before rows — and returns it.
pub(crate) async fn push<B: PushBackend>(
    backend: &B,
    user: &str,
    schema: &Schema,
    batch: &[Op],
    limits: &Limits,
    ctl: &PushControl,
) -> Result<Judgement, PushError> {
    let keys = BatchKeys::of(batch);
    for _attempt in 0..MAX_JUDGE_ATTEMPTS {
        let mut tx = backend.begin().await?;
        // 1. lock.
        let head = tx.lock(user, ctl).await?;
        let inside = ctl.probe.as_ref().map(|p| p.enter(user));
        // 2. load.
        let (stored, saved) = tx.load(user, &keys).await?;
        // 3. judge: every rule is in the core.
        let (judgement, old_head) = judge_loaded(schema, batch, limits, head, stored, saved, ctl).await?;
        // 4. remember, before any row is written.
        if !judgement.remember.is_empty() {
            let v = verdict_columns(&judgement);
            let inserted = tx.remember(user, &v).await?;
            if answered_by_another_writer(ctl, user, v.ids.len(), inserted) {
                drop(inside);
                tx.rollback().await?;
                continue;
            }
        }
        // 5. write the moved rows and the head.
        if !judgement.writes.is_empty() {
            tx.write_rows(user, &judgement.writes).await?;
        }
        if judgement.head != old_head {
            tx.write_head(user, judgement.head).await?;
        }
        if !judgement.writes.is_empty() {
            tx.announce(user, judgement.head).await?;
        }
        drop(inside);
        if ctl.fail_before_commit {
            tx.rollback().await?;
            return Err(PushError::InjectedFailure);
        }
        tx.commit().await?;
        return Ok(judgement);
    }
    Err(StoreError::Conflict.into())
}
