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
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, error, info, warn};
use tunefleet_shared::protocol::{
    FleetEvent, FleetSnapshot, JobCounts, JobId, JobResult, JobState, JobView, Lease,
    MasterMessage, Millis, StatusReport, SubmitReport, WorkerHello,
};
use tunefleet_shared::workload::Workload;

use crate::scheduler::{
    CommandError, JoinRefusal, LeaveKind, Output, ProgressReport, Rejection, Scheduler,
    SchedulerConfig, SessionId,
};
use crate::store::Store;

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

/// A published event, serialised once for every subscriber.
#[derive(Debug)]
pub struct Published {
    pub seq: u64,
    pub json: String,
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
        reply: oneshot::Sender<SubmitReport>,
    },
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
    Results {
        job_ids: Option<Vec<JobId>>,
        reply: oneshot::Sender<Vec<JobView>>,
    },
    Cancel {
        job_id: JobId,
        reply: oneshot::Sender<Result<(), CommandError>>,
    },
    Retry {
        job_id: JobId,
        reply: oneshot::Sender<Result<(), CommandError>>,
    },
    Snapshot {
        reply: oneshot::Sender<(u64, FleetSnapshot)>,
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
    trace: Vec<(Millis, String)>,
    /// Serialised `FleetEvent`s, in order.
    events: Vec<String>,
    sends: Vec<(SessionId, Outbound)>,
    replies: Vec<Reply>,
    snapshots: Vec<oneshot::Sender<(u64, FleetSnapshot)>>,
}

pub struct Core {
    scheduler: Scheduler,
    store: Store,
    sessions: HashMap<SessionId, mpsc::UnboundedSender<Outbound>>,
    next_session: SessionId,
    seq: u64,
    events: broadcast::Sender<Arc<Published>>,
    server_version: String,
}

