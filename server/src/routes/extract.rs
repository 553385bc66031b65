//! What handlers read from a request besides the user: a body within its
//! limit, decoded as JSON, and the query string.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;
use marksync::protocol::ErrorCode;

use crate::error::ApiError;

/// A query string as axum hands it over: parsed, or why not (a 400 of ours, not axum's).
pub(crate) type QueryParams = Result<Query<HashMap<String, String>>, QueryRejection>;

/// How much of a too-large body is still read (and thrown away) before the 413
/// is sent, as a multiple of the limit: a client that is still sending when the
/// server answers and closes gets a broken pipe instead of the 413. Beyond
/// this (or after [`DRAIN_TIME`]) the server answers anyway and closes.
const DRAIN_FACTOR: u64 = 16;
/// The longest time spent draining a too-large body.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads the body, counting the bytes actually received (never trusting
/// Content-Length alone): more than `limit` is 413 `payload_too_large`.
pub(crate) async fn read_body(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::new(ErrorCode::PayloadTooLarge, format!("the body is larger than {limit} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let drain_cap = (limit as u64).saturating_mul(DRAIN_FACTOR);
    if declared.is_some_and(|n| n > drain_cap) {
        return Err(too_large());
    }
    let mut buf: Vec<u8> = Vec::with_capacity(declared.map_or(8192, |n| n.min(limit as u64) as usize));
    let mut seen: u64 = 0;
    let drain_until = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let next = if seen > limit as u64 {
            match tokio::time::timeout_at(drain_until, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(too_large()),
            }
        } else {
            body.frame().await
        };
        let Some(frame) = next else { break };
        let frame = frame.map_err(|_| ApiError::bad_request("the body could not be read"))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len() as u64;
            if seen > drain_cap {
                return Err(too_large());
            }
            if seen <= limit as u64 {
                buf.extend_from_slice(&data);
            }
        }
    }
    if seen > limit as u64 {
        return Err(too_large());
    }
    Ok(Bytes::from(buf))
}

/// Reads a body within the limit and decodes it as `what` (a 400 names it).
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<T, ApiError> {
    let bytes = read_body(headers, body, limit).await?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("the body is not {what}: {e}")))
}

/// The query string's parameters, or a 400.
pub(crate) fn query(q: QueryParams) -> Result<HashMap<String, String>, ApiError> {
    q.map(|Query(q)| q).map_err(|_| ApiError::bad_request("the query string does not parse"))
}
