//! The sync cycle, under the cycle lock: push until the outbox is empty,
//! then pull to the head; a person's check with the server; an orphaned
//! attempt settled at open.

use std::rc::Rc;

use super::{ClientError, Driver, Host, LocalStore, SyncOutcome, Transport};
use crate::attempt::Failure;
use crate::engine::{Step, SyncReport};
use crate::store::Txn;

/// What a context does while it holds the database's cycle lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Job {
    /// A sync cycle; `paced`: one no one waits on ([`crate::engine::Engine::start_paced_sync`]).
    Cycle { paced: bool },
    /// A person's check with the server: never pushes.
    Reconcile,
    /// At open, with no cycle running anywhere: an attempt recorded in flight is orphaned.
    SettleOrphan,
    /// A person acted: the stop for recovery or exhausted retries is lifted
    /// (on the sync state as stored, like every step that writes it).
    Lift,
    /// Ops stopped for exhausted retries start their counts over (an open
    /// with `resumeExhausted`: a person came back, or a background sync a
    /// person asked for by leaving the app). Any job writes it first
    /// (`Driver::lift_exhausted`); this one only makes sure a job runs.
    LiftExhausted,
}

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Driver<S, T, H> {
    /// Runs one sync cycle: push until the outbox is empty, then pull to the head.
    /// Only one cycle runs at a time in this context; another call waits for it.
    pub async fn sync(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.run_cycle(false).await
    }

    /// A cycle for a caller (`paced`: a timer of this context's own, which
    /// no one waits on; else an app's `sync()`, which must see its queue
    /// out). A cycle is paced only if every caller it answers is.
    pub(super) async fn run_cycle(self: &Rc<Self>, paced: bool) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        if !paced {
            self.unpaced.set(true);
        }
        if self.host.offline() {
            // Nothing is sent, so nothing is in doubt: rows stay `pending`. The
            // `online` event (page) or Background Sync (worker) starts the next cycle.
            self.host.wake_when_online();
            let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
            return Ok(SyncOutcome { report, ok: false, retry_at: None, error: Some("offline".into()) });
        }
        // Any cycle that starts after this call answers it: callers that ask
        // while one runs share the next one (a burst of edits is one cycle,
        // not one cycle each).
        let want = self.cycles.get().0 + 1;
        loop {
            let (started, finished) = self.cycles.get();
            if finished >= want {
                if let Some(r) = self.last_cycle.borrow().clone() {
                    return r;
                }
            }
            if !self.busy.get() && started < want {
                break;
            }
            self.idle.next().await;
        }
        self.busy.set(true);
        self.cycles.set((want, self.cycles.get().1));
        // A cycle now: a retry timer set before it has nothing left to do.
        self.timer.set(self.timer.get() + 1);
        self.timer_due.set(None);
        let paced = !self.unpaced.replace(false);
        if paced {
            self.paced_at.set(Some(self.host.now()));
        }
        let resets = self.resets.get();
        let mut r = self.under_lock(Job::Cycle { paced }, false).await;
        if r.is_err() && self.resets.get() != resets {
            // The database was closed under the cycle and came back: the
            // cycle runs again on it (what it had sent is in doubt, resent
            // under the same opIds).
            r = self.under_lock(Job::Cycle { paced }, false).await;
        }
        self.busy.set(false);
        *self.last_cycle.borrow_mut() = Some(r.clone());
        self.cycles.set((self.cycles.get().0, want));
        self.idle.notify();
        self.flush_soon();
        self.pokes_after_cycle();
        r
    }

    /// Asks the server what it remembers of every op sent at least once and
    /// settles what it knows (applied → acknowledged, rejected → dropped with
    /// its reason). Never pushes. Resolves with the report (`reconciled`, `unknown`).
    pub async fn reconcile(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        while self.busy.get() {
            self.idle.next().await;
        }
        self.busy.set(true);
        let r = self.under_lock(Job::Reconcile, false).await;
        self.busy.set(false);
        self.idle.notify();
        self.pokes_after_cycle();
        // An answered check may have lifted a stop: the queue goes out.
        if self.auto_sync && self.engine.borrow().pending_len() > 0 && self.engine.borrow().recovery().is_none() {
            self.schedule_sync(0);
        }
        r
    }

    /// A person confirmed: lift any stop (exhausted retries, a refusal), start
    /// the counts over and sync now.
    pub async fn retry(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        self.check_open()?;
        self.under_lock(Job::Lift, false).await?;
        self.sync().await
    }

    /// One cycle at a time per database across tabs and workers: a job runs
    /// holding the host's cycle lock (with `if_available`, only if no one
    /// holds it — else not at all, and `closed` is the answer).
    pub(super) async fn under_lock(self: &Rc<Self>, job: Job, if_available: bool) -> Result<SyncOutcome, ClientError> {
        let guard = match self.host.lock(if_available).await {
            Ok(Some(g)) => g,
            Ok(None) => return Err(ClientError::Closed),
            Err(e) => return Err(ClientError::StorageFailed(format!("sync lock failed: {e}"))),
        };
        let r = self.run_job(job).await;
        drop(guard);
        r
    }

    /// Runs a job holding the lock: first take the sync state as stored, so
    /// counters and attempts another context moved are built on, not overwritten.
    async fn run_job(self: &Rc<Self>, job: Job) -> Result<SyncOutcome, ClientError> {
        if matches!(job, Job::SettleOrphan) && (self.closed.get() || self.engine.borrow().sync_state().flight.is_none()) {
            // The answer came and was heard while this job waited: nothing to read.
            return Ok(self.nothing_sent());
        }
        let stored = match self.store.read_sync().await {
            Ok(s) => s,
            Err(e) if self.healed(&e).await => self.store.read_sync().await?,
            Err(e) => return Err(e.into()),
        };
        if self.engine.borrow().missed(stored.as_ref()) {
            self.reload().await?;
        } else {
            self.engine.borrow_mut().adopt_sync(stored);
        }
        if self.lift_exhausted.replace(false) {
            let txn = self.engine.borrow_mut().retry_exhausted();
            self.commit_some(txn).await?;
        }
        match job {
            Job::Cycle { paced } => self.cycle(paced).await,
            Job::Reconcile => self.check_with_server().await,
            Job::SettleOrphan | Job::Lift | Job::LiftExhausted => {
                let txn = {
                    let mut e = self.engine.borrow_mut();
                    match job {
                        Job::SettleOrphan => e.settle_orphaned_flight(),
                        Job::Lift => e.clear_recovery(),
                        // Written above, by this job or an earlier one.
                        _ => None,
                    }
                };
                self.commit_some(txn).await?;
                Ok(self.nothing_sent())
            }
        }
    }

    /// The outcome of a job that sent no request: done, at the cursor held.
    fn nothing_sent(&self) -> SyncOutcome {
        let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
        SyncOutcome { report, ok: true, retry_at: None, error: None }
    }

    /// The engine's step and txn, or — when it ignored what it was given (an
    /// answer to something no longer in flight) — a fresh start of the cycle.
    fn or_restart(&self, out: Option<(Txn, Step)>, unsaved: &mut Option<Txn>) -> Step {
        let (txn, step) = out.unwrap_or_else(|| {
            let mut e = self.engine.borrow_mut();
            let owed = e.take_txn().unwrap_or_default();
            let (mut txn, step) = e.start_sync(self.host.now());
            let mut all = owed;
            all.then(std::mem::take(&mut txn));
            (all, step)
        });
        stash(unsaved, txn);
        step
    }

    /// One sync cycle. Before a push leaves, its attempt is committed (with
    /// the previous answer's txn, in one transaction), so every context and
    /// every reload knows the ops are out. A pull's page is committed while
    /// the next pull is on the wire: a crash before that commit only means
    /// the page is asked for again, which idempotent pulls make harmless.
    /// Still one request in flight at a time.
    async fn cycle(self: &Rc<Self>, paced: bool) -> Result<SyncOutcome, ClientError> {
        // The copy of the database this cycle plans for: once it is filled
        // again, what the cycle planned belongs to a copy that is gone.
        let copy = self.resets.get();
        let mut unsaved: Option<Txn> = None;
        let first = if paced {
            self.engine.borrow_mut().start_paced_sync(self.host.now())
        } else {
            self.engine.borrow_mut().start_sync(self.host.now())
        };
        let mut step = self.or_restart(Some(first), &mut unsaved);
        let mut refreshed = false;
        loop {
            step = match step {
                Step::Push(req) => {
                    let key = req.attempt_key.clone();
                    // The token first: an attempt that cannot leave is never recorded as out.
                    if let Err(f) = self.net().prepare().await {
                        let out = self.engine.borrow_mut().on_push_not_sent(&key, f, self.host.now());
                        step = self.or_restart(out, &mut unsaved);
                        continue;
                    }
                    self.commit_planned(unsaved.take(), copy).await?;
                    let out = match self.net().push(&req).await {
                        Ok(resp) => {
                            self.ensure(&|e| e.wants_answer()).await?;
                            self.engine.borrow_mut().on_push_response(resp, self.host.now())
                        }
                        Err(f) => match self.after_refusal(f, &mut refreshed).await {
                            // A fresh token: this attempt is over, the same ops go again at once.
                            Ok(()) => Some(self.engine.borrow_mut().abandon_attempt(&key, self.host.now())),
                            Err(f) => self.engine.borrow_mut().on_push_failed(&key, f, self.host.now()),
                        },
                    };
                    self.or_restart(out, &mut unsaved)
                }
                Step::Reconcile(ids) => {
                    self.commit_planned(unsaved.take(), copy).await?;
                    let out = match self.net().verdicts(&ids).await {
                        Ok(resp) => {
                            self.ensure(&|e| e.wants_answer()).await?;
                            self.engine.borrow_mut().on_verdicts(resp, self.host.now())
                        }
                        Err(f) => self.engine.borrow_mut().on_verdicts_failed(f, self.host.now()),
                    };
                    self.or_restart(out, &mut unsaved)
                }
                Step::Pull(req) => {
                    let (saved, page) = futures_util::future::join(self.commit_planned(unsaved.take(), copy), self.net().pull(&req)).await;
                    saved?;
                    let out = match page {
                        Ok(page) => {
                            self.ensure(&|e| e.wants_pull(&page)).await?;
                            self.engine.borrow_mut().on_pull_response(&req, page, self.host.now())
                        }
                        Err(f) => match self.after_refusal(f, &mut refreshed).await {
                            Ok(()) => None, // a fresh token: the cycle starts again
                            Err(f) => self.engine.borrow_mut().on_pull_failed(&req, f, self.host.now()),
                        },
                    };
                    self.or_restart(out, &mut unsaved)
                }
                Step::Done(report) => {
                    self.log_cycle(&mut unsaved, "done", None);
                    self.commit_planned(unsaved.take(), copy).await?;
                    self.refresh_schema().await;
                    return Ok(SyncOutcome { report, ok: true, retry_at: None, error: None });
                }
                Step::Wait { until, report } => {
                    let error = {
                        let e = self.engine.borrow();
                        let why = e.recovery().map(|r| r.message.clone()).or_else(|| e.last_failure().map(str::to_owned));
                        why.map_or_else(|| "retrying".to_owned(), |w| format!("{w}; retrying"))
                    };
                    self.log_cycle(&mut unsaved, "waiting", Some(error.clone()));
                    self.commit_planned(unsaved.take(), copy).await?;
                    if self.auto_sync {
                        self.schedule_sync(until.saturating_sub(self.host.now()));
                    }
                    // Let the Service Worker push when the network is back, even if this page is gone.
                    self.host.wake_when_online();
                    return Ok(SyncOutcome { report, ok: false, retry_at: Some(until), error: Some(error) });
                }
                Step::Blocked(r) => {
                    self.log_cycle(&mut unsaved, "blocked", Some(r.message.clone()));
                    self.commit_planned(unsaved.take(), copy).await?;
                    // A stop with a probe to come (a refusal) is tried again then.
                    let probe = self.engine.borrow().retry_at();
                    if let (true, Some(at)) = (self.auto_sync, probe) {
                        self.schedule_sync(at.saturating_sub(self.host.now()));
                    }
                    return Err(ClientError::RecoveryRequired { code: r.code.as_str().to_owned(), message: r.message });
                }
            };
        }
    }

    /// Keeps the cycle that ends in the sync state, with the step it ends on.
    fn log_cycle(&self, unsaved: &mut Option<Txn>, outcome: &str, error: Option<String>) {
        let txn = self.engine.borrow_mut().end_cycle(self.host.now(), self.host.label(), outcome, error);
        stash(unsaved, txn);
    }

    /// Commits what the cycle planned, unless the database was filled
    /// again since the cycle began (or is being): steps planned on the lost
    /// copy are never written into the new one (their cursors and rows
    /// would claim what the new copy has not pulled); the cycle ends and
    /// [`Driver::sync`] runs it again.
    async fn commit_planned(&self, txn: Option<Txn>, copy: u64) -> Result<(), ClientError> {
        if self.recovering.get() || self.resets.get() != copy {
            self.storage_settled().await;
            return Err(ClientError::StorageFailed("the database was filled again under this sync cycle".into()));
        }
        self.commit_some(txn).await
    }

    /// After a failed request: a first 401 of the cycle gets a fresh token
    /// (`Ok`: ask again); anything else is the failure to report — the 401
    /// itself when there is no fresh token, the token function's own words
    /// when it failed.
    async fn after_refusal(&self, f: Failure, refreshed: &mut bool) -> Result<(), Failure> {
        let Failure::Unauthorized(_) = &f else { return Err(f) };
        if std::mem::replace(refreshed, true) {
            return Err(f);
        }
        match self.net().refresh_auth().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(f),
            Err(token) => Err(token),
        }
    }

    /// Fetches the server's schema when none is known or a pull named another
    /// version, and stores it (every context takes it from the broadcast).
    /// A failure changes nothing: edits are checked by what is known, and
    /// the next cycle asks again — except a server without `/v1/schema`
    /// (an older one), asked once per open.
    async fn refresh_schema(&self) {
        if self.schema_unsupported.get() {
            return;
        }
        let etag = match self.engine.borrow().schema_wanted() {
            None => return,
            Some(etag) => etag.map(str::to_owned),
        };
        match self.net().schema(etag.as_deref()).await {
            Ok(Some((text, etag))) => {
                let learned = self.engine.borrow_mut().learn_schema(text, etag);
                match learned {
                    Some(txn) => {
                        let _ = self.commit_some(Some(txn)).await;
                    }
                    None => self.schema_unsupported.set(true),
                }
            }
            Ok(None) => {}
            Err(Failure::Refused(_)) => self.schema_unsupported.set(true),
            Err(_) => {}
        }
    }

    /// A person's check with the server, under the lock: one question, one commit.
    async fn check_with_server(self: &Rc<Self>) -> Result<SyncOutcome, ClientError> {
        let (txn, step) = self.engine.borrow_mut().start_reconcile();
        self.commit_some(Some(txn)).await?;
        let Step::Reconcile(ids) = step else {
            let report = SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() };
            return Ok(SyncOutcome { report, ok: true, retry_at: None, error: None });
        };
        let (out, error) = match self.net().verdicts(&ids).await {
            Ok(resp) => {
                self.ensure(&|e| e.wants_answer()).await?;
                (self.engine.borrow_mut().on_verdicts(resp, self.host.now()), None)
            }
            Err(f) => (self.engine.borrow_mut().on_verdicts_failed(f.clone(), self.host.now()), Some(f.to_string())),
        };
        let Some((txn, step)) = out else {
            return Err(ClientError::StorageFailed("the check with the server was superseded".into()));
        };
        self.commit_some(Some(txn)).await?;
        let report = match step {
            Step::Done(r) => r,
            _ => SyncReport { cursor: self.engine.borrow().cursor(), ..SyncReport::default() },
        };
        Ok(SyncOutcome { report, ok: error.is_none(), retry_at: None, error })
    }
}

/// Adds `txn` to the steps waiting to be committed (they commit as one).
fn stash(unsaved: &mut Option<Txn>, txn: Txn) {
    if txn.is_empty() {
        return;
    }
    match unsaved {
        Some(u) => u.then(txn),
        None => *unsaved = Some(txn),
    }
}
