//! [`Transport`]: JSON messages over the WebSocket to a master, with the
//! framing hidden. The one reader and writer of a master's socket on this
//! side: the client ([`Client`](crate::Client), over `/ws/client`) and the
//! worker (over `/ws/worker`) both speak through it, as the master's own
//! `server/src/net/connection.rs` does on its side.
//!
//! What it decides, once for both:
//! - **Messages**: one message is one JSON text frame (docs/PROTOCOL.md,
//!   Framing). A text frame that is not a message of the expected type is
//!   [`TransportError::Decode`]; the socket stays usable.
//! - **Binary frames** are not messages: the master never sends one, and
//!   it refuses them from its peers. One is [`TransportError::Binary`], never
//!   decoded; the socket stays usable, and the caller decides whether that
//!   is worth a warning or an error, as for an undecodable text frame.
//! - **Size**: one limit, [`MAX_MESSAGE_BYTES`], on a message and on a frame.
//!   Over it, [`TransportError::TooBig`]; the socket is then unusable.
//! - **Pings** are answered (tungstenite queues the pong and writes it on the
//!   next read or write, which is why a caller must keep a [`Transport::recv`]
//!   running: it is cancel-safe, for `select!`) and, like pongs, never
//!   surface; any frame counts as hearing from the master
//!   ([`Transport::last_heard`]).
//! - **Close**: a close frame from the master is answered and its code and
//!   reason returned ([`Received::Closed`]); a frame without a code reads as
//!   [`NO_STATUS`](crate::NO_STATUS) (1005). Closing from this side waits at
//!   most [`CLOSE_TIMEOUT`] for the master's answer.
//! - **Silence** (optional, [`Transport::set_silence_limit`]): a write the
//!   master does not take within the limit fails
//!   ([`TransportError::Stalled`]), and [`Transport::silent_for`] tells when
//!   nothing was heard for longer. A partition that swallows packets leaves
//!   a socket ESTABLISHED with no error for as long as TCP retransmits
//!   (minutes; for ever on an idle socket); this is how a caller notices.
//! - **TLS**: `wss://` URLs are opened with rustls and the configuration of
//!   [`tls_client_config`](crate::tls_client_config) (public web roots, or a
//!   `--ca-cert` file), made once by the caller and reused on reconnects.

use futures_util::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::error::CapacityError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

/// Largest message (and frame) accepted from the master: 1 GiB. The master
/// limits what it *reads* (`--max-message-bytes`, 17 MiB by default) but not
/// what it sends: a `snapshot` or `results` reply carries every job with its
/// best records, and a model round's `assign` carries the task's records so
/// far as its warm start, both of which outgrow tungstenite's defaults
/// (64 MiB a message, 16 MiB a frame) on big farms. A message over the limit
/// ends the connection, and a worker would only reconnect to be sent the
/// same `assign` again, so the limit is the larger of the two the client and
/// the worker had, not the default.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// How long closing waits for the master's side of the close handshake
/// (after its close frame, or ours).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Code and reason of the close frame the master sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseInfo {
    pub code: u16,
    pub reason: String,
}

impl fmt::Display for CloseInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reason.is_empty() {
            write!(f, "close code {}", self.code)
        } else {
            write!(f, "close code {}: {}", self.code, self.reason)
        }
    }
}

/// What [`Transport::recv`] read.
#[derive(Clone, Debug, PartialEq)]
pub enum Received<T> {
    Message(T),
    /// The connection ended: with the master's close frame, or `None` when
    /// the stream ended without one.
    Closed(Option<CloseInfo>),
}

/// What went wrong on the socket.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Opening the socket failed, or it broke (reset, I/O error).
    #[error("WebSocket error: {0}")]
    WebSocket(#[from] tungstenite::Error),
    /// TLS could not be set up for a `wss://` URL.
    #[error("TLS setup: {0}")]
    Tls(String),
    /// A message or frame over [`MAX_MESSAGE_BYTES`]; the socket is no
    /// longer usable.
    #[error("message over the size limit: {0}")]
    TooBig(CapacityError),
    /// A text frame that is not a message of the expected type. The socket
    /// is still usable.
    #[error("undecodable message from the master: {error}: {preview}")]
    Decode {
        error: serde_json::Error,
        /// The start of the frame, for the log.
        preview: String,
    },
    /// A binary frame: the protocol is JSON text. The socket is still usable.
    #[error("undecodable message from the master: binary frame (the protocol is JSON text)")]
    Binary,
    #[error("cannot encode message: {0}")]
    Encode(serde_json::Error),
    /// A write did not finish within the silence limit: the master takes
    /// nothing, so the connection is as good as lost.
    #[error("the master took nothing sent for {:.1} s: the connection is lost", .0.as_secs_f64())]
    Stalled(Duration),
}

