//! The server's judge (PROTOCOL §3): decide → remember → write, as pure code.
//!
//! A store (SQL, or [`crate::memory_server::MemoryServer`]) works in three moves
//! around this module, inside one transaction under the locks of the batch's
//! spaces (PROTOCOL §3c):
//!
//! 1. **load** what the batch touches into [`Known`]: the stored rows of its
//!    row keys in their spaces, the sender's saved verdicts of its opIds, the
//!    spaces' heads and the sender's roles in them;
//! 2. call [`judge_batch`], which decides every op in memory, in batch order
//!    (ops on the same row see each other's effect; an opId repeated inside
//!    the batch is a replay of its first occurrence);
//! 3. **persist** the [`Judgement`]: first insert [`Judgement::remember`] with
//!    `ON CONFLICT DO NOTHING` (if fewer rows come back than were sent, another
//!    writer got there first: roll back and judge again), then upsert
//!    [`Judgement::writes`] and the new heads.
//!
//! A verdict is remembered for every op it answers for the first time, and a
//! row is written only for ops that were remembered now and moved a mark. So a
//! replay writes nothing, and a replay of a rejected op after a rule change
//! is still rejected, word for word, with no row written.

use std::collections::{HashMap, HashSet};

use crate::conflict;
use crate::protocol::{Fields, Op, OpId, Outcome, Recalled, RememberedVerdict, Row, RowKey, Verdict, MAX_JUDGED_PER_PUSH};
use crate::rules::{NoRules, RuleInput, Rules};
use crate::schema::{Edit, Edited, RefusalCode, Schema};
use crate::space::{self, Role, SpaceId};

pub use crate::schema::MAX_ROW_BYTES;
/// The most bytes of rows one answer (push or verdicts) carries: every
/// answer stays small whatever the batch, so one user cannot make the server
/// build a huge answer.
pub const MAX_ANSWER_ROW_BYTES: usize = 1 << 20;
/// How far ahead of the server's clock an op's `at` may be by default: one day.
pub const DEFAULT_MAX_FUTURE_MS: u64 = 86_400_000;

/// The rejection code of an op whose `at` is implausibly far ahead of the server's clock.
pub const CLOCK_AHEAD: &str = crate::protocol::Code::ClockAhead.as_str();
/// The rejection code of an op that would grow its row past [`Limits::max_row_bytes`].
pub const ROW_TOO_LARGE: &str = RefusalCode::RowTooLarge.as_str();

/// The server's clock and the bounds a batch is judged within. Injected, so
/// the judge stays pure and tests choose the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The server's clock when judging, in ms since the Unix epoch.
    pub now: u64,
    /// How far ahead of `now` an op's `at` may be; `None` = no bound.
    pub max_future_ms: Option<u64>,
    /// The largest row an op may make (see [`MAX_ROW_BYTES`]).
    pub max_row_bytes: usize,
    /// The most bytes of rows one answer carries (see [`MAX_ANSWER_ROW_BYTES`]).
    pub max_answer_row_bytes: usize,
    /// Whether the judgement lists its [`Change`]s (what the app's backend
    /// hears: webhooks). Building them is about a fifth of the judge's time,
    /// spent for nobody when no one listens.
    pub list_changes: bool,
}

impl Default for Limits {
    /// No clock (`now` = 0) and no bound on `at`; the default size bounds; changes listed.
    fn default() -> Self {
        Limits { now: 0, max_future_ms: None, max_row_bytes: MAX_ROW_BYTES, max_answer_row_bytes: MAX_ANSWER_ROW_BYTES, list_changes: true }
    }
}

impl Limits {
    /// The default size bounds with the server's clock at `now` and `at` bounded by `max_future_ms`.
    pub fn at(now: u64, max_future_ms: Option<u64>) -> Limits {
        Limits { now, max_future_ms, ..Limits::default() }
    }
}

/// A verdict as the server remembers it, per (user, opId), forever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remembered {
    /// The op was applied (a replay answers `duplicate`).
    Applied,
    /// The op was rejected (a replay answers the same, word for word).
    Rejected {
        /// Human reason.
        reason: String,
        /// Machine code.
        code: String,
    },
}

impl Remembered {
    /// The status column: `applied` or `rejected`.
    pub fn status(&self) -> &'static str {
        match self {
            Remembered::Applied => "applied",
            Remembered::Rejected { .. } => "rejected",
        }
    }

    /// Rebuilds a remembered verdict from its stored columns.
    pub fn from_columns(status: &str, reason: Option<String>, code: Option<String>) -> Option<Remembered> {
        match status {
            "applied" => Some(Remembered::Applied),
            "rejected" => Some(Remembered::Rejected { reason: reason.unwrap_or_default(), code: code.unwrap_or_default() }),
            _ => None,
        }
    }

    /// The answer to a replay of the op: `applied` → `duplicate`; `rejected` →
    /// the same rejection, with the server's current row.
    pub fn replay(&self, current: Option<&Row>) -> Outcome {
        match self {
            Remembered::Applied => Outcome::Duplicate,
            Remembered::Rejected { reason, code } => {
                Outcome::Rejected { reason: reason.clone(), code: code.clone(), row: current.cloned() }
            }
        }
    }
}

/// Step 1 of PROTOCOL §3 for one op, with no writes: what would happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Accept; `row` is the row after the op, `moved` whether a mark changed
    /// (only then is the row written and a seq taken).
    Apply {
        /// The row after the op.
        row: Row,
        /// Whether any mark moved.
        moved: bool,
    },
    /// Refuse, with a code and a reason; nothing moves.
    Reject {
        /// Machine code.
        code: String,
        /// Human reason.
        reason: String,
    },
}

