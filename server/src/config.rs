//! The server's configuration: command-line flags, each mirrored by a `MARKSYNC_*` variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, Subcommand};
use marksync::schema::Schema;

use crate::logging::LogFormat;
#[cfg(feature = "sabotage")]
use crate::store::Sabotage;
use crate::store::{DbOptions, Migrations, SpaceLimits};

/// `--ops-rate`: a device catching up after a long offline spell sends a few
/// thousand ops; ten seconds of this rate is the burst.
pub const DEFAULT_OPS_RATE: f64 = 1_000.0;
/// `--read-rate`: a full pull (1,000 rows) naming 1,000 spaces two and a half
/// times a second, and ten times that at once; a pull naming 10,000 spaces
/// every two seconds.
pub const DEFAULT_READ_RATE: f64 = 5_000.0;
/// `--connection-reserve`.
pub const DEFAULT_CONNECTION_RESERVE: usize = 100;

/// `marksync-server` flags. Every flag can also be given as the environment
/// variable named after it (`--max-body-bytes` = `MARKSYNC_MAX_BODY_BYTES`).
#[derive(Debug, Clone, Parser)]
#[command(name = "marksync-server", version, about = "The marksync reference server: push, pull, events.")]
pub struct Config {
    /// What to do: serve (no subcommand) or `migrate`.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address to listen on: `IP:PORT` or `HOST:PORT` (the first address the name resolves
    /// to). `--dev-auth` requires a loopback address.
    #[arg(long, env = "MARKSYNC_LISTEN", default_value = "127.0.0.1:8787", value_parser = parse_listen)]
    pub listen: SocketAddr,

    /// `sqlite://FILE` (created if missing), `postgres://user@host:port/db`, or `sqlite::memory:`
    /// (tests only: everything is lost at stop).
    #[arg(long, env = "MARKSYNC_DATABASE", default_value = "sqlite://marksync.db", global = true)]
    pub database: String,

    /// Milliseconds a request waits for a database connection (PostgreSQL; SQLite's readers)
    /// before it is answered `503 unavailable`; also the most the first connection at start may take.
    #[arg(long, env = "MARKSYNC_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 5_000, global = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,

    /// Do not apply migrations: check them, and refuse to start when the database lacks one
    /// (run `marksync-server migrate` first). For a role that may not change the schema.
    #[arg(long, env = "MARKSYNC_NO_MIGRATE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub no_migrate: bool,

