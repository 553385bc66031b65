//! The app's own backend around marksync (docs/server.md): tokens signed by
//! an identity provider, verified with its published keys (a JWKS file, or a
//! JWKS URL taken again on rotation and as its cache headers say), every
//! refusal a 401 with nothing written; and the admin reads of any space.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use common::{config, fresh_database, full, post, Backend, TestServer};

const ADMIN: &str = "the-backends-admin-credential-of-32-characters";

/// An identity provider's signing key.
struct Signer {
    key: EncodingKey,
    alg: Algorithm,
    kid: &'static str,
}

fn key_file(name: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys").join(name)).unwrap()
}

fn rsa(file: &str, kid: &'static str) -> Signer {
    Signer { key: EncodingKey::from_rsa_der(&key_file(file)), alg: Algorithm::RS256, kid }
}

fn ec(file: &str, kid: &'static str) -> Signer {
    Signer { key: EncodingKey::from_ec_der(&key_file(file)), alg: Algorithm::ES256, kid }
}

impl Signer {
    /// The public half, as the provider publishes it.
    fn jwk(&self) -> Value {
        let mut jwk = Jwk::from_encoding_key(&self.key, self.alg).unwrap();
        jwk.common.key_id = Some(self.kid.into());
        serde_json::to_value(jwk).unwrap()
    }

    /// A token for `sub`, valid `ttl` seconds (negative: expired), naming `kid`.
    fn token_as(&self, kid: &str, sub: &str, ttl: i64) -> String {
        let mut head = Header::new(self.alg);
        head.kid = Some(kid.into());
        let now = jsonwebtoken::get_current_timestamp() as i64;
        jsonwebtoken::encode(&head, &json!({"sub": sub, "exp": now + ttl}), &self.key).unwrap()
    }

    fn token(&self, sub: &str) -> String {
        self.token_as(self.kid, sub, 300)
    }
}

fn set(keys: &[&Signer]) -> Value {
    json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() })
}

/// Unpadded base64url (RFC 4648 §5), as a JWT's parts are written.
fn b64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A push as whoever `token` says, with one op: the status.
async fn push_as(t: &TestServer, token: &str, op_id: &str) -> u16 {
    let body = json!({ "attemptKey": common::unique("a"), "batch": [full(op_id, "r1", 1_000, 5)] });
    let r = t.http.post(t.url("/v1/push")).bearer_auth(token).json(&body).send().await.unwrap();
    r.status().as_u16()
}

