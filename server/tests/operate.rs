//! Running it as an operator would: every failure of the database is visible
//! and heals without a restart, the probes tell the truth, and what cannot
//! work refuses to start — with words that say why.

mod common;

use std::time::{Duration, Instant};

use common::process::{command, Spawned};
use common::{config, drop_database, fresh_database, full, unique, Backend, TestServer};
use marksync_server::store::{DbOptions, Store};
use serde_json::Value;
use sqlx::Connection;

/// The status and body text of `GET url`.
async fn get_text(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A push of `n` fresh full rows (applied, unless the server fails) as
/// `user` to the server at `base`: status, body, and `Retry-After`.
async fn push_n(http: &reqwest::Client, base: &str, user: &str, n: usize) -> (u16, Value, Option<String>) {
    let ops: Vec<Value> = (0..n)
        .map(|i| {
            let mut op = full(&unique("op"), &unique("row"), 1_000 + i as u64, 5);
            op["fields"]["exercise"] = Value::from("x".repeat(100));
            op
        })
        .collect();
    let body = serde_json::json!({"attemptKey": unique("a"), "batch": ops});
    let r = http.post(format!("{base}/v1/push")).bearer_auth(format!("dev:{user}")).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, r.json().await.unwrap_or(Value::Null), retry)
}

/// The message a failed start gives.
async fn start_error(config: marksync_server::Config) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match marksync_server::start(config, listener).await {
        Ok(s) => {
            s.stop().await.unwrap();
            panic!("the server started");
        }
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn live_and_ready_probes_answer_and_healthz_is_readyz() {
    let t = TestServer::new(Backend::Sqlite).await.unwrap();
    assert_eq!(get_text(&t.url("/livez")).await, (200, "live\n".into()));
    assert_eq!(get_text(&t.url("/readyz")).await, (200, "ready\n".into()));
    assert_eq!(get_text(&t.url("/healthz")).await, (200, "ready\n".into()));
    t.stop().await;
}

/// `sqlite:` and `sqlite://` (an unset `$DIR` in `sqlite://$DIR/…`) ran in
/// memory: pushes were `applied`, pulls failed, everything was gone at restart.
#[tokio::test]
async fn a_sqlite_url_naming_no_file_refuses_to_start_and_memory_must_be_asked_by_name() {
    for url in ["sqlite:", "sqlite://", "sqlite://?mode=rwc", "sqlite://x.db?mode=memory"] {
        let e = start_error(config(url)).await;
        assert!(e.contains("SQLite") && e.contains("sqlite://FILE"), "{url}: {e}");
    }
    // Asked for by name (tests), memory works, readers and writer on one database.
    let t = TestServer::start(config("sqlite::memory:")).await;
    assert_eq!(t.push_ok("mem", &[full("m1", "r1", 1, 5)]).await.len(), 1);
    assert_eq!(t.pull_all("mem").await.len(), 1);
    t.stop().await;
}

#[tokio::test]
async fn an_unopenable_sqlite_file_is_named_and_a_failed_start_leaves_no_file() {
    let dir = std::env::temp_dir().join(unique("no-such-dir"));
    let file = dir.join("deeper").join("m.db");
    let e = start_error(config(&format!("sqlite://{}", file.display()))).await;
    assert!(e.contains(&file.display().to_string()), "the path is named: {e}");
    assert!(!file.exists());
}

/// A read-only database (here: opened read-only; a file the server's user
/// may not write is the same to SQLite) started "healthy" and failed every push.
#[tokio::test]
async fn a_read_only_database_refuses_to_start() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    TestServer::start(config(&url)).await.stop().await;
    let e = start_error(config(&format!("{url}?mode=ro"))).await;
    assert!(e.contains("cannot be written") && e.contains("readonly"), "{e}");
}

async fn insert_migration(backend: Backend, url: &str, version: i64) {
    let sql = format!("INSERT INTO marksync_migrations (version, applied_at) VALUES ({version}, 0)");
    match backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
        }
    }
}

