//! Finding Python and probing what it can do before the first job: TVM,
//! the host CPU, and the driver (the `tunefleet` package installed).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{DriverCommand, TvmSetupError, PROBE_TIMEOUT};

pub(super) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

pub(super) use tunefleet_client::repo_files::find_python;

/// What the start-up check learnt.
pub(super) struct Probe {
    pub(super) tvm_version: String,
    pub(super) runtime_lib: Option<PathBuf>,
    pub(super) host_cpu: Option<String>,
}

/// `import tvm, tvm_ffi`, then the version and (best effort) the runtime
/// library, and whether the driver module given as the first argument (if
/// any) can be found. Marked lines, in case importing prints something of
/// its own.
pub(super) const PROBE_SCRIPT: &str = "import sys, importlib.util
import tvm, tvm_ffi
print('tunefleet-tvm-version=' + tvm.__version__)
if len(sys.argv) > 1:
    try:
        found = importlib.util.find_spec(sys.argv[1]) is not None
    except ImportError:
        found = False
    print('tunefleet-driver=' + ('found' if found else 'missing'))
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
/// plus the runtime path and the driver module) with a time limit.
pub(super) fn probe_tvm(python: &Path, driver: &DriverCommand) -> Result<Probe, TvmSetupError> {
    let mut command = std::process::Command::new(python);
    command.arg("-c").arg(PROBE_SCRIPT);
    if let DriverCommand::Module(module) = driver {
        command.arg(module);
    }
    let mut child = command
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
        if let (DriverCommand::Module(module), Some("missing")) =
            (driver, marked("tunefleet-driver=").as_deref())
        {
            return Err(TvmSetupError::DriverNotInstalled {
                python: python.to_path_buf(),
                module: module.clone(),
            });
        }
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
