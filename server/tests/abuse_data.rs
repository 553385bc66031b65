//! Issue 10, data side (see abuse.rs for the connection side): one user can never hurt another, and no input makes
//! the server build something huge. Every assertion is on bytes and sizes,
//! never on timing. On SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use marksync::schema::Schema;
use serde_json::{json, Value};

/// A table of 15 free-length string fields: a row of 15 × 4096 bytes is just
/// under the 64 KiB row bound, a 16th field passes it.
fn notes_schema() -> Schema {
    let fields: serde_json::Map<String, Value> =
        (0..16).map(|i| (format!("n{i}"), json!({"type": "string"}))).collect();
    Schema::from_json(&json!({"version": 1, "tables": {"notes": {"fields": fields}}}).to_string()).unwrap()
}

async fn notes_server(b: Backend) -> Option<TestServer> {
    let database = fresh_database(b).await?;
    let mut c = config(&database);
    c.schema_value = Some(notes_schema());
    c.rate_limit = 0.0;
    Some(TestServer::start(c).await.owning_database())
}

fn note(op_id: &str, row_id: &str, at: u64, fields: Value) -> Value {
    json!({"opId": op_id, "table": "notes", "rowId": row_id, "at": at, "fields": fields})
}

/// A row of 15 fields of 4096 bytes each (~62 KB encoded).
fn big(op_id: &str, row_id: &str) -> Value {
    let fields: serde_json::Map<String, Value> = (0..15).map(|i| (format!("n{i}"), json!("x".repeat(4096)))).collect();
    note(op_id, row_id, 10, Value::Object(fields))
}

/// This process's peak resident memory (`VmHWM`, Linux), server included:
/// printed after the heaviest abuse tests, to watch — never asserted (tests
/// share the process).
fn print_peak_memory(after: &str) {
    if let Some(line) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
    {
        eprintln!("peak memory after {after}: {}", line.trim_start_matches("VmHWM:").trim());
    }
}

/// Pushes as `user`; returns the status, the answer and its size in bytes.
async fn push_sized(t: &TestServer, user: &str, batch: &[Value]) -> (u16, Value, usize) {
    let raw = json!({"attemptKey": "d:a1", "batch": batch}).to_string();
    let r = t
        .http
        .post(t.url("/v1/push"))
        .header("authorization", format!("Bearer dev:{user}"))
        .body(raw)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), text.len())
}

/// A tombstone used to take unknown fields of any size; now it is checked
/// like any row, only sparing the required fields.
async fn a_tombstone_takes_nothing_but_known_fields(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let junk = op("d:1", "d-1", 10, json!({"_deleted": true, "junk": "x".repeat(4096)}));
    let v = t.push_ok("u", &[junk]).await;
    assert_eq!((v[0]["status"].as_str(), v[0]["code"].as_str()), (Some("rejected"), Some("unknown_field")), "{v:?}");
    let out_of_range = op("d:2", "d-2", 10, json!({"_deleted": true, "reps": 5000}));
    assert_eq!(t.push_ok("u", &[out_of_range]).await[0]["code"], "out_of_range");
    assert_eq!(t.counts("u").await.rows, 0, "nothing written");
    let plain = op("d:3", "d-3", 10, json!({"_deleted": true}));
    assert_eq!(statuses(&t.push_ok("u", &[plain]).await), ["applied"], "a tombstone needs nothing but _deleted");
    t.stop().await;
}
both!(a_tombstone_takes_nothing_but_known_fields);

