//! The JavaScript face of queries: `query`, `count`, `explain`, `watch`.
//! A query is read from its JS object here, once, into the core's
//! [`Query`]; its rules (the order of values, ranges, pages) live in
//! [`crate::query`] alone.

use js_sys::Function;
use wasm_bindgen::prelude::*;

use super::{args, client_error, js_error, js_type, rows_to_js, to_js, Client, FetchTransport, Marksync};
use crate::engine::Engine;
use crate::protocol::{Code, RowKey, Value};
use crate::query::{After, Dir, Filter, IndexDef, Order, Pred, Query, MAX_LIMIT};

/// What a query over a lazy database answers with its rows (the rows, or their count).
type Answered = Box<dyn FnOnce(Vec<(RowKey, crate::protocol::Row)>) -> JsValue>;

fn bad(message: String) -> JsValue {
    js_error(Code::BadInput.as_str(), &message)
}

/// `{ where, orderBy, limit, after, space }` (absent: every row).
fn read_query(engine: &Engine, v: &JsValue, with_page: bool) -> Result<Query, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(Query::default());
    }
    if !args::plain_object(v, "query")? {
        return Err(bad(format!("a query must be an object {{ where, orderBy, limit, after, space }} (got {})", js_type(v))));
    }
    let known: &[&str] = if with_page { &["where", "orderBy", "limit", "after", "space"] } else { &["where", "space"] };
    args::only_keys(v, "query", known)?;
    let mut q = Query::default();
    if let Some(space) = args::opt_text(&args::get(v, "space")?, "query.space")? {
        q.space = Some(engine.following().local(&space).to_owned());
    }
    q.filters = read_where(&args::get(v, "where")?)?;
    if with_page {
        q.order = read_order(&args::get(v, "orderBy")?)?;
        q.limit = args::opt_int(v, "limit", "query", 1.0, MAX_LIMIT as f64)?.map(|n| n as usize);
        let after = args::get(v, "after")?;
        if !after.is_undefined() && !after.is_null() {
            q.after = Some(read_after(engine, &after, &q.order)?);
        }
    }
    q.check().map_err(|e| bad(format!("query: {e}")))?;
    Ok(q)
}

const OPERATORS: &str = "eq, in, gt, gte, lt, lte, prefix";

fn read_where(v: &JsValue) -> Result<Vec<Filter>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    if !args::plain_object(v, "query.where")? {
        return Err(bad(format!("query.where must be an object of field → value or {{ {OPERATORS} }} (got {})", js_type(v))));
    }
    let mut out = Vec::new();
    for field in args::keys(v, "query.where")? {
        let at = format!("query.where.{field}");
        let value = args::get(v, &field)?;
        if value.is_undefined() {
            continue;
        }
        if args::is_array(&value, &at)? {
            return Err(bad(format!("{at} is an array: write {{ in: [...] }} to match one of several values")));
        }
        let preds = if args::plain_object(&value, &at)? {
            let mut preds = Vec::new();
            for op in args::keys(&value, &at)? {
                let x = args::get(&value, &op)?;
                if x.is_undefined() {
                    continue;
                }
                let at = format!("{at}.{op}");
                preds.push(match op.as_str() {
                    "eq" => Pred::Eq(args::scalar(&x, &at)?),
                    "gt" => Pred::Gt(args::scalar(&x, &at)?),
                    "gte" => Pred::Gte(args::scalar(&x, &at)?),
                    "lt" => Pred::Lt(args::scalar(&x, &at)?),
                    "lte" => Pred::Lte(args::scalar(&x, &at)?),
                    "prefix" => Pred::Prefix(args::text(&x, &at)?),
                    "in" => {
                        let list =
                            args::list(&x, &at)?.ok_or_else(|| bad(format!("{at} must be an array of values (got {})", js_type(&x))))?;
                        if list.len() > MAX_LIMIT {
                            return Err(bad(format!("{at}: at most {MAX_LIMIT} values")));
                        }
                        Pred::In(list.iter().enumerate().map(|(i, x)| args::scalar(x, &format!("{at}[{i}]"))).collect::<Result<_, _>>()?)
                    }
                    _ => return Err(bad(format!("{at}: unknown operator {op:?} (the operators are {OPERATORS})"))),
                });
            }
            preds
        } else {
            vec![Pred::Eq(args::scalar(&value, &at)?)]
        };
        out.push(Filter { field, preds });
    }
    Ok(out)
}

