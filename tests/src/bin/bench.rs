//! `tunefleet-bench`: fleet throughput and recycle latency, as figures.
//!
//! Runs the real master binary (`tunefleet serve`, release build next to this
//! binary) on loopback with a fresh SQLite file, connects many in-process
//! workers with the zero-time `sim` backend, and measures:
//!
//! - dispatch and completion rate: jobs/s from sending the submit to the
//!   last job assigned / done, seen by a subscriber (so every job went
//!   through parse → commit → assign → result → durable commit → published
//!   event), and apart, the completion rate counted from the submit's reply;
//! - recycle latency: a real worker process holding a job is `kill -9`ed;
//!   we time until the spare worker's backend is handed the job, and until
//!   a subscriber sees it assigned to the spare;
//! - the wire's ceiling on this machine, in the same run: a bare
//!   tokio-tungstenite echo server and as many connections as workers, each
//!   sending a ~200-byte text message and waiting for it to come back. The
//!   fleet's rate is reported as a share of it.
//!
//! Reproduce (see docs/benchmarks.md):
//! `cargo build --release -p tunefleet-server -p tunefleet-tests --bins && target/release/tunefleet-bench`
//! (`--job-retention DURATION` runs the master with it, to see what archiving
//! costs a submission).

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tunefleet_server::client::Client;
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::MAX_WORKLOADS_PER_FILE;
use tunefleet_worker::{run_worker, Backoff, SimBackend, WorkerConfig};

const TOKEN: &str = "bench-token";

struct Args {
    workers: usize,
    /// Jobs each worker holds at once (`register`'s `slots`).
    slots: u32,
    jobs: usize,
    rounds: usize,
    recycle_samples: usize,
    master_bin: PathBuf,
    worker_bin: PathBuf,
    /// A PostgreSQL server's URL: the master's state goes into a fresh
    /// database there instead of a SQLite file.
    postgres: Option<String>,
    /// The master's `--job-retention` (what archiving costs a submission).
    job_retention: Option<String>,
}

const USAGE: &str = "\
usage: tunefleet-bench [FLAGS]            fleet throughput, recycle latency and the echo ceiling
       tunefleet-bench scale [FLAGS]      10,000 workers and 1,000 dashboards (scale --help)
       tunefleet-bench soak [FLAGS]       a long run's memory and database size (soak --help)
       tunefleet-bench chaos              kills and restarts under load
       tunefleet-bench parse              reading a round's workload file, fast path and serde-saphyr
       tunefleet-bench frames [FLAGS]     the echo with 1 to 16 messages per frame (frames --help)
       tunefleet-bench model-scaling ...  a recorded model run replayed with 1 to 64 workers (model-scaling --help)
       tunefleet-bench join ...           helper process of the scale run

flags of the fleet run (defaults in brackets):
  --workers N             in-process zero-time workers [100]
  --slots N               jobs each worker holds at once (register's slots) [1]
  --jobs N                jobs per round, one workload file [10000, the most a file may hold]
  --rounds N              throughput rounds [3]
  --recycle-samples N     kill -9 recycle samples [20]
  --master-bin PATH       the master [tunefleet next to this binary]
  --worker-bin PATH       the worker for recycle samples [tunefleet-worker next to this binary]
  --postgres URL          state in a fresh database on this server instead of SQLite
  --job-retention DUR     run the master with --job-retention DUR";

fn parse_args() -> anyhow::Result<Args> {
    let exe_dir = std::env::current_exe()?
        .parent()
        .context("bench binary has a directory")?
        .to_path_buf();
    let mut args = Args {
        workers: 100,
        slots: 1,
        jobs: MAX_WORKLOADS_PER_FILE,
        rounds: 3,
        recycle_samples: 20,
        master_bin: exe_dir.join("tunefleet"),
        worker_bin: exe_dir.join("tunefleet-worker"),
        postgres: None,
        job_retention: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workers" => args.workers = value()?.parse()?,
            "--slots" => args.slots = value()?.parse()?,
            "--jobs" => args.jobs = value()?.parse()?,
            "--rounds" => args.rounds = value()?.parse()?,
            "--recycle-samples" => args.recycle_samples = value()?.parse()?,
            "--master-bin" => args.master_bin = value()?.into(),
            "--worker-bin" => args.worker_bin = value()?.into(),
            "--postgres" => args.postgres = Some(value()?),
            "--job-retention" => args.job_retention = Some(value()?),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}\n\n{USAGE}"),
        }
    }
    check_slots(args.slots)?;
    // A round is one submit, so it cannot hold more than one file may.
    if !(1..=MAX_WORKLOADS_PER_FILE).contains(&args.jobs) {
        bail!(
            "--jobs {}: a round submits one workload file, which holds 1 to {MAX_WORKLOADS_PER_FILE} jobs",
            args.jobs
        );
    }
    Ok(args)
}

