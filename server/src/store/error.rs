//! Why storage failed, and why a push was not judged.

use marksync::judge::JudgeError;

/// How many times a push is judged again when another writer remembered one
/// of its ops first. Under the spaces' locks this does not happen; the bound
/// only keeps a broken lock from looping forever.
pub const MAX_JUDGE_ATTEMPTS: usize = 3;

/// A storage failure. Its text is logged, never sent to a client.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// A stored value cannot be read back (bad JSON, a negative seq…).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The `--database` URL names no backend this server has.
    #[error("unsupported database url (use sqlite://FILE or postgres://…): {0}")]
    BadUrl(String),
    /// Another writer kept answering this batch's ops first.
    #[error("verdicts kept conflicting after {MAX_JUDGE_ATTEMPTS} attempts")]
    Conflict,
}

/// Why a push was not judged.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The first op's schema is newer than the server's: 409 `schema_too_new`.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// Storage failed: 500 `internal`.
    #[error(transparent)]
    Store(#[from] DbError),
    /// A `failBeforeCommit` fault rolled the push back: 500 `internal`.
    #[error("injected failure before commit")]
    InjectedFailure,
}

impl From<sqlx::Error> for PushError {
    fn from(e: sqlx::Error) -> Self {
        PushError::Store(DbError::Db(e))
    }
}

/// A URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}://{}:***{}", &url[..s], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_the_password_only() {
        assert_eq!(redact("postgres://u:secret@h:5/db"), "postgres://u:***@h:5/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
    }
}
