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
    /// The `NOTIFY` payload: `s <head> <space>` or `m <bytes of space>
    /// <space><user>`, the names last and measured, so that any name
    /// (spaces included) follows whole.
    pub fn payload(&self) -> String {
        match self {
            Poke::Space { space, head } => format!("s {head} {space}"),
            Poke::Members { user, space } => format!("m {} {space}{user}", space.len()),
        }
    }

    /// The poke of a payload; `None` for anything else.
    pub fn parse(payload: &str) -> Option<Poke> {
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

#[cfg(test)]
mod tests {
    use super::Poke;

    #[test]
    fn a_poke_payload_carries_any_name_whole() {
        for poke in [
            Poke::Space { space: "~a user id with spaces".into(), head: 42 },
            Poke::Space { space: "team-1".into(), head: 0 },
            Poke::Members { user: "a user id".into(), space: "~a user id".into() },
            Poke::Members { user: "u".into(), space: "team-1".into() },
        ] {
            assert_eq!(Poke::parse(&poke.payload()), Some(poke));
        }
        for bad in ["", "x y", "s 1", "s x team", "m ", "m 3 ab", "m 2 ab", "m x abc", "42 alice"] {
            assert_eq!(Poke::parse(bad), None, "{bad:?}");
        }
    }
}
