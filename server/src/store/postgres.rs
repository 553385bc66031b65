//! The PostgreSQL dialect: a space's head row, locked `FOR UPDATE`, is the
//! space's lock; batches travel as arrays (`unnest`), one statement per
//! step; pokes reach the other server processes by `NOTIFY`.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgQueryResult};
use sqlx::{Connection, Postgres};
use tokio::sync::watch;

use super::conn::POKES;
use super::dialect::{
    healing, migrations, Dialect, EncodedRow, Key, Migration, Pools, Query, Statements, VerdictColumns,
};
use super::error::{redact, DbError};
use super::DbOptions;
use crate::poke::Poke;

impl Dialect for Postgres {
    const BACKEND: &'static str = "postgres";
    const MIGRATIONS: &'static [Migration] = migrations!("postgres");
    const SQL: Statements = Statements {
        begin_write: "BEGIN",
        begin_snapshot: "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        migrations_table: "CREATE TABLE IF NOT EXISTS marksync_migrations \
             (version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
        // Any fixed number ("marksync"): serialises the migrations of concurrent starts.
        migration_lock: Some("SELECT pg_advisory_xact_lock(7881706628699483747)"),
        // A cap counted under one space's lock alone lets requests about
        // other spaces count the same rows at once: the user's lock too.
        lock_user: Some("SELECT pg_advisory_xact_lock(hashtextextended('marksync-user:' || $1, 0))"),
        lock_head: "SELECT seq FROM heads WHERE space_id = $1 FOR UPDATE",
        // In byte order of their names (`COLLATE "C"`): every push takes
        // them in the same order, so none waits in a cycle.
        lock_heads: "SELECT space_id, seq FROM heads WHERE space_id = ANY($1::text[]) ORDER BY space_id FOR UPDATE",
        #[cfg(feature = "sabotage")]
        read_heads: "SELECT space_id, seq FROM heads WHERE space_id = ANY($1::text[])",
        // Written as a join from the (distinct) keys, so that every plan — custom or
        // the generic plan of a prepared statement — probes the primary key per key.
        // (`op_id = ANY($2)` under a generic plan scanned all of the user's verdicts
        // and tested each against the whole array: 100+ ms at a few thousand verdicts.)
        load_rows: "SELECT r.space_id, r.table_name, r.row_id, r.fields, r.marks, r.ctid::text \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS k(s, t, r) \
             JOIN rows r ON r.space_id = k.s AND r.table_name = k.t AND r.row_id = k.r",
        load_roles: "SELECT m.space_id, m.role FROM unnest($2::text[]) AS k(s) \
             JOIN members m ON m.space_id = k.s AND m.user_id = $1",
        load_verdicts: "SELECT v.op_id, v.status, v.reason, v.code \
             FROM unnest($2::text[]) AS k(o) JOIN verdicts v ON v.user_id = $1 AND v.op_id = k.o",
        remember: "INSERT INTO verdicts (user_id, op_id, status, reason, code, space_id, table_name, row_id, decided_at) \
             SELECT $1, o, s, r, c, p, t, w, $9 \
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) \
                  AS v(o, s, r, c, p, t, w)",
        remember_or_skip: "INSERT INTO verdicts (user_id, op_id, status, reason, code, space_id, table_name, row_id, decided_at) \
             SELECT $1, o, s, r, c, p, t, w, $9 \
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) \
                  AS v(o, s, r, c, p, t, w) \
             ON CONFLICT (user_id, op_id) DO NOTHING",
        // The push loaded its rows under its spaces' locks: a row it calls new
        // is not stored, and one another writer stored meanwhile fails the
        // insert, as a unique violation (judged again).
        insert_rows: "INSERT INTO rows (space_id, table_name, row_id, fields, marks, seq) \
             SELECT p, t, r, f, m, s \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) AS w(p, t, r, f, m, s)",
        // By the row version's place (a TID scan), not by key: half the cost
        // of a primary-key descent per row. The key is checked too, so a
        // place reused by another row after a removal is never rewritten.
        update_rows: Some(
            "UPDATE rows x SET fields = w.f, marks = w.m, seq = w.s \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::tid[]) \
                  AS w(p, t, r, f, m, s, c) \
             WHERE x.ctid = w.c AND x.space_id = w.p AND x.table_name = w.t AND x.row_id = w.r",
        ),
        write_heads: "UPDATE heads h SET seq = v.s FROM unnest($1::text[], $2::int8[]) AS v(id, s) \
             WHERE h.space_id = v.id",
        recall: "SELECT v.op_id, v.status, v.reason, v.code, v.space_id, v.table_name, v.row_id \
             FROM unnest($2::text[]) AS k(o) JOIN verdicts v ON v.user_id = $1 AND v.op_id = k.o",
        load_readable_rows: "SELECT r.space_id, r.table_name, r.row_id, r.fields, r.marks \
             FROM unnest($2::text[], $3::text[], $4::text[]) AS k(s, t, r) \
             JOIN rows r ON r.space_id = k.s AND r.table_name = k.t AND r.row_id = k.r \
             WHERE r.space_id = $5 OR EXISTS (SELECT 1 FROM members m WHERE m.space_id = r.space_id AND m.user_id = $1)",
        // Two server processes never claim one space's queue (SKIP LOCKED).
        claim_deliveries: "UPDATE delivery_queues SET next_at = $1 WHERE space_id IN \
             (SELECT space_id FROM delivery_queues WHERE next_at <= $2 ORDER BY next_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
             RETURNING space_id, failures::bigint",
        notify: Some("SELECT pg_notify($1, $2)"),
    };

    async fn open(url: &str, options: &DbOptions) -> Result<Pools<Postgres>, DbError> {
        let connect = PgConnectOptions::from_str(url)?;
        let what = |source| DbError::Open { what: redact(url), source };
        // One connection first, bounded by the acquire timeout: its error is the
        // database's own ("connection refused", "password authentication failed"),
        // where a pool would retry until its timeout and say only "pool timed out".
        match tokio::time::timeout(options.acquire_timeout, PgConnection::connect_with(&connect)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
            Ok(Err(e)) => return Err(what(e)),
            Err(_) => return Err(what(sqlx::Error::PoolTimedOut)),
        }
        // A request waits `acquire_timeout` for a connection, never the pool's 30 s
        // default: in an outage it is answered 503 at once and retried by the client.
        let pool = healing(PgPoolOptions::new(), None)
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(what)?;
        Ok(Pools::new(pool.clone(), pool, None, None))
    }

    fn bind_list<'q>(q: Query<'q, Postgres>, items: &[&str]) -> Result<Query<'q, Postgres>, DbError> {
        Ok(q.bind(items))
    }

    fn bind_keys<'q>(q: Query<'q, Postgres>, keys: &[Key<'_>]) -> Result<Query<'q, Postgres>, DbError> {
        let spaces: Vec<&str> = keys.iter().map(|k| k.space).collect();
        let tables: Vec<&str> = keys.iter().map(|k| k.table).collect();
        let row_ids: Vec<&str> = keys.iter().map(|k| k.row_id).collect();
        Ok(q.bind(spaces).bind(tables).bind(row_ids))
    }

    fn bind_verdicts<'q>(q: Query<'q, Postgres>, v: &VerdictColumns) -> Result<Query<'q, Postgres>, DbError> {
        Ok(q.bind(&v.ids)
            .bind(&v.statuses)
            .bind(&v.reasons)
            .bind(&v.codes)
            .bind(&v.spaces)
            .bind(&v.tables)
            .bind(&v.row_ids))
    }

    fn bind_rows<'q>(q: Query<'q, Postgres>, rows: &[EncodedRow<'_>]) -> Result<Query<'q, Postgres>, DbError> {
        let spaces: Vec<&str> = rows.iter().map(|r| r.key.space).collect();
        let tables: Vec<&str> = rows.iter().map(|r| r.key.table).collect();
        let row_ids: Vec<&str> = rows.iter().map(|r| r.key.row_id).collect();
        let fields: Vec<&str> = rows.iter().map(|r| r.fields.as_str()).collect();
        let marks: Vec<&str> = rows.iter().map(|r| r.marks.as_str()).collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        Ok(q.bind(spaces).bind(tables).bind(row_ids).bind(fields).bind(marks).bind(seqs))
    }

    fn bind_places<'q>(q: Query<'q, Postgres>, rows: &[EncodedRow<'_>]) -> Result<Query<'q, Postgres>, DbError> {
        Ok(q.bind(rows.iter().map(|r| r.place).collect::<Vec<_>>()))
    }

    fn bind_heads<'q>(q: Query<'q, Postgres>, heads: &[(&str, i64)]) -> Result<Query<'q, Postgres>, DbError> {
        let (spaces, seqs): (Vec<&str>, Vec<i64>) = heads.iter().copied().unzip();
        Ok(q.bind(spaces).bind(seqs))
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn app_db(conn: &mut Self::Connection) -> crate::rules::AppDb<'_> {
        crate::rules::AppDb::Postgres(conn)
    }
}

/// Resolves once the server stops (the watch's guard is not held across awaits).
async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Forwards the head pokes of every server process on this database
/// (`LISTEN marksync_pokes`) to `pokes`, until `shutdown`: a push
/// committed by one process wakes the event streams held by all. On a
/// lost connection it listens again (a poke sent meanwhile is missed:
/// clients pull on their next sync, and again when their stream reconnects).
pub(crate) fn forward_pokes(
    pools: &Pools<Postgres>,
    pokes: std::sync::Arc<crate::poke::Hub>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (pool, origin) = (pools.writer.clone(), pools.origin);
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
                        // Its own came back: its streams heard them when they were made.
                        // (Heard twice, a membership poke made each device pull twice.)
                        match Poke::parse(n.payload()) {
                            Some((from, _)) if from == Some(origin) => {}
                            // No stream may be open here: that is fine.
                            Some((_, poke)) => pokes.send(poke),
                            None => {}
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
