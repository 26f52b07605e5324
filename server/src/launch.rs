//! `tunefleet launch slurm`: starts workers through a cluster's job manager.
//!
//! A launcher is a thin layer over the same worker binary and protocol: it
//! writes a batch script that runs `tunefleet-worker`, and hands it to the
//! job manager. Nothing in the master knows how a worker was started; a
//! worker that Slurm preempts or times out gets SIGTERM, hands back its job
//! and leaves, and one killed outright is recycled like any dead worker.
//!
//! The join secret never enters the script or a command line (both are
//! readable by other users of the cluster): `sbatch` passes the submitting
//! environment, `TUNEFLEET_WORKER_SECRET` included, to every task.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::local_workers::{split_worker_args, WorkerArgsError};

#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    #[command(subcommand)]
    pub manager: Manager,
}

#[derive(clap::Subcommand, Debug)]
pub enum Manager {
    /// Submit a Slurm job array whose tasks each run one tunefleet-worker.
    Slurm(SlurmArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct SlurmArgs {
    /// Workers to start: one array task each.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: u32,
    /// Master URL(s) the workers connect to (as `tunefleet-worker --server`).
    #[arg(long)]
    pub server: String,
    /// Slurm partition (default: the cluster's default partition).
    #[arg(long)]
    pub partition: Option<String>,
    /// Time limit per worker, in Slurm's format (`30`, `4:00:00`, `2-00:00:00`).
    #[arg(long)]
    pub time: Option<String>,
    /// CPUs per worker (`--cpus-per-task`); a tuning worker wants at least 2.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus_per_worker: u32,
    /// GPUs per worker, as Slurm's generic resource (`--gres=gpu:N`, or a
    /// type: `a100:2`). Slurm then sets each task's `CUDA_VISIBLE_DEVICES`,
    /// and the worker's `--target auto` serves exactly those GPUs.
    #[arg(long, value_name = "[TYPE:]N")]
    pub gpus_per_worker: Option<String>,
    /// Job name shown by squeue.
    #[arg(long, default_value = "tunefleet-worker")]
    pub job_name: String,
    /// Where each task's log goes (`%A`: array job id, `%a`: task index).
    #[arg(long, default_value = "tunefleet-worker-%A_%a.log")]
    pub output: String,
    /// The worker program as the compute nodes see it (default: the
    /// tunefleet-worker beside this executable; a shared file system is assumed).
    #[arg(long, value_name = "PATH")]
    pub worker_bin: Option<PathBuf>,
    /// Extra arguments for every worker (e.g. '--backend tvm --python /opt/venv/bin/python').
    #[arg(
        long,
        value_name = "ARGS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub worker_args: String,
    /// An extra sbatch option for the script (repeatable), e.g. `--account=ml`.
    #[arg(
        long = "sbatch-option",
        value_name = "OPTION",
        allow_hyphen_values = true
    )]
    pub sbatch_options: Vec<String>,
    /// Print the batch script and submit nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl LaunchArgs {
    pub fn run(self) -> anyhow::Result<()> {
        match self.manager {
            Manager::Slurm(args) => launch_slurm(&args),
        }
    }
}

