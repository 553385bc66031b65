//! A seeded simulation of shared spaces (PROTOCOL §3c, §4b) against the
//! in-memory server, which judges with the same core as the reference
//! server: users, spaces, and membership changes (grants, role changes,
//! revokes) interleaved with pushes — into spaces a user belongs to, and
//! into ones they do not — answers lost after the commit and sent again, and
//! pulls of every followed space.
//!
//! Each user pulls as the protocol tells a device to: it follows the spaces
//! it was told of (`joined`, from cursor 0), keeps each space's rows and
//! cursor, takes the roles it is told, and drops a space it `left` (the
//! contract, written plainly). Each user also has a **device running the
//! shipped driver** ([`crate::driver::Driver`], the browser client's loop,
//! in the simulated world of [`super::world`]): it records edits in its own
//! space and in shared ones — refused on the device when it knows the user
//! is a viewer there or left — and syncs, its answers lost now and then. After the schedule every user pulls until nothing is
//! new, every device syncs until it is done, and [`run`] checks:
//! - **isolation**: a pull never returned a row of a space the user was not
//!   a member of at that moment;
//! - **convergence**: every member's copy of every space equals the server's,
//!   and no user holds a space they are not a member of;
//! - **nothing lost**: every op sent has exactly one verdict, remembered
//!   once; every answer to a resend is the first answer (a rejection word
//!   for word); an applied op's space holds a mark at least as new as its own;
//! - **refusals stand**: an op refused for permission is still refused when
//!   sent again after its sender was granted a role;
//! - **the engine's device**: its rows of every space it is a member of equal
//!   the server's, it holds no row of another space, its outbox is empty, and
//!   every edit it recorded was applied or is in its rejections with the
//!   server's remembered code and reason — none lost; an edit refused on the
//!   device was refused by the rule the judge runs on what the device knew.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use fastrand::Rng;
use futures_util::FutureExt;

use super::world::{Msg, Req, Resp, SimHost, SimTransport, Who, World};
use super::{SimDriver, SimFailure};
use crate::attempt::Failure;
use crate::driver::{ClientError, Driver, Options};
use crate::engine::Config;
use crate::ids::SplitMix;
use crate::memory_server::MemoryServer;
use crate::memory_store::{MemoryConnection, MemoryStore};
use crate::protocol::{Fields, Op, OpId, Outcome, PushRequest, Row, RowKey, SpacesPullRequest, Value, VerdictsRequest};
use crate::schema::Schema;
use crate::space::{self, Follow, Role, FORBIDDEN, READ_ONLY};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SpacesConfig {
    /// How many users.
    pub users: usize,
    /// How many shared spaces (each created by a random user).
    pub spaces: usize,
    /// How many random events.
    pub events: usize,
}

impl Default for SpacesConfig {
    fn default() -> Self {
        SpacesConfig { users: 4, spaces: 3, events: 120 }
    }
}

/// What a run did, in numbers (proof the interesting cases happened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpacesStats {
    /// Ops sent for the first time.
    pub ops: usize,
    /// Ops applied.
    pub applied: usize,
    /// Ops refused `forbidden`.
    pub forbidden: usize,
    /// Ops refused `read_only`.
    pub read_only: usize,
    /// Grants and role changes.
    pub grants: usize,
    /// Revokes.
    pub revokes: usize,
    /// Spaces a user left (told by a pull).
    pub left: usize,
    /// Answers lost after the commit, and the op sent again.
    pub resent: usize,
    /// Refused ops sent again after their sender was granted a role.
    pub refused_then_granted: usize,
    /// Edits the engine's devices recorded.
    pub device_ops: usize,
    /// Edits the devices refused themselves (a viewer, a space left).
    pub device_refused: usize,
    /// Device edits that came back rejected for permission (queued when the role went).
    pub device_rejected: usize,
    /// Spaces a device dropped (told `left` by a pull).
    pub device_left: usize,
    /// Conflicts the devices told (each a concurrent lost edit, PROTOCOL §2a).
    pub conflicts: usize,
}

