//! `tunefleet status`: one request, one answer.
//!
//! `--json` prints the master's [`StatusReport`] unchanged, as pretty JSON;
//! scripts rely on `jobs.{total,queued,running,done,failed,cancelled}` and
//! `workers` being integers, and on `"storage": "ok"` or `"degraded"`, so the shape is the protocol's and nothing is
//! added or renamed here (`devices`: the workers by device, `unserved`: open
//! jobs no connected worker serves). Without `--json`, a short human
//! summary: the counts, a line per kind of device, a line per target
//! nobody serves.

use super::{emit, plural, ConnectArgs};
use tunefleet_shared::protocol::{DeviceGroup, StatusReport, StorageHealth};

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
    for group in &report.devices {
        text.push_str(&format!("  {}\n", device_line(group)));
    }
    for wait in &report.unserved {
        text.push_str(&format!(
            "waiting: {} for {}: no connected worker serves that target\n",
            plural(wait.jobs, "job", "jobs"),
            wait.target
        ));
    }
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

/// `8 × NVIDIA H200, 140 GiB (cuda sm_90), 6 busy`.
fn device_line(group: &DeviceGroup) -> String {
    let device = group
        .device
        .as_ref()
        .map_or_else(|| "device not reported".to_string(), ToString::to_string);
    let target = match &group.arch {
        Some(arch) => format!("{} {arch}", group.target_kind),
        None => group.target_kind.clone(),
    };
    format!(
        "{} × {device} ({target}), {} busy",
        group.workers, group.busy
    )
}

#[cfg(test)]
mod tests;
