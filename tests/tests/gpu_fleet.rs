//! GPUs on the farm, without a GPU: real master and worker processes, the
//! worker finding "GPUs" through an `nvidia-smi` that prints what a real
//! one printed (an H200 host's output, recorded), and the sim backend doing
//! the tuning. What a user with a rack checks: a CUDA slot per GPU with its
//! `arch`, CPU and GPU workers on one master each taking only jobs of their
//! kind, `status` naming the devices and the jobs nobody can take, and the
//! worker's refusals. The end-to-end runs on a real GPU are
//! scripts/gpu-check.sh's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tunefleet_tests::*;

/// `nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap,driver_version
/// --format=csv,noheader,nounits` on a host with two H200s.
const TWO_H200: &str = "\
0, GPU-0000aaaa-0000-0000-0000-000000000000, NVIDIA H200, 143771, 9.0, 580.159.03
1, GPU-1111bbbb-0000-0000-0000-000000000000, NVIDIA H200, 143771, 9.0, 580.159.03
";

/// A directory holding an `nvidia-smi` that answers the worker's query with
/// `output` (and fails on any other, as a real one would not be asked).
fn fake_smi(dir: &Path, output: &str) -> PathBuf {
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in *--query-gpu=index,uuid,name,memory.total,compute_cap,driver_version*) ;; \
         *) echo \"unexpected: $*\" >&2; exit 2;; esac\ncat <<'EOF'\n{output}EOF\n"
    );
    let path = bin.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    bin
}

/// A worker process whose PATH starts with `smi_dir`; killed when dropped.
struct GpuWorker(Child);

impl GpuWorker {
    fn spawn(master: &Master, dir: &Path, smi_dir: &Path, name: &str, args: &[&str]) -> GpuWorker {
        GpuWorker(
            worker_command(&master.url(), dir, smi_dir, name, args)
                .spawn()
                .expect("spawn worker"),
        )
    }
}

