use super::*;
use crate::cost_models::{CostModel, CostModelKey};
use crate::scheduler::{Scheduler, SchedulerConfig};
use rusqlite::{params, Connection};
use tunefleet_shared::protocol::JobState;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::workload::parse_workload_file;

fn fixture(version: i64) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/fixtures/fleet-v{version}.db"))
}

/// Jobs as the scheduler makes them, in queue order.
fn some_jobs() -> Vec<Job> {
    jobs_of("target: {kind: llvm}\ntrials: 8\nworkloads:\n  - {name: a, op: matmul, shape: {m: 8, n: 8, k: 8}}\n  - {name: b, op: matmul, shape: {m: 16, n: 16, k: 16}}\n")
}

/// The jobs of a workload file, as the scheduler makes them, in queue order.
fn jobs_of(yaml: &str) -> Vec<Job> {
    let workloads = parse_workload_file(yaml, "t.yaml").unwrap();
    let config = SchedulerConfig {
        max_attempts: 3,
        job_timeout_ms: None,
        nbest: 5,
    };
    let mut scheduler = Scheduler::recover(config, Vec::new(), Millis(1), &mut Vec::new());
    scheduler.submit(workloads, Millis(2), &mut Vec::new());
    let mut jobs: Vec<Job> = scheduler.jobs().cloned().collect();
    jobs.sort_by_key(|j| j.queue_key);
    jobs
}

#[test]
fn a_job_comes_back_as_it_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let jobs = some_jobs();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    drop(store);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let mut loaded = store.load_jobs().unwrap();
    loaded.sort_by_key(|j| j.queue_key);
    assert_eq!(loaded, jobs);
}

#[test]
fn new_rows_take_their_place_in_the_file_in_queue_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let jobs = some_jobs();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    // Handed over last first, as the core's id order may.
    store.commit(jobs.iter().rev(), [], &[], &[]).unwrap();
    let by_rowid: Vec<String> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT job_id FROM jobs ORDER BY rowid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let queue_order: Vec<String> = jobs.iter().map(|j| j.id().to_string()).collect();
    assert_eq!(by_rowid, queue_order);
}

#[test]
fn the_workload_is_written_once_and_not_in_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut jobs = some_jobs();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    jobs[0].view_mut().attempts = 2;
    store.commit(&jobs[..1], [], &[], &[]).unwrap();
    let db = Connection::open(&path).unwrap();
    let data: String = db
        .query_row(
            "SELECT data FROM jobs WHERE job_id = ?1",
            params![jobs[0].id()],
            |r| r.get(0),
        )
        .unwrap();
    let workload: String = db
        .query_row(
            "SELECT workload FROM workloads WHERE job_id = ?1",
            params![jobs[0].id()],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!data.contains("\"op\""), "no workload in the row: {data}");
    assert!(data.contains("\"attempts\":2"), "{data}");
    assert_eq!(
        serde_json::from_str::<tunefleet_shared::workload::Workload>(&workload).unwrap(),
        jobs[0].view.workload
    );
}

/// What the table of its own is for: SQLite rewrites a whole row on any
/// update, so a workload in the job's row was written again (and its old
/// pages freed) on every change of state.
#[test]
fn a_change_of_state_does_not_rewrite_a_large_workload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    // ~256 KiB of TVMScript: 64 pages.
    let body = "        # a long comment, as generated TVMScript has long bodies\n".repeat(4500);
    let yaml = format!(
        "target: {{kind: llvm}}\ntrials: 8\nworkloads:\n  - name: big\n    tvmscript: |\n      @T.prim_func\n      def main():\n{body}        T.evaluate(0)\n"
    );
    let mut jobs = jobs_of(&yaml);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    let wal = dir.path().join("fleet.db-wal");
    let db = Connection::open(&path).unwrap();
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);

    // The row grows (another length, so no in-place overwrite).
    jobs[0].view_mut().attempts = 2;
    jobs[0].view_mut().worker = Some("a-worker-with-a-name".into());
    store.commit(&jobs, [], &[], &[]).unwrap();
    let pages = std::fs::metadata(&wal).unwrap().len() / 4096;
    assert!(
        pages < 8,
        "a change of state wrote {pages} pages to the WAL: the workload was rewritten"
    );
    drop(store);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    assert_eq!(store.load_jobs().unwrap(), jobs);
}

