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
    /// A SQLite URL that names no file (`sqlite:`, `sqlite://`: an unset
    /// variable) or asks for memory other than as `sqlite::memory:`. Such a
    /// database is lost at every restart, and its readers would each see
    /// another, empty one.
    #[error("{0}")]
    NoFile(String),
    /// The database could not be opened or reached at start; `what` names
    /// the file or the redacted URL.
    #[error("cannot open {what}: {source}")]
    Open {
        /// The file, or the URL without its password.
        what: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The database can be read but not written (a read-only file or role,
    /// a full disk, a hot standby).
    #[error("{what} cannot be written: {source}")]
    NotWritable {
        /// The file, or the URL without its password.
        what: String,
        /// The write that failed.
        source: Box<DbError>,
    },
    /// The database carries migrations this server does not know: it was
    /// migrated by a newer server (then rolled back?).
    #[error(
        "the database has migrations this server does not know ({unknown:?}; this server knows 1 to {known}): it was migrated by a newer marksync-server. Run that version, or start with --allow-newer-schema if you know this one can run on it"
    )]
    SchemaNewer {
        /// The versions this server does not know.
        unknown: Vec<i64>,
        /// The newest version this server knows.
        known: i64,
    },
    /// The database lacks migrations this server needs and was told not to
    /// apply them (`--no-migrate`).
    #[error(
        "the database lacks migrations {missing:?} this server needs: run `marksync-server migrate` (with a role that may change the schema), then start again"
    )]
    SchemaBehind {
        /// The versions not applied.
        missing: Vec<i64>,
    },
}

impl DbError {
    /// Whether this failure is the database's being out of reach or unable
    /// to take writes just now — a connection refused or lost, a pool with no
    /// connection free in time, a full disk, an I/O error, a read-only or
    /// shutting-down database — rather than a fault of the request or a bug.
    /// Such a failure is answered `503 unavailable` with `Retry-After`, and
    /// heals by itself when the database does.
    pub fn is_unavailable(&self) -> bool {
        match self {
            DbError::Db(e) | DbError::Open { source: e, .. } => unavailable(e),
            DbError::NotWritable { .. } => true,
            _ => false,
        }
    }
}

impl DbError {
    /// Whether the database refused a write as read-only (SQLite's
    /// SQLITE_READONLY and its extended codes, PostgreSQL's 25006).
    pub fn is_read_only(&self) -> bool {
        let DbError::Db(sqlx::Error::Database(d)) = self else { return false };
        d.code().is_some_and(|code| match d.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
            Some(_) => code.parse::<i32>().is_ok_and(|n| n & 0xff == 8),
            None => code == "25006",
        })
    }
}

fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|code| {
            if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                sqlite_unavailable(&code)
            } else {
                postgres_unavailable(&code)
            }
        }),
        _ => false,
    }
}

/// A SQLite result code that means "not now" rather than "not this": the
/// low byte of an extended code is the primary one — SQLITE_BUSY,
/// SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN.
fn sqlite_unavailable(code: &str) -> bool {
    code.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
}

/// A PostgreSQL SQLSTATE that means "not now": connection exceptions (08),
/// insufficient resources — disk full, out of memory, too many connections
/// (53) —, an administrator's shutdown or a server starting (57P), a
/// read-only transaction on a hot standby (25006).
fn postgres_unavailable(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("53") || code.starts_with("57P") || code == "25006"
}

/// Why a push was not judged.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The first op's schema is newer than the server's: 409 `schema_too_new`.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// Storage failed: 503 `unavailable` or 500 `internal`.
    #[error(transparent)]
    Store(#[from] DbError),
    /// The app's rules could not read what they need: 500 `internal`, nothing judged.
    #[error("the app's rules could not load: {0}")]
    Rules(String),
    /// A `failBeforeCommit` fault rolled the push back: 500 `internal`.
    #[error("injected failure before commit")]
    InjectedFailure,
}

impl super::dialect::WriteFailure for PushError {
    fn db_error(&self) -> Option<&DbError> {
        match self {
            PushError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for PushError {
    fn from(e: sqlx::Error) -> Self {
        PushError::Store(DbError::Db(e))
    }
}

/// Query parameters of a database URL that carry a secret (libpq's
/// `password` and `sslpassword`, and the spellings drivers accept).
const SECRET_PARAMS: [&str; 4] = ["password", "sslpassword", "pass", "passwd"];

/// A URL without its passwords, for messages and logs: the password of its
/// user info (`u:pw@`) and the value of every secret query parameter
/// (`?password=…`) become `***`.
pub fn redact(url: &str) -> String {
    // The query starts after the user info, whose password may hold a `?`.
    let from = url.rfind('@').unwrap_or(0);
    let (base, query) = match url[from..].find('?') {
        Some(q) => (&url[..from + q], Some(&url[from + q + 1..])),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &base[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}://{}:***{}", &base[..s], &creds[..c], &base[at..]),
                None => base.to_owned(),
            }
        }
        _ => base.to_owned(),
    };
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if SECRET_PARAMS.iter().any(|s| k.eq_ignore_ascii_case(s)) => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
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

    #[test]
    fn redact_hides_passwords_in_the_query_too() {
        assert_eq!(redact("postgres://u@h/db?password=X"), "postgres://u@h/db?password=***");
        assert_eq!(
            redact("postgres://u:pw@h/db?sslmode=require&PassWord=X&sslpassword=Y&application_name=a"),
            "postgres://u:***@h/db?sslmode=require&PassWord=***&sslpassword=***&application_name=a"
        );
        // A password holding `@` or `?` is still hidden whole.
        assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u:p?ss@h/db?password=Z"), "postgres://u:***@h/db?password=***");
    }

    #[test]
    fn outages_are_told_from_faults() {
        let io = DbError::Db(sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
        assert!(io.is_unavailable());
        assert!(DbError::Db(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(!DbError::Corrupt("x".into()).is_unavailable());
        assert!(!DbError::Db(sqlx::Error::RowNotFound).is_unavailable());
        for code in ["13", "10", "778", "8", "5"] {
            assert!(sqlite_unavailable(code), "{code}");
        }
        for code in ["1", "19", "2067", "787"] {
            assert!(!sqlite_unavailable(code), "{code}");
        }
        for code in ["08006", "08001", "57P01", "53100", "25006"] {
            assert!(postgres_unavailable(code), "{code}");
        }
        for code in ["23505", "42P01", "40001", "22P02"] {
            assert!(!postgres_unavailable(code), "{code}");
        }
    }
}
