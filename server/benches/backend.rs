//! What the app's own backend costs the pushes — a no-op `Rules`, a webhook
//! — and how soon a change reaches the backend: marksync embedded in an
//! axum app (`embed::Builder`), a receiver on loopback, SQLite and (with
//! `MARKSYNC_TEST_POSTGRES_URL`) PostgreSQL.
//!
//! ```text
//! cargo bench -p marksync-server --bench backend
//! ```
//!
//! Throughput: `BACKEND_USERS` (4) users push `BACKEND_PUSHES` (20) batches
//! of 1000 ops each, back to back, plain, with a no-op `Rules` and with a
//! webhook, the three alternated (each round starting with the next) over
//! `BACKEND_ROUNDS` (9) rounds in one run (a fresh database each), the
//! median per mode; "drained" is the time until
//! the receiver had every change. Lag: `BACKEND_LAG_PUSHES` (200) pushes of
//! one op, one every 20 ms; the lag of each is from its push's answer to its
//! delivery's arrival at the receiver (p50, p99).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{drop_database, env, fresh_database};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use marksync_server::Config;
use serde_json::{json, Value};

const OPS_PER_PUSH: usize = 1000;

/// A receiver that answers 204 at once and notes when each op arrived.
#[derive(Clone, Default)]
struct Receiver {
    arrived: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let r = Receiver::default();
        let seen = r.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: Bytes| {
                let seen = seen.clone();
                async move {
                    let now = Instant::now();
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let mut arrived = seen.arrived.lock().unwrap();
                    for c in v["changes"].as_array().unwrap() {
                        arrived.entry(c["opId"].as_str().unwrap().to_owned()).or_insert(now);
                    }
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (r, url)
    }

    fn count(&self) -> usize {
        self.arrived.lock().unwrap().len()
    }
}

const SECRET: &str = "a-benchmark-jwt-secret-of-32-characters!";

fn token(user: &str) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": user, "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// The pushes' extra work.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Plain,
    Rules,
    Webhook,
}

/// Rules that allow everything: what calling the app's rules costs.
struct Allow;

impl marksync_server::rules::Rules for Allow {
    fn check(
        &self,
        _: &marksync_server::rules::RuleInput<'_>,
        _: &marksync_server::rules::Loaded,
    ) -> Result<(), marksync_server::rules::RuleRefusal> {
        Ok(())
    }
}

