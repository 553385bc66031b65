//! The device's rows: base (last known server state) ⊕ pending ops = visible.
//!
//! `merge` is a join (idempotent, commutative, associative), so the visible
//! row of a key with pending ops is kept as an overlay `base ⊕ ops`, updated
//! in place; keys with no pending op are visible straight from `base`.
//! After a rejection the overlay is rebuilt from `base` and the ops that remain.

use std::collections::BTreeMap;

use crate::order::{merge, merge_row};
use crate::protocol::{Op, Row, RowKey};

/// Base rows and the overlay of rows that have pending ops.
#[derive(Debug, Clone, Default)]
pub struct Replica {
    base: BTreeMap<RowKey, Row>,
    overlay: BTreeMap<RowKey, Row>,
    /// The shared spaces a row was ever put in (until the space is dropped):
    /// kept as rows come, so a pull need not scan every key to know them.
    spaces: std::collections::BTreeSet<String>,
    /// Keys whose visible row may have changed since [`Replica::take_touched`].
    touched: Vec<RowKey>,
    /// Whether anyone reads `touched` (else it is not kept).
    tracking: bool,
}

impl Replica {
    /// A replica from stored base rows and pending ops.
    pub fn new(base: impl IntoIterator<Item = (RowKey, Row)>, pending: &[Op]) -> Self {
        let mut r = Replica { base: base.into_iter().filter(|(_, row)| !row.is_gone()).collect(), ..Replica::default() };
        let shared: std::collections::BTreeSet<String> = r.base.keys().filter(|k| !k.space.is_empty()).map(|k| k.space.clone()).collect();
        r.spaces = shared;
        for op in pending {
            r.add_pending(op);
        }
        r
    }

    /// The base row of a key.
    pub fn base(&self, key: &RowKey) -> Option<&Row> {
        self.base.get(key)
    }

    /// The visible row of a key (tombstones included).
    pub fn visible(&self, key: &RowKey) -> Option<&Row> {
        self.overlay.get(key).or_else(|| self.base.get(key))
    }