/// A job whose workload is missing (a damaged file) is an error that names
/// it, not a job silently left out.
#[test]
fn a_job_without_its_workload_is_refused_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let jobs = some_jobs();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    drop(store);
    Connection::open(&path)
        .unwrap()
        .execute(
            "DELETE FROM workloads WHERE job_id = ?1",
            params![jobs[1].id()],
        )
        .unwrap();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let err = store.load_jobs().unwrap_err().to_string();
    assert!(
        err.contains(jobs[1].id().as_str()) && err.contains("workloads"),
        "{err}"
    );
}

#[test]
fn a_schema_1_database_is_backed_up_migrated_and_loads() {
    an_older_database_is_backed_up_migrated_and_loads(1);
}

#[test]
fn a_schema_2_database_is_backed_up_migrated_and_loads() {
    an_older_database_is_backed_up_migrated_and_loads(2);
}

#[test]
fn a_schema_3_database_is_backed_up_migrated_and_loads() {
    an_older_database_is_backed_up_migrated_and_loads(3);
}

/// Schema 4 kept a model run's records in its row: they load from there,
/// and the run's next commit moves them to `model_records`.
#[test]
fn a_schema_4_model_runs_records_move_to_rows_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    std::fs::copy(fixture(4), &path).unwrap();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    assert!(
        migrate::backup_path(&path, 4).is_file(),
        "the schema-4 copy is kept"
    );
    let jobs = store.load_jobs().unwrap();
    assert_eq!(jobs.len(), 6, "five rounds done, one running");
    let runs = store.load_models().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.name, "fixture-relax");
    let counts: Vec<usize> = run.tasks.iter().map(|t| t.records.len()).collect();
    assert_eq!(counts, [24, 16], "every record of the schema-4 row");
    for task in &run.tasks {
        let latencies: Vec<f64> = task.records.iter().map(|r| r.record.latency_s).collect();
        assert!(latencies.windows(2).all(|w| w[0] <= w[1]), "best first");
    }
    assert!(
        record_rows(&path).is_empty(),
        "nothing moved before a commit"
    );

    store.commit([], [run], &[], &[]).unwrap();
    assert_eq!(record_rows(&path).len(), 40);
    let row: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT data FROM models", [], |r| r.get(0))
        .unwrap();
    assert!(
        !row.contains("\"records\""),
        "the row lost its records: {row}"
    );
    drop(store);
    let again = Store::open(&path, Durability::Normal)
        .unwrap()
        .load_models()
        .unwrap();
    assert_eq!(again, runs, "the same run, read from the new rows");
}

/// The fixtures hold the same fleet (tests/fixtures/README.md).
fn an_older_database_is_backed_up_migrated_and_loads(from: i64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    std::fs::copy(fixture(from), &path).unwrap();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let jobs = store.load_jobs().unwrap();
    assert_eq!(jobs.len(), 7);
    let by_name = |name: &str| jobs.iter().find(|j| j.view.name == name).unwrap();
    let done = by_name("fixture-mm32");
    assert_eq!(done.state(), JobState::Done);
    assert!(!done.view.records.is_empty(), "records survive");
    assert!(done.view.result.is_some(), "the result survives");
    assert_eq!(by_name("fixture-mm96").state(), JobState::Assigned);
    assert_eq!(
        by_name("fixture-mm96").lease_history.len(),
        1,
        "lease history survives"
    );
    assert_eq!(
        jobs.iter()
            .filter(|j| j.state() == JobState::Queued)
            .count(),
        4
    );
    let models = store.load_models().unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].name, "fixture-squeezenet");
    let version: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION.to_string());
    let backup = migrate::backup_path(&path, from);
    assert!(backup.is_file(), "the schema-{from} copy is kept");
    drop(store);

    // The backup is the untouched original; opening the migrated file again changes nothing.
    let original = Connection::open(&backup).unwrap();
    let v: String = original
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, from.to_string());
    let mut again = Store::open(&path, Durability::Normal).unwrap();
    assert_eq!(again.load_jobs().unwrap(), jobs);
    // A migrated database archives like a new one.
    let done = by_name("fixture-mm32");
    again.archive([(done.id().clone(), "k".to_string())], Millis(5));
    again.commit([], [], &[], &[]).unwrap();
    assert_eq!(again.load_jobs().unwrap().len(), 6);
    assert_eq!(again.archived_counts().unwrap(), vec![(JobState::Done, 1)]);
}

