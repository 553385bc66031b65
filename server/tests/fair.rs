//! Fair shares (issue 24): no user slows another by the work they ask for.
//! A per-user budget of judged ops and of read work (spaces named, rows and
//! entries read), refused with `429 rate_limited` and `Retry-After` before
//! any of it touches the database; and event streams that cannot take every
//! connection, a user's cap holding before the server's. Budgets here refill
//! at 0.01 a second, so nothing waits on the clock: each test asserts what
//! the server answered and wrote, never how fast.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use marksync_server::Config;
use serde_json::{json, Map, Value};

/// A budget that never refills within a test.
const SLOW: f64 = 0.01;

async fn start(b: Backend, tune: impl FnOnce(&mut Config)) -> Option<TestServer> {
    let database = fresh_database(b).await?;
    let mut c = config(&database);
    tune(&mut c);
    Some(TestServer::start(c).await.owning_database())
}

/// A server whose read budget is `burst`, never refilled within a test.
async fn start_reading(b: Backend, burst: f64) -> Option<TestServer> {
    start(b, |c| {
        c.read_rate = SLOW;
        c.read_burst = Some(burst);
    })
    .await
}

fn batch(user: &str, from: usize, n: usize) -> Vec<Value> {
    (from..from + n).map(|i| full(&format!("{user}:{i}"), &format!("r{i}"), i as u64 + 1, 5)).collect()
}

fn assert_budget_refusal(status: u16, body: &Value, what: &str) {
    assert_eq!(status, 429, "{what}: {body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{what}: {body}");
}

/// Follows `n` spaces nobody is in (each one planned and answered as left).
fn follows(n: usize) -> Value {
    let m: Map<String, Value> = (0..n).map(|i| (format!("s{i}"), json!({"cursor": 0, "role": "viewer"}))).collect();
    Value::Object(m)
}

/// A push costs its ops: the batch that does not fit the user's budget is
/// refused whole, `429` with `Retry-After`, and nothing of it is written;
/// another user's budget is their own (before: every batch was judged, the
/// request rate was all that bounded a user).
async fn an_op_flood_is_refused_before_its_transaction(b: Backend) {
    let Some(t) = start(b, |c| {
        c.ops_rate = SLOW;
        c.ops_burst = Some(250.0);
    })
    .await
    else {
        return;
    };
    t.push_ok("flood", &batch("flood", 0, 100)).await;
    t.push_ok("flood", &batch("flood", 100, 100)).await;
    let r = t
        .http
        .post(t.url("/v1/push"))
        .bearer_auth("dev:flood")
        .body(json!({"attemptKey": "d:3", "batch": batch("flood", 200, 100)}).to_string())
        .send()
        .await
        .unwrap();
    let retry: u64 = r.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
    assert!(retry >= 1, "Retry-After on a budget refusal");
    let (status, body) = (r.status().as_u16(), r.json::<Value>().await.unwrap());
    assert_budget_refusal(status, &body, "the third 100-op batch against a budget of 250");
    assert_eq!(t.counts("flood").await.verdicts, 200, "the refused batch wrote nothing");
    // What is left (50) still takes a batch that fits it.
    t.push_ok("flood", &batch("flood", 300, 40)).await;
    t.push_ok("bystander", &batch("bystander", 0, 200)).await;
    // A membership write is work of the same budget (10 ops left, a write costs 50).
    let (status, body) = post(&t, "/v1/spaces", "flood", json!({"space": "club"})).await;
    assert_budget_refusal(status, &body, "a space created with the budget spent");
    assert!(t.metric("marksync_budget_refusals_total{budget=\"ops\"}").await >= 2.0);
    t.stop().await;
}
both!(an_op_flood_is_refused_before_its_transaction);

