//! `POST /v1/verdicts`: what is remembered of some opIds, in the order
//! asked. Read-only: two reads, no lock, no write, no seq; the answer is
//! built by the core's [`marksync::judge::recall`].

use std::collections::{HashMap, HashSet};

use marksync::judge::{recall, Limits, Remembered};
use marksync::protocol::{OpId, RememberedVerdict};
use marksync::schema::Schema;
use marksync::space::SpaceId;

use super::conn::{Backend, Conn};
use super::dialect::{Key, Pools};
use super::error::DbError;

/// The answers for `user`'s `op_ids`, rows as the newest version of `schema` spells them.
pub(crate) async fn verdicts<D: Backend>(
    pools: &Pools<D>,
    schema: &Schema,
    user: &str,
    op_ids: &[OpId],
    limits: &Limits,
) -> Result<Vec<RememberedVerdict>, DbError> {
    let ids: Vec<&str> = op_ids.iter().map(OpId::as_str).collect();
    let personal = marksync::space::personal(user);
    let mut conn = pools.read().await?;
    let saved = conn.recall(user, &ids).await?;
    // A null space with a row is the sender's personal space (verdicts remembered before spaces).
    let mut seen = HashSet::new();
    let keys: Vec<Key<'_>> = saved
        .iter()
        .filter(|r| matches!(r.verdict, Remembered::Rejected { .. }))
        .filter_map(|r| {
            let space = r.space.as_deref().unwrap_or(&personal);
            r.key.as_ref().map(|k| Key { space, table: &k.table, row_id: &k.row_id })
        })
        .filter(|k| seen.insert(*k))
        .collect();
    let rows = if keys.is_empty() { HashMap::new() } else { conn.readable_rows(user, &keys, &personal).await? };
    let saved = saved
        .into_iter()
        .map(|r| {
            let space: SpaceId = r.space.as_deref().unwrap_or(&personal).into();
            (OpId::new(r.op_id), (r.verdict, r.key.map(|k| (space, k))))
        })
        .collect();
    Ok(recall(schema, op_ids, &saved, &rows, limits))
}
