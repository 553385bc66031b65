//! The schema on the device: the server's schema file as the device last
//! fetched it (`GET /v1/schema`), kept in the local database so that edits
//! are checked offline, after a reload, in every tab and in the Service
//! Worker, with the server's own rules and words ([`Schema::edit`]).

use serde::{Deserialize, Serialize};

use crate::schema::Schema;

/// The schema file as fetched, with the server's tag for it. Its version is
/// the parsed schema's ([`Schema::version`]), never stored beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KnownSchema {
    /// The server's `ETag` for it, asked back with `If-None-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The schema file's JSON, exactly as the server sent it: a device that
    /// updates its library parses it again with the newer rules.
    pub text: String,
}

impl KnownSchema {
    /// Parses a fetched schema file; `None` (and nothing learned) when it
    /// does not parse: a device never checks edits against a guess.
    pub fn parse(text: String, etag: Option<String>) -> Option<(KnownSchema, Schema)> {
        let schema = Schema::from_json(&text).ok()?;
        Some((KnownSchema { etag, text }, schema))
    }
}
