//! PROTOCOL §5 (whole-request errors), auth, events, faults, metrics and the
//! HTTP surface, over real HTTP, on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use marksync_server::store::Counts;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn body(batch: Value) -> String {
    json!({"attemptKey": "d:a1", "batch": batch}).to_string()
}

async fn expect_error(t: &TestServer, user: &str, raw: String, status: u16, code: &str) {
    let (got, resp) = t.push_raw(user, raw.clone()).await;
    assert_eq!((got, resp["error"]["code"].as_str()), (status, Some(code)), "{raw:.200} → {resp}");
    assert!(resp["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
}

/// §5: each bad input gets its status and code, and nothing is written —
/// even when good ops come before the bad one in the batch.
async fn every_bad_input_is_refused_whole_and_writes_nothing(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let good = full("d:0", "d-0", 10, 5);
    let with = |bad: Value| body(json!([good.clone(), bad]));
    let mut at_string = full("d:1", "d-1", 10, 5);
    at_string["at"] = json!("10");
    let mut at_big = full("d:1", "d-1", 10, 5);
    at_big["at"] = json!(1u64 << 53);
    let mut at_negative = full("d:1", "d-1", 10, 5);
    at_negative["at"] = json!(-1);
    let mut at_float = full("d:1", "d-1", 10, 5);
    at_float["at"] = json!(1.5);
    let mut schema_zero = full("d:1", "d-1", 10, 5);
    schema_zero["schema"] = json!(0);
    let cases: Vec<(&str, String)> = vec![
        ("schema version 0 (versions start at 1)", with(schema_zero)),
        ("not JSON", "{\"attemptKey\": \"d:a1\", \"batch\": [".into()),
        ("not an object", "[1, 2]".into()),
        ("at as a string", with(at_string)),
        ("at > 2^53-1", with(at_big)),
        ("at negative", with(at_negative)),
        ("at fractional", with(at_float)),
        ("an object value", with(op("d:1", "d-1", 10, json!({"reps": {"n": 1}})))),
        ("an array value", with(op("d:1", "d-1", 10, json!({"reps": [1]})))),
        ("empty fields", with(op("d:1", "d-1", 10, json!({})))),
        ("a reserved field", with(op("d:1", "d-1", 10, json!({"_secret": 1})))),
        ("_deleted not boolean", with(op("d:1", "d-1", 10, json!({"_deleted": 1})))),
        ("a non-ASCII opId", with(full("dé:1", "d-1", 10, 5))),
        ("an empty opId", with(full("", "d-1", 10, 5))),
        ("a bad table", with(json!({"opId": "d:1", "table": "Sets", "rowId": "d-1", "at": 1, "fields": {"reps": 1}}))),
        (
            "an unknown op key",
            with(json!({"opId": "d:1", "table": "sets", "rowId": "d-1", "at": 1, "fields": {"reps": 1}, "x": 1})),
        ),
        ("a missing attemptKey", json!({"batch": [good.clone()]}).to_string()),
        // Objects only: serde_json alone reads a struct from its fields in order.
        ("an op as an array of its fields", with(json!(["d:1", "sets", "d-1", {"reps": 1}, 1]))),
        ("the body as an array of its fields", json!(["d:a1", [good.clone()]]).to_string()),
        ("an empty batch", body(json!([]))),
        ("a long string", with(op("d:1", "d-1", 10, json!({"exercise": "x".repeat(4097)})))),
    ];
    for (what, raw) in cases {
        let (status, resp) = t.push_raw("u", raw).await;
        assert_eq!((status, resp["error"]["code"].as_str()), (400, Some("bad_request")), "{what}: {resp}");
    }
    // No token, a forged JWT, an expired JWT, a dev token without dev auth elsewhere: 401.
    let raw = body(json!([good.clone()]));
    let no_token = t.http.post(t.url("/v1/push")).body(raw.clone()).send().await.unwrap();
    assert_eq!(no_token.status().as_u16(), 401);
    assert_eq!(no_token.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    for token in
        [jwt("not-the-secret", "u", 600), jwt("test-secret-of-at-least-32-bytes!", "u", -600), "garbage".into()]
    {
        let r = t.http.post(t.url("/v1/push")).bearer_auth(token).body(raw.clone()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    }
    // 2 MiB: 413, by Content-Length…
    let pad = "x".repeat(2 << 20);
    expect_error(
        &t,
        "u",
        json!({"attemptKey": "d:a1", "batch": [good.clone()], "pad": pad}).to_string(),
        413,
        "payload_too_large",
    )
    .await;
    // …and by bytes actually read (chunked, no Content-Length).
    let (status, text) = chunked_push(&t, "u", 2 << 20).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("payload_too_large"), "{text}");
    assert_eq!(t.counts("u").await, Counts::default(), "nothing written by any of them");
    // Bad cursors and limits.
    for q in [
        "cursor=-1",
        "cursor=abc",
        "cursor=1.5",
        "cursor=",
        "cursor=9007199254740992",
        "limit=0",
        "limit=1001",
        "limit=x",
    ] {
        let (status, resp) = t.pull_raw("u", q).await;
        assert_eq!((status, resp["error"]["code"].as_str()), (400, Some("bad_request")), "{q}: {resp}");
    }
    let r = t.http.get(t.url("/v1/pull")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // A good push still works, then.
    assert_eq!(statuses(&t.push_ok("u", &[good]).await), ["applied"]);
    assert!(t.metric("marksync_http_errors_total{code=\"bad_request\"}").await >= 25.0);
    assert!(t.metric("marksync_http_errors_total{code=\"unauthorized\"}").await >= 5.0);
    assert_eq!(t.metric("marksync_http_errors_total{code=\"payload_too_large\"}").await, 2.0);
    t.stop().await;
}
both!(every_bad_input_is_refused_whole_and_writes_nothing);

/// Sends a chunked push body of `size` bytes over a raw socket; returns the status and the answer.
async fn chunked_push(t: &TestServer, user: &str, size: usize) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(t.server.addr).await.unwrap();
    let head = format!(
        "POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer dev:{user}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < size {
        let frame = [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk.clone(), b"\r\n".to_vec()].concat();
        if s.write_all(&frame).await.is_err() {
            break; // the server answered and closed: read what it said
        }
        sent += chunk.len();
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

/// A real HS256 JWT works; `sub` is the user; users are kept apart.
async fn a_signed_jwt_names_the_user(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let token = jwt("test-secret-of-at-least-32-bytes!", "alice@example.org", 600);
    let r = t
        .http
        .post(t.url("/v1/push"))
        .bearer_auth(&token)
        .body(body(json!([full("d:1", "d-1", 10, 5)])))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(t.counts("alice@example.org").await.rows, 1);
    assert_eq!(t.pull_all("alice@example.org").await.len(), 1, "dev:alice@example.org is the same user id");
    assert!(t.pull_all("bob").await.is_empty());
    t.stop().await;
}
both!(a_signed_jwt_names_the_user);

/// §5: a device names the user its database belongs to (`?user=`); a token
/// of anyone else — dev or JWT — is refused `403 wrong_user` on every route,
/// before anything is read or written.
async fn a_token_of_another_user_than_the_devices_is_refused_and_nothing_is_written(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let bob = jwt("test-secret-of-at-least-32-bytes!", "bob", 600);
    let send = |path: &'static str, token: String, body: String| {
        let r = t.http.post(t.url(path)).bearer_auth(token).header("content-type", "application/json").body(body);
        async move {
            let r = r.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let push = body(json!([full("d:1", "a-pending", 10, 5)]));
    for token in [bob.clone(), "dev:bob".to_owned()] {
        let (status, resp) = send("/v1/push?user=alice", token.clone(), push.clone()).await;
        assert_eq!((status, resp["error"]["code"].as_str()), (403, Some("wrong_user")), "{resp}");
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"bob\"") && message.contains("\"alice\""), "{message}");
        let (status, _) = send("/v1/pull?user=alice", token.clone(), json!({"spaces": {}}).to_string()).await;
        assert_eq!(status, 403);
        let (status, _) = send("/v1/verdicts?user=alice", token.clone(), json!({"opIds": ["d:1"]}).to_string()).await;
        assert_eq!(status, 403);
        let r = t.http.get(t.url("/v1/events?user=alice")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403);
    }
    assert_eq!(t.counts("bob").await.rows, 0, "nothing of alice's queue reached bob");
    assert_eq!(t.verdicts_ok("bob", &["d:1"]).await[0]["status"], "unknown", "no verdict remembered either");
    // The owner's own token goes through; a device that names no user is as before.
    let (status, _) = send("/v1/push?user=alice", "dev:alice".into(), push.clone()).await;
    assert_eq!(status, 200);
    assert!(t.metric("marksync_http_errors_total{code=\"wrong_user\"}").await >= 8.0);
    t.stop().await;
}
both!(a_token_of_another_user_than_the_devices_is_refused_and_nothing_is_written);

/// Without `--dev-auth`, `dev:` tokens are refused; with it, a non-loopback
/// listen address is refused at start.
async fn dev_auth_is_off_by_default_and_loopback_only(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = config(&database);
    c.dev_auth = false;
    let t = TestServer::start(c).await;
    let (status, resp) = t.push("u", &[full("d:1", "d-1", 10, 5)]).await;
    assert_eq!((status, resp["error"]["code"].as_str()), (401, Some("unauthorized")));
    t.stop().await;
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = marksync_server::App::build(&config(&database), "0.0.0.0:8787".parse().unwrap(), rx).await.unwrap_err();
    assert!(err.to_string().contains("--dev-auth"), "{err}");
    drop_database(&database).await;
}
both!(dev_auth_is_off_by_default_and_loopback_only);

/// §4: `GET /v1/events` pokes with the head when it grows (header or `?token=`).
async fn an_event_poke_arrives_after_a_push(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("u", &[full("d:0", "d-0", 10, 5)]).await;
    let mut events = t.http.get(t.url("/v1/events?token=dev:u")).send().await.unwrap();
    assert_eq!(events.status().as_u16(), 200);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut other = t.http.get(t.url("/v1/events")).bearer_auth("dev:other").send().await.unwrap();
    let mut seen = String::new();
    read_until(&mut events, &mut seen, "data: 1\n").await;
    assert!(seen.contains("event: poke\ndata: 1\n"), "the current head on connect: {seen:?}");
    // Another user's push does not poke u; u's push does.
    t.push_ok("other", &[full("d:1", "d-1", 10, 5)]).await;
    t.push_ok("u", &[full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 5)]).await;
    read_until(&mut events, &mut seen, "data: 3\n").await;
    assert!(!seen.contains("data: 2\n"), "one poke per push, with the new head: {seen:?}");
    let mut seen_other = String::new();
    read_until(&mut other, &mut seen_other, "data: 1\n").await;
    // A push that moves nothing (a replay) does not poke.
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    t.push_ok("u", &[full("d:3", "d-3", 10, 5)]).await;
    read_until(&mut events, &mut seen, "data: 4\n").await;
    let bad = t.http.get(t.url("/v1/events?token=forged")).send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 401);
    // Open event streams end on shutdown; they do not hold the server up.
    drop(other);
    tokio::time::timeout(Duration::from_secs(10), t.stop()).await.expect("stops with a stream open");
    let rest =
        tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = events.chunk().await {} }).await;
    assert!(rest.is_ok(), "the stream ended");
}
both!(an_event_poke_arrives_after_a_push);

