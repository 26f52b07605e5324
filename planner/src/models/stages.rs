//! What each stage's job leaves behind when it ends (the tasks of an
//! extract job, a round's records and curve, a compile's latencies), and the
//! workloads of the jobs planned next. Plain functions of a run and a job
//! view: [`super::ModelRuns`] decides when each is called.

use serde_json::Value;
use tunefleet_shared::model::{
    CompileTask, DataLayout, EstimatePoint, ModelLatencies, ModelStage, ModelState, TunerSettings,
    WarmStart, BEST_RULES, PER_TASK_RULES,
};
use tunefleet_shared::protocol::{JobState, JobView, Millis};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{Op, Workload};

use super::{rules, KeptRecord, ModelRun, Task};
use crate::scheduler::JobExtras;

/// Records kept per task (best first); a warm start needs the good ones, and
/// MetaSchedule seeds its population from the top of the database.
const MAX_TASK_RECORDS: usize = 512;
/// Records handed to the compile job per task: it times every one of them
/// cold and applies the fastest (python/tunefleet/_driver/cold_choice.py),
/// so this is the one place the fleet's cold choice is sized.
const COMPILE_RECORDS: usize = 6;
/// Points kept on a run's estimated-latency curve.
const MAX_CURVE_POINTS: usize = 512;

/// A task's records, best first; ties by key, so that records read back
/// from the store (in no particular order) are in the order they were kept.
pub fn sort_best_first(records: &mut [KeptRecord]) {
    records.sort_by(|a, b| {
        a.record
            .latency_s
            .total_cmp(&b.record.latency_s)
            .then_with(|| a.key.cmp(&b.key))
    });
}

pub(super) fn fail(run: &mut ModelRun, error: String, now: Millis) {
    run.state = ModelState::Failed;
    run.error = Some(error);
    run.finished_at = Some(now);
    run.updated_at = now;
}

fn last_error(job: &JobView) -> String {
    match (job.state, job.errors.last()) {
        (JobState::Cancelled, _) => format!("job {} was cancelled", job.job_id),
        (_, Some(e)) => e.message.clone(),
        (_, None) => format!("job {} ended {}", job.job_id, job.state),
    }
}

/// The extract job ended: read the tasks and the effective target.
pub(super) fn extract_ended(run: &mut ModelRun, job: &JobView, now: Millis) -> bool {
    if job.state != JobState::Done {
        fail(
            run,
            format!("task extraction failed: {}", last_error(job)),
            now,
        );
        return true;
    }
    let Some(meta) = &job.result else {
        fail(run, "task extraction returned no result".into(), now);
        return true;
    };
    let target = meta
        .target
        .clone()
        .unwrap_or_else(|| run.requested_target.clone());
    let Some(tasks) = meta.extra.get("tasks").and_then(Value::as_array) else {
        fail(run, "task extraction returned no `tasks` list".into(), now);
        return true;
    };
    // Each task's time in the untuned model, over the whole (the worker
    // timed every function once; older workers did not).
    let untuned_total = meta.extra.get("untuned_estimate_s").and_then(Value::as_f64);
    let parsed = match parse_tasks(tasks, untuned_total) {
        Ok(parsed) => parsed,
        Err(e) => {
            fail(run, format!("task extraction: {e}"), now);
            return true;
        }
    };
    run.io = serde_json::json!({
        "inputs": meta.extra.get("inputs").cloned().unwrap_or(Value::Null),
        "params": meta.extra.get("params").cloned().unwrap_or(Value::Null),
        "outputs": meta.extra.get("outputs").cloned().unwrap_or(Value::Null),
    });
    run.tasks = parsed;
    run.target = Some(target);
    adopt_layout(run, &meta.extra);
    run.state = ModelState::Tuning;
    run.updated_at = now;
    record_estimate(run, now);
    true
}

