//! The simulated world the shipped driver runs in: a single-threaded
//! executor, a clock that moves only when the schedule says so, a network of
//! requests waiting for the schedule to serve, drop, duplicate or time them
//! out, a cycle lock and a broadcast channel per device. Everything is
//! deterministic: tasks run in id order, messages are picked by the seed.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use crate::attempt::Failure;
use crate::driver::{CallError, Host, Page, Task, Transport};
use crate::ids::SplitMix;
use crate::protocol::{
    CreateSpace, MembersList, OpId, PushRequest, PushResponse, SetMember, SpacesPullRequest, SpacesPullResponse, VerdictsResponse,
};
use crate::space::Membership;
use crate::store::Txn;

/// A context of a device: (device, context, life). A crash ends a life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Who {
    pub dev: usize,
    pub ctx: usize,
    pub life: u32,
}

/// A request on the wire.
#[derive(Debug, Clone)]
pub enum Req {
    Push(PushRequest),
    Pull(SpacesPullRequest),
    Verdicts(Vec<OpId>),
}

/// An answer on the wire (or a failure the context will see instead).
#[derive(Debug, Clone)]
pub enum Resp {
    Push(Result<PushResponse, Failure>),
    Pull(Result<SpacesPullResponse, Failure>),
    Verdicts(Result<VerdictsResponse, Failure>),
}

/// A message in flight, for the request waiting in `slot`.
#[derive(Debug, Clone)]
pub enum Msg {
    ToServer { who: Who, slot: u64, req: Req },
    ToDevice { who: Who, slot: u64, resp: Resp },
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Push,
    Pull,
    Verdicts,
}

/// A request a context waits on.
struct Slot {
    who: Who,
    kind: Kind,
    answer: Option<Resp>,
    waker: Option<Waker>,
}

/// A committed step told to the contexts that were listening, as the
/// browser's channel carries it ([`crate::told`]).
struct Broadcast {
    dev: usize,
    to: Vec<Who>,
    told: String,
}

struct Lock {
    held: Cell<bool>,
    waiters: RefCell<Vec<Waker>>,
}

struct TaskWaker {
    id: u64,
    woken: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        if let Ok(mut w) = self.woken.lock() {
            w.insert(self.id);
        }
    }
}

/// The world every context of every device shares.
pub struct World {
    pub now: Cell<u64>,
    pub net: RefCell<Vec<Msg>>,
    slots: RefCell<BTreeMap<u64, Slot>>,
    next_id: Cell<u64>,
    timers: RefCell<Vec<(u64, Waker)>>,
    broadcasts: RefCell<Vec<Broadcast>>,
    locks: Vec<Rc<Lock>>,
    /// Contexts alive now, with their life.
    pub alive: RefCell<BTreeSet<Who>>,
    tasks: RefCell<BTreeMap<u64, (Who, Task)>>,
    spawned: RefCell<Vec<(Who, Task)>>,
    woken: Arc<Mutex<BTreeSet<u64>>>,
    /// A broken moment: a context's clock reads this instead.
    pub wild_now: RefCell<Option<(Who, u64)>>,
    /// Answers that came for a request no one waits on any more.
    pub late_answers: Cell<usize>,
}

impl World {
    pub fn new(devices: usize, now: u64) -> Rc<World> {
        Rc::new(World {
            now: Cell::new(now),
            net: RefCell::new(Vec::new()),
            slots: RefCell::new(BTreeMap::new()),
            next_id: Cell::new(1),
            timers: RefCell::new(Vec::new()),
            broadcasts: RefCell::new(Vec::new()),
            locks: (0..devices).map(|_| Rc::new(Lock { held: Cell::new(false), waiters: RefCell::new(Vec::new()) })).collect(),
            alive: RefCell::new(BTreeSet::new()),
            tasks: RefCell::new(BTreeMap::new()),
            spawned: RefCell::new(Vec::new()),
            woken: Arc::new(Mutex::new(BTreeSet::new())),
            wild_now: RefCell::new(None),
            late_answers: Cell::new(0),
        })
    }

    fn id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Starts `task` as one of `who`'s.
    pub fn spawn(&self, who: Who, task: Task) {
        self.spawned.borrow_mut().push((who, task));
    }

    /// Runs every task that can move until none can.
    pub fn run(&self) {
        loop {
            let spawned = std::mem::take(&mut *self.spawned.borrow_mut());
            for (who, task) in spawned {
                if !self.alive.borrow().contains(&who) {
                    continue;
                }
                let id = self.id();
                self.tasks.borrow_mut().insert(id, (who, task));
                if let Ok(mut w) = self.woken.lock() {
                    w.insert(id);
                }
            }
            let next = self.woken.lock().ok().and_then(|mut w| w.pop_first());
            let Some(id) = next else {
                if self.spawned.borrow().is_empty() {
                    return;
                }
                continue;
            };
            let Some((who, mut task)) = self.tasks.borrow_mut().remove(&id) else { continue };
            let waker = Waker::from(Arc::new(TaskWaker { id, woken: self.woken.clone() }));
            let mut cx = Context::from_waker(&waker);
            if task.as_mut().poll(&mut cx).is_pending() && self.alive.borrow().contains(&who) {
                self.tasks.borrow_mut().insert(id, (who, task));
            }
        }
    }

