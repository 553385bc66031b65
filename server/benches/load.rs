//! Load generator: concurrent users push 1000-op batches to an in-process
//! server over HTTP, then pull everything; on SQLite and on PostgreSQL, with
//! the batched judge and with the one-statement-per-op judge.
//!
//! ```text
//! scripts/pg.sh start && export MARKSYNC_TEST_POSTGRES_URL="$(scripts/pg.sh url)"
//! LOAD_JSON=bench/results/server.json cargo bench -p marksync-server --features bench-per-op --bench load
//! ```
//!
//! The matrix, per backend: for each number of users in `LOAD_USERS_LIST`
//! (`1,8,64`), that many distinct users, each one client (one connection)
//! pushing back to back ("saturating"), with the batched judge and with the
//! per-op judge; then "hot user": `LOAD_HOT_CLIENTS` (8) clients pushing back
//! to back for the SAME user (they serialise on the user's lock), both judges;
//! then "paced": `LOAD_USERS` (20) users, each one push every `LOAD_PACED_MS`
//! (1000), `LOAD_PACED_PUSHES` (5) each, batched judge. After the pushes of a
//! scenario every user pulls everything (pages of 1000).
//!
//! Pushes per scenario: a saturating or hot-user scenario pushes about
//! 8 × `LOAD_PUSHES` (10) batches in all with the batched judge, and
//! 8 × `LOAD_PER_OP_PUSHES` (2) with the per-op judge (about 10× slower),
//! split over its clients, at least 2 per client (so 1 user pushes 80, 8 users
//! 10 each, 64 users 2 each; per-op: 16, 2 each, 2 each). 0 skips that judge.
//!
//! Then shared spaces, per backend: the empty pull of a reader in
//! `LOAD_SPACES` (1000) spaces with nothing new, `LOAD_EMPTY_PULLS` (50)
//! times, and the backfill of a `LOAD_BACKFILL_ROWS` (100000)-row space after
//! a grant (0 skips either). Only the spaces part:
//! `LOAD_USERS_LIST=0 LOAD_HOT_CLIENTS=0 LOAD_USERS=0`.
//!
//! Other environment: `LOAD_BACKENDS` (`sqlite,postgres`), `LOAD_JSON` (write
//! every result there as a JSON array of `{backend, judge, users, clients,
//! scenario, opsPerSec, p50Ms, p99Ms, pushes, pullRowsPerSec}`; a relative path
//! is taken from the workspace root, its directory is created), `LOAD_VERBOSE`
//! (slowest pushes, per-push times of 1-client runs, CPU split),
//! `LOAD_DB_CONNECTIONS` (the pool's size; one per client and four more, at
//! most 32). Without `MARKSYNC_TEST_POSTGRES_URL` only SQLite runs. A
//! markdown table of all results, and the batched / per-op ratios, go to
//! stdout at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{drop_database, env, fresh_database, unique};

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use marksync::protocol::{Outcome, PushResponse};
use marksync_server::Config;
use serde_json::json;

const OPS_PER_PUSH: usize = 1000;

