//! The sync cycle: push while ops wait, then pull to the head; attempts,
//! answers, failures, bounded retries and reconciliation (PROTOCOL §5, §7).
//!
//! Every function here returns the [`Txn`] to commit before the [`Step`] is
//! carried out. A push step's txn records the attempt going out; an
//! answer's txn records its outcome (or the failure's).

use std::collections::HashMap;

use super::{Engine, Step, SyncReport, MAX_EMPTY_ANSWERS};
use crate::attempt::{Failure, InFlight, Recovery, WRONG_USER};
use crate::protocol::Code;
use crate::protocol::{
    Op, OpId, Outcome, PushRequest, PushResponse, Recalled, Row, RowKey, SpacesPullRequest, SpacesPullResponse, VerdictsResponse,
};
use crate::protocol::{MAX_SAFE_INTEGER, MAX_VERDICTS_PER_QUERY};
use crate::store::{Rejection, Txn};
use crate::sync_state::{CycleLog, Flight, VerdictLog, MAX_CYCLES, MAX_LOGGED_VERDICTS};

/// The reason of an op refused as too large by an answer without words (a proxy's 413).
pub(super) const TOO_LARGE_UNSAID: &str = "the server refused this edit as larger than it accepts (413)";

/// Why an attempt whose context is gone has no answer (its rows' reason).
pub(super) const ORPHANED: &str =
    "the tab or worker that sent it closed before the answer came; it will be sent again under the same opIds";

/// How often a client whose server is older than its ops probes again (ms).
pub const SCHEMA_PROBE_MS: u64 = 300_000;

/// The recovery codes that stop every automatic send until a person acts.
pub(super) const RETRIES_EXHAUSTED: Code = Code::RetriesExhausted;
const SCHEMA_TOO_NEW: Code = Code::SchemaTooNew;
const REFUSED: Code = Code::Refused;

/// How much earlier than the backoff's time a cycle may start and still be
/// the scheduled one (timers are not exact); earlier, it is a person's.
const EARLY_SLACK_MS: u64 = 250;

impl Engine {
    /// Starts a sync cycle now (whatever the backoff says: the caller decided).
    /// Call it holding the database's cycle lock: an attempt recorded as in
    /// flight that is not this engine's belongs to a context that closed with
    /// its request out, and its ops become `unknown-outcome`.
    pub fn start_sync(&mut self, now: u64) -> (Txn, Step) {
        self.start(now, false)
    }

    /// Starts a cycle no one waits on (a context syncing on its own): it
    /// pushes what is queued now (in as many pushes as it takes), then
    /// ends; the ops recorded while its pushes were out wait for the next
    /// cycle instead of going out one push after another. The host starts
    /// that one no sooner than its pace allows ([`crate::driver::PUSH_PACE`]),
    /// so a burst of edits goes in a few pushes, not one each. Ops it sent
    /// that were not judged (an empty answer, a batch too large) still go
    /// again at once.
    pub fn start_paced_sync(&mut self, now: u64) -> (Txn, Step) {
        self.start(now, true)
    }

    fn start(&mut self, now: u64, paced: bool) -> (Txn, Step) {
        self.paced = paced.then(|| self.outbox.last_at().unwrap_or(0));
        self.report = SyncReport { cursor: self.meta.cursor, ..SyncReport::default() };
        self.cycle = CycleLog { started_at: now, ..CycleLog::default() };
        let due = self.sync.next_retry_at.take();
        if due.is_some() {
            self.touch();
        }
        // A cycle started before the backoff's time (a person pressed sync):
        // it may go out, but if it fails it is no further failure of the
        // ops — the wait stays the one already scheduled.
        self.early = due.filter(|t| *t > now.saturating_add(EARLY_SLACK_MS));
        // A refusal (a 400: a server older than the app, a wrong endpoint)
        // is tried again once its probe comes due — the server may have
        // been upgraded, the app fixed; until then the stop stands.
        let refused = self.sync.recovery.as_ref().is_some_and(|r| r.code == REFUSED);
        self.probe_refused = refused && due.is_some_and(|t| t <= now.saturating_add(EARLY_SLACK_MS));
        if refused && !self.probe_refused {
            self.sync.next_retry_at = due;
        }
        self.pushed.clear();
        self.last_failure = None;
        self.in_flight = None;
        self.reconcile_in_flight = None;
        self.pull_in_flight = None;
        self.empty_answers = 0;
        self.settle_orphaned_flight();
        let step = self.next_step(now);
        (self.with_sync(Txn::default()), step)
    }

