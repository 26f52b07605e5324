//! The scheduler: the whole job lifecycle as a plain state machine.
//!
//! It owns no socket, no database and no clock. Each method is one event
//! ("a worker joined", "a result arrived", "time is now T") and pushes the
//! consequences into an output list ([`Output`]): which jobs changed (to be
//! persisted and published), which messages go to which worker session, which
//! sessions must be closed. The driver (`core/`) translates sockets into
//! these calls and outputs back into I/O; tests and property tests call the
//! methods directly, which is why the invariants in `ARCHITECTURE.md` can be
//! checked exhaustively.
//!
//! Lifecycle: `queued → assigned → running → done | failed | cancelled`. A job
//! leaves `assigned`/`running` only through a result, a reported failure, the
//! loss of its worker (disconnect, missed heartbeat, job timeout), a cancel, or
//! a master restart. Every attempt that ends without a result is recorded in
//! the job's error history; after `max_attempts` such attempts the job fails.
//!
//! Each event's method lives with its concern: `submit`, `workers` (join,
//! leave, request, dispatch), `reports` (progress, result, failure) and
//! `lifecycle` (timeouts, cancel, retry, leases and queue order); `job` is
//! the job itself. Here: the state, the outputs, recovery and queries.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tunefleet_shared::protocol::{
    JobError, JobId, JobState, Lease, MasterMessage, Millis, WorkerView,
};
use tunefleet_shared::target::Target;

mod cache;
mod imports;
mod job;
mod lifecycle;
mod reports;
mod submit;
mod workers;
use cache::TuningCache;
use imports::ImportPool;
pub use imports::{MetaRow, IMPORT_PREFIX, KEY_PREFIX};
pub use job::{CachePolicy, Job, JobExtras, LeaseRecord, Memo, MAX_SEEDS_PER_JOB};

/// A connection-scoped worker identity, allocated by the driver. A type of
/// its own so that it cannot be swapped with a lease or a time (all three
/// were `u64`): the lease-holder check takes one of each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u64);

impl SessionId {
    /// The id the driver allocates after this one.
    pub fn next(self) -> SessionId {
        SessionId(self.0 + 1)
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Leases remembered per job for accepting late results.
const LEASE_HISTORY: usize = 16;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Attempts that may end without a result before the job fails.
    pub max_attempts: u32,
    /// Recycle an in-flight job whose worker reported nothing for this long.
    pub job_timeout_ms: Option<u64>,
    /// Best records kept per job.
    pub nbest: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_attempts: 3,
            job_timeout_ms: Some(30 * 60 * 1000),
            nbest: 5,
        }
    }
}

#[derive(Clone, Debug)]
struct Session {
    view: WorkerView,
    /// Its target's canonical text: the key of its group in `Scheduler::idle`.
    target_key: String,
    /// Asked for a job and has none (then it is in `Scheduler::idle`).
    idle: bool,
    current: Option<(JobId, Lease)>,
}

/// Open jobs by their target's canonical text (see `Scheduler::open`).
#[derive(Debug, Default)]
struct OpenTargets(BTreeMap<String, (Target, usize)>);

impl OpenTargets {
    /// `key` is the target's canonical text ([`Job::target_key`]).
    fn opened(&mut self, key: &str, target: &Target) {
        match self.0.get_mut(key) {
            Some(entry) => entry.1 += 1,
            None => {
                self.0.insert(key.to_string(), (target.clone(), 1));
            }
        }
    }

    fn closed(&mut self, key: &str) {
        if let Some(entry) = self.0.get_mut(key) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.0.remove(key);
            }
        }
    }

    /// A job of this target went from `before` to `after`.
    fn changed(&mut self, job: &Job, before: JobState, after: JobState) {
        match (before.is_terminal(), after.is_terminal()) {
            (false, true) => self.closed(job.target_key()),
            (true, false) => self.opened(job.target_key(), job.target()),
            _ => {}
        }
    }
}

/// The idle sessions of one worker target, in session order.
#[derive(Debug)]
struct IdleGroup {
    target: Target,
    sessions: BTreeSet<SessionId>,
}

/// What the driver must do after an event.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// The job changed: persist it, then publish its view.
    JobChanged(JobId),
    /// Only a running job's progress changed: publish the delta; nothing to
    /// persist (an in-flight job is recycled with its curve cleared on recovery).
    JobProgressed(JobId),
    WorkerJoined(SessionId),
    WorkerChanged(SessionId),
    WorkerLeft {
        session: SessionId,
        reason: String,
    },
    Send {
        session: SessionId,
        msg: MasterMessage,
    },
}

