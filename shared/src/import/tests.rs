use super::*;
use serde_json::json;

const W: &str = "database_workload.json";
const R: &str = "database_tuning_record.json";

fn record(secs: f64, mcpu: &str) -> Value {
    json!([[["step", 1]], [secs, secs], {"kind": "llvm", "keys": ["cpu"], "mcpu": mcpu}, []])
}

fn line(hash: &str) -> Value {
    json!([hash, "AAAA"])
}

#[test]
fn a_database_becomes_workloads_with_their_records_fastest_first() {
    let workloads = format!("{}\n{}\n{}\n", line("1"), line("2"), line("1"));
    let records = format!(
        "{}\n{}\n\n{}\n{}\n",
        json!([0, record(3e-5, "znver3")]),
        json!([2, record(1e-5, "znver3")]),
        json!([1, record(2e-5, "znver3")]),
        // The same record twice (under the duplicate line) is kept once.
        json!([2, record(3e-5, "znver3")]),
    );
    let parsed = parse_metaschedule_database(&workloads, W, &records, R).unwrap();
    assert_eq!(parsed.len(), 2, "two distinct workload lines");
    assert_eq!(parsed[0].workload, line("1"));
    assert_eq!(
        parsed[0].records,
        vec![record(1e-5, "znver3"), record(3e-5, "znver3")]
    );
    assert_eq!(parsed[1].records, vec![record(2e-5, "znver3")]);
    for w in &parsed {
        w.check().unwrap();
    }
}

#[test]
fn workloads_without_records_are_left_out() {
    let workloads = format!("{}\n{}\n", line("1"), line("2"));
    let records = format!("{}\n", json!([1, record(1e-5, "znver3")]));
    let parsed = parse_metaschedule_database(&workloads, W, &records, R).unwrap();
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0].workload, line("2"));
}

#[test]
fn errors_name_the_file_and_line() {
    let bad_line = parse_metaschedule_database("[\"1\",\"A\"]\n[1,2]\n", W, "", R).unwrap_err();
    assert_eq!((bad_line.file.as_str(), bad_line.line), (W, 2));
    assert!(
        bad_line.to_string().contains("structural_hash"),
        "{bad_line}"
    );

    let not_json = parse_metaschedule_database("{\n", W, "", R).unwrap_err();
    assert!(not_json
        .to_string()
        .starts_with("database_workload.json line 1: not JSON"));

    let workloads = format!("{}\n", line("1"));
    let index = parse_metaschedule_database(
        &workloads,
        W,
        &format!("{}\n", json!([1, record(1e-5, "x")])),
        R,
    )
    .unwrap_err();
    assert_eq!((index.file.as_str(), index.line), (R, 1));
    assert!(index.message.contains("workload index 1"), "{index}");

    let no_target = parse_metaschedule_database(
        &workloads,
        W,
        &format!("\n{}\n", json!([0, [[], [1e-5], {"mcpu": "x"}, []]])),
        R,
    )
    .unwrap_err();
    assert_eq!(no_target.line, 2);
    assert!(no_target.message.contains("target"), "{no_target}");

    let no_secs = parse_metaschedule_database(
        &workloads,
        W,
        &format!("{}\n", json!([0, [[], [], {"kind": "llvm"}, []]])),
        R,
    )
    .unwrap_err();
    assert!(no_secs.message.contains("run_secs"), "{no_secs}");
}

#[test]
fn the_fastest_records_are_kept_up_to_the_limit() {
    let mut records: Vec<Value> = (0..MAX_IMPORTED_RECORDS + 10)
        .rev()
        .map(|i| record(1e-6 * (i + 1) as f64, "znver3"))
        .collect();
    keep_fastest(&mut records);
    assert_eq!(records.len(), MAX_IMPORTED_RECORDS);
    assert_eq!(record_seconds(&records[0]), Some(1e-6));
}

#[test]
fn record_targets_follow_the_matching_rule() {
    let target = record_target(&record(1e-5, "znver3")).unwrap();
    assert!(target.serves(&Target::of_kind("llvm")));
    assert!(target.serves(&Target::parse("llvm -mcpu=znver3").unwrap()));
    assert!(!target.serves(&Target::parse("llvm -mcpu=znver4").unwrap()));
}

#[test]
fn workload_keys_are_checked_per_line() {
    let good = json!({"content_key": "abc", "workload": line("1")}).to_string();
    let keys = parse_workload_keys(&format!("{good}\n{good}\n"), "k.json").unwrap();
    assert_eq!(keys.len(), 1);
    let err = parse_workload_keys(
        &format!(
            "{good}\n{}\n",
            json!({"content_key": "", "workload": line("1")})
        ),
        "k.json",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "k.json line 2: content_key must be 1 to 64 characters"
    );
}
