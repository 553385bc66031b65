//! The JavaScript face of marksync (compiled only for `wasm32`).
//!
//! A thin wasm-bindgen skin over [`client::Client`]: it converts values
//! between JS and Rust and turns errors into JS `Error` objects with a stable
//! `code`. No rule of the protocol is written here.

pub mod args;
#[cfg(feature = "bench-exports")]
pub mod bench;
pub mod client;
pub mod idb_store;
pub mod membership;
pub mod query;
pub mod transport;

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise, Reflect};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use crate::engine::Config;
use crate::protocol::{Code, Row, RowKey};
pub use args::js_type;
use client::{Client, ClientError, Edit};
use transport::{FetchTransport, TokenSource};

/// The allocator: talc, not Rust's default dlmalloc, for a smaller module
/// (BENCHMARKS.md, "The package, step by step"). A page's wasm runs on one
/// thread, which talc's cell relies on.
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// A Promise of `f`. Every async method goes through one
/// `future_to_promise` of a boxed future: a copy of its machinery per
/// future type weighs on the wasm for nothing.
pub(crate) fn promise(f: impl std::future::Future<Output = Result<JsValue, JsValue>> + 'static) -> Promise {
    let f: std::pin::Pin<Box<dyn std::future::Future<Output = Result<JsValue, JsValue>>>> = Box::pin(f);
    future_to_promise(f)
}

/// A JS `Error` with a stable `code` property.
pub fn js_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    let _ = Reflect::set(&err, &"code".into(), &code.into());
    err.into()
}

pub(crate) fn client_error(e: ClientError) -> JsValue {
    let err = js_error(e.code(), &e.to_string());
    if let ClientError::Refused(why) = &e {
        let _ = Reflect::set(&err, &"refusal".into(), &why.code.as_str().into());
    }
    if let ClientError::RecoveryRequired { code, .. } = &e {
        let _ = Reflect::set(&err, &"recovery".into(), &code.as_str().into());
    }
    if let ClientError::Invalid(why) = &e {
        let _ = Reflect::set(&err, &"reason".into(), &why.reason.as_str().into());
        let _ = Reflect::set(&err, &"refusal".into(), &why.code.as_str().into());
        let _ = Reflect::set(&err, &"field".into(), &why.field.as_deref().map_or(JsValue::NULL, JsValue::from_str));
    }
    err
}

/// `v` as a JS value by way of JSON text: for what the IndexedDB store
/// already writes as JSON (its serializer is in the module anyway, so this
/// adds no serde code for another format).
pub(crate) fn via_json<T: Serialize>(v: &T) -> JsValue {
    serde_json::to_string(v).ok().and_then(|s| js_sys::JSON::parse(&s).ok()).unwrap_or(JsValue::NULL)
}

pub(crate) fn to_js<T: Serialize>(v: &T) -> JsValue {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).unwrap_or(JsValue::NULL)
}

/// A visible row as JSON: its fields plus `_id`, the rowId, and `_space`,
/// its space, for a row that is not in the personal space (field names
/// starting with `_` are reserved by the protocol, so neither collides with
/// a field): `{"_id": rowId, "_space": "team", field: value, …}`.
struct VisibleRow<'a>(&'a RowKey, &'a Row);

impl Serialize for VisibleRow<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.1.cells.len() + 2))?;
        m.serialize_entry("_id", &self.0.row_id)?;
        if !self.0.space.is_empty() {
            m.serialize_entry("_space", &self.0.space)?;
        }
        // `_deleted` and `_by` are the protocol's: a visible row is never
        // deleted, and a restored one shows only the app's fields.
        for (k, c) in self.1.cells.iter().filter(|(k, _)| !matches!(k.as_str(), crate::protocol::DELETED | crate::protocol::CREATED_BY)) {
            m.serialize_entry(k, &c.value)?;
        }
        m.end()
    }
}

/// Visible rows as a frozen array of frozen objects, built by one
/// `JSON.parse` of text written in Rust: one crossing of the boundary
/// instead of several per row.
fn rows_to_js<'a>(rows: impl Iterator<Item = (&'a RowKey, &'a Row)>) -> JsValue {
    let mut text = String::from("[");
    for (i, (k, r)) in rows.enumerate() {
        if i > 0 {
            text.push(',');
        }
        if let Ok(s) = serde_json::to_string(&VisibleRow(k, r)) {
            text.push_str(&s);
        }
    }
    text.push(']');
    let arr: Array = js_sys::JSON::parse(&text).ok().and_then(|v| v.dyn_into().ok()).unwrap_or_default();
    for row in arr.iter() {
        Object::freeze(row.unchecked_ref::<Object>());
    }
    Object::freeze(&arr);
    arr.into()
}

