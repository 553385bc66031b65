//! A deterministic, seeded fault simulator: devices, the judge, a bad network.
//!
//! Several devices (each an [`Engine`] over a [`MemoryStore`] that survives
//! crashes) edit rows and sync with a [`MemoryServer`] through a network that
//! drops requests, drops answers after the server committed, duplicates
//! requests, delivers late answers after a newer attempt, and crashes devices
//! between any two steps — including with a request out (a reload
//! mid-attempt). Retries are bounded (a small [`crate::engine::RetryPolicy`]),
//! so schedules also ask the server what it remembers (`/v1/verdicts`); and
//! now and then a device's clock jumps to 2^53-1 for one edit. Everything random comes from one seed, so a failing
//! schedule replays exactly: [`run`] returns the schedule's log with the problem.
//!
//! After the schedule, the network heals, every device syncs twice, and
//! [`run`] checks the protocol's promises:
//! - each device's visible rows equal the server's rows;
//! - no op got two verdicts or two seqs;
//! - every recorded op was judged (none lost); an applied op is visible where
//!   it won, a rejected op is visible nowhere and its device holds its reason;
//! - causality: an op never loses to a mark its device had already seen;
//! - every outbox is empty;
//! - conflicts (PROTOCOL §2a): every one a device lists is an edit that lost a
//!   field to a concurrent one, by the server's whole history, and every such
//!   lost edit is listed on its device, the same in each of its contexts;
//! - truthful status: after a reopen, an op recorded as in flight shows
//!   `awaiting-ack`, then `unknown-outcome` once the flight is known orphaned,
//!   never `pending`.
//!
//! An app can run its own schema and edits through the same faults with
//! [`SimConfig`].

mod live;
pub(crate) mod overwrites;
pub mod spaces;
mod world;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use fastrand::Rng;
use futures_util::FutureExt;

use crate::attempt::{Failure, Phase};
use crate::driver::{ClientError, Driver, Options};
use crate::engine::{Config, RetryPolicy};
use crate::ids::SplitMix;
use crate::judge::Remembered;
use crate::memory_server::MemoryServer;
use crate::memory_store::{MemoryConnection, MemoryStore};
use crate::order::newer;
use crate::protocol::{Fields, Mark, Op, OpId, Row, RowKey, Value, VerdictsRequest, MAX_SAFE_INTEGER};
use crate::schema::Schema;
use world::{Msg, Req, Resp, SimHost, SimTransport, Who, World};

/// Makes the fields of one edit: `(rng, table, the row as the device sees it)`.
pub type EditFn = fn(&mut Rng, &str, Option<&Row>) -> Fields;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many devices (one user).
    pub devices: usize,
    /// How many random events before the network heals.
    pub events: usize,
    /// The server's schema.
    pub schema: Schema,
    /// The tables edits go to.
    pub tables: Vec<String>,
    /// The edit generator.
    pub edit: EditFn,
    /// Engine batch size (small values exercise partial pushes).
    pub max_batch: usize,
    /// Pull page size.
    pub pull_limit: usize,
    /// Now and then a device's site data is cleared under its contexts
    /// (PROTOCOL §7 "A database closed under the library").
    pub clears: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 3,
            events: 60,
            schema: Schema::workout(),
            tables: vec!["sets".into()],
            edit: workout_edit,
            max_batch: 4,
            pull_limit: 3,
            clears: false,
        }
    }
}

/// The workout demo's edits: mostly valid, sometimes out of range or incomplete.
pub fn workout_edit(rng: &mut Rng, _table: &str, row: Option<&Row>) -> Fields {
    let mut f = Fields::new();
    let exercises = ["squat", "bench", "deadlift", "row"];
    let reps = |rng: &mut Rng| -> Value {
        if rng.u8(..10) == 0 {
            Value::from(rng.i64(101..=200))
        } else {
            Value::from(rng.i64(1..=12))
        }
    };
    match row {
        None => {
            f.insert("exercise".into(), Value::from(exercises[rng.usize(..exercises.len())]));
            f.insert("weightKg".into(), Value::from(rng.u32(0..400) as f64 / 2.0));
            if rng.u8(..12) != 0 {
                f.insert("reps".into(), reps(rng));
            }
        }
        Some(_) => match rng.u8(..8) {
            0 => {
                f.insert(crate::protocol::DELETED.into(), Value::Bool(true));
            }
            1 => {
                f.insert(crate::protocol::DELETED.into(), Value::Bool(false));
            }
            2 => {
                f.insert("weightKg".into(), Value::from(rng.u32(0..400) as f64 / 2.0));
                f.insert("reps".into(), reps(rng));
            }
            3 | 4 => {
                f.insert("reps".into(), reps(rng));
            }
            _ => {
                f.insert("weightKg".into(), Value::from(rng.u32(0..400) as f64 / 2.0));
            }
        },
    }
    f
}

