//! Lorien workload files through the real `tunefleet` binary: `import-lorien`
//! converts them, `submit` accepts the converted YAML against a real master,
//! and `submit` of the Lorien file itself converts it transparently into the
//! same jobs.

use std::process::{Command, Output};

use tunefleet_tests::*;

fn tunefleet(args: &[&str]) -> Output {
    Command::new(bin("tunefleet"))
        .args(args)
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run tunefleet")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ids(report: &serde_json::Value, key: &str) -> Vec<String> {
    report[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {report}"))
        .iter()
        .map(|v| v.as_str().expect("job id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_lorien_then_submit_and_submit_lorien_directly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lorien = examples_dir().join("lorien/workloads.yaml");
    let lorien = lorien.to_str().expect("utf-8 path");

    // import-lorien prints our YAML on stdout and a note on stderr.
    let out = tunefleet(&["import-lorien", lorien]);
    assert!(out.status.success(), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert!(yaml.starts_with("# Converted from "), "{yaml}");
    assert!(yaml.contains("op: conv2d_nchw"), "{yaml}");
    assert!(
        stderr(&out).contains("converted 3 Lorien workloads from"),
        "{}",
        stderr(&out)
    );
    let converted = dir.path().join("converted.yaml");
    std::fs::write(&converted, &yaml).expect("write converted");

    // --out writes the same text.
    let written = dir.path().join("out.yaml");
    let out = tunefleet(&[
        "import-lorien",
        lorien,
        "--out",
        written.to_str().expect("path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    assert_eq!(std::fs::read_to_string(&written).expect("--out file"), yaml);

    let master = Master::start(dir.path(), &[]);
    let url = master.url();

    // The converted YAML: three new jobs.
    let out = tunefleet(&[
        "submit",
        converted.to_str().expect("path"),
        "--json",
        "--server",
        &url,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let reports: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let new_jobs = ids(&reports[0], "new_jobs");
    assert_eq!(new_jobs.len(), 3, "{reports}");
    assert!(ids(&reports[0], "duplicates").is_empty(), "{reports}");
    assert!(
        !stderr(&out).contains("Lorien"),
        "our own format is not converted: {}",
        stderr(&out)
    );

    // The Lorien file itself: converted on the way, the same three jobs.
    let out = tunefleet(&["submit", lorien, "--json", "--server", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("converted 3 Lorien workloads from"),
        "{}",
        stderr(&out)
    );
    let reports: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert!(ids(&reports[0], "new_jobs").is_empty(), "{reports}");
    let mut duplicates = ids(&reports[0], "duplicates");
    let mut expected = new_jobs.clone();
    duplicates.sort();
    expected.sort();
    assert_eq!(duplicates, expected);

    // The human summary names the original file.
    let out = tunefleet(&["submit", lorien, "--server", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("workloads.yaml: 0 new jobs, 3 duplicates skipped"),
        "{}",
        stdout(&out)
    );

    // The master has exactly those jobs, under the converted names.
    let mut client = master.client().await;
    let jobs = client.results(None).await.expect("results");
    let mut names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "conv2d_1x128x28x28_128x1x1_s1_p0",
            "conv2d_1x256x14x14_48x1x1_s1_p0",
            "conv2d_1x64x56x56_64x3x3_s1_p1",
        ]
    );

    // Another trial budget is another set of jobs.
    let out = tunefleet(&["import-lorien", lorien, "--trials", "8"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("trials: 8"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_lorien_file_is_refused_with_its_line_and_nothing_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = examples_dir().join("lorien/bad-unknown-task.yaml");
    let bad = bad.to_str().expect("utf-8 path");
    let text = std::fs::read_to_string(bad).expect("read example");
    let line = text
        .lines()
        .position(|l| l.starts_with("- ") && l.contains("winograd"))
        .expect("the bad item")
        + 1;

    let out = tunefleet(&["import-lorien", bad]);
    assert!(!out.status.success());
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "bad-unknown-task.yaml:{line}: workload[1]: unknown Lorien task name \
             \"conv2d_nchw_winograd.cuda\""
        )),
        "{err}"
    );

    // --out is not written when the conversion fails.
    let written = dir.path().join("never.yaml");
    let out = tunefleet(&[
        "import-lorien",
        bad,
        "--out",
        written.to_str().expect("path"),
    ]);
    assert!(!out.status.success());
    assert!(!written.exists());

    // submit refuses it too, before anything reaches the master; a good file
    // given first is not submitted either.
    let master = Master::start(dir.path(), &[]);
    let good = examples_dir().join("lorien/workloads.yaml");
    let out = tunefleet(&[
        "submit",
        good.to_str().expect("path"),
        bad,
        "--server",
        &master.url(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown Lorien task name"),
        "{}",
        stderr(&out)
    );
    let mut client = master.client().await;
    let jobs = client.results(None).await.expect("results");
    assert!(jobs.is_empty(), "{jobs:?}");
}
