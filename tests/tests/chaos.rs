//! The short chaos run CI does on every change (the long one is
//! `tunefleet-bench chaos`, figures in docs/benchmarks.md): zero-time jobs
//! while workers are killed, paused and restarted and the master is killed
//! and restarted; every job must enter `done` exactly once.

use std::time::Duration;

use tunefleet_tests::chaos::{run, ChaosConfig};

/// Runs `config` and checks what a user would: no promise broken, every
/// planned master restart done, and workers were both killed and paused.
async fn survives(config: ChaosConfig) {
    let dir = tempfile::tempdir().expect("tempdir");
    let restarts = config.master_restarts;
    let report = run(&config, dir.path()).await;
    eprintln!("{report:?}");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.master_restarts, restarts);
    assert!(report.worker_kills > 0 && report.pauses > 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_done_exactly_once_through_kills_pauses_and_master_restarts() {
    survives(ChaosConfig {
        jobs: 400,
        workers: 4,
        slots: 1,
        sim_seconds: 0.02,
        master_restarts: 2,
        seed: 7,
        timeout: Duration::from_secs(120),
    })
    .await;
}

/// The same with workers that hold several jobs each: a `kill -9` recycles
/// every job the worker held, and after a master restart each worker
/// re-sends several unacknowledged reports at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_done_exactly_once_with_multi_slot_workers() {
    survives(ChaosConfig {
        jobs: 400,
        workers: 3,
        slots: 4,
        // Longer jobs than above: twelve slots would finish 400 jobs of
        // 0.02 s before the first kill.
        sim_seconds: 0.1,
        master_restarts: 2,
        seed: 11,
        timeout: Duration::from_secs(120),
    })
    .await;
}
