//! Session tests against a scripted fake master (a unit-level test double built
//! on `accept_async`); end-to-end tests with the real master live in `tests/`.

use super::*;
use crate::backend::SimBackend;
use crate::backoff::Backoff;
use crate::testutil::workload;
use futures_util::{SinkExt, StreamExt};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tunefleet_shared::protocol::{close_code, JobResult, Lease, WorkerHello, PROTOCOL_VERSION};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::Workload;

const STEP: Duration = Duration::from_secs(5);

type Ws = WebSocketStream<TcpStream>;

struct FakeMaster {
    listener: TcpListener,
}

impl FakeMaster {
    async fn start() -> (FakeMaster, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        (FakeMaster { listener }, url)
    }

    async fn accept(&self) -> Ws {
        let (tcp, _) = tokio::time::timeout(STEP, self.listener.accept())
            .await
            .expect("worker did not connect")
            .unwrap();
        tokio_tungstenite::accept_async(tcp).await.unwrap()
    }

    /// Accepts a connection, reads `register`, answers `registered` with `token`.
    async fn accept_registered(&self, token: &str) -> (Ws, WorkerHello) {
        self.accept_registered_with(token, None).await
    }

    /// As [`accept_registered`], telling the worker a heartbeat timeout.
    async fn accept_registered_with(
        &self,
        token: &str,
        heartbeat_timeout_ms: Option<u64>,
    ) -> (Ws, WorkerHello) {
        let mut ws = self.accept().await;
        let hello = match recv(&mut ws).await {
            WorkerMessage::Register(hello) => hello,
            other => panic!("expected register, got {other:?}"),
        };
        send(
            &mut ws,
            MasterMessage::Registered {
                token: token.into(),
                session: format!("session-{token}"),
                matching_jobs: 1,
                heartbeat_timeout_ms,
            },
        )
        .await;
        (ws, hello)
    }
}

async fn next_frame(ws: &mut Ws) -> Message {
    tokio::time::timeout(STEP, ws.next())
        .await
        .expect("worker went silent")
        .expect("socket ended")
        .unwrap()
}

