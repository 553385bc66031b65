//! A committed step as told to the device's other contexts (tabs and the
//! Service Worker, on the channel `marksync:<name>`; PROTOCOL §7, "What the
//! other contexts are told").
//!
//! The message is one text of lines, one record a line: a letter for what
//! it is, then the record as the store writes it (compact JSON never holds a
//! raw newline). Spelled record by record, not as one JSON object of the
//! whole [`Txn`], because a listener then reads each record with the very
//! reader the store reads it with: a reader of the whole step was a second
//! copy of every record's, 20 KB of the wasm before compression.

use serde::{de::DeserializeOwned, Serialize};

use crate::index_def::EntriesFor;
use crate::store::Txn;

const META: char = 'm';
const PUT_BASE: char = 'b';
const DELETE_PENDING: char = 'd';
const PUT_PENDING: char = 'p';
const DELETE_REJECTION: char = 'x';
const PUT_REJECTION: char = 'r';
const DELETE_CONFLICT: char = 'y';
const PUT_CONFLICT: char = 'c';
const SYNC: char = 's';
const SCHEMA: char = 'k';
const FOLLOWING: char = 'f';
const ENTRIES_FOR: char = 'e';

/// The step as the other contexts are told it.
pub fn tell(txn: &Txn) -> String {
    let mut out = String::new();
    let mut line = |tag: char, text: &str| {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push(tag);
        out.push_str(text);
    };
    let mut put = |tag: char, v: &dyn Spell| line(tag, &v.spell());
    if let Some(m) = &txn.meta {
        put(META, m);
    }
    for r in &txn.put_base {
        put(PUT_BASE, r);
    }
    for at in &txn.delete_pending {
        put(DELETE_PENDING, at);
    }
    for op in &txn.put_pending {
        put(PUT_PENDING, op);
    }
    for id in &txn.delete_rejections {
        put(DELETE_REJECTION, id);
    }
    for r in &txn.put_rejections {
        put(PUT_REJECTION, r);
    }
    for id in &txn.delete_conflicts {
        put(DELETE_CONFLICT, id);
    }
    for c in &txn.put_conflicts {
        put(PUT_CONFLICT, c);
    }
    if let Some(s) = &txn.sync {
        put(SYNC, s);
    }
    if let Some(s) = &txn.schema {
        put(SCHEMA, s);
    }
    if let Some(f) = &txn.following {
        put(FOLLOWING, f);
    }
    if let Some(e) = &txn.entries_for {
        line(ENTRIES_FOR, &e.spell());
    }
    out
}

/// The step a message tells, or `None` if any line of it does not read (a
/// message of another version of the library, or garbled): it is then
/// ignored whole, never taken in part.
pub fn heard(text: &str) -> Option<Txn> {
    let mut txn = Txn::default();
    for line in text.split('\n').filter(|l| !l.is_empty()) {
        let mut chars = line.chars();
        let tag = chars.next()?;
        let body = chars.as_str();
        match tag {
            META => txn.meta = Some(read(body)?),
            PUT_BASE => txn.put_base.push(read(body)?),
            DELETE_PENDING => txn.delete_pending.push(body.parse().ok()?),
            PUT_PENDING => txn.put_pending.push(read(body)?),
            DELETE_REJECTION => txn.delete_rejections.push(read(body)?),
            PUT_REJECTION => txn.put_rejections.push(read(body)?),
            DELETE_CONFLICT => txn.delete_conflicts.push(read(body)?),
            PUT_CONFLICT => txn.put_conflicts.push(read(body)?),
            SYNC => txn.sync = Some(read(body)?),
            SCHEMA => txn.schema = Some(read(body)?),
            FOLLOWING => txn.following = Some(read(body)?),
            ENTRIES_FOR => txn.entries_for = Some(EntriesFor::read(body)?),
            _ => return None,
        }
    }
    Some(txn)
}

fn read<T: DeserializeOwned>(body: &str) -> Option<T> {
    serde_json::from_str(body).ok()
}

/// A record spelled as the store writes it (`at`s as plain numbers).
trait Spell {
    fn spell(&self) -> String;
}

impl<T: Serialize> Spell for T {
    fn spell(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::following::Following;
    use crate::protocol::{Cell, Fields, Mark, Op, OpId, Row, RowKey, Value};
    use crate::store::{Meta, Rejection};
    use crate::sync_state::SyncState;

    fn op(at: u64) -> Op {
        Op {
            op_id: OpId::new("d1:7"),
            table: "sets".into(),
            row_id: "r\n1".into(),
            fields: [("note".to_string(), Value::String("two\nlines".into()))].into_iter().collect::<Fields>(),
            at,
            schema: 1,
            space: Some("gym".into()),
            seen: Some(3),
        }
    }

    #[test]
    fn every_part_of_a_step_is_heard_as_told() {
        let mut row = Row::default();
        row.cells.insert("reps".into(), Cell { value: Value::Number(1.5), mark: Mark { at: 4, op_id: OpId::new("d1:1") } });
        let txn = Txn {
            meta: Some(Meta::fresh("d1".into())),
            put_base: vec![(RowKey::in_space("gym", "sets", "r1"), row)],
            delete_pending: vec![3, 4],
            put_pending: vec![op(17), op(18)],
            delete_rejections: vec![OpId::new("d1:2")],
            put_rejections: vec![Rejection {
                op: op(9),
                reason: "no\nway".into(),
                code: "forbidden".into(),
                attempts: 2,
                superseded: true,
            }],
            delete_conflicts: vec!["c\"1".into()],
            put_conflicts: Vec::new(),
            sync: Some(SyncState::default()),
            schema: None,
            following: Some(Following::default()),
            entries_for: None,
        };
        let told = tell(&txn);
        assert_eq!(heard(&told), Some(txn));
        assert_eq!(heard(&tell(&Txn::default())), Some(Txn::default()));
    }

    #[test]
    fn a_line_that_does_not_read_refuses_the_whole_message() {
        let told = tell(&Txn { delete_pending: vec![3], ..Txn::default() });
        assert!(heard(&told).is_some());
        assert_eq!(heard(&format!("{told}\nd4x")), None, "an at that is not a number");
        assert_eq!(heard(&format!("{told}\nz{{}}")), None, "a letter of no record");
        assert_eq!(heard(&format!("{told}\np{{\"opId\":1}}")), None, "an op that does not read");
    }
}
