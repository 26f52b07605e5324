//! `GET /metrics`: what a scaler (KEDA, an HPA, a Slurm script) reads to size
//! the fleet, checked against a real master as the fleet changes.

use std::time::Duration;

use tunefleet_tests::*;

/// The value of the sample whose name and labels are exactly `series`.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn scrape(master: &Master) -> String {
    let (status, body) = http_get(master.addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_queued_jobs_and_busy_and_idle_workers() {
    let dir = tempfile::tempdir().unwrap();
    let workloads = dir.path().join("w.yaml");
    std::fs::write(&workloads, matmul_yaml(3, "m")).unwrap();
    let master = Master::start(dir.path(), &["--workloads", workloads.to_str().unwrap()]);

    let body = scrape(&master);
    assert_eq!(
        sample(&body, "tunefleet_jobs{state=\"queued\"}"),
        Some(3.0),
        "{body}"
    );
    for state in ["assigned", "running", "done", "failed", "cancelled"] {
        let series = format!("tunefleet_jobs{{state=\"{state}\"}}");
        assert_eq!(sample(&body, &series), Some(0.0), "{series} in {body}");
    }
    assert_eq!(
        sample(&body, "tunefleet_workers{state=\"busy\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&body, "tunefleet_workers{state=\"idle\"}"),
        Some(0.0)
    );
    let queued_by_target: f64 = body
        .lines()
        .filter(|l| l.starts_with("tunefleet_queued_jobs{target="))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(queued_by_target, 3.0, "{body}");
    assert!(sample(&body, "process_resident_memory_bytes").unwrap_or(0.0) > 0.0);

    // One slow worker: one job busy, two still queued.
    let _worker = Worker::start(&master, "slow", 60.0, &[]);
    let body = eventually(Duration::from_secs(20), "a busy worker in /metrics", || {
        let body = scrape(&master);
        let busy = sample(&body, "tunefleet_workers{state=\"busy\"}") == Some(1.0);
        async move { busy.then_some(body) }
    })
    .await;
    assert_eq!(
        sample(&body, "tunefleet_jobs{state=\"queued\"}"),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "tunefleet_assignments_total"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "tunefleet_worker_joins_total"),
        Some(1.0),
        "{body}"
    );
    assert!(
        sample(&body, "tunefleet_connections").unwrap_or(0.0) >= 1.0,
        "{body}"
    );

    // Nothing left to give an idle worker's peer once all are done.
    let _fast = Worker::start(&master, "fast", 0.0, &[]);
    eventually(
        Duration::from_secs(20),
        "an idle worker in /metrics",
        || {
            let body = scrape(&master);
            let idle = sample(&body, "tunefleet_workers{state=\"idle\"}") == Some(1.0)
                && sample(&body, "tunefleet_jobs{state=\"queued\"}") == Some(0.0);
            async move { idle.then_some(()) }
        },
    )
    .await;
}