/// A token is checked once, when its event stream opens: the stream ends
/// when that token expires (a client opens it again with a fresh one), so a
/// user whose access ended is not told for ever which spaces move. A stream
/// opened with a token that lasts longer, or with a dev token, stays.
async fn an_event_stream_ends_when_its_token_expires(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let secret = "test-secret-of-at-least-32-bytes!";
    let mut short = t.http.get(t.url(&format!("/v1/events?token={}", jwt(secret, "u", 2)))).send().await.unwrap();
    assert_eq!(short.status().as_u16(), 200);
    let mut lasting = t.http.get(t.url("/v1/events")).bearer_auth(jwt(secret, "u", 600)).send().await.unwrap();
    let mut dev = t.http.get(t.url("/v1/events")).bearer_auth("dev:u").send().await.unwrap();
    let mut seen = String::new();
    read_until(&mut short, &mut seen, "data: 0\n").await;
    let rest = tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = short.chunk().await {} });
    assert!(rest.await.is_ok(), "the stream ended with its token: {seen:?}");
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    for (name, stream) in [("a token of 10 minutes", &mut lasting), ("a dev token", &mut dev)] {
        let mut seen = String::new();
        read_until(stream, &mut seen, "data: 1\n").await;
        assert!(seen.contains("data: 1\n"), "{name}: still open, still poked: {seen:?}");
    }
    t.stop().await;
}
both!(an_event_stream_ends_when_its_token_expires);