impl TransportError {
    /// Whether the socket is still usable after this error.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, TransportError::Decode { .. } | TransportError::Binary)
    }

    /// The TLS failure behind this error, if it is one (an untrusted
    /// certificate, a master that does not speak TLS).
    pub fn tls_error(&self) -> Option<&rustls::Error> {
        match self {
            TransportError::WebSocket(tungstenite::Error::Io(e)) => {
                e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
            }
            _ => None,
        }
    }
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One WebSocket to a master, speaking whole JSON messages.
#[derive(Debug)]
pub struct Transport {
    ws: Socket,
    /// The master's close frame, once read (kept so that a `recv` cancelled
    /// while it waited for the TCP close still reports it).
    close: Option<CloseInfo>,
    /// When the last frame (of any kind) came from the master.
    last_heard: Instant,
    /// Silence longer than this is a lost connection; `None`: no limit.
    silence_limit: Option<Duration>,
}

impl Transport {
    /// Opens the WebSocket at `url` (the endpoint's full URL). `tls` is the
    /// configuration for a `wss://` URL (the public web roots when `None`);
    /// a `ws://` URL ignores it.
    pub async fn connect(
        url: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Transport, TransportError> {
        Self::connect_limited(url, tls, MAX_MESSAGE_BYTES).await
    }

    /// [`Transport::connect`] with another size limit (the tests' small one).
    pub(crate) async fn connect_limited(
        url: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        max_bytes: usize,
    ) -> Result<Transport, TransportError> {
        let secure = url
            .get(..6)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("wss://"));
        let connector = match (secure, tls) {
            (false, _) => Connector::Plain,
            (true, Some(config)) => Connector::Rustls(Arc::clone(config)),
            (true, None) => {
                Connector::Rustls(crate::tls_client_config(None).map_err(TransportError::Tls)?)
            }
        };
        let config = WebSocketConfig::default()
            .read_buffer_size(tunefleet_shared::protocol::WS_READ_BUFFER_BYTES)
            .max_message_size(Some(max_bytes))
            .max_frame_size(Some(max_bytes));
        // Messages are small and latency-sensitive (acks, assigns, replies): no Nagle.
        let (ws, _response) = tokio_tungstenite::connect_async_tls_with_config(
            url,
            Some(config),
            true,
            Some(connector),
        )
        .await?;
        Ok(Transport {
            ws,
            close: None,
            last_heard: Instant::now(),
            silence_limit: None,
        })
    }

    /// From now on, a write the master does not take within `limit` fails,
    /// and [`silence_deadline`](Self::silence_deadline) and
    /// [`silent_for`](Self::silent_for) measure the master's silence against it.
    pub fn set_silence_limit(&mut self, limit: Duration) {
        self.silence_limit = Some(limit);
    }

    pub fn silence_limit(&self) -> Option<Duration> {
        self.silence_limit
    }

    /// When the last frame of any kind (a ping or a pong included) came.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// When the master's silence becomes a lost connection, if there is a limit.
    pub fn silence_deadline(&self) -> Option<Instant> {
        self.silence_limit.map(|limit| self.last_heard + limit)
    }

    /// How long the master has been silent, once that is over the limit.
    pub fn silent_for(&self) -> Option<Duration> {
        let silent = self.last_heard.elapsed();
        self.silence_limit
            .filter(|limit| silent > *limit)
            .map(|_| silent)
    }

    /// `write`, within the silence limit when there is one.
    async fn limited(
        limit: Option<Duration>,
        write: impl std::future::Future<Output = Result<(), tungstenite::Error>>,
    ) -> Result<(), TransportError> {
        match limit {
            None => Ok(write.await?),
            Some(limit) => match tokio::time::timeout(limit, write).await {
                Ok(written) => Ok(written?),
                Err(_) => Err(TransportError::Stalled(limit)),
            },
        }
    }

