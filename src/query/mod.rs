//! Queries on the device: which visible rows of a table an app asks for,
//! in what order, how many, from where (PROTOCOL §7, "Queries").
//!
//! | concern | file |
//! |---|---|
//! | the one order of values | `value.rs` |
//! | a query: filters, order, page; matching and comparing rows | this file |
//! | indexes over visible rows, kept as rows change | `index.rs` |
//! | an index's entries, packed in sorted runs | `entries.rs` |
//! | indexes kept on disk: what is kept, and a row's change to them | `disk.rs` |
//! | choosing an index or a scan, and running the query | `run.rs` |
//!
//! Everything here is pure: rows come from a [`run::Source`] (the engine's
//! replica as the app sees it), and the answer is the rows, never a copy of
//! a rule the JS glue would apply again.

pub mod disk;
pub mod entries;
pub mod index;
pub mod run;
pub mod sortkey;
pub mod value;

use std::cmp::Ordering;

use crate::protocol::{Row, RowKey, Value};
pub use index::{IndexDef, Indexes};
pub use run::{count, explain, moved, moves, plan_on_disk, run, update, DiskPlan, Explain, Hits, Moved, Source};
use value::{cmp, cmp_text, kind};

/// The most rows a query may ask for at once, and the most values of an `in`.
pub const MAX_LIMIT: usize = 100_000;

/// A query the app cannot mean: refused before anything is read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

/// One condition on a field's value (a missing field reads as `null`).
#[derive(Debug, Clone, PartialEq)]
pub enum Pred {
    /// Equal (same kind, same value).
    Eq(Value),
    /// Equal to one of these.
    In(Vec<Value>),
    /// Above, of the bound's kind.
    Gt(Value),
    /// At or above, of the bound's kind.
    Gte(Value),
    /// Below, of the bound's kind.
    Lt(Value),
    /// At or below, of the bound's kind.
    Lte(Value),
    /// A string that starts with this.
    Prefix(String),
}

impl Pred {
    /// Whether `v` passes.
    pub fn holds(&self, v: &Value) -> bool {
        let within = |b: &Value, ok: fn(Ordering) -> bool| kind(v) == kind(b) && ok(cmp(v, b));
        match self {
            Pred::Eq(x) => cmp(v, x) == Ordering::Equal,
            Pred::In(xs) => xs.iter().any(|x| cmp(v, x) == Ordering::Equal),
            Pred::Gt(b) => within(b, |o| o == Ordering::Greater),
            Pred::Gte(b) => within(b, |o| o != Ordering::Less),
            Pred::Lt(b) => within(b, |o| o == Ordering::Less),
            Pred::Lte(b) => within(b, |o| o != Ordering::Greater),
            Pred::Prefix(p) => matches!(v, Value::String(s) if s.starts_with(p.as_str())),
        }
    }
}

/// A field and every condition on it (all must hold).
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// The field, as the app names it.
    pub field: String,
    /// Its conditions, ANDed.
    pub preds: Vec<Pred>,
}

/// A sort direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Smallest first.
    Asc,
    /// Largest first (ties still by rowId ascending).
    Desc,
}

/// One key of the order.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// The field.
    pub field: String,
    /// Its direction.
    pub dir: Dir,
}

/// Where a page starts: a row a query returned, as it was returned.
#[derive(Debug, Clone, PartialEq)]
pub struct After {
    /// Its key (the space as the device stores it).
    pub key: RowKey,
    /// Its values of the order's fields, in the order's order.
    pub values: Vec<Value>,
}

/// A query of one table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Query {
    /// Conditions, ANDed.
    pub filters: Vec<Filter>,
    /// The order; ties (and no order) by rowId, then space.
    pub order: Vec<Order>,
    /// At most this many rows.
    pub limit: Option<usize>,
    /// Only rows strictly after this one, in the query's order.
    pub after: Option<After>,
    /// Only rows of this space (as the device stores it: `""` is the personal one).
    pub space: Option<String>,
}

