//! Push attempts, failures, retry policy and per-row sync status (PROTOCOL §7).
//!
//! Every send of a batch is an attempt with a fresh attemptKey; the ops keep
//! their opIds. Only an answer that carries the attemptKey in flight is
//! taken; any other is a late answer to an attempt that already failed or
//! was superseded, and is ignored.

use serde::{Deserialize, Serialize};

use crate::ids::SplitMix;
use crate::protocol::{Code, ErrorBody, ErrorCode, OpId};

/// The attempt in flight: its key and the opIds it carries, in batch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The attemptKey sent.
    pub key: String,
    /// The batch's opIds, in order.
    pub op_ids: Vec<OpId>,
}

/// Why a request got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The network failed (offline, connection dropped): the outcome is unknown.
    #[error("the server could not be reached ({0}): no network, a wrong address or port, or the server's CORS does not allow this origin")]
    Network(String),
    /// No answer in time: the outcome is unknown.
    #[error("the request timed out")]
    Timeout,
    /// A 5xx: never taken as delivered; the outcome is unknown.
    #[error("server error {status}: {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// What the server said.
        message: String,
        /// Its `Retry-After` (a 503's: the database is down for a while), 0
        /// if none: no try comes sooner, so a device does not knock on a
        /// server that asked for time. (A `u32` of at most
        /// [`MAX_RETRY_AFTER_MS`]: the failure stays as small as it was.)
        retry_after_ms: u32,
    },
    /// A 200 whose body does not fit the request: the outcome is unknown.
    #[error("malformed answer: {0}")]
    BadResponse(String),
    /// 401 after the token was refreshed once: the user must sign in again.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 409: the server is the old side (its schema is older than the app's
    /// ops): reloading the app cannot help; the queue waits whole and the
    /// server is probed again until it is upgraded (PROTOCOL §5).
    #[error("schema too new: {0}")]
    SchemaTooNew(String),
    /// 413: the batch is too large; send half. A push of one op alone
    /// refused so is that op's refusal, in the server's words (PROTOCOL §5).
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    /// 429: wait `retry_after_ms`.
    #[error("rate limited for {retry_after_ms} ms")]
    RateLimited {
        /// How long the server asked to wait.
        retry_after_ms: u64,
    },
    /// 400 or another refusal that retrying cannot fix.
    #[error("refused: {0}")]
    Refused(String),
    /// 403 `wrong_user`: the token is another user's than the database's.
    #[error("wrong user: {0}")]
    WrongUser(String),
    /// The app's token function threw or rejected. Transient: the function is
    /// called again at the next try, after a backoff.
    #[error("the token function failed: {0}")]
    Token(String),
}

/// The longest wait a `Retry-After` is taken for: the backoff's ceiling (5 min).
pub const MAX_RETRY_AFTER_MS: u64 = 300_000;

impl Failure {
    /// Classifies an HTTP answer that is not a 200. `body` is the parsed error
    /// body if there is one; `retry_after_ms` comes from `Retry-After`.
    pub fn from_http(status: u16, body: Option<&ErrorBody>, retry_after_ms: Option<u64>) -> Failure {
        let message = body.map(|b| b.error.message.clone()).unwrap_or_default();
        match (status, body.map(|b| b.error.code)) {
            (_, Some(ErrorCode::SchemaTooNew)) | (409, None) => Failure::SchemaTooNew(message),
            (_, Some(ErrorCode::WrongUser)) => Failure::WrongUser(message),
            (401, _) | (_, Some(ErrorCode::Unauthorized)) => Failure::Unauthorized(message),
            (413, _) | (_, Some(ErrorCode::PayloadTooLarge)) => Failure::PayloadTooLarge(message),
            // A wait past the longest backoff (a proxy's `Retry-After: 999999999`) would park the device for years.
            (429, _) | (_, Some(ErrorCode::RateLimited)) => {
                Failure::RateLimited { retry_after_ms: retry_after_ms.unwrap_or(1000).min(MAX_RETRY_AFTER_MS) }
            }
            (s, _) if s >= 500 => {
                Failure::Server { status: s, message, retry_after_ms: retry_after_ms.map_or(0, |ms| ms.min(MAX_RETRY_AFTER_MS) as u32) }
            }
            (408, _) => Failure::Timeout,
            (s, _) => Failure::Refused(format!("{s}: {message}")),
        }
    }

    /// Whether the failure leaves the outcome of a push unknown (it may have
    /// been committed): the ops stay queued and are retried under the same opIds.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Failure::Network(_) | Failure::Timeout | Failure::Server { .. } | Failure::BadResponse(_))
    }

    /// The recovery this failure requires, if the engine cannot go on alone.
    pub fn recovery(&self) -> Option<Recovery> {
        let code = match self {
            Failure::Unauthorized(_) => Code::Unauthorized,
            Failure::SchemaTooNew(_) => Code::SchemaTooNew,
            Failure::Refused(_) => Code::Refused,
            Failure::WrongUser(_) => Code::WrongUser,
            _ => return None,
        };
        Some(Recovery { code, message: self.to_string() })
    }
}

