//! The state every handler shares, built once at start from the configuration.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use marksync::schema::Schema;
use tokio::sync::watch;

use crate::auth::jwks::KeySet;
use crate::auth::{AdminCredential, Auth, BearerSecret};
use crate::budget::Budgets;
use crate::caps::Caps;
use crate::config::Config;
use crate::error::ServerError;
use crate::faults::Faults;
use crate::metrics::Metrics;
use crate::rate::RateLimiter;
use crate::ready::Readiness;
#[cfg(feature = "sabotage")]
use crate::store::Sabotage;
use crate::store::{self, Store};
use crate::turn::Turns;

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
    /// Each user's budgets of judged ops and of read work per second.
    pub budgets: Budgets,
    /// Each user's queue of pushes before the writer.
    pub turns: Arc<Turns>,
    /// Each user's queue of reads (every read but the event stream): one at a time per user.
    pub read_turns: Arc<Turns>,
    /// Head pokes for `/v1/events`.
    pub pokes: Arc<crate::poke::Hub>,
    /// Body limit in bytes.
    pub max_body: usize,
    /// How far ahead of the server's clock an op's `at` may be (`None`: no bound).
    pub max_future_ms: Option<u64>,
    /// The per-user caps and the body deadline of the API routes.
    pub caps: Caps,
    /// Turns true when the server shuts down (ends event streams).
    pub shutdown: watch::Receiver<bool>,
    /// The last readiness answer (`/readyz`).
    pub readiness: Readiness,
    /// Deliberate breakage for one test run; [`Sabotage::None`] otherwise.
    #[cfg(feature = "sabotage")]
    pub sabotage: Sabotage,
    /// The admin credential (`--admin-token`), when configured.
    pub admin: AdminCredential,
    /// The token `/metrics` asks for (`--metrics-token`), when configured.
    pub metrics_token: BearerSecret,
    /// The app's own rules, when it embeds marksync with some ([`crate::embed::Builder::rules`]).
    pub rules: Option<Arc<dyn crate::rules::Rules>>,
    /// The webhook (`--webhook-url`), when configured.
    pub webhook: Option<Arc<crate::webhook::Webhook>>,
    /// Use the per-op judge (benchmark only).
    #[cfg(feature = "bench-per-op")]
    pub per_op_judge: bool,
}

impl AppState {
    /// Whether pushes wait for their user's turn: not under `Sabotage::NoTurn`
    /// or `Sabotage::Unfair`, nor under `Sabotage::NoLock`, whose test needs a
    /// user's pushes to overlap.
    #[cfg(feature = "sabotage")]
    pub fn takes_turns(&self) -> bool {
        !matches!(self.sabotage, Sabotage::NoTurn | Sabotage::Unfair | Sabotage::NoLock)
    }
    /// Whether pushes wait for their user's turn (always).
    #[cfg(not(feature = "sabotage"))]
    pub fn takes_turns(&self) -> bool {
        true
    }

