//! The fleet's cost model carries over (issue 39, part 4): a model saved by
//! one run is loaded by the next (`real_tvm`, below; the master's side
//! alone, with a scripted worker, in `scripted`). A master and one real TVM worker run a
//! one-round model of a matmul; its round returns the cost model it
//! trained, which the master keeps in its store (`cost_models`, read here
//! through the store itself). The master is killed and restarted, so the
//! model can only come from that row; a second run on another matmul then
//! starts its round from it (`used`, the row's id as `base`, its samples
//! loaded) and the row grows by the second round's samples.
//!
//! Rounds of 4 trials keep it to about a minute: the model is loaded and
//! trained on, though it predicts only from 32 samples on
//! (python/tests/test_cost_model.py; the gain is measured in
//! docs/benchmarks.md). Needs the venv from `scripts/setup-tvm.sh`; runs
//! with `--features tvm`.

#[cfg(feature = "tvm")]
mod real_tvm {
    use std::time::Duration;

    use tunefleet_server::cost_models::{CostModel, CostModelKey};
    use tunefleet_server::store::{StateLocation, Store};
    use tunefleet_shared::model::{ExtractedModel, ExtractedTask, ModelSource, ModelSubmission};
    use tunefleet_shared::protocol::{ClientCommand, JobState};
    use tunefleet_tests::*;

    fn matmul(m: u32, n: u32, k: u32) -> String {
        format!(
            "# from tvm.script import tir as T\n\
             @T.prim_func\n\
             def main(A: T.Buffer(({m}, {k}), \"float32\"), B: T.Buffer(({k}, {n}), \"float32\"), C: T.Buffer(({m}, {n}), \"float32\")):\n\
             \x20   for i, j, kk in T.grid({m}, {n}, {k}):\n\
             \x20       with T.block(\"C\"):\n\
             \x20           vi, vj, vk = T.axis.remap(\"SSR\", [i, j, kk])\n\
             \x20           with T.init():\n\
             \x20               C[vi, vj] = T.float32(0)\n\
             \x20           C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"
        )
    }

    /// A client-extracted run of one task, one round of 4 trials.
    async fn submit(master: &Master, name: &str, tvmscript: String) {
        let submission = ModelSubmission {
            name: name.into(),
            source: ModelSource {
                onnx_b64: String::new(),
                input_shapes: Default::default(),
                prepack: false,
                layout: Default::default(),
                auto_layout: false,
                recipe: None,
                seed: 0,
            },
            trials: Some(4),
            trials_per_round: Some(4),
            target: None,
            tuner: Default::default(),
            extracted: Some(ExtractedModel {
                tasks: vec![ExtractedTask {
                    name: "mm".into(),
                    weight: 1,
                    tvmscript,
                    flops: Some(1e6),
                    trivial: false,
                    workload: None,
                }],
            }),
        };
        master
            .client()
            .await
            .request(ClientCommand::SubmitModel {
                model: Box::new(submission),
            })
            .await
            .expect("the master takes the run");
    }

    /// The run's one round, once done: its result's `cost_model`.
    async fn round_cost_model(master: &Master, run: &str) -> serde_json::Value {
        let name = format!("{run}/mm/r1");
        eventually(Duration::from_secs(240), &format!("{name} done"), || {
            let (master, name) = (master, name.clone());
            async move {
                let jobs = master.client().await.results(None).await.ok()?;
                let job = jobs.into_iter().find(|j| j.name == name)?;
                assert_ne!(job.state, JobState::Failed, "{:?}", job.errors);
                let extra = job.result.filter(|_| job.state == JobState::Done)?.extra;
                assert!(
                    extra.get("cost_model_b64").is_none(),
                    "the blob never reaches a view"
                );
                Some(extra["cost_model"].clone())
            }
        })
        .await
    }

