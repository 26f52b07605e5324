//! `tunefleet results`: every job's state and best result, as a table (for
//! people), JSON or CSV (for scripts and spreadsheets).
//!
//! The JSON form is the protocol's [`JobView`] list as is (one object per job
//! with `job_id`, `name`, `state`, `best_latency_s` — `null` until known — and
//! `records`, best first, at most the master's `nbest`), so it never drifts from
//! what the master knows. CSV has one flat row per job with a fixed header
//! ([`CSV_HEADER`]); fields are quoted by [`super::csv_field`].
//!
//! Jobs are printed oldest first ([`super::sort_jobs`]) so that two runs
//! against an unchanged master print identical output.

use super::{
    emit, format_latency, job_gflops, job_op, render_table, sort_jobs, Align, ConnectArgs,
};
use tunefleet_shared::protocol::JobView;

// The CSV and JSON forms are shared with the web dashboard's downloads.
pub use tunefleet_shared::export::{to_csv, CSV_HEADER};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResultsFormat {
    /// Aligned columns for the terminal.
    #[default]
    Table,
    /// An array of job objects.
    Json,
    /// One row per job, with a header.
    Csv,
}

#[derive(clap::Args, Debug)]
pub struct ResultsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ResultsFormat::Table)]
    pub format: ResultsFormat,
    /// Only these jobs (repeatable; several ids may follow one --job).
    #[arg(long = "job", value_name = "ID", num_args = 1..)]
    pub jobs: Vec<String>,
    /// A model run instead of jobs: its tasks, estimate and measured latencies
    /// (`--format json` prints one object).
    #[arg(long, value_name = "NAME", conflicts_with = "jobs")]
    pub model: Option<String>,
    /// Also the jobs the master archived (`serve --job-retention`), read
    /// from its database. Jobs named with --job are found either way.
    #[arg(long, conflicts_with = "model")]
    pub archived: bool,
}

pub async fn run(args: ResultsArgs) -> anyhow::Result<()> {
    if let Some(name) = &args.model {
        let view = super::model::fetch(&args.connect, name).await?;
        let text = match args.format {
            ResultsFormat::Json => super::model::to_json(&view)?,
            ResultsFormat::Table => super::model::to_table(&view),
            ResultsFormat::Csv => anyhow::bail!("--model prints a table or JSON, not CSV"),
        };
        return emit(&text);
    }
    let jobs = fetch(&args.connect, &args.jobs, args.archived).await?;
    let text = match args.format {
        ResultsFormat::Table => to_table(&jobs),
        ResultsFormat::Json => to_json(&jobs)?,
        ResultsFormat::Csv => to_csv(&jobs),
    };
    emit(&text)
}

/// Fetches the jobs (all when `job_ids` is empty; `archived`: the archived
/// ones too) in output order.
pub async fn fetch(
    connect: &ConnectArgs,
    job_ids: &[String],
    archived: bool,
) -> anyhow::Result<Vec<JobView>> {
    let mut client = connect.connect().await?;
    let filter = (!job_ids.is_empty()).then(|| job_ids.to_vec());
    let mut jobs = client
        .results_with(filter, archived)
        .await
        .map_err(|e| connect.explain(e))?;
    if job_ids.is_empty() && !archived {
        // Said on stderr, so scripts reading stdout see only the jobs.
        if let Ok(status) = client.status().await {
            if status.jobs.archived > 0 {
                eprintln!(
                    "note: {} archived jobs are not shown (--archived reads them from the master's database)",
                    status.jobs.archived
                );
            }
        }
    }
    let _ = client.close().await;
    for id in job_ids {
        if !jobs.iter().any(|job| &job.job_id == id) {
            eprintln!("warning: the master has no job {id}");
        }
    }
    sort_jobs(&mut jobs);
    Ok(jobs)
}

/// Pretty JSON array of the job views, with a final newline.
pub fn to_json(jobs: &[JobView]) -> anyhow::Result<String> {
    Ok(tunefleet_shared::export::to_json(jobs))
}

/// Aligned columns, or a one-line note when there are no jobs.
pub fn to_table(jobs: &[JobView]) -> String {
    if jobs.is_empty() {
        return "no jobs\n".into();
    }
    let header = [
        ("JOB_ID", Align::Left),
        ("NAME", Align::Left),
        ("OP", Align::Left),
        ("TARGET", Align::Left),
        ("STATE", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("WORKER", Align::Left),
        ("BEST", Align::Right),
        ("GFLOP/S", Align::Right),
        ("TRIALS", Align::Right),
    ];
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            vec![
                job.job_id.clone(),
                job.name.clone(),
                job_op(job),
                target_text(job),
                job.state.to_string(),
                job.attempts.to_string(),
                job.worker.clone().unwrap_or_else(|| "-".into()),
                job.best_latency_s
                    .map(format_latency)
                    .unwrap_or_else(|| "-".into()),
                job_gflops(job)
                    .map(|g| format!("{g:.1}"))
                    .unwrap_or_else(|| "-".into()),
                format!("{}/{}", job.trials_done, job.trials_total),
            ]
        })
        .collect();
    render_table(&header, &rows)
}

/// The target a job ran for (its result's, which the worker completed), or
/// asked for, in short: the kind and the attribute that tells machines
/// apart (`cuda sm_90`, `llvm znver4`, `llvm`).
pub fn target_text(job: &JobView) -> String {
    let target = job
        .result
        .as_ref()
        .and_then(|r| r.target.as_ref())
        .unwrap_or(&job.workload.target);
    let detail = ["arch", "mcpu"]
        .iter()
        .find_map(|key| target.attrs().get(*key).and_then(|v| v.as_str()));
    match detail {
        Some(detail) => format!("{} {detail}", target.kind()),
        None => target.kind().to_string(),
    }
}

#[cfg(test)]
mod tests;
