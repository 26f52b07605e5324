//! `tunefleet status`: one request, one answer.
//!
//! `--json` prints the master's [`StatusReport`] unchanged, as pretty JSON;
//! scripts rely on `jobs.{total,queued,running,done,failed,cancelled}` and
//! `workers` being integers, and on `"storage": "ok"` or `"degraded"`, so the shape is the protocol's and nothing is
//! added or renamed here. Without `--json`, a three-line human summary.

use super::{emit, plural, ConnectArgs};
use tunefleet_shared::protocol::{StatusReport, StorageHealth};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the status report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    let report = client.status().await.map_err(|e| args.connect.explain(e))?;
    let url = client.url().to_owned();
    let _ = client.close().await;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&report)?))
    } else {
        emit(&human(&report, &url))
    }
}

/// The human summary.
pub fn human(report: &StatusReport, url: &str) -> String {
    let j = &report.jobs;
    let mut jobs = format!(
        "{}: {} queued, {} running, {} done, {} failed",
        plural(j.total, "job", "jobs"),
        j.queued,
        j.running,
        j.done,
        j.failed
    );
    if j.cancelled > 0 {
        jobs.push_str(&format!(", {} cancelled", j.cancelled));
    }
    if j.archived > 0 {
        jobs.push_str(&format!(" ({} of them archived)", j.archived));
    }
    let mut text = format!(
        "master:  {url} (tunefleet {})\nworkers: {} ({} busy)\n{jobs}\n",
        report.server_version, report.workers, report.workers_busy
    );
    if report.storage == StorageHealth::Degraded {
        let why = report
            .storage_problem
            .as_ref()
            .map_or("the master cannot commit its state", |p| p.reason.as_str());
        text.push_str(&format!(
            "storage: degraded, changes are refused until it commits again: {why}\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests;
