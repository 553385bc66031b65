//! Abuse (issue 10): slow clients, descriptor exhaustion, a shutdown held up,
//! early refusals, event-stream floods, auth corner cases and one user's flood.
//! Every limit here is set small through the configuration, so the suite
//! waits on nothing long; each test asserts what the server did (a status, a
//! closed connection, counts), never how fast it did it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use marksync_server::store::Counts;
use marksync_server::Config;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The longest any test waits for the server to do something; the limits under
/// test are all a fraction of it.
const BOUND: Duration = Duration::from_secs(5);

/// The test configuration with short timeouts.
fn short(database: &str) -> Config {
    let mut c = config(database);
    c.header_timeout_ms = 300;
    c.body_timeout_ms = 600;
    c.shutdown_timeout_ms = 500;
    c
}

async fn start(b: Backend, tune: impl FnOnce(&mut Config)) -> Option<TestServer> {
    let database = fresh_database(b).await?;
    let mut c = short(&database);
    tune(&mut c);
    Some(TestServer::start(c).await.owning_database())
}

/// Sends `bytes` one at a time, one every `every`, while reading what the server
/// says. `Some(answer)` once the server closed the connection, `None` if it was
/// still open after [`BOUND`].
async fn trickle(s: TcpStream, bytes: Vec<u8>, every: Duration) -> Option<String> {
    let (mut r, mut w) = s.into_split();
    let deadline = Instant::now() + BOUND;
    let (mut got, mut buf, mut i) = (Vec::new(), [0u8; 4096], 0);
    loop {
        tokio::select! {
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => return Some(String::from_utf8_lossy(&got).into_owned()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            },
            _ = tokio::time::sleep(every) => {
                if i < bytes.len() {
                    if w.write_all(&bytes[i..=i]).await.is_err() {
                        let _ = tokio::time::timeout(BOUND, r.read_to_end(&mut got)).await;
                        return Some(String::from_utf8_lossy(&got).into_owned());
                    }
                    i += 1;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return None,
        }
    }
}

/// Reads until the server closes the connection: `Some(everything it sent)`, or `None` after `bound`.
async fn until_closed(s: &mut TcpStream, bound: Duration) -> Option<String> {
    let mut got = Vec::new();
    match tokio::time::timeout(bound, s.read_to_end(&mut got)).await {
        Ok(_) => Some(String::from_utf8_lossy(&got).into_owned()),
        Err(_) => None,
    }
}

fn status_of(answer: &str) -> u16 {
    answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn push_body(op_id: &str) -> String {
    json!({"attemptKey": unique("d"), "batch": [full(op_id, "d-1", 10, 5)]}).to_string()
}

/// Slow headers: a request head sent a byte at a time is cut off by the header
/// timeout (before: still open after 100 s).
async fn a_client_that_trickles_its_headers_is_cut_off(b: Backend) {
    let Some(t) = start(b, |_| {}).await else { return };
    let s = TcpStream::connect(t.server.addr).await.unwrap();
    let head = format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: {}\r\n\r\n", "a".repeat(200));
    let answer = trickle(s, head.into_bytes(), Duration::from_millis(50)).await;
    assert!(answer.is_some(), "the connection was still open after {BOUND:?}");
    // A connection that sends nothing at all goes the same way.
    let mut idle = TcpStream::connect(t.server.addr).await.unwrap();
    assert!(until_closed(&mut idle, BOUND).await.is_some(), "an idle connection is closed too");
    assert_eq!(t.http.get(t.url("/healthz")).send().await.unwrap().status().as_u16(), 200);
    t.stop().await;
}
both!(a_client_that_trickles_its_headers_is_cut_off);

/// Slow bodies: bodies trickled under their Content-Length are answered `408`
/// and closed by the body timeout, and write nothing (before: all 20 still open).
async fn bodies_trickled_under_their_content_length_are_answered_408(b: Backend) {
    let Some(t) = start(b, |_| {}).await else { return };
    let body = push_body("d:1");
    let mut slow = Vec::new();
    for i in 0..20 {
        let mut s = TcpStream::connect(t.server.addr).await.unwrap();
        let head = format!(
            "POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer dev:slow{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            i % 4,
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&body.as_bytes()[..5]).await.unwrap();
        slow.push(tokio::spawn(trickle(s, body.as_bytes()[5..].to_vec(), Duration::from_millis(100))));
    }
    for task in slow {
        let answer = task.await.unwrap().expect("a trickled body is cut off");
        assert_eq!(status_of(&answer), 408, "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    }
    for i in 0..4 {
        assert_eq!(t.counts(&format!("slow{i}")).await, Counts::default());
    }
    assert_eq!(t.push("u", &[full("d:1", "d-1", 10, 5)]).await.0, 200, "a prompt client is served");
    t.stop().await;
}
both!(bodies_trickled_under_their_content_length_are_answered_408);

/// The admin routes have the same body deadline: a body trickled under its
/// Content-Length with the admin token is answered `408` and closed, and
/// creates nothing (before: held open as long as the client liked).
async fn an_admin_body_trickled_is_answered_408(b: Backend) {
    const ADMIN: &str = "an-admin-token-of-at-least-32-characters";
    let Some(t) = start(b, |c| c.admin_token = Some(ADMIN.into())).await else { return };
    let body = json!({"space": "slow-team", "owner": "ann"}).to_string();
    let mut s = TcpStream::connect(t.server.addr).await.unwrap();
    let head = format!(
        "POST /v1/admin/spaces HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..5]).await.unwrap();
    let answer = trickle(s, body.as_bytes()[5..].to_vec(), Duration::from_millis(100))
        .await
        .expect("a trickled body is cut off");
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    let listed = t.http.get(t.url("/v1/admin/spaces")).bearer_auth(ADMIN).send().await.unwrap().text().await.unwrap();
    assert!(!listed.contains("slow-team"), "nothing was created: {listed}");
    t.stop().await;
}
both!(an_admin_body_trickled_is_answered_408);

/// One user's event streams are capped: the one beyond the cap is `429` with
/// `Retry-After`; closing one makes room; other users and `/healthz` are
/// served all along (before: every stream was accepted).
async fn one_user_cannot_hold_more_event_streams_than_the_cap(b: Backend) {
    let Some(t) = start(b, |c| c.max_streams_per_user = 3).await else { return };
    let open = |user: &str| t.http.get(t.url("/v1/events")).bearer_auth(format!("dev:{user}")).send();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let r = open("greedy").await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        streams.push(r);
    }
    for _ in 0..3 {
        let r = open("greedy").await.unwrap();
        assert_eq!(r.status().as_u16(), 429, "the stream beyond the cap");
        assert!(r.headers().contains_key("retry-after"));
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "rate_limited");
    }
    assert_eq!(open("other").await.unwrap().status().as_u16(), 200, "another user's stream");
    assert_eq!(t.pull_raw("other", "cursor=0").await.0, 200);
    assert_eq!(t.http.get(t.url("/healthz")).send().await.unwrap().status().as_u16(), 200);
    drop(streams.pop());
    let deadline = Instant::now() + BOUND;
    loop {
        let r = open("greedy").await.unwrap();
        if r.status().as_u16() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "a closed stream gives its place back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.stop().await;
}
both!(one_user_cannot_hold_more_event_streams_than_the_cap);

/// One user's requests in progress are capped (a push holds its user's lock a
/// while here): beyond the cap `429`; another user is served meanwhile
/// (before: all 8 were taken in).
async fn one_user_cannot_have_more_requests_in_progress_than_the_cap(b: Backend) {
    let Some(t) = start(b, |c| {
        c.max_requests_per_user = 2;
        c.rate_limit = 0.0;
    })
    .await
    else {
        return;
    };
    assert_eq!(t.faults(json!({"delayMs": 400})).await, 200);
    let pushes: Vec<_> = (0..8)
        .map(|i| {
            let http = t.http.clone();
            let url = t.url("/v1/push");
            tokio::spawn(async move {
                let r = http.post(url).bearer_auth("dev:greedy").body(push_body(&format!("d:{i}"))).send().await;
                r.expect("an answer, never a network error").status().as_u16()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(t.pull_raw("other", "cursor=0").await.0, 200, "another user is served");
    let mut codes = Vec::new();
    for p in pushes {
        codes.push(p.await.unwrap());
    }
    let ok = codes.iter().filter(|c| **c == 200).count();
    assert!(codes.iter().all(|c| *c == 200 || *c == 429), "{codes:?}");
    assert!((1..8).contains(&ok), "some refused, some served: {codes:?}");
    assert_eq!(t.counts("greedy").await.verdicts as usize, ok, "a refused push wrote nothing");
    t.stop().await;
}
both!(one_user_cannot_have_more_requests_in_progress_than_the_cap);

/// A server that holds at most `max` connections, with a header timeout
/// long enough that the cap, not the timeout, is what closes them.
async fn start_capped(b: Backend, max: usize) -> Option<TestServer> {
    start(b, |c| {
        c.max_connections = max;
        c.header_timeout_ms = 60_000;
    })
    .await
}

/// No token needed: 100 connections with unfinished headers against a cap of
/// 24. The oldest idle ones are closed to make room; `/healthz` and a user's
/// pull are served (before: all 100 stayed open).
async fn unfinished_connections_make_room_for_real_requests(b: Backend) {
    let Some(t) = start_capped(b, 24).await else { return };
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(t.server.addr).await.unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await;
        held.push(s);
    }
    assert_eq!(t.http.get(t.url("/healthz")).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(t.pull_raw("u", "cursor=0").await.0, 200);
    let closed = futures_util::future::join_all(
        held.iter_mut().map(|s| async move { until_closed(s, Duration::from_millis(500)).await.is_some() }),
    )
    .await
    .into_iter()
    .filter(|c| *c)
    .count();
    assert!(closed >= 100 - 24, "only {closed} of 100 unfinished connections were closed");
    assert!(t.metric("marksync_connections_evicted_total").await >= 76.0);
    t.stop().await;
}
both!(unfinished_connections_make_room_for_real_requests);

/// Sends `request` on `s` and reads its whole answer (headers and a
/// `content-length` body); the answer's head, lowercased, and its status.
async fn ask(s: &mut TcpStream, request: &str) -> (String, u16) {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(BOUND, s.read(&mut buf)).await.expect("an answer in time").unwrap();
        assert!(n > 0, "the connection closed before its answer");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = status_of(&head);
                return (head, status);
            }
        }
    }
}

/// The other connection of [`at_the_cap_the_bystander_outlives`]: what it
/// has done when a third one arrives.
enum Other {
    /// Its last answer refused it, after the bystander's last answer.
    Refused,
    /// Accepted after the bystander's last answer, its head not sent yet.
    NeverServed,
}

/// At a cap of two, a bystander served once and then idle, and `other`; a
/// third connection takes a place: `other` is closed, the bystander's
/// connection still serves.
async fn at_the_cap_the_bystander_outlives(b: Backend, other: Other) {
    let Some(t) = start_capped(b, 2).await else { return };
    let healthz = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut bystander = TcpStream::connect(t.server.addr).await.unwrap();
    assert_eq!(ask(&mut bystander, healthz).await.1, 200);
    // A connection counts as idle once its answer's body has ended, a moment
    // after its last byte is sent: not a timing under test, only an order
    // (the other connection comes after the bystander's last answer).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut other_conn = TcpStream::connect(t.server.addr).await.unwrap();
    match other {
        Other::Refused => {
            let pull = "GET /v1/pull?cursor=0 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer forged\r\n\r\n";
            let (head, status) = ask(&mut other_conn, pull).await;
            assert_eq!(status, 401);
            assert!(!head.contains("connection: close"), "the refused connection stays open: {head}");
        }
        Other::NeverServed => {
            let _ = other_conn.write_all(b"GET /healthz HTTP/1.1\r\n").await;
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(t.server.addr).await.unwrap();
    assert_eq!(ask(&mut third, healthz).await.1, 200);
    assert!(until_closed(&mut other_conn, BOUND).await.is_some(), "the other connection was closed");
    assert_eq!(ask(&mut bystander, healthz).await.1, 200, "the bystander's, idle longer, still serves");
    t.stop().await;
}

/// At the cap, a connection whose last answer refused it is closed before
/// one idle for longer: a bystander's keep-alive connection outlives a
/// refused crowd's (before: the connection idle the longest went — the
/// bystander's, whose next request met a closed connection).
async fn at_the_cap_a_refused_connection_goes_before_one_idle_longer(b: Backend) {
    at_the_cap_the_bystander_outlives(b, Other::Refused).await;
}
both!(at_the_cap_a_refused_connection_goes_before_one_idle_longer);

/// At the cap, a connection that never finished a request is closed before a
/// served one idle since its last answer: a bystander's keep-alive connection
/// outlives a crowd's reconnects accepted after its last answer (before: the
/// one idle the longest went, the bystander's, whose next request met a
/// closed connection, while the crowd's newest waited for its head).
async fn at_the_cap_a_connection_never_served_goes_before_a_served_one(b: Backend) {
    at_the_cap_the_bystander_outlives(b, Other::NeverServed).await;
}
both!(at_the_cap_a_connection_never_served_goes_before_a_served_one);

/// Shutdown with a half-sent body ends within its deadline, and the database
/// is whole afterwards: the same data, and a new server pushes on it (before:
/// stop waited on the body).
async fn shutdown_ends_within_its_deadline_while_a_body_is_half_sent(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = short(&database);
    c.body_timeout_ms = 60_000; // the shutdown deadline, not the body timeout, is under test
    let t = TestServer::start(c).await;
    t.push_ok("u", &[full("d:0", "d-0", 10, 5)]).await;
    let mut s = TcpStream::connect(t.server.addr).await.unwrap();
    s.write_all(
        b"POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer dev:u\r\ncontent-length: 1000\r\n\r\n{\"att",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(BOUND, t.stop()).await.expect("stopped despite the half-sent body");
    assert!(until_closed(&mut s, BOUND).await.is_some(), "the lingering connection was cut");
    let t = TestServer::start(short(&database)).await.owning_database();
    assert_eq!(t.counts("u").await, Counts { verdicts: 1, rows: 1, head: 1 });
    t.push_ok("u", &[full("d:1", "d-1", 10, 5)]).await;
    t.stop().await;
}
both!(shutdown_ends_within_its_deadline_while_a_body_is_half_sent);

/// Early refusals (401, 429) come before the body is read. On one keep-alive
/// connection a refused push with its body, then a request: either both are
/// answered, or the refusal says `connection: close` and the connection ends
/// cleanly — never an answer and then a dropped connection. A body too large
/// to drain is answered with `connection: close`. The admin routes' 401
/// too (it answered before the body and dropped the connection without
/// `connection: close`: the client read a reset).
async fn an_early_refusal_never_drops_the_next_request(b: Backend) {
    let Some(t) = start(b, |c| {
        c.rate_limit = 0.5;
        c.rate_burst = Some(1.0);
        c.admin_token = Some("the-admin-token-of-at-least-32-characters".into());
    })
    .await
    else {
        return;
    };
    let body = format!("{{\"attemptKey\":\"d:a\",\"batch\":[],\"pad\":\"{}\"}}", "x".repeat(200 << 10));
    // The middle one is read whole (and is a 400: `pad` is no field of a push); it uses up the burst.
    for (path, token, want) in [
        ("/v1/push", "forged", 401),
        ("/v1/push", "dev:u", 400),
        ("/v1/push", "dev:u", 429),
        ("/v1/admin/pull", "not-the-admin-token", 401),
    ] {
        let mut s = TcpStream::connect(t.server.addr).await.unwrap();
        let refused = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let next = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
        let (mut r, mut w) = s.split();
        let (_, answer) = tokio::join!(
            async {
                let _ = w.write_all(refused.as_bytes()).await;
                let _ = w.write_all(next.as_bytes()).await;
            },
            async {
                let mut got = Vec::new();
                let _ = tokio::time::timeout(BOUND, r.read_to_end(&mut got)).await;
                String::from_utf8_lossy(&got).into_owned()
            }
        );
        // The 400 leaves the connection open after both answers: the timeout ends the read.
        assert_eq!(status_of(&answer), want, "{token}: {answer:.300}");
        let closes = answer.split("\r\n\r\n").next().unwrap().to_ascii_lowercase().contains("connection: close");
        let both = answer.matches("HTTP/1.1 ").count() == 2;
        assert!(
            both || closes,
            "{token}: one answer, no `connection: close`, then the connection dropped: {answer:.300}"
        );
    }
    // A declared body beyond --max-body-bytes is not drained: the refusal closes.
    let mut s = TcpStream::connect(t.server.addr).await.unwrap();
    s.write_all(
        b"POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer forged\r\ncontent-length: 99999999\r\n\r\n{",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut s, BOUND).await.expect("closed after the refusal");
    assert_eq!(status_of(&answer), 401, "{answer:.300}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer:.300}");
    t.stop().await;
}
both!(an_early_refusal_never_drops_the_next_request);

/// `/v1/events` connects take from the user's rate limit like pushes and pulls
/// (before: never limited).
async fn event_connects_are_rate_limited(b: Backend) {
    let Some(t) = start(b, |c| {
        c.rate_limit = 0.5;
        c.rate_burst = Some(2.0);
    })
    .await
    else {
        return;
    };
    let mut codes = Vec::new();
    for _ in 0..4 {
        let r = t.http.get(t.url("/v1/events?token=dev:u")).send().await.unwrap();
        codes.push(r.status().as_u16());
    }
    assert_eq!(codes, [200, 200, 429, 429]);
    t.stop().await;
}
both!(event_connects_are_rate_limited);

/// An HS256 token with the given claims, signed with the test secret.
fn signed(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(b"test-secret-of-at-least-32-bytes!").unwrap(),
    )
    .unwrap()
}

/// Auth: `nbf` in the future is refused; `aud` and `iss` are checked when
/// configured and ignored when not; the scheme is case-insensitive; a dev user
/// is trimmed and may not be empty (before: an `aud` token was always 401,
/// `nbf` unchecked, `BEARER` refused, `dev: alice` was " alice").
async fn tokens_are_checked_as_identity_providers_issue_them(b: Backend) {
    let now = jsonwebtoken::get_current_timestamp();
    let pull = |t: &TestServer, auth: String| {
        let req = t.http.get(t.url("/v1/pull")).header("authorization", auth);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let Some(t) = start(b, |_| {}).await else { return };
    let later = signed(json!({"sub": "a", "exp": now + 600, "nbf": now + 300}));
    assert_eq!(pull(&t, format!("Bearer {later}")).await, 401, "nbf in the future");
    let idp = signed(json!({"sub": "a", "exp": now + 600, "aud": "marksync", "iss": "https://id.example"}));
    assert_eq!(pull(&t, format!("Bearer {idp}")).await, 200, "aud and iss unchecked when not configured");
    assert_eq!(pull(&t, format!("BEARER {idp}")).await, 200, "the scheme is case-insensitive");
    assert_eq!(pull(&t, "bEaReR dev:a".into()).await, 200);
    assert_eq!(pull(&t, "Bearer dev:".into()).await, 401);
    assert_eq!(pull(&t, "Bearer dev:   ".into()).await, 401, "an empty dev user");
    t.push_ok(" alice ", &[full("d:1", "d-1", 10, 5)]).await;
    assert_eq!(t.counts("alice").await.rows, 1, "`dev: alice ` is alice");
    t.stop().await;

    let Some(t) = start(b, |c| {
        c.jwt_audience = vec!["marksync".into(), "other".into()];
        c.jwt_issuer = Some("https://id.example".into());
    })
    .await
    else {
        return;
    };
    assert_eq!(pull(&t, format!("Bearer {idp}")).await, 200, "the configured audience and issuer");
    for (what, claims) in [
        ("another audience", json!({"sub": "a", "exp": now + 600, "aud": "else", "iss": "https://id.example"})),
        ("no audience", json!({"sub": "a", "exp": now + 600, "iss": "https://id.example"})),
        ("another issuer", json!({"sub": "a", "exp": now + 600, "aud": "marksync", "iss": "https://evil.example"})),
        ("no issuer", json!({"sub": "a", "exp": now + 600, "aud": "marksync"})),
    ] {
        assert_eq!(pull(&t, format!("Bearer {}", signed(claims))).await, 401, "{what}");
    }
    t.stop().await;
}
both!(tokens_are_checked_as_identity_providers_issue_them);

/// One user floods pushes and pulls, 24 at a time: every answer is a 200 or a
/// 429 (never a network error), the refused pushes wrote nothing, and another
/// user's requests all succeed with the right counts (before: no 429 at all,
/// the flood was taken in whole).
async fn a_flood_of_one_user_leaves_another_user_served(b: Backend) {
    let Some(t) = start(b, |c| {
        c.max_requests_per_user = 4;
        c.rate_limit = 0.0;
        c.db_max_connections = 4;
    })
    .await
    else {
        return;
    };
    let flood: Vec<_> = (0..96)
        .map(|i| {
            let http = t.http.clone();
            let base = t.server.url();
            tokio::spawn(async move {
                let r = if i % 2 == 0 {
                    let body = json!({"attemptKey": format!("f:{i}"), "batch": (0..50).map(|j| full(&format!("f:{i}-{j}"), &format!("r-{j}"), i, 5)).collect::<Vec<_>>()});
                    http.post(format!("{base}/v1/push")).bearer_auth("dev:flood").body(body.to_string()).send().await
                } else {
                    http.get(format!("{base}/v1/pull?cursor=0")).bearer_auth("dev:flood").send().await
                };
                (i % 2 == 0, r.expect("an answer, never a network error").status().as_u16())
            })
        })
        .collect();
    for i in 0..10 {
        t.push_ok("victim", &[full(&format!("v:{i}"), &format!("v-{i}"), 10, 5)]).await;
        assert_eq!(t.pull_raw("victim", "cursor=0").await.0, 200);
    }
    let mut answered_pushes = 0;
    let mut refused = 0;
    for f in flood {
        let (is_push, code) = f.await.unwrap();
        assert!(code == 200 || code == 429, "{code}");
        refused += usize::from(code == 429);
        answered_pushes += usize::from(is_push && code == 200);
    }
    assert!(refused > 0, "the flood was refused in part");
    assert_eq!(t.counts("flood").await.verdicts as usize, answered_pushes * 50, "only the answered pushes wrote");
    assert_eq!(t.counts("victim").await, Counts { verdicts: 10, rows: 10, head: 10 });
    assert_eq!(t.pull_all("victim").await.len(), 10);
    t.stop().await;
}
both!(a_flood_of_one_user_leaves_another_user_served);
