//! The routes of the app's own backend (`--admin-token`, checked by
//! [`crate::guard::admin_body`] before these run): creating a space for any owner,
//! managing any space's members, and reading any space — a page of every
//! space and its head, and a pull of the spaces it names, as a device pulls.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use marksync::protocol::{CreateSpace, SpacesPullRequest};
use serde::Serialize;

use super::extract::{for_reader, query, read_json, QueryParams};
use super::pull::finish_spaces;
use super::spaces::{create_for, invitations_to_as, members_as, page, set_as, MAX_BODY};
use crate::app::App;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::store::Actor;

/// `POST /v1/admin/spaces`: creates a space for `owner`.
pub(crate) async fn create(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: CreateSpace = read_json(&headers, body, MAX_BODY, "a space").await?;
    let owner = req.owner.ok_or_else(|| ApiError::bad_request("owner is required"))?;
    marksync::space::check_user(&owner).map_err(|p| ApiError::bad_request(format!("owner: {p}")))?;
    create_for(&app, &req.space, &owner).await
}

/// `POST /v1/admin/spaces/members`: any space's membership.
pub(crate) async fn set(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    set_as(&app, Actor::Admin, &headers, body).await
}

/// `GET /v1/admin/spaces/members?space=…`.
pub(crate) async fn members(State(app): State<App>, q: QueryParams) -> Result<Response, ApiError> {
    members_as(&app, Actor::Admin, q).await
}

/// `GET /v1/admin/spaces/invitations?space=…`: any space's pending invitations.
pub(crate) async fn invitations(State(app): State<App>, q: QueryParams) -> Result<Response, ApiError> {
    invitations_to_as(&app, Actor::Admin, q).await
}

/// `POST /v1/admin/pull`: the body and answer of `POST /v1/pull`, for any
/// spaces named (shared or personal): each from its cursor, in one snapshot,
/// within the same limits. The backend is no member: the answer names no
/// `joined`, `roles` or `personal`; a space that does not exist is in `left`.
pub(crate) async fn pull(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: SpacesPullRequest = read_json(&headers, body, app.max_body, "a pull request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = now_ms();
    let mut answer = app.store.pull_any(&req.spaces, req.limit).await?;
    let pulled = finish_spaces(&app, &mut answer, now);
    app.metrics.pulled(pulled);
    // Cells' notes only when asked for, as a user's pull (`marksync-accept: notes`).
    Ok(Json(for_reader(&headers, answer)).into_response())
}

/// One space of [`spaces`]'s page.
#[derive(Serialize)]
struct SpaceHead {
    space: String,
    head: u64,
}

/// [`spaces`]'s answer.
#[derive(Serialize)]
struct SpaceHeads {
    spaces: Vec<SpaceHead>,
}

/// `GET /v1/admin/spaces?after=&limit=`: a page of every space there is (a
/// personal space once it was written), by name, with its head — where a
/// backend following everything starts its pulls.
pub(crate) async fn spaces(State(app): State<App>, q: QueryParams) -> Result<Response, ApiError> {
    let (after, limit) = page(&query(q)?)?;
    let spaces = app.store.heads_page(&after, limit).await?;
    let spaces = spaces.into_iter().map(|(space, head)| SpaceHead { space, head }).collect();
    Ok(Json(SpaceHeads { spaces }).into_response())
}
