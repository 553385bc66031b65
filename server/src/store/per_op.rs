//! The per-op judge (feature `bench-per-op`): PROTOCOL §3 taken literally,
//! a few statements per op in the sender's personal space, kept only for
//! the load benchmark to measure the batched judge ([`super::push`]) against.

use marksync::judge::{decide, Decision, JudgeError, Judgement, Limits, Remember, Remembered, RowWrite};
use marksync::protocol::{Op, Outcome, RowKey, Verdict, MAX_JUDGED_PER_PUSH};
use marksync::schema::Schema;

use super::conn::{Backend, Conn};
use super::dialect::{Key, Pools, VerdictColumns};
use super::error::PushError;

/// Judges `batch` one op at a time, each op's statements of its own.
pub(crate) async fn push<D: Backend>(
    pools: &Pools<D>,
    user: &str,
    schema: &Schema,
    batch: &[Op],
) -> Result<Judgement, PushError> {
    let mut tx = pools.write().await?;
    let personal = marksync::space::personal(user);
    tx.ensure_head(&personal).await?;
    let heads = tx.lock_heads(&[&personal], true).await?;
    let mut head = heads.get(personal.as_str()).copied().unwrap_or(0);
    let mut out = Judgement::default();
    for (i, op) in batch.iter().take(MAX_JUDGED_PER_PUSH).enumerate() {
        if op.schema > schema.version {
            if i == 0 {
                return Err(JudgeError::SchemaTooNew { op: op.schema, server: schema.version }.into());
            }
            break;
        }
        let key = Key { space: &personal, table: &op.table, row_id: &op.row_id };
        let (loaded, places) = tx.load_rows(&[key]).await?;
        let current = loaded.into_values().next();
        let decision = decide(schema, op, current.as_ref(), &Limits::default());
        let verdict = match &decision {
            Decision::Apply { .. } => Remembered::Applied,
            Decision::Reject { code, reason } => Remembered::Rejected { reason: reason.clone(), code: code.clone() },
        };
        let placed = RowKey::new(op.table.clone(), op.row_id.clone());
        let remember =
            Remember { op_id: op.op_id.clone(), space: personal.as_str().into(), key: placed.clone(), verdict };
        let outcome = if tx.remember(user, &VerdictColumns::of(&[remember]), true).await? == 0 {
            let saved = tx.load_verdicts(user, &[op.op_id.as_str()]).await?;
            match saved.get(&op.op_id) {
                Some(r) => r.replay(current.as_ref()),
                None => {
                    return Err(super::error::DbError::Corrupt(format!("no verdict of {}", op.op_id.as_str())).into())
                }
            }
        } else {
            match decision {
                Decision::Apply { row, moved } => {
                    if moved {
                        head += 1;
                        let new = current.is_none();
                        let write = RowWrite { space: personal.as_str().into(), key: placed, row, seq: head, new };
                        if !tx.write_rows(&[write], &places).await? {
                            return Err(super::error::DbError::Conflict.into());
                        }
                    }
                    Outcome::Applied
                }
                Decision::Reject { code, reason } => Outcome::Rejected { reason, code, row: current },
            }
        };
        out.verdicts.push(Verdict { op_id: op.op_id.clone(), outcome });
    }
    out.heads = vec![(personal.as_str().into(), head)];
    tx.write_heads(&out.heads).await?;
    tx.commit().await?;
    Ok(out)
}
