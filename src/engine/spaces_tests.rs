//! The engine in shared spaces (PROTOCOL §3c, §4b): grants backfill, roles
//! refuse on the device in the judge's words, revokes remove rows and turn
//! queued ops into rejections with their content.

use super::*;
use crate::memory_server::MemoryServer;
use crate::memory_store::Tables;
use crate::protocol::{Fields, Value};
use crate::schema::Schema;
use crate::space::{Role, FORBIDDEN, READ_ONLY};

fn engine(dev: &str) -> Engine {
    let snap = Snapshot { meta: Some(Meta::fresh(dev.into())), ..Snapshot::default() };
    Engine::open(snap, Config::default()).unwrap()
}

fn set(reps: i64) -> Fields {
    [("exercise", Value::from("squat")), ("weightKg", 80.0.into()), ("reps", reps.into())]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

fn record(e: &mut Engine, d: Draft, store: &mut Tables) -> Op {
    let meta = e.meta().clone();
    let (txn, rec) = e.plan_record(d, &meta, 1_000).unwrap();
    store.apply(&txn);
    let op = rec.ops[0].clone();
    e.recorded(rec);
    op
}

/// Runs `step` and the rest of its cycle as `user`, committing every txn to
/// `store`, and reading from it first what each step reads, as the driver
/// does (nothing, for an engine that holds every row).
fn run(e: &mut Engine, s: &mut MemoryServer, user: &str, mut step: Step, store: &mut Tables) -> SyncReport {
    let read = |e: &mut Engine, wants: Vec<crate::store::Want>, store: &Tables| {
        let missing = e.missing(wants);
        e.provide(store.read_base(&missing)).unwrap();
    };
    loop {
        step = match step {
            Step::Push(req) => {
                let answer = s.push(user, &req).unwrap();
                read(e, e.wants_answer(), store);
                let (t, next) = e.on_push_response(answer, 1_000).unwrap();
                store.apply(&t);
                next
            }
            Step::Pull(req) => {
                let answer = s.pull_spaces(user, &req);
                read(e, e.wants_pull(&answer), store);
                let (t, next) = e.on_pull_response(&req, answer, 1_000).unwrap();
                store.apply(&t);
                next
            }
            Step::Done(r) => return r,
            other => panic!("{other:?}"),
        }
    }
}

fn sync(e: &mut Engine, s: &mut MemoryServer, user: &str, store: &mut Tables) -> SyncReport {
    let (t, step) = e.start_sync(1_000);
    store.apply(&t);
    run(e, s, user, step, store)
}

/// Alice's space `gym` with two rows written by her.
fn gym() -> MemoryServer {
    let mut s = MemoryServer::new(Schema::workout());
    s.create_space("gym", "alice").unwrap();
    let mut batch = vec![crate::workload::set_op("a", 1, 1, 5), crate::workload::set_op("a", 2, 2, 6)];
    for op in &mut batch {
        op.space = Some("gym".into());
    }
    let verdicts = s.push("alice", &PushRequest { attempt_key: "a:1".into(), batch }).unwrap().verdicts;
    assert!(verdicts.iter().all(|v| v.outcome == crate::protocol::Outcome::Applied), "{verdicts:?}");
    s
}

/// Alice gives bob `role` in gym: an invitation he accepts when he is no member yet (PROTOCOL §3c).
fn grant(s: &mut MemoryServer, role: Role) {
    if s.set_member(Some("alice"), "gym", "bob", Some(role)).unwrap() {
        assert_eq!(s.accept("bob", "gym").unwrap(), role);
    }
}

/// Bob, given `role` in gym, synced once: the server, his engine, his store.
fn bob_synced_in_gym(role: Role) -> (MemoryServer, Engine, Tables) {
    let mut s = gym();
    grant(&mut s, role);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    sync(&mut bob, &mut s, "bob", &mut store);
    (s, bob, store)
}

fn gym_rows(e: &Engine) -> Vec<String> {
    e.rows("sets").into_iter().filter(|(k, _)| k.space == "gym").map(|(k, _)| k.row_id.clone()).collect()
}

#[test]
fn a_grant_backfills_a_viewer_is_refused_on_the_device_and_a_promotion_lets_edits_through() {
    let mut s = gym();
    let (mut bob, mut store) = (engine("b"), Tables::default());
    sync(&mut bob, &mut s, "bob", &mut store);
    assert_eq!(bob.following().personal.as_deref(), Some("~bob"));
    assert!(gym_rows(&bob).is_empty(), "not a member: nothing of gym");

    grant(&mut s, Role::Viewer);
    let report = sync(&mut bob, &mut s, "bob", &mut store);
    assert_eq!(report.pulled, 2);
    assert_eq!(gym_rows(&bob), vec!["a-1".to_owned(), "a-2".to_owned()], "the whole space, from its start");
    let listed: Vec<(Option<String>, Role)> = bob.spaces().into_iter().map(|i| (i.space, i.role)).collect();
    assert_eq!(listed, vec![(Some("~bob".into()), Role::Owner), (Some("gym".into()), Role::Viewer)]);

    // A viewer's edit: refused at once, the judge's code and words, nothing recorded.
    let denied = bob.draft("sets", "a-1", set(9)).unwrap_err();
    assert_eq!(denied.to_string(), "you are a viewer of space gym: viewers cannot edit its rows");
    assert!(matches!(&denied, EngineError::Denied(d) if d.code == READ_ONLY));
    assert!(matches!(bob.draft_in(Some("gym"), "sets", "b-1", set(9)), Err(EngineError::Denied(_))));
    // Its own space stays the default for new rows.
    assert!(bob.draft("sets", "b-1", set(9)).unwrap().space.is_none());

    grant(&mut s, Role::Editor);
    sync(&mut bob, &mut s, "bob", &mut store);
    let d = bob.draft("sets", "a-1", set(12)).unwrap();
    assert_eq!(d.place(), RowKey::in_space("gym", "sets", "a-1"), "the row's space, found where it lives");
    let op = record(&mut bob, d, &mut store);
    assert_eq!(op.space.as_deref(), Some("gym"));
    let report = sync(&mut bob, &mut s, "bob", &mut store);
    assert_eq!(report.applied, 1);
    assert_eq!(s.space_rows("gym")[&RowKey::new("sets", "a-1")].get("reps"), Some(&Value::Number(12.0)));
    assert_eq!(bob.row(&RowKey::in_space("gym", "sets", "a-1")).unwrap().get("reps"), Some(&Value::Number(12.0)));

    // Everything the engine knows came from the store, so it reopens the same.
    let again = Engine::open(store.snapshot(), Config::default()).unwrap();
    assert_eq!(again.all_visible(), bob.all_visible());
    assert_eq!(again.following(), bob.following());
}

#[test]
fn a_revoke_removes_the_rows_and_queued_edits_come_back_forbidden_with_their_content() {
    let mut s = gym();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    {
        let d = bob.draft("sets", "b-1", set(3)).unwrap();
        record(&mut bob, d, &mut store)
    };
    sync(&mut bob, &mut s, "bob", &mut store);
    assert_eq!(gym_rows(&bob).len(), 2);

    // The pull leaves with nothing queued; an edit in gym is made while it
    // is out, and the revoke lands before the server answers.
    let (t, step) = bob.start_sync(1_000);
    store.apply(&t);
    assert!(matches!(step, Step::Pull(_)));
    let queued = {
        let d = bob.draft("sets", "a-2", set(40)).unwrap();
        record(&mut bob, d, &mut store)
    };
    s.set_member(Some("alice"), "gym", "bob", None).unwrap();
    let report = run(&mut bob, &mut s, "bob", step, &mut store);

    assert!(gym_rows(&bob).is_empty(), "the space's rows left the replica");
    assert!(store.base.keys().all(|k| k.space != "gym"), "and the store");
    assert_eq!(bob.rows("sets").len(), 1, "the personal row stays");
    assert_eq!(report.rejected, 1);
    let rejected: Vec<&crate::store::Rejection> = bob.rejections().collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!((rejected[0].code.as_str(), rejected[0].reason.as_str()), (FORBIDDEN, "you are not a member of space gym"));
    assert_eq!(rejected[0].op, queued, "the edit comes back whole: the app can copy it elsewhere");
    assert_eq!(bob.pending_len(), 0);
    assert_eq!(bob.status(&RowKey::in_space("gym", "sets", "a-2")).phase, crate::attempt::Phase::Rejected);
    assert_eq!(bob.status_key("sets", "a-2").space, "gym", "with no space named, the status is the refused op's");
    // An edit there now is refused on the device, in the judge's words.
    let denied = bob.draft_in(Some("gym"), "sets", "a-2", set(1)).unwrap_err();
    assert!(matches!(&denied, EngineError::Denied(d) if d.code == FORBIDDEN), "{denied}");
    assert_eq!(bob.spaces().len(), 1);

    let again = Engine::open(store.snapshot(), Config::default()).unwrap();
    assert_eq!(again.all_visible(), bob.all_visible(), "reopened: the rows stay gone");

    // Granted again: the space comes back from its start.
    grant(&mut s, Role::Viewer);
    sync(&mut bob, &mut s, "bob", &mut store);
    assert_eq!(gym_rows(&bob).len(), 2);
    assert!(!bob.following().has_left("gym"));
}

#[test]
fn an_op_applied_just_before_a_revoke_leaves_no_row_behind() {
    let (mut s, mut bob, mut store) = bob_synced_in_gym(Role::Editor);
    let op = {
        let d = bob.draft("sets", "a-1", set(7)).unwrap();
        record(&mut bob, d, &mut store)
    };
    // The push is judged, then its answer is lost; the revoke comes next.
    let (t, Step::Push(req)) = bob.start_sync(1_000) else { panic!("a push first") };
    store.apply(&t);
    s.push("bob", &req).unwrap();
    bob.on_push_failed(&req.attempt_key, crate::attempt::Failure::Timeout, 1_000).unwrap();
    s.set_member(Some("alice"), "gym", "bob", None).unwrap();
    // A pull alone (as after a poke) learns of the revoke first.
    bob.pull_in_flight = None;
    let step = bob.pull_step(1_000);
    let report = run(&mut bob, &mut s, "bob", step, &mut store);
    assert_eq!(report.duplicate, 1, "the resend is answered from memory: applied");
    assert!(bob.rejections().next().is_none(), "never reported refused: it was applied");
    assert!(bob.row(&op.place()).is_none() && gym_rows(&bob).is_empty(), "and its row went with the space");
    assert!(store.base.keys().all(|k| k.space != "gym"));
}

#[test]
fn the_same_row_id_in_two_spaces_is_two_rows() {
    let mut s = gym();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    sync(&mut bob, &mut s, "bob", &mut store);
    // Bob names a personal row exactly like one of gym's.
    let mine = {
        let d = bob.draft_in(Some("~bob"), "sets", "a-1", set(1)).unwrap();
        record(&mut bob, d, &mut store)
    };
    assert_eq!(mine.space, None, "its own personal space is the unnamed one");
    sync(&mut bob, &mut s, "bob", &mut store);
    let copies: Vec<(String, Value)> = bob
        .rows("sets")
        .into_iter()
        .filter(|(k, _)| k.row_id == "a-1")
        .map(|(k, r)| (k.space.clone(), r.get("reps").cloned().unwrap()))
        .collect();
    assert_eq!(copies, vec![(String::new(), Value::Number(1.0)), ("gym".to_owned(), Value::Number(2.0))]);
    assert_eq!(bob.locate("sets", "a-1").unwrap().space, "", "the personal copy is found first");
    assert_eq!(s.rows("bob").len(), 1);
    assert_eq!(s.space_rows("gym")[&RowKey::new("sets", "a-1")].get("reps"), Some(&Value::Number(2.0)));
}

#[test]
fn a_device_from_before_spaces_keeps_its_rows_and_learns_its_space_in_one_pull() {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut e, mut store) = (engine("d"), Tables::default());
    {
        let d = e.draft("sets", "d-1", set(1)).unwrap();
        record(&mut e, d, &mut store)
    };
    sync(&mut e, &mut s, "u", &mut store);
    // As stored by a version that pulled `GET /v1/pull`: a cursor, no following.
    store.following = None;
    let mut meta = store.meta.clone().unwrap();
    meta.cursor = 1;
    store.meta = Some(meta);
    let mut old = Engine::open(store.snapshot(), Config::default()).unwrap();
    let before = old.all_visible();
    sync(&mut old, &mut s, "u", &mut store);
    assert_eq!(old.all_visible(), before);
    assert_eq!(old.following().personal.as_deref(), Some("~u"));
    assert_eq!(old.cursor(), 1);
}