/// One push of a user at a time reaches the writer: a flooder's pushes in
/// progress queue per user, so a bystander's push waits for at most the one
/// flooder transaction under way, not every one sent before it. Each push
/// holds its lock 400 ms (the `delayMs` fault); the flooder sends four, the
/// bystander one while the first is held. Answered in this order: the
/// flooder's first, the bystander's, then the flooder's others (before:
/// SQLite's writer served the queue in arrival order, the bystander last).
async fn a_users_pushes_queue_behind_each_other_not_in_front_of_everyone(b: Backend) {
    let Some(t) = start(b, |_| {}).await else { return };
    let order = flood_then_victim(&t).await;
    let victim = order.iter().position(|u| u == "victim0").unwrap();
    assert!(victim <= 1, "the bystander waited for one flooder transaction at most: {order:?}");
    t.stop().await;
}
both!(a_users_pushes_queue_behind_each_other_not_in_front_of_everyone);

/// SQLite's writer takes its users in turn by itself (`store/writer.rs`):
/// with the pushes' turns off, the flooder's four pushes wait at the writer
/// and the bystander is still served after at most one of them. It covers
/// every write, membership writes too, which take no push turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_alone_takes_users_in_turn() {
    let Some(t) = start(Backend::Sqlite, |c| c.sabotage = marksync_server::Sabotage::NoTurn).await else { return };
    let order = flood_then_victim(&t).await;
    let victim = order.iter().position(|u| u == "victim0").unwrap();
    assert!(victim <= 1, "the writer's ring put the bystander second: {order:?}");
    t.stop().await;
}

/// Without the turns and with SQLite's writer in arrival order, the
/// bystander's push is answered after every one of the flooder's (the two
/// previous tests' teeth).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_turns_the_bystander_waits_for_the_whole_flood() {
    let Some(t) = start(Backend::Sqlite, |c| c.sabotage = marksync_server::Sabotage::Unfair).await else { return };
    let order = flood_then_victim(&t).await;
    assert_eq!(order.last().map(String::as_str), Some("victim0"), "{order:?}");
    t.stop().await;
}

/// Four pushes of `flood` (each holding its lock 400 ms), then one of
/// `victim` while the first is held: the order they were answered in.
async fn flood_then_victim(t: &TestServer) -> Vec<String> {
    assert_eq!(t.faults(json!({"delayMs": 400})).await, 200);
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let send = |user: &'static str, i: usize| {
        let (http, url, done) = (t.http.clone(), t.url("/v1/push"), std::sync::Arc::clone(&done));
        async move {
            let body = json!({"attemptKey": format!("{user}:a{i}"), "batch": batch(user, i, 1)}).to_string();
            let r = http.post(url).bearer_auth(format!("dev:{user}")).body(body).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            done.lock().unwrap().push(format!("{user}{i}"));
        }
    };
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(tokio::spawn(send("flood", i)));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    tasks.push(tokio::spawn(send("victim", 0)));
    for task in tasks {
        task.await.unwrap();
    }
    t.faults(json!({"delayMs": 0})).await;
    let order = std::mem::take(&mut *done.lock().unwrap());
    order
}

/// A pull costs the spaces it names: against a budget of 2,500, one naming
/// 2,000 spaces and the next naming 1,000 are served, the second leaving a
/// debt; then the user's next pull, with its body of 10,000 spaces or
/// without a body, is refused before anything is read, while another user's
/// big pull is served (before: a user could name 10,000 spaces in every
/// pull, at the request rate).
async fn a_pull_naming_many_spaces_is_budgeted_per_user(b: Backend) {
    let Some(t) = start_reading(b, 2_500.0).await else { return };
    let answer = pull(&t, "greedy", follows(2_000)).await;
    assert_eq!(answer["left"].as_array().unwrap().len(), 2_000);
    assert_eq!(pull(&t, "greedy", follows(1_000)).await["left"].as_array().unwrap().len(), 1_000);
    let (status, body) = post(&t, "/v1/pull", "greedy", json!({ "spaces": follows(10_000) })).await;
    assert_budget_refusal(status, &body, "a pull naming 10,000 spaces in debt");
    let (status, body) = t.pull_raw("greedy", "cursor=0").await;
    assert_budget_refusal(status, &body, "a small pull in debt");
    assert_eq!(pull(&t, "other", follows(2_000)).await["left"].as_array().unwrap().len(), 2_000);
    assert!(t.metric("marksync_budget_refusals_total{budget=\"reads\"}").await >= 2.0);
    t.stop().await;
}
both!(a_pull_naming_many_spaces_is_budgeted_per_user);

