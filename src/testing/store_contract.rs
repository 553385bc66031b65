//! The contract suite every [`LocalStore`] must pass. Each function takes a
//! way to make an empty store and a way to reopen the same data, so it runs
//! unchanged against [`crate::memory_store::MemoryStore`] natively and IndexedDB in a
//! browser.

use crate::protocol::{Cell, Fields, Mark, Value};
use crate::protocol::{Op, OpId, Row, RowKey};
use crate::store::{LocalStore, Meta, Rejection, Txn};

fn op(device: &str, n: u64, at: u64) -> Op {
    let mut fields = Fields::new();
    fields.insert("reps".into(), Value::Number(n as f64));
    Op {
        op_id: crate::ids::op_id(device, n),
        table: "sets".into(),
        row_id: crate::ids::row_id(device, 1),
        fields,
        at,
        schema: 1,
        space: None,
        seen: None,
    }
}

fn row(at: u64, id: &str) -> Row {
    let mut r = Row::default();
    r.cells.insert("reps".into(), Cell { value: Value::Number(1.0), mark: Mark { at, op_id: OpId::new(id) } });
    r
}

/// Opening an empty store creates the meta record; opening again keeps it.
pub async fn open_creates_meta_once<S: LocalStore>(store: &S) -> Result<(), String> {
    let a = store.open(Meta::fresh("dev-a".into())).await.map_err(|e| e.to_string())?;
    let b = store.open(Meta::fresh("dev-b".into())).await.map_err(|e| e.to_string())?;
    check(a.meta.as_ref().map(|m| m.device_id.as_str()) == Some("dev-a"), "first open stores the fresh meta")?;
    check(b.meta.as_ref().map(|m| m.device_id.as_str()) == Some("dev-a"), "second open keeps the device id")
}

/// A committed step is all there after reopen: meta, base, pending, rejections.
pub async fn commit_then_reopen<S: LocalStore>(store: &S) -> Result<(), String> {
    store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let mut meta = Meta::fresh("dev".into());
    meta.counter = 64;
    meta.cursor = 17;
    meta.clock = crate::clock::Clock { last_at: 30, max_seen_at: 25, ..crate::clock::Clock::default() };
    let key = RowKey::new("sets", "dev-1");
    let rejected = Rejection {
        op: op("dev", 3, 21),
        reason: "reps must be at most 100".into(),
        code: "out_of_range".into(),
        attempts: 1,
        superseded: false,
    };
    let txn = Txn {
        meta: Some(meta.clone()),
        put_base: vec![(key.clone(), row(5, "srv:1"))],
        put_pending: vec![op("dev", 2, 20), op("dev", 1, 10), op("dev", 10, 30)],
        put_rejections: vec![rejected.clone()],
        ..Txn::default()
    };
    store.commit(&txn).await.map_err(|e| e.to_string())?;
    let s = store.open(Meta::fresh("other".into())).await.map_err(|e| e.to_string())?;
    check(s.meta.as_ref() == Some(&meta), "meta survives")?;
    check(crate::replica::base_rows(&s).map_err(|e| e.to_string())? == vec![(key, row(5, "srv:1"))], "base rows survive")?;
    let ats: Vec<u64> = s.pending.iter().map(|o| o.at).collect();
    check(ats == vec![10, 20, 30], "pending ops come back in `at` order (not opId text order)")?;
    check(s.pending[0] == op("dev", 1, 10), "pending ops survive whole")?;
    check(s.rejections == vec![rejected], "rejections survive")
}

/// Deletes remove exactly what they name.
pub async fn deletes<S: LocalStore>(store: &S) -> Result<(), String> {
    store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let r = Rejection { op: op("dev", 5, 50), reason: "r".into(), code: "c".into(), attempts: 1, superseded: false };
    let put = Txn { put_pending: vec![op("dev", 1, 10), op("dev", 2, 20)], put_rejections: vec![r.clone()], ..Txn::default() };
    store.commit(&put).await.map_err(|e| e.to_string())?;
    let del = Txn { delete_pending: vec![10], delete_rejections: vec![r.op.op_id.clone()], ..Txn::default() };
    store.commit(&del).await.map_err(|e| e.to_string())?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    check(s.pending.len() == 1 && s.pending[0].at == 20, "the named pending op is gone, the other stays")?;
    check(s.rejections.is_empty(), "a dismissed rejection is gone")
}