    /// Whether a user's reads wait for each other: not under `Sabotage::ReadsAtOnce`.
    #[cfg(feature = "sabotage")]
    pub fn reads_in_turn(&self) -> bool {
        self.sabotage != Sabotage::ReadsAtOnce
    }
    /// Whether a user's reads wait for each other (always).
    #[cfg(not(feature = "sabotage"))]
    pub fn reads_in_turn(&self) -> bool {
        true
    }
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
        marksync::judge::Limits::at(crate::clock::now_ms(), self.max_future_ms)
    }

    /// Opens the store, loads the schema and builds the shared state.
    /// `listen` is the address actually bound (checked against `--dev-auth`).
    pub async fn build(
        config: &Config,
        listen: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) -> Result<App, ServerError> {
        App::build_with(config, listen, shutdown, None, None).await
    }

    /// [`App::build`], with the app's own authentication deciding who calls
    /// (marksync inside the app's server, [`crate::embed`]).
    pub async fn build_with(
        config: &Config,
        listen: SocketAddr,
        shutdown: watch::Receiver<bool>,
        custom: Option<Arc<dyn crate::auth::Authenticate>>,
        rules: Option<Arc<dyn crate::rules::Rules>>,
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
        let jwks = match config.jwks_source() {
            Some(source) => Some(Arc::new(
                KeySet::load(source.clone()).await.map_err(|e| ServerError::Config(format!("{source}: {e}")))?,
            )),
            None => None,
        };
        match config.jwt_secret.as_deref().filter(|s| !s.is_empty()) {
            None if !config.dev_auth && jwks.is_none() && custom.is_none() => {
                tracing::warn!("no --jwt-secret (MARKSYNC_JWT_SECRET), no --jwks-file or --jwks-url and no --dev-auth: every request will be 401");
            }
            Some(s) if s.len() < crate::config::MIN_JWT_SECRET_BYTES => {
                return Err(ServerError::Config(format!(
                    "--jwt-secret is {} bytes; an HS256 secret must be at least {} (a shorter one can be guessed offline from any token): make one with `openssl rand -base64 32`",
                    s.len(),
                    crate::config::MIN_JWT_SECRET_BYTES
                )));
            }
            _ => {}
        }
        #[cfg(feature = "sabotage")]
        if config.sabotage != Sabotage::None {
            tracing::error!(sabotage = ?config.sabotage, "THE JUDGE IS DELIBERATELY BROKEN (test only)");
        }
        if let Some(t) = config.admin_token.as_deref().filter(|t| !t.is_empty()) {
            if t.chars().count() < 32 {
                return Err(ServerError::Config("--admin-token must be at least 32 characters".into()));
            }
            // A bearer token is read trimmed: one with white space at an end could never match.
            if t.trim() != t {
                return Err(ServerError::Config("--admin-token must not begin or end with white space".into()));
            }
            tracing::info!("admin routes on: /v1/admin/spaces, /v1/admin/spaces/members, /v1/admin/spaces/invitations, /v1/admin/pull");
        }
        let most = marksync::space::MAX_FOLLOWED - 1;
        if config.max_spaces_per_user == 0 || config.max_spaces_per_user > most {
            // A device follows at most MAX_FOLLOWED spaces in one pull, its own among
            // them: a user in more could never finish a sync.
            return Err(ServerError::Config(format!("--max-spaces-per-user must be 1 to {most}")));
        }
        let webhook = crate::webhook::Webhook::from_config(config)?.map(Arc::new);
        let schema = load_schema(config)?;
        let store =
            Store::connect(&config.database, &config.db_options()).await?.with_space_limits(config.space_limits());
        tracing::info!(backend = store.backend(), database = %store::redact(&config.database), schema_version = schema.version, "storage ready");
        let limiter = (config.rate_limit > 0.0)
            .then(|| RateLimiter::new(config.rate_limit, config.rate_burst.unwrap_or(config.rate_limit * 2.0)));
        let pokes = Arc::new(crate::poke::Hub::default());
        store.forward_pokes(Arc::clone(&pokes), shutdown.clone());
        if let Some(w) = &webhook {
            tracing::info!(url = %crate::webhook::redact(config.webhook_url.as_deref().unwrap_or_default()), "webhook on: every committed change is delivered there");
            Arc::clone(w).spawn(store.clone(), shutdown.clone());
        }
        Ok(App(Arc::new(AppState {
            store,
            schema_file: SchemaFile::of(&schema),
            schema: Arc::new(schema),
            auth: Auth::new(config.jwt_secret.as_deref(), config.dev_auth)
                .expecting(&config.jwt_audience, config.jwt_issuer.as_deref())
                .with_jwks(jwks)
                .with_custom(custom),
            metrics: Arc::new(Metrics::default()),
            faults: config.enable_faults.then(|| Arc::new(Faults::default())),
            limiter,
            budgets: {
                let (ops, reads) = config.budgets();
                Budgets::new(ops, reads)
            },
            turns: Arc::default(),
            read_turns: Arc::default(),
            pokes,
            max_body: config.max_body_bytes,
            max_future_ms: (config.max_future_ms > 0).then_some(config.max_future_ms),
            caps: Caps::new(
                Duration::from_millis(config.body_timeout_ms),
                config.max_requests_per_user,
                config.max_streams_per_user,
                config.max_connections.saturating_sub(config.connection_reserve.min(config.max_connections / 2)),
                Duration::from_millis(config.refusal_delay_ms),
            ),
            shutdown,
            readiness: Readiness::default(),
            #[cfg(feature = "sabotage")]
            sabotage: config.sabotage,
            admin: AdminCredential::new(config.admin_token.as_deref()),
            metrics_token: BearerSecret::new(config.metrics_token.as_deref()),
            webhook,
            rules,
            #[cfg(feature = "bench-per-op")]
            per_op_judge: config.per_op_judge,
        })))
    }
}
