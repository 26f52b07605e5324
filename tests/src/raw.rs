//! A bare WebSocket peer for tests that must speak the protocol by hand:
//! misbehaving workers and clients, forged messages, close codes.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn connect(url: &str) -> Ws {
    let (ws, _) = connect_async(url).await.expect("connect");
    ws
}

pub async fn send(ws: &mut Ws, value: Value) {
    ws.send(Message::Text(value.to_string().into()))
        .await
        .expect("send");
}

/// Next JSON message, or `Err((code, reason))` when the master closes.
pub async fn next(ws: &mut Ws) -> Result<Value, (u16, String)> {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("master answers within 10 s");
        match msg {
            Some(Ok(Message::Text(t))) => {
                return Ok(serde_json::from_str(&t).expect("master sends JSON"))
            }
            Some(Ok(Message::Close(frame))) => {
                return Err(frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new())))
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err((0, e.to_string())),
            None => return Err((0, "ended".into())),
        }
    }
}

/// The next message of `kind` (its `type`), skipping others (events, errors
/// the test does not care about); panics if the master closes first.
pub async fn next_of_type(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let m = next(ws).await.expect("the master keeps the socket open");
        if m["type"] == kind {
            return m;
        }
    }
}
