use super::*;
use crate::attempt::Failure;
use crate::memory_server::MemoryServer;
use crate::protocol::{Fields, Outcome, PushResponse, Value};
use crate::schema::Schema;

/// Small blocks of numbers, so tests cross their edges.
const BLOCK: u64 = 64;

fn engine(dev: &str) -> Engine {
    let snap = Snapshot { meta: Some(Meta::fresh(dev.into())), ..Snapshot::default() };
    Engine::open(snap, Config { id_block: BLOCK, ..Config::default() }).unwrap()
}

fn fields(pairs: &[(&str, Value)]) -> Fields {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn set(reps: i64) -> Fields {
    fields(&[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", reps.into())])
}

/// Records without a store (the meta the engine knows is the stored one).
fn record(e: &mut Engine, row: &str, f: Fields, now: u64) -> Op {
    let d = e.draft("sets", row, f).unwrap();
    let meta = e.meta().clone();
    let (_txn, rec) = e.plan_record(d, &meta, now).unwrap();
    let op = rec.ops[0].clone();
    e.recorded(rec);
    op
}

/// Runs one sync cycle against a memory server, no faults.
fn sync(e: &mut Engine, s: &mut MemoryServer, now: u64) -> SyncReport {
    let mut step = e.start_sync(now).1;
    loop {
        step = match step {
            Step::Push(req) => {
                let resp = s.push("u", &req).unwrap();
                e.on_push_response(resp, now).unwrap().1
            }
            Step::Pull(req) => e.on_pull_response(&req, s.pull_spaces("u", &req), now).unwrap().1,
            Step::Done(r) => return r,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let e = engine("d");
    assert!(matches!(e.draft("Sets", "r", set(1)), Err(EngineError::BadInput(_))));
    let err = e.draft("sets", "r", fields(&[("_x", 1.0.into())])).unwrap_err();
    assert_eq!(err.to_string(), "invalid edit: fields._x: a field name must match [A-Za-z][A-Za-z0-9_]{0,63} (names starting with _ are the protocol's: only _deleted)");
    assert_eq!(e.pending_len(), 0);
    assert_eq!(e.meta().counter, 0);
}

#[test]
fn op_ids_and_row_ids_share_one_counter_and_at_is_monotonic() {
    let mut e = engine("d");
    let a = record(&mut e, "d-x", set(1), 100);
    let b = record(&mut e, "d-x", set(2), 50);
    assert_eq!((a.op_id.as_str(), b.op_id.as_str()), ("d:1", "d:2"));
    assert_eq!((a.at, b.at), (100, 101));
    assert_eq!(e.new_row_id().unwrap(), "d-3");
    assert_eq!(e.meta().counter, BLOCK);
}

#[test]
fn two_engines_on_one_store_never_share_a_number() {
    let mut a = engine("d");
    let mut b = engine("d");
    let mut t = crate::memory_store::Tables { meta: Some(a.meta().clone()), ..Default::default() };
    let mut seen = std::collections::HashSet::new();
    for i in 0..(3 * BLOCK) {
        let e = if i % 3 == 0 { &mut a } else { &mut b };
        let d = e.draft("sets", "r", set(1)).unwrap();
        // Neither hears the other: each plans from the store alone.
        let (txn, rec) = e.plan_record(d, &t.stored_meta().unwrap(), i).unwrap();
        t.apply(&txn);
        assert!(seen.insert(rec.ops[0].op_id.clone()), "number reused");
        assert!(seen.insert(OpId::new(format!("at{}", rec.ops[0].at))), "at reused");
        e.recorded(rec);
    }
}

#[test]
fn a_reservation_that_never_committed_hands_out_nothing_and_no_number_is_reused() {
    let mut e = engine("d");
    let (txn, block) = e.plan_reserve(&e.meta().clone());
    let stored = txn.meta.clone().unwrap();
    e.reserved(block, &stored);
    let mut seen: std::collections::HashSet<String> = (0..BLOCK / 2 + 1).map(|_| e.new_row_id().unwrap()).collect();
    // Half the block used: the next one is planned, and the tab dies before its transaction commits.
    let (_lost, _) = e.plan_reserve(&stored);
    drop(e);
    let snap = Snapshot { meta: Some(stored.clone()), ..Snapshot::default() };
    let mut again = Engine::open(snap, Config { id_block: BLOCK, ..Config::default() }).unwrap();
    let (txn, block) = again.plan_reserve(&stored);
    again.reserved(block, &txn.meta.clone().unwrap());
    let mut stored = txn.meta.clone().unwrap();
    for i in 0..3 * BLOCK {
        let id = match i % 2 {
            0 => {
                if again.ids_left() == 0 {
                    let (txn, block) = again.plan_reserve(&stored);
                    stored = txn.meta.clone().unwrap();
                    again.reserved(block, &stored);
                }
                again.new_row_id().unwrap()
            }
            _ => {
                let d = again.draft_new(None, "sets", set(1)).unwrap();
                let (txn, rec) = again.plan_records(vec![d], &stored, i).unwrap();
                // The record is written when a block is reserved; the op's key holds its `at`.
                stored = txn.meta.clone().unwrap_or(stored).with_queued(Some(rec.ops[0].at));
                let row = rec.ops[0].row_id.clone();
                again.recorded(rec);
                row
            }
        };
        assert!(seen.insert(id.clone()), "{id} handed out twice");
    }
}

#[test]
fn rows_named_in_the_recording_step_take_numbers_of_the_counter() {
    let mut e = engine("d");
    let stored = e.meta().clone();
    let drafts = (0..3).map(|_| e.draft_new(None, "sets", set(1)).unwrap()).collect();
    let (txn, rec) = e.plan_records(drafts, &stored, 10).unwrap();
    let named: Vec<(&str, &str)> = rec.ops.iter().map(|o| (o.row_id.as_str(), o.op_id.as_str())).collect();
    assert_eq!(named, vec![("d-1", "d:2"), ("d-3", "d:4"), ("d-5", "d:6")]);
    assert!(txn.meta.unwrap().counter >= 6);
    e.recorded(rec);
    assert_eq!(e.all_visible().len(), 3);
    assert!(e.draft_new(None, "", set(1)).is_err(), "a bad table is refused before any number is taken");
}

#[test]
fn many_drafts_in_one_step_take_distinct_numbers_across_blocks_and_increasing_ats() {
    let mut a = engine("d");
    let mut b = engine("d");
    let mut t = crate::memory_store::Tables { meta: Some(a.meta().clone()), ..Default::default() };
    let mut seen = std::collections::HashSet::new();
    let mut last_at = 0;
    for (round, n) in [(0u64, 5usize), (1, 3 * BLOCK as usize + 7), (2, 1), (3, BLOCK as usize)] {
        let e = if round % 2 == 0 { &mut a } else { &mut b };
        let drafts = (0..n).map(|_| e.draft("sets", "r", set(1)).unwrap()).collect();
        let (txn, rec) = e.plan_records(drafts, &t.stored_meta().unwrap(), 10).unwrap();
        t.apply(&txn);
        let stored = t.meta.clone().unwrap();
        assert_eq!(txn.put_pending, rec.ops);
        assert_eq!(rec.ops.len(), n);
        for op in &rec.ops {
            assert!(seen.insert(op.op_id.clone()), "number reused: {}", op.op_id.as_str());
            let num: u64 = op.op_id.as_str().rsplit(':').next().unwrap().parse().unwrap();
            assert!(num <= stored.counter, "number {num} beyond the stored counter {}", stored.counter);
            assert!(op.at > last_at, "at not increasing");
            last_at = op.at;
        }
        e.recorded(rec);
    }
    assert_eq!(a.pending_len() + b.pending_len(), 5 + 3 * BLOCK as usize + 7 + 1 + BLOCK as usize);
}

#[test]
fn a_late_answer_to_an_old_attempt_is_ignored_and_changes_nothing() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(first)) = e.start_sync(0) else { panic!() };
    let late = s.push("u", &first).unwrap();
    // The first attempt times out; a new attempt goes out.
    assert!(matches!(e.on_push_failed(&first.attempt_key, Failure::Timeout, 0), Some((_, Step::Wait { .. }))));
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::UnknownOutcome);
    let (_, Step::Push(second)) = e.start_sync(5_000) else { panic!() };
    assert_ne!(first.attempt_key, second.attempt_key);
    assert_eq!(first.batch, second.batch, "same ops, same opIds");
    let before = (e.pending_len(), e.all_visible());
    assert!(e.on_push_response(late, 5_001).is_none());
    assert_eq!((e.pending_len(), e.all_visible()), before);
    assert_eq!(e.metrics().stale_acks_ignored, 1);
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::AwaitingAck);
    let resp = s.push("u", &second).unwrap();
    assert_eq!(resp.verdicts[0].outcome, Outcome::Duplicate);
    e.on_push_response(resp, 5_002).unwrap();
    assert_eq!(e.pending_len(), 0);
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::Synced);
}

