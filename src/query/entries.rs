//! An index's entries: a sorted set of byte strings ([`super::sortkey`]),
//! kept packed.
//!
//! Why packed: an entry held as its own allocation in a tree, with a second
//! map from its row to it, cost ~118 bytes an entry for ~30 bytes of key
//! (1M rows: 113 MB for one index). Here entries sit end to end in runs of
//! [`RUN_ENTRIES`] (one buffer and one `u32` end each), ~34 bytes an
//! entry; entries added or taken out since are kept beside the runs, in a
//! small tree, and folded into the runs they fall in once there are many.
//! The same shape as the base rows (`replica::Packed`), and the shape an
//! index kept on disk would have.
//!
//! No map from a row to its entry: whoever changes a row knows what the
//! row was, so it names the entry to take out ([`super::Indexes::put`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

use crate::layered::{layered, Layer};

/// Entries a run holds at most (~15 KB of keys).
const RUN_ENTRIES: usize = 512;
/// Changes kept beside the runs before they are folded in (or half the
/// packed entries, whichever is more): small under test, so folds are
/// exercised by every test that writes.
const FOLD_AFTER: usize = if cfg!(any(test, feature = "sim")) { 8 } else { 4_096 };

/// Entries end to end.
#[derive(Debug, Clone, Default)]
struct Run {
    bytes: Vec<u8>,
    /// Where each entry ends in `bytes`.
    ends: Vec<u32>,
}

impl Run {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    fn first(&self) -> &[u8] {
        self.get(0)
    }

    /// The position of the first entry at or above `e` (`Err`) or of `e` itself (`Ok`).
    fn find(&self, e: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).cmp(e) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn push(&mut self, e: &[u8]) {
        self.bytes.extend_from_slice(e);
        // An entry is a few values and a row id; a run of them is far below 4 GB.
        self.ends.push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
    }
}

/// Fills runs of at most `size` entries, in order.
struct Filler {
    size: usize,
    runs: Vec<Run>,
}

impl Filler {
    fn push(&mut self, e: &[u8]) {
        if self.runs.last().is_none_or(|r| r.len() >= self.size) {
            self.runs.push(Run { bytes: Vec::with_capacity(self.size * 32), ends: Vec::with_capacity(self.size) });
        }
        if let Some(r) = self.runs.last_mut() {
            r.push(e);
        }
    }

    fn finish(mut self) -> Vec<Run> {
        for r in &mut self.runs {
            r.bytes.shrink_to_fit();
            r.ends.shrink_to_fit();
        }
        self.runs
    }
}

/// A sorted set of byte strings: packed runs, and the changes since.
#[derive(Debug, Clone)]
pub struct Entries {
    runs: Vec<Run>,
    /// `true`: in the set and in no run; `false`: in a run, taken out.
    fresh: BTreeMap<Box<[u8]>, bool>,
    packed: usize,
    len: usize,
    run_entries: usize,
    fold_after: usize,
}

impl Default for Entries {
    fn default() -> Entries {
        Entries { runs: Vec::new(), fresh: BTreeMap::new(), packed: 0, len: 0, run_entries: RUN_ENTRIES, fold_after: FOLD_AFTER }
    }
}

