//! The app's own rules, in Rust, inside the judge (docs/server.md, "Rules").
//!
//! A push runs them for each op the schema and the roles let through and
//! that would move its row, in the push's transaction, after its spaces are
//! locked: [`Rules::load`] first reads what the rules need of the app's own
//! tables (once per push, through the transaction, inside a savepoint rolled
//! back after it — a rule may read, never write), then the judge calls
//! [`Rules::check`] per op. A refusal is a `rejected` verdict like any other:
//! remembered forever, replayed word for word, never judged again — a change
//! of the rules never changes a past answer.

use std::any::Any;

use futures_util::future::BoxFuture;
use marksync::protocol::Op;
pub use marksync::rules::{RuleInput, RuleRefusal};

/// The push's transaction, as the app's rules may read it.
pub enum AppDb<'a> {
    /// The SQLite file.
    Sqlite(&'a mut sqlx::SqliteConnection),
    /// PostgreSQL.
    Postgres(&'a mut sqlx::PgConnection),
}

/// What [`Rules::load`] read, handed to every [`Rules::check`] of the push.
#[derive(Default)]
pub struct Loaded(Option<Box<dyn Any + Send + Sync>>);

impl Loaded {
    /// Holds `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Loaded {
        Loaded(Some(Box::new(value)))
    }

    /// The value, if `load` gave one of this type.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_ref().and_then(|b| b.downcast_ref())
    }
}

/// Rules an app adds to the judge, written in Rust and given to
/// [`crate::embed::Builder::rules`].
pub trait Rules: Send + Sync + 'static {
    /// Reads what [`Rules::check`] needs for `user`'s `batch`, through the
    /// push's transaction (nothing it writes is kept). An error fails the
    /// push (`500`, logged; nothing is judged, the device sends it again).
    fn load<'a>(&'a self, db: AppDb<'a>, user: &'a str, batch: &'a [Op]) -> BoxFuture<'a, Result<Loaded, String>> {
        let _ = (db, user, batch);
        Box::pin(async { Ok(Loaded::default()) })
    }

    /// Allows one op, or refuses it with a stable code and the person's words.
    fn check(&self, input: &RuleInput<'_>, loaded: &Loaded) -> Result<(), RuleRefusal>;
}

/// The app's rules with what they loaded, as the core's judge calls them.
pub(crate) struct Bound<'a> {
    pub rules: &'a dyn Rules,
    pub loaded: Loaded,
}

impl marksync::rules::Rules for Bound<'_> {
    fn check(&self, input: &RuleInput<'_>) -> Result<(), RuleRefusal> {
        self.rules.check(input, &self.loaded)
    }
}

impl std::fmt::Debug for dyn Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rules")
    }
}
