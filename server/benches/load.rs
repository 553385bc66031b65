//! Load generator: concurrent users push 1000-op batches to an in-process
//! server over HTTP, then pull everything; on SQLite and on PostgreSQL, with
//! the batched judge and with the one-statement-per-op judge.
//!
//! ```text
//! scripts/pg.sh start && export MARKSYNC_TEST_POSTGRES_URL="$(scripts/pg.sh url)"
//! cargo bench -p marksync-server --features bench-per-op --bench load
//! ```
//!
//! Environment: `LOAD_USERS` (20), `LOAD_PUSHES` (pushes per user, batched
//! judge: 10), `LOAD_PER_OP_PUSHES` (per-op judge: 2 per user; twice that for the single user), `LOAD_PACED_MS`
//! (interval between one user's pushes in the paced run: 1000),
//! `LOAD_PACED_PUSHES` (5), `LOAD_BACKENDS` (`sqlite,postgres`), `LOAD_VERBOSE` (slowest pushes, per-push times of the 1-user runs, CPU split). Without `MARKSYNC_TEST_POSTGRES_URL` only SQLite runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use marksync::protocol::{Outcome, PushResponse};
use marksync_server::Config;
use serde_json::json;
use sqlx::Connection;

const OPS_PER_PUSH: usize = 1000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}_{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst))
}

async fn fresh_database(backend: &str) -> Option<String> {
    if backend == "sqlite" {
        let dir = std::env::temp_dir().join(unique("marksync-load"));
        std::fs::create_dir_all(&dir).unwrap();
        return Some(format!("sqlite://{}", dir.join("load.db").display()));
    }
    let url = std::env::var("MARKSYNC_TEST_POSTGRES_URL").ok()?;
    let name = unique("load");
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut c).await.unwrap();
    c.close().await.ok();
    let base = &url[..url.rfind('/').unwrap()];
    Some(format!("{base}/{name}"))
}

/// Drops a benchmark's database (its data is not needed afterwards).
async fn drop_database(database: &str) {
    if let Some(dir) = database.strip_prefix("sqlite://").and_then(|f| std::path::Path::new(f).parent()) {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    if let (Some(slash), Ok(admin)) = (database.rfind('/'), std::env::var("MARKSYNC_TEST_POSTGRES_URL")) {
        if database.starts_with("postgres") {
            let name = &database[slash + 1..];
            let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\"")))
                .execute(&mut c)
                .await
                .unwrap();
            c.close().await.ok();
        }
    }
}

/// The body of push `p` of `user`: 1000 ops; after the first push, half
/// insert new rows and half update rows that the previous push inserted
/// (so stored rows are read back and merged).
fn batch(user: usize, p: usize) -> String {
    let ops: Vec<_> = (0..OPS_PER_PUSH)
        .map(|i| {
            let row = if i % 2 == 0 && p > 0 { (p - 1) * OPS_PER_PUSH + i + 1 } else { p * OPS_PER_PUSH + i };
            let at = 1_757_577_000_000u64 + (p * OPS_PER_PUSH + i) as u64;
            if row < p * OPS_PER_PUSH {
                json!({"opId": format!("dev{user}:{}", p * OPS_PER_PUSH + i), "table": "sets", "rowId": format!("dev{user}-{row}"),
                       "at": at, "fields": {"reps": (i % 100) + 1}})
            } else {
                json!({"opId": format!("dev{user}:{}", p * OPS_PER_PUSH + i), "table": "sets", "rowId": format!("dev{user}-{row}"),
                       "at": at, "fields": {"exercise": "squat", "weightKg": 82.5, "reps": (i % 100) + 1}})
            }
        })
        .collect();
    json!({"attemptKey": format!("dev{user}:a{p}"), "batch": ops}).to_string()
}

/// CPU seconds used so far: (this process, the whole machine), from /proc (Linux; zeros elsewhere).
fn cpu_seconds() -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some((rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?) / ticks)
        })
        .unwrap_or(0.0);
    let all = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<f64> = s.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal: busy = all but idle and iowait
            Some(f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum::<f64>() / ticks)
        })
        .unwrap_or(0.0);
    (own, all)
}