/// A row can never grow past 64 KiB (`row_too_large`, nothing written); 1000
/// small rejected ops on a big row carry that row once, so the answer stays
/// small; a big row's owner cannot make another user's answers bigger.
async fn a_big_row_stays_bounded_and_its_answers_small(b: Backend) {
    let Some(t) = notes_server(b).await else { return };
    let (_, victim_before, victim_bytes_before) =
        push_sized(&t, "victim", &[note("v:1", "v-1", 10, json!({"n0": "hi"}))]).await;
    assert_eq!(statuses(victim_before["verdicts"].as_array().unwrap()), ["applied"]);

    assert_eq!(statuses(&t.push_ok("evil", &[big("e:0", "e-1")]).await), ["applied"]);
    let grow = note("e:1", "e-1", 11, json!({"n15": "x".repeat(4096)}));
    let v = t.push_ok("evil", &[grow]).await;
    assert_eq!(v[0]["code"], "row_too_large", "{v:?}");
    let reason = v[0]["reason"].as_str().unwrap();
    assert!(reason.ends_with("bytes, more than the limit of 65536 bytes"), "{reason}");
    let head = t.counts("evil").await.head;

    // 1000 ops of a few bytes, each rejected (wrong type), on the big row.
    let batch: Vec<Value> = (0..1000).map(|i| note(&format!("e:{}", i + 2), "e-1", 20 + i, json!({"n0": i}))).collect();
    let (status, answer, bytes) = push_sized(&t, "evil", &batch).await;
    assert_eq!(status, 200);
    let verdicts = answer["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1000);
    assert_eq!(verdicts.iter().filter(|v| v["row"].is_object()).count(), 1, "the row once, in the last rejection");
    assert!(verdicts[999]["row"].is_object() && verdicts[0]["row"].is_null());
    assert!(bytes < 200_000, "the answer is {bytes} bytes");
    assert_eq!(t.counts("evil").await.head, head, "nothing written");
    // The same asked through /v1/verdicts.
    let ids: Vec<String> = (0..1000).map(|i| format!("e:{}", i + 2)).collect();
    let (status, recalled) = t.verdicts_raw("evil", json!({"opIds": ids}).to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(recalled["verdicts"].as_array().unwrap().iter().filter(|v| v["row"].is_object()).count(), 1);

    // The victim's answers are the size they were.
    let (_, _, victim_bytes_after) = push_sized(&t, "victim", &[note("v:2", "v-1", 11, json!({"n0": "ho"}))]).await;
    assert_eq!(victim_bytes_after, victim_bytes_before);
    let victim_pull = t.pull_all("victim").await;
    assert_eq!(victim_pull.len(), 1);
    print_peak_memory("1000 small ops on a big row");
    t.stop().await;
}
both!(a_big_row_stays_bounded_and_its_answers_small);

/// Pull pages are bounded by bytes as well as by count: 30 rows of ~62 KB
/// come in pages of at most 1 MiB of rows, each page at least one change.
async fn pull_pages_are_bounded_by_bytes(b: Backend) {
    let Some(t) = notes_server(b).await else { return };
    for chunk in 0..3 {
        let batch: Vec<Value> = (0..10).map(|i| big(&format!("e:{chunk}-{i}"), &format!("e-{chunk}-{i}"))).collect();
        assert_eq!(t.push_ok("evil", &batch).await.len(), 10);
    }
    let (mut cursor, mut seen, mut pages) = (0u64, 0, 0);
    loop {
        let r = t
            .http
            .get(t.url(&format!("/v1/pull?cursor={cursor}&limit=1000")))
            .header("authorization", "Bearer dev:evil")
            .send()
            .await
            .unwrap();
        let text = r.text().await.unwrap();
        assert!(text.len() < (1 << 20) + 20_000, "a page of {} bytes", text.len());
        let page: Value = serde_json::from_str(&text).unwrap();
        let n = page["changes"].as_array().unwrap().len();
        assert!(n >= 1);
        seen += n;
        pages += 1;
        cursor = page["cursor"].as_u64().unwrap();
        if !page["hasMore"].as_bool().unwrap() {
            break;
        }
    }
    assert_eq!(seen, 30);
    assert!(pages >= 2, "{pages} pages");
    print_peak_memory("pulling 30 big rows");
    t.stop().await;
}
both!(pull_pages_are_bounded_by_bytes);

/// A key twice in `fields` is a 400 naming it, never "the last one wins".
async fn a_key_twice_in_fields_is_a_400(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let raw = r#"{"attemptKey": "d:a1", "batch": [{"opId": "d:1", "table": "sets", "rowId": "d-1", "at": 10,
        "fields": {"exercise": "squat", "weightKg": 80, "reps": 5, "reps": 500}}]}"#;
    let (status, resp) = t.push_raw("u", raw).await;
    assert_eq!((status, resp["error"]["code"].as_str()), (400, Some("bad_request")), "{resp}");
    assert!(resp["error"]["message"].as_str().unwrap().contains("fields.reps: the key appears twice"), "{resp}");
    assert_eq!(t.counts("u").await.verdicts, 0);
    t.stop().await;
}
both!(a_key_twice_in_fields_is_a_400);

