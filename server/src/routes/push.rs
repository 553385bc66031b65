//! `POST /v1/push`: PROTOCOL §3.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use marksync::protocol::{ErrorCode, PushRequest, PushResponse};

use super::extract::{for_reader, read_json};
use crate::app::App;
use crate::budget::Work;
use crate::error::ApiError;
use crate::guard::User;
use crate::poke::Poke;
use crate::store::{PushControl, PushError};
use marksync::judge::Judgement;

pub(crate) async fn push(
    State(app): State<App>,
    Extension(User(user)): Extension<User>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req: PushRequest = read_json(&headers, body, app.max_body, "a push request").await?;
    req.check_shape().map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Before the transaction: a refused flood costs its parse, never the database.
    app.budgets.take(Work::Ops, &user, req.batch.len(), &app.metrics)?;
    // Held until the judge is done (in its task, even if the client hung
    // up): how many pushes of this device overlap.
    let device = req.attempt_key.split(':').next().unwrap_or_default();
    let in_flight = app.metrics.same_device.enter(&format!("{user}/{device}"));
    if app.webhook.as_ref().is_some_and(|w| w.full()) {
        // Nothing judged: the device keeps its ops and sends them again; the
        // receiver's backlog is bounded, and no change is ever dropped from it.
        return Err(ApiError::unavailable(
            "the webhook's receiver is behind (--webhook-max-pending deliveries wait); try again later",
        ));
    }
    let faults = app.faults.as_ref().map(|f| f.take()).unwrap_or_default();
    let ctl = PushControl {
        hold_lock_for: faults.delay,
        fail_before_commit: faults.fail_before_commit,
        rules: app.rules.clone(),
        deliveries: app.webhook.is_some(),
        probe: Some(Arc::clone(&app.metrics.same_user)),
        #[cfg(feature = "sabotage")]
        sabotage: app.sabotage,
    };
    let limits = app.limits();
    let started = Instant::now();
    // The judge runs in its own task: a client that hangs up cannot cancel a
    // transaction half way; it commits or rolls back whole.
    let task_app = app.clone();
    let task_user = user.clone();
    // What follows a commit — counting it, waking the webhook's sender,
    // poking the live streams — runs there too: a push committed is told
    // to the other devices and counted whether or not its client waited.
    let task = tokio::spawn(async move {
        let _in_flight = in_flight;
        // The user's turn first (crate::turn): a user's other pushes queue
        // here, holding nothing, not at the writer in front of everyone.
        let _turn = if task_app.takes_turns() { Some(task_app.turns.take(&task_user).await) } else { None };
        let result = async {
            #[cfg(feature = "bench-per-op")]
            if task_app.per_op_judge {
                return task_app.store.push_per_op(&task_user, &task_app.schema, &req.batch).await;
            }
            task_app.store.push(&task_user, &task_app.schema, &req.batch, &limits, &ctl).await
        }
        .await;
        if let Ok(j) = &result {
            committed(&task_app, j, started);
        }
        (req, result)
    });
    let (req, result) = task.await.map_err(|e| ApiError::internal(&e))?;
    let judgement = match result {
        Ok(j) => j,
        Err(PushError::Judge(e)) => return Err(ApiError::new(ErrorCode::SchemaTooNew, e.to_string())),
        Err(PushError::Store(e)) => return Err(ApiError::db(&e)),
        Err(e) => return Err(ApiError::internal(&e)),
    };
    if faults.lose_response {
        tracing::warn!(user, "fault: committed, now dropping the connection without an answer");
        return Ok(lost_response());
    }
    let answer = PushResponse { attempt_key: req.attempt_key, verdicts: judgement.verdicts, now: Some(limits.now) };
    Ok(Json(for_reader(&headers, answer)).into_response())
}

/// Counts a judged push, wakes the webhook's sender if it owes deliveries,
/// and pokes this process's streams of the spaces it moved.
fn committed(app: &App, judgement: &Judgement, started: Instant) {
    app.metrics.push_judged(judgement.verdicts.iter().map(|v| &v.outcome), started.elapsed());
    if let (Some(w), false) = (&app.webhook, judgement.heads.is_empty()) {
        w.enqueued(judgement.heads.len());
    }
    for (space, head) in &judgement.heads {
        // This process's streams at once (on PostgreSQL the NOTIFY comes back
        // too, later; a stream pokes only when a head grows, so once).
        app.pokes.send(Poke::Space { space: space.clone(), head: *head });
    }
}

/// A response whose body fails before its first byte: hyper then closes the
/// connection without sending anything, and the client sees a network error.
fn lost_response() -> Response {
    let body = Body::from_stream(futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("fault injection: response lost"))
    }));
    Response::new(body)
}