/// Two done jobs of one computation, a third job failed, all stored.
fn stored_jobs(path: &std::path::Path) -> (Store, Vec<Job>) {
    let mut jobs = some_jobs();
    let extra = {
        let mut job = jobs[1].clone();
        job.view_mut().job_id = "0000000000000003".into();
        job.queue_key += 10;
        job
    };
    jobs.push(extra);
    jobs[0].view_mut().state = JobState::Done;
    jobs[1].view_mut().state = JobState::Done;
    jobs[2].view_mut().state = JobState::Failed;
    let mut store = Store::open(path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    (store, jobs)
}

#[test]
fn archived_jobs_stay_in_the_file_and_are_found_by_id_and_computation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let (mut store, jobs) = stored_jobs(&path);
    let key = |j: &Job| j.view.workload.content_key();
    store.archive(
        [
            (jobs[1].id().clone(), key(&jobs[1])),
            (jobs[2].id().clone(), key(&jobs[2])),
        ],
        Millis(100),
    );
    // Marked only when the next batch commits.
    assert_eq!(store.load_jobs().unwrap().len(), 3);
    store.commit([], [], &[], &[]).unwrap();
    drop(store);

    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let live = store.load_jobs().unwrap();
    assert_eq!(
        live,
        vec![jobs[0].clone()],
        "a restart loads only the live job"
    );
    let mut counts = store.archived_counts().unwrap();
    counts.sort();
    assert_eq!(counts, vec![(JobState::Done, 1), (JobState::Failed, 1)]);
    let ids = [jobs[0].id().clone(), jobs[2].id().clone(), "nope".into()];
    assert_eq!(
        store.load_archived(Archived::Ids(&ids)).unwrap(),
        vec![jobs[2].clone()],
        "only archived rows are read back"
    );
    // The cache's lookup: done jobs of the computation, the failed one not.
    assert_eq!(
        store
            .load_archived(Archived::Done {
                content_key: &key(&jobs[1])
            })
            .unwrap(),
        vec![jobs[1].clone()]
    );
    assert!(store
        .load_archived(Archived::Done {
            content_key: &key(&jobs[0])
        })
        .unwrap()
        .is_empty());
    assert_eq!(store.load_archived(Archived::All).unwrap().len(), 2);

    // Written again (it came back and changed): live, loaded at the next start.
    let mut back = jobs[2].clone();
    back.view_mut().state = JobState::Queued;
    store.commit([&back], [], &[], &[]).unwrap();
    drop(store);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let mut live = store.load_jobs().unwrap();
    live.sort_by_key(|j| j.queue_key);
    assert_eq!(live, vec![jobs[0].clone(), back]);
    assert_eq!(store.archived_counts().unwrap(), vec![(JobState::Done, 1)]);
}

#[test]
fn a_job_brought_back_before_the_commit_is_not_marked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let (mut store, jobs) = stored_jobs(&path);
    store.archive([(jobs[0].id().clone(), "k".into())], Millis(100));
    store.keep_live(jobs[0].id());
    store.commit([&jobs[0]], [], &[], &[]).unwrap();
    assert_eq!(store.load_jobs().unwrap().len(), 3);
    assert!(store.archived_counts().unwrap().is_empty());
}

#[test]
fn a_newer_or_unknown_schema_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    for (value, needle) in [
        ("99", "newer than this tunefleet's"),
        ("abc", "which no tunefleet release wrote"),
    ] {
        let path = dir.path().join(format!("v{value}.db"));
        drop(Store::open(&path, Durability::Normal).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                params![value],
            )
            .unwrap();
        let err = Store::open(&path, Durability::Normal)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(needle), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let text = "workloads:\n  - name: oops\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = Store::open(&path, Durability::Normal)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("not a database"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
}

