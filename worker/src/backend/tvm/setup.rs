//! Finding Python, the driver script and TVM, and probing what the
//! interpreter can do, before the first job.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{TvmSetupError, DRIVER_RELATIVE_PATH, PROBE_TIMEOUT};

pub(super) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

pub(super) use tunefleet_client::repo_files::find_python;

pub(super) fn find_driver() -> Result<PathBuf, TvmSetupError> {
    tunefleet_client::repo_files::find_repo_file(DRIVER_RELATIVE_PATH)
        .map_err(|searched| TvmSetupError::DriverNotFound { searched })
}

/// What the start-up check learnt.
pub(super) struct Probe {
    pub(super) tvm_version: String,
    pub(super) runtime_lib: Option<PathBuf>,
    pub(super) host_cpu: Option<String>,
}

/// `import tvm, tvm_ffi`, then the version and (best effort) the runtime library.
/// Marked lines, in case importing prints something of its own.
pub(super) const PROBE_SCRIPT: &str = "import tvm, tvm_ffi
print('tunefleet-tvm-version=' + tvm.__version__)
try:
    print('tunefleet-host-cpu=' + str(tvm.target.codegen.llvm_get_system_cpu()))
except Exception:
    pass
try:
    import os, tvm.libinfo
    print('tunefleet-tvm-runtime=' + os.path.abspath(tvm.libinfo.find_libtvm_runtime()))
except Exception:
    pass
";

/// Runs [`PROBE_SCRIPT`] (`python -c "import tvm, tvm_ffi; print(tvm.__version__)"`
/// plus the runtime path) with a time limit.
pub(super) fn probe_tvm(python: &Path) -> Result<Probe, TvmSetupError> {
    let mut child = std::process::Command::new(python)
        .arg("-c")
        .arg(PROBE_SCRIPT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TvmSetupError::Python {
            python: python.to_path_buf(),
            reason: e.to_string(),
        })?;
    // Bounded wait: a wedged interpreter must not hang the worker's start.
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(TvmSetupError::TvmNotImportable {
                    python: python.to_path_buf(),
                    detail: format!("`import tvm` did not finish in {PROBE_TIMEOUT:?}"),
                });
            }
            Err(e) => {
                return Err(TvmSetupError::Python {
                    python: python.to_path_buf(),
                    reason: e.to_string(),
                })
            }
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|e| TvmSetupError::Python {
            python: python.to_path_buf(),
            reason: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let marked = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(key).map(str::to_string))
            .filter(|v| !v.is_empty())
    };
    if let (true, Some(version)) = (output.status.success(), marked("tunefleet-tvm-version=")) {
        let runtime_lib = marked("tunefleet-tvm-runtime=")
            .map(PathBuf::from)
            .filter(|p| p.is_file());
        return Ok(Probe {
            tvm_version: version,
            runtime_lib,
            host_cpu: marked("tunefleet-host-cpu=").filter(|c| c != "generic"),
        });
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The exception line (`ModuleNotFoundError: No module named 'tvm'`).
    let detail = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("the import check exited with {}", output.status));
    Err(TvmSetupError::TvmNotImportable {
        python: python.to_path_buf(),
        detail,
    })
}
