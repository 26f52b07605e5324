use super::driver_output::{parse_json_line, Tail};
use super::*;
use crate::backend::verify::fixtures;
use crate::backend::ProgressUpdate;
use crate::backend::{progress_channel, ProgressWatch};
use crate::testutil::job;
use tunefleet_shared::workload::Workload;

// ---- helpers ---------------------------------------------------------

/// A matmul workload from the wire form, with its own trial budget.
fn matmul(name: &str, n: u32, trials: u32) -> Workload {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "op": "matmul",
        "shape": {"m": n, "n": n, "k": n},
        "dtype": "float32",
        "target": {"kind": "llvm", "num-cores": 2},
        "trials": trials,
    }))
    .unwrap()
}

/// A backend on one of the tests' fake driver scripts.
fn config(driver: &Path, work_root: &Path) -> TvmConfig {
    config_with(DriverCommand::Script(driver.to_path_buf()), work_root)
}

/// A backend on the real driver: `python -m tunefleet._driver` of the
/// venv's installed package (scripts/test.sh installs it before the tests).
fn real_config(work_root: &Path) -> TvmConfig {
    config_with(DriverCommand::default(), work_root)
}

fn config_with(driver: DriverCommand, work_root: &Path) -> TvmConfig {
    TvmConfig {
        python: Some(fixtures::python()),
        driver,
        work_root: Some(work_root.to_path_buf()),
        verify: VerifyOptions {
            repeat: 3,
            min_repeat_ms: 10,
            ..VerifyOptions::default()
        },
        ..TvmConfig::default()
    }
}

/// Writes a fake driver that behaves as `mode` says; `libs` are the
/// fixture libraries it reports in a result.
fn fake_driver(dir: &Path, mode: &str, fixture_dir: &Path, runtime: &Path) -> PathBuf {
    let fix = serde_json::json!({
        "dir": fixture_dir,
        "runtime": runtime,
    });
    let script = format!(
        "MODE = {mode:?}\nFIX = {fix}\n{FAKE_DRIVER}",
        fix = serde_json::to_string(&fix.to_string()).unwrap()
    );
    let path = dir.join(format!("fake_driver_{mode}.py"));
    std::fs::write(&path, script).unwrap();
    path
}

const FAKE_DRIVER: &str = r#"
# Speaks the long-lived driver's protocol: one request a line on stdin.
import json, os, subprocess, sys, time
FIX = json.loads(FIX)
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

def serve(job, work):
    for i in range(60):
        print(f"fake driver log line {i}", file=sys.stderr)
    sys.stderr.flush()
    emit({"event": "started", "tvm_version": "fake-0", "trials_total": job["workload"]["trials"]})
    if MODE == "hang" or (MODE == "mixed" and job["workload"]["name"].startswith("hang")):
        for _ in range(2):
            subprocess.Popen(["sleep", "1000"])
        subprocess.Popen([sys.executable, "-c",
            "import subprocess, time; subprocess.Popen(['sleep', '1000']); time.sleep(1000)"])
        time.sleep(0.5)
        emit({"event": "progress", "trials_done": 1, "trials_total": 10, "best_latency_s": None})
        time.sleep(1000)
    if MODE == "error":
        print("Traceback: something broke", file=sys.stderr)
        sys.stderr.flush()
        emit({"event": "error", "message": "no valid measurement in 8 trials"})
        return
    if MODE == "crash":
        print("Segmentation fault (pretend)", file=sys.stderr)
        sys.exit(3)
    expected = {"nbest": 3, "seed": 0, "num_trials_per_iter": 8, "max_workers": 2, "rpc": None}
    for key, value in expected.items():
        if job.get(key) != value:
            emit({"event": "error", "message": f"JOB.json {key} = {job.get(key)!r}, expected {value!r}"})
            return
    print("not json, should be tolerated")
    emit({"event": "progress", "trials_done": 4, "trials_total": 8, "best_latency_s": 2e-5})
    sys.stdout.write('{"event":"progress","trials_done":8,"trials_total":8,"best_latency_s":NaN}\n')
    sys.stdout.flush()
    if MODE == "straggler":
        # Keeps our stdout open after we exit; the worker must not wait for it.
        subprocess.Popen(["sleep", "1000"])
    tuned = "float32-wrong.so" if MODE == "wrong" else "float32-tuned.so"
    n = job["workload"]["shape"]["m"]
    records = [{"latency_s": 2e-5 * (1 + i), "record": [0, [[], []], [2e-5 * (1 + i)]]} for i in range(3)]
    emit({
        "event": "result", "best_latency_s": 2e-5, "trials": 8, "wall_time_s": 1.0,
        "tvm_version": "fake-0", "flops": 2.0 * n ** 3, "records": records,
        "workload": ["0x1234", "b64"],
        "tuned_lib": os.path.join(FIX["dir"], tuned),
        "reference_lib": os.path.join(FIX["dir"], "float32-reference.so"),
        "entry": "main",
        "args": [{"shape": [n, n], "dtype": "float32"}] * 3,
        "outputs": [2],
        "tvm_runtime_lib": FIX["runtime"],
    })
    if MODE == "straggler":
        sys.exit(0)

