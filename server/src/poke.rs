//! Pokes for `/v1/events` streams, within this process and, on PostgreSQL,
//! between server processes (`NOTIFY marksync_pokes`).

use std::sync::Arc;

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
    /// `user`'s memberships changed (joined, left, another role): their streams poke.
    Members {
        /// The user.
        user: Arc<str>,
    },
}

impl Poke {
    /// The `NOTIFY` payload: `s <head> <space>` or `m <user>`, the name last
    /// so that any name (spaces included) follows whole.
    pub fn payload(&self) -> String {
        match self {
            Poke::Space { space, head } => format!("s {head} {space}"),
            Poke::Members { user } => format!("m {user}"),
        }
    }

    /// The poke of a payload; `None` for anything else.
    pub fn parse(payload: &str) -> Option<Poke> {
        match payload.split_once(' ')? {
            ("s", rest) => {
                let (head, space) = rest.split_once(' ')?;
                Some(Poke::Space { space: space.into(), head: head.parse().ok()? })
            }
            ("m", user) if !user.is_empty() => Some(Poke::Members { user: user.into() }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Poke;

    #[test]
    fn a_poke_payload_carries_any_name_whole() {
        for poke in [
            Poke::Space { space: "~a user id with spaces".into(), head: 42 },
            Poke::Space { space: "team-1".into(), head: 0 },
            Poke::Members { user: "a user id".into() },
        ] {
            assert_eq!(Poke::parse(&poke.payload()), Some(poke));
        }
        for bad in ["", "x y", "s 1", "s x team", "m ", "42 alice"] {
            assert_eq!(Poke::parse(bad), None, "{bad:?}");
        }
    }
}
