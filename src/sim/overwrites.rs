//! The truth of PROTOCOL §2a, from the server's whole history: which edits
//! lost a field to a concurrent one. Worked out here from the journal of
//! applied ops alone — never from the notes the judge wrote — so the
//! simulator can hold the devices' conflicts against it.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::device_of;
use crate::memory_server::Judged;
use crate::order::newer;
use crate::protocol::{Mark, OpId, Value};

/// A lost edit: the op and the field.
pub type Lost = (OpId, String);

/// Where a field lives: (space, table, rowId, field).
type Place = (String, String, String, String);

/// What the truth says: every lost edit, and how many lost edits each
/// field saw (a field that saw more than a cell carries may have dropped
/// the oldest before its loser's device pulled).
#[derive(Debug, Default)]
pub struct Truth {
    /// Edits that lost a field to a concurrent one.
    pub lost: BTreeMap<Lost, Place>,
    /// Lost edits per field.
    pub per_field: BTreeMap<Place, usize>,
}

/// Replays `journal` field by field: an op that beats a value its device had
/// not pulled (`seen` below the value's seq) overwrote it concurrently; an
/// op that loses to a value its device had not pulled was overwritten
/// concurrently — neither between two ops of one device, nor when the value
/// stays the same.
pub fn truth(journal: &[Judged]) -> Truth {
    let mut cells: BTreeMap<Place, (Value, Mark, u64)> = BTreeMap::new();
    let mut out = Truth::default();
    for j in journal {
        let op = &j.op;
        for (field, value) in &op.fields {
            if field.starts_with('_') {
                continue;
            }
            let place: Place = (j.space.clone(), op.table.clone(), op.row_id.clone(), field.clone());
            let mark = op.mark();
            let Some((old, old_mark, seq)) = cells.get(&place).cloned() else {
                if let Some(s) = j.seq {
                    cells.insert(place, (value.clone(), mark, s));
                }
                continue;
            };
            let unaware = op.seen.is_some_and(|n| n < seq) && device_of(&old_mark.op_id) != device_of(&op.op_id) && old != *value;
            if newer(&mark, &old_mark) {
                if unaware {
                    out.lost.insert((old_mark.op_id.clone(), field.clone()), place.clone());
                    *out.per_field.entry(place.clone()).or_default() += 1;
                }
                if let Some(s) = j.seq {
                    cells.insert(place, (value.clone(), mark, s));
                }
            } else if unaware {
                out.lost.insert((op.op_id.clone(), field.clone()), place.clone());
                *out.per_field.entry(place).or_default() += 1;
            }
        }
    }
    out
}

/// Holds what one device tells against the truth: every conflict it lists
/// is a lost edit (its own, or an earlier copy's it put back after its site
/// data was cleared); every lost edit of its own is listed, unless
/// its field saw more lost edits than a cell carries. `Err` says what broke.
/// `reads(space)`: whether the device's user may read the space now (a
/// device holds no row of a space its user left, and hears nothing of it).
pub fn check(truth: &Truth, device: &str, told: &BTreeSet<Lost>, reads: impl Fn(&str) -> bool) -> Result<(), String> {
    for (op, field) in told {
        if !truth.lost.contains_key(&(op.clone(), field.clone())) {
            return Err(format!("conflict {op}/{field} is no concurrent lost write"));
        }
    }
    for ((op, field), place) in &truth.lost {
        let carried = truth.per_field.get(place).is_some_and(|n| *n <= crate::conflict::MAX_OVERWRITES_PER_CELL);
        if device_of(op) == device && carried && reads(&place.0) && !told.contains(&(op.clone(), field.clone())) {
            return Err(format!("{op} lost {field} to a concurrent edit and its device was not told"));
        }
    }
    Ok(())
}