#[test]
fn a_rejected_op_disappears_keeps_its_reason_and_the_row_is_rebuilt() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    sync(&mut e, &mut s, 11);
    record(&mut e, "d-1", fields(&[("reps", 500i64.into())]), 20);
    record(&mut e, "d-1", fields(&[("weightKg", 90.0.into())]), 21);
    let key = RowKey::new("sets", "d-1");
    assert_eq!(e.row(&key).unwrap().get("reps"), Some(&Value::Number(500.0)));
    let r = sync(&mut e, &mut s, 22);
    assert_eq!((r.applied, r.rejected), (1, 1));
    let row = e.row(&key).unwrap();
    assert_eq!(row.get("reps"), Some(&Value::Number(5.0)), "the rejected op is not visible");
    assert_eq!(row.get("weightKg"), Some(&Value::Number(90.0)), "the op after it stays");
    let st = e.status(&key);
    assert_eq!((st.phase, st.reason.as_deref()), (Phase::Rejected, Some("reps must be at most 100")));
    let id = e.rejections().next().unwrap().op.op_id.clone();
    assert!(e.dismiss(&id).is_some());
    assert_eq!(e.status(&key).phase, Phase::Synced);
}

#[test]
fn pulled_echoes_change_nothing_and_other_devices_converge() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut a, mut b) = (engine("a"), engine("b"));
    record(&mut a, "a-1", set(5), 10);
    sync(&mut a, &mut s, 11);
    let before = a.all_visible();
    let r = sync(&mut a, &mut s, 12);
    assert_eq!(r.pulled, 0, "cursor already past our own change");
    let mut fresh = engine("a");
    sync(&mut fresh, &mut s, 13);
    assert_eq!(fresh.all_visible(), before);
    sync(&mut b, &mut s, 14);
    assert_eq!(b.all_visible(), a.all_visible());
}

#[test]
fn an_edit_made_after_seeing_a_remote_edit_wins_whatever_the_clocks() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut a, mut b) = (engine("a"), engine("b"));
    record(&mut a, "a-1", set(5), 1_000_000);
    sync(&mut a, &mut s, 0);
    sync(&mut b, &mut s, 0);
    record(&mut b, "a-1", fields(&[("reps", 6i64.into())]), 10); // b's clock is far behind
    sync(&mut b, &mut s, 0);
    sync(&mut a, &mut s, 0);
    assert_eq!(a.row(&RowKey::new("sets", "a-1")).unwrap().get("reps"), Some(&Value::Number(6.0)));
}

#[test]
fn deletes_hide_rows_and_restores_bring_them_back() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut a, mut b) = (engine("a"), engine("b"));
    record(&mut a, "a-1", set(5), 10);
    let d = a.draft_deleted(None, "sets", "a-1", true).unwrap();
    let m = a.meta().clone();
    let (_, rec) = a.plan_record(d, &m, 11).unwrap();
    a.recorded(rec);
    assert!(a.rows("sets").is_empty());
    sync(&mut a, &mut s, 12);
    sync(&mut b, &mut s, 12);
    assert!(b.rows("sets").is_empty());
    assert!(b.all_visible().values().next().unwrap().is_deleted(), "the tombstone travelled");
    let d = b.draft_deleted(None, "sets", "a-1", false).unwrap();
    let m = b.meta().clone();
    let (_, rec) = b.plan_record(d, &m, 13).unwrap();
    b.recorded(rec);
    assert_eq!(b.rows("sets").len(), 1);
}

#[test]
fn failures_back_off_and_auth_requires_recovery() {
    let mut e = engine("d");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let Some((_, Step::Wait { until, .. })) = e.on_push_failed(&req.attempt_key, Failure::Network("offline".into()), 1000) else {
        panic!()
    };
    assert!((1000..=2000).contains(&until));
    let (_, Step::Push(req)) = e.start_sync(until) else { panic!() };
    let step = e.on_push_failed(&req.attempt_key, Failure::Unauthorized("expired".into()), until).unwrap().1;
    assert!(matches!(step, Step::Blocked(ref r) if r.code.as_str() == "unauthorized"));
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::RecoveryRequired);
    assert!(matches!(e.start_sync(0).1, Step::Blocked(_)));
    assert_eq!(e.pending_len(), 1, "nothing lost");
    e.clear_recovery();
    assert!(matches!(e.start_sync(0).1, Step::Push(_)));
}

#[test]
fn payload_too_large_halves_the_batch_sent() {
    let mut e = engine("d");
    for i in 0..10 {
        record(&mut e, &format!("d-{i}"), set(5), 10 + i);
    }
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    assert_eq!(req.batch.len(), 10);
    let too_large = || Failure::PayloadTooLarge("the body is larger than 6000 bytes".into());
    let Some((_, Step::Push(req2))) = e.on_push_failed(&req.attempt_key, too_large(), 0) else { panic!() };
    assert_eq!(req2.batch.len(), 5, "half of what was refused, not of the limit");
    let Some((_, Step::Push(req3))) = e.on_push_failed(&req2.attempt_key, too_large(), 0) else { panic!() };
    assert_eq!(req3.batch.len(), 2);
    assert_eq!(e.pending_len(), 10, "nothing lost");
}

/// A push of one op alone refused as too large (413): no retry can carry
/// it, so it is rejected on the device in the server's words, and the ops
/// behind it go out at once, in whole batches again — the queue and the
/// pulls never wait on it.
#[test]
fn an_op_too_large_alone_is_rejected_in_the_servers_words_and_the_queue_goes_on() {
    let mut e = engine("d");
    let big = record(&mut e, "d-0", set(5), 10);
    for i in 1..4 {
        record(&mut e, &format!("d-{i}"), set(5), 10 + i);
    }
    let words = "the body is larger than 6000 bytes";
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (_, Step::Push(req)) = e.on_push_failed(&req.attempt_key, Failure::PayloadTooLarge(words.into()), 1).unwrap() else { panic!() };
    let (_, Step::Push(req)) = e.on_push_failed(&req.attempt_key, Failure::PayloadTooLarge(words.into()), 2).unwrap() else { panic!() };
    assert_eq!(req.batch.iter().map(|o| &o.op_id).collect::<Vec<_>>(), [&big.op_id]);
    let (txn, Step::Push(rest)) = e.on_push_failed(&req.attempt_key, Failure::PayloadTooLarge(words.into()), 3).unwrap() else {
        panic!("the queue behind it goes on")
    };
    assert_eq!(rest.batch.len(), 3, "whole batches again");
    assert_eq!(txn.delete_pending, [big.at], "it leaves the queue on disk");
    assert_eq!(txn.put_rejections.len(), 1, "its rejection is on disk, for every context");
    let st = e.status(&RowKey::new("sets", "d-0"));
    assert_eq!((st.phase, st.reason.as_deref(), st.code.as_deref()), (Phase::Rejected, Some(words), Some("payload_too_large")));
    assert!(e.recovery().is_none(), "nothing blocks sync");
    // A proxy's 413 says nothing: the reason says what happened.
    let mut e = engine("d");
    record(&mut e, "d-0", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (_, Step::Pull(_)) = e.on_push_failed(&req.attempt_key, Failure::from_http(413, None, None), 1).unwrap() else {
        panic!("the pull goes on")
    };
    let st = e.status(&RowKey::new("sets", "d-0"));
    assert_eq!(st.reason.as_deref(), Some(cycle::TOO_LARGE_UNSAID));
}

/// An op whose earlier attempt may have been judged (no usable answer came)
/// is not rejected on a later 413: the server is asked first; only if it
/// never judged it is it rejected, in the words of the 413.
#[test]
fn an_op_too_large_alone_but_in_doubt_is_asked_about_before_it_is_rejected() {
    let words = "the body is larger than 6000 bytes";
    for recalled in [Recalled::Unknown, Recalled::Applied] {
        let mut e = engine("d");
        let op = record(&mut e, "d-0", set(5), 10);
        let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
        let (_, Step::Wait { until, .. }) = e.on_push_failed(&req.attempt_key, Failure::Timeout, 1).unwrap() else { panic!() };
        let (_, Step::Push(req)) = e.start_sync(until) else { panic!() };
        let (_, Step::Reconcile(asked)) = e.on_push_failed(&req.attempt_key, Failure::PayloadTooLarge(words.into()), until).unwrap() else {
            panic!("in doubt: ask first")
        };
        assert_eq!(asked, std::slice::from_ref(&op.op_id));
        let key = RowKey::new("sets", "d-0");
        assert_eq!(e.status(&key).phase, Phase::UnknownOutcome, "not rejected while the server may hold it");
        let answer =
            VerdictsResponse { verdicts: vec![RememberedVerdict { op_id: op.op_id.clone(), recalled: recalled.clone() }], now: None };
        let (_, Step::Pull(_)) = e.on_verdicts(answer, until + 1).unwrap() else { panic!("then the pull goes on") };
        let st = e.status(&key);
        match recalled {
            Recalled::Unknown => assert_eq!((st.phase, st.reason.as_deref()), (Phase::Rejected, Some(words))),
            _ => assert_eq!(st.phase, Phase::Synced, "applied before: never rejected"),
        }
        assert!(e.recovery().is_none());
    }
}

/// A refusal (a 400: a server older than the app, a wrong endpoint) stops
/// sync — the person's `sync()` learns it — but not for good: it is probed
/// every 5 minutes and at the app's next open, and an answer lifts it.
#[test]
fn a_refusal_stops_sync_until_its_probe_is_answered() {
    let mut e = engine("d");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let refused = Failure::from_http(400, None, None);
    let (_, Step::Blocked(r)) = e.on_push_failed(&req.attempt_key, refused.clone(), 1_000).unwrap() else { panic!() };
    assert_eq!(r.code.as_str(), "refused");
    let probe = e.retry_at().expect("a probe is scheduled");
    assert_eq!(probe, 1_000 + cycle::SCHEMA_PROBE_MS);
    assert!(matches!(e.start_sync(2_000).1, Step::Blocked(_)), "before the probe: nothing is sent");
    assert_eq!(e.retry_at(), Some(probe), "and the probe stays scheduled");
    let (_, Step::Push(req)) = e.start_sync(probe) else { panic!("the probe goes out") };
    let (_, Step::Blocked(_)) = e.on_push_failed(&req.attempt_key, refused, probe).unwrap() else { panic!() };
    assert_eq!(e.retry_at(), Some(probe + cycle::SCHEMA_PROBE_MS), "refused again: the next probe");
    assert!(e.retry_exhausted().is_some(), "the app opened again: probed at once");
    let (_, Step::Push(req)) = e.start_sync(probe + 1) else { panic!() };
    let ok = PushResponse {
        attempt_key: req.attempt_key.clone(),
        verdicts: vec![Verdict { op_id: req.batch[0].op_id.clone(), outcome: Outcome::Applied }],
        now: None,
    };
    let (_, Step::Pull(_)) = e.on_push_response(ok, probe + 2).unwrap() else { panic!() };
    assert!(e.recovery().is_none(), "answered: the stop is lifted");
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::Synced);
}

