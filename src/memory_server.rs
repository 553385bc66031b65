//! An in-memory server: the [`crate::judge`] over hash maps, per user.
//!
//! It answers push and pull exactly as the reference server does, without
//! HTTP or SQL. The simulator syncs devices against it; apps can use it in
//! their own tests.

use std::collections::{BTreeMap, HashMap};

use crate::judge::{judge_batch, recall, JudgeError, Known, Limits, Remembered};
use crate::protocol::{
    page_takes, Change, ErrorBody, ErrorCode, OpId, PullResponse, PushRequest, PushResponse, Row, RowKey, VerdictsRequest,
    VerdictsResponse, MAX_PULL_LIMIT,
};
use crate::schema::Schema;

/// One user's data: remembered verdicts, rows with their seq, the head.
#[derive(Debug, Clone, Default)]
pub struct UserData {
    /// (opId) → remembered verdict. Never purged.
    pub verdicts: HashMap<OpId, Remembered>,
    /// (opId) → the row a rejected op edits, to recall the rejection with that row.
    pub rejected_rows: HashMap<OpId, RowKey>,
    /// Row key → (row, seq of its latest change).
    pub rows: HashMap<RowKey, (Row, u64)>,
    /// seq → row key, for pull in seq order (one entry per row, at its latest seq).
    pub by_seq: BTreeMap<u64, RowKey>,
    /// The user's head seq.
    pub head: u64,
    /// Audit: how many verdicts were remembered per opId (must never exceed 1).
    pub verdict_count: HashMap<OpId, u32>,
    /// Audit: how many seqs each opId took (must never exceed 1).
    pub seq_count: HashMap<OpId, u32>,
}

/// The whole in-memory server.
#[derive(Debug, Clone)]
pub struct MemoryServer {
    /// The schema rows are validated against (may be swapped to model a release).
    pub schema: Schema,
    /// user id → data.
    pub users: HashMap<String, UserData>,
    /// The injected server clock (ms): answers carry it as `now`, and
    /// `max_future_ms` bounds `at` by it. `None` (the default): no clock.
    pub now: Option<u64>,
    /// How far ahead of `now` an op's `at` may be; `None` (the default): no bound.
    pub max_future_ms: Option<u64>,
}

impl MemoryServer {
    /// An empty server with `schema`.
    pub fn new(schema: Schema) -> Self {
        MemoryServer { schema, users: HashMap::new(), now: None, max_future_ms: None }
    }

    /// The judge's limits: the injected clock and bound (none unless both are set).
    fn limits(&self) -> Limits {
        match self.now {
            Some(now) => Limits::at(now, self.max_future_ms),
            None => Limits::default(),
        }
    }

