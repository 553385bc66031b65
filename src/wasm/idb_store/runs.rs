//! The outbox's records in the `pending` store: one op per record, keyed by
//! its `at`; or, for a recording of many edits (`changeMany`), runs of up
//! to [`RUN_LEN`] ops in one record, keyed by the run's last `at` + 0.5. A
//! record is its ops' JSON texts, one per line (compact JSON never holds a
//! raw newline): a single op reads as before, and a run is read by the same
//! reader of one op.
//!
//! Why runs: IndexedDB's cost is per record far more than per byte. In one
//! strict transaction on disk, 10,000 records of one op each take ~400 ms
//! (as long as raw IndexedDB's 10,000 small objects), 40 records of 256 ops
//! ~27 ms (BENCHMARKS.md, "The outbox in runs").
//!
//! Why the half: the key stays a number in `at` order. The outbox's last key
//! still floors to the last `at` queued (PROTOCOL §7), a key range by `at`
//! still finds every record, and the fraction tells a run from a single op
//! without reading the record. An `at` at or past 2^52 has no exact half:
//! such ops are written one per record.
//!
//! Where runs lie: a run's ops were recorded in one transaction with `at`s
//! above every `at` taken, so no run's range holds another recording's op,
//! nor another run's. A single op put back by a context that outlived its
//! database being cleared (`Engine::salvage`) may fall inside one: finding
//! the runs an answer acknowledges never assumes it cannot.

use idb::{KeyRange, ObjectStore, Query};
use wasm_bindgen::JsValue;

use super::{corrupt, failed, json};
use crate::protocol::Op;
use crate::store::StoreError;

/// The most ops in one run record: a push's answer (≤ 1000 ops) rewrites at
/// most the one run it ends inside, and that rewrite stays small.
const RUN_LEN: usize = 256;

/// `at`s from here on have no exact `+ 0.5` as a double.
const NO_HALF: u64 = 1 << 52;

fn key(at: f64) -> JsValue {
    JsValue::from_f64(at)
}

fn is_run(key: f64) -> bool {
    key.fract() != 0.0
}

/// Puts `ops` into the outbox. With `runs` (a recording: its `at`s are above
/// every `at` taken, in order), many ops go as runs; else one per record.
pub(super) fn put(store: &ObjectStore, ops: &[Op], runs: bool) -> Result<(), StoreError> {
    let in_runs = runs && ops.len() > 1 && ops.windows(2).all(|w| w[0].at < w[1].at) && ops.last().is_some_and(|o| o.at < NO_HALF);
    if !in_runs {
        for op in ops {
            store.put(&json(op)?, Some(&key(op.at as f64))).map_err(failed)?;
        }
        return Ok(());
    }
    for run in ops.chunks(RUN_LEN) {
        put_run(store, run)?;
    }
    Ok(())
}

/// Puts one run under its last `at` + 0.5.
fn put_run(store: &ObjectStore, run: &[Op]) -> Result<(), StoreError> {
    let Some(last) = run.last() else { return Ok(()) };
    let mut text = String::with_capacity(run.len() * 256);
    for op in run {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&serde_json::to_string(op).map_err(corrupt)?);
    }
    store.put(&JsValue::from_str(&text), Some(&key(last.at as f64 + 0.5))).map_err(failed)?;
    Ok(())
}

/// Reads one record's ops onto `ops`.
fn read_into(record: &JsValue, ops: &mut Vec<Op>) -> Result<(), StoreError> {
    let text = record.as_string().ok_or_else(|| corrupt("an outbox record is not a string"))?;
    for line in text.split('\n') {
        ops.push(crate::json::from_str::<Op>(line).map_err(corrupt)?);
    }
    Ok(())
}

/// The outbox's ops from its records, in `at` order.
pub(super) fn read(records: &[JsValue]) -> Result<Vec<Op>, StoreError> {
    let mut ops = Vec::with_capacity(records.len());
    for r in records {
        read_into(r, &mut ops)?;
    }
    // In key order already, but for a single op put back inside a run.
    if !ops.is_sorted_by_key(|o| o.at) {
        ops = crate::cold_sort::sorted_by(ops, |a, b| a.at.cmp(&b.at));
    }
    Ok(ops)
}

