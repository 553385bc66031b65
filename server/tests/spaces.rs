//! PROTOCOL §3c and §4b over real HTTP, on SQLite and on PostgreSQL: shared
//! spaces with roles judged per op, membership managed by owners and by the
//! admin credential, one pull for every followed space (joined, left, roles),
//! grant and revoke mid-sync, a batch spanning spaces, the upgrade of data
//! stored before spaces, and isolation under forged names and ids.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "an-admin-token-of-at-least-32-characters";

/// As [`invite`], and an invited `member` accepts at once: the membership is set.
async fn share(t: &TestServer, user: &str, space: &str, member: &str, role: Value) -> (u16, Value) {
    let (status, body) = invite(t, user, space, member, role).await;
    if status == 200 && body["invited"] == true {
        let (accepted, answer) = accept(t, member, space).await;
        assert_eq!(accepted, 200, "{answer}");
    }
    (status, body)
}

/// The rowIds a pull answer carries for `space`.
fn row_ids(answer: &Value, space: &str) -> Vec<String> {
    answer["spaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["space"] == space)
        .flat_map(|p| p["changes"].as_array().unwrap().iter().map(|c| c["rowId"].as_str().unwrap().to_owned()))
        .collect()
}

fn codes(verdicts: &[Value]) -> Vec<&str> {
    verdicts.iter().map(|v| v["code"].as_str().unwrap_or(v["status"].as_str().unwrap())).collect()
}

/// Every role over HTTP: owners and editors write, viewers get `read_only`
/// with the row, non-members and forged space names `forbidden` without it;
/// only owners manage members; a space keeps an owner; a personal space's
/// own user cannot be changed.
async fn each_role_is_judged_per_op(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let (status, body) = post(&t, "/v1/spaces", "owner", json!({"space": "gym"})).await;
    assert_eq!((status, &body), (200, &json!({"space": "gym", "role": "owner"})));
    assert_eq!(post(&t, "/v1/spaces", "owner", json!({"space": "gym"})).await.0, 200, "a retried create");
    assert_eq!(post(&t, "/v1/spaces", "other", json!({"space": "gym"})).await.0, 409, "the name is taken");
    assert_eq!(post(&t, "/v1/spaces", "owner", json!({"space": "~owner"})).await.0, 400, "no shared name is personal");
    assert_eq!(share(&t, "owner", "gym", "ed", json!("editor")).await.0, 200);
    assert_eq!(share(&t, "owner", "gym", "vi", json!("viewer")).await.0, 200);

    let v = t.push_ok("owner", &[in_space("gym", full("o:1", "r-1", 10, 5))]).await;
    assert_eq!(statuses(&v), ["applied"]);
    let v = t.push_ok("ed", &[in_space("gym", op("e:1", "r-1", 11, json!({"reps": 6})))]).await;
    assert_eq!(statuses(&v), ["applied"]);
    let v = t.push_ok("vi", &[in_space("gym", op("v:1", "r-1", 12, json!({"reps": 7})))]).await;
    assert_eq!(codes(&v), ["read_only"]);
    assert_eq!(v[0]["reason"], "you are a viewer of space gym: viewers cannot edit its rows");
    assert_eq!(v[0]["row"]["fields"]["reps"], 6, "a viewer may read the row");
    for (i, space) in ["gym", "nowhere", "~owner"].into_iter().enumerate() {
        let v = t.push_ok("out", &[in_space(space, op(&format!("x:{i}"), "r-1", 12, json!({"reps": 7})))]).await;
        assert_eq!(codes(&v), ["forbidden"], "{space}");
        assert_eq!(v[0]["reason"], format!("you are not a member of space {space}"));
        assert!(v[0]["row"].is_null(), "a non-member never sees a row: {v:?}");
    }
    assert_eq!(pull(&t, "out", json!({})).await["spaces"], json!([]), "and pulls none");

    let (status, body) = share(&t, "ed", "gym", "out", json!("viewer")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "only owners manage");
    assert_eq!(
        share(&t, "out", "nowhere", "x", json!("owner")).await.0,
        403,
        "the same for a space that does not exist"
    );
    let (status, body) = share(&t, "owner", "gym", "owner", json!("editor")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("conflict")), "the last owner stays: {body}");
    assert_eq!(share(&t, "owner", "~owner", "owner", json!("viewer")).await.0, 400);
    assert_eq!(share(&t, "owner", "gym", "vi", json!("boss")).await.0, 400);
    let (status, body) = get(&t, "/v1/spaces/members?space=gym", "vi").await;
    assert_eq!(status, 200);
    assert_eq!(
        body["members"],
        json!([{"user": "ed", "role": "editor"}, {"user": "owner", "role": "owner"}, {"user": "vi", "role": "viewer"}])
    );
    assert_eq!(get(&t, "/v1/spaces/members?space=gym", "out").await.0, 403);
    let (_, mine) = get(&t, "/v1/spaces", "vi").await;
    assert_eq!(mine["spaces"], json!([{"space": "~vi", "role": "owner"}, {"space": "gym", "role": "viewer"}]));
    t.stop().await;
}
both!(each_role_is_judged_per_op);

