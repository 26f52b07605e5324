//! The worker's life: connect, register, take jobs, report results, reconnect.
//!
//! One [`run_worker`] call is one worker. It loops over connections; each
//! connection is a *session* with its own token. What must survive a lost
//! connection lives in `Worker`, outside the session:
//! - the running job (its task keeps running while the worker reconnects), and
//! - `pending`: finished jobs whose result (or failure) the master has not yet
//!   acknowledged. They are re-sent right after the next registration with their
//!   original lease and the new token; the master accepts them only if the job
//!   is still open and that lease went to this `worker_id`, which is why the id
//!   is fixed for the whole run.
//!
//! A worker runs one job at a time, or up to `slots` with
//! [`WorkerConfig::slots`], and asks for the next one (`request_job`) once
//! per free slot: as soon as a slot has no job, right after sending the last
//! one's report, without waiting for its ack (at most [`MAX_UNACKNOWLEDGED`]
//! reports per slot wait for one). Reports and requests that are ready
//! together leave in one write.

use crate::backend::{
    progress_channel, Backend, JobSpec, ProgressUpdate, ProgressWatch, TuneError,
};
use crate::backoff::Backoff;
use crate::connection::{tls_connector, CloseInfo, Connection, ConnectionError};
use futures_util::FutureExt;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_tungstenite::{tungstenite, Connector};
use tracing::{debug, error, info, warn};
use tunefleet_shared::protocol::{
    close_code, ErrorCode, JobId, JobResult, Lease, MasterMessage, WorkerHello, WorkerMessage,
    MAX_WORKER_SLOTS, PROTOCOL_VERSION,
};
use tunefleet_shared::target::Target;

/// Reports (results, failures) that may wait for their ack while the worker
/// takes the next job. One is the normal case (the ack comes with the next
/// assignment); the bound keeps a master that stops acking from piling up
/// finished work here.
const MAX_UNACKNOWLEDGED: usize = 2;
/// Limit for opening the socket, and then for the `registered` answer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before trying the next of several master URLs.
const NEXT_MASTER_DELAY: Duration = Duration::from_millis(50);

/// Everything one worker needs. See [`WorkerConfig::new`] for the defaults.
#[derive(Clone)]
pub struct WorkerConfig {
    /// Master base URL (`ws://host:port` or `wss://host:port`); `/ws/worker`
    /// is appended unless present.
    pub server: String,
    pub target: Target,
    /// Shown in the master's UI; need not be unique.
    pub name: String,
    pub backend: Arc<dyn Backend>,
    /// Join secret, when the master requires one.
    pub secret: Option<String>,
    pub backoff: Backoff,
    /// Stop after this many finished jobs have been acknowledged (tests, benchmarks).
    pub max_jobs: Option<u64>,
    /// Stable identity of this worker across reconnects; `None` picks a fresh
    /// UUID v4 for this [`run_worker`] call.
    pub worker_id: Option<String>,
    /// For `wss://`: a PEM file with the CA certificate(s) to trust instead of
    /// the public web roots (a private CA, or a self-signed master certificate).
    pub ca_cert: Option<PathBuf>,
    /// Jobs run at once, 1 to [`MAX_WORKER_SLOTS`] (`register`'s `slots`).
    /// More than one is for backends whose jobs do not compete for the
    /// machine (`sim`); a TVM run measures on every core.
    pub slots: u32,
}

impl WorkerConfig {
    /// A config with no secret, the default backoff, no job limit and a fresh worker id.
    pub fn new(
        server: impl Into<String>,
        target: Target,
        name: impl Into<String>,
        backend: Arc<dyn Backend>,
    ) -> Self {
        WorkerConfig {
            server: server.into(),
            target,
            name: name.into(),
            backend,
            secret: None,
            backoff: Backoff::default(),
            max_jobs: None,
            worker_id: None,
            ca_cert: None,
            slots: 1,
        }
    }
}

impl fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("server", &self.server)
            .field("target", &self.target)
            .field("name", &self.name)
            .field("backend", &self.backend.name())
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("backoff", &self.backoff)
            .field("max_jobs", &self.max_jobs)
            .field("worker_id", &self.worker_id)
            .field("ca_cert", &self.ca_cert)
            .field("slots", &self.slots)
            .finish()
    }
}

