//! The planner driven by hand: a run's whole life with made-up results.

use super::*;
use tunefleet_shared::model::{DataLayout, ExtractedModel, ExtractedTask, ModelSource};
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{JobError, JobState, ResultMeta};

fn submission(name: &str, trials: u32, per_round: u32) -> ModelSubmission {
    ModelSubmission {
        name: name.into(),
        source: ModelSource {
            onnx_b64: "AAAA".into(),
            input_shapes: Default::default(),
            seed: 0,
            prepack: false,
            layout: Default::default(),
            auto_layout: false,
            recipe: None,
        },
        trials: Some(trials),
        trials_per_round: Some(per_round),
        target: None,
        tuner: TunerSettings::default(),
        extracted: None,
    }
}

fn effective() -> Target {
    Target::parse(r#"{"kind":"llvm","mcpu":"znver3","num-cores":2}"#).unwrap()
}

fn view(workload: &Workload, state: JobState) -> JobView {
    JobView {
        job_id: workload.job_id(),
        name: workload.name.clone(),
        workload: workload.clone(),
        state,
        attempts: 1,
        worker: None,
        trials_done: 0,
        trials_total: workload.trials,
        best_latency_s: None,
        records: vec![],
        history: vec![],
        errors: vec![],
        result: None,
        created_at: Millis(0),
        updated_at: Millis(0),
        started_at: None,
        finished_at: None,
        cache_hit: false,
        cached_from: None,
        actions: Vec::new(),
    }
}

fn done(workload: &Workload, extra: Value, records: &[f64]) -> JobView {
    let mut v = view(workload, JobState::Done);
    v.records = records
        .iter()
        .enumerate()
        .map(|(i, l)| TuningRecord {
            latency_s: *l,
            record: serde_json::json!([format!("trace-{}-{i}", workload.name), [l], {}, []]),
        })
        .collect();
    v.result = Some(ResultMeta {
        trials: records.len() as u32,
        wall_time_s: 1.0,
        worker: "w".into(),
        backend: "tvm".into(),
        tvm_version: None,
        gflops: None,
        extra,
        target: Some(effective()),
    });
    v
}

fn extracted(tasks: &[(&str, u32, bool)]) -> Value {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(name, weight, trivial)| {
            serde_json::json!({
                "name": name, "weight": weight, "trivial": trivial,
                "tvmscript": format!("@T.prim_func\ndef {name}(): pass\n"),
            })
        })
        .collect();
    serde_json::json!({"tasks": tasks, "inputs": [], "params": [], "outputs": []})
}

fn names(plan: &Plan) -> Vec<String> {
    plan.jobs.iter().map(|(w, _)| w.name.clone()).collect()
}

