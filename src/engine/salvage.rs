//! When the database is taken from under the library (the site's data
//! cleared, storage evicted, a connection closed by the browser), the
//! context still holds in memory what the disk lost: the outbox, the
//! refusals, the numbers taken. PROTOCOL §7 "A database closed under the
//! library": the context says so at once, opens the database again and puts
//! back what it holds — every queued op under its own opId (the server
//! judges each once, so what it already applied comes back `duplicate`),
//! every refusal with its words — while the rows come back by pull from the
//! start. Nothing held in memory is lost; what no running context held
//! cannot be known (the clear takes every trace of it).

use super::Engine;
use crate::attempt::Recovery;
use crate::following::Following;
use crate::protocol::{Code, OpId};
use crate::store::{Meta, Snapshot, Txn};

/// The words a person reads while the device syncs its copy again.
pub fn cleared_message(kept: usize) -> String {
    match kept {
        0 => CLEARED.to_owned(),
        1 => format!("{CLEARED} 1 edit not yet confirmed by the server was kept and is sent again."),
        n => format!("{CLEARED} {n} edits not yet confirmed by the server were kept and are sent again."),
    }
}

/// How the notice of a cleared copy begins (and how it is told from a storage failure).
const CLEARED: &str = "This device's copy was cleared — syncing it again.";

/// Whether a recovery is the notice of a cleared copy being synced again:
/// it never stops sync (the sync is the cure) and the first complete cycle lifts it.
pub(super) fn is_resync(r: &Recovery) -> bool {
    r.code == Code::Storage && r.message.starts_with(CLEARED)
}

impl Engine {
    /// The database was found closed under this context: no request of it
    /// can be answered into the database any more, so nothing reads
    /// `awaiting-ack` — the status says what happened until the copy is back.
    pub fn storage_lost(&mut self) {
        let held = self.outbox.len();
        if let Some(f) = self.sync.flight.take() {
            for id in &f.op_ids {
                if let Some(a) = self.sync.ops.get_mut(id) {
                    a.unknown = true;
                }
            }
        }
        self.in_flight = None;
        self.pull_in_flight = None;
        self.reconcile_in_flight = None;
        if self.sync.recovery.as_ref().is_none_or(|r| !is_resync(r)) {
            self.sync.metrics.recovery_required += 1;
        }
        self.sync.recovery = Some(Recovery { code: Code::Storage, message: cleared_message(held) });
        self.touch();
    }

    /// The meta record to open the database again with, if it came back
    /// empty: a new device (`device_id`: the numbers other contexts had
    /// reserved in the lost database are known to no one, so this copy names
    /// rows and ops afresh), this context's clock (an op put back keeps its
    /// `at`, and later ones come after it), and no rows yet.
    pub fn salvage_meta(&self, device_id: String) -> Meta {
        Meta { device_id, counter: 0, cursor: 0, clock: self.meta.clock }
    }

    /// What to write into the database opened again, `disk` being what it
    /// holds now. Cleared (no sync state, no rows, no queue): everything this
    /// context holds but the rows — meta with cursor 0, the outbox, the
    /// refusals, the sync state (the ops sent are in doubt; the notice; one
    /// more reset counted), the known schema, and the followed spaces reduced
    /// to the user and the spaces left, so every space is pulled from its
    /// start. Already put back by another context (the disk names another
    /// device: each copy filled again is a new one): the queued ops and
    /// refusals the disk lacks, and this context's clock.
    /// Intact (a connection closed, the data kept): nothing.
    pub fn salvage(&self, disk: &Snapshot) -> Option<Txn> {
        let cleared = disk.sync.is_none()
            && disk.base_chunks.is_empty()
            && disk.base.is_empty()
            && !disk.more_on_disk
            && disk.pending.is_empty()
            && disk.rejections.is_empty()
            && disk.conflicts.is_empty();
        let resets = self.sync.metrics.storage_resets;
        // Each copy filled again is a new device: another device id on disk
        // is another copy, put there by another context after the clear.
        let refilled = !cleared && disk.meta.as_ref().is_some_and(|m| m.device_id != self.meta.device_id);
        if !cleared && !refilled {
            return None;
        }
        let on_disk: std::collections::HashSet<OpId> = disk.pending.iter().map(|o| o.op_id.clone()).collect();
        let refused: std::collections::HashSet<OpId> = disk.rejections.iter().map(|r| r.op.op_id.clone()).collect();
        let mut txn = Txn {
            put_pending: self.outbox.iter().filter(|o| !on_disk.contains(&o.op_id)).cloned().collect(),
            put_rejections: self.rejections.values().filter(|r| !refused.contains(&r.op.op_id)).cloned().collect(),
            put_conflicts: self.conflicts.values().filter(|c| !disk.conflicts.iter().any(|d| d.id == c.id)).cloned().collect(),
            ..Txn::default()
        };
        // The device the disk names now (opened afresh by this context or
        // another), with this context's clock joined in.
        let disk_device = disk.meta.as_ref().map_or_else(|| self.meta.device_id.clone(), |m| m.device_id.clone());
        txn.meta = Some(self.salvage_meta(disk_device));
        // The store cleared under it keeps no index: asked again, as at open.
        // (Not `entries_to_keep`: this context heard the lost store keep them.)
        let wanted = self.entries_wanted();
        if self.config.indexes_on_disk && !wanted.defs.is_empty() && disk.entries_for.as_ref() != Some(&wanted) {
            txn.entries_for = Some(wanted);
        }
        if refilled {
            return Some(txn);
        }
        let mut sync = self.sync.clone();
        sync.flight = None;
        sync.next_retry_at = None;
        for a in sync.ops.values_mut() {
            if a.attempts > 0 {
                a.unknown = true;
            }
        }
        sync.ops.retain(|id, _| self.outbox.get(id).is_some());
        sync.metrics.storage_resets = resets + 1;
        sync.base_version += 1;
        sync.recovery = Some(Recovery { code: Code::Storage, message: cleared_message(self.outbox.len()) });
        txn.sync = Some(sync);
        txn.schema = self.known_schema().map(|(k, _)| k.clone());
        txn.following =
            Some(Following { personal: self.following.personal.clone(), left: self.following.left.clone(), ..Following::default() });
        Some(txn)
    }

    /// A cycle reached its end (everything pushed, pulled to the head): a
    /// cleared copy is whole again, and its notice goes.
    pub(super) fn resynced(&mut self) {
        if self.sync.recovery.as_ref().is_some_and(is_resync) {
            self.sync.recovery = None;
            self.touch();
        }
    }
}