/// Several server processes on one PostgreSQL: a push committed by one pokes
/// the event streams held by another (`LISTEN`/`NOTIFY`, sent on commit only).
/// Two servers of this test process share nothing but the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_on_one_server_pokes_streams_held_by_another_on_the_same_postgres() {
    let Some(a) = TestServer::new(Backend::Postgres).await else { return };
    let b = TestServer::start(config(&a.database)).await;
    let mut events = b.http.get(b.url("/v1/events?token=dev:u")).send().await.unwrap();
    let mut seen = String::new();
    read_until(&mut events, &mut seen, "data: 0\n").await;
    // The LISTEN of b is set up at start; give it a moment, as a real deployment has.
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.push_ok("u", &[full("d:0", "d-0", 10, 5)]).await;
    read_until(&mut events, &mut seen, "data: 1\n").await;
    // A push that fails before commit notifies nobody.
    assert_eq!(a.faults(json!({"failBeforeCommit": 1})).await, 200);
    let (status, _) = a.push("u", &[full("d:1", "d-1", 10, 5)]).await;
    assert_eq!(status, 500);
    a.push_ok("u", &[full("d:2", "d-2", 10, 5)]).await;
    read_until(&mut events, &mut seen, "data: 2\n").await;
    assert!(!seen.contains("data: 3"), "only committed heads: {seen:?}");
    drop(events);
    b.stop().await;
    a.stop().await;
}

