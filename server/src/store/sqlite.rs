//! The SQLite backend: one write connection, and every push begins with
//! `BEGIN IMMEDIATE` on it — a single writer, so the user's lock (and every
//! other user's) is held for the whole transaction. Reads (pull) use a
//! separate pool of connections; the database runs in WAL mode so readers
//! never wait for the writer. Batches travel as one JSON parameter each,
//! unpacked with `json_each`, so no statement ever nears the parameter limit.

use std::str::FromStr;
use std::time::Duration;

use marksync::judge::RowWrite;
#[cfg(feature = "bench-per-op")]
use marksync::judge::{Judgement, Limits};
#[cfg(feature = "bench-per-op")]
use marksync::protocol::Op;
use marksync::protocol::{PullResponse, SpacePage};
#[cfg(feature = "bench-per-op")]
use marksync::schema::Schema;
use marksync::space::{Role, SpaceId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, Transaction};

#[cfg(feature = "bench-per-op")]
use super::codec::{decode_row, seq_from_db};
use super::codec::{encode_row, seq_to_db};
use super::push::{BatchKeys, Loaded, PushBackend, PushTxn};
use super::spaces::{MemberBackend, MemberTxn, PullBackend, PullSnapshot};
#[cfg(feature = "bench-per-op")]
use super::PushError;
use super::{
    now_ms, page, page_within, rejected_keys, Counts, PushControl, RecalledVerdict, StoreError, StoredRow,
    VerdictColumns,
};

/// Migrations, in order: (version, SQL). Applied once each, inside `BEGIN IMMEDIATE`.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/sqlite/0001_init.sql")),
    (2, include_str!("../../migrations/sqlite/0002_verdict_rows.sql")),
    (3, include_str!("../../migrations/sqlite/0003_spaces.sql")),
];

/// SQL of the batched judge (see the module docs of [`super`]).
mod sql {
    pub const BEGIN: &str = "BEGIN IMMEDIATE";
    pub const ENSURE_HEAD: &str = "INSERT INTO heads (space_id, seq) VALUES (?1, 0) ON CONFLICT (space_id) DO NOTHING";
    pub const READ_HEADS: &str = "SELECT space_id, seq FROM heads WHERE space_id IN (SELECT value FROM json_each(?1))";
    pub const LOAD_ROWS: &str = "SELECT space_id, table_name, row_id, fields, marks FROM rows \
         WHERE (space_id, table_name, row_id) IN \
         (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?1))";
    pub const LOAD_ROLES: &str =
        "SELECT space_id, role FROM members WHERE user_id = ?1 AND space_id IN (SELECT value FROM json_each(?2))";
    pub const LOAD_VERDICTS: &str = "SELECT op_id, status, reason, code FROM verdicts WHERE user_id = ?1 \
         AND op_id IN (SELECT value FROM json_each(?2))";
    /// `WHERE true` keeps SQLite from reading `ON CONFLICT` as a join constraint.
    pub const REMEMBER: &str =
        "INSERT INTO verdicts (user_id, op_id, status, reason, code, space_id, table_name, row_id, decided_at) \
         SELECT ?1, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
                json_extract(value, '$[6]'), ?3 \
         FROM json_each(?2) WHERE true \
         ON CONFLICT (user_id, op_id) DO NOTHING RETURNING op_id";
    pub const WRITE_ROWS: &str = "INSERT INTO rows (space_id, table_name, row_id, fields, marks, seq) \
         SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]') \
         FROM json_each(?1) WHERE true \
         ON CONFLICT (space_id, table_name, row_id) \
         DO UPDATE SET fields = excluded.fields, marks = excluded.marks, seq = excluded.seq";
    pub const WRITE_HEAD: &str = "UPDATE heads SET seq = ?2 WHERE space_id = ?1";
    /// `POST /v1/verdicts`: the saved verdicts of some opIds, with the row a rejection names.
    pub const RECALL: &str = "SELECT op_id, status, reason, code, space_id, table_name, row_id FROM verdicts \
         WHERE user_id = ?1 AND op_id IN (SELECT value FROM json_each(?2))";
    /// Rows a recalled rejection may carry: only of spaces the user may read now.
    pub const LOAD_READABLE_ROWS: &str = "SELECT r.space_id, r.table_name, r.row_id, r.fields, r.marks FROM rows r \
         WHERE (r.space_id, r.table_name, r.row_id) IN \
         (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?2)) \
         AND (r.space_id = ?3 OR EXISTS (SELECT 1 FROM members m WHERE m.space_id = r.space_id AND m.user_id = ?1))";
    pub const PULL: &str = "SELECT table_name, row_id, fields, marks, seq FROM rows \
         WHERE space_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";
    pub const HEAD: &str = "SELECT seq FROM heads WHERE space_id = ?1";
    pub const MEMBERSHIPS: &str = "SELECT m.space_id, m.role, COALESCE(h.seq, 0) FROM members m \
         LEFT JOIN heads h ON h.space_id = m.space_id WHERE m.user_id = ?1";
    pub const COUNTS: &str = "SELECT (SELECT count(*) FROM verdicts WHERE user_id = ?1), \
                (SELECT count(*) FROM rows WHERE space_id = ?2), \
                COALESCE((SELECT seq FROM heads WHERE space_id = ?2), 0)";
    pub const SPACE_EXISTS: &str = "SELECT count(*) FROM heads WHERE space_id = ?1";
    pub const CREATE_SPACE: &str = "INSERT INTO spaces (space_id, created_by, created_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (space_id) DO NOTHING RETURNING space_id";
    pub const MEMBER: &str = "SELECT role FROM members WHERE space_id = ?1 AND user_id = ?2";
    pub const OWNERS: &str = "SELECT count(*) FROM members WHERE space_id = ?1 AND role = 'owner'";
    pub const SET_MEMBER: &str = "INSERT INTO members (space_id, user_id, role, changed_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (space_id, user_id) DO UPDATE SET role = excluded.role, changed_at = excluded.changed_at";
    pub const REMOVE_MEMBER: &str = "DELETE FROM members WHERE space_id = ?1 AND user_id = ?2";
    pub const LIST_MEMBERS: &str = "SELECT user_id, role FROM members WHERE space_id = ?1";
}

