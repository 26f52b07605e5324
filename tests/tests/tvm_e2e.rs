//! Real TVM tuning through the fleet: a master and one `tvm` worker tune two
//! small workloads with MetaSchedule; the worker verifies each tuned kernel
//! against the untuned one and times it; the results are exported as a
//! MetaSchedule database that TVM itself then applies (in Python), and the
//! kernel it builds from it must beat the untuned one.
//!
//! Needs the venv from `scripts/setup-tvm.sh`; runs with `--features tvm`.

/// CI must never skip the real-TVM tests silently.
#[test]
fn the_tvm_suite_is_enabled_in_ci() {
    if std::env::var_os("CI").is_some() && !cfg!(feature = "tvm") {
        panic!("CI must run these tests: cargo test --features tunefleet-tests/tvm");
    }
}

#[cfg(feature = "tvm")]
mod real_tvm {
    use std::process::Command;
    use std::time::Duration;

    use tunefleet_server::client::Client;
    use tunefleet_shared::protocol::JobState;
    use tunefleet_tests::*;

    // Written line by line: an indented multi-line literal would shift the YAML.
    const WORKLOADS: &str = concat!(
        "target: {kind: llvm, num-cores: 2}\n",
        "trials: 8\n",
        "workloads:\n",
        "  - name: mm64\n",
        "    op: matmul\n",
        "    shape: {m: 64, n: 64, k: 64}\n",
        "  - name: conv-small\n",
        "    op: conv2d_nchw\n",
        "    shape: {batch: 1, in_channels: 16, height: 14, width: 14, out_channels: 16,\n",
        "            kernel: [3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1]}\n",
    );

