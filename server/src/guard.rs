//! Who may use the API and how much of it, decided before a handler runs.
//!
//! The contract: every `/v1/push`, `/v1/pull` and `/v1/events` request is
//! authenticated, takes one token of its user's rate limit, is refused while
//! its user is in debt on the budget the route spends ([`crate::budget`]), and
//! takes a place among its user's requests in progress (or, for `/v1/events`,
//! among the user's and the server's open streams, [`crate::caps`]); a read
//! other than the event stream waits for the user's reads before it (one at
//! a time per user, [`crate::turn`]) and asks the budget again; the
//! handler sees the user as [`User`]. Every `429`, here or from a handler, is
//! held back `--refusal-delay-ms` (at most 64 at once), so a client that
//! ignores `Retry-After` cannot make the server refuse as fast as it can
//! answer. A refusal made
//! here (401, 429) comes before the body is read, so the body is drained first,
//! within bounds; if it could not be read whole, the answer says
//! `Connection: close`: the client gets the answer, never a reset, and never
//! reuses a connection left mid-body. A
//! body that does not arrive whole within the body timeout is answered `408`,
//! also with `Connection: close`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::time::Sleep;

use marksync::protocol::ErrorCode;

use crate::app::App;
use crate::auth::Caller;
use crate::budget::Work;
use crate::caps::StreamRefusal;
use crate::conn::Peer;
use crate::error::ApiError;

/// The longest time a refused request's body is read and thrown away before the answer.
const REFUSAL_DRAIN_TIME: Duration = Duration::from_secs(1);
/// `Retry-After` seconds when a per-user cap is full.
const CAP_RETRY_AFTER: u64 = 1;

/// The user a request was authenticated as: a request extension set by
/// [`api`] for the handler, and a response extension for the access log.
#[derive(Debug, Clone)]
pub struct User(pub String);

/// Until when the request's token names its user (its `exp`, seconds since
/// the Unix epoch; `None`: a credential that says nothing of it): a request
/// extension, read by what outlives the request's check — an event stream
/// ends there, and is opened again with a fresh token.
#[derive(Debug, Clone, Copy)]
pub struct Expires(pub Option<f64>);

/// What a request says of its caller: its `Authorization` header and where it comes from.
/// Owned, so no borrow of the request (whose body is not `Sync`) crosses the token's check.
fn credentials_of(req: &Request) -> Result<(Option<String>, Caller), ApiError> {
    let headers = req.headers();
    let header = match headers.get(header::AUTHORIZATION) {
        Some(v) => {
            Some(v.to_str().map_err(|_| ApiError::unauthorized("the Authorization header is not text"))?.to_owned())
        }
        None => None,
    };
    Ok((header, Caller::of(req.extensions().get::<Peer>().map(|p| p.0), headers)))
}

/// The middleware of the API routes (see the module doc).
pub async fn api(State(app): State<App>, req: Request, next: Next) -> Response {
    let events = req.uri().path() == "/v1/events";
    // A query string that does not parse is the handler's 400; a name given twice is one here.
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(req.uri()).map(|Query(q)| q).unwrap_or_default();
    let mut query = match crate::params::by_name(pairs) {
        Ok(query) => query,
        Err(e) => return e.into_response(),
    };
    // EventSource cannot set headers: `/v1/events` also takes `?token=`.
    let token = if events { query.remove("token") } else { None };
    // The app's own authentication, when embedded with one, decides alone.
    let custom = app.auth.custom_user(req.headers(), token.as_deref());
    let user = match custom.await {
        Some(answer) => answer,
        None => match credentials_of(&req) {
            Ok((header, caller)) => app.auth.user(header.as_deref(), token.as_deref(), caller).await,
            Err(e) => Err(e),
        },
    };
    let crate::auth::Bearer { user, expires } = match user {
        Ok(u) => u,
        Err(e) => return refuse(&app, req, e).await,
    };
    // From here on every line of this request, and its access line, names the user.
    tracing::Span::current().record("user", tracing::field::display(&user));
    let mut resp = admit(app, req, next, (&user, Expires(expires)), events, &query).await;
    resp.extensions_mut().insert(User(user));
    resp
}

