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
//! A batch whose commit fails sends nothing and is rolled back (`storage`).
//! Having one owner also means no locks and a total order of events, which is
//! what `seq` numbers on events expose to clients.
//!
//! The clock lives here, not in the scheduler: each command is stamped with
//! the wall time when the core applies it, and a ticker task sends
//! [`Command::Tick`] so job timeouts fire without any event.
//!
//! Here: the commands, the batch loop and `apply`. Beside it, by concern:
//! `workers` (a worker's join and reports, each report's ack behind its
//! commit), `submit`, `publish` (outputs into events, trace lines and rows;
//! the commit and the ordered sends), `snapshot` (what a subscribe gets), `archive` (retention
//! of ended jobs and trace lines), `model_runs` (a run's plans and
//! artifacts), `cost_models` (the fleet's cost model: taken from a round's
//! result, kept or not, added to a round's assign), `queries` (status,
//! metrics, results); tests in `tests.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::info;
use tunefleet_shared::model::{ArtifactFile, ModelArtifactKind, ModelSubmission, ModelView};
use tunefleet_shared::protocol::{
    JobCounts, JobId, JobResult, JobView, Lease, MasterMessage, Millis, StatusReport, SubmitReport,
    TokenInfo, WorkerHello,
};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::Workload;

use crate::cost_models::CostModels;
use crate::metrics::{CoreCounters, FleetMetrics};
use crate::models::{ModelError, ModelRuns};
use crate::scheduler::{
    CachePolicy, CommandError, JoinRefusal, LeaveKind, Output, ProgressReport, Scheduler,
    SchedulerConfig, SessionId,
};
use crate::store::Store;
use crate::tokens::{TokenBook, TokenError, TokenRegistry};

/// Commands taken per batch, at most; bounds the latency a batch adds.
const MAX_BATCH: usize = 1024;

pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| Millis(d.as_millis() as u64))
        .unwrap_or_default()
}

/// What the core sends to a worker's connection task.
#[derive(Debug)]
pub enum Outbound {
    Msg(MasterMessage),
    Close { code: u16, reason: String },
}

mod archive;
mod cost_models;
mod model_runs;
mod publish;
mod queries;
mod snapshot;
mod storage;
mod submit;
#[cfg(test)]
mod tests;
mod workers;

use publish::{job_updated_event, worker_json};
pub use snapshot::SharedSnapshot;
use snapshot::SnapshotCache;
pub use storage::{CoreEnd, StorageStatus, STAND_IN_AFTER};
use storage::{Loaded, Outage};

/// A published event, serialised once for every subscriber.
#[derive(Debug)]
pub struct Published {
    pub seq: u64,
    /// The frame every subscriber gets, shared by their sockets without a
    /// copy. `None` for a change when no subscriber without deltas
    /// was connected as it was written ([`Published::delta`] is then set):
    /// one that subscribes just after gets a fresh snapshot instead.
    pub json: Option<tokio_tungstenite::tungstenite::Utf8Bytes>,
    /// For subscribers with deltas, when theirs differs: `job_changed` or
    /// `worker_changed` in place of the whole view.
    pub delta: Option<tokio_tungstenite::tungstenite::Utf8Bytes>,
}

/// An event of a batch, serialised: the same for every subscriber, or a
/// job's or worker's change in two forms.
#[derive(Debug)]
enum EventText {
    Same(String),
    /// The whole view (`job_updated`, `worker_updated`; only while a
    /// subscriber without deltas may need it) and the delta (`job_changed`,
    /// `worker_changed`).
    Change {
        full: Option<String>,
        delta: String,
    },
}

