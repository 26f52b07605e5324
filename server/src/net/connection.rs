//! `Connection`: JSON messages over one WebSocket, with the framing hidden.
//!
//! Handlers see [`Frame`]s that already say what happened (a text message, a
//! close with its code, an oversize message) instead of tungstenite's error
//! variety, and send typed messages instead of building frames.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use serde::Serialize;
use std::time::Instant;

pub enum Frame {
    Text(String),
    Binary,
    /// Ping or pong: proof of life, nothing to do.
    Control,
    /// The peer closed (or the stream ended).
    Closed {
        code: Option<u16>,
        reason: String,
    },
    /// A message over the size limit; the socket is no longer usable.
    TooBig,
    Error(String),
}

pub struct Connection {
    socket: WebSocket,
    max_message_bytes: usize,
    /// When a frame of any kind last arrived.
    pub last_seen: Instant,
}

impl Connection {
    pub fn new(socket: WebSocket, max_message_bytes: usize) -> Self {
        Connection {
            socket,
            max_message_bytes,
            last_seen: Instant::now(),
        }
    }

    /// Next frame. Cancel-safe (the socket buffers partial frames).
    pub async fn recv(&mut self) -> Frame {
        let frame = match self.socket.recv().await {
            None => Frame::Closed {
                code: None,
                reason: "connection ended".into(),
            },
            Some(Ok(Message::Text(text))) => Frame::Text(text.to_string()),
            Some(Ok(Message::Binary(_))) => Frame::Binary,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => Frame::Control,
            Some(Ok(Message::Close(frame))) => {
                self.answer_close().await;
                Frame::Closed {
                    code: frame.as_ref().map(|f| f.code),
                    reason: frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                }
            }
            Some(Err(e)) => classify(e),
        };
        self.last_seen = Instant::now();
        frame
    }

    /// RFC 6455 §5.5.1: a close frame is answered before the TCP close.
    /// tungstenite queues the answer when it reads the peer's close, but only
    /// writes it on the next flush; without this the handler drops the
    /// socket first and the peer sees 1006 (abnormal closure).
    async fn answer_close(&mut self) {
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            futures_util::SinkExt::flush(&mut self.socket),
        )
        .await;
    }

    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), axum::Error> {
        let text = serde_json::to_string(msg).map_err(axum::Error::new)?;
        self.send_text(text).await
    }

    pub async fn send_text(&mut self, text: String) -> Result<(), axum::Error> {
        self.socket.send(Message::Text(text.into())).await
    }

    pub async fn ping(&mut self) -> Result<(), axum::Error> {
        self.socket.send(Message::Ping(Default::default())).await
    }

    /// Sends a close frame with a code and a human-readable reason (best
    /// effort: the peer may already be gone). Reasons are cut to the 123 bytes
    /// a close frame allows.
    pub async fn close(&mut self, code: u16, reason: &str) {
        if self.send_close(code, reason).await {
            // Give the peer a moment to read the close frame before the TCP close.
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), async {
                while let Some(Ok(_)) = self.socket.recv().await {}
            })
            .await;
        }
    }

    /// Sends a close frame without waiting for the peer, for peers that are
    /// known to be unresponsive (a missed heartbeat).
    pub async fn abort(&mut self, code: u16, reason: &str) {
        let _ = self.send_close(code, reason).await;
    }

    async fn send_close(&mut self, code: u16, reason: &str) -> bool {
        let mut reason = reason.to_string();
        if reason.len() > 123 {
            let mut cut = 120;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
            reason.push_str("...");
        }
        let frame = Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }));
        // A peer that stopped reading can fill the TCP buffer; never wait on it long.
        matches!(
            tokio::time::timeout(
                std::time::Duration::from_millis(200),
                self.socket.send(frame)
            )
            .await,
            Ok(Ok(()))
        )
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }
}

fn classify(e: axum::Error) -> Frame {
    use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
    let inner = e.into_inner();
    match inner.downcast_ref::<WsError>() {
        Some(WsError::Capacity(CapacityError::MessageTooLong { .. })) => Frame::TooBig,
        Some(WsError::ConnectionClosed | WsError::AlreadyClosed) => Frame::Closed {
            code: None,
            reason: "connection closed".into(),
        },
        _ => Frame::Error(inner.to_string()),
    }
}
