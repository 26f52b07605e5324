//! `tunefleet-bench model-scaling`: how a model run's wall time falls with
//! the number of workers, from a real run replayed.
//!
//! Tuning a model for real with 64 workers is out of reach on one machine;
//! what the farm decides is not. The recorded run's jobs (`tunefleet results
//! --format json` of the master that ran it) give, for each task, every
//! round's duration and result. A real master (its model planner and
//! allocator unchanged) runs the same model with K in-process workers whose
//! backend replays them: the extract job answers with the recorded
//! extraction, round n of a task waits the recorded duration of that task's
//! round n (divided by `--compress`) and answers with its recorded result
//! (a round the recorded run never had repeats the task's last one), and the
//! compile job answers with the recorded compile. So every decision is the
//! master's own, and only the time is compressed.
//!
//! Printed for each K: the wall time (uncompressed back to real seconds) to
//! spend the budget, to get within 5% of the final estimate, and to the end
//! of the run; the speed-up over K = 1; and how busy the K workers were
//! until the budget was spent (what is not busy is where scaling stops:
//! the extraction, which one worker runs while the others wait, and the
//! tail of the last rounds).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use tunefleet_server::client::{Client, Update};
use tunefleet_shared::protocol::{ClientCommand, FleetEvent, JobResult, TuningRecord};
use tunefleet_shared::target::Target;
use tunefleet_worker::backend::{Backend, JobSpec, ProgressSink, TuneError, TuneFuture};
use tunefleet_worker::{run_worker, Backoff, WorkerConfig};

use super::{start_master, wait_workers, TOKEN};

pub(crate) struct Args {
    jobs: PathBuf,
    model: PathBuf,
    compress: f64,
    workers: Vec<usize>,
    /// A budget other than the recorded run's (rounds past the recorded ones
    /// repeat each task's last round).
    trials: Option<u32>,
}

const USAGE: &str = "\
usage: tunefleet-bench model-scaling --jobs JOBS.json --model MODEL.onnx [--compress X] [--workers 1,2,4]
  --jobs FILE      `tunefleet results --format json` of a master that ran one model run
  --model FILE     the run's ONNX model (submitted again to a fresh master)
  --compress X     replay X times faster than recorded [50]
  --trials N       budget [the recorded run's]; rounds past the recorded ones repeat each task's last
  --workers LIST   worker counts [1,2,4,8,16,32,64]";

pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut jobs = None;
    let mut model = None;
    let mut compress: f64 = 50.0;
    let mut workers = vec![1, 2, 4, 8, 16, 32, 64];
    let mut trials = None;
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => jobs = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--compress" => compress = value()?.parse()?,
            "--trials" => trials = Some(value()?.parse()?),
            "--workers" => {
                workers = value()?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--workers: a comma-separated list of counts")?
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}\n\n{USAGE}"),
        }
    }
    let (Some(jobs), Some(model)) = (jobs, model) else {
        bail!("--jobs and --model are required\n\n{USAGE}");
    };
    if compress.is_nan() || compress < 1.0 || workers.contains(&0) {
        bail!("--compress must be at least 1 and every worker count at least 1");
    }
    Ok(Args {
        jobs,
        model,
        compress,
        workers,
        trials,
    })
}

/// One recorded job's answer.
#[derive(Clone)]
struct Recorded {
    wall_s: f64,
    result: JobResult,
}

/// The recorded run: its name, settings and every job's answer by stage.
struct Recording {
    run: String,
    target: Target,
    trials_total: u32,
    trials_per_round: u32,
    extract: Recorded,
    compile: Option<Recorded>,
    /// Task name → its rounds in order.
    rounds: HashMap<String, Vec<Recorded>>,
}

fn recorded(job: &Value) -> Option<Recorded> {
    let result = job.get("result")?;
    let records: Vec<TuningRecord> =
        serde_json::from_value(job.get("records").cloned().unwrap_or(Value::Null))
            .unwrap_or_default();
    Some(Recorded {
        wall_s: result["wall_time_s"].as_f64()?,
        result: JobResult {
            best_latency_s: job["best_latency_s"].as_f64().unwrap_or(0.0),
            gflops: result["gflops"].as_f64(),
            records,
            trials: result["trials"].as_u64().unwrap_or(0) as u32,
            wall_time_s: result["wall_time_s"].as_f64()?,
            backend: "replay".into(),
            tvm_version: result["tvm_version"].as_str().map(str::to_string),
            extra: result["extra"].clone(),
            target: serde_json::from_value(result["target"].clone()).ok(),
        },
    })
}

