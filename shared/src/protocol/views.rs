//! The fleet as clients see it: job and worker views, counts, progress,
//! the snapshot and the events that keep it current.

use serde::{Deserialize, Serialize};

use super::{JobId, JobState, Millis, TuningRecord};
use crate::device::Device;
use crate::model::ModelView;
use crate::target::Target;
use crate::workload::Workload;

/// Who did what to a job: `submit`, `cancel` or `retry`, by the name of the
/// admin token used (`admin` for the master's own).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobAction {
    pub action: String,
    pub by: String,
    pub at: Millis,
}

/// Most actions kept per job; the first (the submission) is always kept.
pub const MAX_JOB_ACTIONS: usize = 32;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobCounts {
    pub total: usize,
    pub queued: usize,
    /// In flight: assigned or running.
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    pub cancelled: usize,
    /// Of `total`, the jobs archived (`--job-retention`): ended jobs the
    /// master keeps in its database only. They count in their state.
    #[serde(default)]
    pub archived: usize,
}

impl JobCounts {
    pub fn is_empty(&self) -> bool {
        *self == JobCounts::default()
    }

    /// Counts one job in `state` (`n` of them; negative takes away).
    pub fn count(&mut self, state: JobState, n: isize) {
        let slot = match state {
            JobState::Queued => &mut self.queued,
            JobState::Assigned | JobState::Running => &mut self.running,
            JobState::Done => &mut self.done,
            JobState::Failed => &mut self.failed,
            JobState::Cancelled => &mut self.cancelled,
        };
        *slot = slot.saturating_add_signed(n);
        self.total = self.total.saturating_add_signed(n);
    }

    /// Counts `n` archived jobs in `state` (negative: brought back), in
    /// their state and in `archived` alike.
    pub fn count_archived(&mut self, state: JobState, n: isize) {
        self.count(state, n);
        self.archived = self.archived.saturating_add_signed(n);
    }

    /// These counts and `other`'s, summed field by field.
    pub fn plus(&self, other: &JobCounts) -> JobCounts {
        JobCounts {
            total: self.total + other.total,
            queued: self.queued + other.queued,
            running: self.running + other.running,
            done: self.done + other.done,
            failed: self.failed + other.failed,
            cancelled: self.cancelled + other.cancelled,
            archived: self.archived + other.archived,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerView {
    /// Session id, unique per connection.
    pub session: String,
    pub worker_id: String,
    pub name: String,
    pub target: Target,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    pub current_job: Option<JobId>,
    pub jobs_done: u64,
    pub connected_at: Millis,
    /// What it tunes on (`register`'s `device`): a GPU's name and memory,
    /// or the host's CPU. Absent for workers of earlier releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Device>,
}

/// What changes in a worker after it joined: the job it holds and how many
/// it has done. The event a subscriber with deltas gets in place of a whole
/// `worker_updated` view (whose target, name and ids never change).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerChange {
    pub session: String,
    pub current_job: Option<JobId>,
    pub jobs_done: u64,
}

impl WorkerChange {
    pub fn of(view: &WorkerView) -> WorkerChange {
        WorkerChange {
            session: view.session.clone(),
            current_job: view.current_job.clone(),
            jobs_done: view.jobs_done,
        }
    }

    /// Applies the change to the worker's view: what a subscriber does with it.
    pub fn apply_to(self, worker: &mut WorkerView) {
        worker.current_job = self.current_job;
        worker.jobs_done = self.jobs_done;
    }
}

/// One entry of a job's error history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobError {
    pub attempt: u32,
    #[serde(default)]
    pub worker: Option<String>,
    pub at: Millis,
    pub message: String,
}

/// Where and how the stored result was produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResultMeta {
    pub trials: u32,
    pub wall_time_s: f64,
    pub worker: String,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    #[serde(default)]
    pub gflops: Option<f64>,
    #[serde(default)]
    pub extra: serde_json::Value,
    /// The effective target the result was measured for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
}

/// One point of a job's tuning curve: the best latency after `trials` trials.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProgressPoint {
    pub trials: u32,
    pub best_latency_s: f64,
}