#[test]
fn a_schema_1_row_that_cannot_be_migrated_says_why() {
    for (data, needle) in [
        ("nope", "not JSON"),
        ("[1]", "not a JSON object"),
        ("{}", "no `view` object"),
        (r#"{"view": {"name": "x"}}"#, "no `view.workload`"),
        (
            r#"{"view": {"workload": {}}, "lease": 1}"#,
            "does not make a schema-2 row",
        ),
    ] {
        let err = migrate::job_row_from_1(data).unwrap_err();
        assert!(err.contains(needle), "{data}: {err}");
    }
}

#[test]
fn trace_lines_older_than_the_retention_window_go_and_the_rest_stay() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("fleet.db"), Durability::Normal).unwrap();
    let lines: Vec<(Millis, String)> = (0..25_000u64)
        .map(|i| {
            (
                Millis(i),
                format!(r#"{{"kind":"worker_left","session":"w{i}","reason":"x"}}"#),
            )
        })
        .collect();
    store.commit([], [], &[], &lines).unwrap();
    assert_eq!(
        store.prune_trace(Millis(0)).unwrap(),
        0,
        "nothing is older than 0"
    );
    assert_eq!(
        store.prune_trace(Millis(20_000)).unwrap(),
        20_000,
        "in chunks, all of them"
    );
    let mut out = Vec::new();
    assert_eq!(store.export_trace(&mut out).unwrap(), 5_000);
    let first = String::from_utf8(out).unwrap();
    assert!(
        first.lines().next().unwrap().contains(r#""at":20000"#),
        "the newest stay"
    );
}

/// PostgreSQL writes a commit's jobs in one statement, which may touch a
/// row once: a job written twice keeps its last write, and the order of
/// the others is kept.
#[test]
fn a_job_written_twice_in_one_commit_keeps_its_last_write() {
    let write = |job_id, state, queue_key| JobWrite {
        job_id,
        state,
        queue_key,
        data: String::new(),
        workload: None,
    };
    let jobs = [
        write("a", "queued", 1),
        write("b", "queued", 2),
        write("a", "assigned", 3),
        write("c", "done", 4),
    ];
    let kept: Vec<(&str, &str)> = postgres::last_write_of_each(&jobs)
        .into_iter()
        .map(|j| (j.job_id, j.state))
        .collect();
    assert_eq!(kept, [("b", "queued"), ("a", "assigned"), ("c", "done")]);
}

/// A model run with every field set (tasks, rounds, records, curve) reads
/// back equal through its row type.
/// A model run with two tasks of two records each.
fn model_run() -> crate::models::ModelRun {
    use crate::models::{KeptRecord, ModelRun, Round, Task};
    use tunefleet_shared::model::{
        EstimatePoint, ModelLatencies, ModelSource, ModelState, TunerSettings,
    };
    use tunefleet_shared::protocol::TuningRecord;
    use tunefleet_shared::target::Target;

    let target = Target::parse(r#"{"kind":"llvm","mcpu":"znver3","num-cores":2}"#).unwrap();
    let task = |name: &str, dead: bool| Task {
        name: name.into(),
        weight: 3,
        tvmscript: format!("# {name}\n"),
        flops: Some(1.5e6),
        untuned_share: Some(0.25),
        untuned_time_s: Some(0.75e-3),
        trivial: false,
        dead,
        rounds: vec![
            Round {
                job_id: format!("{name}-r1"),
                trials_planned: 16,
                trials_done: Some(16),
                ok: true,
            },
            Round {
                job_id: format!("{name}-r2"),
                trials_planned: 8,
                trials_done: None,
                ok: false,
            },
        ],
        history: vec![2e-4, 1.5e-4],
        workload_line: Some(serde_json::json!(["0x12", "b64"])),
        records: vec![
            KeptRecord::of_round(
                &format!("{name}-r1"),
                0,
                TuningRecord {
                    latency_s: 1.5e-4,
                    record: serde_json::json!([["trace"], [1.5e-4], {}, []]),
                },
            ),
            KeptRecord::of_round(
                &format!("{name}-r1"),
                3,
                TuningRecord {
                    latency_s: 2e-4,
                    record: serde_json::json!([["other"], [2e-4], {}, []]),
                },
            ),
        ],
    };
    ModelRun {
        name: "squeezenet".into(),
        source: ModelSource {
            onnx_b64: "AAEC".into(),
            input_shapes: [("data".to_string(), vec![1, 3, 224, 224])].into(),
            seed: 7,
            prepack: false,
            layout: Default::default(),
            auto_layout: false,
            recipe: None,
        },
        requested_target: Target::of_kind("llvm"),
        target: Some(target),
        trials_total: 256,
        trials_per_round: 16,
        tuner: TunerSettings {
            strategy: Some("replay-trace".into()),
            ..TunerSettings::default()
        },
        state: ModelState::Tuning,
        stop_requested: true,
        extract_job: "extract".into(),
        compile_job: Some("compile".into()),
        tasks: vec![task("conv", false), task("dense", true)],
        io: serde_json::json!({"inputs": [{"name": "data"}]}),
        latency: ModelLatencies {
            untuned: Some(3e-3),
            tuned: Some(2e-3),
            onnxruntime: Some(2.5e-3),
        },
        verified: true,
        verification: serde_json::json!({"max_abs_diff": 1e-6}),
        records_applied: Some(12),
        functions_tuned: Some(2),
        error: Some("none, really".into()),
        curve: vec![EstimatePoint {
            trials: 16,
            at: Millis(5),
            estimated_latency_s: 2e-3,
        }],
        layout_note: Some("NHWC could not be used".into()),
        created_at: Millis(1),
        updated_at: Millis(5),
        finished_at: Some(Millis(6)),
    }
}

#[test]
fn a_model_run_comes_back_as_it_was_stored() {
    let run = model_run();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit([], [&run], &[], &[]).unwrap();
    drop(store);
    let loaded = Store::open(&path, Durability::Normal)
        .unwrap()
        .load_models()
        .unwrap();
    assert_eq!(loaded, vec![run]);
}

/// A round (`conv-r2`) brings a better record to `conv`, and its worst
/// goes.
fn a_round_improves_conv(run: &mut crate::models::ModelRun) {
    use crate::models::KeptRecord;
    use tunefleet_shared::protocol::TuningRecord;

    run.tasks[0].records.insert(
        0,
        KeptRecord::of_round(
            "conv-r2",
            1,
            TuningRecord {
                latency_s: 1e-4,
                record: serde_json::json!([["better"], [1e-4], {}, []]),
            },
        ),
    );
    run.tasks[0].records.pop();
}

/// `model_records`' keys and latencies, by key.
fn record_rows(path: &std::path::Path) -> Vec<(String, i64, f64)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT key, task, data FROM model_records ORDER BY key")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            let data: String = r.get(2)?;
            let record: tunefleet_shared::protocol::TuningRecord =
                serde_json::from_str(&data).unwrap();
            Ok((r.get(0)?, r.get(1)?, record.latency_s))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn a_model_runs_records_are_written_once_in_rows_of_their_own() {
    let mut run = model_run();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit([], [&run], &[], &[]).unwrap();
    let row: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT data FROM models", [], |r| r.get(0))
        .unwrap();
    assert!(
        !row.contains("\"records\"") && !row.contains("[\"other\"]"),
        "no record in the run's row: {row}"
    );
    assert_eq!(
        record_rows(&path),
        [
            ("conv-r1/0".to_string(), 0, 1.5e-4),
            ("conv-r1/3".to_string(), 0, 2e-4),
            ("dense-r1/0".to_string(), 1, 1.5e-4),
            ("dense-r1/3".to_string(), 1, 2e-4),
        ]
    );

    // A row already written is not written again: a mark put on it here
    // survives the run's next commits.
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE model_records SET data = replace(data, '0.0002', '0.0003') WHERE key = 'dense-r1/3'",
            [],
        )
        .unwrap();
    a_round_improves_conv(&mut run);
    run.updated_at = Millis(9);
    store.commit([], [&run], &[], &[]).unwrap();
    store.commit([], [&run], &[], &[]).unwrap();
    assert_eq!(
        record_rows(&path),
        [
            ("conv-r1/0".to_string(), 0, 1.5e-4),
            ("conv-r2/1".to_string(), 0, 1e-4),
            ("dense-r1/0".to_string(), 1, 1.5e-4),
            ("dense-r1/3".to_string(), 1, 3e-4),
        ]
    );
    drop(store);
    let mut loaded = Store::open(&path, Durability::Normal)
        .unwrap()
        .load_models()
        .unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].tasks[0], run.tasks[0], "best first, as kept");
    assert_eq!(loaded[0].tasks[1].records[1].record.latency_s, 3e-4);
    loaded[0].tasks[1] = run.tasks[1].clone();
    assert_eq!(loaded[0], run);
}

