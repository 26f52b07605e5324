//! One throughput round: submit N zero-time jobs, count them through
//! `assigned` and `done` on a delta subscriber, and the CPU both processes
//! spent per job.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tunefleet_server::client::Client;
use tunefleet_shared::protocol::{JobCounts, JobState};

use crate::{procfs, subscriber, yaml, TOKEN};

pub(crate) struct Throughput {
    pub(crate) dispatched_per_s: f64,
    pub(crate) completed_per_s: f64,
    /// The same, counted from the submit's reply: the fleet's own pace,
    /// without the parse and commit of the file.
    pub(crate) after_submit_per_s: f64,
    /// From sending the file to the master's reply (parse, check, commit).
    pub(crate) submit: Duration,
    /// CPU time per job over the round, submit included: the master's (all
    /// threads) and this process's (the workers and the watcher). Steadier
    /// than the rates on shared cores, and what the two cores are spent on.
    pub(crate) master_cpu_per_job: Duration,
    pub(crate) bench_cpu_per_job: Duration,
}

/// A frame as the throughput watcher reads it: the frame's type and, for
/// an event, its kind and the job's state; every other member is skipped
/// unread. Decoding each `job_updated` into a full view cost the bench
/// itself ~10 µs per event on the same two cores as the master.
#[derive(serde::Deserialize)]
struct WatchedFrame {
    #[serde(rename = "type")]
    frame: String,
    event: Option<WatchedEvent>,
    snapshot: Option<WatchedSnapshot>,
}

#[derive(serde::Deserialize)]
struct WatchedEvent {
    kind: String,
    /// `job_updated`'s view.
    job: Option<WatchedJob>,
    /// `job_changed`'s delta (the watcher subscribes with deltas);
    /// `worker_changed` has one too, without a state.
    change: Option<WatchedChange>,
}

#[derive(serde::Deserialize)]
struct WatchedChange {
    state: Option<JobState>,
}

#[derive(serde::Deserialize)]
struct WatchedJob {
    state: JobState,
}

#[derive(serde::Deserialize)]
struct WatchedSnapshot {
    jobs: Vec<WatchedJob>,
    #[serde(default)]
    archived: JobCounts,
}

impl WatchedSnapshot {
    fn done(&self) -> usize {
        self.jobs
            .iter()
            .filter(|j| j.state == JobState::Done)
            .count()
            + self.archived.done
    }
}

pub(crate) async fn throughput_round(
    url: &str,
    master_pid: u32,
    jobs: usize,
    round: usize,
) -> anyhow::Result<Throughput> {
    // Every earlier job has ended, so the count cannot move before the submit.
    let base_done = Client::connect(url, Some(TOKEN))
        .await?
        .status()
        .await?
        .jobs
        .done;
    let mut watcher = subscriber::RawSubscriber::subscribe(url).await?;
    let text = yaml(jobs, round);
    let mut submitter = Client::connect(url, Some(TOKEN)).await?;
    let cpu_before = (
        procfs::cpu_ns(master_pid),
        procfs::cpu_ns(std::process::id()),
    );
    let started = Instant::now();
    let report = submitter.submit(text, Some("bench.yaml")).await?;
    let submit = started.elapsed();
    if report.new_jobs.len() != jobs {
        bail!("expected {jobs} new jobs, got {}", report.new_jobs.len());
    }
    let (mut assigned, mut done) = (0usize, 0usize);
    let (mut last_assigned, mut last_done) = (started, started);
    while done < jobs {
        let text = tokio::time::timeout(Duration::from_secs(120), watcher.next_text())
            .await
            .context("fleet stalled")??
            .context("stream ended")?;
        let frame: WatchedFrame = serde_json::from_str(&text)?;
        match (frame.frame.as_str(), frame.event, frame.snapshot) {
            ("event", Some(event), _)
                if event.kind == "job_updated" || event.kind == "job_changed" =>
            {
                let state = match (event.job, event.change) {
                    (Some(job), _) => Some(job.state),
                    (None, Some(change)) => change.state,
                    (None, None) => None,
                };
                match state {
                    Some(JobState::Assigned | JobState::Running) => {
                        assigned += 1;
                        last_assigned = Instant::now();
                    }
                    Some(JobState::Done) => {
                        done += 1;
                        last_done = Instant::now();
                    }
                    _ => {}
                }
            }
            ("snapshot", _, Some(snapshot)) => {
                // We fell behind; recount from the snapshot.
                let now = Instant::now();
                done = snapshot.done() - base_done;
                assigned = assigned.max(done);
                last_done = now;
                last_assigned = now;
            }
            _ => {}
        }
    }
    let _ = assigned;
    let per_job = |before: u64, after: u64| {
        Duration::from_nanos(after.saturating_sub(before) / jobs.max(1) as u64)
    };
    let master_cpu_per_job = per_job(cpu_before.0, procfs::cpu_ns(master_pid));
    let bench_cpu_per_job = per_job(cpu_before.1, procfs::cpu_ns(std::process::id()));
    Ok(Throughput {
        dispatched_per_s: jobs as f64 / (last_assigned - started).as_secs_f64(),
        completed_per_s: jobs as f64 / (last_done - started).as_secs_f64(),
        // Events are read only after the reply, so `last_done` is later.
        after_submit_per_s: jobs as f64
            / (last_done - started)
                .saturating_sub(submit)
                .as_secs_f64()
                .max(1e-9),
        submit,
        master_cpu_per_job,
        bench_cpu_per_job,
    })
}
