//! tunefleet's decisions, as plain state machines (see ARCHITECTURE.md).
//!
//! - [`scheduler`]: the job lifecycle (queue, leases, attempts, the tuning
//!   cache, imported records): events in, [`scheduler::Output`]s out.
//! - [`models`]: the model planner (a model run's stages, its rounds, how
//!   the budget is shared among tasks): finished jobs in, jobs to submit
//!   out.
//! - [`cost_models`]: the fleet's trained cost model per effective target
//!   and TVM release: which a round starts from, which one to keep.
//!
//! Why a crate of its own: so that this code cannot reach tokio, SQLite, a
//! clock or a logger even by accident (its dependencies are the shared
//! message types and plain data crates). Time comes in as arguments
//! (`now`), and what a caller might log comes back as values. That is what
//! lets `tunefleet-server`'s property tests drive it exhaustively, and what
//! keeps every decision in one place: the master's core only translates.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod cost_models;
pub mod models;
pub mod scheduler;
