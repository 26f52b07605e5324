//! The `tvm` backend: tunes with TVM MetaSchedule in a Python subprocess, then
//! verifies and times the result in this process.
//!
//! # One job
//! 1. A work directory is made for the job (under `--work-dir`, or the system
//!    temp dir) and `JOB.json` written into it:
//!    `{"workload": <wire form>, "nbest": N, "seed": 0, "num_trials_per_iter": T,
//!    "max_workers": W, "check_kernel": bool, "rpc": null | {"tracker_host",
//!    "tracker_port", "key", "session_timeout_s"}}`.
//! 2. The job goes to the worker's long-lived driver (the Python package's
//!    `tunefleet._driver`, see `live.rs`), started on the first job as
//!    `PYTHON -m tunefleet._driver --work-root DIR` in a new process group
//!    (`setpgid(0, 0)`) with `PYTHONUNBUFFERED=1`, and sent one request line
//!    `{"kind": "tune" | "model", "job", "work_dir", "threads"}`. Its stdout
//!    carries JSON lines only: `started`, `progress` (forwarded to the
//!    [`ProgressSink`]), then `result` or `error`, after which it waits for the
//!    next job. Its stderr is logged at debug level and the last
//!    [`STDERR_TAIL_LINES`] lines of the job are kept for error messages.
//! 3. Unless the job is a model's round (`model_round`: the model is checked
//!    whole when it is compiled), the best schedule is checked against the
//!    untuned reference and both are timed here, through tvm-ffi
//!    ([`super::verify`]), on the blocking pool. A mismatch fails the job.
//! 4. The [`JobResult`]: `best_latency_s` is the latency measured here (a
//!    round's: MetaSchedule's); `records` are the driver's (with
//!    MetaSchedule's latencies); `extra` holds `workload` (MetaSchedule's
//!    `[hash, b64]`), `metaschedule_best_latency_s`, `untuned_latency_s`
//!    (measured here), `speedup_vs_untuned`, `max_abs_error`,
//!    `max_rel_error`, `timer`, `verified: true` (a round: `tune_s`,
//!    MetaSchedule's own time, and `verified: false`), and
//!    `warm_start_records` / `warm_start_ignored` (the warm start's records
//!    the driver loaded, or why it ignored them); a model round that shares
//!    the fleet's cost model (the assign's `cost_model`) adds `cost_model`
//!    (what its cost model started from) and `cost_model_b64` (the model it
//!    ended with), passed to and from the driver as files (`shared_model.rs`).
//!
//! # Cancellation
//! A job holds the driver while it runs. Dropping the job's future drops
//! the driver, which kills its whole process group with SIGKILL (a guard's
//! `Drop`), so no builder or runner process survives the job; the next job
//! starts a new driver. The group is always killed while its leader (the
//! driver) is not yet reaped, so its id cannot have been reused by an
//! unrelated group. A verification that has already started runs to its end
//! on the blocking pool (a kernel call cannot be interrupted) and its result
//! is dropped.
//!
//! # RPC
//! With `--rpc-tracker`, MetaSchedule measures candidates on the devices of
//! that tracker; the final verification and timing still run on this machine,
//! so the worker must be able to run the target's code itself.
//!
//! # Code
//! Here: the backend and a job's run. `live.rs` keeps the long-lived
//! driver, `driver_output.rs` reads what it prints, `process.rs` holds its
//! process group and a job's work directory (drop guards), `setup.rs` finds
//! Python and checks that it has TVM and the driver.

use super::verify::{Verification, VerifyOptions, VerifyRequest};
use super::{Backend, JobSpec, ProgressSink, TuneError, TuneFuture};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tunefleet_shared::model::{base64, ModelStage};
use tunefleet_shared::protocol::JobResult;
use tunefleet_shared::workload::Op;

mod cuda;
mod driver_output;
mod gpu_check;
mod live;
mod process;
mod setup;
mod shared_model;
#[cfg(test)]
mod tests;

use driver_output::{reduction_len, DriverResult};
use live::{JobEnd, LiveDriver, MAX_JOBS_PER_DRIVER};
use process::{io_other, work_dir_failure, WorkDir};
use setup::{absolute, find_python, probe_tvm, Probe};

/// Largest compiled model the worker sends back (base64 adds a third).
const MAX_LIBRARY_BYTES: u64 = 12 * 1024 * 1024;