#[test]
fn empty_answers_are_called_again_at_once_then_backed_off() {
    let mut e = engine("d");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(mut req)) = e.start_sync(0) else { panic!() };
    for _ in 0..MAX_EMPTY_ANSWERS {
        let empty = PushResponse { attempt_key: req.attempt_key.clone(), verdicts: vec![], now: None };
        let Some((_, Step::Push(next))) = e.on_push_response(empty, 0) else { panic!("call again now") };
        req = next;
    }
    let empty = PushResponse { attempt_key: req.attempt_key.clone(), verdicts: vec![], now: None };
    assert!(matches!(e.on_push_response(empty, 0), Some((_, Step::Wait { .. }))));
    assert_eq!(e.pending_len(), 1, "nothing lost");
}

#[test]
fn a_1200_op_queue_drains_in_two_pushes() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    for i in 0..1200 {
        record(&mut e, &format!("d-r{i}"), set(5), 10 + i);
    }
    let mut pushes = 0;
    let mut step = e.start_sync(0).1;
    loop {
        step = match step {
            Step::Push(req) => {
                pushes += 1;
                e.on_push_response(s.push("u", &req).unwrap(), 0).unwrap().1
            }
            Step::Pull(req) => e.on_pull_response(&req, s.pull_spaces("u", &req), 0).unwrap().1,
            Step::Done(_) => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pushes, 2);
    assert_eq!(e.pending_len(), 0);
    assert_eq!(s.rows("u").len(), 1200);
}

/// Two contexts of one database: `a` recorded an edit, `b` heard it.
fn two_contexts_one_queued() -> (Engine, Engine) {
    let (mut a, mut b) = (engine("d"), engine("d"));
    let d = a.draft("sets", "d-1", set(5)).unwrap();
    let m = a.meta().clone();
    let (txn, rec) = a.plan_record(d, &m, 10).unwrap();
    a.recorded(rec);
    b.absorb(&txn);
    (a, b)
}

/// A tab whose own push failed kept saying why in `metrics().lastError`
/// after another context's sync went through and every other context said
/// nothing was wrong.
#[test]
fn a_failure_heard_answered_by_another_context_is_no_longer_told() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut a, mut b) = two_contexts_one_queued();
    let Step::Push(req) = a.start_sync(0).1 else { panic!("a push") };
    let (mut failed, _) =
        a.on_push_failed(&req.attempt_key, Failure::Server { status: 500, message: "internal".into(), retry_after_ms: 0 }, 1).unwrap();
    a.stamp(&mut failed);
    assert!(a.last_failure().is_some());
    b.absorb(&failed);
    let mut step = b.start_sync(2).1;
    loop {
        step = match step {
            Step::Push(req) => {
                let (mut t, st) = b.on_push_response(s.push("u", &req).unwrap(), 3).unwrap();
                b.stamp(&mut t);
                a.absorb(&t);
                st
            }
            Step::Pull(req) => {
                let (mut t, st) = b.on_pull_response(&req, s.pull_spaces("u", &req), 3).unwrap();
                b.stamp(&mut t);
                a.absorb(&t);
                st
            }
            _ => break,
        }
    }
    assert_eq!(b.last_failure(), None);
    assert_eq!(a.last_failure(), None, "the answer another context got is heard here too");
}

#[test]
fn absorb_follows_another_engine_on_the_same_database() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut a, mut b) = two_contexts_one_queued();
    assert_eq!(b.all_visible(), a.all_visible());
    let mut step = b.start_sync(0).1;
    let mut txns = vec![];
    loop {
        step = match step {
            Step::Push(req) => {
                let (t, st) = b.on_push_response(s.push("u", &req).unwrap(), 0).unwrap();
                txns.push(t);
                st
            }
            Step::Pull(req) => {
                let (t, st) = b.on_pull_response(&req, s.pull_spaces("u", &req), 0).unwrap();
                txns.push(t);
                st
            }
            _ => break,
        }
    }
    for t in &txns {
        a.absorb(t);
    }
    assert_eq!(a.pending_len(), 0);
    assert_eq!(a.all_visible(), b.all_visible());
    assert_eq!(a.cursor(), b.cursor());
}

// ----- issue: truthful status, bounded retries, the clock --------------------

use crate::memory_store::Tables;
use crate::protocol::{
    Change, Recalled, RememberedVerdict, SpacesPullResponse, Verdict, VerdictsRequest, VerdictsResponse, MAX_SAFE_INTEGER,
};

/// Two engines on one database: `b` follows `a` through the txns `a`
/// commits (stamped by `a`, as the driver does).
fn commit(t: &mut Tables, txn: &Txn, others: &mut [&mut Engine]) {
    t.apply(txn);
    for o in others.iter_mut() {
        o.absorb(txn);
    }
}

fn reopen(t: &Tables) -> Engine {
    Engine::open(t.snapshot(), Config::default()).unwrap()
}

fn fresh_tables(dev: &str) -> Tables {
    Tables { meta: Some(Meta::fresh(dev.into())), ..Tables::default() }
}

fn record_in(t: &mut Tables, e: &mut Engine, row: &str, f: Fields, now: u64) -> Op {
    let d = e.draft("sets", row, f).unwrap();
    let stored = t.meta.clone().unwrap();
    let (txn, rec) = e.plan_record(d, &stored, now).unwrap();
    t.apply(&txn);
    let op = rec.ops[0].clone();
    e.recorded(rec);
    op
}

/// A broadcast can arrive after the hearer's own later steps. Taken, an
/// older sync state put back an old `base_version`: the hearer's next step
/// wrote it, and a context that had missed base rows no longer knew it
/// (big simulation seed 1000264).
#[test]
fn a_sync_state_heard_late_is_not_taken_over_a_newer_one() {
    let mut t = fresh_tables("d");
    let (mut a, mut b) = (reopen(&t), reopen(&t));
    let op = record_in(&mut t, &mut a, "d-1", set(5), 10);
    b.absorb(&Txn { put_pending: vec![op], ..Txn::default() });
    let (mut first, _) = a.start_sync(100);
    a.stamp(&mut first);
    t.apply(&first);
    let mut later = a.bind_user("u").unwrap().expect("binds");
    a.stamp(&mut later);
    t.apply(&later);
    let stored = t.sync.clone().expect("stored");
    assert_eq!((stored.step, stored.base_version), (2, 1));
    // b starts a cycle on the state as stored, then hears `first`.
    b.adopt_sync(Some(stored.clone()));
    b.absorb(&first);
    assert_eq!(b.sync_state(), &stored, "the older copy is not taken");
    b.absorb(&later);
    assert_eq!(b.sync_state(), &stored);
}

