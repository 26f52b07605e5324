//! The SQLite backend: one file, WAL mode.
//!
//! WAL with `synchronous=NORMAL` survives a crash of the master process (a
//! committed transaction is in the OS page cache); `--durability full`
//! switches to `synchronous=FULL`, which also survives power loss at the cost
//! of an fsync per batch.
//!
//! Checkpoints (copying the WAL back into the database file) run on a thread
//! of their own ([`Checkpointer`]), not inside the core's commits: with
//! SQLite's automatic checkpoint, the commit that took the WAL past a
//! thousand pages copied the whole WAL itself, a sixth of the core's time
//! under a stream of small jobs. A checkpoint never blocks a writer in WAL
//! mode, and it changes nothing about durability: a commit is durable once
//! it is in the WAL.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use tunefleet_shared::protocol::Millis;

use super::{
    check_version, cost_models_table, migrate, ArchiveWrite, Archived, Backend, CostModelRow,
    Durability, Found, JobRead, JobWrite, RecordRead, RecordWrite, RowBatch, StoreError,
    ARCHIVED_INDEX, JOB_COLUMNS, MAX_ARCHIVED_PER_KEY, MODEL_RECORDS_TABLE, SCHEMA_VERSION,
    WARM_STARTS_TABLE, WORKLOADS_TABLE,
};

pub(super) struct SqliteStore {
    pub(super) conn: Connection,
    path: String,
    /// Absent for a read-only store. Before the lock: dropped (stopped) first.
    _checkpointer: Option<Checkpointer>,
    /// `FILE.lock`, locked for as long as this master has the file open for
    /// writing: a second master on the same file is refused, not let in to
    /// interleave its writes with ours. The OS drops the lock when the
    /// process dies, `kill -9` included.
    _lock: Option<std::fs::File>,
}

/// WAL pages after a commit that call for a checkpoint: SQLite's own
/// automatic threshold. Checkpointing more often would cost an idle master
/// latency: the first commit after a complete checkpoint starts the WAL
/// over and syncs its header.
const CHECKPOINT_PAGES: i32 = 1000;

/// The checkpoint thread: its own connection, a `PASSIVE` checkpoint (it
/// copies what no reader still needs and never waits for a lock) whenever a
/// commit leaves [`CHECKPOINT_PAGES`] or more in the WAL. It ends when the
/// writing connection, which holds the other end of its channel in a WAL
/// hook, is closed.
struct Checkpointer {
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path, writer: &mut Connection) -> Result<Checkpointer, rusqlite::Error> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // One waiting request is enough: a checkpoint copies the whole WAL.
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let path = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("tunefleet-checkpoint".into())
            .spawn(move || {
                let mut failing = false;
                while woken.recv().is_ok() {
                    // The WAL keeps growing while this fails (a full disk);
                    // the core's own commits report the cause.
                    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                        Ok(()) if failing => {
                            failing = false;
                            tracing::info!(%path, "checkpoints work again");
                        }
                        Ok(()) => {}
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!(%path, "cannot checkpoint the WAL: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| {
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some(format!("cannot start the checkpoint thread: {e}")),
                )
            })?;
        // Replaces SQLite's automatic checkpoint (`wal_autocheckpoint` uses the
        // same hook): the commit only asks, the thread does the work.
        writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages >= CHECKPOINT_PAGES {
                let _ = wake.try_send(());
            }
            Ok(())
        }))?;
        Ok(Checkpointer {
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // The writing connection is closed by now (it is declared, so
        // dropped, before this), which closed the channel.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a SQLite error means for someone starting a master, as `: hint`
/// (empty when there is nothing to add to the error itself).
pub(super) fn explain(e: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode as C;
    let hint = match e.sqlite_error_code() {
        Some(C::CannotOpen) => {
            "cannot open or create it (does the directory exist, and may this user write to it?)"
        }
        Some(C::NotADatabase) => {
            "not a SQLite database (is --state pointing at the right file?); it was left as it is"
        }
        Some(C::DiskFull) => "the disk is full",
        Some(C::ReadOnly) => "the file or its directory is read-only",
        Some(C::DatabaseBusy | C::DatabaseLocked) => "locked by another process",
        Some(C::SystemIoFailure) => "an I/O error (full disk, or the file system went away?)",
        Some(C::DatabaseCorrupt) => "the file is corrupt",
        Some(C::PermissionDenied) => "permission denied",
        _ => "",
    };
    if hint.is_empty() {
        String::new()
    } else {
        format!(": {hint}")
    }
}

/// Takes `FILE.lock` (writing this process's pid into it).
fn lock(path: &Path, path_text: &str) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|cause| StoreError::Lock {
            path: path_text.to_string(),
            lock: lock_path.display().to_string(),
            cause,
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(StoreError::InUse {
                path: path_text.to_string(),
                holder: Some(holder.trim().to_string()).filter(|h| !h.is_empty()),
            });
        }
        Err(std::fs::TryLockError::Error(cause)) => {
            return Err(StoreError::Lock {
                path: path_text.to_string(),
                lock: lock_path.display().to_string(),
                cause,
            })
        }
    }
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = write!(file, "{}", std::process::id());
    Ok(file)
}

