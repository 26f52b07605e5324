use super::*;

#[test]
fn table_columns_align_by_chars() {
    let header = [("NAME", Align::Left), ("BEST", Align::Right)];
    let rows = vec![
        vec!["a".to_string(), "12.3 µs".to_string()],
        vec!["longer".to_string(), "1.000 s".to_string()],
    ];
    let text = render_table(&header, &rows);
    assert_eq!(text, "NAME       BEST\na       12.3 µs\nlonger  1.000 s\n");
}

#[test]
fn connect_args_debug_hides_the_token() {
    let args = ConnectArgs {
        server: DEFAULT_SERVER.into(),
        token: Some("hunter2".into()),
        ca_cert: None,
    };
    let text = format!("{args:?}");
    assert!(!text.contains("hunter2"));
    assert!(text.contains("redacted"));
}

#[test]
fn exit_codes_come_from_exit_errors() {
    let err: anyhow::Error = Exit::silent(2).into();
    assert_eq!(exit_code(&err), 2);
    assert_eq!(exit_code(&anyhow::anyhow!("boom")), 1);
}

#[test]
fn client_cli_parses_every_subcommand() {
    use clap::{FromArgMatches, Subcommand};
    let cmd = ClientCli::augment_subcommands(clap::Command::new("tunefleet"));
    cmd.clone().debug_assert();
    let parse = |args: &[&str]| {
        let matches = cmd.clone().try_get_matches_from(args).unwrap();
        ClientCli::from_arg_matches(&matches).unwrap()
    };
    match parse(&["tunefleet", "submit", "a.yaml", "b.yaml", "--json"]) {
        ClientCli::Submit(a) => assert_eq!(a.files.len(), 2),
        other => panic!("{other:?}"),
    }
    match parse(&["tunefleet", "results", "--format", "csv", "--job", "x", "y"]) {
        ClientCli::Results(a) => assert_eq!(a.jobs, ["x", "y"]),
        other => panic!("{other:?}"),
    }
    match parse(&["tunefleet", "watch", "--follow"]) {
        ClientCli::Watch(a) => assert!(a.follow),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&["tunefleet", "export", "--format", "csv", "--out", "r.csv"]),
        ClientCli::Export(_)
    ));
    assert!(matches!(
        parse(&["tunefleet", "status", "--json", "--server", "ws://h:1"]),
        ClientCli::Status(_)
    ));
    match parse(&[
        "tunefleet",
        "shutdown",
        "--server",
        "wss://h:1",
        "--ca-cert",
        "ca.pem",
    ]) {
        ClientCli::Shutdown(a) => {
            assert_eq!(a.connect.ca_cert.as_deref(), Some("ca.pem".as_ref()))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_runs_results_say_what_its_compiles_cold_choice_did() {
    use tunefleet_shared::model::ModelState;
    let mut view = tunefleet_shared::testing::model_view("r50", ModelState::Done);
    view.latency_s.tuned = Some(0.0335);
    let table = model::to_table(&view);
    assert!(!table.contains("cold choice"), "{table}");
    view.verification = serde_json::json!({"cold_choice": {
        "top_k": 6, "tasks": 26, "records_timed": 156, "wall_s": 64.2, "changed": 19,
        "kernels_cold_s": {"chosen": 0.0349, "warm_best": 0.0363},
    }});
    let table = model::to_table(&view);
    assert!(
        table.contains("cold choice: the 6 best records of 26 tasks timed cold (156 records, 64 s), 19 tasks changed record; tuned kernels' cold time 34.900 ms (warm-fastest records: 36.300 ms)\n"),
        "{table}"
    );
}

#[test]
fn a_compile_that_applied_the_runs_cold_choice_says_so() {
    let all = serde_json::json!({
        "top_k": 6, "tasks": 26, "reused": 26, "records_timed": 0, "wall_s": 0.4, "changed": 19,
        "kernels_cold_s": {"chosen": 0.0349, "warm_best": 0.0363},
    });
    assert_eq!(
        model::cold_choice_text(&all).as_deref(),
        Some("cold choice: 26 tasks' records as the run's compile job chose them (--cold-choice N times them here), 19 tasks changed record; tuned kernels' cold time 34.900 ms (warm-fastest records: 36.300 ms)\n")
    );
    let some = serde_json::json!({
        "top_k": 6, "tasks": 26, "reused": 25, "records_timed": 6, "wall_s": 3.2, "changed": 19,
        "kernels_cold_s": {"chosen": 0.0349, "warm_best": 0.0363},
    });
    let text = model::cold_choice_text(&some).unwrap_or_default();
    assert!(
        text.contains("25 tasks' records as the run's compile job chose them (--cold-choice N times them here) and the 6 best records of 1 tasks timed cold (6 records, 3 s)"),
        "{text}"
    );
}
