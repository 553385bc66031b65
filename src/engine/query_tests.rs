//! Queries through the engine: the schema's indexes in the app's names, and
//! rows as the app sees them.

use super::*;
use crate::protocol::{Fields, Value};
use crate::query::{Dir, Filter, Order, Pred, Query};

fn engine(schema: u32) -> Engine {
    let snap = Snapshot { meta: Some(Meta::fresh("d".into())), ..Snapshot::default() };
    Engine::open(snap, Config { id_block: 64, schema, ..Config::default() }).unwrap()
}

fn record(e: &mut Engine, row: &str, f: &[(&str, Value)]) {
    let fields: Fields = f.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let d = e.draft("sets", row, fields).unwrap();
    let meta = e.meta().clone();
    let (_txn, rec) = e.plan_record(d, &meta, 1_000).unwrap();
    e.recorded(rec);
}

/// The worked example of PROTOCOL §3b with an index on its base table.
fn indexed_v2() -> String {
    include_str!("../schema/workout-v2.json").replacen(
        "\"reps\": { \"type\": \"integer\", \"required\": true, \"min\": 1, \"max\": 100 }\n          }",
        "\"reps\": { \"type\": \"integer\", \"required\": true, \"min\": 1, \"max\": 100 }\n          },\n          \"indexes\": [[\"exercise\", \"weightKg\"]]",
        1,
    )
}

fn heaviest_squats(weight: &str) -> Query {
    Query {
        filters: vec![Filter { field: "exercise".into(), preds: vec![Pred::Eq(Value::from("squat"))] }],
        order: vec![Order { field: weight.into(), dir: Dir::Desc }],
        limit: Some(2),
        ..Query::default()
    }
}

#[test]
fn the_schemas_indexes_travel_renamed_and_serve_each_app_in_its_own_names() {
    let text = indexed_v2();
    assert!(text.contains("indexes"), "the example changed: fix the test's edit of it");
    for (version, weight) in [(1, "weightKg"), (2, "weight")] {
        let mut e = engine(version);
        assert!(e.learn_schema(text.clone(), None).is_some(), "the schema with an index parses");
        for (i, w) in [40.0, 100.0, 60.0, 80.0].into_iter().enumerate() {
            record(&mut e, &format!("r{i}"), &[("exercise", "squat".into()), (weight, w.into()), ("reps", 5.into())]);
        }
        record(&mut e, "b", &[("exercise", "bench".into()), (weight, 500.0.into()), ("reps", 5.into())]);
        let q = heaviest_squats(weight);
        let plan = e.explain("sets", &q);
        assert_eq!(plan.index.as_deref(), Some(&["exercise".to_owned(), weight.to_owned()][..]), "{}", plan.plan);
        assert!(plan.ordered, "{}", plan.plan);
        let ids: Vec<String> = e.query("sets", &q).into_iter().map(|(k, _)| k.row_id).collect();
        assert_eq!(ids, ["r1", "r3"], "schema version {version}");
        assert_eq!(e.count("sets", &Query { filters: q.filters.clone(), ..Query::default() }), 4);
    }
}

#[test]
fn an_index_naming_a_field_the_table_lacks_is_refused_with_the_schema() {
    let bad = indexed_v2().replacen("[[\"exercise\", \"weightKg\"]]", "[[\"exercise\", \"weight_kg\"]]", 1);
    assert!(crate::schema::Schema::from_json(&bad).is_err());
    let twice = indexed_v2().replacen("[[\"exercise\", \"weightKg\"]]", "[[\"reps\", \"reps\"]]", 1);
    assert!(crate::schema::Schema::from_json(&twice).is_err());
}

/// An engine with an index on `weightKg` and two squats, `a` (10) and `b` (20).
fn by_weight() -> Engine {
    let mut e = engine(1);
    e.config.indexes = vec![crate::query::IndexDef { table: "sets".into(), fields: vec!["weightKg".into()] }];
    record(&mut e, "a", &[("exercise", "squat".into()), ("weightKg", 10.0.into())]);
    record(&mut e, "b", &[("exercise", "squat".into()), ("weightKg", 20.0.into())]);
    e
}