/// One pull serves every space: a grant backfills the space from its start
/// (`joined`), a role change is named (`roles`), a revoke is `left` and no
/// row of the space leaves again; a device in many spaces with nothing new
/// gets an empty answer. An op refused for permission stays refused after a
/// later grant, word for word.
async fn grant_and_revoke_mid_sync(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "diary"})).await;
    t.push_ok("alice", &[in_space("diary", full("a:1", "s-1", 10, 5)), in_space("diary", full("a:2", "s-2", 10, 6))])
        .await;
    t.push_ok("alice", &[full("a:3", "mine", 10, 7)]).await;

    // The coach is not a member yet: the edit is refused, and stays refused.
    let early = in_space("diary", op("c:1", "s-1", 20, json!({"reps": 9})));
    assert_eq!(codes(&t.push_ok("coach", std::slice::from_ref(&early)).await), ["forbidden"]);
    let first = pull(&t, "coach", json!({})).await;
    assert_eq!(first["joined"], json!([{"space": "~coach", "role": "owner"}]));
    assert_eq!(first["spaces"], json!([]));

    // Granted as viewer: the next pull backfills the whole space from its start.
    assert_eq!(share(&t, "alice", "diary", "coach", json!("viewer")).await.0, 200);
    let grant = pull(&t, "coach", json!({"~coach": {"cursor": 0, "role": "owner"}})).await;
    assert_eq!(grant["joined"], json!([{"space": "diary", "role": "viewer"}]));
    assert_eq!(row_ids(&grant, "diary"), ["s-1", "s-2"]);
    assert!(row_ids(&grant, "~alice").is_empty(), "alice's personal space is not shared");
    let cursor = grant["spaces"][0]["cursor"].as_u64().unwrap();
    assert_eq!(cursor, 2);

    // Nothing new: an empty answer.
    let follow = json!({"~coach": {"cursor": 0, "role": "owner"}, "diary": {"cursor": cursor, "role": "viewer"}});
    let quiet = pull(&t, "coach", follow.clone()).await;
    assert_eq!(
        (&quiet["spaces"], &quiet["joined"], &quiet["roles"], &quiet["left"]),
        (&json!([]), &json!([]), &json!([]), &json!([]))
    );

    // Promoted: the role is named; the early refusal stays, a new edit goes in.
    assert_eq!(share(&t, "alice", "diary", "coach", json!("editor")).await.0, 200);
    assert_eq!(pull(&t, "coach", follow.clone()).await["roles"], json!([{"space": "diary", "role": "editor"}]));
    let again = t.push_ok("coach", &[early, in_space("diary", op("c:2", "s-1", 21, json!({"reps": 10})))]).await;
    assert_eq!(codes(&again), ["forbidden", "applied"]);
    assert_eq!(again[0]["reason"], "you are not a member of space diary");
    let alice =
        pull(&t, "alice", json!({"diary": {"cursor": 2, "role": "owner"}, "~alice": {"cursor": 1, "role": "owner"}}))
            .await;
    assert_eq!(row_ids(&alice, "diary"), ["s-1"], "the coach's edit reaches the owner");

    // Revoked: the space is left, its rows never leave again, edits are refused.
    assert_eq!(share(&t, "alice", "diary", "coach", Value::Null).await.0, 200);
    t.push_ok("alice", &[in_space("diary", op("a:4", "s-2", 30, json!({"reps": 11})))]).await;
    let gone = pull(&t, "coach", follow).await;
    assert_eq!(gone["left"], json!(["diary"]));
    assert!(row_ids(&gone, "diary").is_empty(), "{gone}");
    let late = t.push_ok("coach", &[in_space("diary", op("c:3", "s-2", 31, json!({"reps": 12})))]).await;
    assert_eq!(codes(&late), ["forbidden"]);
    // Asked again later, the refusal carries no row of a space the coach left.
    let recalled = t.verdicts_ok("coach", &["c:3"]).await;
    assert_eq!((recalled[0]["status"].as_str(), recalled[0]["row"].is_null()), (Some("rejected"), true));
    t.stop().await;
}
both!(grant_and_revoke_mid_sync);

