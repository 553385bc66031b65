//! Pokes for `/v1/events` streams, within this process and, on PostgreSQL,
//! between server processes (`NOTIFY marksync_pokes`).
//!
//! A poke is routed ([`Hub`]): a space's poke wakes only the streams of that
//! space's members, a membership poke only the member's streams. (One
//! broadcast to every stream, as before, made each push cost as many
//! wake-ups as the server held streams: a crowd of 800 streams of one space
//! put a bystander's push p99 at 3.2× alone.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// What moved: a space's head, or a user's memberships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poke {
    /// `space`'s head grew to `head`: its members' streams poke.
    Space {
        /// The space.
        space: Arc<str>,
        /// The new head seq.
        head: u64,
    },
    /// `user`'s membership of `space` changed (joined, left, another role):
    /// their streams poke, and read that one membership again.
    Members {
        /// The user.
        user: Arc<str>,
        /// The space.
        space: Arc<str>,
    },
}

impl Poke {
    /// The `NOTIFY` payload of the store named `origin`: `<origin hex> s
    /// <head> <space>` or `<origin hex> m <bytes of space> <space><user>`,
    /// the names last and measured, so that any name (spaces included)
    /// follows whole.
    pub fn payload(&self, origin: u64) -> String {
        match self {
            Poke::Space { space, head } => format!("{origin:x} s {head} {space}"),
            Poke::Members { user, space } => format!("{origin:x} m {} {space}{user}", space.len()),
        }
    }

    /// The origin and poke of a payload (a payload of a server before
    /// origins has none); `None` for anything else.
    pub fn parse(payload: &str) -> Option<(Option<u64>, Poke)> {
        let (first, rest) = payload.split_once(' ')?;
        // `s` and `m` are no hex numbers.
        match u64::from_str_radix(first, 16) {
            Ok(origin) => Some((Some(origin), Self::parse_poke(rest)?)),
            Err(_) => Some((None, Self::parse_poke(payload)?)),
        }
    }

    fn parse_poke(payload: &str) -> Option<Poke> {
        match payload.split_once(' ')? {
            ("s", rest) => {
                let (head, space) = rest.split_once(' ')?;
                Some(Poke::Space { space: space.into(), head: head.parse().ok()? })
            }
            ("m", rest) => {
                let (len, names) = rest.split_once(' ')?;
                let len: usize = len.parse().ok()?;
                let (space, user) = (names.get(..len)?, names.get(len..)?);
                (!space.is_empty() && !user.is_empty())
                    .then(|| Poke::Members { user: user.into(), space: space.into() })
            }
            _ => None,
        }
    }
}

/// Where pokes go: each open stream's inbox, found by the spaces it follows
/// and by its user.
#[derive(Debug, Default)]
pub struct Hub {
    routes: Mutex<Routes>,
}

type Inboxes = HashMap<u64, Arc<Inbox>>;

#[derive(Debug, Default)]
struct Routes {
    next: u64,
    spaces: HashMap<Arc<str>, Inboxes>,
    users: HashMap<Arc<str>, Inboxes>,
    /// Streams still reading their spaces: they hear every space's poke
    /// meanwhile, so none committed between that read and their routes is missed.
    opening: Inboxes,
}

/// One stream's pokes not yet taken, coalesced: the newest head per space,
/// the spaces whose membership changed. Bounded by the spaces there are.
#[derive(Debug, Default)]
pub struct Pending {
    /// Space → the newest head poked.
    pub heads: HashMap<Arc<str>, u64>,
    /// Spaces where the stream's user joined, left or got another role.
    pub members: HashSet<Arc<str>>,
}

#[derive(Debug, Default)]
struct Inbox {
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Inbox {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn head(&self, space: &Arc<str>, head: u64) {
        let mut p = self.pending();
        let last = p.heads.entry(Arc::clone(space)).or_insert(head);
        *last = (*last).max(head);
        drop(p);
        self.wake.notify_one();
    }

    fn member(&self, space: &Arc<str>) {
        self.pending().members.insert(Arc::clone(space));
        self.wake.notify_one();
    }
}

impl Hub {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Delivers `poke` to the streams it concerns (none is fine).
    pub fn send(&self, poke: Poke) {
        let routes = self.routes();
        match &poke {
            Poke::Space { space, head } => {
                let followers = routes.spaces.get(space).into_iter().flat_map(HashMap::values);
                for inbox in followers.chain(routes.opening.values()) {
                    inbox.head(space, *head);
                }
            }
            Poke::Members { user, space } => {
                for inbox in routes.users.get(user).into_iter().flat_map(HashMap::values) {
                    inbox.member(space);
                }
            }
        }
    }