#[test]
fn a_late_pull_answer_is_ignored_and_a_page_of_an_unfollowed_space_is_never_taken() {
    let s = gym();
    let (mut bob, mut store) = (engine("b"), Tables::default());
    let (_, Step::Pull(first)) = bob.start_sync(1_000) else { panic!() };
    let (_, Step::Pull(second)) = bob.start_sync(1_000) else { panic!() };
    assert!(bob.on_pull_response(&SpacesPullRequest { limit: Some(1), ..first }, s.pull_spaces("bob", &second), 1_000).is_none());
    // A server that sends rows of a space it never said the user joined.
    let mut answer = s.pull_spaces("alice", &SpacesPullRequest::default());
    answer.personal = Some("~bob".into());
    answer.joined.retain(|m| m.space == "~bob");
    let (t, _) = bob.on_pull_response(&second, answer, 1_000).unwrap();
    store.apply(&t);
    assert!(gym_rows(&bob).is_empty());
}

#[test]
fn rows_of_a_space_the_device_never_pulled_go_when_the_user_is_no_member() {
    let mut s = gym();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    // Bob writes in gym before his device ever pulled it: applied, folded in.
    let d = bob.draft_in(Some("gym"), "sets", "b-1", set(4)).unwrap();
    record(&mut bob, d, &mut store);
    let (t, Step::Push(req)) = bob.start_sync(1_000) else { panic!("a push first") };
    store.apply(&t);
    let (t, next) = bob.on_push_response(s.push("bob", &req).unwrap(), 1_000).unwrap();
    store.apply(&t);
    assert!(bob.row(&RowKey::in_space("gym", "sets", "b-1")).is_some());
    // Revoked before the pull: the pull asks about gym all the same, and the rows go.
    s.set_member(Some("alice"), "gym", "bob", None).unwrap();
    let Step::Pull(req) = next else { panic!("then a pull") };
    assert!(req.spaces.contains_key("gym"), "a space it holds rows of is followed, role unknown");
    run(&mut bob, &mut s, "bob", Step::Pull(req), &mut store);
    assert!(gym_rows(&bob).is_empty() && store.base.keys().all(|k| k.space != "gym"));
    assert!(bob.following().has_left("gym"));
}

