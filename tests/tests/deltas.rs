//! `subscribe` with `deltas: true`: a job the subscriber already has is
//! updated by `job_changed` (no name, workload or creation time) instead of
//! a whole `job_updated` view, and a worker by `worker_changed` (its job and
//! count); subscribers without it are unaffected. What a
//! user checks: each kind of subscriber's mirror ends equal to `results`,
//! the deltas never carry a workload, every job first arrives whole, a
//! whole-view subscriber that joins mid-run still gets whole views, and a
//! job brought back from the archive comes whole again.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tunefleet_server::client::{FleetView, Update};
use tunefleet_shared::protocol::{JobState, JobView, ServerMessage};
use tunefleet_tests::raw::{self, Ws};
use tunefleet_tests::*;

/// A raw subscriber that keeps every frame's JSON and a mirror of the fleet.
struct Watcher {
    ws: Ws,
    fleet: FleetView,
    frames: Vec<Value>,
}

impl Watcher {
    async fn subscribe(master: &Master, deltas: Option<bool>) -> Watcher {
        let mut ws = raw::connect(&format!("{}/ws/client", master.url())).await;
        raw::send(
            &mut ws,
            json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
        )
        .await;
        let mut subscribe = json!({"id": 2, "type": "subscribe"});
        if let Some(deltas) = deltas {
            subscribe["deltas"] = json!(deltas);
        }
        raw::send(&mut ws, subscribe).await;
        let mut watcher = Watcher {
            ws,
            fleet: FleetView::new(),
            frames: Vec::new(),
        };
        while watcher.fleet.seq().is_none() {
            watcher.read_one().await;
        }
        watcher
    }

    async fn read_one(&mut self) {
        let frame = raw::next(&mut self.ws)
            .await
            .expect("the master keeps the subscription open");
        let message: ServerMessage =
            serde_json::from_value(frame.clone()).expect("every frame is a ServerMessage");
        match message {
            ServerMessage::Snapshot { seq, snapshot } => self.fleet.apply_snapshot(seq, snapshot),
            ServerMessage::Event { seq, event } => {
                let outcome = self.fleet.apply_event(seq, event);
                assert_ne!(
                    outcome,
                    tunefleet_server::client::EventOutcome::Stale,
                    "no stale event after the snapshot"
                );
            }
            _ => {}
        }
        self.frames.push(frame);
    }

    /// Reads until `done` jobs are done in the mirror.
    async fn until_done(&mut self, done: usize) {
        tokio::time::timeout(Duration::from_secs(30), async {
            while self.fleet.counts().done < done {
                self.read_one().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{done} jobs done in the mirror"));
    }

    /// Reads until the mirror has every event up to `seq` (a later
    /// subscriber's snapshot).
    async fn catch_up_to(&mut self, seq: u64) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while self.fleet.seq() < Some(seq) {
                self.read_one().await;
            }
        })
        .await
        .expect("the delta mirror catches up with the snapshot");
    }

    fn events(&self, kind: &str) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["type"] == "event" && f["event"]["kind"] == kind)
            .map(|f| &f["event"])
            .collect()
    }

    fn jobs_by_id(&self) -> HashMap<String, JobView> {
        by_id(self.fleet.jobs().to_vec())
    }
}

