//! Checking an ONNX model in the browser before it is sent, as
//! `tunefleet submit MODEL.onnx` does (`server/src/commands/model.rs`):
//! [`onnx::summarize`] → [`onnx::check_inputs`] with the shapes the user typed →
//! [`onnx::strip_weights`] → base64. What the preview accepts, the master's own
//! checks (the same functions) accept.
//!
//! Loading ([`load`], in the checker module `web-check`, fetched when a file
//! first arrives) reads, strips and base64-encodes the file once; the form
//! (run name, trials, shapes of dynamic inputs) is checked here on every
//! keystroke ([`check_form`]), which only looks at the summary.

use std::collections::BTreeMap;

use tunefleet_shared::model::{
    check_model_name, ModelMode, ModelSource, ModelSubmission, TunerSettings, DEFAULT_MODEL_TRIALS,
};
use tunefleet_shared::onnx::{self, OnnxError};
pub use web_check::model_file::{human_bytes, load, InputRow, LoadedModel};

/// Most trials a run may have (the master's limit).
pub const MAX_MODEL_TRIALS: u32 = 1_000_000;

/// Protobuf messages end at 2 GiB, so no self-contained `.onnx` file is larger.
pub const MAX_ONNX_FILE_BYTES: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// True for a file name that names an ONNX model (`*.onnx`, any case).
pub fn is_model_file(name: &str) -> bool {
    name.len() > 5
        && name
            .get(name.len() - 5..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".onnx"))
}

/// What the user can set before submitting.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelForm {
    pub name: String,
    pub trials: String,
    /// Input name → the sizes typed for it (`1,3,224,224`); dynamic inputs only.
    pub shapes: BTreeMap<String, String>,
}

impl ModelForm {
    /// The defaults for `file`: its stem as the run name, 2000 trials.
    pub fn for_file(file: &str) -> ModelForm {
        ModelForm {
            name: default_name(file),
            trials: DEFAULT_MODEL_TRIALS.to_string(),
            shapes: BTreeMap::new(),
        }
    }
}

/// The file's stem, with characters a run name may not hold replaced by `-`
/// (`my model.onnx` → `my-model`), at most 64 characters.
pub fn default_name(file: &str) -> String {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    let stem = if is_model_file(base) {
        &base[..base.len() - 5]
    } else {
        base
    };
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "model".to_string()
    } else {
        name
    }
}

/// Which form field a problem is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    Name,
    Trials,
    /// The shape of this input.
    Shape(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub field: Field,
    pub message: String,
}

/// A form that passed every check.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub name: String,
    pub trials: u32,
    pub input_shapes: BTreeMap<String, Vec<i64>>,
    /// Every input's final shape, in model order.
    pub resolved: Vec<(String, Vec<i64>)>,
}