/// A batch spanning spaces: each space's head moves on its own; the same
/// rowId in two spaces is two rows; verdicts in batch order.
async fn a_batch_spans_spaces(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    for s in ["team-b", "team-a"] {
        post(&t, "/v1/spaces", "u", json!({"space": s})).await;
    }
    let v = t
        .push_ok(
            "u",
            &[
                in_space("team-b", full("d:1", "r", 10, 1)),
                full("d:2", "r", 10, 2),
                in_space("team-a", full("d:3", "r", 10, 3)),
                in_space("team-b", full("d:4", "q", 10, 4)),
                in_space("~u", op("d:5", "r", 11, json!({"reps": 5}))),
            ],
        )
        .await;
    assert_eq!(statuses(&v), ["applied"; 5]);
    let all = pull(&t, "u", json!({})).await;
    let cursors: Vec<(String, u64)> = all["spaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["space"].as_str().unwrap().to_owned(), p["cursor"].as_u64().unwrap()))
        .collect();
    assert_eq!(cursors, [("team-a".to_owned(), 1), ("team-b".to_owned(), 2), ("~u".to_owned(), 2)]);
    let reps = |space: &str| -> i64 {
        let page = all["spaces"].as_array().unwrap().iter().find(|p| p["space"] == space).unwrap();
        page["changes"].as_array().unwrap().iter().find(|c| c["rowId"] == "r").unwrap()["fields"]["reps"]
            .as_i64()
            .unwrap()
    };
    assert_eq!((reps("team-a"), reps("team-b"), reps("~u")), (3, 1, 5));
    // The old pull serves the personal space alone, as before spaces.
    assert_eq!(t.pull_all("u").await.len(), 1);
    t.stop().await;
}
both!(a_batch_spans_spaces);

/// Isolation: another user's rowIds and opIds, and forged space names, touch
/// nothing of theirs; a pull names only the caller's spaces; paging within
/// one pull's limit reaches every change.
async fn forged_names_and_ids_touch_nothing(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "private"})).await;
    t.push_ok("alice", &[in_space("private", full("a:1", "r-1", 10, 5)), full("a:2", "r-2", 10, 5)]).await;
    // Mallory reuses alice's opIds and rowIds in her own space and names alice's spaces.
    let v = t
        .push_ok(
            "mallory",
            &[
                full("a:1", "r-1", 99, 100),
                in_space("private", full("a:2", "r-1", 99, 100)),
                in_space("~alice", full("m:3", "r-2", 99, 100)),
                in_space("~mallory", full("m:4", "r-2", 99, 100)),
            ],
        )
        .await;
    assert_eq!(codes(&v), ["applied", "forbidden", "forbidden", "applied"]);
    let alice = pull(&t, "alice", json!({})).await;
    for page in alice["spaces"].as_array().unwrap() {
        for c in page["changes"].as_array().unwrap() {
            assert_eq!(c["fields"]["reps"], 5, "alice's rows are untouched: {alice}");
        }
    }
    let mallory = pull(&t, "mallory", json!({"private": {"cursor": 0}, "~alice": {"cursor": 0}})).await;
    assert_eq!(mallory["left"], json!(["private", "~alice"]), "following a space does not make a member");
    assert!(row_ids(&mallory, "private").is_empty() && row_ids(&mallory, "~alice").is_empty());
    let (status, _) = post(&t, "/v1/pull", "mallory", json!({"spaces": {"bad name": {"cursor": 0}}})).await;
    assert_eq!(status, 400);
    let (status, _) = post(&t, "/v1/pull", "mallory", json!({"spaces": {}, "limit": 0})).await;
    assert_eq!(status, 400);

    // Paging: a limit of 2 over 5 changes in two spaces.
    post(&t, "/v1/spaces", "p", json!({"space": "s2"})).await;
    t.push_ok("p", &[full("p:1", "a", 1, 1), full("p:2", "b", 1, 1), in_space("s2", full("p:3", "c", 1, 1))]).await;
    t.push_ok("p", &[in_space("s2", full("p:4", "d", 1, 1)), in_space("s2", full("p:5", "e", 1, 1))]).await;
    let mut follow = serde_json::Map::new();
    let mut seen = Vec::new();
    for _ in 0..10 {
        let (status, page) =
            post(&t, "/v1/pull", "p", json!({"spaces": Value::Object(follow.clone()), "limit": 2})).await;
        assert_eq!(status, 200, "{page}");
        for m in page["joined"].as_array().unwrap() {
            follow.insert(m["space"].as_str().unwrap().to_owned(), json!({"cursor": 0, "role": m["role"]}));
        }
        let mut n = 0;
        for p in page["spaces"].as_array().unwrap() {
            n += p["changes"].as_array().unwrap().len();
            seen.extend(row_ids(&page, p["space"].as_str().unwrap()));
            follow[p["space"].as_str().unwrap()]["cursor"] = p["cursor"].clone();
        }
        assert!(n <= 2, "{page}");
        if !page["hasMore"].as_bool().unwrap() {
            break;
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
    t.stop().await;
}
both!(forged_names_and_ids_touch_nothing);

/// The admin credential: off by default (404); with it, the app's backend
/// creates spaces for users and manages any space; a wrong token is 401.
async fn the_admin_credential_manages_any_space(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let plain = TestServer::start(config(&database)).await;
    let r = plain.http.post(plain.url("/v1/admin/spaces")).bearer_auth(ADMIN).body("{}").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404, "never on by default");
    plain.stop().await;
    let mut c = config(&database);
    c.admin_token = Some(ADMIN.to_owned());
    let t = TestServer::start(c).await.owning_database();
    let admin = |path: &str, token: &str, body: Value| {
        let r = t.http.post(t.url(path)).bearer_auth(token).json(&body);
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(admin("/v1/admin/spaces", "wrong", json!({"space": "club", "owner": "coach"})).await.0, 401);
    assert_eq!(admin("/v1/admin/spaces", "dev:coach", json!({"space": "club", "owner": "coach"})).await.0, 401);
    let (status, body) = admin("/v1/admin/spaces", ADMIN, json!({"space": "club", "owner": "coach"})).await;
    assert_eq!((status, &body), (200, &json!({"space": "club", "role": "owner"})));
    let (status, _) =
        admin("/v1/admin/spaces/members", ADMIN, json!({"space": "club", "user": "ann", "role": "editor"})).await;
    assert_eq!(status, 200);
    let (status, _) =
        admin("/v1/admin/spaces/members", ADMIN, json!({"space": "none", "user": "ann", "role": "editor"})).await;
    assert_eq!(status, 404, "an admin is told there is no such space");
    assert_eq!(statuses(&t.push_ok("ann", &[in_space("club", full("n:1", "r", 1, 1))]).await), ["applied"]);
    let r = t.http.get(t.url("/v1/admin/spaces/members?space=club")).bearer_auth(ADMIN).send().await.unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["members"], json!([{"user": "ann", "role": "editor"}, {"user": "coach", "role": "owner"}]));
    // Signing in as a user never gives the admin's rights.
    assert_eq!(share(&t, "ann", "club", "eve", json!("owner")).await.0, 403);
    t.stop().await;
}
both!(the_admin_credential_manages_any_space);

