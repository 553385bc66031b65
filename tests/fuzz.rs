//! Property targets for the request decoder and the judge: whatever arrives,
//! nothing panics, and every op judged gets exactly one verdict.
//!
//! 256 cases each by default (a second or two); run longer with
//! `MARKSYNC_FUZZ_CASES=<n>`. Native only (proptest is not built for wasm32).
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashSet;

use marksync::judge::{judge_batch, Known, Limits, Remembered, Stop};
use marksync::protocol::{Op, OpId, Outcome, PushRequest, RowKey, VerdictsRequest};
use marksync::schema::Schema;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("MARKSYNC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// A JSON scalar as raw text, often of the wrong kind or out of range.
fn raw_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:e}")),
        "[a-z0-9\"\\\\é]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just("{}".to_owned()),
        Just("[1]".to_owned()),
    ]
}

/// An op-like object as raw text: keys may repeat, be missing or be unknown.
fn raw_op() -> impl Strategy<Value = String> {
    let fields = prop::collection::vec(("(_deleted|reps|weightKg|exercise|_x|[a-zA-Z_]{1,4})", raw_value()), 0..6);
    ("[a-z0-9:é-]{0,8}", "(sets|Sets|x|)", "[a-z0-9-]{0,6}", fields, raw_value(), any::<bool>()).prop_map(
        |(op_id, table, row_id, fields, at, extra)| {
            let f: Vec<String> = fields.iter().map(|(k, v)| format!("{}: {v}", serde_json::to_string(k).unwrap_or_default())).collect();
            let extra = if extra { ", \"schema\": 1" } else { "" };
            format!(
                r#"{{"opId": {}, "table": "{table}", "rowId": "{row_id}", "fields": {{{}}}, "at": {at}{extra}}}"#,
                serde_json::to_string(&op_id).unwrap_or_default(),
                f.join(", ")
            )
        },
    )
}

/// Valid ops over a few rows and opIds (repeats included), some rejected by the schema.
fn valid_batch() -> impl Strategy<Value = Vec<Op>> {
    let op = (0..6u32, 0..4u32, 0..20u64, 0..130i64, any::<bool>(), any::<bool>()).prop_map(|(id, row, at, reps, del, partial)| {
        let mut fields = marksync::protocol::Fields::new();
        fields.insert("reps".into(), reps.into());
        if !partial {
            fields.insert("exercise".into(), "squat".into());
            fields.insert("weightKg".into(), 80.0.into());
        }
        if del {
            fields.insert("_deleted".into(), true.into());
        }
        Op {
            op_id: OpId::new(format!("d:{id}")),
            table: "sets".into(),
            row_id: format!("d-{row}"),
            fields,
            at,
            schema: 1,
            space: None,
            seen: None,
        }
    });
    prop::collection::vec(op, 1..40)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(req) = serde_json::from_slice::<PushRequest>(&bytes) {
            let _ = req.check_shape();
        }
        if let Ok(req) = serde_json::from_slice::<VerdictsRequest>(&bytes) {
            let _ = req.check_shape();
        }
    }

    #[test]
    fn valid_looking_json_is_decoded_checked_and_judged_without_panic(
        ops in prop::collection::vec(raw_op(), 0..6),
        now in any::<u64>(),
        bound in prop::option::of(any::<u64>()),
    ) {
        let raw = format!(r#"{{"attemptKey": "d:a1", "batch": [{}]}}"#, ops.join(", "));
        let Ok(req) = serde_json::from_str::<PushRequest>(&raw) else { return Ok(()) };
        if req.check_shape().is_err() {
            return Ok(());
        }
        let limits = Limits { now, max_future_ms: bound, ..Limits::default() };
        let j = judge_batch(&Schema::workout(), "u", &req.batch, Known::default(), &limits).unwrap();
        prop_assert_eq!(j.verdicts.len(), req.batch.len());
    }

    /// Every op of the judged prefix gets exactly one verdict, in batch order;
    /// judging stops only at a documented point, never at the first op; no
    /// answer carries a row twice; nothing is remembered twice.
    #[test]
    fn the_judge_answers_every_op_of_a_prefix_once(
        batch in valid_batch(),
        saved in prop::collection::vec((0..6u32, any::<bool>()), 0..4),
        budget in prop_oneof![Just(usize::MAX), 1usize..400],
        now in 0..40u64,
        bound in prop::option::of(0..10u64),
    ) {
        let mut known = Known::default();
        for (id, applied) in saved {
            let v = if applied { Remembered::Applied } else { Remembered::Rejected { reason: "r".into(), code: "c".into() } };
            known.verdicts.insert(OpId::new(format!("d:{id}")), v);
        }
        let limits = Limits { now, max_future_ms: bound, max_answer_row_bytes: budget, ..Limits::default() };
        let j = judge_batch(&Schema::workout(), "u", &batch, known, &limits).unwrap();
        prop_assert!(!j.verdicts.is_empty());
        match j.stopped {
            None => prop_assert_eq!(j.verdicts.len(), batch.len()),
            Some(Stop::AnswerFull) => prop_assert!(j.verdicts.len() < batch.len()),
            Some(Stop::SchemaTooNew(_)) => prop_assert!(false, "no op has a newer schema"),
        }
        for (v, op) in j.verdicts.iter().zip(&batch) {
            prop_assert_eq!(&v.op_id, &op.op_id);
        }
        let mut carried: HashSet<RowKey> = HashSet::new();
        for (v, op) in j.verdicts.iter().zip(&batch) {
            if let Outcome::Rejected { row: Some(_), .. } = &v.outcome {
                prop_assert!(carried.insert(op.row_key()), "a row carried twice");
            }
        }
        let remembered: HashSet<&OpId> = j.remember.iter().map(|r| &r.op_id).collect();
        prop_assert_eq!(remembered.len(), j.remember.len());
    }
}
