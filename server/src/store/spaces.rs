//! Spaces on the server (PROTOCOL §3c): creating them, their members, a
//! user's spaces, once for both dialects.
//!
//! A membership change runs under the space's lock (its heads row, the lock
//! a push of the space takes), so it and every push of the space are ordered
//! one way or the other: an op judged after a revoke commits is refused. The
//! rules — who manages, the last owner, the personal space's user — are the
//! core's ([`marksync::space`]); this module reads and writes what they decide.
//!
//! **Consent.** An owner's adding of another user is an invitation: it is
//! written to `invitations` only, which no pull, event stream or list of the
//! invitee reads, so it costs the invitee nothing until they accept (then it
//! becomes a membership, under the space's lock) or decline. The admin
//! credential adds directly. Any member may leave (`role: null` on
//! themselves), except a shared space's last owner. Every bound of
//! [`SpaceLimits`] is counted under the lock of the space being changed.
//! Listings are reads: a snapshot, never the write lock.

use marksync::space::{self, MemberRefusal, Role};

use super::conn::{Backend, Conn, InvitationsOf, Invited, MemberSpace, Tally};
use super::dialect::Pools;
use super::error::DbError;

/// The bounds of spaces and invitations (flags; docs/server.md). `0`: no bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceLimits {
    /// How long an invitation stays pending, in ms.
    pub invitation_ttl_ms: u64,
    /// Pending invitations one user may have sent.
    pub invitations_per_inviter: usize,
    /// Pending invitations one user may have received.
    pub invitations_per_user: usize,
    /// Shared spaces one user may be a member of (their personal space aside).
    pub spaces_per_user: usize,
    /// Shared spaces one user may own.
    pub owned_per_user: usize,
    /// Members one space may have.
    pub members_per_space: usize,
}

impl SpaceLimits {
    /// The defaults of the flags.
    pub const DEFAULT: SpaceLimits = SpaceLimits {
        invitation_ttl_ms: 7 * 24 * 3600 * 1000,
        invitations_per_inviter: 1000,
        invitations_per_user: 100,
        spaces_per_user: 1000,
        owned_per_user: 100,
        members_per_space: 1000,
    };
}

/// Whether `n` has reached the bound `cap` (`0`: no bound).
fn reached(n: usize, cap: usize) -> bool {
    cap > 0 && n >= cap
}

/// Refuses when `n` has reached `cap`, in `words`.
fn check_cap(n: usize, cap: usize, words: impl FnOnce() -> String) -> Result<(), SpaceError> {
    if reached(n, cap) {
        Err(SpaceError::Cap(words()))
    } else {
        Ok(())
    }
}

/// Refuses a new membership of `user` in `space` that would pass a bound.
async fn check_join<C: Conn>(tx: &mut C, limits: &SpaceLimits, space: &str, user: &str) -> Result<(), SpaceError> {
    tx.lock_users(&[user]).await?;
    let cap = limits.spaces_per_user;
    check_cap(tx.tally(Tally::MemberOf, user).await?, cap, || {
        format!("{user} is in {cap} spaces, the most one user may be in (--max-spaces-per-user)")
    })?;
    let cap = limits.members_per_space;
    check_cap(tx.tally(Tally::MembersIn, space).await?, cap, || {
        format!("space {space} has {cap} members, the most a space may have (--max-members-per-space)")
    })
}

/// Refuses to make `user` the owner of one more space past the bound —
/// at a space's creation, and when a member is made owner or accepts an
/// ownership offered (else promotions would pass the bound a creation keeps).
async fn check_owned<C: Conn>(tx: &mut C, limits: &SpaceLimits, user: &str) -> Result<(), SpaceError> {
    tx.lock_users(&[user]).await?;
    let cap = limits.owned_per_user;
    check_cap(tx.tally(Tally::Owned, user).await?, cap, || {
        format!("{user} owns {cap} spaces, the most one user may own (--max-owned-spaces-per-user)")
    })
}

/// Who asks for a membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    /// A signed-in user: must be an owner of the space.
    User(&'a str),
    /// The app's own backend, with the server's admin credential: may manage every space.
    Admin,
}

impl<'a> Actor<'a> {
    /// Whose turn at the single writer the request takes ([`super::writer`]).
    fn writer(self) -> &'a str {
        match self {
            Actor::User(user) => user,
            Actor::Admin => super::writer::SERVER,
        }
    }
}