/// Lines of the driver's stderr kept for error messages.
pub const STDERR_TAIL_LINES: usize = 50;
/// The long-lived driver: a module of the `tunefleet` Python package
/// (`pip install ./python`), run as `python -m`.
pub const DRIVER_MODULE: &str = "tunefleet._driver";
/// The Python interpreter, relative to the repository root.
pub use cuda::CudaProbe;
pub use tunefleet_client::repo_files::VENV_PYTHON_RELATIVE_PATH;
/// How long `python -c "import tvm"` may take at start-up.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// How the long-lived driver is started: a module of an installed package
/// (`python -m MODULE`, the default [`DRIVER_MODULE`]) or a script of its
/// own (`python SCRIPT`: another driver speaking the same protocol, or the
/// tests' fake ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverCommand {
    Module(String),
    Script(PathBuf),
}

impl DriverCommand {
    /// `--tvm-driver`'s value: a path (it ends in `.py` or names a
    /// directory) is a script, anything else a module name.
    pub fn parse(value: &str) -> DriverCommand {
        if value.ends_with(".py") || value.contains(std::path::MAIN_SEPARATOR) {
            DriverCommand::Script(PathBuf::from(value))
        } else {
            DriverCommand::Module(value.to_string())
        }
    }

    /// The interpreter's arguments before the driver's own.
    pub fn args(&self) -> Vec<std::ffi::OsString> {
        match self {
            DriverCommand::Module(module) => vec!["-m".into(), module.into()],
            DriverCommand::Script(script) => vec![script.clone().into_os_string()],
        }
    }
}

impl Default for DriverCommand {
    fn default() -> Self {
        DriverCommand::Module(DRIVER_MODULE.to_string())
    }
}

impl fmt::Display for DriverCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverCommand::Module(module) => write!(f, "-m {module}"),
            DriverCommand::Script(script) => write!(f, "{}", script.display()),
        }
    }
}

/// A MetaSchedule RPC tracker to measure on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTracker {
    pub host: String,
    pub port: u16,
    pub key: String,
    pub session_timeout_s: u32,
}

impl RpcTracker {
    /// Parses `HOST:PORT` (IPv6 as `[::1]:9190`).
    pub fn parse(host_port: &str, key: &str) -> Result<RpcTracker, String> {
        let (host, port) = host_port
            .rsplit_once(':')
            .ok_or_else(|| format!("expected HOST:PORT, got `{host_port}`"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("expected HOST:PORT, got `{host_port}`"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port in `{host_port}`"))?;
        if key.is_empty() {
            return Err("the RPC key must not be empty".into());
        }
        Ok(RpcTracker {
            host: host.to_string(),
            port,
            key: key.to_string(),
            session_timeout_s: 60,
        })
    }
}

/// How to run the TVM backend. [`TvmConfig::default`] finds everything itself.
#[derive(Clone, Debug)]
pub struct TvmConfig {
    /// The interpreter with `tvm` and `tvm_ffi`. `None`: `.venv/bin/python` in
    /// the current directory or one of its parents, then next to the
    /// executable (`<exe dir>/../../.venv/bin/python` and further up), then
    /// `python3` on `PATH`.
    pub python: Option<PathBuf>,
    /// The long-lived driver (default: `python -m tunefleet._driver`).
    pub driver: DriverCommand,
    /// Where job directories are made. `None`: the system temp dir.
    pub work_root: Option<PathBuf>,
    /// Keep each job's directory (JOB.json, database, libraries) after the job.
    pub keep_work_dirs: bool,
    pub rpc: Option<RpcTracker>,
    /// MetaSchedule's `num_trials_per_iter`.
    pub trials_per_round: u32,
    /// MetaSchedule's builder/runner `max_workers`.
    pub max_workers: u32,
    /// Verification and timing; `reduction_len` is filled in per workload.
    pub verify: VerifyOptions,
    /// Set in the driver's environment: a GPU slot's `CUDA_VISIBLE_DEVICES`
    /// (its own GPU, by UUID), so that the driver, its builders and its
    /// runners see that GPU alone, as device 0.
    pub env: Vec<(String, String)>,
}

impl Default for TvmConfig {
    fn default() -> Self {
        TvmConfig {
            python: None,
            driver: DriverCommand::default(),
            work_root: None,
            keep_work_dirs: false,
            rpc: None,
            trials_per_round: 8,
            max_workers: 2,
            verify: VerifyOptions::default(),
            env: Vec::new(),
        }
    }
}

/// Why a [`TvmBackend`] could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TvmSetupError {
    #[error("cannot run the Python interpreter {}: {reason} — run scripts/setup-tvm.sh or pass --python", python.display())]
    Python { python: PathBuf, reason: String },
    #[error("TVM is not importable by {}: {detail} — run scripts/setup-tvm.sh or pass --python", python.display())]
    TvmNotImportable { python: PathBuf, detail: String },
    #[error("the tuning driver `{module}` is not installed for {}: {}", python.display(), tunefleet_client::repo_files::PACKAGE_HINT)]
    DriverNotInstalled { python: PathBuf, module: String },
    #[error("the tuning driver {} does not exist; check --tvm-driver", .0.display())]
    DriverMissing(PathBuf),
    #[error("invalid TVM backend setting: {0}")]
    Invalid(String),
    #[error("this host has NVIDIA GPUs, but TVM cannot use them from {}: missing {missing} — {install}; or pass --gpus none to serve the CPU only", python.display())]
    NoCuda {
        python: PathBuf,
        missing: String,
        install: String,
    },
}

/// See the module docs.
pub struct TvmBackend {
    python: PathBuf,
    driver: DriverCommand,
    tvm_version: String,
    /// libtvm_runtime.so as the interpreter's TVM finds it, if it does.
    runtime_lib: Option<PathBuf>,
    host_cpu: Option<String>,
    config: TvmConfig,
    /// The long-lived driver between jobs (`live.rs`); a running job holds it.
    live: tokio::sync::Mutex<Option<LiveDriver>>,
}

impl fmt::Debug for TvmBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TvmBackend")
            .field("python", &self.python)
            .field("driver", &self.driver.to_string())
            .field("tvm_version", &self.tvm_version)
            .finish_non_exhaustive()
    }
}