/// Decides one op against the stored row (PROTOCOL §3 step 1): refuse an op
/// stamped implausibly far ahead of the server's clock; then the one rule of
/// [`Schema::edit`] — the op and the row read as the newest version spells
/// them (§3b), merged, and the row after the op validated (schema, then
/// size) unless the row exists and nothing moved. A device's
/// [`Schema::check_edit`] runs the same rule.
pub fn decide(schema: &Schema, op: &Op, current: Option<&Row>, limits: &Limits) -> Decision {
    if let Some(bound) = limits.max_future_ms {
        if op.at > limits.now.saturating_add(bound) {
            let reason =
                format!("at {} is more than {bound} ms ahead of the server's clock ({}); the device's clock is wrong", op.at, limits.now);
            return Decision::Reject { code: CLOCK_AHEAD.to_owned(), reason };
        }
    }
    match schema.edit(&Edit::of(op), current, limits.max_row_bytes) {
        Ok(Edited { row, moved }) => Decision::Apply { row, moved },
        Err(refusal) => Decision::Reject { code: refusal.code.as_str().to_owned(), reason: refusal.reason },
    }
}

/// A row's place: its space and its key there (two spaces may hold rows of
/// the same key; they are different rows).
pub type Placed = (SpaceId, RowKey);

/// What the store knows that the batch touches, loaded under the locks of
/// the batch's spaces (PROTOCOL §3c).
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// The stored rows of the batch's row keys, in their spaces (absent = no row).
    pub rows: HashMap<Placed, Row>,
    /// The saved verdicts of the sender's opIds in the batch (absent = never answered).
    pub verdicts: HashMap<OpId, Remembered>,
    /// The head seq of each space of the batch (absent = 0).
    pub heads: HashMap<SpaceId, u64>,
    /// The sender's stored membership in each space of the batch (absent =
    /// not a member; the sender's own personal space needs none).
    pub roles: HashMap<SpaceId, Role>,
}

/// One row to upsert: its state after the batch and the seq of its last change.
#[derive(Debug, Clone, PartialEq)]
pub struct RowWrite {
    /// The space the row lives in.
    pub space: SpaceId,
    /// Where, in that space.
    pub key: RowKey,
    /// The row after the batch.
    pub row: Row,
    /// The seq (in the space) of the last op that moved it.
    pub seq: u64,
    /// No row was stored here before this batch: the store inserts it,
    /// where it rewrites one that was (PostgreSQL's plain insert and update
    /// cost about half an upsert, which probes for a conflict first).
    pub new: bool,
}

/// A verdict given for the first time, to remember: the op, the row it
/// edits (a rejection is recalled with that row's current state, to a sender
/// who may then read it) and the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Remember {
    /// The op.
    pub op_id: OpId,
    /// The space the op named (or the sender's personal one).
    pub space: SpaceId,
    /// The row the op edits.
    pub key: RowKey,
    /// What was decided.
    pub verdict: Remembered,
}

/// Why judging stopped before the end of the batch (the client sends the rest again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// At an op whose schema is newer than the server's.
    SchemaTooNew(u32),
    /// At an op whose answer would carry more than [`Limits::max_answer_row_bytes`] of rows.
    AnswerFull,
}

/// The result of judging a batch: answers, and what to persist, in this order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// One verdict per op of a prefix of the batch, in batch order. Only the
    /// last rejection of a row carries that row, as it stands after the batch.
    pub verdicts: Vec<Verdict>,
    /// Verdicts given for the first time: insert them (ON CONFLICT DO NOTHING)
    /// before writing any row.
    pub remember: Vec<Remember>,
    /// Rows to upsert, one per placed row, after `remember` went in whole,
    /// by space then seq.
    pub writes: Vec<RowWrite>,
    /// The new head of every space whose head moved, by space name.
    pub heads: Vec<(SpaceId, u64)>,
    /// Set when judging stopped before the end of the batch (or of its first 1000 ops).
    pub stopped: Option<Stop>,
    /// Every op that moved a mark, in batch order: what the app's backend
    /// hears of this push (webhooks). Empty unless [`Limits::list_changes`].
    pub changes: Vec<Change>,
}

/// An op that moved its row: the fields whose value it set (those it lost to
/// a newer mark are left out), as the newest schema spells them, and the seq
/// it took in its space.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The op.
    pub op_id: OpId,
    /// The space it wrote in (not part of the serialized change: a delivery names it once).
    #[serde(skip)]
    pub space: SpaceId,
    /// The row's table.
    pub table: String,
    /// The row's name.
    pub row_id: String,
    /// Field → the value this op set.
    pub fields: Fields,
    /// The op's `at`.
    pub at: u64,
    /// The seq the op took in its space.
    pub seq: u64,
}

impl Change {
    /// The change `op` made to `row` (the row just after it), taking `seq`.
    fn of(op: &Op, space: &SpaceId, row: &Row, seq: u64) -> Change {
        // The row's cells are sorted by name: appended in their order, the
        // fields need no sort (collecting into a map sorts).
        let mut fields = Fields::with_capacity(op.fields.len());
        for (name, cell) in row.cells.iter() {
            if cell.mark.op_id == op.op_id && name.as_str() != crate::protocol::CREATED_BY {
                crate::protocol::put(&mut fields, name.clone(), cell.value.clone());
            }
        }
        Change { op_id: op.op_id.clone(), space: space.clone(), table: op.table.clone(), row_id: op.row_id.clone(), fields, at: op.at, seq }
    }
}

/// Why a batch cannot be judged at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JudgeError {
    /// The first op's schema is newer than the server's (409 `schema_too_new`).
    #[error("op schema {op} is newer than the server's schema {server}")]
    SchemaTooNew {
        /// The op's schema version.
        op: u32,
        /// The server's schema version.
        server: u32,
    },
}