#[test]
fn a_run_extracts_warms_up_allocates_and_compiles() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("sq", 10, 2), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    assert_eq!(names(&plan), ["sq/extract"]);
    let extract = plan.jobs[0].0.clone();
    assert_eq!(runs.get("sq").unwrap().state, ModelState::Extracting);

    // Three tasks, one trivial: two warm-up rounds, queued at once.
    let extra = extracted(&[("conv", 2, false), ("pool", 1, true), ("dense", 1, false)]);
    let plan = runs.job_ended(&done(&extract, extra, &[]), Millis(2), &one_worker);
    assert_eq!(names(&plan), ["sq/conv/r1", "sq/dense/r1"]);
    let run = runs.get("sq").unwrap();
    assert_eq!(run.state, ModelState::Tuning);
    assert_eq!(run.target, Some(effective()));
    for (w, extras) in &plan.jobs {
        assert_eq!(w.target, effective(), "rounds pin the effective target");
        assert_eq!(w.trials, 2);
        assert!(extras.warm_start.is_none(), "nothing to start from yet");
    }
    let (conv1, dense1) = (plan.jobs[0].0.clone(), plan.jobs[1].0.clone());

    // conv: weight 2 × 1 ms; dense: 1 × 0.5 ms. conv has more model time left.
    let plan = runs.job_ended(
        &done(&dense1, Value::Null, &[0.5e-3, 0.6e-3]),
        Millis(3),
        &one_worker,
    );
    assert!(plan.jobs.is_empty(), "conv's first round still runs");
    let workload_line = serde_json::json!(["hash", "b64"]);
    let plan = runs.job_ended(
        &done(
            &conv1,
            serde_json::json!({"workload": workload_line}),
            &[1e-3, 2e-3],
        ),
        Millis(4),
        &one_worker,
    );
    assert_eq!(names(&plan), ["sq/conv/r2"]);
    let (conv2, extras) = plan.jobs[0].clone();
    let warm = extras.warm_start.expect("second round warm-starts");
    assert_eq!(warm.workload, workload_line);
    assert_eq!(warm.records.len(), 2);
    assert_ne!(
        conv2.job_id(),
        conv1.job_id(),
        "a round is a job of its own"
    );

    // Budget: 10 - 4 measured - 2 planned = 4 left. conv improves to 0.2 ms:
    // 2 × 0.2 / 2 = 0.2 ms against dense's 0.5 ms: dense is next.
    let plan = runs.job_ended(
        &done(&conv2, Value::Null, &[0.2e-3]),
        Millis(5),
        &one_worker,
    );
    assert_eq!(names(&plan), ["sq/dense/r2"]);
    let run = runs.get("sq").unwrap();
    assert_eq!(run.trials_done(), 5);
    assert!((run.estimated_latency_s().unwrap() - (2.0 * 0.2e-3 + 0.5e-3)).abs() < 1e-12);
    assert_eq!(run.curve.len(), 2, "from the end of the warm-up on");

    // The last round fails for good: its trials return, then the budget goes
    // to the next best task until it is spent.
    let dense2 = plan.jobs[0].0.clone();
    let mut failed = view(&dense2, JobState::Failed);
    failed.errors.push(JobError {
        attempt: 3,
        worker: None,
        at: Millis(6),
        message: "boom".into(),
    });
    let plan = runs.job_ended(&failed, Millis(6), &one_worker);
    assert_eq!(names(&plan), ["sq/dense/r3"]);
    let dense3 = plan.jobs[0].0.clone();
    let mut plan = runs.job_ended(
        &done(&dense3, Value::Null, &[0.4e-3, 0.45e-3]),
        Millis(7),
        &one_worker,
    );
    // 3 trials left: rounds of at most 2 until they are spent, then compile.
    let mut spent = 0;
    while names(&plan) != ["sq/compile"] {
        assert_eq!(plan.jobs.len(), 1, "one worker, one round at a time");
        let round = plan.jobs[0].0.clone();
        assert!(
            round.trials <= 2 && round.name.starts_with("sq/"),
            "{}",
            round.name
        );
        spent += round.trials;
        let latencies: Vec<f64> = (0..round.trials)
            .map(|i| 0.3e-3 + f64::from(i) * 1e-5)
            .collect();
        plan = runs.job_ended(
            &done(&round, Value::Null, &latencies),
            Millis(8),
            &one_worker,
        );
    }
    assert_eq!(spent, 3, "the whole budget, no more");
    let Op::Model { model } = &plan.jobs[0].0.op else {
        panic!("compile is a model stage")
    };
    let ModelStage::Compile { tasks, .. } = model.as_ref() else {
        panic!("compile stage")
    };
    assert_eq!(
        tasks.len(),
        1,
        "only conv's first round reported a workload line"
    );
    assert_eq!(runs.get("sq").unwrap().state, ModelState::Compiling);

    let compile = plan.jobs[0].0.clone();
    let measured = serde_json::json!({
        "verified": true, "applied": 2, "tuned_functions": 2,
        "latency_s": {"untuned": 0.3, "tuned": 0.01, "onnxruntime": 0.012},
        "cold_choice": {"tasks": 1, "changed": 1, "kernels_cold_s": {"chosen": 0.009, "warm_best": 0.011}},
    });
    let plan = runs.job_ended(&done(&compile, measured, &[]), Millis(9), &one_worker);
    assert!(plan.jobs.is_empty());
    let view = runs.get("sq").unwrap().view();
    assert_eq!(view.state, ModelState::Done);
    assert!(view.verified);
    assert_eq!(view.latency_s.tuned, Some(0.01));
    // What the compile's cold choice did reaches the run's results.
    assert_eq!(
        view.verification["cold_choice"]["kernels_cold_s"]["chosen"],
        0.009
    );
    assert_eq!(view.trials_done, 10);
    assert!(view.tasks[1].trivial && view.tasks[1].trials == 0);
}

#[test]
fn a_dead_extraction_fails_the_run_with_its_error() {
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("bad", 10, 2), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let mut failed = view(&plan.jobs[0].0, JobState::Failed);
    failed.errors.push(JobError {
        attempt: 1,
        worker: None,
        at: Millis(2),
        message: "unsupported operator: FancyOp".into(),
    });
    runs.job_ended(&failed, Millis(2), &|_| FleetFor::workers(1));
    let run = runs.get("bad").unwrap();
    assert_eq!(run.state, ModelState::Failed);
    assert!(run.error.as_deref().unwrap().contains("FancyOp"));
}

