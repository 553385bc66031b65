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
//! - truthful status: after a reopen, an op recorded as in flight shows
//!   `awaiting-ack`, then `unknown-outcome` once the flight is known orphaned,
//!   never `pending`.
//!
//! An app can run its own schema and edits through the same faults with
//! [`SimConfig`].

use std::collections::BTreeMap;

use fastrand::Rng;

use crate::attempt::{Failure, Phase};
use crate::engine::{Config, Engine, EngineError, RetryPolicy, Step};
use crate::judge::Remembered;
use crate::memory_server::MemoryServer;
use crate::order::newer;
use crate::protocol::{
    Fields, Mark, Op, OpId, PushRequest, PushResponse, Row, RowKey, SpacesPullRequest, SpacesPullResponse, Value, VerdictsRequest,
    VerdictsResponse, MAX_SAFE_INTEGER,
};
use crate::schema::Schema;
use crate::store::{LocalStore, MemoryStore, Meta, Txn};

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
}

const USER: &str = "user";

#[derive(Debug, Clone)]
enum Req {
    Push(PushRequest),
    Pull(SpacesPullRequest),
    Verdicts(Vec<OpId>),
}

#[derive(Debug, Clone)]
enum Resp {
    Push { key: String, result: Result<PushResponse, Failure> },
    Pull { sent: SpacesPullRequest, page: Result<SpacesPullResponse, Failure> },
    Verdicts(Result<VerdictsResponse, Failure>),
}

#[derive(Debug, Clone)]
enum Msg {
    ToServer { dev: usize, life: u32, req: Req },
    ToDevice { dev: usize, life: u32, resp: Resp },
}

#[derive(Debug, Clone, PartialEq)]
enum Awaiting {
    Push(String),
    Pull(SpacesPullRequest),
    Verdicts,
}

struct Device {
    store: MemoryStore,
    engine: Option<Engine>,
    awaiting: Option<Awaiting>,
    life: u32,
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
    devices: Vec<Device>,
    net: Vec<Msg>,
    now: u64,
    log: Vec<String>,
    recorded: Vec<RecordedOp>,
    stats: SimStats,
    healed: bool,
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    // MemoryStore futures never wait: poll once with a no-op waker.
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

impl Sim {
    fn new(seed: u64, cfg: SimConfig) -> Sim {
        let mut rng = Rng::with_seed(seed);
        let devices = (0..cfg.devices)
            .map(|i| {
                let store = MemoryStore::new();
                let id = format!("dev{i}{}", ["a", "B", "c", "D"][rng.usize(..4)]);
                let snap = block(store.open(Meta::fresh(id))).ok();
                let engine = snap.and_then(|s| Engine::open(s, engine_config(&cfg, rng.u64(..))).ok());
                Device { store, engine, awaiting: None, life: 0 }
            })
            .collect();
        Sim {
            rng,
            seed,
            server: MemoryServer { max_future_ms: Some(crate::clock::PLAUSIBLE_AHEAD_MS), ..MemoryServer::new(cfg.schema.clone()) },
            cfg,
            devices,
            net: Vec::new(),
            now: 1_000,
            log: Vec::new(),
            recorded: Vec::new(),
            stats: SimStats::default(),
            healed: false,
        }
    }

    fn fail(&self, problem: impl Into<String>) -> SimFailure {
        SimFailure { seed: self.seed, problem: problem.into(), log: self.log.clone() }
    }

