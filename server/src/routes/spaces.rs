//! A user's spaces and their members (PROTOCOL §3c): what the caller is a
//! member of, creating a shared space, and members managed by a space's
//! owners — another user by invitation, which they accept or decline — and
//! leaving. The same handling serves the admin routes ([`super::admin`]),
//! with [`Actor::Admin`] for the caller (who adds directly). Every list is
//! paged: `after` (the last entry of the page before) and `limit`.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::space::{Invitation, InvitationsList, MemberChange, SpaceName, MAX_LIST_LIMIT};
use marksync::protocol::{CreateSpace, Member, MembersList, SetMember, SpacesList};
use marksync::space::Membership;

use super::extract::{query, read_json, QueryParams};
use crate::app::App;
use crate::budget::Work;
use crate::error::ApiError;
use crate::guard::User;
use crate::poke::Poke;
use crate::store::{Actor, Changed, Invited};

/// What a membership write costs of its user's ops budget: a transaction of
/// its own, the space's bounds counted under its lock, and a poke to the
/// member's streams; at the default budget, 20 writes a second and 200 at once.
pub(super) const MEMBERSHIP_WRITE_OPS: usize = 50;

/// A list's read work, paid once read: 1 and its entries.
fn listed<T>(app: &App, user: &str, list: Vec<T>) -> Vec<T> {
    app.budgets.charge(Work::Reads, user, 1 + list.len());
    list
}

/// A list's read work, paid by a user once read (an admin pays nothing).
fn listed_as<T>(app: &App, actor: Actor<'_>, list: Vec<T>) -> Vec<T> {
    match actor {
        Actor::User(user) => listed(app, user, list),
        Actor::Admin => list,
    }
}

/// A space's list as the query string asks: `space` (required), and the page.
fn space_page(q: QueryParams) -> Result<(String, String, usize), ApiError> {
    let q = query(q)?;
    let space = q.get("space").cloned().ok_or_else(|| ApiError::bad_request("space is required"))?;
    let (after, limit) = page(&q)?;
    Ok((space, after, limit))
}

/// The largest body of a membership request.
pub(super) const MAX_BODY: usize = 4096;

/// A list's page as the query string asks: `after` (default: from the
/// start) and `limit` (1 to [`MAX_LIST_LIMIT`], the default).
pub(super) fn page(q: &std::collections::HashMap<String, String>) -> Result<(String, usize), ApiError> {
    let after = q.get("after").cloned().unwrap_or_default();
    let limit = match q.get("limit") {
        None => MAX_LIST_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=MAX_LIST_LIMIT).contains(l))
            .ok_or_else(|| ApiError::bad_request(format!("limit: must be 1 to {MAX_LIST_LIMIT}")))?,
    };
    Ok((after, limit))
}

/// `GET /v1/spaces?after=&limit=`: a page of the caller's spaces and roles, the personal space first.
pub(crate) async fn list(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let (after, limit) = page(&query(q)?)?;
    let spaces = app.store.spaces_page(&user, &after, limit).await?;
    let spaces = listed(&app, &user, spaces);
    let spaces = spaces.into_iter().map(|(space, role)| Membership { space, role }).collect();
    Ok(Json(SpacesList { spaces }).into_response())
}

/// `GET /v1/invitations?after=&limit=`: a page of the caller's pending invitations, by space name.
pub(crate) async fn invitations(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let (after, limit) = page(&query(q)?)?;
    let list = app.store.invitations(&user, &after, limit).await?;
    Ok(invitations_list(listed(&app, &user, list), Invitation::for_invitee))
}

/// A listing of invitations as the wire spells it, each entry as `seen` from its side.
fn invitations_list(list: Vec<Invited>, seen: fn(Invitation) -> Invitation) -> Response {
    let invitations = list
        .into_iter()
        .map(|i| {
            seen(Invitation {
                space: i.space,
                user: i.user,
                role: i.role,
                from: i.from,
                expires_at: u64::try_from(i.expires_at).unwrap_or(0),
            })
        })
        .collect();
    Json(InvitationsList { invitations }).into_response()
}

