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

/// Fills database `name` with `rows` base rows of the query workload
/// (`bench/`, workload 6): `{ exercise: "ex<i % 50>", weightKg: i % 300, at: i }`,
/// named `q<i>`, compacted into chunks as a long-lived database would be.
#[wasm_bindgen(js_name = "__seedQueryRows")]
pub async fn seed_query_rows(name: String, rows: usize) -> Result<(), JsValue> {
    use crate::protocol::{Cell, Mark, OpId, Row, RowKey, Value};
    let store = IdbStore::connect(&name).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    let snap = store.open(Meta::fresh("bench-device".into())).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    let meta = snap.meta.unwrap_or_else(|| Meta::fresh("bench-device".into()));
    let mut put_base = Vec::with_capacity(rows);
    for i in 0..rows {
        let mut r = Row::default();
        let mark = Mark { at: i as u64 + 1, op_id: OpId::new(format!("srv:{i}")) };
        for (k, v) in
            [("exercise", Value::from(format!("ex{}", i % 50))), ("weightKg", Value::from((i % 300) as f64)), ("at", Value::from(i as f64))]
        {
            r.cells.insert(k.into(), Cell { value: v, mark: mark.clone() });
        }
        put_base.push((RowKey::new("sets", format!("q{i}")), r));
    }
    store.commit(&Txn { meta: Some(meta), put_base, ..Txn::default() }).await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    store.compact().await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    store.close();
    Ok(())
}

/// One device's rows in memory, for the side-by-side benchmarks with other
/// CRDT libraries (`bench/`): edits are ops stamped by the device's clock and
/// merged by the one merge; they travel as the wire's push body (ops) or as
/// the client's snapshot chunks (rows with marks).
#[wasm_bindgen(js_name = "__BenchDoc")]
pub struct BenchDoc {
    device: String,
    counter: u64,
    clock: crate::clock::Clock,
    rows: std::collections::HashMap<String, crate::protocol::Row>,
    log: Vec<crate::protocol::Op>,
}

#[wasm_bindgen(js_class = "__BenchDoc")]
impl BenchDoc {
    /// A device named `device` with no rows.
    #[wasm_bindgen(constructor)]
    pub fn new(device: String) -> BenchDoc {
        BenchDoc { device, counter: 0, clock: crate::clock::Clock::default(), rows: Default::default(), log: Vec::new() }
    }

    /// Records one op `row_id.field = value` (table `t`), merges it, logs it.
    pub fn set(&mut self, row_id: String, field: String, value: f64) -> Result<(), JsValue> {
        self.counter += 1;
        let at = self.clock.advance(js_sys::Date::now() as u64).ok_or_else(|| JsValue::from_str("no later at left"))?;
        let mut fields = crate::protocol::Fields::new();
        fields.insert(field, crate::protocol::Value::from(value));
        let op = crate::protocol::Op {
            op_id: crate::protocol::OpId::new(format!("{}:{}", self.device, self.counter)),
            table: "t".into(),
            row_id,
            fields,
            at,
            schema: 1,
            space: None,
            seen: None,
        };
        crate::order::merge(self.rows.entry(op.row_id.clone()).or_default(), &op);
        self.log.push(op);
        Ok(())
    }

    /// The logged ops as a push body (JSON).
    #[wasm_bindgen(js_name = "exportOps")]
    pub fn export_ops(&self) -> Result<Vec<u8>, JsValue> {
        let body = crate::protocol::PushRequest { attempt_key: "bench".into(), batch: self.log.clone() };
        serde_json::to_vec(&body).map_err(|e| JsValue::from_str(&e.to_string()))
    }

    /// Decodes a push body and merges every op; returns how many fields moved.
    #[wasm_bindgen(js_name = "importOps")]
    pub fn import_ops(&mut self, bytes: &[u8]) -> Result<u32, JsValue> {
        let body: crate::protocol::PushRequest = serde_json::from_slice(bytes).map_err(|e| JsValue::from_str(&e.to_string()))?;
        let (mut moved, now) = (0, js_sys::Date::now() as u64);
        for op in &body.batch {
            self.clock.observe(op.at, now);
            moved += u32::from(crate::order::merge(self.rows.entry(op.row_id.clone()).or_default(), op));
        }
        Ok(moved)
    }

    /// The rows with marks, encoded as the client's stored chunks (one chunk).
    #[wasm_bindgen(js_name = "exportState")]
    pub fn export_state(&self) -> Result<Vec<u8>, JsValue> {
        let mut rows: Vec<(crate::protocol::RowKey, crate::protocol::Row)> =
            self.rows.iter().map(|(id, r)| (crate::protocol::RowKey::new("t", id.as_str()), r.clone())).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        crate::chunks::encode_snapshot(&rows).map_err(|e| JsValue::from_str(&e.to_string()))
    }

    /// Decodes a snapshot and merges its rows; returns how many fields moved.
    #[wasm_bindgen(js_name = "importState")]
    pub fn import_state(&mut self, bytes: &[u8]) -> Result<u32, JsValue> {
        let rows = crate::chunks::decode_chunk(bytes).map_err(|e| JsValue::from_str(&e.to_string()))?;
        let (mut moved, now) = (0, js_sys::Date::now() as u64);
        for (k, r) in rows {
            for c in r.cells.values() {
                self.clock.observe(c.mark.at, now);
            }
            match self.rows.get_mut(&k.row_id) {
                Some(mine) => moved += u32::from(crate::order::merge_row(mine, &r)),
                None => {
                    moved += r.cells.len() as u32;
                    self.rows.insert(k.row_id, r);
                }
            }
        }
        Ok(moved)
    }

    /// The number value of `row_id.field`, if any.
    pub fn get(&self, row_id: &str, field: &str) -> Option<f64> {
        match self.rows.get(row_id)?.get(field)? {
            crate::protocol::Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// How many rows.
    #[wasm_bindgen(js_name = "rowCount")]
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }
}