/// The layout the extraction actually used becomes the run's: an
/// `auto_layout` run a model could not be converted for is tuned, and
/// compiled, in NCHW, and says why.
fn adopt_layout(run: &mut ModelRun, extra: &Value) {
    let used = extra
        .get("layout")
        .and_then(Value::as_str)
        .and_then(|l| DataLayout::parse(l).ok());
    if let Some(layout) = used.filter(|l| *l != run.source.layout && run.source.auto_layout) {
        run.source.layout = layout;
    }
    run.layout_note = extra
        .get("layout_note")
        .and_then(Value::as_str)
        .map(str::to_string);
}

/// The tasks of an extraction (an extract job's `extra.tasks`, or the tasks
/// a client extracted itself): `[{"name", "tvmscript", "weight"?, "flops"?,
/// "trivial"?, "workload"?}]`.
/// `untuned_total`: the untuned model's time in the run that timed each
/// task (`untuned_time_s`), if one did.
pub(super) fn parse_tasks(
    tasks: &[Value],
    untuned_total: Option<f64>,
) -> Result<Vec<Task>, String> {
    let mut parsed = Vec::new();
    let untuned_total = untuned_total.filter(|t| t.is_finite() && *t > 0.0);
    for (i, t) in tasks.iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str);
        let script = t.get("tvmscript").and_then(Value::as_str);
        let (Some(name), Some(script)) = (name, script) else {
            return Err(format!("tasks[{i}] has no `name` or `tvmscript`"));
        };
        parsed.push(Task {
            name: name.to_string(),
            weight: t
                .get("weight")
                .and_then(Value::as_u64)
                .map_or(1, |w| w.clamp(1, u64::from(u32::MAX)) as u32),
            tvmscript: script.to_string(),
            flops: t.get("flops").and_then(Value::as_f64),
            untuned_share: t
                .get("untuned_time_s")
                .and_then(Value::as_f64)
                .zip(untuned_total)
                .map(|(t, total)| t / total),
            untuned_time_s: untuned_total.and(
                t.get("untuned_time_s")
                    .and_then(Value::as_f64)
                    .filter(|t| t.is_finite() && *t >= 0.0),
            ),
            trivial: t.get("trivial").and_then(Value::as_bool).unwrap_or(false),
            dead: false,
            rounds: Vec::new(),
            history: Vec::new(),
            // Extraction reports each task's database line (older workers
            // did not: the first round's result then gives it).
            workload_line: t
                .get("workload")
                .filter(|w| tunefleet_shared::import::check_workload_line(w).is_ok())
                .cloned(),
            records: Vec::new(),
        });
    }
    Ok(parsed)
}

/// A point on the estimated-latency curve. With every task's untuned time
/// known the estimate is the whole model's from extraction on, and only
/// falls; without (older workers) the curve starts once every live task
/// has a best: before that the sum grows with each task measured, which
/// reads as the model getting slower.
fn record_estimate(run: &mut ModelRun, now: Millis) {
    let complete =
        run.whole_estimate() || run.tasks.iter().all(|t| !t.live() || t.best().is_some());
    let Some(estimate) = run.estimated_latency_s().filter(|_| complete) else {
        return;
    };
    let trials = run.trials_done();
    run.curve.push(EstimatePoint {
        trials,
        at: now,
        estimated_latency_s: estimate,
    });
    if run.curve.len() > MAX_CURVE_POINTS {
        // Thin the middle, keep the first and the last points.
        let last = run.curve.len() - 1;
        let mut i = 0;
        run.curve.retain(|_| {
            i += 1;
            i == 1 || i % 2 == 0 || i - 1 == last
        });
    }
}

/// Once every live task has been measured, a task judged trivial by the
/// untuned model is judged again by the model as it now stands: tuning
/// shrinks the convolutions far more than a pooling or a copy, so a task
/// that was 0.4% of the untuned time can be 5% of the tuned model, on a
/// generic schedule. One costing more than [`TRIVIAL_SHARE_OF_ESTIMATE`]
/// of the estimate (by its untuned time: an upper bound) becomes live and
/// gets rounds like the others.
fn rejudge_trivial(run: &mut ModelRun) {
    let Some(estimate) = run.estimated_latency_s().filter(|_| run.whole_estimate()) else {
        return;
    };
    for task in run.tasks.iter_mut().filter(|t| t.trivial && !t.dead) {
        if task
            .untuned_time_s
            .is_some_and(|u| u > TRIVIAL_SHARE_OF_ESTIMATE * estimate)
        {
            task.trivial = false;
        }
    }
}

