//! What a step reads of the base rows, asked of the store before it runs
//! (PROTOCOL §7, "The lazy store"). An engine opened on a lazy store holds
//! only the base rows it asked for; each step that reads rows names them
//! first ([`Want`]), the driver reads the ones not held and hands them over
//! ([`Engine::provide`]), and only then runs the step — so the step itself
//! stays a pure function of what the engine holds. Over a store that reads
//! every row at open nothing is ever missing.

use super::{Engine, EngineError};
use crate::protocol::{RowKey, SpacesPullResponse};
use crate::store::{Provided, Txn, Want};

/// The bytes of base rows a lazy engine keeps read between steps, unless
/// told otherwise ([`super::Config::cache_bytes`]).
pub const CACHE_BYTES: usize = 16 << 20;

impl Engine {
    /// Of `wants`, what is not held: what to read before the step.
    pub fn missing(&self, wants: Vec<Want>) -> Vec<Want> {
        self.replica.missing(wants)
    }

    /// Takes base rows the store read.
    pub fn provide(&mut self, provided: Vec<Provided>) -> Result<(), EngineError> {
        for p in provided {
            self.replica.provide(p)?;
        }
        Ok(())
    }

    /// Lets go of base rows read from the store beyond the cache's budget,
    /// least recently read first: between steps, never during one. The
    /// tables read whole (an index, a query, a full read) stay: what a
    /// live query reads after every step must not be read again each time.
    pub fn trim(&mut self) {
        let whole: Vec<Want> = self.whole.iter().map(|t| Want::table(t)).collect();
        self.replica.trim(self.config.cache_bytes, |from, to| whole.iter().any(|w| w.meets(from, to)));
    }

    /// Over a lazy store: the rows written since open are many enough to
    /// be let go once the store holds them in its chunks — a mark of them
    /// to hand back to [`Engine::flushed`] after the store compacted.
    pub fn flush_mark(&self) -> Option<Vec<(RowKey, Option<crate::protocol::Row>)>> {
        self.replica.wants_flush().then(|| self.replica.flush_mark())
    }

    /// The store compacted after `mark` was taken: what it marks is let go.
    pub fn flushed(&mut self, mark: Vec<(RowKey, Option<crate::protocol::Row>)>) -> Result<(), EngineError> {
        Ok(self.replica.flushed(mark)?)
    }

    /// What the base rows read from the store weigh now (bytes).
    pub fn held(&self) -> usize {
        self.replica.held()
    }

    /// What an edit of `table/row_id` reads: the row, in whichever space it lives.
    pub fn wants_edit(table: &str, row_id: &str) -> Want {
        Want::named(table, row_id)
    }

    /// What a read of a whole table reads; the table is then kept whole.
    pub fn wants_table(&mut self, table: &str) -> Want {
        self.keep_whole(table);
        Want::table(table)
    }

    /// Keeps `table` whole from now on: [`Engine::trim`] lets none of its
    /// rows go (no allocation once it is kept).
    pub(super) fn keep_whole(&mut self, table: &str) {
        self.whole.insert(table);
    }

    /// What an answer about queued ops reads (a push's verdicts, or the
    /// remembered ones): the rows of every queued op.
    pub fn wants_answer(&self) -> Vec<Want> {
        rows(self.outbox.iter().map(|op| op.place()).collect())
    }

    /// What a pull page reads: the rows it changes, where the device keeps
    /// them; every row, when it says the user left a space (its rows go).
    pub fn wants_pull(&self, answer: &SpacesPullResponse) -> Vec<Want> {
        let mut following = self.following.clone();
        if !following.learn(answer).left.is_empty() {
            return vec![Want::all()];
        }
        let mut keys: Vec<RowKey> = Vec::new();
        for page in &answer.spaces {
            let local = following.local(&page.space);
            keys.extend(page.changes.iter().map(|c| RowKey::in_space(local, c.key.table.as_str(), c.key.row_id.as_str())));
        }
        rows(keys)
    }

    /// What taking in another context's step reads: the rows whose queued
    /// ops it adds or takes away (their visible rows are built again).
    pub fn wants_absorb(&self, txn: &Txn) -> Vec<Want> {
        let mut keys: Vec<RowKey> = Vec::new();
        keys.extend(txn.put_pending.iter().map(|op| op.place()));
        keys.extend(txn.delete_pending.iter().filter_map(|at| self.outbox.at(*at)).map(|op| op.place()));
        // A base row it puts is taken whole; read only where an index must
        // take out what the row was.
        keys.extend(txn.put_base.iter().filter(|(k, _)| self.whole.contains(&k.table)).map(|(k, _)| k.clone()));
        rows(keys)
    }
}

/// One want per row, each once (sorted, not collected into a set: one
/// more tree type costs the wasm kilobytes).
fn rows(mut keys: Vec<RowKey>) -> Vec<Want> {
    keys.sort_unstable();
    keys.dedup();
    keys.iter().map(Want::row).collect()
}