/// Fault `loseResponses`: the push commits, the client gets a network error
/// (no HTTP answer at all), and a retry gets `duplicate`.
async fn a_lost_response_is_a_network_error_after_commit(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    assert_eq!(t.faults(json!({"loseResponses": 1})).await, 200);
    let raw = body(json!([full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 500)]));
    let sent = t.http.post(t.url("/v1/push")).bearer_auth("dev:u").body(raw.clone()).send().await;
    let err = sent.expect_err("no response at all: a network error");
    assert!(!err.is_status() && !err.is_timeout(), "{err:?}");
    assert_eq!(t.counts("u").await, Counts { verdicts: 2, rows: 1, head: 1 }, "committed");
    let (status, resp) = t.push_raw("u", raw).await;
    assert_eq!(status, 200);
    assert_eq!(statuses(resp["verdicts"].as_array().unwrap()), ["duplicate", "rejected"]);
    assert_eq!(resp["verdicts"][1]["reason"], "reps must be at most 100");
    t.stop().await;
}
both!(a_lost_response_is_a_network_error_after_commit);

/// Fault `failBeforeCommit`: 500 `internal` (no details), nothing written; the next push works.
async fn fail_before_commit_is_a_500_and_writes_nothing(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    assert_eq!(t.faults(json!({"failBeforeCommit": 2})).await, 200);
    for _ in 0..2 {
        let (status, resp) = t.push("u", &[full("d:1", "d-1", 10, 5)]).await;
        assert_eq!(status, 500);
        assert_eq!(resp, json!({"error": {"code": "internal", "message": "internal error"}}));
        assert_eq!(t.counts("u").await.verdicts, 0);
    }
    assert_eq!(t.counts("u").await, Counts { verdicts: 0, rows: 0, head: 0 });
    assert_eq!(
        statuses(&t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await),
        ["applied"],
        "not a duplicate: nothing was kept"
    );
    t.stop().await;
}
both!(fail_before_commit_is_a_500_and_writes_nothing);

/// Graceful shutdown: a push in flight when the server is told to stop finishes and commits.
async fn an_in_flight_push_finishes_on_shutdown(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    assert_eq!(t.faults(json!({"delayMs": 500})).await, 200);
    let raw = body(json!([full("d:1", "d-1", 10, 5)]));
    let http = t.http.clone();
    let url = t.url("/v1/push");
    let push = tokio::spawn(async move { http.post(url).bearer_auth("dev:u").body(raw).send().await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    t.stop().await;
    let resp = push.await.unwrap().expect("answered before the server stopped");
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["verdicts"][0]["status"], "applied");
    let t = TestServer::start(config(&database)).await;
    assert_eq!(t.counts("u").await, Counts { verdicts: 1, rows: 1, head: 1 });
    t.stop().await;
    drop_database(&database).await;
}
both!(an_in_flight_push_finishes_on_shutdown);

/// A push whose client hangs up before its answer commits whole (its judge
/// runs in a task of its own), and is counted and told to the live streams
/// as any other: another device learns of it at once; the device's resend
/// while it is judged shows as an overlap on /metrics.
async fn a_push_whose_client_hung_up_is_counted_and_told_as_any(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await.owning_database();
    let mut stream = t.http.get(t.url("/v1/events")).bearer_auth("dev:u").send().await.unwrap();
    let mut seen = String::new();
    common::read_until(&mut stream, &mut seen, "event: poke").await;
    assert_eq!(t.faults(json!({"delayMs": 1_000})).await, 200);
    let raw = json!({"attemptKey": "dev1:a1", "batch": [full("dev1:1", "d-1", 10, 5)]}).to_string();
    let hung =
        t.http.post(t.url("/v1/push")).bearer_auth("dev:u").timeout(Duration::from_millis(300)).body(raw.clone());
    assert!(hung.send().await.unwrap_err().is_timeout(), "the client gives up before the answer");
    // The device sends it again at once, while the first is still judged.
    let again = raw.replace("dev1:a1", "dev1:a2");
    let (status, v) = t.push_raw("u", again).await;
    assert_eq!((status, v["verdicts"][0]["status"].as_str()), (200, Some("duplicate")));
    let mut seen = String::new();
    common::read_until(&mut stream, &mut seen, "data: 1\n").await;
    assert_eq!(t.metric("marksync_ops_total{verdict=\"applied\"}").await, 1.0, "the hung-up push is counted");
    assert_eq!(t.metric("marksync_push_concurrent_same_device_max").await, 2.0, "the overlap shows");
    t.stop().await;
}
both!(a_push_whose_client_hung_up_is_counted_and_told_as_any);

/// 429 `rate_limited` with `Retry-After`, per user.
async fn the_rate_limit_answers_429_with_retry_after(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = config(&database);
    c.rate_limit = 0.5;
    c.rate_burst = Some(2.0);
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(t.push("u", &[full("d:1", "d-1", 10, 5)]).await.0, 200);
    assert_eq!(t.pull_raw("u", "cursor=0").await.0, 200);
    let r = t
        .http
        .post(t.url("/v1/push"))
        .bearer_auth("dev:u")
        .body(body(json!([full("d:2", "d-2", 10, 5)])))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "rate_limited");
    assert_eq!(t.counts("u").await.verdicts, 1, "the limited push wrote nothing");
    assert_eq!(t.push("v", &[full("d:1", "d-1", 10, 5)]).await.0, 200, "another user is not limited");
    t.stop().await;
}
both!(the_rate_limit_answers_429_with_retry_after);