/// SQLite storage: a one-connection write pool and a read pool.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file and runs the migrations.
    pub async fn connect(url: &str, max_readers: u32) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options.clone())
            .await?;
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(max_readers.clamp(1, 16))
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options.create_if_missing(false))
                .await?
        };
        let store = SqliteStore { writer, reader };
        store.migrate().await?;
        Ok(store)
    }

    /// The write pool (one connection), for tests and the load benchmark.
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.writer.begin_with(sql::BEGIN).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS marksync_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM marksync_migrations").fetch_all(&mut *tx).await?;
        for (version, migration) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            sqlx::raw_sql(*migration).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO marksync_migrations (version, applied_at) VALUES (?1, ?2)")
                .bind(version)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// One space's rows changed after `cursor` (`GET /v1/pull`: the personal space).
    pub(crate) async fn pull(&self, space: &str, cursor: u64, limit: usize) -> Result<PullResponse, StoreError> {
        let rows =
            sqlx::query_as(sql::PULL).bind(space).bind(seq_to_db(cursor)?).bind(limit as i64 + 1).fetch(&self.reader);
        page(rows, cursor, limit).await
    }

    /// The saved verdicts of `op_ids`, and the stored rows their rejections
    /// name that `user` may read now (read-only).
    pub(crate) async fn recall(
        &self,
        user: &str,
        personal: &str,
        op_ids: &[&str],
    ) -> Result<(Vec<RecalledVerdict>, Vec<StoredRow>), StoreError> {
        let saved: Vec<RecalledVerdict> =
            sqlx::query_as(sql::RECALL).bind(user).bind(json(&op_ids)?).fetch_all(&self.reader).await?;
        let keys = rejected_keys(personal, &saved);
        if keys.is_empty() {
            return Ok((saved, Vec::new()));
        }
        let rows: Vec<StoredRow> = sqlx::query_as(sql::LOAD_READABLE_ROWS)
            .bind(user)
            .bind(json(&keys)?)
            .bind(personal)
            .fetch_all(&self.reader)
            .await?;
        Ok((saved, rows))
    }

    /// A space's head alone: one primary-key read (an event stream's connect), never a count.
    pub(crate) async fn head(&self, space: &str) -> Result<i64, StoreError> {
        let head: Option<i64> = sqlx::query_scalar(sql::HEAD).bind(space).fetch_optional(&self.reader).await?;
        Ok(head.unwrap_or(0))
    }

    /// (space, role, head) of every stored membership of `user`.
    pub(crate) async fn memberships(&self, user: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sqlx::query_as(sql::MEMBERSHIPS).bind(user).fetch_all(&self.reader).await?)
    }

    pub(crate) async fn counts(&self, user: &str) -> Result<Counts, StoreError> {
        let (verdicts, rows, head): (i64, i64, i64) = sqlx::query_as(sql::COUNTS)
            .bind(user)
            .bind(marksync::space::personal(user))
            .fetch_one(&self.reader)
            .await?;
        Ok(Counts { verdicts, rows, head })
    }

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    /// The per-op judge of the benchmark: PROTOCOL §3 literally, a few statements per op.
    #[cfg(feature = "bench-per-op")]
    pub(crate) async fn push_per_op(&self, user: &str, schema: &Schema, batch: &[Op]) -> Result<Judgement, PushError> {
        use marksync::judge::{decide, Decision, JudgeError, Remembered};
        use marksync::protocol::{Outcome, Verdict, MAX_JUDGED_PER_PUSH};
        let mut tx = self.writer.begin_with(sql::BEGIN).await?;
        let personal = marksync::space::personal(user);
        sqlx::query(sql::ENSURE_HEAD).bind(&personal).execute(&mut *tx).await?;
        let mut head = seq_from_db(sqlx::query_scalar(sql::HEAD).bind(&personal).fetch_one(&mut *tx).await?)?;
        let mut out = Judgement::default();
        for (i, op) in batch.iter().take(MAX_JUDGED_PER_PUSH).enumerate() {
            if op.schema > schema.version {
                if i == 0 {
                    return Err(JudgeError::SchemaTooNew { op: op.schema, server: schema.version }.into());
                }
                break;
            }
            let stored: Option<(String, String)> = sqlx::query_as(
                "SELECT fields, marks FROM rows WHERE space_id = ?1 AND table_name = ?2 AND row_id = ?3",
            )
            .bind(&personal)
            .bind(&op.table)
            .bind(&op.row_id)
            .fetch_optional(&mut *tx)
            .await?;
            let current = stored.map(|(f, m)| decode_row(&f, &m)).transpose()?;
            let decision = decide(schema, op, current.as_ref(), &Limits::default());
            let remembered = match &decision {
                Decision::Apply { .. } => Remembered::Applied,
                Decision::Reject { code, reason } => {
                    Remembered::Rejected { reason: reason.clone(), code: code.clone() }
                }
            };
            let (reason, code) = match &remembered {
                Remembered::Applied => (None, None),
                Remembered::Rejected { reason, code } => (Some(reason.as_str()), Some(code.as_str())),
            };
            let fresh: Option<String> = sqlx::query_scalar(
                "INSERT INTO verdicts (user_id, op_id, status, reason, code, decided_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (user_id, op_id) DO NOTHING RETURNING status",
            )
            .bind(user)
            .bind(op.op_id.as_str())
            .bind(remembered.status())
            .bind(reason)
            .bind(code)
            .bind(now_ms())
            .fetch_optional(&mut *tx)
            .await?;
            let outcome = if fresh.is_none() {
                let (status, reason, code): (String, Option<String>, Option<String>) =
                    sqlx::query_as("SELECT status, reason, code FROM verdicts WHERE user_id = ?1 AND op_id = ?2")
                        .bind(user)
                        .bind(op.op_id.as_str())
                        .fetch_one(&mut *tx)
                        .await?;
                Remembered::from_columns(&status, reason, code)
                    .ok_or_else(|| StoreError::Corrupt(status.clone()))?
                    .replay(current.as_ref())
            } else {
                match decision {
                    Decision::Apply { row, moved } => {
                        if moved {
                            head += 1;
                            let (f, m) = encode_row(&row)?;
                            sqlx::query(
                                "INSERT INTO rows (space_id, table_name, row_id, fields, marks, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                                 ON CONFLICT (space_id, table_name, row_id) DO UPDATE SET fields = excluded.fields, marks = excluded.marks, seq = excluded.seq",
                            )
                            .bind(&personal)
                            .bind(&op.table)
                            .bind(&op.row_id)
                            .bind(f)
                            .bind(m)
                            .bind(seq_to_db(head)?)
                            .execute(&mut *tx)
                            .await?;
                        }
                        Outcome::Applied
                    }
                    Decision::Reject { code, reason } => Outcome::Rejected { reason, code, row: current },
                }
            };
            out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome });
        }
        sqlx::query(sql::WRITE_HEAD).bind(&personal).bind(seq_to_db(head)?).execute(&mut *tx).await?;
        tx.commit().await?;
        out.heads = vec![(personal.as_str().into(), head)];
        Ok(out)
    }
}

