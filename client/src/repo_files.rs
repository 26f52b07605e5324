//! Where a binary finds the Python side: the TVM venv's interpreter. The
//! drivers are modules of the `tunefleet` package installed in it
//! (`python -m tunefleet._driver`), so the interpreter is all there is to
//! find.
//!
//! The worker (which runs the drivers for jobs) and the CLI (`tunefleet
//! compile`, which runs the model driver on the user's machine) look in the
//! same places, so a checkout that works for one works for the other: the
//! current directory and its parents first (a user inside the checkout),
//! then the executable's `target/<profile>/../..` and its parents (a binary
//! run from anywhere).

use std::path::{Path, PathBuf};

/// What to do when the interpreter lacks the `tunefleet` package (the drivers).
pub const PACKAGE_HINT: &str = "install the tunefleet Python package into that interpreter \
     (scripts/setup-tvm.sh does, or `pip install ./python` from a tunefleet checkout)";

/// Whether a Python process's stderr says the `tunefleet` package is missing.
pub fn package_missing(stderr: &str) -> bool {
    stderr.contains("No module named 'tunefleet")
}

/// The venv `scripts/setup-tvm.sh` creates, relative to the repository root.
pub const VENV_PYTHON_RELATIVE_PATH: &str = ".venv/bin/python";

/// Directories to search for repository-relative files, in order.
pub fn search_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        let start = exe_dir.parent().and_then(Path::parent).unwrap_or(&exe_dir);
        for dir in start.ancestors() {
            if !roots.iter().any(|r| r == dir) {
                roots.push(dir.to_path_buf());
            }
        }
    }
    roots
}

/// `.venv/bin/python` under the first search root that has one, else
/// `python3` from `PATH`.
pub fn find_python() -> PathBuf {
    search_roots()
        .into_iter()
        .map(|root| root.join(VENV_PYTHON_RELATIVE_PATH))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}
