//! Concurrent overwrites (PROTOCOL §2a): an edit of a field that lost to an
//! edit made without knowledge of it, told to the device whose edit lost.
//!
//! **Knowledge is the cursor.** Every op carries `seen`, how far its device
//! had pulled the op's space when the op was made. A value written at seq
//! `s` was known to an op iff `seen >= s` ([`knew`]). Each cell keeps the seq
//! at which it took its value ([`CellNote::seq`]), so the judge can tell,
//! field by field:
//!
//! - **an op that replaces a value its device had not pulled** (`seen < s`)
//!   overwrote it concurrently — the value's author could not have known
//!   the op either, which had never been judged;
//! - **an op that loses a field to a value its device had not pulled**
//!   was overwritten concurrently (the clock rule, §2, makes an op made
//!   after pulling a value win over it, so a loss to a known value is rare:
//!   a clock ahead beyond the op's own).
//!
//! Never an overwrite: two ops of one device (its own later edit is an
//! ordinary change), a value replaced by the same value (nothing was lost),
//! the protocol's `_` fields, and an op from a device too old to send `seen`.
//!
//! The judge records each overwrite on the cell ([`note`]); later writes of
//! the cell carry the record (the newest [`MAX_OVERWRITES_PER_CELL`]), so a
//! device that pulls the row at any later seq still learns what it lost.
//! The device keeps the ones of its own ops ([`found_in`]) as [`Conflict`]s
//! until a person dismisses them. One rule, here, for server and device.

use serde::{Deserialize, Serialize};

use crate::ids::device_of;
use crate::protocol::{CellNote, Op, Overwrite, Row, RowKey, Side};

/// The most overwrites one cell carries; the oldest goes first.
pub const MAX_OVERWRITES_PER_CELL: usize = 4;

/// The most conflicts a device keeps (dismissed ones too, so that a
/// dismissed one carried again by a later copy of its row stays
/// dismissed); past it the one whose lost edit is oldest goes first.
pub const MAX_CONFLICTS: usize = 256;

/// Whether an op whose device had pulled its space up to `seen` knew of a
/// value written there at seq `seq`.
#[inline]
pub fn knew(seen: u64, seq: u64) -> bool {
    seen >= seq
}

/// Whether an op with `seen` that meets a value written at `written` by op
/// `other` meets it without knowledge of it: both seqs known, the value
/// not yet pulled, and another device's op.
fn unaware(op: &Op, written: Option<u64>, other: &crate::protocol::OpId) -> bool {
    match (op.seen, written) {
        (Some(seen), Some(seq)) => !knew(seen, seq) && device_of(other) != device_of(&op.op_id),
        _ => false,
    }
}

/// Adds `o` to a cell's overwrites, keeping the newest few. `false` if the
/// cell already told of that loss.
fn push(overwrites: &mut Vec<Overwrite>, o: Overwrite) -> bool {
    if overwrites.iter().any(|x| x.lost.op_id == o.lost.op_id) {
        return false;
    }
    overwrites.push(o);
    if overwrites.len() > MAX_OVERWRITES_PER_CELL {
        let extra = overwrites.len() - MAX_OVERWRITES_PER_CELL;
        overwrites.drain(..extra);
    }
    true
}

/// Notes what `op` did to `row`, the row just after it (`before`: the row
/// as stored), as the write at `seq` in its space; `by` is the sender in a
/// shared space. Every cell the op set takes `seq` and `by` and keeps the
/// overwrites its old value carried, plus one if the op replaced that value
/// without knowing it; every field the op lost to a value its device had
/// not pulled records the op as overwritten. Returns whether it recorded
/// such a loss: then the row must be written (taking `seq`) though no mark
/// moved, so that the loser's devices hear of it.
pub fn note(op: &Op, by: Option<&std::sync::Arc<str>>, before: Option<&Row>, row: &mut Row, seq: u64) -> bool {
    let mut lost = false;
    let Row { cells, notes } = row;
    for (field, cell) in cells.iter() {
        if field.starts_with('_') {
            continue;
        }
        if cell.mark.op_id == op.op_id {
            let old = before.and_then(|b| b.cells.get(field));
            let old_note = before.and_then(|b| b.note(field));
            let mut overwrites = old_note.map(|n| n.overwrites.clone()).unwrap_or_default();
            if let Some(old) = old.filter(|o| o.value != cell.value && o.mark.op_id != op.op_id) {
                if unaware(op, old_note.and_then(|n| n.seq), &old.mark.op_id) {
                    let lost = Side {
                        value: old.value.clone(),
                        at: old.mark.at,
                        op_id: old.mark.op_id.clone(),
                        user: old_note.and_then(|n| n.by.clone()),
                    };
                    let won = Side { value: cell.value.clone(), at: op.at, op_id: op.op_id.clone(), user: by.cloned() };
                    push(&mut overwrites, Overwrite { lost, won });
                }
            }
            let note = CellNote { seq: Some(seq), by: by.cloned(), overwrites };
            // Every cell an op sets takes a note: room for all at once.
            let notes = notes.get_or_insert_with(|| Box::new(litemap::LiteMap::with_capacity(cells.len())));
            crate::protocol::put(notes, field.clone(), note);
        } else if let Some(mine) = op.fields.get(field.as_str()) {
            let note = notes.as_ref().and_then(|n| n.get(field.as_str()));
            if *mine == cell.value || !unaware(op, note.and_then(|n| n.seq), &cell.mark.op_id) {
                continue;
            }
            let won =
                Side { value: cell.value.clone(), at: cell.mark.at, op_id: cell.mark.op_id.clone(), user: note.and_then(|n| n.by.clone()) };
            let lost_side = Side { value: mine.clone(), at: op.at, op_id: op.op_id.clone(), user: by.cloned() };
            let note = notes.get_or_insert_with(Default::default).entry(field.clone()).or_default();
            lost |= push(&mut note.overwrites, Overwrite { lost: lost_side, won });
        }
    }
    lost
}

/// An edit of this device that lost to a concurrent one: `db.conflicts()`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    /// `<opId of the lost edit>/<field>`: the same on every context of the device.
    pub id: String,
    /// The row's table.
    pub table: String,
    /// The row's name.
    pub row_id: String,
    /// The shared space the row lives in; absent: the personal space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// The field.
    pub field: String,
    /// The edit of this device that lost.
    pub mine: Side,
    /// The edit that replaced it, with its author in a shared space.
    pub theirs: Side,
    /// A person dismissed it: kept (so a later copy of the row does not
    /// bring it back) but no longer listed.
    #[serde(default)]
    pub dismissed: bool,
}

/// The conflicts of `device` that a copy of a row from the server tells of:
/// every overwrite its cells carry of an op born on this device. `space`
/// is the row's space as the device names it (`None`: the personal one).
pub fn found_in<'a>(device: &'a str, key: &'a RowKey, space: Option<&'a str>, row: &'a Row) -> impl Iterator<Item = Conflict> + 'a {
    row.notes.iter().flat_map(|n| n.iter()).flat_map(move |(field, note)| {
        note.overwrites.iter().filter(move |o| device_of(&o.lost.op_id) == device).map(move |o| Conflict {
            id: format!("{}/{field}", o.lost.op_id),
            table: key.table.clone(),
            row_id: key.row_id.clone(),
            space: space.map(str::to_owned),
            field: field.clone(),
            mine: Side { user: None, ..o.lost.clone() },
            theirs: o.won.clone(),
            dismissed: false,
        })
    })
}

#[cfg(test)]
mod tests;