/// `options.space`: a space's name, `null`/absent for none.
fn space_of(options: &JsValue, what: &str) -> Result<Option<String>, JsValue> {
    args::options(options, what)?;
    args::opt_text(&args::get(options, "space")?, &format!("{what}.space"))
}

/// Whether an edit is checked against the known schema: unless `options.check` is `false`.
fn checks(options: &JsValue, what: &str) -> Result<bool, JsValue> {
    Ok(args::opt_bool(options, "check", what)? != Some(false))
}

/// What a spread of the row `table/row_id` would echo: its id and the name it shows as `_space`.
fn echo_space(engine: &crate::engine::Engine, space: Option<&str>, table: &str, row_id: &str) -> Option<String> {
    let local = match space {
        Some(s) => engine.following().local(s).to_owned(),
        None => engine.locate(table, row_id).map(|k| k.space).unwrap_or_default(),
    };
    (!local.is_empty()).then_some(local)
}

/// One edit's table, row and fields, read and checked (`what` names it in
/// errors); `row_id: None`: a new row the device names.
fn edit_of(
    engine: &crate::engine::Engine,
    table: &JsValue,
    row_id: Option<&JsValue>,
    fields: &JsValue,
    space: Option<String>,
    what: &str,
) -> Result<Edit, JsValue> {
    let at = |k: &str| if what.is_empty() { k.to_owned() } else { format!("{what}.{k}") };
    let table = args::text(table, &at("table"))?;
    let row_id = row_id.map(|r| args::text(r, &at("rowId"))).transpose()?;
    let id = row_id.as_deref().unwrap_or_default();
    let shown = row_id.as_ref().and_then(|_| echo_space(engine, space.as_deref(), &table, id));
    let fields = args::fields(fields, &at("fields"), &args::Echo { row_id: id, space: shown.as_deref() })?;
    Ok(Edit { space, table, row_id, fields })
}

fn edits_from_js(engine: &crate::engine::Engine, v: &JsValue) -> Result<Vec<Edit>, JsValue> {
    let list = args::list(v, "edits")?.ok_or_else(|| {
        js_error(Code::BadInput.as_str(), &format!("edits must be an array of {{ table, rowId, fields }} (got {})", js_type(v)))
    })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, e) in list.into_iter().enumerate() {
        let what = format!("edits[{i}]");
        if !e.is_object() {
            return Err(js_error(
                Code::BadInput.as_str(),
                &format!("{what} must be an object {{ table, rowId, fields }} (got {})", js_type(&e)),
            ));
        }
        args::only_keys(&e, &what, &["table", "rowId", "fields", "space"])?;
        let space = space_of(&e, &what)?;
        let row_id = args::get(&e, "rowId")?;
        // No rowId: a new row, named by the device in the step that records it.
        let named = !(row_id.is_undefined() || row_id.is_null());
        out.push(edit_of(engine, &args::get(&e, "table")?, named.then_some(&row_id), &args::get(&e, "fields")?, space, &what)?);
    }
    Ok(out)
}

/// A read of one row, given its key (`row`, `status`, `check`).
type RowRead = Box<dyn FnOnce(&crate::engine::Engine, RowKey) -> Result<JsValue, JsValue>>;
/// What a read over a lazy database reads first.
type Wants = Box<dyn Fn(&mut crate::engine::Engine) -> Vec<crate::store::Want>>;
/// A read over a lazy database, once what it wants is held.
type ReadLater = Box<dyn FnOnce(&Client<FetchTransport>) -> Result<JsValue, JsValue>>;

/// An open marksync database: rows, outbox and sync with one server.
#[wasm_bindgen]
pub struct Marksync {
    inner: Rc<Client<FetchTransport>>,
    /// `rows()`' answers since the last change, by table (and space): a few
    /// keys, a sorted vector.
    cache: Rc<RefCell<(u64, litemap::LiteMap<String, JsValue>)>>,
    /// Opened lazily (the Service Worker's): rows are read only as sync needs them.
    lazy: bool,
}

/// The keys `open()` knows (`wasm` is the package's: the module's URL or bytes).
const OPEN_KEYS: [&str; 16] = [
    "endpoint",
    "token",
    "name",
    "user",
    "autoSync",
    "timeoutMs",
    "schema",
    "persist",
    "live",
    "resumeExhausted",
    "retry",
    "indexes",
    "cacheBytes",
    "lazy",
    "indexesOnDisk",
    "wasm",
];

