use super::*;
use crate::backend::progress_channel;
use crate::testutil::{job, workload};

#[tokio::test]
async fn same_job_same_result() {
    let backend = SimBackend::new(Duration::ZERO);
    let spec = job(workload("mm", 64), 5);
    let (sink, _watch) = progress_channel();
    let a = backend.tune(spec.clone(), sink.clone()).await.unwrap();
    let b = backend.tune(spec.clone(), sink).await.unwrap();
    assert_eq!(a.best_latency_s, b.best_latency_s);
    assert_eq!(a.records, b.records);
    assert_eq!(a.best_latency_s, SimBackend::best_latency_s(&spec));
    assert_eq!(a.backend, "sim");
    assert_eq!(a.tvm_version, None);
    assert_eq!(a.trials, 64);

    // Different workload, different latency; base is flops / 10 GFLOP/s.
    let other = job(workload("mm", 65), 5);
    assert_ne!(SimBackend::best_latency_s(&other), a.best_latency_s);
    let base = spec.workload.flops().unwrap() / SIM_FLOPS_PER_S;
    assert!(a.best_latency_s >= 0.5 * base && a.best_latency_s < 1.5 * base);
    let gflops = a.gflops.unwrap();
    assert!((gflops - spec.workload.flops().unwrap() / a.best_latency_s / 1e9).abs() < 1e-9);
}

#[tokio::test]
async fn records_are_best_first_and_respect_nbest() {
    let backend = SimBackend::new(Duration::ZERO);
    let (sink, _watch) = progress_channel();
    let result = backend
        .tune(job(workload("mm", 64), 3), sink.clone())
        .await
        .unwrap();
    assert_eq!(result.records.len(), 3);
    assert_eq!(result.records[0].latency_s, result.best_latency_s);
    assert!(result
        .records
        .windows(2)
        .all(|w| w[0].latency_s < w[1].latency_s));
    assert_eq!(result.records[2].record["candidate"], 2);
    assert_eq!(result.records[2].record["sim"], true);

    // Fewer trials than nbest: one record per trial.
    let few = backend
        .tune(job(workload("mm", 2), 10), sink)
        .await
        .unwrap();
    assert_eq!(few.records.len(), 2);
}

#[tokio::test]
async fn progress_is_monotone_and_reaches_all_trials() {
    let backend = SimBackend::new(Duration::from_millis(100));
    let spec = job(workload("mm", 37), 5);
    let (sink, mut watch) = progress_channel();
    let tune = backend.tune(spec, sink);
    let collect = async {
        let mut seen = Vec::new();
        while let Some(update) = watch.next().await {
            seen.push(update);
        }
        seen
    };
    let (result, seen) = tokio::join!(tune, collect);
    let result = result.unwrap();
    assert!(seen.len() >= 2, "{seen:?}");
    for pair in seen.windows(2) {
        assert!(pair[0].trials_done <= pair[1].trials_done, "{seen:?}");
        assert!(pair[0].best_latency_s >= pair[1].best_latency_s, "{seen:?}");
    }
    let last = seen[seen.len() - 1];
    assert_eq!(last.trials_done, 37);
    assert_eq!(last.trials_total, 37);
    assert_eq!(last.best_latency_s, Some(result.best_latency_s));
    assert!(result.wall_time_s >= 0.09);
}

#[tokio::test]
async fn sim_fail_fails_and_sim_hang_hangs() {
    let backend = SimBackend::new(Duration::ZERO);
    let (sink, _watch) = progress_channel();
    let err = backend
        .tune(job(workload("sim-fail-1", 10), 5), sink.clone())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "simulated failure");

    let hang = backend.tune(job(workload("sim-hang", 10), 5), sink);
    let outcome = tokio::time::timeout(Duration::from_millis(100), hang).await;
    assert!(outcome.is_err(), "sim-hang returned");
}