/// marksync embedded at `/sync` of an app on loopback: its base URL and the server task.
async fn serve(config: Config, mode: Mode) -> (String, marksync_server::embed::Embedded, tokio::task::JoinHandle<()>) {
    let mut builder = marksync_server::embed::Builder::new(config);
    if mode == Mode::Rules {
        builder = builder.rules(Allow);
    }
    let sync = builder.build().await.unwrap();
    let app = axum::Router::new().nest("/sync", sync.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/sync", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, sync, task)
}

fn config(database: &str, hook: Option<&str>, users: usize) -> Config {
    let mut c = Config::with_database(database);
    c.jwt_secret = Some(SECRET.into());
    c.rate_limit = 0.0;
    (c.ops_rate, c.read_rate) = (0.0, 0.0);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.db_max_connections = (users as u32 + 4).min(32);
    c.webhook_url = hook.map(str::to_owned);
    c.webhook_secret = hook.map(|_| "a-benchmark-webhook-secret-of-32-characters".to_owned());
    c
}

fn batch(user: usize, push: usize) -> String {
    let ops: Vec<Value> = (0..OPS_PER_PUSH)
        .map(|i| {
            json!({"opId": format!("u{user}:{push}:{i}"), "table": "sets", "rowId": format!("r{push}-{i}"),
                   "at": 1_000 + (push * OPS_PER_PUSH + i) as u64,
                   "fields": {"exercise": "squat", "weightKg": 80, "reps": 5}})
        })
        .collect();
    json!({"attemptKey": format!("u{user}:{push}"), "batch": ops}).to_string()
}

/// Ops per second of the pushes, and (with a webhook) seconds until every change arrived.
async fn throughput(backend: &str, mode: Mode, users: usize, pushes: usize) -> (f64, Option<f64>) {
    let hooked = mode == Mode::Webhook;
    let database = fresh_database(backend).await.unwrap();
    let (receiver, url) = Receiver::start().await;
    let (base, sync, task) = serve(config(&database, hooked.then_some(url.as_str()), users), mode).await;
    let bodies: Vec<Vec<String>> = (0..users).map(|u| (0..pushes).map(|p| batch(u, p)).collect()).collect();
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(u, bodies)| {
            let base = base.clone();
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for body in bodies {
                    let r = http
                        .post(format!("{base}/v1/push"))
                        .bearer_auth(token(&format!("u{u}")))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let pushed = started.elapsed();
    let total = users * pushes * OPS_PER_PUSH;
    let drained = if hooked {
        while receiver.count() < total {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    task.abort();
    sync.close().await;
    drop_database(&database).await;
    (total as f64 / pushed.as_secs_f64(), drained)
}

/// Lags (ms) from each one-op push's answer to its change's arrival.
async fn lags(backend: &str, pushes: usize) -> Vec<f64> {
    let database = fresh_database(backend).await.unwrap();
    let (receiver, url) = Receiver::start().await;
    let (base, sync, task) = serve(config(&database, Some(&url), 1), Mode::Webhook).await;
    let http = reqwest::Client::new();
    let lag_token = token("lag");
    let mut answered = Vec::with_capacity(pushes);
    for i in 0..pushes {
        let body = json!({"attemptKey": format!("d:{i}"), "batch": [{"opId": format!("l{i}"), "table": "sets",
            "rowId": format!("r{i}"), "at": 1_000 + i as u64, "fields": {"exercise": "squat", "weightKg": 80, "reps": 5}}]});
        let r = http.post(format!("{base}/v1/push")).bearer_auth(&lag_token).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        answered.push((format!("l{i}"), Instant::now()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while receiver.count() < pushes {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let arrived = receiver.arrived.lock().unwrap().clone();
    task.abort();
    sync.close().await;
    drop_database(&database).await;
    let mut out: Vec<f64> =
        answered.iter().map(|(id, at)| arrived[id].saturating_duration_since(*at).as_secs_f64() * 1000.0).collect();
    out.sort_by(f64::total_cmp);
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // The server binary's process settings (src/main.rs), so that it is measured as it ships.
    marksync_server::memory::no_transparent_huge_pages();
    let (users, pushes, rounds) = (env("BACKEND_USERS", 4), env("BACKEND_PUSHES", 20), env("BACKEND_ROUNDS", 9));
    let lag_pushes = env("BACKEND_LAG_PUSHES", 200);
    let mut backends = vec!["sqlite"];
    if std::env::var("MARKSYNC_TEST_POSTGRES_URL").is_ok() {
        backends.push("postgres");
    }
    println!("| backend | plain (ops/s) | no-op Rules | ratio | webhook | ratio | all delivered after (s) | lag p50 (ms) | lag p99 (ms) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for backend in backends {
        let (mut plain, mut rules, mut hooked, mut drained) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Each round starts with another mode: no mode always runs first, or last.
            let mut modes = [Mode::Plain, Mode::Rules, Mode::Webhook];
            modes.rotate_left(round % 3);
            for mode in modes {
                let (ops, d) = throughput(backend, mode, users, pushes).await;
                match mode {
                    Mode::Plain => plain.push(ops),
                    Mode::Rules => rules.push(ops),
                    Mode::Webhook => {
                        hooked.push(ops);
                        drained.push(d.unwrap_or(0.0));
                    }
                }
            }
        }
        let (plain, rules, hooked, drained) = (median(plain), median(rules), median(hooked), median(drained));
        let lag = lags(backend, lag_pushes).await;
        println!(
            "| {backend} | {plain:.0} | {rules:.0} | {:.2} | {hooked:.0} | {:.2} | {drained:.2} | {:.1} | {:.1} |",
            rules / plain,
            hooked / plain,
            pct(&lag, 0.5),
            pct(&lag, 0.99)
        );
    }
}
