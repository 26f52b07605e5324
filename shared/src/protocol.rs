//! The wire protocol: every JSON message that crosses a tunefleet WebSocket.
//!
//! There is exactly one definition of each message, here, compiled into the
//! master, the worker, the CLI and the browser app, so the parties cannot drift.
//! Every message is a JSON object whose `type` field names the variant
//! (`#[serde(tag = "type", rename_all = "snake_case")]`).
//!
//! Two endpoints, two roles:
//! - `/ws/worker`: a worker's first message is [`WorkerMessage::Register`]; the
//!   master answers [`MasterMessage::Registered`] with a token that lives as long
//!   as that socket.
//! - `/ws/client`: a client's first request is [`ClientCommand::Hello`]; every
//!   request carries an `id` and gets exactly one [`ServerMessage::Reply`] or
//!   [`ServerMessage::Error`] with the same `id`. Subscribers then receive a
//!   [`ServerMessage::Snapshot`] and a stream of [`ServerMessage::Event`]s with
//!   increasing `seq`.
//!
//! Versioning: the first message of either role carries `protocol`. A master
//! that speaks another version closes the socket with [`close_code::PROTOCOL_MISMATCH`]
//! and a reason naming both versions; the peer must not retry with the same
//! version.

use serde::{Deserialize, Serialize};

mod client;
#[cfg(test)]
mod tests;
mod views;
mod worker;

pub use client::{
    check_token_name, ClientCommand, ClientRequest, DeviceGroup, ReplyBody, Role, SecretText,
    ServerMessage, StatusReport, StorageHealth, StorageProblem, SubmitReport, TokenInfo,
    UnservedTarget,
};
pub use views::{
    record_progress_point, FleetEvent, FleetSnapshot, JobAction, JobChange, JobChangeOf, JobCounts,
    JobError, JobProgress, JobView, ProgressPoint, ResultMeta, WorkerChange, WorkerView,
    MAX_HISTORY_POINTS, MAX_JOB_ACTIONS,
};
pub use worker::{
    JobResult, MasterMessage, TuningRecord, WorkerHello, WorkerMessage, MAX_WORKER_SLOTS,
    WORKER_SLOTS,
};

/// Bumped on any incompatible change to the messages below.
pub const PROTOCOL_VERSION: u32 = 1;

/// Read buffer for every WebSocket, master and peers alike. tungstenite's
/// default (128 KiB) is zero-filled before each read and held per socket:
/// most of the master's CPU at a few thousand jobs/s, and most of its memory
/// with 10,000 idle workers. Messages are small; bigger ones still arrive
/// whole (the buffer grows for a frame that needs it), in more reads.
pub const WS_READ_BUFFER_BYTES: usize = 8 * 1024;

/// Stable job identity: hex prefix of the SHA-256 of the normalised workload.
pub type JobId = String;

/// Identifies one assignment of a job to a worker. Increases with every
/// assignment of that job, so stale progress and results can be told apart.
/// A type of its own (a plain number on the wire) so that a lease cannot be
/// passed where a session, a time or a count is meant: the lease-holder
/// check compares leases with leases only.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Lease(pub u64);

