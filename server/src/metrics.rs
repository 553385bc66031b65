//! Prometheus metrics, kept by hand: a few atomics and a text renderer.
//!
//! Every label set is bounded, so no client can make the exposition grow:
//! routes are the router's templates (or `other`), methods the standard ones
//! (or `other`), statuses three digits, codes the protocol's list.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use marksync::protocol::{ErrorCode, Outcome};

/// Upper bounds (seconds) of the latency histograms.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The route label of a request the router matched to no route of its own
/// (static files, unknown paths): one label, however many paths a scanner tries.
pub const OTHER_ROUTE: &str = "other";

/// The codes an answer can carry: every whole-request error (a status other
/// than 500) and `internal`. Read from the protocol's list, so a new code is
/// counted (and shown at 0) without a change here.
fn answer_codes() -> impl Iterator<Item = ErrorCode> {
    ErrorCode::ALL.iter().copied().filter(|c| c.http_status() != 500 || *c == ErrorCode::Internal)
}

/// A latency histogram over [`BUCKETS`].
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; 12],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The `_bucket`, `_sum` and `_count` lines of `name`; `labels` (`k="v"`, or empty) go first in each.
    fn render(&self, s: &mut String, name: &str, labels: &str) {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(s, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}", g(&self.buckets[i]));
        }
        let count = g(&self.count);
        let _ = writeln!(s, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braced = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(s, "{name}_sum{braced} {}", g(&self.sum_us) as f64 / 1e6);
        let _ = writeln!(s, "{name}_count{braced} {count}");
    }
}

/// Whole-request errors, one counter per code of [`answer_codes`].
#[derive(Debug)]
struct Errors(Vec<(ErrorCode, AtomicU64)>);

impl Default for Errors {
    fn default() -> Self {
        Errors(answer_codes().map(|c| (c, AtomicU64::new(0))).collect())
    }
}

/// Requests by route, method and status, and each route's latency.
#[derive(Debug, Default)]
struct Requests {
    routes: Mutex<BTreeMap<String, Route>>,
}

#[derive(Debug, Default)]
struct Route {
    answers: BTreeMap<(&'static str, u16), u64>,
    latency: Arc<Histogram>,
}

/// How busy one pool is, read at scrape time for `/metrics`: a pool with no
/// idle connection left at its max makes requests wait for the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// `writer` or `reader`.
    pub pool: &'static str,
    /// Connections open, in use or idle.
    pub size: u32,
    /// Connections open and idle.
    pub idle: usize,
    /// The most connections it opens.
    pub max: u32,
}

/// What is read at scrape time rather than counted: the state of things
/// owned elsewhere (streams, database pools).
#[derive(Debug, Default)]
pub struct Live {
    /// Event streams open now.
    pub streams_open: usize,
    /// The database pools.
    pub pools: Vec<PoolStats>,
}

