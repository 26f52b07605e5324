//! `tunefleet-bench scale [--workers 10000] [--dashboards 1000]
//! [--samples 20] [--recycle-samples 10]`: a fleet of many idle workers and
//! many watching dashboards on one master, measured in one run.
//!
//! - time to connect every worker, and every dashboard (hello, subscribe,
//!   snapshot received);
//! - the master's RSS with the workers alone, with the dashboards too, its
//!   peak, and after the dashboards left;
//! - the master CPU one more `subscribe` costs with everyone connected;
//! - fan-out: from sending a `submit` to each dashboard having the new job's
//!   event (p50, p99 over every dashboard and sample);
//! - recycle with everyone connected: a worker process holding a job is
//!   `kill -9`ed; timed until the spare worker's backend is handed the job,
//!   and until a dashboard sees it;
//! - SIGTERM with everyone connected: time until the master exited.
//!
//! The idle workers advertise a target (`cuda`) that none of the bench's
//! jobs asks for, so they stay idle; the fan-out jobs ask for a target no
//! worker has, so they stay queued and each makes exactly one event. The
//! dashboards are raw WebSocket clients that only look for a job name in each
//! frame, to keep the bench's own CPU out of the figures as far as it can be:
//! everything still shares this machine's cores, so the delays are upper
//! bounds.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::sync::mpsc;
use tunefleet_server::client::{Client, Update};
use tunefleet_shared::protocol::FleetEvent;
use tunefleet_shared::target::Target;
use tunefleet_worker::{
    run_worker, Backend, Backoff, JobSpec, ProgressSink, SimBackend, TuneFuture, WorkerConfig,
};

use super::procfs::{cpu_ns, open_fds, rss_kib, status_kib};
use super::subscriber::RawSubscriber;
use super::{percentile, start_master, TOKEN};

pub(crate) struct ScaleArgs {
    pub workers: usize,
    pub dashboards: usize,
    pub samples: usize,
    pub recycle_samples: usize,
    /// Another master binary (a before/after comparison).
    pub master_bin: Option<std::path::PathBuf>,
}

const USAGE: &str = "\
usage: tunefleet-bench scale [FLAGS]   (defaults in brackets)
  --workers N             idle workers connected [10000]
  --dashboards N          subscribed dashboards [1000]
  --samples N             fan-out samples [20]
  --recycle-samples N     recycle samples with all of them connected [10]
  --master-bin PATH       the master [tunefleet next to this binary]";

pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<ScaleArgs> {
    let mut args = ScaleArgs {
        workers: 10_000,
        dashboards: 1_000,
        samples: 20,
        recycle_samples: 10,
        master_bin: None,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workers" => args.workers = value()?.parse()?,
            "--dashboards" => args.dashboards = value()?.parse()?,
            "--samples" => args.samples = value()?.parse()?,
            "--recycle-samples" => args.recycle_samples = value()?.parse()?,
            "--master-bin" => args.master_bin = Some(value()?.into()),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}\n\n{USAGE}"),
        }
    }
    Ok(args)
}

/// Both ends of every connection live on this machine: the bench and the
/// master each need a descriptor per connection, and the master inherits
/// this process's limit.
fn raise_fd_limit(needed: u64) -> anyhow::Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    if hard < needed {
        bail!(
            "this run needs {needed} open files per process and the hard limit is {hard}: \
             raise it (ulimit -Hn, /etc/security/limits.conf, LimitNOFILE=) or use fewer --workers/--dashboards"
        );
    }
    if limit.current.is_some_and(|soft| soft < needed) {
        limit.current = Some(hard);
        setrlimit(Resource::Nofile, limit).context("setrlimit(RLIMIT_NOFILE)")?;
    }
    Ok(())
}

fn idle_target() -> Target {
    Target::of_kind("cuda")
}

fn llvm() -> Target {
    super::llvm()
}

/// Tells the bench when the master handed it a job: the moment a recycled
/// job reaches a worker is what recycle latency means for the fleet.
pub(crate) struct Stopwatch {
    inner: SimBackend,
    handed: mpsc::UnboundedSender<Instant>,
}

