//! The `tunefleet` client commands as a script would use them: the JSON
//! shapes that automation relies on, CSV, the non-terminal `watch` output
//! and its exit status, and `export-trace`.

use std::process::Command;
use std::time::Duration;

use tunefleet_tests::*;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_watch_status_results_export_as_a_script_sees_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let examples = examples_dir();
    let file = examples.join("workloads.yaml");
    let file = file.to_str().expect("utf-8 path");

    let out = master.cli(&["submit", file, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("submit --json is JSON");
    let new_jobs = reports[0]["new_jobs"].as_array().expect("new_jobs").len();
    assert!(new_jobs >= 3, "{reports}");
    let out = master.cli(&["submit", file]);
    assert!(
        stdout(&out).contains(&format!("0 new jobs, {new_jobs} duplicates skipped")),
        "{}",
        stdout(&out)
    );

    let bad = examples.join("bad/unknown-op.yaml");
    let out = master.cli(&["submit", bad.to_str().expect("path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown-op.yaml:") && err.contains(".op"),
        "error names file, line and field: {err}"
    );

    let _w1 = Worker::start(&master, "cli-a", 0.2, &[]);
    let _w2 = Worker::start(&master, "cli-b", 0.2, &[]);
    let watch = Command::new(bin("tunefleet"))
        .args(["watch", "--server", &master.url()])
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run watch");
    assert!(
        watch.status.success(),
        "watch exits 0 when every job is done: {watch:?}"
    );
    let text = stdout(&watch);
    assert!(text.contains("100%"), "{text}");
    assert!(
        text.contains(&format!("done: {new_jobs}, failed: 0")),
        "{text}"
    );

    let out = master.cli(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status --json");
    for key in ["total", "queued", "running", "done", "failed"] {
        assert!(
            status["jobs"][key].is_u64(),
            "jobs.{key} is an integer: {status}"
        );
    }
    assert_eq!(status["jobs"]["done"].as_u64(), Some(new_jobs as u64));
    assert_eq!(status["workers"].as_u64(), Some(2));

    let out = master.cli(&["results", "--format", "json"]);
    let results: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("results json");
    let results = results.as_array().expect("an array");
    assert_eq!(results.len(), new_jobs);
    for job in results {
        assert!(
            job["job_id"].is_string() && job["name"].is_string(),
            "{job}"
        );
        assert_eq!(job["state"], "done");
        assert!(
            job["best_latency_s"].as_f64().is_some_and(|l| l > 0.0),
            "{job}"
        );
        assert!(!job["records"].as_array().expect("records").is_empty());
    }

    let out = master.cli(&["results", "--format", "csv"]);
    let csv = stdout(&out);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("job_id,name,op,shape,dtype,state,attempts,worker,best_latency_s,gflops,trials_done,trials_total")
    );
    assert_eq!(lines.count(), new_jobs);

    let export = dir.path().join("results.csv");
    let out = master.cli(&[
        "export",
        "--format",
        "csv",
        "--out",
        export.to_str().expect("path"),
    ]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&export).expect("export written"),
        csv
    );

    let trace = Command::new(bin("tunefleet"))
        .args(["export-trace", "--state"])
        .arg(&master.state)
        .output()
        .expect("export-trace");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&trace.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert!(lines.iter().any(|l| l["event"]["kind"] == "worker_joined"));
    assert!(lines
        .windows(2)
        .all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()));
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_without_a_token_fail_with_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let file = examples_dir().join("workloads.yaml");
    let out = Command::new(bin("tunefleet"))
        .args([
            "submit",
            file.to_str().expect("path"),
            "--server",
            &master.url(),
        ])
        .env_remove("TUNEFLEET_TOKEN")
        .output()
        .expect("run submit");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token"), "{err}");
}
