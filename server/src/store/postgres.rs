//! The PostgreSQL backend: the user's head row, locked `FOR UPDATE`, is the
//! per-user lock; batches travel as arrays (`unnest`), one statement per step.

use std::str::FromStr;
use std::time::Duration;

use marksync::judge::RowWrite;
#[cfg(feature = "bench-per-op")]
use marksync::judge::{Judgement, Limits};
#[cfg(feature = "bench-per-op")]
use marksync::protocol::Op;
use marksync::protocol::PullResponse;
#[cfg(feature = "bench-per-op")]
use marksync::schema::Schema;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

#[cfg(feature = "bench-per-op")]
use super::codec::{decode_row, seq_from_db};
use super::codec::{encode_row, seq_to_db};
use super::push::{BatchKeys, PushBackend, PushTxn};
#[cfg(feature = "bench-per-op")]
use super::PushError;
use super::{
    now_ms, page, rejected_keys, Counts, PushControl, RecalledVerdict, Sabotage, SavedVerdict, StoreError, StoredRow,
    VerdictColumns,
};

/// Migrations, in order: (version, SQL). Applied once each, under an advisory lock.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/postgres/0001_init.sql")),
    (2, include_str!("../../migrations/postgres/0002_verdict_rows.sql")),
];

/// Any fixed number: the advisory lock that serialises migrations of concurrent starts.
const MIGRATION_LOCK: i64 = 0x6d61_726b_7379_6e63; // "marksync"

/// SQL of the batched judge (see the module docs of [`super`]).
mod sql {
    pub const ENSURE_HEAD: &str = "INSERT INTO heads (user_id, seq) VALUES ($1, 0) ON CONFLICT (user_id) DO NOTHING";
    pub const LOCK_HEAD: &str = "SELECT seq FROM heads WHERE user_id = $1 FOR UPDATE";
    /// Only for [`super::Sabotage::NoLock`].
    pub const READ_HEAD_UNLOCKED: &str = "SELECT seq FROM heads WHERE user_id = $1";
    /// Written as a join from the (distinct) keys, so that every plan — custom or
    /// the generic plan of a prepared statement — probes the primary key per key.
    /// (`op_id = ANY($2)` under a generic plan scanned all of the user's verdicts
    /// and tested each against the whole array: 100+ ms at a few thousand verdicts.)
    pub const LOAD_ROWS: &str = "SELECT r.table_name, r.row_id, r.fields, r.marks \
         FROM unnest($2::text[], $3::text[]) AS k(t, r) \
         JOIN rows r ON r.user_id = $1 AND r.table_name = k.t AND r.row_id = k.r";
    pub const LOAD_VERDICTS: &str = "SELECT v.op_id, v.status, v.reason, v.code \
         FROM unnest($2::text[]) AS k(o) JOIN verdicts v ON v.user_id = $1 AND v.op_id = k.o";
    /// Counts what RETURNING gave back: fewer than sent = answered before by another writer.
    pub const REMEMBER: &str = "WITH ins AS ( \
           INSERT INTO verdicts (user_id, op_id, status, reason, code, table_name, row_id, decided_at) \
           SELECT $1, o, s, r, c, t, w, $8 \
           FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) AS v(o, s, r, c, t, w) \
           ON CONFLICT (user_id, op_id) DO NOTHING RETURNING op_id) \
         SELECT count(*) FROM ins";
    pub const WRITE_ROWS: &str = "INSERT INTO rows (user_id, table_name, row_id, fields, marks, seq) \
         SELECT $1, t, r, f, m, s FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) AS w(t, r, f, m, s) \
         ON CONFLICT (user_id, table_name, row_id) \
         DO UPDATE SET fields = EXCLUDED.fields, marks = EXCLUDED.marks, seq = EXCLUDED.seq";
    /// `POST /v1/verdicts`: the saved verdicts of some opIds, with the row a rejection names.
    pub const RECALL: &str = "SELECT v.op_id, v.status, v.reason, v.code, v.table_name, v.row_id \
         FROM unnest($2::text[]) AS k(o) JOIN verdicts v ON v.user_id = $1 AND v.op_id = k.o";
    pub const WRITE_HEAD: &str = "UPDATE heads SET seq = $2 WHERE user_id = $1";
    /// Delivered to every `LISTEN`ing server process when (and only if) the push commits.
    pub const NOTIFY: &str = "SELECT pg_notify($1, $2)";
    pub const PULL: &str = "SELECT table_name, row_id, fields, marks, seq FROM rows \
         WHERE user_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
    pub const HEAD: &str = "SELECT seq FROM heads WHERE user_id = $1";
    pub const COUNTS: &str = "SELECT (SELECT count(*) FROM verdicts WHERE user_id = $1), \
                (SELECT count(*) FROM rows WHERE user_id = $1), \
                COALESCE((SELECT seq FROM heads WHERE user_id = $1), 0)";
}

