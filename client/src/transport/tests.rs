//! The transport against a real tokio-tungstenite server on loopback.

use super::*;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Bytes;

const STEP: Duration = Duration::from_secs(5);

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Note {
    n: u32,
}

pub(crate) type ServerWs = WebSocketStream<TcpStream>;

/// A WebSocket server on loopback that accepts one connection and runs
/// `script` on it; its address. The client's tests script a master with it.
pub(crate) async fn loopback_server<F, Fut>(script: F) -> std::net::SocketAddr
where
    F: FnOnce(ServerWs) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        script(ws).await;
    });
    addr
}

/// [`loopback_server`]'s URL.
async fn server<F, Fut>(script: F) -> String
where
    F: FnOnce(ServerWs) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    format!("ws://{}/ws/test", loopback_server(script).await)
}

async fn note(ws: &mut ServerWs, n: u32) {
    let text = serde_json::to_string(&Note { n }).unwrap();
    ws.send(Message::text(text)).await.unwrap();
}

async fn recv(transport: &mut Transport) -> Result<Received<Note>, TransportError> {
    tokio::time::timeout(STEP, transport.recv())
        .await
        .expect("nothing received in time")
}

#[tokio::test]
async fn messages_both_ways_and_a_close_with_its_code_and_reason() {
    let (answered, got_answer) = oneshot::channel();
    let url = server(|mut ws| async move {
        let text = match ws.next().await.unwrap().unwrap() {
            Message::Text(text) => text,
            other => panic!("expected a text frame, got {other:?}"),
        };
        let got: Note = serde_json::from_str(text.as_str()).unwrap();
        note(&mut ws, got.n + 1).await;
        ws.send(Message::Close(Some(CloseFrame {
            code: CloseCode::from(4006),
            reason: "storage unavailable".into(),
        })))
        .await
        .unwrap();
        // The transport answers the close frame before the TCP close.
        let answer = loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                other => panic!("no close answer: {other:?}"),
            }
        };
        let _ = answered.send(answer);
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    transport.send(&Note { n: 41 }).await.unwrap();
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Message(Note { n: 42 })
    );
    let close = CloseInfo {
        code: 4006,
        reason: "storage unavailable".into(),
    };
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Closed(Some(close.clone()))
    );
    assert_eq!(transport.close_info(), Some(&close));
    assert_eq!(close.to_string(), "close code 4006: storage unavailable");
    // The close is echoed with the master's code (RFC 6455 §5.5.1).
    let answer = tokio::time::timeout(STEP, got_answer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, Some(4006));
    // Asked again, the end is the same.
    assert!(matches!(
        recv(&mut transport).await.unwrap(),
        Received::Closed(_)
    ));
}

