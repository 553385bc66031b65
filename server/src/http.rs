//! Routes and handlers: push, pull, verdicts, events, health, metrics, faults, static files
//! (spaces and membership: [`crate::membership`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Extension;
use axum::{Json, Router};
use futures_util::Stream;
use http_body_util::BodyExt;
use marksync::protocol::{
    ErrorCode, PushRequest, PushResponse, VerdictsRequest, VerdictsResponse, DEFAULT_PULL_LIMIT, MAX_PULL_LIMIT,
    MAX_SAFE_INTEGER,
};
use tokio::sync::broadcast::error::RecvError;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::{ServeDir, ServeFile};
use tower_http::trace::TraceLayer;

use crate::error::ApiError;
use crate::faults::FaultRequest;
use crate::guard::{self, StreamPlace, User};
use crate::store::{PushControl, PushError};
use crate::{membership, App, Config, Poke, ServerError};

/// The router of the whole server.
pub fn router(app: App, config: &Config) -> Result<Router, ServerError> {
    // Auth, rate limit, per-user caps and the body deadline come first (crate::guard).
    let api = Router::new()
        .route("/v1/push", post(push))
        .route("/v1/pull", get(pull).post(membership::pull))
        .route("/v1/spaces", get(membership::list).post(membership::create))
        .route("/v1/spaces/members", get(membership::members).post(membership::set))
        .route("/v1/verdicts", post(verdicts))
        .route("/v1/schema", get(schema))
        .route("/v1/events", get(events))
        .route_layer(middleware::from_fn_with_state(app.clone(), guard::api));
    let admin = Router::new()
        .route("/v1/admin/spaces", post(membership::admin_create))
        .route("/v1/admin/spaces/members", get(membership::admin_members).post(membership::admin_set))
        .route_layer(middleware::from_fn_with_state(app.clone(), membership::admin));
    let mut r = Router::new()
        .merge(api)
        .merge(admin)
        .route("/v1/{*rest}", any(not_found))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    r = if app.faults.is_some() {
        r.route("/__faults", post(set_faults))
    } else {
        r.route("/__faults", any(not_found))
    };
    r = match &config.static_dir {
        Some(dir) => r.fallback_service(ServeDir::new(dir).fallback(ServeFile::new(dir.join("index.html")))),
        None => r.fallback(not_found),
    };
    let mut r = r.layer(middleware::from_fn_with_state(app.clone(), count_errors)).with_state(app);
    if !config.cors_origin.is_empty() {
        r = r.layer(cors(&config.cors_origin)?);
    }
    // Spans name the path only: `/v1/events?token=…` must not put tokens in logs.
    let trace = TraceLayer::new_for_http().make_span_with(
        |req: &Request| tracing::debug_span!("request", method = %req.method(), path = %req.uri().path()),
    );
    Ok(r.layer(trace))
}

fn cors(origins: &[String]) -> Result<CorsLayer, ServerError> {
    let allow = if origins.iter().any(|o| o.trim() == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| HeaderValue::from_str(o.trim()).map_err(|_| ServerError::Config(format!("bad CORS origin {o:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(list)
    };
    Ok(CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, header::IF_NONE_MATCH])
        .expose_headers([header::RETRY_AFTER, header::ETAG])
        .max_age(Duration::from_secs(600)))
}

/// Counts every whole-request error by code.
async fn count_errors(State(app): State<App>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if let Some(code) = resp.extensions().get::<ErrorCode>() {
        app.metrics.error(*code);
    }
    resp
}

pub(crate) async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(serde_json::json!({"error": {"code": "not_found", "message": "no such route"}})))
        .into_response()
}

