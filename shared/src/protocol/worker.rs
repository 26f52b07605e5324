//! The worker role (`/ws/worker`): what a worker sends, what the master
//! answers, and a job's result.

use serde::{Deserialize, Serialize};

use super::{redact, ErrorCode, JobId, Lease, REDACTED};
use crate::device::Device;
use crate::model::{CostModelShare, TunerSettings, WarmStart};
use crate::target::Target;
use crate::workload::Workload;

/// One measured schedule. `record` is backend-specific (MetaSchedule's own
/// JSON record for the TVM backend).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TuningRecord {
    pub latency_s: f64,
    pub record: serde_json::Value,
}

/// What a worker sends when a job finished tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobResult {
    pub best_latency_s: f64,
    #[serde(default)]
    pub gflops: Option<f64>,
    /// Best first; the master keeps the best `nbest`.
    pub records: Vec<TuningRecord>,
    pub trials: u32,
    pub wall_time_s: f64,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    /// Backend-specific extras (e.g. the workload in MetaSchedule database form).
    #[serde(default)]
    pub extra: serde_json::Value,
    /// The target the worker tuned, compiled and measured for: the job's
    /// target with every attribute it leaves open filled from the worker's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
}

/// A worker's self-description, sent in [`WorkerMessage::Register`].
///
/// `Debug` redacts `secret`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerHello {
    pub protocol: u32,
    /// Stable for the life of the worker process, across reconnects; used to
    /// accept results that finished while the worker was disconnected.
    pub worker_id: String,
    pub name: String,
    pub target: Target,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    /// Join secret (`serve --worker-secret`), when the master asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Jobs this worker runs at once, 1 to [`MAX_WORKER_SLOTS`] (absent: one).
    /// Each slot is a session of its own on the master, shown as a worker of
    /// the same name and `worker_id`, and asks for its jobs with the
    /// `request_job` a one-job worker sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// The hardware this registration tunes on (a GPU, or the host's CPU),
    /// shown to subscribers in the worker's view. Absent from workers of
    /// earlier releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Device>,
}

/// Most jobs one worker connection may hold at once (`register`'s `slots`).
pub const MAX_WORKER_SLOTS: u32 = 64;

/// The `slots` a worker may register with: the one bound the master, the
/// worker and the bench check.
pub const WORKER_SLOTS: std::ops::RangeInclusive<u32> = 1..=MAX_WORKER_SLOTS;

/// Worker → master. `Debug` redacts the tokens.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMessage {
    Register(WorkerHello),
    /// "I am idle". The master answers with `assign` now or whenever a
    /// matching job appears; there is no polling.
    RequestJob {
        token: String,
    },
    Progress {
        token: String,
        job_id: JobId,
        lease: Lease,
        trials_done: u32,
        trials_total: u32,
        #[serde(default)]
        best_latency_s: Option<f64>,
    },
    Result {
        token: String,
        job_id: JobId,
        lease: Lease,
        result: JobResult,
    },
    JobFailed {
        token: String,
        job_id: JobId,
        lease: Lease,
        error: String,
    },
}

/// Master → worker. `Debug` redacts the token in `registered`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MasterMessage {
    Registered {
        token: String,
        /// The session id the master shows for this worker.
        session: String,
        /// Open jobs this worker's target can serve right now.
        matching_jobs: usize,
        /// The master's `--heartbeat-timeout` in ms: it pings more often
        /// than this, so a worker that hears nothing (no frame, no ping) for
        /// this long treats the connection as lost, as the master does the
        /// worker's. Absent from older masters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_timeout_ms: Option<u64>,
    },
    Assign {
        job_id: JobId,
        lease: Lease,
        attempt: u32,
        workload: Box<Workload>,
        /// How many best records the master keeps.
        nbest: u32,
        /// Records to seed the search with (later rounds of a model's task).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warm_start: Option<Box<WarmStart>>,
        /// Tuner settings of the job's model run; defaults when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tuner: Option<Box<TunerSettings>>,
        /// A round of a model run's task: the model is checked whole against
        /// onnxruntime when it is compiled, so the worker need not build and
        /// check the round's kernel on its own (seconds a round).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        model_round: bool,
        /// The fleet's cost model for the effective target (a model's
        /// rounds, when the master shares cost models): the round starts
        /// from it and sends back the model it ends with. Absent from
        /// masters that do not share them; workers that do not know it
        /// ignore it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_model: Option<Box<CostModelShare>>,
    },
    /// Stop working on this lease (job cancelled, timed out, or finished elsewhere).
    Cancel {
        job_id: JobId,
        lease: Lease,
        reason: String,
    },
    /// Answer to `result` / `job_failed`: was it stored?
    Ack {
        job_id: JobId,
        lease: Lease,
        accepted: bool,
        #[serde(default)]
        reason: Option<String>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    Shutdown {
        reason: String,
    },
}

