//! A user's spaces and their members (PROTOCOL §3c): what the caller is a
//! member of, creating a shared space, and members managed by a space's
//! owners. The same handling serves the admin routes ([`super::admin`]),
//! with [`Actor::Admin`] for the caller.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::{CreateSpace, Member, MembersList, SetMember, SpacesList};
use marksync::space::Membership;

use super::extract::{query, read_json, QueryParams};
use crate::app::App;
use crate::error::ApiError;
use crate::guard::User;
use crate::poke::Poke;
use crate::store::Actor;

/// The largest body of a membership request.
pub(super) const MAX_BODY: usize = 4096;

/// `GET /v1/spaces`: the caller's spaces and roles.
pub(crate) async fn list(State(app): State<App>, Extension(User(user)): Extension<User>) -> Result<Response, ApiError> {
    let spaces = app.store.spaces_of(&user).await.map_err(|e| ApiError::internal(&e))?;
    let spaces = spaces.into_iter().map(|s| Membership { space: s.space, role: s.role }).collect();
    Ok(Json(SpacesList { spaces }).into_response())
}

/// `POST /v1/spaces`: creates a shared space owned by the caller.
pub(crate) async fn create(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: CreateSpace = read_json(&headers, body, MAX_BODY, "a space").await?;
    if req.owner.as_ref().is_some_and(|o| *o != user) {
        return Err(ApiError::bad_request("owner: a user creates spaces for themself"));
    }
    create_for(&app, &req.space, &user).await
}

/// Creates `space` owned by `owner` and tells the owner's streams.
pub(super) async fn create_for(app: &App, space: &str, owner: &str) -> Result<Response, ApiError> {
    let role = app.store.create_space(space, owner).await?;
    let _ = app.pokes.send(Poke::Members { user: owner.into() });
    Ok(Json(Membership { space: space.to_owned(), role }).into_response())
}

/// `POST /v1/spaces/members`: an owner adds, changes or removes a member.
pub(crate) async fn set(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    set_as(&app, Actor::User(&user), &headers, body).await
}

/// A membership change asked by `actor`; the changed user's streams are told.
pub(super) async fn set_as(app: &App, actor: Actor<'_>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: SetMember = read_json(headers, body, MAX_BODY, "a membership change").await?;
    app.store.set_member(actor, &req.space, &req.user, req.role).await?;
    let _ = app.pokes.send(Poke::Members { user: req.user.as_str().into() });
    Ok(Json(Member { user: req.user, role: req.role }).into_response())
}

/// `GET /v1/spaces/members?space=…`: the members of a space the caller is a member of.
pub(crate) async fn members(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    members_as(&app, Actor::User(&user), q).await
}

/// The members of the space named by `?space=`, as `actor` may see them.
pub(super) async fn members_as(app: &App, actor: Actor<'_>, q: QueryParams) -> Result<Response, ApiError> {
    let q = query(q)?;
    let space = q.get("space").ok_or_else(|| ApiError::bad_request("space is required"))?;
    let list = app.store.members(actor, space).await?;
    let members = list.into_iter().map(|(user, role)| Member { user, role: Some(role) }).collect();
    Ok(Json(MembersList { space: space.clone(), members }).into_response())
}