#[test]
fn tasks_without_a_valid_first_round_are_dead_and_stopping_compiles() {
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("m", 100, 4), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let extract = plan.jobs[0].0.clone();
    let plan = runs.job_ended(
        &done(
            &extract,
            extracted(&[("a", 1, false), ("b", 1, false)]),
            &[],
        ),
        Millis(2),
        &|_| FleetFor::workers(2),
    );
    let (a1, b1) = (plan.jobs[0].0.clone(), plan.jobs[1].0.clone());
    runs.job_ended(&view(&a1, JobState::Failed), Millis(3), &|_| {
        FleetFor::workers(2)
    });
    assert!(runs.get("m").unwrap().tasks[0].dead);
    let plan = runs.job_ended(&done(&b1, Value::Null, &[1e-3]), Millis(4), &|_| {
        FleetFor::workers(2)
    });
    // Dead tasks get no rounds; the one live task gets both workers.
    assert_eq!(names(&plan), ["m/b/r2", "m/b/r3"]);
    let plan = runs
        .stop("m", Millis(5), &|_| FleetFor::workers(2))
        .unwrap();
    assert!(plan.jobs.is_empty(), "waits for the rounds in flight");
    for (round, now) in [(1, 6), (2, 7)] {
        let id = runs.get("m").unwrap().tasks[1].rounds[round].job_id.clone();
        let mut ended = view(&a1, JobState::Done);
        ended.job_id = id;
        let plan = runs.job_ended(&ended, Millis(now), &|_| FleetFor::workers(2));
        if round == 1 {
            assert!(plan.jobs.is_empty(), "r3 still runs");
        } else {
            assert_eq!(names(&plan), ["m/compile"]);
        }
    }
    assert!(matches!(
        runs.submit(submission("m", 1, 1), Target::of_kind("llvm"), Millis(7)),
        Err(ModelError::Exists(_))
    ));
}

#[test]
fn idle_workers_run_a_task_twice_at_once_and_its_records_merge() {
    let four = |_: &Target| FleetFor::workers(4);
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("m", 40, 4), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let extract = plan.jobs[0].0.clone();
    let line = serde_json::json!({"workload": ["hash", "b64"]});
    let plan = runs.job_ended(
        &done(
            &extract,
            extracted(&[("a", 1, false), ("b", 3, false)]),
            &[],
        ),
        Millis(2),
        &four,
    );
    // The warm-up: one round each (nothing to start a second search from).
    assert_eq!(names(&plan), ["m/a/r1", "m/b/r1"]);
    let (a1, b1) = (plan.jobs[0].0.clone(), plan.jobs[1].0.clone());
    let plan = runs.job_ended(&done(&a1, line.clone(), &[1e-3]), Millis(3), &four);
    // a is free again; b still runs its first round: a gets its second, and
    // three more at once from the same records, to fill the idle workers.
    assert_eq!(names(&plan), ["m/a/r2", "m/a/r3", "m/a/r4"]);
    let warm: Vec<_> = plan
        .jobs
        .iter()
        .map(|(_, e)| e.warm_start.clone().expect("warm-started"))
        .collect();
    assert!(warm.iter().all(|w| *w == warm[0]), "the same records");
    let ids: std::collections::HashSet<_> = plan.jobs.iter().map(|(w, _)| w.job_id()).collect();
    assert_eq!(ids.len(), 3, "distinct jobs");
    assert_eq!(runs.get("m").unwrap().rounds_in_flight(), 4);
    let (a2, a3) = (plan.jobs[0].0.clone(), plan.jobs[1].0.clone());

    // b's first round ends: its worker is free, and b, free too, comes first.
    let plan = runs.job_ended(&done(&b1, line.clone(), &[2e-3]), Millis(4), &four);
    assert_eq!(names(&plan), ["m/b/r2"]);
    // Two of a's rounds end with new records: each adds to the task's.
    runs.job_ended(
        &done(&a2, line.clone(), &[0.8e-3, 0.9e-3]),
        Millis(5),
        &four,
    );
    runs.job_ended(&done(&a3, line.clone(), &[0.7e-3]), Millis(6), &four);
    let task = &runs.get("m").unwrap().tasks[0];
    let best: Vec<f64> = task.records.iter().map(|r| r.record.latency_s).collect();
    assert_eq!(&best[..3], [0.7e-3, 0.8e-3, 0.9e-3], "merged, best first");
    assert_eq!(task.best(), Some(0.7e-3));
}

