//! The driver: the one sync loop of a device context, over its three edges.
//!
//! The [`Engine`] decides; the driver carries its decisions out. It records
//! edits through the store's one read-modify-write, runs sync cycles step by
//! step (committing each step's [`Txn`] before what it announces leaves),
//! retries with the engine's backoff, takes the cycle lock so one context at
//! a time talks to the server, tells the other contexts of every commit and
//! absorbs theirs, and tells listeners what changed. It is generic over
//! [`LocalStore`], [`Transport`] and [`Host`]: the browser runs it over
//! IndexedDB, `fetch` and Web Locks; the simulator runs this same code over
//! memory, a faulty network and a clock of its own. No rule of the protocol
//! is written here: every rule is the engine's.

mod cycle;
pub mod error;
pub mod host;
mod reads;
mod storage;
pub mod transport;
pub mod watch;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

pub use error::{ClientError, Edit, SyncOutcome};
pub use host::{Host, Signal, Task};
pub use transport::{CallError, MemoryTransport, Page, Transport};

use crate::attempt::Recovery;
use crate::engine::{Config, Draft, Engine, EngineError};
use crate::ids::device_id_from;
use crate::protocol::space::{Invitation, MemberChange};
use crate::protocol::{CreateSpace, Fields, MembersList, OpId, SetMember};
use crate::space::{Membership, Role};
use crate::store::{LocalStore, Meta, StoreError, Txn};

/// A recording under way, from the read of its rows to its step: no row
/// is let go meanwhile ([`Driver::trim`]); once it ends, a flush due may run.
struct Recording<'a, S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static>(&'a Driver<S, T, H>);

impl<'a, S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Recording<'a, S, T, H> {
    fn start(driver: &'a Driver<S, T, H>) -> Self {
        driver.recording.set(driver.recording.get() + 1);
        Recording(driver)
    }
}

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Drop for Recording<'_, S, T, H> {
    fn drop(&mut self) {
        self.0.recording.set(self.0.recording.get().saturating_sub(1));
        self.0.flush_soon();
    }
}

/// A listener for "what the app can see changed".
pub type Listener = Rc<dyn Fn()>;

/// A context syncing on its own starts a cycle no sooner than this after
/// the last one it started so (ms), and each such cycle pushes what was
/// queued when it began ([`Engine::start_paced_sync`]): an edit made alone
/// goes out at once, and a loop of `change()`s goes in a push every few
/// milliseconds, not one each (BENCHMARKS.md, "Edits while a push is out").
pub const PUSH_PACE: u64 = 10;

/// Pokes kept while a cycle runs, to be looked at when it ends.
const POKES_HELD: usize = 16;

/// How a context opens its database.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The engine's configuration (its seed is the host's entropy).
    pub config: Config,
    /// Sync on its own: after each edit, on the engine's retry schedule.
    pub auto_sync: bool,
    /// Lift a stop for exhausted retries (an app's open does; the Service
    /// Worker's does not, so it never resumes sending alone).
    pub resume_exhausted: bool,
    /// The user the database belongs to, if the app names them.
    pub user: Option<String>,
}

