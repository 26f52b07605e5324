//! Imported records (`tunefleet import`), driven through the scheduler
//! alone: which new jobs they seed, for which targets, and what an import
//! refuses.

use serde_json::{json, Value};
use tunefleet_server::scheduler::{
    CachePolicy, JobExtras, Scheduler, SessionId, IMPORT_PREFIX, KEY_PREFIX,
};
use tunefleet_shared::import::{ImportedWorkload, WorkloadKey};
use tunefleet_shared::model::WarmStart;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{JobResult, TuningRecord};

mod common;
use common::{hello, matmul, CONFIG};

fn line() -> Value {
    json!(["4242", "bW9kdWxl"])
}

fn record(secs: f64, mcpu: &str) -> Value {
    json!([[["step", secs]], [secs], {"kind": "llvm", "keys": ["cpu"], "mcpu": mcpu}, []])
}

/// An import of three records (two for znver3, one for znver4) of `line()`,
/// keyed to the 64³ matmul's content.
fn imported(s: &mut Scheduler, with_key: bool) {
    let keys = if with_key {
        vec![matmul_key()]
    } else {
        Vec::new()
    };
    let (report, rows) = s
        .import(
            vec![ImportedWorkload {
                workload: line(),
                records: vec![
                    record(2e-5, "znver3"),
                    record(1e-5, "znver3"),
                    record(3e-5, "znver4"),
                ],
            }],
            keys,
        )
        .expect("a valid import");
    assert_eq!(report.workloads_new, 1);
    assert_eq!(report.records_new, 3);
    assert_eq!(report.keys_new, usize::from(with_key));
    assert!(rows
        .iter()
        .any(|(k, v)| k.starts_with(IMPORT_PREFIX) && v.is_some()));
}

/// `line()` as the 64³ matmul's database line.
fn matmul_key() -> WorkloadKey {
    WorkloadKey {
        content_key: matmul(1, "{kind: llvm}").content_key(),
        workload: line(),
    }
}

/// `line()` with one record, measured for znver3.
fn one_znver3_record() -> Vec<ImportedWorkload> {
    vec![ImportedWorkload {
        workload: line(),
        records: vec![record(1e-5, "znver3")],
    }]
}

fn extras(s: &Scheduler, id: &str) -> JobExtras {
    s.job(id).expect("job exists").extras.clone()
}

#[test]
fn a_keyed_workload_is_seeded_with_the_records_of_serving_targets() {
    let mut s = Scheduler::new(CONFIG);
    imported(&mut s, true);
    let mut out = Vec::new();
    let (new, _) = s.submit(
        vec![matmul(16, "{kind: llvm, mcpu: znver3}")],
        Millis(1),
        &mut out,
    );
    let e = extras(&s, &new[0]);
    assert_eq!(e.seeded, 2, "the znver4 record does not serve znver3");
    assert_eq!(
        e.prior_trials, 0,
        "imported records are not trials done here"
    );
    let start = e.warm_start.expect("seeded");
    assert_eq!(start.workload, line());
    assert_eq!(
        start.records,
        vec![record(1e-5, "znver3"), record(2e-5, "znver3")]
    );
    let view = &s.job(&new[0]).expect("job").view;
    assert_eq!((view.trials_done, view.cache_hit), (0, false));
    assert!(view.cached_from.is_none());

    // Plain llvm may run anywhere, so every record may seed it.
    let (plain, _) = s.submit(vec![matmul(24, "{kind: llvm}")], Millis(2), &mut out);
    assert_eq!(extras(&s, &plain[0]).seeded, 3);
}

#[test]
fn fresh_and_unknown_workloads_are_not_seeded() {
    let mut s = Scheduler::new(CONFIG);
    imported(&mut s, false);
    let mut out = Vec::new();
    let (new, _) = s.submit(vec![matmul(16, "{kind: llvm}")], Millis(1), &mut out);
    let e = extras(&s, &new[0]);
    assert_eq!(e.seeded, 0, "no key: the workload's line is unknown");
    assert!(e.warm_start.is_none());

    let mut s = Scheduler::new(CONFIG);
    imported(&mut s, true);
    let (fresh, _) = s.submit_as(
        vec![matmul(16, "{kind: llvm}")],
        CachePolicy::Bypass,
        Millis(1),
        &mut out,
    );
    assert!(extras(&s, &fresh[0]).warm_start.is_none(), "--fresh");
}

