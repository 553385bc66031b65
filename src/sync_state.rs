//! The device's sync state, durable and shared (PROTOCOL §7): which ops were
//! sent and how often, which attempt is out, what is in doubt, what sync
//! waits for, and the counters.
//!
//! It lives in the local store beside the outbox, so that every context on
//! one database (tabs, the Service Worker) and every reload tells the same
//! story about an op: an op whose request went out is never shown as merely
//! queued again. Only the context running a sync cycle (under the database's
//! lock) writes it; the others take its copy from the broadcast of each
//! committed step, and from the store at open.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::attempt::Recovery;
use crate::protocol::OpId;

/// When the engine stops retrying a batch on its own (PROTOCOL §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Sends of one op with no usable answer before the server is asked what
    /// it remembers (default 10).
    pub max_attempts: u32,
    /// Time spent on one op — in requests and in the waits between them,
    /// never while the browser knows it is offline or the app is closed —
    /// before the same check (default 1 h).
    pub max_elapsed_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 10, max_elapsed_ms: 3_600_000 }
    }
}

/// What is known of the sends of one pending op.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpAttempts {
    /// How many times it was sent.
    pub attempts: u32,
    /// Sends that count toward [`RetryPolicy::max_attempts`]: those whose
    /// outcome is unknown, made when the backoff said (a person's early
    /// `sync()` does not spend the budget).
    #[serde(default)]
    pub counted: u32,
    /// Whether its last attempt ended with no usable answer (it may have been judged).
    pub unknown: bool,
    /// Whether an earlier attempt ended with no usable answer since the
    /// server last said it never judged it: the server may hold its verdict
    /// even when the last attempt was refused unjudged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub doubted: bool,
    /// The server's words when a push of this op alone was refused as too
    /// large while it was in doubt: once the server says it never judged
    /// it, it is rejected with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_large: Option<String>,
    /// The attemptKey of its last attempt.
    pub last_key: String,
    /// When it was first sent (ms, device clock).
    pub first_sent_at: u64,
    /// When it was last sent.
    pub last_sent_at: u64,
    /// Time counted against [`RetryPolicy::max_elapsed_ms`]: its requests and
    /// the backoff waits scheduled after them.
    pub charged_ms: u64,
}

/// The attempt whose request is out, recorded before it leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flight {
    /// Its attemptKey.
    pub key: String,
    /// The ops it carries, in batch order.
    pub op_ids: Vec<OpId>,
    /// When it left (ms, device clock).
    pub sent_at: u64,
}

/// Counters over the database's life, for dashboards and tests: each event
/// is counted once, by the context that saw it, and kept in the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metrics {
    /// Push attempts sent.
    pub attempts: u64,
    /// Attempts that ended with an unknown outcome (including attempts whose
    /// context closed with the request out).
    pub unknown_outcomes: u64,
    /// Late answers to old attempts, ignored.
    pub stale_acks_ignored: u64,
    /// Ops answered `applied`.
    pub applied: u64,
    /// Ops answered `duplicate`.
    pub duplicates: u64,
    /// Ops answered `rejected`.
    pub rejected: u64,
    /// Ops settled by asking the server what it remembers (`/v1/verdicts`).
    pub reconciled: u64,
    /// Times sync became recovery-required.
    pub recovery_required: u64,
    /// Pull pages merged.
    pub pulls: u64,
    /// Times the database was found cleared under the library and filled
    /// again from what a context held (PROTOCOL §7).
    #[serde(default)]
    pub storage_resets: u64,
}

