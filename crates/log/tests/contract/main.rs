//! The log contract, run against every backend.

#[path = "../common/mod.rs"]
mod common;
mod core;
mod expiry;
mod live_streams;
mod requests;
mod retention;
