//! Bad input of every kind gets a clear error, and the master keeps serving
//! and loses nothing. Raw WebSocket peers play the misbehaving parties.

use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tunefleet_server::client::{Client, ClientError};
use tunefleet_shared::protocol::{ErrorCode, JobState};
use tunefleet_tests::raw::{self, next, send, Ws};
use tunefleet_tests::*;

async fn raw(master: &Master, path: &str) -> Ws {
    raw::connect(&format!("{}{path}", master.url())).await
}

async fn register(ws: &mut Ws, worker_id: &str) -> String {
    send(
        ws,
        json!({"type": "register", "protocol": 1, "worker_id": worker_id, "name": worker_id,
               "target": {"kind": "llvm", "num-cores": 2}, "backend": "raw-test"}),
    )
    .await;
    let reply = next(ws).await.expect("registered");
    assert_eq!(reply["type"], "registered", "{reply}");
    reply["token"].as_str().expect("token").to_string()
}

async fn still_serving(master: &Master) {
    let mut client = master.client().await;
    client.status().await.expect("master still answers");
}

fn server_error(err: ClientError) -> (ErrorCode, String) {
    match err {
        ClientError::Server { code, message } => (code, message),
        other => panic!("expected an error reply, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_workload_files_are_refused_with_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;

    let malformed = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 1, n: 2, k: 3\n";
    let (code, message) = server_error(
        client
            .submit(malformed, Some("malformed.yaml"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::InvalidWorkload);
    assert!(message.contains("malformed.yaml:"), "{message}");

    let unknown_op = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: 8, k: 8}\n  - name: b\n    op: softmax_fancy\n    shape: {m: 1}\n";
    let (code, message) = server_error(
        client
            .submit(unknown_op, Some("ops.yaml"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ErrorCode::InvalidWorkload);
    assert!(
        message.contains("ops.yaml:7"),
        "names the line of the bad op: {message}"
    );
    assert!(
        message.contains("workloads[1].op"),
        "names the field: {message}"
    );
    assert!(message.contains("softmax_fancy"), "{message}");

    let negative = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: -3, k: 8}\n";
    let (_, message) = server_error(client.submit(negative, Some("neg.yaml")).await.unwrap_err());
    assert!(message.contains("neg.yaml:5"), "{message}");
    assert!(message.contains("shape.n"), "{message}");

    // Nothing from the refused files was stored; a good file still goes in.
    assert_eq!(client.status().await.expect("status").jobs.total, 0);
    let ok = client
        .submit(matmul_yaml(2, "ok"), Some("ok.yaml"))
        .await
        .expect("valid file accepted");
    assert_eq!(ok.new_jobs.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_upload_is_closed_with_1009_and_the_master_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    master
        .client()
        .await
        .submit(matmul_yaml(3, "keep"), None)
        .await
        .expect("submit");

    let mut ws = raw(&master, "/ws/client").await;
    send(
        &mut ws,
        json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    assert_eq!(next(&mut ws).await.expect("welcome")["type"], "reply");
    let huge = format!(
        r#"{{"id":2,"type":"submit","filename":"huge.yaml","yaml":"{}"}}"#,
        "x".repeat(100 * 1024 * 1024)
    );
    // The master may close while we are still writing; either way it must say 1009.
    let _ = ws.send(Message::Text(huge.into())).await;
    let closed = loop {
        match next(&mut ws).await {
            Ok(_) => continue,
            Err(close) => break close,
        }
    };
    assert_eq!(closed.0, 1009, "close code {closed:?}");
    assert!(
        closed.1.contains("limit"),
        "the reason names the limit: {closed:?}"
    );
    assert!(
        master.log().contains("over the"),
        "master logged the oversize message"
    );
    let mut client = master.client().await;
    assert_eq!(
        client.status().await.expect("status").jobs.total,
        3,
        "nothing lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_get_errors_and_do_not_hurt_the_master() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);

    let mut ws = raw(&master, "/ws/worker").await;
    ws.send(Message::Text("\u{0}\u{1}not json at all".into()))
        .await
        .expect("send");
    let (code, reason) = next(&mut ws).await.expect_err("closed");
    assert_eq!(code, 4002, "{reason}");
    assert!(reason.contains("register"), "{reason}");

    // Slots out of range: refused at the handshake, with the bounds named.
    for slots in [0, 65] {
        let mut ws = raw(&master, "/ws/worker").await;
        send(
            &mut ws,
            json!({"type": "register", "protocol": 1, "worker_id": "greedy", "name": "greedy",
                   "target": {"kind": "llvm"}, "backend": "raw-test", "slots": slots}),
        )
        .await;
        let (code, reason) = next(&mut ws).await.expect_err("closed");
        assert_eq!(code, 4002, "{reason}");
        assert!(
            reason.contains("slots must be 1 to 64") && reason.contains(&slots.to_string()),
            "{reason}"
        );
    }

    let mut ws = raw(&master, "/ws/worker").await;
    let token = register(&mut ws, "garbage-worker").await;
    ws.send(Message::Text("{\"type\":\"steal_all_jobs\"}".into()))
        .await
        .expect("send");
    let reply = next(&mut ws).await.expect("error reply");
    assert_eq!(
        (reply["type"].as_str(), reply["code"].as_str()),
        (Some("error"), Some("bad_request")),
        "{reply}"
    );
    ws.send(Message::Binary(vec![0xff; 64].into()))
        .await
        .expect("send");
    assert_eq!(
        next(&mut ws).await.expect("error reply")["code"],
        "bad_request"
    );
    // The same connection still works for real messages.
    send(&mut ws, json!({"type": "request_job", "token": token})).await;

    let mut client = raw(&master, "/ws/client").await;
    send(
        &mut client,
        json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    next(&mut client).await.expect("welcome");
    client
        .send(Message::Text(
            "{\"id\": 5, \"type\": \"drop_database\"}".into(),
        ))
        .await
        .expect("send");
    let reply = next(&mut client).await.expect("error reply");
    assert_eq!(
        (reply["id"].as_u64(), reply["code"].as_str()),
        (Some(5), Some("bad_request")),
        "{reply}"
    );
    send(&mut client, json!({"id": 6, "type": "status"})).await;
    let reply = next(&mut client).await.expect("status reply");
    assert_eq!(reply["id"], 6);
    assert_eq!(reply["body"]["workers"], 1);
    still_serving(&master).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_version_is_closed_with_a_reason_naming_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut ws = raw(&master, "/ws/worker").await;
    send(
        &mut ws,
        json!({"type": "register", "protocol": 99, "worker_id": "x", "name": "x",
               "target": {"kind": "llvm"}, "backend": "future", "shiny_new_field": true}),
    )
    .await;
    let (code, reason) = next(&mut ws).await.expect_err("closed");
    assert_eq!(code, 4000);
    assert!(
        reason.contains("master speaks 1") && reason.contains("99"),
        "{reason}"
    );

    let mut ws = raw(&master, "/ws/client").await;
    send(&mut ws, json!({"id": 1, "type": "hello", "protocol": 2})).await;
    let mut closed = None;
    while closed.is_none() {
        if let Err(c) = next(&mut ws).await {
            closed = Some(c);
        }
    }
    assert_eq!(closed.map(|c| c.0), Some(4000));
    still_serving(&master).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_with_a_stolen_token_or_for_someone_elses_job_are_not_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    let mut client = master.client().await;
    let job_id = client
        .submit(matmul_yaml(1, "prize"), None)
        .await
        .expect("submit")
        .new_jobs[0]
        .clone();

    let mut honest = raw(&master, "/ws/worker").await;
    let honest_token = register(&mut honest, "honest").await;
    send(
        &mut honest,
        json!({"type": "request_job", "token": honest_token}),
    )
    .await;
    let assign = next(&mut honest).await.expect("assign");
    assert_eq!(assign["type"], "assign");
    let lease = assign["lease"].as_u64().expect("lease");

    let mut thief = raw(&master, "/ws/worker").await;
    let thief_token = register(&mut thief, "thief").await;
    let forged = |token: &str, latency: f64| {
        json!({"type": "result", "token": token, "job_id": job_id, "lease": lease,
               "result": {"best_latency_s": latency, "records": [], "trials": 1, "wall_time_s": 0.1, "backend": "forged"}})
    };
    send(&mut thief, forged(&honest_token, 1e-9)).await;
    let reply = next(&mut thief).await.expect("refusal");
    assert_eq!(reply["code"], "stale_token", "{reply}");
    send(&mut thief, forged(&thief_token, 1e-9)).await;
    let reply = next(&mut thief).await.expect("ack");
    assert_eq!(
        (reply["type"].as_str(), reply["accepted"].as_bool()),
        (Some("ack"), Some(false)),
        "{reply}"
    );
    let job = &client
        .results(Some(vec![job_id.clone()]))
        .await
        .expect("results")[0];
    assert!(
        job.state.is_in_flight() && job.best_latency_s.is_none(),
        "nothing stored: {job:?}"
    );

    send(&mut honest, forged(&honest_token, 2e-3)).await;
    let reply = next(&mut honest).await.expect("ack");
    assert_eq!(reply["accepted"], true, "{reply}");
    let job = &client.results(Some(vec![job_id])).await.expect("results")[0];
    assert_eq!(
        (job.state, job.best_latency_s),
        (JobState::Done, Some(2e-3))
    );
    assert!(master
        .log()
        .contains("token does not belong to this connection"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_admin_token_cannot_change_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &["--public-read"]);
    let refused = Client::connect(&master.url(), Some("wrong"))
        .await
        .expect_err("a wrong token is refused");
    assert!(refused.to_string().contains("unauthorized"), "{refused}");
    let mut reader = Client::connect(&master.url(), None)
        .await
        .expect("public read");
    reader.status().await.expect("read allowed");
    let (code, _) = server_error(reader.submit(matmul_yaml(1, "x"), None).await.unwrap_err());
    assert_eq!(code, ErrorCode::Forbidden);
    assert_eq!(
        master
            .client()
            .await
            .status()
            .await
            .expect("status")
            .jobs
            .total,
        0
    );
}

/// PROTOCOL.md: `id` is a number; a string id is refused with `"id": null`
/// (it cannot be echoed as an id) and the connection stays usable.
#[tokio::test]
async fn a_string_id_is_refused_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let mut ws = raw(&master, "/ws/client").await;
    send(
        &mut ws,
        json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
    )
    .await;
    assert_eq!(next(&mut ws).await.expect("welcome")["type"], "reply");
    send(&mut ws, json!({"id": "2", "type": "status"})).await;
    let refused = next(&mut ws).await.expect("an error, not a close");
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "bad_request", "{refused}");
    assert!(refused["id"].is_null(), "{refused}");
    send(&mut ws, json!({"id": 3, "type": "status"})).await;
    let status = next(&mut ws).await.expect("status reply");
    assert_eq!(status["id"], 3, "{status}");
    assert_eq!(status["type"], "reply", "{status}");
}