/// See [`rejudge_trivial`]: "a few percent" of the tuned model.
pub(super) const TRIVIAL_SHARE_OF_ESTIMATE: f64 = 0.02;

/// A round ended: merge its records, extend the task's history.
pub(super) fn round_ended(run: &mut ModelRun, job: &JobView, now: Millis) -> bool {
    let Some((ti, ri)) = run.tasks.iter().enumerate().find_map(|(ti, t)| {
        t.rounds
            .iter()
            .position(|r| r.job_id == job.job_id && r.in_flight())
            .map(|ri| (ti, ri))
    }) else {
        return false;
    };
    let task = &mut run.tasks[ti];
    let first_round = ri == 0;
    if job.state == JobState::Done {
        let measured = job.result.as_ref().map_or(0, |m| m.trials);
        task.rounds[ri].trials_done = Some(measured);
        task.rounds[ri].ok = true;
        if task.workload_line.is_none() {
            task.workload_line = job
                .result
                .as_ref()
                .and_then(|m| m.extra.get("workload"))
                .filter(|w| w.as_array().is_some_and(|a| a.len() == 2))
                .cloned();
        }
        for (index, record) in job.records.iter().enumerate() {
            if !task
                .records
                .iter()
                .any(|r| r.record.record == record.record)
            {
                let kept = KeptRecord::of_round(&job.job_id, index, record.clone());
                task.records.push(kept);
            }
        }
        sort_best_first(&mut task.records);
        task.records.truncate(MAX_TASK_RECORDS);
        let best = task.records.first().map(|r| r.record.latency_s);
        match (best, task.best()) {
            (Some(b), Some(old)) => task.history.push(b.min(old)),
            (Some(b), None) => task.history.push(b),
            (None, Some(old)) => task.history.push(old),
            (None, None) => task.dead = first_round,
        }
        if measured == 0 && !first_round {
            // The search space is exhausted: more rounds would measure nothing.
            task.dead = true;
        }
    } else {
        // Failed after every attempt, or cancelled: its planned trials return
        // to the budget. A task with no valid result after its first round is dead.
        task.rounds[ri].trials_done = Some(0);
        if task.history.is_empty() {
            task.dead = true;
        }
    }
    if run.tasks.iter().all(|t| !t.live() || t.best().is_some()) {
        rejudge_trivial(run);
    }
    record_estimate(run, now);
    run.updated_at = now;
    true
}

