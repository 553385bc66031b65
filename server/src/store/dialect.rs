//! What a backend brings, and nothing more: its pools, the statements that
//! differ between SQLite and PostgreSQL, and how a batch travels as
//! parameters (SQLite: one JSON text unpacked with `json_each`, so no
//! statement nears the parameter limit; PostgreSQL: one array per column,
//! unpacked with `unnest`). Every statement the two speak alike, and all
//! the logic, is written once over this trait ([`super::conn`]).

use std::future::Future;
use std::sync::Arc;

use marksync::judge::{Remember, Remembered};
use sqlx::pool::{PoolConnection, PoolOptions};
use sqlx::{Connection, Database, IntoArguments, Pool, Transaction};

use super::error::DbError;
use super::writer::{Gate, Permit, SERVER};
use super::DbOptions;
use crate::metrics::PoolStats;

/// One migration: its version, its name (the file's stem) and its SQL.
pub(crate) type Migration = (i64, &'static str, &'static str);

/// The migrations of a dialect's folder (`server/migrations/<dialect>/`), in
/// order: (version, name, SQL). Both folders hold the same versions, named alike.
macro_rules! migrations {
    ($dialect:literal) => {
        &[
            (1, "0001_init", include_str!(concat!("../../migrations/", $dialect, "/0001_init.sql"))),
            (2, "0002_verdict_rows", include_str!(concat!("../../migrations/", $dialect, "/0002_verdict_rows.sql"))),
            (3, "0003_spaces", include_str!(concat!("../../migrations/", $dialect, "/0003_spaces.sql"))),
            (4, "0004_verdicts_kept", include_str!(concat!("../../migrations/", $dialect, "/0004_verdicts_kept.sql"))),
            (5, "0005_invitations", include_str!(concat!("../../migrations/", $dialect, "/0005_invitations.sql"))),
            (6, "0006_probe", include_str!(concat!("../../migrations/", $dialect, "/0006_probe.sql"))),
            (7, "0007_deliveries", include_str!(concat!("../../migrations/", $dialect, "/0007_deliveries.sql"))),
            (8, "0008_key_order", include_str!(concat!("../../migrations/", $dialect, "/0008_key_order.sql"))),
        ]
    };
}
pub(crate) use migrations;

/// A statement being bound, of dialect `D`.
pub(crate) type Query<'q, D> = sqlx::query::Query<'q, D, <D as Database>::Arguments>;

/// The statements whose SQL differs between the dialects. Each names its
/// parameters in the order the shared code binds them.
pub(crate) struct Statements {
    /// Opens a write transaction.
    pub begin_write: &'static str,
    /// Opens a read-only transaction that sees one committed state throughout.
    pub begin_snapshot: &'static str,
    /// Makes the table of applied migrations.
    pub migrations_table: &'static str,
    /// Serialises the migrations of servers starting at once, when the write
    /// transaction does not already.
    pub migration_lock: Option<&'static str>,
    /// `$1` a user: serialises the transactions that count what the user
    /// holds across spaces (their spaces, invitations), when the write
    /// transaction does not already.
    pub lock_user: Option<&'static str>,
    /// `$1` a space: its head seq, locked to the end of the transaction.
    pub lock_head: &'static str,
    /// `[spaces]`: `(space, seq)` of those that exist, locked in the order given.
    pub lock_heads: &'static str,
    /// As `lock_heads`, without the locks (only to prove that tests catch it).
    #[cfg(feature = "sabotage")]
    pub read_heads: &'static str,
    /// `[keys]`: `(space, table, row, fields, marks, place)` of those
    /// stored; `place` is where the stored version lies (PostgreSQL's
    /// `ctid`, as text), null where rows are rewritten by key.
    pub load_rows: &'static str,
    /// `$1` a user, `[spaces]`: `(space, role)` of the user's memberships among them.
    pub load_roles: &'static str,
    /// `$1` a user, `[opIds]`: `(opId, status, reason, code)` of the user's saved verdicts.
    pub load_verdicts: &'static str,
    /// `$1` a user, `[verdicts]`, then `decided_at`: inserts them. A verdict
    /// remembered before (by a writer the push did not wait for) inserts
    /// fewer than sent: skipped (SQLite), or the statement fails whole as a
    /// unique violation (PostgreSQL: a plain insert costs about half of one
    /// `ON CONFLICT DO NOTHING`, which probes the index first).
    pub remember: &'static str,
    /// As `remember`, skipping verdicts remembered before: for the per-op
    /// judge, which loads none first, and a judge sabotaged to forget them.
    pub remember_or_skip: &'static str,
    /// `[rows]`: inserts rows with their seqs, the judge's new ones and,
    /// where there is no `update_rows`, every one (an upsert).
    pub insert_rows: &'static str,
    /// `[rows]`, then their places: rewrites rows that are stored, with
    /// their seqs, found at the place their load saw them (no index
    /// descent). A row another writer rewrote or removed since is not there
    /// any more: fewer rows are updated than sent.
    pub update_rows: Option<&'static str>,
    /// `[heads]`: sets the heads of spaces.
    pub write_heads: &'static str,
    /// `$1` a user, `[opIds]`: `(opId, status, reason, code, space, table, row)`.
    pub recall: &'static str,
    /// `$1` a user, `[keys]`, then the user's personal space: `(space, table,
    /// row, fields, marks)` of those the user may read now.
    pub load_readable_rows: &'static str,
    /// `$1` the lease's end, `$2` now, `$3` how many: leases the due
    /// queues of deliveries, `(space, failures)`.
    pub claim_deliveries: &'static str,
    /// `$1` a channel, `$2` a payload: delivered to the other server
    /// processes on commit. None where one process owns the database.
    pub notify: Option<&'static str>,
}

