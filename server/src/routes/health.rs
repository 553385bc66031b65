//! Probes and metrics, for operators: no user auth; `/metrics` asks for
//! `--metrics-token` when set.
//!
//! - `/livez`: the process serves requests. It never touches the database, so
//!   a liveness probe does not restart every replica during a database blip.
//! - `/readyz`: the database can be read **and written** and its migrations
//!   match (see [`crate::ready`]); `503` with the reason otherwise, and while
//!   the server shuts down.
//! - `/healthz`: `/readyz`, under the name older deployments probe.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::error::{ApiError, UNAVAILABLE_RETRY_AFTER};
use crate::metrics::Live;

pub(crate) async fn livez() -> Response {
    (StatusCode::OK, "live\n").into_response()
}

pub(crate) async fn readyz(State(app): State<App>) -> Response {
    let answer =
        if *app.shutdown.borrow() { Err("shutting down".to_owned()) } else { app.readiness.check(&app.store).await };
    match answer {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => {
            tracing::warn!(reason = %why, "not ready");
            let mut resp = (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response();
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_AFTER));
            resp
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
    let mut text = app.metrics.render(&live);
    if let Some(keys) = app.auth.jwks() {
        keys.render(&mut text);
    }
    if let Some(w) = &app.webhook {
        w.render(&mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
