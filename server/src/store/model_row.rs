//! What a `models` row holds, apart from the planner's `ModelRun`.
//!
//! Why a type of its own (as `row.rs` is for jobs): when the row was the
//! planner's state serialised whole, a field added to `ModelRun`, `Task` or
//! `Round` for the planner's own use silently changed the database format,
//! and a database written before it might no longer load. Here each is
//! destructured without `..`: a new field does not compile until someone
//! decides whether and how it is stored. The JSON is the one schema 1 to 4
//! wrote (the same names), so no migration was needed to introduce it.
//! Since schema 5 the tasks' records are not in it: each is a row of
//! `model_records`, written once (a 2,000-trial ResNet-50 run's row was
//! 66 MB, rewritten on every change of the run).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tunefleet_shared::model::{
    EstimatePoint, ModelLatencies, ModelSource, ModelState, TunerSettings,
};
use tunefleet_shared::protocol::{JobId, Millis, TuningRecord};
use tunefleet_shared::target::Target;

use crate::models::{KeptRecord, ModelRun, Round, Task};

/// The `data` column, written (borrowed; only the task and round lists,
/// and each round's job id, are built for it).
#[derive(Serialize)]
pub(super) struct ModelRowOut<'a> {
    name: &'a str,
    source: &'a ModelSource,
    requested_target: &'a Target,
    target: &'a Option<Target>,
    trials_total: u32,
    trials_per_round: u32,
    tuner: &'a TunerSettings,
    state: ModelState,
    stop_requested: bool,
    extract_job: &'a JobId,
    compile_job: &'a Option<JobId>,
    tasks: Vec<TaskRowOut<'a>>,
    io: &'a Value,
    latency: &'a ModelLatencies,
    verified: bool,
    verification: &'a Value,
    records_applied: Option<u32>,
    functions_tuned: Option<u32>,
    error: &'a Option<String>,
    curve: &'a [EstimatePoint],
    #[serde(skip_serializing_if = "Option::is_none")]
    layout_note: &'a Option<String>,
    created_at: Millis,
    updated_at: Millis,
    finished_at: Option<Millis>,
}

#[derive(Serialize)]
struct TaskRowOut<'a> {
    name: &'a str,
    weight: u32,
    tvmscript: &'a str,
    flops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    untuned_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    untuned_time_s: Option<f64>,
    trivial: bool,
    dead: bool,
    rounds: Vec<RoundRow>,
    history: &'a [f64],
    workload_line: &'a Option<Value>,
    // The records are not here: each has a row of its own in
    // `model_records` (schema 5), written once.
}

/// A round, both ways (four plain fields).
#[derive(Serialize, Deserialize)]
struct RoundRow {
    job_id: JobId,
    trials_planned: u32,
    trials_done: Option<u32>,
    ok: bool,
}

/// The `data` column, read back.
#[derive(Deserialize)]
pub(super) struct ModelRowIn {
    name: String,
    source: ModelSource,
    requested_target: Target,
    target: Option<Target>,
    trials_total: u32,
    trials_per_round: u32,
    tuner: TunerSettings,
    state: ModelState,
    stop_requested: bool,
    extract_job: JobId,
    compile_job: Option<JobId>,
    tasks: Vec<TaskRowIn>,
    io: Value,
    latency: ModelLatencies,
    verified: bool,
    verification: Value,
    records_applied: Option<u32>,
    functions_tuned: Option<u32>,
    error: Option<String>,
    curve: Vec<EstimatePoint>,
    #[serde(default)]
    layout_note: Option<String>,
    created_at: Millis,
    updated_at: Millis,
    finished_at: Option<Millis>,
}

#[derive(Deserialize)]
struct TaskRowIn {
    name: String,
    weight: u32,
    tvmscript: String,
    flops: Option<f64>,
    #[serde(default)]
    untuned_share: Option<f64>,
    #[serde(default)]
    untuned_time_s: Option<f64>,
    trivial: bool,
    dead: bool,
    rounds: Vec<RoundRow>,
    history: Vec<f64>,
    workload_line: Option<Value>,
    /// Only in rows written before schema 5, which kept the records here;
    /// the run's next commit moves them to `model_records`.
    #[serde(default)]
    records: Vec<TuningRecord>,
}