/// /healthz, /metrics, unknown routes, and `/__faults` only with `--enable-faults`.
async fn health_metrics_and_routes(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = config(&database);
    c.enable_faults = false;
    let t = TestServer::start(c).await.owning_database();
    let h = t.http.get(t.url("/healthz")).send().await.unwrap();
    assert_eq!(h.status().as_u16(), 200);
    assert_eq!(t.faults(json!({"loseResponses": 1})).await, 404);
    assert_eq!(t.http.get(t.url("/v1/nothing")).send().await.unwrap().status().as_u16(), 404);
    t.push_ok("u", &[full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 500)]).await;
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    let m = t.metrics().await;
    for line in [
        "marksync_pushes_total 2",
        "marksync_ops_total{verdict=\"applied\"} 1",
        "marksync_ops_total{verdict=\"duplicate\"} 1",
        "marksync_ops_total{verdict=\"rejected\"} 1",
        "marksync_push_duration_seconds_count 2",
        "marksync_push_concurrent_same_user_max 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    t.stop().await;
}
both!(health_metrics_and_routes);

/// `--static`: files, and index.html for unknown paths (single-page app); CORS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_spa_fallback_and_cors() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(unique("marksync-static"));
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(dir.join("index.html"), "<!doctype html><title>app</title>").unwrap();
    std::fs::write(dir.join("assets/app.js"), "console.log(1)").unwrap();
    let mut c = config(&database);
    c.static_dir = Some(dir.clone());
    c.cors_origin = vec!["http://localhost:5173".into()];
    let t = TestServer::start(c).await.owning_database();
    let get = |p: &str| t.http.get(t.url(p)).send();
    assert_eq!(get("/assets/app.js").await.unwrap().text().await.unwrap(), "console.log(1)");
    assert!(get("/").await.unwrap().text().await.unwrap().contains("<title>app</title>"));
    assert!(get("/some/deep/link").await.unwrap().text().await.unwrap().contains("<title>app</title>"));
    assert_eq!(get("/v1/unknown").await.unwrap().status().as_u16(), 404, "the API is not the app");
    let pre = t
        .http
        .request(reqwest::Method::OPTIONS, t.url("/v1/push"))
        .header("origin", "http://localhost:5173")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.headers()["access-control-allow-origin"], "http://localhost:5173");
    let other = t
        .http
        .request(reqwest::Method::OPTIONS, t.url("/v1/push"))
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    t.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `--static`: what a browser may cache, and for how long. A file under
/// `assets/` is named by its content (immutable for a year); the app's other
/// files keep their names across releases (revalidated every load); an
/// unknown asset is a 404 that nobody caches, never the app under its name.
/// A precompressed sibling is sent to a client that accepts its encoding;
/// other answers, the API's included, are gzipped on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_cached_by_name_and_sent_compressed() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(unique("marksync-static"));
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    let html = format!("<!doctype html><title>app</title>{}", "<p>a diary</p>".repeat(200));
    std::fs::write(dir.join("index.html"), &html).unwrap();
    std::fs::write(dir.join("service-worker.js"), "self.addEventListener('fetch', () => {});".repeat(20)).unwrap();
    std::fs::write(dir.join("assets/app-3f9a1c2b.js"), "console.log('plain')").unwrap();
    std::fs::write(dir.join("assets/app-3f9a1c2b.js.br"), b"brotli bytes").unwrap();
    std::fs::write(dir.join("assets/app-3f9a1c2b.js.gz"), b"gzip bytes").unwrap();
    let mut c = config(&database);
    c.static_dir = Some(dir.clone());
    let t = TestServer::start(c).await.owning_database();
    let get = |p: &str, enc: &str| t.http.get(t.url(p)).header("accept-encoding", enc).send();
    let header = |r: &reqwest::Response, h: &str| r.headers().get(h).map(|v| v.to_str().unwrap().to_owned());

    let asset = get("/assets/app-3f9a1c2b.js", "br, gzip").await.unwrap();
    assert_eq!(header(&asset, "cache-control").as_deref(), Some("public, max-age=31536000, immutable"));
    assert_eq!(header(&asset, "content-encoding").as_deref(), Some("br"));
    assert_eq!(asset.bytes().await.unwrap().as_ref(), b"brotli bytes", "the precompressed sibling, as written");
    let gz = get("/assets/app-3f9a1c2b.js", "gzip").await.unwrap();
    assert_eq!(header(&gz, "content-encoding").as_deref(), Some("gzip"));
    assert_eq!(gz.bytes().await.unwrap().as_ref(), b"gzip bytes");
    let plain = get("/assets/app-3f9a1c2b.js", "identity").await.unwrap();
    assert_eq!(header(&plain, "content-encoding"), None);
    assert_eq!(plain.text().await.unwrap(), "console.log('plain')");

    for path in ["/", "/index.html", "/some/deep/link", "/service-worker.js"] {
        let r = get(path, "gzip").await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert_eq!(header(&r, "cache-control").as_deref(), Some("no-cache"), "{path} keeps its name across releases");
        assert_eq!(header(&r, "content-encoding").as_deref(), Some("gzip"), "{path} is compressed on the way");
        let bytes = r.bytes().await.unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "{path}: a gzip stream");
        assert!(bytes.len() < html.len() / 4, "{path}: {} bytes", bytes.len());
    }
    let missing = get("/assets/app-00000000.js", "gzip").await.unwrap();
    assert_eq!(missing.status().as_u16(), 404, "an unknown asset is not the app");
    assert_eq!(header(&missing, "cache-control"), None, "and nobody caches its absence");

    // The API: a pull page is gzipped for a client that asks, plain otherwise.
    let batch: Vec<Value> = (0..50).map(|i| full(&format!("d:{i}"), &format!("row-{i}"), 10 + i, 5)).collect();
    t.push_ok("ann", &batch).await;
    let pulled = pull_accepting(&t, "ann", "gzip").await;
    assert_eq!(header(&pulled, "content-encoding").as_deref(), Some("gzip"));
    let zipped = pulled.bytes().await.unwrap().len();
    let (status, page) = t.pull_raw("ann", "cursor=0").await;
    assert_eq!(status, 200);
    let raw = page.to_string().len();
    assert!(zipped * 4 < raw, "a pull page of {raw} bytes went as {zipped}");
    // An event stream is never buffered by a compressor.
    let events =
        t.http.get(t.url("/v1/events")).bearer_auth("dev:ann").header("accept-encoding", "gzip").send().await.unwrap();
    assert_eq!(header(&events, "content-encoding"), None);
    drop(events);
    t.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `user`'s first pull page, asking for the codings `accept`.
