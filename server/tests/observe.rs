//! What an operator sees: request ids, the metrics of every route and every
//! error code, live gauges (event streams, database pools), a token on
//! `/metrics`, and logs a collector can read (JSON, no colours off a
//! terminal, one access line per request, request fields on every line).

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use common::process::plain;
use common::{config, fresh_database, full, post, read_until, unique, Backend, TestServer};
use marksync_server::Config;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The value of the line `series` (name and labels, exactly) in `text`, if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// As [`value`], failing with the exposition when the line is missing.
fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// Every answer carries `X-Request-Id`: the client's when it sent a sane one,
/// else a new one, different for each request — errors and 404s included.
async fn every_answer_carries_a_request_id(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let id_of = |r: &reqwest::Response| {
        r.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned).unwrap_or_default()
    };
    let r = t.http.get(t.url("/healthz")).header("x-request-id", "obs-given-1").send().await.unwrap();
    assert_eq!(id_of(&r), "obs-given-1", "a sane id comes back as it is");
    let mut seen = Vec::new();
    for (method, path, status) in [
        ("GET", "/healthz", 200),
        ("GET", "/healthz", 200),
        ("GET", "/v1/pull?cursor=0", 401),
        ("GET", "/v1/no-such-route", 404),
        ("GET", "/wp-login.php", 404),
        ("DELETE", "/healthz", 405),
    ] {
        let r = t.http.request(method.parse().unwrap(), t.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        let id = id_of(&r);
        assert!(!id.is_empty() && id.len() <= 128, "{method} {path}: a made id, got {id:?}");
        assert!(!seen.contains(&id), "{id} twice");
        seen.push(id);
    }
    let long = "x".repeat(129);
    let r = t.http.get(t.url("/healthz")).header("x-request-id", &long).send().await.unwrap();
    let id = id_of(&r);
    assert!(!id.is_empty() && id != long, "a too long id is replaced");
    let r = t.http.get(t.url("/healthz")).header("x-request-id", "two words").send().await.unwrap();
    assert_ne!(id_of(&r), "two words", "an id with a space is replaced");
    t.stop().await;
}
both!(every_answer_carries_a_request_id);

/// A `409`, a `403`, a `404` and a `408` are each counted under their own
/// code; every code that can answer a request is listed, at 0 until it happens.
async fn every_error_is_counted_under_its_code(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let mut c = config(&database);
    c.body_timeout_ms = 300;
    let t = TestServer::start(c).await.owning_database();
    let before = t.metrics().await;
    for code in [
        "bad_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "conflict",
        "rate_limited",
        "request_timeout",
        "internal",
    ] {
        assert_eq!(must(&before, &format!("marksync_http_errors_total{{code=\"{code}\"}}")), 0.0, "{code}");
    }
    for code in marksync::protocol::Code::ALL.iter().filter(|c| c.http_status() == 500) {
        if *code != marksync::protocol::Code::Internal {
            assert!(!before.contains(&format!("{{code=\"{code}\"}}")), "{code} never answers a request");
        }
    }

    assert_eq!(post(&t, "/v1/spaces", "obs-owner", json!({"space": "obs-gym"})).await.0, 200);
    assert_eq!(post(&t, "/v1/spaces", "obs-other", json!({"space": "obs-gym"})).await.0, 409);
    assert_eq!(common::get(&t, "/v1/spaces/members?space=obs-gym", "obs-out").await.0, 403);
    assert_eq!(common::get(&t, "/v1/no-such-route", "obs-owner").await.0, 404);
    // A body announced and never sent: 408 once the body timeout passes.
    let mut s = tokio::net::TcpStream::connect(t.server.addr).await.unwrap();
    let head = "POST /v1/push HTTP/1.1\r\nhost: x\r\nauthorization: Bearer dev:obs-slow\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    s.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));

    let after = t.metrics().await;
    for code in ["conflict", "forbidden", "not_found", "request_timeout"] {
        assert_eq!(must(&after, &format!("marksync_http_errors_total{{code=\"{code}\"}}")), 1.0, "{code}");
    }
    t.stop().await;
}
both!(every_error_is_counted_under_its_code);