/// The next protocol message, skipping ping/pong.
async fn recv(ws: &mut Ws) -> WorkerMessage {
    loop {
        match next_frame(ws).await {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

async fn send(ws: &mut Ws, message: MasterMessage) {
    let text = serde_json::to_string(&message).unwrap();
    ws.send(Message::text(text)).await.unwrap();
}

async fn expect_request_job(ws: &mut Ws, expected_token: &str) {
    match recv(ws).await {
        WorkerMessage::RequestJob { token } => assert_eq!(token, expected_token),
        other => panic!("expected request_job, got {other:?}"),
    }
}

/// Returns once the worker has read everything sent to it so far: it
/// answers a ping only when its reading reaches it. (The worker asks for its
/// next job before the ack of its last result arrives, so seeing that
/// request says nothing about whether the ack was taken.)
async fn worker_caught_up(ws: &mut Ws) {
    ws.send(Message::Ping(b"caught-up".to_vec().into()))
        .await
        .unwrap();
    loop {
        match next_frame(ws).await {
            Message::Pong(payload) if payload.as_ref() == b"caught-up" => return,
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected the pong, got {other:?}"),
        }
    }
}

async fn expect_close(mut ws: Ws, code: u16) {
    let ws = &mut ws;
    loop {
        match next_frame(ws).await {
            Message::Close(Some(frame)) => {
                assert_eq!(u16::from(frame.code), code);
                // Reading on sends the close reply; dropping `ws` then closes
                // the TCP connection, as a real server does.
                while let Ok(Some(Ok(_))) = tokio::time::timeout(STEP, ws.next()).await {}
                return;
            }
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected close, got {other:?}"),
        }
    }
}

fn assign(workload: Workload, lease: Lease, nbest: u32) -> MasterMessage {
    MasterMessage::Assign {
        job_id: workload.job_id(),
        lease,
        attempt: 1,
        workload: Box::new(workload),
        nbest,
        warm_start: None,
        tuner: None,
        model_round: false,
        cost_model: None,
    }
}

struct RunningWorker {
    task: JoinHandle<Result<WorkerStats, WorkerError>>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl RunningWorker {
    fn start(url: &str, sim: Duration, max_jobs: Option<u64>) -> RunningWorker {
        RunningWorker::start_with_slots(url, sim, max_jobs, 1)
    }

    fn start_with_slots(
        url: &str,
        sim: Duration,
        max_jobs: Option<u64>,
        slots: u32,
    ) -> RunningWorker {
        RunningWorker::start_with(url, sim, |config| {
            config.max_jobs = max_jobs;
            config.slots = slots;
        })
    }

    fn start_with(
        url: &str,
        sim: Duration,
        tweak: impl FnOnce(&mut WorkerConfig),
    ) -> RunningWorker {
        let mut config = WorkerConfig::new(
            url,
            Target::parse(r#"{"kind":"llvm","num-cores":2}"#).unwrap(),
            "test-worker",
            Arc::new(SimBackend::new(sim)),
        );
        config.backoff = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
        };
        tweak(&mut config);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(run_worker(config, async {
            let _ = rx.await;
        }));
        RunningWorker {
            task,
            shutdown: Some(tx),
        }
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    async fn finish(self) -> Result<WorkerStats, WorkerError> {
        tokio::time::timeout(STEP, self.task)
            .await
            .expect("worker did not stop")
            .unwrap()
    }
}

#[test]
fn worker_url_appends_the_endpoint_once() {
    let ok = |s: &str| worker_url(s).unwrap();
    assert_eq!(ok("ws://127.0.0.1:18871"), "ws://127.0.0.1:18871/ws/worker");
    assert_eq!(
        ok("ws://127.0.0.1:18871/"),
        "ws://127.0.0.1:18871/ws/worker"
    );
    assert_eq!(ok("ws://h:1/ws/worker"), "ws://h:1/ws/worker");
    assert_eq!(ok("ws://h:1/ws/worker/"), "ws://h:1/ws/worker");
    assert_eq!(ok(" http://h:1 "), "ws://h:1/ws/worker");
    assert_eq!(ok("ws://h/prefix"), "ws://h/prefix/ws/worker");
    assert_eq!(ok("wss://h:1"), "wss://h:1/ws/worker");
    assert_eq!(ok("https://h/"), "wss://h/ws/worker");
    for bad in ["", "h:1", "ws://", "ws:///x", "wss://", "ftp://h"] {
        assert!(worker_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn run_worker_is_send() {
    fn assert_send<T: Send>(_: T) {}
    let config = WorkerConfig::new(
        "ws://127.0.0.1:1",
        Target::of_kind("llvm"),
        "w",
        Arc::new(SimBackend::new(Duration::ZERO)),
    );
    assert_send(run_worker(config, std::future::pending()));
}

/// The main story: register, assign, progress + result with the right token
/// and lease; the master drops the socket before acking; the worker reconnects
/// with the same worker_id and re-sends the result with the original lease.
#[tokio::test]
async fn unacked_result_is_resent_with_original_lease_after_reconnect() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::from_millis(100), None);

    let (mut ws, hello1) = master.accept_registered("t1").await;
    assert_eq!(hello1.protocol, PROTOCOL_VERSION);
    assert_eq!(hello1.backend, "sim");
    assert_eq!(hello1.name, "test-worker");
    assert_eq!(hello1.secret, None);
    assert!(uuid::Uuid::parse_str(&hello1.worker_id).is_ok());
    expect_request_job(&mut ws, "t1").await;

    let job = workload("mm-32", 32);
    let job_id = job.job_id();
    send(&mut ws, assign(job, Lease(7), 3)).await;

    let mut progress = Vec::new();
    let first_result: JobResult = loop {
        match recv(&mut ws).await {
            WorkerMessage::Progress {
                token,
                job_id: id,
                lease,
                trials_done,
                trials_total,
                best_latency_s,
            } => {
                assert_eq!(
                    (token.as_str(), id.as_str(), lease),
                    ("t1", job_id.as_str(), Lease(7))
                );
                assert_eq!(trials_total, 32);
                progress.push((trials_done, best_latency_s));
            }
            WorkerMessage::Result {
                token,
                job_id: id,
                lease,
                result,
            } => {
                assert_eq!(
                    (token.as_str(), id.as_str(), lease),
                    ("t1", job_id.as_str(), Lease(7))
                );
                break result;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(!progress.is_empty());
    assert!(progress.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(first_result.records.len(), 3);
    assert_eq!(first_result.trials, 32);
    assert_eq!(first_result.backend, "sim");

    // The master goes away without acking.
    drop(ws);

    let (mut ws, hello2) = master.accept_registered("t2").await;
    assert_eq!(hello2.worker_id, hello1.worker_id);
    match recv(&mut ws).await {
        WorkerMessage::Result {
            token,
            job_id: id,
            lease,
            result,
        } => {
            assert_eq!(
                (token.as_str(), id.as_str(), lease),
                ("t2", job_id.as_str(), Lease(7))
            );
            assert_eq!(result, first_result);
        }
        other => panic!("expected the re-sent result first, got {other:?}"),
    }
    send(
        &mut ws,
        MasterMessage::Ack {
            job_id: job_id.clone(),
            lease: Lease(7),
            accepted: true,
            reason: None,
        },
    )
    .await;
    expect_request_job(&mut ws, "t2").await;
    worker_caught_up(&mut ws).await;

    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.registrations, 2);
    assert_eq!(stats.jobs_assigned, 1);
    assert_eq!(stats.jobs_succeeded, 1);
    assert_eq!(stats.reports_accepted, 1);
}

/// A job keeps running while the worker reconnects; its result goes out on the
/// new connection with the original lease, and no new job is requested before
/// that. `max_jobs` stops the worker after the ack (here a rejection).
#[tokio::test]
async fn running_job_survives_reconnect_and_max_jobs_stops_the_worker() {
    let (master, url) = FakeMaster::start().await;
    let worker = RunningWorker::start(&url, Duration::from_millis(400), Some(1));

    let (mut ws, _) = master.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;
    let job = workload("mm-16", 16);
    let job_id = job.job_id();
    send(&mut ws, assign(job, Lease(3), 5)).await;
    match recv(&mut ws).await {
        WorkerMessage::Progress { lease, .. } => assert_eq!(lease, Lease(3)),
        other => panic!("expected progress, got {other:?}"),
    }
    // Disconnect mid-job, this time with a close frame.
    ws.close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "restarting".into(),
    }))
    .await
    .unwrap();
    drop(ws);

    // The lease died with that connection, so the master would refuse
    // progress for it: only the result comes, on the new connection.
    let (mut ws, _) = master.accept_registered("t2").await;
    let result = match recv(&mut ws).await {
        WorkerMessage::Result {
            token,
            job_id: id,
            lease,
            result,
        } => {
            assert_eq!(
                (token.as_str(), id.as_str(), lease),
                ("t2", job_id.as_str(), Lease(3))
            );
            result
        }
        other => panic!("expected the running job's result, got {other:?}"),
    };
    assert_eq!(result.records.len(), 5);
    send(
        &mut ws,
        MasterMessage::Ack {
            job_id,
            lease: Lease(3),
            accepted: false,
            reason: Some("lease expired".into()),
        },
    )
    .await;
    // Job limit reached: a normal close instead of request_job.
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.registrations, 2);
    assert_eq!(stats.reports_rejected, 1);
    assert_eq!(stats.jobs_acknowledged(), 1);
}

/// Pings are answered while a job runs; cancel aborts it and the worker asks
/// for work again; a failing job is reported as `job_failed`.
#[tokio::test]
async fn cancel_ping_and_failure() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::ZERO, None);
    let (mut ws, _) = master.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;

    let hang = workload("sim-hang-1", 8);
    let hang_id = hang.job_id();
    send(&mut ws, assign(hang, Lease(1), 5)).await;
    ws.send(Message::Ping(b"still there?".to_vec().into()))
        .await
        .unwrap();
    match next_frame(&mut ws).await {
        Message::Pong(payload) => assert_eq!(&payload[..], b"still there?"),
        other => panic!("expected pong, got {other:?}"),
    }
    send(
        &mut ws,
        MasterMessage::Cancel {
            job_id: hang_id,
            lease: Lease(1),
            reason: "cancelled by admin".into(),
        },
    )
    .await;
    expect_request_job(&mut ws, "t1").await;

    let fail = workload("sim-fail-1", 8);
    let fail_id = fail.job_id();
    send(&mut ws, assign(fail, Lease(2), 5)).await;
    match recv(&mut ws).await {
        WorkerMessage::JobFailed {
            token,
            job_id,
            lease,
            error,
        } => {
            assert_eq!(
                (token.as_str(), job_id.as_str(), lease),
                ("t1", fail_id.as_str(), Lease(2))
            );
            assert_eq!(error, "simulated failure");
        }
        other => panic!("expected job_failed, got {other:?}"),
    }
    send(
        &mut ws,
        MasterMessage::Ack {
            job_id: fail_id,
            lease: Lease(2),
            accepted: true,
            reason: None,
        },
    )
    .await;
    expect_request_job(&mut ws, "t1").await;

    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.jobs_cancelled, 1);
    assert_eq!(stats.jobs_failed, 1);
    assert_eq!(stats.jobs_succeeded, 0);
}

async fn close_after_register(master: &FakeMaster, code: u16, reason: &str) {
    let mut ws = master.accept().await;
    assert!(matches!(recv(&mut ws).await, WorkerMessage::Register(_)));
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        }))
        .await;
    // Let the worker see the close before the socket goes.
    let _ = tokio::time::timeout(STEP, async { while let Some(Ok(_)) = ws.next().await {} }).await;
}

