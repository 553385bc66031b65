//! Fault injection (`--enable-faults` only): lose responses after commit,
//! delay pushes, fail pushes before commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `POST /__faults` body. Absent fields leave that fault as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    /// The next n pushes commit, then their connection is dropped without an answer.
    pub lose_responses: Option<u64>,
    /// Every push holds its spaces' locks this many milliseconds (after loading what
    /// the batch touches, before judging).
    pub delay_ms: Option<u64>,
    /// The next k pushes fail with 500 before committing (nothing is written).
    pub fail_before_commit: Option<u64>,
}

/// The faults in force.
#[derive(Debug, Default)]
pub struct Faults {
    lose_responses: AtomicU64,
    delay_ms: AtomicU64,
    fail_before_commit: AtomicU64,
}

/// The faults one push is subject to, taken when it starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushFaults {
    /// Drop the connection after commit.
    pub lose_response: bool,
    /// Hold the lock this long.
    pub delay: Duration,
    /// Roll back and answer 500.
    pub fail_before_commit: bool,
}

fn take_one(a: &AtomicU64) -> bool {
    a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

impl Faults {
    /// Sets the faults named in `req`; returns the faults now in force.
    pub fn set(&self, req: &FaultRequest) -> FaultRequest {
        if let Some(n) = req.lose_responses {
            self.lose_responses.store(n, Ordering::SeqCst);
        }
        if let Some(n) = req.delay_ms {
            self.delay_ms.store(n, Ordering::SeqCst);
        }
        if let Some(n) = req.fail_before_commit {
            self.fail_before_commit.store(n, Ordering::SeqCst);
        }
        FaultRequest {
            lose_responses: Some(self.lose_responses.load(Ordering::SeqCst)),
            delay_ms: Some(self.delay_ms.load(Ordering::SeqCst)),
            fail_before_commit: Some(self.fail_before_commit.load(Ordering::SeqCst)),
        }
    }

    /// The faults of the push that starts now (consumes the counted ones).
    /// A push that fails before commit does not also lose its response.
    pub fn take(&self) -> PushFaults {
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        if take_one(&self.fail_before_commit) {
            return PushFaults { fail_before_commit: true, delay, lose_response: false };
        }
        PushFaults { lose_response: take_one(&self.lose_responses), delay, fail_before_commit: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_faults_run_out() {
        let f = Faults::default();
        f.set(&FaultRequest { lose_responses: Some(1), delay_ms: Some(5), fail_before_commit: Some(1) });
        assert_eq!(
            f.take(),
            PushFaults { fail_before_commit: true, delay: Duration::from_millis(5), lose_response: false }
        );
        assert_eq!(
            f.take(),
            PushFaults { lose_response: true, delay: Duration::from_millis(5), fail_before_commit: false }
        );
        assert_eq!(f.take(), PushFaults { delay: Duration::from_millis(5), ..PushFaults::default() });
    }
}