/// The compile job ended: the run's measured outcome.
pub(super) fn compile_ended(run: &mut ModelRun, job: &JobView, now: Millis) -> bool {
    if job.state != JobState::Done {
        fail(
            run,
            format!("compiling the tuned model failed: {}", last_error(job)),
            now,
        );
        return true;
    }
    let extra = job.result.as_ref().map(|m| &m.extra);
    let get = |k: &str| extra.and_then(|e| e.get(k));
    let lat = |k: &str| {
        get("latency_s")
            .and_then(|l| l.get(k))
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    run.latency = ModelLatencies {
        untuned: lat("untuned"),
        tuned: lat("tuned"),
        onnxruntime: lat("onnxruntime"),
    };
    run.verified = get("verified").and_then(Value::as_bool) == Some(true);
    run.records_applied = get("applied").and_then(Value::as_u64).map(|x| x as u32);
    run.functions_tuned = get("tuned_functions")
        .and_then(Value::as_u64)
        .map(|x| x as u32);
    run.verification = serde_json::json!({
        "max_abs_err": get("max_abs_err").cloned().unwrap_or(Value::Null),
        "tolerance": get("tolerance").cloned().unwrap_or(Value::Null),
        "functions": get("functions").cloned().unwrap_or(Value::Null),
        "library_bytes": get("library_bytes").cloned().unwrap_or(Value::Null),
        // Which onnxruntime ran beside the model (a GPU run: its CUDA
        // provider where installed; the CPU driver says nothing, and uses
        // the CPU provider) and on which device TVM's ran.
        "onnxruntime_provider": get("onnxruntime_provider")
            .cloned()
            .unwrap_or_else(|| Value::from("CPUExecutionProvider")),
        "device": get("device").cloned().unwrap_or(Value::Null),
        // Which of each task's best records the compile applied (the one
        // fastest timed cold) and the tuned kernels' cold time in the model.
        "cold_choice": get("cold_choice").cloned().unwrap_or(Value::Null),
    });
    if !run.verified {
        fail(
            run,
            "the compiled model was not verified against onnxruntime".into(),
            now,
        );
        return true;
    }
    run.state = ModelState::Done;
    run.finished_at = Some(now);
    run.updated_at = now;
    true
}

pub(super) fn round_job(
    run: &ModelRun,
    i: usize,
    trials: u32,
    target: &Target,
) -> (Workload, JobExtras) {
    let task = &run.tasks[i];
    let round = task.rounds.len() + 1;
    // The round number is part of the job's identity (two rounds of one task
    // are two jobs), but not of the task's: the same first round of a task
    // that two models share is one job. A comment leaves the function as is.
    let tvmscript = format!("# tunefleet round {round}\n{}", task.tvmscript);
    let workload = Workload {
        name: format!("{}/{}/r{round}", run.name, task.name),
        op: Op::Tvmscript { tvmscript },
        dtype: "float32".into(),
        target: target.clone(),
        trials,
        tuner: TunerSettings::default(),
    };
    let warm_start = task.workload_line.as_ref().and_then(|line| {
        let records: Vec<Value> = task.database_records().cloned().collect();
        (!records.is_empty()).then(|| {
            Box::new(WarmStart {
                workload: line.clone(),
                records,
            })
        })
    });
    // A round is one MetaSchedule iteration (`num_trials_per_iter`), as one
    // pick of MetaSchedule's own task scheduler is.
    let mut tuner = run.tuner.clone();
    tuner.trials_per_round.get_or_insert(trials);
    // A CPU run that names no rule set searches `union`; one that asks for
    // `per-task`, the one this task's rounds measured best (`rules.rs`).
    // Other targets search their own.
    let cpu = target.kind() == "llvm";
    tuner.rules = match tuner.rules.take() {
        None if cpu => Some(BEST_RULES.to_string()),
        Some(r) if r == PER_TASK_RULES => {
            cpu.then(|| rules::for_round(task, run.trials_per_round).to_string())
        }
        named => named,
    };
    let extras = JobExtras {
        // Keep every candidate the round measures (the driver returns only
        // this round's, not the warm start's).
        nbest: Some(trials.max(1)),
        warm_start,
        tuner,
        prior_trials: 0,
        workload_line: task.workload_line.clone(),
        seeded: 0,
        model_round: true,
    };
    (workload, extras)
}

pub(super) fn compile_job(run: &ModelRun, target: &Target) -> Workload {
    let tasks = run
        .tasks
        .iter()
        .filter_map(|t| {
            let line = t.workload_line.clone()?;
            let records: Vec<Value> = t
                .database_records()
                .take(COMPILE_RECORDS)
                .cloned()
                .collect();
            (!records.is_empty()).then(|| CompileTask {
                name: t.name.clone(),
                workload: line,
                records,
            })
        })
        .collect();
    Workload {
        name: format!("{}/compile", run.name),
        op: Op::Model {
            model: Box::new(ModelStage::Compile {
                run: run.name.clone(),
                source: run.source.clone(),
                tasks,
            }),
        },
        dtype: "float32".into(),
        target: target.clone(),
        trials: 1,
        tuner: TunerSettings::default(),
    }
}
