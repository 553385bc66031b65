//! Spaces on the server (PROTOCOL §3c): creating them, their members, a
//! user's spaces, once for both dialects.
//!
//! A membership change runs under the space's lock (its heads row, the lock
//! a push of the space takes), so it and every push of the space are ordered
//! one way or the other: an op judged after a revoke commits is refused. The
//! rules — who manages, the last owner, the personal space's user — are the
//! core's ([`marksync::space`]); this module reads and writes what they decide.

use marksync::space::{self, MemberRefusal, Role};

use super::conn::{Backend, Conn, MemberSpace};
use super::dialect::Pools;
use super::error::DbError;

/// Who asks for a membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    /// A signed-in user: must be an owner of the space.
    User(&'a str),
    /// The app's own backend, with the server's admin credential: may manage every space.
    Admin,
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
    /// 400 `bad_request`: a name of the wrong shape, or a change of a personal space's own user.
    #[error("{0}")]
    BadRequest(String),
    /// 500.
    #[error(transparent)]
    Store(#[from] DbError),
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

/// `actor`'s right to manage `space`'s members, under the space's lock.
async fn may_manage<C: Conn>(tx: &mut C, actor: Actor<'_>, space: &str) -> Result<(), SpaceError> {
    let exists = lock_space(tx, space).await?;
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
pub(crate) async fn create<D: Backend>(pools: &Pools<D>, space: &str, owner: &str) -> Result<Role, SpaceError> {
    space::check_shared_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = pools.write().await?;
    if tx.insert_space(space, owner).await? {
        tx.ensure_head(space).await?;
        tx.set_member(space, owner, Some(Role::Owner)).await?;
    } else {
        tx.lock_head(space).await?;
        if tx.member(space, owner).await? != Some(Role::Owner) {
            return Err(SpaceError::Conflict(format!("a space named {space} exists already")));
        }
    }
    tx.announce(&crate::poke::Poke::Members { user: owner.into() }).await?;
    tx.commit().await?;
    Ok(Role::Owner)
}

/// Sets `user`'s role in `space` (`None`: removes the user), as `actor`,
/// by the rules of [`space::check_member_change`]. Idempotent.
pub(crate) async fn set_member<D: Backend>(
    pools: &Pools<D>,
    actor: Actor<'_>,
    space: &str,
    user: &str,
    role: Option<Role>,
) -> Result<(), SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    space::check_user(user).map_err(|p| SpaceError::BadRequest(format!("user: {p}")))?;
    // What no stored role changes (the personal space's own user) is refused
    // before anything is read.
    space::check_member_change(space, user, None, None, 0)?;
    let mut tx = pools.write().await?;
    may_manage(&mut *tx, actor, space).await?;
    let before = tx.member(space, user).await?;
    // Only an owner's change needs the count of owners.
    let owners = if before == Some(Role::Owner) { tx.owners(space).await? } else { 0 };
    if space::check_member_change(space, user, before, role, owners)? {
        tx.set_member(space, user, role).await?;
        tx.announce(&crate::poke::Poke::Members { user: user.into() }).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// The members of `space`, for any member of it (or an admin): a personal
/// space lists its user as owner first, the others follow by user id.
pub(crate) async fn members<D: Backend>(
    pools: &Pools<D>,
    actor: Actor<'_>,
    space: &str,
) -> Result<Vec<(String, Role)>, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = pools.write().await?;
    let exists = lock_space(&mut *tx, space).await?;
    match actor {
        Actor::Admin if !exists => return Err(SpaceError::NotFound(space.to_owned())),
        Actor::Admin => {}
        Actor::User(user) => {
            let stored = if exists { tx.member(space, user).await? } else { None };
            if space::role_of(user, space, stored).is_none() {
                return Err(space::not_a_member(space).into());
            }
        }
    }
    let mut list = space::listed_members(space, tx.list_members(space).await?);
    tx.commit().await?;
    let first = usize::from(space::personal_owner(space).is_some());
    list[first..].sort_by(|a, b| a.0.cmp(&b.0));
    Ok(list)
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
