//! A victim under attack: one user's pull latency with and without an attacker
//! running, in the same run, against the real `marksync-server` binary (its
//! default limits, SQLite, dev auth) on 127.0.0.1.
//!
//! ```text
//! cargo bench -p marksync-server --bench abuse
//! ```
//!
//! The victim has `ABUSE_ROWS` (200) rows and pulls them all (one page), one
//! pull every 20 ms, `ABUSE_PULLS` (300) times per phase. Phase 1: alone.
//! Phase 2: the same while the attacker runs
//! - an events flood: 64 tasks of one user opening `/v1/events` streams over and
//!   over, holding each one it gets;
//! - slowloris: `ABUSE_SLOW` (400) connections sending unfinished headers a byte
//!   a second, reconnecting when closed, and 32 with a valid token trickling a
//!   body under its Content-Length;
//! - a push flood: 16 clients of a third user pushing 100-op batches back to
//!   back, ignoring every 429.
//!
//! `ABUSE_ATTACKS` (`events,slow,push`) picks the attacks. Printed: the victim's pull p50/p99 in both phases and their ratio (goal:
//! within 2×), how the attacker's requests were answered, and the server's peak
//! resident memory (VmHWM, Linux) after each phase.
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

/// The victim's pulls: `n` of them, one every 20 ms; their sorted latencies and the failures.
async fn victim(http: &reqwest::Client, base: &str, n: usize) -> (Vec<Duration>, usize) {
    let mut took = Vec::with_capacity(n);
    let mut failed = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    for _ in 0..n {
        tick.tick().await;
        let t = Instant::now();
        match http.get(format!("{base}/v1/pull?cursor=0&limit=1000")).bearer_auth("dev:victim").send().await {
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                took.push(t.elapsed());
            }
            _ => failed += 1,
        }
    }
    took.sort();
    (took, failed)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    refused: AtomicU64,
    other: AtomicU64,
    cut: AtomicU64,
}

impl Tally {
    fn count(&self, r: &Result<reqwest::Response, reqwest::Error>) {
        let c = match r {
            Ok(r) if r.status().is_success() => &self.ok,
            Ok(r) if r.status().as_u16() == 429 => &self.refused,
            Ok(_) => &self.other,
            Err(_) => &self.cut,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    fn line(&self, what: &str) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{what}: {} ok, {} 429, {} other, {} network errors",
            g(&self.ok),
            g(&self.refused),
            g(&self.other),
            g(&self.cut)
        )
    }
}

/// Starts the attacks named in `which`; they run until `stop`.
fn attack(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    slow: usize,
    which: &str,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Tally>, Arc<Tally>) {
    let base = format!("http://{addr}");
    let (events, pushes) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut tasks = Vec::new();
    let on = |a: &str| which.split(',').any(|w| w.trim() == a);
    for _ in 0..if on("events") { 64 } else { 0 } {
        let (stop, base, tally) = (Arc::clone(&stop), base.clone(), Arc::clone(&events));
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let r = http.get(format!("{base}/v1/events?token=dev:attacker")).send().await;
                tally.count(&r);
                match r {
                    Ok(mut r) if r.status().is_success() => {
                        while !stop.load(Ordering::Relaxed) {
                            match tokio::time::timeout(Duration::from_millis(200), r.chunk()).await {
                                Ok(Ok(Some(_))) | Err(_) => {}
                                _ => break,
                            }
                        }
                    }
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        }));
    }
    for i in 0..if on("slow") { slow } else { 0 } {
        let stop = Arc::clone(&stop);
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
    for c in 0..if on("push") { 16 } else { 0 } {
        let (stop, base, tally) = (Arc::clone(&stop), base.clone(), Arc::clone(&pushes));
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
    (tasks, events, pushes)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (rows, pulls, slow) = (env("ABUSE_ROWS", 200), env("ABUSE_PULLS", 300), env("ABUSE_SLOW", 400));
    let dir = std::env::temp_dir().join(format!("marksync-abuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_marksync-server"))
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

    let (alone, failed_alone) = victim(&http, &base, pulls).await;
    let mem_alone = memory(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let which = std::env::var("ABUSE_ATTACKS").unwrap_or_else(|_| "events,slow,push".into());
    let (tasks, events, pushes) = attack(addr, Arc::clone(&stop), slow, &which);
    tokio::time::sleep(Duration::from_secs(2)).await; // let the attack build up
    let (attacked, failed_attacked) = victim(&http, &base, pulls).await;
    let mem_attacked = memory(pid);
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }

    println!("victim pulls {rows} rows every 20 ms, {pulls} pulls per phase (server: default limits, SQLite); attacks: {which}");
    println!("| phase | p50 | p99 | failed |");
    println!("|---|---:|---:|---:|");
    println!("| alone | {} | {} | {failed_alone} |", ms(pct(&alone, 0.5)), ms(pct(&alone, 0.99)));
    println!("| under attack | {} | {} | {failed_attacked} |", ms(pct(&attacked, 0.5)), ms(pct(&attacked, 0.99)));
    let ratio = pct(&attacked, 0.99).as_secs_f64() / pct(&alone, 0.99).as_secs_f64();
    println!("p99 under attack ÷ alone: {ratio:.2}× (goal ≤ 2×: {})", if ratio <= 2.0 { "met" } else { "not met" });
    println!("{}", events.line("attacker /v1/events connects"));
    println!("{}", pushes.line("attacker pushes"));
    for name in [
        "marksync_connections_open",
        "marksync_connections_evicted_total",
        "marksync_connections_refused_total",
        "marksync_user_cap_refusals_total",
        "marksync_body_timeouts_total",
    ] {
        for l in metrics.lines().filter(|l| l.starts_with(name)) {
            println!("  {l}");
        }
    }
    println!("server memory alone: {mem_alone}");
    println!("server memory under attack: {mem_attacked}");
    let _ = server.start_kill();
    let _ = server.wait().await;
    let _ = std::fs::remove_dir_all(dir);
}
