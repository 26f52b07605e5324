//! `tunefleet-worker`: the command-line front of [`tunefleet_worker::run_worker`].

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use anyhow::bail;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tunefleet_shared::target::Target;
use tunefleet_worker::affinity::{pin_current_process, CpuSet};
use tunefleet_worker::devices::{self, PlanOptions, Slot, TargetChoice};
use tunefleet_worker::gpu::{self, Gpu, GpuSelection};
use tunefleet_worker::slots::run_slots;
use tunefleet_worker::{Backend, Backoff, SimBackend, WorkerConfig};

// No `Debug`: it holds the join secret.
/// Tunes jobs for a tunefleet master.
#[derive(Parser)]
#[command(name = "tunefleet-worker", version)]
struct Cli {
    /// Master URL, e.g. ws://127.0.0.1:18871, or wss://HOST:PORT for a master
    /// serving TLS (the worker connects to <URL>/ws/worker). Several,
    /// comma-separated (`ws://A,ws://B`: a leader and its standby), are
    /// tried in turn; the worker stays with whichever answers.
    #[arg(long)]
    server: String,

    /// For wss://: trust the CA certificate(s) in this PEM file (a private CA or
    /// the master's self-signed certificate) instead of the public web roots.
    #[arg(long, value_name = "PEM", env = "TUNEFLEET_CA_CERT")]
    ca_cert: Option<PathBuf>,

    /// What this machine compiles for: `auto` (the default: a CUDA slot per
    /// NVIDIA GPU that `--gpus` picks, each with its `arch`; on a host
    /// without one, the CPU: LLVM's name for it as `mcpu`, the cores this
    /// process may use as `num-cores`), or a TVM target as JSON
    /// ('{"kind":"llvm","num-cores":2}', '{"kind":"cuda"}': a slot per GPU)
    /// or as a legacy string ('llvm -num-cores=2'). A job's target attributes
    /// that it leaves open are filled from this one.
    #[arg(long, default_value = "auto", value_parser = parse_target_arg)]
    target: TargetArg,

    /// NVIDIA GPUs to serve, by nvidia-smi's index (`0,2`), `all` (the
    /// default: every GPU CUDA_VISIBLE_DEVICES lets this process use) or
    /// `none` (the CPU only). Each GPU is a slot of its own on the master,
    /// named NAME-gpuN, with a driver that sees that GPU alone.
    #[arg(long, value_name = "LIST", value_parser = parse_gpus)]
    gpus: Option<GpuSelection>,

    /// Also serve llvm jobs on this host's CPU beside the GPU slots (off by
    /// default: a CPU job measures on the cores the GPU slots build with).
    #[arg(long)]
    cpu_slot: bool,

    /// How to tune: `tvm` (TVM MetaSchedule; needs a build with the `tvm`
    /// feature) or `sim`, a fleet-testing tool that fakes results.
    #[arg(long, value_enum, default_value_t = BackendKind::Tvm)]
    backend: BackendKind,

    /// Seconds the sim backend spends per job (0: answer at once).
    #[arg(long, default_value = "0.5", value_parser = parse_seconds)]
    sim_seconds: Duration,

    /// tvm: the Python interpreter that has `tvm` and `tvm_ffi` (default:
    /// .venv/bin/python in the current directory or above, or near the
    /// executable, else python3).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,

    /// tvm: the long-lived driver: a Python module run with `python -m`
    /// (default: tunefleet._driver, from the `tunefleet` package that
    /// scripts/setup-tvm.sh installs), or a script path ending in .py.
    #[arg(long, value_name = "MODULE|PATH")]
    tvm_driver: Option<String>,

    /// tvm: where per-job work directories are made (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,

    /// tvm: keep each job's work directory (database, logs, libraries) after the job.
    #[arg(long)]
    keep_work_dirs: bool,

    /// tvm: measure on the devices of this RPC tracker (HOST:PORT); needs --rpc-key.
    #[arg(long, value_name = "HOST:PORT", requires = "rpc_key")]
    rpc_tracker: Option<String>,

    /// tvm: the device key to request from the RPC tracker.
    #[arg(long, value_name = "KEY", requires = "rpc_tracker")]
    rpc_key: Option<String>,

    /// tvm: candidates MetaSchedule measures per round (num_trials_per_iter).
    #[arg(long, value_name = "N", default_value_t = 8)]
    trials_per_round: u32,

