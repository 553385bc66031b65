//! Hidden exports for the browser benchmarks (`www/bench/`): the same
//! workloads as the native criterion benchmarks. Not part of the API.

use wasm_bindgen::prelude::*;

use crate::store::{LocalStore, Meta, Txn};
use crate::workload::{base_rows, field_ops, merge_all, set_op};

use super::idb_store::IdbStore;

fn now_ms() -> f64 {
    js_sys::Reflect::get(&js_sys::global(), &"performance".into())
        .ok()
        .and_then(|p| js_sys::Reflect::get(&p, &"now".into()).ok().map(|f| (p, f)))
        .and_then(|(p, f)| f.dyn_into::<js_sys::Function>().ok().and_then(|f| f.call0(&p).ok()))
        .and_then(|v| v.as_f64())
        .unwrap_or_else(js_sys::Date::now)
}

/// Merges `n` single-field ops into `rows` rows; returns the milliseconds taken (generation excluded).
#[wasm_bindgen(js_name = "__benchMerge")]
pub fn bench_merge(n: usize, rows: usize) -> f64 {
    let (ops, index) = field_ops(n, rows);
    let t0 = now_ms();
    let moved = merge_all(&ops, &index, rows);
    let dt = now_ms() - t0;
    std::hint::black_box(moved);
    dt
}

/// Fills database `name` with `rows` base rows and `pending` pending ops, in one transaction.
#[wasm_bindgen(js_name = "__seedDatabase")]
pub async fn seed_database(name: String, rows: usize, pending: usize) -> Result<(), JsValue> {
    let store = IdbStore::connect(&name).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    let snap = store.open(Meta::fresh("bench-device".into())).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    let mut meta = snap.meta.unwrap_or_else(|| Meta::fresh("bench-device".into()));
    meta.counter = pending as u64 + 1;
    meta.clock.last_at = 1_000_000 + pending as u64;
    let txn = Txn {
        meta: Some(meta),
        put_base: base_rows(rows),
        put_pending: (0..pending).map(|i| set_op("bench-device", i + 1, i, 1_000_000 + i as u64)).collect(),
        ..Txn::default()
    };
    store.commit(&txn).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    // As a long-lived database would be: base rows compacted into chunks.
    store.compact().await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    store.close();
    Ok(())
}
