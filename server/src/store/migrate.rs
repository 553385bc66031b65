//! The schema of the database: each migration of the dialect applied once,
//! in order, in one write transaction, however many servers start at once —
//! or, with `--no-migrate`, only checked, so that the server can run as a role
//! that may read and write rows but not change the schema.

use super::conn::{Backend, Conn};
use super::dialect::Pools;
use super::error::DbError;

/// What a start does with the migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrations {
    /// Apply those not applied yet (the default, and `marksync-server migrate`).
    Apply,
    /// Apply none; refuse to start when one is missing (`--no-migrate`).
    Check,
}

/// How the migrations recorded in a database compare with this server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationState {
    /// Versions this server has that the database lacks.
    pub missing: Vec<i64>,
    /// Versions the database has that this server does not know.
    pub unknown: Vec<i64>,
    /// The newest version this server knows.
    pub newest: i64,
}

impl MigrationState {
    fn of<D: Backend>(done: &[i64]) -> MigrationState {
        MigrationState {
            missing: D::MIGRATIONS.iter().map(|m| m.0).filter(|v| !done.contains(v)).collect(),
            unknown: done.iter().copied().filter(|v| !D::MIGRATIONS.iter().any(|m| m.0 == *v)).collect(),
            newest: newest::<D>(),
        }
    }

    /// The refusal this state earns, if any (`allow_newer`: unknown versions are accepted).
    pub fn refusal(&self, allow_newer: bool) -> Option<DbError> {
        if !self.missing.is_empty() {
            return Some(DbError::SchemaBehind { missing: self.missing.clone() });
        }
        (!self.unknown.is_empty() && !allow_newer)
            .then(|| DbError::SchemaNewer { unknown: self.unknown.clone(), known: self.newest })
    }
}

/// The newest migration this dialect has.
fn newest<D: Backend>() -> i64 {
    D::MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Applies (or with [`Migrations::Check`], checks) the migrations; a database
/// migrated by a newer server is refused unless `allow_newer`, before anything
/// is applied to it.
pub(crate) async fn run<D: Backend>(pools: &Pools<D>, mode: Migrations, allow_newer: bool) -> Result<(), DbError> {
    if mode == Migrations::Check {
        let state = state(pools).await?;
        if let Some(refusal) = state.refusal(allow_newer) {
            return Err(refusal);
        }
        tracing::info!(version = newest::<D>(), "database schema checked: up to date (--no-migrate)");
        return Ok(());
    }
    let mut tx = pools.write().await?;
    if let Some(lock) = D::SQL.migration_lock {
        tx.run_script(lock).await?;
    }
    tx.run_script(D::SQL.migrations_table).await?;
    let done = tx.migrations_done().await?;
    let state = MigrationState::of::<D>(&done);
    if !state.unknown.is_empty() {
        if !allow_newer {
            return Err(DbError::SchemaNewer { unknown: state.unknown, known: newest::<D>() });
        }
        tracing::warn!(unknown = ?state.unknown, "the database has migrations this server does not know (--allow-newer-schema)");
    }
    let mut applied = Vec::new();
    for (version, name, migration) in D::MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        tx.run_script(migration).await?;
        tx.record_migration(*version).await?;
        applied.push((*version, *name));
    }
    tx.commit().await?;
    // Logged once committed: a migration logged as applied is applied.
    for (version, name) in &applied {
        tracing::info!(version, name, "migration applied");
    }
    tracing::info!(version = newest::<D>(), applied = applied.len(), "database schema up to date");
    Ok(())
}

/// The migrations recorded in the database, against this server's; read
/// without writing (a database never migrated lacks them all).
pub(crate) async fn state<D: Backend>(pools: &Pools<D>) -> Result<MigrationState, DbError> {
    let mut conn = pools.read().await?;
    let done = match conn.migrations_done().await {
        Ok(done) => done,
        Err(DbError::Db(sqlx::Error::Database(e))) if is_missing_table(e.code().as_deref(), e.message()) => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(MigrationState::of::<D>(&done))
}

/// Whether an error says the table of migrations does not exist yet.
fn is_missing_table(code: Option<&str>, message: &str) -> bool {
    // PostgreSQL: undefined_table; SQLite: SQLITE_ERROR with its words.
    code == Some("42P01") || message.contains("no such table")
}
