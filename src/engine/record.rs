//! Recording edits: shapes checked, numbers and `at`s taken inside the store
//! transaction that read the stored meta, so that engines sharing a database
//! never reuse either.

use super::{Engine, EngineError};
use crate::ids::{self, IdBlock};
use crate::protocol::{check_fields, check_row_id, check_table, Fields, Op, RowKey, ShapeError, Value, DELETED};
use crate::store::{Meta, Txn};

/// A checked edit, not yet recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The shared space it goes to; `None`: the personal space.
    pub(super) space: Option<String>,
    pub(super) table: String,
    pub(super) row_id: String,
    pub(super) fields: Fields,
}

impl Draft {
    /// Where the edited row lives on the device.
    pub fn place(&self) -> RowKey {
        RowKey::in_space(self.space.clone().unwrap_or_default(), self.table.as_str(), self.row_id.as_str())
    }
}

/// An op planned inside a store transaction; hand it back to
/// [`Engine::recorded`] once that transaction committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The ops, as stored, in the order of their drafts.
    pub ops: Vec<Op>,
    meta: Meta,
    block: Option<IdBlock>,
    /// The rows the step named (no base row of them exists anywhere).
    named: Vec<RowKey>,
}

impl Engine {
    /// How many reserved numbers are left before a new block is needed.
    pub fn ids_left(&self) -> u64 {
        if self.ids.is_empty() {
            0
        } else {
            self.ids.last - self.ids.next + 1
        }
    }

    /// Plans the reservation of a new block of numbers, to write in a store
    /// transaction that read `stored` (the meta record in the database).
    pub fn plan_reserve(&self, stored: &Meta) -> (Txn, IdBlock) {
        plan_block(&self.meta.join(stored), self.config.id_block)
    }

    /// Gives up the ids this engine still holds (to the engine that takes
    /// its place: they are reserved on disk for this context).
    pub fn take_ids(&mut self) -> IdBlock {
        std::mem::take(&mut self.ids)
    }

    /// Holds `block`, reserved on disk for this context (by another engine).
    pub fn hold_ids(&mut self, block: IdBlock) {
        self.meta.counter = self.meta.counter.max(block.last);
        self.ids = block;
    }

    /// The reservation committed: the block is this engine's.
    pub fn reserved(&mut self, block: IdBlock, stored: &Meta) {
        self.meta = self.meta.join(stored);
        self.hold_ids(block);
    }

    /// A new rowId (`<deviceId>-<n>`) from the reserved block.
    pub fn new_row_id(&mut self) -> Result<String, EngineError> {
        let n = self.ids.take().ok_or(EngineError::IdsExhausted)?;
        Ok(ids::row_id(&self.meta.device_id, n))
    }

    /// Checks an edit's shapes (PROTOCOL §1–2) for the row where it lives
    /// ([`Engine::locate`]), or a new row of the personal space. Changes nothing.
    pub fn draft(&self, table: &str, row_id: &str, fields: Fields) -> Result<Draft, EngineError> {
        self.draft_in(None, table, row_id, fields)
    }

    /// [`Engine::draft`] in `space` when one is named (a shared space's
    /// name, or a personal space's: this user's own is the unnamed one).
    /// Refused at once, with the judge's code and words, when the device
    /// knows the user may not write there: a viewer (`read_only`), or a
    /// space the user left (`forbidden`). A space the device has not heard
    /// of yet is the server's to judge.
    pub fn draft_in(&self, space: Option<&str>, table: &str, row_id: &str, fields: Fields) -> Result<Draft, EngineError> {
        if self.hides_rows() {
            // The person editing is not the database's owner: their edit
            // must not join the owner's queue (PROTOCOL §5, 403 `wrong_user`).
            let why = self.recovery().map_or_else(String::new, |r| r.message.clone());
            return Err(EngineError::TokenOfAnotherUser(why));
        }
        let path = |p: &str, what: &str| ShapeError { path: p.into(), problem: what.into() };
        check_table(table).map_err(|w| path("table", w))?;
        check_row_id(row_id).map_err(|w| path("rowId", w))?;
        check_fields(&fields).map_err(|e| path(&format!("fields{}", e.path), &e.problem))?;
        let local = match space {
            Some(name) => {
                crate::space::check_space(name).map_err(|w| path("space", w))?;
                let local = self.following.local(name);
                if self.following.personal.is_none() && crate::space::personal_owner(local).is_some() {
                    // It may be this user's own: its rows would be keyed twice.
                    return Err(
                        path("space", "this device has not learned its personal space's name yet: sync first, or name no space").into()
                    );
                }
                local.to_owned()
            }
            None => self.locate(table, row_id).map(|k| k.space).unwrap_or_default(),
        };
        self.following.may_write(&local)?;
        let space = (!local.is_empty()).then_some(local);
        Ok(Draft { space, table: table.into(), row_id: row_id.into(), fields })
    }

