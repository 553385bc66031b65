//! # marksync
//!
//! Offline-first sync that never duplicates, never loses and never lies about
//! a user's edits. Every edit is an op "field = value" named on the device;
//! rows merge per field by marks `(at, opId)`; the server judges each op once
//! and remembers its verdict per (user, opId) forever, so a retry is harmless.
//!
//! This crate is the one copy of every rule, used by the browser client
//! (compiled to WebAssembly, see `www/`) and by the reference server
//! (`marksync-server`). It does no I/O: time, ids and randomness are injected,
//! and storage and transport are the caller's.
//!
//! | module | what it is |
//! |---|---|
//! | [`protocol`] | wire types and their shape rules |
//! | [`order`] | marks, `newer`, `merge` — the only ordering of marks |
//! | [`clock`] | the device's monotonic `at` |
//! | [`ids`] | deviceId, opId, rowId, number blocks |
//! | [`schema`] | the server's validation of rows |
//! | [`judge`] | the server's decide → remember → write |
//! | [`known_schema`] | the server's schema as the device keeps it |
//! | [`memory_server`] | the judge over in-memory maps |
//! | [`space`] | spaces and roles: who may write where, what a pull reads |
//! | [`following`] | the spaces a device follows, their cursors and roles |
//! | [`replica`] | base rows ⊕ pending ops = visible rows |
//! | [`layered`] | two ordered layers read as one, the upper hiding the lower |
//! | [`outbox`] | pending ops in record order |
//! | [`attempt`] | attempts, failures, backoff, row status |
//! | [`store`] | the device's durable state, [`store::Txn`], the store contract |
//! | [`sync_state`] | attempts, the attempt in flight, retry policy, counters — durable and shared |
//! | [`engine`] | the sans-io sync engine of one device |
//! | [`driver`] | the one sync loop of a context: the engine over a store, a transport and a host |
//! | `sim` | the deterministic fault simulator, running the shipped [`driver`] (feature `sim`) |
//! | `testing` | the store contract suite (feature `testing`) |
#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod attempt;
pub mod chunks;
pub mod clock;
mod cold_sort;
pub mod conflict;
pub mod driver;
pub mod engine;
pub mod following;
pub mod ids;
pub mod index_def;
pub mod json;
pub mod judge;
pub mod known_schema;
pub mod layered;
pub mod memory_server;
pub mod memory_store;
pub mod names;
pub mod order;
pub mod outbox;
pub mod protocol;
pub mod query;
pub mod replica;
pub mod rules;
pub mod schema;
pub mod space;
pub mod store;
pub mod sync_state;
pub mod told;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "sim")]
pub mod sim;

#[doc(hidden)]
pub mod workload;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use engine::{Config, Engine, Step, SyncReport};
pub use protocol::{Mark, Op, OpId, Row, RowKey, Value};