/// What a worker did, returned when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Successful registrations (1 + reconnects).
    pub registrations: u64,
    pub jobs_assigned: u64,
    /// Jobs the backend finished with a result.
    pub jobs_succeeded: u64,
    /// Jobs the backend failed (reported as `job_failed`).
    pub jobs_failed: u64,
    /// Jobs aborted because the master cancelled them.
    pub jobs_cancelled: u64,
    /// Results or failures the master stored.
    pub reports_accepted: u64,
    /// Results or failures the master answered with `accepted: false`.
    pub reports_rejected: u64,
}

impl WorkerStats {
    /// Own jobs whose outcome the master acknowledged; what `max_jobs` counts.
    pub fn jobs_acknowledged(&self) -> u64 {
        self.reports_accepted + self.reports_rejected
    }
}

/// Why a worker stopped for good. Connection trouble is not here: it is
/// retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidServerUrl { url: String, reason: String },
    #[error("slots: {0} is not between 1 and {max}", max = MAX_WORKER_SLOTS)]
    InvalidSlots(u32),
    #[error("the master speaks another protocol version (this worker speaks {ours}): {reason}")]
    ProtocolMismatch { ours: u32, reason: String },
    #[error("the master refused this worker: {0}")]
    Unauthorized(String),
    /// The CA file cannot be used, or the master's certificate is not trusted.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The worker endpoint for a master base URL: `ws://h:p` and `ws://h:p/` become
/// `ws://h:p/ws/worker`, which is also accepted as is. `http://` is taken as
/// `ws://`, `https://` as `wss://` (TLS).
pub fn worker_url(server: &str) -> Result<String, WorkerError> {
    let invalid = |reason: &str| WorkerError::InvalidServerUrl {
        url: server.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = server.trim().trim_end_matches('/');
    let (scheme, rest) = if let Some(rest) = trimmed.strip_prefix("ws://") {
        ("ws", rest)
    } else if let Some(rest) = trimmed.strip_prefix("http://") {
        ("ws", rest)
    } else if let Some(rest) = trimmed.strip_prefix("wss://") {
        ("wss", rest)
    } else if let Some(rest) = trimmed.strip_prefix("https://") {
        ("wss", rest)
    } else {
        return Err(invalid("expected ws://HOST:PORT or wss://HOST:PORT"));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid("no host"));
    }
    if rest.ends_with("/ws/worker") {
        Ok(format!("{scheme}://{rest}"))
    } else {
        Ok(format!("{scheme}://{rest}/ws/worker"))
    }
}

/// Runs one worker until `shutdown` completes, `max_jobs` jobs are acknowledged,
/// or a fatal error (protocol mismatch, unauthorized). Lost connections are
/// retried with backoff and never returned as errors.
///
/// On shutdown the running job, if any, is aborted and the socket is closed
/// with a normal close frame. Dropping the returned future also aborts the job.
pub async fn run_worker(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<WorkerStats, WorkerError> {
    let urls = tunefleet_shared::server_urls(&config.server)
        .into_iter()
        .map(worker_url)
        .collect::<Result<Vec<_>, _>>()?;
    if urls.is_empty() {
        return Err(WorkerError::InvalidServerUrl {
            url: config.server.clone(),
            reason: "no master URL given".into(),
        });
    }
    if !(1..=MAX_WORKER_SLOTS).contains(&config.slots) {
        return Err(WorkerError::InvalidSlots(config.slots));
    }
    let tls = if urls.iter().any(|url| url.starts_with("wss://")) {
        Some(tls_connector(config.ca_cert.as_deref()).map_err(WorkerError::Tls)?)
    } else {
        None
    };
    let worker_id = config
        .worker_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    info!(
        url = %urls.join(","), %worker_id, name = %config.name, backend = config.backend.name(),
        target = %config.target, "starting worker"
    );
    let mut worker = Worker {
        config,
        urls,
        current: 0,
        tls,
        worker_id,
        running: Vec::new(),
        pending: Vec::new(),
        stats: WorkerStats::default(),
    };
    tokio::pin!(shutdown);
    worker.run(shutdown).await
}

struct Worker {
    config: WorkerConfig,
    /// Every master URL given (a leader and its standby); `current` is the
    /// one tried next, and kept while it answers.
    urls: Vec<String>,
    current: usize,
    /// For `wss://` URLs.
    tls: Option<Connector>,
    worker_id: String,
    /// At most `config.slots`, in the order they were assigned.
    running: Vec<RunningJob>,
    /// Finished jobs waiting for the master's `ack`, oldest first.
    pending: Vec<Report>,
    stats: WorkerStats,
}

/// The job being tuned. Dropping it aborts the tuning task.
struct RunningJob {
    job_id: JobId,
    lease: Lease,
    nbest: u32,
    task: JoinHandle<Result<JobResult, TuneError>>,
    progress: ProgressWatch,
    progress_done: bool,
    /// Started on an earlier connection. The master recycled its lease when
    /// that connection ended, so it refuses progress for it (`not_assigned`);
    /// only the final result may still be accepted.
    orphaned: bool,
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        // A JoinHandle does not cancel its task when dropped; an orphaned TVM
        // run would keep the machine busy for nothing.
        self.task.abort();
    }
}

