//! PROTOCOL §3b over real HTTP, on SQLite and on PostgreSQL: the schema
//! travels to devices (`GET /v1/schema`, `schemaVersion` in pulls), old ops
//! and stored rows are read through the history, replays keep their words
//! across a schema change, and a history that does not compose stops the start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use clap::Parser;
use common::*;
use marksync::schema::Schema;
use serde_json::{json, Value};

/// An op on `sets` written under schema `version`.
fn op_v(version: u32, op_id: &str, row_id: &str, at: u64, fields: Value) -> Value {
    json!({"opId": op_id, "table": "sets", "rowId": row_id, "at": at, "fields": fields, "schema": version})
}

/// A full set as version 1 spells it.
fn set_v1(op_id: &str, row_id: &str, at: u64, weight: f64, reps: i64) -> Value {
    op_v(1, op_id, row_id, at, json!({"exercise": "squat", "weightKg": weight, "reps": reps}))
}

/// GET /v1/schema as `user` (dev token), with an optional `If-None-Match`.
async fn get_schema(t: &TestServer, user: Option<&str>, if_none_match: Option<&str>) -> reqwest::Response {
    let mut r = t.http.get(t.url("/v1/schema"));
    if let Some(u) = user {
        r = r.header("authorization", format!("Bearer dev:{u}"));
    }
    if let Some(tag) = if_none_match {
        r = r.header("if-none-match", tag);
    }
    r.send().await.unwrap()
}

async fn start_with(database: &str, schema: Schema) -> TestServer {
    let mut c = config(database);
    c.schema_value = Some(schema);
    TestServer::start(c).await
}

/// `GET /v1/schema` sends the schema file with an `ETag`; `If-None-Match`
/// with it is a `304`; auth as pull; every pull page carries the version.
async fn the_schema_travels_with_an_etag_and_pulls_carry_its_version(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    assert_eq!(get_schema(&t, None, None).await.status(), 401, "auth as pull");
    let r = get_schema(&t, Some("u"), None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v1_tag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert!(v1_tag.starts_with("\"1-") && v1_tag.ends_with('"'), "{v1_tag}");
    assert_eq!(Schema::from_json(&r.text().await.unwrap()).unwrap(), Schema::workout());
    let r = get_schema(&t, Some("u"), Some(&v1_tag)).await;
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), v1_tag);
    assert!(r.text().await.unwrap().is_empty());
    assert_eq!(get_schema(&t, Some("u"), Some("\"1-0000000000000000\"")).await.status(), 200);
    let (status, page) = t.pull_raw("u", "cursor=0").await;
    assert_eq!((status, &page["schemaVersion"]), (200, &json!(1)));
    assert_eq!(page["schemaTag"], json!(v1_tag), "a pull names the tag the schema is fetched under");
    let spaces = pull(&t, "u", json!({})).await;
    assert_eq!((&spaces["schemaVersion"], &spaces["schemaTag"]), (&json!(1), &json!(v1_tag)));
    t.stop().await;

    let t = start_with(&database, Schema::workout_v3()).await;
    let r = get_schema(&t, Some("u"), Some(&v1_tag)).await;
    assert_eq!(r.status(), 200, "a new schema, a new tag");
    assert!(r.headers()["etag"].to_str().unwrap().starts_with("\"3-"));
    assert_eq!(Schema::from_json(&r.text().await.unwrap()).unwrap(), Schema::workout_v3());
    assert_eq!(t.pull_raw("u", "cursor=0").await.1["schemaVersion"], 3);
    t.stop().await;
    drop_database(&database).await;
}
both!(the_schema_travels_with_an_etag_and_pulls_carry_its_version);

/// An app still on version 1 syncs with a server on version 3: its ops are
/// upgraded (renamed field, relaxed limit, default for the new required
/// field); rows stored under version 1 are read through the history with no
/// migration, and leave in version 3's names with their marks; the server's
/// words name the newest field; an op newer than the server is still a 409.
async fn an_old_op_under_a_new_schema_is_upgraded_and_old_rows_are_read_without_migration(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    assert_eq!(statuses(&t.push_ok("u", &[set_v1("d:1", "d-1", 10, 80.0, 5)]).await), ["applied"]);
    t.stop().await;

    let t = start_with(&database, Schema::workout_v3()).await;
    let rows = t.pull_all("u").await;
    assert_eq!(rows[0]["fields"], json!({"exercise": "squat", "weight": 80, "reps": 5}), "read, never migrated");
    assert_eq!(
        (&rows[0]["marks"]["weight"]["at"], &rows[0]["marks"]["weight"]["opId"]),
        (&json!(10), &json!("d:1")),
        "the mark follows the rename"
    );
    let before = t.counts("u").await;

    // reps 150 passes the limit of version 3; unit is read as its default.
    let v = t.push_ok("u", &[set_v1("e:1", "e-1", 20, 70.0, 150)]).await;
    assert_eq!(statuses(&v), ["applied"]);
    let e1 = t.pull_all("u").await.into_iter().find(|c| c["rowId"] == "e-1").unwrap();
    assert_eq!(e1["fields"], json!({"exercise": "squat", "weight": 70, "reps": 150}));
    assert_eq!((&e1["marks"]["weight"]["at"], &e1["marks"]["weight"]["opId"]), (&json!(20), &json!("e:1")));

    // The server's words name the newest field, and carry the row in its names.
    let v = t.push_ok("u", &[op_v(1, "e:2", "d-1", 30, json!({"weightKg": 2000}))]).await;
    assert_eq!(
        (v[0]["code"].as_str(), v[0]["reason"].as_str()),
        (Some("out_of_range"), Some("weight must be at most 1000"))
    );
    assert_eq!(v[0]["row"]["fields"]["weight"], 80);
    assert!(v[0]["row"]["fields"].get("weightKg").is_none());

    // A retired field in a version-2 op is ignored: nothing moves, no seq.
    let head = t.counts("u").await.head;
    assert_eq!(statuses(&t.push_ok("u", &[op_v(2, "f:1", "d-1", 40, json!({"rpe": 50}))]).await), ["applied"]);
    assert_eq!(t.counts("u").await.head, head);

    // A version-3 op on the row stored under version 1 beats the renamed cell.
    assert_eq!(
        statuses(&t.push_ok("u", &[op_v(3, "g:1", "d-1", 50, json!({"weight": 90, "unit": "lb"}))]).await),
        ["applied"]
    );
    let d1 = t.pull_all("u").await.into_iter().find(|c| c["rowId"] == "d-1").unwrap();
    assert_eq!(d1["fields"], json!({"exercise": "squat", "weight": 90, "reps": 5, "unit": "lb"}));
    assert_eq!(t.counts("u").await.rows, before.rows + 1, "one new row (e-1), d-1 rewritten in place");

    let (status, body) = t.push("u", &[op_v(4, "h:1", "d-1", 60, json!({"reps": 6}))]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("schema_too_new")),
        "an app newer than its server waits"
    );
    t.stop().await;
    drop_database(&database).await;
}
both!(an_old_op_under_a_new_schema_is_upgraded_and_old_rows_are_read_without_migration);

