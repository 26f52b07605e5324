use super::*;
use crate::model_runs::tests::view as model_view;
use crate::view_model::tests::job;
use tunefleet_shared::model::ModelState;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{
    JobCounts, JobProgress, JobState, ReplyBody, ServerMessage, StatusReport, WorkerChange,
    WorkerView,
};
use tunefleet_shared::target::Target;

fn worker() -> WorkerView {
    WorkerView {
        session: "s1".into(),
        worker_id: "id-s1".into(),
        name: "w".into(),
        target: Target::of_kind("llvm"),
        backend: "sim".into(),
        tvm_version: Some("0.27".into()),
        current_job: Some("00000000000000aa".into()),
        jobs_done: 3,
        connected_at: Millis(5),
        device: Some(tunefleet_shared::device::Device {
            kind: "gpu".into(),
            name: "NVIDIA H200".into(),
            memory_mib: Some(143_771),
            index: Some(0),
            uuid: Some("GPU-0".into()),
        }),
    }
}

/// What the derived reader makes of the same frame, in this reader's terms.
fn expected(msg: ServerMessage) -> Incoming {
    match msg {
        ServerMessage::Reply { id, body } => match body {
            ReplyBody::Welcome { role, .. } => Incoming::Welcome { id, role },
            ReplyBody::Submitted(report) => Incoming::Submitted { id, report },
            ReplyBody::ModelSubmitted { name, extract_job } => Incoming::ModelSubmitted {
                id,
                name,
                extract_job,
            },
            ReplyBody::Cancelled { job_id } => Incoming::Cancelled { id, job_id },
            ReplyBody::Retried { job_id } => Incoming::Retried { id, job_id },
            ReplyBody::Results { .. } => Incoming::Results { id },
            _ => Incoming::OtherReply { id },
        },
        ServerMessage::Error { id, code, message } => Incoming::Error { id, code, message },
        ServerMessage::Snapshot { seq, snapshot } => Incoming::Snapshot { seq, snapshot },
        ServerMessage::Event { seq, event } => Incoming::Event { seq, event },
        ServerMessage::Shutdown { reason } => Incoming::Shutdown { reason },
    }
}

fn messages() -> Vec<ServerMessage> {
    let mut done = job("00000000000000aa", "mm", Millis(3), JobState::Done);
    done.best_latency_s = Some(1.5e-5);
    done.records = vec![tunefleet_shared::protocol::TuningRecord {
        latency_s: 1.5e-5,
        record: serde_json::json!([["trace", 1], [1.5e-5], {"kind": "llvm"}, []]),
    }];
    let mut archived = JobCounts::default();
    archived.count_archived(JobState::Done, 2);
    let reply = |id, body| ServerMessage::Reply { id, body };
    let event = |seq, event| ServerMessage::Event { seq, event };
    vec![
        reply(
            1,
            ReplyBody::Welcome {
                server_version: "0.1.0".into(),
                protocol: 1,
                role: Role::Read,
            },
        ),
        reply(2, ReplyBody::Subscribed),
        reply(
            3,
            ReplyBody::Submitted(SubmitReport {
                new_jobs: vec!["a".into()],
                duplicates: vec!["b".into()],
                cache_hits: vec!["a".into()],
                warm_started: vec![],
                seeded: vec![],
            }),
        ),
        reply(
            4,
            ReplyBody::ModelSubmitted {
                name: "net".into(),
                extract_job: "c".into(),
            },
        ),
        reply(5, ReplyBody::Cancelled { job_id: "d".into() }),
        reply(6, ReplyBody::Retried { job_id: "e".into() }),
        reply(
            7,
            ReplyBody::Status(StatusReport {
                jobs: archived.clone(),
                workers: 1,
                workers_busy: 0,
                server_version: "0.1.0".into(),
                storage: Default::default(),
                storage_problem: None,
                devices: vec![tunefleet_shared::protocol::DeviceGroup {
                    device: worker().device,
                    target_kind: "cuda".into(),
                    arch: Some("sm_90".into()),
                    workers: 1,
                    busy: 0,
                }],
                unserved: vec![tunefleet_shared::protocol::UnservedTarget {
                    target: Target::of_kind("cuda"),
                    jobs: 3,
                }],
            }),
        ),
        reply(
            7,
            ReplyBody::Results {
                jobs: vec![done.clone()],
            },
        ),
        ServerMessage::Error {
            id: Some(8),
            code: ErrorCode::InvalidWorkload,
            message: "demo.yaml:3: bad".into(),
        },
        ServerMessage::Error {
            id: None,
            code: ErrorCode::RateLimited,
            message: "slow down".into(),
        },
        ServerMessage::Snapshot {
            seq: 9,
            snapshot: FleetSnapshot {
                jobs: vec![
                    done.clone(),
                    job("00000000000000bb", "q", Millis(4), JobState::Queued),
                ],
                workers: vec![worker()],
                models: vec![model_view(ModelState::Tuning)],
                archived: archived.clone(),
                storage_problem: Some(tunefleet_shared::protocol::StorageProblem {
                    reason: "state database /srv/f.db: the disk is full".into(),
                    since: Millis(5),
                }),
            },
        },
        event(
            10,
            FleetEvent::JobChanged {
                change: Box::new(tunefleet_shared::testing::job_change(&done)),
            },
        ),
        event(
            10,
            FleetEvent::JobUpdated {
                job: Box::new(done),
            },
        ),
        event(
            11,
            FleetEvent::JobProgress {
                progress: JobProgress {
                    job_id: "00000000000000bb".into(),
                    trials_done: 4,
                    trials_total: 10,
                    best_latency_s: Some(2e-5),
                    updated_at: Millis(12),
                },
            },
        ),
        event(
            12,
            FleetEvent::WorkerJoined {
                worker: Box::new(worker()),
            },
        ),
        event(
            13,
            FleetEvent::WorkerUpdated {
                worker: Box::new(worker()),
            },
        ),
        event(
            13,
            FleetEvent::WorkerChanged {
                change: WorkerChange::of(&worker()),
            },
        ),
        event(
            14,
            FleetEvent::WorkerLeft {
                session: "s1".into(),
                reason: "heartbeat timeout".into(),
            },
        ),
        event(
            15,
            FleetEvent::ModelUpdated {
                model: Box::new(model_view(ModelState::Done)),
            },
        ),
        event(
            15,
            FleetEvent::StorageChanged {
                problem: Some(tunefleet_shared::protocol::StorageProblem {
                    reason: "state database /srv/f.db: the disk is full".into(),
                    since: Millis(5),
                }),
            },
        ),
        event(15, FleetEvent::StorageChanged { problem: None }),
        event(
            16,
            FleetEvent::JobsArchived {
                job_ids: vec!["00000000000000aa".into()],
                archived,
            },
        ),
        ServerMessage::Shutdown {
            reason: "SIGTERM".into(),
        },
    ]
}

