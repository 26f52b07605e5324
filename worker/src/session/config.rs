//! What a worker is given ([`WorkerConfig`]), what it returns
//! ([`WorkerStats`]) and why it stops for good ([`WorkerError`]): the
//! library's surface, apart from the session that uses them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::backoff::Backoff;
use tunefleet_shared::device::Device;
use tunefleet_shared::protocol::MAX_WORKER_SLOTS;
use tunefleet_shared::target::Target;

/// Everything one worker needs. See [`WorkerConfig::new`] for the defaults.
#[derive(Clone)]
pub struct WorkerConfig {
    /// Master base URL (`ws://host:port` or `wss://host:port`); `/ws/worker`
    /// is appended unless present.
    pub server: String,
    pub target: Target,
    /// Shown in the master's UI; need not be unique.
    pub name: String,
    pub backend: Arc<dyn Backend>,
    /// Join secret, when the master requires one.
    pub secret: Option<String>,
    pub backoff: Backoff,
    /// Stop after this many finished jobs have been acknowledged (tests, benchmarks).
    pub max_jobs: Option<u64>,
    /// Stable identity of this worker across reconnects; `None` picks a fresh
    /// UUID v4 for this [`run_worker`](crate::run_worker) call.
    pub worker_id: Option<String>,
    /// For `wss://`: a PEM file with the CA certificate(s) to trust instead of
    /// the public web roots (a private CA, or a self-signed master certificate).
    pub ca_cert: Option<PathBuf>,
    /// Jobs run at once, 1 to [`MAX_WORKER_SLOTS`] (`register`'s `slots`).
    /// More than one is for backends whose jobs do not compete for the
    /// machine (`sim`); a TVM run measures on every core.
    pub slots: u32,
    /// Silence from the master (no frame, no ping) for this long is a lost
    /// connection. `None`: the master's `--heartbeat-timeout`, which it sends
    /// in `registered` (an older master that does not: no limit).
    pub heartbeat_timeout: Option<Duration>,
    /// What this registration tunes on, shown by the master (`register`'s
    /// `device`): a GPU slot's card, or the host's CPU.
    pub device: Option<Device>,
}

impl WorkerConfig {
    /// A config with no secret, the default backoff, no job limit and a fresh worker id.
    pub fn new(
        server: impl Into<String>,
        target: Target,
        name: impl Into<String>,
        backend: Arc<dyn Backend>,
    ) -> Self {
        WorkerConfig {
            server: server.into(),
            target,
            name: name.into(),
            backend,
            secret: None,
            backoff: Backoff::default(),
            max_jobs: None,
            worker_id: None,
            ca_cert: None,
            slots: 1,
            heartbeat_timeout: None,
            device: None,
        }
    }
}

impl fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("server", &self.server)
            .field("target", &self.target)
            .field("name", &self.name)
            .field("backend", &self.backend.name())
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("backoff", &self.backoff)
            .field("max_jobs", &self.max_jobs)
            .field("worker_id", &self.worker_id)
            .field("ca_cert", &self.ca_cert)
            .field("slots", &self.slots)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("device", &self.device)
            .finish()
    }
}

/// What a worker did, returned when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Successful registrations (1 + reconnects).
    pub registrations: u64,
    pub jobs_assigned: u64,
    /// Jobs the backend finished with a result.
    pub jobs_succeeded: u64,
    /// Jobs the backend failed (reported as `job_failed`).
    pub jobs_failed: u64,
    /// Jobs aborted because the master cancelled them.
    pub jobs_cancelled: u64,
    /// Results or failures the master stored.
    pub reports_accepted: u64,
    /// Results or failures the master answered with `accepted: false`.
    pub reports_rejected: u64,
}

impl WorkerStats {
    /// Own jobs whose outcome the master acknowledged; what `max_jobs` counts.
    pub fn jobs_acknowledged(&self) -> u64 {
        self.reports_accepted + self.reports_rejected
    }
}

/// Why a worker stopped for good. Connection trouble is not here: it is
/// retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidServerUrl { url: String, reason: String },
    #[error("slots: {0} is not between 1 and {max}", max = MAX_WORKER_SLOTS)]
    InvalidSlots(u32),
    #[error("the master speaks another protocol version (this worker speaks {ours}): {reason}")]
    ProtocolMismatch { ours: u32, reason: String },
    #[error("the master refused this worker: {0}")]
    Unauthorized(String),
    /// The CA file cannot be used, or the master's certificate is not trusted.
    #[error("TLS: {0}")]
    Tls(String),
}

/// The worker endpoint for a master base URL: `ws://h:p` and `ws://h:p/` become
/// `ws://h:p/ws/worker`, which is also accepted as is. `http://` is taken as
/// `ws://`, `https://` as `wss://` (TLS).
pub fn worker_url(server: &str) -> Result<String, WorkerError> {
    let invalid = |reason: &str| WorkerError::InvalidServerUrl {
        url: server.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = server.trim().trim_end_matches('/');
    let (scheme, rest) = if let Some(rest) = trimmed.strip_prefix("ws://") {
        ("ws", rest)
    } else if let Some(rest) = trimmed.strip_prefix("http://") {
        ("ws", rest)
    } else if let Some(rest) = trimmed.strip_prefix("wss://") {
        ("wss", rest)
    } else if let Some(rest) = trimmed.strip_prefix("https://") {
        ("wss", rest)
    } else {
        return Err(invalid("expected ws://HOST:PORT or wss://HOST:PORT"));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid("no host"));
    }
    if rest.ends_with("/ws/worker") {
        Ok(format!("{scheme}://{rest}"))
    } else {
        Ok(format!("{scheme}://{rest}/ws/worker"))
    }
}

/// A duration as the master's flags take it: `15s`, `500ms`, `2m`, or a
/// plain number of seconds (`--heartbeat-timeout`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ms, s, m or h)"
            ))
        }
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 15s, 2m)"))?;
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("`{text}` must be a non-negative duration"))
}
