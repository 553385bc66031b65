//! Connections: the accept loop, the cap on open connections, the header read
//! timeout, and a shutdown with a deadline.
//!
//! The contract: a connection that has not sent a whole request head within the
//! header timeout is closed; at most `max_connections` are open, and at the cap a
//! new connection closes one with no request in progress: one whose last
//! answer refused it (`401`, `429`: a crowd's) before any other, then the one
//! idle the longest (unfinished headers or idle keep-alive — what a
//! slow-headers attack holds); only when
//! every open connection is busy is the new one closed instead. Busy
//! connections are bounded per user (`rate` and the per-user caps in
//! `guard`), so one client cannot make them all busy. On shutdown, requests in
//! flight get `shutdown_timeout` to finish; then what is left is cut.
//!
//! hyper does the HTTP (its `header_read_timeout`, its graceful shutdown through
//! `hyper_util`); this module only keeps the table of open connections.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// Descriptors kept back from the connection cap for the database, the log, static files.
const SPARE_FDS: u64 = 100;

/// The connection limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Time to send a whole request head.
    pub header_timeout: Duration,
    /// Time requests in flight get after shutdown begins.
    pub shutdown_timeout: Duration,
}

impl Limits {
    /// `max_connections` lowered, with a warning, to fit `nofile` open files.
    pub fn fit_to(mut self, nofile: Option<u64>) -> Limits {
        if let Some(n) = nofile {
            let fits = n.saturating_sub(SPARE_FDS).max(1) as usize;
            if self.max_connections > fits {
                tracing::warn!(
                    max_connections = self.max_connections,
                    open_files_limit = n,
                    lowered_to = fits,
                    "--max-connections does not fit the open-files limit; lowered"
                );
                self.max_connections = fits;
            }
        }
        self
    }
}

/// Raises the soft open-files limit to the hard one, where the system allows;
/// answers the soft limit now in force (`None` when it cannot be read).
/// Hand-written: two libc calls, not worth a crate.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not on every unix
pub fn raise_open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit only reads the struct it is given. It fails (and changes nothing)
        // where the hard limit is not allowed as a soft one (macOS: RLIM_INFINITY).
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::info!(from = lim.rlim_cur as u64, to = lim.rlim_max as u64, "raised the open-files limit");
            lim = raised;
        }
    }
    Some(lim.rlim_cur as u64)
}

/// No open-files limit to raise or read here.
#[cfg(not(unix))]
pub fn raise_open_files_limit() -> Option<u64> {
    None
}

/// The open connections, oldest first.
#[derive(Debug)]
struct Table {
    max: usize,
    inner: Mutex<Inner>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    busy: Arc<Use>,
    evict: Arc<Notify>,
}

/// A connection's requests in progress, when it was last used, and whether
/// its last answer was a refusal: at the cap a refused connection is closed
/// first, then one that never finished a request (nobody has shown what it
/// is for: a crowd's reconnect, an unfinished head), then the one idle the
/// longest, not the oldest one. So a
/// bystander's keep-alive connection outlives a crowd's connections opened
/// after it and left idle, and outlives, even idle for longer, those of a
/// crowd that was refused (a crowd of event streams at the server's cap is
/// refused a thousand times a minute; each refusal's reconnect took the place
/// of the connection idle the longest, at times a bystander's, whose next
/// request then met a closed connection; and when no refused one was idle
/// at that instant, the crowd's newest reconnects, idle only since their
/// accept, outranked the bystander's connection idle since its last answer
/// a few milliseconds earlier).
#[derive(Debug)]
struct Use {
    requests: AtomicUsize,
    /// [`TICKS`] when it was opened or its last request ended.
    last: AtomicU64,
    /// Its last answer refused the request (`401`, `429`).
    refused: AtomicBool,
    /// A request of it has ended.
    served: AtomicBool,
}

/// A clock of uses: every open and every request's end takes the next tick.
static TICKS: AtomicU64 = AtomicU64::new(0);