    /// `who` is gone: its tasks are dropped (a held lock with them), its
    /// requests' answers will find no one.
    pub fn kill(&self, who: Who) {
        self.alive.borrow_mut().remove(&who);
        let dead: Vec<u64> = self.tasks.borrow().iter().filter(|(_, (w, _))| *w == who).map(|(id, _)| *id).collect();
        let tasks: Vec<Task> = dead.iter().filter_map(|id| self.tasks.borrow_mut().remove(id)).map(|(_, t)| t).collect();
        drop(tasks);
        self.slots.borrow_mut().retain(|_, s| s.who != who);
        self.spawned.borrow_mut().retain(|(w, _)| *w != who);
    }

    /// Moves the clock to `now` and wakes the timers that are due.
    pub fn advance(&self, now: u64) {
        self.now.set(now.max(self.now.get()));
        let now = self.now.get();
        let mut timers = self.timers.borrow_mut();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut *timers).into_iter().partition(|(at, _)| *at <= now);
        *timers = later;
        drop(timers);
        for (_, w) in due {
            w.wake();
        }
    }

    /// When the next timer is due, if any is set.
    pub fn next_timer(&self) -> Option<u64> {
        self.timers.borrow().iter().map(|(at, _)| *at).min()
    }

    /// Puts an answer in its slot: the waiting context takes it. `false`
    /// when no one waits for it any more (a late answer).
    pub fn answer(&self, slot: u64, resp: Resp) -> bool {
        let mut slots = self.slots.borrow_mut();
        match slots.get_mut(&slot) {
            Some(s) if s.answer.is_none() => {
                s.answer = Some(resp);
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
                true
            }
            _ => {
                self.late_answers.set(self.late_answers.get() + 1);
                false
            }
        }
    }

    /// The requests of device `dev` still waiting for an answer.
    pub fn waiting(&self, dev: usize) -> Vec<u64> {
        self.slots.borrow().iter().filter(|(_, s)| s.who.dev == dev && s.answer.is_none()).map(|(id, _)| *id).collect()
    }

    /// Fails a waiting request with `f` (its fetch timed out).
    pub fn fail(&self, slot: u64, f: Failure) -> bool {
        let kind = match self.slots.borrow().get(&slot) {
            Some(s) => s.kind,
            None => return false,
        };
        let resp = match kind {
            Kind::Push => Resp::Push(Err(f)),
            Kind::Pull => Resp::Pull(Err(f)),
            Kind::Verdicts => Resp::Verdicts(Err(f)),
        };
        self.answer(slot, resp)
    }

    /// Every request still waiting, anywhere.
    pub fn all_waiting(&self) -> Vec<u64> {
        self.slots.borrow().iter().filter(|(_, s)| s.answer.is_none()).map(|(id, _)| *id).collect()
    }

    /// The oldest broadcast of device `dev` not yet delivered, and who listened.
    pub fn next_broadcast(&self, dev: usize) -> Option<(Vec<Who>, String)> {
        let mut b = self.broadcasts.borrow_mut();
        let i = b.iter().position(|x| x.dev == dev)?;
        let x = b.remove(i);
        Some((x.to, x.told))
    }

    /// Forgets every broadcast and message (a world where everyone reopens).
    pub fn clear_wire(&self) {
        self.net.borrow_mut().clear();
        self.broadcasts.borrow_mut().clear();
    }
}

/// The future of a request: ready once the schedule answers it (or times it out).
struct Call {
    world: Rc<World>,
    slot: u64,
}

