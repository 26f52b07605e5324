use super::*;
use tunefleet_shared::protocol::{JobState, ResultMeta};
use tunefleet_shared::testing::job;

#[test]
fn merging_keeps_what_is_there_and_adds_each_new_record_once() {
    let old_workloads = "[\"0x1\",\"AAA\"]\n";
    let old_records = "[0,[[\"t1\"],[0.5],{},[]]]\n";
    let db = MetascheduleDb {
        workloads: "[\"0x2\",\"BBB\"]\n[\"0x1\",\"AAA\"]\n".into(),
        records:
            "[1,[[\"t1\"],[0.5],{},[]]]\n[1,[[\"t2\"],[0.4],{},[]]]\n[0,[[\"t3\"],[0.1],{},[]]]\n"
                .into(),
        jobs: 2,
        record_count: 3,
        skipped: 0,
    };
    let merged = merge_databases(old_workloads, old_records, &db).unwrap();
    assert_eq!(merged.workloads, "[\"0x1\",\"AAA\"]\n[\"0x2\",\"BBB\"]\n");
    assert_eq!(
        merged.records,
        "[0,[[\"t1\"],[0.5],{},[]]]\n[0,[[\"t2\"],[0.4],{},[]]]\n[1,[[\"t3\"],[0.1],{},[]]]\n"
    );
    assert_eq!(merged.record_count, 2, "t1 was there already");
    // Merging the result again adds nothing.
    let again = merge_databases(&merged.workloads, &merged.records, &db).unwrap();
    assert_eq!(again.records, merged.records);
    assert_eq!(again.record_count, 0);
}

#[test]
fn a_broken_existing_database_is_named_with_its_line() {
    let db = MetascheduleDb::default();
    let err = merge_databases("[\"0x1\",\"A\"]\nnot json\n", "", &db).unwrap_err();
    assert!(err.starts_with("database_workload.json line 2:"), "{err}");
    let err = merge_databases("[\"0x1\",\"A\"]\n", "[5,[]]\n", &db).unwrap_err();
    assert!(err.contains("database_tuning_record.json line 1"), "{err}");
}

#[test]
fn only_target_keeps_results_measured_for_a_serving_target() {
    let measured = |id: &str, target: &str| {
        let mut j = job(id, JobState::Done);
        j.result = Some(ResultMeta {
            trials: 1,
            wall_time_s: 0.1,
            worker: "w".into(),
            backend: "tvm".into(),
            tvm_version: None,
            gflops: None,
            extra: serde_json::Value::Null,
            target: Some(Target::parse(target).unwrap()),
        });
        j
    };
    let jobs = vec![
        measured("z3", r#"{"kind":"llvm","mcpu":"znver3"}"#),
        measured("z4", r#"{"kind":"llvm","mcpu":"znver4"}"#),
    ];
    let znver3 = Target::parse("llvm -mcpu=znver3").unwrap();
    let kept: Vec<_> = only_target(jobs.clone(), Some(&znver3))
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(kept, ["z3"]);
    assert_eq!(only_target(jobs, Some(&Target::of_kind("llvm"))).len(), 2);
}

#[test]
fn render_matches_results_formats() {
    let jobs = vec![job("aa", JobState::Done)];
    assert!(render(ExportFormat::Csv, &jobs)
        .unwrap()
        .starts_with("job_id,name,op,shape,dtype,state,"));
    let json: serde_json::Value =
        serde_json::from_str(&render(ExportFormat::Json, &jobs).unwrap()).unwrap();
    assert_eq!(json[0]["job_id"], "aa");
}

#[test]
fn atomic_write_replaces_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    std::fs::write(&path, "old").unwrap();
    write_atomically(&path, b"new").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let err = write_atomically(&dir.path().join("missing/out.csv"), b"x").unwrap_err();
    assert!(err.to_string().contains("missing/out.csv"), "{err}");
}
