use super::*;
use serde_json::json;
use tunefleet_shared::protocol::{JobState, ResultMeta, TuningRecord};
use tunefleet_shared::testing::job;

/// The master's reply to `results`, as the page receives it.
fn reply(jobs: &[JobView]) -> String {
    json!({"type": "reply", "id": 7, "body": {"kind": "results", "jobs": jobs}}).to_string()
}

fn tuned(id: &str) -> JobView {
    let mut j = job(id, JobState::Done);
    j.records = vec![TuningRecord {
        latency_s: 1e-3,
        record: json!([{"insts": []}, [1e-3], {"kind": "llvm"}, []]),
    }];
    j.result = Some(ResultMeta {
        trials: 8,
        wall_time_s: 1.0,
        worker: "w".into(),
        backend: "tvm".into(),
        tvm_version: None,
        gflops: None,
        extra: json!({"workload": ["123", "AAAA"]}),
        target: None,
    });
    j
}

#[test]
fn every_download_has_one_name_read_back() {
    for (download, name) in Download::NAMES {
        assert_eq!(download.name(), name);
        assert_eq!(Download::from_name(name), Some(download));
    }
    assert_eq!(Download::from_name("xml"), None);
}

#[test]
fn csv_and_json_are_the_clis_files_for_the_same_jobs() {
    let mut named = job("aa", JobState::Done);
    named.name = "mm, \"big\"".into();
    let jobs = vec![named, job("bb", JobState::Queued)];

    let csv = make(Download::Csv, &reply(&jobs)).unwrap();
    assert_eq!(csv.notice, None);
    assert_eq!(
        csv.files,
        vec![SavedFile {
            name: "tunefleet-results.csv".into(),
            mime: "text/csv".into(),
            text: export::to_csv(&jobs),
        }]
    );

    let json_files = make(Download::Json, &reply(&jobs)).unwrap();
    assert_eq!(json_files.files.len(), 1);
    assert_eq!(json_files.files[0].name, "tunefleet-results.json");
    let back: Vec<JobView> = serde_json::from_str(&json_files.files[0].text).unwrap();
    assert_eq!(back, jobs);
}

#[test]
fn the_metaschedule_database_is_two_files_and_says_what_it_skipped() {
    let jobs = vec![tuned("a"), job("sim", JobState::Done)];
    let files = make(Download::Metaschedule, &reply(&jobs)).unwrap();
    let db = export::metaschedule_database(&jobs).unwrap();
    let names: Vec<&str> = files.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [METASCHEDULE_WORKLOAD_FILE, METASCHEDULE_RECORD_FILE]
    );
    assert_eq!(files.files[0].text, db.workloads);
    assert_eq!(files.files[1].text, db.records);
    assert_eq!(
        files.notice.as_deref(),
        Some("MetaSchedule database: 1 jobs exported, 1 without MetaSchedule records skipped")
    );

    let none = make(Download::Metaschedule, &reply(&jobs[1..])).unwrap_err();
    assert!(none.contains("without"), "{none}");
}

#[test]
fn a_reply_that_is_not_results_is_refused_with_a_reason() {
    let err = make(
        Download::Csv,
        r#"{"type":"reply","id":1,"body":{"kind":"status"}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err,
        "the master's results could not be read: body: missing field `jobs`"
    );
    assert!(make(Download::Json, "not json").is_err());
}

#[test]
fn the_answer_reaches_the_page_as_sent() {
    // The page decodes with its own JSON reader, not serde's.
    let jobs = vec![tuned("a"), job("sim", JobState::Done)];
    for answer in [
        make(Download::Metaschedule, &reply(&jobs)),
        make(Download::Csv, &reply(&jobs)),
        make(Download::Csv, "{}"),
    ] {
        let text = serde_json::to_string(&answer).unwrap();
        let back: Result<Files, String> = tunefleet_shared::tree::from_str(&text).unwrap();
        assert_eq!(back, answer);
    }
}
