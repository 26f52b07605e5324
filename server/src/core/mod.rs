//! The core: one thread that owns the scheduler and the store.
//!
//! Connection tasks never touch state. They send [`Command`]s over a bounded
//! channel; the core thread takes them in batches, feeds each to the
//! [`Scheduler`], then does the I/O the scheduler asked for in a fixed order:
//!
//! 1. commit every changed job and trace line in one transaction,
//! 2. send worker messages (first: an assignment never waits behind a fan-out),
//! 3. publish the events to subscribers (a broadcast channel; never blocks),
//! 4. send client replies and answer the batch's reads.
//!
//! Because (1) happens before the rest, nothing is acknowledged that is not
//! durable, and batching turns many small commits into one (group commit).
//! A batch whose commit fails sends nothing and is rolled back (`storage`).
//! Having one owner also means no locks and a total order of events, which is
//! what `seq` numbers on events expose to clients.
//!
//! The clock lives here, not in the scheduler: each command is stamped with
//! the wall time when the core applies it, and a ticker task sends
//! [`Command::Tick`] so job timeouts fire without any event.
//!
//! Here: the batch loop, and `apply`, which takes each command by its kind
//! (`command.rs`: a change, a read, the tick) and hands it to its handler,
//! one method per command. The handlers, by concern: `workers` (a worker's
//! join, its reports, each report's ack behind its commit, and its leaving:
//! the scheduler puts its job back at the front of the queue), `submit`
//! (and `import`), `job_actions` (cancel, retry), `tokens`, `model_runs`
//! (a run submitted, stopped, shown; its plans and artifacts), `queries`
//! (status, metrics, results). Beside them: `publish` (outputs into events,
//! trace lines and rows; the commit and the ordered sends), `storage` (a
//! commit that fails and the outage after it), `snapshot` (what a subscribe
//! gets), `archive` (retention of ended jobs and trace lines),
//! `cost_models` (the fleet's cost model: taken from a round's result, kept
//! or not, added to a round's assign); tests in `tests.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::info;
use tunefleet_shared::protocol::{JobCounts, JobId, MasterMessage, Millis};

use crate::cost_models::CostModels;
use crate::metrics::CoreCounters;
use crate::models::ModelRuns;
use crate::scheduler::{Output, Scheduler, SchedulerConfig, SessionId};
use crate::store::Store;
use crate::tokens::{TokenBook, TokenRegistry};

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
mod command;
mod cost_models;
mod job_actions;
mod model_runs;
mod publish;
mod queries;
mod snapshot;
mod storage;
mod submit;
#[cfg(test)]
mod tests;
mod tokens;
mod workers;

pub use command::{Change, Command, JobAction, Read, WorkerInput, WorkerTx};
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
    /// Sends a command (a [`Change`], a [`Read`], a [`Command`]) and waits
    /// for its reply; `None` when the core is gone.
    pub async fn ask<T, C: Into<Command>>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> C,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx).into()).await.ok()?;
        rx.await.ok()
    }

    pub async fn send(&self, command: impl Into<Command>) -> bool {
        self.commands.send(command.into()).await.is_ok()
    }
}

/// The reply to a change: sent once the batch is committed, dropped (which
/// the network layer answers with `storage_unavailable`) if it is not.
type Reply = Box<dyn FnOnce() + Send>;

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
    /// Answered after the batch, from what is then in memory: committed
    /// state, or the state read back after a commit failed.
    reads: Vec<Read>,
}

impl Batch {
    /// `value` as the answer to a change, sent once the batch is committed.
    fn reply<T: Send + 'static>(&mut self, reply: oneshot::Sender<T>, value: T) {
        self.replies.push(Box::new(move || {
            let _ = reply.send(value);
        }));
    }
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

    /// One command of the batch, by its kind (`command.rs`): a read is
    /// answered after the batch whatever the store's health; a change is
    /// refused while the store cannot commit (its reply dropped: the
    /// network layer answers `storage_unavailable`; a worker's reports and
    /// leaving change nothing then either, as its socket was closed and its
    /// session ends with the reload), and a tick probes the store instead.
    fn apply(&mut self, command: Command, batch: &mut Batch) {
        match command {
            Command::Read(read) => batch.reads.push(read),
            Command::Change(_) if self.degraded() => {}
            Command::Tick if self.degraded() => self.probe_storage(),
            Command::Change(change) => self.change(change, batch),
            Command::Tick => self.tick(batch),
            Command::Shutdown { .. } => {}
        }
    }

    /// A change's handler, then what follows every change: the model runs'
    /// plans for the jobs that ended, and the outputs into the batch.
    fn change(&mut self, change: Change, batch: &mut Batch) {
        let now = now_ms();
        let mut out = Vec::new();
        match change {
            Change::WorkerJoin { hello, tx, reply } => {
                self.worker_join(&hello, tx, reply, now, &mut out, batch)
            }
            Change::WorkerLeave {
                session,
                kind,
                reason,
            } => self.worker_leave(session, kind, &reason, now, &mut out),
            Change::Worker { session, input } => {
                self.worker_input(session, input, now, &mut out, batch)
            }
            Change::Submit {
                workloads,
                cache,
                by,
                reply,
            } => self.submit(workloads, cache, by, reply, now, &mut out, batch),
            Change::JobAction {
                job_id,
                action,
                by,
                reply,
            } => self.job_action(job_id, action, &by, reply, now, &mut out, batch),
            Change::Import {
                workloads,
                keys,
                reply,
            } => self.import(workloads, keys, reply, batch),
            Change::CreateToken { name, reply } => self.create_token(&name, reply, now, batch),
            Change::RevokeToken { name, reply } => self.revoke_token(&name, reply, batch),
            Change::SubmitModel { submission, reply } => {
                self.submit_model(*submission, reply, now, &mut out, batch)
            }
            Change::StopModel { name, reply } => {
                self.stop_model(&name, reply, now, &mut out, batch)
            }
        }
        self.follow_models(&mut out, now, batch);
        self.collect(out, batch);
    }

    /// A read's handler, after the batch.
    pub(super) fn answer(&mut self, read: Read) {
        match read {
            Read::Status { reply } => answer(reply, self.status()),
            Read::Metrics { reply } => answer(reply, self.metrics()),
            Read::Results { job_ids, reply } => answer(reply, self.results(job_ids)),
            Read::ListTokens { reply } => answer(reply, self.tokens.list()),
            Read::Models { name, reply } => answer(reply, self.model_views(name)),
            Read::ModelArtifact {
                name,
                artifact,
                reply,
            } => answer(reply, self.artifact(&name, artifact)),
            Read::Snapshot { reply } => answer(reply, self.shared_snapshot()),
        }
    }

    /// The ticker's command: job timeouts, trace and job retention, and the
    /// snapshot cache trimmed.
    fn tick(&mut self, batch: &mut Batch) {
        let now = now_ms();
        let mut out = Vec::new();
        self.scheduler.tick(now, &mut out);
        self.prune_trace(now);
        self.archive_ended_jobs(now, batch);
        self.snapshot_cache.trim();
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

    fn push_send(&self, batch: &mut Batch, session: SessionId, msg: Outbound) {
        batch.sends.push((session, msg));
    }
}

/// Sends a read's answer; one whose asker is gone (its connection closed)
/// is dropped.
fn answer<T>(reply: oneshot::Sender<T>, value: T) {
    let _ = reply.send(value);
}
