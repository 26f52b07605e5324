//! Message framing for the worker's WebSocket to the master.
//!
//! The session logic wants to think in [`WorkerMessage`]s and
//! [`MasterMessage`]s, not in WebSocket frames. [`Connection`] (in the spirit
//! of mini-redis's `Connection`) is the one place that knows that each message
//! is one JSON text frame, that ping/pong frames are transport noise, and how a
//! close frame is reported. Keeping this out of the session loop means the loop
//! reads like the protocol description in `tunefleet_shared::protocol`.
//!
//! Keep-alive: tungstenite answers the master's pings with pongs only while the
//! stream is being read or written, so the session must keep a
//! [`Connection::recv`] call in its `select!` at all times, also while a job runs.
//! `recv` is cancel-safe (the stream keeps its own buffer), which is what makes
//! that `select!` correct.
//!
//! TLS: `wss://` URLs are opened with rustls, trusting the public web roots or,
//! with `--ca-cert`, only the given CA ([`tls_connector`]).
//!
//! Silence: a partition that swallows packets leaves a socket ESTABLISHED
//! with no error for as long as TCP keeps retransmitting (minutes; for ever
//! on an idle socket), while the master dropped this worker long ago. So the
//! connection notes when the master was last heard (any frame, its pings
//! included: [`Connection::silence_deadline`]), and a write the master does
//! not take within the same limit fails ([`ConnectionError::Stalled`]). The
//! session treats either as a lost connection.

use futures_util::{SinkExt, StreamExt};
use std::fmt;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};
use tunefleet_shared::protocol::{MasterMessage, WorkerMessage};

/// How long closing waits for the master's side of the close handshake.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

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

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("WebSocket error: {0}")]
    WebSocket(#[from] tungstenite::Error),
    /// A frame that is not a message we understand. The connection is still
    /// usable; the caller decides whether to ignore it.
    #[error("undecodable message from the master: {0}")]
    Decode(String),
    #[error("cannot encode message: {0}")]
    Encode(#[from] serde_json::Error),
    /// A write did not finish within the silence limit: the master takes
    /// nothing, so the connection is as good as lost.
    #[error("the master took nothing sent for {:.1} s: the connection is lost", .0.as_secs_f64())]
    Stalled(Duration),
}

impl ConnectionError {
    /// Whether the socket is still usable after this error.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, ConnectionError::Decode(_))
    }

    /// The TLS failure behind this error, if it is one (an untrusted
    /// certificate, a master that does not speak TLS).
    pub fn tls_error(&self) -> Option<&rustls::Error> {
        match self {
            ConnectionError::WebSocket(tungstenite::Error::Io(e)) => {
                e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
            }
            _ => None,
        }
    }
}

/// The connector for `wss://`: trusts the certificates in `ca_cert` (PEM) if
/// given, else the public web roots (Mozilla's list, built in). Errors name
/// the file and what is wrong with it.
pub fn tls_connector(ca_cert: Option<&Path>) -> Result<Connector, String> {
    // One TLS set-up for every client of a master: the client crate's.
    tunefleet_client::tls_client_config(ca_cert).map(Connector::Rustls)
}

/// A worker's WebSocket to the master, speaking whole protocol messages.
pub struct Connection {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    close: Option<CloseInfo>,
    /// When the last frame (of any kind) came from the master.
    last_heard: Instant,
    /// Silence longer than this is a lost connection; `None`: no limit.
    silence_limit: Option<Duration>,
}

impl Connection {
    /// Opens the WebSocket (`url` already ends in `/ws/worker`); `tls` is
    /// used for `wss://` URLs (see [`tls_connector`]).
    pub async fn connect(
        url: &str,
        tls: Option<&Connector>,
    ) -> Result<Connection, ConnectionError> {
        // Messages are small and latency-sensitive (acks, assigns): no Nagle.
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .read_buffer_size(tunefleet_shared::protocol::WS_READ_BUFFER_BYTES);
        let (ws, _response) =
            tokio_tungstenite::connect_async_tls_with_config(url, Some(config), true, tls.cloned())
                .await?;
        Ok(Connection {
            ws,
            close: None,
            last_heard: Instant::now(),
            silence_limit: None,
        })
    }

    /// From now on, silence from the master longer than `limit` ends the
    /// connection (see the module docs).
    pub fn set_silence_limit(&mut self, limit: Duration) {
        self.silence_limit = Some(limit);
    }

    pub fn silence_limit(&self) -> Option<Duration> {
        self.silence_limit
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
    ) -> Result<(), ConnectionError> {
        match limit {
            None => Ok(write.await?),
            Some(limit) => match tokio::time::timeout(limit, write).await {
                Ok(written) => Ok(written?),
                Err(_) => Err(ConnectionError::Stalled(limit)),
            },
        }
    }

    /// Sends one message as a JSON text frame and flushes it.
    pub async fn send(&mut self, message: &WorkerMessage) -> Result<(), ConnectionError> {
        let text = serde_json::to_string(message)?;
        Self::limited(self.silence_limit, self.ws.send(Message::text(text))).await
    }

    /// Queues one message without sending it; [`flush`](Self::flush) sends
    /// what is queued in one write (a result and the request for the next
    /// job reach the master together).
    pub async fn feed(&mut self, message: &WorkerMessage) -> Result<(), ConnectionError> {
        let text = serde_json::to_string(message)?;
        Self::limited(self.silence_limit, self.ws.feed(Message::text(text))).await
    }

    /// Sends what [`feed`](Self::feed) queued.
    pub async fn flush(&mut self) -> Result<(), ConnectionError> {
        Self::limited(self.silence_limit, self.ws.flush()).await
    }

    /// The next message from the master; `Ok(None)` once the socket is closed
    /// (then [`close_info`](Self::close_info) tells how, if the master said).
    pub async fn recv(&mut self) -> Result<Option<MasterMessage>, ConnectionError> {
        loop {
            let frame = match self.ws.next().await {
                None => return Ok(None),
                Some(Ok(frame)) => {
                    self.last_heard = Instant::now();
                    frame
                }
                Some(Err(
                    tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed,
                )) => return Ok(None),
                Some(Err(e)) => return Err(e.into()),
            };
            match frame {
                Message::Text(text) => {
                    return serde_json::from_str(text.as_str())
                        .map(Some)
                        .map_err(|e| ConnectionError::Decode(format!("{e}: {}", preview(&text))));
                }
                Message::Binary(_) => {
                    return Err(ConnectionError::Decode(
                        "binary frame (the protocol is JSON text)".into(),
                    ))
                }
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
                    // Reading on sends tungstenite's close reply; the stream
                    // then ends when the master drops the TCP connection. A
                    // master that never does must not hang the worker.
                    let drain = async { while let Some(Ok(_)) = self.ws.next().await {} };
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, drain).await;
                    return Ok(None);
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }

    /// The close frame the master sent, once [`recv`](Self::recv) returned `Ok(None)`.
    pub fn close_info(&self) -> Option<&CloseInfo> {
        self.close.as_ref()
    }

    /// Closes with a normal close frame and waits briefly for the master's
    /// side of the handshake. Never takes longer than a couple of seconds, even
    /// when the master is unreachable.
    pub async fn close(mut self, reason: &str) {
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: reason.into(),
        };
        let handshake = async {
            if self.ws.close(Some(frame)).await.is_ok() {
                while let Some(Ok(_)) = self.ws.next().await {}
            }
        };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, handshake).await;
    }
}

/// The start of an unparseable frame, for the log.
fn preview(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
