//! `POST /__faults` (only with `--enable-faults`): sets the faults of the next pushes ([`crate::faults`]).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::extract::read_json;
use crate::app::App;
use crate::error::{not_found, ApiError};
use crate::faults::FaultRequest;

pub(crate) async fn set(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let Some(faults) = &app.faults else {
        return Ok(not_found().await);
    };
    let req: FaultRequest = read_json(&headers, body, 4096, "a fault request").await?;
    let now = faults.set(&req);
    tracing::warn!(?now, "faults set");
    Ok(Json(now).into_response())
}
