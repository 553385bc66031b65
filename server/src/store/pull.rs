//! The pulls: `GET /v1/pull`, the personal space after a cursor (PROTOCOL
//! §4); `POST /v1/pull`, every space a user follows or belongs to, read in
//! one snapshot (§4b) so that it never returns a row of a space the user
//! was not a member of at that moment.

use marksync::protocol::{PullResponse, SpacePage, SpacesPullResponse, MAX_PULL_PAGE_BYTES};
use marksync::space::{self, Role};

use super::conn::{Backend, Conn};
use super::dialect::Pools;
use super::error::DbError;
use super::page::Paged;

/// Up to `limit` changes of `user`'s personal space after `cursor`, in seq order.
pub(crate) async fn personal<D: Backend>(
    pools: &Pools<D>,
    user: &str,
    cursor: u64,
    limit: usize,
) -> Result<PullResponse, DbError> {
    let mut conn = pools.read().await?;
    let page = conn.page(&space::personal(user), cursor, limit, MAX_PULL_PAGE_BYTES).await?.page;
    Ok(PullResponse {
        changes: page.changes,
        cursor: page.cursor,
        has_more: page.has_more,
        now: None,
        schema_version: None,
        schema_tag: None,
    })
}

/// What [`space::plan_pull`] says for `user` following `followed`, at most
/// `limit` changes and [`MAX_PULL_PAGE_BYTES`] of rows over all spaces.
pub(crate) async fn spaces<D: Backend>(
    pools: &Pools<D>,
    user: &str,
    followed: &space::Followed,
    limit: Option<usize>,
) -> Result<SpacesPullResponse, DbError> {
    let mut snap = pools.snapshot().await?;
    let personal = space::personal(user);
    let mut members: Vec<(String, Role, u64)> = Vec::new();
    for m in snap.memberships(user).await? {
        if m.space != personal {
            members.push((m.space, m.role, m.head));
        }
    }
    let personal_head = snap.head(&personal).await?;
    members.push((personal.clone(), Role::Owner, personal_head));
    let plan = space::plan_pull(followed, &members);
    let mut out = SpacesPullResponse {
        personal: Some(personal),
        joined: plan.joined,
        roles: plan.roles,
        left: plan.left,
        ..Default::default()
    };
    read_pages(&mut *snap, plan.read, limit, &mut out).await?;
    Ok(out)
}

/// Reads each `(space, cursor)` of `reads` into `out`, in order, within one
/// pull's budget of `limit` changes: once it is spent, the spaces left are
/// answered empty with `hasMore`.
async fn read_pages<C: Conn>(
    snap: &mut C,
    reads: Vec<(String, u64)>,
    limit: Option<usize>,
    out: &mut SpacesPullResponse,
) -> Result<(), DbError> {
    let mut budget = space::PullBudget::new(limit);
    for (space, cursor) in reads {
        if budget.spent() {
            out.spaces.push(SpacePage { space, changes: Vec::new(), cursor, has_more: true });
            out.has_more = true;
            continue;
        }
        let Paged { page, bytes } = snap.page(&space, cursor, budget.changes, budget.bytes).await?;
        budget.take(page.changes.len(), bytes);
        out.has_more |= page.has_more;
        out.spaces.push(page);
    }
    Ok(())
}

/// `POST /v1/admin/pull`: the spaces the app's backend names, from its
/// cursors, in one snapshot and within the same budget as a device's pull. It
/// is no member of anything: nothing is `joined` and no role is told; a space
/// that does not exist is answered in `left`.
pub(crate) async fn any<D: Backend>(
    pools: &Pools<D>,
    followed: &space::Followed,
    limit: Option<usize>,
) -> Result<SpacesPullResponse, DbError> {
    let mut snap = pools.snapshot().await?;
    let mut out = SpacesPullResponse::default();
    let mut reads = Vec::new();
    for (space, follow) in followed.iter() {
        match snap.find_head(space).await? {
            None => out.left.push(space.clone()),
            Some(head) if head > follow.cursor => reads.push((space.clone(), follow.cursor)),
            Some(_) => {}
        }
    }
    read_pages(&mut *snap, reads, limit, &mut out).await?;
    Ok(out)
}
