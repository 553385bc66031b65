//! `GET /v1/events`: a server-sent event stream that pokes a device when a
//! space it reads moves or its memberships change, so it pulls at once
//! instead of waiting for its next sync.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::Stream;

use crate::app::App;
use crate::budget::Work;
use crate::caps::StreamPlace;
use crate::error::ApiError;
use crate::guard::{Expires, User};
use crate::poke::Subscription;
use crate::store::DbError;
use marksync::protocol::{poke_data, POKE_MEMBERS};

/// `GET /v1/events`: `event: poke` whenever the head of a space the user is
/// a member of grows — `data: <head>` for the personal space, `data: <head>
/// <space>` for another — and `data: members` when the user's memberships
/// change; once on connect with the personal space's head. The guard
/// authenticated the user (header or `?token=`), took a rate-limit token and
/// the stream's place among the user's streams, held to the stream's end.
/// The stream ends when the token it was opened with expires: a token is
/// checked once, and a stream kept open past it would go on telling a user
/// whose access has ended which spaces move (the client opens it again with
/// a fresh token).
pub(crate) async fn events(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    Extension(place): Extension<StreamPlace>,
    Extension(Expires(expires)): Extension<Expires>,
) -> Result<Response, ApiError> {
    // Subscribed before the spaces are read: a poke committed meanwhile is heard.
    let mut sub = app.pokes.subscribe(&user);
    let spaces = followed_heads(&app, &user).await?;
    for space in spaces.keys() {
        sub.follow(space);
    }
    sub.opened();
    app.budgets.charge(Work::Reads, &user, 1 + spaces.len());
    let personal: Arc<str> = marksync::space::personal(&user).into();
    let head = spaces.get(&personal).copied().unwrap_or(0);
    let state = PokeStream {
        app: app.clone(),
        user,
        personal,
        sub,
        ready: VecDeque::from([poke_data(None, head)]),
        spaces,
        shutdown: app.shutdown.clone(),
        place,
        ends: expires.map(instant_of),
        beat: tokio::time::Instant::now() + first_beat(),
    };
    let sse = Sse::new(poke_stream(state));
    let mut resp = sse.into_response();
    // nginx buffers answers by default: a poke would wait in its buffer until it filled.
    resp.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    Ok(resp)
}

/// The head of every space `user` is a member of.
async fn followed_heads(app: &App, user: &str) -> Result<HashMap<Arc<str>, u64>, DbError> {
    Ok(app.store.spaces_of(user).await?.into_iter().map(|s| (Arc::from(s.space), s.head)).collect())
}

struct PokeStream {
    app: App,
    user: String,
    personal: Arc<str>,
    /// The stream's place in the hub: pokes of its spaces and its user only.
    sub: Subscription,
    /// Pokes to send, in order.
    ready: VecDeque<String>,
    /// The user's spaces and the last head poked for each.
    spaces: HashMap<Arc<str>, u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Given back when the stream ends; cut, it ends the stream.
    place: StreamPlace,
    /// When the token it was opened with expires (`None`: never said).
    ends: Option<tokio::time::Instant>,
    /// When the next keep-alive comment is due.
    beat: tokio::time::Instant,
}

/// A keep-alive comment this often keeps proxies from closing a quiet stream.
const BEAT: Duration = Duration::from_secs(15);

/// When a new stream's first keep-alive comes: anywhere in the first
/// [`BEAT`], at random. Streams opened together (a crowd, or every client
/// reconnecting after a restart) would otherwise beat together, a burst of
/// a write per stream every 15 s that a bystander's request waits behind.
fn first_beat() -> Duration {
    use std::hash::BuildHasher;
    // Each RandomState is keyed afresh: a cheap random number, no crate for it.
    let r = std::collections::hash_map::RandomState::new().hash_one(0u8);
    Duration::from_millis(r % BEAT.as_millis() as u64)
}

/// The instant of `exp` (seconds since the Unix epoch) on tokio's clock.
fn instant_of(exp: f64) -> tokio::time::Instant {
    let now_ms = crate::clock::now_ms();
    // A NumericDate may be fractional. An `exp` more than a day ahead ends
    // the stream after a day; it is opened again with the token of then.
    let left_ms = (exp * 1000.0 - now_ms as f64).clamp(0.0, 86_400_000.0);
    tokio::time::Instant::now() + Duration::from_millis(left_ms as u64)
}

/// Resolves at `end`, or never.
async fn until(end: Option<tokio::time::Instant>) {
    match end {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn poke(data: String) -> Event {
    Event::default().event("poke").data(data)
}

fn poke_stream(state: PokeStream) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(data) = s.ready.pop_front() {
                return Some((Ok(poke(data)), s));
            }
            let woke = tokio::select! {
                p = s.sub.next() => Some(p),
                () = tokio::time::sleep_until(s.beat) => None,
                _ = s.shutdown.wait_for(|stop| *stop) => return None,
                () = s.place.cut() => return None,
                () = until(s.ends) => return None,
            };
            let Some(pending) = woke else {
                s.beat += BEAT;
                return Some((Ok(Event::default().comment("")), s));
            };
            // Memberships first: a space joined is then known when its head's poke is read.
            for space in &pending.members {
                // That one membership now — work of this change, not of the
                // user's other spaces — a known space at the head last
                // poked (a push's poke after this read still pokes).
                match s.app.store.member_head(&s.user, space).await {
                    Ok(Some(head)) => {
                        s.sub.follow(space);
                        s.spaces.entry(Arc::clone(space)).or_insert(head);
                    }
                    Ok(None) => {
                        s.sub.unfollow(space);
                        s.spaces.remove(space);
                    }
                    Err(_) => {}
                }
            }
            if !pending.members.is_empty() {
                s.ready.push_back(POKE_MEMBERS.to_owned());
            }
            for (space, head) in pending.heads {
                let Some(last) = s.spaces.get_mut(&space) else { continue };
                if head > *last {
                    *last = head;
                    let named = (space != s.personal).then_some(&*space);
                    s.ready.push_back(poke_data(named, head));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_beats_spread_over_the_beat() {
        let beats: Vec<Duration> = (0..200).map(|_| first_beat()).collect();
        assert!(beats.iter().all(|b| *b < BEAT));
        let early = beats.iter().filter(|b| **b < BEAT / 2).count();
        assert!((40..=160).contains(&early), "{early} of 200 in the first half: not spread");
    }
}