/// A write planned from a meta record another context has since moved
/// ([`LocalStore::write_assuming`]) writes nothing — not its op, not its
/// meta — and says so; planned from the record as stored, it is written.
/// In IndexedDB this proves the abort wins over the commit of the puts
/// queued behind the read.
pub async fn a_write_assuming_a_moved_record_writes_nothing<S: LocalStore>(store: &S) -> Result<(), String> {
    store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let stale = Meta::fresh("dev".into());
    let mut moved = stale.clone();
    moved.counter = 64;
    moved.clock.last_at = 20;
    store.commit(&Txn { meta: Some(moved.clone()), ..Txn::default() }).await.map_err(|e| e.to_string())?;
    let mut planned = stale.clone();
    planned.clock.last_at = 10;
    let txn = Txn { meta: Some(planned), put_pending: vec![op("dev", 1, 10)], ..Txn::default() };
    let wrote = store.write_assuming(true, &stale, &txn).await.map_err(|e| e.to_string())?;
    check(!wrote, "a stale assumption is refused")?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    check(s.pending.is_empty(), "nothing of the refused write is stored")?;
    check(s.meta.as_ref() == Some(&moved), "the stored record is as the other context left it")?;

    let mut planned = moved.clone();
    planned.clock.last_at = 21;
    let txn = Txn { meta: Some(planned.clone()), put_pending: vec![op("dev", 65, 21)], ..Txn::default() };
    let wrote = store.write_assuming(true, &moved, &txn).await.map_err(|e| e.to_string())?;
    check(wrote, "an assumption that holds is written")?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    check(s.pending.len() == 1 && s.pending[0].at == 21, "the op is stored")?;
    check(s.meta.as_ref() == Some(&planned), "and the meta record with it")?;

    // A record of another device (the database cleared and filled again) is never assumed.
    let other = Meta { device_id: "dev2".into(), ..planned.clone() };
    let txn = Txn { meta: Some(other.clone()), put_pending: vec![op("dev2", 1, 30)], ..Txn::default() };
    let wrote = store.write_assuming(true, &other, &txn).await.map_err(|e| e.to_string())?;
    check(!wrote, "another device's record is refused")?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    check(s.pending.len() == 1, "and writes nothing")
}

/// The last `at` taken is the meta record's or the outbox's last key
/// (PROTOCOL §7): a recording writes its op alone, and a planner sees that
/// op's `at` — in [`LocalStore::update`], and in the check of
/// [`LocalStore::write_assuming`] (another context's op queued under the
/// record it assumed refuses the write); and the step that takes ops out
/// of the outbox keeps their largest `at` in the record.
pub async fn the_last_at_taken_is_the_records_or_the_outboxs<S: LocalStore>(store: &S) -> Result<(), String> {
    store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let assumed = Meta::fresh("dev".into());
    // Another context records at 40, without writing the record.
    store.commit(&Txn { put_pending: vec![op("dev", 1, 40)], ..Txn::default() }).await.map_err(|e| e.to_string())?;
    let txn = Txn { put_pending: vec![op("dev", 2, 10)], ..Txn::default() };
    let wrote = store.write_assuming(true, &assumed, &txn).await.map_err(|e| e.to_string())?;
    check(!wrote, "a write planned under another context's queued op is refused")?;
    let mut seen = None;
    store
        .update(true, &mut |stored| {
            seen = Some(stored.clone());
            None
        })
        .await
        .map_err(|e| e.to_string())?;
    check(seen.is_some_and(|m| m.clock.last_at == 40), "a planner sees the outbox's last `at`")?;
    // Planned past it, the write goes in.
    let mut past = assumed.clone();
    past.clock.last_at = 40;
    let txn = Txn { put_pending: vec![op("dev", 3, 41)], ..Txn::default() };
    check(store.write_assuming(true, &past, &txn).await.map_err(|e| e.to_string())?, "a write planned past it is written")?;
    // Both leave the outbox: the record keeps their `at`.
    let txn = Txn { meta: Some(assumed.clone()), delete_pending: vec![40, 41], ..Txn::default() };
    store.commit(&txn).await.map_err(|e| e.to_string())?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    check(s.pending.is_empty(), "the outbox is empty")?;
    check(s.meta.is_some_and(|m| m.clock.last_at == 41), "the record keeps the last `at` taken out of the outbox")
}