struct Run {
    cpu_own: f64,
    cpu_all: f64,
    ops: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    pulled: usize,
    pull_wall: Duration,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// `users` users each push `pushes` batches (back to back — "saturating" — or
/// one every `pace` — "paced"), then every user pulls everything.
async fn run(database: &str, per_op: bool, users: usize, pushes: usize, pace: Option<Duration>) -> Run {
    let mut config = Config::with_database(database);
    config.dev_auth = true;
    config.rate_limit = 0.0;
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.db_max_connections = (users as u32 + 4).min(32);
    config.per_op_judge = per_op;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = marksync_server::start(config, listener).await.unwrap();
    let base = server.url();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(300)).build().unwrap();
    // Bodies are built before the clock starts.
    let bodies: Vec<Vec<String>> = (0..users).map(|u| (0..pushes).map(|p| batch(u, p)).collect()).collect();
    // Warm up: every user's first contact (head row, pool connections, statement caches) is not timed.
    let warm: Vec<_> = (0..users)
        .map(|u| {
            let req = http
                .post(format!("{base}/v1/push"))
                .header("authorization", format!("Bearer dev:user{u}"))
                .body(json!({"attemptKey": "w", "batch": [{"opId": format!("warm{u}:1"), "table": "sets", "rowId": format!("warm{u}-1"),
                    "at": 1, "fields": {"exercise": "warm-up", "weightKg": 1, "reps": 1}}]}).to_string());
            async move { assert_eq!(req.send().await.unwrap().status().as_u16(), 200) }
        })
        .collect();
    futures_util::future::join_all(warm).await;
    let (own0, all0) = cpu_seconds();
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(u, bodies)| {
            let http = http.clone();
            let url = format!("{base}/v1/push");
            tokio::spawn(async move {
                if let Some(pace) = pace {
                    // Stagger the users over one interval.
                    tokio::time::sleep(pace.mul_f64(u as f64 / users as f64)).await;
                }
                let mut lat = Vec::new();
                let mut ops = 0;
                for body in bodies {
                    let t0 = Instant::now();
                    let r = http
                        .post(&url)
                        .header("authorization", format!("Bearer dev:user{u}"))
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status().as_u16(), 200);
                    let resp: PushResponse = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
                    let took = t0.elapsed();
                    lat.push(took);
                    if std::env::var_os("LOAD_VERBOSE").is_some() && users == 1 {
                        println!("  push {} took {} ms", lat.len(), took.as_millis());
                    }
                    assert_eq!(resp.verdicts.len(), OPS_PER_PUSH);
                    if let Some(v) = resp.verdicts.iter().find(|v| v.outcome != Outcome::Applied) {
                        panic!("every op is applied, not {v:?}");
                    }
                    ops += resp.verdicts.len();
                    if let Some(pace) = pace {
                        tokio::time::sleep(pace.saturating_sub(took)).await;
                    }
                }
                (ops, lat)
            })
        })
        .collect();
    let mut ops = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (o, l) = t.await.unwrap();
        ops += o;
        latencies.extend(l);
    }
    let wall = started.elapsed();
    let (own1, all1) = cpu_seconds();
    // Every user pulls everything, in pages of 1000, concurrently.
    let pull_started = Instant::now();
    let pulls: Vec<_> = (0..users)
        .map(|u| {
            let http = http.clone();
            let base = base.clone();
            tokio::spawn(async move {
                let (mut cursor, mut n) = (0u64, 0usize);
                loop {
                    let r = http
                        .get(format!("{base}/v1/pull?cursor={cursor}&limit=1000"))
                        .header("authorization", format!("Bearer dev:user{u}"))
                        .send()
                        .await
                        .unwrap();
                    let page: serde_json::Value = r.json().await.unwrap();
                    n += page["changes"].as_array().unwrap().len();
                    cursor = page["cursor"].as_u64().unwrap();
                    if !page["hasMore"].as_bool().unwrap() {
                        return n;
                    }
                }
            })
        })
        .collect();
    let mut pulled = 0;
    for p in pulls {
        pulled += p.await.unwrap();
    }
    let pull_wall = pull_started.elapsed();
    server.stop().await.unwrap();
    drop_database(database).await;
    latencies.sort();
    if std::env::var_os("LOAD_VERBOSE").is_some() {
        let tail: Vec<u128> = latencies.iter().rev().take(8).map(|d| d.as_millis()).collect();
        println!("  slowest pushes (ms): {tail:?}");
    }
    Run { cpu_own: own1 - own0, cpu_all: all1 - all0, ops, wall, latencies, pulled, pull_wall }
}

