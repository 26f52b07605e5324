//! Tuning backends: what actually turns a workload into measured schedules.
//!
//! The session code only knows the [`Backend`] trait. Two implementations:
//! - `tvm` (feature `tvm`, the default backend): sends each job to its
//!   long-lived MetaSchedule driver (`python -m tunefleet._driver`, one
//!   process group), then verifies the tuned kernel against the untuned one
//!   and times it in-process through `tvm-ffi` (`verify`) — except a model's
//!   rounds, which the model's compile checks whole;
//! - [`sim::SimBackend`]: a fleet-testing tool that fakes tuning with
//!   deterministic numbers; never the default.
//!
//! # Contract
//! - [`Backend::tune`] returns a future that the worker spawns on the Tokio
//!   runtime. It reports progress through the [`ProgressSink`] as often as it
//!   likes (the sink keeps only the latest value, so a fast backend cannot flood
//!   the socket) and resolves to the result.
//! - Cancellation is dropping that future (the worker aborts its task when the
//!   master cancels the lease or the worker shuts down). A backend that owns
//!   external resources must release them on drop: the TVM backend will kill its
//!   subprocess group from a drop guard (`kill_on_drop` / process group kill).
//! - Records in the result are best first; the worker sorts defensively and keeps
//!   the first `nbest`.

pub mod sim;
#[cfg(feature = "tvm")]
#[allow(unsafe_code)]
pub mod tvm;
#[cfg(feature = "tvm")]
#[allow(unsafe_code)]
pub mod verify;

use std::future::Future;
use std::pin::Pin;
use tokio::sync::watch;
use tunefleet_shared::model::{CostModelShare, TunerSettings, WarmStart};
use tunefleet_shared::protocol::{JobId, JobResult, Lease};
use tunefleet_shared::workload::Workload;

pub use sim::SimBackend;
#[cfg(feature = "tvm")]
pub use tvm::{TvmBackend, TvmConfig};
#[cfg(feature = "tvm")]
pub use verify::{verify_and_time, ArgSpec, Verification, VerifyError, VerifyOptions};

/// A job as assigned by the master.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    pub job_id: JobId,
    pub lease: Lease,
    pub attempt: u32,
    pub workload: Workload,
    /// How many best records the master keeps.
    pub nbest: u32,
    /// Records to seed the search with (a model task's later rounds).
    pub warm_start: Option<Box<WarmStart>>,
    pub tuner: TunerSettings,
    /// A round of a model run's task: the kernel need not be checked here
    /// (the assign's `model_round`).
    pub model_round: bool,
    /// The fleet's cost model to start from and to send back (the
    /// assign's `cost_model`; a model's rounds).
    pub cost_model: Option<Box<CostModelShare>>,
}

/// One progress report from a running job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressUpdate {
    pub trials_done: u32,
    pub trials_total: u32,
    pub best_latency_s: Option<f64>,
}

/// Where a backend reports progress. Only the latest update is kept: if the
/// backend reports faster than the worker can send, intermediate updates are
/// coalesced, which is fine because each update supersedes the previous one.
#[derive(Clone, Debug)]
pub struct ProgressSink {
    tx: watch::Sender<Option<ProgressUpdate>>,
}

impl ProgressSink {
    pub fn report(&self, update: ProgressUpdate) {
        // send_replace never fails, even when nobody is watching (e.g. the
        // worker is between connections); the value is simply kept.
        self.tx.send_replace(Some(update));
    }
}

/// The receiving side of a [`ProgressSink`].
#[derive(Debug)]
pub struct ProgressWatch {
    rx: watch::Receiver<Option<ProgressUpdate>>,
}

impl ProgressWatch {
    /// The next unseen update; `None` once every sink is dropped (the job ended)
    /// and the last update was seen.
    pub async fn next(&mut self) -> Option<ProgressUpdate> {
        loop {
            self.rx.changed().await.ok()?;
            if let Some(update) = *self.rx.borrow_and_update() {
                return Some(update);
            }
        }
    }
}

/// A connected sink/watch pair.
pub fn progress_channel() -> (ProgressSink, ProgressWatch) {
    let (tx, rx) = watch::channel(None);
    (ProgressSink { tx }, ProgressWatch { rx })
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Tuning ran and failed; the message goes to the master as the job's error.
    #[error("{0}")]
    Failed(String),
    /// This backend cannot tune this workload at all.
    #[error("unsupported workload: {0}")]
    Unsupported(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The future returned by [`Backend::tune`].
pub type TuneFuture<'a> = Pin<Box<dyn Future<Output = Result<JobResult, TuneError>> + Send + 'a>>;

/// A way of tuning jobs. See the module docs for the contract.
pub trait Backend: Send + Sync + 'static {
    /// Sent to the master in `register` and stored with every result (`"sim"`, `"tvm"`).
    fn name(&self) -> &str;

    /// The TVM version this backend drives, if any.
    fn tvm_version(&self) -> Option<String>;

    /// Tunes one job. Dropping the returned future cancels the job.
    fn tune(&self, job: JobSpec, progress: ProgressSink) -> TuneFuture<'_>;
}