    /// A new local op: merged into the visible row.
    pub fn add_pending(&mut self, op: &Op) {
        let key = op.place();
        self.note(&key.space);
        self.touch(&key);
        let row = match self.overlay.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let start = self.base.get(e.key()).cloned().unwrap_or_default();
                e.insert(start)
            }
        };
        merge(row, op);
    }

    /// An op was applied (or was a duplicate): fold it into the base. `still_pending`
    /// says whether the row has other pending ops (else the overlay is dropped).
    /// Returns the new base row.
    pub fn fold(&mut self, op: &Op, still_pending: bool) -> Row {
        let key = op.place();
        self.note(&key.space);
        self.touch(&key);
        let base = self.base.entry(key.clone()).or_default();
        merge(base, op);
        let out = base.clone();
        if !still_pending {
            self.overlay.remove(&key);
        }
        out
    }

    /// An op was rejected: the base takes the server's row, and the visible row
    /// is rebuilt from the base and the ops that `remain` on the row.
    /// Returns the new base row, if there is one.
    pub fn reject<'a>(&mut self, key: &RowKey, server_row: Option<&Row>, remain: impl IntoIterator<Item = &'a Op>) -> Option<Row> {
        if let Some(server) = server_row {
            self.note(&key.space);
            merge_row(self.base.entry(key.clone()).or_default(), server);
        }
        self.rebuild(key, remain);
        self.base.get(key).cloned()
    }

    /// Rebuilds the overlay of a key from its base and `ops`.
    pub fn rebuild<'a>(&mut self, key: &RowKey, ops: impl IntoIterator<Item = &'a Op>) {
        self.touch(key);
        let mut row: Option<Row> = None;
        for op in ops {
            let r = row.get_or_insert_with(|| self.base.get(key).cloned().unwrap_or_default());
            merge(r, op);
        }
        match row {
            Some(r) => {
                self.overlay.insert(key.clone(), r);
            }
            None => {
                self.overlay.remove(key);
            }
        }
    }

    /// A pulled change (or any server copy of a row): merged field by field into
    /// the base and into the visible row. Returns the new base row if it moved.
    pub fn merge_remote(&mut self, key: &RowKey, row: &Row) -> Option<Row> {
        self.note(&key.space);
        let base = self.base.entry(key.clone()).or_default();
        let moved = merge_row(base, row);
        let out = moved.then(|| base.clone());
        if moved {
            self.touch(key);
        }
        if let Some(v) = self.overlay.get_mut(key) {
            merge_row(v, row);
        }
        out
    }

    /// Puts a base row as another engine stored it (see `Engine::absorb`);
    /// a row with no cell removes it.
    pub fn put_base(&mut self, key: &RowKey, row: &Row) {
        self.touch(key);
        if row.is_gone() {
            self.base.remove(key);
        } else {
            self.note(&key.space);
            self.base.insert(key.clone(), row.clone());
        }
    }

    fn touch(&mut self, key: &RowKey) {
        if self.tracking {
            self.touched.push(key.clone());
        }
    }

    fn note(&mut self, space: &str) {
        if !space.is_empty() && !self.spaces.contains(space) {
            self.spaces.insert(space.to_owned());
        }
    }

    /// Removes every base row of `space` (the user left it); returns their
    /// keys. Rows with pending ops stay visible until those are answered.
    pub fn drop_space(&mut self, space: &str) -> Vec<RowKey> {
        let gone: Vec<RowKey> = self.base.keys().filter(|k| k.space == space).cloned().collect();
        for k in &gone {
            self.base.remove(k);
        }
        if self.tracking {
            self.touched.extend(gone.iter().cloned());
        }
        if !self.overlay.keys().any(|k| k.space == space) {
            self.spaces.remove(space);
        }
        gone
    }

    /// The keys whose visible row may have changed since the last call
    /// (each once, in key order): what indexes and live queries look at.
    pub fn take_touched(&mut self) -> Vec<RowKey> {
        self.tracking = true;
        let mut keys = std::mem::take(&mut self.touched);
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The shared spaces this replica may hold a row of (base or pending):
    /// every one it holds a row of, and perhaps some whose rows all went.
    pub fn spaces(&self) -> &std::collections::BTreeSet<String> {
        &self.spaces
    }

    /// Every visible row named `table/row_id`, in any space (the personal
    /// space's first, then by space name), tombstones included.
    pub fn named<'a>(&'a self, table: &str, row_id: &str) -> Vec<(&'a RowKey, &'a Row)> {
        let start = RowKey::new(table, row_id);
        let same = |(k, _): &(&RowKey, &Row)| k.table == table && k.row_id == row_id;
        let mut out: BTreeMap<&RowKey, &Row> = self.base.range(start.clone()..).take_while(same).collect();
        out.extend(self.overlay.range(start..).take_while(same));
        out.into_iter().collect()
    }

    /// The visible rows of `table` in rowId order, tombstones included: read
    /// as they are walked (an index fill over a large table holds no list of
    /// them).
    pub fn table<'a>(&'a self, table: &str) -> impl Iterator<Item = (&'a RowKey, &'a Row)> + 'a {
        let start = RowKey::new(table, "");
        let mut base = self.base.range(start.clone()..).peekable();
        let mut over = self.overlay.range(start.clone()..).peekable();
        fn key_in<'a>(row: Option<&(&'a RowKey, &'a Row)>, table: &str) -> Option<&'a RowKey> {
            row.map(|(k, _)| *k).filter(|k| k.table == table)
        }
        std::iter::from_fn(move || match (key_in(base.peek(), &start.table), key_in(over.peek(), &start.table)) {
            (Some(b), Some(o)) if b == o => {
                base.next();
                over.next()
            }
            (Some(b), Some(o)) if b < o => base.next(),
            (_, Some(_)) => over.next(),
            (Some(_), None) => base.next(),
            (None, None) => None,
        })
    }

    /// Every visible row (for checks and exports).
    pub fn all_visible(&self) -> BTreeMap<RowKey, Row> {
        let mut out = self.base.clone();
        for (k, r) in &self.overlay {
            out.insert(k.clone(), r.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Cell, Fields, Mark, OpId, Value};

    fn op(id: &str, row: &str, at: u64, f: &[(&str, f64)]) -> Op {
        Op {
            op_id: OpId::new(id),
            table: "sets".into(),
            row_id: row.into(),
            fields: f.iter().map(|(k, v)| (k.to_string(), Value::Number(*v))).collect::<Fields>(),
            at,
            schema: 1,
            space: None,
            seen: None,
        }
    }

    fn key(row: &str) -> RowKey {
        RowKey::new("sets", row)
    }

    #[test]
    fn visible_is_base_plus_pending() {
        let mut r = Replica::default();
        let mut server = Row::default();
        server.cells.insert("a".into(), Cell { value: Value::Number(1.0), mark: Mark { at: 5, op_id: "s:1".into() } });
        r.merge_remote(&key("x"), &server);
        r.add_pending(&op("d:1", "x", 6, &[("b", 2.0)]));
        let v = r.visible(&key("x")).unwrap();
        assert_eq!((v.get("a"), v.get("b")), (Some(&Value::Number(1.0)), Some(&Value::Number(2.0))));
        assert_eq!(r.base(&key("x")).unwrap().get("b"), None);
    }

    #[test]
    fn a_rejected_op_is_never_visible_and_the_row_is_rebuilt_from_the_rest() {
        let mut r = Replica::default();
        let keep = op("d:1", "x", 10, &[("a", 1.0)]);
        let bad = op("d:2", "x", 11, &[("a", 99.0), ("b", 99.0)]);
        r.add_pending(&keep);
        r.add_pending(&bad);
        assert_eq!(r.visible(&key("x")).unwrap().get("a"), Some(&Value::Number(99.0)));
        r.reject(&key("x"), None, [&keep]);
        let v = r.visible(&key("x")).unwrap();
        assert_eq!((v.get("a"), v.get("b")), (Some(&Value::Number(1.0)), None));
        r.reject(&key("x"), None, []);
        assert!(r.visible(&key("x")).is_none());
    }

    #[test]
    fn pulled_echoes_of_own_ops_change_nothing() {
        let mut r = Replica::default();
        let o = op("d:1", "x", 10, &[("a", 1.0)]);
        r.add_pending(&o);
        let base = r.fold(&o, false);
        assert!(r.merge_remote(&key("x"), &base).is_none(), "an echo moves no mark");
        assert_eq!(r.visible(&key("x")), Some(&base));
    }

    #[test]
    fn a_newer_local_op_survives_an_older_remote_change() {
        let mut r = Replica::default();
        r.add_pending(&op("d:1", "x", 10, &[("a", 1.0)]));
        let mut remote = Row::default();
        remote.cells.insert("a".into(), Cell { value: Value::Number(7.0), mark: Mark { at: 9, op_id: "e:1".into() } });
        r.merge_remote(&key("x"), &remote);
        assert_eq!(r.visible(&key("x")).unwrap().get("a"), Some(&Value::Number(1.0)));
        assert_eq!(r.base(&key("x")).unwrap().get("a"), Some(&Value::Number(7.0)));
    }

    #[test]
    fn table_lists_base_and_overlay_rows_in_order() {
        let mut r = Replica::default();
        r.merge_remote(&key("b"), &{
            let mut x = Row::default();
            x.cells.insert("a".into(), Cell { value: Value::Null, mark: Mark { at: 1, op_id: "s:1".into() } });
            x
        });
        r.add_pending(&op("d:1", "a", 10, &[("a", 1.0)]));
        r.add_pending(&op("d:2", "b", 10, &[("a", 1.0)]));
        r.add_pending(&op("d:3", "c", 10, &[("a", 1.0)]));
        let mut other = op("d:4", "a", 10, &[("a", 1.0)]);
        other.table = "zzz".into();
        r.add_pending(&other);
        let ids: Vec<&str> = r.table("sets").map(|(k, _)| k.row_id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "c"]);
        assert_eq!(r.table("sets").nth(1).and_then(|(_, r)| r.get("a")), Some(&Value::Number(1.0)));
    }
}
