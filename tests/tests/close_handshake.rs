//! RFC 6455 §5.5.1: a peer that sends a close frame gets one back before the
//! master drops the connection, so standard clients (Python `websockets`,
//! browsers) see a clean close (1000), not an abnormal one (1006).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tunefleet_tests::*;

async fn close_and_expect_an_answer(url: &str, before_close: Option<serde_json::Value>) {
    let mut ws = raw::connect(url).await;
    if let Some(first) = before_close {
        raw::send(&mut ws, first).await;
        let reply = raw::next(&mut ws).await;
        assert!(reply.is_ok(), "the master keeps the socket open: {reply:?}");
    }
    ws.send(Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    })))
    .await
    .expect("send close");
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return Ok(frame),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("the stream ended without a close frame".to_string()),
            }
        }
    })
    .await
    .expect("the master answers within 5 s");
    let frame = answer.unwrap_or_else(|e| panic!("{url}: no close frame came back: {e}"));
    assert_eq!(
        frame.map(|f| f.code),
        Some(CloseCode::Normal),
        "{url}: the close is echoed"
    );
}

#[tokio::test]
async fn the_master_answers_a_close_frame_on_both_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let master = Master::start(dir.path(), &[]);
    let base = master.url();
    // Before any message, and after the handshake.
    close_and_expect_an_answer(&format!("{base}/ws/client"), None).await;
    close_and_expect_an_answer(
        &format!("{base}/ws/client"),
        Some(serde_json::json!({"id": 1, "type": "hello", "protocol": 1, "token": ADMIN_TOKEN})),
    )
    .await;
    close_and_expect_an_answer(&format!("{base}/ws/worker"), None).await;
    // The master is still serving.
    let (status, _) = http_get(master.addr, "/healthz");
    assert_eq!(status, 200);
}
