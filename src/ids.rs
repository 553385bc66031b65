//! Names born on the device (PROTOCOL §1): deviceId, opId, rowId, attemptKey.
//!
//! One counter per device numbers both ops and rows. Several engines may
//! share one local database (tabs, a Service Worker), so numbers are handed
//! out from **blocks** reserved in the database: an engine reserves
//! `counter+1 ..= counter+BLOCK` in a transaction of its own (at open, and
//! again ahead of need, once half of its block is used) or in the
//! transaction that records ops, and hands out numbers from memory until the
//! block is used up. Two engines never hold the same block, and a number is
//! never handed out twice, even after a crash (a reserved block is either
//! persisted or dropped). A block is large: a number not handed out before
//! a reload is lost, which costs nothing (the counter has 2^53 of them), and
//! an app naming a hundred thousand rows in one synchronous loop never runs
//! out.

use crate::protocol::{OpId, MAX_SAFE_INTEGER};

/// How many numbers an engine reserves at once, by default (2^20: a million
/// synchronous `newRowId()` calls, and about 8.6 billion reloads before the
/// counter's end).
pub const BLOCK: u64 = 1 << 20;

/// A UUID v4 string from 16 random bytes (the randomness is the caller's).
pub fn device_id_from(random: [u8; 16]) -> String {
    let mut b = random;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The opId of number `n` on `device`: `<deviceId>:<n>`.
pub fn op_id(device: &str, n: u64) -> OpId {
    OpId::new(format!("{device}:{n}"))
}

/// The device an opId was born on: what comes before its last `:` (the
/// whole opId if it has none, as an op of an unknown device).
pub fn device_of(op_id: &OpId) -> &str {
    op_id.as_str().rsplit_once(':').map_or(op_id.as_str(), |(d, _)| d)
}

/// The rowId of number `n` on `device`: `<deviceId>-<n>`.
pub fn row_id(device: &str, n: u64) -> String {
    format!("{device}-{n}")
}

/// A block of reserved counter numbers `next..=last` (empty when `next > last`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdBlock {
    /// The next number to hand out.
    pub next: u64,
    /// The last number of the block.
    pub last: u64,
}

impl IdBlock {
    /// Whether the block has no number left.
    pub fn is_empty(&self) -> bool {
        self.next == 0 || self.next > self.last
    }

    /// Reserves `size` numbers after `counter` (the persisted high-water
    /// mark) and returns the new high-water mark to persist. Near the end of
    /// the id space (2^53-1, the largest number JS and JSON carry exactly)
    /// the block is shorter, and past it empty: only then do ids run out.
    pub fn reserve_after(&mut self, counter: u64, size: u64) -> u64 {
        self.next = counter.saturating_add(1);
        self.last = counter.saturating_add(size.max(1)).min(MAX_SAFE_INTEGER);
        self.last.max(counter)
    }

    /// Takes the next number, if any is left.
    pub fn take(&mut self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let n = self.next;
        self.next += 1;
        Some(n)
    }
}

/// A small seeded generator (SplitMix64) for jitter and attempt keys: the seed
/// is injected, so every run of the engine can be replayed.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..=max`.
    pub fn up_to(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (max + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_are_uuid_v4() {
        let id = device_id_from([0xff; 16]);
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        crate::protocol::check_op_id(&format!("{id}:1")).unwrap();
    }

    #[test]
    fn blocks_never_overlap() {
        let (mut a, mut b) = (IdBlock::default(), IdBlock::default());
        assert!(a.is_empty());
        let hw = a.reserve_after(0, BLOCK);
        let hw2 = b.reserve_after(hw, BLOCK);
        let from_a: Vec<u64> = std::iter::from_fn(|| a.take()).collect();
        let from_b: Vec<u64> = std::iter::from_fn(|| b.take()).collect();
        assert_eq!(from_a.len() as u64, BLOCK);
        assert_eq!(from_a.last(), Some(&hw));
        assert_eq!(from_b.first(), Some(&(hw + 1)));
        assert_eq!(from_b.last(), Some(&hw2));
    }

    #[test]
    fn ids_run_out_only_at_the_end_of_the_id_space() {
        let mut b = IdBlock::default();
        assert_eq!(b.reserve_after(MAX_SAFE_INTEGER - 2, BLOCK), MAX_SAFE_INTEGER);
        assert_eq!(std::iter::from_fn(|| b.take()).count(), 2);
        assert_eq!(b.reserve_after(MAX_SAFE_INTEGER, BLOCK), MAX_SAFE_INTEGER);
        assert!(b.is_empty() && b.take().is_none());
    }

    #[test]
    fn op_and_row_ids_are_named_from_the_device() {
        assert_eq!(op_id("dev", 42).as_str(), "dev:42");
        assert_eq!(row_id("dev", 7), "dev-7");
    }
}