#[tokio::test]
async fn a_close_frame_without_a_code_reads_as_1005() {
    let url = server(|mut ws| async move {
        ws.send(Message::Close(None)).await.unwrap();
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Closed(Some(CloseInfo {
            code: crate::NO_STATUS,
            reason: String::new(),
        }))
    );
}

#[tokio::test]
async fn a_binary_frame_is_refused_and_the_socket_stays_usable() {
    let url = server(|mut ws| async move {
        // Valid JSON of the right shape, but binary: still not a message.
        ws.send(Message::Binary(Bytes::from_static(b"{\"n\":1}")))
            .await
            .unwrap();
        ws.send(Message::text("not json")).await.unwrap();
        note(&mut ws, 2).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    let err = recv(&mut transport).await.unwrap_err();
    assert!(matches!(err, TransportError::Binary), "{err}");
    assert!(err.is_recoverable());
    let err = recv(&mut transport).await.unwrap_err();
    assert!(
        matches!(&err, TransportError::Decode { preview, .. } if preview == "not json"),
        "{err}"
    );
    assert!(err.is_recoverable());
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Message(Note { n: 2 })
    );
}

#[tokio::test]
async fn a_message_over_the_limit_is_too_big_and_ends_the_connection() {
    const LIMIT: usize = 1024;
    let url = server(|mut ws| async move {
        note(&mut ws, 1).await;
        // One frame over the limit.
        let big = format!("{{\"n\":2,\"pad\":\"{}\"}}", "x".repeat(LIMIT));
        let _ = ws.send(Message::text(big)).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect_limited(&url, None, LIMIT).await.unwrap();
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Message(Note { n: 1 })
    );
    let err = recv(&mut transport).await.unwrap_err();
    assert!(matches!(err, TransportError::TooBig(_)), "{err}");
    assert!(!err.is_recoverable());
}

#[tokio::test]
async fn a_message_in_fragments_over_the_limit_is_too_big() {
    const LIMIT: usize = 1024;
    let url = server(|mut ws| async move {
        // Each fragment fits; the message they make does not.
        use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
        use tokio_tungstenite::tungstenite::protocol::frame::Frame;
        let text = format!("{{\"n\":3,\"pad\":\"{}\"}}", "x".repeat(2 * LIMIT));
        let bytes = Bytes::from(text);
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + LIMIT / 2).min(bytes.len());
            let opcode = if start == 0 {
                OpCode::Data(Data::Text)
            } else {
                OpCode::Data(Data::Continue)
            };
            let fragment = Frame::message(bytes.slice(start..end), opcode, end == bytes.len());
            if ws.send(Message::Frame(fragment)).await.is_err() {
                break;
            }
            start = end;
        }
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect_limited(&url, None, LIMIT).await.unwrap();
    let err = recv(&mut transport).await.unwrap_err();
    assert!(matches!(err, TransportError::TooBig(_)), "{err}");
}

#[test]
fn the_limit_is_the_larger_of_the_two_loops() {
    // The client's 1 GiB, not tungstenite's 64 MiB default the worker had.
    assert_eq!(MAX_MESSAGE_BYTES, 1 << 30);
    let default = WebSocketConfig::default();
    assert!(default
        .max_message_size
        .is_some_and(|m| m < MAX_MESSAGE_BYTES));
}

#[tokio::test]
async fn pings_are_answered_while_receiving_and_count_as_heard() {
    let (ponged, got_pong) = oneshot::channel();
    let url = server(|mut ws| async move {
        ws.send(Message::Ping(Bytes::from_static(b"are you there")))
            .await
            .unwrap();
        let pong = loop {
            match tokio::time::timeout(STEP, ws.next()).await {
                Ok(Some(Ok(Message::Pong(data)))) => break Some(data),
                Ok(Some(Ok(_))) => continue,
                _ => break None,
            }
        };
        let _ = ponged.send(pong);
        note(&mut ws, 7).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    let before = transport.last_heard();
    // The ping never surfaces: the next thing received is the message sent
    // after the pong came back.
    assert_eq!(
        recv(&mut transport).await.unwrap(),
        Received::Message(Note { n: 7 })
    );
    let pong = got_pong.await.unwrap();
    assert_eq!(pong.as_deref(), Some(&b"are you there"[..]));
    assert!(transport.last_heard() > before);
}

#[tokio::test]
async fn a_ping_alone_moves_last_heard_and_a_silence_limit_measures_it() {
    let (pinged, ping_sent) = oneshot::channel::<()>();
    let url = server(|mut ws| async move {
        ws.send(Message::Ping(Bytes::new())).await.unwrap();
        let _ = pinged.send(());
        // Read on (pongs flow), never send a message.
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    transport.set_silence_limit(Duration::from_millis(300));
    let start = transport.last_heard();
    ping_sent.await.unwrap();
    // recv waits on: the ping is heard, not returned.
    let waited = tokio::time::timeout(Duration::from_millis(200), transport.recv::<Note>()).await;
    assert!(waited.is_err(), "a ping is not a message: {waited:?}");
    assert!(transport.last_heard() > start);
    assert!(transport.silent_for().is_none());
    let deadline = transport.silence_deadline().unwrap();
    assert_eq!(
        deadline,
        transport.last_heard() + Duration::from_millis(300)
    );
    tokio::time::sleep_until(deadline + Duration::from_millis(10)).await;
    assert!(transport.silent_for().unwrap() > Duration::from_millis(300));
}

#[tokio::test]
async fn a_write_the_peer_never_takes_stalls_within_the_silence_limit() {
    // A server that accepts and then never reads: writes fill the socket
    // buffers and then wait.
    let (done, hold) = oneshot::channel::<()>();
    let url = server(|ws| async move {
        let _ = hold.await;
        drop(ws);
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    transport.set_silence_limit(Duration::from_millis(300));
    let big = "x".repeat(1 << 20);
    let err = tokio::time::timeout(STEP, async {
        loop {
            if let Err(e) = transport.send(&big).await {
                return e;
            }
        }
    })
    .await
    .expect("the write stalls within the limit, not never");
    assert!(matches!(err, TransportError::Stalled(_)), "{err}");
    drop(done);
}

#[tokio::test]
async fn close_from_this_side_is_answered_or_bounded() {
    let (closed, got_close) = oneshot::channel();
    let url = server(|mut ws| async move {
        let frame = loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => break frame,
                Some(Ok(_)) => continue,
                other => panic!("no close frame: {other:?}"),
            }
        };
        let _ = closed.send(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
        // tungstenite echoes the close; the stream then ends.
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let transport = Transport::connect(&url, None).await.unwrap();
    let started = Instant::now();
    transport.close("bye").await.unwrap();
    assert!(started.elapsed() < CLOSE_TIMEOUT);
    assert_eq!(got_close.await.unwrap(), Some((1000, "bye".to_string())));

    // A peer that never answers the close holds the caller CLOSE_TIMEOUT at most.
    let url = server(|ws| async move {
        tokio::time::sleep(STEP * 2).await;
        drop(ws);
    })
    .await;
    let transport = Transport::connect(&url, None).await.unwrap();
    let started = Instant::now();
    transport.close("bye").await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= CLOSE_TIMEOUT - Duration::from_millis(100) && took < CLOSE_TIMEOUT * 2,
        "{took:?}"
    );
}

#[tokio::test]
async fn a_stream_that_ends_without_a_close_frame_is_closed_without_info() {
    let url = server(|ws| async move {
        // Drop the TCP connection without a close frame.
        drop(ws);
    })
    .await;
    let mut transport = Transport::connect(&url, None).await.unwrap();
    match recv(&mut transport).await {
        Ok(Received::Closed(None)) => {}
        // tungstenite reports the reset as an error.
        Err(TransportError::WebSocket(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(transport.close_info(), None);
}

/// A TCP server that reads one request and answers `response` (not a
/// WebSocket upgrade); the `ws://` URL.
async fn plain_http(response: &'static [u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp.write_all(response).await;
    });
    format!("ws://{addr}/ws/test")
}

#[tokio::test]
async fn a_refused_upgrade_is_a_websocket_error_with_the_http_status() {
    let url = plain_http(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
    let err = Transport::connect(&url, None).await.unwrap_err();
    match &err {
        TransportError::WebSocket(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 403)
        }
        other => panic!("{other}"),
    }
    assert!(err.tls_error().is_none());
}

#[tokio::test]
async fn tls_to_a_plain_server_is_a_tls_error() {
    let url = plain_http(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
    // Spoken to with TLS, the server answers in plain HTTP.
    let url = url.replacen("ws://", "wss://", 1);
    let config = crate::tls_client_config(None).unwrap();
    let err = Transport::connect(&url, Some(&config)).await.unwrap_err();
    assert!(
        matches!(err.tls_error(), Some(rustls::Error::InvalidMessage(_))),
        "{err}"
    );
}