#[tokio::test]
async fn unauthorized_and_protocol_mismatch_are_fatal() {
    let (master, url) = FakeMaster::start().await;
    let worker = RunningWorker::start(&url, Duration::ZERO, None);
    close_after_register(&master, close_code::UNAUTHORIZED, "bad worker secret").await;
    match worker.finish().await {
        Err(WorkerError::Unauthorized(reason)) => assert_eq!(reason, "bad worker secret"),
        other => panic!("expected unauthorized, got {other:?}"),
    }

    let worker = RunningWorker::start(&url, Duration::ZERO, None);
    close_after_register(&master, close_code::PROTOCOL_MISMATCH, "master speaks 2").await;
    match worker.finish().await {
        Err(e @ WorkerError::ProtocolMismatch { .. }) => {
            assert!(e.to_string().contains("master speaks 2"), "{e}");
        }
        other => panic!("expected protocol mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn no_matching_jobs_and_shutdown_message_are_retried() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::ZERO, None);
    close_after_register(&master, close_code::NO_MATCHING_JOBS, "no job for llvm").await;

    let (mut ws, _) = master.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;
    // What a master does when it stops: say so, then close.
    send(
        &mut ws,
        MasterMessage::Shutdown {
            reason: "master restarting".into(),
        },
    )
    .await;
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::Away,
            reason: "shutting down".into(),
        }))
        .await;
    while let Ok(Some(Ok(_))) = tokio::time::timeout(STEP, ws.next()).await {}
    drop(ws);

    let (mut ws2, _) = master.accept_registered("t2").await;
    expect_request_job(&mut ws2, "t2").await;
    worker.shutdown();
    expect_close(ws2, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.registrations, 2);
}

