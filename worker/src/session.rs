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
//! one's report, without waiting for its ack (at most `MAX_UNACKNOWLEDGED`
//! reports per slot wait for one). Reports and requests that are ready
//! together leave in one write.
//!
//! A master that goes silent (no frame, not even a ping, for the master's
//! `--heartbeat-timeout`, which it sends in `registered`, or the worker's
//! own `--heartbeat-timeout`) is a lost connection, as a closed socket is:
//! after a partition that swallowed every packet, nothing else would tell
//! this worker that the master dropped it. A session that ends that way, or
//! with `storage_unavailable` (4006: that master cannot commit, and may have
//! lost the lead), tries the next master URL first.

mod config;
mod jobs;
mod register;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tracing::{debug, info, warn};
use tunefleet_shared::protocol::{
    close_code, ErrorCode, JobId, Lease, MasterMessage, WorkerMessage, WORKER_SLOTS,
};

use crate::backend::JobSpec;
use crate::backoff::BackoffState;
pub use config::{parse_duration, worker_url, WorkerConfig, WorkerError, WorkerStats};
use jobs::{next_job_event, JobEvent, Report, RunningJob};
use register::{fatal_close, Attempt};
use tunefleet_client::{tls_client_config, CloseInfo, Received, Transport, TransportError};

