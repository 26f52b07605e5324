//! Imported records (`tunefleet import`): seeds for the search of jobs of
//! the same workloads.
//!
//! An imported record is keyed by its MetaSchedule database workload line
//! (structural hash and module), which only TVM can compute from a workload.
//! So a job is seeded only when its line is known before it runs: given with
//! the job (a model's task, whose line extraction reports), learned from a
//! job of the same content the fleet already ran with the `tvm` backend, or
//! imported beside the records (a tunefleet export's
//! `tunefleet_workloads.json`). The worker's driver checks the line against
//! the module it builds and ignores a warm start that does not match, so a
//! wrong key costs a seed, never a wrong result.
//!
//! Imports live in the store's `meta` table (`import:ID` → workload and
//! records, `workload-key:CONTENT_KEY` → line), like named tokens: no schema
//! change, and they follow a failover. Lines learned from jobs are not
//! stored: they are rebuilt from the jobs at start.

use std::collections::HashMap;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tunefleet_shared::import::{record_target, ImportReport, ImportedWorkload, WorkloadKey};
use tunefleet_shared::target::Target;

use super::Job;

/// `meta` keys of imported workloads start with this.
pub const IMPORT_PREFIX: &str = "import:";
/// `meta` keys of imported content key → line maps start with this.
pub const KEY_PREFIX: &str = "workload-key:";

/// A `meta` row to write.
pub type MetaRow = (String, Option<String>);

#[derive(Debug, Default)]
pub(super) struct ImportPool {
    /// Structural hash (the line's first column) → its imported records.
    /// The hash, not the whole line, is the key, as in MetaSchedule's own
    /// lookup and the driver's check: the module's base64 may differ
    /// between TVM versions for the same structure.
    entries: HashMap<String, ImportedWorkload>,
    /// Content key → line, imported.
    keys: HashMap<String, Value>,
    /// Content key → line, from jobs the fleet ran.
    learned: HashMap<String, Value>,
}

fn hash_of(line: &Value) -> Option<&str> {
    line.get(0).and_then(Value::as_str)
}

/// The `meta` key of an imported workload: its hash when that is a plain
/// number (as MetaSchedule writes it), else a digest of it.
fn entry_key(hash: &str) -> String {
    if !hash.is_empty() && hash.len() <= 40 && hash.bytes().all(|b| b.is_ascii_alphanumeric()) {
        format!("{IMPORT_PREFIX}{hash}")
    } else {
        format!(
            "{IMPORT_PREFIX}sha256-{}",
            hex::encode(&Sha256::digest(hash.as_bytes())[..16])
        )
    }
}

impl ImportPool {
    /// Loads what earlier imports stored. Rows that do not parse are skipped
    /// (a seed is an optimisation, never worth refusing to start) and
    /// returned as (key, reason), for the caller to log.
    pub(super) fn restore(&mut self, rows: Vec<(String, String)>) -> Vec<(String, String)> {
        let mut skipped = Vec::new();
        for (key, value) in rows {
            if key.starts_with(IMPORT_PREFIX) {
                match serde_json::from_str::<ImportedWorkload>(&value) {
                    Ok(entry) => {
                        if let Some(hash) = hash_of(&entry.workload) {
                            self.entries.insert(hash.to_string(), entry);
                        }
                    }
                    Err(e) => skipped.push((key, e.to_string())),
                }
            } else if let Some(content_key) = key.strip_prefix(KEY_PREFIX) {
                match serde_json::from_str::<Value>(&value) {
                    Ok(line) => {
                        self.keys.insert(content_key.to_string(), line);
                    }
                    Err(e) => skipped.push((key, e.to_string())),
                }
            }
        }
        skipped
    }

    /// Adds an import; returns what it added and the `meta` rows to commit.
    /// Checked whole first: a bad entry refuses the import, naming it.
    pub(super) fn import(
        &mut self,
        workloads: Vec<ImportedWorkload>,
        keys: Vec<WorkloadKey>,
    ) -> Result<(ImportReport, Vec<MetaRow>), String> {
        for (i, w) in workloads.iter().enumerate() {
            w.check().map_err(|e| format!("workloads[{i}]: {e}"))?;
        }
        for (i, k) in keys.iter().enumerate() {
            k.check().map_err(|e| format!("keys[{i}]: {e}"))?;
        }
        let mut report = ImportReport::default();
        let mut rows = Vec::new();
        for w in workloads {
            let Some(hash) = hash_of(&w.workload).map(str::to_string) else {
                continue; // `check` refused lines without one
            };
            let key = entry_key(&hash);
            let entry = self.entries.entry(hash).or_insert_with(|| {
                report.workloads_new += 1;
                ImportedWorkload {
                    workload: w.workload.clone(),
                    records: Vec::new(),
                }
            });
            let (added, known) = entry.absorb(w.records);
            report.records_new += added;
            report.records_known += known;
            if let Ok(value) = serde_json::to_string(&*entry) {
                rows.push((key, Some(value)));
            }
        }
        for k in keys {
            if self.keys.get(&k.content_key) != Some(&k.workload) {
                report.keys_new += 1;
                rows.push((
                    format!("{KEY_PREFIX}{}", k.content_key),
                    Some(k.workload.to_string()),
                ));
                self.keys.insert(k.content_key, k.workload);
            }
        }
        Ok((report, rows))
    }

    /// Remembers the line of a job the fleet ran, for later jobs of the
    /// same content.
    pub(super) fn learn(&mut self, job: &Job) {
        let line = job
            .view
            .result
            .as_ref()
            .and_then(|r| r.extra.get("workload"));
        if let Some(line) =
            line.filter(|l| tunefleet_shared::import::check_workload_line(l).is_ok())
        {
            self.learned
                .entry(job.content_key().to_owned())
                .or_insert_with(|| line.clone());
        }
    }

    /// Whether any records were imported (else no job can be seeded, and
    /// a submission need not look up its workload's line).
    pub(super) fn has_records(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The line of a workload with this content key, if known.
    pub(super) fn line_for(&self, content_key: &str) -> Option<&Value> {
        self.keys
            .get(content_key)
            .or_else(|| self.learned.get(content_key))
    }

    /// Imported records of `line` measured for a target that serves
    /// `target`, fastest first.
    pub(super) fn seeds_for(&self, line: &Value, target: &Target) -> Vec<Value> {
        hash_of(line)
            .and_then(|hash| self.entries.get(hash))
            .map(|entry| {
                entry
                    .records
                    .iter()
                    .filter(|r| record_target(r).is_ok_and(|t| t.serves(target)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}