    /// Name shown on the master (default: HOSTNAME-PID).
    #[arg(long)]
    name: Option<String>,

    /// Join secret, if the master was started with one. Prefer the
    /// environment variable: command lines are visible to other users.
    #[arg(long, env = "TUNEFLEET_WORKER_SECRET", hide_env_values = true)]
    worker_secret: Option<String>,

    /// First reconnect delay; doubles per failed attempt, with jitter.
    #[arg(long, default_value_t = 200)]
    backoff_initial_ms: u64,

    /// Cap on the reconnect delay.
    #[arg(long, default_value_t = 10_000)]
    backoff_max_ms: u64,

    /// Silence from the master (no message, no ping) for this long is a
    /// lost connection: reconnect (e.g. `15s`). Default: the master's own
    /// --heartbeat-timeout, which it tells the worker when it registers.
    #[arg(long, value_name = "DURATION", value_parser = tunefleet_worker::session::parse_duration)]
    heartbeat_timeout: Option<Duration>,

    /// Exit after this many jobs have been reported and acknowledged (for
    /// tests; per slot when the worker serves several GPUs).
    #[arg(long)]
    max_jobs: Option<u64>,

    /// sim: jobs held and run at once (1 to 64); the master shows one worker
    /// per slot. The tvm backend runs one job at a time: a tuning run
    /// measures on every core, and two would measure against each other.
    #[arg(long, value_name = "N", default_value_t = 1)]
    slots: u32,

    /// Run only on these CPUs (e.g. `0-3` or `0,2`), the Python driver and its
    /// build and measurement processes included; `--target auto` then counts
    /// these as `num-cores`.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    cpus: Option<CpuSet>,

    /// Started by a supervisor (`tunefleet serve --local-workers`) that holds
    /// this process's stdin: when stdin closes (the supervisor stopped or
    /// died), hand back the job and exit, as on SIGTERM.
    #[arg(long)]
    supervised: bool,
}

fn parse_gpus(text: &str) -> Result<GpuSelection, String> {
    GpuSelection::parse(text).map_err(|e| e.to_string())
}

fn parse_cpus(text: &str) -> Result<CpuSet, String> {
    CpuSet::parse(text).map_err(|e| e.to_string())
}

/// Every backend, whatever this build provides, so the command line is the
/// same for every build; choosing one that is not built in is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// TVM MetaSchedule in a Python subprocess, verified and timed in process.
    Tvm,
    /// Fake tuning for fleet tests; results are synthetic.
    Sim,
}

type TargetArg = TargetChoice;

fn parse_target_arg(text: &str) -> Result<TargetArg, String> {
    if text.trim() == "auto" {
        return Ok(TargetChoice::Auto);
    }
    Target::parse(text)
        .map(TargetChoice::Given)
        .map_err(|e| e.to_string())
}

fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `--target auto` on the CPU: `{"kind":"llvm","mcpu":HOST,"num-cores":N}`.
/// Without a CPU name (sim backend, or LLVM says "generic") `mcpu` is left out.
fn host_target(host_cpu: Option<&str>) -> Target {
    let cores = host_cores();
    let mut text = serde_json::json!({"kind": "llvm", "num-cores": cores});
    if let Some(cpu) = host_cpu {
        text["mcpu"] = serde_json::Value::String(cpu.to_string());
    }
    Target::parse(&text.to_string()).unwrap_or_else(|_| Target::of_kind("llvm"))
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| "must be a non-negative number of seconds".to_string())
}

fn default_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_string());
    format!("{host}-{}", std::process::id())
}

/// The backend the slots are made from: the sim backend is shared, the TVM
/// backend gives each GPU slot one of its own (`TvmBackend::for_gpu`).
enum BaseBackend {
    Sim(Arc<SimBackend>),
    #[cfg(feature = "tvm")]
    Tvm(Arc<tunefleet_worker::backend::tvm::TvmBackend>),
}

impl BaseBackend {
    /// The host CPU's LLVM name, when the backend knows it.
    fn host_cpu(&self) -> Option<String> {
        match self {
            BaseBackend::Sim(_) => None,
            #[cfg(feature = "tvm")]
            BaseBackend::Tvm(tvm) => tvm.host_cpu().map(str::to_string),
        }
    }