/// PostgreSQL storage: a connection pool.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects and runs the migrations (serialised across servers by an advisory lock).
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await?;
        let store = PgStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool (for tests and the load benchmark).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS marksync_migrations (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        let done: Vec<i64> = sqlx::query_scalar("SELECT version FROM marksync_migrations").fetch_all(&mut *tx).await?;
        for (version, migration) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            sqlx::raw_sql(*migration).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO marksync_migrations (version, applied_at) VALUES ($1, $2)")
                .bind(version)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn pull(&self, user: &str, cursor: u64, limit: usize) -> Result<PullResponse, StoreError> {
        let rows =
            sqlx::query_as(sql::PULL).bind(user).bind(seq_to_db(cursor)?).bind(limit as i64 + 1).fetch(&self.pool);
        page(rows, cursor, limit).await
    }

    /// The saved verdicts of `op_ids`, and the stored rows their rejections name (read-only).
    pub(crate) async fn recall(
        &self,
        user: &str,
        op_ids: &[&str],
    ) -> Result<(Vec<RecalledVerdict>, Vec<StoredRow>), StoreError> {
        let saved: Vec<RecalledVerdict> =
            sqlx::query_as(sql::RECALL).bind(user).bind(op_ids).fetch_all(&self.pool).await?;
        let keys = rejected_keys(&saved);
        if keys.is_empty() {
            return Ok((saved, Vec::new()));
        }
        let tables: Vec<&str> = keys.iter().map(|(t, _)| *t).collect();
        let row_ids: Vec<&str> = keys.iter().map(|(_, r)| *r).collect();
        let rows: Vec<StoredRow> =
            sqlx::query_as(sql::LOAD_ROWS).bind(user).bind(&tables).bind(&row_ids).fetch_all(&self.pool).await?;
        Ok((saved, rows))
    }

    /// The head alone: one primary-key read (an event stream's connect), never a count.
    pub(crate) async fn head(&self, user: &str) -> Result<i64, StoreError> {
        let head: Option<i64> = sqlx::query_scalar(sql::HEAD).bind(user).fetch_optional(&self.pool).await?;
        Ok(head.unwrap_or(0))
    }

    pub(crate) async fn counts(&self, user: &str) -> Result<Counts, StoreError> {
        let (verdicts, rows, head): (i64, i64, i64) =
            sqlx::query_as(sql::COUNTS).bind(user).fetch_one(&self.pool).await?;
        Ok(Counts { verdicts, rows, head })
    }

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// The per-op judge of the benchmark: PROTOCOL §3 literally, a few statements per op.
    #[cfg(feature = "bench-per-op")]
    pub(crate) async fn push_per_op(&self, user: &str, schema: &Schema, batch: &[Op]) -> Result<Judgement, PushError> {
        use marksync::judge::{decide, Decision, JudgeError, Remembered};
        use marksync::protocol::{Outcome, Verdict, MAX_JUDGED_PER_PUSH};
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql::ENSURE_HEAD).bind(user).execute(&mut *tx).await?;
        let mut head = seq_from_db(sqlx::query_scalar(sql::LOCK_HEAD).bind(user).fetch_one(&mut *tx).await?)?;
        let mut out = Judgement::default();
        for (i, op) in batch.iter().take(MAX_JUDGED_PER_PUSH).enumerate() {
            if op.schema > schema.version {
                if i == 0 {
                    return Err(JudgeError::SchemaTooNew { op: op.schema, server: schema.version }.into());
                }
                break;
            }
            let stored: Option<(String, String)> =
                sqlx::query_as("SELECT fields, marks FROM rows WHERE user_id = $1 AND table_name = $2 AND row_id = $3")
                    .bind(user)
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
                "INSERT INTO verdicts (user_id, op_id, status, reason, code, decided_at) VALUES ($1, $2, $3, $4, $5, $6) \
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
                    sqlx::query_as("SELECT status, reason, code FROM verdicts WHERE user_id = $1 AND op_id = $2")
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
                                "INSERT INTO rows (user_id, table_name, row_id, fields, marks, seq) VALUES ($1, $2, $3, $4, $5, $6) \
                                 ON CONFLICT (user_id, table_name, row_id) DO UPDATE SET fields = EXCLUDED.fields, marks = EXCLUDED.marks, seq = EXCLUDED.seq",
                            )
                            .bind(user)
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
        sqlx::query(sql::WRITE_HEAD).bind(user).bind(seq_to_db(head)?).execute(&mut *tx).await?;
        tx.commit().await?;
        out.head = head;
        Ok(out)
    }
}