/// A user's reads go one at a time, each asking the budget after the one
/// before it has paid: eight pulls of 2,000 spaces sent at once against a
/// budget of 2,500 are two served (the second leaves the debt) and six
/// refused, whatever their timing (before: all eight found the budget
/// unspent and were served — 16,000 spaces read on a budget of 2,500;
/// `Sabotage::ReadsAtOnce` brings that back).
async fn reads_sent_at_once_cannot_overrun_the_budget(b: Backend) {
    let Some(t) = start_reading(b, 2_500.0).await else { return };
    let body = json!({ "spaces": follows(2_000) }).to_string();
    let sends = (0..8).map(|_| {
        let (http, url, body) = (t.http.clone(), t.url("/v1/pull"), body.clone());
        tokio::spawn(async move {
            http.post(url).bearer_auth("dev:greedy").body(body).send().await.unwrap().status().as_u16()
        })
    });
    let mut statuses = Vec::new();
    for s in sends.collect::<Vec<_>>() {
        statuses.push(s.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429, 429, 429], "served, then refused once in debt");
    // Another user's reads are their own.
    assert_eq!(pull(&t, "other", follows(2_000)).await["left"].as_array().unwrap().len(), 2_000);
    t.stop().await;
}
both!(reads_sent_at_once_cannot_overrun_the_budget);

/// Rows read are paid after the read (they are known only then): a pull of
/// 1,000 rows against a budget of 1,000 leaves its user in debt, and then
/// every read of theirs — a pull, a members listing, a list of spaces, a
/// pull with a body — is refused in the guard, before its body is read;
/// another user reads on (before: reads were bounded by the request rate only).
async fn rows_read_are_paid_after_and_a_debt_refuses_every_read(b: Backend) {
    let Some(t) = start_reading(b, 1_000.0).await else { return };
    for from in [0, 500] {
        t.push_ok("reader", &batch("reader", from, 500)).await;
    }
    let (status, page) = t.pull_raw("reader", "cursor=0&limit=1000").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["changes"].as_array().unwrap().len(), 1_000);
    let (status, body) = t.pull_raw("reader", "cursor=0").await;
    assert_budget_refusal(status, &body, "a pull in debt");
    let (status, body) = get(&t, "/v1/spaces/members?space=~reader", "reader").await;
    assert_budget_refusal(status, &body, "a members listing in debt");
    let (status, body) = get(&t, "/v1/spaces", "reader").await;
    assert_budget_refusal(status, &body, "a list of spaces in debt");
    let (status, body) = post(&t, "/v1/pull", "reader", json!({ "spaces": follows(10) })).await;
    assert_budget_refusal(status, &body, "a pull with a body in debt");
    assert_eq!(t.pull_raw("other", "cursor=0").await.0, 200);
    assert_eq!(get(&t, "/v1/spaces", "other").await.0, 200);
    t.stop().await;
}
both!(rows_read_are_paid_after_and_a_debt_refuses_every_read);

/// Opens an event stream as `user` on a client of its own: the status, and
/// the response (held open) when it was served; `None` when the connection
/// was closed without an answer.
async fn open_stream(t: &TestServer, user: &str) -> Option<(u16, reqwest::Response)> {
    let http = reqwest::Client::new();
    let r = http.get(t.url("/v1/events")).bearer_auth(format!("dev:{user}")).send().await.ok()?;
    Some((r.status().as_u16(), r))
}

