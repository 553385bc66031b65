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
//!    multi-row upsert) and the new heads;
//! 6. with a webhook, **owe** the app's backend one delivery per space whose
//!    rows moved ([`outbox`]), then commit: a committed change always has
//!    its delivery, a rolled-back one never does ([`crate::webhook`] sends them).
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
mod outbox;
mod page;
#[cfg(feature = "bench-per-op")]
mod per_op;
mod postgres;
mod pull;
mod push;
mod recall;
mod spaces;
mod sqlite;
mod writer;

use std::time::Duration;

use marksync::judge::{Judgement, Limits};
use marksync::protocol::{Op, OpId, PullResponse, RememberedVerdict, SpacesPullResponse};
use marksync::schema::Schema;
use marksync::space::{Followed, Role};
use sqlx::{Postgres, Sqlite};
use tokio::sync::watch;

use conn::Conn;
use dialect::Pools;

pub use crate::metrics::PoolStats;
pub use conn::{Backlog, Claimed, Counts, Delivery, Invited, MemberSpace, Settle};
pub use error::{redact, DbError, PushError, MAX_JUDGE_ATTEMPTS};
pub use migrate::{MigrationState, Migrations};
pub use push::PushControl;
#[cfg(feature = "sabotage")]
pub use push::Sabotage;
pub use spaces::{Actor, Changed, SpaceError, SpaceLimits};

/// The server's storage, on one of the two backends, the bounds of its
/// spaces, and whether it runs on a database migrated by a newer server.
#[derive(Debug, Clone)]
pub struct Store(Backend, SpaceLimits, AllowNewer);

/// `--allow-newer-schema`: unknown migrations in the database are accepted.
#[derive(Debug, Clone, Copy)]
struct AllowNewer(bool);

/// How the store opens its database.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Most connections (PostgreSQL's pool; SQLite's readers).
    pub max_connections: u32,
    /// How long a request waits for a connection before it is answered
    /// `503 unavailable` (PostgreSQL; SQLite's readers), and how long the
    /// first connection at start may take.
    pub acquire_timeout: Duration,
    /// Apply the migrations, or only check them.
    pub migrations: Migrations,
    /// Accept a database that carries migrations this server does not know.
    pub allow_newer: bool,
    /// Test-only sabotage: SQLite's writer serves in arrival order, not
    /// taking users in turn ([`writer`]).
    #[cfg(feature = "sabotage")]
    #[doc(hidden)]
    pub writer_in_arrival_order: bool,
}

impl DbOptions {
    /// The defaults of `marksync-server` with no flags.
    pub const DEFAULT: DbOptions = DbOptions {
        max_connections: 16,
        acquire_timeout: Duration::from_secs(5),
        migrations: Migrations::Apply,
        allow_newer: false,
        #[cfg(feature = "sabotage")]
        writer_in_arrival_order: false,
    };

    #[cfg(feature = "sabotage")]
    fn writer_in_arrival_order(&self) -> bool {
        self.writer_in_arrival_order
    }
    #[cfg(not(feature = "sabotage"))]
    fn writer_in_arrival_order(&self) -> bool {
        false
    }
}

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

/// [`on_backend!`] for a write: how it ended is looked at after
/// ([`Pools::after_write`]: a writer refused as read-only is opened again).
macro_rules! writing {
    ($store:expr, $db:ident => $body:expr) => {
        on_backend!($store, $db => {
            let ended = $body;
            $db.after_write(&ended);
            ended
        })
    };
}

