//! Every query, served by any index, equals the reference: filter and sort
//! over every visible row.

use std::borrow::Cow;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::protocol::{Cell, Mark};

struct Rows(BTreeMap<RowKey, Row>);

impl Source for Rows {
    fn get(&self, key: &RowKey) -> Option<Cow<'_, Row>> {
        self.0.get(key).map(Cow::Borrowed)
    }
    fn scan(&self, table: &str, f: &mut dyn FnMut(&RowKey, &Row)) {
        for (k, r) in self.0.iter().filter(|(k, _)| k.table == table) {
            f(k, r);
        }
    }
}

fn row(fields: &[(&str, Value)]) -> Row {
    let mut r = Row::default();
    for (k, v) in fields {
        r.cells.insert((*k).to_owned(), Cell { value: v.clone(), mark: Mark { at: 1, op_id: "d:1".into() } });
    }
    r
}

/// The answer by definition.
fn reference(rows: &Rows, table: &str, q: &Query) -> Vec<RowKey> {
    let mut hits: Vec<(Vec<Value>, RowKey)> = rows
        .0
        .iter()
        .filter(|(k, r)| k.table == table && q.matches(k, r))
        .map(|(k, r)| (q.order_values(r), k.clone()))
        .filter(|(v, k)| q.is_after(v, k))
        .collect();
    hits.sort_by(|a, b| q.cmp((&a.0, &a.1), (&b.0, &b.1)));
    hits.truncate(q.limit.unwrap_or(usize::MAX));
    hits.into_iter().map(|(_, k)| k).collect()
}

fn keys(v: Vec<(RowKey, Row)>) -> Vec<RowKey> {
    v.into_iter().map(|(k, _)| k).collect()
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i32..4).prop_map(|n| Value::Number(f64::from(n) / 2.0)),
        prop::sample::select(vec!["", "a", "ab", "abc", "b", "B", "\u{FF61}", "\u{1F600}"]).prop_map(|s| Value::String(s.into())),
    ]
}

fn pred() -> impl Strategy<Value = Pred> {
    prop_oneof![
        value().prop_map(Pred::Eq),
        prop::collection::vec(value(), 0..3).prop_map(Pred::In),
        value().prop_map(Pred::Gt),
        value().prop_map(Pred::Gte),
        value().prop_map(Pred::Lt),
        value().prop_map(Pred::Lte),
        prop::sample::select(vec!["", "a", "ab", "\u{1F600}"]).prop_map(|s| Pred::Prefix(s.into())),
    ]
}

const FIELDS: [&str; 3] = ["a", "b", "c"];

fn query() -> impl Strategy<Value = Query> {
    let filters = prop::collection::vec((prop::sample::select(FIELDS.to_vec()), prop::collection::vec(pred(), 1..3)), 0..3);
    let order = prop::collection::vec((prop::sample::select(FIELDS.to_vec()), any::<bool>()), 0..3);
    let space = prop::option::of(prop::sample::select(vec!["", "team"]));
    (filters, order, prop::option::of(1usize..6), space).prop_map(|(filters, order, limit, space)| {
        let mut q = Query {
            filters: filters.into_iter().map(|(f, preds)| Filter { field: f.into(), preds }).collect(),
            order: Vec::new(),
            limit,
            after: None,
            space: space.map(str::to_owned),
        };
        for (f, desc) in order {
            if !q.order.iter().any(|o| o.field == f) {
                q.order.push(Order { field: f.into(), dir: if desc { Dir::Desc } else { Dir::Asc } });
            }
        }
        q
    })
}

/// Rows to build: id, in a shared space, deleted, fields (by index into `FIELDS`).
type Spec = Vec<(String, bool, bool, Vec<(usize, Value)>)>;

fn rows() -> impl Strategy<Value = Spec> {
    let id = prop::sample::select(vec!["r1", "r2", "r3", "R", "x", "\u{FF61}", "\u{1F600}"]).prop_map(str::to_owned);
    prop::collection::vec((id, any::<bool>(), prop::bool::weighted(0.1), prop::collection::vec((0usize..3, value()), 0..3)), 0..24)
}

fn indexes() -> impl Strategy<Value = Vec<Vec<&'static str>>> {
    prop::collection::vec(prop::sample::subsequence(FIELDS.to_vec(), 1..=3).prop_shuffle(), 0..3)
}

/// The rows of `spec` and indexes `ix` over them: kept row by row as rows
/// change (`put`), or `filled` at once from every row (as an engine opens).
fn build_by(spec: Spec, ix: &[Vec<&str>], filled: bool) -> (Rows, Indexes) {
    let mut map = BTreeMap::new();
    for (id, shared, deleted, fields) in spec {
        let key = RowKey::in_space(if shared { "team" } else { "" }, "t", id);
        let mut fs: Vec<(&str, Value)> = fields.into_iter().map(|(i, v)| (FIELDS[i], v)).collect();
        if deleted {
            fs.push((crate::protocol::DELETED, Value::Bool(true)));
        }
        map.insert(key, row(&fs));
    }
    map.insert(RowKey::new("other", "r1"), row(&[("a", Value::Null)]));
    let mut indexes = Indexes::new(ix.iter().map(|f| IndexDef { table: "t".into(), fields: f.iter().map(|s| (*s).to_owned()).collect() }));
    if filled {
        for table in ["t", "other"] {
            indexes.fill(table, map.iter().filter(|(k, _)| k.table == table));
        }
    } else {
        for (k, r) in &map {
            indexes.put(k, None, Some(r));
        }
    }
    (Rows(map), indexes)
}