impl Stopwatch {
    pub(crate) fn new(handed: mpsc::UnboundedSender<Instant>) -> Self {
        Stopwatch {
            inner: SimBackend::new(Duration::ZERO),
            handed,
        }
    }
}

impl Backend for Stopwatch {
    fn name(&self) -> &str {
        "sim"
    }

    fn tvm_version(&self) -> Option<String> {
        None
    }

    fn tune(&self, job: JobSpec, progress: ProgressSink) -> TuneFuture<'_> {
        let _ = self.handed.send(Instant::now());
        self.inner.tune(job, progress)
    }
}

async fn worker_count(client: &mut Client) -> anyhow::Result<usize> {
    Ok(client.status().await?.workers)
}

async fn wait_workers(client: &mut Client, n: usize, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let now = worker_count(client).await?;
        if now == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{now} workers registered after {within:?}, expected {n}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A dashboard: hello, subscribe, the snapshot, then every frame is searched
/// for `"name":"fanout-K"`; each K found is reported once with the time.
async fn dashboard(
    url: String,
    ready: mpsc::UnboundedSender<()>,
    seen: mpsc::UnboundedSender<(usize, Instant)>,
) -> anyhow::Result<()> {
    let mut subscriber = RawSubscriber::subscribe(&url).await?;
    let _ = ready.send(());
    let mut last = None;
    while let Some(text) = subscriber.next_text().await? {
        const MARK: &str = r#""name":"fanout-"#;
        if let Some(at) = text.find(MARK) {
            let digits: String = text[at + MARK.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(k) = digits.parse::<usize>() {
                if last != Some(k) {
                    last = Some(k);
                    let _ = seen.send((k, Instant::now()));
                }
            }
        }
    }
    Ok(())
}

async fn subscribe_cpu_ms(url: &str, pid: u32, cold: bool) -> anyhow::Result<f64> {
    static CHANGES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut client = Client::connect(url, Some(TOKEN)).await?;
    if cold {
        let n = CHANGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let yaml = format!(
            "target: {{kind: vulkan}}\nworkloads:\n  - {{name: change-{n}, op: matmul, shape: {{m: 5, n: 3, k: {}}}}}\n",
            7 + n
        );
        client.submit(yaml, Some("change.yaml")).await?;
    }
    // Let the change's fan-out finish before the idle window.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_start = (cpu_ns(pid), Instant::now());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rate =
        (cpu_ns(pid) - idle_start.0) as f64 / idle_start.1.elapsed().as_nanos().max(1) as f64;
    let start = (cpu_ns(pid), Instant::now());
    client.subscribe().await?;
    let spent = (cpu_ns(pid) - start.0) as f64;
    let window = start.1.elapsed().as_nanos() as f64;
    Ok(((spent - idle_rate * window) / 1e6).max(0.0))
}

struct Recycle {
    to_worker: Duration,
    to_dashboard: Duration,
}

async fn recycle_sample(
    url: &str,
    worker_bin: &Path,
    sample: usize,
    idle_workers: usize,
) -> anyhow::Result<Recycle> {
    let mut client = Client::connect(url, Some(TOKEN)).await?;
    let (job_id, mut victim) =
        crate::recycle::victim_holding_a_job(&mut client, url, worker_bin, sample, 9).await?;
    let (handed_tx, mut handed) = mpsc::unbounded_channel();
    let spare_name = format!("spare{sample}");
    let spare = tokio::spawn(run_worker(
        WorkerConfig::new(
            url,
            llvm(),
            spare_name.clone(),
            Arc::new(Stopwatch::new(handed_tx)),
        ),
        std::future::pending::<()>(),
    ));
    wait_workers(&mut client, idle_workers + 2, Duration::from_secs(30)).await?;
    client.subscribe().await?;
    let killed = Instant::now();
    victim.0.kill()?;
    let to_worker = tokio::time::timeout(Duration::from_secs(30), handed.recv())
        .await
        .context("the job never reached the spare")?
        .context("spare stopped")?
        - killed;
    let to_dashboard = loop {
        let update = tokio::time::timeout(Duration::from_secs(30), client.next_update())
            .await
            .context("no event for the recycled job")??
            .context("stream ended")?;
        if let Update::Event(_, FleetEvent::JobUpdated { job }) = update {
            if job.job_id == job_id && job.worker.as_deref() == Some(spare_name.as_str()) {
                break killed.elapsed();
            }
        }
    };
    let _ = victim.0.wait();
    spare.abort();
    let _ = spare.await;
    wait_workers(&mut client, idle_workers, Duration::from_secs(30)).await?;
    Ok(Recycle {
        to_worker,
        to_dashboard,
    })
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / 1024.0)
}

pub(crate) async fn run(
    args: ScaleArgs,
    master_bin: &Path,
    worker_bin: &Path,
) -> anyhow::Result<()> {
    // The in-process workers' own complaints (lost connections, refusals).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("tunefleet_worker=warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    // What the issue asks a master to take: --max-connections 20000.
    let connections = (args.workers + args.dashboards + 100).max(20_000);
    raise_fd_limit((args.workers + args.dashboards) as u64 + 512)?;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("scale.db");
    let max = connections.to_string();
    let master = start_master(
        args.master_bin.as_deref().unwrap_or(master_bin),
        &db.display().to_string(),
        &["--max-connections", &max],
    )?;
    let pid = master.pid();
    let url = master.url.clone();
    let mut admin = Client::connect(&url, Some(TOKEN)).await?;
    let rss_empty = rss_kib(pid);

    // Idle workers, in waves of 500: all 10,000 at once is a storm that
    // two cores (master and bench together) cannot take inside the
    // worker's 10 s handshake timeout, and workers that give up and retry
    // only measure the storm.
    const WAVE: usize = 500;
    let started = Instant::now();
    let mut workers = Vec::with_capacity(args.workers);
    for i in 0..args.workers {
        let mut config = WorkerConfig::new(
            url.clone(),
            idle_target(),
            format!("idle{i}"),
            Arc::new(SimBackend::new(Duration::ZERO)),
        );
        config.backoff = Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(2),
        };
        workers.push(tokio::spawn(run_worker(
            config,
            std::future::pending::<()>(),
        )));
        if (i + 1) % WAVE == 0 {
            wait_workers(&mut admin, i + 1, Duration::from_secs(60)).await?;
        }
    }
    wait_workers(&mut admin, args.workers, Duration::from_secs(300)).await?;
    let workers_connected = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_workers = rss_kib(pid);
    println!(
        "{} idle workers registered in {:.1} s; master RSS {} ({:.1} KiB per worker), {} open fds",
        args.workers,
        workers_connected.as_secs_f64(),
        mib(rss_workers),
        (rss_workers.saturating_sub(rss_empty)) as f64 / args.workers.max(1) as f64,
        open_fds(pid)
    );

    let mut cpu_workers_only = Vec::new();
    for _ in 0..5 {
        cpu_workers_only.push(subscribe_cpu_ms(&url, pid, true).await?);
    }

    // Dashboards, a hundred opening at a time.
    let (ready_tx, mut ready) = mpsc::unbounded_channel();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let started = Instant::now();
    let mut dashboards = Vec::with_capacity(args.dashboards);
    let mut subscribed = 0;
    for i in 0..args.dashboards {
        if i >= subscribed + 100 {
            ready.recv().await.context("dashboards stopped")?;
            subscribed += 1;
        }
        let task = tokio::spawn(dashboard(url.clone(), ready_tx.clone(), seen_tx.clone()));
        dashboards.push(task);
    }
    while subscribed < args.dashboards {
        tokio::time::timeout(Duration::from_secs(120), ready.recv())
            .await
            .context("dashboards did not all subscribe")?
            .context("dashboards stopped")?;
        subscribed += 1;
    }
    let dashboards_connected = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_all = rss_kib(pid);
    println!(
        "{} dashboards subscribed in {:.1} s; master RSS {} ({:.0} KiB per dashboard)",
        args.dashboards,
        dashboards_connected.as_secs_f64(),
        mib(rss_all),
        (rss_all.saturating_sub(rss_workers)) as f64 / args.dashboards.max(1) as f64
    );

    let (mut cpu_cold, mut cpu_warm) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        cpu_cold.push(subscribe_cpu_ms(&url, pid, true).await?);
        cpu_warm.push(subscribe_cpu_ms(&url, pid, false).await?);
    }

    // Fan-out: one new job at a time, each seen by every dashboard. (A
    // fresh client: one left unread for longer than the heartbeat timeout
    // does not answer pings, and the master rightly drops it.)
    let mut admin = Client::connect(&url, Some(TOKEN)).await?;
    let mut delays_ms = Vec::new();
    for k in 0..args.samples {
        let yaml = format!(
            "target: {{kind: vulkan}}\nworkloads:\n  - {{name: fanout-{k}, op: matmul, shape: {{m: 3, n: 5, k: {}}}}}\n",
            7 + k
        );
        let sent = Instant::now();
        admin.submit(yaml, Some("fanout.yaml")).await?;
        let mut have = 0;
        while have < args.dashboards {
            let (sample, at) = tokio::time::timeout(Duration::from_secs(60), seen.recv())
                .await
                .with_context(|| {
                    format!(
                        "sample {k}: {have} of {} dashboards had it",
                        args.dashboards
                    )
                })?
                .context("dashboards stopped")?;
            if sample == k {
                have += 1;
                delays_ms.push((at - sent).as_secs_f64() * 1e3);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut to_worker = Vec::new();
    let mut to_dashboard = Vec::new();
    for sample in 0..args.recycle_samples {
        let r = recycle_sample(&url, worker_bin, sample, args.workers).await?;
        to_worker.push(r.to_worker.as_secs_f64() * 1e3);
        to_dashboard.push(r.to_dashboard.as_secs_f64() * 1e3);
    }
    let rss_peak = status_kib(pid, "VmHWM");

    // The dashboards leave; what they cost should go with them.
    for task in dashboards {
        task.abort();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_left = rss_kib(pid);

    // SIGTERM with the workers still connected.
    let stop = Instant::now();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("kill -TERM")?;
    let mut master = master;
    let deadline = Instant::now() + Duration::from_secs(60);
    let exited = loop {
        if let Some(status) = master.child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("the master did not exit within 60 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let shutdown = stop.elapsed();
    for task in workers {
        task.abort();
    }

    println!();
    println!("| measure | figure |");
    println!("| --- | --- |");
    println!(
        "| {} idle workers connected and registered, 500 at a time | {:.1} s |",
        args.workers,
        workers_connected.as_secs_f64()
    );
    println!(
        "| {} dashboards subscribed (snapshot received), 100 opening at a time | {:.1} s |",
        args.dashboards,
        dashboards_connected.as_secs_f64()
    );
    println!(
        "| master RSS: empty / workers / workers + dashboards / peak / after the dashboards left | {} / {} / {} / {} / {} |",
        mib(rss_empty),
        mib(rss_workers),
        mib(rss_all),
        mib(rss_peak),
        mib(rss_left)
    );
    println!(
        "| master CPU for one subscribe, median of 5: workers only, after a change / everyone connected, after a change / everyone connected, fleet unchanged | {:.1} ms / {:.1} ms / {:.1} ms |",
        super::median(cpu_workers_only),
        super::median(cpu_cold),
        super::median(cpu_warm)
    );
    println!(
        "| fan-out, submit sent → event at every dashboard ({} samples × {} dashboards), p50 / p99 | {:.1} ms / {:.1} ms |",
        args.samples,
        args.dashboards,
        percentile(delays_ms.clone(), 0.5),
        percentile(delays_ms, 0.99)
    );
    println!(
        "| recycle after kill -9, job handed to the spare ({} samples), p50 / p99 | {:.2} ms / {:.2} ms |",
        to_worker.len(),
        percentile(to_worker.clone(), 0.5),
        percentile(to_worker, 0.99)
    );
    println!(
        "| recycle after kill -9, seen by a dashboard, p50 / p99 | {:.2} ms / {:.2} ms |",
        percentile(to_dashboard.clone(), 0.5),
        percentile(to_dashboard, 0.99)
    );
    println!(
        "| SIGTERM with {} workers connected → master exited ({exited}) | {:.2} s |",
        args.workers,
        shutdown.as_secs_f64()
    );
    Ok(())
}