impl SqliteStore {
    pub(super) fn open(path: &Path, durability: Durability) -> Result<SqliteStore, StoreError> {
        let path_text = path.display().to_string();
        let err = |cause| StoreError::Sqlite {
            path: path_text.clone(),
            cause,
        };
        let lock = lock(path, &path_text)?;
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
        match check_version(&path_text, found.as_deref())? {
            Found::Empty => conn
                .execute_batch("BEGIN")
                .and_then(|()| create_tables(&conn))
                .and_then(|()| conn.execute_batch("COMMIT"))
                .map_err(err)?,
            Found::Current => {}
            Found::Older(1) => migrate::from_1(&conn, path, &path_text)?,
            Found::Older(2) => migrate::from_2(&conn, path, &path_text)?,
            Found::Older(3) => migrate::from_3(&conn, path, &path_text)?,
            Found::Older(4) => migrate::from_4(&conn, path, &path_text)?,
            Found::Older(5) => migrate::from_5(&conn, path, &path_text)?,
            Found::Older(v) => {
                return Err(StoreError::UnknownSchema {
                    path: path_text,
                    found: v.to_string(),
                })
            }
        }
        let mut conn = conn;
        let checkpointer = Checkpointer::start(path, &mut conn).map_err(err)?;
        Ok(SqliteStore {
            conn,
            path: path_text,
            _checkpointer: Some(checkpointer),
            _lock: Some(lock),
        })
    }

    pub(super) fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        let path_text = path.display().to_string();
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(
            |cause| StoreError::Sqlite {
                path: path_text.clone(),
                cause,
            },
        )?;
        Ok(SqliteStore {
            conn,
            path: path_text,
            _checkpointer: None,
            _lock: None,
        })
    }

    fn sql_err(&self, cause: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            cause,
        }
    }
}

/// Bytes the probe writes beside the database while commits fail: more
/// than a small transaction needs, so that a probe does not pass on a disk
/// that is still full (a meta row alone fits in what the WAL file already
/// holds) only for the next batch to fail again.
const PROBE_BYTES: usize = 256 * 1024;

/// Free bytes below which the disk counts as full between batches: an idle
/// master says so (`status`, `/healthz`) before a commit fails on it.
const FULL_BELOW: u64 = 64 * 1024;

impl SqliteStore {
    /// Copies the WAL back and cuts its file to nothing: the space a failed
    /// transaction's pages took returns to the file system, and a retry
    /// cannot fill freed space with them. Fails (and changes nothing) while
    /// the database file cannot grow; the next probe tries again.
    fn truncate_wal(&mut self) -> rusqlite::Result<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
    }

    /// Writes, syncs and removes [`PROBE_BYTES`] beside the database.
    fn room_for_more(&self) -> std::io::Result<()> {
        use std::io::Write;
        let mut name = std::path::PathBuf::from(&self.path).into_os_string();
        name.push(".probe");
        let probe = std::path::PathBuf::from(name);
        let written = std::fs::File::create(&probe).and_then(|mut file| {
            file.write_all(&vec![0u8; PROBE_BYTES])?;
            file.sync_data()
        });
        let _ = std::fs::remove_file(&probe);
        written
    }
}

impl Backend for SqliteStore {
    fn path(&self) -> &str {
        &self.path
    }