/// RS256 and ES256 tokens are taken by `kid` from a JWKS file, HS256 goes on
/// working beside them, and every forged or stale token is a 401 that writes
/// nothing — including the algorithm-confusion attack (an HS256 token whose
/// "secret" is the provider's public key) and `alg: none`.
async fn tokens_from_a_jwks_file(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (rsa1, rsa2, ec1) = (rsa("rsa-1.der", "rsa-1"), rsa("rsa-2.der", "rsa-2"), ec("ec-1.der", "ec-1"));
    let dir = std::env::temp_dir().join(common::unique("jwks"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jwks.json");
    std::fs::write(&file, set(&[&rsa1, &ec1]).to_string()).unwrap();
    let mut c = config(&database);
    c.jwks_file = Some(file.clone());
    let t = TestServer::start(c).await.owning_database();

    let public_pem = key_file("rsa-1.pub.pem");
    let confused = {
        let mut head = Header::new(Algorithm::HS256);
        head.kid = Some("rsa-1".into());
        let now = jsonwebtoken::get_current_timestamp();
        jsonwebtoken::encode(
            &head,
            &json!({"sub": "alice", "exp": now + 300}),
            &EncodingKey::from_secret(&public_pem).unwrap(),
        )
        .unwrap()
    };
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#),
        b64(json!({"sub": "alice", "exp": jsonwebtoken::get_current_timestamp() + 300}).to_string().as_bytes())
    );
    let forged = [
        ("an unknown kid", rsa2.token("alice")),
        ("a bad signature", rsa2.token_as("rsa-1", "alice", 300)),
        ("an expired token", rsa1.token_as("rsa-1", "alice", -600)),
        ("alg none", none),
        ("HS256 signed with the public key", confused),
        ("an RSA signature under an EC key's kid", rsa1.token_as("ec-1", "alice", 300)),
        ("no kid", {
            let now = jsonwebtoken::get_current_timestamp();
            jsonwebtoken::encode(&Header::new(Algorithm::RS256), &json!({"sub": "alice", "exp": now + 300}), &rsa1.key)
                .unwrap()
        }),
    ];
    for (what, token) in &forged {
        assert_eq!(push_as(&t, token, &format!("forged-{}", what.len())).await, 401, "{what} is refused");
    }
    assert_eq!(t.counts("alice").await.verdicts, 0, "no forged token wrote anything");

    assert_eq!(push_as(&t, &rsa1.token("alice"), "a1").await, 200, "RS256 by kid");
    assert_eq!(push_as(&t, &ec1.token("alice"), "a2").await, 200, "ES256 by kid");
    let hs = common::jwt("test-secret-of-at-least-32-bytes!", "alice", 300);
    assert_eq!(push_as(&t, &hs, "a3").await, 200, "HS256 with --jwt-secret still works");
    assert_eq!(t.counts("alice").await.verdicts, 3);

    // A key added to the file is taken when a token names it, without a restart.
    std::fs::write(&file, set(&[&rsa1, &ec1, &rsa2]).to_string()).unwrap();
    assert_eq!(push_as(&t, &rsa2.token("bob"), "b1").await, 200, "a rotated-in key is read from the file");
    t.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
both!(tokens_from_a_jwks_file);

/// A key set the server cannot use stops it at start, in words.
#[tokio::test]
async fn an_unusable_key_set_refuses_to_start() {
    let dir = std::env::temp_dir().join(common::unique("jwks-bad"));
    std::fs::create_dir_all(&dir).unwrap();
    let only_hmac = dir.join("hmac.json");
    std::fs::write(&only_hmac, r#"{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}"#).unwrap();
    let cases = [
        (Some(dir.join("missing.json")), None, "cannot read it"),
        (Some(only_hmac), None, "no usable signing key"),
        (None, Some("http://127.0.0.1:9/jwks.json".to_owned()), "cannot fetch it"),
    ];
    for (file, url, says) in cases {
        let database = fresh_database(Backend::Sqlite).await.unwrap();
        let mut c = config(&database);
        c.jwks_file = file;
        c.jwks_url = url;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = marksync_server::start(c, listener).await.expect_err("refused to start").to_string();
        assert!(err.contains("--jwks-") && err.contains(says), "{err}");
        common::drop_database(&database).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A provider's JWKS endpoint on loopback: the set it publishes, its
/// `Cache-Control`, and how often it was fetched.
#[derive(Clone)]
struct Provider {
    published: Arc<Mutex<(Value, &'static str)>>,
    fetches: Arc<AtomicUsize>,
}

impl Provider {
    async fn start(set: Value, cache: &'static str) -> (Provider, String) {
        let p = Provider { published: Arc::new(Mutex::new((set, cache))), fetches: Arc::default() };
        let served = p.clone();
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                let p = served.clone();
                async move {
                    p.fetches.fetch_add(1, Ordering::SeqCst);
                    let (set, cache) = p.published.lock().unwrap().clone();
                    ([(header::CACHE_CONTROL, cache), (header::CONTENT_TYPE, "application/json")], set.to_string())
                        .into_response()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (p, url)
    }

    fn publish(&self, set: Value, cache: &'static str) {
        *self.published.lock().unwrap() = (set, cache);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// With `--jwks-url`, a key rotated in at the provider is taken on the first
/// token naming it; a key removed is refused once the set's `max-age` has
/// passed; made-up `kid`s cannot make the server hammer the provider.
async fn tokens_from_a_jwks_url(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let (rsa1, rsa2, ec1) = (rsa("rsa-1.der", "rsa-1"), rsa("rsa-2.der", "rsa-2"), ec("ec-1.der", "ec-1"));
    let (provider, url) = Provider::start(set(&[&rsa1]), "public, max-age=600").await;
    let mut c = config(&database);
    c.jwks_url = Some(url);
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(provider.fetches(), 1, "fetched at start");
    assert_eq!(push_as(&t, &rsa1.token("alice"), "a1").await, 200);
    assert_eq!(provider.fetches(), 1, "within max-age the set is not fetched again");

    provider.publish(set(&[&rsa1, &rsa2]), "public, max-age=1");
    assert_eq!(push_as(&t, &rsa2.token("alice"), "a2").await, 200, "a rotated-in key is taken without a restart");
    assert_eq!(provider.fetches(), 2);

    // The provider drops rsa-1; after the set's max-age, its tokens are refused.
    provider.publish(set(&[&rsa2, &ec1]), "public, max-age=1");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(push_as(&t, &rsa1.token("alice"), "a3").await, 401, "a removed key is refused once the set is stale");
    assert_eq!(push_as(&t, &ec1.token("alice"), "a4").await, 200);

    let before = provider.fetches();
    for i in 0..40 {
        let kid = format!("made-up-{i}");
        assert_eq!(push_as(&t, &rsa2.token_as(&kid, "mallory", 300), &format!("m{i}")).await, 401);
    }
    let extra = provider.fetches() - before;
    assert!(extra <= 10, "40 made-up kids fetched the set {extra} times: the refetches are rate-limited");
    assert!(t.metric("marksync_jwks_loads_limited_total").await >= 30.0, "the refused loads are counted");
    assert_eq!(t.metric("marksync_jwks_keys").await, 2.0);
    assert!(t.metric("marksync_jwks_loads_total{reason=\"unknown_kid\",outcome=\"ok\"}").await >= 2.0);
    assert_eq!(t.counts("mallory").await.verdicts, 0);
    assert_eq!(t.counts("alice").await.verdicts, 3);
    t.stop().await;
}
both!(tokens_from_a_jwks_url);

async fn admin(t: &TestServer, method: reqwest::Method, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let mut r = t.http.request(method, t.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// With the admin credential the backend lists every space with its head,
/// page by page, and pulls any of them as a device pulls; a user's token is
/// refused there.
async fn the_backend_reads_any_space(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let mut c = config(&database);
    c.admin_token = Some(ADMIN.into());
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(post(&t, "/v1/spaces", "alice", json!({"space": "team"})).await.0, 200);
    t.push_ok(
        "alice",
        &[common::in_space("team", full("t1", "r1", 1_000, 5)), common::in_space("team", full("t2", "r2", 1_001, 6))],
    )
    .await;
    t.push_ok("bob", &[full("b1", "r1", 1_000, 7)]).await;

    let get = reqwest::Method::GET;
    let (status, all) = admin(&t, get.clone(), "/v1/admin/spaces", ADMIN, None).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["spaces"], json!([{"space": "team", "head": 2}, {"space": "~bob", "head": 1}]));
    let (_, first) = admin(&t, get.clone(), "/v1/admin/spaces?limit=1", ADMIN, None).await;
    assert_eq!(first["spaces"], json!([{"space": "team", "head": 2}]));
    let (_, next) = admin(&t, get.clone(), "/v1/admin/spaces?limit=1&after=team", ADMIN, None).await;
    assert_eq!(next["spaces"], json!([{"space": "~bob", "head": 1}]));
    assert_eq!(admin(&t, get.clone(), "/v1/admin/spaces?limit=0", ADMIN, None).await.0, 400);
    let (status, twice) = admin(&t, get.clone(), "/v1/admin/spaces?limit=1&limit=2", ADMIN, None).await;
    assert_eq!(
        (status, twice["error"]["message"].as_str()),
        (400, Some("the query parameter \"limit\" appears twice"))
    );

    let post_ = reqwest::Method::POST;
    let ask = json!({"spaces": {"team": {"cursor": 0}, "~bob": {"cursor": 0}, "nowhere": {"cursor": 0}}, "limit": 2});
    let (status, page) = admin(&t, post_.clone(), "/v1/admin/pull", ADMIN, Some(ask)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["left"], json!(["nowhere"]));
    assert_eq!((page["joined"].clone(), page["roles"].clone()), (json!([]), json!([])));
    assert!(page.get("personal").is_none(), "the backend has no personal space: {page}");
    let spaces = page["spaces"].as_array().unwrap();
    assert_eq!(spaces[0]["space"], "team");
    assert_eq!(spaces[0]["changes"].as_array().unwrap().len(), 2);
    assert_eq!(
        (spaces[1]["space"].clone(), spaces[1]["hasMore"].clone()),
        (json!("~bob"), json!(true)),
        "the limit holds"
    );
    assert_eq!(page["hasMore"], true);
    let ask = json!({"spaces": {"team": {"cursor": 2}, "~bob": {"cursor": 0}}});
    let (_, rest) = admin(&t, post_.clone(), "/v1/admin/pull", ADMIN, Some(ask)).await;
    let spaces = rest["spaces"].as_array().unwrap();
    assert_eq!(spaces.len(), 1, "nothing new in team: {rest}");
    assert_eq!(spaces[0]["changes"][0]["rowId"], "r1");
    assert_eq!(spaces[0]["changes"][0]["fields"]["reps"], 7);
    // Marks as a device's pull gives them: the cells' notes (`seq`, `by`)
    // only for a request that asks (`marksync-accept: notes`).
    let marks = |page: &Value| page["spaces"][0]["changes"][0]["marks"]["reps"].clone();
    assert!(marks(&rest).get("seq").is_none() && marks(&rest).get("by").is_none(), "{rest}");
    let ask = json!({"spaces": {"~bob": {"cursor": 0}}}).to_string();
    let r = t.http.post(t.url("/v1/admin/pull")).bearer_auth(ADMIN).header("marksync-accept", "notes");
    let noted: Value =
        r.header("content-type", "application/json").body(ask).send().await.unwrap().json().await.unwrap();
    assert!(marks(&noted).get("seq").is_some(), "{noted}");

    // The backend may encode its bodies as a device does (PROTOCOL §5a).
    let ask = json!({"spaces": {"team": {"cursor": 0}}}).to_string();
    let r = t.http.post(t.url("/v1/admin/pull")).bearer_auth(ADMIN).header("content-encoding", "gzip");
    let r = r.header("content-type", "application/json").body(common::gzip(ask.as_bytes())).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["accept-encoding"].to_str().unwrap()), (200, "gzip, br"));
    assert_eq!(r.json::<Value>().await.unwrap()["spaces"][0]["changes"].as_array().map(Vec::len), Some(2));

    for token in ["dev:alice".to_owned(), common::jwt("test-secret-of-at-least-32-bytes!", "alice", 300)] {
        let ask = json!({"spaces": {"team": {"cursor": 0}}});
        assert_eq!(admin(&t, post_.clone(), "/v1/admin/pull", &token, Some(ask)).await.0, 401, "a user's token");
        assert_eq!(admin(&t, get.clone(), "/v1/admin/spaces", &token, None).await.0, 401);
    }
    t.stop().await;
}
both!(the_backend_reads_any_space);

/// The app's own sessions: `Authorization: Bearer s-<user>`.
struct Sessions;

impl marksync_server::auth::Authenticate for Sessions {
    fn user<'a>(
        &'a self,
        headers: &'a axum::http::HeaderMap,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let session = headers.get("authorization").and_then(|v| v.to_str().ok());
            session
                .and_then(|s| s.strip_prefix("Bearer s-"))
                .map(str::to_owned)
                .ok_or_else(|| "sign in to the app first".into())
        })
    }
}

/// marksync nested at `/sync` inside an app's own axum server, with the
/// app's own authentication: pushes, pulls, verdicts and probes go through
/// it; the app's routes stay the app's; a request without the app's session
/// is refused in the app's words; the built-in tokens are not consulted.
async fn marksync_inside_the_apps_server(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let mut c = config(&database);
    c.dev_auth = false;
    let sync = marksync_server::embed::Builder::new(c).authenticate(Sessions).build().await.expect("builds");
    let home = axum::Router::new().route("/", axum::routing::get(|| async { "the app" }));
    let (base, stop) = serve_embedded(sync, home).await;
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{base}/")).send().await.unwrap().text().await.unwrap(), "the app");
    assert_eq!(http.get(format!("{base}/sync/readyz")).send().await.unwrap().status(), 200);

    let push = json!({"attemptKey": "k1", "batch": [full("e1", "r1", 1_000, 5)]});
    let r = http.post(format!("{base}/sync/v1/push")).bearer_auth("s-alice").json(&push).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let verdicts: Value = r.json().await.unwrap();
    assert_eq!(verdicts["verdicts"][0]["status"], "applied");
    let r = http.post(format!("{base}/sync/v1/push")).bearer_auth("s-alice").json(&push).send().await.unwrap();
    let again: Value = r.json().await.unwrap();
    assert_eq!(again["verdicts"][0]["status"], "duplicate", "the same verdict rules inside the app");
    let page: Value =
        http.get(format!("{base}/sync/v1/pull")).bearer_auth("s-alice").send().await.unwrap().json().await.unwrap();
    assert_eq!(page["changes"][0]["rowId"], "r1");

    // A browser's EventSource sends no headers: its `?token=` reaches the app's authentication.
    let mut stream = http.get(format!("{base}/sync/v1/events?token=s-alice")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    common::read_until(&mut stream, &mut String::new(), "event: poke").await;
    drop(stream);
    assert_eq!(http.get(format!("{base}/sync/v1/events?token=nobody")).send().await.unwrap().status(), 401);

    let r = http.post(format!("{base}/sync/v1/push")).json(&push).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let refused: Value = r.json().await.unwrap();
    assert_eq!(refused["error"]["message"], "sign in to the app first");
    let hs = common::jwt("test-secret-of-at-least-32-bytes!", "alice", 300);
    let r = http.get(format!("{base}/sync/v1/pull")).bearer_auth(hs).send().await.unwrap();
    assert_eq!(r.status(), 401, "the app's authentication alone decides");
    let metrics = http.get(format!("{base}/sync/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("marksync_ops_total"), "the metrics are served under the prefix");

    stop().await.unwrap();
    common::drop_database(&database).await;
}
both!(marksync_inside_the_apps_server);

/// `--dev-auth` trusts the connection's peer, which an embedded router cannot see.
#[tokio::test]
async fn dev_auth_is_not_embedded() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let err = marksync_server::embed::Builder::new(config(&database)).build().await.expect_err("refused");
    assert!(err.to_string().contains("--dev-auth"), "{err}");
    common::drop_database(&database).await;
}

/// The app's rule: a user logs at most the weight the app's own table allows
/// them. It reads that table through the push's transaction, and tries a
/// write there too, which is not kept.
struct WeightLimits;

impl marksync_server::rules::Rules for WeightLimits {
    fn load<'a>(
        &'a self,
        db: marksync_server::rules::AppDb<'a>,
        user: &'a str,
        _batch: &'a [marksync::protocol::Op],
    ) -> futures_util::future::BoxFuture<'a, Result<marksync_server::rules::Loaded, String>> {
        use marksync_server::rules::{AppDb, Loaded};
        Box::pin(async move {
            const READ: &str = "SELECT max_kg FROM app_limits WHERE user_id = $1";
            const WRITE: &str = "DELETE FROM app_limits";
            let max: Option<i64> = match db {
                AppDb::Sqlite(c) => {
                    let max =
                        sqlx::query_scalar(READ).bind(user).fetch_optional(&mut *c).await.map_err(|e| e.to_string())?;
                    sqlx::query(WRITE).execute(&mut *c).await.map_err(|e| e.to_string())?;
                    max
                }
                AppDb::Postgres(c) => {
                    let max =
                        sqlx::query_scalar(READ).bind(user).fetch_optional(&mut *c).await.map_err(|e| e.to_string())?;
                    sqlx::query(WRITE).execute(&mut *c).await.map_err(|e| e.to_string())?;
                    max
                }
            };
            Ok(Loaded::new(max))
        })
    }

    fn check(
        &self,
        input: &marksync_server::rules::RuleInput<'_>,
        loaded: &marksync_server::rules::Loaded,
    ) -> Result<(), marksync_server::rules::RuleRefusal> {
        let max = loaded.get::<Option<i64>>().copied().flatten().unwrap_or(0);
        match input.after.get("weightKg") {
            Some(marksync::protocol::Value::Number(w)) if *w > max as f64 => {
                Err(marksync_server::rules::RuleRefusal::new(
                    "over_your_limit",
                    format!("{} may log at most {max} kg", input.user),
                ))
            }
            _ => Ok(()),
        }
    }
}

/// An app of `routes` with marksync nested at `/sync`, serving on loopback:
/// its base URL (`http://addr`), and what stops it (gracefully, the streams
/// ended, then marksync closed).
async fn serve_embedded(
    sync: marksync_server::embed::Embedded,
    routes: axum::Router,
) -> (String, impl FnOnce() -> tokio::task::JoinHandle<()>) {
    let app = routes.nest("/sync", sync.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let streams = sync.clone();
    let served = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
                streams.end_streams();
            })
            .await
    });
    let stop = move || {
        tokio::spawn(async move {
            let _ = stop_tx.send(());
            served.await.unwrap().unwrap();
            sync.close().await;
        })
    };
    (base, stop)
}

/// A `Rules` refusal is a rejected verdict in the app's words: remembered,
/// and replayed word for word after the rule is gone; what the rule wrote
/// while reading is not kept.
async fn an_apps_rule_refuses_and_its_refusal_outlives_the_rule(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let mut c = config(&database);
    c.dev_auth = false;
    let sync = marksync_server::embed::Builder::new(c.clone()).build().await.expect("builds");
    sync.close().await;
    let count = "SELECT count(*) FROM app_limits";
    let rows: i64 = if database.starts_with("sqlite") {
        let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&database).await.unwrap();
        sqlx::query("CREATE TABLE app_limits (user_id TEXT PRIMARY KEY, max_kg INTEGER NOT NULL)")
            .execute(&mut db)
            .await
            .unwrap();
        sqlx::query("INSERT INTO app_limits VALUES ('alice', 100)").execute(&mut db).await.unwrap();
        sqlx::query_scalar(count).fetch_one(&mut db).await.unwrap()
    } else {
        let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&database).await.unwrap();
        sqlx::query("CREATE TABLE app_limits (user_id TEXT PRIMARY KEY, max_kg BIGINT NOT NULL)")
            .execute(&mut db)
            .await
            .unwrap();
        sqlx::query("INSERT INTO app_limits VALUES ('alice', 100)").execute(&mut db).await.unwrap();
        sqlx::query_scalar(count).fetch_one(&mut db).await.unwrap()
    };
    assert_eq!(rows, 1);

    let token = common::jwt("test-secret-of-at-least-32-bytes!", "alice", 300);
    let heavy = common::op("h1", "r1", 1_000, json!({"exercise": "squat", "weightKg": 120, "reps": 5}));
    let push = json!({"attemptKey": "k1", "batch": [heavy, full("l1", "r2", 1_001, 5)]});
    let http = reqwest::Client::new();
    // Pushes the batch to a marksync built by `builder`, then stops it: the answer.
    let push_to = |builder: marksync_server::embed::Builder| {
        let (http, token, push) = (http.clone(), token.clone(), push.clone());
        async move {
            let (base, stop) = serve_embedded(builder.build().await.expect("builds"), axum::Router::new()).await;
            let r = http.post(format!("{base}/sync/v1/push")).bearer_auth(&token).json(&push).send().await.unwrap();
            let answer: Value = r.json().await.unwrap();
            stop().await.unwrap();
            answer
        }
    };
    let r = push_to(marksync_server::embed::Builder::new(c.clone()).rules(WeightLimits)).await;
    assert_eq!(r["verdicts"][0]["status"], "rejected", "{r}");
    assert_eq!(
        (r["verdicts"][0]["code"].as_str(), r["verdicts"][0]["reason"].as_str()),
        (Some("over_your_limit"), Some("alice may log at most 100 kg"))
    );
    assert_eq!(r["verdicts"][1]["status"], "applied");

    // The rule is gone: the refusal is replayed word for word, never judged again.
    let again = push_to(marksync_server::embed::Builder::new(c)).await;
    assert_eq!(again["verdicts"][0], r["verdicts"][0]);
    assert_eq!(again["verdicts"][1]["status"], "duplicate");
    let rows: i64 = if database.starts_with("sqlite") {
        let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&database).await.unwrap();
        sqlx::query_scalar(count).fetch_one(&mut db).await.unwrap()
    } else {
        let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&database).await.unwrap();
        sqlx::query_scalar(count).fetch_one(&mut db).await.unwrap()
    };
    assert_eq!(rows, 1, "what the rules wrote while reading was not kept");
    common::drop_database(&database).await;
}
both!(an_apps_rule_refuses_and_its_refusal_outlives_the_rule);

