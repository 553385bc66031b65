//! The router: which handler answers which route, behind which layer.
//!
//! | module | routes |
//! |---|---|
//! | [`push`] | `POST /v1/push` |
//! | [`pull`] | `GET /v1/pull` (the personal space), `POST /v1/pull` (every followed space) |
//! | [`verdicts`] | `POST /v1/verdicts` |
//! | [`schema`] | `GET /v1/schema` |
//! | [`events`] | `GET /v1/events` |
//! | [`spaces`] | `GET`/`POST /v1/spaces`, `GET`/`POST /v1/spaces/members`, `GET /v1/spaces/invitations`, `POST /v1/spaces/leave`, `GET /v1/invitations`, `POST /v1/invitations/accept`, `…/decline` |
//! | [`admin`] | `POST /v1/admin/spaces`, `GET`/`POST /v1/admin/spaces/members`, `GET /v1/admin/spaces/invitations` |
//! | [`health`] | `/livez`, `/readyz`, `/healthz`, `/metrics` |
//! | [`assets`] | everything else, with `--static DIR` |
//! | [`faults`] | `POST /__faults` (only with `--enable-faults`) |
//!
//! The API routes sit behind [`crate::guard`] (auth, rate limit, per-user
//! caps, body deadline), the admin routes behind [`crate::guard::admin_body`];
//! every route, the fallback included, behind [`crate::access`] (request id,
//! span, access log, request metrics).

mod admin;
mod assets;
mod events;
mod extract;
mod faults;
mod health;
mod pull;
mod push;
mod schema;
mod spaces;
mod verdicts;

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware;
use axum::routing::{any, get, post};
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::decompression::RequestDecompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::app::App;
use crate::config::Config;
use crate::error::{not_found, ServerError};
use crate::{access, guard};

/// The codings the API decodes in a request body (`Content-Encoding`).
pub const REQUEST_ENCODINGS: &str = "gzip, br";

/// The router of the whole server.
pub fn router(app: App, config: &Config) -> Result<Router, ServerError> {
    // Auth, rate limit, per-user caps and the body deadline come first (crate::guard).
    let api = Router::new()
        .route("/v1/push", post(push::push))
        .route("/v1/pull", get(pull::personal).post(pull::spaces))
        .route("/v1/spaces", get(spaces::list).post(spaces::create))
        .route("/v1/spaces/members", get(spaces::members).post(spaces::set))
        .route("/v1/spaces/leave", post(spaces::leave))
        .route("/v1/spaces/invitations", get(spaces::invitations_to))
        .route("/v1/invitations", get(spaces::invitations))
        .route("/v1/invitations/accept", post(spaces::accept))
        .route("/v1/invitations/decline", post(spaces::decline))
        .route("/v1/verdicts", post(verdicts::verdicts))
        .route("/v1/schema", get(schema::schema))
        .route("/v1/events", get(events::events));
    let api = says_encodings(decoding(api).route_layer(middleware::from_fn_with_state(app.clone(), guard::api)));
    let admin = Router::new()
        .route("/v1/admin/spaces", get(admin::spaces).post(admin::create))
        .route("/v1/admin/pull", post(admin::pull))
        .route("/v1/admin/spaces/members", get(admin::members).post(admin::set))
        .route("/v1/admin/spaces/invitations", get(admin::invitations));
    // Layers run outside in: the credential and the body's deadline, then the decoder.
    let admin = decoding(admin).route_layer(middleware::from_fn_with_state(app.clone(), guard::admin_body));
    let admin = says_encodings(admin);
    let mut r = Router::new()
        .merge(api)
        .merge(admin)
        .merge(says_encodings(Router::new().route("/v1/{*rest}", any(not_found))))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/healthz", get(health::readyz))
        .route("/metrics", get(health::metrics));
    r = if app.faults.is_some() {
        r.route("/__faults", post(faults::set))
    } else {
        r.route("/__faults", any(not_found))
    };
    r = match &config.static_dir {
        Some(dir) => assets::serve(r, dir),
        None => r.fallback(not_found),
    };
    // Answers over 32 bytes are compressed (brotli or gzip, as the client's
    // Accept-Encoding prefers) — a pull page of JSON shrinks 5-10x; event
    // streams, images and answers already encoded (a precompressed asset)
    // are left as they are.
    let mut r = r.with_state(app.clone()).layer(CompressionLayer::new());
    if !config.cors_origin.is_empty() {
        r = r.layer(cors(&config.cors_origin)?);
    }
    // Outermost: a CORS preflight, a 404 and a refusal get an id and a log line too.
    Ok(r.layer(middleware::from_fn_with_state(app, access::observe)))
}

/// `routes` with their request bodies decoded: a body sent gzip- or
/// brotli-encoded is decoded on the way in; every limit counts the decoded
/// bytes (a bomb is a 413), a corrupt body fails its read (a 400), another
/// coding is a 415 (said first, in the API's words, by `extract::codings`).
fn decoding(routes: Router<App>) -> Router<App> {
    routes.route_layer(RequestDecompressionLayer::new()).route_layer(middleware::from_fn(extract::codings))
}

/// `routes` with every answer saying which codings a request body may come
/// in (RFC 7694), so a client may encode its bodies: outside the guards, so
/// a refusal before the body is read (401, 403, 429, an unknown route) says
/// it too.
fn says_encodings(routes: Router<App>) -> Router<App> {
    routes.route_layer(SetResponseHeaderLayer::if_not_present(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static(REQUEST_ENCODINGS),
    ))
}

fn cors(origins: &[String]) -> Result<CorsLayer, ServerError> {
    let allow = if origins.iter().any(|o| o.trim() == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| HeaderValue::from_str(o.trim()).map_err(|_| ServerError::Config(format!("bad CORS origin {o:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(list)
    };
    Ok(CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::CONTENT_ENCODING,
            header::IF_NONE_MATCH,
            HeaderName::from_static(marksync::protocol::ACCEPT_HEADER),
        ])
        .expose_headers([header::RETRY_AFTER, header::ETAG, header::ACCEPT_ENCODING, access::REQUEST_ID])
        .max_age(Duration::from_secs(600)))
}