/// A finished job's outcome, kept until the master acknowledges it.
struct Report {
    job_id: JobId,
    lease: Lease,
    outcome: Outcome,
}

enum Outcome {
    Result(JobResult),
    Failed(String),
}

impl Report {
    fn message(&self, token: &str) -> WorkerMessage {
        let (token, job_id, lease) = (token.to_string(), self.job_id.clone(), self.lease);
        match &self.outcome {
            Outcome::Result(result) => WorkerMessage::Result {
                token,
                job_id,
                lease,
                result: result.clone(),
            },
            Outcome::Failed(error) => WorkerMessage::JobFailed {
                token,
                job_id,
                lease,
                error: error.clone(),
            },
        }
    }
}

/// Why connecting or registering did not give a session.
enum Attempt {
    Retry(String),
    Fatal(WorkerError),
}

/// How a session ended.
enum SessionEnd {
    Shutdown,
    /// `max_jobs` reached.
    Done,
    Lost(String),
    Fatal(WorkerError),
}

enum JobEvent {
    Progress(ProgressUpdate),
    Finished(Result<Result<JobResult, TuneError>, JoinError>),
}

enum Event {
    Shutdown,
    Master(Result<Option<MasterMessage>, ConnectionError>),
    /// With the job's index in `running`.
    Job((usize, JobEvent)),
}

impl Worker {
    async fn run<S: Future<Output = ()>>(
        &mut self,
        mut shutdown: Pin<&mut S>,
    ) -> Result<WorkerStats, WorkerError> {
        let mut backoff = self.config.backoff.start();
        loop {
            if self.max_jobs_reached() {
                return Ok(self.stats.clone());
            }
            let attempt = tokio::select! {
                _ = shutdown.as_mut() => None,
                attempt = self.connect_and_register() => Some(attempt),
            };
            let Some(attempt) = attempt else {
                return Ok(self.stop());
            };
            let delay = match attempt {
                Ok((mut conn, token)) => {
                    backoff.reset();
                    match self.serve(&mut conn, &token, shutdown.as_mut()).await {
                        SessionEnd::Shutdown => {
                            let stats = self.stop();
                            conn.close("worker shutting down").await;
                            return Ok(stats);
                        }
                        SessionEnd::Done => {
                            info!(jobs = self.stats.jobs_acknowledged(), "job limit reached");
                            conn.close("worker reached its job limit").await;
                            return Ok(self.stats.clone());
                        }
                        SessionEnd::Fatal(e) => return Err(e),
                        SessionEnd::Lost(reason) => {
                            // Polite when the socket still works, instant when it does not.
                            conn.close("reconnecting").await;
                            let delay = backoff.next_delay();
                            warn!(%reason, retry_in_ms = millis(delay), "lost the connection to the master");
                            delay
                        }
                    }
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(reason)) => {
                    let url = self.urls[self.current].clone();
                    // The next master at once (a standby may lead now); the
                    // backoff only after every one of them was tried.
                    self.current = (self.current + 1) % self.urls.len();
                    let delay = if self.current == 0 {
                        backoff.next_delay()
                    } else {
                        NEXT_MASTER_DELAY
                    };
                    warn!(
                        %reason, %url, attempt = backoff.attempts(),
                        retry_in_ms = millis(delay), "could not register with the master"
                    );
                    delay
                }
            };
            let slept = tokio::select! {
                _ = shutdown.as_mut() => false,
                _ = tokio::time::sleep(delay) => true,
            };
            if !slept {
                return Ok(self.stop());
            }
        }
    }