/// A replay of an opId across a schema change gets its remembered verdict,
/// word for word (even where the new version would now say otherwise), and
/// writes nothing; `POST /v1/verdicts` recalls the same words with the row
/// in the new names.
async fn a_replay_across_a_schema_change_keeps_its_remembered_verdict(b: Backend) {
    let Some(database) = fresh_database(b).await else { return };
    let t = TestServer::start(config(&database)).await;
    let batch = [
        set_v1("d:1", "d-1", 10, 80.0, 5),
        op_v(1, "d:2", "d-1", 11, json!({"weightKg": 2000})),
        set_v1("d:3", "d-3", 12, 80.0, 150),
    ];
    let first = t.push_ok("u", &batch).await;
    assert_eq!(statuses(&first), ["applied", "rejected", "rejected"]);
    assert_eq!(first[1]["reason"], "weightKg must be at most 1000");
    assert_eq!(first[2]["reason"], "reps must be at most 100");
    t.stop().await;

    let t = start_with(&database, Schema::workout_v3()).await;
    let before = t.counts("u").await;
    let again = t.push_ok("u", &batch).await;
    assert_eq!(statuses(&again), ["duplicate", "rejected", "rejected"]);
    for i in [1, 2] {
        assert_eq!(
            (&again[i]["reason"], &again[i]["code"]),
            (&first[i]["reason"], &first[i]["code"]),
            "remembered, not judged again"
        );
    }
    assert_eq!(
        again[1]["row"]["fields"],
        json!({"exercise": "squat", "weight": 80, "reps": 5}),
        "the current row, in the new names"
    );
    assert_eq!(t.counts("u").await, before, "no verdict, row or seq written");
    let recalled = t.verdicts_ok("u", &["d:1", "d:2", "d:3"]).await;
    assert_eq!(recalled[0]["status"], "applied");
    assert_eq!(recalled[1]["reason"], "weightKg must be at most 1000");
    assert_eq!(recalled[1]["row"]["fields"]["weight"], 80);
    assert_eq!(recalled[2]["reason"], "reps must be at most 100");
    t.stop().await;
    drop_database(&database).await;
}
both!(a_replay_across_a_schema_change_keeps_its_remembered_verdict);

/// `--schema FILE` whose steps do not compose stops the start, and the error
/// names the version, the step and what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_file_whose_steps_do_not_compose_stops_the_start() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let dir = std::env::temp_dir().join(unique("marksync-schema"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("schema.json");
    let mut bad: Value = serde_json::from_str(&Schema::workout_v2().to_json()).unwrap();
    bad["history"][1]["steps"][1]["renameField"]["from"] = json!("weightKilo");
    bad.as_object_mut().unwrap().remove("tables");
    std::fs::write(&file, bad.to_string()).unwrap();
    let mut c = config(&database);
    c.schema = Some(file.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = marksync_server::start(c, listener).await.unwrap_err().to_string();
    assert!(err.starts_with("schema file "), "{err}");
    assert!(err.ends_with(": version 2, step 2 (renameField): table sets has no field weightKilo"), "{err}");

    bad["history"][1]["steps"][1]["renameField"]["from"] = json!("weightKg");
    bad["history"][1]["steps"][0]["addField"]["rule"]["default"] = json!("high");
    std::fs::write(&file, bad.to_string()).unwrap();
    let c = marksync_server::Config::try_parse_from(["marksync-server", "--schema", file.to_str().unwrap()]).unwrap();
    let err = marksync_server::load_schema(&c).unwrap_err().to_string();
    assert!(
        err.ends_with(
            r#": version 2, step 1 (addField): sets.rpe: the default "high" breaks the rule: rpe must be an integer"#
        ),
        "{err}"
    );

    bad["history"][1]["steps"][0]["addField"]["rule"]["default"] = json!(7);
    std::fs::write(&file, bad.to_string()).unwrap();
    let mut c = config(&database);
    c.schema = Some(file);
    let t = TestServer::start(c).await;
    let r = get_schema(&t, Some("u"), None).await;
    assert!(r.headers()["etag"].to_str().unwrap().starts_with("\"2-"));
    t.stop().await;
    drop_database(&database).await;
    let _ = std::fs::remove_dir_all(dir);
}