/// Live pokes fire for every space a user belongs to, and when their
/// memberships change (once per change: on PostgreSQL a process hears its
/// own `NOTIFY` back, and skips it); never for a space they are not in.
async fn pokes_follow_membership(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "alice", json!({"space": "shared"})).await;
    let mut events = t.http.get(t.url("/v1/events?token=dev:bob")).send().await.unwrap();
    let mut seen = String::new();
    read_until(&mut events, &mut seen, "data: 0\n").await;
    t.push_ok("alice", &[in_space("shared", full("a:1", "r", 1, 1))]).await;
    share(&t, "alice", "shared", "bob", json!("viewer")).await;
    read_until(&mut events, &mut seen, "data: members\n").await;
    t.push_ok("alice", &[in_space("shared", full("a:2", "q", 1, 1))]).await;
    read_until(&mut events, &mut seen, "data: 2 shared\n").await;
    assert!(!seen.contains("data: 1 shared"), "no poke before bob was a member: {seen:?}");
    seen.clear();
    share(&t, "alice", "shared", "bob", Value::Null).await;
    read_until(&mut events, &mut seen, "data: members\n").await;
    // Removed: her next push pokes him no more; his own push still does.
    seen.clear();
    t.push_ok("alice", &[in_space("shared", full("a:3", "p", 1, 1))]).await;
    t.push_ok("bob", &[full("b:1", "mine", 1, 1)]).await;
    read_until(&mut events, &mut seen, "data: 1\n").await;
    assert!(!seen.contains("shared"), "no poke of a space he left: {seen:?}");
    // A personal space shared with him: her own pushes poke him too.
    seen.clear();
    share(&t, "alice", "~alice", "bob", json!("viewer")).await;
    read_until(&mut events, &mut seen, "data: members\n").await;
    t.push_ok("alice", &[full("a:4", "own", 1, 1)]).await;
    read_until(&mut events, &mut seen, "data: 1 ~alice\n").await;
    assert_eq!(seen.matches("data: members\n").count(), 1, "one poke per change: {seen:?}");
    t.stop().await;
}
both!(pokes_follow_membership);

