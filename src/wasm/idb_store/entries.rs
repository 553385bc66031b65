//! Index entries in IndexedDB (PROTOCOL §7, "Indexes on disk"): one record
//! per entry in `index_entries`, keyed `[index, entry bytes]` (binary keys
//! order bytewise, as the entries are spelled to), its value the base
//! row's bytes (so a query reads a page's rows with its entries, and no
//! chunk); what they are of is the `entries_for` record of `meta`.
//!
//! They are kept in the transaction of the step that writes base rows:
//! the rows' old values are read there, from the chunks and the batches,
//! before the step's batch goes in — so the entries are right whichever
//! context wrote the step, and a step that aborts takes its entries with it.

use std::collections::BTreeMap;

use idb::request::GetAllStoreRequest;
use idb::{CursorDirection, KeyRange, Query};
use js_sys::{Array, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use super::{chunk_rows, deltas_in_order, failed, key_of, parse, read_spans, BATCHES, CHUNKS, DELTA, META, SCHEMA};
use crate::index_def::{EntriesFor, EntryChange, EntryRange};
use crate::known_schema::KnownSchema;
use crate::protocol::{Row, RowKey};
use crate::schema::Schema;
use crate::store::{Provided, ProvidedRows, StoreError, Txn, Want};

/// The entries' store (layout 4).
pub(super) const ENTRIES: &str = "index_entries";
/// The key of what the entries are of ([`EntriesFor`]) in the `meta` store.
pub(super) const ENTRIES_FOR: &str = "entries_for";

/// What a step does to the entries, planned before its rows are written.
pub(super) enum Plan {
    /// Nothing: none are kept, or the step writes no row of an indexed table.
    Nothing,
    /// Each row's change, from what it was (`None`: no row).
    Step { keep: EntriesFor, schema: Option<Schema>, was: BTreeMap<RowKey, Row> },
    /// All built again once the rows are in (other indexes, another schema).
    Rebuild { keep: EntriesFor, schema: Option<KnownSchema>, new_for: bool },
}

/// The stores a step that may change entries works in.
pub(super) fn stores(txn: &Txn) -> &'static [&'static str] {
    if txn.put_base.is_empty() && txn.schema.is_none() && txn.entries_for.is_none() {
        return &[];
    }
    &[META, CHUNKS, DELTA, BATCHES, ENTRIES]
}

fn parse_schema(known: Option<&KnownSchema>) -> Option<Schema> {
    known.and_then(|k| Schema::from_json(&k.text).ok())
}

/// Reads what the step needs, before it writes: what is kept, and the old
/// rows of the indexed tables it writes.
pub(super) async fn plan(tx: &idb::Transaction, txn: &Txn) -> Result<Plan, StoreError> {
    if stores(txn).is_empty() {
        return Ok(Plan::Nothing);
    }
    let meta = tx.object_store(META).map_err(failed)?;
    let for_req = meta.get(Query::Key(JsValue::from_str(ENTRIES_FOR))).map_err(failed)?;
    let schema_req = meta.get(Query::Key(JsValue::from_str(SCHEMA))).map_err(failed)?;
    let stored_for = read_for(for_req.await.map_err(failed)?)?;
    let stored_schema: Option<KnownSchema> = schema_req.await.map_err(failed)?.and_then(|v| parse(&v).ok());
    let schema_changes = txn.schema.as_ref().is_some_and(|s| Some(s) != stored_schema.as_ref());
    let Some(keep) = txn.entries_for.clone().or_else(|| stored_for.clone()) else { return Ok(Plan::Nothing) };
    if Some(&keep) != stored_for.as_ref() || schema_changes {
        let new_for = Some(&keep) != stored_for.as_ref();
        return Ok(Plan::Rebuild { keep, schema: txn.schema.clone().or(stored_schema), new_for });
    }
    // Sorted, each once (by insertion: no sort's code in the wasm).
    let mut keys: Vec<&RowKey> = Vec::new();
    for (k, _) in txn.put_base.iter().filter(|(k, _)| keep.covers(&k.table)) {
        if let Err(at) = keys.binary_search(&k) {
            keys.insert(at, k);
        }
    }
    if keys.is_empty() {
        return Ok(Plan::Nothing);
    }
    let wanted = |k: &RowKey| keys.binary_search(&k).is_ok();
    let wants: Vec<Want> = keys.iter().map(|k| Want::row(k)).collect();
    let chunks = read_spans(&tx.object_store(CHUNKS).map_err(failed)?, &wants).await?;
    let delta_req = tx.object_store(DELTA).map_err(failed)?.get_all(None, None).map_err(failed)?;
    let batches_req = tx.object_store(BATCHES).map_err(failed)?.get_all(None, None).map_err(failed)?;
    let (delta_v, batches_v) = (delta_req.await.map_err(failed)?, batches_req.await.map_err(failed)?);
    // What each row was; absent: no row.
    let mut was: BTreeMap<RowKey, Row> = BTreeMap::new();
    for p in chunks {
        let rows = match p.rows {
            ProvidedRows::Chunk(bytes) => crate::chunks::decode_chunk(&bytes)?,
            ProvidedRows::Rows(rows) => rows,
        };
        was.extend(rows.into_iter().filter(|(k, _)| wanted(k)));
    }
    // Later than the chunks, and a later batch than an earlier.
    for (k, r) in deltas_in_order(&delta_v, &batches_v)? {
        if wanted(&k) {
            if r.is_gone() {
                was.remove(&k);
            } else {
                was.insert(k, r);
            }
        }
    }
    Ok(Plan::Step { keep, schema: parse_schema(stored_schema.as_ref()), was })
}

