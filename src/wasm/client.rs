//! The browser client: the engine over IndexedDB and a transport.
//!
//! It only moves data between the engine and the edges: it records edits in
//! one IndexedDB transaction each, runs sync cycles step by step, commits each
//! step's [`Txn`], retries with the engine's backoff, and tells listeners
//! (and other tabs, over `BroadcastChannel`) what changed. No rule of the
//! protocol is written here.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::attempt::{Failure, Recovery};
use crate::engine::{Config, Engine, EngineError, Step, SyncReport};
use crate::ids::{device_id_from, BLOCK};
use crate::protocol::{CreateSpace, Fields, Member, MembersList, OpId, SetMember};
use crate::space::{Membership, Role};
use crate::store::{LocalStore, Meta, StoreError, Txn};

use super::idb_store::IdbStore;
use super::transport::Transport;

/// The handler of the database's BroadcastChannel, kept alive with the client.
type MessageHandler = Closure<dyn FnMut(web_sys::MessageEvent)>;

/// Errors of the client, each with a stable code for JS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Bad input; nothing changed.
    #[error("{0}")]
    BadInput(String),
    /// IndexedDB cannot be opened (e.g. some private modes).
    #[error("{0}")]
    StorageUnavailable(String),
    /// An IndexedDB transaction failed; nothing of it was written.
    #[error("{0}")]
    StorageFailed(String),
    /// Sync cannot go on without the user.
    #[error("{message}")]
    RecoveryRequired {
        /// The recovery's code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The database was closed.
    #[error("the database is closed")]
    Closed,
    /// Too many `newRowId()` calls without a pause; try again after an await.
    #[error("no reserved row id left; await something and retry")]
    IdsExhausted,
    /// The device's clock has no later `at` left; the edit was not recorded.
    #[error("{0}")]
    ClockExhausted(String),
    /// The server's schema, as the device knows it, refuses the edit; nothing
    /// was recorded. The reason is the server's, word for word.
    #[error("{}", .0.reason)]
    Invalid(crate::schema::Refusal),
    /// The user may not write in the edit's space, by what the device last
    /// learned; nothing was recorded. Code and reason are the judge's
    /// (`read_only` for a viewer, `forbidden` for a space the user left).
    #[error("{}", .0.reason)]
    Denied(crate::space::Denied),
    /// A membership call was refused by the server (its code: `forbidden`,
    /// `conflict`, `bad_request`, `not_found`), or got no answer (`network`).
    #[error("{}", .0.message)]
    Refused(super::transport::CallError),
    /// The database belongs to another user than the one named at open.
    #[error("{0}")]
    WrongUser(String),
}

impl ClientError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::BadInput(_) => "bad_input",
            ClientError::StorageUnavailable(_) => "storage_unavailable",
            ClientError::StorageFailed(_) => "storage_failed",
            ClientError::RecoveryRequired { .. } => "recovery_required",
            ClientError::Closed => "closed",
            ClientError::IdsExhausted => "ids_exhausted",
            ClientError::ClockExhausted(_) => "clock_exhausted",
            ClientError::Invalid(_) => "invalid",
            ClientError::Denied(d) => d.code,
            ClientError::Refused(_) => "refused",
            ClientError::WrongUser(_) => "wrong_user",
        }
    }
}

impl From<StoreError> for ClientError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => ClientError::StorageUnavailable(m),
            other => ClientError::StorageFailed(other.to_string()),
        }
    }
}

impl From<EngineError> for ClientError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::IdsExhausted => ClientError::IdsExhausted,
            EngineError::ClockExhausted => ClientError::ClockExhausted(e.to_string()),
            EngineError::Denied(d) => ClientError::Denied(d),
            e @ EngineError::WrongUser { .. } => ClientError::WrongUser(e.to_string()),
            other => ClientError::BadInput(other.to_string()),
        }
    }
}

/// One edit of [`Client::change_many`]: `fields` on `table/row_id`, in
/// `space` (`None`: where the row lives, or the personal space).
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The space named, if any.
    pub space: Option<String>,
    /// The table.
    pub table: String,
    /// The row.
    pub row_id: String,
    /// The fields set.
    pub fields: Fields,
}