impl Use {
    fn new() -> Use {
        Use {
            requests: AtomicUsize::new(0),
            last: AtomicU64::new(TICKS.fetch_add(1, Ordering::Relaxed)),
            refused: AtomicBool::new(false),
            served: AtomicBool::new(false),
        }
    }
    /// Which idle connection goes first at the cap: refused ones, then those
    /// never served, then the longest idle.
    fn eviction_order(&self) -> (bool, bool, u64) {
        (!self.refused.load(Ordering::Relaxed), self.served.load(Ordering::Relaxed), self.last.load(Ordering::Relaxed))
    }
    fn idle(&self) -> bool {
        self.requests.load(Ordering::Acquire) == 0
    }
}

/// One open connection's place in the table; dropping it frees the place.
struct Slot {
    id: u64,
    busy: Arc<Use>,
    evict: Arc<Notify>,
    table: Arc<Table>,
}

impl Table {
    /// A place for a new connection: at the cap, an idle connection (a
    /// refused one first, else the one idle the longest) is told to close and
    /// gives up its place; `None` when every one is busy.
    fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.open.len() >= self.max {
            let idle = inner
                .open
                .iter()
                .filter(|(_, e)| e.busy.idle())
                .min_by_key(|(_, e)| e.busy.eviction_order())
                .map(|(id, _)| *id);
            let entry = inner.open.remove(&idle?)?;
            // notify_one keeps the wake-up should the connection not be waiting yet.
            entry.evict.notify_one();
            self.metrics.connection_evicted();
        }
        let id = inner.next;
        inner.next += 1;
        let (busy, evict) = (Arc::new(Use::new()), Arc::new(Notify::new()));
        inner.open.insert(id, Entry { busy: Arc::clone(&busy), evict: Arc::clone(&evict) });
        self.metrics.connections_open(inner.open.len());
        Some(Slot { id, busy, evict, table: Arc::clone(self) })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.table.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.open.remove(&self.id);
        self.table.metrics.connections_open(inner.open.len());
    }
}

/// Marks its connection busy while alive: from a request's head to the end of its answer's body.
struct Busy(Arc<Use>);

impl Busy {
    fn new(count: &Arc<Use>) -> Busy {
        count.requests.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(count))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.last.store(TICKS.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        self.0.served.store(true, Ordering::Relaxed);
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Serves `router` on `listener` until `shutdown` completes; then stops
/// accepting, lets requests in flight finish for at most the shutdown timeout,
/// and cuts the connections left.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let table =
        Arc::new(Table { max: limits.max_connections.max(1), inner: Mutex::default(), metrics: Arc::clone(&metrics) });
    let graceful = GracefulShutdown::new();
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors (EMFILE) or the like: the connection stays queued;
                    // wait for one to close instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        let Some(slot) = table.admit() else {
            metrics.connection_refused();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let busy = Arc::clone(&slot.busy);
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let guard = Busy::new(&busy);
            req.extensions_mut().insert(Peer(peer));
            let call = router.clone().oneshot(req.map(Body::new));
            async move {
                let resp = call.await.unwrap_or_else(|never: Infallible| match never {});
                let refused = matches!(resp.status(), StatusCode::UNAUTHORIZED | StatusCode::TOO_MANY_REQUESTS);
                guard.0.refused.store(refused, Ordering::Relaxed);
                // The guard lives in the body, so a stream keeps its connection busy to its end.
                Ok::<_, Infallible>(resp.map(|b| {
                    Body::new(b.map_frame(move |f| {
                        let _ = &guard;
                        f
                    }))
                }))
            }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tasks.spawn(async move {
            let evicted = Arc::clone(&slot.evict);
            tokio::select! {
                done = conn => if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended with an error");
                },
                () = evicted.notified() => tracing::debug!("idle connection closed to make room"),
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!(connections = tasks.len(), "shutting down: finishing in-flight requests");
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            connections = tasks.len(),
            after = ?limits.shutdown_timeout,
            "shutdown deadline passed: cutting the connections left"
        );
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}
