//! The base rows, held packed: most of a device's memory was its rows
//! decoded — a tree node, a key of three strings and a row of cells, ≈ 380
//! bytes a row natively — where the same row stored in a chunk is a fifth
//! of that. So base rows stay in memory as the store keeps them: runs of
//! rows in encoding 4 ([`crate::chunks`]), sorted, read one row at a time
//! when asked for; rows written since their run was packed sit decoded
//! beside the runs until there are enough of them to fold in.
//!
//! A run is the unit the lazy store loads and evicts (PROTOCOL §7, "The
//! lazy store"): opened lazily, the base holds only the runs its engine
//! asked the store for ([`Packed::provide`]), each with the span of keys it
//! answers for, so a key outside every span is unknown, not absent.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::chunks::{chunk_of, decode_cells, decode_chunk, decode_row, encode_one, key_bytes_of, key_of, split_chunk};
use crate::layered::{layered, Layer};
use crate::protocol::{Row, RowKey};
use crate::store::{Provided, ProvidedRows, StoreError, Want};

/// Runs born of a fold hold at most this many rows: folding a row into a
/// run re-encodes the run, so runs are kept short.
const RUN_ROWS: usize = 256;
/// Rows written since the last fold are folded in once there are more of
/// them than this, or than half the packed rows: a fold costs about the
/// rows it rewrites, so backfilling N rows costs a few N in all.
/// (A handful in tests and the simulator, so that their steps fold often.)
const FOLD_AFTER: usize = if cfg!(any(test, feature = "sim")) { 8 } else { 4_096 };

/// Rows in encoding 4, as stored: row `i` is `bytes[starts[i]..starts[i + 1]]`.
#[derive(Clone)]
struct Run {
    /// Its first row's key; in a lazy base, the start of its span.
    first: RowKey,
    bytes: Box<[u8]>,
    starts: Box<[u32]>,
    /// In a lazy base: the end of the keys it answers for (`None`: to the
    /// last key), and when it was last read (for eviction).
    span: Option<Span>,
}

/// What a run of a lazy base answers for: every base row in `[first, to)`.
#[derive(Clone)]
struct Span {
    to: Option<RowKey>,
    used: std::cell::Cell<u64>,
}

impl Run {
    fn len(&self) -> usize {
        self.starts.len()
    }

    fn row_bytes(&self, i: usize) -> &[u8] {
        let start = self.starts[i] as usize;
        let end = self.starts.get(i + 1).map_or(self.bytes.len(), |e| *e as usize);
        &self.bytes[start..end]
    }

    /// The key of row `i`; every row was checked when the run was made.
    fn key(&self, i: usize) -> (&str, &str, &str) {
        key_of(self.row_bytes(i)).unwrap_or(("", "", ""))
    }

    fn decode(&self, i: usize) -> Option<(RowKey, Row)> {
        let row = decode_row(self.row_bytes(i));
        debug_assert!(row.is_ok(), "a packed row was checked when packed");
        row.ok()
    }

    /// Where `key` is, or would be, among the run's rows.
    fn find(&self, key: &RowKey) -> Result<usize, usize> {
        let want = (key.table.as_bytes(), key.row_id.as_bytes(), key.space.as_bytes());
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let here = key_bytes_of(self.row_bytes(mid)).unwrap_or((b"", b"", b""));
            match here.cmp(&want) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// A stored chunk kept as it is ([`split_chunk`] found its rows).
    fn from_chunk(bytes: Vec<u8>, starts: Vec<u32>) -> Option<Run> {
        let first = owned(key_of(&bytes[*starts.first()? as usize..]).ok()?);
        Some(Run { first, bytes: bytes.into_boxed_slice(), starts: starts.into_boxed_slice(), span: None })
    }

    /// Whether its span holds `key` (a run of an eager base holds every key
    /// from its first to the next run's).
    fn spans(&self, key: &RowKey) -> bool {
        self.span.as_ref().is_none_or(|span| crate::store::spans(&self.first, span.to.as_ref(), key))
    }

    /// Runs given in key order as one, named `first`, with `span`.
    fn joined(first: RowKey, runs: Vec<Run>, span: Option<Span>) -> Result<Run, StoreError> {
        let (mut bytes, mut starts) = (Vec::new(), Vec::new());
        for run in runs {
            let base = u32::try_from(bytes.len()).map_err(|_| StoreError::Corrupt("a run past 4 GB".into()))?;
            starts.extend(run.starts.iter().map(|s| s + base));
            bytes.extend_from_slice(&run.bytes);
        }
        Ok(Run { first, bytes: bytes.into_boxed_slice(), starts: starts.into_boxed_slice(), span })
    }

    /// The bytes it holds (what the cache counts).
    fn weight(&self) -> usize {
        self.bytes.len() + self.starts.len() * 4 + std::mem::size_of::<Run>()
    }
}

/// Builds runs of at most `size` rows from encoded rows given in key order.
struct Builder<'o> {
    size: usize,
    out: &'o mut Vec<Run>,
    bytes: Vec<u8>,
    starts: Vec<u32>,
}

