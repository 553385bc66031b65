//! A database closed under the library (PROTOCOL §7): noticed by the
//! store's own events or by a transaction that says the connection is gone,
//! told at once, and healed — the database opened again and filled with what
//! this context holds ([`Engine::salvage`]) — in every context on its own.

use super::{ClientError, Driver, Host, LocalStore, Transport};
use crate::attempt::Recovery;
use crate::engine::{Config, Engine};
use crate::protocol::Code;
use crate::store::{Meta, StoreError};

/// The longest pause between two tries to open the store again (ms): tries
/// after 50, 100, … 1,600 ms, about 3 s in all.
const REFILL_PATIENCE_MS: u64 = 1_600;

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Driver<S, T, H> {
    /// The store was closed under this context (its event, or a failed
    /// transaction): say so, open it again, put back what this context holds,
    /// and sync. One recovery at a time; a second call waits for the first.
    pub async fn recover_storage(&self) -> Result<(), ClientError> {
        self.check_open()?;
        if self.recovering.get() {
            while self.recovering.get() {
                self.recovered.next().await;
            }
            return self.check_open();
        }
        self.recovering.set(true);
        self.engine.borrow_mut().storage_lost();
        self.changed(false, None);
        let r = self.refill().await;
        self.recovering.set(false);
        self.recovered.notify();
        match r {
            Ok(()) => {
                self.resets.set(self.resets.get() + 1);
                self.changed(false, None);
                if self.auto_sync {
                    self.schedule_sync_now();
                }
                Ok(())
            }
            Err(e) => {
                let message = format!("This device's storage could not be opened again ({e}); reload the app.");
                self.engine.borrow_mut().require_recovery(Recovery { code: Code::Storage, message });
                self.changed(false, None);
                Err(e)
            }
        }
    }

    /// Opens the store again and builds the engine on it, after writing back
    /// what the disk lost (nothing, when the data was kept). A clear may
    /// still be under way and close the new connection too: tried again
    /// after a pause, a few times.
    async fn refill(&self) -> Result<(), ClientError> {
        let mut pause = 50;
        loop {
            match self.refill_once().await {
                Err(ClientError::StorageFailed(_)) | Err(ClientError::StorageUnavailable(_)) if pause <= REFILL_PATIENCE_MS => {
                    self.host.sleep(pause).await;
                    pause *= 2;
                }
                r => return r,
            }
        }
    }

    async fn refill_once(&self) -> Result<(), ClientError> {
        self.store.reconnect().await?;
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&self.host.entropy().to_le_bytes());
        random[8..].copy_from_slice(&self.host.entropy().to_le_bytes());
        let fresh = self.engine.borrow().salvage_meta(crate::ids::device_id_from(random));
        let disk = self.store.open(fresh).await?;
        let txn = self.engine.borrow().salvage(&disk);
        if let Some(txn) = txn {
            self.store.commit(&txn).await?;
        }
        // Its block of ids first, planned from the stored meta (the device
        // may be a new one): until it is in, `newRowId` takes from the engine
        // in place, and a new engine holds none. Then nothing is awaited
        // between the read and the swap (see `Driver::reload`).
        let id_block = self.config.id_block;
        let reserved = self.reserve_with(&|stored| crate::engine::plan_block(stored, id_block)).await?;
        let snapshot = self.store.open(Meta::fresh(String::new())).await?;
        let config = Config { seed: self.host.entropy(), ..self.config.clone() };
        let mut engine = Engine::open(snapshot, config)?;
        if let Some((block, _)) = reserved {
            engine.hold_ids(block);
        }
        *self.engine.borrow_mut() = engine;
        Ok(())
    }

    /// Waits while the store is being opened again (an edit made meanwhile
    /// goes into the database that comes back).
    pub(super) async fn storage_settled(&self) {
        while self.recovering.get() {
            self.recovered.next().await;
        }
    }

    /// After a store call failed with `e`: when the connection was closed
    /// under the library, heal it first. Returns whether it was (and healed:
    /// the call may be made again).
    pub(super) async fn healed(&self, e: &StoreError) -> bool {
        matches!(e, StoreError::Closed(_)) && self.recover_storage().await.is_ok()
    }

    /// Whether the store is being opened again now (what the context holds
    /// is not yet back on disk).
    pub fn recovering(&self) -> bool {
        self.recovering.get()
    }
}