for line in sys.stdin:
    req = json.loads(line)
    serve(json.load(open(req["job"])), req["work_dir"])
"#;

/// Collects progress until the watch ends.
async fn collect(mut watch: ProgressWatch) -> Vec<ProgressUpdate> {
    let mut seen = Vec::new();
    while let Some(update) = watch.next().await {
        seen.push(update);
    }
    seen
}

/// (pid, state) of every process in process group `pgid`.
fn group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may contain spaces.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i32>() == Ok(pgid) {
            members.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    members
}

/// The pid of the driver whose command line mentions `needle`.
fn driver_pid(needle: &Path) -> Option<i32> {
    let needle = needle.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<i32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains("--work-root") && cmdline.contains(&needle)).then_some(pid)
        })
}

/// Waits until no live (non-zombie) process is left in the group.
async fn assert_group_dies(pgid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live: Vec<_> = group_members(pgid)
            .into_iter()
            .filter(|(_, state)| *state != 'Z')
            .collect();
        if live.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of group {pgid} survived: {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Drives `tune` until a progress update with at least one trial done.
async fn until_first_trial(tune: &mut TuneFuture<'_>, watch: &mut ProgressWatch) {
    loop {
        tokio::select! {
            result = &mut *tune => panic!("the job ended before any progress: {result:?}"),
            update = watch.next() => {
                if update.expect("progress").trials_done >= 1 {
                    return;
                }
            }
        }
    }
}

// ---- fake driver -----------------------------------------------------

#[tokio::test]
async fn result_is_verified_and_timed_here() {
    let fix = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(fix.path(), 64, &["float32"]);
    let root = tempfile::tempdir().unwrap();
    let driver = fake_driver(root.path(), "result", fix.path(), &runtime);
    let work_root = root.path().join("work");
    let backend = TvmBackend::new(config(&driver, &work_root)).unwrap();
    assert_eq!(backend.name(), "tvm");
    assert!(
        backend.tvm_version().unwrap().starts_with("0."),
        "{backend:?}"
    );

    let (sink, watch) = progress_channel();
    let seen = tokio::spawn(collect(watch));
    let spec = job(matmul("mm64", 64, 8), 3);
    let result = backend.tune(spec, sink).await.unwrap();
    let seen = seen.await.unwrap();

    assert_eq!(result.backend, "tvm");
    assert_eq!(result.tvm_version.as_deref(), Some("fake-0"));
    assert_eq!(result.trials, 8);
    assert_eq!(result.records.len(), 3);
    // Measured here, not the driver's 2e-5.
    assert_ne!(result.best_latency_s, 2e-5);
    assert!(result.best_latency_s > 0.0 && result.best_latency_s < 0.1);
    let gflops = result.gflops.unwrap();
    assert!((gflops - 2.0 * 64f64.powi(3) / result.best_latency_s / 1e9).abs() < 1e-6);
    let extra = &result.extra;
    assert_eq!(extra["verified"], true);
    assert_eq!(extra["workload"], serde_json::json!(["0x1234", "b64"]));
    assert_eq!(extra["metaschedule_best_latency_s"], 2e-5);
    let untuned = extra["untuned_latency_s"].as_f64().unwrap();
    let speedup = extra["speedup_vs_untuned"].as_f64().unwrap();
    assert!((speedup - untuned / result.best_latency_s).abs() < 1e-9);
    assert!(extra["max_abs_error"].as_f64().unwrap() < 1e-3);
    assert!(result.wall_time_s > 0.0);
    eprintln!(
        "fake-driver job: tuned {:.3e} s, untuned {untuned:.3e} s, speedup {speedup:.2}",
        result.best_latency_s
    );

    // The sink keeps only the latest update, so intermediate ones may be
    // coalesced; the last is the driver's last line, whose NaN latency
    // reads as none.
    let last = seen.last().unwrap();
    assert_eq!((last.trials_done, last.trials_total), (8, 8), "{seen:?}");
    assert_eq!(last.best_latency_s, None);

    // The job's directory is gone.
    assert_eq!(std::fs::read_dir(&work_root).unwrap().count(), 0);
}

#[tokio::test]
async fn a_straggler_holding_stdout_does_not_hang_the_job() {
    let fix = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(fix.path(), 16, &["float32"]);
    let root = tempfile::tempdir().unwrap();
    let driver = fake_driver(root.path(), "straggler", fix.path(), &runtime);
    let mut cfg = config(&driver, &root.path().join("work"));
    cfg.keep_work_dirs = true;
    let backend = TvmBackend::new(cfg).unwrap();
    let (sink, _watch) = progress_channel();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        backend.tune(job(matmul("mm16", 16, 8), 3), sink),
    )
    .await
    .expect("the job hung on the straggler")
    .unwrap();
    assert_eq!(result.extra["verified"], true);
    // Kept: JOB.json is still there, and names the workload.
    let dirs: Vec<_> = std::fs::read_dir(root.path().join("work"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(dirs.len(), 1);
    let job_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dirs[0].path().join("JOB.json")).unwrap()).unwrap();
    assert_eq!(job_json["workload"]["name"], "mm16");
    assert_eq!(job_json["workload"]["op"], "matmul");
}

#[tokio::test]
async fn a_wrong_kernel_fails_the_job() {
    let fix = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(fix.path(), 32, &["float32"]);
    let root = tempfile::tempdir().unwrap();
    let driver = fake_driver(root.path(), "wrong", fix.path(), &runtime);
    let backend = TvmBackend::new(config(&driver, &root.path().join("w"))).unwrap();
    let (sink, _watch) = progress_channel();
    let err = backend
        .tune(job(matmul("mm32", 32, 8), 3), sink)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("verification of the tuned kernel failed"),
        "{text}"
    );
    assert!(text.contains("different result"), "{text}");
}