impl<'o> Builder<'o> {
    fn new(size: usize, out: &'o mut Vec<Run>) -> Self {
        Builder { size: size.max(1), out, bytes: Vec::new(), starts: Vec::new() }
    }

    /// Adds one encoded row (its bytes as a run holds them).
    fn push(&mut self, row: &[u8]) -> Result<(), StoreError> {
        self.start()?;
        self.bytes.extend_from_slice(row);
        Ok(())
    }

    /// Adds one row, encoded in place.
    fn encode(&mut self, key: &RowKey, row: &Row) -> Result<(), StoreError> {
        self.start()?;
        self.bytes = encode_one(key, row, std::mem::take(&mut self.bytes))?;
        Ok(())
    }

    fn start(&mut self) -> Result<(), StoreError> {
        if self.starts.len() == self.size {
            self.finish();
        }
        if self.starts.is_empty() {
            // About a run's worth at once (rows are some 100 bytes): a few
            // large allocations per run, not one per doubling.
            self.bytes.reserve(self.size.min(RUN_ROWS) * 128);
            self.starts.reserve(self.size.min(RUN_ROWS));
        }
        self.starts.push(u32::try_from(self.bytes.len()).map_err(|_| StoreError::Corrupt("a run past 4 GB".into()))?);
        Ok(())
    }

    fn finish(&mut self) {
        let (bytes, starts) = (std::mem::take(&mut self.bytes), std::mem::take(&mut self.starts));
        if let Some(run) = Run::from_chunk(bytes, starts) {
            self.out.push(run);
        }
    }
}

impl Drop for Builder<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The base rows of a device: packed runs, and the rows written since
/// (`None`: removed).
#[derive(Clone)]
pub struct Packed {
    runs: Vec<Run>,
    fresh: BTreeMap<RowKey, Option<Row>>,
    packed_rows: usize,
    /// [`FOLD_AFTER`] and [`RUN_ROWS`], smaller in tests.
    fold_after: usize,
    run_rows: usize,
    /// Opened lazily: the runs are what the store provided, each with its
    /// span; the fresh rows are never folded into them (a run stays a copy
    /// of what the store holds, so it can be let go at any time).
    lazy: bool,
    /// The clock of reads, for eviction (least recently read first).
    reads: std::cell::Cell<u64>,
}

impl Default for Packed {
    fn default() -> Packed {
        Packed {
            runs: Vec::new(),
            fresh: BTreeMap::new(),
            packed_rows: 0,
            fold_after: FOLD_AFTER,
            run_rows: RUN_ROWS,
            lazy: false,
            reads: std::cell::Cell::new(0),
        }
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("runs", &self.runs.len())
            .field("packed_rows", &self.packed_rows)
            .field("fresh", &self.fresh.len())
            .finish()
    }
}

/// Where an iterated row comes from: a packed run (decoded when read) or the fresh rows.
pub enum Found<'a> {
    /// Its bytes in a run (checked when the run was made).
    Packed(&'a [u8]),
    /// Decoded: written since its run was packed, or pending.
    Fresh(&'a Row),
}

impl Found<'_> {
    /// The row, decoded.
    pub fn row(&self) -> Option<Row> {
        match self {
            Found::Packed(bytes) => decode_cells(bytes).ok(),
            Found::Fresh(r) => Some((*r).clone()),
        }
    }
}

impl Packed {
    /// The base rows from what the store holds: chunks kept as stored (an
    /// earlier encoding is decoded and packed again), then `rows` over them
    /// in order, a removal ([`Row::is_gone`]) taking its row away.
    pub fn open(chunks: Vec<Vec<u8>>, rows: impl IntoIterator<Item = (RowKey, Row)>) -> Result<Packed, StoreError> {
        let mut runs = Vec::with_capacity(chunks.len());
        let mut loose = Vec::new();
        for bytes in chunks {
            match split_chunk(&bytes)? {
                Some(starts) => runs.extend(Run::from_chunk(bytes, starts)),
                None => loose.extend(decode_chunk(&bytes)?),
            }
        }
        // Equal firsts overlap, and are read by decoding: any order of them will do.
        let mut runs = crate::cold_sort::sorted_by(runs, |a, b| a.first.cmp(&b.first));
        // Runs must not overlap: a run's last key below the next run's first.
        let overlap = runs.windows(2).any(|w| {
            let last = w[0].key(w[0].len() - 1);
            last >= (w[1].first.table.as_str(), w[1].first.row_id.as_str(), w[1].first.space.as_str())
        });
        if overlap {
            for run in runs.drain(..) {
                loose.extend((0..run.len()).filter_map(|i| run.decode(i)));
            }
        }
        let packed_rows = runs.iter().map(Run::len).sum();
        let mut base = Packed { runs, packed_rows, ..Packed::default() };
        for (k, r) in loose.into_iter().chain(rows) {
            base.fresh.insert(k, (!r.is_gone()).then_some(r));
        }
        base.fold_if_due()?;
        Ok(base)
    }