/// How much of a too-large body is still read (and thrown away) before the 413
/// is sent, as a multiple of the limit: a client that is still sending when the
/// server answers and closes gets a broken pipe instead of the 413. Beyond
/// this (or after [`DRAIN_TIME`]) the server answers anyway and closes.
const DRAIN_FACTOR: u64 = 16;
/// The longest time spent draining a too-large body.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads the body, counting the bytes actually received (never trusting
/// Content-Length alone): more than `limit` is 413 `payload_too_large`.
async fn read_body(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::new(ErrorCode::PayloadTooLarge, format!("the body is larger than {limit} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let drain_cap = (limit as u64).saturating_mul(DRAIN_FACTOR);
    if declared.is_some_and(|n| n > drain_cap) {
        return Err(too_large());
    }
    let mut buf: Vec<u8> = Vec::with_capacity(declared.map_or(8192, |n| n.min(limit as u64) as usize));
    let mut seen: u64 = 0;
    let drain_until = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let next = if seen > limit as u64 {
            match tokio::time::timeout_at(drain_until, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(too_large()),
            }
        } else {
            body.frame().await
        };
        let Some(frame) = next else { break };
        let frame = frame.map_err(|_| ApiError::bad_request("the body could not be read"))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len() as u64;
            if seen > drain_cap {
                return Err(too_large());
            }
            if seen <= limit as u64 {
                buf.extend_from_slice(&data);
            }
        }
    }
    if seen > limit as u64 {
        return Err(too_large());
    }
    Ok(Bytes::from(buf))
}

/// Reads a body within the limit and decodes it as `what` (a 400 names it).
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<T, ApiError> {
    let bytes = read_body(headers, body, limit).await?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("the body is not {what}: {e}")))
}

/// `POST /v1/push`: PROTOCOL §3.
async fn push(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: PushRequest = read_json(&headers, body, app.max_body, "a push request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Held until the answer leaves: how many pushes of this device overlap.
    let device = req.attempt_key.split(':').next().unwrap_or_default();
    let _in_flight = app.metrics.same_device.enter(&format!("{user}/{device}"));
    let faults = app.faults.as_ref().map(|f| f.take()).unwrap_or_default();
    let ctl = PushControl {
        hold_lock_for: faults.delay,
        fail_before_commit: faults.fail_before_commit,
        probe: Some(Arc::clone(&app.metrics.same_user)),
        sabotage: app.sabotage,
    };
    let limits = app.limits();
    let started = Instant::now();
    // The judge runs in its own task: a client that hangs up cannot cancel a
    // transaction half way; it commits or rolls back whole.
    let task_app = app.clone();
    let task_user = user.clone();
    let task = tokio::spawn(async move {
        #[cfg(feature = "bench-per-op")]
        if task_app.per_op_judge {
            let result = task_app.store.push_per_op(&task_user, &task_app.schema, &req.batch).await;
            return (req, result);
        }
        let result = task_app.store.push(&task_user, &task_app.schema, &req.batch, &limits, &ctl).await;
        (req, result)
    });
    let (req, result) = task.await.map_err(|e| ApiError::internal(&e))?;
    let judgement = match result {
        Ok(j) => j,
        Err(PushError::Judge(e)) => return Err(ApiError::new(ErrorCode::SchemaTooNew, e.to_string())),
        Err(e) => return Err(ApiError::internal(&e)),
    };
    app.metrics.push_judged(judgement.verdicts.iter().map(|v| &v.outcome), started.elapsed());
    for (space, head) in &judgement.heads {
        // This process's streams at once (on PostgreSQL the NOTIFY comes back
        // too, later; a stream pokes only when a head grows, so once). No
        // receiver is fine: nobody is listening.
        let _ = app.pokes.send(Poke::Space { space: space.clone(), head: *head });
    }
    if faults.lose_response {
        tracing::warn!(user, "fault: committed, now dropping the connection without an answer");
        return Ok(lost_response());
    }
    Ok(Json(PushResponse { attempt_key: req.attempt_key, verdicts: judgement.verdicts, now: Some(limits.now) })
        .into_response())
}

/// `POST /v1/verdicts`: what the server remembers of some opIds (PROTOCOL §3,
/// "asking instead of sending"). Read-only: never judges, writes or takes a seq.
async fn verdicts(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: VerdictsRequest = read_json(&headers, body, app.max_body, "a verdicts request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    let limits = app.limits();
    let verdicts =
        app.store.verdicts(&app.schema, &user, &req.op_ids, &limits).await.map_err(|e| ApiError::internal(&e))?;
    Ok(Json(VerdictsResponse { verdicts, now: Some(limits.now) }).into_response())
}

/// A response whose body fails before its first byte: hyper then closes the
/// connection without sending anything, and the client sees a network error.
fn lost_response() -> Response {
    let body = Body::from_stream(futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("fault injection: response lost"))
    }));
    Response::new(body)
}