/// The body of push `p` of device `dev`: 1000 ops; after the first push,
/// half insert new rows and half update rows that the device's previous push
/// inserted (so stored rows are read back and merged).
fn batch(dev: usize, p: usize) -> String {
    let ops: Vec<_> = (0..OPS_PER_PUSH)
        .map(|i| {
            let row = if i % 2 == 0 && p > 0 { (p - 1) * OPS_PER_PUSH + i + 1 } else { p * OPS_PER_PUSH + i };
            let at = 1_757_577_000_000u64 + (p * OPS_PER_PUSH + i) as u64;
            if row < p * OPS_PER_PUSH {
                json!({"opId": format!("dev{dev}:{}", p * OPS_PER_PUSH + i), "table": "sets", "rowId": format!("dev{dev}-{row}"),
                       "at": at, "fields": {"reps": (i % 100) + 1}})
            } else {
                json!({"opId": format!("dev{dev}:{}", p * OPS_PER_PUSH + i), "table": "sets", "rowId": format!("dev{dev}-{row}"),
                       "at": at, "fields": {"exercise": "squat", "weightKg": 82.5, "reps": (i % 100) + 1}})
            }
        })
        .collect();
    json!({"attemptKey": format!("dev{dev}:a{p}"), "batch": ops}).to_string()
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
    pushes: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    pulled: usize,
    pull_wall: Duration,
    /// From `/metrics` after the pushes: most pushes of one user inside its lock at once, pushes judged again.
    same_user_max: u64,
    judged_again: u64,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// One value of the server's `/metrics` (0 if absent).
fn metric(text: &str, name: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
}

/// `clients` clients, each its own HTTP client (one connection), push
/// `pushes` batches each (back to back — "saturating" — or one every `pace` —
/// "paced"); client `c` pushes for user `c % users` (so `users == clients`:
/// distinct users; `users == 1`: one hot user). Then every user pulls
/// everything.
async fn run(database: &str, per_op: bool, users: usize, clients: usize, pushes: usize, pace: Option<Duration>) -> Run {
    let mut config = Config::with_database(database);
    config.dev_auth = true;
    config.rate_limit = 0.0;
    // Throughput, not fair shares, is measured: no budgets of work either.
    (config.ops_rate, config.read_rate) = (0.0, 0.0);
    config.listen = "127.0.0.1:0".parse().unwrap();
    // `LOAD_DB_CONNECTIONS` sets the pool's size (default: one per client
    // and four more, at most 32).
    config.db_max_connections = env("LOAD_DB_CONNECTIONS", (clients + 4).min(32)) as u32;
    // Clients beyond the pool wait their turn: the per-op judge holds a
    // connection for seconds with 64 clients, past the 5 s a request waits
    // by default (then answered 503, as in an outage).
    config.db_acquire_timeout_ms = 600_000;
    config.per_op_judge = per_op;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = marksync_server::start(config, listener).await.unwrap();
    let base = server.url();
    let client = || reqwest::Client::builder().timeout(Duration::from_secs(600)).build().unwrap();
    let https: Vec<reqwest::Client> = (0..clients).map(|_| client()).collect();
    // Bodies are built before the clock starts; client c is device c.
    let bodies: Vec<Vec<String>> = (0..clients).map(|c| (0..pushes).map(|p| batch(c, p)).collect()).collect();
    // Warm up: every client's first contact (its connection, the user's head
    // row, pool connections, statement caches) is not timed.
    let warm: Vec<_> = https
        .iter()
        .enumerate()
        .map(|(c, http)| {
            let req = http
                .post(format!("{base}/v1/push"))
                .header("authorization", format!("Bearer dev:user{}", c % users))
                .body(json!({"attemptKey": format!("w{c}"), "batch": [{"opId": format!("warm{c}:1"), "table": "sets", "rowId": format!("warm{c}-1"),
                    "at": 1, "fields": {"exercise": "warm-up", "weightKg": 1, "reps": 1}}]}).to_string());
            async move { assert_eq!(req.send().await.unwrap().status().as_u16(), 200) }
        })
        .collect();
    futures_util::future::join_all(warm).await;
    let verbose = std::env::var_os("LOAD_VERBOSE").is_some();
    let (own0, all0) = cpu_seconds();
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .zip(https)
        .enumerate()
        .map(|(c, (bodies, http))| {
            let url = format!("{base}/v1/push");
            let auth = format!("Bearer dev:user{}", c % users);
            tokio::spawn(async move {
                if let Some(pace) = pace {
                    // Stagger the clients over one interval.
                    tokio::time::sleep(pace.mul_f64(c as f64 / clients as f64)).await;
                }
                let mut lat = Vec::new();
                let mut ops = 0;
                for body in bodies {
                    let t0 = Instant::now();
                    let r = http.post(&url).header("authorization", &auth).body(body).send().await.unwrap();
                    assert_eq!(r.status().as_u16(), 200);
                    let resp: PushResponse = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
                    let took = t0.elapsed();
                    lat.push(took);
                    if verbose && clients == 1 {
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
    let http = client();
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
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
    if verbose {
        let tail: Vec<u128> = latencies.iter().rev().take(8).map(|d| d.as_millis()).collect();
        println!("  slowest pushes (ms): {tail:?}");
    }
    Run {
        cpu_own: own1 - own0,
        cpu_all: all1 - all0,
        ops,
        pushes: latencies.len(),
        wall,
        latencies,
        pulled,
        pull_wall,
        same_user_max: metric(&metrics, "marksync_push_concurrent_same_user_max"),
        judged_again: metric(&metrics, "marksync_push_judged_again_total"),
    }
}

/// One scenario's figures.
struct Row {
    backend: &'static str,
    judge: &'static str,
    users: usize,
    clients: usize,
    /// `saturating`, `hot-user` or `paced`.
    scenario: &'static str,
    ops_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    pushes: usize,
    pull_rows_per_sec: f64,
}

/// Prints one line as the run goes; returns the row.
fn report(
    backend: &'static str,
    judge: &'static str,
    scenario: &'static str,
    users: usize,
    clients: usize,
    r: &Run,
) -> Row {
    let row = Row {
        backend,
        judge,
        users,
        clients,
        scenario,
        ops_per_sec: r.ops as f64 / r.wall.as_secs_f64(),
        p50_ms: pct(&r.latencies, 0.50).as_secs_f64() * 1e3,
        p99_ms: pct(&r.latencies, 0.99).as_secs_f64() * 1e3,
        pushes: r.pushes,
        pull_rows_per_sec: r.pulled as f64 / r.pull_wall.as_secs_f64(),
    };
    let label = format!("{backend} {judge} {scenario}, {users} users / {clients} clients");
    println!(
        "{label:<46} {:>4} pushes, {:>7} ops in {:>6.2} s = {:>7.0} judged ops/s | push p50 {:>7.1} ms p99 {:>7.1} ms | pull {} rows in {:.2} s = {:.0} rows/s | same-user max {}, judged again {}",
        r.pushes,
        r.ops,
        r.wall.as_secs_f64(),
        row.ops_per_sec,
        row.p50_ms,
        row.p99_ms,
        r.pulled,
        r.pull_wall.as_secs_f64(),
        row.pull_rows_per_sec,
        r.same_user_max,
        r.judged_again,
    );
    if std::env::var_os("LOAD_VERBOSE").is_some() {
        println!(
            "  pushes used {:.2} CPU-s in this process (server + load generator), {:.2} CPU-s elsewhere (the database, other work), of {:.2} available",
            r.cpu_own,
            (r.cpu_all - r.cpu_own).max(0.0),
            r.wall.as_secs_f64() * std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
        );
    }
    row
}

/// Shared spaces (PROTOCOL §3c, §4b), on one backend: a reader in `spaces`
/// spaces (one row each) with nothing new pulls with one `POST /v1/pull`
/// (`LOAD_EMPTY_PULLS` times, median and p99 of the request as the client
/// sees it over loopback); then a member granted a space of `backfill` rows
/// pulls it from its start in pages of 1000. Returns the markdown lines.
async fn spaces_run(backend: &'static str, database: &str, spaces: usize, backfill: usize) -> Vec<String> {
    let mut config = Config::with_database(database);
    // The reader is in every space and the owner owns them all: no bound of spaces in the way.
    config.max_owned_spaces_per_user = 0;
    config.max_members_per_space = 0;
    config.max_spaces_per_user = marksync::space::MAX_FOLLOWED - 1;
    config.dev_auth = true;
    config.rate_limit = 0.0;
    // Throughput, not fair shares, is measured: no budgets of work either.
    (config.ops_rate, config.read_rate) = (0.0, 0.0);
    config.listen = "127.0.0.1:0".parse().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = marksync_server::start(config, listener).await.unwrap();
    let store = &server.app.store;
    let base = server.url();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(600)).build().unwrap();
    let post = |path: &str, user: &str, body: String| {
        http.post(format!("{base}{path}")).header("authorization", format!("Bearer dev:{user}")).body(body).send()
    };
    let mut lines = Vec::new();
    if spaces > 0 {
        for i in 0..spaces {
            let space = format!("s{i}");
            store.create_space(&space, "owner").await.unwrap();
            store
                .set_member(marksync_server::store::Actor::Admin, &space, "reader", Some(marksync::space::Role::Viewer))
                .await
                .unwrap();
        }
        // One row in each space, in pushes that span 1000 spaces each.
        for chunk in (0..spaces).collect::<Vec<_>>().chunks(OPS_PER_PUSH) {
            let ops: Vec<_> = chunk
                .iter()
                .map(|i| json!({"opId": format!("o:{i}"), "table": "sets", "rowId": format!("r-{i}"), "space": format!("s{i}"),
                                "at": 1, "fields": {"exercise": "squat", "weightKg": 1, "reps": 1}}))
                .collect();
            let r =
                post("/v1/push", "owner", json!({"attemptKey": unique("a"), "batch": ops}).to_string()).await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
        }
        let mut follow = serde_json::Map::new();
        follow.insert("~reader".into(), json!({"cursor": 0, "role": "owner"}));
        for i in 0..spaces {
            follow.insert(format!("s{i}"), json!({"cursor": 1, "role": "viewer"}));
        }
        let body = json!({"spaces": follow}).to_string();
        let n = env("LOAD_EMPTY_PULLS", 50).max(1);
        let mut times = Vec::with_capacity(n);
        for _ in 0..n + 5 {
            let started = Instant::now();
            let r = post("/v1/pull", "reader", body.clone()).await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let answer: serde_json::Value = r.json().await.unwrap();
            times.push(started.elapsed());
            assert_eq!(answer["spaces"], json!([]), "nothing new: {answer}");
            assert_eq!(answer["joined"], json!([]));
        }
        let mut times = times.split_off(5);
        times.sort();
        let (p50, p99) = (pct(&times, 0.5).as_secs_f64() * 1e3, pct(&times, 0.99).as_secs_f64() * 1e3);
        println!(
            "{backend} empty pull in {spaces} spaces: {n} requests, p50 {p50:.2} ms p99 {p99:.2} ms ({} bytes each)",
            body.len()
        );
        lines.push(format!(
            "| {} | empty pull, {spaces} spaces followed | p50 {p50:.2} ms, p99 {p99:.2} ms ({n} requests) |",
            backend_name(backend)
        ));
    }
    if backfill > 0 {
        store.create_space("big", "owner").await.unwrap();
        for p in 0..backfill.div_ceil(OPS_PER_PUSH) {
            let ops: Vec<_> = (p * OPS_PER_PUSH..((p + 1) * OPS_PER_PUSH).min(backfill))
                .map(|i| {
                    json!({"opId": format!("b:{i}"), "table": "sets", "rowId": format!("b-{i}"), "space": "big",
                                "at": 1, "fields": {"exercise": "squat", "weightKg": 82.5, "reps": (i % 100) + 1}})
                })
                .collect();
            let r =
                post("/v1/push", "owner", json!({"attemptKey": unique("a"), "batch": ops}).to_string()).await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
        }
        store
            .set_member(marksync_server::store::Actor::Admin, "big", "late", Some(marksync::space::Role::Viewer))
            .await
            .unwrap();
        let started = Instant::now();
        let (mut follow, mut rows, mut requests) = (serde_json::Map::new(), 0usize, 0usize);
        loop {
            let r = post("/v1/pull", "late", json!({"spaces": follow, "limit": 1000}).to_string()).await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let answer: serde_json::Value = r.json().await.unwrap();
            requests += 1;
            for m in answer["joined"].as_array().unwrap() {
                follow.insert(m["space"].as_str().unwrap().to_owned(), json!({"cursor": 0, "role": m["role"]}));
            }
            for page in answer["spaces"].as_array().unwrap() {
                rows += page["changes"].as_array().unwrap().len();
                follow[page["space"].as_str().unwrap()]["cursor"] = page["cursor"].clone();
            }
            if !answer["hasMore"].as_bool().unwrap() {
                break;
            }
        }
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(rows, backfill);
        println!(
            "{backend} backfill of a {backfill}-row space: {requests} pulls in {:.2} s = {:.0} rows/s",
            wall,
            rows as f64 / wall
        );
        lines.push(format!(
            "| {} | backfill of a {backfill}-row space after a grant | {:.2} s, {:.0} rows/s ({requests} pulls of ≤ 1000) |",
            backend_name(backend),
            wall,
            rows as f64 / wall
        ));
    }
    server.stop().await.unwrap();
    lines
}

fn backend_name(b: &str) -> &'static str {
    if b == "sqlite" {
        "SQLite"
    } else {
        "PostgreSQL"
    }
}

/// The markdown tables: every scenario, then batched / per-op per (backend, users).
fn markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| backend | judge | scenario | users | clients | pushes | judged ops/s | push p50 (ms) | push p99 (ms) | pull rows/s |");
    let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.0} |",
            backend_name(r.backend),
            r.judge,
            r.scenario,
            r.users,
            r.clients,
            r.pushes,
            r.ops_per_sec,
            r.p50_ms,
            r.p99_ms,
            r.pull_rows_per_sec
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "| backend | scenario | users | clients | batched ops/s | per-op ops/s | batched / per-op ops/s | per-op / batched push p50 |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for b in rows.iter().filter(|r| r.judge == "batched") {
        let Some(p) = rows.iter().find(|p| {
            p.judge == "per-op"
                && p.backend == b.backend
                && p.scenario == b.scenario
                && p.users == b.users
                && p.clients == b.clients
        }) else {
            continue;
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1}× | {:.1}× |",
            backend_name(b.backend),
            b.scenario,
            b.users,
            b.clients,
            b.ops_per_sec,
            p.ops_per_sec,
            b.ops_per_sec / p.ops_per_sec,
            p.p50_ms / b.p50_ms
        );
    }
    s
}

fn write_json(path: &str, rows: &[Row]) {
    // Written by hand to keep the fields in this order (serde_json's map sorts them).
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "  {{\"backend\": \"{}\", \"judge\": \"{}\", \"users\": {}, \"clients\": {}, \"scenario\": \"{}\", \"opsPerSec\": {}, \"p50Ms\": {:.1}, \"p99Ms\": {:.1}, \"pushes\": {}, \"pullRowsPerSec\": {}}}",
                r.backend,
                r.judge,
                r.users,
                r.clients,
                r.scenario,
                r.ops_per_sec.round() as u64,
                r.p50_ms,
                r.p99_ms,
                r.pushes,
                r.pull_rows_per_sec.round() as u64,
            )
        })
        .collect();
    let text = format!("[\n{}\n]\n", items.join(",\n"));
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    // `cargo bench` runs this in the package directory: relative paths are taken from the workspace root.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    println!("wrote {}", path.display());
}