fn lightest_first() -> Query {
    Query { order: vec![Order { field: "weightKg".into(), dir: Dir::Asc }], ..Query::default() }
}

#[test]
fn deleted_rows_leave_queries_and_indexes_and_come_back_restored() {
    let mut e = by_weight();
    let ids = |e: &mut Engine| e.query("sets", &lightest_first()).into_iter().map(|(k, _)| k.row_id).collect::<Vec<_>>();
    assert_eq!(ids(&mut e), ["a", "b"]);
    assert!(e.take_changes().all, "the first look sees everything");
    record(&mut e, "a", &[(crate::protocol::DELETED, true.into())]);
    assert_eq!(ids(&mut e), ["b"]);
    record(&mut e, "a", &[(crate::protocol::DELETED, false.into())]);
    assert_eq!(ids(&mut e), ["a", "b"]);
    let changes = e.take_changes();
    assert!(changes.touches("sets") && !changes.touches("notes"));
    assert!(e.take_changes().is_empty(), "changes are told once");
}

#[test]
fn an_edited_row_moves_in_its_index_and_leaves_its_old_place() {
    let mut e = by_weight();
    let ids = |e: &mut Engine| e.query("sets", &lightest_first()).into_iter().map(|(k, _)| k.row_id).collect::<Vec<_>>();
    assert_eq!(ids(&mut e), ["a", "b"]);
    // Edited twice between two reads: the index keeps the row once, where it is now.
    record(&mut e, "a", &[("weightKg", 30.0.into())]);
    record(&mut e, "a", &[("weightKg", 40.0.into())]);
    assert_eq!(ids(&mut e), ["b", "a"]);
    let light = Query { filters: vec![Filter { field: "weightKg".into(), preds: vec![Pred::Lt(Value::from(35.0))] }], ..Query::default() };
    assert_eq!(e.count("sets", &light), 1, "the old places are gone");
    assert_eq!(e.explain("sets", &light).index.as_deref(), Some(&["weightKg".to_owned()][..]));
}

/// A field added with a `default` was never shown on the device (PROTOCOL
/// §3b: "checked and shown as if it held the default"): `row()` lacked it,
/// `where: { unit: 'kg' }` found nothing, `where: { unit: null }` every row —
/// while the server judged those rows as `unit: "kg"`.
#[test]
fn a_default_is_shown_and_found_as_the_server_reads_it() {
    let v3 = include_str!("../schema/workout-v3.json").to_owned();
    for (version, weight) in [(3, "weight"), (1, "weightKg")] {
        let mut e = engine(version);
        e.config.indexes = vec![crate::query::IndexDef { table: "sets".into(), fields: vec!["unit".into()] }];
        assert!(e.learn_schema(v3.clone(), None).is_some());
        record(&mut e, "old", &[("exercise", "squat".into()), (weight, 80.0.into()), ("reps", 5.into())]);
        record(&mut e, "lb", &[("exercise", "squat".into()), (weight, 80.0.into()), ("reps", 5.into()), ("unit", "lb".into())]);
        let unit = |v: Value| Query { filters: vec![Filter { field: "unit".into(), preds: vec![Pred::Eq(v)] }], ..Query::default() };
        let ids = |e: &mut Engine, q: &Query| e.query("sets", q).into_iter().map(|(k, _)| k.row_id).collect::<Vec<_>>();
        assert_eq!(ids(&mut e, &unit("kg".into())), ["old"], "app version {version}");
        assert_eq!(ids(&mut e, &unit(Value::Null)), Vec::<String>::new());
        let shown = e.query("sets", &unit("kg".into())).remove(0).1;
        assert_eq!(shown.get("unit"), Some(&Value::from("kg")));
        assert_eq!(shown.get(weight), Some(&Value::from(80.0)));
    }
}