    /// The base row of a key.
    pub fn get(&self, key: &RowKey) -> Option<Row> {
        if let Some(fresh) = self.fresh.get(key) {
            return fresh.clone();
        }
        let Some(at) = chunk_of_runs(&self.runs, key) else {
            debug_assert!(!self.lazy, "a step read a base row it did not ask the store for: {key:?}");
            return None;
        };
        let run = &self.runs[at];
        if !run.spans(key) {
            debug_assert!(false, "a step read a base row it did not ask the store for: {key:?}");
            return None;
        }
        if let Some(span) = &run.span {
            self.reads.set(self.reads.get() + 1);
            span.used.set(self.reads.get());
        }
        let row = decode_cells(run.row_bytes(run.find(key).ok()?));
        debug_assert!(row.is_ok(), "a packed row was checked when packed");
        row.ok()
    }

    /// Changes the base row of a key in place (an absent row starts empty):
    /// `f` says whether it changed it. A row read from a run is decoded
    /// once, and kept decoded only if it changed; a fresh row is changed
    /// where it is. Returns `f`'s answer.
    pub fn update(&mut self, key: &RowKey, f: impl FnOnce(&mut Row) -> bool) -> bool {
        if let Some(Some(row)) = self.fresh.get_mut(key) {
            return f(row);
        }
        let mut row = self.get(key).unwrap_or_default();
        let changed = f(&mut row);
        if changed {
            self.put(key.clone(), row);
        }
        changed
    }

    /// Puts a base row; a row with no cell removes it.
    pub fn put(&mut self, key: RowKey, row: Row) {
        self.fresh.insert(key, (!row.is_gone()).then_some(row));
        if let Err(e) = self.fold_if_due() {
            // Encoding a decoded row cannot fail; if it ever did, the fold
            // changed nothing and the rows stay decoded (more memory, nothing lost).
            debug_assert!(false, "fold: {e}");
        }
    }

    /// Removes a base row.
    pub fn remove(&mut self, key: &RowKey) {
        self.put(key.clone(), Row::default());
    }

