//! The push (PROTOCOL §3), once for both dialects: lock → load → judge →
//! remember → write, in one transaction under the locks of the batch's
//! spaces (§3c), judged again from the start when another writer remembered
//! one of the batch's ops first. The order of the steps, the rule "remember
//! before write", the retry on a conflict, the faults and the probes live
//! here, and nowhere else; the SQL of each step is [`super::conn`]'s.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use marksync::judge::{judge_batch, judge_batch_with, Judgement, Known, Limits};
use marksync::protocol::{Op, MAX_JUDGED_PER_PUSH};
use marksync::schema::Schema;
use marksync::space;

use super::conn::{Backend, Conn};
use super::dialect::{Key, Pools, VerdictColumns};
use super::error::{DbError, PushError, MAX_JUDGE_ATTEMPTS};
use super::outbox;
use crate::metrics::SameUserProbe;
use crate::poke::Poke;

/// What a push may be asked to do besides judging (fault injection, probes).
#[derive(Debug, Clone, Default)]
pub struct PushControl {
    /// Hold the spaces' locks this long, after loading and before judging (`delayMs` fault).
    pub hold_lock_for: Duration,
    /// Roll back instead of committing and fail (`failBeforeCommit` fault).
    pub fail_before_commit: bool,
    /// The app's own rules ([`crate::rules`]), when it gave some.
    pub rules: Option<Arc<dyn crate::rules::Rules>>,
    /// Write a webhook delivery for each space whose rows moved (`--webhook-url`).
    pub deliveries: bool,
    /// Counts pushes of one user inside the lock at once (must never exceed 1).
    pub probe: Option<Arc<SameUserProbe>>,
    /// Test-only sabotage, see [`Sabotage`].
    #[cfg(feature = "sabotage")]
    pub sabotage: Sabotage,
}

/// Deliberately broken behaviours, used once to prove that the tests catch
/// them (feature `sabotage`, which only the tests turn on).
#[cfg(feature = "sabotage")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sabotage {
    /// The real judge.
    #[default]
    None,
    /// "write → remember": forget the saved verdicts and write the rows
    /// even when the verdict insert says the op was answered before.
    WriteBeforeRemember,
    /// Postgres: read the heads without `FOR UPDATE` — no lock — and let a
    /// user's pushes past their turn ([`crate::turn`]), so they overlap. The
    /// verdict insert then finds conflicts, and the push is judged again.
    NoLock,
    /// Pushes go to the writer without waiting for their user's turn
    /// ([`crate::turn`]); SQLite's writer still takes users in turn.
    NoTurn,
    /// No turns, and SQLite's writer serves in arrival order
    /// ([`super::writer`]): nothing stands between a flooder's queue and
    /// everyone else.
    Unfair,
    /// A user's reads run at once ([`crate::guard`]): concurrent pulls all
    /// find the read budget unspent before any of them pays for its work.
    ReadsAtOnce,
}

impl PushControl {
    /// Whether this push forgets what was remembered ([`Sabotage::WriteBeforeRemember`]).
    #[cfg(feature = "sabotage")]
    fn forgets(&self) -> bool {
        self.sabotage == Sabotage::WriteBeforeRemember
    }
    #[cfg(not(feature = "sabotage"))]
    fn forgets(&self) -> bool {
        false
    }

    /// Whether this push takes the spaces' locks (not under [`Sabotage::NoLock`]).
    #[cfg(feature = "sabotage")]
    fn locks(&self) -> bool {
        self.sabotage != Sabotage::NoLock
    }
    #[cfg(not(feature = "sabotage"))]
    fn locks(&self) -> bool {
        true
    }
}

/// The distinct spaces, placed rows and opIds of the ops that may be judged.
struct BatchKeys<'a> {
    /// Every space the batch names (an op without one: the sender's personal
    /// space), once each, in byte order: the order their locks are taken in,
    /// so two pushes never wait for each other in a cycle.
    spaces: Vec<&'a str>,
    /// Every row the batch edits, once each.
    rows: Vec<Key<'a>>,
    /// Every opId of the batch, once each.
    ops: Vec<&'a str>,
}

impl<'a> BatchKeys<'a> {
    /// The keys of the first [`MAX_JUDGED_PER_PUSH`] ops of a batch whose
    /// sender's personal space is `personal`.
    fn of(personal: &'a str, batch: &'a [Op]) -> BatchKeys<'a> {
        let judged = &batch[..batch.len().min(MAX_JUDGED_PER_PUSH)];
        let mut seen_rows = HashSet::with_capacity(judged.len());
        let mut seen_ops = HashSet::with_capacity(judged.len());
        let mut spaces = BTreeSet::new();
        let mut keys = BatchKeys {
            spaces: Vec::new(),
            rows: Vec::with_capacity(judged.len()),
            ops: Vec::with_capacity(judged.len()),
        };
        for op in judged {
            let space = op.space_or(personal);
            spaces.insert(space);
            let key = Key { space, table: op.table.as_str(), row_id: op.row_id.as_str() };
            if seen_rows.insert(key) {
                keys.rows.push(key);
            }
            if seen_ops.insert(op.op_id.as_str()) {
                keys.ops.push(op.op_id.as_str());
            }
        }
        keys.spaces = spaces.into_iter().collect();
        keys
    }
}

