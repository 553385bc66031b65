//! Spaces on the server (PROTOCOL §3c, §4b): membership changes and the pull
//! of every followed space, once for both backends.
//!
//! A membership change runs under the space's lock (its heads row, the lock
//! a push of the space takes), so it and every push of the space are ordered
//! one way or the other: an op judged after a revoke commits is refused. A
//! pull reads the user's memberships and the rows in one snapshot, so it
//! never returns a row of a space the user was not a member of at that
//! moment. The rules (who manages, the last owner, the personal space's
//! user) live here; a backend brings only its SQL.

use std::collections::BTreeMap;

use marksync::protocol::{SpacePage, SpacesPullResponse};
use marksync::space::{self, Follow, MemberRefusal, Role};

use super::StoreError;

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
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for SpaceError {
    fn from(e: sqlx::Error) -> Self {
        SpaceError::Store(StoreError::Db(e))
    }
}

/// A membership transaction of a backend: the SQL of each step, all inside
/// the transaction [`MemberBackend::begin_members`] opened.
#[allow(async_fn_in_trait)]
pub(crate) trait MemberTxn: Sized {
    /// Makes `space`'s heads row (its lock) unless it exists.
    async fn ensure_head(&mut self, space: &str) -> Result<(), StoreError>;
    /// Takes `space`'s lock (its heads row, held to the end of the
    /// transaction); whether the row exists.
    async fn lock_head(&mut self, space: &str) -> Result<bool, StoreError>;
    /// Inserts the shared space `space`, created by `owner`, unless the name
    /// is taken; whether it was inserted.
    async fn insert_space(&mut self, space: &str, owner: &str) -> Result<bool, StoreError>;
    /// `user`'s stored role in `space`.
    async fn member(&mut self, space: &str, user: &str) -> Result<Option<Role>, StoreError>;
    /// How many owners `space` has stored.
    async fn owners(&mut self, space: &str) -> Result<i64, StoreError>;
    /// Sets `user`'s role in `space` (`None`: removes the user).
    async fn set(&mut self, space: &str, user: &str, role: Option<Role>) -> Result<(), StoreError>;
    /// Every stored member of `space`, by user id.
    async fn list(&mut self, space: &str) -> Result<Vec<(String, Role)>, StoreError>;
    /// Tells the other server processes that `user`'s memberships changed
    /// (PostgreSQL `NOTIFY`, delivered on commit). Nothing for SQLite.
    async fn announce_member(&mut self, user: &str) -> Result<(), StoreError> {
        let _ = user;
        Ok(())
    }
    /// Commits.
    async fn commit(self) -> Result<(), StoreError>;
}

/// A backend that opens membership transactions.
#[allow(async_fn_in_trait)]
pub(crate) trait MemberBackend {
    /// Its transaction.
    type Txn: MemberTxn;
    /// Opens a write transaction.
    async fn begin_members(&self) -> Result<Self::Txn, StoreError>;
}

/// Takes `space`'s lock; whether the space exists (a personal space always
/// does: its heads row is made here if the user never wrote).
async fn lock_space<T: MemberTxn>(tx: &mut T, space: &str) -> Result<bool, StoreError> {
    if space::personal_owner(space).is_some() {
        tx.ensure_head(space).await?;
    }
    tx.lock_head(space).await
}

/// `actor`'s right to manage `space`'s members, under the space's lock.
async fn may_manage<T: MemberTxn>(tx: &mut T, actor: Actor<'_>, space: &str) -> Result<(), SpaceError> {
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

impl From<MemberRefusal> for SpaceError {
    fn from(r: MemberRefusal) -> Self {
        match r {
            MemberRefusal::Forbidden(m) => SpaceError::Forbidden(m),
            MemberRefusal::Conflict(m) => SpaceError::Conflict(m),
            MemberRefusal::BadRequest(m) => SpaceError::BadRequest(m),
        }
    }
}

/// Creates the shared space `space` owned by `owner` (a user creates for
/// themself; an admin names the owner). Asking again for the same owner is
/// answered the same (a retried request); a name taken by another is a conflict.
pub(crate) async fn create<B: MemberBackend>(backend: &B, space: &str, owner: &str) -> Result<Role, SpaceError> {
    space::check_shared_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = backend.begin_members().await?;
    if tx.insert_space(space, owner).await? {
        tx.ensure_head(space).await?;
        tx.set(space, owner, Some(Role::Owner)).await?;
    } else {
        tx.lock_head(space).await?;
        if tx.member(space, owner).await? != Some(Role::Owner) {
            return Err(SpaceError::Conflict(format!("a space named {space} exists already")));
        }
    }
    tx.announce_member(owner).await?;
    tx.commit().await?;
    Ok(Role::Owner)
}

/// Sets `user`'s role in `space` (`None`: removes the user), as `actor`.
/// Idempotent. The personal space's own user cannot be changed; a shared
/// space keeps at least one owner.
pub(crate) async fn set_member<B: MemberBackend>(
    backend: &B,
    actor: Actor<'_>,
    space: &str,
    user: &str,
    role: Option<Role>,
) -> Result<(), SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    if user.is_empty() || user.len() > 256 || user.chars().any(char::is_control) {
        return Err(SpaceError::BadRequest("user: must be 1 to 256 bytes without control characters".into()));
    }
    if space::personal_owner(space) == Some(user) {
        return Err(SpaceError::BadRequest(format!("{user} owns their personal space {space}; that cannot change")));
    }
    let mut tx = backend.begin_members().await?;
    may_manage(&mut tx, actor, space).await?;
    let before = tx.member(space, user).await?;
    if before == role {
        return Ok(());
    }
    if before == Some(Role::Owner) && space::personal_owner(space).is_none() && tx.owners(space).await? <= 1 {
        return Err(SpaceError::Conflict(format!(
            "{user} is the last owner of space {space}; add another owner first"
        )));
    }
    tx.set(space, user, role).await?;
    tx.announce_member(user).await?;
    tx.commit().await?;
    Ok(())
}