/// The rows an answer carries, counted against [`Limits::max_answer_row_bytes`].
///
/// A row is counted once however many rejections name it (only the last one
/// carries it), at its largest size during the batch. A row larger than the
/// whole budget is never carried (`row: null`).
#[derive(Default)]
struct AnswerRows {
    /// Placed row → its counted size, or `None` when it is too large to carry.
    counted: HashMap<Placed, Option<usize>>,
    bytes: usize,
}

impl AnswerRows {
    /// Counts `row` (`None` = no row yet) for a rejection of `at`; false when it does not fit.
    fn reject(&mut self, at: &Placed, row: Option<&Row>, budget: usize) -> bool {
        if self.counted.contains_key(at) {
            return true;
        }
        let size = row.map_or(0, Row::encoded_len);
        if size > budget {
            self.counted.insert(at.clone(), None);
            return true;
        }
        if self.bytes + size > budget {
            return false;
        }
        self.bytes += size;
        self.counted.insert(at.clone(), Some(size));
        true
    }

    /// Counts the growth of a carried row that an applied op changes; false when it does not fit.
    fn grow(&mut self, at: &Placed, row: &Row, budget: usize) -> bool {
        let Some(Some(counted)) = self.counted.get(at).copied() else { return true };
        let size = row.encoded_len();
        if size <= counted {
            return true;
        }
        if self.bytes + (size - counted) > budget {
            return false;
        }
        self.bytes += size - counted;
        self.counted.insert(at.clone(), Some(size));
        true
    }

    fn carries(&self, at: &Placed) -> bool {
        matches!(self.counted.get(at), Some(Some(_)))
    }
}

/// One space of a batch as the judge goes: the sender's role and the head.
struct Slot {
    name: SpaceId,
    role: Option<Role>,
    head: u64,
    moved: bool,
}

/// Judges up to [`MAX_JUDGED_PER_PUSH`] ops of `sender`'s `batch` (shapes already checked).
///
/// Stops before the first op whose schema is newer than `schema.version`
/// (if that is the first op, nothing is judged and the whole request fails),
/// and before an op whose rejection or growth would take the rows the answer
/// carries past [`Limits::max_answer_row_bytes`] (never at the first op).
/// Every op of the prefix judged gets exactly one verdict. An op answered
/// for the first time is refused unless its sender may write in its space
/// ([`space::may_write`], PROTOCOL §3c); a rejection carries its row only to
/// a sender who may read that space. Ops written under an older version and
/// rows stored under one are read as the newest version spells them
/// (PROTOCOL §3b): rows are written, and carried, that way.
pub fn judge_batch(schema: &Schema, sender: &str, batch: &[Op], known: Known, limits: &Limits) -> Result<Judgement, JudgeError> {
    judge_batch_with(schema, sender, batch, known, limits, &NoRules)
}

