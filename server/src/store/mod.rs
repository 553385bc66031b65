//! Storage: verdicts, rows and heads in SQLite or PostgreSQL, with one behaviour.
//!
//! A push is one transaction under the user's lock (PROTOCOL §3):
//!
//! 1. **lock**: make sure the user's head row exists, then lock it
//!    (`SELECT … FOR UPDATE` in Postgres; `BEGIN IMMEDIATE` on the single
//!    write connection in SQLite);
//! 2. **load** the stored rows of the batch's row keys and the saved verdicts
//!    of its opIds, one query each, into [`marksync::judge::Known`];
//! 3. **judge** with [`marksync::judge::judge_batch`] (all rules live there);
//! 4. **remember**: one multi-row `INSERT … ON CONFLICT (user_id, op_id) DO
//!    NOTHING RETURNING op_id`; fewer rows back than sent means another writer
//!    answered one of these ops first: roll back and go again from 1;
//! 5. **write** the rows of [`marksync::judge::Judgement::writes`] (one
//!    multi-row upsert) and the new head, then commit.
//!
//! The loop is written once (`push.rs`); each backend brings only its SQL.
//! Nothing here compares opIds or marks, and nothing is written before step 4.

mod codec;
mod postgres;
mod push;
mod spaces;
mod sqlite;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use marksync::judge::{recall, JudgeError, Judgement, Limits, Remembered};
use marksync::protocol::{Change, Op, OpId, PullResponse, RememberedVerdict, RowKey, SpacePage, SpacesPullResponse};
use marksync::schema::Schema;
use marksync::space::Role;

use crate::metrics::SameUserProbe;

pub use postgres::PgStore;
pub use spaces::{Actor, SpaceError};
pub use sqlite::SqliteStore;

/// How many times a push is judged again when another writer remembered one
/// of its ops first (step 4). Under the user's lock this does not happen;
/// the bound only keeps a broken lock from looping forever.
pub const MAX_JUDGE_ATTEMPTS: usize = 3;

/// A storage failure. Its text is logged, never sent to a client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
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
    Store(#[from] StoreError),
    /// A `failBeforeCommit` fault rolled the push back: 500 `internal`.
    #[error("injected failure before commit")]
    InjectedFailure,
}

impl From<sqlx::Error> for PushError {
    fn from(e: sqlx::Error) -> Self {
        PushError::Store(StoreError::Db(e))
    }
}

/// What a push may be asked to do besides judging (fault injection, probes).
#[derive(Debug, Clone, Default)]
pub struct PushControl {
    /// Hold the user's lock this long, after loading and before judging (`delayMs` fault).
    pub hold_lock_for: Duration,
    /// Roll back instead of committing and fail (`failBeforeCommit` fault).
    pub fail_before_commit: bool,
    /// Counts pushes of one user inside the lock at once (must never exceed 1).
    pub probe: Option<Arc<SameUserProbe>>,
    /// Test-only sabotage, see [`Sabotage`].
    pub sabotage: Sabotage,
}

/// Deliberately broken behaviours, used once to prove that the tests catch
/// them. Never set outside tests; `None` in every real server.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sabotage {
    /// The real judge.
    #[default]
    None,
    /// "write → remember": forget the saved verdicts and write the rows
    /// even when the verdict insert says the op was answered before.
    WriteBeforeRemember,
    /// Postgres: read the head without `FOR UPDATE` — no per-user lock. The
    /// verdict insert then finds conflicts, and the push is judged again.
    NoLock,
}

/// What a user has stored (verdicts as a sender, rows of the personal space), for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Remembered verdicts.
    pub verdicts: i64,
    /// Stored rows.
    pub rows: i64,
    /// The head seq of the user's personal space (0 when it has none).
    pub head: i64,
}

/// The server's storage: one of the two backends.
#[derive(Debug, Clone)]
pub enum Store {
    /// Embedded SQLite, a file.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    Postgres(PgStore),
}