#[test]
fn a_fleet_whose_cost_model_knows_the_target_warms_up_in_short_rounds() {
    // The first round of each task on one worker, 16-trial rounds, with the
    // fleet's cost model for the target holding `samples`.
    let first_rounds = |samples: u32| {
        let fleet = move |_: &Target| FleetFor {
            slots: 1,
            cost_model_samples: samples,
        };
        let mut runs = ModelRuns::default();
        let plan = runs
            .submit(submission("m", 200, 16), Target::of_kind("llvm"), Millis(1))
            .unwrap();
        let extract = plan.jobs[0].0.clone();
        let tasks = extracted(&[("a", 1, false), ("b", 3, false), ("c", 1, true)]);
        let plan = runs.job_ended(&done(&extract, tasks, &[]), Millis(2), &fleet);
        let trials: Vec<u32> = plan.jobs.iter().map(|(w, _)| w.trials).collect();
        (runs, plan, trials, fleet)
    };
    assert_eq!(
        first_rounds(0).2,
        [16, 16],
        "a cold fleet: the run's rounds"
    );
    let below = WARM_FLEET_MIN_SAMPLES - 1;
    assert_eq!(first_rounds(below).2, [16, 16], "a model of a few rounds");
    let (mut runs, plan, trials, fleet) = first_rounds(WARM_FLEET_MIN_SAMPLES);
    assert_eq!(trials, [WARM_FLEET_WARM_UP_TRIALS; 2], "a trained one");
    // Later rounds are the run's own size again.
    let line = serde_json::json!({"workload": ["hash", "b64"]});
    let (a1, b1) = (plan.jobs[0].0.clone(), plan.jobs[1].0.clone());
    runs.job_ended(&done(&a1, line.clone(), &[1e-3]), Millis(3), &fleet);
    let plan = runs.job_ended(&done(&b1, line, &[2e-3]), Millis(4), &fleet);
    let next: Vec<u32> = plan.jobs.iter().map(|(w, _)| w.trials).collect();
    assert_eq!(next, [16], "{:?}", names(&plan));
}

#[test]
fn names_and_settings_are_checked() {
    let mut runs = ModelRuns::default();
    let llvm = Target::of_kind("llvm");
    let err = runs
        .submit(submission("a b", 1, 1), llvm.clone(), Millis(0))
        .unwrap_err();
    assert!(err.to_string().contains("may only hold"), "{err}");
    let err = runs
        .submit(submission("ok", 0, 1), llvm.clone(), Millis(0))
        .unwrap_err();
    assert!(err.to_string().contains("trials"), "{err}");
    let mut s = submission("ok", 10, 1);
    s.tuner.strategy = Some("annealing".into());
    let err = runs.submit(s, llvm.clone(), Millis(0)).unwrap_err();
    assert!(
        err.to_string().contains("tuner.strategy: unknown strategy"),
        "{err}"
    );
    // NHWC transposes the weights: only a pre-packed run folds that away.
    let mut s = submission("nhwc", 10, 1);
    s.source.layout = DataLayout::Nhwc;
    let err = runs.submit(s.clone(), llvm.clone(), Millis(0)).unwrap_err();
    assert!(
        err.to_string()
            .contains("layout NHWC needs weight pre-packing"),
        "{err}"
    );
    s.source.prepack = true;
    runs.submit(s, llvm, Millis(0))
        .expect("a pre-packed NHWC run is accepted");
    assert_eq!(
        runs.get("nhwc").map(|r| r.view().layout),
        Some(DataLayout::Nhwc)
    );
}

