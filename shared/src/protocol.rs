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

use crate::import::{ImportReport, ImportedWorkload, WorkloadKey};
use crate::model::{
    ArtifactFile, ModelArtifactKind, ModelSubmission, ModelView, TunerSettings, WarmStart,
};
use crate::target::Target;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};

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
pub type Lease = u64;

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

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

/// One measured schedule. `record` is backend-specific (MetaSchedule's own
/// JSON record for the TVM backend).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TuningRecord {
    pub latency_s: f64,
    pub record: serde_json::Value,
}

/// What a worker sends when a job finished tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobResult {
    pub best_latency_s: f64,
    #[serde(default)]
    pub gflops: Option<f64>,
    /// Best first; the master keeps the best `nbest`.
    pub records: Vec<TuningRecord>,
    pub trials: u32,
    pub wall_time_s: f64,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    /// Backend-specific extras (e.g. the workload in MetaSchedule database form).
    #[serde(default)]
    pub extra: serde_json::Value,
    /// The target the worker tuned, compiled and measured for: the job's
    /// target with every attribute it leaves open filled from the worker's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
}

/// A worker's self-description, sent in [`WorkerMessage::Register`].
///
/// `Debug` redacts `secret`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerHello {
    pub protocol: u32,
    /// Stable for the life of the worker process, across reconnects; used to
    /// accept results that finished while the worker was disconnected.
    pub worker_id: String,
    pub name: String,
    pub target: Target,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    /// Join secret (`serve --worker-secret`), when the master asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Worker → master. `Debug` redacts the tokens.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMessage {
    Register(WorkerHello),
    /// "I am idle". The master answers with `assign` now or whenever a
    /// matching job appears; there is no polling.
    RequestJob {
        token: String,
    },
    Progress {
        token: String,
        job_id: JobId,
        lease: Lease,
        trials_done: u32,
        trials_total: u32,
        #[serde(default)]
        best_latency_s: Option<f64>,
    },
    Result {
        token: String,
        job_id: JobId,
        lease: Lease,
        result: JobResult,
    },
    JobFailed {
        token: String,
        job_id: JobId,
        lease: Lease,
        error: String,
    },
}

/// Master → worker. `Debug` redacts the token in `registered`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MasterMessage {
    Registered {
        token: String,
        /// The session id the master shows for this worker.
        session: String,
        /// Open jobs this worker's target can serve right now.
        matching_jobs: usize,
    },
    Assign {
        job_id: JobId,
        lease: Lease,
        attempt: u32,
        workload: Box<Workload>,
        /// How many best records the master keeps.
        nbest: u32,
        /// Records to seed the search with (later rounds of a model's task).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warm_start: Option<Box<WarmStart>>,
        /// Tuner settings of the job's model run; defaults when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tuner: Option<Box<TunerSettings>>,
    },
    /// Stop working on this lease (job cancelled, timed out, or finished elsewhere).
    Cancel {
        job_id: JobId,
        lease: Lease,
        reason: String,
    },
    /// Answer to `result` / `job_failed`: was it stored?
    Ack {
        job_id: JobId,
        lease: Lease,
        accepted: bool,
        #[serde(default)]
        reason: Option<String>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    Shutdown {
        reason: String,
    },
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
    Internal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Read,
}

/// Client → master: a command plus the `id` its reply will carry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClientRequest {
    pub id: u64,
    #[serde(flatten)]
    pub command: ClientCommand,
}