/// A base row put twice keeps the second; rows are keyed by (table, rowId).
pub async fn base_rows_are_keyed_by_table_and_row<S: LocalStore>(store: &S) -> Result<(), String> {
    store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let a = RowKey::new("sets", "x");
    let b = RowKey::new("notes", "x");
    let txn = Txn { put_base: vec![(a.clone(), row(1, "s:1")), (b.clone(), row(2, "s:2"))], ..Txn::default() };
    store.commit(&txn).await.map_err(|e| e.to_string())?;
    let txn = Txn { put_base: vec![(a.clone(), row(3, "s:3"))], ..Txn::default() };
    store.commit(&txn).await.map_err(|e| e.to_string())?;
    let s = store.open(Meta::fresh("dev".into())).await.map_err(|e| e.to_string())?;
    let mut got = crate::replica::base_rows(&s).map_err(|e| e.to_string())?;
    got.sort_by(|x, y| x.0.cmp(&y.0));
    check(got == vec![(b, row(2, "s:2")), (a, row(3, "s:3"))], "two tables, same rowId, each kept; latest put wins")
}

/// The engine's own steps — record an op, apply a push's verdicts (one
/// applied, one rejected), apply a pull page — each committed as one txn,
/// come back whole after reopen.
pub async fn engine_steps_survive_reopen<S: LocalStore>(store: &S) -> Result<(), String> {
    use crate::engine::{Config, Engine, Step};
    use crate::memory_server::MemoryServer;
    use crate::schema::Schema;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let snap = store.open(Meta::fresh("dev".into())).await.map_err(|e| err(&e))?;
    let mut engine = Engine::open(snap, Config::default()).map_err(|e| err(&e))?;
    let mut server = MemoryServer::new(Schema::workout());
    // Another device's row, to be pulled.
    let other = crate::workload::set_op("other", 1, 1, 5);
    let req = crate::protocol::PushRequest { attempt_key: "other:a1".into(), batch: vec![other] };
    server.push("u", &req).map_err(|e| e.error.message)?;
    let record = |engine: &mut Engine, fields: Fields, stored: &Meta| {
        let draft = engine.draft("sets", "dev-1", fields).map_err(|e| err(&e))?;
        engine.plan_record(draft, stored, 100).map_err(|e| err(&e))
    };
    let mut full = Fields::new();
    full.insert("exercise".into(), Value::from("squat"));
    full.insert("weightKg".into(), Value::from(80.0));
    full.insert("reps".into(), Value::from(5i64));
    let stored = engine.meta().clone();
    let (txn, rec) = record(&mut engine, full, &stored)?;
    store.commit(&txn).await.map_err(|e| err(&e))?;
    engine.recorded(rec);
    let mut bad = Fields::new();
    bad.insert("reps".into(), Value::from(500i64));
    let stored = txn.meta.clone().ok_or("no meta")?;
    let (txn, rec) = record(&mut engine, bad, &stored)?;
    store.commit(&txn).await.map_err(|e| err(&e))?;
    engine.recorded(rec);
    let (txn, mut step) = engine.start_sync(0);
    store.commit(&txn).await.map_err(|e| err(&e))?;
    loop {
        step = match step {
            Step::Push(req) => {
                let resp = server.push("u", &req).map_err(|e| e.error.message)?;
                check(
                    store.open(Meta::fresh("x".into())).await.map_err(|e| err(&e))?.sync.and_then(|s| s.flight).is_some(),
                    "the attempt going out is stored before the push leaves",
                )?;
                let (txn, next) = engine.on_push_response(resp, 0).ok_or("answer ignored")?;
                store.commit(&txn).await.map_err(|e| err(&e))?;
                next
            }
            Step::Pull(req) => {
                let (txn, next) = engine.on_pull_response(&req, server.pull_spaces("u", &req), 0).ok_or("page ignored")?;
                store.commit(&txn).await.map_err(|e| err(&e))?;
                next
            }
            Step::Done(_) => break,
            other => return Err(format!("unexpected step {other:?}")),
        }
    }
    let again = store.open(Meta::fresh("x".into())).await.map_err(|e| err(&e))?;
    let reopened = Engine::open(again, Config::default()).map_err(|e| err(&e))?;
    check(reopened.pending_len() == 0, "verdicts emptied the stored outbox")?;
    check(reopened.cursor() == engine.cursor() && engine.cursor() == 2, "the cursor was stored with the page")?;
    check(
        reopened.following() == engine.following() && engine.following().personal.as_deref() == Some("~u"),
        "the followed spaces were stored",
    )?;
    check(reopened.all_visible() == engine.all_visible(), "stored base rows = the engine's rows")?;
    check(reopened.all_visible().len() == 2, "own row and the pulled row")?;
    let reasons: Vec<String> = reopened.rejections().map(|r| r.reason.clone()).collect();
    check(reasons == vec!["reps must be at most 100".to_string()], "the rejection was stored with its reason")?;
    check(reopened.meta().counter >= 2 && reopened.meta().clock.last_at >= 101, "counter and clock were stored")
}