    fn python() -> String {
        repo_root().join(".venv/bin/python").display().to_string()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tune_verify_export_and_apply_with_tvm() {
        let dir = tempfile::tempdir().expect("tempdir");
        let master = Master::start(dir.path(), &[]);
        let mut client = master.client().await;
        let report = client
            .submit(WORKLOADS, Some("tvm-e2e.yaml"))
            .await
            .expect("submit");
        assert_eq!(report.new_jobs.len(), 2);
        let _worker = Worker::spawn(
            &master.url(),
            dir.path(),
            "tvm-worker",
            &["--backend", "tvm", "--python", &python()],
        );

        let jobs = eventually(Duration::from_secs(300), "both jobs tuned", || async {
            let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
                .await
                .ok()?;
            let jobs = c.results(None).await.ok()?;
            if let Some(failed) = jobs.iter().find(|j| j.state == JobState::Failed) {
                panic!("{} failed: {:?}", failed.name, failed.errors);
            }
            jobs.iter()
                .all(|j| j.state == JobState::Done)
                .then_some(jobs)
        })
        .await;
        for job in &jobs {
            let meta = job.result.as_ref().expect("result metadata");
            let extra = &meta.extra;
            let best = job.best_latency_s.expect("latency");
            let untuned = extra["untuned_latency_s"]
                .as_f64()
                .expect("untuned latency measured");
            println!(
                "{}: tuned {:.1} µs, untuned {:.1} µs ({:.1}x), {} trials in {:.0} s, TVM {}",
                job.name,
                best * 1e6,
                untuned * 1e6,
                untuned / best,
                meta.trials,
                meta.wall_time_s,
                meta.tvm_version.as_deref().unwrap_or("?")
            );
            assert_eq!(meta.backend, "tvm");
            assert!(
                meta.tvm_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("0.27")),
                "{meta:?}"
            );
            assert_eq!(
                extra["verified"], true,
                "kernel checked against the untuned reference"
            );
            // Within the noise of one timing on a shared 2-core host: a
            // 64x64 matmul gains little in 8 trials, and the other test of
            // this file tunes at the same time (it timed 82 µs against 75
            // once). The convolution's gain is checked below.
            assert!(
                best > 0.0 && best < 1.5 * untuned,
                "{}: tuned {best} s is much slower than untuned {untuned} s",
                job.name
            );
            assert!(!job.records.is_empty() && job.records.len() <= 5);
            assert!(meta.trials > 0 && meta.trials <= 8);
        }

        // What tuning is for: the convolution, 2.9x on a quiet host, is faster.
        let conv = jobs
            .iter()
            .find(|j| j.name == "conv-small")
            .expect("conv-small job");
        let conv_untuned = conv.result.as_ref().expect("result").extra["untuned_latency_s"]
            .as_f64()
            .expect("untuned latency");
        assert!(
            conv.best_latency_s.is_some_and(|b| b < conv_untuned),
            "conv-small: tuned {:?} s is not faster than untuned {conv_untuned} s",
            conv.best_latency_s
        );

        // Export as a MetaSchedule database and let TVM apply it.
        let db_dir = dir.path().join("msdb");
        let out = Command::new(bin("tunefleet"))
            .args([
                "export",
                "--format",
                "metaschedule",
                "--server",
                &master.url(),
                "--out",
            ])
            .arg(&db_dir)
            .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
            .output()
            .expect("run export");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut apply = Command::new(python());
        apply
            .arg(repo_root().join("python/tests/apply_exported.py"))
            .arg(&db_dir);
        for job in &jobs {
            let path = dir.path().join(format!("{}.json", job.name));
            std::fs::write(
                &path,
                serde_json::to_string(&job.workload).expect("workload json"),
            )
            .expect("write");
            apply.arg(path);
        }
        let out = apply.output().expect("run apply_exported.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            out.status.success(),
            "TVM applies the exported database and the result is faster:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.lines().filter(|l| l.contains("speedup")).count(), 2);

        // Another farm imports the export: its first job of mm64 starts its
        // search from these records (seeded), and the result is still
        // verified and timed on its own worker.
        let farm_b = dir.path().join("farm-b");
        std::fs::create_dir_all(&farm_b).expect("mkdir");
        let master_b = Master::start(&farm_b, &[]);
        let db = db_dir.display().to_string();
        let out = master_b.cli(&["import", "--format", "metaschedule", "--json", &db]);
        assert!(
            out.status.success(),
            "import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(report["workloads_new"], 2, "{report}");
        assert_eq!(report["keys_new"], 2, "{report}");
        let exported_records: usize = jobs.iter().map(|j| j.records.len()).sum();
        assert_eq!(report["records_new"], exported_records, "{report}");
        let again = master_b.cli(&["import", "--format", "metaschedule", "--json", &db]);
        let again: serde_json::Value = serde_json::from_slice(&again.stdout).expect("json");
        assert_eq!(
            (
                again["records_new"].as_u64(),
                again["records_known"].as_u64()
            ),
            (Some(0), Some(exported_records as u64)),
            "an import twice adds nothing"
        );

        let mm_only: String = WORKLOADS
            .lines()
            .take(6)
            .map(|l| format!("{l}\n"))
            .collect();
        let file = farm_b.join("mm.yaml");
        std::fs::write(&file, mm_only).expect("write");
        let out = master_b.cli(&["submit", "--json", &file.display().to_string()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let submitted: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let seeded = &submitted[0]["seeded"];
        assert_eq!(seeded.as_array().map(Vec::len), Some(1), "{submitted}");
        let _worker_b = Worker::spawn(
            &master_b.url(),
            &farm_b,
            "tvm-worker-b",
            &["--backend", "tvm", "--python", &python()],
        );
        let job = eventually(Duration::from_secs(300), "the seeded job tuned", || async {
            let mut c = Client::connect(&master_b.url(), Some(ADMIN_TOKEN))
                .await
                .ok()?;
            let jobs = c.results(None).await.ok()?;
            let job = jobs.into_iter().next()?;
            assert_ne!(job.state, JobState::Failed, "{:?}", job.errors);
            (job.state == JobState::Done).then_some(job)
        })
        .await;
        let meta = job.result.as_ref().expect("result");
        let mm = jobs.iter().find(|j| j.name == "mm64").expect("mm64");
        println!(
            "seeded mm64: {} imported records, {:.1} µs (first farm {:.1} µs)",
            meta.extra["warm_start_records"],
            job.best_latency_s.unwrap_or(f64::NAN) * 1e6,
            mm.best_latency_s.unwrap_or(f64::NAN) * 1e6
        );
        assert_eq!(
            meta.extra["warm_start_records"].as_u64(),
            Some(mm.records.len() as u64),
            "the driver loaded the imported records"
        );
        assert!(
            meta.extra["warm_start_ignored"].is_null(),
            "{}",
            meta.extra["warm_start_ignored"]
        );
        assert_eq!(meta.extra["verified"], true);
        assert_eq!(
            job.trials_total, 8,
            "imported records are not trials done here"
        );
        assert!(meta.trials > 0 && meta.trials <= 8, "{meta:?}");
    }

    /// A process group killed (whole) on drop: the RPC server forks per session.
    struct Group(std::process::Child);

    impl Drop for Group {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .status();
            let _ = self.0.wait();
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measurement_goes_through_an_rpc_tracker_when_asked() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let rpc_log = dir.path().join("rpc.log");
        let log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&rpc_log)
                .expect("log")
        };
        let _tracker = Group(
            Command::new(python())
                .args([
                    "-m",
                    "tvm.exec.rpc_tracker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                ])
                .args(["--port-end", &(port + 1).to_string()])
                .stdout(log())
                .stderr(log())
                .process_group(0)
                .spawn()
                .expect("start rpc_tracker"),
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let _server = Group(
            Command::new(python())
                .args([
                    "-m",
                    "tvm.exec.rpc_server",
                    "--tracker",
                    &format!("127.0.0.1:{port}"),
                ])
                .args(["--key", "fleet-test", "--host", "127.0.0.1"])
                .stdout(log())
                .stderr(log())
                .process_group(0)
                .spawn()
                .expect("start rpc_server"),
        );
        tokio::time::sleep(Duration::from_secs(4)).await;

        let master = Master::start(dir.path(), &[]);
        let yaml = "target: {kind: llvm, num-cores: 2}\ntrials: 4\nworkloads:\n  - {name: mm32-rpc, op: matmul, shape: {m: 32, n: 32, k: 32}}\n";
        master
            .client()
            .await
            .submit(yaml, None)
            .await
            .expect("submit");
        let tracker = format!("127.0.0.1:{port}");
        let _worker = Worker::spawn(
            &master.url(),
            dir.path(),
            "rpc-worker",
            &[
                "--backend",
                "tvm",
                "--python",
                &python(),
                "--rpc-tracker",
                &tracker,
                "--rpc-key",
                "fleet-test",
            ],
        );
        let jobs = eventually(Duration::from_secs(240), "the RPC job tuned", || async {
            let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
                .await
                .ok()?;
            let jobs = c.results(None).await.ok()?;
            if let Some(failed) = jobs.iter().find(|j| j.state == JobState::Failed) {
                panic!("{} failed: {:?}", failed.name, failed.errors);
            }
            jobs.iter()
                .all(|j| j.state == JobState::Done)
                .then_some(jobs)
        })
        .await;
        let trials = jobs[0].result.as_ref().expect("result").trials as usize;
        let served = std::fs::read_to_string(&rpc_log)
            .unwrap_or_default()
            .matches("load_module")
            .count();
        println!("rpc_server measured {served} candidate modules for {trials} trials");
        assert!(
            trials > 0 && served >= trials,
            "every candidate was measured by the RPC server ({served} < {trials})"
        );
    }
}
