//! The schema's tests: the rules of one version, each step kind of the
//! history, the upgrade property and `check_edit` = the judge's words.

use super::*;
use crate::protocol::{Cell, Mark, OpId};

fn row(fields: &[(&str, Value)]) -> Row {
    let mark = Mark { at: 1, op_id: OpId::new("d:1") };
    Row { cells: fields.iter().map(|(k, v)| (k.to_string(), Cell { value: v.clone(), mark: mark.clone() })).collect(), notes: None }
}

fn full() -> Vec<(&'static str, Value)> {
    vec![("exercise", "squat".into()), ("weightKg", 82.5.into()), ("reps", 5i64.into())]
}

#[test]
fn workout_schema_parses() {
    let s = Schema::workout();
    assert_eq!(s.version, 1);
    assert_eq!(s.tables.get("sets").unwrap().fields.len(), 3);
}

#[test]
fn a_full_row_passes() {
    Schema::workout().check_row("sets", &row(&full())).unwrap();
}

#[test]
fn every_code_and_reason() {
    let s = Schema::workout();
    let check = |fields: Vec<(&str, Value)>| s.check_row("sets", &row(&fields)).unwrap_err();
    let e = check(vec![("reps", 5i64.into())]);
    assert_eq!((e.code, e.reason.as_str()), (RefusalCode::MissingFields, "missing fields: exercise, weightKg"));
    let mut f = full();
    f[2].1 = 101i64.into();
    let e = check(f);
    assert_eq!((e.code, e.reason.as_str()), (RefusalCode::OutOfRange, "reps must be at most 100"));
    let mut f = full();
    f[2].1 = 5.5.into();
    assert_eq!(check(f).code, RefusalCode::WrongType);
    let mut f = full();
    f[1].1 = "heavy".into();
    assert_eq!(check(f).reason, "weightKg must be a number");
    let mut f = full();
    f[0].1 = "x".repeat(101).into();
    assert_eq!(check(f).code, RefusalCode::TooLong);
    let mut f = full();
    f.push(("mood", "ok".into()));
    assert_eq!(check(f).reason, "unknown field: mood");
    let e = s.check_row("runs", &row(&full())).unwrap_err();
    assert_eq!(e.code, RefusalCode::UnknownTable);
    let mut f = full();
    f[1].1 = Value::Null;
    assert_eq!(check(f).code, RefusalCode::MissingFields);
}

/// The rules and the cells are walked together: an unknown field is found
/// before, between and after the known ones, and wins over every later check.
#[test]
fn the_first_unknown_field_is_named_wherever_it_sorts_and_comes_first() {
    let s = Schema::workout();
    let check = |fields: Vec<(&str, Value)>| s.check_row("sets", &row(&fields)).unwrap_err();
    for name in ["aaa", "f", "zzz", "Zed"] {
        let mut f = full();
        f.push((name, 1i64.into()));
        let e = check(f);
        assert_eq!((e.code, e.reason), (RefusalCode::UnknownField, format!("unknown field: {name}")));
        let e = check(vec![("reps", 500i64.into()), (name, 1i64.into())]);
        assert_eq!(e.code, RefusalCode::UnknownField, "before missing fields and a value out of range");
    }
    let e = check(vec![("a", 1i64.into()), ("zz", 1i64.into()), ("exercise", "squat".into())]);
    assert_eq!(e.reason, "unknown field: a", "the first, by name");
    let mut f = full();
    f.push((CREATED_BY, "u".into()));
    s.check_row("sets", &row(&f)).unwrap();
    let e = check(vec![("weightKg", "heavy".into()), ("reps", 500i64.into())]);
    assert_eq!(e.code, RefusalCode::MissingFields, "missing fields before a wrong value");
    let mut f = full();
    f[1].1 = "heavy".into();
    f[2].1 = 500i64.into();
    assert_eq!(check(f).reason, "reps must be at most 100", "values refused in field-name order, reps before weightKg");
}

#[test]
fn tombstones_need_no_required_field_but_are_checked_otherwise() {
    let s = Schema::workout();
    s.check_row("sets", &row(&[(DELETED, true.into())])).unwrap();
    assert!(s.check_row("sets", &row(&[(DELETED, false.into())])).is_err());
    let e = s.check_row("sets", &row(&[(DELETED, true.into()), ("junk", "x".repeat(4096).into())])).unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (RefusalCode::UnknownField, "unknown field: junk"));
    let e = s.check_row("sets", &row(&[(DELETED, true.into()), ("reps", 500i64.into())])).unwrap_err();
    assert_eq!(e.code, RefusalCode::OutOfRange);
    s.check_row("sets", &row(&[(DELETED, true.into()), ("reps", 5i64.into())])).unwrap();
}