    /// A stream's subscription for `user`: their membership pokes, and every
    /// space's pokes until [`Subscription::opened`].
    pub fn subscribe(self: &Arc<Self>, user: &str) -> Subscription {
        let inbox = Arc::new(Inbox::default());
        let user: Arc<str> = user.into();
        let mut routes = self.routes();
        routes.next += 1;
        let id = routes.next;
        routes.users.entry(Arc::clone(&user)).or_default().insert(id, Arc::clone(&inbox));
        routes.opening.insert(id, Arc::clone(&inbox));
        drop(routes);
        Subscription { hub: Arc::clone(self), id, user, inbox, spaces: HashSet::new() }
    }

    /// Streams subscribed (for tests).
    #[cfg(test)]
    fn routed(&self) -> (usize, usize, usize) {
        let r = self.routes();
        (r.spaces.len(), r.users.len(), r.opening.len())
    }
}

/// A stream's place in the [`Hub`], left when dropped.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    user: Arc<str>,
    inbox: Arc<Inbox>,
    spaces: HashSet<Arc<str>>,
}

impl Subscription {
    /// Hears `space`'s pokes from now on.
    pub fn follow(&mut self, space: &Arc<str>) {
        if self.spaces.insert(Arc::clone(space)) {
            self.hub.routes().spaces.entry(Arc::clone(space)).or_default().insert(self.id, Arc::clone(&self.inbox));
        }
    }

    /// No longer hears `space`'s pokes.
    pub fn unfollow(&mut self, space: &str) {
        if self.spaces.remove(space) {
            let mut routes = self.hub.routes();
            drop_route(&mut routes.spaces, space, self.id);
        }
    }

    /// The stream has read its spaces and follows them: it stops hearing every space.
    pub fn opened(&self) {
        self.hub.routes().opening.remove(&self.id);
    }

    /// Waits for pokes and takes them all.
    pub async fn next(&self) -> Pending {
        loop {
            let taken = std::mem::take(&mut *self.inbox.pending());
            if !taken.heads.is_empty() || !taken.members.is_empty() {
                return taken;
            }
            self.inbox.wake.notified().await;
        }
    }
}

fn drop_route(routes: &mut HashMap<Arc<str>, Inboxes>, key: &str, id: u64) {
    if let Some(inboxes) = routes.get_mut(key) {
        inboxes.remove(&id);
        if inboxes.is_empty() {
            routes.remove(key);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut routes = self.hub.routes();
        routes.opening.remove(&self.id);
        drop_route(&mut routes.users, &self.user, self.id);
        for space in &self.spaces {
            drop_route(&mut routes.spaces, space, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_poke_reaches_the_followers_of_its_space_only() {
        let hub = Arc::new(Hub::default());
        let team: Arc<str> = "team".into();
        let mut ann = hub.subscribe("ann");
        ann.follow(&team);
        ann.opened();
        let mut bob = hub.subscribe("bob");
        bob.follow(&"other".into());
        bob.opened();
        hub.send(Poke::Space { space: Arc::clone(&team), head: 3 });
        hub.send(Poke::Space { space: Arc::clone(&team), head: 2 });
        hub.send(Poke::Members { user: "ann".into(), space: "new".into() });
        let got = ann.next().await;
        assert_eq!(got.heads.get(&team), Some(&3), "coalesced to the newest head");
        assert!(got.members.contains("new"));
        assert!(bob.inbox.pending().heads.is_empty(), "bob follows another space");
        assert!(bob.inbox.pending().members.is_empty(), "ann's membership is not bob's");
        bob.unfollow("other");
        drop((ann, bob));
        assert_eq!(hub.routed(), (0, 0, 0), "a closed stream leaves no route");
    }

    #[tokio::test]
    async fn a_stream_opening_hears_every_space_until_it_follows_its_own() {
        let hub = Arc::new(Hub::default());
        let sub = hub.subscribe("ann");
        hub.send(Poke::Space { space: "team".into(), head: 7 });
        assert_eq!(sub.next().await.heads.get("team"), Some(&7));
        sub.opened();
        hub.send(Poke::Space { space: "team".into(), head: 8 });
        assert!(sub.inbox.pending().heads.is_empty());
    }

    #[test]
    fn a_poke_payload_carries_any_name_whole() {
        for poke in [
            Poke::Space { space: "~a user id with spaces".into(), head: 42 },
            Poke::Space { space: "team-1".into(), head: 0 },
            Poke::Members { user: "a user id".into(), space: "~a user id".into() },
            Poke::Members { user: "u".into(), space: "team-1".into() },
        ] {
            assert_eq!(Poke::parse(&poke.payload(0xbeef)), Some((Some(0xbeef), poke.clone())));
            let before_origins = poke.payload(0).split_once(' ').unwrap().1.to_owned();
            assert_eq!(Poke::parse(&before_origins), Some((None, poke)));
        }
        for bad in ["", "x y", "s 1", "s x team", "m ", "m 3 ab", "m 2 ab", "m x abc", "42 alice", "42 s 1"] {
            assert_eq!(Poke::parse(bad), None, "{bad:?}");
        }
    }
}
