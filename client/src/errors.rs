//! What can go wrong talking to the master, in words for the person at the
//! terminal: server errors, close codes, connection and TLS failures.

use std::time::Duration;

use tokio_tungstenite::tungstenite;
use tunefleet_shared::protocol::{
    close_code, ErrorCode, ReplyBody, ServerMessage, PROTOCOL_VERSION,
};

use crate::{TransportError, CLIENT_PATH, NO_STATUS};

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
            ClientError::Server { code, .. } => {
                matches!(code, ErrorCode::Internal | ErrorCode::StorageUnavailable)
            }
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

pub(crate) fn fmt_duration(d: Duration) -> String {
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

pub(crate) fn describe_server_error(code: ErrorCode, message: &str) -> String {
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

pub(crate) fn describe_shutdown(reason: &str) -> String {
    let reason = reason.trim();
    if reason.is_empty() || reason.contains("shutting down") {
        "the master is shutting down".into()
    } else {
        format!("the master is shutting down: {reason}")
    }
}

pub(crate) fn protocol_mismatch(detail: &str) -> String {
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

pub(crate) fn describe_close(code: u16, reason: &str) -> String {
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

pub(crate) fn connect_error(url: &str, err: TransportError) -> ClientError {
    use tungstenite::error::UrlError;
    let connect = |reason: String| ClientError::Connect {
        url: url.to_owned(),
        reason,
    };
    if let Some(tls) = err.tls_error() {
        return ClientError::Tls {
            url: url.to_owned(),
            reason: describe_tls_error(tls),
        };
    }
    let err = match err {
        TransportError::WebSocket(err) => err,
        TransportError::Tls(reason) => {
            return ClientError::Tls {
                url: url.to_owned(),
                reason,
            }
        }
        other => return connect(other.to_string()),
    };
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

/// A failure on an open connection, in the client's words.
pub(crate) fn transport_error(err: TransportError) -> ClientError {
    use tungstenite::error::ProtocolError;
    let err = match err {
        TransportError::WebSocket(err) => err,
        TransportError::TooBig(e) => {
            return ClientError::Protocol(format!("message over the client's size limit: {e}"))
        }
        TransportError::Decode { error, .. } => return ClientError::Protocol(error.to_string()),
        TransportError::Binary => {
            return ClientError::Protocol("binary frame (the protocol is JSON text)".into())
        }
        TransportError::Encode(e) => {
            return ClientError::Protocol(format!("cannot encode request: {e}"))
        }
        other @ (TransportError::Tls(_) | TransportError::Stalled(_)) => {
            return ClientError::Transport(other.to_string())
        }
    };
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
pub(crate) fn summarize(msg: &ServerMessage) -> String {
    match msg {
        ServerMessage::Reply { body, .. } => format!("reply `{}`", reply_kind(body)),
        ServerMessage::Error { code, .. } => format!("error `{}`", error_code_name(*code)),
        ServerMessage::Snapshot { .. } => "snapshot".into(),
        ServerMessage::Event { .. } => "event".into(),
        ServerMessage::Shutdown { .. } => "shutdown".into(),
    }
}

pub(crate) fn reply_kind(body: &ReplyBody) -> &'static str {
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

pub(crate) fn unexpected(expected: &'static str, body: &ReplyBody) -> ClientError {
    ClientError::UnexpectedReply {
        expected,
        got: format!("reply `{}`", reply_kind(body)),
    }
}