    fn unavailable(&mut self) -> Option<StoreError> {
        // Read-only stores have no checkpointer and never commit.
        self._checkpointer.as_ref()?;
        let dir = std::path::Path::new(&self.path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let fs = rustix::fs::statvfs(dir).ok()?;
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        (free < FULL_BELOW).then(|| StoreError::NoRoom {
            path: self.path.clone(),
            cause: std::io::Error::other(format!("the disk is full ({free} bytes free)")),
        })
    }

    fn after_failed_commit(&mut self) {
        if let Err(e) = self.truncate_wal() {
            tracing::debug!(path = %self.path, "cannot truncate the WAL yet: {e}");
        }
    }

    fn probe(&mut self) -> Result<(), StoreError> {
        let _ = self.truncate_wal();
        self.room_for_more().map_err(|cause| StoreError::NoRoom {
            path: self.path.clone(),
            cause,
        })
    }

    fn load_job_rows(&mut self) -> Result<Vec<JobRead>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{JOB_COLUMNS} WHERE archived_at IS NULL ORDER BY queue_key"
            ))
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt.query_map([], job_read).map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn load_archived_rows(&mut self, which: Archived<'_>) -> Result<Vec<JobRead>, StoreError> {
        let rows: rusqlite::Result<Vec<JobRead>> = match which {
            Archived::Ids(ids) => {
                let mut stmt = self
                    .conn
                    .prepare_cached(&format!(
                        "{JOB_COLUMNS} WHERE job_id = ?1 AND archived_at IS NOT NULL"
                    ))
                    .map_err(|e| self.sql_err(e))?;
                let mut rows = Vec::new();
                for id in ids {
                    match stmt.query_row(params![id], job_read).optional() {
                        Ok(Some(row)) => rows.push(row),
                        Ok(None) => {}
                        Err(e) => return Err(self.sql_err(e)),
                    }
                }
                Ok(rows)
            }
            Archived::Done { content_key } => {
                let mut stmt = self
                    .conn
                    .prepare_cached(&format!(
                        "{JOB_COLUMNS} WHERE content_key = ?1 AND archived_at IS NOT NULL
                         AND state = 'done' ORDER BY archived_at DESC LIMIT ?2"
                    ))
                    .map_err(|e| self.sql_err(e))?;
                let rows = stmt
                    .query_map(params![content_key, MAX_ARCHIVED_PER_KEY], job_read)
                    .map_err(|e| self.sql_err(e))?;
                rows.collect()
            }
            Archived::All => {
                let mut stmt = self
                    .conn
                    .prepare(&format!(
                        "{JOB_COLUMNS} WHERE archived_at IS NOT NULL ORDER BY queue_key"
                    ))
                    .map_err(|e| self.sql_err(e))?;
                let rows = stmt.query_map([], job_read).map_err(|e| self.sql_err(e))?;
                rows.collect()
            }
        };
        rows.map_err(|e| self.sql_err(e))
    }

    fn archived_counts(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT state, count(*) FROM jobs WHERE archived_at IS NOT NULL GROUP BY state",
            )
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn load_model_rows(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, data FROM models ORDER BY name")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn load_model_records(&mut self) -> Result<Vec<RecordRead>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT model, key, task, data FROM model_records")
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(RecordRead {
                    model: r.get(0)?,
                    key: r.get(1)?,
                    task: r.get(2)?,
                    data: r.get(3)?,
                })
            })
            .map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn load_artifact(&mut self, run: &str, kind: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn
            .query_row(
                "SELECT data FROM artifacts WHERE run = ?1 AND kind = ?2",
                params![run, kind],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .optional()
            .map_err(|e| self.sql_err(e))
    }

    fn load_cost_models(&mut self) -> Result<Vec<CostModelRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT target, tvm, id, samples, tvm_version, updated_at, data FROM cost_models",
            )
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(CostModelRow {
                    target: r.get(0)?,
                    tvm: r.get(1)?,
                    id: r.get(2)?,
                    samples: r.get(3)?,
                    tvm_version: r.get(4)?,
                    updated_at: r.get(5)?,
                    data: r.get(6)?,
                })
            })
            .map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn load_meta(&mut self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT key, value FROM meta WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key",
            )
            .map_err(|e| self.sql_err(e))?;
        let rows = stmt
            .query_map(params![prefix], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql_err(e))?;
        let rows: Result<Vec<_>, _> = rows.collect();
        rows.map_err(|e| self.sql_err(e))
    }

    fn commit(&mut self, batch: &RowBatch<'_, '_>) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Sqlite {
            path: path.clone(),
            cause,
        };
        let tx = self.conn.transaction().map_err(err)?;
        write_batch(&tx, batch).map_err(err)?;
        tx.commit().map_err(err)
    }

    fn prune_trace(&mut self, before: Millis) -> Result<u64, StoreError> {
        let last: Option<i64> = self
            .conn
            .query_row(
                "SELECT max(seq) FROM trace WHERE at < ?1",
                params![before.0 as i64],
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

    fn export_trace(
        &mut self,
        line: &mut dyn FnMut(i64, i64, &str) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, at, event FROM trace ORDER BY seq")
            .map_err(|e| self.sql_err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql_err(e))?;
        let mut n = 0;
        while let Some(row) = rows.next().map_err(|e| self.sql_err(e))? {
            let (seq, at, event): (i64, i64, String) =
                (|| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))().map_err(|e| self.sql_err(e))?;
            line(seq, at, &event)?;
            n += 1;
        }
        Ok(n)
    }
}

