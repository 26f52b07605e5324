//! The driver's process group and work directory, each released by a drop
//! guard: a cancelled or dropped job leaves no process and no files.

use std::path::{Path, PathBuf};

use super::TvmConfig;
use crate::backend::{JobSpec, TuneError};

/// Kills a process group with SIGKILL when dropped (unless disarmed).
#[derive(Debug)]
pub(super) struct ProcessGroupGuard {
    pub(super) pgid: libc::pid_t,
    pub(super) armed: bool,
}

impl ProcessGroupGuard {
    pub(super) fn new(pgid: u32) -> Self {
        ProcessGroupGuard {
            pgid: libc::pid_t::try_from(pgid).expect("pid fits pid_t"),
            armed: true,
        }
    }

    /// SIGKILL to every process of the group. Only called while the leader is
    /// unreaped, so the id still names our group.
    pub(super) fn kill(&self) {
        if self.pgid > 1 {
            // SAFETY: killpg has no memory-safety preconditions; ESRCH (group
            // already empty) is expected and ignored.
            unsafe {
                libc::killpg(self.pgid, libc::SIGKILL);
            }
        }
    }

    /// The leader is about to be reaped; from then on the id may be reused.
    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(
                pgid = self.pgid,
                "killing the tuning driver's process group"
            );
            self.kill();
        }
    }
}

/// Blocks until process `pid` (our child) has exited, leaving it a zombie so
/// its pid (and process group id) cannot be reused yet.
pub(super) fn wait_exit_no_reap(pid: u32) -> std::io::Result<()> {
    let id = libc::id_t::from(pid);
    loop {
        // SAFETY: siginfo_t is plain data; waitid writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A job's directory, removed on drop unless kept.
pub(super) struct WorkDir {
    pub(super) dir: Option<tempfile::TempDir>,
    pub(super) path: PathBuf,
}

/// A work directory that cannot be written: named, with the likely cause.
pub(super) fn work_dir_failure(path: &Path, e: std::io::Error) -> TuneError {
    let hint = match e.raw_os_error() {
        Some(28) => " (the disk is full: free space or give --work-dir another disk)",
        Some(30) => " (read-only file system)",
        Some(13) => " (permission denied: give --work-dir a directory this user may write)",
        _ => "",
    };
    TuneError::Failed(format!(
        "cannot write the job's work directory {}: {e}{hint}",
        path.display()
    ))
}

impl WorkDir {
    pub(super) fn create(config: &TvmConfig, job: &JobSpec) -> Result<WorkDir, TuneError> {
        let root = match &config.work_root {
            Some(root) => {
                std::fs::create_dir_all(root).map_err(|e| work_dir_failure(root, e))?;
                root.clone()
            }
            None => std::env::temp_dir(),
        };
        let prefix: String = format!("tunefleet-{}-l{}-", job.job_id, job.lease)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(&root)
            .map_err(|e| work_dir_failure(&root, e))?;
        let path = dir.path().to_path_buf();
        if config.keep_work_dirs {
            let kept = dir.keep();
            tracing::info!(dir = %kept.display(), "keeping the job's work directory");
            Ok(WorkDir { dir: None, path })
        } else {
            Ok(WorkDir {
                dir: Some(dir),
                path,
            })
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                tracing::warn!(dir = %path.display(), error = %e, "cannot remove the job's work directory");
            }
        }
    }
}

pub(super) fn io_other(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}
