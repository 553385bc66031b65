//! The schema of the database: each migration of the dialect applied once,
//! in order, in one write transaction, however many servers start at once.

use super::conn::{Backend, Conn};
use super::dialect::Pools;
use super::error::DbError;

/// Applies the migrations not applied yet.
pub(crate) async fn run<D: Backend>(pools: &Pools<D>) -> Result<(), DbError> {
    let mut tx = pools.write().await?;
    if let Some(lock) = D::SQL.migration_lock {
        tx.run_script(lock).await?;
    }
    tx.run_script(D::SQL.migrations_table).await?;
    let done = tx.migrations_done().await?;
    for (version, migration) in D::MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        tx.run_script(migration).await?;
        tx.record_migration(*version).await?;
    }
    tx.commit().await?;
    Ok(())
}
