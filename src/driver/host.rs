//! The host: what a context of the device gives the driver besides storage
//! and the network — the cycle lock, the channel to the other contexts,
//! timers, the clock, randomness, and whether it knows it is offline.
//!
//! The browser's host is Web Locks, `BroadcastChannel` and `gloo-timers`
//! (the wasm adapter); the simulator's host is a lock, a channel and a clock
//! it controls, so schedules replay from a seed.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::store::Txn;

/// A task the host runs on its own (a timer's sync, a reservation of ids).
pub type Task = Pin<Box<dyn Future<Output = ()>>>;

/// What a context of the device brings to the driver.
#[allow(async_fn_in_trait)]
pub trait Host {
    /// Held while a context runs a cycle; dropping it lets the next one in.
    type Guard;
    /// A timer: see [`Host::sleep`].
    type Sleep: Future<Output = ()> + 'static;
    /// The database's cycle lock, shared by every context of the device (tabs
    /// and the Service Worker): one cycle at a time. With `if_available`,
    /// `Ok(None)` when another context holds it (nothing waits); without, it
    /// waits its turn. `Err` in the lock's own words if it cannot be had.
    async fn lock(&self, if_available: bool) -> Result<Option<Self::Guard>, String>;
    /// Tells the other contexts of a committed step, in commit order.
    fn broadcast(&self, txn: &Txn);
    /// Milliseconds since the epoch.
    fn now(&self) -> u64;
    /// 64 random bits (device ids, jitter seeds).
    fn entropy(&self) -> u64;
    /// Whether this context knows it is offline: it then sends nothing, and
    /// waits for [`Host::wake_when_online`]'s wake-up.
    fn offline(&self) -> bool;
    /// What this context is, as a person reads it in the inspector's list of
    /// sync cycles: `tab` (a page) or `worker` (the Service Worker).
    fn label(&self) -> &'static str {
        "tab"
    }
    /// Asks the platform to start a cycle once the network is back, even if
    /// this context is gone by then (Background Sync).
    fn wake_when_online(&self);
    /// Resolves after `ms` milliseconds.
    fn sleep(&self, ms: u64) -> Self::Sleep;
    /// Runs `task` to its end, on its own.
    fn spawn(&self, task: Task);
    /// The database was closed: stop hearing the other contexts.
    fn close(&self);
}

/// Wakes every waiter at once: a context waits for a cycle to end on this,
/// never by polling.
#[derive(Debug, Default)]
pub struct Signal {
    rounds: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Signal {
    /// Wakes everyone waiting on [`Signal::next`].
    pub fn notify(&self) {
        self.rounds.set(self.rounds.get() + 1);
        for w in self.waiters.take() {
            w.wake();
        }
    }

    /// Resolves at the next [`Signal::notify`].
    pub fn next(&self) -> Next<'_> {
        Next { signal: self, seen: self.rounds.get() }
    }
}

/// The future of [`Signal::next`].
#[derive(Debug)]
pub struct Next<'a> {
    signal: &'a Signal,
    seen: u64,
}

impl Future for Next<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.rounds.get() != self.seen {
            return Poll::Ready(());
        }
        self.signal.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