    /// The rows from `start` on, in key order, each with where it is.
    pub fn range_from<'a>(&'a self, start: &RowKey) -> impl Iterator<Item = (RowKey, Found<'a>)> + 'a {
        self.walk_from(start).map(|(k, found)| (owned(k), found))
    }

    /// The rows of `table`, in key order, keys borrowed: (rowId, space) —
    /// a walk of every row that allocates no key.
    pub fn table_raw<'a>(&'a self, table: &str) -> impl Iterator<Item = ((&'a str, &'a str), Found<'a>)> + 'a {
        let start = RowKey::new(table, "");
        let walk = self.walk_from(&start);
        walk.take_while(move |((t, _, _), _)| *t == start.table).map(|((_, r, s), found)| ((r, s), found))
    }

    /// The rows from `start` on, in key order, keys borrowed (from the
    /// runs' bytes or the fresh rows' keys).
    fn walk_from<'a>(&'a self, start: &RowKey) -> impl Iterator<Item = ((&'a str, &'a str, &'a str), Found<'a>)> + 'a {
        let (mut run, mut at) = match chunk_of_runs(&self.runs, start) {
            Some(r) => (r, self.runs[r].find(start).unwrap_or_else(|i| i)),
            None => (0, 0),
        };
        let packed = std::iter::from_fn(move || loop {
            let r = self.runs.get(run)?;
            if at < r.len() {
                at += 1;
                return Some((r.key(at - 1), r.row_bytes(at - 1)));
            }
            run += 1;
            at = 0;
        });
        let fresh = self.fresh.range(start.clone()..).map(|(k, r)| ((k.table.as_str(), k.row_id.as_str(), k.space.as_str()), r));
        layered(packed, fresh, |(p, _), (f, _)| p.cmp(f)).filter_map(|layer| match layer {
            Layer::Under((k, bytes)) => Some((k, Found::Packed(bytes))),
            Layer::Over((k, Some(row))) => Some((k, Found::Fresh(row))),
            Layer::Over((_, None)) => None,
        })
    }

    /// Every key, in order, borrowed: (table, rowId, space).
    pub fn keys(&self) -> impl Iterator<Item = (&str, &str, &str)> + '_ {
        self.walk_from(&RowKey::new("", "")).map(|(k, _)| k)
    }

    /// A lazy base: no run yet but those `provided` (what a step read at
    /// open), the store's rows written since its chunks (`rows`) over them.
    pub fn lazy(provided: Vec<Provided>, rows: impl IntoIterator<Item = (RowKey, Row)>) -> Result<Packed, StoreError> {
        let mut base = Packed { lazy: true, ..Packed::default() };
        for p in provided {
            base.provide(p)?;
        }
        for (k, r) in rows {
            base.fresh.insert(k, (!r.is_gone()).then_some(r));
        }
        Ok(base)
    }

    /// Whether every base row of `want` is known here: read from the store,
    /// or written since. Always, in a base that is not lazy.
    pub fn covers(&self, want: &Want) -> bool {
        if !self.lazy {
            return true;
        }
        let Some(mut i) = chunk_of_runs(&self.runs, &want.from) else { return false };
        if !self.runs[i].spans(&want.from) {
            return false;
        }
        // Spans that meet end to end cover the want up to its end.
        loop {
            let to = self.runs[i].span.as_ref().and_then(|s| s.to.as_ref());
            match (to, &want.to) {
                (None, _) => return true,
                (Some(to), Some(end)) if to >= end => return true,
                (Some(to), _) => match self.runs.get(i + 1) {
                    Some(next) if next.first == *to => i += 1,
                    _ => return false,
                },
            }
        }
    }

    /// Takes what the store read: its rows for the span they answer for.
    /// Runs held for any part of that span are joined with it into one, the
    /// new read standing where they overlap. Returns the rows it changed
    /// where a run held them already, each with what it was: a read can be
    /// newer than what this base held (another context wrote since, and
    /// its step has not been taken in yet), and what reads the rows — an
    /// index, a live query — must hear of it as of any change.
    pub fn provide(&mut self, p: Provided) -> Result<Vec<(RowKey, Option<Row>)>, StoreError> {
        if !self.lazy {
            return Ok(Vec::new());
        }
        let new_span = Want { from: p.from, to: p.to };
        // The read as a run, its rows kept as stored (a chunk that does not
        // check out — an earlier encoding, a removal — is decoded and encoded again).
        let (bytes, starts) = match p.rows {
            ProvidedRows::Chunk(bytes) => match split_chunk(&bytes)? {
                Some(starts) => (bytes, starts),
                None => encode_rows(decode_chunk(&bytes)?)?,
            },
            ProvidedRows::Rows(rows) => encode_rows(rows)?,
        };
        let read = Run { first: new_span.from.clone(), bytes: bytes.into_boxed_slice(), starts: starts.into_boxed_slice(), span: None };
        let inside = |k| new_span.holds(&owned(k));
        if read.len() > 0 && !(inside(read.key(0)) && inside(read.key(read.len() - 1))) {
            return Err(StoreError::Corrupt("a read holds rows outside the span it answers for".into()));
        }
        let (old, kept): (Vec<Run>, Vec<Run>) =
            std::mem::take(&mut self.runs).into_iter().partition(|r| new_span.meets(&r.first, r.span.as_ref().and_then(|s| s.to.as_ref())));
        self.runs = kept;
        // What the read changes where a run held rows already, compared as
        // stored bytes (decoded only when they differ).
        let mut changed: Vec<(RowKey, Option<Row>)> = Vec::new();
        let (mut span_from, mut span_to) = (new_span.from.clone(), new_span.to.clone());
        let mut joined = Vec::new();
        let mut out = Builder::new(usize::MAX, &mut joined);
        for run in &old {
            for i in 0..run.len() {
                let k = owned(run.key(i));
                if k < new_span.from {
                    out.push(run.row_bytes(i))?;
                } else if new_span.holds(&k) && !self.fresh.contains_key(&k) {
                    let same = read.find(&k).is_ok_and(|j| read.row_bytes(j) == run.row_bytes(i));
                    if !same {
                        changed.push((k, run.decode(i).map(|(_, was)| was)));
                    }
                }
            }
        }
        for j in 0..read.len() {
            let k = owned(read.key(j));
            if !self.fresh.contains_key(&k) && old.iter().any(|r| r.spans(&k) && r.find(&k).is_err()) {
                changed.push((k, None));
            }
            out.push(read.row_bytes(j))?;
        }
        for run in &old {
            for i in 0..run.len() {
                let (t, r, sp) = run.key(i);
                let past = new_span.to.as_ref().is_some_and(|to| (t, r, sp) >= (to.table.as_str(), to.row_id.as_str(), to.space.as_str()));
                if past {
                    out.push(run.row_bytes(i))?;
                }
            }
            if run.first < span_from {
                span_from = run.first.clone();
            }
            span_to = match (span_to, run.span.as_ref().map(|s| s.to.clone())) {
                (Some(a), Some(Some(b))) => Some(a.max(b)),
                _ => None,
            };
        }
        drop(out);
        let used = std::cell::Cell::new(self.reads.get());
        let run = Run::joined(span_from, joined, Some(Span { to: span_to, used }))?;
        if (1..run.len()).any(|i| run.key(i - 1) >= run.key(i)) {
            return Err(StoreError::Corrupt("a read's rows are not in key order".into()));
        }
        let at = self.runs.partition_point(|r| r.first < run.first);
        self.runs.insert(at, run);
        self.packed_rows = self.runs.iter().map(Run::len).sum();
        Ok(changed)
    }

    /// Lets go of the least recently read runs until those held weigh at
    /// most `budget` bytes, keeping every run `pinned` says to keep.
    pub fn trim(&mut self, budget: usize, pinned: impl Fn(&RowKey, Option<&RowKey>) -> bool) {
        if !self.lazy {
            return;
        }
        let mut held: usize = self.runs.iter().map(Run::weight).sum();
        if held <= budget {
            return;
        }
        // The least recently read first, one at a time (no sort: a few runs
        // go at a time, and a sort of one more type costs the wasm kilobytes).
        let mut gone = vec![false; self.runs.len()];
        while held > budget {
            let next = self
                .runs
                .iter()
                .enumerate()
                .filter(|(i, r)| !gone[*i] && !pinned(&r.first, r.span.as_ref().and_then(|s| s.to.as_ref())))
                .min_by_key(|(_, r)| r.span.as_ref().map_or(0, |s| s.used.get()));
            let Some((i, run)) = next else { break };
            held -= run.weight();
            gone[i] = true;
        }
        let mut i = 0;
        self.runs.retain(|_| {
            i += 1;
            !gone[i - 1]
        });
        self.packed_rows = self.runs.iter().map(Run::len).sum();
    }

    /// Notes that no base row of `key` exists (a row this device names
    /// now, never seen by anyone): nothing need be read for it.
    pub fn note_absent(&mut self, key: &RowKey) {
        if self.lazy && !self.fresh.contains_key(key) && !self.covers(&Want::row(key)) {
            self.fresh.insert(key.clone(), None);
        }
    }

    /// Whether the rows written since open are many enough to flush
    /// ([`Packed::flushed`]): in a lazy base, they are never folded into
    /// the runs as they come (a run stays a copy of what the store holds).
    pub fn wants_flush(&self) -> bool {
        self.lazy && self.fresh.len() > self.fold_after
    }

    /// The rows written since open, as they are now: once the store holds
    /// them all in its chunks, [`Packed::flushed`] lets them go.
    pub fn flush_mark(&self) -> Vec<(RowKey, Option<Row>)> {
        self.fresh.iter().map(|(k, r)| (k.clone(), r.clone())).collect()
    }

    /// The store holds every row of `mark` (in key order, as
    /// [`Packed::flush_mark`] gives it) in its chunks: each still as it
    /// was marked is let go — folded into the run that spans it (which is
    /// then what the store holds there), or simply dropped where no run
    /// does (a later read brings it). A row written again since stays.
    pub fn flushed(&mut self, mark: Vec<(RowKey, Option<Row>)>) -> Result<(), StoreError> {
        if !self.lazy {
            return Ok(());
        }
        let unchanged: Vec<(RowKey, Option<Row>)> = mark.into_iter().filter(|(k, r)| self.fresh.get(k) == Some(r)).collect();
        let per_run = by_run(
            unchanged
                .iter()
                .filter_map(|(k, r)| chunk_of_runs(&self.runs, k).filter(|i| self.runs[*i].spans(k)).map(|i| (i, (k, r.as_ref())))),
        );
        let mut rebuilt: Vec<(usize, Run)> = Vec::with_capacity(per_run.len());
        for (i, changes) in per_run {
            let run = &self.runs[i];
            let mut built = Vec::new();
            merge_into(Some(run), changes, &mut Builder::new(usize::MAX, &mut built))?;
            rebuilt.push((i, Run::joined(run.first.clone(), built, run.span.clone())?));
        }
        for (i, run) in rebuilt {
            self.runs[i] = run;
        }
        for (k, _) in &unchanged {
            self.fresh.remove(k);
        }
        self.packed_rows = self.runs.iter().map(Run::len).sum();
        Ok(())
    }

    /// Whether `key`'s base row was written since open (held decoded).
    pub fn is_fresh(&self, key: &RowKey) -> bool {
        self.fresh.contains_key(key)
    }

    /// What the runs held weigh (bytes).
    pub fn held(&self) -> usize {
        self.runs.iter().map(Run::weight).sum()
    }

    /// How many rows are held packed and how many decoded.
    #[cfg(all(test, not(target_arch = "wasm32")))]
    fn counts(&self) -> (usize, usize) {
        (self.packed_rows, self.fresh.len())
    }

    fn fold_if_due(&mut self) -> Result<(), StoreError> {
        if !self.lazy && self.fresh.len() > self.fold_after.max(self.packed_rows / 2) {
            self.fold()?;
        }
        Ok(())
    }

    /// Folds the fresh rows into the runs: only the runs that receive one
    /// are rewritten.
    fn fold(&mut self) -> Result<(), StoreError> {
        // The touched runs are rebuilt first, from borrowed rows; the runs
        // and the fresh rows change only once all of them are built, so a
        // fold that fails leaves everything as it was.
        let per_run = by_run(self.fresh.iter().map(|(k, r)| (chunk_of_runs(&self.runs, k).unwrap_or(0), (k, r.as_ref()))));
        let mut rebuilt: Vec<(usize, Vec<Run>)> = Vec::with_capacity(per_run.len());
        for (i, changes) in per_run {
            let mut built = Vec::new();
            merge_into(self.runs.get(i), changes, &mut Builder::new(self.run_rows, &mut built))?;
            rebuilt.push((i, built));
        }
        let old = std::mem::take(&mut self.runs);
        let mut runs = Vec::with_capacity(old.len() + rebuilt.len());
        let mut rebuilt = rebuilt.into_iter().peekable();
        if old.is_empty() {
            runs.extend(rebuilt.next().map(|(_, new)| new).unwrap_or_default());
        }
        for (i, run) in old.into_iter().enumerate() {
            match rebuilt.next_if(|(j, _)| *j == i) {
                Some((_, new)) => runs.extend(new),
                None => runs.push(run),
            }
        }
        self.packed_rows = runs.iter().map(Run::len).sum();
        self.runs = runs;
        self.fresh.clear();
        Ok(())
    }
}

