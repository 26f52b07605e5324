//! The Rust client of a tunefleet master: one WebSocket to `<base>/ws/client`.
//!
//! A crate of its own (`tunefleet-client`) so that a script author's
//! `cargo add tunefleet-client` builds the client without the master's
//! server and database stacks (no axum, no rusqlite); the CLI (through
//! `tunefleet_server::client`), the worker (its [`Transport`] and TLS set-up)
//! and the tests use this one.
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
pub mod transport;

use errors::{connect_error, fmt_duration, summarize, transport_error, unexpected};
pub use errors::{describe_tls_error, endpoint_url, error_code_name, ClientError};
pub use subscription::Update;
pub use tls::{tls_client_config, ConnectOptions};
pub use transport::{
    CloseInfo, Received, Transport, TransportError, CLOSE_TIMEOUT, MAX_MESSAGE_BYTES,
};

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;
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

/// Close code reported when a close frame carries no code (RFC 6455 §7.1.5).
pub const NO_STATUS: u16 = 1005;

/// The identification sent in `hello`.
pub fn client_name() -> String {
    format!("tunefleet-cli/{}", env!("CARGO_PKG_VERSION"))
}

/// A connection to the master's client endpoint, after a successful `hello`.
pub struct Client {
    transport: Transport,
    url: String,
    next_id: u64,
    /// Snapshots and events read while waiting for a reply.
    pending: VecDeque<ServerMessage>,
    role: Role,
    server_version: String,
    request_timeout: Duration,
    keepalive: Duration,
    /// When the last keep-alive ping went out; it is unanswered while
    /// nothing was heard since.
    pinged_at: Option<Instant>,
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
        let tls = if url.starts_with("wss://") {
            let config = tls_client_config(options.ca_cert.as_deref()).map_err(|reason| {
                ClientError::Tls {
                    url: url.clone(),
                    reason,
                }
            })?;
            Some(config)
        } else {
            None
        };
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            Self::connect_inner(&url, token, tls.as_ref()),
        )
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
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Client, ClientError> {
        let transport = Transport::connect(url, tls)
            .await
            .map_err(|e| connect_error(url, e))?;
        let mut client = Client {
            transport,
            url: url.to_owned(),
            next_id: 1,
            pending: VecDeque::new(),
            role: Role::Read,
            server_version: String::new(),
            request_timeout: CONNECT_TIMEOUT,
            keepalive: KEEPALIVE,
            pinged_at: None,
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
        // The deadline covers sending too: a master that stopped reading
        // (stuck, or cut off once the socket's buffers are full) would
        // otherwise hold the send, which no reply deadline covers, for ever.
        let deadline = Instant::now() + self.request_timeout;
        let request = ClientRequest { id, command };
        match tokio::time::timeout_at(deadline, self.transport.send(&request)).await {
            Ok(sent) => sent.map_err(transport_error)?,
            Err(_) => {
                return Err(ClientError::Transport(format!(
                    "the master took no `{what}` request within {}",
                    fmt_duration(self.request_timeout)
                )))
            }
        }
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
    /// master's answer: at most [`CLOSE_TIMEOUT`]).
    pub async fn close(self) -> Result<(), ClientError> {
        self.transport.close("bye").await.map_err(transport_error)
    }

    /// Reads the next protocol message. `Ok(None)` at end of stream without a
    /// close frame; a close frame is [`ClientError::Closed`]. Pings are
    /// answered by the transport; after [`Client::set_keepalive`] of silence
    /// (any frame, pongs included, breaks it) this pings, and a second silent
    /// period is a lost connection.
    async fn recv(
        &mut self,
        deadline: Option<(Instant, &str)>,
    ) -> Result<Option<ServerMessage>, ClientError> {
        let called = Instant::now();
        loop {
            let heard = self.transport.last_heard();
            let pinged = self.pinged_at.filter(|at| *at > heard);
            let quiet_since = called.max(heard).max(pinged.unwrap_or(heard));
            let mut wake = quiet_since + self.keepalive;
            if let Some((at, what)) = deadline {
                if Instant::now() >= at {
                    return Err(ClientError::Timeout {
                        what: what.to_owned(),
                        after: self.request_timeout,
                    });
                }
                wake = wake.min(at);
            }
            let received = match tokio::time::timeout_at(wake, self.transport.recv()).await {
                Ok(received) => received,
                Err(_) => {
                    if deadline.is_some_and(|(at, _)| Instant::now() >= at) {
                        continue; // reported at the top of the loop
                    }
                    if self.transport.last_heard() > heard {
                        continue; // a ping or pong came: the silence starts again
                    }
                    if pinged.is_some() {
                        return Err(ClientError::Transport(format!(
                            "no answer from the master for {}",
                            fmt_duration(self.keepalive * 2)
                        )));
                    }
                    // A ping the master does not take is silence too.
                    match tokio::time::timeout(self.keepalive, self.transport.ping()).await {
                        Ok(pinged) => pinged.map_err(transport_error)?,
                        Err(_) => {
                            return Err(ClientError::Transport(format!(
                                "the master took nothing sent for {}",
                                fmt_duration(self.keepalive)
                            )))
                        }
                    }
                    self.pinged_at = Some(Instant::now());
                    continue;
                }
            };
            return match received {
                Ok(Received::Message(msg)) => Ok(Some(msg)),
                Ok(Received::Closed(None)) => Ok(None),
                Ok(Received::Closed(Some(CloseInfo { code, reason }))) => {
                    Err(ClientError::Closed { code, reason })
                }
                Err(e) => Err(transport_error(e)),
            };
        }
    }
}

/// A subscriber's mirror of the fleet: the reducer the dashboard uses too,
/// written once in `tunefleet_shared::fleet`.
pub use tunefleet_shared::fleet::{EventOutcome, Fleet as FleetView};

#[cfg(test)]
mod tests;
