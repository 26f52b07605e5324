use super::*;
use progress::add_archived;
use tunefleet_shared::protocol::{FleetEvent, FleetSnapshot, ServerMessage, WorkerView};
use tunefleet_shared::protocol::{JobState, JobView, Millis, ProgressPoint, ResultMeta};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::parse_workload_file;

pub(crate) fn job(id: &str, name: &str, created_at: Millis, state: JobState) -> JobView {
    let yaml = format!(
            "target: {{kind: llvm}}\ntrials: 10\nworkloads:\n  - name: {name}\n    op: matmul\n    shape: {{m: 64, n: 64, k: {}}}\n",
            created_at.0 + 1
        );
    let workload = parse_workload_file(&yaml, "t.yaml").unwrap().remove(0);
    JobView {
        job_id: id.into(),
        name: name.into(),
        workload,
        state,
        attempts: 1,
        worker: None,
        trials_done: 0,
        trials_total: 10,
        best_latency_s: None,
        records: vec![],
        history: vec![],
        errors: vec![],
        result: None,
        created_at,
        updated_at: created_at,
        started_at: None,
        finished_at: None,
        cache_hit: false,
        cached_from: None,
        actions: Vec::new(),
    }
}

fn worker(session: &str, connected_at: Millis) -> WorkerView {
    WorkerView {
        session: session.into(),
        worker_id: format!("id-{session}"),
        name: format!("w-{session}"),
        target: Target::of_kind("llvm"),
        backend: "sim".into(),
        tvm_version: None,
        current_job: None,
        jobs_done: 0,
        connected_at,
        device: None,
    }
}

fn snapshot(jobs: Vec<JobView>, workers: Vec<WorkerView>) -> FleetSnapshot {
    FleetSnapshot {
        jobs,
        workers,
        models: vec![],
        archived: Default::default(),
        storage_problem: None,
    }
}

fn job_event(job: JobView) -> FleetEvent {
    FleetEvent::JobUpdated { job: Box::new(job) }
}

fn names(fleet: &Fleet) -> Vec<&str> {
    fleet.jobs().iter().map(|j| j.name.as_str()).collect()
}

#[test]
fn events_before_the_first_snapshot_are_ignored() {
    let mut fleet = Fleet::default();
    let out = fleet.apply_event(1, job_event(job("a", "a", Millis(1), JobState::Queued)));
    assert_eq!(out, EventOutcome::Stale);
    assert!(fleet.jobs().is_empty());
    assert!(!fleet.synced());
}

#[test]
fn events_replace_jobs_by_id_and_keep_submission_order() {
    let mut fleet = Fleet::default();
    fleet.apply_snapshot(
        10,
        snapshot(
            vec![
                job("b", "second", Millis(2), JobState::Queued),
                job("a", "first", Millis(1), JobState::Queued),
            ],
            vec![],
        ),
    );
    assert_eq!(names(&fleet), ["first", "second"]);
    let mut running = job("b", "second", Millis(2), JobState::Running);
    running.trials_done = 4;
    assert_eq!(
        fleet.apply_event(11, job_event(running.clone())),
        EventOutcome::Applied
    );
    // Identical consecutive events are harmless.
    assert_eq!(
        fleet.apply_event(12, job_event(running)),
        EventOutcome::Applied
    );
    assert_eq!(fleet.jobs().len(), 2);
    assert_eq!(fleet.job("b").unwrap().state, JobState::Running);
    assert_eq!(fleet.job("b").unwrap().trials_done, 4);
    // A new job lands in created_at order.
    fleet.apply_event(
        13,
        job_event(job("c", "between", Millis(1), JobState::Queued)),
    );
    assert_eq!(names(&fleet), ["between", "first", "second"]);
    assert_eq!(fleet.job("a").unwrap().name, "first");
    assert_eq!(fleet.seq(), Some(13));
}

