//! `GET /v1/pull` (PROTOCOL §4: the personal space) and `POST /v1/pull`
//! (§4b: every followed space, in one snapshot). Rows leave as the newest
//! version of the schema spells them (§3b: stored rows are read, never
//! migrated), with that version, so a device notices a new schema.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::{
    Change, SpacesPullRequest, SpacesPullResponse, DEFAULT_PULL_LIMIT, MAX_PULL_LIMIT, MAX_SAFE_INTEGER,
};

use super::extract::{for_reader, query, read_json, QueryParams};
use crate::app::App;
use crate::budget::Work;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::guard::User;

/// `GET /v1/pull?cursor&limit`.
pub(crate) async fn personal(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let (cursor, limit) = pull_params(&query(q)?)?;
    let now = now_ms();
    let mut page = app.store.pull(&user, cursor, limit).await?;
    app.budgets.charge(Work::Reads, &user, 1 + page.changes.len());
    page.now = Some(now);
    page.schema_version = Some(app.schema.version);
    page.schema_tag = Some(app.schema_file.etag.clone());
    upgrade_changes(&app, &mut page.changes);
    app.metrics.pulled(page.changes.len());
    Ok(Json(for_reader(&headers, page)).into_response())
}

/// `POST /v1/pull`: every space the device follows.
pub(crate) async fn spaces(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: SpacesPullRequest = read_json(&headers, body, app.max_body, "a pull request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Every space named is planned and answered (if only as left): the pull pays for
    // them before its snapshot opens, and for the rows it reads after.
    app.budgets.charge(Work::Reads, &user, 1 + req.spaces.len());
    let now = now_ms();
    let mut answer = app.store.pull_spaces(&user, &req.spaces, req.limit).await?;
    let pulled = finish_spaces(&app, &mut answer, now);
    app.budgets.charge(Work::Reads, &user, pulled);
    app.metrics.pulled(pulled);
    Ok(Json(for_reader(&headers, answer)).into_response())
}

/// Stamps a spaces pull's answer with the clock read before it (`now`) and
/// the schema's version, spells its rows in the newest version; the changes it carries.
pub(super) fn finish_spaces(app: &App, answer: &mut SpacesPullResponse, now: u64) -> usize {
    answer.now = Some(now);
    answer.schema_version = Some(app.schema.version);
    answer.schema_tag = Some(app.schema_file.etag.clone());
    let mut pulled = 0;
    for page in &mut answer.spaces {
        pulled += page.changes.len();
        upgrade_changes(app, &mut page.changes);
    }
    pulled
}

/// Pulled rows as the newest version of the schema spells them.
fn upgrade_changes(app: &App, changes: &mut [Change]) {
    for change in changes {
        if let std::borrow::Cow::Owned(row) = app.schema.upgrade_row(&change.key.table, &change.row) {
            change.row = row;
        }
    }
}

/// Parses `cursor` (0..=2^53-1, default 0) and `limit` (1..=1000, default 500).
fn pull_params(q: &HashMap<String, String>) -> Result<(u64, usize), ApiError> {
    fn digits(name: &str, v: &str) -> Result<u64, ApiError> {
        if v.is_empty() || v.len() > 16 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ApiError::bad_request(format!("{name} must be a non-negative integer")));
        }
        v.parse::<u64>().map_err(|_| ApiError::bad_request(format!("{name} must be a non-negative integer")))
    }
    let cursor = match q.get("cursor") {
        Some(v) => digits("cursor", v)?,
        None => 0,
    };
    if cursor > MAX_SAFE_INTEGER {
        return Err(ApiError::bad_request("cursor must be at most 2^53-1"));
    }
    let limit = match q.get("limit") {
        Some(v) => digits("limit", v)?,
        None => DEFAULT_PULL_LIMIT as u64,
    };
    if limit == 0 || limit > MAX_PULL_LIMIT as u64 {
        return Err(ApiError::bad_request(format!("limit must be 1 to {MAX_PULL_LIMIT}")));
    }
    Ok((cursor, limit as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use marksync::protocol::ErrorCode;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn pull_params_are_checked() {
        assert_eq!(pull_params(&q(&[])).unwrap(), (0, 500));
        assert_eq!(pull_params(&q(&[("cursor", "17"), ("limit", "10")])).unwrap(), (17, 10));
        for bad in [
            ("cursor", "-1"),
            ("cursor", "x"),
            ("cursor", ""),
            ("cursor", "9007199254740992"),
            ("limit", "0"),
            ("limit", "1001"),
            ("limit", "+5"),
        ] {
            assert_eq!(pull_params(&q(&[bad])).unwrap_err().code, ErrorCode::BadRequest, "{bad:?}");
        }
    }
}
