//! New jobs: submitted workloads (answered from the tuning cache, or
//! warm-started from it and from imported records) and imports.

use std::sync::Arc;

use tunefleet_shared::model::WarmStart;
use tunefleet_shared::protocol::{JobId, JobState, JobView, Lease, Millis};
use tunefleet_shared::workload::Workload;

use super::cache::CacheAnswer;
use super::{CachePolicy, Job, JobExtras, Memo, MetaRow, Output, Scheduler, MAX_SEEDS_PER_JOB};

impl Scheduler {
    /// New workloads. Returns (new job ids, duplicate job ids) in input order.
    pub fn submit(
        &mut self,
        workloads: Vec<Workload>,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        self.submit_as(workloads, CachePolicy::Use, now, out)
    }

    /// [`Scheduler::submit`], choosing whether the tuning cache may answer.
    /// A new job answered from it is created `done` (`cache_hit`); one it can
    /// only warm-start is queued with the earlier records and the rest of
    /// its budget (see `cache.rs`).
    pub fn submit_as(
        &mut self,
        workloads: Vec<Workload>,
        policy: CachePolicy,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        let with_extras = workloads
            .into_iter()
            .map(|w| (w, JobExtras::default()))
            .collect();
        self.submit_inner(with_extras, policy, now, out)
    }

    /// [`Scheduler::submit`] with per-job extras (a model run's rounds, which
    /// bring their own warm starts: the cache stays out). A duplicate keeps
    /// the extras it was first submitted with.
    pub fn submit_with(
        &mut self,
        workloads: Vec<(Workload, JobExtras)>,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        self.submit_inner(workloads, CachePolicy::Bypass, now, out)
    }

