//! Durable state: one SQLite file (the embedded default) or a PostgreSQL
//! database (`--state postgres://...`, for a team's shared server and a
//! standby master).
//!
//! The database is the master's memory across crashes: a `kill -9` loses
//! nothing that was acknowledged, because the core commits each batch of state
//! changes here *before* it sends any reply, ack or assignment that depends on
//! them (see `core/`). Batching is what makes that affordable: one
//! transaction per batch of events, not per event (group commit).
//!
//! Both stores hold the same tables with the same columns: `jobs` holds each
//! job's latest state (a `row` of its own, not the wire view);
//! `workloads` its workload, written once, in a table of its own so that a
//! change of state never rewrites it (SQLite rewrites a whole row on any
//! update, a MiB of TVMScript included); `warm_starts` a live job's warm
//! start, for the same reason (a model round's is its task's records so far,
//! MiBs; written once, deleted when the job ends); `models` and `artifacts`
//! the model runs (a `model_row` each, not the planner's state, without its
//! records) and their compiled libraries; `model_records` each record a run
//! keeps, written once when a round brings it and deleted when better ones
//! push it out (a commit compares keys, not records); `cost_models` the
//! fleet's trained cost model per effective target and TVM release (its
//! bytes a blob this module never reads, upserted when the core keeps one);
//! `trace` is the append-only log of state changes (what
//! `tunefleet export-trace` prints: lifecycle lines, not whole views;
//! progress is never stored); `meta` holds the schema version. The
//! rows are encoded here, once; a backend (`sqlite`, `postgres`) only
//! moves text and bytes in and out of its tables in one transaction per
//! batch. A database of an older schema is migrated in place (`migrate`,
//! SQLite only: PostgreSQL support began at schema 2) after a backup copy is
//! written beside it; a newer one is refused by both.
//!
//! This module never decides anything: it stores what the core hands it.

mod calls;
mod migrate;
mod model_row;
mod postgres;
mod row;
mod sqlite;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tunefleet_shared::protocol::{JobId, JobState, Millis};

use crate::cost_models::{CostModel, CostModelKey};
use crate::models::{sort_best_first, KeptRecord, ModelRun};
use crate::scheduler::Job;
pub use calls::CallClock;
pub use row::TraceJob;
use tunefleet_shared::model::base64;

