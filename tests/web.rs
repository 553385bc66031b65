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
use marksync::store::{LocalStore, Meta, Txn};
use marksync::testing::store_contract as contract;
use marksync::wasm::client::{Client, Edit};
use marksync::wasm::idb_store::IdbStore;
use marksync::wasm::transport::MemoryTransport;
use wasm_bindgen::prelude::wasm_bindgen;
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

fn edit(row: &str, fields: Fields) -> Edit {
    Edit { space: None, table: "sets".into(), row_id: Some(row.into()), fields }
}

fn memory_as(server: &Rc<RefCell<MemoryServer>>, user: &str) -> MemoryTransport {
    MemoryTransport { server: server.clone(), user: user.into(), lose_next: Rc::new(RefCell::new(0)), fail_next: Rc::new(RefCell::new(0)) }
}

fn memory(server: &Rc<RefCell<MemoryServer>>) -> MemoryTransport {
    memory_as(server, "u")
}

async fn client(name: &str, server: &Rc<RefCell<MemoryServer>>) -> Rc<Client<MemoryTransport>> {
    client_as(name, server, "u").await
}

async fn client_as(name: &str, server: &Rc<RefCell<MemoryServer>>, user: &str) -> Rc<Client<MemoryTransport>> {
    match Client::open(name, memory_as(server, user), Config::default(), false, true, None, false).await {
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
    for (i, name) in ["open", "commit", "deletes", "keys", "engine", "assuming", "last-at", "entries", "lazy"].iter().enumerate() {
        let store = IdbStore::connect(&unique(name)).await.unwrap();
        match i {
            0 => check(contract::open_creates_meta_once(&store)).await,
            1 => check(contract::commit_then_reopen(&store)).await,
            2 => check(contract::deletes(&store)).await,
            3 => check(contract::base_rows_are_keyed_by_table_and_row(&store)).await,
            4 => check(contract::engine_steps_survive_reopen(&store)).await,
            5 => check(contract::a_write_assuming_a_moved_record_writes_nothing(&store)).await,
            6 => check(contract::the_last_at_taken_is_the_records_or_the_outboxs(&store)).await,
            7 => {
                check(contract::index_entries_follow_the_base_rows(&store, || async {
                    store.compact().await.unwrap();
                }))
                .await
            }
            _ => {
                store.open_lazily(true);
                check(contract::lazy_reads_answer_every_row_of_a_span(&store, || async {
                    store.compact().await.unwrap();
                }))
                .await
            }
        }
        store.close();
    }
}

/// The browser closes a connection before its `close` event reaches the
/// library: a transaction that will not start then is the connection
/// closed (IndexedDB's `InvalidStateError` at `transaction()`, whatever each
/// engine's message says), not a failed write, so the edit heals instead
/// of failing.
#[wasm_bindgen_test]
async fn a_connection_closed_before_its_event_is_heard_is_told_as_closed_and_the_edit_lands() {
    use marksync::store::StoreError;
    let store = IdbStore::connect(&unique("unheard")).await.unwrap();
    store.open(Meta::fresh("d".into())).await.unwrap();
    store.close_unheard();
    let write = store.commit(&Txn { delete_pending: vec![1], ..Txn::default() }).await;
    assert!(matches!(write, Err(StoreError::Closed(_))), "a durable write: {write:?}");
    let read = store.read_sync().await;
    assert!(matches!(read, Err(StoreError::Closed(_))), "a read: {read:?}");
    store.close();

    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("unheard");
    let c = client(&name, &server).await;
    c.store.close_unheard();
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.expect("the edit lands in the database opened again");
    c.close();
    let c2 = client(&name, &server).await;
    assert_eq!(c2.engine.borrow().pending().count(), 1, "on disk");
}

/// A step told in words this context cannot read (garbled, or of another
/// version of the library) is never taken in part: the context reads the
/// database again, and finds what it was not told.
#[wasm_bindgen_test]
async fn a_step_told_in_words_a_context_cannot_read_makes_it_read_the_database_again() {
    use marksync::protocol::{Cell, Mark, OpId, Row};
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("unreadable");
    let c = client(&name, &server).await;
    // A step no one tells: written beside the context, straight to the disk.
    let store = IdbStore::connect(&name).await.unwrap();
    let mut row = Row::default();
    row.cells.insert("reps".into(), Cell { value: Value::Number(7.0), mark: Mark { at: 7, op_id: OpId::new("srv:1") } });
    store.commit(&Txn { put_base: vec![(RowKey::new("sets", "told-badly"), row)], ..Txn::default() }).await.unwrap();
    store.close();
    assert!(c.engine.borrow().row(&RowKey::new("sets", "told-badly")).is_none());
    let channel = web_sys::BroadcastChannel::new(&format!("marksync:{name}")).unwrap();
    channel.post_message(&"{\"meta\":null}".into()).unwrap();
    for _ in 0..100 {
        if c.engine.borrow().row(&RowKey::new("sets", "told-badly")).is_some() {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(10).await;
    }
    assert!(c.engine.borrow().row(&RowKey::new("sets", "told-badly")).is_some(), "read again from the disk");
    channel.close();
    c.close();
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
async fn a_hundred_thousand_rows_are_named_without_an_await_and_none_is_reused_after_reopen() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("named");
    let c = client(&name, &server).await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..100_000 {
        let id = c.new_row_id().expect("newRowId never runs out in normal use");
        assert!(seen.insert(id), "a rowId handed out twice");
    }
    // A bulk import with no ids of its own: the recording names the rows (10k
    // here, in a debug build; the package's test imports 100k in every engine).
    let unnamed: Vec<Edit> =
        (0..10_000).map(|i| Edit { space: None, table: "sets".into(), row_id: None, fields: set(1 + i % 100) }).collect();
    let recorded = c.change_many(unnamed).await.unwrap();
    assert_eq!(recorded.len(), 10_000);
    for (_, row) in &recorded {
        assert!(seen.insert(row.clone()), "a named row took an id handed out before");
    }
    c.close();
    let c = client(&name, &server).await;
    assert_eq!(c.engine.borrow().all_visible().len(), 10_000, "every named row is there after reopen");
    for _ in 0..1_000 {
        assert!(seen.insert(c.new_row_id().unwrap()), "an id reused after reopen");
    }
    let op = c.change("sets", &c.new_row_id().unwrap(), set(3)).await.unwrap();
    assert!(recorded.iter().all(|(o, _)| *o != op), "an opId reused after reopen");
    c.close();
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
    let (txn, _rec) = engine.plan_record(draft, &stored, 10).unwrap();
    store.commit_then_abort(&txn).await.unwrap();
    let after = store.open(Meta::fresh("x".into())).await.unwrap();
    assert!(after.pending.is_empty(), "no op");
    assert_eq!(after.meta.unwrap().counter, 0, "no counter bump");
}

#[wasm_bindgen_test]
async fn an_aborted_step_takes_its_index_entries_with_its_rows() {
    use marksync::index_def::{EntriesFor, EntryRange};
    use marksync::query::IndexDef;
    let store = IdbStore::connect(&unique("abort-entries")).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let def = IndexDef { table: "sets".into(), fields: vec!["reps".into()] };
    let keep = EntriesFor { defs: vec![def.clone()], app_schema: 1, defaults_shown: true };
    let row = |reps: f64| {
        use marksync::protocol::{Cell, Mark, OpId, Row};
        let mut r = Row::default();
        r.cells.insert("reps".into(), Cell { value: Value::Number(reps), mark: Mark { at: reps as u64, op_id: OpId::new("srv:1") } });
        (RowKey::new("sets", "r1"), r)
    };
    store.commit(&Txn { put_base: vec![row(5.0)], entries_for: Some(keep), ..Txn::default() }).await.unwrap();
    let all = EntryRange { index: def.id(), from: Vec::new(), to: None, reverse: false, limit: 10 };
    let before = store.read_entries(&all).await.unwrap();
    assert_eq!(before.len(), 1);
    store.commit_then_abort(&Txn { put_base: vec![row(9.0)], ..Txn::default() }).await.unwrap();
    assert_eq!(store.read_entries(&all).await.unwrap(), before, "the entries as they were");
    let snap = store.open(Meta::fresh("x".into())).await.unwrap();
    assert_eq!(snap.base.len(), 1, "the row as it was");
    store.commit(&Txn { put_base: vec![row(9.0)], ..Txn::default() }).await.unwrap();
    assert_ne!(store.read_entries(&all).await.unwrap(), before, "the same step, committed, moves the entry");
}

#[wasm_bindgen_test]
async fn a_rejected_op_disappears_and_its_row_is_rebuilt_and_persisted() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("reject");
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    c.sync().await.unwrap();
    c.change_with(None, "sets", &row, only("reps", 500i64.into()), false).await.unwrap();
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
    let c = Client::open(&unique("lost"), t, Config::default(), false, true, None, false).await.unwrap();
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
    let first = match c.engine.borrow_mut().start_sync(0).1 {
        Step::Push(r) => r,
        other => panic!("{other:?}"),
    };
    let late = server.borrow_mut().push("u", &first).unwrap();
    let _ = c.engine.borrow_mut().on_push_failed(&first.attempt_key, marksync::attempt::Failure::Timeout, 0);
    let _second = c.engine.borrow_mut().start_sync(1);
    assert!(c.engine.borrow_mut().on_push_response(late, 2).is_none());
    let snap = c.store.open(Meta::fresh("x".into())).await.unwrap();
    assert_eq!(snap.pending.len(), 1, "still queued on disk");
    assert!(marksync::replica::base_rows(&snap).unwrap().is_empty());
}

fn base_row(at: u64, reps: f64) -> marksync::protocol::Row {
    let mut r = marksync::protocol::Row::default();
    let mark = marksync::protocol::Mark { at, op_id: marksync::protocol::OpId::new(format!("srv:{at}")) };
    r.cells.insert("reps".into(), marksync::protocol::Cell { value: Value::Number(reps), mark: mark.clone() });
    r.cells.insert("note".into(), marksync::protocol::Cell { value: Value::from(format!("row at {at} \"quoted\" é")), mark });
    r
}

type Base = std::collections::BTreeMap<RowKey, marksync::protocol::Row>;

async fn reopened_base(name: &str) -> Base {
    let store = IdbStore::connect(name).await.unwrap();
    let snap = store.open(Meta::fresh("x".into())).await.unwrap();
    store.close();
    let rows = marksync::replica::base_rows(&snap).unwrap();
    let n = rows.len();
    let base: Base = rows.into_iter().collect();
    assert_eq!(base.len(), n, "each row once in the snapshot");
    base
}

async fn put_rows(store: &IdbStore, expected: &mut Base, rows: Vec<(RowKey, marksync::protocol::Row)>) {
    for (k, r) in &rows {
        expected.insert(k.clone(), r.clone());
    }
    store.commit(&Txn { put_base: rows, ..Txn::default() }).await.unwrap();
}

#[wasm_bindgen_test]
async fn compaction_keeps_every_row() {
    let name = unique("compact");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let mut expected = Base::new();
    // 5,000 rows in pages (more than one chunk holds), two tables sharing rowIds.
    for page in 0..5u64 {
        let rows = (0..1000u64)
            .map(|i| {
                let table = if i % 2 == 0 { "sets" } else { "notes" };
                (RowKey::new(table, format!("dev-{}", page * 1000 + i)), base_row(page * 1000 + i + 1, i as f64))
            })
            .collect();
        put_rows(&store, &mut expected, rows).await;
    }
    assert_eq!(reopened_base(&name).await, expected, "before compaction: all deltas");
    // Crossing the threshold in commits has already started compactions on its own.
    store.compact().await.unwrap();
    let (chunks, deltas) = store.layout().await.unwrap();
    assert!(chunks >= 3 && deltas == 0, "5,000 rows in several chunks, no delta left: {chunks}, {deltas}");
    assert_eq!(reopened_base(&name).await, expected, "after the first compaction");
    // Deltas into existing chunks, before the first chunk and after the last, then fold again.
    let mut rows: Vec<_> = (0..300u64).map(|i| (RowKey::new("sets", format!("dev-{}", i * 16)), base_row(10_000 + i, -1.0))).collect();
    rows.push((RowKey::new("aaa", "first"), base_row(20_000, 1.0)));
    rows.push((RowKey::new("zzz", "last"), base_row(20_001, 2.0)));
    put_rows(&store, &mut expected, rows).await;
    assert_eq!(reopened_base(&name).await, expected, "deltas win over chunk rows");
    assert_eq!(store.compact().await.unwrap(), 302);
    assert_eq!(store.compact().await.unwrap(), 0, "nothing left to fold");
    assert_eq!(store.layout().await.unwrap().1, 0);
    assert_eq!(reopened_base(&name).await, expected, "after the second compaction");
    // Crossing the threshold in commits starts a compaction by itself.
    let rows = (0..(marksync::wasm::idb_store::COMPACT_AFTER as u64 + 10))
        .map(|i| (RowKey::new("sets", format!("late-{i}")), base_row(30_000 + i, 3.0)))
        .collect();
    put_rows(&store, &mut expected, rows).await;
    for _ in 0..200 {
        if !store.needs_compaction() {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(20).await;
    }
    assert!(!store.needs_compaction(), "a background compaction folded the deltas");
    assert_eq!(store.compact().await.unwrap(), 0, "the background compaction folded everything");
    store.close();
    assert_eq!(reopened_base(&name).await, expected, "after the background compaction");
}

#[wasm_bindgen_test]
async fn a_row_updated_after_compaction_reads_back_its_latest_value() {
    let name = unique("update");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let key = RowKey::new("sets", "dev-7");
    let mut expected = Base::new();
    put_rows(&store, &mut expected, vec![(key.clone(), base_row(1, 5.0)), (RowKey::new("sets", "dev-8"), base_row(2, 6.0))]).await;
    store.compact().await.unwrap();
    put_rows(&store, &mut expected, vec![(key.clone(), base_row(3, 6.5))]).await;
    put_rows(&store, &mut expected, vec![(key.clone(), base_row(3, 7.0))]).await;
    let got = reopened_base(&name).await;
    assert_eq!(got.get(&key).and_then(|r| r.get("reps")), Some(&Value::Number(7.0)), "the latest delta wins");
    assert_eq!(got, expected);
    store.compact().await.unwrap();
    put_rows(&store, &mut expected, vec![(key.clone(), base_row(4, 8.0))]).await;
    store.compact().await.unwrap();
    let got = reopened_base(&name).await;
    assert_eq!(got.get(&key).and_then(|r| r.get("reps")), Some(&Value::Number(8.0)), "the latest fold wins");
    assert_eq!(got, expected);
    store.close();
}

#[wasm_bindgen_test]
async fn an_old_layout_database_opens_after_the_upgrade() {
    use idb::{Factory, ObjectStoreParams, TransactionMode};
    use wasm_bindgen::JsValue;
    let name = unique("legacy");
    // Write a database as layout version 1 did: one `base` record per row.
    let factory = Factory::new().unwrap();
    let mut req = factory.open(&name, Some(1)).unwrap();
    req.on_upgrade_needed(|event| {
        let db = idb::DatabaseEvent::database(&event).unwrap();
        for s in ["meta", "base", "pending", "rejections"] {
            db.create_object_store(s, ObjectStoreParams::new()).unwrap();
        }
    });
    let db = req.await.unwrap();
    let mut meta = Meta::fresh("old-device".into());
    meta.counter = 128;
    meta.cursor = 9;
    let rows: Vec<_> = (0..50u64).map(|i| (RowKey::new("sets", format!("old-{i}")), base_row(i + 1, i as f64))).collect();
    let op = marksync::workload::set_op("old-device", 100, 1, 77);
    let tx = db.transaction(&["meta", "base", "pending"], TransactionMode::ReadWrite).unwrap();
    let put = |store: &str, v: String, k: JsValue| {
        tx.object_store(store).unwrap().put(&JsValue::from_str(&v), Some(&k)).unwrap();
    };
    put("meta", serde_json::to_string(&meta).unwrap(), JsValue::from_str("meta"));
    for (k, r) in &rows {
        let key = js_sys::Array::of2(&JsValue::from_str(&k.table), &JsValue::from_str(&k.row_id)).into();
        put("base", serde_json::to_string(&(k, r)).unwrap(), key);
    }
    put("pending", serde_json::to_string(&op).unwrap(), JsValue::from_f64(op.at as f64));
    tx.await.unwrap();
    db.close();

    let mut expected: Base = rows.into_iter().collect();
    let store = IdbStore::connect(&name).await.unwrap();
    let snap = store.open(Meta::fresh("new-device".into())).await.unwrap();
    assert_eq!(snap.meta.as_ref(), Some(&meta), "the old meta record is kept");
    // Layout 8 keeps it in the outbox's store, above every op, and nowhere else.
    let raw = Factory::new().unwrap().open(&name, None).unwrap().await.unwrap();
    let tx = raw.transaction(&["meta", "pending"], TransactionMode::ReadOnly).unwrap();
    let moved = tx.object_store("pending").unwrap().get(idb::Query::Key(JsValue::from_str("meta"))).unwrap().await.unwrap();
    let left = tx.object_store("meta").unwrap().get(idb::Query::Key(JsValue::from_str("meta"))).unwrap().await.unwrap();
    raw.close();
    assert_eq!(
        moved.and_then(|v| v.as_string()).map(|t| marksync::json::from_str::<Meta>(&t).unwrap()),
        Some(meta.clone()),
        "moved into pending"
    );
    assert!(left.is_none(), "not left behind in meta");
    assert_eq!(store.open(Meta::fresh("newer-device".into())).await.unwrap().meta.as_ref(), Some(&meta), "read from its new place");
    assert_eq!(snap.pending, vec![op.clone()]);
    assert_eq!(
        marksync::replica::base_rows(&snap).unwrap().into_iter().collect::<Base>(),
        expected,
        "old per-row records read as deltas"
    );
    let newer = (RowKey::new("sets", "old-3"), base_row(1_000, 99.0));
    store.commit(&Txn { put_base: vec![newer.clone()], ..Txn::default() }).await.unwrap();
    expected.insert(newer.0, newer.1);
    assert_eq!(reopened_base(&name).await, expected, "a batch wins over an older per-row delta");
    assert_eq!(store.compact().await.unwrap(), 51);
    store.close();
    assert_eq!(reopened_base(&name).await, expected, "folded into chunks");
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let c = client(&name, &server).await;
    assert_eq!(c.engine.borrow().device_id(), "old-device");
    assert_eq!(c.engine.borrow().pending_len(), 1);
    assert!(c.engine.borrow().meta().counter > 128, "the counter goes on from the old one");
    c.close();
}

#[wasm_bindgen_test]
async fn a_chunk_stored_as_text_in_the_first_encoding_still_reads() {
    use wasm_bindgen::JsValue;
    let name = unique("textchunk");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    store.close();
    let db = idb::Factory::new().unwrap().open(&name, None).unwrap().await.unwrap();
    let tx = db.transaction(&["base_chunks"], idb::TransactionMode::ReadWrite).unwrap();
    let key: JsValue = js_sys::Array::of2(&"sets".into(), &"a".into()).into();
    let text = r#"[["sets","a",[["note","x",1,"s:1"],["reps",5.0,2,"s:2"]]]]"#;
    tx.object_store("base_chunks").unwrap().put(&JsValue::from_str(text), Some(&key)).unwrap();
    tx.await.unwrap();
    db.close();
    let got = reopened_base(&name).await;
    let a = got.get(&RowKey::new("sets", "a")).unwrap();
    assert_eq!((a.get("reps"), a.get("note")), (Some(&Value::Number(5.0)), Some(&Value::from("x"))));
    assert_eq!(a.cells.get("reps").unwrap().mark.at, 2);
    let store = IdbStore::connect(&name).await.unwrap();
    let mut expected = got.clone();
    put_rows(&store, &mut expected, vec![(RowKey::new("sets", "b"), base_row(3, 1.0))]).await;
    store.compact().await.unwrap();
    store.close();
    assert_eq!(reopened_base(&name).await, expected, "rewritten in the current encoding");
}

#[wasm_bindgen_test]
async fn acknowledged_ops_are_deleted_but_never_an_op_queued_in_between() {
    let name = unique("rangedelete");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let ops: Vec<_> = (1..=40u64).map(|i| marksync::workload::set_op("dev", i as usize, i as usize, 1_000 + i)).collect();
    store.commit(&Txn { put_pending: ops.clone(), ..Txn::default() }).await.unwrap();
    // An answer acknowledges 39 of them; the 20th (another tab's, say) is not among them.
    let acked: Vec<u64> = ops.iter().map(|o| o.at).filter(|at| *at != 1_020).collect();
    store.commit(&Txn { delete_pending: acked, ..Txn::default() }).await.unwrap();
    store.close();
    assert_eq!(queued_ats(&name).await, vec![1_020], "the op inside the range, not acknowledged, stays");
    // Acknowledging a whole range (one key-range delete) leaves nothing.
    let store = IdbStore::connect(&name).await.unwrap();
    let more: Vec<_> = (41..=80u64).map(|i| marksync::workload::set_op("dev", i as usize, i as usize, 1_000 + i)).collect();
    store.commit(&Txn { put_pending: more.clone(), ..Txn::default() }).await.unwrap();
    let mut all: Vec<u64> = more.iter().map(|o| o.at).collect();
    all.push(1_020);
    store.commit(&Txn { delete_pending: all, ..Txn::default() }).await.unwrap();
    store.close();
    assert_eq!(queued_ats(&name).await, Vec::<u64>::new());
}

/// The outbox's records in the `pending` store, counted as IndexedDB holds
/// them: every key a number (not the meta record's, `"meta"`).
async fn outbox_records(name: &str) -> u32 {
    let db = idb::Factory::new().unwrap().open(name, None).unwrap().await.unwrap();
    let tx = db.transaction(&["pending"], idb::TransactionMode::ReadOnly).unwrap();
    let numbers = idb::KeyRange::upper_bound(&wasm_bindgen::JsValue::from_f64(f64::INFINITY), None).unwrap();
    let n = tx.object_store("pending").unwrap().count(Some(idb::Query::KeyRange(numbers))).unwrap().await.unwrap();
    db.close();
    n
}

/// The outbox's `at`s as a fresh open reads them.
async fn queued_ats(name: &str) -> Vec<u64> {
    let s = IdbStore::connect(name).await.unwrap();
    let snap = s.open(Meta::fresh("dev".into())).await.unwrap();
    s.close();
    snap.pending.iter().map(|o| o.at).collect()
}

/// Records `ops` as a recording does (read, then write, in one transaction).
async fn record(store: &IdbStore, ops: &[marksync::protocol::Op]) {
    let wrote = store.update(true, &mut |_| Some(Txn { put_pending: ops.to_vec(), ..Txn::default() })).await.unwrap();
    assert!(wrote);
}

#[wasm_bindgen_test]
async fn a_recording_of_many_ops_goes_as_runs_and_reads_back_whole_and_in_order() {
    let name = unique("runs");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let ops: Vec<_> = (1..=600u64).map(|i| marksync::workload::set_op("dev", i as usize, i as usize, 1_000 + i)).collect();
    record(&store, &ops).await;
    // One change() is one record, as before.
    let one = marksync::workload::set_op("dev", 601, 601, 1_601);
    record(&store, std::slice::from_ref(&one)).await;
    store.close();
    assert_eq!(outbox_records(&name).await, 4, "600 ops in runs of 256, and the single op alone");
    let s = IdbStore::connect(&name).await.unwrap();
    let snap = s.open(Meta::fresh("dev".into())).await.unwrap();
    s.close();
    let mut expected = ops.clone();
    expected.push(one);
    assert_eq!(snap.pending, expected, "every op whole, in `at` order");
    // The outbox's last key still says the last `at` taken.
    let s = IdbStore::connect(&name).await.unwrap();
    let mut seen = None;
    s.update(true, &mut |stored| {
        seen = Some(stored.clock.last_at);
        None
    })
    .await
    .unwrap();
    s.close();
    assert_eq!(seen, Some(1_601));
}

#[wasm_bindgen_test]
async fn an_answer_takes_its_ops_out_of_runs_and_every_other_op_stays() {
    let name = unique("runack");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    // A recording of 51 ops at even `at`s 1000..=1100: one run.
    let ops: Vec<_> = (0..=50u64).map(|i| marksync::workload::set_op("dev", i as usize + 1, i as usize, 1_000 + 2 * i)).collect();
    record(&store, &ops).await;
    // A single op put back inside the run's range (a context that outlived
    // its database being cleared puts its own ops back).
    let inside = marksync::workload::set_op("dev", 99, 99, 1_051);
    store.commit(&Txn { put_pending: vec![inside], ..Txn::default() }).await.unwrap();
    // An answer acknowledges the run's first 21 ops (1000..=1040): the run
    // lies above the single op, and keeps its other 30.
    let acked: Vec<u64> = (0..=20u64).map(|i| 1_000 + 2 * i).collect();
    store.commit(&Txn { delete_pending: acked, ..Txn::default() }).await.unwrap();
    let mut expected: Vec<u64> = (21..=50u64).map(|i| 1_000 + 2 * i).collect();
    expected.insert(5, 1_051);
    assert_eq!(queued_ats(&name).await, expected);
    // Then one across the single op: the range holds it, and it goes.
    let acked: Vec<u64> = [1_042, 1_044, 1_046, 1_048, 1_050, 1_051].into();
    store.commit(&Txn { delete_pending: acked, ..Txn::default() }).await.unwrap();
    expected.retain(|at| *at > 1_051);
    assert_eq!(queued_ats(&name).await, expected);
    // An answer naming one op inside the run, and an `at` not queued.
    store.commit(&Txn { delete_pending: vec![1_070, 1_071], ..Txn::default() }).await.unwrap();
    expected.retain(|at| *at != 1_070);
    assert_eq!(queued_ats(&name).await, expected);
    // The rest, many at once: nothing is left, not even an empty run.
    store.commit(&Txn { delete_pending: expected.clone(), ..Txn::default() }).await.unwrap();
    store.close();
    assert_eq!(queued_ats(&name).await, Vec::<u64>::new());
    assert_eq!(outbox_records(&name).await, 0);
}

#[wasm_bindgen_test]
async fn many_acknowledged_at_once_never_take_an_unacknowledged_op_of_a_run() {
    let name = unique("runrange");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    // Two recordings: 300 ops (two runs), then 40 singles' worth in one run.
    let first: Vec<_> = (1..=300u64).map(|i| marksync::workload::set_op("dev", i as usize, i as usize, 1_000 + i)).collect();
    record(&store, &first).await;
    let second: Vec<_> = (301..=340u64).map(|i| marksync::workload::set_op("dev", i as usize, i as usize, 1_000 + i)).collect();
    record(&store, &second).await;
    // An answer of 1000 would take 1001..=1310, but op 1150 (say, refused
    // later) is not among them: the range holds it, so no range delete.
    let acked: Vec<u64> = (1_001..=1_310u64).filter(|at| *at != 1_150).collect();
    store.commit(&Txn { delete_pending: acked, ..Txn::default() }).await.unwrap();
    let mut expected = vec![1_150];
    expected.extend(1_311..=1_340u64);
    assert_eq!(queued_ats(&name).await, expected);
    // A run none of whose ops is named, inside the range of many singles
    // acknowledged: the range is not deleted whole.
    let singles =
        |from: u64| (from..from + 20).map(|at| marksync::workload::set_op("dev", at as usize, at as usize, at)).collect::<Vec<_>>();
    store.commit(&Txn { put_pending: singles(2_000), ..Txn::default() }).await.unwrap();
    let run: Vec<_> = (2_100..=2_110u64).map(|at| marksync::workload::set_op("dev", at as usize, at as usize, at)).collect();
    record(&store, &run).await;
    store.commit(&Txn { put_pending: singles(2_200), ..Txn::default() }).await.unwrap();
    let acked: Vec<u64> = (2_000..2_020).chain(2_200..2_220).collect();
    store.commit(&Txn { delete_pending: acked, ..Txn::default() }).await.unwrap();
    expected.extend(2_100..=2_110u64);
    assert_eq!(queued_ats(&name).await, expected);
    store.close();
}

#[wasm_bindgen_test]
async fn the_run_an_answer_ends_inside_is_found_past_any_number_of_single_ops() {
    let name = unique("runfar");
    let store = IdbStore::connect(&name).await.unwrap();
    store.open(Meta::fresh("dev".into())).await.unwrap();
    let run: Vec<_> = (0..100u64).map(|i| marksync::workload::set_op("dev", i as usize + 1, i as usize, 3_000 + 2 * i)).collect();
    record(&store, &run).await;
    // 70 single ops put back inside the run's range, between its first op and its key.
    let inside: Vec<_> = (0..70u64).map(|i| marksync::workload::set_op("dev", 500 + i as usize, 500 + i as usize, 3_001 + 2 * i)).collect();
    store.commit(&Txn { put_pending: inside, ..Txn::default() }).await.unwrap();
    store.commit(&Txn { delete_pending: vec![3_000], ..Txn::default() }).await.unwrap();
    store.close();
    let ats = queued_ats(&name).await;
    assert_eq!(ats.len(), 169);
    assert!(!ats.contains(&3_000), "the run's first op is gone");
}

#[wasm_bindgen_test]
async fn recording_an_edit_waits_for_the_disk() {
    // change() records in a transaction with durability "strict": it completes
    // only once flushed to disk (Chromium's default, "relaxed", does not wait).
    // Every IndexedDB transaction opened meanwhile is watched.
    let watch = js_sys::Function::new_no_args(
        "const t = IDBDatabase.prototype.transaction; globalThis.__seenTx = [];
         IDBDatabase.prototype.transaction = function (names, mode, options) {
           globalThis.__seenTx.push([[].concat(names).join(','), mode, options && options.durability]);
           return t.apply(this, arguments);
         };
         return () => { IDBDatabase.prototype.transaction = t; return globalThis.__seenTx; };",
    );
    let unwatch: js_sys::Function = watch.call0(&wasm_bindgen::JsValue::NULL).unwrap().into();
    let name = unique("durable");
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    c.change_many(vec![edit(&row, set(6))]).await.unwrap();
    c.close();
    let seen = js_sys::Array::from(&unwatch.call0(&wasm_bindgen::JsValue::NULL).unwrap());
    let records: Vec<String> = seen
        .iter()
        .map(|t| js_sys::Array::from(&t))
        // The reservation at open reads and writes both stores; a recording, the outbox's alone (layout 8).
        .filter(|t| {
            matches!(t.get(0).as_string().as_deref(), Some("meta,pending" | "pending"))
                && t.get(1).as_string().as_deref() == Some("readwrite")
        })
        .map(|t| t.get(2).as_string().unwrap_or_else(|| "default".into()))
        .collect();
    // First the reservation of row numbers at open: relaxed, as losing it to a
    // power cut costs nothing (each recording writes the counter it used, strictly).
    assert_eq!(records, vec!["default", "strict", "strict"], "every recording transaction asks for strict durability");
}

// ----- truthful status, bounded retries, the clock — on IndexedDB ----------

fn phase(c: &Client<MemoryTransport>, row: &str) -> marksync::attempt::Phase {
    c.engine.borrow().status(&RowKey::new("sets", row)).phase
}

/// A tab that records an edit, records its attempt going out, and closes
/// before any answer; returns the edited row.
async fn closed_with_a_request_out(name: &str, server: &Rc<RefCell<MemoryServer>>) -> String {
    let c = client(name, server).await;
    let row = c.new_row_id().unwrap();
    c.change("sets", &row, set(5)).await.unwrap();
    let (txn, step) = c.engine.borrow_mut().start_sync(1_000);
    assert!(matches!(step, Step::Push(_)));
    c.store.commit(&txn).await.unwrap();
    c.close();
    row
}

#[wasm_bindgen_test]
async fn a_reload_with_a_request_out_shows_unknown_outcome_never_queued() {
    use marksync::attempt::Phase;
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("orphan");
    let row = closed_with_a_request_out(&name, &server).await;
    let again = client(&name, &server).await;
    // A job of the context just closed may still hold the lock for a moment:
    // the attempt then awaits its answer until the lock is free, never queued.
    settles_unknown(&again, &row).await;
    let st = again.engine.borrow().status(&RowKey::new("sets", &row));
    assert_eq!(st.attempts, 1);
    assert_eq!(again.engine.borrow().metrics().unknown_outcomes, 1);
    again.close();
    let third = client(&name, &server).await;
    assert_eq!(third.engine.borrow().metrics().unknown_outcomes, 1, "counted once, across reloads");
    let out = third.sync().await.unwrap();
    assert!(out.ok);
    assert_eq!(phase(&third, &row), Phase::Synced);
}

/// Waits (up to 5 s) for `row`'s attempt to be settled as an unknown
/// outcome; meanwhile it may await its answer, never be queued.
async fn settles_unknown(c: &Client<MemoryTransport>, row: &str) {
    use marksync::attempt::Phase;
    for _ in 0..500 {
        match phase(c, row) {
            Phase::UnknownOutcome => return,
            Phase::AwaitingAck => gloo_timers::future::TimeoutFuture::new(10).await,
            other => panic!("an attempt out when its tab closed shows {other:?}"),
        }
    }
    panic!("still awaiting its answer after 5 s, with no job running anywhere");
}

#[wasm_bindgen(inline_js = r#"
export function hold_lock(name) {
  return new Promise((got) => navigator.locks.request(name, () => new Promise((release) => got(release))));
}
"#)]
extern "C" {
    /// Takes the Web Lock `name`; resolves to the function that releases it.
    fn hold_lock(name: &str) -> js_sys::Promise;
}

#[wasm_bindgen_test]
async fn a_reload_while_another_job_holds_the_lock_settles_the_attempt_once_it_ends() {
    use marksync::attempt::Phase;
    use marksync::wasm::client::BrowserHost;
    use wasm_bindgen::JsCast;
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("orphan-busy");
    let row = closed_with_a_request_out(&name, &server).await;
    // Another context's job (a cycle, a lift) holds the lock while the tab reopens.
    let release: js_sys::Function =
        wasm_bindgen_futures::JsFuture::from(hold_lock(&BrowserHost::tag(&name))).await.unwrap().unchecked_into();
    let again = client(&name, &server).await;
    gloo_timers::future::TimeoutFuture::new(50).await;
    assert_eq!(phase(&again, &row), Phase::AwaitingAck, "a job runs: the answer may still come");
    release.call0(&wasm_bindgen::JsValue::NULL).unwrap();
    // The job ended with the attempt still recorded: no one awaits it.
    settles_unknown(&again, &row).await;
    assert_eq!(again.engine.borrow().metrics().unknown_outcomes, 1);
    again.close();
    let third = client(&name, &server).await;
    assert_eq!(phase(&third, &row), Phase::UnknownOutcome, "settled on disk, not only in that context");
    assert_eq!(third.engine.borrow().metrics().unknown_outcomes, 1, "counted once");
    third.close();
}

#[wasm_bindgen_test]
async fn two_contexts_show_the_same_phase_and_the_same_metrics() {
    use marksync::attempt::Phase;
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("shared");
    let a = client(&name, &server).await;
    let b = client(&name, &server).await;
    let row = a.new_row_id().unwrap();
    a.change("sets", &row, set(5)).await.unwrap();
    *a.transport.fail_next.borrow_mut() = 1;
    let out = a.sync().await.unwrap();
    assert!(!out.ok);
    // b hears a's committed steps over the BroadcastChannel.
    for _ in 0..100 {
        if phase(&b, &row) == Phase::UnknownOutcome {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(10).await;
    }
    assert_eq!(phase(&a, &row), Phase::UnknownOutcome);
    assert_eq!(phase(&b, &row), Phase::UnknownOutcome, "another tab tells the same story");
    assert_eq!(a.engine.borrow().metrics(), b.engine.borrow().metrics());
    assert_eq!(b.engine.borrow().status(&RowKey::new("sets", &row)).next_retry_at, out.retry_at);
    // b syncs next: it builds on a's counters (read under the lock), never overwrites them.
    let out = b.sync().await.unwrap();
    assert!(out.ok);
    let m = b.engine.borrow().metrics().clone();
    assert_eq!((m.attempts, m.unknown_outcomes, m.applied), (2, 1, 1));
    a.close();
    b.close();
}

#[wasm_bindgen_test]
async fn readiness_a_to_e_on_indexeddb() {
    use marksync::attempt::{Failure, Phase};
    use marksync::protocol::{Outcome, PushResponse, Verdict};
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("ready");
    let c = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    let key = RowKey::new("sets", &row);
    let reps = |c: &Client<MemoryTransport>| c.engine.borrow().row(&key).and_then(|r| r.get("reps").cloned());
    c.change("sets", &row, set(5)).await.unwrap();
    // (a) a lost answer: the edit stays visible and queued, on disk too.
    let (txn, Step::Push(first)) = c.engine.borrow_mut().start_sync(0) else { panic!() };
    c.store.commit(&txn).await.unwrap();
    let late = server.borrow_mut().push("u", &first).unwrap();
    let (txn, _) = c.engine.borrow_mut().on_push_failed(&first.attempt_key, Failure::Timeout, 1).unwrap();
    c.store.commit(&txn).await.unwrap();
    assert_eq!(reps(&c), Some(Value::Number(5.0)));
    assert_eq!(c.store.open(Meta::fresh("x".into())).await.unwrap().pending.len(), 1);
    // (c) new input on the same row, attempt 2 with a new key …
    c.change("sets", &row, only("reps", 6i64.into())).await.unwrap();
    let (txn, Step::Push(second)) = c.engine.borrow_mut().start_sync(2) else { panic!() };
    c.store.commit(&txn).await.unwrap();
    assert_ne!(first.attempt_key, second.attempt_key);
    // (b) … with the same opIds, never new ones.
    assert_eq!(second.batch[0].op_id, first.batch[0].op_id);
    // (c) the late answer of attempt 1 changes nothing and is counted stale.
    assert!(c.engine.borrow_mut().on_push_response(late, 3).is_none());
    assert_eq!(reps(&c), Some(Value::Number(6.0)));
    assert_eq!(c.engine.borrow().metrics().stale_acks_ignored, 1);
    // (e) an answer whose verdicts do not match the batch changes nothing; the outcome stays unknown.
    let wrong = PushResponse {
        attempt_key: second.attempt_key.clone(),
        verdicts: vec![Verdict { op_id: second.batch[1].op_id.clone(), outcome: Outcome::Applied }],
        now: None,
    };
    let (txn, _) = c.engine.borrow_mut().on_push_response(wrong, 4).unwrap();
    c.store.commit(&txn).await.unwrap();
    assert_eq!(c.store.open(Meta::fresh("x".into())).await.unwrap().pending.len(), 2);
    assert_eq!(phase(&c, &row), Phase::UnknownOutcome);
    // (d) the ack of the older op never clears the newer input: check at every step.
    let (txn, Step::Push(third)) = c.engine.borrow_mut().start_sync(5) else { panic!() };
    c.store.commit(&txn).await.unwrap();
    let mut resp = server.borrow_mut().push("u", &third).unwrap();
    resp.verdicts.truncate(1);
    let (txn, _) = c.engine.borrow_mut().on_push_response(resp, 6).unwrap();
    assert_eq!(reps(&c), Some(Value::Number(6.0)));
    c.store.commit(&txn).await.unwrap();
    assert_eq!(reps(&c), Some(Value::Number(6.0)));
    c.close();
    let again = client(&name, &server).await;
    assert_eq!(again.engine.borrow().row(&key).and_then(|r| r.get("reps").cloned()), Some(Value::Number(6.0)), "after a reload too");
    let out = again.sync().await.unwrap();
    assert!(out.ok);
    assert_eq!(again.engine.borrow().row(&key).and_then(|r| r.get("reps").cloned()), Some(Value::Number(6.0)));
}

#[wasm_bindgen_test]
async fn exhausted_retries_ask_the_server_then_wait_for_a_person_in_every_context() {
    use marksync::attempt::Phase;
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("exhaust");
    let config = Config { retry: marksync::engine::RetryPolicy { max_attempts: 2, max_elapsed_ms: u64::MAX }, ..Config::default() };
    let t = memory(&server);
    let c = Client::open(&name, t, config.clone(), false, true, None, false).await.unwrap();
    let applied = c.new_row_id().unwrap();
    c.change("sets", &applied, set(5)).await.unwrap();
    *c.transport.lose_next.borrow_mut() = 1; // attempt 1 is judged; its answer is lost
    assert!(!c.sync().await.unwrap().ok);
    let never = c.new_row_id().unwrap();
    c.change("sets", &never, set(6)).await.unwrap();
    *c.transport.fail_next.borrow_mut() = 10;
    // A sync pressed before the backoff's time would go out uncounted: wait for the scheduled try.
    let due = c.engine.borrow().retry_at().unwrap_or(0);
    gloo_timers::future::TimeoutFuture::new((due.saturating_sub(marksync::wasm::client::now()) + 20) as u32).await;
    let err = c.sync().await.unwrap_err();
    assert_eq!(err.code(), "recovery_required");
    assert_eq!(phase(&c, &applied), Phase::Synced, "settled by asking the server");
    assert_eq!(phase(&c, &never), Phase::RecoveryRequired);
    // The Service Worker's open does not lift the stop: nothing is sent.
    let worker = Client::open(&name, memory(&server), config.clone(), false, false, None, false).await.unwrap();
    assert_eq!(phase(&worker, &never), Phase::RecoveryRequired);
    *worker.transport.fail_next.borrow_mut() = 0;
    assert!(worker.sync().await.is_err());
    assert_eq!(server.borrow().head("u"), 1, "nothing more was sent");
    worker.close();
    // A person: retry().
    *c.transport.fail_next.borrow_mut() = 0;
    let out = c.retry().await.unwrap();
    assert!(out.ok);
    assert_eq!(phase(&c, &never), Phase::Synced);
    assert_eq!(server.borrow().head("u"), 2);
    // Stopped again; then an open that lifts the stop (an app's, or a
    // background sync's): its first sync, asked for at once, sends — the
    // lift is written before any job under the lock, whichever runs first.
    let later = c.new_row_id().unwrap();
    c.change("sets", &later, set(7)).await.unwrap();
    *c.transport.fail_next.borrow_mut() = 10;
    for _ in 0..3 {
        if c.sync().await.is_err_and(|e| e.code() == "recovery_required") {
            break;
        }
        let due = c.engine.borrow().retry_at().unwrap_or(0);
        gloo_timers::future::TimeoutFuture::new((due.saturating_sub(marksync::wasm::client::now()) + 20) as u32).await;
    }
    assert_eq!(phase(&c, &later), Phase::RecoveryRequired);
    c.close();
    let app = Client::open(&name, memory(&server), config.clone(), false, true, None, false).await.unwrap();
    let out = app.sync().await.unwrap();
    assert!(out.ok, "{out:?}");
    assert_eq!(phase(&app, &later), Phase::Synced);
    assert_eq!(server.borrow().head("u"), 3);
    app.close();
}

#[wasm_bindgen_test]
async fn a_pulled_row_at_the_top_of_the_clock_then_three_offline_edits_all_reach_the_server() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("clock");
    let c = client(&name, &server).await;
    // A broken device's row, stored before servers refused such ops.
    let mut poisoned = marksync::protocol::Row::default();
    let mark = marksync::protocol::Mark { at: marksync::protocol::MAX_SAFE_INTEGER, op_id: marksync::protocol::OpId::new("z:1") };
    poisoned.cells.insert("note".into(), marksync::protocol::Cell { value: Value::from("x"), mark });
    let (txn, Step::Pull(req)) = c.engine.borrow_mut().start_sync(0) else { panic!() };
    c.store.commit(&txn).await.unwrap();
    let page = marksync::protocol::SpacesPullResponse {
        personal: Some("~u".into()),
        joined: vec![marksync::space::Membership { space: "~u".into(), role: marksync::space::Role::Owner }],
        spaces: vec![marksync::protocol::SpacePage {
            space: "~u".into(),
            changes: vec![marksync::protocol::Change { key: RowKey::new("sets", "z-1"), row: poisoned, seq: 1 }],
            cursor: 1,
            has_more: false,
        }],
        ..Default::default()
    };
    let (txn, _) = c.engine.borrow_mut().on_pull_response(&req, page, 0).unwrap();
    c.store.commit(&txn).await.unwrap();
    for i in 0..3 {
        let row = c.new_row_id().unwrap();
        c.change("sets", &row, set(5 + i)).await.unwrap();
    }
    assert_eq!(c.store.open(Meta::fresh("x".into())).await.unwrap().pending.len(), 3, "none replaced another");
    let out = c.sync().await.unwrap();
    assert_eq!((out.ok, out.report.applied), (true, 3));
}

#[wasm_bindgen_test]
async fn numbers_beyond_two_to_the_53_are_refused_at_the_boundary() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let c = client(&unique("big"), &server).await;
    let row = c.new_row_id().unwrap();
    let err = c.change("sets", &row, only("reps", Value::Number(9007199254740994.0))).await.unwrap_err();
    assert_eq!(err.code(), "bad_input");
    assert!(err.to_string().contains("2^53-1"), "{err}");
    assert_eq!(c.engine.borrow().pending_len(), 0);
}

#[wasm_bindgen_test]
async fn the_servers_schema_is_kept_on_the_device_and_refuses_edits_offline_in_every_context() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("schema");
    let c = client(&name, &server).await;
    let other = client(&name, &server).await;
    let row = c.new_row_id().unwrap();
    // Before any schema is known, edits are recorded as before.
    c.change("sets", &row, set(5)).await.unwrap();
    assert!(c.engine.borrow().known_schema().is_none());
    c.sync().await.unwrap();
    assert_eq!(c.engine.borrow().known_schema().map(|(_, s)| s.version), Some(1), "the first sync fetched the schema");

    let err = c.change("sets", &row, only("reps", 500i64.into())).await.unwrap_err();
    assert_eq!(err.code(), "invalid");
    assert_eq!(err.to_string(), "reps must be at most 100");
    assert_eq!(c.engine.borrow().pending_len(), 0, "nothing recorded");
    let many = c.change_many(vec![edit(&row, only("reps", 6i64.into())), edit(&row, only("reps", 0i64.into()))]).await;
    assert_eq!(many.unwrap_err().to_string(), "edits[1]: reps must be at least 1");
    assert_eq!(c.engine.borrow().pending_len(), 0, "all or nothing");

    // Another context on the same database heard it over the broadcast.
    let mut seen = false;
    for _ in 0..50 {
        if other.engine.borrow().known_schema().is_some() {
            seen = true;
            break;
        }
        gloo_timers::future::TimeoutFuture::new(10).await;
    }
    assert!(seen, "the other context took the schema");
    assert_eq!(other.change("sets", &row, only("reps", 500i64.into())).await.unwrap_err().code(), "invalid");

    // After a reload, offline (no sync): still known, still refused.
    c.close();
    other.close();
    let again = client(&name, &server).await;
    assert_eq!(again.change("sets", &row, only("reps", 500i64.into())).await.unwrap_err().code(), "invalid");
    // The app may record it anyway: the server stays the judge.
    again.change_with(None, "sets", &row, only("reps", 500i64.into()), false).await.unwrap();
    let report = again.sync().await.unwrap();
    assert_eq!(report.report.rejected, 1);
}