#[test]
fn a_line_learned_from_a_run_seeds_later_jobs_of_the_same_content() {
    let mut s = Scheduler::new(CONFIG);
    imported(&mut s, false);
    let mut out = Vec::new();
    let hello = hello("w", r#"{"kind":"llvm","mcpu":"znver4"}"#);
    s.worker_joined(SessionId(1), &hello, Millis(0), &mut out)
        .expect("joins");
    let (first, _) = s.submit(
        vec![matmul(8, "{kind: llvm, mcpu: znver4}")],
        Millis(1),
        &mut out,
    );
    s.request_job(SessionId(1), Millis(1), &mut out);
    let lease = s.job(&first[0]).expect("job").lease;
    let result = JobResult {
        best_latency_s: 4e-5,
        gflops: None,
        records: vec![TuningRecord {
            latency_s: 4e-5,
            record: record(4e-5, "znver4"),
        }],
        trials: 8,
        wall_time_s: 1.0,
        backend: "tvm".into(),
        tvm_version: None,
        extra: json!({"workload": line()}),
        target: Some(hello.target.clone()),
    };
    s.result(SessionId(1), &first[0], lease, result, Millis(2), &mut out)
        .expect("accepted");
    // Same content, another target: no cache entry serves it, but the line
    // is known now, and one imported record was measured for znver3.
    let (later, _) = s.submit(
        vec![matmul(8, "{kind: llvm, mcpu: znver3}")],
        Millis(3),
        &mut out,
    );
    let e = extras(&s, &later[0]);
    assert_eq!(e.seeded, 2);
    assert!(s.job(&later[0]).expect("job").view.cached_from.is_none());
}

#[test]
fn a_model_round_with_a_known_line_is_seeded_and_keeps_its_own_records() {
    let mut s = Scheduler::new(CONFIG);
    imported(&mut s, false);
    let mut out = Vec::new();
    let own = record(5e-5, "znver3");
    let round = JobExtras {
        workload_line: Some(line()),
        warm_start: Some(Box::new(WarmStart {
            workload: line(),
            records: vec![own.clone()],
        })),
        ..JobExtras::default()
    };
    let (new, _) = s.submit_with(
        vec![(matmul(4, "{kind: llvm, mcpu: znver4}"), round)],
        Millis(1),
        &mut out,
    );
    let e = extras(&s, &new[0]);
    assert_eq!(e.seeded, 1);
    let records = e.warm_start.expect("warm").records;
    assert_eq!(records, vec![own, record(3e-5, "znver4")]);
}

#[test]
fn a_bad_import_is_refused_whole_and_a_repeat_adds_nothing() {
    let mut s = Scheduler::new(CONFIG);
    let bad = s
        .import(
            vec![
                ImportedWorkload {
                    workload: line(),
                    records: vec![record(1e-5, "znver3")],
                },
                ImportedWorkload {
                    workload: line(),
                    records: vec![json!([[], [1e-5], {"mcpu": "x"}, []])],
                },
            ],
            Vec::new(),
        )
        .expect_err("a record without a target kind");
    assert!(bad.starts_with("workloads[1]: records[0]:"), "{bad}");
    let bad_key = s
        .import(
            Vec::new(),
            vec![WorkloadKey {
                content_key: "k".into(),
                workload: json!(["only one"]),
            }],
        )
        .expect_err("a key without a line");
    assert!(bad_key.starts_with("keys[0]:"), "{bad_key}");

    imported(&mut s, true);
    let (again, rows) = s
        .import(one_znver3_record(), vec![matmul_key()])
        .expect("valid");
    assert_eq!(
        (
            again.workloads_new,
            again.records_new,
            again.records_known,
            again.keys_new
        ),
        (0, 0, 1, 0)
    );
    assert!(rows.iter().all(|(k, _)| !k.starts_with(KEY_PREFIX)));
}

#[test]
fn imports_survive_a_restart_through_their_rows() {
    let mut s = Scheduler::new(CONFIG);
    let (_, rows) = s
        .import(one_znver3_record(), vec![matmul_key()])
        .expect("valid");
    let mut restarted = Scheduler::new(CONFIG);
    let mut stored: Vec<(String, String)> = rows
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    stored.push((format!("{IMPORT_PREFIX}broken"), "{not json".into()));
    let skipped = restarted.restore_imports(stored);
    let keys: Vec<&str> = skipped.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [format!("{IMPORT_PREFIX}broken")],
        "only the broken row skipped"
    );
    let mut out = Vec::new();
    let (new, _) = restarted.submit(vec![matmul(16, "{kind: llvm}")], Millis(1), &mut out);
    assert_eq!(extras(&restarted, &new[0]).seeded, 1);
}
