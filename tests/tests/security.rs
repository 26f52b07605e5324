//! Security end to end: roles and tokens, the Origin check, limits (flood,
//! oversize, connections, workloads per upload) while a well-behaved worker
//! keeps working, TLS with a self-signed certificate, the `shutdown` admin
//! action, and secrets that never reach a log.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};
use tunefleet_server::client::{Client, ClientError};
use tunefleet_shared::protocol::{ErrorCode, JobState};
use tunefleet_tests::raw::{connect as raw, next, send, Ws};
use tunefleet_tests::*;

const WORKER_SECRET: &str = "test-worker-join-secret";

/// Registers a raw worker and returns its session token.
async fn register(ws: &mut Ws, name: &str, secret: &str) -> String {
    send(
        ws,
        json!({"type": "register", "protocol": 1, "worker_id": name, "name": name,
               "target": {"kind": "llvm", "num-cores": 2}, "backend": "raw-test",
               "secret": secret}),
    )
    .await;
    let reply = next(ws).await.expect("registered");
    assert_eq!(reply["type"], "registered", "{reply}");
    reply["token"].as_str().expect("token").to_string()
}

fn tunefleet(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    Command::new(bin("tunefleet"))
        .args(args)
        .env_remove("TUNEFLEET_TOKEN")
        .env_remove("TUNEFLEET_CA_CERT")
        .envs(envs.iter().copied())
        .output()
        .expect("run tunefleet")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The admin requests, each as a raw request with id 2.
fn admin_requests(job_id: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "submit",
            json!({"id": 2, "type": "submit", "yaml": matmul_yaml(1, "intruder")}),
        ),
        (
            "cancel",
            json!({"id": 2, "type": "cancel", "job_id": job_id}),
        ),
        ("retry", json!({"id": 2, "type": "retry", "job_id": job_id})),
        ("shutdown", json!({"id": 2, "type": "shutdown"})),
    ]
}