/// A key twice anywhere in any body is a 400 naming its path, and nothing
/// happens: a pull naming one space twice (it was read, the last one
/// winning), a membership change, a verdicts request. Failed before every
/// body went through the one checked decoding.
async fn a_key_twice_anywhere_in_a_body_is_a_400_naming_its_path(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let bodies = [
        ("/v1/pull", r#"{"spaces": {"~u": {"cursor": 5}, "~u": {"cursor": 0}}}"#, r#"spaces["~u"]"#),
        ("/v1/pull", r#"{"spaces": {}, "limit": 5, "limit": 6}"#, "limit"),
        ("/v1/spaces", r#"{"space": "a", "space": "b"}"#, "space"),
        ("/v1/spaces/members", r#"{"space": "a", "user": "v", "user": "w", "role": "viewer"}"#, "user"),
        ("/v1/verdicts", r#"{"opIds": ["d:1"], "opIds": ["d:2"]}"#, "opIds"),
        (
            "/v1/push",
            r#"{"attemptKey": "d:a1", "batch": [{"opId": "d:1", "opId": "d:2", "table": "sets", "rowId": "d-1", "at": 1, "fields": {"reps": 1}}]}"#,
            "batch[0].opId",
        ),
    ];
    for (path, body, named) in bodies {
        let (status, resp) = t.post_raw(path, "u", body).await;
        assert_eq!((status, resp["error"]["code"].as_str()), (400, Some("bad_request")), "{path}: {resp}");
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("{named}: the key appears twice")), "{path}: {message}");
    }
    let spaces: serde_json::Value =
        t.http.get(t.url("/v1/spaces")).bearer_auth("dev:u").send().await.unwrap().json().await.unwrap();
    assert_eq!(spaces["spaces"].as_array().unwrap().len(), 1, "no space was made");
    assert_eq!(t.counts("u").await.verdicts, 0);
    t.stop().await;
}
both!(a_key_twice_anywhere_in_a_body_is_a_400_naming_its_path);

/// A 500 KB input is never echoed: error messages are capped at 200 characters.
async fn a_huge_input_is_not_echoed_in_the_error(b: Backend) {
    let Some(t) = TestServer::new(b).await else { return };
    let key = "k".repeat(500_000);
    let bad_key = json!({"attemptKey": "d:a1", "batch": [op("d:1", "d-1", 10, json!({key.clone(): 1}))]}).to_string();
    let bad_op_id = json!({"attemptKey": "d:a1", "batch": [full(&key, "d-1", 10, 5)]}).to_string();
    let bad_ask = json!({"opIds": [key]}).to_string();
    for (what, (status, resp)) in [
        ("key", t.push_raw("u", bad_key).await),
        ("opId", t.push_raw("u", bad_op_id).await),
        ("ask", t.verdicts_raw("u", bad_ask).await),
    ] {
        assert_eq!(status, 400, "{what}");
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(message.chars().count() <= 201, "{what}: a message of {} characters", message.len());
    }
    t.stop().await;
}
both!(a_huge_input_is_not_echoed_in_the_error);
