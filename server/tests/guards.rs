//! Promises no single feature test would notice breaking: no bearer token
//! or admin credential ever reaches a log line; a verdict, once remembered,
//! is never deleted; `decided_at` is the server's clock at judgement and
//! stays as it was written.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::process::plain;
use common::{config, fresh_database, full, jwt, op, post, unique, Backend, TestServer};
use serde_json::{json, Value};
use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, BufReader};

const JWT_SECRET: &str = "guard-jwt-secret-that-must-stay-unlogged";
const ADMIN: &str = "guard-admin-credential-of-more-than-32-characters";

/// A server process with every log on (`RUST_LOG=trace`), its output (the
/// log goes to stdout; stderr too, should anything write there) gathered.
struct Logged {
    child: tokio::process::Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Logged {
    async fn start(database: &str) -> Logged {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_marksync-server"))
            .args(["--listen", "127.0.0.1:0", "--database", database, "--dev-auth", "--rate-limit", "0"])
            .env("RUST_LOG", "trace")
            .env("NO_COLOR", "1")
            .env("MARKSYNC_JWT_SECRET", JWT_SECRET)
            .env("MARKSYNC_ADMIN_TOKEN", ADMIN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the server binary starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let log = Arc::new(Mutex::new(String::new()));
        let mut errors = BufReader::new(child.stderr.take().unwrap()).lines();
        let gathered = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok(Some(line)) = errors.next_line().await {
                gathered.lock().unwrap().push_str(&format!("{}\n", plain(&line)));
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let addr = loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .expect("the server says where it listens within 30 s")
                .unwrap()
                .unwrap_or_else(|| panic!("the server stopped:\n{}", log.lock().unwrap()));
            let line = plain(&line);
            log.lock().unwrap().push_str(&format!("{line}\n"));
            if line.contains("listening") {
                if let Some(at) = line.split_whitespace().find_map(|w| w.strip_prefix("addr=")) {
                    break at.to_owned();
                }
            }
        };
        let gathered = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                gathered.lock().unwrap().push_str(&format!("{}\n", plain(&line)));
            }
        });
        Logged { child, url: format!("http://{addr}"), log }
    }

    /// Everything logged so far.
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// A realistic day of requests — pushes, pulls, verdicts, the schema, event
/// streams (token in the header and in `?token=`), spaces and members, the
/// admin routes — with dev tokens, JWTs, the admin credential and bad ones of
/// each, against a server logging at `trace`: none of those secrets (nor the
/// JWT secret) is in its log.
async fn no_secret_reaches_a_log_line(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut server = Logged::start(&database).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let url = |path: &str| format!("{}{path}", server.url);
    let dev = "dev:guard-ann".to_owned();
    let bob = "dev:guard-bob".to_owned();
    let good = jwt(JWT_SECRET, "guard-ann", 600);
    let expired = jwt(JWT_SECRET, "guard-ann", -600);
    let forged = jwt("not-the-secret", "guard-ann", 600);
    let bad = "guard-bad-token-never-valid".to_owned();
    let wrong_admin = "guard-wrong-admin-credential-of-32-characters".to_owned();
    let call = |method: reqwest::Method, path: &str, token: &str, body: Option<Value>| {
        let mut r = http.request(method, url(path)).bearer_auth(token);
        if let Some(body) = body {
            r = r.json(&body);
        }
        async move { r.send().await.unwrap().status().as_u16() }
    };
    use reqwest::Method as M;
    let push = |id: &str| json!({"attemptKey": unique("d:a"), "batch": [full(id, "r-1", 10, 5)]});
    assert_eq!(call(M::POST, "/v1/push", &dev, Some(push("g:1"))).await, 200);
    assert_eq!(call(M::POST, "/v1/push", &good, Some(push("g:2"))).await, 200);
    let rejected = json!({"attemptKey": unique("d:a"), "batch": [op("g:3", "r-2", 11, json!({"reps": -1}))]});
    assert_eq!(call(M::POST, "/v1/push", &good, Some(rejected)).await, 200);
    assert_eq!(call(M::GET, "/v1/pull?cursor=0", &good, None).await, 200);
    assert_eq!(call(M::POST, "/v1/pull", &dev, Some(json!({"spaces": {}}))).await, 200);
    assert_eq!(call(M::POST, "/v1/verdicts", &good, Some(json!({"opIds": ["g:1", "g:3", "g:9"]}))).await, 200);
    assert_eq!(call(M::GET, "/v1/schema", &good, None).await, 200);
    assert_eq!(call(M::POST, "/v1/spaces", &good, Some(json!({"space": "guard-club"}))).await, 200);
    let share = json!({"space": "guard-club", "user": "guard-bob", "role": "editor"});
    assert_eq!(call(M::POST, "/v1/spaces/members", &good, Some(share)).await, 200);
    assert_eq!(call(M::GET, "/v1/invitations", &bob, None).await, 200);
    assert_eq!(call(M::POST, "/v1/invitations/accept", &bob, Some(json!({"space": "guard-club"}))).await, 200);
    assert_eq!(call(M::GET, "/v1/spaces/members?space=guard-club", &bob, None).await, 200);
    assert_eq!(call(M::GET, "/v1/spaces", &bob, None).await, 200);
    let team = json!({"space": "guard-team", "owner": "guard-ann"});
    assert_eq!(call(M::POST, "/v1/admin/spaces", ADMIN, Some(team.clone())).await, 200);
    let member = json!({"space": "guard-team", "user": "guard-bob", "role": "viewer"});
    assert_eq!(call(M::POST, "/v1/admin/spaces/members", ADMIN, Some(member)).await, 200);
    assert_eq!(call(M::GET, "/v1/admin/spaces/members?space=guard-team", ADMIN, None).await, 200);
    // Refused: bad tokens of every kind, the wrong admin credential, another user's database.
    assert_eq!(call(M::POST, "/v1/push", &bad, Some(push("g:4"))).await, 401);
    assert_eq!(call(M::GET, "/v1/pull", &expired, None).await, 401);
    assert_eq!(call(M::GET, "/v1/pull", &forged, None).await, 401);
    assert_eq!(call(M::POST, "/v1/verdicts", &forged, Some(json!({"opIds": ["g:1"]}))).await, 401);
    assert_eq!(call(M::POST, "/v1/admin/spaces", &wrong_admin, Some(team.clone())).await, 401);
    assert_eq!(call(M::POST, "/v1/admin/spaces", &good, Some(team)).await, 401);
    assert_eq!(call(M::GET, "/v1/pull?user=guard-someone-else", &good, None).await, 403);
    let unschemed = http.get(url("/v1/pull")).header("authorization", &bad).send().await.unwrap();
    assert_eq!(unschemed.status().as_u16(), 401);
    // Event streams: the header, and `?token=` (EventSource cannot set headers), good and bad.
    let mut stream = http.get(url("/v1/events")).bearer_auth(&good).send().await.unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let _ = stream.chunk().await;
    drop(stream);
    for (token, status) in [(&bob, 200), (&good, 200), (&bad, 401), (&expired, 401)] {
        let mut r = http.get(url("/v1/events")).query(&[("token", token)]).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status);
        if status == 200 {
            let _ = r.chunk().await;
        }
    }
    assert_eq!(http.get(url("/healthz")).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(http.get(url("/metrics")).send().await.unwrap().status().as_u16(), 200);
    // What the last requests log arrives after their answers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = server.child.kill().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = server.log();
    // Every level the server emits is on, and each request has its access line.
    for path in ["/v1/push", "/v1/pull", "/v1/verdicts", "/v1/events", "/v1/spaces/members", "/v1/admin/spaces"] {
        assert!(log.contains(&format!("path={path} ")), "the log names the requests to {path}:\n{log}");
    }
    assert!(log.contains("DEBUG") && log.contains("marksync_server::access"), "a verbose log:\n{log}");
    for secret in [&dev, &bob, &good, &expired, &forged, &bad, &wrong_admin, &ADMIN.to_owned(), &JWT_SECRET.to_owned()]
    {
        for form in [secret.clone(), secret.replace(':', "%3A")] {
            assert!(!log.contains(&form), "a secret ({form}) is in the log:\n{log}");
        }
    }
    common::drop_database(&database).await;
}
both!(no_secret_reaches_a_log_line);