    /// Ends the cycle this context ran (`by`: `tab` or `worker`), keeping it
    /// in the sync state for the inspector: how it ended (`done`, `waiting`,
    /// `blocked`) and why. The txn stores it; commit it with the cycle's last step.
    pub fn end_cycle(&mut self, now: u64, by: &str, outcome: &str, error: Option<String>) -> Txn {
        let mut log = std::mem::take(&mut self.cycle);
        log.ms = now.saturating_sub(log.started_at);
        log.by = by.to_owned();
        log.sent = self.report.pushed;
        log.applied = self.report.applied;
        log.duplicate = self.report.duplicate;
        log.rejected = self.report.rejected;
        log.stale_ignored = self.report.ignored_stale_acks;
        log.reconciled = self.report.reconciled;
        log.pulled = self.report.pulled;
        log.outcome = outcome.to_owned();
        log.error = error;
        self.sync.cycles.push_back(log);
        while self.sync.cycles.len() > MAX_CYCLES {
            self.sync.cycles.pop_front();
        }
        self.touch();
        self.with_sync(Txn::default())
    }

    /// An attempt recorded as in flight with no context waiting for it (its
    /// context closed, crashed or reloaded with the request out): its outcome
    /// is unknown. Returns the txn that records it, if there was one. Call
    /// only when no other context can be running a cycle (holding the lock).
    pub fn settle_orphaned_flight(&mut self) -> Option<Txn> {
        if self.in_flight.is_some() {
            return None;
        }
        let flight = self.sync.flight.take()?;
        self.sync.metrics.unknown_outcomes += 1;
        self.sync.last_error = Some(ORPHANED.to_owned());
        for id in &flight.op_ids {
            if let Some(a) = self.sync.ops.get_mut(id) {
                a.unknown = true;
            }
        }
        self.touch();
        Some(self.with_sync(Txn::default()))
    }

    /// Whether sync may send on its own: not while a person must act. A
    /// server older than the app (`schema_too_new`) is probed, not waited for.
    /// A token refused as another user's is probed with a pull (which
    /// writes nothing), never pushed with.
    fn blocked(&self) -> Option<&Recovery> {
        // A cleared copy being synced again is a notice: the sync is its cure.
        self.sync.recovery.as_ref().filter(|r| {
            r.code != SCHEMA_TOO_NEW && r.code != WRONG_USER && !super::salvage::is_resync(r) && !(r.code == REFUSED && self.probe_refused)
        })
    }

    /// How long after `now` a cycle the server asked for (a poke: a space
    /// moved) may start: at once, or when the wait the server or the backoff
    /// set is over — a poke is no person pressing sync, so a `Retry-After`
    /// holds against it, and a device the server is refusing does not answer
    /// each of another user's pushes with a request. A server older than the
    /// app is probed at once (the poke may be the upgraded one's, §5). `None`
    /// while sync is stopped for a person: their act (or the stop's own
    /// probe) starts the next cycle.
    pub fn poke_wait(&self, now: u64) -> Option<u64> {
        if self.blocked().is_some() {
            return None;
        }
        if self.sync.recovery.as_ref().is_some_and(|r| r.code == SCHEMA_TOO_NEW) {
            return Some(0);
        }
        Some(self.sync.next_retry_at.map_or(0, |t| t.saturating_sub(now)))
    }

    /// Whether a poke's `data` names what this device has not pulled: a
    /// space's head past its cursor there, or anything but a head
    /// (memberships changed, a word of a newer server). A poke of a head
    /// already pulled — most often the device's own push, told back while
    /// its cycle pulled it — asks for nothing.
    pub fn poke_is_news(&self, data: &str) -> bool {
        crate::protocol::read_poke(data).is_none_or(|(space, head)| head > self.following.cursor_of(space))
    }

    /// The step after the current one: push while ops wait, else pull. Ops
    /// that reached a retry limit are asked about first (PROTOCOL §7).
    fn next_step(&mut self, now: u64) -> Step {
        if let Some(r) = self.blocked() {
            return Step::Blocked(r.clone());
        }
        if self.hides_rows() {
            // Nothing of the queue goes out until a pull answered for the database's own user.
            return self.pull_step(now);
        }
        if self.outbox.iter().any(|o| self.sync.exhausted(&o.op_id, &self.config.retry)) {
            return self.reconcile_step(false);
        }
        if !self.outbox.is_empty() {
            return self.push_unless_paced(now);
        }
        self.pull_step(now)
    }

    /// The next push, but in a paced cycle that already pushed, not of
    /// ops recorded since: it ends, and they go in the next cycle.
    fn push_unless_paced(&mut self, now: u64) -> Step {
        if let Some(upto) = self.paced {
            if !self.pushed.is_empty() && self.outbox.iter().all(|o| o.at > upto && !self.pushed.contains(&o.op_id)) {
                return Step::Done(self.report.clone());
            }
        }
        Step::Push(self.new_attempt(now))
    }

