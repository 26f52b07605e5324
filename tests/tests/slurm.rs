//! `tunefleet launch slurm` against a real single-node Slurm cluster
//! (`scripts/start-slurm.sh` sets one up as root; CI runs it and sets
//! TUNEFLEET_REQUIRE_SLURM=1 so that a missing cluster fails instead of
//! skipping). Submit an array, see the workers join and tune, `scancel` it,
//! see their jobs go back to the queue; the join secret travels in the
//! environment only.

use std::process::Command;
use std::time::Duration;

use tunefleet_tests::*;

fn slurm_available() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false);
    if !up && std::env::var_os("TUNEFLEET_REQUIRE_SLURM").is_some() {
        panic!("TUNEFLEET_REQUIRE_SLURM is set but no Slurm cluster answers sinfo (run scripts/start-slurm.sh as root)");
    }
    if !up {
        eprintln!("skipped: no Slurm cluster (scripts/start-slurm.sh starts one as root)");
    }
    up
}

fn status_json(master: &Master) -> serde_json::Value {
    let out = master.cli(&["status", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn dry_run_prints_the_script_and_submits_nothing() {
    // Works without Slurm: --dry-run never calls sbatch.
    let out = Command::new(bin("tunefleet"))
        .args([
            "launch",
            "slurm",
            "--workers",
            "3",
            "--server",
            "ws://m:1",
            "--dry-run",
        ])
        .env("PATH", "/nonexistent")
        .env("TUNEFLEET_WORKER_SECRET", "do-not-print-me")
        .output()
        .expect("run tunefleet");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.starts_with("#!/bin/bash\n"), "{script}");
    assert!(script.contains("#SBATCH --array=0-2"), "{script}");
    assert!(!script.contains("do-not-print-me"), "{script}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_workers_join_tune_and_hand_back_their_jobs_on_scancel() {
    if !slurm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workloads = dir.path().join("w.yaml");
    std::fs::write(&workloads, matmul_yaml(6, "slurm")).unwrap();
    let secret = "slurm-join-secret";
    let master = Master::start(
        dir.path(),
        &[
            "--workloads",
            workloads.to_str().unwrap(),
            "--worker-secret",
            secret,
        ],
    );
    let output = dir.path().join("worker-%A_%a.log");
    let out = Command::new(bin("tunefleet"))
        .args(["launch", "slurm", "--workers", "2", "--server"])
        .arg(master.url())
        .args(["--cpus-per-worker", "1", "--time", "10", "--output"])
        .arg(&output)
        .args(["--worker-args", "--backend sim --sim-seconds 4"])
        .env("TUNEFLEET_WORKER_SECRET", secret)
        .current_dir(dir.path())
        .output()
        .expect("run tunefleet launch slurm");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = stdout
        .split_whitespace()
        .skip_while(|w| *w != "array")
        .nth(1)
        .map(|w| w.trim_end_matches(':').to_string())
        .expect("the launcher prints the job id");
    // Whatever happens below, the cluster is left clean.
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).status();
        }
    }
    let cancel = Cancel(job.clone());

    // Both join (with the secret from the environment) and tune.
    eventually(Duration::from_secs(60), "2 Slurm workers tuning", || {
        let s = status_json(&master);
        let ok = s["workers"] == 2 && s["jobs"]["done"].as_u64() >= Some(2);
        async move { ok.then_some(()) }
    })
    .await;
    let mut client = master.client().await;
    let (_, snapshot) = client.subscribe().await.expect("subscribe");
    let mut names: Vec<String> = snapshot.workers.iter().map(|w| w.name.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [format!("slurm-{job}_0"), format!("slurm-{job}_1")],
        "workers are named after their array task"
    );

    // scancel: Slurm sends SIGTERM; the workers hand back what they hold.
    let scancel = Command::new("scancel").arg(&job).status().expect("scancel");
    assert!(scancel.success());
    let after = eventually(
        Duration::from_secs(30),
        "workers gone after scancel",
        || {
            let s = status_json(&master);
            let gone = s["workers"] == 0 && s["jobs"]["running"] == 0;
            async move { gone.then_some(s) }
        },
    )
    .await;
    let jobs = &after["jobs"];
    assert_eq!(jobs["failed"], 0, "{after}");
    assert_eq!(
        jobs["done"].as_u64().unwrap() + jobs["queued"].as_u64().unwrap(),
        6,
        "every job is done or back in the queue: {after}"
    );
    assert!(jobs["queued"].as_u64().unwrap() > 0, "{after}");
    drop(cancel);

    // The batch script, as Slurm stored it, never held the secret.
    let script = Command::new("scontrol")
        .args(["write", "batch_script", &job, "-"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(!script.contains(secret));
}
