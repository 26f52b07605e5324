use super::*;
use tunefleet_shared::testing::done_and_queued_jobs as jobs;

#[test]
fn json_is_an_array_of_job_objects() {
    let value: serde_json::Value = serde_json::from_str(&to_json(&jobs()).unwrap()).unwrap();
    let arr = value.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["job_id"], "aa");
    assert_eq!(arr[0]["state"], "done");
    assert_eq!(arr[0]["best_latency_s"], 2.5e-5);
    assert_eq!(arr[0]["records"].as_array().unwrap().len(), 1);
    assert!(arr[1]["best_latency_s"].is_null());
    assert!(arr[1]["name"].is_string());
}

#[test]
fn table_has_one_line_per_job() {
    let text = to_table(&jobs());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("JOB_ID"));
    assert!(lines[1].contains("25.0 µs"), "{text}");
    assert!(lines[2].contains("0/16"), "{text}");
    assert_eq!(to_table(&[]), "no jobs\n");
}

#[test]
fn the_table_says_what_each_job_ran_for() {
    let mut jobs = jobs();
    let text = to_table(&jobs);
    assert!(text.lines().next().unwrap().contains("TARGET"), "{text}");
    // A finished job shows the target its worker completed; an open one
    // the target it asked for.
    let gpu = tunefleet_shared::target::Target::parse(r#"{"kind":"cuda","arch":"sm_90"}"#).unwrap();
    jobs[0].result = Some(tunefleet_shared::protocol::ResultMeta {
        trials: 16,
        wall_time_s: 1.0,
        worker: "gpu-1".into(),
        backend: "tvm".into(),
        tvm_version: None,
        gflops: None,
        extra: serde_json::Value::Null,
        target: Some(gpu),
    });
    jobs[1].workload.target = tunefleet_shared::target::Target::of_kind("cuda");
    assert_eq!(target_text(&jobs[0]), "cuda sm_90");
    assert_eq!(target_text(&jobs[1]), "cuda");
    assert!(to_table(&jobs).contains("cuda sm_90"));
}
