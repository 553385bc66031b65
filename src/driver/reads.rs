//! Base rows read before the steps that need them (PROTOCOL §7, "The lazy
//! store"): the engine names what a step reads, this reads what it does not
//! hold and hands it over, and the step runs with nothing awaited between
//! the last check and the step — so no other task can take the rows away
//! in between. Rows are let go between steps, never during one.

use std::collections::VecDeque;
use std::rc::Rc;

use super::{ClientError, Driver, Host, LocalStore, Transport};
use crate::engine::Engine;
use crate::store::{Txn, Want};

/// How many times a step's rows are read before it runs anyway: another
/// context's writes can move what a read answers, never forever.
const READS_PER_STEP: usize = 8;

/// Steps of other contexts heard while their rows were being read, taken
/// in in the order they came.
#[derive(Default)]
pub(super) struct Heard {
    queue: std::cell::RefCell<VecDeque<Txn>>,
    draining: std::cell::Cell<bool>,
    /// A flush of the rows written since open is under way.
    flushing: std::cell::Cell<bool>,
}

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Driver<S, T, H> {
    /// Reads what `wants` names and the engine does not hold, until it
    /// holds it all. Call it right before the step, with nothing awaited
    /// after it.
    pub async fn ensure(&self, wants: &dyn Fn(&mut Engine) -> Vec<Want>) -> Result<(), ClientError> {
        for _ in 0..READS_PER_STEP {
            let missing = {
                let mut e = self.engine.borrow_mut();
                let w = wants(&mut e);
                e.missing(w)
            };
            if missing.is_empty() {
                return Ok(());
            }
            self.read_into_engine(&missing).await?;
        }
        Err(ClientError::StorageFailed("the rows a step reads could not all be read".into()))
    }

    /// Reads `missing` and hands it to the engine (one copy of the read in
    /// the wasm, whatever asks for it).
    async fn read_into_engine(&self, missing: &[Want]) -> Result<(), ClientError> {
        let got = self.store.read_base(missing).await?;
        self.engine.borrow_mut().provide(got)?;
        Ok(())
    }

    /// Reads every base row (what a check of all visible rows needs).
    pub async fn ensure_all(&self) -> Result<(), ClientError> {
        self.ensure(&|_| vec![Want::all()]).await
    }

    /// `q` over the indexes kept on disk (PROTOCOL §7, "Queries over
    /// indexes on disk"): its entries, then its rows, read as the engine
    /// asks. `None`: no index on disk serves it (read the table whole).
    pub async fn query_on_disk(
        &self,
        table: &str,
        q: &crate::query::Query,
    ) -> Result<Option<Vec<(crate::protocol::RowKey, crate::protocol::Row)>>, ClientError> {
        let Some(mut lq) = self.engine.borrow().lazy_query(table, q) else { return Ok(None) };
        // What changed since the last step was heard (rows a read found newer) first.
        self.refresh_watches();
        if let Some(rows) = self.watches.answer(table, q) {
            return Ok(Some(rows));
        }
        let told = self.watches.told();
        let mut reads = 0;
        loop {
            let next = self.engine.borrow_mut().lazy_next(&mut lq);
            match next {
                crate::engine::Next::Done(rows) => {
                    self.watches.keep(told, table, q, &rows);
                    return Ok(Some(rows));
                }
                crate::engine::Next::Entries(range) => {
                    reads = 0;
                    let (got, rows) = self.store.read_entries_with_rows(&range).await?;
                    // The rows not held yet (each read is a span to join).
                    let mut e = self.engine.borrow_mut();
                    let rows: Vec<_> = rows
                        .into_iter()
                        .filter(|p| !e.missing(vec![crate::store::Want { from: p.from.clone(), to: p.to.clone() }]).is_empty())
                        .collect();
                    e.provide(rows)?;
                    drop(e);
                    lq.took(&range, got);
                }
                crate::engine::Next::Rows(missing) => {
                    reads += 1;
                    if reads > READS_PER_STEP {
                        return Err(ClientError::StorageFailed("the rows a query reads could not all be read".into()));
                    }
                    // The rows alone, not their chunks: a page of many chunks stays small.
                    let got = crate::replica::narrow(self.store.read_base(&missing).await?, &missing)?;
                    self.engine.borrow_mut().provide(got)?;
                }
            }
        }
    }

    /// Reads a whole table, kept whole from now on (queries, full reads).
    pub async fn ensure_table(&self, table: &str) -> Result<(), ClientError> {
        self.ensure(&|e| vec![e.wants_table(table)]).await
    }

    /// Lets base rows go beyond the cache's budget, unless a recording is
    /// between its read and its step; and flushes the rows written since
    /// open once there are many, when nothing of this context is under way.
    pub fn trim(&self) {
        if self.recording.get() == 0 {
            self.engine.borrow_mut().trim();
        }
        self.flush_soon();
    }

    /// Over a lazy store, rows written since open are held decoded until
    /// the store holds them in its chunks: once there are many, and no job,
    /// recording or heard step of this context is under way (so every one
    /// of them is committed), the store compacts and they are let go.
    pub(super) fn flush_soon(&self) {
        let quiet = !self.busy.get() && self.recording.get() == 0 && self.heard.queue.borrow().is_empty() && !self.heard.flushing.get();
        if !quiet {
            return;
        }
        let Some(mark) = self.engine.borrow().flush_mark() else { return };
        let Some(me) = self.me.upgrade() else { return };
        self.heard.flushing.set(true);
        self.host.spawn(Box::pin(async move {
            // A compaction that fails leaves the rows held: tried again after a later step.
            if me.store.compact().await.is_ok() {
                let _ = me.engine.borrow_mut().flushed(mark);
            }
            me.heard.flushing.set(false);
        }));
    }

    /// Another context's step: taken in now if every row it reads is held
    /// and nothing heard before it waits; else queued behind what waits.
    pub(super) fn hear(self: &Rc<Self>, txn: &Txn) -> bool {
        let ready = self.heard.queue.borrow().is_empty() && {
            let e = self.engine.borrow();
            e.missing(e.wants_absorb(txn)).is_empty()
        };
        if ready {
            return true;
        }
        self.heard.queue.borrow_mut().push_back(txn.clone());
        if !self.heard.draining.replace(true) {
            let me = self.clone();
            self.host.spawn(Box::pin(async move { me.drain_heard().await }));
        }
        false
    }

    async fn drain_heard(self: Rc<Self>) {
        loop {
            let Some(txn) = self.heard.queue.borrow().front().cloned() else { break };
            // A read that fails leaves the step to a reload: the store has it.
            if self.ensure(&|e| e.wants_absorb(&txn)).await.is_err() {
                self.heard.queue.borrow_mut().clear();
                let _ = self.reload().await;
                break;
            }
            self.heard.queue.borrow_mut().pop_front();
            self.take_in(&txn);
        }
        self.heard.draining.set(false);
    }
}