    /// The store's rows, read as a master reads them.
    fn stored(master: &Master) -> Vec<(CostModelKey, CostModel)> {
        let state = master.state.clone();
        std::thread::spawn(move || {
            let location = StateLocation::parse(&state).expect("state location");
            Store::open_read_only(&location)
                .and_then(|mut store| store.load_cost_models())
                .expect("read the cost models")
        })
        .join()
        .expect("reader thread")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cost_model_saved_by_one_run_is_loaded_by_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut master = Master::start(dir.path(), &[]);
        let python = repo_root().join(".venv/bin/python").display().to_string();
        let args = ["--backend", "tvm", "--python", &python, "--target", "auto"];
        let worker = Worker::spawn(&master.url(), dir.path(), "tvm", &args);

        submit(&master, "first", matmul(64, 64, 64)).await;
        let first = round_cost_model(&master, "first").await;
        assert_eq!(first["shared"], true, "{first}");
        assert_eq!(first["used"], false, "a fresh fleet has no model: {first}");
        let rows = stored(&master);
        assert_eq!(rows.len(), 1, "one model, for the worker's target");
        let (key, saved) = rows.into_iter().next().expect("one row");
        assert_eq!(saved.samples, 4, "the round's 4 trials");
        assert!(
            key.target.contains("\"mcpu\""),
            "the effective target: {key:?}"
        );

        // Only the row survives a kill -9: the next run must load it.
        drop(worker);
        master.restart();
        let _worker = Worker::spawn(&master.url(), dir.path(), "tvm-again", &args);
        submit(&master, "second", matmul(32, 96, 48)).await;
        let second = round_cost_model(&master, "second").await;
        assert_eq!(second["used"], true, "{second}");
        assert_eq!(second["base"], saved.id.as_str(), "{second}");
        assert_eq!(second["loaded_samples"], 4, "{second}");
        let after = stored(&master);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].0, key);
        assert_eq!(after[0].1.samples, 8, "both workloads' samples");
        assert_ne!(after[0].1.id, saved.id, "the row holds the newer model");
    }
}

/// The master's side, with a scripted worker (no TVM, every CI run): a
/// round's assign carries the fleet's model for the worker's effective
/// target, a result's model is kept by the planner's rule (a round that
/// started from an older model and knows less is dropped), it never reaches
/// a job's view, and `--no-cost-model-sharing` sends none.
mod scripted {
    use serde_json::{json, Value};
    use tunefleet_shared::model::base64;
    use tunefleet_shared::protocol::ClientCommand;
    use tunefleet_tests::*;

    const TARGET: &str = r#"{"kind":"llvm","mcpu":"scripted","num-cores":2}"#;

    async fn worker(master: &Master) -> (raw::Ws, String) {
        let mut ws = raw::connect(&format!("{}/ws/worker", master.url())).await;
        let target: Value = serde_json::from_str(TARGET).expect("target");
        raw::send(
            &mut ws,
            json!({
                "type": "register", "protocol": 1, "worker_id": "scripted", "name": "scripted",
                "target": target, "backend": "tvm", "tvm_version": "0.27.0"
            }),
        )
        .await;
        let registered = raw::next_of_type(&mut ws, "registered").await;
        let token = registered["token"].as_str().expect("token").to_string();
        (ws, token)
    }

    /// A run of one task in rounds of `per_round` trials.
    async fn submit(master: &Master, name: &str, trials: u32, per_round: u32) {
        let model: Value = json!({
            "name": name, "source": {"onnx_b64": "", "input_shapes": {}, "seed": 0},
            "extracted": {"tasks": [{"name": "mm", "weight": 1, "tvmscript": "# mm", "flops": 1e6}]},
            "trials": trials, "trials_per_round": per_round
        });
        let model = serde_json::from_value(model).expect("a submission");
        master
            .client()
            .await
            .request(ClientCommand::SubmitModel { model })
            .await
            .expect("the master takes the run");
    }

    /// Asks for a job; returns its assign.
    async fn next_round(ws: &mut raw::Ws, token: &str) -> Value {
        raw::send(ws, json!({"type": "request_job", "token": token})).await;
        raw::next_of_type(ws, "assign").await
    }

    /// Finishes a round, returning `model` that started from `base`.
    async fn finish(
        ws: &mut raw::Ws,
        token: &str,
        assign: &Value,
        model: &str,
        samples: u32,
        base: Value,
    ) {
        let record = json!([{"insts": [], "decisions": []}, [1e-3], {"kind": "llvm"}, []]);
        let target: Value = serde_json::from_str(TARGET).expect("target");
        raw::send(ws, json!({
            "type": "result", "token": token, "job_id": assign["job_id"], "lease": assign["lease"],
            "result": {
                "best_latency_s": 1e-3, "trials": assign["workload"]["trials"], "wall_time_s": 0.1, "backend": "tvm",
                "tvm_version": "0.27.0", "target": target,
                "records": [{"latency_s": 1e-3, "record": record}],
                "extra": {
                    "cost_model": {"shared": true, "used": !base.is_null(), "base": base, "samples": samples},
                    "cost_model_b64": base64::encode(model.as_bytes())
                }
            }
        }))
        .await;
        let ack = raw::next_of_type(ws, "ack").await;
        assert_eq!(ack["accepted"], json!(true), "{ack}");
    }

