//! Model runs: the plan that turns one ONNX model into fleet jobs.
//!
//! Like the scheduler, this is a plain state machine with no I/O and no
//! clock: the core tells it that a run was submitted, that a job it planned
//! ended, or that workers came and went, and it answers with the jobs to
//! submit next and the runs that changed. The jobs themselves go through the
//! scheduler like any other, so recycling, leases and "done exactly once"
//! need no second implementation here.
//!
//! A run moves `extracting → tuning → compiling → done | failed`:
//! - the extract job's result lists the tasks (function, weight, TVMScript,
//!   FLOPs, trivial) and the effective target, which every later job pins so
//!   that all of a run's records come from one kind of CPU;
//! - each round is a `tvmscript` job of `trials_per_round` trials (fewer when
//!   the budget runs short, and a task's first round fewer on a fleet whose
//!   cost model knows the target: [`WARM_FLEET_MIN_SAMPLES`]) carrying a
//!   warm start from all the task's records
//!   so far; [`allocation::next_task`] picks which task gets a round, and
//!   when workers are idle while every task is busy, [`allocation::extra_round`]
//!   gives a task another round at once (each round's search is seeded by
//!   its job, so two from the same records differ);
//! - when the budget is spent (or on `stop`) and no round is in flight, one
//!   compile job applies the best records, verifies against onnxruntime and
//!   times the three variants.

pub mod allocation;
mod rules;
mod stages;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use tunefleet_shared::model::{
    check_model_name, EstimatePoint, ExtractedModel, ModeView, ModelLatencies, ModelSource,
    ModelStage, ModelState, ModelSubmission, ModelTaskView, ModelView, TunerSettings,
    DEFAULT_MODEL_TRIALS, DEFAULT_TRIALS_PER_ROUND,
};
use tunefleet_shared::protocol::{JobId, JobView, Millis, TuningRecord};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{Op, Workload, MAX_TRIALS};

use crate::scheduler::JobExtras;
pub use stages::sort_best_first;
use stages::{
    compile_ended, compile_job, extract_ended, fail, parse_tasks, round_ended, round_job,
};

/// What the planner is told of the fleet, per target, each time it plans
/// (the core answers; the planner keeps no copy of the fleet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetFor {
    /// Connected workers that serve the target: how many rounds run at once.
    pub slots: usize,
    /// Samples the fleet's cost model for the target holds (0: none yet).
    pub cost_model_samples: u32,
}

impl FleetFor {
    /// `slots` workers and no cost model.
    pub fn workers(slots: usize) -> FleetFor {
        FleetFor {
            slots,
            cost_model_samples: 0,
        }
    }
}

/// A fleet whose cost model for the target has learned from at least this
/// many measured schedules warms a new run up in rounds of
/// [`WARM_FLEET_WARM_UP_TRIALS`]. Why: a run's estimate falls only once
/// every task has had a round, so the warm-up (a round per task) sets how
/// soon it is near its end; a cold model picks a round's candidates almost
/// at random and needs the trials, a trained one picks them well
/// (docs/benchmarks.md, "A warm fleet warms a run up in short rounds":
/// with a model trained on another network's ~480 samples, SqueezeNet's
/// 4-trial warm-up ended at 1.1× its final estimate, a cold one's at 2-2.6×;
/// "The short warm-up on ResNet-50": within 10% in 116-164 trials against
/// 384-400).
/// 256 is sixteen 16-trial rounds: a model that has seen a network's worth
/// of operators, not one round's.
pub const WARM_FLEET_MIN_SAMPLES: u32 = 256;

/// Trials of a warm-up round on such a fleet (fewer when the run's rounds
/// are smaller): every later round is the run's own size.
pub const WARM_FLEET_WARM_UP_TRIALS: u32 = 4;

/// One round of a task (its job and trials). Not serialisable: the store
/// writes its own row (`store::model_row`), the wire a `ModelView`.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    pub job_id: JobId,
    pub trials_planned: u32,
    /// Trials measured, once the round's job has ended.
    pub trials_done: Option<u32>,
    /// The round's job ended with a valid result.
    pub ok: bool,
}

