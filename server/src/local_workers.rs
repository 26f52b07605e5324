//! `tunefleet serve --local-workers N|auto`: the master starts and supervises
//! workers on its own machine.
//!
//! Why the workers stay separate processes: a worker runs a Python driver
//! that can hang in C code or be killed by the kernel, and the master must
//! outlive all of that. They are ordinary `tunefleet-worker`s that connect
//! over loopback, so nothing in the core knows who launched them: they are
//! listed, leased and recycled like any other worker.
//!
//! Each worker gets `--cpus` (its own contiguous group of the master's
//! CPUs, so `--target auto` reports a matching `num-cores`), `--name
//! local-<i>`, and `--supervised`: its stdin is a pipe from here, and when
//! that pipe closes (the master stops, or dies by kill -9) the worker hands
//! back its job and exits. No signal and no `unsafe` is needed for that.
//!
//! Local workers split the CPUs, so they get `--gpus none` too (unless
//! `--local-worker-args` names `--gpus` or `--target`): with `--target auto`
//! every one of them would otherwise serve every GPU of the host, and the
//! GPUs' own worker is `tunefleet-worker` (a slot per GPU).
//!
//! A worker that exits while the master runs is restarted after a delay that
//! doubles from 1 s to 60 s, and resets once a worker has run for a minute.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use tunefleet_shared::cpus::{auto_worker_count, split_among, CpuSet};

/// `--local-workers`: a count or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalWorkers {
    Count(usize),
    Auto,
}

pub fn parse_local_workers(text: &str) -> Result<LocalWorkers, String> {
    match text.trim() {
        "auto" => Ok(LocalWorkers::Auto),
        n => n
            .parse::<usize>()
            .map(LocalWorkers::Count)
            .map_err(|_| format!("`{text}`: expected a number of workers or `auto`")),
    }
}

/// Flags local mode sets itself; given again in `--local-worker-args` they
/// would clash (clap refuses a repeated flag) or break supervision.
const RESERVED_FLAGS: [&str; 4] = ["--server", "--cpus", "--name", "--supervised"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocalWorkersError {
    #[error("--local-worker-args: unbalanced quotes in `{0}`")]
    Quoting(String),
    #[error("--local-worker-args must not set {0}: local mode sets it for each worker")]
    Reserved(&'static str),
}

/// Extra worker arguments, split as a shell would, with the first of
/// `reserved` they set (as `--flag` or `--flag=value`) refused. Shared by
/// local mode and the Slurm launcher, which set some flags per worker.
pub fn split_worker_args<'a>(
    text: &str,
    reserved: &[&'a str],
) -> Result<Vec<String>, WorkerArgsError<'a>> {
    let args = shlex::split(text).ok_or(WorkerArgsError::Quoting)?;
    for arg in &args {
        let flag = arg.split('=').next().unwrap_or(arg);
        if let Some(found) = reserved.iter().find(|r| **r == flag) {
            return Err(WorkerArgsError::Reserved(found));
        }
    }
    Ok(args)
}

#[derive(Debug, PartialEq, Eq)]
pub enum WorkerArgsError<'a> {
    Quoting,
    Reserved(&'a str),
}

/// One supervised worker: its name, its CPUs and its whole command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalWorkerSpec {
    pub name: String,
    pub cpus: CpuSet,
    pub args: Vec<String>,
}

/// Works out every worker's command line; pure, so it is tested without
/// starting anything.
pub fn plan(
    count: LocalWorkers,
    available: &CpuSet,
    server_url: &str,
    extra_args: &str,
) -> Result<Vec<LocalWorkerSpec>, LocalWorkersError> {
    let extra = split_worker_args(extra_args, &RESERVED_FLAGS).map_err(|e| match e {
        WorkerArgsError::Quoting => LocalWorkersError::Quoting(extra_args.into()),
        WorkerArgsError::Reserved(flag) => LocalWorkersError::Reserved(flag),
    })?;
    let n = match count {
        LocalWorkers::Count(n) => n,
        LocalWorkers::Auto => auto_worker_count(available.cpus().len()),
    };
    Ok(split_among(available, n)
        .into_iter()
        .enumerate()
        .map(|(i, cpus)| {
            let name = format!("local-{}", i + 1);
            let mut args = vec![
                "--server".to_string(),
                server_url.to_string(),
                "--name".to_string(),
                name.clone(),
                "--cpus".to_string(),
                cpus.to_string(),
                "--supervised".to_string(),
            ];
            let names = |a: &String, flag: &str| a == flag || a.starts_with(&format!("{flag}="));
            if !extra
                .iter()
                .any(|a| names(a, "--gpus") || names(a, "--target"))
            {
                args.extend(["--gpus".to_string(), "none".to_string()]);
            }
            args.extend(extra.iter().cloned());
            LocalWorkerSpec { name, cpus, args }
        })
        .collect())
}

/// The CPUs this process may run on (`Cpus_allowed_list` in
/// /proc/self/status), else 0..available_parallelism.
pub fn allowed_cpus() -> CpuSet {
    let from_proc = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|list| CpuSet::parse(list).ok())
        });
    from_proc.unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuSet::from_cpus(0..n).unwrap_or_else(|_| CpuSet::from_cpus([0]).expect("0 is a CPU"))
    })
}

