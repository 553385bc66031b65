//! # marksync-server
//!
//! The reference server of the marksync protocol (PROTOCOL.md): `POST /v1/push`,
//! `GET /v1/pull`, `POST /v1/verdicts`, `GET /v1/events`, over SQLite or PostgreSQL. Every rule —
//! merge, marks, validation, verdict replay — is the core crate's
//! ([`marksync::judge`]); this crate only moves bytes, holds the per-user lock
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
#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod auth;
pub mod config;
pub mod conn;
pub mod error;
pub mod faults;
pub mod guard;
mod http;
mod membership;
pub mod metrics;
pub mod rate;
pub mod store;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use marksync::schema::Schema;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};

pub use config::Config;
pub use http::router;
pub use store::{Sabotage, Store};

use auth::Auth;
use faults::Faults;
use metrics::Metrics;
use rate::RateLimiter;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Listening or serving failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The database could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The schema file cannot be read, does not parse, or its history does
    /// not compose (the problem names the version and step).
    #[error("schema file {path}: {problem}")]
    Schema {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// A configuration that must not run.
    #[error("configuration: {0}")]
    Config(String),
    /// The serving task failed.
    #[error("server task: {0}")]
    Task(String),
}

/// A poke for `/v1/events` streams, within this process and, on PostgreSQL,
/// between server processes (`NOTIFY marksync_pokes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poke {
    /// `space`'s head grew to `head`: its members' streams poke.
    Space {
        /// The space.
        space: Arc<str>,
        /// The new head seq.
        head: u64,
    },
    /// `user`'s memberships changed (joined, left, another role): their streams poke.
    Members {
        /// The user.
        user: Arc<str>,
    },
}

impl Poke {
    /// The `NOTIFY` payload: `s <head> <space>` or `m <user>`, the name last
    /// so that any name (spaces included) follows whole.
    pub fn payload(&self) -> String {
        match self {
            Poke::Space { space, head } => format!("s {head} {space}"),
            Poke::Members { user } => format!("m {user}"),
        }
    }

    /// The poke of a payload; `None` for anything else.
    pub fn parse(payload: &str) -> Option<Poke> {
        match payload.split_once(' ')? {
            ("s", rest) => {
                let (head, space) = rest.split_once(' ')?;
                Some(Poke::Space { space: space.into(), head: head.parse().ok()? })
            }
            ("m", user) if !user.is_empty() => Some(Poke::Members { user: user.into() }),
            _ => None,
        }
    }
}

/// Everything a request handler needs; cheap to clone.
#[derive(Debug, Clone)]
pub struct App(Arc<AppState>);

/// The shared state behind [`App`].
#[derive(Debug)]
pub struct AppState {
    /// Verdicts, rows and heads.
    pub store: Store,
    /// The rules rows are judged by.
    pub schema: Arc<Schema>,
    /// The schema as `GET /v1/schema` sends it, and its `ETag` (computed once).
    pub schema_file: SchemaFile,
    /// Token checking.
    pub auth: Auth,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Fault injection, when enabled.
    pub faults: Option<Arc<Faults>>,
    /// The per-user rate limit, when on.
    pub limiter: Option<RateLimiter>,
    /// Head pokes for `/v1/events`.
    pub pokes: broadcast::Sender<Poke>,
    /// Body limit in bytes.
    pub max_body: usize,
    /// How far ahead of the server's clock an op's `at` may be (`None`: no bound).
    pub max_future_ms: Option<u64>,
    /// The per-user caps and the body deadline of the API routes.
    pub guard: guard::Guard,
    /// Turns true when the server shuts down (ends event streams).
    pub shutdown: watch::Receiver<bool>,
    /// Deliberate breakage for one test run; [`Sabotage::None`] otherwise.
    pub sabotage: Sabotage,
    /// The admin credential (`--admin-token`), when configured.
    pub admin_token: Option<String>,
    /// Use the per-op judge (benchmark only).
    #[cfg(feature = "bench-per-op")]
    pub per_op_judge: bool,
}

impl std::ops::Deref for App {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        &self.0
    }
}

/// The schema's file text and its `ETag`, made once at start.
#[derive(Debug, Clone)]
pub struct SchemaFile {
    /// [`Schema::to_json`].
    pub json: String,
    /// `"<version>-<fingerprint>"`: the same on every server with the same schema.
    pub etag: String,
}

impl SchemaFile {
    /// The file and tag of `schema`.
    pub fn of(schema: &Schema) -> SchemaFile {
        SchemaFile { json: schema.to_json(), etag: format!("\"{}-{}\"", schema.version, schema.fingerprint()) }
    }
}

