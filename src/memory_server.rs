//! An in-memory server: the [`crate::judge`] over hash maps, per space.
//!
//! It answers push, pull (one space or every followed space), verdicts and
//! membership exactly as the reference server does, without HTTP or SQL.
//! The simulator syncs devices against it; apps can use it in their own tests.

use std::collections::{BTreeMap, HashMap};

use crate::judge::{judge_batch, recall, JudgeError, Known, Limits, Placed, Remembered};
use crate::protocol::space::Invitation;
use crate::protocol::{
    page_fits, Change, ErrorBody, ErrorCode, Op, OpId, PullResponse, PushRequest, PushResponse, Row, RowKey, SpacePage, SpacesPullRequest,
    SpacesPullResponse, VerdictsRequest, VerdictsResponse, MAX_PULL_LIMIT, MAX_PULL_PAGE_BYTES,
};
use crate::schema::Schema;
use crate::space::{self, MemberRefusal, Role, SpaceId};

/// A membership refusal as the server answers it.
fn refused(r: MemberRefusal) -> ErrorBody {
    match r {
        MemberRefusal::Forbidden(m) => ErrorBody::new(ErrorCode::Forbidden, m),
        MemberRefusal::Conflict(m) => ErrorBody::new(ErrorCode::Conflict, m),
        MemberRefusal::BadRequest(m) => ErrorBody::new(ErrorCode::BadRequest, m),
    }
}

/// One user's verdicts, remembered forever, and audit counts.
#[derive(Debug, Clone, Default)]
pub struct UserData {
    /// (opId) → remembered verdict. Never purged.
    pub verdicts: HashMap<OpId, Remembered>,
    /// (opId) → the placed row a rejected op edits, to recall the rejection with that row.
    pub rejected_rows: HashMap<OpId, Placed>,
    /// Audit: how many verdicts were remembered per opId (must never exceed 1).
    pub verdict_count: HashMap<OpId, u32>,
    /// Audit: how many seqs each opId took (must never exceed 1).
    pub seq_count: HashMap<OpId, u32>,
}

/// One space's rows with their seq, and its head.
#[derive(Debug, Clone, Default)]
pub struct SpaceData {
    /// Row key → (row, seq of its latest change).
    pub rows: HashMap<RowKey, (Row, u64)>,
    /// seq → row key, for pull in seq order (one entry per row, at its latest seq).
    pub by_seq: BTreeMap<u64, RowKey>,
    /// The space's head seq.
    pub head: u64,
}

/// An invitation to a space not accepted yet (PROTOCOL §3c).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingInvitation {
    /// The role accepting gives.
    pub role: Role,
    /// The owner who invited.
    pub from: String,
    /// When it lapses (ms); `None`: the server has no clock.
    pub expires_at: Option<u64>,
}

/// The whole in-memory server.
#[derive(Debug, Clone)]
pub struct MemoryServer {
    /// The schema rows are validated against (may be swapped to model a release).
    pub schema: Schema,
    /// user id → verdicts.
    pub users: HashMap<String, UserData>,
    /// space name → rows (a personal space, `~<user>`, appears at its first write).
    pub spaces: HashMap<String, SpaceData>,
    /// Shared spaces that exist (created; a personal space always exists).
    pub created: std::collections::HashSet<String>,
    /// (space, user) → role: the stored memberships.
    pub members: BTreeMap<(String, String), Role>,
    /// (space, user) → the pending invitation: the role offered, who
    /// invited, and when it lapses (by [`MemoryServer::now`]; no clock: never).
    pub invitations: BTreeMap<(String, String), PendingInvitation>,
    /// How long an invitation stays pending, in ms of [`MemoryServer::now`].
    pub invitation_ttl_ms: u64,
    /// The injected server clock (ms): answers carry it as `now`, and
    /// `max_future_ms` bounds `at` by it. `None` (the default): no clock.
    pub now: Option<u64>,
    /// How far ahead of `now` an op's `at` may be; `None` (the default): no bound.
    pub max_future_ms: Option<u64>,
    /// Every op applied, in the order judged: what the simulator reads the
    /// whole history from (to know the truth of §2a without the notes).
    pub journal: Vec<Judged>,
}