    pub(super) fn pull_step(&mut self, now: u64) -> Step {
        // A space the device holds rows of without following it (its own
        // ops applied there before it ever pulled the space) is followed
        // from now on, role unknown: the answer names the role, or says the
        // user left it — then those rows go too.
        let held: Vec<String> = self.replica.spaces().iter().filter(|s| !self.following.spaces.contains_key(*s)).cloned().collect();
        for s in held {
            self.following.left.remove(&s);
            self.following.spaces.insert(s, crate::space::Follow::default());
            self.following_moved = true;
        }
        let req = self.following.request(self.config.pull_limit);
        self.pull_in_flight = Some((req.clone(), now));
        Step::Pull(req)
    }

    pub(super) fn new_attempt(&mut self, now: u64) -> PushRequest {
        self.attempt_seq += 1;
        let key = format!("{}:a{}", self.meta.device_id, self.attempt_seq);
        let batch = self.outbox.next_batch(self.max_batch);
        for op in &batch {
            let a = self.sync.ops.entry(op.op_id.clone()).or_default();
            a.attempts = a.attempts.saturating_add(1);
            a.last_key = key.clone();
            if a.first_sent_at == 0 {
                a.first_sent_at = now;
            }
            a.last_sent_at = now;
        }
        let op_ids: Vec<OpId> = batch.iter().map(|o| o.op_id.clone()).collect();
        self.sync.metrics.attempts += 1;
        self.sync.flight = Some(Flight { key: key.clone(), op_ids: op_ids.clone(), sent_at: now });
        self.touch();
        for id in &op_ids {
            if self.pushed.insert(id.clone()) {
                self.report.pushed += 1;
            }
        }
        self.in_flight = Some(InFlight { key: key.clone(), op_ids });
        self.cycle.attempts.push(key.clone());
        PushRequest { attempt_key: key, batch }
    }

    /// A push answer arrived. `None`: it answers an attempt that is not the one
    /// in flight, and was ignored (nothing changed but the stale count, which
    /// the next txn carries). Otherwise commit the txn, then do the step.
    pub fn on_push_response(&mut self, resp: PushResponse, now: u64) -> Option<(Txn, Step)> {
        let Some(flight) = self.in_flight.as_ref().filter(|f| f.key == resp.attempt_key) else {
            self.sync.metrics.stale_acks_ignored += 1;
            self.report.ignored_stale_acks += 1;
            self.touch();
            return None;
        };
        if resp.verdicts.len() > flight.op_ids.len() || resp.verdicts.iter().zip(&flight.op_ids).any(|(v, id)| &v.op_id != id) {
            let key = flight.key.clone();
            return self.on_push_failed(&key, Failure::BadResponse("verdicts do not match the batch".into()), now);
        }
        if resp.verdicts.is_empty() {
            // "Nothing judged, call again now" — but not forever.
            self.empty_answers += 1;
            if self.empty_answers > MAX_EMPTY_ANSWERS {
                let key = flight.key.clone();
                return self.on_push_failed(&key, Failure::BadResponse("the server judged nothing, repeatedly".into()), now);
            }
        } else {
            self.empty_answers = 0;
        }
        let flight = self.in_flight.take()?;
        self.answered();
        let sent_at = self.sync.flight.take().map_or(now, |f| f.sent_at);
        // Ops of the batch that got no verdict were not judged: no doubt about them.
        for id in flight.op_ids.iter().skip(resp.verdicts.len()) {
            if let Some(a) = self.sync.ops.get_mut(id) {
                a.doubted |= a.unknown;
                a.unknown = false;
            }
        }
        if self.sync.recovery.as_ref().is_some_and(|r| r.code == SCHEMA_TOO_NEW) {
            // The server judged: it knows our schema now.
            self.sync.recovery = None;
        }
        self.touch();
        self.backoff.reset();
        let mut txn = Txn::default();
        if let Some(server_now) = resp.now {
            self.meta.clock.learn_offset(server_now, sent_at, now);
            txn.meta = Some(self.meta.clone());
        }
        let mut base_at: HashMap<RowKey, usize> = HashMap::new();
        for v in resp.verdicts {
            self.apply_verdict(v.op_id, v.outcome, false, now, &mut txn, &mut base_at);
        }
        if !txn.is_empty() {
            txn.meta = Some(self.meta.clone());
        }
        let step = self.next_step(now);
        Some((self.with_sync(txn), step))
    }

    /// Puts `row` as the base row of `key` in `txn`, once per key (`at` indexes `txn.put_base`).
    fn put_base(txn: &mut Txn, at: &mut HashMap<RowKey, usize>, key: RowKey, row: Row) {
        match at.get(&key) {
            Some(i) => txn.put_base[*i].1 = row,
            None => {
                at.insert(key.clone(), txn.put_base.len());
                txn.put_base.push((key, row));
            }
        }
    }