/// After a rollback to an older binary, the database carries a migration
/// the binary does not know: it started silently.
async fn a_database_migrated_by_a_newer_server_refuses_to_start_unless_allowed(backend: Backend) {
    let Some(url) = fresh_database(backend).await else { return };
    TestServer::start(config(&url)).await.stop().await;
    insert_migration(backend, &url, 99).await;
    let e = start_error(config(&url)).await;
    assert!(e.contains("[99]") && e.contains("--allow-newer-schema"), "{e}");
    let mut c = config(&url);
    c.allow_newer_schema = true;
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(get_text(&t.url("/readyz")).await.0, 200, "allowed, it is ready");
    t.stop().await;
}
both!(a_database_migrated_by_a_newer_server_refuses_to_start_unless_allowed);

/// `--no-migrate` applies nothing and refuses a database that lacks a
/// migration; `migrate` applies them and exits.
async fn no_migrate_checks_and_migrate_applies(backend: Backend) {
    let Some(url) = fresh_database(backend).await else { return };
    let mut c = config(&url);
    c.no_migrate = true;
    let e = start_error(c.clone()).await;
    assert!(e.contains("marksync-server migrate"), "{e}");
    Store::migrate(&url, &DbOptions::DEFAULT).await.unwrap();
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(t.push_ok("nm", &[full("nm1", "r1", 1, 5)]).await.len(), 1);
    t.stop().await;
}
both!(no_migrate_checks_and_migrate_applies);

/// PostgreSQL's primary keys compare their most telling column first (a
/// row's id, an op's id): with the space or the sender first, a fifth of the
/// database's CPU under pushes went to comparing equal texts (docs/server.md,
/// migration 8). A database with data from before is migrated over it in
/// `spaces.rs`, `data_stored_before_spaces_is_upgraded_in_place`.
#[tokio::test]
async fn postgres_keys_put_the_most_telling_column_first() {
    let Some(url) = fresh_database(Backend::Postgres).await else { return };
    Store::migrate(&url, &DbOptions::DEFAULT).await.unwrap();
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let key = "SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index i \
               CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
               WHERE i.indrelid = $1::regclass AND i.indisprimary";
    let of = |table: &'static str| sqlx::query_scalar::<_, String>(key).bind(table);
    assert_eq!(of("rows").fetch_one(&mut c).await.unwrap(), "row_id,table_name,space_id");
    assert_eq!(of("verdicts").fetch_one(&mut c).await.unwrap(), "op_id,user_id");
    c.close().await.unwrap();
    drop_database(&url).await;
}

/// The `migrate` subcommand logs each migration with its version, and exits.
#[tokio::test]
async fn the_migrate_command_logs_each_migration_and_exits() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let (status, log) = Spawned::run(command(&["migrate", "--database", &url])).await;
    assert!(status.success(), "{log}");
    assert!(log.contains("migration applied") && log.contains("version=1") && log.contains("0006_probe"), "{log}");
    let (status, log) = Spawned::run(command(&["migrate", "--database", &url])).await;
    assert!(status.success() && !log.contains("migration applied"), "nothing twice: {log}");
}

/// A role with only read and write grants on the migrated tables could not
/// start: every start ran `CREATE TABLE IF NOT EXISTS marksync_migrations`.
#[tokio::test]
async fn a_least_privileged_role_runs_the_server_with_no_migrate() {
    let Some(url) = fresh_database(Backend::Postgres).await else { return };
    Store::migrate(&url, &DbOptions::DEFAULT).await.unwrap();
    let role = unique("app").to_lowercase();
    let db = url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in [
        format!("CREATE ROLE \"{role}\" LOGIN"),
        format!("GRANT CONNECT ON DATABASE \"{db}\" TO \"{role}\""),
        format!("GRANT USAGE ON SCHEMA public TO \"{role}\""),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \"{role}\""),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await.unwrap();
    }
    let as_role = url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    assert_ne!(as_role, url, "the test URL names the postgres user");
    let e = start_error(config(&as_role)).await;
    assert!(e.contains("permission denied"), "without --no-migrate the role may not start: {e}");
    let mut c = config(&as_role);
    c.no_migrate = true;
    let t = TestServer::start(c).await;
    assert_eq!(t.push_ok("lp", &[full("lp1", "r1", 1, 5)]).await.len(), 1);
    assert_eq!(get_text(&t.url("/readyz")).await.0, 200);
    t.stop().await;
    for sql in [format!("DROP OWNED BY \"{role}\""), format!("DROP ROLE \"{role}\"")] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await.unwrap();
    }
    common::drop_database(&url).await;
}