    /// Start on a database that carries migrations this server does not know (written by a
    /// newer server, then rolled back). Without it such a start is refused.
    #[arg(long, env = "MARKSYNC_ALLOW_NEWER_SCHEMA", action = ArgAction::SetTrue,
          value_parser = BoolishValueParser::new(), global = true)]
    pub allow_newer_schema: bool,

    /// The app schema file (JSON, see docs/server.md). Default: the built-in workout schema.
    #[arg(long, env = "MARKSYNC_SCHEMA", value_name = "FILE")]
    pub schema: Option<PathBuf>,

    /// Serve this directory's files; unknown paths get its index.html (single-page app).
    #[arg(long = "static", env = "MARKSYNC_STATIC", value_name = "DIR")]
    pub static_dir: Option<PathBuf>,

    /// Also accept `Authorization: Bearer dev:<user>`. For development only, on loopback only.
    #[arg(long, env = "MARKSYNC_DEV_AUTH", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub dev_auth: bool,

    /// Serve `POST /__faults` (lost responses, delays, failures before commit). For tests only.
    #[arg(long, env = "MARKSYNC_ENABLE_FAULTS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub enable_faults: bool,

    /// The HS256 secret that signs JWTs (`sub` = user id, `exp` required); at least 32 bytes.
    #[arg(long, env = "MARKSYNC_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// The largest request body, in bytes actually read (413 above).
    #[arg(long, env = "MARKSYNC_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// How far ahead of the server's clock an op's `at` may be, in ms; an op
    /// stamped later is rejected with code `clock_ahead`. 0 turns the bound off.
    #[arg(long, env = "MARKSYNC_MAX_FUTURE_MS", default_value_t = marksync::judge::DEFAULT_MAX_FUTURE_MS)]
    pub max_future_ms: u64,

    /// Requests per second allowed per user on push, pull and verdicts (token bucket); 0 turns the limit off.
    #[arg(long, env = "MARKSYNC_RATE_LIMIT", default_value_t = 100.0, value_parser = non_negative)]
    pub rate_limit: f64,

    /// Requests a user may make at once before the rate applies. Default: twice the rate.
    #[arg(long, env = "MARKSYNC_RATE_BURST", value_parser = non_negative)]
    pub rate_burst: Option<f64>,

    /// Judged ops per second allowed per user (token bucket; a push costs its ops, counted before
    /// its transaction opens); 0 turns the budget off.
    #[arg(long, env = "MARKSYNC_OPS_RATE", default_value_t = DEFAULT_OPS_RATE, value_parser = non_negative)]
    pub ops_rate: f64,

    /// Ops a user may push at once before the ops rate applies. Default: ten times the rate.
    #[arg(long, env = "MARKSYNC_OPS_BURST", value_parser = non_negative)]
    pub ops_burst: Option<f64>,

    /// Read work per second allowed per user (token bucket): a pull costs 1, each space it names
    /// and each row it reads; a list or an event connect 1 and each entry it reads. 0 turns it off.
    #[arg(long, env = "MARKSYNC_READ_RATE", default_value_t = DEFAULT_READ_RATE, value_parser = non_negative)]
    pub read_rate: f64,

    /// Read work a user may spend at once before the read rate applies. Default: ten times the rate.
    #[arg(long, env = "MARKSYNC_READ_BURST", value_parser = non_negative)]
    pub read_burst: Option<f64>,

    /// Milliseconds a `429` (a rate, budget or cap refusal) is held back before it is sent: a
    /// client that retries at once, ignoring `Retry-After`, retries once a delay, not as fast as
    /// the server can refuse. At most 64 are held at once; 0 sends them at once.
    #[arg(long, env = "MARKSYNC_REFUSAL_DELAY_MS", default_value_t = 1_000)]
    pub refusal_delay_ms: u64,

    /// Origins allowed by CORS (repeat the flag or give a comma list; `*` = any), each
    /// `scheme://host[:port]` as a browser sends it. Default: none.
    #[arg(long, env = "MARKSYNC_CORS_ORIGIN", value_delimiter = ',', value_parser = parse_origin)]
    pub cors_origin: Vec<String>,

    /// Most database connections (Postgres pool; SQLite readers).
    #[arg(long, env = "MARKSYNC_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,

    /// Most connections open at once. At the cap a new connection closes the oldest one that has no
    /// request in progress (unfinished headers, idle keep-alive); when every one is busy, the new one
    /// is closed. Lowered at start to fit the open-files limit.
    #[arg(long, env = "MARKSYNC_MAX_CONNECTIONS", default_value_t = 900, value_parser = at_least_one)]
    pub max_connections: usize,

    /// Connections event streams never take, all users' streams together: kept for short requests
    /// (`/healthz`, pulls, pushes) of everyone. At most half of `--max-connections`.
    #[arg(long, env = "MARKSYNC_CONNECTION_RESERVE", default_value_t = DEFAULT_CONNECTION_RESERVE)]
    pub connection_reserve: usize,

    /// Milliseconds a client may take to send a request's headers (or to start one on an idle
    /// keep-alive connection) before the connection is closed.
    #[arg(long, env = "MARKSYNC_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// Milliseconds a client may take to send a whole request body, counted from its headers;
    /// later is `408` and the connection closes.
    #[arg(long, env = "MARKSYNC_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub body_timeout_ms: u64,

    /// Milliseconds shutdown waits for requests in flight; then the connections left are cut and
    /// the database closes.
    #[arg(long, env = "MARKSYNC_SHUTDOWN_TIMEOUT_MS", default_value_t = 10_000)]
    pub shutdown_timeout_ms: u64,

    /// Push and pull requests one user may have in progress at once (more: `429`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_REQUESTS_PER_USER", default_value_t = 16)]
    pub max_requests_per_user: usize,

    /// `/v1/events` streams one user may hold open at once (a new one beyond: `429`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_STREAMS_PER_USER", default_value_t = 8)]
    pub max_streams_per_user: usize,

    /// Accepted JWT audiences (`aud`; repeat or comma list). Set: a token must name one of them.
    /// Unset: `aud` is not checked.
    #[arg(long, env = "MARKSYNC_JWT_AUDIENCE", value_delimiter = ',')]
    pub jwt_audience: Vec<String>,

    /// The JWT issuer (`iss`). Set: a token must carry exactly it. Unset: `iss` is not checked.
    #[arg(long, env = "MARKSYNC_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// The identity provider's public keys as a JWKS file (`{"keys": [...]}`): RS256, ES256
    /// (and the other asymmetric algorithms) tokens are verified with the key their `kid`
    /// names. Read at start (no usable key: the server refuses to start), again each minute
    /// and when a token names an unknown `kid`.
    #[arg(long, env = "MARKSYNC_JWKS_FILE", conflicts_with = "jwks_url")]
    pub jwks_file: Option<PathBuf>,

    /// The identity provider's JWKS URL (e.g. `https://YOUR_DOMAIN/.well-known/jwks.json`):
    /// as `--jwks-file`, fetched at start, again as its `Cache-Control` says (default every 5
    /// minutes) and when a token names an unknown `kid` (rate-limited), so a key rotated at
    /// the provider is taken without a restart.
    #[arg(long, env = "MARKSYNC_JWKS_URL", conflicts_with = "jwks_file", value_parser = parse_http_url)]
    pub jwks_url: Option<String>,

    /// The admin credential of the app's own backend: `Authorization: Bearer <it>` on
    /// `/v1/admin/…` creates spaces and manages any space's members. Unset (the default):
    /// the admin routes answer 404. At least 32 characters.
    #[arg(long, env = "MARKSYNC_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// The app's backend hears every committed change here: after each push that moved
    /// rows, one signed `POST` per space (docs/server.md, "Webhooks"), delivered at least
    /// once, in order per space, kept across restarts. Needs `--webhook-secret`.
    #[arg(long, env = "MARKSYNC_WEBHOOK_URL", requires = "webhook_secret", value_parser = parse_http_url)]
    pub webhook_url: Option<String>,

    /// The key of the deliveries' `Marksync-Signature` (HMAC-SHA256); at least 32 characters.
    #[arg(long, env = "MARKSYNC_WEBHOOK_SECRET", hide_env_values = true, requires = "webhook_url")]
    pub webhook_secret: Option<String>,

    /// Milliseconds a delivery may take before it counts as failed and is tried again.
    /// (0 is refused: every delivery would fail, answered or not.)
    #[arg(long, env = "MARKSYNC_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_timeout_ms: u64,

    /// Milliseconds before the first retry of a failed delivery; each next waits twice as
    /// long, up to 5 minutes.
    #[arg(long, env = "MARKSYNC_WEBHOOK_BACKOFF_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_backoff_ms: u64,

    /// Deliveries waiting at most: past it, pushes are answered `503 unavailable`
    /// before anything is judged (retried by the devices; nothing is lost) until the receiver
    /// catches up. 0 = no bound.
    #[arg(long, env = "MARKSYNC_WEBHOOK_MAX_PENDING", default_value_t = 1_000_000)]
    pub webhook_max_pending: u64,

    /// Milliseconds an invitation to a space stays pending before it lapses.
    #[arg(long, env = "MARKSYNC_INVITATION_TTL_MS", default_value_t = SpaceLimits::DEFAULT.invitation_ttl_ms)]
    pub invitation_ttl_ms: u64,

    /// Pending invitations one user may have sent at once (more: `409 conflict`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_INVITATIONS_PER_INVITER", default_value_t = SpaceLimits::DEFAULT.invitations_per_inviter)]
    pub max_invitations_per_inviter: usize,

    /// Pending invitations one user may have received at once (more: `409 conflict`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_INVITATIONS_PER_USER", default_value_t = SpaceLimits::DEFAULT.invitations_per_user)]
    pub max_invitations_per_user: usize,

    /// Shared spaces one user may be a member of (more: `409 conflict`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_SPACES_PER_USER", default_value_t = SpaceLimits::DEFAULT.spaces_per_user)]
    pub max_spaces_per_user: usize,

    /// Shared spaces one user may own (more: `409 conflict`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_OWNED_SPACES_PER_USER", default_value_t = SpaceLimits::DEFAULT.owned_per_user)]
    pub max_owned_spaces_per_user: usize,

    /// Members one space may have (more: `409 conflict`); 0 = no cap.
    #[arg(long, env = "MARKSYNC_MAX_MEMBERS_PER_SPACE", default_value_t = SpaceLimits::DEFAULT.members_per_space)]
    pub max_members_per_space: usize,

    /// `text` (for people) or `json` (one object per line, for log collectors). `RUST_LOG` filters both.
    #[arg(long, env = "MARKSYNC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// When set, `/metrics` answers only `Authorization: Bearer <it>` (else 401). Unset or empty:
    /// `/metrics` is open, for a scraper on a private network.
    #[arg(long, env = "MARKSYNC_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// A schema given in code (tests, embedding); wins over `--schema`.
    #[arg(skip)]
    pub schema_value: Option<Schema>,

    /// Deliberate breakage, to prove the tests catch it (feature `sabotage`, tests only).
    #[cfg(feature = "sabotage")]
    #[doc(hidden)]
    #[arg(skip)]
    pub sabotage: Sabotage,

    /// Judge with the one-statement-per-op loop instead of the batched judge
    /// (feature `bench-per-op`, for the load benchmark only).
    #[cfg(feature = "bench-per-op")]
    #[arg(skip)]
    pub per_op_judge: bool,
}