/// 1: jobs rows were the scheduler's `Job` whole. 2: `row::JobRowOut` plus
/// a `workload` column; compact trace lines. 3: `jobs.archived_at` and
/// `jobs.content_key` (`--job-retention`: finished jobs kept in the database
/// only, found again by id or by computation). 4: the workload moves from
/// `jobs.workload` to a `workloads` table. 5: a model run's records move from
/// its `models` row to rows of their own in `model_records` (lazily: an
/// older row's records move with the run's next commit). 6: the fleet's
/// trained cost models, a row per effective target and TVM release
/// (`cost_models`; an older database starts with none).
pub const SCHEMA_VERSION: i64 = 6;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}{}: {cause}", sqlite::explain(cause))]
    Sqlite {
        path: String,
        cause: rusqlite::Error,
    },
    #[error("state database {path} is in use by another master{}: one master per state file (stop it, or give this one another --state)", holder.as_deref().map(|p| format!(" (pid {p})")).unwrap_or_default())]
    InUse {
        path: String,
        holder: Option<String>,
    },
    #[error("state database {path}: cannot create its lock file {lock} (may this user write to that directory?): {cause}")]
    Lock {
        path: String,
        lock: String,
        cause: std::io::Error,
    },
    #[error("state database {path}: {}", with_causes(cause))]
    Postgres {
        path: String,
        cause: ::postgres::Error,
    },
    #[error("state database {path} has schema version {found}, newer than this tunefleet's ({SCHEMA_VERSION}): it was written by a later release; run that release, or start this one with another --state")]
    Newer { path: String, found: i64 },
    #[error("state database {path} has schema version {found}, which no tunefleet release wrote")]
    UnknownSchema { path: String, found: String },
    #[error("state database {path}: cannot migrate from schema {from} to {to}: {reason}")]
    Migration {
        path: String,
        from: i64,
        to: i64,
        reason: String,
    },
    #[error("state database {path}: job row {job_id} is unreadable: {message}")]
    CorruptJob {
        path: String,
        job_id: String,
        message: String,
    },
    #[error("writing the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("state database {path} is full, or its file system has no room left ({cause}): free space beside it")]
    NoRoom { path: String, cause: std::io::Error },
    #[error("state database {path}: the connection to the server was lost")]
    Disconnected { path: String },
    #[error("state database {path}: another master took the lead while this one could not reach the database ({holder}); this one steps down and waits as its standby (nothing unsaved was acknowledged)")]
    LeadLost { path: String, holder: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Survives a crash of the master process (SQLite: WAL,
    /// synchronous=NORMAL; PostgreSQL: its own settings, fsync on commit by
    /// default).
    Normal,
    /// Also survives an OS crash or power loss (SQLite: synchronous=FULL;
    /// PostgreSQL: synchronous_commit=on for this master's session).
    Full,
}

impl StoreError {
    /// Whether a commit may succeed later without a restart: a full disk, a
    /// file system gone read-only, a lock held for a moment, a PostgreSQL
    /// server restarted or a session ended. A lead another master took while
    /// the connection was down is not.
    pub fn is_transient(&self) -> bool {
        use rusqlite::ErrorCode as C;
        match self {
            StoreError::Sqlite { cause, .. } => matches!(
                cause.sqlite_error_code(),
                Some(
                    C::DiskFull
                        | C::SystemIoFailure
                        | C::ReadOnly
                        | C::DatabaseBusy
                        | C::DatabaseLocked
                        | C::CannotOpen
                )
            ),
            StoreError::Io(_) | StoreError::NoRoom { .. } | StoreError::Disconnected { .. } => true,
            // The probe reconnects; a session that lost the lead with its
            // connection is `LeadLost`, which is not transient.
            StoreError::Postgres { .. } => true,
            _ => false,
        }
    }
}

/// An error and its chain of sources, `: `-separated (the PostgreSQL
/// client's own text leaves the reason to its source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

/// Where the state lives: what `--state` names.
#[derive(Clone, PartialEq, Eq)]
pub enum StateLocation {
    File(PathBuf),
    /// A `postgres://` or `postgresql://` URL (password in it or in
    /// `PGPASSWORD`).
    Postgres(String),
}

impl StateLocation {
    pub fn parse(text: &str) -> Result<StateLocation, String> {
        let trimmed = text.trim();
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            trimmed
                .parse::<::postgres::Config>()
                .map_err(|e| format!("{}: not a PostgreSQL URL: {e}", redact(trimmed)))?;
            Ok(StateLocation::Postgres(trimmed.to_string()))
        } else if trimmed.is_empty() {
            Err("--state needs a file or a postgres:// URL".into())
        } else if let Some((scheme, _)) = trimmed.split_once("://") {
            Err(format!(
                "{trimmed}: unknown state scheme `{scheme}://`: give a SQLite file path or a postgres://USER@HOST:PORT/DB URL"
            ))
        } else {
            Ok(StateLocation::File(PathBuf::from(trimmed)))
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, StateLocation::Postgres(_))
    }
}

/// Printable: a URL's password is never shown.
impl std::fmt::Display for StateLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateLocation::File(path) => write!(f, "{}", path.display()),
            StateLocation::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl std::fmt::Debug for StateLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_string(),
    }
}

/// One job's row as a backend writes it.
pub(super) struct JobWrite<'a> {
    job_id: &'a str,
    state: &'static str,
    queue_key: i64,
    data: String,
    /// Only for a job not stored yet: the workload is written once.
    workload: Option<String>,
}

/// One job's row as a backend reads it.
pub(super) struct JobRead {
    job_id: String,
    queue_key: i64,
    data: String,
    /// `None` when `workloads` has no row for the job (a damaged file):
    /// reported with the job's id, not skipped.
    workload: Option<String>,
    /// From `warm_starts`, when the job has one there.
    warm_start: Option<String>,
}

/// Which archived jobs to read back.
#[derive(Clone, Copy, Debug)]
pub enum Archived<'a> {
    /// These ids (those that are archived).
    Ids(&'a [String]),
    /// Done jobs of this computation ([`Workload::content_key`]), newest
    /// first, at most [`MAX_ARCHIVED_PER_KEY`]: the tuning cache's entries.
    ///
    /// [`Workload::content_key`]: tunefleet_shared::workload::Workload::content_key
    Done { content_key: &'a str },
    /// Every archived job (`results --archived`, `export`).
    All,
}

/// Each job's workload, apart from its state: written when the job is first
/// stored and never updated (an id is the computation's content hash). The same
/// statement in both backends, for a new database and in the migration from
/// schema 3.
pub(super) const WORKLOADS_TABLE: &str = "CREATE TABLE IF NOT EXISTS workloads (
     job_id TEXT PRIMARY KEY,
     workload TEXT NOT NULL
 )";