/// A row of a batch where it is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key<'a> {
    /// The space it lives in.
    pub space: &'a str,
    /// Its table.
    pub table: &'a str,
    /// Its id in the table.
    pub row_id: &'a str,
}

/// A row to upsert, as its columns.
pub(crate) struct EncodedRow<'a> {
    /// Where it is placed.
    pub key: Key<'a>,
    /// `fields` JSON.
    pub fields: String,
    /// `marks` JSON.
    pub marks: String,
    /// The seq of its last change.
    pub seq: i64,
    /// Where its stored version lies, as its load saw it (rows to update).
    pub place: Option<&'a str>,
}

/// The verdicts a judgement remembers, as columns (one entry per verdict in each).
pub(crate) struct VerdictColumns {
    pub ids: Vec<String>,
    pub statuses: Vec<&'static str>,
    pub reasons: Vec<Option<String>>,
    pub codes: Vec<Option<String>>,
    /// The row a rejected op edits (null for applied ones: they are recalled without a row).
    pub spaces: Vec<Option<String>>,
    pub tables: Vec<Option<String>>,
    pub row_ids: Vec<Option<String>>,
}

impl VerdictColumns {
    /// The columns of `remember`.
    pub(crate) fn of(remember: &[Remember]) -> VerdictColumns {
        let n = remember.len();
        let mut cols = VerdictColumns {
            ids: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            reasons: Vec::with_capacity(n),
            codes: Vec::with_capacity(n),
            spaces: Vec::with_capacity(n),
            tables: Vec::with_capacity(n),
            row_ids: Vec::with_capacity(n),
        };
        for r in remember {
            cols.ids.push(r.op_id.as_str().to_owned());
            cols.statuses.push(r.verdict.status());
            let (reason, code, placed) = match &r.verdict {
                Remembered::Applied => (None, None, None),
                Remembered::Rejected { reason, code } => (Some(reason.clone()), Some(code.clone()), Some(r)),
            };
            cols.reasons.push(reason);
            cols.codes.push(code);
            cols.spaces.push(placed.map(|r| r.space.to_string()));
            cols.tables.push(placed.map(|r| r.key.table.clone()));
            cols.row_ids.push(placed.map(|r| r.key.row_id.clone()));
        }
        cols
    }