/// An entry's key in [`ENTRIES`].
fn entry_key(index: &str, entry: &[u8]) -> JsValue {
    Array::of2(&JsValue::from_str(index), &Uint8Array::from(entry).into()).into()
}

/// Writes what the plan says, once the step's rows are in.
pub(super) async fn write(tx: &idb::Transaction, txn: &Txn, plan: Plan) -> Result<(), StoreError> {
    if matches!(plan, Plan::Nothing) {
        return Ok(());
    }
    let store = tx.object_store(ENTRIES).map_err(failed)?;
    match plan {
        Plan::Nothing => Ok(()),
        Plan::Step { keep, schema, mut was } => {
            let mut changes: Vec<EntryChange> = Vec::new();
            for (k, r) in &txn.put_base {
                if !keep.covers(&k.table) {
                    continue;
                }
                let new = (!r.is_gone()).then_some(r);
                keep.changes(schema.as_ref(), k, was.get(k), new, &mut changes);
                match new {
                    Some(r) => was.insert(k.clone(), r.clone()),
                    None => was.remove(k),
                };
            }
            // Entries gone, then every entry of each row the step leaves,
            // with the row's bytes (a changed row keeps its entry, and
            // its value moves).
            for c in changes.iter().filter(|c| !c.put) {
                store.delete(Query::Key(entry_key(&c.index, &c.entry))).map_err(failed)?;
            }
            let ids: Vec<String> = keep.defs.iter().map(crate::query::IndexDef::id).collect();
            let mut last: Vec<&RowKey> = Vec::new();
            for (k, _) in txn.put_base.iter().filter(|(k, _)| keep.covers(&k.table)) {
                if let Err(at) = last.binary_search(&k) {
                    last.insert(at, k);
                }
            }
            for k in last {
                if let Some(r) = was.get(k) {
                    put_row(&store, &keep, schema.as_ref(), &ids, k, r)?;
                }
            }
            Ok(())
        }
        Plan::Rebuild { keep, schema, new_for } => {
            if new_for {
                let record = JsValue::from_str(&keep.spell());
                tx.object_store(META).map_err(failed)?.put(&record, Some(&JsValue::from_str(ENTRIES_FOR))).map_err(failed)?;
            }
            store.clear().map_err(failed)?;
            rebuild(tx, &store, &keep, parse_schema(schema.as_ref()).as_ref()).await
        }
    }
}

/// Puts every entry of one base row, each with the row's bytes as its
/// value: a query reads a page's rows with its entries.
fn put_row(
    store: &idb::ObjectStore,
    keep: &EntriesFor,
    schema: Option<&Schema>,
    ids: &[String],
    k: &RowKey,
    r: &Row,
) -> Result<(), StoreError> {
    let bytes = crate::chunks::encode_one(k, r, Vec::new())?;
    let value: JsValue = Uint8Array::from(bytes.as_slice()).into();
    let mut out = Ok(());
    keep.each_entry(schema, k, r, |i, e| {
        if out.is_ok() {
            out = store.put(&value, Some(&entry_key(&ids[i], &e))).map(|_| ()).map_err(failed);
        }
    });
    out
}