#[tokio::test]
async fn shutdown_while_the_master_is_unreachable_returns_promptly() {
    // Bind then drop, so the port refuses connections.
    let (master, url) = FakeMaster::start().await;
    drop(master);
    let mut worker = RunningWorker::start(&url, Duration::ZERO, None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    worker.shutdown();
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.registrations, 0);
}

/// The job finishes while the worker has no connection at all; its result is
/// the first thing sent after the next registration.
#[tokio::test]
async fn result_finished_while_disconnected_goes_out_first_after_registering() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::from_millis(100), None);
    let (mut ws, _) = master.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;
    let job = workload("mm-8", 8);
    let job_id = job.job_id();
    send(&mut ws, assign(job, Lease(11), 2)).await;
    drop(ws);

    // Keep the worker waiting in its handshake until the job is long done.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (mut ws, _) = master.accept_registered("t2").await;
    match recv(&mut ws).await {
        WorkerMessage::Result {
            token,
            job_id: id,
            lease,
            result,
        } => {
            assert_eq!(
                (token.as_str(), id.as_str(), lease),
                ("t2", job_id.as_str(), Lease(11))
            );
            assert_eq!(result.records.len(), 2);
        }
        other => panic!("expected the result, got {other:?}"),
    }
    send(
        &mut ws,
        MasterMessage::Ack {
            job_id,
            lease: Lease(11),
            accepted: true,
            reason: None,
        },
    )
    .await;
    expect_request_job(&mut ws, "t2").await;
    worker_caught_up(&mut ws).await;
    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!((stats.registrations, stats.reports_accepted), (2, 1));
}