    /// Aborts the running job for a shutdown; returns the final stats.
    fn stop(&mut self) -> WorkerStats {
        for job in self.running.drain(..) {
            info!(job_id = %job.job_id, lease = job.lease, "aborting the running job for shutdown");
        }
        if !self.pending.is_empty() {
            warn!(
                unacknowledged = self.pending.len(),
                "shutting down with results the master has not acknowledged"
            );
        }
        self.stats.clone()
    }

    /// Room for one more job besides the `requested` ones not yet
    /// answered: a free slot; reports awaiting an ack count as finished jobs
    /// (for `--max-jobs`), as do running and requested ones, and at most
    /// [`MAX_UNACKNOWLEDGED`] per slot may wait.
    fn wants_another_job(&self, requested: usize) -> bool {
        let slots = self.config.slots as usize;
        let taken = self.running.len() + requested;
        let finished = self.stats.jobs_acknowledged() + self.pending.len() as u64;
        taken < slots
            && self.pending.len() < MAX_UNACKNOWLEDGED * slots
            && self
                .config
                .max_jobs
                .is_none_or(|max| finished + (taken as u64) < max)
    }

    fn max_jobs_reached(&self) -> bool {
        self.config
            .max_jobs
            .is_some_and(|max| self.stats.jobs_acknowledged() >= max)
    }

    fn hello(&self) -> WorkerHello {
        let backend = &self.config.backend;
        WorkerHello {
            protocol: PROTOCOL_VERSION,
            worker_id: self.worker_id.clone(),
            name: self.config.name.clone(),
            target: self.config.target.clone(),
            backend: backend.name().to_string(),
            tvm_version: backend.tvm_version(),
            secret: self.config.secret.clone(),
            // Absent for one: what a master from before slots expects.
            slots: (self.config.slots > 1).then_some(self.config.slots),
        }
    }