/// Every route is counted by method and status and timed, by its template:
/// push, both pulls, verdicts, events (to the stream's opening), healthz, and
/// `other` for paths that are no route, however many.
async fn every_route_is_counted_and_timed(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("obs-ann", &[full("o:1", "r-1", 10, 5)]).await;
    assert_eq!(t.pull_raw("obs-ann", "cursor=0").await.0, 200);
    common::pull(&t, "obs-ann", json!({})).await;
    t.verdicts_ok("obs-ann", &["o:1"]).await;
    let mut events = t.http.get(t.url("/v1/events")).bearer_auth("dev:obs-ann").send().await.unwrap();
    assert_eq!(events.status().as_u16(), 200);
    let mut seen = String::new();
    read_until(&mut events, &mut seen, "poke").await;
    assert_eq!(t.http.get(t.url("/healthz")).send().await.unwrap().status().as_u16(), 200);
    for i in 0..20 {
        t.http.get(t.url(&format!("/scan/{i}/{}", unique("p")))).send().await.unwrap();
    }
    let text = t.metrics().await;
    for (route, method) in [
        ("/v1/push", "POST"),
        ("/v1/pull", "GET"),
        ("/v1/pull", "POST"),
        ("/v1/verdicts", "POST"),
        ("/v1/events", "GET"),
        ("/healthz", "GET"),
    ] {
        let series = format!("marksync_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"200\"}}");
        assert!(must(&text, &series) >= 1.0, "{series}");
        let count = format!("marksync_http_request_duration_seconds_count{{route=\"{route}\"}}");
        assert!(must(&text, &count) >= 1.0, "{count}");
        let inf = format!("marksync_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}}");
        assert!(must(&text, &inf) >= 1.0, "{inf}");
        assert!(text.contains(&format!("marksync_http_request_duration_seconds_sum{{route=\"{route}\"}} ")));
    }
    assert_eq!(
        must(&text, "marksync_http_requests_total{route=\"other\",method=\"GET\",status=\"404\"}"),
        20.0,
        "unknown paths share one label"
    );
    assert!(!text.contains("/scan/"), "no path a client made up becomes a label");
    // Judged ops stay counted by verdict.
    assert_eq!(must(&text, "marksync_ops_total{verdict=\"applied\"}"), 1.0);
    for v in ["duplicate", "rejected"] {
        assert!(value(&text, &format!("marksync_ops_total{{verdict=\"{v}\"}}")).is_some(), "{v}");
    }
    drop(events);
    t.stop().await;
}
both!(every_route_is_counted_and_timed);

/// The gauge of open event streams follows a stream opened, then closed.
async fn the_streams_gauge_follows_the_streams(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    assert_eq!(t.metric("marksync_event_streams_open").await, 0.0);
    let mut events = t.http.get(t.url("/v1/events")).bearer_auth("dev:obs-ann").send().await.unwrap();
    let mut seen = String::new();
    read_until(&mut events, &mut seen, "poke").await;
    assert_eq!(t.metric("marksync_event_streams_open").await, 1.0);
    drop(events);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while t.metric("marksync_event_streams_open").await != 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the closed stream is still counted after 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t.stop().await;
}
both!(the_streams_gauge_follows_the_streams);

/// The database pools' gauges (in use, idle, max, for the writer and the
/// reader) and the build's version are exposed.
async fn pool_gauges_and_build_info_are_exposed(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    t.push_ok("obs-ann", &[full("o:1", "r-1", 10, 5)]).await;
    let text = t.metrics().await;
    for pool in ["writer", "reader"] {
        let in_use = must(&text, &format!("marksync_db_pool_connections{{pool=\"{pool}\",state=\"in_use\"}}"));
        let idle = must(&text, &format!("marksync_db_pool_connections{{pool=\"{pool}\",state=\"idle\"}}"));
        let max = must(&text, &format!("marksync_db_pool_max_connections{{pool=\"{pool}\"}}"));
        assert!(in_use + idle >= 1.0 && in_use + idle <= max, "{pool}: {in_use} + {idle} of {max}");
    }
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(must(&text, &format!("marksync_build_info{{version=\"{version}\"}}")), 1.0);
    t.stop().await;
}
both!(pool_gauges_and_build_info_are_exposed);

/// With `--metrics-token`, `/metrics` refuses no token and a wrong one (401)
/// and answers the right one; `/healthz` stays open.
async fn the_metrics_token_guards_metrics(b: Backend) {
    // Flags as an operator gives them (and as they parse), on a fresh database.
    let start = |token: &'static str| async move {
        let database = fresh_database(b).await?;
        let args = ["marksync-server", "--database", &database, "--listen", "127.0.0.1:0", "--metrics-token", token];
        let mut c = Config::try_parse_from(args).expect("--metrics-token is a flag");
        c.db_max_connections = 4;
        Some(TestServer::start(c).await.owning_database())
    };
    let status = |r: reqwest::RequestBuilder| async move { r.send().await.unwrap().status().as_u16() };
    let Some(t) = start("obs-scrape-token").await else { return };
    let metrics = || t.http.get(t.url("/metrics"));
    assert_eq!(status(metrics()).await, 401, "no token");
    assert_eq!(status(metrics().bearer_auth("obs-scrape-tokem")).await, 401, "a wrong token");
    assert_eq!(status(metrics().bearer_auth("obs-scrape-token-and-more")).await, 401, "a longer token");
    assert_eq!(status(metrics().header("authorization", "obs-scrape-token")).await, 401, "no scheme");
    let r = metrics().bearer_auth("obs-scrape-token").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("marksync_pushes_total"));
    assert_eq!(status(t.http.get(t.url("/healthz"))).await, 200);
    t.stop().await;

    // An empty token is no token: `/metrics` is open.
    let Some(t) = start("").await else { return };
    assert_eq!(status(t.http.get(t.url("/metrics"))).await, 200);
    t.stop().await;
}
both!(the_metrics_token_guards_metrics);