/// A field's value in a row as the app sees it: missing reads as `null`.
pub fn field<'r>(row: &'r Row, name: &str) -> &'r Value {
    row.get(name).unwrap_or(&Value::Null)
}

/// A field a query or an index names: an app's field
/// ([`crate::protocol::FIELD_NAME_RULE`]). A row's `_id` and `_space` are
/// no fields (a row is read by its id with `row()`, a space with `space`),
/// and no name an edit could never write is read as an empty answer.
pub fn check_field(name: &str) -> Result<(), &'static str> {
    if name.starts_with('_') {
        return Err("a query names an app's fields, [A-Za-z][A-Za-z0-9_]{0,63}: _id and _space are no fields (read a row by its id with row(), a space's rows with space)");
    }
    crate::protocol::check_field_key(name)
}

impl Query {
    /// Checks what a query's shape cannot say: a limit in range, `in` lists
    /// of a sane size, no field ordered twice, ranges of a value kind.
    pub fn check(&self) -> Result<(), QueryError> {
        if let Some(l) = self.limit {
            if l == 0 || l > MAX_LIMIT {
                return Err(QueryError(format!("limit must be a whole number from 1 to {MAX_LIMIT} (got {l})")));
            }
        }
        for f in &self.filters {
            check_field(&f.field).map_err(|e| QueryError(format!("where.{}: {e}", f.field)))?;
            if f.preds.is_empty() {
                return Err(QueryError(format!("where.{}: names no condition", f.field)));
            }
            for p in &f.preds {
                if let Pred::In(xs) = p {
                    if xs.len() > MAX_LIMIT {
                        return Err(QueryError(format!("where.{}.in: at most {MAX_LIMIT} values", f.field)));
                    }
                }
            }
        }
        for (i, o) in self.order.iter().enumerate() {
            check_field(&o.field).map_err(|e| QueryError(format!("orderBy {:?}: {e}", o.field)))?;
            if self.order[..i].iter().any(|p| p.field == o.field) {
                return Err(QueryError(format!("orderBy names {} twice", o.field)));
            }
        }
        if let Some(a) = &self.after {
            if a.values.len() != self.order.len() {
                return Err(QueryError("after: the row must carry the order's fields".into()));
            }
        }
        Ok(())
    }

    /// Whether a visible row passes every filter (and the space).
    pub fn matches(&self, key: &RowKey, row: &Row) -> bool {
        if row.is_deleted() {
            return false;
        }
        if self.space.as_ref().is_some_and(|s| *s != key.space) {
            return false;
        }
        self.filters.iter().all(|f| {
            let v = field(row, &f.field);
            f.preds.iter().all(|p| p.holds(v))
        })
    }

    /// The order's values of a row.
    pub fn order_values(&self, row: &Row) -> Vec<Value> {
        self.order.iter().map(|o| field(row, &o.field).clone()).collect()
    }

    /// The query's order of two rows given by their order values and keys.
    pub fn cmp(&self, a: (&[Value], &RowKey), b: (&[Value], &RowKey)) -> Ordering {
        for (i, o) in self.order.iter().enumerate() {
            let c = cmp(&a.0[i], &b.0[i]);
            let c = if o.dir == Dir::Desc { c.reverse() } else { c };
            if c != Ordering::Equal {
                return c;
            }
        }
        cmp_keys(a.1, b.1)
    }

    /// Whether a row comes strictly after the page's start.
    pub fn is_after(&self, values: &[Value], key: &RowKey) -> bool {
        self.after.as_ref().is_none_or(|a| self.cmp((values, key), (&a.values, &a.key)) == Ordering::Greater)
    }
}

/// The tie-break of every query: rowId, then space, by UTF-16 code units.
pub fn cmp_keys(a: &RowKey, b: &RowKey) -> Ordering {
    cmp_text(&a.row_id, &b.row_id).then_with(|| cmp_text(&a.space, &b.space))
}

// Property tests need proptest, a native dev-dependency.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