#[wasm_bindgen]
impl Marksync {
    /// Opens (or creates) a local database and connects it to a server.
    ///
    /// Options: `endpoint` (the server's absolute http(s) URL, required),
    /// `token` (string or (async) function, called again after a 401),
    /// `name` (database name, default `"marksync"`), `user` (the user the
    /// database belongs to: a database of another user is refused with code
    /// `wrong_user`), `autoSync` (default `true`), `timeoutMs` (per request,
    /// default 15000), `schema` (app schema version of new ops, a whole
    /// number ≥ 1, default 1), `persist` (ask for persistent storage, default
    /// true; never waited for: a browser may hold the answer behind a
    /// prompt), `retry` (`{ maxAttempts: 10, maxElapsedMs: 3600000 }`: when
    /// sends with no usable answer stop and the server is asked what it
    /// remembers). A bad option is `bad_input`, before anything is opened —
    /// an unknown key too: `autosync: false` read as absent would sync.
    pub async fn open(options: JsValue) -> Result<Marksync, JsValue> {
        if !args::plain_object(&options, "options")? {
            return Err(js_error(Code::BadInput.as_str(), &format!("open() takes an options object (got {})", js_type(&options))));
        }
        args::only_keys(&options, "options", &OPEN_KEYS)?;
        let o = "options";
        let endpoint = args::get(&options, "endpoint")?;
        if endpoint.is_undefined() || endpoint.is_null() {
            return Err(js_error(Code::BadInput.as_str(), "options.endpoint (the server's base URL) is required"));
        }
        let endpoint = args::text(&endpoint, "options.endpoint")?;
        check_endpoint(&endpoint)?;
        let name = args::opt_text(&args::get(&options, "name")?, "options.name")?.unwrap_or_else(|| "marksync".to_owned());
        if name.is_empty() {
            return Err(js_error(Code::BadInput.as_str(), "options.name must not be empty"));
        }
        let user = args::opt_text(&args::get(&options, "user")?, "options.user")?;
        if let Some(u) = &user {
            crate::space::check_user(u).map_err(|why| js_error(Code::BadInput.as_str(), &format!("options.user: {why}")))?;
        }
        let auto_sync = args::opt_bool(&options, "autoSync", o)?.unwrap_or(true);
        let timeout_ms = args::opt_int(&options, "timeoutMs", o, 1.0, 2_147_483_647.0)?.map_or(15_000, |n| n as u32);
        let schema = args::opt_int(&options, "schema", o, 1.0, u32::MAX as f64)?.map_or(1, |n| n as u32);
        // Asked for by the JS glue (never awaited: Firefox answers only once
        // the person answers a prompt); read here only to refuse a non-boolean.
        args::opt_bool(&options, "persist", o)?;
        args::opt_bool(&options, "live", o)?;
        // Internal: the Service Worker opens without lifting a stop for
        // exhausted retries (only a person, or the app's next open, does).
        let resume_exhausted = args::opt_bool(&options, "resumeExhausted", o)?.unwrap_or(true);
        let mut retry = crate::engine::RetryPolicy::default();
        let retry_opt = args::get(&options, "retry")?;
        if !retry_opt.is_undefined() && !retry_opt.is_null() {
            if !args::plain_object(&retry_opt, "options.retry")? {
                return Err(js_error(Code::BadInput.as_str(), "options.retry must be { maxAttempts, maxElapsedMs }"));
            }
            args::only_keys(&retry_opt, "options.retry", &["maxAttempts", "maxElapsedMs"])?;
            if let Some(n) = args::opt_int(&retry_opt, "maxAttempts", "options.retry", 1.0, u32::MAX as f64)? {
                retry.max_attempts = n as u32;
            }
            if let Some(n) = args::opt_int(&retry_opt, "maxElapsedMs", "options.retry", 1.0, crate::protocol::MAX_SAFE_INTEGER as f64)? {
                retry.max_elapsed_ms = n as u64;
            }
        }
        let indexes = query::read_indexes(&args::get(&options, "indexes")?)?;
        // The bound of the row cache (PROTOCOL §7, "The lazy store").
        let cache_bytes = args::opt_int(&options, "cacheBytes", o, 1.0, crate::protocol::MAX_SAFE_INTEGER as f64)?
            .map_or(crate::engine::CACHE_BYTES, |n| n as usize);
        // Rows are read only as they are asked for, never a whole table at
        // open (PROTOCOL §7, "The lazy store"): the Service Worker's, and a
        // page's that holds more rows than it shows.
        let lazy = args::opt_bool(&options, "lazy", o)?.unwrap_or(false);
        // The store keeps the indexes' entries, and a lazy database's
        // queries read them (PROTOCOL §7, "Indexes on disk"). Internal: a
        // lazy database keeps them, unless it never queries (the Service
        // Worker's says so).
        let indexes_on_disk = args::opt_bool(&options, "indexesOnDisk", o)?.unwrap_or(lazy);
        let token = token_source(args::get(&options, "token")?)?;
        let transport = FetchTransport::new(&endpoint, token, timeout_ms);
        // Pages of the protocol's largest size: fewer round trips and IndexedDB transactions.
        let config = Config {
            schema,
            pull_limit: crate::protocol::MAX_PULL_LIMIT,
            retry,
            indexes,
            cache_bytes,
            indexes_on_disk,
            ..Config::default()
        };
        let inner =
            Client::open(&name, transport, config, auto_sync, resume_exhausted, user.as_deref(), lazy).await.map_err(client_error)?;
        if auto_sync {
            inner.schedule_sync(0);
        }
        Ok(Marksync { inner, cache: Rc::new(RefCell::new((0, litemap::LiteMap::new()))), lazy })
    }