/// Says hello with `token` (none when `None`) and sends `request` right
/// behind it; returns the answer to the hello and what became of the request.
async fn hello_then(
    master: &Master,
    token: Option<&str>,
    request: &Value,
) -> (Value, Result<Value, (u16, String)>) {
    let mut ws = raw(&format!("{}/ws/client", master.url())).await;
    let mut hello = json!({"id": 1, "type": "hello", "protocol": 1, "client": "intruder"});
    if let Some(token) = token {
        hello["token"] = json!(token);
    }
    send(&mut ws, hello).await;
    // Pipelined: the request is on the wire before the master has judged the hello.
    let _ = ws.send(Message::Text(request.to_string().into())).await;
    let welcome = next(&mut ws).await.expect("an answer to hello");
    let after = next(&mut ws).await;
    (welcome, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_action_needs_the_admin_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &["--worker-secret", WORKER_SECRET]);
    let mut admin = master.client().await;
    let report = admin
        .submit(matmul_yaml(1, "victim"), None)
        .await
        .expect("admin submits");
    let job_id = report.new_jobs[0].clone();
    admin.cancel(&job_id).await.expect("admin cancels");

    // A real worker token: the session token of a registered worker, which
    // keeps reading (answering pings) until the master closes it.
    let mut worker = raw(&format!("{}/ws/worker", master.url())).await;
    let session_token = register(&mut worker, "raw-worker", WORKER_SECRET).await;
    let worker = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            match worker.next().await {
                Some(Ok(Message::Text(t))) => seen.push(t.to_string()),
                Some(Ok(Message::Close(frame))) => return (seen, frame.map(|f| u16::from(f.code))),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return (seen, None),
            }
        }
    });

    let wrong_tokens = [
        ("no token", None),
        ("a wrong token", Some("not-the-admin-token")),
        ("the worker join secret", Some(WORKER_SECRET)),
        ("a worker session token", Some(session_token.as_str())),
        ("an empty token", Some("")),
    ];
    for (action, request) in admin_requests(&job_id) {
        for (what, token) in wrong_tokens {
            let (answer, after) = hello_then(&master, token, &request).await;
            assert_eq!(answer["type"], "error", "{action} with {what}: {answer}");
            assert_eq!(answer["id"], 1, "{action} with {what}: {answer}");
            assert_eq!(answer["code"], "unauthorized", "{action} with {what}");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("wrong token") || message.contains("needs a token"),
                "{action} with {what}: clear message: {message}"
            );
            assert_eq!(
                after.map_err(|(code, _)| code),
                Err(4001),
                "{action} with {what}: closed with 4001, the request never answered"
            );
        }
    }

    // Nothing happened: the job is still cancelled, no job was added, the
    // master is up.
    let jobs = admin.results(None).await.expect("results");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].state, JobState::Cancelled);
    assert!(master.log().contains("client refused: wrong token"));

    // The CLI says what is wrong and what to do.
    let url = master.url();
    let out = tunefleet(&["shutdown", "--server", &url], &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("unauthorized") && err.contains("--token"),
        "no token: {err}"
    );
    let out = tunefleet(
        &["shutdown", "--server", &url],
        &[("TUNEFLEET_TOKEN", WORKER_SECRET)],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("wrong token"), "{}", stderr(&out));
    let refused = Client::connect(&url, Some(&session_token))
        .await
        .expect_err("a worker token is not a client token");
    assert!(
        matches!(
            &refused,
            ClientError::Server {
                code: ErrorCode::Unauthorized,
                ..
            }
        ),
        "{refused:?}"
    );
    admin.status().await.expect("the master is still up");

    // The admin token works, and shutdown stops the master gracefully.
    let out = tunefleet(
        &["shutdown", "--server", &url],
        &[("TUNEFLEET_TOKEN", ADMIN_TOKEN)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("shutting down"), "{}", stderr(&out));
    eventually(Duration::from_secs(15), "the master to stop", || async {
        master.log().contains("master stopped").then_some(())
    })
    .await;
    // The worker was told, then closed with 1001.
    let (seen, close) = tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("worker socket closed")
        .expect("reader task");
    assert!(
        seen.iter().any(|m| m.contains(r#""type":"shutdown""#)),
        "the worker got `shutdown`: {seen:?}"
    );
    assert_eq!(close, Some(1001));
    assert!(Client::connect(&url, Some(ADMIN_TOKEN)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_public_read_admin_actions_are_forbidden_and_reads_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(
        dir.path(),
        &["--public-read", "--worker-secret", WORKER_SECRET],
    );
    let mut admin = master.client().await;
    let job_id = admin
        .submit(matmul_yaml(1, "victim"), None)
        .await
        .expect("submit")
        .new_jobs[0]
        .clone();

    for (action, request) in admin_requests(&job_id) {
        // No token: the read role, which may not do this.
        let (welcome, after) = hello_then(&master, None, &request).await;
        assert_eq!(welcome["body"]["role"], "read", "{welcome}");
        let after = after.expect("an answer");
        assert_eq!(after["type"], "error", "{action}: {after}");
        assert_eq!(after["id"], 2);
        assert_eq!(after["code"], "forbidden", "{action}");
        assert_eq!(after["message"], "this request needs the admin token");
        // A wrong token or a worker's secret is refused even here.
        for token in ["nope", WORKER_SECRET] {
            let (answer, after) = hello_then(&master, Some(token), &request).await;
            assert_eq!(answer["code"], "unauthorized", "{action}: {answer}");
            assert_eq!(after.map_err(|(c, _)| c), Err(4001));
        }
    }
    // Reading (status, results = export) is what public read allows.
    let mut reader = Client::connect(&master.url(), None).await.expect("reader");
    assert_eq!(reader.results(None).await.expect("results").len(), 1);
    let out = tunefleet(
        &["results", "--format", "csv", "--server", &master.url()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("victim0"));
    let jobs = admin.results(None).await.expect("results");
    assert_eq!(
        (jobs.len(), jobs[0].state),
        (1, JobState::Queued),
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_before_the_upgrade() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(
        dir.path(),
        &["--allowed-origin", "https://dash.example.com"],
    );
    let with_origin = |path: &str, origin: &str| {
        let mut request = format!("{}{path}", master.url())
            .into_client_request()
            .expect("request");
        request
            .headers_mut()
            .insert("Origin", HeaderValue::from_str(origin).expect("header"));
        request
    };
    for path in ["/ws/client", "/ws/worker"] {
        for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
            match connect_async(with_origin(path, origin)).await {
                Err(tungstenite::Error::Http(response)) => {
                    assert_eq!(response.status(), 403, "{path} {origin}");
                    let body =
                        String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                            .into_owned();
                    assert!(body.contains("cross-origin"), "{body}");
                }
                other => panic!("{path} with Origin {origin}: {:?}", other.map(|_| ())),
            }
        }
        // The master's own origin, a listed one, and none at all are fine.
        let own = format!("http://{}", master.addr);
        for origin in [own.as_str(), "https://dash.example.com"] {
            let (mut ws, _) = connect_async(with_origin(path, origin))
                .await
                .unwrap_or_else(|e| panic!("{path} with Origin {origin}: {e}"));
            let _ = ws.close(None).await;
        }
    }
    assert!(master.log().contains("Origin `http://evil.example`"));
    master.client().await.status().await.expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_and_oversize_are_refused_while_a_worker_keeps_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(
        dir.path(),
        &[
            "--max-requests-per-second",
            "20",
            "--worker-secret",
            WORKER_SECRET,
        ],
    );
    let mut admin = master.client().await;
    let jobs = admin
        .submit(matmul_yaml(24, "busy"), None)
        .await
        .expect("submit")
        .new_jobs;
    let _worker = Worker::start(&master, "steady", 0.1, &["--worker-secret", WORKER_SECRET]);
    eventually(Duration::from_secs(20), "the worker to start", || async {
        let status = Client::connect(&master.url(), Some(ADMIN_TOKEN))
            .await
            .ok()?
            .status()
            .await
            .ok()?;
        (status.jobs.done >= 1).then_some(())
    })
    .await;

    // A flooding client: 1000 requests at once, without reading.
    let mut flood = raw(&format!("{}/ws/client", master.url())).await;
    send(
        &mut flood,
        json!({"id": 0, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    assert_eq!(next(&mut flood).await.expect("welcome")["type"], "reply");
    for id in 1..=1000u64 {
        let frame = Message::Text(json!({"id": id, "type": "status"}).to_string().into());
        if flood.feed(frame).await.is_err() {
            break;
        }
    }
    let _ = flood.flush().await;
    let (mut answered, mut limited) = (0, 0);
    let closed = loop {
        match next(&mut flood).await {
            Ok(msg) if msg["type"] == "reply" => answered += 1,
            Ok(msg) => {
                assert_eq!(msg["code"], "rate_limited", "{msg}");
                assert!(msg["id"].as_u64().is_some(), "refusals carry the id: {msg}");
                limited += 1;
            }
            Err(close) => break close,
        }
    };
    assert_eq!(closed.0, 1008, "a sustained flood is closed: {closed:?}");
    assert!(
        (40..=100).contains(&answered),
        "a burst of 40 (+ refill) answered: {answered}"
    );
    assert!(limited > 0, "refused with rate_limited");

    // A worker flooding progress: coalesced, never breaks anything.
    let mut noisy = raw(&format!("{}/ws/worker", master.url())).await;
    let token = register(&mut noisy, "noisy", WORKER_SECRET).await;
    for i in 0..3000u32 {
        let progress = json!({"type": "progress", "token": token, "job_id": "0000000000000000",
                              "lease": 1, "trials_done": i, "trials_total": 3000});
        if noisy
            .feed(Message::Text(progress.to_string().into()))
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = noisy.flush().await;

    // An oversize message: 1009, the master stays up.
    let mut big = raw(&format!("{}/ws/client", master.url())).await;
    send(
        &mut big,
        json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    next(&mut big).await.expect("welcome");
    let huge = format!(
        r#"{{"id":2,"type":"submit","yaml":"{}"}}"#,
        "x".repeat(100 * 1024 * 1024)
    );
    let _ = big.send(Message::Text(huge.into())).await;
    let closed = loop {
        match next(&mut big).await {
            Ok(_) => continue,
            Err(close) => break close,
        }
    };
    assert_eq!(closed.0, 1009, "{closed:?}");

    // Meanwhile the well-behaved worker finished every job, first try.
    let mut admin = master.client().await;
    eventually(Duration::from_secs(60), "every job done", || {
        let url = master.url();
        async move {
            let mut c = Client::connect(&url, Some(ADMIN_TOKEN)).await.ok()?;
            let done = c.status().await.ok()?.jobs.done;
            (done == 24).then_some(())
        }
    })
    .await;
    let views = admin.results(Some(jobs)).await.expect("results");
    assert_eq!(views.len(), 24);
    for job in &views {
        assert_eq!((job.state, job.attempts), (JobState::Done, 1), "{job:?}");
        assert_eq!(
            job.result.as_ref().map(|r| r.worker.as_str()),
            Some("steady")
        );
    }
    let worker_log = std::fs::read_to_string(dir.path().join("steady.log")).unwrap_or_default();
    assert!(
        !worker_log.contains("rate_limited") && !worker_log.contains("rate limit"),
        "the worker was never limited: {worker_log}"
    );
    let log = master.log();
    assert!(log.contains("closed for flooding"), "{log}");
    assert!(log.contains("over the"), "oversize logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_and_upload_limits_are_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(
        dir.path(),
        &["--max-connections", "3", "--max-workloads-per-upload", "5"],
    );
    let mut a = master.client().await;
    let b = master.client().await;
    let c = master.client().await;
    match connect_async(format!("{}/ws/client", master.url())).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 503),
        other => panic!("a fourth connection: {:?}", other.map(|_| ())),
    }
    let err = Client::connect(&master.url(), Some(ADMIN_TOKEN))
        .await
        .expect_err("over the limit");
    assert!(err.to_string().contains("503"), "{err}");
    drop(b);
    let _d = eventually(Duration::from_secs(10), "a free slot", || {
        let url = master.url();
        async move { Client::connect(&url, Some(ADMIN_TOKEN)).await.ok() }
    })
    .await;

    match a.submit(matmul_yaml(6, "six"), Some("six.yaml")).await {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::TooLarge);
            assert!(
                message.contains("six.yaml")
                    && message.contains("6 workloads")
                    && message.contains("--max-workloads-per-upload"),
                "{message}"
            );
        }
        other => panic!("six workloads: {other:?}"),
    }
    let report = a
        .submit(matmul_yaml(5, "five"), None)
        .await
        .expect("five fit");
    assert_eq!(report.new_jobs.len(), 5);
    drop(c);
}

/// A self-signed certificate for 127.0.0.1 and localhost, written as PEM.
fn self_signed(dir: &Path) -> (String, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("generate a certificate");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.key_pair.serialize_pem()).expect("write key");
    (
        cert.to_str().expect("utf-8").to_string(),
        key.to_str().expect("utf-8").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_round_trip_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = self_signed(dir.path());
    let master = Master::start(dir.path(), &["--tls-cert", &cert, "--tls-key", &key]);
    let url = format!("wss://{}", master.addr);
    let file = examples_dir().join("workloads.yaml");
    let file = file.to_str().expect("utf-8");

    // Without the CA the certificate is not trusted, and the CLI says why.
    let out = tunefleet(
        &["status", "--server", &url],
        &[("TUNEFLEET_TOKEN", ADMIN_TOKEN)],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("not trusted") && err.contains("--ca-cert"),
        "clear certificate error: {err}"
    );
    // Plain ws:// to a TLS port does not get through either.
    assert!(Client::connect(&master.url(), Some(ADMIN_TOKEN))
        .await
        .is_err());
    // A worker without the CA stops with the same explanation.
    let mut untrusting = Worker::start_url(&url, dir.path(), "untrusting", 0.1, &[]);
    eventually(
        Duration::from_secs(20),
        "the untrusting worker to exit",
        || std::future::ready(untrusting.try_wait()),
    )
    .await;
    let log = std::fs::read_to_string(dir.path().join("untrusting.log")).unwrap_or_default();
    assert!(log.contains("not trusted"), "{log}");

    // With it: worker and CLI over wss, a full round trip.
    let _worker = Worker::start_url(&url, dir.path(), "tls-worker", 0.1, &["--ca-cert", &cert]);
    let out = tunefleet(
        &[
            "submit",
            file,
            "--server",
            &url,
            "--ca-cert",
            &cert,
            "--json",
        ],
        &[("TUNEFLEET_TOKEN", ADMIN_TOKEN)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let reports: Value = serde_json::from_slice(&out.stdout).expect("json");
    let submitted = reports[0]["new_jobs"].as_array().expect("new_jobs").len();
    assert!(submitted >= 1);
    let status = eventually(Duration::from_secs(60), "jobs done over wss", || {
        let (url, cert) = (url.clone(), cert.clone());
        async move {
            let out = tunefleet(
                &["status", "--json", "--server", &url],
                &[
                    ("TUNEFLEET_TOKEN", ADMIN_TOKEN),
                    ("TUNEFLEET_CA_CERT", &cert),
                ],
            );
            let status: Value = serde_json::from_slice(&out.stdout).ok()?;
            (status["jobs"]["done"].as_u64() == Some(submitted as u64)).then_some(status)
        }
    })
    .await;
    assert_eq!(status["workers"], 1, "{status}");
    let out = tunefleet(
        &[
            "results",
            "--format",
            "csv",
            "--server",
            &url,
            "--ca-cert",
            &cert,
        ],
        &[("TUNEFLEET_TOKEN", ADMIN_TOKEN)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        csv.lines().filter(|l| l.contains(",done,")).count(),
        submitted
    );
    assert!(master.log().contains("tls=true"), "{}", master.log());

    // Graceful shutdown works over TLS too.
    let out = tunefleet(
        &["shutdown", "--server", &url, "--ca-cert", &cert],
        &[("TUNEFLEET_TOKEN", ADMIN_TOKEN)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    eventually(
        Duration::from_secs(15),
        "the TLS master to stop",
        || async { master.log().contains("master stopped").then_some(()) },
    )
    .await;
}

/// Starts a master with `RUST_LOG` as given; returns it and its address.
fn spawn_master(dir: &Path, rust_log: &str, args: &[&str]) -> (Child, SocketAddr) {
    let log = std::fs::File::create(dir.join("master.log")).expect("log");
    let mut child = Command::new(bin("tunefleet"))
        .args(["serve", "--bind", "127.0.0.1:0", "--state"])
        .arg(dir.join("fleet.db"))
        .args(args)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn master");
    let stdout = child.stdout.take().expect("stdout");
    let out_path = dir.join("master.out");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("tunefleet master listening on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
            all.push_str(&line);
            all.push('\n');
            let _ = std::fs::write(&out_path, &all);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("master listening");
    (child, addr.parse().expect("address"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_secrets_never_appear_in_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let admin_token = "admin-token-must-not-leak-7f3a";
    let worker_secret = "worker-secret-must-not-leak-91c2";
    let (mut master, addr) = spawn_master(
        dir.path(),
        "trace",
        &[
            "--admin-token",
            admin_token,
            "--worker-secret",
            worker_secret,
        ],
    );
    let url = format!("ws://{addr}");

    // A worker at trace level, secret from the command line.
    let worker_log = std::fs::File::create(dir.path().join("worker.log")).expect("log");
    let mut worker = Command::new(bin("tunefleet-worker"))
        .args([
            "--server",
            &url,
            "--target",
            r#"{"kind":"llvm","num-cores":2}"#,
        ])
        .args([
            "--backend",
            "sim",
            "--sim-seconds",
            "0.2",
            "--name",
            "quiet",
        ])
        .args(["--worker-secret", worker_secret])
        .env("RUST_LOG", "trace")
        .stdout(worker_log.try_clone().expect("log"))
        .stderr(worker_log)
        .spawn()
        .expect("spawn worker");

    // The CLI at trace level submits and reads; a raw worker's session token
    // is seen by the master too.
    let file = examples_dir().join("workloads.yaml");
    let out = Command::new(bin("tunefleet"))
        .args(["submit", file.to_str().expect("path"), "--server", &url])
        .env("TUNEFLEET_TOKEN", admin_token)
        .env("RUST_LOG", "trace")
        .output()
        .expect("submit");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut cli_output = stderr(&out) + &String::from_utf8_lossy(&out.stdout);
    let mut raw_worker = raw(&format!("{url}/ws/worker")).await;
    let session_token = register(&mut raw_worker, "raw", worker_secret).await;
    send(
        &mut raw_worker,
        json!({"type": "request_job", "token": "stale-token-leak-5d"}),
    )
    .await;
    next(&mut raw_worker).await.expect("stale_token error");
    // Refusals are logged, without the wrong values either.
    let _ = Client::connect(&url, Some("wrong-token-leak-33")).await;
    let mut bad = raw(&format!("{url}/ws/worker")).await;
    send(
        &mut bad,
        json!({"type": "register", "protocol": 1, "worker_id": "b", "name": "b",
               "target": {"kind": "llvm"}, "backend": "x", "secret": "wrong-secret-leak-44"}),
    )
    .await;
    let _ = next(&mut bad).await;

    eventually(Duration::from_secs(60), "jobs done", || {
        let url = url.clone();
        async move {
            let mut c = Client::connect(&url, Some(admin_token)).await.ok()?;
            let s = c.status().await.ok()?;
            (s.jobs.total > 0 && s.jobs.done == s.jobs.total).then_some(())
        }
    })
    .await;
    let out = Command::new(bin("tunefleet"))
        .args(["results", "--json", "--server", &url])
        .env("TUNEFLEET_TOKEN", admin_token)
        .env("RUST_LOG", "trace")
        .output()
        .expect("results");
    cli_output += &stderr(&out);
    drop(raw_worker);
    drop(bad);
    signal(worker.id(), "TERM");
    let _ = worker.wait();
    signal(master.id(), "TERM");
    let _ = master.wait();

    let master_log = std::fs::read_to_string(dir.path().join("master.log")).expect("master log");
    let master_out = std::fs::read_to_string(dir.path().join("master.out")).unwrap_or_default();
    let worker_log = std::fs::read_to_string(dir.path().join("worker.log")).expect("worker log");
    for (name, text) in [("master", &master_log), ("worker", &worker_log)] {
        assert!(
            text.contains("TRACE") || text.contains("DEBUG"),
            "the {name} logs at trace level:\n{text}"
        );
    }
    assert!(master_log.contains("client refused: wrong token"));
    assert!(master_log.contains("missing or wrong join secret"));
    // One line holds the admin token on purpose, as Jupyter's does: the
    // dashboard's sign-in link, written once to the operator's terminal
    // (stderr) when the master listens. No other line may.
    let sign_in = format!("#token={admin_token}");
    let (links, master_log): (Vec<&str>, Vec<&str>) = master_log.lines().partition(|l| {
        l.starts_with("dashboard, signed in as admin: http://") && l.ends_with(&sign_in)
    });
    assert_eq!(links.len(), 1, "the sign-in link, once: {links:?}");
    let master_log = master_log.join("\n");
    for (name, text) in [
        ("master log", &master_log),
        ("master stdout", &master_out),
        ("worker log", &worker_log),
        ("CLI output", &cli_output),
    ] {
        for secret in [
            admin_token,
            worker_secret,
            session_token.as_str(),
            "stale-token-leak-5d",
            "wrong-token-leak-33",
            "wrong-secret-leak-44",
        ] {
            assert!(
                !text.contains(secret),
                "{name} contains `{secret}`:\n{}",
                text.lines()
                    .filter(|l| l.contains(secret))
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}
