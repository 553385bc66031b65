//! What the server's benches share: their knobs from the environment, and a
//! fresh database per run (a SQLite file in a temp directory, or a database
//! on `MARKSYNC_TEST_POSTGRES_URL`'s server), dropped after it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

/// A knob: the environment's `name`, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The server binary's allocator (see `src/main.rs`), so that an in-process
/// bench measures the server as it ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A name no other run of this process uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}_{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst))
}

/// A fresh database on `backend` (`sqlite` or `postgres`); `None` when
/// PostgreSQL is asked for and `MARKSYNC_TEST_POSTGRES_URL` is unset.
pub async fn fresh_database(backend: &str) -> Option<String> {
    if backend == "sqlite" {
        let dir = std::env::temp_dir().join(unique("marksync-bench"));
        std::fs::create_dir_all(&dir).unwrap();
        return Some(format!("sqlite://{}", dir.join("bench.db").display()));
    }
    let url = std::env::var("MARKSYNC_TEST_POSTGRES_URL").ok()?;
    let name = unique("bench");
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut c).await.unwrap();
    c.close().await.ok();
    Some(format!("{}/{name}", &url[..url.rfind('/').unwrap()]))
}

/// Drops a bench's database (its data is not needed afterwards).
pub async fn drop_database(database: &str) {
    if let Some(dir) = database.strip_prefix("sqlite://").and_then(|f| std::path::Path::new(f).parent()) {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    if let (Some(slash), Ok(admin)) = (database.rfind('/'), std::env::var("MARKSYNC_TEST_POSTGRES_URL")) {
        if database.starts_with("postgres") {
            let name = &database[slash + 1..];
            let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
                .execute(&mut c)
                .await
                .unwrap();
            c.close().await.ok();
        }
    }
}
