//! The jobs a worker runs: starting one on the backend, its progress, and
//! its outcome kept as a [`Report`] until the master acknowledges it.

use std::sync::Arc;

use tokio::task::{JoinError, JoinHandle};
use tracing::{debug, error, info, warn};
use tunefleet_shared::protocol::{JobId, JobResult, Lease, WorkerMessage};

use super::Worker;
use crate::backend::{progress_channel, JobSpec, ProgressUpdate, ProgressWatch, TuneError};

/// The job being tuned. Dropping it aborts the tuning task.
pub(super) struct RunningJob {
    pub(super) job_id: JobId,
    pub(super) lease: Lease,
    nbest: u32,
    task: JoinHandle<Result<JobResult, TuneError>>,
    progress: ProgressWatch,
    progress_done: bool,
    /// Started on an earlier connection. The master recycled its lease when
    /// that connection ended, so it refuses progress for it (`not_assigned`);
    /// only the final result may still be accepted.
    pub(super) orphaned: bool,
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        // A JoinHandle does not cancel its task when dropped; an orphaned TVM
        // run would keep the machine busy for nothing.
        self.task.abort();
    }
}

/// A finished job's outcome, kept until the master acknowledges it.
pub(super) struct Report {
    pub(super) job_id: JobId,
    pub(super) lease: Lease,
    outcome: Outcome,
}

pub(super) enum Outcome {
    Result(JobResult),
    Failed(String),
}

impl Report {
    pub(super) fn message(&self, token: &str) -> WorkerMessage {
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

pub(super) enum JobEvent {
    Progress(ProgressUpdate),
    Finished(Result<Result<JobResult, TuneError>, JoinError>),
}

impl Worker {
    /// Starts `spec` unless busy; returns what to tell the master, if anything.
    pub(super) fn start_job(&mut self, spec: JobSpec, token: &str) -> Option<WorkerMessage> {
        let same = |job_id: &JobId, lease: Lease| *job_id == spec.job_id && lease == spec.lease;
        if self.running.iter().any(|job| same(&job.job_id, job.lease)) {
            debug!(job_id = %spec.job_id, lease = %spec.lease, "duplicate assign ignored");
            return None;
        }
        if self.running.len() >= self.config.slots as usize {
            let job = &self.running[0];
            warn!(
                job_id = %spec.job_id, lease = %spec.lease, busy_with = %job.job_id,
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
            debug!(job_id = %spec.job_id, lease = %spec.lease, "assign for a finished job ignored");
            return None;
        }

        info!(
            job_id = %spec.job_id, lease = %spec.lease, attempt = spec.attempt,
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

    pub(super) fn progress_message(
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
    pub(super) fn finish_job(
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
                    %job_id, %lease, best_latency_s = result.best_latency_s,
                    wall_time_s = result.wall_time_s, "job finished"
                );
                Outcome::Result(result)
            }
            Ok(Err(e)) => {
                self.stats.jobs_failed += 1;
                warn!(%job_id, %lease, error = %e, "job failed");
                Outcome::Failed(e.to_string())
            }
            Err(e) if e.is_panic() => {
                self.stats.jobs_failed += 1;
                let message = format!("backend panicked: {}", panic_message(e.into_panic()));
                error!(%job_id, %lease, %message, "job failed");
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

/// The next thing a running job has to say, with its index in `running`;
/// never completes without a job. The earliest job is asked first.
pub(super) async fn next_job_event(running: &mut [RunningJob]) -> (usize, JobEvent) {
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

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => s.to_string(),
            Err(_) => "non-string panic payload".into(),
        },
    }
}
