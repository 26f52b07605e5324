//! The client role (`/ws/client`): requests, replies and their bodies,
//! and tokens.

use serde::{Deserialize, Serialize};

use super::{redact, ErrorCode, FleetEvent, FleetSnapshot, JobCounts, JobId, JobView, Millis};
use crate::device::Device;
use crate::import::{ImportReport, ImportedWorkload, WorkloadKey};
use crate::model::{ArtifactFile, ModelArtifactKind, ModelSubmission, ModelView};
use crate::target::Target;

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
    /// Snapshot now, events after. With `deltas`, a job the subscriber
    /// already has is updated by `job_changed` (no name, workload or
    /// creation time) instead of a whole `job_updated` view, and a worker by
    /// `worker_changed` (its job and count) instead of `worker_updated`.
    Subscribe {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        deltas: bool,
    },
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

    /// Commands whose answer needs a commit: refused at once, with
    /// `storage_unavailable`, while the master cannot write its state
    /// (reads and `shutdown` are still answered).
    pub fn changes_state(&self) -> bool {
        matches!(
            self,
            ClientCommand::Submit { .. }
                | ClientCommand::Cancel { .. }
                | ClientCommand::Retry { .. }
                | ClientCommand::SubmitModel { .. }
                | ClientCommand::StopModel { .. }
                | ClientCommand::CreateToken { .. }
                | ClientCommand::RevokeToken { .. }
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
            ClientCommand::Subscribe { .. } => "subscribe",
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusReport {
    pub jobs: JobCounts,
    /// Live (registered) workers.
    pub workers: usize,
    pub workers_busy: usize,
    pub server_version: String,
    /// Whether the master can commit its state now. `degraded`: it answers
    /// reads from memory and refuses every change (`storage_unavailable`)
    /// until a probe commits again. Absent from older masters: `ok`.
    #[serde(default)]
    pub storage: StorageHealth,
    /// Why the store is degraded (the cause and the file or server), and
    /// since when; absent while it is `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_problem: Option<StorageProblem>,
    /// The connected workers by what they tune on: each kind of device
    /// (a GPU model and its memory, a CPU) and target kind, with how many
    /// workers and how many are busy. Absent from older masters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceGroup>,
    /// Open jobs whose target no connected worker serves: they wait in the
    /// queue for one (a CUDA job on a farm of CPU workers). Absent when
    /// every open job has a worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved: Vec<UnservedTarget>,
}

/// [`StatusReport::devices`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceGroup {
    /// None: workers that did not say (earlier releases).
    #[serde(default)]
    pub device: Option<Device>,
    /// The workers' target kind (`cuda`, `llvm`) and `arch`, if any.
    pub target_kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    pub workers: usize,
    pub busy: usize,
}

/// [`StatusReport::unserved`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UnservedTarget {
    pub target: Target,
    /// Open jobs for it (all queued: none can be running).
    pub jobs: usize,
}

/// [`StatusReport::storage`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StorageHealth {
    #[default]
    Ok,
    Degraded,
}

/// [`StatusReport::storage_problem`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StorageProblem {
    /// The store's error, naming the file or server and the cause.
    pub reason: String,
    /// When the first commit failed (ms since the epoch).
    pub since: Millis,
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
            ClientCommand::Subscribe { deltas } => {
                f.debug_struct("Subscribe").field("deltas", deltas).finish()
            }
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
