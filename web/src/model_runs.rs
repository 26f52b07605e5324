//! What the Models card shows of a model run ([`ModelView`]): the measured
//! latencies with their ratios, the per-task notes. Pure text, tested natively;
//! `app/view.rs` lays it out.

use tunefleet_shared::model::{ModelState, ModelTaskView, ModelView};
use tunefleet_shared::protocol::JobId;

use crate::format::format_latency;

/// A latency or `–`.
pub fn latency(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite() && *v > 0.0)
        .map_or_else(|| "–".into(), format_latency)
}

/// The compile job's measurements, as the card writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub untuned: String,
    pub tuned: String,
    pub onnxruntime: String,
    /// `3.2× faster than untuned` (or `0.8× …`, slower).
    pub speedup: Option<String>,
    /// `0.85× onnxruntime's time`.
    pub vs_onnxruntime: Option<String>,
    /// Tuned TVM beats onnxruntime.
    pub beats_onnxruntime: bool,
}

fn positive(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v > 0.0)
}

/// `None` until the compile job has measured the tuned model.
pub fn measured(view: &ModelView) -> Option<Measured> {
    let l = view.latency_s;
    let tuned = positive(l.tuned)?;
    let untuned = positive(l.untuned);
    let ort = positive(l.onnxruntime);
    Some(Measured {
        untuned: latency(untuned),
        tuned: format_latency(tuned),
        onnxruntime: latency(ort),
        speedup: untuned.map(|u| format!("{:.1}× faster than untuned", u / tuned)),
        vs_onnxruntime: ort.map(|o| format!("{:.2}× onnxruntime's time", tuned / o)),
        beats_onnxruntime: ort.is_some_and(|o| tuned < o),
    })
}

/// `12/16` schedules applied, or `–`.
pub fn applied(view: &ModelView) -> String {
    match (view.records_applied, view.functions_tuned) {
        (Some(a), Some(f)) => format!("{a}/{f}"),
        (Some(a), None) => a.to_string(),
        _ => "–".into(),
    }
}

/// `yes`, `no` once compiled, `–` before.
pub fn verified(view: &ModelView) -> &'static str {
    if view.verified {
        "yes"
    } else if view.state == ModelState::Done || view.latency_s.tuned.is_some() {
        "no"
    } else {
        "–"
    }
}

/// The note column of the per-task table: why a task got no tuning, else
/// how its best record tiles (`SRS`: the `blocked` rules; `SSRSRS`:
/// MetaSchedule's own), as `tunefleet results` writes it.
pub fn task_note(task: &ModelTaskView) -> String {
    if task.trivial {
        "trivial: default schedule".into()
    } else if task.dead {
        "no valid candidate".into()
    } else {
        task.tiling_note()
    }
}

/// `41.2%` or `–`.
pub fn share(task: &ModelTaskView) -> String {
    task.share
        .filter(|s| s.is_finite())
        .map_or_else(|| "–".into(), |s| format!("{:.1}%", s * 100.0))
}

/// `16 per round`, or `16 per round, first rounds 4` when no task's first
/// round was full size: a fleet whose cost model already knows the target
/// starts each task with a short round (the planner's `round_trials`), and a
/// budget smaller than a round shortens it too. `trials_of` answers a job's
/// trials from the fleet's jobs; a first round not (yet) among them counts
/// for nothing.
pub fn round_sizes(view: &ModelView, trials_of: impl Fn(&JobId) -> Option<u32>) -> String {
    let per_round = view.trials_per_round;
    let first = view
        .tasks
        .iter()
        .filter_map(|t| t.job_id.as_ref().and_then(&trials_of))
        .max();
    match first {
        Some(n) if n < per_round => format!("{per_round} per round, first rounds {n}"),
        _ => format!("{per_round} per round"),
    }
}

/// A line under the state while nothing else says what is going on.
pub fn state_hint(view: &ModelView) -> &'static str {
    match view.state {
        ModelState::Extracting => "waiting for a TVM worker to extract the tasks",
        ModelState::Tuning if view.stop_requested => "stopping: no more rounds",
        ModelState::Tuning => "tuning the tasks in rounds",
        ModelState::Compiling => "compiling, verifying against onnxruntime and timing",
        ModelState::Done => "",
        ModelState::Failed => "",
    }
}

#[cfg(test)]
pub(crate) mod tests;
