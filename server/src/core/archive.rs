//! Retention: trace lines pruned, ended jobs archived out of memory, and
//! archived jobs brought back when asked for.

use std::time::Duration;

use tracing::{debug, info, warn};
use tunefleet_shared::protocol::{FleetEvent, JobId, Millis};
use tunefleet_shared::workload::Workload;

use super::{job_updated_event, Batch, Core, EventText};
use crate::scheduler::Job;
use crate::store::Archived;

impl Core {
    /// `--trace-retention`: drops trace lines older than the window, at most
    /// once a minute. A failure is logged and retried; it never stops the
    /// fleet (the trace is a log, not state).
    pub(super) fn prune_trace(&mut self, now: Millis) {
        let Some(keep) = self.trace_retention_ms else {
            return;
        };
        if now.since(self.trace_pruned_at) < 60_000 {
            return;
        }
        self.trace_pruned_at = now;
        match self.store.prune_trace(now.before(keep)) {
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
    pub(super) fn archive_ended_jobs(&mut self, now: Millis, batch: &mut Batch) {
        let Some(keep) = self.job_retention_ms else {
            return;
        };
        if now.since(self.archive_swept_at) < (keep / 10).clamp(1_000, 60_000) {
            return;
        }
        self.archive_swept_at = now;
        let models = &self.models;
        let gone = self
            .scheduler
            .archive(now.before(keep), &|id| models.holds_job(id));
        if gone.is_empty() {
            return;
        }
        let mut job_ids = Vec::with_capacity(gone.len());
        let mut rows = Vec::with_capacity(gone.len());
        for job in gone {
            self.archived.count_archived(job.state(), 1);
            rows.push((job.id().clone(), job.content_key().to_owned()));
            self.known_jobs.remove(job.id());
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
        batch.events.push(EventText::Same(json));
    }

    /// The archived rows among `ids` that memory does not hold (none, and
    /// no id computed, while nothing is archived). A read that fails is
    /// logged; the command then goes on as if the jobs were new or unknown.
    pub(super) fn read_archived(&mut self, ids: impl Iterator<Item = JobId>) -> Vec<Job> {
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
    pub(super) fn bring_back(&mut self, ids: impl Iterator<Item = JobId>, batch: &mut Batch) {
        let jobs = self.read_archived(ids);
        self.restore(jobs, batch);
    }

    /// The archived tuning-cache entries of these workloads' computations
    /// come back, so that the cache answers as if they had never left.
    pub(super) fn bring_back_entries(&mut self, workloads: &[Workload], batch: &mut Batch) {
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
    pub(super) fn restore(&mut self, jobs: Vec<Job>, batch: &mut Batch) {
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
        batch.events.push(EventText::Same(
            serde_json::to_string(&event).unwrap_or_default(),
        ));
        for id in back {
            if let Some(job) = self.scheduler.job(&id) {
                batch
                    .events
                    .push(EventText::Same(job_updated_event(&job.view)));
                self.known_jobs.insert(id.clone());
            }
            batch.dirty.push(id);
        }
    }

    /// Keep ended jobs in memory for this long (`None`: for ever).
    pub fn set_job_retention(&mut self, keep: Option<Duration>) {
        self.job_retention_ms = keep.map(|d| d.as_millis() as u64);
    }

    /// Keep trace lines for this long (`None`: for ever).
    pub fn set_trace_retention(&mut self, keep: Option<Duration>) {
        self.trace_retention_ms = keep.map(|d| d.as_millis() as u64);
    }
}
