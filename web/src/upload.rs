//! Checking a workload file in the browser before it is sent: the same parser
//! and validation as the master (`tunefleet_shared::workload`), so what the
//! preview accepts the master accepts, and errors point at the line and field.
//!
//! Lorien workload files are recognised and converted like `tunefleet submit`
//! does; the converted YAML is what gets submitted.

use std::collections::HashSet;

use tunefleet_shared::lorien;
use tunefleet_shared::workload::{parse_workload_file, Workload, WorkloadErrors, DEFAULT_TRIALS};

use crate::format::target_summary;

/// One row of the preview table.
#[derive(Clone, Debug, PartialEq)]
pub struct PreviewRow {
    pub name: String,
    pub op: String,
    pub shape: String,
    pub dtype: String,
    pub target: String,
    pub trials: u32,
    pub job_id: String,
    /// The master already has this job: it will be skipped as a duplicate.
    pub known: bool,
}

/// One problem, ready to show.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorRow {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub field: Option<String>,
    pub message: String,
    /// The text of the offending line, when the error has one.
    pub source: Option<String>,
}

/// What the upload box shows for the current text.
#[derive(Clone, Debug, PartialEq, Default)]
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
}

/// Parses and validates `text`; `known` holds the job ids the master already has.
pub fn check(text: &str, filename: &str, known: &HashSet<&str>) -> Checked {
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
            rows: workloads.iter().map(|w| preview_row(w, known)).collect(),
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

fn preview_row(w: &Workload, known: &HashSet<&str>) -> PreviewRow {
    let job_id = w.job_id();
    PreviewRow {
        name: w.name.clone(),
        op: w.op_name().to_string(),
        shape: w.shape_summary(),
        dtype: w.dtype.clone(),
        target: target_summary(&w.target),
        trials: w.trials,
        known: known.contains(job_id.as_str()),
        job_id,
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

/// `3 new jobs, 1 duplicate skipped`.
pub fn submit_summary(new_jobs: usize, duplicates: usize) -> String {
    let jobs = if new_jobs == 1 { "job" } else { "jobs" };
    let mut text = format!("{new_jobs} new {jobs}");
    if duplicates > 0 {
        let dups = if duplicates == 1 {
            "duplicate"
        } else {
            "duplicates"
        };
        text.push_str(&format!(", {duplicates} {dups} skipped"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "target: {kind: llvm, num-cores: 2}\ntrials: 8\nworkloads:\n  - name: mm64\n    op: matmul\n    shape: {m: 64, n: 64, k: 64}\n  - name: d\n    op: dense\n    shape: {batch: 1, in_features: 256, out_features: 128}\n    dtype: float16\n";

    #[test]
    fn a_valid_file_gives_preview_rows() {
        let none = HashSet::new();
        match check(GOOD, "good.yaml", &none) {
            Checked::Valid {
                rows,
                yaml,
                converted_from_lorien,
            } => {
                assert_eq!(rows.len(), 2);
                assert_eq!(rows[0].name, "mm64");
                assert_eq!(rows[0].op, "matmul");
                assert_eq!(rows[0].shape, "m=64 n=64 k=64");
                assert_eq!(rows[0].dtype, "float32");
                assert_eq!(rows[0].target, "llvm num-cores=2");
                assert_eq!(rows[0].trials, 8);
                assert_eq!(rows[1].dtype, "float16");
                assert!(!rows[0].known);
                assert_eq!(yaml, GOOD);
                assert!(!converted_from_lorien);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn known_jobs_are_marked_as_duplicates() {
        let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &HashSet::new()) else {
            panic!()
        };
        let known: HashSet<&str> = [rows[1].job_id.as_str()].into();
        let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &known) else {
            panic!()
        };
        assert_eq!(
            rows.iter().map(|r| r.known).collect::<Vec<_>>(),
            [false, true]
        );
    }

    #[test]
    fn errors_carry_line_field_and_source() {
        let bad = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 64, n: -3, k: 64}\n  - name: b\n    op: matmal\n    shape: {m: 1, n: 1, k: 1}\n";
        let Checked::Invalid(rows) = check(bad, "bad.yaml", &HashSet::new()) else {
            panic!()
        };
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].line, Some(5));
        assert_eq!(rows[0].field.as_deref(), Some("workloads[0].shape.n"));
        assert_eq!(
            rows[0].source.as_deref(),
            Some("    shape: {m: 64, n: -3, k: 64}")
        );
        assert_eq!(rows[1].line, Some(7));
        assert!(rows[1].message.contains("matmul"), "{:?}", rows[1]);
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let Checked::Invalid(rows) = check("workloads: [\n  {name: a\n", "x.yaml", &HashSet::new())
        else {
            panic!()
        };
        assert!(rows[0].line.is_some(), "{rows:?}");
        assert_eq!(
            check("  \n", "x.yaml", &HashSet::new()),
            Checked::Empty,
            "blank text is not an error"
        );
    }

    #[test]
    fn lorien_files_are_converted() {
        let text = "workload:\n- '!!python/object:lorien.workload.Workload {args: [[TENSOR, [1, 64], float32], [TENSOR, [32, 64], float32], null, float32], target: llvm, task_name: dense_nopack.x86}'\n";
        match check(text, "l.yaml", &HashSet::new()) {
            Checked::Valid {
                rows,
                yaml,
                converted_from_lorien,
            } => {
                assert!(converted_from_lorien);
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].op, "dense");
                assert!(yaml.contains("workloads:"), "{yaml}");
                // What is sent parses as our own format.
                assert_eq!(parse_workload_file(&yaml, "c.yaml").unwrap().len(), 1);
            }
            Checked::Invalid(rows) => panic!("{rows:?}"),
            Checked::Empty => panic!("empty"),
        }
    }

    #[test]
    fn summary_reads_well() {
        assert_eq!(submit_summary(3, 0), "3 new jobs");
        assert_eq!(submit_summary(1, 1), "1 new job, 1 duplicate skipped");
        assert_eq!(submit_summary(0, 2), "0 new jobs, 2 duplicates skipped");
    }
}
