use std::time::Duration;

use tokio::sync::oneshot;
use tunefleet_shared::protocol::{StatusReport, StorageHealth, SubmitReport};
use tunefleet_shared::workload::parse_workload_file;

use super::super::{Batch, Change, Command, Core, Read};
use crate::scheduler::{CachePolicy, SchedulerConfig};
use crate::store::{Durability, Store};

fn yaml(n: usize, k: usize) -> String {
    let mut yaml = String::from("target: {kind: llvm}\ntrials: 8\nworkloads:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - {{name: b{k}-{i}, op: matmul, shape: {{m: {}, n: 16, k: {k}}}}}\n",
            i + 1
        ));
    }
    yaml
}

/// One command as a batch of its own, flushed (committed or refused).
fn run(core: &mut Core, command: impl Into<Command>) {
    let mut batch = Batch::default();
    core.apply(command.into(), &mut batch);
    core.flush(batch);
}

fn submit(core: &mut Core, n: usize, k: usize) -> Option<SubmitReport> {
    let workloads = parse_workload_file(&yaml(n, k), "t.yaml").expect("valid");
    let (reply, answer) = oneshot::channel();
    let command = Change::Submit {
        workloads,
        cache: CachePolicy::Use,
        by: Some("test".into()),
        reply,
    };
    run(core, command);
    answer.blocking_recv().ok()
}

fn status(core: &mut Core) -> StatusReport {
    let (reply, answer) = oneshot::channel();
    run(core, Read::Status { reply });
    answer.blocking_recv().expect("a read is always answered")
}

#[test]
fn a_failed_commit_is_refused_rolled_back_and_never_applied_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("fleet.db"), Durability::Normal).expect("open");
    let (events, _) = tokio::sync::broadcast::channel(16);
    let mut core = Core::start(SchedulerConfig::default(), store, events).expect("start");
    assert_eq!(submit(&mut core, 3, 1).expect("taken").new_jobs.len(), 3);

    core.store.fail_commits = true;
    assert!(submit(&mut core, 2, 2).is_none(), "no reply: refused");
    let during = status(&mut core);
    assert_eq!(during.storage, StorageHealth::Degraded);
    let reason = during.storage_problem.expect("why").reason;
    assert!(
        reason.contains("fleet.db") && reason.contains("full"),
        "{reason}"
    );
    assert_eq!(during.jobs.total, 3, "the refused batch is rolled back");
    assert!(core.storage.is_failing());
    assert!(core
        .storage
        .refusal()
        .contains("nothing of this request was applied"));
    // Refused at once while degraded, without trying the store.
    assert!(submit(&mut core, 1, 3).is_none());

    // Space returns: the next probe (a second after the last) commits.
    core.store.fail_commits = false;
    std::thread::sleep(Duration::from_millis(1100));
    run(&mut core, Command::Tick);
    let after = status(&mut core);
    assert_eq!(after.storage, StorageHealth::Ok);
    assert!(after.storage_problem.is_none());
    assert!(!core.storage.is_failing());
    assert_eq!(after.jobs.total, 3);
    let again = submit(&mut core, 2, 2).expect("taken");
    assert_eq!(again.new_jobs.len(), 2, "new, not duplicates: {again:?}");
    assert_eq!(status(&mut core).jobs.total, 5);
}

#[test]
fn a_probe_that_fails_keeps_the_master_degraded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("fleet.db"), Durability::Normal).expect("open");
    let (events, _) = tokio::sync::broadcast::channel(16);
    let mut core = Core::start(SchedulerConfig::default(), store, events).expect("start");
    core.store.fail_commits = true;
    assert!(submit(&mut core, 1, 1).is_none());
    std::thread::sleep(Duration::from_millis(1100));
    run(&mut core, Command::Tick);
    assert_eq!(status(&mut core).storage, StorageHealth::Degraded);
    let (reply, answer) = oneshot::channel();
    run(&mut core, Read::Metrics { reply });
    assert_eq!(answer.blocking_recv().expect("metrics").storage_degraded, 1);
}

/// A store call that does not return (a database gone silent): after
/// `STAND_IN_AFTER`, reads get the figures the core left between batches,
/// marked degraded, and `/healthz` would say why; once the call returns,
/// nothing stands in.
#[test]
fn a_stuck_store_call_lets_reads_answer_from_the_stand_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("fleet.db"), Durability::Normal).expect("open");
    let (events, _) = tokio::sync::broadcast::channel(16);
    let mut core = Core::start(SchedulerConfig::default(), store, events).expect("start");
    assert_eq!(submit(&mut core, 3, 1).expect("taken").new_jobs.len(), 3);
    core.keep_stand_in();
    let storage = core.storage.clone();
    assert!(storage.stand_in_status().is_none(), "no call is stuck");
    {
        let _stuck = core.store.call_clock().start_owned();
        std::thread::sleep(super::STAND_IN_AFTER + Duration::from_millis(50));
        let status = storage.stand_in_status().expect("a stand-in");
        assert_eq!(status.jobs.total, 3);
        assert_eq!(status.storage, StorageHealth::Degraded);
        let reason = status.storage_problem.expect("why").reason;
        assert!(reason.contains("has not answered"), "{reason}");
        assert_eq!(
            storage
                .stand_in_metrics()
                .expect("metrics")
                .storage_degraded,
            1
        );
        assert!(storage.unhealthy().is_some());
        assert!(!storage.is_failing(), "changes are not refused: they wait");
    }
    assert!(storage.stand_in_status().is_none());
    assert!(storage.unhealthy().is_none());
}
