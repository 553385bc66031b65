//! Running a query: the index that serves it best, or a scan.
//!
//! An index serves a query when its leading fields are each held to one
//! value (`eq`, or an `in` of one), the next one is held to a range (any
//! `gt/gte/lt/lte/prefix/in`), and — to stop after `limit` rows — when the
//! query orders by exactly the fields after those held to one value, all in
//! one direction. Every row read is checked against the whole query, so an
//! index only ever narrows the rows read, never changes the answer.
//!
//! Cost: an ordered index reads `limit` rows (plus rows of equal order
//! values, for `desc`'s tie-break); an index that only filters reads the
//! rows it matches, then sorts them; a scan reads every row of the table.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashSet;

use super::index::{Index, Indexes};
use super::sortkey;
use super::value::{cmp, kind, Key, Kind};
use super::{Dir, Pred, Query};
use crate::protocol::{Row, RowKey, Value};

/// Where a query reads rows from: the visible rows as the app sees them.
pub trait Source {
    /// The visible row of a key (tombstones included), if the device holds one.
    fn get(&self, key: &RowKey) -> Option<Cow<'_, Row>>;
    /// Calls `f` with every visible row of `table`.
    fn scan(&self, table: &str, f: &mut dyn FnMut(&RowKey, &Row));
}

/// How a query is served, for `explain()`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explain {
    /// The index's fields, or `None` for a scan of the table.
    pub index: Option<Vec<String>>,
    /// How many of its leading fields are held to one value.
    pub equal: usize,
    /// The field after those held to a range, if any.
    pub range: Option<String>,
    /// The index gives the query's order (the read stops after `limit` rows).
    pub ordered: bool,
    /// In words.
    pub plan: String,
}

/// A lower or upper bound of one field.
#[derive(Debug, Clone)]
struct Bnd {
    key: Key,
    incl: bool,
}

fn kind_ends(k: Kind) -> (Key, Key) {
    match k {
        Kind::Null => (Key::Val(Value::Null), Key::Val(Value::Null)),
        Kind::Bool => (Key::Val(Value::Bool(false)), Key::Val(Value::Bool(true))),
        Kind::Number => (Key::Val(Value::Number(f64::NEG_INFINITY)), Key::Val(Value::Number(f64::INFINITY))),
        Kind::String => (Key::Val(Value::String(String::new())), Key::Top),
    }
}

/// The interval every predicate on a field allows (`None`: unconstrained).
fn interval(q: &Query, field: &str) -> Option<(Bnd, Bnd)> {
    let mut out: Option<(Bnd, Bnd)> = None;
    for f in q.filters.iter().filter(|f| f.field == field) {
        for p in &f.preds {
            let b = |key: Key, incl: bool| Bnd { key, incl };
            let (lo, hi) = match p {
                Pred::Eq(x) => (b(Key::Val(x.clone()), true), b(Key::Val(x.clone()), true)),
                Pred::In(xs) => match (xs.iter().min_by(|a, b| cmp(a, b)), xs.iter().max_by(|a, b| cmp(a, b))) {
                    (Some(lo), Some(hi)) => (b(Key::Val(lo.clone()), true), b(Key::Val(hi.clone()), true)),
                    _ => (b(Key::Top, true), b(Key::Bottom, true)),
                },
                Pred::Gt(x) | Pred::Gte(x) => (b(Key::Val(x.clone()), matches!(p, Pred::Gte(_))), b(kind_ends(kind(x)).1, true)),
                Pred::Lt(x) | Pred::Lte(x) => (b(kind_ends(kind(x)).0, true), b(Key::Val(x.clone()), matches!(p, Pred::Lte(_)))),
                Pred::Prefix(s) => (b(Key::Val(Value::String(s.clone())), true), b(Key::Top, true)),
            };
            out = Some(match out {
                None => (lo, hi),
                Some((l, h)) => (tighter(l, lo, Ordering::Greater), tighter(h, hi, Ordering::Less)),
            });
        }
    }
    out
}

/// Of two bounds, the one further toward `toward` (exclusive wins a tie).
fn tighter(a: Bnd, b: Bnd, toward: Ordering) -> Bnd {
    match a.key.cmp(&b.key) {
        Ordering::Equal => Bnd { key: a.key, incl: a.incl && b.incl },
        o if o == toward => a,
        _ => b,
    }
}

fn is_point((lo, hi): &(Bnd, Bnd)) -> bool {
    lo.incl && hi.incl && lo.key.value().is_some() && lo.key == hi.key
}

/// An index's fit for a query (the index named by its fields).
struct Fit<'i> {
    fields: &'i [String],
    points: Vec<Key>,
    range: Option<(Bnd, Bnd)>,
    ordered: Option<Dir>,
}

