//! The SQLite dialect: one write connection, and every write transaction
//! begins `IMMEDIATE` on it — a single writer, so a space's lock (and every
//! other's) is held for the whole transaction. Reads use a separate pool of
//! connections; the database runs in WAL mode so readers never wait for the
//! writer. Batches travel as one JSON parameter each, unpacked with
//! `json_each`, so no statement ever nears the parameter limit; a batch of
//! arrays with `jsonb_each`, whose elements come out in SQLite's binary
//! form, so reading each column of one is a step into it, not a parse of
//! its text again (the text form parsed each element once per column).

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult, SqliteSynchronous};
use sqlx::Sqlite;

use super::dialect::{
    healing, migrations, Dialect, EncodedRow, Key, Migration, Pools, Query, Reopen, Statements, VerdictColumns,
};
use super::error::DbError;
use super::DbOptions;

/// `[spaces]` as one JSON array: the single writer already holds every lock.
const READ_HEADS: &str = "SELECT space_id, seq FROM heads WHERE space_id IN (SELECT value FROM json_each($1))";
/// Inserts verdicts, skipping any remembered before (`WHERE true` keeps
/// SQLite from reading `ON CONFLICT` as a join constraint).
const REMEMBER: &str =
    "INSERT INTO verdicts (user_id, op_id, status, reason, code, space_id, table_name, row_id, decided_at) \
             SELECT $1, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                    json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'), \
                    json_extract(value, '$[6]'), $3 \
             FROM jsonb_each($2) WHERE true \
             ON CONFLICT (user_id, op_id) DO NOTHING";

impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const MIGRATIONS: &'static [Migration] = migrations!("sqlite");
    const SQL: Statements = Statements {
        begin_write: "BEGIN IMMEDIATE",
        begin_snapshot: "BEGIN",
        migrations_table: "CREATE TABLE IF NOT EXISTS marksync_migrations \
             (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        // `BEGIN IMMEDIATE` is the lock.
        migration_lock: None,
        lock_user: None,
        lock_head: "SELECT seq FROM heads WHERE space_id = $1",
        lock_heads: READ_HEADS,
        #[cfg(feature = "sabotage")]
        read_heads: READ_HEADS,
        load_rows: "SELECT space_id, table_name, row_id, fields, marks, NULL FROM rows \
             WHERE (space_id, table_name, row_id) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
              FROM jsonb_each($1))",
        load_roles: "SELECT space_id, role FROM members WHERE user_id = $1 \
             AND space_id IN (SELECT value FROM json_each($2))",
        load_verdicts: "SELECT op_id, status, reason, code FROM verdicts WHERE user_id = $1 \
             AND op_id IN (SELECT value FROM json_each($2))",
        // One writer at a time: a verdict remembered before is skipped.
        remember: REMEMBER,
        remember_or_skip: REMEMBER,
        insert_rows: "INSERT INTO rows (space_id, table_name, row_id, fields, marks, seq) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), \
                    json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]') \
             FROM jsonb_each($1) WHERE true \
             ON CONFLICT (space_id, table_name, row_id) \
             DO UPDATE SET fields = excluded.fields, marks = excluded.marks, seq = excluded.seq",
        // The upsert above takes every row: one statement, and SQLite's is no dearer.
        update_rows: None,
        write_heads: "UPDATE heads SET seq = json_extract(h.value, '$[1]') FROM jsonb_each($1) AS h \
             WHERE heads.space_id = json_extract(h.value, '$[0]')",
        recall: "SELECT op_id, status, reason, code, space_id, table_name, row_id FROM verdicts \
             WHERE user_id = $1 AND op_id IN (SELECT value FROM json_each($2))",
        load_readable_rows:
            "SELECT r.space_id, r.table_name, r.row_id, r.fields, r.marks FROM rows r \
             WHERE (r.space_id, r.table_name, r.row_id) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
              FROM jsonb_each($2)) \
             AND (r.space_id = $3 OR EXISTS (SELECT 1 FROM members m WHERE m.space_id = r.space_id AND m.user_id = $1))",
        claim_deliveries: "UPDATE delivery_queues SET next_at = $1 WHERE space_id IN \
             (SELECT space_id FROM delivery_queues WHERE next_at <= $2 ORDER BY next_at LIMIT $3) \
             RETURNING space_id, failures",
        // One process owns the file: nobody else to tell.
        notify: None,
    };

    async fn open(url: &str, options: &DbOptions) -> Result<Pools<Sqlite>, DbError> {
        let file = sqlite_file(url)?;
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30));
        let what = |source| DbError::Open { what: file.describe(), source };
        // The single writer is a queue, not a pool to fail over: a push waits its turn
        // (pushes are bounded per user), so its wait is long; an outage shows on the
        // write itself, answered at once.
        // A database in memory is its one connection: never opened again.
        let reopen = matches!(file, SqliteFile::Path(_)).then(Reopen::default);
        let writer = healing(SqlitePoolOptions::new(), reopen.clone())
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(connect.clone())
            .await
            .map_err(what)?;
        let reader = match file {
            SqliteFile::Memory => writer.clone(),
            SqliteFile::Path(_) => healing(SqlitePoolOptions::new(), None)
                .max_connections(options.max_connections.clamp(1, 16))
                .acquire_timeout(options.acquire_timeout)
                .connect_with(connect.create_if_missing(false))
                .await
                .map_err(what)?,
        };
        Ok(Pools::new(writer, reader, Some(super::writer::Gate::new(options.writer_in_arrival_order())), reopen))
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

    /// Never called: SQLite's upsert rewrites rows by key.
    fn bind_places<'q>(q: Query<'q, Sqlite>, _rows: &[EncodedRow<'_>]) -> Result<Query<'q, Sqlite>, DbError> {
        Ok(q)
    }

    fn bind_heads<'q>(q: Query<'q, Sqlite>, heads: &[(&str, i64)]) -> Result<Query<'q, Sqlite>, DbError> {
        Ok(q.bind(json(&heads)?))
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn app_db(conn: &mut Self::Connection) -> crate::rules::AppDb<'_> {
        crate::rules::AppDb::Sqlite(conn)
    }
}