impl Drop for GpuWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker_command(url: &str, dir: &Path, smi_dir: &Path, name: &str, args: &[&str]) -> Command {
    let path = format!(
        "{}:{}",
        smi_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut command = Command::new(bin("tunefleet-worker"));
    command
        .args([
            "--server",
            url,
            "--name",
            name,
            "--backoff-initial-ms",
            "50",
            "--backoff-max-ms",
            "500",
        ])
        .args(args)
        .env("PATH", path)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    command
}

/// Runs a worker that must refuse to start; its error output.
fn refused(dir: &Path, smi_dir: &Path, args: &[&str]) -> String {
    let name = format!(
        "refused-{}",
        args.join("_").replace(['{', '}', '"', ':', ',', '/'], "")
    );
    let mut child = worker_command("ws://127.0.0.1:1", dir, smi_dir, &name, args)
        .spawn()
        .expect("spawn worker");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker with {args:?} did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    assert!(!status.success(), "the worker with {args:?} started: {log}");
    log
}

fn status_json(master: &Master) -> Value {
    let out = master.cli(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

fn yaml(target: &str, prefix: &str, n: usize) -> String {
    let mut text = format!("target: {target}\ntrials: 4\nworkloads:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - name: {prefix}{i}\n    op: matmul\n    shape: {{m: {}, n: 64, k: 64}}\n    dtype: float16\n",
            64 + i
        ));
    }
    text
}

async fn all_done(master: &Master, n: usize) -> Vec<tunefleet_shared::protocol::JobView> {
    eventually(Duration::from_secs(60), "every job done", || async {
        let jobs = master.client().await.results(None).await.ok()?;
        (jobs.len() == n
            && jobs
                .iter()
                .all(|j| j.state == tunefleet_shared::protocol::JobState::Done))
        .then_some(jobs)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_host_serves_a_cuda_slot_per_gpu_and_each_job_goes_to_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let smi = fake_smi(dir.path(), TWO_H200);
    let _gpus = GpuWorker::spawn(
        &master,
        dir.path(),
        &smi,
        "rack1",
        &["--backend", "sim", "--sim-seconds", "0.05"],
    );
    let _cpu = Worker::start(&master, "cpu1", 0.05, &[]);

    let status = eventually(
        Duration::from_secs(30),
        "three slots registered",
        || async {
            let s = status_json(&master);
            (s["workers"] == 3).then_some(s)
        },
    )
    .await;
    let devices = status["devices"].as_array().expect("status lists devices");
    let gpus = devices
        .iter()
        .find(|d| d["target_kind"] == "cuda")
        .expect("a cuda group");
    assert_eq!(gpus["workers"], 2, "{status}");
    assert_eq!(gpus["arch"], "sm_90");
    assert_eq!(gpus["device"]["name"], "NVIDIA H200");
    assert_eq!(gpus["device"]["memory_mib"], 143_771);
    assert!(
        devices
            .iter()
            .any(|d| d["target_kind"] == "llvm" && d["device"]["kind"] == "cpu"),
        "{status}"
    );
    let text = String::from_utf8_lossy(&master.cli(&["status"]).stdout).into_owned();
    assert!(
        text.contains("2 × NVIDIA H200, 140 GiB (cuda sm_90)"),
        "{text}"
    );

    let mut client = master.client().await;
    let (_, snapshot) = client.subscribe().await.unwrap();
    let mut names: Vec<(String, Option<u32>)> = snapshot
        .workers
        .iter()
        .filter(|w| w.target.kind() == "cuda")
        .map(|w| (w.name.clone(), w.device.as_ref().and_then(|d| d.index)))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("rack1-gpu0".to_string(), Some(0)),
            ("rack1-gpu1".to_string(), Some(1))
        ]
    );

    client
        .submit(yaml("{kind: cuda}", "g", 4), Some("gpu.yaml"))
        .await
        .unwrap();
    client
        .submit(yaml("{kind: llvm}", "c", 3), Some("cpu.yaml"))
        .await
        .unwrap();
    for job in all_done(&master, 7).await {
        let meta = job.result.as_ref().unwrap();
        let target = meta.target.as_ref().unwrap();
        if job.name.starts_with('g') {
            assert!(
                meta.worker.starts_with("rack1-gpu"),
                "{} ran on {}",
                job.name,
                meta.worker
            );
            // The job left the GPU open; the worker completed it with its own.
            assert_eq!(target.attrs()["arch"], "sm_90");
            assert_eq!(target.attrs()["max_shared_memory_per_block"], 49152);
        } else {
            assert_eq!(meta.worker, "cpu1", "{} ran on {}", job.name, meta.worker);
            assert_eq!(target.kind(), "llvm");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cuda_job_with_no_gpu_worker_waits_and_status_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let _cpu = Worker::start(&master, "cpu1", 0.05, &[]);
    let mut client = master.client().await;
    client
        .submit(yaml("{kind: cuda, arch: sm_90}", "g", 2), Some("gpu.yaml"))
        .await
        .unwrap();
    let status = eventually(
        Duration::from_secs(20),
        "the CPU worker registered",
        || async {
            let s = status_json(&master);
            (s["workers"] == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(status["jobs"]["queued"], 2, "{status}");
    assert_eq!(status["unserved"][0]["target"]["kind"], "cuda", "{status}");
    assert_eq!(status["unserved"][0]["jobs"], 2);
    let text = String::from_utf8_lossy(&master.cli(&["status"]).stdout).into_owned();
    assert!(
        text.contains(r#"waiting: 2 jobs for {"arch":"sm_90","kind":"cuda"}: no connected worker serves that target"#),
        "{text}"
    );
    // A GPU comes: the jobs run there, and nothing waits any more.
    let smi = fake_smi(dir.path(), TWO_H200);
    let _gpu = GpuWorker::spawn(
        &master,
        dir.path(),
        &smi,
        "gpu",
        &["--backend", "sim", "--sim-seconds", "0.05", "--gpus", "1"],
    );
    for job in all_done(&master, 2).await {
        assert_eq!(job.result.unwrap().worker, "gpu");
    }
    assert!(status_json(&master).get("unserved").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn gpus_picks_the_devices_and_the_worker_refuses_what_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let smi = fake_smi(dir.path(), TWO_H200);
    let _one = GpuWorker::spawn(
        &master,
        dir.path(),
        &smi,
        "one",
        &["--backend", "sim", "--gpus", "1", "--cpu-slot"],
    );
    let snapshot = eventually(
        Duration::from_secs(20),
        "GPU 1 and the CPU registered",
        || async {
            let (_, s) = master.client().await.subscribe().await.ok()?;
            (s.workers.len() == 2).then_some(s)
        },
    )
    .await;
    let gpu = snapshot
        .workers
        .iter()
        .find(|w| w.target.kind() == "cuda")
        .expect("a GPU slot");
    let device = gpu.device.as_ref().unwrap();
    assert_eq!((gpu.name.as_str(), device.index), ("one-gpu1", Some(1)));
    assert_eq!(
        device.uuid.as_deref(),
        Some("GPU-1111bbbb-0000-0000-0000-000000000000")
    );
    assert!(snapshot
        .workers
        .iter()
        .any(|w| w.name == "one" && w.target.kind() == "llvm"));

    for (args, says) in [
        (
            vec!["--backend", "sim", "--gpus", "7"],
            "--gpus: GPU 7 is not on this host (nvidia-smi lists 0, 1)",
        ),
        (
            vec![
                "--backend",
                "sim",
                "--target",
                r#"{"kind":"cuda","arch":"sm_80"}"#,
            ],
            "--target asks for arch sm_80, but GPU 0 (NVIDIA H200) is sm_90",
        ),
        (
            vec![
                "--backend",
                "sim",
                "--target",
                r#"{"kind":"llvm"}"#,
                "--gpus",
                "0",
            ],
            "--gpus picks GPUs for",
        ),
        (
            vec!["--backend", "sim", "--gpus", "0,x"],
            "expected `all`, `none` or GPU indices",
        ),
    ] {
        let log = refused(dir.path(), &smi, &args);
        assert!(log.contains(says), "{args:?}: {log}");
    }
    let broken = fake_smi(&dir.path().join("broken"), "0, GPU-x, NVIDIA H200\n");
    let log = refused(dir.path(), &broken, &["--backend", "sim", "--gpus", "0"]);
    assert!(
        log.contains("cannot list this host's GPUs: nvidia-smi line 1"),
        "{log}"
    );
}

/// A TVM worker that finds GPUs its Python cannot use says what to install
/// (here: the driver's libcuda.so.1, which this machine lacks; the CUDA
/// wheels scripts/test.sh installs are there).
#[cfg(feature = "tvm")]
#[test]
fn a_tvm_worker_without_a_usable_cuda_says_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_smi(dir.path(), TWO_H200);
    let log = refused(dir.path(), &smi, &["--backend", "tvm", "--target", "auto"]);
    assert!(
        log.contains("this host has NVIDIA GPUs, but TVM cannot use them"),
        "{log}"
    );
    assert!(
        log.contains("libcuda.so.1") || log.contains("setup-tvm.sh --cuda"),
        "{log}"
    );
    assert!(log.contains("--gpus none"), "{log}");
    // Where a real nvidia-smi answers (a GPU machine), there are GPUs.
    let real_smi = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success());
    if !real_smi {
        let none = tempfile::tempdir().unwrap();
        let log = refused(
            dir.path(),
            none.path(),
            &["--backend", "tvm", "--target", r#"{"kind":"cuda"}"#],
        );
        assert!(log.contains("no NVIDIA GPU to run it on"), "{log}");
    }
}

/// The venv's `light_squeezenet.onnx` (the onnx wheel ships it), if any.
fn squeezenet() -> Option<PathBuf> {
    let lib = repo_root().join(".venv/lib");
    std::fs::read_dir(lib).ok()?.flatten().find_map(|entry| {
        let path = entry
            .path()
            .join("site-packages/onnx/backend/test/data/light/light_squeezenet.onnx");
        path.is_file().then_some(path)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_model_run_takes_its_weights_as_arguments_and_cpu_levers_are_refused() {
    let Some(model) = squeezenet() else {
        eprintln!("skipped: no .venv with the onnx wheel's light models (scripts/setup-tvm.sh)");
        return;
    };
    let model = model.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let target = r#"{"kind":"cuda"}"#;
    let out = master.cli(&[
        "submit", &model, "--name", "sq", "--trials", "32", "--target", target,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = master.cli(&["results", "--model", "sq", "--format", "json"]);
    let view: Value = serde_json::from_slice(&out.stdout).expect("results --model is JSON");
    assert_eq!(view["target"]["kind"], "cuda", "{view}");
    assert_eq!(view["prepack"], false, "{view}");
    assert_eq!(view["layout"], "NCHW", "{view}");
    for flags in [vec!["--prepack"], vec!["--layout", "NHWC"]] {
        let mut args = vec!["submit", &model, "--name", "sq2", "--target", target];
        args.extend(flags.iter().copied());
        let out = master.cli(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("CPU levers"),
            "{flags:?}: {stderr}"
        );
    }
}