fn read_dir(v: &JsValue, at: &str) -> Result<Dir, JsValue> {
    match args::text(v, at)?.as_str() {
        "asc" => Ok(Dir::Asc),
        "desc" => Ok(Dir::Desc),
        other => Err(bad(format!("{at} must be \"asc\" or \"desc\" (got {other:?})"))),
    }
}

/// `'field'`, `['field', 'desc']`, or an array of those.
fn read_order(v: &JsValue) -> Result<Vec<Order>, JsValue> {
    let at = "query.orderBy";
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    if v.is_string() {
        return Ok(vec![Order { field: args::text(v, at)?, dir: Dir::Asc }]);
    }
    let Some(list) = args::list(v, at)? else {
        return Err(bad(format!("{at} must be a field, [field, \"asc\"|\"desc\"], or an array of those (got {})", js_type(v))));
    };
    let is_dir = |x: &JsValue| matches!(x.as_string().as_deref(), Some("asc" | "desc"));
    if let [field, dir] = list.as_slice() {
        if field.is_string() && is_dir(dir) {
            return Ok(vec![Order { field: args::text(field, &format!("{at}[0]"))?, dir: read_dir(dir, &format!("{at}[1]"))? }]);
        }
    }
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let at = format!("{at}[{i}]");
        if item.is_string() {
            let field = args::text(item, &at)?;
            // `["n", "DESC"]` would sort by two fields, `n` then `DESC`: a direction misspelt, never a field.
            if field.eq_ignore_ascii_case("asc") || field.eq_ignore_ascii_case("desc") {
                return Err(bad(format!("{at}: {field:?} is a direction, written [field, \"asc\"|\"desc\"] in lower case")));
            }
            out.push(Order { field, dir: Dir::Asc });
            continue;
        }
        let pair = args::list(item, &at)?
            .ok_or_else(|| bad(format!("{at} must be a field or [field, \"asc\"|\"desc\"] (got {})", js_type(item))))?;
        let (field, dir) = match pair.as_slice() {
            [field] => (field, None),
            [field, dir] => (field, Some(dir)),
            _ => return Err(bad(format!("{at} must be [field] or [field, \"asc\"|\"desc\"]"))),
        };
        let field = args::text(field, &format!("{at}[0]"))?;
        let dir = match dir {
            Some(d) => read_dir(d, &format!("{at}[1]"))?,
            None => Dir::Asc,
        };
        out.push(Order { field, dir });
    }
    Ok(out)
}

/// A row the query returned: its `_id`, `_space` and the order's fields.
fn read_after(engine: &Engine, v: &JsValue, order: &[Order]) -> Result<After, JsValue> {
    let at = "query.after";
    if !args::plain_object(v, at)? {
        return Err(bad(format!("{at} must be a row this query returned (got {})", js_type(v))));
    }
    let row_id = args::text(&args::get(v, "_id")?, &format!("{at}._id"))?;
    let space = match args::opt_text(&args::get(v, "_space")?, &format!("{at}._space"))? {
        Some(s) => engine.following().local(&s).to_owned(),
        None => String::new(),
    };
    let mut values = Vec::with_capacity(order.len());
    for o in order {
        let x = args::get(v, &o.field)?;
        values.push(if x.is_undefined() { Value::Null } else { args::scalar(&x, &format!("{at}.{}", o.field))? });
    }
    Ok(After { key: RowKey { table: String::new(), row_id, space }, values })
}

/// `open({ indexes: { table: [[field, …], …] } })`: what only the device needs.
pub fn read_indexes(v: &JsValue) -> Result<Vec<IndexDef>, JsValue> {
    let at = "options.indexes";
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    if !args::plain_object(v, at)? {
        return Err(bad(format!("{at} must be {{ table: [[field, …], …] }} (got {})", js_type(v))));
    }
    let mut out = Vec::new();
    for table in args::keys(v, at)? {
        let list = args::get(v, &table)?;
        let at = format!("{at}.{table}");
        crate::protocol::check_table(&table).map_err(|p| bad(format!("{at}: a table name {p}")))?;
        let list = args::list(&list, &at)?.ok_or_else(|| bad(format!("{at} must be an array of indexes, each an array of fields")))?;
        for (i, ix) in list.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let fields = args::list(ix, &at)?.ok_or_else(|| bad(format!("{at} must be an array of fields (got {})", js_type(ix))))?;
            let mut names: Vec<String> = Vec::new();
            for (j, f) in fields.iter().enumerate() {
                let name = args::text(f, &format!("{at}[{j}]"))?;
                crate::query::check_field(&name).map_err(|e| bad(format!("{at}[{j}]: {e}")))?;
                if names.contains(&name) {
                    return Err(bad(format!("{at}: field names must be distinct")));
                }
                names.push(name);
            }
            if names.is_empty() {
                return Err(bad(format!("{at}: an index names at least one field")));
            }
            out.push(IndexDef { table: table.clone(), fields: names });
        }
    }
    Ok(out)
}