/// Takes acknowledged ops (by `at`) out of the outbox: single records are
/// deleted; a run loses the ops named and keeps the rest, under its new
/// last `at`. Many at once go as one key-range delete when every record in
/// the range is one of them or a run rewritten here — checked inside the
/// same transaction, so an op another tab or the worker queued with an `at`
/// inside the range is never deleted unsent.
pub(super) async fn delete(store: &ObjectStore, ats: &[u64]) -> Result<(), StoreError> {
    let Some(&lo) = ats.iter().min() else {
        return Ok(());
    };
    // Every key from the first `at` named on.
    let from = KeyRange::lower_bound(&key(lo as f64), None).map_err(failed)?;
    let keys = store.get_all_keys(Some(Query::KeyRange(from)), None).map_err(failed)?.await.map_err(failed)?;
    let plan = Acked::new(ats, &keys);
    let mut records = Vec::with_capacity(plan.runs.len());
    for k in &plan.runs {
        records.push(store.get(Query::Key(key(*k))).map_err(failed)?.await.map_err(failed)?);
    }
    plan.write(store, &records)
}

/// What an answer takes out of the outbox, from the keys at and above its
/// first `at`.
struct Acked {
    /// The `at`s named, sorted.
    named: Vec<u64>,
    /// The keys from the first `at` named to the last one's run.
    keys: Vec<f64>,
    /// The runs that may hold ops named: those among `keys` and the first
    /// one above them (no run's range holds another's; single ops may lie between).
    runs: Vec<f64>,
}

impl Acked {
    fn new(ats: &[u64], keys: &[JsValue]) -> Acked {
        let named = crate::cold_sort::sorted_by(ats.to_vec(), |a, b| a.cmp(b));
        let hi = named.last().map_or(0.0, |at| *at as f64 + 0.5);
        let mut keys: Vec<f64> = keys.iter().filter_map(JsValue::as_f64).collect();
        let above = keys.split_off(keys.partition_point(|k| *k <= hi));
        let runs = keys.iter().copied().filter(|k| is_run(*k)).chain(above.into_iter().find(|k| is_run(*k))).collect();
        Acked { named, keys, runs }
    }

    fn acked(&self, at: u64) -> bool {
        self.named.binary_search(&at).is_ok()
    }

    /// Deletes and rewrites, given the records of [`Acked::runs`].
    fn write(&self, store: &ObjectStore, records: &[Option<JsValue>]) -> Result<(), StoreError> {
        let mut changed: Vec<(f64, Vec<Op>)> = Vec::new();
        for (k, record) in self.runs.iter().zip(records) {
            let Some(record) = record else { continue };
            let mut ops = Vec::new();
            read_into(record, &mut ops)?;
            let n = ops.len();
            ops.retain(|o| !self.acked(o.at));
            if ops.len() < n {
                changed.push((*k, ops));
            }
        }
        let whole = self.keys.iter().all(|k| if is_run(*k) { changed.iter().any(|(c, _)| c == k) } else { self.acked(*k as u64) });
        if let (true, Some(lo), Some(hi)) = (self.named.len() >= 16 && whole, self.named.first(), self.named.last()) {
            let range = KeyRange::bound(&key(*lo as f64), &key(*hi as f64), None, None).map_err(failed)?;
            store.delete(Query::KeyRange(range)).map_err(failed)?;
        } else {
            for k in self.keys.iter().filter(|k| !is_run(**k) && self.acked(**k as u64)) {
                store.delete(Query::Key(key(*k))).map_err(failed)?;
            }
        }
        // After the range's delete, in request order: what a run keeps goes back.
        for (k, kept) in changed {
            store.delete(Query::Key(key(k))).map_err(failed)?;
            put_run(store, &kept)?;
        }
        Ok(())
    }
}
