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
//! Tables: `jobs` holds each job's latest state (a [`row`] of its own, not
//! the wire view) and, in a column written once, its workload; `models` and
//! `artifacts` the model runs and their compiled libraries; `trace` is the
//! append-only log of state changes (what `tunefleet export-trace` prints:
//! lifecycle lines, not whole views; progress is never stored); `meta` holds
//! the schema version. A database of an older schema is migrated in place
//! ([`migrate`]) after a backup copy is written beside it; a newer one is
//! refused. This module never decides anything: it stores what the core
//! hands it.

mod migrate;
mod row;

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use tunefleet_shared::protocol::Millis;

use crate::models::ModelRun;
use crate::scheduler::Job;
pub use row::TraceJob;

/// 1: jobs rows were the scheduler's `Job` whole. 2: [`row::JobRowOut`] plus
/// a `workload` column; compact trace lines.
pub const SCHEMA_VERSION: i64 = 2;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("state database {path} has schema version {found}, newer than this tunefleet's ({SCHEMA_VERSION}): it was written by a later release; run that release, or start this one with another --state file")]
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
    /// Jobs that have a row: only new ones need their workload written.
    stored: HashSet<String>,
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
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        ))
        .map_err(err)?;
        let found: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(err)?;
        match found.as_deref().map(|v| (v, v.trim().parse::<i64>())) {
            None => conn
                .execute_batch("BEGIN")
                .and_then(|()| create_tables(&conn))
                .and_then(|()| conn.execute_batch("COMMIT"))
                .map_err(err)?,
            Some((_, Ok(SCHEMA_VERSION))) => {}
            Some((_, Ok(v))) if v > SCHEMA_VERSION => {
                return Err(StoreError::Newer {
                    path: path_text,
                    found: v,
                })
            }
            Some((_, Ok(1))) => migrate::from_1(&conn, path, &path_text)?,
            Some((v, _)) => {
                return Err(StoreError::UnknownSchema {
                    path: path_text,
                    found: v.to_string(),
                })
            }
        }
        Ok(Store {
            conn,
            path: path_text,
            stored: HashSet::new(),
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
            stored: HashSet::new(),
        })
    }

    fn sql_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    pub fn load_jobs(&mut self) -> Result<Vec<Job>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT job_id, queue_key, data, workload FROM jobs ORDER BY queue_key")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.sql_err(e))?;
        let mut jobs = Vec::new();
        for row in rows {
            let (job_id, queue_key, data, workload) = row.map_err(|e| self.sql_err(e))?;
            let corrupt = |what: &str, e: serde_json::Error| StoreError::CorruptJob {
                path: self.path.clone(),
                job_id: job_id.clone(),
                message: format!("{what}: {e}"),
            };
            let row: row::JobRowIn = serde_json::from_str(&data).map_err(|e| corrupt("data", e))?;
            let workload = serde_json::from_str(&workload).map_err(|e| corrupt("workload", e))?;
            jobs.push(row.into_job(job_id.clone(), queue_key, workload));
        }
        drop(stmt);
        self.stored = jobs.iter().map(|j| j.id().clone()).collect();
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
            .optional()
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
        let mut new_rows = Vec::new();
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut update = tx
                .prepare_cached(
                    "UPDATE jobs SET state = ?2, queue_key = ?3, data = ?4 WHERE job_id = ?1",
                )
                .map_err(err)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO jobs (job_id, state, queue_key, data, workload)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(job_id) DO UPDATE SET state = ?2, queue_key = ?3, data = ?4",
                )
                .map_err(err)?;
            for job in jobs {
                let data = serde_json::to_string(&row::JobRowOut::of(job)).unwrap_or_default();
                let state = job.state().as_str();
                if self.stored.contains(job.id()) {
                    update
                        .execute(params![job.id(), state, job.queue_key, data])
                        .map_err(err)?;
                } else {
                    let workload = serde_json::to_string(&job.view.workload).unwrap_or_default();
                    insert
                        .execute(params![job.id(), state, job.queue_key, data, workload])
                        .map_err(err)?;
                    new_rows.push(job.id().clone());
                }
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
        tx.commit().map_err(err)?;
        // Only once committed: a failed commit is retried with the workload.
        self.stored.extend(new_rows);
        Ok(())
    }

    /// Deletes trace lines written before `before` (ms since the epoch), in
    /// chunks so that no single transaction holds the file long. Returns how
    /// many went. The space is reused by later lines; the file does not shrink.
    pub fn prune_trace(&mut self, before: Millis) -> Result<u64, StoreError> {
        let last: Option<i64> = self
            .conn
            .query_row(
                "SELECT max(seq) FROM trace WHERE at < ?1",
                params![before as i64],
                |r| r.get(0),
            )
            .map_err(|e| self.sql_err(e))?;
        let Some(last) = last else {
            return Ok(0);
        };
        let mut removed = 0;
        loop {
            let n = self
                .conn
                .execute(
                    "DELETE FROM trace WHERE seq IN
                     (SELECT seq FROM trace WHERE seq <= ?1 ORDER BY seq LIMIT 10000)",
                    params![last],
                )
                .map_err(|e| self.sql_err(e))?;
            removed += n as u64;
            if n < 10000 {
                return Ok(removed);
            }
        }
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

/// The current schema's tables and version, for a new database and at the
/// end of a migration (which has renamed the tables it rebuilds). Run inside
/// a transaction.
fn create_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS jobs (
             job_id TEXT PRIMARY KEY,
             state TEXT NOT NULL,
             queue_key INTEGER NOT NULL,
             data TEXT NOT NULL,
             workload TEXT NOT NULL
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
         );
         INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');"
    ))
}

#[cfg(test)]
mod tests;