/// Data stored before spaces: a database at migration 2 with rows, heads and
/// verdicts per user is upgraded in place; every user's rows are their
/// personal space's, pulls and replays answer as before.
async fn data_stored_before_spaces_is_upgraded_in_place(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    old_database(b, &database).await;
    let t = TestServer::start(config(&database)).await.owning_database();
    // The rows are where they were, in each user's personal space.
    let rows = t.pull_all("a").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["rowId"], "r-1");
    let all = pull(&t, "~a", json!({})).await;
    assert!(row_ids(&all, "~~a").contains(&"r-1".to_owned()), "a user id starting with ~ keeps its rows: {all}");
    // Replays answer from memory; the heads go on from where they were.
    assert_eq!(statuses(&t.push_ok("a", &[full("o:1", "r-1", 10, 5)]).await), ["duplicate"]);
    t.push_ok("a", &[full("o:2", "r-2", 11, 5)]).await;
    let page = pull(&t, "a", json!({"~a": {"cursor": 7}})).await;
    assert_eq!((row_ids(&page, "~a"), page["spaces"][0]["cursor"].as_u64()), (vec!["r-2".to_owned()], Some(8)));
    assert_eq!(t.counts("a").await.head, 8);
    let v = t.verdicts_ok("a", &["o:9"]).await;
    assert_eq!(v[0]["status"], "rejected");
    assert_eq!(v[0]["row"]["fields"]["reps"], 5, "a rejection remembered before spaces is recalled with its row");
    t.stop().await;
}
both!(data_stored_before_spaces_is_upgraded_in_place);

/// Builds a database as a server before spaces left it (migrations 1 and 2
/// applied), with users `a` and `~a` holding the same rowId.
async fn old_database(b: Backend, database: &str) {
    use sqlx::Connection;
    let now = 1_700_000_000_000i64;
    let (init, verdict_rows, migrations_table) = match b {
        Backend::Sqlite => (
            include_str!("../migrations/sqlite/0001_init.sql"),
            include_str!("../migrations/sqlite/0002_verdict_rows.sql"),
            "CREATE TABLE marksync_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        ),
        Backend::Postgres => (
            include_str!("../migrations/postgres/0001_init.sql"),
            include_str!("../migrations/postgres/0002_verdict_rows.sql"),
            "CREATE TABLE marksync_migrations (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
        ),
    };
    let row = r#"{"exercise":"squat","reps":5,"weightKg":80}"#;
    let marks =
        r#"{"exercise":{"at":10,"opId":"o:1"},"reps":{"at":10,"opId":"o:1"},"weightKg":{"at":10,"opId":"o:1"}}"#;
    let statements = [
        migrations_table.to_owned(),
        format!("INSERT INTO marksync_migrations VALUES (1, {now}), (2, {now})"),
        format!("INSERT INTO rows VALUES ('a', 'sets', 'r-1', '{row}', '{marks}', 7), ('~a', 'sets', 'r-1', '{row}', '{marks}', 3)"),
        "INSERT INTO heads VALUES ('a', 7), ('~a', 3)".to_owned(),
        format!("INSERT INTO verdicts (user_id, op_id, status, reason, code, decided_at) VALUES ('a', 'o:1', 'applied', NULL, NULL, {now})"),
        format!("INSERT INTO verdicts (user_id, op_id, status, reason, code, table_name, row_id, decided_at) VALUES ('a', 'o:9', 'rejected', 'reps must be at most 100', 'out_of_range', 'sets', 'r-1', {now})"),
    ];
    macro_rules! run {
        ($conn:expr) => {{
            let mut conn = $conn;
            sqlx::raw_sql(init).execute(&mut conn).await.unwrap();
            sqlx::raw_sql(verdict_rows).execute(&mut conn).await.unwrap();
            for s in &statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(s.as_str())).execute(&mut conn).await.unwrap();
            }
            conn.close().await.unwrap();
        }};
    }
    match b {
        Backend::Sqlite => {
            let options = database.parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().create_if_missing(true);
            run!(sqlx::SqliteConnection::connect_with(&options).await.unwrap())
        }
        Backend::Postgres => run!(sqlx::PgConnection::connect(database).await.unwrap()),
    }
}