/// Why a membership request was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    /// 403 `forbidden`: the caller is not an owner (or not a member) of the space.
    /// The same words whether or not the space exists.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `not_found`: no such space (said to an admin only).
    #[error("no space {0}")]
    NotFound(String),
    /// 409 `conflict`: the name is taken, or the change would leave a space without an owner.
    #[error("{0}")]
    Conflict(String),
    /// 409 `conflict`: a bound of [`SpaceLimits`] is reached (the words name it and its flag).
    #[error("{0}")]
    Cap(String),
    /// 404 `not_found`: the caller has no pending invitation to the space.
    #[error("you have no pending invitation to space {0}")]
    NoInvitation(String),
    /// 400 `bad_request`: a name of the wrong shape, or a change of a personal space's own user.
    #[error("{0}")]
    BadRequest(String),
    /// 500.
    #[error(transparent)]
    Store(#[from] DbError),
}

impl super::dialect::WriteFailure for SpaceError {
    fn db_error(&self) -> Option<&DbError> {
        match self {
            SpaceError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for SpaceError {
    fn from(e: sqlx::Error) -> Self {
        SpaceError::Store(DbError::Db(e))
    }
}

impl From<MemberRefusal> for SpaceError {
    fn from(r: MemberRefusal) -> Self {
        match r {
            MemberRefusal::Forbidden(m) => SpaceError::Forbidden(m),
            MemberRefusal::Conflict(m) => SpaceError::Conflict(m),
            MemberRefusal::BadRequest(m) => SpaceError::BadRequest(m),
        }
    }
}

/// Takes `space`'s lock; whether the space exists (a personal space always
/// does: its heads row is made here if the user never wrote).
async fn lock_space<C: Conn>(tx: &mut C, space: &str) -> Result<bool, DbError> {
    if space::personal_owner(space).is_some() {
        tx.ensure_head(space).await?;
    }
    tx.lock_head(space).await
}

/// `actor`'s right to manage `space`'s members (and to see its pending
/// invitations), under the space's lock or in a snapshot (`exists`: whether it does).
async fn may_manage<C: Conn>(tx: &mut C, actor: Actor<'_>, space: &str, exists: bool) -> Result<(), SpaceError> {
    match actor {
        Actor::Admin if exists => Ok(()),
        Actor::Admin => Err(SpaceError::NotFound(space.to_owned())),
        Actor::User(user) => {
            let stored = if exists { tx.member(space, user).await? } else { None };
            if space::manages_members(space::role_of(user, space, stored)) {
                Ok(())
            } else {
                Err(space::not_an_owner(space).into())
            }
        }
    }
}

/// Creates the shared space `space` owned by `owner` (a user creates for
/// themself; an admin names the owner). Asking again for the same owner is
/// answered the same (a retried request); a name taken by another is a conflict.
pub(crate) async fn create<D: Backend>(
    pools: &Pools<D>,
    limits: &SpaceLimits,
    space: &str,
    owner: &str,
) -> Result<Role, SpaceError> {
    space::check_shared_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = pools.write_as(owner).await?;
    if tx.insert_space(space, owner).await? {
        check_owned(&mut *tx, limits, owner).await?;
        check_join(&mut *tx, limits, space, owner).await?;
        tx.ensure_head(space).await?;
        tx.set_member(space, owner, Some(Role::Owner)).await?;
    } else {
        tx.lock_head(space).await?;
        if tx.member(space, owner).await? != Some(Role::Owner) {
            return Err(SpaceError::Conflict(format!("a space named {space} exists already")));
        }
    }
    tx.announce(&crate::poke::Poke::Members { user: owner.into(), space: space.into() }).await?;
    tx.commit().await?;
    Ok(Role::Owner)
}

/// What a membership request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// Nothing was to change.
    Nothing,
    /// The membership changed: the user's streams are told.
    Member,
    /// An invitation was written (or withdrawn): nobody is told.
    Invitation,
}

/// Sets `user`'s role in `space` (`None`: removes the user), as `actor`,
/// by the rules of [`space::check_member_change`]. Idempotent. A user adding
/// someone who is not a member invites them (`None` withdraws the
/// invitation); a member removing themself leaves.
pub(crate) async fn set_member<D: Backend>(
    pools: &Pools<D>,
    limits: &SpaceLimits,
    actor: Actor<'_>,
    space: &str,
    user: &str,
    role: Option<Role>,
) -> Result<Changed, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    space::check_user(user).map_err(|p| SpaceError::BadRequest(format!("user: {p}")))?;
    // What no stored role changes (the personal space's own user) is refused
    // before anything is read.
    space::check_member_change(space, user, None, None, 0)?;
    let mut tx = pools.write_as(actor.writer()).await?;
    let exists = lock_space(&mut *tx, space).await?;
    let before = if exists { tx.member(space, user).await? } else { None };
    let leaving = actor == Actor::User(user) && role.is_none();
    if !leaving {
        may_manage(&mut *tx, actor, space, exists).await?;
    }
    if let (Actor::User(by), None) = (actor, before) {
        // Not a member: an invitation, or its withdrawal (or, leaving, nothing).
        let now = crate::clock::now_ms_db();
        match role {
            None if leaving => return Ok(Changed::Nothing),
            None => tx.uninvite(space, user).await?,
            Some(r) => invite(&mut *tx, limits, space, user, r, by, now).await?,
        }
        tx.commit().await?;
        return Ok(Changed::Invitation);
    }
    // Only an owner's change needs the count of owners.
    let owners = if before == Some(Role::Owner) { tx.owners(space).await? } else { 0 };
    if !space::check_member_change(space, user, before, role, owners)? {
        return Ok(Changed::Nothing);
    }
    if before.is_none() {
        check_join(&mut *tx, limits, space, user).await?;
        tx.uninvite(space, user).await?;
    }
    if role == Some(Role::Owner) && before != Some(Role::Owner) {
        check_owned(&mut *tx, limits, user).await?;
    }
    if space::withdraws_invitations(before, role) {
        tx.uninvite_by(space, user).await?;
    }
    tx.set_member(space, user, role).await?;
    tx.announce(&crate::poke::Poke::Members { user: user.into(), space: space.into() }).await?;
    tx.commit().await?;
    Ok(Changed::Member)
}

/// Writes `by`'s invitation of `user` to `space` as `role`, within the bounds.
async fn invite<C: Conn>(
    tx: &mut C,
    limits: &SpaceLimits,
    space: &str,
    user: &str,
    role: Role,
    by: &str,
    now: i64,
) -> Result<(), SpaceError> {
    tx.lock_users(&[user, by]).await?;
    tx.drop_expired(user, by, now).await?;
    // Sending a pending invitation again refreshes it; it is not counted twice.
    if tx.invitation(space, user, now).await?.is_none() {
        let cap = limits.invitations_per_inviter;
        check_cap(tx.pending(by, true, now).await?, cap, || {
            format!("you have {cap} invitations pending, the most one user may send (--max-invitations-per-inviter)")
        })?;
        let cap = limits.invitations_per_user;
        check_cap(tx.pending(user, false, now).await?, cap, || {
            format!("{user} has {cap} invitations pending, the most one user may receive (--max-invitations-per-user)")
        })?;
        let cap = limits.members_per_space;
        check_cap(tx.tally(Tally::MembersIn, space).await?, cap, || {
            format!("space {space} has {cap} members, the most a space may have (--max-members-per-space)")
        })?;
    }
    let ttl = i64::try_from(limits.invitation_ttl_ms).unwrap_or(i64::MAX);
    tx.invite(space, user, role, by, now.saturating_add(ttl)).await?;
    Ok(())
}

/// `user` accepts their invitation to `space`: a membership with the role
/// offered, under the space's lock. Accepting again, once a member, answers the membership.
pub(crate) async fn accept<D: Backend>(
    pools: &Pools<D>,
    limits: &SpaceLimits,
    user: &str,
    space: &str,
) -> Result<Role, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = pools.write_as(user).await?;
    let exists = lock_space(&mut *tx, space).await?;
    let stored = if exists { tx.member(space, user).await? } else { None };
    if let Some(role) = space::role_of(user, space, stored) {
        return Ok(role);
    }
    let now = crate::clock::now_ms_db();
    let Some((role, by)) = (if exists { tx.invitation(space, user, now).await? } else { None }) else {
        return Err(SpaceError::NoInvitation(space.to_owned()));
    };
    // Sent by an owner no longer one before their invitations were
    // withdrawn with their role (stored by an older server): lapsed now.
    let inviter = tx.member(space, &by).await?;
    if !space::invitation_stands(space::role_of(&by, space, inviter)) {
        tx.uninvite(space, user).await?;
        tx.commit().await?;
        return Err(SpaceError::NoInvitation(space.to_owned()));
    }
    check_join(&mut *tx, limits, space, user).await?;
    if role == Role::Owner {
        check_owned(&mut *tx, limits, user).await?;
    }
    tx.uninvite(space, user).await?;
    tx.set_member(space, user, Some(role)).await?;
    tx.announce(&crate::poke::Poke::Members { user: user.into(), space: space.into() }).await?;
    tx.commit().await?;
    Ok(role)
}