impl TvmBackend {
    /// Finds the interpreter and the driver, and checks once that the
    /// interpreter imports `tvm` and `tvm_ffi` (blocking, about a second).
    pub fn new(config: TvmConfig) -> Result<TvmBackend, TvmSetupError> {
        if config.trials_per_round == 0 {
            return Err(TvmSetupError::Invalid(
                "--trials-per-round must be at least 1".into(),
            ));
        }
        if config.max_workers == 0 {
            return Err(TvmSetupError::Invalid(
                "max_workers must be at least 1".into(),
            ));
        }
        let python = match &config.python {
            Some(python) => python.clone(),
            None => find_python(),
        };
        let driver = match &config.driver {
            DriverCommand::Script(script) if !script.is_file() => {
                return Err(TvmSetupError::DriverMissing(script.clone()))
            }
            DriverCommand::Script(script) => DriverCommand::Script(absolute(script)),
            module => module.clone(),
        };
        let Probe {
            tvm_version,
            runtime_lib,
            host_cpu,
        } = probe_tvm(&python, &driver)?;
        tracing::info!(
            python = %python.display(),
            %driver,
            %tvm_version,
            runtime = ?runtime_lib,
            "TVM backend ready"
        );
        Ok(TvmBackend {
            python,
            driver,
            tvm_version,
            runtime_lib,
            host_cpu,
            config,
            live: tokio::sync::Mutex::new(None),
        })
    }

    /// The host CPU as LLVM names it (`znver3`, `skylake-avx512`), for `--target auto`.
    pub fn host_cpu(&self) -> Option<&str> {
        self.host_cpu.as_deref()
    }

    /// The interpreter in use.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// The driver in use.
    pub fn driver(&self) -> &DriverCommand {
        &self.driver
    }

