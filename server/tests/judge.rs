//! PROTOCOL §3, §4 and §6 over real HTTP, on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use marksync::protocol::{Op, OpId, Value as V};
use serde_json::{json, Value};

/// §3: three identical pushes → one row, one seq; the 2nd and 3rd are `duplicate`.
async fn three_identical_pushes_make_one_row_and_no_new_seq(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let batch = [full("d:1", "d-1", 10, 5)];
    let body = json!({"attemptKey": "d:a1", "batch": batch}).to_string();
    let mut got = Vec::new();
    for _ in 0..3 {
        let (status, resp) = t.push_raw("u", body.clone()).await;
        assert_eq!(status, 200, "{resp}");
        assert_eq!(resp["attemptKey"], "d:a1");
        got.push(resp["verdicts"][0]["status"].as_str().unwrap().to_owned());
    }
    assert_eq!(got, ["applied", "duplicate", "duplicate"]);
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 1, rows: 1, head: 1 });
    let changes = t.pull_all("u").await;
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["seq"], 1);
    t.stop().await;
}
both!(three_identical_pushes_make_one_row_and_no_new_seq);

/// §3: a rejected op replayed gets the same `rejected`, word for word — never `duplicate`.
async fn a_rejected_op_replayed_is_rejected_word_for_word(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let first = t.push_ok("u", &[full("d:1", "d-1", 10, 500)]).await;
    assert_eq!(
        first[0],
        json!({"opId": "d:1", "status": "rejected", "reason": "reps must be at most 100", "code": "out_of_range", "row": null})
    );
    let again = t.push_ok("u", &[full("d:1", "d-1", 10, 500)]).await;
    assert_eq!(again, first);
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 1, rows: 0, head: 0 });
    t.stop().await;
}
both!(a_rejected_op_replayed_is_rejected_word_for_word);

/// §3 remember → write: after a restart with a relaxed rule, the replay of an op
/// rejected under the old rule is still rejected, and writes no row and no seq.
async fn a_rejected_op_replayed_after_a_relaxing_release_stays_rejected(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    // d:0 makes a row that exists, so the rejection carries it.
    t.push_ok("u", &[full("d:0", "d-1", 5, 5)]).await;
    let first = t.push_ok("u", &[full("d:1", "d-1", 10, 150)]).await;
    assert_eq!(first[0]["status"], "rejected");
    t.stop().await;

    let mut relaxed = config(&database);
    relaxed.schema_value = Some(relaxed_schema());
    let t = TestServer::start(relaxed).await;
    // The rule is relaxed now: a fresh op with reps 150 passes…
    assert_eq!(statuses(&t.push_ok("u", &[full("e:1", "e-1", 10, 150)]).await), ["applied"]);
    let before = t.counts("u").await;
    // …but the replay of d:1 is answered from memory.
    let again = t.push_ok("u", &[full("d:1", "d-1", 10, 150)]).await;
    assert_eq!(again, first, "same rejection, word for word, same row");
    assert_eq!(t.counts("u").await, before, "no row, no seq, no verdict written");
    let rows = t.pull_all("u").await;
    let d1 = rows.iter().find(|c| c["rowId"] == "d-1").unwrap();
    assert_eq!(d1["fields"]["reps"], 5);
    t.stop().await;
    drop_database(&database).await;
}
both!(a_rejected_op_replayed_after_a_relaxing_release_stays_rejected);

/// The sabotaged judge ("write → remember") gets the previous test wrong: this
/// proves that test can fail. It is the broken order PROTOCOL §3 warns about.
async fn the_write_before_remember_sabotage_is_caught(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    assert_eq!(t.push_ok("u", &[full("d:1", "d-1", 10, 150)]).await[0]["status"], "rejected");
    t.stop().await;
    let mut broken = config(&database);
    broken.schema_value = Some(relaxed_schema());
    broken.sabotage = marksync_server::Sabotage::WriteBeforeRemember;
    let t = TestServer::start(broken).await;
    let again = t.push_ok("u", &[full("d:1", "d-1", 10, 150)]).await;
    assert_eq!(again[0]["status"], "applied", "the broken order answers differently");
    assert_eq!(t.counts("u").await.rows, 1, "and writes the row the user was told was refused");
    t.stop().await;
    drop_database(&database).await;
}
both!(the_write_before_remember_sabotage_is_caught);