#[test]
fn a_warm_start_is_written_once_and_goes_when_its_job_ends() {
    use tunefleet_shared::model::WarmStart;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut jobs = some_jobs();
    let warm = |marker: &str| WarmStart {
        workload: serde_json::json!(["0x1", "b64"]),
        records: vec![serde_json::json!([0, [[marker]], [1e-3], {}])],
    };
    jobs[0].extras.warm_start = Some(Box::new(warm("first")));
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    store.commit(&jobs, [], &[], &[]).unwrap();
    let db = Connection::open(&path).unwrap();
    let row: String = db
        .query_row(
            "SELECT data FROM jobs WHERE job_id = ?1",
            params![jobs[0].id()],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!row.contains("first"), "not in the job's row: {row}");
    let warm_rows = || -> Vec<String> {
        let mut stmt = db
            .prepare("SELECT job_id || ' ' || warm_start FROM warm_starts")
            .unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(warm_rows().len(), 1);
    assert!(warm_rows()[0].starts_with(jobs[0].id().as_str()));

    // Written once: a mark put on the row here survives the job's changes.
    db.execute(
        "UPDATE warm_starts SET warm_start = replace(warm_start, 'first', 'marked')",
        [],
    )
    .unwrap();
    jobs[0].view_mut().attempts = 2;
    store.commit(&jobs, [], &[], &[]).unwrap();
    drop(store);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let loaded = store.load_jobs().unwrap();
    assert_eq!(
        loaded[0].extras.warm_start.as_deref(),
        Some(&warm("marked")),
        "read back from its row"
    );
    assert_eq!(loaded[1].extras.warm_start, None);

    // Ended: the row goes, and the job reads back without it.
    let mut ended = loaded;
    ended[0].view_mut().state = JobState::Done;
    store.commit(&ended, [], &[], &[]).unwrap();
    assert!(warm_rows().is_empty());
    drop(store);
    let again = Store::open(&path, Durability::Normal)
        .unwrap()
        .load_jobs()
        .unwrap();
    assert_eq!(again[0].state(), JobState::Done);
    assert_eq!(again[0].extras.warm_start, None);
}

/// A new, empty database on `TUNEFLEET_TEST_POSTGRES`'s server (its URL),
/// or `None` when the variable is unset; `TUNEFLEET_REQUIRE_POSTGRES`
/// makes that a failure (CI).
fn fresh_postgres() -> Option<(String, ::postgres::Client)> {
    let Some(base) = std::env::var("TUNEFLEET_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.trim().is_empty())
    else {
        assert!(
            std::env::var_os("TUNEFLEET_REQUIRE_POSTGRES").is_none(),
            "TUNEFLEET_REQUIRE_POSTGRES is set but TUNEFLEET_TEST_POSTGRES is not"
        );
        eprintln!("skipped: TUNEFLEET_TEST_POSTGRES is not set");
        return None;
    };
    // One database per test: the tests of one process run at once.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("tunefleet_unit_{}_{n}", std::process::id());
    let mut admin = ::postgres::Client::connect(&base, ::postgres::NoTls).unwrap();
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&sql).unwrap();
    }
    let (server, _) = base.rsplit_once('/').unwrap();
    let url = format!("{server}/{name}");
    let client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    Some((url, client))
}