    fn reopen(&mut self, d: usize) -> Result<(), SimFailure> {
        let seed = self.rng.u64(..);
        let dev = &mut self.devices[d];
        let snap = block(dev.store.open(Meta::fresh("unused".into()))).map_err(|e| self.fail(e.to_string()))?;
        let mut engine = Engine::open(snap, engine_config(&self.cfg, seed)).map_err(|e| self.fail(e.to_string()))?;
        // As an app's open: a stop for exhausted retries is lifted.
        let lifted = engine.retry_exhausted();
        let flight = engine.sync_state().flight.clone();
        if let Some(f) = &flight {
            self.stats.orphaned_flights += 1;
            for id in &f.op_ids {
                let Some(op) = engine.pending().find(|o| &o.op_id == id).cloned() else { continue };
                let phase = engine.status(&op.place()).phase;
                if phase == Phase::Pending || phase == Phase::Synced {
                    return Err(self.fail(format!("dev{d} reopened with {id} in flight, and shows it {phase:?}")));
                }
            }
        }
        // No cycle runs in another context of this device: the flight is orphaned.
        let settled = engine.settle_orphaned_flight();
        if let Some(f) = &flight {
            for id in &f.op_ids {
                let Some(op) = engine.pending().find(|o| &o.op_id == id).cloned() else { continue };
                let phase = engine.status(&op.place()).phase;
                if !matches!(phase, Phase::UnknownOutcome | Phase::RecoveryRequired) {
                    return Err(self.fail(format!("dev{d}: orphaned {id} shows {phase:?}, not unknown-outcome")));
                }
            }
        }
        let dev = &mut self.devices[d];
        for txn in [lifted, settled].into_iter().flatten() {
            if block(dev.store.commit(&txn)).is_err() {
                return Err(self.fail("a reopen's commit failed"));
            }
        }
        dev.engine = Some(engine);
        dev.awaiting = None;
        dev.life += 1;
        Ok(())
    }

    fn crash(&mut self, d: usize) {
        self.stats.crashes += 1;
        self.log.push(format!("crash dev{d}"));
        let dev = &mut self.devices[d];
        dev.engine = None;
        dev.awaiting = None;
    }

    /// Records one random edit on device `d`, as the browser adapter does:
    /// read meta, plan, commit in one transaction, then tell the engine.
    fn edit(&mut self, d: usize) -> Result<(), SimFailure> {
        let table = self.cfg.tables[self.rng.usize(..self.cfg.tables.len())].clone();
        let want_new = self.rng.u8(..3) == 0;
        let pick = self.rng.u64(..);
        let dev = &mut self.devices[d];
        let Some(engine) = dev.engine.as_mut() else {
            return Ok(());
        };
        let visible = engine.all_visible();
        let rows: Vec<&RowKey> = visible.keys().filter(|k| k.table == table).collect();
        let (row_id, current) = if rows.is_empty() || want_new {
            if engine.ids_left() == 0 {
                // Reserve a block in its own transaction, as `newRowId` does.
                let Some(stored) = dev.store.tables().meta else {
                    return Err(self.fail("store lost its meta"));
                };
                let (txn, ids) = engine.plan_reserve(&stored);
                if block(dev.store.commit(&txn)).is_ok() {
                    engine.reserved(ids, &stored);
                }
            }
            match engine.new_row_id() {
                Ok(id) => (id, None),
                Err(_) => return Ok(()),
            }
        } else {
            let key = rows[(pick % rows.len() as u64) as usize];
            (key.row_id.clone(), visible.get(key).cloned())
        };
        let fields = (self.cfg.edit)(&mut self.rng, &table, current.as_ref());
        let dev = &mut self.devices[d];
        let Some(engine) = dev.engine.as_mut() else {
            return Ok(());
        };
        let draft = engine.draft(&table, &row_id, fields).map_err(|e| SimFailure {
            seed: self.seed,
            problem: format!("the edit generator made a bad edit: {e}"),
            log: self.log.clone(),
        })?;
        let key = RowKey::new(table.as_str(), row_id.as_str());
        let visible = engine.all_visible().get(&key).cloned().unwrap_or_default();
        let stored = dev.store.tables().meta.ok_or_else(|| SimFailure {
            seed: self.seed,
            problem: "store lost its meta".into(),
            log: self.log.clone(),
        })?;
        // Now and then the device's clock jumps to the top for one edit.
        let wild = !self.healed && self.rng.u16(..150) == 0;
        let now = if wild { MAX_SAFE_INTEGER } else { self.now };
        let (txn, rec) = match engine.plan_record(draft, &stored, now) {
            Ok(p) => p,
            Err(EngineError::ClockExhausted) => {
                self.log.push(format!("dev{d} edit refused: no later at left"));
                return Ok(());
            }
            Err(e) => return Err(self.fail(format!("plan_record: {e}"))),
        };
        let op = rec.ops[0].clone();
        if wild {
            self.stats.wild_clock_edits += 1;
        }
        // Sometimes the transaction fails: the edit is refused, nothing recorded.
        if self.rng.u8(..40) == 0 {
            dev.store.fail_next_commits(1);
        }
        if block(dev.store.commit(&txn)).is_err() {
            self.log.push(format!("dev{d} edit {} failed to commit", op.op_id));
            return Ok(());
        }
        let seen = op.fields.keys().filter_map(|k| visible.cells.get(k).map(|c| (k.clone(), c.mark.clone()))).collect();
        self.log.push(format!("dev{d} edit {} {}/{} {:?} at {}", op.op_id, op.table, op.row_id, op.fields, op.at));
        self.recorded.push(RecordedOp { dev: d, op, seen });
        self.stats.ops += 1;
        // A crash between the commit and the engine hearing of it.
        if self.rng.u8(..25) == 0 {
            self.crash(d);
            return Ok(());
        }
        if let Some(engine) = self.devices[d].engine.as_mut() {
            engine.recorded(rec);
        }
        Ok(())
    }