    /// How many verdicts.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

/// A backend's connections: a write pool and a read pool (the same pool
/// where the database takes many writers), and the single writer's queue
/// where there is one ([`super::writer`]).
#[derive(Debug)]
pub(crate) struct Pools<D: Database> {
    pub writer: Pool<D>,
    pub reader: Pool<D>,
    pub gate: Option<Arc<Gate>>,
    /// This store's name in its `NOTIFY`s, so that its own come back to nobody.
    pub origin: u64,
    /// Where the single writer is one connection to a file: it is opened again
    /// after a write on it was refused as read-only.
    pub reopen: Option<Reopen>,
}

/// "Open the single writer's connection again before its next use." SQLite
/// opens a file it may not write read-only, silently, and such a connection
/// stays read-only after the file can be written again (its mode fixed, the
/// disk freed): without this, every push failed `503` until a restart.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reopen(Arc<std::sync::atomic::AtomicBool>);

impl<D: Database> Pools<D> {
    pub(crate) fn new(writer: Pool<D>, reader: Pool<D>, gate: Option<Arc<Gate>>, reopen: Option<Reopen>) -> Pools<D> {
        Pools { writer, reader, gate, origin: new_origin(), reopen }
    }

    /// Looks at how a write ended: one refused as read-only has the writer's
    /// connection opened again before the next write (a connection of a pool
    /// of many is not told apart, so only the single writer is reopened).
    pub(crate) fn after_write<T, E: WriteFailure>(&self, ended: &Result<T, E>) {
        if let (Some(reopen), Err(e)) = (&self.reopen, ended) {
            if e.db_error().is_some_and(DbError::is_read_only) {
                reopen.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// An error of a write that may be the database's own.
pub(crate) trait WriteFailure {
    fn db_error(&self) -> Option<&DbError>;
}

impl WriteFailure for DbError {
    fn db_error(&self) -> Option<&DbError> {
        Some(self)
    }
}

/// A name no other store on the database picks (64 random bits).
fn new_origin() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// A write transaction, and the writer's turn it holds until it ends
/// (dropped after the transaction: fields drop in order).
pub(crate) struct WriteTx<D: Database> {
    tx: Transaction<'static, D>,
    origin: u64,
    _turn: Option<Permit>,
}

impl<D: Database> WriteTx<D> {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// Tells the other server processes of `poke` on commit; this one's own
    /// streams heard it from the request that made it.
    pub(crate) async fn announce(&mut self, poke: &crate::poke::Poke) -> Result<(), DbError>
    where
        D::Connection: super::conn::Conn,
    {
        let payload = poke.payload(self.origin);
        super::conn::Conn::notify(&mut *self.tx, &payload).await
    }
}

impl<D: Database> std::ops::Deref for WriteTx<D> {
    type Target = D::Connection;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl<D: Database> std::ops::DerefMut for WriteTx<D> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

fn stats_of<D: Database>(pool: &'static str, p: &Pool<D>) -> PoolStats {
    PoolStats { pool, size: p.size(), idle: p.num_idle(), max: p.options().get_max_connections() }
}

// By hand: a derive would ask `D: Clone` of the database type.
impl<D: Database> Clone for Pools<D> {
    fn clone(&self) -> Self {
        Pools {
            writer: self.writer.clone(),
            reader: self.reader.clone(),
            gate: self.gate.clone(),
            origin: self.origin,
            reopen: self.reopen.clone(),
        }
    }
}

/// One SQL dialect: its statements, its batch parameters, its pools.
pub(crate) trait Dialect: Database<Arguments: IntoArguments<Self>> {
    /// `sqlite` or `postgres`.
    const BACKEND: &'static str;
    /// Its statements.
    const SQL: Statements;
    /// Its migrations, in order: (version, name, SQL).
    const MIGRATIONS: &'static [Migration];

    /// Opens the pools of the database at `url` (creating a SQLite file if missing).
    fn open(url: &str, options: &DbOptions) -> impl Future<Output = Result<Pools<Self>, DbError>> + Send;
    /// Binds a list of texts.
    fn bind_list<'q>(q: Query<'q, Self>, items: &[&str]) -> Result<Query<'q, Self>, DbError>;
    /// Binds a list of placed rows.
    fn bind_keys<'q>(q: Query<'q, Self>, keys: &[Key<'_>]) -> Result<Query<'q, Self>, DbError>;
    /// Binds verdicts to remember.
    fn bind_verdicts<'q>(q: Query<'q, Self>, verdicts: &VerdictColumns) -> Result<Query<'q, Self>, DbError>;
    /// Binds rows to upsert.
    fn bind_rows<'q>(q: Query<'q, Self>, rows: &[EncodedRow<'_>]) -> Result<Query<'q, Self>, DbError>;
    /// Binds the places of rows to update (after [`Dialect::bind_rows`]).
    fn bind_places<'q>(q: Query<'q, Self>, rows: &[EncodedRow<'_>]) -> Result<Query<'q, Self>, DbError>;
    /// Binds (space, head) pairs.
    fn bind_heads<'q>(q: Query<'q, Self>, heads: &[(&str, i64)]) -> Result<Query<'q, Self>, DbError>;
    /// How many rows a statement inserted, updated or deleted.
    fn rows_affected(result: &Self::QueryResult) -> u64;
    /// A connection of this dialect as the app's rules read it.
    fn app_db(conn: &mut Self::Connection) -> crate::rules::AppDb<'_>;
}

/// `options` with a check before each connection leaves the pool: one that
/// a failed transaction left inside it is closed, and the pool opens a fresh
/// one. (When a write fails — a full disk, an I/O error — SQLite may roll the
/// transaction back by itself; the rollback the driver then sends fails, the
/// connection still counts itself inside a transaction, and every `BEGIN` on
/// it after that is refused: the single writer would stay wedged until a
/// restart.) With `reopen`, a connection is also closed when a write on it
/// was refused as read-only since ([`Pools::after_write`]).
pub(crate) fn healing<D: Database>(options: PoolOptions<D>, reopen: Option<Reopen>) -> PoolOptions<D> {
    options.before_acquire(move |conn, _| {
        let reopen = reopen.clone();
        Box::pin(async move {
            if reopen.is_some_and(|r| r.0.swap(false, std::sync::atomic::Ordering::SeqCst)) {
                tracing::warn!("a write was refused as read-only: opening the writer's connection again");
                return Ok(false);
            }
            if !conn.is_in_transaction() {
                return Ok(true);
            }
            // A rollback queued when the transaction was dropped may not have run yet:
            // a round trip lets it, and then the connection tells the truth.
            conn.ping().await?;
            let clean = !conn.is_in_transaction();
            if !clean {
                tracing::warn!("a failed transaction left a database connection inside it: opening a new one");
            }
            Ok(clean)
        })
    })
}

impl<D: Dialect> Pools<D> {
    /// A write transaction for the server's own work (SQLite: `BEGIN
    /// IMMEDIATE` on the single writer).
    pub(crate) async fn write(&self) -> Result<WriteTx<D>, DbError> {
        self.write_as(SERVER).await
    }

    /// A write transaction on behalf of `user`, who waits for the single
    /// writer (SQLite) taking turns with the other users ([`super::writer`]).
    pub(crate) async fn write_as(&self, user: &str) -> Result<WriteTx<D>, DbError> {
        let turn = match &self.gate {
            Some(gate) => Some(gate.enter(user).await),
            None => None,
        };
        Ok(WriteTx { tx: self.writer.begin_with(D::SQL.begin_write).await?, origin: self.origin, _turn: turn })
    }

    /// A read-only snapshot.
    pub(crate) async fn snapshot(&self) -> Result<Transaction<'static, D>, DbError> {
        Ok(self.reader.begin_with(D::SQL.begin_snapshot).await?)
    }

    /// A reader connection, for reads that need no snapshot.
    pub(crate) async fn read(&self) -> Result<PoolConnection<D>, DbError> {
        Ok(self.reader.acquire().await?)
    }

    /// The writer's and the reader's [`PoolStats`] (the same pool's twice where there is one).
    pub(crate) fn stats(&self) -> Vec<PoolStats> {
        vec![stats_of("writer", &self.writer), stats_of("reader", &self.reader)]
    }

    /// Closes every connection.
    pub(crate) async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}
