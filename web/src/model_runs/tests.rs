use super::*;
use tunefleet_shared::model::ModelLatencies;

pub(crate) fn view(state: ModelState) -> ModelView {
    tunefleet_shared::testing::model_view("sq", state)
}

/// A tuned task with no measurement yet, its first round `job_id`.
fn task(job_id: Option<&str>) -> ModelTaskView {
    ModelTaskView {
        job_id: job_id.map(Into::into),
        name: "fused_conv2d".into(),
        weight: 1,
        trials: 0,
        best_latency_s: None,
        share: None,
        flops: None,
        untuned_share: None,
        trivial: false,
        dead: false,
        rounds: vec![],
        best_tiling: None,
    }
}

#[test]
fn nothing_measured_before_compiling() {
    let v = view(ModelState::Tuning);
    assert_eq!(measured(&v), None);
    assert_eq!(verified(&v), "–");
    assert_eq!(applied(&v), "–");
    assert_eq!(
        crate::format::trials_percent(v.trials_done, v.trials_total),
        25.0
    );
    assert_eq!(
        state_hint(&view(ModelState::Extracting)),
        "waiting for a TVM worker to extract the tasks"
    );
}

#[test]
fn measured_latencies_with_ratios() {
    let mut v = view(ModelState::Done);
    v.latency_s = ModelLatencies {
        untuned: Some(4e-3),
        tuned: Some(1e-3),
        onnxruntime: Some(2e-3),
    };
    v.verified = true;
    v.records_applied = Some(12);
    v.functions_tuned = Some(13);
    let m = measured(&v).unwrap();
    assert_eq!(m.tuned, "1.000 ms");
    assert_eq!(m.untuned, "4.000 ms");
    assert_eq!(m.onnxruntime, "2.000 ms");
    assert_eq!(m.speedup.as_deref(), Some("4.0× faster than untuned"));
    assert_eq!(
        m.vs_onnxruntime.as_deref(),
        Some("0.50× onnxruntime's time")
    );
    assert!(m.beats_onnxruntime);
    assert_eq!(verified(&v), "yes");
    assert_eq!(applied(&v), "12/13");

    v.latency_s.onnxruntime = None;
    v.verified = false;
    let m = measured(&v).unwrap();
    assert_eq!(m.onnxruntime, "–");
    assert_eq!(m.vs_onnxruntime, None);
    assert!(!m.beats_onnxruntime);
    assert_eq!(verified(&v), "no");
}

#[test]
fn task_notes_and_shares() {
    let mut t = ModelTaskView {
        weight: 2,
        trials: 32,
        best_latency_s: Some(1e-4),
        share: Some(0.4123),
        ..task(None)
    };
    assert_eq!(share(&t), "41.2%");
    assert_eq!(task_note(&t), "");
    t.best_tiling = Some("SRS".into());
    assert_eq!(task_note(&t), "best tiled SRS");
    t.dead = true;
    assert_eq!(task_note(&t), "no valid candidate");
    t.trivial = true;
    t.share = None;
    assert_eq!(task_note(&t), "trivial: default schedule");
    assert_eq!(share(&t), "–");
    assert_eq!(latency(None), "–");
    assert_eq!(latency(Some(f64::NAN)), "–");
}

#[test]
fn round_sizes_say_when_the_first_rounds_were_short() {
    let mut v = view(ModelState::Tuning);
    // Before the tasks are extracted, and while their jobs are unknown.
    assert_eq!(round_sizes(&v, |_| Some(4)), "16 per round");
    v.tasks = vec![task(Some("a")), task(Some("b"))];
    assert_eq!(round_sizes(&v, |_| None), "16 per round");
    // A warm fleet's first rounds.
    assert_eq!(round_sizes(&v, |_| Some(4)), "16 per round, first rounds 4");
    // A cold one's: full size, even where the budget's end cut one short.
    let cold = |j: &JobId| Some(if j == "a" { 16 } else { 7 });
    assert_eq!(round_sizes(&v, cold), "16 per round");
}
