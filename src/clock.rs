//! The device's clock for `at` (PROTOCOL §2): `at = max(now, lastAt + 1, maxSeenAt + 1)`.
//!
//! An edit made after seeing a remote edit always wins over it, whatever the
//! two devices' wall clocks say; and two edits on one device never share an `at`.

use serde::{Deserialize, Serialize};

use crate::protocol::MAX_SAFE_INTEGER;

/// The monotonic `at` source of one device. `now` is injected by the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clock {
    /// The last `at` this device gave an op.
    pub last_at: u64,
    /// The largest `at` this device has pulled or seen in a verdict's row.
    pub max_seen_at: u64,
}

impl Clock {
    /// The `at` for the next op: `max(now, lastAt + 1, maxSeenAt + 1)`, capped at 2^53-1.
    /// Does not change the clock: see [`Clock::advance`].
    pub fn peek(&self, now: u64) -> u64 {
        now.max(self.last_at.saturating_add(1)).max(self.max_seen_at.saturating_add(1)).min(MAX_SAFE_INTEGER)
    }

    /// Takes the `at` for the next op and remembers it as `lastAt`.
    pub fn advance(&mut self, now: u64) -> u64 {
        let at = self.peek(now);
        self.last_at = at;
        at
    }

    /// Remembers an `at` seen in a remote row.
    pub fn observe(&mut self, at: u64) {
        self.max_seen_at = self.max_seen_at.max(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_follows_now_when_ahead() {
        let mut c = Clock::default();
        assert_eq!(c.advance(1000), 1000);
        assert_eq!(c.advance(2000), 2000);
    }

    #[test]
    fn at_is_monotonic_when_the_wall_clock_goes_back() {
        let mut c = Clock::default();
        assert_eq!(c.advance(1000), 1000);
        assert_eq!(c.advance(500), 1001);
        assert_eq!(c.advance(1001), 1002);
    }

    #[test]
    fn an_edit_after_seeing_a_remote_edit_is_later() {
        let mut c = Clock::default();
        c.observe(9_000);
        assert_eq!(c.advance(100), 9_001);
        c.observe(50);
        assert_eq!(c.advance(100), 9_002);
    }

    #[test]
    fn at_never_exceeds_the_safe_integer() {
        let mut c = Clock { last_at: MAX_SAFE_INTEGER, max_seen_at: 0 };
        assert_eq!(c.advance(0), MAX_SAFE_INTEGER);
    }
}