/// Parses `cursor` (0..=2^53-1, default 0) and `limit` (1..=1000, default 500).
fn pull_params(q: &HashMap<String, String>) -> Result<(u64, usize), ApiError> {
    fn digits(name: &str, v: &str) -> Result<u64, ApiError> {
        if v.is_empty() || v.len() > 16 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ApiError::bad_request(format!("{name} must be a non-negative integer")));
        }
        v.parse::<u64>().map_err(|_| ApiError::bad_request(format!("{name} must be a non-negative integer")))
    }
    let cursor = match q.get("cursor") {
        Some(v) => digits("cursor", v)?,
        None => 0,
    };
    if cursor > MAX_SAFE_INTEGER {
        return Err(ApiError::bad_request("cursor must be at most 2^53-1"));
    }
    let limit = match q.get("limit") {
        Some(v) => digits("limit", v)?,
        None => DEFAULT_PULL_LIMIT as u64,
    };
    if limit == 0 || limit > MAX_PULL_LIMIT as u64 {
        return Err(ApiError::bad_request(format!("limit must be 1 to {MAX_PULL_LIMIT}")));
    }
    Ok((cursor, limit as usize))
}

pub(crate) fn query(
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<HashMap<String, String>, ApiError> {
    q.map(|Query(q)| q).map_err(|_| ApiError::bad_request("the query string does not parse"))
}

/// `GET /v1/pull?cursor&limit`: PROTOCOL §4. Rows leave as the newest
/// version of the schema spells them (§3b: stored rows are read, never
/// migrated), with that version, so a device notices a new schema.
async fn pull(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (cursor, limit) = pull_params(&q)?;
    let now = crate::store::now_ms_u64();
    let mut page = app.store.pull(&user, cursor, limit).await.map_err(|e| ApiError::internal(&e))?;
    page.now = Some(now);
    page.schema_version = Some(app.schema.version);
    upgrade_changes(&app, &mut page.changes);
    app.metrics.pulled(page.changes.len());
    Ok(Json(page).into_response())
}

/// Pulled rows as the newest version of the schema spells them (§3b:
/// stored rows are read, never migrated).
pub(crate) fn upgrade_changes(app: &App, changes: &mut [marksync::protocol::Change]) {
    for change in changes {
        if let std::borrow::Cow::Owned(row) = app.schema.upgrade_row(&change.key.table, &change.row) {
            change.row = row;
        }
    }
}

/// `GET /v1/schema`: the schema file (PROTOCOL §3b), with an `ETag`; a
/// request whose `If-None-Match` names it gets `304` and no body. Auth, rate
/// limit and per-user caps as pull (the guard).
async fn schema(State(app): State<App>, headers: HeaderMap) -> Response {
    let file = &app.schema_file;
    let etag = HeaderValue::from_str(&file.etag).unwrap_or_else(|_| HeaderValue::from_static("\"\""));
    let cache = (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if if_none_match(&headers, &file.etag) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag), cache]).into_response();
    }
    let json = (header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (StatusCode::OK, [(header::ETAG, etag), cache, json], file.json.clone()).into_response()
}

/// Whether `If-None-Match` names `etag` (a list, weak or strong, or `*`).
fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
    })
}

/// `GET /v1/events`: `event: poke` whenever the head of a space the user is
/// a member of grows — `data: <head>` for the personal space, `data: <head>
/// <space>` for another — and `data: members` when the user's memberships
/// change; once on connect with the personal space's head. The guard
/// authenticated the user (header or `?token=`), took a rate-limit token and
/// the stream's place among the user's streams, held to the stream's end.
async fn events(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    Extension(place): Extension<StreamPlace>,
) -> Result<Response, ApiError> {
    let rx = app.pokes.subscribe();
    let spaces = followed_heads(&app, &user).await.map_err(|e| ApiError::internal(&e))?;
    let personal: Arc<str> = marksync::space::personal(&user).into();
    let head = spaces.get(&personal).copied().unwrap_or(0);
    let state = PokeStream {
        app: app.clone(),
        user,
        personal,
        rx,
        first: Some(poke_data(None, head)),
        spaces,
        shutdown: app.shutdown.clone(),
        _place: place,
    };
    let sse = Sse::new(poke_stream(state)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)));
    Ok(sse.into_response())
}