/// A client request's command. `Debug` redacts the token in `hello` and shows
/// only the size of a submitted file.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientCommand {
    Hello {
        protocol: u32,
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        client: Option<String>,
    },
    /// Snapshot now, events after.
    Subscribe,
    Submit {
        yaml: String,
        #[serde(default)]
        filename: Option<String>,
        /// Tune every new job from scratch, even when the tuning cache could
        /// answer it or warm-start it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fresh: bool,
    },
    Status,
    Results {
        #[serde(default)]
        job_ids: Option<Vec<JobId>>,
        /// With every job: also the archived ones (`--job-retention`), read
        /// from the master's database. Named jobs are found either way.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        archived: bool,
    },
    Cancel {
        job_id: JobId,
    },
    Retry {
        job_id: JobId,
    },
    /// Stop the master gracefully, as SIGTERM does (admin). Answered with
    /// `shutting_down`; then every peer gets `shutdown` and close 1001.
    Shutdown,
    /// Tune a whole ONNX model (see `model.rs`).
    SubmitModel {
        model: Box<ModelSubmission>,
    },
    /// Model runs: one by name, or all.
    Models {
        #[serde(default)]
        name: Option<String>,
    },
    /// Spend no more of the run's budget: compile with the records so far.
    StopModel {
        name: String,
    },
    ModelArtifact {
        name: String,
        artifact: ModelArtifactKind,
    },
    /// A named admin token (master admin token only): its text is in the
    /// reply, once; the master keeps only a hash.
    CreateToken {
        name: String,
    },
    /// Revokes a named admin token (master admin token only); sessions that
    /// use it lose admin rights at their next request.
    RevokeToken {
        name: String,
    },
    /// The named admin tokens (names and creation times, never the tokens).
    ListTokens,
    /// Records a team already has, to seed jobs of the same workloads
    /// (admin; see `import.rs`). Answered with `imported`.
    Import {
        workloads: Vec<ImportedWorkload>,
        /// Content keys of tunefleet workloads and their database lines.
        #[serde(default)]
        keys: Vec<WorkloadKey>,
    },
}

impl ClientCommand {
    /// Commands that change the fleet need the admin token.
    pub fn needs_admin(&self) -> bool {
        matches!(
            self,
            ClientCommand::Submit { .. }
                | ClientCommand::Cancel { .. }
                | ClientCommand::Retry { .. }
                | ClientCommand::Shutdown
                | ClientCommand::SubmitModel { .. }
                | ClientCommand::StopModel { .. }
                | ClientCommand::CreateToken { .. }
                | ClientCommand::RevokeToken { .. }
                | ClientCommand::ListTokens
                | ClientCommand::Import { .. }
        )
    }

    /// Commands that only the master's own admin token may send: managing
    /// named tokens.
    pub fn needs_master_admin(&self) -> bool {
        matches!(
            self,
            ClientCommand::CreateToken { .. }
                | ClientCommand::RevokeToken { .. }
                | ClientCommand::ListTokens
        )
    }

    /// The `type` of this command on the wire (`hello`, `submit`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ClientCommand::Hello { .. } => "hello",
            ClientCommand::Subscribe => "subscribe",
            ClientCommand::Submit { .. } => "submit",
            ClientCommand::Status => "status",
            ClientCommand::Results { .. } => "results",
            ClientCommand::Cancel { .. } => "cancel",
            ClientCommand::Retry { .. } => "retry",
            ClientCommand::Shutdown => "shutdown",
            ClientCommand::SubmitModel { .. } => "submit_model",
            ClientCommand::Models { .. } => "models",
            ClientCommand::StopModel { .. } => "stop_model",
            ClientCommand::ModelArtifact { .. } => "model_artifact",
            ClientCommand::CreateToken { .. } => "create_token",
            ClientCommand::RevokeToken { .. } => "revoke_token",
            ClientCommand::ListTokens => "list_tokens",
            ClientCommand::Import { .. } => "import",
        }
    }
}

