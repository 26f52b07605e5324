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

#[cfg(feature = "logging")]
pub mod logging;

use futures_util::{SinkExt, StreamExt};
use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// Everything that can go wrong talking to the master. The `Display` text is
/// written for the person at the terminal.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--server` is not something we can connect to.
    #[error("invalid server URL `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    /// TCP or WebSocket connection could not be established.
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    /// TLS could not be set up: an unreadable CA file, or a master whose
    /// certificate is not trusted.
    #[error("TLS error connecting to {url}: {reason}")]
    Tls { url: String, reason: String },
    /// The master answered a request with an error.
    #[error("{}", describe_server_error(*.code, .message))]
    Server { code: ErrorCode, message: String },
    /// The master closed the socket with a close frame.
    #[error("{}", describe_close(*.code, .reason))]
    Closed { code: u16, reason: String },
    /// The master announced that it is shutting down.
    #[error("{}", describe_shutdown(.reason))]
    Shutdown { reason: String },
    /// The connection broke (reset, dead peer, I/O error).
    #[error("connection to the master lost: {0}")]
    Transport(String),
    /// No reply within the request timeout.
    #[error("no reply from the master to `{what}` within {}", fmt_duration(*.after))]
    Timeout { what: String, after: Duration },
    /// The master sent something that is not a valid message for this endpoint.
    #[error("the master sent an invalid message: {0}")]
    Protocol(String),
    /// A valid message, but not the answer the request expects.
    #[error("unexpected reply from the master: expected `{expected}`, got {got}")]
    UnexpectedReply { expected: &'static str, got: String },
}

impl ClientError {
    /// Whether trying again later, on a new connection, may succeed. False for
    /// configuration problems (bad URL, bad token, other protocol version) that
    /// no amount of waiting fixes.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::BadUrl { .. }
            | ClientError::Tls { .. }
            | ClientError::Protocol(_)
            | ClientError::UnexpectedReply { .. } => false,
            ClientError::Connect { .. }
            | ClientError::Shutdown { .. }
            | ClientError::Transport(_)
            | ClientError::Timeout { .. } => true,
            ClientError::Server { code, .. } => matches!(code, ErrorCode::Internal),
            ClientError::Closed { code, .. } => !matches!(
                *code,
                close_code::PROTOCOL_MISMATCH
                    | close_code::UNAUTHORIZED
                    | close_code::HANDSHAKE
                    | close_code::POLICY
                    | close_code::TOO_BIG
            ),
        }
    }

    /// The machine-readable code when the master answered with an error.
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// `snake_case` name of an error code, as on the wire.
pub fn error_code_name(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{code:?}"))
}

fn describe_server_error(code: ErrorCode, message: &str) -> String {
    let name = error_code_name(code);
    // The master's messages may already start with the code ("unauthorized: ...").
    let message = message.trim();
    let message = message
        .strip_prefix(name.as_str())
        .and_then(|rest| rest.strip_prefix(':'))
        .map_or(message, str::trim_start);
    match code {
        ErrorCode::ProtocolMismatch => protocol_mismatch(message),
        _ => format!("master refused: {name}: {message}"),
    }
}

fn describe_shutdown(reason: &str) -> String {
    let reason = reason.trim();
    if reason.is_empty() || reason.contains("shutting down") {
        "the master is shutting down".into()
    } else {
        format!("the master is shutting down: {reason}")
    }
}

fn protocol_mismatch(detail: &str) -> String {
    let detail = detail.trim();
    let text = if detail.to_ascii_lowercase().starts_with("protocol") {
        detail.to_owned()
    } else if detail.is_empty() {
        "protocol mismatch".to_owned()
    } else {
        format!("protocol mismatch: {detail}")
    };
    format!("{text} (this client speaks protocol {PROTOCOL_VERSION})")
}