    async fn run(&self, job: JobSpec, progress: ProgressSink) -> Result<JobResult, TuneError> {
        if let Op::Model { model } = &job.workload.op {
            let stage = (**model).clone();
            return self.run_model_stage(&job, stage, progress).await;
        }
        let started = Instant::now();
        let work = WorkDir::create(&self.config, &job)?;
        let job_file = work.path().join("JOB.json");
        let job_json = self.tune_job_json(&job, work.path());
        std::fs::write(
            &job_file,
            serde_json::to_vec_pretty(&job_json).map_err(io_other)?,
        )
        .map_err(|e| work_dir_failure(&job_file, e))?;
        tracing::info!(
            job_id = %job.job_id,
            work_dir = %work.path().display(),
            "starting the tuning driver"
        );

        let outcome = self
            .drive("tune", &job, &job_file, work.path(), &progress)
            .await?;
        let mut driver_result: DriverResult = serde_json::from_value(outcome?).map_err(|e| {
            TuneError::Failed(format!("tuning driver failed: malformed result event: {e}"))
        })?;
        driver_result.cost_model_extra = shared_model::take_returned(&mut driver_result);
        if job.workload.target.kind() == "cuda" && !job.model_round {
            // Checked and timed by the driver on the GPU (`gpu_check.rs`).
            drop(work);
            return self.cuda_job_result(&job, driver_result, started);
        }
        let (Some(tuned_lib), Some(reference_lib)) = (
            driver_result.tuned_lib.clone(),
            driver_result.reference_lib.clone(),
        ) else {
            if !job.model_round {
                return Err(TuneError::Failed(
                    "tuning driver failed: its result names no libraries to check".into(),
                ));
            }
            // A model's round: checked whole when the model is compiled.
            drop(work);
            return Ok(self.job_result(&job, driver_result, None, started));
        };

        let request = self.verify_request(&job, &driver_result, tuned_lib, reference_lib)?;
        let verification = request.run_blocking().await.map_err(|e| {
            TuneError::Failed(format!("verification of the tuned kernel failed: {e}"))
        })?;
        tracing::info!(
            job_id = %job.job_id,
            tuned_s = verification.tuned_latency_s,
            untuned_s = verification.reference_latency_s,
            metaschedule_s = driver_result.best_latency_s,
            "tuned kernel verified"
        );
        drop(work);
        Ok(self.job_result(&job, driver_result, Some(verification), started))
    }

    /// `JOB.json`, what the driver reads for a tuning job: the workload, the
    /// search settings (the job's tuner over this worker's defaults), the
    /// warm start, the shared cost model and where to measure.
    fn tune_job_json(&self, job: &JobSpec, work_dir: &Path) -> serde_json::Value {
        let tuner = &job.tuner;
        serde_json::json!({
            "workload": job.workload,
            "nbest": job.nbest,
            "seed": search_seed(job),
            "num_trials_per_iter": tuner.trials_per_round.unwrap_or(self.config.trials_per_round),
            "max_workers": self.config.max_workers,
            "warm_start": job.warm_start,
            "strategy": tuner.strategy,
            "cost_model": tuner.cost_model,
            "rules": tuner.rules,
            "builder_timeout_s": tuner.builder_timeout_s,
            "runner_timeout_s": tuner.runner_timeout_s,
            "number": tuner.number,
            "repeat": tuner.repeat,
            "check_kernel": !job.model_round,
            "cost_model_share": shared_model::job_field(work_dir, job.cost_model.as_deref()),
            "reduction_len": reduction_len(&job.workload),
            "rpc": self.config.rpc.as_ref().map(|rpc| serde_json::json!({
                "tracker_host": rpc.host,
                "tracker_port": rpc.port,
                "key": rpc.key,
                "session_timeout_s": rpc.session_timeout_s,
            })),
        })
    }

    /// The check of the tuned kernel against the untuned reference, with
    /// the runtime library the driver found (else the start-up check's).
    fn verify_request(
        &self,
        job: &JobSpec,
        driver_result: &DriverResult,
        tuned_lib: PathBuf,
        reference_lib: PathBuf,
    ) -> Result<VerifyRequest, TuneError> {
        let mut options = self.config.verify.clone();
        if options.reduction_len.is_none() {
            options.reduction_len = reduction_len(&job.workload);
        }
        Ok(VerifyRequest {
            tuned_lib,
            reference_lib,
            entry: driver_result.entry.clone(),
            args: driver_result.args.clone(),
            outputs: driver_result.outputs.clone(),
            runtime_lib: driver_result
                .tvm_runtime_lib
                .clone()
                .or_else(|| self.runtime_lib.clone())
                .ok_or_else(|| {
                    TuneError::Failed(
                        "neither the tuning driver nor the start-up check found libtvm_runtime.so"
                            .into(),
                    )
                })?,
            options,
        })
    }

