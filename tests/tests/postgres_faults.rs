//! PostgreSQL going away under a running master: the server stopped and
//! started again with its own tools (`pg_ctl`), and the master's session
//! ended from the server side (`pg_terminate_backend`). Changes are refused
//! at once with a `storage` error, reads go on, `/healthz` says 503 until
//! the master has reconnected by itself, nothing acknowledged is lost and
//! nothing refused is applied later.
//!
//! A file of its own: stopping the server would break the other PostgreSQL
//! tests, which run in parallel within their binary (test binaries run one
//! at a time). Needs the server of `scripts/start-postgres.sh` on this
//! machine (`TUNEFLEET_TEST_POSTGRES`, data in `TUNEFLEET_PG_DIR`, default
//! /tmp/tunefleet-pg) and root to run `pg_ctl` as `postgres`; skipped with
//! a message otherwise.

use std::process::Command;
use std::time::{Duration, Instant};

use tunefleet_shared::protocol::JobState;
use tunefleet_tests::*;

/// The test server's URL and data directory, or `None` (skipped).
fn server_or_skip() -> Option<(String, String)> {
    let Some(url) = postgres_base_url() else {
        if std::env::var("TUNEFLEET_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
            panic!("TUNEFLEET_REQUIRE_POSTGRES=1 but TUNEFLEET_TEST_POSTGRES is not set");
        }
        eprintln!(
            "skipped: no PostgreSQL (set TUNEFLEET_TEST_POSTGRES, see scripts/start-postgres.sh)"
        );
        return None;
    };
    let dir = std::env::var("TUNEFLEET_PG_DIR").unwrap_or_else(|_| "/tmp/tunefleet-pg".into());
    if !std::path::Path::new(&dir).join("PG_VERSION").exists() || pg_ctl().is_none() {
        eprintln!("skipped: the server's data directory {dir} or pg_ctl is not on this machine");
        return None;
    }
    Some((url, dir))
}

fn pg_ctl() -> Option<String> {
    let mut bins: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/pg_ctl")))
        .filter(|p| p.exists())
        .collect();
    bins.sort();
    bins.pop().map(|p| p.display().to_string())
}

/// `pg_ctl ACTION` on the test server, as the `postgres` user.
fn pg_ctl_run(dir: &str, action: &str) {
    let Some(pg_ctl) = pg_ctl() else {
        panic!("no pg_ctl");
    };
    // The server `start` leaves running must not inherit this test's output:
    // it would hold the pipe of whoever runs the tests (`cargo test | tee`
    // in scripts/test.sh) open for ever. Its own log file instead, and no
    // inherited descriptors.
    let ok = Command::new("su")
        .args(["postgres", "-s", "/bin/sh", "-c"])
        .arg(format!(
            "'{pg_ctl}' -D '{dir}' -l '{dir}/server.log' -m fast -w -t 30 {action}"
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "pg_ctl {action} (see {dir}/server.log)");
}

/// The server is stopped by one test at a time (this binary's tests run on
/// parallel threads).
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stops the server; started again on drop (with the options it ran
/// with: `pg_ctl start` alone would not reuse them), whatever the test did.
struct Stopped {
    dir: String,
    options: String,
}

impl Stopped {
    fn server(dir: &str) -> Stopped {
        // `postmaster.opts`: the binary, `"-D" "DIR"`, then the options.
        let opts =
            std::fs::read_to_string(format!("{dir}/postmaster.opts")).expect("postmaster.opts");
        let data = format!("\"-D\" \"{dir}\"");
        let options = opts
            .split_once(&data)
            .map_or(String::new(), |(_, rest)| rest.trim().to_string());
        pg_ctl_run(dir, "stop");
        Stopped {
            dir: dir.to_string(),
            options,
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        pg_ctl_run(&self.dir, &format!("-o '{}' start", self.options));
    }
}

/// Runs one SQL statement on the server's `postgres` database.
fn sql(base: &str, statement: &str) {
    let base = base.to_string();
    let statement = statement.to_string();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&base, postgres::NoTls).expect("connect");
        client.batch_execute(&statement).expect("statement");
    })
    .join()
    .expect("sql");
}