fn load(path: &PathBuf) -> anyhow::Result<Recording> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let jobs: Vec<Value> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a JSON array of jobs", path.display()))?;
    let extract_job = jobs
        .iter()
        .find(|j| {
            j["name"].as_str().is_some_and(|n| n.ends_with("/extract")) && j["state"] == "done"
        })
        .with_context(|| {
            format!(
                "{}: no finished extract job (a model run's jobs?)",
                path.display()
            )
        })?;
    let run = extract_job["name"]
        .as_str()
        .unwrap_or_default()
        .trim_end_matches("/extract")
        .to_string();
    let extract = recorded(extract_job).context("the extract job has no result")?;
    let target = extract
        .result
        .target
        .clone()
        .context("the extract job's result names no target")?;
    let compile = jobs
        .iter()
        .find(|j| j["name"].as_str() == Some(&format!("{run}/compile")) && j["state"] == "done")
        .and_then(recorded);
    let mut numbered: HashMap<String, Vec<(u32, Recorded)>> = HashMap::new();
    let prefix = format!("{run}/");
    for job in &jobs {
        let Some(rest) = job["name"].as_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some((task, round)) = rest.rsplit_once("/r") else {
            continue;
        };
        let (Ok(n), Some(rec)) = (round.parse::<u32>(), recorded(job)) else {
            continue;
        };
        if job["state"] == "done" {
            numbered.entry(task.to_string()).or_default().push((n, rec));
        }
    }
    let rounds: HashMap<String, Vec<Recorded>> = numbered
        .into_iter()
        .map(|(task, mut list)| {
            list.sort_by_key(|(n, _)| *n);
            (task, list.into_iter().map(|(_, r)| r).collect())
        })
        .collect();
    if rounds.is_empty() {
        bail!("{}: run `{run}` has no finished rounds", path.display());
    }
    let trials_total = rounds.values().flatten().map(|r| r.result.trials).sum();
    let per_round = rounds
        .values()
        .flatten()
        .map(|r| r.result.trials)
        .max()
        .unwrap_or(1);
    Ok(Recording {
        run,
        target,
        trials_total,
        trials_per_round: per_round,
        extract,
        compile,
        rounds,
    })
}

/// The backend of the replay's workers.
struct Replay {
    recording: Arc<Recording>,
    compress: f64,
    /// Recorded seconds of the extract and round jobs answered so far, over
    /// all workers (the compile is after the budget and not counted).
    busy_ms: Arc<AtomicU64>,
}

impl Replay {
    fn answer(&self, job: &JobSpec) -> Result<Recorded, TuneError> {
        let name = &job.workload.name;
        let stage = name.split_once('/').map_or("", |(_, rest)| rest);
        if stage == "extract" {
            return Ok(self.recording.extract.clone());
        }
        if stage == "compile" {
            return self
                .recording
                .compile
                .clone()
                .ok_or_else(|| TuneError::Failed("the recorded run was never compiled".into()));
        }
        let (task, round) = stage
            .rsplit_once("/r")
            .and_then(|(t, n)| Some((t, n.parse::<usize>().ok()?)))
            .ok_or_else(|| TuneError::Unsupported(format!("not a model job: {name}")))?;
        let rounds = self
            .recording
            .rounds
            .get(task)
            .ok_or_else(|| TuneError::Failed(format!("task {task} has no recorded round")))?;
        let mut answer = rounds[round.saturating_sub(1).min(rounds.len() - 1)].clone();
        // As many trials as this run's planner asked for.
        answer.result.trials = job.workload.trials;
        Ok(answer)
    }
}

impl Backend for Replay {
    fn name(&self) -> &str {
        "replay"
    }

    fn tvm_version(&self) -> Option<String> {
        None
    }

    fn tune(&self, job: JobSpec, _progress: ProgressSink) -> TuneFuture<'_> {
        Box::pin(async move {
            let answer = self.answer(&job)?;
            tokio::time::sleep(Duration::from_secs_f64(answer.wall_s / self.compress)).await;
            if !job.workload.name.ends_with("/compile") {
                self.busy_ms
                    .fetch_add((answer.wall_s * 1e3) as u64, Ordering::Relaxed);
            }
            let mut result = answer.result;
            result.target = Some(job.workload.target.clone());
            Ok(result)
        })
    }
}

/// What one replay with K workers saw, in real (uncompressed) seconds.
struct Outcome {
    budget_s: f64,
    /// Share of the K workers' time until the budget was spent that they
    /// were running a job (the rest: waiting for the extraction, and the
    /// last rounds' tail).
    busy: f64,
    within_5pct_s: f64,
    end_s: f64,
    estimate_s: f64,
    trials: u32,
    /// The master's CPU time over the whole replay, and its state's size
    /// (database and WAL) at the end: what each round costs the master.
    master_cpu_s: f64,
    state_mb: f64,
}