/// A push transaction on the single write connection, begun `IMMEDIATE`:
/// SQLite's one writer is the user's lock (and every other user's).
pub(crate) struct SqlitePush(Transaction<'static, Sqlite>);

impl PushBackend for SqliteStore {
    type Txn = SqlitePush;

    async fn begin(&self) -> Result<SqlitePush, StoreError> {
        Ok(SqlitePush(self.writer.begin_with(sql::BEGIN).await?))
    }
}

impl PushTxn for SqlitePush {
    async fn lock(
        &mut self,
        personal: Option<&str>,
        spaces: &[&str],
        _ctl: &PushControl,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        if let Some(p) = personal {
            sqlx::query(sql::ENSURE_HEAD).bind(p).execute(&mut *self.0).await?;
        }
        Ok(sqlx::query_as(sql::READ_HEADS).bind(json(&spaces)?).fetch_all(&mut *self.0).await?)
    }

    async fn load(&mut self, sender: &str, keys: &BatchKeys<'_>) -> Result<Loaded, StoreError> {
        let rows = sqlx::query_as(sql::LOAD_ROWS).bind(json(&keys.rows)?).fetch_all(&mut *self.0).await?;
        let verdicts =
            sqlx::query_as(sql::LOAD_VERDICTS).bind(sender).bind(json(&keys.ops)?).fetch_all(&mut *self.0).await?;
        let roles =
            sqlx::query_as(sql::LOAD_ROLES).bind(sender).bind(json(&keys.spaces)?).fetch_all(&mut *self.0).await?;
        Ok(Loaded { rows, verdicts, roles })
    }

    async fn remember(&mut self, sender: &str, v: &VerdictColumns) -> Result<usize, StoreError> {
        let cols: Vec<_> = (0..v.ids.len())
            .map(|i| (&v.ids[i], v.statuses[i], &v.reasons[i], &v.codes[i], &v.spaces[i], &v.tables[i], &v.row_ids[i]))
            .collect();
        let back: Vec<String> = sqlx::query_scalar(sql::REMEMBER)
            .bind(sender)
            .bind(json(&cols)?)
            .bind(now_ms())
            .fetch_all(&mut *self.0)
            .await?;
        Ok(back.len())
    }

    async fn write_rows(&mut self, writes: &[RowWrite]) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(writes.len());
        for w in writes {
            let (fields, marks) = encode_row(&w.row)?;
            rows.push((&*w.space, w.key.table.as_str(), w.key.row_id.as_str(), fields, marks, seq_to_db(w.seq)?));
        }
        sqlx::query(sql::WRITE_ROWS).bind(json(&rows)?).execute(&mut *self.0).await?;
        Ok(())
    }

    async fn write_heads(&mut self, heads: &[(SpaceId, u64)]) -> Result<(), StoreError> {
        for (space, head) in heads {
            sqlx::query(sql::WRITE_HEAD).bind(&**space).bind(seq_to_db(*head)?).execute(&mut *self.0).await?;
        }
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(self.0.commit().await?)
    }

    async fn rollback(self) -> Result<(), StoreError> {
        Ok(self.0.rollback().await?)
    }
}

