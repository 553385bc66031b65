//! marksync inside the app's own axum server: the same routes, limits,
//! metrics and shutdown as `marksync-server`, as a [`Router`] the app nests
//! under any path, with the built-in tokens or the app's own authentication
//! ([`Authenticate`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::routing::get;
//! let config = marksync_server::Config::with_database("sqlite://marksync.db");
//! let sync = marksync_server::embed::Builder::new(config).build().await?;
//! let app = axum::Router::new().route("/", get(|| async { "my app" })).nest("/sync", sync.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let streams = sync.clone();
//! axum::serve(listener, app)
//!     .with_graceful_shutdown(async move {
//!         let _ = tokio::signal::ctrl_c().await;
//!         streams.end_streams(); // else open event streams hold the shutdown
//!     })
//!     .await?;
//! sync.close().await;
//! # Ok(()) }
//! ```
//!
//! What the app's server owns, the app configures there: the connection cap,
//! the header timeout and the drain deadline of `marksync-server`'s own loop
//! (`--max-connections`, `--header-timeout-ms`, `--shutdown-timeout-ms`) do
//! not apply. Everything per request does: auth, per-user rate limits,
//! budgets and caps, body limits and deadlines, compression, metrics
//! (`<prefix>/metrics`), probes (`<prefix>/readyz`). Dev tokens are refused
//! (the router cannot see the connection's peer), so `--dev-auth` is for
//! `marksync-server` alone.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::sync::watch;

use crate::auth::Authenticate;
use crate::rules::Rules;
use crate::{App, Config, ServerError};

/// Builds an [`Embedded`] marksync from a [`Config`].
pub struct Builder {
    config: Config,
    custom: Option<Arc<dyn Authenticate>>,
    rules: Option<Arc<dyn Rules>>,
}

impl Builder {
    /// marksync as `config` says (its listen address and connection flags are not used).
    pub fn new(config: Config) -> Builder {
        Builder { config, custom: None, rules: None }
    }

    /// The app's own authentication decides who calls, instead of the built-in tokens.
    pub fn authenticate(mut self, custom: impl Authenticate) -> Builder {
        self.custom = Some(Arc::new(custom));
        self
    }

    /// The app's own rules judge every op after the schema and the roles ([`crate::rules`]).
    pub fn rules(mut self, rules: impl Rules) -> Builder {
        self.rules = Some(Arc::new(rules));
        self
    }

    /// Opens (and migrates) the database and builds the routes.
    pub async fn build(self) -> Result<Embedded, ServerError> {
        if self.config.dev_auth {
            return Err(ServerError::Config(
                "--dev-auth is for marksync-server alone: an embedded router cannot see where a request comes from"
                    .into(),
            ));
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        // The embedded router never binds: no dev auth, so the address is only a placeholder.
        let unbound = SocketAddr::from(([127, 0, 0, 1], 0));
        let app = App::build_with(&self.config, unbound, stop_rx, self.custom, self.rules).await?;
        let router = crate::routes::router(app.clone(), &self.config)?;
        Ok(Embedded { router, app, stop: Arc::new(stop_tx) })
    }
}

/// marksync's routes inside the app's server, and what ends them.
#[derive(Clone)]
pub struct Embedded {
    router: Router,
    app: App,
    stop: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded").field("app", &self.app).finish_non_exhaustive()
    }
}

impl Embedded {
    /// The routes (`/v1/…`, `/readyz`, `/metrics`…) to nest under the app's prefix.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The shared state: the store, the metrics.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// Ends every open event stream, and makes `/readyz` say so: call it when
    /// the app's server begins its graceful shutdown, or the streams hold it
    /// to its deadline.
    pub fn end_streams(&self) {
        let _ = self.stop.send(true);
    }

    /// Ends the streams and closes the database, once the app's server has stopped.
    pub async fn close(self) {
        self.end_streams();
        self.app.store.close().await;
        tracing::info!("marksync closed");
    }
}
