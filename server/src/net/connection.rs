//! `Connection`: JSON messages over one WebSocket, with the framing hidden.
//!
//! Handlers see [`Frame`]s that already say what happened (a text message, a
//! close with its code, an oversize message) instead of tungstenite's error
//! variety, and send typed messages instead of building frames.

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame as WsFrame};
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message, Utf8Bytes};

use super::upgrade::Socket;
use tunefleet_shared::protocol::close_code;

/// Messages longer than this go out as fragments this long (RFC 6455 §5.4),
/// so the socket's write buffer never grows past one fragment: tungstenite
/// keeps the largest capacity it ever needed for the life of the connection.
pub(super) const FRAGMENT_BYTES: usize = 16 * 1024;

/// Why a send failed; the connection is no longer usable.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot serialise the message: {0}")]
    Serialise(#[from] serde_json::Error),
    #[error(transparent)]
    Socket(#[from] WsError),
}

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
    socket: Socket,
    max_message_bytes: usize,
    /// When a frame of any kind last arrived.
    pub last_seen: Instant,
}

impl Connection {
    pub fn new(socket: Socket, max_message_bytes: usize) -> Self {
        Connection {
            socket,
            max_message_bytes,
            last_seen: Instant::now(),
        }
    }

    /// Next frame. Cancel-safe (the socket buffers partial frames).
    pub async fn recv(&mut self) -> Frame {
        let frame = match self.socket.next().await {
            None => Frame::Closed {
                code: None,
                reason: "connection ended".into(),
            },
            Some(Ok(Message::Text(text))) => Frame::Text(text.to_string()),
            Some(Ok(Message::Binary(_))) => Frame::Binary,
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => Frame::Control,
            Some(Ok(Message::Close(frame))) => {
                self.answer_close().await;
                Frame::Closed {
                    code: frame.as_ref().map(|f| u16::from(f.code)),
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
        let _ = tokio::time::timeout(Duration::from_millis(200), self.socket.flush()).await;
    }

    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), SendError> {
        let text = serde_json::to_string(msg)?;
        self.send_text(text.into()).await
    }

    /// Sends one text message; shared text (an event for every subscriber)
    /// is not copied until the socket's buffer.
    pub async fn send_text(&mut self, text: Utf8Bytes) -> Result<(), SendError> {
        if text.len() <= FRAGMENT_BYTES {
            return Ok(self.socket.send(Message::Text(text)).await?);
        }
        let bytes = Bytes::from(text);
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + FRAGMENT_BYTES).min(bytes.len());
            let opcode = if start == 0 {
                OpCode::Data(Data::Text)
            } else {
                OpCode::Data(Data::Continue)
            };
            let fragment = WsFrame::message(bytes.slice(start..end), opcode, end == bytes.len());
            self.socket.send(Message::Frame(fragment)).await?;
            start = end;
        }
        Ok(())
    }

    /// Queues one message without flushing; [`Connection::flush`] sends what
    /// is queued, in one write when it fits the socket.
    pub async fn feed<T: Serialize>(&mut self, msg: &T) -> Result<(), SendError> {
        let text = serde_json::to_string(msg)?;
        self.feed_text(text.into()).await
    }

    /// Queues one text message without flushing; [`Connection::flush`]
    /// sends what is queued. A message that needs fragments is sent at once.
    pub async fn feed_text(&mut self, text: Utf8Bytes) -> Result<(), SendError> {
        if text.len() <= FRAGMENT_BYTES {
            return Ok(self.socket.feed(Message::Text(text)).await?);
        }
        self.send_text(text).await
    }

    pub async fn flush(&mut self) -> Result<(), SendError> {
        Ok(self.socket.flush().await?)
    }

    pub async fn ping(&mut self) -> Result<(), SendError> {
        Ok(self.socket.send(Message::Ping(Bytes::new())).await?)
    }

    /// Sends a close frame with a code and a human-readable reason (best
    /// effort: the peer may already be gone). Reasons are cut to the 123 bytes
    /// a close frame allows.
    pub async fn close(&mut self, code: u16, reason: &str) {
        if self.send_close(code, reason).await {
            // Give the peer a moment to read the close frame before the TCP close.
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), async {
                while let Some(Ok(_)) = self.socket.next().await {}
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
            code: CloseCode::from(code),
            reason: reason.into(),
        }));
        // A peer that stopped reading can fill the TCP buffer; never wait on it long.
        matches!(
            tokio::time::timeout(Duration::from_millis(200), self.socket.send(frame)).await,
            Ok(Ok(()))
        )
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// A peer's first message as text (`what`: "hello request", "register
    /// message"). Closes the socket with the reason when none comes within
    /// `timeout`, it is too big, or it is not text; `None` then, and when
    /// the peer went away.
    pub async fn first_text(&mut self, timeout: Duration, what: &str) -> Option<String> {
        let Ok(frame) = tokio::time::timeout(timeout, self.recv()).await else {
            let reason = format!("no {what} within {} s", timeout.as_secs());
            self.close(close_code::HANDSHAKE, &reason).await;
            return None;
        };
        match frame {
            Frame::Text(text) => Some(text),
            Frame::TooBig => {
                self.close(close_code::TOO_BIG, &format!("{what} too big"))
                    .await;
                None
            }
            Frame::Closed { .. } | Frame::Error(_) => None,
            Frame::Binary | Frame::Control => {
                let reason = format!("first message must be a JSON {what}");
                self.close(close_code::HANDSHAKE, &reason).await;
                None
            }
        }
    }
}

fn classify(e: WsError) -> Frame {
    use tokio_tungstenite::tungstenite::error::CapacityError;
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => Frame::TooBig,
        WsError::ConnectionClosed | WsError::AlreadyClosed => Frame::Closed {
            code: None,
            reason: "connection closed".into(),
        },
        other => Frame::Error(other.to_string()),
    }
}
