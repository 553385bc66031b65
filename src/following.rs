//! The spaces a device follows (PROTOCOL §4b): one record, stored whole,
//! that says which spaces the device holds rows of, how far each copy has
//! got (a cursor per space) and the role the user last had in each.
//!
//! On the device the personal space is the unnamed one: its rows are keyed
//! with an empty [`RowKey::space`](crate::protocol::RowKey), ops without a
//! space go there, and a device learns its name (`~` and the user id) from
//! its first `POST /v1/pull`. Every other space is keyed by its name.
//!
//! Pure: the engine feeds it pull answers and asks it who may write where.

use serde::{Deserialize, Serialize};

use crate::names::Names;
use crate::protocol::{SpacePage, SpacesPullRequest, SpacesPullResponse};
use crate::space::{self, Denied, Follow, Followed, Role};

/// The spaces a device follows, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Following {
    /// The name of the user's personal space, once a pull said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal: Option<String>,
    /// Every followed space by name (the personal one too, once known):
    /// where the device's copy stands and the role last learned.
    #[serde(default, serialize_with = "crate::protocol::map_of", deserialize_with = "crate::protocol::sorted_spaces")]
    pub spaces: Followed,
    /// Spaces a pull said the user left, until they join again: their rows
    /// were removed, an applied echo of an op there is not kept, and an
    /// edit there is refused on the device.
    #[serde(default, skip_serializing_if = "Names::is_empty")]
    pub left: Names,
}

/// A space as the app sees it: `db.spaces()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceInfo {
    /// The space's name; `None` for the personal space before its name is known.
    pub space: Option<String>,
    /// The user's role.
    pub role: Role,
    /// Whether this is the user's personal space (where rows go by default).
    pub personal: bool,
}

/// What a pull answer changed in the membership the device knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Learned {
    /// Spaces left, by their name on the device: their rows go.
    pub left: Vec<String>,
    /// Whether anything of the record changed.
    pub changed: bool,
}

impl Following {
    /// The user the database belongs to (its personal space's owner), once known.
    pub fn user(&self) -> Option<&str> {
        self.personal.as_deref().and_then(space::personal_owner)
    }