/// Why a worker message was not applied. Logged and answered, never stored.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error("unknown worker session {0}")]
    UnknownSession(SessionId),
    #[error("job {job} is not assigned to this worker under lease {lease}")]
    NotAssigned { job: JobId, lease: Lease },
    #[error("job {job} is already {state}")]
    AlreadyFinished { job: JobId, state: JobState },
    #[error("invalid result: {0}")]
    InvalidResult(String),
    #[error("lease {lease} of job {job} was already recycled when this worker was lost; the report changes nothing")]
    Superseded { job: JobId, lease: Lease },
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum JoinRefusal {
    #[error(
        "no open job can run on target {worker}; open jobs need: {wanted}. \
         A worker serves a job when the kinds match and every attribute the job pins is equal"
    )]
    NoMatchingJobs { worker: String, wanted: String },
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CommandError {
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error("job {job} is {state}; {action} needs a job that is {needs}")]
    InvalidState {
        job: JobId,
        state: JobState,
        action: &'static str,
        needs: &'static str,
    },
}

/// A worker's progress message, minus the token the network layer checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressReport {
    pub job_id: JobId,
    pub lease: Lease,
    pub trials_done: u32,
    pub trials_total: u32,
    pub best_latency_s: Option<f64>,
}

/// How a worker's session ended, which decides whether the attempt counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaveKind {
    /// Crash, network error, missed heartbeat: counts as a failed attempt.
    Lost,
    /// A clean goodbye (the worker closed normally, or the master is shutting
    /// down): the job goes back to the queue, but the attempt is not the job's fault.
    Graceful,
}