/// Master → client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Reply {
        id: u64,
        body: ReplyBody,
    },
    Error {
        #[serde(default)]
        id: Option<u64>,
        code: ErrorCode,
        message: String,
    },
    Snapshot {
        seq: u64,
        snapshot: FleetSnapshot,
    },
    Event {
        seq: u64,
        event: FleetEvent,
    },
    Shutdown {
        reason: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplyBody {
    Welcome {
        server_version: String,
        protocol: u32,
        role: Role,
    },
    Subscribed,
    Submitted(SubmitReport),
    Status(StatusReport),
    Results {
        jobs: Vec<JobView>,
    },
    Cancelled {
        job_id: JobId,
    },
    Retried {
        job_id: JobId,
    },
    /// Answer to `shutdown`: the master has begun to stop.
    ShuttingDown,
    ModelSubmitted {
        name: String,
        extract_job: JobId,
    },
    Models {
        models: Vec<ModelView>,
    },
    ModelStopping {
        name: String,
    },
    Artifact {
        name: String,
        artifact: ModelArtifactKind,
        files: Vec<ArtifactFile>,
    },
    TokenCreated {
        name: String,
        /// Shown once: the master keeps only its SHA-256.
        token: SecretText,
    },
    TokenRevoked {
        name: String,
    },
    Tokens {
        tokens: Vec<TokenInfo>,
    },
    Imported(ImportReport),
}

/// A secret on the wire (a new token): plain text in JSON, redacted in
/// `Debug`, so that logging a reply never leaks it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A named admin token, as `list_tokens` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenInfo {
    pub name: String,
    pub created_at: Millis,
}

/// Who did what to a job: `submit`, `cancel` or `retry`, by the name of the
/// admin token used (`admin` for the master's own).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobAction {
    pub action: String,
    pub by: String,
    pub at: Millis,
}

/// Most actions kept per job; the first (the submission) is always kept.
pub const MAX_JOB_ACTIONS: usize = 32;

/// A valid token name: 1–64 of `[A-Za-z0-9._-]`, not `admin` (the master's
/// own token).
pub fn check_token_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!("token name `{name}` must be 1 to 64 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "token name `{name}`: `{c}` is not allowed (letters, digits, . _ -)"
        ));
    }
    if name == "admin" {
        return Err("`admin` names the master's own admin token".into());
    }
    Ok(())
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubmitReport {
    /// Jobs created by this submission.
    pub new_jobs: Vec<JobId>,
    /// Workloads that already had a job (same normalised content and target).
    pub duplicates: Vec<JobId>,
    /// New jobs answered from the tuning cache at once (already `done`).
    #[serde(default)]
    pub cache_hits: Vec<JobId>,
    /// New jobs queued with earlier records to start from and only the
    /// rest of their budget to tune.
    #[serde(default)]
    pub warm_started: Vec<JobId>,
    /// New jobs whose search starts from imported records (`tunefleet
    /// import`); they still tune their whole budget.
    #[serde(default)]
    pub seeded: Vec<JobId>,
}

