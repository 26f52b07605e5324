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