impl Fit<'_> {
    fn score(&self) -> (usize, bool) {
        (self.points.len() + usize::from(self.range.is_some()), self.ordered.is_some())
    }

    fn explain(&self, table: &str) -> Explain {
        let equal = self.points.len();
        let range = self.range.as_ref().map(|_| self.fields[equal].clone());
        let mut plan = format!("index {table}({})", self.fields.join(", "));
        if equal > 0 {
            plan += &format!(": {} held to one value", self.fields[..equal].join(", "));
        }
        if let Some(r) = &range {
            plan += &format!("{} {r} held to a range", if equal > 0 { "," } else { ":" });
        }
        plan += if self.ordered.is_some() {
            "; read in the query's order, stops at the limit"
        } else {
            "; the rows it matches are read, then sorted"
        };
        Explain { index: Some(self.fields.to_vec()), equal, range, ordered: self.ordered.is_some(), plan }
    }

    /// The first and last entries the query can read, as [`sortkey`] bytes.
    fn bounds(&self, after: Option<&[Value]>) -> (Vec<u8>, Vec<u8>) {
        let n = self.fields.len();
        let fill = |v: &[Key], end: &Key, top_tie: bool| {
            let mut out = Vec::new();
            for k in v.iter().chain(std::iter::repeat(end)).take(n) {
                sortkey::key(&mut out, k);
            }
            if top_tie {
                sortkey::top(&mut out);
            } else {
                sortkey::bottom(&mut out);
            }
            out
        };
        let mut lo_v = self.points.clone();
        let mut hi_v = self.points.clone();
        let (mut lo_top, mut hi_top) = (false, true);
        let (mut lo_end, mut hi_end) = (Key::Bottom, Key::Top);
        if let Some((lo, hi)) = &self.range {
            lo_v.push(lo.key.clone());
            hi_v.push(hi.key.clone());
            if !lo.incl {
                (lo_end, lo_top) = (Key::Top, true);
            }
            if !hi.incl {
                (hi_end, hi_top) = (Key::Bottom, false);
            }
        }
        let mut lo = fill(&lo_v, &lo_end, lo_top);
        let mut hi = fill(&hi_v, &hi_end, hi_top);
        // A page's start, when the index gives the order: seek to it.
        if let (Some(a), Some(dir)) = (after, self.ordered) {
            let mut at: Vec<Key> = self.points.clone();
            at.extend(a.iter().cloned().map(Key::Val));
            if at.len() == n {
                if dir == Dir::Asc {
                    lo = lo.max(fill(&at, &Key::Bottom, false));
                } else {
                    hi = hi.min(fill(&at, &Key::Top, true));
                }
            }
        }
        (lo, hi)
    }
}

fn fit<'i>(fields: &'i [String], q: &Query) -> Fit<'i> {
    let mut points = Vec::new();
    let mut range = None;
    for f in fields {
        match interval(q, f) {
            Some(iv) if is_point(&iv) => points.push(iv.0.key),
            Some(iv) => {
                range = Some(iv);
                break;
            }
            None => break,
        }
    }
    let rest = &fields[points.len()..];
    let ordered = if q.order.is_empty() {
        rest.is_empty().then_some(Dir::Asc)
    } else {
        let same = q.order.len() == rest.len() && q.order.iter().zip(rest).all(|(o, f)| o.field == *f);
        let dir = q.order[0].dir;
        (same && q.order.iter().all(|o| o.dir == dir)).then_some(dir)
    };
    Fit { fields, points, range, ordered }
}

/// Of indexes named by their fields, the one that serves `q` best, and where it is.
fn best_of<'i>(candidates: impl Iterator<Item = &'i [String]>, q: &Query) -> Option<(usize, Fit<'i>)> {
    let mut best: Option<(usize, Fit<'i>)> = None;
    for (i, fields) in candidates.enumerate() {
        let f = fit(fields, q);
        if f.score() > best.as_ref().map_or((0, false), |(_, b)| b.score()) {
            best = Some((i, f));
        }
    }
    best
}

fn best<'i>(indexes: &'i Indexes, table: &str, q: &Query) -> Option<(&'i Index, Fit<'i>)> {
    let of = indexes.of(table);
    best_of(of.iter().map(|i| i.fields.as_slice()), q).map(|(i, f)| (&of[i], f))
}

/// How an index kept on disk serves a query: its definition, the entries
/// to read (`from` included, `to` not), in which direction, and whether
/// the index gives the query's order (then the read stops at the limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskPlan {
    /// The index.
    pub def: super::IndexDef,
    /// The least entry the query can read.
    pub from: Vec<u8>,
    /// Past the greatest.
    pub to: Vec<u8>,
    /// Read from the end (a descending order).
    pub reverse: bool,
    /// The index gives the order.
    pub ordered: bool,
}

