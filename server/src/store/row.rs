//! What a `jobs` row holds (schema 2), apart from the scheduler's `Job` and
//! the wire's `JobView`.
//!
//! Why a type of its own: when the row was the scheduler's `Job` serialised
//! whole, any change to the protocol's `JobView` silently changed the
//! database format, and every state change rewrote the job's workload (up to
//! a MiB of TVMScript). Here the workload is in a table of its own
//! (`workloads`, schema 4; a column of `jobs` before, which SQLite still
//! rewrote with every update of the row), written once when the job is first
//! stored, and [`JobRowOut::of`] destructures the
//! view without `..`: a field added to `JobView` does not compile until
//! someone decides whether and how it is stored (and whether that needs a
//! migration).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tunefleet_shared::model::TunerSettings;
use tunefleet_shared::protocol::{
    JobAction, JobError, JobState, JobView, Lease, Millis, ProgressPoint, ResultMeta, TuningRecord,
};
use tunefleet_shared::workload::Workload;

use crate::scheduler::{Job, JobExtras, LeaseRecord};

/// The `data` column, written (borrowed, no copies).
#[derive(Serialize)]
pub(super) struct JobRowOut<'a> {
    name: &'a str,
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
    created_at: Millis,
    updated_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    lease: Lease,
    lease_history: &'a [LeaseRecord],
    last_progress_at: Millis,
    extras: ExtrasOut<'a>,
    #[serde(skip_serializing_if = "is_false")]
    cache_hit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_from: &'a Option<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    actions: &'a [JobAction],
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A job's extras as its row holds them: all but the warm start, which has
/// a row of its own in `warm_starts` (schema 5) while the job is live. Rows
/// written before keep it here; `JobExtras` reads both.
#[derive(Serialize)]
struct ExtrasOut<'a> {
    nbest: Option<u32>,
    tuner: &'a TunerSettings,
    #[serde(skip_serializing_if = "is_zero")]
    prior_trials: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    workload_line: &'a Option<serde_json::Value>,
    #[serde(skip_serializing_if = "is_zero")]
    seeded: u32,
    #[serde(skip_serializing_if = "is_false")]
    model_round: bool,
}

impl<'a> ExtrasOut<'a> {
    fn of(extras: &'a JobExtras) -> ExtrasOut<'a> {
        let JobExtras {
            nbest,
            warm_start: _,
            tuner,
            prior_trials,
            workload_line,
            seeded,
            model_round,
        } = extras;
        ExtrasOut {
            nbest: *nbest,
            tuner,
            prior_trials: *prior_trials,
            workload_line,
            seeded: *seeded,
            model_round: *model_round,
        }
    }
}

/// The `data` column, read back.
#[derive(Deserialize)]
pub(super) struct JobRowIn {
    name: String,
    state: JobState,
    attempts: u32,
    worker: Option<String>,
    trials_done: u32,
    trials_total: u32,
    best_latency_s: Option<f64>,
    records: Vec<TuningRecord>,
    #[serde(default)]
    history: Vec<ProgressPoint>,
    errors: Vec<JobError>,
    result: Option<ResultMeta>,
    created_at: Millis,
    updated_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    lease: Lease,
    lease_history: Vec<LeaseRecord>,
    last_progress_at: Millis,
    #[serde(default)]
    extras: JobExtras,
    // Added in schema 2 without a migration: absent means not from the cache.
    #[serde(default)]
    cache_hit: bool,
    #[serde(default)]
    cached_from: Option<String>,
    #[serde(default)]
    actions: Vec<JobAction>,
}

impl<'a> JobRowOut<'a> {
    pub(super) fn of(job: &'a Job) -> JobRowOut<'a> {
        let Job {
            view,
            lease,
            holder: _,
            lease_history,
            last_progress_at,
            queue_key: _,
            extras,
            content_key: _,
            target_key: _,
        } = job;
        let JobView {
            job_id: _,
            name,
            workload: _,
            state,
            attempts,
            worker,
            trials_done,
            trials_total,
            best_latency_s,
            records,
            history,
            errors,
            result,
            created_at,
            updated_at,
            started_at,
            finished_at,
            cache_hit,
            cached_from,
            actions,
        } = &**view;
        JobRowOut {
            name,
            state: *state,
            attempts: *attempts,
            worker,
            trials_done: *trials_done,
            trials_total: *trials_total,
            best_latency_s: *best_latency_s,
            records,
            history,
            errors,
            result,
            created_at: *created_at,
            updated_at: *updated_at,
            started_at: *started_at,
            finished_at: *finished_at,
            lease: *lease,
            lease_history,
            last_progress_at: *last_progress_at,
            extras: ExtrasOut::of(extras),
            cache_hit: *cache_hit,
            cached_from,
            actions,
        }
    }
}

impl JobRowIn {
    pub(super) fn into_job(self, job_id: String, queue_key: i64, workload: Workload) -> Job {
        Job {
            view: Arc::new(JobView {
                job_id,
                name: self.name,
                workload,
                state: self.state,
                attempts: self.attempts,
                worker: self.worker,
                trials_done: self.trials_done,
                trials_total: self.trials_total,
                best_latency_s: self.best_latency_s,
                records: self.records,
                history: self.history,
                errors: self.errors,
                result: self.result,
                created_at: self.created_at,
                updated_at: self.updated_at,
                started_at: self.started_at,
                finished_at: self.finished_at,
                cache_hit: self.cache_hit,
                cached_from: self.cached_from,
                actions: self.actions,
            }),
            lease: self.lease,
            holder: None,
            lease_history: self.lease_history,
            last_progress_at: self.last_progress_at,
            queue_key,
            extras: self.extras,
            content_key: Default::default(),
            target_key: Default::default(),
        }
    }
}

/// One job's line in the trace: its lifecycle, not its content (workload,
/// records and curve are in the `jobs` table). Same shape as the event's
/// `job` so that a reader of either finds `job_id` and `state` in one place.
#[derive(Serialize)]
pub struct TraceJob<'a> {
    job_id: &'a str,
    name: &'a str,
    state: JobState,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<&'a str>,
    lease: Lease,
    #[serde(skip_serializing_if = "Option::is_none")]
    best_latency_s: Option<f64>,
    /// Why it is back in the queue or failed: the newest error.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a JobError>,
    /// The earlier job that answered (`cache_hit`) or warm-started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_from: Option<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    cache_hit: bool,
    /// Who made this change (`submit`, `cancel`, `retry` by a named admin
    /// token), when a person did.
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a str>,
}

impl<'a> TraceJob<'a> {
    pub fn of(job: &'a Job) -> TraceJob<'a> {
        let v = &job.view;
        let after_an_error = matches!(v.state, JobState::Queued | JobState::Failed);
        TraceJob {
            job_id: &v.job_id,
            name: &v.name,
            state: v.state,
            attempts: v.attempts,
            worker: v.worker.as_deref(),
            lease: job.lease,
            best_latency_s: v.best_latency_s,
            error: v.errors.last().filter(|_| after_an_error),
            cached_from: v.cached_from.as_deref(),
            cache_hit: v.cache_hit,
            by: v
                .actions
                .last()
                .filter(|a| a.at == v.updated_at)
                .map(|a| a.by.as_str()),
        }
    }
}
