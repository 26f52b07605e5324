use super::publish::{
    event_frame, job_changed_event, job_trace_line, job_updated_event, worker_event_json,
};
use super::snapshot::{snapshot_message, SnapshotParts};
use super::*;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{FleetEvent, FleetSnapshot, JobState, ServerMessage, WorkerView};

#[test]
fn hand_built_job_event_is_the_protocol_event() {
    let view = tunefleet_shared::testing::job("j1", JobState::Running);
    let parsed: FleetEvent = serde_json::from_str(&job_updated_event(&view)).unwrap();
    assert_eq!(
        parsed,
        FleetEvent::JobUpdated {
            job: Box::new(view)
        }
    );
}

#[test]
fn hand_built_job_change_is_the_protocol_event() {
    let mut view = tunefleet_shared::testing::job("j1", JobState::Done);
    view.worker = Some("w".into());
    let text = job_changed_event(&view);
    assert!(!text.contains("workload"), "{text}");
    let parsed: FleetEvent = serde_json::from_str(&text).unwrap();
    assert_eq!(
        parsed,
        FleetEvent::JobChanged {
            change: Box::new(tunefleet_shared::testing::job_change(&view))
        }
    );
}

#[test]
fn a_job_trace_line_is_its_kind_and_lifecycle() {
    let yaml = "target: {kind: llvm}\ntrials: 8\nworkloads:\n  - {name: a, op: matmul, shape: {m: 8, n: 8, k: 8}}\n";
    let workloads = tunefleet_shared::workload::parse_workload_file(yaml, "t.yaml").unwrap();
    let config = crate::scheduler::SchedulerConfig {
        max_attempts: 3,
        job_timeout_ms: None,
        nbest: 5,
    };
    let mut scheduler = Scheduler::recover(config, Vec::new(), Millis(1), &mut Vec::new());
    scheduler.submit(workloads, Millis(2), &mut Vec::new());
    let job = scheduler.jobs().next().unwrap();
    let line: serde_json::Value = serde_json::from_str(&job_trace_line(job)).unwrap();
    assert_eq!(line["kind"], "job_updated");
    assert_eq!(line["job"]["job_id"], job.id().as_str());
    assert_eq!(line["job"]["name"], "a");
    assert_eq!(line["job"]["state"], "queued");
    assert!(line["job"].get("workload").is_none(), "{line}");
}

fn some_worker(name: &str, connected_at: u64) -> WorkerView {
    WorkerView {
        session: format!("s-{name}"),
        worker_id: format!("id-{name}"),
        name: name.into(),
        target: tunefleet_shared::target::Target::of_kind("llvm"),
        backend: "sim".into(),
        tvm_version: None,
        current_job: Some("00000000000000aa".into()),
        jobs_done: 3,
        connected_at: Millis(connected_at),
        device: None,
    }
}

#[test]
fn hand_built_snapshot_frame_parses_as_server_message() {
    let mut some_archived = JobCounts::default();
    some_archived.count_archived(JobState::Done, 3);
    some_archived.count_archived(JobState::Failed, 1);
    let problem = tunefleet_shared::protocol::StorageProblem {
        reason: "state database /srv/f.db: the \"disk\" is full".into(),
        since: Millis(12),
    };
    let cases = [
        (vec![], JobCounts::default(), None),
        (
            vec![some_worker("a", 1), some_worker("b", 2)],
            some_archived,
            Some(problem),
        ),
    ];
    for (workers, archived, storage_problem) in cases {
        let parts = SnapshotParts {
            jobs: vec![],
            workers: workers.iter().map(worker_json).collect(),
            models: vec![],
            archived: archived.clone(),
            storage_problem: storage_problem.clone(),
        };
        let parsed: ServerMessage = serde_json::from_str(&snapshot_message(9, &parts)).unwrap();
        let snapshot = FleetSnapshot {
            jobs: vec![],
            workers,
            models: vec![],
            archived,
            storage_problem,
        };
        assert_eq!(parsed, ServerMessage::Snapshot { seq: 9, snapshot });
    }
}

#[test]
fn hand_built_worker_events_parse_as_fleet_events() {
    let view = some_worker("w", 5);
    let json = worker_json(&view);
    let joined: FleetEvent =
        serde_json::from_str(&worker_event_json("worker_joined", &json)).unwrap();
    assert_eq!(
        joined,
        FleetEvent::WorkerJoined {
            worker: Box::new(view.clone())
        }
    );
    let updated: FleetEvent =
        serde_json::from_str(&worker_event_json("worker_updated", &json)).unwrap();
    assert_eq!(
        updated,
        FleetEvent::WorkerUpdated {
            worker: Box::new(view)
        }
    );
}

#[test]
fn hand_built_event_frame_parses_as_server_message() {
    let event = FleetEvent::WorkerLeft {
        session: "w1".into(),
        reason: "gone".into(),
    };
    let json = event_frame(7, &serde_json::to_string(&event).unwrap());
    let parsed: ServerMessage = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed, ServerMessage::Event { seq: 7, event });
}