#[test]
fn stale_events_are_dropped_and_gaps_reported() {
    let mut fleet = Fleet::default();
    fleet.apply_snapshot(
        5,
        snapshot(vec![job("a", "a", Millis(1), JobState::Running)], vec![]),
    );
    // An event the snapshot already includes must not roll the job back.
    let out = fleet.apply_event(5, job_event(job("a", "a", Millis(1), JobState::Queued)));
    assert_eq!(out, EventOutcome::Stale);
    assert_eq!(fleet.job("a").unwrap().state, JobState::Running);
    let out = fleet.apply_event(8, job_event(job("a", "a", Millis(1), JobState::Done)));
    assert_eq!(
        out,
        EventOutcome::Gap {
            expected: 6,
            got: 8
        }
    );
    assert_eq!(fleet.job("a").unwrap().state, JobState::Done);
}

#[test]
fn a_snapshot_replaces_instead_of_merging() {
    let mut fleet = Fleet::default();
    fleet.apply_snapshot(
        3,
        snapshot(
            vec![
                job("a", "a", Millis(1), JobState::Running),
                job("gone", "gone", Millis(2), JobState::Queued),
            ],
            vec![worker("s1", Millis(1)), worker("s2", Millis(2))],
        ),
    );
    fleet.apply_event(4, job_event(job("x", "x", Millis(3), JobState::Queued)));
    // Resync (new connection or lagging subscriber): seq may even go back
    // (a restarted master counts from 0 again).
    fleet.apply_snapshot(
        0,
        snapshot(
            vec![
                job("a", "a", Millis(1), JobState::Done),
                job("x", "x", Millis(3), JobState::Queued),
                job("a", "a", Millis(1), JobState::Done),
            ],
            vec![worker("s3", Millis(5))],
        ),
    );
    assert_eq!(names(&fleet), ["a", "x"]);
    assert_eq!(fleet.job("a").unwrap().state, JobState::Done);
    assert!(fleet.job("gone").is_none());
    let sessions: Vec<&str> = fleet.workers().iter().map(|w| w.session.as_str()).collect();
    assert_eq!(sessions, ["s3"]);
    assert_eq!(fleet.snapshots, 2);
    // Events continue from the new seq.
    assert_eq!(
        fleet.apply_event(1, job_event(job("x", "x", Millis(3), JobState::Running))),
        EventOutcome::Applied
    );
}

#[test]
fn workers_join_update_and_leave_by_session() {
    let mut fleet = Fleet::default();
    fleet.apply_snapshot(0, snapshot(vec![], vec![worker("s2", Millis(20))]));
    let join = |w: WorkerView| FleetEvent::WorkerJoined {
        worker: Box::new(w),
    };
    fleet.apply_event(1, join(worker("s1", Millis(10))));
    fleet.apply_event(2, join(worker("s3", Millis(30))));
    let mut busy = worker("s1", Millis(10));
    busy.current_job = Some("a".into());
    fleet.apply_event(
        3,
        FleetEvent::WorkerUpdated {
            worker: Box::new(busy),
        },
    );
    let sessions: Vec<&str> = fleet.workers().iter().map(|w| w.session.as_str()).collect();
    assert_eq!(sessions, ["s1", "s2", "s3"]);
    assert_eq!(
        fleet
            .worker_by_session("s1")
            .unwrap()
            .current_job
            .as_deref(),
        Some("a")
    );
    fleet.apply_event(
        4,
        FleetEvent::WorkerLeft {
            session: "s2".into(),
            reason: "killed".into(),
        },
    );
    assert_eq!(fleet.workers().len(), 2);
    assert!(fleet.worker_by_session("s2").is_none());
}