    /// Sends one message as a JSON text frame and flushes it.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), TransportError> {
        let frame = encode(message)?;
        Self::limited(self.silence_limit, self.ws.send(frame)).await
    }

    /// Queues one message without sending it; [`flush`](Self::flush) sends
    /// what is queued in one write (a result and the request for the next
    /// job reach the master together).
    pub async fn feed<T: Serialize>(&mut self, message: &T) -> Result<(), TransportError> {
        let frame = encode(message)?;
        Self::limited(self.silence_limit, self.ws.feed(frame)).await
    }

    /// Sends what [`feed`](Self::feed) queued.
    pub async fn flush(&mut self) -> Result<(), TransportError> {
        Self::limited(self.silence_limit, self.ws.flush()).await
    }

    /// Sends a ping (the client's keep-alive); the pong only moves
    /// [`last_heard`](Self::last_heard).
    pub async fn ping(&mut self) -> Result<(), TransportError> {
        Self::limited(
            self.silence_limit,
            self.ws.send(Message::Ping(Default::default())),
        )
        .await
    }

    /// The next message from the master, or how the connection ended.
    /// Cancel-safe: the socket keeps partial frames, and a close frame read
    /// is kept until reported.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Received<T>, TransportError> {
        loop {
            if let Some(close) = self.close.clone() {
                self.finish_close().await;
                return Ok(Received::Closed(Some(close)));
            }
            let frame = match self.ws.next().await {
                None => return Ok(Received::Closed(None)),
                Some(Ok(frame)) => {
                    self.last_heard = Instant::now();
                    frame
                }
                Some(Err(
                    tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed,
                )) => return Ok(Received::Closed(None)),
                Some(Err(tungstenite::Error::Capacity(e))) => {
                    return Err(TransportError::TooBig(e))
                }
                Some(Err(e)) => return Err(e.into()),
            };
            match frame {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str())
                        .map(Received::Message)
                        .map_err(|error| TransportError::Decode {
                            error,
                            preview: preview(&text),
                        });
                }
                Message::Binary(_) => return Err(TransportError::Binary),
                Message::Close(frame) => {
                    self.close = Some(match frame {
                        Some(f) => CloseInfo {
                            code: u16::from(f.code),
                            reason: f.reason.to_string(),
                        },
                        None => CloseInfo {
                            code: u16::from(CloseCode::Status),
                            reason: String::new(),
                        },
                    });
                }
                // tungstenite queued the pong; the next read writes it.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// After the master's close frame: reading on writes tungstenite's close
    /// answer (RFC 6455 §5.5.1); the stream then ends when the master drops
    /// the TCP connection. A master that never does must not hang the caller.
    async fn finish_close(&mut self) {
        let drain = async { while let Some(Ok(_)) = self.ws.next().await {} };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, drain).await;
    }

    /// The close frame the master sent, once [`recv`](Self::recv) read it.
    pub fn close_info(&self) -> Option<&CloseInfo> {
        self.close.as_ref()
    }

    /// Closes with a normal close frame and `reason`, and waits for the
    /// master's side of the handshake: never longer than [`CLOSE_TIMEOUT`]
    /// in all, even when the master is unreachable. An error only when the
    /// close frame could not be written (a socket already closed is fine).
    pub async fn close(mut self, reason: &str) -> Result<(), TransportError> {
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: reason.into(),
        };
        let handshake = async {
            match self.ws.close(Some(frame)).await {
                Ok(()) => {}
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Ok(())
                }
                Err(e) => return Err(TransportError::from(e)),
            }
            while let Some(Ok(_)) = self.ws.next().await {}
            Ok(())
        };
        tokio::time::timeout(CLOSE_TIMEOUT, handshake)
            .await
            .unwrap_or(Ok(()))
    }
}

fn encode<T: Serialize>(message: &T) -> Result<Message, TransportError> {
    serde_json::to_string(message)
        .map(Message::text)
        .map_err(TransportError::Encode)
}

/// The start of an unparseable frame, for the log.
fn preview(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
