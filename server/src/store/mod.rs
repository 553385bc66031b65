//! Storage: verdicts, rows, heads and memberships in SQLite or PostgreSQL,
//! with one behaviour.
//!
//! A push is one transaction under the locks of the spaces its batch names
//! (PROTOCOL §3, §3c), written once in [`push`]:
//!
//! 1. **lock** the spaces' head rows (PostgreSQL: `SELECT … FOR UPDATE`, in
//!    byte order of their names; SQLite: `BEGIN IMMEDIATE` on the single
//!    write connection);
//! 2. **load** the stored rows of the batch's placed rows, the sender's
//!    saved verdicts of its opIds and the sender's roles in its spaces, one
//!    query each, into [`marksync::judge::Known`];
//! 3. **judge** with [`marksync::judge::judge_batch`] (all rules live there);
//! 4. **remember**: one multi-row `INSERT … ON CONFLICT (user_id, op_id) DO
//!    NOTHING`; fewer rows in than sent means another writer answered one of
//!    these ops first: roll back and go again from 1;
//! 5. **write** the rows of [`marksync::judge::Judgement::writes`] (one
//!    multi-row upsert) and the new heads, then commit.
//!
//! Nothing here compares opIds or marks, and nothing is written before step
//! 4. The logic ([`push`], [`pull`], [`recall`], [`spaces`], [`migrate`]) and
//! the statements ([`conn`]) are written once over [`dialect::Dialect`];
//! each backend ([`sqlite`], [`postgres`]) brings only its pools and the SQL
//! that differs. Verdicts are never deleted.

mod codec;
mod conn;
mod dialect;
mod error;
mod migrate;
mod page;
#[cfg(feature = "bench-per-op")]
mod per_op;
mod postgres;
mod pull;
mod push;
mod recall;
mod spaces;
mod sqlite;

use std::collections::BTreeMap;

use marksync::judge::{Judgement, Limits};
use marksync::protocol::{Op, OpId, PullResponse, RememberedVerdict, SpacesPullResponse};
use marksync::schema::Schema;
use marksync::space::{Follow, Role};
use sqlx::{Postgres, Sqlite};
use tokio::sync::{broadcast, watch};

use crate::poke::Poke;
use conn::Conn;
use dialect::Pools;

pub use conn::{Counts, Invited, MemberSpace};
pub use dialect::PoolStats;
pub use error::{redact, DbError, PushError, MAX_JUDGE_ATTEMPTS};
pub use push::PushControl;
#[cfg(feature = "sabotage")]
pub use push::Sabotage;
pub use spaces::{Actor, Changed, SpaceError, SpaceLimits};

/// The server's storage, on one of the two backends, and the bounds of its spaces.
#[derive(Debug, Clone)]
pub struct Store(Backend, SpaceLimits);

#[derive(Debug, Clone)]
enum Backend {
    /// Embedded SQLite, a file.
    Sqlite(Pools<Sqlite>),
    /// PostgreSQL.
    Postgres(Pools<Postgres>),
}

/// `$body` with `$db` the pools of whichever backend `$store` is on: the
/// one place that tells the two apart.
macro_rules! on_backend {
    ($store:expr, $db:ident => $body:expr) => {
        match &$store.0 {
            Backend::Sqlite($db) => $body,
            Backend::Postgres($db) => $body,
        }
    };
}

