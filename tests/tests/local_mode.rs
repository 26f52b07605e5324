//! `tunefleet serve --local-workers`: the master starts its own workers on
//! its machine. Checked with real processes, as an operator would: they join
//! and tune, each on its own CPUs, come back after kill -9, and never outlive
//! the master, whether it stops cleanly or is killed.

use std::time::Duration;

use tunefleet_tests::*;

/// Live local workers of the master at `url`: (pid, name, CPUs it may use).
/// Zombies have an empty cmdline, so they never count.
fn local_workers(url: &str) -> Vec<(u32, String, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_ours = args.iter().any(|a| a == "--supervised")
            && args.windows(2).any(|w| w[0] == "--server" && w[1] == url);
        if !is_ours {
            continue;
        }
        let name = args
            .windows(2)
            .find(|w| w[0] == "--name")
            .map(|w| w[1].clone())
            .unwrap_or_default();
        let cpus = std::fs::read_to_string(entry.path().join("status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|l| l.trim().to_string())
            .unwrap_or_default();
        found.push((pid, name, cpus));
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    found
}

fn status_json(master: &Master) -> serde_json::Value {
    let out = master.cli(&["status", "--json"]);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

fn start_with_local_workers(dir: &std::path::Path, n: &str) -> Master {
    let workloads = examples_dir().join("workloads.yaml");
    Master::start(
        dir,
        &[
            "--local-workers",
            n,
            "--local-worker-args",
            "--backend sim --sim-seconds 0.2",
            "--workloads",
            workloads.to_str().expect("utf-8 path"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_workers_tune_come_back_after_kill_and_stop_with_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let mut master = start_with_local_workers(dir.path(), "2");
    let url = master.url();

    let status = eventually(
        Duration::from_secs(30),
        "2 workers and every job done",
        || {
            let status = status_json(&master);
            let ready = status["workers"] == 2
                && status["jobs"]["total"].as_u64() > Some(0)
                && status["jobs"]["done"] == status["jobs"]["total"];
            async move { ready.then_some(status) }
        },
    )
    .await;
    assert_eq!(status["jobs"]["failed"], 0, "{status}");

    let workers = local_workers(&url);
    let names: Vec<&str> = workers.iter().map(|w| w.1.as_str()).collect();
    assert_eq!(names, ["local-1", "local-2"], "{workers:?}");
    let cores = std::thread::available_parallelism().unwrap().get();
    if cores >= 2 {
        // Each on its own cores.
        assert_ne!(workers[0].2, workers[1].2, "{workers:?}");
    }
    // The dashboard's view: each worker's target counts only its own cores.
    let mut client = master.client().await;
    let (_, snapshot) = client.subscribe().await.expect("subscribe");
    for worker in &snapshot.workers {
        let text = worker.target.to_string();
        let expected = format!("\"num-cores\":{}", (cores / 2).max(1));
        assert!(text.contains(&expected), "{} has {text}", worker.name);
    }
    drop(client);

    // kill -9 one: the master starts another under the same name.
    let (victim, _, _) = workers[0].clone();
    signal(victim, "KILL");
    let replaced = eventually(Duration::from_secs(20), "local-1 restarted", || {
        let now = local_workers(&url);
        let back = now.iter().any(|w| w.1 == "local-1" && w.0 != victim) && now.len() == 2;
        async move { back.then_some(now) }
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "2 workers registered again",
        || {
            let ok = status_json(&master)["workers"] == 2;
            async move { ok.then_some(()) }
        },
    )
    .await;
    assert!(
        master.log().contains("local worker exited; restarting"),
        "the master says why it restarts a worker"
    );

    // SIGTERM: the master stops and takes its workers along.
    let exit = master.terminate().expect("master exits after SIGTERM");
    assert!(exit.success(), "{exit:?}");
    eventually(Duration::from_secs(15), "local workers gone", || {
        let left = local_workers(&url);
        async move { left.is_empty().then_some(()) }
    })
    .await;
    assert!(replaced.iter().all(|w| w.0 != victim));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_workers_do_not_outlive_a_killed_master() {
    let dir = tempfile::tempdir().unwrap();
    let mut master = start_with_local_workers(dir.path(), "auto");
    let url = master.url();
    let expected = (std::thread::available_parallelism().unwrap().get() / 2).max(1);
    eventually(Duration::from_secs(30), "auto workers joined", || {
        let ok = status_json(&master)["workers"] == expected as u64
            && local_workers(&url).len() == expected;
        async move { ok.then_some(()) }
    })
    .await;
    master.kill9();
    // Their stdin pipe closed with the master: they leave on their own.
    eventually(Duration::from_secs(10), "orphaned workers exit", || {
        let left = local_workers(&url);
        async move { left.is_empty().then_some(()) }
    })
    .await;
}

#[test]
fn local_worker_args_that_clash_are_refused_before_the_master_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin("tunefleet"))
        .args(["serve", "--bind", "127.0.0.1:0", "--state"])
        .arg(dir.path().join("fleet.db"))
        .args([
            "--admin-token",
            "t",
            "--local-workers",
            "1",
            "--local-worker-args",
            "--backend sim --server ws://elsewhere:1",
        ])
        .output()
        .expect("run tunefleet serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--local-worker-args must not set --server"),
        "{stderr}"
    );
    assert!(!dir.path().join("fleet.db").exists(), "nothing was created");
}
