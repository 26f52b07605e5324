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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tunefleet_shared::model::{TunerSettings, WarmStart};
use tunefleet_shared::protocol::{
    record_progress_point, JobAction, JobError, JobId, JobResult, JobState, JobView, Lease,
    MasterMessage, Millis, ResultMeta, TuningRecord, WorkerHello, WorkerView, MAX_JOB_ACTIONS,
};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{Op, Workload};

mod cache;
mod imports;
use cache::{CacheAnswer, TuningCache};
use imports::ImportPool;
pub use imports::{MetaRow, IMPORT_PREFIX, KEY_PREFIX};

/// A connection-scoped worker identity, allocated by the driver.
pub type SessionId = u64;

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

/// Which worker process held a lease; lets a result that finished while the
/// worker was disconnected be matched to the same worker after it reconnects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub lease: Lease,
    pub worker_id: String,
    pub worker: String,
}

/// A job as the scheduler and the database know it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Shared, not owned: a snapshot for subscribers takes every job's view
    /// by reference count instead of a deep copy (which held the core for
    /// ~100 ms with 30,000 jobs), and a change to a view a snapshot still
    /// holds copies that one view first (`Arc::make_mut`).
    pub view: Arc<JobView>,
    /// The newest lease issued for this job (0 before the first assignment).
    pub lease: Lease,
    /// The session holding the current lease while in flight. Never persisted
    /// as meaningful: sessions do not survive a restart.
    #[serde(skip)]
    pub holder: Option<SessionId>,
    pub lease_history: Vec<LeaseRecord>,
    pub last_progress_at: Millis,
    /// Position in the queue: lower runs first. Recycled jobs get negative keys.
    pub queue_key: i64,
    /// What travels with each assignment but is not part of the job's identity.
    #[serde(default)]
    pub extras: JobExtras,
    /// See [`Job::content_key`].
    #[serde(skip)]
    pub content_key: ContentKeyCache,
}

impl Job {
    /// The view, to change: copied first if a snapshot still holds it.
    pub fn view_mut(&mut self) -> &mut JobView {
        Arc::make_mut(&mut self.view)
    }
}

/// A job's [`Workload::content_key`], computed once. Hashing the workload's
/// canonical JSON again whenever the tuning cache met the job was 6% of the
/// core's time per job (docs/benchmarks.md). Not state: never stored, and
/// equal to any other, so a job loaded from its row equals the same job in
/// memory. The key leaves out name, budget, target and tuner, the only parts
/// of a workload the scheduler ever changes.
#[derive(Clone, Debug, Default)]
pub struct ContentKeyCache(std::sync::OnceLock<String>);

impl ContentKeyCache {
    fn known(key: String) -> Self {
        ContentKeyCache(std::sync::OnceLock::from(key))
    }
}

