//! The tunefleet web dashboard: a WASM app that `tunefleet serve` serves
//! at `/` and that talks to the master over the same WebSocket protocol as
//! the CLI (`/ws/client`), with the message types of `tunefleet-shared`.
//!
//! Everything that decides something is plain Rust that also compiles
//! natively, so `cargo test -p web` tests it on the host:
//! - [`view_model`]: the fleet (the shared state reducer for the pub/sub
//!   stream) and the protocol session (hello, subscribe, replies, reconnect
//!   backoff), the overall progress and the jobs table's filter and sort;
//! - [`upload`]: the upload box's state: workload files checked in the
//!   browser with the master's parser; the parser itself is in the checker
//!   module (`web-check`), a second wasm file fetched when the upload box is
//!   first used, so the first load carries only the page;
//! - [`model_upload`]: ONNX models checked and stripped of their weights in the
//!   browser, as `tunefleet submit MODEL.onnx` does (the reading and stripping
//!   in the checker module, the form here);
//! - [`model_runs`]: what the Models card says about a model run;
//! - [`notices`]: the notice area's lines and how long each stays;
//! - [`chart`], [`format`](mod@format): the tuning curve's geometry and text formatting;
//! - [`wire`]: frames read into the shared message types with the shared
//!   JSON tree and its decoders instead of serde_json's (the page's size).
//!
//! The browser part (`app`, wasm32 only) is a Yew application of function
//! components and hooks: the root keeps the [`view_model::Session`] in a
//! `use_reducer` and owns the WebSocket; the cards are components with
//! their own state; they render that state (never HTML strings: text is
//! text). Build it with
//! `scripts/build-web.sh` (bundle in `web/dist/`, packed by `web/pack` with
//! content-hashed names and brotli/gzip copies).

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod chart;
pub mod format;
pub mod model_runs;
pub mod model_upload;
pub mod notices;
pub mod upload;
pub mod view_model;
pub mod wire;

#[cfg(target_arch = "wasm32")]
mod app;

pub use tunefleet_shared::protocol::PROTOCOL_VERSION;
