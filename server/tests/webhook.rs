//! Webhooks that never lose a change (docs/server.md, "Webhooks"): every
//! committed change reaches a real receiver at least once — through a
//! receiver that fails, one that never answers, one that is down while the
//! server is killed and started again — signed, in order per space; refused
//! and duplicate ops carry nothing, a rolled-back push owes nothing; two
//! server processes on one PostgreSQL send each delivery once between them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use common::process::{command, Spawned};
use common::{config, fresh_database, full, in_space, post, Backend, TestServer};

const SECRET: &str = "the-webhook-secret-of-at-least-32-characters";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Ok,
    Fail,
    Hang,
    /// Fails every third request, takes the others.
    FailEveryThird,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    id: String,
    signature: String,
    body: String,
    answered_ok: bool,
}

/// A real HTTP receiver whose behaviour the test switches.
#[derive(Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    mode: Arc<Mutex<Mode>>,
    /// A space whose deliveries the receiver never answers, whatever the mode.
    hang_space: Arc<Mutex<Option<String>>>,
}

impl Receiver {
    fn new(mode: Mode) -> Receiver {
        Receiver { got: Arc::default(), mode: Arc::new(Mutex::new(mode)), hang_space: Arc::default() }
    }

    /// Serves on `listener` (until the returned task is aborted).
    fn serve(&self, listener: tokio::net::TcpListener) -> tokio::task::JoinHandle<()> {
        let r = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let r = r.clone();
                async move {
                    let body = String::from_utf8(body.to_vec()).unwrap();
                    let space = serde_json::from_str::<Value>(&body).unwrap()["space"].as_str().map(str::to_owned);
                    let mode = match *r.hang_space.lock().unwrap() {
                        Some(ref hang) if space.as_ref() == Some(hang) => Mode::Hang,
                        _ => *r.mode.lock().unwrap(),
                    };
                    let mode = match mode {
                        Mode::FailEveryThird if r.got.lock().unwrap().len() % 3 == 2 => Mode::Fail,
                        Mode::FailEveryThird => Mode::Ok,
                        m => m,
                    };
                    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                    r.got.lock().unwrap().push(Got {
                        id: header("marksync-delivery"),
                        signature: header("marksync-signature"),
                        body,
                        answered_ok: mode == Mode::Ok,
                    });
                    match mode {
                        Mode::Ok | Mode::FailEveryThird => StatusCode::NO_CONTENT,
                        Mode::Fail => StatusCode::SERVICE_UNAVAILABLE,
                        Mode::Hang => {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            StatusCode::OK
                        }
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() })
    }