/// Loads the schema named by the configuration (or the built-in workout
/// schema). A file whose history does not compose stops the start, with the
/// version and step named.
pub fn load_schema(config: &Config) -> Result<Schema, ServerError> {
    if let Some(s) = &config.schema_value {
        return Ok(s.clone());
    }
    match &config.schema {
        None => Ok(Schema::workout()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ServerError::Schema { path: path.display().to_string(), problem: e.to_string() })?;
            Schema::from_json(&text)
                .map_err(|e| ServerError::Schema { path: path.display().to_string(), problem: e.to_string() })
        }
    }
}

impl App {
    /// The server's clock (ms since the Unix epoch) and the judge's bounds at this moment.
    pub fn limits(&self) -> marksync::judge::Limits {
        marksync::judge::Limits::at(store::now_ms_u64(), self.max_future_ms)
    }

    /// Opens the store, loads the schema and builds the shared state.
    /// `listen` is the address actually bound (checked against `--dev-auth`).
    pub async fn build(
        config: &Config,
        listen: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) -> Result<App, ServerError> {
        if config.dev_auth {
            if !listen.ip().is_loopback() {
                return Err(ServerError::Config(format!(
                    "--dev-auth accepts unsigned tokens and refuses to listen on {listen}: use a loopback address"
                )));
            }
            tracing::warn!("**************************************************************");
            tracing::warn!("*  DEV AUTH IS ON: `Bearer dev:<user>` logs in as ANY user.   *");
            tracing::warn!("*  Never run this way with real data. Loopback only.          *");
            tracing::warn!("**************************************************************");
        }
        if config.enable_faults {
            tracing::warn!("fault injection is ON: POST /__faults can drop answers and fail pushes");
        }
        if config.jwt_secret.as_deref().is_none_or(str::is_empty) && !config.dev_auth {
            tracing::warn!("no --jwt-secret (MARKSYNC_JWT_SECRET) and no --dev-auth: every request will be 401");
        }
        if config.sabotage != Sabotage::None {
            tracing::error!(sabotage = ?config.sabotage, "THE JUDGE IS DELIBERATELY BROKEN (test only)");
        }
        if let Some(t) = config.admin_token.as_deref().filter(|t| !t.is_empty()) {
            if t.chars().count() < 32 {
                return Err(ServerError::Config("--admin-token must be at least 32 characters".into()));
            }
            tracing::info!("admin routes on: /v1/admin/spaces, /v1/admin/spaces/members");
        }
        let schema = load_schema(config)?;
        let store = Store::connect(&config.database, config.db_max_connections).await?;
        tracing::info!(backend = store.backend(), database = %store::redact(&config.database), schema_version = schema.version, "storage ready");
        let limiter = (config.rate_limit > 0.0)
            .then(|| RateLimiter::new(config.rate_limit, config.rate_burst.unwrap_or(config.rate_limit * 2.0)));
        let (pokes, _) = broadcast::channel(1024);
        store.forward_pokes(pokes.clone(), shutdown.clone());
        Ok(App(Arc::new(AppState {
            store,
            schema_file: SchemaFile::of(&schema),
            schema: Arc::new(schema),
            auth: Auth::new(config.jwt_secret.as_deref(), config.dev_auth)
                .expecting(&config.jwt_audience, config.jwt_issuer.as_deref()),
            metrics: Arc::new(Metrics::default()),
            faults: config.enable_faults.then(|| Arc::new(Faults::default())),
            limiter,
            pokes,
            max_body: config.max_body_bytes,
            max_future_ms: (config.max_future_ms > 0).then_some(config.max_future_ms),
            guard: guard::Guard::new(
                Duration::from_millis(config.body_timeout_ms),
                config.max_requests_per_user,
                config.max_streams_per_user,
            ),
            shutdown,
            sabotage: config.sabotage,
            admin_token: config.admin_token.clone().filter(|t| !t.is_empty()),
            #[cfg(feature = "bench-per-op")]
            per_op_judge: config.per_op_judge,
        })))
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let app = App::build(&config, listener.local_addr()?, stop_rx).await?;
    let router = http::router(app.clone(), &config)?;
    let limits = limits(&config).fit_to(conn::raise_open_files_limit());
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
    let router = http::router(app.clone(), &config)?;
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

#[cfg(test)]
mod tests {
    use super::Poke;

    #[test]
    fn a_poke_payload_carries_any_name_whole() {
        for poke in [
            Poke::Space { space: "~a user id with spaces".into(), head: 42 },
            Poke::Space { space: "team-1".into(), head: 0 },
            Poke::Members { user: "a user id".into() },
        ] {
            assert_eq!(Poke::parse(&poke.payload()), Some(poke));
        }
        for bad in ["", "x y", "s 1", "s x team", "m ", "42 alice"] {
            assert_eq!(Poke::parse(bad), None, "{bad:?}");
        }
    }
}