/// The recovery code of a token that is another user's than the database's.
pub const WRONG_USER: Code = Code::WrongUser;

/// The engine cannot go on without the user (or the app): sign in again,
/// reload a newer app, fix storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// Stable code: `unauthorized`, `wrong_user`, `schema_too_new`,
    /// `retries_exhausted`, `refused`, `storage`, `payload_too_large`.
    pub code: Code,
    /// Human message.
    pub message: String,
}

/// Exponential backoff with full jitter: the n-th consecutive failure waits a
/// uniformly random time in `0..=min(cap, base·2^(n-1))`.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// First ceiling, in ms (1 s).
    pub base_ms: u64,
    /// Highest ceiling, in ms (5 min).
    pub cap_ms: u64,
    /// Consecutive failures so far.
    pub failures: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base_ms: 1_000, cap_ms: 300_000, failures: 0 }
    }
}

impl Backoff {
    /// The ceiling of the next wait.
    pub fn ceiling(&self) -> u64 {
        let exp = self.failures.min(40);
        self.base_ms.saturating_mul(1u64 << exp).min(self.cap_ms)
    }

    /// Counts a failure and draws the wait before the next try.
    pub fn next_delay(&mut self, rng: &mut SplitMix) -> u64 {
        let d = rng.up_to(self.ceiling());
        self.failures = self.failures.saturating_add(1);
        d
    }

    /// A success: start over.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The sync phase of one row, for the UI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Nothing pending; the row is what the server has (as far as this device knows).
    Synced,
    /// Ops wait to be sent.
    Pending,
    /// Ops are in the attempt in flight.
    AwaitingAck,
    /// Ops were sent and no valid answer came (network error, timeout, 5xx); they will be resent.
    UnknownOutcome,
    /// The server refused an op on this row; see `reason`.
    Rejected,
    /// Sync cannot go on without the user; see `reason`.
    RecoveryRequired,
}

/// The sync status of one row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RowStatus {
    /// The phase.
    pub phase: Phase,
    /// The reason, for `rejected` and `recovery-required`.
    pub reason: Option<String>,
    /// The code, for `rejected` and `recovery-required`.
    pub code: Option<String>,
    /// How many ops of the row are pending.
    pub pending_ops: usize,
    /// The most times any pending op of the row has been sent.
    pub attempts: u32,
    /// When the engine will try again (ms), if it is waiting.
    pub next_retry_at: Option<u64>,
    /// How many conflicts of the row are not dismissed (PROTOCOL §2a): edits
    /// of this device there that lost to concurrent ones. The phase says
    /// where the row's sync stands; this says what a person should look at.
    #[serde(default)]
    pub conflicts: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_exponential_capped_and_fully_jittered() {
        let mut b = Backoff::default();
        let mut rng = SplitMix::new(7);
        let ceilings: Vec<u64> = (0..12)
            .map(|_| {
                let c = b.ceiling();
                let d = b.next_delay(&mut rng);
                assert!(d <= c);
                c
            })
            .collect();
        assert_eq!(&ceilings[..4], &[1_000, 2_000, 4_000, 8_000]);
        assert_eq!(*ceilings.last().unwrap(), 300_000);
        let draws: Vec<u64> = (0..200).map(|_| b.next_delay(&mut rng)).collect();
        assert!(draws.iter().any(|d| *d < 30_000), "full jitter reaches low values");
        assert!(draws.iter().any(|d| *d > 270_000), "and high ones");
        b.reset();
        assert_eq!(b.ceiling(), 1_000);
    }

    #[test]
    fn http_failures_are_classified() {
        let body = |c| ErrorBody::new(c, "m");
        assert!(Failure::from_http(503, None, None).outcome_unknown());
        assert_eq!(
            Failure::from_http(503, None, Some(u64::MAX)),
            Failure::Server { status: 503, message: String::new(), retry_after_ms: MAX_RETRY_AFTER_MS as u32 },
            "a 503's Retry-After is kept, within the longest backoff"
        );
        assert!(Failure::from_http(500, Some(&body(ErrorCode::Internal)), None).outcome_unknown());
        assert_eq!(Failure::from_http(413, None, None), Failure::PayloadTooLarge(String::new()));
        assert_eq!(
            Failure::from_http(429, None, Some(u64::MAX)),
            Failure::RateLimited { retry_after_ms: MAX_RETRY_AFTER_MS },
            "a wait of years is read as the longest backoff"
        );
        assert_eq!(Failure::from_http(429, None, Some(3000)), Failure::RateLimited { retry_after_ms: 3000 });
        let f = Failure::from_http(409, Some(&body(ErrorCode::SchemaTooNew)), None);
        assert_eq!(f.recovery().map(|r| r.code.as_str()), Some("schema_too_new"));
        assert_eq!(Failure::from_http(401, None, None).recovery().map(|r| r.code.as_str()), Some("unauthorized"));
        assert!(!Failure::from_http(400, None, None).outcome_unknown());
        // A body the server stopped waiting for: treated as a timeout (retried, same opIds).
        assert_eq!(Failure::from_http(408, Some(&body(ErrorCode::RequestTimeout)), None), Failure::Timeout);
    }
}