/// Kills the child when dropped, so a failed run leaves no worker behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct MasterProcess {
    child: Child,
    url: String,
}

impl MasterProcess {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

#[path = "bench/frames.rs"]
mod frames;
#[path = "bench/join.rs"]
mod join;
#[path = "bench/model_scaling.rs"]
mod model_scaling;
#[path = "bench/parse.rs"]
mod parse;
#[path = "bench/procfs.rs"]
mod procfs;
#[path = "bench/recycle.rs"]
mod recycle;
#[path = "bench/scale.rs"]
mod scale;
#[path = "bench/soak.rs"]
mod soak;
#[path = "bench/subscriber.rs"]
mod subscriber;
#[path = "bench/throughput.rs"]
mod throughput;

impl Drop for MasterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_master(bin: &Path, state: &str, extra: &[&str]) -> anyhow::Result<MasterProcess> {
    use std::io::{BufRead, BufReader};
    // A deep event ring so that the throughput runs' subscribers never lag
    // into a resync, unless the caller names its own.
    let ring: &[&str] = if extra.contains(&"--event-buffer") {
        &[]
    } else {
        &["--event-buffer", "65536"]
    };
    let mut child = Command::new(bin)
        .args(["serve", "--bind", "127.0.0.1:0", "--admin-token", TOKEN])
        .args(ring)
        .arg("--state")
        .arg(state)
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_MASTER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    // The master's warnings reach the bench's stderr; its sign-in link (one
    // per master, seven masters in a scaling run) would only clutter the table.
    let stderr = child.stderr.take().context("stderr")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !line.starts_with("dashboard, signed in as admin:") {
                eprintln!("{line}");
            }
        }
    });
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("tunefleet master listening on ") {
            let addr = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            std::thread::spawn(move || for _ in lines {});
            return Ok(MasterProcess {
                child,
                url: format!("ws://{addr}"),
            });
        }
    }
    bail!("master exited before listening")
}

fn yaml(n: usize, round: usize) -> String {
    let mut y = String::from("target: {kind: llvm, num-cores: 2}\ntrials: 1\nworkloads:\n");
    for i in 0..n {
        y.push_str(&format!(
            "  - {{name: r{round}j{i}, op: matmul, shape: {{m: {}, n: {}, k: 8}}}}\n",
            1 + i % 1000,
            1 + i / 1000 + round * 100
        ));
    }
    y
}