/// What `marksync-server` is asked to do besides serving.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Apply the database's migrations, log each, and exit (then start servers with `--no-migrate`).
    Migrate,
}

/// The shortest HS256 secret accepted: RFC 7518 §3.2 asks for a key as long
/// as the hash (256 bits); a shorter one can be guessed offline from any token.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// `IP:PORT`, or `HOST:PORT` resolved now (`localhost:8787`).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    use std::net::ToSocketAddrs;
    let mut addrs = s.to_socket_addrs().map_err(|e| format!("{s:?} is not IP:PORT or HOST:PORT ({e})"))?;
    addrs.next().ok_or_else(|| format!("{s:?} resolves to no address"))
}

/// A finite number ≥ 0 (a rate or a burst; 0 turns it off).
fn non_negative(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number ≥ 0 (0 turns it off)")),
    }
}

/// A count ≥ 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("{s:?} is not a whole number ≥ 1")),
    }
}

/// `*`, or an origin as a browser sends it: `http(s)://host[:port]`, no path.
fn parse_origin(s: &str) -> Result<String, String> {
    let o = s.trim();
    if o == "*" {
        return Ok(o.to_owned());
    }
    let bad = || {
        format!(
            "{s:?} is not an origin: scheme://host[:port], as a browser sends it (e.g. https://app.example.com), or *"
        )
    };
    let rest = o.strip_prefix("https://").or_else(|| o.strip_prefix("http://")).ok_or_else(bad)?;
    let (host, port) = match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        Some((ip, after)) => (ip, if after.is_empty() { None } else { Some(after.strip_prefix(':').unwrap_or("x")) }),
        None => match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        },
    };
    let host_ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    if host_ok && port_ok {
        Ok(o.to_owned())
    } else {
        Err(bad())
    }
}

