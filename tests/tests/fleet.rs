//! The fleet end to end: real master and worker processes on loopback, real
//! SIGKILL / SIGSTOP, a real SQLite file. Each test asserts what an operator
//! would check: every job done exactly once, nothing lost across crashes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tunefleet_server::client::{Client, Update};
use tunefleet_shared::protocol::{FleetEvent, JobState, JobView};
use tunefleet_tests::*;

/// How many times the trace says each job reached `done`.
fn done_transitions(master: &Master) -> HashMap<String, usize> {
    let out = std::process::Command::new(bin("tunefleet"))
        .args(["export-trace", "--state"])
        .arg(&master.state)
        .output()
        .expect("run export-trace");
    assert!(
        out.status.success(),
        "export-trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut done = HashMap::new();
    let mut last_state: HashMap<String, String> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("trace lines are JSON");
        let job = &v["event"]["job"];
        if let (Some(id), Some(state)) = (job["job_id"].as_str(), job["state"].as_str()) {
            let prev = last_state.insert(id.to_string(), state.to_string());
            if state == "done" && prev.as_deref() != Some("done") {
                *done.entry(id.to_string()).or_default() += 1;
            }
        }
    }
    done
}

async fn all_jobs(client: &mut Client) -> Vec<JobView> {
    client.results(None).await.expect("results")
}

async fn wait_all_done(master: &Master, n: usize, timeout: Duration) -> Vec<JobView> {
    eventually(timeout, &format!("{n} jobs done"), || async {
        let mut client = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let jobs = client.results(None).await.ok()?;
        (jobs.len() == n && jobs.iter().all(|j| j.state == JobState::Done)).then_some(jobs)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_do_thirty_jobs_exactly_once() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;
    let report = client
        .submit(matmul_yaml(30, "mm"), Some("thirty.yaml"))
        .await
        .expect("submit");
    assert_eq!(report.new_jobs.len(), 30);
    let again = client
        .submit(matmul_yaml(30, "mm"), Some("thirty.yaml"))
        .await
        .expect("resubmit");
    assert_eq!(
        (again.new_jobs.len(), again.duplicates.len()),
        (0, 30),
        "resubmission is deduplicated"
    );

    let _workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&master, &format!("w{i}"), 0.05, &[]))
        .collect();
    let jobs = wait_all_done(&master, 30, Duration::from_secs(60)).await;
    for job in &jobs {
        assert!(
            job.best_latency_s.is_some_and(|l| l > 0.0),
            "{} has a latency",
            job.name
        );
        assert!(
            !job.records.is_empty() && job.records.len() <= 5,
            "{} keeps its best records",
            job.name
        );
        assert_eq!(job.attempts, 1, "{} needed no retry", job.name);
    }
    let by_worker = jobs.iter().fold(HashMap::new(), |mut m, j| {
        *m.entry(j.result.as_ref().map(|r| r.worker.clone()))
            .or_insert(0) += 1;
        m
    });
    assert!(
        by_worker.len() >= 2,
        "work was spread over workers: {by_worker:?}"
    );
    let status = client.status().await.expect("status");
    assert_eq!(
        (status.jobs.total, status.jobs.done, status.workers),
        (30, 30, 3)
    );
    let done = done_transitions(&master);
    assert_eq!(done.len(), 30);
    assert!(
        done.values().all(|n| *n == 1),
        "each job reached done once: {done:?}"
    );
}

/// Watches events until the job is assigned to a worker whose name is not `not`.
async fn wait_reassigned(
    client: &mut Client,
    job_id: &str,
    not: &str,
    timeout: Duration,
) -> (Instant, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let update = tokio::time::timeout(left, client.next_update())
            .await
            .expect("job reassigned in time")
            .expect("event stream")
            .expect("stream open");
        if let Update::Event(_, FleetEvent::JobUpdated { job }) = update {
            if job.job_id == job_id && job.state == JobState::Queued {
                return (Instant::now(), "queue".into());
            }
            if job.job_id == job_id
                && job.state.is_in_flight()
                && job.worker.as_deref() != Some(not)
            {
                return (Instant::now(), job.worker.unwrap_or_default());
            }
        }
    }
}

