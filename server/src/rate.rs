//! Per-user token buckets: `rate` tokens per second, at most `burst` saved up.
//! One bucket type serves the request rate (one token a request) and the
//! budgets of work ([`crate::budget`]: a token an op, a space named, a row
//! read), so every refusal of either kind is the same `429` with the same
//! `Retry-After` arithmetic.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Per-user token buckets.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `rate` tokens per second (> 0), at most `burst` saved up (≥ 1).
    pub fn new(rate: f64, burst: f64) -> RateLimiter {
        RateLimiter { rate, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one token of `user`'s bucket, or says how many whole seconds to wait.
    pub fn check(&self, user: &str) -> Result<(), u64> {
        self.take(user, 1.0)
    }

    /// Takes `cost` tokens of `user`'s bucket, or says how many whole seconds to
    /// wait. A cost above the burst passes with a full bucket (which it leaves
    /// in debt): otherwise it could never pass.
    pub fn take(&self, user: &str, cost: f64) -> Result<(), u64> {
        self.take_at(user, cost, Instant::now())
    }

    /// Whether `user`'s bucket holds a token: a request whose cost is learnt only
    /// from its body is refused here, before the body is read, while a debt
    /// ([`RateLimiter::charge`]) is being paid off.
    pub fn ready(&self, user: &str) -> Result<(), u64> {
        self.with_bucket(
            user,
            Instant::now(),
            |tokens, rate| {
                if *tokens >= 1.0 {
                    Ok(())
                } else {
                    Err(wait(1.0 - *tokens, rate))
                }
            },
        )
    }

    /// Takes `cost` tokens even if that leaves the bucket in debt: work known only
    /// once done (rows read) is paid after, and the next request waits for it.
    pub fn charge(&self, user: &str, cost: f64) {
        self.with_bucket(user, Instant::now(), |tokens, _| *tokens -= cost);
    }

    fn take_at(&self, user: &str, cost: f64, now: Instant) -> Result<(), u64> {
        let need = cost.min(self.burst);
        self.with_bucket(user, now, |tokens, rate| {
            if *tokens >= need {
                *tokens -= cost;
                Ok(())
            } else {
                Err(wait(need - *tokens, rate))
            }
        })
    }

    /// Runs `f` on `user`'s bucket refilled to `now`.
    fn with_bucket<T>(&self, user: &str, now: Instant, f: impl FnOnce(&mut f64, f64) -> T) -> T {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > 100_000 {
            // Forget users whose bucket is full again: they lose nothing.
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < burst);
        }
        let (tokens, at) = buckets.entry(user.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        f(tokens, self.rate)
    }
}

/// Whole seconds until `missing` tokens have come back at `rate`, at least 1.
fn wait(missing: f64, rate: f64) -> u64 {
    (missing / rate).ceil().clamp(1.0, u64::MAX as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bursts_then_waits_then_refills_per_user() {
        let r = RateLimiter::new(1.0, 2.0);
        let t = Instant::now();
        assert!(r.take_at("u", 1.0, t).is_ok());
        assert!(r.take_at("u", 1.0, t).is_ok());
        assert_eq!(r.take_at("u", 1.0, t), Err(1));
        assert!(r.take_at("v", 1.0, t).is_ok());
        assert!(r.take_at("u", 1.0, t + Duration::from_millis(1100)).is_ok());
    }

    #[test]
    fn costs_wait_for_their_tokens_and_debts_are_paid_before_the_next() {
        let r = RateLimiter::new(10.0, 100.0);
        assert!(r.take("u", 60.0).is_ok());
        let wait = r.take("u", 60.0).unwrap_err();
        assert!((2..=3).contains(&wait), "20 missing at 10/s: {wait}");
        // Above the burst: passes only with a full bucket, leaving a debt.
        assert!(r.take("v", 500.0).is_ok());
        assert!(r.ready("v").unwrap_err() >= 40);
        r.charge("w", 150.0);
        assert!(r.ready("w").is_err());
        assert!(r.ready("x").is_ok());
    }
}