impl SubmitReport {
    /// `3 new jobs, 1 duplicate skipped, 1 answered from the tuning cache,
    /// 1 warm-started, 1 seeded from imported records` (the last three only
    /// when there are any): what `tunefleet submit` prints after the file
    /// name and the dashboard shows after a submit.
    pub fn summary(&self) -> String {
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut line = format!(
            "{}, {} skipped",
            count(self.new_jobs.len(), "new job", "new jobs"),
            count(self.duplicates.len(), "duplicate", "duplicates")
        );
        for (ids, what) in [
            (&self.cache_hits, "answered from the tuning cache"),
            (&self.warm_started, "warm-started"),
            (&self.seeded, "seeded from imported records"),
        ] {
            if !ids.is_empty() {
                line += &format!(", {} {what}", ids.len());
            }
        }
        line
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobCounts {
    pub total: usize,
    pub queued: usize,
    /// In flight: assigned or running.
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    pub cancelled: usize,
    /// Of `total`, the jobs archived (`--job-retention`): ended jobs the
    /// master keeps in its database only. They count in their state.
    #[serde(default)]
    pub archived: usize,
}

impl JobCounts {
    pub fn is_empty(&self) -> bool {
        *self == JobCounts::default()
    }

    /// Counts one job in `state` (`n` of them; negative takes away).
    pub fn count(&mut self, state: JobState, n: isize) {
        let slot = match state {
            JobState::Queued => &mut self.queued,
            JobState::Assigned | JobState::Running => &mut self.running,
            JobState::Done => &mut self.done,
            JobState::Failed => &mut self.failed,
            JobState::Cancelled => &mut self.cancelled,
        };
        *slot = slot.saturating_add_signed(n);
        self.total = self.total.saturating_add_signed(n);
    }

    /// Counts `n` archived jobs in `state` (negative: brought back), in
    /// their state and in `archived` alike.
    pub fn count_archived(&mut self, state: JobState, n: isize) {
        self.count(state, n);
        self.archived = self.archived.saturating_add_signed(n);
    }

    /// These counts and `other`'s, summed field by field.
    pub fn plus(&self, other: &JobCounts) -> JobCounts {
        JobCounts {
            total: self.total + other.total,
            queued: self.queued + other.queued,
            running: self.running + other.running,
            done: self.done + other.done,
            failed: self.failed + other.failed,
            cancelled: self.cancelled + other.cancelled,
            archived: self.archived + other.archived,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusReport {
    pub jobs: JobCounts,
    /// Live (registered) workers.
    pub workers: usize,
    pub workers_busy: usize,
    pub server_version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerView {
    /// Session id, unique per connection.
    pub session: String,
    pub worker_id: String,
    pub name: String,
    pub target: Target,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    pub current_job: Option<JobId>,
    pub jobs_done: u64,
    pub connected_at: Millis,
}

/// One entry of a job's error history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobError {
    pub attempt: u32,
    #[serde(default)]
    pub worker: Option<String>,
    pub at: Millis,
    pub message: String,
}

/// Where and how the stored result was produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResultMeta {
    pub trials: u32,
    pub wall_time_s: f64,
    pub worker: String,
    pub backend: String,
    #[serde(default)]
    pub tvm_version: Option<String>,
    #[serde(default)]
    pub gflops: Option<f64>,
    #[serde(default)]
    pub extra: serde_json::Value,
    /// The effective target the result was measured for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
}

/// One point of a job's tuning curve: the best latency after `trials` trials.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProgressPoint {
    pub trials: u32,
    pub best_latency_s: f64,
}

/// Most points kept per job; older ones are thinned out, never the latest.
pub const MAX_HISTORY_POINTS: usize = 256;

/// Adds a point to a job's curve, exactly as the master does, so that a
/// subscriber applying `job_progress` events keeps the same curve as the
/// master's view: a point with the same `trials` as the last one replaces it;
/// past [`MAX_HISTORY_POINTS`], every other point goes, never the latest.
pub fn record_progress_point(history: &mut Vec<ProgressPoint>, trials: u32, best_latency_s: f64) {
    match history.last_mut() {
        Some(last) if last.trials == trials => last.best_latency_s = best_latency_s,
        _ => history.push(ProgressPoint {
            trials,
            best_latency_s,
        }),
    }
    if history.len() > MAX_HISTORY_POINTS {
        let last = history.len() - 1;
        let mut i = 0;
        history.retain(|_| {
            i += 1;
            i % 2 == 1 || i - 1 == last
        });
    }
}

/// A running job's progress, as the small event subscribers get for each
/// accepted report (the job's other fields are unchanged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobProgress {
    pub job_id: JobId,
    pub trials_done: u32,
    pub trials_total: u32,
    /// The job's best latency so far; when set, the curve gets the point
    /// (`trials_done`, `best_latency_s`) by [`record_progress_point`]'s rule.
    pub best_latency_s: Option<f64>,
    pub updated_at: Millis,
}

impl JobProgress {
    /// Applies the delta to a job's view: what a subscriber does with it.
    pub fn apply_to(&self, job: &mut JobView) {
        job.state = JobState::Running;
        job.trials_done = self.trials_done;
        job.trials_total = self.trials_total;
        job.best_latency_s = self.best_latency_s;
        if let Some(best) = self.best_latency_s {
            record_progress_point(&mut job.history, self.trials_done, best);
        }
        job.updated_at = self.updated_at;
    }
}

/// Everything a client may want to know about one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobView {
    pub job_id: JobId,
    pub name: String,
    pub workload: Workload,
    pub state: JobState,
    pub attempts: u32,
    pub worker: Option<String>,
    pub trials_done: u32,
    pub trials_total: u32,
    pub best_latency_s: Option<f64>,
    /// Best first, at most `nbest`.
    pub records: Vec<TuningRecord>,
    /// Best latency over trials for the current (or last) attempt.
    #[serde(default)]
    pub history: Vec<ProgressPoint>,
    pub errors: Vec<JobError>,
    pub result: Option<ResultMeta>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// Answered from the tuning cache at submission: `records`,
    /// `best_latency_s` and `result` are those of `cached_from`, an earlier
    /// job with the same computation, a target that serves this one's and at
    /// least its budget.
    #[serde(default)]
    pub cache_hit: bool,
    /// The job whose records answered (`cache_hit`) or warm-started this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from: Option<JobId>,
    /// Who submitted, cancelled or retried it, oldest first (named admin
    /// tokens; `admin` for the master's own). Empty for jobs of model runs
    /// and of start-up files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<JobAction>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetSnapshot {
    pub jobs: Vec<JobView>,
    pub workers: Vec<WorkerView>,
    #[serde(default)]
    pub models: Vec<ModelView>,
    /// Jobs archived (`--job-retention`), by state: not in `jobs`.
    #[serde(default, skip_serializing_if = "JobCounts::is_empty")]
    pub archived: JobCounts,
}

/// Everything subscribers are told, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FleetEvent {
    WorkerJoined {
        worker: Box<WorkerView>,
    },
    WorkerLeft {
        session: String,
        reason: String,
    },
    WorkerUpdated {
        worker: Box<WorkerView>,
    },
    JobUpdated {
        job: Box<JobView>,
    },
    /// Progress of a job already `running`: a delta to apply to its view
    /// ([`JobProgress::apply_to`]), not a whole view.
    JobProgress {
        progress: JobProgress,
    },
    ModelUpdated {
        model: Box<ModelView>,
    },
    /// `--job-retention`: these jobs left the master's memory (their rows
    /// stay in its database; `results --archived` reads them). `archived`
    /// is the count of archived jobs by state after the change, whole, not
    /// a delta; an archived job that comes back (resubmitted, retried, a
    /// cache entry) is announced with no ids and the lower counts, then a
    /// `job_updated`.
    JobsArchived {
        job_ids: Vec<JobId>,
        archived: JobCounts,
    },
}

