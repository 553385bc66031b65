//! Fair shares of work: each user's budget of judged ops, and of read work,
//! per second ([`RateLimiter`] buckets, one of each per user).
//!
//! The request rate alone does not bound what a user costs the server: one
//! request may carry a thousand ops or name ten thousand spaces. So work is
//! counted in what it costs:
//!
//! - **ops**: a push costs its ops, taken before its transaction opens (the
//!   body is parsed; nothing of the database is touched by a refusal);
//! - **reads**: a pull costs 1 and the spaces it names, paid before its
//!   snapshot opens, and the rows it read, paid after (they are known only
//!   then); a list (members, spaces, invitations), an event connect or a
//!   verdicts request costs 1 and the entries (spaces, opIds) it read. Read
//!   work is paid, never refused in the handler: it may leave a debt, and a
//!   user in debt is refused in the guard before the body is read, so a
//!   refused pull of 10,000 spaces costs its auth, not its parse.
//!
//! Every refusal is `429 rate_limited` with a `Retry-After` of when the
//! tokens will be back: the same answer as the request rate's.

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::rate::RateLimiter;

/// Which budget a piece of work is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Judged ops (`/v1/push`).
    Ops,
    /// Spaces named, rows and entries read (pulls, lists, event connects).
    Reads,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Ops => "ops",
            Work::Reads => "read work",
        }
    }
}

/// Every user's budgets; part of [`crate::AppState`]. A budget switched off
/// (`rate` 0) refuses nothing.
#[derive(Debug)]
pub struct Budgets {
    ops: Option<RateLimiter>,
    reads: Option<RateLimiter>,
}

impl Budgets {
    /// Budgets of `ops` and `reads`, each `(rate per second, burst)`; a rate of 0 switches one off.
    pub fn new(ops: (f64, f64), reads: (f64, f64)) -> Budgets {
        let bucket = |(rate, burst): (f64, f64)| (rate > 0.0).then(|| RateLimiter::new(rate, burst));
        Budgets { ops: bucket(ops), reads: bucket(reads) }
    }

    fn of(&self, work: Work) -> Option<&RateLimiter> {
        match work {
            Work::Ops => self.ops.as_ref(),
            Work::Reads => self.reads.as_ref(),
        }
    }

    /// Refuses `user` while their `work` budget is in debt (before a body is read).
    pub fn ready(&self, work: Work, user: &str, metrics: &Metrics) -> Result<(), ApiError> {
        match self.of(work).map(|b| b.ready(user)) {
            Some(Err(secs)) => Err(refusal(work, secs, metrics)),
            _ => Ok(()),
        }
    }

    /// Takes `cost` of `user`'s `work` budget, or refuses with when to come back: a batch
    /// of ops is judged whole or not at all.
    pub fn take(&self, work: Work, user: &str, cost: usize, metrics: &Metrics) -> Result<(), ApiError> {
        match self.of(work).map(|b| b.take(user, cost as f64)) {
            Some(Err(secs)) => Err(refusal(work, secs, metrics)),
            _ => Ok(()),
        }
    }

    /// Takes `cost` of `user`'s `work` budget for work already done (it may leave a debt).
    pub fn charge(&self, work: Work, user: &str, cost: usize) {
        if let Some(b) = self.of(work) {
            b.charge(user, cost as f64);
        }
    }
}

fn refusal(work: Work, secs: u64, metrics: &Metrics) -> ApiError {
    // Two counters, not a `Work` argument: metrics imports nothing of the budgets.
    match work {
        Work::Ops => metrics.refused_by_ops_budget(),
        Work::Reads => metrics.refused_by_reads_budget(),
    }
    ApiError {
        message: format!("this user's budget of {} per second is spent; retry later", work.name()),
        ..ApiError::rate_limited(secs)
    }
}
