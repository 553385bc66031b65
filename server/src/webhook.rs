//! Webhooks: every committed change reaches the app's backend at least once,
//! signed, in order per space (docs/server.md, "Webhooks").
//!
//! A push writes its deliveries in its own transaction ([`crate::store`]'s
//! outbox); this sender, apart from the push path, leases due queues of
//! deliveries (one per space, so a space's deliveries go out one after the
//! other, whichever server process sends them), POSTs them, and forgets each
//! once its receiver answered 2xx. A failure stops the space's queue and
//! retries it with backoff; other spaces go on. A receiver that is down or
//! never answers costs the pushes nothing: the backlog waits on disk, bounded
//! by `--webhook-max-pending`, and shows on `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::{watch, Notify};

use crate::clock::now_ms_db;
use crate::config::Config;
use crate::error::ServerError;
use crate::store::{Claimed, Settle, Store};

/// The shortest secret `--webhook-secret` takes.
pub const MIN_SECRET_CHARS: usize = 32;
/// Spaces' queues sent side by side at most.
const SPACES_AT_ONCE: usize = 16;
/// Deliveries of one space sent in one lease, one after the other.
const PER_SPACE: usize = 8;
/// The longest wait between two tries of a failing space.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long an idle sender waits before looking for due deliveries again
/// (another server process's, or a retry coming due).
const IDLE_POLL: Duration = Duration::from_millis(500);

/// The webhook's configuration, its sender's wake-up and its counters.
#[derive(Debug)]
pub struct Webhook {
    url: String,
    secret: String,
    timeout: Duration,
    backoff: Duration,
    max_pending: u64,
    client: reqwest::Client,
    wake: Notify,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    pending: AtomicU64,
    queues: AtomicU64,
    oldest_ms: AtomicI64,
    delivered: AtomicU64,
    failed: AtomicU64,
    /// The lags (commit → 2xx) of the deliveries delivered, summed, in ms.
    lag_ms_sum: AtomicU64,
}

