//! The device's rows: base (last known server state) ⊕ pending ops = visible.
//!
//! `merge` is a join (idempotent, commutative, associative), so the visible
//! row of a key with pending ops is kept as an overlay `base ⊕ ops`, updated
//! in place; keys with no pending op are visible straight from `base`.
//! After a rejection the overlay is rebuilt from `base` and the ops that remain.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::names::Names;
use crate::order::{merge, merge_row};
use crate::protocol::{Op, Row, RowKey};
use crate::store::{Provided, Snapshot, StoreError, Want};

mod narrow;
mod packed;

use crate::layered::{layered, Layer};
pub use narrow::narrow;
pub use packed::{Found, Packed};

/// Base rows and the overlay of rows that have pending ops.
#[derive(Debug, Clone, Default)]
pub struct Replica {
    base: Packed,
    overlay: BTreeMap<RowKey, Row>,
    /// The shared spaces a row was ever put in (until the space is dropped):
    /// kept as rows come, so a pull need not scan every key to know them.
    spaces: Names,
    /// Keys whose visible row may have changed since [`Replica::take_touched`],
    /// each with its visible row before the first such change: what an
    /// index takes out (it keeps no map from a row to its entry).
    /// Kept in the order they came (a touch is a push); a key's first
    /// touch is the one [`Replica::take_touched`] keeps.
    touched: Vec<(RowKey, Option<Row>)>,
    /// Whether anyone reads `touched` (else it is not kept).
    tracking: bool,
    /// The tables whose touched rows keep what they were.
    keep_was: Names,
}

impl Replica {
    /// A replica from the store's base chunks, kept packed as stored
    /// ([`Packed`]), the base rows stored beside them, and pending ops.
    pub fn open(chunks: Vec<Vec<u8>>, base: impl IntoIterator<Item = (RowKey, Row)>, pending: &[Op]) -> Result<Self, StoreError> {
        let mut r = Replica { base: Packed::open(chunks, base)?, ..Replica::default() };
        let mut shared = Names::new();
        let mut last = "";
        for (_, _, space) in r.base.keys() {
            if !space.is_empty() && space != last {
                shared.insert(space);
            }
            last = space;
        }
        r.spaces = shared;
        for op in pending {
            r.add_pending(op);
        }
        Ok(r)
    }

    /// A replica over a lazy store ([`Snapshot::lazy`]): no base row held
    /// but those `provided` and the store's log (`base`); the rest is read
    /// as steps ask for it ([`Replica::missing`], [`Replica::provide`]).
    pub fn open_lazy(provided: Vec<Provided>, base: impl IntoIterator<Item = (RowKey, Row)>, pending: &[Op]) -> Result<Self, StoreError> {
        let mut r = Replica { base: Packed::lazy(Vec::new(), base)?, ..Replica::default() };
        let spaces: Vec<String> = r.base.keys().map(|(_, _, s)| s).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        for s in spaces {
            r.note(&s);
        }
        for p in provided {
            r.provide(p)?;
        }
        for op in pending {
            r.add_pending(op);
        }
        Ok(r)
    }

    /// Of `wants`, the spans whose base rows are not all held: what to ask
    /// the store for before a step that reads them. None, unless lazy.
    pub fn missing(&self, wants: Vec<Want>) -> Vec<Want> {
        // One row written since open is known without a read.
        let known = |w: &Want| *w == Want::row(&w.from) && self.base.is_fresh(&w.from);
        wants.into_iter().filter(|w| !(self.base.covers(w) || known(w))).collect()
    }

    /// Takes base rows the store read. Rows it shows changed (a read newer
    /// than what was held) are marked touched, as any change is.
    pub fn provide(&mut self, p: Provided) -> Result<(), StoreError> {
        let span = Want { from: p.from.clone(), to: p.to.clone() };
        let changed = self.base.provide(p)?;
        for (key, was) in changed {
            let keep = self.tracking && self.keeps(&key.table);
            let was = match self.overlay.get_mut(&key) {
                // The visible row is the overlay's (base ⊕ queued ops): the newer base joins it.
                Some(row) => {
                    let before = keep.then(|| row.clone());
                    if let Some(base) = self.base.get(&key) {
                        merge_row(row, &base);
                    }
                    before
                }
                None => was.filter(|_| keep),
            };
            if self.tracking {
                self.touched.push((key, was));
            }
        }
        let spaces: Vec<String> =
            self.base.range_from(&span.from).take_while(|(k, _)| span.holds(k)).map(|(k, _)| k.space).filter(|s| !s.is_empty()).collect();
        for s in spaces {
            self.note(&s);
        }
        Ok(())
    }

