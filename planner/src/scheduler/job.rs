//! A job as the scheduler and the database know it, and what travels with it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tunefleet_shared::model::{TunerSettings, WarmStart};
use tunefleet_shared::protocol::{JobId, JobState, JobView, Lease, Millis};
use tunefleet_shared::target::Target;

use super::SessionId;

/// Which worker process held a lease; lets a result that finished while the
/// worker was disconnected be matched to the same worker after it reconnects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub lease: Lease,
    pub worker_id: String,
    pub worker: String,
}

/// A job as the scheduler knows it. Not serialisable: the database stores
/// a row of its own (`store::row`), the wire a `JobView`, so neither format
/// changes with the scheduler's state.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Shared, not owned: a snapshot for subscribers takes every job's view
    /// by reference count instead of a deep copy (which held the core for
    /// ~100 ms with 30,000 jobs), and a change to a view a snapshot still
    /// holds copies that one view first (`Arc::make_mut`).
    pub view: Arc<JobView>,
    /// The newest lease issued for this job (0 before the first assignment).
    pub lease: Lease,
    /// The session holding the current lease while in flight. Never
    /// persisted: sessions do not survive a restart.
    pub holder: Option<SessionId>,
    pub lease_history: Vec<LeaseRecord>,
    pub last_progress_at: Millis,
    /// Position in the queue: lower runs first. Recycled jobs get negative keys.
    pub queue_key: i64,
    /// What travels with each assignment but is not part of the job's identity.
    pub extras: JobExtras,
    /// See [`Job::content_key`].
    pub content_key: Memo,
    /// See `Job::target_key`.
    pub target_key: Memo,
}

impl Job {
    /// The view, to change: copied first if a snapshot still holds it.
    pub fn view_mut(&mut self) -> &mut JobView {
        Arc::make_mut(&mut self.view)
    }
}

/// A text derived from a job's workload, computed once: its
/// [`Workload::content_key`] (hashing the workload's canonical JSON again
/// whenever the tuning cache met the job was 6% of the core's time per job,
/// docs/benchmarks.md) and its target's canonical text (the key of its queue
/// and of the open-target counts, formatted ~4 times per job before). Not
/// state: never stored, and equal to any other, so a job loaded from its row
/// equals the same job in memory. Both stay true for the job's life: a job's
/// workload never changes once submitted (the scheduler changes only the
/// copy it sends with an `assign`, for the budget left).
///
/// [`Workload::content_key`]: tunefleet_shared::workload::Workload::content_key
#[derive(Clone, Debug, Default)]
pub struct Memo(std::sync::OnceLock<String>);

impl Memo {
    pub(super) fn known(key: String) -> Self {
        Memo(std::sync::OnceLock::from(key))
    }

    /// The text, if computed already.
    pub(super) fn get(&self) -> Option<&String> {
        self.0.get()
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Most imported records added to one job's warm start.
pub const MAX_SEEDS_PER_JOB: usize = 64;

/// Per-job settings a model run attaches to its jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobExtras {
    /// Records kept from the result, instead of the fleet's `--nbest`: a
    /// model's rounds keep every measured candidate for later warm starts.
    #[serde(default)]
    pub nbest: Option<u32>,
    #[serde(default)]
    pub warm_start: Option<Box<WarmStart>>,
    #[serde(default)]
    pub tuner: TunerSettings,
    /// Trials the warm start already covered (from the tuning cache): the
    /// worker is sent the rest of the budget, and its counts are shifted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prior_trials: u32,
    /// The job's database workload line when it is known before the job
    /// runs (a model's task): imported records of that line seed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_line: Option<serde_json::Value>,
    /// Imported records added to the warm start (`tunefleet import`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seeded: u32,
    /// A round of a model run's task (sent as the `assign`'s `model_round`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_round: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Whether new jobs may be answered or warm-started from earlier results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    Use,
    /// `submit --fresh`: tune from scratch.
    Bypass,
}

impl Job {
    pub fn id(&self) -> &JobId {
        &self.view.job_id
    }
    pub fn state(&self) -> JobState {
        self.view.state
    }
    pub(super) fn target(&self) -> &Target {
        &self.view.workload.target
    }
    /// The computation's key (the tuning cache's and the import pool's).
    pub fn content_key(&self) -> &str {
        self.content_key
            .0
            .get_or_init(|| self.view.workload.content_key())
    }
    /// The target's canonical text: which queue the job is in.
    pub(super) fn target_key(&self) -> &str {
        self.target_key
            .0
            .get_or_init(|| self.view.workload.target.canonical_json())
    }
}