/// Shared spaces on IndexedDB: a grant's backfill, the role refused on the
/// device, a revoke's removal — each as stored, so a reopened database says
/// the same (PROTOCOL §4b).
#[wasm_bindgen_test]
async fn a_shared_space_is_backfilled_refused_to_a_viewer_and_gone_after_a_revoke_on_disk() {
    use marksync::space::Role;
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let alice = client_as(&unique("alice"), &server, "alice").await;
    let bob_db = unique("bob");
    let bob = client_as(&bob_db, &server, "bob").await;
    alice.create_space("diary").await.unwrap();
    let row = alice.new_row_id().unwrap();
    alice.change_with(Some("diary"), "sets", &row, set(5), true).await.unwrap();
    alice.sync().await.unwrap();
    assert_eq!(alice.engine.borrow().locate("sets", &row).unwrap().space, "diary");

    alice.set_member("diary", "bob", Some(Role::Viewer)).await.unwrap();
    // An owner's add is an invitation: nothing flows until bob accepts (PROTOCOL §3c).
    bob.accept("diary").await.unwrap();
    bob.sync().await.unwrap();
    let key = RowKey::in_space("diary", "sets", row.as_str());
    assert!(bob.engine.borrow().row(&key).is_some(), "backfilled on grant");
    let err = bob.change("sets", &row, set(9)).await.unwrap_err();
    assert_eq!((err.code(), err.to_string().as_str()), ("read_only", "you are a viewer of space diary: viewers cannot edit its rows"));
    assert_eq!(bob.engine.borrow().pending_len(), 0, "nothing recorded");

    alice.set_member("diary", "bob", Some(Role::Editor)).await.unwrap();
    bob.sync().await.unwrap();
    bob.change("sets", &row, set(7)).await.unwrap();
    bob.sync().await.unwrap();
    alice.sync().await.unwrap();
    assert_eq!(alice.engine.borrow().row(&key).unwrap().get("reps"), Some(&Value::from(7i64)), "the editor's edit reached the owner");

    // Bob edits offline; the revoke lands before he syncs.
    let queued = bob.change("sets", &row, set(8)).await.unwrap();
    alice.set_member("diary", "bob", None).await.unwrap();
    bob.sync().await.unwrap();
    bob.sync().await.unwrap();
    assert!(bob.engine.borrow().row(&key).is_none(), "the space's rows left the device");
    let rejected: Vec<_> = bob.engine.borrow().rejections().map(|r| (r.op.op_id.clone(), r.code.clone())).collect();
    assert_eq!(rejected, vec![(queued, "forbidden".to_owned())], "the queued edit came back, not dropped");
    bob.close();
    let again = client_as(&bob_db, &server, "bob").await;
    let e = again.engine.borrow();
    assert!(e.row(&key).is_none(), "and the database too");
    assert!(e.following().has_left("diary"));
    assert_eq!(e.rejections().count(), 1);
    assert_eq!(e.spaces().len(), 1, "only the personal space is listed");
}

