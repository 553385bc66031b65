//! Spaces over HTTP (PROTOCOL §3c, §4b): the pull of every followed space,
//! the user's spaces, and membership managed by a space's owners or by the
//! app's own backend with the admin credential.
//!
//! | route | who | what |
//! |---|---|---|
//! | `POST /v1/pull` | user | every followed space, joined/left/roles |
//! | `GET /v1/spaces` | user | the user's spaces and roles |
//! | `POST /v1/spaces` | user | create a shared space, owned by the caller |
//! | `GET /v1/spaces/members?space=` | member | who is a member, with roles |
//! | `POST /v1/spaces/members` | owner | add, change or (`role: null`) remove a member |
//! | `POST /v1/admin/spaces` | admin | create a space for an owner |
//! | `GET`/`POST /v1/admin/spaces/members` | admin | as above, for any space |

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::{CreateSpace, ErrorCode, Member, MembersList, SetMember, SpacesList, SpacesPullRequest};
use marksync::space::Membership;

use crate::error::ApiError;
use crate::guard::User;
use crate::store::{Actor, SpaceError};
use crate::{App, Poke};

impl From<SpaceError> for ApiError {
    fn from(e: SpaceError) -> Self {
        match e {
            SpaceError::Forbidden(m) => ApiError::new(ErrorCode::Forbidden, m),
            SpaceError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            SpaceError::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
            SpaceError::BadRequest(m) => ApiError::bad_request(m),
            SpaceError::Store(e) => ApiError::internal(&e),
        }
    }
}

/// `POST /v1/pull`: every space the device follows, in one snapshot.
pub(crate) async fn pull(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SpacesPullRequest = crate::http::read_json(&headers, body, app.max_body, "a pull request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = crate::store::now_ms_u64();
    let mut answer = app.store.pull_spaces(&user, &req.spaces, req.limit).await.map_err(|e| ApiError::internal(&e))?;
    answer.now = Some(now);
    answer.schema_version = Some(app.schema.version);
    let mut pulled = 0;
    for page in &mut answer.spaces {
        pulled += page.changes.len();
        crate::http::upgrade_changes(&app, &mut page.changes);
    }
    app.metrics.pulled(pulled);
    Ok(Json(answer).into_response())
}

/// `GET /v1/spaces`: the caller's spaces and roles.
pub(crate) async fn list(State(app): State<App>, Extension(User(user)): Extension<User>) -> Result<Response, ApiError> {
    let spaces = app.store.spaces_of(&user).await.map_err(|e| ApiError::internal(&e))?;
    let spaces = spaces.into_iter().map(|(space, role, _)| Membership { space, role }).collect();
    Ok(Json(SpacesList { spaces }).into_response())
}

/// `POST /v1/spaces`: creates a shared space owned by the caller.
pub(crate) async fn create(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: CreateSpace = crate::http::read_json(&headers, body, 4096, "a space").await?;
    if req.owner.as_ref().is_some_and(|o| *o != user) {
        return Err(ApiError::bad_request("owner: a user creates spaces for themself"));
    }
    create_for(&app, &req.space, &user).await
}

async fn create_for(app: &App, space: &str, owner: &str) -> Result<Response, ApiError> {
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

async fn set_as(app: &App, actor: Actor<'_>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: SetMember = crate::http::read_json(headers, body, 4096, "a membership change").await?;
    app.store.set_member(actor, &req.space, &req.user, req.role).await?;
    let _ = app.pokes.send(Poke::Members { user: req.user.as_str().into() });
    Ok(Json(Member { user: req.user, role: req.role }).into_response())
}

/// `GET /v1/spaces/members?space=…`: the members of a space the caller is a member of.
pub(crate) async fn members(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    members_as(&app, Actor::User(&user), q).await
}

async fn members_as(
    app: &App,
    actor: Actor<'_>,
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = crate::http::query(q)?;
    let space = q.get("space").ok_or_else(|| ApiError::bad_request("space is required"))?;
    let list = app.store.members(actor, space).await?;
    let members = list.into_iter().map(|(user, role)| Member { user, role: Some(role) }).collect();
    Ok(Json(MembersList { space: space.clone(), members }).into_response())
}

/// The middleware of `/v1/admin/…`: 404 unless an admin token is configured,
/// then 401 unless the request carries it.
pub(crate) async fn admin(State(app): State<App>, req: Request, next: Next) -> Response {
    let Some(expected) = app.admin_token.as_deref() else {
        return crate::http::not_found().await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if !given.is_some_and(|g| same_secret(g.as_bytes(), expected.as_bytes())) {
        return ApiError::unauthorized("the admin routes need the admin token").into_response();
    }
    next.run(req).await
}

/// Compares two secrets in time that depends on their lengths only, not on
/// where they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /v1/admin/spaces`: creates a space for `owner`.
pub(crate) async fn admin_create(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: CreateSpace = crate::http::read_json(&headers, body, 4096, "a space").await?;
    let owner = req.owner.ok_or_else(|| ApiError::bad_request("owner is required"))?;
    if owner.is_empty() || owner.len() > 256 || owner.chars().any(char::is_control) {
        return Err(ApiError::bad_request("owner: must be 1 to 256 bytes without control characters"));
    }
    create_for(&app, &req.space, &owner).await
}

/// `POST /v1/admin/spaces/members`: any space's membership.
pub(crate) async fn admin_set(State(app): State<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    set_as(&app, Actor::Admin, &headers, body).await
}

/// `GET /v1/admin/spaces/members?space=…`.
pub(crate) async fn admin_members(
    State(app): State<App>,
    q: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    members_as(&app, Actor::Admin, q).await
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