    /// Applies one verdict (from a push answer, or recalled by the server
    /// when `recalled`): the op leaves the outbox; applied ops fold into the
    /// base, rejected ones are kept with their reason.
    fn apply_verdict(
        &mut self,
        op_id: OpId,
        outcome: Outcome,
        recalled: bool,
        now: u64,
        txn: &mut Txn,
        base_at: &mut HashMap<RowKey, usize>,
    ) {
        let attempts = self.sync.ops.remove(&op_id).map_or(0, |a| a.attempts);
        if self.cycle.verdicts.len() < MAX_LOGGED_VERDICTS {
            let (status, code) = match &outcome {
                Outcome::Applied => ("applied", None),
                Outcome::Duplicate => ("duplicate", None),
                Outcome::Rejected { code, .. } => ("rejected", Some(code.clone())),
            };
            self.cycle.verdicts.push(VerdictLog { op_id: op_id.clone(), status: status.to_owned(), code });
        }
        let Some(op) = self.outbox.remove(&op_id) else {
            return;
        };
        txn.delete_pending.push(op.at);
        let key = op.place();
        if recalled {
            self.report.reconciled += 1;
            self.sync.metrics.reconciled += 1;
        }
        match outcome {
            Outcome::Applied | Outcome::Duplicate => {
                match (outcome, recalled) {
                    (_, true) => {}
                    (Outcome::Applied, false) => {
                        self.report.applied += 1;
                        self.sync.metrics.applied += 1;
                    }
                    _ => {
                        self.report.duplicate += 1;
                        self.sync.metrics.duplicates += 1;
                    }
                }
                self.meta.clock.acked(op.at);
                // A later edit of this device set again every field an older
                // refusal on the row was about: the row stands past it. It
                // stays listed until dismissed, but no longer tells the status.
                for (_, r) in self.rejections.iter_mut() {
                    let covered = || r.op.fields.keys().all(|f| op.fields.contains_key(f));
                    if !r.superseded && r.op.at < op.at && r.op.place() == key && covered() {
                        r.superseded = true;
                        txn.put_rejections.push(r.clone());
                    }
                }
                if self.following.has_left(&key.space) {
                    // Applied before the user left: the row is not theirs to keep.
                    let remain: Vec<Op> = self.outbox.on_row(&key).cloned().collect();
                    self.replica.rebuild(&key, remain.iter());
                    return;
                }
                let still = self.outbox.has_row(&key);
                let base = self.replica.fold(&op, still);
                Self::put_base(txn, base_at, key, base);
            }
            Outcome::Rejected { reason, code, row } => {
                self.report.rejected += 1;
                self.sync.metrics.rejected += 1;
                if let Some(r) = &row {
                    for c in r.cells.values() {
                        self.meta.clock.observe(c.mark.at, now);
                    }
                }
                if code == crate::judge::CLOCK_AHEAD {
                    // This device stamped an `at` the server finds implausible:
                    // stamp near real time again (never below what still matters).
                    let highest = self.outbox.last_at().unwrap_or(0);
                    self.meta.clock.rewind(highest.min(MAX_SAFE_INTEGER));
                }
                if let Some(r) = &row {
                    self.notice_conflicts(&key, r, txn);
                }
                // The row's notes told what they had to: the device keeps the row.
                let row = row.map(Row::without_notes);
                let remain: Vec<Op> = self.outbox.on_row(&key).cloned().collect();
                if let Some(base) = self.replica.reject(&key, row.as_ref(), remain.iter()) {
                    Self::put_base(txn, base_at, key, base);
                }
                let rej = Rejection { op, reason, code, attempts, superseded: false };
                txn.put_rejections.push(rej.clone());
                self.rejections.insert(op_id, rej);
            }
        }
    }

    /// The server refused the attempt in flight without judging it (e.g. a 401
    /// that a fresh token fixes): drop it and send the ops again in a new attempt.
    pub fn abandon_attempt(&mut self, attempt_key: &str, now: u64) -> (Txn, Step) {
        if self.in_flight.as_ref().is_some_and(|f| f.key == attempt_key) {
            self.in_flight = None;
            self.sync.flight = None;
            self.touch();
        }
        let step = self.next_step(now);
        (self.with_sync(Txn::default()), step)
    }

    /// A push got no usable answer. `None` if `attempt_key` is not the attempt in
    /// flight (ignored). The ops stay queued, same opIds.
    pub fn on_push_failed(&mut self, attempt_key: &str, failure: Failure, now: u64) -> Option<(Txn, Step)> {
        let flight = self.in_flight.take_if(|f| f.key == attempt_key)?;
        self.sync.flight = None;
        if let (Failure::PayloadTooLarge(words), [id]) = (&failure, flight.op_ids.as_slice()) {
            return Some(self.too_large_alone(id.clone(), words, now));
        }
        let unknown = failure.outcome_unknown();
        if unknown {
            self.sync.metrics.unknown_outcomes += 1;
        }
        let counted = unknown && self.early.is_none();
        for id in &flight.op_ids {
            if let Some(a) = self.sync.ops.get_mut(id) {
                a.doubted |= a.unknown;
                a.unknown = unknown;
                if counted {
                    a.counted = a.counted.saturating_add(1);
                    a.charged_ms = a.charged_ms.saturating_add(now.saturating_sub(a.last_sent_at));
                }
            }
        }
        self.touch();
        let step = self.after_failure(failure, now, &flight.op_ids);
        Some((self.with_sync(Txn::default()), step))
    }

