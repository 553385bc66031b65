//! Prometheus metrics, kept by hand: a few atomics and a text renderer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use marksync::protocol::{ErrorCode, Outcome};

/// Upper bounds (seconds) of the push latency histogram.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

const CODES: [ErrorCode; 7] = [
    ErrorCode::Unauthorized,
    ErrorCode::WrongUser,
    ErrorCode::BadRequest,
    ErrorCode::PayloadTooLarge,
    ErrorCode::SchemaTooNew,
    ErrorCode::RateLimited,
    ErrorCode::Internal,
];

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    pushes: AtomicU64,
    applied: AtomicU64,
    duplicate: AtomicU64,
    rejected: AtomicU64,
    pulled_rows: AtomicU64,
    pulls: AtomicU64,
    errors: [AtomicU64; 7],
    latency_buckets: [AtomicU64; 12],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    connections_open: AtomicU64,
    connections_evicted: AtomicU64,
    connections_refused: AtomicU64,
    refused_requests_cap: AtomicU64,
    refused_streams_cap: AtomicU64,
    refused_ops_budget: AtomicU64,
    streams_cut: AtomicU64,
    refused_reads_budget: AtomicU64,
    body_timeouts: AtomicU64,
    /// The probe of pushes of one user inside the lock at once.
    pub same_user: Arc<SameUserProbe>,
    /// The probe of push requests of one device (user + the deviceId of the
    /// attemptKey) in flight at once, from arrival to answer: a client keeps
    /// one sync cycle at a time across its tabs and worker, so this stays 1.
    pub same_device: Arc<SameUserProbe>,
}