impl PartialEq for ContentKeyCache {
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
    fn target(&self) -> &Target {
        &self.view.workload.target
    }
    /// The computation's key (the tuning cache's and the import pool's).
    pub fn content_key(&self) -> &str {
        self.content_key
            .0
            .get_or_init(|| self.view.workload.content_key())
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
    fn opened(&mut self, target: &Target) {
        self.0
            .entry(target.canonical_json())
            .or_insert_with(|| (target.clone(), 0))
            .1 += 1;
    }

    fn closed(&mut self, target: &Target) {
        let key = target.canonical_json();
        if let Some(entry) = self.0.get_mut(&key) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.0.remove(&key);
            }
        }
    }

    /// A job of this target went from `before` to `after`.
    fn changed(&mut self, target: &Target, before: JobState, after: JobState) {
        match (before.is_terminal(), after.is_terminal()) {
            (false, true) => self.closed(target),
            (true, false) => self.opened(target),
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
                s.open.opened(job.target());
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

    // ----- events -------------------------------------------------------

    /// New workloads. Returns (new job ids, duplicate job ids) in input order.
    pub fn submit(
        &mut self,
        workloads: Vec<Workload>,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        self.submit_as(workloads, CachePolicy::Use, now, out)
    }

    /// [`Scheduler::submit`], choosing whether the tuning cache may answer.
    /// A new job answered from it is created `done` (`cache_hit`); one it can
    /// only warm-start is queued with the earlier records and the rest of
    /// its budget (see `cache.rs`).
    pub fn submit_as(
        &mut self,
        workloads: Vec<Workload>,
        policy: CachePolicy,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        let with_extras = workloads
            .into_iter()
            .map(|w| (w, JobExtras::default()))
            .collect();
        self.submit_inner(with_extras, policy, now, out)
    }

    /// [`Scheduler::submit`] with per-job extras (a model run's rounds, which
    /// bring their own warm starts: the cache stays out). A duplicate keeps
    /// the extras it was first submitted with.
    pub fn submit_with(
        &mut self,
        workloads: Vec<(Workload, JobExtras)>,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        self.submit_inner(workloads, CachePolicy::Bypass, now, out)
    }

    fn submit_inner(
        &mut self,
        workloads: Vec<(Workload, JobExtras)>,
        policy: CachePolicy,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        let (mut created, mut duplicates) = (Vec::new(), Vec::new());
        for (workload, mut extras) in workloads {
            let (id, content_key) = match policy {
                CachePolicy::Use => {
                    let (id, content_key) = workload.job_id_and_content_key();
                    (id, Some(content_key))
                }
                CachePolicy::Bypass => (workload.job_id(), None),
            };
            if self.jobs.contains_key(&id) {
                duplicates.push(id);
                continue;
            }
            let (answer, content_key) = match content_key {
                Some(content_key) => {
                    let answer = self.cache.lookup(&workload, &content_key, &self.jobs);
                    (answer, ContentKeyCache::known(content_key))
                }
                None => (CacheAnswer::Miss, ContentKeyCache::default()),
            };
            let key = self.next_back;
            self.next_back += 1;
            let mut view = JobView {
                job_id: id.clone(),
                name: workload.name.clone(),
                trials_total: workload.trials,
                workload,
                state: JobState::Queued,
                attempts: 0,
                worker: None,
                trials_done: 0,
                best_latency_s: None,
                records: Vec::new(),
                history: Vec::new(),
                errors: Vec::new(),
                result: None,
                created_at: now,
                updated_at: now,
                started_at: None,
                finished_at: None,
                cache_hit: false,
                cached_from: None,
                actions: Vec::new(),
            };
            match answer {
                CacheAnswer::Miss => {}
                CacheAnswer::Hit(from) => {
                    if let Some(source) = self.jobs.get(&from) {
                        answer_from(&mut view, source, now);
                    }
                }
                CacheAnswer::Warm {
                    from,
                    trials,
                    start,
                } => {
                    if let Some(source) = self.jobs.get(&from) {
                        view.records = source.view.records.clone();
                        view.best_latency_s = source.view.best_latency_s;
                    }
                    view.trials_done = trials;
                    view.cached_from = Some(from);
                    extras.prior_trials = trials;
                    extras.warm_start = Some(start);
                }
            }
            let answered = view.cache_hit;
            if !answered {
                self.seed(&view.workload, content_key.0.get(), &mut extras);
                self.open.opened(&view.workload.target);
            }
            self.jobs.insert(
                id.clone(),
                Box::new(Job {
                    view: Arc::new(view),
                    lease: 0,
                    holder: None,
                    lease_history: Vec::new(),
                    last_progress_at: now,
                    queue_key: key,
                    extras,
                    content_key,
                }),
            );
            if !answered {
                self.enqueue(&id, key);
            }
            out.push(Output::JobChanged(id.clone()));
            created.push(id);
        }
        self.dispatch(now, out);
        (created, duplicates)
    }

    /// Adds imported records to a new job's warm start when its workload
    /// line is known (see `imports.rs`). `--fresh` (a bypassed cache without
    /// a line of its own) is not seeded: `content_key` is the key the cache
    /// lookup computed, `None` when the cache was bypassed.
    fn seed(&self, workload: &Workload, content_key: Option<&String>, extras: &mut JobExtras) {
        // Most farms import nothing: then no submission pays for the
        // lookups and the clones below.
        if !self.imports.has_records() {
            return;
        }
        let line = extras
            .workload_line
            .clone()
            .or_else(|| extras.warm_start.as_ref().map(|w| w.workload.clone()))
            .or_else(|| self.imports.line_for(content_key?).cloned());
        let Some(line) = line else { return };
        let mut seeds = self.imports.seeds_for(&line, &workload.target);
        // The fastest few are what the search starts from; more would only
        // grow the job's row and its assignment.
        seeds.truncate(MAX_SEEDS_PER_JOB);
        if seeds.is_empty() {
            return;
        }
        let start = extras.warm_start.get_or_insert_with(|| {
            Box::new(WarmStart {
                workload: line,
                records: Vec::new(),
            })
        });
        let mut added: u32 = 0;
        for record in seeds {
            if !start.records.contains(&record) {
                start.records.push(record);
                added += 1;
            }
        }
        extras.seeded = added;
    }

    /// Stores an import (`tunefleet import`); returns what it added and the
    /// `meta` rows to commit with it.
    pub fn import(
        &mut self,
        workloads: Vec<tunefleet_shared::import::ImportedWorkload>,
        keys: Vec<tunefleet_shared::import::WorkloadKey>,
    ) -> Result<(tunefleet_shared::import::ImportReport, Vec<MetaRow>), String> {
        self.imports.import(workloads, keys)
    }

    /// Loads the `meta` rows of earlier imports (prefixes [`IMPORT_PREFIX`]
    /// and [`KEY_PREFIX`]).
    pub fn restore_imports(&mut self, rows: Vec<(String, String)>) {
        self.imports.restore(rows);
    }

    /// A worker registered. Refused when open jobs exist and none can run on
    /// its target (a silent mismatch would leave the worker idle forever).
    pub fn worker_joined(
        &mut self,
        session: SessionId,
        hello: &WorkerHello,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<usize, JoinRefusal> {
        let matching: usize = self
            .open
            .0
            .values()
            .filter(|(target, _)| hello.target.serves(target))
            .map(|(_, count)| count)
            .sum();
        if !self.open.0.is_empty() && matching == 0 {
            // Keys are canonical texts, sorted: the first five, as before.
            let wanted: Vec<&str> = self.open.0.keys().take(5).map(String::as_str).collect();
            return Err(JoinRefusal::NoMatchingJobs {
                worker: hello.target.canonical_json(),
                wanted: wanted.join(", "),
            });
        }
        let view = WorkerView {
            session: session_label(session),
            worker_id: hello.worker_id.clone(),
            name: hello.name.clone(),
            target: hello.target.clone(),
            backend: hello.backend.clone(),
            tvm_version: hello.tvm_version.clone(),
            current_job: None,
            jobs_done: 0,
            connected_at: now,
        };
        self.sessions.insert(
            session,
            Session {
                target_key: view.target.canonical_json(),
                view,
                idle: false,
                current: None,
            },
        );
        out.push(Output::WorkerJoined(session));
        Ok(matching)
    }

    /// The worker's socket closed, errored or missed its heartbeat. Its job
    /// goes back to the front of the queue at once.
    pub fn worker_left(
        &mut self,
        session: SessionId,
        kind: LeaveKind,
        reason: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        self.set_busy(session);
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        if let Some((job_id, lease)) = s.current {
            let message = format!("worker {} ({}) lost: {reason}", s.view.name, s.view.session);
            if let Some(job) = self.jobs.get_mut(&job_id) {
                if job.holder == Some(session) && job.lease == lease {
                    job.holder = None;
                    if kind == LeaveKind::Graceful {
                        job.view_mut().attempts = job.view.attempts.saturating_sub(1);
                    }
                    self.end_attempt(&job_id, message, now, out);
                }
            }
        }
        out.push(Output::WorkerLeft {
            session,
            reason: reason.to_string(),
        });
        self.dispatch(now, out);
    }

    /// The worker is idle and wants work; it gets an `assign` now or as soon
    /// as a job it can serve is queued.
    pub fn request_job(&mut self, session: SessionId, now: Millis, out: &mut Vec<Output>) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if let Some((job_id, lease)) = s.current.take() {
            // Messages on one socket arrive in order, so a request while holding
            // a job means the worker dropped it.
            let name = s.view.name.clone();
            if let Some(job) = self.jobs.get_mut(&job_id) {
                if job.holder == Some(session) && job.lease == lease {
                    job.holder = None;
                    self.end_attempt(
                        &job_id,
                        format!("worker {name} asked for new work without finishing this job"),
                        now,
                        out,
                    );
                }
            }
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.view.current_job = None;
        }
        self.set_idle(session);
        self.dispatch(now, out);
    }

    pub fn progress(
        &mut self,
        session: SessionId,
        report: &ProgressReport,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        let ProgressReport {
            ref job_id,
            lease,
            trials_done,
            trials_total,
            best_latency_s,
        } = *report;
        let job = self.held_job_mut(session, job_id, lease)?;
        // A warm-started job's worker counts only the rest of the budget.
        let prior = job.extras.prior_trials;
        let (trials_done, trials_total) = (
            trials_done.saturating_add(prior),
            trials_total.saturating_add(prior),
        );
        let was_running = job.view.state == JobState::Running;
        let view = job.view_mut();
        view.state = JobState::Running;
        view.trials_done = trials_done.min(trials_total.max(view.trials_total));
        if trials_total > 0 {
            view.trials_total = trials_total;
        }
        if let Some(best) = best_latency_s.filter(|b| b.is_finite() && *b > 0.0) {
            let best = view.best_latency_s.map_or(best, |b| b.min(best));
            view.best_latency_s = Some(best);
            record_progress_point(&mut view.history, view.trials_done, best);
        }
        view.updated_at = now;
        job.last_progress_at = now;
        out.push(if was_running {
            Output::JobProgressed(job_id.clone())
        } else {
            Output::JobChanged(job_id.clone())
        });
        Ok(())
    }

    /// A finished tuning result. Accepted when it comes from the current lease
    /// holder, or (re-sent after a reconnect) when the job is still open and the
    /// lease was issued to the same worker process. A job is done exactly once.
    pub fn result(
        &mut self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
        result: JobResult,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        self.check_owner(session, job_id, lease)?;
        let Some(job) = self.jobs.get(job_id) else {
            return Err(Rejection::UnknownJob(job_id.to_string()));
        };
        let nbest = job.extras.nbest.map_or(self.config.nbest, |n| n as usize);
        let measures_kernel = !matches!(job.view.workload.op, Op::Model { .. });
        let records = match validate_result(&result, nbest, measures_kernel) {
            Ok(records) => records,
            Err(e) => {
                if self.is_current(session, job_id, lease) {
                    self.release_lease(session, job_id, lease, out);
                    self.end_attempt(job_id, format!("invalid result: {e}"), now, out);
                    self.dispatch(now, out);
                }
                return Err(Rejection::InvalidResult(e));
            }
        };
        let worker_name = self
            .sessions
            .get(&session)
            .map(|s| s.view.name.clone())
            .unwrap_or_default();
        self.release_lease(session, job_id, lease, out);
        if let Some(s) = self.sessions.get_mut(&session) {
            s.view.jobs_done += 1;
            out.push(Output::WorkerChanged(session));
        }
        let Some(job) = self.jobs.get_mut(job_id) else {
            return Err(Rejection::UnknownJob(job_id.to_string()));
        };
        self.open
            .changed(&job.view.workload.target, job.view.state, JobState::Done);
        job.view_mut().state = JobState::Done;
        job.view_mut().worker = Some(worker_name.clone());
        let prior = job.extras.prior_trials;
        // The worker's own measurement of the best kernel, not the tuner's
        // estimate; after a warm start the earlier best still counts.
        let measured = Some(result.best_latency_s).filter(|l| *l > 0.0);
        job.view_mut().best_latency_s = match (measured, job.view.best_latency_s) {
            (Some(new), Some(old)) if prior > 0 => Some(new.min(old)),
            (new, _) => new,
        };
        job.view_mut().records = if prior > 0 {
            merge_records(std::mem::take(&mut job.view_mut().records), records, nbest)
        } else {
            records
        };
        job.view_mut().trials_done = result
            .trials
            .saturating_add(prior)
            .max(job.view.trials_done);
        job.view_mut().result = Some(ResultMeta {
            trials: result.trials,
            wall_time_s: result.wall_time_s,
            worker: worker_name,
            backend: result.backend,
            tvm_version: result.tvm_version,
            gflops: result.gflops,
            extra: result.extra,
            target: result.target,
        });
        let view = job.view_mut();
        view.finished_at = Some(now);
        view.updated_at = now;
        self.cache.add(&self.jobs[job_id]);
        self.imports.learn(&self.jobs[job_id]);
        out.push(Output::JobChanged(job_id.to_string()));
        self.dispatch(now, out);
        Ok(())
    }

    /// The worker could not tune the job. Same ownership rule as results.
    pub fn job_failed(
        &mut self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
        error: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        self.check_owner(session, job_id, lease)?;
        if !self.is_current(session, job_id, lease) {
            // That attempt already ended (and was recorded) when the worker was
            // lost; a late failure must not end whatever runs the job now.
            return Err(Rejection::Superseded {
                job: job_id.to_string(),
                lease,
            });
        }
        let name = self
            .sessions
            .get(&session)
            .map(|s| s.view.name.clone())
            .unwrap_or_default();
        self.release_lease(session, job_id, lease, out);
        self.end_attempt(job_id, format!("worker {name} reported: {error}"), now, out);
        self.dispatch(now, out);
        Ok(())
    }

    /// Time passes: recycle jobs whose worker went quiet for `job_timeout`.
    pub fn tick(&mut self, now: Millis, out: &mut Vec<Output>) {
        let Some(timeout) = self.config.job_timeout_ms else {
            return;
        };
        let stale: Vec<(JobId, SessionId, Lease)> = self
            .jobs
            .values()
            .filter(|j| {
                j.state().is_in_flight() && now.saturating_sub(j.last_progress_at) > timeout
            })
            .filter_map(|j| j.holder.map(|h| (j.id().clone(), h, j.lease)))
            .collect();
        for (job_id, session, lease) in stale {
            self.release_lease(session, &job_id, lease, out);
            out.push(Output::Send {
                session,
                msg: MasterMessage::Cancel {
                    job_id: job_id.clone(),
                    lease,
                    reason: format!("no progress for {} s (job timeout)", timeout / 1000),
                },
            });
            self.end_attempt(
                &job_id,
                format!("job timeout: no progress for {} s", timeout / 1000),
                now,
                out,
            );
        }
        self.dispatch(now, out);
    }

    pub fn cancel(
        &mut self,
        job_id: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), CommandError> {
        let job = self
            .jobs
            .get(job_id)
            .ok_or_else(|| CommandError::UnknownJob(job_id.to_string()))?;
        let state = job.state();
        if state.is_terminal() {
            return Err(CommandError::InvalidState {
                job: job_id.to_string(),
                state,
                action: "cancel",
                needs: "queued, assigned or running",
            });
        }
        if let (Some(holder), lease) = (job.holder, job.lease) {
            self.release_lease(holder, job_id, lease, out);
            out.push(Output::Send {
                session: holder,
                msg: MasterMessage::Cancel {
                    job_id: job_id.to_string(),
                    lease,
                    reason: "cancelled by an admin".into(),
                },
            });
        }
        self.dequeue(job_id);
        if let Some(job) = self.jobs.get_mut(job_id) {
            self.open.changed(
                &job.view.workload.target,
                job.view.state,
                JobState::Cancelled,
            );
            let view = job.view_mut();
            view.state = JobState::Cancelled;
            view.worker = None;
            view.finished_at = Some(now);
            view.updated_at = now;
        }
        out.push(Output::JobChanged(job_id.to_string()));
        self.dispatch(now, out);
        Ok(())
    }

    /// Puts a failed or cancelled job back at the end of the queue with a
    /// fresh attempt budget; its error history is kept.
    pub fn retry(
        &mut self,
        job_id: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), CommandError> {
        let job = self
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| CommandError::UnknownJob(job_id.to_string()))?;
        let state = job.state();
        if !matches!(state, JobState::Failed | JobState::Cancelled) {
            return Err(CommandError::InvalidState {
                job: job_id.to_string(),
                state,
                action: "retry",
                needs: "failed or cancelled",
            });
        }
        self.open
            .changed(&job.view.workload.target, state, JobState::Queued);
        let view = job.view_mut();
        view.state = JobState::Queued;
        view.attempts = 0;
        view.finished_at = None;
        view.trials_done = 0;
        view.updated_at = now;
        let key = self.next_back;
        self.next_back += 1;
        self.enqueue(job_id, key);
        out.push(Output::JobChanged(job_id.to_string()));
        self.dispatch(now, out);
        Ok(())
    }

    /// Records who did what to a job (`submit`, `cancel`, `retry`). Call it
    /// in the same batch as the action, so that one commit and one event
    /// carry both.
    pub fn note_action(&mut self, job_id: &str, action: &str, by: &str, now: Millis) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        let actions = &mut job.view_mut().actions;
        if actions.len() >= MAX_JOB_ACTIONS {
            // The submission (first) stays; the oldest later one goes.
            actions.remove(1);
        }
        actions.push(JobAction {
            action: action.to_string(),
            by: by.to_string(),
            at: now,
        });
    }

    // ----- internals ----------------------------------------------------

    fn held_job_mut(
        &mut self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
    ) -> Result<&mut Job, Rejection> {
        let job = self
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| Rejection::UnknownJob(job_id.to_string()))?;
        if job.state().is_terminal() {
            return Err(Rejection::AlreadyFinished {
                job: job_id.to_string(),
                state: job.state(),
            });
        }
        if job.holder != Some(session) || job.lease != lease {
            return Err(Rejection::NotAssigned {
                job: job_id.to_string(),
                lease,
            });
        }
        Ok(job)
    }

    fn is_current(&self, session: SessionId, job_id: &str, lease: Lease) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|j| j.holder == Some(session) && j.lease == lease)
    }

    /// The ownership rule for results and failures (see [`Scheduler::result`]).
    fn check_owner(&self, session: SessionId, job_id: &str, lease: Lease) -> Result<(), Rejection> {
        let s = self
            .sessions
            .get(&session)
            .ok_or(Rejection::UnknownSession(session))?;
        let job = self
            .jobs
            .get(job_id)
            .ok_or_else(|| Rejection::UnknownJob(job_id.to_string()))?;
        if job.state().is_terminal() {
            return Err(Rejection::AlreadyFinished {
                job: job_id.to_string(),
                state: job.state(),
            });
        }
        let current = job.holder == Some(session) && job.lease == lease;
        let same_process = job
            .lease_history
            .iter()
            .any(|r| r.lease == lease && r.worker_id == s.view.worker_id);
        if current || same_process {
            Ok(())
        } else {
            Err(Rejection::NotAssigned {
                job: job_id.to_string(),
                lease,
            })
        }
    }

    /// Detaches the job from the queue and from whoever holds it. If that is
    /// not `by` under `lease` (a late result won), the holder is told to stop.
    fn release_lease(&mut self, by: SessionId, job_id: &str, lease: Lease, out: &mut Vec<Output>) {
        self.dequeue(job_id);
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        let Some(holder) = job.holder.take() else {
            return;
        };
        let held_lease = job.lease;
        if let Some(s) = self.sessions.get_mut(&holder) {
            if s.current.as_ref().map(|(j, _)| j.as_str()) == Some(job_id) {
                s.current = None;
                s.view.current_job = None;
                out.push(Output::WorkerChanged(holder));
            }
        }
        // A late result under an old lease can close a job that its sender, or
        // another worker, is running again under a newer one: stop that run.
        if holder != by || held_lease != lease {
            out.push(Output::Send {
                session: holder,
                msg: MasterMessage::Cancel {
                    job_id: job_id.to_string(),
                    lease: held_lease,
                    reason: "finished by another worker".into(),
                },
            });
        }
    }

    /// An attempt ended without a result: record why, then requeue at the
    /// front or fail for good.
    fn end_attempt(&mut self, job_id: &str, message: String, now: Millis, out: &mut Vec<Output>) {
        let max_attempts = self.config.max_attempts;
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        job.holder = None;
        let view = job.view_mut();
        view.errors.push(JobError {
            attempt: view.attempts,
            worker: view.worker.clone(),
            at: now,
            message,
        });
        job.view_mut().worker = None;
        job.view_mut().updated_at = now;
        if job.view.attempts >= max_attempts {
            self.open
                .changed(&job.view.workload.target, job.view.state, JobState::Failed);
            job.view_mut().state = JobState::Failed;
            job.view_mut().finished_at = Some(now);
            self.dequeue(job_id);
        } else {
            job.view_mut().state = JobState::Queued;
            let key = self.take_front_key();
            self.enqueue(job_id, key);
        }
        out.push(Output::JobChanged(job_id.to_string()));
    }

    /// Hands queued jobs to idle sessions, in session (connection) order, each
    /// the earliest queued job its target can serve.
    fn set_idle(&mut self, session: SessionId) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        s.idle = true;
        self.idle
            .entry(s.target_key.clone())
            .or_insert_with(|| IdleGroup {
                target: s.view.target.clone(),
                sessions: BTreeSet::new(),
            })
            .sessions
            .insert(session);
    }

    fn set_busy(&mut self, session: SessionId) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if !std::mem::replace(&mut s.idle, false) {
            return;
        }
        if let Some(group) = self.idle.get_mut(&s.target_key) {
            group.sessions.remove(&session);
            if group.sessions.is_empty() {
                self.idle.remove(&s.target_key);
            }
        }
    }

    /// Hands queued jobs to idle workers: in session order, each idle worker
    /// takes the first queued job its target serves. Queues only shrink
    /// here, so picking, each time, the lowest idle session that has a job
    /// it serves gives the same assignments as walking every idle session,
    /// at a cost of (targets × queues) per assignment.
    fn dispatch(&mut self, now: Millis, out: &mut Vec<Output>) {
        loop {
            let queues = &self.queues;
            let pick = self
                .idle
                .values()
                .filter_map(|group| {
                    let next = queues
                        .values()
                        .filter(|(t, q)| !q.is_empty() && group.target.serves(t))
                        .filter_map(|(_, q)| q.iter().next().map(|(k, id)| (*k, id)))
                        .min()?;
                    Some((*group.sessions.first()?, next.1.clone()))
                })
                .min_by_key(|(session, _)| *session);
            let Some((session, job_id)) = pick else {
                return;
            };
            self.assign(session, &job_id, now, out);
        }
    }

    fn assign(&mut self, session: SessionId, job_id: &str, now: Millis, out: &mut Vec<Output>) {
        self.dequeue(job_id);
        let default_nbest = self.config.nbest as u32;
        let (Some(s), Some(job)) = (self.sessions.get_mut(&session), self.jobs.get_mut(job_id))
        else {
            return;
        };
        job.lease += 1;
        job.holder = Some(session);
        job.view_mut().attempts += 1;
        // A new attempt tunes from scratch, or from its warm start; its
        // curve starts empty.
        job.view_mut().history.clear();
        let prior = job.extras.prior_trials;
        job.view_mut().best_latency_s = job
            .view
            .records
            .first()
            .map(|r| r.latency_s)
            .filter(|_| prior > 0);
        job.view_mut().trials_done = prior;
        job.view_mut().state = JobState::Assigned;
        job.view_mut().worker = Some(s.view.name.clone());
        job.view_mut().started_at = Some(now);
        job.view_mut().updated_at = now;
        job.last_progress_at = now;
        job.lease_history.push(LeaseRecord {
            lease: job.lease,
            worker_id: s.view.worker_id.clone(),
            worker: s.view.name.clone(),
        });
        if job.lease_history.len() > LEASE_HISTORY {
            job.lease_history.remove(0);
        }
        s.current = Some((job_id.to_string(), job.lease));
        s.view.current_job = Some(job_id.to_string());
        out.push(Output::Send {
            session,
            msg: MasterMessage::Assign {
                job_id: job_id.to_string(),
                lease: job.lease,
                attempt: job.view.attempts,
                workload: Box::new({
                    let mut workload = job.view.workload.clone();
                    // After a warm start, only the rest of the budget.
                    workload.trials = workload
                        .trials
                        .saturating_sub(job.extras.prior_trials)
                        .max(1);
                    workload
                }),
                nbest: job.extras.nbest.unwrap_or(default_nbest),
                warm_start: job.extras.warm_start.clone(),
                tuner: {
                    // The run's settings win over the workload file's.
                    let tuner = job.extras.tuner.over(&job.view.workload.tuner);
                    (!tuner.is_default()).then(|| Box::new(tuner))
                },
            },
        });
        out.push(Output::JobChanged(job_id.to_string()));
        out.push(Output::WorkerChanged(session));
        self.set_busy(session);
    }

    fn take_front_key(&mut self) -> i64 {
        let key = self.next_front;
        self.next_front -= 1;
        key
    }

    fn enqueue(&mut self, job_id: &str, key: i64) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        job.queue_key = key;
        let target = job.view.workload.target.clone();
        self.queues
            .entry(target.canonical_json())
            .or_insert_with(|| (target, BTreeMap::new()))
            .1
            .insert(key, job_id.to_string());
    }

    fn dequeue(&mut self, job_id: &str) {
        let Some(job) = self.jobs.get(job_id) else {
            return;
        };
        let canon = job.target().canonical_json();
        if let Some((_, q)) = self.queues.get_mut(&canon) {
            if q.get(&job.queue_key).map(String::as_str) == Some(job_id) {
                q.remove(&job.queue_key);
            }
        }
    }
}