#[tokio::test]
async fn driver_errors_carry_the_message_and_the_stderr_tail() {
    let root = tempfile::tempdir().unwrap();
    let nowhere = root.path().join("none");
    for (mode, expected) in [
        ("error", "no valid measurement in 8 trials"),
        ("crash", "exit status: 3"),
    ] {
        let driver = fake_driver(root.path(), mode, &nowhere, &nowhere);
        let backend = TvmBackend::new(config(&driver, &root.path().join("w"))).unwrap();
        let (sink, _watch) = progress_channel();
        let err = backend
            .tune(job(matmul("mm8", 8, 8), 3), sink)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("tuning driver failed: "), "{text}");
        assert!(text.contains(expected), "{mode}: {text}");
        assert!(
            text.contains("--- driver stderr (last 50 lines) ---"),
            "{text}"
        );
        // Only the tail: the first log lines are gone, the last are there.
        assert!(!text.contains("log line 5\n"), "{text}");
        assert!(text.contains("log line 59"), "{text}");
        if mode == "crash" {
            assert!(text.contains("Segmentation fault (pretend)"), "{text}");
        }
    }
}

#[tokio::test]
async fn cancelling_kills_the_whole_process_group() {
    let root = tempfile::tempdir().unwrap();
    let nowhere = root.path().join("none");
    let driver = fake_driver(root.path(), "hang", &nowhere, &nowhere);
    let work_root = root.path().join("work");
    let backend = TvmBackend::new(config(&driver, &work_root)).unwrap();
    let (sink, mut watch) = progress_channel();
    let mut tune = backend.tune(job(matmul("hang", 8, 10), 3), sink);
    until_first_trial(&mut tune, &mut watch).await;

    let pgid = driver_pid(&work_root).expect("the driver is running");
    let before = group_members(pgid);
    // driver, 2 sleeps, a python child and its sleep
    assert!(before.len() >= 5, "{before:?}");
    drop(tune);
    assert_group_dies(pgid).await;
    // The work directory goes too.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_dir(&work_root).unwrap().count() > 0 {
        assert!(
            Instant::now() < deadline,
            "the work directory was left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_driver_serves_job_after_job_and_a_cancel_replaces_it() {
    let fix = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(fix.path(), 16, &["float32"]);
    let root = tempfile::tempdir().unwrap();
    let driver = fake_driver(root.path(), "mixed", fix.path(), &runtime);
    let work_root = root.path().join("work");
    let backend = TvmBackend::new(config(&driver, &work_root)).unwrap();
    let run = |name: &str| {
        let (sink, _watch) = progress_channel();
        backend.tune(job(matmul(name, 16, 8), 3), sink)
    };
    run("a16").await.expect("first job");
    let first = driver_pid(&work_root).expect("the driver stays up between jobs");
    run("b16").await.expect("second job");
    assert_eq!(
        driver_pid(&work_root),
        Some(first),
        "the second job ran on the same driver"
    );

    // A job cancelled mid-way takes the driver and its children with it...
    let (sink, mut watch) = progress_channel();
    let mut tune = backend.tune(job(matmul("hang16", 16, 10), 3), sink);
    until_first_trial(&mut tune, &mut watch).await;
    assert_eq!(driver_pid(&work_root), Some(first));
    assert!(group_members(first).len() >= 5);
    drop(tune);
    assert_group_dies(first).await;

    // ...and the next job starts a new one, which serves the job after it.
    let result = run("c16").await.expect("the job after a cancel");
    assert_eq!(result.extra["verified"], true);
    let second = driver_pid(&work_root).expect("a new driver");
    assert_ne!(second, first);
    run("d16").await.expect("fourth job");
    assert_eq!(driver_pid(&work_root), Some(second));
}

// ---- set-up ----------------------------------------------------------

#[test]
fn setup_errors_are_clear() {
    let root = tempfile::tempdir().unwrap();
    let driver = root.path().join("driver.py");
    std::fs::write(&driver, "").unwrap();

    let missing = TvmConfig {
        python: Some(root.path().join("no-python")),
        driver: DriverCommand::Script(driver.clone()),
        ..TvmConfig::default()
    };
    let err = TvmBackend::new(missing).unwrap_err();
    assert!(matches!(err, TvmSetupError::Python { .. }), "{err:?}");
    assert!(err.to_string().contains("pass --python"), "{err}");

    // An interpreter without TVM: a shell script pretending to be one.
    let fake_python = root.path().join("python");
    std::fs::write(
        &fake_python,
        "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n\
             echo \"ModuleNotFoundError: No module named 'tvm'\" >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let no_tvm = TvmConfig {
        python: Some(fake_python.clone()),
        driver: DriverCommand::Script(driver.clone()),
        ..TvmConfig::default()
    };
    let text = TvmBackend::new(no_tvm).unwrap_err().to_string();
    assert!(
        text.starts_with(&format!(
            "TVM is not importable by {}: ModuleNotFoundError",
            fake_python.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("run scripts/setup-tvm.sh or pass --python"),
        "{text}"
    );

    let no_driver = TvmConfig {
        python: Some(fixtures::python()),
        driver: DriverCommand::Script(root.path().join("nope.py")),
        ..TvmConfig::default()
    };
    let err = TvmBackend::new(no_driver).unwrap_err();
    assert!(matches!(err, TvmSetupError::DriverMissing(_)), "{err:?}");

    let zero = TvmConfig {
        trials_per_round: 0,
        ..TvmConfig::default()
    };
    assert!(matches!(
        TvmBackend::new(zero),
        Err(TvmSetupError::Invalid(_))
    ));
}

#[test]
fn rpc_tracker_parsing() {
    let t = RpcTracker::parse("127.0.0.1:9190", "rasp").unwrap();
    assert_eq!(
        (t.host.as_str(), t.port, t.key.as_str()),
        ("127.0.0.1", 9190, "rasp")
    );
    assert_eq!(t.session_timeout_s, 60);
    assert_eq!(RpcTracker::parse("[::1]:9190", "k").unwrap().host, "::1");
    assert!(RpcTracker::parse("host", "k").is_err());
    assert!(RpcTracker::parse(":9190", "k").is_err());
    assert!(RpcTracker::parse("host:99999", "k").is_err());
    assert!(RpcTracker::parse("host:9190", "").is_err());
}

#[test]
fn driver_lines_and_reduction_lengths() {
    assert_eq!(parse_json_line("hello"), None);
    let v = parse_json_line(r#"{"a":NaN,"b":Infinity,"c":-Infinity,"d":1}"#).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"a": null, "b": null, "c": null, "d": 1})
    );

    assert_eq!(reduction_len(&matmul("m", 64, 1)), Some(64));
    let conv: Workload = serde_json::from_value(serde_json::json!({
        "name": "c", "op": "conv2d_nchw",
        "shape": {"batch": 1, "in_channels": 16, "height": 8, "width": 8,
                  "out_channels": 8, "kernel": [3, 3], "stride": [1, 1],
                  "padding": [1, 1], "dilation": [1, 1]},
        "dtype": "float32", "target": {"kind": "llvm"}, "trials": 1,
    }))
    .unwrap();
    assert_eq!(reduction_len(&conv), Some(144));

    let mut tail = Tail::new(2);
    for line in ["a", "b", "c"] {
        tail.push(line.to_string());
    }
    assert_eq!(tail.text(), "b\nc");
}

// ---- the real driver -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_driver_tunes_and_verifies_a_small_matmul() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = real_config(root.path());
    cfg.trials_per_round = 4;
    cfg.verify = VerifyOptions::default();
    let backend = TvmBackend::new(cfg).unwrap();
    let (sink, watch) = progress_channel();
    let seen = tokio::spawn(collect(watch));
    let started = Instant::now();
    let result = backend
        .tune(job(matmul("mm64", 64, 8), 5), sink)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seen = seen.await.unwrap();
    eprintln!(
        "real driver, matmul 64^3, 8 trials, {:.1} s: tuned {:.3e} s ({:.2} GFLOP/s), \
             untuned {:.3e} s, MetaSchedule {:.3e} s, speedup {:.2}, max abs err {:e}",
        started.elapsed().as_secs_f64(),
        result.best_latency_s,
        result.gflops.unwrap_or(0.0),
        result.extra["untuned_latency_s"].as_f64().unwrap(),
        result.extra["metaschedule_best_latency_s"]
            .as_f64()
            .unwrap(),
        result.extra["speedup_vs_untuned"].as_f64().unwrap(),
        result.extra["max_abs_error"].as_f64().unwrap(),
    );
    assert!(seen.iter().any(|u| u.trials_done > 0), "{seen:?}");
    assert!(!result.records.is_empty());
    assert!(result.records.len() <= 5);
    assert!(result.best_latency_s > 0.0);
    assert_eq!(result.extra["verified"], true);
    assert!(result.extra["workload"].is_array(), "{}", result.extra);
    assert_eq!(result.tvm_version, backend.tvm_version());
    assert!(result.trials >= 1);
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_driver_without_a_compiler_says_so() {
    let root = tempfile::tempdir().unwrap();
    // The venv's python, with a PATH on which no compiler is found.
    let real_python = fixtures::python();
    let venv_bin = real_python.parent().unwrap().to_path_buf();
    let wrapper = root.path().join("python-without-cc");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nunset CC CXX\nPATH='{}' exec '{}' \"$@\"\n",
            venv_bin.display(),
            real_python.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let work_root = root.path().join("work");
    let mut cfg = real_config(&work_root);
    cfg.python = Some(wrapper);
    let backend = TvmBackend::new(cfg).unwrap();
    let (sink, _watch) = progress_channel();
    let err = backend
        .tune(job(matmul("nocc", 16, 8), 3), sink)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no C/C++ compiler on this worker"), "{err}");
    assert!(err.contains("install g++"), "{err}");
    assert_eq!(
        std::fs::read_dir(&work_root).unwrap().count(),
        0,
        "nothing left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_work_disk_is_named() {
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&disk)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    }
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", disk.join("filler").display()))
        .output();
    let backend = TvmBackend::new(real_config(&disk)).unwrap();
    let (sink, _watch) = progress_channel();
    let err = backend
        .tune(job(matmul("full", 16, 8), 3), sink)
        .await
        .unwrap_err()
        .to_string();
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&disk)
        .status();
    assert!(
        err.contains("cannot write the job's work directory"),
        "{err}"
    );
    assert!(err.contains("the disk is full"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_driver_cancel_leaves_no_orphans() {
    let root = tempfile::tempdir().unwrap();
    let backend = TvmBackend::new(real_config(root.path())).unwrap();
    let (sink, mut watch) = progress_channel();
    let mut tune = backend.tune(job(matmul("mm64c", 64, 64), 5), sink);
    until_first_trial(&mut tune, &mut watch).await;
    let pgid = driver_pid(root.path()).expect("the driver is running");
    let before = group_members(pgid);
    eprintln!("driver group {pgid} before cancel: {before:?}");
    assert!(!before.is_empty());
    drop(tune);
    assert_group_dies(pgid).await;
}

// ---- the driver and the workload format ------------------------------

/// One workload per op of the format (`shared::workload::OPS`), small.
const EVERY_OP: &str = "target: {kind: llvm}
trials: 8
workloads:
  - {name: a, op: matmul, shape: {m: 8, n: 4, k: 2}}
  - {name: b, op: batch_matmul, shape: {batch: 2, m: 8, n: 4, k: 3}}
  - {name: c, op: dense, shape: {batch: 2, in_features: 16, out_features: 8}}
  - {name: d, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, height: 9, width: 7, out_channels: 4,
     kernel: [3, 2], stride: [2, 1], padding: [1, 0], dilation: [1, 2]}}
  - {name: e, op: conv2d_nhwc, shape: {batch: 2, in_channels: 4, height: 8, width: 8, out_channels: 6,
     kernel: [3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1]}}
  - {name: f, op: depthwise_conv2d_nchw, shape: {batch: 1, channels: 4, height: 8, width: 6, multiplier: 2,
     kernel: [3, 3], stride: [2, 2], padding: [1, 1], dilation: [1, 1]}}
  - name: g
    tvmscript: |
      @T.prim_func
      def main(a: T.Buffer((4, 4), \"float32\"), b: T.Buffer((4, 4), \"float32\")):
          for i, j in T.grid(4, 4):
              with T.sblock(\"b\"):
                  vi, vj = T.axis.remap(\"SS\", [i, j])
                  b[vi, vj] = a[vi, vj] * T.float32(2)
";

/// The driver's op list is the format's, and every op it builds has the
/// operands (in element counts) the format says it has: the Rust side
/// parses, checks and counts FLOPs of workloads, the Python side builds
/// them, and this is where the two meet.
#[test]
fn driver_builds_every_op_of_the_format() {
    let workloads =
        tunefleet_shared::workload::parse_workload_file(EVERY_OP, "every-op.yaml").unwrap();
    let names: Vec<&str> = workloads.iter().map(Workload::op_name).collect();
    assert_eq!(
        names,
        tunefleet_shared::workload::OPS,
        "one sample per op, in order"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workloads.json");
    std::fs::write(&path, serde_json::to_vec(&workloads).unwrap()).unwrap();
    let script = "import json, sys
from tunefleet._driver.workloads import OPS, build_workload
wls = json.load(open(sys.argv[1]))
built = [build_workload(w) for w in wls]
print(json.dumps({'ops': list(OPS), 'elements': [[a['shape'] for a in b.args] for b in built],
                  'outputs': [b.outputs for b in built]}))";
    let out = std::process::Command::new(fixtures::python())
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["ops"],
        serde_json::json!(tunefleet_shared::workload::OPS)
    );
    for (k, w) in workloads.iter().enumerate() {
        let shapes = seen["elements"][k].as_array().unwrap();
        let counts: Vec<u128> = shapes
            .iter()
            .map(|s| {
                s.as_array()
                    .unwrap()
                    .iter()
                    .map(|d| u128::from(d.as_u64().unwrap()))
                    .product()
            })
            .collect();
        match w.op.tensor_elements() {
            Some(want) => {
                let want: Vec<u128> = want.iter().map(|(_, n)| *n).collect();
                assert_eq!(counts, want, "{}: the driver's operands", w.op_name());
                assert_eq!(seen["outputs"][k], serde_json::json!([want.len() - 1]));
            }
            None => assert_eq!(
                seen["outputs"][k],
                serde_json::json!([1]),
                "tvmscript writes b"
            ),
        }
    }
}

#[test]
fn tvm_driver_flag_takes_a_module_or_a_script() {
    assert_eq!(
        DriverCommand::parse("tunefleet._driver"),
        DriverCommand::Module("tunefleet._driver".into())
    );
    assert_eq!(
        DriverCommand::parse("my_driver.py"),
        DriverCommand::Script("my_driver.py".into())
    );
    assert_eq!(
        DriverCommand::parse("/opt/drivers/serve"),
        DriverCommand::Script("/opt/drivers/serve".into())
    );
    assert_eq!(DriverCommand::default().args(), ["-m", DRIVER_MODULE]);
}

/// An interpreter without the package is refused at start-up, with what to install.
#[test]
fn a_python_without_the_package_is_named_at_start_up() {
    let root = tempfile::tempdir().unwrap();
    let missing = DriverCommand::Module("tunefleet._no_such_driver".into());
    let err = TvmBackend::new(config_with(missing, root.path())).unwrap_err();
    assert!(
        matches!(err, TvmSetupError::DriverNotInstalled { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("tunefleet._no_such_driver"), "{text}");
    assert!(text.contains("pip install ./python"), "{text}");
}

/// A compile stage's result is reported only verified and timed; the library
/// it wrote travels inside it, and a pre-packed run's (none written) does not
/// need one.
#[test]
fn a_compile_result_is_reported_verified_timed_and_with_its_library() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("model.so");
    std::fs::write(&lib, b"\x7fELF library bytes").unwrap();
    let result = |verified: bool, tuned: serde_json::Value, library: serde_json::Value| {
        let value = serde_json::json!({
            "verified": verified,
            "latency_s": {"tuned": tuned, "onnxruntime": 0.004},
            "library": library,
        });
        value.as_object().unwrap().clone()
    };
    let path = serde_json::json!(lib.to_str().unwrap());

    let mut ok = result(true, serde_json::json!(0.003), path.clone());
    assert_eq!(take_compiled_model(&mut ok, false).unwrap(), 0.003);
    assert!(ok.get("library").is_none(), "the path stays on the worker");
    let carried = base64::decode(ok["library_b64"].as_str().unwrap()).unwrap();
    assert_eq!(carried, b"\x7fELF library bytes");

    let mut prepacked = result(true, serde_json::json!(0.003), serde_json::Value::Null);
    assert_eq!(take_compiled_model(&mut prepacked, true).unwrap(), 0.003);
    assert!(prepacked.get("library_b64").is_none());

    let refused = [
        (
            result(false, serde_json::json!(0.003), path.clone()),
            "not verified",
        ),
        (
            result(true, serde_json::json!(0.0), path.clone()),
            "no tuned latency",
        ),
        (
            result(true, serde_json::Value::Null, path),
            "no tuned latency",
        ),
        (
            result(true, serde_json::json!(0.003), serde_json::Value::Null),
            "no `library` path",
        ),
    ];
    for (mut object, why) in refused {
        let err = take_compiled_model(&mut object, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains(why), "{err} should say {why}");
    }
}