#[test]
fn overall_counts_and_weights_in_flight_jobs_by_trials() {
    let mut running = job("r", "r", Millis(1), JobState::Running);
    running.trials_done = 5;
    let jobs = vec![
        job("d", "d", Millis(1), JobState::Done),
        job("f", "f", Millis(1), JobState::Failed),
        running,
        job("q", "q", Millis(1), JobState::Queued),
    ];
    let o = overall(&jobs, Millis(0));
    assert_eq!(
        (
            o.counts.total,
            o.counts.done,
            o.counts.failed,
            o.counts.running,
            o.counts.queued
        ),
        (4, 1, 1, 1, 1)
    );
    assert_eq!(o.finished(), 2);
    assert!((o.percent - 62.5).abs() < 1e-9, "{}", o.percent);
    assert!((o.done_share - 25.0).abs() < 1e-9);
    assert!((o.failed_share - 25.0).abs() < 1e-9);
    let all_done = vec![job("d", "d", Millis(1), JobState::Done)];
    let o = overall(&all_done, Millis(0));
    assert_eq!(o.percent, 100.0);
    assert_eq!(o.eta_ms, None);
    assert_eq!(overall(&[], Millis(0)).percent, 0.0);

    // Four jobs archived by the master (3 done, 1 failed): whole, finished.
    let mut o = overall(&jobs, Millis(0));
    let mut archived = tunefleet_shared::protocol::JobCounts::default();
    archived.count_archived(JobState::Done, 3);
    archived.count_archived(JobState::Failed, 1);
    add_archived(&mut o, &archived);
    assert_eq!(
        (
            o.counts.total,
            o.counts.done,
            o.counts.failed,
            o.counts.archived
        ),
        (8, 4, 2, 4)
    );
    assert_eq!(o.finished(), 6);
    // (2.5 of 4 held) + 4 archived, of 8.
    assert!((o.percent - 81.25).abs() < 1e-9, "{}", o.percent);
    assert!((o.done_share - 50.0).abs() < 1e-9);
}

#[test]
fn eta_extrapolates_the_trial_rate_since_the_open_jobs_were_created() {
    // Created at t=0; one job of 10 trials done at t=10 s, one running
    // with 5 of 10, two queued: 25 trials left at 15 trials / 10 s.
    let mut done = job("d", "d", Millis(0), JobState::Done);
    done.trials_done = 10;
    done.started_at = Some(Millis(0));
    done.finished_at = Some(Millis(8_000));
    let mut running = job("r", "r", Millis(0), JobState::Running);
    running.trials_done = 5;
    running.started_at = Some(Millis(8_000));
    let jobs = vec![
        done,
        running,
        job("q1", "q1", Millis(0), JobState::Queued),
        job("q2", "q2", Millis(0), JobState::Queued),
    ];
    let o = overall(&jobs, Millis(10_000));
    assert_eq!(o.eta_ms, Some(16_667)); // 25 trials at 1.5 trials/s
                                        // Nothing started yet: no estimate.
    let o = overall(
        &[job("q", "q", Millis(0), JobState::Queued)],
        Millis(10_000),
    );
    assert_eq!(o.eta_ms, None);
    // Old jobs finished before the open ones were created do not count.
    let mut old = job("o", "o", Millis(0), JobState::Done);
    old.started_at = Some(Millis(0));
    old.finished_at = Some(Millis(1_000));
    let o = overall(
        &[old, job("q", "q", Millis(5_000), JobState::Queued)],
        Millis(10_000),
    );
    assert_eq!(o.eta_ms, None);
}

#[test]
fn jobs_filter_search_and_sort() {
    let mut a = job("aa11", "alpha", Millis(1), JobState::Done);
    a.best_latency_s = Some(3e-3);
    let mut b = job("bb22", "Beta", Millis(2), JobState::Running);
    b.best_latency_s = Some(1e-3);
    b.trials_done = 5;
    let c = job("cc33", "gamma", Millis(3), JobState::Queued);
    let mut d = job("dd44", "delta", Millis(4), JobState::Assigned);
    d.attempts = 2;
    let jobs = vec![a, b, c, d];
    let ids = |rows: Vec<&JobView>| rows.iter().map(|j| j.job_id.clone()).collect::<Vec<_>>();
    let all = visible_jobs(&jobs, StateFilter::All, "", Sort::default());
    assert_eq!(ids(all), ["aa11", "bb22", "cc33", "dd44"]);
    let running = visible_jobs(&jobs, StateFilter::Running, "", Sort::default());
    assert_eq!(ids(running), ["bb22", "dd44"]);
    let by_name = Sort::default().clicked(SortKey::Name);
    assert_eq!(
        ids(visible_jobs(&jobs, StateFilter::All, "", by_name)),
        ["aa11", "bb22", "dd44", "cc33"]
    );
    let by_name_desc = by_name.clicked(SortKey::Name);
    assert!(by_name_desc.descending);
    assert_eq!(
        ids(visible_jobs(&jobs, StateFilter::All, "", by_name_desc)),
        ["cc33", "dd44", "bb22", "aa11"]
    );
    // Unknown latencies last, ascending.
    let best = Sort::default().clicked(SortKey::Best);
    assert_eq!(
        ids(visible_jobs(&jobs, StateFilter::All, "", best)),
        ["bb22", "aa11", "cc33", "dd44"]
    );
    let by_state = Sort::default().clicked(SortKey::State);
    assert_eq!(
        ids(visible_jobs(&jobs, StateFilter::All, "", by_state)),
        ["bb22", "dd44", "cc33", "aa11"]
    );
    assert_eq!(
        ids(visible_jobs(
            &jobs,
            StateFilter::All,
            "BET",
            Sort::default()
        )),
        ["bb22"]
    );
    assert_eq!(
        ids(visible_jobs(&jobs, StateFilter::All, "cc", Sort::default())),
        ["cc33"]
    );
    assert_eq!(
        visible_jobs(&jobs, StateFilter::All, "matmul", Sort::default()).len(),
        4
    );
}