#[test]
fn the_attempt_going_out_is_stored_before_it_leaves_and_every_context_and_reload_shows_it() {
    let mut t = fresh_tables("d");
    let mut a = Engine::open(t.snapshot(), Config::default()).unwrap();
    let mut b = Engine::open(t.snapshot(), Config::default()).unwrap();
    let op = record_in(&mut t, &mut a, "d-1", set(5), 10);
    b.absorb(&Txn { put_pending: vec![op.clone()], ..Txn::default() });
    let key = RowKey::new("sets", "d-1");
    let (mut txn, Step::Push(req)) = a.start_sync(100) else { panic!() };
    a.stamp(&mut txn);
    let flight = txn.sync.as_ref().and_then(|s| s.flight.clone()).expect("the flight is in the txn that precedes the send");
    assert_eq!((flight.key.as_str(), flight.op_ids.clone()), (req.attempt_key.as_str(), vec![op.op_id.clone()]));
    commit(&mut t, &txn, &mut [&mut b]);
    for (who, e) in [("sender", &a), ("other tab", &b), ("reload", &reopen(&t))] {
        let st = e.status(&key);
        assert_eq!((st.phase, st.attempts), (Phase::AwaitingAck, 1), "{who}");
    }
    let (mut txn, Step::Wait { until, .. }) = a.on_push_failed(&req.attempt_key, Failure::Timeout, 200).unwrap() else { panic!() };
    a.stamp(&mut txn);
    commit(&mut t, &txn, &mut [&mut b]);
    for (who, e) in [("sender", &a), ("other tab", &b), ("reload", &reopen(&t))] {
        let st = e.status(&key);
        assert_eq!((st.phase, st.attempts, st.next_retry_at), (Phase::UnknownOutcome, 1, Some(until)), "{who}");
        assert_eq!((e.metrics().attempts, e.metrics().unknown_outcomes), (1, 1), "{who}: counted once, stored");
    }
    let s = &t.sync.as_ref().unwrap().ops[&op.op_id];
    assert_eq!(
        (s.attempts, s.unknown, s.last_key.as_str(), s.first_sent_at, s.last_sent_at),
        (1, true, req.attempt_key.as_str(), 100, 100)
    );
}

#[test]
fn a_context_closed_with_its_request_out_shows_unknown_outcome_on_the_next_open_never_pending() {
    let mut t = fresh_tables("d");
    let mut a = reopen(&t);
    record_in(&mut t, &mut a, "d-1", set(5), 10);
    let (txn, Step::Push(_)) = a.start_sync(100) else { panic!() };
    t.apply(&txn);
    drop(a); // the tab closed with the request out
    let mut c = reopen(&t);
    let key = RowKey::new("sets", "d-1");
    assert_eq!(c.status(&key).phase, Phase::AwaitingAck, "while another context may still hold it");
    let txn = c.settle_orphaned_flight().expect("no cycle runs: the flight is orphaned");
    t.apply(&txn);
    let again = reopen(&t);
    for e in [&c, &again] {
        assert_eq!(e.status(&key).phase, Phase::UnknownOutcome);
        assert_eq!(e.status(&key).reason.as_deref(), Some(cycle::ORPHANED), "the row says why, in every context");
        assert_eq!(e.metrics().unknown_outcomes, 1);
    }
    assert!(c.settle_orphaned_flight().is_none(), "counted once");
    // A cycle under the lock settles it too, without counting it twice.
    let mut d = reopen(&t);
    let (txn, _) = d.start_sync(200);
    assert_eq!(txn.sync.unwrap().metrics.unknown_outcomes, 1);
}

#[test]
fn readiness_a_after_a_lost_answer_the_edits_stay_visible_and_queued() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    let visible = e.all_visible();
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    s.push("u", &req).unwrap(); // committed; the answer is lost
    e.on_push_failed(&req.attempt_key, Failure::Network("connection reset".into()), 1).unwrap();
    assert_eq!(e.all_visible(), visible);
    assert_eq!(e.pending_len(), 1);
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::UnknownOutcome);
}

#[test]
fn readiness_b_a_retry_sends_the_same_op_ids_never_new_ones() {
    let mut e = engine("d");
    for i in 0..3 {
        record(&mut e, &format!("d-{i}"), set(5), 10 + i);
    }
    let (_, Step::Push(first)) = e.start_sync(0) else { panic!() };
    e.on_push_failed(&first.attempt_key, Failure::Server { status: 503, message: "down".into(), retry_after_ms: 0 }, 1).unwrap();
    let (_, Step::Push(second)) = e.start_sync(5_000) else { panic!() };
    let ids = |r: &PushRequest| r.batch.iter().map(|o| o.op_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), ids(&second));
    assert_eq!(first.batch, second.batch);
    assert_ne!(first.attempt_key, second.attempt_key);
}

#[test]
fn a_server_that_asks_for_time_is_not_tried_sooner() {
    let mut e = engine("d");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(100) else { panic!() };
    let down = Failure::Server { status: 503, message: "down".into(), retry_after_ms: 240_000 };
    let (_, Step::Wait { until, .. }) = e.on_push_failed(&req.attempt_key, down, 100).unwrap() else { panic!() };
    assert!(until >= 240_100, "a 503's Retry-After bounds the wait from below (waits until {until})");
    assert_eq!(e.retry_at(), Some(until));
}

#[test]
fn a_poke_waits_for_what_the_server_asked_but_a_person_does_not() {
    let mut e = engine("d");
    assert_eq!(e.poke_wait(50), Some(0), "nothing to wait for: a poke pulls at once");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(100) else { panic!() };
    let (_, Step::Wait { until, .. }) = e.on_push_failed(&req.attempt_key, Failure::RateLimited { retry_after_ms: 30_000 }, 100).unwrap()
    else {
        panic!()
    };
    assert_eq!(until, 30_100);
    assert_eq!(e.poke_wait(1_100), Some(29_000), "a poke during a 429's wait comes when it is over");
    assert_eq!(e.poke_wait(40_000), Some(0));
    // A person's sync still goes at once (and does not move the wait if it fails).
    let (_, Step::Push(_)) = e.start_sync(1_200) else { panic!("a person's sync goes out") };
    let mut stopped = engine("s");
    stopped.require_recovery(Recovery { code: crate::protocol::Code::Unauthorized, message: "sign in".into() });
    assert_eq!(stopped.poke_wait(0), None, "a stop waits for a person, not for pokes");
    let mut old_server = engine("o");
    record(&mut old_server, "o-1", set(5), 10);
    let (_, Step::Push(req)) = old_server.start_sync(100) else { panic!() };
    let (_, Step::Wait { until, .. }) = old_server.on_push_failed(&req.attempt_key, Failure::SchemaTooNew("v1".into()), 100).unwrap()
    else {
        panic!()
    };
    assert!(until > 100_000, "the old server is probed again in minutes…");
    assert_eq!(old_server.poke_wait(200), Some(0), "…or at once on a poke, which may be the upgraded server's");
}

#[test]
fn a_poke_of_a_head_already_pulled_asks_for_nothing() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    assert!(e.poke_is_news("1"), "before its first pull the device knows no head");
    record(&mut e, "d-1", set(5), 10);
    sync(&mut e, &mut s, 20);
    let head = e.following().personal_cursor();
    assert!(head > 0);
    assert!(!e.poke_is_news(&crate::protocol::poke_data(None, head)), "its own push, told back once pulled");
    assert!(e.poke_is_news(&crate::protocol::poke_data(None, head + 1)));
    let personal = e.following().personal.clone().unwrap();
    assert!(!e.poke_is_news(&crate::protocol::poke_data(Some(&personal), head)), "the personal space by its name");
    assert!(e.poke_is_news(&crate::protocol::poke_data(Some("team"), 1)), "a space not followed yet");
    assert!(e.poke_is_news(crate::protocol::POKE_MEMBERS));
    assert!(e.poke_is_news(""), "a word it cannot read: a pull");
}

#[test]
fn readiness_c_a_late_answer_after_new_input_and_a_new_attempt_changes_nothing_and_is_counted_stale() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let key = RowKey::new("sets", "d-1");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(first)) = e.start_sync(0) else { panic!() };
    let late = s.push("u", &first).unwrap();
    e.on_push_failed(&first.attempt_key, Failure::Timeout, 1).unwrap();
    record(&mut e, "d-1", fields(&[("reps", 6i64.into())]), 11);
    let (_, Step::Push(second)) = e.start_sync(2) else { panic!() };
    assert_ne!(first.attempt_key, second.attempt_key);
    assert_eq!(second.batch.len(), 2);
    let before = (e.all_visible(), e.pending_len(), e.status(&key));
    assert!(e.on_push_response(late, 3).is_none());
    assert_eq!((e.all_visible(), e.pending_len(), e.status(&key)), before);
    assert_eq!(e.metrics().stale_acks_ignored, 1);
    assert_eq!(e.take_txn().and_then(|t| t.sync).map(|s| s.metrics.stale_acks_ignored), Some(1), "the count is stored");
    let (_, _) = e.on_push_response(s.push("u", &second).unwrap(), 4).unwrap();
    assert_eq!(e.row(&key).unwrap().get("reps"), Some(&Value::Number(6.0)));
}

