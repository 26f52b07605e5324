//! `tunefleet-bench soak [--minutes M] [--workers W] [--subscribers S]
//! [--jobs-per-second J] [--job-retention DURATION]`: a long run with a steady job stream, worker churn
//! (one worker `kill -9`ed and restarted every 20 s) and subscribers, sampled
//! every minute: master RSS, open file descriptors, database size (file and
//! WAL), jobs known, and the p50/p99 delay from a job change (its
//! `updated_at`, stamped by the master) to a subscriber having it. What may
//! grow is what the master is asked to keep (jobs and their records); the
//! table shows whether anything else does. With `--job-retention` (passed to
//! the master), ended jobs leave memory: "held" is what the master holds,
//! "jobs known" what it counts.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use tunefleet_server::client::{Client, Update};
use tunefleet_shared::protocol::FleetEvent;

use super::procfs::{open_fds, rss_kib};
use super::{start_master, KillOnDrop, TOKEN};

pub(crate) struct SoakArgs {
    pub minutes: u64,
    pub workers: usize,
    pub subscribers: usize,
    pub jobs_per_second: usize,
    /// The master's `--job-retention`, as given (`2m`).
    pub job_retention: Option<String>,
}

const USAGE: &str = "\
usage: tunefleet-bench soak [FLAGS]   (defaults in brackets)
  --minutes N             how long [60]
  --workers N             zero-time worker processes [4]
  --subscribers N         subscribers [4]
  --jobs-per-second N     submission rate [20]
  --job-retention DUR     run the master with --job-retention DUR";

pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<SoakArgs> {
    let mut args = SoakArgs {
        minutes: 60,
        workers: 4,
        subscribers: 4,
        jobs_per_second: 20,
        job_retention: None,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--minutes" => args.minutes = value()?.parse()?,
            "--workers" => args.workers = value()?.parse()?,
            "--subscribers" => args.subscribers = value()?.parse()?,
            "--jobs-per-second" => args.jobs_per_second = value()?.parse()?,
            "--job-retention" => args.job_retention = Some(value()?),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}\n\n{USAGE}"),
        }
    }
    Ok(args)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn worker(bin: &Path, url: &str, i: usize) -> anyhow::Result<KillOnDrop> {
    Ok(KillOnDrop(
        Command::new(bin)
            .args(["--server", url, "--backend", "sim", "--sim-seconds", "0.05"])
            .args(["--target", r#"{"kind":"llvm","num-cores":2}"#])
            .args(["--name", &format!("soak{i}")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start a worker")?,
    ))
}

fn db_bytes(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut p = path.as_os_str().to_os_string();
            p.push(suffix);
            std::fs::metadata(p).map_or(0, |m| m.len())
        })
        .sum()
}

fn percentile(xs: &mut [u64], p: f64) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    xs.sort_unstable();
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

pub(crate) async fn run(
    args: SoakArgs,
    master_bin: &Path,
    worker_bin: &Path,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("soak.db");
    // The master's default event ring, as a farm runs it: the bench's deep
    // one (65,536 events of up to a job view each) would itself grow the
    // master by ~60 MiB until full, and hide the per-job cost.
    let mut master_args = vec!["--event-buffer", "4096"];
    if let Some(keep) = &args.job_retention {
        master_args.extend(["--job-retention", keep.as_str()]);
    }
    let master = start_master(master_bin, &db.display().to_string(), &master_args)?;
    let pid = master.pid();
    let url = master.url.clone();
    let mut workers: Vec<KillOnDrop> = (0..args.workers)
        .map(|i| worker(worker_bin, &url, i))
        .collect::<Result<_, _>>()?;
    let delays: Arc<Mutex<Vec<u64>>> = Arc::default();
    for _ in 0..args.subscribers {
        let mut c = Client::connect(&url, Some(TOKEN)).await?;
        c.subscribe().await?;
        let delays = delays.clone();
        tokio::spawn(async move {
            while let Ok(Some(update)) = c.next_update().await {
                if let Update::Event(_, FleetEvent::JobUpdated { job }) = update {
                    let delay = now_ms().saturating_sub(job.updated_at.0);
                    if let Ok(mut d) = delays.lock() {
                        d.push(delay);
                    }
                }
            }
        });
    }
    let mut submitter = Client::connect(&url, Some(TOKEN)).await?;
    let started = Instant::now();
    let end = started + Duration::from_secs(args.minutes * 60);
    let mut next_sample = started;
    let mut next_churn = started + Duration::from_secs(20);
    let mut counter = 0usize;
    let mut churned = 0usize;
    println!("| minute | jobs known | held | master RSS | open fds | database (+WAL) | event delay p50 / p99 | worker restarts |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    while Instant::now() < end {
        let mut yaml = String::from("target: {kind: llvm}\ntrials: 1\nworkloads:\n");
        for _ in 0..args.jobs_per_second {
            counter += 1;
            yaml.push_str(&format!(
                "  - {{name: s{counter}, op: matmul, shape: {{m: {}, n: {}, k: 3}}}}\n",
                1 + counter % 1000,
                1 + counter / 1000
            ));
        }
        submitter.submit(yaml, Some("soak.yaml")).await?;
        if Instant::now() >= next_churn {
            let i = churned % workers.len().max(1);
            workers[i] = worker(worker_bin, &url, i)?; // the old one is killed on drop
            churned += 1;
            next_churn += Duration::from_secs(20);
        }
        if Instant::now() >= next_sample {
            let mut d = std::mem::take(&mut *delays.lock().map_err(|_| anyhow::anyhow!("lock"))?);
            let status = submitter.status().await?;
            println!(
                "| {} | {} | {} | {:.1} MiB | {} | {:.1} MiB | {} / {} ms | {churned} |",
                started.elapsed().as_secs() / 60,
                status.jobs.total,
                status.jobs.total - status.jobs.archived,
                rss_kib(pid) as f64 / 1024.0,
                open_fds(pid),
                db_bytes(&db) as f64 / 1048576.0,
                percentile(&mut d, 0.5),
                percentile(&mut d, 0.99),
            );
            next_sample += Duration::from_secs(60);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(workers);
    drop(master);
    Ok(())
}