/// Writes a batch's rows in one transaction, in this order: jobs, warm
/// starts, archive marks (after the jobs they mark), model runs, their
/// records and the records gone, artefacts, trace lines, cost models, meta.
/// Dropping `tx` on an error rolls every write back.
fn write_batch(tx: &rusqlite::Transaction<'_>, batch: &RowBatch<'_, '_>) -> rusqlite::Result<()> {
    let RowBatch {
        jobs,
        archive,
        models,
        records,
        records_gone,
        warm_starts,
        artifacts,
        trace,
        meta,
        cost_models,
    } = *batch;
    write_jobs(tx, jobs)?;
    write_warm_starts(tx, warm_starts)?;
    mark_archived(tx, archive)?;
    write_models(tx, models)?;
    write_records(tx, records, records_gone)?;
    write_artifacts(tx, artifacts)?;
    append_trace(tx, trace)?;
    write_cost_models(tx, cost_models)?;
    write_meta(tx, meta)
}

/// Changed jobs: a job without its workload is only updated, one with it is
/// upserted and its workload written once.
fn write_jobs(tx: &rusqlite::Transaction<'_>, jobs: &[JobWrite<'_>]) -> rusqlite::Result<()> {
    let mut update = tx.prepare_cached(
        "UPDATE jobs SET state = ?2, queue_key = ?3, data = ?4, archived_at = NULL
                     WHERE job_id = ?1",
    )?;
    // A job written is live: one that comes back from the archive
    // (resubmitted, retried, a cache entry) loses its mark.
    let mut insert = tx.prepare_cached(
        "INSERT INTO jobs (job_id, state, queue_key, data)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(job_id) DO UPDATE
                     SET state = ?2, queue_key = ?3, data = ?4, archived_at = NULL",
    )?;
    // Kept if there: the same id is the same computation (the first
    // workload written, its name included, stays, as before schema 4).
    let mut insert_workload = tx.prepare_cached(
        "INSERT INTO workloads (job_id, workload) VALUES (?1, ?2)
                     ON CONFLICT(job_id) DO NOTHING",
    )?;
    for job in jobs {
        match &job.workload {
            None => update.execute(params![job.job_id, job.state, job.queue_key, job.data])?,
            Some(workload) => {
                insert.execute(params![job.job_id, job.state, job.queue_key, job.data])?;
                insert_workload.execute(params![job.job_id, workload])?
            }
        };
    }
    Ok(())
}

/// Warm starts written (`Some`) or deleted (`None`), by job id.
fn write_warm_starts(
    tx: &rusqlite::Transaction<'_>,
    warm_starts: &[(&str, Option<String>)],
) -> rusqlite::Result<()> {
    let mut put_warm = tx.prepare_cached(
        "INSERT INTO warm_starts (job_id, warm_start) VALUES (?1, ?2)
                     ON CONFLICT(job_id) DO UPDATE SET warm_start = ?2",
    )?;
    let mut drop_warm = tx.prepare_cached("DELETE FROM warm_starts WHERE job_id = ?1")?;
    for (job_id, warm) in warm_starts {
        match warm {
            Some(warm) => put_warm.execute(params![job_id, warm]),
            None => drop_warm.execute(params![job_id]),
        }?;
    }
    Ok(())
}

/// Marks archived jobs (already written above) with when and their content key.
fn mark_archived(tx: &rusqlite::Transaction<'_>, archive: &[ArchiveWrite]) -> rusqlite::Result<()> {
    let mut mark =
        tx.prepare_cached("UPDATE jobs SET archived_at = ?2, content_key = ?3 WHERE job_id = ?1")?;
    for job in archive {
        mark.execute(params![job.job_id, job.at.0 as i64, job.content_key])?;
    }
    Ok(())
}