    /// Commits a step's txn (a push's records the attempt going out), then
    /// carries the step out. A failed commit crashes the device: nothing leaves.
    fn send(&mut self, d: usize, txn: Txn, step: Step) {
        let dev = &mut self.devices[d];
        if !txn.is_empty() {
            if !self.healed && self.rng.u8(..60) == 0 {
                dev.store.fail_next_commits(1);
            }
            if block(dev.store.commit(&txn)).is_err() {
                self.log.push(format!("dev{d} failed to commit a step: reopen from disk"));
                self.crash(d);
                return;
            }
        }
        let dev = &mut self.devices[d];
        let life = dev.life;
        match step {
            Step::Push(req) => {
                dev.awaiting = Some(Awaiting::Push(req.attempt_key.clone()));
                self.log.push(format!("dev{d} push {} ({} ops)", req.attempt_key, req.batch.len()));
                self.net.push(Msg::ToServer { dev: d, life, req: Req::Push(req) });
            }
            Step::Reconcile(ids) => {
                dev.awaiting = Some(Awaiting::Verdicts);
                self.stats.reconciles += 1;
                self.log.push(format!("dev{d} asks the server about {} ops", ids.len()));
                self.net.push(Msg::ToServer { dev: d, life, req: Req::Verdicts(ids) });
            }
            Step::Pull(req) => {
                dev.awaiting = Some(Awaiting::Pull(req.clone()));
                self.log.push(format!("dev{d} pull from {:?}", req.spaces.values().map(|f| f.cursor).collect::<Vec<_>>()));
                self.net.push(Msg::ToServer { dev: d, life, req: Req::Pull(req) });
            }
            Step::Done(_) => {
                dev.awaiting = None;
                self.log.push(format!("dev{d} sync done"));
            }
            Step::Wait { until, .. } => {
                dev.awaiting = None;
                self.log.push(format!("dev{d} waits until {until}"));
            }
            Step::Blocked(r) => {
                dev.awaiting = None;
                self.log.push(format!("dev{d} blocked: {}", r.code));
            }
        }
    }

    fn start_sync(&mut self, d: usize) {
        let now = self.now;
        let dev = &mut self.devices[d];
        if dev.awaiting.is_some() {
            return;
        }
        let Some(engine) = dev.engine.as_mut() else {
            return;
        };
        let (txn, step) = engine.start_sync(now);
        self.send(d, txn, step);
    }

    fn serve(&mut self, req: &Req) -> Resp {
        // The server's clock is the simulation's; it refuses ops stamped more
        // than a day ahead of it (the reference server's default).
        self.server.now = Some(self.now);
        match req {
            Req::Push(p) => {
                self.stats.pushes += 1;
                let result = self.server.push(USER, p).map_err(|e| Failure::from_http(e.error.code.http_status(), Some(&e), None));
                Resp::Push { key: p.attempt_key.clone(), result }
            }
            Req::Pull(sent) => Resp::Pull { sent: sent.clone(), page: Ok(self.server.pull_spaces(USER, sent)) },
            Req::Verdicts(ids) => Resp::Verdicts(Ok(self.server.verdicts(USER, &VerdictsRequest { op_ids: ids.clone() }))),
        }
    }