impl std::fmt::Debug for WorkerHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHello")
            .field("protocol", &self.protocol)
            .field("worker_id", &self.worker_id)
            .field("name", &self.name)
            .field("target", &self.target)
            .field("backend", &self.backend)
            .field("tvm_version", &self.tvm_version)
            .field("secret", &redact(&self.secret))
            .field("slots", &self.slots)
            .field("device", &self.device)
            .finish()
    }
}

impl WorkerHello {
    /// The jobs this worker holds at once (`slots`, 1 when absent).
    pub fn slot_count(&self) -> u32 {
        self.slots.unwrap_or(1)
    }
}

impl std::fmt::Debug for WorkerMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerMessage::Register(hello) => f.debug_tuple("Register").field(hello).finish(),
            WorkerMessage::RequestJob { token: _ } => f
                .debug_struct("RequestJob")
                .field("token", &REDACTED)
                .finish(),
            WorkerMessage::Progress {
                token: _,
                job_id,
                lease,
                trials_done,
                trials_total,
                best_latency_s,
            } => f
                .debug_struct("Progress")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("trials_done", trials_done)
                .field("trials_total", trials_total)
                .field("best_latency_s", best_latency_s)
                .finish(),
            WorkerMessage::Result {
                token: _,
                job_id,
                lease,
                result,
            } => f
                .debug_struct("Result")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("result", result)
                .finish(),
            WorkerMessage::JobFailed {
                token: _,
                job_id,
                lease,
                error,
            } => f
                .debug_struct("JobFailed")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("error", error)
                .finish(),
        }
    }
}

impl std::fmt::Debug for MasterMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MasterMessage::Registered {
                token: _,
                session,
                matching_jobs,
                heartbeat_timeout_ms,
            } => f
                .debug_struct("Registered")
                .field("token", &REDACTED)
                .field("session", session)
                .field("matching_jobs", matching_jobs)
                .field("heartbeat_timeout_ms", heartbeat_timeout_ms)
                .finish(),
            MasterMessage::Assign {
                job_id,
                lease,
                attempt,
                workload,
                nbest,
                warm_start,
                tuner,
                model_round,
                cost_model,
            } => f
                .debug_struct("Assign")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("attempt", attempt)
                .field("workload", workload)
                .field("nbest", nbest)
                .field("warm_start", &warm_start.as_ref().map(|w| w.records.len()))
                .field("tuner", tuner)
                .field("model_round", model_round)
                .field("cost_model", cost_model)
                .finish(),
            MasterMessage::Cancel {
                job_id,
                lease,
                reason,
            } => f
                .debug_struct("Cancel")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("reason", reason)
                .finish(),
            MasterMessage::Ack {
                job_id,
                lease,
                accepted,
                reason,
            } => f
                .debug_struct("Ack")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("accepted", accepted)
                .field("reason", reason)
                .finish(),
            MasterMessage::Error { code, message } => f
                .debug_struct("Error")
                .field("code", code)
                .field("message", message)
                .finish(),
            MasterMessage::Shutdown { reason } => {
                f.debug_struct("Shutdown").field("reason", reason).finish()
            }
        }
    }
}