#[tokio::test]
async fn a_short_jwt_secret_refuses_to_start() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let mut c = config(&url);
    c.jwt_secret = Some("a".into());
    let e = start_error(c).await;
    assert!(e.contains("at least 32"), "{e}");
}

/// A closed port hung 30 s and then said only "pool timed out".
#[tokio::test]
async fn a_start_against_a_closed_port_fails_fast_and_says_why() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut c = config(&format!("postgres://postgres:hunter2@127.0.0.1:{free}/x?password=hunter2"));
    c.db_acquire_timeout_ms = 2_000;
    let started = Instant::now();
    let e = start_error(c).await;
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert!(e.to_lowercase().contains("refused"), "{e}");
    assert!(!e.contains("hunter2"), "no password in the message: {e}");
}

/// Behind a reverse proxy or a sidecar on loopback, `dev:` tokens were
/// accepted from anywhere: the listen address was all that was checked.
#[tokio::test]
async fn dev_tokens_relayed_by_a_proxy_are_refused() {
    let t = TestServer::new(Backend::Sqlite).await.unwrap();
    let pull = |proxy: Option<(&'static str, &'static str)>| {
        let mut r = t.http.get(t.url("/v1/pull")).bearer_auth("dev:ann");
        if let Some((k, v)) = proxy {
            r = r.header(k, v);
        }
        r.send()
    };
    assert_eq!(pull(None).await.unwrap().status(), 200);
    for h in [("x-forwarded-for", "203.0.113.9"), ("forwarded", "for=203.0.113.9"), ("x-real-ip", "203.0.113.9")] {
        let r = pull(Some(h)).await.unwrap();
        assert_eq!(r.status(), 401, "{h:?}");
        assert!(r.text().await.unwrap().contains("only from this machine"));
    }
    t.stop().await;
}

#[tokio::test]
async fn event_streams_tell_proxies_not_to_buffer() {
    let t = TestServer::new(Backend::Sqlite).await.unwrap();
    let r = t.http.get(t.url("/v1/events")).bearer_auth("dev:ann").send().await.unwrap();
    assert_eq!(r.headers().get("x-accel-buffering").map(|v| v.to_str().unwrap()), Some("no"));
    drop(r);
    t.stop().await;
}

/// `MARKSYNC_JWT_AUDIENCE=` locked everyone out (an empty audience was
/// required) and `MARKSYNC_DEV_AUTH=` refused to start: empty means unset.
#[tokio::test]
async fn empty_variables_mean_unset() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let secret = "empty-variables-secret-of-32-bytes-or-more";
    let mut cmd = command(&["--listen", "127.0.0.1:0", "--database", &url]);
    for k in
        ["MARKSYNC_JWT_AUDIENCE", "MARKSYNC_JWT_ISSUER", "MARKSYNC_DEV_AUTH", "MARKSYNC_STATIC", "MARKSYNC_ADMIN_TOKEN"]
    {
        cmd.env(k, "");
    }
    cmd.env("MARKSYNC_JWT_SECRET", secret);
    let s = Spawned::start(cmd).await.unwrap_or_else(|log| panic!("starts: {log}"));
    let token = common::jwt(secret, "ann", 600);
    let r = reqwest::Client::new().get(format!("{}/v1/pull", s.url)).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// SIGHUP killed the server at once (a push cut); now it drains like