impl Store {
    /// Connects to `url` (`sqlite://FILE` — created if missing — or
    /// `postgres://…`) and runs the migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Store::Sqlite(SqliteStore::connect(url, max_connections).await?))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Store::Postgres(PgStore::connect(url, max_connections).await?))
        } else {
            Err(StoreError::BadUrl(redact(url)))
        }
    }

    /// The backend's name: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    /// Judges `batch` for `user` in one transaction under the user's lock,
    /// persists the judgement, and returns it.
    pub async fn push(
        &self,
        user: &str,
        schema: &Schema,
        batch: &[Op],
        limits: &Limits,
        ctl: &PushControl,
    ) -> Result<Judgement, PushError> {
        match self {
            Store::Sqlite(s) => push::push(s, user, schema, batch, limits, ctl).await,
            Store::Postgres(s) => push::push(s, user, schema, batch, limits, ctl).await,
        }
    }

    /// Wakes this process's event streams on pushes other server processes
    /// commit to the same database (PostgreSQL `LISTEN`/`NOTIFY`; SQLite is
    /// one process's file: nothing to listen to).
    pub fn forward_pokes(
        &self,
        pokes: tokio::sync::broadcast::Sender<crate::Poke>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        if let Store::Postgres(s) = self {
            s.forward_pokes(pokes, shutdown);
        }
    }

    /// `POST /v1/verdicts`: what is remembered of `op_ids` for `user`, in the
    /// order asked. Read-only: two reads, no lock, no write, no seq; the
    /// answer is built by the core's [`marksync::judge::recall`] (rows as the
    /// newest version of `schema` spells them).
    pub async fn verdicts(
        &self,
        schema: &Schema,
        user: &str,
        op_ids: &[OpId],
        limits: &Limits,
    ) -> Result<Vec<RememberedVerdict>, StoreError> {
        let ids: Vec<&str> = op_ids.iter().map(OpId::as_str).collect();
        let personal = marksync::space::personal(user);
        let (saved, stored) = match self {
            Store::Sqlite(s) => s.recall(user, &personal, &ids).await?,
            Store::Postgres(s) => s.recall(user, &personal, &ids).await?,
        };
        let mut rows = HashMap::with_capacity(stored.len());
        for (space, t, r, f, m) in stored {
            rows.insert((space.into(), RowKey::new(t, r)), codec::decode_row(&f, &m)?);
        }
        let saved = saved
            .into_iter()
            .map(|(id, status, reason, code, space, table, row_id)| {
                let verdict = Remembered::from_columns(&status, reason, code)
                    .ok_or_else(|| StoreError::Corrupt(format!("verdict status {status:?}")))?;
                let space: marksync::space::SpaceId = space.as_deref().unwrap_or(&personal).into();
                let key = table.zip(row_id).map(|(t, r)| (space, RowKey::new(t, r)));
                Ok((OpId::new(id), (verdict, key)))
            })
            .collect::<Result<HashMap<_, _>, StoreError>>()?;
        Ok(recall(schema, op_ids, &saved, &rows, limits))
    }

    /// `GET /v1/pull`: rows of `user`'s personal space changed after
    /// `cursor`, at most `limit`, in seq order.
    pub async fn pull(&self, user: &str, cursor: u64, limit: usize) -> Result<PullResponse, StoreError> {
        let personal = marksync::space::personal(user);
        match self {
            Store::Sqlite(s) => s.pull(&personal, cursor, limit).await,
            Store::Postgres(s) => s.pull(&personal, cursor, limit).await,
        }
    }

    /// `POST /v1/pull`: every space `user` follows or belongs to, read in one
    /// snapshot (PROTOCOL §4b).
    pub async fn pull_spaces(
        &self,
        user: &str,
        followed: &std::collections::BTreeMap<String, marksync::space::Follow>,
        limit: Option<usize>,
    ) -> Result<SpacesPullResponse, StoreError> {
        match self {
            Store::Sqlite(s) => spaces::pull(s, user, followed, limit).await,
            Store::Postgres(s) => spaces::pull(s, user, followed, limit).await,
        }
    }

    /// The head seq of `space` (0 when it has none).
    pub async fn head(&self, space: &str) -> Result<u64, StoreError> {
        let head = match self {
            Store::Sqlite(s) => s.head(space).await?,
            Store::Postgres(s) => s.head(space).await?,
        };
        codec::seq_from_db(head)
    }

    /// Every space `user` is a member of, with the role and the head: the
    /// personal space first, then the others in byte order of their names.
    pub async fn spaces_of(&self, user: &str) -> Result<Vec<(String, marksync::space::Role, u64)>, StoreError> {
        let stored = match self {
            Store::Sqlite(s) => s.memberships(user).await?,
            Store::Postgres(s) => s.memberships(user).await?,
        };
        let personal = marksync::space::personal(user);
        let head = self.head(&personal).await?;
        let mut out = vec![(personal.clone(), Role::Owner, head)];
        let mut rest = Vec::with_capacity(stored.len());
        for (space, role, head) in stored {
            if space == personal {
                continue;
            }
            rest.push((space, stored_role(&role)?, codec::seq_from_db(head)?));
        }
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(rest);
        Ok(out)
    }

    /// Creates the shared space `space`, owned by `owner`.
    pub async fn create_space(&self, space: &str, owner: &str) -> Result<Role, SpaceError> {
        match self {
            Store::Sqlite(s) => spaces::create(s, space, owner).await,
            Store::Postgres(s) => spaces::create(s, space, owner).await,
        }
    }

    /// Sets (or with `None` removes) `user`'s role in `space`, as `actor`.
    pub async fn set_member(
        &self,
        actor: Actor<'_>,
        space: &str,
        user: &str,
        role: Option<Role>,
    ) -> Result<(), SpaceError> {
        match self {
            Store::Sqlite(s) => spaces::set_member(s, actor, space, user, role).await,
            Store::Postgres(s) => spaces::set_member(s, actor, space, user, role).await,
        }
    }

    /// The members of `space`, for a member of it or an admin.
    pub async fn members(&self, actor: Actor<'_>, space: &str) -> Result<Vec<(String, Role)>, SpaceError> {
        let mut list = match self {
            Store::Sqlite(s) => spaces::members(s, actor, space).await?,
            Store::Postgres(s) => spaces::members(s, actor, space).await?,
        };
        let first = usize::from(marksync::space::personal_owner(space).is_some());
        list[first..].sort_by(|a, b| a.0.cmp(&b.0));
        Ok(list)
    }

    /// How many verdicts and rows `user` has, and the head.
    pub async fn counts(&self, user: &str) -> Result<Counts, StoreError> {
        match self {
            Store::Sqlite(s) => s.counts(user).await,
            Store::Postgres(s) => s.counts(user).await,
        }
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.ping().await,
            Store::Postgres(s) => s.ping().await,
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(s) => s.close().await,
            Store::Postgres(s) => s.close().await,
        }
    }

    /// The one-statement-per-op judge, kept only for the load benchmark.
    #[cfg(feature = "bench-per-op")]
    pub async fn push_per_op(&self, user: &str, schema: &Schema, batch: &[Op]) -> Result<Judgement, PushError> {
        match self {
            Store::Sqlite(s) => s.push_per_op(user, schema, batch).await,
            Store::Postgres(s) => s.push_per_op(user, schema, batch).await,
        }
    }
}

