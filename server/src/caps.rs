//! The per-user caps of the guard ([`crate::guard`]): how many requests in
//! progress and event streams each user holds, a place taken for each and
//! given back when it drops; and the guard's other bounds.
//!
//! Event streams are the one thing a crowd holds for long: a thousand member
//! ids with one stream each would take every connection, and a bystander's
//! `/healthz` and pull would find none. So streams have two caps, the user's
//! before the server's: a user holds at most `max_streams` of them, and all
//! users together at most the connections less a reserve that only short
//! requests use. At the server's cap the shares are evened out: a user with
//! at least two streams more than the newcomer gives up their oldest one
//! (it ends; its device reconnects and pulls), else the newcomer is refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

/// Most refused bodies drained at once; beyond, the answer goes without draining.
const REFUSAL_DRAINS: usize = 64;
/// Most `429` answers held back at once; beyond, they go at once. Well under
/// the connection reserve: a held-back answer keeps its connection busy.
const REFUSALS_HELD: usize = 64;

/// An event stream's place among its user's streams and the server's: the
/// stream holds it to its end, and ends when [`StreamPlace::cut`] fires.
#[derive(Debug, Clone)]
pub struct StreamPlace(Arc<StreamSlot>);

impl StreamPlace {
    /// Completes when this stream's place was given to a user with fewer streams.
    pub async fn cut(&self) {
        self.0.cut.notified().await
    }
}

/// The guard's limits and its per-user counts; part of [`crate::AppState`].
#[derive(Debug)]
pub struct Caps {
    /// Time to receive a whole request body, from its headers.
    pub body_timeout: Duration,
    /// Requests in progress (push, pull, verdicts, schema, spaces), per user.
    pub(crate) requests: Arc<PerUser>,
    /// Open event streams, per user and in all.
    pub(crate) streams: Arc<Streams>,
    /// Refused bodies being drained.
    pub(crate) drains: Semaphore,
    /// How long a `429` is held back before it is sent.
    pub refusal_delay: Duration,
    /// `429` answers being held back.
    pub(crate) held: Semaphore,
}

impl Caps {
    /// Caps of `max_requests` requests in progress and `max_streams` event
    /// streams per user (0: none), and of `all_streams` event streams in all (0: none).
    pub fn new(
        body_timeout: Duration,
        max_requests: usize,
        max_streams: usize,
        all_streams: usize,
        refusal_delay: Duration,
    ) -> Caps {
        Caps {
            body_timeout,
            requests: Arc::new(PerUser::new(max_requests)),
            streams: Arc::new(Streams { per_user: max_streams, all: all_streams, inner: Mutex::default() }),
            drains: Semaphore::new(REFUSAL_DRAINS),
            refusal_delay,
            held: Semaphore::new(REFUSALS_HELD),
        }
    }

    /// Event streams open now, all users together (for `/metrics`).
    pub fn streams_open(&self) -> usize {
        self.streams.inner.lock().unwrap_or_else(|p| p.into_inner()).open
    }
}

/// How many of something each user holds, under a cap. Hand-written: a map of counts.
#[derive(Debug)]
pub(crate) struct PerUser {
    cap: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// One held place of a [`PerUser`]; dropping it gives the place back.
#[derive(Debug)]
pub struct Place {
    owner: Arc<PerUser>,
    user: String,
}

impl PerUser {
    fn new(cap: usize) -> PerUser {
        PerUser { cap, held: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn take(self: &Arc<Self>, user: &str) -> Option<Place> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(user.to_owned()).or_insert(0);
        if self.cap > 0 && *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(Place { owner: Arc::clone(self), user: user.to_owned() })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

/// Why a new event stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRefusal {
    /// The user holds their cap of streams.
    User,
    /// The server holds its cap of streams, and nobody holds two more than this user.
    Server,
}

/// The open event streams: per user, oldest first, and how many in all.
#[derive(Debug)]
pub(crate) struct Streams {
    per_user: usize,
    all: usize,
    inner: Mutex<StreamsInner>,
}

#[derive(Debug, Default)]
struct StreamsInner {
    next: u64,
    open: usize,
    users: HashMap<String, BTreeMap<u64, Arc<Notify>>>,
}

/// One open stream's entry; dropping it frees the place (unless it was cut, which freed it).
#[derive(Debug)]
struct StreamSlot {
    owner: Arc<Streams>,
    user: String,
    id: u64,
    cut: Arc<Notify>,
}

impl Streams {
    /// A place for a new stream of `user`, and whether another user's stream
    /// was cut to make it (see the module doc).
    pub(crate) fn take(self: &Arc<Self>, user: &str) -> Result<(StreamPlace, bool), StreamRefusal> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mine = inner.users.get(user).map_or(0, BTreeMap::len);
        if self.per_user > 0 && mine >= self.per_user {
            return Err(StreamRefusal::User);
        }
        let mut cut = false;
        if self.all > 0 && inner.open >= self.all {
            let heaviest = inner.users.iter().max_by_key(|(_, s)| s.len()).map(|(u, s)| (u.clone(), s.len()));
            let Some((other, theirs)) = heaviest.filter(|(_, theirs)| *theirs >= mine + 2) else {
                return Err(StreamRefusal::Server);
            };
            if let Some(streams) = inner.users.get_mut(&other) {
                if let Some((_, oldest)) = streams.pop_first() {
                    // notify_one keeps the wake-up should the stream not be waiting yet.
                    oldest.notify_one();
                    inner.open -= 1;
                    cut = true;
                }
                if theirs == 1 {
                    inner.users.remove(&other);
                }
            }
        }
        let id = inner.next;
        inner.next += 1;
        inner.open += 1;
        let signal = Arc::new(Notify::new());
        inner.users.entry(user.to_owned()).or_default().insert(id, Arc::clone(&signal));
        let slot = StreamSlot { owner: Arc::clone(self), user: user.to_owned(), id, cut: signal };
        Ok((StreamPlace(Arc::new(slot)), cut))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut inner = self.owner.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(streams) = inner.users.get_mut(&self.user) else { return };
        if streams.remove(&self.id).is_some() {
            if streams.is_empty() {
                inner.users.remove(&self.user);
            }
            inner.open -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams(per_user: usize, all: usize) -> Arc<Streams> {
        Arc::new(Streams { per_user, all, inner: Mutex::default() })
    }

    #[test]
    fn the_users_cap_holds_before_the_servers_and_shares_are_evened_out() {
        let s = streams(3, 4);
        let a: Vec<_> = (0..3).map(|_| s.take("a").unwrap()).collect();
        assert_eq!(s.take("a").unwrap_err(), StreamRefusal::User);
        let (b1, cut) = s.take("b").unwrap();
        assert!(!cut, "room left");
        // Full: a holds 3, b 1, c 0: a gives up its oldest.
        let (c1, cut) = s.take("c").unwrap();
        assert!(cut);
        assert_eq!(s.inner.lock().unwrap().open, 4);
        // a 2, b 1, c 1: d (0) is owed nothing more than a share a has spare.
        let (_d1, cut) = s.take("d").unwrap();
        assert!(cut);
        assert_eq!(s.take("e").unwrap_err(), StreamRefusal::Server, "everyone holds 1");
        drop((a, b1, c1));
        assert_eq!(s.inner.lock().unwrap().open, 1, "cut places are not given back twice");
    }
}
