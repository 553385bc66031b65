//! A per-user token bucket: `rate` requests per second, bursts of `burst`.

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
        self.check_at(user, Instant::now())
    }

    fn check_at(&self, user: &str, now: Instant) -> Result<(), u64> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > 100_000 {
            // Forget users whose bucket is full again: they lose nothing.
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < burst);
        }
        let (tokens, at) = buckets.entry(user.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.rate).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bursts_then_waits_then_refills_per_user() {
        let r = RateLimiter::new(1.0, 2.0);
        let t = Instant::now();
        assert!(r.check_at("u", t).is_ok());
        assert!(r.check_at("u", t).is_ok());
        assert_eq!(r.check_at("u", t), Err(1));
        assert!(r.check_at("v", t).is_ok());
        assert!(r.check_at("u", t + Duration::from_millis(1100)).is_ok());
    }
}
