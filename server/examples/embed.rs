//! An app with its own routes, its own sign-in and marksync at `/sync`.
//!
//! ```sh
//! cargo run -p marksync-server --example embed        # http://127.0.0.1:8080
//! curl -X POST 'http://127.0.0.1:8080/login?user=alice'   # → a session
//! curl -H 'Authorization: Bearer <session>' http://127.0.0.1:8080/sync/v1/pull
//! ```
//!
//! The npm package syncs through it with `endpoint: 'http://127.0.0.1:8080/sync'`
//! and the session as its token. `PORT` and `DATABASE` (default
//! `sqlite://embed.db`) may be set.

use std::collections::HashMap;
use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;

/// The app's sessions: a map here; the app's own store in a real one.
#[derive(Clone, Default)]
struct Sessions(Arc<Mutex<HashMap<String, String>>>);

impl marksync_server::auth::Authenticate for Sessions {
    fn user<'a>(&'a self, headers: &'a HeaderMap) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            let session = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| "sign in first: POST /login?user=<you>".to_owned())?;
            let sessions = self.0.lock().map_err(|_| "sessions unavailable".to_owned())?;
            sessions.get(session).cloned().ok_or_else(|| "this session has ended: sign in again".to_owned())
        })
    }
}

/// `POST /login?user=U`: a new session for U (an app checks a password here).
async fn login(
    State(sessions): State<Sessions>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<String, StatusCode> {
    let user = q.get("user").filter(|u| !u.is_empty()).ok_or(StatusCode::BAD_REQUEST)?;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let session: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    sessions.0.lock().map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?.insert(session.clone(), user.clone());
    Ok(session)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().init();
    let database = std::env::var("DATABASE").unwrap_or_else(|_| "sqlite://embed.db".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let sessions = Sessions::default();
    let mut config = marksync_server::Config::with_database(&database);
    // The browser app is served from elsewhere in development.
    config.cors_origin = vec!["*".into()];
    let sync = marksync_server::embed::Builder::new(config).authenticate(sessions.clone()).build().await?;
    let app = Router::new()
        .route("/", get(|| async { "the app's own home page" }))
        .route("/login", post(login))
        .with_state(sessions)
        .nest("/sync", sync.router());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("the app on http://{}, marksync at /sync", listener.local_addr()?);
    let streams = sync.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            streams.end_streams();
        })
        .await?;
    sync.close().await;
    Ok(())
}