    async fn start(mode: Mode) -> (Receiver, String, tokio::task::JoinHandle<()>) {
        let r = Receiver::new(mode);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let task = r.serve(listener);
        (r, url, task)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    /// The opIds of every change answered 2xx, once each.
    fn delivered_ops(&self) -> BTreeSet<String> {
        self.got()
            .iter()
            .filter(|g| g.answered_ok)
            .flat_map(|g| changes(&g.body).into_iter().map(|c| c["opId"].as_str().unwrap().to_owned()))
            .collect()
    }

    /// Waits (`secs` at most) until every op of `ops` was delivered.
    async fn wait_for(&self, ops: &[&str], secs: u64) {
        let want: BTreeSet<String> = ops.iter().map(|s| s.to_string()).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        while !want.is_subset(&self.delivered_ops()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not delivered within {secs} s: {:?}; got {:?}",
                want.difference(&self.delivered_ops()).collect::<Vec<_>>(),
                self.got()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn changes(body: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(body).unwrap();
    v["changes"].as_array().unwrap().clone()
}

/// The signature a receiver computes: HMAC-SHA256(secret, "<t>." + body), hex.
fn expected_signature(t: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// Every request is signed for its body, recently, and names its delivery;
/// a space's deliveries were answered 2xx in the order of their seqs (a
/// delivery sent again keeps its id and its place).
fn check_signed_and_ordered(got: &[Got]) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut last_seq: HashMap<String, u64> = HashMap::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for g in got {
        let (t, v1) = g.signature.split_once(',').unwrap();
        let t = t.strip_prefix("t=").unwrap();
        assert_eq!(v1.strip_prefix("v1=").unwrap(), expected_signature(t, &g.body), "{g:?}");
        assert!(now.abs_diff(t.parse::<u64>().unwrap()) < 120, "t is the sending time");
        let body: Value = serde_json::from_str(&g.body).unwrap();
        assert_eq!(body["id"], g.id.as_str(), "Marksync-Delivery names the body's id");
        if !g.answered_ok {
            continue;
        }
        let space = body["space"].as_str().unwrap().to_owned();
        let seqs: Vec<u64> = changes(&g.body).iter().map(|c| c["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "changes in seq order: {seqs:?}");
        if !seen.insert(g.id.clone()) {
            continue; // sent again after a lost answer: same id, same place
        }
        let prev = last_seq.get(&space).copied().unwrap_or(0);
        assert!(seqs[0] > prev, "space {space}: a delivery out of order ({} after {prev})", seqs[0]);
        last_seq.insert(space, *seqs.last().unwrap());
    }
}

fn hooked(database: &str, url: &str) -> marksync_server::Config {
    let mut c = config(database);
    c.webhook_url = Some(url.to_owned());
    c.webhook_secret = Some(SECRET.into());
    c.webhook_timeout_ms = 300;
    c.webhook_backoff_ms = 50;
    c
}

/// A receiver that refuses, then never answers, then takes: every applied
/// op arrives, signed, in order per space, with the fields it set; the
/// refused op and the duplicate carry nothing; a push rolled back owes
/// nothing; the backlog shows on /metrics and drains to 0.
async fn every_change_arrives_through_failures_and_hangs(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (receiver, url, _task) = Receiver::start(Mode::Fail).await;
    let t = TestServer::start(hooked(&database, &url)).await.owning_database();

    assert_eq!(post(&t, "/v1/spaces", "alice", json!({"space": "team"})).await.0, 200);
    let v = t
        .push_ok("alice", &[full("a1", "r1", 1_000, 5), full("a2", "r2", 1_001, 500), full("a1", "r1", 1_000, 5)])
        .await;
    assert_eq!(common::statuses(&v), ["applied", "rejected", "duplicate"]);
    t.push_ok("alice", &[in_space("team", full("t1", "r1", 1_002, 6)), full("a3", "r1", 1_003, 7)]).await;
    t.push_ok("bob", &[in_space("team", full("x1", "r9", 1_004, 8))]).await; // bob is no member: refused
    assert_eq!(t.faults(json!({"failBeforeCommit": 1})).await, 200);
    let (status, _) = t.push("alice", &[full("rolled-back", "r3", 1_005, 9)]).await;
    assert_eq!(status, 500);
    t.push_ok("alice", &[in_space("team", common::op("t2", "r1", 1_006, json!({"reps": 9})))]).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while receiver.got().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "tried while the receiver refuses");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(receiver.delivered_ops().is_empty());
    receiver.set(Mode::Hang);
    tokio::time::sleep(Duration::from_millis(800)).await;
    receiver.set(Mode::Ok);
    receiver.wait_for(&["a1", "a3", "t1", "t2"], 30).await;

    assert_eq!(receiver.delivered_ops(), ["a1", "a3", "t1", "t2"].iter().map(|s| s.to_string()).collect());
    let got = receiver.got();
    check_signed_and_ordered(&got);
    let ok: Vec<Value> = got.iter().filter(|g| g.answered_ok).map(|g| serde_json::from_str(&g.body).unwrap()).collect();
    let team: Vec<&Value> = ok.iter().filter(|b| b["space"] == "team").collect();
    assert_eq!(team[0]["user"], "alice");
    let t2 = team.iter().flat_map(|b| b["changes"].as_array().unwrap()).find(|c| c["opId"] == "t2").unwrap();
    assert_eq!(
        (t2["table"].as_str(), t2["rowId"].as_str(), &t2["fields"], t2["at"].as_u64(), t2["seq"].as_u64()),
        (Some("sets"), Some("r1"), &json!({"reps": 9}), Some(1_006), Some(2))
    );
    let failed = t.metric("marksync_webhook_deliveries_total{outcome=\"failed\"}").await;
    assert!(failed >= 2.0, "refusals and timeouts count as failures: {failed}");
    // The backlog is counted once a second.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while t.metric("marksync_webhook_pending").await > 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the backlog drains to 0");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(t.metric("marksync_webhook_oldest_age_seconds").await, 0.0);
    t.stop().await;
}
both!(every_change_arrives_through_failures_and_hangs);

/// A receiver that fails now and then while a backlog drains: each failure
/// after deliveries went through waits the first backoff again. The wait
/// doubled on from every failure since the queue last ran empty (50 ms,
/// then 0.1, 0.2 … 25 s by the tenth), so an occasional failure under steady
/// traffic reached waits of minutes.
async fn a_failure_after_deliveries_went_through_backs_off_from_the_start(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (receiver, url, _task) = Receiver::start(Mode::Fail).await;
    let t = TestServer::start(hooked(&database, &url)).await.owning_database();
    let ids: Vec<String> = (0..30).map(|i| format!("b{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        t.push_ok("alice", &[full(id, &format!("r{i}"), 1_000 + i as u64, 5)]).await;
    }
    receiver.set(Mode::FailEveryThird);
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    // 30 deliveries, about 10 failures: each waits 50 ms and its jitter, and
    // the sender's idle poll (0.5 s). Doubling on from the last run, the
    // tenth alone would wait 25 s.
    receiver.wait_for(&ids, 20).await;
    t.stop().await;
}
both!(a_failure_after_deliveries_went_through_backs_off_from_the_start);

/// The receiver takes the first changes, then is down while more commit and
/// the server is SIGKILLed; started again on the same database, the server
/// delivers every change, in order, the duplicates counted.
#[cfg(unix)]
async fn deliveries_survive_a_kill_and_a_restart(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    // The receiver takes the first changes, then goes down.
    let receiver = Receiver::new(Mode::Ok);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut first = Some(receiver.serve(listener));
    let url = format!("http://127.0.0.1:{port}/hook");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--database",
        &database,
        "--dev-auth",
        "--webhook-url",
        &url,
        "--webhook-secret",
        SECRET,
        "--webhook-timeout-ms",
        "300",
        "--webhook-backoff-ms",
        "50",
    ];
    let s = Spawned::start(command(&args)).await.unwrap_or_else(|log| panic!("starts: {log}"));
    let http = reqwest::Client::new();
    let mut ops = Vec::new();
    for i in 0..20 {
        if i == 10 {
            receiver.wait_for(&["k0", "k9"], 30).await;
            if let Some(first) = first.take() {
                first.abort();
                let _ = first.await;
            }
        }
        let id = format!("k{i}");
        let body = json!({"attemptKey": format!("d:{i}"), "batch": [full(&id, &format!("r{}", i % 5), 1_000 + i, 5)]});
        let r = http.post(format!("{}/v1/push", s.url)).bearer_auth("dev:kim").json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        ops.push(id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.signal(libc::SIGKILL);
    let mut s = s;
    s.exited().await;

    let task = receiver.serve(tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap());
    let s2 = Spawned::start(command(&args)).await.unwrap_or_else(|log| panic!("starts again: {log}"));
    let want: Vec<&str> = ops.iter().map(String::as_str).collect();
    receiver.wait_for(&want, 30).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = receiver.got();
    check_signed_and_ordered(&got);
    // At least once: a delivery may come again (its answer lost to the kill); counted, and rare.
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for g in got.iter().filter(|g| g.answered_ok) {
        *times.entry(g.id.as_str()).or_default() += 1;
    }
    let duplicates: usize = times.values().map(|n| n - 1).sum();
    assert_eq!(times.len(), 20, "one delivery per push");
    assert!(duplicates <= 1, "{duplicates} deliveries came twice");
    drop(s2);
    task.abort();
    common::drop_database(&database).await;
}
#[cfg(unix)]
both!(deliveries_survive_a_kill_and_a_restart);

/// Two server processes on one PostgreSQL: each delivery is sent once
/// between them (a queue is leased by one at a time), all of them, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_send_each_delivery_once() {
    let Some(database) = fresh_database(Backend::Postgres).await else { return };
    let (receiver, url, _task) = Receiver::start(Mode::Ok).await;
    let a = TestServer::start(hooked(&database, &url)).await;
    let b = TestServer::start(hooked(&database, &url)).await.owning_database();
    let mut want = Vec::new();
    let mut pushes = Vec::new();
    for i in 0..40u64 {
        let server = if i % 2 == 0 { &a } else { &b };
        let user = format!("u{}", i % 4);
        let id = format!("p{i}");
        want.push(id.clone());
        pushes.push(async move { server.push_ok(&user, &[full(&id, &format!("r{i}"), 1_000 + i, 5)]).await });
    }
    futures_util::future::join_all(pushes).await;
    let ids: Vec<&str> = want.iter().map(String::as_str).collect();
    receiver.wait_for(&ids, 30).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let got = receiver.got();
    check_signed_and_ordered(&got);
    let mut sent: BTreeMap<&str, usize> = BTreeMap::new();
    for g in &got {
        *sent.entry(g.id.as_str()).or_default() += 1;
    }
    assert_eq!(sent.len(), 40, "one delivery per push");
    assert!(sent.values().all(|n| *n == 1), "each sent once: {sent:?}");
    a.stop().await;
    b.stop().await;
}

/// A receiver that never answers one space's deliveries holds up that space
/// alone: a change to another space committed while the first hangs is
/// delivered while it still hangs, not after its timeout.
async fn a_receiver_stuck_on_one_space_holds_up_no_other(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (receiver, url, _task) = Receiver::start(Mode::Ok).await;
    *receiver.hang_space.lock().unwrap() = Some("stuck".into());
    let mut c = hooked(&database, &url);
    c.webhook_timeout_ms = 25_000; // the receiver hangs 30 s: the stuck send lasts the whole test
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(post(&t, "/v1/spaces", "ann", json!({"space": "stuck"})).await.0, 200);
    t.push_ok("ann", &[in_space("stuck", full("s1", "r1", 1_000, 5))]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !receiver.got().iter().any(|g| changes(&g.body).iter().any(|c| c["opId"] == "s1")) {
        assert!(tokio::time::Instant::now() < deadline, "the stuck space's delivery is being sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t.push_ok("ann", &[full("p1", "r2", 1_001, 5)]).await;
    t.push_ok("bob", &[full("b1", "r3", 1_002, 5)]).await;
    receiver.wait_for(&["p1", "b1"], 10).await;
    assert!(!receiver.delivered_ops().contains("s1"), "the stuck space is still being waited for");
    t.stop().await;
}
both!(a_receiver_stuck_on_one_space_holds_up_no_other);

/// Past `--webhook-max-pending` deliveries waiting, a push is answered 503
/// with nothing judged; the devices send it again once the receiver caught up.
async fn a_full_backlog_holds_pushes_back_and_loses_nothing(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (receiver, url, _task) = Receiver::start(Mode::Fail).await;
    let mut c = hooked(&database, &url);
    c.webhook_max_pending = 2;
    let t = TestServer::start(c).await.owning_database();
    t.push_ok("ann", &[full("f1", "r1", 1_000, 5)]).await;
    t.push_ok("ann", &[full("f2", "r2", 1_001, 5)]).await;
    // At once: the deliveries a push commits count before the backlog's
    // next count (once a second), which let a second of pushes through.
    let (status, body) = t.push("ann", &[full("f3", "r3", 1_002, 5)]).await;
    assert_eq!((status, &body["error"]["code"]), (503, &json!("unavailable")), "{body}");
    let verdicts = t.counts("ann").await.verdicts;
    receiver.set(Mode::Ok);
    receiver.wait_for(&["f1", "f2"], 30).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = t.push("ann", &[full("f4", "r4", 1_003, 5)]).await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "pushes go again once the backlog drained");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(t.counts("ann").await.verdicts, verdicts + 1, "the refused push judged nothing");
    receiver.wait_for(&["f4"], 30).await;
    t.stop().await;
}
both!(a_full_backlog_holds_pushes_back_and_loses_nothing);

/// A webhook secret shorter than 32 characters, or a URL without a secret, stops the start.
#[tokio::test]
async fn a_weak_or_missing_secret_refuses_to_start() {
    let url = fresh_database(Backend::Sqlite).await.unwrap();
    let (status, log) = Spawned::run(command(&[
        "--database",
        &url,
        "--webhook-url",
        "http://127.0.0.1:9/hook",
        "--webhook-secret",
        "short",
    ]))
    .await;
    assert!(!status.success() && log.contains("--webhook-secret must be at least 32 characters"), "{log}");
    let (status, log) = Spawned::run(command(&["--database", &url, "--webhook-url", "http://127.0.0.1:9/hook"])).await;
    assert!(!status.success() && log.contains("webhook"), "{log}");
    common::drop_database(&url).await;
}
