//! `GET /v1/schema`: the schema file (PROTOCOL §3b), with an `ETag`; a
//! request whose `If-None-Match` names it gets `304` and no body. Auth, rate
//! limit and per-user caps as pull (the guard).

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::App;

pub(crate) async fn schema(State(app): State<App>, headers: HeaderMap) -> Response {
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
