//! Errors: whole-request errors (PROTOCOL §5) as HTTP answers, and why the
//! server could not start.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use marksync::protocol::{ErrorBody, ErrorCode};

use crate::store::{DbError, SpaceError};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Listening or serving failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The database could not be opened or migrated.
    #[error(transparent)]
    Store(#[from] DbError),
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

/// An error answer: `{ "error": { "code", "message" } }` with the code's status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    /// The machine code; it picks the HTTP status.
    pub code: ErrorCode,
    /// The human message (never internal details).
    pub message: String,
    /// `Retry-After` seconds, for `rate_limited`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), retry_after: None }
    }
    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }
    /// 500 `internal`: logs `cause`, tells the client nothing about it.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(ErrorCode::Internal, "internal error")
    }
    /// A storage failure: `503 unavailable` with `Retry-After` when the
    /// database is out of reach or cannot take writes just now (it heals by
    /// itself, and the client retries); `500 internal` otherwise. Either way
    /// the cause is logged and never sent.
    pub fn db(cause: &DbError) -> Self {
        if !cause.is_unavailable() {
            return Self::internal(cause);
        }
        tracing::warn!(error = %cause, "database unavailable");
        ApiError {
            retry_after: Some(UNAVAILABLE_RETRY_AFTER),
            ..Self::new(
                ErrorCode::Unavailable,
                "the server's database cannot be reached or written just now; retry later",
            )
        }
    }
    /// 503 `unavailable` with `Retry-After`: the server cannot take this now, and will.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError { retry_after: Some(UNAVAILABLE_RETRY_AFTER), ..Self::new(ErrorCode::Unavailable, message) }
    }
    /// 429 `rate_limited` with `Retry-After: secs`.
    pub fn rate_limited(secs: u64) -> Self {
        ApiError {
            retry_after: Some(secs.max(1)),
            ..Self::new(ErrorCode::RateLimited, "too many requests; retry later")
        }
    }
}

/// `Retry-After` seconds of a `503 unavailable`: long enough for a database
/// to come back from a blip, short against a client's own backoff.
pub const UNAVAILABLE_RETRY_AFTER: u64 = 5;

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        ApiError::db(&e)
    }
}

/// The most characters of an error message sent back: a message may quote
/// the input (a field name, a parser's excerpt), and an answer must never
/// echo a huge input.
pub const MAX_MESSAGE_CHARS: usize = 200;

/// `message` cut to [`MAX_MESSAGE_CHARS`] characters, with `…` when cut.
pub fn capped(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message.to_owned(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(ErrorBody::new(self.code, capped(&self.message)))).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        // Read by the access middleware, which counts it (crate::access).
        resp.extensions_mut().insert(self.code);
        resp
    }
}

impl From<SpaceError> for ApiError {
    fn from(e: SpaceError) -> Self {
        match e {
            SpaceError::Forbidden(m) => ApiError::new(ErrorCode::Forbidden, m),
            SpaceError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            SpaceError::Conflict(m) | SpaceError::Cap(m) => ApiError::new(ErrorCode::Conflict, m),
            SpaceError::NoInvitation(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            SpaceError::BadRequest(m) => ApiError::bad_request(m),
            SpaceError::Store(e) => ApiError::db(&e),
        }
    }
}

/// The answer to a route that does not exist (or is switched off): `404
/// not_found`, counted under `not_found` like a space that does not exist
/// (`marksync_http_requests_total{route="other"}` tells the two apart).
pub async fn not_found() -> Response {
    ApiError::new(ErrorCode::NotFound, "no such route").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_capped_on_a_character_boundary() {
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(500);
        let c = capped(&long);
        assert_eq!(c.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(c.ends_with('…'));
    }
}