/// SIGTERM. And a second signal no longer waits: it exits at once.
#[cfg(unix)]
#[tokio::test]
async fn sighup_drains_and_a_second_signal_exits_at_once() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let s = Spawned::start(command(&["--listen", "127.0.0.1:0", "--database", &url]))
        .await
        .unwrap_or_else(|log| panic!("starts: {log}"));
    let mut s = s;
    s.signal(libc::SIGHUP);
    let status = s.exited().await;
    assert!(status.success(), "drained and exited 0: {status:?}\n{}", s.log());
    assert!(s.log().contains("SIGHUP"), "{}", s.log());

    // A push held 20 s by a fault: the first SIGTERM waits for it, the second does not.
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--database",
        &url,
        "--dev-auth",
        "--enable-faults",
        "--shutdown-timeout-ms",
        "60000",
    ];
    let mut s = Spawned::start(command(&args)).await.unwrap_or_else(|log| panic!("starts: {log}"));
    let http = reqwest::Client::new();
    let r =
        http.post(format!("{}/__faults", s.url)).json(&serde_json::json!({"delayMs": 20_000})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let base = s.url.clone();
    let held = tokio::spawn(async move { push_n(&reqwest::Client::new(), &base, "sig", 1).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(s.child.try_wait().unwrap().is_none(), "the first SIGTERM drains: still running");
    let asked = Instant::now();
    s.signal(libc::SIGTERM);
    let status = s.exited().await;
    assert!(asked.elapsed() < Duration::from_secs(5), "the second exits at once: {:?}", asked.elapsed());
    assert!(!status.success(), "{status:?}");
    held.abort();
}

/// Sets the file-size limit of process `pid` (bytes; `None`: none).
#[cfg(target_os = "linux")]
fn file_size_limit(pid: i32, bytes: Option<u64>) {
    let v = bytes.unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit { rlim_cur: v, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: prlimit(2) on our own child, with a valid rlimit and no old value asked.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// A command whose process gets `EFBIG` instead of being killed when it
/// writes past its file-size limit: a full disk, as SQLite sees it.
#[cfg(target_os = "linux")]
fn without_sigxfsz(mut cmd: tokio::process::Command) -> tokio::process::Command {
    // SAFETY: only async-signal-safe calls between fork and exec; an ignored
    // signal stays ignored across exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    cmd
}

/// A full disk wedged SQLite's single writer until a restart: every push
/// after the first `database or disk is full` answered 500 "attempted to
/// call begin_with at non-zero transaction depth", also once there was room
/// again, while `/healthz` said 200.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_full_disk_is_a_503_and_heals_without_a_restart() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let args = ["--listen", "127.0.0.1:0", "--database", &url, "--dev-auth", "--rate-limit", "0", "--ops-rate", "0"];
    let s = Spawned::start(without_sigxfsz(command(&args))).await.unwrap_or_else(|log| panic!("starts: {log}"));
    let http = reqwest::Client::new();
    let mut acknowledged = 0;
    let (status, body, _) = push_n(&http, &s.url, "disk", 20).await;
    assert_eq!(status, 200);
    assert!(body["verdicts"].as_array().unwrap().iter().all(|v| v["status"] == "applied"), "{body}");
    acknowledged += 20;

    file_size_limit(s.pid(), Some(1));
    let (status, body, retry) = push_n(&http, &s.url, "disk", 20).await;
    assert_eq!(status, 503, "{body}\n{}", s.log());
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(retry.is_some(), "Retry-After");
    for _ in 0..3 {
        assert_eq!(push_n(&http, &s.url, "disk", 20).await.0, 503, "still full");
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (status, why) = get_text(&format!("{}/readyz", s.url)).await;
    assert_eq!(status, 503, "not ready while it cannot write: {why}");
    assert!(why.contains("cannot be written"), "{why}");
    assert_eq!(get_text(&format!("{}/livez", s.url)).await.0, 200, "alive all the same");

    file_size_limit(s.pid(), None);
    let (status, body, _) = push_n(&http, &s.url, "disk", 20).await;
    assert_eq!(status, 200, "room again: writes heal with no restart: {body}\n{}", s.log());
    acknowledged += 20;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(get_text(&format!("{}/readyz", s.url)).await.0, 200);

    let mut pulled = 0;
    let mut cursor = 0;
    loop {
        let r: Value = http
            .get(format!("{}/v1/pull?cursor={cursor}&limit=1000", s.url))
            .bearer_auth("dev:disk")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        pulled += r["changes"].as_array().map_or(0, Vec::len);
        cursor = r["cursor"].as_u64().unwrap();
        if !r["hasMore"].as_bool().unwrap_or(false) {
            break;
        }
    }
    assert_eq!(pulled, acknowledged, "every acknowledged op is there, nothing else");
}

/// A server logging to files on the disk that filled stopped answering:
/// its log line could not be written, tracing reported that on stderr, on
/// the same disk, and that report's `eprintln!` panicked the request — the
/// client saw its connection dropped, not `503` with `Retry-After`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_full_disk_under_the_log_files_too_is_still_a_503() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(unique("marksync-logs"));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--listen", &listen, "--database", &url, "--dev-auth", "--rate-limit", "0", "--ops-rate", "0"];
    let mut cmd = without_sigxfsz(command(&args));
    cmd.stdout(std::fs::File::create(dir.join("out.log")).unwrap());
    cmd.stderr(std::fs::File::create(dir.join("err.log")).unwrap());
    let mut child = cmd.spawn().unwrap();
    let base = format!("http://{listen}");
    let started = Instant::now();
    while !reqwest::get(format!("{base}/healthz")).await.is_ok_and(|r| r.status() == 200) {
        assert!(started.elapsed() < Duration::from_secs(30), "did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let http = reqwest::Client::new();
    assert_eq!(push_n(&http, &base, "logs", 5).await.0, 200);

    file_size_limit(child.id().unwrap() as i32, Some(1));
    for _ in 0..3 {
        let (status, body, retry) = push_n(&http, &base, "logs", 5).await;
        assert_eq!(status, 503, "{body}");
        assert!(retry.is_some(), "Retry-After");
    }
    file_size_limit(child.id().unwrap() as i32, None);
    assert_eq!(push_n(&http, &base, "logs", 5).await.0, 200, "room again");
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A start on a full disk failed, and left a 4 KB database file behind.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_start_on_a_full_disk_fails_and_leaves_no_file() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let file = url.strip_prefix("sqlite://").unwrap().to_owned();
    let mut cmd = without_sigxfsz(command(&["--listen", "127.0.0.1:0", "--database", &url]));
    // SAFETY: setrlimit(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 1, rlim_max: libc::RLIM_INFINITY };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            Ok(())
        });
    }
    let (status, log) = Spawned::run(cmd).await;
    assert!(!status.success(), "{log}");
    assert!(log.contains("cannot start") && log.contains(&file), "the file is named: {log}");
    for suffix in ["", "-wal", "-shm"] {
        assert!(!std::path::Path::new(&format!("{file}{suffix}")).exists(), "{file}{suffix} left behind");
    }
}

/// A PostgreSQL outage made every request hang 30 s (the pool's timeout)
/// and answer 500; there was no probe but the database's.
#[tokio::test]
async fn a_postgres_outage_is_a_fast_503_and_heals_when_it_comes_back() {
    if std::env::var_os("MARKSYNC_TEST_POSTGRES_URL").is_none() {
        // The shared cluster's variable says PostgreSQL is here to run (common::fresh_database).
        let _ = fresh_database(Backend::Postgres).await;
        return;
    }
    let cluster = Cluster::start();
    let mut c = config(&cluster.url);
    c.db_acquire_timeout_ms = 1_000;
    let t = TestServer::start(c).await;
    assert_eq!(t.push_ok("pg", &[full("pg1", "r1", 1, 5)]).await.len(), 1);

    cluster.pause();
    let started = Instant::now();
    let (status, body, retry) = push_n(&t.http, &t.server.url(), "pg", 1).await;
    assert!(started.elapsed() < Duration::from_secs(5), "fails fast: {:?}", started.elapsed());
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("unavailable")), "{body}");
    assert!(retry.is_some());
    let (status, _) = get_text(&t.url("/v1/pull")).await;
    assert_eq!(status, 401, "(no token) the guard still answers");
    assert_eq!(get_text(&t.url("/livez")).await.0, 200, "alive: a liveness probe must not restart it");
    assert_eq!(get_text(&t.url("/readyz")).await.0, 503);

    cluster.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body, _) = push_n(&t.http, &t.server.url(), "pg", 1).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "heals once PostgreSQL is back: {status} {body}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(get_text(&t.url("/readyz")).await.0, 200);
    t.stop().await;
}

/// A PostgreSQL cluster of its own (the suite's shared one must not stop under other tests).
struct Cluster {
    state: std::path::PathBuf,
    url: String,
}

impl Cluster {
    fn pg(state: &std::path::Path, what: &str) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/pg.sh");
        let out = std::process::Command::new("bash")
            .args([script, what])
            .env("MARKSYNC_PG_STATE", state)
            .env_remove("PG_PORT")
            .output()
            .unwrap();
        assert!(out.status.success(), "pg.sh {what}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn start() -> Cluster {
        let state = std::env::temp_dir().join(unique("pg-outage")).join("state");
        Cluster::pg(&state, "start");
        let url = Cluster::pg(&state, "url");
        Cluster { state, url }
    }

    fn pause(&self) {
        Cluster::pg(&self.state, "pause");
    }

    fn resume(&self) {
        Cluster::pg(&self.state, "resume");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| Cluster::pg(&self.state, "stop"));
    }
}