/// The schema's declared rules (`writeOnce`, `ownersOnly`) are judged by
/// the core on the device before an edit is recorded and by the server, in
/// the same words: an editor's edit of an owners-only field, and a change
/// of a field written once, are refused at once on the device — and, sent
/// anyway, by the server, word for word.
#[test]
fn declared_rules_refuse_on_the_device_in_the_servers_words() {
    let text = r#"{"version": 1, "tables": {"sets": {"fields": {
        "exercise": {"type": "string", "required": true, "writeOnce": true},
        "weightKg": {"type": "number", "required": true},
        "reps": {"type": "integer", "required": true},
        "coachNote": {"type": "string", "ownersOnly": true}}}}}"#;
    let schema = Schema::from_json(text).unwrap();
    let mut s = MemoryServer::new(schema);
    s.create_space("gym", "alice").unwrap();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    bob.learn_schema(text.to_owned(), None).unwrap();
    sync(&mut bob, &mut s, "bob", &mut store);

    let mut noted = set(5);
    noted.insert("coachNote".into(), "go heavier".into());
    let device = bob.check_drafts(&[bob.draft_in(Some("gym"), "sets", "b-1", noted.clone()).unwrap()]).unwrap_err().1;
    assert_eq!(device.code.as_str(), "owners_only");
    assert_eq!(device.reason, "only owners of space gym may set sets.coachNote");
    // In bob's own space he is the owner.
    assert!(bob.check_drafts(&[bob.draft_in(None, "sets", "b-2", noted.clone()).unwrap()]).is_ok());

    let d = bob.draft_in(Some("gym"), "sets", "b-1", noted).unwrap();
    record(&mut bob, d, &mut store);
    let d = bob.draft_in(Some("gym"), "sets", "b-3", set(5)).unwrap();
    record(&mut bob, d, &mut store);
    sync(&mut bob, &mut s, "bob", &mut store);
    let refused: Vec<(String, String)> = bob.rejections().map(|r| (r.code.clone(), r.reason.clone())).collect();
    assert_eq!(refused, vec![(device.code.as_str().to_owned(), device.reason.clone())], "the server's words");

    let mut renamed = Fields::new();
    renamed.insert("exercise".into(), "bench".into());
    let d = bob.draft_in(Some("gym"), "sets", "b-3", renamed.clone()).unwrap();
    let device = bob.check_drafts(std::slice::from_ref(&d)).unwrap_err().1;
    assert_eq!(
        (device.code.as_str(), device.reason.as_str()),
        ("write_once", "sets.exercise can be written only once, and it is already set")
    );
    let mut same = Fields::new();
    same.insert("exercise".into(), "squat".into());
    assert!(bob.check_drafts(&[bob.draft_in(Some("gym"), "sets", "b-3", same).unwrap()]).is_ok(), "the same value is no change");
    record(&mut bob, d, &mut store);
    sync(&mut bob, &mut s, "bob", &mut store);
    let last = bob.rejections().last().map(|r| (r.code.clone(), r.reason.clone())).unwrap();
    assert_eq!(last, (device.code.as_str().to_owned(), device.reason));

    // The owner sets the note.
    let mut op = crate::workload::set_op("a", 9, 9, 5);
    op.space = Some("gym".into());
    op.fields.insert("coachNote".into(), "well done".into());
    let v = s.push("alice", &PushRequest { attempt_key: "a:9".into(), batch: vec![op] }).unwrap().verdicts;
    assert_eq!(v[0].outcome, crate::protocol::Outcome::Applied);
}

