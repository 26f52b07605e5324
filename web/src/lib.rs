//! The tunefleet web dashboard.
//!
//! A stub for now: the Yew/WASM dashboard is its own issue. The crate exists so
//! the workspace layout is final and `shared` is already proven to compile for
//! every consumer.

pub use tunefleet_shared::protocol::PROTOCOL_VERSION;
