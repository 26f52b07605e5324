use super::*;

fn args(extra: &[&str]) -> SlurmArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        slurm: SlurmArgs,
    }
    let mut argv = vec!["slurm", "--workers", "4", "--server", "ws://master:18871"];
    argv.extend_from_slice(extra);
    <Cli as clap::Parser>::parse_from(argv).slurm
}

#[test]
fn the_script_is_an_array_of_one_worker_per_task() {
    let script = slurm_script(
        &args(&[
            "--partition",
            "gpu",
            "--time",
            "4:00:00",
            "--cpus-per-worker",
            "8",
            "--worker-args",
            "--backend tvm --work-dir '/scratch/my dir'",
        ]),
        "/opt/tunefleet/tunefleet-worker",
    )
    .unwrap();
    for line in [
        "#!/bin/bash",
        "#SBATCH --array=0-3",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=4:00:00",
        "#SBATCH --export=ALL",
        "exec /opt/tunefleet/tunefleet-worker --server ws://master:18871 \
         --name \"slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\" \
         --backend tvm --work-dir '/scratch/my dir'",
    ] {
        assert!(
            script.lines().any(|l| l == line),
            "no `{line}` in\n{script}"
        );
    }
    assert!(!script.contains("SECRET="), "{script}");
}

#[test]
fn the_script_is_valid_bash() {
    let script = slurm_script(
        &args(&["--worker-args", "--python '/a b/python'"]),
        "/bin/w",
    )
    .unwrap();
    let out = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_secret_and_the_per_worker_flags_are_refused_in_worker_args() {
    for (extra, needle) in [
        ("--worker-secret s3cret", "export TUNEFLEET_WORKER_SECRET"),
        ("--server ws://x:1", "must not set --server"),
        ("--name=w", "must not set --name"),
        ("--python 'unbalanced", "unbalanced quotes"),
    ] {
        let err = slurm_script(&args(&["--worker-args", extra]), "/bin/w").unwrap_err();
        assert!(err.to_string().contains(needle), "{extra}: {err}");
    }
}

#[test]
fn bad_values_for_sbatch_lines_are_refused_by_name() {
    let err = slurm_script(&args(&["--time", "1h; rm -rf /"]), "/bin/w").unwrap_err();
    assert!(err.to_string().contains("--time"), "{err}");
    let err = slurm_script(&args(&["--partition", "a\n#SBATCH --x"]), "/bin/w").unwrap_err();
    assert!(err.to_string().contains("--partition"), "{err}");
    let err = slurm_script(&args(&["--sbatch-option", "account=ml"]), "/bin/w").unwrap_err();
    assert!(err.to_string().contains("--sbatch-option"), "{err}");
}

#[test]
fn gpus_per_worker_asks_slurm_for_gpus_and_bad_counts_are_refused() {
    let script = slurm_script(&args(&["--gpus-per-worker", "2"]), "/bin/w").unwrap();
    assert!(
        script.lines().any(|l| l == "#SBATCH --gres=gpu:2"),
        "{script}"
    );
    let script = slurm_script(&args(&["--gpus-per-worker", "a100:1"]), "/bin/w").unwrap();
    assert!(
        script.lines().any(|l| l == "#SBATCH --gres=gpu:a100:1"),
        "{script}"
    );
    let script = slurm_script(&args(&[]), "/bin/w").unwrap();
    assert!(!script.contains("--gres"), "{script}");
    for bad in ["0", "two", ":1", "a100:", "a 100:1", "1\n#SBATCH --x"] {
        let err = slurm_script(&args(&["--gpus-per-worker", bad]), "/bin/w").unwrap_err();
        assert!(
            err.to_string().contains("--gpus-per-worker")
                && err.to_string().contains("N or TYPE:N"),
            "{bad:?}: {err}"
        );
    }
}