/// A failed run: the seed and what broke, with the schedule so far.
pub type SpacesFailure = SimFailure;

/// One user's device, following spaces as the protocol says.
#[derive(Debug, Default)]
struct Follower {
    follows: crate::space::Followed,
    rows: BTreeMap<String, BTreeMap<RowKey, Row>>,
}

/// One user's device running the shipped driver, and what it recorded.
struct Device {
    driver: Rc<SimDriver>,
    recorded: Vec<Op>,
}

struct Run {
    seed: u64,
    world: Rc<World>,
    devices: HashMap<String, Device>,
    rng: Rng,
    server: MemoryServer,
    users: Vec<String>,
    spaces: Vec<String>,
    followers: HashMap<String, Follower>,
    /// Every op sent: (sender, op, the first answer).
    sent: Vec<(String, Op, Outcome)>,
    stats: SpacesStats,
    log: Vec<String>,
    n: u64,
}

impl Run {
    fn fail(&self, problem: String) -> SpacesFailure {
        SpacesFailure { seed: self.seed, problem, log: self.log.clone() }
    }

    fn pick<'a>(&mut self, from: &'a [String]) -> &'a str {
        &from[self.rng.usize(..from.len())]
    }

    fn role(&self, space: &str, user: &str) -> Option<Role> {
        self.server.role(space, user)
    }

    fn membership(&mut self) {
        let space = self.pick(&self.spaces.clone()).to_owned();
        let user = self.pick(&self.users.clone()).to_owned();
        let role = match self.rng.u8(..4) {
            0 => None,
            1 => Some(Role::Viewer),
            2 => Some(Role::Editor),
            _ => Some(Role::Owner),
        };
        // An owner of the space acts (or, now and then, someone who is not).
        let owners: Vec<String> = self.users.iter().filter(|u| self.role(&space, u) == Some(Role::Owner)).cloned().collect();
        // Now and then the user themself acts: leaving, when removing.
        let by = if self.rng.u8(..8) == 0 {
            user.clone()
        } else if owners.is_empty() || self.rng.u8(..6) == 0 {
            self.pick(&self.users.clone()).to_owned()
        } else {
            self.pick(&owners).to_owned()
        };
        let result = self.server.set_member(Some(&by), &space, &user, role);
        self.log.push(format!("{by} sets {user} in {space} to {role:?}: {:?}", result.as_ref().map_err(|e| &e.error.code)));
        match result {
            // An invitation: the invitee answers it, mostly yes (PROTOCOL §3c).
            Ok(true) => {
                if self.rng.u8(..4) == 0 {
                    self.server.decline(&user, &space);
                    self.log.push(format!("{user} declines {space}"));
                } else {
                    let accepted = self.server.accept(&user, &space);
                    self.log.push(format!("{user} accepts {space}: {:?}", accepted.as_ref().map_err(|e| &e.error.code)));
                    self.stats.grants += 1;
                }
            }
            Ok(false) if role.is_some() => self.stats.grants += 1,
            Ok(false) => self.stats.revokes += 1,
            Err(_) => {}
        }
    }

    fn push(&mut self) -> Result<(), SpacesFailure> {
        let sender = self.pick(&self.users.clone()).to_owned();
        // Mostly a space the sender is in; sometimes any space, or their own.
        let space = match self.rng.u8(..5) {
            0 => space::personal(&sender),
            _ => self.pick(&self.spaces.clone()).to_owned(),
        };
        // Now and then, send again an op that was refused for permission.
        let refused: Vec<usize> = (0..self.sent.len())
            .filter(|&i| {
                self.sent[i].0 == sender
                    && matches!(&self.sent[i].2, Outcome::Rejected { code, .. } if code == FORBIDDEN || code == READ_ONLY)
            })
            .collect();
        let (op, again) = if !refused.is_empty() && self.rng.u8(..4) == 0 {
            let i = refused[self.rng.usize(..refused.len())];
            (self.sent[i].1.clone(), Some(i))
        } else {
            self.n += 1;
            let row = format!("r{}", self.rng.u8(..6));
            let mut fields = Fields::new();
            fields.insert("exercise".into(), Value::from("squat"));
            fields.insert("weightKg".into(), Value::from(80.0));
            fields.insert("reps".into(), Value::from(i64::from(self.rng.u8(1..20))));
            let op = Op {
                op_id: OpId::new(format!("{sender}:{}", self.n)),
                table: "sets".into(),
                row_id: row,
                fields,
                at: self.n,
                schema: 1,
                space: Some(space.clone()),
                seen: None,
            };
            (op, None)
        };
        let may_now = self.role(op.space.as_deref().unwrap_or_default(), &sender).is_some_and(Role::writes);
        let req = PushRequest { attempt_key: format!("{sender}:a{}", self.n), batch: vec![op.clone()] };
        let answer = self.server.push(&sender, &req).map_err(|e| self.fail(format!("push refused whole: {e:?}")))?;
        let outcome = answer.verdicts[0].outcome.clone();
        self.log.push(format!("{sender} pushes {} into {space}: {outcome:?}", op.op_id.as_str()));
        let first_of = |o: &Outcome| match o {
            Outcome::Duplicate => Outcome::Applied,
            Outcome::Rejected { reason, code, .. } => Outcome::Rejected { reason: reason.clone(), code: code.clone(), row: None },
            other => other.clone(),
        };
        match again {
            Some(i) => {
                if first_of(&outcome) != first_of(&self.sent[i].2) {
                    return Err(self.fail(format!("{} answered {outcome:?}, first {:?}", op.op_id.as_str(), self.sent[i].2)));
                }
                if may_now {
                    self.stats.refused_then_granted += 1;
                }
            }
            None => {
                self.stats.ops += 1;
                match &outcome {
                    Outcome::Applied => self.stats.applied += 1,
                    Outcome::Rejected { code, row, .. } => {
                        if code == FORBIDDEN {
                            self.stats.forbidden += 1;
                            if row.is_some() {
                                return Err(self.fail(format!("a forbidden op carried a row: {outcome:?}")));
                            }
                        } else if code == READ_ONLY {
                            self.stats.read_only += 1;
                        }
                    }
                    Outcome::Duplicate => return Err(self.fail(format!("a new op answered duplicate: {op:?}"))),
                }
                let expect_write = may_now;
                if expect_write != matches!(outcome, Outcome::Applied) {
                    return Err(self.fail(format!("{sender} may write in {space}: {may_now}, but the op got {outcome:?}")));
                }
                // The answer is lost after the commit; the op goes again.
                if self.rng.u8(..3) == 0 {
                    self.stats.resent += 1;
                    let again = self.server.push(&sender, &req).map_err(|e| self.fail(format!("{e:?}")))?;
                    if first_of(&again.verdicts[0].outcome) != first_of(&outcome) {
                        return Err(self.fail(format!("a resend answered {:?}, first {outcome:?}", again.verdicts[0].outcome)));
                    }
                }
                self.sent.push((sender, op, outcome));
            }
        }
        Ok(())
    }

    /// One pull of `user`, applied as a device does; checks isolation.
    fn pull(&mut self, user: &str) -> Result<bool, SpacesFailure> {
        let follower = self.followers.entry(user.to_owned()).or_default();
        let req = SpacesPullRequest { spaces: follower.follows.clone(), limit: Some(1 + self.rng.usize(..8)) };
        let answer = self.server.pull_spaces(user, &req);
        for page in &answer.spaces {
            if self.server.role(&page.space, user).is_none() && !page.changes.is_empty() {
                return Err(self.fail(format!("{user} pulled rows of {}, not a member", page.space)));
            }
        }
        let follower = self.followers.entry(user.to_owned()).or_default();
        for m in &answer.joined {
            follower.follows.insert(m.space.clone(), Follow { cursor: 0, role: Some(m.role) });
        }
        for m in &answer.roles {
            if let Some(f) = follower.follows.get_mut(&m.space) {
                f.role = Some(m.role);
            }
        }
        for s in &answer.left {
            follower.follows.remove(s);
            follower.rows.remove(s);
            self.stats.left += 1;
        }
        for page in answer.spaces {
            let rows = follower.rows.entry(page.space.clone()).or_default();
            for c in page.changes {
                rows.insert(c.key, c.row);
            }
            if let Some(f) = follower.follows.get_mut(&page.space) {
                f.cursor = f.cursor.max(page.cursor);
            }
        }
        let quiet = !answer.has_more && answer.joined.is_empty() && answer.left.is_empty() && answer.roles.is_empty();
        self.log.push(format!("{user} pulls (quiet: {quiet})"));
        Ok(quiet)
    }

    /// `user`'s device, opened on first use.
    fn device(&mut self, user: &str) -> Result<&mut Device, SpacesFailure> {
        if !self.devices.contains_key(user) {
            let dev = self.users.iter().position(|u| u == user).ok_or_else(|| self.fail(format!("no user {user}")))?;
            let who = Who { dev, ctx: 0, life: 1 };
            self.world.alive.borrow_mut().insert(who);
            let host = SimHost { world: self.world.clone(), who, random: RefCell::new(SplitMix::new(self.rng.u64(..))) };
            let transport = SimTransport { world: self.world.clone(), who };
            // Every other user's device reads its base rows on demand, keeping none between steps.
            let lazy = dev % 2 == 1;
            let config = Config { pull_limit: 3, max_batch: 4, cache_bytes: 0, ..Config::default() };
            let options = Options { config, auto_sync: false, resume_exhausted: true, user: None };
            let opened = Rc::new(RefCell::new(None));
            let slot = opened.clone();
            let store = Rc::new(if lazy { MemoryStore::lazy() } else { MemoryStore::new() });
            self.world.spawn(
                who,
                Box::pin(async move {
                    *slot.borrow_mut() = Some(Driver::start(MemoryConnection::new(store), transport, host, options).await);
                }),
            );
            self.world.run();
            let driver = match opened.borrow_mut().take() {
                Some(Ok(d)) => d,
                Some(Err(e)) => return Err(self.fail(format!("{user}'s device does not open: {e}"))),
                None => return Err(self.fail(format!("{user}'s device never opened"))),
            };
            self.devices.insert(user.to_owned(), Device { driver, recorded: Vec::new() });
        }
        self.devices.get_mut(user).ok_or_else(|| SimFailure { seed: 0, problem: "no device".into(), log: Vec::new() })
    }

    /// The device records an edit: its own row, or a row of a shared space
    /// (one it holds, or any); refused on the device only by the judge's rule.
    fn device_edit(&mut self) -> Result<(), SpacesFailure> {
        let user = self.pick(&self.users.clone()).to_owned();
        let space = match self.rng.u8(..3) {
            0 => None,
            _ => Some(self.pick(&self.spaces.clone()).to_owned()),
        };
        let row = format!("d{}", self.rng.u8(..4));
        let mut fields = Fields::new();
        fields.insert("exercise".into(), Value::from("row"));
        fields.insert("weightKg".into(), Value::from(50.0));
        fields.insert("reps".into(), Value::from(i64::from(self.rng.u8(1..20))));
        let driver = self.device(&user)?.driver.clone();
        // Without a space the edit goes where the row lives: that space's rule.
        let target = match &space {
            Some(s) => s.clone(),
            None => {
                let read = driver.ensure(&|_| vec![crate::engine::Engine::wants_edit("sets", &row)]).now_or_never();
                if !matches!(read, Some(Ok(()))) {
                    return Err(self.fail(format!("{user}'s device could not read its row: {read:?}")));
                }
                driver.engine.borrow().locate("sets", &row).map(|k| k.space).unwrap_or_default()
            }
        };
        let known = driver.engine.borrow().following().may_write(&target);
        let outcome: Result<Option<Op>, String> = match driver.change_with(space.as_deref(), "sets", &row, fields, false).now_or_never() {
            None => Err("a recording over memory waited".into()),
            Some(Err(ClientError::Denied(d))) if known.as_ref().err() == Some(&d) => Ok(None),
            Some(Err(e)) => Err(format!("{user}'s device refused an edit in {space:?}: {e}")),
            Some(Ok(id)) => {
                let op = driver.engine.borrow().pending().find(|o| o.op_id == id).cloned();
                match op {
                    Some(op) => {
                        if let Some(dev) = self.devices.get_mut(&user) {
                            dev.recorded.push(op.clone());
                        }
                        Ok(Some(op))
                    }
                    None => Err(format!("{user}'s device recorded {id} and does not hold it")),
                }
            }
        };
        self.world.run();
        match outcome.map_err(|e| self.fail(e))? {
            None => {
                self.stats.device_refused += 1;
                self.log.push(format!("{user}'s device refuses an edit in {space:?}"));
            }
            Some(op) => {
                self.stats.device_ops += 1;
                self.log.push(format!("{user}'s device records {} in {space:?}", op.op_id.as_str()));
            }
        }
        Ok(())
    }

    /// One sync cycle of `user`'s device, a push answer lost after the
    /// commit now and then. `true` when it ended done with nothing queued.
    fn device_sync(&mut self, user: &str) -> Result<bool, SpacesFailure> {
        let driver = self.device(user)?.driver.clone();
        let who = Who { dev: self.users.iter().position(|u| u == user).unwrap_or_default(), ctx: 0, life: 1 };
        self.world.advance(self.world.now.get() + 1_000);
        let lose = self.rng.u8(..4) == 0;
        let mut lost = false;
        let out = Rc::new(RefCell::new(None));
        let (slot, me) = (out.clone(), driver.clone());
        self.world.spawn(who, Box::pin(async move { *slot.borrow_mut() = Some(me.sync().await) }));
        for _ in 0..10_000 {
            self.world.run();
            if out.borrow().is_some() {
                break;
            }
            let msgs = std::mem::take(&mut *self.world.net.borrow_mut());
            if msgs.is_empty() {
                return Err(self.fail(format!("{user}'s device waits on nothing")));
            }
            for m in msgs {
                let Msg::ToServer { slot, req, .. } = m else { continue };
                match req {
                    Req::Push(req) => {
                        self.log.push(format!(
                            "{user}'s device pushes {:?}",
                            req.batch.iter().map(|o| (o.op_id.as_str(), o.space.as_deref())).collect::<Vec<_>>()
                        ));
                        let answer =
                            self.server.push(user, &req).map_err(|e| Failure::from_http(e.error.code.http_status(), Some(&e), None));
                        if lose && !lost {
                            lost = true;
                            self.stats.resent += 1;
                            self.world.fail(slot, Failure::Timeout);
                        } else {
                            self.world.answer(slot, Resp::Push(answer));
                        }
                    }
                    Req::Pull(req) => {
                        let answer = self.server.pull_spaces(user, &req);
                        self.stats.device_left += answer.left.len();
                        self.world.answer(slot, Resp::Pull(Ok(answer)));
                    }
                    Req::Verdicts(ids) => {
                        let answer = self.server.verdicts(user, &VerdictsRequest { op_ids: ids });
                        self.world.answer(slot, Resp::Verdicts(Ok(answer)));
                    }
                }
            }
        }
        let outcome = out.borrow_mut().take();
        let done = matches!(outcome, Some(Ok(o)) if o.ok) && driver.engine.borrow().pending_len() == 0;
        Ok(done)
    }

    /// Syncs `user`'s device until it has sent everything and pulled to the end.
    fn flush_device(&mut self, user: &str) -> Result<(), SpacesFailure> {
        let mut done = false;
        for _ in 0..50 {
            if self.device_sync(user)? {
                done = true;
                break;
            }
            // A wait (lost answers) is over when its time comes; a stop, when a person says so.
            let (driver, due) = match self.devices.get(user) {
                Some(d) => (d.driver.clone(), d.driver.engine.borrow().sync_state().next_retry_at),
                None => continue,
            };
            self.world.advance(due.unwrap_or_default().max(self.world.now.get() + 60_000));
            if driver.engine.borrow().recovery().is_some() {
                driver.resume();
                self.world.run();
            }
        }
        if !done {
            return Err(self.fail(format!("{user}'s device never finished syncing")));
        }
        Ok(())
    }

    /// The engine's device agrees with the server, and lost nothing (once
    /// every device has sent everything and pulled again).
    fn check_device(&mut self, user: &str) -> Result<(), SpacesFailure> {
        self.flush_device(user)?;
        let dev = &self.devices[user];
        if !matches!(dev.driver.ensure_all().now_or_never(), Some(Ok(()))) {
            return Err(self.fail(format!("{user}'s device could not read its rows")));
        }
        let engine = dev.driver.engine.borrow();
        let visible = engine.all_visible();
        let mut all = self.spaces.clone();
        all.push(space::personal(user));
        for s in &all {
            let local = engine.following().local(s).to_owned();
            let held: BTreeMap<RowKey, Row> = visible
                .iter()
                .filter(|(k, _)| k.space == local)
                .map(|(k, r)| (RowKey::new(k.table.as_str(), k.row_id.as_str()), r.clone()))
                .collect();
            let member = self.server.role(s, user).is_some();
            if !member && !held.is_empty() {
                return Err(self.fail(format!("{user}'s device holds rows of {s}, not a member")));
            }
            if member && held != self.server.space_rows(s) {
                return Err(self.fail(format!("{user}'s device's copy of {s} differs from the server's")));
            }
        }
        // Conflicts (PROTOCOL §2a): only lost edits, every one of this
        // device's in the spaces its user reads now.
        let truth = super::overwrites::truth(&self.server.journal);
        let told: std::collections::BTreeSet<super::overwrites::Lost> =
            engine.conflicts().into_iter().map(|x| (x.mine.op_id.clone(), x.field.clone())).collect();
        let reads = |s: &str| self.server.role(s, user).is_some();
        super::overwrites::check(&truth, engine.device_id(), &told, reads).map_err(|e| self.fail(format!("{user}'s device: {e}")))?;
        self.stats.conflicts += told.len();
        let data = self.server.users.get(user);
        for op in &dev.recorded {
            let remembered = data.and_then(|d| d.verdicts.get(&op.op_id));
            let rejection = engine.rejections().find(|r| r.op.op_id == op.op_id);
            match (remembered, rejection) {
                (Some(crate::judge::Remembered::Applied), None) => {}
                (Some(crate::judge::Remembered::Rejected { code, reason }), Some(r)) if *code == r.code && *reason == r.reason => {
                    if r.code == FORBIDDEN || r.code == READ_ONLY {
                        self.stats.device_rejected += 1;
                    }
                }
                (server, device) => {
                    return Err(self.fail(format!("{} of {user}'s device: server {server:?}, device {device:?}", op.op_id.as_str())))
                }
            }
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), SpacesFailure> {
        // The devices send what they hold, then each pulls to the end: no
        // device writes after that, so each must equal the server.
        let mut with_device: Vec<String> = self.devices.keys().cloned().collect();
        with_device.sort();
        for user in &with_device {
            self.flush_device(user)?;
        }
        for user in &with_device {
            self.check_device(user)?;
        }
        for user in self.users.clone() {
            let mut quiet = false;
            for _ in 0..200 {
                if self.pull(&user)? {
                    quiet = true;
                    break;
                }
            }
            if !quiet {
                return Err(self.fail(format!("{user} never caught up")));
            }
            let f = &self.followers[&user];
            let mut all = self.spaces.clone();
            all.push(space::personal(&user));
            for s in all {
                let member = self.server.role(&s, &user).is_some();
                let held = f.rows.get(&s).cloned().unwrap_or_default();
                if !member && (f.follows.contains_key(&s) || !held.is_empty()) {
                    return Err(self.fail(format!("{user} holds {s} without being a member")));
                }
                if member && held != self.server.space_rows(&s) {
                    return Err(self.fail(format!(
                        "{user}'s copy of {s} differs from the server's: {:?} vs {:?}",
                        held.keys().collect::<Vec<_>>(),
                        self.server.space_rows(&s).keys().collect::<Vec<_>>()
                    )));
                }
            }
        }
        // Nothing lost: one verdict per op, remembered once; applied ops are in their space.
        for (sender, op, outcome) in &self.sent {
            let data = &self.server.users[sender];
            if data.verdict_count.get(&op.op_id) != Some(&1) {
                return Err(self.fail(format!("{} remembered {:?} times", op.op_id.as_str(), data.verdict_count.get(&op.op_id))));
            }
            if let Outcome::Applied = outcome {
                let rows = self.server.space_rows(op.space.as_deref().unwrap_or_default());
                let row = rows.get(&op.row_key());
                let held = row.and_then(|r| r.cells.get("reps")).map(|c| c.mark.clone());
                if held.is_none_or(|m| crate::order::newer(&op.mark(), &m)) {
                    return Err(self.fail(format!("applied {} is not in its space", op.op_id.as_str())));
                }
            }
        }
        Ok(())
    }
}

