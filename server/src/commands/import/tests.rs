use super::*;
use serde_json::json;

fn write_db(dir: &Path, hash: &str, secs: &[f64]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(METASCHEDULE_WORKLOAD_FILE),
        format!("{}\n", json!([hash, "AAAA"])),
    )
    .unwrap();
    let records: String = secs
        .iter()
        .map(|s| format!("{}\n", json!([0, [[], [s], {"kind": "llvm"}, []]])))
        .collect();
    std::fs::write(dir.join(METASCHEDULE_RECORD_FILE), records).unwrap();
}

#[test]
fn a_directory_of_databases_is_read_and_merged() {
    let tmp = tempfile::tempdir().unwrap();
    write_db(&tmp.path().join("llvm-znver3"), "1", &[1e-5, 2e-5]);
    write_db(&tmp.path().join("llvm-avx2"), "1", &[2e-5, 3e-5]);
    write_db(&tmp.path().join("other"), "2", &[4e-5]);
    std::fs::write(
        tmp.path().join("other").join(WORKLOAD_KEYS_FILE),
        format!(
            "{}\n",
            json!({"content_key": "k", "workload": ["2", "AAAA"]})
        ),
    )
    .unwrap();
    let read = read_dir(tmp.path()).unwrap();
    assert_eq!(read.databases, 3);
    assert_eq!(read.workloads.len(), 2, "hash 1 twice is one workload");
    let one = read
        .workloads
        .iter()
        .find(|w| w.workload[0] == "1")
        .unwrap();
    assert_eq!(one.records.len(), 3, "the shared record is kept once");
    assert_eq!(read.keys.len(), 1);
}

#[test]
fn errors_name_the_directory_or_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let err = read_dir(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("no MetaSchedule database here"), "{err}");
    write_db(tmp.path(), "1", &[1e-5]);
    std::fs::write(tmp.path().join(METASCHEDULE_RECORD_FILE), "[0, 1]\n[7]\n").unwrap();
    let err = format!("{:#}", read_dir(tmp.path()).unwrap_err());
    assert!(
        err.contains(&format!("{METASCHEDULE_RECORD_FILE} line 1")),
        "{err}"
    );
}

#[test]
fn chunks_keep_workloads_whole_and_bounded() {
    let big = |i: usize| ImportedWorkload {
        workload: json!([i.to_string(), "AAAA"]),
        records: vec![json!(["x".repeat(CHUNK_BYTES / 3)])],
    };
    let parts = chunks((0..7).map(big).collect());
    assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 7);
    assert!(parts.len() >= 3, "{} chunks", parts.len());
    assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= 3));
}