/// The rest of [`api`], for an authenticated `user`.
async fn admit(
    app: App,
    req: Request,
    next: Next,
    (user, expires): (&str, Expires),
    events: bool,
    query: &HashMap<String, String>,
) -> Response {
    if let Some(l) = &app.limiter {
        if let Err(secs) = l.check(user) {
            return refuse(&app, req, ApiError::rate_limited(secs)).await;
        }
    }
    // A user in debt on the budget this route spends is refused before its body is read.
    if let Err(e) = app.budgets.ready(work_of(req.method(), req.uri().path()), user, &app.metrics) {
        return refuse(&app, req, e).await;
    }
    // The device names the user its database belongs to: a token of anyone
    // else is refused before anything is read or written (PROTOCOL §5). After
    // the rate limit: refusals cost the token's user like any request.
    if let Some(owner) = query.get(marksync::protocol::USER_PARAM).filter(|owner| **owner != user) {
        let message = format!(
            "the token is for user {user:?}, but this device's database belongs to user {owner:?}; nothing was read or written: open one database per user"
        );
        return refuse(&app, req, ApiError::new(ErrorCode::WrongUser, message)).await;
    }
    let (mut request, mut stream) = (None, None);
    let refused = if events {
        match app.caps.streams.take(user) {
            Ok((place, cut)) => {
                if cut {
                    app.metrics.stream_cut();
                }
                stream = Some(place);
                None
            }
            Err(StreamRefusal::User) => Some("too many event streams open for this user"),
            Err(StreamRefusal::Server) => {
                Some("the server's event streams are all taken, none by a user holding two more than you")
            }
        }
    } else {
        request = app.caps.requests.take(user);
        request.is_none().then_some("too many requests in progress for this user")
    };
    if let Some(why) = refused {
        app.metrics.refused_by_cap(events);
        let e = ApiError { message: format!("{why}; retry later"), ..ApiError::rate_limited(CAP_RETRY_AFTER) };
        return refuse(&app, req, e).await;
    }
    // A user's reads go one at a time: read work is paid once it is known,
    // so reads running at once would all find the budget unspent (eight
    // pulls of 10,000 spaces, both cores, every time the budget refills).
    // In turn, each one asks the budget after the one before it has paid.
    // The turn is held through the answer, a held-back refusal included:
    // a user's refused reads leave one a delay, not one a delay per
    // connection.
    let _turn = if work_of(req.method(), req.uri().path()) == Work::Reads && !events && app.reads_in_turn() {
        let turn = app.read_turns.take(user).await;
        if let Err(e) = app.budgets.ready(Work::Reads, user, &app.metrics) {
            return refuse(&app, req, e).await;
        }
        Some(turn)
    } else {
        None
    };
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(User(user.to_owned()));
    parts.extensions.insert(expires);
    let (body, timed_out) = deadline(&app, body);
    if let Some(place) = stream {
        parts.extensions.insert(place);
    }
    let resp = next.run(Request::from_parts(parts, body)).await;
    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
        // A budget's refusal in the handler: held back like the guard's, its place kept meanwhile.
        hold_back(&app).await;
    }
    drop(request);
    late(&app, &timed_out).unwrap_or(resp)
}

/// The admin routes' guard: their credential, then the same body deadline
/// as the user routes' (holding a body open needs the admin token, but a
/// leaked one, or a stuck script, should not hold a connection for ever).
pub async fn admin_body(State(app): State<App>, req: Request, next: Next) -> Response {
    // The credential first, refused as a user route's refusal is: a client
    // sending a body reads the answer, never a reset.
    if let Err(e) = app.admin.check(req.headers()) {
        return refuse(&app, req, e).await;
    }
    let (parts, body) = req.into_parts();
    let (body, timed_out) = deadline(&app, body);
    let resp = next.run(Request::from_parts(parts, body)).await;
    late(&app, &timed_out).unwrap_or(resp)
}

/// `body` bounded in time by `--body-timeout-ms`; the flag says it ran out.
fn deadline(app: &App, body: Body) -> (Body, Arc<AtomicBool>) {
    let timed_out = Arc::new(AtomicBool::new(false));
    if body.is_end_stream() {
        return (body, timed_out);
    }
    let sleep = Box::pin(tokio::time::sleep(app.caps.body_timeout));
    (Body::new(Deadline { inner: body, sleep, timed_out: Arc::clone(&timed_out) }), timed_out)
}

/// The answer to a body that did not arrive in time (408, the connection
/// closed), whatever the handler made of the cut body.
fn late(app: &App, timed_out: &AtomicBool) -> Option<Response> {
    if !timed_out.load(Ordering::Acquire) {
        return None;
    }
    app.metrics.body_timed_out();
    let message = format!("the body did not arrive within {} ms", app.caps.body_timeout.as_millis());
    Some(closing(ApiError::new(ErrorCode::RequestTimeout, message).into_response()))
}

/// The budget a route spends: a push and a membership write spend ops, the rest read work.
fn work_of(method: &Method, path: &str) -> Work {
    let writes = matches!(
        path,
        "/v1/push"
            | "/v1/spaces"
            | "/v1/spaces/members"
            | "/v1/spaces/leave"
            | "/v1/invitations/accept"
            | "/v1/invitations/decline"
    );
    if writes && method == Method::POST {
        Work::Ops
    } else {
        Work::Reads
    }
}

/// A refusal made before the body was read. A request without a body keeps
/// its connection (a flood of refused connects costs no new connections); one
/// with a body has it read and thrown away, within bounds, so the answer is
/// read and not lost to a reset, and the connection is reused only when the
/// whole body was read.
async fn refuse(app: &App, req: Request, e: ApiError) -> Response {
    if e.code == ErrorCode::RateLimited {
        hold_back(app).await;
    }
    let mut body = req.into_body();
    if body.is_end_stream() {
        return e.into_response();
    }
    let mut whole = false;
    let too_large = body.size_hint().lower() > app.max_body as u64;
    if let (false, Ok(_draining)) = (too_large, app.caps.drains.try_acquire()) {
        let mut left = app.max_body as u64;
        let _ = tokio::time::timeout(REFUSAL_DRAIN_TIME, async {
            while let Some(Ok(frame)) = body.frame().await {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                left = match left.checked_sub(n) {
                    Some(l) => l,
                    None => return,
                };
            }
            whole = body.is_end_stream();
        })
        .await;
    }
    if whole {
        e.into_response()
    } else {
        closing(e.into_response())
    }
}

/// Waits `--refusal-delay-ms` before a `429` leaves, if fewer than 64 are
/// waiting: a flood that ignores `Retry-After` then costs the server a timer
/// per refusal, not a refusal as fast as it can answer.
async fn hold_back(app: &App) {
    if app.caps.refusal_delay.is_zero() {
        return;
    }
    if let Ok(_held) = app.caps.held.try_acquire() {
        tokio::time::sleep(app.caps.refusal_delay).await;
    }
}

fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A body that fails once `sleep` ends before it does, and says so in `timed_out`.
/// Hand-written: tower-http's timeout body restarts its clock at every frame,
/// which a client sending a byte a second never trips.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.timed_out.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new("the body did not arrive in time"))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
