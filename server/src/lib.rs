//! # marksync-server
//!
//! The reference server of the marksync protocol (PROTOCOL.md): `POST /v1/push`,
//! `GET /v1/pull`, `POST /v1/verdicts`, `GET /v1/events`, over SQLite or PostgreSQL. Every rule —
//! merge, marks, validation, verdict replay — is the core crate's
//! ([`marksync::judge`]); this crate only moves bytes, holds the spaces' locks
//! and persists what the judge decided.
//!
//! ```no_run
//! # async fn run() -> Result<(), marksync_server::ServerError> {
//! let config = marksync_server::Config::with_database("sqlite://marksync.db");
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let server = marksync_server::start(config, listener).await?;
//! println!("listening on {}", server.addr);
//! server.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Or inside the app's own axum server, nested under any path: [`embed`].
#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod app;
pub mod auth;
pub mod budget;
pub mod caps;
pub mod clock;
pub mod config;
pub mod conn;
pub mod embed;
pub mod error;
pub mod faults;
pub mod guard;
pub mod logging;
pub mod memory;
pub mod metrics;
mod params;
pub mod poke;
pub mod rate;
pub mod ready;
mod routes;
pub mod rules;
pub mod store;
pub mod turn;
pub mod webhook;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use app::{load_schema, App, AppState, SchemaFile};
pub use config::Config;
pub use error::ServerError;
pub use poke::Poke;
pub use routes::router;
#[cfg(feature = "sabotage")]
pub use store::Sabotage;
pub use store::Store;

/// A server whose database is open, migrated and proven writable, not yet
/// listening: a binary prepares first and binds after, so that its port never
/// accepts connections it cannot answer (a database still unreachable at start
/// fails the start instead).
#[derive(Debug)]
pub struct Prepared {
    app: App,
    router: axum::Router,
    limits: conn::Limits,
    stop_tx: watch::Sender<bool>,
}

/// Opens the database and builds the server for `config` (its dev-auth check
/// reads `config.listen`), raising the soft open-files limit to the hard one.
pub async fn prepare(config: Config) -> Result<Prepared, ServerError> {
    let limits = limits(&config).fit_to(conn::raise_open_files_limit());
    let config = Config { max_connections: limits.max_connections, ..config };
    let (stop_tx, stop_rx) = watch::channel(false);
    let app = App::build(&config, config.listen, stop_rx).await?;
    let router = routes::router(app.clone(), &config)?;
    Ok(Prepared { app, router, limits, stop_tx })
}

impl Prepared {
    /// Serves on `listener` until `shutdown` completes (see [`serve`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        run(self.app, self.router, listener, self.limits, self.stop_tx, shutdown).await
    }
}

/// Serves on `listener` until `shutdown` completes, then lets in-flight
/// requests finish (for at most `--shutdown-timeout-ms`, then cuts the
/// connections left), ends event streams and closes the database. Raises the
/// soft open-files limit to the hard one first.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let limits = limits(&config).fit_to(conn::raise_open_files_limit());
    // The streams' share of connections is counted from the cap in force.
    let config = Config { max_connections: limits.max_connections, ..config };
    let (stop_tx, stop_rx) = watch::channel(false);
    let app = App::build(&config, listener.local_addr()?, stop_rx).await?;
    let router = routes::router(app.clone(), &config)?;
    run(app, router, listener, limits, stop_tx, shutdown).await
}

fn limits(config: &Config) -> conn::Limits {
    conn::Limits {
        max_connections: config.max_connections,
        header_timeout: Duration::from_millis(config.header_timeout_ms),
        shutdown_timeout: Duration::from_millis(config.shutdown_timeout_ms),
    }
}

async fn run(
    app: App,
    router: axum::Router,
    listener: TcpListener,
    limits: conn::Limits,
    stop_tx: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    tracing::info!(addr = %listener.local_addr()?, max_connections = limits.max_connections, "listening");
    let stopping = async move {
        shutdown.await;
        // Event streams end now; they would otherwise hold their connections to the deadline.
        let _ = stop_tx.send(true);
    };
    conn::serve(listener, router, limits, Arc::clone(&app.metrics), stopping).await;
    app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// A server running in this process (tests, benchmarks, embedding).
#[derive(Debug)]
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its shared state (store, metrics…).
    pub app: App,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl RunningServer {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Graceful shutdown: in-flight requests finish (within the shutdown
    /// timeout; then their connections are cut), then the database closes.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.map_err(|e| ServerError::Task(e.to_string()))?
    }
}

/// Starts a server on `listener` in a background task.
pub async fn start(config: Config, listener: TcpListener) -> Result<RunningServer, ServerError> {
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let app = App::build(&config, addr, stop_rx).await?;
    let router = routes::router(app.clone(), &config)?;
    let limits = limits(&config);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router_app = app.clone();
    let task = tokio::spawn(async move {
        run(router_app, router, listener, limits, stop_tx, async move {
            let _ = rx.await;
        })
        .await
    });
    Ok(RunningServer { addr, app, stop: Some(tx), task })
}