impl Lease {
    /// The lease of the job's next assignment.
    pub fn next(self) -> Lease {
        Lease(self.0 + 1)
    }
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Milliseconds since the Unix epoch. A type of its own (a plain number on
/// the wire) so that a time cannot be passed where a lease, a session, a
/// count or a duration is meant: elapsed time is [`Millis::since`], a plain
/// `u64` of milliseconds, and a deadline is [`Millis::after`] (a cut-off,
/// [`Millis::before`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// Milliseconds from `earlier` to this time; 0 when `earlier` is later
    /// (clocks of two machines, or a clock set back).
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// This time plus `ms` milliseconds.
    pub fn after(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// This time less `ms` milliseconds (the epoch at the earliest).
    pub fn before(self, ms: u64) -> Millis {
        Millis(self.0.saturating_sub(ms))
    }
}

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// WebSocket close codes used by the master.
pub mod close_code {
    /// Normal close.
    pub const NORMAL: u16 = 1000;
    /// The master is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// Too many invalid messages, or too many requests over the rate limit.
    pub const POLICY: u16 = 1008;
    /// A message larger than the configured maximum.
    pub const TOO_BIG: u16 = 1009;
    /// The peer speaks another protocol version.
    pub const PROTOCOL_MISMATCH: u16 = 4000;
    /// Authentication failed (bad token, no token and no public read).
    pub const UNAUTHORIZED: u16 = 4001;
    /// The first message was not the handshake this endpoint expects.
    pub const HANDSHAKE: u16 = 4002;
    /// The worker missed its heartbeat.
    pub const HEARTBEAT_TIMEOUT: u16 = 4003;
    /// A subscriber fell too far behind the event stream.
    pub const SLOW_CONSUMER: u16 = 4004;
    /// The worker registered with a target that no open job can use.
    pub const NO_MATCHING_JOBS: u16 = 4005;
    /// The master cannot commit its state (a full disk, its database
    /// unreachable): the worker keeps its unacknowledged results and
    /// reconnects later, as after any other lost connection.
    pub const STORAGE_UNAVAILABLE: u16 = 4006;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Assigned,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Assigned,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }

    pub fn is_in_flight(self) -> bool {
        matches!(self, JobState::Assigned | JobState::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Assigned => "assigned",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Machine-readable error codes, shared by both roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    ProtocolMismatch,
    Unauthorized,
    Forbidden,
    InvalidWorkload,
    NotFound,
    InvalidState,
    TooLarge,
    StaleToken,
    NotAssigned,
    /// A worker's target can serve none of the open jobs (sent before close 4005).
    NoMatchingJobs,
    /// More requests per second than `serve --max-requests-per-second` allows;
    /// the request was not executed. Sustained abuse is closed with 1008.
    RateLimited,
    /// The master cannot commit its state (a full disk, its database
    /// unreachable): nothing of the request was applied. Retry later; the
    /// status report says when the store takes commits again.
    StorageUnavailable,
    Internal,
}

/// What `Debug` prints instead of a secret.
pub(super) const REDACTED: &str = "<redacted>";

/// `Some("<redacted>")` for a present secret, `None` for an absent one.
pub(super) fn redact(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| REDACTED)
}

/// The JSON Schema (draft 2020-12) of every message of this protocol version,
/// as committed in `docs/protocol.schema.json`. The root is an `anyOf` over the
/// four message unions, one per direction and role; each is also a named
/// definition (`WorkerMessage`, `MasterMessage`, `ClientRequest`,
/// `ServerMessage`) to validate one direction only.
#[cfg(feature = "schema")]
pub fn json_schema() -> serde_json::Value {
    use serde_json::{json, Value};
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let roots = [
        (
            generator.subschema_for::<WorkerMessage>(),
            "worker → master, on /ws/worker",
        ),
        (
            generator.subschema_for::<MasterMessage>(),
            "master → worker, on /ws/worker",
        ),
        (
            generator.subschema_for::<ClientRequest>(),
            "client → master, on /ws/client",
        ),
        (
            generator.subschema_for::<ServerMessage>(),
            "master → client, on /ws/client",
        ),
    ];
    let any_of: Vec<Value> = roots
        .into_iter()
        .map(|(schema, what)| {
            let mut value = schema.to_value();
            if let Some(object) = value.as_object_mut() {
                object.insert("description".into(), Value::String(what.into()));
            }
            value
        })
        .collect();
    let definitions = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": format!("tunefleet wire protocol, version {PROTOCOL_VERSION}"),
        "description": "Every message is one WebSocket text frame holding one JSON object. \
            Generated from shared/src/protocol.rs; do not edit by hand (see docs/PROTOCOL.md).",
        "x-protocol-version": PROTOCOL_VERSION,
        "anyOf": any_of,
        "$defs": Value::Object(definitions),
    })
}