#[tokio::main]
async fn main() {
    // The server binary's process settings (src/main.rs), so that it is measured as it ships.
    marksync_server::memory::no_transparent_huge_pages();
    // `cargo bench` passes `--bench`; nothing else is expected.
    let users_list: Vec<usize> = std::env::var("LOAD_USERS_LIST")
        .unwrap_or_else(|_| "1,8,64".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let hot_clients = env("LOAD_HOT_CLIENTS", 8);
    let paced_users = env("LOAD_USERS", 20);
    let total = |per_user_at_8: usize| per_user_at_8 * 8;
    let batched_total = total(env("LOAD_PUSHES", 10));
    let per_op_total = total(env("LOAD_PER_OP_PUSHES", 2));
    // Pushes per client: the scenario's total split over its clients, at least 2 each.
    let per_client = |total: usize, clients: usize| total.div_ceil(clients).max(2);
    let paced_pushes = env("LOAD_PACED_PUSHES", 5);
    let pace = Duration::from_millis(env("LOAD_PACED_MS", 1000) as u64);
    println!(
        "marksync-server load: {OPS_PER_PUSH}-op pushes; users {users_list:?}, hot user with {hot_clients} clients, {paced_users} users paced; cores: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let backends = std::env::var("LOAD_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    let mut rows = Vec::new();
    for backend in ["sqlite", "postgres"].into_iter().filter(|b| backends.contains(b)) {
        if backend == "postgres" && std::env::var_os("MARKSYNC_TEST_POSTGRES_URL").is_none() {
            println!("{backend}: skipped (MARKSYNC_TEST_POSTGRES_URL is not set)");
            continue;
        }
        // (scenario, users, clients): distinct users, then one hot user.
        let mut shapes: Vec<(&'static str, usize, usize)> = users_list.iter().map(|&n| ("saturating", n, n)).collect();
        if hot_clients > 0 {
            shapes.push(("hot-user", 1, hot_clients));
        }
        for (scenario, users, clients) in shapes {
            for (judge, per_op, total) in [("batched", false, batched_total), ("per-op", true, per_op_total)] {
                if total == 0 {
                    continue;
                }
                let db = fresh_database(backend).await.unwrap();
                let r = run(&db, per_op, users, clients, per_client(total, clients), None).await;
                rows.push(report(backend, judge, scenario, users, clients, &r));
            }
        }
        if paced_users > 0 && paced_pushes > 0 {
            let db = fresh_database(backend).await.unwrap();
            let r = run(&db, false, paced_users, paced_users, paced_pushes, Some(pace)).await;
            rows.push(report(backend, "batched", "paced", paced_users, paced_users, &r));
        }
    }
    // Shared spaces: `LOAD_SPACES` (1000; 0 skips) and `LOAD_BACKFILL_ROWS` (100000; 0 skips).
    let (spaces, backfill) = (env("LOAD_SPACES", 1000), env("LOAD_BACKFILL_ROWS", 100_000));
    let mut space_lines = Vec::new();
    for backend in ["sqlite", "postgres"].into_iter().filter(|b| backends.contains(b)) {
        if (spaces == 0 && backfill == 0)
            || (backend == "postgres" && std::env::var_os("MARKSYNC_TEST_POSTGRES_URL").is_none())
        {
            continue;
        }
        let db = fresh_database(backend).await.unwrap();
        space_lines.extend(spaces_run(backend, &db, spaces, backfill).await);
        drop_database(&db).await;
    }
    println!();
    print!("{}", markdown(&rows));
    if !space_lines.is_empty() {
        println!("\n| backend | spaces | result |\n|---|---|---|");
        for l in &space_lines {
            println!("{l}");
        }
    }
    if let Some(path) = std::env::var("LOAD_JSON").ok().filter(|p| !p.is_empty()) {
        write_json(&path, &rows);
    }
}