    /// Lets go of base rows read from the store, least recently read first,
    /// until they weigh `budget` bytes; spans `pinned` says to keep stay.
    pub fn trim(&mut self, budget: usize, pinned: impl Fn(&RowKey, Option<&RowKey>) -> bool) {
        self.base.trim(budget, pinned);
    }

    /// Whether rows written since open are many enough to flush.
    pub fn wants_flush(&self) -> bool {
        self.base.wants_flush()
    }

    /// The rows written since open, as they are now ([`Packed::flush_mark`]).
    pub fn flush_mark(&self) -> Vec<(RowKey, Option<Row>)> {
        self.base.flush_mark()
    }

    /// The store holds `mark` in its chunks ([`Packed::flushed`]).
    pub fn flushed(&mut self, mark: Vec<(RowKey, Option<Row>)>) -> Result<(), StoreError> {
        self.base.flushed(mark)
    }

    /// What the base rows read from the store weigh (bytes).
    pub fn held(&self) -> usize {
        self.base.held()
    }

    /// A row this device names now has no base row anywhere: nothing need be read for it.
    pub fn note_absent(&mut self, key: &RowKey) {
        self.base.note_absent(key);
    }

    /// The base row of a key.
    pub fn base(&self, key: &RowKey) -> Option<Row> {
        self.base.get(key)
    }