// ---- History: the worked example, each step kind, files that do not compose.

use crate::judge::{decide, Decision, Limits};
use crate::protocol::Fields;

fn fields(pairs: &[(&str, Value)]) -> Fields {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn op_at(version: u32, at: u64, table: &str, pairs: &[(&str, Value)]) -> Op {
    Op {
        op_id: OpId::new("d:9"),
        table: table.into(),
        row_id: "d-1".into(),
        fields: fields(pairs),
        at,
        schema: version,
        space: None,
        seen: None,
    }
}

fn judged(s: &Schema, op: &Op, current: Option<&Row>) -> Result<(), (String, String)> {
    match decide(s, op, current, &Limits::default()) {
        Decision::Apply { .. } => Ok(()),
        Decision::Reject { code, reason } => Err((code, reason)),
    }
}

fn err(code: &str, reason: &str) -> Result<(), (String, String)> {
    Err((code.to_owned(), reason.to_owned()))
}

#[test]
fn the_worked_example_parses_and_round_trips() {
    let v2 = Schema::workout_v2();
    assert_eq!(v2.version, 2);
    let names: Vec<&str> = v2.tables.get("sets").unwrap().fields.keys().map(String::as_str).collect();
    assert_eq!(names, ["exercise", "reps", "rpe", "weight"]);
    assert_eq!(
        v2.tables.get("sets").unwrap().fields.get("weight").unwrap(),
        Schema::workout().tables.get("sets").unwrap().fields.get("weightKg").unwrap()
    );
    let v3 = Schema::workout_v3();
    assert_eq!(v3.version, 3);
    let names: Vec<&str> = v3.tables.get("sets").unwrap().fields.keys().map(String::as_str).collect();
    assert_eq!(names, ["exercise", "reps", "unit", "weight"]);
    assert_eq!(v3.tables.get("sets").unwrap().fields.get("reps").unwrap().max, Some(200.0));
    assert!(v3.tables.contains_key("notes"));
    for s in [Schema::workout(), v2, v3] {
        let back = Schema::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s, "the file form round-trips, with its tables checked against the history");
        assert_eq!(back.fingerprint(), s.fingerprint());
    }
    assert_ne!(Schema::workout_v2().fingerprint(), Schema::workout_v3().fingerprint());
    assert_eq!(Schema::workout().fingerprint().len(), 16);
}