/// Milliseconds since the Unix epoch, for `decided_at`.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The server's clock, in ms since the Unix epoch, as the protocol's integer.
pub fn now_ms_u64() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

/// The verdicts a judgement remembers, as columns (one entry per verdict in each).
pub(crate) struct VerdictColumns {
    pub(crate) ids: Vec<String>,
    pub(crate) statuses: Vec<&'static str>,
    pub(crate) reasons: Vec<Option<String>>,
    pub(crate) codes: Vec<Option<String>>,
    /// The row a rejected op edits (null for applied ones: they are recalled without a row).
    pub(crate) spaces: Vec<Option<String>>,
    pub(crate) tables: Vec<Option<String>>,
    pub(crate) row_ids: Vec<Option<String>>,
}

pub(crate) fn verdict_columns(j: &Judgement) -> VerdictColumns {
    let n = j.remember.len();
    let mut cols = VerdictColumns {
        ids: Vec::with_capacity(n),
        statuses: Vec::with_capacity(n),
        reasons: Vec::with_capacity(n),
        codes: Vec::with_capacity(n),
        spaces: Vec::with_capacity(n),
        tables: Vec::with_capacity(n),
        row_ids: Vec::with_capacity(n),
    };
    for r in &j.remember {
        cols.ids.push(r.op_id.as_str().to_owned());
        cols.statuses.push(r.verdict.status());
        match &r.verdict {
            Remembered::Applied => {
                cols.reasons.push(None);
                cols.codes.push(None);
                cols.spaces.push(None);
                cols.tables.push(None);
                cols.row_ids.push(None);
            }
            Remembered::Rejected { reason, code } => {
                cols.reasons.push(Some(reason.clone()));
                cols.codes.push(Some(code.clone()));
                cols.spaces.push(Some(r.space.to_string()));
                cols.tables.push(Some(r.key.table.clone()));
                cols.row_ids.push(Some(r.key.row_id.clone()));
            }
        }
    }
    cols
}