#[wasm_bindgen]
impl Marksync {
    /// The visible rows of `table` a query asks for: `{ where, orderBy,
    /// limit, after, space }` (PROTOCOL §7, "Queries"). Returns the array
    /// itself, frozen, at once (`await` on it works too) — except over a
    /// database opened lazily, where it returns a Promise of it: the rows
    /// are read first, from an index kept on disk when one fits, else the
    /// whole table. Served by an index when one fits (`explain()` says
    /// which), else by a scan of the table.
    pub fn query(&self, table: JsValue, query: JsValue) -> Result<JsValue, JsValue> {
        self.inner.check_open().map_err(client_error)?;
        let table = args::table(&table, "table")?;
        let q = read_query(&self.inner.engine.borrow(), &query, true)?;
        if self.lazy {
            return Ok(self.query_later(table, q, Box::new(|rows| rows_to_js(rows.iter().map(|(k, r)| (k, r))))));
        }
        let rows = self.inner.engine.borrow_mut().query(&table, &q);
        Ok(rows_to_js(rows.iter().map(|(k, r)| (k, r))))
    }

    /// How many visible rows of `table` match `{ where, space }`. Over a
    /// database opened lazily, a Promise of it: the matching rows are read
    /// by an index on disk when one serves the `where`, else the table whole.
    pub fn count(&self, table: JsValue, query: JsValue) -> Result<JsValue, JsValue> {
        self.inner.check_open().map_err(client_error)?;
        let table = args::table(&table, "table")?;
        let q = read_query(&self.inner.engine.borrow(), &query, false)?;
        if !self.lazy {
            return Ok((self.inner.engine.borrow_mut().count(&table, &q) as u32).into());
        }
        Ok(self.query_later(table, q, Box::new(|rows| (rows.len() as u32).into())))
    }

    /// Over a database opened lazily: a Promise of `done(rows)`, the rows
    /// `q` answers, read from an index kept on disk when one fits, else
    /// from the table read whole.
    fn query_later(&self, table: String, q: crate::query::Query, done: Answered) -> JsValue {
        let inner = self.inner.clone();
        super::promise(async move {
            let rows = match inner.query_on_disk(&table, &q).await.map_err(client_error)? {
                Some(rows) => rows,
                None => {
                    inner.ensure_table(&table).await.map_err(client_error)?;
                    inner.engine.borrow_mut().query(&table, &q)
                }
            };
            Ok(done(rows))
        })
        .into()
    }

    /// Which index serves a query, or that a scan of the table does:
    /// `{ index: [fields] | null, equal, range, ordered, plan }`.
    pub fn explain(&self, table: JsValue, query: JsValue) -> Result<JsValue, JsValue> {
        let table = args::table(&table, "table")?;
        let mut engine = self.inner.engine.borrow_mut();
        let q = read_query(&engine, &query, true)?;
        Ok(to_js(&engine.explain(&table, &q)))
    }

    /// A live query: `listener(rows)` hears the first result soon after
    /// (never within this call), then each new result — only when it
    /// changed. Returns a function that stops it (again: nothing).
    pub fn watch(&self, table: JsValue, query: JsValue, listener: JsValue) -> Result<Function, JsValue> {
        let table = args::table(&table, "table")?;
        let listener: Function =
            listener.dyn_into().map_err(|v| bad(format!("watch() takes a listener function (got {})", js_type(&v))))?;
        self.inner.check_open().map_err(client_error)?;
        let q = read_query(&self.inner.engine.borrow(), &query, true)?;
        let id = self.inner.watch(
            &table,
            q,
            std::rc::Rc::new(move |rows: &[(RowKey, crate::protocol::Row)]| {
                if let Err(e) = listener.call1(&JsValue::NULL, &rows_to_js(rows.iter().map(|(k, r)| (k, r)))) {
                    super::client::report_error(&e);
                }
            }),
        );
        let weak = std::rc::Rc::downgrade(&self.inner);
        let stop = Closure::<dyn FnMut()>::new(move || {
            if let Some(c) = weak.upgrade() {
                Client::<FetchTransport>::unwatch(&c, id);
            }
        });
        Ok(stop.into_js_value().unchecked_into())
    }
}