impl Config {
    /// The defaults, as `marksync-server` with no flags and no environment would run.
    pub fn with_database(database: impl Into<String>) -> Config {
        Config {
            command: None,
            db_acquire_timeout_ms: 5_000,
            no_migrate: false,
            allow_newer_schema: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            database: database.into(),
            schema: None,
            static_dir: None,
            dev_auth: false,
            enable_faults: false,
            jwt_secret: None,
            max_body_bytes: 1 << 20,
            max_future_ms: marksync::judge::DEFAULT_MAX_FUTURE_MS,
            rate_limit: 100.0,
            rate_burst: None,
            ops_rate: DEFAULT_OPS_RATE,
            ops_burst: None,
            read_rate: DEFAULT_READ_RATE,
            read_burst: None,
            connection_reserve: DEFAULT_CONNECTION_RESERVE,
            refusal_delay_ms: 1_000,
            cors_origin: Vec::new(),
            db_max_connections: 16,
            max_connections: 900,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            shutdown_timeout_ms: 10_000,
            max_requests_per_user: 16,
            max_streams_per_user: 8,
            jwt_audience: Vec::new(),
            jwt_issuer: None,
            jwks_file: None,
            jwks_url: None,
            admin_token: None,
            webhook_url: None,
            webhook_secret: None,
            webhook_timeout_ms: 10_000,
            webhook_backoff_ms: 1_000,
            webhook_max_pending: 1_000_000,
            invitation_ttl_ms: SpaceLimits::DEFAULT.invitation_ttl_ms,
            max_invitations_per_inviter: SpaceLimits::DEFAULT.invitations_per_inviter,
            max_invitations_per_user: SpaceLimits::DEFAULT.invitations_per_user,
            max_spaces_per_user: SpaceLimits::DEFAULT.spaces_per_user,
            max_owned_spaces_per_user: SpaceLimits::DEFAULT.owned_per_user,
            max_members_per_space: SpaceLimits::DEFAULT.members_per_space,
            log_format: LogFormat::Text,
            metrics_token: None,
            schema_value: None,
            #[cfg(feature = "sabotage")]
            sabotage: Sabotage::None,
            #[cfg(feature = "bench-per-op")]
            per_op_judge: false,
        }
    }
}

