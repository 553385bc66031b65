//! A victim under attack: one user's pull and push latency alone and while an
//! attacker runs, in the same run, against the real `marksync-server` binary
//! (its default limits, SQLite, dev auth) on 127.0.0.1, the attacker on the
//! same cores.
//!
//! ```text
//! cargo bench -p marksync-server --bench abuse
//! ```
//!
//! The victim has `ABUSE_ROWS` (200) rows. Every 20 ms it pulls them all (one
//! page) or pushes one op onto one of them, in turn, `ABUSE_PULLS` (300)
//! times each per phase, from a thread and runtime of its own (the
//! attacker's tasks share the cores with it, not its task queue). For each
//! attack the victim runs alone first, then with the attacker running; the
//! attacks (`ABUSE_ATTACKS`, default `members,pull10k,streams,push`):
//! - `members`: a membership flood, 6 owners each toggling a member of their
//!   space between viewer and editor from 4 tasks, back to back;
//! - `pull10k`: 8 connections of one user pulling with 10,000 spaces named, back to back;
//! - `streams`: one space's crowd, 1,000 member ids each holding one
//!   `/v1/events` stream, reconnecting 200 ms after a refusal or an end;
//! - `push`: an op flood, 16 clients of one user pushing 100-op batches back
//!   to back, ignoring every 429;
//! - `events` (64 tasks of one user opening streams over and over) and `slow`
//!   (`ABUSE_SLOW` (400) slowloris connections), the attacks of issue 10.
//!
//! Printed: a table of attack × the victim's pull and push p50/p99 alone and
//! under attack and the p99 ratios (goal: ≤ 2×), how the attacker's requests
//! were answered, the limit counters of `/metrics`, the server's peak memory.
//! `ABUSE_SERVER` names another build of the server binary to run instead
//! (two builds side by side: run the bench once with each, minutes apart).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The server's peak and current resident memory, from /proc (Linux; empty elsewhere).
fn memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")).collect::<Vec<_>>().join(", ")
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn ops(user: &str, from: usize, n: usize) -> String {
    let batch: Vec<_> = (from..from + n)
        .map(|i| {
            json!({"opId": format!("{user}:{i}"), "table": "sets", "rowId": format!("{user}-{}", i % 500), "at": i,
                   "fields": {"exercise": "squat", "weightKg": 82.5, "reps": (i % 100) + 1}})
        })
        .collect();
    json!({"attemptKey": format!("{user}:a{from}"), "batch": batch}).to_string()
}

/// The victim's latencies in one phase: sorted pulls, sorted pushes, failures.
struct Phase {
    pulls: Vec<Duration>,
    pushes: Vec<Duration>,
    failed: usize,
}

/// The victim in a runtime of its own, on its own thread, with its own
/// client and keep-alive connection (as the victim of issue 24's run was a
/// process of its own): its answers never wait in the attacker's task queue
/// behind a thousand of the attacker's tasks, only for the cores, as a real
/// victim's would. `run(n)` is one phase.
struct Victim {
    ask: std::sync::mpsc::Sender<(usize, tokio::sync::oneshot::Sender<Phase>)>,
}

impl Victim {
    fn start(base: String, rows: usize) -> Victim {
        let (ask, asked) = std::sync::mpsc::channel::<(usize, tokio::sync::oneshot::Sender<Phase>)>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let http = reqwest::Client::new();
                let seq = AtomicU64::new(0);
                while let Ok((n, answer)) = asked.recv() {
                    let _ = answer.send(victim(&http, &base, n, rows, &seq).await);
                }
            });
        });
        Victim { ask }
    }

    async fn run(&self, n: usize) -> Phase {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.ask.send((n, tx)).unwrap();
        rx.await.unwrap()
    }
}

/// The victim's work: `n` pulls and `n` pushes, one request every 20 ms, in turn.
/// Each push sets one of the victim's `rows` rows, so the pull stays one page.
async fn victim(http: &reqwest::Client, base: &str, n: usize, rows: usize, seq: &AtomicU64) -> Phase {
    let mut p = Phase { pulls: Vec::with_capacity(n), pushes: Vec::with_capacity(n), failed: 0 };
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..2 * n {
        tick.tick().await;
        let t = Instant::now();
        let r = if i % 2 == 0 {
            http.get(format!("{base}/v1/pull?cursor=0&limit=1000")).bearer_auth("dev:victim").send().await
        } else {
            let k = seq.fetch_add(1, Ordering::Relaxed) as usize;
            let op = json!({"opId": format!("victim:p{k}"), "table": "sets", "rowId": format!("victim-{}", k % rows),
                            "at": 1_000_000 + k, "fields": {"exercise": "squat", "weightKg": 82.5, "reps": (k % 100) + 1}});
            let body = json!({"attemptKey": format!("victim:p{k}"), "batch": [op]}).to_string();
            http.post(format!("{base}/v1/push")).bearer_auth("dev:victim").body(body).send().await
        };
        match r {
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                if i % 2 == 0 { &mut p.pulls } else { &mut p.pushes }.push(t.elapsed());
            }
            other => {
                if p.failed == 0 {
                    eprintln!("victim's first failure: {:?}", other.map(|r| r.status()));
                }
                p.failed += 1;
            }
        }
    }
    p.pulls.sort();
    p.pushes.sort();
    p
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    refused: AtomicU64,
    other: AtomicU64,
    cut: AtomicU64,
}

