//! Browser tests of the Rust side: real Chromium, real IndexedDB.
//!
//! Run with `wasm-pack test --headless --chrome` (or the wasm-bindgen test
//! runner; see the Makefile). The server here is the in-memory judge compiled
//! into the same module, so these tests check the client and IndexedDB;
//! `www/test/` checks the package against the real server over HTTP.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;

use marksync::engine::{Config, Engine, Step};
use marksync::memory_server::MemoryServer;
use marksync::protocol::{Fields, RowKey, Value};
use marksync::schema::Schema;
use marksync::store::{contract, LocalStore, Meta, Txn};
use marksync::wasm::client::Client;
use marksync::wasm::idb_store::IdbStore;
use marksync::wasm::transport::MemoryTransport;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", (js_sys::Math::random() * 1e12) as u64)
}

fn set(reps: i64) -> Fields {
    [("exercise", Value::from("squat")), ("weightKg", 80.0.into()), ("reps", reps.into())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn only(k: &str, v: Value) -> Fields {
    [(k.to_string(), v)].into_iter().collect()
}

fn memory(server: &Rc<RefCell<MemoryServer>>) -> MemoryTransport {
    MemoryTransport { server: server.clone(), user: "u".into(), lose_next: Rc::new(RefCell::new(0)) }
}

async fn client(name: &str, server: &Rc<RefCell<MemoryServer>>) -> Rc<Client<MemoryTransport>> {
    match Client::open(name, memory(server), Config::default(), false).await {
        Ok(c) => c,
        Err(e) => panic!("open {name}: {e}"),
    }
}

async fn check(f: impl std::future::Future<Output = Result<(), String>>) {
    if let Err(e) = f.await {
        panic!("{e}");
    }
}

#[wasm_bindgen_test]
async fn indexeddb_store_keeps_the_contract() {
    for (i, name) in ["open", "commit", "deletes", "keys", "engine"].iter().enumerate() {
        let store = IdbStore::connect(&unique(name)).await.unwrap();
        match i {
            0 => check(contract::open_creates_meta_once(&store)).await,
            1 => check(contract::commit_then_reopen(&store)).await,
            2 => check(contract::deletes(&store)).await,
            3 => check(contract::base_rows_are_keyed_by_table_and_row(&store)).await,
            _ => check(contract::engine_steps_survive_reopen(&store)).await,
        }
        store.close();
    }
}

#[wasm_bindgen_test]
async fn reopen_keeps_rows_outbox_counter_and_cursor() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("reopen");
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    c.sync().await.unwrap();
    let pending_row = c.new_row_id().unwrap();
    let op = c.change("sets", &pending_row, set(6)).await.unwrap();
    let (visible, cursor, device) = {
        let e = c.engine.borrow();
        (e.all_visible(), e.cursor(), e.device_id().to_owned())
    };
    assert!(cursor > 0);
    c.close();
    let c2 = client(&name, &server).await;
    let e = c2.engine.borrow();
    assert_eq!(e.device_id(), device);
    assert_eq!(e.all_visible(), visible);
    assert_eq!(e.cursor(), cursor);
    assert_eq!(e.pending().map(|o| o.op_id.clone()).collect::<Vec<_>>(), vec![op]);
}

#[wasm_bindgen_test]
async fn the_counter_is_never_reused_after_reopen() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("counter");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        let c = client(&name, &server).await;
        for _ in 0..3 {
            let row = c.new_row_id().unwrap();
            assert!(seen.insert(row.clone()), "rowId {row} reused");
            let op = c.change("sets", &row, set(1)).await.unwrap();
            assert!(seen.insert(op.to_string()), "opId {op} reused");
        }
        c.close(); // no sync: the numbers live only in IndexedDB
    }
}

