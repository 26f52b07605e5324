//! `serve --job-retention`: ended jobs leave the master's memory but not the
//! farm. After they are archived, `status` still counts them, subscribers
//! see them leave (`jobs_archived`) with the counts kept, `results --archived`
//! and `results --job ID` read them from the database, a resubmission is a
//! duplicate (never run again), the tuning cache still answers from them, a
//! cancel names their real state, and a restarted master does not load
//! them. Runs against SQLite and, in CI, PostgreSQL (scripts/test.sh).

use std::time::Duration;

use tunefleet_server::client::Update;
use tunefleet_shared::protocol::{FleetEvent, JobState, JobView};
use tunefleet_tests::*;

fn json_results(master: &Master, extra: &[&str]) -> Vec<JobView> {
    let mut args = vec!["results", "--format", "json"];
    args.extend_from_slice(extra);
    let out = master.cli(&args);
    assert!(
        out.status.success(),
        "results {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("results --format json parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_jobs_leave_memory_and_stay_in_the_farm() {
    let dir = tempfile::tempdir().unwrap();
    let mut master = Master::start(dir.path(), &["--job-retention", "0s"]);
    let mut watcher = master.client().await;
    let (_, snapshot) = watcher.subscribe().await.expect("subscribe");
    assert!(snapshot.archived.is_empty());

    let mut client = master.client().await;
    let yaml = matmul_yaml(4, "keep");
    let report = client.submit(yaml.as_str(), None).await.expect("submit");
    let ids = report.new_jobs.clone();
    assert_eq!(ids.len(), 4);
    let worker = Worker::start(&master, "w", 0.0, &[]);

    // Done, then archived within a sweep (at most a second later).
    let status = eventually(Duration::from_secs(30), "4 jobs archived", || {
        let master = &master;
        async move {
            let status = master.client().await.status().await.ok()?;
            (status.jobs.archived == 4).then_some(status)
        }
    })
    .await;
    assert_eq!(
        (status.jobs.total, status.jobs.done, status.jobs.archived),
        (4, 4, 4),
        "status counts archived jobs in their state: {status:?}"
    );
    assert!(
        json_results(&master, &[]).is_empty(),
        "results shows the jobs held"
    );
    let plain = master.cli(&["results"]);
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("4 archived jobs are not shown"),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let archived = json_results(&master, &["--archived"]);
    assert_eq!(archived.len(), 4, "--archived reads them back");
    for job in &archived {
        assert_eq!(job.state, JobState::Done);
        assert!(!job.records.is_empty() && job.result.is_some(), "{job:?}");
    }
    let named = json_results(&master, &["--job", &ids[0]]);
    assert_eq!(named.len(), 1, "a job named is found archived");
    assert_eq!(named[0].job_id, ids[0]);

    // The subscriber saw them leave, with the counts kept.
    let mut gone = std::collections::HashSet::new();
    let mut last_counts = None;
    tokio::time::timeout(Duration::from_secs(10), async {
        while gone.len() < 4 {
            match watcher.next_update().await {
                Ok(Some(Update::Event(_, FleetEvent::JobsArchived { job_ids, archived }))) => {
                    gone.extend(job_ids);
                    last_counts = Some(archived);
                }
                Ok(Some(_)) => {}
                other => panic!("subscription ended: {other:?}"),
            }
        }
    })
    .await
    .expect("jobs_archived events");
    assert_eq!(
        gone,
        ids.iter().cloned().collect(),
        "every job announced once archived"
    );
    assert_eq!(last_counts.map(|c| c.done), Some(4));

    // Resubmitted: duplicates, not run again.
    let again = client.submit(yaml.as_str(), None).await.expect("resubmit");
    assert!(again.new_jobs.is_empty(), "{again:?}");
    assert_eq!(again.duplicates.len(), 4, "{again:?}");

    // The same computations with a smaller budget: answered by the cache
    // from the archived jobs.
    let smaller = yaml
        .replace("trials: 8", "trials: 4")
        .replace("keep", "less");
    let cached = client.submit(smaller, None).await.expect("cached submit");
    assert_eq!(cached.cache_hits.len(), 4, "{cached:?}");
    let cached_views = eventually(Duration::from_secs(10), "cached jobs readable", || {
        let master = &master;
        let cached = cached.cache_hits.clone();
        async move {
            let jobs = master
                .client()
                .await
                .results(Some(cached.clone()))
                .await
                .ok()?;
            (jobs.len() == 4).then_some(jobs)
        }
    })
    .await;
    for job in &cached_views {
        assert!(job.cache_hit);
        let from = job.cached_from.as_deref().expect("cached_from");
        assert!(ids.iter().any(|id| id == from), "{from} is an earlier job");
    }

    // A cancel of an archived job names its real state.
    let err = client
        .cancel(&ids[1])
        .await
        .expect_err("a done job cannot be cancelled")
        .to_string();
    assert!(err.contains("done") && !err.contains("unknown"), "{err}");

    // Everything archived again, then a restart: nothing is loaded or rerun.
    eventually(Duration::from_secs(30), "8 jobs archived", || {
        let master = &master;
        async move {
            let status = master.client().await.status().await.ok()?;
            (status.jobs.archived == 8).then_some(())
        }
    })
    .await;
    drop(worker);
    master.restart();
    let status = eventually(Duration::from_secs(20), "restarted master answers", || {
        let master = &master;
        async move { master.client().await.status().await.ok() }
    })
    .await;
    assert_eq!(
        (status.jobs.total, status.jobs.done, status.jobs.archived),
        (8, 8, 8),
        "{status:?}"
    );
    assert!(master
        .log()
        .contains("archived jobs stay in the state database"));
    let (_, snapshot) = master
        .client()
        .await
        .subscribe()
        .await
        .expect("subscribe after restart");
    assert!(
        snapshot.jobs.is_empty(),
        "archived jobs are not in the snapshot"
    );
    assert_eq!(snapshot.archived.total, 8);
    assert_eq!(json_results(&master, &["--archived"]).len(), 8);

    // Every original job entered `done` once: no archived job ran twice.
    let worker = Worker::start(&master, "after", 0.0, &[]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = master.client().await.status().await.expect("status");
    assert_eq!((status.jobs.total, status.jobs.queued), (8, 0));
    drop(worker);
}
