//! Durable state in one SQLite file.
//!
//! The database is the master's memory across crashes: a `kill -9` loses
//! nothing that was acknowledged, because the core commits each batch of state
//! changes here *before* it sends any reply, ack or assignment that depends on
//! them (see `core.rs`). Batching is what makes that affordable: one
//! transaction per batch of events, not per event (group commit).
//!
//! WAL mode with `synchronous=NORMAL` survives a crash of the master process
//! (a committed transaction is in the OS page cache); `--durability full`
//! switches to `synchronous=FULL`, which also survives power loss at the cost
//! of an fsync per batch.
//!
//! Tables: `jobs` holds each job's latest state as JSON (the scheduler's
//! `Job`), `trace` is the append-only log of every published state change
//! (what `tunefleet export-trace` prints), `meta` holds the schema version.
//! This module never decides anything: it stores what the core hands it.

use std::io::Write;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags};
use tunefleet_shared::protocol::Millis;

use crate::models::ModelRun;
use crate::scheduler::Job;

const SCHEMA_VERSION: i64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("state database {path} has schema version {found}; this tunefleet understands {SCHEMA_VERSION}")]
    Schema { path: String, found: i64 },
    #[error("state database {path}: job row {job_id} is unreadable: {message}")]
    CorruptJob {
        path: String,
        job_id: String,
        message: String,
    },
    #[error("writing the trace: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Survives a crash of the master process (WAL, synchronous=NORMAL).
    Normal,
    /// Also survives an OS crash or power loss (synchronous=FULL).
    Full,
}

pub struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    pub fn open(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        let path_text = path.display().to_string();
        let err = |source| StoreError::Sqlite {
            path: path_text.clone(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        let sync = match durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        };
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous={sync};
             PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS jobs (
                 job_id TEXT PRIMARY KEY,
                 state TEXT NOT NULL,
                 queue_key INTEGER NOT NULL,
                 data TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS models (
                 name TEXT PRIMARY KEY,
                 state TEXT NOT NULL,
                 data TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS artifacts (
                 run TEXT NOT NULL,
                 kind TEXT NOT NULL,
                 data BLOB NOT NULL,
                 PRIMARY KEY (run, kind)
             );
             CREATE TABLE IF NOT EXISTS trace (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 at INTEGER NOT NULL,
                 event TEXT NOT NULL
             );"
        ))
        .map_err(err)?;
        let found: Option<i64> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .map(|v| v.parse().ok())
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                other => Err(other),
            })
            .map_err(err)?;
        match found {
            None => {
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                )
                .map_err(err)?;
            }
            Some(v) if v != SCHEMA_VERSION => {
                return Err(StoreError::Schema {
                    path: path_text,
                    found: v,
                })
            }
            Some(_) => {}
        }
        Ok(Store {
            conn,
            path: path_text,
        })
    }

    /// Opens an existing database without creating or changing anything.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let path_text = path.display().to_string();
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(
            |source| StoreError::Sqlite {
                path: path_text.clone(),
                source,
            },
        )?;
        Ok(Store {
            conn,
            path: path_text,
        })
    }

    fn sql_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    pub fn load_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT job_id, data FROM jobs ORDER BY queue_key")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let mut jobs = Vec::new();
        for row in rows {
            let (job_id, data) = row.map_err(|e| self.sql_err(e))?;
            let job: Job = serde_json::from_str(&data).map_err(|e| StoreError::CorruptJob {
                path: self.path.clone(),
                job_id: job_id.clone(),
                message: e.to_string(),
            })?;
            jobs.push(job);
        }
        Ok(jobs)
    }

    pub fn load_models(&self) -> Result<Vec<ModelRun>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, data FROM models ORDER BY name")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let mut runs = Vec::new();
        for row in rows {
            let (name, data) = row.map_err(|e| self.sql_err(e))?;
            let run: ModelRun =
                serde_json::from_str(&data).map_err(|e| StoreError::CorruptJob {
                    path: self.path.clone(),
                    job_id: format!("model run {name}"),
                    message: e.to_string(),
                })?;
            runs.push(run);
        }
        Ok(runs)
    }

    /// A stored artefact of a model run (`library`), if any.
    pub fn load_artifact(&self, run: &str, kind: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn
            .query_row(
                "SELECT data FROM artifacts WHERE run = ?1 AND kind = ?2",
                params![run, kind],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                other => Err(other),
            })
            .map_err(|e| self.sql_err(e))
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
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut upsert = tx
                .prepare_cached(
                    "INSERT INTO jobs (job_id, state, queue_key, data) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(job_id) DO UPDATE SET state = ?2, queue_key = ?3, data = ?4",
                )
                .map_err(err)?;
            for job in jobs {
                let data = serde_json::to_string(job).unwrap_or_default();
                upsert
                    .execute(params![job.id(), job.state().as_str(), job.queue_key, data])
                    .map_err(err)?;
            }
            let mut upsert_model = tx
                .prepare_cached(
                    "INSERT INTO models (name, state, data) VALUES (?1, ?2, ?3)
                     ON CONFLICT(name) DO UPDATE SET state = ?2, data = ?3",
                )
                .map_err(err)?;
            for run in models {
                let data = serde_json::to_string(run).unwrap_or_default();
                upsert_model
                    .execute(params![run.name, run.state.as_str(), data])
                    .map_err(err)?;
            }
            let mut put_artifact = tx
                .prepare_cached(
                    "INSERT INTO artifacts (run, kind, data) VALUES (?1, ?2, ?3)
                     ON CONFLICT(run, kind) DO UPDATE SET data = ?3",
                )
                .map_err(err)?;
            for (run, kind, bytes) in artifacts {
                put_artifact
                    .execute(params![run, kind, bytes])
                    .map_err(err)?;
            }
            let mut append = tx
                .prepare_cached("INSERT INTO trace (at, event) VALUES (?1, ?2)")
                .map_err(err)?;
            for (at, line) in trace {
                append.execute(params![*at as i64, line]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Writes the trace as JSON lines: `{"seq":..,"at":..,"event":{..}}`.
    pub fn export_trace(&self, out: &mut dyn Write) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, at, event FROM trace ORDER BY seq")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.sql_err(e))?;
        let mut n = 0;
        for row in rows {
            let (seq, at, event) = row.map_err(|e| self.sql_err(e))?;
            writeln!(out, "{{\"seq\":{seq},\"at\":{at},\"event\":{event}}}")?;
            n += 1;
        }
        Ok(n)
    }
}