impl Round {
    fn in_flight(&self) -> bool {
        self.trials_done.is_none()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub name: String,
    pub weight: u32,
    pub tvmscript: String,
    pub flops: Option<f64>,
    /// Share of the untuned model's time (timed once at extraction).
    pub untuned_share: Option<f64>,
    /// Its functions' time in that run: what it costs before it is tuned.
    pub untuned_time_s: Option<f64>,
    pub trivial: bool,
    pub dead: bool,
    pub rounds: Vec<Round>,
    /// Best latency after each finished round with a valid result.
    pub history: Vec<f64>,
    /// MetaSchedule's workload line for this task, from its first result.
    pub workload_line: Option<Value>,
    /// Every kept record, best first.
    pub records: Vec<KeptRecord>,
}

/// A record a task keeps, named by where it came from: the round job that
/// measured it and its place in that job's result. The name is how the
/// store writes each record once, in a row of its own, however often the
/// run's row changes (a run keeps up to 512 records per task, tens of KiB
/// each with a layout rewrite in the trace).
#[derive(Clone, Debug, PartialEq)]
pub struct KeptRecord {
    pub key: String,
    pub record: TuningRecord,
}

impl KeptRecord {
    /// The `index`th record of round job `job`'s result.
    pub fn of_round(job: &str, index: usize, record: TuningRecord) -> KeptRecord {
        KeptRecord {
            key: format!("{job}/{index}"),
            record,
        }
    }
}

impl Task {
    fn best(&self) -> Option<f64> {
        self.history.last().copied()
    }
    fn trials(&self) -> u32 {
        self.rounds.iter().filter_map(|r| r.trials_done).sum()
    }
    fn busy(&self) -> bool {
        self.rounds.iter().any(Round::in_flight)
    }
    fn in_flight(&self) -> usize {
        self.rounds.iter().filter(|r| r.in_flight()).count()
    }
    fn live(&self) -> bool {
        !self.trivial && !self.dead
    }
    /// What the task costs in the model as it stands: weight × its best,
    /// its untuned time before it has one, and never more than that (so a
    /// run's estimate only falls). None when neither is known.
    fn cost_s(&self) -> Option<f64> {
        let tuned = self.best().map(|b| f64::from(self.weight) * b);
        match (tuned, self.untuned_time_s) {
            (Some(t), Some(u)) => Some(t.min(u)),
            (tuned, untuned) => tuned.or(untuned),
        }
    }
    /// The kept records MetaSchedule's database can hold (`[workload,
    /// trace, run_secs, args]`), best first: what warm starts, the compile
    /// job and the exported database are made of.
    fn database_records(&self) -> impl Iterator<Item = &Value> {
        self.records
            .iter()
            .map(|r| &r.record.record)
            .filter(|r| r.as_array().is_some_and(|a| a.len() == 4))
    }
}

/// One model run, as the planner keeps it (stored as `store::model_row`'s
/// row, shown as a `ModelView`).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRun {
    pub name: String,
    pub source: ModelSource,
    pub requested_target: Target,
    /// Completed by the extracting worker; every later job pins it.
    pub target: Option<Target>,
    pub trials_total: u32,
    pub trials_per_round: u32,
    pub tuner: TunerSettings,
    pub state: ModelState,
    pub stop_requested: bool,
    pub extract_job: JobId,
    pub compile_job: Option<JobId>,
    pub tasks: Vec<Task>,
    pub io: Value,
    pub latency: ModelLatencies,
    pub verified: bool,
    pub verification: Value,
    pub records_applied: Option<u32>,
    pub functions_tuned: Option<u32>,
    pub error: Option<String>,
    pub curve: Vec<EstimatePoint>,
    /// Why the run is tuned in another layout than it asked for (an
    /// `auto_layout` run its extraction could not convert).
    pub layout_note: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub finished_at: Option<Millis>,
}

impl ModelRun {
    /// A run whose tasks its client extracted (a Relax module, see
    /// `ModelSubmission::extracted`): no model file, so no extract and no
    /// compile job. Stored as is: the empty source marks it across restarts.
    pub fn client_extracted(&self) -> bool {
        self.source.onnx_b64.is_empty()
    }

    /// Trials measured plus trials planned for rounds still in flight.
    fn trials_committed(&self) -> u32 {
        self.tasks
            .iter()
            .flat_map(|t| &t.rounds)
            .map(|r| r.trials_done.unwrap_or(r.trials_planned))
            .sum()
    }

    fn trials_done(&self) -> u32 {
        self.tasks.iter().map(Task::trials).sum()
    }

    /// Rounds queued or running: each holds a worker.
    fn rounds_in_flight(&self) -> usize {
        self.tasks.iter().map(Task::in_flight).sum()
    }

