//! Result exports shared by the CLI (`tunefleet results` / `export`) and the
//! web dashboard's download buttons: JSON, CSV and a MetaSchedule database.
//!
//! Pure functions from job views to text; no I/O, so the browser produces
//! byte-for-byte the files the CLI writes.

use crate::protocol::JobView;
use serde_json::Value;
use std::fmt;

/// Columns of the CSV export, in order.
pub const CSV_HEADER: [&str; 12] = [
    "job_id",
    "name",
    "op",
    "shape",
    "dtype",
    "state",
    "attempts",
    "worker",
    "best_latency_s",
    "gflops",
    "trials_done",
    "trials_total",
];

/// File names of a MetaSchedule JSON database (what
/// `tvm.s_tir.meta_schedule.database.JSONDatabase(work_dir=DIR)` opens).
pub const METASCHEDULE_WORKLOAD_FILE: &str = "database_workload.json";
pub const METASCHEDULE_RECORD_FILE: &str = "database_tuning_record.json";

/// `12.3 µs`, `4.567 ms`, `1.234 s`: the unit that keeps 3–4 significant digits.
pub fn format_latency(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".into();
    }
    if seconds < 1e-3 {
        format!("{:.1} µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{seconds:.3} s")
    }
}

/// Achieved GFLOP/s: what the worker reported, else computed from the
/// workload's flop count and the best latency.
pub fn job_gflops(job: &JobView) -> Option<f64> {
    if let Some(g) = job.result.as_ref().and_then(|r| r.gflops) {
        return g.is_finite().then_some(g);
    }
    let latency = job.best_latency_s?;
    let flops = job.workload.flops()?;
    (latency > 0.0 && latency.is_finite()).then(|| flops / latency / 1e9)
}

/// One CSV field (RFC 4180): quoted when it holds a comma, quote, CR/LF or
/// leading/trailing space, with quotes doubled.
pub fn csv_field(value: &str) -> String {
    let needs_quotes = value.contains([',', '"', '\n', '\r'])
        || value.starts_with(char::is_whitespace)
        || value.ends_with(char::is_whitespace);
    if needs_quotes {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

/// One CSV line (CRLF-free: `\n` line ends).
pub fn csv_line<S: AsRef<str>>(fields: &[S]) -> String {
    let mut line = fields
        .iter()
        .map(|f| csv_field(f.as_ref()))
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

/// Pretty JSON array of the job views (the protocol's `JobView` as is), with
/// a final newline.
pub fn to_json(jobs: &[JobView]) -> String {
    // Serialising plain data (string keys, finite or null numbers) cannot fail.
    let mut text = serde_json::to_string_pretty(jobs).unwrap_or_else(|_| "[]".into());
    text.push('\n');
    text
}

/// CSV with [`CSV_HEADER`]; empty fields for unknown values.
pub fn to_csv(jobs: &[JobView]) -> String {
    let mut out = csv_line(&CSV_HEADER);
    for job in jobs {
        let row = [
            job.job_id.clone(),
            job.name.clone(),
            job.workload.op_name().to_string(),
            job.workload.shape_summary(),
            job.workload.dtype.clone(),
            job.state.to_string(),
            job.attempts.to_string(),
            job.worker.clone().unwrap_or_default(),
            job.best_latency_s
                .map(|l| l.to_string())
                .unwrap_or_default(),
            job_gflops(job)
                .map(|g| format!("{g:.3}"))
                .unwrap_or_default(),
            job.trials_done.to_string(),
            job.trials_total.to_string(),
        ];
        out.push_str(&csv_line(&row));
    }
    out
}

/// The two files of a MetaSchedule JSON database, as text.
#[derive(Debug, Default, PartialEq)]
pub struct MetascheduleDb {
    /// `database_workload.json`: one `[structural_hash, base64_json]` per line.
    pub workloads: String,
    /// `database_tuning_record.json`: one `[workload_index, record]` per line.
    pub records: String,
    pub jobs: usize,
    pub record_count: usize,
    pub skipped: usize,
}

/// No job had MetaSchedule records (only the `tvm` backend produces them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub struct NoMetascheduleRecords {
    /// Jobs looked at, all without records in MetaSchedule form.
    pub skipped: usize,
}

impl fmt::Display for NoMetascheduleRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no job has MetaSchedule records to export ({} {} without: only jobs tuned by the tvm backend have them)",
            self.skipped,
            if self.skipped == 1 { "job" } else { "jobs" }
        )
    }
}

/// The workload (database form) and MetaSchedule records of one job, when
/// its worker reported them (the `tvm` backend does, `sim` does not).
fn metaschedule_parts(job: &JobView) -> Option<(&Value, Vec<&Value>)> {
    let workload = job
        .result
        .as_ref()
        .and_then(|r| r.extra.get("workload"))
        .filter(|w| w.as_array().is_some_and(|a| a.len() == 2))?;
    let records: Vec<&Value> = job
        .records
        .iter()
        .map(|r| &r.record)
        .filter(|r| r.as_array().is_some_and(|a| a.len() == 4))
        .collect();
    (!records.is_empty()).then_some((workload, records))
}

/// Whether [`metaschedule_database`] would export this job.
pub fn has_metaschedule_records(job: &JobView) -> bool {
    metaschedule_parts(job).is_some()
}

/// `tunefleet_workloads.json` for the jobs [`metaschedule_database`]
/// exports: one [`crate::import::WorkloadKey`] per line (a workload's content
/// key and its database line), each once, after the lines of `existing`
/// (an earlier file, kept when merging). `tunefleet import` reads it, so that
/// another farm's jobs of these workloads are seeded before they first run.
pub fn workload_keys(jobs: &[JobView], existing: &str) -> String {
    let mut lines: Vec<String> = existing
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    for job in jobs {
        let Some((workload, _)) = metaschedule_parts(job) else {
            continue;
        };
        let key = crate::import::WorkloadKey {
            content_key: job.workload.content_key(),
            workload: workload.clone(),
        };
        if let Ok(line) = serde_json::to_string(&key) {
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// Builds the database from the jobs' stored best records. Workloads that
/// appear in several jobs (same structure, different targets) are written once.
pub fn metaschedule_database(jobs: &[JobView]) -> Result<MetascheduleDb, NoMetascheduleRecords> {
    let mut db = MetascheduleDb::default();
    let mut index: Vec<String> = Vec::new();
    for job in jobs {
        let Some((workload, records)) = metaschedule_parts(job) else {
            db.skipped += 1;
            continue;
        };
        let line = workload.to_string();
        let i = match index.iter().position(|w| *w == line) {
            Some(i) => i,
            None => {
                index.push(line);
                index.len() - 1
            }
        };
        for record in records {
            db.records
                .push_str(&serde_json::json!([i, record]).to_string());
            db.records.push('\n');
            db.record_count += 1;
        }
        db.jobs += 1;
    }
    if db.jobs == 0 {
        return Err(NoMetascheduleRecords {
            skipped: db.skipped,
        });
    }
    for line in index {
        db.workloads.push_str(&line);
        db.workloads.push('\n');
    }
    Ok(db)
}

#[cfg(test)]
mod tests;