/// The method label: the standard methods by name, anything else `other`.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *method {
        M::GET => "GET",
        M::POST => "POST",
        M::HEAD => "HEAD",
        M::OPTIONS => "OPTIONS",
        M::PUT => "PUT",
        M::DELETE => "DELETE",
        M::PATCH => "PATCH",
        M::TRACE => "TRACE",
        M::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    pushes: AtomicU64,
    applied: AtomicU64,
    duplicate: AtomicU64,
    rejected: AtomicU64,
    pulled_rows: AtomicU64,
    pulls: AtomicU64,
    errors: Errors,
    push_latency: Histogram,
    requests: Requests,
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
    /// attemptKey) in flight at once, from arrival until judged: a client keeps
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
        self.push_latency.observe(took);
    }

    /// Counts one pull page of `rows` rows.
    pub fn pulled(&self, rows: usize) {
        self.pulls.fetch_add(1, Ordering::Relaxed);
        self.pulled_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts one whole-request error.
    pub fn error(&self, code: ErrorCode) {
        if let Some((_, c)) = self.errors.0.iter().find(|(c, _)| *c == code) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one answer of `route` (a router template or [`OTHER_ROUTE`];
    /// see [`method_label`]) and the time to its head.
    pub fn request(&self, route: &str, method: &'static str, status: u16, took: Duration) {
        let latency = {
            let mut routes = self.requests.routes.lock().unwrap_or_else(|p| p.into_inner());
            let r = match routes.get_mut(route) {
                Some(r) => r,
                None => routes.entry(route.to_owned()).or_default(),
            };
            *r.answers.entry((method, status)).or_insert(0) += 1;
            Arc::clone(&r.latency)
        };
        latency.observe(took);
    }

    /// The Prometheus text exposition; `live` is what the caller read just now.
    pub fn render(&self, live: &Live) -> String {
        let mut s = String::with_capacity(8192);
        let _ = writeln!(s, "# HELP marksync_build_info The server's version (the value is always 1).");
        let _ = writeln!(s, "# TYPE marksync_build_info gauge");
        let _ = writeln!(s, "marksync_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
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
        self.push_latency.render(&mut s, "marksync_push_duration_seconds", "");
        let _ = writeln!(s, "# HELP marksync_pulls_total Pull pages served.");
        let _ = writeln!(s, "# TYPE marksync_pulls_total counter");
        let _ = writeln!(s, "marksync_pulls_total {}", g(&self.pulls));
        let _ = writeln!(s, "# HELP marksync_pulled_rows_total Rows sent by pull.");
        let _ = writeln!(s, "# TYPE marksync_pulled_rows_total counter");
        let _ = writeln!(s, "marksync_pulled_rows_total {}", g(&self.pulled_rows));
        let _ = writeln!(s, "# HELP marksync_http_errors_total Error answers, by code.");
        let _ = writeln!(s, "# TYPE marksync_http_errors_total counter");
        for (code, c) in &self.errors.0 {
            let _ = writeln!(s, "marksync_http_errors_total{{code=\"{}\"}} {}", code.as_str(), g(c));
        }
        self.render_requests(&mut s);
        let _ = writeln!(s, "# HELP marksync_event_streams_open Event streams (/v1/events) open now.");
        let _ = writeln!(s, "# TYPE marksync_event_streams_open gauge");
        let _ = writeln!(s, "marksync_event_streams_open {}", live.streams_open);
        let _ = writeln!(
            s,
            "# HELP marksync_db_pool_connections Database connections, by pool and state (PostgreSQL: writer and reader are one pool)."
        );
        let _ = writeln!(s, "# TYPE marksync_db_pool_connections gauge");
        for p in &live.pools {
            let idle = p.idle as u64;
            let in_use = u64::from(p.size).saturating_sub(idle);
            let _ = writeln!(s, "marksync_db_pool_connections{{pool=\"{}\",state=\"in_use\"}} {in_use}", p.pool);
            let _ = writeln!(s, "marksync_db_pool_connections{{pool=\"{}\",state=\"idle\"}} {idle}", p.pool);
        }
        let _ = writeln!(s, "# HELP marksync_db_pool_max_connections The most connections each database pool opens.");
        let _ = writeln!(s, "# TYPE marksync_db_pool_max_connections gauge");
        for p in &live.pools {
            let _ = writeln!(s, "marksync_db_pool_max_connections{{pool=\"{}\"}} {}", p.pool, p.max);
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
            "# HELP marksync_push_concurrent_same_device_max Most push requests of one device ever in flight at once, arrival to judged — a client that hung up counts until its push is judged (1 when clients keep one cycle at a time)."
        );
        let _ = writeln!(s, "# TYPE marksync_push_concurrent_same_device_max gauge");
        let _ = writeln!(s, "marksync_push_concurrent_same_device_max {}", self.same_device.max());
        s
    }

    fn render_requests(&self, s: &mut String) {
        let routes = self.requests.routes.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(s, "# HELP marksync_http_requests_total Answers, by route template, method and status.");
        let _ = writeln!(s, "# TYPE marksync_http_requests_total counter");
        for (route, r) in routes.iter() {
            for ((method, status), n) in &r.answers {
                let _ = writeln!(
                    s,
                    "marksync_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP marksync_http_request_duration_seconds Time from a request's head to its answer's head, by route (an event stream: until it opens)."
        );
        let _ = writeln!(s, "# TYPE marksync_http_request_duration_seconds histogram");
        for (route, r) in routes.iter() {
            r.latency.render(s, "marksync_http_request_duration_seconds", &format!("route=\"{route}\""));
        }
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
        m.request("/v1/pull", "GET", 200, Duration::from_millis(2));
        m.request("/v1/pull", "GET", 200, Duration::from_millis(20));
        m.request(OTHER_ROUTE, "other", 404, Duration::from_micros(10));
        let live = Live { streams_open: 2, pools: vec![PoolStats { pool: "writer", size: 3, idle: 1, max: 4 }] };
        let t = m.render(&live);
        assert!(t.contains("marksync_ops_total{verdict=\"applied\"} 1"));
        assert!(t.contains("marksync_http_errors_total{code=\"bad_request\"} 1"));
        assert!(t.contains("marksync_push_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(t.contains("marksync_push_duration_seconds_count 1\n"));
        assert!(t.contains("marksync_push_concurrent_same_user_max 0"));
        assert!(t.contains("marksync_http_requests_total{route=\"/v1/pull\",method=\"GET\",status=\"200\"} 2"));
        assert!(t.contains("marksync_http_requests_total{route=\"other\",method=\"other\",status=\"404\"} 1"));
        assert!(t.contains("marksync_http_request_duration_seconds_bucket{route=\"/v1/pull\",le=\"0.005\"} 1"));
        assert!(t.contains("marksync_http_request_duration_seconds_count{route=\"/v1/pull\"} 2"));
        assert!(t.contains("marksync_event_streams_open 2"));
        assert!(t.contains("marksync_db_pool_connections{pool=\"writer\",state=\"in_use\"} 2"));
        assert!(t.contains("marksync_db_pool_connections{pool=\"writer\",state=\"idle\"} 1"));
        assert!(t.contains(&format!("marksync_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn every_code_that_answers_a_request_is_counted_and_only_those() {
        let m = Metrics::default();
        for c in ErrorCode::ALL {
            m.error(*c);
        }
        let t = m.render(&Live::default());
        for c in ErrorCode::ALL {
            let line = format!("marksync_http_errors_total{{code=\"{c}\"}} 1");
            let answers = c.http_status() != 500 || *c == ErrorCode::Internal;
            assert_eq!(t.contains(&line), answers, "{c}");
        }
        for c in ["conflict", "forbidden", "not_found", "request_timeout", "wrong_user", "internal"] {
            assert!(t.contains(&format!("marksync_http_errors_total{{code=\"{c}\"}} 1")), "{c}");
        }
    }
}
