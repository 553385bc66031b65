//! The device's state in IndexedDB: `meta`, `base`, `pending`, `rejections`.
//!
//! Every logical step is ONE IndexedDB transaction: recording an op with the
//! counter and clock; applying a push answer's verdicts; applying a pull page
//! with the cursor. Records are JSON strings (compact, fast to read back in
//! bulk at open); keys: `"meta"`, `[table, rowId]`, `at` (a number, so the
//! outbox reads back in record order), `opId`.

use idb::{Database, DatabaseEvent, Factory, ObjectStoreParams, Query, TransactionMode, TransactionResult};
use js_sys::Array;
use wasm_bindgen::JsValue;

use crate::engine::{Draft, Engine, Recorded};
use crate::ids::IdBlock;
use crate::protocol::{Op, Row, RowKey};
use crate::store::{LocalStore, Meta, Rejection, Snapshot, StoreError, Txn};

const META: &str = "meta";
const BASE: &str = "base";
const PENDING: &str = "pending";
const REJECTIONS: &str = "rejections";
const ALL: [&str; 4] = [META, BASE, PENDING, REJECTIONS];
const VERSION: u32 = 1;

/// A local store in IndexedDB.
pub struct IdbStore {
    db: Database,
    name: String,
}

fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::TxnFailed(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn json<T: serde::Serialize>(v: &T) -> Result<JsValue, StoreError> {
    serde_json::to_string(v).map(|s| JsValue::from_str(&s)).map_err(corrupt)
}

fn parse<T: serde::de::DeserializeOwned>(v: &JsValue) -> Result<T, StoreError> {
    let s = v.as_string().ok_or_else(|| corrupt("a record is not a string"))?;
    serde_json::from_str(&s).map_err(corrupt)
}

fn row_key(k: &RowKey) -> JsValue {
    Array::of2(&JsValue::from_str(&k.table), &JsValue::from_str(&k.row_id)).into()
}

impl IdbStore {
    /// Opens (creating if needed) the database `name`.
    pub async fn connect(name: &str) -> Result<IdbStore, StoreError> {
        let factory = Factory::new().map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let mut req = factory.open(name, Some(VERSION)).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        req.on_upgrade_needed(|event| {
            let Ok(db) = event.database() else { return };
            let names = db.store_names();
            for s in ALL {
                if !names.iter().any(|n| n == s) {
                    let _ = db.create_object_store(s, ObjectStoreParams::new());
                }
            }
        });
        let db = req.await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(IdbStore { db, name: name.to_owned() })
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.db.close();
    }

    /// Deletes a whole database (tests, "sign out and wipe").
    pub async fn delete(name: &str) -> Result<(), StoreError> {
        let factory = Factory::new().map_err(|e| StoreError::Unavailable(e.to_string()))?;
        factory.delete(name).map_err(failed)?.await.map_err(failed)
    }

    async fn read_meta(store: &idb::ObjectStore) -> Result<Option<Meta>, StoreError> {
        let v = store.get(Query::Key(JsValue::from_str(META))).map_err(failed)?.await.map_err(failed)?;
        v.map(|v| parse::<Meta>(&v)).transpose()
    }

    /// Records an op: reads the stored meta, lets the engine plan the op
    /// (number, `at`), writes op and meta — all in one transaction. The
    /// engine learns of the op only once the transaction committed.
    pub async fn record(&self, engine: &std::cell::RefCell<Engine>, draft: Draft, now: u64) -> Result<Op, StoreError> {
        let tx = self.db.transaction(&[META, PENDING], TransactionMode::ReadWrite).map_err(failed)?;
        let meta_store = tx.object_store(META).map_err(failed)?;
        let stored = Self::read_meta(&meta_store).await?.ok_or_else(|| corrupt("no meta record"))?;
        let (txn, rec): (Txn, Recorded) = engine.borrow_mut().plan_record(draft, &stored, now);
        Self::write(&tx, &txn)?;
        match tx.await.map_err(failed)? {
            TransactionResult::Committed => {
                let op = rec.op.clone();
                engine.borrow_mut().recorded(rec);
                Ok(op)
            }
            TransactionResult::Aborted => Err(failed("the transaction was aborted")),
        }
    }

    /// Reserves a block of numbers for `newRowId` in its own transaction.
    pub async fn reserve(&self, engine: &std::cell::RefCell<Engine>) -> Result<(), StoreError> {
        let tx = self.db.transaction(&[META], TransactionMode::ReadWrite).map_err(failed)?;
        let meta_store = tx.object_store(META).map_err(failed)?;
        let stored = Self::read_meta(&meta_store).await?.ok_or_else(|| corrupt("no meta record"))?;
        let (txn, block): (Txn, IdBlock) = engine.borrow().plan_reserve(&stored);
        Self::write(&tx, &txn)?;
        match tx.await.map_err(failed)? {
            TransactionResult::Committed => {
                engine.borrow_mut().reserved(block, &stored);
                Ok(())
            }
            TransactionResult::Aborted => Err(failed("the transaction was aborted")),
        }
    }

    /// Writes a step's puts and deletes into an open transaction.
    fn write(tx: &idb::Transaction, txn: &Txn) -> Result<(), StoreError> {
        let names = tx.store_names();
        let store = |n: &str| -> Result<idb::ObjectStore, StoreError> {
            if !names.iter().any(|x| x == n) {
                return Err(failed(format!("transaction does not cover {n}")));
            }
            tx.object_store(n).map_err(failed)
        };
        if let Some(m) = &txn.meta {
            store(META)?.put(&json(m)?, Some(&JsValue::from_str(META))).map_err(failed)?;
        }
        if !txn.put_base.is_empty() {
            let s = store(BASE)?;
            for (k, r) in &txn.put_base {
                s.put(&json(&(k, r))?, Some(&row_key(k))).map_err(failed)?;
            }
        }
        if !txn.delete_pending.is_empty() || !txn.put_pending.is_empty() {
            let s = store(PENDING)?;
            for at in &txn.delete_pending {
                s.delete(Query::Key(JsValue::from_f64(*at as f64))).map_err(failed)?;
            }
            for op in &txn.put_pending {
                s.put(&json(op)?, Some(&JsValue::from_f64(op.at as f64))).map_err(failed)?;
            }
        }
        if !txn.delete_rejections.is_empty() || !txn.put_rejections.is_empty() {
            let s = store(REJECTIONS)?;
            for id in &txn.delete_rejections {
                s.delete(Query::Key(JsValue::from_str(id.as_str()))).map_err(failed)?;
            }
            for r in &txn.put_rejections {
                s.put(&json(r)?, Some(&JsValue::from_str(r.op.op_id.as_str()))).map_err(failed)?;
            }
        }
        Ok(())
    }

    fn stores_of(txn: &Txn) -> Vec<&'static str> {
        let mut v = Vec::new();
        if txn.meta.is_some() {
            v.push(META);
        }
        if !txn.put_base.is_empty() {
            v.push(BASE);
        }
        if !txn.delete_pending.is_empty() || !txn.put_pending.is_empty() {
            v.push(PENDING);
        }
        if !txn.delete_rejections.is_empty() || !txn.put_rejections.is_empty() {
            v.push(REJECTIONS);
        }
        v
    }

    /// Commits a step and then aborts it on purpose: for tests of atomicity.
    pub async fn commit_then_abort(&self, txn: &Txn) -> Result<(), StoreError> {
        let stores = Self::stores_of(txn);
        let tx = self.db.transaction(&stores, TransactionMode::ReadWrite).map_err(failed)?;
        Self::write(&tx, txn)?;
        tx.abort().map_err(failed)?;
        Ok(())
    }
}

