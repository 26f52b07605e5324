//! `tunefleet submit FILE...`: send workload files to the master.
//!
//! The master parses and validates (one parser, in `shared`, used by master and
//! browser alike), so the CLI sends each file's text with its name and prints
//! the master's verdict. A rejection's message already names file, line and
//! field, so it is printed verbatim.
//!
//! Every file is read before anything is sent: a typo in the third path should
//! not leave the first two submitted. Files are then submitted in order and the
//! first rejection stops the rest (resubmitting is harmless: the master skips
//! workloads it already has).
//!
//! Lorien workload files (see [`tunefleet_shared::lorien`]) are recognised by
//! their content, converted here with the default trial budget (as
//! `tunefleet import-lorien` does) and the converted YAML is what is sent: the
//! master only knows our format. A note on stderr says so; a file that cannot
//! be converted stops everything before anything is sent.
//!
//! `--json` prints an array with one object per file:
//! `{"file": ..., "new_jobs": [...], "duplicates": [...], "cache_hits": [...],
//! "warm_started": [...], "seeded": [...]}`.
//!
//! The master's tuning cache answers a new job at once when an earlier job
//! tuned the same computation for a target that serves this one with at
//! least its budget (`cache_hits`, already done), and warm-starts it when one
//! tuned less (`warm_started`). Jobs whose search starts from records
//! brought in by `tunefleet import` are `seeded` (they tune their whole
//! budget). `--fresh` tunes every new job from scratch.

use super::{emit, plural, ConnectArgs};
use crate::client::{Client, ClientError};
use anyhow::Context;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use tunefleet_shared::lorien;
use tunefleet_shared::protocol::SubmitReport;
use tunefleet_shared::workload::DEFAULT_TRIALS;

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Workload files (YAML; Lorien workload files are converted first), or
    /// one ONNX model (`.onnx`) to tune as a whole.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print the submit reports as JSON.
    #[arg(long)]
    pub json: bool,
    /// Tune every new job from scratch: no answer from the master's tuning
    /// cache, no warm start from earlier records.
    #[arg(long)]
    pub fresh: bool,
    #[command(flatten)]
    pub model: super::model::ModelFlags,
}

/// One file's outcome, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct FileReport {
    pub file: String,
    #[serde(flatten)]
    pub report: SubmitReport,
}

pub async fn run(args: SubmitArgs) -> anyhow::Result<()> {
    use super::model::is_model_path;
    if args.files.iter().any(|f| is_model_path(f)) {
        let [path] = args.files.as_slice() else {
            anyhow::bail!("submit one .onnx model at a time, without workload files");
        };
        return super::model::submit(&args.connect, path, &args.model).await;
    }
    let model_flags = args.model.model_only_flags();
    if !model_flags.is_empty() {
        anyhow::bail!(
            "{} only apply to .onnx models (a workload file sets its own trials and target)",
            model_flags.join(", ")
        );
    }
    let mut texts = Vec::with_capacity(args.files.len());
    for path in &args.files {
        // Blocking read is fine: nothing else runs yet.
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file = path.display().to_string();
        let text = if lorien::is_lorien_file(&text) {
            let (count, yaml) = super::import_lorien::convert(&text, &file, DEFAULT_TRIALS)?;
            eprintln!(
                "converted {} from {file}",
                plural(count, "Lorien workload", "Lorien workloads")
            );
            yaml
        } else {
            text
        };
        texts.push((file, text));
    }

    let mut client = args.connect.connect().await?;
    let mut reports: Vec<FileReport> = Vec::new();
    for (file, text) in texts {
        let report = match client.submit_as(text, Some(&file), args.fresh).await {
            Ok(report) => report,
            Err(err) => {
                if !reports.is_empty() {
                    let done: Vec<&str> = reports.iter().map(|r| r.file.as_str()).collect();
                    eprintln!("note: already submitted: {}", done.join(", "));
                }
                return Err(rejection(&args.connect, &file, err));
            }
        };
        if !args.json {
            print_report(&mut client, &file, &report).await;
        }
        reports.push(FileReport { file, report });
    }
    let _ = client.close().await;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&reports)?))?;
    }
    Ok(())
}

/// The master's own message for a rejected workload (it names file, line and
/// field); the usual client error for anything else.
fn rejection(connect: &ConnectArgs, file: &str, err: ClientError) -> anyhow::Error {
    use tunefleet_shared::protocol::ErrorCode;
    match err {
        ClientError::Server {
            code: ErrorCode::InvalidWorkload | ErrorCode::BadRequest | ErrorCode::TooLarge,
            message,
        } => {
            if message.contains(file) {
                anyhow::anyhow!("{message}")
            } else {
                anyhow::anyhow!("{file}: {message}")
            }
        }
        // Sent, and no answer: the master may have committed it or not.
        lost @ (ClientError::Transport(_)
        | ClientError::Timeout { .. }
        | ClientError::Closed { .. }
        | ClientError::Shutdown { .. }) => connect.explain(lost).context(format!(
            "{file}: the connection ended before the master answered, so whether it was \
             submitted is unknown; resubmitting is safe (jobs already taken are reported \
             as duplicates, never run twice)"
        )),
        other => connect
            .explain(other)
            .context(format!("cannot submit {file}")),
    }
}

/// `more.yaml: 3 new jobs, 1 duplicate skipped`, then one line per job.
pub fn summary_line(file: &str, report: &SubmitReport) -> String {
    format!("{file}: {}", report.summary())
}

async fn print_report(client: &mut Client, file: &str, report: &SubmitReport) {
    // Output is informational: a closed stdout must not stop the submission.
    let _ = emit(&format!("{}\n", summary_line(file, report)));
    let ids: Vec<String> = report
        .new_jobs
        .iter()
        .chain(&report.duplicates)
        .cloned()
        .collect();
    if ids.is_empty() {
        return;
    }
    // Names are a convenience: without them, print the ids alone.
    let names: HashMap<String, String> = match client.results(Some(ids)).await {
        Ok(jobs) => jobs.into_iter().map(|j| (j.job_id, j.name)).collect(),
        Err(e) => {
            tracing::debug!("cannot fetch job names: {e}");
            HashMap::new()
        }
    };
    let width = report
        .new_jobs
        .iter()
        .chain(&report.duplicates)
        .map(|id| id.chars().count())
        .max()
        .unwrap_or(0);
    for (tag, ids) in [("new", &report.new_jobs), ("duplicate", &report.duplicates)] {
        for id in ids {
            let tag = if report.cache_hits.contains(id) {
                "cached"
            } else if report.warm_started.contains(id) {
                "warm"
            } else if report.seeded.contains(id) {
                "seeded"
            } else {
                tag
            };
            let name = names.get(id).map(String::as_str).unwrap_or("");
            let _ = emit(&format!("  {tag:<9}  {id:<width$}  {name}\n"));
        }
    }
}

#[cfg(test)]
mod tests;