impl MemberBackend for SqliteStore {
    type Txn = SqlitePush;

    async fn begin_members(&self) -> Result<SqlitePush, StoreError> {
        Ok(SqlitePush(self.writer.begin_with(sql::BEGIN).await?))
    }
}

impl MemberTxn for SqlitePush {
    async fn ensure_head(&mut self, space: &str) -> Result<(), StoreError> {
        sqlx::query(sql::ENSURE_HEAD).bind(space).execute(&mut *self.0).await?;
        Ok(())
    }

    /// The single writer is every space's lock already: whether the row exists.
    async fn lock_head(&mut self, space: &str) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(sql::SPACE_EXISTS).bind(space).fetch_one(&mut *self.0).await?;
        Ok(n > 0)
    }

    async fn insert_space(&mut self, space: &str, owner: &str) -> Result<bool, StoreError> {
        let made: Option<String> = sqlx::query_scalar(sql::CREATE_SPACE)
            .bind(space)
            .bind(owner)
            .bind(now_ms())
            .fetch_optional(&mut *self.0)
            .await?;
        Ok(made.is_some())
    }

    async fn member(&mut self, space: &str, user: &str) -> Result<Option<Role>, StoreError> {
        let role: Option<String> =
            sqlx::query_scalar(sql::MEMBER).bind(space).bind(user).fetch_optional(&mut *self.0).await?;
        role.as_deref().map(super::stored_role).transpose()
    }

    async fn owners(&mut self, space: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(sql::OWNERS).bind(space).fetch_one(&mut *self.0).await?)
    }

    async fn set(&mut self, space: &str, user: &str, role: Option<Role>) -> Result<(), StoreError> {
        match role {
            Some(r) => {
                sqlx::query(sql::SET_MEMBER)
                    .bind(space)
                    .bind(user)
                    .bind(r.as_str())
                    .bind(now_ms())
                    .execute(&mut *self.0)
                    .await?
            }
            None => sqlx::query(sql::REMOVE_MEMBER).bind(space).bind(user).execute(&mut *self.0).await?,
        };
        Ok(())
    }

    async fn list(&mut self, space: &str) -> Result<Vec<(String, Role)>, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(sql::LIST_MEMBERS).bind(space).fetch_all(&mut *self.0).await?;
        rows.into_iter().map(|(u, r)| Ok((u, super::stored_role(&r)?))).collect()
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(self.0.commit().await?)
    }
}