/// `ownRows`: in a shared space an editor changes or deletes only the rows
/// they created (the judge remembers the creator in the row's `_by` cell,
/// which travels with the row), refused on the device at once and by the
/// server in the same words; an owner changes any row.
#[test]
fn an_editor_changes_only_the_rows_they_created() {
    let text = r#"{"version": 1, "tables": {"sets": {"ownRows": true, "fields": {
        "exercise": {"type": "string", "required": true},
        "weightKg": {"type": "number", "required": true},
        "reps": {"type": "integer", "required": true}}}}}"#;
    let mut s = MemoryServer::new(Schema::from_json(text).unwrap());
    s.create_space("gym", "alice").unwrap();
    let mut op = crate::workload::set_op("a", 1, 1, 5);
    op.space = Some("gym".into());
    s.push("alice", &PushRequest { attempt_key: "a:1".into(), batch: vec![op] }).unwrap();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    bob.learn_schema(text.to_owned(), None).unwrap();
    sync(&mut bob, &mut s, "bob", &mut store);
    let key = RowKey::in_space("gym", "sets", "a-1");
    assert_eq!(bob.base(&key).and_then(|r| r.get(crate::protocol::CREATED_BY).cloned()), Some(Value::from("alice")));

    // Bob's own row: created, then changed again after a sync.
    let d = bob.draft_in(Some("gym"), "sets", "b-1", set(5)).unwrap();
    assert!(bob.check_drafts(std::slice::from_ref(&d)).is_ok());
    record(&mut bob, d, &mut store);
    sync(&mut bob, &mut s, "bob", &mut store);
    let d = bob.draft_in(Some("gym"), "sets", "b-1", set(6)).unwrap();
    assert!(bob.check_drafts(std::slice::from_ref(&d)).is_ok(), "his own row");
    record(&mut bob, d, &mut store);

    // Alice's row: refused at once, and by the server in the same words.
    let d = bob.draft("sets", "a-1", set(9)).unwrap();
    let device = bob.check_drafts(std::slice::from_ref(&d)).unwrap_err().1;
    assert_eq!(
        (device.code.as_str(), device.reason.as_str()),
        ("own_rows", "in space gym, editors may change only the rows they created")
    );
    record(&mut bob, d, &mut store);
    let gone = bob.draft_deleted(None, "sets", "a-1", true).unwrap();
    assert_eq!(bob.check_drafts(std::slice::from_ref(&gone)).unwrap_err().1, device, "nor delete it");
    sync(&mut bob, &mut s, "bob", &mut store);
    let refused: Vec<(String, String)> = bob.rejections().map(|r| (r.code.clone(), r.reason.clone())).collect();
    assert_eq!(refused, vec![(device.code.as_str().to_owned(), device.reason.clone())]);
    assert_eq!(bob.base(&RowKey::in_space("gym", "sets", "b-1")).and_then(|r| r.get("reps").cloned()), Some(Value::from(6)));

    // The owner changes bob's row.
    let mut op = crate::workload::set_op("a", 7, 2, 8);
    op.space = Some("gym".into());
    op.row_id = "b-1".into();
    let v = s.push("alice", &PushRequest { attempt_key: "a:7".into(), batch: vec![op] }).unwrap().verdicts;
    assert_eq!(v[0].outcome, crate::protocol::Outcome::Applied);
}

