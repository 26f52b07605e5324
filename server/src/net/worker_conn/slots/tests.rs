use std::time::Duration;

use tokio::time::Instant;
use tunefleet_shared::protocol::{JobResult, Lease, MasterMessage};

use super::Slots;
use crate::core::WorkerInput;
use crate::scheduler::{ProgressReport, SessionId};

fn assign(job: &str) -> MasterMessage {
    MasterMessage::Assign {
        job_id: job.into(),
        lease: Lease(1),
        attempt: 1,
        workload: Box::new(tunefleet_shared::testing::workload(job)),
        nbest: 1,
        warm_start: None,
        tuner: None,
        model_round: false,
        cost_model: None,
    }
}

fn result(job: &str) -> WorkerInput {
    WorkerInput::Result {
        job_id: job.into(),
        lease: Lease(1),
        result: Box::new(JobResult {
            best_latency_s: 1e-3,
            gflops: None,
            records: Vec::new(),
            trials: 1,
            wall_time_s: 0.0,
            backend: "sim".into(),
            tvm_version: None,
            extra: serde_json::Value::Null,
            target: None,
        }),
    }
}

fn progress(job: &str) -> WorkerInput {
    WorkerInput::Progress(ProgressReport {
        job_id: job.into(),
        lease: Lease(1),
        trials_done: 1,
        trials_total: 2,
        best_latency_s: None,
    })
}

#[test]
fn one_slot_forwards_every_request_as_before() {
    let mut slots = Slots::new(vec![SessionId(7)], Instant::now());
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(7)));
    // A second request while asking, and one while holding a job, still go
    // to the session: the scheduler's rules for them are unchanged.
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(7)));
    slots.sent(SessionId(7), &assign("a"));
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(7)));
}

#[test]
fn requests_fill_free_slots_and_reports_find_their_job() {
    let mut slots = Slots::new(
        vec![SessionId(1), SessionId(2), SessionId(3)],
        Instant::now(),
    );
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(1)));
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(2)));
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(3)));
    // Every slot is asking: a fourth request goes nowhere.
    assert_eq!(slots.route(&WorkerInput::RequestJob), None);
    slots.sent(SessionId(2), &assign("b"));
    slots.sent(SessionId(1), &assign("a"));
    // Slot 3 still asks; 1 and 2 hold jobs.
    assert_eq!(slots.route(&WorkerInput::RequestJob), None);
    assert_eq!(slots.route(&progress("b")), Some(SessionId(2)));
    assert_eq!(slots.route(&result("b")), Some(SessionId(2)));
    // The result freed slot 2 for the next request.
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(2)));
    assert_eq!(slots.route(&result("a")), Some(SessionId(1)));
    // A report for a job no slot holds (from an earlier connection) goes to
    // the first slot, where the scheduler's late-result rule decides.
    assert_eq!(slots.route(&result("old")), Some(SessionId(1)));
}

#[test]
fn a_cancel_frees_its_slot() {
    let mut slots = Slots::new(vec![SessionId(1), SessionId(2)], Instant::now());
    slots.route(&WorkerInput::RequestJob);
    slots.route(&WorkerInput::RequestJob);
    slots.sent(SessionId(1), &assign("a"));
    slots.sent(SessionId(2), &assign("b"));
    assert_eq!(slots.route(&WorkerInput::RequestJob), None);
    slots.sent(
        SessionId(2),
        &MasterMessage::Cancel {
            job_id: "b".into(),
            lease: Lease(1),
            reason: "cancelled by an admin".into(),
        },
    );
    assert_eq!(slots.route(&WorkerInput::RequestJob), Some(SessionId(2)));
}

#[test]
fn progress_is_paced_per_slot() {
    let interval = Duration::from_secs(1);
    let start = Instant::now();
    let mut slots = Slots::new(vec![SessionId(1), SessionId(2)], start);
    assert!(slots
        .pace_progress(SessionId(1), progress("a"), start, interval)
        .is_some());
    // Within the interval: held, the latest wins.
    assert!(slots
        .pace_progress(SessionId(1), progress("a"), start, interval)
        .is_none());
    // The other slot has its own interval.
    assert!(slots
        .pace_progress(SessionId(2), progress("b"), start, interval)
        .is_some());
    assert_eq!(slots.next_release(), Some(start + interval));
    assert!(slots.release_due(start, interval).is_empty());
    let due = slots.release_due(start + interval, interval);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, SessionId(1));
    assert_eq!(slots.next_release(), None);
    assert!(slots.take_held(SessionId(1)).is_none());
}
