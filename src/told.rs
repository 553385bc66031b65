//! A committed step as told to the device's other contexts (tabs and the
//! Service Worker, on the channel `marksync:<name>`; PROTOCOL §7, where it
//! says how the other contexts' steps arrive).
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
    let mut out = Lines::default();
    out.all(META, &txn.meta);
    out.all(PUT_BASE, &txn.put_base);
    out.all(DELETE_PENDING, &txn.delete_pending);
    out.all(PUT_PENDING, &txn.put_pending);
    out.all(DELETE_REJECTION, &txn.delete_rejections);
    out.all(PUT_REJECTION, &txn.put_rejections);
    out.all(DELETE_CONFLICT, &txn.delete_conflicts);
    out.all(PUT_CONFLICT, &txn.put_conflicts);
    out.all(SYNC, &txn.sync);
    out.all(SCHEMA, &txn.schema);
    out.all(FOLLOWING, &txn.following);
    if let Some(e) = &txn.entries_for {
        out.line(ENTRIES_FOR, &e.spell());
    }
    out.0
}

/// The message as it is written.
#[derive(Default)]
struct Lines(String);

impl Lines {
    fn line(&mut self, tag: char, text: &str) {
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        self.0.push(tag);
        self.0.push_str(text);
    }

    /// Every record of one kind, each as the store writes it (`at`s as plain numbers).
    fn all<'a, T: Serialize + 'a>(&mut self, tag: char, records: impl IntoIterator<Item = &'a T>) {
        for r in records {
            self.line(tag, &serde_json::to_string(r).unwrap_or_default());
        }
    }
}

/// The step a message tells, or `None` if any line of it does not read (a
/// message of another version of the library, or garbled): it is never
/// taken in part, and the hearer reads the database again instead
/// ([`crate::driver::Driver::absorb_unreadable`]).
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
    crate::json::from_str(body).ok()
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
