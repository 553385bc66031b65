//! The push loop, once for both backends (PROTOCOL §3): lock → load → judge →
//! remember → write, under the locks of the batch's spaces (§3c), judged
//! again from the start when another writer remembered one of the batch's
//! ops first.
//!
//! A backend brings only its SQL, as a [`PushTxn`]: how it takes the spaces'
//! locks, loads rows, verdicts and roles, remembers verdicts, writes rows and heads.
//! The order of the steps, the rule "remember before write", the retry on a
//! conflict, the faults and the probes live here, and nowhere else.

use marksync::judge::{Judgement, Limits, RowWrite};
use marksync::protocol::Op;
use marksync::schema::Schema;
use marksync::space::{self, SpaceId};

use super::{
    answered_by_another_writer, judge_loaded, verdict_columns, PushControl, PushError, SavedVerdict, StoreError,
    StoredRow, VerdictColumns, MAX_JUDGE_ATTEMPTS,
};

/// The distinct spaces, placed rows and opIds of the ops that may be judged.
pub(crate) struct BatchKeys<'a> {
    /// Every space the batch names (an op without one: the sender's personal
    /// space), once each, in byte order: the order their locks are taken in,
    /// so two pushes never wait for each other in a cycle.
    pub(crate) spaces: Vec<&'a str>,
    /// (space, table, rowId) of every row the batch edits, once each.
    pub(crate) rows: Vec<(&'a str, &'a str, &'a str)>,
    /// Every opId of the batch, once each.
    pub(crate) ops: Vec<&'a str>,
}

impl<'a> BatchKeys<'a> {
    /// The keys of the first [`marksync::protocol::MAX_JUDGED_PER_PUSH`] ops
    /// of a batch whose sender's personal space is `personal`.
    pub(crate) fn of(personal: &'a str, batch: &'a [Op]) -> BatchKeys<'a> {
        let judged = &batch[..batch.len().min(marksync::protocol::MAX_JUDGED_PER_PUSH)];
        let mut seen_rows = std::collections::HashSet::with_capacity(judged.len());
        let mut seen_ops = std::collections::HashSet::with_capacity(judged.len());
        let mut spaces = std::collections::BTreeSet::new();
        let mut keys = BatchKeys {
            spaces: Vec::new(),
            rows: Vec::with_capacity(judged.len()),
            ops: Vec::with_capacity(judged.len()),
        };
        for op in judged {
            let space = op.space_or(personal);
            spaces.insert(space);
            if seen_rows.insert((space, op.table.as_str(), op.row_id.as_str())) {
                keys.rows.push((space, op.table.as_str(), op.row_id.as_str()));
            }
            if seen_ops.insert(op.op_id.as_str()) {
                keys.ops.push(op.op_id.as_str());
            }
        }
        keys.spaces = spaces.into_iter().collect();
        keys
    }
}

/// What step 2 loads.
pub(crate) struct Loaded {
    /// The stored rows of the batch's placed rows.
    pub(crate) rows: Vec<StoredRow>,
    /// The sender's saved verdicts of the batch's opIds.
    pub(crate) verdicts: Vec<SavedVerdict>,
    /// The sender's memberships in the batch's spaces: (space, role).
    pub(crate) roles: Vec<(String, String)>,
}

/// One push transaction of a backend: the SQL of each step. Every method runs
/// inside the transaction that [`PushBackend::begin`] opened.
#[allow(async_fn_in_trait)]
pub(crate) trait PushTxn: Sized {
    /// Step 1: makes sure the sender's personal space has its head row when
    /// the batch writes there (`personal`), takes the locks of `spaces` (in
    /// the order given, held until commit or rollback) and returns the heads
    /// of those that exist. A space no one created is never made here.
    async fn lock(
        &mut self,
        personal: Option<&str>,
        spaces: &[&str],
        ctl: &PushControl,
    ) -> Result<Vec<(String, i64)>, StoreError>;
    /// Step 2: the stored rows of the batch's placed rows, the sender's saved
    /// verdicts of its opIds and the sender's roles in its spaces, one query each.
    async fn load(&mut self, sender: &str, keys: &BatchKeys<'_>) -> Result<Loaded, StoreError>;
    /// Step 4: inserts the sender's verdicts unless one is already remembered
    /// (`ON CONFLICT DO NOTHING`); how many were inserted.
    async fn remember(&mut self, sender: &str, verdicts: &VerdictColumns) -> Result<usize, StoreError>;
    /// Step 5: upserts the rows the batch moved, each in its space.
    async fn write_rows(&mut self, writes: &[RowWrite]) -> Result<(), StoreError>;
    /// Step 5: the new heads of the spaces the batch moved.
    async fn write_heads(&mut self, heads: &[(SpaceId, u64)]) -> Result<(), StoreError>;
    /// Tells the other server processes on this database that these spaces'
    /// heads grew, delivered only if and when the transaction commits
    /// (PostgreSQL `NOTIFY`). Nothing for a backend one process owns (SQLite).
    async fn announce(&mut self, heads: &[(SpaceId, u64)]) -> Result<(), StoreError> {
        let _ = heads;
        Ok(())
    }
    /// Commits: the verdicts, rows and heads become durable together.
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

/// Judges `sender`'s `batch` in one transaction under the locks of its
/// spaces, persists the judgement — verdicts before rows — and returns it.
pub(crate) async fn push<B: PushBackend>(
    backend: &B,
    sender: &str,
    schema: &Schema,
    batch: &[Op],
    limits: &Limits,
    ctl: &PushControl,
) -> Result<Judgement, PushError> {
    let personal = space::personal(sender);
    let keys = BatchKeys::of(&personal, batch);
    let writes_personal = keys.spaces.contains(&personal.as_str()).then_some(personal.as_str());
    for _attempt in 0..MAX_JUDGE_ATTEMPTS {
        let mut tx = backend.begin().await?;
        // 1. lock.
        let heads = tx.lock(writes_personal, &keys.spaces, ctl).await?;
        let inside = ctl.probe.as_ref().map(|p| p.enter(sender));
        // 2. load.
        let loaded = tx.load(sender, &keys).await?;
        // 3. judge: every rule is in the core.
        let judgement = judge_loaded(schema, sender, batch, limits, heads, loaded, ctl).await?;
        // 4. remember, before any row is written.
        if !judgement.remember.is_empty() {
            let v = verdict_columns(&judgement);
            let inserted = tx.remember(sender, &v).await?;
            if answered_by_another_writer(ctl, sender, v.ids.len(), inserted) {
                drop(inside);
                tx.rollback().await?;
                continue;
            }
        }
        // 5. write the moved rows and the heads.
        if !judgement.writes.is_empty() {
            tx.write_rows(&judgement.writes).await?;
            tx.write_heads(&judgement.heads).await?;
            tx.announce(&judgement.heads).await?;
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