/// Judges `sender`'s `batch` in one transaction under the locks of its
/// spaces, persists the judgement — verdicts before rows — and returns it.
pub(crate) async fn push<D: Backend>(
    pools: &Pools<D>,
    sender: &str,
    schema: &Schema,
    batch: &[Op],
    limits: &Limits,
    ctl: &PushControl,
) -> Result<Judgement, PushError> {
    // The changes are listed only for the webhook's deliveries.
    let limits = &Limits { list_changes: ctl.deliveries, ..*limits };
    let personal = space::personal(sender);
    let keys = BatchKeys::of(&personal, batch);
    let writes_personal = keys.spaces.contains(&personal.as_str());
    for _attempt in 0..MAX_JUDGE_ATTEMPTS {
        let mut tx = pools.write_as(sender).await?;
        // 1. lock: the sender's personal space has its head row once the
        // batch writes there; a space no one created is never made here.
        if writes_personal {
            tx.ensure_head(&personal).await?;
        }
        let heads = tx.lock_heads(&keys.spaces, ctl.locks()).await?;
        let inside = ctl.probe.as_ref().map(|p| p.enter(sender));
        // 2. load what the batch touches, one query each.
        let mut known = Known { heads, ..Known::default() };
        let places;
        (known.rows, places) = tx.load_rows(&keys.rows).await?;
        let verdicts = tx.load_verdicts(sender, &keys.ops).await?;
        if !ctl.forgets() {
            known.verdicts = verdicts;
        }
        known.roles = tx.load_roles(sender, &keys.spaces).await?;
        if !ctl.hold_lock_for.is_zero() {
            tokio::time::sleep(ctl.hold_lock_for).await;
        }
        // 3. judge: every rule is in the core, and the app's own rules read
        // what they need first, inside a savepoint that keeps none of their writes.
        let judgement = match &ctl.rules {
            None => judge_batch(schema, sender, batch, known, limits)?,
            Some(rules) => {
                tx.savepoint().await?;
                let loaded = rules.load(D::app_db(&mut tx), sender, batch).await;
                tx.undo_savepoint().await?;
                let bound = crate::rules::Bound { rules: rules.as_ref(), loaded: loaded.map_err(PushError::Rules)? };
                judge_batch_with(schema, sender, batch, known, limits, &bound)?
            }
        };
        // 4. remember, before any row is written.
        if !judgement.remember.is_empty() {
            let v = VerdictColumns::of(&judgement.remember);
            let inserted = tx.remember(sender, &v, ctl.forgets()).await?;
            if answered_by_another_writer(ctl, sender, v.len(), inserted) {
                drop(inside);
                tx.rollback().await?;
                continue;
            }
        }
        // 5. write the moved rows and the heads.
        if !judgement.writes.is_empty() {
            if !tx.write_rows(&judgement.writes, &places).await? {
                judged_again(ctl, sender, "a row was stored, rewritten or removed by another writer");
                drop(inside);
                tx.rollback().await?;
                continue;
            }
            tx.write_heads(&judgement.heads).await?;
            for (space, head) in &judgement.heads {
                tx.announce(&Poke::Space { space: space.clone(), head: *head }).await?;
            }
            // 6. what the app's backend is owed, in the same transaction: a
            // committed change always has its delivery, a rolled-back one never.
            if ctl.deliveries {
                tx.enqueue_deliveries(&outbox::deliveries(sender, &judgement, crate::clock::now_ms_db())?).await?;
            }
        }
        drop(inside);
        if ctl.fail_before_commit {
            tx.rollback().await?;
            return Err(PushError::InjectedFailure);
        }
        tx.commit().await?;
        return Ok(judgement);
    }
    Err(DbError::Conflict.into())
}

/// Step 4's check: whether the verdict insert met verdicts another writer
/// remembered first (fewer rows in than sent), so the push must be judged
/// again.
fn answered_by_another_writer(ctl: &PushControl, user: &str, sent: usize, inserted: usize) -> bool {
    if inserted == sent || ctl.forgets() {
        return false;
    }
    judged_again(ctl, user, "verdicts answered by another writer");
    true
}

/// Logs why the push is judged again (another writer, not waited for, stored
/// first what it was about to: only where the spaces' locks were not taken)
/// and counts it on the probe.
fn judged_again(ctl: &PushControl, user: &str, why: &str) {
    tracing::warn!(user, why, "judging the push again");
    if let Some(p) = &ctl.probe {
        p.judged_again();
    }
}