/// One context of a device (a tab, a worker, a simulated process) over its
/// local database.
pub struct Driver<S: LocalStore, T: Transport, H: Host> {
    /// The engine (never borrowed across an await).
    pub engine: RefCell<Engine>,
    /// The local store.
    pub store: S,
    /// The transport.
    pub transport: T,
    /// The host.
    pub host: H,
    listeners: RefCell<Vec<(u32, Listener)>>,
    watches: watch::Watches,
    next_listener: Cell<u32>,
    /// A job (cycle, check) of this context holds or waits for the lock.
    busy: Cell<bool>,
    /// Rung whenever a job of this context ends.
    idle: Signal,
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
    /// The retry timer set last; an earlier one that fires does nothing.
    timer: Cell<u64>,
    /// When that timer fires (host ms), while it is set and has not fired.
    timer_due: Cell<Option<u64>>,
    /// Pokes heard while this context's cycle ran ([`Driver::poked`]).
    pokes_heard: RefCell<Vec<String>>,
    /// When the last paced cycle began (host ms).
    paced_at: Cell<Option<u64>>,
    /// Someone waits on the next cycle (an app's `sync()`): it is not paced.
    unpaced: Cell<bool>,
    reserving: Cell<bool>,
    /// The server has no `/v1/schema` (older) or sent one this library cannot read.
    schema_unsupported: Cell<bool>,
    config: Config,
    /// The store is being opened again after it was closed under this context.
    recovering: Cell<bool>,
    /// Rung when a recovery of the store ends.
    recovered: Signal,
    /// Times this context filled its database again.
    resets: Cell<u64>,
    /// This driver, for the timers a recovery sets.
    me: Weak<Self>,
    /// Recordings between the read of their rows and their step.
    recording: Cell<u32>,
    /// Other contexts' steps waiting for their rows to be read.
    heard: reads::Heard,
    /// A lift of exhausted retries asked for at open, not yet written: the
    /// next job under the lock writes it first, whichever it is.
    lift_exhausted: Cell<bool>,
    /// Waiting for the cycle lock to see whether another context's request
    /// out outlives its context ([`Driver::watch_flight`]).
    watching_flight: Cell<bool>,
}

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Driver<S, T, H> {
    /// Opens (or creates) the database in `store` and loads it; settles an
    /// attempt left in flight by a context that is gone.
    pub async fn start(store: S, transport: T, host: H, options: Options) -> Result<Rc<Self>, ClientError> {
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&host.entropy().to_le_bytes());
        random[8..].copy_from_slice(&host.entropy().to_le_bytes());
        let snapshot = store.open(Meta::fresh(device_id_from(random))).await?;
        let config = Config { seed: host.entropy(), ..options.config };
        let mut engine = Engine::open(snapshot, config.clone())?;
        // A database belongs to one user: named here, or learned at the first pull.
        let bound = match options.user.as_deref().map(|u| engine.bind_user(u)).transpose() {
            Ok(txn) => txn.flatten(),
            Err(e) => {
                store.close();
                host.close();
                return Err(e.into());
            }
        };
        let driver = Rc::new_cyclic(|me| Driver {
            engine: RefCell::new(engine),
            store,
            transport,
            host,
            listeners: RefCell::new(Vec::new()),
            watches: watch::Watches::default(),
            next_listener: Cell::new(1),
            busy: Cell::new(false),
            idle: Signal::default(),
            cycles: Cell::new((0, 0)),
            last_cycle: RefCell::new(None),
            seen_sync: RefCell::new(String::new()),
            closed: Cell::new(false),
            version: Cell::new(1),
            auto_sync: options.auto_sync,
            timer: Cell::new(0),
            timer_due: Cell::new(None),
            pokes_heard: RefCell::new(Vec::new()),
            paced_at: Cell::new(None),
            unpaced: Cell::new(false),
            reserving: Cell::new(false),
            schema_unsupported: Cell::new(false),
            config,
            recovering: Cell::new(false),
            recovered: Signal::default(),
            resets: Cell::new(0),
            me: me.clone(),
            recording: Cell::new(0),
            heard: reads::Heard::default(),
            lift_exhausted: Cell::new(false),
            watching_flight: Cell::new(false),
        });
        *driver.seen_sync.borrow_mut() = driver.status_part();
        driver.reserve().await?;
        driver.commit_some(bound).await?;
        // The store keeps the entries of this context's indexes (PROTOCOL §7,
        // "Indexes on disk"): built from its rows, once, if it kept others.
        let keep = driver.engine.borrow().entries_to_keep();
        driver.commit_some(keep.map(|f| Txn { entries_for: Some(f), ..Txn::default() })).await?;
        // A request left in flight by a context that is gone: unknown outcome,
        // never "queued" — decided under the lock, at once if no job runs
        // anywhere now. Else once the one running ends: a flight still
        // recorded then is no one's (the job of a context closed a moment
        // ago, or a cycle that settles it first, leaves it so); until then
        // the row says it awaits its answer, and the open does not wait.
        if driver.engine.borrow().sync_state().flight.is_some() {
            let _ = driver.under_lock(cycle::Job::SettleOrphan, true).await;
            if driver.engine.borrow().sync_state().flight.is_some() {
                let me = driver.clone();
                driver.host.spawn(Box::pin(async move {
                    let _ = me.under_lock(cycle::Job::SettleOrphan, false).await;
                }));
            }
        }
        if options.resume_exhausted {
            // Seen at once here; written on the state as stored by the next
            // job under the lock (this one, or a cycle asked for sooner).
            let _ = driver.engine.borrow_mut().retry_exhausted();
            driver.lift_exhausted.set(true);
            let me = driver.clone();
            driver.host.spawn(Box::pin(async move {
                let _ = me.under_lock(cycle::Job::LiftExhausted, false).await;
            }));
        }
        Ok(driver)
    }

    /// Another context committed `txn`: take it in, and tell listeners —
    /// once the rows it reads are held (over a lazy store, after a read).
    pub fn absorb(self: &Rc<Self>, txn: &Txn) {
        if self.closed.get() {
            return;
        }
        if self.hear(txn) {
            self.take_in(txn);
            self.watch_flight();
        }
    }

    /// Another context has a request out (its rows read `awaiting-ack`):
    /// this one waits for the cycle lock, which that context holds until
    /// the answer is in. A flight still recorded when the lock comes is no
    /// one's — its context closed, crashed or was stopped with the request
    /// out — and its ops read `unknown-outcome` in every context at once,
    /// not only once some context runs a cycle (§7: `awaiting-ack` means
    /// some context has the request out).
    fn watch_flight(self: &Rc<Self>) {
        if self.watching_flight.get() || self.busy.get() || self.engine.borrow().sync_state().flight.is_none() {
            return;
        }
        self.watching_flight.set(true);
        let me = self.clone();
        self.host.spawn(Box::pin(async move {
            let _ = me.under_lock(cycle::Job::SettleOrphan, false).await;
            me.watching_flight.set(false);
        }));
    }

    /// Another context told a step this one cannot read (garbled, or of
    /// another version of the library): the step is on disk, so the engine
    /// is built again from it, as when a heard step's rows cannot be read.
    pub fn absorb_unreadable(self: &Rc<Self>) {
        if self.closed.get() {
            return;
        }
        let me = self.clone();
        self.host.spawn(Box::pin(async move {
            let _ = me.reload().await;
        }));
    }

    fn take_in(&self, txn: &Txn) {
        if self.closed.get() {
            return;
        }
        // A step of another copy of the database (one cleared since: each
        // copy filled again is a new device) says nothing true of this one.
        if txn.meta.as_ref().is_some_and(|m| m.device_id != self.engine.borrow().device_id()) {
            return;
        }
        self.engine.borrow_mut().absorb(txn);
        self.changed(false, Some(txn));
    }

    /// Tells other contexts (if `broadcast`) of a committed step, and
    /// listeners — once — if it altered what the app can see: rows, queued
    /// ops, refusals, spaces, the schema, or a status (`txn: None`: the
    /// engine was reopened, anything may have changed). Counters alone are
    /// no change to show.
    fn changed(&self, broadcast: bool, txn: Option<&Txn>) {
        if broadcast {
            if let Some(txn) = txn {
                self.host.broadcast(txn);
            }
        }
        self.refresh_watches();
        self.trim();
        let view = txn.is_none_or(Txn::changes_data);
        // What statuses read moves only in a step that writes the sync state
        // or the followed spaces (the engine hands out every change of them
        // with its next txn), so a recording, the hot path, does not write
        // out every attempted op and every followed space to compare them:
        // its cost follows the edit, not the spaces the device holds.
        let may_move = txn.is_none_or(|t| t.sync.is_some() || t.following.is_some()) || self.engine.borrow().sync_unsaved();
        let moved = may_move && {
            let status = self.status_part();
            let moved = *self.seen_sync.borrow() != status;
            *self.seen_sync.borrow_mut() = status;
            moved
        };
        if !view && !moved {
            return;
        }
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

    /// Adds a listener; returns its id for [`Driver::unsubscribe`].
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
        let id = self.engine.borrow_mut().new_row_id();
        // Ahead of need: half the block left, the next one is reserved (and
        // when none was left, so that a later call finds one).
        if self.engine.borrow().ids_left() < self.config.id_block / 2 && !self.reserving.get() {
            self.reserving.set(true);
            let me = self.clone();
            self.host.spawn(Box::pin(async move {
                let _ = me.reserve().await;
                me.reserving.set(false);
            }));
        }
        Ok(id?)
    }

    /// Reserves a block of numbers for `newRowId`, in a transaction of its own
    /// that read the stored meta (contexts sharing the database never take
    /// the same numbers).
    async fn reserve(&self) -> Result<(), ClientError> {
        if let Some((block, stored)) = self.reserve_with(&|stored| self.engine.borrow().plan_reserve(stored)).await? {
            self.engine.borrow_mut().reserved(block, &stored);
        }
        Ok(())
    }

    /// Writes the reservation `plan` makes of the stored meta; the block
    /// and that meta, for the engine to take.
    async fn reserve_with(
        &self,
        plan: &dyn Fn(&Meta) -> (Txn, crate::ids::IdBlock),
    ) -> Result<Option<(crate::ids::IdBlock, Meta)>, ClientError> {
        let mut planned = None;
        self.store
            .update(false, &mut |stored| {
                let (txn, block) = plan(stored);
                planned = Some((block, stored.clone()));
                Some(txn)
            })
            .await?;
        Ok(planned)
    }

    /// Records `table/row_id: fields` where the row lives (a new row: in the
    /// personal space); resolves once the op is on disk. An edit the known
    /// schema refuses is not recorded ([`ClientError::Invalid`]).
    pub async fn change(self: &Rc<Self>, table: &str, row_id: &str, fields: Fields) -> Result<OpId, ClientError> {
        self.change_with(None, table, row_id, fields, true).await
    }

    /// [`Driver::change`] in `space` when one is named; without `check`, the
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
        let _done = Recording::start(self);
        self.ensure(&|_| vec![Engine::wants_edit(table, row_id)]).await?;
        let draft = self.engine.borrow().draft_in(space, table, row_id, fields)?;
        if check {
            self.engine.borrow().check_drafts(std::slice::from_ref(&draft)).map_err(|(_, e)| ClientError::Invalid(e))?;
        }
        self.record_one(draft).await
    }

    /// Records many edits in one transaction: all or none. Every edit is
    /// checked before anything is written; an edit with no rowId is a new
    /// row, named in that transaction. Resolves with each edit's opId and
    /// rowId, in order.
    pub async fn change_many(self: &Rc<Self>, edits: Vec<Edit>) -> Result<Vec<(OpId, String)>, ClientError> {
        self.change_many_with(edits, true).await
    }

    /// [`Driver::change_many`]; without `check`, the server alone judges the edits.
    pub async fn change_many_with(self: &Rc<Self>, edits: Vec<Edit>, check: bool) -> Result<Vec<(OpId, String)>, ClientError> {
        self.check_open()?;
        let _done = Recording::start(self);
        let named: Vec<(String, String)> = edits.iter().filter_map(|e| Some((e.table.clone(), e.row_id.clone()?))).collect();
        self.ensure(&|_| named.iter().map(|(t, r)| Engine::wants_edit(t, r)).collect()).await?;
        let drafts = {
            let engine = self.engine.borrow();
            edits
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    let draft = match &e.row_id {
                        Some(row_id) => engine.draft_in(e.space.as_deref(), &e.table, row_id, e.fields),
                        None => engine.draft_new(e.space.as_deref(), &e.table, e.fields),
                    };
                    draft.map_err(|err| match err {
                        EngineError::Denied(mut d) => {
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
        let _done = Recording::start(self);
        self.ensure(&|_| vec![Engine::wants_edit(table, row_id)]).await?;
        let draft = self.engine.borrow().draft_deleted(space, table, row_id, deleted)?;
        self.record_one(draft).await
    }

    async fn record_one(self: &Rc<Self>, draft: Draft) -> Result<OpId, ClientError> {
        let mut ids = self.record(vec![draft]).await?;
        ids.pop().map(|(op, _)| op).ok_or_else(|| ClientError::StorageFailed("no op recorded".into()))
    }

    /// Records drafts as ops: the numbers and `at`s are taken from the meta
    /// record and the outbox as stored ([`Meta::with_queued`]), checked in
    /// the same durable transaction that writes the ops, so contexts sharing
    /// the database never reuse either; the
    /// engine learns of the ops only once that transaction committed. An
    /// edit the engine refuses (no `at` left) writes nothing.
    ///
    /// First planned from the record this context knows (the others
    /// broadcast theirs) and written without waiting on the read — one round
    /// trip to the disk instead of two; the store aborts it if another
    /// context moved the record meanwhile, and it is planned again from what
    /// is stored.
    async fn record(self: &Rc<Self>, drafts: Vec<Draft>) -> Result<Vec<(OpId, String)>, ClientError> {
        self.storage_settled().await;
        let now = self.host.now();
        let (mut planned, mut refused) = (None, None);
        let assumed = self.engine.borrow().meta().clone();
        let (txn, rec) = self.engine.borrow_mut().plan_records(drafts.clone(), &assumed, now)?;
        // Any failure here is met again, and told, by the read-first path.
        if matches!(self.store.write_assuming(true, &assumed, &txn).await, Ok(true)) {
            planned = Some(rec);
        }
        let drafts = planned.is_none().then_some(drafts);
        // Twice at most: a database closed under the library — before the
        // edit was planned (the transaction cannot even start) or after
        // (the browser aborted it: nothing of it was written) — is opened
        // again and the edit goes into it.
        for retry in [false, true] {
            if drafts.is_none() {
                break;
            }
            let written = self
                .store
                .update(true, &mut |stored| {
                    let drafts = drafts.clone()?;
                    match self.engine.borrow_mut().plan_records(drafts, stored, now) {
                        Ok((txn, rec)) => {
                            planned = Some(rec);
                            Some(txn)
                        }
                        Err(e) => {
                            refused = Some(e);
                            None
                        }
                    }
                })
                .await;
            match written {
                Ok(_) => break,
                Err(e) if !retry && drafts.is_some() && self.healed(&e).await => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(e) = refused {
            return Err(e.into());
        }
        let rec = planned.ok_or_else(|| ClientError::StorageFailed("the transaction read no meta record".into()))?;
        let ops = rec.ops.clone();
        self.engine.borrow_mut().recorded(rec);
        let ids = ops.iter().map(|op| (op.op_id.clone(), op.row_id.clone())).collect();
        // With the meta record: the other contexts learn the numbers and `at`s taken.
        let meta = Some(self.engine.borrow().meta().clone());
        let txn = Txn { meta, put_pending: ops, ..Txn::default() };
        self.changed(true, Some(&txn));
        if self.auto_sync {
            let next = self.paced_at.get().map_or(0, |t| t.saturating_add(PUSH_PACE).saturating_sub(self.host.now()));
            self.sync_within(next);
        }
        Ok(ids)
    }

    /// Creates a shared space owned by the user (online: membership is the
    /// server's). The device follows it from the next sync, started now.
    pub async fn create_space(self: &Rc<Self>, space: &str) -> Result<Membership, ClientError> {
        self.check_open()?;
        named("space", crate::space::check_shared_space(space))?;
        let req = CreateSpace { space: space.to_owned(), owner: None };
        let m = self.net().create_space(&req).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(m)
    }

    /// Gives `user` a role in `space` (`None`: removes them); the caller must
    /// be one of its owners. A user not in the space yet is invited
    /// (`invited`: they join by accepting). A sync follows, so a change of one's own role shows.
    pub async fn set_member(self: &Rc<Self>, space: &str, user: &str, role: Option<Role>) -> Result<MemberChange, ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        named("user", crate::space::check_user(user))?;
        let req = SetMember { space: space.to_owned(), user: user.to_owned(), role };
        let m = self.net().set_member(&req).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(m)
    }

    /// Who is a member of `space`, with roles (any member may ask): the
    /// page asked for, or (`None`) every member, page after page.
    pub async fn members(&self, space: &str, page: Option<Page>) -> Result<MembersList, ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        let net = self.net();
        let members = listed(page, |p| async move { Ok(net.members(space, p).await?.members) }, |m| &m.user).await?;
        Ok(MembersList { space: space.to_owned(), members })
    }

    /// The user's pending invitations to spaces (nothing of those spaces is
    /// on the device): the page asked for, or (`None`) all of them.
    pub async fn invitations(&self, page: Option<Page>) -> Result<Vec<Invitation>, ClientError> {
        self.check_open()?;
        let net = self.net();
        listed(page, |p| async move { Ok(net.invitations(p).await?.invitations) }, |i| &i.space).await
    }

    /// The pending invitations to `space`, for one of its owners: the page
    /// asked for, or (`None`) all of them, by invitee.
    pub async fn invited(&self, space: &str, page: Option<Page>) -> Result<Vec<Invitation>, ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        let net = self.net();
        listed(page, |p| async move { Ok(net.invited(space, p).await?.invitations) }, |i| &i.user).await
    }

    /// Accepts the invitation to `space`; its rows come with the sync started now.
    pub async fn accept(self: &Rc<Self>, space: &str) -> Result<Membership, ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        let m = self.net().accept(space).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(m)
    }

    /// Declines the invitation to `space`.
    pub async fn decline(&self, space: &str) -> Result<(), ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        self.net().decline(space).await.map_err(ClientError::Refused)
    }

    /// Leaves `space`; the sync started now takes its rows off the device.
    pub async fn leave(self: &Rc<Self>, space: &str) -> Result<(), ClientError> {
        self.check_open()?;
        named("space", crate::space::check_space(space))?;
        self.net().leave(space).await.map_err(ClientError::Refused)?;
        if self.auto_sync {
            self.schedule_sync(0);
        }
        Ok(())
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

    /// Dismisses a conflict (PROTOCOL §2a): `false` if there was none to dismiss.
    pub async fn dismiss_conflict(&self, id: &str) -> Result<bool, ClientError> {
        self.check_open()?;
        let txn = self.engine.borrow_mut().dismiss_conflict(id);
        let Some(txn) = txn else { return Ok(false) };
        self.store.commit(&txn).await?;
        self.changed(true, Some(&txn));
        Ok(true)
    }

    /// Syncs in `ms` (replacing any earlier timer).
    pub fn schedule_sync(self: &Rc<Self>, ms: u64) {
        if self.closed.get() {
            return;
        }
        let timer = self.timer.get() + 1;
        self.timer.set(timer);
        self.timer_due.set(Some(self.host.now().saturating_add(ms)));
        let weak: Weak<Self> = Rc::downgrade(self);
        let sleep = self.host.sleep(ms);
        // The task holds the driver only weakly while it sleeps: a closed or
        // dropped context has no timers left to run.
        self.host.spawn(Box::pin(async move {
            sleep.await;
            let Some(me) = weak.upgrade() else { return };
            if me.timer.get() == timer && !me.closed.get() {
                me.timer_due.set(None);
                let _ = me.run_cycle(true).await;
            }
        }));
    }

    /// The server said a space moved (an event stream's poke, its `data`):
    /// a cycle as this context's timer would start one, when
    /// [`Engine::poke_wait`] allows it, and only if the poke names what the
    /// device has not pulled ([`Engine::poke_is_news`]); the pokes of a
    /// burst share it. A poke heard while this context's cycle runs is
    /// looked at when it ends: its pull may have brought what it names.
    pub fn poked(self: &Rc<Self>, data: &str) {
        if self.closed.get() {
            return;
        }
        if self.busy.get() {
            let mut heard = self.pokes_heard.borrow_mut();
            // A storm of pokes is one cycle's worth: past a few, one that always pulls.
            match heard.len() {
                n if n < POKES_HELD => heard.push(data.to_owned()),
                _ => heard[POKES_HELD - 1] = String::new(),
            }
            return;
        }
        let wait = {
            let e = self.engine.borrow();
            if !e.poke_is_news(data) {
                return;
            }
            e.poke_wait(self.host.now())
        };
        if let Some(ms) = wait {
            self.sync_within(ms);
        }
    }

    /// The pokes heard while a cycle ran, once it has ended.
    fn pokes_after_cycle(self: &Rc<Self>) {
        let heard = std::mem::take(&mut *self.pokes_heard.borrow_mut());
        for data in heard {
            self.poked(&data);
        }
    }

    /// Syncs within `ms`: a timer set to fire sooner is kept, a later one is
    /// brought forward.
    fn sync_within(self: &Rc<Self>, ms: u64) {
        if self.timer_due.get().is_some_and(|due| due <= self.host.now().saturating_add(ms)) {
            return;
        }
        self.schedule_sync(ms);
    }

    /// Commits a step's txn; on failure the engine reopens from disk (what
    /// is on disk is always a consistent state: retries are harmless).
    async fn commit(&self, mut txn: Txn) -> Result<(), ClientError> {
        if txn.is_empty() {
            return Ok(());
        }
        self.engine.borrow_mut().stamp(&mut txn);
        match self.store.commit(&txn).await {
            Ok(()) => {
                self.changed(true, Some(&txn));
                Ok(())
            }
            // The step is not written; what it answered is asked again from the database that comes back.
            Err(e @ StoreError::Closed(_)) => {
                self.recover_storage().await?;
                Err(e.into())
            }
            Err(e) => match self.reload().await {
                Ok(()) => Err(e.into()),
                Err(e2) => {
                    self.engine.borrow_mut().require_recovery(Recovery { code: crate::protocol::Code::Storage, message: e2.to_string() });
                    self.changed(false, None);
                    Err(e2)
                }
            },
        }
    }

    /// Builds the engine again from what is on disk (always a consistent
    /// state: retries are harmless). The ids the engine in place still holds
    /// move to the new one; with none left, a block is reserved first (a
    /// failure there, a full disk, still reloads). Nothing is awaited between
    /// the read and the swap: a step another context commits meanwhile is
    /// heard by the engine in place, and the new one would miss it unknowingly.
    async fn reload(&self) -> Result<(), ClientError> {
        let reserved = if self.engine.borrow().ids_left() == 0 {
            self.reserve_with(&|stored| self.engine.borrow().plan_reserve(stored)).await.ok().flatten().map(|(block, _)| block)
        } else {
            None
        };
        let snapshot = self.store.open(Meta::fresh(String::new())).await?;
        let config = Config { seed: self.host.entropy(), ..self.config.clone() };
        let mut engine = Engine::open(snapshot, config)?;
        let left = self.engine.borrow_mut().take_ids();
        engine.hold_ids(if left.is_empty() { reserved.unwrap_or_default() } else { left });
        *self.engine.borrow_mut() = engine;
        self.changed(false, None);
        Ok(())
    }

    /// Commits an answer's txn, if any.
    async fn commit_some(&self, txn: Option<Txn>) -> Result<(), ClientError> {
        match txn {
            Some(txn) => self.commit(txn).await,
            None => Ok(()),
        }
    }

    /// The user acted (new token, …): clear recovery (recorded for every
    /// context) and sync.
    pub fn resume(self: &Rc<Self>) {
        // Seen at once in this context; written on the state as stored, under the lock.
        let _ = self.engine.borrow_mut().clear_recovery();
        let me = self.clone();
        self.host.spawn(Box::pin(async move {
            let _ = me.under_lock(cycle::Job::Lift, false).await;
            if me.auto_sync {
                me.schedule_sync(0);
            }
        }));
    }

    /// A sync now, from a context that holds no `Rc` of the driver.
    fn schedule_sync_now(&self) {
        if let Some(me) = self.me.upgrade() {
            me.schedule_sync(0);
        }
    }

    /// Stops timers, stops hearing other contexts and closes the database.
    pub fn close(&self) {
        self.closed.set(true);
        self.timer.set(self.timer.get() + 1);
        self.timer_due.set(None);
        self.host.close();
        self.listeners.borrow_mut().clear();
        self.watches.clear();
        self.store.close();
    }
}

/// A name the server would refuse (a space's, a user's) refused before any
/// request, in the server's words but as `bad_input`: nothing was asked,
/// and the answer is the same offline.
fn named(what: &str, checked: Result<(), &'static str>) -> Result<(), ClientError> {
    checked.map_err(|p| ClientError::BadInput(format!("{what}: {p}")))
}

/// A list the server pages (PROTOCOL §3c): the page `asked`, or (`None`)
/// the whole list, page after page until one comes back short. A
/// membership list no page of which the caller named is read whole: a
/// first page alone would leave out, without a word, whoever sorts after it.
/// `read` asks for a page, `key` is what the next page's `after` names of
/// an entry.
async fn listed<E, Fut>(asked: Option<Page>, read: impl Fn(Page) -> Fut, key: fn(&E) -> &str) -> Result<Vec<E>, ClientError>
where
    Fut: std::future::Future<Output = Result<Vec<E>, CallError>>,
{
    if let Some(page) = asked {
        return read(page).await.map_err(ClientError::Refused);
    }
    let mut all = Vec::new();
    let mut page = Page::FIRST;
    loop {
        let got = read(page.clone()).await.map_err(ClientError::Refused)?;
        let next = match got.last() {
            // A server that answers the same page again is not asked a third time.
            Some(last) if got.len() >= page.limit && key(last) != page.after => Some(key(last).to_owned()),
            _ => None,
        };
        all.extend(got);
        match next {
            Some(after) => page.after = after,
            None => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use crate::protocol::space::MAX_LIST_LIMIT;

    /// The value of a future that never waits.
    fn now<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the future waited"),
        }
    }

    /// A server's list of `n` users, paged as the server pages it; counts the requests.
    fn server(n: usize, asked: &Cell<usize>) -> impl Fn(Page) -> std::future::Ready<Result<Vec<String>, CallError>> + '_ {
        let all: Vec<String> = (0..n).map(|i| format!("u{i:05}")).collect();
        move |p: Page| {
            asked.set(asked.get() + 1);
            std::future::ready(Ok(p.of(all.clone(), |u| u)))
        }
    }

    #[test]
    fn a_list_read_whole_follows_every_page() {
        for n in [0, 1, 999, 1000, 1001, 2500] {
            let asked = Cell::new(0);
            let all = now(listed(None, server(n, &asked), |u| u)).unwrap();
            assert_eq!(all.len(), n, "every entry, none twice");
            assert!(all.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(asked.get(), n / 1000 + 1, "{n}: pages until a short one");
        }
    }

    #[test]
    fn a_page_asked_for_is_that_page_alone() {
        let asked = Cell::new(0);
        let page = Page { after: "u00002".into(), limit: 3 };
        let got = now(listed(Some(page), server(2500, &asked), |u| u)).unwrap();
        assert_eq!((got, asked.get()), (vec!["u00003".to_owned(), "u00004".into(), "u00005".into()], 1));
    }

    #[test]
    fn a_server_answering_the_same_page_again_is_not_followed_forever() {
        let asked = Cell::new(0);
        let same = |_: Page| {
            asked.set(asked.get() + 1);
            std::future::ready(Ok(vec!["u".to_owned(); MAX_LIST_LIMIT]))
        };
        let got = now(listed(None, same, |u: &String| u)).unwrap();
        assert_eq!((got.len(), asked.get()), (2 * MAX_LIST_LIMIT, 2));
    }
}