/// Checks the form against the model; every problem at once. `existing`
/// holds the names of the master's model runs (a name can be used once).
pub fn check_form(
    model: &LoadedModel,
    form: &ModelForm,
    existing: &[&str],
) -> Result<Checked, Vec<Problem>> {
    let mut problems = Vec::new();
    let name = form.name.trim().to_string();
    if let Err(message) = check_model_name(&name) {
        problems.push(Problem {
            field: Field::Name,
            message,
        });
    } else if existing.contains(&name.as_str()) {
        problems.push(Problem {
            field: Field::Name,
            message: format!(
                "the master already has a model run named `{name}`: choose another name"
            ),
        });
    }
    let trials = match form.trials.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_MODEL_TRIALS).contains(&n) => Some(n),
        _ => {
            problems.push(Problem {
                field: Field::Trials,
                message: format!(
                    "trials must be a whole number from 1 to {MAX_MODEL_TRIALS}, got `{}`",
                    form.trials.trim()
                ),
            });
            None
        }
    };
    let mut input_shapes = BTreeMap::new();
    let mut shape_problem = false;
    for input in model.inputs.iter().filter(|i| i.needs_shape) {
        let Some(text) = form.shapes.get(&input.name) else {
            continue;
        };
        let text = text.trim();
        // `data=1,3,224,224` pasted from the CLI's syntax works too.
        let dims = text
            .strip_prefix(&format!("{}=", input.name))
            .unwrap_or(text)
            .trim();
        if dims.is_empty() {
            continue;
        }
        match onnx::parse_input_shape(&format!("{}={dims}", input.name)) {
            Ok((_, shape)) => {
                input_shapes.insert(input.name.clone(), shape);
            }
            Err(e) => {
                shape_problem = true;
                problems.push(Problem {
                    field: Field::Shape(input.name.clone()),
                    message: shape_message(&e),
                });
            }
        }
    }
    let mut resolved = Vec::new();
    if !shape_problem {
        match onnx::check_inputs(&model.summary, &input_shapes) {
            Ok(r) => resolved = r,
            Err(e) => problems.push(Problem {
                field: Field::Shape(error_input(&e).unwrap_or_default()),
                message: shape_message(&e),
            }),
        }
    }
    match (problems.is_empty(), trials) {
        (true, Some(trials)) => Ok(Checked {
            name,
            trials,
            input_shapes,
            resolved,
        }),
        _ => Err(problems),
    }
}

/// The input an input-shape error is about.
fn error_input(e: &OnnxError) -> Option<String> {
    match e {
        OnnxError::DynamicDim { input, .. }
        | OnnxError::UnknownDim { input, .. }
        | OnnxError::NoShape { input }
        | OnnxError::RankMismatch { input, .. }
        | OnnxError::DimMismatch { input, .. } => Some(input.clone()),
        OnnxError::BadInputShape { arg, .. } => {
            Some(arg.rsplit_once('=').map_or(arg.as_str(), |(n, _)| n).into())
        }
        _ => None,
    }
}

/// An input-shape error in the page's terms (the shared messages name the
/// CLI's `--input-shape` flag; here the shapes are fields of the form).
pub fn shape_message(e: &OnnxError) -> String {
    match e {
        OnnxError::DynamicDim {
            input,
            index,
            param,
            ..
        } => format!(
            "input `{input}` has a dynamic dimension (dim {index} = `{param}`): give its shape"
        ),
        OnnxError::UnknownDim { input, index, .. } => {
            format!("input `{input}` has a dimension of unknown size (dim {index}): give its shape")
        }
        OnnxError::NoShape { input } => {
            format!("input `{input}` has no shape in the model: give its full shape")
        }
        OnnxError::RankMismatch {
            input,
            model,
            given,
        } => {
            format!("shape of `{input}`: {given} dimensions given, but the model input has {model}")
        }
        OnnxError::DimMismatch {
            input,
            index,
            model,
            given,
        } => {
            format!("shape of `{input}`: dim {index} is {given}, but the model fixes it to {model}")
        }
        OnnxError::BadInputShape { arg, reason } => {
            let input = arg.rsplit_once('=').map_or(arg.as_str(), |(n, _)| n);
            format!("shape of `{input}`: {reason} (sizes separated by commas, e.g. 1,3,224,224)")
        }
        other => other.to_string(),
    }
}

/// What is sent for a checked form (the base64 of the stripped model).
pub fn submission(model: &LoadedModel, checked: &Checked) -> ModelSubmission {
    ModelSubmission {
        name: checked.name.clone(),
        // The best mode, as the CLI's `submit` gives without flags.
        source: ModelSource::new(
            model.stripped_b64.clone(),
            checked.input_shapes.clone(),
            ModelMode::BEST,
        ),
        trials: Some(checked.trials),
        trials_per_round: None,
        target: None,
        tuner: TunerSettings::default(),
        extracted: None,
    }
}

/// `model run `NAME` accepted: extracting tasks`.
pub fn accepted_text(name: &str) -> String {
    format!("model run `{name}` accepted: extracting tasks")
}

#[cfg(test)]
mod tests;