    /// Whether this database was opened lazily (`open({ lazy: true })`):
    /// then its reads of rows (`rows`, `row`, `count`, `status`, `check`,
    /// `query`) answer Promises.
    #[wasm_bindgen(getter)]
    pub fn lazy(&self) -> bool {
        self.lazy
    }

    /// This device's id (random UUID v4, born at the first open).
    #[wasm_bindgen(getter, js_name = deviceId)]
    pub fn device_id(&self) -> String {
        self.inner.engine.borrow().device_id().to_owned()
    }

    /// The user this database belongs to — named at open, or learned from
    /// the server at the first sync — or `null` before either.
    #[wasm_bindgen(getter)]
    pub fn user(&self) -> Option<String> {
        self.inner.engine.borrow().user().map(str::to_owned)
    }

    /// A new rowId, `<deviceId>-<n>`, unique on this device forever.
    #[wasm_bindgen(js_name = newRowId)]
    pub fn new_row_id(&self) -> Result<String, JsValue> {
        self.inner.new_row_id().map_err(client_error)
    }

    /// Records `fields` on `table/rowId`. Resolves with the opId once the op
    /// is committed to IndexedDB (it survives a reload, a crash, a closed tab).
    /// Rejects with code `invalid` (and `field`, `reason`, `refusal`: the
    /// server's code) when the server's schema, as this device knows it,
    /// refuses the row after the edit — nothing is recorded. `options.check:
    /// false` records it anyway; the server stays the judge.
    ///
    /// `undefined` values are skipped (as `JSON.stringify` skips them); `_id`,
    /// `_space` and `_deleted: false` equal to the row's own are ignored (a
    /// row from `rows()` spread into an edit). Anything else that is not a
    /// string, finite number, boolean or null is `bad_input`.
    ///
    /// The row's space: `options.space` when given, else the space the row
    /// already lives in, else the personal space. Rejects at once with code
    /// `read_only` (a viewer) or `forbidden` (a space the user left), the
    /// server's own words, when the device knows the user may not write there.
    pub fn change(&self, table: JsValue, row_id: JsValue, fields: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        let edit = (|| {
            let space = space_of(&options, "options")?;
            let check = checks(&options, "options")?;
            let edit = edit_of(&inner.engine.borrow(), &table, Some(&row_id), &fields, space, "")?;
            Ok::<_, JsValue>((edit, check))
        })();
        promise(async move {
            let (e, check) = edit?;
            let id = inner
                .change_with(e.space.as_deref(), &e.table, e.row_id.as_deref().unwrap_or_default(), e.fields, check)
                .await
                .map_err(client_error)?;
            Ok(JsValue::from_str(id.as_str()))
        })
    }

    /// Records many edits `[{ table, rowId, fields, space? }, …]` in one IndexedDB
    /// transaction: all or none, every edit checked first (shapes, and the
    /// known schema unless `options.check` is `false`, each edit on the row
    /// the ones before it made). An edit with no `rowId` is a new row the
    /// device names (`<deviceId>-<n>`, in the same transaction). Resolves
    /// with the opIds, in order; the array's `rowIds` are the edits' rowIds,
    /// in order (the named ones included).
    #[wasm_bindgen(js_name = "changeMany")]
    pub fn change_many(&self, edits: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        let read = (|| {
            args::options(&options, "options")?;
            let check = checks(&options, "options")?;
            Ok::<_, JsValue>((edits_from_js(&inner.engine.borrow(), &edits)?, check))
        })();
        promise(async move {
            let (edits, check) = read?;
            let recorded = inner.change_many_with(edits, check).await.map_err(client_error)?;
            let ids: Array = recorded.iter().map(|(op, _)| JsValue::from_str(op.as_str())).collect();
            let rows: Array = recorded.iter().map(|(_, row)| JsValue::from_str(row)).collect();
            let _ = Reflect::set(&ids, &"rowIds".into(), &rows);
            Ok(ids.into())
        })
    }

    /// Deletes a row (a tombstone: `_deleted = true`) where it lives, or in
    /// `options.space`. Resolves with the opId.
    pub fn remove(&self, table: JsValue, row_id: JsValue, options: JsValue) -> Promise {
        self.deleted(table, row_id, options, true)
    }