/// Appends a curve point, thinning old points to stay within the cap.
pub fn session_label(session: SessionId) -> String {
    format!("w{session}")
}

/// Fills a new job's view with the answer an earlier one gives (a cache hit).
fn answer_from(view: &mut JobView, source: &Job, now: Millis) {
    let from = &source.view;
    view.state = JobState::Done;
    view.cache_hit = true;
    view.cached_from = Some(from.job_id.clone());
    view.worker = from.worker.clone();
    view.trials_done = from.trials_done;
    view.best_latency_s = from.best_latency_s;
    view.records = from.records.clone();
    view.history = from.history.clone();
    view.result = from.result.clone();
    view.finished_at = Some(now);
}

/// A warm-started job's records: the earlier ones and the new, best first,
/// each once.
fn merge_records(
    earlier: Vec<TuningRecord>,
    new: Vec<TuningRecord>,
    nbest: usize,
) -> Vec<TuningRecord> {
    let mut all = new;
    for record in earlier {
        if !all.iter().any(|r| r.record == record.record) {
            all.push(record);
        }
    }
    all.sort_by(|a, b| a.latency_s.total_cmp(&b.latency_s));
    all.truncate(nbest.max(1));
    all
}

/// Checks a result's numbers and returns its best `nbest` records, best first.
/// A model stage (task extraction) measures no kernel: its latency may be 0.
fn validate_result(
    result: &JobResult,
    nbest: usize,
    measures_kernel: bool,
) -> Result<Vec<TuningRecord>, String> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if !measures_kernel {
        if !(result.best_latency_s.is_finite() && result.best_latency_s >= 0.0) {
            return Err(format!(
                "best_latency_s must be a number >= 0, got {}",
                result.best_latency_s
            ));
        }
        return Ok(Vec::new());
    }
    if !ok(result.best_latency_s) {
        return Err(format!(
            "best_latency_s must be a positive number, got {}",
            result.best_latency_s
        ));
    }
    if let Some(bad) = result.records.iter().find(|r| !ok(r.latency_s)) {
        return Err(format!(
            "record latency must be a positive number, got {}",
            bad.latency_s
        ));
    }
    let mut records = result.records.clone();
    records.sort_by(|a, b| a.latency_s.total_cmp(&b.latency_s));
    records.truncate(nbest);
    if records.is_empty() {
        records.push(TuningRecord {
            latency_s: result.best_latency_s,
            record: serde_json::Value::Null,
        });
    }
    Ok(records)
}