/// `user` declines their invitation to `space` (none pending: nothing happens).
pub(crate) async fn decline<D: Backend>(pools: &Pools<D>, user: &str, space: &str) -> Result<(), SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = pools.write_as(user).await?;
    tx.uninvite(space, user).await?;
    tx.commit().await?;
    Ok(())
}

/// Up to `limit` of `user`'s pending invitations, to spaces named after `after`.
pub(crate) async fn invitations<D: Backend>(
    pools: &Pools<D>,
    user: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<Invited>, DbError> {
    let mut conn = pools.read().await?;
    conn.invitations(InvitationsOf::User, user, after, crate::clock::now_ms_db(), limit).await
}

/// Up to `limit` of the pending invitations to `space`, of invitees after
/// `after`: for its owners (who send and withdraw them) or an admin. A
/// read: a snapshot, no lock.
pub(crate) async fn invitations_to<D: Backend>(
    pools: &Pools<D>,
    actor: Actor<'_>,
    space: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<Invited>, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut snap = pools.snapshot().await?;
    let exists = space::personal_owner(space).is_some() || snap.space_exists(space).await?;
    may_manage(&mut *snap, actor, space, exists).await?;
    let list = snap.invitations(InvitationsOf::Space, space, after, crate::clock::now_ms_db(), limit).await?;
    snap.commit().await?;
    Ok(list)
}

/// Up to `limit` members of `space` listed after the user `after`, for any
/// member of it (or an admin): a personal space lists its user as owner
/// first, the others follow by user id. A read: a snapshot, no lock.
pub(crate) async fn members<D: Backend>(
    pools: &Pools<D>,
    actor: Actor<'_>,
    space: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, Role)>, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut snap = pools.snapshot().await?;
    let personal = space::personal_owner(space);
    let exists = personal.is_some() || snap.space_exists(space).await?;
    match actor {
        Actor::Admin if !exists => return Err(SpaceError::NotFound(space.to_owned())),
        Actor::Admin => {}
        Actor::User(user) => {
            let stored = if exists { snap.member(space, user).await? } else { None };
            if space::role_of(user, space, stored).is_none() {
                return Err(space::not_a_member(space).into());
            }
        }
    }
    let mut list = snap.list_members(space, after, limit).await?;
    snap.commit().await?;
    if let Some(owner) = personal {
        // The personal space's user sorts first, on the first page only.
        list.retain(|(u, _)| u != owner);
        if after.is_empty() {
            list = space::listed_members(space, list);
            list.truncate(limit);
        }
    }
    Ok(list)
}