    /// Restores a deleted row (`_deleted = false`). Resolves with the opId.
    pub fn restore(&self, table: JsValue, row_id: JsValue, options: JsValue) -> Promise {
        self.deleted(table, row_id, options, false)
    }

    fn deleted(&self, table: JsValue, row_id: JsValue, options: JsValue, deleted: bool) -> Promise {
        let inner = self.inner.clone();
        let read = (|| Ok::<_, JsValue>((args::table(&table, "table")?, args::text(&row_id, "rowId")?, space_of(&options, "options")?)))();
        promise(async move {
            let (table, row_id, space) = read?;
            let id = inner.set_deleted(space.as_deref(), &table, &row_id, deleted).await.map_err(client_error)?;
            Ok(JsValue::from_str(id.as_str()))
        })
    }

    /// The visible rows of a table (deleted rows hidden), in rowId order,
    /// from every space the device follows (a row of a shared space carries
    /// `_space`), or from `options.space` alone. The same frozen array until
    /// something changes: fit for `useSyncExternalStore`. Empty while the
    /// token in use is another user's than the database's (`wrong_user`).
    /// Over a database opened lazily, a Promise of it: the table is read
    /// whole, and kept whole from then on.
    pub fn rows(&self, table: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        let table = args::table(&table, "table")?;
        let only = space_of(&options, "options")?;
        if !self.lazy {
            return Ok(Self::rows_held(&self.inner, &self.cache, &table, only.as_deref()));
        }
        let (t, cache) = (table.clone(), self.cache.clone());
        Ok(self.once_read(
            Box::new(move |e| vec![e.wants_table(&t)]),
            Box::new(move |inner| Ok(Self::rows_held(inner, &cache, &table, only.as_deref()))),
        ))
    }

    fn rows_held(
        inner: &Client<FetchTransport>,
        cache: &RefCell<(u64, litemap::LiteMap<String, JsValue>)>,
        table: &str,
        only: Option<&str>,
    ) -> JsValue {
        let version = inner.version();
        let mut cache = cache.borrow_mut();
        if cache.0 != version {
            *cache = (version, litemap::LiteMap::new());
        }
        let cache_key = match only {
            Some(s) => format!("{table}\u{0}{s}"),
            None => table.to_owned(),
        };
        if let Some(v) = cache.1.get(&cache_key) {
            return v.clone();
        }
        let engine = inner.engine.borrow();
        let local = only.map(|s| engine.following().local(s));
        let rows: Vec<_> = if engine.hides_rows() {
            Vec::new()
        } else {
            engine
                .rows(table)
                .into_iter()
                .filter(|(k, _)| local.is_none_or(|l| k.space == l))
                .map(|(k, r)| (k, engine.app_cow(table, r)))
                .collect()
        };
        let v = rows_to_js(rows.iter().map(|(k, r)| (k.as_ref(), r.as_ref())));
        cache.1.insert(cache_key, v.clone());
        v
    }

    /// One visible row, or `null` if absent or deleted: in `options.space`,
    /// or where the row lives (the personal space's copy first). Over a
    /// database opened lazily, a Promise of it (that row alone is read).
    pub fn row(&self, table: JsValue, row_id: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        self.named_read(
            table,
            row_id,
            options,
            Box::new(|engine, key| {
                if engine.hides_rows() {
                    return Ok(JsValue::NULL);
                }
                Ok(match engine.row(&key) {
                    Some(r) => Array::from(&rows_to_js(std::iter::once((&key, engine.app_cow(&key.table, r).as_ref())))).get(0),
                    None => JsValue::NULL,
                })
            }),
        )
    }

    /// `read` of the row `table/rowId` (in `options.space`, or where it
    /// lives): at once over a database that holds its rows; over one opened
    /// lazily, a Promise of it once every copy of that row is read — the
    /// same answer, from the same engine, with nothing awaited in between.
    fn named_read(&self, table: JsValue, row_id: JsValue, options: JsValue, read: RowRead) -> Result<JsValue, JsValue> {
        // Bad arguments are refused at once, before anything is read. A table
        // no edit could name is no mistake here: that row was never seen (`null`).
        let (t, id) = (args::text(&table, "table")?, args::text(&row_id, "rowId")?);
        space_of(&options, "options")?;
        let answer = move |inner: &Client<FetchTransport>| {
            let engine = inner.engine.borrow();
            let key = Self::key_of(&engine, &table, &row_id, &options)?;
            read(&engine, key)
        };
        if !self.lazy {
            return answer(&self.inner);
        }
        Ok(self.once_read(Box::new(move |_| vec![crate::engine::Engine::wants_edit(&t, &id)]), Box::new(answer)))
    }