    /// The push step could not leave at all (e.g. the app's token function
    /// failed before the request was made): nothing was sent, so it is no
    /// attempt — its counts are taken back, nothing is in doubt, and sync
    /// waits like after any failure. `None` if `attempt_key` is not in flight.
    pub fn on_push_not_sent(&mut self, attempt_key: &str, failure: Failure, now: u64) -> Option<(Txn, Step)> {
        let flight = self.in_flight.take_if(|f| f.key == attempt_key)?;
        self.sync.flight = None;
        for id in &flight.op_ids {
            if let Some(a) = self.sync.ops.get_mut(id) {
                a.attempts = a.attempts.saturating_sub(1);
                if a.attempts == 0 {
                    self.sync.ops.remove(id);
                }
            }
            if self.pushed.remove(id) {
                self.report.pushed -= 1;
            }
        }
        self.sync.metrics.attempts = self.sync.metrics.attempts.saturating_sub(1);
        self.touch();
        let step = self.after_failure(failure, now, &[]);
        Some((self.with_sync(Txn::default()), step))
    }

    /// A push of one op alone was refused as larger than the server takes:
    /// no retry can carry it, and the queue behind it, and the pulls after
    /// it, must not wait on it. Unless an earlier attempt of it is in doubt,
    /// the server never judged it: it is rejected here in the server's words
    /// (code `payload_too_large`), as final as a verdict. In doubt, the
    /// server is asked first (§7); if it never judged it, the same follows.
    fn too_large_alone(&mut self, id: OpId, words: &str, now: u64) -> (Txn, Step) {
        self.answered();
        self.backoff.reset();
        // The batches that led here were halved for this op: the next ones start whole again.
        self.max_batch = self.config.max_batch.clamp(1, crate::protocol::MAX_JUDGED_PER_PUSH);
        let reason = if words.trim().is_empty() { TOO_LARGE_UNSAID.to_owned() } else { words.to_owned() };
        self.touch();
        if let Some(a) = self.sync.ops.get_mut(&id).filter(|a| a.unknown || a.doubted) {
            a.unknown = true;
            a.too_large = Some(reason);
            let step = self.reconcile_step(false);
            return (self.with_sync(Txn::default()), step);
        }
        let mut txn = Txn::default();
        self.reject_unjudged(id, reason, now, &mut txn, &mut HashMap::new());
        // As every txn of verdicts carries it ([`Engine::on_push_response`]).
        txn.meta = Some(self.meta.clone());
        let step = self.next_step(now);
        (self.with_sync(txn), step)
    }

    /// Rejects on the device an op the server never judged and cannot take,
    /// as [`Engine::apply_verdict`] does a verdict (`base_at` as there).
    fn reject_unjudged(&mut self, id: OpId, reason: String, now: u64, txn: &mut Txn, base_at: &mut HashMap<RowKey, usize>) {
        let code = Code::PayloadTooLarge.as_str().to_owned();
        self.apply_verdict(id, Outcome::Rejected { reason, code, row: None }, false, now, txn, base_at);
    }

    /// A usable answer came: the last failure's words go, here and in the shared state.
    fn answered(&mut self) {
        self.last_failure = None;
        if self.sync.recovery.as_ref().is_some_and(|r| r.code == REFUSED) {
            // The refusal's probe was answered: the server takes this device's requests again.
            self.sync.recovery = None;
            self.probe_refused = false;
            self.touch();
        }
        if self.sync.last_error.take().is_some() {
            self.touch();
        }
    }