/// An op the server applied, in its space, with the seq it took if it moved a mark.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The op as sent.
    pub op: Op,
    /// The space it wrote in.
    pub space: String,
    /// The seq of the write, when a mark moved.
    pub seq: Option<u64>,
}

impl MemoryServer {
    /// An empty server with `schema`.
    pub fn new(schema: Schema) -> Self {
        MemoryServer {
            schema,
            users: HashMap::new(),
            spaces: HashMap::new(),
            created: Default::default(),
            members: BTreeMap::new(),
            invitations: BTreeMap::new(),
            invitation_ttl_ms: 7 * 24 * 3600 * 1000,
            now: None,
            max_future_ms: None,
            journal: Vec::new(),
        }
    }

    /// The judge's limits: the injected clock and bound (none unless both are set).
    fn limits(&self) -> Limits {
        match self.now {
            Some(now) => Limits::at(now, self.max_future_ms),
            None => Limits::default(),
        }
    }

    fn stored_role(&self, space: &str, user: &str) -> Option<Role> {
        self.members.get(&(space.to_owned(), user.to_owned())).copied()
    }

    /// `user`'s role in `space` (the personal space's user owns it).
    pub fn role(&self, space: &str, user: &str) -> Option<Role> {
        space::role_of(user, space, self.stored_role(space, user))
    }

