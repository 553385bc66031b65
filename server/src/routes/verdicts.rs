//! `POST /v1/verdicts`: what the server remembers of some opIds (PROTOCOL §3,
//! "asking instead of sending"). Read-only: never judges, writes or takes a seq.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::{VerdictsRequest, VerdictsResponse};

use super::extract::{for_reader, read_json};
use crate::app::App;
use crate::budget::Work;
use crate::error::ApiError;
use crate::guard::User;

pub(crate) async fn verdicts(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: VerdictsRequest = read_json(&headers, body, app.max_body, "a verdicts request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    let limits = app.limits();
    app.budgets.charge(Work::Reads, &user, 1 + req.op_ids.len());
    let verdicts = app.store.verdicts(&app.schema, &user, &req.op_ids, &limits).await?;
    Ok(Json(for_reader(&headers, VerdictsResponse { verdicts, now: Some(limits.now) })).into_response())
}
