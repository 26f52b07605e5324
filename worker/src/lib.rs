//! The tunefleet worker: registers with a master over a WebSocket, tunes the
//! jobs it is assigned with a [`Backend`], streams progress, and reports results.
//!
//! The binary `tunefleet-worker` is a thin CLI over [`run_worker`]; tests and
//! the in-process fleet benchmark call [`run_worker`] directly, many times in
//! one process.
//!
//! - [`session`]: connect / register / job loop / reconnect (the protocol logic).
//!   It speaks to the master through `tunefleet_client::Transport`, the
//!   client library's WebSocket (framing, size limit, TLS, silence).
//! - [`backend`]: the [`Backend`] trait, the real `tvm` backend (feature `tvm`)
//!   and the `sim` test backend.
//! - [`backoff`]: reconnect delays.
//! - [`affinity`]: `--cpus`, pinning the process to its own cores.
//! - [`gpu`]: NVIDIA GPUs found with `nvidia-smi`, `--gpus`; [`devices`]:
//!   the slots one process serves (a CUDA slot per GPU, the CPU), and
//!   [`slots`] runs them together.

// Unsafe code only where the worker calls C: pinning (`affinity`), and TVM
// through tvm-ffi and dlopen (`backend::tvm`, `backend::verify`), each
// allowed at its module.
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

#[allow(unsafe_code)]
pub mod affinity;
pub mod backend;
pub mod backoff;
pub mod devices;
pub mod gpu;
pub mod session;
pub mod slots;

#[cfg(test)]
mod testutil;

pub use backend::{
    progress_channel, Backend, JobSpec, ProgressSink, ProgressUpdate, ProgressWatch, SimBackend,
    TuneError, TuneFuture,
};
pub use backoff::Backoff;
pub use session::{run_worker, worker_url, WorkerConfig, WorkerError, WorkerStats};
