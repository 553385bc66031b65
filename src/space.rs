//! Spaces (PROTOCOL §3c): every row lives in exactly one space, and the
//! sender of an op must be an owner or editor of that space when the op is
//! judged. Pure: the store loads the sender's roles under the spaces' locks,
//! and this module says what they allow.
//!
//! A user's **personal space** is named `~` followed by the user id; the user
//! is always its owner (no membership row needed), so an op without a space
//! lands there — today's ops and stored rows, unchanged. Every other space is
//! **shared**: created over HTTP with a name of the opId alphabet (which has no
//! `~`, so a shared name never collides with a personal one).

use std::sync::Arc;

pub use crate::protocol::space::{
    check_shared_space, check_space, check_user, personal, personal_owner, Follow, Followed, Membership, Role, MAX_FOLLOWED,
    MAX_SPACE_BYTES, PERSONAL_PREFIX,
};

/// The rejection code of an op whose sender is not a member of its space.
pub const FORBIDDEN: &str = crate::protocol::Code::Forbidden.as_str();
/// The rejection code of an op whose sender is a viewer of its space.
pub const READ_ONLY: &str = crate::protocol::Code::ReadOnly.as_str();

/// A space's name, cheap to clone (a batch names a few, many times).
pub type SpaceId = Arc<str>;

/// `user`'s role in `space`, given the membership row the store holds
/// (`member`): the owner of a personal space is its user, whatever is stored.
pub fn role_of(user: &str, space: &str, member: Option<Role>) -> Option<Role> {
    if personal_owner(space) == Some(user) {
        return Some(Role::Owner);
    }
    member
}

/// Why a sender may not write in a space: the verdict's code and reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denied {
    /// [`FORBIDDEN`] or [`READ_ONLY`].
    pub code: &'static str,
    /// Human reason, the same for every op refused this way in this space.
    pub reason: String,
}

/// Whether a sender with `role` in `space` (`None`: not a member) may write
/// a row there. The one rule: the judge runs it on every op it answers for
/// the first time, and a device runs it before recording an edit.
pub fn may_write(space: &str, role: Option<Role>) -> Result<(), Denied> {
    match role {
        Some(r) if r.writes() => Ok(()),
        Some(_) => Err(Denied { code: READ_ONLY, reason: format!("you are a viewer of space {space}: viewers cannot edit its rows") }),
        // The same words whether the space exists or not: a refusal never
        // tells a non-member what spaces there are.
        None => Err(Denied { code: FORBIDDEN, reason: format!("you are not a member of space {space}") }),
    }
}

/// Whether a member with `role` may see who else is a member and manage them.
pub fn manages_members(role: Option<Role>) -> bool {
    role == Some(Role::Owner)
}

/// Whether a member whose role goes from `before` to `after` takes with
/// them the invitations they sent to the space: an invitation speaks with
/// its inviter's authority, so it lapses when they no longer manage the
/// members. (Kept, a removed owner's invitation of a second account of
/// theirs, as owner, would let them back in unless the owners left found it
/// among the pending ones and withdrew it.) An invitation whose inviter was stored before this rule
/// is judged by it once more when accepted ([`invitation_stands`]).
pub fn withdraws_invitations(before: Option<Role>, after: Option<Role>) -> bool {
    manages_members(before) && !manages_members(after)
}

/// Whether an invitation sent by a member now holding `inviter` (their
/// role by [`role_of`]) may still be accepted.
pub fn invitation_stands(inviter: Option<Role>) -> bool {
    manages_members(inviter)
}

/// Why a membership change is refused (the server answers it as the HTTP
/// error of the same name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberRefusal {
    /// 403: the caller does not manage the space's members (or may not see them).
    #[error("{0}")]
    Forbidden(String),
    /// 409: the change would leave a shared space without an owner.
    #[error("{0}")]
    Conflict(String),
    /// 400: the change names the personal space's own user.
    #[error("{0}")]
    BadRequest(String),
}

/// The refusal of a caller who is not an owner of `space` (or not a member
/// at all, or the space does not exist: the same words for all three).
pub fn not_an_owner(space: &str) -> MemberRefusal {
    MemberRefusal::Forbidden(format!("you are not an owner of space {space}"))
}

/// The refusal of a caller who may not see `space`'s members.
pub fn not_a_member(space: &str) -> MemberRefusal {
    MemberRefusal::Forbidden(format!("you are not a member of space {space}"))
}