    pub(super) fn submit_inner(
        &mut self,
        workloads: Vec<(Workload, JobExtras)>,
        policy: CachePolicy,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> (Vec<JobId>, Vec<JobId>) {
        let (mut created, mut duplicates) = (Vec::new(), Vec::new());
        for (workload, extras) in workloads {
            match self.submit_one(workload, extras, policy, now, out) {
                Submitted::New(id) => created.push(id),
                Submitted::Duplicate(id) => duplicates.push(id),
            }
        }
        self.dispatch(now, out);
        (created, duplicates)
    }

    /// One workload: a job of the same id is a duplicate; otherwise a new
    /// job, answered or warm-started by the cache where `policy` lets it,
    /// seeded from imports and queued unless the cache answered it.
    fn submit_one(
        &mut self,
        workload: Workload,
        mut extras: JobExtras,
        policy: CachePolicy,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> Submitted {
        let (id, content_key) = match policy {
            CachePolicy::Use => {
                let (id, content_key) = workload.job_id_and_content_key();
                (id, Some(content_key))
            }
            CachePolicy::Bypass => (workload.job_id(), None),
        };
        if self.jobs.contains_key(&id) {
            return Submitted::Duplicate(id);
        }
        let (answer, content_key) = match content_key {
            Some(content_key) => {
                let answer = self.cache.lookup(&workload, &content_key, &self.jobs);
                (answer, Memo::known(content_key))
            }
            None => (CacheAnswer::Miss, Memo::default()),
        };
        let key = self.next_back;
        self.next_back += 1;
        let mut view = queued_view(id.clone(), workload, now);
        self.apply_answer(answer, &mut view, &mut extras, now);
        let answered = view.cache_hit;
        let target_key = view.workload.target.canonical_json();
        if !answered {
            self.seed(&view.workload, content_key.get(), &mut extras);
            self.open.opened(&target_key, &view.workload.target);
        }
        self.jobs.insert(
            id.clone(),
            Box::new(Job {
                view: Arc::new(view),
                lease: Lease::default(),
                holder: None,
                lease_history: Vec::new(),
                last_progress_at: now,
                queue_key: key,
                extras,
                content_key,
                target_key: Memo::known(target_key),
            }),
        );
        if !answered {
            self.enqueue(&id, key);
        }
        out.push(Output::JobChanged(id.clone()));
        Submitted::New(id)
    }

    /// What the cache said, applied to a new job: a hit makes it `done`
    /// with the earlier job's result; a warm start brings the earlier
    /// records and counts their trials as done.
    fn apply_answer(
        &self,
        answer: CacheAnswer,
        view: &mut JobView,
        extras: &mut JobExtras,
        now: Millis,
    ) {
        match answer {
            CacheAnswer::Miss => {}
            CacheAnswer::Hit(from) => {
                if let Some(source) = self.jobs.get(&from) {
                    answer_from(view, source, now);
                }
            }
            CacheAnswer::Warm {
                from,
                trials,
                start,
            } => {
                if let Some(source) = self.jobs.get(&from) {
                    view.records = source.view.records.clone();
                    view.best_latency_s = source.view.best_latency_s;
                }
                view.trials_done = trials;
                view.cached_from = Some(from);
                extras.prior_trials = trials;
                extras.warm_start = Some(start);
            }
        }
    }

    /// Adds imported records to a new job's warm start when its workload
    /// line is known (see `imports.rs`). `--fresh` (a bypassed cache without
    /// a line of its own) is not seeded: `content_key` is the key the cache
    /// lookup computed, `None` when the cache was bypassed.
    pub(super) fn seed(
        &self,
        workload: &Workload,
        content_key: Option<&String>,
        extras: &mut JobExtras,
    ) {
        // Most farms import nothing: then no submission pays for the
        // lookups and the clones below.
        if !self.imports.has_records() {
            return;
        }
        let line = extras
            .workload_line
            .clone()
            .or_else(|| extras.warm_start.as_ref().map(|w| w.workload.clone()))
            .or_else(|| self.imports.line_for(content_key?).cloned());
        let Some(line) = line else { return };
        let mut seeds = self.imports.seeds_for(&line, &workload.target);
        // The fastest few are what the search starts from; more would only
        // grow the job's row and its assignment.
        seeds.truncate(MAX_SEEDS_PER_JOB);
        if seeds.is_empty() {
            return;
        }
        let start = extras.warm_start.get_or_insert_with(|| {
            Box::new(WarmStart {
                workload: line,
                records: Vec::new(),
            })
        });
        let mut added: u32 = 0;
        for record in seeds {
            if !start.records.contains(&record) {
                start.records.push(record);
                added += 1;
            }
        }
        extras.seeded = added;
    }

    /// Stores an import (`tunefleet import`); returns what it added and the
    /// `meta` rows to commit with it.
    pub fn import(
        &mut self,
        workloads: Vec<tunefleet_shared::import::ImportedWorkload>,
        keys: Vec<tunefleet_shared::import::WorkloadKey>,
    ) -> Result<(tunefleet_shared::import::ImportReport, Vec<MetaRow>), String> {
        self.imports.import(workloads, keys)
    }

    /// Loads the `meta` rows of earlier imports (prefixes [`IMPORT_PREFIX`](super::IMPORT_PREFIX)
    /// and [`KEY_PREFIX`](super::KEY_PREFIX)). Returns the rows it skipped,
    /// unreadable, as (key, reason).
    #[must_use = "skipped rows are to be logged"]
    pub fn restore_imports(&mut self, rows: Vec<(String, String)>) -> Vec<(String, String)> {
        self.imports.restore(rows)
    }
}

/// What [`Scheduler::submit_one`] did with a workload.
enum Submitted {
    New(JobId),
    Duplicate(JobId),
}

/// A new job's view: queued, nothing tried yet.
fn queued_view(job_id: JobId, workload: Workload, now: Millis) -> JobView {
    JobView {
        job_id,
        name: workload.name.clone(),
        trials_total: workload.trials,
        workload,
        state: JobState::Queued,
        attempts: 0,
        worker: None,
        trials_done: 0,
        best_latency_s: None,
        records: Vec::new(),
        history: Vec::new(),
        errors: Vec::new(),
        result: None,
        created_at: now,
        updated_at: now,
        started_at: None,
        finished_at: None,
        cache_hit: false,
        cached_from: None,
        actions: Vec::new(),
    }
}

/// Fills a new job's view with the answer an earlier one gives (a cache hit).
pub(super) fn answer_from(view: &mut JobView, source: &Job, now: Millis) {
    let from = &source.view;
    view.state = JobState::Done;
    view.cache_hit = true;
    view.cached_from = Some(from.job_id.clone());
    view.worker = from.worker.clone();
    view.trials_done = from.trials_done;
    view.best_latency_s = from.best_latency_s;
    view.records = from.records.clone();
    view.history = from.history.clone();
    view.result = from.result.clone();
    view.finished_at = Some(now);
}