/// Reports (results, failures) that may wait for their ack while the worker
/// takes the next job. One is the normal case (the ack comes with the next
/// assignment); the bound keeps a master that stops acking from piling up
/// finished work here.
const MAX_UNACKNOWLEDGED: usize = 2;
/// Pause before trying the next of several master URLs.
const NEXT_MASTER_DELAY: Duration = Duration::from_millis(50);
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
    if !WORKER_SLOTS.contains(&config.slots) {
        return Err(WorkerError::InvalidSlots(config.slots));
    }
    let tls = if urls.iter().any(|url| url.starts_with("wss://")) {
        // One TLS set-up for every client of a master: the client crate's.
        Some(tls_client_config(config.ca_cert.as_deref()).map_err(WorkerError::Tls)?)
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
    let silence_limit = config.heartbeat_timeout;
    let mut worker = Worker {
        config,
        urls,
        current: 0,
        tls,
        worker_id,
        running: Vec::new(),
        pending: Vec::new(),
        silence_limit,
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
    /// For `wss://` URLs: made once (the `--ca-cert` file read at start-up).
    tls: Option<Arc<rustls::ClientConfig>>,
    worker_id: String,
    /// At most `config.slots`, in the order they were assigned.
    running: Vec<RunningJob>,
    /// Finished jobs waiting for the master's `ack`, oldest first.
    pending: Vec<Report>,
    /// The silence limit of the last session (see `register`).
    silence_limit: Option<std::time::Duration>,
    stats: WorkerStats,
}

/// How a session ended.
enum SessionEnd {
    Shutdown,
    /// `max_jobs` reached.
    Done,
    Lost(String),
    /// This master cannot serve this worker now: it went silent (`silent`:
    /// the socket is dropped without a close handshake that would only wait),
    /// or closed with `storage_unavailable`. The next URL is tried first.
    Elsewhere {
        reason: String,
        silent: bool,
    },
    Fatal(WorkerError),
}

enum Event {
    Shutdown,
    /// The silence deadline passed (the master may have been heard since).
    Silence,
    Master(Result<Received<MasterMessage>, TransportError>),
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
                            let _ = conn.close("worker shutting down").await;
                            return Ok(stats);
                        }
                        SessionEnd::Done => {
                            info!(jobs = self.stats.jobs_acknowledged(), "job limit reached");
                            let _ = conn.close("worker reached its job limit").await;
                            return Ok(self.stats.clone());
                        }
                        SessionEnd::Fatal(e) => return Err(e),
                        SessionEnd::Lost(reason) => {
                            // Polite when the socket still works, instant when it does not.
                            let _ = conn.close("reconnecting").await;
                            let delay = backoff.next_delay();
                            warn!(%reason, retry_in_ms = millis(delay), "lost the connection to the master");
                            delay
                        }
                        SessionEnd::Elsewhere { reason, silent } => {
                            if !silent {
                                let _ = conn.close("trying another master").await;
                            }
                            self.elsewhere(&reason, &mut backoff)
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

    /// After [`SessionEnd::Elsewhere`]: the next URL (at once when there
    /// are several: a standby may lead now), else this one after the backoff.
    fn elsewhere(&mut self, reason: &str, backoff: &mut BackoffState) -> Duration {
        let url = self.urls[self.current].clone();
        self.current = (self.current + 1) % self.urls.len();
        let delay = if self.urls.len() > 1 {
            NEXT_MASTER_DELAY
        } else {
            backoff.next_delay()
        };
        warn!(
            %reason, %url, next = %self.urls[self.current], retry_in_ms = millis(delay),
            "lost the connection to the master"
        );
        delay
    }

    /// Aborts the running job for a shutdown; returns the final stats.
    fn stop(&mut self) -> WorkerStats {
        for job in self.running.drain(..) {
            info!(job_id = %job.job_id, lease = %job.lease, "aborting the running job for shutdown");
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

    /// One registered connection, until it ends.
    async fn serve<S: Future<Output = ()>>(
        &mut self,
        conn: &mut Transport,
        token: &str,
        mut shutdown: Pin<&mut S>,
    ) -> SessionEnd {
        if let Err(end) = self.resume(conn, token).await {
            return end;
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
                    return write_failed(e);
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
                        return write_failed(e);
                    }
                    // All branches are cancel-safe. `conn.recv()` is always
                    // polled, so the master's pings are answered while a job runs.
                    let silence = conn.silence_deadline();
                    tokio::select! {
                        _ = shutdown.as_mut() => Event::Shutdown,
                        received = conn.recv() => Event::Master(received),
                        job = next_job_event(&mut self.running) => Event::Job(job),
                        _ = sleep_until_some(silence) => Event::Silence,
                    }
                }
            };

            let outgoing = match self.on_event(event, conn, &mut requested, token) {
                Ok(outgoing) => outgoing,
                Err(end) => return end,
            };
            if let Some(message) = outgoing {
                if let Err(e) = conn.feed(&message).await {
                    return write_failed(e);
                }
            }
        }
    }

    /// What a previous connection left behind: its unacknowledged results
    /// re-sent first, and its running jobs marked orphaned (their results
    /// go out on this connection when they finish).
    async fn resume(&mut self, conn: &mut Transport, token: &str) -> Result<(), SessionEnd> {
        for report in &self.pending {
            info!(job_id = %report.job_id, lease = %report.lease, "re-sending an unacknowledged result");
            conn.send(&report.message(token))
                .await
                .map_err(write_failed)?;
        }
        for job in &mut self.running {
            job.orphaned = true;
            info!(
                job_id = %job.job_id, lease = %job.lease,
                "job from the previous connection still running; its result will be sent when it finishes"
            );
        }
        Ok(())
    }

    /// One event of the session: the message it makes the worker send, if
    /// any, or how the session ends. An `assign` uses up one of the
    /// `requested` jobs.
    fn on_event(
        &mut self,
        event: Event,
        conn: &Transport,
        requested: &mut usize,
        token: &str,
    ) -> Result<Option<WorkerMessage>, SessionEnd> {
        match event {
            Event::Shutdown => Err(SessionEnd::Shutdown),
            Event::Silence => match conn.silent_for() {
                Some(silent) => Err(went_silent(silent)),
                // Heard from since the deadline was set (a ping).
                None => Ok(None),
            },
            Event::Master(Ok(Received::Message(message))) => {
                match self.on_message(message, token) {
                    Step::Continue(outgoing) => Ok(outgoing),
                    Step::Assigned(outgoing) => {
                        *requested = requested.saturating_sub(1);
                        Ok(outgoing)
                    }
                    Step::End(end) => Err(end),
                }
            }
            Event::Master(Ok(Received::Closed(close))) => Err(closed_in_session(close.as_ref())),
            Event::Master(Err(e)) if e.is_recoverable() => {
                warn!(error = %e, "ignoring a bad message from the master");
                Ok(None)
            }
            Event::Master(Err(e)) => Err(SessionEnd::Lost(e.to_string())),
            Event::Job((index, JobEvent::Progress(update))) => {
                Ok(self.progress_message(index, update, token))
            }
            Event::Job((index, JobEvent::Finished(joined))) => {
                Ok(self.finish_job(index, joined, token))
            }
        }
    }

    /// One handler per master command; the arms only unpack.
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
                model_round,
                cost_model,
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
                    model_round,
                    cost_model,
                };
                Step::Assigned(self.start_job(spec, token))
            }
            MasterMessage::Cancel {
                job_id,
                lease,
                reason,
            } => self.on_cancel(job_id, lease, &reason),
            MasterMessage::Ack {
                job_id,
                lease,
                accepted,
                reason,
            } => self.on_ack(job_id, lease, accepted, reason.as_deref()),
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

    /// `cancel`: drop the job if it is ours under that lease (its process
    /// goes with it); a cancel for anything else is old news.
    fn on_cancel(&mut self, job_id: JobId, lease: Lease, reason: &str) -> Step {
        let ours = self
            .running
            .iter()
            .position(|job| job.job_id == job_id && job.lease == lease);
        if let Some(index) = ours {
            self.running.remove(index);
            self.stats.jobs_cancelled += 1;
            info!(%job_id, %lease, %reason, "job cancelled by the master");
        } else {
            debug!(%job_id, %lease, %reason, "cancel for a job this worker is not running");
        }
        Step::Continue(None)
    }

    /// `ack`: the master committed (or refused) a report; it is no longer
    /// pending, so a reconnect will not send it again.
    fn on_ack(
        &mut self,
        job_id: JobId,
        lease: Lease,
        accepted: bool,
        reason: Option<&str>,
    ) -> Step {
        let position = self
            .pending
            .iter()
            .position(|r| r.job_id == job_id && r.lease == lease);
        match position {
            None => debug!(%job_id, %lease, accepted, "ack for nothing pending"),
            Some(i) => {
                self.pending.remove(i);
                if accepted {
                    self.stats.reports_accepted += 1;
                    info!(%job_id, %lease, "master accepted the result");
                } else {
                    self.stats.reports_rejected += 1;
                    let reason = reason.unwrap_or("no reason given");
                    warn!(%job_id, %lease, %reason, "master rejected the result");
                }
            }
        }
        Step::Continue(None)
    }
}

