//! The SQLite dialect: one write connection, and every write transaction
//! begins `IMMEDIATE` on it — a single writer, so a space's lock (and every
//! other's) is held for the whole transaction. Reads use a separate pool of
//! connections; the database runs in WAL mode so readers never wait for the
//! writer. Batches travel as one JSON parameter each, unpacked with
//! `json_each`, so no statement ever nears the parameter limit.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult, SqliteSynchronous};
use sqlx::Sqlite;

use super::dialect::{migrations, Dialect, EncodedRow, Key, Pools, Query, Statements, VerdictColumns};
use super::error::DbError;

/// `[spaces]` as one JSON array: the single writer already holds every lock.
const READ_HEADS: &str = "SELECT space_id, seq FROM heads WHERE space_id IN (SELECT value FROM json_each($1))";
impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const MIGRATIONS: &'static [(i64, &'static str)] = migrations!("sqlite");
    const SQL: Statements = Statements {
        begin_write: "BEGIN IMMEDIATE",
        begin_snapshot: "BEGIN",
        migrations_table: "CREATE TABLE IF NOT EXISTS marksync_migrations \
             (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        // `BEGIN IMMEDIATE` is the lock.
        migration_lock: None,
        lock_head: "SELECT seq FROM heads WHERE space_id = $1",
        lock_heads: READ_HEADS,
        #[cfg(feature = "sabotage")]
        read_heads: READ_HEADS,
        load_rows: "SELECT space_id, table_name, row_id, fields, marks FROM rows \
             WHERE (space_id, table_name, row_id) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
              FROM json_each($1))",
        load_roles: "SELECT space_id, role FROM members WHERE user_id = $1 \
             AND space_id IN (SELECT value FROM json_each($2))",
        load_verdicts: "SELECT op_id, status, reason, code FROM verdicts WHERE user_id = $1 \
             AND op_id IN (SELECT value FROM json_each($2))",
        // `WHERE true` keeps SQLite from reading `ON CONFLICT` as a join constraint.
        remember:
            "INSERT INTO verdicts (user_id, op_id, status, reason, code, space_id, table_name, row_id, decided_at) \
             SELECT $1, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                    json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
                    json_extract(value, '$[6]'), $3 \
             FROM json_each($2) WHERE true \
             ON CONFLICT (user_id, op_id) DO NOTHING",
        write_rows: "INSERT INTO rows (space_id, table_name, row_id, fields, marks, seq) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                    json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]') \
             FROM json_each($1) WHERE true \
             ON CONFLICT (space_id, table_name, row_id) \
             DO UPDATE SET fields = excluded.fields, marks = excluded.marks, seq = excluded.seq",
        write_heads: "UPDATE heads SET seq = json_extract(h.value, '$[1]') FROM json_each($1) AS h \
             WHERE heads.space_id = json_extract(h.value, '$[0]')",
        recall: "SELECT op_id, status, reason, code, space_id, table_name, row_id FROM verdicts \
             WHERE user_id = $1 AND op_id IN (SELECT value FROM json_each($2))",
        load_readable_rows:
            "SELECT r.space_id, r.table_name, r.row_id, r.fields, r.marks FROM rows r \
             WHERE (r.space_id, r.table_name, r.row_id) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
              FROM json_each($2)) \
             AND (r.space_id = $3 OR EXISTS (SELECT 1 FROM members m WHERE m.space_id = r.space_id AND m.user_id = $1))",
        // One process owns the file: nobody else to tell.
        notify: None,
    };

    async fn open(url: &str, max_readers: u32) -> Result<Pools<Sqlite>, DbError> {
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
        Ok(Pools { writer, reader })
    }

    fn bind_list<'q>(q: Query<'q, Sqlite>, items: &[&str]) -> Result<Query<'q, Sqlite>, DbError> {
        Ok(q.bind(json(&items)?))
    }

    fn bind_keys<'q>(q: Query<'q, Sqlite>, keys: &[Key<'_>]) -> Result<Query<'q, Sqlite>, DbError> {
        let keys: Vec<_> = keys.iter().map(|k| (k.space, k.table, k.row_id)).collect();
        Ok(q.bind(json(&keys)?))
    }

    fn bind_verdicts<'q>(q: Query<'q, Sqlite>, v: &VerdictColumns) -> Result<Query<'q, Sqlite>, DbError> {
        let rows: Vec<_> = (0..v.len())
            .map(|i| (&v.ids[i], v.statuses[i], &v.reasons[i], &v.codes[i], &v.spaces[i], &v.tables[i], &v.row_ids[i]))
            .collect();
        Ok(q.bind(json(&rows)?))
    }

    fn bind_rows<'q>(q: Query<'q, Sqlite>, rows: &[EncodedRow<'_>]) -> Result<Query<'q, Sqlite>, DbError> {
        let rows: Vec<_> =
            rows.iter().map(|r| (r.key.space, r.key.table, r.key.row_id, &r.fields, &r.marks, r.seq)).collect();
        Ok(q.bind(json(&rows)?))
    }

    fn bind_heads<'q>(q: Query<'q, Sqlite>, heads: &[(&str, i64)]) -> Result<Query<'q, Sqlite>, DbError> {
        Ok(q.bind(json(&heads)?))
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, DbError> {
    serde_json::to_string(value).map_err(|e| DbError::Corrupt(format!("encode parameter: {e}")))
}
