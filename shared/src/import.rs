//! Records a team already has, imported to seed the farm
//! (`tunefleet import --format metaschedule DIR`).
//!
//! A MetaSchedule JSON database is two files: `database_workload.json`, one
//! `[structural_hash, base64_module]` line per workload, and
//! `database_tuning_record.json`, one `[workload_index, record]` line per
//! measured schedule, where a record is `[trace, run_secs, target,
//! args_info]`. This module parses them into [`ImportedWorkload`]s (pure, so
//! the CLI, the master and the fuzzer share it) and checks what the master
//! receives.
//!
//! Imported records only *seed* a search: they were measured elsewhere, so
//! they never count as trials done here and never answer a job on their own.
//! A job is seeded when its database workload line is known before it runs:
//! a model's task (its line comes with extraction), a workload the fleet has
//! already run with the `tvm` backend, or a workload named in a tunefleet
//! export's `tunefleet_workloads.json` ([`WorkloadKey`]: the workload's
//! content key beside its line), which `tunefleet export --format
//! metaschedule` writes so that one farm's export seeds another.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::target::Target;

/// The file beside a MetaSchedule database that maps tunefleet workloads
/// (by content key) to their database lines.
pub const WORKLOAD_KEYS_FILE: &str = "tunefleet_workloads.json";

/// Most records kept per imported workload (the fastest): a seed needs the
/// best schedules, not every one ever measured.
pub const MAX_IMPORTED_RECORDS: usize = 256;

/// One workload of an imported database and its records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImportedWorkload {
    /// The database workload line, `[structural_hash, base64_module]`.
    pub workload: Value,
    /// Records, each `[trace, run_secs, target, args_info]`.
    pub records: Vec<Value>,
}

/// A tunefleet workload's content key and its database workload line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkloadKey {
    pub content_key: String,
    pub workload: Value,
}

/// What an import added.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImportReport {
    /// Workloads the master had no imported records for before.
    pub workloads_new: usize,
    /// Records added.
    pub records_new: usize,
    /// Records it already had (not added twice).
    pub records_known: usize,
    /// Workload keys (content key → line) added.
    pub keys_new: usize,
}

/// Whether `line` is a database workload line, `[hash, base64]`.
pub fn check_workload_line(line: &Value) -> Result<(), String> {
    match line.as_array().map(Vec::as_slice) {
        Some([Value::String(hash), Value::String(module)])
            if !hash.is_empty() && !module.is_empty() =>
        {
            Ok(())
        }
        _ => {
            Err("a workload must be [structural_hash, base64_module], two non-empty strings".into())
        }
    }
}

/// Checks a record's shape and returns the target it was measured for.
pub fn record_target(record: &Value) -> Result<Target, String> {
    let Some([trace, run_secs, target, _args]) = record.as_array().map(Vec::as_slice) else {
        return Err("a record must be [trace, run_secs, target, args_info]".into());
    };
    if !trace.is_array() {
        return Err("the record's trace must be an array".into());
    }
    if !run_secs.as_array().is_some_and(|secs| {
        !secs.is_empty() && secs.iter().all(|s| s.as_f64().is_some_and(f64::is_finite))
    }) {
        return Err("the record's run_secs must be a non-empty array of numbers".into());
    }
    let Value::Object(map) = target else {
        return Err("the record's target must be an object with a `kind`".into());
    };
    Target::try_from(map.clone()).map_err(|e| format!("the record's target: {e}"))
}