    /// Delivers an answer to a device; commits its txn; a failed commit crashes the device.
    fn deliver(&mut self, d: usize, life: u32, resp: Resp) -> Result<(), SimFailure> {
        let now = self.now;
        let dev = &mut self.devices[d];
        if dev.life != life {
            return Ok(()); // the process that asked is gone
        }
        let Some(engine) = dev.engine.as_mut() else {
            return Ok(());
        };
        let late = match (&resp, &dev.awaiting) {
            (Resp::Push { key, .. }, Some(Awaiting::Push(k))) => key != k,
            (Resp::Pull { sent, .. }, Some(Awaiting::Pull(r))) => sent != r,
            (Resp::Verdicts(_), Some(Awaiting::Verdicts)) => false,
            _ => true,
        };
        if late {
            self.stats.late_answers += 1;
        }
        let out: Option<(Txn, Step)> = match resp {
            Resp::Push { result: Ok(r), .. } => engine.on_push_response(r, now),
            Resp::Push { key, result: Err(f) } => engine.on_push_failed(&key, f, now),
            Resp::Pull { sent, page: Ok(p) } => engine.on_pull_response(&sent, p, now),
            Resp::Pull { sent, page: Err(f) } => engine.on_pull_failed(&sent, f, now),
            Resp::Verdicts(Ok(v)) => engine.on_verdicts(v, now),
            Resp::Verdicts(Err(f)) => engine.on_verdicts_failed(f, now),
        };
        let Some((txn, step)) = out else {
            self.log.push(format!("dev{d} ignored a stale answer"));
            return Ok(());
        };
        self.log.push(format!("dev{d} took an answer"));
        self.send(d, txn, step);
        Ok(())
    }

    fn timeout(&mut self, d: usize) {
        let now = self.now;
        let dev = &mut self.devices[d];
        let (Some(engine), Some(aw)) = (dev.engine.as_mut(), dev.awaiting.clone()) else {
            return;
        };
        let step = match aw {
            Awaiting::Push(k) => engine.on_push_failed(&k, Failure::Timeout, now),
            Awaiting::Pull(r) => engine.on_pull_failed(&r, Failure::Timeout, now),
            Awaiting::Verdicts => engine.on_verdicts_failed(Failure::Timeout, now),
        };
        self.log.push(format!("dev{d} timed out"));
        dev.awaiting = None;
        if let Some((txn, s)) = step {
            self.send(d, txn, s);
        }
    }

    /// One random event of the faulty world.
    fn event(&mut self) -> Result<(), SimFailure> {
        self.now += self.rng.u64(1..2_000);
        let d = self.rng.usize(..self.devices.len());
        match self.rng.u8(..100) {
            0..=29 => self.edit(d)?,
            30..=44 => self.start_sync(d),
            45..=79 if !self.net.is_empty() => {
                let i = self.rng.usize(..self.net.len());
                let msg = self.net.swap_remove(i);
                match msg {
                    Msg::ToServer { dev, life, req } => match self.rng.u8(..10) {
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
                            self.net.push(Msg::ToDevice { dev, life, resp: a });
                            self.net.push(Msg::ToDevice { dev, life, resp: b });
                        }
                        3 if matches!(req, Req::Push(_)) => {
                            self.log.push(format!("server fails dev{dev}'s push with 503 before commit"));
                            let f = Failure::Server { status: 503, message: "unavailable".into() };
                            let Req::Push(p) = &req else { return Ok(()) };
                            let resp = Resp::Push { key: p.attempt_key.clone(), result: Err(f) };
                            self.net.push(Msg::ToDevice { dev, life, resp });
                        }
                        _ => {
                            let resp = self.serve(&req);
                            self.log.push(format!("server answers dev{dev}"));
                            self.net.push(Msg::ToDevice { dev, life, resp });
                        }
                    },
                    Msg::ToDevice { dev, life, resp } => {
                        if self.rng.u8(..12) == 0 {
                            self.log.push(format!("net drops an answer to dev{dev}"));
                        } else {
                            self.deliver(dev, life, resp)?;
                        }
                    }
                }
            }
            80..=89 => self.timeout(d),
            90..=94 => {
                if self.devices[d].engine.is_some() {
                    self.crash(d);
                }
            }
            _ => {
                if self.devices[d].engine.is_none() {
                    self.log.push(format!("dev{d} reopens"));
                    self.reopen(d)?;
                }
            }
        }
        Ok(())
    }

    /// The network heals: drop what is in flight (late answers included get
    /// delivered first, to exercise stale acks), reopen everyone, sync each
    /// device to completion, twice round.
    fn heal(&mut self) -> Result<(), SimFailure> {
        self.log.push("network heals".into());
        self.healed = true;
        let msgs = std::mem::take(&mut self.net);
        for m in msgs {
            if let Msg::ToDevice { dev, life, resp } = m {
                self.deliver(dev, life, resp)?;
            }
        }
        self.net.clear();
        for d in 0..self.devices.len() {
            // Every app opens again (lifting stops for exhausted retries).
            self.reopen(d)?;
        }
        for _round in 0..2 {
            for d in 0..self.devices.len() {
                self.sync_clean(d)?;
            }
        }
        Ok(())
    }