    /// The backend of one slot; `gpu_slots` share the host's cores for
    /// building candidates.
    fn for_slot(&self, slot: &Slot, gpu_slots: usize) -> Arc<dyn Backend> {
        let _ = (slot, gpu_slots); // read by the TVM arms only
        match self {
            BaseBackend::Sim(sim) => sim.clone(),
            #[cfg(feature = "tvm")]
            BaseBackend::Tvm(tvm) if slot.gpu.is_some() => {
                let builders = (host_cores() / gpu_slots.max(1)).max(2);
                Arc::new(tvm.for_gpu(slot.env(), builders as u32))
            }
            #[cfg(feature = "tvm")]
            BaseBackend::Tvm(tvm) => tvm.clone(),
        }
    }
}

async fn make_backend(cli: &Cli) -> anyhow::Result<BaseBackend> {
    match cli.backend {
        BackendKind::Sim => Ok(BaseBackend::Sim(Arc::new(SimBackend::new(cli.sim_seconds)))),
        BackendKind::Tvm => make_tvm_backend(cli).await,
    }
}

#[cfg(feature = "tvm")]
async fn make_tvm_backend(cli: &Cli) -> anyhow::Result<BaseBackend> {
    use tunefleet_worker::backend::tvm::{DriverCommand, RpcTracker, TvmBackend, TvmConfig};
    let rpc = match (&cli.rpc_tracker, &cli.rpc_key) {
        (Some(tracker), Some(key)) => Some(
            RpcTracker::parse(tracker, key)
                .map_err(|e| anyhow::anyhow!("invalid --rpc-tracker/--rpc-key: {e}"))?,
        ),
        _ => None,
    };
    let config = TvmConfig {
        python: cli.python.clone(),
        driver: cli
            .tvm_driver
            .as_deref()
            .map(DriverCommand::parse)
            .unwrap_or_default(),
        work_root: cli.work_dir.clone(),
        keep_work_dirs: cli.keep_work_dirs,
        rpc,
        trials_per_round: cli.trials_per_round,
        ..TvmConfig::default()
    };
    // Probing the interpreter blocks for about a second.
    let backend = tokio::task::spawn_blocking(move || TvmBackend::new(config)).await??;
    Ok(BaseBackend::Tvm(Arc::new(backend)))
}

#[cfg(not(feature = "tvm"))]
async fn make_tvm_backend(_cli: &Cli) -> anyhow::Result<BaseBackend> {
    bail!(
        "this worker was built without the `tvm` feature; rebuild with --features tvm \
         (or pass --backend sim for fleet tests)"
    )
}

