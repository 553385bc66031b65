//! One space's page of a pull from a stream of its rows in seq order: at
//! most `limit` changes and `budget` bytes of rows, never fewer than one
//! change. The stream is read only as far as the page goes, so big rows
//! past the budget are never loaded.

use futures_util::{Stream, TryStreamExt};
use marksync::protocol::{Change, RowKey, SpacePage};

use super::codec::{decode_row, seq_from_db};
use super::error::DbError;

/// A row as pulled, still as its columns.
pub(crate) struct PulledRow {
    pub table: String,
    pub row_id: String,
    pub fields: String,
    pub marks: String,
    pub seq: i64,
}

/// A page and the bytes of rows it took (what is left of the pull's budget).
pub(crate) struct Paged {
    pub page: SpacePage,
    pub bytes: usize,
}

/// The page of `space` after `cursor` from `rows` (up to `limit + 1` of
/// them: one more tells whether there is more), and the bytes it took.
pub(crate) async fn page_within<S>(
    mut rows: S,
    space: String,
    cursor: u64,
    limit: usize,
    budget: usize,
) -> Result<Paged, DbError>
where
    S: Stream<Item = Result<PulledRow, sqlx::Error>> + Unpin,
{
    let (mut changes, mut bytes, mut has_more) = (Vec::new(), 0usize, false);
    while let Some(r) = rows.try_next().await? {
        let size = r.fields.len() + r.marks.len();
        if changes.len() == limit || !marksync::protocol::page_fits(changes.len(), bytes, size, budget) {
            has_more = true;
            break;
        }
        bytes += size;
        let row = decode_row(&r.fields, &r.marks)?;
        changes.push(Change { key: RowKey::new(r.table, r.row_id), row, seq: seq_from_db(r.seq)? });
    }
    let cursor = changes.last().map_or(cursor, |c| c.seq);
    Ok(Paged { page: SpacePage { space, changes, cursor, has_more }, bytes })
}