async fn wait_workers(url: &str, n: usize) -> anyhow::Result<()> {
    let mut client = Client::connect(url, Some(TOKEN)).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.status().await?.workers < n {
        if Instant::now() > deadline {
            bail!("workers did not all register");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
/// Round trips per second through a bare tokio-tungstenite echo server on
/// loopback: `connections` clients, each with one ~200-byte message in flight.
/// The wire's ceiling: one ~200-byte message per frame, not decoded.
async fn echo_ceiling(connections: usize, run_for: Duration) -> anyhow::Result<f64> {
    Ok(
        frames::echo(connections, run_for, 1, frames::Burst::OneFrame, false)
            .await?
            .bursts_per_s,
    )
}

fn llvm() -> Target {
    Target::parse(r#"{"kind":"llvm","num-cores":2}"#).unwrap_or_else(|_| Target::of_kind("llvm"))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() as f64 - 1.0) * p).round() as usize;
    xs[i]
}

/// `--slots N` of the fleet bench and of `chaos`: what a worker may register with.
fn check_slots(slots: u32) -> anyhow::Result<()> {
    if !tunefleet_shared::protocol::WORKER_SLOTS.contains(&slots) {
        bail!(
            "--slots {slots}: a worker holds 1 to {} jobs at once",
            tunefleet_shared::protocol::MAX_WORKER_SLOTS
        );
    }
    Ok(())
}

/// `tunefleet-bench chaos [--jobs N] [--workers W] [--slots S] [--master-restarts R]
/// [--sim-seconds S] [--seed X] [--timeout-s T]`: see `tunefleet_tests::chaos`.
async fn chaos_main() -> anyhow::Result<()> {
    use tunefleet_tests::chaos::{run, ChaosConfig};
    let mut config = ChaosConfig {
        jobs: 5_000,
        workers: 8,
        slots: 1,
        sim_seconds: 0.0,
        master_restarts: 5,
        seed: 1,
        timeout: Duration::from_secs(600),
    };
    let mut it = std::env::args().skip(2);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => config.jobs = value()?.parse()?,
            "--workers" => config.workers = value()?.parse()?,
            "--slots" => config.slots = value()?.parse()?,
            "--master-restarts" => config.master_restarts = value()?.parse()?,
            "--sim-seconds" => config.sim_seconds = value()?.parse()?,
            "--seed" => config.seed = value()?.parse()?,
            "--timeout-s" => config.timeout = Duration::from_secs(value()?.parse()?),
            other => bail!("unknown flag {other} (chaos flags: --jobs --workers --slots --master-restarts --sim-seconds --seed --timeout-s)"),
        }
    }
    check_slots(config.slots)?;
    let dir = tempfile::tempdir()?;
    println!("chaos: {config:?}");
    let report = run(&config, dir.path()).await;
    println!();
    println!("| jobs | workers × slots | worker kill -9 | SIGSTOP/SIGCONT | master kill -9 | attempts recycled | trace lines | wall time | done exactly once |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} × {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
        report.jobs,
        config.workers,
        config.slots,
        report.worker_kills,
        report.pauses,
        report.master_restarts,
        report.recycled,
        report.trace_lines,
        report.wall.as_secs_f64(),
        if report.violations.is_empty() {
            "yes"
        } else {
            "NO"
        }
    );
    if !report.violations.is_empty() {
        bail!(
            "chaos run broke a promise: {}",
            report.violations.join("; ")
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("join") {
        return join::run(std::env::args().skip(2));
    }
    if std::env::args().nth(1).as_deref() == Some("chaos") {
        return chaos_main().await;
    }
    if std::env::args().nth(1).as_deref() == Some("frames") {
        return frames::run(std::env::args().skip(2)).await;
    }
    if std::env::args().nth(1).as_deref() == Some("parse") {
        return parse::run(MAX_WORKLOADS_PER_FILE);
    }
    if std::env::args().nth(1).as_deref() == Some("soak") {
        let exe_dir = std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .to_path_buf();
        let args = soak::parse(std::env::args().skip(2))?;
        return soak::run(
            args,
            &exe_dir.join("tunefleet"),
            &exe_dir.join("tunefleet-worker"),
        )
        .await;
    }
    if std::env::args().nth(1).as_deref() == Some("model-scaling") {
        let exe_dir = std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .to_path_buf();
        let args = model_scaling::parse(std::env::args().skip(2))?;
        return model_scaling::run(args, &exe_dir.join("tunefleet")).await;
    }
    if std::env::args().nth(1).as_deref() == Some("scale") {
        let exe_dir = std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .to_path_buf();
        let args = scale::parse(std::env::args().skip(2))?;
        return scale::run(
            args,
            &exe_dir.join("tunefleet"),
            &exe_dir.join("tunefleet-worker"),
        )
        .await;
    }
    let args = parse_args()?;
    for bin in [&args.master_bin, &args.worker_bin] {
        if !bin.is_file() {
            bail!("{} not found: build with `cargo build --release -p tunefleet-server -p tunefleet-worker -p tunefleet-tests --bins`", bin.display());
        }
    }
    let echo = echo_ceiling(args.workers, Duration::from_secs(5)).await?;
    println!(
        "raw WebSocket echo: {echo:.0} round trips/s ({} connections, 200-byte messages, 5 s)",
        args.workers
    );
    let dir = tempfile::tempdir()?;
    let (state, store) = match &args.postgres {
        Some(base) => (
            tunefleet_tests::fresh_postgres_database(base),
            "a fresh PostgreSQL database",
        ),
        None => (
            dir.path().join("bench.db").display().to_string(),
            "a fresh SQLite file, durability normal",
        ),
    };
    let retention: Vec<&str> = match &args.job_retention {
        Some(keep) => vec!["--job-retention", keep.as_str()],
        None => Vec::new(),
    };
    let master = start_master(&args.master_bin, &state, &retention)?;
    println!("master: {} (state in {store})", master.url);

    // Throughput.
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut workers = Vec::new();
    for i in 0..args.workers {
        let mut config = WorkerConfig::new(
            master.url.clone(),
            llvm(),
            format!("bench{i}"),
            Arc::new(SimBackend::new(Duration::ZERO)),
        );
        config.backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(1),
        };
        config.slots = args.slots;
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            run_worker(config, async move { stop.notified().await }).await
        }));
    }
    // The master counts a worker per slot.
    wait_workers(&master.url, args.workers * args.slots as usize).await?;
    println!(
        "{} sim workers (0 s per job, {} slot{} each) connected",
        args.workers,
        args.slots,
        if args.slots == 1 { "" } else { "s" }
    );
    let mut dispatched = Vec::new();
    let mut completed = Vec::new();
    let mut after_submit = Vec::new();
    let (mut master_cpu, mut bench_cpu) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let t = throughput::throughput_round(&master.url, master.pid(), args.jobs, round).await?;
        println!(
            "round {}: {} jobs: dispatched {:.0} jobs/s, completed {:.0} jobs/s (the submit itself {:.0} ms; {:.0} jobs/s after it); CPU per job: master {:.0} µs, workers and watcher {:.0} µs",
            round + 1,
            args.jobs,
            t.dispatched_per_s,
            t.completed_per_s,
            t.submit.as_secs_f64() * 1000.0,
            t.after_submit_per_s,
            t.master_cpu_per_job.as_secs_f64() * 1e6,
            t.bench_cpu_per_job.as_secs_f64() * 1e6,
        );
        master_cpu.push(t.master_cpu_per_job.as_secs_f64() * 1e6);
        bench_cpu.push(t.bench_cpu_per_job.as_secs_f64() * 1e6);
        dispatched.push(t.dispatched_per_s);
        completed.push(t.completed_per_s);
        after_submit.push(t.after_submit_per_s);
    }
    stop.notify_waiters();
    for w in workers {
        w.abort();
    }
    let mut c = Client::connect(&master.url, Some(TOKEN)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.status().await?.workers > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A submit answered by the tuning cache: computations round 1 tuned (its
    // first 20 jobs), for a target their results serve; timed from sending
    // to the committed reply.
    let mut cache_hit_ms = Vec::new();
    {
        let mut c = Client::connect(&master.url, Some(TOKEN)).await?;
        for i in 0..20 {
            let yaml = format!(
                "target: {{kind: llvm}}\nworkloads:\n  - name: cached{i}\n    op: matmul\n    \
                 shape: {{m: {}, n: 1, k: 8}}\n    dtype: float32\n    trials: 1\n",
                1 + i
            );
            let t = Instant::now();
            let report = c.submit(yaml, Some("cached.yaml")).await?;
            cache_hit_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if report.cache_hits.len() != 1 {
                bail!("expected a cache hit for cached{i}, got {report:?}");
            }
        }
    }

    // Recycle latency.
    let mut recycle = Vec::new();
    let mut recycle_seen = Vec::new();
    for sample in 0..args.recycle_samples {
        let (handed, seen) = recycle::recycle_sample(&master.url, &args.worker_bin, sample).await?;
        recycle.push(handed.as_secs_f64() * 1e3);
        recycle_seen.push(seen.as_secs_f64() * 1e3);
    }

    println!();
    println!("| measure | median | best | worst |");
    println!("| --- | --- | --- | --- |");
    // Rates are best when highest, costs (CPU per job) when lowest.
    #[derive(PartialEq)]
    enum Better {
        Higher,
        Lower,
    }
    let row = |name: &str, xs: &Vec<f64>, unit: &str, better: Better| {
        let highest = xs.iter().cloned().fold(f64::MIN, f64::max);
        let lowest = xs.iter().cloned().fold(f64::MAX, f64::min);
        let (best, worst) = if better == Better::Higher {
            (highest, lowest)
        } else {
            (lowest, highest)
        };
        println!(
            "| {name} | {:.0} {unit} | {best:.0} {unit} | {worst:.0} {unit} |",
            median(xs.clone())
        );
    };
    row(
        &format!(
            "dispatched, {} workers{}, {} jobs/round, {} rounds",
            args.workers,
            if args.slots == 1 {
                String::new()
            } else {
                format!(" ({} slots each)", args.slots)
            },
            args.jobs,
            args.rounds
        ),
        &dispatched,
        "jobs/s",
        Better::Higher,
    );
    row(
        "completed (result committed and published)",
        &completed,
        "jobs/s",
        Better::Higher,
    );
    row(
        "completed, counted from the submit's reply",
        &after_submit,
        "jobs/s",
        Better::Higher,
    );
    println!(
        "| raw WebSocket echo ceiling, {} connections (same run) | {echo:.0} round trips/s | | |",
        args.workers
    );
    println!(
        "| completed jobs as a share of the echo ceiling | {:.1}% ({:.1}% from the submit's reply) | | |",
        100.0 * median(completed.clone()) / echo,
        100.0 * median(after_submit.clone()) / echo
    );
    row(
        "master CPU per job, all threads, submit included",
        &master_cpu,
        "µs",
        Better::Lower,
    );
    row(
        "bench CPU per job: its workers and watcher",
        &bench_cpu,
        "µs",
        Better::Lower,
    );
    println!(
        "| submit answered from the tuning cache, {} samples | {:.2} ms | {:.2} ms | p95 {:.2} ms |",
        cache_hit_ms.len(),
        median(cache_hit_ms.clone()),
        cache_hit_ms.iter().cloned().fold(f64::MAX, f64::min),
        percentile(cache_hit_ms.clone(), 0.95)
    );
    println!(
        "| recycle after kill -9, job handed to the spare, {} samples | {:.2} ms | {:.2} ms | p95 {:.2} ms |",
        recycle.len(),
        median(recycle.clone()),
        recycle.iter().cloned().fold(f64::MAX, f64::min),
        percentile(recycle.clone(), 0.95)
    );
    println!(
        "| recycle after kill -9, seen by a subscriber | {:.2} ms | {:.2} ms | p95 {:.2} ms |",
        median(recycle_seen.clone()),
        recycle_seen.iter().cloned().fold(f64::MAX, f64::min),
        percentile(recycle_seen.clone(), 0.95)
    );
    Ok(())
}