/// The head of every space `user` is a member of.
async fn followed_heads(app: &App, user: &str) -> Result<HashMap<Arc<str>, u64>, crate::store::StoreError> {
    Ok(app.store.spaces_of(user).await?.into_iter().map(|(space, _, head)| (Arc::from(space), head)).collect())
}

struct PokeStream {
    app: App,
    user: String,
    personal: Arc<str>,
    rx: tokio::sync::broadcast::Receiver<Poke>,
    first: Option<String>,
    /// The user's spaces and the last head poked for each.
    spaces: HashMap<Arc<str>, u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Given back when the stream ends.
    _place: StreamPlace,
}

/// `<head>` for the personal space (`space` = `None`), `<head> <space>` for another.
fn poke_data(space: Option<&str>, head: u64) -> String {
    match space {
        None => head.to_string(),
        Some(s) => format!("{head} {s}"),
    }
}

fn poke(data: String) -> Event {
    Event::default().event("poke").data(data)
}

fn poke_stream(state: PokeStream) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(state, |mut s| async move {
        if let Some(data) = s.first.take() {
            return Some((Ok(poke(data)), s));
        }
        loop {
            let received = tokio::select! {
                r = s.rx.recv() => r,
                _ = s.shutdown.wait_for(|stop| *stop) => return None,
            };
            match received {
                Ok(Poke::Space { space, head }) => {
                    let Some(last) = s.spaces.get_mut(&space) else { continue };
                    if head > *last {
                        *last = head;
                        let named = (space != s.personal).then_some(&*space);
                        return Some((Ok(poke(poke_data(named, head))), s));
                    }
                }
                Ok(Poke::Members { user }) if *user == *s.user => {
                    // The spaces now, each known one at the head last poked
                    // (a push's poke that comes after this read still pokes).
                    if let Ok(now) = followed_heads(&s.app, &s.user).await {
                        s.spaces = now
                            .into_iter()
                            .map(|(space, head)| {
                                let last = s.spaces.get(&space).copied().unwrap_or(head);
                                (space, last)
                            })
                            .collect();
                    }
                    return Some((Ok(poke("members".to_owned())), s));
                }
                Ok(Poke::Members { .. }) => {}
                // Missed pokes: read the spaces again and poke if anything moved.
                Err(RecvError::Lagged(_)) => {
                    let Ok(now) = followed_heads(&s.app, &s.user).await else { continue };
                    let moved = now.len() != s.spaces.len()
                        || now.iter().any(|(space, head)| s.spaces.get(space).is_none_or(|last| head > last));
                    s.spaces = now;
                    if moved {
                        return Some((Ok(poke("members".to_owned())), s));
                    }
                }
                Err(RecvError::Closed) => return None,
            }
        }
    })
}

async fn healthz(State(app): State<App>) -> Response {
    match app.store.ping().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n").into_response()
        }
    }
}

async fn metrics(State(app): State<App>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render()).into_response()
}

/// `POST /__faults` (only with `--enable-faults`).
async fn set_faults(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let Some(faults) = &app.faults else {
        return Ok(not_found().await);
    };
    let bytes = read_body(&headers, body, 4096).await?;
    let req: FaultRequest =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("bad fault request: {e}")))?;
    let now = faults.set(&req);
    tracing::warn!(?now, "faults set");
    Ok(Json(now).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn pull_params_are_checked() {
        assert_eq!(pull_params(&q(&[])).unwrap(), (0, 500));
        assert_eq!(pull_params(&q(&[("cursor", "17"), ("limit", "10")])).unwrap(), (17, 10));
        for bad in [
            ("cursor", "-1"),
            ("cursor", "x"),
            ("cursor", ""),
            ("cursor", "9007199254740992"),
            ("limit", "0"),
            ("limit", "1001"),
            ("limit", "+5"),
        ] {
            assert_eq!(pull_params(&q(&[bad])).unwrap_err().code, ErrorCode::BadRequest, "{bad:?}");
        }
    }
}