/// `tunefleet-worker` beside this executable (how release archives and
/// `cargo build` lay them out), else whatever `PATH` finds.
pub fn default_worker_program() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("tunefleet-worker")))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("tunefleet-worker"))
}

/// What every local worker shares: the program and its environment.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: PathBuf,
    /// Passed as `TUNEFLEET_WORKER_SECRET`, never on the command line.
    pub worker_secret: Option<String>,
    /// For a TLS master: the certificate the workers trust (`TUNEFLEET_CA_CERT`).
    pub ca_cert: Option<PathBuf>,
}

/// The running supervisors; [`LocalFleet::stop`] ends them.
pub struct LocalFleet {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl LocalFleet {
    pub fn start(specs: Vec<LocalWorkerSpec>, launch: Launch) -> LocalFleet {
        let (stop, stopping) = watch::channel(false);
        let tasks = specs
            .into_iter()
            .map(|spec| tokio::spawn(supervise(spec, launch.clone(), stopping.clone())))
            .collect();
        LocalFleet { stop, tasks }
    }

    /// Tells every worker to stop: their stdin closes and each hands back
    /// its job. Returns at once; [`LocalFleet::stop`] waits.
    pub fn begin_stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops every worker, waiting up to 10 s for each before killing it.
    pub async fn stop(self) {
        self.begin_stop();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);
/// A worker that ran this long was healthy: its next restart is quick again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// How long a stopping worker gets to hand back its job before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

async fn supervise(spec: LocalWorkerSpec, launch: Launch, mut stopping: watch::Receiver<bool>) {
    let mut delay = FIRST_RESTART_DELAY;
    loop {
        if *stopping.borrow() {
            return;
        }
        let started = Instant::now();
        match spawn(&spec, &launch) {
            Ok(mut child) => {
                info!(worker = %spec.name, pid = child.id(), cpus = %spec.cpus, "local worker started");
                // Held, never written: dropping it is the stop signal.
                let stdin = child.stdin.take();
                tokio::select! {
                    status = child.wait() => {
                        let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                        if *stopping.borrow() {
                            return;
                        }
                        if started.elapsed() >= HEALTHY_RUN {
                            delay = FIRST_RESTART_DELAY;
                        }
                        warn!(worker = %spec.name, %status, "local worker exited; restarting in {delay:?}");
                    }
                    _ = stopping.changed() => {
                        drop(stdin);
                        if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_err() {
                            warn!(worker = %spec.name, "local worker did not stop within {STOP_GRACE:?}; killing it");
                            let _ = child.kill().await;
                        }
                        return;
                    }
                }
            }
            Err(e) => warn!(
                worker = %spec.name,
                program = %launch.program.display(),
                "cannot start a local worker: {e}; retrying in {delay:?} (--local-worker-bin sets the program)"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopping.changed() => return,
        }
        delay = (delay * 2).min(MAX_RESTART_DELAY);
    }
}

fn spawn(spec: &LocalWorkerSpec, launch: &Launch) -> std::io::Result<Child> {
    let mut command = Command::new(&launch.program);
    command
        .args(&spec.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // If this task is dropped without a stop (a panic), take the worker along.
        .kill_on_drop(true);
    if let Some(secret) = &launch.worker_secret {
        command.env("TUNEFLEET_WORKER_SECRET", secret);
    }
    if let Some(ca) = &launch.ca_cert {
        command.env("TUNEFLEET_CA_CERT", ca);
    }
    let mut child = command.spawn()?;
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(out, spec.name.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(err, spec.name.clone()));
    }
    Ok(child)
}

/// The worker's own log lines, re-logged under its name in the master's log.
async fn forward_lines(stream: impl AsyncRead + Unpin, worker: String) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        info!(target: "tunefleet::local_worker", worker = %worker, "{}", without_timestamp(&line));
    }
}

/// The master's log line has its own time; the worker's is dropped.
fn without_timestamp(line: &str) -> &str {
    match line.split_once(' ') {
        Some((first, rest))
            if first.len() >= 20
                && first.ends_with('Z')
                && first.starts_with(|c: char| c.is_ascii_digit()) =>
        {
            rest.trim_start()
        }
        _ => line,
    }
}

/// The URL local workers dial: the bound address, with a wildcard bind
/// replaced by loopback of the same family; `localhost` for TLS so the
/// certificate's name can match.
pub fn local_server_url(bound: std::net::SocketAddr, tls: bool) -> String {
    let port = bound.port();
    if tls {
        return format!("wss://localhost:{port}");
    }
    let ip = match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("ws://{}", std::net::SocketAddr::new(ip, port))
}

/// For the log line at start-up.
pub fn describe(specs: &[LocalWorkerSpec], program: &Path) -> String {
    let groups: Vec<String> = specs
        .iter()
        .map(|s| format!("{} on CPUs {}", s.name, s.cpus))
        .collect();
    format!("{} ({})", groups.join(", "), program.display())
}

#[cfg(test)]
mod tests;
