//! The Python example client (`examples/python/tunefleet_client.py`, the
//! `websockets` package) against a real master with sim workers: it submits a
//! file, follows the events until every job is finished, and writes the same
//! CSV as `tunefleet results --format csv`.
//!
//! Python comes from `$TUNEFLEET_PYTHON`, else `.venv/bin/python` (made by
//! `scripts/setup-tvm.sh`, which installs `websockets`), else `python3`.
//! Without `websockets` the test is skipped with a note, except in CI
//! (`CI=true`), where it fails.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tunefleet_tests::*;

fn python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("TUNEFLEET_PYTHON").map(PathBuf::from),
        Some(repo_root().join(".venv/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    for python in candidates.into_iter().flatten() {
        let ok = Command::new(&python)
            .args(["-c", "import websockets"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(python);
        }
    }
    let message = "no Python with the `websockets` package (run scripts/setup-tvm.sh, or \
                   pip install websockets and set TUNEFLEET_PYTHON)";
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
        panic!("{message}");
    }
    eprintln!("SKIPPED: {message}");
    None
}

fn client_script() -> PathBuf {
    repo_root().join("examples/python/tunefleet_client.py")
}

#[test]
fn python_helpers_match_the_rust_side() {
    let Some(python) = python() else { return };
    // The sequence rule and the number format, checked offline.
    // Run beside the script: `python -c` imports from the current directory.
    let check = r#"
from tunefleet_client import Mirror, plain_number, csv_field, op_and_shape
m = Mirror()
job = lambda i, s: {"job_id": i, "state": s}
assert m.apply({"type": "snapshot", "seq": 5, "snapshot": {"jobs": [job("a", "queued")], "workers": []}})
assert m.apply({"type": "event", "seq": 6, "event": {"kind": "job_updated", "job": job("a", "running")}})
assert m.apply({"type": "event", "seq": 6, "event": {"kind": "job_updated", "job": job("a", "running")}})
assert m.apply({"type": "event", "seq": 3, "event": {"kind": "worker_left", "session": "w1", "reason": ""}})
assert not m.apply({"type": "event", "seq": 9, "event": {"kind": "job_updated", "job": job("b", "done")}})
assert m.jobs["b"]["state"] == "done" and m.last_seq == 9
assert m.apply({"type": "snapshot", "seq": 12, "snapshot": {"jobs": [], "workers": []}})
assert m.jobs == {}
for value, text in [(2.5e-05, "0.000025"), (1e-07, "0.0000001"), (100.0, "100"),
                    (0.1 + 0.2, "0.30000000000000004"), (0.000412, "0.000412")]:
    assert plain_number(value) == text, (value, plain_number(value))
assert csv_field('mm, "big"') == '"mm, ""big"""'
assert csv_field(" pad") == '" pad"'
script = "@T.prim_func\ndef main(a: T.handle):\n    pass\n"
assert op_and_shape({"op": "tvmscript", "tvmscript": script}) == ("tvmscript", "tvmscript main (3 lines)")
print("ok")
"#;
    let out = Command::new(&python)
        .args(["-c", check])
        .current_dir(repo_root().join("examples/python"))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_submits_follows_and_writes_the_same_csv() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let _w1 = Worker::start(&master, "py-a", 0.2, &[]);
    let _w2 = Worker::start(&master, "py-b", 0.2, &[]);
    let file = examples_dir().join("workloads.yaml");
    let csv_path = dir.path().join("results.csv");

    // A wrong token: a clear error, exit status 1.
    let out = Command::new(&python)
        .arg(client_script())
        .args(["--server", &master.url(), "--token", "wrong", "submit"])
        .arg(&file)
        .output()
        .expect("run the python client");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unauthorized: wrong token"), "{err}");

    let run = {
        let (python, url, file, csv) =
            (python.clone(), master.url(), file.clone(), csv_path.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(python)
                .arg(client_script())
                .args(["--server", &url, "submit"])
                .arg(file)
                .arg("--out")
                .arg(csv)
                .args(["--timeout", "120"])
                .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
                .output()
                .expect("run the python client")
        })
    };
    let out = tokio::time::timeout(Duration::from_secs(150), run)
        .await
        .expect("the python client finishes")
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client failed:\n{err}");
    assert!(err.contains("new jobs"), "{err}");
    assert!(err.contains("done: "), "{err}");

    let csv = std::fs::read_to_string(&csv_path).expect("results.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("job_id,name,op,shape,dtype,state,attempts,worker,best_latency_s,gflops,trials_done,trials_total")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 4, "{csv}");
    for row in &rows {
        assert_eq!(row[5], "done", "{csv}");
        let latency: f64 = row[8].parse().expect("a latency");
        assert!(latency > 0.0, "{csv}");
        assert!(row[9].parse::<f64>().expect("gflops") > 0.0, "{csv}");
    }

    // Byte for byte what the Rust CLI writes for the same jobs.
    let out = Command::new(bin("tunefleet"))
        .args(["results", "--format", "csv", "--server", &master.url()])
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("tunefleet results");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), csv);
}