/// The durable, shared sync state of one local database.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncState {
    /// Pending ops sent at least once.
    pub ops: BTreeMap<OpId, OpAttempts>,
    /// The attempt whose request is out, if any.
    pub flight: Option<Flight>,
    /// When the next attempt is due, if sync waits after a failure.
    pub next_retry_at: Option<u64>,
    /// What sync waits for, if it cannot go on alone.
    pub recovery: Option<Recovery>,
    /// The counters.
    pub metrics: Metrics,
    /// How many committed steps wrote base rows or the followed spaces. A
    /// context that starts a cycle on fewer than the store holds has not yet
    /// heard another context's step: it reloads before building on its rows
    /// (a base row written from a stale copy would undo the other's merge).
    pub base_version: u64,
    /// How many committed steps wrote this record. Every such step is taken
    /// under the database's cycle lock, on the record as stored: the store's
    /// copy only grows. A copy heard with fewer is older than the one held
    /// (a broadcast can arrive after the hearer's own later steps) and is not
    /// taken: taken, it would put back an old flight and an old
    /// `base_version`, and the hearer's next step would write them.
    pub step: u64,
    /// Why the last request got no usable answer, in words (cleared by the
    /// next answer): the same reason in every context and after a reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The last sync cycles of any context of the device, oldest first (at
    /// most [`MAX_CYCLES`]): what the inspector shows.
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    pub cycles: std::collections::VecDeque<CycleLog>,
}

impl SyncState {
    /// Whether a (pending) op is over the policy's limits.
    pub fn exhausted(&self, id: &OpId, policy: &RetryPolicy) -> bool {
        self.ops.get(id).is_some_and(|a| a.unknown && (a.counted >= policy.max_attempts || a.charged_ms >= policy.max_elapsed_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_is_exhausted_by_attempts_or_time_only_while_in_doubt() {
        let p = RetryPolicy { max_attempts: 3, max_elapsed_ms: 1_000 };
        let id = OpId::new("d:1");
        let mut s = SyncState::default();
        s.ops.insert(id.clone(), OpAttempts { attempts: 3, counted: 3, unknown: true, ..OpAttempts::default() });
        assert!(s.exhausted(&id, &p));
        s.ops.insert(id.clone(), OpAttempts { attempts: 3, counted: 3, unknown: false, ..OpAttempts::default() });
        assert!(!s.exhausted(&id, &p), "a 429 or a partial answer is no doubt");
        s.ops.insert(id.clone(), OpAttempts { attempts: 1, unknown: true, charged_ms: 1_000, ..OpAttempts::default() });
        assert!(s.exhausted(&id, &p));
        assert!(!s.exhausted(&OpId::new("d:2"), &p));
    }

    #[test]
    fn an_older_record_without_new_fields_still_reads() {
        let s: SyncState = serde_json::from_str(r#"{"ops":{},"metrics":{"attempts":2}}"#).unwrap();
        assert_eq!(s.metrics.attempts, 2);
        assert!(s.flight.is_none());
    }
}

/// How many sync cycles the sync state keeps.
pub const MAX_CYCLES: usize = 10;
/// How many verdicts a kept cycle lists (the counts cover them all).
pub const MAX_LOGGED_VERDICTS: usize = 10;

/// One sync cycle as it ran, for a person reading the inspector or a bug
/// report: stored with the sync state, so a page sees the cycles the
/// Service Worker ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CycleLog {
    /// When it started (ms, device clock).
    pub started_at: u64,
    /// How long it ran (ms).
    pub ms: u64,
    /// Who ran it: `tab` or `worker`.
    pub by: String,
    /// The attemptKeys of the pushes it sent, in order.
    pub attempts: Vec<String>,
    /// Ops it sent (each once).
    pub sent: usize,
    /// Verdicts it took: applied, duplicate, rejected.
    pub applied: usize,
    /// Answered `duplicate`.
    pub duplicate: usize,
    /// Answered `rejected`.
    pub rejected: usize,
    /// The first [`MAX_LOGGED_VERDICTS`] verdicts, each `{opId, status, code?}`.
    pub verdicts: Vec<VerdictLog>,
    /// Late answers to old attempts it ignored.
    pub stale_ignored: usize,
    /// Ops settled by asking the server.
    pub reconciled: usize,
    /// Changes pulled.
    pub pulled: usize,
    /// How it ended: `done`, `waiting` (with `error`), `blocked` (with `error`).
    pub outcome: String,
    /// Why it did not finish, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One verdict as a cycle took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictLog {
    /// The op.
    pub op_id: OpId,
    /// `applied`, `duplicate` or `rejected`.
    pub status: String,
    /// The refusal's code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}
