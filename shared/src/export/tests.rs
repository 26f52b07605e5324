use super::*;
use crate::protocol::{JobState, ResultMeta, TuningRecord};
use crate::testing::{done_and_queued_jobs as jobs, job};

#[test]
fn latency_uses_a_readable_unit() {
    assert_eq!(format_latency(12.34e-6), "12.3 µs");
    assert_eq!(format_latency(4.5678e-3), "4.568 ms");
    assert_eq!(format_latency(1.5), "1.500 s");
    assert_eq!(format_latency(f64::NAN), "-");
}

#[test]
fn csv_fields_are_quoted_only_when_needed() {
    assert_eq!(csv_field("plain"), "plain");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    assert_eq!(csv_field(" pad"), "\" pad\"");
    assert_eq!(csv_field(""), "");
    assert_eq!(csv_line(&["a", "b,c", ""]), "a,\"b,c\",\n");
}

#[test]
fn json_is_an_array_of_job_objects() {
    let value: serde_json::Value = serde_json::from_str(&to_json(&jobs())).unwrap();
    let arr = value.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["job_id"], "aa");
    assert_eq!(arr[0]["state"], "done");
    assert_eq!(arr[0]["best_latency_s"], 2.5e-5);
    assert_eq!(arr[0]["records"].as_array().unwrap().len(), 1);
    assert!(arr[1]["best_latency_s"].is_null());
    assert!(to_json(&[]).starts_with("[]"));
}

#[test]
fn csv_has_the_header_and_quotes_names() {
    let text = to_csv(&jobs());
    let mut lines = text.lines();
    assert_eq!(lines.next().unwrap(), CSV_HEADER.join(","));
    let row = lines.next().unwrap();
    assert!(row.starts_with("aa,\"mm, \"\"big\"\"\",matmul,"), "{row}");
    assert!(row.contains(",done,1,gpu-1,0.000025,"), "{row}");
    assert!(row.ends_with(",16,16"), "{row}");
    let queued = lines.next().unwrap();
    assert!(queued.contains(",queued,1,,,,0,16"), "{queued}");
    assert_eq!(lines.next(), None);
}

#[test]
fn gflops_prefers_the_reported_value() {
    let mut j = job("g", JobState::Done);
    assert_eq!(job_gflops(&j), None);
    j.best_latency_s = Some(1e-3);
    // 2 * 64^3 flops in 1 ms
    let computed = job_gflops(&j).unwrap();
    assert!((computed - 2.0 * 64f64.powi(3) / 1e-3 / 1e9).abs() < 1e-9);
    j.result = Some(meta(serde_json::Value::Null, Some(42.0)));
    assert_eq!(job_gflops(&j), Some(42.0));
}

fn meta(extra: serde_json::Value, gflops: Option<f64>) -> ResultMeta {
    ResultMeta {
        trials: 8,
        wall_time_s: 1.0,
        worker: "w".into(),
        backend: "tvm".into(),
        tvm_version: Some("0.27.0.post1".into()),
        gflops,
        extra,
        target: None,
    }
}

fn tuned(id: &str, workload: serde_json::Value, latencies: &[f64]) -> JobView {
    let mut j = job(id, JobState::Done);
    j.records = latencies
        .iter()
        .map(|l| TuningRecord {
            latency_s: *l,
            record: serde_json::json!([{"insts": []}, [l], {"kind": "llvm"}, []]),
        })
        .collect();
    j.result = Some(meta(serde_json::json!({ "workload": workload }), None));
    j
}

#[test]
fn metaschedule_database_indexes_shared_workloads_and_skips_sim_jobs() {
    let w1 = serde_json::json!(["123", "AAAA"]);
    let w2 = serde_json::json!(["456", "BBBB"]);
    let jobs = vec![
        tuned("a", w1.clone(), &[1e-3, 2e-3]),
        job("sim", JobState::Done),
        tuned("b", w2.clone(), &[5e-4]),
        tuned("c", w1.clone(), &[3e-3]),
    ];
    assert!(has_metaschedule_records(&jobs[0]));
    assert!(!has_metaschedule_records(&jobs[1]));
    let db = metaschedule_database(&jobs).unwrap();
    assert_eq!((db.jobs, db.record_count, db.skipped), (3, 4, 1));
    let workloads: Vec<serde_json::Value> = db
        .workloads
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(workloads, vec![w1, w2]);
    let indexes: Vec<u64> = db
        .records
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()[0]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(indexes, vec![0, 0, 1, 0]);
    let err = metaschedule_database(&[job("sim", JobState::Done)]).unwrap_err();
    assert_eq!(err, NoMetascheduleRecords { skipped: 1 });
    assert!(err.to_string().contains("(1 job without"), "{err}");
}