fn describe_close(code: u16, reason: &str) -> String {
    let reason = reason.trim();
    let with = |what: &str| {
        if reason.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {reason}")
        }
    };
    match code {
        close_code::PROTOCOL_MISMATCH => protocol_mismatch(reason),
        close_code::UNAUTHORIZED => {
            let reason = reason
                .strip_prefix("unauthorized:")
                .map_or(reason, str::trim_start);
            if reason.is_empty() {
                "master refused: unauthorized: bad or missing token (--token or TUNEFLEET_TOKEN)"
                    .into()
            } else {
                format!("master refused: unauthorized: {reason}")
            }
        }
        close_code::HANDSHAKE => with("master refused the handshake"),
        close_code::HEARTBEAT_TIMEOUT => with("master dropped the connection"),
        close_code::SLOW_CONSUMER => with("master dropped this subscriber for falling behind"),
        close_code::GOING_AWAY => with("the master is going away"),
        close_code::TOO_BIG => with("master refused a message as too large"),
        close_code::POLICY => with("master closed the connection (policy violation)"),
        close_code::NORMAL | NO_STATUS => with("master closed the connection"),
        _ => with(&format!("master closed the connection (code {code})")),
    }
}

/// Turns `--server` into the client endpoint URL: trims whitespace and
/// trailing `/`, maps `http(s)://` to `ws(s)://`, and appends `/ws/client`
/// unless it is already there.
pub fn endpoint_url(server: &str) -> Result<String, ClientError> {
    let trimmed = server.trim().trim_end_matches('/');
    let bad = |reason: &str| ClientError::BadUrl {
        url: server.to_owned(),
        reason: reason.to_owned(),
    };
    let (scheme, rest) = trimmed
        .split_once("://")
        .ok_or_else(|| bad("expected ws://HOST:PORT (e.g. ws://127.0.0.1:18871)"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "ws" | "http" => "ws",
        "wss" | "https" => "wss",
        _ => return Err(bad("the scheme must be ws:// or wss://")),
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("no host name"));
    }
    if rest.ends_with(CLIENT_PATH) {
        Ok(format!("{scheme}://{rest}"))
    } else {
        Ok(format!("{scheme}://{rest}{CLIENT_PATH}"))
    }
}

fn connect_error(url: &str, err: tungstenite::Error) -> ClientError {
    use tungstenite::error::UrlError;
    let connect = |reason: String| ClientError::Connect {
        url: url.to_owned(),
        reason,
    };
    if let tungstenite::Error::Io(e) = &err {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return ClientError::Tls {
                url: url.to_owned(),
                reason: describe_tls_error(tls),
            };
        }
    }
    match err {
        tungstenite::Error::Io(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                connect("connection refused (is `tunefleet serve` running there?)".into())
            }
            std::io::ErrorKind::TimedOut => connect("connection timed out".into()),
            _ => connect(e.to_string()),
        },
        tungstenite::Error::Url(UrlError::TlsFeatureNotEnabled) => ClientError::BadUrl {
            url: url.to_owned(),
            reason: "this build has no TLS support; use ws:// (e.g. behind an SSH tunnel)".into(),
        },
        tungstenite::Error::Url(e) => ClientError::BadUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        },
        tungstenite::Error::Http(resp) => {
            let status = resp.status();
            // The master explains its refusals (Origin, --max-connections) in the body.
            let body = resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).trim().to_string())
                .filter(|b| !b.is_empty() && b.len() <= 300 && !b.starts_with('<'));
            match body {
                Some(body) => connect(format!("HTTP {status}: {body}")),
                None => connect(format!(
                    "HTTP {status} (is this a tunefleet master? the client endpoint is {CLIENT_PATH})"
                )),
            }
        }
        other => connect(other.to_string()),
    }
}