fn reply(id: u64, body: serde_json::Value) -> String {
    serde_json::json!({"type": "reply", "id": id, "body": body}).to_string()
}

fn sent(effects: &[Effect]) -> Vec<serde_json::Value> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Send(text) => Some(serde_json::from_str(text).unwrap()),
            _ => None,
        })
        .collect()
}

fn snapshot_frame(seq: u64, jobs: Vec<JobView>) -> String {
    serde_json::to_string(&ServerMessage::Snapshot {
        seq,
        snapshot: snapshot(jobs, vec![]),
    })
    .unwrap()
}

fn event_frame(seq: u64, job: JobView) -> String {
    serde_json::to_string(&ServerMessage::Event {
        seq,
        event: job_event(job),
    })
    .unwrap()
}

/// hello → welcome → subscribe → snapshot, as the page does it.
fn connect(session: &mut Session, token: Option<&str>, role: &str) {
    session.connecting();
    let hello: serde_json::Value = serde_json::from_str(&session.opened(token)).unwrap();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["protocol"], PROTOCOL_VERSION);
    let id = hello["id"].as_u64().unwrap();
    let effects = session.received(&reply(
            id,
            serde_json::json!({"kind": "welcome", "server_version": "0.1.0", "protocol": 1, "role": role}),
        ));
    let frames = sent(&effects);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["type"], "subscribe");
    assert_eq!(frames[0]["deltas"], true, "the page's mirror takes deltas");
    let sub_id = frames[0]["id"].as_u64().unwrap();
    assert!(session
        .received(&reply(sub_id, serde_json::json!({"kind": "subscribed"})))
        .is_empty());
}

#[test]
fn session_handshake_sends_the_token_and_subscribes() {
    let mut session = Session::new();
    assert_eq!(session.link(), Link::Connecting { attempt: 0 });
    session.connecting();
    let hello: serde_json::Value = serde_json::from_str(&session.opened(Some(" secret "))).unwrap();
    assert_eq!(hello["token"], "secret");
    assert_eq!(hello["client"], "tunefleet-web");
    let no_token: serde_json::Value = serde_json::from_str(&session.opened(Some(""))).unwrap();
    assert!(no_token["token"].is_null());

    let mut session = Session::new();
    connect(&mut session, Some("t"), "admin");
    assert_eq!(session.role(), Some(Role::Admin));
    assert!(!session.fleet.synced());
    assert!(!session.live(), "not live before the snapshot");
    session.received(&snapshot_frame(
        7,
        vec![job("a", "a", Millis(1), JobState::Queued)],
    ));
    assert!(session.fleet.synced());
    assert!(session.live());
    session.received(&event_frame(8, job("a", "a", Millis(1), JobState::Running)));
    assert_eq!(session.fleet.job("a").unwrap().state, JobState::Running);
}

#[test]
fn a_gap_in_the_event_stream_resubscribes() {
    let mut session = Session::new();
    connect(&mut session, None, "read");
    session.received(&snapshot_frame(
        1,
        vec![job("a", "a", Millis(1), JobState::Queued)],
    ));
    let effects = session.received(&event_frame(3, job("a", "a", Millis(1), JobState::Running)));
    let frames = sent(&effects);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["type"], "subscribe");
}

