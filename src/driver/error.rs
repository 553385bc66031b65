//! What the driver answers: its errors (each with the stable code the JS
//! boundary shows), an edit of a batch, and how a sync call ended.

use crate::engine::{EngineError, SyncReport};
use crate::protocol::{Code, Fields};
use crate::store::StoreError;

/// Errors of the client, each with a stable code for JS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Bad input; nothing changed.
    #[error("{0}")]
    BadInput(String),
    /// IndexedDB cannot be opened (e.g. some private modes).
    #[error("{0}")]
    StorageUnavailable(String),
    /// An IndexedDB transaction failed; nothing of it was written.
    #[error("{0}")]
    StorageFailed(String),
    /// The storage quota is used up; nothing of it was written.
    #[error("{0}")]
    StorageFull(String),
    /// Sync cannot go on without the user.
    #[error("{message}")]
    RecoveryRequired {
        /// The recovery's code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The database was closed.
    #[error("the database is closed")]
    Closed,
    /// No reserved id left: over a million `newRowId()` calls without a
    /// single await (the next block is reserved meanwhile), or the end of
    /// the id space.
    #[error(
        "no reserved row id left (over a million newRowId() calls without an await, or the end of the id space); await something and retry"
    )]
    IdsExhausted,
    /// The device's clock has no later `at` left; the edit was not recorded.
    #[error("{0}")]
    ClockExhausted(String),
    /// The server's schema, as the device knows it, refuses the edit; nothing
    /// was recorded. The reason is the server's, word for word.
    #[error("{}", .0.reason)]
    Invalid(crate::schema::Refusal),
    /// The user may not write in the edit's space, by what the device last
    /// learned; nothing was recorded. Code and reason are the judge's
    /// (`read_only` for a viewer, `forbidden` for a space the user left).
    #[error("{}", .0.reason)]
    Denied(crate::space::Denied),
    /// A membership call was refused by the server (its code: `forbidden`,
    /// `conflict`, `bad_request`, `not_found`), or got no answer (`network`).
    #[error("{}", .0.message)]
    Refused(super::transport::CallError),
    /// The database belongs to another user than the one named at open.
    #[error("{0}")]
    WrongUser(String),
}

impl ClientError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::BadInput(_) => Code::BadInput.as_str(),
            ClientError::StorageUnavailable(_) => Code::StorageUnavailable.as_str(),
            ClientError::StorageFailed(_) => Code::StorageFailed.as_str(),
            ClientError::StorageFull(_) => Code::StorageFull.as_str(),
            ClientError::RecoveryRequired { .. } => Code::RecoveryRequired.as_str(),
            ClientError::Closed => Code::Closed.as_str(),
            ClientError::IdsExhausted => Code::IdsExhausted.as_str(),
            ClientError::ClockExhausted(_) => Code::ClockExhausted.as_str(),
            ClientError::Invalid(_) => Code::Invalid.as_str(),
            ClientError::Denied(d) => d.code,
            ClientError::Refused(_) => Code::Refused.as_str(),
            ClientError::WrongUser(_) => Code::WrongUser.as_str(),
        }
    }
}

impl From<StoreError> for ClientError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => ClientError::StorageUnavailable(m),
            StoreError::ClosedByApp => ClientError::Closed,
            e @ StoreError::Full(_) => {
                ClientError::StorageFull(format!("{e}; free space on this device (nothing of the edit was written)"))
            }
            other => ClientError::StorageFailed(other.to_string()),
        }
    }
}

impl From<EngineError> for ClientError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::IdsExhausted => ClientError::IdsExhausted,
            EngineError::ClockExhausted => ClientError::ClockExhausted(e.to_string()),
            EngineError::Denied(d) => ClientError::Denied(d),
            e @ (EngineError::WrongUser { .. } | EngineError::TokenOfAnotherUser(_)) => ClientError::WrongUser(e.to_string()),
            // The stored rows do not decode: the database's fault, not the app's input.
            EngineError::Store(s) => ClientError::from(s),
            other => ClientError::BadInput(other.to_string()),
        }
    }
}