impl Future for Call {
    type Output = Resp;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Resp> {
        let mut slots = self.world.slots.borrow_mut();
        let Some(s) = slots.get_mut(&self.slot) else {
            return Poll::Pending; // its context is gone: never answered
        };
        match s.answer.take() {
            Some(r) => {
                slots.remove(&self.slot);
                Poll::Ready(r)
            }
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A context's network: every request waits for the schedule.
pub struct SimTransport {
    pub world: Rc<World>,
    pub who: Who,
}

impl SimTransport {
    async fn call(&self, req: Req) -> Resp {
        let slot = self.world.id();
        let kind = match req {
            Req::Push(_) => Kind::Push,
            Req::Pull(_) => Kind::Pull,
            Req::Verdicts(_) => Kind::Verdicts,
        };
        self.world.slots.borrow_mut().insert(slot, Slot { who: self.who, kind, answer: None, waker: None });
        self.world.net.borrow_mut().push(Msg::ToServer { who: self.who, slot, req });
        Call { world: self.world.clone(), slot }.await
    }
}

fn wrong(what: &str) -> Failure {
    Failure::BadResponse(format!("the answer to a {what} was for another request"))
}

fn no_calls() -> CallError {
    CallError { code: crate::protocol::Code::Network.as_str().into(), message: "membership calls are not simulated".into() }
}

impl Transport for SimTransport {
    async fn push(&self, req: &PushRequest) -> Result<PushResponse, Failure> {
        match self.call(Req::Push(req.clone())).await {
            Resp::Push(r) => r,
            _ => Err(wrong("push")),
        }
    }
    async fn pull(&self, req: &SpacesPullRequest) -> Result<SpacesPullResponse, Failure> {
        match self.call(Req::Pull(req.clone())).await {
            Resp::Pull(r) => r,
            _ => Err(wrong("pull")),
        }
    }
    async fn verdicts(&self, op_ids: &[OpId]) -> Result<VerdictsResponse, Failure> {
        match self.call(Req::Verdicts(op_ids.to_vec())).await {
            Resp::Verdicts(r) => r,
            _ => Err(wrong("check")),
        }
    }
    async fn schema(&self, _etag: Option<&str>) -> Result<Option<(String, Option<String>)>, Failure> {
        // A server without `/v1/schema`: every edit is the server's to judge.
        Err(Failure::Refused("no schema here".into()))
    }
    async fn refresh_auth(&self) -> Result<bool, Failure> {
        Ok(false)
    }
    async fn prepare(&self) -> Result<(), Failure> {
        Ok(())
    }
    fn set_user(&self, _user: Option<&str>) {}
    async fn create_space(&self, _req: &CreateSpace) -> Result<Membership, CallError> {
        Err(no_calls())
    }
    async fn set_member(&self, _req: &SetMember) -> Result<crate::protocol::space::MemberChange, CallError> {
        Err(no_calls())
    }
    async fn members(&self, _space: &str, _page: Page) -> Result<MembersList, CallError> {
        Err(no_calls())
    }
    async fn invitations(&self, _page: Page) -> Result<crate::protocol::space::InvitationsList, CallError> {
        Err(no_calls())
    }

    async fn invited(&self, _space: &str, _page: Page) -> Result<crate::protocol::space::InvitationsList, CallError> {
        Err(no_calls())
    }
    async fn accept(&self, _space: &str) -> Result<Membership, CallError> {
        Err(no_calls())
    }
    async fn decline(&self, _space: &str) -> Result<(), CallError> {
        Err(no_calls())
    }
    async fn leave(&self, _space: &str) -> Result<(), CallError> {
        Err(no_calls())
    }
}

/// A context's host: the device's lock and channel, the world's clock.
pub struct SimHost {
    pub world: Rc<World>,
    pub who: Who,
    /// The context's own stream of randomness, from the schedule's seed.
    pub random: RefCell<SplitMix>,
}

/// Holds a device's cycle lock until dropped (or until its context dies).
pub struct SimGuard(Rc<Lock>);

impl Drop for SimGuard {
    fn drop(&mut self) {
        self.0.held.set(false);
        for w in self.0.waiters.take() {
            w.wake();
        }
    }
}

struct Acquire {
    lock: Rc<Lock>,
    if_available: bool,
}

impl Future for Acquire {
    type Output = Option<SimGuard>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SimGuard>> {
        if !self.lock.held.get() {
            self.lock.held.set(true);
            return Poll::Ready(Some(SimGuard(self.lock.clone())));
        }
        if self.if_available {
            return Poll::Ready(None);
        }
        self.lock.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

/// A timer of the world's clock.
pub struct Sleep {
    world: Rc<World>,
    due: u64,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.world.now.get() >= self.due {
            return Poll::Ready(());
        }
        self.world.timers.borrow_mut().push((self.due, cx.waker().clone()));
        Poll::Pending
    }
}

impl Host for SimHost {
    type Guard = SimGuard;
    type Sleep = Sleep;

    async fn lock(&self, if_available: bool) -> Result<Option<SimGuard>, String> {
        Ok(Acquire { lock: self.world.locks[self.who.dev].clone(), if_available }.await)
    }

    fn broadcast(&self, txn: &Txn) {
        let to = self.world.alive.borrow().iter().filter(|w| w.dev == self.who.dev && w.ctx != self.who.ctx).copied().collect();
        self.world.broadcasts.borrow_mut().push(Broadcast { dev: self.who.dev, to, told: crate::told::tell(txn) });
    }

    fn now(&self) -> u64 {
        match *self.world.wild_now.borrow() {
            Some((who, at)) if who == self.who => at,
            _ => self.world.now.get(),
        }
    }

    fn entropy(&self) -> u64 {
        self.random.borrow_mut().next_u64()
    }

    fn offline(&self) -> bool {
        false
    }

    fn wake_when_online(&self) {}

    fn sleep(&self, ms: u64) -> Sleep {
        Sleep { world: self.world.clone(), due: self.world.now.get().saturating_add(ms) }
    }

    fn spawn(&self, task: Task) {
        self.world.spawn(self.who, task);
    }

    fn close(&self) {}
}