/// A run's rows with `changes` (in key order; `None` removes) written over
/// them, into `out`: the run's rows are copied as they are, never decoded;
/// only the changes are encoded.
fn merge_into(run: Option<&Run>, changes: Vec<(&RowKey, Option<&Row>)>, out: &mut Builder<'_>) -> Result<(), StoreError> {
    let mut changes = changes.into_iter().peekable();
    if let Some(run) = run {
        for j in 0..run.len() {
            let here = run.key(j);
            let mut replaced = false;
            while let Some((k, _)) = changes.peek() {
                let order = (k.table.as_str(), k.row_id.as_str(), k.space.as_str()).cmp(&here);
                if order == Ordering::Greater {
                    break;
                }
                replaced = order == Ordering::Equal;
                if let Some((k, Some(row))) = changes.next() {
                    out.encode(k, row)?;
                }
                if replaced {
                    break;
                }
            }
            if !replaced {
                out.push(run.row_bytes(j))?;
            }
        }
    }
    for (k, row) in changes {
        if let Some(row) = row {
            out.encode(k, row)?;
        }
    }
    Ok(())
}

/// Rows encoded as a run holds them (removals left out).
fn encode_rows(rows: Vec<(RowKey, Row)>) -> Result<(Vec<u8>, Vec<u32>), StoreError> {
    let (mut bytes, mut starts) = (Vec::new(), Vec::with_capacity(rows.len()));
    for (k, r) in rows.iter().filter(|(_, r)| !r.is_gone()) {
        starts.push(u32::try_from(bytes.len()).map_err(|_| StoreError::Corrupt("a run past 4 GB".into()))?);
        bytes = encode_one(k, r, bytes)?;
    }
    Ok((bytes, starts))
}