/// Whether `user` may be given `role` (`None`: removed) in `space`, by a
/// caller already known to manage it: the personal space's own user cannot
/// be changed, and a shared space keeps at least one owner (`owners` is how
/// many it has now). `Ok(false)`: nothing to change.
pub fn check_member_change(
    space: &str,
    user: &str,
    before: Option<Role>,
    after: Option<Role>,
    owners: usize,
) -> Result<bool, MemberRefusal> {
    if personal_owner(space) == Some(user) {
        return Err(MemberRefusal::BadRequest(format!("{user} owns their personal space {space}; that cannot change")));
    }
    if before == after {
        return Ok(false);
    }
    if before == Some(Role::Owner) && personal_owner(space).is_none() && owners <= 1 {
        return Err(MemberRefusal::Conflict(format!("{user} is the last owner of space {space}; add another owner first")));
    }
    Ok(true)
}

/// The members of `space` as listed from the stored memberships: a personal
/// space lists its own user first, as owner (stored or not).
pub fn listed_members(space: &str, mut stored: Vec<(String, Role)>) -> Vec<(String, Role)> {
    if let Some(owner) = personal_owner(space) {
        stored.retain(|(u, _)| u != owner);
        stored.insert(0, (owner.to_owned(), Role::Owner));
    }
    stored
}

/// What one pull reads and says about membership, decided from what the
/// device follows and what the user is a member of now (read in the same
/// snapshot as the rows, so no row of a space the user has left leaves).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullPlan {
    /// Spaces to read changes of, with the cursor to read after, in byte order of their names.
    pub read: Vec<(String, u64)>,
    /// Member spaces the device does not follow: backfilled from their start.
    pub joined: Vec<Membership>,
    /// Followed spaces whose role differs from the one the device named.
    pub roles: Vec<Membership>,
    /// Followed spaces the user is no longer a member of: the device drops them.
    pub left: Vec<String>,
}

/// Plans a pull: `followed` by the device, `members` = (space, role, head)
/// of every space the user is a member of now. A space is read only when its
/// head passed the device's cursor, so a device in many spaces with nothing
/// new reads nothing.
pub fn plan_pull(followed: &Followed, members: &[(String, Role, u64)]) -> PullPlan {
    let mut plan = PullPlan::default();
    let mut member_of = std::collections::HashSet::with_capacity(members.len());
    let mut sorted: Vec<&(String, Role, u64)> = members.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (space, role, head) in sorted {
        member_of.insert(space.as_str());
        match followed.get(space) {
            None => {
                plan.joined.push(Membership { space: space.clone(), role: *role });
                if *head > 0 {
                    plan.read.push((space.clone(), 0));
                }
            }
            Some(f) => {
                if f.role != Some(*role) {
                    plan.roles.push(Membership { space: space.clone(), role: *role });
                }
                if *head > f.cursor {
                    plan.read.push((space.clone(), f.cursor));
                }
            }
        }
    }
    plan.left = followed.keys().filter(|s| !member_of.contains(s.as_str())).cloned().collect();
    plan
}

/// What is left of one pull's budget as it reads space after space: at most
/// `limit` changes (default [`crate::protocol::DEFAULT_PULL_LIMIT`]) and
/// [`crate::protocol::MAX_PULL_PAGE_BYTES`] of rows over all spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullBudget {
    /// Changes the answer may still carry.
    pub changes: usize,
    /// Bytes of rows the answer may still carry.
    pub bytes: usize,
}

impl PullBudget {
    /// The whole budget of a pull asking for `limit` changes.
    pub fn new(limit: Option<usize>) -> PullBudget {
        PullBudget { changes: limit.unwrap_or(crate::protocol::DEFAULT_PULL_LIMIT), bytes: crate::protocol::MAX_PULL_PAGE_BYTES }
    }

    /// Whether nothing is left: the next spaces are answered empty, with `hasMore`.
    pub fn spent(&self) -> bool {
        self.changes == 0 || self.bytes == 0
    }