/// The Service Worker's way: a context opened lazily holds no row at open,
/// reads only what its sync needs — the rows of queued ops, of an answer,
/// of a pulled page — and what it writes is whole when the tab opens the
/// database again (PROTOCOL §7, "The lazy store").
#[wasm_bindgen_test]
async fn a_lazy_context_syncs_rows_it_does_not_hold_and_loses_none() {
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("lazy-sync");
    let tab = client(&name, &server).await;
    // Past a chunk's 2,000 rows, compacted: the database holds several chunks.
    let rows: Vec<Edit> = (0..2_100).map(|i| Edit { space: None, table: "sets".into(), row_id: None, fields: set(1 + i % 90) }).collect();
    let named = tab.change_many(rows).await.unwrap();
    tab.sync().await.unwrap();
    tab.store.compact().await.unwrap();
    // Another device changes one of them; this tab queues an edit of another.
    let other = client(&unique("lazy-other"), &server).await;
    other.sync().await.unwrap();
    let (theirs, mine) = (named[100].1.clone(), named[2_000].1.clone());
    other.change("sets", &theirs, set(77)).await.unwrap();
    other.sync().await.unwrap();
    tab.change("sets", &mine, set(55)).await.unwrap();
    tab.close();
    // What an open that reads every chunk holds, to compare.
    let eager = client(&name, &server).await;
    let all_held = eager.engine.borrow().held();
    eager.close();

    // A cache of one byte: every row read is let go after each step, so each step reads what it needs.
    let config = Config { cache_bytes: 1, ..Config::default() };
    let worker = Client::open(&name, memory(&server), config, false, false, None, true).await.unwrap();
    let held = worker.engine.borrow().held();
    assert!(held * 2 < all_held, "a lazy open holds the queued op's chunk, not the 2,100 rows: {held} of {all_held} bytes");
    let report = worker.sync().await.unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(worker.engine.borrow().pending_len(), 0, "the queued edit went");
    worker.close();

    let again = client(&name, &server).await;
    let visible = again.engine.borrow().all_visible();
    assert_eq!(visible.len(), 2_100, "every row is there");
    let reps = |id: &str| visible.get(&RowKey::new("sets", id)).and_then(|r| r.get("reps").cloned());
    assert_eq!(reps(&theirs), Some(Value::from(77)), "the other device's change, pulled by the worker");
    assert_eq!(reps(&mine), Some(Value::from(55)), "the queued edit, answered to the worker");
    assert_eq!(reps(&named[0].1), Some(Value::from(1)), "a row the worker never read");
    again.close();
}