    /// The name a device keys `space`'s rows by: empty for the personal space.
    pub fn local<'a>(&self, space: &'a str) -> &'a str {
        if self.personal.as_deref() == Some(space) {
            ""
        } else {
            space
        }
    }

    /// The name of a space the device keys by `local` (`None`: the personal
    /// space, name not yet known).
    pub fn name<'a>(&'a self, local: &'a str) -> Option<&'a str> {
        if local.is_empty() {
            self.personal.as_deref()
        } else {
            Some(local)
        }
    }

    /// The pull that asks for everything new in every followed space.
    pub fn request(&self, limit: usize) -> SpacesPullRequest {
        SpacesPullRequest { spaces: self.spaces.clone(), limit: Some(limit) }
    }

    /// The user's role in the space keyed `local`, as last learned (`None`:
    /// not followed, or not a member any more).
    pub fn role(&self, local: &str) -> Option<Role> {
        if local.is_empty() {
            return Some(Role::Owner);
        }
        self.spaces.get(local).and_then(|f| f.role)
    }

    /// Whether the device was told the user left the space keyed `local`.
    pub fn has_left(&self, local: &str) -> bool {
        !local.is_empty() && self.left.contains(local)
    }

    /// Whether an edit in the space keyed `local` would be refused, by what
    /// this device last learned: the judge's own rule and words
    /// ([`space::may_write`]). A space the device knows nothing of yet is
    /// the server's to judge (a grant may be on its way).
    pub fn may_write(&self, local: &str) -> Result<(), Denied> {
        if self.has_left(local) {
            return space::may_write(local, None);
        }
        match self.role(local) {
            Some(role) => space::may_write(self.name(local).unwrap_or(local), Some(role)),
            None => Ok(()),
        }
    }

    /// Takes the membership news of a pull answer (before its pages): the
    /// personal space's name, spaces joined (followed from the start), roles
    /// changed, spaces left (unfollowed).
    pub fn learn(&mut self, answer: &SpacesPullResponse) -> Learned {
        let mut out = Learned::default();
        if let Some(p) = &answer.personal {
            if self.personal.as_ref() != Some(p) && space::personal_owner(p).is_some() {
                self.personal = Some(p.clone());
                out.changed = true;
            }
        }
        // Spaces joined are followed from the start, taken in together (a
        // first pull of a user in thousands of spaces joins them all at
        // once); then each gets its role, the answer's last word winning.
        let fresh = answer.joined.iter().filter(|m| !self.spaces.contains_key(&m.space));
        self.follow_all(fresh.map(|m| (m.space.clone(), Follow::default())).collect());
        for m in &answer.joined {
            if let Some(follow) = self.spaces.get_mut(&m.space) {
                follow.role = Some(m.role);
            }
            self.left.remove(&m.space);
            out.changed = true;
        }
        for m in &answer.roles {
            if let Some(f) = self.spaces.get_mut(&m.space) {
                f.role = Some(m.role);
                out.changed = true;
            }
        }
        for s in &answer.left {
            // A server never says a user left their own space; if one did, the rows stay.
            if self.personal.as_ref() == Some(s) || self.spaces.remove(s).is_none() {
                continue;
            }
            self.left.insert(s);
            out.left.push(self.local(s).to_owned());
            out.changed = true;
        }
        out
    }

    /// Follows every space of `fresh` (none followed yet): appended when
    /// they come after every space followed, else all sorted once.
    fn follow_all(&mut self, fresh: Vec<(String, Follow)>) {
        let Some((first, _)) = fresh.first() else { return };
        let in_order = fresh.windows(2).all(|w| w[0].0 < w[1].0);
        if in_order && self.spaces.last().is_none_or(|(last, _)| last < first) {
            for (name, follow) in fresh {
                crate::protocol::put(&mut self.spaces, name, follow);
            }
            return;
        }
        let mut all = std::mem::take(&mut self.spaces).into_tuple_vec();
        all.extend(fresh);
        let mut all = crate::cold_sort::sorted_by(all, |a, b| a.0.cmp(&b.0));
        // A space named twice by one answer is followed once (its role is set after).
        all.dedup_by(|a, b| a.0 == b.0);
        self.spaces = Followed::from_sorted_store_unchecked(all);
    }

    /// Moves a followed space's cursor past a page. `false` (nothing taken)
    /// for a page of a space the device does not follow.
    pub fn advance(&mut self, page: &SpacePage) -> bool {
        match self.spaces.get_mut(&page.space) {
            Some(f) => {
                f.cursor = f.cursor.max(page.cursor);
                true
            }
            None => false,
        }
    }

    /// How far the device has pulled the space an op names (`None`: the
    /// personal one): the op's `seen` (PROTOCOL §2a). A space not followed
    /// yet is pulled up to nothing.
    pub fn cursor_of(&self, space: Option<&str>) -> u64 {
        match space.filter(|s| self.personal.as_deref() != Some(*s)) {
            None => self.personal_cursor(),
            Some(s) => self.spaces.get(s).map_or(0, |f| f.cursor),
        }
    }

    /// The personal space's cursor (0 until its name is known).
    pub fn personal_cursor(&self) -> u64 {
        self.personal.as_ref().and_then(|p| self.spaces.get(p)).map_or(0, |f| f.cursor)
    }

    /// The spaces as the app lists them: the personal one first, then the
    /// others by name.
    pub fn list(&self) -> Vec<SpaceInfo> {
        let mut out = vec![SpaceInfo { space: self.personal.clone(), role: Role::Owner, personal: true }];
        for (name, f) in &self.spaces {
            if Some(name) == self.personal.as_ref() {
                continue;
            }
            if let Some(role) = f.role {
                out.push(SpaceInfo { space: Some(name.clone()), role, personal: false });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Membership;

    fn answer(personal: &str, joined: &[(&str, Role)], roles: &[(&str, Role)], left: &[&str]) -> SpacesPullResponse {
        let m = |l: &[(&str, Role)]| l.iter().map(|(s, r)| Membership { space: (*s).into(), role: *r }).collect();
        SpacesPullResponse {
            personal: Some(personal.into()),
            joined: m(joined),
            roles: m(roles),
            left: left.iter().map(|s| (*s).into()).collect(),
            ..SpacesPullResponse::default()
        }
    }

    #[test]
    fn spaces_joined_in_any_order_are_all_followed_in_order() {
        let mut f = Following::default();
        f.learn(&answer("~ann", &[("b", Role::Viewer), ("d", Role::Editor)], &[], &[]));
        // After every space followed: appended; then interleaved and out of order: sorted in.
        f.learn(&answer("~ann", &[("e", Role::Owner)], &[], &[]));
        f.learn(&answer("~ann", &[("c", Role::Viewer), ("a", Role::Viewer), ("a", Role::Editor), ("b", Role::Owner)], &[], &[]));
        let followed: Vec<(&str, Option<Role>)> = f.spaces.iter().map(|(k, v)| (k.as_str(), v.role)).collect();
        assert_eq!(
            followed,
            [
                ("a", Some(Role::Editor)),
                ("b", Some(Role::Owner)),
                ("c", Some(Role::Viewer)),
                ("d", Some(Role::Editor)),
                ("e", Some(Role::Owner))
            ]
        );
        assert_eq!(f.role("c"), Some(Role::Viewer), "found by a search, so in order");
        let stored = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Following>(&stored).unwrap(), f);
        // Following nothing: stored as `{}` and read back.
        let none = serde_json::to_string(&Following::default()).unwrap();
        assert_eq!(none, r#"{"spaces":{}}"#);
        assert_eq!(serde_json::from_str::<Following>(&none).unwrap(), Following::default());
    }

    #[test]
    fn the_personal_space_is_the_unnamed_one_and_always_writable() {
        let mut f = Following::default();
        assert_eq!(f.local("~ann"), "~ann", "not known yet");
        assert!(f.may_write("").is_ok());
        f.learn(&answer("~ann", &[("~ann", Role::Owner)], &[], &[]));
        assert_eq!(f.local("~ann"), "");
        assert_eq!(f.name(""), Some("~ann"));
        assert_eq!(f.list()[0], SpaceInfo { space: Some("~ann".into()), role: Role::Owner, personal: true });
        assert_eq!(f.list().len(), 1);
        // A server saying the user left their own space is not believed.
        let l = f.learn(&answer("~ann", &[], &[], &["~ann"]));
        assert!(l.left.is_empty() && f.spaces.contains_key("~ann"));
    }

    #[test]
    fn joins_roles_and_leaves_decide_who_may_write_where() {
        let mut f = Following::default();
        f.learn(&answer("~coach", &[("~coach", Role::Owner), ("diary", Role::Viewer)], &[], &[]));
        assert_eq!(f.request(10).spaces.keys().collect::<Vec<_>>(), ["diary", "~coach"], "joined: followed from the start");
        assert_eq!(f.spaces.get("diary"), Some(&Follow { cursor: 0, role: Some(Role::Viewer) }));
        let denied = f.may_write("diary").unwrap_err();
        assert_eq!(
            (denied.code, denied.reason.as_str()),
            (space::READ_ONLY, "you are a viewer of space diary: viewers cannot edit its rows")
        );
        assert!(f.may_write("elsewhere").is_ok(), "a space not known yet is the server's to judge");
        f.learn(&answer("~coach", &[], &[("diary", Role::Editor)], &[]));
        assert!(f.may_write("diary").is_ok());
        assert_eq!(f.request(10).spaces.get("diary").and_then(|f| f.role), Some(Role::Editor));
        let l = f.learn(&answer("~coach", &[], &[], &["diary"]));
        assert_eq!(l.left, vec!["diary".to_owned()]);
        assert!(f.has_left("diary") && !f.request(10).spaces.contains_key("diary"));
        assert_eq!(f.may_write("diary").unwrap_err().code, space::FORBIDDEN);
        // Joined again: followed from the start, writable.
        f.learn(&answer("~coach", &[("diary", Role::Editor)], &[], &[]));
        assert!(!f.has_left("diary") && f.may_write("diary").is_ok());
        assert_eq!(f.spaces.get("diary").map(|f| f.cursor), Some(0));
    }

    #[test]
    fn a_page_moves_only_its_followed_space() {
        let mut f = Following::default();
        f.learn(&answer("~a", &[("~a", Role::Owner), ("s", Role::Editor)], &[], &[]));
        let page = |s: &str, c| SpacePage { space: s.into(), changes: vec![], cursor: c, has_more: false };
        assert!(f.advance(&page("s", 7)));
        assert!(f.advance(&page("s", 3)), "a cursor never goes back");
        assert_eq!(f.spaces.get("s").map(|f| f.cursor), Some(7));
        assert!(!f.advance(&page("unknown", 9)));
        assert!(f.advance(&page("~a", 4)));
        assert_eq!(f.personal_cursor(), 4);
    }
}
