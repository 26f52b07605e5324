//! The core: one thread that owns the scheduler and the store.
//!
//! Connection tasks never touch state. They send [`Command`]s over a bounded
//! channel; the core thread takes them in batches, feeds each to the
//! [`Scheduler`], then does the I/O the scheduler asked for in a fixed order:
//!
//! 1. commit every changed job and trace line in one SQLite transaction,
//! 2. publish the events to subscribers (a broadcast channel; never blocks),
//! 3. send worker messages and client replies.
//!
//! Because (1) happens before (2) and (3), nothing is acknowledged that is not
//! durable, and batching turns many small commits into one (group commit).
//! Having one owner also means no locks and a total order of events, which is
//! what `seq` numbers on events expose to clients.
//!
//! The clock lives here, not in the scheduler: each command is stamped with
//! the wall time when the core applies it, and a ticker task sends
//! [`Command::Tick`] so job timeouts fire without any event.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, error, info, warn};
use tunefleet_shared::fleet::job_order;
use tunefleet_shared::model::{
    base64, ArtifactFile, ModelArtifactKind, ModelStage, ModelSubmission, ModelView,
};
use tunefleet_shared::protocol::{
    FleetEvent, JobCounts, JobId, JobProgress, JobResult, JobState, JobView, Lease, MasterMessage,
    Millis, StatusReport, SubmitReport, TokenInfo, WorkerHello, WorkerView,
};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{Op, Workload};

use crate::metrics::{CoreCounters, FleetMetrics};
use crate::models::{ModelError, ModelRuns, Plan};
use crate::scheduler::{
    CachePolicy, CommandError, Job, JoinRefusal, LeaveKind, Output, ProgressReport, Rejection,
    Scheduler, SchedulerConfig, SessionId,
};
use crate::store::{Archived, Store, TraceJob};
use crate::tokens::{TokenBook, TokenError, TokenRegistry, META_PREFIX};

/// Commands taken per batch, at most; bounds the latency a batch adds.
const MAX_BATCH: usize = 1024;

pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// What the core sends to a worker's connection task.
#[derive(Debug)]
pub enum Outbound {
    Msg(MasterMessage),
    Close { code: u16, reason: String },
}

/// See `Core::snapshot_cache`.
#[derive(Default)]
struct SnapshotCache {
    /// Kept for as long as the seq is current, once serialised and small.
    held: Option<Arc<SharedSnapshot>>,
    shared: std::sync::Weak<SharedSnapshot>,
}

/// Snapshots up to this size are kept between subscribes; a larger one
/// (a farm with many finished jobs) would cost more memory than it saves.
const KEEP_SNAPSHOT_BYTES: usize = 8 << 20;

impl SnapshotCache {
    fn get(&mut self, seq: u64) -> Option<Arc<SharedSnapshot>> {
        self.trim();
        let shared = self
            .held
            .clone()
            .or_else(|| self.shared.upgrade())
            .filter(|s| s.seq == seq);
        if shared.is_none() {
            self.held = None;
        }
        shared
    }

    fn put(&mut self, shared: &Arc<SharedSnapshot>) {
        self.held = Some(shared.clone());
        self.shared = Arc::downgrade(shared);
    }

    /// Lets go of a snapshot that turned out large once it is serialised
    /// (called on every tick too, so it is not kept for long).
    fn trim(&mut self) {
        let large = |s: &Arc<SharedSnapshot>| {
            s.message
                .get()
                .is_some_and(|m| m.len() > KEEP_SNAPSHOT_BYTES)
        };
        if self.held.as_ref().is_some_and(large) {
            self.held = None;
        }
    }
}

/// A `snapshot` message for every subscriber that asked at `seq`. The
/// fleet is serialised once, by the first connection that sends it (off
/// the core thread), and then dropped; the text is shared.
pub struct SharedSnapshot {
    pub seq: u64,
    fleet: std::sync::Mutex<Option<SnapshotParts>>,
    message: tokio::sync::OnceCell<tokio_tungstenite::tungstenite::Utf8Bytes>,
}

impl SharedSnapshot {
    fn new(seq: u64, fleet: SnapshotParts) -> Self {
        SharedSnapshot {
            seq,
            fleet: std::sync::Mutex::new(Some(fleet)),
            message: tokio::sync::OnceCell::new(),
        }
    }

    /// The `ServerMessage::Snapshot` text.
    pub async fn message(&self) -> tokio_tungstenite::tungstenite::Utf8Bytes {
        // The initialiser never awaits, so it cannot be cancelled between
        // taking the fleet and storing the text.
        self.message
            .get_or_init(|| async {
                let mut fleet = self
                    .fleet
                    .lock()
                    .map(|mut f| f.take().unwrap_or_default())
                    .unwrap_or_default();
                // Sorted here rather than on the core: ~20 ms with 30,000 jobs.
                fleet.jobs.sort_by(|a, b| job_order(a, b));
                snapshot_message(self.seq, &fleet).into()
            })
            .await
            .clone()
    }
}

/// The fleet as the core hands it out for a snapshot: job views shared with
/// the scheduler (in no order until [`SharedSnapshot::message`] sorts them),
/// model views, and each worker's view already serialised (kept by the core
/// as workers change), so a snapshot of 30,000 jobs and 10,000 workers is
/// pointer copies instead of deep clones and serialisations on the core.
#[derive(Default)]
struct SnapshotParts {
    jobs: Vec<Arc<JobView>>,
    workers: Vec<Arc<str>>,
    models: Vec<ModelView>,
    archived: JobCounts,
}