    /// A draft of a new row that the step recording it names
    /// (`<deviceId>-<n>`, from the device's counter): a bulk import names a
    /// million rows without asking for a million ids. In `space`, or the
    /// personal space.
    pub fn draft_new(&self, space: Option<&str>, table: &str, fields: Fields) -> Result<Draft, EngineError> {
        // Shapes and the space's rule, by a stand-in name; the real one comes at recording.
        let mut draft = self.draft_in(space, table, &ids::row_id(&self.meta.device_id, 0), fields)?;
        draft.row_id.clear();
        Ok(draft)
    }

    /// A draft that marks a row deleted (`true`) or restores it (`false`),
    /// where it lives (or in `space`).
    pub fn draft_deleted(&self, space: Option<&str>, table: &str, row_id: &str, deleted: bool) -> Result<Draft, EngineError> {
        let mut f = Fields::new();
        f.insert(DELETED.into(), Value::Bool(deleted));
        self.draft_in(space, table, row_id, f)
    }

    /// Turns a draft into an op, inside the store transaction that read
    /// `stored`: takes a number (reserving a block if needed) and an `at`.
    /// Write the returned txn; then call [`Engine::recorded`].
    pub fn plan_record(&mut self, draft: Draft, stored: &Meta, now: u64) -> Result<(Txn, Recorded), EngineError> {
        self.plan_records(vec![draft], stored, now)
    }

    /// [`Engine::plan_record`] for many drafts at once: one step, so they are
    /// recorded together or not at all, each with its own number and `at`
    /// (increasing in the order given). Fails with
    /// [`EngineError::ClockExhausted`] — and plans nothing — when the device
    /// has no later `at` left: an op never takes another's `at` (its key in
    /// the outbox).
    pub fn plan_records(&mut self, drafts: Vec<Draft>, stored: &Meta, now: u64) -> Result<(Txn, Recorded), EngineError> {
        let mut meta = self.meta.join(stored);
        let mut block = None::<IdBlock>;
        let mut ops = Vec::with_capacity(drafts.len());
        let mut named = Vec::new();
        // Numbers are taken from a copy: a refused step must not use any up.
        let mut mine = self.ids;
        let size = self.config.id_block;
        // Numbers of the engine's block first, then of blocks reserved in this step.
        let mut number = |meta: &mut Meta| -> Result<u64, EngineError> {
            if let Some(n) = mine.take().or_else(|| block.as_mut().and_then(IdBlock::take)) {
                return Ok(n);
            }
            let mut b = IdBlock::default();
            meta.counter = b.reserve_after(meta.counter, size);
            let n = b.take().ok_or(EngineError::IdsExhausted)?;
            block = Some(b);
            Ok(n)
        };
        for draft in drafts {
            let at = meta.clock.advance(now).ok_or(EngineError::ClockExhausted)?;
            // A new row the app did not name is named here, from the same counter.
            let row_id = if draft.row_id.is_empty() {
                let n = number(&mut meta)?;
                let id = ids::row_id(&meta.device_id, n);
                named.push(RowKey::in_space(draft.space.clone().unwrap_or_default(), draft.table.as_str(), id.as_str()));
                id
            } else {
                draft.row_id
            };
            let n = number(&mut meta)?;
            // What the op's author could know: how far this device had pulled
            // its space (the personal one's cursor may be older than the
            // followed record: a device from before spaces).
            let personal = draft.space.as_deref().is_none_or(|s| self.following.personal.as_deref() == Some(s));
            let seen = self.following.cursor_of(draft.space.as_deref()).max(if personal { meta.cursor } else { 0 });
            ops.push(Op {
                op_id: ids::op_id(&meta.device_id, n),
                table: draft.table,
                row_id,
                fields: draft.fields,
                at,
                schema: self.config.schema,
                space: draft.space,
                seen: Some(seen),
            });
        }
        self.ids = mine;
        // The record is written only for a block reserved here: the ops' keys
        // hold their `at`s (PROTOCOL §7, "The last `at` taken").
        let txn = Txn { meta: block.is_some().then(|| meta.clone()), put_pending: ops.clone(), ..Txn::default() };
        Ok((txn, Recorded { ops, meta, block, named }))
    }

    /// The record transaction committed: the op is queued and visible.
    pub fn recorded(&mut self, rec: Recorded) {
        self.meta = self.meta.join(&rec.meta);
        if let Some(b) = rec.block {
            self.ids = b;
        }
        for key in &rec.named {
            self.replica.note_absent(key);
        }
        for op in rec.ops {
            self.replica.add_pending(&op);
            self.outbox.insert(op);
        }
    }
}

/// The txn that reserves a block of `size` numbers after `meta`'s counter,
/// and the block. An engine plans from its meta joined with the stored one;
/// a context with no engine yet (opening the store again) from the stored one.
pub fn plan_block(meta: &Meta, size: u64) -> (Txn, IdBlock) {
    let mut meta = meta.clone();
    let mut block = IdBlock::default();
    meta.counter = block.reserve_after(meta.counter, size);
    (Txn { meta: Some(meta), ..Txn::default() }, block)
}