    /// The visible row of a key (tombstones included).
    pub fn visible(&self, key: &RowKey) -> Option<Cow<'_, Row>> {
        match self.overlay.get(key) {
            Some(r) => Some(Cow::Borrowed(r)),
            None => self.base.get(key).map(Cow::Owned),
        }
    }

    /// A new local op: merged into the visible row.
    pub fn add_pending(&mut self, op: &Op) {
        let key = op.place();
        self.note(&key.space);
        self.touch(&key);
        let row = match self.overlay.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let start = self.base.get(e.key()).unwrap_or_default();
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
        let mut base = Row::default();
        self.base.update(&key, |row| {
            merge(row, op);
            base = row.clone();
            true
        });
        if !still_pending {
            self.overlay.remove(&key);
        }
        base
    }

    /// An op was rejected: the base takes the server's row, and the visible row
    /// is rebuilt from the base and the ops that `remain` on the row.
    /// Returns the new base row, if there is one.
    pub fn reject<'a>(&mut self, key: &RowKey, server_row: Option<&Row>, remain: impl IntoIterator<Item = &'a Op>) -> Option<Row> {
        self.touch(key);
        let mut base = self.base.get(key);
        if let Some(server) = server_row {
            self.note(&key.space);
            let row = base.get_or_insert_with(Row::default);
            merge_row(row, server);
            self.base.put(key.clone(), row.clone());
        }
        self.rebuild(key, remain);
        base
    }

    /// Rebuilds the overlay of a key from its base and `ops`.
    pub fn rebuild<'a>(&mut self, key: &RowKey, ops: impl IntoIterator<Item = &'a Op>) {
        self.touch(key);
        let mut row: Option<Row> = None;
        for op in ops {
            let r = row.get_or_insert_with(|| self.base.get(key).unwrap_or_default());
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
        let mut out = None;
        // The row as it was is kept only if it moves (nothing new is no
        // change for indexes or live queries), and is read from the row
        // being merged: no second lookup.
        let keep = self.tracking && self.keeps(&key.table);
        let mut was: Option<Option<Row>> = match self.overlay.get(key) {
            Some(v) if keep => Some(Some(v.clone())),
            _ => None,
        };
        let moved = self.base.update(key, |base| {
            if keep && was.is_none() {
                was = Some((!base.is_gone()).then(|| base.clone()));
            }
            let moved = merge_row(base, row);
            if moved {
                out = Some(base.clone());
            }
            moved
        });
        if moved && self.tracking {
            self.touched.push((key.clone(), was.flatten()));
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
        if !row.is_gone() {
            self.note(&key.space);
        }
        self.base.put(key.clone(), row.clone());
    }

    /// Notes a change to come to a key's visible row (so call it before
    /// the change), with the row as it was if its table [keeps what it
    /// was](Replica::keep_was): of a key's touches since
    /// [`Replica::take_touched`], the first one's counts.
    fn touch(&mut self, key: &RowKey) {
        if self.tracking {
            let was = if self.keeps(&key.table) { self.visible(key).map(Cow::into_owned) } else { None };
            self.touched.push((key.clone(), was));
        }
    }

    /// Whether a touched row of `table` keeps what it was.
    fn keeps(&self, table: &str) -> bool {
        self.keep_was.contains(table)
    }

    /// The tables whose touched rows keep what they were (those with an
    /// index): the rest are only named, at no cost of a read.
    pub fn keep_was(&mut self, tables: Names) {
        self.keep_was = tables;
    }

    fn note(&mut self, space: &str) {
        if !space.is_empty() {
            self.spaces.insert(space);
        }
    }

    /// Removes every base row of `space` (the user left it); returns their
    /// keys. Rows with pending ops stay visible until those are answered.
    pub fn drop_space(&mut self, space: &str) -> Vec<RowKey> {
        let gone: Vec<RowKey> = self.base.keys().filter(|k| k.2 == space).map(packed::owned).collect();
        for k in &gone {
            self.touch(k);
            self.base.remove(k);
        }
        if !self.overlay.keys().any(|k| k.space == space) {
            self.spaces.remove(space);
        }
        gone
    }

    /// The keys whose visible row may have changed since the last call,
    /// in key order, each with its visible row as it was before: what
    /// indexes and live queries look at.
    pub fn take_touched(&mut self) -> BTreeMap<RowKey, Option<Row>> {
        self.tracking = true;
        let mut out = BTreeMap::new();
        // Of a key's touches, the first (what the row was before them all) stays.
        for (key, was) in std::mem::take(&mut self.touched) {
            out.entry(key).or_insert(was);
        }
        out
    }

    /// The shared spaces this replica may hold a row of (base or pending):
    /// every one it holds a row of, and perhaps some whose rows all went.
    pub fn spaces(&self) -> &Names {
        &self.spaces
    }

    /// Every visible row named `table/row_id`, in any space (the personal
    /// space's first, then by space name), tombstones included.
    pub fn named(&self, table: &str, row_id: &str) -> Vec<(RowKey, Cow<'_, Row>)> {
        let start = RowKey::new(table, row_id);
        let mut out: BTreeMap<RowKey, Cow<'_, Row>> = BTreeMap::new();
        out.extend(
            self.base
                .range_from(&start)
                .take_while(|(k, _)| k.table == table && k.row_id == row_id)
                .filter_map(|(k, found)| Some((k, Cow::Owned(found.row()?)))),
        );
        out.extend(
            self.overlay
                .range(start..)
                .take_while(|(k, _)| k.table == table && k.row_id == row_id)
                .map(|(k, r)| (k.clone(), Cow::Borrowed(r))),
        );
        out.into_iter().collect()
    }

    /// The visible rows of `table` in rowId order, tombstones included: read
    /// (and decoded) as they are walked — an index fill over a large table
    /// holds no list of them.
    pub fn table<'a>(&'a self, table: &str) -> impl Iterator<Item = (Cow<'a, RowKey>, Cow<'a, Row>)> + 'a {
        let table = table.to_owned();
        self.table_raw(&table).filter_map(move |((r, s), found)| {
            let row = match found {
                Found::Packed(bytes) => Cow::Owned(crate::chunks::decode_cells(bytes).ok()?),
                Found::Fresh(row) => Cow::Borrowed(row),
            };
            Some((Cow::Owned(RowKey::in_space(s, table.as_str(), r)), row))
        })
    }

    /// [`Replica::table`] with borrowed keys (rowId, space) and packed
    /// rows left packed: what filling an index walks.
    pub fn table_raw<'a>(&'a self, table: &str) -> impl Iterator<Item = ((&'a str, &'a str), Found<'a>)> + 'a {
        let start = RowKey::new(table, "");
        let t = start.table.clone();
        let over =
            self.overlay.range(start..).take_while(move |(k, _)| k.table == t).map(|(k, r)| ((k.row_id.as_str(), k.space.as_str()), r));
        layered(self.base.table_raw(table), over, |(b, _), (o, _)| b.cmp(o)).map(|layer| match layer {
            Layer::Under(item) => item,
            Layer::Over((k, r)) => (k, Found::Fresh(r)),
        })
    }

    /// Every visible row (for checks and exports).
    pub fn all_visible(&self) -> BTreeMap<RowKey, Row> {
        let mut out: BTreeMap<RowKey, Row> =
            self.base.range_from(&RowKey::new("", "")).filter_map(|(k, found)| Some((k, found.row()?))).collect();
        for (k, r) in &self.overlay {
            out.insert(k.clone(), r.clone());
        }
        out
    }
}

