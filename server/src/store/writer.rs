//! SQLite's single writer takes its users in turn.
//!
//! Every write transaction holds the one write connection from `BEGIN
//! IMMEDIATE` to its commit. Left to the connection pool, writers are served
//! in arrival order: a user who sends many writes at once — membership
//! writes from several connections, say — stands all of them in front of a
//! bystander's one-op push. Here the writer is shared by start-time fair
//! queuing, one transaction counting one: a user's n-th waiting write gets
//! the tag "the round now served, or the one after their last write,
//! whichever is later", plus n − 1, and the smallest tag goes next (the
//! earliest arrival among equals). A bystander then waits for at most one
//! transaction of each other user, not for everything they sent; a user who
//! was idle gets no credit to spend later, so nobody is ever held back
//! long. (A user's pushes already wait for each other before they get
//! here, [`crate::turn`]; this covers every write.)
//!
//! Ordering by each user's recent use of the writer instead was tried and
//! measured worse: a bystander who pushes steadily had used it more than
//! each of six flooding users, and was served after them all
//! (BENCHMARKS.md, "Fair shares at the writer").
//!
//! PostgreSQL takes many writers at once and has no such queue: its writes
//! go straight to the pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Who asks for the writer: a user, or the server's own work (migrations,
/// probes, webhook bookkeeping), which counts as one more user.
pub(crate) const SERVER: &str = "";

/// Users whose last tag is remembered before those already passed are dropped.
const REMEMBERED: usize = 4096;

/// The writer's queue (one per SQLite database).
#[derive(Debug)]
pub(crate) struct Gate {
    state: Mutex<State>,
    /// Serve in arrival order, as the pool alone would (sabotage: the tests' teeth).
    arrival_order: bool,
}

#[derive(Debug, Default)]
struct State {
    /// A transaction holds the writer.
    busy: bool,
    /// The tag of the write served last: the round now served.
    round: u64,
    /// Each user's next free tag (one past their last write's).
    next: HashMap<Arc<str>, u64>,
    waiting: Vec<Waiter>,
    arrivals: u64,
}

#[derive(Debug)]
struct Waiter {
    tag: u64,
    arrival: u64,
    grant: oneshot::Sender<Permit>,
}

/// The writer, held until dropped (after the transaction's commit or rollback).
#[derive(Debug)]
pub(crate) struct Permit {
    gate: Arc<Gate>,
    /// Never granted (its waiter had gone): dropping it releases nothing.
    void: bool,
}

impl State {
    /// The tag of `user`'s next write.
    fn tag(&mut self, user: &str) -> u64 {
        if self.next.len() > REMEMBERED {
            let round = self.round;
            self.next.retain(|_, next| *next > round);
        }
        let round = self.round;
        let next = self.next.entry(user.into()).or_insert(0);
        let tag = (*next).max(round);
        *next = tag + 1;
        tag
    }
}

impl Gate {
    pub(crate) fn new(arrival_order: bool) -> Arc<Gate> {
        Arc::new(Gate { state: Mutex::default(), arrival_order })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `user` may write. A caller that gives up waiting (its
    /// request ended) leaves the queue; the writer goes to the next.
    pub(crate) async fn enter(self: &Arc<Self>, user: &str) -> Permit {
        let granted = {
            let mut s = self.lock();
            let tag = s.tag(user);
            if !s.busy && s.waiting.is_empty() {
                s.busy = true;
                s.round = tag;
                return Permit { gate: Arc::clone(self), void: false };
            }
            let (grant, granted) = oneshot::channel();
            s.arrivals += 1;
            let arrival = s.arrivals;
            s.waiting.push(Waiter { tag, arrival, grant });
            granted
        };
        match granted.await {
            Ok(permit) => permit,
            // The sender lives in `self`, which the caller holds: it is never dropped unsent.
            Err(_) => Box::pin(self.enter(user)).await,
        }
    }

    /// Hands the writer to the waiting write with the smallest tag.
    fn release(self: &Arc<Self>) {
        let mut s = self.lock();
        while !s.waiting.is_empty() {
            let key = |w: &Waiter| if self.arrival_order { (0, w.arrival) } else { (w.tag, w.arrival) };
            let next = (0..s.waiting.len()).min_by_key(|&i| key(&s.waiting[i])).unwrap_or(0);
            let waiter = s.waiting.swap_remove(next);
            s.round = s.round.max(waiter.tag);
            match waiter.grant.send(Permit { gate: Arc::clone(self), void: false }) {
                Ok(()) => return,
                Err(mut unsent) => unsent.void = true,
            }
        }
        s.busy = false;
    }

    /// Writes waiting for the writer.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.void {
            self.gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A flooder holds the writer with three more writes queued, then a
    /// bystander asks: the order the queued writes are served in.
    async fn order(arrival_order: bool) -> Vec<String> {
        let gate = Gate::new(arrival_order);
        let done = Arc::new(Mutex::new(Vec::new()));
        let first = gate.enter("flood").await;
        let mut tasks = Vec::new();
        for (user, i) in [("flood", 1), ("flood", 2), ("flood", 3), ("bystander", 0)] {
            let (g, done) = (Arc::clone(&gate), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                let _p = g.enter(user).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                done.lock().unwrap().push(format!("{user}{i}"));
            }));
            while gate.waiting() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order = done.lock().unwrap().clone();
        order
    }

    #[tokio::test]
    async fn a_bystander_waits_for_one_write_of_a_flooder_not_all() {
        assert_eq!(order(false).await, ["bystander0", "flood1", "flood2", "flood3"]);
    }

    #[tokio::test]
    async fn in_arrival_order_the_bystander_waits_for_the_whole_flood() {
        assert_eq!(order(true).await, ["flood1", "flood2", "flood3", "bystander0"]);
    }

    #[tokio::test]
    async fn users_take_turns_while_they_all_have_writes_waiting() {
        let gate = Gate::new(false);
        let done = Arc::new(Mutex::new(Vec::new()));
        let first = gate.enter("x").await;
        let mut tasks = Vec::new();
        for user in ["a", "a", "a", "b", "b", "c"] {
            let (g, done) = (Arc::clone(&gate), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                let _p = g.enter(user).await;
                done.lock().unwrap().push(user);
            }));
            while gate.waiting() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*done.lock().unwrap(), ["a", "b", "c", "a", "b", "a"]);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_writer_to_the_next() {
        let gate = Gate::new(false);
        let held = gate.enter("a").await;
        let gone = tokio::spawn({
            let gate = Arc::clone(&gate);
            async move { gate.enter("b").await }
        });
        while gate.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        drop(held);
        let next = tokio::time::timeout(Duration::from_secs(1), gate.enter("c")).await;
        assert!(next.is_ok(), "the writer is free again");
    }
}