/// A read transaction on a reader connection: in WAL mode it sees the
/// database as of its first read, throughout.
pub(crate) struct SqliteSnapshot(Transaction<'static, Sqlite>);

impl PullBackend for SqliteStore {
    type Snapshot = SqliteSnapshot;

    async fn snapshot(&self) -> Result<SqliteSnapshot, StoreError> {
        Ok(SqliteSnapshot(self.reader.begin().await?))
    }
}

impl PullSnapshot for SqliteSnapshot {
    async fn memberships(&mut self, user: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(sqlx::query_as(sql::MEMBERSHIPS).bind(user).fetch_all(&mut *self.0).await?)
    }

    async fn head(&mut self, space: &str) -> Result<i64, StoreError> {
        let head: Option<i64> = sqlx::query_scalar(sql::HEAD).bind(space).fetch_optional(&mut *self.0).await?;
        Ok(head.unwrap_or(0))
    }

    async fn page(
        &mut self,
        space: &str,
        cursor: u64,
        limit: usize,
        bytes: usize,
    ) -> Result<(SpacePage, usize), StoreError> {
        let rows =
            sqlx::query_as(sql::PULL).bind(space).bind(seq_to_db(cursor)?).bind(limit as i64 + 1).fetch(&mut *self.0);
        page_within(rows, space.to_owned(), cursor, limit, bytes).await
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("encode parameter: {e}")))
}