impl Config {
    /// How the store opens the database these flags name.
    pub fn db_options(&self) -> DbOptions {
        DbOptions {
            max_connections: self.db_max_connections,
            acquire_timeout: std::time::Duration::from_millis(self.db_acquire_timeout_ms),
            migrations: if self.no_migrate { Migrations::Check } else { Migrations::Apply },
            allow_newer: self.allow_newer_schema,
            #[cfg(feature = "sabotage")]
            writer_in_arrival_order: self.sabotage == Sabotage::Unfair,
        }
    }

    /// The `(rate, burst)` of the ops and read budgets these flags give.
    pub fn budgets(&self) -> ((f64, f64), (f64, f64)) {
        (
            (self.ops_rate, self.ops_burst.unwrap_or(self.ops_rate * 10.0)),
            (self.read_rate, self.read_burst.unwrap_or(self.read_rate * 10.0)),
        )
    }

    /// The bounds of spaces and invitations these flags give.
    pub fn space_limits(&self) -> SpaceLimits {
        SpaceLimits {
            invitation_ttl_ms: self.invitation_ttl_ms,
            invitations_per_inviter: self.max_invitations_per_inviter,
            invitations_per_user: self.max_invitations_per_user,
            spaces_per_user: self.max_spaces_per_user,
            owned_per_user: self.max_owned_spaces_per_user,
            members_per_space: self.max_members_per_space,
        }
    }
}

/// `--jwks-url`, `--webhook-url`: an `http://` or `https://` URL (plain HTTP only makes sense on a trusted network).
fn parse_http_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} is not a URL"));
    }
    Ok(s.to_owned())
}