async fn wait_held_by(master: &Master, job_id: &str, worker: &str) {
    eventually(Duration::from_secs(20), "job assigned", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let jobs = c.results(Some(vec![job_id.to_string()])).await.ok()?;
        let job = jobs.first()?;
        (job.worker.as_deref() == Some(worker) && job.state.is_in_flight()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_job_is_recycled_at_once_and_finishes_elsewhere() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;
    let job_id = client
        .submit(matmul_yaml(1, "victim"), None)
        .await
        .expect("submit")
        .new_jobs[0]
        .clone();
    let mut doomed = Worker::start(&master, "doomed", 3.0, &[]);
    wait_held_by(&master, &job_id, "doomed").await;
    let _survivor = Worker::start(&master, "survivor", 0.1, &[]);
    eventually(Duration::from_secs(10), "survivor registered", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        (c.status().await.ok()?.workers == 2).then_some(())
    })
    .await;
    client.subscribe().await.expect("subscribe");

    let killed_at = Instant::now();
    doomed.kill9();
    let (seen_at, by) =
        wait_reassigned(&mut client, &job_id, "doomed", Duration::from_secs(5)).await;
    let recycle = seen_at - killed_at;
    println!(
        "recycle latency after kill -9: {:.2} ms (job went to {by})",
        recycle.as_secs_f64() * 1e3
    );
    // Socket-close detection, not the 15 s heartbeat: anything near a second means it went wrong.
    assert!(
        recycle < Duration::from_millis(500),
        "recycled in {recycle:?}"
    );

    let jobs = wait_all_done(&master, 1, Duration::from_secs(20)).await;
    let job = &jobs[0];
    assert_eq!(
        job.result.as_ref().map(|r| r.worker.as_str()),
        Some("survivor")
    );
    assert_eq!(job.attempts, 2);
    assert!(
        job.errors.iter().any(|e| e.message.contains("doomed")),
        "error history names the lost worker: {:?}",
        job.errors
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_worker_is_caught_by_the_heartbeat() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(
        dir.path(),
        &["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"],
    );
    let mut client = master.client().await;
    let job_id = client
        .submit(matmul_yaml(1, "frozen"), None)
        .await
        .expect("submit")
        .new_jobs[0]
        .clone();
    let frozen = Worker::start(&master, "frozen", 30.0, &[]);
    wait_held_by(&master, &job_id, "frozen").await;
    client.subscribe().await.expect("subscribe");

    let stopped_at = Instant::now();
    frozen.stop_signal();
    let (seen_at, _) =
        wait_reassigned(&mut client, &job_id, "frozen", Duration::from_secs(10)).await;
    let caught = seen_at - stopped_at;
    println!(
        "SIGSTOPped worker caught after {:.0} ms (timeout 1 s)",
        caught.as_secs_f64() * 1e3
    );
    assert!(
        caught >= Duration::from_millis(900),
        "not before the timeout: {caught:?}"
    );
    assert!(
        caught < Duration::from_millis(2500),
        "within the timeout plus one check: {caught:?}"
    );

    let _rescuer = Worker::start(&master, "rescuer", 0.1, &[]);
    let jobs = wait_all_done(&master, 1, Duration::from_secs(20)).await;
    assert!(
        jobs[0]
            .errors
            .iter()
            .any(|e| e.message.contains("heartbeat")),
        "{:?}",
        jobs[0].errors
    );
    frozen.cont_signal();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_run_resumes_without_losing_or_duplicating() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    let n = 24;
    master
        .client()
        .await
        .submit(matmul_yaml(n, "resume"), None)
        .await
        .expect("submit");
    let _workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&master, &format!("r{i}"), 0.3, &[]))
        .collect();
    let done_before = eventually(Duration::from_secs(30), "a few jobs done", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let s = c.status().await.ok()?;
        (s.jobs.done >= 5 && s.jobs.done < n).then_some(s.jobs.done)
    })
    .await;

    master.kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    master.restart();
    let mut client = master.client().await;
    let after = client.status().await.expect("status after restart");
    assert!(
        after.jobs.done >= done_before,
        "done stays done: {} < {done_before}",
        after.jobs.done
    );
    assert_eq!(after.jobs.total, n, "no job lost or added");

    let jobs = wait_all_done(&master, n, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), n);
    let done = done_transitions(&master);
    assert_eq!(done.len(), n);
    assert!(
        done.values().all(|c| *c == 1),
        "no job done twice across the crash: {done:?}"
    );
    let resubmit = client
        .submit(matmul_yaml(n, "resume"), None)
        .await
        .expect("submit");
    assert_eq!(resubmit.new_jobs.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_finished_while_master_was_down_is_accepted_after_reconnect() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;
    let job_id = client
        .submit(matmul_yaml(1, "late"), None)
        .await
        .expect("submit")
        .new_jobs[0]
        .clone();
    let _worker = Worker::start(&master, "loyal", 1.5, &[]);
    wait_held_by(&master, &job_id, "loyal").await;
    master.kill9();
    // The sim job finishes while the master is down.
    tokio::time::sleep(Duration::from_secs(3)).await;
    master.restart();
    let jobs = wait_all_done(&master, 1, Duration::from_secs(15)).await;
    let job = &jobs[0];
    assert_eq!(
        job.result.as_ref().map(|r| r.worker.as_str()),
        Some("loyal")
    );
    assert!(
        job.errors
            .iter()
            .any(|e| e.message.contains("master restarted")),
        "history shows the interrupted attempt: {:?}",
        job.errors
    );
    let mut client = master.client().await;
    assert_eq!(all_jobs(&mut client).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_keeps_state_and_workers_come_back() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    master
        .client()
        .await
        .submit(matmul_yaml(6, "g"), None)
        .await
        .expect("submit");
    let _worker = Worker::start(&master, "steady", 0.5, &[]);
    eventually(Duration::from_secs(20), "one job done", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        (c.status().await.ok()?.jobs.done >= 1).then_some(())
    })
    .await;
    let status = master.terminate().expect("master exits on SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    assert!(master.log().contains("master stopped"));
    master.restart();
    let jobs = wait_all_done(&master, 6, Duration::from_secs(30)).await;
    assert!(
        jobs.iter().all(|j| j.attempts <= 1),
        "shutdown did not burn attempts: {:?}",
        jobs.iter().map(|j| j.attempts).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_stops_reporting_is_recycled_and_fails_after_max_attempts() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &["--job-timeout", "1s", "--max-attempts", "2"]);
    let mut client = master.client().await;
    // `sim-hang…` is the sim backend's test hook: it never reports or returns.
    let yaml = "target: {kind: llvm, num-cores: 2}\nworkloads:\n  - {name: sim-hang-1, op: matmul, shape: {m: 4, n: 4, k: 4}}\n  - {name: fine, op: matmul, shape: {m: 8, n: 8, k: 8}}\n";
    client
        .submit(yaml, Some("hang.yaml"))
        .await
        .expect("submit");
    let _worker = Worker::start(&master, "patient", 0.1, &[]);
    let hung = eventually(Duration::from_secs(30), "hung job failed", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let jobs = c.results(None).await.ok()?;
        let hung = jobs.iter().find(|j| j.name == "sim-hang-1")?.clone();
        let fine = jobs.iter().find(|j| j.name == "fine")?;
        (hung.state == JobState::Failed && fine.state == JobState::Done).then_some(hung)
    })
    .await;
    assert_eq!(hung.attempts, 2);
    assert_eq!(
        hung.errors.len(),
        2,
        "one error per attempt: {:?}",
        hung.errors
    );
    assert!(
        hung.errors
            .iter()
            .all(|e| e.message.contains("job timeout")),
        "{:?}",
        hung.errors
    );
    // The worker was told to drop the hung job and kept serving.
    let status = client.status().await.expect("status");
    assert_eq!(
        (status.workers, status.jobs.failed, status.jobs.done),
        (1, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_is_resynced_with_a_snapshot_and_never_stalls_the_fleet() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &["--event-buffer", "16"]);
    // A tiny receive window, so the master's socket fills after a few events
    // and the lag comes from back-pressure, not from a lucky burst: with the
    // default buffers the whole run fits in the kernel and nothing lags.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(2048).expect("SO_RCVBUF");
    let stream = socket.connect(master.addr).await.expect("connect");
    let (mut slow, _) =
        tokio_tungstenite::client_async(format!("{}/ws/client", master.url()), stream)
            .await
            .expect("websocket handshake");
    let hello = serde_json::json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN});
    slow.send(Message::Text(hello.to_string().into()))
        .await
        .expect("hello");
    let subscribe = serde_json::json!({"id": 2, "type": "subscribe"});
    slow.send(Message::Text(subscribe.to_string().into()))
        .await
        .expect("subscribe");

    // The subscriber reads nothing while the jobs run through the fleet.
    // Enough jobs that their events (~700 bytes each, three or more per job)
    // outgrow every buffer on the way: the 128 KiB the connection may queue
    // before it waits for the socket, and the kernel's send buffer, which
    // grows as the connection goes on.
    const JOBS: usize = 600;
    master
        .client()
        .await
        .submit(matmul_yaml(JOBS, "burst"), None)
        .await
        .expect("submit");
    let _workers: Vec<Worker> = (0..2)
        .map(|i| Worker::start(&master, &format!("b{i}"), 0.0, &[]))
        .collect();
    wait_all_done(&master, JOBS, Duration::from_secs(60)).await;

    // Now it reads. It fell behind, so somewhere in the stream there is a
    // fresh snapshot; that snapshot plus the events after it is the truth.
    let mut snapshots = 0;
    let mut states: HashMap<String, String> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Ok(Some(Ok(Message::Text(text)))) =
            tokio::time::timeout(Duration::from_millis(500), slow.next()).await
        else {
            break;
        };
        let msg: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        if msg["type"] == "snapshot" {
            snapshots += 1;
            states.clear();
            for job in msg["snapshot"]["jobs"].as_array().expect("jobs") {
                states.insert(job["job_id"].to_string(), job["state"].to_string());
            }
        } else if msg["type"] == "event" && msg["event"]["kind"] == "job_updated" {
            let job = &msg["event"]["job"];
            states.insert(job["job_id"].to_string(), job["state"].to_string());
        }
    }
    assert!(
        snapshots >= 2,
        "a resync snapshot followed the first one ({snapshots} seen)"
    );
    assert_eq!(states.len(), JOBS);
    assert!(
        states.values().all(|s| s == "\"done\""),
        "the mirror ends in the true state: {states:?}"
    );
    assert!(master.log().contains("subscriber fell behind"));
}

