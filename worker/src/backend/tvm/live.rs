//! The long-lived driver: one Python process serving job after job.
//!
//! A fresh interpreter per job cost seconds a round (start Python, `import
//! tvm`, start MetaSchedule's builder and runner processes, each of which
//! imports TVM again). `python -m tunefleet._driver` is started once
//! and sent one request line per job; it answers with the one-shot drivers'
//! protocol, ending each job with a `result` or `error` line.
//!
//! Ownership is the cancellation rule: a job takes the driver out of the
//! backend's slot and puts it back only when it saw the job's last line. A
//! job future dropped in between (a cancel, a timeout, the worker shutting
//! down) drops the driver, and its [`ProcessGroupGuard`] kills the whole
//! process group: no orphan, and the next job starts a fresh driver. A driver
//! that crashed (its output ended without a last line) is reaped and
//! replaced the same way, and one that has served [`MAX_JOBS_PER_DRIVER`]
//! jobs is retired, which bounds whatever a TVM process accumulates.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::driver_output::{handle_stdout_line, Tail};
use super::process::{wait_exit_no_reap, ProcessGroupGuard};
use super::{io_other, DriverCommand, STDERR_TAIL_LINES};
use crate::backend::{ProgressSink, TuneError};

/// Jobs one driver process serves before it is replaced.
pub(super) const MAX_JOBS_PER_DRIVER: u32 = 200;

/// How long the stderr reader is given to catch up before an error is
/// reported with the driver's last lines.
const STDERR_SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// A running driver, ready for a request.
pub(super) struct LiveDriver {
    // Declared before `child`, so dropped first: the group dies while its
    // leader is still unreaped and the group id cannot have been reused.
    group: ProcessGroupGuard,
    child: Child,
    pid: u32,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The driver's stderr, drained by a task of its own (an idle driver's
    /// pipe must never fill up); cleared at the start of each job so an error
    /// shows that job's lines.
    stderr: Arc<Mutex<Tail>>,
    stderr_task: tokio::task::JoinHandle<()>,
    pub(super) jobs: u32,
}

/// How one job on the driver ended.
pub(super) enum JobEnd {
    /// The job's last line: its `result` (Ok) or `error` message (Err). The
    /// driver is ready for the next job.
    Finished(Result<serde_json::Value, String>),
    /// The driver's output ended first: it crashed or was killed.
    Died(String),
}

impl LiveDriver {
    /// Starts `python -m tunefleet._driver --work-root DIR` (or the driver
    /// given) in a process group of its own, which gets SIGTERM if this
    /// worker dies without running destructors.
    pub(super) fn spawn(
        python: &Path,
        driver: &DriverCommand,
        work_root: &Path,
        env: &[(String, String)],
    ) -> Result<Self, TuneError> {
        let mut command = tokio::process::Command::new(python);
        command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(driver.args())
            .arg("--work-root")
            .arg(work_root)
            .current_dir(work_root)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // If this worker dies without running its destructors (SIGKILL, OOM
        // killer), the driver gets SIGTERM, on which it kills its own children
        // and exits. (The signal follows the spawning *thread*; Tokio's worker
        // threads live as long as the runtime.)
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and only calls
        // async-signal-safe functions (prctl, getppid, _exit).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            TuneError::Failed(format!(
                "cannot start the tuning driver {} {driver}: {e}",
                python.display(),
            ))
        })?;
        let pid = child
            .id()
            .ok_or_else(|| TuneError::Failed("the tuning driver exited at once".into()))?;
        let group = ProcessGroupGuard::new(pid);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(TuneError::Failed(
                "the tuning driver's pipes are missing".into(),
            ));
        };
        let tail = Arc::new(Mutex::new(Tail::new(STDERR_TAIL_LINES)));
        let sink = Arc::clone(&tail);
        let stderr_task = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "tunefleet_worker::tvm_driver", "{line}");
                if let Ok(mut tail) = sink.lock() {
                    tail.push(line);
                }
            }
        });
        tracing::info!(pid, %driver, "started the long-lived tuning driver");
        Ok(LiveDriver {
            group,
            child,
            pid,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            stderr: tail,
            stderr_task,
            jobs: 0,
        })
    }

    /// Whether the process has exited (without reaping it: the group id
    /// stays ours until [`LiveDriver::retire`]).
    pub(super) fn has_exited(&self) -> bool {
        let id = libc::id_t::from(self.pid);
        // SAFETY: siginfo_t is plain data; waitid writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                id,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        // With WNOHANG, a child still running leaves si_pid 0.
        rc != 0 || unsafe { info.si_pid() } != 0
    }

    /// Kills what is left of the group and reaps the driver; its exit
    /// status, and its last stderr lines once the pipe has been read to
    /// its end.
    pub(super) async fn retire(mut self) -> (String, (usize, String)) {
        self.group.kill();
        self.group.disarm();
        let status = match self.child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("unknown status ({e})"),
        };
        // With the whole group dead the pipe closes; give the reader a moment.
        let _ = tokio::time::timeout(STDERR_SETTLE * 20, &mut self.stderr_task).await;
        (status, self.stderr_tail())
    }

    /// The driver's stderr lines since the job began.
    pub(super) fn stderr_tail(&self) -> (usize, String) {
        self.stderr
            .lock()
            .map(|t| (t.len(), t.text()))
            .unwrap_or_default()
    }

    /// Sends one job and reads its lines to the last one.
    pub(super) async fn run_job(
        &mut self,
        request: &serde_json::Value,
        progress: &ProgressSink,
    ) -> Result<JobEnd, TuneError> {
        if let Ok(mut tail) = self.stderr.lock() {
            tail.lines.clear();
        }
        let mut line = serde_json::to_vec(request).map_err(io_other)?;
        line.push(b'\n');
        if let Err(e) = self.stdin_write(&line).await {
            return Ok(JobEnd::Died(format!("it does not take requests: {e}")));
        }
        loop {
            match self.stdout.next_line().await? {
                Some(line) => {
                    // Anything on stdout that is not an event joins the stderr
                    // lines an error message shows.
                    let end = match self.stderr.lock() {
                        Ok(mut tail) => handle_stdout_line(&line, progress, &mut tail),
                        Err(_) => handle_stdout_line(&line, progress, &mut Tail::new(1)),
                    };
                    if let Some(end) = end {
                        self.jobs += 1;
                        if end.is_err() {
                            // The lines the driver logged before its error
                            // are in the pipe: let the reader catch up.
                            tokio::time::sleep(STDERR_SETTLE).await;
                        }
                        return Ok(JobEnd::Finished(end));
                    }
                }
                None => {
                    // Output closed: the process is ending; wait for it
                    // without reaping, so the caller can retire it.
                    let pid = self.pid;
                    let _ = tokio::task::spawn_blocking(move || wait_exit_no_reap(pid)).await;
                    return Ok(JobEnd::Died("it ended without a result".into()));
                }
            }
        }
    }

    async fn stdin_write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.stdin.write_all(line).await?;
        self.stdin.flush().await
    }
}