impl Metrics {
    /// Sets how many connections are open now.
    pub fn connections_open(&self, n: usize) {
        self.connections_open.store(n as u64, Ordering::Relaxed);
    }
    /// Counts an idle connection closed to make room for a new one.
    pub fn connection_evicted(&self) {
        self.connections_evicted.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a new connection closed at once: the cap was reached and every connection was busy.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a request refused by a per-user cap (`stream`: of event streams, else of requests).
    pub fn refused_by_cap(&self, stream: bool) {
        let c = if stream { &self.refused_streams_cap } else { &self.refused_requests_cap };
        c.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts an event stream ended to give its place to a user holding fewer.
    pub fn stream_cut(&self) {
        self.streams_cut.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a request refused by the per-user budget of judged ops.
    pub fn refused_by_ops_budget(&self) {
        self.refused_ops_budget.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a request refused by the per-user budget of read work.
    pub fn refused_by_reads_budget(&self) {
        self.refused_reads_budget.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a body that did not arrive within the body timeout (`408`).
    pub fn body_timed_out(&self) {
        self.body_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one judged push: its verdicts and its latency.
    pub fn push_judged<'a>(&self, outcomes: impl Iterator<Item = &'a Outcome>, took: Duration) {
        self.pushes.fetch_add(1, Ordering::Relaxed);
        for o in outcomes {
            let c = match o {
                Outcome::Applied => &self.applied,
                Outcome::Duplicate => &self.duplicate,
                Outcome::Rejected { .. } => &self.rejected,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        let secs = took.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts one pull page of `rows` rows.
    pub fn pulled(&self, rows: usize) {
        self.pulls.fetch_add(1, Ordering::Relaxed);
        self.pulled_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts one whole-request error.
    pub fn error(&self, code: ErrorCode) {
        if let Some(i) = CODES.iter().position(|c| *c == code) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(2048);
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(s, "# HELP marksync_pushes_total Pushes judged (whole requests).");
        let _ = writeln!(s, "# TYPE marksync_pushes_total counter");
        let _ = writeln!(s, "marksync_pushes_total {}", g(&self.pushes));
        let _ = writeln!(s, "# HELP marksync_ops_total Ops answered, by verdict.");
        let _ = writeln!(s, "# TYPE marksync_ops_total counter");
        for (name, c) in [("applied", &self.applied), ("duplicate", &self.duplicate), ("rejected", &self.rejected)] {
            let _ = writeln!(s, "marksync_ops_total{{verdict=\"{name}\"}} {}", g(c));
        }
        let _ = writeln!(s, "# HELP marksync_push_duration_seconds Time to judge and commit one push.");
        let _ = writeln!(s, "# TYPE marksync_push_duration_seconds histogram");
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(s, "marksync_push_duration_seconds_bucket{{le=\"{le}\"}} {}", g(&self.latency_buckets[i]));
        }
        let count = g(&self.latency_count);
        let _ = writeln!(s, "marksync_push_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(s, "marksync_push_duration_seconds_sum {}", g(&self.latency_sum_us) as f64 / 1e6);
        let _ = writeln!(s, "marksync_push_duration_seconds_count {count}");
        let _ = writeln!(s, "# HELP marksync_pulls_total Pull pages served.");
        let _ = writeln!(s, "# TYPE marksync_pulls_total counter");
        let _ = writeln!(s, "marksync_pulls_total {}", g(&self.pulls));
        let _ = writeln!(s, "# HELP marksync_pulled_rows_total Rows sent by pull.");
        let _ = writeln!(s, "# TYPE marksync_pulled_rows_total counter");
        let _ = writeln!(s, "marksync_pulled_rows_total {}", g(&self.pulled_rows));
        let _ = writeln!(s, "# HELP marksync_http_errors_total Whole-request errors, by code.");
        let _ = writeln!(s, "# TYPE marksync_http_errors_total counter");
        for (i, code) in CODES.iter().enumerate() {
            let _ = writeln!(s, "marksync_http_errors_total{{code=\"{}\"}} {}", code.as_str(), g(&self.errors[i]));
        }
        let _ = writeln!(s, "# HELP marksync_connections_open Connections open now.");
        let _ = writeln!(s, "# TYPE marksync_connections_open gauge");
        let _ = writeln!(s, "marksync_connections_open {}", g(&self.connections_open));
        let _ = writeln!(
            s,
            "# HELP marksync_connections_evicted_total Idle connections closed to make room (the connection cap)."
        );
        let _ = writeln!(s, "# TYPE marksync_connections_evicted_total counter");
        let _ = writeln!(s, "marksync_connections_evicted_total {}", g(&self.connections_evicted));
        let _ = writeln!(s, "# HELP marksync_connections_refused_total New connections closed at once: at the cap, every connection busy.");
        let _ = writeln!(s, "# TYPE marksync_connections_refused_total counter");
        let _ = writeln!(s, "marksync_connections_refused_total {}", g(&self.connections_refused));
        let _ = writeln!(s, "# HELP marksync_user_cap_refusals_total Requests refused (429) by a per-user cap.");
        let _ = writeln!(s, "# TYPE marksync_user_cap_refusals_total counter");
        let _ = writeln!(s, "marksync_user_cap_refusals_total{{cap=\"requests\"}} {}", g(&self.refused_requests_cap));
        let _ = writeln!(s, "marksync_user_cap_refusals_total{{cap=\"streams\"}} {}", g(&self.refused_streams_cap));
        let _ = writeln!(s, "# HELP marksync_streams_cut_total Event streams ended to give their place to a user holding fewer (the server's cap of streams).");
        let _ = writeln!(s, "# TYPE marksync_streams_cut_total counter");
        let _ = writeln!(s, "marksync_streams_cut_total {}", g(&self.streams_cut));
        let _ = writeln!(
            s,
            "# HELP marksync_budget_refusals_total Requests refused (429) by a per-user budget of work per second."
        );
        let _ = writeln!(s, "# TYPE marksync_budget_refusals_total counter");
        let _ = writeln!(s, "marksync_budget_refusals_total{{budget=\"ops\"}} {}", g(&self.refused_ops_budget));
        let _ = writeln!(s, "marksync_budget_refusals_total{{budget=\"reads\"}} {}", g(&self.refused_reads_budget));
        let _ = writeln!(
            s,
            "# HELP marksync_body_timeouts_total Bodies that did not arrive within the body timeout (408)."
        );
        let _ = writeln!(s, "# TYPE marksync_body_timeouts_total counter");
        let _ = writeln!(s, "marksync_body_timeouts_total {}", g(&self.body_timeouts));
        let _ = writeln!(
            s,
            "# HELP marksync_push_concurrent_same_user_max Most pushes of one user ever inside the user's lock at once (1 when the lock holds)."
        );
        let _ = writeln!(s, "# TYPE marksync_push_concurrent_same_user_max gauge");
        let _ = writeln!(s, "marksync_push_concurrent_same_user_max {}", self.same_user.max());
        let _ = writeln!(
            s,
            "# HELP marksync_push_judged_again_total Pushes judged again after another writer remembered one of their ops first (0 when the lock holds)."
        );
        let _ = writeln!(s, "# TYPE marksync_push_judged_again_total counter");
        let _ = writeln!(s, "marksync_push_judged_again_total {}", self.same_user.judged_again_total());
        let _ = writeln!(
            s,
            "# HELP marksync_push_concurrent_same_device_max Most push requests of one device ever in flight at once, arrival to answer (1 when clients keep one cycle at a time)."
        );
        let _ = writeln!(s, "# TYPE marksync_push_concurrent_same_device_max gauge");
        let _ = writeln!(s, "marksync_push_concurrent_same_device_max {}", self.same_device.max());
        s
    }
}

/// Counts, per user, the pushes between "lock taken" and "commit sent", and
/// keeps the largest count ever seen. With a working lock it never exceeds 1.
#[derive(Debug, Default)]
pub struct SameUserProbe {
    inside: Mutex<HashMap<String, u32>>,
    max: AtomicU64,
    judged_again: AtomicU64,
}

impl SameUserProbe {
    /// A push of `user` holds the lock until the guard is dropped.
    pub fn enter(self: &Arc<Self>, user: &str) -> InsideLock {
        let now = {
            let mut m = self.inside.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(user.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        self.max.fetch_max(u64::from(now), Ordering::Relaxed);
        InsideLock { probe: Arc::clone(self), user: user.to_owned() }
    }

    /// The most pushes of one user ever inside the lock at once.
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Counts a push judged again because its verdict insert met verdicts
    /// written by another transaction (never happens while the lock holds).
    pub fn judged_again(&self) {
        self.judged_again.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times pushes were judged again.
    pub fn judged_again_total(&self) -> u64 {
        self.judged_again.load(Ordering::Relaxed)
    }
}

/// Held while a push is inside its user's lock.
#[derive(Debug)]
pub struct InsideLock {
    probe: Arc<SameUserProbe>,
    user: String,
}

impl Drop for InsideLock {
    fn drop(&mut self) {
        let mut m = self.probe.inside.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_sees_overlap() {
        let p = Arc::new(SameUserProbe::default());
        let a = p.enter("u");
        let b = p.enter("v");
        assert_eq!(p.max(), 1);
        let c = p.enter("u");
        assert_eq!(p.max(), 2);
        drop((a, b, c));
        let _d = p.enter("u");
        assert_eq!(p.max(), 2);
    }

    #[test]
    fn render_has_every_family() {
        let m = Metrics::default();
        m.push_judged([Outcome::Applied, Outcome::Duplicate].iter(), Duration::from_millis(3));
        m.error(ErrorCode::BadRequest);
        let t = m.render();
        assert!(t.contains("marksync_ops_total{verdict=\"applied\"} 1"));
        assert!(t.contains("marksync_http_errors_total{code=\"bad_request\"} 1"));
        assert!(t.contains("marksync_push_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(t.contains("marksync_push_concurrent_same_user_max 0"));
    }
}