    async fn connect_and_register(&mut self) -> Result<(Connection, String), Attempt> {
        let mut conn = match tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            Connection::connect(&self.urls[self.current], self.tls.as_ref()),
        )
        .await
        {
            Err(_) => return Err(Attempt::Retry("timed out opening the WebSocket".into())),
            Ok(Err(e)) => return Err(connect_failure(e)),
            Ok(Ok(conn)) => conn,
        };
        if let Err(e) = conn.send(&WorkerMessage::Register(self.hello())).await {
            return Err(Attempt::Retry(format!("sending register: {e}")));
        }
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        loop {
            let Ok(received) = tokio::time::timeout_at(deadline, conn.recv()).await else {
                return Err(Attempt::Retry("no `registered` answer in time".into()));
            };
            match received {
                Ok(Some(MasterMessage::Registered {
                    token,
                    session,
                    matching_jobs,
                })) => {
                    self.stats.registrations += 1;
                    info!(%session, matching_jobs, "registered with the master");
                    if matching_jobs == 0 {
                        warn!(
                            target = %self.config.target,
                            "no open job matches this worker's target right now"
                        );
                    }
                    return Ok((conn, token));
                }
                Ok(Some(MasterMessage::Error { code, message })) => {
                    warn!(?code, %message, "master answered register with an error");
                }
                Ok(Some(MasterMessage::Shutdown { reason })) => {
                    return Err(Attempt::Retry(format!("master is shutting down: {reason}")));
                }
                Ok(Some(other)) => {
                    debug!(
                        ?other,
                        "ignoring a message that arrived before `registered`"
                    );
                }
                Ok(None) => return Err(self.closed_while_registering(conn.close_info())),
                Err(e) if e.is_recoverable() => warn!(error = %e, "ignoring a bad message"),
                Err(e) => return Err(Attempt::Retry(e.to_string())),
            }
        }
    }

    fn closed_while_registering(&self, close: Option<&CloseInfo>) -> Attempt {
        let Some(close) = close else {
            return Attempt::Retry("the master closed the connection during registration".into());
        };
        if let Some(fatal) = fatal_close(close) {
            return Attempt::Fatal(fatal);
        }
        if close.code == close_code::NO_MATCHING_JOBS {
            error!(
                target = %self.config.target, reason = %close.reason,
                "the master has no job for this worker's target; will retry"
            );
        }
        Attempt::Retry(format!("the master closed the connection ({close})"))
    }

    /// One registered connection, until it ends.
    async fn serve<S: Future<Output = ()>>(
        &mut self,
        conn: &mut Connection,
        token: &str,
        mut shutdown: Pin<&mut S>,
    ) -> SessionEnd {
        for report in &self.pending {
            info!(job_id = %report.job_id, lease = report.lease, "re-sending an unacknowledged result");
            if let Err(e) = conn.send(&report.message(token)).await {
                return SessionEnd::Lost(e.to_string());
            }
        }
        for job in &mut self.running {
            job.orphaned = true;
            info!(
                job_id = %job.job_id, lease = job.lease,
                "job from the previous connection still running; its result will be sent when it finishes"
            );
        }
        // `request_job`s sent and not yet answered by an `assign`.
        let mut requested = 0;
        loop {
            if self.running.is_empty() && self.pending.is_empty() && self.max_jobs_reached() {
                return SessionEnd::Done;
            }
            // Asked for right after a report, not after its ack: the master
            // handles a socket's messages in order, so the report is taken
            // first, and the result and the next assignment share one
            // commit instead of two round trips.
            while self.wants_another_job(requested) {
                let request = WorkerMessage::RequestJob {
                    token: token.to_string(),
                };
                if let Err(e) = conn.feed(&request).await {
                    return SessionEnd::Lost(e.to_string());
                }
                debug!("a slot is free; asked for a job");
                requested += 1;
            }
            // A job that has already finished is taken before anything is
            // written, so that its report joins the others in one write.
            let ready = next_job_event(&mut self.running).now_or_never();
            let event = match ready {
                Some(job) => Event::Job(job),
                None => {
                    // What was queued (reports, then requests) leaves in one
                    // write before waiting.
                    if let Err(e) = conn.flush().await {
                        return SessionEnd::Lost(e.to_string());
                    }
                    // All branches are cancel-safe. `conn.recv()` is always
                    // polled, so the master's pings are answered while a job runs.
                    tokio::select! {
                        _ = shutdown.as_mut() => Event::Shutdown,
                        received = conn.recv() => Event::Master(received),
                        job = next_job_event(&mut self.running) => Event::Job(job),
                    }
                }
            };

            let outgoing = match event {
                Event::Shutdown => return SessionEnd::Shutdown,
                Event::Master(Ok(Some(message))) => match self.on_message(message, token) {
                    Step::Continue(outgoing) => outgoing,
                    Step::Assigned(outgoing) => {
                        requested = requested.saturating_sub(1);
                        outgoing
                    }
                    Step::End(end) => return end,
                },
                Event::Master(Ok(None)) => return closed_in_session(conn.close_info()),
                Event::Master(Err(e)) if e.is_recoverable() => {
                    warn!(error = %e, "ignoring a bad message from the master");
                    None
                }
                Event::Master(Err(e)) => return SessionEnd::Lost(e.to_string()),
                Event::Job((index, JobEvent::Progress(update))) => {
                    self.progress_message(index, update, token)
                }
                Event::Job((index, JobEvent::Finished(joined))) => {
                    self.finish_job(index, joined, token)
                }
            };
            if let Some(message) = outgoing {
                if let Err(e) = conn.feed(&message).await {
                    return SessionEnd::Lost(e.to_string());
                }
            }
        }
    }

    fn on_message(&mut self, message: MasterMessage, token: &str) -> Step {
        match message {
            MasterMessage::Assign {
                job_id,
                lease,
                attempt,
                workload,
                nbest,
                warm_start,
                tuner,
            } => {
                // Tune, compile and measure for the machine that runs the
                // kernel: what the job leaves open comes from this worker.
                let mut workload = *workload;
                workload.target = workload.target.completed_by(&self.config.target);
                let spec = JobSpec {
                    job_id,
                    lease,
                    attempt,
                    workload,
                    nbest,
                    warm_start,
                    tuner: tuner.map(|t| *t).unwrap_or_default(),
                };
                Step::Assigned(self.start_job(spec, token))
            }
            MasterMessage::Cancel {
                job_id,
                lease,
                reason,
            } => {
                let ours = self
                    .running
                    .iter()
                    .position(|job| job.job_id == job_id && job.lease == lease);
                if let Some(index) = ours {
                    self.running.remove(index);
                    self.stats.jobs_cancelled += 1;
                    info!(%job_id, lease, %reason, "job cancelled by the master");
                } else {
                    debug!(%job_id, lease, %reason, "cancel for a job this worker is not running");
                }
                Step::Continue(None)
            }
            MasterMessage::Ack {
                job_id,
                lease,
                accepted,
                reason,
            } => {
                let position = self
                    .pending
                    .iter()
                    .position(|r| r.job_id == job_id && r.lease == lease);
                match position {
                    None => debug!(%job_id, lease, accepted, "ack for nothing pending"),
                    Some(i) => {
                        self.pending.remove(i);
                        if accepted {
                            self.stats.reports_accepted += 1;
                            info!(%job_id, lease, "master accepted the result");
                        } else {
                            self.stats.reports_rejected += 1;
                            let reason = reason.as_deref().unwrap_or("no reason given");
                            warn!(%job_id, lease, %reason, "master rejected the result");
                        }
                    }
                }
                Step::Continue(None)
            }
            MasterMessage::Error { code, message } => {
                if code == ErrorCode::StaleToken {
                    return Step::End(SessionEnd::Lost(format!("stale token: {message}")));
                }
                warn!(?code, %message, "error from the master");
                Step::Continue(None)
            }
            MasterMessage::Shutdown { reason } => {
                info!(%reason, "the master is shutting down");
                Step::End(SessionEnd::Lost(format!("master shutdown: {reason}")))
            }
            MasterMessage::Registered { .. } => {
                warn!("unexpected second `registered`; ignoring it");
                Step::Continue(None)
            }
        }
    }

    /// Starts `spec` unless busy; returns what to tell the master, if anything.
    fn start_job(&mut self, spec: JobSpec, token: &str) -> Option<WorkerMessage> {
        let same = |job_id: &JobId, lease: Lease| *job_id == spec.job_id && lease == spec.lease;
        if self.running.iter().any(|job| same(&job.job_id, job.lease)) {
            debug!(job_id = %spec.job_id, lease = spec.lease, "duplicate assign ignored");
            return None;
        }
        if self.running.len() >= self.config.slots as usize {
            let job = &self.running[0];
            warn!(
                job_id = %spec.job_id, lease = spec.lease, busy_with = %job.job_id,
                "assigned a job while busy; refusing it"
            );
            return Some(WorkerMessage::JobFailed {
                token: token.to_string(),
                job_id: spec.job_id,
                lease: spec.lease,
                error: if self.config.slots == 1 {
                    format!(
                        "worker is busy with job {} (lease {}); it runs one job at a time",
                        job.job_id, job.lease
                    )
                } else {
                    format!(
                        "worker is busy: its {} slots all hold a job",
                        self.config.slots
                    )
                },
            });
        }
        if self.pending.iter().any(|r| same(&r.job_id, r.lease)) {
            debug!(job_id = %spec.job_id, lease = spec.lease, "assign for a finished job ignored");
            return None;
        }

        info!(
            job_id = %spec.job_id, lease = spec.lease, attempt = spec.attempt,
            workload = %spec.workload.name, trials = spec.workload.trials, "starting job"
        );
        self.stats.jobs_assigned += 1;
        let (sink, progress) = progress_channel();
        let backend = Arc::clone(&self.config.backend);
        let (job_id, lease, nbest) = (spec.job_id.clone(), spec.lease, spec.nbest);
        let effective_target = spec.workload.target.clone();
        let task = tokio::spawn(async move {
            let mut result = backend.tune(spec, sink).await;
            if let Ok(result) = &mut result {
                result.target.get_or_insert(effective_target);
            }
            result
        });
        self.running.push(RunningJob {
            job_id,
            lease,
            nbest,
            task,
            progress,
            progress_done: false,
            orphaned: false,
        });
        None
    }

    fn progress_message(
        &self,
        index: usize,
        update: ProgressUpdate,
        token: &str,
    ) -> Option<WorkerMessage> {
        let job = self.running.get(index).filter(|job| !job.orphaned)?;
        Some(WorkerMessage::Progress {
            token: token.to_string(),
            job_id: job.job_id.clone(),
            lease: job.lease,
            trials_done: update.trials_done,
            trials_total: update.trials_total,
            best_latency_s: update.best_latency_s,
        })
    }

    /// Moves the finished job to `pending`; returns its report to send.
    fn finish_job(
        &mut self,
        index: usize,
        joined: Result<Result<JobResult, TuneError>, JoinError>,
        token: &str,
    ) -> Option<WorkerMessage> {
        if index >= self.running.len() {
            return None;
        }
        let job = self.running.remove(index);
        let (job_id, lease) = (job.job_id.clone(), job.lease);
        let outcome = match joined {
            Ok(Ok(mut result)) => {
                result
                    .records
                    .sort_by(|a, b| a.latency_s.total_cmp(&b.latency_s));
                result
                    .records
                    .truncate(usize::try_from(job.nbest).unwrap_or(usize::MAX));
                self.stats.jobs_succeeded += 1;
                info!(
                    %job_id, lease, best_latency_s = result.best_latency_s,
                    wall_time_s = result.wall_time_s, "job finished"
                );
                Outcome::Result(result)
            }
            Ok(Err(e)) => {
                self.stats.jobs_failed += 1;
                warn!(%job_id, lease, error = %e, "job failed");
                Outcome::Failed(e.to_string())
            }
            Err(e) if e.is_panic() => {
                self.stats.jobs_failed += 1;
                let message = format!("backend panicked: {}", panic_message(e.into_panic()));
                error!(%job_id, lease, %message, "job failed");
                Outcome::Failed(message)
            }
            Err(_) => {
                // Only an abort cancels the task, and aborting drops the job first.
                return None;
            }
        };
        let report = Report {
            job_id,
            lease,
            outcome,
        };
        let message = report.message(token);
        self.pending.push(report);
        Some(message)
    }
}