/// The members of `space`, for any member of it (or an admin); a personal
/// space lists its user as owner first.
pub(crate) async fn members<B: MemberBackend>(
    backend: &B,
    actor: Actor<'_>,
    space: &str,
) -> Result<Vec<(String, Role)>, SpaceError> {
    space::check_space(space).map_err(|p| SpaceError::BadRequest(format!("space: {p}")))?;
    let mut tx = backend.begin_members().await?;
    let exists = lock_space(&mut tx, space).await?;
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
    let list = space::listed_members(space, tx.list(space).await?);
    tx.commit().await?;
    Ok(list)
}

/// A read-only snapshot of a backend, for one pull of many spaces.
#[allow(async_fn_in_trait)]
pub(crate) trait PullSnapshot: Sized {
    /// (space, role, head) of every space `user` is a stored member of.
    async fn memberships(&mut self, user: &str) -> Result<Vec<(String, String, i64)>, StoreError>;
    /// The head of one space (0: none).
    async fn head(&mut self, space: &str) -> Result<i64, StoreError>;
    /// Up to `limit` changes of `space` after `cursor`, within `bytes` of rows
    /// (never fewer than one change when there is one).
    async fn page(
        &mut self,
        space: &str,
        cursor: u64,
        limit: usize,
        bytes: usize,
    ) -> Result<(SpacePage, usize), StoreError>;
}

/// A backend that opens pull snapshots.
#[allow(async_fn_in_trait)]
pub(crate) trait PullBackend {
    /// Its snapshot.
    type Snapshot: PullSnapshot;
    /// Opens a read-only transaction that sees one committed state throughout.
    async fn snapshot(&self) -> Result<Self::Snapshot, StoreError>;
}

/// `POST /v1/pull` for `user`: what [`space::plan_pull`] says, read in one
/// snapshot, at most `limit` changes and [`marksync::protocol::MAX_PULL_PAGE_BYTES`]
/// of rows over all spaces.
pub(crate) async fn pull<B: PullBackend>(
    backend: &B,
    user: &str,
    followed: &BTreeMap<String, Follow>,
    limit: Option<usize>,
) -> Result<SpacesPullResponse, StoreError> {
    let mut snap = backend.snapshot().await?;
    let personal = space::personal(user);
    let mut members = Vec::new();
    for (space, role, head) in snap.memberships(user).await? {
        let role = super::stored_role(&role)?;
        if space != personal {
            members.push((space, role, super::codec::seq_from_db(head)?));
        }
    }
    let personal_head = super::codec::seq_from_db(snap.head(&personal).await?)?;
    members.push((personal.clone(), Role::Owner, personal_head));
    let plan = space::plan_pull(followed, &members);
    let mut out = SpacesPullResponse {
        personal: Some(personal),
        joined: plan.joined,
        roles: plan.roles,
        left: plan.left,
        ..Default::default()
    };
    let mut budget = space::PullBudget::new(limit);
    for (space, cursor) in plan.read {
        if budget.spent() {
            out.spaces.push(SpacePage { space, changes: Vec::new(), cursor, has_more: true });
            out.has_more = true;
            continue;
        }
        let (page, bytes) = snap.page(&space, cursor, budget.changes, budget.bytes).await?;
        budget.take(page.changes.len(), bytes);
        out.has_more |= page.has_more;
        out.spaces.push(page);
    }
    Ok(out)
}
