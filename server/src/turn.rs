//! One push of a user at a time reaches the database's writer.
//!
//! A user may have several pushes in progress (`--max-requests-per-user`,
//! devices, tabs, a client that ignores its answers). Judged one after
//! another they cost the same as before — a user's pushes already wait for
//! each other on the lock of their space — but where they *wait* decides
//! who else waits with them: queued at the writer (SQLite's single writer,
//! PostgreSQL's pool), sixteen pushes of one flooder stand in front of
//! everyone else's one-op push. Queued here, per user, they hold nothing:
//! another user's push meets at most one of the flooder's transactions at the
//! writer, not sixteen. On SQLite the writer's own queue takes users in turn
//! as well ([`crate::store`]'s writer, for every write, membership writes
//! included); the turn keeps a user's pushes from queuing there at all, and
//! it alone protects PostgreSQL's pool.
//!
//! The same queue serves a user's reads ([`crate::guard`]): one pull (list,
//! verdicts request) of a user at a time, each asking the read budget once
//! the one before it has paid.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as Queue, OwnedMutexGuard};

/// Each user's queue of pushes (an entry lives while a push holds or waits for it).
#[derive(Debug, Default)]
pub struct Turns {
    users: Mutex<HashMap<String, Arc<Queue<()>>>>,
}

/// A user's turn at the writer, held until the push's transaction ends.
#[derive(Debug)]
pub struct Turn {
    turns: Arc<Turns>,
    user: String,
    queue: Arc<Queue<()>>,
    held: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits for `user`'s turn (first come, first served among that user's pushes).
    pub async fn take(self: &Arc<Self>, user: &str) -> Turn {
        let queue = {
            let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(users.entry(user.to_owned()).or_default())
        };
        let held = Arc::clone(&queue).lock_owned().await;
        Turn { turns: Arc::clone(self), user: user.to_owned(), queue, held: Some(held) }
    }

    /// Users with a push holding or waiting for a turn.
    pub fn users(&self) -> usize {
        self.users.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut users = self.turns.users.lock().unwrap_or_else(|p| p.into_inner());
        // The map's reference and this one: nobody else holds or waits (a new
        // taker clones under the map's lock, so this cannot race it).
        if Arc::strong_count(&self.queue) == 2 {
            users.remove(&self.user);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_user_waits_for_their_own_turn_another_does_not() {
        let turns = Arc::new(Turns::default());
        let first = turns.take("flood").await;
        let second = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move { turns.take("flood").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "the same user's next push waits");
        let other = tokio::time::timeout(Duration::from_millis(100), turns.take("victim")).await;
        assert!(other.is_ok(), "another user's push does not wait behind the flood");
        drop(other);
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(1), second).await.expect("its turn comes").expect("task");
        assert_eq!(turns.users(), 1);
        drop(second);
        assert_eq!(turns.users(), 0, "no entry outlives its pushes");
    }
}