/// A stored row as loaded: (space, table, rowId, fields JSON, marks JSON).
pub(crate) type StoredRow = (String, String, String, String, String);
/// A saved verdict as loaded: (opId, status, reason, code).
pub(crate) type SavedVerdict = (String, String, Option<String>, Option<String>);
/// A saved verdict as recalled: (opId, status, reason, code, space, table,
/// rowId); a null space with a row is the sender's personal space (verdicts
/// remembered before spaces).
pub(crate) type RecalledVerdict =
    (String, String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>);

/// The distinct placed rows that recalled rejections name, `personal` for a null space.
pub(crate) fn rejected_keys<'a>(personal: &'a str, saved: &'a [RecalledVerdict]) -> Vec<(&'a str, &'a str, &'a str)> {
    let mut seen = std::collections::HashSet::new();
    saved
        .iter()
        .filter_map(|(_, status, _, _, s, t, r)| match (status.as_str(), t, r) {
            ("rejected", Some(t), Some(r)) => Some((s.as_deref().unwrap_or(personal), t.as_str(), r.as_str())),
            _ => None,
        })
        .filter(|k| seen.insert(*k))
        .collect()
}

/// Steps 2–3 once a backend has loaded, under the spaces' locks, their
/// heads, the batch's stored rows, the sender's saved verdicts and roles:
/// builds [`marksync::judge::Known`], applies the `delayMs` fault (the locks
/// held with the batch loaded) and judges in the core.
pub(crate) async fn judge_loaded(
    schema: &Schema,
    sender: &str,
    batch: &[Op],
    limits: &Limits,
    heads: Vec<(String, i64)>,
    loaded: push::Loaded,
    ctl: &PushControl,
) -> Result<Judgement, PushError> {
    let mut known = marksync::judge::Known::default();
    for (space, head) in heads {
        known.heads.insert(space.into(), codec::seq_from_db(head)?);
    }
    for (space, role) in loaded.roles {
        known.roles.insert(space.into(), stored_role(&role)?);
    }
    for (space, t, r, f, m) in loaded.rows {
        known.rows.insert((space.into(), marksync::RowKey::new(t, r)), codec::decode_row(&f, &m)?);
    }
    if ctl.sabotage != Sabotage::WriteBeforeRemember {
        known.verdicts = known_verdicts(loaded.verdicts)?;
    }
    if !ctl.hold_lock_for.is_zero() {
        tokio::time::sleep(ctl.hold_lock_for).await;
    }
    Ok(marksync::judge::judge_batch(schema, sender, batch, known, limits)?)
}

