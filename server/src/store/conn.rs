//! Every statement the store runs, written once for both dialects: the SQL
//! the two speak alike is here (`$n` parameters, which SQLite reads too);
//! the rest comes from the dialect's [`Statements`](super::dialect::Statements),
//! and a batch is bound as the dialect binds it. Reads decode what they load
//! into the core's types, so the logic above never sees a column.

use std::collections::HashMap;

use futures_util::TryStreamExt;
use marksync::judge::{Placed, Remembered, RowWrite};
use marksync::protocol::{OpId, Row, RowKey};
use marksync::space::{Role, SpaceId};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, Type};

use super::codec::{decode_row, encode_row, seq_from_db, seq_to_db};
use super::dialect::{Dialect, EncodedRow, Key, VerdictColumns};
use super::error::DbError;
use super::page::{page_within, Paged, PulledRow};
use crate::clock::now_ms_db;

/// The statements both dialects speak alike.
mod sql {
    pub const ENSURE_HEAD: &str = "INSERT INTO heads (space_id, seq) VALUES ($1, 0) ON CONFLICT (space_id) DO NOTHING";
    pub const HEAD: &str = "SELECT seq FROM heads WHERE space_id = $1";
    pub const HEADS_PAGE: &str = "SELECT space_id, seq FROM heads WHERE space_id > $1 ORDER BY space_id LIMIT $2";
    pub const PULL: &str = "SELECT table_name, row_id, fields, marks, seq FROM rows \
         WHERE space_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
    pub const MEMBERSHIPS: &str = "SELECT m.space_id, m.role, COALESCE(h.seq, 0) FROM members m \
         LEFT JOIN heads h ON h.space_id = m.space_id WHERE m.user_id = $1";
    pub const COUNTS: &str = "SELECT (SELECT count(*) FROM verdicts WHERE user_id = $1), \
                (SELECT count(*) FROM rows WHERE space_id = $2), \
                COALESCE((SELECT seq FROM heads WHERE space_id = $2), 0)";
    pub const CREATE_SPACE: &str = "INSERT INTO spaces (space_id, created_by, created_at) VALUES ($1, $2, $3) \
         ON CONFLICT (space_id) DO NOTHING";
    pub const MEMBER: &str = "SELECT role FROM members WHERE space_id = $1 AND user_id = $2";
    pub const OWNERS: &str = "SELECT count(*) FROM members WHERE space_id = $1 AND role = 'owner'";
    pub const SET_MEMBER: &str = "INSERT INTO members (space_id, user_id, role, changed_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (space_id, user_id) DO UPDATE SET role = excluded.role, changed_at = excluded.changed_at";
    pub const REMOVE_MEMBER: &str = "DELETE FROM members WHERE space_id = $1 AND user_id = $2";
    pub const LIST_MEMBERS: &str = "SELECT user_id, role FROM members WHERE space_id = $1 AND user_id > $2 \
         ORDER BY user_id LIMIT $3";
    pub const SPACES_PAGE: &str = "SELECT space_id, role FROM members WHERE user_id = $1 AND space_id > $2 \
         ORDER BY space_id LIMIT $3";
    pub const SPACE_EXISTS: &str = "SELECT count(*) FROM spaces WHERE space_id = $1";
    pub const OWNED: &str = "SELECT count(*) FROM members WHERE user_id = $1 AND role = 'owner'";
    pub const MEMBER_OF: &str = "SELECT count(*) FROM members WHERE user_id = $1";
    pub const MEMBERS_IN: &str = "SELECT count(*) FROM members WHERE space_id = $1";
    pub const INVITATION: &str =
        "SELECT role, invited_by FROM invitations WHERE space_id = $1 AND user_id = $2 AND expires_at > $3";
    pub const INVITE: &str = "INSERT INTO invitations (space_id, user_id, role, invited_by, expires_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (space_id, user_id) DO UPDATE SET role = excluded.role, \
         invited_by = excluded.invited_by, expires_at = excluded.expires_at";
    pub const UNINVITE: &str = "DELETE FROM invitations WHERE space_id = $1 AND user_id = $2";
    pub const UNINVITE_BY: &str = "DELETE FROM invitations WHERE space_id = $1 AND invited_by = $2";
    pub const EXPIRED_FOR: &str = "DELETE FROM invitations WHERE user_id = $1 AND expires_at <= $2";
    pub const EXPIRED_BY: &str = "DELETE FROM invitations WHERE invited_by = $1 AND expires_at <= $2";
    pub const PENDING_FOR: &str = "SELECT count(*) FROM invitations WHERE user_id = $1 AND expires_at > $2";
    pub const PENDING_BY: &str = "SELECT count(*) FROM invitations WHERE invited_by = $1 AND expires_at > $2";
    pub const INVITATIONS_OF: &str = "SELECT space_id, user_id, role, invited_by, expires_at FROM invitations \
         WHERE user_id = $1 AND space_id > $2 AND expires_at > $3 ORDER BY space_id LIMIT $4";
    pub const INVITATIONS_TO: &str = "SELECT space_id, user_id, role, invited_by, expires_at FROM invitations \
         WHERE space_id = $1 AND user_id > $2 AND expires_at > $3 ORDER BY user_id LIMIT $4";
    pub const MIGRATIONS_DONE: &str = "SELECT version FROM marksync_migrations";
    pub const RECORD_MIGRATION: &str = "INSERT INTO marksync_migrations (version, applied_at) VALUES ($1, $2)";
    pub const PING: &str = "SELECT 1";
    pub const SAVEPOINT: &str = "SAVEPOINT marksync_rules";
    pub const UNDO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT marksync_rules; RELEASE SAVEPOINT marksync_rules";
    pub const ENQUEUE_DELIVERY: &str =
        "INSERT INTO deliveries (id, space_id, head, body, created_at) VALUES ($1, $2, $3, $4, $5)";
    pub const ENQUEUE_QUEUE: &str = "INSERT INTO delivery_queues (space_id, next_at, failures) VALUES ($1, $2, 0) \
         ON CONFLICT (space_id) DO NOTHING";
    pub const QUEUED: &str = "SELECT id, head, body, created_at FROM deliveries WHERE space_id = $1 \
         ORDER BY head LIMIT $2";
    pub const DELIVERED: &str = "DELETE FROM deliveries WHERE space_id = $1 AND head <= $2";
    pub const RETRY_QUEUE: &str =
        "UPDATE delivery_queues SET next_at = $2, failures = failures + 1, last_error = $3 WHERE space_id = $1";
    pub const RETRY_QUEUE_AFRESH: &str =
        "UPDATE delivery_queues SET next_at = $2, failures = 1, last_error = $3 WHERE space_id = $1";
    pub const DRAINED_QUEUE: &str =
        "UPDATE delivery_queues SET next_at = $2, failures = 0, last_error = NULL WHERE space_id = $1";
    pub const DROP_EMPTY_QUEUE: &str = "DELETE FROM delivery_queues WHERE space_id = $1 \
         AND NOT EXISTS (SELECT 1 FROM deliveries WHERE space_id = $1)";
    pub const RELEASE_LEASES: &str = "UPDATE delivery_queues SET next_at = $1 WHERE next_at > $1";
    pub const DELIVERY_BACKLOG: &str = "SELECT (SELECT count(*) FROM deliveries), \
         COALESCE((SELECT min(created_at) FROM deliveries), 0), (SELECT count(*) FROM delivery_queues)";
    pub const PROBE: &str = "INSERT INTO marksync_probe (id, at) VALUES (1, $1) \
         ON CONFLICT (id) DO UPDATE SET at = excluded.at";
}