#[test]
fn a_file_without_history_reads_as_before_and_reads_every_version_alike() {
    let s = Schema::from_json(r#"{"version": 3, "tables": {"notes": {"fields": {"text": {"type": "string"}}}}}"#).unwrap();
    assert!(s.history.is_empty());
    let note = |v| op_at(v, 5, "notes", &[("text", "hi".into())]);
    assert_eq!(judged(&s, &note(1), None), Ok(()));
    assert_eq!(s.upgrade_op(&note(1)).fields, note(1).fields);
    assert_eq!(s.to_json(), r#"{"version":3,"tables":{"notes":{"fields":{"text":{"type":"string"}}}}}"#);
}

#[test]
fn add_field_optional_old_ops_pass_and_new_ops_are_checked() {
    let v2 = Schema::workout_v2();
    let v1_full = [("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", 5i64.into())];
    assert_eq!(judged(&v2, &op_at(1, 5, "sets", &v1_full), None), Ok(()), "a v1 op lacks rpe: it is optional");
    let with =
        |rpe: Value| op_at(2, 5, "sets", &[("exercise", "squat".into()), ("weight", 80.0.into()), ("reps", 5i64.into()), ("rpe", rpe)]);
    assert_eq!(judged(&v2, &with(8i64.into()), None), Ok(()));
    assert_eq!(judged(&v2, &with(11i64.into()), None), err("out_of_range", "rpe must be at most 10"));
    assert_eq!(judged(&v2, &with(7.5.into()), None), err("wrong_type", "rpe must be an integer"));
    assert_eq!(judged(&v2, &with(Value::Null), None), Ok(()), "null: an optional field cleared");
}

#[test]
fn add_field_with_a_default_reads_rows_and_ops_that_lack_it_with_the_default() {
    let v3 = Schema::workout_v3();
    let v1_full = [("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", 5i64.into())];
    assert_eq!(judged(&v3, &op_at(1, 5, "sets", &v1_full), None), Ok(()), "unit is required, and read as \"kg\"");
    let stored = row(&v1_full);
    let view = v3.view("sets", &stored);
    assert_eq!(view.get("unit"), Some(&Value::from("kg")));
    assert_eq!(view.get("weight"), Some(&Value::from(80.0)));
    assert!(!view.contains_key("weightKg"));
    assert!(v3.upgrade_row("sets", &stored).get("unit").is_none(), "a default is never stored or marked");
    let set_unit = |u: Value| op_at(3, 5, "sets", &[("unit", u)]);
    assert_eq!(judged(&v3, &set_unit("lb".into()), Some(&stored)), Ok(()));
    assert_eq!(judged(&v3, &set_unit(Value::Null), Some(&stored)), err("missing_fields", "missing field: unit"));
    assert_eq!(judged(&v3, &set_unit("pounds".into()), Some(&stored)), err("too_long", "unit must be at most 3 characters"));
}

#[test]
fn rename_field_carries_values_and_their_marks_and_speaks_the_new_name() {
    let v2 = Schema::workout_v2();
    let old = op_at(1, 5, "sets", &[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", 5i64.into())]);
    let up = v2.upgrade_op(&old);
    assert_eq!(up.schema, 2);
    assert_eq!(up.fields, fields(&[("exercise", "squat".into()), ("weight", 80.0.into()), ("reps", 5i64.into())]));
    let stored = row(&[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", 5i64.into())]);
    let read = v2.upgrade_row("sets", &stored);
    assert_eq!(read.cells.get("weight"), stored.cells.get("weightKg"), "value and mark follow the rename");
    assert!(read.get("weightKg").is_none());
    let heavy = op_at(1, 5, "sets", &[("weightKg", 2000.0.into())]);
    assert_eq!(judged(&v2, &heavy, Some(&stored)), err("out_of_range", "weight must be at most 1000"));
    let e = v2.check_edit_at(1, "sets", Some(&stored), &heavy.fields).unwrap_err();
    assert_eq!((e.reason.as_str(), e.field.as_deref()), ("weight must be at most 1000", Some("weight")));
    // A v2 op on a row stored under v1 beats the renamed cell by its mark.
    let Decision::Apply { row, moved: true } =
        decide(&v2, &op_at(2, 5, "sets", &[("weight", 90.0.into())]), Some(&stored), &Limits::default())
    else {
        panic!()
    };
    assert_eq!((row.get("weight"), row.get("weightKg")), (Some(&Value::from(90.0)), None));
    // …and loses to it when older, as any merge.
    let Decision::Apply { moved: false, .. } =
        decide(&v2, &op_at(2, 0, "sets", &[("weight", 90.0.into())]), Some(&stored), &Limits::default())
    else {
        panic!()
    };
}

#[test]
fn an_op_that_sets_one_field_under_two_names_keeps_the_name_its_version_used() {
    let v2 = Schema::workout_v2();
    let both = |v| op_at(v, 5, "sets", &[("weightKg", 1.0.into()), ("weight", 2.0.into())]);
    assert_eq!(v2.upgrade_op(&both(1)).fields, fields(&[("weight", 1.0.into())]), "v1 spelled it weightKg");
    assert_eq!(v2.upgrade_op(&both(2)).fields, fields(&[("weight", 2.0.into())]), "v2 spells it weight");
}

#[test]
fn change_limit_judges_ops_of_every_version_by_the_new_limit() {
    let v3 = Schema::workout_v3();
    let reps = |n: i64| op_at(1, 5, "sets", &[("exercise", "squat".into()), ("weightKg", 80.0.into()), ("reps", n.into())]);
    assert_eq!(judged(&Schema::workout(), &reps(150), None), err("out_of_range", "reps must be at most 100"));
    assert_eq!(judged(&v3, &reps(150), None), Ok(()));
    assert_eq!(judged(&v3, &reps(201), None), err("out_of_range", "reps must be at most 200"));
}

#[test]
fn retire_field_is_ignored_in_old_ops_and_in_stored_rows() {
    let v3 = Schema::workout_v3();
    let stored = row(&[("exercise", "squat".into()), ("weight", 80.0.into()), ("reps", 5i64.into()), ("rpe", 50i64.into())]);
    assert!(v3.upgrade_row("sets", &stored).get("rpe").is_none());
    v3.check_row("sets", &stored).unwrap();
    let old = op_at(2, 5, "sets", &[("rpe", 50i64.into()), ("reps", 6i64.into())]);
    assert_eq!(v3.upgrade_op(&old).fields, fields(&[("reps", 6i64.into())]));
    let Decision::Apply { row, moved: true } = decide(&v3, &old, Some(&stored), &Limits::default()) else { panic!() };
    assert!(row.get("rpe").is_none(), "the row is written without it");
    let only = op_at(2, 5, "sets", &[("rpe", 5i64.into())]);
    let Decision::Apply { moved: false, .. } = decide(&v3, &only, Some(&stored), &Limits::default()) else { panic!() };
}

#[test]
fn a_schema_that_names_a_table_or_a_field_twice_is_refused() {
    let table =
        r#"{"version": 1, "tables": {"notes": {"fields": {"text": {"type": "string"}}}, "notes": {"fields": {"n": {"type": "number"}}}}}"#;
    let e = Schema::from_json(table).unwrap_err().to_string();
    assert!(e.contains("tables.notes: the key appears twice"), "{e}");
    let field = r#"{"version": 1, "tables": {"notes": {"fields": {"text": {"type": "string"}, "text": {"type": "number"}}}}}"#;
    let e = Schema::from_json(field).unwrap_err().to_string();
    assert!(e.contains("fields.text: the key appears twice"), "{e}");
    let step = r#"{"version": 2, "history": [{"version": 1, "tables": {"sets": {"fields": {"a": {"type": "string"}}}}},
        {"version": 2, "steps": [{"addTable": {"table": "notes", "fields": {"b": {"type": "string"}, "b": {"type": "number"}}}}]}]}"#;
    let e = Schema::from_json(step).unwrap_err().to_string();
    assert!(e.contains("fields.b: the key appears twice"), "{e}");
    let once = r#"{"version": 1, "tables": {"notes": {"fields": {"text": {"type": "string"}, "n": {"type": "number"}}}}}"#;
    assert_eq!(Schema::from_json(once).unwrap().tables.get("notes").unwrap().fields.len(), 2);
}

#[test]
fn add_table_opens_the_table_to_ops_of_every_version() {
    let v3 = Schema::workout_v3();
    assert_eq!(judged(&v3, &op_at(1, 5, "notes", &[("text", "felt strong".into())]), None), Ok(()));
    assert_eq!(
        judged(&Schema::workout_v2(), &op_at(1, 5, "notes", &[("text", "x".into())]), None),
        err("unknown_table", "unknown table: notes")
    );
}

#[test]
fn an_edit_newer_than_the_schema_is_schema_too_new() {
    let e = Schema::workout().check_edit_at(2, "sets", None, &fields(&[("reps", 5i64.into())])).unwrap_err();
    assert_eq!((e.code.as_str(), e.reason.as_str()), ("schema_too_new", "op schema 2 is newer than the server's schema 1"));
}

/// A v1 base of the workout, and `steps` as version 2.
fn with_steps(steps: &str) -> Result<Schema, SchemaError> {
    Schema::from_json(&format!(
        r#"{{"version": 2, "history": [
            {{"version": 1, "tables": {{"sets": {{"fields": {{
                "exercise": {{"type": "string", "required": true, "maxLength": 100}},
                "weightKg": {{"type": "number", "required": true, "min": 0, "max": 1000}},
                "reps": {{"type": "integer", "required": true, "min": 1, "max": 100}}}}}}}}}},
            {{"version": 2, "steps": [{steps}]}}]}}"#
    ))
}

#[test]
fn steps_that_do_not_compose_are_refused_with_the_step_named() {
    let cases = [
        (r#"{"renameField": {"table": "sets", "from": "weightKilo", "to": "weight"}}"#,
         "version 2, step 1 (renameField): table sets has no field weightKilo"),
        (r#"{"addField": {"table": "sets", "field": "rpe", "rule": {"type": "integer", "default": "high"}}}"#,
         r#"version 2, step 1 (addField): sets.rpe: the default "high" breaks the rule: rpe must be an integer"#),
        (r#"{"addField": {"table": "sets", "field": "rpe", "rule": {"type": "integer", "min": 1, "max": 10, "default": 0}}}"#,
         "version 2, step 1 (addField): sets.rpe: the default 0 breaks the rule: rpe must be at least 1"),
        (r#"{"addField": {"table": "sets", "field": "rpe", "rule": {"type": "integer", "required": true}}}"#,
         "version 2, step 1 (addField): sets.rpe is required but has no default: rows and ops written before version 2 lack it"),
        (r#"{"addField": {"table": "sets", "field": "reps", "rule": {"type": "integer"}}}"#,
         "version 2, step 1 (addField): table sets already has a field reps"),
        (r#"{"addField": {"table": "runs", "field": "km", "rule": {"type": "number"}}}"#,
         "version 2, step 1 (addField): there is no table runs"),
        (r#"{"retireField": {"table": "sets", "field": "reps"}}, {"addField": {"table": "sets", "field": "reps", "rule": {"type": "string"}}}"#,
         "version 2, step 2 (addField): sets.reps was retired in version 2: a name is never used twice (stored rows and old apps still spell it)"),
        (r#"{"renameField": {"table": "sets", "from": "weightKg", "to": "weight"}}, {"renameField": {"table": "sets", "from": "weight", "to": "weightKg"}}"#,
         "version 2, step 2 (renameField): sets.weightKg was renamed away in version 2: a name is never used twice (stored rows and old apps still spell it)"),
        (r#"{"renameField": {"table": "sets", "from": "weightKg", "to": "reps"}}"#,
         "version 2, step 1 (renameField): table sets already has a field reps"),
        (r#"{"changeLimit": {"table": "sets", "field": "weightKg", "maxLength": 5}}"#,
         "version 2, step 1 (changeLimit): sets.weightKg: maxLength applies to strings only"),
        (r#"{"changeLimit": {"table": "sets", "field": "reps", "min": 500}}"#,
         "version 2, step 1 (changeLimit): sets.reps: min 500 is above max 100"),
        (r#"{"changeLimit": {"table": "sets", "field": "reps"}}"#,
         "version 2, step 1 (changeLimit): names no limit to change (min, max or maxLength)"),
        (r#"{"addField": {"table": "sets", "field": "rpe", "rule": {"type": "integer", "min": 0.5, "max": 0.7}}}"#,
         "version 2, step 1 (addField): sets.rpe: no integer lies between min 0.5 and max 0.7"),
        (r#"{"retireField": {"table": "sets", "field": "rpe"}}"#,
         "version 2, step 1 (retireField): table sets has no field rpe"),
        (r#"{"addTable": {"table": "sets", "fields": {"a": {"type": "string"}}}}"#,
         "version 2, step 1 (addTable): there already is a table sets"),
        (r#"{"addTable": {"table": "Runs", "fields": {"a": {"type": "string"}}}}"#,
         "version 2, step 1 (addTable): table name must match [a-z][a-z0-9_]{0,63}"),
        (r#"{"addField": {"table": "sets", "field": "_rpe", "rule": {"type": "integer"}}}"#,
         "version 2, step 1 (addField): a field name must match [A-Za-z][A-Za-z0-9_]{0,63} (names starting with _ are the protocol's: only _deleted)"),
    ];
    for (steps, want) in cases {
        let e = with_steps(steps).unwrap_err();
        assert_eq!(e.to_string(), want, "{steps}");
        assert!(matches!(e, SchemaError::Step { version: 2, .. }), "{e:?}");
    }
    let e = with_steps(r#"{"dropTable": {"table": "sets"}}"#).unwrap_err();
    assert!(matches!(e, SchemaError::Json(_)) && e.to_string().contains("unknown variant `dropTable`"), "{e}");
    // A limit changed back to none, and a null that is not absence.
    let s = with_steps(r#"{"changeLimit": {"table": "sets", "field": "reps", "max": null}}"#).unwrap();
    assert_eq!(s.tables.get("sets").unwrap().fields.get("reps").unwrap().max, None);
}

#[test]
fn a_history_that_does_not_add_up_is_refused_with_the_place_named() {
    let base = r#"{"version": 1, "tables": {"t": {"fields": {"a": {"type": "string"}}}}}"#;
    let step = r#"{"version": 2, "steps": [{"addField": {"table": "t", "field": "b", "rule": {"type": "string"}}}]}"#;
    let cases = [
        (format!(r#"{{"version": 3, "history": [{base}, {step}]}}"#), "version: is 3, but the history ends at version 2"),
        (
            format!(r#"{{"version": 3, "history": [{base}, {}]}}"#, step.replace("\"version\": 2", "\"version\": 3")),
            "history[1].version: is 3, but must follow version 1 (versions go up by one)",
        ),
        (
            format!(r#"{{"version": 2, "history": [{base}, {{"version": 2, "steps": []}}]}}"#),
            "history[1]: a release after the base needs at least one step",
        ),
        (format!(r#"{{"version": 1, "history": [{step}]}}"#), "history[0]: the first release is the base: it needs `tables`"),
        (
            format!(r#"{{"version": 2, "history": [{base}, {step}], "tables": {{"t": {{"fields": {{"a": {{"type": "string"}}}}}}}}}}"#),
            "tables: differ from the tables the history makes, at t.b",
        ),
        (
            format!(
                r#"{{"version": 2, "history": [{base}, {step}], "tables": {{"s": {{"fields": {{}}}}, "t": {{"fields": {{"a": {{"type": "string"}}, "b": {{"type": "string"}}}}}}}}}}"#
            ),
            "tables: differ from the tables the history makes, at s",
        ),
        (
            format!(
                r#"{{"version": 2, "history": [{base}, {step}], "tables": {{"t": {{"fields": {{"b": {{"type": "string"}}, "c": {{"type": "string"}}}}}}}}}}"#
            ),
            "tables: differ from the tables the history makes, at t.a",
        ),
        (r#"{"version": 1}"#.to_owned(), "tables: missing: a schema needs `tables` or a `history`"),
        (
            r#"{"version": 1, "tables": {"t": {"fields": {"a": {"type": "boolean", "min": 1}}}}}"#.to_owned(),
            "tables.t.a: min and max apply to numbers and integers only",
        ),
        (r#"{"version": 0, "tables": {}}"#.to_owned(), "version: must be at least 1 (ops carry schema 1 when they name none)"),
    ];
    for (file, want) in cases {
        assert_eq!(Schema::from_json(&file).unwrap_err().to_string(), want, "{file}");
    }
    let ok = format!(
        r#"{{"version": 2, "history": [{base}, {step}], "tables": {{"t": {{"fields": {{"a": {{"type": "string"}}, "b": {{"type": "string"}}}}}}}}}}"#
    );
    assert_eq!(Schema::from_json(&ok).unwrap().tables.get("t").unwrap().fields.len(), 2, "tables that match the history are fine");
}

#[test]
fn refusals_name_their_field() {
    let s = Schema::workout();
    let e = s.check_edit("sets", None, &fields(&[("reps", 5i64.into())])).unwrap_err();
    assert_eq!((e.reason.as_str(), e.field.as_deref()), ("missing fields: exercise, weightKg", Some("exercise")));
    let e = s.check_edit("sets", None, &fields(&[("mood", "ok".into())])).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("mood"));
    assert_eq!(s.check_edit("runs", None, &fields(&[("a", 1i64.into())])).unwrap_err().field, None);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json, serde_json::json!({"code": "unknown_field", "reason": "unknown field: mood", "field": "mood"}));
}

#[test]
fn check_edit_never_lets_through_a_row_the_server_refuses_for_its_size() {
    let s = Schema::from_json(
        &serde_json::json!({"version": 1, "tables": {"notes": {"fields":
        (0..17).map(|i| (format!("n{i}"), serde_json::json!({"type": "string"}))).collect::<serde_json::Map<_, _>>()}}})
        .to_string(),
    )
    .unwrap();
    let big: Fields = (0..16).map(|i| (format!("n{i}"), Value::from("x".repeat(4090)))).collect();
    let e = s.check_edit("notes", None, &big).unwrap_err();
    assert_eq!(e.code, RefusalCode::RowTooLarge);
    let op = Op {
        op_id: OpId::new("d:1"),
        table: "notes".into(),
        row_id: "n-1".into(),
        fields: big,
        at: 10,
        schema: 1,
        space: None,
        seen: None,
    };
    let Decision::Reject { code, reason } = decide(&s, &op, None, &Limits::default()) else { panic!() };
    assert_eq!(
        s.check_op(&op, None).map_err(|r| (r.code.as_str().to_owned(), r.reason)),
        Err((code, reason)),
        "check_op: the judge's words exactly"
    );
}

// ---- Properties: upgrading then judging = judging the same edit under the new version;
// check_edit's words = the judge's words.
#[cfg(not(target_arch = "wasm32"))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The fields of the workout as (v1 name, newest name); `None`: not in that version.
    const LOGICAL: [(Option<&str>, &str); 6] = [
        (Some("exercise"), "exercise"),
        (Some("weightKg"), "weight"),
        (Some("reps"), "reps"),
        (Some("rpe"), "rpe"),
        (None, "unit"),
        (None, "mood"),
    ];

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..300).prop_map(Value::from),
            (-5.0f64..1500.0).prop_map(Value::from),
            "[a-z]{0,4}".prop_map(Value::from),
            (95usize..105).prop_map(|n| Value::from("x".repeat(n))),
        ]
    }

    /// (logical field index, value) pairs, distinct fields.
    fn edit() -> impl Strategy<Value = Vec<(usize, Value)>> {
        proptest::collection::btree_map(0..LOGICAL.len(), value(), 0..=LOGICAL.len()).prop_map(|m| m.into_iter().collect())
    }

    /// The edit as version 1 or 2 spells it (`old`), or as `newest` does:
    /// `rpe` (v2) is retired by v3, so v3 leaves it out.
    fn spell_for(pairs: &[(usize, Value)], old: bool, newest: u32) -> Fields {
        pairs
            .iter()
            .filter_map(|(i, v)| {
                let (v1, name_now) = LOGICAL[*i];
                if !old && newest >= 3 && name_now == "rpe" {
                    return None;
                }
                let name = if old { v1.unwrap_or(name_now) } else { name_now };
                Some((name.to_owned(), v.clone()))
            })
            .collect()
    }

    fn spell(pairs: &[(usize, Value)], old: bool) -> Fields {
        spell_for(pairs, old, 2)
    }

    fn stored(pairs: &[(usize, Value)], ats: &[u64], old: bool, deleted: bool) -> Row {
        let mut row = Row::default();
        for ((k, v), at) in spell_for(pairs, old, 2).into_iter().zip(ats.iter().cycle()) {
            row.cells.insert(k, Cell { value: v, mark: Mark { at: *at, op_id: OpId::new("s:1") } });
        }
        if deleted {
            row.cells.insert(DELETED.into(), Cell { value: true.into(), mark: Mark { at: 1, op_id: OpId::new("s:1") } });
        }
        row
    }

    fn op(fields: Fields, version: u32, at: u64) -> Op {
        Op { op_id: OpId::new("d:1"), table: "sets".into(), row_id: "d-1".into(), fields, at, schema: version, space: None, seen: None }
    }

    fn cases() -> u32 {
        std::env::var("MARKSYNC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// An edit written under version 1, judged by v2 or v3, gets exactly
        /// the decision of the same edit written under the newest version —
        /// whether the stored row is spelled the old way or the new — and
        /// `upgrade_op` spells it as the newest version does.
        #[test]
        fn upgrading_then_judging_is_judging_under_the_new_version(
            e in edit(),
            current in proptest::option::of((edit(), proptest::collection::vec(0u64..20, 1..4), any::<bool>())),
            old_row in any::<bool>(),
            at in 0u64..20,
            newest in prop_oneof![Just(2u32), Just(3u32)],
        ) {
            let s = if newest == 2 { Schema::workout_v2() } else { Schema::workout_v3() };
            let old_op = op(spell(&e, true), 1, at);
            let new_op = op(spell_for(&e, false, newest), newest, at);
            let upgraded = s.upgrade_op(&old_op);
            prop_assert_eq!(&upgraded.fields, &new_op.fields);
            let (row_old, row_new) = match &current {
                Some((c, ats, del)) => (Some(stored(c, ats, old_row, *del)), Some(stored(c, ats, false, *del))),
                None => (None, None),
            };
            let limits = Limits::default();
            let want = decide(&s, &new_op, row_new.as_ref(), &limits);
            prop_assert_eq!(&decide(&s, &old_op, row_old.as_ref(), &limits), &want);
            prop_assert_eq!(&decide(&s, &upgraded, row_old.as_ref(), &limits), &want);
            prop_assert_eq!(&decide(&s, &old_op, row_new.as_ref(), &limits), &want);
        }

        /// `check_edit` (a device, offline) answers exactly what the judge
        /// answers for the same edit, word for word, over valid and invalid
        /// edits of every version, on new rows, live rows and tombstones.
        #[test]
        fn check_edit_says_what_the_judge_says(
            e in edit(),
            current in proptest::option::of((edit(), proptest::collection::vec(0u64..20, 1..4), any::<bool>())),
            old in any::<bool>(),
            which in 1u32..=3,
            version_back in 0u32..=2,
        ) {
            let s = match which { 1 => Schema::workout(), 2 => Schema::workout_v2(), _ => Schema::workout_v3() };
            let version = which.saturating_sub(version_back).max(1);
            let fields = spell(&e, old);
            prop_assume!(!fields.is_empty());
            let row = current.as_ref().map(|(c, ats, del)| stored(c, ats, old, *del));
            // The device's next edit is stamped above every mark it has seen.
            let o = op(fields.clone(), version, 1_000);
            let judge = match decide(&s, &o, row.as_ref(), &Limits::default()) {
                Decision::Apply { .. } => Ok(()),
                Decision::Reject { code, reason } => Err((code, reason)),
            };
            let words = |r: Result<(), Refusal>| r.map_err(|r| (r.code.as_str().to_owned(), r.reason));
            prop_assert_eq!(&words(s.check_edit_at(version, "sets", row.as_ref(), &fields)), &judge);
            prop_assert_eq!(&words(s.check_op(&o, row.as_ref())), &judge);
            if version == s.version {
                prop_assert_eq!(&words(s.check_edit("sets", row.as_ref(), &fields)), &judge);
            }
        }
    }
}

#[test]
fn an_app_on_an_older_version_reads_rows_in_its_own_names_and_keeps_fields_it_does_not_know() {
    let v2 = Schema::workout_v2();
    assert_eq!(v2.names_at(1, "sets").get("weight").map(String::as_str), Some("weightKg"));
    assert!(v2.names_at(2, "sets").is_empty());
    // A row as the server sends it (newest names), read by a v1 app.
    let pulled = row(&[("exercise", "squat".into()), ("weight", 82.5.into()), ("reps", 5i64.into()), ("rpe", 8i64.into())]);
    let seen = v2.row_at(1, "sets", &pulled);
    assert_eq!(seen.get("weightKg"), Some(&Value::Number(82.5)));
    assert_eq!(seen.get("weight"), None);
    assert_eq!(seen.get("rpe"), Some(&Value::Number(8.0)), "a field the app does not know passes through");
    // The v2 app reads it as it is.
    assert!(matches!(v2.row_at(2, "sets", &pulled), Cow::Borrowed(_)));
    // An old name queued on the device and a newer name pulled: the newer mark wins, under the app's name.
    let mut both = pulled.clone();
    both.cells.insert("weightKg".into(), Cell { value: 90.0.into(), mark: Mark { at: 2, op_id: OpId::new("d:2") } });
    assert_eq!(v2.row_at(1, "sets", &both).get("weightKg"), Some(&Value::Number(90.0)));
}

#[test]
fn a_schema_with_no_tables_or_a_table_with_no_fields_reads_back_as_written() {
    // litemap's own writer spells an empty map `[]`, which the schema's reader refuses.
    for raw in [
        r#"{"version":1,"tables":{}}"#,
        r#"{"version":1,"tables":{"t":{"fields":{}}}}"#,
        r#"{"version":2,"history":[{"version":1,"tables":{}},{"version":2,"steps":[{"addTable":{"table":"t","fields":{"n":{"type":"number"}}}}]}]}"#,
    ] {
        let schema = Schema::from_json(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
        let written = serde_json::to_string(&schema).unwrap();
        assert!(!written.contains("[]"), "{written}");
        assert_eq!(Schema::from_json(&written).unwrap(), schema, "{written}");
    }
}

/// A schema file saved with a byte-order mark (as some editors write JSON)
/// was refused as "expected value at line 1 column 1".
#[test]
fn a_byte_order_mark_before_the_file_is_not_its_text() {
    let text = format!("\u{feff}{}", Schema::workout().to_json());
    assert_eq!(Schema::from_json(&text).unwrap(), Schema::workout());
}