impl<'a> ModelRowOut<'a> {
    pub(super) fn of(run: &'a ModelRun) -> ModelRowOut<'a> {
        let ModelRun {
            name,
            source,
            requested_target,
            target,
            trials_total,
            trials_per_round,
            tuner,
            state,
            stop_requested,
            extract_job,
            compile_job,
            tasks,
            io,
            latency,
            verified,
            verification,
            records_applied,
            functions_tuned,
            error,
            curve,
            layout_note,
            created_at,
            updated_at,
            finished_at,
        } = run;
        ModelRowOut {
            name,
            source,
            requested_target,
            target,
            trials_total: *trials_total,
            trials_per_round: *trials_per_round,
            tuner,
            state: *state,
            stop_requested: *stop_requested,
            extract_job,
            compile_job,
            tasks: tasks.iter().map(TaskRowOut::of).collect(),
            io,
            latency,
            verified: *verified,
            verification,
            records_applied: *records_applied,
            functions_tuned: *functions_tuned,
            error,
            curve,
            layout_note,
            created_at: *created_at,
            updated_at: *updated_at,
            finished_at: *finished_at,
        }
    }
}

impl<'a> TaskRowOut<'a> {
    fn of(task: &'a Task) -> TaskRowOut<'a> {
        let Task {
            name,
            weight,
            tvmscript,
            flops,
            untuned_share,
            untuned_time_s,
            trivial,
            dead,
            rounds,
            history,
            workload_line,
            // Written apart, to `model_records` (see `Store::commit`).
            records: _,
        } = task;
        TaskRowOut {
            name,
            weight: *weight,
            tvmscript,
            flops: *flops,
            untuned_share: *untuned_share,
            untuned_time_s: *untuned_time_s,
            trivial: *trivial,
            dead: *dead,
            rounds: rounds.iter().map(RoundRow::of).collect(),
            history,
            workload_line,
        }
    }
}

impl RoundRow {
    fn of(round: &Round) -> RoundRow {
        let Round {
            job_id,
            trials_planned,
            trials_done,
            ok,
        } = round;
        RoundRow {
            job_id: job_id.clone(),
            trials_planned: *trials_planned,
            trials_done: *trials_done,
            ok: *ok,
        }
    }

    fn into_round(self) -> Round {
        Round {
            job_id: self.job_id,
            trials_planned: self.trials_planned,
            trials_done: self.trials_done,
            ok: self.ok,
        }
    }
}

impl TaskRowIn {
    /// The task, with the records its row held (before schema 5), named as
    /// no round's record can be: `legacy/TASK/N`.
    fn into_task(self, index: usize) -> Task {
        let records = self
            .records
            .into_iter()
            .enumerate()
            .map(|(i, record)| KeptRecord {
                key: format!("legacy/{index}/{i}"),
                record,
            })
            .collect();
        Task {
            name: self.name,
            weight: self.weight,
            tvmscript: self.tvmscript,
            flops: self.flops,
            untuned_share: self.untuned_share,
            untuned_time_s: self.untuned_time_s,
            trivial: self.trivial,
            dead: self.dead,
            rounds: self.rounds.into_iter().map(RoundRow::into_round).collect(),
            history: self.history,
            workload_line: self.workload_line,
            records,
        }
    }
}

impl ModelRowIn {
    pub(super) fn into_run(self) -> ModelRun {
        ModelRun {
            name: self.name,
            source: self.source,
            requested_target: self.requested_target,
            target: self.target,
            trials_total: self.trials_total,
            trials_per_round: self.trials_per_round,
            tuner: self.tuner,
            state: self.state,
            stop_requested: self.stop_requested,
            extract_job: self.extract_job,
            compile_job: self.compile_job,
            tasks: self
                .tasks
                .into_iter()
                .enumerate()
                .map(|(i, task)| task.into_task(i))
                .collect(),
            io: self.io,
            latency: self.latency,
            verified: self.verified,
            verification: self.verification,
            records_applied: self.records_applied,
            functions_tuned: self.functions_tuned,
            error: self.error,
            curve: self.curve,
            layout_note: self.layout_note,
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        }
    }
}