#[wasm_bindgen_test]
async fn two_clients_on_one_database_never_share_a_number() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("tabs");
    let (a, b) = (client(&name, &server).await, client(&name, &server).await);
    let mut seen = std::collections::HashSet::new();
    for i in 0..40 {
        let c = if i % 2 == 0 { &a } else { &b };
        let row = c.new_row_id().unwrap();
        assert!(seen.insert(row.clone()));
        assert!(seen.insert(c.change("sets", &row, set(1)).await.unwrap().to_string()));
    }
    a.sync().await.unwrap();
    assert_eq!(server.borrow().rows("u").len(), 40, "a pushes b's ops too: one outbox per database");
}

#[wasm_bindgen_test]
async fn an_aborted_transaction_leaves_no_half_recorded_op() {
    let name = unique("abort");
    let store = IdbStore::connect(&name).await.unwrap();
    let snap = store.open(Meta::fresh("dev".into())).await.unwrap();
    let mut engine = Engine::open(snap, Config::default()).unwrap();
    let draft = engine.draft("sets", "dev-1", set(5)).unwrap();
    let stored = engine.meta().clone();
    let (txn, _rec) = engine.plan_record(draft, &stored, 10);
    store.commit_then_abort(&txn).await.unwrap();
    let after = store.open(Meta::fresh("x".into())).await.unwrap();
    assert!(after.pending.is_empty(), "no op");
    assert_eq!(after.meta.unwrap().counter, 0, "no counter bump");
}

#[wasm_bindgen_test]
async fn a_rejected_op_disappears_and_its_row_is_rebuilt_and_persisted() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("reject");
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    c.sync().await.unwrap();
    c.change("sets", &row, only("reps", 500i64.into())).await.unwrap();
    c.change("sets", &row, only("weightKg", 90.0.into())).await.unwrap();
    let report = c.sync().await.unwrap();
    assert_eq!((report.report.applied, report.report.rejected), (1, 1));
    let key = RowKey::new("sets", row.as_str());
    let check_row = |c: &Client<MemoryTransport>| {
        let e = c.engine.borrow();
        let r = e.row(&key).unwrap().clone();
        assert_eq!(r.get("reps"), Some(&Value::Number(5.0)));
        assert_eq!(r.get("weightKg"), Some(&Value::Number(90.0)));
        let rej: Vec<_> = e.rejections().map(|r| r.reason.clone()).collect();
        assert_eq!(rej, vec!["reps must be at most 100".to_string()]);
    };
    check_row(&c);
    c.close();
    let c2 = client(&name, &server).await;
    check_row(&c2);
    assert_eq!(c2.engine.borrow().pending_len(), 0);
}

#[wasm_bindgen_test]
async fn a_lost_answer_is_retried_without_duplicates() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let t = memory(&server);
    *t.lose_next.borrow_mut() = 1;
    let c = Client::open(&unique("lost"), t, Config::default(), false).await.unwrap();
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    let first = c.sync().await.unwrap();
    assert!(!first.ok && first.retry_at.is_some());
    assert_eq!(c.engine.borrow().pending_len(), 1, "unknown outcome: kept");
    let second = c.sync().await.unwrap();
    assert_eq!((second.ok, second.report.duplicate), (true, 1));
    assert_eq!(server.borrow().head("u"), 1);
    assert_eq!(c.engine.borrow().pending_len(), 0);
}

#[wasm_bindgen_test]
async fn a_late_answer_to_an_old_attempt_changes_nothing_on_disk() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("late");
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    let first = match c.engine.borrow_mut().start_sync(0) {
        Step::Push(r) => r,
        other => panic!("{other:?}"),
    };
    let late = server.borrow_mut().push("u", &first).unwrap();
    let _ = c.engine.borrow_mut().on_push_failed(&first.attempt_key, marksync::attempt::Failure::Timeout, 0);
    let _second = c.engine.borrow_mut().start_sync(1);
    assert!(c.engine.borrow_mut().on_push_response(late, 2).is_none());
    let snap = c.store.open(Meta::fresh("x".into())).await.unwrap();
    assert_eq!(snap.pending.len(), 1, "still queued on disk");
    assert!(snap.base.is_empty());
    c.store.commit(&Txn::default()).await.unwrap();
}