fn launch_slurm(args: &SlurmArgs) -> anyhow::Result<()> {
    let program = match &args.worker_bin {
        Some(path) => path.clone(),
        None => crate::local_workers::default_worker_program(),
    };
    let script = slurm_script(args, &program.to_string_lossy())?;
    if args.dry_run {
        print!("{script}");
        return Ok(());
    }
    if std::env::var_os("TUNEFLEET_WORKER_SECRET").is_none() {
        eprintln!(
            "note: TUNEFLEET_WORKER_SECRET is not set here, so the workers send no join secret; \
             a master started with --worker-secret will refuse them"
        );
    }
    let mut child = Command::new("sbatch")
        .arg("--parsable")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(
                "sbatch not found: run this on a Slurm login node (--dry-run prints the script)"
            ),
            _ => anyhow::anyhow!("cannot run sbatch: {e}"),
        })?;
    child
        .stdin
        .take()
        .context("sbatch's stdin")?
        .write_all(script.as_bytes())
        .context("cannot send the script to sbatch")?;
    let out = child.wait_with_output().context("sbatch did not finish")?;
    if !out.status.success() {
        bail!(
            "sbatch refused the job ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // --parsable prints `JOBID` or `JOBID;CLUSTER`.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job = stdout.trim().split(';').next().unwrap_or_default();
    println!(
        "submitted Slurm job array {job}: {} worker(s) for {}\n  see them: squeue -j {job}\n  stop them: scancel {job} (their jobs go back to the queue)",
        args.workers, args.server
    );
    Ok(())
}

/// The batch script; pure, so `--dry-run` and the tests see exactly what is submitted.
pub fn slurm_script(args: &SlurmArgs, program: &str) -> anyhow::Result<String> {
    let extra = match split_worker_args(
        &args.worker_args,
        &["--server", "--name", "--worker-secret"],
    ) {
        Ok(extra) => extra,
        Err(WorkerArgsError::Quoting) => {
            bail!("--worker-args: unbalanced quotes in `{}`", args.worker_args)
        }
        Err(WorkerArgsError::Reserved("--worker-secret")) => {
            bail!("--worker-args must not carry the join secret: export TUNEFLEET_WORKER_SECRET before launching instead")
        }
        Err(WorkerArgsError::Reserved(flag)) => {
            bail!("--worker-args must not set {flag}: the launcher sets it for each worker")
        }
    };
    // Values go into `#SBATCH` lines, which Slurm reads up to the end of the line.
    let single_line = |name: &str, value: &str| -> anyhow::Result<()> {
        if value.contains(['\n', '\r']) || value.trim().is_empty() {
            bail!("{name} must be a single non-empty line");
        }
        Ok(())
    };
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        "# tunefleet workers, written by `tunefleet launch slurm`: one tunefleet-worker per array task.".into(),
        "# The join secret is not in this file: sbatch passes the submitting environment".into(),
        "# (TUNEFLEET_WORKER_SECRET, TUNEFLEET_CA_CERT) to every task.".into(),
    ];
    single_line("--job-name", &args.job_name)?;
    single_line("--output", &args.output)?;
    lines.push(format!("#SBATCH --job-name={}", args.job_name));
    lines.push(format!("#SBATCH --array=0-{}", args.workers - 1));
    lines.push("#SBATCH --ntasks=1".into());
    lines.push(format!("#SBATCH --cpus-per-task={}", args.cpus_per_worker));
    if let Some(gpus) = &args.gpus_per_worker {
        lines.push(format!("#SBATCH --gres=gpu:{}", gpu_gres(gpus)?));
    }
    if let Some(partition) = &args.partition {
        single_line("--partition", partition)?;
        lines.push(format!("#SBATCH --partition={partition}"));
    }
    if let Some(time) = &args.time {
        if time.is_empty()
            || !time
                .chars()
                .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
        {
            bail!("--time `{time}` is not a Slurm time limit (e.g. 30, 4:00:00, 2-00:00:00)");
        }
        lines.push(format!("#SBATCH --time={time}"));
    }
    lines.push(format!("#SBATCH --output={}", args.output));
    lines.push("#SBATCH --export=ALL".into());
    for option in &args.sbatch_options {
        single_line("--sbatch-option", option)?;
        if !option.starts_with('-') {
            bail!("--sbatch-option `{option}` must be an sbatch option such as --account=ml");
        }
        lines.push(format!("#SBATCH {option}"));
    }
    let quote = |s: &str| {
        shlex::try_quote(s)
            .map(|q| q.into_owned())
            .map_err(|_| anyhow::anyhow!("cannot quote `{s}` for the shell"))
    };
    let mut command = vec![
        "exec".to_string(),
        quote(program)?,
        "--server".into(),
        quote(&args.server)?,
        "--name".into(),
        "\"slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"".into(),
    ];
    for arg in &extra {
        command.push(quote(arg)?);
    }
    lines.push(String::new());
    lines.push("set -eu".into());
    lines.push(
        "# On scancel, preemption or the time limit Slurm sends SIGTERM: the worker hands back its job and exits.".into(),
    );
    lines.push(command.join(" "));
    Ok(lines.join("\n") + "\n")
}

/// `--gpus-per-worker` checked as Slurm's GPU count: `N` or `TYPE:N`, N at
/// least 1 (a bad value would otherwise surface as sbatch's own error, or
/// as a job that never starts).
fn gpu_gres(value: &str) -> anyhow::Result<&str> {
    let (kind, count) = match value.split_once(':') {
        Some((kind, count)) => (Some(kind), count),
        None => (None, value),
    };
    let kind_ok = kind.is_none_or(|k| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    });
    if !kind_ok || !count.parse::<u32>().is_ok_and(|n| n >= 1) {
        bail!("--gpus-per-worker `{value}` is not a GPU count: give N or TYPE:N (e.g. 1, a100:2)");
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