/// Every kind of event must be in `parse` and in `messages`: this match has
/// no wildcard, so a new kind stops this test from compiling until it is.
fn kind_is_covered(event: &FleetEvent) -> bool {
    match event {
        FleetEvent::WorkerJoined { .. }
        | FleetEvent::WorkerLeft { .. }
        | FleetEvent::WorkerUpdated { .. }
        | FleetEvent::WorkerChanged { .. }
        | FleetEvent::JobUpdated { .. }
        | FleetEvent::JobProgress { .. }
        | FleetEvent::JobChanged { .. }
        | FleetEvent::ModelUpdated { .. }
        | FleetEvent::StorageChanged { .. }
        | FleetEvent::JobsArchived { .. } => true,
    }
}

#[test]
fn every_message_reads_as_the_derived_reader_reads_it() {
    let events = messages()
        .iter()
        .filter(|m| matches!(m, ServerMessage::Event { event, .. } if kind_is_covered(event)))
        .count();
    assert_eq!(events, 11, "a sample of every event kind");
    for msg in messages() {
        let text = serde_json::to_string(&msg).unwrap();
        let derived: ServerMessage = serde_json::from_str(&text).unwrap();
        assert_eq!(derived, msg, "the frame round-trips");
        assert_eq!(parse(&text), Some(expected(msg)), "{text}");
    }
}

#[test]
fn the_tag_may_come_anywhere_in_the_object() {
    let text = r#"{"id":5,"body":{"job_id":"d","kind":"cancelled"},"type":"reply"}"#;
    assert_eq!(
        parse(text),
        Some(Incoming::Cancelled {
            id: 5,
            job_id: "d".into()
        })
    );
    let text =
        r#"{"seq":3,"event":{"session":"s","reason":"r","kind":"worker_left"},"type":"event"}"#;
    assert!(matches!(parse(text), Some(Incoming::Event { seq: 3, .. })));
}

#[test]
fn what_is_not_a_known_message_is_none() {
    for text in [
        "",
        "not json",
        "[]",
        r#"{"type":"hello"}"#,
        r#"{"type":"event","seq":1,"event":{"kind":"job_teleported"}}"#,
        r#"{"type":"event","seq":1,"event":{"kind":"job_updated","job":{}}}"#,
        r#"{"type":"reply","body":{"kind":"welcome"}}"#,
        r#"{"kind":"reply"}"#,
    ] {
        assert_eq!(parse(text), None, "{text}");
    }
}
