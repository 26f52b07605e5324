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
mod tests {
    use super::*;
    use crate::protocol::{JobState, ResultMeta, TuningRecord};

    use crate::testing::job;

    fn jobs() -> Vec<JobView> {
        let mut done = job("aa", JobState::Done);
        done.name = "mm, \"big\"".into();
        done.best_latency_s = Some(2.5e-5);
        done.worker = Some("gpu-1".into());
        done.trials_done = 16;
        done.records = vec![TuningRecord {
            latency_s: 2.5e-5,
            record: serde_json::json!({"trace": []}),
        }];
        vec![done, job("bb", JobState::Queued)]
    }

    #[test]
    fn latency_uses_a_readable_unit() {
        assert_eq!(format_latency(12.34e-6), "12.3 µs");
        assert_eq!(format_latency(4.5678e-3), "4.568 ms");
        assert_eq!(format_latency(1.5), "1.500 s");
        assert_eq!(format_latency(f64::NAN), "-");
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_field(" pad"), "\" pad\"");
        assert_eq!(csv_field(""), "");
        assert_eq!(csv_line(&["a", "b,c", ""]), "a,\"b,c\",\n");
    }

    #[test]
    fn json_is_an_array_of_job_objects() {
        let value: serde_json::Value = serde_json::from_str(&to_json(&jobs())).unwrap();
        let arr = value.as_array().unwrap();
        assert_eq!(arr.len(), 2);
        assert_eq!(arr[0]["job_id"], "aa");
        assert_eq!(arr[0]["state"], "done");
        assert_eq!(arr[0]["best_latency_s"], 2.5e-5);
        assert_eq!(arr[0]["records"].as_array().unwrap().len(), 1);
        assert!(arr[1]["best_latency_s"].is_null());
        assert!(to_json(&[]).starts_with("[]"));
    }

    #[test]
    fn csv_has_the_header_and_quotes_names() {
        let text = to_csv(&jobs());
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), CSV_HEADER.join(","));
        let row = lines.next().unwrap();
        assert!(row.starts_with("aa,\"mm, \"\"big\"\"\",matmul,"), "{row}");
        assert!(row.contains(",done,1,gpu-1,0.000025,"), "{row}");
        assert!(row.ends_with(",16,16"), "{row}");
        let queued = lines.next().unwrap();
        assert!(queued.contains(",queued,1,,,,0,16"), "{queued}");
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn gflops_prefers_the_reported_value() {
        let mut j = job("g", JobState::Done);
        assert_eq!(job_gflops(&j), None);
        j.best_latency_s = Some(1e-3);
        // 2 * 64^3 flops in 1 ms
        let computed = job_gflops(&j).unwrap();
        assert!((computed - 2.0 * 64f64.powi(3) / 1e-3 / 1e9).abs() < 1e-9);
        j.result = Some(meta(serde_json::Value::Null, Some(42.0)));
        assert_eq!(job_gflops(&j), Some(42.0));
    }

    fn meta(extra: serde_json::Value, gflops: Option<f64>) -> ResultMeta {
        ResultMeta {
            trials: 8,
            wall_time_s: 1.0,
            worker: "w".into(),
            backend: "tvm".into(),
            tvm_version: Some("0.27.0.post1".into()),
            gflops,
            extra,
            target: None,
        }
    }

    fn tuned(id: &str, workload: serde_json::Value, latencies: &[f64]) -> JobView {
        let mut j = job(id, JobState::Done);
        j.records = latencies
            .iter()
            .map(|l| TuningRecord {
                latency_s: *l,
                record: serde_json::json!([{"insts": []}, [l], {"kind": "llvm"}, []]),
            })
            .collect();
        j.result = Some(meta(serde_json::json!({ "workload": workload }), None));
        j
    }

    #[test]
    fn metaschedule_database_indexes_shared_workloads_and_skips_sim_jobs() {
        let w1 = serde_json::json!(["123", "AAAA"]);
        let w2 = serde_json::json!(["456", "BBBB"]);
        let jobs = vec![
            tuned("a", w1.clone(), &[1e-3, 2e-3]),
            job("sim", JobState::Done),
            tuned("b", w2.clone(), &[5e-4]),
            tuned("c", w1.clone(), &[3e-3]),
        ];
        assert!(has_metaschedule_records(&jobs[0]));
        assert!(!has_metaschedule_records(&jobs[1]));
        let db = metaschedule_database(&jobs).unwrap();
        assert_eq!((db.jobs, db.record_count, db.skipped), (3, 4, 1));
        let workloads: Vec<serde_json::Value> = db
            .workloads
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(workloads, vec![w1, w2]);
        let indexes: Vec<u64> = db
            .records
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()[0]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(indexes, vec![0, 0, 1, 0]);
        let err = metaschedule_database(&[job("sim", JobState::Done)]).unwrap_err();
        assert_eq!(err, NoMetascheduleRecords { skipped: 1 });
        assert!(err.to_string().contains("(1 job without"), "{err}");
    }
}
