//! Large messages leave the master in 16 KiB fragments (RFC 6455 §5.4), so
//! no connection keeps a message-sized write buffer. A client whose library
//! takes frames of at most 16 KiB (plus a header) but whole messages of any
//! size still gets a snapshot of hundreds of kilobytes, and the same
//! snapshot arrives whole for the next subscriber too.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tunefleet_tests::*;

const FRAGMENT: usize = 16 * 1024;

async fn subscribe_with_small_frames(url: &str) -> serde_json::Value {
    let config = WebSocketConfig::default()
        .max_frame_size(Some(FRAGMENT + 14))
        .max_message_size(Some(64 << 20));
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(
        format!("{url}/ws/client"),
        Some(config),
        false,
    )
    .await
    .expect("connect");
    for request in [
        serde_json::json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN}),
        serde_json::json!({"id": 2, "type": "subscribe"}),
    ] {
        ws.send(Message::Text(request.to_string().into()))
            .await
            .expect("send");
    }
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    let msg: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                    if msg["type"] == "snapshot" {
                        return (msg, text.len());
                    }
                }
                Some(Ok(_)) => continue,
                other => panic!("no snapshot: the stream gave {other:?}"),
            }
        }
    })
    .await
    .map(|(msg, len)| {
        assert!(
            len > 10 * FRAGMENT,
            "the snapshot ({len} bytes) is big enough to need fragments"
        );
        msg
    })
    .expect("a snapshot within 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_bigger_than_a_frame_arrives_whole() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let master = Master::start(dir.path(), &[]);
    master
        .client()
        .await
        .submit(matmul_yaml(400, "big"), Some("big.yaml"))
        .await
        .expect("submit");
    // Twice: the second subscriber gets the snapshot the first one made.
    for _ in 0..2 {
        let snapshot = subscribe_with_small_frames(&master.url()).await;
        let jobs = snapshot["snapshot"]["jobs"].as_array().expect("jobs");
        assert_eq!(jobs.len(), 400);
        assert!(jobs.iter().all(|j| j["state"] == "queued"));
    }
    // The master is unharmed and still answers.
    let status = master.client().await.status().await.expect("status");
    assert_eq!(status.jobs.total, 400);
}