#[test]
fn readiness_d_the_ack_of_an_older_op_never_clears_newer_input_on_the_same_field() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let key = RowKey::new("sets", "d-1");
    let reps = |e: &Engine| e.row(&key).and_then(|r| r.get("reps").cloned());
    record(&mut e, "d-1", set(5), 10);
    assert_eq!(reps(&e), Some(Value::Number(5.0)));
    let (_, Step::Push(first)) = e.start_sync(0) else { panic!() };
    record(&mut e, "d-1", fields(&[("reps", 6i64.into())]), 11);
    assert_eq!(reps(&e), Some(Value::Number(6.0)), "newer input while the older op is out");
    let (_, next) = e.on_push_response(s.push("u", &first).unwrap(), 12).unwrap();
    assert_eq!(reps(&e), Some(Value::Number(6.0)), "the older op's ack leaves the newer value");
    assert_eq!(e.status(&key).phase, Phase::AwaitingAck, "the newer op goes out next");
    let Step::Push(second) = next else { panic!("{next:?}") };
    assert_eq!(reps(&e), Some(Value::Number(6.0)));
    e.on_push_response(s.push("u", &second).unwrap(), 13).unwrap();
    assert_eq!(reps(&e), Some(Value::Number(6.0)));
    assert_eq!(e.base(&key).and_then(|r| r.get("reps").cloned()), Some(Value::Number(6.0)));
}

#[test]
fn readiness_e_an_answer_whose_verdicts_do_not_match_the_batch_changes_nothing_and_leaves_the_outcome_unknown() {
    let mut e = engine("d");
    record(&mut e, "d-1", set(5), 10);
    record(&mut e, "d-2", set(5), 11);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let before = (e.all_visible(), e.pending().cloned().collect::<Vec<_>>());
    let wrong = PushResponse {
        attempt_key: req.attempt_key.clone(),
        verdicts: vec![Verdict { op_id: req.batch[1].op_id.clone(), outcome: Outcome::Applied }],
        now: None,
    };
    let (txn, step) = e.on_push_response(wrong, 1).unwrap();
    assert!(matches!(step, Step::Wait { .. }));
    assert!(txn.delete_pending.is_empty() && txn.put_base.is_empty(), "nothing settled");
    assert_eq!((e.all_visible(), e.pending().cloned().collect::<Vec<_>>()), before);
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::UnknownOutcome);
}

fn policy(max_attempts: u32) -> Config {
    Config { retry: RetryPolicy { max_attempts, max_elapsed_ms: u64::MAX }, ..Config::default() }
}

#[test]
fn retries_stop_at_the_limit_then_the_server_is_asked_and_what_it_cannot_settle_needs_a_person() {
    let mut e = Engine::open(Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() }, policy(3)).unwrap();
    let mut s = MemoryServer::new(Schema::workout());
    let applied = record(&mut e, "d-1", set(5), 10);
    let refused = record(&mut e, "d-2", set(500), 11);
    let never = record(&mut e, "d-3", set(7), 12);
    // Attempt 1 reaches the server; its answer is lost. Then the server fails twice before judging.
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let mut judged = req.clone();
    judged.batch.truncate(2);
    s.push("u", &judged).unwrap();
    let mut step = e.on_push_failed(&req.attempt_key, Failure::Timeout, 1).unwrap().1;
    let mut now = 1;
    let mut sends = 1;
    loop {
        step = match step {
            Step::Wait { until, .. } => {
                now = until;
                e.start_sync(now).1
            }
            Step::Push(req) => {
                sends += 1;
                e.on_push_failed(&req.attempt_key, Failure::Server { status: 502, message: "bad gateway".into(), retry_after_ms: 0 }, now)
                    .unwrap()
                    .1
            }
            Step::Reconcile(ids) => break assert_eq!(ids, vec![applied.op_id.clone(), refused.op_id.clone(), never.op_id.clone()]),
            other => panic!("{other:?}"),
        };
    }
    assert_eq!(sends, 3, "max_attempts sends, then no more");
    let resp = s.verdicts("u", &VerdictsRequest { op_ids: vec![applied.op_id.clone(), refused.op_id.clone(), never.op_id.clone()] });
    let (txn, step) = e.on_verdicts(resp, now).unwrap();
    assert!(matches!(step, Step::Blocked(ref r) if r.code.as_str() == "retries_exhausted"), "{step:?}");
    assert_eq!(txn.delete_pending.len(), 2, "the applied and the rejected op are settled");
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::Synced);
    let st = e.status(&RowKey::new("sets", "d-2"));
    assert_eq!((st.phase, st.reason.as_deref()), (Phase::Rejected, Some("reps must be at most 100")), "word for word");
    let st = e.status(&RowKey::new("sets", "d-3"));
    assert_eq!((st.phase, st.code.as_deref()), (Phase::RecoveryRequired, Some("retries_exhausted")));
    assert_eq!(
        txn.sync.as_ref().and_then(|s| s.recovery.clone()).map(|r| r.code.as_str()),
        Some("retries_exhausted"),
        "stored: no context sends"
    );
    assert!(matches!(e.start_sync(now).1, Step::Blocked(_)), "nothing is sent automatically");
    assert_eq!(e.metrics().reconciled, 2);
    // A person confirms: the op goes out again, counted from zero.
    e.retry_exhausted().unwrap();
    let (_, Step::Push(req)) = e.start_sync(now) else { panic!() };
    assert_eq!(req.batch, vec![never.clone()]);
    e.on_push_response(s.push("u", &req).unwrap(), now).unwrap();
    assert_eq!(e.pending_len(), 0);
}

#[test]
fn a_failed_check_with_the_server_waits_and_asks_again_and_elapsed_time_is_a_limit_too() {
    let cfg = Config { retry: RetryPolicy { max_attempts: 100, max_elapsed_ms: 10_000 }, ..Config::default() };
    let mut e = Engine::open(Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() }, cfg).unwrap();
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    let mut step = e.start_sync(0).1;
    let mut now = 0;
    let mut reached = false;
    let ids = loop {
        step = match step {
            Step::Wait { until, .. } => {
                now = until;
                e.start_sync(now).1
            }
            Step::Push(req) => {
                if !reached {
                    // The first send reached the server; its answer was lost.
                    s.push("u", &req).unwrap();
                    reached = true;
                }
                e.on_push_failed(&req.attempt_key, Failure::Timeout, now + 1_000).unwrap().1
            }
            Step::Reconcile(ids) => break ids,
            other => panic!("{other:?}"),
        };
    };
    assert_eq!(ids.len(), 1);
    let charged = e.sync_state().ops[&ids[0]].charged_ms;
    assert!(charged >= 10_000, "{charged}");
    // The server is down: the check fails like any request — a wait, no stop.
    let (_, step) = e.on_verdicts_failed(Failure::Network("down".into()), now).unwrap();
    let Step::Wait { until, .. } = step else { panic!("{step:?}") };
    assert!(e.recovery().is_none(), "a server that is down is no reason to strand the queue");
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::UnknownOutcome);
    // Later the next cycle asks again (never pushes an op over its limit), and the server, back, answers.
    let (_, Step::Reconcile(again)) = e.start_sync(until) else { panic!() };
    assert_eq!(again, ids);
    let (_, step) = e.on_verdicts(s.verdicts("u", &VerdictsRequest { op_ids: again }), until).unwrap();
    assert!(matches!(step, Step::Pull(_)), "{step:?}");
    assert_eq!(e.pending_len(), 0, "healed alone: applied once, never sent again");
    assert_eq!(s.rows("u").len(), 1);
}

#[test]
fn a_persons_syncs_within_the_backoff_do_not_spend_the_retry_budget() {
    let mut e = Engine::open(Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() }, policy(3)).unwrap();
    let key = RowKey::new("sets", "d-1");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(1_000) else { panic!() };
    let Some((_, Step::Wait { until, .. })) = e.on_push_failed(&req.attempt_key, Failure::Network("down".into()), 1_001) else { panic!() };
    let until = until.max(1_001 + 1_000); // the test clicks well before it
    e.sync.next_retry_at = Some(until);
    // Eight clicks in a second, the server still down: each goes out, none counts.
    for i in 0..8 {
        let (_, step) = e.start_sync(1_002 + i);
        let Step::Push(req) = step else { panic!("click {i}: {step:?}") };
        let (_, step) = e.on_push_failed(&req.attempt_key, Failure::Network("down".into()), 1_003 + i).unwrap();
        assert!(matches!(step, Step::Wait { until: u, .. } if u == until), "click {i}: the scheduled wait stands: {step:?}");
    }
    let a = &e.sync_state().ops[&req.batch[0].op_id];
    assert_eq!((a.attempts, a.counted), (9, 1), "nine sends, one counted failure");
    assert!(e.recovery().is_none());
    assert_eq!(e.status(&key).phase, Phase::UnknownOutcome);
    // The scheduled tries count: two more reach the limit, then the server is asked.
    let mut now = until;
    let mut step = e.start_sync(now).1;
    let asked = loop {
        step = match step {
            Step::Wait { until, .. } => {
                now = until;
                e.start_sync(now).1
            }
            Step::Push(req) => e.on_push_failed(&req.attempt_key, Failure::Network("down".into()), now).unwrap().1,
            Step::Reconcile(ids) => break ids,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(asked.len(), 1);
    assert_eq!(e.sync_state().ops[&asked[0]].counted, 3);
}

#[test]
fn under_exhausted_retries_an_edit_never_sent_is_pending_and_a_persons_answered_check_lifts_the_stop() {
    let mut e = Engine::open(Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() }, policy(1)).unwrap();
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (_, Step::Reconcile(ids)) =
        e.on_push_failed(&req.attempt_key, Failure::Server { status: 500, message: "x".into(), retry_after_ms: 0 }, 1).unwrap()
    else {
        panic!()
    };
    // The server answers, and never judged it: the automatic check stops sending.
    let (_, step) = e.on_verdicts(s.verdicts("u", &VerdictsRequest { op_ids: ids }), 2).unwrap();
    assert!(matches!(step, Step::Blocked(ref r) if r.code.as_str() == "retries_exhausted"), "{step:?}");
    record(&mut e, "d-2", set(6), 12);
    assert_eq!(e.status(&RowKey::new("sets", "d-1")).phase, Phase::RecoveryRequired);
    assert_eq!(e.status(&RowKey::new("sets", "d-2")).phase, Phase::Pending, "it reached no limit");
    // A person asks the server; it answers: nothing is left to guard, the stop goes.
    let (_, Step::Reconcile(ids)) = e.start_reconcile() else { panic!() };
    let (txn, step) = e.on_verdicts(s.verdicts("u", &VerdictsRequest { op_ids: ids }), 3).unwrap();
    assert!(matches!(step, Step::Done(ref r) if r.unknown == 1), "{step:?}");
    assert!(e.recovery().is_none());
    assert!(txn.sync.is_some_and(|s| s.recovery.is_none()), "stored for every context");
    sync(&mut e, &mut s, 4);
    assert_eq!((e.pending_len(), s.rows("u").len()), (0, 2));
}

