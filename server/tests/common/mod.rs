//! Shared helpers of the server's integration tests: a server in this process
//! on 127.0.0.1:0 over a fresh database (a temp SQLite file, or a fresh
//! PostgreSQL database created from `MARKSYNC_TEST_POSTGRES_URL`), and a
//! plain-HTTP client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod process;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use marksync::schema::Schema;
use marksync_server::store::Counts;
use marksync_server::{Config, RunningServer};
use serde_json::{json, Value};
use sqlx::Connection;

/// Which storage a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs one test body against both backends, as two `#[tokio::test]`s.
#[macro_export]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::common::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name($crate::common::Backend::Postgres).await
            }
        }
    };
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name no other test (or run) uses.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{prefix}_{}_{}_{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst))
}

/// A fresh database URL for `backend`, or `None` (after a printed note) when
/// Postgres is not configured. With `CI` set, a missing Postgres fails the test.
pub async fn fresh_database(backend: Backend) -> Option<String> {
    match backend {
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join(unique("marksync-test"));
            std::fs::create_dir_all(&dir).unwrap();
            Some(format!("sqlite://{}", dir.join("marksync.db").display()))
        }
        Backend::Postgres => {
            let Ok(url) = std::env::var("MARKSYNC_TEST_POSTGRES_URL") else {
                if std::env::var_os("CI").is_some() {
                    panic!("MARKSYNC_TEST_POSTGRES_URL is not set but CI is: the Postgres variants must run in CI (scripts/pg.sh start)");
                }
                eprintln!(
                    "note: MARKSYNC_TEST_POSTGRES_URL is not set; skipping the Postgres variant (scripts/pg.sh start)"
                );
                return None;
            };
            let name = unique("t");
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect to MARKSYNC_TEST_POSTGRES_URL");
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
                .execute(&mut conn)
                .await
                .expect("create a test database");
            conn.close().await.ok();
            let (base, query) = match url.split_once('?') {
                Some((b, q)) => (b.to_owned(), format!("?{q}")),
                None => (url.clone(), String::new()),
            };
            let base = &base[..base.rfind('/').expect("a database URL has a path")];
            Some(format!("{base}/{name}{query}"))
        }
    }
}

/// A workout schema whose `reps` allows up to 1000 (a "release that relaxed the rule").
pub fn relaxed_schema() -> Schema {
    let mut s = Schema::workout();
    if let Some(r) = s.tables.get_mut("sets").and_then(|t| t.fields.get_mut("reps")) {
        r.max = Some(1000.0);
    }
    s
}

/// The test configuration: dev auth, faults on, the given database.
pub fn config(database: &str) -> Config {
    let mut c = Config::with_database(database);
    c.dev_auth = true;
    c.enable_faults = true;
    c.jwt_secret = Some("test-secret-of-at-least-32-bytes!".into());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.db_max_connections = 4;
    // Refusals are answered at once: the suite counts them, it does not wait on them.
    c.refusal_delay_ms = 0;
    c
}

/// Removes a database made by [`fresh_database`] (its temp directory, or the Postgres database).
pub async fn drop_database(database: &str) {
    if let Some(file) = database.strip_prefix("sqlite://") {
        if let Some(dir) = std::path::Path::new(file).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    } else if let (Ok(admin), Some(slash)) = (std::env::var("MARKSYNC_TEST_POSTGRES_URL"), database.rfind('/')) {
        let name = database[slash + 1..].split('?').next().unwrap_or_default().to_owned();
        if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
                .execute(&mut conn)
                .await;
            let _ = conn.close().await;
        }
    }
}

/// A server of this process and a client for it.
pub struct TestServer {
    pub server: RunningServer,
    pub http: reqwest::Client,
    pub database: String,
    /// Drop the database on `stop` (it was made for this server alone).
    owns_database: bool,
}

impl TestServer {
    /// A fresh database and a server on it (dev auth, faults on); `None` = skip.
    /// The database is removed when the server stops.
    pub async fn new(backend: Backend) -> Option<TestServer> {
        let database = fresh_database(backend).await?;
        let mut t = TestServer::start(config(&database)).await;
        t.owns_database = true;
        Some(t)
    }

    /// A server with exactly this configuration.
    pub async fn start(config: Config) -> TestServer {
        let database = config.database.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = marksync_server::start(config, listener).await.expect("server starts");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        TestServer { server, http, database, owns_database: false }
    }

