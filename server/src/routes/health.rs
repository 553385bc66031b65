//! `/healthz` (does the database answer) and `/metrics` (Prometheus text),
//! for operators: no user auth; `/metrics` asks for `--metrics-token` when set.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::ApiError;
use crate::metrics::Live;

pub(crate) async fn healthz(State(app): State<App>) -> Response {
    match app.store.ping().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable\n").into_response()
        }
    }
}

pub(crate) async fn metrics(State(app): State<App>, headers: HeaderMap) -> Response {
    if app.metrics_token.is_set() {
        let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !app.metrics_token.admits(given) {
            let mut resp =
                ApiError::unauthorized("/metrics needs Authorization: Bearer <the metrics token>").into_response();
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    }
    let live = Live { streams_open: app.caps.streams_open(), pools: app.store.pool_stats() };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&live)).into_response()
}