    /// Takes what one space's page used.
    pub fn take(&mut self, changes: usize, bytes: usize) {
        self.changes = self.changes.saturating_sub(changes);
        self.bytes = self.bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_personal_space_is_its_users_and_no_shared_name_is_personal() {
        assert_eq!(personal("alice"), "~alice");
        assert_eq!(personal_owner("~alice"), Some("alice"));
        assert_eq!(role_of("alice", "~alice", None), Some(Role::Owner));
        // A stored membership cannot demote the personal space's user.
        assert_eq!(role_of("alice", "~alice", Some(Role::Viewer)), Some(Role::Owner));
        assert_eq!(role_of("bob", "~alice", None), None);
        assert_eq!(role_of("bob", "~alice", Some(Role::Viewer)), Some(Role::Viewer));
        assert!(check_shared_space("~alice").is_err());
        assert!(check_shared_space("team-1").is_ok());
        assert!(check_space("~a b").is_ok());
        for bad in ["", "~", "~a\nb", "a b", &"x".repeat(129), "~ bob", "~bob "] {
            assert!(check_space(bad).is_err(), "{bad:?}");
        }
        // A token's user id is read trimmed: no one is ` bob`, so no one is invited as them.
        assert!(check_user("bob").is_ok() && check_user("a b").is_ok());
        for bad in [" bob", "bob ", "\u{a0}bob", " "] {
            assert!(check_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_inviters_invitations_go_when_they_stop_managing_members() {
        use Role::*;
        assert!(withdraws_invitations(Some(Owner), Some(Editor)));
        assert!(withdraws_invitations(Some(Owner), None), "removed, or leaving");
        assert!(!withdraws_invitations(Some(Owner), Some(Owner)));
        assert!(!withdraws_invitations(Some(Editor), None), "an editor never invited");
        assert!(invitation_stands(Some(Owner)) && !invitation_stands(Some(Viewer)) && !invitation_stands(None));
    }

    #[test]
    fn a_pull_reads_only_spaces_that_moved_and_names_joins_leaves_and_role_changes() {
        let followed: Followed = [
            ("~u".to_owned(), Follow { cursor: 5, role: Some(Role::Owner) }),
            ("quiet".to_owned(), Follow { cursor: 9, role: Some(Role::Viewer) }),
            ("gone".to_owned(), Follow { cursor: 3, role: Some(Role::Editor) }),
            ("promoted".to_owned(), Follow { cursor: 1, role: Some(Role::Viewer) }),
        ]
        .into_iter()
        .collect();
        let members = vec![
            ("~u".to_owned(), Role::Owner, 7),
            ("quiet".to_owned(), Role::Viewer, 9),
            ("promoted".to_owned(), Role::Editor, 1),
            ("new".to_owned(), Role::Viewer, 4),
            ("empty".to_owned(), Role::Editor, 0),
        ];
        let plan = plan_pull(&followed, &members);
        assert_eq!(plan.read, vec![("new".to_owned(), 0), ("~u".to_owned(), 5)]);
        assert_eq!(
            plan.joined,
            vec![Membership { space: "empty".into(), role: Role::Editor }, Membership { space: "new".into(), role: Role::Viewer }]
        );
        assert_eq!(plan.roles, vec![Membership { space: "promoted".into(), role: Role::Editor }]);
        assert_eq!(plan.left, vec!["gone".to_owned()]);
        // Nothing new anywhere: nothing read, nothing said.
        let quiet: Vec<_> = members.iter().filter(|m| m.0 != "new" && m.0 != "empty").cloned().collect();
        let mut same = followed.clone();
        same.remove(&"gone".to_owned());
        same.insert("~u".into(), Follow { cursor: 7, role: Some(Role::Owner) });
        same.insert("promoted".into(), Follow { cursor: 1, role: Some(Role::Editor) });
        assert_eq!(plan_pull(&same, &quiet), PullPlan::default());
    }

    #[test]
    fn a_shared_space_keeps_an_owner_and_a_personal_space_its_user() {
        assert_eq!(check_member_change("s", "a", None, Some(Role::Viewer), 1), Ok(true));
        assert_eq!(check_member_change("s", "a", Some(Role::Viewer), Some(Role::Viewer), 1), Ok(false));
        assert!(matches!(check_member_change("s", "a", Some(Role::Owner), None, 1), Err(MemberRefusal::Conflict(_))));
        assert!(matches!(check_member_change("s", "a", Some(Role::Owner), Some(Role::Editor), 1), Err(MemberRefusal::Conflict(_))));
        assert_eq!(check_member_change("s", "a", Some(Role::Owner), None, 2), Ok(true));
        assert!(matches!(check_member_change("~a", "a", None, None, 0), Err(MemberRefusal::BadRequest(_))));
        assert_eq!(check_member_change("~a", "b", Some(Role::Owner), None, 1), Ok(true), "a personal space keeps its user");
    }

    #[test]
    fn a_personal_space_lists_its_user_first_as_owner() {
        let stored = vec![("bob".to_owned(), Role::Viewer), ("ann".to_owned(), Role::Viewer)];
        assert_eq!(listed_members("~ann", stored.clone()), vec![("ann".to_owned(), Role::Owner), ("bob".to_owned(), Role::Viewer)]);
        assert_eq!(listed_members("team", stored.clone()), stored);
    }

    #[test]
    fn only_owners_and_editors_write() {
        assert!(may_write("s", Some(Role::Owner)).is_ok());
        assert!(may_write("s", Some(Role::Editor)).is_ok());
        assert_eq!(may_write("s", Some(Role::Viewer)).unwrap_err().code, READ_ONLY);
        let denied = may_write("s", None).unwrap_err();
        assert_eq!((denied.code, denied.reason.as_str()), (FORBIDDEN, "you are not a member of space s"));
        assert!(manages_members(Some(Role::Owner)));
        assert!(!manages_members(Some(Role::Editor)));
    }
}