async fn pull_accepting(t: &TestServer, user: &str, accept: &str) -> reqwest::Response {
    let r = t.http.get(t.url("/v1/pull?cursor=0")).bearer_auth(format!("dev:{user}")).header("accept-encoding", accept);
    r.send().await.unwrap()
}

/// Request bodies may come encoded (RFC 7694: every API answer says which
/// codings, `Accept-Encoding: gzip, br`). Every limit counts the decoded
/// bytes: a gzip bomb — 100 KB that inflate to 100 MB — is a 413 and judges
/// nothing; a corrupt body is a 400; an unknown coding a 415; the server
/// serves on. Answers come in brotli when the client prefers it.
async fn encoded_request_bodies_are_decoded_within_the_same_limits(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let push = |body: Vec<u8>, coding: &'static str| {
        t.http
            .post(t.url("/v1/push"))
            .bearer_auth("dev:zip")
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            // A refused body may be left unread, and the server then closes
            // the connection: none is reused after one of these.
            .header("connection", "close")
            .body(body)
            .send()
    };
    let batch: Vec<Value> = (0..20).map(|i| full(&format!("z:{i}"), &format!("z-{i}"), 10 + i, 5)).collect();
    let r = push(gzip(body(json!(batch)).as_bytes()), "gzip").await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["accept-encoding"], "gzip, br");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(statuses(answer["verdicts"].as_array().unwrap()), vec!["applied"; 20]);
    // Refusals before the body is read say it too: no token, another
    // user's database, a route that does not exist.
    for (request, status) in [
        (t.http.post(t.url("/v1/push")), 401),
        (t.http.get(t.url("/v1/pull?user=someone-else")).bearer_auth("dev:zip"), 403),
        (t.http.get(t.url("/v1/nothing")).bearer_auth("dev:zip"), 404),
    ] {
        let r = request.send().await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.headers().get("accept-encoding").and_then(|v| v.to_str().ok())),
            (status, Some("gzip, br"))
        );
    }

    let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b' '; 1 << 20];
    for _ in 0..100 {
        std::io::Write::write_all(&mut bomb, &zeros).unwrap();
    }
    let bomb = bomb.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let r = push(bomb, "gzip").await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "payload_too_large");

    let r = push(b"\x1f\x8b\x08\x00 not gzip at all".to_vec(), "gzip").await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // Another coding, stacked codings: a 415 in the API's words, its code
    // one a client acts on (it sends the body plain again).
    for coding in ["zstd", "gzip, gzip", "deflate"] {
        let r = push(body(json!(batch)).into_bytes(), coding).await.unwrap();
        assert_eq!(r.status().as_u16(), 415, "{coding}");
        assert_eq!(r.headers()["accept-encoding"], "gzip, br");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], "unsupported_encoding", "{coding}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("gzip, br"), "{e}");
    }
    let twice = t.http.post(t.url("/v1/push")).bearer_auth("dev:zip").header("connection", "close");
    let twice = twice.header("content-encoding", "gzip").header("content-encoding", "gzip");
    let r = twice.body(gzip(&gzip(body(json!(batch)).as_bytes()))).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 415, "two Content-Encoding headers");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unsupported_encoding");
    assert_eq!(t.counts("zip").await.verdicts, 20, "only the good push was judged");
    // Codings are case-insensitive (RFC 9110 §8.4.1).
    let more: Vec<Value> = (20..25).map(|i| full(&format!("z:{i}"), &format!("z-{i}"), 10 + i, 5)).collect();
    let r = push(gzip(body(json!(more)).as_bytes()), "GZip").await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(t.counts("zip").await.verdicts, 25);

    let pulled = pull_accepting(&t, "zip", "gzip, br").await;
    assert_eq!(pulled.headers()["content-encoding"], "br");
    t.stop().await;
}
both!(encoded_request_bodies_are_decoded_within_the_same_limits);

