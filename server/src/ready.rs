//! Readiness: whether this server can do its work now — the database answers
//! a read, takes a write, and carries the migrations this server knows. The
//! answer is kept for a second and computed by one probe at a time, so that
//! probes (which need no credential) can neither queue writes behind the
//! pushes on SQLite's single writer nor multiply a database's load.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::store::Store;

/// How long an answer is served again before a new probe runs.
const FRESH: Duration = Duration::from_secs(1);
/// The longest a probe waits for the database: past it, not ready.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The last readiness answer, and when it was made.
#[derive(Debug, Default)]
pub struct Readiness {
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Readiness {
    /// Ready, or why not in an operator's words.
    pub async fn check(&self, store: &Store) -> Result<(), String> {
        // Held across the probe: probes arriving meanwhile wait for its answer.
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last {
            if at.elapsed() < FRESH {
                return answer.clone();
            }
        }
        let answer = match tokio::time::timeout(PROBE_TIMEOUT, store.ready()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("the database did not answer the probe within {} s", PROBE_TIMEOUT.as_secs())),
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}