/// The base rows a snapshot holds, decoded, in key order: its chunks, then
/// its `base` rows over them (a row with no cell removing).
pub fn base_rows(snapshot: &Snapshot) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let packed = Packed::open(snapshot.base_chunks.clone(), snapshot.base.iter().cloned())?;
    Ok(packed.range_from(&RowKey::new("", "")).filter_map(|(k, found)| Some((k, found.row()?))).collect())
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

    /// A row of `n`: `a = n`, marked at `n`.
    fn row_of(n: u64) -> Row {
        let mut r = Row::default();
        r.cells.insert("a".into(), Cell { value: Value::Number(n as f64), mark: Mark { at: n, op_id: OpId::new(format!("s:{n}")) } });
        r
    }

    fn read(rows: &[(&str, u64)]) -> Provided {
        let rows: Vec<(RowKey, Row)> = rows.iter().map(|(id, n)| (key(id), row_of(*n))).collect();
        Provided {
            from: RowKey::new("", ""),
            to: None,
            rows: crate::store::ProvidedRows::Chunk(crate::chunks::encode_snapshot(&rows).unwrap()),
        }
    }

    /// A read newer than what a lazy replica held (another context wrote,
    /// and its step is not taken in yet) is a change like any other: each
    /// row it moves, adds or takes away is touched, with what it was, so
    /// an index takes the old entry out; a row with queued ops has the newer
    /// base joined under them.
    #[test]
    fn a_read_newer_than_what_was_held_touches_every_row_it_moves() {
        let mut r = Replica::open_lazy(vec![read(&[("a", 1), ("b", 2), ("c", 3)])], [], &[]).unwrap();
        r.keep_was(["sets"].into());
        r.add_pending(&op("d:1", "c", 10, &[("b", 7.0)]));
        // From the first look on, touches are kept.
        r.take_touched();
        r.provide(read(&[("a", 1), ("b", 5), ("c", 4), ("d", 6)])).unwrap();
        let touched = r.take_touched();
        let got: Vec<(&str, Option<f64>)> = touched
            .iter()
            .map(|(k, was)| {
                (
                    k.row_id.as_str(),
                    was.as_ref().and_then(|w| match w.get("a") {
                        Some(Value::Number(n)) => Some(*n),
                        _ => None,
                    }),
                )
            })
            .collect();
        assert_eq!(got, [("b", Some(2.0)), ("c", Some(3.0)), ("d", None)]);
        assert_eq!(r.visible(&key("b")).unwrap().get("a"), Some(&Value::Number(5.0)));
        let c = r.visible(&key("c")).unwrap();
        assert_eq!((c.get("a"), c.get("b")), (Some(&Value::Number(4.0)), Some(&Value::Number(7.0))), "the newer base, under the queued op");
        r.provide(read(&[("a", 1), ("c", 4), ("d", 6)])).unwrap();
        assert_eq!(r.take_touched().keys().map(|k| k.row_id.as_str()).collect::<Vec<_>>(), ["b"], "a row gone from the store");
        assert!(r.visible(&key("b")).is_none());
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
        assert_eq!(r.visible(&key("x")).as_deref(), Some(&base));
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
        let ids: Vec<String> = r.table("sets").map(|(k, _)| k.row_id.clone()).collect();
        assert_eq!(ids, vec!["a", "b", "c"]);
        assert_eq!(r.table("sets").nth(1).and_then(|(_, r)| r.get("a").cloned()), Some(Value::Number(1.0)));
    }
}