    /// The job's result: the latency measured here when the kernel was
    /// checked here, else (a model's round) MetaSchedule's.
    fn job_result(
        &self,
        job: &JobSpec,
        driver: DriverResult,
        verification: Option<Verification>,
        started: Instant,
    ) -> JobResult {
        let latency = verification
            .as_ref()
            .map_or(driver.best_latency_s, |v| v.tuned_latency_s);
        // The workload format's own count (the driver builds the op, the
        // format defines it); none for TVMScript.
        let flops = job.workload.flops();
        let mut extra = serde_json::json!({
            "workload": driver.workload,
            "metaschedule_best_latency_s": driver.best_latency_s,
            "tune_s": driver.tune_s,
            "verified": verification.is_some(),
            "warm_start_records": driver.warm_start_records,
            "warm_start_ignored": driver.warm_start_ignored,
            "rules": driver.rules,
        });
        if let Some(map) = extra.as_object_mut() {
            for (key, value) in driver.cost_model_extra {
                map.insert(key.into(), value);
            }
        }
        if let (Some(v), Some(map)) = (&verification, extra.as_object_mut()) {
            for (key, value) in [
                (
                    "untuned_latency_s",
                    serde_json::json!(v.reference_latency_s),
                ),
                (
                    "speedup_vs_untuned",
                    serde_json::json!(v.reference_latency_s / latency),
                ),
                ("max_abs_error", serde_json::json!(v.max_abs_error)),
                ("max_rel_error", serde_json::json!(v.max_rel_error)),
                ("timer", serde_json::json!(v.timer)),
            ] {
                map.insert(key.into(), value);
            }
        }
        JobResult {
            best_latency_s: latency,
            gflops: flops.map(|f| f / latency / 1e9),
            records: driver.records,
            trials: driver.trials,
            wall_time_s: started.elapsed().as_secs_f64(),
            backend: self.name().to_string(),
            tvm_version: Some(
                driver
                    .tvm_version
                    .unwrap_or_else(|| self.tvm_version.clone()),
            ),
            extra,
            target: Some(job.workload.target.clone()),
        }
    }

    /// Runs one job on the long-lived driver (started when there is none,
    /// or when the last one died or served its share). The outer error is
    /// I/O trouble of our own; the inner one is the driver's failure.
    async fn drive(
        &self,
        kind: &str,
        job: &JobSpec,
        job_file: &Path,
        work_dir: &Path,
        progress: &ProgressSink,
    ) -> Result<Result<serde_json::Value, TuneError>, TuneError> {
        let mut slot = self.live.lock().await;
        let mut driver = match slot.take() {
            Some(driver) if !driver.has_exited() && driver.jobs < MAX_JOBS_PER_DRIVER => driver,
            stale => {
                if let Some(old) = stale {
                    let (status, _) = old.retire().await;
                    tracing::info!(%status, "replacing the tuning driver");
                }
                LiveDriver::spawn(
                    &self.python,
                    &self.driver,
                    &self.work_root()?,
                    &self.config.env,
                )?
            }
        };
        let request = serde_json::json!({
            "kind": kind,
            "job": job_file,
            "work_dir": work_dir,
            "threads": job.workload.target.attrs().get("num-cores").and_then(serde_json::Value::as_u64),
        });
        let failure = |message: String, (lines, tail): (usize, String)| {
            let mut text = format!("tuning driver failed: {message}");
            if !tail.is_empty() {
                text.push_str(&format!(
                    "\n--- driver stderr (last {lines} lines) ---\n{tail}"
                ));
            }
            TuneError::Failed(text)
        };
        Ok(match driver.run_job(&request, progress).await? {
            JobEnd::Finished(Ok(result)) => {
                *slot = Some(driver);
                Ok(result)
            }
            JobEnd::Finished(Err(message)) => {
                let tail = driver.stderr_tail();
                *slot = Some(driver);
                Err(failure(message, tail))
            }
            JobEnd::Died(how) => {
                let (status, tail) = driver.retire().await;
                Err(failure(format!("{how} (exit status: {status})"), tail))
            }
        })
    }

    /// Where the driver stays between jobs (the jobs' own directories are
    /// made under it too).
    fn work_root(&self) -> Result<PathBuf, TuneError> {
        let root = self
            .config
            .work_root
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&root).map_err(|e| work_dir_failure(&root, e))?;
        Ok(absolute(&root))
    }
}