/// The index of `defs` (kept on disk) that serves `q` on `table` best, as
/// the indexes in memory are chosen (`None`: none does — a scan).
pub fn plan_on_disk<'d>(defs: impl Iterator<Item = &'d super::IndexDef>, table: &str, q: &Query) -> Option<DiskPlan> {
    let defs: Vec<&super::IndexDef> = defs.filter(|d| d.table == table).collect();
    let (i, f) = best_of(defs.iter().map(|d| d.fields.as_slice()), q)?;
    let (from, to) = f.bounds(q.after.as_ref().map(|a| a.values.as_slice()));
    // The bounds are both reachable ends; no entry is the upper bound
    // itself (it ends in a tie-break no row spells), so it can be excluded.
    Some(DiskPlan { def: defs[i].clone(), from, to, reverse: f.ordered == Some(Dir::Desc), ordered: f.ordered.is_some() })
}

/// The rows a query reads, gathered as they are read: in the index's
/// order, an ordered read can stop once it holds `limit` rows (and the
/// rows tied with the last, a descending read's tie-break).
#[derive(Debug, Clone, Default)]
pub struct Hits {
    ordered: bool,
    limit: usize,
    hits: Vec<(Vec<Value>, RowKey)>,
    /// The rows taken, when one row may be met twice: see [`Hits::across_reads`].
    taken: Option<HashSet<RowKey>>,
}

impl Hits {
    /// Gathers `q`'s rows; `ordered`: they come in its order.
    pub fn new(q: &Query, ordered: bool) -> Self {
        Hits { ordered, limit: q.limit.unwrap_or(usize::MAX), hits: Vec::new(), taken: None }
    }

    /// Gathers `q`'s rows read in several reads with awaits between them
    /// (the indexes on disk): another context's step between two reads can
    /// move a row's entry past the place read, or give it queued ops, so the
    /// same row may be met twice. The last meeting stands: the row as it is
    /// then, in its place then, or out if it no longer matches.
    pub fn across_reads(q: &Query, ordered: bool) -> Self {
        Hits { taken: Some(HashSet::new()), ..Hits::new(q, ordered) }
    }

    /// Forgets a row taken before (it is met again).
    fn forget(&mut self, key: &RowKey) {
        if let Some(taken) = &mut self.taken {
            if !taken.insert(key.clone()) {
                self.hits.retain(|(_, k)| k != key);
            }
        }
    }

    /// Takes a row read (checked against the whole query); `false` once an
    /// ordered read has all it needs.
    pub fn take(&mut self, q: &Query, key: &RowKey, row: &Row) -> bool {
        self.forget(key);
        if !q.matches(key, row) {
            return true;
        }
        let values = q.order_values(row);
        if !q.is_after(&values, key) {
            return true;
        }
        if self.ordered && self.hits.len() >= self.limit {
            // Read on through rows of the same order values only: a
            // descending read meets ties in descending rowId.
            if self.hits.last().is_some_and(|(v, _)| v.iter().zip(&values).all(|(a, b)| cmp(a, b) == Ordering::Equal)) {
                self.hits.push((values, key.clone()));
                return true;
            }
            return false;
        }
        self.hits.push((values, key.clone()));
        true
    }

    /// Takes a row read out of the order (rows laid over an ordered read):
    /// it is sorted in with the rest at the end.
    pub fn take_any(&mut self, q: &Query, key: &RowKey, row: &Row) {
        self.forget(key);
        if q.matches(key, row) {
            let values = q.order_values(row);
            if q.is_after(&values, key) {
                self.hits.push((values, key.clone()));
            }
        }
    }

    /// The keys of the answer, in the query's order, at most `limit`.
    pub fn keys(mut self, q: &Query) -> Vec<RowKey> {
        self.hits.sort_unstable_by(|a, b| q.cmp((&a.0, &a.1), (&b.0, &b.1)));
        self.hits.truncate(self.limit);
        self.hits.into_iter().map(|(_, k)| k).collect()
    }
}

/// How `q` would be served.
pub fn explain(indexes: &Indexes, table: &str, q: &Query) -> Explain {
    match best(indexes, table, q) {
        Some((_, f)) => f.explain(table),
        None => {
            Explain { index: None, equal: 0, range: None, ordered: false, plan: format!("scan of {table}: every row is read, then sorted") }
        }
    }
}

