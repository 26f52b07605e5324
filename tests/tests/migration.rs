//! A `fleet.db` written by an earlier release (schemas 1, 2 and 3, checked
//! in as `tests/fixtures/fleet-v1.db`, `fleet-v2.db` and `fleet-v3.db`: the
//! same fleet; schema 4's `fleet-v4.db` and schema 5's `fleet-v5.db` hold a
//! model run mid-tuning)
//! opens in today's master, is migrated in place with a backup beside it, and
//! the fleet resumes: finished jobs keep their results, the job that was in
//! flight goes back to the queue, and a worker finishes the rest, each
//! exactly once.

use std::time::Duration;

use tunefleet_shared::protocol::JobState;
use tunefleet_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_database_migrates_and_resumes() {
    an_earlier_database_migrates_and_resumes(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_2_database_migrates_and_resumes() {
    an_earlier_database_migrates_and_resumes(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_3_database_migrates_and_resumes() {
    an_earlier_database_migrates_and_resumes(3).await;
}

/// Schema 4 kept a model run's records in its row; schema 5 gives each a row
/// of its own. A run caught mid-tuning resumes, spends its budget, and reads
/// back the same after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_4_model_run_migrates_and_finishes() {
    a_model_run_migrates_and_finishes(4).await;
}

/// Schema 5 had no cost models; schema 6 adds their table (empty). The
/// same run, at schema 5, resumes and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_5_model_run_migrates_and_finishes() {
    a_model_run_migrates_and_finishes(5).await;
}

async fn a_model_run_migrates_and_finishes(schema: u32) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo_root().join(format!("tests/fixtures/fleet-v{schema}.db")),
        dir.path().join("fleet.db"),
    )
    .unwrap();
    let model = |master: &Master| {
        let out = master.cli(&["results", "--model", "fixture-relax", "--format", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let master = Master::start(dir.path(), &[]);
    assert!(master.log().contains(&format!(
        "migrating the state database from schema {schema}"
    )));
    let before = model(&master);
    assert_eq!(before["state"], "tuning", "{before}");
    let _worker = Worker::start(&master, "after-migration", 0.0, &[]);
    let done = eventually(Duration::from_secs(30), "the run done", || {
        let view = model(&master);
        async move { (view["state"] == "done").then_some(view) }
    })
    .await;
    assert_eq!(done["trials_done"], 64, "{done}");
    for (task, old) in done["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(before["tasks"].as_array().unwrap())
    {
        let (new_best, old_best) = (
            task["best_latency_s"].as_f64(),
            old["best_latency_s"].as_f64(),
        );
        assert!(
            new_best.is_some() && new_best <= old_best,
            "{}: best {new_best:?} after {old_best:?}",
            task["name"]
        );
    }
    drop(_worker);
    drop(master);
    let master = Master::start(dir.path(), &[]);
    let again = model(&master);
    assert_eq!(again["tasks"], done["tasks"], "read back the same");
}

async fn an_earlier_database_migrates_and_resumes(schema: u32) {
    let dir = tempfile::tempdir().unwrap();
    // Master::start uses dir/fleet.db.
    std::fs::copy(
        repo_root().join(format!("tests/fixtures/fleet-v{schema}.db")),
        dir.path().join("fleet.db"),
    )
    .unwrap();
    let master = Master::start(dir.path(), &[]);
    assert!(
        dir.path()
            .join(format!("fleet.db.schema{schema}.bak"))
            .is_file(),
        "backup written"
    );
    assert!(master.log().contains(&format!(
        "migrating the state database from schema {schema}"
    )));

    let mut client = master.client().await;
    let jobs = client.results(None).await.expect("results");
    let matmuls: Vec<_> = jobs
        .iter()
        .filter(|j| j.name.starts_with("fixture-mm"))
        .collect();
    assert_eq!(matmuls.len(), 6, "{jobs:#?}");
    for name in ["fixture-mm32", "fixture-mm64"] {
        let job = matmuls.iter().find(|j| j.name == name).unwrap();
        assert_eq!(job.state, JobState::Done, "{name}");
        assert!(
            job.result.is_some() && !job.records.is_empty(),
            "{name} keeps its result"
        );
    }
    let in_flight = matmuls.iter().find(|j| j.name == "fixture-mm96").unwrap();
    assert_eq!(
        in_flight.state,
        JobState::Queued,
        "the job in flight is recycled"
    );
    let model = master.cli(&[
        "results",
        "--model",
        "fixture-squeezenet",
        "--format",
        "json",
    ]);
    assert!(
        model.status.success(),
        "{}",
        String::from_utf8_lossy(&model.stderr)
    );
    let model: serde_json::Value = serde_json::from_slice(&model.stdout).unwrap();
    assert_eq!(model["state"], "extracting", "{model}");

    // A worker finishes every matmul job that was left.
    let _worker = Worker::start(&master, "after-migration", 0.0, &[]);
    let done = eventually(Duration::from_secs(30), "every matmul done", || {
        let master = &master;
        async move {
            let jobs = master.client().await.results(None).await.ok()?;
            let n = jobs
                .iter()
                .filter(|j| j.name.starts_with("fixture-mm") && j.state == JobState::Done)
                .count();
            (n == 6).then_some(jobs)
        }
    })
    .await;
    let before: Vec<_> = jobs
        .iter()
        .filter(|j| j.state == JobState::Done)
        .map(|j| (&j.job_id, &j.result))
        .collect();
    for (id, result) in before {
        let now = done.iter().find(|j| &j.job_id == id).unwrap();
        assert_eq!(&now.result, result, "a finished job is not run again");
    }
}