impl TvmBackend {
    /// A model run's extract or compile job: the model driver does the work
    /// (it verifies against onnxruntime itself, since that is Python); this
    /// side passes its findings on, and the compiled library with them.
    async fn run_model_stage(
        &self,
        job: &JobSpec,
        stage: ModelStage,
        progress: ProgressSink,
    ) -> Result<JobResult, TuneError> {
        let started = Instant::now();
        let work = WorkDir::create(&self.config, job)?;
        let job_file = work.path().join("JOB.json");
        let (mode, source, tasks) = match &stage {
            ModelStage::Extract { source, .. } => ("extract", source, Vec::new()),
            ModelStage::Compile { source, tasks, .. } => ("compile", source, tasks.clone()),
        };
        let job_json = serde_json::json!({
            "mode": mode,
            "model_b64": source.onnx_b64,
            "input_shapes": source.input_shapes,
            "seed": source.seed,
            "prepack": source.prepack,
            "layout": source.layout,
            "auto_layout": source.auto_layout,
            "recipe": source.recipe(),
            "target": job.workload.target,
            "tasks": tasks,
        });
        std::fs::write(
            &job_file,
            serde_json::to_vec_pretty(&job_json).map_err(io_other)?,
        )
        .map_err(|e| work_dir_failure(&job_file, e))?;
        tracing::info!(job_id = %job.job_id, mode, work_dir = %work.path().display(), "starting the model driver");
        let mut value = self
            .drive("model", job, &job_file, work.path(), &progress)
            .await??;
        let object = value
            .as_object_mut()
            .ok_or_else(|| TuneError::Failed("model driver: result is not an object".into()))?;
        object.remove("event");
        let best_latency_s = if mode == "compile" {
            take_compiled_model(object, source.prepack)?
        } else {
            0.0
        };
        let tvm_version = object
            .get("tvm_version")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .or_else(|| Some(self.tvm_version.clone()));
        drop(work);
        Ok(JobResult {
            best_latency_s,
            gflops: None,
            records: Vec::new(),
            trials: 0,
            wall_time_s: started.elapsed().as_secs_f64(),
            backend: self.name().to_string(),
            tvm_version,
            extra: value,
            target: Some(job.workload.target.clone()),
        })
    }
}

/// A compile stage's result made ready to report: it must be verified
/// against onnxruntime and timed (its tuned latency is returned), and the
/// library it wrote travels inside it as `library_b64`. A pre-packed run's
/// compile has random weights compiled in (ResNet-50: 100 MB): the driver
/// verifies and times it and writes no library (`library` is null).
fn take_compiled_model(
    object: &mut serde_json::Map<String, serde_json::Value>,
    prepack: bool,
) -> Result<f64, TuneError> {
    if object.get("verified").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(TuneError::Failed(
            "model driver: the compiled model was not verified against onnxruntime".into(),
        ));
    }
    let tuned = object
        .get("latency_s")
        .and_then(|l| l.get("tuned"))
        .and_then(serde_json::Value::as_f64)
        .filter(|l| l.is_finite() && *l > 0.0)
        .ok_or_else(|| TuneError::Failed("model driver: no tuned latency in the result".into()))?;
    let library = object.remove("library");
    if prepack {
        return Ok(tuned);
    }
    let path = library
        .and_then(|p| p.as_str().map(PathBuf::from))
        .ok_or_else(|| TuneError::Failed("model driver: no `library` path".into()))?;
    let size = std::fs::metadata(&path)?.len();
    if size > MAX_LIBRARY_BYTES {
        return Err(TuneError::Failed(format!(
            "the compiled model is {size} bytes, over the {MAX_LIBRARY_BYTES}-byte limit a result can carry"
        )));
    }
    let bytes = std::fs::read(&path)?;
    object.insert(
        "library_b64".into(),
        serde_json::Value::String(base64::encode(&bytes)),
    );
    Ok(tuned)
}

/// A model round's search seed comes from its job's id: the planner may run
/// two rounds of a task at once from the same records, which must not search
/// alike. Other jobs keep seed 0 (repeatable).
fn search_seed(job: &JobSpec) -> u64 {
    if !job.model_round {
        return 0;
    }
    job.job_id
        .get(..7)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or(0)
}

impl Backend for TvmBackend {
    fn name(&self) -> &str {
        "tvm"
    }

    fn tvm_version(&self) -> Option<String> {
        Some(self.tvm_version.clone())
    }

    fn tune(&self, job: JobSpec, progress: ProgressSink) -> TuneFuture<'_> {
        Box::pin(self.run(job, progress))
    }
}