/// §3 lock: two copies of one batch sent at once are judged one after the
/// other; the second gets duplicate/rejected for every op; never two pushes
/// of one user inside the lock at once.
async fn two_copies_of_one_batch_sent_at_once_are_judged_one_after_the_other(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    // The user exists already (a head row to lock; a first insert would serialise anyway).
    t.push_ok("u", &[full("w:1", "w-1", 1, 5)]).await;
    assert_eq!(t.faults(json!({"delayMs": 300})).await, 200);
    let batch: Vec<Value> = (0..20)
        .map(|i| {
            if i % 5 == 4 {
                full(&format!("d:{i}"), &format!("d-{i}"), 10, 0)
            } else {
                full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)
            }
        })
        .collect();
    let (a, b2) = tokio::join!(t.push("u", &batch), t.push("u", &batch));
    assert_eq!((a.0, b2.0), (200, 200));
    let (va, vb) = (a.1["verdicts"].as_array().unwrap().clone(), b2.1["verdicts"].as_array().unwrap().clone());
    let (first, second) = if statuses(&va).contains(&"applied") { (va, vb) } else { (vb, va) };
    for (i, (f, s)) in first.iter().zip(&second).enumerate() {
        if i % 5 == 4 {
            assert_eq!(f["status"], "rejected");
            assert_eq!(s, f, "a rejected op is rejected again, word for word");
        } else {
            assert_eq!((f["status"].as_str(), s["status"].as_str()), (Some("applied"), Some("duplicate")));
        }
    }
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 21, rows: 17, head: 17 });
    assert_eq!(t.metric("marksync_push_concurrent_same_user_max").await, 1.0);
    t.stop().await;
}
both!(two_copies_of_one_batch_sent_at_once_are_judged_one_after_the_other);

/// Many pushes of one user at once: the lock keeps them one at a time, seqs stay dense.
async fn many_concurrent_pushes_of_one_user_never_overlap(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let pushes = (0..8).map(|p| {
        let batch: Vec<Value> = (0..50).map(|i| full(&format!("d{p}:{i}"), &format!("r-{i}"), 100 + p, 5)).collect();
        let t = &t;
        async move { t.push_ok("u", &batch).await }
    });
    let all = futures_util::future::join_all(pushes).await;
    assert!(all.iter().all(|v| statuses(v).iter().all(|s| *s == "applied")));
    let c = t.counts("u").await;
    assert_eq!((c.verdicts, c.rows), (400, 50));
    assert_eq!(t.metric("marksync_push_concurrent_same_user_max").await, 1.0);
    let changes = t.pull_all("u").await;
    assert_eq!(changes.len(), 50);
    assert_eq!(changes.last().unwrap()["seq"].as_i64().unwrap(), c.head);
    t.stop().await;
}
both!(many_concurrent_pushes_of_one_user_never_overlap);

/// §3: verdict memory keys on (user, opId): the same opIds from two users are
/// judged apart, and each user sees only their own rows.
async fn the_same_op_ids_from_two_users_are_judged_apart(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let batch = [full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 500)];
    let alice = t.push_ok("alice", &batch).await;
    let bob = t.push_ok("bob", &[full("d:1", "d-1", 10, 7), full("d:2", "d-2", 10, 7)]).await;
    assert_eq!(statuses(&alice), ["applied", "rejected"]);
    assert_eq!(statuses(&bob), ["applied", "applied"], "bob's d:2 is not alice's rejected d:2");
    let a = t.pull_all("alice").await;
    let b_rows = t.pull_all("bob").await;
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["fields"]["reps"], 5);
    assert_eq!(b_rows.len(), 2);
    assert!(b_rows.iter().all(|c| c["fields"]["reps"] == 7));
    assert!(t.pull_all("carol").await.is_empty());
    t.stop().await;
}
both!(the_same_op_ids_from_two_users_are_judged_apart);