/// The same rows in PostgreSQL: records and warm starts written apart,
/// once, and read back.
#[test]
fn postgres_keeps_records_and_warm_starts_in_rows_of_their_own() {
    use tunefleet_shared::model::WarmStart;

    let Some((url, mut db)) = fresh_postgres() else {
        return;
    };
    let location = StateLocation::Postgres(url);
    let standby = Standby {
        poll: std::time::Duration::from_millis(100),
        name: "tunefleet test".into(),
    };
    let open =
        || Store::open_leader(&location, Durability::Normal, standby.clone(), &mut |_| {}).unwrap();
    let mut run = model_run();
    let mut jobs = some_jobs();
    jobs[0].extras.warm_start = Some(Box::new(WarmStart {
        workload: serde_json::json!(["0x1", "b64"]),
        records: vec![serde_json::json!([0, [["warm"]], [1e-3], {}])],
    }));
    let mut store = open();
    store.commit(&jobs, [&run], &[], &[]).unwrap();
    let count = |db: &mut ::postgres::Client, table: &str| -> i64 {
        db.query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(count(&mut db, "model_records"), 4);
    assert_eq!(count(&mut db, "warm_starts"), 1);
    let row: String = db.query_one("SELECT data FROM models", &[]).unwrap().get(0);
    assert!(!row.contains("\"records\""), "{row}");
    let row: String = db
        .query_one("SELECT data FROM jobs WHERE job_id = $1", &[jobs[0].id()])
        .unwrap()
        .get(0);
    assert!(!row.contains("warm"), "{row}");

    a_round_improves_conv(&mut run);
    store.commit(&jobs, [&run], &[], &[]).unwrap();
    drop(store);
    let mut store = open();
    assert_eq!(store.load_models().unwrap(), vec![run.clone()]);
    assert_eq!(store.load_jobs().unwrap(), jobs, "the warm start read back");
    jobs[0].view_mut().state = JobState::Done;
    store.commit(&jobs, [&run], &[], &[]).unwrap();
    assert_eq!(count(&mut db, "model_records"), 4);
    assert_eq!(count(&mut db, "warm_starts"), 0);
}

fn cost_model(id: &str, bytes: &[u8]) -> (CostModelKey, CostModel) {
    let key = CostModelKey {
        target: r#"{"kind":"llvm","mcpu":"znver5","num-cores":2}"#.into(),
        tvm: "0.27".into(),
    };
    let model = CostModel {
        id: id.into(),
        samples: bytes.len() as u32,
        tvm_version: Some("0.27.0.post1".into()),
        data_b64: base64::encode(bytes),
        updated_at: Millis(7),
    };
    (key, model)
}

/// Schema 5 had no cost models: the migration adds their table, empty, and
/// the run mid-tuning loads as it was.
#[test]
fn a_schema_5_database_gets_an_empty_cost_models_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    std::fs::copy(fixture(5), &path).unwrap();
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    assert!(migrate::backup_path(&path, 5).is_file());
    assert_eq!(store.load_jobs().unwrap().len(), 6);
    let runs = store.load_models().unwrap();
    let counts: Vec<usize> = runs[0].tasks.iter().map(|t| t.records.len()).collect();
    assert_eq!(counts, [24, 16], "the run's record rows");
    assert!(store.load_cost_models().unwrap().is_empty());
    let (key, model) = cost_model("a", b"model a");
    store.put_cost_model(&key, &model);
    store.commit([], [], &[], &[]).unwrap();
    drop(store);
    let mut again = Store::open(&path, Durability::Normal).unwrap();
    assert_eq!(again.load_cost_models().unwrap(), vec![(key, model)]);
}