    /// Drop the database when this server stops.
    pub fn owning_database(mut self) -> Self {
        self.owns_database = true;
        self
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// POSTs a raw JSON body to `path` as `user` (dev token); returns status and JSON.
    pub async fn post_raw(&self, path: &str, user: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .header("authorization", format!("Bearer dev:{user}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// POSTs a raw body to /v1/push as `user` (dev token); returns status and JSON.
    pub async fn push_raw(&self, user: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        self.post_raw("/v1/push", user, body).await
    }

    /// Pushes `batch` as `user`; returns status and JSON.
    pub async fn push(&self, user: &str, batch: &[Value]) -> (u16, Value) {
        self.push_raw(user, json!({"attemptKey": unique("a"), "batch": batch}).to_string()).await
    }

    /// Pushes and expects 200; returns the verdicts.
    pub async fn push_ok(&self, user: &str, batch: &[Value]) -> Vec<Value> {
        let (status, body) = self.push(user, batch).await;
        assert_eq!(status, 200, "{body}");
        body["verdicts"].as_array().unwrap().clone()
    }

    /// POSTs a raw body to /v1/verdicts as `user` (dev token); returns status and JSON.
    pub async fn verdicts_raw(&self, user: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        self.post_raw("/v1/verdicts", user, body).await
    }

    /// Asks /v1/verdicts about `op_ids` as `user`, expects 200; returns the answers.
    pub async fn verdicts_ok(&self, user: &str, op_ids: &[&str]) -> Vec<Value> {
        let (status, body) = self.verdicts_raw(user, json!({"opIds": op_ids}).to_string()).await;
        assert_eq!(status, 200, "{body}");
        assert!(body["now"].as_u64().is_some_and(|n| n > 1_700_000_000_000), "the server's clock: {body}");
        body["verdicts"].as_array().unwrap().clone()
    }

    /// GET /v1/pull as `user` with a raw query string.
    pub async fn pull_raw(&self, user: &str, query: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(&format!("/v1/pull?{query}")))
            .header("authorization", format!("Bearer dev:{user}"))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Every change of `user` (following pages).
    pub async fn pull_all(&self, user: &str) -> Vec<Value> {
        let (mut cursor, mut out) = (0u64, Vec::new());
        loop {
            let (status, page) = self.pull_raw(user, &format!("cursor={cursor}&limit=1000")).await;
            assert_eq!(status, 200, "{page}");
            out.extend(page["changes"].as_array().unwrap().iter().cloned());
            cursor = page["cursor"].as_u64().unwrap();
            if !page["hasMore"].as_bool().unwrap() {
                return out;
            }
        }
    }

    /// POST /__faults.
    pub async fn faults(&self, body: Value) -> u16 {
        self.http.post(self.url("/__faults")).json(&body).send().await.unwrap().status().as_u16()
    }

    /// What `user` has stored.
    pub async fn counts(&self, user: &str) -> Counts {
        self.server.app.store.counts(user).await.unwrap()
    }

    /// The text of /metrics.
    pub async fn metrics(&self) -> String {
        self.http.get(self.url("/metrics")).send().await.unwrap().text().await.unwrap()
    }

    /// One metric's value (the first line that starts with `name`).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    pub async fn stop(self) {
        self.server.stop().await.unwrap();
        if self.owns_database {
            drop_database(&self.database).await;
        }
    }
}

/// An op that sets a full valid workout row.
pub fn full(op_id: &str, row_id: &str, at: u64, reps: i64) -> Value {
    json!({"opId": op_id, "table": "sets", "rowId": row_id, "at": at,
           "fields": {"exercise": "squat", "weightKg": 80, "reps": reps}})
}

/// An op with the given fields.
pub fn op(op_id: &str, row_id: &str, at: u64, fields: Value) -> Value {
    json!({"opId": op_id, "table": "sets", "rowId": row_id, "at": at, "fields": fields})
}

/// The verdict statuses, in order.
pub fn statuses(verdicts: &[Value]) -> Vec<&str> {
    verdicts.iter().map(|v| v["status"].as_str().unwrap()).collect()
}

/// An HS256 JWT for `sub`, valid for `ttl_secs` (negative: already expired).
pub fn jwt(secret: &str, sub: &str, ttl_secs: i64) -> String {
    let now = jsonwebtoken::get_current_timestamp() as i64;
    let claims = json!({"sub": sub, "exp": now + ttl_secs});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Reads an event stream until `needle` was seen (10 s at most).
pub async fn read_until(resp: &mut reqwest::Response, seen: &mut String, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} within 10 s; got {seen:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended; got {seen:?}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// POSTs `body` to `path` as `user` (dev token).
pub async fn post(t: &TestServer, path: &str, user: &str, body: Value) -> (u16, Value) {
    t.post_raw(path, user, body.to_string()).await
}

/// GETs `path` as `user` (dev token): the status and the JSON body (`null` if none).
pub async fn get(t: &TestServer, path: &str, user: &str) -> (u16, Value) {
    let r = t.http.get(t.url(path)).bearer_auth(format!("dev:{user}")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `user` sets `member`'s role in `space` (`null` removes): for a user who
/// is not a member yet, an invitation.
pub async fn invite(t: &TestServer, user: &str, space: &str, member: &str, role: Value) -> (u16, Value) {
    post(t, "/v1/spaces/members", user, json!({"space": space, "user": member, "role": role})).await
}

/// `user` accepts their invitation to `space`.
pub async fn accept(t: &TestServer, user: &str, space: &str) -> (u16, Value) {
    post(t, "/v1/invitations/accept", user, json!({ "space": space })).await
}

/// One `POST /v1/pull` as `user`, following `spaces`.
pub async fn pull(t: &TestServer, user: &str, spaces: Value) -> Value {
    let (status, body) = post(t, "/v1/pull", user, json!({ "spaces": spaces })).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `op` in `space`.
pub fn in_space(space: &str, mut op: Value) -> Value {
    op["space"] = json!(space);
    op
}

/// `bytes` gzipped, as a client encodes a request body.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}