/// §3: at most 1000 ops are judged per push; the rest wait for the next push.
async fn a_push_of_1200_ops_gets_1000_verdicts(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let batch: Vec<Value> = (0..1200).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
    let v = t.push_ok("u", &batch).await;
    assert_eq!(v.len(), 1000);
    assert_eq!(v[999]["opId"], "d:999");
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 1000, rows: 1000, head: 1000 });
    let v = t.push_ok("u", &batch[1000..]).await;
    assert_eq!(v.len(), 200);
    assert_eq!(t.counts("u").await.head, 1200);
    t.stop().await;
}
both!(a_push_of_1200_ops_gets_1000_verdicts);

/// §5: `schema_too_new` when the first op is too new (409, nothing written);
/// a too-new op later in the batch stops judging there.
async fn schema_too_new_first_fails_later_stops(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let mut newer = full("d:2", "d-2", 10, 5);
    newer["schema"] = json!(2);
    let (status, body) = t.push("u", std::slice::from_ref(&newer)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "schema_too_new");
    assert_eq!(t.counts("u").await, marksync_server::store::Counts::default());
    let v = t.push_ok("u", &[full("d:1", "d-1", 10, 5), newer, full("d:3", "d-3", 10, 5)]).await;
    assert_eq!(v.len(), 1, "judged the ops before the too-new one, then stopped");
    assert_eq!(v[0]["opId"], "d:1");
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 1, rows: 1, head: 1 });
    t.stop().await;
}
both!(schema_too_new_first_fails_later_stops);

/// §4: pages of 10 over 25 rows, each row once at its latest seq, seq order.
async fn pull_pages_with_limit_10_over_25_rows(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let batch: Vec<Value> = (0..25).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
    t.push_ok("u", &batch).await;
    t.push_ok("u", &[op("d:99", "d-0", 11, json!({"reps": 6}))]).await;
    let (mut cursor, mut seqs, mut pages) = (0u64, Vec::new(), 0);
    loop {
        let (status, page) = t.pull_raw("u", &format!("cursor={cursor}&limit=10")).await;
        assert_eq!(status, 200);
        pages += 1;
        let changes = page["changes"].as_array().unwrap();
        assert!(changes.len() <= 10);
        seqs.extend(changes.iter().map(|c| c["seq"].as_u64().unwrap()));
        cursor = page["cursor"].as_u64().unwrap();
        if !page["hasMore"].as_bool().unwrap() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seqs.len(), 25, "d-0 once, at its latest seq");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(seqs.last(), Some(&26));
    let (_, mut empty) = t.pull_raw("u", &format!("cursor={cursor}")).await;
    let now = empty.as_object_mut().unwrap().remove("now");
    assert!(now.and_then(|n| n.as_u64()).is_some_and(|n| n > 1_700_000_000_000), "the server's clock, in ms");
    let tag = empty.as_object_mut().unwrap().remove("schemaTag");
    assert!(tag.and_then(|t| t.as_str().map(|t| t.starts_with("\"1-"))).unwrap_or(false), "the schema's ETag");
    assert_eq!(empty, json!({"changes": [], "cursor": cursor, "hasMore": false, "schemaVersion": 1}));
    assert_eq!(t.metric("marksync_pulled_rows_total").await, 25.0);
    t.stop().await;
}
both!(pull_pages_with_limit_10_over_25_rows);

/// §6: a delete travels as a tombstone; a restore too.
async fn a_tombstone_travels(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    let (_, page) = t.pull_raw("u", "cursor=0").await;
    let cursor = page["cursor"].as_u64().unwrap();
    assert_eq!(statuses(&t.push_ok("u", &[op("e:1", "d-1", 20, json!({"_deleted": true}))]).await), ["applied"]);
    let (_, page) = t.pull_raw("u", &format!("cursor={cursor}")).await;
    let c = &page["changes"][0];
    assert_eq!((c["rowId"].as_str(), &c["fields"]["_deleted"]), (Some("d-1"), &json!(true)));
    assert_eq!(c["fields"]["reps"], 5, "the row is kept");
    assert_eq!(c["marks"]["_deleted"], json!({"at": 20, "opId": "e:1"}));
    // A tombstone of a row the server never saw is valid too.
    assert_eq!(statuses(&t.push_ok("u", &[op("e:2", "x-1", 20, json!({"_deleted": true}))]).await), ["applied"]);
    // Restore.
    t.push_ok("u", &[op("e:3", "d-1", 30, json!({"_deleted": false}))]).await;
    let rows = t.pull_all("u").await;
    let d1 = rows.iter().find(|c| c["rowId"] == "d-1").unwrap();
    assert_eq!(d1["fields"]["_deleted"], false);
    t.stop().await;
}
both!(a_tombstone_travels);