/// How a sync call ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOutcome {
    /// What the cycle did.
    #[serde(flatten)]
    pub report: SyncReport,
    /// Whether the cycle reached the end (pushed all, pulled to the head).
    pub ok: bool,
    /// When a retry is scheduled, if the cycle stopped on a failure.
    pub retry_at: Option<u64>,
    /// The failure, if any.
    pub error: Option<String>,
}

/// Milliseconds since the epoch, from the JS clock.
pub fn now() -> u64 {
    js_sys::Date::now() as u64
}

/// 64 random bits from `crypto.getRandomValues`, or `Math.random` where absent.
pub fn entropy() -> u64 {
    let mut b = [0u8; 8];
    if fill_random(&mut b) {
        return u64::from_le_bytes(b);
    }
    ((js_sys::Math::random() * 4294967296.0) as u64) << 32 | (js_sys::Math::random() * 4294967296.0) as u64
}

fn fill_random(buf: &mut [u8]) -> bool {
    let Ok(crypto) = Reflect::get(&js_sys::global(), &"crypto".into()) else {
        return false;
    };
    let Ok(crypto) = crypto.dyn_into::<web_sys::Crypto>() else {
        return false;
    };
    crypto.get_random_values_with_u8_array(buf).is_ok()
}

#[wasm_bindgen(inline_js = r#"
export function with_lock(name, if_available, f) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (!locks) return f();
  return if_available ? locks.request(name, { ifAvailable: true }, (lock) => (lock ? f() : null)) : locks.request(name, () => f());
}
export function register_background_sync(tag) {
  try {
    const sw = globalThis.navigator && globalThis.navigator.serviceWorker;
    if (!sw || typeof globalThis.document === 'undefined' || !sw.controller) return;
    sw.ready.then((r) => r.sync && r.sync.register(tag)).catch(() => {});
  } catch (_) { /* no Background Sync here: the page retries on its own */ }
}
"#)]
extern "C" {
    /// Runs `f` (returning a promise) under the Web Lock `name`, where Web
    /// Locks exist; with `if_available`, only if no one holds it (else not at all).
    fn with_lock(name: &str, if_available: bool, f: &Closure<dyn FnMut() -> js_sys::Promise>) -> js_sys::Promise;
    /// From a page controlled by a Service Worker: asks for a Background Sync with `tag`.
    fn register_background_sync(tag: &str);
}

/// Whether a page knows it is offline (`navigator.onLine === false`). Only
/// pages skip their attempts: they hear `online` and try again at once. A
/// worker's view of `onLine` can lag behind the network coming back, and a
/// Background Sync event only fires when the browser is online anyway.
fn offline() -> bool {
    let global = js_sys::global();
    if Reflect::get(&global, &"document".into()).map_or(true, |d| d.is_undefined()) {
        return false;
    }
    Reflect::get(&global, &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"onLine".into()))
        .map(|v| v == JsValue::FALSE)
        .unwrap_or(false)
}

/// What a context does while it holds the database's cycle lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// A sync cycle.
    Cycle,
    /// A person's check with the server: never pushes.
    Reconcile,
    /// At open, with no cycle running anywhere: an attempt recorded in flight is orphaned.
    SettleOrphan,
}

/// A listener for "rows changed".
pub type Listener = Rc<dyn Fn()>;

/// The client of one local database.
pub struct Client<T: Transport> {
    /// The engine (never borrowed across an await).
    pub engine: RefCell<Engine>,
    /// The IndexedDB store.
    pub store: IdbStore,
    /// The transport.
    pub transport: T,
    listeners: RefCell<Vec<(u32, Listener)>>,
    next_listener: Cell<u32>,
    syncing: Cell<bool>,
    /// Sync cycles started and finished in this context, and how the last
    /// one ended: a `sync()` asked while one runs is answered by the next
    /// cycle, one for every caller that asked meanwhile.
    cycles: Cell<(u64, u64)>,
    last_cycle: RefCell<Option<Result<SyncOutcome, ClientError>>>,
    /// What listeners last saw of the sync state (statuses): a commit that
    /// moves only counters tells no one.
    seen_sync: RefCell<String>,
    closed: Cell<bool>,
    version: Cell<u64>,
    auto_sync: bool,
    retry_timer: RefCell<Option<gloo_timers::callback::Timeout>>,
    channel: Option<web_sys::BroadcastChannel>,
    _on_message: RefCell<Option<MessageHandler>>,
    reserving: Cell<bool>,
    /// The server has no `/v1/schema` (older) or sent one this library cannot read.
    schema_unsupported: Cell<bool>,
    name: String,
    config: Config,
}