/// Where a SQLite URL puts the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SqliteFile {
    /// `sqlite::memory:`, asked for by name (tests): gone at every stop.
    Memory,
    /// A file.
    Path(String),
}

impl SqliteFile {
    /// The database as messages name it.
    pub(crate) fn describe(&self) -> String {
        match self {
            SqliteFile::Memory => "the in-memory SQLite database".into(),
            SqliteFile::Path(p) => format!("the SQLite file {p:?}"),
        }
    }
}

/// The file a SQLite URL names. An empty one (`sqlite:`, `sqlite://` — an
/// unset variable in a deployment's `sqlite://$DIR/…`) or memory asked for
/// any other way than `sqlite::memory:` is refused: SQLite would run in
/// memory, answer `applied`, and lose everything at the next stop.
pub(crate) fn sqlite_file(url: &str) -> Result<SqliteFile, DbError> {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    if rest == ":memory:" {
        return Ok(SqliteFile::Memory);
    }
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if query.split('&').any(|p| p.eq_ignore_ascii_case("mode=memory")) || path.contains(":memory:") {
        return Err(DbError::NoFile(format!(
            "--database {url:?} asks for an in-memory SQLite database, lost at every stop: name a file (sqlite://FILE), or say exactly sqlite::memory: (for tests)"
        )));
    }
    if path.trim().is_empty() {
        return Err(DbError::NoFile(format!(
            "--database {url:?} names no SQLite file (an unset variable?): SQLite would run in memory and lose everything at the next stop. Name a file: sqlite://FILE"
        )));
    }
    Ok(SqliteFile::Path(path.to_owned()))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, DbError> {
    serde_json::to_string(value).map_err(|e| DbError::Corrupt(format!("encode parameter: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_url_must_name_a_file_or_ask_for_memory_by_name() {
        assert_eq!(sqlite_file("sqlite::memory:").unwrap(), SqliteFile::Memory);
        assert_eq!(sqlite_file("sqlite://data/m.db").unwrap(), SqliteFile::Path("data/m.db".into()));
        assert_eq!(sqlite_file("sqlite:///var/m.db?mode=rwc").unwrap(), SqliteFile::Path("/var/m.db".into()));
        for bad in [
            "sqlite:",
            "sqlite://",
            "sqlite://?mode=rwc",
            "sqlite://x.db?mode=memory",
            "sqlite://:memory:",
            "sqlite:  ",
        ] {
            assert!(matches!(sqlite_file(bad), Err(DbError::NoFile(_))), "{bad}");
        }
    }
}