/// §2/§4: seq, cursor and `at` leave as JSON numbers, even at 2^53-1.
async fn seq_and_at_are_json_numbers(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    // 2^53-1 is far ahead of any real clock: this test turns the bound off.
    let mut c = config(&database);
    c.max_future_ms = 0;
    let t = TestServer::start(c).await.owning_database();
    let max = (1u64 << 53) - 1;
    t.push_ok("u", &[full("d:1", "d-1", max, 5)]).await;
    let r = t
        .http
        .get(t.url("/v1/pull?cursor=0"))
        .header("authorization", "Bearer dev:u")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(r.contains(r#""at":9007199254740991"#), "{r}");
    assert!(r.contains(r#""seq":1"#), "{r}");
    assert!(r.contains(r#""cursor":1"#), "{r}");
    assert!(r.contains(r#""weightKg":80"#), "{r}");
    let v: Value = serde_json::from_str(&r).unwrap();
    assert!(v["changes"][0]["seq"].is_u64() && v["cursor"].is_u64());
    assert_eq!(v["changes"][0]["marks"]["reps"]["at"].as_u64(), Some(max));
    t.stop().await;
}
both!(seq_and_at_are_json_numbers);

/// §1 the collation trap: equal `at`, opIds "a:1" and "B:1". The protocol (byte
/// order) says "a:1" is newer; an en_US collation would say "B:1". Whatever
/// order they arrive in, the row ends as the core's merge says.
async fn the_collation_trap_resolves_as_the_core_says(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let a = op("a:1", "r-1", 7, json!({"exercise": "from a", "weightKg": 1, "reps": 1}));
    let big_b = op("B:1", "r-1", 7, json!({"exercise": "from B", "weightKg": 2, "reps": 2}));
    // The same contest on a second row, arriving in the other order (opIds are unique per op).
    let a2 = op("a:2", "r-2", 7, json!({"exercise": "from a", "weightKg": 1, "reps": 1}));
    let big_b2 = op("B:2", "r-2", 7, json!({"exercise": "from B", "weightKg": 2, "reps": 2}));
    t.push_ok("u", &[a.clone(), big_b.clone()]).await;
    t.push_ok("u", std::slice::from_ref(&big_b2)).await;
    t.push_ok("u", std::slice::from_ref(&a2)).await;
    // What the core says.
    let mut want = marksync::protocol::Row::default();
    for o in [&big_b, &a] {
        let o: Op = serde_json::from_value(o.clone()).unwrap();
        marksync::order::merge(&mut want, &o);
    }
    assert_eq!(want.get("exercise"), Some(&V::String("from a".into())));
    assert_eq!(want.cells.get("reps").unwrap().mark.op_id, OpId::new("a:1"));
    let rows = t.pull_all("u").await;
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["fields"], json!({"exercise": "from a", "weightKg": 1, "reps": 1}), "{r}");
        assert!(r["marks"]["reps"]["opId"].as_str().unwrap().starts_with("a:"), "{r}");
    }
    if b == Backend::Postgres {
        // Show the trap is real on this database: its collation orders the other way.
        let url = std::env::var("MARKSYNC_TEST_POSTGRES_URL").unwrap();
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let (collate, a_first): (String, bool) = sqlx::query_as(
            "SELECT datcollate::text, 'a:1' < 'B:1' FROM pg_database WHERE datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        eprintln!("postgres collation {collate}: 'a:1' < 'B:1' is {a_first}");
        if collate.starts_with("en_US") {
            assert!(a_first, "en_US sorts a:1 before B:1, the opposite of the protocol");
        }
    }
    t.stop().await;
}
both!(the_collation_trap_resolves_as_the_core_says);

/// §3: an op whose every field loses is `applied`, gets no seq, writes nothing.
async fn an_op_whose_fields_all_lose_is_applied_without_a_seq(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("u", &[full("d:2", "d-1", 20, 5)]).await;
    let v = t.push_ok("u", &[op("e:1", "d-1", 10, json!({"reps": 500}))]).await;
    assert_eq!(statuses(&v), ["applied"], "no validation when nothing moved");
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 2, rows: 1, head: 1 });
    t.stop().await;
}
both!(an_op_whose_fields_all_lose_is_applied_without_a_seq);

/// §3: the row after the op is validated, and a rejection carries the current row.
async fn a_partial_op_is_validated_against_the_row_after_it(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    let v = t
        .push_ok(
            "u",
            &[
                op("d:2", "d-1", 11, json!({"reps": 6})),
                op("d:3", "d-2", 11, json!({"reps": 6})),
                op("d:4", "d-1", 12, json!({"reps": 0})),
            ],
        )
        .await;
    assert_eq!(statuses(&v), ["applied", "rejected", "rejected"]);
    assert_eq!(v[1]["code"], "missing_fields");
    assert_eq!(v[1]["reason"], "missing fields: exercise, weightKg");
    assert_eq!(v[1]["row"], Value::Null);
    assert_eq!(v[2]["row"]["fields"]["reps"], 6, "the current row, after d:2");
    assert_eq!(
        (&v[2]["row"]["marks"]["reps"]["at"], &v[2]["row"]["marks"]["reps"]["opId"]),
        (&json!(11), &json!("d:2"))
    );
    t.stop().await;
}
both!(a_partial_op_is_validated_against_the_row_after_it);

/// A PostgreSQL server whose pushes take no lock (deliberately broken), user
/// `u` with one row, and every push holding 400 ms between its loads and its
/// writes, so that pushes sent together (or 50 ms apart) overlap even on a
/// loaded machine. None without PostgreSQL.
async fn without_the_lock() -> Option<TestServer> {
    let database = fresh_database(Backend::Postgres).await?;
    let mut c = config(&database);
    c.sabotage = marksync_server::Sabotage::NoLock;
    let t = TestServer::start(c).await.owning_database();
    t.push_ok("u", &[full("w:1", "w-1", 1, 5)]).await;
    assert_eq!(t.faults(json!({"delayMs": 400})).await, 200);
    Some(t)
}

/// Without the lock (Postgres, deliberately broken) pushes of one user overlap —
/// and the verdict insert still catches it: fewer rows come back than were
/// sent, the push is rolled back and judged again, and every op is still
/// answered once. This runs the "judge again" path, which the lock otherwise
/// never lets happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_conflicting_verdicts_are_judged_again() {
    let Some(t) = without_the_lock().await else { return };
    let batch: Vec<Value> = (0..20).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
    let answers = futures_util::future::join_all((0..3).map(|_| t.push("u", &batch))).await;
    let mut applied = 0;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        let s = statuses(body["verdicts"].as_array().unwrap());
        assert!(s.iter().all(|x| *x == s[0]), "a whole batch is applied or duplicate: {s:?}");
        applied += usize::from(s[0] == "applied");
    }
    assert_eq!(applied, 1, "exactly one copy applied");
    assert_eq!(t.counts("u").await, marksync_server::store::Counts { verdicts: 21, rows: 21, head: 21 });
    assert!(t.metric("marksync_push_concurrent_same_user_max").await >= 2.0, "the pushes did overlap");
    assert!(t.metric("marksync_push_judged_again_total").await >= 1.0, "and were judged again");
    t.stop().await;
}

/// Without the lock (PostgreSQL, deliberately broken), two pushes that make
/// the same new rows with different ops overlap: the later one's insert meets
/// the rows the earlier one stored, and it is judged again against them, so
/// the rows merge by marks and no edit is lost. (When rows were upserted, the
/// later push's older edits overwrote the newer ones here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_rows_made_twice_are_judged_again() {
    let Some(t) = without_the_lock().await else { return };
    the_newer_edits_stay_when_an_older_push_writes_last(t).await;
}

/// Without the lock (PostgreSQL, deliberately broken), two pushes that edit
/// the same stored rows with different ops overlap: the later one's update
/// does not find the rows where its load saw them (the earlier push rewrote
/// them), and it is judged again against them, so the newer edits stay.
/// (When stored rows were updated by key, the later push's older edits
/// overwrote the newer ones here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_rows_rewritten_meanwhile_are_judged_again() {
    let Some(t) = without_the_lock().await else { return };
    let stored: Vec<Value> = (0..10).map(|i| full(&format!("s:{i}"), &format!("r-{i}"), 5, 1)).collect();
    t.push_ok("u", &stored).await;
    the_newer_edits_stay_when_an_older_push_writes_last(t).await;
}

/// Pushes newer edits of rows `r-0`…`r-9` and, 50 ms later, older ones
/// (the older push writes last): both are applied, the newer edits stay, and
/// the older push was judged again.
async fn the_newer_edits_stay_when_an_older_push_writes_last(t: TestServer) {
    let newer: Vec<Value> = (0..10).map(|i| full(&format!("n:{i}"), &format!("r-{i}"), 20, 7)).collect();
    let older: Vec<Value> = (0..10).map(|i| full(&format!("o:{i}"), &format!("r-{i}"), 10, 3)).collect();
    let later = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        t.push("u", &older).await
    };
    let (a, b) = tokio::join!(t.push("u", &newer), later);
    for (status, body) in [&a, &b] {
        assert_eq!(*status, 200, "{body}");
        assert!(statuses(body["verdicts"].as_array().unwrap()).iter().all(|s| *s == "applied"), "{body}");
    }
    let rows = t.pull_all("u").await;
    for i in 0..10 {
        let row = rows.iter().find(|r| r["rowId"] == format!("r-{i}")).unwrap();
        assert_eq!(row["fields"]["reps"], 7, "the newer edit stays: {row}");
    }
    assert!(t.metric("marksync_push_judged_again_total").await >= 1.0, "the older push was judged again");
    t.stop().await;
}