    fn after_failure(&mut self, failure: Failure, now: u64, sent: &[OpId]) -> Step {
        self.last_failure = Some(failure.to_string());
        self.sync.last_error = self.last_failure.clone();
        self.touch();
        if let Failure::SchemaTooNew(m) = &failure {
            // The server is the old side: wait for it, probing now and then.
            let r = Recovery {
                code: SCHEMA_TOO_NEW,
                message: format!(
                    "the server does not know this app's data version yet ({m}); edits are kept and will be sent once the server is updated"
                ),
            };
            if self.sync.recovery.as_ref().is_none_or(|x| x.code != SCHEMA_TOO_NEW) {
                self.sync.metrics.recovery_required += 1;
            }
            self.sync.recovery = Some(r);
            self.touch();
            return self.wait(now.saturating_add(SCHEMA_PROBE_MS));
        }
        if let Some(r) = failure.recovery() {
            if r.code == REFUSED {
                self.probe_refused = false;
                self.sync.next_retry_at = Some(now.saturating_add(SCHEMA_PROBE_MS));
            }
            return self.require_recovery(r);
        }
        // A server that asked for time (a 503's `Retry-After`) is not tried sooner.
        let asked = match failure {
            Failure::Server { retry_after_ms, .. } => u64::from(retry_after_ms),
            _ => 0,
        };
        match failure {
            Failure::PayloadTooLarge(_) if sent.len() > 1 => {
                self.max_batch = sent.len() / 2;
                self.next_step(now)
            }
            // Not a push's (a push of one op is that op's refusal: `too_large_alone`).
            Failure::PayloadTooLarge(_) => self.require_recovery(Recovery {
                code: Code::PayloadTooLarge,
                message: "a single op is larger than the server accepts".into(),
            }),
            Failure::RateLimited { retry_after_ms } => self.wait(now.saturating_add(retry_after_ms)),
            // A person's early cycle failed: the backoff already scheduled stands.
            _ if let Some(until) = self.early => self.wait(until.max(now.saturating_add(asked))),
            _ => {
                let d = self.backoff.next_delay(&mut self.rng).max(asked);
                for id in sent {
                    if let Some(a) = self.sync.ops.get_mut(id) {
                        a.charged_ms = a.charged_ms.saturating_add(d);
                    }
                }
                if sent.iter().any(|id| self.sync.exhausted(id, &self.config.retry)) {
                    return self.reconcile_step(false);
                }
                self.wait(now.saturating_add(d))
            }
        }
    }

    fn wait(&mut self, until: u64) -> Step {
        self.sync.next_retry_at = Some(until);
        self.touch();
        self.report.cursor = self.meta.cursor;
        Step::Wait { until, report: self.report.clone() }
    }

    /// Asks the server about the ops in doubt (automatic), or about every op
    /// sent at least once (`by_person`): a [`Step::Reconcile`], or `Done` if
    /// there is nothing to ask.
    fn reconcile_step(&mut self, by_person: bool) -> Step {
        let ids: Vec<OpId> = self
            .outbox
            .iter()
            .filter(|o| self.sync.ops.get(&o.op_id).is_some_and(|a| a.unknown || (by_person && a.attempts > 0)))
            .take(MAX_VERDICTS_PER_QUERY)
            .map(|o| o.op_id.clone())
            .collect();
        if ids.is_empty() {
            self.report.cursor = self.meta.cursor;
            return Step::Done(self.report.clone());
        }
        self.reconcile_in_flight = Some((ids.clone(), by_person));
        Step::Reconcile(ids)
    }

    /// A person asked to check with the server (`reconcile()`): asks what it
    /// remembers of every op sent at least once and settles what it knows.
    /// Never pushes. Call holding the cycle lock, like [`Engine::start_sync`].
    pub fn start_reconcile(&mut self) -> (Txn, Step) {
        self.report = SyncReport { cursor: self.meta.cursor, ..SyncReport::default() };
        self.in_flight = None;
        self.pull_in_flight = None;
        self.settle_orphaned_flight();
        let step = self.reconcile_step(true);
        (self.with_sync(Txn::default()), step)
    }

    /// The server's answer to [`Step::Reconcile`]. `None` if no such question
    /// is out. Ops it remembers are settled exactly as a push answer would
    /// settle them; ops it does not know were never judged. After an
    /// automatic check, those still unsettled stop automatic sends
    /// (`retries_exhausted`) until [`Engine::retry_exhausted`] or the next open.
    pub fn on_verdicts(&mut self, resp: VerdictsResponse, now: u64) -> Option<(Txn, Step)> {
        let (asked, by_person) = self.reconcile_in_flight.take()?;
        let mut txn = Txn::default();
        let mut base_at: HashMap<RowKey, usize> = HashMap::new();
        let mut answered: HashMap<OpId, Recalled> = HashMap::new();
        for v in resp.verdicts {
            if asked.contains(&v.op_id) {
                answered.entry(v.op_id).or_insert(v.recalled);
            }
        }
        let mut unknown = 0usize;
        for id in &asked {
            match answered.remove(id) {
                Some(Recalled::Applied) => self.apply_verdict(id.clone(), Outcome::Applied, true, now, &mut txn, &mut base_at),
                Some(Recalled::Rejected { reason, code, row }) => {
                    self.apply_verdict(id.clone(), Outcome::Rejected { reason, code, row }, true, now, &mut txn, &mut base_at)
                }
                Some(Recalled::Unknown) | None => {
                    // Never judged: sending it again is safe, and starts its count over.
                    let too_large = self.sync.ops.get_mut(id).and_then(|a| {
                        a.unknown = false;
                        a.doubted = false;
                        a.too_large.take()
                    });
                    match too_large {
                        // ...unless it is more than the server takes.
                        Some(reason) => self.reject_unjudged(id.clone(), reason, now, &mut txn, &mut base_at),
                        None => unknown += 1,
                    }
                }
            }
        }
        self.report.unknown += unknown;
        self.touch();
        if !txn.is_empty() {
            txn.meta = Some(self.meta.clone());
        }
        let step = if by_person {
            // The server answered: what it settled is settled, what it never
            // judged is safe to send again — a stop for exhausted retries has
            // nothing left to guard.
            self.start_over();
            self.report.cursor = self.meta.cursor;
            Step::Done(self.report.clone())
        } else if unknown > 0 {
            self.exhausted(unknown)
        } else {
            self.backoff.reset();
            self.next_step(now)
        };
        Some((self.with_sync(txn), step))
    }