    /// The whole model's latency as it stands: Σ of every task's
    /// [`Task::cost_s`], once each task has one (its untuned time, timed at
    /// extraction, or a best); it only falls as rounds end. A run whose
    /// extraction timed nothing (older workers) sums the tasks with a best.
    fn estimated_latency_s(&self) -> Option<f64> {
        if let Some(whole) = self.tasks.iter().map(Task::cost_s).sum::<Option<f64>>() {
            return (!self.tasks.is_empty()).then_some(whole);
        }
        let tuned: Vec<f64> = self
            .tasks
            .iter()
            .filter_map(|t| t.best().map(|b| f64::from(t.weight) * b))
            .collect();
        (!tuned.is_empty()).then(|| tuned.iter().sum())
    }

    /// Whether the estimate covers the whole model (every task has a cost).
    fn whole_estimate(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.iter().all(|t| t.cost_s().is_some())
    }

    pub fn view(&self) -> ModelView {
        let estimate = self.estimated_latency_s();
        ModelView {
            name: self.name.clone(),
            state: self.state,
            target: self
                .target
                .clone()
                .unwrap_or_else(|| self.requested_target.clone()),
            trials_total: self.trials_total,
            trials_done: self.trials_done(),
            trials_per_round: self.trials_per_round,
            tasks: self
                .tasks
                .iter()
                .map(|t| ModelTaskView {
                    job_id: t.rounds.first().map(|r| r.job_id.clone()),
                    name: t.name.clone(),
                    weight: t.weight,
                    trials: t.trials(),
                    best_latency_s: t.best(),
                    share: match (t.cost_s(), estimate) {
                        (Some(cost), Some(total)) if total > 0.0 => Some(cost / total),
                        _ => None,
                    },
                    flops: t.flops,
                    untuned_share: t.untuned_share,
                    trivial: t.trivial,
                    dead: t.dead,
                    rounds: t.rounds.iter().map(|r| r.job_id.clone()).collect(),
                    best_tiling: t
                        .records
                        .first()
                        .and_then(|best| rules::tiling_structure(&best.record.record))
                        .map(str::to_owned),
                })
                .collect(),
            estimated_latency_s: estimate,
            verified: self.verified,
            latency_s: self.latency,
            records_applied: self.records_applied,
            functions_tuned: self.functions_tuned,
            error: self.error.clone(),
            curve: self.curve.clone(),
            extract_job: self.extract_job.clone(),
            compile_job: self.compile_job.clone(),
            stop_requested: self.stop_requested,
            io: self.io.clone(),
            tuner: self.tuner.clone(),
            verification: self.verification.clone(),
            prepack: self.source.prepack,
            layout: self.source.layout,
            mode: ModeView {
                layout: self.source.layout,
                prepack: self.source.prepack,
                recipe: self.source.recipe(),
                auto: self.source.auto_layout,
                note: self.layout_note.clone(),
            },
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        }
    }

    /// MetaSchedule database files holding every kept record of every task.
    pub fn database(&self) -> Option<(String, String)> {
        let (mut workloads, mut records) = (String::new(), String::new());
        let mut index = 0usize;
        for task in &self.tasks {
            let Some(line) = &task.workload_line else {
                continue;
            };
            let valid: Vec<&Value> = task.database_records().collect();
            if valid.is_empty() {
                continue;
            }
            workloads.push_str(&line.to_string());
            workloads.push('\n');
            for record in valid {
                records.push_str(&serde_json::json!([index, record]).to_string());
                records.push('\n');
            }
            index += 1;
        }
        (index > 0).then_some((workloads, records))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("{0}")]
    BadName(String),
    #[error("a model run named `{0}` already exists; pick another --name")]
    Exists(String),
    #[error("no model run named `{0}`")]
    Unknown(String),
    #[error("model run `{name}` is already {state}")]
    Finished { name: String, state: ModelState },
    #[error("{0}")]
    BadSettings(String),
}

/// What the core must do after a planner call.
#[derive(Debug, Default)]
pub struct Plan {
    pub jobs: Vec<(Workload, JobExtras)>,
    /// Runs whose view changed (persist, then publish).
    pub changed: Vec<String>,
}

impl Plan {
    fn touch(&mut self, name: &str) {
        if !self.changed.iter().any(|n| n == name) {
            self.changed.push(name.to_string());
        }
    }
}