/// `space`'s head if `user` is a member of it now (a read: two primary-key lookups).
pub(crate) async fn member_head<D: Backend>(pools: &Pools<D>, user: &str, space: &str) -> Result<Option<u64>, DbError> {
    let mut conn = pools.read().await?;
    // A personal space is shared through stored memberships too; only its own user needs none.
    let stored = if space::personal_owner(space) == Some(user) { None } else { conn.member(space, user).await? };
    match space::role_of(user, space, stored) {
        Some(_) => Ok(Some(conn.head(space).await?)),
        None => Ok(None),
    }
}

/// Every space `user` is a member of, with the role and the head: the
/// personal space first, then the others in byte order of their names.
pub(crate) async fn of<D: Backend>(pools: &Pools<D>, user: &str) -> Result<Vec<MemberSpace>, DbError> {
    let mut conn = pools.read().await?;
    let personal = space::personal(user);
    let head = conn.head(&personal).await?;
    let mut rest: Vec<MemberSpace> =
        conn.memberships(user).await?.into_iter().filter(|m| m.space != personal).collect();
    rest.sort_by(|a, b| a.space.cmp(&b.space));
    let mut out = vec![MemberSpace { space: personal, role: Role::Owner, head }];
    out.extend(rest);
    Ok(out)
}

/// A page of `user`'s spaces and roles: the personal space first (on the
/// first page, `after` empty), then the others named after `after`, in byte order.
pub(crate) async fn page_of<D: Backend>(
    pools: &Pools<D>,
    user: &str,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, Role)>, DbError> {
    let mut conn = pools.read().await?;
    let personal = space::personal(user);
    let mut out = Vec::new();
    if after.is_empty() {
        out.push((personal.clone(), Role::Owner));
    }
    let rest = conn.spaces_page(user, after, limit + 1).await?;
    out.extend(rest.into_iter().filter(|(s, _)| *s != personal));
    out.truncate(limit);
    Ok(out)
}

/// A page of every space there is and its head, by name after `after`.
pub(crate) async fn heads_page<D: Backend>(
    pools: &Pools<D>,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, u64)>, DbError> {
    pools.read().await?.heads_page(after, limit).await
}