/// Prints one line; returns (judged ops/s, push p50 in seconds).
fn report(label: &str, r: &Run) -> (f64, f64) {
    let rate = r.ops as f64 / r.wall.as_secs_f64();
    println!(
        "{label:<32} {:>7} ops in {:>6.2} s = {:>8.0} judged ops/s | push p50 {:>6.1} ms p99 {:>6.1} ms | pull {} rows in {:.2} s = {:.0} rows/s",
        r.ops,
        r.wall.as_secs_f64(),
        rate,
        pct(&r.latencies, 0.50).as_secs_f64() * 1e3,
        pct(&r.latencies, 0.99).as_secs_f64() * 1e3,
        r.pulled,
        r.pull_wall.as_secs_f64(),
        r.pulled as f64 / r.pull_wall.as_secs_f64(),
    );
    if std::env::var_os("LOAD_VERBOSE").is_some() {
        println!(
            "  pushes used {:.2} CPU-s in this process (server + load generator), {:.2} CPU-s elsewhere (the database, other work), of {:.2} available",
            r.cpu_own,
            (r.cpu_all - r.cpu_own).max(0.0),
            r.wall.as_secs_f64() * std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
        );
    }
    (rate, pct(&r.latencies, 0.50).as_secs_f64())
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let users = env("LOAD_USERS", 20);
    let pushes = env("LOAD_PUSHES", 10);
    let per_op_pushes = env("LOAD_PER_OP_PUSHES", 2);
    let paced_pushes = env("LOAD_PACED_PUSHES", 5);
    let pace = Duration::from_millis(env("LOAD_PACED_MS", 1000) as u64);
    println!(
        "marksync-server load: {users} users, {OPS_PER_PUSH}-op pushes; cores: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let backends = std::env::var("LOAD_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    for backend in ["sqlite", "postgres"].into_iter().filter(|b| backends.contains(b)) {
        let Some(db) = fresh_database(backend).await else {
            println!("{backend}: skipped (MARKSYNC_TEST_POSTGRES_URL is not set)");
            continue;
        };
        let batched = report(&format!("{backend} batched, {users} users"), &run(&db, false, users, pushes, None).await);
        let db = fresh_database(backend).await.unwrap();
        let per_op =
            report(&format!("{backend} per-op,  {users} users"), &run(&db, true, users, per_op_pushes, None).await);
        let db = fresh_database(backend).await.unwrap();
        let batched_1 = report(&format!("{backend} batched, 1 user"), &run(&db, false, 1, pushes, None).await);
        let db = fresh_database(backend).await.unwrap();
        let per_op_1 = report(&format!("{backend} per-op,  1 user"), &run(&db, true, 1, per_op_pushes * 2, None).await);
        let db = fresh_database(backend).await.unwrap();
        report(
            &format!("{backend} batched, {users} users paced"),
            &run(&db, false, users, paced_pushes, Some(pace)).await,
        );
        println!(
            "{backend}: batched / per-op = {:.1}x judged ops/s with {users} users, {:.1}x with 1 user, {:.1}x push p50 latency with 1 user",
            batched.0 / per_op.0,
            batched_1.0 / per_op_1.0,
            per_op_1.1 / batched_1.1
        );
    }
}