/// Each live job's warm start, apart from its row: written once when the
/// job is stored, deleted when it ends. A model round's is the task's
/// records so far, up to MiBs, and a round's row is written three or four
/// times (queued, assigned, running, ended). The same statement in both
/// backends, for a new database and in the migration from schema 4.
pub(super) const WARM_STARTS_TABLE: &str = "CREATE TABLE IF NOT EXISTS warm_starts (
     job_id TEXT PRIMARY KEY,
     warm_start TEXT NOT NULL
 )";

/// A job's columns as [`JobRead`] takes them, its workload and warm start
/// joined in. Left joined: a job without its workload is an error that
/// names it; most jobs have no warm start.
pub(super) const JOB_COLUMNS: &str = "SELECT job_id, queue_key, data, workload, warm_start
     FROM jobs LEFT JOIN workloads USING (job_id) LEFT JOIN warm_starts USING (job_id)";

/// Each record a model run keeps, apart from the run's row: written once
/// when a round brings it, deleted when better ones push it out. `key` is
/// [`crate::models::KeptRecord::key`]; `task` the task's place in the run.
/// The same statement in both backends, for a new database and in the
/// migration from schema 4.
pub(super) const MODEL_RECORDS_TABLE: &str = "CREATE TABLE IF NOT EXISTS model_records (
     model TEXT NOT NULL,
     key TEXT NOT NULL,
     task BIGINT NOT NULL,
     data TEXT NOT NULL,
     PRIMARY KEY (model, key)
 )";

/// The fleet's trained cost model per effective target and TVM release
/// (`cost_models::CostModelKey`): its bytes (the driver's format, never read
/// here) and what the core needs to choose and send it. Upserted when a
/// round's model is kept; read at start-up. `bytes` is the backend's binary
/// type. For a new database and in the migration from schema 5.
pub(super) fn cost_models_table(bytes: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS cost_models (
             target TEXT NOT NULL,
             tvm TEXT NOT NULL,
             id TEXT NOT NULL,
             samples BIGINT NOT NULL,
             tvm_version TEXT,
             updated_at BIGINT NOT NULL,
             data {bytes} NOT NULL,
             PRIMARY KEY (target, tvm)
         )"
    )
}

/// One `cost_models` row, written or read.
pub(super) struct CostModelRow {
    target: String,
    tvm: String,
    id: String,
    samples: i64,
    tvm_version: Option<String>,
    updated_at: i64,
    data: Vec<u8>,
}

/// One record row to write.
pub(super) struct RecordWrite<'a> {
    model: &'a str,
    key: &'a str,
    task: i64,
    data: String,
}

/// One record row as a backend reads it.
pub(super) struct RecordRead {
    model: String,
    key: String,
    task: i64,
    data: String,
}

/// The cache's lookup of archived entries by computation; partial, so the
/// live jobs (the hot rows) pay nothing for it. The same statement in both
/// backends, for a new database and in the migration from schema 2.
pub(super) const ARCHIVED_INDEX: &str = "CREATE INDEX IF NOT EXISTS jobs_archived_by_key
     ON jobs (content_key, state) WHERE archived_at IS NOT NULL";

/// Most archived entries one cache lookup brings back: a computation tuned
/// again and again for the same target needs only its best few.
pub const MAX_ARCHIVED_PER_KEY: i64 = 16;

/// One job moved out of memory: its row stays, marked, and findable by its
/// computation.
pub(super) struct ArchiveWrite {
    job_id: JobId,
    content_key: String,
    at: Millis,
}

/// One commit's rows.
pub(super) struct RowBatch<'a, 'b> {
    jobs: &'b [JobWrite<'a>],
    /// Rows to mark archived, after `jobs` are written.
    archive: &'b [ArchiveWrite],
    models: &'b [(&'a str, &'static str, String)],
    /// Model records new since the run's last commit.
    records: &'b [RecordWrite<'a>],
    /// (model, key) of records the run no longer keeps.
    records_gone: &'b [(&'a str, String)],
    /// Warm starts to write (`Some`) or delete (`None`), by job id.
    warm_starts: &'b [(&'a str, Option<String>)],
    artifacts: &'b [(String, &'static str, Vec<u8>)],
    trace: &'b [(Millis, String)],
    /// `meta` rows to upsert, or delete (`None`).
    meta: &'b [(String, Option<String>)],
    /// Cost models kept since the last commit (upserts).
    cost_models: &'b [CostModelRow],
}