mod properties {
    //! Random runs: tasks, worker counts, and outcomes of every job (done
    //! with random latencies and trial counts, failed, cancelled) in random
    //! order. After every step the plan must respect the run's promises.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Outcome {
        Done { trials: u32, latency: f64 },
        Failed,
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            4 => (0u32..6, 1e-5f64..1e-2).prop_map(|(trials, latency)| Outcome::Done { trials, latency }),
            1 => Just(Outcome::Failed),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn budget_rounds_and_compile_are_kept(
            tasks in proptest::collection::vec((1u32..5, any::<bool>()), 1..8),
            budget in 1u32..60,
            per_round in 1u32..20,
            workers in 1usize..4,
            warm_fleet in any::<bool>(),
            outcomes in proptest::collection::vec((outcome(), 0usize..8), 1..120),
            stop_at in proptest::option::of(0usize..120),
        ) {
            let slots = move |_: &Target| FleetFor {
                slots: workers,
                cost_model_samples: if warm_fleet { WARM_FLEET_MIN_SAMPLES } else { 0 },
            };
            let mut runs = ModelRuns::default();
            let plan = runs.submit(submission("p", budget, per_round), Target::of_kind("llvm"), Millis(0)).unwrap();
            let extract = plan.jobs[0].0.clone();
            let names: Vec<String> = (0..tasks.len()).map(|i| format!("t{i}")).collect();
            let spec: Vec<(&str, u32, bool)> = tasks.iter().zip(&names).map(|((w, trivial), n)| (n.as_str(), *w, *trivial)).collect();
            let plan = runs.job_ended(&done(&extract, extracted(&spec), &[]), Millis(1), &slots);
            // Jobs planned and not yet ended, in order.
            let mut open: Vec<Workload> = plan.jobs.into_iter().map(|(w, _)| w).collect();
            let mut compiles = 0;
            let mut second_round_seen = false;
            for (step, (outcome, pick)) in outcomes.into_iter().enumerate() {
                if stop_at == Some(step) {
                    let plan = runs.stop("p", Millis(2), &slots);
                    if let Ok(plan) = plan {
                        open.extend(plan.jobs.into_iter().map(|(w, _)| w));
                    }
                }
                if open.is_empty() {
                    break;
                }
                let job = open.remove(pick % open.len());
                if matches!(&job.op, Op::Model { .. }) {
                    compiles += 1;
                    continue; // the run is compiling: its outcome is tested elsewhere
                }
                let view = match outcome {
                    Outcome::Done { trials, latency } => {
                        let latencies: Vec<f64> = (0..trials.min(job.trials)).map(|i| latency * (1.0 + f64::from(i))).collect();
                        done(&job, serde_json::json!({"workload": ["h", "b"]}), &latencies)
                    }
                    Outcome::Failed => view(&job, JobState::Failed),
                };
                let plan = runs.job_ended(&view, Millis(3 + step as u64), &slots);
                for (w, extras) in &plan.jobs {
                    if w.name.contains("/r2") {
                        second_round_seen = true;
                    }
                    // Dead tasks get no new rounds (rounds already in flight end on their own).
                    let run = runs.get("p").unwrap();
                    if let Some(task) = run.tasks.iter().find(|t| w.name.starts_with(&format!("p/{}/r", t.name))) {
                        prop_assert!(!task.dead, "{} planned for a dead task", w.name);
                    }
                    if let Some(warm) = &extras.warm_start {
                        prop_assert!(!warm.records.is_empty());
                    }
                }
                open.extend(plan.jobs.into_iter().map(|(w, _)| w));

                let run = runs.get("p").unwrap();
                // The budget is never overspent, counting rounds in flight.
                prop_assert!(run.trials_committed() <= budget, "{} > {budget}", run.trials_committed());
                for task in &run.tasks {
                    // Several rounds of a task at once only from its records,
                    // up to the cap, and only on workers that were idle.
                    let in_flight = task.rounds.iter().filter(|r| r.in_flight()).count();
                    prop_assert!(in_flight <= allocation::MAX_ROUNDS_AT_ONCE);
                    if in_flight > 1 {
                        prop_assert!(!task.history.is_empty());
                        prop_assert!(run.rounds_in_flight() <= workers, "{} rounds on {workers} workers", run.rounds_in_flight());
                    }
                    prop_assert!(!task.trivial || task.rounds.is_empty(), "trivial tasks get no rounds");

                    // Histories only ever improve.
                    prop_assert!(task.history.windows(2).all(|w| w[1] <= w[0]));
                }
                if second_round_seen {
                    // Every live task had its first round planned before any second.
                    prop_assert!(run.tasks.iter().all(|t| !t.live() || !t.rounds.is_empty() || t.dead));
                }
                // The compile job comes once, only when nothing is in flight.
                if run.compile_job.is_some() {
                    prop_assert_eq!(run.rounds_in_flight(), 0);
                    prop_assert_eq!(run.state, ModelState::Compiling);
                }
            }
            prop_assert!(compiles <= 1);
        }
    }
}

fn client_extracted(name: &str, trials: u32, per_round: u32) -> ModelSubmission {
    let tasks = [("mm", 2, false), ("copy", 1, true)]
        .iter()
        .map(|(task, weight, trivial)| ExtractedTask {
            name: task.to_string(),
            weight: *weight,
            tvmscript: format!("@T.prim_func\ndef {task}(): pass\n"),
            flops: Some(1e6),
            trivial: *trivial,
            workload: Some(serde_json::json!(["123", "bW9k"])),
        })
        .collect();
    let mut s = submission(name, trials, per_round);
    s.source.onnx_b64 = String::new();
    s.extracted = Some(ExtractedModel { tasks });
    s
}