/// Most points kept per job; older ones are thinned out, never the latest.
pub const MAX_HISTORY_POINTS: usize = 256;

/// Adds a point to a job's curve, exactly as the master does, so that a
/// subscriber applying `job_progress` events keeps the same curve as the
/// master's view: a point with the same `trials` as the last one replaces it;
/// past [`MAX_HISTORY_POINTS`], every other point goes, never the latest.
pub fn record_progress_point(history: &mut Vec<ProgressPoint>, trials: u32, best_latency_s: f64) {
    match history.last_mut() {
        Some(last) if last.trials == trials => last.best_latency_s = best_latency_s,
        _ => history.push(ProgressPoint {
            trials,
            best_latency_s,
        }),
    }
    if history.len() > MAX_HISTORY_POINTS {
        let last = history.len() - 1;
        let mut i = 0;
        history.retain(|_| {
            i += 1;
            i % 2 == 1 || i - 1 == last
        });
    }
}

/// A running job's progress, as the small event subscribers get for each
/// accepted report (the job's other fields are unchanged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobProgress {
    pub job_id: JobId,
    pub trials_done: u32,
    pub trials_total: u32,
    /// The job's best latency so far; when set, the curve gets the point
    /// (`trials_done`, `best_latency_s`) by [`record_progress_point`]'s rule.
    pub best_latency_s: Option<f64>,
    pub updated_at: Millis,
}

impl JobProgress {
    /// Applies the delta to a job's view: what a subscriber does with it.
    pub fn apply_to(&self, job: &mut JobView) {
        job.state = JobState::Running;
        job.trials_done = self.trials_done;
        job.trials_total = self.trials_total;
        job.best_latency_s = self.best_latency_s;
        if let Some(best) = self.best_latency_s {
            record_progress_point(&mut job.history, self.trials_done, best);
        }
        job.updated_at = self.updated_at;
    }
}

/// Everything a client may want to know about one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobView {
    pub job_id: JobId,
    pub name: String,
    pub workload: Workload,
    pub state: JobState,
    pub attempts: u32,
    pub worker: Option<String>,
    pub trials_done: u32,
    pub trials_total: u32,
    pub best_latency_s: Option<f64>,
    /// Best first, at most `nbest`.
    pub records: Vec<TuningRecord>,
    /// Best latency over trials for the current (or last) attempt.
    #[serde(default)]
    pub history: Vec<ProgressPoint>,
    pub errors: Vec<JobError>,
    pub result: Option<ResultMeta>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// Answered from the tuning cache at submission: `records`,
    /// `best_latency_s` and `result` are those of `cached_from`, an earlier
    /// job with the same computation, a target that serves this one's and at
    /// least its budget.
    #[serde(default)]
    pub cache_hit: bool,
    /// The job whose records answered (`cache_hit`) or warm-started this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from: Option<JobId>,
    /// Who submitted, cancelled or retried it, oldest first (named admin
    /// tokens; `admin` for the master's own). Empty for jobs of model runs
    /// and of start-up files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<JobAction>,
}

/// What may change in a job after it was first published: its view without
/// `name`, `workload` and `created_at`, which never change. The event a
/// subscriber that asked for deltas (`subscribe` with `deltas: true`) gets
/// for a job it already has, instead of the whole view: a workload (up to
/// 1 MiB of TVMScript) is then sent once, not with every change of state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobChange {
    pub job_id: JobId,
    pub state: JobState,
    pub attempts: u32,
    pub worker: Option<String>,
    pub trials_done: u32,
    pub trials_total: u32,
    pub best_latency_s: Option<f64>,
    pub records: Vec<TuningRecord>,
    #[serde(default)]
    pub history: Vec<ProgressPoint>,
    pub errors: Vec<JobError>,
    pub result: Option<ResultMeta>,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    #[serde(default)]
    pub cache_hit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from: Option<JobId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<JobAction>,
}