/// A key read from a run, owned.
pub(super) fn owned((table, row_id, space): (&str, &str, &str)) -> RowKey {
    RowKey { table: table.into(), row_id: row_id.into(), space: space.into() }
}

/// The run a key belongs to, as a stored chunk is found ([`chunk_of`]).
fn chunk_of_runs(runs: &[Run], key: &RowKey) -> Option<usize> {
    chunk_of(runs, key, |r| &r.first)
}

/// Rows paired with the run each falls in, grouped by run. The rows come in
/// key order (a map's, or a mark taken from one), so their runs never go
/// down and each group is the last one or a new one: no map to build.
fn by_run<T>(rows: impl Iterator<Item = (usize, T)>) -> Vec<(usize, Vec<T>)> {
    let mut out: Vec<(usize, Vec<T>)> = Vec::new();
    for (i, row) in rows {
        match out.last_mut() {
            Some((last, group)) if *last == i => group.push(row),
            _ => {
                debug_assert!(out.last().is_none_or(|(last, _)| *last < i), "rows in key order");
                out.push((i, vec![row]));
            }
        }
    }
    out
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::chunks::encode_chunks;
    use crate::protocol::{Cell, Mark, OpId, Value};

    fn key(t: u8, r: u8, s: u8) -> RowKey {
        let space = if s == 0 { String::new() } else { format!("s{s}") };
        RowKey { table: format!("t{t}"), row_id: format!("r{r:02}"), space }
    }

    fn row(v: u16) -> Row {
        let mut r = Row::default();
        let mark = Mark { at: u64::from(v) + 1, op_id: OpId::new(format!("d:{v}")) };
        r.cells.insert("n".into(), Cell { value: Value::Number(f64::from(v)), mark: mark.clone() });
        if v % 3 == 0 {
            r.cells.insert("s".into(), Cell { value: Value::from(format!("é{v}")), mark });
        }
        r
    }

    /// Everything the base answers, against the reference map.
    fn same(p: &Packed, reference: &BTreeMap<RowKey, Row>, start: &RowKey) -> Result<(), TestCaseError> {
        let all: Vec<(RowKey, Row)> = p.range_from(&RowKey::new("", "")).filter_map(|(k, f)| Some((k, f.row()?))).collect();
        let want: Vec<(RowKey, Row)> = reference.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
        prop_assert_eq!(&all, &want);
        let keys: Vec<RowKey> = p.keys().map(owned).collect();
        prop_assert_eq!(keys, reference.keys().cloned().collect::<Vec<_>>());
        let from: Vec<RowKey> = p.range_from(start).map(|(k, _)| k).collect();
        prop_assert_eq!(from, reference.range(start.clone()..).map(|(k, _)| k.clone()).collect::<Vec<_>>());
        for t in 0..2 {
            for r in 0..20 {
                for s in 0..2 {
                    let k = key(t, r, s);
                    prop_assert_eq!(p.get(&k), reference.get(&k).cloned(), "get {:?}", k);
                }
            }
        }
        Ok(())
    }

    fn a_key() -> impl Strategy<Value = RowKey> {
        (0u8..2, 0u8..20, 0u8..2).prop_map(|(t, r, s)| key(t, r, s))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// Packed runs from stored chunks, rows over them, then puts and
        /// removals with folds along the way read as one sorted map would.
        #[test]
        fn packed_base_reads_as_a_map(
            stored in proptest::collection::btree_map(a_key(), 0u16..500, 0..40),
            chunk_rows in 1usize..8,
            over in proptest::collection::vec((a_key(), proptest::option::of(0u16..500)), 0..20),
            steps in proptest::collection::vec((a_key(), proptest::option::of(0u16..500)), 0..60),
            fold_after in 0usize..6,
            run_rows in 1usize..5,
            start in a_key(),
        ) {
            let rows: Vec<(RowKey, Row)> = stored.iter().map(|(k, v)| (k.clone(), row(*v))).collect();
            // Chunks of a few rows each, as the store splits them.
            let chunks: Vec<Vec<u8>> = rows.chunks(chunk_rows).flat_map(|c| encode_chunks(c).unwrap()).map(|c| c.bytes).collect();
            let mut reference: BTreeMap<RowKey, Row> = rows.into_iter().collect();
            let over_rows: Vec<(RowKey, Row)> = over.iter().map(|(k, v)| (k.clone(), v.map(row).unwrap_or_default())).collect();
            for (k, r) in &over_rows {
                if r.is_gone() { reference.remove(k); } else { reference.insert(k.clone(), r.clone()); }
            }
            let mut p = Packed::open(chunks, over_rows).unwrap();
            p.fold_after = fold_after;
            p.run_rows = run_rows;
            same(&p, &reference, &start)?;
            for (k, v) in steps {
                match v {
                    Some(v) => {
                        p.put(k.clone(), row(v));
                        reference.insert(k, row(v));
                    }
                    None => {
                        p.remove(&k);
                        reference.remove(&k);
                    }
                }
                same(&p, &reference, &start)?;
            }
            p.fold().unwrap();
            prop_assert_eq!(p.counts(), (reference.len(), 0));
            same(&p, &reference, &start)?;
        }
    }

    /// What a store of `disk` answers for a want, widened by `wide` rows on each side.
    fn read(disk: &BTreeMap<RowKey, Row>, w: &Want, wide: usize) -> Provided {
        let from = if wide == 0 {
            w.from.clone()
        } else {
            disk.range(..w.from.clone()).rev().nth(wide - 1).map_or_else(|| RowKey::new("", ""), |(k, _)| k.clone())
        };
        let to = match &w.to {
            Some(to) if wide == 0 => Some(to.clone()),
            Some(to) => disk.range(to.clone()..).nth(wide - 1).map(|(k, _)| k.clone()),
            None => None,
        };
        let span = Want { from: from.clone(), to: to.clone() };
        let rows: Vec<(RowKey, Row)> = disk.iter().filter(|(k, _)| span.holds(k)).map(|(k, r)| (k.clone(), r.clone())).collect();
        Provided { from, to, rows: ProvidedRows::Chunk(crate::chunks::encode_snapshot(&rows).unwrap()) }
    }

    fn a_want() -> impl Strategy<Value = Want> {
        prop_oneof![
            a_key().prop_map(|k| Want::row(&k)),
            a_key().prop_map(|k| Want::named(&k.table, &k.row_id)),
            (0u8..2).prop_map(|t| Want::table(&format!("t{t}"))),
            Just(Want::all()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// A lazy base, fed what a store answers for random wants (spans
        /// as wide as the wants or wider, overlapping in every way), written
        /// to and trimmed between reads: every row of a span it says it
        /// covers reads as the store (with what was written since) holds it.
        #[test]
        fn a_lazy_base_reads_what_the_store_holds_where_it_says_it_covers(
            stored in proptest::collection::btree_map(a_key(), 0u16..500, 0..40),
            steps in proptest::collection::vec((a_want(), 0usize..4, proptest::option::of((a_key(), proptest::option::of(0u16..500))), 0usize..3, 0u8..4), 0..40),
        ) {
            let mut disk: BTreeMap<RowKey, Row> = stored.iter().map(|(k, v)| (k.clone(), row(*v))).collect();
            let mut p = Packed::lazy(Vec::new(), []).unwrap();
            let mut mark = None;
            for (want, wide, put, trim, flush) in steps {
                // A flush marks what was written (the store has it all), and
                // lets it go later, with writes in between.
                match flush {
                    0 => mark = Some(p.flush_mark()),
                    1 => if let Some(m) = mark.take() { p.flushed(m).unwrap() },
                    _ => {}
                }
                if !p.covers(&want) {
                    p.provide(read(&disk, &want, wide)).unwrap();
                }
                prop_assert!(p.covers(&want), "{:?} is covered once provided", want);
                let held: Vec<(RowKey, Row)> = p.range_from(&want.from).take_while(|(k, _)| want.holds(k)).filter_map(|(k, f)| Some((k, f.row()?))).collect();
                let truth: Vec<(RowKey, Row)> = disk.iter().filter(|(k, _)| want.holds(k)).map(|(k, r)| (k.clone(), r.clone())).collect();
                prop_assert_eq!(held, truth, "the rows of {:?}", want);
                for k in disk.keys().filter(|k| want.holds(k)) {
                    prop_assert_eq!(p.get(k), disk.get(k).cloned());
                }
                // A write (committed: the store holds it too), then a trim.
                if let Some((k, v)) = put {
                    match v {
                        Some(v) => { p.put(k.clone(), row(v)); disk.insert(k, row(v)); }
                        None => { p.remove(&k); disk.remove(&k); }
                    }
                }
                p.trim([0, 200, usize::MAX][trim], |_, _| false);
            }
        }
    }

    #[test]
    fn chunks_that_overlap_or_are_unordered_are_read_by_decoding_them() {
        let a = encode_chunks(&[(key(0, 1, 0), row(1)), (key(0, 5, 0), row(5))]).unwrap().remove(0).bytes;
        let b = encode_chunks(&[(key(0, 3, 0), row(3)), (key(0, 7, 0), row(7))]).unwrap().remove(0).bytes;
        let p = Packed::open(vec![a, b], []).unwrap();
        let ids: Vec<String> = p.keys().map(|(_, r, _)| r.to_owned()).collect();
        assert_eq!(ids, ["r01", "r03", "r05", "r07"]);
        // Out of order inside a chunk (written by hand: the encoder sorts nothing).
        let mut c = crate::chunks::MAGIC.to_vec();
        c.extend(postcard::to_allocvec(&2usize).unwrap());
        c = encode_one(&key(0, 9, 0), &row(9), c).unwrap();
        c = encode_one(&key(0, 2, 0), &row(2), c).unwrap();
        let p = Packed::open(vec![c], []).unwrap();
        assert_eq!(p.get(&key(0, 2, 0)), Some(row(2)));
        assert_eq!(p.keys().count(), 2);
    }

    /// What opening checks of each row, so that reading one later cannot
    /// fail: a chunk holding a value that is not a finite number, or a
    /// removal (a row with no cell), is not kept packed.
    #[test]
    fn a_chunk_with_a_non_finite_value_or_a_removal_is_not_kept_packed() {
        let chunk = |rows: &[(RowKey, Row)]| {
            let mut c = crate::chunks::MAGIC.to_vec();
            c.extend(postcard::to_allocvec(&rows.len()).unwrap());
            for (k, r) in rows {
                c = encode_one(k, r, c).unwrap();
            }
            c
        };
        let mut nan = row(1);
        for (_, cell) in nan.cells.iter_mut() {
            cell.value = crate::protocol::Value::Number(f64::NAN);
        }
        let bad = chunk(&[(key(0, 1, 0), row(1)), (key(0, 2, 0), nan)]);
        assert_eq!(split_chunk(&bad).unwrap(), None, "a NaN");
        assert!(Packed::open(vec![bad], []).is_err(), "and decoding it refuses it");
        let removal = chunk(&[(key(0, 1, 0), row(1)), (key(0, 2, 0), Row::default())]);
        assert_eq!(split_chunk(&removal).unwrap(), None, "a removal");
        let p = Packed::open(vec![removal], []).unwrap();
        assert_eq!(p.keys().count(), 1, "the removal is no row");
        assert_eq!(split_chunk(&chunk(&[(key(0, 1, 0), row(1)), (key(0, 2, 0), row(2))])).unwrap().map(|s| s.len()), Some(2));
    }

    #[test]
    fn damaged_chunks_are_an_error() {
        let bytes = encode_chunks(&[(key(0, 1, 0), row(1))]).unwrap().remove(0).bytes;
        assert!(matches!(Packed::open(vec![bytes[..bytes.len() - 2].to_vec()], []), Err(StoreError::Corrupt(_))));
    }
}