/// What `Debug` prints instead of a secret.
const REDACTED: &str = "<redacted>";

/// `Some("<redacted>")` for a present secret, `None` for an absent one.
fn redact(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| REDACTED)
}

impl std::fmt::Debug for WorkerHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHello")
            .field("protocol", &self.protocol)
            .field("worker_id", &self.worker_id)
            .field("name", &self.name)
            .field("target", &self.target)
            .field("backend", &self.backend)
            .field("tvm_version", &self.tvm_version)
            .field("secret", &redact(&self.secret))
            .finish()
    }
}

impl std::fmt::Debug for WorkerMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerMessage::Register(hello) => f.debug_tuple("Register").field(hello).finish(),
            WorkerMessage::RequestJob { token: _ } => f
                .debug_struct("RequestJob")
                .field("token", &REDACTED)
                .finish(),
            WorkerMessage::Progress {
                token: _,
                job_id,
                lease,
                trials_done,
                trials_total,
                best_latency_s,
            } => f
                .debug_struct("Progress")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("trials_done", trials_done)
                .field("trials_total", trials_total)
                .field("best_latency_s", best_latency_s)
                .finish(),
            WorkerMessage::Result {
                token: _,
                job_id,
                lease,
                result,
            } => f
                .debug_struct("Result")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("result", result)
                .finish(),
            WorkerMessage::JobFailed {
                token: _,
                job_id,
                lease,
                error,
            } => f
                .debug_struct("JobFailed")
                .field("token", &REDACTED)
                .field("job_id", job_id)
                .field("lease", lease)
                .field("error", error)
                .finish(),
        }
    }
}