#[test]
fn reconnect_resyncs_from_a_fresh_snapshot_without_duplicates() {
    let mut session = Session::new();
    connect(&mut session, Some("t"), "admin");
    session.received(&snapshot_frame(
        4,
        vec![
            job("a", "a", Millis(1), JobState::Running),
            job("b", "b", Millis(2), JobState::Queued),
        ],
    ));
    // The master restarts: the socket drops with 1006.
    let (action, _) = session.closed(1006, "");
    assert_eq!(action, CloseAction::Reconnect { delay_ms: 500 });
    match session.link() {
        Link::Retrying {
            attempt, reason, ..
        } => {
            assert_eq!(attempt, 1);
            assert_eq!(reason, "connection lost");
        }
        other => panic!("{other:?}"),
    }
    // The old rows stay visible while disconnected, marked not live.
    assert_eq!(session.fleet.jobs().len(), 2);
    assert!(!session.live());
    // The first retry fails too: the delay doubles.
    session.connecting();
    assert_eq!(session.link(), Link::Connecting { attempt: 1 });
    let (action, _) = session.closed(1006, "");
    assert_eq!(action, CloseAction::Reconnect { delay_ms: 1000 });
    // The second one works; the new master's seq starts again at 0.
    connect(&mut session, Some("t"), "admin");
    assert!(session.link().is_live());
    assert!(!session.live(), "stale until the new snapshot");
    session.received(&snapshot_frame(
        0,
        vec![
            job("a", "a", Millis(1), JobState::Queued),
            job("b", "b", Millis(2), JobState::Queued),
        ],
    ));
    assert_eq!(session.fleet.jobs().len(), 2);
    assert_eq!(session.fleet.job("a").unwrap().state, JobState::Queued);
    session.received(&event_frame(1, job("a", "a", Millis(1), JobState::Running)));
    assert_eq!(session.fleet.jobs().len(), 2);
    assert_eq!(session.fleet.job("a").unwrap().state, JobState::Running);
    // After a good connection, the backoff starts from the beginning.
    let (action, _) = session.closed(1001, "");
    assert_eq!(action, CloseAction::Reconnect { delay_ms: 500 });
}