    /// Over a database opened lazily: a Promise of `read`, once what
    /// `wants` names is read — nothing awaited between the last read and
    /// `read`, so no other task can take the rows away in between.
    fn once_read(&self, wants: Wants, read: ReadLater) -> JsValue {
        let inner = self.inner.clone();
        promise(async move {
            inner.ensure(&*wants).await.map_err(client_error)?;
            read(&inner)
        })
        .into()
    }

    /// The key of `table/row_id` in `options.space`, or where it lives.
    fn key_of(engine: &crate::engine::Engine, table: &JsValue, row_id: &JsValue, options: &JsValue) -> Result<RowKey, JsValue> {
        let (table, row_id) = (args::text(table, "table")?, args::text(row_id, "rowId")?);
        Ok(match space_of(options, "options")? {
            Some(s) => RowKey::in_space(engine.following().local(&s), table, row_id),
            None => engine.status_key(&table, &row_id),
        })
    }

    /// The user's spaces: `[{ space, role, personal }]`, the personal space
    /// first (`space` is `null` until the first sync names it), then the
    /// shared ones by name. Changes after a sync that learned a grant, a
    /// role change or a revoke.
    pub fn spaces(&self) -> JsValue {
        let list = to_js(&self.inner.engine.borrow().spaces());
        if let Some(a) = list.dyn_ref::<Array>() {
            for s in a.iter() {
                Object::freeze(s.unchecked_ref::<Object>());
            }
            Object::freeze(a);
        }
        list
    }

    /// Calls `listener()` once after every committed change of rows,
    /// queued ops, refusals, spaces or statuses (counters alone are none).
    /// Returns a function that unsubscribes; calling it again does nothing.
    pub fn subscribe(&self, listener: JsValue) -> Result<Function, JsValue> {
        let listener: Function = listener
            .dyn_into()
            .map_err(|v| js_error(Code::BadInput.as_str(), &format!("subscribe() takes a function (got {})", js_type(&v))))?;
        self.inner.check_open().map_err(client_error)?;
        let id = self.inner.subscribe(Client::<FetchTransport>::js_listener(listener));
        let weak = Rc::downgrade(&self.inner);
        let cb = Closure::<dyn FnMut()>::new(move || {
            if let Some(c) = weak.upgrade() {
                c.unsubscribe(id);
            }
        });
        Ok(cb.into_js_value().unchecked_into())
    }

    /// What the server would answer for `table/rowId` after this edit, by
    /// the schema this device last fetched from it: `null` (accepted, no
    /// field given, or no schema known yet) or `{ code, reason, field }` in
    /// the server's words. Offline, synchronous, changes nothing; a malformed
    /// edit throws `bad_input` as `change()` would. Over a database opened
    /// lazily, a Promise of the answer (the row is read first).
    pub fn check(&self, table: JsValue, row_id: JsValue, fields: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        self.inner.check_open().map_err(client_error)?;
        let space = space_of(&options, "options")?;
        if self.lazy {
            // A malformed edit is refused at once, before its row is read.
            edit_of(&self.inner.engine.borrow(), &table, Some(&row_id), &fields, space.clone(), "")?;
        }
        let (t, id) = (table.clone(), row_id.clone());
        self.named_read(t, id, options, Box::new(move |engine, _| Self::check_held(engine, &table, &row_id, &fields, space)))
    }

    fn check_held(
        engine: &crate::engine::Engine,
        table: &JsValue,
        row_id: &JsValue,
        fields: &JsValue,
        space: Option<String>,
    ) -> Result<JsValue, JsValue> {
        let edit = edit_of(engine, table, Some(row_id), fields, space, "")?;
        // Nothing typed yet is not an edit to refuse: a form asks as it fills.
        if edit.fields.is_empty() {
            return Ok(JsValue::NULL);
        }
        let draft = match engine.draft_in(edit.space.as_deref(), &edit.table, edit.row_id.as_deref().unwrap_or_default(), edit.fields) {
            Ok(d) => d,
            // A role refusal answers like a schema one: the server's code and words.
            Err(crate::engine::EngineError::Denied(d)) => {
                let o = Object::new();
                let _ = Reflect::set(&o, &"code".into(), &d.code.into());
                let _ = Reflect::set(&o, &"reason".into(), &d.reason.into());
                let _ = Reflect::set(&o, &"field".into(), &JsValue::NULL);
                return Ok(o.into());
            }
            Err(e) => return Err(client_error(e.into())),
        };
        Ok(match engine.check_drafts(std::slice::from_ref(&draft)) {
            Ok(()) => JsValue::NULL,
            Err((_, why)) => to_js(&why),
        })
    }

