//! The routes of the app's own backend (`--admin-token`, checked by
//! [`crate::auth::admin`] before these run): creating a space for any owner
//! and managing any space's members.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use marksync::protocol::CreateSpace;

use super::extract::{read_json, QueryParams};
use super::spaces::{create_for, members_as, set_as, MAX_BODY};
use crate::app::App;
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
