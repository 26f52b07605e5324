//! The subscriber's mirror of the fleet: how a snapshot and the events that
//! follow it become the jobs, workers and model runs a client shows.
//!
//! Written once, here, for every subscriber: the dashboard (wasm), `tunefleet
//! watch` and the Rust client library. Two copies used to disagree on an
//! event numbered like the snapshot; now there is one rule.
//!
//! **Sequence rule.** A snapshot numbered `S` reflects every event up to and
//! including `S`; the next event is `S + 1`. An event numbered `S` or lower
//! is stale and ignored (applying it could roll a job back). An event
//! numbered above `S + 1` is applied, but events were missed: the caller
//! should resubscribe for a fresh snapshot. A snapshot always replaces
//! everything (never merged, so a resync cannot duplicate rows), even with a
//! lower number (a restarted master counts from 0 again).
//!
//! `job_updated` carries a whole job; `job_progress` is a delta applied to the
//! job it names ([`JobProgress::apply_to`], the master's own rule, so the
//! mirror's curve is the master's), and so are `job_changed` and
//! `worker_changed` (subscribed with deltas: a job's change of state without
//! its name and workload, a worker's job and count).

use std::collections::HashMap;

use crate::model::ModelView;
use crate::protocol::{
    FleetEvent, FleetSnapshot, JobChange, JobCounts, JobId, JobProgress, JobView, StorageProblem,
    WorkerView,
};

/// What [`Fleet::apply_event`] made of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// The next event in order; applied.
    Applied,
    /// Already reflected (or no snapshot yet); ignored.
    Stale,
    /// Applied, but events `expected..got` were missed: resubscribe.
    Gap { expected: u64, got: u64 },
}

/// Everything the master told a subscriber about jobs, workers and model runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Ordered like the master's `results`: `created_at`, then name, then id.
    jobs: Vec<JobView>,
    index: HashMap<JobId, usize>,
    /// Live workers, ordered by `connected_at` then session.
    workers: Vec<WorkerView>,
    /// Model runs, oldest first.
    models: Vec<ModelView>,
    /// Jobs the master archived (`--job-retention`), by state: counted, not held.
    archived: JobCounts,
    /// Why the master cannot commit its state, while it cannot.
    storage_problem: Option<StorageProblem>,
    /// `seq` of the last snapshot or event applied; `None` before the first snapshot.
    seq: Option<u64>,
    /// Snapshots applied so far (1 after the first subscribe; more after resyncs).
    pub snapshots: u64,
}