impl Tally {
    fn count<T>(&self, r: &Result<reqwest::Response, T>) {
        let c = match r {
            Ok(r) if r.status().is_success() => &self.ok,
            Ok(r) if r.status().as_u16() == 429 => &self.refused,
            Ok(_) => &self.other,
            Err(_) => &self.cut,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    fn line(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{} ok, {} 429, {} other, {} network errors",
            g(&self.ok),
            g(&self.refused),
            g(&self.other),
            g(&self.cut)
        )
    }
}

/// `n` spaces nobody is in, as a pull's body.
fn many_spaces(n: usize) -> String {
    let m: serde_json::Map<String, serde_json::Value> =
        (0..n).map(|i| (format!("nowhere-{i}"), json!({"cursor": 0, "role": "viewer"}))).collect();
    json!({ "spaces": m }).to_string()
}

/// Sets up what attack `which` needs (spaces and their members), before any phase is timed.
async fn prepare(http: &reqwest::Client, base: &str, which: &str) {
    if which != "members" {
        return;
    }
    for o in 0..6 {
        let space = format!("club{o}");
        let steps = [
            (format!("owner{o}"), "/v1/spaces", json!({ "space": space })),
            (
                format!("owner{o}"),
                "/v1/spaces/members",
                json!({"space": space, "user": format!("mate{o}"), "role": "viewer"}),
            ),
            (format!("mate{o}"), "/v1/invitations/accept", json!({ "space": space })),
        ];
        for (user, path, body) in steps {
            let r = http
                .post(format!("{base}{path}"))
                .bearer_auth(format!("dev:{user}"))
                .body(body.to_string())
                .send()
                .await;
            let status = r.map(|r| r.status().as_u16()).unwrap_or(0);
            assert_eq!(status, 200, "{user} {path}");
        }
    }
}

/// Starts attack `which` (see the module doc); it runs until `stop`, its requests counted in the tally.
fn attack(
    addr: std::net::SocketAddr,
    stop: &Arc<AtomicBool>,
    slow: usize,
    which: &str,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Tally>) {
    let base = format!("http://{addr}");
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    let ctx = || (Arc::clone(stop), base.clone(), Arc::clone(&tally));
    match which {
        "members" => {
            for task in 0..24 {
                let (stop, base, tally) = ctx();
                let o = task % 6;
                tasks.push(tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    let mut n = task;
                    while !stop.load(Ordering::Relaxed) {
                        let role = if n % 2 == 0 { "editor" } else { "viewer" };
                        let body =
                            json!({"space": format!("club{o}"), "user": format!("mate{o}"), "role": role}).to_string();
                        let r = http
                            .post(format!("{base}/v1/spaces/members"))
                            .bearer_auth(format!("dev:owner{o}"))
                            .body(body)
                            .send()
                            .await;
                        tally.count(&r);
                        n += 1;
                    }
                }));
            }
        }
        "pull10k" => {
            let body = Arc::new(many_spaces(10_000));
            for _ in 0..8 {
                let (stop, base, tally) = ctx();
                let body = Arc::clone(&body);
                tasks.push(tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    while !stop.load(Ordering::Relaxed) {
                        let r = http
                            .post(format!("{base}/v1/pull"))
                            .bearer_auth("dev:puller")
                            .body(body.to_string())
                            .send()
                            .await;
                        tally.count(&r);
                        if let Ok(r) = r {
                            let _ = r.bytes().await;
                        }
                    }
                }));
            }
        }
        "streams" | "events" => {
            // streams: 1,000 ids, one stream each; events: 64 tasks of one id.
            let crowd = which == "streams";
            for i in 0..if crowd { 1000 } else { 64 } {
                let (stop, base, tally) = ctx();
                let user = if crowd { format!("crowd{i}") } else { "attacker".to_owned() };
                tasks.push(tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    while !stop.load(Ordering::Relaxed) {
                        let r = http.get(format!("{base}/v1/events?token=dev:{user}")).send().await;
                        tally.count(&r);
                        if let Ok(mut r) = r.and_then(|r| r.error_for_status()) {
                            while !stop.load(Ordering::Relaxed) {
                                match tokio::time::timeout(Duration::from_millis(200), r.chunk()).await {
                                    Ok(Ok(Some(_))) | Err(_) => {}
                                    _ => break,
                                }
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(if crowd { 200 } else { 5 })).await;
                    }
                }));
            }
        }
        "slow" => {
            for i in 0..slow {
                let stop = Arc::clone(stop);
                tasks.push(tokio::spawn(async move {
                    let head = "GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut s) = TcpStream::connect(addr).await else {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        };
                        let mut sent = 0;
                        if i % 13 == 0 {
                            // A valid token and a body trickled under its Content-Length.
                            let h = "POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer dev:slow\r\ncontent-length: 100000\r\n\r\n{";
                            if s.write_all(h.as_bytes()).await.is_err() {
                                continue;
                            }
                        }
                        while !stop.load(Ordering::Relaxed) && s.write_all(&head.as_bytes()[sent % head.len()..][..1]).await.is_ok() {
                            sent += 1;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }));
            }
        }
        "push" => {
            for c in 0..16 {
                let (stop, base, tally) = ctx();
                tasks.push(tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let body = ops("flood", (c * 1_000_000) + n * 100, 100);
                        let r = http.post(format!("{base}/v1/push")).bearer_auth("dev:flood").body(body).send().await;
                        tally.count(&r);
                        n += 1;
                        tokio::task::yield_now().await;
                    }
                }));
            }
        }
        other => panic!("no attack {other:?}: members, pull10k, streams, push, events, slow"),
    }
    (tasks, tally)
}