/// A problem found in a schedule, with the schedule to replay it.
#[derive(Debug, Clone)]
pub struct SimFailure {
    /// The seed that reproduces it.
    pub seed: u64,
    /// What broke.
    pub problem: String,
    /// The schedule, one event a line.
    pub log: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {}: {}", self.seed, self.problem)?;
        writeln!(f, "schedule:")?;
        for line in &self.log {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// What a schedule did, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Ops recorded.
    pub ops: usize,
    /// Ops rejected.
    pub rejected: usize,
    /// Pushes that reached the server.
    pub pushes: usize,
    /// Answers lost after commit, requests dropped, duplicated, delivered late.
    pub lost_answers: usize,
    /// Requests dropped before the server.
    pub dropped_requests: usize,
    /// Requests the network sent twice.
    pub duplicated_requests: usize,
    /// Answers delivered after their attempt was given up.
    pub late_answers: usize,
    /// Device crashes.
    pub crashes: usize,
    /// Stale answers the engines ignored.
    pub stale_ignored: u64,
    /// Times a device asked the server what it remembers.
    pub reconciles: usize,
    /// Reopens that found an attempt recorded in flight.
    pub orphaned_flights: usize,
    /// Edits stamped at the top of the clock by a broken moment.
    pub wild_clock_edits: usize,
    /// Site data cleared under a device's contexts.
    pub clears: usize,
    /// Edits that lost a field to a concurrent one (each told on its device).
    pub conflicts: usize,
}

const USER: &str = "user";

/// Contexts per device: a page (syncs on its own, lifts a stop for
/// exhausted retries at open) and its Service Worker (syncs when woken).
const CONTEXTS: usize = 2;

type SimDriver = Driver<MemoryConnection, SimTransport, SimHost>;

thread_local! {
    /// How many queries were read from the indexes on disk and checked (the check's reach).
    pub static DISK_QUERIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// How many of those were answered from an answer kept (and checked the same).
    pub static KEPT_ANSWERS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One context of a device: its life (a crash ends one) and its driver.
#[derive(Default)]
struct Ctx {
    life: u32,
    driver: Option<Rc<SimDriver>>,
    live: Vec<live::Live>,
    /// The driver's version when its live queries were last checked.
    checked: std::cell::Cell<u64>,
}

struct Device {
    store: Rc<MemoryStore>,
    contexts: Vec<Ctx>,
}

/// One op as recorded, with the marks its device could see on each of its fields.
struct RecordedOp {
    dev: usize,
    op: Op,
    seen: BTreeMap<String, Mark>,
}

struct Sim {
    rng: Rng,
    seed: u64,
    cfg: SimConfig,
    server: MemoryServer,
    world: Rc<World>,
    devices: Vec<Device>,
    log: Vec<String>,
    recorded: Vec<RecordedOp>,
    stats: SimStats,
    healed: bool,
}

impl Sim {
    fn new(seed: u64, cfg: SimConfig) -> Result<Sim, SimFailure> {
        let rng = Rng::with_seed(seed);
        let world = World::new(cfg.devices, 1_000);
        let devices = (0..cfg.devices)
            // Every other device reads its base rows on demand, keeping none between steps.
            .enumerate()
            .map(|(d, _)| Device {
                store: Rc::new(if d % 2 == 1 { MemoryStore::lazy() } else { MemoryStore::new() }),
                contexts: (0..CONTEXTS).map(|_| Ctx::default()).collect(),
            })
            .collect();
        let mut sim = Sim {
            rng,
            seed,
            server: MemoryServer { max_future_ms: Some(crate::clock::PLAUSIBLE_AHEAD_MS), ..MemoryServer::new(cfg.schema.clone()) },
            cfg,
            world,
            devices,
            log: Vec::new(),
            recorded: Vec::new(),
            stats: SimStats::default(),
            healed: false,
        };
        for d in 0..sim.devices.len() {
            for c in 0..CONTEXTS {
                sim.open(d, c)?;
            }
        }
        Ok(sim)
    }

    fn fail(&self, problem: impl Into<String>) -> SimFailure {
        SimFailure { seed: self.seed, problem: problem.into(), log: self.log.clone() }
    }

    fn who(&self, d: usize, c: usize) -> Who {
        Who { dev: d, ctx: c, life: self.devices[d].contexts[c].life }
    }

    fn driver(&self, d: usize, c: usize) -> Option<Rc<SimDriver>> {
        self.devices[d].contexts[c].driver.clone()
    }

    /// Has a context of a lazy device hold every base row, for the checks
    /// (and the app's choice of a row) that look at all of them: the
    /// driver's own read, which over the memory store completes at once,
    /// yielding to no other task.
    fn hold_all(&self, d: usize, driver: &SimDriver) -> Result<(), SimFailure> {
        match driver.ensure_all().now_or_never() {
            Some(Ok(())) => Ok(()),
            other => Err(self.fail(format!("dev{d}: every row could not be read: {other:?}"))),
        }
    }

    /// Opens context `c` of device `d` with the shipped driver, and checks
    /// what a reopen must show: an op recorded as in flight is never
    /// `pending` (nor synced) — `awaiting-ack` while a cycle may still hold
    /// it, `unknown-outcome` once it is known orphaned.
    fn open(&mut self, d: usize, c: usize) -> Result<(), SimFailure> {
        self.devices[d].contexts[c].life += 1;
        let who = self.who(d, c);
        self.world.alive.borrow_mut().insert(who);
        let flight = self.devices[d].store.tables().sync.and_then(|s| s.flight);
        let host = SimHost { world: self.world.clone(), who, random: RefCell::new(SplitMix::new(self.rng.u64(..))) };
        let transport = SimTransport { world: self.world.clone(), who };
        // A lazy device keeps no row read between steps in half the schedules, and all it reads in the rest.
        let config = Config { cache_bytes: if self.seed % 2 == 0 { 0 } else { usize::MAX }, ..engine_config(&self.cfg) };
        let options = Options { config, auto_sync: c == 0, resume_exhausted: c == 0, user: None };
        let opened = Rc::new(RefCell::new(None));
        let (slot, store) = (opened.clone(), self.devices[d].store.clone());
        self.world.spawn(
            who,
            Box::pin(async move {
                // A context opening makes a connection of its own: after a clear, the database opens empty.
                *slot.borrow_mut() = Some(Driver::start(MemoryConnection::new(store), transport, host, options).await);
            }),
        );
        self.world.run();
        let opened = opened.borrow_mut().take();
        match opened {
            Some(Ok(driver)) => {
                let table = self.cfg.tables[0].clone();
                let lives = live::queries()
                    .into_iter()
                    .map(|query| {
                        let heard = Rc::new(RefCell::new(None));
                        let slot = heard.clone();
                        driver.watch(
                            &table,
                            query.clone(),
                            Rc::new(move |rows: &[(RowKey, Row)]| *slot.borrow_mut() = Some(rows.to_vec())),
                        );
                        live::Live { table: table.clone(), query, heard }
                    })
                    .collect();
                self.world.run();
                self.devices[d].contexts[c] =
                    Ctx { life: self.devices[d].contexts[c].life, driver: Some(driver), live: lives, checked: Default::default() };
            }
            Some(Err(e)) => {
                self.log.push(format!("dev{d}.{c} failed to open: {e}"));
                self.world.kill(who);
                return Ok(());
            }
            None => return Err(self.fail(format!("dev{d}.{c}: open never finished"))),
        }
        self.log.push(format!("dev{d}.{c} opens"));
        let Some(f) = flight else { return Ok(()) };
        self.stats.orphaned_flights += 1;
        let Some(driver) = self.driver(d, c) else { return Ok(()) };
        let engine = driver.engine.borrow();
        for id in &f.op_ids {
            let Some(op) = engine.pending().find(|o| &o.op_id == id) else { continue };
            let phase = engine.status(&op.place()).phase;
            if matches!(phase, Phase::Pending | Phase::Synced) {
                return Err(self.fail(format!("dev{d}.{c} reopened with {id} in flight, and shows it {phase:?}")));
            }
        }
        Ok(())
    }

    /// Context `c` of `d` dies: if it was putting back what a clear took
    /// and had not yet, what it alone held is lost (the documented rule).
    fn forget_held(&mut self, d: usize, c: usize) {
        let Some(driver) = self.driver(d, c).filter(|x| x.recovering()) else { return };
        let mut others = std::collections::HashSet::new();
        for (i, ctx) in self.devices[d].contexts.iter().enumerate() {
            if let Some(x) = ctx.driver.as_ref().filter(|_| i != c) {
                let e = x.engine.borrow();
                others.extend(e.pending().map(|o| o.op_id.clone()));
                others.extend(e.rejections().map(|r| r.op.op_id.clone()));
            }
        }
        let disk = self.devices[d].store.tables();
        others.extend(disk.pending.values().map(|o| o.op_id.clone()));
        others.extend(disk.rejections.keys().cloned());
        let e = driver.engine.borrow();
        let lost: std::collections::HashSet<OpId> = e
            .pending()
            .map(|o| o.op_id.clone())
            .chain(e.rejections().map(|r| r.op.op_id.clone()))
            .filter(|id| !others.contains(id))
            .collect();
        drop(e);
        if !lost.is_empty() {
            self.log.push(format!("dev{d}.{c} dies putting back a cleared copy: {} ops held by it alone are lost", lost.len()));
            self.recorded.retain(|r| !(r.dev == d && lost.contains(&r.op.op_id)));
        }
    }

    fn crash(&mut self, d: usize, c: usize) {
        self.forget_held(d, c);
        self.stats.crashes += 1;
        self.log.push(format!("crash dev{d}.{c}"));
        self.world.kill(self.who(d, c));
        self.devices[d].contexts[c].driver = None;
    }

    /// A live context of device `d`, if any.
    fn live(&mut self, d: usize) -> Option<usize> {
        let live: Vec<usize> = (0..CONTEXTS).filter(|c| self.devices[d].contexts[*c].driver.is_some()).collect();
        (!live.is_empty()).then(|| live[self.rng.usize(..live.len())])
    }

    /// Records one random edit through the driver of a live context of `d`.
    fn edit(&mut self, d: usize) -> Result<(), SimFailure> {
        let Some(c) = self.live(d) else { return Ok(()) };
        let Some(driver) = self.driver(d, c) else { return Ok(()) };
        let table = self.cfg.tables[self.rng.usize(..self.cfg.tables.len())].clone();
        let want_new = self.rng.u8(..3) == 0;
        let pick = self.rng.u64(..);
        // A database closed under the context reads nothing: no edit then.
        if self.hold_all(d, &driver).is_err() {
            return Ok(());
        }
        let visible = driver.engine.borrow().all_visible();
        driver.trim();
        let rows: Vec<&RowKey> = visible.keys().filter(|k| k.table == table).collect();
        let (row_id, current) = if rows.is_empty() || want_new {
            match driver.new_row_id() {
                Ok(id) => (id, None),
                Err(_) => return Ok(()),
            }
        } else {
            let key = rows[(pick % rows.len() as u64) as usize];
            (key.row_id.clone(), visible.get(key).cloned())
        };
        let fields = (self.cfg.edit)(&mut self.rng, &table, current.as_ref());
        let seen: BTreeMap<String, Mark> = fields
            .keys()
            .filter_map(|k| current.as_ref().and_then(|r| r.cells.get(k)).map(|cell| (k.clone(), cell.mark.clone())))
            .collect();
        // Now and then the device's clock jumps to the top for one edit.
        let wild = !self.healed && self.rng.u16(..150) == 0;
        if wild {
            *self.world.wild_now.borrow_mut() = Some((self.who(d, c), MAX_SAFE_INTEGER));
        }
        // Sometimes the transaction fails: the edit is refused, nothing recorded.
        if self.rng.u8(..40) == 0 {
            self.devices[d].store.fail_next_commits(1);
        }
        // The server alone judges: the generator makes refused edits on purpose.
        let recorded = driver.change_with(None, &table, &row_id, fields, false).now_or_never();
        *self.world.wild_now.borrow_mut() = None;
        self.devices[d].store.fail_next_commits(0);
        match recorded {
            None => return Err(self.fail("a recording over memory waited")),
            Some(Err(ClientError::ClockExhausted(_))) => self.log.push(format!("dev{d}.{c} edit refused: no later at left")),
            Some(Err(ClientError::StorageFailed(e))) => self.log.push(format!("dev{d}.{c} edit failed to commit: {e}")),
            Some(Err(e)) => return Err(self.fail(format!("dev{d}.{c}: the edit generator made a bad edit: {e}"))),
            Some(Ok(op_id)) => {
                let op = driver.engine.borrow().pending().find(|o| o.op_id == op_id).cloned();
                let op = op.ok_or_else(|| self.fail(format!("dev{d}.{c}: recorded {op_id} is not queued")))?;
                if wild {
                    self.stats.wild_clock_edits += 1;
                }
                self.log.push(format!("dev{d}.{c} edit {} {}/{} {:?} at {}", op.op_id, op.table, op.row_id, op.fields, op.at));
                self.recorded.push(RecordedOp { dev: d, op, seen });
                self.stats.ops += 1;
            }
        }
        self.world.run();
        Ok(())
    }

    /// Starts a job on context `c` of `d` (a sync, or a person's check).
    fn job(&mut self, d: usize, c: usize, check: bool) {
        let Some(driver) = self.driver(d, c) else { return };
        self.log.push(format!("dev{d}.{c} {}", if check { "checks with the server" } else { "syncs" }));
        self.world.spawn(
            self.who(d, c),
            Box::pin(async move {
                let _ = if check { driver.reconcile().await } else { driver.sync().await };
            }),
        );
        self.world.run();
    }

    fn serve(&mut self, req: &Req) -> Resp {
        // The server's clock is the simulation's; it refuses ops stamped more
        // than a day ahead of it (the reference server's default).
        self.server.now = Some(self.world.now.get());
        match req {
            Req::Push(p) => {
                self.stats.pushes += 1;
                let result = self.server.push(USER, p).map_err(|e| Failure::from_http(e.error.code.http_status(), Some(&e), None));
                Resp::Push(result)
            }
            Req::Pull(sent) => Resp::Pull(Ok(self.server.pull_spaces(USER, sent))),
            Req::Verdicts(ids) => {
                self.stats.reconciles += 1;
                Resp::Verdicts(Ok(self.server.verdicts(USER, &VerdictsRequest { op_ids: ids.clone() })))
            }
        }
    }

    /// Hands device `d`'s oldest broadcast to the contexts that listened.
    fn broadcast(&mut self, d: usize) -> bool {
        let Some((to, told)) = self.world.next_broadcast(d) else { return false };
        for who in to {
            let ctx = &self.devices[who.dev].contexts[who.ctx];
            if let (true, Some(driver)) = (ctx.life == who.life, ctx.driver.clone()) {
                // As the browser's listener hears it (`wasm::client`).
                match crate::told::heard(&told) {
                    Some(txn) => driver.absorb(&txn),
                    None => driver.absorb_unreadable(),
                }
            }
        }
        self.world.run();
        true
    }

    /// One message of the faulty network.
    fn network(&mut self) {
        let n = self.world.net.borrow().len();
        if n == 0 {
            return;
        }
        let i = self.rng.usize(..n);
        let msg = self.world.net.borrow_mut().swap_remove(i);
        match msg {
            Msg::ToServer { who, slot, req } => {
                let dev = who.dev;
                match self.rng.u8(..10) {
                    0 => {
                        self.stats.dropped_requests += 1;
                        self.log.push(format!("net drops a request of dev{dev}"));
                    }
                    1 => {
                        self.stats.lost_answers += 1;
                        self.serve(&req);
                        self.log.push(format!("server commits, answer to dev{dev} lost"));
                    }
                    2 => {
                        self.stats.duplicated_requests += 1;
                        let a = self.serve(&req);
                        let b = self.serve(&req);
                        self.log.push(format!("net duplicates a request of dev{dev}"));
                        let mut net = self.world.net.borrow_mut();
                        net.push(Msg::ToDevice { who, slot, resp: a });
                        net.push(Msg::ToDevice { who, slot, resp: b });
                    }
                    3 if matches!(req, Req::Push(_)) => {
                        self.log.push(format!("server fails dev{dev}'s push with 503 before commit"));
                        let f = Failure::Server { status: 503, message: "unavailable".into(), retry_after_ms: 0 };
                        self.world.net.borrow_mut().push(Msg::ToDevice { who, slot, resp: Resp::Push(Err(f)) });
                    }
                    _ => {
                        let resp = self.serve(&req);
                        self.log.push(format!("server answers dev{dev}"));
                        self.world.net.borrow_mut().push(Msg::ToDevice { who, slot, resp });
                    }
                }
            }
            Msg::ToDevice { who, slot, resp } => {
                if self.rng.u8(..12) == 0 {
                    self.log.push(format!("net drops an answer to dev{}", who.dev));
                } else if self.world.answer(slot, resp) {
                    self.log.push(format!("dev{}.{} takes an answer", who.dev, who.ctx));
                } else {
                    self.log.push(format!("a late answer to dev{} finds no one waiting", who.dev));
                }
            }
        }
        self.world.run();
    }

    /// A request of device `d` times out (its fetch gives up).
    fn timeout(&mut self, d: usize) {
        let waiting = self.world.waiting(d);
        if waiting.is_empty() {
            return;
        }
        let slot = waiting[self.rng.usize(..waiting.len())];
        self.log.push(format!("a request of dev{d} times out"));
        self.world.fail(slot, Failure::Timeout);
        self.world.run();
    }

    /// The site's data of device `d` is cleared under its contexts: each
    /// live one hears its connection close (as a page hears `close`) and
    /// heals. What no live context held is gone with the disk — lost by the
    /// documented rule, so no longer expected anywhere.
    fn clear(&mut self, d: usize) {
        self.stats.clears += 1;
        let mut held = std::collections::HashSet::new();
        let drivers: Vec<Rc<SimDriver>> = self.devices[d].contexts.iter().filter_map(|c| c.driver.clone()).collect();
        for driver in &drivers {
            let e = driver.engine.borrow();
            held.extend(e.pending().map(|o| o.op_id.clone()));
            held.extend(e.rejections().map(|r| r.op.op_id.clone()));
        }
        let disk = self.devices[d].store.tables();
        let lost: std::collections::HashSet<OpId> =
            disk.pending.values().map(|o| o.op_id.clone()).chain(disk.rejections.keys().cloned()).filter(|id| !held.contains(id)).collect();
        self.recorded.retain(|r| !(r.dev == d && lost.contains(&r.op.op_id)));
        self.log.push(format!("dev{d}'s site data is cleared ({} live contexts; {} ops held by none are lost)", drivers.len(), lost.len()));
        self.devices[d].store.clear_under();
        for (c, driver) in self.devices[d].contexts.iter().enumerate() {
            let Some(driver) = driver.driver.clone() else { continue };
            self.world.spawn(
                Who { dev: d, ctx: c, life: self.devices[d].contexts[c].life },
                Box::pin(async move {
                    let _ = driver.recover_storage().await;
                }),
            );
        }
        self.world.run();
    }

    /// One random event of the faulty world.
    fn event(&mut self) -> Result<(), SimFailure> {
        let now = self.world.now.get() + self.rng.u64(1..2_000);
        self.world.advance(now);
        self.world.run();
        let d = self.rng.usize(..self.devices.len());
        let c = self.rng.usize(..CONTEXTS);
        match self.rng.u8(..100) {
            0..=27 => self.edit(d)?,
            28..=37 => self.job(d, c, false),
            38..=39 => self.job(d, c, true),
            40..=72 => self.network(),
            73..=78 => {
                self.broadcast(d);
            }
            79..=85 => self.timeout(d),
            86 => {
                self.log.push(format!("dev{d}'s next commit fails"));
                self.devices[d].store.fail_next_commits(1);
            }
            87..=92 => {
                if self.devices[d].contexts[c].driver.is_some() {
                    self.crash(d, c);
                }
            }
            93 if self.cfg.clears => self.clear(d),
            _ => {
                if self.devices[d].contexts[c].driver.is_none() {
                    self.world.kill(self.who(d, c));
                    self.open(d, c)?;
                }
            }
        }
        self.world.run();
        self.check_live()
    }

    /// Every live query of every context: heard and asked afresh, it equals
    /// the reference; and every device's index entries on disk are those of
    /// the rows on disk.
    fn check_live(&self) -> Result<(), SimFailure> {
        for (d, dev) in self.devices.iter().enumerate() {
            self.check_entries(d, dev)?;
        }
        for (d, dev) in self.devices.iter().enumerate() {
            for (c, ctx) in dev.contexts.iter().enumerate() {
                let Some(driver) = &ctx.driver else { continue };
                // Unchanged since the last check: nothing to look at again.
                if ctx.checked.replace(driver.version()) == driver.version() {
                    continue;
                }
                self.hold_all(d, driver)?;
                for l in &ctx.live {
                    let want = live::reference(&driver.engine.borrow(), &l.table, &l.query);
                    let fresh = driver.engine.borrow_mut().query(&l.table, &l.query);
                    if live::shown(&fresh) != live::shown(&want) {
                        return Err(self.fail(format!(
                            "dev{d}.{c}: query {:?} answers {:?}, the rows say {:?}",
                            l.query,
                            live::shown(&fresh),
                            live::shown(&want)
                        )));
                    }
                    let heard = l.heard.borrow();
                    if heard.as_deref().map(live::shown) != Some(live::shown(&want)) {
                        return Err(self.fail(format!(
                            "dev{d}.{c}: live query {:?} last heard {:?}, the rows say {:?}",
                            l.query,
                            heard.as_deref().map(live::shown),
                            live::shown(&want)
                        )));
                    }
                }
                // After what was heard: a read tells the changes not yet told
                // first, which would hide a step whose live queries were not run.
                for l in &ctx.live {
                    self.check_on_disk(d, c, dev, driver, l)?;
                }
            }
        }
        Ok(())
    }

    /// A live query's query read from the indexes kept on disk answers as
    /// the indexes in memory do, for a context that heard every step the
    /// store holds (before, a row it holds may be older than its entry).
    fn check_on_disk(&self, d: usize, c: usize, dev: &Device, driver: &SimDriver, l: &live::Live) -> Result<(), SimFailure> {
        if driver.engine.borrow().missed(dev.store.tables().sync.as_ref()) {
            return Ok(());
        }
        let served = driver.answers_kept_served();
        let Some(got) = driver.query_on_disk(&l.table, &l.query).now_or_never() else {
            return Err(self.fail(format!("dev{d}.{c}: a query on disk waited on a store that answers at once")));
        };
        let got = got.map_err(|e| self.fail(format!("dev{d}.{c}: a query on disk failed: {e}")))?;
        let Some(got) = got else { return Ok(()) };
        DISK_QUERIES.with(|n| n.set(n.get() + 1));
        if driver.answers_kept_served() > served {
            KEPT_ANSWERS.with(|n| n.set(n.get() + 1));
        }
        let want = live::reference(&driver.engine.borrow(), &l.table, &l.query);
        if live::shown(&got) != live::shown(&want) {
            return Err(self.fail(format!(
                "dev{d}.{c}: query {:?} read from the indexes on disk answers {:?}, the rows say {:?}",
                l.query,
                live::shown(&got),
                live::shown(&want)
            )));
        }
        Ok(())
    }

    /// The index entries a store keeps, step by step, are exactly those its
    /// base rows spell (PROTOCOL §7, "Indexes on disk"); and the store keeps
    /// the indexes of every context that heard what it keeps.
    fn check_entries(&self, d: usize, dev: &Device) -> Result<(), SimFailure> {
        let stored = dev.store.tables();
        for (c, ctx) in dev.contexts.iter().enumerate() {
            let Some(driver) = &ctx.driver else { continue };
            let engine = driver.engine.borrow();
            // Of a context that heard the store's last word on them.
            if engine.entries_heard() == stored.entries_for.as_ref() && engine.entries_to_keep().is_some() {
                return Err(self.fail(format!("dev{d}.{c}: the store keeps {:?}, not the indexes it wants", stored.entries_for)));
            }
        }
        let Some(mut want) = stored.entries_built() else { return Ok(()) };
        let mut have = stored.entries;
        have.retain(|_, set| !set.is_empty());
        want.retain(|_, set| !set.is_empty());
        if have != want {
            let odd: Vec<String> = want
                .iter()
                .flat_map(|(i, set)| set.iter().map(move |e| (i, e)))
                .filter(|(i, e)| !have.get(*i).is_some_and(|s| s.contains(*e)))
                .map(|(i, e)| format!("missing {i} {:?}", crate::query::sortkey::row_of(e, 1)))
                .chain(
                    have.iter()
                        .flat_map(|(i, set)| set.iter().map(move |e| (i, e)))
                        .filter(|(i, e)| !want.get(*i).is_some_and(|s| s.contains(*e)))
                        .map(|(i, e)| format!("stray {i} {:?}", crate::query::sortkey::row_of(e, 1))),
                )
                .collect();
            return Err(self.fail(format!("dev{d}: the index entries on disk are not those of its base rows: {}", odd.join("; "))));
        }
        Ok(())
    }

    /// The network heals: answers still on the wire arrive (to whoever still
    /// waits), every other request times out; then every app opens again
    /// (lifting stops for exhausted retries) and each device syncs to the end
    /// on a perfect network, twice round.
    fn heal(&mut self) -> Result<(), SimFailure> {
        self.log.push("network heals".into());
        self.healed = true;
        let msgs = std::mem::take(&mut *self.world.net.borrow_mut());
        for m in msgs {
            if let Msg::ToDevice { slot, resp, .. } = m {
                self.world.answer(slot, resp);
            }
        }
        for slot in self.world.all_waiting() {
            self.world.fail(slot, Failure::Timeout);
        }
        self.world.run();
        for d in 0..self.devices.len() {
            for c in 0..CONTEXTS {
                self.forget_held(d, c);
                self.world.kill(self.who(d, c));
                self.devices[d].contexts[c].driver = None;
            }
        }
        self.world.clear_wire();
        for d in 0..self.devices.len() {
            self.devices[d].store.fail_next_commits(0);
            for c in 0..CONTEXTS {
                self.open(d, c)?;
                if self.driver(d, c).is_none() {
                    return Err(self.fail(format!("dev{d}.{c} does not open on a healed world")));
                }
            }
        }
        for _round in 0..2 {
            for d in 0..self.devices.len() {
                self.sync_clean(d)?;
            }
        }
        for d in 0..self.devices.len() {
            while self.broadcast(d) {}
        }
        Ok(())
    }

    /// Syncs device `d`'s page until a cycle ends well, serving every request.
    fn sync_clean(&mut self, d: usize) -> Result<(), SimFailure> {
        let driver = self.driver(d, 0).ok_or_else(|| self.fail(format!("dev{d} is down after heal")))?;
        for _try in 0..20 {
            let out = Rc::new(RefCell::new(None));
            let (slot, me) = (out.clone(), driver.clone());
            self.world.spawn(self.who(d, 0), Box::pin(async move { *slot.borrow_mut() = Some(me.sync().await) }));
            for _ in 0..100_000 {
                self.world.run();
                if out.borrow().is_some() {
                    break;
                }
                let msgs = std::mem::take(&mut *self.world.net.borrow_mut());
                if msgs.is_empty() {
                    if !(0..self.devices.len()).any(|d| self.broadcast(d)) {
                        let next = self.world.next_timer().ok_or_else(|| self.fail(format!("dev{d}: a sync waits on nothing")))?;
                        self.world.advance(next);
                    }
                    continue;
                }
                for m in msgs {
                    match m {
                        Msg::ToServer { slot, req, .. } => {
                            let resp = self.serve(&req);
                            self.world.answer(slot, resp);
                        }
                        Msg::ToDevice { slot, resp, .. } => {
                            self.world.answer(slot, resp);
                        }
                    }
                }
            }
            let outcome = out.borrow_mut().take();
            match outcome {
                Some(Ok(o)) if o.ok => return Ok(()),
                Some(Ok(o)) => {
                    self.log.push(format!("dev{d} sync ends: {:?}", o.error));
                    let next = o.retry_at.unwrap_or(self.world.now.get() + 1_000);
                    self.world.advance(next);
                }
                Some(Err(e)) => return Err(self.fail(format!("dev{d} cannot sync on a healed network: {e}"))),
                None => return Err(self.fail(format!("dev{d} did not finish syncing on a healed network"))),
            }
        }
        Err(self.fail(format!("dev{d} never ended a cycle well on a healed network")))
    }

    fn check(&self) -> Result<(), SimFailure> {
        let server_rows = self.server.rows(USER);
        let data = self.server.users.get(USER).cloned().unwrap_or_default();
        for (d, dev) in self.devices.iter().enumerate() {
            for (c, ctx) in dev.contexts.iter().enumerate() {
                let driver = ctx.driver.as_ref().ok_or_else(|| self.fail(format!("dev{d}.{c} is down after heal")))?;
                self.hold_all(d, driver)?;
                let engine = driver.engine.borrow();
                if engine.pending_len() != 0 {
                    return Err(self.fail(format!("dev{d}.{c}: outbox not empty ({} ops)", engine.pending_len())));
                }
                let visible = engine.all_visible();
                if visible != server_rows {
                    let keys: std::collections::BTreeSet<&RowKey> = visible.keys().chain(server_rows.keys()).collect();
                    let differ: Vec<String> = keys
                        .into_iter()
                        .filter(|k| visible.get(*k) != server_rows.get(*k))
                        .map(|k| format!("{}/{}: device {:?}, server {:?}", k.table, k.row_id, visible.get(k), server_rows.get(k)))
                        .collect();
                    return Err(self.fail(format!("dev{d}.{c}: visible rows differ from the server's: {}", differ.join("; "))));
                }
            }
            let stored = dev.store.tables();
            if stored.base != server_rows {
                return Err(self.fail(format!("dev{d}: stored base rows differ from the server's")));
            }
        }
        let truth = overwrites::truth(&self.server.journal);
        for (d, dev) in self.devices.iter().enumerate() {
            let mut first: Option<std::collections::BTreeSet<overwrites::Lost>> = None;
            for (c, ctx) in dev.contexts.iter().enumerate() {
                let driver = ctx.driver.as_ref().ok_or_else(|| self.fail("device down"))?;
                let engine = driver.engine.borrow();
                let told: std::collections::BTreeSet<overwrites::Lost> =
                    engine.conflicts().into_iter().map(|x| (x.mine.op_id.clone(), x.field.clone())).collect();
                overwrites::check(&truth, engine.device_id(), &told, |_| true).map_err(|e| self.fail(format!("dev{d}.{c}: {e}")))?;
                match &first {
                    None => first = Some(told),
                    Some(f) if *f != told => return Err(self.fail(format!("dev{d}.{c}: other conflicts than its first context"))),
                    Some(_) => {}
                }
            }
        }
        for (id, n) in data.verdict_count.iter().chain(data.seq_count.iter()) {
            if *n > 1 {
                return Err(self.fail(format!("op {id} got {n} verdicts or seqs")));
            }
        }
        let all_marks: Vec<&OpId> = server_rows.values().flat_map(|r| r.cells.values().map(|c| &c.mark.op_id)).collect();
        for r in &self.recorded {
            let op = &r.op;
            match data.verdicts.get(&op.op_id) {
                None => return Err(self.fail(format!("op {} was lost: never judged", op.op_id))),
                Some(Remembered::Applied) => {
                    let row = server_rows.get(&op.row_key()).ok_or_else(|| self.fail(format!("applied {} has no row", op.op_id)))?;
                    let mark = op.mark();
                    for (field, value) in &op.fields {
                        let cell = row.cells.get(field).ok_or_else(|| self.fail(format!("applied {} lost field {field}", op.op_id)))?;
                        if newer(&mark, &cell.mark) {
                            return Err(self.fail(format!("applied {} lost to an older mark on {field}", op.op_id)));
                        }
                        if cell.mark == mark && &cell.value != value {
                            return Err(self.fail(format!("{} won {field} but shows another value", op.op_id)));
                        }
                        if let Some(seen) = r.seen.get(field) {
                            if &cell.mark == seen {
                                return Err(self.fail(format!(
                                    "causality: {} on {field} lost to {} which its device had already seen",
                                    op.op_id, seen.op_id
                                )));
                            }
                        }
                    }
                }
                Some(Remembered::Rejected { reason, .. }) => {
                    if all_marks.contains(&&op.op_id) {
                        return Err(self.fail(format!("rejected {} is visible", op.op_id)));
                    }
                    for (c, ctx) in self.devices[r.dev].contexts.iter().enumerate() {
                        let driver = ctx.driver.as_ref().ok_or_else(|| self.fail("device down"))?;
                        if !driver.engine.borrow().rejections().any(|x| x.op.op_id == op.op_id && &x.reason == reason) {
                            return Err(self.fail(format!("dev{}.{c}: rejected {} has no recorded reason", r.dev, op.op_id)));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn engine_config(cfg: &SimConfig) -> Config {
    // Small limits, so schedules reach them and ask the server what it
    // remembers, and small blocks of numbers, so contexts cross their edges.
    let retry = RetryPolicy { max_attempts: 3, max_elapsed_ms: 30_000 };
    let indexes = live::indexes(&cfg.tables[0]);
    Config { max_batch: cfg.max_batch, pull_limit: cfg.pull_limit, retry, id_block: 8, indexes, ..Config::default() }
}

/// Runs one seeded schedule and checks every promise. `Err` carries the
/// seed and the schedule that broke one.
pub fn run(seed: u64, cfg: &SimConfig) -> Result<SimStats, SimFailure> {
    let mut sim = Sim::new(seed, cfg.clone())?;
    for _ in 0..cfg.events {
        sim.event()?;
    }
    sim.heal()?;
    sim.check()?;
    sim.world.run();
    sim.check_live()?;
    let mut stats = sim.stats.clone();
    stats.rejected =
        sim.server.users.get(USER).map_or(0, |d| d.verdicts.values().filter(|v| matches!(v, Remembered::Rejected { .. })).count());
    stats.late_answers = sim.world.late_answers.get();
    stats.conflicts = overwrites::truth(&sim.server.journal).lost.len();
    stats.stale_ignored = sim
        .devices
        .iter()
        .flat_map(|d| d.contexts.iter())
        .filter_map(|c| c.driver.as_ref())
        .map(|d| d.engine.borrow().metrics().stale_acks_ignored)
        .sum();
    Ok(stats)
}

/// Runs `count` schedules from `first_seed` on and adds up their stats.
pub fn run_many(first_seed: u64, count: u64, cfg: &SimConfig) -> Result<SimStats, SimFailure> {
    many(first_seed, count, cfg, run)
}

/// Runs `count` schedules of one mode from `first_seed` on, adding their stats.
fn many<C, S: Default + std::ops::AddAssign>(
    first_seed: u64,
    count: u64,
    cfg: &C,
    run: fn(u64, &C) -> Result<S, SimFailure>,
) -> Result<S, SimFailure> {
    let mut total = S::default();
    for seed in first_seed..first_seed + count {
        total += run(seed, cfg)?;
    }
    Ok(total)
}

/// Stats add up field by field.
macro_rules! add_up {
    ($t:ty { $($f:ident),* $(,)? }) => {
        impl std::ops::AddAssign for $t {
            fn add_assign(&mut self, o: $t) {
                $(self.$f += o.$f;)*
            }
        }
    };
}
use add_up;

add_up!(SimStats {
    ops,
    rejected,
    pushes,
    lost_answers,
    dropped_requests,
    duplicated_requests,
    late_answers,
    crashes,
    stale_ignored,
    reconciles,
    orphaned_flights,
    wild_clock_edits,
    clears,
    conflicts,
});