/// One row per key, replaced in place; its bytes stored as bytes; a model
/// of a commit that failed is not written later.
#[test]
fn a_cost_model_row_is_replaced_by_the_next_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.db");
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let (key, first) = cost_model("a", b"model a");
    let (_, second) = cost_model("b", &[0, 159, 146, 150, 255]);
    let other = CostModelKey {
        tvm: "0.28".into(),
        ..key.clone()
    };
    store.put_cost_model(&key, &first);
    store.put_cost_model(&other, &first);
    store.commit([], [], &[], &[]).unwrap();
    store.put_cost_model(&key, &second);
    store.commit([], [], &[], &[]).unwrap();
    let (_, lost) = cost_model("c", b"never committed");
    store.put_cost_model(&key, &lost);
    store.forget_failed();
    store.commit([], [], &[], &[]).unwrap();
    let mut rows = store.load_cost_models().unwrap();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(rows, vec![(key, second), (other, first)]);
    let raw: Vec<u8> = Connection::open(&path)
        .unwrap()
        .query_row("SELECT data FROM cost_models WHERE id = 'b'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(raw, [0, 159, 146, 150, 255]);
}

/// PostgreSQL: the same row, and a schema-5 database migrated to the table.
#[test]
fn postgres_keeps_cost_models_and_migrates_from_schema_5() {
    let Some((url, mut db)) = fresh_postgres() else {
        return;
    };
    let location = StateLocation::Postgres(url);
    let standby = Standby {
        poll: std::time::Duration::from_millis(100),
        name: "tunefleet test".into(),
    };
    let open =
        || Store::open_leader(&location, Durability::Normal, standby.clone(), &mut |_| {}).unwrap();
    drop(open());
    db.batch_execute(
        "DROP TABLE cost_models;
         UPDATE meta SET value = '5' WHERE key = 'schema_version';",
    )
    .unwrap();
    let mut store = open();
    let version: String = db
        .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION.to_string());
    assert!(store.load_cost_models().unwrap().is_empty());
    let (key, first) = cost_model("a", b"model a");
    let (_, second) = cost_model("b", &[0, 255, 1]);
    store.put_cost_model(&key, &first);
    store.commit([], [], &[], &[]).unwrap();
    store.put_cost_model(&key, &second);
    store.commit([], [], &[], &[]).unwrap();
    drop(store);
    assert_eq!(
        open().load_cost_models().unwrap(),
        vec![(key, second)],
        "one row, the last kept"
    );
}