impl Entries {
    /// The set of these entries, given end to end in `bytes` (`ends` says
    /// where each ends), in any order: sorted once, packed once.
    pub fn from_unsorted(bytes: &[u8], ends: &[u32]) -> Entries {
        let mut spans: Vec<(u32, u32)> = Vec::with_capacity(ends.len());
        let mut start = 0;
        for &end in ends {
            spans.push((start, end));
            start = end;
        }
        let at = |(s, e): (u32, u32)| &bytes[s as usize..e as usize];
        spans.sort_unstable_by(|a, b| at(*a).cmp(at(*b)));
        spans.dedup_by(|a, b| at(*a) == at(*b));
        let mut out = Entries::default();
        let mut fill = Filler { size: out.run_entries, runs: Vec::new() };
        for s in spans.iter() {
            fill.push(at(*s));
        }
        out.runs = fill.finish();
        out.packed = spans.len();
        out.len = spans.len();
        out
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The run `e` would be in: the last whose first entry is at or below it.
    fn run_of(&self, e: &[u8]) -> usize {
        self.runs.partition_point(|r| r.first() <= e).saturating_sub(1)
    }

    fn in_runs(&self, e: &[u8]) -> bool {
        self.runs.get(self.run_of(e)).is_some_and(|r| r.find(e).is_ok())
    }

    /// Adds an entry (again: nothing).
    pub fn insert(&mut self, e: &[u8]) {
        match self.fresh.get(e) {
            Some(true) => {}
            Some(false) => {
                self.fresh.remove(e);
                self.len += 1;
            }
            None => {
                if !self.in_runs(e) {
                    self.len += 1;
                    self.fresh.insert(e.into(), true);
                    self.fold_if_due();
                }
            }
        }
    }

    /// Takes an entry out (not there: nothing).
    pub fn remove(&mut self, e: &[u8]) {
        match self.fresh.get(e) {
            Some(false) => {}
            Some(true) => {
                self.fresh.remove(e);
                self.len -= 1;
            }
            None => {
                if self.in_runs(e) {
                    self.len -= 1;
                    self.fresh.insert(e.into(), false);
                    self.fold_if_due();
                }
            }
        }
    }

    /// The entries from `lo` to `hi` (both included), ascending or, with
    /// `desc`, descending: read lazily, so a page costs its entries.
    pub fn range<'a>(&'a self, lo: &[u8], hi: &[u8], desc: bool) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (lo, hi): (Box<[u8]>, Box<[u8]>) = (lo.into(), hi.into());
        let fresh: Box<dyn Iterator<Item = (&'a [u8], bool)> + 'a> = if lo > hi {
            Box::new(std::iter::empty())
        } else {
            let fresh = self.fresh.range::<[u8], _>((Bound::Included(&*lo), Bound::Included(&*hi))).map(|(k, &v)| (&**k, v));
            if desc {
                Box::new(fresh.rev())
            } else {
                Box::new(fresh)
            }
        };
        let packed: Box<dyn Iterator<Item = &'a [u8]> + 'a> = if self.runs.is_empty() || lo > hi {
            Box::new(std::iter::empty())
        } else if desc {
            // From the last entry at or below `hi`, down to `lo`.
            let r = self.run_of(&hi);
            let end = match self.runs[r].find(&hi) {
                Ok(i) => i + 1,
                Err(i) => i,
            };
            let runs = &self.runs[..=r];
            Box::new(
                runs.iter()
                    .enumerate()
                    .rev()
                    .flat_map(move |(k, run)| (0..if k == r { end } else { run.len() }).rev().map(move |i| run.get(i)))
                    .take_while(move |e| *e >= &*lo),
            )
        } else {
            let r = self.run_of(&lo);
            let start = self.runs[r].find(&lo).unwrap_or_else(|i| i);
            Box::new(
                self.runs[r..]
                    .iter()
                    .enumerate()
                    .flat_map(move |(k, run)| (if k == 0 { start } else { 0 }..run.len()).map(move |i| run.get(i)))
                    .take_while(move |e| *e <= &*hi),
            )
        };
        layered(packed, fresh, move |p: &&[u8], (f, _): &(&[u8], bool)| if desc { f.cmp(p) } else { p.cmp(f) }).filter_map(|layer| {
            match layer {
                Layer::Under(e) | Layer::Over((e, true)) => Some(e),
                Layer::Over((_, false)) => None,
            }
        })
    }

    fn fold_if_due(&mut self) {
        if self.fresh.len() > self.fold_after.max(self.packed / 2) {
            self.fold();
        }
    }