/// A job that an idle worker takes within its own submit changes twice in
/// one step (queued, then assigned); subscribers see the result once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_assigned_by_its_own_submit_is_published_once() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let _worker = Worker::start(&master, "idle", 0.05, &[]);
    let mut watcher = master.client().await;
    eventually(
        Duration::from_secs(20),
        "the worker waits for work",
        || async {
            let status = master.client().await.status().await.ok()?;
            (status.workers == 1).then_some(())
        },
    )
    .await;
    watcher.subscribe().await.expect("subscribe");
    let mut submitter = master.client().await;
    let report = submitter
        .submit(matmul_yaml(1, "once"), Some("once.yaml"))
        .await
        .expect("submit");
    let job_id = report.new_jobs[0].clone();
    let mut states = Vec::new();
    while states.last() != Some(&JobState::Done) {
        let update = tokio::time::timeout(Duration::from_secs(20), watcher.next_update())
            .await
            .expect("the job is done in time")
            .expect("event stream")
            .expect("stream open");
        if let Update::Event(_, FleetEvent::JobUpdated { job }) = update {
            if job.job_id == job_id {
                states.push(job.state);
            }
        }
    }
    assert_eq!(
        states.iter().filter(|s| **s == JobState::Assigned).count(),
        1,
        "one `assigned` event, not one per step: {states:?}"
    );
}