/// Every entry of every base row, a chunk at a time (never every row in
/// memory at once); the deltas, newer, are read first and win.
async fn rebuild(tx: &idb::Transaction, store: &idb::ObjectStore, keep: &EntriesFor, schema: Option<&Schema>) -> Result<(), StoreError> {
    let ids: Vec<String> = keep.defs.iter().map(crate::query::IndexDef::id).collect();
    let put = |k: &RowKey, r: &Row| put_row(store, keep, schema, &ids, k, r);
    let delta_req = tx.object_store(DELTA).map_err(failed)?.get_all(None, None).map_err(failed)?;
    let batches_req = tx.object_store(BATCHES).map_err(failed)?.get_all(None, None).map_err(failed)?;
    let chunks = tx.object_store(CHUNKS).map_err(failed)?;
    let keys_req = chunks.get_all_keys(None, None).map_err(failed)?;
    let (delta_v, batches_v) = (delta_req.await.map_err(failed)?, batches_req.await.map_err(failed)?);
    let keys_v = keys_req.await.map_err(failed)?;
    // Inserted one by one: collecting a map sorts with a stable sort, kilobytes of wasm.
    let mut newer: BTreeMap<RowKey, Row> = BTreeMap::new();
    for (k, r) in deltas_in_order(&delta_v, &batches_v)? {
        newer.insert(k, r);
    }
    let mut firsts = keys_v.iter().map(key_of).collect::<Result<Vec<_>, _>>()?;
    firsts.sort_unstable();
    for (i, first) in firsts.iter().enumerate() {
        // A chunk holds keys from its first to the next one's: read only
        // those that may hold a row of an indexed table.
        let next = firsts.get(i + 1);
        if !keep.defs.iter().any(|d| first.table <= d.table && next.is_none_or(|n| n.table >= d.table)) {
            continue;
        }
        let v = chunks.get(Query::Key(super::row_key(first))).map_err(failed)?.await.map_err(failed)?;
        let v = v.ok_or_else(|| failed("a base chunk vanished while index entries were built"))?;
        for (k, r) in chunk_rows(&v)? {
            if keep.covers(&k.table) && !newer.contains_key(&k) {
                put(&k, &r)?;
            }
        }
    }
    for (k, r) in &newer {
        if keep.covers(&k.table) && !r.is_gone() {
            put(k, r)?;
        }
    }
    Ok(())
}

/// What is kept, read at open.
pub(super) fn read_for(v: Option<JsValue>) -> Result<Option<EntriesFor>, StoreError> {
    let Some(v) = v else { return Ok(None) };
    let text = v.as_string().ok_or_else(|| super::corrupt("what the index entries are of is not text"))?;
    EntriesFor::read(&text).map(Some).ok_or_else(|| super::corrupt("what the index entries are of does not read"))
}

/// IndexedDB 3's `getAllRecords` over `range` (keys and values in one
/// request, in either direction), where the browser has it (Chromium 141
/// on); `None` elsewhere.
fn all_records(store: &idb::ObjectStore, range: &KeyRange, count: u32, reverse: bool) -> Result<Option<GetAllStoreRequest>, StoreError> {
    let raw: web_sys::IdbObjectStore = store.clone().into();
    let f = js_sys::Reflect::get(&raw, &JsValue::from_str("getAllRecords")).map_err(failed)?;
    let Some(f) = f.dyn_ref::<js_sys::Function>() else { return Ok(None) };
    let options = js_sys::Object::new();
    let set = |k: &str, v: JsValue| js_sys::Reflect::set(&options, &JsValue::from_str(k), &v).map_err(failed);
    set("query", range.clone().into())?;
    set("count", count.into())?;
    set("direction", JsValue::from_str(if reverse { "prev" } else { "next" }))?;
    let request = f.call1(&raw, &options).map_err(failed)?;
    Ok(Some(request.unchecked_into::<web_sys::IdbRequest>().into()))
}

