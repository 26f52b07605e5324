use super::*;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tunefleet_shared::protocol::{close_code, FleetEvent, FleetSnapshot, JobCounts, StatusReport};

#[test]
fn endpoint_url_normalises_the_server_flag() {
    let ok = |s: &str| endpoint_url(s).unwrap();
    assert_eq!(ok("ws://127.0.0.1:18871"), "ws://127.0.0.1:18871/ws/client");
    assert_eq!(
        ok("ws://127.0.0.1:18871/"),
        "ws://127.0.0.1:18871/ws/client"
    );
    assert_eq!(ok(" ws://h:1/ws/client/ "), "ws://h:1/ws/client");
    assert_eq!(ok("http://h:1"), "ws://h:1/ws/client");
    assert_eq!(ok("https://h/farm"), "wss://h/farm/ws/client");
    for bad in ["127.0.0.1:18871", "ftp://h", "ws://", "ws:///x", ""] {
        let err = endpoint_url(bad).unwrap_err();
        assert!(matches!(err, ClientError::BadUrl { .. }), "{bad}: {err}");
    }
}

#[test]
fn error_messages_read_well() {
    let e = ClientError::Closed {
        code: close_code::UNAUTHORIZED,
        reason: "bad token".into(),
    };
    assert_eq!(e.to_string(), "master refused: unauthorized: bad token");
    assert!(!e.is_retryable());
    let e = ClientError::Closed {
        code: close_code::PROTOCOL_MISMATCH,
        reason: "master speaks 2, client 1".into(),
    };
    assert!(e
        .to_string()
        .starts_with("protocol mismatch: master speaks 2"));
    let e = ClientError::Server {
        code: ErrorCode::InvalidWorkload,
        message: "more.yaml:3: unknown field `tile`".into(),
    };
    assert_eq!(
        e.to_string(),
        "master refused: invalid_workload: more.yaml:3: unknown field `tile`"
    );
    // The master's own "unauthorized: " / "protocol version mismatch" prefixes
    // are not repeated.
    let e = ClientError::Server {
        code: ErrorCode::Unauthorized,
        message: "unauthorized: wrong token".into(),
    };
    assert_eq!(e.to_string(), "master refused: unauthorized: wrong token");
    let e = ClientError::Closed {
        code: close_code::UNAUTHORIZED,
        reason: "unauthorized: wrong token".into(),
    };
    assert_eq!(e.to_string(), "master refused: unauthorized: wrong token");
    let e = ClientError::Server {
        code: ErrorCode::ProtocolMismatch,
        message: "protocol version mismatch: master speaks 1, client sent 2".into(),
    };
    assert_eq!(
        e.to_string(),
        format!(
            "protocol version mismatch: master speaks 1, client sent 2 \
                 (this client speaks protocol {PROTOCOL_VERSION})"
        )
    );
    assert!(ClientError::Closed {
        code: close_code::GOING_AWAY,
        reason: String::new()
    }
    .is_retryable());
}

/// A scripted master: accepts one client, answers `hello`, then runs `script`.
async fn fake_master<F, Fut>(script: F) -> String
where
    F: FnOnce(WebSocketStream<TcpStream>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    format!(
        "ws://{}",
        crate::transport::tests::loopback_server(script).await
    )
}

async fn read_request(ws: &mut WebSocketStream<TcpStream>) -> ClientRequest {
    loop {
        match ws.next().await.unwrap().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            _ => continue,
        }
    }
}

async fn send(ws: &mut WebSocketStream<TcpStream>, msg: &ServerMessage) {
    let text = serde_json::to_string(msg).unwrap();
    ws.send(Message::text(text)).await.unwrap();
}

async fn welcome(ws: &mut WebSocketStream<TcpStream>, role: Role) -> ClientRequest {
    let hello = read_request(ws).await;
    send(
        ws,
        &ServerMessage::Reply {
            id: hello.id,
            body: ReplyBody::Welcome {
                server_version: "0.1.0".into(),
                protocol: PROTOCOL_VERSION,
                role,
            },
        },
    )
    .await;
    hello
}