/// The `NOTIFY` channel of pokes between server processes.
pub(crate) const POKES: &str = "marksync_pokes";

/// What a user has stored (verdicts as a sender, rows of the personal space), for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Remembered verdicts.
    pub verdicts: i64,
    /// Stored rows.
    pub rows: i64,
    /// The head seq of the user's personal space (0 when it has none).
    pub head: i64,
}

/// A space a user is a member of, with the role and the space's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpace {
    /// The space.
    pub space: String,
    /// The user's role in it.
    pub role: Role,
    /// Its head seq (0: nothing written yet).
    pub head: u64,
}

/// What [`Conn::tally`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// The spaces a user owns.
    Owned,
    /// The spaces a user is a stored member of.
    MemberOf,
    /// The stored members of a space.
    MembersIn,
}

/// A pending invitation, as its invitee lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invited {
    /// The space.
    pub space: String,
    /// The invitee.
    pub user: String,
    /// The role accepting gives.
    pub role: Role,
    /// Who invited.
    pub from: String,
    /// When it expires (ms since the epoch).
    pub expires_at: i64,
}

/// Whose pending invitations a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvitationsOf {
    /// A user's, as invitee (`GET /v1/invitations`).
    User,
    /// A space's (`GET /v1/spaces/invitations`, for its owners).
    Space,
}

/// A webhook delivery to write in a push's transaction.
#[derive(Debug, Clone)]
pub(crate) struct NewDelivery {
    pub id: String,
    pub space: String,
    /// The space's head after the batch: the delivery's place in its space's order.
    pub head: u64,
    pub body: String,
}

/// A delivery waiting in its space's queue.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Its id (`Marksync-Delivery`), the same on every attempt.
    pub id: String,
    /// Its place in its space's order.
    pub head: u64,
    /// The JSON body, as written at commit.
    pub body: String,
    /// When it was written (ms since the epoch).
    pub created_at: i64,
}

/// A space's queue, leased for sending: its first deliveries, in order.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The space.
    pub space: String,
    /// Failures in a row of its first delivery so far.
    pub failures: i64,
    /// Its first deliveries, in order.
    pub deliveries: Vec<Delivery>,
}

/// How a sender leaves a space's queue it leased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Every delivery sent was answered 2xx: the queue is due again now, or gone when empty.
    Drained,
    /// The delivery after the last delivered failed: try again later.
    Retry {
        /// When (ms).
        next_at: i64,
        /// Why it failed.
        error: String,
        /// Deliveries went through before it: its failures are counted from
        /// none, not on from the queue's — the backoff follows failures in a
        /// row, not every failure since the queue last ran empty.
        afresh: bool,
    },
}