#[test]
fn a_persons_check_with_the_server_settles_what_it_knows_and_never_pushes() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let a = record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    s.push("u", &req).unwrap();
    e.on_push_failed(&req.attempt_key, Failure::Timeout, 1).unwrap();
    let b = record(&mut e, "d-2", set(6), 12); // never sent: not asked about
    let (_, step) = e.start_reconcile();
    let Step::Reconcile(ids) = step else { panic!("{step:?}") };
    assert_eq!(ids, vec![a.op_id.clone()]);
    let (_, step) = e.on_verdicts(s.verdicts("u", &VerdictsRequest { op_ids: ids }), 3).unwrap();
    assert!(matches!(step, Step::Done(ref r) if r.reconciled == 1), "{step:?}");
    assert_eq!(e.pending().map(|o| o.op_id.clone()).collect::<Vec<_>>(), vec![b.op_id]);
    assert_eq!(s.rows("u").len(), 1, "nothing pushed");
    // Answers for ops not asked about change nothing.
    let (_, Step::Done(_)) = e.start_reconcile() else { panic!() };
    let stray = VerdictsResponse { verdicts: vec![RememberedVerdict { op_id: OpId::new("x:1"), recalled: Recalled::Applied }], now: None };
    assert!(e.on_verdicts(stray, 5).is_none());
}

#[test]
fn a_server_older_than_the_app_is_probed_with_the_queue_whole_and_heals_alone() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let key = RowKey::new("sets", "d-1");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(1_000) else { panic!() };
    let (txn, step) = e.on_push_failed(&req.attempt_key, Failure::SchemaTooNew("op schema 2 > server schema 1".into()), 1_000).unwrap();
    assert!(matches!(step, Step::Wait { until: 301_000, .. }), "{step:?}");
    let st = e.status(&key);
    assert_eq!((st.phase, st.code.as_deref()), (Phase::RecoveryRequired, Some("schema_too_new")));
    assert!(st.reason.as_deref().is_some_and(|r| r.contains("server")), "{st:?}");
    assert!(txn.sync.is_some_and(|s| s.recovery.is_some()), "every context knows what is waited for");
    // A probe (at the due time, on open, on `online`, on a poke) is a real attempt.
    let (_, Step::Push(req)) = e.start_sync(301_000) else { panic!("probe") };
    e.on_push_response(s.push("u", &req).unwrap(), 301_001).unwrap();
    assert!(e.recovery().is_none());
    assert_eq!(e.status(&key).phase, Phase::Synced);
    assert_eq!(e.metrics().recovery_required, 1);
}

#[test]
fn a_pulled_row_at_the_top_of_the_clock_does_not_swallow_later_edits() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    // Stored before servers refused such ops: a row stamped 2^53-1 by a broken device.
    let mut poisoned = crate::protocol::Row::default();
    poisoned.cells.insert(
        "reps".into(),
        crate::protocol::Cell { value: Value::Number(3.0), mark: crate::protocol::Mark { at: MAX_SAFE_INTEGER, op_id: OpId::new("z:1") } },
    );
    let (_, Step::Pull(req)) = e.start_sync(1_000) else { panic!() };
    let page = SpacesPullResponse {
        personal: Some("~u".into()),
        joined: vec![crate::space::Membership { space: "~u".into(), role: crate::space::Role::Owner }],
        spaces: vec![crate::protocol::SpacePage {
            space: "~u".into(),
            changes: vec![Change { key: RowKey::new("sets", "z-1"), row: poisoned, seq: 1 }],
            cursor: 1,
            has_more: false,
        }],
        ..SpacesPullResponse::default()
    };
    e.on_pull_response(&req, page, 1_000).unwrap();
    let ops: Vec<Op> = (0..3).map(|i| record(&mut e, &format!("d-{i}"), set(5), 2_000 + i)).collect();
    let ats: Vec<u64> = ops.iter().map(|o| o.at).collect();
    assert_eq!(ats, vec![2_000, 2_001, 2_002]);
    assert_eq!(e.pending_len(), 3, "none replaced another");
    sync(&mut e, &mut s, 3_000);
    assert_eq!(s.rows("u").len(), 3, "all three reached the server");
}

#[test]
fn no_edit_is_recorded_without_an_at_of_its_own() {
    let mut e = engine("d");
    let mut meta = e.meta().clone();
    meta.clock.last_at = MAX_SAFE_INTEGER - 1;
    let drafts = (0..2).map(|_| e.draft("sets", "d-1", set(5)).unwrap()).collect();
    assert_eq!(e.plan_records(drafts, &meta, 0).unwrap_err(), EngineError::ClockExhausted);
    assert_eq!((e.pending_len(), e.meta().counter), (0, 0), "nothing planned");
    let d = e.draft("sets", "d-1", set(5)).unwrap();
    assert_eq!(e.plan_record(d, &meta, 0).unwrap().1.ops[0].at, MAX_SAFE_INTEGER);
}

#[test]
fn a_device_learns_the_servers_clock_and_a_clock_ahead_refusal_brings_it_back() {
    let mut e = engine("d");
    let hours = 3 * 3_600_000u64;
    // The device's clock is 3 h behind the server's.
    record(&mut e, "d-1", set(5), 1_000);
    let (_, Step::Push(req)) = e.start_sync(1_000) else { panic!() };
    let resp = PushResponse {
        attempt_key: req.attempt_key.clone(),
        verdicts: vec![Verdict { op_id: req.batch[0].op_id.clone(), outcome: Outcome::Applied }],
        now: Some(1_100 + hours),
    };
    let (txn, _) = e.on_push_response(resp, 1_200).unwrap();
    assert!(txn.meta.is_some_and(|m| m.clock.offset_ms == hours as i64), "the offset is stored");
    let op = record(&mut e, "d-2", set(5), 2_000);
    assert_eq!(op.at, 2_000 + hours);
    // A broken moment stamps far ahead; the server refuses it, and the clock comes back.
    let wild = record(&mut e, "d-3", set(5), MAX_SAFE_INTEGER - hours);
    let (_, Step::Push(req)) = e.start_sync(3_000) else { panic!() };
    assert_eq!(req.batch.last().map(|o| o.at), Some(wild.at));
    let reject = |id: &OpId| Verdict {
        op_id: id.clone(),
        outcome: Outcome::Rejected { reason: "too far ahead".into(), code: crate::judge::CLOCK_AHEAD.into(), row: None },
    };
    let resp = PushResponse {
        attempt_key: req.attempt_key.clone(),
        verdicts: vec![Verdict { op_id: req.batch[0].op_id.clone(), outcome: Outcome::Applied }, reject(&wild.op_id)],
        now: None,
    };
    e.on_push_response(resp, 3_000).unwrap();
    let next = record(&mut e, "d-4", set(5), 4_000);
    assert_eq!(next.at, 4_000 + hours, "near real time again, after everything acknowledged");
}

#[test]
fn lifting_a_stop_is_stored_so_no_context_brings_it_back() {
    let mut e = Engine::open(Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() }, policy(1)).unwrap();
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (_, Step::Reconcile(_)) = e.on_push_failed(&req.attempt_key, Failure::Timeout, 1).unwrap() else { panic!() };
    let (_, Step::Blocked(_)) = e.on_verdicts(VerdictsResponse { verdicts: vec![], now: None }, 2).unwrap() else { panic!() };
    let txn = e.clear_recovery().expect("the lift is a txn");
    assert_eq!(txn.sync.map(|s| s.recovery), Some(None));
    e.require_recovery(Recovery { code: crate::protocol::Code::Unauthorized, message: "m".into() });
    assert!(e.clear_recovery().and_then(|t| t.sync).is_some_and(|s| s.recovery.is_none()));
}