/// [`judge_batch`] with the app's own [`Rules`], checked for each op the
/// schema and the roles let through and that would move its row, before it
/// is applied. A refusal is remembered like any verdict.
pub fn judge_batch_with(
    schema: &Schema,
    sender: &str,
    batch: &[Op],
    known: Known,
    limits: &Limits,
    rules: &dyn Rules,
) -> Result<Judgement, JudgeError> {
    let Known { mut rows, mut verdicts, heads, roles } = known;
    // Sized once for the whole batch: every op may add a verdict and a row.
    let judged = batch.len().min(MAX_JUDGED_PER_PUSH);
    verdicts.reserve(judged);
    for ((_, key), row) in rows.iter_mut() {
        if let std::borrow::Cow::Owned(upgraded) = schema.upgrade_row(&key.table, row) {
            *row = upgraded;
        }
    }
    let personal: SpaceId = space::personal(sender).into();
    // The sender as noted on the cells of shared spaces: one copy, shared.
    let noted_by: std::sync::Arc<str> = sender.into();
    // The batch's spaces, each looked up once (a batch names few, many
    // times: the last one used is tried first).
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot_of: HashMap<&str, usize> = HashMap::new();
    let mut last = usize::MAX;
    let mut out = Judgement { verdicts: Vec::with_capacity(judged), remember: Vec::with_capacity(judged), ..Judgement::default() };
    // The rows the batch writes, in the order of their first write, and
    // where each is in that list: a row written once is read from there
    // (one lookup, and no pass at the end to collect them).
    let mut writes: Vec<RowWrite> = Vec::with_capacity(judged);
    let mut written: HashMap<Placed, usize> = HashMap::with_capacity(judged);
    let mut answer = AnswerRows::default();
    // (verdict index, placed row) of every rejection whose sender may read
    // the row's space: the rows are filled in at the end.
    let mut rejections: Vec<(usize, Placed)> = Vec::new();
    let budget = limits.max_answer_row_bytes;
    for (i, op) in batch.iter().take(MAX_JUDGED_PER_PUSH).enumerate() {
        if op.schema > schema.version {
            if i == 0 {
                return Err(JudgeError::SchemaTooNew { op: op.schema, server: schema.version });
            }
            out.stopped = Some(Stop::SchemaTooNew(op.schema));
            break;
        }
        let name = op.space_or(&personal);
        if slots.get(last).is_none_or(|s| *s.name != *name) {
            last = *slot_of.entry(name).or_insert_with(|| {
                let id: SpaceId = if name == &*personal { personal.clone() } else { name.into() };
                let role = space::role_of(sender, &id, roles.get(&id).copied());
                let head = heads.get(&id).copied().unwrap_or(0);
                slots.push(Slot { name: id, role, head, moved: false });
                slots.len() - 1
            });
        }
        let slot = &mut slots[last];
        let role = slot.role;
        let at: Placed = (slot.name.clone(), op.row_key());
        let was_written = written.get(&at).copied();
        let current = match was_written {
            Some(w) => Some(&writes[w].row),
            None => rows.get(&at),
        };
        if let Some(saved) = verdicts.get(&op.op_id) {
            if let (Remembered::Rejected { .. }, Some(_)) = (saved, role) {
                if !answer.reject(&at, current, budget) {
                    out.stopped = Some(Stop::AnswerFull);
                    break;
                }
                rejections.push((i, at.clone()));
            }
            out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome: saved.replay(None) });
            continue;
        }
        let decision = match space::may_write(&at.0, role) {
            Err(denied) => Decision::Reject { code: denied.code.to_owned(), reason: denied.reason },
            Ok(()) => {
                // An op that moves no mark is applied without a check (§3 step 1):
                // the sender's rules (`ownersOnly`, `ownRows`) included.
                let decided = decide(schema, op, current, limits);
                let checked = match decided {
                    d @ Decision::Apply { moved: false, .. } => Ok(d),
                    d => schema.check_sender(&Edit::of(op), &at.0, role, sender, current).map(|()| d),
                };
                match checked {
                    Err(refusal) => Decision::Reject { code: refusal.code.as_str().to_owned(), reason: refusal.reason },
                    Ok(decision) => match decision {
                        Decision::Apply { mut row, moved: true } => {
                            if current.is_none() {
                                schema.mark_creator(&op.table, &at.0, sender, &op.mark(), &mut row);
                            }
                            let input = RuleInput {
                                user: sender,
                                role: role.unwrap_or(Role::Viewer),
                                space: &at.0,
                                op,
                                before: current,
                                after: &row,
                            };
                            match rules.check(&input) {
                                Ok(()) => Decision::Apply { row, moved: true },
                                Err(r) => Decision::Reject { code: r.code, reason: r.reason },
                            }
                        }
                        other => other,
                    },
                }
            }
        };
        let (outcome, remembered) = match decision {
            Decision::Apply { mut row, moved } => {
                // The sender is noted on the cells it sets unless the space
                // is its own personal one (whose owner the name says).
                let by = (at.0 != personal).then_some(&noted_by);
                let noted = conflict::note(op, by, current, &mut row, slots[last].head + 1);
                if moved || noted {
                    if !answer.grow(&at, &row, budget) {
                        out.stopped = Some(Stop::AnswerFull);
                        break;
                    }
                    let slot = &mut slots[last];
                    slot.head += 1;
                    slot.moved = true;
                    if moved && limits.list_changes {
                        out.changes.push(Change::of(op, &slot.name, &row, slot.head));
                    }
                    let seq = slot.head;
                    match was_written {
                        Some(w) => {
                            writes[w].row = row;
                            writes[w].seq = seq;
                        }
                        None => {
                            // New: no row was stored (known at its first
                            // write, before the batch has changed it).
                            let new = current.is_none();
                            written.insert(at.clone(), writes.len());
                            writes.push(RowWrite { space: at.0.clone(), key: at.1.clone(), row, seq, new });
                        }
                    }
                }
                (Outcome::Applied, Remembered::Applied)
            }
            Decision::Reject { code, reason } => {
                if role.is_some() {
                    if !answer.reject(&at, current, budget) {
                        out.stopped = Some(Stop::AnswerFull);
                        break;
                    }
                    rejections.push((i, at.clone()));
                }
                (Outcome::Rejected { reason: reason.clone(), code: code.clone(), row: None }, Remembered::Rejected { reason, code })
            }
        };
        verdicts.insert(op.op_id.clone(), remembered.clone());
        let (space, key) = at;
        out.remember.push(Remember { op_id: op.op_id.clone(), space, key, verdict: remembered });
        out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome });
    }
    // Only the last rejection of a row carries it, as it stands after the
    // batch: an answer never holds one row twice (clients merge rows by
    // marks, so the newest state once is all they need).
    let mut filled: HashSet<&Placed> = HashSet::new();
    for (i, at) in rejections.iter().rev() {
        if filled.insert(at) && answer.carries(at) {
            if let Outcome::Rejected { row, .. } = &mut out.verdicts[*i].outcome {
                *row = written.get(at).map(|&w| &writes[w].row).or_else(|| rows.get(at)).cloned();
            }
        }
    }
    writes.sort_unstable_by(|a, b| (&a.space, a.seq).cmp(&(&b.space, b.seq)));
    out.writes = writes;
    let mut moved: Vec<(SpaceId, u64)> = slots.into_iter().filter(|s| s.moved).map(|s| (s.name, s.head)).collect();
    moved.sort_unstable();
    out.heads = moved;
    Ok(out)
}