/// What the core sends a worker's connection, with the session (slot) it is
/// for: a worker with several slots has one channel for all of them.
pub type WorkerTx = mpsc::UnboundedSender<(SessionId, Outbound)>;

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
    /// One session per slot of the worker (`register`'s `slots`), in order;
    /// the reply has them all and the count of matching jobs.
    WorkerJoin {
        hello: Box<WorkerHello>,
        tx: WorkerTx,
        reply: oneshot::Sender<Result<(Vec<SessionId>, usize), JoinRefusal>>,
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
    /// Subscribers that asked for whole views (no `deltas`): while there is
    /// none, the core writes a known job's change as a delta only.
    pub whole_view_subscribers: Arc<AtomicUsize>,
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

/// The reply to a change: sent once the batch is committed, dropped (which
/// the network layer answers with `storage_unavailable`) if it is not.
type Reply = Box<dyn FnOnce() + Send>;

/// A read, answered after the batch from what is then in memory: committed
/// state, or the state read back after a commit failed.
type Read = Box<dyn FnOnce(&mut Core) + Send>;

#[derive(Default)]
struct Batch {
    dirty: Vec<JobId>,
    dirty_models: Vec<String>,
    /// `dirty_models` once their events are written (by the commit, which
    /// may be tried again with the same batch: the probe's).
    models_written: Vec<String>,
    /// (run, kind, bytes): compiled libraries, stored with the batch.
    artifacts: Vec<(String, &'static str, Vec<u8>)>,
    trace: Vec<(Millis, String)>,
    /// `meta` rows (named tokens) to write (`None`: delete).
    meta: Vec<(String, Option<String>)>,
    /// Serialised `FleetEvent`s, in order.
    events: Vec<EventText>,
    sends: Vec<(SessionId, Outbound)>,
    replies: Vec<Reply>,
    reads: Vec<Read>,
    snapshots: Vec<oneshot::Sender<Arc<SharedSnapshot>>>,
}

pub struct Core {
    scheduler: Scheduler,
    models: ModelRuns,
    /// The fleet's trained cost model per effective target and TVM
    /// release (`cost_models.rs`), as stored.
    cost_models: CostModels,
    /// Whether model rounds share them (`serve --no-cost-model-sharing`).
    share_cost_models: bool,
    store: Store,
    sessions: HashMap<SessionId, WorkerTx>,
    next_session: SessionId,
    seq: u64,
    events: broadcast::Sender<Arc<Published>>,
    /// The last snapshot handed out: kept while the fleet does not change
    /// if it is small (an idle fleet's dashboards reconnect at the cost of a
    /// socket write), else only while a subscriber still sends it.
    snapshot_cache: SnapshotCache,
    /// Every registered worker's view as JSON, by session label.
    worker_json: HashMap<String, Arc<str>>,
    /// Workers changed since their JSON above was written: written again
    /// when a snapshot is taken, not at every change.
    stale_worker_json: HashSet<SessionId>,
    /// Jobs every subscriber has (in its snapshot or from a `job_updated`):
    /// their changes may go as deltas. A job's first event is whole.
    known_jobs: HashSet<JobId>,
    /// See [`CoreHandle::whole_view_subscribers`].
    whole_view_subscribers: Arc<AtomicUsize>,
    server_version: String,
    counters: CoreCounters,
    trace_retention_ms: Option<u64>,
    trace_pruned_at: Millis,
    /// `--job-retention`: ended jobs unchanged for this long leave memory.
    job_retention_ms: Option<u64>,
    archive_swept_at: Millis,
    /// The archived jobs by state (the store's rows, counted at start and
    /// kept current), so that counts stay whole without holding the jobs.
    archived: JobCounts,
    tokens: TokenBook,
    /// Set while commits fail (full disk, ...): read by the network layer,
    /// which then refuses new work instead of letting it queue unanswered.
    storage: Arc<StorageStatus>,
    /// While the store cannot commit (see `storage.rs`).
    outage: Option<Outage>,
    /// When `check_connection` last asked.
    connection_checked: std::time::Instant,
    /// Set when the core must end on its own (the lead lost).
    ended: Option<CoreEnd>,
}

impl Core {
    /// Loads the persisted jobs, recovers in-flight ones, and persists that.
    /// The registry the network layer checks named tokens against; kept
    /// current by this core.
    pub fn token_registry(&self) -> TokenRegistry {
        self.tokens.registry()
    }

    /// The store's health as the network layer sees it: failing while
    /// commits fail (every change is then refused, nothing is retried).
    pub fn storage_status(&self) -> Arc<StorageStatus> {
        self.storage.clone()
    }

    /// The count the client connections keep of subscribers without deltas
    /// ([`CoreHandle::whole_view_subscribers`]).
    pub fn whole_view_subscribers(&self) -> Arc<AtomicUsize> {
        self.whole_view_subscribers.clone()
    }

    pub fn start(
        config: SchedulerConfig,
        mut store: Store,
        events: broadcast::Sender<Arc<Published>>,
    ) -> Result<Core, crate::store::StoreError> {
        let loaded = Loaded::read(&mut store, config, TokenRegistry::default(), now_ms())?;
        let Loaded {
            scheduler,
            models,
            cost_models,
            archived,
            tokens,
            requeued,
        } = loaded;
        let recovered: Vec<_> = requeued
            .iter()
            .filter_map(|o| match o {
                Output::JobChanged(id) => scheduler.job(id),
                _ => None,
            })
            .collect();
        let loaded = scheduler.jobs().count();
        if loaded > 0 {
            info!(
                jobs = loaded,
                requeued = recovered.len(),
                "resumed from the state database"
            );
        }
        store.commit(recovered, std::iter::empty(), &[], &[])?;
        if archived.total > 0 {
            info!(
                jobs = archived.total,
                "archived jobs stay in the state database (found again by id or computation)"
            );
        }
        let known_jobs = scheduler.jobs().map(|job| job.id().clone()).collect();
        let store_clock = store.call_clock();
        Ok(Core {
            scheduler,
            models,
            cost_models,
            share_cost_models: true,
            store,
            sessions: HashMap::new(),
            next_session: SessionId(1),
            snapshot_cache: SnapshotCache::default(),
            worker_json: HashMap::new(),
            stale_worker_json: HashSet::new(),
            known_jobs,
            whole_view_subscribers: Arc::new(AtomicUsize::new(0)),
            seq: 0,
            events,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            counters: CoreCounters::default(),
            trace_retention_ms: None,
            trace_pruned_at: Millis(0),
            job_retention_ms: None,
            archive_swept_at: Millis(0),
            archived,
            tokens,
            storage: Arc::new(StorageStatus::new(store_clock)),
            outage: None,
            connection_checked: std::time::Instant::now(),
            ended: None,
        })
    }

    /// Runs on its own thread until `Shutdown`, until every handle is gone,
    /// or until it must step down (another master took the lead).
    pub fn run(mut self, mut commands: mpsc::Receiver<Command>) -> CoreEnd {
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
            // Between batches, so that no change is half applied: a session
            // the server ended, a full disk, is an outage now, not at the
            // next commit.
            self.check_connection();
            self.keep_stand_in();
            if let Some(done) = shutdown {
                if self.degraded() {
                    info!("core stopped; the store could not commit, so no change since it failed was acknowledged");
                } else {
                    info!("core stopped; state is flushed");
                }
                let _ = done.send(());
                return CoreEnd::Stopped;
            }
            if let Some(end) = self.ended.take() {
                return end;
            }
        }
        CoreEnd::Stopped
    }

    fn apply(&mut self, command: Command, batch: &mut Batch) {
        if self.degraded() {
            return self.apply_degraded(command, batch);
        }
        let now = now_ms();
        let mut out = Vec::new();
        match command {
            Command::WorkerJoin { hello, tx, reply } => {
                self.worker_join(&hello, tx, reply, now, &mut out, batch)
            }
            Command::WorkerLeave {
                session,
                kind,
                reason,
            } => {
                info!(%session, %reason, "worker left");
                self.scheduler
                    .worker_left(session, kind, &reason, now, &mut out);
            }
            Command::Worker { session, input } => {
                if self.worker_input(session, input, now, &mut out, batch) {
                    // Collected already, with the ack after it.
                    return;
                }
            }
            Command::Submit {
                workloads,
                cache,
                by,
                reply,
            } => self.submit(workloads, cache, by, reply, now, &mut out, batch),
            command @ (Command::Metrics { .. }
            | Command::Status { .. }
            | Command::Results { .. }
            | Command::ListTokens { .. }
            | Command::Models { .. }
            | Command::ModelArtifact { .. }
            | Command::Snapshot { .. }) => Self::defer_read(command, batch),
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
            Command::SubmitModel { submission, reply } => {
                let default_target = Target::of_kind("llvm");
                let name = submission.name.clone();
                let r = self.models.submit(*submission, default_target, now);
                let r = r.map(|plan| {
                    self.apply_plan(plan, now, &mut out, batch);
                    // A run with client-extracted tasks is tuning already:
                    // plan its first rounds now.
                    let rounds = self.models.refill(now, &self.slots());
                    self.apply_plan(rounds, now, &mut out, batch);
                    self.models
                        .get(&name)
                        .map(|run| run.extract_job.clone())
                        .unwrap_or_default()
                });
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

    /// Once a second while commits work: whether the store can still commit
    /// (an outage begins now if not; see `Store::unavailable`).
    fn check_connection(&mut self) {
        let now = std::time::Instant::now();
        if self.degraded() || now < self.connection_checked + storage::PROBE_EVERY {
            return;
        }
        self.connection_checked = now;
        if let Some(e) = self.store.unavailable() {
            self.batch_failed(Batch::default(), e);
        }
    }

    /// A read is answered after the batch (committed, or rolled back), so
    /// that it never shows a change the store has not taken.
    fn defer_read(command: Command, batch: &mut Batch) {
        let read: Read = match command {
            Command::Metrics { reply } => Box::new(move |core: &mut Core| {
                let _ = reply.send(core.metrics());
            }),
            Command::Status { reply } => Box::new(move |core: &mut Core| {
                let _ = reply.send(core.status());
            }),
            Command::Results { job_ids, reply } => Box::new(move |core: &mut Core| {
                let mut views = core.results(job_ids.as_deref());
                if let Some(ids) = &job_ids {
                    // Read only: an archived job named here stays archived.
                    let archived = core.read_archived(ids.iter().cloned());
                    views.extend(archived.into_iter().map(|job| job.view));
                }
                let _ = reply.send(views);
            }),
            Command::ListTokens { reply } => Box::new(move |core: &mut Core| {
                let _ = reply.send(core.tokens.list());
            }),
            Command::Models { name, reply } => Box::new(move |core: &mut Core| {
                let r = match name {
                    Some(name) => core
                        .models
                        .get(&name)
                        .map(|run| vec![run.view()])
                        .ok_or(ModelError::Unknown(name)),
                    None => Ok(core.models.runs().map(|r| r.view()).collect()),
                };
                let _ = reply.send(r);
            }),
            Command::ModelArtifact {
                name,
                artifact,
                reply,
            } => Box::new(move |core: &mut Core| {
                let _ = reply.send(core.artifact(&name, artifact));
            }),
            Command::Snapshot { reply } => return batch.snapshots.push(reply),
            _ => return,
        };
        batch.reads.push(read);
    }

    /// While the store cannot commit: reads are answered from memory, a
    /// tick probes the store, and every change is refused at once (its reply
    /// dropped: the network layer answers `storage_unavailable`). A worker's
    /// reports and leaving change nothing: its socket was closed and its
    /// session ends with the reload.
    fn apply_degraded(&mut self, command: Command, batch: &mut Batch) {
        match command {
            Command::Tick => self.probe_storage(),
            read @ (Command::Metrics { .. }
            | Command::Status { .. }
            | Command::Results { .. }
            | Command::ListTokens { .. }
            | Command::Models { .. }
            | Command::ModelArtifact { .. }
            | Command::Snapshot { .. }) => Self::defer_read(read, batch),
            _refused => {}
        }
    }

    fn push_send(&self, batch: &mut Batch, session: SessionId, msg: Outbound) {
        batch.sends.push((session, msg));
    }
}
