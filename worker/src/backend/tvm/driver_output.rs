//! What the Python driver prints: one JSON event per line on stdout
//! (started, progress, error, result), and the tail of its stderr.

use std::collections::VecDeque;
use std::path::PathBuf;

use serde::Deserialize;
use tunefleet_shared::protocol::TuningRecord;
use tunefleet_shared::workload::{Op, Workload};

use crate::backend::verify::ArgSpec;
use crate::backend::{ProgressSink, ProgressUpdate};

#[derive(Debug, Deserialize)]
pub(super) struct StartedEvent {
    #[serde(default)]
    pub(super) trials_total: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ProgressEvent {
    pub(super) trials_done: u32,
    pub(super) trials_total: u32,
    #[serde(default)]
    pub(super) best_latency_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ErrorEvent {
    #[serde(default)]
    pub(super) message: Option<String>,
}

/// The `result` event.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct DriverResult {
    pub(super) best_latency_s: f64,
    pub(super) trials: u32,
    #[serde(default)]
    #[allow(dead_code)] // reported by the driver; the job's own wall time is used
    pub(super) wall_time_s: Option<f64>,
    #[serde(default)]
    pub(super) tvm_version: Option<String>,
    /// Records of the job's warm start the driver loaded, and why it
    /// ignored them (a workload line of another module), if it did.
    #[serde(default)]
    pub(super) warm_start_records: u32,
    #[serde(default)]
    pub(super) warm_start_ignored: Option<String>,
    pub(super) records: Vec<TuningRecord>,
    #[serde(default)]
    pub(super) workload: serde_json::Value,
    /// The libraries to check the kernel with; none for a model's round
    /// (`check_kernel: false`).
    #[serde(default)]
    pub(super) tuned_lib: Option<PathBuf>,
    #[serde(default)]
    pub(super) reference_lib: Option<PathBuf>,
    /// The rule set the round searched (`measure.RULE_SETS`), for the
    /// result's `extra`: a model run's rounds choose it per task.
    #[serde(default)]
    pub(super) rules: Option<String>,
    /// MetaSchedule's own time in the job (search, build, measure).
    #[serde(default)]
    pub(super) tune_s: Option<f64>,
    #[serde(default = "default_entry")]
    pub(super) entry: String,
    pub(super) args: Vec<ArgSpec>,
    pub(super) outputs: Vec<usize>,
    /// May be null when the driver could not find it; the path found at
    /// start-up is used then.
    #[serde(default)]
    pub(super) tvm_runtime_lib: Option<PathBuf>,
    /// A CUDA kernel's check, done by the driver on its GPU
    /// (`gpu_check.rs`); absent for CPU kernels and a model's rounds.
    #[serde(default)]
    pub(super) gpu_check: Option<serde_json::Value>,
    /// What the round's cost model started from, and where the driver wrote
    /// the one it ends with (`path`; `shared_model.rs`).
    #[serde(default)]
    pub(super) cost_model: Option<serde_json::Value>,
    /// `cost_model` for the result's `extra`, the model read in (not
    /// the driver's: filled by `shared_model::take_returned`).
    #[serde(skip)]
    pub(super) cost_model_extra: Vec<(&'static str, serde_json::Value)>,
}

pub(super) fn default_entry() -> String {
    "main".to_string()
}

/// Parses one line of the driver's stdout. Returns the final event (result or
/// error), if this line is one; reports progress; keeps anything unexpected
/// in the tail for error messages.
pub(super) fn handle_stdout_line(
    line: &str,
    progress: &ProgressSink,
    tail: &mut Tail,
) -> Option<Result<serde_json::Value, String>> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let Some(value) = parse_json_line(line) else {
        tracing::warn!(target: "tunefleet_worker::tvm_driver", "non-JSON line on stdout: {line}");
        tail.push(format!("[stdout] {line}"));
        return None;
    };
    let event = value.get("event").and_then(|e| e.as_str()).unwrap_or("");
    match event {
        "started" => {
            if let Ok(StartedEvent {
                trials_total: Some(total),
            }) = serde_json::from_value(value.clone())
            {
                progress.report(ProgressUpdate {
                    trials_done: 0,
                    trials_total: total,
                    best_latency_s: None,
                });
            }
            tracing::debug!(%value, "tuning driver started");
            None
        }
        // The model driver reports stages (no trial counts) as progress too.
        "progress" if value.get("trials_done").is_none() => {
            tracing::info!(target: "tunefleet_worker::tvm_driver", %value, "driver stage");
            None
        }
        "progress" => {
            match serde_json::from_value::<ProgressEvent>(value) {
                Ok(p) => progress.report(ProgressUpdate {
                    trials_done: p.trials_done,
                    trials_total: p.trials_total,
                    best_latency_s: p.best_latency_s.filter(|l| l.is_finite() && *l > 0.0),
                }),
                Err(e) => tracing::warn!(error = %e, "malformed progress event: {line}"),
            }
            None
        }
        "result" => Some(Ok(value)),
        "error" => {
            let message = serde_json::from_value::<ErrorEvent>(value)
                .ok()
                .and_then(|e| e.message)
                .unwrap_or_else(|| "unknown error".to_string());
            Some(Err(message))
        }
        other => {
            tracing::debug!(event = other, "ignoring driver event");
            None
        }
    }
}

/// Strict JSON, or else Python's `json.dumps` dialect with bare `NaN` /
/// `Infinity` (read as null).
pub(super) fn parse_json_line(line: &str) -> Option<serde_json::Value> {
    if !line.starts_with('{') {
        return None;
    }
    serde_json::from_str(line).ok().or_else(|| {
        let patched = line
            .replace("-Infinity", "null")
            .replace("Infinity", "null")
            .replace("NaN", "null");
        serde_json::from_str(&patched).ok()
    })
}

/// The last lines of some output.
pub(super) struct Tail {
    pub(super) lines: VecDeque<String>,
    pub(super) capacity: usize,
}

impl Tail {
    pub(super) fn new(capacity: usize) -> Self {
        Tail {
            lines: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub(super) fn push(&mut self, line: String) {
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }

    pub(super) fn text(&self) -> String {
        self.lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The longest reduction behind one output element, when the op is known.
pub(super) fn reduction_len(workload: &Workload) -> Option<u64> {
    let u = u64::from;
    match &workload.op {
        Op::Matmul { shape } => Some(u(shape.k)),
        Op::BatchMatmul { shape } => Some(u(shape.k)),
        Op::Dense { shape } => Some(u(shape.in_features)),
        Op::Conv2dNchw { shape } | Op::Conv2dNhwc { shape } => {
            Some(u(shape.in_channels) * u(shape.kernel[0]) * u(shape.kernel[1]))
        }
        Op::DepthwiseConv2dNchw { shape } => Some(u(shape.kernel[0]) * u(shape.kernel[1])),
        Op::Tvmscript { .. } | Op::Model { .. } => None,
    }
}