    /// The check of [`Step::Reconcile`] got no usable answer. `None` if none
    /// is out. Nothing was settled: an automatic check waits like any failed
    /// request and asks again (the server may be down; when it is back it
    /// answers and the queue heals alone); a person's check just ends.
    pub fn on_verdicts_failed(&mut self, failure: Failure, now: u64) -> Option<(Txn, Step)> {
        let (_, by_person) = self.reconcile_in_flight.take()?;
        let step = if by_person {
            self.last_failure = Some(failure.to_string());
            self.report.cursor = self.meta.cursor;
            Step::Done(self.report.clone())
        } else {
            self.after_failure(failure, now, &[])
        };
        Some((self.with_sync(Txn::default()), step))
    }

    fn exhausted(&mut self, unsettled: usize) -> Step {
        let p = self.config.retry;
        self.require_recovery(Recovery {
            code: RETRIES_EXHAUSTED,
            message: format!(
                "the server has not confirmed {unsettled} edit(s) after {} attempts or {} s; they are kept on this device — retry, or check with the server",
                p.max_attempts,
                p.max_elapsed_ms / 1000
            ),
        })
    }

    /// A person confirmed (`retry()`), or the app opened the database again:
    /// lift a stop for exhausted retries, and start the ops' counts over.
    /// Returns the txn that records it, if anything changed.
    ///
    /// Counts start over even with no stop in force: ops that reached a
    /// limit while the server could not be asked get a new budget too.
    pub fn retry_exhausted(&mut self) -> Option<Txn> {
        self.start_over().then(|| self.with_sync(Txn::default()))
    }

    /// Lifts a stop for exhausted retries, if any, and starts every op's
    /// counts over; `false` if there was nothing to lift or start over.
    fn start_over(&mut self) -> bool {
        let stopped = self.sync.recovery.as_ref().is_some_and(|r| r.code == RETRIES_EXHAUSTED);
        let counted = self.sync.ops.values().any(|a| a.counted > 0 || a.charged_ms > 0 || a.first_sent_at > 0);
        // A refusal is probed at once: the app opened again may be a fixed one.
        let refused = self.sync.recovery.as_ref().is_some_and(|r| r.code == REFUSED) && self.sync.next_retry_at != Some(0);
        if refused {
            self.sync.next_retry_at = Some(0);
            self.touch();
        }
        if !stopped && !counted {
            return refused;
        }
        if stopped {
            self.sync.recovery = None;
        }
        for a in self.sync.ops.values_mut() {
            a.counted = 0;
            a.charged_ms = 0;
            a.first_sent_at = 0;
        }
        self.backoff.reset();
        self.touch();
        true
    }

    /// Marks sync as blocked until the user acts (also for storage failures
    /// seen by the adapter). Returns the blocked step; the next txn records it.
    pub fn require_recovery(&mut self, r: Recovery) -> Step {
        if self.sync.recovery.is_none() {
            self.sync.metrics.recovery_required += 1;
        }
        self.in_flight = None;
        self.sync.flight = None;
        self.pull_in_flight = None;
        self.sync.recovery = Some(r.clone());
        self.touch();
        Step::Blocked(r)
    }

    /// The user acted (signed in again, …): sync may go on. Returns the txn
    /// that records it, if anything changed.
    /// A token refused as another user's is not lifted here: only an
    /// answer for the database's own user does (the next cycle asks).
    pub fn clear_recovery(&mut self) -> Option<Txn> {
        self.backoff.reset();
        let counts = self.start_over();
        let lifted = self.sync.recovery.take_if(|r| r.code != WRONG_USER).is_some();
        if lifted {
            self.touch();
        }
        (counts || lifted).then(|| self.with_sync(Txn::default()))
    }