/// `n` matmul workloads in `dir/name`, distinct from any other file's given
/// another `k`.
fn batch_yaml(dir: &std::path::Path, name: &str, n: usize, k: usize) -> std::path::PathBuf {
    let mut yaml = String::from("target: {kind: llvm}\ntrials: 8\nworkloads:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - {{name: b{k}-{i}, op: matmul, shape: {{m: {}, n: 16, k: {k}}}, dtype: float32}}\n",
            i + 1
        ));
    }
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write");
    path
}

/// What a client sees while the store is away: a refused submission (in
/// under 5 s, naming the store), then (`lasting`: the server is still away)
/// a degraded status and `/healthz` 503.
fn assert_refused_while_away(master: &Master, file: &std::path::Path, what: &str, lasting: bool) {
    let started = Instant::now();
    let out = master.cli(&["submit", &file.display().to_string()]);
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: refused");
    assert!(secs < 5.0, "{what}: answered in {secs:.1} s");
    assert!(err.contains("storage"), "{what}: {err}");
    eprintln!("{what}: submit refused in {secs:.2} s");
    if !lasting {
        // The session is replaced within a second: too soon to look.
        return;
    }
    let out = master.cli(&["status", "--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{what}: status answers");
    assert!(json.contains(r#""storage": "degraded""#), "{what}: {json}");
    assert_eq!(http_get(master.addr, "/healthz").0, 503, "{what}");
}

/// Waits for `/healthz` 200; returns how long it took.
async fn committing_again(master: &Master, what: &str) -> f64 {
    let started = Instant::now();
    eventually(Duration::from_secs(15), "/healthz 200", || async {
        (http_get(master.addr, "/healthz").0 == 200).then_some(())
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!("{what}: committing again {secs:.2} s after the server was back");
    secs
}

/// Every job of the master, once all are done.
async fn all_done(master: &Master, total: usize) -> Vec<tunefleet_shared::protocol::JobView> {
    let jobs = eventually(Duration::from_secs(60), "every job done", || async {
        let jobs = master.client().await.results(None).await.ok()?;
        (jobs.len() == total && jobs.iter().all(|j| j.state == JobState::Done)).then_some(jobs)
    })
    .await;
    assert!(jobs.iter().all(|j| j.attempts <= 1), "no attempt counted");
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_answered_reconnected_to_and_nothing_is_lost() {
    let Some((base, data)) = server_or_skip() else {
        return;
    };
    let _alone = SERVER.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start_on(dir.path(), &fresh_postgres_database(&base), &[]);
    let before = batch_yaml(dir.path(), "before.yaml", 10, 1);
    assert!(master
        .cli(&["submit", &before.display().to_string()])
        .status
        .success());
    let worker = Worker::start(&master, "w", 0.01, &[]);

    let stopped = Stopped::server(&data);
    let during = batch_yaml(dir.path(), "during.yaml", 10, 2);
    assert_refused_while_away(&master, &during, "PostgreSQL stopped", true);
    drop(stopped);
    committing_again(&master, "PostgreSQL restarted").await;
    assert!(master.log().contains("reconnected to PostgreSQL"));

    // Nothing refused was applied: resubmitted, it is new.
    let out = master.cli(&["submit", &during.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("10 new"), "{text}");
    all_done(&master, 20).await;
    drop(worker);
    master.restart();
    let status = master.client().await.status().await.expect("status");
    assert_eq!((status.jobs.total, status.jobs.done), (20, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_is_answered_and_replaced() {
    let Some((base, _)) = server_or_skip() else {
        return;
    };
    let _alone = SERVER.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = fresh_postgres_database(&base);
    let db = state.rsplit('/').next().expect("db name").to_string();
    let master = Master::start_on(dir.path(), &state, &[]);
    let before = batch_yaml(dir.path(), "before.yaml", 5, 1);
    assert!(master
        .cli(&["submit", &before.display().to_string()])
        .status
        .success());

    let started = Instant::now();
    sql(
        &base,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND application_name LIKE 'tunefleet serve %'"
        ),
    );
    // The master learns at its next commit, which this submission is.
    let during = batch_yaml(dir.path(), "during.yaml", 5, 2);
    assert_refused_while_away(&master, &during, "session terminated", false);
    committing_again(&master, "session terminated").await;
    eprintln!(
        "session terminated: answered and committing again {:.2} s after the kill",
        started.elapsed().as_secs_f64()
    );
    let out = master.cli(&["submit", &during.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Refused the first time: new now, not a duplicate of something applied later.
    assert!(text.contains("5 new"), "{text}");
    let status = master.client().await.status().await.expect("status");
    assert_eq!(status.jobs.total, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_a_leader_and_a_standby_keeps_one_leader_and_every_job() {
    let Some((base, data)) = server_or_skip() else {
        return;
    };
    let _alone = SERVER.lock().await;
    let state = fresh_postgres_database(&base);
    let dir_a = tempfile::tempdir().expect("tempdir");
    let dir_b = tempfile::tempdir().expect("tempdir");
    let mut leader = Master::start_on(dir_a.path(), &state, &[]);
    let before = batch_yaml(dir_a.path(), "before.yaml", 10, 1);
    assert!(leader
        .cli(&["submit", &before.display().to_string()])
        .status
        .success());
    let port_b = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let addr_b: std::net::SocketAddr = format!("127.0.0.1:{port_b}").parse().expect("addr");
    let log_b = dir_b.path().join("master.log");
    let mut standby = Command::new(bin("tunefleet"))
        .args(["serve", "--bind", &addr_b.to_string(), "--state", &state])
        .args(["--admin-token", ADMIN_TOKEN, "--standby-poll", "100ms"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_b).expect("log file"))
        .spawn()
        .expect("spawn the standby");
    eventually(Duration::from_secs(20), "a standby", || async {
        let log = std::fs::read_to_string(&log_b).unwrap_or_default();
        log.contains("waiting as its standby").then_some(())
    })
    .await;

    drop(Stopped::server(&data));
    // One of the two leads: the first still (its probe took the lead
    // again), or the standby (which took it first: the first then stops,
    // acknowledging nothing, rather than write beside it).
    let url = eventually(Duration::from_secs(30), "one master committing", || async {
        if leader.log().contains("this master still leads")
            && http_get(leader.addr, "/healthz").0 == 200
        {
            return Some(leader.url());
        }
        (std::net::TcpStream::connect(addr_b).is_ok() && http_get(addr_b, "/healthz").0 == 200)
            .then(|| format!("ws://{addr_b}"))
    })
    .await;
    let first_leads = url == leader.url();
    eprintln!(
        "restart with a standby: {} leads",
        if first_leads {
            "the first master"
        } else {
            "the standby"
        }
    );
    if !first_leads {
        // The first finds its lead gone at its next probe, and stops.
        eventually(
            Duration::from_secs(10),
            "the first master stops",
            || async {
                leader
                    .log()
                    .contains("another master took the lead")
                    .then_some(())
            },
        )
        .await;
        let _ = leader.terminate();
    } else {
        assert!(
            standby.try_wait().ok().flatten().is_none(),
            "the standby outlives the restart: {}",
            std::fs::read_to_string(&log_b).unwrap_or_default()
        );
    }
    let mut client = tunefleet_server::client::Client::connect(&url, Some(ADMIN_TOKEN))
        .await
        .expect("connect to the leader");
    let status = client.status().await.expect("status");
    assert_eq!(status.jobs.total, 10, "nothing acknowledged lost");
    let _ = standby.kill();
    let _ = standby.wait();
}