impl<T: Transport + 'static> Client<T> {
    /// Opens (or creates) the local database `name` and loads it.
    /// `resume_exhausted`: lift a stop for exhausted retries (an app's open
    /// does; the Service Worker's does not, so it never resumes sending alone).
    pub async fn open(
        name: &str,
        transport: T,
        mut config: Config,
        auto_sync: bool,
        resume_exhausted: bool,
        user: Option<&str>,
    ) -> Result<Rc<Self>, ClientError> {
        let store = IdbStore::connect(name).await?;
        let mut random = [0u8; 16];
        if !fill_random(&mut random) {
            random[..8].copy_from_slice(&entropy().to_le_bytes());
            random[8..].copy_from_slice(&entropy().to_le_bytes());
        }
        let snapshot = store.open(Meta::fresh(device_id_from(random))).await?;
        config.seed = entropy();
        let mut engine = Engine::open(snapshot, config.clone())?;
        // A database belongs to one user: named here, or learned at the first pull.
        let bound = match user {
            Some(u) => match engine.bind_user(u) {
                Ok(txn) => txn,
                Err(e) => {
                    store.close();
                    return Err(e.into());
                }
            },
            None => None,
        };
        let channel = web_sys::BroadcastChannel::new(&format!("marksync:{name}")).ok();
        let client = Rc::new(Client {
            engine: RefCell::new(engine),
            store,
            transport,
            listeners: RefCell::new(Vec::new()),
            next_listener: Cell::new(1),
            syncing: Cell::new(false),
            cycles: Cell::new((0, 0)),
            last_cycle: RefCell::new(None),
            seen_sync: RefCell::new(String::new()),
            closed: Cell::new(false),
            version: Cell::new(1),
            auto_sync,
            retry_timer: RefCell::new(None),
            channel,
            _on_message: RefCell::new(None),
            reserving: Cell::new(false),
            schema_unsupported: Cell::new(false),
            name: name.to_owned(),
            config,
        });
        *client.seen_sync.borrow_mut() = client.status_part();
        client.store.reserve(&client.engine).await?;
        client.commit_some(bound).await?;
        client.listen_to_other_contexts();
        if resume_exhausted {
            let txn = client.engine.borrow_mut().retry_exhausted();
            client.commit_some(txn).await?;
        }
        // A request left in flight by a context that is gone: unknown outcome,
        // never "queued" — decided only if no cycle runs anywhere now.
        if client.engine.borrow().sync_state().flight.is_some() {
            let _ = client.under_lock(Job::SettleOrphan, true).await;
        }
        Ok(client)
    }

    fn listen_to_other_contexts(self: &Rc<Self>) {
        let Some(ch) = &self.channel else { return };
        let weak: Weak<Self> = Rc::downgrade(self);
        let cb = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let Some(me) = weak.upgrade() else { return };
            let Some(text) = ev.data().as_string() else {
                return;
            };
            if let Ok(txn) = serde_json::from_str::<Txn>(&text) {
                me.engine.borrow_mut().absorb(&txn);
                me.changed(false, Some(&txn));
            }
        });
        ch.set_onmessage(Some(cb.as_ref().unchecked_ref()));
        *self._on_message.borrow_mut() = Some(cb);
    }

    /// Tells other tabs and workers (if `broadcast`) of a committed step, and
    /// listeners — once — if it altered what the app can see: rows, queued
    /// ops, refusals, spaces, the schema, or a status (`txn: None`: the
    /// engine was reopened, anything may have changed). Counters alone are
    /// no change to show.
    fn changed(&self, broadcast: bool, txn: Option<&Txn>) {
        if broadcast {
            if let (Some(ch), Some(txn)) = (&self.channel, txn) {
                if let Ok(s) = serde_json::to_string(txn) {
                    let _ = ch.post_message(&JsValue::from_str(&s));
                }
            }
        }
        let view = txn.is_none_or(Txn::changes_data);
        let status = self.status_part();
        let moved = *self.seen_sync.borrow() != status;
        if !view && !moved {
            return;
        }
        *self.seen_sync.borrow_mut() = status;
        self.version.set(self.version.get() + 1);
        let ls: Vec<Listener> = self.listeners.borrow().iter().map(|(_, l)| l.clone()).collect();
        for l in ls {
            l();
        }
    }

    /// What statuses and `spaces()` read of the sync state and the followed
    /// spaces (not the counters, not the cursors).
    fn status_part(&self) -> String {
        let e = self.engine.borrow();
        let s = e.sync_state();
        let ops: Vec<_> = s.ops.iter().map(|(id, a)| (id, a.attempts, a.unknown)).collect();
        let seen = (ops, s.flight.as_ref().map(|f| &f.op_ids), &s.recovery, s.next_retry_at, e.spaces());
        serde_json::to_string(&seen).unwrap_or_default()
    }

    /// The transport, naming the user the database belongs to (once known)
    /// on what it sends: the server refuses a token of anyone else before
    /// it reads a byte (PROTOCOL §5).
    fn net(&self) -> &T {
        self.transport.set_user(self.engine.borrow().user());
        &self.transport
    }

    /// Grows with every change of visible state (for snapshot caching).
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// Adds a listener; returns its id for [`Client::unsubscribe`].
    pub fn subscribe(&self, l: Listener) -> u32 {
        let id = self.next_listener.get();
        self.next_listener.set(id + 1);
        self.listeners.borrow_mut().push((id, l));
        id
    }

    /// Removes a listener.
    pub fn unsubscribe(&self, id: u32) {
        self.listeners.borrow_mut().retain(|(i, _)| *i != id);
    }

    /// `closed` once the database was closed.
    pub fn check_open(&self) -> Result<(), ClientError> {
        if self.closed.get() {
            Err(ClientError::Closed)
        } else {
            Ok(())
        }
    }

    /// A new rowId. Keeps a block of numbers reserved ahead.
    pub fn new_row_id(self: &Rc<Self>) -> Result<String, ClientError> {
        self.check_open()?;
        let id = self.engine.borrow_mut().new_row_id()?;
        if self.engine.borrow().ids_left() < BLOCK / 2 && !self.reserving.get() {
            self.reserving.set(true);
            let me = self.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let _ = me.store.reserve(&me.engine).await;
                me.reserving.set(false);
            });
        }
        Ok(id)
    }

    /// Records `table/row_id: fields` where the row lives (a new row: in the
    /// personal space); resolves once the op is in IndexedDB. An edit the
    /// known schema refuses is not recorded ([`ClientError::Invalid`]).
    pub async fn change(self: &Rc<Self>, table: &str, row_id: &str, fields: Fields) -> Result<OpId, ClientError> {
        self.change_with(None, table, row_id, fields, true).await
    }

    /// [`Client::change`] in `space` when one is named; without `check`, the
    /// server alone judges the edit (a role refusal on the device still stands).
    pub async fn change_with(
        self: &Rc<Self>,
        space: Option<&str>,
        table: &str,
        row_id: &str,
        fields: Fields,
        check: bool,
    ) -> Result<OpId, ClientError> {
        self.check_open()?;
        let draft = self.engine.borrow().draft_in(space, table, row_id, fields)?;
        if check {
            self.engine.borrow().check_drafts(std::slice::from_ref(&draft)).map_err(|(_, e)| ClientError::Invalid(e))?;
        }
        self.record_one(draft).await
    }

    /// Records many edits in one IndexedDB transaction: all or none. Every
    /// edit is checked before anything is written; resolves with the opIds,
    /// in order.
    pub async fn change_many(self: &Rc<Self>, edits: Vec<Edit>) -> Result<Vec<OpId>, ClientError> {
        self.change_many_with(edits, true).await
    }

    /// [`Client::change_many`]; without `check`, the server alone judges the edits.
    pub async fn change_many_with(self: &Rc<Self>, edits: Vec<Edit>, check: bool) -> Result<Vec<OpId>, ClientError> {
        self.check_open()?;
        let drafts = {
            let engine = self.engine.borrow();
            edits
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    engine.draft_in(e.space.as_deref(), &e.table, &e.row_id, e.fields).map_err(|err| match err {
                        crate::engine::EngineError::Denied(mut d) => {
                            d.reason = format!("edits[{i}]: {}", d.reason);
                            ClientError::Denied(d)
                        }
                        other => ClientError::BadInput(format!("edits[{i}]: {other}")),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        if drafts.is_empty() {
            return Ok(Vec::new());
        }
        if check {
            self.engine.borrow().check_drafts(&drafts).map_err(|(i, mut e)| {
                e.reason = format!("edits[{i}]: {}", e.reason);
                ClientError::Invalid(e)
            })?;
        }
        self.record(drafts).await
    }

    /// Marks a row deleted (`true`) or restores it (`false`), where it
    /// lives (or in `space`).
    pub async fn set_deleted(self: &Rc<Self>, space: Option<&str>, table: &str, row_id: &str, deleted: bool) -> Result<OpId, ClientError> {
        self.check_open()?;
        let draft = self.engine.borrow().draft_deleted(space, table, row_id, deleted)?;
        self.record_one(draft).await
    }

    async fn record_one(self: &Rc<Self>, draft: crate::engine::Draft) -> Result<OpId, ClientError> {
        let mut ids = self.record(vec![draft]).await?;
        ids.pop().ok_or_else(|| ClientError::StorageFailed("no op recorded".into()))
    }

    async fn record(self: &Rc<Self>, drafts: Vec<crate::engine::Draft>) -> Result<Vec<OpId>, ClientError> {
        let ops = self.store.record(&self.engine, drafts, now()).await??;
        let ids = ops.iter().map(|op| op.op_id.clone()).collect();
        let txn = Txn { put_pending: ops, ..Txn::default() };
        self.changed(true, Some(&txn));
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(ids)
    }

    /// Creates a shared space owned by the user (online: membership is the
    /// server's). The device follows it from the next sync, started now.
    pub async fn create_space(self: &Rc<Self>, space: &str) -> Result<Membership, ClientError> {
        self.check_open()?;
        let req = CreateSpace { space: space.to_owned(), owner: None };
        let m = self.net().create_space(&req).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(m)
    }

    /// Gives `user` a role in `space` (`None`: removes them); the caller must
    /// be one of its owners. A sync follows, so a change of one's own role shows.
    pub async fn set_member(self: &Rc<Self>, space: &str, user: &str, role: Option<Role>) -> Result<Member, ClientError> {
        self.check_open()?;
        let req = SetMember { space: space.to_owned(), user: user.to_owned(), role };
        let m = self.net().set_member(&req).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(m)
    }

    /// Who is a member of `space`, with roles (any member may ask).
    pub async fn members(&self, space: &str) -> Result<MembersList, ClientError> {
        self.check_open()?;
        self.net().members(space).await.map_err(ClientError::Refused)
    }

    /// Dismisses a rejection.
    pub async fn dismiss(&self, op_id: &str) -> Result<bool, ClientError> {
        self.check_open()?;
        let txn = self.engine.borrow_mut().dismiss(&OpId::new(op_id));
        let Some(txn) = txn else { return Ok(false) };
        self.store.commit(&txn).await?;
        self.changed(true, Some(&txn));
        Ok(true)
    }

    /// Sets a timer to sync in `ms` (replacing any earlier timer).
    pub fn schedule_sync(self: &Rc<Self>, ms: u64) {
        if self.closed.get() {
            return;
        }
        let weak = Rc::downgrade(self);
        let t = gloo_timers::callback::Timeout::new(ms.min(u32::MAX as u64) as u32, move || {
            if let Some(me) = weak.upgrade() {
                wasm_bindgen_futures::spawn_local(async move {
                    let _ = me.sync().await;
                });
            }
        });
        *self.retry_timer.borrow_mut() = Some(t);
    }

    /// Commits a step's txn; on failure the engine reopens from disk (what
    /// is on disk is always a consistent state: retries are harmless).
    async fn commit(&self, txn: &Txn) -> Result<(), ClientError> {
        if txn.is_empty() {
            return Ok(());
        }
        match self.store.commit(txn).await {
            Ok(()) => {
                self.changed(true, Some(txn));
                Ok(())
            }
            Err(e) => {
                let reopened = self.store.open(Meta::fresh(String::new())).await;
                match reopened.map_err(ClientError::from).and_then(|s| {
                    let config = Config { seed: entropy(), ..self.config.clone() };
                    Engine::open(s, config).map_err(ClientError::from)
                }) {
                    Ok(engine) => {
                        *self.engine.borrow_mut() = engine;
                        self.changed(false, None);
                        Err(e.into())
                    }
                    Err(e2) => {
                        self.engine.borrow_mut().require_recovery(Recovery { code: "storage".into(), message: e2.to_string() });
                        self.changed(false, None);
                        Err(e2)
                    }
                }
            }
        }
    }

    /// Runs one sync cycle: push until the outbox is empty, then pull to the head.
    /// Only one cycle runs at a time in this context; another call waits for it.
    pub async fn sync(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        if offline() {
            // Nothing is sent, so nothing is in doubt: rows stay `pending`. The
            // `online` event (page) or Background Sync (worker) starts the next cycle.
            register_background_sync(&format!("marksync:{}", self.name));
            let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
            return Ok(SyncOutcome { report, ok: false, retry_at: None, error: Some("offline".into()) });
        }
        // Any cycle that starts after this call answers it: callers that ask
        // while one runs share the next one (a burst of edits is one cycle,
        // not one cycle each).
        let want = self.cycles.get().0 + 1;
        loop {
            let (started, finished) = self.cycles.get();
            if finished >= want {
                if let Some(r) = self.last_cycle.borrow().clone() {
                    return r;
                }
            }
            if !self.syncing.get() && started < want {
                break;
            }
            gloo_timers::future::TimeoutFuture::new(10).await;
        }
        self.syncing.set(true);
        self.cycles.set((want, self.cycles.get().1));
        self.retry_timer.borrow_mut().take();
        let r = self.under_lock(Job::Cycle, false).await;
        self.syncing.set(false);
        *self.last_cycle.borrow_mut() = Some(r.clone());
        self.cycles.set((self.cycles.get().0, want));
        r
    }

    /// Asks the server what it remembers of every op sent at least once and
    /// settles what it knows (applied → acknowledged, rejected → dropped with
    /// its reason). Never pushes. Resolves with the report (`reconciled`, `unknown`).
    pub async fn reconcile(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        while self.syncing.get() {
            gloo_timers::future::TimeoutFuture::new(10).await;
        }
        self.syncing.set(true);
        let r = self.under_lock(Job::Reconcile, false).await;
        self.syncing.set(false);
        // An answered check may have lifted a stop: the queue goes out.
        if self.auto_sync && self.engine.borrow().pending_len() > 0 && self.engine.borrow().recovery().is_none() {
            self.schedule_sync(0);
        }
        r
    }

    /// A person confirmed: lift any stop (exhausted retries, a refusal), start
    /// the counts over and sync now.
    pub async fn retry(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        let txn = self.engine.borrow_mut().clear_recovery();
        self.commit_some(txn).await?;
        self.sync().await
    }

    /// One cycle at a time per database across tabs and workers: a job runs
    /// under the Web Lock `marksync:<name>` (where Web Locks exist).
    async fn under_lock(self: &Rc<Self>, job: Job, if_available: bool) -> Result<SyncOutcome, ClientError> {
        let out: Rc<RefCell<Option<Result<SyncOutcome, ClientError>>>> = Rc::new(RefCell::new(None));
        let (me, slot) = (self.clone(), out.clone());
        let f = Closure::<dyn FnMut() -> js_sys::Promise>::new(move || {
            let (me, slot) = (me.clone(), slot.clone());
            wasm_bindgen_futures::future_to_promise(async move {
                let r = me.run_job(job).await;
                *slot.borrow_mut() = Some(r);
                Ok(JsValue::UNDEFINED)
            })
        });
        let p = with_lock(&format!("marksync:{}", self.name), if_available, &f);
        let waited = wasm_bindgen_futures::JsFuture::from(p).await;
        drop(f);
        let r = out.borrow_mut().take();
        match (r, waited) {
            (Some(r), _) => r,
            (None, Err(e)) => Err(ClientError::StorageFailed(format!("sync lock failed: {}", super::transport::js_text(&e)))),
            (None, Ok(_)) => Err(ClientError::Closed),
        }
    }

    /// Runs a job holding the lock: first take the sync state as stored, so
    /// counters and attempts another context moved are built on, not overwritten.
    async fn run_job(self: &Rc<Self>, job: Job) -> Result<SyncOutcome, ClientError> {
        let stored = self.store.read_sync().await?;
        self.engine.borrow_mut().adopt_sync(stored);
        match job {
            Job::Cycle => self.cycle().await,
            Job::Reconcile => self.check_with_server().await,
            Job::SettleOrphan => {
                let txn = self.engine.borrow_mut().settle_orphaned_flight();
                self.commit_some(txn).await?;
                let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
                Ok(SyncOutcome { report, ok: true, retry_at: None, error: None })
            }
        }
    }

    /// The engine's step and txn, or — when it ignored what it was given (an
    /// answer to something no longer in flight) — a fresh start of the cycle.
    fn or_restart(&self, out: Option<(Txn, Step)>, unsaved: &mut Option<Txn>) -> Step {
        let (txn, step) = out.unwrap_or_else(|| {
            let mut e = self.engine.borrow_mut();
            let owed = e.take_txn().unwrap_or_default();
            let (mut txn, step) = e.start_sync(now());
            let mut all = owed;
            all.then(std::mem::take(&mut txn));
            (all, step)
        });
        stash(unsaved, txn);
        step
    }

    /// Commits an answer's txn, if any.
    async fn commit_some(&self, txn: Option<Txn>) -> Result<(), ClientError> {
        match txn {
            Some(txn) => self.commit(&txn).await,
            None => Ok(()),
        }
    }

    /// One sync cycle. Before a push leaves, its attempt is committed (with
    /// the previous answer's txn, in one transaction), so every context and
    /// every reload knows the ops are out. A pull's page is committed while
    /// the next pull is on the wire: a crash before that commit only means
    /// the page is asked for again, which idempotent pulls make harmless.
    /// Still one request in flight at a time.
    async fn cycle(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        let mut unsaved: Option<Txn> = None;
        let first = self.engine.borrow_mut().start_sync(now());
        let mut step = self.or_restart(Some(first), &mut unsaved);
        let mut refreshed = false;
        loop {
            step = match step {
                Step::Push(req) => {
                    let key = req.attempt_key.clone();
                    // The token first: an attempt that cannot leave is never recorded as out.
                    if let Err(f) = self.net().prepare().await {
                        let out = self.engine.borrow_mut().on_push_not_sent(&key, f, now());
                        step = self.or_restart(out, &mut unsaved);
                        continue;
                    }
                    self.commit_some(unsaved.take()).await?;
                    match self.net().push(&req).await {
                        Ok(resp) => {
                            let out = self.engine.borrow_mut().on_push_response(resp, now());
                            self.or_restart(out, &mut unsaved)
                        }
                        Err(Failure::Unauthorized(m)) if !refreshed => {
                            refreshed = true;
                            let out = match self.net().refresh_auth().await {
                                Ok(true) => Some(self.engine.borrow_mut().abandon_attempt(&key, now())),
                                Ok(false) => self.engine.borrow_mut().on_push_failed(&key, Failure::Unauthorized(m), now()),
                                Err(f) => self.engine.borrow_mut().on_push_failed(&key, f, now()),
                            };
                            self.or_restart(out, &mut unsaved)
                        }
                        Err(f) => {
                            let out = self.engine.borrow_mut().on_push_failed(&key, f, now());
                            self.or_restart(out, &mut unsaved)
                        }
                    }
                }
                Step::Reconcile(ids) => {
                    self.commit_some(unsaved.take()).await?;
                    let out = match self.net().verdicts(&ids).await {
                        Ok(resp) => self.engine.borrow_mut().on_verdicts(resp, now()),
                        Err(f) => self.engine.borrow_mut().on_verdicts_failed(f, now()),
                    };
                    self.or_restart(out, &mut unsaved)
                }
                Step::Pull(req) => {
                    let (saved, page) = futures_util::future::join(self.commit_some(unsaved.take()), self.net().pull(&req)).await;
                    saved?;
                    match page {
                        Ok(page) => {
                            let out = self.engine.borrow_mut().on_pull_response(&req, page, now());
                            self.or_restart(out, &mut unsaved)
                        }
                        Err(Failure::Unauthorized(m)) if !refreshed => {
                            refreshed = true;
                            match self.net().refresh_auth().await {
                                Ok(true) => self.or_restart(None, &mut unsaved),
                                Ok(false) => {
                                    let out = self.engine.borrow_mut().on_pull_failed(&req, Failure::Unauthorized(m), now());
                                    self.or_restart(out, &mut unsaved)
                                }
                                Err(f) => {
                                    let out = self.engine.borrow_mut().on_pull_failed(&req, f, now());
                                    self.or_restart(out, &mut unsaved)
                                }
                            }
                        }
                        Err(f) => {
                            let out = self.engine.borrow_mut().on_pull_failed(&req, f, now());
                            self.or_restart(out, &mut unsaved)
                        }
                    }
                }
                Step::Done(report) => {
                    self.commit_some(unsaved.take()).await?;
                    self.refresh_schema().await;
                    return Ok(SyncOutcome { report, ok: true, retry_at: None, error: None });
                }
                Step::Wait { until, report } => {
                    self.commit_some(unsaved.take()).await?;
                    if self.auto_sync {
                        self.schedule_sync(until.saturating_sub(now()));
                    }
                    // Let the Service Worker push when the network is back, even if this page is gone.
                    register_background_sync(&format!("marksync:{}", self.name));
                    let error = {
                        let e = self.engine.borrow();
                        let why = e.recovery().map(|r| r.message.clone()).or_else(|| e.last_failure().map(str::to_owned));
                        why.map_or_else(|| "retrying".to_owned(), |w| format!("{w}; retrying"))
                    };
                    return Ok(SyncOutcome { report, ok: false, retry_at: Some(until), error: Some(error) });
                }
                Step::Blocked(r) => {
                    self.commit_some(unsaved.take()).await?;
                    return Err(ClientError::RecoveryRequired { code: r.code, message: r.message });
                }
            };
        }
    }

    /// Fetches the server's schema when none is known or a pull named another
    /// version, and stores it (every context takes it from the broadcast).
    /// A failure changes nothing: edits are checked by what is known, and
    /// the next cycle asks again — except a server without `/v1/schema`
    /// (an older one), asked once per open.
    async fn refresh_schema(&self) {
        if self.schema_unsupported.get() {
            return;
        }
        let etag = match self.engine.borrow().schema_wanted() {
            None => return,
            Some(etag) => etag.map(str::to_owned),
        };
        match self.net().schema(etag.as_deref()).await {
            Ok(Some((text, etag))) => {
                let learned = self.engine.borrow_mut().learn_schema(text, etag);
                match learned {
                    Some(txn) => {
                        let _ = self.commit_some(Some(txn)).await;
                    }
                    None => self.schema_unsupported.set(true),
                }
            }
            Ok(None) => {}
            Err(Failure::Refused(_)) => self.schema_unsupported.set(true),
            Err(_) => {}
        }
    }

    /// A person's check with the server, under the lock: one question, one commit.
    async fn check_with_server(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        let (txn, step) = self.engine.borrow_mut().start_reconcile();
        self.commit_some(Some(txn)).await?;
        let Step::Reconcile(ids) = step else {
            let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
            return Ok(SyncOutcome { report, ok: true, retry_at: None, error: None });
        };
        let (out, error) = match self.net().verdicts(&ids).await {
            Ok(resp) => (self.engine.borrow_mut().on_verdicts(resp, now()), None),
            Err(f) => (self.engine.borrow_mut().on_verdicts_failed(f.clone(), now()), Some(f.to_string())),
        };
        let Some((txn, step)) = out else {
            return Err(ClientError::StorageFailed("the check with the server was superseded".into()));
        };
        self.commit_some(Some(txn)).await?;
        let report = match step {
            Step::Done(r) => r,
            _ => SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() },
        };
        Ok(SyncOutcome { report, ok: error.is_none(), retry_at: None, error })
    }

    /// The user acted (new token, …): clear recovery (recorded for every
    /// context) and sync.
    pub fn resume(self: &Rc<Self>) {
        let txn = self.engine.borrow_mut().clear_recovery();
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let _ = me.commit_some(txn).await;
            if me.auto_sync {
                me.schedule_sync(0);
            }
        });
    }

    /// Stops timers and closes the database.
    pub fn close(&self) {
        self.closed.set(true);
        self.retry_timer.borrow_mut().take();
        if let Some(ch) = &self.channel {
            ch.set_onmessage(None);
            ch.close();
        }
        self.listeners.borrow_mut().clear();
        self.store.close();
    }

    /// Calls a JS listener function (helper for the bindings).
    pub fn js_listener(f: Function) -> Listener {
        Rc::new(move || {
            let _ = f.call0(&JsValue::NULL);
        })
    }
}

/// Adds `txn` to the steps waiting to be committed (they commit as one).
fn stash(unsaved: &mut Option<Txn>, txn: Txn) {
    if txn.is_empty() {
        return;
    }
    match unsaved {
        Some(u) => u.then(txn),
        None => *unsaved = Some(txn),
    }
}