    /// Any txn the engine still owes the store (a counter moved by an ignored answer).
    pub fn take_txn(&mut self) -> Option<Txn> {
        let t = self.with_sync(Txn::default());
        (!t.is_empty()).then_some(t)
    }

    /// A pull answer arrived for `sent`. `None` if that pull is not the one
    /// in flight (a late answer: ignored). Otherwise commit the txn (rows,
    /// cursors and membership together), then do the step.
    ///
    /// Spaces joined are followed from their start; a space left loses its
    /// rows on the device at once (its queued ops are sent, and the server
    /// answers them `forbidden`, with their content kept as rejections);
    /// pages of spaces the device does not follow are never taken.
    pub fn on_pull_response(&mut self, sent: &SpacesPullRequest, answer: SpacesPullResponse, now: u64) -> Option<(Txn, Step)> {
        let (_, sent_at) = self.pull_in_flight.take_if(|(r, _)| r == sent)?;
        if let Some(step) = self.answered_for_another_user(&answer) {
            return Some((self.with_sync(Txn::default()), step));
        }
        self.answered();
        self.backoff.reset();
        if let Some(server_now) = answer.now {
            self.meta.clock.learn_offset(server_now, sent_at, now);
        }
        if let Some(v) = answer.schema_version {
            self.saw_schema(v, answer.schema_tag.as_deref());
        }
        let mut txn = Txn::default();
        let mut base_at: HashMap<RowKey, usize> = HashMap::new();
        let learned = self.following.learn(&answer);
        let mut moved = learned.changed || std::mem::take(&mut self.following_moved);
        for local in &learned.left {
            for key in self.replica.drop_space(local) {
                Self::put_base(&mut txn, &mut base_at, key, Row::default());
            }
        }
        for page in &answer.spaces {
            let before = self.following.spaces.get(&page.space).map(|f| f.cursor);
            if !self.following.advance(page) {
                continue;
            }
            moved |= before.is_some_and(|c| page.cursor > c);
            let local = self.following.local(&page.space).to_owned();
            for change in &page.changes {
                for c in change.row.cells.values() {
                    self.meta.clock.observe(c.mark.at, now);
                }
                let key = RowKey::in_space(local.as_str(), change.key.table.as_str(), change.key.row_id.as_str());
                self.notice_conflicts(&key, &change.row, &mut txn);
                if let Some(base) = self.replica.merge_remote(&key, &change.row) {
                    Self::put_base(&mut txn, &mut base_at, key, base);
                }
            }
            self.report.pulled += page.changes.len();
        }
        self.meta.cursor = self.meta.cursor.max(self.following.personal_cursor());
        txn.meta = Some(self.meta.clone());
        if moved {
            txn.following = Some(self.following.clone());
        }
        self.sync.metrics.pulls += 1;
        self.touch();
        self.report.cursor = self.meta.cursor;
        // More waits, and this answer moved something: pull again (a server
        // saying "more" while moving nothing would loop forever).
        let step = if answer.has_more && moved {
            self.pull_step(now)
        } else if !self.outbox.is_empty() && self.blocked().is_none() {
            // Edits made during the pull, or queued in a space just left: push them in this cycle too.
            self.push_unless_paced(now)
        } else {
            if self.outbox.is_empty() {
                self.resynced();
            }
            Step::Done(self.report.clone())
        };
        Some((self.with_sync(txn), step))
    }

    /// A pull answer names another user's personal space than this
    /// database's: the token is that user's. Nothing of it is taken, and
    /// nothing more is sent or shown until a token of the owner is (the
    /// server refuses such a request itself when the device names its user;
    /// this holds against a server that does not). An answer for the owner
    /// lifts such a stop.
    fn answered_for_another_user(&mut self, answer: &SpacesPullResponse) -> Option<Step> {
        let mine = self.following.personal.as_deref();
        match (mine, answer.personal.as_deref()) {
            (Some(mine), Some(theirs)) if mine != theirs => {
                let owner = crate::space::personal_owner(mine).unwrap_or(mine);
                let other = crate::space::personal_owner(theirs).unwrap_or(theirs);
                let message = format!(
                    "the token is for user {other:?}, but this database belongs to user {owner:?}; nothing was sent: open one database per user"
                );
                self.last_failure = Some(message.clone());
                Some(self.require_recovery(Recovery { code: WRONG_USER, message }))
            }
            _ => {
                if self.hides_rows() {
                    self.sync.recovery = None;
                    self.touch();
                }
                None
            }
        }
    }

    /// A pull got no usable answer. `None` if `sent` is not the pull in flight.
    pub fn on_pull_failed(&mut self, sent: &SpacesPullRequest, failure: Failure, now: u64) -> Option<(Txn, Step)> {
        self.pull_in_flight.take_if(|(r, _)| r == sent)?;
        let step = self.after_failure(failure, now, &[]);
        Some((self.with_sync(Txn::default()), step))
    }
}
