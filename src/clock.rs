//! The device's clock for `at` (PROTOCOL §2): `at = max(now + offset, lastAt + 1, maxSeenAt + 1)`.
//!
//! An edit made after seeing a remote edit always wins over it, whatever the
//! two devices' wall clocks say; and two edits on one device never share an
//! `at` — when no larger `at` is left, the edit is refused, never stamped
//! with an `at` already taken (the outbox is keyed by `at`).
//!
//! Two guards keep one broken clock from freezing the order of a user's data:
//! - the device learns its offset from the server's clock (every answer
//!   carries `now`) and stamps from the corrected time;
//! - a mark stamped implausibly far ahead of the corrected time
//!   ([`PLAUSIBLE_AHEAD_MS`]) is not taken into `maxSeenAt`: the server
//!   refuses such ops now, so such marks only exist from before it did.

use serde::{Deserialize, Serialize};

use crate::protocol::MAX_SAFE_INTEGER;

/// How far ahead of the (corrected) clock a seen mark may be and still count
/// for `maxSeenAt`: the reference server's default bound on `at` (1 day).
pub const PLAUSIBLE_AHEAD_MS: u64 = 86_400_000;

/// The monotonic `at` source of one device. `now` is injected by the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clock {
    /// The last `at` this device gave an op.
    pub last_at: u64,
    /// The largest plausible `at` this device has pulled or seen in a verdict's row.
    pub max_seen_at: u64,
    /// The server's clock minus this device's, in ms, as last measured.
    #[serde(default)]
    pub offset_ms: i64,
    /// When (device clock, ms) the offset was measured; 0: never.
    #[serde(default)]
    pub offset_at: u64,
    /// The largest `at` of this device's own ops the server acknowledged.
    #[serde(default)]
    pub max_acked_at: u64,
}

impl Clock {
    /// `now` corrected by the offset learned from the server.
    pub fn corrected(&self, now: u64) -> u64 {
        let c = now as i128 + self.offset_ms as i128;
        c.clamp(0, MAX_SAFE_INTEGER as i128) as u64
    }

    /// The `at` for the next op: `max(now + offset, lastAt + 1, maxSeenAt + 1)`,
    /// or `None` when that would pass 2^53-1 (no `at` is left on this device).
    /// Does not change the clock: see [`Clock::advance`].
    pub fn peek(&self, now: u64) -> Option<u64> {
        let at = self.corrected(now).max(self.last_at.saturating_add(1)).max(self.max_seen_at.saturating_add(1));
        (at <= MAX_SAFE_INTEGER).then_some(at)
    }

    /// Takes the `at` for the next op and remembers it as `lastAt`; `None`
    /// (and nothing changes) when no `at` is left.
    pub fn advance(&mut self, now: u64) -> Option<u64> {
        let at = self.peek(now)?;
        self.last_at = at;
        Some(at)
    }

    /// Remembers an `at` seen in a remote row — unless it lies implausibly
    /// far ahead of the corrected clock (a broken device's mark).
    pub fn observe(&mut self, at: u64, now: u64) {
        if at <= self.corrected(now).saturating_add(PLAUSIBLE_AHEAD_MS) {
            self.max_seen_at = self.max_seen_at.max(at);
        }
    }

    /// Learns the offset from an answer: the server said `server_now` to a
    /// request sent at `sent_at` and answered at `received_at` (device clock);
    /// the server's instant is taken as the middle of the round trip.
    pub fn learn_offset(&mut self, server_now: u64, sent_at: u64, received_at: u64) {
        let mid = (sent_at as i128 + received_at.max(sent_at) as i128) / 2;
        self.offset_ms = (server_now as i128 - mid).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        self.offset_at = received_at;
    }

    /// The server acknowledged this device's op stamped `at`.
    pub fn acked(&mut self, at: u64) {
        self.max_acked_at = self.max_acked_at.max(at);
    }

    /// The server refused an op because its `at` was too far ahead: take
    /// `lastAt` back to the largest `at` that still matters — pending ops,
    /// plausible seen marks, this device's acknowledged ops — so later edits
    /// are stamped near real time again and still order after all of those.
    pub fn rewind(&mut self, highest_pending: u64) {
        self.last_at = highest_pending.max(self.max_seen_at).max(self.max_acked_at);
    }

