//! The Rust client of a tunefleet master: one WebSocket to `<base>/ws/client`.
//!
//! A crate of its own (`tunefleet-client`) so that a script author's
//! `cargo add tunefleet-client` builds the client without the master's
//! server and database stacks (no axum, no rusqlite); the CLI (through
//! `tunefleet_server::client`), the worker (its TLS set-up) and the tests use
//! this one.
//!
//! Shaped like mini-redis's client: [`Client::connect`] performs the handshake,
//! [`Client::request`] sends one [`ClientCommand`] and waits for the reply that
//! carries its `id`, and typed helpers ([`Client::submit`], [`Client::status`],
//! ...) wrap `request` so callers never match on [`ReplyBody`] themselves.
//!
//! # Why replies and events share one reader
//! A subscribed socket carries two interleaved streams: replies to our requests
//! and the pushed snapshot/event stream. The client is single-task (no
//! background reader), so whoever reads the socket sees both. `request` keeps
//! every snapshot/event it reads while waiting for its reply in a queue, and
//! [`Client::next_update`] drains that queue before reading the socket again;
//! no event is lost or reordered by issuing a request on a subscribed socket.
//!
//! # Why the client pings
//! `next_update` may legitimately wait hours for the next event. A half-open
//! TCP connection (master host rebooted, NAT dropped the mapping) would make it
//! wait forever, so after [`KEEPALIVE`] of silence the client sends a ping and
//! treats a second silent period as a lost connection, which `watch` answers by
//! reconnecting.
//!
//! # Secrets
//! The token is sent once, in `hello`, and is not stored in the [`Client`]; no
//! error or log line produced here contains it.
//!
//! # TLS
//! `wss://` (or `https://`) URLs are opened with rustls. The master's
//! certificate must chain to the public web roots built in (Mozilla's list),
//! or, with [`ConnectOptions::ca_cert`] ([`Client::connect_with`]), to the CA
//! certificates in that PEM file. An untrusted certificate is a
//! [`ClientError::Tls`] that says how to fix it, and is not retryable.
//!
//! [`FleetView`] is the local mirror a subscriber keeps: it applies the
//! snapshot and the events and tells the caller when it missed events.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod commands;
mod errors;
#[cfg(feature = "logging")]
pub mod logging;
pub mod repo_files;
mod subscription;
mod tls;

use errors::{connect_error, fmt_duration, summarize, transport_error, unexpected};
pub use errors::{describe_tls_error, endpoint_url, error_code_name, ClientError};
pub use subscription::Update;
pub use tls::{tls_client_config, ConnectOptions};

use futures_util::{SinkExt, StreamExt};
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};
use tunefleet_shared::protocol::{
    ClientCommand, ClientRequest, ErrorCode, ReplyBody, Role, ServerMessage, PROTOCOL_VERSION,
};

/// The path of the client endpoint, appended to the `--server` base URL.
pub const CLIENT_PATH: &str = "/ws/client";

/// How long [`Client::connect`] may take, TCP + WebSocket + `hello`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default limit on waiting for one reply (a large submission is parsed and
/// stored before the master answers, hence generous).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Silence after which the client pings; a second silent period of the same
/// length means the connection is dead.
pub const KEEPALIVE: Duration = Duration::from_secs(20);

/// Largest message accepted from the master. Snapshots and results carry every
/// job with its best records, which outgrows tungstenite's 64 MiB default on
/// big farms.
const MAX_MESSAGE: usize = 1 << 30;

/// Close code reported when a close frame carries no code (RFC 6455 §7.1.5).
pub const NO_STATUS: u16 = 1005;