    /// The server's schema as this device knows it (`{ version, etag, schema }`,
    /// `schema` being the schema file), or `null` before it was first fetched.
    #[wasm_bindgen(js_name = "schema")]
    pub fn known_schema(&self) -> JsValue {
        let engine = self.inner.engine.borrow();
        let Some((k, schema)) = engine.known_schema() else { return JsValue::NULL };
        let o = Object::new();
        let _ = Reflect::set(&o, &"version".into(), &schema.version.into());
        let _ = Reflect::set(&o, &"etag".into(), &k.etag.as_deref().map_or(JsValue::NULL, JsValue::from_str));
        let _ = Reflect::set(&o, &"schema".into(), &js_sys::JSON::parse(&k.text).unwrap_or(JsValue::NULL));
        o.into()
    }

    /// The sync status of a row: `{ phase, reason, code, pendingOps, attempts, nextRetryAt }`
    /// (in `options.space`, or where the row lives), or `null` for a row this
    /// device has never seen — no copy, nothing queued, no refusal — which
    /// has no sync status. Over a database opened lazily, a Promise of it.
    pub fn status(&self, table: JsValue, row_id: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        self.named_read(table, row_id, options, Box::new(|engine, key| Ok(engine.known_status(&key).map_or(JsValue::NULL, |s| to_js(&s)))))
    }

    /// The pending ops, in the order they will be sent.
    pub fn pending(&self) -> JsValue {
        let engine = self.inner.engine.borrow();
        if engine.hides_rows() {
            return Array::new().into();
        }
        let ops: Vec<_> = engine.pending().collect();
        via_json(&ops)
    }

