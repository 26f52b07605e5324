use super::*;

#[test]
fn summary_line_pluralises() {
    let report = SubmitReport {
        new_jobs: vec!["a".into(), "b".into(), "c".into()],
        duplicates: vec!["d".into()],
        ..Default::default()
    };
    assert_eq!(
        summary_line("more.yaml", &report),
        "more.yaml: 3 new jobs, 1 duplicate skipped"
    );
    let one = SubmitReport {
        new_jobs: vec!["a".into()],
        duplicates: vec![],
        ..Default::default()
    };
    assert_eq!(
        summary_line("x.yaml", &one),
        "x.yaml: 1 new job, 0 duplicates skipped"
    );
    let mixed = SubmitReport {
        new_jobs: vec!["a".into(), "b".into(), "c".into()],
        cache_hits: vec!["a".into()],
        warm_started: vec!["b".into()],
        seeded: vec!["c".into()],
        ..Default::default()
    };
    assert_eq!(
            summary_line("m.yaml", &mixed),
            "m.yaml: 3 new jobs, 0 duplicates skipped, 1 answered from the tuning cache, 1 warm-started, 1 seeded from imported records"
        );
}

#[test]
fn json_report_is_flat() {
    let r = FileReport {
        file: "a.yaml".into(),
        report: SubmitReport {
            new_jobs: vec!["x".into()],
            duplicates: vec![],
            ..Default::default()
        },
    };
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::json!({"file": "a.yaml", "new_jobs": ["x"], "duplicates": [],
                "cache_hits": [], "warm_started": [], "seeded": []})
    );
}

#[test]
fn workload_rejections_are_printed_verbatim() {
    let connect = ConnectArgs {
        server: "ws://h:1".into(),
        token: Some("t".into()),
        ca_cert: None,
    };
    let err = ClientError::Server {
        code: tunefleet_shared::protocol::ErrorCode::InvalidWorkload,
        message: "more.yaml:3:5: unknown field `tile`".into(),
    };
    assert_eq!(
        format!("{:#}", rejection(&connect, "more.yaml", err)),
        "more.yaml:3:5: unknown field `tile`"
    );
}

#[test]
fn a_connection_lost_before_the_answer_says_the_outcome_is_unknown() {
    let connect = ConnectArgs {
        server: "ws://h:1".into(),
        token: Some("t".into()),
        ca_cert: None,
    };
    let lost = rejection(
        &connect,
        "more.yaml",
        ClientError::Transport("connection reset by peer".into()),
    );
    let text = format!("{lost:#}");
    assert!(
        text.contains("more.yaml")
            && text.contains("unknown")
            && text.contains("resubmitting is safe"),
        "{text}"
    );
    let refused = rejection(
        &connect,
        "more.yaml",
        ClientError::Server {
            code: tunefleet_shared::protocol::ErrorCode::StorageUnavailable,
            message: "storage_unavailable: the state database /d/fleet.db: database or disk is full; nothing of this request was applied".into(),
        },
    );
    let text = format!("{refused:#}");
    assert!(
        text.contains("cannot submit more.yaml") && text.contains("storage_unavailable"),
        "{text}"
    );
    assert!(
        !text.contains("unknown"),
        "a refusal is a definite answer: {text}"
    );
}