    fn sent_model(assign: &Value) -> (String, String) {
        let model = &assign["cost_model"]["model"];
        let bytes = base64::decode(model["data_b64"].as_str().expect("a model")).expect("base64");
        (
            model["id"].as_str().expect("id").to_string(),
            String::from_utf8(bytes).expect("text"),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rounds_carry_the_newest_model_and_views_never_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut master = Master::start(dir.path(), &[]);
        submit(&master, "scripted", 8, 2).await;
        let (mut ws, token) = worker(&master).await;

        let r1 = next_round(&mut ws, &token).await;
        assert_eq!(
            r1["cost_model"],
            json!({}),
            "no model yet, but send yours: {r1}"
        );
        finish(&mut ws, &token, &r1, "model 1", 2, Value::Null).await;

        let r2 = next_round(&mut ws, &token).await;
        let (first, text) = sent_model(&r2);
        assert_eq!(text, "model 1");
        // A parallel round's, from an older model, knowing less: dropped.
        finish(&mut ws, &token, &r2, "older", 1, json!("0000")).await;
        let r3 = next_round(&mut ws, &token).await;
        assert_eq!(sent_model(&r3), (first.clone(), "model 1".into()));
        finish(&mut ws, &token, &r3, "model 3", 3, json!(first)).await;

        // Kept in the store: a restarted master sends it.
        drop(ws);
        master.restart();
        let (mut ws, token) = worker(&master).await;
        let r4 = next_round(&mut ws, &token).await;
        assert_eq!(sent_model(&r4).1, "model 3");
        let jobs = master.client().await.results(None).await.expect("results");
        for job in jobs.iter().filter_map(|j| j.result.as_ref()) {
            assert!(job.extra.get("cost_model_b64").is_none(), "{:?}", job.extra);
            assert!(
                job.extra["cost_model"]["samples"].is_u64(),
                "the summary stays"
            );
        }
        drop(ws);
        master.kill9();

        let master = Master::start_on(dir.path(), &master.state, &["--no-cost-model-sharing"]);
        let (mut ws, token) = worker(&master).await;
        let r4 = next_round(&mut ws, &token).await;
        assert!(r4.get("cost_model").is_none(), "not shared: {r4}");
    }

    /// A run's first round of each task is short once the fleet's model for
    /// the target has learned from enough schedules (the planner's
    /// `WARM_FLEET_MIN_SAMPLES`, 256): a trained model picks a few
    /// candidates well. A fresh fleet warms up in the run's own rounds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fleet_that_knows_the_target_warms_a_new_run_up_in_short_rounds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let master = Master::start(dir.path(), &[]);
        let (mut ws, token) = worker(&master).await;
        submit(&master, "first", 16, 16).await;
        let r1 = next_round(&mut ws, &token).await;
        assert_eq!(r1["workload"]["trials"], 16, "a fresh fleet: {r1}");
        finish(&mut ws, &token, &r1, "trained", 256, Value::Null).await;

        submit(&master, "second", 64, 16).await;
        let warm_up = next_round(&mut ws, &token).await;
        assert_eq!(warm_up["workload"]["name"], "second/mm/r1");
        assert_eq!(warm_up["workload"]["trials"], 4, "{warm_up}");
        let id = sent_model(&warm_up).0;
        finish(&mut ws, &token, &warm_up, "more", 260, json!(id)).await;
        let next = next_round(&mut ws, &token).await;
        assert_eq!(next["workload"]["trials"], 16, "the run's rounds: {next}");
    }
}

/// CI must never skip the real-TVM tests silently.
#[test]
fn the_cost_model_suite_is_enabled_in_ci() {
    if std::env::var_os("CI").is_some() && !cfg!(feature = "tvm") {
        panic!("CI must run these tests: cargo test --features tunefleet-tests/tvm");
    }
}