impl Store {
    /// Connects to `url` (`sqlite://FILE` — created if missing — or
    /// `postgres://…`), applies or checks the migrations, and proves the
    /// database takes writes: a server that could only fail every push does
    /// not start. A SQLite file this start created is removed again when the
    /// start fails (a full disk must not leave an empty database behind).
    pub async fn connect(url: &str, options: &DbOptions) -> Result<Store, DbError> {
        let created = match url.starts_with("sqlite:") {
            true => match sqlite::sqlite_file(url)? {
                sqlite::SqliteFile::Path(p) if !std::path::Path::new(&p).exists() => Some(p),
                _ => None,
            },
            false => None,
        };
        let opened = Store::open(url, options).await;
        if let (Err(_), Some(path)) = (&opened, created) {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
        opened
    }

    async fn open(url: &str, options: &DbOptions) -> Result<Store, DbError> {
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite(<Sqlite as dialect::Dialect>::open(url, options).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres(<Postgres as dialect::Dialect>::open(url, options).await?)
        } else {
            return Err(DbError::BadUrl(redact(url)));
        };
        let store = Store(backend, SpaceLimits::DEFAULT, AllowNewer(options.allow_newer));
        let migrated = on_backend!(store, db => migrate::run(db, options.migrations, options.allow_newer).await);
        let probed = match migrated {
            Ok(()) => store.probe_write().await,
            Err(e) => Err(e),
        };
        if let Err(e) = probed {
            store.close().await;
            return Err(match e {
                e if matches!(e, DbError::Db(_)) && e.is_unavailable() => {
                    DbError::NotWritable { what: store.describe(url), source: Box::new(e) }
                }
                e => e,
            });
        }
        Ok(store)
    }

    /// The database as messages name it: the SQLite file, or the URL without its password.
    fn describe(&self, url: &str) -> String {
        match (&self.0, sqlite::sqlite_file(url)) {
            (Backend::Sqlite(_), Ok(file)) => file.describe(),
            _ => redact(url),
        }
    }

    /// Writes the probe's row in a write transaction of its own.
    async fn probe_write(&self) -> Result<(), DbError> {
        writing!(self, db => async {
            let mut tx = db.write().await?;
            tx.write_probe().await?;
            tx.commit().await?;
            Ok(())
        }.await)
    }

    /// Whether the server can serve: the database answers a read, takes a
    /// write (the probe's row), and carries exactly the migrations this
    /// server knows (or newer ones, with `--allow-newer-schema`). The error
    /// says which failed, in words an operator can act on.
    pub async fn ready(&self) -> Result<(), String> {
        self.ping().await.map_err(|e| format!("the database cannot be read: {e}"))?;
        let state = on_backend!(self, db => migrate::state(db).await)
            .map_err(|e| format!("the database's migrations cannot be read: {e}"))?;
        if let Some(refusal) = state.refusal(self.2 .0) {
            return Err(refusal.to_string());
        }
        self.probe_write().await.map_err(|e| format!("the database cannot be written: {e}"))
    }

    /// Applies the migrations of `url` and closes it (`marksync-server migrate`).
    pub async fn migrate(url: &str, options: &DbOptions) -> Result<(), DbError> {
        let options = DbOptions { migrations: Migrations::Apply, ..options.clone() };
        Store::connect(url, &options).await?.close().await;
        Ok(())
    }

    /// The same store with `limits` for its spaces and invitations.
    pub fn with_space_limits(self, limits: SpaceLimits) -> Store {
        Store(self.0, limits, self.2)
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
        writing!(self, db => push::push(db, user, schema, batch, limits, ctl).await)
    }

    /// The one-statement-per-op judge, kept only for the load benchmark.
    #[cfg(feature = "bench-per-op")]
    pub async fn push_per_op(&self, user: &str, schema: &Schema, batch: &[Op]) -> Result<Judgement, PushError> {
        writing!(self, db => per_op::push(db, user, schema, batch).await)
    }

    /// Wakes this process's event streams on pushes and membership changes
    /// other server processes commit to the same database (PostgreSQL
    /// `LISTEN`/`NOTIFY`; SQLite is one process's file: nothing to listen to).
    pub fn forward_pokes(&self, pokes: std::sync::Arc<crate::poke::Hub>, shutdown: watch::Receiver<bool>) {
        if let Backend::Postgres(db) = &self.0 {
            postgres::forward_pokes(db, pokes, shutdown);
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
        followed: &Followed,
        limit: Option<usize>,
    ) -> Result<SpacesPullResponse, DbError> {
        on_backend!(self, db => pull::spaces(db, user, followed, limit).await)
    }

    /// `POST /v1/admin/pull`: any spaces, as the app's backend names them, read in one snapshot.
    pub async fn pull_any(&self, followed: &Followed, limit: Option<usize>) -> Result<SpacesPullResponse, DbError> {
        on_backend!(self, db => pull::any(db, followed, limit).await)
    }

    /// A page of every space there is and its head, by name after `after`.
    pub async fn heads_page(&self, after: &str, limit: usize) -> Result<Vec<(String, u64)>, DbError> {
        on_backend!(self, db => spaces::heads_page(db, after, limit).await)
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
        writing!(self, db => spaces::create(db, &self.1, space, owner).await)
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
        writing!(self, db => spaces::set_member(db, &self.1, actor, space, user, role).await)
    }

    /// `user` accepts their pending invitation to `space`: the role they now have.
    pub async fn accept(&self, user: &str, space: &str) -> Result<Role, SpaceError> {
        writing!(self, db => spaces::accept(db, &self.1, user, space).await)
    }

    /// `user` declines their invitation to `space`.
    pub async fn decline(&self, user: &str, space: &str) -> Result<(), SpaceError> {
        writing!(self, db => spaces::decline(db, user, space).await)
    }

    /// A page of `user`'s pending invitations, after the space `after`.
    pub async fn invitations(&self, user: &str, after: &str, limit: usize) -> Result<Vec<Invited>, DbError> {
        on_backend!(self, db => spaces::invitations(db, user, after, limit).await)
    }

    /// A page of the pending invitations to `space` (of invitees after `after`), for an owner of it or an admin.
    pub async fn invitations_to(
        &self,
        actor: Actor<'_>,
        space: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<Invited>, SpaceError> {
        on_backend!(self, db => spaces::invitations_to(db, actor, space, after, limit).await)
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

    /// Leases up to `spaces` due queues of webhook deliveries for this
    /// process until `lease_until` (ms), with the first `per_space`
    /// deliveries of each, in order. Another process (or this one after a
    /// crash) may take a queue again only after its lease.
    pub async fn claim_deliveries(
        &self,
        lease_until: i64,
        spaces: usize,
        per_space: usize,
    ) -> Result<Vec<Claimed>, DbError> {
        writing!(self, db => async {
            let mut tx = db.write().await?;
            let mut claimed = Vec::new();
            for (space, failures) in tx.claim_queues(lease_until, spaces).await? {
                let deliveries = tx.queued(&space, per_space).await?;
                claimed.push(Claimed { space, failures, deliveries });
            }
            tx.commit().await?;
            Ok(claimed)
        }.await)
    }

    /// Forgets `space`'s deliveries up to `delivered_through` and settles its
    /// queue, under the space's lock: a push committing a delivery to the
    /// space meanwhile is never left without a queue.
    pub async fn settle_deliveries(
        &self,
        space: &str,
        delivered_through: Option<u64>,
        settle: &Settle,
    ) -> Result<(), DbError> {
        writing!(self, db => async {
            let mut tx = db.write().await?;
            tx.lock_head(space).await?;
            tx.settle_queue(space, delivered_through, settle).await?;
            tx.commit().await?;
            Ok(())
        }.await)
    }

    /// Makes every queue of deliveries due now, leases included: at the start
    /// of the one process that owns a SQLite file, no other sender can hold
    /// one. (PostgreSQL may be shared by several processes: leases run out.)
    pub async fn release_delivery_leases(&self) -> Result<(), DbError> {
        match &self.0 {
            Backend::Sqlite(db) => {
                let mut tx = db.write().await?;
                tx.release_leases(crate::clock::now_ms_db()).await?;
                tx.commit().await?;
                Ok(())
            }
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// The webhook deliveries waiting.
    pub async fn delivery_backlog(&self) -> Result<Backlog, DbError> {
        on_backend!(self, db => db.read().await?.delivery_backlog().await)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A SQLite writer opened while its file could not be written (SQLite
    /// then opens it read-only, silently) stayed read-only after the file was
    /// fixed: every push and `/readyz` failed until a restart. The file's mode
    /// does not stop the tests' root user, so the connection is made
    /// read-only here as SQLite would have opened it (`query_only`: the same
    /// SQLITE_READONLY on every write).
    #[tokio::test]
    async fn a_writer_refused_as_read_only_is_opened_again() {
        let dir = std::env::temp_dir().join(format!("marksync-ro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("ro.db").display());
        let store = Store::connect(&url, &DbOptions::DEFAULT).await.unwrap();
        let Backend::Sqlite(db) = &store.0 else { unreachable!() };
        sqlx::raw_sql("PRAGMA query_only = ON").execute(&db.writer).await.unwrap();

        let refused = store.probe_write().await.unwrap_err();
        assert!(refused.is_read_only() && refused.is_unavailable(), "{refused}");
        store.probe_write().await.expect("the writer opened again takes writes");
        store.ready().await.unwrap();
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