/// What handling one master message asks of the session.
enum Step {
    Continue(Option<WorkerMessage>),
    /// An `assign` arrived: the outstanding `request_job` is used up.
    Assigned(Option<WorkerMessage>),
    End(SessionEnd),
}

fn closed_in_session(close: Option<&CloseInfo>) -> SessionEnd {
    match close {
        None => SessionEnd::Lost("the connection dropped".into()),
        Some(close) => match fatal_close(close) {
            Some(fatal) => SessionEnd::Fatal(fatal),
            None if close.code == close_code::STORAGE_UNAVAILABLE => SessionEnd::Elsewhere {
                reason: format!("the master closed the connection ({close})"),
                silent: false,
            },
            None => SessionEnd::Lost(format!("the master closed the connection ({close})")),
        },
    }
}

fn went_silent(silent: Duration) -> SessionEnd {
    SessionEnd::Elsewhere {
        reason: format!(
            "nothing heard from the master for {:.1} s, not even a ping \
             (a partition, or a master that dropped this worker)",
            silent.as_secs_f64()
        ),
        silent: true,
    }
}

/// A write that failed: one the master did not take in time is silence,
/// anything else a lost connection.
fn write_failed(e: TransportError) -> SessionEnd {
    match e {
        TransportError::Stalled(after) => went_silent(after),
        e => SessionEnd::Lost(e.to_string()),
    }
}

/// Sleeps until `at`; never wakes when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