impl Core {
    /// Loads the persisted jobs, recovers in-flight ones, and persists that.
    pub fn start(
        config: SchedulerConfig,
        mut store: Store,
        events: broadcast::Sender<Arc<Published>>,
    ) -> Result<Core, crate::store::StoreError> {
        let jobs = store.load_jobs()?;
        let mut out = Vec::new();
        let loaded = jobs.len();
        let scheduler = Scheduler::recover(config, jobs, now_ms(), &mut out);
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
        store.commit(recovered, &[])?;
        Ok(Core {
            scheduler,
            store,
            sessions: HashMap::new(),
            next_session: 1,
            seq: 0,
            events,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
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
                        result,
                    } => {
                        let r = self
                            .scheduler
                            .result(session, &job_id, lease, *result, now, &mut out);
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
                    self.collect(out, batch);
                    self.push_send(batch, session, Outbound::Msg(ack));
                    return;
                }
            }
            Command::Submit { workloads, reply } => {
                let (new_jobs, duplicates) = self.scheduler.submit(workloads, now, &mut out);
                info!(
                    new = new_jobs.len(),
                    duplicates = duplicates.len(),
                    "workloads submitted"
                );
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(SubmitReport {
                        new_jobs,
                        duplicates,
                    });
                }));
            }
            Command::Status { reply } => {
                let report = self.status();
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(report);
                }));
            }
            Command::Results { job_ids, reply } => {
                let views = self.results(job_ids.as_deref());
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(views);
                }));
            }
            Command::Cancel { job_id, reply } => {
                let r = self.scheduler.cancel(&job_id, now, &mut out);
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Retry { job_id, reply } => {
                let r = self.scheduler.retry(&job_id, now, &mut out);
                batch.replies.push(Box::new(move || {
                    let _ = reply.send(r);
                }));
            }
            Command::Snapshot { reply } => batch.snapshots.push(reply),
            Command::Tick => self.scheduler.tick(now, &mut out),
            Command::Shutdown { .. } => {}
        }
        self.collect(out, batch);
    }

    fn push_send(&self, batch: &mut Batch, session: SessionId, msg: Outbound) {
        batch.sends.push((session, msg));
    }

    fn collect(&mut self, out: Vec<Output>, batch: &mut Batch) {
        let now = now_ms();
        // Views are taken now, after the whole event, so one per session is enough.
        let mut workers_seen = std::collections::HashSet::new();
        for output in out {
            // (event, whether it belongs in the durable trace)
            let (event, traced) = match output {
                Output::JobChanged(id) => {
                    let Some(job) = self.scheduler.job(&id) else {
                        continue;
                    };
                    let event = FleetEvent::JobUpdated {
                        job: Box::new(job.view.clone()),
                    };
                    batch.dirty.push(id);
                    (event, true)
                }
                Output::WorkerJoined(session) => match self.scheduler.worker(session) {
                    Some(view) => (
                        FleetEvent::WorkerJoined {
                            worker: Box::new(view.clone()),
                        },
                        true,
                    ),
                    None => continue,
                },
                Output::WorkerChanged(session) => match self.scheduler.worker(session) {
                    Some(_) if !workers_seen.insert(session) => continue,
                    Some(view) => (
                        FleetEvent::WorkerUpdated {
                            worker: Box::new(view.clone()),
                        },
                        false,
                    ),
                    None => continue,
                },
                Output::WorkerLeft { session, reason } => {
                    self.sessions.remove(&session);
                    let event = FleetEvent::WorkerLeft {
                        session: crate::scheduler::session_label(session),
                        reason,
                    };
                    (event, true)
                }
                Output::Send { session, msg } => {
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
        if !batch.dirty.is_empty() || !batch.trace.is_empty() {
            let jobs: Vec<_> = batch
                .dirty
                .iter()
                .filter_map(|id| self.scheduler.job(id))
                .collect();
            let mut attempt = 0;
            while let Err(e) = self.store.commit(jobs.iter().copied(), &batch.trace) {
                attempt += 1;
                error!("cannot commit state (attempt {attempt}): {e}");
                if attempt >= 5 {
                    // Acknowledging now would promise durability we do not have;
                    // stopping lets a restart resume from the last commit.
                    error!("giving up: the master stops so that nothing unsaved is acknowledged");
                    std::process::exit(70);
                }
                std::thread::sleep(Duration::from_millis(100 * attempt));
            }
        }
        for event in batch.events {
            self.seq += 1;
            // Same shape as `ServerMessage::Event { seq, event }` (tested below).
            let json = format!(r#"{{"type":"event","seq":{},"event":{event}}}"#, self.seq);
            let _ = self.events.send(Arc::new(Published {
                seq: self.seq,
                json,
            }));
        }
        for (session, msg) in batch.sends {
            match self.sessions.get(&session) {
                Some(tx) => {
                    let _ = tx.send(msg);
                }
                None => debug!(session, "message for a session that is gone"),
            }
        }
        for reply in batch.replies {
            reply();
        }
        for reply in batch.snapshots {
            let _ = reply.send((self.seq, self.snapshot()));
        }
    }

    fn status(&self) -> StatusReport {
        let mut jobs = JobCounts::default();
        for job in self.scheduler.jobs() {
            jobs.total += 1;
            match job.state() {
                JobState::Queued => jobs.queued += 1,
                JobState::Assigned | JobState::Running => jobs.running += 1,
                JobState::Done => jobs.done += 1,
                JobState::Failed => jobs.failed += 1,
                JobState::Cancelled => jobs.cancelled += 1,
            }
        }
        let workers: Vec<_> = self.scheduler.workers().collect();
        StatusReport {
            jobs,
            workers: workers.len(),
            workers_busy: workers.iter().filter(|w| w.current_job.is_some()).count(),
            server_version: self.server_version.clone(),
        }
    }

    fn results(&self, job_ids: Option<&[JobId]>) -> Vec<JobView> {
        let mut views: Vec<JobView> = match job_ids {
            Some(ids) => ids
                .iter()
                .filter_map(|id| self.scheduler.job(id))
                .map(|j| j.view.clone())
                .collect(),
            None => self.scheduler.jobs().map(|j| j.view.clone()).collect(),
        };
        views.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        views
    }

    fn snapshot(&self) -> FleetSnapshot {
        let mut workers: Vec<_> = self.scheduler.workers().cloned().collect();
        workers.sort_by_key(|w| w.connected_at);
        FleetSnapshot {
            jobs: self.results(None),
            workers,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tunefleet_shared::protocol::ServerMessage;

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
