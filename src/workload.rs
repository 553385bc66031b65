//! Synthetic workloads shared by the native benchmarks and the browser
//! benchmarks (so wasm and native measure the very same thing). Not part of
//! the API.
#![allow(missing_docs)]

use crate::protocol::{Cell, Fields, Mark, Op, OpId, Row, RowKey, Value};

const FIELDS: [&str; 3] = ["exercise", "weightKg", "reps"];

/// `n` single-field ops over `rows` rows (`r0`…), with random `at`s and
/// opIds from 4 devices; returns the ops and each op's row index.
pub fn field_ops(n: usize, rows: usize) -> (Vec<Op>, Vec<usize>) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut index = Vec::with_capacity(n);
    let ops = (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let field = FIELDS[(x % 3) as usize];
            let value = if field == "exercise" { Value::from("squat") } else { Value::from(((x >> 8) % 100 + 1) as i64) };
            let mut fields = Fields::new();
            fields.insert(field.to_owned(), value);
            let row = (x >> 20) as usize % rows;
            index.push(row);
            Op {
                op_id: OpId::new(format!("dev{}:{}", x % 4, i)),
                table: "sets".into(),
                row_id: format!("r{row}"),
                fields,
                at: 1_000 + (x >> 30) % 100_000,
                schema: 1,
                space: None,
                seen: None,
            }
        })
        .collect();
    (ops, index)
}

/// Merges `ops` into `rows` fresh rows; returns how many fields moved.
pub fn merge_all(ops: &[Op], index: &[usize], rows: usize) -> usize {
    let mut out = vec![Row::default(); rows];
    let mut moved = 0;
    for (op, i) in ops.iter().zip(index) {
        moved += usize::from(crate::order::merge(&mut out[*i], op));
    }
    moved
}

/// A full workout set op (valid under the workout schema).
pub fn set_op(device: &str, n: usize, row: usize, at: u64) -> Op {
    let mut fields = Fields::new();
    fields.insert("exercise".into(), Value::from("squat"));
    fields.insert("weightKg".into(), Value::from(80.0));
    fields.insert("reps".into(), Value::from((n % 100 + 1) as i64));
    Op {
        op_id: OpId::new(format!("{device}:{n}")),
        table: "sets".into(),
        row_id: format!("{device}-{row}"),
        fields,
        at,
        schema: 1,
        space: None,
        seen: None,
    }
}

/// `n` server-known rows of the workout table.
pub fn base_rows(n: usize) -> Vec<(RowKey, Row)> {
    (0..n)
        .map(|i| {
            let mut r = Row::default();
            for (k, v) in [("exercise", Value::from("squat")), ("weightKg", 80.0.into()), ("reps", 5i64.into())] {
                r.cells.insert(k.into(), Cell { value: v, mark: Mark { at: i as u64, op_id: OpId::new(format!("srv:{i}")) } });
            }
            (RowKey::new("sets", format!("r{i}")), r)
        })
        .collect()
}