/// The GPUs `--gpus` and `CUDA_VISIBLE_DEVICES` give this worker, and why
/// there are none when there are none. A failing `nvidia-smi` is an error
/// only when GPUs were asked for (`--gpus`, a cuda `--target`).
async fn find_gpus(cli: &Cli) -> anyhow::Result<(Vec<Gpu>, String)> {
    let selection = cli.gpus.clone().unwrap_or_default();
    let asked = cli.gpus.as_ref().is_some_and(|g| *g != GpuSelection::None)
        || matches!(&cli.target, TargetChoice::Given(t) if t.kind() == "cuda");
    let wanted =
        selection != GpuSelection::None && (asked || matches!(cli.target, TargetChoice::Auto));
    if !wanted {
        return Ok((Vec::new(), "--gpus none".into()));
    }
    let all = match gpu::detect().await {
        Ok(all) => all,
        Err(e) if asked => bail!("cannot list this host's GPUs: {e}"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list NVIDIA GPUs; serving the CPU");
            return Ok((Vec::new(), e.to_string()));
        }
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let chosen = gpu::select(&all, &selection, visible.as_deref())?;
    let why = if all.is_empty() {
        "nvidia-smi lists none, or is not installed".to_string()
    } else {
        format!("CUDA_VISIBLE_DEVICES={}", visible.unwrap_or_default())
    };
    Ok((chosen, why))
}

/// Before a TVM worker registers a GPU slot: can its Python compile and
/// run CUDA? (Says what to install when it cannot.)
async fn check_cuda(base: &BaseBackend, slots: &[Slot]) -> anyhow::Result<()> {
    #[cfg(feature = "tvm")]
    if let (BaseBackend::Tvm(tvm), Some(slot)) = (base, slots.iter().find(|s| s.gpu.is_some())) {
        let (tvm, env) = (tvm.clone(), slot.env());
        let probe = tokio::task::spawn_blocking(move || tvm.probe_cuda(&env)).await??;
        if let Some(probe) = probe {
            tracing::info!(devices = ?probe.devices, toolkit = ?probe.toolkit, "TVM can compile and run CUDA here");
        }
    }
    let _ = (base, slots);
    Ok(())
}

/// Completes on SIGINT or SIGTERM, or when a supervisor closes our stdin.
async fn shutdown_signal(supervised: bool) {
    let supervisor_gone = async {
        if !supervised {
            return std::future::pending::<()>().await;
        }
        use tokio::io::AsyncReadExt;
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        // Anything the supervisor writes is ignored; only EOF (or an error) counts.
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
        tracing::info!("supervisor closed stdin");
    };
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
        _ = supervisor_gone => {}
    }
    tracing::info!("shutdown requested");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tunefleet_client::logging::init("info");
    // Before the runtime starts a thread: threads keep the mask they start with.
    if let Some(cpus) = &cli.cpus {
        if let Err(e) = pin_current_process(cpus) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        tracing::info!(%cpus, "pinned to CPUs (--cpus)");
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the Tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the cause chain on one line, without a backtrace.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    check_flags(&cli)?;
    let base = make_backend(&cli).await?;
    let (gpus, no_gpu_why) = find_gpus(&cli).await?;
    let host = (
        host_target(base.host_cpu().as_deref()),
        devices::host_cpu_device(host_cores()),
    );
    let options = PlanOptions {
        cpu_slot: cli.cpu_slot,
        gpus_given: cli.gpus.is_some(),
        needs_device: cli.backend == BackendKind::Tvm,
    };
    let slots = devices::plan(&cli.target, &gpus, host, &options, &no_gpu_why)?;
    check_cuda(&base, &slots).await?;
    let name = cli.name.clone().unwrap_or_else(default_name);
    let gpu_slots = slots.iter().filter(|s| s.gpu.is_some()).count();
    let mut configs = Vec::new();
    for slot in &slots {
        let slot_name = slot.name(&name, slots.len());
        tracing::info!(name = %slot_name, target = %slot.target, device = %slot.device, "serving this slot");
        configs.push(slot_config(
            &cli,
            slot,
            slot_name,
            base.for_slot(slot, gpu_slots),
        ));
    }
    let stats = run_slots(configs, shutdown_signal(cli.supervised)).await?;
    tracing::info!(?stats, "worker stopped");
    Ok(())
}

fn check_flags(cli: &Cli) -> anyhow::Result<()> {
    if cli.backoff_initial_ms == 0 {
        bail!("--backoff-initial-ms must be at least 1");
    }
    if cli.heartbeat_timeout.is_some_and(|d| d.is_zero()) {
        bail!("--heartbeat-timeout must be longer than zero");
    }
    if cli.backoff_max_ms < cli.backoff_initial_ms {
        bail!("--backoff-max-ms must not be smaller than --backoff-initial-ms");
    }
    if !tunefleet_shared::protocol::WORKER_SLOTS.contains(&cli.slots) {
        bail!(
            "--slots {}: must be between 1 and {}",
            cli.slots,
            tunefleet_shared::protocol::MAX_WORKER_SLOTS
        );
    }
    if cli.slots > 1 && cli.backend == BackendKind::Tvm {
        bail!(
            "--slots {} needs --backend sim: a TVM tuning run measures on every core, so this worker runs one at a time",
            cli.slots
        );
    }
    Ok(())
}

fn slot_config(cli: &Cli, slot: &Slot, name: String, backend: Arc<dyn Backend>) -> WorkerConfig {
    WorkerConfig {
        server: cli.server.clone(),
        target: slot.target.clone(),
        name,
        backend,
        secret: cli.worker_secret.clone(),
        backoff: Backoff {
            initial: Duration::from_millis(cli.backoff_initial_ms),
            max: Duration::from_millis(cli.backoff_max_ms),
        },
        max_jobs: cli.max_jobs,
        worker_id: None,
        ca_cert: cli.ca_cert.clone().filter(|p| !p.as_os_str().is_empty()),
        slots: cli.slots,
        heartbeat_timeout: cli.heartbeat_timeout,
        device: Some(slot.device.clone()),
    }
}