/// Pushes spanning the same spaces in opposite orders, at once, many times:
/// the spaces' locks are taken in one order, so none waits for another in a
/// cycle (PostgreSQL would abort one as a deadlock: a 500). Each space's
/// seqs stay dense and every op is applied once.
async fn pushes_spanning_spaces_in_opposite_orders_never_deadlock(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    for s in ["left", "right"] {
        post(&t, "/v1/spaces", "u", json!({"space": s})).await;
        share(&t, "u", s, "v", json!("editor")).await;
    }
    let rounds = 30;
    let mut tasks = Vec::new();
    for (user, order) in [("u", ["left", "right"]), ("v", ["right", "left"])] {
        let (http, url) = (t.http.clone(), t.url("/v1/push"));
        tasks.push(tokio::spawn(async move {
            for i in 0..rounds {
                let batch: Vec<Value> = order
                    .iter()
                    .map(|s| in_space(s, full(&format!("{user}:{s}:{i}"), &format!("{user}-{s}-{i}"), 1, 1)))
                    .collect();
                let r = http
                    .post(&url)
                    .bearer_auth(format!("dev:{user}"))
                    .json(&json!({"attemptKey": format!("{user}:a{i}"), "batch": batch}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = pull(&t, "u", json!({})).await;
    for s in ["left", "right"] {
        let page = all["spaces"].as_array().unwrap().iter().find(|p| p["space"] == s).unwrap();
        assert_eq!(page["cursor"], 2 * rounds, "{s}: one seq per op, none lost");
        assert_eq!(page["changes"].as_array().unwrap().len(), 2 * rounds);
    }
    t.stop().await;
}
both!(pushes_spanning_spaces_in_opposite_orders_never_deadlock);

/// A revoke and the member's pushes race: every op the server applied was
/// judged before the revoke committed, and every op judged after it is
/// refused — no write of the revoked member lands after the revoke.
async fn a_revoke_is_ordered_against_every_push_of_the_space(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    post(&t, "/v1/spaces", "owner", json!({"space": "race"})).await;
    share(&t, "owner", "race", "ed", json!("editor")).await;
    let (http, url) = (t.http.clone(), t.url("/v1/push"));
    let pusher = tokio::spawn(async move {
        let mut codes = Vec::new();
        for i in 0..60 {
            let batch = [in_space("race", full(&format!("e:{i}"), &format!("e-{i}"), 1, 1))];
            let r = http
                .post(&url)
                .bearer_auth("dev:ed")
                .json(&json!({"attemptKey": format!("e:a{i}"), "batch": batch}))
                .send()
                .await
                .unwrap();
            let body: Value = r.json().await.unwrap();
            codes.push(body["verdicts"][0]["code"].as_str().unwrap_or("applied").to_owned());
        }
        codes
    });
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(share(&t, "owner", "race", "ed", Value::Null).await.0, 200);
    let codes = pusher.await.unwrap();
    // Applied, then forbidden, never applied again after the first refusal.
    let first_refusal = codes.iter().position(|c| c == "forbidden").unwrap_or(codes.len());
    assert!(codes[first_refusal..].iter().all(|c| c == "forbidden"), "{codes:?}");
    let rows = pull(&t, "owner", json!({})).await;
    assert_eq!(row_ids(&rows, "race").len(), first_refusal, "exactly the applied ops wrote rows");
    t.stop().await;
}
both!(a_revoke_is_ordered_against_every_push_of_the_space);