impl JobChange {
    /// Applies the change to the job's view: what a subscriber does with it.
    pub fn apply_to(self, job: &mut JobView) {
        job.state = self.state;
        job.attempts = self.attempts;
        job.worker = self.worker;
        job.trials_done = self.trials_done;
        job.trials_total = self.trials_total;
        job.best_latency_s = self.best_latency_s;
        job.records = self.records;
        job.history = self.history;
        job.errors = self.errors;
        job.result = self.result;
        job.updated_at = self.updated_at;
        job.started_at = self.started_at;
        job.finished_at = self.finished_at;
        job.cache_hit = self.cache_hit;
        job.cached_from = self.cached_from;
        job.actions = self.actions;
    }
}

/// [`JobChange`] written from a borrowed view, without copying it: what the
/// master serialises for every change (tests hold the two to the same JSON).
#[derive(Serialize)]
pub struct JobChangeOf<'a> {
    job_id: &'a JobId,
    state: JobState,
    attempts: u32,
    worker: &'a Option<String>,
    trials_done: u32,
    trials_total: u32,
    best_latency_s: Option<f64>,
    records: &'a [TuningRecord],
    history: &'a [ProgressPoint],
    errors: &'a [JobError],
    result: &'a Option<ResultMeta>,
    updated_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    cache_hit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_from: &'a Option<JobId>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    actions: &'a [JobAction],
}

impl<'a> JobChangeOf<'a> {
    pub fn new(view: &'a JobView) -> JobChangeOf<'a> {
        JobChangeOf {
            job_id: &view.job_id,
            state: view.state,
            attempts: view.attempts,
            worker: &view.worker,
            trials_done: view.trials_done,
            trials_total: view.trials_total,
            best_latency_s: view.best_latency_s,
            records: &view.records,
            history: &view.history,
            errors: &view.errors,
            result: &view.result,
            updated_at: view.updated_at,
            started_at: view.started_at,
            finished_at: view.finished_at,
            cache_hit: view.cache_hit,
            cached_from: &view.cached_from,
            actions: &view.actions,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetSnapshot {
    pub jobs: Vec<JobView>,
    pub workers: Vec<WorkerView>,
    #[serde(default)]
    pub models: Vec<ModelView>,
    /// Jobs archived (`--job-retention`), by state: not in `jobs`.
    #[serde(default, skip_serializing_if = "JobCounts::is_empty")]
    pub archived: JobCounts,
    /// Set while the master cannot commit its state (it answers reads and
    /// refuses changes): the cause, naming the file or server, and since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_problem: Option<super::StorageProblem>,
}

/// Everything subscribers are told, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FleetEvent {
    WorkerJoined {
        worker: Box<WorkerView>,
    },
    WorkerLeft {
        session: String,
        reason: String,
    },
    WorkerUpdated {
        worker: Box<WorkerView>,
    },
    /// A worker's job or count changed: only to subscribers that asked for
    /// deltas, in place of `worker_updated` ([`WorkerChange::apply_to`]).
    WorkerChanged {
        change: WorkerChange,
    },
    JobUpdated {
        job: Box<JobView>,
    },
    /// A job the subscriber already has changed: only to subscribers that
    /// asked for deltas (`subscribe` with `deltas: true`), in place of
    /// `job_updated` ([`JobChange::apply_to`]). A job new to subscribers
    /// (submitted, imported, brought back from the archive) still comes as
    /// `job_updated`.
    JobChanged {
        change: Box<JobChange>,
    },
    /// Progress of a job already `running`: a delta to apply to its view
    /// ([`JobProgress::apply_to`]), not a whole view.
    JobProgress {
        progress: JobProgress,
    },
    ModelUpdated {
        model: Box<ModelView>,
    },
    /// `--job-retention`: these jobs left the master's memory (their rows
    /// stay in its database; `results --archived` reads them). `archived`
    /// is the count of archived jobs by state after the change, whole, not
    /// a delta; an archived job that comes back (resubmitted, retried, a
    /// cache entry) is announced with no ids and the lower counts, then a
    /// `job_updated`.
    JobsArchived {
        job_ids: Vec<JobId>,
        archived: JobCounts,
    },
    /// The master's store stopped committing (`problem` says why and since
    /// when) or commits again (`problem` absent): the snapshot's
    /// `storage_problem`, changed. Sent at once, since it changes no state.
    StorageChanged {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        problem: Option<super::StorageProblem>,
    },
}
