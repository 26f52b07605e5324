//! State in a real PostgreSQL server (`scripts/start-postgres.sh`, URL in
//! `TUNEFLEET_TEST_POSTGRES`): a standby master takes over when the leader is
//! killed, workers and the CLI given both URLs follow it, and every job is
//! done exactly once across the failover; a database of a newer schema is
//! refused with its URL named. Skipped without a server, unless
//! `TUNEFLEET_REQUIRE_POSTGRES=1` (CI), where a missing server fails.
//!
//! The rest of the end-to-end suite runs against PostgreSQL too: with
//! `TUNEFLEET_TEST_STORE=postgres`, every `Master::start` gets a fresh
//! database (scripts/test.sh runs a selection that way).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tunefleet_server::client::Client;
use tunefleet_shared::protocol::JobState;
use tunefleet_tests::*;

fn server_or_skip() -> Option<String> {
    match postgres_base_url() {
        Some(url) => Some(url),
        None if std::env::var("TUNEFLEET_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => {
            panic!("TUNEFLEET_REQUIRE_POSTGRES=1 but TUNEFLEET_TEST_POSTGRES is not set (scripts/start-postgres.sh prints it)")
        }
        None => {
            eprintln!("skipped: no PostgreSQL (set TUNEFLEET_TEST_POSTGRES, see scripts/start-postgres.sh)");
            None
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Trace lines of the state as `(at, job_id, state)`.
fn trace(state: &str) -> Vec<(u64, String, String)> {
    let out = Command::new(bin("tunefleet"))
        .args(["export-trace", "--state", state])
        .output()
        .expect("run export-trace");
    assert!(
        out.status.success(),
        "export-trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("trace line is JSON");
            let job = &v["event"]["job"];
            Some((
                v["at"].as_u64()?,
                job["job_id"].as_str()?.to_string(),
                job["state"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_is_killed_and_no_job_is_lost_or_done_twice() {
    let Some(base) = server_or_skip() else {
        return;
    };
    let state = fresh_postgres_database(&base);
    let dir_a = tempfile::tempdir().expect("tempdir");
    let dir_b = tempfile::tempdir().expect("tempdir");
    let mut leader = Master::start_on(dir_a.path(), &state, &[]);

    // The standby: no port bound while it waits.
    let port_b = free_port();
    let addr_b: SocketAddr = format!("127.0.0.1:{port_b}").parse().expect("addr");
    let log_b = dir_b.path().join("master.log");
    let mut standby = Command::new(bin("tunefleet"))
        .args(["serve", "--bind", &addr_b.to_string(), "--state", &state])
        .args(["--admin-token", ADMIN_TOKEN, "--standby-poll", "100ms"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_b).expect("log file"))
        .spawn()
        .expect("spawn the standby");
    eventually(
        Duration::from_secs(20),
        "the second master waits as standby",
        || async {
            let log = std::fs::read_to_string(&log_b).unwrap_or_default();
            log.contains("waiting as its standby").then_some(())
        },
    )
    .await;
    assert!(
        TcpStream::connect(addr_b).is_err(),
        "a standby does not accept connections"
    );

    let both = format!("{},ws://{addr_b}", leader.url());
    let n = 40;
    let mut client = leader.client().await;
    client
        .submit(matmul_yaml(n, "fo"), Some("failover.yaml"))
        .await
        .expect("submit");
    let _ = client.close().await;
    let _w1 = Worker::start_url(&both, dir_a.path(), "fo-1", 0.05, &[]);
    let _w2 = Worker::start_url(&both, dir_a.path(), "fo-2", 0.05, &[]);
    eventually(Duration::from_secs(30), "some jobs done", || async {
        let mut client = Client::connect(&leader.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?;
        let jobs = client.results(None).await.ok()?;
        (jobs.iter().filter(|j| j.state == JobState::Done).count() >= 10).then_some(())
    })
    .await;

    let killed_at = now_ms();
    let killed = Instant::now();
    leader.kill9();
    // A command sent at once, while neither master listens, waits for the
    // standby instead of failing.
    let during = Command::new(bin("tunefleet"))
        .args(["status", "--json", "--server", &both])
        .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run status");
    assert!(
        during.status.success(),
        "status during the failover: {}",
        String::from_utf8_lossy(&during.stderr)
    );
    eventually(Duration::from_secs(20), "the standby listens", || async {
        TcpStream::connect(addr_b).is_ok().then_some(())
    })
    .await;
    let listening_after = killed.elapsed();

    // The CLI, given both URLs, finds the new leader.
    eventually(Duration::from_secs(60), "every job done", || async {
        let out = Command::new(bin("tunefleet"))
            .args(["results", "--format", "json", "--server", &both])
            .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
            .output()
            .ok()?;
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let rows = rows.as_array()?;
        (rows.len() == n && rows.iter().all(|r| r["state"] == "done")).then_some(())
    })
    .await;

    let lines = trace(&state);
    let mut done: HashMap<&str, usize> = HashMap::new();
    let mut last: HashMap<&str, &str> = HashMap::new();
    for (_, id, state) in &lines {
        let prev = last.insert(id, state);
        if state == "done" && prev != Some("done") {
            *done.entry(id).or_default() += 1;
        }
    }
    assert_eq!(done.len(), n, "every job reached done");
    assert!(
        done.values().all(|&c| c == 1),
        "done exactly once: {done:?}"
    );
    let first_assigned = lines
        .iter()
        .filter(|(at, _, state)| *at >= killed_at && state == "assigned")
        .map(|(at, _, _)| *at)
        .min()
        .expect("the new leader assigned jobs");
    eprintln!(
        "failover: kill -9 → standby listening {} ms, → first job assigned by the new leader {} ms",
        listening_after.as_millis(),
        first_assigned - killed_at
    );
    let _ = standby.kill();
    let _ = standby.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_a_newer_schema_is_refused_with_its_url_named() {
    let Some(base) = server_or_skip() else {
        return;
    };
    let state = fresh_postgres_database(&base);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start_on(dir.path(), &state, &[]);
    assert!(master.terminate().is_some_and(|s| s.success()));
    let url = state.clone();
    std::thread::spawn(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        db.execute(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            &[],
        )
        .expect("bump the schema");
    })
    .join()
    .expect("update");
    let out = Command::new(bin("tunefleet"))
        .args(["serve", "--bind", "127.0.0.1:0", "--state", &state])
        .args(["--admin-token", ADMIN_TOKEN])
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&state) && err.contains("schema version 99") && err.contains("newer"),
        "{err}"
    );
}

/// A schema-2 database (today's tables less what schemas 3 and 4 changed) is
/// migrated in place by the master that takes the lead, and its jobs can
/// then be archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_2_database_is_migrated_and_its_jobs_archive() {
    an_older_database_is_migrated_and_its_jobs_archive(2).await;
}

/// The same from schema 3 (the workloads still in `jobs.workload`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_3_database_is_migrated_and_its_jobs_archive() {
    an_older_database_is_migrated_and_its_jobs_archive(3).await;
}

/// Today's tables made into schema `from`'s by hand (PostgreSQL has no
/// fixture file), then opened by a master.
async fn an_older_database_is_migrated_and_its_jobs_archive(from: u32) {
    let Some(base) = server_or_skip() else {
        return;
    };
    let state = fresh_postgres_database(&base);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start_on(dir.path(), &state, &[]);
    let report = master
        .client()
        .await
        .submit(matmul_yaml(3, "old"), None)
        .await
        .expect("submit");
    assert_eq!(report.new_jobs.len(), 3);
    let worker = Worker::start(&master, "w", 0.0, &[]);
    eventually(Duration::from_secs(30), "3 jobs done", || {
        let master = &master;
        async move {
            let status = master.client().await.status().await.ok()?;
            (status.jobs.done == 3).then_some(())
        }
    })
    .await;
    drop(worker);
    assert!(master.terminate().is_some_and(|s| s.success()));
    let url = state.clone();
    std::thread::spawn(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        // Schema 3: the workload in the job's row.
        db.batch_execute(
            "ALTER TABLE jobs ADD COLUMN workload TEXT;
             UPDATE jobs SET workload = w.workload FROM workloads w WHERE w.job_id = jobs.job_id;
             ALTER TABLE jobs ALTER COLUMN workload SET NOT NULL;
             DROP TABLE workloads;
             DROP TABLE cost_models;
             UPDATE meta SET value = '3' WHERE key = 'schema_version';",
        )
        .expect("make it schema 3");
        if from == 2 {
            db.batch_execute(
                "DROP INDEX jobs_archived_by_key;
                 ALTER TABLE jobs DROP COLUMN archived_at;
                 ALTER TABLE jobs DROP COLUMN content_key;
                 UPDATE meta SET value = '2' WHERE key = 'schema_version';",
            )
            .expect("make it schema 2");
        }
    })
    .join()
    .expect("downgrade");

    let master = Master::start_on(dir.path(), &state, &["--job-retention", "0s"]);
    assert!(
        master
            .log()
            .contains(&format!("migrating the state database from schema {from}")),
        "{}",
        master.log()
    );
    let status = eventually(Duration::from_secs(20), "3 jobs archived", || {
        let master = &master;
        async move {
            let status = master.client().await.status().await.ok()?;
            (status.jobs.archived == 3).then_some(status)
        }
    })
    .await;
    assert_eq!((status.jobs.total, status.jobs.done), (3, 3));
    let again = master
        .client()
        .await
        .submit(matmul_yaml(3, "old"), None)
        .await
        .expect("resubmit");
    assert_eq!(again.duplicates.len(), 3, "{again:?}");
}
