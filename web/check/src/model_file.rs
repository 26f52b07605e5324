//! Reading an ONNX model before it is sent, as `tunefleet submit MODEL.onnx`
//! does (`server/src/commands/model.rs`): [`onnx::summarize`] →
//! [`onnx::check_ops`] → [`onnx::strip_weights`] → base64. What this accepts,
//! the master's own checks (the same functions) accept.
//!
//! Loading reads and strips the file once; the page then checks its form
//! (run name, trials, shapes of dynamic inputs) against the summary on every
//! keystroke without coming back here.

use serde::{Deserialize, Serialize};
use tunefleet_shared::model::{base64, MAX_MODEL_BYTES, STRIP_MIN_ELEMENTS};
use tunefleet_shared::onnx::{self, Dim, OnnxSummary, StripReport};
use tunefleet_shared::tree::FromTree;

/// One graph input, as the preview lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct InputRow {
    pub name: String,
    /// `float32`, or `type 17` for element types without a name, or `?`.
    pub dtype: String,
    /// `1×3×224×224`, `N×4` (a named dimension), `?×4` (unknown), or
    /// `unknown shape`.
    pub dims: String,
    /// Some dimension is not fixed: the user must give this input's shape.
    pub needs_shape: bool,
    /// A shape to suggest (`1,3,224,224`): the fixed sizes, 1 for the others.
    pub example: String,
}

/// A model file that passed the file-level checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct LoadedModel {
    pub file: String,
    pub summary: OnnxSummary,
    pub inputs: Vec<InputRow>,
    /// The model without its weights, base64-encoded: what is uploaded.
    pub stripped_b64: String,
    pub report: StripReport,
}

impl LoadedModel {
    /// Number of distinct operator types.
    pub fn op_type_count(&self) -> usize {
        self.summary.op_types.len()
    }

    /// The operator types, most used first (`Conv ×26`).
    pub fn top_ops(&self, n: usize) -> Vec<(String, usize)> {
        let mut ops: Vec<(String, usize)> = self
            .summary
            .op_types
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ops.truncate(n);
        ops
    }

    /// The line that says what is uploaded and why the weights are not.
    pub fn weights_note(&self) -> String {
        let r = &self.report;
        let what = if r.tensors > 0 {
            format!(
                "{} weight {} stripped",
                r.tensors,
                if r.tensors == 1 { "tensor" } else { "tensors" }
            )
        } else {
            "the file holds no weight data to strip".to_string()
        };
        format!(
            "The weights are not uploaded: {} → {} ({what}). The fleet tunes with random weights: weights do not change which kernels a model needs.",
            human_bytes(r.bytes_before),
            human_bytes(r.bytes_after)
        )
    }
}

/// `12.3 MiB`, `4.0 KiB`, `512 B` (the CLI's spelling).
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Reads, checks and strips a model file. Errors are one line that starts with
/// the file name: not an ONNX model, external data, too big without weights.
pub fn load(file: &str, bytes: &[u8]) -> Result<LoadedModel, String> {
    let summary = onnx::summarize(bytes).map_err(|e| format!("{file}: {e}"))?;
    onnx::check_ops(&summary).map_err(|e| format!("{file}: {e}"))?;
    let (stripped, report) =
        onnx::strip_weights(bytes, STRIP_MIN_ELEMENTS).map_err(|e| format!("{file}: {e}"))?;
    if stripped.len() > MAX_MODEL_BYTES {
        return Err(format!(
            "{file}: {} without weights is over the {} upload limit",
            human_bytes(stripped.len() as u64),
            human_bytes(MAX_MODEL_BYTES as u64)
        ));
    }
    let inputs = summary.inputs.iter().map(input_row).collect();
    Ok(LoadedModel {
        file: file.to_string(),
        summary,
        inputs,
        stripped_b64: base64::encode(&stripped),
        report,
    })
}

fn input_row(input: &onnx::ValueInfo) -> InputRow {
    let dtype = match onnx::elem_type_name(input.elem_type) {
        Some(name) => name.to_string(),
        None if input.elem_type == 0 => "?".to_string(),
        None => format!("type {}", input.elem_type),
    };
    let fixed = |d: &Dim| matches!(d, Dim::Fixed(v) if *v > 0);
    let dims = if !input.rank_known {
        "unknown shape".to_string()
    } else if input.dims.is_empty() {
        "scalar".to_string()
    } else {
        let parts: Vec<String> = input
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) if *v > 0 => v.to_string(),
                Dim::Fixed(_) | Dim::Unknown => "?".to_string(),
                Dim::Named(p) => p.clone(),
            })
            .collect();
        parts.join("×")
    };
    InputRow {
        name: input.name.clone(),
        dtype,
        dims,
        needs_shape: !input.rank_known || !input.dims.iter().all(fixed),
        example: if input.rank_known {
            input.example_shape()
        } else {
            "D0,D1,...".to_string()
        },
    }
}