/// Model runs that changed, upserted by name.
fn write_models(
    tx: &rusqlite::Transaction<'_>,
    models: &[(&str, &'static str, String)],
) -> rusqlite::Result<()> {
    let mut upsert_model = tx.prepare_cached(
        "INSERT INTO models (name, state, data) VALUES (?1, ?2, ?3)
                     ON CONFLICT(name) DO UPDATE SET state = ?2, data = ?3",
    )?;
    for (name, state, data) in models {
        upsert_model.execute(params![name, state, data])?;
    }
    Ok(())
}

/// The runs' new records, then the records they no longer keep.
fn write_records(
    tx: &rusqlite::Transaction<'_>,
    records: &[RecordWrite<'_>],
    records_gone: &[(&str, String)],
) -> rusqlite::Result<()> {
    // Upserts: a run twice in one batch brings its new records twice.
    let mut put_record = tx.prepare_cached(
        "INSERT INTO model_records (model, key, task, data) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(model, key) DO UPDATE SET task = ?3, data = ?4",
    )?;
    for record in records {
        put_record.execute(params![record.model, record.key, record.task, record.data])?;
    }
    let mut drop_record =
        tx.prepare_cached("DELETE FROM model_records WHERE model = ?1 AND key = ?2")?;
    for (model, key) in records_gone {
        drop_record.execute(params![model, key])?;
    }
    Ok(())
}

/// Artefacts of model runs, upserted by run and kind.
fn write_artifacts(
    tx: &rusqlite::Transaction<'_>,
    artifacts: &[(String, &'static str, Vec<u8>)],
) -> rusqlite::Result<()> {
    let mut put_artifact = tx.prepare_cached(
        "INSERT INTO artifacts (run, kind, data) VALUES (?1, ?2, ?3)
                     ON CONFLICT(run, kind) DO UPDATE SET data = ?3",
    )?;
    for (run, kind, bytes) in artifacts {
        put_artifact.execute(params![run, kind, bytes])?;
    }
    Ok(())
}

/// Trace lines, appended.
fn append_trace(
    tx: &rusqlite::Transaction<'_>,
    trace: &[(Millis, String)],
) -> rusqlite::Result<()> {
    let mut append = tx.prepare_cached("INSERT INTO trace (at, event) VALUES (?1, ?2)")?;
    for (at, line) in trace {
        append.execute(params![at.0 as i64, line])?;
    }
    Ok(())
}

/// Cost models kept since the last commit, upserted by target and TVM release.
fn write_cost_models(
    tx: &rusqlite::Transaction<'_>,
    cost_models: &[CostModelRow],
) -> rusqlite::Result<()> {
    let mut put_cost_model = tx.prepare_cached(
        "INSERT INTO cost_models (target, tvm, id, samples, tvm_version, updated_at, data)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(target, tvm) DO UPDATE SET id = ?3, samples = ?4,
                         tvm_version = ?5, updated_at = ?6, data = ?7",
    )?;
    for m in cost_models {
        put_cost_model.execute(params![
            m.target,
            m.tvm,
            m.id,
            m.samples,
            m.tvm_version,
            m.updated_at,
            m.data
        ])?;
    }
    Ok(())
}

/// `meta` rows upserted, or deleted (`None`).
fn write_meta(
    tx: &rusqlite::Transaction<'_>,
    meta: &[(String, Option<String>)],
) -> rusqlite::Result<()> {
    for (key, value) in meta {
        match value {
            Some(value) => tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                         ON CONFLICT(key) DO UPDATE SET value = ?2",
                params![key, value],
            ),
            None => tx.execute("DELETE FROM meta WHERE key = ?1", params![key]),
        }?;
    }
    Ok(())
}

/// (Columns in the order [`JobRead`] takes them.)
fn job_read(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRead> {
    Ok(JobRead {
        job_id: r.get(0)?,
        queue_key: r.get(1)?,
        data: r.get(2)?,
        workload: r.get(3)?,
        warm_start: r.get(4)?,
    })
}

/// The current schema's tables and version, for a new database and at the
/// end of a migration (which has renamed the tables it rebuilds). Run inside
/// a transaction.
pub(super) fn create_tables(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS jobs (
             job_id TEXT PRIMARY KEY,
             state TEXT NOT NULL,
             queue_key INTEGER NOT NULL,
             data TEXT NOT NULL,
             archived_at INTEGER,
             content_key TEXT
         );
         {ARCHIVED_INDEX};
         {WORKLOADS_TABLE};
         CREATE TABLE IF NOT EXISTS models (
             name TEXT PRIMARY KEY,
             state TEXT NOT NULL,
             data TEXT NOT NULL
         );
         {MODEL_RECORDS_TABLE};
         {WARM_STARTS_TABLE};
         {cost_models};
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
         INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');",
        cost_models = cost_models_table("BLOB")
    ))
}