pub(crate) async fn run(args: Args, master_bin: &std::path::Path) -> anyhow::Result<()> {
    let recording = Arc::new(load(&args.jobs)?);
    let tasks = recording.rounds.len();
    println!(
        "replaying run `{}` ({} tasks tuned, {} trials recorded, budget {}, {} per round, target {}) {}x faster than recorded",
        recording.run,
        tasks,
        recording.trials_total,
        args.trials.unwrap_or(recording.trials_total),
        recording.trials_per_round,
        recording.target.canonical_json(),
        args.compress
    );
    println!(
        "{:>4} {:>12} {:>14} {:>10} {:>9} {:>6} {:>12} {:>22} {:>10} {:>9}",
        "K",
        "budget spent",
        "within 5% of",
        "run ended",
        "speed-up",
        "busy",
        "estimate",
        "",
        "master CPU",
        "state"
    );
    let mut base = None;
    for &k in &args.workers {
        let out = replay(&args, &recording, k, master_bin).await?;
        let base_s = *base.get_or_insert(out.budget_s);
        println!(
            "{k:>4} {:>11.0}s {:>13.0}s {:>9.0}s {:>8.1}x {:>5.0}% {:>9.2} ms  {:>18} {:>9.1}s {:>6.0} MB",
            out.budget_s,
            out.within_5pct_s,
            out.end_s,
            base_s / out.budget_s,
            out.busy * 100.0,
            out.estimate_s * 1e3,
            format!("({} trials)", out.trials),
            out.master_cpu_s,
            out.state_mb
        );
    }
    Ok(())
}

async fn replay(
    args: &Args,
    recording: &Arc<Recording>,
    k: usize,
    master_bin: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join("fleet.db");
    let master = start_master(master_bin, &state.to_string_lossy(), &[])?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let busy_ms = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for i in 0..k {
        let backend = Replay {
            recording: Arc::clone(recording),
            compress: args.compress,
            busy_ms: Arc::clone(&busy_ms),
        };
        let mut config = WorkerConfig::new(
            master.url.clone(),
            recording.target.clone(),
            format!("replay{i}"),
            Arc::new(backend),
        );
        config.backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(1),
        };
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            run_worker(config, async move { stop.notified().await }).await
        }));
    }
    wait_workers(&master.url, k).await?;

    let flags = tunefleet_server::commands::model::ModelFlags {
        name: Some(recording.run.clone()),
        trials: Some(args.trials.unwrap_or(recording.trials_total)),
        trials_per_round: Some(recording.trials_per_round),
        ..Default::default()
    };
    let (submission, _) = tunefleet_server::commands::model::prepare(&args.model, &flags)?;
    let mut client = Client::connect(&master.url, Some(TOKEN)).await?;
    let _ = client.subscribe().await?;
    client.set_request_timeout(Duration::from_secs(3600));
    let start = Instant::now();
    client
        .request(ClientCommand::SubmitModel {
            model: Box::new(submission),
        })
        .await?;
    // (elapsed, trials done, estimate) at every change of the run.
    let mut points: Vec<(f64, u32, Option<f64>)> = Vec::new();
    let end = loop {
        match client.next_update().await? {
            Some(Update::Event(_, FleetEvent::ModelUpdated { model })) => {
                let t = start.elapsed().as_secs_f64() * args.compress;
                points.push((t, model.trials_done, model.estimated_latency_s));
                if model.state.is_terminal() {
                    if model.error.is_some() {
                        bail!("K={k}: the replayed run failed: {:?}", model.error);
                    }
                    break t;
                }
            }
            Some(_) => {}
            None => bail!("K={k}: the master closed the connection"),
        }
    };
    stop.notify_waiters();
    for w in workers {
        w.abort();
    }
    let trials = points.iter().map(|p| p.1).max().unwrap_or(0);
    let budget_s = points.iter().find(|p| p.1 >= trials).map_or(end, |p| p.0);
    let estimate_s = points
        .iter()
        .rev()
        .find_map(|p| p.2)
        .context("the run never had an estimate")?;
    // From when on the estimate stays within 5% of the final one (before
    // every task has a first measurement it sums only some tasks, so it is
    // low for the wrong reason: it must stay within, not pass through).
    let outside =
        |p: &&(f64, u32, Option<f64>)| p.2.is_none_or(|e| (e / estimate_s - 1.0).abs() > 0.05);
    let within_5pct_s = match points.iter().rposition(|p| outside(&p)) {
        Some(i) => points.get(i + 1).map_or(end, |p| p.0),
        None => points.first().map_or(end, |p| p.0),
    };
    let master_cpu_s = super::procfs::cpu_ns(master.pid()) as f64 / 1e9;
    let state_mb = ["fleet.db", "fleet.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len() as f64 / 1e6)
        .sum();
    drop(master);
    let busy = busy_ms.load(Ordering::Relaxed) as f64 / 1e3 / (k as f64 * budget_s);
    Ok(Outcome {
        budget_s,
        busy,
        within_5pct_s,
        end_s: end,
        estimate_s,
        trials,
        master_cpu_s,
        state_mb,
    })
}
