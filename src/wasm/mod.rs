//! The JavaScript face of marksync (compiled only for `wasm32`).
//!
//! A thin wasm-bindgen skin over [`client::Client`]: it converts values
//! between JS and Rust and turns errors into JS `Error` objects with a stable
//! `code`. No rule of the protocol is written here.

#[cfg(feature = "bench-exports")]
pub mod bench;
pub mod client;
pub mod idb_store;
pub mod transport;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise, Reflect};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use crate::engine::Config;
use crate::protocol::{Fields, Row, RowKey};
use client::{Client, ClientError, Edit};
use transport::{FetchTransport, TokenSource};

/// A JS `Error` with a stable `code` property.
pub fn js_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    let _ = Reflect::set(&err, &"code".into(), &code.into());
    err.into()
}

fn client_error(e: ClientError) -> JsValue {
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

fn to_js<T: Serialize>(v: &T) -> JsValue {
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
        for (k, c) in &self.1.cells {
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

fn fields_from_js(v: JsValue) -> Result<Fields, JsValue> {
    if !v.is_object() || Array::is_array(&v) {
        return Err(js_error("bad_input", "fields must be an object of field → value"));
    }
    serde_wasm_bindgen::from_value::<Fields>(v).map_err(|e| js_error("bad_input", &format!("fields: {e}")))
}

/// `options.space`: a space's name, `null`/absent for none; anything else is bad input.
fn space_of(options: &JsValue) -> Result<Option<String>, JsValue> {
    if !options.is_object() {
        return Ok(None);
    }
    let v = Reflect::get(options, &"space".into()).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.as_string().map(Some).ok_or_else(|| js_error("bad_input", "options.space must be a space's name (a string) or null"))
}

fn edits_from_js(v: JsValue) -> Result<Vec<Edit>, JsValue> {
    let list: Array = v.dyn_into().map_err(|_| js_error("bad_input", "edits must be an array of { table, rowId, fields }"))?;
    let mut out = Vec::with_capacity(list.length() as usize);
    for (i, e) in list.iter().enumerate() {
        let text = |k: &str| -> Result<String, JsValue> {
            Reflect::get(&e, &k.into())
                .ok()
                .and_then(|v| v.as_string())
                .ok_or_else(|| js_error("bad_input", &format!("edits[{i}].{k} must be a string")))
        };
        let (table, row_id) = (text("table")?, text("rowId")?);
        let fields = Reflect::get(&e, &"fields".into()).unwrap_or(JsValue::UNDEFINED);
        if !fields.is_object() || Array::is_array(&fields) {
            return Err(js_error("bad_input", &format!("edits[{i}].fields must be an object of field → value")));
        }
        let fields =
            serde_wasm_bindgen::from_value::<Fields>(fields).map_err(|e| js_error("bad_input", &format!("edits[{i}].fields: {e}")))?;
        let space =
            space_of(&e).map_err(|_| js_error("bad_input", &format!("edits[{i}].space must be a space's name (a string) or null")))?;
        out.push(Edit { space, table, row_id, fields });
    }
    Ok(out)
}

/// Whether an edit is checked against the known schema: unless `options.check` is `false`.
fn checks(options: &JsValue) -> bool {
    !options.is_object() || opt::<bool>(options, "check") != Some(false)
}

fn opt<T: serde::de::DeserializeOwned>(o: &JsValue, k: &str) -> Option<T> {
    let v = Reflect::get(o, &k.into()).ok()?;
    if v.is_undefined() || v.is_null() {
        return None;
    }
    serde_wasm_bindgen::from_value(v).ok()
}

/// An open marksync database: rows, outbox and sync with one server.
#[wasm_bindgen]
pub struct Marksync {
    inner: Rc<Client<FetchTransport>>,
    cache: Rc<RefCell<(u64, HashMap<String, JsValue>)>>,
}

#[wasm_bindgen]
impl Marksync {
    /// Opens (or creates) a local database and connects it to a server.
    ///
    /// Options: `endpoint` (server base URL, required), `token` (string or
    /// (async) function, called again after a 401), `name` (database name,
    /// default `"marksync"`), `autoSync` (default `true`), `timeoutMs`
    /// (per request, default 15000), `schema` (app schema version of new
    /// ops, default 1), `persist` (ask for persistent storage, default true;
    /// never waited for: a browser may hold the answer behind a prompt),
    /// `retry` (`{ maxAttempts: 10, maxElapsedMs: 3600000 }`: when sends
    /// with no usable answer stop and the server is asked what it remembers).
    pub async fn open(options: JsValue) -> Result<Marksync, JsValue> {
        if !options.is_object() {
            return Err(js_error("bad_input", "open() takes an options object"));
        }
        let endpoint: String =
            opt(&options, "endpoint").ok_or_else(|| js_error("bad_input", "options.endpoint (the server's base URL) is required"))?;
        let name: String = opt(&options, "name").unwrap_or_else(|| "marksync".to_owned());
        let auto_sync: bool = opt(&options, "autoSync").unwrap_or(true);
        let timeout_ms: u32 = opt(&options, "timeoutMs").unwrap_or(15_000);
        let schema: u32 = opt(&options, "schema").unwrap_or(1);
        let persist: bool = opt(&options, "persist").unwrap_or(true);
        // Internal: the Service Worker opens without lifting a stop for
        // exhausted retries (only a person, or the app's next open, does).
        let resume_exhausted: bool = opt(&options, "resumeExhausted").unwrap_or(true);
        let mut retry = crate::engine::RetryPolicy::default();
        let retry_opt = Reflect::get(&options, &"retry".into()).unwrap_or(JsValue::UNDEFINED);
        if !retry_opt.is_undefined() && !retry_opt.is_null() {
            if !retry_opt.is_object() {
                return Err(js_error("bad_input", "options.retry must be { maxAttempts, maxElapsedMs }"));
            }
            if let Some(n) = positive(&retry_opt, "maxAttempts")? {
                retry.max_attempts = n.min(u32::MAX as f64) as u32;
            }
            if let Some(n) = positive(&retry_opt, "maxElapsedMs")? {
                retry.max_elapsed_ms = n as u64;
            }
        }
        let token = token_source(Reflect::get(&options, &"token".into()).unwrap_or(JsValue::UNDEFINED))?;
        let transport = FetchTransport::new(&endpoint, token, timeout_ms);
        // Pages of the protocol's largest size: fewer round trips and IndexedDB transactions.
        let config = Config { schema, pull_limit: crate::protocol::MAX_PULL_LIMIT, retry, ..Config::default() };
        let inner = Client::open(&name, transport, config, auto_sync, resume_exhausted).await.map_err(client_error)?;
        if persist {
            // Asked, never awaited: Firefox answers only once the person
            // answers a permission prompt, and open() must not wait for that.
            // The JS glue reports the answer (`storage()`, a `storage` event).
            if let Some(storage) = storage_manager() {
                if let Ok(p) = storage.persist() {
                    wasm_bindgen_futures::spawn_local(async move {
                        let _ = JsFuture::from(p).await;
                    });
                }
            }
        }
        if auto_sync {
            inner.schedule_sync(0);
        }
        Ok(Marksync { inner, cache: Rc::new(RefCell::new((0, HashMap::new()))) })
    }

    /// This device's id (random UUID v4, born at the first open).
    #[wasm_bindgen(getter, js_name = deviceId)]
    pub fn device_id(&self) -> String {
        self.inner.engine.borrow().device_id().to_owned()
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
    /// The row's space: `options.space` when given, else the space the row
    /// already lives in, else the personal space. Rejects at once with code
    /// `read_only` (a viewer) or `forbidden` (a space the user left), the
    /// server's own words, when the device knows the user may not write there.
    pub fn change(&self, table: String, row_id: String, fields: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let fields = fields_from_js(fields)?;
            let space = space_of(&options)?;
            let id = inner.change_with(space.as_deref(), &table, &row_id, fields, checks(&options)).await.map_err(client_error)?;
            Ok(JsValue::from_str(id.as_str()))
        })
    }

    /// Records many edits `[{ table, rowId, fields, space? }, …]` in one IndexedDB
    /// transaction: all or none, every edit checked first (shapes, and the
    /// known schema unless `options.check` is `false`, each edit on the row
    /// the ones before it made). Resolves with the opIds, in order.
    #[wasm_bindgen(js_name = "changeMany")]
    pub fn change_many(&self, edits: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let edits = edits_from_js(edits)?;
            let ids = inner.change_many_with(edits, checks(&options)).await.map_err(client_error)?;
            Ok(ids.iter().map(|id| JsValue::from_str(id.as_str())).collect::<Array>().into())
        })
    }

    /// Deletes a row (a tombstone: `_deleted = true`) where it lives, or in
    /// `options.space`. Resolves with the opId.
    pub fn remove(&self, table: String, row_id: String, options: JsValue) -> Promise {
        self.deleted(table, row_id, options, true)
    }

    /// Restores a deleted row (`_deleted = false`). Resolves with the opId.
    pub fn restore(&self, table: String, row_id: String, options: JsValue) -> Promise {
        self.deleted(table, row_id, options, false)
    }

    fn deleted(&self, table: String, row_id: String, options: JsValue, deleted: bool) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let space = space_of(&options)?;
            let id = inner.set_deleted(space.as_deref(), &table, &row_id, deleted).await.map_err(client_error)?;
            Ok(JsValue::from_str(id.as_str()))
        })
    }

    /// The visible rows of a table (deleted rows hidden), in rowId order,
    /// from every space the device follows (a row of a shared space carries
    /// `_space`), or from `options.space` alone. The same frozen array until
    /// something changes: fit for `useSyncExternalStore`.
    pub fn rows(&self, table: String, options: JsValue) -> Result<JsValue, JsValue> {
        let only = space_of(&options)?;
        let version = self.inner.version();
        let mut cache = self.cache.borrow_mut();
        if cache.0 != version {
            *cache = (version, HashMap::new());
        }
        let cache_key = match &only {
            Some(s) => format!("{table}\u{0}{s}"),
            None => table.clone(),
        };
        if let Some(v) = cache.1.get(&cache_key) {
            return Ok(v.clone());
        }
        let engine = self.inner.engine.borrow();
        let local = only.as_deref().map(|s| engine.following().local(s));
        let rows: Vec<_> = engine
            .rows(&table)
            .into_iter()
            .filter(|(k, _)| local.is_none_or(|l| k.space == l))
            .map(|(k, r)| (k, engine.app_row(&table, r)))
            .collect();
        let v = rows_to_js(rows.iter().map(|(k, r)| (*k, r.as_ref())));
        cache.1.insert(cache_key, v.clone());
        Ok(v)
    }

    /// One visible row, or `null` if absent or deleted: in `options.space`,
    /// or where the row lives (the personal space's copy first).
    pub fn row(&self, table: String, row_id: String, options: JsValue) -> Result<JsValue, JsValue> {
        let engine = self.inner.engine.borrow();
        let key = Self::key_of(&engine, table, row_id, &options)?;
        Ok(match engine.row(&key) {
            Some(r) => Array::from(&rows_to_js(std::iter::once((&key, engine.app_row(&key.table, r).as_ref())))).get(0),
            None => JsValue::NULL,
        })
    }

    /// The key of `table/row_id` in `options.space`, or where it lives.
    fn key_of(engine: &crate::engine::Engine, table: String, row_id: String, options: &JsValue) -> Result<RowKey, JsValue> {
        Ok(match space_of(options)? {
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

    /// Creates a shared space owned by this user (needs the server).
    /// Resolves with `{ space, role }`; rejects with code `refused` and
    /// `refusal` (the server's code, e.g. `conflict` for a taken name) or
    /// `network`.
    #[wasm_bindgen(js_name = "createSpace")]
    pub fn create_space(&self, space: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move { Ok(to_js(&inner.create_space(&space).await.map_err(client_error)?)) })
    }

    /// Gives `user` `role` (`"owner"`, `"editor"`, `"viewer"`) in `space`, or
    /// removes them with `null`. Only owners may (else `refused` with
    /// `refusal: "forbidden"`); a space keeps an owner (`conflict`).
    #[wasm_bindgen(js_name = "setMember")]
    pub fn set_member(&self, space: String, user: String, role: JsValue) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let role = if role.is_null() || role.is_undefined() {
                None
            } else {
                let name = role.as_string().unwrap_or_default();
                Some(
                    crate::space::Role::parse(&name)
                        .ok_or_else(|| js_error("bad_input", "role must be \"owner\", \"editor\", \"viewer\" or null"))?,
                )
            };
            Ok(to_js(&inner.set_member(&space, &user, role).await.map_err(client_error)?))
        })
    }

    /// The members of `space` with their roles: `{ space, members: [{ user, role }] }`.
    pub fn members(&self, space: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move { Ok(to_js(&inner.members(&space).await.map_err(client_error)?)) })
    }

    /// Calls `listener()` after every change of rows or statuses. Returns a
    /// function that unsubscribes.
    pub fn subscribe(&self, listener: Function) -> Function {
        let id = self.inner.subscribe(Client::<FetchTransport>::js_listener(listener));
        let weak = Rc::downgrade(&self.inner);
        let cb = Closure::once_into_js(move || {
            if let Some(c) = weak.upgrade() {
                c.unsubscribe(id);
            }
        });
        cb.unchecked_into()
    }

    /// What the server would answer for `table/rowId` after this edit, by
    /// the schema this device last fetched from it: `null` (accepted, no
    /// field given, or no schema known yet) or `{ code, reason, field }` in
    /// the server's words. Offline, synchronous, changes nothing; a malformed
    /// edit throws `bad_input` as `change()` would.
    pub fn check(&self, table: String, row_id: String, fields: JsValue, options: JsValue) -> Result<JsValue, JsValue> {
        let fields = fields_from_js(fields)?;
        // Nothing typed yet is not an edit to refuse: a form asks as it fills.
        if fields.is_empty() {
            return Ok(JsValue::NULL);
        }
        let space = space_of(&options)?;
        let engine = self.inner.engine.borrow();
        let draft = match engine.draft_in(space.as_deref(), &table, &row_id, fields) {
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
    /// (in `options.space`, or where the row lives).
    pub fn status(&self, table: String, row_id: String, options: JsValue) -> Result<JsValue, JsValue> {
        let engine = self.inner.engine.borrow();
        let key = Self::key_of(&engine, table, row_id, &options)?;
        Ok(to_js(&engine.status(&key)))
    }

    /// The pending ops, in the order they will be sent.
    pub fn pending(&self) -> JsValue {
        let ops: Vec<_> = self.inner.engine.borrow().pending().cloned().collect();
        to_js(&ops)
    }

    /// Runs a sync cycle now. Resolves with a report `{ ok, pushed, applied,
    /// duplicate, rejected, pulled, cursor, ignoredStaleAcks, retryAt, error }`;
    /// rejects with code `recovery_required` when sync cannot go on alone.
    pub fn sync(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let out = inner.sync().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// Asks the server what it remembers of every op sent at least once
    /// (`POST /v1/verdicts`) and settles what it knows, exactly as a push
    /// answer would: applied → acknowledged, rejected → dropped with its
    /// reason. Never pushes. Resolves with `{ ok, reconciled, unknown, … }`.
    pub fn reconcile(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let out = inner.reconcile().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// A person confirmed: lifts a stop (`retries_exhausted`, a refusal),
    /// starts the retry counts over and syncs now. Resolves like `sync()`.
    pub fn retry(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let out = inner.retry().await.map_err(client_error)?;
            Ok(to_js(&out))
        })
    }

    /// Refused ops with their reasons, until dismissed: `[{ op, reason, code }]`.
    pub fn rejections(&self) -> JsValue {
        let r: Vec<_> = self.inner.engine.borrow().rejections().cloned().collect();
        to_js(&r)
    }

    /// Dismisses a rejection. Resolves `true` if there was one.
    pub fn dismiss(&self, op_id: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let had = inner.dismiss(&op_id).await.map_err(client_error)?;
            Ok(JsValue::from_bool(had))
        })
    }

    /// Counters, stored and the same in every context: attempts,
    /// unknownOutcomes, staleAcksIgnored, applied, duplicates, rejected,
    /// reconciled, recoveryRequired, pulls — plus `pendingOps`, `cursor`,
    /// `recovery` (the code sync waits on, or null), `recoveryReason` (its
    /// words) and `nextRetryAt`.
    pub fn metrics(&self) -> JsValue {
        let e = self.inner.engine.borrow();
        let v = to_js(e.metrics());
        let reason = e.recovery().map(|r| JsValue::from_str(&r.message)).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"recoveryReason".into(), &reason);
        let next = e.retry_at().map(|t| JsValue::from_f64(t as f64)).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"nextRetryAt".into(), &next);
        let _ = Reflect::set(&v, &"pendingOps".into(), &JsValue::from_f64(e.pending_len() as f64));
        let _ = Reflect::set(&v, &"cursor".into(), &JsValue::from_f64(e.cursor() as f64));
        let rec = e.recovery().map(|r| JsValue::from_str(&r.code)).unwrap_or(JsValue::NULL);
        let _ = Reflect::set(&v, &"recovery".into(), &rec);
        v
    }

    /// `{ persisted, usage, quota }` of this origin's storage.
    pub fn storage(&self) -> Promise {
        future_to_promise(async move {
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

    /// Replaces the token (string or function) and resumes a sync blocked on auth.
    #[wasm_bindgen(js_name = setToken)]
    pub fn set_token(&self, token: JsValue) -> Result<(), JsValue> {
        self.inner.transport.set_token(token_source(token)?);
        self.inner.resume();
        Ok(())
    }

    /// Stops timers and closes the database.
    pub fn close(&self) {
        self.inner.close();
    }
}

/// A positive number option, `None` when absent.
fn positive(o: &JsValue, k: &str) -> Result<Option<f64>, JsValue> {
    let v = Reflect::get(o, &k.into()).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.is_finite() && n >= 1.0 => Ok(Some(n)),
        _ => Err(js_error("bad_input", &format!("options.retry.{k} must be a number of at least 1"))),
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
    Err(js_error("bad_input", "token must be a string or a function"))
}

fn storage_manager() -> Option<web_sys::StorageManager> {
    let nav = Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let sm = Reflect::get(&nav, &"storage".into()).ok()?;
    if sm.is_undefined() {
        return None;
    }
    Some(sm.unchecked_into())
}