/// Runs one seeded schedule.
pub fn run(seed: u64, cfg: &SpacesConfig) -> Result<SpacesStats, SpacesFailure> {
    let mut r = Run {
        seed,
        world: World::new(cfg.users, 1_000),
        rng: Rng::with_seed(seed),
        server: MemoryServer::new(Schema::workout()),
        users: (0..cfg.users).map(|i| format!("user{i}")).collect(),
        spaces: (0..cfg.spaces).map(|i| format!("space{i}")).collect(),
        followers: HashMap::new(),
        devices: HashMap::new(),
        sent: Vec::new(),
        stats: SpacesStats::default(),
        log: Vec::new(),
        n: 0,
    };
    for s in r.spaces.clone() {
        let owner = r.pick(&r.users.clone()).to_owned();
        r.server.create_space(&s, &owner).map_err(|e| r.fail(format!("{e:?}")))?;
        r.log.push(format!("{owner} creates {s}"));
    }
    for _ in 0..cfg.events {
        match r.rng.u8(..14) {
            0..=2 => r.membership(),
            3..=6 => r.push()?,
            7..=9 => {
                let user = r.pick(&r.users.clone()).to_owned();
                r.pull(&user)?;
            }
            10..=11 => r.device_edit()?,
            _ => {
                let user = r.pick(&r.users.clone()).to_owned();
                r.device_sync(&user)?;
            }
        }
    }
    r.check()?;
    Ok(r.stats)
}

/// Runs `count` schedules from `first_seed`; the stats summed.
pub fn run_many(first_seed: u64, count: u64, cfg: &SpacesConfig) -> Result<SpacesStats, SpacesFailure> {
    super::many(first_seed, count, cfg, run)
}

super::add_up!(SpacesStats {
    ops,
    applied,
    forbidden,
    read_only,
    grants,
    revokes,
    left,
    resent,
    refused_then_granted,
    device_ops,
    device_refused,
    device_rejected,
    device_left,
    conflicts,
});