// ----- the schema on the device (check.rs) ---------------------------------

fn workout_text() -> String {
    serde_json::to_string(&Schema::workout()).unwrap()
}

#[test]
fn without_a_known_schema_nothing_is_refused_and_the_schema_is_wanted() {
    let e = engine("d");
    assert_eq!(e.check("sets", "r", &set(1000)), Ok(()));
    assert_eq!(e.schema_wanted(), Some(None));
}

#[test]
fn a_known_schema_refuses_in_the_servers_words_and_names_the_field() {
    let mut e = engine("d");
    let txn = e.learn_schema(workout_text(), Some("\"v1\"".into())).unwrap();
    assert!(txn.schema.is_some(), "the step stores it");
    assert_eq!(e.known_schema().map(|(_, s)| s.version), Some(1));
    assert_eq!(e.schema_wanted(), None);
    let bad = e.check("sets", "r", &set(1000)).unwrap_err();
    assert_eq!(
        (bad.code.as_str(), bad.reason.as_str(), bad.field.as_deref()),
        ("out_of_range", "reps must be at most 100", Some("reps"))
    );
    let missing = e.check("sets", "r", &fields(&[("reps", 5.into())])).unwrap_err();
    assert_eq!((missing.code.as_str(), missing.field.as_deref()), ("missing_fields", Some("exercise")));
    let unknown = e.check("sets", "r", &fields(&[("rpe", 5.into())])).unwrap_err();
    assert_eq!(
        (unknown.code.as_str(), unknown.reason.as_str(), unknown.field.as_deref()),
        ("unknown_field", "unknown field: rpe", Some("rpe"))
    );
    // An edit of one field of an existing row is checked on the row after it.
    record(&mut e, "r", set(5), 10);
    assert_eq!(e.check("sets", "r", &fields(&[("reps", 6.into())])), Ok(()));
    assert_eq!(e.check("sets", "r", &fields(&[("reps", 0.into())])).unwrap_err().reason, "reps must be at least 1");
}

#[test]
fn edits_recorded_together_are_checked_in_order_on_the_row_they_make() {
    let mut e = engine("d");
    e.learn_schema(workout_text(), None).unwrap();
    let d = |f: Fields| Draft { space: None, table: "sets".into(), row_id: "r".into(), fields: f };
    // The second edit alone lacks required fields; after the first it is whole.
    assert_eq!(e.check_drafts(&[d(set(5)), d(fields(&[("reps", 7.into())]))]), Ok(()));
    let (i, why) = e.check_drafts(&[d(set(5)), d(fields(&[("reps", 700.into())]))]).unwrap_err();
    assert_eq!((i, why.reason.as_str()), (1, "reps must be at most 100"));
}

#[test]
fn a_schema_learned_in_one_context_reaches_the_others_and_survives_reopen() {
    let mut a = engine("d");
    let mut b = engine("d");
    let txn = a.learn_schema(workout_text(), Some("\"e\"".into())).unwrap();
    b.absorb(&txn);
    assert_eq!(b.check("sets", "r", &set(0)).unwrap_err().code.as_str(), "out_of_range");
    let snap = Snapshot { meta: Some(Meta::fresh("d".into())), schema: txn.schema.clone(), ..Snapshot::default() };
    let c = Engine::open(snap, Config::default()).unwrap();
    assert_eq!(c.known_schema().and_then(|(k, _)| k.etag.as_deref()), Some("\"e\""));
    assert_eq!(c.check("sets", "r", &set(0)).unwrap_err().code.as_str(), "out_of_range");
}

#[test]
fn a_schema_that_does_not_parse_is_not_learned() {
    let mut e = engine("d");
    assert!(e.learn_schema("{\"version\": \"x\"}".into(), None).is_none());
    assert!(e.known_schema().is_none());
}

#[test]
fn a_new_server_version_makes_the_schema_wanted_again_with_its_etag() {
    let mut e = engine("d");
    e.learn_schema(workout_text(), Some("\"e1\"".into())).unwrap();
    e.saw_schema(1, None);
    assert_eq!(e.schema_wanted(), None);
    e.saw_schema(2, None);
    assert_eq!(e.schema_wanted(), Some(Some("\"e1\"")));
}

/// A schema file changed under the same version (a limit relaxed in place)
/// was never fetched again: the device went on refusing edits the server
/// took, or the reverse, for ever.
#[test]
fn a_schema_changed_under_the_same_version_is_wanted_again_by_its_tag() {
    let mut e = engine("d");
    e.learn_schema(workout_text(), Some("\"1-aa\"".into())).unwrap();
    e.saw_schema(1, Some("\"1-aa\""));
    assert_eq!(e.schema_wanted(), None);
    e.saw_schema(1, Some("\"1-bb\""));
    assert_eq!(e.schema_wanted(), Some(Some("\"1-aa\"")), "another tag, the same version");
    e.learn_schema(workout_text(), Some("\"1-bb\"".into())).unwrap();
    assert_eq!(e.schema_wanted(), None, "learned: asked no more");
}

#[test]
fn an_app_newer_than_the_known_schema_is_not_checked_by_it() {
    let snap = Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() };
    let mut e = Engine::open(snap, Config { schema: 2, ..Config::default() }).unwrap();
    e.learn_schema(workout_text(), None).unwrap();
    assert_eq!(e.check("sets", "r", &fields(&[("rpe", 5.into())])), Ok(()));
}

/// The device's check and the server's verdict agree, word for word, over a
/// seeded corpus of valid and invalid edits on new and existing rows.
#[test]
fn check_on_the_device_equals_the_servers_verdict_over_a_corpus() {
    let mut rng = crate::ids::SplitMix::new(7);
    let mut server = MemoryServer::new(Schema::workout());
    let mut e = engine("d");
    e.learn_schema(workout_text(), None).unwrap();
    let values: Vec<Value> = vec![
        Value::Null,
        0.into(),
        1.into(),
        5.into(),
        100.into(),
        101.into(),
        (-1).into(),
        2.5.into(),
        1000.0.into(),
        1000.5.into(),
        "squat".into(),
        "x".repeat(101).into(),
        true.into(),
    ];
    let names = ["exercise", "weightKg", "reps", "rpe", "_deleted"];
    let (mut refused, mut accepted) = (0, 0);
    for n in 0..600u64 {
        let row = format!("d-r{}", rng.next_u64() % 8);
        let mut f = Fields::new();
        for _ in 0..=(rng.next_u64() % 3) {
            let name = names[(rng.next_u64() % names.len() as u64) as usize];
            let v = if name == "_deleted" {
                Value::Bool(rng.next_u64() % 2 == 0)
            } else {
                values[(rng.next_u64() % values.len() as u64) as usize].clone()
            };
            f.insert(name.into(), v);
        }
        if e.draft("sets", &row, f.clone()).is_err() {
            continue;
        }
        let device = e.check("sets", &row, &f);
        let op = record(&mut e, &row, f, 1_000 + n);
        sync(&mut e, &mut server, 1_000 + n);
        let verdict = e.rejections().find(|r| r.op.op_id == op.op_id).map(|r| (r.code.clone(), r.reason.clone()));
        match (device, verdict) {
            (Ok(()), None) => accepted += 1,
            (Err(d), Some((code, reason))) => {
                assert_eq!((d.code.as_str(), d.reason), (code.as_str(), reason));
                refused += 1;
            }
            (d, v) => panic!("edit {n}: device said {d:?}, server said {v:?}"),
        }
    }
    assert!(refused > 50 && accepted > 50, "corpus too narrow: {refused} refused, {accepted} accepted");
}

#[test]
fn a_queued_edit_the_server_will_refuse_does_not_refuse_the_next_one() {
    let mut e = engine("d");
    e.learn_schema(workout_text(), None).unwrap();
    record(&mut e, "r", set(5), 10);
    // Recorded unchecked (the app chose to), queued: the server will refuse it.
    record(&mut e, "r", fields(&[("reps", 500.into())]), 11);
    assert_eq!(e.row(&RowKey::new("sets", "r")).unwrap().get("reps"), Some(&Value::Number(500.0)));
    assert_eq!(e.check("sets", "r", &fields(&[("weightKg", 90.into())])), Ok(()));
    assert_eq!(e.check("sets", "r", &fields(&[("reps", 0.into())])).unwrap_err().reason, "reps must be at least 1");
}

// ----- the truth of statuses and of whose database it is ------------------

#[test]
fn a_row_the_device_never_saw_has_no_status() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    assert_eq!(e.known_status(&RowKey::new("sets", "nope")), None);
    assert_eq!(e.known_status(&RowKey::new("nope", "d-1")), None);
    assert_eq!(e.known_status(&RowKey::new("Bad Table!", "d-1")), None);
    record(&mut e, "d-1", set(5), 10);
    assert_eq!(e.known_status(&RowKey::new("sets", "d-1")).map(|s| s.phase), Some(Phase::Pending));
    sync(&mut e, &mut s, 20);
    assert_eq!(e.known_status(&RowKey::new("sets", "d-1")).map(|s| s.phase), Some(Phase::Synced));
}

