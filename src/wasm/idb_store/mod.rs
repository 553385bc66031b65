//! The device's state in IndexedDB: `meta`, `base_chunks`, `base_delta`,
//! `pending`, `rejections`.
//!
//! Every logical step is ONE IndexedDB transaction: recording an op (with
//! the counter when it reserves numbers; its key is its `at`); applying a push answer's verdicts; applying a pull page
//! with the cursor; recording an attempt going out, and its outcome (the sync
//! state, [`crate::sync_state::SyncState`], one record `"sync"` in `meta`).
//! Records are JSON strings (base chunks and batches: binary, see [`crate::chunks`]); keys: `"sync"`,
//! `"schema"`, `"following"` (the followed spaces) in `meta`; `[table, rowId]` (`[table, rowId, space]`
//! in a shared space) in the base stores;
//! `at` in `pending` (a number, so the outbox reads back in record order; a run of a
//! recording's ops under its last `at` + 0.5, [`runs`]), and there, above
//! every number, the meta record under `"meta"` (layout 8); `opId` in `rejections`.
//!
//! Base rows live in chunks plus a log, so that open reads a few large
//! records instead of one per row: `base_chunks`, compacted snapshot chunks
//! of many rows each ([`crate::chunks`]), and `base_batches`, the base rows
//! of each committed step since the last compaction as one chunk-encoded
//! record under an increasing key (a later batch's copy of a row wins over
//! an earlier one and over the chunks'). Once more than [`COMPACT_AFTER`]
//! rows are counted in batches, [`IdbStore::compact`] folds them into the
//! chunks in one transaction that reads what it folds, so commits of other
//! tabs and workers serialize around it. Older layouts still open: version 2
//! kept one `base_delta` record per row keyed by `[table, rowId]`, version 1 a
//! `base` store of the same records; the upgrade keeps them (renaming `base`
//! to `base_delta`), they read as the oldest deltas, and the first compaction
//! folds them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use idb::{
    CursorDirection, Database, DatabaseEvent, Event, Factory, KeyRange, ObjectStoreParams, Query, Request, TransactionMode,
    TransactionResult,
};
use js_sys::{Array, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::protocol::{Row, RowKey};
use crate::store::{LocalStore, Meta, Provided, ProvidedRows, Rejection, Snapshot, StoreError, Txn, Want};

mod entries;
mod runs;

use crate::chunks::{chunk_of, decode_chunk, decode_chunk_v1, encode_chunks, encode_snapshot, fold};

const META: &str = "meta";
/// The meta record's key: in `pending` from layout 8 (a string, so above
/// every op's `at`), in `meta` before.
const META_RECORD: &str = "meta";
/// The key of the sync state's record in the `meta` store.
const SYNC: &str = "sync";
/// The key of the server's schema, as last fetched, in the `meta` store.
const SCHEMA: &str = "schema";
/// The key of the followed spaces ([`crate::following::Following`]) in the `meta` store.
const FOLLOWING: &str = "following";
const CHUNKS: &str = "base_chunks";
const DELTA: &str = "base_delta";
/// Base rows put since the last compaction, one record per committed step
/// (a chunk-encoded batch under an increasing key): layout 3.
const BATCHES: &str = "base_batches";
const PENDING: &str = "pending";
/// What a person must see and dismiss: refusals (key: the opId) and
/// conflicts (key: their id, `<opId>/<field>`, which no opId spells).
const REJECTIONS: &str = "rejections";
/// Schema version 1's per-row base store (renamed to [`DELTA`] by the upgrade).
const LEGACY_BASE: &str = "base";
const ALL: [&str; 7] = [META, CHUNKS, DELTA, BATCHES, PENDING, REJECTIONS, entries::ENTRIES];
/// Layout 5 changed no store: the meta record's clock stopped holding the
/// `at`s of ops still queued (the outbox's keys hold them, PROTOCOL §7).
/// A context of an older version reads the record alone and would hand out
/// an `at` taken: the upgrade closes its connection, and it cannot open the
/// database again ("reload the page"). Layout 6 changed no store either:
/// the outbox holds runs of ops in one record ([`runs`]), which an older
/// version cannot read. Nor did layout 7: the contexts sharing the
/// database tell each other their steps record by record
/// ([`crate::told`]), which an older version cannot hear. Layout 8 moved
/// the meta record from `meta` into `pending`, under its key `"meta"`,
/// above every op's: a recording checks it and the ops queued since in
/// one request of one store ([`IdbStore::write_assuming`]); the first open
/// moves it, and an older version would read a record no longer kept.
const VERSION: u32 = 8;

/// Compaction starts once more base deltas than this are counted.
pub const COMPACT_AFTER: usize = 2_000;

/// The handler of the connection's `close` and `versionchange` events.
type Handler = Closure<dyn FnMut(web_sys::Event)>;

/// One open connection to the database.
struct Conn {
    db: Rc<Database>,
    /// The same connection, for what the wrapper does not expose (durability, events).
    raw: web_sys::IdbDatabase,
    /// Kept alive as long as the connection: it hears the connection closed under the library.
    _handler: Handler,
}

/// Who is told when the connection is lost (set by the store's owner), shared
/// with the connection's close and version-change handlers.
type OnLost = Rc<RefCell<Option<Rc<dyn Fn()>>>>;

/// A local store in IndexedDB.
pub struct IdbStore {
    conn: RefCell<Conn>,
    /// The connection was closed under the library (the site's data cleared,
    /// storage evicted, another context's version change): every call fails
    /// with [`StoreError::Closed`] until [`LocalStore::reconnect`].
    lost: Rc<Cell<bool>>,
    /// Told once when the connection is lost, so the context heals at once
    /// rather than at its next call.
    on_lost: OnLost,
    name: String,
    /// Base deltas written since the last compaction, as far as this context knows.
    deltas: Rc<Cell<usize>>,
    compacting: Rc<Cell<bool>>,
    /// Opens lazily: no chunk is read at open, base rows are read as the
    /// engine asks ([`LocalStore::read_base`]).
    lazy: Cell<bool>,
    /// Closed by its owner (`close()`): a call under way then fails as
    /// [`StoreError::ClosedByApp`], never as a loss.
    closed_by_app: Cell<bool>,
}

/// A failed call in the words of the store's contract: the quota used up
/// is [`StoreError::Full`], a connection that is closing is [`StoreError::Closed`]
/// (the DOMException's name leads its text in every engine).
fn failed(e: impl Said) -> StoreError {
    if e.closing() {
        return StoreError::Closed(e.said());
    }
    classify(e.said())
}

fn classify(text: String) -> StoreError {
    if text.contains("QuotaExceededError") {
        StoreError::Full(text)
    } else if (text.contains("InvalidStateError") || text.contains("AbortError")) && (text.contains("clos") || text.contains("connection"))
    {
        StoreError::Closed(text)
    } else {
        StoreError::TxnFailed(text)
    }
}

/// A failure that names no error.
const NOTHING_THROWN: &str = "IndexedDB failed without an error";

/// What a failed call says (a thrown value: its name, then its message).
trait Said {
    fn said(self) -> String;

    /// A transaction refused to start because the connection is closing:
    /// IndexedDB's `transaction()` throws `InvalidStateError` for that alone
    /// (no upgrade runs on a connection the store writes through). The
    /// browser closes a connection before its `close` event reaches the
    /// library, and the message differs in each engine; the name does not.
    fn closing(&self) -> bool {
        false
    }
}

/// What `IDBDatabase.transaction()` threw.
struct NotStarted(JsValue);

impl Said for NotStarted {
    fn said(self) -> String {
        self.0.said()
    }

    fn closing(&self) -> bool {
        invalid_state(&self.0)
    }
}

fn invalid_state(thrown: &JsValue) -> bool {
    thrown.dyn_ref::<web_sys::DomException>().is_some_and(|d| d.name() == "InvalidStateError")
}

impl Said for &str {
    fn said(self) -> String {
        self.to_owned()
    }
}

impl Said for String {
    fn said(self) -> String {
        self
    }
}

impl Said for idb::Error {
    /// What the browser threw, as JS says it (`String(e)`: the DOMException's
    /// name, then its message). Not idb's own `Display`: its forty texts
    /// and their formatting were 4 KB of the wasm for the word before the
    /// browser's.
    fn said(self) -> String {
        use idb::Error::*;
        let thrown = match &self {
            AddFailed(v)
            | ClearFailed(v)
            | CountFailed(v)
            | CursorAdvanceFailed(v)
            | CursorContinueFailed(v)
            | CursorKeyNotFound(v)
            | CursorPrimaryKeyNotFound(v)
            | CursorValueNotFound(v)
            | DeleteFailed(v)
            | GetAllFailed(v)
            | GetAllKeysFailed(v)
            | GetFailed(v)
            | GetKeyFailed(v)
            | IndexCreateFailed(v)
            | IndexDeleteFailed(v)
            | IndexedDbDeleteFailed(v)
            | IndexedDbOpenFailed(v)
            | IndexNotFound(v)
            | KeyPathNotFound(v)
            | KeyRangeBoundNotFound(v)
            | KeyRangeCreateFailed(v)
            | KeyRangeIncludesFailed(v)
            | ObjectStoreCreateFailed(v)
            | ObjectStoreDeleteFailed(v)
            | ObjectStoreNotFound(v)
            | OpenCursorFailed(v)
            | OpenKeyCursorFailed(v)
            | RequestErrorNotFound(v)
            | RequestResultNotFound(v)
            | TransactionAbortError(v)
            | TransactionCommitError(v)
            | TransactionModeNotFound(v)
            | TransactionOpenFailed(v)
            | UnexpectedJsType(_, v)
            | UpdateFailed(v) => v,
            DomException(d) => d.as_ref(),
            IndexedDbNotFound(_) => return "IndexedDB is not available in this context".to_owned(),
            _ => return NOTHING_THROWN.to_owned(),
        };
        thrown.clone().said()
    }

    fn closing(&self) -> bool {
        matches!(self, idb::Error::TransactionOpenFailed(v) if invalid_state(v))
    }
}

impl Said for JsValue {
    /// As JS says it (`String(e)`): a DOMException's name, then its message.
    /// A failed request (an `IDBRequest`, as some paths hand it on) is said
    /// by its `error`, not as "[object IDBRequest]".
    fn said(self) -> String {
        if self.is_undefined() || self.is_null() {
            return NOTHING_THROWN.to_owned();
        }
        if let Ok(error) = js_sys::Reflect::get(&self, &"error".into()) {
            if error.dyn_ref::<web_sys::DomException>().is_some() {
                return error.said();
            }
        }
        self.unchecked_ref::<js_sys::Object>().to_string().into()
    }
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn json<T: serde::Serialize>(v: &T) -> Result<JsValue, StoreError> {
    serde_json::to_string(v).map(|s| JsValue::from_str(&s)).map_err(corrupt)
}

fn parse<T: serde::de::DeserializeOwned>(v: &JsValue) -> Result<T, StoreError> {
    let s = v.as_string().ok_or_else(|| corrupt("a record is not a string"))?;
    crate::json::from_str(&s).map_err(corrupt)
}

/// A chunk's IndexedDB key: its first row's `[table, rowId]`, and the
/// space when it is a shared one.
fn row_key(k: &RowKey) -> JsValue {
    if k.space.is_empty() {
        return Array::of2(&JsValue::from_str(&k.table), &JsValue::from_str(&k.row_id)).into();
    }
    Array::of3(&JsValue::from_str(&k.table), &JsValue::from_str(&k.row_id), &JsValue::from_str(&k.space)).into()
}

/// A stored chunk's rows: UTF-8 JSON bytes, or JSON text in the first encoding.
fn chunk_rows(v: &JsValue) -> Result<Vec<(RowKey, Row)>, StoreError> {
    if let Some(bytes) = v.dyn_ref::<Uint8Array>() {
        return decode_chunk(&bytes.to_vec());
    }
    match v.as_string() {
        Some(text) => decode_chunk_v1(&text),
        None => Err(corrupt("a base chunk is neither bytes nor text")),
    }
}

/// The outbox's keys, every number: not the meta record's key, a string
/// (IndexedDB orders every number before every string).
fn ops_only() -> Result<KeyRange, StoreError> {
    KeyRange::upper_bound(&JsValue::from_f64(f64::INFINITY), None).map_err(failed)
}

/// Asks for the outbox's last key: the largest `at` still queued
/// ([`Meta::with_queued`]). Made before the transaction's writes, it sees
/// the store as it was before them.
fn ask_last_queued(pending: &idb::ObjectStore) -> Result<impl std::future::Future<Output = Result<Option<u64>, StoreError>>, StoreError> {
    let req = pending.open_key_cursor(Some(Query::KeyRange(ops_only()?)), Some(CursorDirection::Prev)).map_err(failed)?;
    // Listened to from now: its answer is heard whenever it is awaited.
    let req = std::future::IntoFuture::into_future(req);
    Ok(async move {
        let cursor = req.await.map_err(failed)?;
        let key = cursor.map(|c| c.into_managed().key()).transpose().map_err(failed)?.flatten();
        Ok(key.and_then(|k| k.as_f64()).map(|f| f as u64))
    })
}

/// Every base delta, oldest first (a later one of a row replaces an earlier):
/// layout 2's per-row records, then the batches in key (commit) order.
fn deltas_in_order(per_row: &[JsValue], batches: &[JsValue]) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let mut out = per_row.iter().map(parse::<(RowKey, Row)>).collect::<Result<Vec<_>, _>>()?;
    for b in batches {
        let bytes = b.dyn_ref::<Uint8Array>().ok_or_else(|| corrupt("a base batch is not bytes"))?;
        out.extend(decode_chunk(&bytes.to_vec())?);
    }
    Ok(out)
}

fn key_of(v: &JsValue) -> Result<RowKey, StoreError> {
    let a = Array::from(v);
    match (a.length(), a.get(0).as_string(), a.get(1).as_string(), a.get(2).as_string()) {
        (2, Some(table), Some(row_id), _) => Ok(RowKey::new(table, row_id)),
        (3, Some(table), Some(row_id), Some(space)) => Ok(RowKey::in_space(space, table, row_id)),
        _ => Err(corrupt("a base chunk key is not [table, rowId] or [table, rowId, space]")),
    }
}

/// Folds every base delta into the chunks, in one transaction; returns how
/// many deltas were folded. Only the chunks that receive a delta are read
/// and rewritten (split when they grow past the limits).
async fn compact_db(db: &Database) -> Result<usize, StoreError> {
    let tx = db.transaction(&[CHUNKS, DELTA, BATCHES], TransactionMode::ReadWrite).map_err(failed)?;
    let chunks = tx.object_store(CHUNKS).map_err(failed)?;
    let delta = tx.object_store(DELTA).map_err(failed)?;
    let batches = tx.object_store(BATCHES).map_err(failed)?;
    let deltas_req = delta.get_all(None, None).map_err(failed)?;
    let batches_req = batches.get_all(None, None).map_err(failed)?;
    let keys_req = chunks.get_all_keys(None, None).map_err(failed)?;
    let deltas_v = deltas_req.await.map_err(failed)?;
    let batches_v = batches_req.await.map_err(failed)?;
    let keys_v = keys_req.await.map_err(failed)?;
    let deltas = deltas_in_order(&deltas_v, &batches_v)?;
    let folded = deltas.len();
    if folded > 0 {
        let mut firsts = keys_v.iter().map(key_of).collect::<Result<Vec<_>, _>>()?;
        firsts.sort_unstable();
        let mut groups: litemap::LiteMap<Option<usize>, Vec<(RowKey, Row)>> = litemap::LiteMap::new();
        for (k, r) in deltas {
            groups.entry(chunk_of(&firsts, &k, |f| f)).or_default().push((k, r));
        }
        let mut reads = Vec::with_capacity(groups.len());
        for (at, rows) in groups {
            let req = match at {
                Some(i) => Some(chunks.get(Query::Key(row_key(&firsts[i]))).map_err(failed)?),
                None => None,
            };
            reads.push((at, req, rows));
        }
        for (at, req, rows) in reads {
            let old = match req {
                Some(req) => match req.await.map_err(failed)? {
                    Some(v) => chunk_rows(&v)?,
                    None => return Err(failed("a base chunk vanished during compaction")),
                },
                None => Vec::new(),
            };
            let pieces = encode_chunks(&fold(old, rows))?;
            if let Some(i) = at {
                chunks.delete(Query::Key(row_key(&firsts[i]))).map_err(failed)?;
            }
            for c in pieces {
                chunks.put(&Uint8Array::from(c.bytes.as_slice()).into(), Some(&row_key(&c.first))).map_err(failed)?;
            }
        }
        delta.clear().map_err(failed)?;
        batches.clear().map_err(failed)?;
    }
    finish(tx, "compaction").await.map(|()| folded)
}

/// The chunks that answer `wants`, each with the span it answers for: from
/// its first key (the first chunk's from the least key) to the next chunk's
/// first key. A want below every chunk, or in a store with none, is
/// answered by an empty span up to the first chunk.
///
/// A few wants are looked up around their keys ([`spans_around`]); more, or
/// keys the lookup cannot place, read every chunk's key — which walks the
/// store's records (30 ms at a million rows, at each open with an edit
/// queued).
async fn read_spans(chunks: &idb::ObjectStore, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let spans = match spans_around(chunks, wants).await? {
        Some(spans) => spans,
        None => spans_of_all(chunks.get_all_keys(None, None).map_err(failed)?.await.map_err(failed)?, wants)?,
    };
    let least = RowKey::new("", "");
    let mut out = Vec::with_capacity(spans.len());
    let mut reads = Vec::with_capacity(spans.len());
    for span in spans {
        match span.first {
            Some(first) => reads.push((span.head, first.clone(), span.to, chunks.get(Query::Key(row_key(&first))).map_err(failed)?)),
            None => out.push(Provided { from: least.clone(), to: span.to, rows: ProvidedRows::Rows(Vec::new()) }),
        }
    }
    for (head, first, to, req) in reads {
        let v = req.await.map_err(failed)?.ok_or_else(|| failed("a base chunk vanished during a read"))?;
        let rows = match v.dyn_ref::<Uint8Array>() {
            Some(bytes) => ProvidedRows::Chunk(bytes.to_vec()),
            None => ProvidedRows::Rows(chunk_rows(&v)?),
        };
        out.push(Provided { from: if head { least.clone() } else { first }, to, rows });
    }
    Ok(out)
}

/// A span of the chunks: the chunk whose first key is `first` (`None`: the
/// empty span below every chunk), up to `to`; `head`: the first chunk,
/// which answers from the least key.
struct Span {
    first: Option<RowKey>,
    to: Option<RowKey>,
    head: bool,
}

/// Up to this many wants are looked up one by one around their keys.
const FEW_WANTS: usize = 16;
/// A range with more chunks than this inside it is not looked up around.
const FEW_CHUNKS: u32 = 8;

/// Whether IndexedDB orders `s` among any strings as Rust does. They differ
/// only where a char of U+E000..=U+FFFF meets one past U+FFFF (UTF-16 code
/// units against code points); a string with neither is placed alike.
fn plain(s: &str) -> bool {
    s.chars().all(|c| (c as u32) < 0xE000)
}

fn plain_key(k: &RowKey) -> bool {
    plain(&k.table) && plain(&k.row_id) && plain(&k.space)
}

/// The spans of `wants` from key cursors around them, without reading every
/// chunk's key: first around the one range from the least start to the
/// greatest end (edits queued on new rows sit side by side), then, for a
/// few wants, around each. `None` when neither places them.
async fn spans_around(chunks: &idb::ObjectStore, wants: &[Want]) -> Result<Option<Vec<Span>>, StoreError> {
    if !wants.iter().all(|w| plain_key(&w.from) && w.to.as_ref().is_none_or(plain_key)) {
        return Ok(None);
    }
    let (mut from, mut to) = (&wants[0].from, wants[0].to.as_ref());
    for w in wants {
        from = from.min(&w.from);
        to = match (to, w.to.as_ref()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    let whole = Want { from: from.clone(), to: to.cloned() };
    if let Some(spans) = look_around(chunks, std::slice::from_ref(&whole)).await? {
        return Ok(Some(spans));
    }
    if wants.len() > FEW_WANTS {
        return Ok(None);
    }
    look_around(chunks, wants).await
}

/// The spans of `ranges` (of [`plain`] bounds), from key cursors around
/// each (all asked at once: one round trip): the last chunk key at or
/// before its start, the keys inside it, and the first at or past its end.
/// `None` when a range holds more than [`FEW_CHUNKS`] chunks, or a key
/// found is not plain: the chunk found by IndexedDB's order could then be
/// another than Rust's.
///
/// Why plain keys suffice: every key compares with plain bounds alike in
/// both orders, so the keys inside are the same; and if the key found
/// before the start were not Rust's last, the two would compare
/// differently, which needs a char past U+DFFF in the found one.
async fn look_around(chunks: &idb::ObjectStore, ranges: &[Want]) -> Result<Option<Vec<Span>>, StoreError> {
    let mut asked = Vec::with_capacity(ranges.len());
    for w in ranges {
        let from = row_key(&w.from);
        let before = chunks
            .open_key_cursor(Some(Query::KeyRange(KeyRange::upper_bound(&from, Some(false)).map_err(failed)?)), Some(CursorDirection::Prev))
            .map_err(failed)?;
        let inside_range = match &w.to {
            Some(to) => KeyRange::bound(&from, &row_key(to), Some(true), Some(true)).map_err(failed)?,
            None => KeyRange::lower_bound(&from, Some(true)).map_err(failed)?,
        };
        let inside = chunks.get_all_keys(Some(Query::KeyRange(inside_range)), Some(FEW_CHUNKS + 1)).map_err(failed)?;
        let after = match &w.to {
            Some(to) => Some(
                chunks
                    .get_all_keys(Some(Query::KeyRange(KeyRange::lower_bound(&row_key(to), Some(false)).map_err(failed)?)), Some(1))
                    .map_err(failed)?,
            ),
            None => None,
        };
        asked.push((before, inside, after));
    }
    // Each chunk's first key, and the first key after it, as found; the
    // requests are awaited in the order they were made.
    // (Kept sorted by insertion: no map's or sort's code more in the wasm.)
    let (mut firsts, mut ends_of): (Vec<RowKey>, Vec<Option<RowKey>>) = (Vec::new(), Vec::new());
    let mut head_to: Option<Option<RowKey>> = None;
    for (before, inside, after) in asked {
        let before = match before.await.map_err(failed)?.map(|c| c.into_managed().key()).transpose().map_err(failed)?.flatten() {
            Some(k) => Some(key_of(&k)?),
            None => None,
        };
        let mut inside = inside.await.map_err(failed)?.iter().map(key_of).collect::<Result<Vec<_>, _>>()?;
        let after = match after {
            Some(req) => req.await.map_err(failed)?.first().map(key_of).transpose()?,
            None => None,
        };
        if inside.len() > FEW_CHUNKS as usize || !before.as_ref().is_none_or(plain_key) || !after.as_ref().is_none_or(plain_key) {
            return Ok(None);
        }
        inside.sort_unstable();
        let mut starts: Vec<RowKey> = before.iter().cloned().collect();
        let ends: Vec<Option<RowKey>> = inside.iter().cloned().map(Some).chain(std::iter::once(after)).collect();
        if before.is_none() {
            head_to = Some(ends[0].clone());
        }
        starts.extend(inside);
        // Each start's span ends at the next key found (`ends` is one longer
        // than `inside`: with no chunk before, the first end closes the head).
        let skip = usize::from(before.is_none());
        for (start, end) in starts.into_iter().zip(ends.into_iter().skip(skip)) {
            if let Err(at) = firsts.binary_search(&start) {
                firsts.insert(at, start);
                ends_of.insert(at, end);
            }
        }
    }
    let mut spans: Vec<Span> = Vec::with_capacity(firsts.len() + 1);
    if let Some(to) = head_to {
        // Below every chunk: empty, up to the first (the lookups of one
        // store in one transaction agree on it).
        spans.push(Span { first: None, to, head: false });
    }
    spans.extend(firsts.into_iter().zip(ends_of).map(|(first, to)| Span { first: Some(first), to, head: false }));
    Ok(Some(spans))
}

/// The spans of `wants` from every chunk's key, `keys_v`.
fn spans_of_all(keys_v: Vec<JsValue>, wants: &[Want]) -> Result<Vec<Span>, StoreError> {
    let mut firsts = keys_v.iter().map(key_of).collect::<Result<Vec<_>, _>>()?;
    firsts.sort_unstable();
    let mut need = vec![false; firsts.len()];
    let mut head = false;
    for w in wants {
        // Chunk `i` answers for `[firsts[i], firsts[i + 1])`, the first one from the least key.
        let below = firsts.first().is_none_or(|f| w.from < *f);
        head |= below;
        let mut i = if below { 0 } else { chunk_of(&firsts, &w.from, |f| f).unwrap_or(0) };
        while i < firsts.len() && w.to.as_ref().is_none_or(|to| firsts[i] < *to) {
            need[i] = true;
            i += 1;
        }
    }
    let mut spans = Vec::new();
    if head && !need.first().copied().unwrap_or(false) {
        spans.push(Span { first: None, to: firsts.first().cloned(), head: false });
    }
    for i in (0..firsts.len()).filter(|i| need[*i]) {
        spans.push(Span { first: Some(firsts[i].clone()), to: firsts.get(i + 1).cloned(), head: i == 0 });
    }
    Ok(spans)
}

impl IdbStore {
    /// Opens (creating if needed) the database `name`.
    pub async fn connect(name: &str) -> Result<IdbStore, StoreError> {
        let (lost, on_lost) = (Rc::new(Cell::new(false)), Rc::new(RefCell::new(None)));
        let conn = Self::open_conn(name, &lost, &on_lost).await?;
        let store = IdbStore {
            conn: RefCell::new(conn),
            lost,
            on_lost,
            name: name.to_owned(),
            deltas: Rc::new(Cell::new(0)),
            compacting: Rc::new(Cell::new(false)),
            lazy: Cell::new(false),
            closed_by_app: Cell::new(false),
        };
        Ok(store)
    }

    /// From the next open on, reads no chunk at open: base rows are read
    /// as the engine asks for them (PROTOCOL §7, "The lazy store").
    pub fn open_lazily(&self, lazy: bool) {
        self.lazy.set(lazy);
    }

    /// Calls `f` once the connection is found closed under the library.
    pub fn on_lost(&self, f: Rc<dyn Fn()>) {
        *self.on_lost.borrow_mut() = Some(f);
    }

    /// The open connection, unless it was lost.
    fn db(&self) -> Result<Rc<Database>, StoreError> {
        if self.lost.get() {
            return Err(StoreError::Closed(format!("the connection to {} was closed under the library", self.name)));
        }
        Ok(self.conn.borrow().db.clone())
    }

    /// A failure of a call, as the contract names it: any failure once the
    /// connection is lost is that loss (the transaction died with it).
    fn fail(&self, e: StoreError) -> StoreError {
        match e {
            _ if self.closed_by_app.get() => StoreError::ClosedByApp,
            StoreError::TxnFailed(m) | StoreError::Corrupt(m) if self.lost.get() => StoreError::Closed(m),
            StoreError::Closed(m) => {
                self.lose();
                StoreError::Closed(m)
            }
            other => other,
        }
    }

    /// [`IdbStore::fail`] once the browser has had its moment. It aborts the
    /// transactions under way (the site's data cleared) with an `AbortError`
    /// that names no closing, or an `UnknownError`, and dispatches the connection's `close` event
    /// some tasks later — later still on a busy machine: read at once, an
    /// edit under way would be `storage_failed` instead of healed by the
    /// reconnection. An abort that is no closing is told a quarter of a
    /// second late, which a failing transaction can afford.
    async fn failed(&self, e: StoreError) -> StoreError {
        if matches!(&e, StoreError::TxnFailed(m) if m.contains("AbortError") || m.contains("aborted")) {
            for _ in 0..25 {
                if self.lost.get() || self.closed_by_app.get() {
                    break;
                }
                gloo_timers::future::TimeoutFuture::new(10).await;
            }
        }
        self.fail(e)
    }

    /// Marks the connection lost and tells the context (once per loss).
    fn lose(&self) {
        lose(&self.lost, &self.on_lost);
    }

    async fn open_conn(name: &str, lost: &Rc<Cell<bool>>, on_lost: &OnLost) -> Result<Conn, StoreError> {
        let factory = Factory::new().map_err(|e| StoreError::Unavailable(e.said()))?;
        let mut req = factory.open(name, Some(VERSION)).map_err(|e| StoreError::Unavailable(e.said()))?;
        req.on_upgrade_needed(|event| {
            let Ok(db) = event.database() else { return };
            let has = |s: &str| db.store_names().iter().any(|n| n == s);
            if has(LEGACY_BASE) && !has(DELTA) {
                // Version 1's per-row base records are deltas already: same key, same value.
                if let Some(tx) = event.target().ok().and_then(|r| r.transaction()) {
                    if let Ok(s) = tx.object_store(LEGACY_BASE) {
                        s.set_name(DELTA);
                    }
                }
            }
            for s in ALL {
                if !has(s) {
                    let mut params = ObjectStoreParams::new();
                    if s == BATCHES {
                        params.auto_increment(true);
                    }
                    let _ = db.create_object_store(s, params);
                }
            }
        });
        let db = req.await.map_err(|e| {
            let text = e.said();
            if text.contains("VersionError") {
                StoreError::Unavailable(format!(
                    "a newer version of this app changed the database {name} on this device; reload the page ({text})"
                ))
            } else {
                StoreError::Unavailable(text)
            }
        })?;
        let raw: web_sys::IdbDatabase = JsValue::from(db).unchecked_into();
        let db = Database::from(raw.clone());
        let names = db.store_names();
        if names.iter().any(|n| n == LEGACY_BASE) || !ALL.iter().all(|s| names.iter().any(|n| n == s)) {
            db.close();
            return Err(StoreError::Unavailable(format!("database {name} did not upgrade to layout {VERSION}")));
        }
        // `close`: the browser closed the connection (the site's data
        // cleared, storage evicted). `versionchange`: another context wants
        // to delete or upgrade the database — let it, and open again after.
        let (lost2, on_lost2, conn) = (lost.clone(), on_lost.clone(), raw.clone());
        let handler = Closure::<dyn FnMut(web_sys::Event)>::new(move |ev: web_sys::Event| {
            if ev.type_() == "versionchange" {
                conn.close();
            }
            lose(&lost2, &on_lost2);
        });
        raw.set_onclose(Some(handler.as_ref().unchecked_ref()));
        raw.set_onversionchange(Some(handler.as_ref().unchecked_ref()));
        Ok(Conn { db: Rc::new(db), raw, _handler: handler })
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the connection as the browser does before its `close` event
    /// is dispatched: the library has not heard of it yet (tests).
    #[cfg(feature = "testing")]
    pub fn close_unheard(&self) {
        self.conn.borrow().raw.close();
    }

    /// Deletes a whole database (tests, "sign out and wipe").
    pub async fn delete(name: &str) -> Result<(), StoreError> {
        let factory = Factory::new().map_err(|e| StoreError::Unavailable(e.said()))?;
        factory.delete(name).map_err(failed)?.await.map_err(failed)
    }

    /// Folds every base delta into the base chunks now, in one transaction
    /// (other tabs' commits wait for it or go first). Returns how many deltas
    /// were folded.
    pub async fn compact(&self) -> Result<usize, StoreError> {
        let db = self.db()?;
        let n = compact_db(&db).await.map_err(|e| self.fail(e))?;
        self.deltas.set(self.deltas.get().saturating_sub(n));
        Ok(n)
    }

    /// How many base chunks and base delta records (per-row deltas of
    /// layout 2 and batches) are stored (tests, diagnostics).
    pub async fn layout(&self) -> Result<(u32, u32), StoreError> {
        let tx = self.db()?.transaction(&[CHUNKS, DELTA, BATCHES], TransactionMode::ReadOnly).map_err(failed)?;
        let chunks = tx.object_store(CHUNKS).map_err(failed)?.count(None).map_err(failed)?;
        let deltas = tx.object_store(DELTA).map_err(failed)?.count(None).map_err(failed)?;
        let batches = tx.object_store(BATCHES).map_err(failed)?.count(None).map_err(failed)?;
        let counts = (chunks.await.map_err(failed)?, deltas.await.map_err(failed)? + batches.await.map_err(failed)?);
        tx.await.map_err(failed)?;
        Ok(counts)
    }

    /// Whether enough base deltas were counted to make compaction worth it.
    pub fn needs_compaction(&self) -> bool {
        self.deltas.get() > COMPACT_AFTER
    }

    /// Starts a compaction in the background when one is due and none runs.
    /// Never awaited by a caller: a failed one is tried again after a later commit.
    fn compact_soon(&self) {
        if !self.needs_compaction() || self.compacting.get() {
            return;
        }
        self.compacting.set(true);
        let Ok(db) = self.db() else { return };
        let (deltas, compacting) = (self.deltas.clone(), self.compacting.clone());
        wasm_bindgen_futures::spawn_local(async move {
            if let Ok(n) = compact_db(&db).await {
                deltas.set(deltas.get().saturating_sub(n));
            }
            compacting.set(false);
        });
    }

    async fn read_meta(store: &idb::ObjectStore) -> Result<Option<Meta>, StoreError> {
        let v = store.get(Query::Key(JsValue::from_str(META_RECORD))).map_err(failed)?.await.map_err(failed)?;
        v.map(|v| parse::<Meta>(&v)).transpose()
    }

    /// A read-write transaction that completes only once flushed to disk
    /// (`durability: "strict"`; browsers without the option ignore it).
    fn durable_transaction(&self, stores: &[&str]) -> Result<idb::Transaction, StoreError> {
        // `transaction(names, mode, options)` through the JS object: web-sys
        // marks the options dictionary unstable.
        let names: Array = stores.iter().map(|s| JsValue::from_str(s)).collect();
        let options = js_sys::Object::new();
        js_sys::Reflect::set(&options, &"durability".into(), &"strict".into()).map_err(failed)?;
        let raw = self.conn.borrow().raw.clone();
        let open: js_sys::Function = js_sys::Reflect::get(&raw, &"transaction".into())
            .and_then(|f| f.dyn_into().map_err(|_| JsValue::from_str("IDBDatabase.transaction is not a function")))
            .map_err(failed)?;
        let tx = open.call3(&raw, &names, &"readwrite".into(), &options).map_err(|e| failed(NotStarted(e)))?;
        Ok(idb::Transaction::from(tx.unchecked_into::<web_sys::IdbTransaction>()))
    }

    /// Writes a step's puts and deletes into an open transaction.
    /// `stored`: the meta record this transaction already read, if it did.
    /// `recording`: the step records ops whose `at`s are above every `at`
    /// taken (checked in this transaction), so they may go as runs.
    async fn write(tx: &idb::Transaction, txn: &Txn, stored: Option<&Meta>, recording: bool) -> Result<(), StoreError> {
        let names = tx.store_names();
        let store = |n: &str| -> Result<idb::ObjectStore, StoreError> {
            if !names.iter().any(|x| x == n) {
                return Err(failed(format!("transaction does not cover {n}")));
            }
            tx.object_store(n).map_err(failed)
        };
        if let Some(m) = txn.meta_written() {
            // Joined with the stored record, never over it: another context
            // may have reserved numbers or taken `at`s this one has not heard of.
            let outbox = store(PENDING)?;
            let stored = match stored {
                Some(s) => Some(s.clone()),
                None => Self::read_meta(&outbox).await?,
            };
            let joined = stored.map_or_else(|| m.clone(), |stored| m.join(&stored));
            outbox.put(&json(&joined)?, Some(&JsValue::from_str(META_RECORD))).map_err(failed)?;
        }
        if let Some(sync) = &txn.sync {
            store(META)?.put(&json(sync)?, Some(&JsValue::from_str(SYNC))).map_err(failed)?;
        }
        if let Some(schema) = &txn.schema {
            store(META)?.put(&json(schema)?, Some(&JsValue::from_str(SCHEMA))).map_err(failed)?;
        }
        if let Some(following) = &txn.following {
            store(META)?.put(&json(following)?, Some(&JsValue::from_str(FOLLOWING))).map_err(failed)?;
        }
        if !txn.put_base.is_empty() {
            // One record for all the step's base rows: one put, not one per row.
            let bytes = encode_snapshot(&txn.put_base)?;
            store(BATCHES)?.put(&Uint8Array::from(bytes.as_slice()).into(), None).map_err(failed)?;
        }
        if !txn.delete_pending.is_empty() || !txn.put_pending.is_empty() {
            let s = store(PENDING)?;
            runs::delete(&s, &txn.delete_pending).await?;
            runs::put(&s, &txn.put_pending, recording)?;
        }
        if Self::notices(txn) {
            let s = store(REJECTIONS)?;
            for id in &txn.delete_rejections {
                s.delete(Query::Key(JsValue::from_str(id.as_str()))).map_err(failed)?;
            }
            for r in &txn.put_rejections {
                s.put(&json(r)?, Some(&JsValue::from_str(r.op.op_id.as_str()))).map_err(failed)?;
            }
            for id in &txn.delete_conflicts {
                s.delete(Query::Key(JsValue::from_str(id))).map_err(failed)?;
            }
            for c in &txn.put_conflicts {
                s.put(&json(c)?, Some(&JsValue::from_str(&c.id))).map_err(failed)?;
            }
        }
        Ok(())
    }

    /// Whether a step writes refusals or conflicts.
    fn notices(txn: &Txn) -> bool {
        !(txn.delete_rejections.is_empty()
            && txn.put_rejections.is_empty()
            && txn.delete_conflicts.is_empty()
            && txn.put_conflicts.is_empty())
    }

    fn stores_of(txn: &Txn) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = entries::stores(txn).to_vec();
        if (txn.sync.is_some() || txn.following.is_some()) && !v.contains(&META) {
            v.push(META);
        }
        if txn.meta.is_some() || !txn.delete_pending.is_empty() || !txn.put_pending.is_empty() {
            v.push(PENDING);
        }
        if Self::notices(txn) {
            v.push(REJECTIONS);
        }
        v
    }

    /// Commits a step and then aborts it on purpose: for tests of atomicity.
    pub async fn commit_then_abort(&self, txn: &Txn) -> Result<(), StoreError> {
        let stores = Self::stores_of(txn);
        let tx = self.db()?.transaction(&stores, TransactionMode::ReadWrite).map_err(failed)?;
        let plan = entries::plan(&tx, txn).await?;
        Self::write(&tx, txn, None, false).await?;
        entries::write(&tx, txn, plan).await?;
        tx.abort().map_err(failed)?;
        Ok(())
    }
}

/// Waits for a transaction to end; an aborted one fails in the words of its
/// error (a `QuotaExceededError` is [`StoreError::Full`]), which the
/// wrapper's future does not keep.
async fn finish(tx: idb::Transaction, what: &str) -> Result<(), StoreError> {
    let raw: web_sys::IdbTransaction = tx.into();
    match idb::Transaction::from(raw.clone()).await.map_err(failed)? {
        TransactionResult::Committed => Ok(()),
        TransactionResult::Aborted => Err(failed(match raw.error() {
            Some(e) => format!("{what} was aborted: {}: {}", e.name(), e.message()),
            None => format!("{what} was aborted"),
        })),
    }
}

/// Marks a connection lost and tells its context, once per loss.
fn lose(lost: &Cell<bool>, on_lost: &RefCell<Option<Rc<dyn Fn()>>>) {
    if lost.replace(true) {
        return;
    }
    let told = on_lost.borrow().clone();
    if let Some(f) = told {
        f();
    }
}

impl LocalStore for IdbStore {
    async fn open(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        self.open_in(fresh).await.map_err(|e| self.fail(e))
    }

    async fn read_sync(&self) -> Result<Option<crate::sync_state::SyncState>, StoreError> {
        self.read_sync_in().await.map_err(|e| self.fail(e))
    }

    async fn update(&self, durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        match self.update_in(durable, plan).await {
            Err(e) => Err(self.failed(e).await),
            ok => ok,
        }
    }

    async fn write_assuming(&self, durable: bool, assumed: &Meta, txn: &Txn) -> Result<bool, StoreError> {
        match self.write_assuming_in(durable, assumed, txn).await {
            Err(e) => Err(self.failed(e).await),
            ok => ok,
        }
    }

    fn close(&self) {
        // Closed by its owner: no loss to tell of.
        self.closed_by_app.set(true);
        self.on_lost.borrow_mut().take();
        self.conn.borrow().db.close();
    }

    async fn commit(&self, txn: &Txn) -> Result<(), StoreError> {
        match self.commit_in(txn).await {
            Err(e) => Err(self.failed(e).await),
            ok => ok,
        }
    }

    async fn read_base(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        self.read_base_in(wants).await.map_err(|e| self.fail(e))
    }

    async fn read_entries(&self, range: &crate::index_def::EntryRange) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.read_entries_with_rows(range).await?.0)
    }

    async fn read_entries_with_rows(&self, range: &crate::index_def::EntryRange) -> Result<(Vec<Vec<u8>>, Vec<Provided>), StoreError> {
        let db = self.db()?;
        entries::read(&db, range).await.map_err(|e| self.fail(e))
    }

    async fn compact(&self) -> Result<(), StoreError> {
        IdbStore::compact(self).await.map(|_| ())
    }

    /// A new connection to the database (a cleared one is created again,
    /// empty, at this layout).
    async fn reconnect(&self) -> Result<(), StoreError> {
        if !self.lost.get() {
            return Ok(());
        }
        let conn = Self::open_conn(&self.name, &self.lost, &self.on_lost).await?;
        let old = std::mem::replace(&mut *self.conn.borrow_mut(), conn);
        old.raw.set_onclose(None);
        old.raw.set_onversionchange(None);
        old.db.close();
        self.deltas.set(0);
        self.lost.set(false);
        Ok(())
    }
}

impl IdbStore {
    async fn open_in(&self, fresh: Meta) -> Result<Snapshot, StoreError> {
        let tx = self.db()?.transaction(&ALL, TransactionMode::ReadWrite).map_err(failed)?;
        let meta_store = tx.object_store(META).map_err(failed)?;
        let pending_store = tx.object_store(PENDING).map_err(failed)?;
        let meta = match Self::read_meta(&pending_store).await? {
            Some(m) => m,
            None => {
                // Layout 7 and before kept the record in `meta`: moved here,
                // once, in the transaction every open of this layout runs first.
                let m = match Self::read_meta(&meta_store).await? {
                    Some(m) => {
                        meta_store.delete(Query::Key(JsValue::from_str(META_RECORD))).map_err(failed)?;
                        m
                    }
                    None => fresh,
                };
                pending_store.put(&json(&m)?, Some(&JsValue::from_str(META_RECORD))).map_err(failed)?;
                m
            }
        };
        let lazy = self.lazy.get();
        let get_all = |name: &str| -> Result<_, StoreError> { tx.object_store(name).map_err(failed)?.get_all(None, None).map_err(failed) };
        // Lazily: no chunk is read; one key says whether there is any (a
        // count would walk every record).
        let chunks_req = if lazy { None } else { Some(get_all(CHUNKS)?) };
        let first_key_req =
            if lazy { Some(tx.object_store(CHUNKS).map_err(failed)?.get_all_keys(None, Some(1)).map_err(failed)?) } else { None };
        let (delta_req, batches_req) = (get_all(DELTA)?, get_all(BATCHES)?);
        let pending_req = pending_store.get_all(Some(Query::KeyRange(ops_only()?)), None).map_err(failed)?;
        let rej_req = get_all(REJECTIONS)?;
        // Last: the idb crate hears a request's success only once it is awaited,
        // and requests complete in the order they were made — so they are
        // awaited in that order.
        let sync_req = meta_store.get(Query::Key(JsValue::from_str(SYNC))).map_err(failed)?;
        let schema_req = meta_store.get(Query::Key(JsValue::from_str(SCHEMA))).map_err(failed)?;
        let following_req = meta_store.get(Query::Key(JsValue::from_str(FOLLOWING))).map_err(failed)?;
        let entries_for_req = meta_store.get(Query::Key(JsValue::from_str(entries::ENTRIES_FOR))).map_err(failed)?;
        let chunks_v = match chunks_req {
            Some(r) => r.await.map_err(failed)?,
            None => Vec::new(),
        };
        let chunk_held = match first_key_req {
            Some(r) => !r.await.map_err(failed)?.is_empty(),
            None => false,
        };
        let delta_v = delta_req.await.map_err(failed)?;
        let batches_v = batches_req.await.map_err(failed)?;
        let pending_v = pending_req.await.map_err(failed)?;
        let rej_v = rej_req.await.map_err(failed)?;
        let sync_v = sync_req.await.map_err(failed)?;
        let schema_v = schema_req.await.map_err(failed)?;
        let following_v = following_req.await.map_err(failed)?;
        let entries_for_v = entries_for_req.await.map_err(failed)?;
        let pending = runs::read(&pending_v)?;
        // The rows of queued ops: the engine builds their visible rows at open.
        let provided = if lazy {
            let mut places: Vec<RowKey> = Vec::new();
            for op in &pending {
                let place = op.place();
                if let Err(at) = places.binary_search(&place) {
                    places.insert(at, place);
                }
            }
            let wants: Vec<Want> = places.iter().map(Want::row).collect();
            read_spans(&tx.object_store(CHUNKS).map_err(failed)?, &wants).await?
        } else {
            Vec::new()
        };
        finish(tx, "open").await?;
        // Chunks go to the replica as stored (it keeps them packed); only
        // the first encoding's text is decoded here.
        let (mut base_chunks, mut rows) = (Vec::with_capacity(chunks_v.len()), Vec::new());
        for v in &chunks_v {
            match v.dyn_ref::<Uint8Array>() {
                Some(bytes) => base_chunks.push(bytes.to_vec()),
                None => rows.extend(chunk_rows(v)?),
            }
        }
        let deltas = deltas_in_order(&delta_v, &batches_v)?;
        let counted = deltas.len();
        rows.extend(deltas);
        let (mut rejections, mut conflicts) = (Vec::new(), Vec::new());
        for v in &rej_v {
            // A record of this store is a refusal (it has an `op`) or a
            // conflict (it has none): tried in that order, without serde's
            // untagged enums (they weigh kilobytes of wasm).
            match parse::<Rejection>(v) {
                Ok(r) => rejections.push(r),
                Err(refusal) => conflicts.push(parse::<crate::conflict::Conflict>(v).map_err(|_| refusal)?),
            }
        }
        self.deltas.set(counted);
        self.compact_soon();
        // An unreadable sync state is not worth losing the database over: the
        // outbox is what matters, and attempts are counted again from zero.
        let sync = sync_v.and_then(|v| parse(&v).ok());
        // An unreadable schema is fetched again at the next pull.
        let schema = schema_v.and_then(|v| parse(&v).ok());
        // The followed spaces must read: without them a left space's rows
        // could not be told from the rest.
        let following = following_v.map(|v| parse(&v)).transpose()?;
        Ok(Snapshot {
            meta: Some(meta),
            base_chunks,
            base: rows,
            pending,
            rejections,
            conflicts,
            sync,
            schema,
            following,
            lazy,
            provided,
            more_on_disk: chunk_held,
            entries_for: entries::read_for(entries_for_v)?,
        })
    }

    async fn read_base_in(&self, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
        let tx = self.db()?.transaction(&[CHUNKS], TransactionMode::ReadOnly).map_err(failed)?;
        let out = read_spans(&tx.object_store(CHUNKS).map_err(failed)?, wants).await?;
        // Every read succeeded: what they returned stands however the read-only
        // transaction ends, and it ends by itself (waiting for it: a round trip more).
        drop(tx);
        Ok(out)
    }

    async fn read_sync_in(&self) -> Result<Option<crate::sync_state::SyncState>, StoreError> {
        let tx = self.db()?.transaction(&[META], TransactionMode::ReadOnly).map_err(failed)?;
        let v = tx.object_store(META).map_err(failed)?.get(Query::Key(JsValue::from_str(SYNC))).map_err(failed)?.await.map_err(failed)?;
        drop(tx);
        Ok(v.and_then(|v| parse(&v).ok()))
    }

    /// Meta and pending in one transaction; a durable one asks for strict
    /// durability: it completes only once the browser has flushed it to disk
    /// (Chromium's default, "relaxed", completes before that), so a
    /// recorded edit survives a power cut. A plan of nothing aborts it.
    async fn update_in(&self, durable: bool, plan: &mut dyn FnMut(&Meta) -> Option<Txn>) -> Result<bool, StoreError> {
        let tx = self.transaction_over(&[META, PENDING], durable)?;
        let outbox = tx.object_store(PENDING).map_err(failed)?;
        let last = ask_last_queued(&outbox)?;
        let stored = Self::read_meta(&outbox).await?.ok_or_else(|| corrupt("no meta record"))?;
        let stored = stored.with_queued(last.await?);
        let Some(txn) = plan(&stored) else {
            let _ = tx.abort();
            return Ok(false);
        };
        Self::write(&tx, &txn, Some(&stored), true).await?;
        finish(tx, "the transaction").await.map(|()| true)
    }

    /// A read-write transaction over `stores`, durable or not.
    fn transaction_over(&self, stores: &[&str], durable: bool) -> Result<idb::Transaction, StoreError> {
        if durable {
            self.db()?;
            self.durable_transaction(stores)
        } else {
            self.db()?.transaction(stores, TransactionMode::ReadWrite).map_err(failed)
        }
    }

    /// The writes queued behind one read, in one transaction over the
    /// outbox alone: the first record above the last `at` assumed. Its key
    /// says what it is: a number, an op queued since (the plan is stale); the
    /// string `"meta"`, which IndexedDB orders above every number, the meta
    /// record itself, nothing queued since. Requests run in the order they
    /// were made, so the read sees the store as it was before this
    /// transaction's puts; and the transaction cannot commit before the
    /// read's answer has been heard (the puts behind it are still pending,
    /// and the answer is heard in a microtask of its success event), so the
    /// abort always comes first.
    async fn write_assuming_in(&self, durable: bool, assumed: &Meta, txn: &Txn) -> Result<bool, StoreError> {
        if txn.touches_more_than_meta_and_pending() || !txn.delete_pending.is_empty() {
            // Not a recording: not written here (the caller plans it again, read first).
            return Ok(false);
        }
        let tx = self.transaction_over(&[PENDING], durable)?;
        let above = KeyRange::lower_bound(&JsValue::from_f64(assumed.clock.last_at as f64), Some(true)).map_err(failed)?;
        // Listened to from now: its answer is heard whenever it is awaited.
        let first = tx.object_store(PENDING).map_err(failed)?.open_cursor(Some(Query::KeyRange(above)), None).map_err(failed)?;
        let first = std::future::IntoFuture::into_future(first);
        let checked = async {
            Self::write(&tx, txn, Some(assumed), true).await?;
            let Some(cursor) = first.await.map_err(failed)? else { return Ok(false) };
            if cursor.key().map_err(failed)?.as_string().as_deref() != Some(META_RECORD) {
                return Ok(false);
            }
            let stored = parse::<Meta>(&cursor.value().map_err(failed)?)?;
            Ok::<_, StoreError>(assumed.covers(&stored))
        }
        .await;
        match checked {
            Ok(true) => finish(tx, "the transaction").await.map(|()| true),
            other => {
                // Nothing of it may commit: not the plan of a stale record, nor half a write.
                let _ = tx.abort();
                other
            }
        }
    }

    async fn commit_in(&self, txn: &Txn) -> Result<(), StoreError> {
        let stores = Self::stores_of(txn);
        if stores.is_empty() {
            return Ok(());
        }
        let tx = self.db()?.transaction(&stores, TransactionMode::ReadWrite).map_err(failed)?;
        // The old rows are read before the step's batch goes in.
        let plan = entries::plan(&tx, txn).await?;
        Self::write(&tx, txn, None, false).await?;
        entries::write(&tx, txn, plan).await?;
        finish(tx, "the transaction").await?;
        if !txn.put_base.is_empty() {
            self.deltas.set(self.deltas.get() + txn.put_base.len());
            self.compact_soon();
        }
        Ok(())
    }
}