#[tokio::test]
async fn handshake_then_request_with_interleaved_events() {
    let url = fake_master(|mut ws| async move {
        let hello = welcome(&mut ws, Role::Admin).await;
        match hello.command {
            ClientCommand::Hello {
                protocol,
                token,
                client,
            } => {
                assert_eq!(protocol, PROTOCOL_VERSION);
                assert_eq!(token.as_deref(), Some("s3cret"));
                assert!(client.unwrap().starts_with("tunefleet-cli/"));
            }
            other => panic!("{other:?}"),
        }
        let sub = read_request(&mut ws).await;
        assert_eq!(sub.command, ClientCommand::Subscribe { deltas: false });
        assert!(sub.id > hello.id);
        send(
            &mut ws,
            &ServerMessage::Reply {
                id: sub.id,
                body: ReplyBody::Subscribed,
            },
        )
        .await;
        send(
            &mut ws,
            &ServerMessage::Snapshot {
                seq: 3,
                snapshot: FleetSnapshot::default(),
            },
        )
        .await;
        let status = read_request(&mut ws).await;
        // An event and a stale reply arrive before the status reply.
        let event = FleetEvent::WorkerLeft {
            session: "x".into(),
            reason: "bye".into(),
        };
        send(&mut ws, &ServerMessage::Event { seq: 4, event }).await;
        send(
            &mut ws,
            &ServerMessage::Reply {
                id: 999,
                body: ReplyBody::Subscribed,
            },
        )
        .await;
        let report = StatusReport {
            jobs: JobCounts::default(),
            workers: 2,
            workers_busy: 1,
            server_version: "0.1.0".into(),
            storage: Default::default(),
            storage_problem: None,
            devices: Vec::new(),
            unserved: Vec::new(),
        };
        send(
            &mut ws,
            &ServerMessage::Reply {
                id: status.id,
                body: ReplyBody::Status(report),
            },
        )
        .await;
        let cancel = read_request(&mut ws).await;
        send(
            &mut ws,
            &ServerMessage::Error {
                id: Some(cancel.id),
                code: ErrorCode::NotFound,
                message: "no job zz".into(),
            },
        )
        .await;
        ws.close(None).await.ok();
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;

    let mut client = Client::connect(&url, Some("s3cret")).await.unwrap();
    assert_eq!(client.role(), Role::Admin);
    assert_eq!(client.server_version(), "0.1.0");
    assert!(!format!("{client:?}").contains("s3cret"));
    let (seq, snap) = client.subscribe().await.unwrap();
    assert_eq!((seq, snap), (3, FleetSnapshot::default()));
    let status = client.status().await.unwrap();
    assert_eq!(status.workers, 2);
    match client.next_update().await.unwrap() {
        Some(Update::Event(4, FleetEvent::WorkerLeft { session, .. })) => {
            assert_eq!(session, "x")
        }
        other => panic!("{other:?}"),
    }
    let err = client.cancel("zz").await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::NotFound));
    assert_eq!(err.to_string(), "master refused: not_found: no job zz");
    // The master closes normally: end of the stream, not an error.
    assert_eq!(client.next_update().await.unwrap(), None);
}

#[tokio::test]
async fn refused_handshake_reports_the_close_reason() {
    let url = fake_master(|mut ws| async move {
        let _hello = read_request(&mut ws).await;
        let frame = CloseFrame {
            code: CloseCode::from(close_code::UNAUTHORIZED),
            reason: "bad token".into(),
        };
        ws.close(Some(frame)).await.ok();
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let err = Client::connect(&url, Some("wrong")).await.unwrap_err();
    assert_eq!(err.to_string(), "master refused: unauthorized: bad token");
    assert!(!err.to_string().contains("wrong"));
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn handshake_error_reply_is_a_server_error() {
    let url = fake_master(|mut ws| async move {
        let hello = read_request(&mut ws).await;
        let msg = ServerMessage::Error {
            id: Some(hello.id),
            code: ErrorCode::ProtocolMismatch,
            message: "master speaks protocol 2".into(),
        };
        send(&mut ws, &msg).await;
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let err = Client::connect(&url, None).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("protocol mismatch: master speaks protocol 2"),
        "{err}"
    );
}

#[tokio::test]
async fn connection_refused_is_clear() {
    // Bind then drop to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = Client::connect(&format!("ws://127.0.0.1:{port}"), None)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot connect to ws://127.0.0.1:{port}/ws/client: connection refused"
        )),
        "{text}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn silent_master_is_detected_by_keepalive() {
    let url = fake_master(|mut ws| async move {
        welcome(&mut ws, Role::Read).await;
        // Never read again: pings stay unanswered.
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(ws);
    })
    .await;
    let mut client = Client::connect(&url, None).await.unwrap();
    client.set_keepalive(Duration::from_millis(50));
    let err = client.next_update().await.unwrap_err();
    assert!(
        err.to_string().contains("no answer from the master"),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn request_timeout_names_the_request() {
    let url = fake_master(|mut ws| async move {
        welcome(&mut ws, Role::Read).await;
        // Reads (so pongs flow) but never replies.
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut client = Client::connect(&url, None).await.unwrap();
    client.set_request_timeout(Duration::from_millis(100));
    client.set_keepalive(Duration::from_millis(30));
    let err = client.status().await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Timeout { what, .. } if what == "status"),
        "{err}"
    );
}

#[tokio::test]
async fn a_master_that_stops_reading_fails_the_request_in_time() {
    let url = fake_master(|mut ws| async move {
        welcome(&mut ws, Role::Admin).await;
        // Stuck: holds the socket and never reads again, so once the
        // socket's buffers are full the client's send cannot finish.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(ws);
    })
    .await;
    let mut client = Client::connect(&url, Some("token")).await.unwrap();
    client.set_request_timeout(Duration::from_millis(300));
    // Far more than loopback's socket buffers hold.
    let yaml = "#".repeat(64 << 20);
    let started = std::time::Instant::now();
    let err = client.submit(yaml, None).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the send was held for {:?}",
        started.elapsed()
    );
    assert!(
        err.to_string()
            .contains("the master took no `submit` request within 300 ms"),
        "{err}"
    );
    assert!(err.is_retryable());
}
