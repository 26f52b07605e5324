//! Workers: joining, leaving, asking for work, and dispatch (which idle
//! worker gets which queued job).

use std::collections::BTreeSet;

use tunefleet_shared::protocol::{JobState, MasterMessage, Millis, WorkerHello, WorkerView};

use super::{
    session_label, IdleGroup, JoinRefusal, LeaseRecord, LeaveKind, Output, Scheduler, Session,
    SessionId, LEASE_HISTORY,
};

impl Scheduler {
    /// A worker registered. Refused when open jobs of its target's kind
    /// exist and none can run on it (a silent mismatch, an `mcpu` or an
    /// `arch` the jobs do not want, would leave it idle forever). A worker
    /// of a kind no open job has is not a mismatch: in a fleet of CPU and
    /// GPU workers it waits for jobs of its kind.
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
        let kind = hello.target.kind();
        let same_kind = || self.open.0.values().any(|(t, _)| t.kind() == kind);
        if matching == 0 && same_kind() {
            // Keys are canonical texts, sorted: the first five of its kind.
            let wanted: Vec<&str> = self
                .open
                .0
                .iter()
                .filter(|(_, (t, _))| t.kind() == kind)
                .take(5)
                .map(|(key, _)| key.as_str())
                .collect();
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
            device: hello.device.clone(),
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

    /// Marks a session idle: it is in its target's idle group until it
    /// is given a job.
    pub(super) fn set_idle(&mut self, session: SessionId) {
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

    pub(super) fn set_busy(&mut self, session: SessionId) {
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
    pub(super) fn dispatch(&mut self, now: Millis, out: &mut Vec<Output>) {
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

    pub(super) fn assign(
        &mut self,
        session: SessionId,
        job_id: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        self.dequeue(job_id);
        let default_nbest = self.config.nbest as u32;
        let (Some(s), Some(job)) = (self.sessions.get_mut(&session), self.jobs.get_mut(job_id))
        else {
            return;
        };
        job.lease = job.lease.next();
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
                model_round: job.extras.model_round,
                // The core adds the fleet's cost model to a round's assign
                // (`core::cost_models`): it is the fleet's, not the job's.
                cost_model: None,
            },
        });
        out.push(Output::JobChanged(job_id.to_string()));
        out.push(Output::WorkerChanged(session));
        self.set_busy(session);
    }
}
