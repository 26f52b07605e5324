//! Leases and the queue: timeouts, cancel and retry, the end of an
//! attempt, and the queue's order.

use std::collections::BTreeMap;

use tunefleet_shared::protocol::{
    JobAction, JobError, JobId, JobState, Lease, MasterMessage, Millis, MAX_JOB_ACTIONS,
};

use super::{CommandError, Job, Output, Rejection, Scheduler, SessionId};

impl Scheduler {
    /// Time passes: recycle jobs whose worker went quiet for `job_timeout`.
    pub fn tick(&mut self, now: Millis, out: &mut Vec<Output>) {
        let Some(timeout) = self.config.job_timeout_ms else {
            return;
        };
        let stale: Vec<(JobId, SessionId, Lease)> = self
            .jobs
            .values()
            .filter(|j| j.state().is_in_flight() && now.since(j.last_progress_at) > timeout)
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
            self.open.changed(job, job.view.state, JobState::Cancelled);
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
        self.open.changed(job, state, JobState::Queued);
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

    pub(super) fn held_job_mut(
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

    pub(super) fn is_current(&self, session: SessionId, job_id: &str, lease: Lease) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|j| j.holder == Some(session) && j.lease == lease)
    }

    /// The ownership rule for results and failures (see [`Scheduler::result`]).
    pub(super) fn check_owner(
        &self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
    ) -> Result<(), Rejection> {
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
    pub(super) fn release_lease(
        &mut self,
        by: SessionId,
        job_id: &str,
        lease: Lease,
        out: &mut Vec<Output>,
    ) {
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
    pub(super) fn end_attempt(
        &mut self,
        job_id: &str,
        message: String,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
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
            self.open.changed(job, job.view.state, JobState::Failed);
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

    pub(super) fn take_front_key(&mut self) -> i64 {
        let key = self.next_front;
        self.next_front -= 1;
        key
    }

    pub(super) fn enqueue(&mut self, job_id: &str, key: i64) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        job.queue_key = key;
        let queue = match self.queues.get_mut(job.target_key()) {
            Some((_, queue)) => queue,
            None => {
                let entry = (job.target().clone(), BTreeMap::new());
                &mut self
                    .queues
                    .entry(job.target_key().to_string())
                    .or_insert(entry)
                    .1
            }
        };
        queue.insert(key, job_id.to_string());
    }

    pub(super) fn dequeue(&mut self, job_id: &str) {
        let Some(job) = self.jobs.get(job_id) else {
            return;
        };
        if let Some((_, q)) = self.queues.get_mut(job.target_key()) {
            if q.get(&job.queue_key).map(String::as_str) == Some(job_id) {
                q.remove(&job.queue_key);
            }
        }
    }
}