    /// `POST /v1/push` for `user`: shape check, judge, remember, write.
    pub fn push(&mut self, user: &str, req: &PushRequest) -> Result<PushResponse, ErrorBody> {
        req.check_shape().map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e.to_string()))?;
        let limits = self.limits();
        let data = self.users.entry(user.to_owned()).or_default();
        // One user's data is that user's personal space; it has no members,
        // so an op naming any other space is refused (`forbidden`).
        let personal: crate::space::SpaceId = crate::space::personal(user).into();
        let mut known = Known::default();
        known.heads.insert(personal.clone(), data.head);
        for op in &req.batch {
            let key = op.row_key();
            if op.space_or(&personal) != &*personal {
                continue;
            }
            if let Some((row, _)) = data.rows.get(&key) {
                known.rows.insert((personal.clone(), key), row.clone());
            }
            if let Some(v) = data.verdicts.get(&op.op_id) {
                known.verdicts.insert(op.op_id.clone(), v.clone());
            }
        }
        let j = judge_batch(&self.schema, user, &req.batch, known, &limits).map_err(|e| match e {
            JudgeError::SchemaTooNew { .. } => ErrorBody::new(ErrorCode::SchemaTooNew, e.to_string()),
        })?;
        for r in j.remember {
            *data.verdict_count.entry(r.op_id.clone()).or_default() += 1;
            if let (Remembered::Rejected { .. }, true) = (&r.verdict, r.space == personal) {
                data.rejected_rows.insert(r.op_id.clone(), r.key);
            }
            data.verdicts.insert(r.op_id, r.verdict);
        }
        for (id, _) in j.seqs {
            *data.seq_count.entry(id).or_default() += 1;
        }
        for w in j.writes {
            if let Some((_, old_seq)) = data.rows.get(&w.key) {
                data.by_seq.remove(old_seq);
            }
            data.by_seq.insert(w.seq, w.key.clone());
            data.rows.insert(w.key, (w.row, w.seq));
        }
        if let Some((_, head)) = j.heads.iter().find(|(s, _)| *s == personal) {
            data.head = *head;
        }
        Ok(PushResponse { attempt_key: req.attempt_key.clone(), verdicts: j.verdicts, now: self.now })
    }

    /// `POST /v1/verdicts` for `user` (shape already checked): what is
    /// remembered of each opId, read-only — nothing is judged or written.
    pub fn verdicts(&self, user: &str, req: &VerdictsRequest) -> VerdictsResponse {
        let mut saved = HashMap::new();
        let mut rows = HashMap::new();
        let personal: crate::space::SpaceId = crate::space::personal(user).into();
        if let Some(data) = self.users.get(user) {
            for id in &req.op_ids {
                let Some(v) = data.verdicts.get(id) else { continue };
                let key = data.rejected_rows.get(id).map(|k| (personal.clone(), k.clone()));
                if let Some(at) = &key {
                    if let Some((row, _)) = data.rows.get(&at.1) {
                        rows.insert(at.clone(), row.clone());
                    }
                }
                saved.insert(id.clone(), (v.clone(), key));
            }
        }
        VerdictsResponse { verdicts: recall(&self.schema, &req.op_ids, &saved, &rows, &self.limits()), now: self.now }
    }

    /// `GET /v1/pull?cursor&limit` for `user`: rows changed after `cursor`, in
    /// seq order, at most `limit` and [`crate::protocol::MAX_PULL_PAGE_BYTES`] of rows,
    /// as the schema's newest version spells them, with that version.
    pub fn pull(&self, user: &str, cursor: u64, limit: usize) -> PullResponse {
        let limit = limit.clamp(1, MAX_PULL_LIMIT);
        let Some(data) = self.users.get(user) else {
            return PullResponse { changes: vec![], cursor, has_more: false, now: self.now, schema_version: Some(self.schema.version) };
        };
        let (mut changes, mut bytes, mut has_more) = (Vec::new(), 0, false);
        for (seq, key) in data.by_seq.range(cursor + 1..) {
            let Some((row, _)) = data.rows.get(key) else { continue };
            let size = row.encoded_len();
            if changes.len() == limit || !page_takes(changes.len(), bytes, size) {
                has_more = true;
                break;
            }
            bytes += size;
            let row = self.schema.upgrade_row(&key.table, row).into_owned();
            changes.push(Change { key: key.clone(), row, seq: *seq });
        }
        let cursor = changes.last().map_or(cursor, |c| c.seq);
        PullResponse { changes, cursor, has_more, now: self.now, schema_version: Some(self.schema.version) }
    }

    /// The user's head seq.
    pub fn head(&self, user: &str) -> u64 {
        self.users.get(user).map_or(0, |d| d.head)
    }

    /// A user's rows, for checks.
    pub fn rows(&self, user: &str) -> BTreeMap<RowKey, Row> {
        self.users.get(user).map(|d| d.rows.iter().map(|(k, (r, _))| (k.clone(), r.clone())).collect()).unwrap_or_default()
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
    fn an_empty_batch_is_a_400() {
        let mut s = MemoryServer::new(Schema::workout());
        assert_eq!(s.push("u", &req("d:a1", vec![])).unwrap_err().error.code, ErrorCode::BadRequest);
    }
}
