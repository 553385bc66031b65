//! The names and roles of spaces as the wire carries them (PROTOCOL §3c,
//! §4b): what a space name and a user id look like, the roles, what a
//! device follows. The rules over them — who may write where, what a pull
//! reads — are [`crate::space`]'s.

use serde::{Deserialize, Serialize};

/// The first character of every personal space's name, and of no shared one.
pub const PERSONAL_PREFIX: char = '~';

/// The longest space name: a personal space is the prefix and a user id of up
/// to 256 bytes; a shared name is at most 128 bytes.
pub const MAX_SPACE_BYTES: usize = 1 + 256;

/// The name of `user`'s personal space.
pub fn personal(user: &str) -> String {
    format!("{PERSONAL_PREFIX}{user}")
}

/// The user whose personal space `space` is, if it is one.
pub fn personal_owner(space: &str) -> Option<&str> {
    space.strip_prefix(PERSONAL_PREFIX)
}

/// Checks the shape of a space name as an op or a pull names it: a personal
/// space (`~` and a user id: no control characters) or a shared name.
pub fn check_space(s: &str) -> Result<(), &'static str> {
    match personal_owner(s) {
        Some(user) => check_user(user)
            .map_err(|_| "a personal space is ~ and a user id of 1 to 256 bytes without control characters or spaces at either end"),
        None => check_shared_space(s),
    }
}

/// Checks the shape of a user id as a personal space holds it: 1 to 256
/// bytes, no control characters, no white space at either end (a token's
/// user id is read trimmed, so no one could ever be ` bob`: an invitation
/// to that name would only spend its inviter's share).
pub fn check_user(user: &str) -> Result<(), &'static str> {
    if user.is_empty() || user.len() + 1 > MAX_SPACE_BYTES || user.chars().any(char::is_control) || user.trim() != user {
        return Err("a user id is 1 to 256 bytes without control characters or spaces at either end");
    }
    Ok(())
}

/// Checks the name of a shared space: the opId alphabet `[A-Za-z0-9:._-]`, 1..=128.
pub fn check_shared_space(s: &str) -> Result<(), &'static str> {
    super::check_op_id(s)
}

super::word::words! {
    /// What a member may do in a space.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Role {
        /// Reads, writes rows, and manages the members.
        Owner = "owner",
        /// Reads and writes rows.
        Editor = "editor",
        /// Reads.
        Viewer = "viewer",
    }
}

impl Role {
    /// Whether this role may write rows.
    pub const fn writes(self) -> bool {
        matches!(self, Role::Owner | Role::Editor)
    }
}

/// The most spaces one pull may follow.
pub const MAX_FOLLOWED: usize = 10_000;

/// One space a device follows: where its copy stands (PROTOCOL §4b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Follow {
    /// The seq of the last change of the space the device holds (0: none).
    pub cursor: u64,
    /// The role the device last learned; a pull names the role again when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// The spaces a device follows, by name: a sorted vector (in the wasm a
/// tree is several KB of code per key and value type), read sorted once
/// ([`super::sorted_spaces`]) so that a pull naming 10,000 spaces costs a sort,
/// not an insert into the middle for each.
pub type Followed = litemap::LiteMap<String, Follow>;

/// A space and a user's role in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Membership {
    /// The space.
    pub space: String,
    /// The role.
    pub role: Role,
}

/// The most entries one page of a list holds (its `limit`), and the default.
pub const MAX_LIST_LIMIT: usize = 1000;

/// `POST /v1/spaces/members` answer: the change, or (`invited`) the
/// invitation it became — another user joins only by accepting (PROTOCOL §3c).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberChange {
    /// The member's user id.
    pub user: String,
    /// The role set (or offered); `None`: removed.
    pub role: Option<Role>,
    /// Whether this is an invitation the user has still to accept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invited: bool,
}

/// A pending invitation, listed from either side: by its invitee
/// (`GET /v1/invitations`, without `user`: the caller) and by the space's
/// owners (`GET /v1/spaces/invitations?space=`). One type for both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invitation {
    /// The space.
    pub space: String,
    /// The invitee, in the owners' listing; in the invitee's own (the
    /// caller), empty and not written.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// The role accepting gives.
    pub role: Role,
    /// The owner who invited.
    pub from: String,
    /// When it lapses (ms since the epoch).
    pub expires_at: u64,
}

impl Invitation {
    /// The entry as its invitee's own listing spells it: they are the
    /// caller, so they are not named again in every entry.
    pub fn for_invitee(self) -> Invitation {
        Invitation { user: String::new(), ..self }
    }
}

/// `GET /v1/invitations` answer (the caller's pending invitations, by space
/// name) and `GET /v1/spaces/invitations?space=` answer (a space's, by invitee).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvitationsList {
    /// At most `limit`, after the entry `after` (a space, or an invitee).
    pub invitations: Vec<Invitation>,
}

/// A body naming one space: `POST /v1/invitations/accept`, `…/decline`, `POST /v1/spaces/leave`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpaceName {
    /// The space invited to.
    pub space: String,
}
