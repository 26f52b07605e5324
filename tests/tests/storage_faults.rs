//! Storage faults, each with the real file system: a second master on the
//! same state file, a file that is not a database, a read-only state
//! directory, and a disk that fills up under a running master. Each gets an
//! error that names the file and the cause; nothing is corrupted; a running
//! master refuses changes at once while it cannot commit (and never applies
//! them later), answers reads, resumes by itself when it can, and stops when
//! told.
//!
//! The read-only and full-disk cases need root (to run the master as
//! `nobody`, and to mount a small tmpfs); without it they are skipped.

use std::process::Command;
use std::time::Duration;

use tunefleet_tests::*;

fn serve_output(state: &str) -> std::process::Output {
    Command::new(bin("tunefleet"))
        .args(["serve", "--bind", "127.0.0.1:0", "--state", state])
        .args(["--admin-token", ADMIN_TOKEN])
        .output()
        .expect("run serve")
}

/// `n` matmul workloads, distinct from every other batch given another `k`.
fn batch(n: usize, k: usize) -> String {
    let mut yaml = String::from("target: {kind: llvm}\ntrials: 8\nworkloads:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - {{name: b{k}-{i}, op: matmul, shape: {{m: {}, n: 16, k: {k}}}, dtype: float32}}\n",
            i + 1
        ));
    }
    yaml
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_master_on_the_same_file_is_refused_and_the_first_keeps_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start_on(
        dir.path(),
        &dir.path().join("fleet.db").display().to_string(),
        &[],
    );
    let out = serve_output(&master.state);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&master.state)
            && err.contains("in use by another master")
            && err.contains(&format!("pid {}", master.pid())),
        "{err}"
    );
    let mut client = master.client().await;
    let report = client
        .submit(matmul_yaml(3, "second"), Some("x.yaml"))
        .await
        .expect("the first master still takes work");
    assert_eq!(report.new_jobs.len(), 3);
}

#[test]
fn a_file_that_is_not_a_database_is_named_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).expect("write");
    let out = serve_output(path.to_str().expect("path"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("notes.txt") && err.contains("not a SQLite database"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        text,
        "unchanged"
    );
}

#[test]
fn a_read_only_state_directory_is_named() {
    if !is_root() {
        eprintln!("skipped: needs root to run the master as nobody");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).expect("mkdir");
    let state = ro.join("fleet.db");
    // Reachable and executable for nobody, writable for no one but root.
    Command::new("chmod")
        .args(["755"])
        .arg(dir.path())
        .status()
        .expect("chmod");
    Command::new("chmod")
        .arg("555")
        .arg(&ro)
        .status()
        .expect("chmod");
    let out = Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .arg(bin("tunefleet"))
        .args(["serve", "--bind", "127.0.0.1:0", "--state"])
        .arg(&state)
        .args(["--admin-token", ADMIN_TOKEN])
        .output()
        .expect("run serve as nobody");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&state.display().to_string()) && err.contains("Permission denied"),
        "{err}"
    );
    assert!(!state.exists());
}

/// Mounts a small tmpfs on `dir`; unmounted on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A master on a 4 MiB tmpfs in `dir`, or `None` (skipped, with the reason
/// printed) when this is not root or no tmpfs can be mounted.
fn master_on_small_disk(dir: &std::path::Path, extra: &[&str]) -> Option<(SmallDisk, Master)> {
    if !is_root() {
        eprintln!("skipped: needs root to mount a small tmpfs");
        return None;
    }
    let Some(disk) = SmallDisk::mount(&dir.join("disk"), "4m") else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return None;
    };
    let state = dir.join("disk/fleet.db").display().to_string();
    Some((disk, Master::start_on(dir, &state, extra)))
}