/// A role as stored in `members.role`.
pub(crate) fn stored_role(role: &str) -> Result<Role, StoreError> {
    Role::parse(role).ok_or_else(|| StoreError::Corrupt(format!("member role {role:?}")))
}

/// Step 4's check: whether the verdict insert met verdicts another writer
/// remembered first (fewer rows back than sent), so the push must be judged
/// again. Logs it and counts it on the probe.
pub(crate) fn answered_by_another_writer(ctl: &PushControl, user: &str, sent: usize, inserted: usize) -> bool {
    if inserted == sent || ctl.sabotage == Sabotage::WriteBeforeRemember {
        return false;
    }
    tracing::warn!(user, sent, inserted, "verdicts answered by another writer; judging again");
    if let Some(p) = &ctl.probe {
        p.judged_again();
    }
    true
}

/// A row as pulled: (table, rowId, fields JSON, marks JSON, seq).
pub(crate) type PulledRow = (String, String, String, String, i64);

/// A pull page from a stream of up to `limit + 1` rows in seq order: at most
/// `limit` changes and [`marksync::protocol::MAX_PULL_PAGE_BYTES`] of rows
/// (never fewer than one change). The stream is read only as far as the page
/// goes, so big rows past the budget are never loaded.
pub(crate) async fn page<S>(rows: S, cursor: u64, limit: usize) -> Result<PullResponse, StoreError>
where
    S: futures_util::Stream<Item = Result<PulledRow, sqlx::Error>> + Unpin,
{
    let (page, _) = page_within(rows, String::new(), cursor, limit, marksync::protocol::MAX_PULL_PAGE_BYTES).await?;
    Ok(PullResponse {
        changes: page.changes,
        cursor: page.cursor,
        has_more: page.has_more,
        now: None,
        schema_version: None,
    })
}

/// One space's page of a pull, within `budget` bytes of rows (never fewer
/// than one change), and the bytes it took.
pub(crate) async fn page_within<S>(
    mut rows: S,
    space: String,
    cursor: u64,
    limit: usize,
    budget: usize,
) -> Result<(SpacePage, usize), StoreError>
where
    S: futures_util::Stream<Item = Result<PulledRow, sqlx::Error>> + Unpin,
{
    use futures_util::TryStreamExt;
    let (mut changes, mut bytes, mut has_more) = (Vec::new(), 0usize, false);
    while let Some((t, r, f, m, seq)) = rows.try_next().await? {
        let size = f.len() + m.len();
        if changes.len() == limit || !marksync::protocol::page_fits(changes.len(), bytes, size, budget) {
            has_more = true;
            break;
        }
        bytes += size;
        changes.push(Change { key: RowKey::new(t, r), row: codec::decode_row(&f, &m)?, seq: codec::seq_from_db(seq)? });
    }
    let cursor = changes.last().map_or(cursor, |c| c.seq);
    Ok((SpacePage { space, changes, cursor, has_more }, bytes))
}

/// Builds [`marksync::judge::Known::verdicts`] from stored columns.
pub(crate) fn known_verdicts(
    rows: impl IntoIterator<Item = (String, String, Option<String>, Option<String>)>,
) -> Result<HashMap<marksync::OpId, Remembered>, StoreError> {
    rows.into_iter()
        .map(|(id, status, reason, code)| {
            Remembered::from_columns(&status, reason, code)
                .map(|r| (marksync::OpId::new(id), r))
                .ok_or_else(|| StoreError::Corrupt(format!("verdict status {status:?}")))
        })
        .collect()
}

/// A URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
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