/// `GET /v1/spaces/invitations?space=…&after=&limit=`: a page of the
/// pending invitations to a space the caller owns, by invitee.
pub(crate) async fn invitations_to(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    invitations_to_as(&app, Actor::User(&user), q).await
}

/// The pending invitations to the space named by `?space=`, as `actor` may see them.
pub(super) async fn invitations_to_as(app: &App, actor: Actor<'_>, q: QueryParams) -> Result<Response, ApiError> {
    let (space, after, limit) = space_page(q)?;
    let list = app.store.invitations_to(actor, &space, &after, limit).await?;
    Ok(invitations_list(listed_as(app, actor, list), |i| i))
}

/// `POST /v1/invitations/accept`: the caller joins a space they are invited to.
pub(crate) async fn accept(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SpaceName = read_json(&headers, body, MAX_BODY, "a space").await?;
    app.budgets.take(Work::Ops, &user, MEMBERSHIP_WRITE_OPS, &app.metrics)?;
    let role = app.store.accept(&user, &req.space).await?;
    app.pokes.send(Poke::Members { user: user.as_str().into(), space: req.space.as_str().into() });
    Ok(Json(Membership { space: req.space, role }).into_response())
}

/// `POST /v1/invitations/decline`: the caller refuses an invitation (none pending: the same answer).
pub(crate) async fn decline(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SpaceName = read_json(&headers, body, MAX_BODY, "a space").await?;
    app.budgets.take(Work::Ops, &user, MEMBERSHIP_WRITE_OPS, &app.metrics)?;
    app.store.decline(&user, &req.space).await?;
    Ok(Json(serde_json::json!({ "space": req.space })).into_response())
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
    app.budgets.take(Work::Ops, &user, MEMBERSHIP_WRITE_OPS, &app.metrics)?;
    create_for(&app, &req.space, &user).await
}

/// Creates `space` owned by `owner` and tells the owner's streams.
pub(super) async fn create_for(app: &App, space: &str, owner: &str) -> Result<Response, ApiError> {
    let role = app.store.create_space(space, owner).await?;
    app.pokes.send(Poke::Members { user: owner.into(), space: space.into() });
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

/// `POST /v1/spaces/leave`: the caller leaves a space (as `role: null` on themself).
pub(crate) async fn leave(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SpaceName = read_json(&headers, body, MAX_BODY, "a space").await?;
    app.budgets.take(Work::Ops, &user, MEMBERSHIP_WRITE_OPS, &app.metrics)?;
    if app.store.set_member(Actor::User(&user), &req.space, &user, None).await? == Changed::Member {
        app.pokes.send(Poke::Members { user: user.as_str().into(), space: req.space.as_str().into() });
    }
    Ok(Json(serde_json::json!({ "space": req.space })).into_response())
}

/// A membership change asked by `actor`; the changed user's streams are
/// told (of an invitation, nobody: it costs the invitee nothing).
pub(super) async fn set_as(app: &App, actor: Actor<'_>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req: SetMember = read_json(headers, body, MAX_BODY, "a membership change").await?;
    if let Actor::User(user) = actor {
        app.budgets.take(Work::Ops, user, MEMBERSHIP_WRITE_OPS, &app.metrics)?;
    }
    let changed = app.store.set_member(actor, &req.space, &req.user, req.role).await?;
    if changed == Changed::Member {
        app.pokes.send(Poke::Members { user: req.user.as_str().into(), space: req.space.as_str().into() });
    }
    let invited = changed == Changed::Invitation && req.role.is_some();
    Ok(Json(MemberChange { user: req.user, role: req.role, invited }).into_response())
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
    let (space, after, limit) = space_page(q)?;
    let list = app.store.members(actor, &space, &after, limit).await?;
    let members =
        listed_as(app, actor, list).into_iter().map(|(user, role)| Member { user, role: Some(role) }).collect();
    Ok(Json(MembersList { space, members }).into_response())
}
