//! The one ordering of marks and the one merge (PROTOCOL §2).
//!
//! `newer(a, b) = a.at != b.at ? a.at > b.at : a.opId > b.opId`, opIds compared
//! by bytes. Every merge on the device and on the server goes through
//! [`merge_cell`]; nothing else in marksync compares marks.

use crate::protocol::{Cell, Mark, Op, OpId, Row, Value};

/// Whether mark `a` is newer than mark `b`: later `at`, or the same `at` and a
/// greater opId (byte order, so `"a:1"` is newer than `"B:1"`). A total order.
#[inline]
pub fn newer(a: &Mark, b: &Mark) -> bool {
    newer_parts(a.at, &a.op_id, b)
}

/// The rule itself, for a mark given by its parts: is `(at, op_id)` newer than `b`?
#[inline]
fn newer_parts(at: u64, op_id: &OpId, b: &Mark) -> bool {
    if at != b.at {
        at > b.at
    } else {
        *op_id > b.op_id
    }
}

/// Sets `field = value` with the mark `(at, op_id)` in `row` unless the field
/// already has a mark that it is not newer than. Returns whether the field moved.
#[inline]
fn merge_parts(row: &mut Row, field: &str, value: &Value, at: u64, op_id: &OpId) -> bool {
    // A linear scan by equality: rows have a handful of fields, and `==`
    // rejects names of another length without reading them.
    match row.cells.iter_mut().find(|(k, _)| k.as_str() == field).map(|(_, c)| c) {
        Some(cell) => {
            if !newer_parts(at, op_id, &cell.mark) {
                return false;
            }
            cell.value = value.clone();
            cell.mark = Mark { at, op_id: op_id.clone() };
            true
        }
        None => {
            row.cells.insert(field.to_owned(), Cell { value: value.clone(), mark: Mark { at, op_id: op_id.clone() } });
            true
        }
    }
}

/// Sets `field = value` with `mark` in `row` unless the field already has a
/// mark that `mark` is not newer than. Returns whether the field moved.
#[inline]
pub fn merge_cell(row: &mut Row, field: &str, value: &Value, mark: &Mark) -> bool {
    merge_parts(row, field, value, mark.at, &mark.op_id)
}

/// merge(row, marks, op): applies each field of `op` that is newer than the
/// field's mark. Returns whether any mark moved. Idempotent and commutative:
/// applying ops in any order, any number of times, gives the same row.
pub fn merge(row: &mut Row, op: &Op) -> bool {
    merge_fields(row, op.fields.iter().map(|(k, v)| (k.as_str(), v)), op.at, &op.op_id)
}

/// merge for fields given one by one, all with the mark `(at, op_id)`: the
/// judge merges an op's fields as the newest schema spells them
/// ([`crate::schema::Schema::edit`]) without building a new op. The names must
/// be distinct. Returns whether any mark moved.
pub fn merge_fields<'a>(row: &mut Row, fields: impl IntoIterator<Item = (&'a str, &'a Value)>, at: u64, op_id: &OpId) -> bool {
    let mut moved = false;
    for (field, value) in fields {
        moved |= merge_parts(row, field, value, at, op_id);
    }
    moved
}

/// Merges another copy of a row (a pulled change, a verdict's row) into `row`
/// field by field with each field's own mark. Returns whether any mark moved.
pub fn merge_row(row: &mut Row, other: &Row) -> bool {
    let mut moved = false;
    for (field, cell) in &other.cells {
        moved |= merge_cell(row, field, &cell.value, &cell.mark);
    }
    moved
}

// Native only: the property tests and the executor are not built for wasm32.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::protocol::Fields;
    use proptest::prelude::*;

    fn mark(at: u64, id: &str) -> Mark {
        Mark { at, op_id: OpId::new(id) }
    }

    fn op(id: &str, at: u64, fields: &[(&str, Value)]) -> Op {
        Op {
            op_id: OpId::new(id),
            table: "t".into(),
            row_id: "r".into(),
            fields: fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<Fields>(),
            at,
            schema: 1,
            space: None,
            seen: None,
        }
    }

    #[test]
    fn later_at_wins_whatever_the_op_id() {
        assert!(newer(&mark(2, "A:1"), &mark(1, "z:9")));
        assert!(!newer(&mark(1, "z:9"), &mark(2, "A:1")));
    }

    #[test]
    fn equal_at_is_ordered_by_op_id_code_units() {
        // 'a' (0x61) > 'B' (0x42): a collation such as en_US would say otherwise.
        assert!(newer(&mark(5, "a:1"), &mark(5, "B:1")));
        assert!(!newer(&mark(5, "B:1"), &mark(5, "a:1")));
        // "10" < "9" as text: the counter is not compared as a number, but the
        // order is still total and the same everywhere.
        assert!(newer(&mark(5, "d:9"), &mark(5, "d:10")));
    }

    #[test]
    fn a_mark_is_not_newer_than_itself() {
        assert!(!newer(&mark(5, "d:1"), &mark(5, "d:1")));
    }

    #[test]
    fn merge_is_idempotent() {
        let mut row = Row::default();
        let o = op("d:1", 10, &[("w", Value::Number(1.0))]);
        assert!(merge(&mut row, &o));
        let once = row.clone();
        assert!(!merge(&mut row, &o));
        assert_eq!(row, once);
    }

    #[test]
    fn older_field_loses_newer_field_wins_per_field() {
        let mut row = Row::default();
        merge(&mut row, &op("d:2", 20, &[("a", 1.0.into()), ("b", 1.0.into())]));
        let moved = merge(&mut row, &op("e:1", 15, &[("a", 2.0.into()), ("c", 2.0.into())]));
        assert!(moved, "c is new");
        assert_eq!(row.get("a"), Some(&Value::Number(1.0)));
        assert_eq!(row.get("c"), Some(&Value::Number(2.0)));
        let moved = merge(&mut row, &op("e:2", 15, &[("a", 3.0.into())]));
        assert!(!moved, "every field lost");
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        (0u64..4, 0u8..3, prop::collection::btree_map("[abc]", -2i64..3, 1..3), "[aBz]").prop_map(|(at, n, f, dev)| Op {
            op_id: OpId::new(format!("{dev}:{n}")),
            table: "t".into(),
            row_id: "r".into(),
            fields: f.into_iter().map(|(k, v)| (k, Value::from(v))).collect(),
            at,
            schema: 1,
            space: None,
            seen: None,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        /// Any order, any repetition: the same row (convergence of §2).
        #[test]
        fn merge_converges_in_any_order(ops in prop::collection::vec(arb_op(), 1..12), seed in any::<u64>()) {
            // Ops with one opId must carry one content: dedupe by opId.
            let mut seen = std::collections::BTreeMap::new();
            for o in ops { seen.entry(o.op_id.clone()).or_insert(o); }
            let ops: Vec<Op> = seen.into_values().collect();
            let mut a = Row::default();
            for o in &ops { merge(&mut a, o); }
            let mut shuffled = ops.clone();
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut b = Row::default();
            for o in shuffled.iter().chain(ops.iter()) { merge(&mut b, o); }
            prop_assert_eq!(&a, &b);
            // merge_row of one replica into another gives the same as merging ops.
            let mut c = Row::default();
            merge_row(&mut c, &b);
            prop_assert_eq!(a, c);
        }
    }
}
