//! The dashboard's file checks, kept out of its first load.
//!
//! Checking a workload file in the browser means the master's YAML parser
//! with line/column errors, the Lorien reader and the ONNX reader: about half
//! of the page's wasm. A user who only watches the fleet never needs them, so
//! they are a second module (`check_bg-<hash>.wasm`) that the page fetches
//! when the upload box is first used (`web/static/boot.js`).
//!
//! The page and this module share only the types below, as JSON strings:
//! - [`workloads::check`]: a workload or Lorien file → [`workloads::Checked`];
//! - [`model_file::load`]: an ONNX file → [`model_file::LoadedModel`], its
//!   weights stripped and the rest base64-encoded for upload;
//! - [`downloads::make`]: the master's `results` reply → the jobs card's
//!   download files ([`downloads::Files`]).
//!
//! The page links the types (and their serde code), never the parsers; the
//! `exports` feature adds the wasm-bindgen entry points for the module.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod downloads;
pub mod model_file;
pub mod workloads;

#[cfg(all(target_arch = "wasm32", feature = "exports"))]
pub mod exports;
