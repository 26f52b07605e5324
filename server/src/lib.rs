//! The tunefleet master.
//!
//! Layers, from the inside out (see ARCHITECTURE.md):
//! - [`scheduler`]: the job lifecycle as a pure state machine (no I/O, no clock);
//! - [`store`]: SQLite persistence of what the scheduler decided;
//! - [`core`]: the single thread that owns both and orders commit → publish → reply;
//! - [`net`]: WebSocket endpoints that translate frames to core commands;
//! - [`serve`]: start-up and graceful shutdown;
//! - [`client`] and [`commands`]: the CLI's side of the protocol.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

/// The client lives in its own crate (`tunefleet-client`); re-exported so
/// that `tunefleet_server::client::Client` keeps working.
pub use tunefleet_client as client;
pub mod commands;
pub mod core;
pub mod export_trace;
pub mod launch;
pub mod local_workers;
pub mod metrics;
pub mod models;
pub mod net;
pub mod scheduler;
pub mod serve;
pub mod store;
pub mod tokens;