#[test]
fn a_client_extracted_run_tunes_at_once_and_ends_without_a_compile_job() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(
            client_extracted("relax", 4, 2),
            Target::of_kind("llvm"),
            Millis(1),
        )
        .unwrap();
    assert!(plan.jobs.is_empty(), "no extract job: {:?}", names(&plan));
    let run = runs.get("relax").unwrap();
    assert_eq!(run.state, ModelState::Tuning);
    assert!(run.client_extracted());
    assert_eq!(run.target, Some(Target::of_kind("llvm")));
    assert_eq!(run.tasks.len(), 2);
    assert_eq!(
        run.tasks[0].workload_line,
        Some(serde_json::json!(["123", "bW9k"]))
    );

    // The core plans the rounds with refill, as when workers join.
    let plan = runs.refill(Millis(2), &one_worker);
    assert_eq!(names(&plan), ["relax/mm/r1"], "the trivial task gets none");
    let r1 = plan.jobs[0].0.clone();
    assert_eq!(r1.target, Target::of_kind("llvm"));
    let plan = runs.job_ended(
        &done(&r1, Value::Null, &[1e-3, 2e-3]),
        Millis(3),
        &one_worker,
    );
    assert_eq!(names(&plan), ["relax/mm/r2"]);
    let r2 = plan.jobs[0].0.clone();
    // Budget spent, nothing in flight: done, with no compile job.
    let plan = runs.job_ended(
        &done(&r2, Value::Null, &[0.5e-3, 3e-3]),
        Millis(4),
        &one_worker,
    );
    assert!(plan.jobs.is_empty(), "{:?}", names(&plan));
    let view = runs.get("relax").unwrap().view();
    assert_eq!(view.state, ModelState::Done);
    assert_eq!(view.compile_job, None);
    assert_eq!(view.trials_done, 4);
    assert_eq!(view.estimated_latency_s, Some(2.0 * 0.5e-3));
    assert_eq!(view.finished_at, Some(Millis(4)));
    assert!(runs.get("relax").unwrap().database().is_some());
}

#[test]
fn a_client_extracted_run_stops_without_a_compile_job() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    runs.submit(
        client_extracted("r", 100, 2),
        Target::of_kind("llvm"),
        Millis(1),
    )
    .unwrap();
    let plan = runs.refill(Millis(2), &one_worker);
    let r1 = plan.jobs[0].0.clone();
    runs.stop("r", Millis(3), &one_worker).unwrap();
    assert_eq!(
        runs.get("r").unwrap().state,
        ModelState::Tuning,
        "r1 in flight"
    );
    let plan = runs.job_ended(&done(&r1, Value::Null, &[1e-3]), Millis(4), &one_worker);
    assert!(plan.jobs.is_empty());
    assert_eq!(runs.get("r").unwrap().state, ModelState::Done);
}

#[test]
fn extracted_tasks_are_checked() {
    let mut s = client_extracted("r", 10, 2);
    assert_eq!(s.check_upload(), Ok(()));
    s.source.onnx_b64 = "AAAA".into();
    assert!(s.check_upload().unwrap_err().contains("not both"));
    s.source.onnx_b64.clear();
    s.extracted.as_mut().unwrap().tasks[1].weight = 0;
    assert_eq!(
        s.check_upload().unwrap_err(),
        "model `r`: extracted.tasks[1].weight must be at least 1"
    );
    s.extracted.as_mut().unwrap().tasks[1].weight = 1;
    s.extracted.as_mut().unwrap().tasks[0].tvmscript = " ".into();
    assert!(s
        .check_upload()
        .unwrap_err()
        .contains("extracted.tasks[0].tvmscript must be TVMScript"));
    s.extracted.as_mut().unwrap().tasks.clear();
    assert!(s.check_upload().unwrap_err().contains("1 to 10000 tasks"));
}

/// An extraction whose worker timed every function: (name, weight,
/// trivial, untuned seconds), and the untuned total.
fn extracted_timed(tasks: &[(&str, u32, bool, f64)]) -> Value {
    let rows: Vec<Value> = tasks
        .iter()
        .map(|(name, weight, trivial, untuned)| {
            serde_json::json!({
                "name": name, "weight": weight, "trivial": trivial, "untuned_time_s": untuned,
                "tvmscript": format!("@T.prim_func\ndef {name}(): pass\n"),
            })
        })
        .collect();
    let total: f64 = tasks.iter().map(|t| t.3).sum();
    serde_json::json!({"tasks": rows, "untuned_estimate_s": total, "inputs": [], "params": [], "outputs": []})
}

