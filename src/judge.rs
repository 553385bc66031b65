//! The server's judge (PROTOCOL §3): decide → remember → write, as pure code.
//!
//! A store (SQL, or [`crate::memory_server::MemoryServer`]) works in three moves
//! around this module, inside one transaction under the user's lock:
//!
//! 1. **load** what the batch touches into [`Known`]: the stored rows of its
//!    row keys, the saved verdicts of its opIds, the user's head;
//! 2. call [`judge_batch`], which decides every op in memory, in batch order
//!    (ops on the same row see each other's effect; an opId repeated inside
//!    the batch is a replay of its first occurrence);
//! 3. **persist** the [`Judgement`]: first insert [`Judgement::remember`] with
//!    `ON CONFLICT DO NOTHING` (if fewer rows come back than were sent, another
//!    writer got there first: roll back and judge again), then upsert
//!    [`Judgement::writes`] and the new head.
//!
//! A verdict is remembered for every op it answers for the first time, and a
//! row is written only for ops that were remembered now and moved a mark. So a
//! replay writes nothing, and a replay of a rejected op after a rule change
//! is still rejected, word for word, with no row written.

use std::collections::HashMap;

use crate::order::merge;
use crate::protocol::{Op, OpId, Outcome, Row, RowKey, Verdict, MAX_JUDGED_PER_PUSH};
use crate::schema::Schema;

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

/// Decides one op against the stored row (PROTOCOL §3 step 1): copy the
/// marks, merge, and validate the row after the op unless the row exists
/// and nothing moved.
pub fn decide(schema: &Schema, op: &Op, current: Option<&Row>) -> Decision {
    let mut row = current.cloned().unwrap_or_default();
    let moved = merge(&mut row, op);
    if current.is_some() && !moved {
        return Decision::Apply { row, moved };
    }
    match schema.check_row(&op.table, &row) {
        Ok(()) => Decision::Apply { row, moved },
        Err(refusal) => Decision::Reject { code: refusal.code.as_str().to_owned(), reason: refusal.reason },
    }
}

/// What the store knows that the batch touches, loaded under the user's lock.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// The stored rows of the batch's row keys (absent = no row).
    pub rows: HashMap<RowKey, Row>,
    /// The saved verdicts of the batch's opIds (absent = never answered).
    pub verdicts: HashMap<OpId, Remembered>,
    /// The user's head seq.
    pub head: u64,
}

/// One row to upsert: its state after the batch and the seq of its last change.
#[derive(Debug, Clone, PartialEq)]
pub struct RowWrite {
    /// Where.
    pub key: RowKey,
    /// The row after the batch.
    pub row: Row,
    /// The seq of the last op that moved it.
    pub seq: u64,
}

/// The result of judging a batch: answers, and what to persist, in this order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// One verdict per op of a prefix of the batch, in batch order.
    pub verdicts: Vec<Verdict>,
    /// Verdicts given for the first time: insert them (ON CONFLICT DO NOTHING)
    /// before writing any row.
    pub remember: Vec<(OpId, Remembered)>,
    /// Rows to upsert, one per row key, after `remember` went in whole.
    pub writes: Vec<RowWrite>,
    /// The user's new head.
    pub head: u64,
    /// Set when judging stopped early at an op whose schema is too new.
    pub stopped_at_schema: Option<u32>,
    /// Which op took which seq (ops that moved a mark), in order.
    pub seqs: Vec<(OpId, u64)>,
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