impl Webhook {
    /// The webhook `config` asks for, if any; a secret shorter than
    /// [`MIN_SECRET_CHARS`] stops the start.
    pub fn from_config(config: &Config) -> Result<Option<Webhook>, ServerError> {
        let (url, secret) = match (&config.webhook_url, &config.webhook_secret) {
            (None, None) => return Ok(None),
            (Some(url), Some(secret)) => (url, secret),
            _ => return Err(ServerError::Config("--webhook-url and --webhook-secret go together".into())),
        };
        if secret.chars().count() < MIN_SECRET_CHARS {
            return Err(ServerError::Config(format!(
                "--webhook-secret must be at least {MIN_SECRET_CHARS} characters (make one with `openssl rand -hex 32`)"
            )));
        }
        let timeout = Duration::from_millis(config.webhook_timeout_ms.max(1));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("marksync-server/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ServerError::Config(format!("--webhook-url: {e}")))?;
        Ok(Some(Webhook {
            url: url.clone(),
            secret: secret.clone(),
            timeout,
            backoff: Duration::from_millis(config.webhook_backoff_ms.max(1)),
            max_pending: config.webhook_max_pending,
            client,
            wake: Notify::new(),
            stats: Stats::default(),
        }))
    }

    /// A push committed `n` deliveries (one a space it moved): they count
    /// toward `--webhook-max-pending` at once — the backlog, counted once a
    /// second, let a second of pushes pass the bound — and the sender looks
    /// now rather than at the next poll.
    pub fn enqueued(&self, n: usize) {
        self.stats.pending.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Whether the backlog is at its bound: pushes that would move rows wait.
    pub fn full(&self) -> bool {
        self.max_pending > 0 && self.stats.pending.load(Ordering::Relaxed) >= self.max_pending
    }

    /// Sends deliveries until `shutdown` turns true.
    pub fn spawn(self: Arc<Self>, store: Store, mut shutdown: watch::Receiver<bool>) {
        tokio::spawn(async move {
            if let Err(e) = store.release_delivery_leases().await {
                tracing::warn!(error = %e, "webhook: cannot release the leases of the last run");
            }
            let mut last_stats = tokio::time::Instant::now() - Duration::from_secs(1);
            // The queues being sent: each space goes on its own, and a slot
            // a space frees is taken at once by the next due one, so a
            // receiver slow for one space holds up only that space.
            // Each is a task of its own: a send waiting here while the loop
            // awaits the store would hold the database's write lock (a
            // settle half done) against the loop's next claim.
            let mut sending = tokio::task::JoinSet::new();
            loop {
                if *shutdown.borrow() {
                    // The sends under way end with the runtime; a queue cut
                    // short is sent again when its lease runs out (at least once).
                    return;
                }
                if last_stats.elapsed() >= Duration::from_secs(1) {
                    self.refresh(&store).await;
                    last_stats = tokio::time::Instant::now();
                }
                let room = SPACES_AT_ONCE.saturating_sub(sending.len());
                if room > 0 {
                    // A lease outlasts every send it covers, so no other process (and no later claim of this one) takes the queue meanwhile.
                    let lease =
                        now_ms_db().saturating_add(ms(self.timeout * PER_SPACE as u32 + Duration::from_secs(5)));
                    match store.claim_deliveries(lease, room, PER_SPACE).await {
                        Ok(claimed) => {
                            for queue in claimed {
                                let (webhook, store) = (Arc::clone(&self), store.clone());
                                sending.spawn(async move { webhook.send_queue(&store, queue).await });
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "webhook: cannot read the deliveries; trying again at the next poll")
                        }
                    }
                }
                tokio::select! {
                    Some(_) = sending.join_next(), if !sending.is_empty() => {
                        // Every queue done by now frees its slot before the next claim, so one claim fills them all.
                        while sending.try_join_next().is_some() {}
                    }
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(IDLE_POLL) => {}
                    _ = shutdown.changed() => {}
                }
            }
        });
    }

    /// Sends a leased queue's deliveries in order, stopping at the first
    /// failure, then settles the queue.
    async fn send_queue(&self, store: &Store, queue: Claimed) {
        let mut delivered_through = None;
        let mut settle = Settle::Drained;
        for d in &queue.deliveries {
            match self.send(&d.id, &d.body).await {
                Ok(()) => {
                    delivered_through = Some(d.head);
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    let lag = u64::try_from(now_ms_db().saturating_sub(d.created_at)).unwrap_or(0);
                    self.stats.lag_ms_sum.fetch_add(lag, Ordering::Relaxed);
                }
                Err(error) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    // Deliveries went through before this one: a new run of failures starts.
                    let afresh = delivered_through.is_some();
                    let failures = if afresh { 0 } else { queue.failures };
                    let wait = backoff(self.backoff, failures, &d.id);
                    tracing::warn!(delivery = %d.id, space = %queue.space, failures = failures + 1, retry_in_ms = ms(wait), %error, "webhook delivery failed");
                    settle = Settle::Retry { next_at: now_ms_db().saturating_add(ms(wait)), error, afresh };
                    break;
                }
            }
        }
        if let Err(e) = store.settle_deliveries(&queue.space, delivered_through, &settle).await {
            // The lease runs out and the queue is sent again: at least once.
            tracing::warn!(space = %queue.space, error = %e, "webhook: cannot record a delivery's outcome");
        }
    }

    /// One POST; `Err` says why it does not count as delivered.
    async fn send(&self, id: &str, body: &str) -> Result<(), String> {
        let t = crate::clock::now_ms() / 1000;
        let sent = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("marksync-delivery", id)
            .header("marksync-signature", signature(&self.secret, t, body))
            .body(body.to_owned())
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => {
                let status = resp.status();
                let text = resp.text().await.unwrap_or_default();
                // The receiver's answer, cut as every message the server keeps.
                Err(crate::error::capped(&format!("{status}: {text}")))
            }
            Err(e) if e.is_timeout() => Err(format!("no answer within {} ms", ms(self.timeout))),
            // Without the URL: it may hold a secret (user info, a key in the query).
            Err(e) => Err(e.without_url().to_string()),
        }
    }

