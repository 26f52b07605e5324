//! What connection tasks ask of the core, sorted by type into the kinds the
//! core treats differently, so that no list of reads is kept by hand:
//!
//! - a [`Change`] is applied in its batch and answered once the batch is
//!   committed; while the store cannot commit it is refused at once (its
//!   reply dropped, which the network layer answers `storage_unavailable`);
//! - a [`Read`] is answered after the batch from memory, degraded or not
//!   (`net::read` takes only reads: it may stop waiting for one);
//! - [`Command::Tick`] fires timeouts and retention, or, while degraded,
//!   probes the store; [`Command::Shutdown`] ends the core after its batch.
//!
//! A new command is a variant of [`Change`] or [`Read`] and its handler,
//! one method on `Core` named after it (`Core::change` and `Core::answer`
//! dispatch, one line per command).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tunefleet_shared::import::{ImportReport, ImportedWorkload, WorkloadKey};
use tunefleet_shared::model::{ArtifactFile, ModelArtifactKind, ModelSubmission, ModelView};
use tunefleet_shared::protocol::{
    JobId, JobResult, JobView, Lease, StatusReport, SubmitReport, TokenInfo, WorkerHello,
};
use tunefleet_shared::workload::Workload;

use super::{Outbound, SharedSnapshot};
use crate::metrics::FleetMetrics;
use crate::models::ModelError;
use crate::scheduler::{
    CachePolicy, CommandError, JoinRefusal, LeaveKind, ProgressReport, SessionId,
};
use crate::tokens::TokenError;

pub enum Command {
    Change(Change),
    Read(Read),
    Tick,
    Shutdown { done: oneshot::Sender<()> },
}

impl From<Change> for Command {
    fn from(change: Change) -> Command {
        Command::Change(change)
    }
}

impl From<Read> for Command {
    fn from(read: Read) -> Command {
        Command::Read(read)
    }
}

/// What the core sends a worker's connection, with the session (slot) it is
/// for: a worker with several slots has one channel for all of them.
pub type WorkerTx = mpsc::UnboundedSender<(SessionId, Outbound)>;

/// Commands that change the fleet: committed before they are answered.
pub enum Change {
    /// One session per slot of the worker (`register`'s `slots`), in order;
    /// the reply has them all and the count of matching jobs.
    WorkerJoin {
        hello: Box<WorkerHello>,
        tx: WorkerTx,
        reply: oneshot::Sender<Result<(Vec<SessionId>, usize), JoinRefusal>>,
    },
    WorkerLeave {
        session: SessionId,
        kind: LeaveKind,
        reason: String,
    },
    Worker {
        session: SessionId,
        input: WorkerInput,
    },
    Submit {
        workloads: Vec<Workload>,
        cache: CachePolicy,
        /// The admin token's name; `None` for start-up files.
        by: Option<String>,
        reply: oneshot::Sender<SubmitReport>,
    },
    /// `cancel` or `retry` of one job, by an admin token's name.
    JobAction {
        job_id: JobId,
        action: JobAction,
        by: String,
        reply: oneshot::Sender<Result<(), CommandError>>,
    },
    /// `tunefleet import`: records to seed later jobs; an `Err` names the
    /// entry that is not valid (nothing is stored then).
    Import {
        workloads: Vec<ImportedWorkload>,
        keys: Vec<WorkloadKey>,
        reply: oneshot::Sender<Result<ImportReport, String>>,
    },
    CreateToken {
        name: String,
        /// The new token's text.
        reply: oneshot::Sender<Result<String, TokenError>>,
    },
    RevokeToken {
        name: String,
        reply: oneshot::Sender<Result<(), TokenError>>,
    },
    SubmitModel {
        submission: Box<ModelSubmission>,
        reply: oneshot::Sender<Result<JobId, ModelError>>,
    },
    StopModel {
        name: String,
        reply: oneshot::Sender<Result<(), ModelError>>,
    },
}

/// What an admin does to one job (`Change::JobAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobAction {
    Cancel,
    Retry,
}

impl JobAction {
    /// The word the job's log of actions keeps.
    pub fn name(self) -> &'static str {
        match self {
            JobAction::Cancel => "cancel",
            JobAction::Retry => "retry",
        }
    }
}

/// Messages from a registered worker, minus the token (checked by the connection).
#[derive(Debug)]
pub enum WorkerInput {
    RequestJob,
    Progress(ProgressReport),
    Result {
        job_id: JobId,
        lease: Lease,
        result: Box<JobResult>,
    },
    Failed {
        job_id: JobId,
        lease: Lease,
        error: String,
    },
}

/// Commands that only read: answered after the batch (committed, or rolled
/// back) from memory, so that none shows a change the store has not taken.
pub enum Read {
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
    Metrics {
        reply: oneshot::Sender<FleetMetrics>,
    },
    /// The jobs held, or those named (archived ones read back from the
    /// store), unsorted: the views are shared, and the network layer sorts
    /// and copies them off this thread (with 30,000 jobs the copy took the
    /// core ~100 ms). The whole archive is read there too.
    Results {
        job_ids: Option<Vec<JobId>>,
        reply: oneshot::Sender<Vec<Arc<JobView>>>,
    },
    ListTokens {
        reply: oneshot::Sender<Vec<TokenInfo>>,
    },
    Models {
        name: Option<String>,
        reply: oneshot::Sender<Result<Vec<ModelView>, ModelError>>,
    },
    ModelArtifact {
        name: String,
        artifact: ModelArtifactKind,
        reply: oneshot::Sender<Result<Vec<ArtifactFile>, String>>,
    },
    /// The fleet as a `snapshot` message; subscribers asking at the same
    /// seq share one.
    Snapshot {
        reply: oneshot::Sender<Arc<SharedSnapshot>>,
    },
}