fn ratio(under: Duration, alone: Duration) -> f64 {
    under.as_secs_f64() / alone.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (rows, pulls, slow) = (env("ABUSE_ROWS", 200), env("ABUSE_PULLS", 300), env("ABUSE_SLOW", 400));
    let dir = std::env::temp_dir().join(format!("marksync-abuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // `ABUSE_SERVER`: another build of the server (a side-by-side comparison).
    let binary = std::env::var("ABUSE_SERVER").unwrap_or_else(|_| env!("CARGO_BIN_EXE_marksync-server").into());
    let mut server = tokio::process::Command::new(binary)
        .args(["--dev-auth", "--listen", &addr.to_string()])
        .arg("--database")
        .arg(format!("sqlite://{}", dir.join("abuse.db").display()))
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .expect("the server binary starts");
    let pid = server.id().unwrap_or(0);
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seeded = http
        .post(format!("{base}/v1/push"))
        .bearer_auth("dev:victim")
        .body(ops("victim", 0, rows))
        .send()
        .await
        .unwrap();
    assert!(seeded.status().is_success());
    let victim = Victim::start(base.clone(), rows);
    // Warm up: the first requests open the database's pages and the client's connection.
    let _ = victim.run(25).await;

    let which = std::env::var("ABUSE_ATTACKS").unwrap_or_else(|_| "members,pull10k,streams,push".into());
    let mut table = Vec::new();
    let mut notes = Vec::new();
    for name in which.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        prepare(&http, &base, name).await;
        let alone = victim.run(pulls).await;
        let stop = Arc::new(AtomicBool::new(false));
        let (tasks, tally) = attack(addr, &stop, slow, name);
        tokio::time::sleep(Duration::from_secs(2)).await; // let the attack build up
        let under = victim.run(pulls).await;
        let metrics = http.get(format!("{base}/metrics")).send().await.map(|r| r.text());
        let metrics = match metrics {
            Ok(t) => t.await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.abort();
        }
        notes.push(format!("{name}: attacker {}; server memory {}", tally.line(), memory(pid)));
        for family in [
            "marksync_connections_evicted_total",
            "marksync_connections_refused_total",
            "marksync_user_cap_refusals_total",
            "marksync_streams_cut_total",
            "marksync_budget_refusals_total",
        ] {
            for l in metrics.lines().filter(|l| l.starts_with(family)) {
                notes.push(format!("  {l}"));
            }
        }
        table.push((name.to_owned(), alone, under));
        // Let the attacker's connections and streams wind down before the next baseline.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    println!("victim: {rows} rows; a pull (all of them) or a one-op push every 20 ms, {pulls} of each per phase; server: release, default limits, SQLite");
    println!("| attack | pull p50 alone → under | pull p99 alone → under | push p50 alone → under | push p99 alone → under | p99 ratio pull / push | victim failures alone / under |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut met = true;
    for (name, a, u) in &table {
        let (rp, rq) =
            (ratio(pct(&u.pulls, 0.99), pct(&a.pulls, 0.99)), ratio(pct(&u.pushes, 0.99), pct(&a.pushes, 0.99)));
        met &= rp <= 2.0 && rq <= 2.0;
        println!(
            "| {name} | {} → {} | {} → {} | {} → {} | {} → {} | {rp:.2}× / {rq:.2}× | {} / {} |",
            ms(pct(&a.pulls, 0.5)),
            ms(pct(&u.pulls, 0.5)),
            ms(pct(&a.pulls, 0.99)),
            ms(pct(&u.pulls, 0.99)),
            ms(pct(&a.pushes, 0.5)),
            ms(pct(&u.pushes, 0.5)),
            ms(pct(&a.pushes, 0.99)),
            ms(pct(&u.pushes, 0.99)),
            a.failed,
            u.failed
        );
    }
    println!("goal (victim p99 ≤ 2× alone, pull and push, every attack): {}", if met { "met" } else { "not met" });
    for n in notes {
        println!("{n}");
    }
    let _ = server.start_kill();
    let _ = server.wait().await;
    let _ = std::fs::remove_dir_all(dir);
}