/// A query parameter given twice is a 400 naming it, as a key twice in a
/// body is — never "the last one wins": not in a pull's cursor, not in the
/// `user` a device's database belongs to, not in an event stream's token.
async fn a_query_parameter_given_twice_is_refused_by_name(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    for (path, name) in [
        ("/v1/pull?cursor=0&cursor=1", "cursor"),
        ("/v1/pull?cursor=0&user=u&user=v", "user"),
        ("/v1/spaces?limit=5&limit=6", "limit"),
        ("/v1/events?token=dev:u&token=dev:v", "token"),
    ] {
        let r = t.http.get(t.url(path)).bearer_auth("dev:u").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["message"], format!("the query parameter \"{name}\" appears twice"), "{path}");
    }
    let (status, page) = t.pull_raw("u", "cursor=0&user=u").await;
    assert_eq!((status, page["changes"].as_array().map(Vec::len)), (200, Some(1)), "one of each is as before");
    t.stop().await;
}
both!(a_query_parameter_given_twice_is_refused_by_name);

/// A number is judged, stored and sent on as the very double the device
/// sent: a parser one ULP off would store a value the device does not hold
/// under the same mark, and let 1000.0000000000001 pass a bound of 1000.
async fn numbers_are_judged_and_kept_as_the_very_doubles_sent(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let raw = r#"{"attemptKey":"d:a1","batch":[
        {"opId":"d:1","table":"sets","rowId":"d-1","at":10,"fields":{"exercise":"squat","weightKg":406.88137402091627,"reps":1}},
        {"opId":"d:2","table":"sets","rowId":"d-2","at":11,"fields":{"exercise":"squat","weightKg":1000.0000000000001,"reps":1}}]}"#;
    let (status, resp) = t.push_raw("u", raw.to_string()).await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["verdicts"][0]["status"], "applied", "{resp}");
    assert_eq!(
        (resp["verdicts"][1]["status"].as_str(), resp["verdicts"][1]["code"].as_str()),
        (Some("rejected"), Some("out_of_range")),
        "{resp}"
    );
    let rows = t.pull_all("u").await;
    let d1 = rows.iter().find(|c| c["rowId"] == "d-1").unwrap();
    assert_eq!(d1["fields"]["weightKg"].as_f64().map(f64::to_bits), Some(406.881_374_020_916_27_f64.to_bits()), "{d1}");
    t.stop().await;
}
both!(numbers_are_judged_and_kept_as_the_very_doubles_sent);

/// A member change names its role, `null` to remove: a body that forgets
/// it is refused and removes no one (read as `null`, it would have).
async fn a_member_change_without_its_role_is_refused_and_removes_no_one(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    assert_eq!(post(&t, "/v1/spaces", "ann", json!({"space": "role-team"})).await.0, 200);
    assert_eq!(
        post(&t, "/v1/spaces/members", "ann", json!({"space": "role-team", "user": "bob", "role": "editor"})).await.0,
        200
    );
    let (status, e) = post(&t, "/v1/spaces/members", "ann", json!({"space": "role-team", "user": "bob"})).await;
    assert_eq!((status, e["error"]["code"].as_str()), (400, Some("bad_request")), "{e}");
    let (_, listed) = get(&t, "/v1/spaces/invitations?space=role-team", "ann").await;
    assert_eq!(listed["invitations"][0]["user"], "bob", "{listed}");
    t.stop().await;
}
both!(a_member_change_without_its_role_is_refused_and_removes_no_one);

