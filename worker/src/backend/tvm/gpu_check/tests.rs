use super::*;

fn check(verified: bool, rel: f64, tuned: Option<f64>) -> serde_json::Value {
    serde_json::json!({
        "verified": verified, "device": "NVIDIA H200", "arch": "sm_90",
        "outputs": [{"ok": verified, "output": 2, "rel_error": rel, "allowed": 0.02,
                     "max_abs_error": 0.5, "non_finite_mismatch": false}],
        "tuned_latency_s": tuned, "untuned_latency_s": 0.004,
        "timer": "time_evaluator median, repeat 10 x >=50 ms"
    })
}

#[test]
fn a_verified_and_timed_check_becomes_the_verification() {
    let (v, c) = read(Some(&check(true, 0.003, Some(0.0002)))).unwrap();
    assert_eq!(v.tuned_latency_s, 0.0002);
    assert_eq!(v.reference_latency_s, 0.004);
    assert_eq!(v.max_rel_error, 0.003);
    assert_eq!(v.max_abs_error, 0.5);
    assert_eq!(c.device.as_deref(), Some("NVIDIA H200"));
}

#[test]
fn a_mismatch_fails_the_job_and_says_by_how_much() {
    let err = read(Some(&check(false, 1.41, None)))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not match TVM's default GPU schedule"),
        "{err}"
    );
    assert!(
        err.contains("NVIDIA H200") && err.contains("1.41e0") && err.contains("allowed 2e-2"),
        "{err}"
    );
}

#[test]
fn no_check_or_no_latency_is_never_reported_as_a_result() {
    let err = read(None).unwrap_err().to_string();
    assert!(err.contains("did not check the CUDA kernel"), "{err}");
    let err = read(Some(&check(true, 0.0, None))).unwrap_err().to_string();
    assert!(err.contains("not timed"), "{err}");
    let err = read(Some(&check(true, 0.0, Some(f64::NAN))))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not timed"), "{err}");
    let err = read(Some(&serde_json::json!({"verified": "yes"})))
        .unwrap_err()
        .to_string();
    assert!(err.contains("malformed"), "{err}");
}

#[test]
fn unwritten_outputs_and_integer_mismatches_are_named() {
    let value = serde_json::json!({
        "verified": false, "device": "GPU",
        "outputs": [
            {"ok": false, "output": 1, "rel_error": null, "allowed": 0.0, "max_abs_error": 3.0, "mismatches": 12},
            {"ok": false, "output": 2, "rel_error": 0.0, "allowed": 0.1, "max_abs_error": 0.0, "non_finite_mismatch": true}
        ]
    });
    let err = read(Some(&value)).unwrap_err().to_string();
    assert!(err.contains("output 1: 12 element(s) differ"), "{err}");
    assert!(err.contains("output 2 has NaN"), "{err}");
}