/// An op that moves no mark is applied without a check (PROTOCOL §3, its
/// first step), the sender's rules too: an editor's late op on an owner's
/// row, or of an owners-only field, that loses every field to newer marks
/// was refused (and that refusal remembered forever), while `writeOnce`
/// and ranges let it through.
#[test]
fn an_op_that_moves_nothing_is_applied_whatever_the_senders_rules() {
    let text = r#"{"version": 1, "tables": {"sets": {"ownRows": true, "fields": {
        "exercise": {"type": "string", "required": true},
        "weightKg": {"type": "number", "required": true},
        "reps": {"type": "integer", "required": true},
        "coachNote": {"type": "string", "ownersOnly": true}}}}}"#;
    let mut s = MemoryServer::new(Schema::from_json(text).unwrap());
    s.create_space("gym", "alice").unwrap();
    let mut op = crate::workload::set_op("a", 1, 1, 50);
    op.space = Some("gym".into());
    op.fields.insert("coachNote".into(), "well done".into());
    s.push("alice", &PushRequest { attempt_key: "a:1".into(), batch: vec![op.clone()] }).unwrap();
    grant(&mut s, Role::Editor);
    // Bob's ops on alice's row, older than every mark on it.
    let late = |n: usize, fields: &[&str]| {
        let mut o = op.clone();
        o.op_id = crate::protocol::OpId::new(format!("b:{n}"));
        o.at = 10;
        o.fields.retain(|k, _| fields.contains(&k.as_str()));
        o
    };
    let batch = vec![late(1, &["reps"]), late(2, &["coachNote"])];
    let v = s.push("bob", &PushRequest { attempt_key: "b:1".into(), batch }).unwrap().verdicts;
    assert_eq!(
        v.iter().map(|v| v.outcome.clone()).collect::<Vec<_>>(),
        [crate::protocol::Outcome::Applied, crate::protocol::Outcome::Applied]
    );
    // One that would move a mark is still refused.
    let mut moving = late(3, &["reps"]);
    moving.at = 60;
    let v = s.push("bob", &PushRequest { attempt_key: "b:2".into(), batch: vec![moving] }).unwrap().verdicts;
    assert!(matches!(&v[0].outcome, crate::protocol::Outcome::Rejected { code, .. } if code == "own_rows"), "{:?}", v[0].outcome);
}