/// What a backend does: move rows in and out, one transaction per commit.
trait Backend: Send {
    /// Every job that is not archived.
    fn load_job_rows(&mut self) -> Result<Vec<JobRead>, StoreError>;
    fn load_archived_rows(&mut self, which: Archived<'_>) -> Result<Vec<JobRead>, StoreError>;
    /// (state, count) of the archived jobs.
    fn archived_counts(&mut self) -> Result<Vec<(String, i64)>, StoreError>;
    /// (name, data) of every model run, by name.
    fn load_model_rows(&mut self) -> Result<Vec<(String, String)>, StoreError>;
    /// Every row of `model_records`.
    fn load_model_records(&mut self) -> Result<Vec<RecordRead>, StoreError>;
    fn load_artifact(&mut self, run: &str, kind: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every row of `cost_models`.
    fn load_cost_models(&mut self) -> Result<Vec<CostModelRow>, StoreError>;
    fn commit(&mut self, batch: &RowBatch<'_, '_>) -> Result<(), StoreError>;
    /// (key, value) of the `meta` rows whose key starts with `prefix`.
    fn load_meta(&mut self, prefix: &str) -> Result<Vec<(String, String)>, StoreError>;
    fn prune_trace(&mut self, before: Millis) -> Result<u64, StoreError>;
    /// After a failed commit: give back what the failed transaction took
    /// (SQLite: the WAL it grew), where that can be done.
    fn after_failed_commit(&mut self) {}
    /// Whether a commit may succeed again (called once a second while
    /// commits fail): room on the disk, a connection to the server. A
    /// reconnected PostgreSQL session must take the lead again.
    fn probe(&mut self) -> Result<(), StoreError>;
    /// Whether commits cannot work now, found without committing: the
    /// PostgreSQL session is gone (the server restarted or ended it), the
    /// SQLite file's disk is full. Checked between batches, once a second,
    /// so that an idle master says so before its next commit fails (and a
    /// standby that took the lead meanwhile does not serve beside it long).
    fn unavailable(&mut self) -> Option<StoreError> {
        None
    }
    /// Whether the session is known to be gone, without asking anything:
    /// a read on it would only wait for the connection's timeouts.
    fn session_lost(&self) -> bool {
        false
    }
    /// (seq, at, event) in order, to `line`.
    fn export_trace(
        &mut self,
        line: &mut dyn FnMut(i64, i64, &str) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError>;
    fn path(&self) -> &str;
}

pub struct Store {
    backend: Box<dyn Backend>,
    /// Set around every backend call (see `calls`).
    calls: Arc<CallClock>,
    /// Jobs in memory that have a row: only new ones need their workload
    /// written (an archived job coming back is an upsert that keeps it).
    stored: HashSet<String>,
    /// Jobs to mark archived with the next commit.
    pending_archive: Vec<ArchiveWrite>,
    /// For each model run, the keys of its records that have a row in
    /// `model_records`: a commit writes only the others, and deletes the
    /// rows of records the run no longer keeps.
    stored_records: HashMap<String, HashSet<String>>,
    /// Jobs whose warm start has a row in `warm_starts`.
    warm_stored: HashSet<JobId>,
    /// Cost models to write with the next commit.
    pending_cost_models: Vec<CostModelRow>,
    /// Unit tests: every commit and probe fails as on a full disk.
    #[cfg(test)]
    pub(crate) fail_commits: bool,
}

/// How a master that finds another one leading the same PostgreSQL database
/// waits (see [`Store::open_leader`]).
#[derive(Clone, Debug)]
pub struct Standby {
    /// How often the lead is tried while another master holds it.
    pub poll: Duration,
    /// What this master's sessions are called on the server
    /// (`application_name`, e.g. `tunefleet serve 10.0.0.5:18871`), so that a
    /// master that finds the lead taken can say where it went.
    pub name: String,
}

impl Store {
    /// Opens (creating or migrating) a SQLite state file.
    pub fn open(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        Ok(Store::with(Box::new(sqlite::SqliteStore::open(
            path, durability,
        )?)))
    }

    /// Opens the state where `--state` says. For PostgreSQL, this master
    /// must lead: while another master holds the lead, it waits as a standby
    /// (polling every `standby.poll`) and returns once it leads. `on_wait` is
    /// called once, when waiting begins, with who leads.
    pub fn open_leader(
        location: &StateLocation,
        durability: Durability,
        standby: Standby,
        on_wait: &mut dyn FnMut(&str),
    ) -> Result<Store, StoreError> {
        match location {
            StateLocation::File(path) => Store::open(path, durability),
            StateLocation::Postgres(url) => Ok(Store::with(Box::new(
                postgres::PgStore::open_leader(url, durability, standby, on_wait)?,
            ))),
        }
    }

    /// Opens an existing database without creating or changing anything (and,
    /// for PostgreSQL, without taking the lead).
    pub fn open_read_only(location: &StateLocation) -> Result<Store, StoreError> {
        let backend: Box<dyn Backend> = match location {
            StateLocation::File(path) => Box::new(sqlite::SqliteStore::open_read_only(path)?),
            StateLocation::Postgres(url) => Box::new(postgres::PgStore::open_read_only(url)?),
        };
        Ok(Store::with(backend))
    }

    fn with(backend: Box<dyn Backend>) -> Store {
        Store {
            backend,
            calls: Arc::default(),
            stored: HashSet::new(),
            pending_archive: Vec::new(),
            stored_records: HashMap::new(),
            warm_stored: HashSet::new(),
            pending_cost_models: Vec::new(),
            #[cfg(test)]
            fail_commits: false,
        }
    }

    /// The clock the network layer reads to see whether the core waits on
    /// the database (see `calls`).
    pub fn call_clock(&self) -> Arc<CallClock> {
        Arc::clone(&self.calls)
    }

    fn clock(&self) -> Arc<CallClock> {
        Arc::clone(&self.calls)
    }

    /// See `Backend::session_lost`.
    pub fn session_lost(&self) -> bool {
        self.backend.session_lost()
    }

    /// The jobs the master holds in memory: all but the archived ones.
    pub fn load_jobs(&mut self) -> Result<Vec<Job>, StoreError> {
        let _call = self.clock().start_owned();
        let rows = self.backend.load_job_rows()?;
        self.warm_stored = rows
            .iter()
            .filter(|row| row.warm_start.is_some())
            .map(|row| row.job_id.clone())
            .collect();
        let jobs = self.decode_jobs(rows)?;
        self.stored = jobs.iter().map(|j| j.id().clone()).collect();
        Ok(jobs)
    }

    /// Archived jobs, read back (see [`Archived`]). Reading changes nothing:
    /// a job is live again only once the core writes it.
    pub fn load_archived(&mut self, which: Archived<'_>) -> Result<Vec<Job>, StoreError> {
        let _call = self.clock().start_owned();
        let rows = self.backend.load_archived_rows(which)?;
        self.decode_jobs(rows)
    }

    /// How many archived jobs end in each state.
    pub fn archived_counts(&mut self) -> Result<Vec<(JobState, u64)>, StoreError> {
        let mut counts = Vec::new();
        let _call = self.clock().start_owned();
        for (state, n) in self.backend.archived_counts()? {
            let state = JobState::parse(&state).ok_or_else(|| StoreError::CorruptJob {
                path: self.backend.path().to_string(),
                job_id: format!("({n} archived)"),
                message: format!("unknown state `{state}`"),
            })?;
            counts.push((state, n.max(0) as u64));
        }
        Ok(counts)
    }

    /// Marks jobs archived in the next commit (their rows stay).
    pub fn archive(&mut self, jobs: impl IntoIterator<Item = (JobId, String)>, at: Millis) {
        for (job_id, content_key) in jobs {
            // An archived row is updated in place if the job comes back.
            self.stored.remove(&job_id);
            self.pending_archive.push(ArchiveWrite {
                job_id,
                content_key,
                at,
            });
        }
    }

    /// A job that came back into memory is not to be marked archived by a
    /// commit still pending (it was archived and brought back in one batch).
    pub fn keep_live(&mut self, job_id: &str) {
        self.pending_archive.retain(|row| row.job_id != job_id);
    }

    fn decode_jobs(&self, rows: Vec<JobRead>) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::with_capacity(rows.len());
        for raw in rows {
            let corrupt = |what: &str, e: serde_json::Error| StoreError::CorruptJob {
                path: self.backend.path().to_string(),
                job_id: raw.job_id.clone(),
                message: format!("{what}: {e}"),
            };
            let row: row::JobRowIn =
                serde_json::from_str(&raw.data).map_err(|e| corrupt("data", e))?;
            let Some(workload) = &raw.workload else {
                return Err(StoreError::CorruptJob {
                    path: self.backend.path().to_string(),
                    job_id: raw.job_id.clone(),
                    message: "no row in `workloads`".into(),
                });
            };
            let workload = serde_json::from_str(workload).map_err(|e| corrupt("workload", e))?;
            let mut job = row.into_job(raw.job_id.clone(), raw.queue_key, workload);
            if let Some(warm) = &raw.warm_start {
                job.extras.warm_start =
                    Some(serde_json::from_str(warm).map_err(|e| corrupt("warm_start", e))?);
            }
            jobs.push(job);
        }
        Ok(jobs)
    }

    pub fn load_models(&mut self) -> Result<Vec<ModelRun>, StoreError> {
        let path = self.backend.path().to_string();
        let corrupt = |name: &str, message: String| StoreError::CorruptJob {
            path: path.clone(),
            job_id: format!("model run {name}"),
            message,
        };
        let mut runs = Vec::new();
        let _call = self.clock().start_owned();
        for (name, data) in self.backend.load_model_rows()? {
            let row: model_row::ModelRowIn =
                serde_json::from_str(&data).map_err(|e| corrupt(&name, e.to_string()))?;
            runs.push(row.into_run());
        }
        let mut stored: HashMap<String, HashSet<String>> = HashMap::new();
        let by_name: HashMap<String, usize> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        for row in self.backend.load_model_records()? {
            let Some(&i) = by_name.get(&row.model) else {
                return Err(corrupt(
                    &row.model,
                    format!("record {} has no `models` row", row.key),
                ));
            };
            let run = &mut runs[i];
            let task = usize::try_from(row.task)
                .ok()
                .and_then(|t| run.tasks.get_mut(t))
                .ok_or_else(|| {
                    corrupt(
                        &row.model,
                        format!(
                            "record {} names task {}, which the run does not have",
                            row.key, row.task
                        ),
                    )
                })?;
            let record = serde_json::from_str(&row.data)
                .map_err(|e| corrupt(&row.model, format!("record {}: {e}", row.key)))?;
            task.records.push(KeptRecord {
                key: row.key.clone(),
                record,
            });
            stored.entry(row.model).or_default().insert(row.key);
        }
        for run in &mut runs {
            for task in &mut run.tasks {
                sort_best_first(&mut task.records);
            }
        }
        self.stored_records = stored;
        Ok(runs)
    }

    /// A stored artefact of a model run (`library`), if any.
    pub fn load_artifact(&mut self, run: &str, kind: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let _call = self.clock().start_owned();
        self.backend.load_artifact(run, kind)
    }

    /// The fleet's cost models, as kept.
    pub fn load_cost_models(&mut self) -> Result<Vec<(CostModelKey, CostModel)>, StoreError> {
        let _call = self.clock().start_owned();
        let rows = self.backend.load_cost_models()?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let key = CostModelKey {
                    target: row.target,
                    tvm: row.tvm,
                };
                let model = CostModel {
                    id: row.id,
                    samples: u32::try_from(row.samples).unwrap_or(0),
                    tvm_version: row.tvm_version,
                    data_b64: base64::encode(&row.data),
                    updated_at: Millis(u64::try_from(row.updated_at).unwrap_or(0)),
                };
                (key, model)
            })
            .collect())
    }

    /// A cost model to write with the next commit (forgotten if it fails).
    pub fn put_cost_model(&mut self, key: &CostModelKey, model: &CostModel) {
        let data = match base64::decode(&model.data_b64) {
            Ok(data) => data,
            Err(e) => {
                tracing::error!(id = %model.id, "a cost model that is not base64 is not stored: {e}");
                return;
            }
        };
        self.pending_cost_models.push(CostModelRow {
            target: key.target.clone(),
            tvm: key.tvm.clone(),
            id: model.id.clone(),
            samples: i64::from(model.samples),
            tvm_version: model.tvm_version.clone(),
            updated_at: model.updated_at.0 as i64,
            data,
        });
    }

    /// Whether cost models wait for the next commit.
    pub fn has_pending_cost_models(&self) -> bool {
        !self.pending_cost_models.is_empty()
    }

    /// `meta` rows whose key starts with `prefix` (named tokens).
    pub fn load_meta(&mut self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let _call = self.clock().start_owned();
        self.backend.load_meta(prefix)
    }

    /// Writes a batch of changed jobs, model runs, artefacts and trace lines
    /// in one transaction.
    pub fn commit<'a, 'b>(
        &mut self,
        jobs: impl IntoIterator<Item = &'a Job>,
        models: impl IntoIterator<Item = &'b ModelRun>,
        artifacts: &[(String, &'static str, Vec<u8>)],
        trace: &[(Millis, String)],
    ) -> Result<(), StoreError> {
        self.commit_with_meta(jobs, models, artifacts, trace, &[])
    }

    /// [`Store::commit`] with `meta` rows to upsert or delete (`None`).
    pub fn commit_with_meta<'a, 'b>(
        &mut self,
        jobs: impl IntoIterator<Item = &'a Job>,
        models: impl IntoIterator<Item = &'b ModelRun>,
        artifacts: &[(String, &'static str, Vec<u8>)],
        trace: &[(Millis, String)],
        meta: &[(String, Option<String>)],
    ) -> Result<(), StoreError> {
        #[cfg(test)]
        self.injected_failure()?;
        let mut jobs: Vec<&'a Job> = jobs.into_iter().collect();
        // In queue order, not the caller's (the core's is by id, a hash): a
        // new row's rowid, so its place in the file, follows the order in
        // which jobs are dispatched and finished. A batch's assignments and
        // results then rewrite a few neighbouring pages instead of one page
        // (and its splits) per job: three times fewer WAL pages per job in
        // `tunefleet-bench`, and as many fewer for the checkpoint to copy.
        jobs.sort_by_key(|job| job.queue_key);
        let warm_starts = self.changed_warm_starts(&jobs);
        let jobs: Vec<JobWrite<'a>> = jobs
            .into_iter()
            .map(|job| JobWrite {
                job_id: job.id(),
                state: job.state().as_str(),
                queue_key: job.queue_key,
                data: serde_json::to_string(&row::JobRowOut::of(job)).unwrap_or_default(),
                workload: (!self.stored.contains(job.id()))
                    .then(|| serde_json::to_string(&job.view.workload).unwrap_or_default()),
            })
            .collect();
        let models: Vec<&'b ModelRun> = models.into_iter().collect();
        let (records, records_gone) = self.changed_records(&models);
        let models: Vec<(&str, &'static str, String)> = models
            .into_iter()
            .map(|run| {
                (
                    run.name.as_str(),
                    run.state.as_str(),
                    serde_json::to_string(&model_row::ModelRowOut::of(run)).unwrap_or_default(),
                )
            })
            .collect();
        let _call = self.clock().start_owned();
        self.backend.commit(&RowBatch {
            jobs: &jobs,
            archive: &self.pending_archive,
            models: &models,
            records: &records,
            records_gone: &records_gone,
            warm_starts: &warm_starts,
            artifacts,
            trace,
            meta,
            cost_models: &self.pending_cost_models,
        })?;
        self.pending_cost_models.clear();
        // Only once committed: a failed commit writes them again.
        for (job_id, warm) in &warm_starts {
            if warm.is_some() {
                self.warm_stored.insert(job_id.to_string());
            } else {
                self.warm_stored.remove(*job_id);
            }
        }
        for record in &records {
            self.stored_records
                .entry(record.model.to_string())
                .or_default()
                .insert(record.key.to_string());
        }
        for (model, key) in &records_gone {
            if let Some(keys) = self.stored_records.get_mut(*model) {
                keys.remove(key);
            }
        }
        // Only once committed: a failed commit is retried with the workload.
        for job in &jobs {
            if job.workload.is_some() {
                self.stored.insert(job.job_id.to_string());
            }
        }
        self.pending_archive.clear();
        Ok(())
    }

    /// The warm-start rows a commit of `jobs` writes (a live job's, not yet
    /// stored) and deletes (an ended job's), each job once, as last written.
    fn changed_warm_starts<'a>(&self, jobs: &[&'a Job]) -> Vec<(&'a str, Option<String>)> {
        let mut seen = HashSet::new();
        let mut changes = Vec::new();
        for job in jobs.iter().rev().filter(|job| seen.insert(job.id())) {
            let stored = self.warm_stored.contains(job.id());
            let live = !job.state().is_terminal();
            match (&job.extras.warm_start, live, stored) {
                (Some(warm), true, false) => changes.push((
                    job.id().as_str(),
                    Some(serde_json::to_string(warm).unwrap_or_default()),
                )),
                (None, _, true) | (_, false, true) => changes.push((job.id().as_str(), None)),
                _ => {}
            }
        }
        changes
    }

    /// The record rows a commit of `models` writes and deletes: those of
    /// records new since each run's last commit, and of those it dropped.
    /// Only keys are compared; a record's JSON is written once.
    fn changed_records<'b>(
        &self,
        models: &[&'b ModelRun],
    ) -> (Vec<RecordWrite<'b>>, Vec<(&'b str, String)>) {
        let none = HashSet::new();
        let (mut new, mut gone) = (Vec::new(), Vec::new());
        // A run twice in one batch is written once, as it is last.
        let mut seen = HashSet::new();
        for run in models
            .iter()
            .rev()
            .filter(|run| seen.insert(run.name.as_str()))
        {
            let stored = self.stored_records.get(&run.name).unwrap_or(&none);
            let mut kept = HashSet::new();
            for (ti, task) in run.tasks.iter().enumerate() {
                for kept_record in &task.records {
                    kept.insert(kept_record.key.as_str());
                    if !stored.contains(&kept_record.key) {
                        new.push(RecordWrite {
                            model: &run.name,
                            key: &kept_record.key,
                            task: ti as i64,
                            data: serde_json::to_string(&kept_record.record).unwrap_or_default(),
                        });
                    }
                }
            }
            gone.extend(
                stored
                    .iter()
                    .filter(|key| !kept.contains(key.as_str()))
                    .map(|key| (run.name.as_str(), key.clone())),
            );
        }
        (new, gone)
    }

    /// After a commit failed: the archive marks it carried are forgotten
    /// (the core reads its state back, those jobs included), and the
    /// backend gives back what the failed transaction took.
    pub fn forget_failed(&mut self) {
        self.pending_archive.clear();
        self.pending_cost_models.clear();
        self.backend.after_failed_commit();
    }

    /// See `Backend::unavailable`.
    pub fn unavailable(&mut self) -> Option<StoreError> {
        let _call = self.clock().start_owned();
        self.backend.unavailable()
    }

    /// See `Backend::probe`; the probe's commit is the core's.
    pub fn probe(&mut self) -> Result<(), StoreError> {
        #[cfg(test)]
        self.injected_failure()?;
        let _call = self.clock().start_owned();
        self.backend.probe()
    }

    #[cfg(test)]
    fn injected_failure(&self) -> Result<(), StoreError> {
        if !self.fail_commits {
            return Ok(());
        }
        Err(StoreError::NoRoom {
            path: self.backend.path().to_string(),
            cause: std::io::Error::other("injected by a test"),
        })
    }

    /// Deletes trace lines written before `before` (ms since the epoch), in
    /// chunks so that no single transaction holds the database long. Returns
    /// how many went. The space is reused by later lines; the file does not
    /// shrink.
    pub fn prune_trace(&mut self, before: Millis) -> Result<u64, StoreError> {
        let _call = self.clock().start_owned();
        self.backend.prune_trace(before)
    }

    /// Writes the trace as JSON lines: `{"seq":..,"at":..,"event":{..}}`.
    pub fn export_trace(&mut self, out: &mut dyn Write) -> Result<u64, StoreError> {
        let _call = self.clock().start_owned();
        self.backend.export_trace(&mut |seq, at, event| {
            writeln!(out, "{{\"seq\":{seq},\"at\":{at},\"event\":{event}}}")?;
            Ok(())
        })
    }
}

/// What a schema version found in `meta` means for opening.
enum Found {
    /// No version yet: a new database.
    Empty,
    Current,
    Older(i64),
}

/// The one rule for a stored schema version, for both backends.
fn check_version(path: &str, found: Option<&str>) -> Result<Found, StoreError> {
    let Some(text) = found else {
        return Ok(Found::Empty);
    };
    match text.trim().parse::<i64>() {
        Ok(SCHEMA_VERSION) => Ok(Found::Current),
        Ok(v) if v > SCHEMA_VERSION => Err(StoreError::Newer {
            path: path.to_string(),
            found: v,
        }),
        Ok(v) if v >= 1 => Ok(Found::Older(v)),
        _ => Err(StoreError::UnknownSchema {
            path: path.to_string(),
            found: text.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests;