/// A push transaction on a pooled connection: the user's head row, locked
/// `FOR UPDATE`, is the user's lock.
pub(crate) struct PgPush(Transaction<'static, Postgres>);

impl PushBackend for PgStore {
    type Txn = PgPush;

    async fn begin(&self) -> Result<PgPush, StoreError> {
        Ok(PgPush(self.pool.begin().await?))
    }
}

impl PushTxn for PgPush {
    async fn lock(&mut self, user: &str, ctl: &PushControl) -> Result<i64, StoreError> {
        sqlx::query(sql::ENSURE_HEAD).bind(user).execute(&mut *self.0).await?;
        let lock = if ctl.sabotage == Sabotage::NoLock { sql::READ_HEAD_UNLOCKED } else { sql::LOCK_HEAD };
        Ok(sqlx::query_scalar(lock).bind(user).fetch_one(&mut *self.0).await?)
    }

    async fn load(
        &mut self,
        user: &str,
        keys: &BatchKeys<'_>,
    ) -> Result<(Vec<StoredRow>, Vec<SavedVerdict>), StoreError> {
        let tables: Vec<&str> = keys.rows.iter().map(|(t, _)| *t).collect();
        let row_ids: Vec<&str> = keys.rows.iter().map(|(_, r)| *r).collect();
        let stored =
            sqlx::query_as(sql::LOAD_ROWS).bind(user).bind(&tables).bind(&row_ids).fetch_all(&mut *self.0).await?;
        let saved = sqlx::query_as(sql::LOAD_VERDICTS).bind(user).bind(&keys.ops).fetch_all(&mut *self.0).await?;
        Ok((stored, saved))
    }

    async fn remember(&mut self, user: &str, v: &VerdictColumns) -> Result<usize, StoreError> {
        let inserted: i64 = sqlx::query_scalar(sql::REMEMBER)
            .bind(user)
            .bind(&v.ids)
            .bind(&v.statuses)
            .bind(&v.reasons)
            .bind(&v.codes)
            .bind(&v.tables)
            .bind(&v.row_ids)
            .bind(now_ms())
            .fetch_one(&mut *self.0)
            .await?;
        Ok(usize::try_from(inserted).unwrap_or(0))
    }

    async fn write_rows(&mut self, user: &str, writes: &[RowWrite]) -> Result<(), StoreError> {
        let n = writes.len();
        let (mut t, mut r, mut f, mut m, mut s) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for w in writes {
            let (fields, marks) = encode_row(&w.row)?;
            t.push(w.key.table.as_str());
            r.push(w.key.row_id.as_str());
            f.push(fields);
            m.push(marks);
            s.push(seq_to_db(w.seq)?);
        }
        sqlx::query(sql::WRITE_ROWS)
            .bind(user)
            .bind(&t)
            .bind(&r)
            .bind(&f)
            .bind(&m)
            .bind(&s)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn write_head(&mut self, user: &str, head: u64) -> Result<(), StoreError> {
        sqlx::query(sql::WRITE_HEAD).bind(user).bind(seq_to_db(head)?).execute(&mut *self.0).await?;
        Ok(())
    }

    async fn announce(&mut self, user: &str, head: u64) -> Result<(), StoreError> {
        sqlx::query(sql::NOTIFY).bind(POKES).bind(poke_payload(user, head)).execute(&mut *self.0).await?;
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(self.0.commit().await?)
    }

    async fn rollback(self) -> Result<(), StoreError> {
        Ok(self.0.rollback().await?)
    }
}

/// Resolves once the server stops (the watch's guard is not held across awaits).
async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// The `NOTIFY` channel of head pokes between server processes.
const POKES: &str = "marksync_pokes";

/// `"<head> <user>"`: the head first, so any user id (spaces included) follows whole.
fn poke_payload(user: &str, head: u64) -> String {
    format!("{head} {user}")
}

/// The (user, head) of a poke payload; `None` for anything else.
fn parse_poke(payload: &str) -> Option<(&str, u64)> {
    let (head, user) = payload.split_once(' ')?;
    Some((user, head.parse().ok()?))
}

impl PgStore {
    /// Forwards the head pokes of every server process on this database
    /// (`LISTEN marksync_pokes`) to `pokes`, until `shutdown`: a push
    /// committed by one process wakes the event streams held by all. On a
    /// lost connection it listens again (a poke sent meanwhile is missed:
    /// clients pull on their next sync, and again when their stream reconnects).
    pub(crate) fn forward_pokes(
        &self,
        pokes: tokio::sync::broadcast::Sender<crate::Poke>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            loop {
                let listened = async {
                    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
                    listener.listen(POKES).await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                let mut listener = tokio::select! {
                    l = listened => match l {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot LISTEN for pokes of other server processes; trying again in 1 s");
                            tokio::select! {
                                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                                _ = stopped(&mut shutdown) => return,
                            }
                        }
                    },
                    _ = stopped(&mut shutdown) => return,
                };
                loop {
                    let n = tokio::select! {
                        n = listener.recv() => n,
                        _ = stopped(&mut shutdown) => return,
                    };
                    match n {
                        Ok(n) => {
                            if let Some((user, head)) = parse_poke(n.payload()) {
                                // No receiver is fine: no stream is open here.
                                let _ = pokes.send(crate::Poke { user: user.into(), head });
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "lost the LISTEN connection for pokes; listening again");
                            break;
                        }
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poke_payload_carries_any_user_id_whole() {
        assert_eq!(parse_poke(&poke_payload("a user id", 42)), Some(("a user id", 42)));
        assert_eq!(parse_poke("x y"), None);
    }
}