/// The device's check and the server's verdict agree, word for word, over a
/// seeded corpus of an editor's edits of their own rows and an owner's, with
/// fields written once, owners-only fields and deletes.
#[test]
fn declared_rules_on_the_device_equal_the_servers_verdicts_over_a_corpus() {
    let text = r#"{"version": 1, "tables": {"sets": {"ownRows": true, "fields": {
        "exercise": {"type": "string", "required": true, "writeOnce": true},
        "weightKg": {"type": "number", "required": true},
        "reps": {"type": "integer", "required": true, "max": 100},
        "coachNote": {"type": "string", "ownersOnly": true}}}}}"#;
    let mut s = MemoryServer::new(Schema::from_json(text).unwrap());
    s.create_space("gym", "alice").unwrap();
    let batch: Vec<Op> = (1..=3)
        .map(|i| {
            let mut op = crate::workload::set_op("a", i, i, i as u64);
            op.space = Some("gym".into());
            op
        })
        .collect();
    s.push("alice", &PushRequest { attempt_key: "a:1".into(), batch }).unwrap();
    grant(&mut s, Role::Editor);
    let (mut bob, mut store) = (engine("b"), Tables::default());
    bob.learn_schema(text.to_owned(), None).unwrap();
    sync(&mut bob, &mut s, "bob", &mut store);

    let mut rng = crate::ids::SplitMix::new(11);
    let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
    let rows = ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"];
    let values: [(&str, Vec<Value>); 5] = [
        ("exercise", vec!["squat".into(), "bench".into(), Value::Null]),
        ("weightKg", vec![80.into(), 90.into()]),
        ("reps", vec![5.into(), 6.into(), 500.into()]),
        ("coachNote", vec!["go".into(), Value::Null]),
        ("_deleted", vec![true.into(), false.into()]),
    ];
    let mut seen: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for n in 0..400 {
        let row = rows[pick(rows.len())];
        let mut f = Fields::new();
        for _ in 0..=pick(3) {
            let (name, vs) = &values[pick(values.len())];
            f.insert((*name).into(), vs[pick(vs.len())].clone());
        }
        let Ok(d) = bob.draft_in(Some("gym"), "sets", row, f) else { continue };
        let device = bob.check_drafts(std::slice::from_ref(&d)).err().map(|(_, r)| (r.code.as_str().to_owned(), r.reason));
        let op = record(&mut bob, d, &mut store);
        sync(&mut bob, &mut s, "bob", &mut store);
        let verdict = bob.rejections().find(|r| r.op.op_id == op.op_id).map(|r| (r.code.clone(), r.reason.clone()));
        assert_eq!(device, verdict, "edit {n} of {row}: {:?}", op.fields);
        *seen.entry(verdict.map_or("accepted".to_owned(), |v| v.0)).or_default() += 1;
    }
    for code in ["accepted", "own_rows", "owners_only", "write_once", "out_of_range"] {
        assert!(seen.get(code).copied().unwrap_or(0) >= 5, "corpus too narrow: {seen:?}");
    }
}

/// Over a lazy store, a pull that says the user left a space reads every
/// base row first (PROTOCOL §7, "The lazy store"): the space's rows go from
/// the store too, not only those the device happened to hold.
#[test]
fn a_lazy_device_that_leaves_a_space_takes_every_row_of_it_away() {
    let (mut s, bob, mut store) = bob_synced_in_gym(Role::Viewer);
    assert_eq!(gym_rows(&bob).len(), 2);
    s.set_member(Some("alice"), "gym", "bob", None).unwrap();

    // Reopened over a lazy store: no base row held.
    let mut bob = Engine::open(store.lazy_snapshot(), Config::default()).unwrap();
    sync(&mut bob, &mut s, "bob", &mut store);
    assert!(store.base.keys().all(|k| k.space != "gym"), "the space's rows left the store");
    let again = Engine::open(store.snapshot(), Config::default()).unwrap();
    assert!(gym_rows(&again).is_empty());
}
