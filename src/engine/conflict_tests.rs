//! Concurrent overwrites on the device (PROTOCOL §2a): told on the device
//! whose edit lost, never for sequential edits or other fields, stored,
//! dismissed for good.

use super::*;
use crate::memory_server::MemoryServer;
use crate::memory_store::Tables;
use crate::protocol::{Fields, Value};
use crate::schema::Schema;
use crate::space::Role;

/// One device: its engine and its store.
struct Device {
    e: Engine,
    store: Tables,
    user: &'static str,
}

impl Device {
    fn new(dev: &str, user: &'static str) -> Device {
        let mut store = Tables::default();
        let snap = Snapshot { meta: Some(Meta::fresh(dev.into())), ..Snapshot::default() };
        store.meta = snap.meta.clone();
        Device { e: Engine::open(snap, Config::default()).unwrap(), store, user }
    }

    fn edit(&mut self, space: Option<&str>, row: &str, f: &[(&str, Value)], now: u64) -> Op {
        let fields: Fields = f.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let d = self.e.draft_in(space, "sets", row, fields).unwrap();
        let meta = self.e.meta().clone();
        let (txn, rec) = self.e.plan_record(d, &meta, now).unwrap();
        self.store.apply(&txn);
        let op = rec.ops[0].clone();
        self.e.recorded(rec);
        op
    }

    fn sync(&mut self, s: &mut MemoryServer, now: u64) {
        let (t, mut step) = self.e.start_sync(now);
        self.store.apply(&t);
        loop {
            step = match step {
                Step::Push(req) => {
                    let (t, next) = self.e.on_push_response(s.push(self.user, &req).unwrap(), now).unwrap();
                    self.store.apply(&t);
                    next
                }
                Step::Pull(req) => {
                    let (t, next) = self.e.on_pull_response(&req, s.pull_spaces(self.user, &req), now).unwrap();
                    self.store.apply(&t);
                    next
                }
                Step::Done(_) => return,
                other => panic!("{other:?}"),
            }
        }
    }

    fn reopen(&mut self) {
        self.e = Engine::open(self.store.snapshot(), Config::default()).unwrap();
    }

    /// (field, mine, theirs) of every conflict listed.
    fn told(&self) -> Vec<(String, Value, Value)> {
        self.e.conflicts().into_iter().map(|c| (c.field.clone(), c.mine.value.clone(), c.theirs.value.clone())).collect()
    }
}