/// Keys and values in two requests, ascending from where the page starts.
async fn read_in_parts(
    store: &idb::ObjectStore,
    bounds: KeyRange,
    upper: &JsValue,
    limit: u32,
    reverse: bool,
) -> Result<(Vec<JsValue>, Vec<JsValue>), StoreError> {
    // Ascending from where the page starts. Backwards, the start is found
    // first: a key cursor on the range's end steps back the page's length in
    // one request (a cursor walked record by record takes a round trip per entry).
    let from = if reverse {
        let cursor = store
            .open_key_cursor(Some(Query::KeyRange(bounds.clone())), Some(CursorDirection::Prev))
            .map_err(failed)?
            .await
            .map_err(failed)?;
        let Some(cursor) = cursor else { return Ok((Vec::new(), Vec::new())) };
        let mut cursor = cursor.into_managed();
        if limit > 1 {
            cursor.advance(limit - 1).await.map_err(failed)?;
        }
        // Past the range's start: the page is the whole range.
        match cursor.key().map_err(failed)? {
            Some(start) => KeyRange::bound(&start, upper, Some(false), Some(true)).map_err(failed)?,
            None => bounds,
        }
    } else {
        bounds
    };
    // Two requests over the same range and count, in one transaction: the same records.
    let keys_req = store.get_all_keys(Some(Query::KeyRange(from.clone())), Some(limit)).map_err(failed)?;
    let values_req = store.get_all(Some(Query::KeyRange(from)), Some(limit)).map_err(failed)?;
    let (mut keys, mut values) = (keys_req.await.map_err(failed)?, values_req.await.map_err(failed)?);
    if reverse {
        keys.reverse();
        values.reverse();
    }
    Ok((keys, values))
}

/// One index's entries in a range, in a transaction of their own.
pub(super) async fn read(db: &idb::Database, range: &EntryRange) -> Result<(Vec<Vec<u8>>, Vec<Provided>), StoreError> {
    if range.limit == 0 || range.to.as_ref().is_some_and(|to| *to <= range.from) {
        return Ok((Vec::new(), Vec::new()));
    }
    let lower = entry_key(&range.index, &range.from);
    let upper: JsValue = match &range.to {
        Some(to) => entry_key(&range.index, to),
        // An array orders after every binary key: the index's end.
        None => Array::of2(&JsValue::from_str(&range.index), &Array::new()).into(),
    };
    let bounds = KeyRange::bound(&lower, &upper, Some(false), Some(true)).map_err(failed)?;
    let tx = db.transaction(&[ENTRIES], idb::TransactionMode::ReadOnly).map_err(failed)?;
    let store = tx.object_store(ENTRIES).map_err(failed)?;
    let limit = u32::try_from(range.limit).unwrap_or(u32::MAX);
    let (keys, values) = match all_records(&store, &bounds, limit, range.reverse)? {
        Some(request) => {
            let records = request.await.map_err(failed)?;
            let field = |r: &JsValue, name: &str| js_sys::Reflect::get(r, &JsValue::from_str(name)).map_err(failed);
            let mut pairs = (Vec::with_capacity(records.len()), Vec::with_capacity(records.len()));
            for r in &records {
                pairs.0.push(field(r, "key")?);
                pairs.1.push(field(r, "value")?);
            }
            pairs
        }
        None => read_in_parts(&store, bounds, &upper, limit, range.reverse).await?,
    };
    // Every read succeeded: what they returned stands however the read-only
    // transaction ends, and it ends by itself (waiting for it: a round trip more).
    drop(tx);
    let mut entries = Vec::with_capacity(keys.len());
    let mut rows = Vec::with_capacity(keys.len());
    for (k, v) in keys.iter().zip(&values) {
        let part = Array::from(k).get(1);
        let bytes = part.dyn_into::<js_sys::ArrayBuffer>().map_err(|_| failed("an index entry's key is not bytes"))?;
        entries.push(Uint8Array::new(&bytes).to_vec());
        // An entry written before its rows were kept beside it has none.
        if let Some(bytes) = v.dyn_ref::<Uint8Array>() {
            let (key, row) = crate::chunks::decode_row(&bytes.to_vec())?;
            let to = Want::row(&key).to;
            rows.push(Provided { from: key.clone(), to, rows: ProvidedRows::Rows(vec![(key, row)]) });
        }
    }
    Ok((entries, rows))
}
