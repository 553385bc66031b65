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

/// Entries a run holds at most (~15 KB of keys); a few under test, so
/// tests walk across runs.
const RUN_ENTRIES: usize = if cfg!(any(test, feature = "sim")) { 3 } else { 512 };
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
    fn last(&self) -> Option<&[u8]> {
        self.runs.last().and_then(|r| r.len().checked_sub(1).map(|i| r.get(i)))
    }

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

/// Builds the entries of an index being filled, given in any order, with
/// a peak of memory near what the entries take: entries are gathered in
/// blocks of [`BLOCK_BYTES`], each block is sorted and packed as it fills,
/// and the blocks are merged at the end, each run freed as it is read.
/// (One buffer of every entry, sorted at the end, peaked at ~2.5× that:
/// the buffer's doublings, the sort's spans, then the runs beside it — and
/// a wasm memory never gives back its peak.)
#[derive(Default)]
pub struct Builder {
    /// The block being gathered: entries end to end, and where each ends.
    pub bytes: Vec<u8>,
    ends: Vec<u32>,
    blocks: Vec<Vec<Run>>,
}

/// The next entry of block `i`, at its place `at[i]` (run, entry).
fn head<'b>(blocks: &'b [Vec<Run>], at: &[(usize, usize)], i: usize) -> Option<&'b [u8]> {
    let (r, e) = at[i];
    blocks[i].get(r).filter(|run| e < run.len()).map(|run| run.get(e))
}

/// Puts block `i` in its place in `order` (by next entry, the smallest
/// last), if it has entries left.
fn place(order: &mut Vec<usize>, blocks: &[Vec<Run>], at: &[(usize, usize)], i: usize) {
    if let Some(h) = head(blocks, at, i) {
        let place = order.partition_point(|&x| head(blocks, at, x) > Some(h));
        order.insert(place, i);
    }
}

/// Bytes a block gathers before it is sorted and packed: a few entries
/// under test, so every test that fills an index merges blocks.
const BLOCK_BYTES: usize = if cfg!(any(test, feature = "sim")) { 6 } else { 1 << 18 };

impl Builder {
    /// The entry written at the end of [`Builder::bytes`] since the last
    /// call is whole.
    pub fn ended(&mut self) {
        self.ends.push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
        if self.bytes.len() >= BLOCK_BYTES {
            self.pack_block();
        }
    }

    /// Sorts the block gathered and packs it into runs.
    fn pack_block(&mut self) {
        if self.ends.is_empty() {
            return;
        }
        let (bytes, ends) = (&self.bytes, &self.ends);
        let at = |i: u32| {
            let i = i as usize;
            &bytes[if i == 0 { 0 } else { ends[i - 1] as usize }..ends[i] as usize]
        };
        let mut order: Vec<u32> = (0..u32::try_from(ends.len()).unwrap_or(u32::MAX)).collect();
        order.sort_unstable_by(|&a, &b| at(a).cmp(at(b)));
        let mut fill = Filler { size: RUN_ENTRIES, runs: Vec::new() };
        for i in order {
            fill.push(at(i));
        }
        self.blocks.push(fill.finish());
        self.bytes.clear();
        self.ends.clear();
    }

    /// The entries, sorted (one of each).
    pub fn finish(mut self) -> Entries {
        self.pack_block();
        self.bytes = Vec::new();
        let mut blocks = std::mem::take(&mut self.blocks);
        // Each block's place: its run, and the entry in it.
        let mut at: Vec<(usize, usize)> = vec![(0, 0); blocks.len()];
        // The blocks with entries left, by their next entry, the smallest last.
        let mut order: Vec<usize> = Vec::with_capacity(blocks.len());
        for i in 0..blocks.len() {
            place(&mut order, &blocks, &at, i);
        }
        let mut fill = Filler { size: RUN_ENTRIES, runs: Vec::new() };
        let mut n = 0;
        while let Some(i) = order.pop() {
            if let Some(e) = head(&blocks, &at, i) {
                if fill.last() != Some(e) {
                    fill.push(e);
                    n += 1;
                }
            }
            at[i].1 += 1;
            let (r, e) = at[i];
            if blocks[i].get(r).is_some_and(|run| e >= run.len()) {
                // Read: freed now, so the runs being built take its place.
                if let Some(run) = blocks[i].get_mut(r) {
                    *run = Run::default();
                }
                at[i] = (r + 1, 0);
            }
            place(&mut order, &blocks, &at, i);
        }
        Entries { runs: fill.finish(), packed: n, len: n, ..Entries::default() }
    }
}

impl Entries {
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
            let mut b = Builder::default();
            for e in &start {
                b.bytes.extend_from_slice(e);
                b.ended();
            }
            let mut set: BTreeSet<Vec<u8>> = start.into_iter().collect();
            let mut got = b.finish();
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