#[derive(Debug, Default)]
pub struct ModelRuns {
    runs: BTreeMap<String, ModelRun>,
    /// Job → the runs that planned it (a task shared by two models is one job).
    by_job: HashMap<JobId, Vec<String>>,
}

impl ModelRuns {
    pub fn recover(runs: Vec<ModelRun>) -> ModelRuns {
        let mut me = ModelRuns::default();
        for run in runs {
            me.index(&run);
            me.runs.insert(run.name.clone(), run);
        }
        me
    }

    fn index(&mut self, run: &ModelRun) {
        let jobs = std::iter::once(&run.extract_job)
            .chain(run.compile_job.iter())
            .chain(
                run.tasks
                    .iter()
                    .flat_map(|t| t.rounds.iter().map(|r| &r.job_id)),
            );
        for job in jobs {
            let runs = self.by_job.entry(job.clone()).or_default();
            if !runs.contains(&run.name) {
                runs.push(run.name.clone());
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&ModelRun> {
        self.runs.get(name)
    }

    pub fn runs(&self) -> impl Iterator<Item = &ModelRun> {
        self.runs.values()
    }

    pub fn runs_of_job(&self, job_id: &str) -> bool {
        self.by_job.contains_key(job_id)
    }

    /// Whether a run that has not ended planned this job (its job must stay
    /// in memory: the run reads its result when the next round is planned).
    pub fn holds_job(&self, job_id: &str) -> bool {
        self.by_job.get(job_id).is_some_and(|names| {
            names
                .iter()
                .any(|name| self.runs.get(name).is_some_and(|r| !r.state.is_terminal()))
        })
    }

    /// A new run: validates it and plans its extract job. A run with
    /// client-extracted tasks starts `tuning` with no job planned: the
    /// caller plans its rounds with [`ModelRuns::refill`].
    pub fn submit(
        &mut self,
        submission: ModelSubmission,
        default_target: Target,
        now: Millis,
    ) -> Result<Plan, ModelError> {
        let ModelSubmission {
            name,
            source,
            trials,
            trials_per_round,
            target,
            tuner,
            extracted,
        } = submission;
        check_model_name(&name).map_err(ModelError::BadName)?;
        if self.runs.contains_key(&name) {
            return Err(ModelError::Exists(name));
        }
        let (trials_total, per_round) = check_budget(trials, trials_per_round)?;
        check_tuner(&tuner).map_err(ModelError::BadSettings)?;
        source.check().map_err(ModelError::BadSettings)?;
        let requested_target = target.unwrap_or(default_target);
        let extract = extract_workload(&name, &source, &requested_target);
        let tasks = match &extracted {
            Some(extracted) => extracted_tasks(extracted)?,
            None => Vec::new(),
        };
        let client_extracted = extracted.is_some();
        let run = ModelRun {
            name: name.clone(),
            source,
            // Client-extracted tasks were prepared for the target asked
            // for; every round pins it (workers complete the rest).
            target: client_extracted.then(|| requested_target.clone()),
            requested_target,
            trials_total,
            trials_per_round: per_round,
            tuner,
            state: if client_extracted {
                ModelState::Tuning
            } else {
                ModelState::Extracting
            },
            stop_requested: false,
            // Never submitted for a client-extracted run: the id names the
            // extraction the client did in its place.
            extract_job: extract.job_id(),
            compile_job: None,
            tasks,
            io: Value::Null,
            latency: ModelLatencies::default(),
            verified: false,
            verification: Value::Null,
            records_applied: None,
            functions_tuned: None,
            error: None,
            curve: Vec::new(),
            layout_note: None,
            created_at: now,
            updated_at: now,
            finished_at: None,
        };
        self.index(&run);
        self.runs.insert(name.clone(), run);
        let mut plan = Plan::default();
        if !client_extracted {
            plan.jobs.push((extract, JobExtras::default()));
        }
        plan.touch(&name);
        Ok(plan)
    }

    /// No more rounds; compile once the rounds in flight have ended.
    pub fn stop(
        &mut self,
        name: &str,
        now: Millis,
        fleet: &dyn Fn(&Target) -> FleetFor,
    ) -> Result<Plan, ModelError> {
        let run = self
            .runs
            .get_mut(name)
            .ok_or_else(|| ModelError::Unknown(name.to_string()))?;
        if run.state.is_terminal() {
            return Err(ModelError::Finished {
                name: name.to_string(),
                state: run.state,
            });
        }
        run.stop_requested = true;
        run.updated_at = now;
        let mut plan = Plan::default();
        plan.touch(name);
        if run.state == ModelState::Extracting {
            // Nothing tuned yet: there is no model to compile.
            fail(run, "stopped before its tasks were extracted".into(), now);
        } else {
            self.advance(name, now, fleet, &mut plan);
        }
        Ok(plan)
    }

    /// A job ended (done, failed or cancelled). Jobs of no run are ignored.
    pub fn job_ended(
        &mut self,
        job: &JobView,
        now: Millis,
        fleet: &dyn Fn(&Target) -> FleetFor,
    ) -> Plan {
        let mut plan = Plan::default();
        let Some(names) = self.by_job.get(&job.job_id).cloned() else {
            return plan;
        };
        for name in names {
            let Some(run) = self.runs.get_mut(&name) else {
                continue;
            };
            if run.state.is_terminal() {
                continue;
            }
            let changed = if job.job_id == run.extract_job {
                extract_ended(run, job, now)
            } else if run.compile_job.as_deref() == Some(job.job_id.as_str()) {
                compile_ended(run, job, now)
            } else {
                round_ended(run, job, now)
            };
            if changed {
                plan.touch(&name);
                self.advance(&name, now, fleet, &mut plan);
            }
        }
        plan
    }

    /// Workers came or went: more rounds may run at once.
    pub fn refill(&mut self, now: Millis, fleet: &dyn Fn(&Target) -> FleetFor) -> Plan {
        let mut plan = Plan::default();
        let names: Vec<String> = self
            .runs
            .values()
            .filter(|r| r.state == ModelState::Tuning)
            .map(|r| r.name.clone())
            .collect();
        for name in names {
            self.advance(&name, now, fleet, &mut plan);
        }
        plan
    }

    /// Plans rounds while budget and the fleet's workers allow, then the
    /// compile job.
    fn advance(
        &mut self,
        name: &str,
        now: Millis,
        fleet: &dyn Fn(&Target) -> FleetFor,
        plan: &mut Plan,
    ) {
        let Some(run) = self.runs.get_mut(name) else {
            return;
        };
        if run.state != ModelState::Tuning {
            return;
        }
        let Some(target) = run.target.clone() else {
            return;
        };
        let mut planned = Vec::new();
        if !run.stop_requested {
            // Warm-up rounds are all queued at once (the queue hands them out in
            // order); gradient rounds only as workers can take them, so each
            // choice is made with the latest results.
            let fleet = fleet(&target);
            while let Some((job_id, workload, extras)) = plan_round(run, &target, fleet) {
                planned.push(job_id);
                plan.jobs.push((workload, extras));
            }
        }
        if !planned.is_empty() {
            run.updated_at = now;
            plan.touch(name);
        }
        if run.rounds_in_flight() == 0 && run.compile_job.is_none() {
            planned.extend(finish_tuning(run, &target, now, plan));
            plan.touch(name);
        }
        for job in planned {
            let runs = self.by_job.entry(job).or_default();
            if !runs.iter().any(|n| n == name) {
                runs.push(name.to_string());
            }
        }
    }
}

/// The run's trial budget and trials per round, defaults filled in, or why
/// they are refused.
fn check_budget(
    trials: Option<u32>,
    trials_per_round: Option<u32>,
) -> Result<(u32, u32), ModelError> {
    let trials_total = trials.unwrap_or(DEFAULT_MODEL_TRIALS);
    if !(1..=1_000_000).contains(&trials_total) {
        return Err(ModelError::BadSettings(format!(
            "trials must be between 1 and 1000000, got {trials_total}"
        )));
    }
    let per_round = trials_per_round.unwrap_or(DEFAULT_TRIALS_PER_ROUND);
    if !(1..=MAX_TRIALS).contains(&per_round) {
        return Err(ModelError::BadSettings(format!(
            "trials per round must be between 1 and {MAX_TRIALS}, got {per_round}"
        )));
    }
    Ok((trials_total, per_round))
}

/// The run's extract job: a worker reads the model's tasks from its file.
fn extract_workload(name: &str, source: &ModelSource, target: &Target) -> Workload {
    Workload {
        name: format!("{name}/extract"),
        op: Op::Model {
            model: Box::new(ModelStage::Extract {
                run: name.to_string(),
                source: source.clone(),
            }),
        },
        dtype: "float32".into(),
        target: target.clone(),
        trials: 1,
        tuner: TunerSettings::default(),
    }
}

/// The tasks a client extracted itself, read as an extract job's would be.
fn extracted_tasks(extracted: &ExtractedModel) -> Result<Vec<Task>, ModelError> {
    let tasks = serde_json::to_value(&extracted.tasks)
        .map_err(|e| ModelError::BadSettings(e.to_string()))?;
    parse_tasks(
        tasks.as_array().map(Vec::as_slice).unwrap_or_default(),
        None,
    )
    .map_err(|e| ModelError::BadSettings(format!("extracted {e}")))
}

/// The next round of `run`, recorded in its task, or `None` when the
/// budget is spent or the next choice must wait for a free worker.
fn plan_round(
    run: &mut ModelRun,
    target: &Target,
    fleet: FleetFor,
) -> Option<(JobId, Workload, JobExtras)> {
    let left = run.trials_total.saturating_sub(run.trials_committed());
    if left == 0 {
        return None;
    }
    let i = next_round_task(run, fleet.slots.max(1))?;
    let trials = round_trials(run, i, left, fleet.cost_model_samples);
    let (workload, extras) = round_job(run, i, trials, target);
    let job_id = workload.job_id();
    run.tasks[i].rounds.push(Round {
        job_id: job_id.clone(),
        trials_planned: trials,
        trials_done: None,
        ok: false,
    });
    Some((job_id, workload, extras))
}

/// Which task gets the next round (`allocation.rs`'s rule; an extra round
/// of a busy task only while workers are idle), or `None` when a gradient
/// round would find no free worker: it waits, to be chosen with the
/// latest results.
fn next_round_task(run: &ModelRun, parallel: usize) -> Option<usize> {
    let histories: Vec<Vec<f64>> = run.tasks.iter().map(|t| t.history.clone()).collect();
    let stats: Vec<allocation::TaskStats<'_>> = run
        .tasks
        .iter()
        .zip(&histories)
        .map(|(t, h)| allocation::TaskStats {
            weight: f64::from(t.weight),
            history: h,
            live: t.live(),
            busy: t.busy(),
            in_flight: t.in_flight(),
            untuned_s: t.untuned_time_s,
        })
        .collect();
    let idle = run.rounds_in_flight() < parallel;
    let i = allocation::next_task(&stats)
        .or_else(|| idle.then(|| allocation::extra_round(&stats)).flatten())?;
    let warm_up = run.tasks[i].rounds.is_empty();
    if !warm_up && run.rounds_in_flight() >= parallel {
        return None;
    }
    Some(i)
}

/// Trials for task `i`'s next round, `left` of the budget being unplanned,
/// the fleet's cost model for the run's target holding `samples`.
fn round_trials(run: &ModelRun, i: usize, left: u32, samples: u32) -> u32 {
    let warm_up = run.tasks[i].rounds.is_empty();
    let per_round = if warm_up && samples >= WARM_FLEET_MIN_SAMPLES {
        run.trials_per_round.min(WARM_FLEET_WARM_UP_TRIALS)
    } else {
        run.trials_per_round
    };
    // Warm-up: spread a short budget so every task can still get one.
    let waiting = run
        .tasks
        .iter()
        .filter(|t| t.live() && t.rounds.is_empty())
        .count()
        .max(1) as u32;
    let share = if warm_up {
        (left / waiting).max(1)
    } else {
        left
    };
    per_round.min(share).min(left)
}

/// No round in flight and none planned: a run of client-extracted tasks is
/// done, any other gets its compile job (whose id is returned).
fn finish_tuning(
    run: &mut ModelRun,
    target: &Target,
    now: Millis,
    plan: &mut Plan,
) -> Option<JobId> {
    run.updated_at = now;
    if run.client_extracted() {
        // No model file to compile on a worker: the run is done when its
        // budget is spent (or it was stopped); the client applies the
        // records (`run.apply` in the Python package).
        run.state = ModelState::Done;
        run.finished_at = Some(now);
        return None;
    }
    let compile = compile_job(run, target);
    let job_id = compile.job_id();
    run.compile_job = Some(job_id.clone());
    run.state = ModelState::Compiling;
    plan.jobs.push((compile, JobExtras::default()));
    Some(job_id)
}

fn check_tuner(tuner: &TunerSettings) -> Result<(), String> {
    match tuner.model_problems().into_iter().next() {
        Some((field, message)) => Err(format!("tuner.{field}: {message}")),
        None => Ok(()),
    }
}