#[test]
fn a_later_applied_edit_takes_the_row_past_an_old_refusal_which_stays_listed() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let key = RowKey::new("sets", "d-2");
    record(&mut e, "d-2", set(500), 10);
    sync(&mut e, &mut s, 11);
    let st = e.status(&key);
    assert_eq!((st.phase, st.attempts), (Phase::Rejected, 1), "a refused op was sent once");
    record(&mut e, "d-2", set(6), 12);
    assert_eq!(e.status(&key).phase, Phase::Pending);
    sync(&mut e, &mut s, 13);
    assert_eq!(e.status(&key).phase, Phase::Synced, "where the row stands now");
    let listed: Vec<_> = e.rejections().collect();
    assert_eq!(listed.len(), 1, "the refusal stays until dismissed");
    assert!(listed[0].superseded);
    // A newer refusal tells the status again.
    record(&mut e, "d-2", set(0), 14);
    sync(&mut e, &mut s, 15);
    assert_eq!(e.status(&key).phase, Phase::Rejected);
}

#[test]
fn a_push_repeated_after_a_refreshed_token_counts_its_ops_once() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (_, Step::Push(again)) = e.abandon_attempt(&req.attempt_key, 1) else { panic!() };
    let (_, step) = e.on_push_response(s.push("u", &again).unwrap(), 2).unwrap();
    let Step::Pull(p) = step else { panic!("{step:?}") };
    let (_, Step::Done(report)) = e.on_pull_response(&p, s.pull_spaces("u", &p), 3).unwrap() else { panic!() };
    assert_eq!((report.pushed, report.applied), (1, 1));
}

#[test]
fn a_token_function_that_fails_sends_nothing_and_is_retried_with_its_own_words() {
    let mut e = engine("d");
    let key = RowKey::new("sets", "d-1");
    record(&mut e, "d-1", set(5), 10);
    let (_, Step::Push(req)) = e.start_sync(0) else { panic!() };
    let (txn, step) = e.on_push_not_sent(&req.attempt_key, Failure::Token("Error: session expired".into()), 1).unwrap();
    assert!(matches!(step, Step::Wait { .. }), "transient: {step:?}");
    assert!(e.recovery().is_none());
    assert_eq!(e.last_failure(), Some("the token function failed: Error: session expired"));
    let st = e.status(&key);
    assert_eq!((st.phase, st.attempts), (Phase::Pending, 0), "nothing went out");
    assert_eq!(txn.sync.map(|s| s.metrics.attempts), Some(0));
}

/// A pull answer for user `u`'s personal space.
fn answer_for(s: &mut MemoryServer, user: &str, req: &SpacesPullRequest) -> crate::protocol::SpacesPullResponse {
    s.pull_spaces(user, req)
}

#[test]
fn a_token_of_another_user_sends_nothing_shows_nothing_until_the_owners_token_returns() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    record(&mut e, "d-1", set(5), 10);
    sync(&mut e, &mut s, 11); // as "u": the database is u's now
    assert_eq!(e.user(), Some("u"));
    record(&mut e, "d-2", set(6), 12);
    // The app swapped the token for bob's: the server answers as bob.
    let (_, Step::Push(req)) = e.start_sync(13) else { panic!() };
    assert_eq!(req.batch.len(), 1);
    // (a server that checks the device's user refuses the push itself; this one does not)
    e.abandon_attempt(&req.attempt_key, 14);
    let (_, step) = e.start_sync(15);
    let Step::Push(req) = step else { panic!("{step:?}") };
    let resp = s.push("u", &req).unwrap();
    let (_, Step::Pull(p)) = e.on_push_response(resp, 16).unwrap() else { panic!() };
    record(&mut e, "d-3", set(7), 16); // queued before the server told whose token it is
    let bob = answer_for(&mut s, "bob", &p);
    let (txn, step) = e.on_pull_response(&p, bob, 17).unwrap();
    assert!(matches!(step, Step::Blocked(ref r) if r.code.as_str() == "wrong_user"), "{step:?}");
    assert!(txn.put_base.is_empty() && txn.following.is_none(), "nothing of bob's is taken");
    assert!(e.hides_rows());
    // Bob's own edit is not recorded: queued, it would go into u's account
    // with u's queue once u's token is back.
    let refused = e.draft("sets", "d-4", set(8));
    assert!(matches!(refused, Err(EngineError::TokenOfAnotherUser(ref why)) if why.contains("\"bob\"")), "{refused:?}");
    assert!(e.draft_deleted(None, "sets", "d-1", true).is_err(), "nor a removal");
    // Nor does the inspector's snapshot or a row's status show the owner's:
    // the synced row is unknown, the queued one reads recovery-required.
    let seen = e.inspect();
    assert!(seen.outbox.is_empty() && seen.rejections.is_empty() && seen.conflicts.is_empty());
    assert!(e.known_status(&RowKey::new("sets", "d-1")).is_none(), "a synced row of u's is not told");
    assert_eq!(
        e.known_status(&RowKey::new("sets", "d-3")).map(|s| s.phase),
        Some(Phase::RecoveryRequired),
        "a queued row reads its stop"
    );
    // While it stands, a cycle only probes with a pull: nothing is pushed.
    let (_, step) = e.start_sync(19);
    let Step::Pull(p) = step else { panic!("{step:?}") };
    let (_, step) = e.on_pull_response(&p, answer_for(&mut s, "bob", &p), 20).unwrap();
    assert!(matches!(step, Step::Blocked(_)));
    // The owner's token again: the probe answers for u, the stop goes, the queue goes out.
    let (_, Step::Pull(p)) = e.start_sync(21) else { panic!() };
    let (_, step) = e.on_pull_response(&p, answer_for(&mut s, "u", &p), 22).unwrap();
    assert!(matches!(step, Step::Push(_)), "{step:?}");
    assert!(!e.hides_rows());
}

#[test]
fn a_database_named_for_one_user_refuses_another() {
    let mut e = engine("d");
    assert!(e.bind_user("alice").unwrap().is_some_and(|t| t.following.is_some()), "stored the first time");
    assert_eq!(e.bind_user("alice").unwrap(), None);
    assert!(matches!(e.bind_user("bob"), Err(EngineError::WrongUser { .. })));
    assert_eq!(e.user(), Some("alice"));
}

#[test]
fn a_paced_cycle_pushes_what_was_queued_when_it_began_and_an_asked_one_everything() {
    let mut e = engine("d");
    let mut s = MemoryServer::new(Schema::workout());
    let first = record(&mut e, "d-1", set(1), 10);
    let (_, Step::Push(req)) = e.start_paced_sync(20) else { panic!("what is queued goes at once") };
    assert_eq!(req.batch, vec![first]);
    // Two edits while the push is out: the paced cycle ends on its answer.
    let later = [record(&mut e, "d-2", set(2), 21), record(&mut e, "d-3", set(3), 22)];
    let resp = s.push("u", &req).unwrap();
    let Some((_, Step::Done(report))) = e.on_push_response(resp, 23) else { panic!("the edits made meanwhile wait for the next cycle") };
    assert_eq!((report.pushed, e.pending_len()), (1, 2));
    // The next paced cycle takes both in one push.
    let (_, Step::Push(req)) = e.start_paced_sync(30) else { panic!() };
    assert_eq!(req.batch, later.to_vec());
    // Ops it sent and that were not judged still go again at once.
    let empty = PushResponse { attempt_key: req.attempt_key.clone(), verdicts: vec![], now: None };
    let Some((_, Step::Push(again))) = e.on_push_response(empty, 31) else { panic!("unjudged ops go again now") };
    let resp = s.push("u", &again).unwrap();
    let more = record(&mut e, "d-4", set(4), 32);
    assert!(matches!(e.on_push_response(resp, 33), Some((_, Step::Done(_)))));
    // What was queued when a paced cycle began goes out whole, in as many pushes as it takes.
    let mut backlog = engine("b");
    for i in 0..1200 {
        record(&mut backlog, &format!("b-r{i}"), set(5), 10 + i);
    }
    let (_, Step::Push(req)) = backlog.start_paced_sync(2_000) else { panic!() };
    let resp = s.push("u", &req).unwrap();
    let late = record(&mut backlog, "b-late", set(6), 2_001);
    let Some((_, Step::Push(req))) = backlog.on_push_response(resp, 2_002) else { panic!("the rest of the backlog goes on at once") };
    assert_eq!((req.batch.len(), req.batch.contains(&late)), (201, true), "with the edit made meanwhile, as one push");
    // A cycle someone asked for sees the queue out, edits made meanwhile too.
    let (_, Step::Push(req)) = e.start_sync(40) else { panic!() };
    assert_eq!(req.batch, vec![more]);
    record(&mut e, "d-5", set(5), 41);
    let resp = s.push("u", &req).unwrap();
    let Some((_, Step::Push(req))) = e.on_push_response(resp, 42) else { panic!("an asked cycle pushes on") };
    assert_eq!(req.batch.len(), 1);
}