    /// The join of two copies (this context's and the stored one): every
    /// number at its max; the offset measured last wins.
    pub fn join(&self, other: &Clock) -> Clock {
        let (offset_ms, offset_at) =
            if other.offset_at > self.offset_at { (other.offset_ms, other.offset_at) } else { (self.offset_ms, self.offset_at) };
        Clock {
            last_at: self.last_at.max(other.last_at),
            max_seen_at: self.max_seen_at.max(other.max_seen_at),
            offset_ms,
            offset_at,
            max_acked_at: self.max_acked_at.max(other.max_acked_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_follows_now_when_ahead() {
        let mut c = Clock::default();
        assert_eq!(c.advance(1000), Some(1000));
        assert_eq!(c.advance(2000), Some(2000));
    }

    #[test]
    fn at_is_monotonic_when_the_wall_clock_goes_back() {
        let mut c = Clock::default();
        assert_eq!(c.advance(1000), Some(1000));
        assert_eq!(c.advance(500), Some(1001));
        assert_eq!(c.advance(1001), Some(1002));
    }

    #[test]
    fn an_edit_after_seeing_a_remote_edit_is_later() {
        let mut c = Clock::default();
        c.observe(9_000, 100);
        assert_eq!(c.advance(100), Some(9_001));
        c.observe(50, 100);
        assert_eq!(c.advance(100), Some(9_002));
    }

    #[test]
    fn no_at_is_ever_given_twice_even_at_the_top() {
        let mut c = Clock { last_at: MAX_SAFE_INTEGER - 1, ..Clock::default() };
        assert_eq!(c.advance(0), Some(MAX_SAFE_INTEGER));
        assert_eq!(c.advance(0), None, "the last at is taken: refuse, never reuse");
        assert_eq!(c.last_at, MAX_SAFE_INTEGER);
    }

    #[test]
    fn an_implausible_mark_does_not_freeze_the_clock() {
        let mut c = Clock::default();
        c.observe(MAX_SAFE_INTEGER, 1_000);
        let ats: Vec<_> = (0..3).map(|i| c.advance(1_000 + i).unwrap()).collect();
        assert_eq!(ats, vec![1_000, 1_001, 1_002]);
        c.observe(1_000 + PLAUSIBLE_AHEAD_MS, 1_000);
        assert_eq!(c.advance(1_003), Some(1_001 + PLAUSIBLE_AHEAD_MS), "a plausible mark still orders later edits");
    }

    #[test]
    fn the_offset_corrects_a_clock_that_is_hours_off() {
        let mut c = Clock::default();
        let hours = 5 * 3_600_000;
        // The device's clock is 5 h behind; the server answers a request sent at 1000, received at 1100.
        c.learn_offset(1_050 + hours, 1_000, 1_100);
        assert_eq!(c.offset_ms, hours as i64);
        assert_eq!(c.advance(2_000), Some(2_000 + hours));
        let mut fast = Clock::default();
        fast.learn_offset(1_000, 1_000 + hours, 1_000 + hours);
        assert_eq!(fast.advance(2_000 + hours), Some(2_000), "a clock ahead is corrected back");
        assert_eq!(fast.advance(0), Some(2_001), "never below lastAt + 1");
    }

    #[test]
    fn rewind_keeps_later_edits_after_everything_that_matters() {
        let mut c = Clock::default();
        c.acked(500);
        c.observe(700, 0);
        c.advance(MAX_SAFE_INTEGER);
        c.rewind(600);
        assert_eq!(c.advance(0), Some(701));
        c.rewind(900);
        assert_eq!(c.advance(0), Some(901));
    }

    #[test]
    fn join_keeps_the_latest_offset() {
        let a = Clock { offset_ms: 5, offset_at: 10, last_at: 3, ..Clock::default() };
        let b = Clock { offset_ms: -7, offset_at: 20, max_seen_at: 9, ..Clock::default() };
        let j = a.join(&b);
        assert_eq!((j.offset_ms, j.last_at, j.max_seen_at), (-7, 3, 9));
        assert_eq!(b.join(&a).offset_ms, -7);
    }
}