/// `--schema FILE` is read at start; a bad file stops the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_file_is_loaded() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(unique("marksync-schema"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("schema.json");
    std::fs::write(&file, r#"{"version": 3, "tables": {"notes": {"fields": {"text": {"type": "string", "required": true, "maxLength": 5}}}}}"#)
        .unwrap();
    let mut c = config(&database);
    c.schema = Some(file.clone());
    let t = TestServer::start(c).await;
    let mut ok =
        json!({"opId": "d:1", "table": "notes", "rowId": "n-1", "at": 1, "fields": {"text": "hi"}, "schema": 3});
    let v = t.push_ok("u", std::slice::from_ref(&ok)).await;
    assert_eq!(statuses(&v), ["applied"]);
    ok["opId"] = json!("d:2");
    ok["fields"]["text"] = json!("too long");
    let v = t.push_ok("u", &[ok, full("d:3", "d-1", 1, 5)]).await;
    assert_eq!(v[0]["reason"], "text must be at most 5 characters");
    assert_eq!(v[1]["code"], "unknown_table");
    t.stop().await;
    std::fs::write(&file, "{not json").unwrap();
    let mut c = config(&database);
    c.schema = Some(file);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = marksync_server::start(c, listener).await.unwrap_err();
    assert!(err.to_string().contains("schema file"), "{err}");
    drop_database(&database).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The keys of every mark of every row in `rows`, sorted and deduplicated.
fn mark_keys<'a>(rows: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    let mut keys: Vec<String> = rows
        .into_iter()
        .flat_map(|r| r["marks"].as_object().unwrap().values())
        .flat_map(|m| m.as_object().unwrap().keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// PROTOCOL §2a: a device that does not name `notes` in `marksync-accept`
/// (one older than the notes, whose strict reader refuses a mark key it does
/// not know) gets marks of `at` and `opId` only — from the pulls, the push
/// answer and the verdicts; a device that names it gets the cells' notes.
async fn only_a_device_that_reads_notes_gets_them(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    // The phone's 6 (seen 0) loses to the tablet's later 7, made without knowledge of it.
    let mut phone = full("phone:1", "r1", 10, 6);
    phone["seen"] = json!(0);
    let mut tablet = full("tablet:1", "r1", 20, 7);
    tablet["seen"] = json!(0);
    assert_eq!(statuses(&t.push_ok("u", &[tablet]).await), ["applied"]);
    assert_eq!(statuses(&t.push_ok("u", &[phone]).await), ["applied"]);
    let refused =
        json!({"attemptKey": "phone:a9", "batch": [op("phone:2", "r1", 30, json!({"reps": 1000}))]}).to_string();
    let ask = |path: &str, accept: Option<&str>, body: Option<String>| {
        let mut r = match body {
            Some(body) => t.http.post(t.url(path)).body(body),
            None => t.http.get(t.url(path)),
        }
        .header("authorization", "Bearer dev:u")
        .header("content-type", "application/json");
        if let Some(a) = accept {
            r = r.header("marksync-accept", a);
        }
        async move { r.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    for (accept, expected) in [
        (None, vec!["at", "opId"]),
        (Some("notes"), vec!["at", "opId", "overwrites", "seq"]),
        (Some("future, Notes"), vec!["at", "opId", "overwrites", "seq"]),
    ] {
        let page = ask("/v1/pull?cursor=0", accept, None).await;
        assert_eq!(mark_keys(page["changes"].as_array().unwrap()), expected, "GET /v1/pull, {accept:?}: {page}");
        let spaces = ask("/v1/pull", accept, Some(json!({"spaces": {}}).to_string())).await;
        let rows = spaces["spaces"].as_array().unwrap().iter().flat_map(|p| p["changes"].as_array().unwrap().iter());
        assert_eq!(mark_keys(rows), expected, "POST /v1/pull, {accept:?}: {spaces}");
        let pushed = ask("/v1/push", accept, Some(refused.clone())).await;
        assert_eq!(pushed["verdicts"][0]["status"], "rejected", "{pushed}");
        assert_eq!(mark_keys([&pushed["verdicts"][0]["row"]]), expected, "POST /v1/push, {accept:?}: {pushed}");
        let recalled = ask("/v1/verdicts", accept, Some(json!({"opIds": ["phone:2"]}).to_string())).await;
        assert_eq!(mark_keys([&recalled["verdicts"][0]["row"]]), expected, "POST /v1/verdicts, {accept:?}: {recalled}");
    }
    t.stop().await;
}
both!(only_a_device_that_reads_notes_gets_them);