/// One space's crowd — 30 member ids, one event stream each — against 20
/// connections with 6 kept back: 14 streams are served, the rest are `429`,
/// and a bystander's `/healthz`, pull and push are served on new connections
/// (before: the crowd's streams took all 20 connections, every one busy, and
/// the bystander's connections were closed unanswered).
async fn a_crowd_of_streams_leaves_connections_for_everyone_else(b: Backend) {
    let Some(t) = start(b, |c| {
        c.max_connections = 20;
        c.connection_reserve = 6;
    })
    .await
    else {
        return;
    };
    let mut held = Vec::new();
    let (mut served, mut refused) = (0, 0);
    for i in 0..30 {
        match open_stream(&t, &format!("crowd{i}")).await {
            Some((200, r)) => {
                served += 1;
                held.push(r);
            }
            Some((429, r)) => {
                refused += 1;
                assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "rate_limited");
            }
            other => panic!("crowd{i}: {:?}", other.map(|(s, _)| s)),
        }
    }
    assert_eq!((served, refused), (14, 16), "streams take at most the connections less the reserve");
    let bystander = reqwest::Client::new();
    let health = bystander.get(t.url("/healthz")).send().await.map(|r| r.status().as_u16());
    assert_eq!(health.ok(), Some(200), "a bystander's /healthz");
    let pulled = bystander.get(t.url("/v1/pull?cursor=0")).bearer_auth("dev:bystander").send().await;
    assert_eq!(pulled.map(|r| r.status().as_u16()).ok(), Some(200), "a bystander's pull");
    t.push_ok("bystander", &batch("bystander", 0, 1)).await;
    drop(held);
    t.stop().await;
}
both!(a_crowd_of_streams_leaves_connections_for_everyone_else);

/// At the server's cap of streams the shares are evened out: a newcomer with
/// none takes the oldest stream of the user holding the most (that stream
/// ends), until no one holds two more than the newcomer (before: the
/// heavy user's streams held their places and nothing was ever cut).
async fn at_the_servers_cap_the_heaviest_user_gives_up_a_stream(b: Backend) {
    let Some(t) = start(b, |c| {
        c.max_connections = 20;
        c.connection_reserve = 10;
        c.max_streams_per_user = 8;
    })
    .await
    else {
        return;
    };
    let mut heavy = Vec::new();
    for _ in 0..8 {
        let (status, r) = open_stream(&t, "heavy").await.unwrap();
        assert_eq!(status, 200);
        heavy.push(r);
    }
    let mut light = Vec::new();
    for user in ["b", "c"] {
        let (status, r) = open_stream(&t, user).await.unwrap();
        assert_eq!(status, 200);
        light.push(r);
    }
    // 10 streams, the server's cap: the newcomer's stream is served, heavy's oldest ends.
    let (status, newcomer) = open_stream(&t, "newcomer").await.unwrap();
    assert_eq!(status, 200, "a newcomer's stream at the cap");
    let mut oldest = heavy.remove(0);
    let mut seen = String::new();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match oldest.chunk().await {
                Ok(Some(c)) => seen.push_str(&String::from_utf8_lossy(&c)),
                _ => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "heavy's oldest stream ended; it had sent {seen:?}");
    assert_eq!(t.metric("marksync_streams_cut_total").await, 1.0);
    // Heavy, down to 7, gives up another to the next user with none.
    let (status, second) = open_stream(&t, "second").await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(t.metric("marksync_streams_cut_total").await, 2.0);
    // Heavy holds 6, b holds 1: b's new streams are served until the shares are even.
    let mut served = 0;
    for _ in 0..8 {
        let (status, r) = open_stream(&t, "b").await.unwrap();
        if status == 200 {
            served += 1;
            light.push(r);
        }
    }
    assert_eq!(served, 2, "b grows to 3, heavy shrinks to 4: no one holds two more than another");
    light.push(second);
    drop((heavy, light, newcomer));
    t.stop().await;
}
both!(at_the_servers_cap_the_heaviest_user_gives_up_a_stream);
