//! The TVM backend on a GPU: one backend per GPU slot, and the start-up
//! check that the interpreter can compile and run CUDA.
//!
//! Why one backend per GPU: a backend keeps one long-lived driver, and a
//! driver measures on the devices it sees. A GPU slot's driver is started
//! with `CUDA_VISIBLE_DEVICES` naming its GPU by UUID, so it, its builders
//! and its runners see that GPU alone, as device 0, and two slots never
//! measure on the same card. The probe of the first (TVM, the interpreter,
//! the host CPU) holds for all: [`TvmBackend::for_gpu`] copies it.
//!
//! Why a probe before registering: TVM's pip wheel runs without CUDA when
//! `libcudart` or NVRTC is missing, and only a job would find out, by
//! failing. The probe runs the driver package's own check (`python -m
//! tunefleet._driver.cuda --probe --gpu`), which names what is missing and
//! the command that installs it; the worker refuses to start with it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::{DriverCommand, TvmBackend, TvmSetupError};

/// The driver package's CUDA check (`tunefleet/_driver/cuda.py`).
const CUDA_MODULE: &str = "tunefleet._driver.cuda";
/// `import tvm` with CUDA can take a while on a cold disk.
const CUDA_PROBE_TIMEOUT: Duration = Duration::from_secs(180);

/// What the probe found: the devices TVM's CUDA runtime sees.
#[derive(Debug, serde::Deserialize)]
pub struct CudaProbe {
    pub ok: bool,
    #[serde(default)]
    pub missing: Vec<String>,
    #[serde(default)]
    pub install: Option<String>,
    #[serde(default)]
    pub devices: Vec<serde_json::Value>,
    #[serde(default)]
    pub toolkit: Option<String>,
}

impl TvmBackend {
    /// A backend for one GPU slot: this one's interpreter, driver and
    /// settings, with the slot's environment (`CUDA_VISIBLE_DEVICES`) and
    /// `max_workers` build processes, and a driver of its own.
    pub fn for_gpu(&self, env: Vec<(String, String)>, max_workers: u32) -> TvmBackend {
        let mut config = self.config.clone();
        config.env = env;
        config.max_workers = max_workers.max(1);
        TvmBackend {
            python: self.python.clone(),
            driver: self.driver.clone(),
            tvm_version: self.tvm_version.clone(),
            runtime_lib: self.runtime_lib.clone(),
            host_cpu: self.host_cpu.clone(),
            config,
            live: tokio::sync::Mutex::new(None),
        }
    }

    /// Checks that this interpreter can compile CUDA and run it on the GPU
    /// `env` makes visible. A driver of its own (`--tvm-driver`, tests'
    /// fakes) has no such check: it is trusted. Blocking (imports TVM).
    pub fn probe_cuda(&self, env: &[(String, String)]) -> Result<Option<CudaProbe>, TvmSetupError> {
        if !matches!(self.driver, DriverCommand::Module(_)) {
            tracing::info!("a driver of its own (--tvm-driver): CUDA support not checked");
            return Ok(None);
        }
        let probe = run_probe(&self.python, env)?;
        if probe.ok {
            return Ok(Some(probe));
        }
        Err(TvmSetupError::NoCuda {
            python: self.python.clone(),
            missing: probe.missing.join("; "),
            install: probe
                .install
                .unwrap_or_else(|| "run scripts/setup-tvm.sh --cuda".into()),
        })
    }
}

fn run_probe(python: &Path, env: &[(String, String)]) -> Result<CudaProbe, TvmSetupError> {
    let failed = |reason: String| TvmSetupError::Python {
        python: python.to_path_buf(),
        reason,
    };
    let mut child = std::process::Command::new(python)
        .args(["-m", CUDA_MODULE, "--probe", "--gpu"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    let deadline = std::time::Instant::now() + CUDA_PROBE_TIMEOUT;
    while child
        .try_wait()
        .map_err(|e| failed(e.to_string()))?
        .is_none()
    {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed(format!(
                "the CUDA check did not finish in {CUDA_PROBE_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    line.and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            failed(format!(
                "`{} -m {CUDA_MODULE} --probe` gave no answer ({}): {}",
                python.display(),
                output.status,
                last.unwrap_or("no output")
            ))
        })
}