#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    /// Boxed: a `Job` is ~870 bytes, and a table of them inline wastes that
    /// much per empty slot (up to half the table after it doubles) and
    /// copies every job when it grows; boxed, a slot is 32 bytes. A farm
    /// keeps every job it was given, so this is most of its memory (the
    /// soak in docs/benchmarks.md).
    jobs: HashMap<JobId, Box<Job>>,
    /// Queued jobs grouped by their target's canonical text, each in queue order.
    queues: BTreeMap<String, (Target, BTreeMap<i64, JobId>)>,
    next_back: i64,
    next_front: i64,
    sessions: BTreeMap<SessionId, Session>,
    /// Idle sessions grouped by target, so that dispatch looks at a handful
    /// of targets, not at every idle worker: with 10,000 idle workers none
    /// of whose targets serves the queue, a recycle cost milliseconds.
    idle: BTreeMap<String, IdleGroup>,
    /// Jobs not ended yet, counted by target: a joining worker is checked
    /// against these few targets, not against every job the farm kept
    /// (326 µs per join with 70,000 ended jobs, on the core thread).
    open: OpenTargets,
    cache: TuningCache,
    imports: ImportPool,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            jobs: HashMap::new(),
            queues: BTreeMap::new(),
            next_back: 1,
            next_front: -1,
            sessions: BTreeMap::new(),
            idle: BTreeMap::new(),
            open: OpenTargets::default(),
            cache: TuningCache::default(),
            imports: ImportPool::default(),
        }
    }

    /// Rebuilds the scheduler from persisted jobs after a (possibly unclean)
    /// stop. Jobs that were in flight go back to the front of the queue; that
    /// attempt does not count, since the master, not the job, stopped it.
    pub fn recover(
        config: SchedulerConfig,
        jobs: Vec<Job>,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Self {
        let mut s = Scheduler::new(config);
        let mut jobs = jobs;
        jobs.sort_by_key(|j| j.queue_key);
        for mut job in jobs {
            s.next_back = s.next_back.max(job.queue_key + 1);
            s.next_front = s.next_front.min(job.queue_key - 1);
            job.holder = None;
            let id = job.id().clone();
            let was_in_flight = job.state().is_in_flight();
            if was_in_flight {
                let attempt = job.view.attempts;
                let worker = job.view.worker.clone();
                job.view_mut().errors.push(JobError {
                    attempt,
                    worker,
                    at: now,
                    message: "master restarted during this attempt; attempt not counted".into(),
                });
                let view = job.view_mut();
                view.attempts = attempt.saturating_sub(1);
                view.state = JobState::Queued;
                view.worker = None;
                view.updated_at = now;
            }
            if !job.state().is_terminal() {
                s.open.opened(job.target_key(), job.target());
            }
            s.cache.add(&job);
            s.imports.learn(&job);
            s.jobs.insert(id.clone(), Box::new(job));
            if was_in_flight {
                // In-flight jobs were at the head of the fleet's attention; keep them there.
                let key = s.take_front_key();
                s.enqueue(&id, key);
                out.push(Output::JobChanged(id));
            } else if s.jobs[&id].state() == JobState::Queued {
                let key = s.jobs[&id].queue_key;
                s.enqueue(&id, key);
            }
        }
        s
    }

    /// `--job-retention`: takes out of memory every job that ended (done,
    /// failed or cancelled) and has not changed since `before`, except those
    /// `keep` names (a model run still going needs its jobs). Returns them;
    /// their rows stay in the store, and [`Scheduler::restore`] takes one
    /// back. Nothing else changes: an ended job holds no lease and is in no
    /// queue, and it is no longer a tuning-cache entry in memory.
    pub fn archive(&mut self, before: Millis, keep: &dyn Fn(&str) -> bool) -> Vec<Box<Job>> {
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|job| job.state().is_terminal() && job.view.updated_at < before)
            .map(|job| job.id().clone())
            .filter(|id| !keep(id))
            .collect();
        let mut archived = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(job) = self.jobs.remove(&id) {
                self.cache.remove(&job);
                archived.push(job);
            }
        }
        archived
    }

    /// Takes an archived job back into memory (a resubmission of it, a
    /// retry, a cache lookup of its computation, a model run's shared task).
    /// Only an ended job is taken, and never over one already held: returns
    /// whether it was.
    pub fn restore(&mut self, job: Job) -> bool {
        if !job.state().is_terminal() || self.jobs.contains_key(job.id()) {
            return false;
        }
        self.next_back = self.next_back.max(job.queue_key + 1);
        self.next_front = self.next_front.min(job.queue_key - 1);
        let mut job = job;
        job.holder = None;
        self.cache.add(&job);
        self.imports.learn(&job);
        self.jobs.insert(job.id().clone(), Box::new(job));
        true
    }

    /// Tuning-cache entries held in memory.
    pub fn cache_entries(&self) -> usize {
        self.cache.len()
    }

    /// Jobs not ended yet (queued or in flight) by target, keyed by the
    /// target's canonical text.
    pub fn open_by_target(&self) -> impl Iterator<Item = (&str, usize)> {
        self.open
            .0
            .iter()
            .map(|(key, (_, count))| (key.as_str(), *count))
    }

    /// Targets of open jobs that no connected worker serves, with how many
    /// jobs each (they can only be queued): what `status` says is waiting
    /// for a worker. O(open targets × workers): both are small.
    pub fn unserved(&self) -> Vec<(&Target, usize)> {
        self.open
            .0
            .values()
            .filter(|(target, _)| !self.sessions.values().any(|s| s.view.target.serves(target)))
            .map(|(target, count)| (target, *count))
            .collect()
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).map(|job| &**job)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().map(|job| &**job)
    }

    pub fn worker(&self, session: SessionId) -> Option<&WorkerView> {
        self.sessions.get(&session).map(|s| &s.view)
    }

    pub fn workers(&self) -> impl Iterator<Item = &WorkerView> {
        self.sessions.values().map(|s| &s.view)
    }

    pub fn idle_sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.sessions
            .iter()
            .filter(|(_, s)| s.idle)
            .map(|(id, _)| *id)
    }

    /// The job a session holds, as the scheduler sees it.
    pub fn session_job(&self, session: SessionId) -> Option<&(JobId, Lease)> {
        self.sessions.get(&session).and_then(|s| s.current.as_ref())
    }

    /// Queued job ids in the order a universal worker would receive them.
    pub fn queue_order(&self) -> Vec<JobId> {
        let mut all: Vec<(i64, JobId)> = self
            .queues
            .values()
            .flat_map(|(_, q)| q.iter().map(|(k, id)| (*k, id.clone())))
            .collect();
        all.sort();
        all.into_iter().map(|(_, id)| id).collect()
    }
}

/// The label a session is shown by (`w1`, `w2`, …).
pub fn session_label(session: SessionId) -> String {
    format!("w{session}")
}