/// A store opened lazily answers every row of every span asked
/// (PROTOCOL §7, "The lazy store"): what it reads for a span, under the
/// log it gave at open, is what was committed there — rows of several
/// tables and spaces, one removed, some folded into chunks (`settle`: an
/// IndexedDB compaction) and some still in the log; and the rows of keys
/// with queued ops come with the open.
pub async fn lazy_reads_answer_every_row_of_a_span<S: LocalStore, F: std::future::Future<Output = ()>>(
    store: &S,
    settle: impl Fn() -> F,
) -> Result<(), String> {
    use crate::replica::Packed;
    use crate::store::Want;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    store.open(Meta::fresh("dev".into())).await.map_err(|e| err(&e))?;
    let mut truth: std::collections::BTreeMap<RowKey, Row> = std::collections::BTreeMap::new();
    let mut put = |txn: &mut Txn, k: RowKey, r: Row| {
        if r.is_gone() {
            truth.remove(&k);
        } else {
            truth.insert(k.clone(), r.clone());
        }
        txn.put_base.push((k, r));
    };
    let mut first = Txn::default();
    // Past a chunk's 2,000 rows: the store holds several, and a span meets the next.
    for i in 0..2_100u64 {
        let table = ["notes", "sets", "tags"][(i % 3) as usize];
        let space = if i % 4 == 0 { "gym" } else { "" };
        put(&mut first, RowKey::in_space(space, table, format!("r{:02}", i / 3)), row(i + 1, "srv:1"));
    }
    // Ids IndexedDB orders otherwise than Rust (UTF-16 code units against
    // code points): a read around them must not trust its key order.
    for id in ["r\u{FFFF}", "r\u{1F600}", "r\u{E000}x"] {
        put(&mut first, RowKey::new("sets", id), row(7, "srv:1"));
    }
    store.commit(&first).await.map_err(|e| err(&e))?;
    settle().await;
    let mut later = Txn::default();
    put(&mut later, RowKey::new("sets", "r03"), Row::default());
    put(&mut later, RowKey::new("sets", "r99"), row(90, "srv:2"));
    put(&mut later, RowKey::new("aa", "first"), row(91, "srv:2"));
    later.put_pending.push(op("dev", 5, 100));
    store.commit(&later).await.map_err(|e| err(&e))?;
    let snap = store.open(Meta::fresh("x".into())).await.map_err(|e| err(&e))?;
    check(snap.lazy && snap.base_chunks.is_empty(), "a lazy store reads no chunk at open")?;
    check(snap.more_on_disk, "and says it holds rows besides its log")?;
    let queued = Packed::lazy(snap.provided.clone(), snap.base.clone()).map_err(|e| err(&e))?;
    check(queued.covers(&Want::row(&snap.pending[0].place())), "the row of a queued op comes with the open")?;
    let wants = [
        Want::row(&RowKey::new("sets", "r01")),
        Want::row(&RowKey::new("sets", "r03")),
        Want::row(&RowKey::new("zz", "none")),
        Want::row(&RowKey::new("", "")),
        Want::named("sets", "r04"),
        Want::named("notes", "r00"),
        Want::named("sets", "r350"),
        Want { from: RowKey::new("notes", "r600"), to: Some(RowKey::new("sets", "r10")) },
        Want::table("sets"),
        Want::table("tags"),
        Want::table("nothing"),
        Want::row(&RowKey::new("sets", "r\u{1F600}")),
        Want::named("sets", "r\u{FFFF}"),
        Want { from: RowKey::new("sets", "r\u{E000}"), to: Some(RowKey::new("sets", "r\u{10000}")) },
        Want::all(),
    ];
    // Many at once (a store may read them otherwise than a few).
    let many: Vec<Want> = wants.iter().chain(wants.iter()).cloned().collect();
    let joined = Packed::lazy(store.read_base(&many).await.map_err(|e| err(&e))?, snap.base.clone()).map_err(|e| err(&e))?;
    for w in &wants {
        let want: Vec<(RowKey, Row)> = truth.iter().filter(|(k, _)| w.holds(k)).map(|(k, r)| (k.clone(), r.clone())).collect();
        check(joined.covers(w), &format!("what is read for {} wants covers {w:?}", many.len()))?;
        let got: Vec<(RowKey, Row)> =
            joined.range_from(&w.from).take_while(|(k, _)| w.holds(k)).filter_map(|(k, f)| Some((k, f.row()?))).collect();
        check(got == want, &format!("the rows read for {w:?} among {} wants are the rows committed there", many.len()))?;
    }
    // Each span read alone, and all of them into one base, read only where
    // it does not already cover (what it says it covers must hold).
    let mut held = Packed::lazy(Vec::new(), snap.base.clone()).map_err(|e| err(&e))?;
    for w in wants {
        let read = store.read_base(std::slice::from_ref(&w)).await.map_err(|e| err(&e))?;
        if !held.covers(&w) {
            for p in read.clone() {
                held.provide(p).map_err(|e| err(&e))?;
            }
        }
        let alone = Packed::lazy(read, snap.base.clone()).map_err(|e| err(&e))?;
        let want: Vec<(RowKey, Row)> = truth.iter().filter(|(k, _)| w.holds(k)).map(|(k, r)| (k.clone(), r.clone())).collect();
        for (base, how) in [(&alone, "alone"), (&held, "with the spans read before")] {
            check(base.covers(&w), &format!("what is read for {w:?} covers it ({how})"))?;
            let got: Vec<(RowKey, Row)> =
                base.range_from(&w.from).take_while(|(k, _)| w.holds(k)).filter_map(|(k, f)| Some((k, f.row()?))).collect();
            check(got == want, &format!("the rows read for {w:?} are the rows committed there ({how})"))?;
        }
    }
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("store contract broken: {what}"))
    }
}