    /// Runs a sync cycle now. Resolves with a report `{ ok, pushed, applied,
    /// duplicate, rejected, pulled, cursor, ignoredStaleAcks, retryAt, error }`;
    /// rejects with code `recovery_required` when sync cannot go on alone.
    pub fn sync(&self) -> Promise {
        let inner = self.inner.clone();
        promise(async move {
            let out = inner.sync().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// The event stream's poke (`data`: what moved): a cycle, if it names
    /// what the device has not pulled, once any wait the server asked for
    /// is over (the package's live stream calls it; an app's own `sync()`
    /// is a person's and goes at once). `data` not a string: a pull.
    pub fn poked(&self, data: JsValue) {
        self.inner.poked(&data.as_string().unwrap_or_default());
    }

    /// Asks the server what it remembers of every op sent at least once
    /// (`POST /v1/verdicts`) and settles what it knows, exactly as a push
    /// answer would: applied → acknowledged, rejected → dropped with its
    /// reason. Never pushes. Resolves with `{ ok, reconciled, unknown, … }`.
    pub fn reconcile(&self) -> Promise {
        let inner = self.inner.clone();
        promise(async move {
            let out = inner.reconcile().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// A person confirmed: lifts a stop (`retries_exhausted`, a refusal),
    /// starts the retry counts over and syncs now. Resolves like `sync()`.
    pub fn retry(&self) -> Promise {
        let inner = self.inner.clone();
        promise(async move {
            let out = inner.retry().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// Refused ops with their reasons, until dismissed: `[{ op, reason, code,
    /// attempts, superseded }]` (`superseded`: a later edit of this device
    /// set those fields again and was applied; the row's status no longer
    /// shows this refusal).
    pub fn rejections(&self) -> JsValue {
        let engine = self.inner.engine.borrow();
        if engine.hides_rows() {
            return Array::new().into();
        }
        let r: Vec<_> = engine.rejections().collect();
        via_json(&r)
    }

    /// Dismisses a rejection. Resolves `true` if there was one.
    pub fn dismiss(&self, op_id: JsValue) -> Promise {
        let inner = self.inner.clone();
        let op_id = args::text(&op_id, "opId");
        promise(async move {
            let had = inner.dismiss(&op_id?).await.map_err(client_error)?;
            Ok(JsValue::from_bool(had))
        })
    }

    /// The whole sync of this device as one JSON-ready snapshot, for the
    /// inspector and a bug report: `{deviceId, user, outbox: [{op, phase,
    /// attempts, attemptKey, unknown, firstSentAt, lastSentAt}], flight,
    /// nextRetryAt, recovery, lastError, cycles: [{startedAt, ms, by,
    /// attempts, sent, applied, duplicate, rejected, verdicts, staleIgnored,
    /// reconciled, pulled, outcome, error?}], rejections, conflicts, spaces:
    /// [{space, personal, role, cursor}], schemaVersion}`. Never a token.
    pub fn diagnostics(&self) -> JsValue {
        via_json(&self.inner.engine.borrow().inspect())
    }

    /// Edits of this device that lost to concurrent ones (PROTOCOL §2a),
    /// until dismissed: `[{ id, table, rowId, space?, field, mine: { value,
    /// at, opId }, theirs: { value, at, opId, user? } }]`, oldest first. The
    /// same in every context and after a reload: they are stored.
    pub fn conflicts(&self) -> JsValue {
        let engine = self.inner.engine.borrow();
        if engine.hides_rows() {
            return Array::new().into();
        }
        via_json(&engine.conflicts())
    }

    /// Dismisses a conflict. Resolves `true` if there was one not yet dismissed.
    #[wasm_bindgen(js_name = dismissConflict)]
    pub fn dismiss_conflict(&self, id: JsValue) -> Promise {
        let inner = self.inner.clone();
        let id = args::text(&id, "id");
        promise(async move {
            let had = inner.dismiss_conflict(&id?).await.map_err(client_error)?;
            Ok(JsValue::from_bool(had))
        })
    }

    /// Counters, stored and the same in every context: attempts,
    /// unknownOutcomes, staleAcksIgnored, applied, duplicates, rejected,
    /// reconciled, recoveryRequired, pulls — plus `pendingOps`, `cursor`,
    /// `recovery` (the code sync waits on, or null), `recoveryReason` (its
    /// words), `nextRetryAt` and `lastError` (why this context's last
    /// request got no usable answer, or null).
    pub fn metrics(&self) -> JsValue {
        let e = self.inner.engine.borrow();
        let v = via_json(e.metrics());
        let reason = e.recovery().map(|r| JsValue::from_str(&r.message)).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"recoveryReason".into(), &reason);
        let next = e.retry_at().map(|t| JsValue::from_f64(t as f64)).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"nextRetryAt".into(), &next);
        // Under another user's token the queue is hidden, its length too, as `pending()` hides it.
        let pending = if e.hides_rows() { 0 } else { e.pending_len() };
        let _ = Reflect::set(&v, &"pendingOps".into(), &JsValue::from_f64(pending as f64));
        let _ = Reflect::set(&v, &"cursor".into(), &JsValue::from_f64(e.cursor() as f64));
        let rec = e.recovery().map(|r| JsValue::from_str(r.code.as_str())).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"recovery".into(), &rec);
        let last = e.last_failure().map_or(JsValue::NULL, JsValue::from_str);
        let _ = Reflect::set(&v, &"lastError".into(), &last);
        v
    }

    /// `{ persisted, usage, quota }` of this origin's storage.
    pub fn storage(&self) -> Promise {
        promise(async move {
            let o = Object::new();
            let Some(sm) = storage_manager() else {
                return Ok(o.into());
            };
            if let Ok(p) = sm.persisted() {
                let v = JsFuture::from(p).await.unwrap_or(JsValue::FALSE);
                let _ = Reflect::set(&o, &"persisted".into(), &v);
            }
            if let Ok(p) = sm.estimate() {
                if let Ok(est) = JsFuture::from(p).await {
                    for k in ["usage", "quota"] {
                        let _ = Reflect::set(&o, &k.into(), &Reflect::get(&est, &k.into()).unwrap_or(JsValue::NULL));
                    }
                }
            }
            Ok(o.into())
        })
    }

    /// Replaces the token (string or function) and resumes a sync blocked on
    /// auth. A token of another user than the database's is refused by the
    /// server at the next request (`wrong_user`).
    #[wasm_bindgen(js_name = setToken)]
    pub fn set_token(&self, token: JsValue) -> Result<(), JsValue> {
        self.inner.check_open().map_err(client_error)?;
        self.inner.transport.set_token(token_source(token)?);
        self.inner.resume();
        Ok(())
    }

    /// Stops timers and closes the database.
    pub fn close(&self) {
        self.inner.close();
    }
}

/// The endpoint must be an absolute http(s) URL: a typo fails at `open()`, not at the first push.
fn check_endpoint(endpoint: &str) -> Result<(), JsValue> {
    let bad = || js_error(Code::BadInput.as_str(), &format!("options.endpoint must be an absolute http(s) URL (got {endpoint:?})"));
    let url = web_sys::Url::new(endpoint).map_err(|_| bad())?;
    match url.protocol().as_str() {
        "http:" | "https:" => Ok(()),
        _ => Err(bad()),
    }
}

fn token_source(v: JsValue) -> Result<TokenSource, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(TokenSource::None);
    }
    if let Some(s) = v.as_string() {
        return Ok(TokenSource::Fixed(s));
    }
    if v.is_function() {
        return Ok(TokenSource::Function(v.unchecked_into()));
    }
    Err(js_error(Code::BadInput.as_str(), &format!("options.token must be a string or a function (got {})", js_type(&v))))
}

fn storage_manager() -> Option<web_sys::StorageManager> {
    let nav = Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let sm = Reflect::get(&nav, &"storage".into()).ok()?;
    if sm.is_undefined() {
        return None;
    }
    Some(sm.unchecked_into())
}