    async fn refresh(&self, store: &Store) {
        match store.delivery_backlog().await {
            Ok(b) => {
                self.stats.pending.store(b.pending, Ordering::Relaxed);
                self.stats.queues.store(b.queues, Ordering::Relaxed);
                self.stats.oldest_ms.store(b.oldest_ms, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "webhook: cannot count the deliveries waiting"),
        }
    }

    /// The webhook's families on `/metrics`.
    pub fn render(&self, s: &mut String) {
        let st = &self.stats;
        let oldest = st.oldest_ms.load(Ordering::Relaxed);
        let age = if oldest > 0 { (now_ms_db() - oldest).max(0) as f64 / 1000.0 } else { 0.0 };
        let delivered = st.delivered.load(Ordering::Relaxed);
        let _ = writeln!(s, "# HELP marksync_webhook_pending Deliveries waiting (committed, not yet answered 2xx).");
        let _ = writeln!(s, "# TYPE marksync_webhook_pending gauge");
        let _ = writeln!(s, "marksync_webhook_pending {}", st.pending.load(Ordering::Relaxed));
        let _ = writeln!(s, "# HELP marksync_webhook_pending_spaces Spaces with deliveries waiting.");
        let _ = writeln!(s, "# TYPE marksync_webhook_pending_spaces gauge");
        let _ = writeln!(s, "marksync_webhook_pending_spaces {}", st.queues.load(Ordering::Relaxed));
        let _ = writeln!(s, "# HELP marksync_webhook_oldest_age_seconds Age of the oldest delivery waiting (0: none).");
        let _ = writeln!(s, "# TYPE marksync_webhook_oldest_age_seconds gauge");
        let _ = writeln!(s, "marksync_webhook_oldest_age_seconds {age:.3}");
        let _ = writeln!(s, "# HELP marksync_webhook_deliveries_total Delivery attempts by this process, by outcome.");
        let _ = writeln!(s, "# TYPE marksync_webhook_deliveries_total counter");
        let _ = writeln!(s, "marksync_webhook_deliveries_total{{outcome=\"delivered\"}} {delivered}");
        let _ = writeln!(
            s,
            "marksync_webhook_deliveries_total{{outcome=\"failed\"}} {}",
            st.failed.load(Ordering::Relaxed)
        );
        let _ =
            writeln!(s, "# HELP marksync_webhook_lag_seconds_sum Commit to 2xx, summed over the deliveries delivered.");
        let _ = writeln!(s, "# TYPE marksync_webhook_lag_seconds_sum counter");
        let _ = writeln!(
            s,
            "marksync_webhook_lag_seconds_sum {:.3}",
            st.lag_ms_sum.load(Ordering::Relaxed) as f64 / 1000.0
        );
    }
}

/// `Marksync-Signature`: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
pub fn signature(secret: &str, t: u64, body: &str) -> String {
    // HMAC takes a key of any length: new_from_slice cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before a space's next try after `failures` failures in a row
/// (this one not counted): `base` doubled each time up to 5 minutes, less a
/// jitter of up to a quarter, fixed by the delivery's id and the count, so
/// queues that failed together do not come back together.
fn backoff(base: Duration, failures: i64, id: &str) -> Duration {
    let doublings = u32::try_from(failures.clamp(0, 20)).unwrap_or(20);
    let full = base.saturating_mul(1u32 << doublings).min(MAX_BACKOFF);
    let seed =
        id.bytes().fold(u64::try_from(failures).unwrap_or(0), |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let quarter = ms(full) / 4;
    let jitter = if quarter == 0 { 0 } else { seed % u64::try_from(quarter).unwrap_or(1) };
    full.saturating_sub(Duration::from_millis(jitter))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The receiver's URL as a log may show it: scheme, host, port and path,
/// without user info or query (either may hold a secret). Not
/// `store::redact`: that one keeps a database URL's query and masks the
/// parameters a database names as secret; a receiver's query names are its own.
pub(crate) fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_t_dot_body() {
        // Checked against
        // `printf '1700000000.{}' | openssl dgst -sha256 -hmac 'Jefe'`.
        assert_eq!(
            signature("Jefe", 1_700_000_000, "{}"),
            "t=1700000000,v1=d3793e2b4103edfbd98cc19591832f5fad701d413db9fcae0ae7dab8184ed207"
        );
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes_with_jitter_below() {
        let base = Duration::from_secs(1);
        let waits: Vec<Duration> = (0..12).map(|f| backoff(base, f, "abc")).collect();
        for (f, w) in waits.iter().enumerate() {
            let full = base.saturating_mul(1 << f).min(MAX_BACKOFF);
            assert!(*w <= full && *w >= full - full / 4, "{f}: {w:?}");
        }
        assert!(waits[11] > Duration::from_secs(200));
    }

    #[test]
    fn a_logged_receiver_url_holds_no_secret() {
        assert_eq!(super::redact("http://user:pa55word@127.0.0.1:1/hook?key=sekrit#x"), "http://127.0.0.1:1/hook");
        assert_eq!(super::redact("https://hooks.example.com/in"), "https://hooks.example.com/in");
    }
}