/// The next job is asked for right after a result, before its ack (the
/// master takes a socket's messages in order, so both share one commit);
/// while two results await their acks, the worker takes no third job.
#[tokio::test]
async fn the_next_job_is_asked_for_before_the_ack_but_at_most_two_reports_wait() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::ZERO, None);
    let (mut ws, _) = master.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;
    let mut ids = Vec::new();
    for (i, lease) in [(1u32, 21), (2, 22)] {
        let job = workload(&format!("mm-{i}"), 8 * i);
        ids.push((job.job_id(), lease));
        send(&mut ws, assign(job, Lease(lease), 1)).await;
        loop {
            match recv(&mut ws).await {
                WorkerMessage::Progress { .. } => {}
                WorkerMessage::Result { lease: l, .. } => {
                    assert_eq!(l, Lease(lease));
                    break;
                }
                other => panic!("expected the result, got {other:?}"),
            }
        }
        if i == 1 {
            // No ack yet, and the request is already here.
            expect_request_job(&mut ws, "t1").await;
        }
    }
    // Two reports wait: nothing more is asked for until an ack comes.
    worker_caught_up(&mut ws).await;
    let (first, lease) = ids[0].clone();
    send(
        &mut ws,
        MasterMessage::Ack {
            job_id: first,
            lease: Lease(lease),
            accepted: true,
            reason: None,
        },
    )
    .await;
    expect_request_job(&mut ws, "t1").await;
    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!((stats.jobs_succeeded, stats.reports_accepted), (2, 1));
}

/// The next message that is not a progress report.
async fn recv_report(ws: &mut Ws) -> WorkerMessage {
    loop {
        match recv(ws).await {
            WorkerMessage::Progress { .. } => {}
            other => return other,
        }
    }
}

/// With `slots: 3` the worker says so when it registers, asks for three
/// jobs, runs three at once, refuses a fourth, and asks again for the slot
/// a `cancel` frees.
#[tokio::test]
async fn a_worker_with_three_slots_holds_three_jobs() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start_with_slots(&url, Duration::from_secs(600), None, 3);
    let (mut ws, hello) = master.accept_registered("t1").await;
    assert_eq!(hello.slots, Some(3));
    for _ in 0..3 {
        expect_request_job(&mut ws, "t1").await;
    }
    let jobs: Vec<Workload> = (1..=4)
        .map(|i| workload(&format!("mm-{i}"), 8 * i))
        .collect();
    for (lease, job) in (10..).zip(&jobs[..3]) {
        send(&mut ws, assign(job.clone(), Lease(lease), 1)).await;
    }
    send(&mut ws, assign(jobs[3].clone(), Lease(13), 1)).await;
    match recv_report(&mut ws).await {
        WorkerMessage::JobFailed { lease, error, .. } => {
            assert_eq!(lease, Lease(13));
            assert!(error.contains("3 slots"), "{error}");
        }
        other => panic!("expected the fourth job refused, got {other:?}"),
    }
    send(
        &mut ws,
        MasterMessage::Cancel {
            job_id: jobs[1].job_id(),
            lease: Lease(11),
            reason: "cancelled by an admin".into(),
        },
    )
    .await;
    match recv_report(&mut ws).await {
        WorkerMessage::RequestJob { .. } => {}
        other => panic!("expected a request for the freed slot, got {other:?}"),
    }
    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!((stats.jobs_assigned, stats.jobs_cancelled), (3, 1));
}