    /// Folds the changes into the runs: only the runs that receive one are
    /// rewritten (a run grown past twice its size is split).
    fn fold(&mut self) {
        let fresh = std::mem::take(&mut self.fresh);
        let mut changes = fresh.iter().map(|(k, &v)| (&**k, v)).peekable();
        let old = std::mem::take(&mut self.runs);
        let mut runs = Vec::with_capacity(old.len() + 1);
        let n = old.len();
        for (i, run) in old.iter().enumerate() {
            // This run's changes: those below the next run's first entry.
            let next = old.get(i + 1).map(Run::first);
            let mut mine = std::iter::from_fn(|| changes.next_if(|(k, _)| next.is_none_or(|n| *k < n))).peekable();
            if mine.peek().is_none() {
                runs.push(run.clone());
                continue;
            }
            let mut fill = Filler { size: self.run_entries, runs: Vec::new() };
            let packed = (0..run.len()).map(|j| run.get(j));
            for layer in layered(packed, mine, |p: &&[u8], (f, _): &(&[u8], bool)| p.cmp(f)) {
                match layer {
                    Layer::Under(e) => fill.push(e),
                    Layer::Over((e, true)) => fill.push(e),
                    Layer::Over((_, false)) => {}
                }
            }
            runs.extend(fill.finish());
        }
        if n == 0 {
            let mut fill = Filler { size: self.run_entries, runs: Vec::new() };
            for (e, &live) in &fresh {
                if live {
                    fill.push(e);
                }
            }
            runs = fill.finish();
        }
        self.packed = runs.iter().map(Run::len).sum();
        self.runs = runs;
    }

    /// Bytes held (the runs' buffers, and an estimate for the changes).
    pub fn heap_bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes.capacity() + 4 * r.ends.capacity()).sum::<usize>()
            + self.fresh.keys().map(|k| k.len() + 48).sum::<usize>()
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Step {
        Insert(Vec<u8>),
        Remove(Vec<u8>),
        Range(Vec<u8>, Vec<u8>, bool),
    }

    fn entry() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0x40, 0xFF]), 0..4)
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => entry().prop_map(Step::Insert),
            2 => entry().prop_map(Step::Remove),
            1 => (entry(), entry(), any::<bool>()).prop_map(|(a, b, d)| Step::Range(a, b, d)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// The rule: packed runs and the changes beside them read as one
        /// sorted set, whatever the order of inserts, removals and folds.
        #[test]
        fn entries_read_as_a_sorted_set(start in prop::collection::vec(entry(), 0..40), steps in prop::collection::vec(step(), 0..80), run_entries in 1usize..5, fold_after in 0usize..6) {
            let mut bytes = Vec::new();
            let mut ends = Vec::new();
            for e in &start {
                bytes.extend_from_slice(e);
                ends.push(bytes.len() as u32);
            }
            let mut set: BTreeSet<Vec<u8>> = start.into_iter().collect();
            let mut got = Entries::from_unsorted(&bytes, &ends);
            got.run_entries = run_entries;
            got.fold_after = fold_after;
            for s in steps {
                match s {
                    Step::Insert(e) => { got.insert(&e); set.insert(e); }
                    Step::Remove(e) => { got.remove(&e); set.remove(&e); }
                    Step::Range(lo, hi, desc) => {
                        let want: Vec<&[u8]> = if lo > hi { Vec::new() } else {
                            let r = set.range::<[u8], _>((Bound::Included(&*lo), Bound::Included(&*hi))).map(Vec::as_slice);
                            if desc { r.rev().collect() } else { r.collect() }
                        };
                        prop_assert_eq!(got.range(&lo, &hi, desc).collect::<Vec<_>>(), want);
                    }
                }
                prop_assert_eq!(got.len(), set.len());
                let all: Vec<&[u8]> = got.range(&[], &[0xFF; 8], false).collect();
                prop_assert_eq!(all, set.iter().map(Vec::as_slice).collect::<Vec<_>>());
            }
        }
    }
}