/// `POST /v1/verdicts` recalls, read-only, what was judged: `applied` (also
/// after a duplicate), `rejected` word for word as the push said it with the
/// current row, `unknown` for ops never judged and for another user's ops.
/// It writes nothing and takes no seq; bad shapes are 400, no token 401.
async fn verdicts_recall_what_was_judged_and_write_nothing(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let (status, pushed) = t
        .push("u", &[full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 500), op("d:3", "d-1", 11, json!({"reps": 0}))])
        .await;
    assert_eq!(status, 200, "{pushed}");
    assert!(pushed["now"].as_u64().is_some_and(|n| n > 1_700_000_000_000), "push answers carry the server's clock");
    let pushed = pushed["verdicts"].as_array().unwrap().clone();
    assert_eq!(statuses(&pushed), ["applied", "rejected", "rejected"]);
    assert_eq!(pushed[2]["row"]["fields"]["reps"], 5, "the rejection carries the current row");
    assert_eq!(statuses(&t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await), ["duplicate"]);
    t.push_ok("v", &[full("v:1", "v-1", 10, 5)]).await;
    let (before_u, before_v) = (t.counts("u").await, t.counts("v").await);

    let got = t.verdicts_ok("u", &["d:1", "d:2", "d:3", "d:404", "v:1"]).await;
    assert_eq!(got[0], json!({"opId": "d:1", "status": "applied"}));
    assert_eq!(got[1], pushed[1], "rejected, word for word");
    assert_eq!(got[2], pushed[2], "rejected, word for word, with the current row");
    assert_eq!(got[3], json!({"opId": "d:404", "status": "unknown"}));
    assert_eq!(got[4], json!({"opId": "v:1", "status": "unknown"}), "another user's op is unknown");
    assert_eq!(
        t.verdicts_ok("v", &["v:1", "d:1"]).await,
        [json!({"opId": "v:1", "status": "applied"}), json!({"opId": "d:1", "status": "unknown"})]
    );

    let many: Vec<String> = (0..1001).map(|i| format!("d:{i}")).collect();
    for (what, raw) in [
        ("no opIds", json!({"opIds": []}).to_string()),
        ("1001 opIds", json!({"opIds": many}).to_string()),
        ("a non-ASCII opId", json!({"opIds": ["d:1", "é:1"]}).to_string()),
        ("an opId not a string", json!({"opIds": [1]}).to_string()),
        ("a missing opIds", json!({}).to_string()),
        ("an unknown key", json!({"opIds": ["d:1"], "x": 1}).to_string()),
        ("not JSON", "{\"opIds\": [".into()),
    ] {
        let (status, resp) = t.verdicts_raw("u", raw).await;
        assert_eq!((status, resp["error"]["code"].as_str()), (400, Some("bad_request")), "{what}: {resp}");
    }
    let no_token = t.http.post(t.url("/v1/verdicts")).body(json!({"opIds": ["d:1"]}).to_string()).send().await.unwrap();
    assert_eq!(no_token.status().as_u16(), 401);
    assert_eq!((t.counts("u").await, t.counts("v").await), (before_u, before_v), "nothing written, no seq taken");
    assert_eq!(t.counts("w").await, marksync_server::store::Counts::default(), "asking does not create a user");
    t.verdicts_ok("w", &["d:1"]).await;
    assert_eq!(t.counts("w").await, marksync_server::store::Counts::default(), "asking does not create a user");
    t.stop().await;
}
both!(verdicts_recall_what_was_judged_and_write_nothing);

