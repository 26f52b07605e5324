//! The tuning cache: earlier results answer or warm-start new jobs.
//!
//! Every job that was tuned to `done` is an entry, keyed by its computation
//! ([`Workload::content_key`]: the workload without name, budget, target and
//! tuner settings) and carrying the *effective* target its result was
//! measured for (the job's target completed by the worker's). No table of its
//! own: the entries are the done jobs' rows, so the cache survives restarts,
//! migrations and a move to another store for free, and is exactly as large
//! as the jobs kept.
//!
//! A new job may use an entry whose effective target *serves* the job's
//! target (the matching rule of `target.rs`: same kind, every attribute the
//! job pins equal). That is the same freedom the dispatcher has: a job for
//! plain `llvm` may run on any llvm worker, so a result measured on any llvm
//! worker answers it; a job that pins `mcpu=znver4` is only answered by a
//! result measured for znver4. An entry that covered at least the job's
//! budget answers it at once (a cache hit); the best smaller one warm-starts
//! it, and only the rest of the budget is tuned.

use std::collections::HashMap;

use tunefleet_shared::model::WarmStart;
use tunefleet_shared::protocol::{JobId, JobState};
use tunefleet_shared::workload::Workload;

use super::Job;

/// What the cache says about a new workload.
#[derive(Debug, PartialEq)]
pub(super) enum CacheAnswer {
    Miss,
    /// This done job covered the whole budget.
    Hit(JobId),
    /// This done job covered part of it; start from its records.
    Warm {
        from: JobId,
        trials: u32,
        start: Box<WarmStart>,
    },
}

#[derive(Debug, Default)]
pub(super) struct TuningCache {
    /// Content key → done jobs that were tuned (not answered from the cache).
    entries: HashMap<String, Vec<JobId>>,
}

impl TuningCache {
    /// Adds a job if it is an entry: done, tuned by a worker (not itself a
    /// cache answer), for a known effective target, with measured records.
    pub(super) fn add(&mut self, job: &Job) {
        if !is_entry(job) {
            return;
        }
        let ids = self
            .entries
            .entry(job.content_key().to_owned())
            .or_default();
        if !ids.contains(job.id()) {
            ids.push(job.id().clone());
        }
    }

    /// Drops a job that leaves memory (archived): its row still answers, once
    /// the core brings it back for a submission of the same computation.
    pub(super) fn remove(&mut self, job: &Job) {
        if !is_entry(job) {
            return;
        }
        let key = job.content_key();
        if let Some(ids) = self.entries.get_mut(key) {
            ids.retain(|id| id != job.id());
            if ids.is_empty() {
                self.entries.remove(key);
            }
        }
    }

    /// Entries kept, over every computation (for tests and checks).
    pub(super) fn len(&self) -> usize {
        self.entries.values().map(Vec::len).sum()
    }

    pub(super) fn lookup(
        &self,
        workload: &Workload,
        content_key: &str,
        jobs: &HashMap<JobId, Box<Job>>,
    ) -> CacheAnswer {
        let Some(ids) = self.entries.get(content_key) else {
            return CacheAnswer::Miss;
        };
        let usable = ids
            .iter()
            .filter_map(|id| jobs.get(id).map(|job| &**job))
            .filter(|job| {
                is_entry(job)
                    && job
                        .view
                        .result
                        .as_ref()
                        .and_then(|r| r.target.as_ref())
                        .is_some_and(|effective| effective.serves(&workload.target))
            });
        let covered = |job: &Job| job.view.trials_total.max(job.view.trials_done);
        let latency = |job: &Job| job.view.best_latency_s.unwrap_or(f64::INFINITY);
        let (full, partial): (Vec<&Job>, Vec<&Job>) =
            usable.partition(|job| covered(job) >= workload.trials);
        if let Some(best) = full
            .into_iter()
            .min_by(|a, b| latency(a).total_cmp(&latency(b)))
        {
            return CacheAnswer::Hit(best.id().clone());
        }
        // The most trials first, then the fastest: the most search to skip.
        let best = partial.into_iter().max_by(|a, b| {
            covered(a)
                .cmp(&covered(b))
                .then(latency(b).total_cmp(&latency(a)))
        });
        match best.and_then(|job| Some((job, warm_start_of(job)?))) {
            Some((job, start)) => CacheAnswer::Warm {
                from: job.id().clone(),
                trials: covered(job),
                start: Box::new(start),
            },
            None => CacheAnswer::Miss,
        }
    }
}

fn is_entry(job: &Job) -> bool {
    job.view.state == JobState::Done
        && !job.view.cache_hit
        && job.extras.nbest.is_none()
        && job.view.result.as_ref().is_some_and(|r| r.target.is_some())
        && job.view.records.iter().any(|r| !r.record.is_null())
}

/// MetaSchedule can be seeded only with database records of the same
/// workload line; a backend that keeps no such line (the simulator) gives
/// nothing to start from, and the job is tuned in full.
fn warm_start_of(job: &Job) -> Option<WarmStart> {
    let line = job
        .view
        .result
        .as_ref()?
        .extra
        .get("workload")
        .filter(|w| w.as_array().is_some_and(|a| a.len() == 2))?
        .clone();
    let records: Vec<_> = job
        .view
        .records
        .iter()
        .map(|r| r.record.clone())
        .filter(|r| r.as_array().is_some_and(|a| a.len() == 4))
        .collect();
    (!records.is_empty()).then_some(WarmStart {
        workload: line,
        records,
    })
}