/// Fills the tmpfs under `dir` to the last byte; returns the filler.
fn fill_disk(dir: &std::path::Path) -> std::path::PathBuf {
    let filler = dir.join("disk/filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .output();
    filler
}

/// `tunefleet submit FILE`: (exit status, stderr, seconds it took).
fn cli_submit(master: &Master, file: &std::path::Path) -> (bool, String, f64) {
    let started = std::time::Instant::now();
    let out = master.cli(&["submit", &file.display().to_string()]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed().as_secs_f64(),
    )
}

/// The next `storage_changed` event a subscriber gets: the problem it
/// names, or `None` for "healthy again".
async fn storage_changed(
    client: &mut tunefleet_server::client::Client,
) -> Option<tunefleet_shared::protocol::StorageProblem> {
    use tunefleet_server::client::Update;
    use tunefleet_shared::protocol::FleetEvent;
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match client.next_update().await {
                Ok(Some(Update::Event(_, FleetEvent::StorageChanged { problem }))) => {
                    return problem
                }
                Ok(Some(_)) => {}
                other => panic!("the subscription ended: {other:?}"),
            }
        }
    })
    .await
    .expect("a storage_changed event within 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_answered_at_once_reads_go_on_and_work_resumes_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((_disk, master)) = master_on_small_disk(dir.path(), &[]) else {
        return;
    };
    let mut client = master.client().await;
    let before = client
        .submit(batch(20, 1), Some("before.yaml"))
        .await
        .expect("submit while there is room");
    assert_eq!(before.new_jobs.len(), 20);
    let worker = Worker::start(&master, "w", 0.01, &[]);
    eventually(Duration::from_secs(20), "a job done", || async {
        let status = master.client().await.status().await.ok()?;
        (status.jobs.done >= 2).then_some(())
    })
    .await;

    // A dashboard's subscription, to see the store's health change.
    let mut watcher = master.client().await;
    watcher.subscribe().await.expect("subscribe");

    let filler = fill_disk(dir.path());
    let during = dir.path().join("during.yaml");
    std::fs::write(&during, batch(30, 2)).expect("write");
    // The submission that meets the full disk gets a definite answer...
    let (ok, err, secs) = cli_submit(&master, &during);
    assert!(!ok, "refused: {err}");
    assert!(secs < 5.0, "answered in {secs:.1} s");
    assert!(err.contains("storage") && err.contains("fleet.db"), "{err}");
    assert!(err.contains("nothing of this request was applied"), "{err}");
    eprintln!("full disk: the first submit refused in {secs:.2} s");
    // ...and so does the next one, at once.
    let (ok, err, secs) = cli_submit(&master, &during);
    assert!(
        !ok && secs < 5.0 && err.contains("storage"),
        "{secs} s: {err}"
    );
    eprintln!("full disk: the next submit refused in {secs:.2} s");

    // Reads go on, and say why changes are refused.
    let started = std::time::Instant::now();
    let out = master.cli(&["status", "--json"]);
    eprintln!(
        "full disk: status --json in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json.contains(r#""storage": "degraded""#), "{json}");
    assert!(json.contains("full"), "the cause: {json}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(http_get(master.addr, "/healthz").0, 503);
    let (code, metrics) = http_get(master.addr, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("tunefleet_storage_degraded 1"),
        "{metrics}"
    );
    let results = client
        .results(None)
        .await
        .expect("results during the outage");
    assert_eq!(results.len(), 20, "the refused submission is not there");
    // Subscribers were told, and a new one's snapshot says it too.
    let problem = storage_changed(&mut watcher).await.expect("degraded");
    assert!(problem.reason.contains("fleet.db"), "{problem:?}");
    let (_, snapshot) = master
        .client()
        .await
        .subscribe()
        .await
        .expect("subscribe during the outage");
    assert_eq!(snapshot.storage_problem.as_ref(), Some(&problem));

    // Space returns: the master commits again by itself.
    std::fs::remove_file(&filler).expect("free space");
    let freed = std::time::Instant::now();
    eventually(Duration::from_secs(10), "/healthz 200", || async {
        (http_get(master.addr, "/healthz").0 == 200).then_some(())
    })
    .await;
    eprintln!(
        "full disk: committing again {:.2} s after space returned",
        freed.elapsed().as_secs_f64()
    );
    assert!(master.log().contains("takes commits again"));
    assert_eq!(
        storage_changed(&mut watcher).await,
        None,
        "subscribers are told the store is healthy again"
    );
    let out = master.cli(&["status", "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""storage": "ok""#));

    // Nothing refused was applied: the resubmission is new, not duplicates.
    let again = client
        .submit(batch(30, 2), Some("during.yaml"))
        .await
        .expect("accepted again");
    assert_eq!(again.new_jobs.len(), 30, "{again:?}");
    // The worker kept what it could not have acknowledged, and no job
    // counts an attempt against the store's fault.
    let jobs = eventually(Duration::from_secs(60), "every job done", || async {
        let jobs = master.client().await.results(None).await.ok()?;
        jobs.iter()
            .all(|j| j.state == tunefleet_shared::protocol::JobState::Done)
            .then_some(jobs)
    })
    .await;
    assert_eq!(jobs.len(), 50);
    // (0: the result of an attempt the reload did not count, re-sent.)
    assert!(
        jobs.iter().all(|j| j.attempts <= 1),
        "{:?}",
        jobs.iter()
            .map(|j| (&j.name, j.attempts))
            .collect::<Vec<_>>()
    );
    drop(worker);
    drop(client);

    // And all of it is on disk: a restart finds every job, done.
    let mut master = master;
    master.restart();
    let status = master.client().await.status().await.expect("status");
    assert_eq!((status.jobs.total, status.jobs.done), (50, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_full_disk_stops_the_master_within_10_s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((_disk, mut master)) = master_on_small_disk(dir.path(), &[]) else {
        return;
    };
    let mut client = master.client().await;
    client
        .submit(batch(5, 1), Some("before.yaml"))
        .await
        .expect("submit while there is room");
    let _filler = fill_disk(dir.path());
    // An idle master finds the full disk by itself, before any commit fails.
    let filled = std::time::Instant::now();
    eventually(Duration::from_secs(5), "/healthz 503", || async {
        (http_get(master.addr, "/healthz").0 == 503).then_some(())
    })
    .await;
    eprintln!(
        "full disk: an idle master degraded {:.2} s after the disk filled",
        filled.elapsed().as_secs_f64()
    );
    let out = master.cli(&["status", "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""storage": "degraded""#));
    let refused = client
        .submit(batch(30, 2), Some("during.yaml"))
        .await
        .expect_err("the disk is full");
    assert!(refused.to_string().contains("storage"), "{refused}");
    let started = std::time::Instant::now();
    let status = master.terminate().expect("exits on SIGTERM");
    let secs = started.elapsed().as_secs_f64();
    eprintln!("full disk: SIGTERM to exit {secs:.2} s");
    assert!(secs < 10.0, "took {secs:.1} s");
    assert!(status.success(), "{status:?}\n{}", master.log());
}
