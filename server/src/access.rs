//! What an operator sees of each request: an id, a span, a line in the log
//! and the request's metrics.
//!
//! Every request runs inside an `info` span named `request` with its method,
//! path, request id and — once the guard knows it — user, so every line
//! logged while it is handled (an `internal error` above all) says which
//! request it belongs to. When the answer's head is ready, one `info` line of
//! target `marksync_server::access` says method, path, status, duration,
//! request id and user; for `/v1/events` that is when the stream opens.
//!
//! Paths are logged without their query: `/v1/events?token=…` must not put
//! tokens in logs. No header is logged but `X-Request-Id`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use marksync::protocol::ErrorCode;
use tracing::Instrument;

use crate::app::App;
use crate::guard::User;
use crate::metrics::{method_label, OTHER_ROUTE};

/// The header a request's id comes in and goes back in.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a client; a longer one is replaced.
pub const MAX_REQUEST_ID: usize = 128;

/// The log target of the access lines, to filter them apart (`RUST_LOG=marksync_server::access=off`).
pub const TARGET: &str = "marksync_server::access";

/// The middleware around every route (see the module doc).
pub async fn observe(State(app): State<App>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = request_id(req.headers());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // The router's template, never the path itself: a scanner's paths all land
    // in `other` (the catch-all `/v1/{*rest}` included), so the labels stay few.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .filter(|r| !r.contains("{*"))
        .unwrap_or(OTHER_ROUTE)
        .to_owned();
    let span = tracing::info_span!(
        "request",
        method = %method,
        path = %path,
        request_id = %id,
        user = tracing::field::Empty,
    );
    let mut resp = next.run(req).instrument(span).await;
    let took = start.elapsed();
    let status = resp.status().as_u16();
    if let Some(code) = resp.extensions().get::<ErrorCode>() {
        app.metrics.error(*code);
    }
    app.metrics.request(&route, method_label(&method), status, took);
    let user = resp.extensions().get::<User>().map(|User(u)| tracing::field::display(u));
    tracing::info!(
        target: TARGET,
        method = %method,
        path = %path,
        status,
        duration_ms = took.as_micros() as f64 / 1000.0,
        request_id = %id,
        user,
        "request"
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

/// The client's `X-Request-Id` when it is one we can log and send back as it
/// is (1 to [`MAX_REQUEST_ID`] printable ASCII characters, no spaces), else a new one.
fn request_id(headers: &HeaderMap) -> String {
    let given = headers.get(&REQUEST_ID).and_then(|v| v.to_str().ok()).filter(|v| sane(v));
    match given {
        Some(v) => v.to_owned(),
        None => new_request_id(),
    }
}

fn sane(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID && id.bytes().all(|b| b.is_ascii_graphic())
}

/// `<process>-<n>` in hex: a prefix drawn once per process (so two servers,
/// or one restarted, do not hand out the same ids) and a counter.
fn new_request_id() -> String {
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // The standard library's hasher keys are random per process: randomness without a dependency.
    let prefix = *PREFIX.get_or_init(|| RandomState::new().hash_one(std::process::id()) as u32);
    format!("{prefix:08x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sane_id_is_kept_and_any_other_replaced() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(REQUEST_ID, HeaderValue::from_str(v).unwrap());
            request_id(&h)
        };
        assert_eq!(with("abc-123_XYZ.0"), "abc-123_XYZ.0");
        assert_eq!(with(&"a".repeat(128)), "a".repeat(128));
        for bad in ["", "has space", &"a".repeat(129), "tab\there"] {
            let id = with(bad);
            assert_ne!(id, bad);
            assert!(sane(&id), "{id}");
        }
        let (a, b) = (request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
        assert_ne!(a, b);
        assert_eq!(a.split('-').next(), b.split('-').next(), "one prefix per process");
    }
}