/// `ServerMessage::Snapshot { seq, snapshot }` with the `FleetSnapshot`
/// written from its parts (tested against the enum below).
fn snapshot_message(seq: u64, fleet: &SnapshotParts) -> String {
    let (jobs, models) = match (
        serde_json::to_string(&fleet.jobs),
        serde_json::to_string(&fleet.models),
    ) {
        (Ok(jobs), Ok(models)) => (jobs, models),
        (Err(e), _) | (_, Err(e)) => {
            error!("cannot serialise the snapshot: {e}");
            ("[]".to_string(), "[]".to_string())
        }
    };
    let workers_len: usize = fleet.workers.iter().map(|w| w.len() + 1).sum();
    let mut out = String::with_capacity(jobs.len() + models.len() + workers_len + 80);
    out.push_str(r#"{"type":"snapshot","seq":"#);
    out.push_str(&seq.to_string());
    out.push_str(r#","snapshot":{"jobs":"#);
    out.push_str(&jobs);
    out.push_str(r#","workers":["#);
    for (i, worker) in fleet.workers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(worker);
    }
    out.push_str(r#"],"models":"#);
    out.push_str(&models);
    if !fleet.archived.is_empty() {
        out.push_str(r#","archived":"#);
        out.push_str(&serde_json::to_string(&fleet.archived).unwrap_or_else(|_| "{}".into()));
    }
    out.push_str("}}");
    out
}

/// `FleetEvent::WorkerJoined`/`WorkerUpdated` around a serialised view
/// (tested against the enum below).
fn worker_event_json(kind: &str, worker: &str) -> String {
    // Pushed, not `format!`ed: one allocation of the right size.
    let mut json = String::with_capacity(worker.len() + kind.len() + 24);
    json.push_str(r#"{"kind":""#);
    json.push_str(kind);
    json.push_str(r#"","worker":"#);
    json.push_str(worker);
    json.push('}');
    json
}

/// A worker's view as JSON, for its events and for snapshots.
fn worker_json(view: &WorkerView) -> Arc<str> {
    match serde_json::to_string(view) {
        Ok(json) => json.into(),
        Err(e) => {
            error!("cannot serialise a worker view: {e}");
            "{}".into()
        }
    }
}

/// A published event, serialised once for every subscriber.
#[derive(Debug)]
pub struct Published {
    pub seq: u64,
    /// Shared by every subscriber's socket without a copy.
    pub json: tokio_tungstenite::tungstenite::Utf8Bytes,
}

/// Messages from a registered worker, minus the token (checked by the connection).
#[derive(Debug)]
pub enum WorkerInput {
    RequestJob,
    Progress(ProgressReport),
    Result {
        job_id: JobId,
        lease: Lease,
        result: Box<JobResult>,
    },
    Failed {
        job_id: JobId,
        lease: Lease,
        error: String,
    },
}

pub enum Command {
    WorkerJoin {
        hello: Box<WorkerHello>,
        tx: mpsc::UnboundedSender<Outbound>,
        reply: oneshot::Sender<Result<(SessionId, usize), JoinRefusal>>,
    },
    WorkerLeave {
        session: SessionId,
        kind: LeaveKind,
        reason: String,
    },
    Worker {
        session: SessionId,
        input: WorkerInput,
    },
    Submit {
        workloads: Vec<Workload>,
        cache: CachePolicy,
        /// The admin token's name; `None` for start-up files.
        by: Option<String>,
        reply: oneshot::Sender<SubmitReport>,
    },
    CreateToken {
        name: String,
        /// The new token's text.
        reply: oneshot::Sender<Result<String, TokenError>>,
    },
    RevokeToken {
        name: String,
        reply: oneshot::Sender<Result<(), TokenError>>,
    },
    ListTokens {
        reply: oneshot::Sender<Vec<TokenInfo>>,
    },
    /// `tunefleet import`: records to seed later jobs; an `Err` names the
    /// entry that is not valid (nothing is stored then).
    Import {
        workloads: Vec<tunefleet_shared::import::ImportedWorkload>,
        keys: Vec<tunefleet_shared::import::WorkloadKey>,
        reply: oneshot::Sender<Result<tunefleet_shared::import::ImportReport, String>>,
    },
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
    /// The jobs held, or those named (archived ones read back from the
    /// store), unsorted: the views are shared, and the network layer sorts
    /// and copies them off this thread (with 30,000 jobs the copy took the
    /// core ~100 ms). The whole archive is read there too.
    Results {
        job_ids: Option<Vec<JobId>>,
        reply: oneshot::Sender<Vec<Arc<JobView>>>,
    },
    Cancel {
        job_id: JobId,
        /// The admin token's name.
        by: String,
        reply: oneshot::Sender<Result<(), CommandError>>,
    },
    Retry {
        job_id: JobId,
        by: String,
        reply: oneshot::Sender<Result<(), CommandError>>,
    },
    /// The fleet as a `snapshot` message; subscribers asking at the same
    /// seq share one.
    Snapshot {
        reply: oneshot::Sender<Arc<SharedSnapshot>>,
    },
    SubmitModel {
        submission: Box<ModelSubmission>,
        reply: oneshot::Sender<Result<JobId, ModelError>>,
    },
    Models {
        name: Option<String>,
        reply: oneshot::Sender<Result<Vec<ModelView>, ModelError>>,
    },
    StopModel {
        name: String,
        reply: oneshot::Sender<Result<(), ModelError>>,
    },
    ModelArtifact {
        name: String,
        artifact: ModelArtifactKind,
        reply: oneshot::Sender<Result<Vec<ArtifactFile>, String>>,
    },
    Metrics {
        reply: oneshot::Sender<FleetMetrics>,
    },
    Tick,
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// Cheap handle for connection tasks.
#[derive(Clone)]
pub struct CoreHandle {
    pub commands: mpsc::Sender<Command>,
    pub events: broadcast::Sender<Arc<Published>>,
}

impl CoreHandle {
    /// Sends a command and waits for its reply; `None` when the core is gone.
    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).await.ok()?;
        rx.await.ok()
    }

    pub async fn send(&self, command: Command) -> bool {
        self.commands.send(command).await.is_ok()
    }
}

type Reply = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Batch {
    dirty: Vec<JobId>,
    dirty_models: Vec<String>,
    /// (run, kind, bytes): compiled libraries, stored with the batch.
    artifacts: Vec<(String, &'static str, Vec<u8>)>,
    trace: Vec<(Millis, String)>,
    /// `meta` rows (named tokens) to write (`None`: delete).
    meta: Vec<(String, Option<String>)>,
    /// Serialised `FleetEvent`s, in order.
    events: Vec<String>,
    sends: Vec<(SessionId, Outbound)>,
    replies: Vec<Reply>,
    snapshots: Vec<oneshot::Sender<Arc<SharedSnapshot>>>,
}

pub struct Core {
    scheduler: Scheduler,
    models: ModelRuns,
    store: Store,
    sessions: HashMap<SessionId, mpsc::UnboundedSender<Outbound>>,
    next_session: SessionId,
    seq: u64,
    events: broadcast::Sender<Arc<Published>>,
    /// The last snapshot handed out: kept while the fleet does not change
    /// if it is small (an idle fleet's dashboards reconnect at the cost of a
    /// socket write), else only while a subscriber still sends it.
    snapshot_cache: SnapshotCache,
    /// Every registered worker's view as JSON, by session label.
    worker_json: HashMap<String, Arc<str>>,
    server_version: String,
    counters: CoreCounters,
    trace_retention_ms: Option<Millis>,
    trace_pruned_at: Millis,
    /// `--job-retention`: ended jobs unchanged for this long leave memory.
    job_retention_ms: Option<Millis>,
    archive_swept_at: Millis,
    /// The archived jobs by state (the store's rows, counted at start and
    /// kept current), so that counts stay whole without holding the jobs.
    archived: JobCounts,
    tokens: TokenBook,
    /// Set while commits fail (full disk, ...): read by the network layer,
    /// which then refuses new work instead of letting it queue unanswered.
    storage_failing: Arc<AtomicBool>,
}

impl Core {
    /// Loads the persisted jobs, recovers in-flight ones, and persists that.
    /// The registry the network layer checks named tokens against; kept
    /// current by this core.
    pub fn token_registry(&self) -> TokenRegistry {
        self.tokens.registry()
    }

    /// True while the store refuses commits (the batch is retried until it
    /// goes through; nothing of it is acknowledged before).
    pub fn storage_failing(&self) -> Arc<AtomicBool> {
        self.storage_failing.clone()
    }

    pub fn start(
        config: SchedulerConfig,
        mut store: Store,
        events: broadcast::Sender<Arc<Published>>,
    ) -> Result<Core, crate::store::StoreError> {
        let jobs = store.load_jobs()?;
        let models = ModelRuns::recover(store.load_models()?);
        let mut out = Vec::new();
        let loaded = jobs.len();
        let mut scheduler = Scheduler::recover(config, jobs, now_ms(), &mut out);
        let recovered: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::JobChanged(id) => scheduler.job(id),
                _ => None,
            })
            .collect();
        if loaded > 0 {
            info!(
                jobs = loaded,
                requeued = recovered.len(),
                "resumed from the state database"
            );
        }
        store.commit(recovered, std::iter::empty(), &[], &[])?;
        let mut archived = JobCounts::default();
        for (state, n) in store.archived_counts()? {
            archived.count_archived(state, n as isize);
        }
        if archived.total > 0 {
            info!(
                jobs = archived.total,
                "archived jobs stay in the state database (found again by id or computation)"
            );
        }
        let tokens = TokenBook::load(store.load_meta(META_PREFIX)?, TokenRegistry::default());
        let mut imports = store.load_meta(crate::scheduler::IMPORT_PREFIX)?;
        imports.extend(store.load_meta(crate::scheduler::KEY_PREFIX)?);
        scheduler.restore_imports(imports);
        Ok(Core {
            scheduler,
            models,
            store,
            sessions: HashMap::new(),
            next_session: 1,
            snapshot_cache: SnapshotCache::default(),
            worker_json: HashMap::new(),
            seq: 0,
            events,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            counters: CoreCounters::default(),
            trace_retention_ms: None,
            trace_pruned_at: 0,
            job_retention_ms: None,
            archive_swept_at: 0,
            archived,
            tokens,
            storage_failing: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Runs on its own thread until `Shutdown` or until every handle is gone.
    pub fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        while let Some(first) = commands.blocking_recv() {
            let mut batch = Batch::default();
            let mut shutdown = None;
            let mut next = Some(first);
            let mut taken = 0;
            while let Some(command) = next.take() {
                taken += 1;
                match command {
                    Command::Shutdown { done } => shutdown = Some(done),
                    other => self.apply(other, &mut batch),
                }
                if taken < MAX_BATCH {
                    next = commands.try_recv().ok();
                }
            }
            self.flush(batch);
            if let Some(done) = shutdown {
                info!("core stopped; state is flushed");
                let _ = done.send(());
                return;
            }
        }
    }

    fn apply(&mut self, command: Command, batch: &mut Batch) {
        let now = now_ms();
        let mut out = Vec::new();
        match command {
            Command::WorkerJoin { hello, tx, reply } => {
                let session = self.next_session;
                self.next_session += 1;
                let result = self.scheduler.worker_joined(session, &hello, now, &mut out);
                match &result {
                    Ok(matching) => {
                        info!(session, name = %hello.name, target = %hello.target, matching, "worker joined");
                        self.sessions.insert(session, tx);
                        let plan = self.models.refill(now, &self.slots());
                        self.apply_plan(plan, now, &mut out, batch);
                    }
                    Err(e) => warn!(name = %hello.name, "worker refused: {e}"),
                }
                let result = result.map(|m| (session, m));
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(result);
                }));
            }
            Command::WorkerLeave {
                session,
                kind,
                reason,
            } => {
                info!(session, %reason, "worker left");
                self.scheduler
                    .worker_left(session, kind, &reason, now, &mut out);
            }
            Command::Worker { session, input } => {
                let (job_id, lease, result) = match input {
                    WorkerInput::RequestJob => {
                        self.scheduler.request_job(session, now, &mut out);
                        (None, 0, Ok(()))
                    }
                    WorkerInput::Progress(report) => {
                        let r = self.scheduler.progress(session, &report, now, &mut out);
                        if let Err(e) = &r {
                            warn!(session, "progress rejected: {e}");
                            self.push_send(batch, session, error_msg(e));
                        }
                        (None, 0, Ok(()))
                    }
                    WorkerInput::Result {
                        job_id,
                        lease,
                        mut result,
                    } => {
                        let library = self.take_library(&job_id, &mut result);
                        let r = self
                            .scheduler
                            .result(session, &job_id, lease, *result, now, &mut out);
                        if let (Ok(()), Some(artifact)) = (&r, library) {
                            batch.artifacts.push(artifact);
                        }
                        (Some(job_id), lease, r)
                    }
                    WorkerInput::Failed {
                        job_id,
                        lease,
                        error,
                    } => {
                        let r = self
                            .scheduler
                            .job_failed(session, &job_id, lease, &error, now, &mut out);
                        (Some(job_id), lease, r)
                    }
                };
                if let Some(job_id) = job_id {
                    if let Err(e) = &result {
                        warn!(session, job = %job_id, lease, "result rejected, not stored: {e}");
                    }
                    let ack = MasterMessage::Ack {
                        job_id,
                        lease,
                        accepted: result.is_ok(),
                        reason: result.err().map(|e| e.to_string()),
                    };
                    // The ack goes after the scheduler's own outputs so that it is
                    // sent only once the change is committed.
                    self.follow_models(&mut out, now, batch);
                    self.collect(out, batch);
                    self.push_send(batch, session, Outbound::Msg(ack));
                    return;
                }
            }
            Command::Submit {
                workloads,
                cache,
                by,
                reply,
            } => {
                self.bring_back(workloads.iter().map(Workload::job_id), batch);
                if cache == CachePolicy::Use {
                    self.bring_back_entries(&workloads, batch);
                }
                let (new_jobs, duplicates) =
                    self.scheduler.submit_as(workloads, cache, now, &mut out);
                if let Some(by) = &by {
                    for id in &new_jobs {
                        self.scheduler.note_action(id, "submit", by, now);
                    }
                }
                let (mut cache_hits, mut warm_started, mut seeded) =
                    (Vec::new(), Vec::new(), Vec::new());
                for id in &new_jobs {
                    let Some(job) = self.scheduler.job(id) else {
                        continue;
                    };
                    if job.view.cache_hit {
                        cache_hits.push(id.clone());
                    } else if job.view.cached_from.is_some() {
                        warm_started.push(id.clone());
                    }
                    if job.extras.seeded > 0 {
                        seeded.push(id.clone());
                    }
                }
                info!(
                    new = new_jobs.len(),
                    duplicates = duplicates.len(),
                    cache_hits = cache_hits.len(),
                    warm_started = warm_started.len(),
                    seeded = seeded.len(),
                    "workloads submitted"
                );
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(SubmitReport {
                        new_jobs,
                        duplicates,
                        cache_hits,
                        warm_started,
                        seeded,
                    });
                }));
            }
            Command::Metrics { reply } => {
                let metrics = self.metrics();
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(metrics);
                }));
            }
            Command::Status { reply } => {
                let report = self.status();
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(report);
                }));
            }
            Command::Results { job_ids, reply } => {
                let mut views = self.results(job_ids.as_deref());
                if let Some(ids) = &job_ids {
                    // Read only: an archived job named here stays archived.
                    let archived = self.read_archived(ids.iter().cloned());
                    views.extend(archived.into_iter().map(|job| job.view));
                }
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(views);
                }));
            }
            Command::Cancel { job_id, by, reply } => {
                self.bring_back(std::iter::once(job_id.clone()), batch);
                let r = self.scheduler.cancel(&job_id, now, &mut out);
                if r.is_ok() {
                    self.scheduler.note_action(&job_id, "cancel", &by, now);
                }
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Retry { job_id, by, reply } => {
                self.bring_back(std::iter::once(job_id.clone()), batch);
                let r = self.scheduler.retry(&job_id, now, &mut out);
                if r.is_ok() {
                    self.scheduler.note_action(&job_id, "retry", &by, now);
                }
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::CreateToken { name, reply } => {
                let secret = crate::tokens::new_secret();
                let r = self.tokens.create(&name, &secret, now).map(|meta| {
                    info!(token = %name, "named admin token created");
                    batch.meta.extend(meta);
                    secret
                });
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::RevokeToken { name, reply } => {
                let r = self.tokens.revoke(&name).map(|meta| {
                    info!(token = %name, "named admin token revoked");
                    batch.meta.extend(meta);
                });
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Import {
                workloads,
                keys,
                reply,
            } => {
                let r = self
                    .scheduler
                    .import(workloads, keys)
                    .map(|(report, rows)| {
                        info!(
                            workloads = report.workloads_new,
                            records = report.records_new,
                            known = report.records_known,
                            keys = report.keys_new,
                            "records imported"
                        );
                        batch.meta.extend(rows);
                        report
                    });
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::ListTokens { reply } => {
                let list = self.tokens.list();
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(list);
                }));
            }
            Command::Snapshot { reply } => batch.snapshots.push(reply),
            Command::SubmitModel { submission, reply } => {
                let default_target = Target::of_kind("llvm");
                let r = self.models.submit(*submission, default_target, now);
                let r = r.map(|plan| {
                    let extract = plan.jobs.first().map(|(w, _)| w.job_id());
                    self.apply_plan(plan, now, &mut out, batch);
                    extract.unwrap_or_default()
                });
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Models { name, reply } => {
                let r = match name {
                    Some(name) => self
                        .models
                        .get(&name)
                        .map(|run| vec![run.view()])
                        .ok_or(ModelError::Unknown(name)),
                    None => Ok(self.models.runs().map(|r| r.view()).collect()),
                };
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::StopModel { name, reply } => {
                let r = self.models.stop(&name, now, &self.slots());
                let r = r.map(|plan| self.apply_plan(plan, now, &mut out, batch));
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::ModelArtifact {
                name,
                artifact,
                reply,
            } => {
                let r = self.artifact(&name, artifact);
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Tick => {
                self.scheduler.tick(now, &mut out);
                self.prune_trace(now);
                self.archive_ended_jobs(now, batch);
                self.snapshot_cache.trim();
            }
            Command::Shutdown { .. } => {}
        }
        self.follow_models(&mut out, now, batch);
        self.collect(out, batch);
    }

    /// `--trace-retention`: drops trace lines older than the window, at most
    /// once a minute. A failure is logged and retried; it never stops the
    /// fleet (the trace is a log, not state).
    fn prune_trace(&mut self, now: Millis) {
        let Some(keep) = self.trace_retention_ms else {
            return;
        };
        if now.saturating_sub(self.trace_pruned_at) < 60_000 {
            return;
        }
        self.trace_pruned_at = now;
        match self.store.prune_trace(now.saturating_sub(keep)) {
            Ok(0) => {}
            Ok(n) => info!(
                lines = n,
                "trace lines older than --trace-retention dropped"
            ),
            Err(e) => warn!("cannot prune the trace: {e}"),
        }
    }

    /// `--job-retention`: moves the ended jobs unchanged for the window out
    /// of memory, at most every tenth of the window (1 s to 1 min). Their
    /// rows stay, marked; subscribers get `jobs_archived`. A model run that
    /// is still going keeps its jobs.
    fn archive_ended_jobs(&mut self, now: Millis, batch: &mut Batch) {
        let Some(keep) = self.job_retention_ms else {
            return;
        };
        if now.saturating_sub(self.archive_swept_at) < (keep / 10).clamp(1_000, 60_000) {
            return;
        }
        self.archive_swept_at = now;
        let models = &self.models;
        let gone = self
            .scheduler
            .archive(now.saturating_sub(keep), &|id| models.holds_job(id));
        if gone.is_empty() {
            return;
        }
        let mut job_ids = Vec::with_capacity(gone.len());
        let mut rows = Vec::with_capacity(gone.len());
        for job in gone {
            self.archived.count_archived(job.state(), 1);
            rows.push((job.id().clone(), job.content_key().to_owned()));
            job_ids.push(job.id().clone());
        }
        self.store.archive(rows, now);
        info!(
            jobs = job_ids.len(),
            archived = self.archived.total,
            "ended jobs archived (--job-retention)"
        );
        // In the trace too: it is also what commits the marks with the batch.
        let event = FleetEvent::JobsArchived {
            job_ids,
            archived: self.archived.clone(),
        };
        let json = serde_json::to_string(&event).unwrap_or_default();
        batch.trace.push((now, json.clone()));
        batch.events.push(json);
    }

    /// The archived rows among `ids` that memory does not hold (none, and
    /// no id computed, while nothing is archived). A read that fails is
    /// logged; the command then goes on as if the jobs were new or unknown.
    fn read_archived(&mut self, ids: impl Iterator<Item = JobId>) -> Vec<Job> {
        if self.archived.total == 0 {
            return Vec::new();
        }
        let missing: Vec<JobId> = ids.filter(|id| self.scheduler.job(id).is_none()).collect();
        if missing.is_empty() {
            return Vec::new();
        }
        self.store
            .load_archived(Archived::Ids(&missing))
            .unwrap_or_else(|e| {
                warn!("cannot read archived jobs back: {e}");
                Vec::new()
            })
    }

    /// Archived jobs among `ids` come back into memory, for a command that
    /// names them (a resubmission, a retry, a cancel, a model's task).
    fn bring_back(&mut self, ids: impl Iterator<Item = JobId>, batch: &mut Batch) {
        let jobs = self.read_archived(ids);
        self.restore(jobs, batch);
    }

    /// The archived tuning-cache entries of these workloads' computations
    /// come back, so that the cache answers as if they had never left.
    fn bring_back_entries(&mut self, workloads: &[Workload], batch: &mut Batch) {
        if self.archived.done == 0 {
            return;
        }
        let keys: std::collections::BTreeSet<String> =
            workloads.iter().map(Workload::content_key).collect();
        for key in keys {
            match self
                .store
                .load_archived(Archived::Done { content_key: &key })
            {
                Ok(jobs) => self.restore(jobs, batch),
                Err(e) => warn!("cannot read archived cache entries back: {e}"),
            }
        }
    }

    /// Takes archived jobs back: live again in memory, and in the store once
    /// the batch writes them; subscribers get the lower counts, then the jobs.
    fn restore(&mut self, jobs: Vec<Job>, batch: &mut Batch) {
        let mut back = Vec::new();
        for job in jobs {
            let (id, state) = (job.id().clone(), job.state());
            if self.scheduler.restore(job) {
                self.store.keep_live(&id);
                self.archived.count_archived(state, -1);
                back.push(id);
            }
        }
        if back.is_empty() {
            return;
        }
        debug!(jobs = back.len(), "archived jobs brought back");
        let event = FleetEvent::JobsArchived {
            job_ids: Vec::new(),
            archived: self.archived.clone(),
        };
        batch
            .events
            .push(serde_json::to_string(&event).unwrap_or_default());
        for id in back {
            if let Some(job) = self.scheduler.job(&id) {
                batch.events.push(job_updated_event(&job.view));
            }
            batch.dirty.push(id);
        }
    }

    /// Keep ended jobs in memory for this long (`None`: for ever).
    pub fn set_job_retention(&mut self, keep: Option<Duration>) {
        self.job_retention_ms = keep.map(|d| d.as_millis() as Millis);
    }

    /// Keep trace lines for this long (`None`: for ever).
    pub fn set_trace_retention(&mut self, keep: Option<Duration>) {
        self.trace_retention_ms = keep.map(|d| d.as_millis() as Millis);
    }

    /// How many connected workers can serve each target (a run's parallelism).
    fn slots(&self) -> impl Fn(&Target) -> usize {
        let targets: Vec<Target> = self.scheduler.workers().map(|w| w.target.clone()).collect();
        move |t: &Target| targets.iter().filter(|w| w.serves(t)).count()
    }

    /// Submits a plan's jobs and marks its runs for the batch's commit.
    fn apply_plan(&mut self, plan: Plan, now: Millis, out: &mut Vec<Output>, batch: &mut Batch) {
        batch.dirty_models.extend(plan.changed);
        if plan.jobs.is_empty() {
            return;
        }
        self.bring_back(plan.jobs.iter().map(|(w, _)| w.job_id()), batch);
        let (_, duplicates) = self.scheduler.submit_with(plan.jobs, now, out);
        // A job another run already finished (a shared task): its result is
        // news to this run, so report it as a change.
        for id in duplicates {
            if self
                .scheduler
                .job(&id)
                .is_some_and(|j| j.state().is_terminal())
            {
                out.push(Output::JobChanged(id));
            }
        }
    }

    /// Feeds every model job that ended in `out` to the planner, and the jobs
    /// it plans back to the scheduler, until nothing new ends.
    fn follow_models(&mut self, out: &mut Vec<Output>, now: Millis, batch: &mut Batch) {
        let mut seen = 0;
        let mut told = std::collections::HashSet::new();
        while seen < out.len() {
            let ended: Vec<JobView> = out[seen..]
                .iter()
                .filter_map(|o| match o {
                    Output::JobChanged(id) if self.models.runs_of_job(id) => self.scheduler.job(id),
                    _ => None,
                })
                .filter(|j| j.state().is_terminal())
                .map(|j| JobView::clone(&j.view))
                .collect();
            seen = out.len();
            for view in ended {
                if !told.insert(view.job_id.clone()) {
                    continue;
                }
                let plan = self.models.job_ended(&view, now, &self.slots());
                self.apply_plan(plan, now, out, batch);
            }
        }
    }

    /// A compile result carries the library; it is stored apart from the job
    /// (views go to every subscriber, the library only to who asks for it).
    fn take_library(
        &self,
        job_id: &str,
        result: &mut JobResult,
    ) -> Option<(String, &'static str, Vec<u8>)> {
        let job = self.scheduler.job(job_id)?;
        let Op::Model { model } = &job.view.workload.op else {
            return None;
        };
        let ModelStage::Compile { run, .. } = model.as_ref() else {
            return None;
        };
        let text = result.extra.as_object_mut()?.remove("library_b64")?;
        match text.as_str().map(base64::decode) {
            Some(Ok(bytes)) => Some((run.clone(), "library", bytes)),
            _ => {
                warn!(job = %job_id, "compile result has an unreadable library; not stored");
                None
            }
        }
    }

    fn artifact(
        &mut self,
        name: &str,
        kind: ModelArtifactKind,
    ) -> Result<Vec<ArtifactFile>, String> {
        let run = self
            .models
            .get(name)
            .ok_or_else(|| format!("no model run named `{name}`"))?;
        match kind {
            ModelArtifactKind::Database => {
                let (workloads, records) = run
                    .database()
                    .ok_or_else(|| format!("model run `{name}` has no tuning records yet"))?;
                Ok(vec![
                    ArtifactFile {
                        name: "database_workload.json".into(),
                        text: Some(workloads),
                        base64: None,
                    },
                    ArtifactFile {
                        name: "database_tuning_record.json".into(),
                        text: Some(records),
                        base64: None,
                    },
                ])
            }
            ModelArtifactKind::Library => {
                let bytes = self
                    .store
                    .load_artifact(name, "library")
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| {
                        format!(
                            "model run `{name}` has no compiled library yet (it is {})",
                            run.state
                        )
                    })?;
                Ok(vec![ArtifactFile {
                    name: format!("{name}.so"),
                    text: None,
                    base64: Some(base64::encode(&bytes)),
                }])
            }
        }
    }

    fn push_send(&self, batch: &mut Batch, session: SessionId, msg: Outbound) {
        batch.sends.push((session, msg));
    }

    fn collect(&mut self, out: Vec<Output>, batch: &mut Batch) {
        let now = now_ms();
        // Views are taken now, after the whole event, so one per session or
        // job is enough: a job submitted and assigned in one event would
        // otherwise be published twice, both times as assigned.
        let mut workers_seen = std::collections::HashSet::new();
        let mut jobs_seen = std::collections::HashSet::new();
        for output in out {
            // (event, whether it belongs in the durable trace)
            let (event, traced) = match output {
                Output::JobChanged(id) => {
                    let Some(job) = self.scheduler.job(&id) else {
                        continue;
                    };
                    if !jobs_seen.insert(job.id()) {
                        continue;
                    }
                    // The whole view for subscribers, the lifecycle for the
                    // trace (the row holds the rest); neither clones the view.
                    batch.events.push(job_updated_event(&job.view));
                    batch.trace.push((now, job_trace_line(job)));
                    batch.dirty.push(id);
                    continue;
                }
                // Only published: a progress report changes nothing a restart keeps.
                Output::JobProgressed(id) => {
                    let Some(job) = self.scheduler.job(&id) else {
                        continue;
                    };
                    let v = &job.view;
                    let event = FleetEvent::JobProgress {
                        progress: JobProgress {
                            job_id: id,
                            trials_done: v.trials_done,
                            trials_total: v.trials_total,
                            best_latency_s: v.best_latency_s,
                            updated_at: v.updated_at,
                        },
                    };
                    (event, false)
                }
                Output::WorkerJoined(session) => match self.scheduler.worker(session) {
                    Some(view) => {
                        self.counters.worker_joins += 1;
                        let worker = worker_json(view);
                        self.worker_json
                            .insert(view.session.clone(), worker.clone());
                        let json = worker_event_json("worker_joined", &worker);
                        batch.trace.push((now, json.clone()));
                        batch.events.push(json);
                        continue;
                    }
                    None => continue,
                },
                Output::WorkerChanged(session) => match self.scheduler.worker(session) {
                    Some(_) if !workers_seen.insert(session) => continue,
                    Some(view) => {
                        let worker = worker_json(view);
                        self.worker_json
                            .insert(view.session.clone(), worker.clone());
                        batch
                            .events
                            .push(worker_event_json("worker_updated", &worker));
                        continue;
                    }
                    None => continue,
                },
                Output::WorkerLeft { session, reason } => {
                    self.counters.worker_leaves += 1;
                    self.sessions.remove(&session);
                    self.worker_json
                        .remove(&crate::scheduler::session_label(session));
                    let event = FleetEvent::WorkerLeft {
                        session: crate::scheduler::session_label(session),
                        reason,
                    };
                    (event, true)
                }
                Output::Send { session, msg } => {
                    if matches!(msg, MasterMessage::Assign { .. }) {
                        self.counters.assignments += 1;
                    }
                    batch.sends.push((session, Outbound::Msg(msg)));
                    continue;
                }
            };
            // Serialised once: the same text goes to the trace and to every subscriber.
            let json = serde_json::to_string(&event).unwrap_or_default();
            if traced {
                batch.trace.push((now, json.clone()));
            }
            batch.events.push(json);
        }
    }

    fn flush(&mut self, mut batch: Batch) {
        batch.dirty.sort();
        batch.dirty.dedup();
        batch.dirty_models.sort();
        batch.dirty_models.dedup();
        let now = now_ms();
        for name in &batch.dirty_models {
            if let Some(run) = self.models.get(name) {
                let event = FleetEvent::ModelUpdated {
                    model: Box::new(run.view()),
                };
                let json = serde_json::to_string(&event).unwrap_or_default();
                batch.trace.push((now, json.clone()));
                batch.events.push(json);
            }
        }
        if !batch.dirty.is_empty()
            || !batch.trace.is_empty()
            || !batch.artifacts.is_empty()
            || !batch.meta.is_empty()
        {
            let jobs: Vec<_> = batch
                .dirty
                .iter()
                .filter_map(|id| self.scheduler.job(id))
                .collect();
            let models: Vec<_> = batch
                .dirty_models
                .iter()
                .filter_map(|name| self.models.get(name))
                .collect();
            self.counters.commits += 1;
            let mut attempt: u64 = 0;
            while let Err(e) = self.store.commit_with_meta(
                jobs.iter().copied(),
                models.iter().copied(),
                &batch.artifacts,
                &batch.trace,
                &batch.meta,
            ) {
                attempt += 1;
                // Nothing of this batch is acknowledged until it is committed;
                // meanwhile the network layer refuses new work.
                self.storage_failing.store(true, Ordering::Relaxed);
                if attempt.is_power_of_two() {
                    error!("cannot commit state (attempt {attempt}); not accepting work until it can: {e}");
                }
                if attempt >= 5 && !e.is_transient() {
                    // Acknowledging now would promise durability we do not have;
                    // stopping lets a restart (or a standby) resume from the last commit.
                    error!("giving up: the master stops so that nothing unsaved is acknowledged");
                    std::process::exit(70);
                }
                std::thread::sleep(Duration::from_millis((100 * attempt).min(2_000)));
            }
            if self.storage_failing.swap(false, Ordering::Relaxed) {
                info!(
                    attempts = attempt + 1,
                    "the state database takes commits again; accepting work"
                );
            }
        }
        // Workers first: an assignment must not queue behind a fan-out.
        for (session, msg) in batch.sends {
            match self.sessions.get(&session) {
                Some(tx) => {
                    let _ = tx.send(msg);
                }
                None => debug!(session, "message for a session that is gone"),
            }
        }
        self.counters.events += batch.events.len() as u64;
        for event in batch.events {
            self.seq += 1;
            // Same shape as `ServerMessage::Event { seq, event }` (tested below).
            let mut json = String::with_capacity(event.len() + 48);
            let _ = write!(json, r#"{{"type":"event","seq":{},"event":"#, self.seq);
            json.push_str(&event);
            json.push('}');
            let _ = self.events.send(Arc::new(Published {
                seq: self.seq,
                json: json.into(),
            }));
        }
        for reply in batch.replies {
            reply();
        }
        for reply in batch.snapshots {
            let _ = reply.send(self.shared_snapshot());
        }
    }

    fn status(&self) -> StatusReport {
        let mut jobs = JobCounts::default();
        for job in self.scheduler.jobs() {
            jobs.count(job.state(), 1);
        }
        let jobs = jobs.plus(&self.archived);
        let workers: Vec<_> = self.scheduler.workers().collect();
        StatusReport {
            jobs,
            workers: workers.len(),
            workers_busy: workers.iter().filter(|w| w.current_job.is_some()).count(),
            server_version: self.server_version.clone(),
        }
    }

    fn metrics(&self) -> FleetMetrics {
        let mut metrics = FleetMetrics {
            jobs: JobState::ALL.iter().map(|s| (*s, 0)).collect(),
            counters: self.counters.clone(),
            ..FleetMetrics::default()
        };
        for (state, n) in [
            (JobState::Done, self.archived.done),
            (JobState::Failed, self.archived.failed),
            (JobState::Cancelled, self.archived.cancelled),
        ] {
            *metrics.jobs.entry(state).or_default() += n as u64;
        }
        metrics.jobs_archived = self.archived.total as u64;
        for job in self.scheduler.jobs() {
            let state = job.state();
            *metrics.jobs.entry(state).or_default() += 1;
            if state == JobState::Queued {
                let target = job.view.workload.target.to_string();
                *metrics.queued_by_target.entry(target).or_default() += 1;
            }
        }
        for worker in self.scheduler.workers() {
            match worker.current_job {
                Some(_) => metrics.workers_busy += 1,
                None => metrics.workers_idle += 1,
            }
        }
        metrics.model_runs_active = self
            .models
            .runs()
            .filter(|r| !r.state.is_terminal())
            .count() as u64;
        metrics
    }

    fn results(&self, job_ids: Option<&[JobId]>) -> Vec<Arc<JobView>> {
        match job_ids {
            Some(ids) => ids
                .iter()
                .filter_map(|id| self.scheduler.job(id))
                .map(|j| Arc::clone(&j.view))
                .collect(),
            None => self.scheduler.jobs().map(|j| Arc::clone(&j.view)).collect(),
        }
    }

    /// The snapshot at the current seq: the one subscribers are still
    /// sending if there is one, so a thousand dashboards subscribing at once
    /// cost one copy of the fleet and one serialisation, not a thousand.
    fn shared_snapshot(&mut self) -> Arc<SharedSnapshot> {
        if let Some(shared) = self.snapshot_cache.get(self.seq) {
            return shared;
        }
        let shared = Arc::new(SharedSnapshot::new(self.seq, self.snapshot()));
        self.snapshot_cache.put(&shared);
        shared
    }

    fn snapshot(&self) -> SnapshotParts {
        let mut workers: Vec<&WorkerView> = self.scheduler.workers().collect();
        workers.sort_by_key(|w| w.connected_at);
        SnapshotParts {
            jobs: self.scheduler.jobs().map(|j| j.view.clone()).collect(),
            workers: workers
                .into_iter()
                .map(|w| {
                    self.worker_json
                        .get(&w.session)
                        .cloned()
                        .unwrap_or_else(|| worker_json(w))
                })
                .collect(),
            models: self.models.runs().map(|r| r.view()).collect(),
            archived: self.archived.clone(),
        }
    }
}

fn error_msg(rejection: &Rejection) -> Outbound {
    use tunefleet_shared::protocol::ErrorCode;
    let code = match rejection {
        Rejection::UnknownJob(_) => ErrorCode::NotFound,
        Rejection::UnknownSession(_) | Rejection::NotAssigned { .. } => ErrorCode::NotAssigned,
        Rejection::AlreadyFinished { .. } | Rejection::Superseded { .. } => ErrorCode::InvalidState,
        Rejection::InvalidResult(_) => ErrorCode::BadRequest,
    };
    Outbound::Msg(MasterMessage::Error {
        code,
        message: rejection.to_string(),
    })
}

/// `FleetEvent::JobUpdated` as JSON, serialised from the borrowed view (the
/// event type owns a boxed copy; building one per change was a clone of
/// every job's records and workload).
///
/// Written straight into one buffer sized for a typical view: growing a
/// string from empty and then copying it into the envelope was most of the
/// ~9% of the core's time that went into formatting events.
fn job_updated_event(view: &JobView) -> String {
    job_updated_json(view, EVENT_CAPACITY, &view.job_id)
}

/// A job's event is ~0.3–1.5 KB; the envelope adds a few dozen bytes.
const EVENT_CAPACITY: usize = 2048;

/// A job's trace line, `{"kind":"job_updated","job":TraceJob}`, written into
/// one buffer (not serialised, then copied into its envelope).
fn job_trace_line(job: &crate::scheduler::Job) -> String {
    job_updated_json(&TraceJob::of(job), TRACE_LINE_CAPACITY, job.id())
}

/// `{"kind":"job_updated","job":JOB}`, `JOB` written straight into the one
/// buffer: the event's (a view) and the trace's (a lifecycle) alike.
fn job_updated_json(job: &impl serde::Serialize, capacity: usize, job_id: &str) -> String {
    let mut text = Vec::with_capacity(capacity);
    text.extend_from_slice(br#"{"kind":"job_updated","job":"#);
    if let Err(e) = serde_json::to_writer(&mut text, job) {
        warn!(job = %job_id, "job not serialisable: {e}");
    }
    text.push(b'}');
    String::from_utf8(text).unwrap_or_default()
}

/// A trace line is ~100–250 bytes (ids, names, state, an error's text).
const TRACE_LINE_CAPACITY: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use tunefleet_shared::protocol::{FleetSnapshot, ServerMessage};

    #[test]
    fn hand_built_job_event_is_the_protocol_event() {
        let view = tunefleet_shared::testing::job("j1", JobState::Running);
        let parsed: FleetEvent = serde_json::from_str(&job_updated_event(&view)).unwrap();
        assert_eq!(
            parsed,
            FleetEvent::JobUpdated {
                job: Box::new(view)
            }
        );
    }

    #[test]
    fn a_job_trace_line_is_its_kind_and_lifecycle() {
        let yaml = "target: {kind: llvm}\ntrials: 8\nworkloads:\n  - {name: a, op: matmul, shape: {m: 8, n: 8, k: 8}}\n";
        let workloads = tunefleet_shared::workload::parse_workload_file(yaml, "t.yaml").unwrap();
        let config = crate::scheduler::SchedulerConfig {
            max_attempts: 3,
            job_timeout_ms: None,
            nbest: 5,
        };
        let mut scheduler = Scheduler::recover(config, Vec::new(), 1, &mut Vec::new());
        scheduler.submit(workloads, 2, &mut Vec::new());
        let job = scheduler.jobs().next().unwrap();
        let line: serde_json::Value = serde_json::from_str(&job_trace_line(job)).unwrap();
        assert_eq!(line["kind"], "job_updated");
        assert_eq!(line["job"]["job_id"], job.id().as_str());
        assert_eq!(line["job"]["name"], "a");
        assert_eq!(line["job"]["state"], "queued");
        assert!(line["job"].get("workload").is_none(), "{line}");
    }

    fn some_worker(name: &str, connected_at: u64) -> WorkerView {
        WorkerView {
            session: format!("s-{name}"),
            worker_id: format!("id-{name}"),
            name: name.into(),
            target: tunefleet_shared::target::Target::of_kind("llvm"),
            backend: "sim".into(),
            tvm_version: None,
            current_job: Some("00000000000000aa".into()),
            jobs_done: 3,
            connected_at,
        }
    }

    #[test]
    fn hand_built_snapshot_frame_parses_as_server_message() {
        let mut some_archived = JobCounts::default();
        some_archived.count_archived(JobState::Done, 3);
        some_archived.count_archived(JobState::Failed, 1);
        let cases = [
            (vec![], JobCounts::default()),
            (
                vec![some_worker("a", 1), some_worker("b", 2)],
                some_archived,
            ),
        ];
        for (workers, archived) in cases {
            let parts = SnapshotParts {
                jobs: vec![],
                workers: workers.iter().map(worker_json).collect(),
                models: vec![],
                archived: archived.clone(),
            };
            let parsed: ServerMessage = serde_json::from_str(&snapshot_message(9, &parts)).unwrap();
            let snapshot = FleetSnapshot {
                jobs: vec![],
                workers,
                models: vec![],
                archived,
            };
            assert_eq!(parsed, ServerMessage::Snapshot { seq: 9, snapshot });
        }
    }

    #[test]
    fn hand_built_worker_events_parse_as_fleet_events() {
        let view = some_worker("w", 5);
        let json = worker_json(&view);
        let joined: FleetEvent =
            serde_json::from_str(&worker_event_json("worker_joined", &json)).unwrap();
        assert_eq!(
            joined,
            FleetEvent::WorkerJoined {
                worker: Box::new(view.clone())
            }
        );
        let updated: FleetEvent =
            serde_json::from_str(&worker_event_json("worker_updated", &json)).unwrap();
        assert_eq!(
            updated,
            FleetEvent::WorkerUpdated {
                worker: Box::new(view)
            }
        );
    }

    #[test]
    fn hand_built_event_frame_parses_as_server_message() {
        let event = FleetEvent::WorkerLeft {
            session: "w1".into(),
            reason: "gone".into(),
        };
        let json = format!(
            r#"{{"type":"event","seq":{},"event":{}}}"#,
            7,
            serde_json::to_string(&event).unwrap()
        );
        let parsed: ServerMessage = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed, ServerMessage::Event { seq: 7, event });
    }
}
