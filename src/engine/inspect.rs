//! The whole sync of a device as one snapshot, for the inspector and for a
//! bug report (`db.diagnostics()`): the outbox with each op's attempts, the
//! last cycles of every context, refusals and conflicts, followed spaces
//! with their cursors, the schema known. Never a credential: the engine
//! holds none.

use serde::Serialize;

use super::Engine;
use crate::attempt::{Phase, Recovery};
use crate::conflict::Conflict;
use crate::protocol::Op;
use crate::space::Role;
use crate::store::Rejection;
use crate::sync_state::{CycleLog, Flight};

/// What `db.diagnostics()` returns.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection<'a> {
    /// This device.
    pub device_id: &'a str,
    /// The user the database belongs to, once known.
    pub user: Option<&'a str>,
    /// Every queued op, in `at` order, with where it stands.
    pub outbox: Vec<Queued<'a>>,
    /// The attempt out now (any context's).
    pub flight: Option<&'a Flight>,
    /// When the next retry is due (ms).
    pub next_retry_at: Option<u64>,
    /// What sync waits on a person for.
    pub recovery: Option<&'a Recovery>,
    /// Why the last request got no usable answer.
    pub last_error: Option<&'a str>,
    /// The last sync cycles, oldest first.
    pub cycles: Vec<&'a CycleLog>,
    /// Refusals not dismissed.
    pub rejections: Vec<&'a Rejection>,
    /// Conflicts not dismissed.
    pub conflicts: Vec<&'a Conflict>,
    /// The spaces followed: name (null: the personal one before its name is known), role, cursor.
    pub spaces: Vec<Followed<'a>>,
    /// The version of the server's schema the device knows.
    pub schema_version: Option<u32>,
}

/// One queued op and where it stands.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued<'a> {
    /// The op.
    pub op: &'a Op,
    /// Its row's phase.
    pub phase: Phase,
    /// How many times it was sent.
    pub attempts: u32,
    /// The attemptKey of its last send.
    pub attempt_key: Option<&'a str>,
    /// Whether its last send ended with no usable answer.
    pub unknown: bool,
    /// When it was first and last sent (ms; 0: never).
    pub first_sent_at: u64,
    /// When it was last sent.
    pub last_sent_at: u64,
}

/// A followed space.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Followed<'a> {
    /// Its name.
    pub space: Option<&'a str>,
    /// Whether it is the user's personal space.
    pub personal: bool,
    /// The role last learned.
    pub role: Option<Role>,
    /// How far the device has pulled it.
    pub cursor: u64,
}

impl Engine {
    /// The whole sync as one snapshot (see [`Inspection`]).
    pub fn inspect(&self) -> Inspection<'_> {
        // Under another user's token the session is another person's: what
        // `pending()`, `rejections()` and `conflicts()` hide, this hides too.
        let hidden = self.hides_rows();
        let outbox = self
            .outbox
            .iter()
            .filter(|_| !hidden)
            .map(|op| {
                let a = self.sync.ops.get(&op.op_id);
                Queued {
                    op,
                    phase: self.status(&op.place()).phase,
                    attempts: a.map_or(0, |a| a.attempts),
                    attempt_key: a.map(|a| a.last_key.as_str()).filter(|k| !k.is_empty()),
                    unknown: a.is_some_and(|a| a.unknown),
                    first_sent_at: a.map_or(0, |a| a.first_sent_at),
                    last_sent_at: a.map_or(0, |a| a.last_sent_at),
                }
            })
            .collect();
        let personal = self.following.personal.as_deref();
        let mut spaces = vec![Followed {
            space: personal,
            personal: true,
            role: Some(Role::Owner),
            cursor: self.following.personal_cursor().max(self.meta.cursor),
        }];
        for (name, f) in &self.following.spaces {
            if Some(name.as_str()) != personal {
                spaces.push(Followed { space: Some(name), personal: false, role: f.role, cursor: f.cursor });
            }
        }
        Inspection {
            device_id: &self.meta.device_id,
            user: self.user(),
            outbox,
            flight: self.sync.flight.as_ref(),
            next_retry_at: self.retry_at(),
            recovery: self.recovery(),
            last_error: self.sync.last_error.as_deref(),
            cycles: self.sync.cycles.iter().collect(),
            rejections: self.rejections.values().filter(|_| !hidden).collect(),
            conflicts: if hidden { Vec::new() } else { self.conflicts() },
            spaces,
            schema_version: self.known_schema().map(|(_, s)| s.version),
        }
    }
}
