//! Harness for end-to-end tests: the real `tunefleet` and `tunefleet-worker`
//! binaries, started as processes on loopback, killed with real signals.
//!
//! The binaries are built once per test process with the same cargo that runs
//! the tests (`$CARGO build --bins`), so a test never runs a stale binary.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tunefleet_server::client::Client;

pub mod chaos;
pub mod netns;
pub mod raw;

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// Directory holding the workspace's built binaries (target/debug). A
/// program that is itself one of those binaries (`tunefleet-bench`, which is
/// not under `deps/`) uses its own directory, and nothing is built.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(own) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .filter(|dir| dir.file_name().is_some_and(|n| n != "deps"))
        {
            return own;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "tunefleet-server",
            "-p",
            "tunefleet-worker",
            "--bins",
        ]);
        // The same features as this test build, so cargo does not rebuild the
        // worker without TVM under the feet of other test binaries.
        if cfg!(feature = "tvm") {
            build.args(["--features", "tunefleet-worker/tvm"]);
        }
        let status = build
            .current_dir(&root)
            .status()
            .expect("cannot run cargo to build the binaries");
        assert!(status.success(), "building the tunefleet binaries failed");
        // target/debug/deps/<test-binary> -> target/debug
        let exe = std::env::current_exe().expect("current exe");
        exe.parent()
            .and_then(Path::parent)
            .expect("test binary lives in target/<profile>/deps")
            .to_path_buf()
    })
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(path.is_file(), "{} not built", path.display());
    path
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .expect("log file")
}

/// The PostgreSQL server the tests may use (`scripts/start-postgres.sh`
/// prints its URL), from `TUNEFLEET_TEST_POSTGRES`.
pub fn postgres_base_url() -> Option<String> {
    std::env::var("TUNEFLEET_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// A new, empty database on [`postgres_base_url`]'s server; returns its URL.
pub fn fresh_postgres_database(base: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "tunefleet_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let base_owned = base.to_string();
    let create = name.clone();
    // The sync client runs its own runtime: not inside the test's.
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&base_owned, postgres::NoTls)
            .expect("connect to the test PostgreSQL");
        // One statement each: neither may run inside a transaction block.
        for sql in [
            format!("DROP DATABASE IF EXISTS {create}"),
            format!("CREATE DATABASE {create}"),
        ] {
            client.batch_execute(&sql).expect("create a test database");
        }
    })
    .join()
    .expect("creating the database");
    let (server, _) = base.rsplit_once('/').expect("base URL ends in /DB");
    format!("{server}/{name}")
}

/// A running master process.
pub struct Master {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// What `--state` says: the SQLite file, or a postgres:// URL when the
    /// tests run against PostgreSQL (`TUNEFLEET_TEST_POSTGRES`).
    pub state: String,
    pub dir: PathBuf,
    extra: Vec<String>,
}

impl Master {
    /// Starts a master on a free port with a fresh state file under `dir`.
    ///
    /// With `TUNEFLEET_TEST_STORE=postgres` (and the server in
    /// `TUNEFLEET_TEST_POSTGRES`), the state is a fresh PostgreSQL database
    /// instead, so the same test runs against both stores.
    pub fn start(dir: &Path, extra: &[&str]) -> Master {
        let on_postgres = std::env::var("TUNEFLEET_TEST_STORE").is_ok_and(|v| v == "postgres");
        let state = match postgres_base_url() {
            Some(base) if on_postgres => fresh_postgres_database(&base),
            None if on_postgres => {
                panic!("TUNEFLEET_TEST_STORE=postgres needs TUNEFLEET_TEST_POSTGRES (scripts/start-postgres.sh prints it)")
            }
            _ => dir.join("fleet.db").display().to_string(),
        };
        Master::start_on(dir, &state, extra)
    }