/// What handling one master message asks of the session.
enum Step {
    Continue(Option<WorkerMessage>),
    /// An `assign` arrived: the outstanding `request_job` is used up.
    Assigned(Option<WorkerMessage>),
    End(SessionEnd),
}

/// The next thing a running job has to say, with its index in `running`;
/// never completes without a job. The earliest job is asked first.
async fn next_job_event(running: &mut [RunningJob]) -> (usize, JobEvent) {
    match running {
        [] => std::future::pending().await,
        [job] => (0, job_event(job).await),
        jobs => {
            let events = jobs.iter_mut().map(|job| Box::pin(job_event(job)));
            let (event, index, _) = futures_util::future::select_all(events).await;
            (index, event)
        }
    }
}

/// The next thing `job` has to say.
async fn job_event(job: &mut RunningJob) -> JobEvent {
    if !job.progress_done {
        // Progress first, so the last update goes out before the result.
        let event = tokio::select! {
            biased;
            update = job.progress.next() => update.map(JobEvent::Progress),
            joined = &mut job.task => Some(JobEvent::Finished(joined)),
        };
        match event {
            Some(event) => return event,
            None => job.progress_done = true,
        }
    }
    JobEvent::Finished((&mut job.task).await)
}

/// Close codes after which retrying cannot help.
fn fatal_close(close: &CloseInfo) -> Option<WorkerError> {
    match close.code {
        close_code::PROTOCOL_MISMATCH => Some(WorkerError::ProtocolMismatch {
            ours: PROTOCOL_VERSION,
            reason: close.reason.clone(),
        }),
        close_code::UNAUTHORIZED => Some(WorkerError::Unauthorized(close.reason.clone())),
        _ => None,
    }
}

fn closed_in_session(close: Option<&CloseInfo>) -> SessionEnd {
    match close {
        None => SessionEnd::Lost("the connection dropped".into()),
        Some(close) => match fatal_close(close) {
            Some(fatal) => SessionEnd::Fatal(fatal),
            None => SessionEnd::Lost(format!("the master closed the connection ({close})")),
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn connect_failure(e: ConnectionError) -> Attempt {
    // Certificates and protocols do not fix themselves: stop with a clear reason.
    // The advice text is the client crate's, so worker and CLI say the same.
    if let Some(tls @ (rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidMessage(_))) =
        e.tls_error()
    {
        return Attempt::Fatal(WorkerError::Tls(tunefleet_client::describe_tls_error(tls)));
    }
    if let ConnectionError::WebSocket(tungstenite::Error::Http(response)) = &e {
        let status = response.status();
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Attempt::Fatal(WorkerError::Unauthorized(format!(
                "HTTP {status} on the WebSocket upgrade"
            )));
        }
        return Attempt::Retry(format!("HTTP {status} on the WebSocket upgrade"));
    }
    Attempt::Retry(e.to_string())
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => s.to_string(),
            Err(_) => "non-string panic payload".into(),
        },
    }
}

#[cfg(test)]
mod tests;
