//! The tuning cache across submissions, as a script sees it: a workload
//! tuned once answers a later job for the same computation with a smaller
//! budget at once (`cache_hit: true` in `results --format json`), also after
//! a master restart; `submit --fresh` tunes it again.

use std::time::Duration;

use serde_json::Value;
use tunefleet_tests::*;

fn workload_file(dir: &std::path::Path, name: &str, trials: u32) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "target: {{kind: llvm}}\nworkloads:\n  - name: {name}\n    op: matmul\n    \
             shape: {{m: 96, n: 96, k: 96}}\n    dtype: float32\n    trials: {trials}\n"
        ),
    )
    .expect("write workload file");
    path.to_str().expect("utf-8 path").to_string()
}

fn json(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn row<'a>(rows: &'a Value, name: &str) -> &'a Value {
    rows.as_array()
        .expect("results are an array")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tuned_workload_answers_later_jobs_until_fresh_is_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    let _worker = Worker::start(&master, "cache-w", 0.0, &[]);

    let first = workload_file(dir.path(), "mm-first", 16);
    let report = json(&master.cli(&["submit", &first, "--json"]));
    let first_id = report[0]["new_jobs"][0]
        .as_str()
        .expect("new job")
        .to_string();
    eventually(Duration::from_secs(30), "the first job is done", || async {
        let rows = json(&master.cli(&["results", "--format", "json"]));
        (row(&rows, "mm-first")["state"] == "done").then_some(())
    })
    .await;

    // Same computation, smaller budget: answered without a worker.
    let smaller = workload_file(dir.path(), "mm-smaller", 8);
    let report = json(&master.cli(&["submit", &smaller, "--json"]));
    assert_eq!(
        report[0]["cache_hits"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let rows = json(&master.cli(&["results", "--format", "json"]));
    let hit = row(&rows, "mm-smaller");
    assert_eq!(hit["state"], "done", "{hit}");
    assert_eq!(hit["cache_hit"], true, "{hit}");
    assert_eq!(hit["cached_from"], first_id.as_str());
    assert_eq!(hit["records"], row(&rows, "mm-first")["records"]);
    assert_eq!(hit["attempts"], 0);
    assert_eq!(row(&rows, "mm-first")["cache_hit"], false);

    // The cache is the store's: it outlives the process.
    master.restart();
    let after = workload_file(dir.path(), "mm-after-restart", 4);
    eventually(Duration::from_secs(10), "the master is back", || async {
        let out = master.cli(&["submit", &after, "--json"]);
        out.status.success().then(|| json(&out))
    })
    .await;
    let rows = json(&master.cli(&["results", "--format", "json"]));
    assert_eq!(row(&rows, "mm-after-restart")["cache_hit"], true);

    // --fresh: tuned again by a worker.
    let fresh = workload_file(dir.path(), "mm-fresh", 12);
    let report = json(&master.cli(&["submit", &fresh, "--fresh", "--json"]));
    assert_eq!(report[0]["cache_hits"], serde_json::json!([]), "{report}");
    let _worker = Worker::start(&master, "cache-w2", 0.0, &[]);
    eventually(
        Duration::from_secs(30),
        "the fresh job is tuned",
        || async {
            let rows = json(&master.cli(&["results", "--format", "json"]));
            let fresh = row(&rows, "mm-fresh").clone();
            (fresh["state"] == "done").then_some(fresh)
        },
    )
    .await;
    let rows = json(&master.cli(&["results", "--format", "json"]));
    let fresh = row(&rows, "mm-fresh");
    assert_eq!(fresh["cache_hit"], false);
    assert_eq!(fresh["attempts"], 1, "{fresh}");
    assert!(fresh.get("cached_from").is_none(), "{fresh}");

    // A budget no entry covers: the sim backend keeps no MetaSchedule
    // workload line, so there is nothing to warm-start from; tuned in full.
    let larger = workload_file(dir.path(), "mm-larger", 64);
    let report = json(&master.cli(&["submit", &larger, "--json"]));
    assert_eq!(report[0]["cache_hits"], serde_json::json!([]));
    assert_eq!(report[0]["warm_started"], serde_json::json!([]));
}