/// `POST /v1/verdicts`, pure: what is remembered of each of `op_ids`, in the
/// order asked. `saved` holds the remembered verdicts (with the row a
/// rejected op edits, when known) and `rows` the current rows of those
/// keys that the asker may read now (the store leaves out rows of spaces the
/// asker is no longer a member of: PROTOCOL §3c). Like a push answer, only the last rejection of a row carries it, as the
/// newest version of `schema` spells it, and the rows carried stay within
/// [`Limits::max_answer_row_bytes`] (past it: `row: null`).
pub fn recall(
    schema: &Schema,
    op_ids: &[OpId],
    saved: &HashMap<OpId, (Remembered, Option<Placed>)>,
    rows: &HashMap<Placed, Row>,
    limits: &Limits,
) -> Vec<RememberedVerdict> {
    let mut last: HashMap<&Placed, usize> = HashMap::new();
    for (i, id) in op_ids.iter().enumerate() {
        if let Some((Remembered::Rejected { .. }, Some(key))) = saved.get(id) {
            last.insert(key, i);
        }
    }
    let mut bytes = 0usize;
    op_ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let recalled = match saved.get(id) {
                None => Recalled::Unknown,
                Some((Remembered::Applied, _)) => Recalled::Applied,
                Some((Remembered::Rejected { reason, code }, key)) => {
                    let row = key
                        .as_ref()
                        .filter(|k| last.get(k) == Some(&i))
                        .and_then(|k| rows.get(k).map(|row| schema.upgrade_row(&k.1.table, row)))
                        .filter(|row| {
                            let size = row.encoded_len();
                            let fits = bytes + size <= limits.max_answer_row_bytes;
                            if fits {
                                bytes += size;
                            }
                            fits
                        });
                    Recalled::Rejected { reason: reason.clone(), code: code.clone(), row: row.map(|r| r.into_owned()) }
                }
            };
            RememberedVerdict { op_id: id.clone(), recalled }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Value;

    fn op(id: &str, row: &str, at: u64, fields: &[(&str, Value)]) -> Op {
        Op {
            op_id: OpId::new(id),
            table: "sets".into(),
            row_id: row.into(),
            fields: fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<Fields>(),
            at,
            schema: 1,
            space: None,
            seen: None,
        }
    }

    fn full(id: &str, row: &str, at: u64, reps: i64) -> Op {
        op(id, row, at, &[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", reps.into())])
    }

    /// The new head of u's personal space, if the batch moved it.
    fn moved(j: &Judgement) -> Option<u64> {
        j.heads.iter().find(|(s, _)| &**s == "~u").map(|(_, h)| *h)
    }

    fn apply(known: &mut Known, j: &Judgement) {
        for r in &j.remember {
            known.verdicts.insert(r.op_id.clone(), r.verdict.clone());
        }
        for w in &j.writes {
            known.rows.insert((w.space.clone(), w.key.clone()), w.row.clone());
        }
        known.heads.extend(j.heads.iter().cloned());
    }

    #[test]
    fn applied_then_duplicate_and_no_new_seq() {
        let s = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 5)];
        let j = judge_batch(&s, "u", &b, k.clone(), &Limits::default()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
        assert_eq!((moved(&j), j.writes.len(), j.remember.len()), (Some(1), 1, 1));
        apply(&mut k, &j);
        let j2 = judge_batch(&s, "u", &b, k.clone(), &Limits::default()).unwrap();
        assert_eq!(j2.verdicts[0].outcome, Outcome::Duplicate);
        assert_eq!((moved(&j2), j2.writes.len(), j2.remember.len()), (None, 0, 0));
    }

    #[test]
    fn a_change_holds_the_fields_its_op_set_and_only_moved_ops_are_changes() {
        let s = Schema::workout();
        let mut k = Known::default();
        let first = vec![full("d:1", "d-1", 10, 5), op("d:0", "d-1", 20, &[("reps", 8.into())])];
        let j = judge_batch(&s, "u", &first, k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        // d:2 is older than d:0 on reps (loses it) but newer than d:1 on the
        // weight; d:3 is refused; d:1 again is a duplicate; d:4 loses every field.
        let b = vec![
            op("d:2", "d-1", 15, &[("reps", 6.into()), ("weightKg", 90.0.into())]),
            full("d:3", "d-1", 30, 500),
            full("d:1", "d-1", 10, 5),
            op("d:4", "d-1", 1, &[("reps", 7.into())]),
        ];
        let j = judge_batch(&s, "u", &b, k, &Limits::default()).unwrap();
        let changes: Vec<(&str, Vec<&str>, u64)> =
            j.changes.iter().map(|c| (c.op_id.as_str(), c.fields.keys().map(String::as_str).collect(), c.seq)).collect();
        assert_eq!(changes, vec![("d:2", vec!["weightKg"], 3)]);
        let json = serde_json::to_value(&j.changes[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"opId": "d:2", "table": "sets", "rowId": "d-1", "fields": {"weightKg": 90}, "at": 15, "seq": 3})
        );
    }

    /// No webhook, no changes: and nothing else of the judgement differs.
    #[test]
    fn changes_unlisted_leave_the_rest_of_the_judgement_as_it_was() {
        let s = Schema::workout();
        let mut k = Known::default();
        let first: Vec<Op> = (0..4).map(|i| full(&format!("d:{i}"), &format!("d-{}", i % 2), 10 + i as u64, 5)).collect();
        let j = judge_batch(&s, "u", &first, k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        let b = vec![
            op("e:1", "d-0", 30, &[("reps", 7.into())]),
            full("e:2", "d-1", 5, 500),
            full("d:1", "d-1", 11, 5),
            full("e:3", "d-2", 1, 1),
        ];
        let listed = judge_batch(&s, "u", &b, k.clone(), &Limits::default()).unwrap();
        let unheard = judge_batch(&s, "u", &b, k, &Limits { list_changes: false, ..Limits::default() }).unwrap();
        assert_eq!(listed.changes.len(), 2, "e:1 and e:3 moved a mark");
        assert!(unheard.changes.is_empty());
        assert_eq!(Judgement { changes: Vec::new(), ..listed }, unheard);
    }

    #[test]
    fn an_app_rule_refuses_in_its_own_words_and_the_refusal_outlives_the_rule() {
        use crate::rules::RuleRefusal;
        let s = Schema::workout();
        let mut k = Known::default();
        let heavy = |i: &RuleInput<'_>| match i.after.get("weightKg") {
            Some(Value::Number(w)) if *w > 200.0 && i.before.is_none() => {
                Err(RuleRefusal::new("too_heavy_for_a_first_set", format!("{} cannot start at {w} kg", i.user)))
            }
            _ => Ok(()),
        };
        let b = vec![
            op("d:1", "d-1", 10, &[("exercise", "squat".into()), ("weightKg", 250.0.into()), ("reps", 5.into())]),
            full("d:2", "d-2", 11, 5),
        ];
        let j = judge_batch_with(&s, "u", &b, k.clone(), &Limits::default(), &heavy).unwrap();
        let Outcome::Rejected { reason, code, .. } = &j.verdicts[0].outcome else { panic!("{j:?}") };
        assert_eq!((code.as_str(), reason.as_str()), ("too_heavy_for_a_first_set", "u cannot start at 250 kg"));
        assert_eq!(j.verdicts[1].outcome, Outcome::Applied);
        assert_eq!(j.writes.len(), 1, "the refused op writes nothing");
        apply(&mut k, &j);
        // The rule is gone: the refusal is replayed word for word, never judged again.
        let j2 = judge_batch(&s, "u", &b, k, &Limits::default()).unwrap();
        assert_eq!(j2.verdicts[0].outcome, j.verdicts[0].outcome);
        assert_eq!(j2.verdicts[1].outcome, Outcome::Duplicate);
        assert!(j2.writes.is_empty());
    }

    #[test]
    fn a_replayed_rejection_is_the_same_word_for_word_never_duplicate() {
        let s = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 500)];
        let j = judge_batch(&s, "u", &b, k.clone(), &Limits::default()).unwrap();
        let Outcome::Rejected { reason, code, row } = &j.verdicts[0].outcome else { panic!("{j:?}") };
        assert_eq!((reason.as_str(), code.as_str(), row), ("reps must be at most 100", "out_of_range", &None));
        assert!(j.writes.is_empty());
        apply(&mut k, &j);
        let j2 = judge_batch(&s, "u", &b, k, &Limits::default()).unwrap();
        assert_eq!(j2.verdicts, j.verdicts);
        assert!(j2.remember.is_empty() && j2.writes.is_empty());
    }

    #[test]
    fn remember_before_write_a_relaxed_rule_does_not_write_a_rejected_replay() {
        let strict = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 150)];
        let j = judge_batch(&strict, "u", &b, k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        let mut relaxed = Schema::workout();
        if let Some(r) = relaxed.tables.get_mut("sets").and_then(|t| t.fields.get_mut("reps")) {
            r.max = Some(1000.0);
        }
        let j2 = judge_batch(&relaxed, "u", &b, k, &Limits::default()).unwrap();
        assert!(matches!(j2.verdicts[0].outcome, Outcome::Rejected { .. }));
        assert!(j2.writes.is_empty(), "a replay writes nothing");
        assert_eq!(moved(&j2), None);
    }

    #[test]
    fn an_op_whose_every_field_loses_is_applied_with_no_seq() {
        let s = Schema::workout();
        let mut k = Known::default();
        let j = judge_batch(&s, "u", &[full("d:2", "d-1", 20, 5)], k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        let j2 = judge_batch(&s, "u", &[op("e:1", "d-1", 10, &[("reps", 500i64.into())])], k, &Limits::default()).unwrap();
        assert_eq!(j2.verdicts[0].outcome, Outcome::Applied, "no validation when nothing moved");
        assert_eq!((moved(&j2), j2.writes.len(), j2.remember.len()), (None, 0, 1));
    }

    #[test]
    fn the_row_after_the_op_is_validated_not_the_op() {
        let s = Schema::workout();
        let mut k = Known::default();
        let j = judge_batch(&s, "u", &[full("d:1", "d-1", 10, 5)], k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        let j = judge_batch(&s, "u", &[op("d:2", "d-1", 11, &[("reps", 6i64.into())])], k.clone(), &Limits::default()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
        let j = judge_batch(&s, "u", &[op("d:3", "d-2", 11, &[("reps", 6i64.into())])], k, &Limits::default()).unwrap();
        assert!(matches!(&j.verdicts[0].outcome, Outcome::Rejected { code, .. } if code == "missing_fields"));
    }

    #[test]
    fn ops_on_one_row_in_one_batch_see_each_other_and_the_row_gets_the_last_seq() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), op("d:2", "d-1", 11, &[("reps", 7i64.into())]), full("d:3", "d-2", 12, 1)];
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        assert!(j.verdicts.iter().all(|v| v.outcome == Outcome::Applied));
        assert_eq!(moved(&j), Some(3));
        assert_eq!(j.writes.len(), 2);
        assert_eq!(j.writes[0].seq, 2);
        assert_eq!(j.writes[0].row.get("reps"), Some(&Value::Number(7.0)));
    }

    #[test]
    fn a_write_says_whether_its_row_was_stored_before_the_batch() {
        let s = Schema::workout();
        let mut k = Known::default();
        let j = judge_batch(&s, "u", &[full("d:1", "d-1", 10, 5)], k.clone(), &Limits::default()).unwrap();
        assert!(j.writes[0].new, "no row was stored");
        apply(&mut k, &j);
        // d-1 is stored, edited twice; d-2 is made, then edited, in one batch.
        let b = vec![
            op("d:2", "d-1", 11, &[("reps", 6i64.into())]),
            full("d:3", "d-2", 11, 1),
            op("d:4", "d-2", 12, &[("reps", 2i64.into())]),
            op("d:5", "d-1", 12, &[("reps", 7i64.into())]),
        ];
        let j = judge_batch(&s, "u", &b, k, &Limits::default()).unwrap();
        let new: Vec<(&str, bool)> = j.writes.iter().map(|w| (w.key.row_id.as_str(), w.new)).collect();
        assert_eq!(new, [("d-2", true), ("d-1", false)], "the store inserts new rows and rewrites stored ones");
    }

    #[test]
    fn an_op_id_repeated_in_one_batch_is_a_replay_of_its_first() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 0), full("d:2", "d-2", 10, 0)];
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        assert_eq!(j.verdicts[1].outcome, Outcome::Duplicate);
        assert_eq!(j.verdicts[3].outcome, j.verdicts[2].outcome);
        assert_eq!(j.remember.len(), 2);
    }

    #[test]
    fn a_rejected_op_carries_the_current_row() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), op("d:2", "d-1", 11, &[("reps", 0i64.into())])];
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        let Outcome::Rejected { row: Some(row), .. } = &j.verdicts[1].outcome else { panic!() };
        assert_eq!(row.get("reps"), Some(&Value::Number(5.0)));
    }

    #[test]
    fn schema_too_new_first_fails_later_stops() {
        let s = Schema::workout();
        let mut newer = full("d:2", "d-2", 10, 5);
        newer.schema = 2;
        assert_eq!(
            judge_batch(&s, "u", std::slice::from_ref(&newer), Known::default(), &Limits::default()),
            Err(JudgeError::SchemaTooNew { op: 2, server: 1 })
        );
        let j = judge_batch(&s, "u", &[full("d:1", "d-1", 10, 5), newer, full("d:3", "d-3", 10, 5)], Known::default(), &Limits::default())
            .unwrap();
        assert_eq!(j.verdicts.len(), 1);
        assert_eq!(j.stopped, Some(Stop::SchemaTooNew(2)));
    }

    #[test]
    fn at_most_1000_ops_are_judged() {
        let s = Schema::workout();
        let b: Vec<Op> = (0..1200).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        assert_eq!(j.verdicts.len(), 1000);
        assert_eq!(moved(&j), Some(1000));
    }

    #[test]
    fn tombstones_pass_without_the_required_fields() {
        let s = Schema::workout();
        let j = judge_batch(&s, "u", &[op("d:1", "d-9", 10, &[("_deleted", true.into())])], Known::default(), &Limits::default()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
    }

    #[test]
    fn an_op_stamped_too_far_ahead_is_rejected_with_the_bound_named() {
        let s = Schema::workout();
        let limits = Limits::at(1_700_000_000_000, Some(86_400_000));
        let b = vec![full("d:1", "d-1", (1 << 53) - 1, 5), full("d:2", "d-2", 1_700_000_000_000 + 86_400_000, 5)];
        let j = judge_batch(&s, "u", &b, Known::default(), &limits).unwrap();
        let Outcome::Rejected { reason, code, row: None } = &j.verdicts[0].outcome else { panic!("{j:?}") };
        assert_eq!(code, CLOCK_AHEAD);
        assert_eq!(
            reason,
            "at 9007199254740991 is more than 86400000 ms ahead of the server's clock (1700000000000); the device's clock is wrong"
        );
        assert_eq!(j.verdicts[1].outcome, Outcome::Applied, "exactly at the bound is fine");
        assert_eq!(j.writes.len(), 1);
        let mut k = Known::default();
        apply(&mut k, &j);
        let later = Limits::at(9_000_000_000_000_000, Some(86_400_000));
        assert_eq!(judge_batch(&s, "u", &b[..1], k, &later).unwrap().verdicts, j.verdicts[..1], "a replay is remembered, not judged again");
        let off = judge_batch(&s, "u", &b[..1], Known::default(), &Limits::default()).unwrap();
        assert_eq!(off.verdicts[0].outcome, Outcome::Applied, "no bound, no clock check");
    }

    #[test]
    fn recall_answers_applied_rejected_with_the_row_and_unknown() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), op("d:2", "d-1", 11, &[("reps", 0i64.into())]), full("d:3", "d-3", 10, 0)];
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        let saved: HashMap<OpId, (Remembered, Option<Placed>)> =
            j.remember.iter().map(|r| (r.op_id.clone(), (r.verdict.clone(), Some((r.space.clone(), r.key.clone()))))).collect();
        let rows: HashMap<Placed, Row> = j.writes.iter().map(|w| ((w.space.clone(), w.key.clone()), w.row.clone())).collect();
        let ids: Vec<OpId> = ["d:1", "d:2", "d:3", "d:9"].into_iter().map(OpId::new).collect();
        let got = recall(&s, &ids, &saved, &rows, &Limits::default());
        assert_eq!(got[0].recalled, Recalled::Applied);
        let Recalled::Rejected { reason, code, row: Some(row) } = &got[1].recalled else { panic!("{got:?}") };
        assert_eq!((reason.as_str(), code.as_str()), ("reps must be at least 1", "out_of_range"));
        assert_eq!(row.get("reps"), Some(&Value::Number(5.0)));
        assert!(matches!(&got[2].recalled, Recalled::Rejected { row: None, .. }), "no row stored for d-3");
        assert_eq!(got[3].recalled, Recalled::Unknown);
    }

    #[test]
    fn only_the_last_rejection_of_a_row_carries_it_as_it_stands_after_the_batch() {
        let s = Schema::workout();
        let b = vec![
            full("d:1", "d-1", 10, 5),
            op("d:2", "d-1", 11, &[("reps", 0i64.into())]),
            op("d:3", "d-1", 12, &[("reps", 7i64.into())]),
            op("d:4", "d-1", 13, &[("reps", 0i64.into())]),
            op("d:5", "d-1", 14, &[("reps", 8i64.into())]),
        ];
        let j = judge_batch(&s, "u", &b, Known::default(), &Limits::default()).unwrap();
        let rows: Vec<Option<&Row>> = j
            .verdicts
            .iter()
            .filter_map(|v| match &v.outcome {
                Outcome::Rejected { row, .. } => Some(row.as_ref()),
                _ => None,
            })
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0], None, "an earlier rejection of the row carries null");
        assert_eq!(rows[1].and_then(|r| r.get("reps")), Some(&Value::Number(8.0)), "the row after the batch");
    }

    #[test]
    fn judging_stops_before_an_answer_would_carry_too_many_row_bytes() {
        let s = Schema::workout();
        let mut k = Known::default();
        let rows: Vec<Op> = (0..5).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
        let j = judge_batch(&s, "u", &rows, k.clone(), &Limits::default()).unwrap();
        apply(&mut k, &j);
        let one = k.rows[&(SpaceId::from("~u"), RowKey::new("sets", "d-0"))].encoded_len();
        let limits = Limits { max_answer_row_bytes: one * 2, ..Limits::default() };
        let bad: Vec<Op> = (0..5).map(|i| op(&format!("e:{i}"), &format!("d-{i}"), 11, &[("reps", 0i64.into())])).collect();
        let j = judge_batch(&s, "u", &bad, k.clone(), &limits).unwrap();
        assert_eq!(j.verdicts.len(), 2, "two rows fit, the third op waits for the next push");
        assert_eq!(j.stopped, Some(Stop::AnswerFull));
        let tiny = Limits { max_answer_row_bytes: 1, ..Limits::default() };
        let j = judge_batch(&s, "u", &bad, k, &tiny).unwrap();
        assert_eq!(j.verdicts.len(), 5, "a row larger than the whole budget is never carried, never blocks");
        assert!(j.verdicts.iter().all(|v| matches!(v.outcome, Outcome::Rejected { row: None, .. })));
    }

    #[test]
    fn an_op_that_would_grow_a_row_past_the_bound_is_rejected() {
        let s = Schema::workout();
        let limits = Limits { max_row_bytes: 100, ..Limits::default() };
        let j = judge_batch(&s, "u", &[full("d:1", "d-1", 10, 5)], Known::default(), &limits).unwrap();
        let Outcome::Rejected { code, reason, .. } = &j.verdicts[0].outcome else { panic!("{j:?}") };
        assert_eq!(code, ROW_TOO_LARGE);
        assert!(reason.ends_with("bytes, more than the limit of 100 bytes"), "{reason}");
        assert!(j.writes.is_empty());
    }

    fn in_space(space: &str, mut o: Op) -> Op {
        o.space = Some(space.into());
        o
    }

    fn roles(pairs: &[(&str, Role)]) -> Known {
        Known { roles: pairs.iter().map(|(s, r)| (SpaceId::from(*s), *r)).collect(), ..Known::default() }
    }

    #[test]
    fn a_batch_spanning_spaces_moves_each_spaces_head_and_keeps_same_named_rows_apart() {
        let s = Schema::workout();
        let k = roles(&[("team", Role::Editor)]);
        let b = vec![
            full("d:1", "r-1", 10, 5),
            in_space("team", full("d:2", "r-1", 10, 6)),
            in_space("team", full("d:3", "r-2", 10, 7)),
            in_space("~u", op("d:4", "r-1", 11, &[("reps", 8i64.into())])),
        ];
        let j = judge_batch(&s, "u", &b, k, &Limits::default()).unwrap();
        assert!(j.verdicts.iter().all(|v| v.outcome == Outcome::Applied), "{j:?}");
        assert_eq!(j.heads, vec![(SpaceId::from("team"), 2), (SpaceId::from("~u"), 2)]);
        let placed: Vec<(&str, &str, u64)> = j.writes.iter().map(|w| (&*w.space, w.key.row_id.as_str(), w.seq)).collect();
        assert_eq!(placed, vec![("team", "r-1", 1), ("team", "r-2", 2), ("~u", "r-1", 2)]);
        let mine = j.writes.iter().find(|w| &*w.space == "~u").unwrap();
        assert_eq!(mine.row.get("reps"), Some(&Value::from(8i64)), "naming ~u is the same space as naming none");
        let theirs = j.writes.iter().find(|w| &*w.space == "team" && w.key.row_id == "r-1").unwrap();
        assert_eq!(theirs.row.get("reps"), Some(&Value::from(6i64)));
    }

    #[test]
    fn viewers_are_read_only_non_members_forbidden_and_only_readers_see_the_row() {
        let s = Schema::workout();
        let mut k = roles(&[("seen", Role::Viewer)]);
        for space in ["seen", "hidden", "~alice"] {
            k.rows.insert((SpaceId::from(space), RowKey::new("sets", "r-1")), {
                let j = judge_batch(
                    &s,
                    "x",
                    &[in_space(&crate::space::personal("x"), full("x:1", "r-1", 1, 5))],
                    Known::default(),
                    &Limits::default(),
                )
                .unwrap();
                j.writes[0].row.clone()
            });
        }
        let b = vec![
            in_space("seen", op("d:1", "r-1", 10, &[("reps", 9i64.into())])),
            in_space("hidden", op("d:2", "r-1", 10, &[("reps", 9i64.into())])),
            in_space("~alice", op("d:3", "r-1", 10, &[("reps", 9i64.into())])),
        ];
        let j = judge_batch(&s, "u", &b, k.clone(), &Limits::default()).unwrap();
        let got: Vec<(&str, &str, bool)> = j
            .verdicts
            .iter()
            .map(|v| match &v.outcome {
                Outcome::Rejected { code, reason, row } => (code.as_str(), reason.as_str(), row.is_some()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("read_only", "you are a viewer of space seen: viewers cannot edit its rows", true),
                ("forbidden", "you are not a member of space hidden", false),
                ("forbidden", "you are not a member of space ~alice", false),
            ]
        );
        assert!(j.writes.is_empty() && j.heads.is_empty());
        assert_eq!(j.remember.len(), 3, "a refusal for permission is remembered like any verdict");

        // Granted later: the refused ops stay refused, word for word; a new op goes in.
        let mut later = k;
        apply(&mut later, &j);
        later.roles.insert("hidden".into(), Role::Editor);
        later.roles.insert("seen".into(), Role::Editor);
        let again = judge_batch(&s, "u", &b, later.clone(), &Limits::default()).unwrap();
        assert_eq!(
            again
                .verdicts
                .iter()
                .map(|v| v.outcome.clone())
                .map(|o| match o {
                    Outcome::Rejected { code, .. } => code,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            vec!["read_only", "forbidden", "forbidden"]
        );
        assert!(again.writes.is_empty());
        let fresh =
            judge_batch(&s, "u", &[in_space("hidden", op("d:9", "r-1", 10, &[("reps", 9i64.into())]))], later, &Limits::default()).unwrap();
        assert_eq!(fresh.verdicts[0].outcome, Outcome::Applied);
        assert_eq!(fresh.heads, vec![(SpaceId::from("hidden"), 1)]);
    }
}