fn build(spec: Spec, ix: &[Vec<&str>]) -> (Rows, Indexes) {
    build_by(spec, ix, false)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_query_and_every_page_walk_equal_the_reference(spec in rows(), ix in indexes(), filled in any::<bool>(), q in query()) {
        let (rows, indexes) = build_by(spec, &ix, filled);
        let got = keys(run(&rows, &indexes, "t", &q));
        prop_assert_eq!(&got, &reference(&rows, "t", &q), "{}", explain(&indexes, "t", &q).plan);
        prop_assert_eq!(count(&rows, &indexes, "t", &q), reference(&rows, "t", &Query { limit: None, ..q.clone() }).len());
        // Walk the pages with `after`: together they are the whole answer.
        let whole = reference(&rows, "t", &Query { limit: None, ..q.clone() });
        let mut walked = Vec::new();
        let mut page = q.clone();
        page.limit = Some(q.limit.unwrap_or(2));
        for _ in 0..whole.len() + 1 {
            let got = run(&rows, &indexes, "t", &page);
            let Some((k, r)) = got.last().cloned() else { break };
            walked.extend(keys(got));
            page.after = Some(After { key: k, values: page.order_values(&r) });
        }
        prop_assert_eq!(walked, whole);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Filling an index from rows still encoded (only their indexed values
    /// read) gives the entries the decoded rows give.
    #[test]
    fn an_index_filled_from_packed_rows_equals_one_filled_from_decoded_rows(spec in rows(), ix in indexes(), packed in prop::collection::vec(any::<bool>(), 24)) {
        let (rows, decoded) = build_by(spec, &ix, true);
        let encoded: Vec<(RowKey, Option<Vec<u8>>)> = rows
            .0
            .iter()
            .enumerate()
            .map(|(n, (k, r))| (k.clone(), packed.get(n).copied().unwrap_or(true).then(|| crate::chunks::encode_one(k, r, Vec::new()).unwrap())))
            .collect();
        let mut raw = Indexes::new(ix.iter().map(|f| IndexDef { table: "t".into(), fields: f.iter().map(|s| (*s).to_owned()).collect() }));
        raw.fill_raw(
            "t",
            encoded.iter().zip(rows.0.values()).filter(|((k, _), _)| k.table == "t").map(|((k, bytes), r)| {
                let row = match bytes {
                    Some(b) => crate::replica::Found::Packed(b),
                    None => crate::replica::Found::Fresh(r),
                };
                ((k.row_id.as_str(), k.space.as_str()), row)
            }),
        );
        for (a, b) in decoded.of("t").iter().zip(raw.of("t")) {
            let all = |i: &index::Index| i.entries.range(&[], &[0xFF; 4], false).map(<[u8]>::to_vec).collect::<Vec<_>>();
            prop_assert_eq!(all(a), all(b));
        }
    }
}

#[test]
fn a_missing_field_reads_as_null_and_a_range_keeps_to_its_kind() {
    let (rows, indexes) = build(
        vec![
            ("n".into(), false, false, vec![(0, Value::Number(5.0))]),
            ("s".into(), false, false, vec![(0, Value::String("5".into()))]),
            ("m".into(), false, false, vec![]),
        ],
        &[vec!["a"]],
    );
    let q = |preds| Query { filters: vec![Filter { field: "a".into(), preds }], ..Query::default() };
    let ids = |q: Query| keys(run(&rows, &indexes, "t", &q)).into_iter().map(|k| k.row_id).collect::<Vec<_>>();
    assert_eq!(ids(q(vec![Pred::Eq(Value::Null)])), ["m"]);
    assert_eq!(ids(q(vec![Pred::Lt(Value::Number(10.0))])), ["n"]);
    assert_eq!(ids(q(vec![Pred::Gte(Value::String(String::new()))])), ["s"]);
    assert_eq!(ids(q(vec![Pred::Gt(Value::Bool(false))])), Vec::<String>::new());
}

#[test]
fn desc_keeps_the_tie_break_ascending_and_an_ordered_index_reads_only_the_page() {
    let spec = (0..50).map(|i| (format!("r{i:02}"), false, false, vec![(0, Value::Number(f64::from(i / 10)))])).collect();
    let (rows, indexes) = build(spec, &[vec!["a"]]);
    let q = Query { order: vec![Order { field: "a".into(), dir: Dir::Desc }], limit: Some(3), ..Query::default() };
    let got: Vec<String> = keys(run(&rows, &indexes, "t", &q)).into_iter().map(|k| k.row_id).collect();
    assert_eq!(got, ["r40", "r41", "r42"]);
    let e = explain(&indexes, "t", &q);
    assert!(e.ordered && e.index.as_deref() == Some(&["a".to_owned()][..]), "{e:?}");
}

#[test]
fn a_bad_query_is_refused() {
    assert!(Query { limit: Some(0), ..Query::default() }.check().is_err());
    let twice = vec![Order { field: "a".into(), dir: Dir::Asc }, Order { field: "a".into(), dir: Dir::Desc }];
    assert!(Query { order: twice, ..Query::default() }.check().is_err());
    assert!(Query { filters: vec![Filter { field: "a".into(), preds: vec![] }], ..Query::default() }.check().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A live query's answer worked out from its last answer and the rows
    /// that changed, when it can be, equals the answer read again.
    #[test]
    fn an_answer_updated_from_the_changed_rows_equals_the_answer_read_again(
        spec in rows(),
        q in query(),
        edits in prop::collection::vec((0usize..30, prop::bool::weighted(0.2), prop::collection::vec((0usize..3, value()), 0..3)), 1..4),
    ) {
        let (mut rows, _) = build(spec, &[]);
        let none = Indexes::new(std::iter::empty());
        let last = run(&rows, &none, "t", &q);
        let ids = ["r1", "r2", "r3", "R", "x", "\u{FF61}", "\u{1F600}", "new"];
        let mut changed: Vec<(RowKey, Option<Row>)> = Vec::new();
        for (n, gone, fields) in edits {
            let key = RowKey::in_space(if n >= 15 { "team" } else { "" }, "t", ids[n % ids.len()]);
            let now = (!gone).then(|| row(&fields.iter().map(|(i, v)| (FIELDS[*i], v.clone())).collect::<Vec<_>>()));
            match &now {
                Some(r) => rows.0.insert(key.clone(), r.clone()),
                None => rows.0.remove(&key),
            };
            changed.retain(|(k, _)| *k != key);
            changed.push((key, now));
        }
        if let Some(got) = update(&q, &last, &changed) {
            prop_assert_eq!(keys(got), reference(&rows, "t", &q));
        }
        if !moves(&q, &last, &changed) {
            prop_assert_eq!(keys(last.clone()), reference(&rows, "t", &q), "changes that do not move the answer");
        }
        match moved(&q, &last, &changed) {
            Moved::Not => prop_assert_eq!(keys(last), reference(&rows, "t", &q)),
            Moved::To(got) => prop_assert_eq!(keys(got), reference(&rows, "t", &q)),
            // Nothing to hold it to: a read answers then.
            Moved::Unknown => {}
        }
    }
}

#[test]
fn an_answer_is_updated_without_a_read_only_when_it_can_be() {
    let q = Query { order: vec![Order { field: "a".into(), dir: Dir::Desc }], limit: Some(2), ..Query::default() };
    let at = |id: &str, a: f64| (RowKey::new("t", id), row(&[("a", Value::Number(a))]));
    let last = vec![at("r3", 3.0), at("r2", 2.0)];
    let newest = at("r9", 9.0);
    let got = update(&q, &last, &[(newest.0.clone(), Some(newest.1.clone()))]).expect("a new first row joins a full page");
    assert_eq!(keys(got), [RowKey::new("t", "r9"), RowKey::new("t", "r3")]);
    let oldest = at("r0", 0.0);
    let got = update(&q, &last, &[(oldest.0.clone(), Some(oldest.1))]).expect("a row past a full page's end");
    assert_eq!(keys(got), keys(last.clone()), "does not join it");
    assert_eq!(update(&q, &last, &[(RowKey::new("t", "r3"), None)]), None, "a full page that lost a row is read again");
    let shorter = Query { limit: Some(5), ..q };
    let got = update(&shorter, &last, &[(RowKey::new("t", "r3"), None)]).expect("a page not full held every row");
    assert_eq!(keys(got), [RowKey::new("t", "r2")]);
}

/// A row met twice across reads with awaits between them (another
/// context's step moved its entry, or gave it queued ops) is answered once,
/// as it was met last — and not at all if it no longer matches.
#[test]
fn a_row_met_twice_across_reads_is_answered_once_as_met_last() {
    let q = Query {
        filters: vec![Filter { field: "tag".into(), preds: vec![Pred::Eq(Value::from("x"))] }],
        order: vec![Order { field: "n".into(), dir: Dir::Asc }],
        ..Query::default()
    };
    let (a, b) = (RowKey::new("notes", "a"), RowKey::new("notes", "b"));
    let x = |n: i64| row(&[("tag", Value::from("x")), ("n", Value::from(n))]);
    let mut hits = Hits::across_reads(&q, true);
    assert!(hits.take(&q, &a, &x(1)));
    assert!(hits.take(&q, &b, &x(2)));
    // `a`'s entry moved past the place read: met again, in its new place.
    assert!(hits.take(&q, &a, &x(3)));
    assert_eq!(hits.clone().keys(&q), [b.clone(), a.clone()]);
    // `b` got a queued edit that takes it out of the query.
    hits.take_any(&q, &b, &row(&[("tag", Value::from("y")), ("n", Value::from(2))]));
    assert_eq!(hits.keys(&q), [a]);
}
