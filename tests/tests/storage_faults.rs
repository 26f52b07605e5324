//! Storage faults, each with the real file system: a second master on the
//! same state file, a file that is not a database, a read-only state
//! directory, and a disk that fills up under a running master. Each gets an
//! error that names the file and the cause; nothing is corrupted; a running
//! master refuses new work while it cannot commit and resumes when it can.
//!
//! The read-only and full-disk cases need root (to run the master as
//! `nobody`, and to mount a small tmpfs); without it they are skipped.

use std::process::Command;
use std::time::Duration;

use tunefleet_server::client::Client;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_new_work_until_space_returns_and_loses_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root to mount a small tmpfs");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(_disk) = SmallDisk::mount(&dir.path().join("disk"), "4m") else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let state = dir.path().join("disk/fleet.db").display().to_string();
    let master = Master::start_on(dir.path(), &state, &[]);
    let mut client = master.client().await;
    let before = client
        .submit(batch(20, 1), Some("before.yaml"))
        .await
        .expect("submit while there is room");
    assert_eq!(before.new_jobs.len(), 20);

    // Fill the disk.
    let filler = dir.path().join("disk/filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .output();
    // This submission cannot be committed: it is not acknowledged...
    let url = master.url();
    let pending = tokio::spawn(async move {
        let mut c = Client::connect(&url, Some(ADMIN_TOKEN))
            .await
            .expect("connect");
        c.submit(batch(300, 2), Some("during.yaml")).await
    });
    // ...and once the master knows, new work is refused at once, with a
    // reason. (Reads wait for the store: the core retries the batch first.)
    eventually(Duration::from_secs(15), "a failed commit", || async {
        master.log().contains("cannot commit state").then_some(())
    })
    .await;
    let mut probe = Client::connect(&master.url(), Some(ADMIN_TOKEN))
        .await
        .expect("connect");
    let refusal = tokio::time::timeout(
        Duration::from_secs(5),
        probe.submit(batch(1, 3), Some("refused.yaml")),
    )
    .await
    .expect("refused at once, not queued")
    .expect_err("refused while the disk is full")
    .to_string();
    assert!(
        refusal.contains("cannot write its state database"),
        "{refusal}"
    );
    assert!(!pending.is_finished(), "nothing unsaved was acknowledged");

    // Space returns: the pending submission goes through, and work resumes.
    std::fs::remove_file(&filler).expect("free space");
    let during = tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .expect("the pending submission is answered once space returns")
        .expect("task")
        .expect("accepted");
    assert_eq!(during.new_jobs.len(), 300);
    let after = client
        .submit(batch(2, 4), Some("after.yaml"))
        .await
        .expect("work accepted again");
    assert_eq!(after.new_jobs.len(), 2);
    assert_eq!(client.status().await.expect("status").jobs.total, 322);
    drop(client);

    // And all of it is on disk: a restart finds every job.
    let mut master = master;
    master.restart();
    let mut client = master.client().await;
    assert_eq!(client.status().await.expect("status").jobs.total, 322);
}