/// The server binary, its stdout and stderr gathered line by line.
struct Process {
    child: tokio::process::Child,
    url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// Starts the binary on a fresh SQLite file with `args`, and waits for its
    /// `listening` line (`addr` read with `addr_of`).
    async fn start(args: &[&str], addr_of: fn(&str) -> Option<String>) -> Process {
        let database = fresh_database(Backend::Sqlite).await.unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_marksync-server"))
            .args(["--listen", "127.0.0.1:0", "--database", &database, "--dev-auth", "--enable-faults"])
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .env_remove("MARKSYNC_LOG_FORMAT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the server binary starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let gathered = Arc::clone(&lines);
            tokio::spawn(async move {
                let mut out = BufReader::new(out).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    gathered.lock().unwrap().push(line);
                }
            });
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let addr = loop {
            if let Some(addr) = lines.lock().unwrap().iter().find_map(|l| addr_of(l)) {
                break addr;
            }
            assert!(tokio::time::Instant::now() < deadline, "no listening line in 30 s: {:?}", lines.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Process { child, url: format!("http://{addr}"), lines }
    }

    /// Waits (10 s at most) for a line that `pick` accepts.
    async fn line<T>(&self, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(found) = self.lines.lock().unwrap().iter().find_map(|l| pick(l)) {
                return found;
            }
            assert!(tokio::time::Instant::now() < deadline, "no such line in 10 s: {:#?}", self.lines.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn all(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// `--log-format json`: every line is one JSON object with no colour; a
/// request makes one access line (method, path without its query, status,
/// duration, request id, user); the `internal error` line of a 500 names the
/// request (method, path, request id, user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_parse_and_name_the_request() {
    let json_addr = |l: &str| {
        let v: Value = serde_json::from_str(l).ok()?;
        (v["message"] == "listening").then(|| v["addr"].as_str().map(str::to_owned)).flatten()
    };
    let p = Process::start(&["--log-format", "json"], json_addr).await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/v1/pull?cursor=0&token=obs-query-secret", p.url))
        .bearer_auth("dev:obs-logged")
        .header("x-request-id", "obs-req-pull")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let access = p
        .line(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["request_id"] == "obs-req-pull" && v["target"] == "marksync_server::access").then_some(v)
        })
        .await;
    assert_eq!(access["level"], "INFO");
    assert_eq!(access["method"], "GET");
    assert_eq!(access["path"], "/v1/pull", "the path only, never the query");
    assert_eq!(access["status"], 200);
    assert!(access["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{access}");
    assert_eq!(access["user"], "obs-logged");

    // A 500: its ERROR line carries the request's fields.
    let faults = http.post(format!("{}/__faults", p.url)).json(&json!({"failBeforeCommit": 1})).send().await.unwrap();
    assert_eq!(faults.status().as_u16(), 200);
    let r = http
        .post(format!("{}/v1/push", p.url))
        .bearer_auth("dev:obs-logged")
        .header("x-request-id", "obs-req-500")
        .json(&json!({"attemptKey": unique("d:a"), "batch": [full("o:1", "r-1", 10, 5)]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 500);
    let error = p
        .line(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["level"] == "ERROR" && v["span"]["request_id"] == "obs-req-500").then_some(v)
        })
        .await;
    assert_eq!(error["span"]["method"], "POST", "{error}");
    assert_eq!(error["span"]["path"], "/v1/push", "{error}");
    assert_eq!(error["span"]["user"], "obs-logged", "{error}");
    p.line(|l| l.contains("obs-req-500").then_some(()).filter(|_| l.contains("\"status\":500"))).await;

    let lines = p.all();
    for l in &lines {
        assert!(serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()), "not a JSON object: {l}");
        assert!(!l.contains('\u{1b}'), "a colour: {l}");
        assert!(!l.contains("obs-query-secret") && !l.contains("dev:obs-logged"), "a token: {l}");
    }
    p.stop().await;
}

/// The text format written to a pipe (no terminal) has no colours, and its
/// access line names the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_off_a_terminal_have_no_colours() {
    let text_addr = |l: &str| {
        // Without colours first, to fail on them below rather than here.
        let l = plain(l);
        l.contains("listening")
            .then(|| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")).map(str::to_owned))?
    };
    let p = Process::start(&[], text_addr).await;
    for l in p.all() {
        assert!(!l.contains('\u{1b}'), "a colour off a terminal: {l:?}");
    }
    let r = reqwest::Client::new()
        .get(format!("{}/v1/pull?cursor=0", p.url))
        .bearer_auth("dev:obs-texted")
        .header("x-request-id", "obs-req-text")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let access = p.line(|l| (l.contains("obs-req-text") && l.contains("status")).then(|| l.to_owned())).await;
    for field in ["method=GET", "path=/v1/pull", "status=200", "duration_ms=", "user=\"obs-texted\"", "INFO"] {
        assert!(access.contains(field) || access.contains(&field.replace('"', "")), "{field} in {access}");
    }
    for l in p.all() {
        assert!(!l.contains('\u{1b}'), "a colour off a terminal: {l:?}");
    }
    p.stop().await;
}
