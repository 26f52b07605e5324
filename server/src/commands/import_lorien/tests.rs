use super::*;
use crate::commands::ClientCli;

#[test]
fn arguments_parse() {
    use clap::{FromArgMatches, Subcommand};
    let cmd = ClientCli::augment_subcommands(clap::Command::new("tunefleet"));
    let parse = |args: &[&str]| {
        let matches = cmd.clone().try_get_matches_from(args)?;
        ClientCli::from_arg_matches(&matches)
    };
    match parse(&["tunefleet", "import-lorien", "l.yaml"]).unwrap() {
        ClientCli::ImportLorien(a) => {
            assert_eq!(a.trials, DEFAULT_TRIALS);
            assert!(a.out.is_none());
        }
        other => panic!("{other:?}"),
    }
    match parse(&[
        "tunefleet",
        "import-lorien",
        "l.yaml",
        "--trials",
        "8",
        "--out",
        "o.yaml",
    ])
    .unwrap()
    {
        ClientCli::ImportLorien(a) => {
            assert_eq!(a.trials, 8);
            assert_eq!(a.out, Some(PathBuf::from("o.yaml")));
        }
        other => panic!("{other:?}"),
    }
    for bad in ["0", "100001", "-1", "x"] {
        assert!(
            parse(&["tunefleet", "import-lorien", "l.yaml", "--trials", bad]).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn convert_reports_every_problem() {
    let text = "workload:\n- '!!python/object:lorien.workload.Workload {args: [], target: llvm, task_name: nope}'\n- 'x'\n";
    let err = convert(text, "l.yaml", 64).unwrap_err().to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("l.yaml:2: workload[0]"), "{err}");
    assert!(lines[1].starts_with("l.yaml:3: workload[1]"), "{err}");
}