/// Judges up to [`MAX_JUDGED_PER_PUSH`] ops of `batch` (shapes already checked).
///
/// Stops before the first op whose schema is newer than `schema.version`;
/// if that is the first op, nothing is judged and the whole request fails.
pub fn judge_batch(schema: &Schema, batch: &[Op], known: Known) -> Result<Judgement, JudgeError> {
    let Known { mut rows, mut verdicts, mut head } = known;
    let mut out = Judgement::default();
    let mut written: HashMap<RowKey, u64> = HashMap::new();
    for (i, op) in batch.iter().take(MAX_JUDGED_PER_PUSH).enumerate() {
        if op.schema > schema.version {
            if i == 0 {
                return Err(JudgeError::SchemaTooNew { op: op.schema, server: schema.version });
            }
            out.stopped_at_schema = Some(op.schema);
            break;
        }
        let key = op.row_key();
        let current = rows.get(&key);
        if let Some(saved) = verdicts.get(&op.op_id) {
            out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome: saved.replay(current) });
            continue;
        }
        let (outcome, remembered) = match decide(schema, op, current) {
            Decision::Apply { row, moved } => {
                if moved {
                    head += 1;
                    out.seqs.push((op.op_id.clone(), head));
                    written.insert(key.clone(), head);
                    rows.insert(key, row);
                }
                (Outcome::Applied, Remembered::Applied)
            }
            Decision::Reject { code, reason } => {
                let outcome = Outcome::Rejected { reason: reason.clone(), code: code.clone(), row: current.cloned() };
                (outcome, Remembered::Rejected { reason, code })
            }
        };
        verdicts.insert(op.op_id.clone(), remembered.clone());
        out.remember.push((op.op_id.clone(), remembered));
        out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome });
    }
    let mut writes: Vec<RowWrite> =
        written.into_iter().filter_map(|(key, seq)| rows.remove(&key).map(|row| RowWrite { key, row, seq })).collect();
    writes.sort_by_key(|w| w.seq);
    out.writes = writes;
    out.head = head;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Fields, Value};

    fn op(id: &str, row: &str, at: u64, fields: &[(&str, Value)]) -> Op {
        Op {
            op_id: OpId::new(id),
            table: "sets".into(),
            row_id: row.into(),
            fields: fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<Fields>(),
            at,
            schema: 1,
        }
    }

    fn full(id: &str, row: &str, at: u64, reps: i64) -> Op {
        op(id, row, at, &[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", reps.into())])
    }

    fn apply(known: &mut Known, j: &Judgement) {
        for (id, r) in &j.remember {
            known.verdicts.insert(id.clone(), r.clone());
        }
        for w in &j.writes {
            known.rows.insert(w.key.clone(), w.row.clone());
        }
        known.head = j.head;
    }

    #[test]
    fn applied_then_duplicate_and_no_new_seq() {
        let s = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 5)];
        let j = judge_batch(&s, &b, k.clone()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
        assert_eq!((j.head, j.writes.len(), j.remember.len()), (1, 1, 1));
        apply(&mut k, &j);
        let j2 = judge_batch(&s, &b, k.clone()).unwrap();
        assert_eq!(j2.verdicts[0].outcome, Outcome::Duplicate);
        assert_eq!((j2.head, j2.writes.len(), j2.remember.len()), (1, 0, 0));
    }

    #[test]
    fn a_replayed_rejection_is_the_same_word_for_word_never_duplicate() {
        let s = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 500)];
        let j = judge_batch(&s, &b, k.clone()).unwrap();
        let Outcome::Rejected { reason, code, row } = &j.verdicts[0].outcome else { panic!("{j:?}") };
        assert_eq!((reason.as_str(), code.as_str(), row), ("reps must be at most 100", "out_of_range", &None));
        assert!(j.writes.is_empty());
        apply(&mut k, &j);
        let j2 = judge_batch(&s, &b, k).unwrap();
        assert_eq!(j2.verdicts, j.verdicts);
        assert!(j2.remember.is_empty() && j2.writes.is_empty());
    }

    #[test]
    fn remember_before_write_a_relaxed_rule_does_not_write_a_rejected_replay() {
        let strict = Schema::workout();
        let mut k = Known::default();
        let b = vec![full("d:1", "d-1", 10, 150)];
        let j = judge_batch(&strict, &b, k.clone()).unwrap();
        apply(&mut k, &j);
        let mut relaxed = Schema::workout();
        if let Some(r) = relaxed.tables.get_mut("sets").and_then(|t| t.fields.get_mut("reps")) {
            r.max = Some(1000.0);
        }
        let j2 = judge_batch(&relaxed, &b, k).unwrap();
        assert!(matches!(j2.verdicts[0].outcome, Outcome::Rejected { .. }));
        assert!(j2.writes.is_empty(), "a replay writes nothing");
        assert_eq!(j2.head, 0);
    }

    #[test]
    fn an_op_whose_every_field_loses_is_applied_with_no_seq() {
        let s = Schema::workout();
        let mut k = Known::default();
        let j = judge_batch(&s, &[full("d:2", "d-1", 20, 5)], k.clone()).unwrap();
        apply(&mut k, &j);
        let j2 = judge_batch(&s, &[op("e:1", "d-1", 10, &[("reps", 500i64.into())])], k).unwrap();
        assert_eq!(j2.verdicts[0].outcome, Outcome::Applied, "no validation when nothing moved");
        assert_eq!((j2.head, j2.writes.len(), j2.remember.len()), (1, 0, 1));
    }

    #[test]
    fn the_row_after_the_op_is_validated_not_the_op() {
        let s = Schema::workout();
        let mut k = Known::default();
        let j = judge_batch(&s, &[full("d:1", "d-1", 10, 5)], k.clone()).unwrap();
        apply(&mut k, &j);
        let j = judge_batch(&s, &[op("d:2", "d-1", 11, &[("reps", 6i64.into())])], k.clone()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
        let j = judge_batch(&s, &[op("d:3", "d-2", 11, &[("reps", 6i64.into())])], k).unwrap();
        assert!(matches!(&j.verdicts[0].outcome, Outcome::Rejected { code, .. } if code == "missing_fields"));
    }

    #[test]
    fn ops_on_one_row_in_one_batch_see_each_other_and_the_row_gets_the_last_seq() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), op("d:2", "d-1", 11, &[("reps", 7i64.into())]), full("d:3", "d-2", 12, 1)];
        let j = judge_batch(&s, &b, Known::default()).unwrap();
        assert!(j.verdicts.iter().all(|v| v.outcome == Outcome::Applied));
        assert_eq!(j.head, 3);
        assert_eq!(j.writes.len(), 2);
        assert_eq!(j.writes[0].seq, 2);
        assert_eq!(j.writes[0].row.get("reps"), Some(&Value::Number(7.0)));
    }

    #[test]
    fn an_op_id_repeated_in_one_batch_is_a_replay_of_its_first() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), full("d:1", "d-1", 10, 5), full("d:2", "d-2", 10, 0), full("d:2", "d-2", 10, 0)];
        let j = judge_batch(&s, &b, Known::default()).unwrap();
        assert_eq!(j.verdicts[1].outcome, Outcome::Duplicate);
        assert_eq!(j.verdicts[3].outcome, j.verdicts[2].outcome);
        assert_eq!(j.remember.len(), 2);
    }

    #[test]
    fn a_rejected_op_carries_the_current_row() {
        let s = Schema::workout();
        let b = vec![full("d:1", "d-1", 10, 5), op("d:2", "d-1", 11, &[("reps", 0i64.into())])];
        let j = judge_batch(&s, &b, Known::default()).unwrap();
        let Outcome::Rejected { row: Some(row), .. } = &j.verdicts[1].outcome else { panic!() };
        assert_eq!(row.get("reps"), Some(&Value::Number(5.0)));
    }

    #[test]
    fn schema_too_new_first_fails_later_stops() {
        let s = Schema::workout();
        let mut newer = full("d:2", "d-2", 10, 5);
        newer.schema = 2;
        assert_eq!(judge_batch(&s, std::slice::from_ref(&newer), Known::default()), Err(JudgeError::SchemaTooNew { op: 2, server: 1 }));
        let j = judge_batch(&s, &[full("d:1", "d-1", 10, 5), newer, full("d:3", "d-3", 10, 5)], Known::default()).unwrap();
        assert_eq!(j.verdicts.len(), 1);
        assert_eq!(j.stopped_at_schema, Some(2));
    }

    #[test]
    fn at_most_1000_ops_are_judged() {
        let s = Schema::workout();
        let b: Vec<Op> = (0..1200).map(|i| full(&format!("d:{i}"), &format!("d-{i}"), 10, 5)).collect();
        let j = judge_batch(&s, &b, Known::default()).unwrap();
        assert_eq!(j.verdicts.len(), 1000);
        assert_eq!(j.head, 1000);
    }

    #[test]
    fn tombstones_pass_without_the_required_fields() {
        let s = Schema::workout();
        let j = judge_batch(&s, &[op("d:1", "d-9", 10, &[("_deleted", true.into())])], Known::default()).unwrap();
        assert_eq!(j.verdicts[0].outcome, Outcome::Applied);
    }
}