/// Index entries follow the base rows (PROTOCOL §7, "Indexes on disk"):
/// built from every stored row when asked for, then kept by each step that
/// writes rows, read back in order and from the end, and still there after
/// a reopen. `compact` folds what was written into the store's chunks, if
/// it keeps any: rows are then read back from both places.
pub async fn index_entries_follow_the_base_rows<S: LocalStore, F: std::future::Future<Output = ()>>(
    store: &S,
    compact: impl Fn() -> F,
) -> Result<(), String> {
    use crate::index_def::{EntriesFor, EntryRange};
    use crate::query::disk::entry;
    use crate::query::IndexDef;
    let err = |e: crate::store::StoreError| e.to_string();
    let set = |exercise: &str, at: u64| {
        let mut r = Row::default();
        r.cells.insert("exercise".into(), Cell { value: Value::from(exercise), mark: Mark { at, op_id: OpId::new("srv:1") } });
        r
    };
    store.open(Meta::fresh("dev".into())).await.map_err(err)?;
    let (a, b, c) = (RowKey::new("sets", "a"), RowKey::new("sets", "b"), RowKey::in_space("s1", "sets", "c"));
    let note = RowKey::new("notes", "n");
    let txn = Txn {
        put_base: vec![
            (a.clone(), set("squat", 1)),
            (b.clone(), set("bench", 2)),
            (c.clone(), set("squat", 3)),
            (note.clone(), set("x", 4)),
        ],
        ..Txn::default()
    };
    store.commit(&txn).await.map_err(err)?;
    compact().await;
    let def = IndexDef { table: "sets".into(), fields: vec!["exercise".into()] };
    let kept = EntriesFor { defs: vec![def.clone()], app_schema: 1, defaults_shown: true };
    let all = EntryRange { index: def.id(), from: Vec::new(), to: None, reverse: false, limit: usize::MAX };
    let want = |rows: &[(&RowKey, Row)]| {
        let mut v: Vec<Vec<u8>> = rows.iter().filter_map(|(k, r)| entry(&def, k, Some(r))).collect();
        v.sort();
        v
    };
    store.commit(&Txn { entries_for: Some(kept.clone()), ..Txn::default() }).await.map_err(err)?;
    let got = store.read_entries(&all).await.map_err(err)?;
    check(
        got == want(&[(&a, set("squat", 1)), (&b, set("bench", 2)), (&c, set("squat", 3))]),
        "built from every stored row of the table",
    )?;
    // One step: a row changes its value, one goes, one is put twice.
    let d = RowKey::new("sets", "d");
    let txn = Txn {
        put_base: vec![
            (a.clone(), set("deadlift", 5)),
            (b.clone(), Row::default()),
            (d.clone(), set("row", 6)),
            (d.clone(), set("press", 7)),
        ],
        ..Txn::default()
    };
    store.commit(&txn).await.map_err(err)?;
    let then = want(&[(&a, set("deadlift", 5)), (&c, set("squat", 3)), (&d, set("press", 7))]);
    check(store.read_entries(&all).await.map_err(err)? == then, "each step keeps them: changed, gone, put twice")?;
    // The next step's rows as the last step wrote them (not yet compacted).
    store
        .commit(&Txn { put_base: vec![(d.clone(), set("curl", 8)), (c.clone(), set("squat", 9))], ..Txn::default() })
        .await
        .map_err(err)?;
    let now = want(&[(&a, set("deadlift", 5)), (&c, set("squat", 9)), (&d, set("curl", 8))]);
    check(store.read_entries(&all).await.map_err(err)? == now, "a row the last step wrote")?;
    let last = EntryRange { reverse: true, limit: 1, ..all.clone() };
    check(store.read_entries(&last).await.map_err(err)? == now[now.len() - 1..], "read from the end")?;
    let back = |limit, to: Option<&Vec<u8>>| EntryRange { reverse: true, limit, to: to.cloned(), ..all.clone() };
    let desc = |from: usize, to: usize| now[from..to].iter().rev().cloned().collect::<Vec<_>>();
    check(store.read_entries(&back(2, None)).await.map_err(err)? == desc(1, 3), "a page from the end, newest first")?;
    check(store.read_entries(&back(9, None)).await.map_err(err)? == desc(0, 3), "a page longer than the range")?;
    check(store.read_entries(&back(1, Some(&now[2]))).await.map_err(err)? == desc(1, 2), "from the end of a range")?;
    check(store.read_entries(&back(5, Some(&now[0]))).await.map_err(err)?.is_empty(), "an empty range")?;
    let from = EntryRange { from: now[1].clone(), to: Some(now[2].clone()), ..all.clone() };
    check(store.read_entries(&from).await.map_err(err)? == now[1..2], "a range: from included, to not")?;
    let other = EntryRange { index: IndexDef { table: "sets".into(), fields: vec!["reps".into()] }.id(), ..all.clone() };
    check(store.read_entries(&other).await.map_err(err)?.is_empty(), "an index not kept has no entries")?;
    let snap = store.open(Meta::fresh("dev".into())).await.map_err(err)?;
    check(snap.entries_for == Some(kept), "what is kept is read at open")?;
    check(store.read_entries(&all).await.map_err(err)? == now, "and survives a reopen")
}