/// The deliveries waiting, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// How many.
    pub pending: u64,
    /// When the oldest was written (ms since the epoch; 0: none).
    pub oldest_ms: i64,
    /// Spaces with deliveries waiting.
    pub queues: u64,
}

/// A saved verdict as recalled for `POST /v1/verdicts`.
pub(crate) struct Recalled {
    pub op_id: String,
    pub verdict: Remembered,
    /// The space a rejection names; null for a sender's personal space
    /// (verdicts remembered before spaces).
    pub space: Option<String>,
    /// The row a rejection names.
    pub key: Option<RowKey>,
}

/// The statements, on one connection (a transaction's, or a pooled reader's).
#[allow(async_fn_in_trait)]
pub(crate) trait Conn: Send {
    /// Makes `space`'s heads row (its lock) unless it exists.
    async fn ensure_head(&mut self, space: &str) -> Result<(), DbError>;
    /// Takes the locks of `spaces` (held to the end of the transaction; with
    /// `lock` false, only for sabotage, none) and returns the heads of those that exist.
    async fn lock_heads(&mut self, spaces: &[&str], lock: bool) -> Result<HashMap<SpaceId, u64>, DbError>;
    /// Takes `space`'s lock; whether it exists.
    async fn lock_head(&mut self, space: &str) -> Result<bool, DbError>;
    /// The stored rows of `keys`, and where their stored versions lie
    /// (empty where rows are rewritten by key).
    async fn load_rows(&mut self, keys: &[Key<'_>]) -> Result<(HashMap<Placed, Row>, Places), DbError>;
    /// `sender`'s saved verdicts of `op_ids`.
    async fn load_verdicts(&mut self, sender: &str, op_ids: &[&str]) -> Result<HashMap<OpId, Remembered>, DbError>;
    /// `sender`'s stored roles in `spaces`.
    async fn load_roles(&mut self, sender: &str, spaces: &[&str]) -> Result<HashMap<SpaceId, Role>, DbError>;
    /// Inserts `sender`'s verdicts, decided now by the server's clock; how
    /// many were inserted. Fewer than sent (none, on PostgreSQL) when one was
    /// remembered already by a writer this one did not wait for: the
    /// transaction must then be rolled back. With `skip_remembered` those are
    /// skipped and the transaction goes on (the per-op judge, which loads no
    /// verdicts first; a sabotaged judge that forgets them).
    async fn remember(
        &mut self,
        sender: &str,
        verdicts: &VerdictColumns,
        skip_remembered: bool,
    ) -> Result<usize, DbError>;
    /// Writes rows, each in its space: inserts the new ones, rewrites the
    /// stored ones where `places` (from [`Conn::load_rows`]) says they lie.
    /// False when a row the judge called new was stored meanwhile, or a
    /// stored one rewritten or removed, by a writer this one did not wait
    /// for: the transaction must be rolled back.
    async fn write_rows(&mut self, writes: &[RowWrite], places: &Places) -> Result<bool, DbError>;
    /// Sets spaces' heads.
    async fn write_heads(&mut self, heads: &[(SpaceId, u64)]) -> Result<(), DbError>;
    /// Sends `payload` to the other server processes on commit (nothing
    /// where one process owns the database); see [`super::dialect::WriteTx::announce`].
    async fn notify(&mut self, payload: &str) -> Result<(), DbError>;
    /// Opens a savepoint whose writes [`Conn::undo_savepoint`] throws away.
    async fn savepoint(&mut self) -> Result<(), DbError>;
    /// Undoes everything since [`Conn::savepoint`], and closes it.
    async fn undo_savepoint(&mut self) -> Result<(), DbError>;
    /// Writes webhook deliveries, and a queue for each space that has none (due now).
    async fn enqueue_deliveries(&mut self, deliveries: &[NewDelivery]) -> Result<(), DbError>;
    /// Leases up to `limit` due queues until `lease_until` (ms): `(space, failures)`.
    async fn claim_queues(&mut self, lease_until: i64, limit: usize) -> Result<Vec<(String, i64)>, DbError>;
    /// The first `limit` deliveries of `space`'s queue, in order.
    async fn queued(&mut self, space: &str, limit: usize) -> Result<Vec<Delivery>, DbError>;
    /// Forgets `space`'s deliveries up to `head`, and settles its queue.
    async fn settle_queue(
        &mut self,
        space: &str,
        delivered_through: Option<u64>,
        settle: &Settle,
    ) -> Result<(), DbError>;
    /// Makes every leased or waiting queue due at `now` (ms).
    async fn release_leases(&mut self, now: i64) -> Result<(), DbError>;
    /// How many deliveries wait, the oldest, in how many queues.
    async fn delivery_backlog(&mut self) -> Result<Backlog, DbError>;
    /// Inserts the shared space `space`, created by `owner`, unless the name is taken; whether it was.
    async fn insert_space(&mut self, space: &str, owner: &str) -> Result<bool, DbError>;
    /// `user`'s stored role in `space`.
    async fn member(&mut self, space: &str, user: &str) -> Result<Option<Role>, DbError>;
    /// How many owners `space` has stored.
    async fn owners(&mut self, space: &str) -> Result<usize, DbError>;
    /// Sets `user`'s role in `space` (`None`: removes the user).
    async fn set_member(&mut self, space: &str, user: &str, role: Option<Role>) -> Result<(), DbError>;
    /// Up to `limit` stored members of `space` whose ids sort after `after`, in byte order.
    async fn list_members(&mut self, space: &str, after: &str, limit: usize) -> Result<Vec<(String, Role)>, DbError>;
    /// Up to `limit` of `user`'s stored memberships in spaces named after `after`, in byte order.
    async fn spaces_page(&mut self, user: &str, after: &str, limit: usize) -> Result<Vec<(String, Role)>, DbError>;
    /// Whether the shared space `space` exists (a plain read: no lock).
    async fn space_exists(&mut self, space: &str) -> Result<bool, DbError>;
    /// A count of the [`Tally`] kind about `of` (a user or a space).
    async fn tally(&mut self, kind: Tally, of: &str) -> Result<usize, DbError>;
    /// `user`'s pending (unexpired at `now`) invitation to `space`: its role and who sent it.
    async fn invitation(&mut self, space: &str, user: &str, now: i64) -> Result<Option<(Role, String)>, DbError>;
    /// Invites `user` to `space` as `role`, by `by`, until `expires_at` (ms); replaces a pending one.
    async fn invite(&mut self, space: &str, user: &str, role: Role, by: &str, expires_at: i64) -> Result<(), DbError>;
    /// Removes `user`'s invitation to `space`, if any.
    async fn uninvite(&mut self, space: &str, user: &str) -> Result<(), DbError>;
    /// Removes every invitation to `space` that `by` sent.
    async fn uninvite_by(&mut self, space: &str, by: &str) -> Result<(), DbError>;
    /// Deletes the invitations of `user` (as invitee) and of `by` (as inviter) expired at `now`.
    async fn drop_expired(&mut self, user: &str, by: &str, now: i64) -> Result<(), DbError>;
    /// Pending invitations of `user` (`by`: false) or sent by `user` (`by`: true) at `now`.
    async fn pending(&mut self, user: &str, by: bool, now: i64) -> Result<usize, DbError>;
    /// Locks `users` (in byte order, so two transactions never wait on each
    /// other) to the end of the transaction, before what they hold across
    /// spaces is counted against a cap.
    async fn lock_users(&mut self, users: &[&str]) -> Result<(), DbError>;
    /// Up to `limit` pending invitations, in byte order after `after`: a
    /// user's (to spaces named after it) or a space's (of invitees after it).
    async fn invitations(
        &mut self,
        of: InvitationsOf,
        name: &str,
        after: &str,
        now: i64,
        limit: usize,
    ) -> Result<Vec<Invited>, DbError>;
    /// Every stored membership of `user`, with the heads.
    async fn memberships(&mut self, user: &str) -> Result<Vec<MemberSpace>, DbError>;
    /// A space's head alone: one primary-key read, never a count (0: none).
    async fn head(&mut self, space: &str) -> Result<u64, DbError>;
    /// A space's head, or `None` when no such space was ever created or written.
    async fn find_head(&mut self, space: &str) -> Result<Option<u64>, DbError>;
    /// A page of every space there is (personal ones once written), with its head, after `after` by name.
    async fn heads_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, u64)>, DbError>;
    /// Up to `limit` changes of `space` after `cursor`, within `budget` bytes of rows.
    async fn page(&mut self, space: &str, cursor: u64, limit: usize, budget: usize) -> Result<Paged, DbError>;
    /// `user`'s saved verdicts of `op_ids`, with the rows rejections name.
    async fn recall(&mut self, user: &str, op_ids: &[&str]) -> Result<Vec<Recalled>, DbError>;
    /// The stored rows of `keys` that `user` may read now (their own
    /// personal space, `personal`, or one they are a member of).
    async fn readable_rows(
        &mut self,
        user: &str,
        keys: &[Key<'_>],
        personal: &str,
    ) -> Result<HashMap<Placed, Row>, DbError>;
    /// What `user` has stored.
    async fn counts(&mut self, user: &str) -> Result<Counts, DbError>;
    /// Whether the database answers.
    async fn ping(&mut self) -> Result<(), DbError>;
    /// Runs a script of statements (a migration).
    async fn run_script(&mut self, script: &'static str) -> Result<(), DbError>;
    /// Writes the readiness probe's row: proof that the database takes writes.
    async fn write_probe(&mut self) -> Result<(), DbError>;
    /// The versions of the migrations applied.
    async fn migrations_done(&mut self) -> Result<Vec<i64>, DbError>;
    /// Records a migration as applied.
    async fn record_migration(&mut self, version: i64) -> Result<(), DbError>;
}

/// A dialect whose connections run every statement: what the logic is written over.
pub(crate) trait Backend: Dialect<Connection: Conn> {}

impl<D: Dialect<Connection: Conn>> Backend for D {}

/// Decodes loaded rows.
fn decoded<'r, T: FromRow<'r, R>, R: sqlx::Row>(rows: &'r [R]) -> Result<Vec<T>, sqlx::Error> {
    rows.iter().map(T::from_row).collect()
}

/// Where the stored versions of loaded rows lie (PostgreSQL: `ctid`), for
/// their update in the same transaction.
pub(crate) type Places = HashMap<Placed, String>;

/// Stored rows as the judge knows them.
fn placed_rows(rows: Vec<(String, String, String, String, String)>) -> Result<HashMap<Placed, Row>, DbError> {
    let mut out = HashMap::with_capacity(rows.len());
    for (space, table, row_id, fields, marks) in rows {
        out.insert((space.into(), RowKey::new(table, row_id)), decode_row(&fields, &marks)?);
    }
    Ok(out)
}

/// Whether a statement failed on a unique key another writer took first.
fn unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// A list's `LIMIT`, as the database binds it.
fn db_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A role as stored in `members.role`.
fn stored_role(role: &str) -> Result<Role, DbError> {
    Role::parse(role).ok_or_else(|| DbError::Corrupt(format!("member role {role:?}")))
}

/// A verdict as stored in its columns.
fn stored_verdict(status: &str, reason: Option<String>, code: Option<String>) -> Result<Remembered, DbError> {
    Remembered::from_columns(status, reason, code).ok_or_else(|| DbError::Corrupt(format!("verdict status {status:?}")))
}

impl<C> Conn for C
where
    C: sqlx::Connection,
    C::Database: Dialect,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    for<'a> &'a str: Encode<'a, C::Database> + Type<C::Database>,
    for<'a> String: Encode<'a, C::Database> + Decode<'a, C::Database> + Type<C::Database>,
    for<'a> i64: Encode<'a, C::Database> + Decode<'a, C::Database> + Type<C::Database>,
    usize: ColumnIndex<<C::Database as Database>::Row>,
{
    async fn ensure_head(&mut self, space: &str) -> Result<(), DbError> {
        sqlx::query(sql::ENSURE_HEAD).bind(space).execute(self).await?;
        Ok(())
    }

    async fn lock_heads(&mut self, spaces: &[&str], lock: bool) -> Result<HashMap<SpaceId, u64>, DbError> {
        #[cfg(feature = "sabotage")]
        let statement = if lock { C::Database::SQL.lock_heads } else { C::Database::SQL.read_heads };
        #[cfg(not(feature = "sabotage"))]
        let statement = {
            let _ = lock;
            C::Database::SQL.lock_heads
        };
        let rows = C::Database::bind_list(sqlx::query(statement), spaces)?.fetch_all(self).await?;
        decoded::<(String, i64), _>(&rows)?.into_iter().map(|(s, h)| Ok((s.into(), seq_from_db(h)?))).collect()
    }

    async fn lock_head(&mut self, space: &str) -> Result<bool, DbError> {
        let head: Option<i64> = sqlx::query_scalar(C::Database::SQL.lock_head).bind(space).fetch_optional(self).await?;
        Ok(head.is_some())
    }

    async fn load_rows(&mut self, keys: &[Key<'_>]) -> Result<(HashMap<Placed, Row>, Places), DbError> {
        let rows = C::Database::bind_keys(sqlx::query(C::Database::SQL.load_rows), keys)?.fetch_all(self).await?;
        let (mut out, mut places) = (HashMap::with_capacity(rows.len()), Places::new());
        type Loaded = (String, String, String, String, String, Option<String>);
        for (space, table, row_id, fields, marks, place) in decoded::<Loaded, _>(&rows)? {
            let placed: Placed = (space.into(), RowKey::new(table, row_id));
            let row = decode_row(&fields, &marks)?;
            if let Some(place) = place {
                places.insert(placed.clone(), place);
            }
            out.insert(placed, row);
        }
        Ok((out, places))
    }

    async fn load_verdicts(&mut self, sender: &str, op_ids: &[&str]) -> Result<HashMap<OpId, Remembered>, DbError> {
        let q = sqlx::query(C::Database::SQL.load_verdicts).bind(sender);
        let rows = C::Database::bind_list(q, op_ids)?.fetch_all(self).await?;
        decoded::<(String, String, Option<String>, Option<String>), _>(&rows)?
            .into_iter()
            .map(|(id, status, reason, code)| Ok((OpId::new(id), stored_verdict(&status, reason, code)?)))
            .collect()
    }

    async fn load_roles(&mut self, sender: &str, spaces: &[&str]) -> Result<HashMap<SpaceId, Role>, DbError> {
        let q = sqlx::query(C::Database::SQL.load_roles).bind(sender);
        let rows = C::Database::bind_list(q, spaces)?.fetch_all(self).await?;
        decoded::<(String, String), _>(&rows)?.into_iter().map(|(s, r)| Ok((s.into(), stored_role(&r)?))).collect()
    }

    async fn remember(
        &mut self,
        sender: &str,
        verdicts: &VerdictColumns,
        skip_remembered: bool,
    ) -> Result<usize, DbError> {
        let statement = if skip_remembered { C::Database::SQL.remember_or_skip } else { C::Database::SQL.remember };
        let q = sqlx::query(statement).bind(sender);
        match C::Database::bind_verdicts(q, verdicts)?.bind(now_ms_db()).execute(self).await {
            Ok(done) => Ok(usize::try_from(C::Database::rows_affected(&done)).unwrap_or(usize::MAX)),
            Err(e) if unique_violation(&e) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    async fn write_rows(&mut self, writes: &[RowWrite], places: &Places) -> Result<bool, DbError> {
        let update = C::Database::SQL.update_rows;
        let (mut new, mut stored) = (Vec::with_capacity(writes.len()), Vec::new());
        for w in writes {
            let (fields, marks) = encode_row(&w.row)?;
            let key = Key { space: &w.space, table: &w.key.table, row_id: &w.key.row_id };
            let mut row = EncodedRow { key, fields, marks, seq: seq_to_db(w.seq)?, place: None };
            if w.new || update.is_none() {
                new.push(row);
            } else {
                // A row not loaded in this transaction (never, from the judge)
                // has no place: the update misses it, and the push is judged again.
                row.place = places.get(&(w.space.clone(), w.key.clone())).map(String::as_str);
                stored.push(row);
            }
        }
        if !new.is_empty() {
            match C::Database::bind_rows(sqlx::query(C::Database::SQL.insert_rows), &new)?.execute(&mut *self).await {
                Ok(_) => {}
                Err(e) if unique_violation(&e) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        if let (Some(update), false) = (update, stored.is_empty()) {
            let q = C::Database::bind_places(C::Database::bind_rows(sqlx::query(update), &stored)?, &stored)?;
            let done = q.execute(self).await?;
            if C::Database::rows_affected(&done) != stored.len() as u64 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn write_heads(&mut self, heads: &[(SpaceId, u64)]) -> Result<(), DbError> {
        let heads = heads.iter().map(|(s, h)| Ok((&**s, seq_to_db(*h)?))).collect::<Result<Vec<_>, DbError>>()?;
        C::Database::bind_heads(sqlx::query(C::Database::SQL.write_heads), &heads)?.execute(self).await?;
        Ok(())
    }

    async fn notify(&mut self, payload: &str) -> Result<(), DbError> {
        if let Some(notify) = C::Database::SQL.notify {
            sqlx::query(notify).bind(POKES).bind(payload).execute(self).await?;
        }
        Ok(())
    }

    async fn savepoint(&mut self) -> Result<(), DbError> {
        sqlx::raw_sql(sql::SAVEPOINT).execute(self).await?;
        Ok(())
    }

    async fn undo_savepoint(&mut self) -> Result<(), DbError> {
        // One round trip for both.
        sqlx::raw_sql(sql::UNDO_SAVEPOINT).execute(self).await?;
        Ok(())
    }

    async fn enqueue_deliveries(&mut self, deliveries: &[NewDelivery]) -> Result<(), DbError> {
        let now = now_ms_db();
        for d in deliveries {
            sqlx::query(sql::ENQUEUE_DELIVERY)
                .bind(d.id.as_str())
                .bind(d.space.as_str())
                .bind(seq_to_db(d.head)?)
                .bind(d.body.as_str())
                .bind(now)
                .execute(&mut *self)
                .await?;
            sqlx::query(sql::ENQUEUE_QUEUE).bind(d.space.as_str()).bind(now).execute(&mut *self).await?;
        }
        Ok(())
    }

    async fn claim_queues(&mut self, lease_until: i64, limit: usize) -> Result<Vec<(String, i64)>, DbError> {
        let rows = sqlx::query(C::Database::SQL.claim_deliveries)
            .bind(lease_until)
            .bind(now_ms_db())
            .bind(db_limit(limit))
            .fetch_all(self)
            .await?;
        Ok(decoded::<(String, i64), _>(&rows)?)
    }

    async fn queued(&mut self, space: &str, limit: usize) -> Result<Vec<Delivery>, DbError> {
        let rows = sqlx::query(sql::QUEUED).bind(space).bind(db_limit(limit)).fetch_all(self).await?;
        decoded::<(String, i64, String, i64), _>(&rows)?
            .into_iter()
            .map(|(id, head, body, created_at)| Ok(Delivery { id, head: seq_from_db(head)?, body, created_at }))
            .collect()
    }

    async fn settle_queue(
        &mut self,
        space: &str,
        delivered_through: Option<u64>,
        settle: &Settle,
    ) -> Result<(), DbError> {
        if let Some(head) = delivered_through {
            sqlx::query(sql::DELIVERED).bind(space).bind(seq_to_db(head)?).execute(&mut *self).await?;
        }
        match settle {
            Settle::Retry { next_at, error, afresh } => {
                sqlx::query(if *afresh { sql::RETRY_QUEUE_AFRESH } else { sql::RETRY_QUEUE })
                    .bind(space)
                    .bind(*next_at)
                    .bind(error.as_str())
                    .execute(&mut *self)
                    .await?;
            }
            Settle::Drained => {
                sqlx::query(sql::DRAINED_QUEUE).bind(space).bind(now_ms_db()).execute(&mut *self).await?;
                sqlx::query(sql::DROP_EMPTY_QUEUE).bind(space).execute(&mut *self).await?;
            }
        }
        Ok(())
    }

    async fn release_leases(&mut self, now: i64) -> Result<(), DbError> {
        sqlx::query(sql::RELEASE_LEASES).bind(now).execute(self).await?;
        Ok(())
    }

    async fn delivery_backlog(&mut self) -> Result<Backlog, DbError> {
        let (pending, oldest_ms, queues): (i64, i64, i64) =
            sqlx::query_as(sql::DELIVERY_BACKLOG).fetch_one(self).await?;
        Ok(Backlog {
            pending: u64::try_from(pending).unwrap_or(0),
            oldest_ms,
            queues: u64::try_from(queues).unwrap_or(0),
        })
    }

    async fn insert_space(&mut self, space: &str, owner: &str) -> Result<bool, DbError> {
        let done = sqlx::query(sql::CREATE_SPACE).bind(space).bind(owner).bind(now_ms_db()).execute(self).await?;
        Ok(C::Database::rows_affected(&done) > 0)
    }

    async fn member(&mut self, space: &str, user: &str) -> Result<Option<Role>, DbError> {
        let role: Option<String> = sqlx::query_scalar(sql::MEMBER).bind(space).bind(user).fetch_optional(self).await?;
        role.as_deref().map(stored_role).transpose()
    }

    async fn owners(&mut self, space: &str) -> Result<usize, DbError> {
        let n: i64 = sqlx::query_scalar(sql::OWNERS).bind(space).fetch_one(self).await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn set_member(&mut self, space: &str, user: &str, role: Option<Role>) -> Result<(), DbError> {
        let q = match role {
            Some(r) => sqlx::query(sql::SET_MEMBER).bind(space).bind(user).bind(r.as_str()).bind(now_ms_db()),
            None => sqlx::query(sql::REMOVE_MEMBER).bind(space).bind(user),
        };
        q.execute(self).await?;
        Ok(())
    }

    async fn list_members(&mut self, space: &str, after: &str, limit: usize) -> Result<Vec<(String, Role)>, DbError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as(sql::LIST_MEMBERS).bind(space).bind(after).bind(db_limit(limit)).fetch_all(self).await?;
        rows.into_iter().map(|(u, r)| Ok((u, stored_role(&r)?))).collect()
    }

    async fn spaces_page(&mut self, user: &str, after: &str, limit: usize) -> Result<Vec<(String, Role)>, DbError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as(sql::SPACES_PAGE).bind(user).bind(after).bind(db_limit(limit)).fetch_all(self).await?;
        rows.into_iter().map(|(s, r)| Ok((s, stored_role(&r)?))).collect()
    }

    async fn space_exists(&mut self, space: &str) -> Result<bool, DbError> {
        let n: i64 = sqlx::query_scalar(sql::SPACE_EXISTS).bind(space).fetch_one(self).await?;
        Ok(n > 0)
    }

    async fn tally(&mut self, kind: Tally, of: &str) -> Result<usize, DbError> {
        let statement = match kind {
            Tally::Owned => sql::OWNED,
            Tally::MemberOf => sql::MEMBER_OF,
            Tally::MembersIn => sql::MEMBERS_IN,
        };
        let n: i64 = sqlx::query_scalar(statement).bind(of).fetch_one(self).await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn invitation(&mut self, space: &str, user: &str, now: i64) -> Result<Option<(Role, String)>, DbError> {
        let found: Option<(String, String)> =
            sqlx::query_as(sql::INVITATION).bind(space).bind(user).bind(now).fetch_optional(self).await?;
        found.map(|(role, by)| Ok((stored_role(&role)?, by))).transpose()
    }

    async fn invite(&mut self, space: &str, user: &str, role: Role, by: &str, expires_at: i64) -> Result<(), DbError> {
        sqlx::query(sql::INVITE)
            .bind(space)
            .bind(user)
            .bind(role.as_str())
            .bind(by)
            .bind(expires_at)
            .execute(self)
            .await?;
        Ok(())
    }

    async fn uninvite(&mut self, space: &str, user: &str) -> Result<(), DbError> {
        sqlx::query(sql::UNINVITE).bind(space).bind(user).execute(&mut *self).await?;
        Ok(())
    }

    async fn uninvite_by(&mut self, space: &str, by: &str) -> Result<(), DbError> {
        sqlx::query(sql::UNINVITE_BY).bind(space).bind(by).execute(&mut *self).await?;
        Ok(())
    }

    async fn drop_expired(&mut self, user: &str, by: &str, now: i64) -> Result<(), DbError> {
        sqlx::query(sql::EXPIRED_FOR).bind(user).bind(now).execute(&mut *self).await?;
        sqlx::query(sql::EXPIRED_BY).bind(by).bind(now).execute(&mut *self).await?;
        Ok(())
    }

    async fn lock_users(&mut self, users: &[&str]) -> Result<(), DbError> {
        let Some(statement) = C::Database::SQL.lock_user else { return Ok(()) };
        let mut users = users.to_vec();
        users.sort_unstable();
        users.dedup();
        for user in users {
            sqlx::query(statement).bind(user).execute(&mut *self).await?;
        }
        Ok(())
    }

    async fn pending(&mut self, user: &str, by: bool, now: i64) -> Result<usize, DbError> {
        let statement = if by { sql::PENDING_BY } else { sql::PENDING_FOR };
        let n: i64 = sqlx::query_scalar(statement).bind(user).bind(now).fetch_one(self).await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn invitations(
        &mut self,
        of: InvitationsOf,
        name: &str,
        after: &str,
        now: i64,
        limit: usize,
    ) -> Result<Vec<Invited>, DbError> {
        let statement = match of {
            InvitationsOf::User => sql::INVITATIONS_OF,
            InvitationsOf::Space => sql::INVITATIONS_TO,
        };
        let rows: Vec<(String, String, String, String, i64)> =
            sqlx::query_as(statement).bind(name).bind(after).bind(now).bind(db_limit(limit)).fetch_all(self).await?;
        rows.into_iter()
            .map(|(space, user, role, from, expires_at)| {
                Ok(Invited { space, user, role: stored_role(&role)?, from, expires_at })
            })
            .collect()
    }

    async fn memberships(&mut self, user: &str) -> Result<Vec<MemberSpace>, DbError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(sql::MEMBERSHIPS).bind(user).fetch_all(self).await?;
        rows.into_iter()
            .map(|(space, role, head)| Ok(MemberSpace { space, role: stored_role(&role)?, head: seq_from_db(head)? }))
            .collect()
    }

    async fn head(&mut self, space: &str) -> Result<u64, DbError> {
        Ok(self.find_head(space).await?.unwrap_or(0))
    }

    async fn find_head(&mut self, space: &str) -> Result<Option<u64>, DbError> {
        let head: Option<i64> = sqlx::query_scalar(sql::HEAD).bind(space).fetch_optional(self).await?;
        head.map(seq_from_db).transpose()
    }

    async fn heads_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, u64)>, DbError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as(sql::HEADS_PAGE).bind(after).bind(db_limit(limit)).fetch_all(self).await?;
        rows.into_iter().map(|(s, h)| Ok((s, seq_from_db(h)?))).collect()
    }

    async fn page(&mut self, space: &str, cursor: u64, limit: usize, budget: usize) -> Result<Paged, DbError> {
        let rows = sqlx::query_as::<_, (String, String, String, String, i64)>(sql::PULL)
            .bind(space)
            .bind(seq_to_db(cursor)?)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1)
            .fetch(self)
            .map_ok(|(table, row_id, fields, marks, seq)| PulledRow { table, row_id, fields, marks, seq });
        page_within(rows, space.to_owned(), cursor, limit, budget).await
    }

    async fn recall(&mut self, user: &str, op_ids: &[&str]) -> Result<Vec<Recalled>, DbError> {
        type Columns = (String, String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>);
        let q = sqlx::query(C::Database::SQL.recall).bind(user);
        let rows = C::Database::bind_list(q, op_ids)?.fetch_all(self).await?;
        decoded::<Columns, _>(&rows)?
            .into_iter()
            .map(|(op_id, status, reason, code, space, table, row_id)| {
                let verdict = stored_verdict(&status, reason, code)?;
                Ok(Recalled { op_id, verdict, space, key: table.zip(row_id).map(|(t, r)| RowKey::new(t, r)) })
            })
            .collect()
    }

    async fn readable_rows(
        &mut self,
        user: &str,
        keys: &[Key<'_>],
        personal: &str,
    ) -> Result<HashMap<Placed, Row>, DbError> {
        let q = sqlx::query(C::Database::SQL.load_readable_rows).bind(user);
        let rows = C::Database::bind_keys(q, keys)?.bind(personal).fetch_all(self).await?;
        placed_rows(decoded(&rows)?)
    }

    async fn counts(&mut self, user: &str) -> Result<Counts, DbError> {
        let (verdicts, rows, head): (i64, i64, i64) =
            sqlx::query_as(sql::COUNTS).bind(user).bind(marksync::space::personal(user)).fetch_one(self).await?;
        Ok(Counts { verdicts, rows, head })
    }

    async fn ping(&mut self) -> Result<(), DbError> {
        sqlx::query(sql::PING).execute(self).await?;
        Ok(())
    }

    async fn run_script(&mut self, script: &'static str) -> Result<(), DbError> {
        sqlx::raw_sql(script).execute(self).await?;
        Ok(())
    }

    async fn write_probe(&mut self) -> Result<(), DbError> {
        sqlx::query(sql::PROBE).bind(now_ms_db()).execute(self).await?;
        Ok(())
    }

    async fn migrations_done(&mut self) -> Result<Vec<i64>, DbError> {
        Ok(sqlx::query_scalar(sql::MIGRATIONS_DONE).fetch_all(self).await?)
    }

    async fn record_migration(&mut self, version: i64) -> Result<(), DbError> {
        sqlx::query(sql::RECORD_MIGRATION).bind(version).bind(now_ms_db()).execute(self).await?;
        Ok(())
    }
}