/// Ends every round the plan holds with `latency` per trial; the next plan.
fn end_rounds(runs: &mut ModelRuns, plan: Plan, latency: impl Fn(&str) -> f64, at: u64) -> Plan {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut next = Plan::default();
    for (round, _) in plan.jobs {
        let l = latency(&round.name);
        let records: Vec<f64> = (0..round.trials).map(|i| l + f64::from(i) * 1e-6).collect();
        let p = runs.job_ended(
            &done(&round, Value::Null, &records),
            Millis(at),
            &one_worker,
        );
        next.jobs.extend(p.jobs);
    }
    next
}

#[test]
fn the_estimate_is_the_whole_model_from_extraction_on_and_only_falls() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("sq", 24, 2), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let extract = plan.jobs[0].0.clone();
    // Untuned: conv 20 ms (2 calls), dense 6 ms, pool 1 ms (trivial).
    let extra = extracted_timed(&[
        ("conv", 2, false, 20e-3),
        ("pool", 1, true, 1e-3),
        ("dense", 1, false, 6e-3),
    ]);
    let mut plan = runs.job_ended(&done(&extract, extra, &[]), Millis(2), &one_worker);
    let first = runs.get("sq").unwrap().view();
    let estimate = first.estimated_latency_s.unwrap();
    assert!(
        (estimate - 27e-3).abs() < 1e-12,
        "every task at its untuned time: {estimate}"
    );
    assert_eq!(first.curve.len(), 1, "the curve starts at extraction");
    assert_eq!(first.curve[0].trials, 0);
    // conv improves round after round; dense's first round (7 ms a call) is
    // slower than its untuned time and must not raise the estimate.
    let mut at = 3;
    while !plan.jobs.is_empty() && !names(&plan).contains(&"sq/compile".to_string()) {
        let round = at;
        plan = end_rounds(
            &mut runs,
            plan,
            |name| {
                if name.contains("conv") {
                    8e-3 / f64::from(round as u32)
                } else {
                    7e-3
                }
            },
            at,
        );
        at += 1;
    }
    let view = runs.get("sq").unwrap().view();
    let curve: Vec<f64> = view.curve.iter().map(|p| p.estimated_latency_s).collect();
    assert!(curve.len() >= 4, "{curve:?}");
    assert!(
        curve.windows(2).all(|w| w[1] <= w[0]),
        "only falls: {curve:?}"
    );
    assert!(curve.last().unwrap() < &20e-3, "{curve:?}");
    // Shares are of the whole model, so they add up to one.
    let shares: f64 = view.tasks.iter().filter_map(|t| t.share).sum();
    assert!((shares - 1.0).abs() < 1e-9, "{shares}");
}

#[test]
fn a_trivial_task_that_the_tuned_model_leaves_large_gets_rounds() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    let plan = runs
        .submit(submission("sq", 40, 4), Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let extract = plan.jobs[0].0.clone();
    // Untuned: the convolution is 99.5% of the time, the concatenation
    // 0.3% (trivial), the reshape 0.001% (trivial).
    let extra = extracted_timed(&[
        ("conv", 1, false, 99.5e-3),
        ("concat", 1, true, 0.3e-3),
        ("reshape", 1, true, 1e-6),
    ]);
    let plan = runs.job_ended(&done(&extract, extra, &[]), Millis(2), &one_worker);
    assert_eq!(names(&plan), ["sq/conv/r1"]);
    // Tuned, the convolution takes 5 ms: the concatenation is now 6% of the model.
    let plan = end_rounds(&mut runs, plan, |_| 5e-3, 3);
    let run = runs.get("sq").unwrap();
    let concat = run.tasks.iter().find(|t| t.name == "concat").unwrap();
    assert!(!concat.trivial, "judged again by the tuned model");
    assert!(
        run.tasks
            .iter()
            .find(|t| t.name == "reshape")
            .unwrap()
            .trivial
    );
    assert!(
        names(&plan).contains(&"sq/concat/r1".to_string()),
        "{:?}",
        names(&plan)
    );
}