fn by_id(jobs: Vec<JobView>) -> HashMap<String, JobView> {
    jobs.into_iter().map(|j| (j.job_id.clone(), j)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_and_whole_view_subscribers_end_equal_to_results() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut with_deltas = Watcher::subscribe(&master, Some(true)).await;

    let mut client = master.client().await;
    let n = 12;
    let ids = client
        .submit(matmul_yaml(n, "delta"), None)
        .await
        .expect("submit")
        .new_jobs;
    assert_eq!(ids.len(), n);
    let _worker = Worker::start(&master, "w", 0.05, &[]);
    // Whole-view subscribers joining mid-run, while only a delta subscriber
    // was there (so the master wrote deltas only until then).
    with_deltas.until_done(2).await;
    let mut whole = Watcher::subscribe(&master, None).await;
    let mut late = Watcher::subscribe(&master, Some(false)).await;

    with_deltas.until_done(n).await;
    whole.until_done(n).await;
    late.until_done(n).await;

    // The workers as a fresh snapshot has them, once the delta mirror has
    // read every event up to it (the fleet is idle now).
    let fresh = Watcher::subscribe(&master, None).await;
    let upto = fresh.fleet.seq().expect("a snapshot");
    with_deltas.catch_up_to(upto).await;
    assert_eq!(
        with_deltas.fleet.workers(),
        fresh.fleet.workers(),
        "deltas: the workers equal a fresh snapshot's"
    );

    let results = by_id(client.results(None).await.expect("results"));
    assert_eq!(results.len(), n);
    for (name, watcher) in [
        ("deltas", &with_deltas),
        ("whole views", &whole),
        ("whole views, joined late", &late),
    ] {
        assert_eq!(
            watcher.jobs_by_id(),
            results,
            "{name}: the mirror equals results"
        );
    }

    // Every job arrived whole first, then changed by deltas without a workload.
    let changes = with_deltas.events("job_changed");
    assert!(
        changes.len() >= 2 * n,
        "assigned and done as deltas: {} job_changed for {n} jobs",
        changes.len()
    );
    for change in &changes {
        let change = &change["change"];
        assert!(
            change.get("workload").is_none() && change.get("name").is_none(),
            "a delta carries no workload or name: {change}"
        );
        assert!(ids.contains(&change["job_id"].as_str().unwrap_or_default().to_string()));
    }
    let created = with_deltas.events("job_updated");
    assert_eq!(
        created.len(),
        n,
        "one whole view per job, when it was submitted"
    );
    assert!(created.iter().all(|e| e["job"]["state"] == "queued"));

    // The worker's job and count changed by deltas too.
    assert!(!with_deltas.events("worker_changed").is_empty());
    assert!(with_deltas.events("worker_updated").is_empty());

    // Whole-view subscribers never see a delta, and were counted before
    // their snapshot: one snapshot each, no resync.
    for watcher in [&whole, &late] {
        assert!(watcher.events("job_changed").is_empty());
        assert!(watcher.events("worker_changed").is_empty());
        assert!(watcher
            .events("job_updated")
            .iter()
            .all(|e| e["job"].get("workload").is_some()));
        let snapshots = watcher
            .frames
            .iter()
            .filter(|f| f["type"] == "snapshot")
            .count();
        assert_eq!(snapshots, 1, "no resync");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_back_from_the_archive_comes_whole_to_a_delta_subscriber() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &["--job-retention", "0s"]);
    let mut watcher = master.client().await;
    let (seq, snapshot) = watcher.subscribe_with_deltas().await.expect("subscribe");
    let mut fleet = FleetView::new();
    fleet.apply_snapshot(seq, snapshot);

    let mut client = master.client().await;
    let ids = client
        .submit(matmul_yaml(1, "back"), None)
        .await
        .expect("submit")
        .new_jobs;
    client.cancel(&ids[0]).await.expect("cancel");

    // Cancelled, then archived: the mirror drops it.
    follow(
        &mut watcher,
        &mut fleet,
        "the cancelled job archived",
        |fleet| fleet.jobs().is_empty() && fleet.archived().cancelled == 1,
    )
    .await;

    // A retry brings it back and runs it: the mirror gets it whole (workload
    // and all), then its changes as deltas, and ends equal to results.
    client.retry(&ids[0]).await.expect("retry an archived job");
    let _worker = Worker::start(&master, "w", 0.0, &[]);
    follow(&mut watcher, &mut fleet, "the retried job done", |fleet| {
        fleet
            .job(&ids[0])
            .is_some_and(|job| job.state == JobState::Done)
    })
    .await;
    let job = fleet.job(&ids[0]).expect("in the mirror").clone();
    let stored = client
        .results(Some(vec![ids[0].clone()]))
        .await
        .expect("results")
        .remove(0);
    assert_eq!(
        job, stored,
        "the mirror's copy (workload and all) is the master's"
    );
}

/// Applies the subscription's updates to `fleet` until `until` holds.
async fn follow(
    watcher: &mut tunefleet_server::client::Client,
    fleet: &mut FleetView,
    what: &str,
    until: impl Fn(&FleetView) -> bool,
) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !until(fleet) {
            match watcher.next_update().await {
                Ok(Some(Update::Snapshot(seq, snapshot))) => fleet.apply_snapshot(seq, snapshot),
                Ok(Some(Update::Event(seq, event))) => {
                    fleet.apply_event(seq, event);
                }
                other => panic!("subscription ended: {other:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within 30 s"));
}

/// While every subscriber takes deltas, the master writes a worker's whole
/// view only when a snapshot needs it: a snapshot taken after the worker's
/// jobs has it as it is now (its count, no job), the same as the mirror
/// that followed its `worker_changed` deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_after_delta_only_changes_has_each_worker_as_it_is() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut with_deltas = Watcher::subscribe(&master, Some(true)).await;
    let mut client = master.client().await;
    let n = 3;
    client
        .submit(matmul_yaml(n, "stale"), None)
        .await
        .expect("submit");
    let _worker = Worker::start(&master, "w", 0.05, &[]);
    with_deltas.until_done(n).await;
    let fresh = Watcher::subscribe(&master, Some(true)).await;
    let upto = fresh.fleet.seq().expect("a snapshot");
    with_deltas.catch_up_to(upto).await;
    let workers = fresh.fleet.workers();
    assert_eq!(workers.len(), 1);
    assert_eq!(
        (workers[0].jobs_done, workers[0].current_job.as_deref()),
        (n as u64, None),
        "the snapshot's worker is current"
    );
    assert_eq!(with_deltas.fleet.workers(), workers);
    assert!(with_deltas.events("worker_updated").is_empty());
}
