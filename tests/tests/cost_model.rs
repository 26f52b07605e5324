//! The fleet's cost model carries over (issue 39, part 4): a model saved by
//! one run is loaded by the next. A master and one real TVM worker run a
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

/// CI must never skip the real-TVM tests silently.
#[test]
fn the_cost_model_suite_is_enabled_in_ci() {
    if std::env::var_os("CI").is_some() && !cfg!(feature = "tvm") {
        panic!("CI must run these tests: cargo test --features tunefleet-tests/tvm");
    }
}