/// A worker registered with `--slots 4` holds four jobs at once (four
/// sessions on the master, four workers in `status`); killed, it loses all
/// four, which are recycled and finish elsewhere, each done once. A second
/// worker with slots then drains a larger queue, every job done once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_slots_holds_several_jobs_and_a_kill_recycles_them_all() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;
    let held = client
        .submit(matmul_yaml(4, "held"), None)
        .await
        .expect("submit")
        .new_jobs;
    let mut wide = Worker::start(&master, "wide", 600.0, &["--slots", "4"]);
    eventually(
        Duration::from_secs(20),
        "four jobs held by one worker",
        || async {
            let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
                .await
                .ok()?;
            let jobs = c.results(None).await.ok()?;
            let in_wide = jobs
                .iter()
                .filter(|j| j.worker.as_deref() == Some("wide") && j.state.is_in_flight())
                .count();
            (in_wide == 4).then_some(())
        },
    )
    .await;
    assert_eq!(client.status().await.expect("status").workers, 4);

    let _survivor = Worker::start(&master, "survivor", 0.05, &[]);
    eventually(Duration::from_secs(10), "survivor registered", || async {
        let mut c = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        (c.status().await.ok()?.workers == 5).then_some(())
    })
    .await;
    wide.kill9();
    let jobs = wait_all_done(&master, 4, Duration::from_secs(30)).await;
    for job in &jobs {
        assert!(held.contains(&job.job_id));
        assert_eq!(
            job.result.as_ref().map(|r| r.worker.as_str()),
            Some("survivor"),
            "{} finished on the survivor",
            job.name
        );
        assert_eq!(job.attempts, 2, "{}: the lost attempt counts", job.name);
    }
    assert_eq!(client.status().await.expect("status").workers, 1);

    // The first four shapes are the four done jobs again (duplicates).
    let report = client
        .submit(matmul_yaml(64, "drain"), None)
        .await
        .expect("submit");
    assert_eq!((report.new_jobs.len(), report.duplicates.len()), (60, 4));
    let _fast = Worker::start(&master, "fast", 0.0, &["--slots", "8"]);
    wait_all_done(&master, 64, Duration::from_secs(60)).await;
    let done = done_transitions(&master);
    assert_eq!(done.len(), 64);
    assert!(
        done.values().all(|n| *n == 1),
        "each job reached done once: {done:?}"
    );
}