/// Direct SQL on a test database, for what no route answers.
enum Sql {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl Sql {
    async fn open(database: &str) -> Sql {
        if database.starts_with("sqlite:") {
            Sql::Sqlite(sqlx::SqliteConnection::connect(database).await.unwrap())
        } else {
            Sql::Postgres(sqlx::PgConnection::connect(database).await.unwrap())
        }
    }

    /// Every remembered verdict, of every user.
    async fn verdicts(&mut self) -> i64 {
        let q = "SELECT count(*) FROM verdicts";
        match self {
            Sql::Sqlite(c) => sqlx::query_scalar(q).fetch_one(c).await.unwrap(),
            Sql::Postgres(c) => sqlx::query_scalar(q).fetch_one(c).await.unwrap(),
        }
    }

    /// `decided_at` of each of `user`'s verdicts, by opId.
    async fn decided_at(&mut self, user: &str) -> Vec<(String, i64)> {
        let q = "SELECT op_id, decided_at FROM verdicts WHERE user_id = $1 ORDER BY op_id";
        match self {
            Sql::Sqlite(c) => sqlx::query_as(q).bind(user).fetch_all(c).await.unwrap(),
            Sql::Postgres(c) => sqlx::query_as(q).bind(user).fetch_all(c).await.unwrap(),
        }
    }

