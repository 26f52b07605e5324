//! Protocol values for tests in other crates (feature `testing`): the one
//! place they build a workload or a job view, so a new field is added once;
//! and the YAML fast path's check against serde-saphyr, for the fuzzer.

use crate::protocol::Millis;
use crate::protocol::{JobChange, JobChangeOf, JobState, JobView, TuningRecord};
use crate::workload::Workload;

/// A model run `name` in `state`, 16 of 64 trials done, nothing measured.
pub fn model_view(name: &str, state: crate::model::ModelState) -> crate::model::ModelView {
    crate::model::ModelView {
        name: name.into(),
        state,
        target: crate::target::Target::parse(r#"{"kind":"llvm"}"#).expect("target"),
        trials_total: 64,
        trials_done: 16,
        trials_per_round: 16,
        tasks: vec![],
        estimated_latency_s: None,
        verified: false,
        latency_s: crate::model::ModelLatencies::default(),
        records_applied: None,
        functions_tuned: None,
        error: None,
        curve: vec![],
        extract_job: "e".repeat(64),
        compile_job: None,
        stop_requested: false,
        io: serde_json::Value::Null,
        tuner: crate::model::TunerSettings::default(),
        verification: serde_json::Value::Null,
        prepack: false,
        layout: Default::default(),
        mode: Default::default(),
        created_at: Millis(1),
        updated_at: Millis(1),
        finished_at: None,
    }
}

/// A 64³ float32 matmul for plain `llvm`, 16 trials.
pub fn workload(name: &str) -> Workload {
    serde_json::from_value(serde_json::json!({
        "name": name, "op": "matmul", "shape": {"m": 64, "n": 64, "k": 64},
        "dtype": "float32", "target": {"kind": "llvm"}, "trials": 16
    }))
    .expect("test workload")
}

/// A job `id` in `state`, created and updated at 1 ms, one attempt.
pub fn job(id: &str, state: JobState) -> JobView {
    JobView {
        job_id: id.into(),
        name: format!("job-{id}"),
        workload: workload(&format!("job-{id}")),
        state,
        attempts: 1,
        worker: None,
        trials_done: 0,
        trials_total: 16,
        best_latency_s: None,
        records: vec![],
        history: vec![],
        errors: vec![],
        result: None,
        created_at: Millis(1),
        updated_at: Millis(1),
        started_at: None,
        finished_at: None,
        cache_hit: false,
        cached_from: None,
        actions: Vec::new(),
    }
}

/// The `job_changed` delta for `view`, as a subscriber reads what the master
/// writes ([`JobChangeOf`]).
pub fn job_change(view: &JobView) -> JobChange {
    let text = serde_json::to_string(&JobChangeOf::new(view)).expect("a change serialises");
    serde_json::from_str(&text).expect("a change reads back")
}

/// Two jobs for export and table tests: `aa` done by `gpu-1` at 25 µs with
/// one record and a name that needs quoting (`mm, "big"`), and `bb` queued.
pub fn done_and_queued_jobs() -> Vec<JobView> {
    let mut done = job("aa", JobState::Done);
    done.name = "mm, \"big\"".into();
    done.best_latency_s = Some(2.5e-5);
    done.worker = Some("gpu-1".into());
    done.trials_done = 16;
    done.records = vec![TuningRecord {
        latency_s: 2.5e-5,
        record: serde_json::json!({"trace": []}),
    }];
    vec![done, job("bb", JobState::Queued)]
}

/// Whether the YAML fast path read `text` (`Ok(false)`: it declined, and
/// serde-saphyr reads the file), or `Err` with both answers where it
/// disagrees with serde-saphyr. For the differential fuzz target.
pub fn yaml_fast_path_agrees(text: &str) -> Result<bool, String> {
    crate::yaml_tree::fast_path_agrees(text, crate::workload::MAX_YAML_DOCUMENTS)
}