/// The rows a query answers, in its order (the rows as the source gave them).
pub fn run(src: &dyn Source, indexes: &Indexes, table: &str, q: &Query) -> Vec<(RowKey, Row)> {
    let keys = match best(indexes, table, q) {
        Some((index, f)) => {
            let (lo, hi) = f.bounds(q.after.as_ref().map(|a| a.values.as_slice()));
            if lo > hi {
                return Vec::new();
            }
            let mut hits = Hits::new(q, f.ordered.is_some());
            for e in index.entries.range(&lo, &hi, f.ordered == Some(Dir::Desc)) {
                let Some(key) = index.row_of(table, e) else { continue };
                let Some(row) = src.get(&key) else { continue };
                if !hits.take(q, &key, &row) {
                    break;
                }
            }
            hits.keys(q)
        }
        None => {
            let mut hits = Hits::new(q, false);
            src.scan(table, &mut |key, row| {
                hits.take_any(q, key, row);
            });
            hits.keys(q)
        }
    };
    keys.into_iter().filter_map(|k| src.get(&k).map(|r| (k.clone(), r.into_owned()))).collect()
}

/// What changed rows did to a query's answer ([`moved`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Moved {
    /// Nothing: the answer stands as it was.
    Not,
    /// The answer now.
    To(Vec<(RowKey, Row)>),
    /// Cannot be known without a read.
    Unknown,
}

/// `q`'s answer `last` once `changed` rows are as given: [`moves`] first
/// (no row copied when they cannot), then [`update`]. What a live query or
/// a kept answer over the indexes on disk does with a step's changes.
pub fn moved(q: &Query, last: &[(RowKey, Row)], changed: &[(RowKey, Option<Row>)]) -> Moved {
    if !moves(q, last, changed) {
        return Moved::Not;
    }
    update(q, last, changed).map_or(Moved::Unknown, Moved::To)
}

/// Whether `changed` rows may move `q`'s answer `last`: one of them is in
/// it, or matches now. (Not: the answer stays as it is, no row copied.)
pub fn moves(q: &Query, last: &[(RowKey, Row)], changed: &[(RowKey, Option<Row>)]) -> bool {
    changed.iter().any(|(k, now)| last.iter().any(|(l, _)| l == k) || now.as_ref().is_some_and(|r| q.matches(k, r)))
}

/// `q`'s answer once `changed` rows (each key once, as [`crate::engine::Changes`]
/// tells them) are as given (`None`: gone), from its
/// answer `last` before they changed — worked out without reading a row
/// more; `None` when that cannot be known: a full page lost rows, and the
/// rows that follow its last are not held.
///
/// Why it is exact: every row of `last` that did not change still matches,
/// in its place; every matching row not in a full `last` came after its last
/// row — so a changed row that now comes before that end may join, and
/// none past it can (rows not read may come between). A page not full held
/// every matching row.
pub fn update(q: &Query, last: &[(RowKey, Row)], changed: &[(RowKey, Option<Row>)]) -> Option<Vec<(RowKey, Row)>> {
    let limit = q.limit.unwrap_or(usize::MAX);
    let full = last.len() >= limit;
    let moved = |k: &RowKey| changed.iter().any(|(c, _)| c == k);
    let end = last.last().filter(|_| full).map(|(k, r)| (q.order_values(r), k));
    let mut rows: Vec<(Vec<Value>, &RowKey, &Row)> =
        last.iter().filter(|(k, _)| !moved(k)).map(|(k, r)| (q.order_values(r), k, r)).collect();
    for (k, now) in changed {
        let Some(r) = now.as_ref().filter(|r| q.matches(k, r)) else { continue };
        let v = q.order_values(r);
        let past_end = end.as_ref().is_some_and(|(ev, ek)| q.cmp((&v, k), (ev, ek)) == Ordering::Greater);
        if q.is_after(&v, k) && !past_end {
            rows.push((v, k, r));
        }
    }
    if full && rows.len() < limit {
        return None;
    }
    rows.sort_unstable_by(|a, b| q.cmp((&a.0, a.1), (&b.0, b.1)));
    rows.truncate(limit);
    Some(rows.into_iter().map(|(_, k, r)| (k.clone(), r.clone())).collect())
}

/// How many visible rows match a query's filters (its order, limit and page ignored).
pub fn count(src: &dyn Source, indexes: &Indexes, table: &str, q: &Query) -> usize {
    let q = Query { order: Vec::new(), limit: None, after: None, ..q.clone() };
    let mut n = 0;
    match best(indexes, table, &q) {
        Some((index, f)) => {
            let (lo, hi) = f.bounds(None);
            if lo > hi {
                return 0;
            }
            for e in index.entries.range(&lo, &hi, false) {
                let Some(key) = index.row_of(table, e) else { continue };
                if src.get(&key).is_some_and(|row| q.matches(&key, &row)) {
                    n += 1;
                }
            }
        }
        None => src.scan(table, &mut |key, row| n += usize::from(q.matches(key, row))),
    }
    n
}