/// An op stamped implausibly far ahead of the server's clock is rejected
/// (`clock_ahead`, naming the bound), remembered, and replayed word for word.
async fn an_op_stamped_too_far_ahead_is_rejected_and_remembered(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let far = full("d:1", "d-1", (1 << 53) - 1, 5);
    let first = t.push_ok("u", std::slice::from_ref(&far)).await;
    assert_eq!(
        (first[0]["status"].as_str(), first[0]["code"].as_str()),
        (Some("rejected"), Some("clock_ahead")),
        "{first:?}"
    );
    let reason = first[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("at 9007199254740991 is more than 86400000 ms ahead of the server's clock ("),
        "{reason}"
    );
    assert!(reason.ends_with("); the device's clock is wrong"), "{reason}");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(t.push_ok("u", &[far]).await, first, "a replay gets the same words, not a new clock");
    assert_eq!(t.verdicts_ok("u", &["d:1"]).await, first);
    assert_eq!(
        statuses(&t.push_ok("u", &[full("d:2", "d-1", 1_700_000_000_000, 5)]).await),
        ["applied"],
        "a plausible clock passes"
    );
    assert_eq!(t.counts("u").await.rows, 1);
    t.stop().await;
}
both!(an_op_stamped_too_far_ahead_is_rejected_and_remembered);

/// Every character a value may hold comes back from the store as it went
/// in — quotes, backslashes, control characters, NUL, line and paragraph
/// separators, characters beyond the BMP (the batches travel to the
/// database packed in JSON, in SQLite unpacked through its binary form).
async fn every_string_survives_the_store_as_it_went_in(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let tricky = "q\"b\\s/n\nt\tnul\u{0}sep\u{2028}\u{2029}é💪\u{7f}\u{1}\\u0041";
    let ops = [
        op("d:1", "d-1", 10, json!({"exercise": tricky, "weightKg": 82.5, "reps": 5})),
        op("d:2", "d-2", 10, json!({"exercise": "squat", "weightKg": 80, "reps": 5})),
    ];
    assert_eq!(statuses(&t.push_ok("u", &ops).await), ["applied", "applied"]);
    // The second row updated: SQLite's upsert and PostgreSQL's update by place.
    let update = op("d:3", "d-2", 11, json!({"exercise": tricky}));
    assert_eq!(statuses(&t.push_ok("u", &[update]).await), ["applied"]);
    let rows = t.pull_all("u").await;
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row["fields"]["exercise"], json!(tricky), "{row}");
    }
    t.stop().await;
}
both!(every_string_survives_the_store_as_it_went_in);
