//! The rule of §2a as the judge applies it, field by field.

use super::*;
use crate::judge::{judge_batch, Known, Limits};
use crate::protocol::{Fields, OpId, Value};
use crate::schema::Schema;
use crate::space::SpaceId;

fn op(id: &str, at: u64, seen: Option<u64>, f: &[(&str, Value)]) -> Op {
    Op {
        op_id: OpId::new(id),
        table: "sets".into(),
        row_id: "r".into(),
        fields: f.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<Fields>(),
        at,
        schema: 1,
        space: None,
        seen,
    }
}

fn schema() -> Schema {
    Schema::from_json(r#"{"version": 1, "tables": {"sets": {"fields": {"reps": {"type": "integer"}}}}}"#).unwrap()
}

/// A memory of one row of user `u`'s personal space, judged op by op.
#[derive(Default)]
struct One {
    row: Option<Row>,
    head: u64,
}

impl One {
    /// Judges `op`; returns the seq it wrote at, if it wrote.
    fn judge(&mut self, op: Op) -> Option<u64> {
        let place = (SpaceId::from("~u"), RowKey::new("sets", "r"));
        let mut known = Known::default();
        if let Some(r) = &self.row {
            known.rows.insert(place.clone(), r.clone());
        }
        known.heads.insert(place.0.clone(), self.head);
        let j = judge_batch(&schema(), "u", &[op], known, &Limits::default()).unwrap();
        let w = j.writes.into_iter().next()?;
        self.head = w.seq;
        self.row = Some(w.row);
        Some(w.seq)
    }

    fn overwrites(&self, field: &str) -> Vec<(String, String)> {
        let note = self.row.as_ref().and_then(|r| r.note(field));
        note.map(|n| n.overwrites.iter().map(|o| (o.lost.op_id.to_string(), o.won.op_id.to_string())).collect()).unwrap_or_default()
    }
}

fn pair(lost: &str, won: &str) -> (String, String) {
    (lost.into(), won.into())
}

#[test]
fn an_op_that_replaces_a_value_its_device_had_not_pulled_records_the_overwrite() {
    let mut s = One::default();
    assert_eq!(s.judge(op("a:1", 100, Some(0), &[("reps", 6.into())])), Some(1));
    s.judge(op("b:1", 200, Some(0), &[("reps", 7.into())]));
    assert_eq!(s.overwrites("reps"), vec![pair("a:1", "b:1")]);
    let note = s.row.as_ref().and_then(|r| r.note("reps")).unwrap();
    assert_eq!(note.seq, Some(2), "the cell took its value at seq 2");
    assert_eq!(note.by, None, "the sender's own personal space names no author");
}

#[test]
fn an_op_made_after_pulling_the_value_replaces_it_without_a_record() {
    let mut s = One::default();
    s.judge(op("a:1", 100, Some(0), &[("reps", 6.into())]));
    s.judge(op("b:1", 200, Some(1), &[("reps", 7.into())]));
    assert!(s.overwrites("reps").is_empty());
}

#[test]
fn an_op_that_loses_to_a_value_its_device_had_not_pulled_is_recorded_and_the_row_written() {
    let mut s = One::default();
    s.judge(op("b:1", 200, Some(0), &[("reps", 7.into())]));
    assert_eq!(s.judge(op("a:1", 100, Some(0), &[("reps", 6.into())])), Some(2), "a loss is news: the row takes a seq");
    assert_eq!(s.overwrites("reps"), vec![pair("a:1", "b:1")]);
    assert_eq!(s.row.as_ref().unwrap().get("reps"), Some(&Value::from(7)), "the value stands");
    assert_eq!(s.row.as_ref().and_then(|r| r.note("reps")).and_then(|n| n.seq), Some(1), "its seq too");
    // Its replay writes nothing more.
    let mut again = One { row: s.row.clone(), head: s.head };
    again.judge(op("a:1", 100, Some(0), &[("reps", 6.into())]));
    assert_eq!(again.overwrites("reps").len(), 1);
}

#[test]
fn no_record_for_one_devices_own_edits_equal_values_protocol_fields_or_ops_without_seen() {
    let mut s = One::default();
    s.judge(op("a:1", 100, Some(0), &[("reps", 6.into()), ("_deleted", false.into())]));
    s.judge(op("a:2", 200, Some(0), &[("reps", 7.into())]));
    s.judge(op("b:1", 300, Some(0), &[("reps", 7.into())]));
    s.judge(op("c:1", 400, None, &[("reps", 8.into())]));
    s.judge(op("d:1", 500, Some(0), &[("_deleted", true.into())]));
    assert_eq!(s.judge(op("e:1", 50, None, &[("reps", 1.into())])), None, "an old device's loss: nothing to write");
    assert!(s.overwrites("reps").is_empty() && s.overwrites("_deleted").is_empty());
}

#[test]
fn later_writes_carry_the_records_and_keep_the_newest_few() {
    let mut s = One::default();
    s.judge(op("a:1", 100, Some(0), &[("reps", 1.into())]));
    for i in 2..=7u64 {
        // Each device replaces the last value without having pulled it.
        s.judge(op(&format!("d{i}:1"), 100 * i, Some(s.head - 1), &[("reps", Value::from(i as i64))]));
    }
    let got = s.overwrites("reps");
    assert_eq!(got.len(), MAX_OVERWRITES_PER_CELL);
    assert_eq!(got.last(), Some(&pair("d6:1", "d7:1")));
    // A sequential write keeps them, so a device that pulls only now learns them.
    s.judge(op("z:1", 10_000, Some(s.head), &[("reps", 100.into())]));
    assert_eq!(s.overwrites("reps").len(), MAX_OVERWRITES_PER_CELL);
}

#[test]
fn the_device_finds_only_its_own_losses() {
    let mut s = One::default();
    s.judge(op("a:1", 100, Some(0), &[("reps", 6.into())]));
    s.judge(op("b:1", 200, Some(0), &[("reps", 7.into())]));
    let row = s.row.clone().unwrap();
    let key = RowKey::new("sets", "r");
    let mine: Vec<Conflict> = found_in("a", &key, None, &row).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!((mine[0].id.as_str(), &mine[0].mine.value, &mine[0].theirs.value), ("a:1/reps", &Value::from(6), &Value::from(7)));
    assert_eq!(found_in("b", &key, None, &row).count(), 0);
    // The notes travel in the marks and come back the same.
    let wire = serde_json::to_string(&row).unwrap();
    assert!(
        wire.contains(r#""overwrites":[{"lost":{"value":6,"at":100,"opId":"a:1"},"won":{"value":7,"at":200,"opId":"b:1"}}]"#),
        "{wire}"
    );
    let back: Row = serde_json::from_str(&wire).unwrap();
    assert_eq!(back.notes, row.notes);
    assert_eq!(row.without_notes(), back, "notes are not the row's state");
}
