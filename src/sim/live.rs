//! Live queries on every context of the simulation: after every event, each
//! live query's last heard result, and the same query asked afresh (through
//! the indexes the engine keeps), equal the reference — filter and sort
//! over every visible row. Edits, lost answers, rejections, crashes, other
//! contexts' steps: whatever moved a row, the indexes and the listeners
//! followed.

use std::cell::RefCell;
use std::rc::Rc;

use crate::engine::Engine;
use crate::protocol::{Row, RowKey, Value};
use crate::query::{Dir, Filter, IndexDef, Order, Pred, Query};

/// What a live query's listener heard last (`None`: nothing yet).
pub type Heard = Rc<RefCell<Option<Vec<(RowKey, Row)>>>>;

/// One live query and what its listener heard last.
pub struct Live {
    pub table: String,
    pub query: Query,
    pub heard: Heard,
}

/// The indexes every simulated device keeps (of the workout demo's fields).
pub fn indexes(table: &str) -> Vec<IndexDef> {
    let def = |fields: &[&str]| IndexDef { table: table.to_owned(), fields: fields.iter().map(|f| (*f).to_owned()).collect() };
    vec![def(&["weightKg"]), def(&["exercise", "reps"])]
}

/// The live queries each context keeps.
pub fn queries() -> Vec<Query> {
    let order = |field: &str, dir| Order { field: field.into(), dir };
    let filter = |field: &str, preds| Filter { field: field.into(), preds };
    vec![
        Query { order: vec![order("weightKg", Dir::Desc)], limit: Some(3), ..Query::default() },
        Query {
            filters: vec![filter("exercise", vec![Pred::Eq(Value::from("squat"))])],
            order: vec![order("reps", Dir::Asc)],
            limit: Some(4),
            ..Query::default()
        },
        Query { filters: vec![filter("reps", vec![Pred::Gte(Value::from(5)), Pred::Lt(Value::from(100))])], ..Query::default() },
        Query { filters: vec![filter("reps", vec![Pred::Eq(Value::Null)])], limit: Some(2), ..Query::default() },
    ]
}

/// The answer by definition.
pub fn reference(engine: &Engine, table: &str, q: &Query) -> Vec<(RowKey, Row)> {
    if engine.hides_rows() {
        return Vec::new();
    }
    let mut hits: Vec<(Vec<Value>, RowKey, Row)> = engine
        .rows(table)
        .into_iter()
        .map(|(k, r)| (k.into_owned(), engine.app_cow(table, r).into_owned()))
        .filter(|(k, r)| q.matches(k, r))
        .map(|(k, r)| (q.order_values(&r), k, r))
        .collect();
    hits.sort_by(|a, b| q.cmp((&a.0, &a.1), (&b.0, &b.1)));
    hits.truncate(q.limit.unwrap_or(usize::MAX));
    hits.into_iter().map(|(_, k, r)| (k, r)).collect()
}

/// Values only: what an app sees of a result.
pub fn shown(rows: &[(RowKey, Row)]) -> Vec<(RowKey, crate::protocol::Fields)> {
    rows.iter().map(|(k, r)| (k.clone(), r.fields())).collect()
}
