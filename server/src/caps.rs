//! The per-user caps of the guard ([`crate::guard`]): how many requests in
//! progress and event streams each user holds, a place taken for each and
//! given back when it drops; and the guard's other bounds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

/// Most refused bodies drained at once; beyond, the answer goes without draining.
const REFUSAL_DRAINS: usize = 64;

/// An event stream's place among its user's streams: the stream holds it to its end.
#[derive(Debug, Clone)]
pub struct StreamPlace(pub Arc<Place>);

/// The guard's limits and its per-user counts; part of [`crate::AppState`].
#[derive(Debug)]
pub struct Caps {
    /// Time to receive a whole request body, from its headers.
    pub body_timeout: Duration,
    /// Requests in progress (push, pull, verdicts, schema, spaces), per user.
    pub(crate) requests: Arc<PerUser>,
    /// Open event streams, per user.
    pub(crate) streams: Arc<PerUser>,
    /// Refused bodies being drained.
    pub(crate) drains: Semaphore,
}

impl Caps {
    /// Caps of `max_requests` requests in progress and `max_streams` event streams per user (0: none).
    pub fn new(body_timeout: Duration, max_requests: usize, max_streams: usize) -> Caps {
        Caps {
            body_timeout,
            requests: Arc::new(PerUser::new(max_requests)),
            streams: Arc::new(PerUser::new(max_streams)),
            drains: Semaphore::new(REFUSAL_DRAINS),
        }
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
