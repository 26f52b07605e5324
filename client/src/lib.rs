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

mod errors;
#[cfg(feature = "logging")]
pub mod logging;
mod tls;

use errors::{connect_error, fmt_duration, summarize, transport_error, unexpected};
pub use errors::{describe_tls_error, endpoint_url, error_code_name, ClientError};
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
    close_code, ClientCommand, ClientRequest, ErrorCode, FleetEvent, FleetSnapshot, JobId, JobView,
    ReplyBody, Role, ServerMessage, StatusReport, SubmitReport, TokenInfo, PROTOCOL_VERSION,
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

/// One item of the subscription stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A full picture of the fleet. Sent after `subscribe`, and again whenever
    /// the master decides this subscriber fell behind: replace, don't merge.
    Snapshot(u64, FleetSnapshot),
    /// One change, numbered.
    Event(u64, FleetEvent),
}

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

    /// Submits one workload file's text; `filename` appears in the master's
    /// error messages.
    pub async fn submit(
        &mut self,
        yaml: impl Into<String>,
        filename: Option<&str>,
    ) -> Result<SubmitReport, ClientError> {
        self.submit_as(yaml, filename, false).await
    }

    /// [`Client::submit`]; with `fresh`, new jobs are tuned from scratch even
    /// when the master's tuning cache could answer or warm-start them.
    pub async fn submit_as(
        &mut self,
        yaml: impl Into<String>,
        filename: Option<&str>,
        fresh: bool,
    ) -> Result<SubmitReport, ClientError> {
        let command = ClientCommand::Submit {
            yaml: yaml.into(),
            filename: filename.map(str::to_owned),
            fresh,
        };
        match self.request(command).await? {
            ReplyBody::Submitted(report) => Ok(report),
            other => Err(unexpected("submitted", &other)),
        }
    }

    /// Job counts and worker numbers.
    pub async fn status(&mut self) -> Result<StatusReport, ClientError> {
        match self.request(ClientCommand::Status).await? {
            ReplyBody::Status(report) => Ok(report),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Full views of the given jobs (archived ones included), or of every
    /// job the master holds when `job_ids` is `None`.
    pub async fn results(
        &mut self,
        job_ids: Option<Vec<JobId>>,
    ) -> Result<Vec<JobView>, ClientError> {
        self.results_with(job_ids, false).await
    }

    /// [`Client::results`]; with `archived`, every job also brings the jobs
    /// archived by `--job-retention` (read from the master's database).
    pub async fn results_with(
        &mut self,
        job_ids: Option<Vec<JobId>>,
        archived: bool,
    ) -> Result<Vec<JobView>, ClientError> {
        match self
            .request(ClientCommand::Results { job_ids, archived })
            .await?
        {
            ReplyBody::Results { jobs } => Ok(jobs),
            other => Err(unexpected("results", &other)),
        }
    }

    /// Cancels a job (admin).
    pub async fn cancel(&mut self, job_id: &str) -> Result<(), ClientError> {
        let command = ClientCommand::Cancel {
            job_id: job_id.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::Cancelled { .. } => Ok(()),
            other => Err(unexpected("cancelled", &other)),
        }
    }

    /// Puts a failed or cancelled job back in the queue (admin).
    pub async fn retry(&mut self, job_id: &str) -> Result<(), ClientError> {
        let command = ClientCommand::Retry {
            job_id: job_id.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::Retried { .. } => Ok(()),
            other => Err(unexpected("retried", &other)),
        }
    }

    /// Creates a named admin token (needs the master's own admin token);
    /// returns its text, which the master does not keep.
    pub async fn create_token(&mut self, name: &str) -> Result<String, ClientError> {
        let command = ClientCommand::CreateToken {
            name: name.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::TokenCreated { token, .. } => Ok(token.0),
            other => Err(unexpected("token_created", &other)),
        }
    }

    /// Revokes a named admin token (needs the master's own admin token).
    pub async fn revoke_token(&mut self, name: &str) -> Result<(), ClientError> {
        let command = ClientCommand::RevokeToken {
            name: name.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::TokenRevoked { .. } => Ok(()),
            other => Err(unexpected("token_revoked", &other)),
        }
    }

    /// The named admin tokens (names and creation times).
    pub async fn list_tokens(&mut self) -> Result<Vec<TokenInfo>, ClientError> {
        match self.request(ClientCommand::ListTokens).await? {
            ReplyBody::Tokens { tokens } => Ok(tokens),
            other => Err(unexpected("tokens", &other)),
        }
    }

    /// Imports records to seed later jobs of the same workloads (admin; see
    /// `tunefleet_shared::import`).
    pub async fn import(
        &mut self,
        workloads: Vec<tunefleet_shared::import::ImportedWorkload>,
        keys: Vec<tunefleet_shared::import::WorkloadKey>,
    ) -> Result<tunefleet_shared::import::ImportReport, ClientError> {
        match self
            .request(ClientCommand::Import { workloads, keys })
            .await?
        {
            ReplyBody::Imported(report) => Ok(report),
            other => Err(unexpected("imported", &other)),
        }
    }

    /// Asks the master to stop gracefully, as SIGTERM does (admin). Returns
    /// once the master has confirmed; it then closes every connection, this
    /// one included.
    pub async fn shutdown_master(&mut self) -> Result<(), ClientError> {
        match self.request(ClientCommand::Shutdown).await? {
            ReplyBody::ShuttingDown => Ok(()),
            other => Err(unexpected("shutting_down", &other)),
        }
    }

    /// Subscribes and returns the snapshot that follows the `subscribed` reply,
    /// with its seq. Updates read before that snapshot are stale and dropped.
    /// Every change of a job comes as a whole `job_updated` view.
    pub async fn subscribe(&mut self) -> Result<(u64, FleetSnapshot), ClientError> {
        self.subscribe_with(false).await
    }

    /// [`Client::subscribe`], for a [`FleetView`] mirror: a job the mirror
    /// already has is updated by `job_changed` deltas (no name, workload or
    /// creation time), and a worker by `worker_changed` (its job and count),
    /// which [`FleetView::apply_event`] applies. A master
    /// from before deltas ignores the request and sends whole views.
    pub async fn subscribe_with_deltas(&mut self) -> Result<(u64, FleetSnapshot), ClientError> {
        self.subscribe_with(true).await
    }

    async fn subscribe_with(&mut self, deltas: bool) -> Result<(u64, FleetSnapshot), ClientError> {
        match self.request(ClientCommand::Subscribe { deltas }).await? {
            ReplyBody::Subscribed => {}
            other => return Err(unexpected("subscribed", &other)),
        }
        let mut snapshot = None;
        while let Some(msg) = self.pending.pop_front() {
            if let ServerMessage::Snapshot { seq, snapshot: s } = msg {
                snapshot = Some((seq, s));
                break;
            }
        }
        if let Some(found) = snapshot {
            return Ok(found);
        }
        let deadline = Instant::now() + self.request_timeout;
        loop {
            match self.recv(Some((deadline, "subscribe"))).await? {
                Some(ServerMessage::Snapshot { seq, snapshot }) => return Ok((seq, snapshot)),
                Some(ServerMessage::Error { code, message, .. }) => {
                    return Err(ClientError::Server { code, message })
                }
                Some(ServerMessage::Shutdown { reason }) => {
                    return Err(ClientError::Shutdown { reason })
                }
                Some(other) => {
                    tracing::debug!(got = %summarize(&other), "ignoring message before snapshot")
                }
                None => {
                    return Err(ClientError::Transport(
                        "the master closed the connection before sending the snapshot".into(),
                    ))
                }
            }
        }
    }

    /// The next snapshot or event of the subscription. `Ok(None)` when the
    /// master closed the connection normally; errors for everything else,
    /// including a dead connection (see [`KEEPALIVE`]). Waits without limit
    /// otherwise. Cancel-safe: dropping the future loses no message.
    pub async fn next_update(&mut self) -> Result<Option<Update>, ClientError> {
        loop {
            let msg = match self.pending.pop_front() {
                Some(msg) => msg,
                None => match self.recv(None).await {
                    Ok(Some(msg)) => msg,
                    Ok(None) => return Ok(None),
                    Err(ClientError::Closed { code, .. })
                        if code == close_code::NORMAL || code == NO_STATUS =>
                    {
                        return Ok(None)
                    }
                    Err(e) => return Err(e),
                },
            };
            match msg {
                ServerMessage::Snapshot { seq, snapshot } => {
                    return Ok(Some(Update::Snapshot(seq, snapshot)))
                }
                ServerMessage::Event { seq, event } => return Ok(Some(Update::Event(seq, event))),
                ServerMessage::Shutdown { reason } => return Err(ClientError::Shutdown { reason }),
                ServerMessage::Error {
                    id: None,
                    code,
                    message,
                } => return Err(ClientError::Server { code, message }),
                other => {
                    tracing::debug!(got = %summarize(&other), "ignoring unsolicited message")
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
