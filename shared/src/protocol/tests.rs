use super::*;
use crate::protocol::Millis;
use crate::target::Target;

#[test]
fn client_request_is_flat_json_with_id_and_type() {
    let req = ClientRequest {
        id: 7,
        command: ClientCommand::Cancel {
            job_id: "abc".into(),
        },
    };
    let json = serde_json::to_value(&req).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"id": 7, "type": "cancel", "job_id": "abc"})
    );
    let back: ClientRequest = serde_json::from_str(r#"{"type":"status","id":3}"#).unwrap();
    assert_eq!(back.id, 3);
    assert_eq!(back.command, ClientCommand::Status);
}

#[test]
fn worker_register_carries_protocol_version() {
    let json = serde_json::json!({
        "type": "register", "protocol": 1, "worker_id": "w", "name": "n",
        "target": {"kind": "llvm", "num-cores": 2}, "backend": "sim"
    });
    let msg: WorkerMessage = serde_json::from_value(json).unwrap();
    match msg {
        WorkerMessage::Register(hello) => {
            assert_eq!(hello.protocol, 1);
            assert_eq!(hello.target.kind(), "llvm");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn registered_carries_the_heartbeat_timeout_and_reads_without_it() {
    let from_older: MasterMessage = serde_json::from_value(serde_json::json!({
        "type": "registered", "token": "t", "session": "w1", "matching_jobs": 0
    }))
    .unwrap();
    assert!(matches!(
        from_older,
        MasterMessage::Registered {
            heartbeat_timeout_ms: None,
            ..
        }
    ));
    let now = MasterMessage::Registered {
        token: "t".into(),
        session: "w1".into(),
        matching_jobs: 0,
        heartbeat_timeout_ms: Some(15_000),
    };
    let json = serde_json::to_value(&now).unwrap();
    assert_eq!(json["heartbeat_timeout_ms"], 15_000);
    assert_eq!(serde_json::from_value::<MasterMessage>(json).unwrap(), now);
}

#[test]
fn debug_output_never_shows_secrets() {
    let hello = WorkerHello {
        protocol: 1,
        worker_id: "w".into(),
        name: "n".into(),
        target: Target::of_kind("llvm"),
        backend: "sim".into(),
        tvm_version: None,
        secret: Some("join-secret-1".into()),
        slots: None,
        device: None,
    };
    let texts = [
        format!("{hello:?}"),
        format!("{:?}", WorkerMessage::Register(hello.clone())),
        format!(
            "{:?}",
            WorkerMessage::RequestJob {
                token: "sess-token-2".into()
            }
        ),
        format!(
            "{:?}",
            WorkerMessage::JobFailed {
                token: "sess-token-2".into(),
                job_id: "j".into(),
                lease: Lease(1),
                error: "e".into()
            }
        ),
        format!(
            "{:?}",
            MasterMessage::Registered {
                token: "sess-token-2".into(),
                session: "w1".into(),
                matching_jobs: 0,
                heartbeat_timeout_ms: None
            }
        ),
        format!(
            "{:?}",
            ClientRequest {
                id: 1,
                command: ClientCommand::Hello {
                    protocol: 1,
                    token: Some("admin-token-3".into()),
                    client: None
                }
            }
        ),
    ];
    for text in texts {
        assert!(text.contains("<redacted>"), "{text}");
        for secret in ["join-secret-1", "sess-token-2", "admin-token-3"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
    let submit = ClientCommand::Submit {
        yaml: "x".repeat(1000),
        filename: None,
        fresh: false,
    };
    assert!(format!("{submit:?}").contains("<1000 bytes>"));
}

#[test]
fn shutdown_is_an_admin_command_with_a_reply() {
    let req: ClientRequest = serde_json::from_str(r#"{"id":9,"type":"shutdown"}"#).unwrap();
    assert_eq!(req.command, ClientCommand::Shutdown);
    assert!(req.command.needs_admin());
    assert_eq!(req.command.name(), "shutdown");
    let reply = ServerMessage::Reply {
        id: 9,
        body: ReplyBody::ShuttingDown,
    };
    assert_eq!(
        serde_json::to_value(&reply).unwrap(),
        serde_json::json!({"type": "reply", "id": 9, "body": {"kind": "shutting_down"}})
    );
    assert_eq!(
        serde_json::to_value(ErrorCode::RateLimited).unwrap(),
        serde_json::json!("rate_limited")
    );
}

#[test]
fn unknown_message_type_is_an_error_not_a_panic() {
    assert!(serde_json::from_str::<WorkerMessage>(r#"{"type":"steal_jobs"}"#).is_err());
    assert!(serde_json::from_str::<ClientRequest>(r#"{"type":"status"}"#).is_err());
    assert!(serde_json::from_str::<ClientRequest>("\u{0}garbage").is_err());
}

/// A job with every field that may change set, as after a retry and a done.
fn a_busy_job() -> JobView {
    let mut view = crate::testing::done_and_queued_jobs().remove(0);
    view.attempts = 2;
    view.history = vec![ProgressPoint {
        trials: 8,
        best_latency_s: 3e-5,
    }];
    view.errors = vec![JobError {
        attempt: 1,
        worker: Some("gone".into()),
        at: Millis(5),
        message: "connection lost".into(),
    }];
    view.result = Some(ResultMeta {
        trials: 16,
        wall_time_s: 1.5,
        worker: "gpu-1".into(),
        backend: "sim".into(),
        tvm_version: None,
        gflops: Some(3.0),
        extra: serde_json::Value::Null,
        target: None,
    });
    view.updated_at = Millis(9);
    view.started_at = Some(Millis(6));
    view.finished_at = Some(Millis(9));
    view.cached_from = Some("earlier".into());
    view.actions = vec![JobAction {
        action: "retry".into(),
        by: "admin".into(),
        at: Millis(4),
    }];
    view
}

#[test]
fn a_job_change_is_the_view_without_name_workload_and_creation_time() {
    let view = a_busy_job();
    let change = serde_json::to_value(JobChangeOf::new(&view)).unwrap();
    let mut whole = serde_json::to_value(&view).unwrap();
    let whole = whole.as_object_mut().unwrap();
    for immutable in ["name", "workload", "created_at"] {
        assert!(whole.remove(immutable).is_some(), "{immutable}");
    }
    assert_eq!(
        change,
        serde_json::Value::Object(whole.clone()),
        "every other field of the view, as the view writes it"
    );
    // The borrowed writer and the owned type agree, both ways.
    let read: JobChange = serde_json::from_value(change.clone()).unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap(), change);
}

#[test]
fn a_job_change_applied_to_an_older_copy_gives_the_new_view() {
    let new = a_busy_job();
    let mut old = crate::testing::job(&new.job_id, JobState::Queued);
    old.name = new.name.clone();
    old.workload = new.workload.clone();
    old.created_at = new.created_at;
    assert_ne!(old, new);
    crate::testing::job_change(&new).apply_to(&mut old);
    assert_eq!(old, new);

    let event: FleetEvent = serde_json::from_str(&format!(
        r#"{{"kind":"job_changed","change":{}}}"#,
        serde_json::to_string(&JobChangeOf::new(&new)).unwrap()
    ))
    .unwrap();
    assert_eq!(
        event,
        FleetEvent::JobChanged {
            change: Box::new(crate::testing::job_change(&new))
        }
    );
}

#[test]
fn subscribe_asks_for_deltas_only_when_told() {
    let plain: ClientRequest = serde_json::from_str(r#"{"id":2,"type":"subscribe"}"#).unwrap();
    assert_eq!(plain.command, ClientCommand::Subscribe { deltas: false });
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        serde_json::json!({"id": 2, "type": "subscribe"}),
        "written as before when off"
    );
    let deltas: ClientRequest =
        serde_json::from_str(r#"{"id":2,"type":"subscribe","deltas":true}"#).unwrap();
    assert_eq!(deltas.command, ClientCommand::Subscribe { deltas: true });
}
