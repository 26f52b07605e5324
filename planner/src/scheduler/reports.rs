//! What a job's holder reports: progress, a result, a failure.

use tunefleet_shared::protocol::{
    record_progress_point, JobResult, JobState, Lease, Millis, ResultMeta, TuningRecord,
};
use tunefleet_shared::workload::Op;

use super::{Output, ProgressReport, Rejection, Scheduler, SessionId};

impl Scheduler {
    pub fn progress(
        &mut self,
        session: SessionId,
        report: &ProgressReport,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        let ProgressReport {
            ref job_id,
            lease,
            trials_done,
            trials_total,
            best_latency_s,
        } = *report;
        let job = self.held_job_mut(session, job_id, lease)?;
        // A warm-started job's worker counts only the rest of the budget.
        let prior = job.extras.prior_trials;
        let (trials_done, trials_total) = (
            trials_done.saturating_add(prior),
            trials_total.saturating_add(prior),
        );
        let was_running = job.view.state == JobState::Running;
        let view = job.view_mut();
        view.state = JobState::Running;
        view.trials_done = trials_done.min(trials_total.max(view.trials_total));
        if trials_total > 0 {
            view.trials_total = trials_total;
        }
        if let Some(best) = best_latency_s.filter(|b| b.is_finite() && *b > 0.0) {
            let best = view.best_latency_s.map_or(best, |b| b.min(best));
            view.best_latency_s = Some(best);
            record_progress_point(&mut view.history, view.trials_done, best);
        }
        view.updated_at = now;
        job.last_progress_at = now;
        out.push(if was_running {
            Output::JobProgressed(job_id.clone())
        } else {
            Output::JobChanged(job_id.clone())
        });
        Ok(())
    }

    /// A finished tuning result. Accepted when it comes from the current lease
    /// holder, or (re-sent after a reconnect) when the job is still open and the
    /// lease was issued to the same worker process. A job is done exactly once.
    pub fn result(
        &mut self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
        result: JobResult,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        self.check_owner(session, job_id, lease)?;
        let Some(job) = self.jobs.get(job_id) else {
            return Err(Rejection::UnknownJob(job_id.to_string()));
        };
        let nbest = job.extras.nbest.map_or(self.config.nbest, |n| n as usize);
        let measures_kernel = !matches!(job.view.workload.op, Op::Model { .. });
        let records = match validate_result(&result, nbest, measures_kernel) {
            Ok(records) => records,
            Err(e) => {
                if self.is_current(session, job_id, lease) {
                    self.release_lease(session, job_id, lease, out);
                    self.end_attempt(job_id, format!("invalid result: {e}"), now, out);
                    self.dispatch(now, out);
                }
                return Err(Rejection::InvalidResult(e));
            }
        };
        let worker_name = self
            .sessions
            .get(&session)
            .map(|s| s.view.name.clone())
            .unwrap_or_default();
        self.release_lease(session, job_id, lease, out);
        if let Some(s) = self.sessions.get_mut(&session) {
            s.view.jobs_done += 1;
            out.push(Output::WorkerChanged(session));
        }
        let Some(job) = self.jobs.get_mut(job_id) else {
            return Err(Rejection::UnknownJob(job_id.to_string()));
        };
        self.open.changed(job, job.view.state, JobState::Done);
        job.view_mut().state = JobState::Done;
        job.view_mut().worker = Some(worker_name.clone());
        let prior = job.extras.prior_trials;
        // The worker's own measurement of the best kernel, not the tuner's
        // estimate; after a warm start the earlier best still counts.
        let measured = Some(result.best_latency_s).filter(|l| *l > 0.0);
        job.view_mut().best_latency_s = match (measured, job.view.best_latency_s) {
            (Some(new), Some(old)) if prior > 0 => Some(new.min(old)),
            (new, _) => new,
        };
        job.view_mut().records = if prior > 0 {
            merge_records(std::mem::take(&mut job.view_mut().records), records, nbest)
        } else {
            records
        };
        job.view_mut().trials_done = result
            .trials
            .saturating_add(prior)
            .max(job.view.trials_done);
        job.view_mut().result = Some(ResultMeta {
            trials: result.trials,
            wall_time_s: result.wall_time_s,
            worker: worker_name,
            backend: result.backend,
            tvm_version: result.tvm_version,
            gflops: result.gflops,
            extra: result.extra,
            target: result.target,
        });
        let view = job.view_mut();
        view.finished_at = Some(now);
        view.updated_at = now;
        self.cache.add(&self.jobs[job_id]);
        self.imports.learn(&self.jobs[job_id]);
        out.push(Output::JobChanged(job_id.to_string()));
        self.dispatch(now, out);
        Ok(())
    }

    /// The worker could not tune the job. Same ownership rule as results.
    pub fn job_failed(
        &mut self,
        session: SessionId,
        job_id: &str,
        lease: Lease,
        error: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Result<(), Rejection> {
        self.check_owner(session, job_id, lease)?;
        if !self.is_current(session, job_id, lease) {
            // That attempt already ended (and was recorded) when the worker was
            // lost; a late failure must not end whatever runs the job now.
            return Err(Rejection::Superseded {
                job: job_id.to_string(),
                lease,
            });
        }
        let name = self
            .sessions
            .get(&session)
            .map(|s| s.view.name.clone())
            .unwrap_or_default();
        self.release_lease(session, job_id, lease, out);
        self.end_attempt(job_id, format!("worker {name} reported: {error}"), now, out);
        self.dispatch(now, out);
        Ok(())
    }
}

/// A warm-started job's records: the earlier ones and the new, best first,
/// each once.
pub(super) fn merge_records(
    earlier: Vec<TuningRecord>,
    new: Vec<TuningRecord>,
    nbest: usize,
) -> Vec<TuningRecord> {
    let mut all = new;
    for record in earlier {
        if !all.iter().any(|r| r.record == record.record) {
            all.push(record);
        }
    }
    all.sort_by(|a, b| a.latency_s.total_cmp(&b.latency_s));
    all.truncate(nbest.max(1));
    all
}

/// Checks a result's numbers and returns its best `nbest` records, best first.
/// A model stage (task extraction) measures no kernel: its latency may be 0.
pub(super) fn validate_result(
    result: &JobResult,
    nbest: usize,
    measures_kernel: bool,
) -> Result<Vec<TuningRecord>, String> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if !measures_kernel {
        if !(result.best_latency_s.is_finite() && result.best_latency_s >= 0.0) {
            return Err(format!(
                "best_latency_s must be a number >= 0, got {}",
                result.best_latency_s
            ));
        }
        return Ok(Vec::new());
    }
    if !ok(result.best_latency_s) {
        return Err(format!(
            "best_latency_s must be a positive number, got {}",
            result.best_latency_s
        ));
    }
    if let Some(bad) = result.records.iter().find(|r| !ok(r.latency_s)) {
        return Err(format!(
            "record latency must be a positive number, got {}",
            bad.latency_s
        ));
    }
    let mut records = result.records.clone();
    records.sort_by(|a, b| a.latency_s.total_cmp(&b.latency_s));
    records.truncate(nbest);
    if records.is_empty() {
        records.push(TuningRecord {
            latency_s: result.best_latency_s,
            record: serde_json::Value::Null,
        });
    }
    Ok(records)
}