fn reps(n: i64) -> [(&'static str, Value); 1] {
    [("reps", Value::from(n))]
}

fn first_set() -> [(&'static str, Value); 3] {
    [("exercise", Value::from("squat")), ("weightKg", 80.0.into()), ("reps", 5.into())]
}

/// A user's phone and tablet, both holding row `r` with 5 reps.
fn two_devices() -> (MemoryServer, Device, Device) {
    let mut s = MemoryServer::new(Schema::workout());
    let (mut phone, mut tablet) = (Device::new("phone", "u"), Device::new("tablet", "u"));
    phone.edit(None, "r", &first_set(), 1_000);
    phone.sync(&mut s, 1_000);
    tablet.sync(&mut s, 1_000);
    (s, phone, tablet)
}

#[test]
fn an_offline_edit_that_loses_to_a_later_one_is_told_on_its_device_only() {
    let (mut s, mut phone, mut tablet) = two_devices();
    let mine = phone.edit(None, "r", &reps(6), 10_000); // in the metro
    tablet.edit(None, "r", &reps(7), 70_000);
    tablet.sync(&mut s, 70_000);
    phone.sync(&mut s, 90_000);
    assert_eq!(phone.told(), vec![("reps".into(), 6.into(), 7.into())]);
    let c = phone.e.conflicts()[0].clone();
    assert_eq!(c.id, format!("{}/reps", mine.op_id));
    assert_eq!((c.mine.op_id.clone(), c.mine.at), (mine.op_id.clone(), mine.at));
    assert_eq!(c.theirs.user.as_deref(), Some("u"), "the personal space's owner wrote it");
    assert_eq!((c.table.as_str(), c.row_id.as_str(), c.space.as_deref()), ("sets", "r", None));
    assert_eq!(phone.e.status(&RowKey::new("sets", "r")).conflicts, 1);
    tablet.sync(&mut s, 90_000);
    assert!(tablet.told().is_empty(), "the edit that won lost nothing");
    assert_eq!(phone.e.row(&RowKey::new("sets", "r")).and_then(|r| r.get("reps").cloned()), Some(7.into()));
}

#[test]
fn an_applied_edit_overwritten_by_a_concurrent_later_one_is_told_where_it_lost() {
    let (mut s, mut phone, mut tablet) = two_devices();
    phone.edit(None, "r", &reps(6), 10_000);
    phone.sync(&mut s, 10_000); // applied: 6 stands
    tablet.edit(None, "r", &reps(7), 20_000); // the tablet never pulled the 6
    tablet.sync(&mut s, 20_000);
    phone.sync(&mut s, 30_000);
    assert_eq!(phone.told(), vec![("reps".into(), 6.into(), 7.into())]);
    assert!(tablet.told().is_empty());
}

#[test]
fn sequential_edits_and_edits_of_other_fields_are_no_conflict() {
    let (mut s, mut phone, mut tablet) = two_devices();
    phone.edit(None, "r", &reps(6), 10_000);
    phone.sync(&mut s, 10_000);
    tablet.sync(&mut s, 15_000); // pulls the 6 first
    tablet.edit(None, "r", &reps(7), 20_000);
    tablet.sync(&mut s, 20_000);
    phone.sync(&mut s, 30_000);
    assert!(phone.told().is_empty(), "the tablet knew the 6 when it set 7");
    // Concurrent, but of different fields: both stand.
    phone.edit(None, "r", &[("weightKg", 90.0.into())], 40_000);
    tablet.edit(None, "r", &reps(8), 50_000);
    tablet.sync(&mut s, 50_000);
    phone.sync(&mut s, 60_000);
    tablet.sync(&mut s, 60_000);
    assert!(phone.told().is_empty() && tablet.told().is_empty());
    // One device's own edits never conflict, however its pulls fall.
    phone.edit(None, "r", &reps(9), 70_000);
    phone.edit(None, "r", &reps(10), 71_000);
    phone.sync(&mut s, 72_000);
    assert!(phone.told().is_empty());
}

#[test]
fn a_conflict_is_stored_and_dismissed_for_good() {
    let (mut s, mut phone, mut tablet) = two_devices();
    phone.edit(None, "r", &reps(6), 10_000);
    tablet.edit(None, "r", &reps(7), 70_000);
    tablet.sync(&mut s, 70_000);
    phone.sync(&mut s, 90_000);
    phone.reopen();
    assert_eq!(phone.told().len(), 1, "stored: still there after a reload");
    let id = phone.e.conflicts()[0].id.clone();
    let txn = phone.e.dismiss_conflict(&id).expect("dismissed");
    phone.store.apply(&txn);
    assert!(phone.e.dismiss_conflict(&id).is_none(), "once");
    assert_eq!(phone.e.status(&RowKey::new("sets", "r")).conflicts, 0);
    // A later write of the row carries the record again: it stays dismissed.
    tablet.edit(None, "r", &[("weightKg", 95.0.into())], 95_000);
    tablet.sync(&mut s, 95_000);
    phone.sync(&mut s, 99_000);
    assert!(phone.told().is_empty());
    phone.reopen();
    assert!(phone.told().is_empty(), "dismissed after a reload too");
    // Another context on the same database hears the dismissal.
    let mut other = Engine::open(phone.store.snapshot(), Config::default()).unwrap();
    assert!(other.conflicts().is_empty());
    assert!(other.dismiss_conflict(&id).is_none());
}

#[test]
fn in_a_shared_space_the_author_is_named() {
    let mut s = MemoryServer::new(Schema::workout());
    s.create_space("gym", "alice").unwrap();
    assert!(s.set_member(Some("alice"), "gym", "bob", Some(Role::Editor)).unwrap());
    s.accept("bob", "gym").unwrap();
    let (mut ann, mut bob) = (Device::new("ann-phone", "alice"), Device::new("bob-phone", "bob"));
    ann.edit(Some("gym"), "r", &first_set(), 1_000);
    ann.sync(&mut s, 1_000);
    bob.sync(&mut s, 1_000);
    bob.edit(Some("gym"), "r", &reps(6), 10_000);
    ann.edit(Some("gym"), "r", &reps(7), 20_000);
    ann.sync(&mut s, 20_000);
    bob.sync(&mut s, 30_000);
    let c = bob.e.conflicts()[0].clone();
    assert_eq!((c.space.as_deref(), c.theirs.user.as_deref(), &c.theirs.value), (Some("gym"), Some("alice"), &Value::from(7)));
    assert_eq!(bob.e.status(&RowKey::in_space("gym", "sets", "r")).conflicts, 1);
    ann.sync(&mut s, 30_000);
    assert!(ann.told().is_empty());
}