/// A rustls failure in words, with what to do about it.
pub fn describe_tls_error(err: &rustls::Error) -> String {
    match err {
        rustls::Error::InvalidCertificate(_) if err.to_string().contains("CaUsedAsEndEntity") => {
            format!(
                "the master's certificate is a CA certificate ({err}); the master must serve a \
                 leaf certificate (basicConstraints CA:FALSE, e.g. openssl req -x509 ... -addext \
                 basicConstraints=critical,CA:FALSE), signed by the CA given with --ca-cert or \
                 self-signed"
            )
        }
        rustls::Error::InvalidCertificate(_) => format!(
            "the master's certificate is not trusted ({err}); for a self-signed certificate or \
             a private CA pass --ca-cert FILE (or set TUNEFLEET_CA_CERT) with the CA certificate in PEM"
        ),
        rustls::Error::InvalidMessage(_) => format!(
            "TLS handshake failed ({err}); is the master serving TLS (serve --tls-cert)? \
             Use ws:// for a master without TLS"
        ),
        _ => format!("TLS handshake failed: {err}"),
    }
}

fn transport_error(err: tungstenite::Error) -> ClientError {
    use tungstenite::error::ProtocolError;
    match err {
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            ClientError::Transport("connection closed".into())
        }
        tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            ClientError::Transport("the master closed the connection without a close frame".into())
        }
        tungstenite::Error::Capacity(e) => {
            ClientError::Protocol(format!("message over the client's size limit: {e}"))
        }
        tungstenite::Error::Io(e) => ClientError::Transport(e.to_string()),
        other => ClientError::Transport(other.to_string()),
    }
}

/// A short description of a message for "unexpected reply" errors; never the
/// whole payload (it can be megabytes).
fn summarize(msg: &ServerMessage) -> String {
    match msg {
        ServerMessage::Reply { body, .. } => format!("reply `{}`", reply_kind(body)),
        ServerMessage::Error { code, .. } => format!("error `{}`", error_code_name(*code)),
        ServerMessage::Snapshot { .. } => "snapshot".into(),
        ServerMessage::Event { .. } => "event".into(),
        ServerMessage::Shutdown { .. } => "shutdown".into(),
    }
}

fn reply_kind(body: &ReplyBody) -> &'static str {
    match body {
        ReplyBody::Welcome { .. } => "welcome",
        ReplyBody::Subscribed => "subscribed",
        ReplyBody::Submitted(_) => "submitted",
        ReplyBody::Status(_) => "status",
        ReplyBody::Results { .. } => "results",
        ReplyBody::Cancelled { .. } => "cancelled",
        ReplyBody::Retried { .. } => "retried",
        ReplyBody::ShuttingDown => "shutting_down",
        ReplyBody::ModelSubmitted { .. } => "model_submitted",
        ReplyBody::Models { .. } => "models",
        ReplyBody::ModelStopping { .. } => "model_stopping",
        ReplyBody::Artifact { .. } => "artifact",
        ReplyBody::TokenCreated { .. } => "token_created",
        ReplyBody::TokenRevoked { .. } => "token_revoked",
        ReplyBody::Tokens { .. } => "tokens",
        ReplyBody::Imported(_) => "imported",
    }
}

fn unexpected(expected: &'static str, body: &ReplyBody) -> ClientError {
    ClientError::UnexpectedReply {
        expected,
        got: format!("reply `{}`", reply_kind(body)),
    }
}

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

/// How to connect, beyond the URL and the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// For `wss://`: a PEM file with the CA certificate(s) to trust (a private
    /// CA, or the master's self-signed certificate) instead of the public web
    /// roots built into the client.
    pub ca_cert: Option<PathBuf>,
}

/// The TLS configuration for `wss://`: trusts the certificates in `ca_cert`
/// (PEM) if given, else the public web roots (Mozilla's list, built in).
/// Errors name the file and what is wrong with it.
pub fn tls_client_config(ca_cert: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match ca_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read CA certificate {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    format!("invalid PEM in CA certificate {}: {e}", path.display())
                })?;
                roots
                    .add(cert)
                    .map_err(|e| format!("unusable CA certificate in {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "no certificate (-----BEGIN CERTIFICATE-----) in {}",
                    path.display()
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
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
    pub async fn subscribe(&mut self) -> Result<(u64, FleetSnapshot), ClientError> {
        match self.request(ClientCommand::Subscribe).await? {
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
