//! What tests of this crate and of the adapters share (feature `testing`,
//! never in the published package): the contract suite every local store
//! passes.

pub mod store_contract;