/// The identification sent in `hello`.
pub fn client_name() -> String {
    format!("tunefleet-cli/{}", env!("CARGO_PKG_VERSION"))
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A connection to the master's client endpoint, after a successful `hello`.
pub struct Client {
    ws: Socket,
    url: String,
    next_id: u64,
    /// Snapshots and events read while waiting for a reply.
    pending: VecDeque<ServerMessage>,
    role: Role,
    server_version: String,
    request_timeout: Duration,
    keepalive: Duration,
    ping_outstanding: bool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("role", &self.role)
            .field("server_version", &self.server_version)
            .field("next_id", &self.next_id)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `server` (a base URL such as `ws://127.0.0.1:18871`, or the
    /// full `.../ws/client` URL) and performs the `hello` handshake.
    pub async fn connect(server: &str, token: Option<&str>) -> Result<Client, ClientError> {
        Self::connect_with(server, token, &ConnectOptions::default()).await
    }

    /// [`Client::connect`] with options (a custom CA for `wss://`).
    pub async fn connect_with(
        server: &str,
        token: Option<&str>,
        options: &ConnectOptions,
    ) -> Result<Client, ClientError> {
        let url = endpoint_url(server)?;
        let connector = if url.starts_with("wss://") {
            let config = tls_client_config(options.ca_cert.as_deref()).map_err(|reason| {
                ClientError::Tls {
                    url: url.clone(),
                    reason,
                }
            })?;
            Connector::Rustls(config)
        } else {
            Connector::Plain
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, Self::connect_inner(&url, token, connector))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(ClientError::Connect {
                url,
                reason: format!("timed out after {} s", CONNECT_TIMEOUT.as_secs()),
            }),
        }
    }

    async fn connect_inner(
        url: &str,
        token: Option<&str>,
        connector: Connector,
    ) -> Result<Client, ClientError> {
        let config = WebSocketConfig::default()
            .read_buffer_size(tunefleet_shared::protocol::WS_READ_BUFFER_BYTES)
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (ws, _response) = tokio_tungstenite::connect_async_tls_with_config(
            url,
            Some(config),
            true,
            Some(connector),
        )
        .await
        .map_err(|e| connect_error(url, e))?;
        let mut client = Client {
            ws,
            url: url.to_owned(),
            next_id: 1,
            pending: VecDeque::new(),
            role: Role::Read,
            server_version: String::new(),
            request_timeout: CONNECT_TIMEOUT,
            keepalive: KEEPALIVE,
            ping_outstanding: false,
        };
        let hello = ClientCommand::Hello {
            protocol: PROTOCOL_VERSION,
            token: token.map(str::to_owned),
            client: Some(client_name()),
        };
        match client.request(hello).await? {
            ReplyBody::Welcome {
                server_version,
                protocol,
                role,
            } => {
                if protocol != PROTOCOL_VERSION {
                    return Err(ClientError::Server {
                        code: ErrorCode::ProtocolMismatch,
                        message: format!("master {server_version} speaks protocol {protocol}"),
                    });
                }
                client.role = role;
                client.server_version = server_version;
                client.request_timeout = DEFAULT_REQUEST_TIMEOUT;
                tracing::debug!(url, ?role, "connected to master");
                Ok(client)
            }
            other => Err(unexpected("welcome", &other)),
        }
    }

    /// The role the master granted (admin with a valid token, read otherwise).
    pub fn role(&self) -> Role {
        self.role
    }

    /// The master's version string from `welcome`.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// The endpoint URL this client is connected to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Limit on waiting for one reply (default [`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.request_timeout = timeout;
    }

    /// Silence before pinging, and after an unanswered ping before giving up
    /// (default [`KEEPALIVE`]).
    pub fn set_keepalive(&mut self, keepalive: Duration) {
        self.keepalive = keepalive.max(Duration::from_millis(10));
    }

    /// Sends `command` and waits for its reply. Snapshots and events read in
    /// the meantime are kept for [`Client::next_update`].
    pub async fn request(&mut self, command: ClientCommand) -> Result<ReplyBody, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let what = command.name();
        let text = serde_json::to_string(&ClientRequest { id, command })
            .map_err(|e| ClientError::Protocol(format!("cannot encode request: {e}")))?;
        self.ws
            .send(Message::text(text))
            .await
            .map_err(transport_error)?;
        let deadline = Instant::now() + self.request_timeout;
        loop {
            let msg = match self.recv(Some((deadline, what))).await? {
                Some(msg) => msg,
                None => {
                    return Err(ClientError::Transport(
                        "the master closed the connection before replying".into(),
                    ))
                }
            };
            match msg {
                ServerMessage::Reply { id: got, body } if got == id => return Ok(body),
                ServerMessage::Error {
                    id: Some(got),
                    code,
                    message,
                } if got == id => return Err(ClientError::Server { code, message }),
                // An error not tied to a request concerns the connection itself.
                ServerMessage::Error {
                    id: None,
                    code,
                    message,
                } => return Err(ClientError::Server { code, message }),
                ServerMessage::Shutdown { reason } => return Err(ClientError::Shutdown { reason }),
                msg @ (ServerMessage::Snapshot { .. } | ServerMessage::Event { .. }) => {
                    self.pending.push_back(msg)
                }
                other => {
                    tracing::debug!(expected = id, got = %summarize(&other), "ignoring stale reply")
                }
            }
        }
    }

    /// Closes the connection politely (close frame, then wait briefly for the
    /// master's answer).
    pub async fn close(mut self) -> Result<(), ClientError> {
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        };
        match self.ws.close(Some(frame)).await {
            Ok(()) => {}
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                return Ok(())
            }
            Err(e) => return Err(transport_error(e)),
        }
        let drain = async { while let Some(Ok(_)) = self.ws.next().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        Ok(())
    }

    /// Reads the next protocol message. `Ok(None)` at end of stream; control
    /// frames are handled here (tungstenite answers pings itself).
    async fn recv(
        &mut self,
        deadline: Option<(Instant, &str)>,
    ) -> Result<Option<ServerMessage>, ClientError> {
        loop {
            let mut wait = self.keepalive;
            if let Some((at, what)) = deadline {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ClientError::Timeout {
                        what: what.to_owned(),
                        after: self.request_timeout,
                    });
                }
                wait = wait.min(left);
            }
            let frame = match tokio::time::timeout(wait, self.ws.next()).await {
                Ok(frame) => frame,
                Err(_) => {
                    if deadline.is_some_and(|(at, _)| Instant::now() >= at) {
                        continue; // reported at the top of the loop
                    }
                    if self.ping_outstanding {
                        return Err(ClientError::Transport(format!(
                            "no answer from the master for {}",
                            fmt_duration(self.keepalive * 2)
                        )));
                    }
                    self.ws
                        .send(Message::Ping(Default::default()))
                        .await
                        .map_err(transport_error)?;
                    self.ping_outstanding = true;
                    continue;
                }
            };
            let msg = match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(transport_error(e)),
                Some(Ok(msg)) => msg,
            };
            self.ping_outstanding = false;
            let text = match &msg {
                Message::Text(text) => text.as_str(),
                Message::Binary(bytes) => std::str::from_utf8(bytes).map_err(|_| {
                    ClientError::Protocol("binary frame that is not UTF-8 JSON".into())
                })?,
                Message::Close(frame) => {
                    let (code, reason) = match frame {
                        Some(f) => (u16::from(f.code), f.reason.as_str().to_owned()),
                        None => (NO_STATUS, String::new()),
                    };
                    return Err(ClientError::Closed { code, reason });
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            };
            return serde_json::from_str::<ServerMessage>(text)
                .map(Some)
                .map_err(|e| ClientError::Protocol(e.to_string()));
        }
    }
}

/// A subscriber's mirror of the fleet: the reducer the dashboard uses too,
/// written once in `tunefleet_shared::fleet`.
pub use tunefleet_shared::fleet::{EventOutcome, Fleet as FleetView};

#[cfg(test)]
mod tests;