    fn sync_clean(&mut self, d: usize) -> Result<(), SimFailure> {
        self.devices[d].awaiting = None;
        self.start_sync(d);
        for _ in 0..10_000 {
            let Some(msg) = self.net.pop() else { break };
            match msg {
                Msg::ToServer { dev, life, req } => {
                    let resp = self.serve(&req);
                    self.net.push(Msg::ToDevice { dev, life, resp });
                }
                Msg::ToDevice { dev, life, resp } => self.deliver(dev, life, resp)?,
            }
        }
        if !self.net.is_empty() {
            return Err(self.fail(format!("dev{d} did not finish syncing on a healed network")));
        }
        Ok(())
    }

    fn check(&self) -> Result<(), SimFailure> {
        let server_rows = self.server.rows(USER);
        let data = self.server.users.get(USER).cloned().unwrap_or_default();
        for (d, dev) in self.devices.iter().enumerate() {
            let engine = dev.engine.as_ref().ok_or_else(|| self.fail(format!("dev{d} is down after heal")))?;
            if engine.pending_len() != 0 {
                return Err(self.fail(format!("dev{d}: outbox not empty ({} ops)", engine.pending_len())));
            }
            let visible = engine.all_visible();
            if visible != server_rows {
                return Err(
                    self.fail(format!("dev{d}: visible rows differ from the server's\n device: {visible:?}\n server: {server_rows:?}"))
                );
            }
            let stored = dev.store.tables();
            if stored.base != server_rows {
                return Err(self.fail(format!("dev{d}: stored base rows differ from the server's")));
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
                    let engine = self.devices[r.dev].engine.as_ref().ok_or_else(|| self.fail("device down"))?;
                    if !engine.rejections().any(|x| x.op.op_id == op.op_id && &x.reason == reason) {
                        return Err(self.fail(format!("dev{}: rejected {} has no recorded reason", r.dev, op.op_id)));
                    }
                }
            }
        }
        Ok(())
    }
}

fn engine_config(cfg: &SimConfig, seed: u64) -> Config {
    // Small limits, so schedules reach them and ask the server what it remembers.
    let retry = RetryPolicy { max_attempts: 3, max_elapsed_ms: 30_000 };
    Config { max_batch: cfg.max_batch, pull_limit: cfg.pull_limit, seed, retry, ..Config::default() }
}

/// Runs one seeded schedule and checks every promise. `Err` carries the
/// seed and the schedule that broke one.
pub fn run(seed: u64, cfg: &SimConfig) -> Result<SimStats, SimFailure> {
    let mut sim = Sim::new(seed, cfg.clone());
    for _ in 0..cfg.events {
        sim.event()?;
    }
    sim.heal()?;
    sim.check()?;
    let mut stats = sim.stats.clone();
    stats.rejected =
        sim.server.users.get(USER).map_or(0, |d| d.verdicts.values().filter(|v| matches!(v, Remembered::Rejected { .. })).count());
    stats.stale_ignored = sim.devices.iter().filter_map(|d| d.engine.as_ref()).map(|e| e.metrics().stale_acks_ignored).sum();
    Ok(stats)
}

/// Runs `count` schedules from `first_seed` on and adds up their stats.
pub fn run_many(first_seed: u64, count: u64, cfg: &SimConfig) -> Result<SimStats, SimFailure> {
    let mut total = SimStats::default();
    for seed in first_seed..first_seed + count {
        let s = run(seed, cfg)?;
        total.ops += s.ops;
        total.rejected += s.rejected;
        total.pushes += s.pushes;
        total.lost_answers += s.lost_answers;
        total.dropped_requests += s.dropped_requests;
        total.duplicated_requests += s.duplicated_requests;
        total.late_answers += s.late_answers;
        total.crashes += s.crashes;
        total.stale_ignored += s.stale_ignored;
        total.reconciles += s.reconciles;
        total.orphaned_flights += s.orphaned_flights;
        total.wild_clock_edits += s.wild_clock_edits;
    }
    Ok(total)
}