impl Config {
    /// The identity provider's key set the configuration names, if any.
    pub fn jwks_source(&self) -> Option<crate::auth::jwks::Source> {
        use crate::auth::jwks::Source;
        match (&self.jwks_file, &self.jwks_url) {
            (Some(path), _) => Some(Source::File(path.clone())),
            (None, Some(url)) => Some(Source::Url(url.clone())),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_defaults() {
        let c = Config::try_parse_from(["marksync-server"]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(c.database, "sqlite://marksync.db");
        assert!(!c.dev_auth && !c.enable_faults);
        assert_eq!(c.max_body_bytes, 1 << 20);
        assert_eq!(c.max_future_ms, 86_400_000);
        let d = Config::with_database("sqlite://marksync.db");
        assert_eq!(
            (c.max_connections, c.header_timeout_ms, c.body_timeout_ms, c.shutdown_timeout_ms),
            (d.max_connections, d.header_timeout_ms, d.body_timeout_ms, d.shutdown_timeout_ms),
            "the documented defaults, both ways"
        );
        assert_eq!(
            (c.max_requests_per_user, c.max_streams_per_user, c.connection_reserve, c.refusal_delay_ms),
            (d.max_requests_per_user, d.max_streams_per_user, d.connection_reserve, d.refusal_delay_ms)
        );
        assert_eq!(c.budgets(), d.budgets(), "the documented budgets, both ways");
        assert!(c.jwt_audience.is_empty() && c.jwt_issuer.is_none());
        assert_eq!((c.log_format, &c.metrics_token), (d.log_format, &d.metrics_token));
        assert_eq!(c.space_limits(), d.space_limits(), "the documented bounds of spaces, both ways");
        let c = Config::try_parse_from([
            "marksync-server",
            "--dev-auth",
            "--cors-origin",
            "http://a,http://b",
            "--cors-origin",
            "http://c",
            "--static",
            "www/dist",
            "--log-format",
            "json",
            "--metrics-token",
            "scrape",
        ])
        .unwrap();
        assert_eq!((c.log_format, c.metrics_token.as_deref()), (LogFormat::Json, Some("scrape")));
        assert!(c.dev_auth);
        assert_eq!(c.cors_origin, ["http://a", "http://b", "http://c"]);
        assert_eq!(c.static_dir, Some(PathBuf::from("www/dist")));
        let d = Config::with_database("sqlite://marksync.db").db_options();
        let c = Config::try_parse_from(["marksync-server"]).unwrap().db_options();
        assert_eq!((c.acquire_timeout, c.migrations, c.allow_newer), (d.acquire_timeout, d.migrations, d.allow_newer));
    }

    #[test]
    fn nonsense_is_refused_at_parse_time() {
        for bad in [
            &["--rate-limit=-5"][..],
            &["--rate-limit", "NaN"],
            &["--ops-rate", "inf"],
            &["--read-burst", "-1"],
            &["--max-connections", "0"],
            &["--cors-origin", "not a url"],
            &["--cors-origin", "https://a.example/path"],
            &["--cors-origin", "ftp://a.example"],
            &["--listen", "nowhere"],
            &["--db-acquire-timeout-ms", "0"],
            &["--jwks-url", "ftp://idp.example/jwks.json"],
            &["--jwks-url", "https://"],
            &["--jwks-file", "a.json", "--jwks-url", "https://idp.example/jwks.json"],
        ] {
            let args = std::iter::once("marksync-server").chain(bad.iter().copied());
            assert!(Config::try_parse_from(args).is_err(), "{bad:?} is refused");
        }
        for good in [
            &["--rate-limit", "0"][..],
            &["--cors-origin", "https://app.example.com"],
            &["--cors-origin", "http://127.0.0.1:5173,*"],
            &["--cors-origin", "http://[::1]:8080"],
            &["--cors-origin", "http://[::1]"],
            &["--listen", "localhost:8787"],
            &["--listen", "[::1]:0"],
        ] {
            let args = std::iter::once("marksync-server").chain(good.iter().copied());
            assert!(Config::try_parse_from(args).is_ok(), "{good:?} is taken");
        }
        let c = Config::try_parse_from(["marksync-server", "migrate", "--database", "sqlite://x.db"]).unwrap();
        assert_eq!((c.command, c.database.as_str()), (Some(Command::Migrate), "sqlite://x.db"));
    }
}
