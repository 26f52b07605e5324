//! The tunefleet master.
//!
//! Layers, from the inside out (see ARCHITECTURE.md):
//! - [`scheduler`], [`models`] and [`cost_models`]: the job lifecycle, the
//!   model planner and the fleet's cost models as pure state machines (no
//!   I/O, no clock), in a crate of their own (`tunefleet-planner`),
//!   re-exported here;
//! - [`store`]: persistence of what the scheduler decided, in SQLite or
//!   PostgreSQL;
//! - [`core`]: the single thread that owns the state machines and the store,
//!   and orders commit → worker sends → publish → reply;
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
pub use tunefleet_planner::cost_models;
pub mod export_trace;
pub mod launch;
pub mod local_workers;
pub mod metrics;
pub use tunefleet_planner::models;
pub mod net;
pub use tunefleet_planner::scheduler;
pub mod serve;
pub mod store;
pub mod tokens;