    /// `POST /v1/push` for `user`: shape check, judge, remember, write.
    pub fn push(&mut self, user: &str, req: &PushRequest) -> Result<PushResponse, ErrorBody> {
        req.check_shape().map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e.to_string()))?;
        let limits = self.limits();
        let personal = space::personal(user);
        let mut known = Known::default();
        let verdicts = self.users.get(user);
        for op in &req.batch {
            let name = op.space_or(&personal);
            let space: SpaceId = name.into();
            if let Some(role) = self.stored_role(name, user) {
                known.roles.insert(space.clone(), role);
            }
            if let Some(data) = self.spaces.get(name) {
                known.heads.insert(space.clone(), data.head);
                if let Some((row, _)) = data.rows.get(&op.row_key()) {
                    known.rows.insert((space, op.row_key()), row.clone());
                }
            }
            if let Some(v) = verdicts.and_then(|d| d.verdicts.get(&op.op_id)) {
                known.verdicts.insert(op.op_id.clone(), v.clone());
            }
        }
        let j = judge_batch(&self.schema, user, &req.batch, known, &limits).map_err(|e| match e {
            JudgeError::SchemaTooNew { .. } => ErrorBody::new(ErrorCode::SchemaTooNew, e.to_string()),
        })?;
        let took: HashMap<&OpId, u64> = j.changes.iter().map(|c| (&c.op_id, c.seq)).collect();
        for r in &j.remember {
            if let (Remembered::Applied, Some(op)) = (&r.verdict, req.batch.iter().find(|o| o.op_id == r.op_id)) {
                self.journal.push(Judged { op: op.clone(), space: r.space.to_string(), seq: took.get(&r.op_id).copied() });
            }
        }
        drop(took);
        let data = self.users.entry(user.to_owned()).or_default();
        for r in j.remember {
            *data.verdict_count.entry(r.op_id.clone()).or_default() += 1;
            if let Remembered::Rejected { .. } = r.verdict {
                data.rejected_rows.insert(r.op_id.clone(), (r.space, r.key));
            }
            data.verdicts.insert(r.op_id, r.verdict);
        }
        for change in j.changes {
            *data.seq_count.entry(change.op_id).or_default() += 1;
        }
        for w in j.writes {
            let space = self.spaces.entry(w.space.to_string()).or_default();
            if let Some((_, old_seq)) = space.rows.get(&w.key) {
                space.by_seq.remove(old_seq);
            }
            space.by_seq.insert(w.seq, w.key.clone());
            space.rows.insert(w.key, (w.row, w.seq));
        }
        for (name, head) in j.heads {
            self.spaces.entry(name.to_string()).or_default().head = head;
        }
        Ok(PushResponse { attempt_key: req.attempt_key.clone(), verdicts: j.verdicts, now: self.now })
    }

    /// `POST /v1/verdicts` for `user` (shape already checked): what is
    /// remembered of each opId, read-only — nothing is judged or written. A
    /// rejection carries a row only of a space `user` may read now.
    pub fn verdicts(&self, user: &str, req: &VerdictsRequest) -> VerdictsResponse {
        let mut saved = HashMap::new();
        let mut rows = HashMap::new();
        if let Some(data) = self.users.get(user) {
            for id in &req.op_ids {
                let Some(v) = data.verdicts.get(id) else { continue };
                let at = data.rejected_rows.get(id).cloned();
                if let Some((space, key)) = &at {
                    let readable = self.role(space, user).is_some();
                    if let (true, Some((row, _))) = (readable, self.spaces.get(&**space).and_then(|d| d.rows.get(key))) {
                        rows.insert((space.clone(), key.clone()), row.clone());
                    }
                }
                saved.insert(id.clone(), (v.clone(), at));
            }
        }
        VerdictsResponse { verdicts: recall(&self.schema, &req.op_ids, &saved, &rows, &self.limits()), now: self.now }
    }

    /// One space's rows changed after `cursor`, in seq order, at most
    /// `limit` changes and `budget` bytes of rows (never fewer than one
    /// change), as the schema's newest version spells them.
    fn page(&self, name: &str, cursor: u64, limit: usize, budget: usize) -> (SpacePage, usize) {
        let (mut changes, mut bytes, mut has_more) = (Vec::new(), 0, false);
        if let Some(data) = self.spaces.get(name) {
            for (seq, key) in data.by_seq.range(cursor + 1..) {
                let Some((row, _)) = data.rows.get(key) else { continue };
                let size = row.encoded_len();
                if changes.len() == limit || !page_fits(changes.len(), bytes, size, budget) {
                    has_more = true;
                    break;
                }
                bytes += size;
                let row = self.schema.upgrade_row(&key.table, row).into_owned();
                changes.push(Change { key: key.clone(), row, seq: *seq });
            }
        }
        let cursor = changes.last().map_or(cursor, |c| c.seq);
        (SpacePage { space: name.to_owned(), changes, cursor, has_more }, bytes)
    }

    /// `GET /v1/pull?cursor&limit` for `user`: the personal space's rows
    /// changed after `cursor`, in seq order, at most `limit` and
    /// [`crate::protocol::MAX_PULL_PAGE_BYTES`] of rows, as the schema's
    /// newest version spells them, with that version.
    pub fn pull(&self, user: &str, cursor: u64, limit: usize) -> PullResponse {
        let limit = limit.clamp(1, MAX_PULL_LIMIT);
        let (page, _) = self.page(&space::personal(user), cursor, limit, MAX_PULL_PAGE_BYTES);
        PullResponse {
            changes: page.changes,
            cursor: page.cursor,
            has_more: page.has_more,
            now: self.now,
            schema_version: Some(self.schema.version),
            schema_tag: None,
        }
    }

    /// `POST /v1/pull` for `user` (shape already checked): every space the
    /// device follows or `user` belongs to (PROTOCOL §4b).
    pub fn pull_spaces(&self, user: &str, req: &SpacesPullRequest) -> SpacesPullResponse {
        let personal = space::personal(user);
        let mut members: Vec<(String, Role, u64)> = self
            .members
            .iter()
            .filter(|((s, u), _)| u == user && *s != personal)
            .map(|((s, _), r)| (s.clone(), *r, self.head_of(s)))
            .collect();
        members.push((personal.clone(), Role::Owner, self.head_of(&personal)));
        let plan = space::plan_pull(&req.spaces, &members);
        let mut out = SpacesPullResponse {
            personal: Some(personal),
            joined: plan.joined,
            roles: plan.roles,
            left: plan.left,
            now: self.now,
            schema_version: Some(self.schema.version),
            ..Default::default()
        };
        let mut budget = space::PullBudget::new(req.limit);
        for (name, cursor) in plan.read {
            if budget.spent() {
                out.spaces.push(SpacePage { space: name, changes: Vec::new(), cursor, has_more: true });
                out.has_more = true;
                continue;
            }
            let (page, bytes) = self.page(&name, cursor, budget.changes, budget.bytes);
            budget.take(page.changes.len(), bytes);
            out.has_more |= page.has_more;
            out.spaces.push(page);
        }
        out
    }

    /// Creates the shared space `name`, owned by `owner` (again by its owner: nothing changes).
    pub fn create_space(&mut self, name: &str, owner: &str) -> Result<(), ErrorBody> {
        space::check_shared_space(name).map_err(|p| ErrorBody::new(ErrorCode::BadRequest, format!("space: {p}")))?;
        if self.created.contains(name) {
            return match self.stored_role(name, owner) {
                Some(Role::Owner) => Ok(()),
                _ => Err(ErrorBody::new(ErrorCode::Conflict, format!("a space named {name} exists already"))),
            };
        }
        self.created.insert(name.to_owned());
        self.members.insert((name.to_owned(), owner.to_owned()), Role::Owner);
        Ok(())
    }

    /// Sets `user`'s role in `name` (`None`: removes), as `by` (`None`: the
    /// admin credential), with the rules of [`space::check_member_change`],
    /// as the reference server does: a user adding someone who is not a
    /// member invites them (`Ok(true)`; `None` withdraws the invitation), and
    /// any member may remove themself (leave), but a space's last owner.
    pub fn set_member(&mut self, by: Option<&str>, name: &str, user: &str, role: Option<Role>) -> Result<bool, ErrorBody> {
        space::check_member_change(name, user, None, None, 0).map_err(refused)?;
        let exists = space::personal_owner(name).is_some() || self.created.contains(name);
        let before = self.stored_role(name, user);
        let leaving = by == Some(user) && role.is_none();
        match by {
            _ if leaving => {}
            None if !exists => return Err(ErrorBody::new(ErrorCode::NotFound, format!("no space {name}"))),
            Some(caller) if !exists || !space::manages_members(self.role(name, caller)) => {
                return Err(refused(space::not_an_owner(name)));
            }
            _ => {}
        }
        let key = (name.to_owned(), user.to_owned());
        if let (Some(caller), None) = (by, before) {
            match role {
                None if leaving => return Ok(false),
                None => self.invitations.remove(&key),
                Some(r) => {
                    let expires_at = self.now.map(|now| now.saturating_add(self.invitation_ttl_ms));
                    self.invitations.insert(key, PendingInvitation { role: r, from: caller.to_owned(), expires_at })
                }
            };
            return Ok(role.is_some());
        }
        let owners = self.members.iter().filter(|((s, _), r)| s == name && **r == Role::Owner).count();
        if space::check_member_change(name, user, before, role, owners).map_err(refused)? {
            self.invitations.remove(&key);
            if space::withdraws_invitations(before, role) {
                self.invitations.retain(|(s, _), i| !(s == name && i.from == user));
            }
            match role {
                Some(r) => self.members.insert(key, r),
                None => self.members.remove(&key),
            };
        }
        Ok(false)
    }

    /// Whether `invitation` is still pending by the server's clock.
    fn pending(&self, invitation: &PendingInvitation) -> bool {
        match (invitation.expires_at, self.now) {
            (Some(expires), Some(now)) => now < expires,
            _ => true,
        }
    }

    /// `user` accepts their invitation to `name`: the role they now have
    /// (already a member: that role; none pending: `not_found`).
    pub fn accept(&mut self, user: &str, name: &str) -> Result<Role, ErrorBody> {
        space::check_space(name).map_err(|p| ErrorBody::new(ErrorCode::BadRequest, format!("space: {p}")))?;
        if let Some(role) = self.role(name, user) {
            return Ok(role);
        }
        let key = (name.to_owned(), user.to_owned());
        let none = || ErrorBody::new(ErrorCode::NotFound, format!("you have no pending invitation to space {name}"));
        let offered = self.invitations.get(&key).filter(|i| self.pending(i)).cloned().ok_or_else(none)?;
        if !space::invitation_stands(self.role(name, &offered.from)) {
            // As the reference server does: refused, and gone from the list.
            self.invitations.remove(&key);
            return Err(none());
        }
        let role = offered.role;
        self.invitations.remove(&key);
        self.members.insert(key, role);
        Ok(role)
    }

    /// `user` declines their invitation to `name` (none: nothing happens).
    pub fn decline(&mut self, user: &str, name: &str) {
        self.invitations.remove(&(name.to_owned(), user.to_owned()));
    }

    /// `user`'s pending invitations, by space name.
    pub fn invitations(&self, user: &str) -> Vec<Invitation> {
        let mine = self.invitations.iter().filter(|((_, u), i)| u == user && self.pending(i));
        mine.map(|i| Self::listed(i).for_invitee()).collect()
    }

    /// `GET /v1/spaces/invitations` for `by`: the pending invitations to
    /// `space`, by invitee, for an owner of it.
    pub fn invited(&self, by: &str, name: &str) -> Result<Vec<Invitation>, ErrorBody> {
        space::check_space(name).map_err(|p| ErrorBody::new(ErrorCode::BadRequest, format!("space: {p}")))?;
        if !space::manages_members(self.role(name, by)) {
            return Err(ErrorBody::new(ErrorCode::Forbidden, space::not_an_owner(name).to_string()));
        }
        Ok(self.invitations.iter().filter(|((s, _), i)| s == name && self.pending(i)).map(Self::listed).collect())
    }

    fn listed(((space, user), i): (&(String, String), &PendingInvitation)) -> Invitation {
        Invitation {
            space: space.clone(),
            user: user.clone(),
            role: i.role,
            from: i.from.clone(),
            expires_at: i.expires_at.unwrap_or(u64::MAX),
        }
    }

    fn head_of(&self, name: &str) -> u64 {
        self.spaces.get(name).map_or(0, |d| d.head)
    }

    /// `GET /v1/spaces/members` for `by`: the members of `space`, for a member of it.
    pub fn members(&self, by: &str, name: &str) -> Result<Vec<(String, Role)>, ErrorBody> {
        space::check_space(name).map_err(|p| ErrorBody::new(ErrorCode::BadRequest, format!("space: {p}")))?;
        if self.role(name, by).is_none() {
            return Err(ErrorBody::new(ErrorCode::Forbidden, space::not_a_member(name).to_string()));
        }
        let stored = self.members.iter().filter(|((s, _), _)| s == name).map(|((_, u), r)| (u.clone(), *r)).collect();
        Ok(space::listed_members(name, stored))
    }

    /// The head seq of the user's personal space.
    pub fn head(&self, user: &str) -> u64 {
        self.head_of(&space::personal(user))
    }

    /// A user's personal rows, for checks.
    pub fn rows(&self, user: &str) -> BTreeMap<RowKey, Row> {
        self.space_rows(&space::personal(user))
    }

    /// A space's rows, for checks.
    pub fn space_rows(&self, name: &str) -> BTreeMap<RowKey, Row> {
        self.spaces.get(name).map(|d| d.rows.iter().map(|(k, (r, _))| (k.clone(), r.clone())).collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Op, Outcome, Value};

    fn op(id: &str, row: &str) -> Op {
        Op {
            op_id: OpId::new(id),
            table: "sets".into(),
            row_id: row.into(),
            fields: [("exercise", Value::from("row")), ("weightKg", 10.0.into()), ("reps", 3i64.into())]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            at: 5,
            schema: 1,
            space: None,
            seen: None,
        }
    }

    fn req(key: &str, batch: Vec<Op>) -> PushRequest {
        PushRequest { attempt_key: key.into(), batch }
    }

    #[test]
    fn three_identical_pushes_make_one_row_and_one_seq() {
        let mut s = MemoryServer::new(Schema::workout());
        let r = req("d:a1", vec![op("d:1", "d-1")]);
        for i in 0..3 {
            let resp = s.push("u", &r).unwrap();
            let want = if i == 0 { Outcome::Applied } else { Outcome::Duplicate };
            assert_eq!(resp.verdicts[0].outcome, want);
        }
        assert_eq!(s.head("u"), 1);
        assert_eq!(s.rows("u").len(), 1);
    }

    #[test]
    fn two_users_with_the_same_op_ids_are_judged_apart() {
        let mut s = MemoryServer::new(Schema::workout());
        let r = req("d:a1", vec![op("d:1", "d-1")]);
        assert_eq!(s.push("alice", &r).unwrap().verdicts[0].outcome, Outcome::Applied);
        assert_eq!(s.push("bob", &r).unwrap().verdicts[0].outcome, Outcome::Applied);
        assert_eq!(s.pull("alice", 0, 10).changes.len(), 1);
        assert_eq!(s.pull("bob", 0, 10).changes.len(), 1);
        assert_eq!(s.pull("carol", 0, 10).changes.len(), 0);
    }

    #[test]
    fn pull_pages_in_seq_order_each_row_once_at_its_latest_seq() {
        let mut s = MemoryServer::new(Schema::workout());
        let batch: Vec<Op> = (0..25).map(|i| op(&format!("d:{i}"), &format!("d-{i}"))).collect();
        s.push("u", &req("d:a1", batch)).unwrap();
        let mut again = op("d:99", "d-0");
        again.at = 6;
        s.push("u", &req("d:a2", vec![again])).unwrap();
        let (mut cursor, mut seen, mut pages) = (0, vec![], 0);
        loop {
            let p = s.pull("u", cursor, 10);
            pages += 1;
            seen.extend(p.changes.iter().map(|c| c.seq));
            cursor = p.cursor;
            if !p.has_more {
                break;
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(seen.len(), 25, "d-0 once, at its latest seq");
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*seen.last().unwrap(), 26);
        assert_eq!(s.pull("u", cursor, 10).cursor, cursor);
    }

    #[test]
    fn a_bad_shape_is_a_400_and_writes_nothing() {
        let mut s = MemoryServer::new(Schema::workout());
        let mut bad = op("d:1", "d-1");
        bad.op_id = OpId::new("é:1");
        let e = s.push("u", &req("d:a1", vec![op("d:0", "d-0"), bad])).unwrap_err();
        assert_eq!(e.error.code, ErrorCode::BadRequest);
        assert_eq!(s.head("u"), 0);
        assert!(s.users.get("u").is_none_or(|d| d.verdicts.is_empty()));
    }

    #[test]
    fn verdicts_recall_applied_rejected_and_unknown_and_write_nothing() {
        use crate::protocol::Recalled;
        let mut s = MemoryServer::new(Schema::workout());
        let mut bad = op("d:2", "d-1");
        bad.fields.insert("reps".into(), 0i64.into());
        bad.at = 6;
        let pushed = s.push("u", &req("d:a1", vec![op("d:1", "d-1"), bad])).unwrap();
        let before = (s.head("u"), s.users["u"].verdicts.len());
        let ask = VerdictsRequest { op_ids: vec!["d:1".into(), "d:2".into(), "d:3".into()] };
        let got = s.verdicts("u", &ask);
        assert_eq!(got.verdicts[0].recalled, Recalled::Applied);
        let Outcome::Rejected { reason, code, row } = &pushed.verdicts[1].outcome else { panic!("{pushed:?}") };
        assert_eq!(got.verdicts[1].recalled, Recalled::Rejected { reason: reason.clone(), code: code.clone(), row: row.clone() });
        assert!(row.is_some());
        assert_eq!(got.verdicts[2].recalled, Recalled::Unknown);
        assert!(s.verdicts("bob", &ask).verdicts.iter().all(|v| v.recalled == Recalled::Unknown));
        assert_eq!((s.head("u"), s.users["u"].verdicts.len()), before);
        assert_eq!(got.now, None, "no clock injected");
    }

    #[test]
    fn an_injected_clock_is_answered_and_bounds_at() {
        let mut s = MemoryServer::new(Schema::workout());
        s.now = Some(1_000);
        s.max_future_ms = Some(100);
        let mut ahead = op("d:1", "d-1");
        ahead.at = 1_101;
        let resp = s.push("u", &req("d:a1", vec![ahead, op("d:2", "d-2")])).unwrap();
        assert_eq!(resp.now, Some(1_000));
        assert!(matches!(&resp.verdicts[0].outcome, Outcome::Rejected { code, .. } if code == "clock_ahead"));
        assert_eq!(resp.verdicts[1].outcome, Outcome::Applied);
        assert_eq!(s.pull("u", 0, 10).now, Some(1_000));
    }

    #[test]
    fn an_invitation_lapses_with_its_inviters_ownership() {
        let mut s = MemoryServer::new(Schema::workout());
        s.create_space("gym", "alice").unwrap();
        for co in ["bob", "cid"] {
            s.set_member(Some("alice"), "gym", co, Some(Role::Owner)).unwrap();
            s.accept(co, "gym").unwrap();
        }
        s.set_member(Some("alice"), "gym", "ann", Some(Role::Viewer)).unwrap();
        s.set_member(Some("bob"), "gym", "bob2", Some(Role::Owner)).unwrap();
        s.set_member(Some("cid"), "gym", "cid2", Some(Role::Owner)).unwrap();
        s.set_member(Some("alice"), "gym", "bob", Some(Role::Editor)).unwrap();
        s.set_member(Some("cid"), "gym", "cid", None).unwrap();
        for user in ["bob2", "cid2"] {
            assert!(s.invitations(user).is_empty(), "{user}'s is withdrawn with its inviter's role");
            assert_eq!(s.accept(user, "gym").unwrap_err().error.code, ErrorCode::NotFound);
        }
        assert_eq!(s.accept("ann", "gym").unwrap(), Role::Viewer, "alice's stands");
        // One whose inviter is no owner, however it came to be kept: refused.
        let stale = PendingInvitation { role: Role::Owner, from: "bob".into(), expires_at: None };
        s.invitations.insert(("gym".into(), "bob3".into()), stale);
        assert_eq!(s.accept("bob3", "gym").unwrap_err().error.code, ErrorCode::NotFound);
        assert!(s.invitations("bob3").is_empty(), "and it is gone");
    }

    #[test]
    fn owners_list_a_spaces_pending_invitations() {
        let mut s = MemoryServer::new(Schema::workout());
        s.create_space("gym", "alice").unwrap();
        s.set_member(Some("alice"), "gym", "ed", Some(Role::Editor)).unwrap();
        s.accept("ed", "gym").unwrap();
        s.set_member(Some("alice"), "gym", "zoe", Some(Role::Viewer)).unwrap();
        s.set_member(Some("alice"), "gym", "ann", Some(Role::Owner)).unwrap();
        let listed: Vec<(String, Role)> = s.invited("alice", "gym").unwrap().into_iter().map(|i| (i.user, i.role)).collect();
        assert_eq!(listed, [("ann".to_owned(), Role::Owner), ("zoe".to_owned(), Role::Viewer)], "by invitee");
        for who in ["ed", "zoe", "stranger"] {
            assert_eq!(s.invited(who, "gym").unwrap_err().error.code, ErrorCode::Forbidden, "{who}");
        }
        assert_eq!(s.invitations("zoe")[0].user, "", "the invitee's own listing does not name them");
    }

    #[test]
    fn spaces_roles_and_one_pull_for_every_space() {
        let mut s = MemoryServer::new(Schema::workout());
        s.create_space("gym", "alice").unwrap();
        assert_eq!(s.create_space("gym", "bob").unwrap_err().error.code, ErrorCode::Conflict);
        let mut shared = op("a:1", "r-1");
        shared.space = Some("gym".into());
        assert_eq!(s.push("alice", &req("a:a1", vec![shared.clone(), op("a:2", "r-1")])).unwrap().verdicts[0].outcome, Outcome::Applied);
        assert_eq!((s.head("alice"), s.head_of("gym")), (1, 1));
        let mut bobs = op("b:1", "r-1");
        bobs.space = Some("gym".into());
        let v = s.push("bob", &req("b:a1", vec![bobs.clone()])).unwrap();
        assert!(matches!(&v.verdicts[0].outcome, Outcome::Rejected { code, row: None, .. } if code == "forbidden"));
        assert_eq!(s.set_member(Some("bob"), "gym", "bob", Some(Role::Owner)).unwrap_err().error.code, ErrorCode::Forbidden);
        assert!(s.set_member(Some("alice"), "gym", "bob", Some(Role::Viewer)).unwrap(), "an invitation");
        let unasked = s.pull_spaces("bob", &SpacesPullRequest::default());
        assert_eq!(unasked.joined.len(), 1, "until bob accepts, nothing of gym reaches him");
        assert!(unasked.spaces.is_empty());
        assert_eq!(s.invitations("bob").len(), 1);
        assert_eq!(s.accept("bob", "gym").unwrap(), Role::Viewer);
        assert!(s.invitations("bob").is_empty());
        let first = s.pull_spaces("bob", &SpacesPullRequest::default());
        assert_eq!(
            first.joined.iter().map(|m| (m.space.as_str(), m.role)).collect::<Vec<_>>(),
            [("gym", Role::Viewer), ("~bob", Role::Owner)]
        );
        assert_eq!(first.spaces.len(), 1);
        assert_eq!(first.spaces[0].changes.len(), 1);
        // Granted: the early refusal stays; the viewer's new edit is read_only.
        let mut again = bobs;
        again.op_id = OpId::new("b:2");
        let v = s.push("bob", &req("b:a2", vec![again])).unwrap();
        assert!(matches!(&v.verdicts[0].outcome, Outcome::Rejected { code, row: Some(_), .. } if code == "read_only"));
        s.set_member(None, "gym", "bob", None).unwrap();
        let follow: SpacesPullRequest =
            serde_json::from_value(serde_json::json!({"spaces": {"gym": {"cursor": 1, "role": "viewer"}}})).unwrap();
        assert_eq!(s.pull_spaces("bob", &follow).left, ["gym"]);
        assert_eq!(s.set_member(None, "gym", "alice", None).unwrap_err().error.code, ErrorCode::Conflict, "the last owner");
        // Any member leaves; a declined invitation cannot be accepted.
        s.set_member(Some("alice"), "gym", "carol", Some(Role::Editor)).unwrap();
        s.accept("carol", "gym").unwrap();
        assert!(!s.set_member(Some("carol"), "gym", "carol", None).unwrap());
        assert_eq!(s.role("gym", "carol"), None);
        s.set_member(Some("alice"), "gym", "dave", Some(Role::Editor)).unwrap();
        s.decline("dave", "gym");
        assert_eq!(s.accept("dave", "gym").unwrap_err().error.code, ErrorCode::NotFound);
    }

    #[test]
    fn an_empty_batch_is_a_400() {
        let mut s = MemoryServer::new(Schema::workout());
        assert_eq!(s.push("u", &req("d:a1", vec![])).unwrap_err().error.code, ErrorCode::BadRequest);
    }
}
