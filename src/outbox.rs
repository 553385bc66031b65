//! The outbox: pending ops in record order (`at` order), indexed by opId and row.

use std::collections::{HashMap, VecDeque};

use crate::protocol::{Op, OpId, RowKey};

/// Pending ops, ordered by `at` (unique and increasing per device).
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    /// In `at` order: recorded at the back, answered from the front, found
    /// by a binary search (a deque, where a tree was one more copy of a
    /// tree's code in the wasm and no faster at either end).
    ops: VecDeque<Op>,
    by_id: HashMap<OpId, u64>,
    /// Per row, its ops' `at`s in order: a few, pushed at the back (a new
    /// op's `at` is the largest) and taken from the front (ops leave in
    /// order), so a sorted deque, not a tree.
    by_row: HashMap<RowKey, VecDeque<u64>>,
}

impl Outbox {
    /// An outbox holding `ops`.
    pub fn new(ops: impl IntoIterator<Item = Op>) -> Self {
        let mut o = Outbox::default();
        for op in ops {
            o.insert(op);
        }
        o
    }

    /// Queues an op (replacing one with the same `at`, which never happens on one device).
    pub fn insert(&mut self, op: Op) {
        if self.by_id.contains_key(&op.op_id) {
            return;
        }
        self.by_id.insert(op.op_id.clone(), op.at);
        let ats = self.by_row.entry(op.place()).or_default();
        match ats.back() {
            Some(last) if *last >= op.at => {
                if let Err(i) = ats.binary_search(&op.at) {
                    ats.insert(i, op.at);
                }
            }
            _ => ats.push_back(op.at),
        }
        // `at`s only grow as ops are recorded: nearly always appended.
        match self.ops.back() {
            Some(last) if last.at >= op.at => match self.find(op.at) {
                Ok(i) => self.ops[i] = op,
                Err(i) => self.ops.insert(i, op),
            },
            _ => self.ops.push_back(op),
        }
    }

    /// Where the op recorded at `at` is, or would go.
    fn find(&self, at: u64) -> Result<usize, usize> {
        self.ops.binary_search_by_key(&at, |o| o.at)
    }

    /// Removes an op by opId and returns it.
    pub fn remove(&mut self, id: &OpId) -> Option<Op> {
        let at = self.by_id.remove(id)?;
        // Verdicts come in the order ops were sent, the outbox's: the first
        // op goes, at no cost (a deque shifts the shorter side).
        let op = self.ops.remove(self.find(at).ok()?)?;
        let key = op.place();
        if let Some(ats) = self.by_row.get_mut(&key) {
            if let Ok(i) = ats.binary_search(&at) {
                ats.remove(i);
            }
            if ats.is_empty() {
                self.by_row.remove(&key);
            }
        }
        Some(op)
    }

    /// Removes an op by `at` and returns it.
    pub fn remove_at(&mut self, at: u64) -> Option<Op> {
        let id = self.at(at)?.op_id.clone();
        self.remove(&id)
    }

    /// The op queued at `at`.
    pub fn at(&self, at: u64) -> Option<&Op> {
        self.find(at).ok().map(|i| &self.ops[i])
    }

    /// The op with this opId.
    pub fn get(&self, id: &OpId) -> Option<&Op> {
        self.by_id.get(id).and_then(|at| self.at(*at))
    }

    /// The first `max` ops, in order: the next batch to push.
    pub fn next_batch(&self, max: usize) -> Vec<Op> {
        self.ops.iter().take(max).cloned().collect()
    }

    /// The pending ops on one row, in order.
    pub fn on_row<'a>(&'a self, key: &RowKey) -> impl Iterator<Item = &'a Op> + 'a {
        self.by_row.get(key).into_iter().flatten().filter_map(|at| self.at(*at))
    }

    /// Whether the row has pending ops.
    pub fn has_row(&self, key: &RowKey) -> bool {
        self.by_row.contains_key(key)
    }

    /// How many ops are pending.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// All pending ops, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Op> {
        self.ops.iter()
    }

    /// The largest `at` still queued: the last op's, the ops being in `at` order.
    pub fn last_at(&self) -> Option<u64> {
        self.ops.back().map(|o| o.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Fields, Value};

    fn op(n: u64, at: u64, row: &str) -> Op {
        let mut f = Fields::new();
        f.insert("a".into(), Value::Null);
        Op { op_id: crate::ids::op_id("d", n), table: "t".into(), row_id: row.into(), fields: f, at, schema: 1, space: None, seen: None }
    }

    #[test]
    fn batches_follow_record_order_not_op_id_text() {
        let o = Outbox::new([op(10, 3, "x"), op(9, 2, "y"), op(100, 1, "x")]);
        let ids: Vec<String> = o.next_batch(2).iter().map(|o| o.op_id.to_string()).collect();
        assert_eq!(ids, vec!["d:100", "d:9"]);
        assert_eq!(o.on_row(&RowKey::new("t", "x")).count(), 2);
    }

    #[test]
    fn a_rows_ops_stay_in_at_order_whatever_the_order_they_come_in() {
        let mut o = Outbox::new([op(1, 5, "x"), op(2, 2, "x"), op(3, 9, "x"), op(4, 7, "x")]);
        let ats = |o: &Outbox| o.on_row(&RowKey::new("t", "x")).map(|op| op.at).collect::<Vec<_>>();
        assert_eq!(ats(&o), [2, 5, 7, 9]);
        assert!(o.remove_at(7).is_some());
        o.insert(op(5, 3, "x"));
        assert_eq!(ats(&o), [2, 3, 5, 9]);
        for at in [2, 3, 5, 9] {
            assert!(o.remove_at(at).is_some());
        }
        assert!(!o.has_row(&RowKey::new("t", "x")));
    }

    #[test]
    fn remove_keeps_indexes_in_step() {
        let mut o = Outbox::new([op(1, 1, "x"), op(2, 2, "x")]);
        assert!(o.remove(&crate::ids::op_id("d", 1)).is_some());
        assert!(o.has_row(&RowKey::new("t", "x")));
        assert!(o.remove_at(2).is_some());
        assert!(!o.has_row(&RowKey::new("t", "x")));
        assert!(o.is_empty());
        assert!(o.remove_at(2).is_none());
    }
}
