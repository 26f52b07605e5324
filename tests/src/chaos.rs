//! A chaos run: thousands of zero-time jobs while workers are `kill -9`ed and
//! restarted, `SIGSTOP`ped and `SIGCONT`ed, and the master is `kill -9`ed and
//! restarted on the same state; then the durable trace must show every job
//! entering `done` exactly once (a result accepted twice would be a second
//! entry). `tunefleet-bench chaos` runs it at scale and prints the figures;
//! `tests/chaos.rs` runs a short one in CI.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tunefleet_server::client::Client;

use crate::{bin, matmul_yaml, Master, Worker, ADMIN_TOKEN};

#[derive(Clone, Debug)]
pub struct ChaosConfig {
    pub jobs: usize,
    pub workers: usize,
    /// Jobs each worker holds at once (`--slots`; 1 is one job per worker):
    /// a kill then recycles all of them, and a restart of the master makes
    /// each worker re-send several unacknowledged reports.
    pub slots: u32,
    /// Seconds each sim job takes (0: as fast as the fleet goes).
    pub sim_seconds: f64,
    pub master_restarts: usize,
    pub seed: u64,
    /// Give up (and report a violation) after this long.
    pub timeout: Duration,
}

#[derive(Clone, Debug, Default)]
pub struct ChaosReport {
    pub jobs: usize,
    pub worker_kills: usize,
    pub pauses: usize,
    pub master_restarts: usize,
    pub wall: Duration,
    /// Attempts that ended without a result (recycled), from the trace.
    pub recycled: usize,
    pub trace_lines: usize,
    /// Empty when every promise held.
    pub violations: Vec<String>,
}

/// xorshift64*: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub async fn run(config: &ChaosConfig, dir: &Path) -> ChaosReport {
    let started = Instant::now();
    let mut report = ChaosReport {
        jobs: config.jobs,
        ..ChaosReport::default()
    };
    let mut rng = Rng(config.seed.max(1));
    // Short heartbeats, so that a paused worker's job is recycled quickly.
    let mut master = Master::start(
        dir,
        &["--heartbeat-interval", "1s", "--heartbeat-timeout", "3s"],
    );
    {
        let mut client = master.client().await;
        let reply = client
            .submit(matmul_yaml(config.jobs, "chaos"), Some("chaos.yaml"))
            .await;
        if reply.map(|r| r.new_jobs.len()).ok() != Some(config.jobs) {
            report
                .violations
                .push("the jobs could not all be submitted".into());
            return report;
        }
    }
    let url = master.url();
    let sim = config.sim_seconds;
    let slots = config.slots.to_string();
    let spawn = |i: usize| {
        let extra: &[&str] = if config.slots > 1 {
            &["--slots", &slots]
        } else {
            &[]
        };
        Worker::start_url(&url, dir, &format!("chaos-{i}"), sim, extra)
    };
    let mut workers: Vec<Worker> = (0..config.workers).map(spawn).collect();
    let mut paused_until: Vec<Option<Instant>> = vec![None; config.workers];
    let restart_every = config.jobs / (config.master_restarts + 1);
    let mut next_restart = restart_every;

    loop {
        if started.elapsed() > config.timeout {
            report
                .violations
                .push(format!("not every job done within {:?}", config.timeout));
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = Instant::now();
        for (i, until) in paused_until.iter_mut().enumerate() {
            if until.is_some_and(|t| t <= now) {
                workers[i].cont_signal();
                *until = None;
            }
        }
        let done = match Client::connect(&master.url(), Some(ADMIN_TOKEN)).await {
            Ok(mut c) => c.status().await.map(|s| s.jobs.done).ok(),
            Err(_) => None,
        };
        if done == Some(config.jobs) {
            break;
        }
        if done.is_some_and(|d| d >= next_restart)
            && report.master_restarts < config.master_restarts
        {
            master.restart();
            report.master_restarts += 1;
            next_restart += restart_every;
            continue;
        }
        match rng.below(100) {
            0..=19 => {
                let i = rng.below(config.workers);
                if paused_until[i].is_none() {
                    workers[i].kill9();
                    workers[i] = spawn(i);
                    report.worker_kills += 1;
                }
            }
            20..=29 => {
                let i = rng.below(config.workers);
                if paused_until[i].is_none() {
                    workers[i].stop_signal();
                    let pause = Duration::from_millis(500 + rng.below(4500) as u64);
                    paused_until[i] = Some(now + pause);
                    report.pauses += 1;
                }
            }
            _ => {}
        }
    }
    for (i, until) in paused_until.iter().enumerate() {
        if until.is_some() {
            workers[i].cont_signal();
        }
    }
    report.wall = started.elapsed();
    check_trace(&master.state, config.jobs, &mut report);
    drop(workers);
    report
}

/// Every job entered `done` exactly once, according to the durable trace.
fn check_trace(state: &str, jobs: usize, report: &mut ChaosReport) {
    let out = match Command::new(bin("tunefleet"))
        .args(["export-trace", "--state", state])
        .output()
    {
        Ok(out) if out.status.success() => out,
        other => {
            report
                .violations
                .push(format!("export-trace failed: {other:?}"));
            return;
        }
    };
    let mut last: HashMap<String, String> = HashMap::new();
    let mut done: HashMap<String, usize> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        report.trace_lines += 1;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            report
                .violations
                .push(format!("a trace line is not JSON: {line}"));
            continue;
        };
        let job = &v["event"]["job"];
        let (Some(id), Some(state)) = (job["job_id"].as_str(), job["state"].as_str()) else {
            continue;
        };
        let prev = last.insert(id.to_string(), state.to_string());
        if state == "done" && prev.as_deref() != Some("done") {
            *done.entry(id.to_string()).or_default() += 1;
        }
        if state == "queued" && job.get("error").is_some() {
            report.recycled += 1;
        }
    }
    if done.len() != jobs {
        report
            .violations
            .push(format!("{} of {jobs} jobs reached done", done.len()));
    }
    for (id, n) in done {
        if n != 1 {
            report
                .violations
                .push(format!("job {id} entered done {n} times"));
        }
    }
}