#[test]
fn an_auto_layout_run_takes_the_layout_its_extraction_used() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    let mut sub = submission("sq", 10, 2);
    sub.source = ModelSource::new(
        "AAAA".into(),
        Default::default(),
        tunefleet_shared::model::ModelMode::BEST,
    );
    let plan = runs
        .submit(sub, Target::of_kind("llvm"), Millis(1))
        .unwrap();
    let extract = plan.jobs[0].0.clone();
    let mut extra = extracted(&[("conv", 1, false)]);
    extra["layout"] = "NCHW".into();
    extra["layout_note"] = "NHWC could not be used, so the run is tuned in NCHW: boom".into();
    runs.job_ended(&done(&extract, extra, &[]), Millis(2), &one_worker);
    let view = runs.get("sq").unwrap().view();
    assert_eq!(view.mode.layout, DataLayout::Nchw);
    assert_eq!(
        view.layout,
        DataLayout::Nchw,
        "compile and `tunefleet compile` use it"
    );
    assert!(view.mode.prepack && view.mode.auto);
    assert_eq!(view.mode.recipe, tunefleet_shared::model::LATEST_RECIPE);
    assert!(view.mode.note.as_deref().unwrap().contains("boom"));
    // A run that named its layout keeps it (its extraction fails instead).
    let mut named = submission("named", 10, 2);
    named.source.prepack = true;
    named.source.layout = DataLayout::Nhwc;
    let plan = runs
        .submit(named, Target::of_kind("llvm"), Millis(3))
        .unwrap();
    let mut extra = extracted(&[("conv", 1, false)]);
    extra["layout"] = "NCHW".into();
    runs.job_ended(&done(&plan.jobs[0].0, extra, &[]), Millis(4), &one_worker);
    assert_eq!(
        runs.get("named").unwrap().view().mode.layout,
        DataLayout::Nhwc
    );
}

/// Submits `s` for a CPU and ends its extraction with one convolution: the
/// plan with the task's first round.
fn one_conv_on_a_cpu(runs: &mut ModelRuns, s: ModelSubmission) -> Plan {
    let plan = runs.submit(s, Target::of_kind("llvm"), Millis(1)).unwrap();
    runs.job_ended(
        &done(&plan.jobs[0].0, extracted(&[("conv", 1, false)]), &[]),
        Millis(2),
        &|_: &Target| FleetFor::workers(1),
    )
}

#[test]
fn cpu_rounds_search_the_best_rule_set_unless_the_run_names_one() {
    let mut runs = ModelRuns::default();
    let plan = one_conv_on_a_cpu(&mut runs, submission("auto", 8, 2));
    assert_eq!(
        plan.jobs[0].1.tuner.rules.as_deref(),
        Some(tunefleet_shared::model::BEST_RULES)
    );
    let mut named = submission("named", 8, 2);
    named.tuner.rules = Some("default".into());
    let plan = one_conv_on_a_cpu(&mut runs, named);
    assert_eq!(plan.jobs[0].1.tuner.rules.as_deref(), Some("default"));
}

#[test]
fn cpu_rounds_of_sixteen_trials_compare_the_rule_sets_when_the_run_asks_per_task() {
    let one_worker = |_: &Target| FleetFor::workers(1);
    let mut runs = ModelRuns::default();
    // Named nothing: `union`, round after round.
    let mut plan = one_conv_on_a_cpu(&mut runs, submission("unnamed", 64, 16));
    for latency in [1e-3, 2e-3] {
        assert_eq!(plan.jobs[0].1.tuner.rules.as_deref(), Some("union"));
        let line = serde_json::json!({"workload": ["hash", "b64"]});
        plan = runs.job_ended(
            &done(&plan.jobs[0].0, line, &[latency]),
            Millis(3),
            &one_worker,
        );
    }
    let mut per_task = submission("per-task", 64, 16);
    per_task.tuner.rules = Some(tunefleet_shared::model::PER_TASK_RULES.into());
    let plan = one_conv_on_a_cpu(&mut runs, per_task);
    let rules = |plan: &Plan| plan.jobs[0].1.tuner.rules.clone();
    assert_eq!(rules(&plan).as_deref(), Some("union"));
    // Its records have no `SRS` tiling: after the `blocked` round, `union`.
    let workload_line = serde_json::json!({"workload": ["hash", "b64"]});
    let plan = runs.job_ended(
        &done(&plan.jobs[0].0, workload_line, &[1e-3]),
        Millis(3),
        &one_worker,
    );
    assert_eq!(rules(&plan).as_deref(), Some("blocked"));
    let plan = runs.job_ended(
        &done(&plan.jobs[0].0, Value::Null, &[2e-3]),
        Millis(4),
        &one_worker,
    );
    assert_eq!(rules(&plan).as_deref(), Some("union"));
}