impl Store {
    /// Connects to `url` (`sqlite://FILE` — created if missing — or
    /// `postgres://…`) and runs the migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, DbError> {
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite(<Sqlite as dialect::Dialect>::open(url, max_connections).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres(<Postgres as dialect::Dialect>::open(url, max_connections).await?)
        } else {
            return Err(DbError::BadUrl(redact(url)));
        };
        let store = Store(backend, SpaceLimits::DEFAULT);
        on_backend!(store, db => migrate::run(db).await)?;
        Ok(store)
    }

    /// The same store with `limits` for its spaces and invitations.
    pub fn with_space_limits(self, limits: SpaceLimits) -> Store {
        Store(self.0, limits)
    }

    /// The backend's name: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.0 {
            Backend::Sqlite(_) => <Sqlite as dialect::Dialect>::BACKEND,
            Backend::Postgres(_) => <Postgres as dialect::Dialect>::BACKEND,
        }
    }

    /// Judges `batch` for `user` in one transaction under the locks of its
    /// spaces, persists the judgement, and returns it.
    pub async fn push(
        &self,
        user: &str,
        schema: &Schema,
        batch: &[Op],
        limits: &Limits,
        ctl: &PushControl,
    ) -> Result<Judgement, PushError> {
        on_backend!(self, db => push::push(db, user, schema, batch, limits, ctl).await)
    }

    /// The one-statement-per-op judge, kept only for the load benchmark.
    #[cfg(feature = "bench-per-op")]
    pub async fn push_per_op(&self, user: &str, schema: &Schema, batch: &[Op]) -> Result<Judgement, PushError> {
        on_backend!(self, db => per_op::push(db, user, schema, batch).await)
    }

    /// Wakes this process's event streams on pushes and membership changes
    /// other server processes commit to the same database (PostgreSQL
    /// `LISTEN`/`NOTIFY`; SQLite is one process's file: nothing to listen to).
    pub fn forward_pokes(&self, pokes: broadcast::Sender<Poke>, shutdown: watch::Receiver<bool>) {
        if let Backend::Postgres(db) = &self.0 {
            postgres::forward_pokes(&db.writer, pokes, shutdown);
        }
    }

    /// `POST /v1/verdicts`: what is remembered of `op_ids` for `user`, in the
    /// order asked (rows as the newest version of `schema` spells them).
    pub async fn verdicts(
        &self,
        schema: &Schema,
        user: &str,
        op_ids: &[OpId],
        limits: &Limits,
    ) -> Result<Vec<RememberedVerdict>, DbError> {
        on_backend!(self, db => recall::verdicts(db, schema, user, op_ids, limits).await)
    }

    /// `GET /v1/pull`: rows of `user`'s personal space changed after
    /// `cursor`, at most `limit`, in seq order.
    pub async fn pull(&self, user: &str, cursor: u64, limit: usize) -> Result<PullResponse, DbError> {
        on_backend!(self, db => pull::personal(db, user, cursor, limit).await)
    }

    /// `POST /v1/pull`: every space `user` follows or belongs to, read in one snapshot.
    pub async fn pull_spaces(
        &self,
        user: &str,
        followed: &BTreeMap<String, Follow>,
        limit: Option<usize>,
    ) -> Result<SpacesPullResponse, DbError> {
        on_backend!(self, db => pull::spaces(db, user, followed, limit).await)
    }

    /// Every space `user` is a member of, with the role and the head: the
    /// personal space first, then the others in byte order of their names.
    pub async fn spaces_of(&self, user: &str) -> Result<Vec<MemberSpace>, DbError> {
        on_backend!(self, db => spaces::of(db, user).await)
    }

    /// `space`'s head if `user` is a member of it now.
    pub async fn member_head(&self, user: &str, space: &str) -> Result<Option<u64>, DbError> {
        on_backend!(self, db => spaces::member_head(db, user, space).await)
    }

    /// A page of `user`'s spaces and roles (the personal space first), after the space `after`.
    pub async fn spaces_page(&self, user: &str, after: &str, limit: usize) -> Result<Vec<(String, Role)>, DbError> {
        on_backend!(self, db => spaces::page_of(db, user, after, limit).await)
    }

    /// Creates the shared space `space`, owned by `owner`.
    pub async fn create_space(&self, space: &str, owner: &str) -> Result<Role, SpaceError> {
        on_backend!(self, db => spaces::create(db, &self.1, space, owner).await)
    }

    /// Sets (or with `None` removes) `user`'s role in `space`, as `actor`:
    /// for a user who is not a member, asked by another user, an invitation.
    pub async fn set_member(
        &self,
        actor: Actor<'_>,
        space: &str,
        user: &str,
        role: Option<Role>,
    ) -> Result<Changed, SpaceError> {
        on_backend!(self, db => spaces::set_member(db, &self.1, actor, space, user, role).await)
    }

    /// `user` accepts their pending invitation to `space`: the role they now have.
    pub async fn accept(&self, user: &str, space: &str) -> Result<Role, SpaceError> {
        on_backend!(self, db => spaces::accept(db, &self.1, user, space).await)
    }

    /// `user` declines their invitation to `space`.
    pub async fn decline(&self, user: &str, space: &str) -> Result<(), SpaceError> {
        on_backend!(self, db => spaces::decline(db, user, space).await)
    }

    /// A page of `user`'s pending invitations, after the space `after`.
    pub async fn invitations(&self, user: &str, after: &str, limit: usize) -> Result<Vec<Invited>, DbError> {
        on_backend!(self, db => spaces::invitations(db, user, after, limit).await)
    }

    /// A page of the members of `space` (after the user `after`), for a member of it or an admin.
    pub async fn members(
        &self,
        actor: Actor<'_>,
        space: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Role)>, SpaceError> {
        on_backend!(self, db => spaces::members(db, actor, space, after, limit).await)
    }

    /// How many verdicts and rows `user` has, and the head.
    pub async fn counts(&self, user: &str) -> Result<Counts, DbError> {
        on_backend!(self, db => db.read().await?.counts(user).await)
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        on_backend!(self, db => db.read().await?.ping().await)
    }

    /// How busy the writer and reader pools are now (for `/metrics`).
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        on_backend!(self, db => db.stats())
    }

    /// Closes every connection.
    pub async fn close(&self) {
        on_backend!(self, db => db.close().await)
    }
}