/// Zero-time jobs in three slots: each result names its own job and lease,
/// and every finished slot asks again.
#[tokio::test]
async fn three_slots_report_each_job_and_ask_again() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start_with_slots(&url, Duration::ZERO, None, 3);
    let (mut ws, _) = master.accept_registered("t1").await;
    for _ in 0..3 {
        expect_request_job(&mut ws, "t1").await;
    }
    let mut sent = std::collections::BTreeSet::new();
    for (lease, i) in (20..).zip(1..=3u32) {
        let job = workload(&format!("mm-{i}"), 8 * i);
        sent.insert((job.job_id(), Lease(lease)));
        send(&mut ws, assign(job, Lease(lease), 1)).await;
    }
    let (mut reported, mut requests) = (std::collections::BTreeSet::new(), 0);
    while reported.len() < 3 || requests < 3 {
        match recv_report(&mut ws).await {
            WorkerMessage::Result { job_id, lease, .. } => {
                reported.insert((job_id, lease));
            }
            WorkerMessage::RequestJob { .. } => requests += 1,
            other => panic!("expected results and requests, got {other:?}"),
        }
    }
    assert_eq!(reported, sent);
    worker.shutdown();
    expect_close(ws, close_code::NORMAL).await;
    let stats = worker.finish().await.unwrap();
    assert_eq!(stats.jobs_succeeded, 3);
}

/// A partition: the master's socket stays open and says nothing, not even
/// a ping. The worker leaves it after the master's heartbeat timeout (from
/// `registered`) and registers again, with the same worker id.
#[tokio::test]
async fn a_silent_master_is_left_after_its_heartbeat_timeout() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&url, Duration::ZERO, None);
    let (mut ws, first) = master.accept_registered_with("t1", Some(300)).await;
    expect_request_job(&mut ws, "t1").await;
    let silent_from = std::time::Instant::now();
    let (mut ws2, second) = master.accept_registered("t2").await;
    let after = silent_from.elapsed();
    assert!(after >= Duration::from_millis(250), "left after {after:?}");
    assert_eq!(first.worker_id, second.worker_id);
    expect_request_job(&mut ws2, "t2").await;
    drop(ws);
    worker.shutdown();
    expect_close(ws2, close_code::NORMAL).await;
    assert_eq!(worker.finish().await.unwrap().registrations, 2);
}

/// Pings are signs of life: a master that pings more often than the limit
/// keeps its worker; the worker's own `--heartbeat-timeout` wins over the
/// master's.
#[tokio::test]
async fn pings_keep_the_worker_and_its_own_timeout_wins() {
    let (master, url) = FakeMaster::start().await;
    let mut worker = RunningWorker::start_with(&url, Duration::ZERO, |config| {
        config.heartbeat_timeout = Some(Duration::from_millis(300));
    });
    let (mut ws, _) = master.accept_registered_with("t1", Some(60_000)).await;
    expect_request_job(&mut ws, "t1").await;
    for _ in 0..10 {
        ws.send(Message::Ping(b"alive".to_vec().into()))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(10), master.listener.accept())
            .await
            .is_err(),
        "a pinging master was left"
    );
    // Silent now: left after the worker's 300 ms, not the master's 60 s.
    let (mut ws2, _) = master.accept_registered("t2").await;
    expect_request_job(&mut ws2, "t2").await;
    drop(ws);
    worker.shutdown();
    expect_close(ws2, close_code::NORMAL).await;
    assert_eq!(worker.finish().await.unwrap().registrations, 2);
}

/// `storage_unavailable` (4006) in a session: that master cannot commit
/// and may have lost the lead, so the next URL is tried first.
#[tokio::test]
async fn storage_unavailable_sends_the_worker_to_the_next_master() {
    let (a, url_a) = FakeMaster::start().await;
    let (b, url_b) = FakeMaster::start().await;
    let mut worker = RunningWorker::start(&format!("{url_a},{url_b}"), Duration::ZERO, None);
    let (mut ws, _) = a.accept_registered("t1").await;
    expect_request_job(&mut ws, "t1").await;
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::from(close_code::STORAGE_UNAVAILABLE),
            reason: "master cannot commit its state".into(),
        }))
        .await;
    while let Ok(Some(Ok(_))) = tokio::time::timeout(STEP, ws.next()).await {}
    drop(ws);
    let (mut ws2, _) = b.accept_registered("t2").await;
    expect_request_job(&mut ws2, "t2").await;
    worker.shutdown();
    expect_close(ws2, close_code::NORMAL).await;
    assert_eq!(worker.finish().await.unwrap().registrations, 2);
}