impl LocalStore for IdbStore {
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadWrite).map_err(failed)?;
        let meta_store = tx.object_store(META).map_err(failed)?;
        let meta = match Self::read_meta(&meta_store).await? {
            Some(m) => m,
            None => {
                meta_store.put(&json(&fresh)?, Some(&JsValue::from_str(META))).map_err(failed)?;
                fresh
            }
        };
        let get_all = |name: &str| -> Result<_, StoreError> {
            tx.object_store(name).map_err(failed)?.get_all(None, None).map_err(failed)
        };
        let (base_req, pending_req, rej_req) = (get_all(BASE)?, get_all(PENDING)?, get_all(REJECTIONS)?);
        let base_v = base_req.await.map_err(failed)?;
        let pending_v = pending_req.await.map_err(failed)?;
        let rej_v = rej_req.await.map_err(failed)?;
        let base = base_v.iter().map(parse::<(RowKey, Row)>).collect::<Result<Vec<_>, _>>()?;
        let pending = pending_v.iter().map(parse::<Op>).collect::<Result<Vec<_>, _>>()?;
        let rejections = rej_v.iter().map(parse::<Rejection>).collect::<Result<Vec<_>, _>>()?;
        match tx.await.map_err(failed)? {
            TransactionResult::Committed => Ok(Snapshot { meta: Some(meta), base, pending, rejections }),
            TransactionResult::Aborted => Err(failed("open was aborted")),
        }
    }

    async fn commit(&self, txn: &Txn) -> Result<(), StoreError> {
        let stores = Self::stores_of(txn);
        if stores.is_empty() {
            return Ok(());
        }
        let tx = self.db.transaction(&stores, TransactionMode::ReadWrite).map_err(failed)?;
        Self::write(&tx, txn)?;
        match tx.await.map_err(failed)? {
            TransactionResult::Committed => Ok(()),
            TransactionResult::Aborted => Err(failed("the transaction was aborted")),
        }
    }
}
