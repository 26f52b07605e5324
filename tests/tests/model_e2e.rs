//! Model in, faster model out: `light_squeezenet.onnx` (shipped inside the
//! `onnx` wheel) tuned by the fleet with a small budget on a real TVM worker
//! whose target is detected from its host; the compiled model is verified
//! against onnxruntime and must beat untuned TVM; the run's database and
//! compiled library download, and the library runs with the README's snippet.
//!
//! Bad model files are refused by the CLI and by the master, which keeps
//! serving (no TVM needed for those).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tunefleet_tests::*;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The venv's `onnx/backend/test/data/light` directory, if the venv has onnx.
fn light_models() -> Option<PathBuf> {
    let lib = repo_root().join(".venv/lib");
    for entry in std::fs::read_dir(lib).ok()?.flatten() {
        let dir = entry
            .path()
            .join("site-packages/onnx/backend/test/data/light");
        if dir.is_dir() {
            return Some(dir);
        }
    }
    None
}

/// A minimal ONNX model: one Relu, input `x` of shape [N, 4] (N dynamic).
fn dynamic_relu_model(path: &Path) {
    fn field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
        out.push(((number << 3) | 2) as u8);
        let mut len = payload.len();
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(payload);
    }
    fn varint(out: &mut Vec<u8>, number: u32, value: u8) {
        out.push((number << 3) as u8);
        out.push(value);
    }
    let value_info = |name: &str, first: Option<&str>| {
        let mut dims = Vec::new();
        let mut d0 = Vec::new();
        match first {
            Some(p) => field(&mut d0, 2, p.as_bytes()),
            None => varint(&mut d0, 1, 4),
        }
        field(&mut dims, 1, &d0);
        let mut d1 = Vec::new();
        varint(&mut d1, 1, 4);
        field(&mut dims, 1, &d1);
        let mut tensor = Vec::new();
        varint(&mut tensor, 1, 1); // float
        field(&mut tensor, 2, &dims);
        let mut ty = Vec::new();
        field(&mut ty, 1, &tensor);
        let mut vi = Vec::new();
        field(&mut vi, 1, name.as_bytes());
        field(&mut vi, 2, &ty);
        vi
    };
    let mut node = Vec::new();
    field(&mut node, 1, b"x");
    field(&mut node, 2, b"y");
    field(&mut node, 4, b"Relu");
    let mut graph = Vec::new();
    field(&mut graph, 1, &node);
    field(&mut graph, 2, b"g");
    field(&mut graph, 11, &value_info("x", Some("N")));
    field(&mut graph, 12, &value_info("y", Some("N")));
    let mut opset = Vec::new();
    varint(&mut opset, 2, 13);
    let mut model = Vec::new();
    varint(&mut model, 1, 8);
    field(&mut model, 8, &opset);
    field(&mut model, 7, &graph);
    std::fs::write(path, model).expect("write model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_model_files_are_refused_and_the_master_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);

    let not_onnx = dir.path().join("workloads.onnx");
    std::fs::copy(examples_dir().join("workloads.yaml"), &not_onnx).expect("copy");
    let out = master.cli(&["submit", not_onnx.to_str().unwrap(), "--name", "x"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("workloads.onnx") && err.contains("not an ONNX model"),
        "{err}"
    );

    let dynamic = dir.path().join("dyn.onnx");
    dynamic_relu_model(&dynamic);
    let model = dynamic.to_str().unwrap();
    let out = master.cli(&["submit", model, "--name", "dyn"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("input `x` has a dynamic dimension") && err.contains("--input-shape"),
        "{err}"
    );
    // The same graph with an operator TVM cannot import.
    let fancy = dir.path().join("fancy.onnx");
    let bytes = std::fs::read(&dynamic).unwrap();
    let at = bytes.windows(4).position(|w| w == b"Relu").unwrap();
    let mut renamed = bytes.clone();
    renamed[at..at + 4].copy_from_slice(b"Rely");
    std::fs::write(&fancy, renamed).unwrap();
    let out = master.cli(&["submit", fancy.to_str().unwrap(), "--input-shape", "x=1,4"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("unsupported ONNX operator(s): Rely"), "{err}");

    let out = master.cli(&["submit", model, "--input-shape", "y=1,4"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a model input"),
        "{}",
        text(&out.stderr)
    );

    // A script that skips the CLI's checks gets the master's.
    let mut client = master.client().await;
    let reply = client
        .request(tunefleet_shared::protocol::ClientCommand::SubmitModel {
            model: Box::new(tunefleet_shared::model::ModelSubmission {
                name: "raw".into(),
                source: tunefleet_shared::model::ModelSource {
                    onnx_b64: tunefleet_shared::model::base64::encode(b"target: {kind: llvm}\n"),
                    input_shapes: Default::default(),
                    seed: 0,
                    prepack: false,
                    layout: Default::default(),
                    auto_layout: false,
                    recipe: None,
                },
                trials: Some(10),
                trials_per_round: None,
                target: None,
                tuner: Default::default(),
                extracted: None,
            }),
        })
        .await;
    let err = reply.expect_err("the master refuses it").to_string();
    assert!(err.contains("not an ONNX model"), "{err}");

    // A rule set no one knows, named by the field, with the ones there are.
    let out = master.cli(&[
        "submit",
        model,
        "--input-shape",
        "x=1,4",
        "--rules",
        "fastest",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("tuner.rules")
            && err.contains(
                "unknown rule set `fastest` (known: default, wide, blocked, union, per-task)"
            ),
        "{err}"
    );

    // With the shape given, the run is accepted (with the rule set chosen
    // per task); a sim worker cannot extract, so it fails with the
    // worker's reason, and the master goes on.
    let out = master.cli(&[
        "submit",
        model,
        "--name",
        "dyn",
        "--input-shape",
        "x=1,4",
        "--trials",
        "4",
        "--rules",
        "per-task",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let _sim = Worker::start(&master, "sim", 0.0, &["--max-jobs", "3"]);
    let view = eventually(Duration::from_secs(30), "the run to fail", || async {
        let out = master.cli(&["results", "--model", "dyn", "--format", "json"]);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (view["state"] == "failed").then_some(view)
    })
    .await;
    assert!(
        view["error"]
            .as_str()
            .unwrap_or("")
            .contains("task extraction failed"),
        "{view}"
    );
    assert_eq!(view["tuner"]["rules"], "per-task", "{view}");
    let status = client.status().await.expect("the master still answers");
    assert!(status.jobs.total >= 1);
}

/// Submits the one-Relu model as run `packed` with `--prepack` (4 trials).
fn submit_prepacked_relu(master: &Master, dir: &Path) {
    let model = dir.join("relu.onnx");
    dynamic_relu_model(&model);
    let out = master.cli(&[
        "submit",
        model.to_str().expect("UTF-8 path"),
        "--name",
        "packed",
        "--input-shape",
        "x=1,4",
        "--trials",
        "4",
        "--prepack",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `submit --prepack`: the run says so, and a weights-as-arguments library
/// is refused with the command that builds the model instead (its compile
/// job binds random weights, for timing only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepacked_run_points_export_library_to_tunefleet_compile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    submit_prepacked_relu(&master, dir.path());
    let out = master.cli(&["results", "--model", "packed", "--format", "json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(view["prepack"], true, "{view}");
    let lib = dir.path().join("packed.so");
    let out = master.cli(&[
        "export",
        "--model",
        "packed",
        "--format",
        "library",
        "--out",
        lib.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("pre-packs its weights")
            && err.contains("tunefleet compile MODEL.onnx --model packed"),
        "{err}"
    );
    assert!(!lib.exists());
}

/// A `--prepack` run on a real TVM worker ends verified: extraction binds
/// random weights, and the compile job keeps its library (random weights
/// compiled in, ResNet-50's was 100 MB, over what a result may carry) on the
/// worker instead of failing the run.
#[cfg(feature = "tvm")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepacked_run_ends_verified_without_shipping_its_library() {
    let python = repo_root().join(".venv/bin/python");
    if light_models().is_none() {
        eprintln!("SKIPPED: no TVM venv (scripts/setup-tvm.sh)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let _worker = tvm_worker(&master, dir.path(), "tvm-prepack", &python, &[]);
    submit_prepacked_relu(&master, dir.path());
    let view = eventually(Duration::from_secs(300), "the run to end", || async {
        let out = master.cli(&["results", "--model", "packed", "--format", "json"]);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (view["state"] == "done" || view["state"] == "failed").then_some(view)
    })
    .await;
    assert_eq!(view["state"], "done", "{view:#}");
    assert_eq!(view["verified"], true, "{view:#}");
    assert_eq!(view["prepack"], true, "{view:#}");
    assert_eq!(
        view["io"]["params"],
        serde_json::json!([]),
        "weights compiled in: {view:#}"
    );
    assert!(
        view["latency_s"]["tuned"].as_f64().is_some_and(|t| t > 0.0),
        "{view:#}"
    );
}

/// Writes two small ONNX models with the venv's onnx: `conv.onnx`
/// (Conv → Relu) and `mask.onnx`, whose Dropout's mask is a graph output:
/// TVM's `ConvertLayout` cannot carry NHWC through that tuple, so its
/// extraction must fall back to NCHW.
#[cfg(feature = "tvm")]
fn write_mode_models(python: &Path, dir: &Path) {
    let script = r#"
import sys, numpy as np
from onnx import TensorProto, helper, numpy_helper, save
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype("float32"), "w")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
for name, tail, outs in (
    ("conv", [helper.make_node("Relu", ["c"], ["y"])], [y]),
    ("mask", [helper.make_node("Dropout", ["c"], ["y", "m"])],
     [y, helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 8, 16, 16])]),
):
    g = helper.make_graph([conv] + tail, name, [x], outs, [w])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{sys.argv[1]}/{name}.onnx")
"#;
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run the venv's python");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Without `--prepack`, `--no-prepack` or `--layout`, `submit` gives the
/// best mode: weights pre-packed, convolutions channels-last, lowering
/// the latest recipe, chosen by the farm; a model NHWC cannot carry falls back to
/// NCHW on its own, and `results` says so and why.
#[cfg(feature = "tvm")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_mode_is_the_best_and_falls_back_on_its_own() {
    let python = repo_root().join(".venv/bin/python");
    if light_models().is_none() {
        eprintln!("SKIPPED: no TVM venv (scripts/setup-tvm.sh)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    write_mode_models(&python, dir.path());
    let master = Master::start(dir.path(), &[]);
    let _worker = tvm_worker(&master, dir.path(), "tvm-mode", &python, &[]);
    for name in ["conv", "mask"] {
        let model = dir.path().join(format!("{name}.onnx"));
        let out = master.cli(&[
            "submit",
            model.to_str().unwrap(),
            "--name",
            name,
            "--trials",
            "2",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let extracted = |name: &'static str| {
        let master = &master;
        async move {
            eventually(
                Duration::from_secs(300),
                "the extraction to end",
                || async {
                    let out = master.cli(&["results", "--model", name, "--format", "json"]);
                    let view: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                    (view["state"] != "extracting").then_some(view)
                },
            )
            .await
        }
    };
    let conv = extracted("conv").await;
    assert_ne!(conv["state"], "failed", "{conv:#}");
    assert_eq!(conv["mode"]["layout"], "NHWC", "{:#}", conv["mode"]);
    assert_eq!(conv["mode"]["prepack"], true);
    assert_eq!(conv["mode"]["auto"], true);
    assert_eq!(
        conv["mode"]["recipe"],
        tunefleet_shared::model::LATEST_RECIPE
    );
    assert!(conv["mode"]["note"].is_null());
    let mask = extracted("mask").await;
    assert_ne!(mask["state"], "failed", "{mask:#}");
    assert_eq!(mask["mode"]["layout"], "NCHW", "{:#}", mask["mode"]);
    assert_eq!(
        mask["layout"], "NCHW",
        "compile uses the layout it fell back to"
    );
    let note = mask["mode"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("NHWC could not be used"), "{note}");
    let table = text(&master.cli(&["results", "--model", "mask"]).stdout);
    assert!(
        table
            .contains("mode NCHW, weights pre-packed (chosen by the farm); NHWC could not be used"),
        "{table}"
    );
}

/// A run of tasks its client extracted (the Python package's `tune_module`),
/// sent with the Rust client: no extract job, rounds on a sim worker at once,
/// `done` without a compile job, and it survives a master restart (the empty
/// model source marks it in the state database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_extracted_tasks_are_tuned_without_extract_or_compile() {
    use tunefleet_shared::model::{ExtractedModel, ExtractedTask, ModelSource, ModelSubmission};
    use tunefleet_shared::protocol::{ClientCommand, ReplyBody};

    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    let task = |name: &str, trivial: bool| ExtractedTask {
        name: name.into(),
        weight: 2,
        tvmscript: format!("@T.prim_func\ndef {name}(): pass\n"),
        flops: Some(1e6),
        trivial,
        workload: None,
    };
    let submission = ModelSubmission {
        name: "relax".into(),
        source: ModelSource {
            onnx_b64: String::new(),
            input_shapes: Default::default(),
            prepack: false,
            layout: Default::default(),
            auto_layout: false,
            recipe: None,
            seed: 0,
        },
        trials: Some(8),
        trials_per_round: Some(2),
        target: None,
        tuner: Default::default(),
        extracted: Some(ExtractedModel {
            tasks: vec![task("mm", false), task("copy", true)],
        }),
    };
    let mut client = master.client().await;
    let reply = client
        .request(ClientCommand::SubmitModel {
            model: Box::new(submission),
        })
        .await
        .expect("the master takes client-extracted tasks");
    let ReplyBody::ModelSubmitted { extract_job, .. } = reply else {
        panic!("unexpected reply {reply:?}");
    };
    let out = master.cli(&["results", "--model", "relax", "--format", "json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(view["state"], "tuning", "{view:#}");
    assert_eq!(view["extract_job"], extract_job.as_str());
    let jobs = master.cli(&["results", "--format", "json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("JSON");
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["relax/mm/r1"],
        "no extract job, no round of the trivial task"
    );

    // Restarted before any round ran: the run goes on from the database.
    master.restart();
    let _sim = Worker::start(&master, "sim", 0.2, &[]);
    let view = eventually(Duration::from_secs(60), "the run to end", || async {
        let out = master.cli(&["results", "--model", "relax", "--format", "json"]);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (view["state"] == "done" || view["state"] == "failed").then_some(view)
    })
    .await;
    assert_eq!(view["state"], "done", "{view:#}");
    assert!(view["compile_job"].is_null(), "{view:#}");
    assert_eq!(view["trials_done"], 8, "{view:#}");
    assert!(view["tasks"][0]["best_latency_s"].as_f64().unwrap() > 0.0);
    assert!(view["tasks"][1]["rounds"].as_array().unwrap().is_empty());
}

/// CI must never skip the real-TVM model run silently.
#[test]
fn the_model_suite_is_enabled_in_ci() {
    if std::env::var_os("CI").is_some() {
        if !cfg!(feature = "tvm") {
            panic!("CI must run: cargo test --features tunefleet-tests/tvm");
        }
        assert!(
            light_models().is_some(),
            "the venv lacks the onnx wheel's test models"
        );
    }
}

/// A `tvm` worker on `master` for the host's own target.
#[cfg(feature = "tvm")]
fn tvm_worker(master: &Master, dir: &Path, name: &str, python: &Path, extra: &[&str]) -> Worker {
    let python = python.to_str().expect("venv path is UTF-8");
    let mut args = vec!["--backend", "tvm", "--python", python, "--target", "auto"];
    args.extend_from_slice(extra);
    Worker::spawn(&master.url(), dir, name, &args)
}

/// `tunefleet submit MODEL --wait` with 2 trials per round, bounded by
/// `timeout_s` so that a hung run fails the test instead of the CI job.
/// `--no-prepack`: the weights as arguments, the mode whose `export
/// --format library` README's model snippet runs (the default mode's own
/// test is `the_default_mode_is_the_best_and_falls_back_on_its_own`).
#[cfg(feature = "tvm")]
fn submit_model_and_wait(
    master: &Master,
    model: &Path,
    name: &str,
    trials: &str,
    timeout_s: u32,
) -> std::process::Output {
    std::process::Command::new("timeout")
        .arg(timeout_s.to_string())
        .arg(bin("tunefleet"))
        .args([
            "submit",
            model.to_str().expect("model path is UTF-8"),
            "--name",
            name,
        ])
        .args(["--trials", trials, "--trials-per-round", "2", "--wait"])
        .arg("--no-prepack")
        .args(["--server", &master.url()])
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run tunefleet submit --wait")
}

#[cfg(feature = "tvm")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn squeezenet_in_faster_squeezenet_out() {
    let Some(light) = light_models() else {
        eprintln!("SKIPPED: no onnx test models in .venv (scripts/setup-tvm.sh installs them)");
        return;
    };
    let model = light.join("light_squeezenet.onnx");
    let python = repo_root().join(".venv/bin/python");
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let _worker = tvm_worker(
        &master,
        dir.path(),
        "tvm-model",
        &python,
        &["--trials-per-round", "2"],
    );
    let budget = std::env::var("TUNEFLEET_MODEL_TEST_TRIALS").unwrap_or_else(|_| "40".into());
    let submit = submit_model_and_wait(&master, &model, "squeezenet", &budget, 2400);
    let results = master.cli(&["results", "--model", "squeezenet", "--format", "json"]);
    let view: serde_json::Value =
        serde_json::from_slice(&results.stdout).expect("results --model --format json is JSON");
    assert!(
        submit.status.success(),
        "submit --wait: {}\n{}\nrun: {view:#}\nworker log:\n{}",
        text(&submit.stdout),
        text(&submit.stderr),
        std::fs::read_to_string(dir.path().join("tvm-model.log")).unwrap_or_default()
    );
    eprintln!("{}", text(&submit.stdout));

    assert_eq!(view["name"], "squeezenet");
    assert_eq!(view["state"], "done", "{view:#}");
    assert_eq!(view["verified"], true, "{view:#}");
    assert!(view["error"].is_null());
    assert_eq!(view["target"]["kind"], "llvm");
    assert!(
        view["target"]["num-cores"].as_u64().is_some(),
        "{}",
        view["target"]
    );
    let trials_total = view["trials_total"].as_u64().unwrap();
    let trials_done = view["trials_done"].as_u64().unwrap();
    assert!(trials_done > 0 && trials_done <= trials_total, "{view:#}");
    let tasks = view["tasks"].as_array().expect("tasks");
    assert!(
        tasks.len() >= 10,
        "SqueezeNet has tens of tasks: {}",
        tasks.len()
    );
    let tuned: Vec<_> = tasks
        .iter()
        .filter(|t| t["best_latency_s"].as_f64().is_some())
        .collect();
    assert!(!tuned.is_empty());
    for t in &tuned {
        assert!(
            t["job_id"].is_string() && t["weight"].as_u64().unwrap() >= 1,
            "{t}"
        );
        assert!(t["trials"].as_u64().unwrap() >= 1, "{t}");
    }
    // Rounds of two trials search `union` alone: every tuned convolution's
    // best record is tiled by MetaSchedule's own rules, and says so.
    for t in tuned
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.contains("conv2d")))
    {
        assert_eq!(t["best_tiling"], "SSRSRS", "{t}");
    }
    assert!(view["estimated_latency_s"].as_f64().unwrap() > 0.0);
    let applied = view["records_applied"].as_u64().expect("applied count");
    assert_eq!(
        Some(applied),
        view["functions_tuned"].as_u64(),
        "every tuned task's schedule is used"
    );
    assert!(applied >= tuned.len() as u64, "{view:#}");
    let lat = &view["latency_s"];
    let (untuned, tuned_s, ort) = (
        lat["untuned"].as_f64().unwrap(),
        lat["tuned"].as_f64().unwrap(),
        lat["onnxruntime"].as_f64().unwrap(),
    );
    eprintln!(
        "squeezenet: untuned {untuned:.4} s, tuned {tuned_s:.4} s, onnxruntime {ort:.4} s, {applied} schedules applied, {trials_done} trials"
    );
    assert!(tuned_s < untuned, "tuned must beat untuned: {lat}");

    let db = dir.path().join("db");
    let out = master.cli(&[
        "export",
        "--model",
        "squeezenet",
        "--format",
        "metaschedule",
        "--out",
        db.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let records = std::fs::read_to_string(db.join("database_tuning_record.json")).unwrap();
    let workloads = std::fs::read_to_string(db.join("database_workload.json")).unwrap();
    assert!(records.lines().count() as u64 >= tuned.len() as u64);
    assert!(workloads.lines().count() >= tuned.len());

    let lib = dir.path().join("squeezenet.so");
    let out = master.cli(&[
        "export",
        "--model",
        "squeezenet",
        "--format",
        "library",
        "--out",
        lib.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The README's snippet, verbatim, runs the library and the database opens in TVM.
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let snippet = readme
        .split("<!-- model-snippet -->\n```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README has the model snippet");
    let results_json = dir.path().join("squeezenet.json");
    std::fs::write(&results_json, &results.stdout).unwrap();
    let run = std::process::Command::new(&python)
        .arg("-c")
        .arg(snippet)
        .current_dir(dir.path())
        .output()
        .expect("run the snippet");
    assert!(
        run.status.success(),
        "README snippet failed:\n{}",
        text(&run.stderr)
    );
    assert!(
        text(&run.stdout).contains("output"),
        "{}",
        text(&run.stdout)
    );

    // `tunefleet compile` with the model's own weights: verified against
    // onnxruntime, every tuned task's record applied, and a library that runs
    // with the input alone (README's second snippet, verbatim).
    let compiled = dir.path().join("squeezenet_tuned.so");
    let out = master.cli(&[
        "compile",
        model.to_str().unwrap(),
        "--model",
        "squeezenet",
        "--out",
        compiled.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "tunefleet compile: {}",
        text(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("compile --format json is JSON");
    eprintln!("tunefleet compile: {}", report["latency_s"]);
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(
        report["tasks"].as_u64(),
        Some(tuned.len() as u64),
        "{report:#}"
    );
    let applied = report["applied"].as_u64().expect("applied");
    assert!(applied >= tuned.len() as u64, "{report:#}");
    // The run's compile job chose each task's record by timing its best
    // ones cold; `tunefleet compile` applied the same records untimed, and
    // its report carries their cold figures.
    let (job, here) = (&view["verification"]["cold_choice"], &report["cold_choice"]);
    let timed = job["tasks"].as_u64().unwrap_or(0);
    assert!(
        timed >= 1 && job["records_timed"].as_u64() >= Some(timed),
        "{job:#}"
    );
    assert_eq!(
        job["chosen"].as_object().map(|c| c.len() as u64),
        Some(timed),
        "{job:#}"
    );
    assert_eq!(here["reused"].as_u64(), Some(timed), "{here:#}");
    assert_eq!(here["records_timed"], 0, "{here:#}");
    assert_eq!(here["chosen"], job["chosen"], "{here:#}");
    for choice in [job, here] {
        let cold = &choice["kernels_cold_s"];
        let (chosen, warm) = (cold["chosen"].as_f64(), cold["warm_best"].as_f64());
        assert!(
            chosen.is_some_and(|c| c > 0.0) && chosen <= warm,
            "{choice:#}"
        );
    }
    assert_eq!(
        Some(applied),
        report["tuned_functions"].as_u64(),
        "{report:#}"
    );
    let lat = &report["latency_s"];
    for key in ["untuned", "tuned", "onnxruntime"] {
        assert!(lat[key].as_f64().is_some_and(|l| l > 0.0), "{lat}");
    }
    assert!(
        lat["tuned"].as_f64() < lat["untuned"].as_f64(),
        "tuned must beat untuned: {lat}"
    );
    // The library and onnxruntime alternated in the default three rounds;
    // the figure is the median round (the middle of three).
    for key in ["tuned", "onnxruntime"] {
        let mut rounds: Vec<f64> = report["latency_rounds_s"][key]
            .as_array()
            .map(|v| v.iter().filter_map(|t| t.as_f64()).collect())
            .unwrap_or_default();
        rounds.sort_by(f64::total_cmp);
        assert_eq!(rounds.len(), 3, "{report:#}");
        assert_eq!(lat[key].as_f64(), Some(rounds[1]), "{report:#}");
    }
    let snippet = readme
        .split("<!-- compile-snippet -->\n```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README has the compile snippet");
    let run = std::process::Command::new(&python)
        .arg("-c")
        .arg(snippet)
        .current_dir(dir.path())
        .output()
        .expect("run the compile snippet");
    assert!(
        run.status.success(),
        "README compile snippet failed:\n{}",
        text(&run.stderr)
    );
    assert!(
        text(&run.stdout).contains("(1, 1000, 1, 1)"),
        "{}",
        text(&run.stdout)
    );

    let open_db = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "import sys\nfrom tvm.s_tir import meta_schedule as ms\n\
             db = ms.database.JSONDatabase(work_dir=sys.argv[1])\n\
             print(len(db.get_all_tuning_records()))",
        )
        .arg(&db)
        .output()
        .expect("open the database");
    assert!(open_db.status.success(), "{}", text(&open_db.stderr));
    let n: usize = text(&open_db.stdout).trim().parse().unwrap_or(0);
    assert_eq!(n, records.lines().count());
    drop(_worker);
    drop(master);

    // Another farm imports that database: extraction reports each task's
    // database line, so the new run's first rounds start from the records.
    let farm_b = dir.path().join("farm-b");
    std::fs::create_dir_all(&farm_b).unwrap();
    let master_b = Master::start(&farm_b, &[]);
    let out = master_b.cli(&[
        "import",
        "--format",
        "metaschedule",
        "--json",
        db.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "import: {}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        report["records_new"].as_u64(),
        Some(records.lines().count() as u64),
        "{report}"
    );
    let _worker_b = tvm_worker(&master_b, &farm_b, "tvm-model-b", &python, &[]);
    let submit = submit_model_and_wait(&master_b, &model, "squeezenet-b", "4", 1200);
    assert!(submit.status.success(), "{}", text(&submit.stderr));
    let jobs = master_b.cli(&["results", "--format", "json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("results json");
    let rounds: Vec<&serde_json::Value> = jobs
        .as_array()
        .expect("array")
        .iter()
        .filter(|j| j["name"].as_str().is_some_and(|n| n.ends_with("/r1")))
        .collect();
    assert!(!rounds.is_empty(), "{jobs:#}");
    let seeded: Vec<u64> = rounds
        .iter()
        .filter_map(|j| j["result"]["extra"]["warm_start_records"].as_u64())
        .filter(|&n| n > 0)
        .collect();
    for j in &rounds {
        // Rounds of 2 trials name no rule set: `union` alone (models/rules.rs).
        assert_eq!(
            j["result"]["extra"]["rules"].as_str(),
            Some("union"),
            "{}",
            j["name"]
        );
        assert!(
            j["result"]["extra"]["warm_start_ignored"].is_null(),
            "{}: {}",
            j["name"],
            j["result"]["extra"]["warm_start_ignored"]
        );
    }
    eprintln!(
        "farm b: {} first rounds, {} seeded with {:?} imported records",
        rounds.len(),
        seeded.len(),
        seeded
    );
    assert!(
        !seeded.is_empty(),
        "a first round starts from imported records: {jobs:#}"
    );
}

/// The operator list the CLI and the master check uploads against is the one
/// the venv's TVM converts.
#[cfg(feature = "tvm")]
#[test]
fn supported_operator_list_matches_the_venvs_tvm() {
    let python = repo_root().join(".venv/bin/python");
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "from tvm.relax.frontend.onnx import onnx_frontend as f\n\
             print('\\n'.join(sorted(set(f._get_convert_map()) | {'Constant', 'If'})))",
        )
        .output()
        .expect("ask TVM for its ONNX converters");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tvm: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let ours: Vec<String> = tunefleet_shared::onnx::supported::SUPPORTED_OPS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        ours, tvm,
        "regenerate shared/src/onnx/supported.rs for this TVM"
    );
}