    /// Starts a master on a free port with `--state STATE`.
    pub fn start_on(dir: &Path, state: &str, extra: &[&str]) -> Master {
        let state = state.to_string();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, addr) = spawn_master("127.0.0.1:0".parse().expect("addr"), &state, dir, &extra);
        Master {
            child: Some(child),
            addr,
            state,
            dir: dir.to_path_buf(),
            extra,
        }
    }

    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// `kill -9`: no chance to flush or say goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        signal(child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Starts the master again on the same port with the same state file.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match std::panic::catch_unwind(|| {
                spawn_master(self.addr, &self.state, &self.dir, &self.extra)
            }) {
                Ok((child, _)) => {
                    self.child = Some(child);
                    return;
                }
                Err(e) if Instant::now() > deadline => std::panic::resume_unwind(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.url(), Some(ADMIN_TOKEN))
            .await
            .expect("client connects to the master")
    }

    /// Runs the `tunefleet` CLI against this master with the admin token.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("tunefleet"))
            .args(args)
            .args(["--server", &self.url()])
            .env("TUNEFLEET_TOKEN", ADMIN_TOKEN)
            .output()
            .expect("run tunefleet")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("master.log")).unwrap_or_default()
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn spawn_master(
    bind: SocketAddr,
    state: &str,
    dir: &Path,
    extra: &[String],
) -> (Child, SocketAddr) {
    let mut child = Command::new(bin("tunefleet"))
        .arg("serve")
        .arg("--bind")
        .arg(bind.to_string())
        .arg("--state")
        .arg(state)
        .arg("--admin-token")
        .arg(ADMIN_TOKEN)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log_file(dir, "master.log"))
        .spawn()
        .expect("spawn tunefleet serve");
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !sent {
                if let Some(rest) = line.strip_prefix("tunefleet master listening on ") {
                    let addr = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => (child, addr.parse().expect("master prints its address")),
        Err(_) => {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("master.log")).unwrap_or_default();
            panic!("master did not start listening on {bind}; log:\n{log}");
        }
    }
}

/// A running worker process.
pub struct Worker {
    child: Option<Child>,
    pub name: String,
}

impl Worker {
    pub fn start(master: &Master, name: &str, sim_seconds: f64, extra: &[&str]) -> Worker {
        Self::start_url(&master.url(), &master.dir, name, sim_seconds, extra)
    }

    pub fn start_url(
        url: &str,
        dir: &Path,
        name: &str,
        sim_seconds: f64,
        extra: &[&str],
    ) -> Worker {
        let sim_seconds = sim_seconds.to_string();
        let mut args = vec!["--backend", "sim", "--sim-seconds", &sim_seconds];
        args.extend_from_slice(extra);
        Self::spawn(url, dir, name, &args)
    }

    /// A worker with exactly these backend arguments (e.g. `--backend tvm`).
    pub fn spawn(url: &str, dir: &Path, name: &str, args: &[&str]) -> Worker {
        // A fixed target unless the test picks one (`--target auto`).
        let target: &[&str] = if args.contains(&"--target") {
            &[]
        } else {
            &["--target", r#"{"kind":"llvm","num-cores":2}"#]
        };
        let child = Command::new(bin("tunefleet-worker"))
            .args(["--server", url])
            .args(target)
            .args(["--name", name])
            .args(["--backoff-initial-ms", "50", "--backoff-max-ms", "500"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(log_file(dir, &format!("{name}.log")))
            .stderr(log_file(dir, &format!("{name}.log")))
            .spawn()
            .expect("spawn tunefleet-worker");
        Worker {
            child: Some(child),
            name: name.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn stop_signal(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn cont_signal(&self) {
        signal(self.pid(), "CONT");
    }

    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            signal(child.id(), "CONT");
        }
        self.kill9();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Polls `f` until it returns `Some` or the timeout passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A YAML file with `n` distinct small matmul workloads.
pub fn matmul_yaml(n: usize, prefix: &str) -> String {
    let mut yaml = String::from("target: {kind: llvm, num-cores: 2}\ntrials: 8\nworkloads:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: {prefix}{i}\n    op: matmul\n    shape: {{m: {}, n: 32, k: 32}}\n    dtype: float32\n",
            32 + i
        ));
    }
    yaml
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_test_writer()
        .try_init();
}

/// A plain HTTP/1.1 GET on loopback: (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = http_request(addr, path, &[]);
    (
        response.status,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

/// What [`http_request`] got back.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header of that (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every header of that name, joined with `, ` (as HTTP allows).
    pub fn header_all(&self, name: &str) -> String {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A plain HTTP/1.1 GET on loopback with extra request headers.
pub fn http_request(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the master");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let body = response.get(split + 4..).unwrap_or_default().to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body,
    }
}
