//! Checking a workload file before it is sent: the same parser and validation
//! as the master (`tunefleet_shared::workload`), so what the preview accepts
//! the master accepts, and errors point at the line and field.
//!
//! Lorien workload files are recognised and converted like `tunefleet submit`
//! does; the converted YAML is what gets submitted.

use serde::{Deserialize, Serialize};
use tunefleet_shared::lorien;
use tunefleet_shared::target::Target;
use tunefleet_shared::tree::FromTree;
use tunefleet_shared::workload::{parse_workload_file, Workload, WorkloadErrors, DEFAULT_TRIALS};

/// One row of the preview table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct PreviewRow {
    pub name: String,
    pub op: String,
    pub shape: String,
    pub dtype: String,
    pub target: String,
    pub trials: u32,
    pub job_id: String,
    /// The master already has this job: it will be skipped as a duplicate.
    /// Set by the page, which knows the fleet; the checker leaves it false.
    #[serde(default)]
    pub known: bool,
}

/// One problem, ready to show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct ErrorRow {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub field: Option<String>,
    pub message: String,
    /// The text of the offending line, when the error has one.
    pub source: Option<String>,
}

/// What the upload box shows for the current text.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, FromTree)]
pub enum Checked {
    /// Nothing to check yet.
    #[default]
    Empty,
    Valid {
        rows: Vec<PreviewRow>,
        /// The text to submit (the file itself, or its conversion from Lorien).
        yaml: String,
        /// Set when the file was a Lorien file, converted here.
        converted_from_lorien: bool,
    },
    Invalid(Vec<ErrorRow>),
}

impl Checked {
    pub fn is_valid(&self) -> bool {
        matches!(self, Checked::Valid { .. })
    }

    /// Marks the rows whose job the master already has.
    pub fn mark_known(&mut self, is_known: impl Fn(&str) -> bool) {
        if let Checked::Valid { rows, .. } = self {
            for row in rows {
                row.known = is_known(&row.job_id);
            }
        }
    }

    /// One problem that is not in the file: the checker itself failed.
    pub fn failed(message: String) -> Checked {
        Checked::Invalid(vec![ErrorRow {
            line: None,
            column: None,
            field: None,
            message,
            source: None,
        }])
    }
}

/// Parses and validates `text` (named `filename` in errors).
pub fn check(text: &str, filename: &str) -> Checked {
    if text.trim().is_empty() {
        return Checked::Empty;
    }
    let lorien = lorien::is_lorien_file(text);
    let parsed = if lorien {
        lorien::import_lorien(text, filename, DEFAULT_TRIALS)
    } else {
        parse_workload_file(text, filename)
    };
    match parsed {
        Ok(workloads) => Checked::Valid {
            rows: workloads.iter().map(preview_row).collect(),
            yaml: if lorien {
                lorien::to_tunefleet_yaml_from(&workloads, filename)
            } else {
                text.to_owned()
            },
            converted_from_lorien: lorien,
        },
        Err(errors) => Checked::Invalid(error_rows(text, &errors)),
    }
}

/// `llvm num-cores=2 mcpu=znver4`: the kind, then every other attribute.
pub fn target_summary(target: &Target) -> String {
    let mut text = target.kind().to_string();
    for (key, value) in target.attrs() {
        if key == "kind" {
            continue;
        }
        text.push(' ');
        text.push_str(key);
        text.push('=');
        match value {
            serde_json::Value::String(s) => text.push_str(s),
            serde_json::Value::Array(items) if items.iter().all(|i| i.is_string()) => {
                let items: Vec<&str> = items.iter().filter_map(|i| i.as_str()).collect();
                text.push_str(&items.join(","));
            }
            other => text.push_str(&other.to_string()),
        }
    }
    text
}

fn preview_row(w: &Workload) -> PreviewRow {
    PreviewRow {
        name: w.name.clone(),
        op: w.op_name().to_string(),
        shape: w.shape_summary(),
        dtype: w.dtype.clone(),
        target: target_summary(&w.target),
        trials: w.trials,
        known: false,
        job_id: w.job_id(),
    }
}

fn error_rows(text: &str, errors: &WorkloadErrors) -> Vec<ErrorRow> {
    let lines: Vec<&str> = text.lines().collect();
    errors
        .iter()
        .map(|e| ErrorRow {
            line: e.line,
            column: e.column,
            field: e.field.clone(),
            message: e.message.clone(),
            source: e
                .line
                .and_then(|l| lines.get(l.checked_sub(1)?))
                .map(|s| s.trim_end().to_string())
                .filter(|s| !s.trim().is_empty()),
        })
        .collect()
}

#[cfg(test)]
mod tests;