#[test]
fn shutdown_reason_is_shown_while_retrying() {
    let mut session = Session::new();
    connect(&mut session, None, "read");
    session.received(r#"{"type":"shutdown","reason":"SIGTERM"}"#);
    session.closed(1001, "");
    match session.link() {
        Link::Retrying { reason, .. } => assert!(reason.contains("SIGTERM"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refused_token_waits_for_the_user() {
    let mut session = Session::new();
    session.connecting();
    let hello: serde_json::Value = serde_json::from_str(&session.opened(Some("wrong"))).unwrap();
    let id = hello["id"].as_u64().unwrap();
    session.received(
            &serde_json::json!({"type": "error", "id": id, "code": "unauthorized", "message": "unauthorized: wrong token"})
                .to_string(),
        );
    let (action, _) = session.closed(close_code::UNAUTHORIZED, "");
    assert_eq!(action, CloseAction::Wait);
    assert_eq!(
        session.link(),
        Link::NeedsToken {
            reason: "unauthorized: wrong token".into()
        }
    );
    // Protocol mismatch: nothing to retry either.
    let mut session = Session::new();
    session.connecting();
    session.opened(None);
    let (action, _) = session.closed(close_code::PROTOCOL_MISMATCH, "protocol 2 expected");
    assert_eq!(action, CloseAction::Wait);
    assert!(matches!(session.link(), Link::Incompatible { .. }));
}

#[test]
fn a_model_submit_is_a_submit_with_its_own_reply() {
    use tunefleet_shared::model::{ModelMode, ModelSource, ModelSubmission, TunerSettings};
    let mut session = Session::new();
    connect(&mut session, Some("t"), "admin");
    session.received(&snapshot_frame(1, vec![]));
    let model = ModelSubmission {
        name: "sq".into(),
        source: ModelSource::new("AAAA".into(), Default::default(), ModelMode::BEST),
        trials: Some(64),
        trials_per_round: None,
        target: None,
        tuner: TunerSettings::default(),
        extracted: None,
    };
    let submit = |session: &mut Session| {
        let frame = session
            .request(ClientCommand::SubmitModel {
                model: Box::new(model.clone()),
            })
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&frame).unwrap();
        assert_eq!(v["type"], "submit_model");
        assert_eq!(v["model"]["name"], "sq");
        v["id"].as_u64().unwrap()
    };
    let id = submit(&mut session);
    assert!(session.submitting());
    let effects = session.received(&reply(
        id,
        serde_json::json!({"kind": "model_submitted", "name": "sq", "extract_job": "abc"}),
    ));
    assert_eq!(effects, []);
    assert_eq!(
        session.answer(),
        Some(&(
            1,
            SubmitAnswer::ModelAccepted {
                name: "sq".into(),
                extract_job: "abc".into()
            }
        ))
    );
    assert!(!session.submitting());
    let id = submit(&mut session);
    let effects = session.received(
            &serde_json::json!({"type": "error", "id": id, "code": "invalid_workload", "message": "model run `sq` exists"})
                .to_string(),
        );
    assert_eq!(effects, []);
    assert_eq!(
        session.answer(),
        Some(&(2, SubmitAnswer::Rejected("model run `sq` exists".into())))
    );
}

#[test]
fn submit_cancel_and_retry_replies_reach_the_page() {
    let mut session = Session::new();
    assert_eq!(
        session.request(ClientCommand::Cancel { job_id: "a".into() }),
        None,
        "nothing is sent while disconnected"
    );
    connect(&mut session, Some("t"), "admin");
    session.received(&snapshot_frame(
        1,
        vec![job("aaaa1111", "mm", Millis(1), JobState::Queued)],
    ));

    let frame = session
        .request(ClientCommand::Submit {
            yaml: "workloads: []".into(),
            filename: Some("x.yaml".into()),
            fresh: false,
        })
        .unwrap();
    assert!(session.submitting());
    let id = serde_json::from_str::<serde_json::Value>(&frame).unwrap()["id"]
        .as_u64()
        .unwrap();
    let effects = session.received(&reply(
        id,
        serde_json::json!({"kind": "submitted", "new_jobs": ["x"], "duplicates": ["y", "z"]}),
    ));
    assert_eq!(effects, []);
    assert_eq!(
        session.answer(),
        Some(&(
            1,
            SubmitAnswer::Accepted(SubmitReport {
                new_jobs: vec!["x".into()],
                duplicates: vec!["y".into(), "z".into()],
                ..Default::default()
            })
        ))
    );
    assert!(!session.submitting());

    let frame = session
        .request(ClientCommand::Submit {
            yaml: "bad".into(),
            filename: None,
            fresh: false,
        })
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&frame).unwrap()["id"]
        .as_u64()
        .unwrap();
    let effects = session.received(
            &serde_json::json!({"type": "error", "id": id, "code": "invalid_workload", "message": "x.yaml:1: nope"})
                .to_string(),
        );
    assert_eq!(effects, []);
    assert_eq!(
        session.answer(),
        Some(&(2, SubmitAnswer::Rejected("x.yaml:1: nope".into())))
    );

    let frame = session
        .request(ClientCommand::Cancel {
            job_id: "aaaa1111".into(),
        })
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&frame).unwrap()["id"]
        .as_u64()
        .unwrap();
    let effects = session.received(&reply(
        id,
        serde_json::json!({"kind": "cancelled", "job_id": "aaaa1111"}),
    ));
    assert_eq!(
        effects,
        [Effect::Notice {
            text: "cancelled job mm".into(),
            error: false
        }]
    );
    let frame = session
        .request(ClientCommand::Retry {
            job_id: "aaaa1111".into(),
        })
        .unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&frame).unwrap()["id"]
        .as_u64()
        .unwrap();
    let effects = session.received(
            &serde_json::json!({"type": "error", "id": id, "code": "invalid_state", "message": "job is queued"})
                .to_string(),
        );
    assert_eq!(
        effects,
        [Effect::Notice {
            text: "job mm: job is queued".into(),
            error: true
        }]
    );

    // A submit in flight when the socket drops is reported, not forgotten.
    session.request(ClientCommand::Submit {
        yaml: "y".into(),
        filename: None,
        fresh: false,
    });
    let (_, effects) = session.closed(1006, "");
    assert_eq!(effects, []);
    assert!(matches!(
        session.answer(),
        Some((3, SubmitAnswer::Rejected(why))) if why.contains("closed before the master answered")
    ));
    assert!(!session.submitting());
}

#[test]
fn a_download_asks_for_results_and_hands_over_the_reply_untouched() {
    let mut session = Session::new();
    assert_eq!(
        session.download(Download::Csv),
        None,
        "not while disconnected"
    );
    connect(&mut session, None, "read");
    let ask = |session: &mut Session, download| {
        let frame: serde_json::Value =
            serde_json::from_str(&session.download(download).unwrap()).unwrap();
        assert_eq!(frame["type"], "results");
        assert!(frame["job_ids"].is_null(), "every job: {frame}");
        assert_eq!(
            frame["archived"], true,
            "archived ones too, as the CLI: {frame}"
        );
        frame["id"].as_u64().unwrap()
    };

    let id = ask(&mut session, Download::Metaschedule);
    assert!(session.downloading());
    assert_eq!(session.download(Download::Csv), None, "one at a time");
    let text = reply(id, serde_json::json!({"kind": "results", "jobs": []}));
    assert_eq!(
        session.received(&text),
        [Effect::Download {
            download: Download::Metaschedule,
            reply: text.clone()
        }]
    );
    assert!(session.received(&text).is_empty(), "answered once");
    assert!(!session.downloading());

    let id = ask(&mut session, Download::Json);
    let refused =
        serde_json::json!({"type": "error", "id": id, "code": "forbidden", "message": "no"});
    assert_eq!(
        session.received(&refused.to_string()),
        [Effect::Notice {
            text: "download failed: no".into(),
            error: true
        }]
    );

    ask(&mut session, Download::Csv);
    let (_, effects) = session.closed(1006, "");
    assert!(
        matches!(effects.as_slice(), [Effect::Notice { error: true, .. }]),
        "a download in flight when the socket drops is reported: {effects:?}"
    );
}

#[test]
fn garbage_frames_are_ignored() {
    let mut session = Session::new();
    assert!(session.received("not json").is_empty());
    assert!(session.received(r#"{"type":"future_thing"}"#).is_empty());
}

#[test]
fn backoff_doubles_up_to_ten_seconds() {
    let delays: Vec<u64> = (0..8).map(backoff_ms).collect();
    assert_eq!(
        delays,
        [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]
    );
    assert_eq!(backoff_ms(u32::MAX), 10_000);
}

#[test]
fn job_history_and_result_survive_updates() {
    let mut fleet = Fleet::default();
    fleet.apply_snapshot(
        0,
        snapshot(vec![job("a", "a", Millis(1), JobState::Running)], vec![]),
    );
    let mut done = job("a", "a", Millis(1), JobState::Done);
    done.history = vec![
        ProgressPoint {
            trials: 2,
            best_latency_s: 2e-3,
        },
        ProgressPoint {
            trials: 10,
            best_latency_s: 1e-3,
        },
    ];
    done.result = Some(ResultMeta {
        trials: 10,
        wall_time_s: 1.0,
        worker: "w".into(),
        backend: "sim".into(),
        tvm_version: None,
        gflops: Some(3.0),
        extra: serde_json::Value::Null,
        target: None,
    });
    fleet.apply_event(1, job_event(done.clone()));
    assert_eq!(fleet.job("a"), Some(&done));
}

#[test]
fn a_sign_in_link_fragment_gives_its_token() {
    use super::token_from_fragment;
    assert_eq!(
        token_from_fragment("#token=abc123").as_deref(),
        Some("abc123")
    );
    assert_eq!(token_from_fragment("token=abc").as_deref(), Some("abc"));
    assert_eq!(
        token_from_fragment("#x=1&token=a%2Fb%3D&y=2").as_deref(),
        Some("a/b=")
    );
    assert_eq!(token_from_fragment("#token=50%").as_deref(), Some("50%"));
    assert_eq!(token_from_fragment("#token="), None);
    assert_eq!(token_from_fragment("#tokens=abc"), None);
    assert_eq!(token_from_fragment(""), None);
    assert_eq!(token_from_fragment("#jobs"), None);
}

/// The page's path through [`Session::apply`]: one socket's life, a batch
/// of frames, a download while disconnected, a refused token, a sign-in.
#[test]
fn the_reducer_step_drives_a_socket_from_hello_to_a_refused_token() {
    let mut session = Session::with_token(Some("t".into()));
    let first = session.dial();
    let hello = sent(&session.apply(Action::Opened));
    assert_eq!(hello[0]["type"], "hello");
    assert_eq!(hello[0]["token"], "t");
    let id = hello[0]["id"].as_u64().unwrap();
    // The welcome and the snapshot come in one batch: the subscribe goes out.
    let welcome = reply(
        id,
        serde_json::json!({"kind": "welcome", "server_version": "0.1.0", "protocol": 1, "role": "admin"}),
    );
    let effects = session.apply(Action::Frames(vec![
        welcome,
        snapshot_frame(1, vec![job("a", "a", Millis(1), JobState::Queued)]),
    ]));
    assert_eq!(sent(&effects)[0]["type"], "subscribe");
    assert!(session.live());
    assert_eq!(session.fleet.jobs().len(), 1);

    // The connection drops: the page dials again after the backoff, and
    // the table stays (stale) meanwhile.
    let effects = session.apply(Action::Closed {
        code: 1006,
        reason: String::new(),
    });
    assert_eq!(effects, []);
    assert_eq!(session.retry(), Some((1, 500)));
    assert_eq!(
        session.apply(Action::Download(Download::Csv)),
        [Effect::Notice {
            text:
                "download failed: not connected to the master (the files are made from its results)"
                    .into(),
            error: true
        }]
    );
    session.apply(Action::Redial);
    assert_eq!(session.dial(), first + 1);
    assert_eq!(session.retry(), None);
    assert_eq!(session.link(), Link::Connecting { attempt: 1 });
    assert_eq!(
        session.fleet.jobs().len(),
        1,
        "the last state stays on screen"
    );

    // This socket's token is refused: the page forgets it and waits.
    session.apply(Action::Opened);
    let effects = session.apply(Action::Closed {
        code: close_code::UNAUTHORIZED,
        reason: "bad token".into(),
    });
    assert_eq!(effects, [Effect::StoreToken(None)]);
    assert_eq!(session.token(), None);
    assert_eq!(session.retry(), None);
    assert!(matches!(session.link(), Link::NeedsToken { .. }));

    // Signing in again starts a session of its own, on a new socket.
    let effects = session.apply(Action::SignIn("good".into()));
    assert_eq!(effects, [Effect::StoreToken(Some("good".into()))]);
    assert!(session.fleet.jobs().is_empty());
    assert_eq!(session.dial(), first + 2);
    assert_eq!(session.link(), Link::Connecting { attempt: 0 });
    let hello = sent(&session.apply(Action::Opened));
    assert_eq!(hello[0]["token"], "good");
    assert_eq!(session.apply(Action::SignOut), [Effect::StoreToken(None)]);
    assert_eq!(session.token(), None);
}

#[test]
fn a_new_filter_or_search_starts_from_the_first_page_and_a_sort_keeps_it() {
    let mut view = TableView::default();
    view.apply(TableAction::ShowMore);
    view.apply(TableAction::ShowMore);
    assert_eq!(view.limit, 3 * PAGE_ROWS);
    view.apply(TableAction::SortBy(SortKey::Name));
    view.apply(TableAction::SortBy(SortKey::Name));
    assert_eq!(
        view.sort,
        Sort {
            key: SortKey::Name,
            descending: true
        }
    );
    assert_eq!(view.limit, 3 * PAGE_ROWS, "sorting keeps the rows shown");
    view.apply(TableAction::Filter(StateFilter::Queued));
    assert_eq!(view.limit, PAGE_ROWS);
    view.apply(TableAction::ShowMore);
    view.apply(TableAction::Search("mm".into()));
    assert_eq!((view.limit, view.search.as_str()), (PAGE_ROWS, "mm"));
}