/// The schema's declared rules on the real server: an editor's change of
/// another's row (`own_rows`), an owners-only field (`owners_only`), a field
/// written once (`write_once`) are refused in the core's words and remembered;
/// the owner changes anything; the creator travels with the row.
async fn declared_rules_on_the_server(backend: Backend) {
    let Some(database) = fresh_database(backend).await else { return };
    let mut c = config(&database);
    c.schema_value = Some(
        marksync::schema::Schema::from_json(
            r#"{"version": 1, "tables": {"sets": {"ownRows": true, "fields": {
                "exercise": {"type": "string", "required": true, "writeOnce": true},
                "weightKg": {"type": "number", "required": true},
                "reps": {"type": "integer", "required": true},
                "coachNote": {"type": "string", "ownersOnly": true}}}}}"#,
        )
        .unwrap(),
    );
    let t = TestServer::start(c).await.owning_database();
    assert_eq!(post(&t, "/v1/spaces", "alice", json!({"space": "team"})).await.0, 200);
    assert_eq!(common::invite(&t, "alice", "team", "bob", json!("editor")).await.0, 200);
    assert_eq!(common::accept(&t, "bob", "team").await.0, 200);
    let team = |op: Value| common::in_space("team", op);
    t.push_ok("alice", &[team(full("a1", "ra", 1_000, 5))]).await;

    let v = t
        .push_ok(
            "bob",
            &[
                team(common::op("b1", "ra", 1_001, json!({"reps": 9}))),
                team(common::op(
                    "b2",
                    "rb",
                    1_002,
                    json!({"exercise": "row", "weightKg": 40, "reps": 8, "coachNote": "x"}),
                )),
                team(full("b3", "rb", 1_003, 8)),
                team(common::op("b4", "rb", 1_004, json!({"exercise": "bench"}))),
                team(common::op("b5", "rb", 1_005, json!({"reps": 10}))),
            ],
        )
        .await;
    let got: Vec<(&str, &str)> =
        v.iter().map(|v| (v["status"].as_str().unwrap(), v["code"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        got,
        [
            ("rejected", "own_rows"),
            ("rejected", "owners_only"),
            ("applied", ""),
            ("rejected", "write_once"),
            ("applied", "")
        ]
    );
    assert_eq!(v[0]["reason"], "in space team, editors may change only the rows they created");
    assert_eq!(v[1]["reason"], "only owners of space team may set sets.coachNote");
    assert_eq!(v[3]["reason"], "sets.exercise can be written only once, and it is already set");

    let v =
        t.push_ok("alice", &[team(common::op("a2", "rb", 1_006, json!({"reps": 11, "coachNote": "well done"})))]).await;
    assert_eq!(common::statuses(&v), ["applied"], "the owner changes any row, and sets the note");
    let page = common::pull(&t, "bob", json!({"team": {"cursor": 0}})).await;
    let team_page = page["spaces"].as_array().unwrap().iter().find(|s| s["space"] == "team").unwrap();
    let rows = team_page["changes"].as_array().unwrap_or_else(|| panic!("{page}"));
    let rb = rows.iter().find(|r| r["rowId"] == "rb").unwrap();
    assert_eq!(rb["fields"]["_by"], "bob", "the creator travels with the row: {rb}");
    t.stop().await;
}
both!(declared_rules_on_the_server);