/// Mean of a record's measured times (`None` when it has none).
pub fn record_seconds(record: &Value) -> Option<f64> {
    let secs = record.get(1)?.as_array()?;
    let values: Vec<f64> = secs.iter().filter_map(Value::as_f64).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

impl ImportedWorkload {
    /// Adds `records` not already here, then keeps the fastest
    /// [`MAX_IMPORTED_RECORDS`]. Returns (added, already here).
    pub fn absorb(&mut self, records: Vec<Value>) -> (usize, usize) {
        let (mut added, mut known) = (0, 0);
        for record in records {
            if self.records.contains(&record) {
                known += 1;
            } else {
                self.records.push(record);
                added += 1;
            }
        }
        keep_fastest(&mut self.records);
        (added, known)
    }

    /// Checks what a client sent (the master trusts no import).
    pub fn check(&self) -> Result<(), String> {
        check_workload_line(&self.workload)?;
        for (i, record) in self.records.iter().enumerate() {
            record_target(record).map_err(|e| format!("records[{i}]: {e}"))?;
        }
        Ok(())
    }
}

impl WorkloadKey {
    pub fn check(&self) -> Result<(), String> {
        if self.content_key.is_empty() || self.content_key.len() > 64 {
            return Err("content_key must be 1 to 64 characters".into());
        }
        check_workload_line(&self.workload)
    }
}

/// A line of an imported file that is not what it should be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {message}")]
pub struct ImportError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// Parses a MetaSchedule JSON database (the text of its two files, named
/// `workload_file` and `record_file` in errors). Workloads with the same line
/// are merged; each workload keeps its [`MAX_IMPORTED_RECORDS`] fastest
/// records, each once. Workloads without records are left out.
pub fn parse_metaschedule_database(
    workloads_text: &str,
    workload_file: &str,
    records_text: &str,
    record_file: &str,
) -> Result<Vec<ImportedWorkload>, ImportError> {
    let error = |file: &str, line: usize, message: String| ImportError {
        file: file.to_string(),
        line,
        message,
    };
    let mut lines: Vec<Value> = Vec::new();
    // Index in the file → index in `lines` (duplicates share one).
    let mut slot: Vec<usize> = Vec::new();
    for (n, text) in workloads_text.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| error(workload_file, n + 1, format!("not JSON: {e}")))?;
        check_workload_line(&value).map_err(|e| error(workload_file, n + 1, e))?;
        let at = match lines.iter().position(|l| *l == value) {
            Some(at) => at,
            None => {
                lines.push(value);
                lines.len() - 1
            }
        };
        slot.push(at);
    }
    let mut records: Vec<Vec<Value>> = vec![Vec::new(); lines.len()];
    for (n, text) in records_text.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| error(record_file, n + 1, format!("not JSON: {e}")))?;
        let Some([index, record]) = value.as_array().map(Vec::as_slice) else {
            return Err(error(
                record_file,
                n + 1,
                "a line must be [workload_index, record]".into(),
            ));
        };
        let at = index
            .as_u64()
            .and_then(|i| slot.get(usize::try_from(i).ok()?))
            .ok_or_else(|| {
                error(
                    record_file,
                    n + 1,
                    format!(
                        "workload index {index} is not a line of {workload_file} (it has {})",
                        slot.len()
                    ),
                )
            })?;
        record_target(record).map_err(|e| error(record_file, n + 1, e))?;
        if !records[*at].contains(record) {
            records[*at].push(record.clone());
        }
    }
    Ok(lines
        .into_iter()
        .zip(records)
        .filter(|(_, records)| !records.is_empty())
        .map(|(workload, mut records)| {
            keep_fastest(&mut records);
            ImportedWorkload { workload, records }
        })
        .collect())
}

/// Parses `tunefleet_workloads.json`: one [`WorkloadKey`] object per line.
pub fn parse_workload_keys(text: &str, file: &str) -> Result<Vec<WorkloadKey>, ImportError> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let key: WorkloadKey = serde_json::from_str(line).map_err(|e| ImportError {
            file: file.to_string(),
            line: n + 1,
            message: e.to_string(),
        })?;
        key.check().map_err(|message| ImportError {
            file: file.to_string(),
            line: n + 1,
            message,
        })?;
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// Sorts records fastest first and keeps [`MAX_IMPORTED_RECORDS`].
pub fn keep_fastest(records: &mut Vec<Value>) {
    records.sort_by(|a, b| {
        let time = |r: &Value| record_seconds(r).unwrap_or(f64::INFINITY);
        time(a).total_cmp(&time(b))
    });
    records.truncate(MAX_IMPORTED_RECORDS);
}

#[cfg(test)]
mod tests;