/// One edit of [`Client::change_many`]: `fields` on `table/row_id`, in
/// `space` (`None`: where the row lives, or the personal space).
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The space named, if any.
    pub space: Option<String>,
    /// The table.
    pub table: String,
    /// The row; `None`: a new row, named by the device when recorded.
    pub row_id: Option<String>,
    /// The fields set.
    pub fields: Fields,
}

/// How a sync call ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOutcome {
    /// What the cycle did.
    #[serde(flatten)]
    pub report: SyncReport,
    /// Whether the cycle reached the end (pushed all, pulled to the head).
    pub ok: bool,
    /// When a retry is scheduled, if the cycle stopped on a failure.
    pub retry_at: Option<u64>,
    /// The failure, if any.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::{Denied, FORBIDDEN, READ_ONLY};

    /// The codes `MarksyncError['code']` lists in the package's types.
    fn typed_codes() -> Vec<String> {
        let dts = include_str!("../../www/index.d.ts");
        let at = dts.find("export interface MarksyncError").expect("index.d.ts declares MarksyncError");
        let decl = &dts[at..];
        let from = decl.find("code:").expect("MarksyncError has a code") + "code:".len();
        let to = decl[from..].find(';').expect("the code's type ends") + from;
        decl[from..to].split('|').filter_map(|p| Some(p.trim().strip_prefix('\'')?.strip_suffix('\'')?.to_owned())).collect()
    }

    #[test]
    fn the_types_list_exactly_the_codes_the_boundary_throws() {
        let thrown = [
            ClientError::BadInput(String::new()),
            ClientError::StorageUnavailable(String::new()),
            ClientError::StorageFailed(String::new()),
            ClientError::StorageFull(String::new()),
            ClientError::RecoveryRequired { code: String::new(), message: String::new() },
            ClientError::Closed,
            ClientError::IdsExhausted,
            ClientError::ClockExhausted(String::new()),
            ClientError::Invalid(crate::schema::Refusal { code: Code::OutOfRange, reason: String::new(), field: None }),
            ClientError::Denied(Denied { code: READ_ONLY, reason: String::new() }),
            ClientError::Denied(Denied { code: FORBIDDEN, reason: String::new() }),
            ClientError::Refused(crate::driver::CallError::network(crate::attempt::Failure::Timeout)),
            ClientError::WrongUser(String::new()),
        ];
        // Every variant is above: a new one fails to compile here until it is listed.
        for e in &thrown {
            match e {
                ClientError::BadInput(_)
                | ClientError::StorageUnavailable(_)
                | ClientError::StorageFailed(_)
                | ClientError::StorageFull(_)
                | ClientError::RecoveryRequired { .. }
                | ClientError::Closed
                | ClientError::IdsExhausted
                | ClientError::ClockExhausted(_)
                | ClientError::Invalid(_)
                | ClientError::Denied(_)
                | ClientError::Refused(_)
                | ClientError::WrongUser(_) => {}
            }
        }
        let mut codes: Vec<String> = thrown.iter().map(|e| e.code().to_owned()).collect();
        // Thrown by the package's glue before there is a module to throw anything (`load()`).
        let glue = include_str!("../../www/index.js");
        assert!(glue.contains("e.code = 'load_failed'"), "www/index.js throws load_failed");
        codes.push("load_failed".to_owned());
        codes.sort();
        codes.dedup();
        let mut typed = typed_codes();
        typed.sort();
        assert_eq!(typed, codes, "www/index.d.ts MarksyncError['code'] against what the boundary throws");
    }

    #[test]
    fn stored_rows_that_do_not_decode_are_a_storage_failure_not_bad_input() {
        let e = ClientError::from(EngineError::Store(StoreError::Corrupt("base chunk: truncated".into())));
        assert_eq!(e.code(), Code::StorageFailed.as_str(), "{e:?}");
    }
}