impl std::fmt::Debug for MasterMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MasterMessage::Registered {
                token: _,
                session,
                matching_jobs,
            } => f
                .debug_struct("Registered")
                .field("token", &REDACTED)
                .field("session", session)
                .field("matching_jobs", matching_jobs)
                .finish(),
            MasterMessage::Assign {
                job_id,
                lease,
                attempt,
                workload,
                nbest,
                warm_start,
                tuner,
            } => f
                .debug_struct("Assign")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("attempt", attempt)
                .field("workload", workload)
                .field("nbest", nbest)
                .field("warm_start", &warm_start.as_ref().map(|w| w.records.len()))
                .field("tuner", tuner)
                .finish(),
            MasterMessage::Cancel {
                job_id,
                lease,
                reason,
            } => f
                .debug_struct("Cancel")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("reason", reason)
                .finish(),
            MasterMessage::Ack {
                job_id,
                lease,
                accepted,
                reason,
            } => f
                .debug_struct("Ack")
                .field("job_id", job_id)
                .field("lease", lease)
                .field("accepted", accepted)
                .field("reason", reason)
                .finish(),
            MasterMessage::Error { code, message } => f
                .debug_struct("Error")
                .field("code", code)
                .field("message", message)
                .finish(),
            MasterMessage::Shutdown { reason } => {
                f.debug_struct("Shutdown").field("reason", reason).finish()
            }
        }
    }
}

impl std::fmt::Debug for ClientCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientCommand::Hello {
                protocol,
                token,
                client,
            } => f
                .debug_struct("Hello")
                .field("protocol", protocol)
                .field("token", &redact(token))
                .field("client", client)
                .finish(),
            ClientCommand::Subscribe => f.write_str("Subscribe"),
            ClientCommand::Submit {
                yaml,
                filename,
                fresh,
            } => f
                .debug_struct("Submit")
                .field("yaml", &format_args!("<{} bytes>", yaml.len()))
                .field("filename", filename)
                .field("fresh", fresh)
                .finish(),
            ClientCommand::Status => f.write_str("Status"),
            ClientCommand::Results { job_ids, archived } => f
                .debug_struct("Results")
                .field("job_ids", job_ids)
                .field("archived", archived)
                .finish(),
            ClientCommand::Cancel { job_id } => {
                f.debug_struct("Cancel").field("job_id", job_id).finish()
            }
            ClientCommand::Retry { job_id } => {
                f.debug_struct("Retry").field("job_id", job_id).finish()
            }
            ClientCommand::Shutdown => f.write_str("Shutdown"),
            ClientCommand::SubmitModel { model } => f
                .debug_struct("SubmitModel")
                .field("name", &model.name)
                .field(
                    "onnx",
                    &format_args!("<{} base64 bytes>", model.source.onnx_b64.len()),
                )
                .field("trials", &model.trials)
                .finish(),
            ClientCommand::Models { name } => f.debug_struct("Models").field("name", name).finish(),
            ClientCommand::StopModel { name } => {
                f.debug_struct("StopModel").field("name", name).finish()
            }
            ClientCommand::ModelArtifact { name, artifact } => f
                .debug_struct("ModelArtifact")
                .field("name", name)
                .field("artifact", artifact)
                .finish(),
            ClientCommand::CreateToken { name } => {
                f.debug_struct("CreateToken").field("name", name).finish()
            }
            ClientCommand::RevokeToken { name } => {
                f.debug_struct("RevokeToken").field("name", name).finish()
            }
            ClientCommand::ListTokens => f.write_str("ListTokens"),
            ClientCommand::Import { workloads, keys } => f
                .debug_struct("Import")
                .field("workloads", &workloads.len())
                .field(
                    "records",
                    &workloads.iter().map(|w| w.records.len()).sum::<usize>(),
                )
                .field("keys", &keys.len())
                .finish(),
        }
    }
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

#[cfg(test)]
mod tests;