/// The order of jobs in a mirror (and in the master's `results`).
pub fn job_order(a: &JobView, b: &JobView) -> std::cmp::Ordering {
    (a.created_at, &a.name, &a.job_id).cmp(&(b.created_at, &b.name, &b.job_id))
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet::default()
    }

    pub fn jobs(&self) -> &[JobView] {
        &self.jobs
    }

    pub fn workers(&self) -> &[WorkerView] {
        &self.workers
    }

    pub fn models(&self) -> &[ModelView] {
        &self.models
    }

    /// Seq of the last snapshot or event applied.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// True once a snapshot arrived.
    pub fn synced(&self) -> bool {
        self.seq.is_some()
    }

    pub fn job(&self, job_id: &str) -> Option<&JobView> {
        self.index.get(job_id).map(|&i| &self.jobs[i])
    }

    pub fn worker_by_session(&self, session: &str) -> Option<&WorkerView> {
        self.workers.iter().find(|w| w.session == session)
    }

    /// Replaces the whole state with a snapshot.
    pub fn apply_snapshot(&mut self, seq: u64, snapshot: FleetSnapshot) {
        let FleetSnapshot {
            mut jobs,
            mut workers,
            mut models,
            archived,
            storage_problem,
        } = snapshot;
        self.archived = archived;
        self.storage_problem = storage_problem;
        models.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        let mut names = std::collections::HashSet::new();
        models.reverse();
        models.retain(|m| names.insert(m.name.clone()));
        models.reverse();
        self.models = models;
        // The master sends each job once; should it not, the last copy wins
        // rather than showing two rows.
        let mut last = HashMap::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            last.insert(job.job_id.clone(), i);
        }
        let mut i = 0;
        jobs.retain(|job| {
            let keep = last.get(&job.job_id) == Some(&i);
            i += 1;
            keep
        });
        jobs.sort_by(job_order);
        let mut sessions = std::collections::HashSet::new();
        workers.reverse();
        workers.retain(|w| sessions.insert(w.session.clone()));
        workers.sort_by(|a, b| (a.connected_at, &a.session).cmp(&(b.connected_at, &b.session)));
        self.jobs = jobs;
        self.workers = workers;
        self.reindex();
        self.seq = Some(seq);
        self.snapshots += 1;
    }

    /// Applies one event of the stream (see the sequence rule above).
    pub fn apply_event(&mut self, seq: u64, event: FleetEvent) -> EventOutcome {
        let outcome = match self.seq {
            None => return EventOutcome::Stale,
            Some(last) if seq <= last => return EventOutcome::Stale,
            Some(last) if seq == last + 1 => EventOutcome::Applied,
            Some(last) => EventOutcome::Gap {
                expected: last + 1,
                got: seq,
            },
        };
        self.seq = Some(seq);
        match event {
            FleetEvent::JobUpdated { job } => self.upsert_job(*job),
            FleetEvent::JobProgress { progress } => self.apply_progress(&progress),
            FleetEvent::JobChanged { change } => self.apply_change(*change),
            FleetEvent::WorkerJoined { worker } | FleetEvent::WorkerUpdated { worker } => {
                self.upsert_worker(*worker)
            }
            FleetEvent::WorkerChanged { change } => {
                // Like a job's: the worker's `worker_joined` (or the snapshot) came first.
                if let Some(worker) = self
                    .workers
                    .iter_mut()
                    .find(|w| w.session == change.session)
                {
                    change.apply_to(worker);
                }
            }
            FleetEvent::WorkerLeft { session, .. } => self.workers.retain(|w| w.session != session),
            FleetEvent::ModelUpdated { model } => {
                match self.models.iter_mut().find(|m| m.name == model.name) {
                    Some(slot) => *slot = *model,
                    None => self.models.push(*model),
                }
            }
            FleetEvent::StorageChanged { problem } => self.storage_problem = problem,
            FleetEvent::JobsArchived { job_ids, archived } => {
                self.archived = archived;
                if !job_ids.is_empty() {
                    let gone: std::collections::HashSet<JobId> = job_ids.into_iter().collect();
                    self.jobs.retain(|job| !gone.contains(&job.job_id));
                    self.reindex();
                }
            }
        }
        outcome
    }

    /// A delta for a job we do not know cannot be applied; the next snapshot
    /// brings the job (the master sends `job_updated` before any progress).
    fn apply_progress(&mut self, progress: &JobProgress) {
        if let Some(job) = self.job_mut(&progress.job_id) {
            progress.apply_to(job);
        }
    }

    /// As for progress: the master sends `job_updated` for a job before any
    /// `job_changed`, so an unknown job means a missed event (a gap).
    fn apply_change(&mut self, change: JobChange) {
        if let Some(job) = self.job_mut(&change.job_id) {
            change.apply_to(job);
        }
    }

    fn job_mut(&mut self, job_id: &str) -> Option<&mut JobView> {
        let &i = self.index.get(job_id)?;
        self.jobs.get_mut(i)
    }

    fn upsert_job(&mut self, job: JobView) {
        match self.index.get(&job.job_id) {
            Some(&i) if job_order(&self.jobs[i], &job).is_eq() => self.jobs[i] = job,
            Some(&i) => {
                self.jobs[i] = job;
                self.jobs.sort_by(job_order);
                self.reindex();
            }
            None => {
                // New jobs nearly always sort last (they are the newest): then
                // this is a push and one index entry, not a rebuild (which made
                // 10,000 submitted jobs cost 10^8 steps).
                let at = self
                    .jobs
                    .partition_point(|j| job_order(j, &job) == std::cmp::Ordering::Less);
                self.jobs.insert(at, job);
                for (i, j) in self.jobs.iter().enumerate().skip(at) {
                    self.index.insert(j.job_id.clone(), i);
                }
            }
        }
    }

    fn upsert_worker(&mut self, worker: WorkerView) {
        match self
            .workers
            .iter_mut()
            .find(|w| w.session == worker.session)
        {
            Some(slot) => *slot = worker,
            None => {
                let key = (worker.connected_at, worker.session.clone());
                let at = self
                    .workers
                    .partition_point(|w| (w.connected_at, w.session.clone()) < key);
                self.workers.insert(at, worker);
            }
        }
    }

    fn reindex(&mut self) {
        self.index = self
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.job_id.clone(), i))
            .collect();
    }

    /// Jobs per state, the archived ones included (and counted in `archived`).
    pub fn counts(&self) -> JobCounts {
        let mut counts = JobCounts::default();
        for job in &self.jobs {
            counts.count(job.state, 1);
        }
        counts.plus(&self.archived)
    }

    /// The archived jobs' counts alone.
    pub fn archived(&self) -> &JobCounts {
        &self.archived
    }

    /// Why the master's store cannot commit (it answers reads and refuses
    /// changes), while it cannot; `None` when it is healthy.
    pub fn storage_problem(&self) -> Option<&StorageProblem> {
        self.storage_problem.as_ref()
    }

    /// Workers holding a job.
    pub fn workers_busy(&self) -> usize {
        self.workers
            .iter()
            .filter(|w| w.current_job.is_some())
            .count()
    }

    /// Whether there is at least one job and every job is done, failed or cancelled.
    pub fn all_terminal(&self) -> bool {
        (!self.jobs.is_empty() || self.archived.total > 0)
            && self.jobs.iter().all(|j| j.state.is_terminal())
            // A run between two rounds has no job in flight but plans more.
            && self.models.iter().all(|m| m.state.is_terminal())
    }
}

#[cfg(test)]
mod tests;