// Native only: the executor is not built for wasm32.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use super::super::{Driver, Host, MemoryTransport, Options, Task};
    use crate::attempt::Phase;
    use crate::memory_server::MemoryServer;
    use crate::memory_store::MemoryStore;
    use crate::protocol::{Fields, RowKey, Value};
    use crate::schema::Schema;
    use crate::store::Txn;

    /// One context alone: no lock to share, no one to tell, no timers.
    struct Alone(Cell<u64>);

    impl Host for Alone {
        type Guard = ();
        type Sleep = std::future::Ready<()>;
        async fn lock(&self, _: bool) -> Result<Option<()>, String> {
            Ok(Some(()))
        }
        fn broadcast(&self, _: &Txn) {}
        fn now(&self) -> u64 {
            self.0.set(self.0.get() + 1);
            1_700_000_000_000 + self.0.get()
        }
        fn entropy(&self) -> u64 {
            self.0.set(self.0.get() + 7);
            self.0.get().wrapping_mul(0x9E37_79B9_7F4A_7C15)
        }
        fn offline(&self) -> bool {
            false
        }
        fn wake_when_online(&self) {}
        fn sleep(&self, _: u64) -> Self::Sleep {
            std::future::ready(())
        }
        fn spawn(&self, _: Task) {}
        fn close(&self) {}
    }

    fn set(reps: i64) -> Fields {
        let mut f = Fields::new();
        f.insert("exercise".into(), Value::from("squat"));
        f.insert("reps".into(), Value::from(reps));
        f.insert("weightKg".into(), Value::from(60.0));
        f
    }

    type TestDriver = Driver<Rc<MemoryStore>, MemoryTransport, Alone>;

    fn start(store: &Rc<MemoryStore>, server: &Rc<RefCell<MemoryServer>>) -> Rc<TestDriver> {
        let transport =
            MemoryTransport { server: server.clone(), user: "alice".into(), lose_next: Default::default(), fail_next: Default::default() };
        let options = Options { user: Some("alice".into()), ..Options::default() };
        pollster::block_on(Driver::start(store.clone(), transport, Alone(Cell::new(0)), options)).unwrap()
    }

    #[test]
    fn a_cleared_database_is_filled_again_from_what_the_context_holds_and_nothing_is_sent_twice() {
        let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
        let store = Rc::new(MemoryStore::new());
        let d = start(&store, &server);
        pollster::block_on(async {
            d.change("sets", "r1", set(5)).await.unwrap();
            d.sync().await.unwrap();
            // Sent, applied, its answer lost: in doubt when the site's data is cleared.
            d.change("sets", "r2", set(6)).await.unwrap();
            *d.transport.lose_next.borrow_mut() = 1;
            let _ = d.sync().await;
            // Never sent.
            d.change("sets", "r3", set(7)).await.unwrap();
            let refused = d.change_with(None, "sets", "r4", set(500), false).await.unwrap();
            store.clear_under();
            // An edit made after the clear goes into the database that comes back.
            d.change("sets", "r5", set(8)).await.unwrap();
            let st = d.engine.borrow().status(&RowKey::new("sets", "r3"));
            assert_eq!((st.phase, st.code.as_deref()), (Phase::RecoveryRequired, Some("storage")), "{st:?}");
            assert!(st.reason.as_deref().is_some_and(|r| r.contains("cleared")), "{st:?}");
            assert_eq!(d.engine.borrow().metrics().storage_resets, 1);
            assert_eq!(store.tables().pending.len(), 4, "r2, r3, r4 kept and r5 recorded");
            let report = d.sync().await.unwrap();
            assert_eq!((report.report.duplicate, report.report.rejected), (1, 1), "{report:?}");
            assert!(d.engine.borrow().rejections().any(|r| r.op.op_id == refused));
            // Whole again: the notice goes, every row is back, each op judged once.
            assert!(d.engine.borrow().recovery().is_none());
            for r in ["r1", "r2", "r3", "r5"] {
                assert_eq!(d.engine.borrow().status(&RowKey::new("sets", r)).phase, Phase::Synced, "{r}");
                assert!(d.engine.borrow().row(&RowKey::new("sets", r)).is_some(), "{r} is back");
            }
            assert_eq!(server.borrow().rows("alice").len(), 4);
        });
    }

    #[test]
    fn an_intact_database_opened_again_is_not_filled() {
        let server = Rc::new(RefCell::new(MemoryServer::new(Schema::workout())));
        let store = Rc::new(MemoryStore::new());
        let d = start(&store, &server);
        pollster::block_on(async {
            d.change("sets", "r1", set(5)).await.unwrap();
            let before = store.tables();
            d.recover_storage().await.unwrap();
            assert_eq!(store.tables().pending, before.pending);
            assert!(d.engine.borrow().recovery().is_none(), "nothing was lost, nothing to tell");
            assert_eq!(d.engine.borrow().metrics().storage_resets, 0);
        });
    }
}
