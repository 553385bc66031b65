//! The webhook's transactional outbox: what a committed push owes the app's
//! backend, written in the push's own transaction (docs/server.md,
//! "Webhooks"). One delivery per space whose rows the batch moved, carrying
//! that space's changes in commit order; its place in the space's order is
//! the space's head after the batch.

use std::collections::BTreeMap;

use marksync::judge::{Change, Judgement};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::conn::NewDelivery;
use super::error::DbError;

/// A delivery's body, as the receiver reads it.
#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    space: &'a str,
    user: &'a str,
    changes: Vec<&'a Change>,
}

/// The deliveries `sender`'s push owes, made at `now_ms`: one per space whose head moved.
pub(crate) fn deliveries(sender: &str, judgement: &Judgement, now_ms: i64) -> Result<Vec<NewDelivery>, DbError> {
    let mut by_space: BTreeMap<&str, Vec<&Change>> = BTreeMap::new();
    for change in &judgement.changes {
        by_space.entry(&change.space).or_default().push(change);
    }
    let mut out = Vec::with_capacity(by_space.len());
    for (space, head) in &judgement.heads {
        let Some(changes) = by_space.remove(&**space) else { continue };
        let id = delivery_id(space, *head, now_ms);
        let body = serde_json::to_string(&Body { id: &id, space, user: sender, changes })
            .map_err(|e| DbError::Corrupt(format!("a delivery's body: {e}")))?;
        out.push(NewDelivery { id, space: space.to_string(), head: *head, body });
    }
    Ok(out)
}

/// A delivery's id: 32 hex digits, unique to the space, its head and the
/// moment (heads never repeat; the moment keeps a reset database apart).
fn delivery_id(space: &str, head: u64, now_ms: i64) -> String {
    let mut h = Sha256::new();
    h.update(space.as_bytes());
    h.update([0]);
    h.update(head.to_be_bytes());
    h.update(now_ms.to_be_bytes());
    let digest = h.finalize();
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use marksync::judge::{judge_batch, Known, Limits};
    use marksync::protocol::{Fields, Op, OpId, Value};
    use marksync::schema::Schema;

    fn op(id: &str, row: &str, at: u64, reps: i64, space: Option<&str>) -> Op {
        let fields: Fields = [
            ("exercise".to_owned(), Value::from("squat")),
            ("weightKg".to_owned(), Value::from(80.0)),
            ("reps".to_owned(), Value::from(reps)),
        ]
        .into_iter()
        .collect();
        Op {
            op_id: OpId::new(id),
            table: "sets".into(),
            row_id: row.into(),
            fields,
            at,
            schema: 1,
            space: space.map(Into::into),
            seen: None,
        }
    }

    #[test]
    fn one_delivery_per_moved_space_with_its_changes_in_order_and_nothing_for_a_refusal() {
        let schema = Schema::workout();
        let batch = vec![op("d:1", "r-1", 10, 5, None), op("d:2", "r-2", 11, 500, None), op("d:3", "r-1", 12, 6, None)];
        let j = judge_batch(&schema, "ann", &batch, Known::default(), &Limits::default()).unwrap();
        let out = deliveries("ann", &j, 1_700_000_000_000).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].space.as_str(), out[0].head), ("~ann", 2));
        let body: serde_json::Value = serde_json::from_str(&out[0].body).unwrap();
        assert_eq!(body["id"], out[0].id.as_str());
        assert_eq!(body["user"], "ann");
        let ids: Vec<&str> = body["changes"].as_array().unwrap().iter().map(|c| c["opId"].as_str().unwrap()).collect();
        assert_eq!(ids, ["d:1", "d:3"]);
        assert_eq!(body["changes"][1]["seq"], 2);
        assert_eq!(out[0].id.len(), 32);
    }
}