#[wasm_bindgen_test]
async fn a_lazy_context_reads_its_queries_from_the_indexes_on_disk() {
    use marksync::query::{Dir, Filter, IndexDef, Order, Pred, Query};
    let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
    let name = unique("lazy-query");
    let indexes = vec![IndexDef { table: "sets".into(), fields: vec!["reps".into()] }];
    let config = Config { indexes: indexes.clone(), ..Config::default() };
    let tab = Client::open(&name, memory(&server), config.clone(), false, true, None, false).await.unwrap();
    // Several chunks and the log; another device's change; a queued edit.
    let rows: Vec<Edit> = (0..2_100).map(|i| Edit { space: None, table: "sets".into(), row_id: None, fields: set(1 + i % 90) }).collect();
    let named = tab.change_many(rows).await.unwrap();
    tab.sync().await.unwrap();
    tab.store.compact().await.unwrap();
    let other = client(&unique("lazy-query-other"), &server).await;
    other.sync().await.unwrap();
    other.change("sets", &named[100].1, set(95)).await.unwrap();
    other.sync().await.unwrap();
    tab.sync().await.unwrap();
    tab.change("sets", &named[2_000].1, set(96)).await.unwrap();
    tab.change("sets", &named[7].1, set(3)).await.unwrap();
    let queries = [
        Query {
            filters: vec![Filter { field: "reps".into(), preds: vec![Pred::Eq(Value::from(3))] }],
            limit: Some(10),
            ..Query::default()
        },
        Query { order: vec![Order { field: "reps".into(), dir: Dir::Desc }], limit: Some(30), ..Query::default() },
        Query { order: vec![Order { field: "reps".into(), dir: Dir::Asc }], limit: Some(5), ..Query::default() },
        Query { filters: vec![Filter { field: "reps".into(), preds: vec![Pred::Gte(Value::from(88))] }], ..Query::default() },
    ];
    let want: Vec<_> = queries.iter().map(|q| tab.engine.borrow_mut().query("sets", q)).collect();
    let lazy = Client::open(&name, memory(&server), Config { cache_bytes: 1, ..config }, false, false, None, true).await.unwrap();
    assert!(lazy.engine.borrow().entries_on_disk().is_some(), "the store keeps this context's index");
    for (q, want) in queries.iter().zip(&want) {
        let got = lazy.query_on_disk("sets", q).await.unwrap().expect("an index on disk serves it");
        let ids = |rows: &[(RowKey, marksync::protocol::Row)]| {
            rows.iter().map(|(k, r)| (k.row_id.clone(), r.get("reps").cloned())).collect::<Vec<_>>()
        };
        assert_eq!(ids(&got), ids(want), "{q:?}");
        assert!(!got.is_empty(), "{q:?}");
    }
    // Live: a step's few known rows update an answer without a read; a row
    // leaving a full page has it read again; a live query no change touches
    // is not heard.
    type Heard = Rc<RefCell<Vec<Vec<(RowKey, marksync::protocol::Row)>>>>;
    let top = Query { order: vec![Order { field: "reps".into(), dir: Dir::Desc }], limit: Some(5), ..Query::default() };
    let ones = Query { filters: vec![Filter { field: "reps".into(), preds: vec![Pred::Eq(Value::from(1))] }], ..Query::default() };
    let (heard, others): (Heard, Heard) = Default::default();
    let (h, o) = (heard.clone(), others.clone());
    lazy.watch("sets", top.clone(), Rc::new(move |rows| h.borrow_mut().push(rows.to_vec())));
    lazy.watch("sets", ones, Rc::new(move |rows| o.borrow_mut().push(rows.to_vec())));
    let heard_n = |n: usize| {
        let heard = heard.clone();
        async move {
            for _ in 0..300 {
                if heard.borrow().len() >= n {
                    return;
                }
                gloo_timers::future::TimeoutFuture::new(10).await;
            }
            panic!("the live query was not heard {n} times");
        }
    };
    heard_n(1).await;
    // Read afresh: a longer page (never asked before, so never kept) cut to the live query's.
    let longer = Rc::new(std::cell::Cell::new(5));
    let fresh = |q: Query| {
        let (lazy, longer) = (lazy.clone(), longer.clone());
        async move {
            longer.set(longer.get() + 1);
            let mut rows = lazy.query_on_disk("sets", &Query { limit: Some(longer.get()), ..q.clone() }).await.unwrap().unwrap();
            rows.truncate(q.limit.unwrap_or(usize::MAX));
            rows
        }
    };
    let reps = |rows: &[(RowKey, marksync::protocol::Row)]| {
        rows.iter().map(|(k, r)| (k.row_id.clone(), r.get("reps").cloned())).collect::<Vec<_>>()
    };
    let got = reps(&heard.borrow()[0]);
    assert_eq!(got, reps(&fresh(top.clone()).await));
    // The context's first step after its open shows all as changed: both are read again, neither heard.
    lazy.change("sets", &named[6].1, set(4)).await.unwrap();
    gloo_timers::future::TimeoutFuture::new(50).await;
    let before = lazy.live_updates();
    lazy.change("sets", &named[5].1, set(99)).await.unwrap();
    heard_n(2).await;
    assert_eq!(lazy.live_updates(), before + 2, "a new first row: both answers updated without a read");
    let got = reps(&heard.borrow()[1]);
    assert_eq!(got, reps(&fresh(top.clone()).await));
    lazy.change("sets", &named[5].1, set(2)).await.unwrap();
    heard_n(3).await;
    assert_eq!(lazy.live_updates(), before + 3, "a full page that lost a row: read again (the other: updated)");
    let got = reps(&heard.borrow()[2]);
    assert_eq!(got, reps(&fresh(top.clone()).await));
    // Asked again, a query is answered from the answer kept (updated by the steps since).
    let served = lazy.answers_kept_served();
    let again = lazy.query_on_disk("sets", &Query { limit: Some(longer.get()), ..top.clone() }).await.unwrap().unwrap();
    assert_eq!(lazy.answers_kept_served(), served + 1);
    assert_eq!(reps(&again[..5]), reps(&heard.borrow()[2]));
    gloo_timers::future::TimeoutFuture::new(50).await;
    assert_eq!(others.borrow().len(), 1, "no change touched the other live query's answer");
    assert_eq!(heard.borrow().len(), 3);
    lazy.close();
    tab.close();
}