    /// Runs `statement`; its error, if any.
    async fn try_run(&mut self, statement: &'static str) -> Option<String> {
        let done = match self {
            Sql::Sqlite(c) => sqlx::raw_sql(statement).execute(c).await.map(|_| ()),
            Sql::Postgres(c) => sqlx::raw_sql(statement).execute(c).await.map(|_| ()),
        };
        done.err().map(|e| e.to_string())
    }
}

/// Every kind of operation the server has — pushes (applied, rejected,
/// replayed), asking, both pulls, event streams, spaces, members added,
/// changed and removed by an owner and by the admin, a restart (the
/// migrations again) — never takes a verdict away; and the database itself
/// refuses to delete one (`DELETE`, and on PostgreSQL `TRUNCATE`).
async fn verdicts_are_never_deleted(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = config(&database);
    c.admin_token = Some(ADMIN.to_owned());
    let mut t = TestServer::start(c.clone()).await;
    let mut sql = Sql::open(&database).await;
    let mut seen = 0;
    let mut check = async |sql: &mut Sql, what: &str, more: i64| {
        let now = sql.verdicts().await;
        assert_eq!(now, seen + more, "after {what}: {more} more verdicts, none fewer");
        seen = now;
    };
    let in_space = |space: &str, mut op: Value| {
        op["space"] = json!(space);
        op
    };
    t.push_ok("ann", &[full("k:1", "r-1", 10, 5), op("k:2", "r-1", 11, json!({"reps": -1}))]).await;
    check(&mut sql, "a push of an applied and a rejected op", 2).await;
    t.push_ok("ann", &[full("k:1", "r-1", 10, 5), op("k:2", "r-1", 11, json!({"reps": -1}))]).await;
    check(&mut sql, "the same push again (replayed)", 0).await;
    t.verdicts_ok("ann", &["k:1", "k:2", "k:3"]).await;
    t.pull_all("ann").await;
    assert_eq!(post(&t, "/v1/pull", "ann", json!({"spaces": {}})).await.0, 200);
    let mut events = t.http.get(t.url("/v1/events")).bearer_auth("dev:ann").send().await.unwrap();
    let _ = events.chunk().await;
    drop(events);
    check(&mut sql, "asking, pulling and an event stream", 0).await;
    assert_eq!(post(&t, "/v1/spaces", "ann", json!({"space": "kept"})).await.0, 200);
    let share = |user: &str, role: Value| json!({"space": "kept", "user": user, "role": role});
    assert_eq!(post(&t, "/v1/spaces/members", "ann", share("bob", json!("editor"))).await.0, 200);
    assert_eq!(post(&t, "/v1/invitations/accept", "bob", json!({"space": "kept"})).await.0, 200);
    t.push_ok("bob", &[in_space("kept", full("k:3", "r-3", 12, 5))]).await;
    check(&mut sql, "a member's push", 1).await;
    assert_eq!(post(&t, "/v1/spaces/members", "ann", share("bob", json!("viewer"))).await.0, 200);
    assert_eq!(post(&t, "/v1/spaces/members", "ann", share("bob", Value::Null)).await.0, 200);
    let v = t.push_ok("bob", &[in_space("kept", full("k:4", "r-3", 13, 6))]).await;
    assert_eq!(v[0]["status"], "rejected", "{v:?}");
    check(&mut sql, "a member changed, removed, and refused", 1).await;
    let admin = |path: &str, body: Value| t.http.post(t.url(path)).bearer_auth(ADMIN).json(&body).send();
    assert_eq!(admin("/v1/admin/spaces", json!({"space": "kept-2", "owner": "bob"})).await.unwrap().status(), 200);
    let member = json!({"space": "kept-2", "user": "ann", "role": "owner"});
    assert_eq!(admin("/v1/admin/spaces/members", member).await.unwrap().status(), 200);
    let removed = json!({"space": "kept-2", "user": "bob", "role": null});
    assert_eq!(admin("/v1/admin/spaces/members", removed).await.unwrap().status(), 200);
    check(&mut sql, "the admin's changes", 0).await;
    t.server.stop().await.unwrap();
    t = TestServer::start(c).await.owning_database();
    t.verdicts_ok("ann", &["k:1"]).await;
    check(&mut sql, "a restart", 0).await;

    let refused = sql.try_run("DELETE FROM verdicts").await;
    assert!(refused.as_deref().is_some_and(|e| e.contains("verdicts are never deleted")), "{refused:?}");
    if b == Backend::Postgres {
        let refused = sql.try_run("TRUNCATE verdicts").await;
        assert!(refused.as_deref().is_some_and(|e| e.contains("verdicts are never deleted")), "{refused:?}");
    }
    check(&mut sql, "a DELETE and a TRUNCATE", 0).await;
    drop(sql);
    t.stop().await;
}
both!(verdicts_are_never_deleted);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `decided_at` is the server's clock when the verdict was given (between
/// the request and its answer, not before the judge's `now`), for applied
/// and rejected ops alike, and it reads back unchanged when the op is sent
/// again later (the verdict is replayed, never decided anew).
async fn decided_at_is_the_judgement_time(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let mut sql = Sql::open(&t.database).await;
    let before = now_ms();
    let (status, body) = t.push("dee", &[full("t:1", "r-1", 10, 5), op("t:2", "r-2", 11, json!({"reps": -1}))]).await;
    let after = now_ms();
    assert_eq!(status, 200, "{body}");
    let judged = body["now"].as_i64().unwrap();
    let decided = sql.decided_at("dee").await;
    assert_eq!(decided.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["t:1", "t:2"]);
    for (id, at) in &decided {
        assert!(before <= *at && *at <= after, "{id} decided at {at}, outside the request [{before}, {after}]");
        assert!(*at >= judged, "{id} decided at {at}, before the judge's now {judged}");
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let v = t.push_ok("dee", &[full("t:1", "r-1", 10, 5), op("t:2", "r-2", 11, json!({"reps": -1}))]).await;
    assert_eq!(common::statuses(&v), ["duplicate", "rejected"]);
    assert_eq!(sql.decided_at("dee").await, decided, "a replayed verdict keeps its decided_at");
    drop(sql);
    t.stop().await;
}
both!(decided_at_is_the_judgement_time);
