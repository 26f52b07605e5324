//! The PostgreSQL backend, and the lead between masters sharing it.
//!
//! Same tables and columns as the SQLite file (`BIGINT` for integers, `BYTEA`
//! for bytes, `BIGSERIAL` for the trace's sequence), written in one
//! transaction per batch: the durability rule is unchanged, and a commit
//! returns only once PostgreSQL has it.
//!
//! **The lead** (`lead.rs`). A master that opens the database for writing
//! first takes a session-level advisory lock on the very connection it then
//! writes through. While another master holds it, this one waits as a
//! standby: no port bound, nothing read, the lock tried again every poll.
//! When the leader dies, PostgreSQL ends its session and releases the lock
//! (at once on a closed socket; within `lead::SERVER_GIVES_UP` of silence,
//! by the keepalives and user timeout the session set for itself), and the
//! standby loads the state and starts serving. Holding the lock on the
//! writing connection is also the fence: a leader that lost its connection
//! has lost the lock with it, so it cannot write after a standby took over.
//! Its next commit fails (refused, rolled back: `core/storage.rs`) and its
//! probe opens a new session, off the core thread, that must take the lock
//! at once: if another master holds it, the probe says `LeadLost` and the
//! master steps down to a standby; if not (the server restarted, the session
//! was ended, a partition healed), this master leads on.
//!
//! No call waits without a deadline (`lead.rs` says which), so a silent
//! server fails a call within seconds and the core answers from memory.
//!
//! The sync `postgres` client runs its own small runtime: it is used only from
//! the core thread and blocking tasks, never from inside an async task.

use std::sync::mpsc;
use std::time::Duration;

use postgres::{Client, Statement};
use tunefleet_shared::protocol::Millis;

use super::{
    check_version, cost_models_table, ArchiveWrite, Archived, Backend, CostModelRow, Durability,
    Found, JobRead, JobWrite, RecordRead, RecordWrite, RowBatch, Standby, StoreError,
    ARCHIVED_INDEX, JOB_COLUMNS, MAX_ARCHIVED_PER_KEY, MODEL_RECORDS_TABLE, SCHEMA_VERSION,
    WARM_STARTS_TABLE, WORKLOADS_TABLE,
};

mod lead;
use lead::{Lead, CONNECT_TIMEOUT};

pub(super) struct PgStore {
    client: Client,
    path: String,
    statements: Option<Statements>,
    /// To take the lead again with (see `Backend::probe`); `None` read-only.
    reconnect: Option<Reconnect>,
    /// The server process of the session that took the lead: after a
    /// partition it may outlive the connection for a few seconds.
    leading_pid: Option<i32>,
    /// The session failed a check: it is only replaced, never asked again
    /// (a call on a silent connection waits for its timeouts).
    suspect: bool,
    /// A new session being opened off the core thread by `probe`.
    attempt: Option<mpsc::Receiver<Result<Lead, StoreError>>>,
}

#[derive(Clone)]
struct Reconnect {
    url: String,
    durability: Durability,
    name: String,
}

/// How long a probe waits for the new session it is opening before it
/// leaves it to the next probe.
const ATTEMPT_GRACE: Duration = Duration::from_millis(250);

/// How long a check of a session that looks alive may take: the core
/// thread waits for it (reads meanwhile get the stand-in answer,
/// `core::StorageStatus`).
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Prepared once per connection: a batch is then only round trips of
/// parameters.
///
/// The job, archive and trace writes take whole columns as arrays
/// (`UNNEST`): one round trip per kind of row and commit, not one per row.
/// A batch of 100 results was ~300 round trips to the server, which made
/// PostgreSQL a fifth of SQLite's throughput (docs/benchmarks.md). One
/// statement may touch a row only once (`ON CONFLICT DO UPDATE` refuses
/// more), so a job written twice in one commit keeps its last write.
struct Statements {
    update_jobs: Statement,
    insert_jobs: Statement,
    insert_workloads: Statement,
    upsert_model: Statement,
    put_records: Statement,
    drop_records: Statement,
    put_warm_starts: Statement,
    drop_warm_starts: Statement,
    put_artifact: Statement,
    put_cost_model: Statement,
    append_trace: Statement,
    archive_jobs: Statement,
}

impl PgStore {
    /// Takes the lead (waiting as a standby while another master holds it),
    /// then creates or checks the schema.
    pub(super) fn open_leader(
        url: &str,
        durability: Durability,
        standby: Standby,
        on_wait: &mut dyn FnMut(&str),
    ) -> Result<PgStore, StoreError> {
        let (Lead { mut client, pid }, path) = lead::wait_for_lead(url, &standby, on_wait)?;
        lead::set_durability(&mut client, durability).map_err(|cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        })?;
        let mut store = PgStore {
            client,
            path,
            statements: None,
            reconnect: Some(Reconnect {
                url: url.to_string(),
                durability,
                name: standby.name,
            }),
            leading_pid: Some(pid),
            suspect: false,
            attempt: None,
        };
        store.create_or_check()?;
        store.statements = Some(store.prepare()?);
        Ok(store)
    }

    pub(super) fn open_read_only(url: &str) -> Result<PgStore, StoreError> {
        let (mut client, path) = lead::connect(url, CONNECT_TIMEOUT, "tunefleet (read-only)")?;
        client
            .batch_execute("SET default_transaction_read_only = on")
            .map_err(|cause| StoreError::Postgres {
                path: path.clone(),
                cause,
            })?;
        Ok(PgStore {
            client,
            path,
            statements: None,
            reconnect: None,
            leading_pid: None,
            suspect: false,
            attempt: None,
        })
    }

    fn disconnected(&self) -> StoreError {
        StoreError::Disconnected {
            path: self.path.clone(),
        }
    }

    /// Starts opening a new session off the core thread (see
    /// `lead::take_lead_again`); `probe` collects it.
    fn start_attempt(&mut self, again: Reconnect) {
        let (tx, rx) = mpsc::channel();
        let previous = self.leading_pid;
        let spawned = std::thread::Builder::new()
            .name("tunefleet-pg-reconnect".into())
            .spawn(move || {
                let lead =
                    lead::take_lead_again(&again.url, again.durability, &again.name, previous);
                let _ = tx.send(lead);
            });
        match spawned {
            Ok(_) => self.attempt = Some(rx),
            Err(e) => tracing::warn!("cannot start a thread to reconnect to PostgreSQL: {e}"),
        }
    }

    /// The new session leads: it replaces the old one, whose client is
    /// dropped off this thread (closing it may wait on a dead socket).
    fn install(&mut self, lead: Lead) -> Result<(), StoreError> {
        let old = std::mem::replace(&mut self.client, lead.client);
        let _ = std::thread::Builder::new()
            .name("tunefleet-pg-close".into())
            .spawn(move || drop(old));
        self.leading_pid = Some(lead.pid);
        self.suspect = false;
        self.statements = None;
        self.statements = Some(self.prepare()?);
        tracing::info!(state = %self.path, "reconnected to PostgreSQL; this master still leads");
        Ok(())
    }

    fn err(&self) -> impl Fn(postgres::Error) -> StoreError + '_ {
        |cause| StoreError::Postgres {
            path: self.path.clone(),
            cause,
        }
    }

    /// Every row `sql` (no parameters) selects.
    fn query_all(&mut self, sql: &str) -> Result<Vec<postgres::Row>, StoreError> {
        self.client
            .query(sql, &[])
            .map_err(|cause| StoreError::Postgres {
                path: self.path.clone(),
                cause,
            })
    }

    fn job_read(&self, r: &postgres::Row) -> Result<JobRead, StoreError> {
        Ok(JobRead {
            job_id: r.try_get(0).map_err(self.err())?,
            queue_key: r.try_get(1).map_err(self.err())?,
            data: r.try_get(2).map_err(self.err())?,
            workload: r.try_get(3).map_err(self.err())?,
            warm_start: r.try_get(4).map_err(self.err())?,
        })
    }

    /// Creates the schema in an empty database, migrates an older one, and
    /// refuses one this release cannot read; in one transaction with the
    /// version check, so a standby that takes over later finds it done.
    fn create_or_check(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        };
        let mut tx = self.client.transaction().map_err(err)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        )
        .map_err(err)?;
        let found: Option<String> = tx
            .query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
            .map_err(err)?
            .map(|row| row.get(0));
        match check_version(&path, found.as_deref())? {
            Found::Empty => create_schema(&mut tx).map_err(err)?,
            Found::Current => {}
            Found::Older(from @ (2..=5)) => {
                tracing::info!(
                    state = %path,
                    "migrating the state database from schema {from} to {SCHEMA_VERSION}"
                );
                migrate_schema(&mut tx, from).map_err(err)?;
            }
            Found::Older(v) => {
                return Err(StoreError::Migration {
                    path,
                    from: v,
                    to: SCHEMA_VERSION,
                    reason: "PostgreSQL state began at schema 2; no release wrote this".into(),
                })
            }
        }
        tx.commit().map_err(err)
    }

    /// Every statement a commit uses, prepared once per connection. Long on
    /// purpose: one prepared statement per field of `Statements`, each with
    /// its SQL, reads best as one list (split, the SQL would be scattered
    /// across helpers that each do nothing but prepare).
    fn prepare(&mut self) -> Result<Statements, StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        };
        let c = &mut self.client;
        Ok(Statements {
            update_jobs: c
                .prepare(
                    "UPDATE jobs SET state = u.state, queue_key = u.queue_key, data = u.data,
                         archived_at = NULL
                     FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[])
                         AS u(job_id, state, queue_key, data)
                     WHERE jobs.job_id = u.job_id",
                )
                .map_err(err)?,
            insert_jobs: c
                .prepare(
                    "INSERT INTO jobs (job_id, state, queue_key, data)
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[])
                     ON CONFLICT (job_id) DO UPDATE
                     SET state = EXCLUDED.state, queue_key = EXCLUDED.queue_key,
                         data = EXCLUDED.data, archived_at = NULL",
                )
                .map_err(err)?,
            // Kept if there: the same id is the same computation (the first
            // workload written, its name included, stays, as before schema 4).
            insert_workloads: c
                .prepare(
                    "INSERT INTO workloads (job_id, workload)
                     SELECT * FROM UNNEST($1::text[], $2::text[])
                     ON CONFLICT (job_id) DO NOTHING",
                )
                .map_err(err)?,
            upsert_model: c
                .prepare(
                    "INSERT INTO models (name, state, data) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, data = EXCLUDED.data",
                )
                .map_err(err)?,
            // Each job once per batch (`Store::changed_warm_starts`).
            put_warm_starts: c
                .prepare(
                    "INSERT INTO warm_starts (job_id, warm_start)
                     SELECT * FROM UNNEST($1::text[], $2::text[])
                     ON CONFLICT (job_id) DO UPDATE SET warm_start = EXCLUDED.warm_start",
                )
                .map_err(err)?,
            drop_warm_starts: c
                .prepare("DELETE FROM warm_starts WHERE job_id = ANY($1)")
                .map_err(err)?,
            // Each (model, key) once per batch (`Store::changed_records`).
            put_records: c
                .prepare(
                    "INSERT INTO model_records (model, key, task, data)
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[])
                     ON CONFLICT (model, key) DO UPDATE
                     SET task = EXCLUDED.task, data = EXCLUDED.data",
                )
                .map_err(err)?,
            drop_records: c
                .prepare(
                    "DELETE FROM model_records m
                     USING UNNEST($1::text[], $2::text[]) AS g(model, key)
                     WHERE m.model = g.model AND m.key = g.key",
                )
                .map_err(err)?,
            put_artifact: c
                .prepare(
                    "INSERT INTO artifacts (run, kind, data) VALUES ($1, $2, $3)
                     ON CONFLICT (run, kind) DO UPDATE SET data = EXCLUDED.data",
                )
                .map_err(err)?,
            put_cost_model: c
                .prepare(
                    "INSERT INTO cost_models (target, tvm, id, samples, tvm_version, updated_at, data)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (target, tvm) DO UPDATE SET id = EXCLUDED.id,
                         samples = EXCLUDED.samples, tvm_version = EXCLUDED.tvm_version,
                         updated_at = EXCLUDED.updated_at, data = EXCLUDED.data",
                )
                .map_err(err)?,
            // In the batch's order: `seq` is the trace's order.
            append_trace: c
                .prepare(
                    "INSERT INTO trace (at, event)
                     SELECT at, event FROM UNNEST($1::int8[], $2::text[])
                         WITH ORDINALITY AS t(at, event, n)
                     ORDER BY n",
                )
                .map_err(err)?,
            archive_jobs: c
                .prepare(
                    "UPDATE jobs SET archived_at = u.at, content_key = u.content_key
                     FROM UNNEST($1::text[], $2::int8[], $3::text[]) AS u(job_id, at, content_key)
                     WHERE jobs.job_id = u.job_id",
                )
                .map_err(err)?,
        })
    }
}

/// Each job's last write in `jobs`, in order. The core writes a job once
/// per commit; this keeps a second write from failing the whole commit.
pub(super) fn last_write_of_each<'b, 'a>(jobs: &'b [JobWrite<'a>]) -> Vec<&'b JobWrite<'a>> {
    let mut seen = std::collections::HashSet::with_capacity(jobs.len());
    let mut last: Vec<&JobWrite<'a>> = jobs
        .iter()
        .rev()
        .filter(|j| seen.insert(j.job_id))
        .collect();
    last.reverse();
    last
}

/// Every table of the current schema, in an empty database, and its version.
fn create_schema(tx: &mut postgres::Transaction<'_>) -> Result<(), postgres::Error> {
    tx.batch_execute(&format!(
        "CREATE TABLE jobs (
                         job_id TEXT PRIMARY KEY,
                         state TEXT NOT NULL,
                         queue_key BIGINT NOT NULL,
                         data TEXT NOT NULL,
                         archived_at BIGINT,
                         content_key TEXT
                     );
                     {ARCHIVED_INDEX};
                     {WORKLOADS_TABLE};
                     CREATE TABLE models (
                         name TEXT PRIMARY KEY,
                         state TEXT NOT NULL,
                         data TEXT NOT NULL
                     );
                     {MODEL_RECORDS_TABLE};
                     {WARM_STARTS_TABLE};
                     {cost_models};
                     CREATE TABLE artifacts (
                         run TEXT NOT NULL,
                         kind TEXT NOT NULL,
                         data BYTEA NOT NULL,
                         PRIMARY KEY (run, kind)
                     );
                     CREATE TABLE trace (
                         seq BIGSERIAL PRIMARY KEY,
                         at BIGINT NOT NULL,
                         event TEXT NOT NULL
                     );",
        cost_models = cost_models_table("BYTEA")
    ))?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1)",
        &[&SCHEMA_VERSION.to_string()],
    )?;
    Ok(())
}

/// Schema `from` (2 to 5) to the current one, step by step.
fn migrate_schema(tx: &mut postgres::Transaction<'_>, from: i64) -> Result<(), postgres::Error> {
    // 2 → 3: the archive's columns and index (NULL: nothing is
    // archived yet).
    if from == 2 {
        tx.batch_execute(&format!(
            "ALTER TABLE jobs ADD COLUMN archived_at BIGINT;
                         ALTER TABLE jobs ADD COLUMN content_key TEXT;
                         {ARCHIVED_INDEX};"
        ))?;
    }
    // 3 → 4: the workloads to a table of their own.
    if from <= 3 {
        tx.batch_execute(&format!(
            "{WORKLOADS_TABLE};
                         INSERT INTO workloads (job_id, workload) SELECT job_id, workload FROM jobs;
                         ALTER TABLE jobs DROP COLUMN workload;"
        ))?;
    }
    // 4 → 5: the model records' and warm starts' tables (a
    // run's records, a job's warm start, move to them with its
    // next commit).
    if from <= 4 {
        tx.batch_execute(&format!(
            "{MODEL_RECORDS_TABLE};
                         {WARM_STARTS_TABLE};"
        ))?;
    }
    // 5 → 6: the fleet's cost models, none yet.
    tx.batch_execute(&format!(
        "{};
                     UPDATE meta SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version';",
        cost_models_table("BYTEA")
    ))
}

/// Writes a batch's rows in one transaction, in this order: jobs (changed,
/// then new), archive marks, model runs, warm starts, the runs' records and
/// the records gone, artefacts, cost models, trace lines, meta. Rows of a
/// kind go in one statement of arrays where they can (one round trip each).
/// Dropping `tx` on an error rolls every write back.
fn write_batch(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    batch: &RowBatch<'_, '_>,
) -> Result<(), postgres::Error> {
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
    write_jobs(tx, st, jobs)?;
    mark_archived(tx, st, archive)?;
    for (name, state, data) in models {
        tx.execute(&st.upsert_model, &[name, state, data])?;
    }
    write_warm_starts(tx, st, warm_starts)?;
    write_records(tx, st, records, records_gone)?;
    for (run, kind, bytes) in artifacts {
        tx.execute(&st.put_artifact, &[run, kind, bytes])?;
    }
    write_cost_models(tx, st, cost_models)?;
    append_trace(tx, st, trace)?;
    write_meta(tx, meta)
}

/// Each job's last write: a job without its workload is only updated, one
/// with it is upserted and its workload written once.
fn write_jobs(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    jobs: &[JobWrite<'_>],
) -> Result<(), postgres::Error> {
    let (new, changed): (Vec<&JobWrite<'_>>, Vec<&JobWrite<'_>>) = last_write_of_each(jobs)
        .into_iter()
        .partition(|job| job.workload.is_some());
    if !changed.is_empty() {
        let ids: Vec<&str> = changed.iter().map(|j| j.job_id).collect();
        let states: Vec<&str> = changed.iter().map(|j| j.state).collect();
        let keys: Vec<i64> = changed.iter().map(|j| j.queue_key).collect();
        let data: Vec<&str> = changed.iter().map(|j| j.data.as_str()).collect();
        tx.execute(&st.update_jobs, &[&ids, &states, &keys, &data])?;
    }
    if !new.is_empty() {
        let ids: Vec<&str> = new.iter().map(|j| j.job_id).collect();
        let states: Vec<&str> = new.iter().map(|j| j.state).collect();
        let keys: Vec<i64> = new.iter().map(|j| j.queue_key).collect();
        let data: Vec<&str> = new.iter().map(|j| j.data.as_str()).collect();
        let workloads: Vec<&str> = new
            .iter()
            .map(|j| j.workload.as_deref().unwrap_or_default())
            .collect();
        tx.execute(&st.insert_jobs, &[&ids, &states, &keys, &data])?;
        tx.execute(&st.insert_workloads, &[&ids, &workloads])?;
    }
    Ok(())
}

/// Marks archived jobs (already written above) with when and their content key.
fn mark_archived(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    archive: &[ArchiveWrite],
) -> Result<(), postgres::Error> {
    if !archive.is_empty() {
        let ids: Vec<&str> = archive.iter().map(|a| a.job_id.as_str()).collect();
        let at: Vec<i64> = archive.iter().map(|a| a.at.0 as i64).collect();
        let keys: Vec<&str> = archive.iter().map(|a| a.content_key.as_str()).collect();
        tx.execute(&st.archive_jobs, &[&ids, &at, &keys])?;
    }
    Ok(())
}

/// Warm starts written (`Some`), then those deleted (`None`).
fn write_warm_starts(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    warm_starts: &[(&str, Option<String>)],
) -> Result<(), postgres::Error> {
    let (put, dropped): (Vec<_>, Vec<_>) = warm_starts.iter().partition(|(_, w)| w.is_some());
    if !put.is_empty() {
        let ids: Vec<&str> = put.iter().map(|(id, _)| *id).collect();
        let data: Vec<&str> = put
            .iter()
            .map(|(_, w)| w.as_deref().unwrap_or_default())
            .collect();
        tx.execute(&st.put_warm_starts, &[&ids, &data])?;
    }
    if !dropped.is_empty() {
        let ids: Vec<&str> = dropped.iter().map(|(id, _)| *id).collect();
        tx.execute(&st.drop_warm_starts, &[&ids])?;
    }
    Ok(())
}

/// The runs' new records, then the records they no longer keep.
fn write_records(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    records: &[RecordWrite<'_>],
    records_gone: &[(&str, String)],
) -> Result<(), postgres::Error> {
    if !records.is_empty() {
        let models: Vec<&str> = records.iter().map(|r| r.model).collect();
        let keys: Vec<&str> = records.iter().map(|r| r.key).collect();
        let tasks: Vec<i64> = records.iter().map(|r| r.task).collect();
        let data: Vec<&str> = records.iter().map(|r| r.data.as_str()).collect();
        tx.execute(&st.put_records, &[&models, &keys, &tasks, &data])?;
    }
    if !records_gone.is_empty() {
        let models: Vec<&str> = records_gone.iter().map(|(m, _)| *m).collect();
        let keys: Vec<&str> = records_gone.iter().map(|(_, k)| k.as_str()).collect();
        tx.execute(&st.drop_records, &[&models, &keys])?;
    }
    Ok(())
}

/// Cost models kept since the last commit, upserted by target and TVM release.
fn write_cost_models(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    cost_models: &[CostModelRow],
) -> Result<(), postgres::Error> {
    for m in cost_models {
        tx.execute(
            &st.put_cost_model,
            &[
                &m.target,
                &m.tvm,
                &m.id,
                &m.samples,
                &m.tvm_version,
                &m.updated_at,
                &m.data,
            ],
        )?;
    }
    Ok(())
}

/// Trace lines, appended in the batch's order.
fn append_trace(
    tx: &mut postgres::Transaction<'_>,
    st: &Statements,
    trace: &[(Millis, String)],
) -> Result<(), postgres::Error> {
    if !trace.is_empty() {
        let at: Vec<i64> = trace.iter().map(|(at, _)| at.0 as i64).collect();
        let lines: Vec<&str> = trace.iter().map(|(_, line)| line.as_str()).collect();
        tx.execute(&st.append_trace, &[&at, &lines])?;
    }
    Ok(())
}

/// `meta` rows upserted, or deleted (`None`).
fn write_meta(
    tx: &mut postgres::Transaction<'_>,
    meta: &[(String, Option<String>)],
) -> Result<(), postgres::Error> {
    for (key, value) in meta {
        match value {
            Some(value) => tx.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[key, value],
            ),
            None => tx.execute("DELETE FROM meta WHERE key = $1", &[key]),
        }?;
    }
    Ok(())
}

impl Backend for PgStore {
    fn path(&self) -> &str {
        &self.path
    }

    fn unavailable(&mut self) -> Option<StoreError> {
        // The sync client notices a closed socket only while it waits for
        // an answer: one round trip asks, within a deadline.
        self.reconnect.as_ref()?;
        if !self.session_lost() && self.client.is_valid(CHECK_TIMEOUT).is_ok() {
            return None;
        }
        self.suspect = true;
        Some(self.disconnected())
    }

    fn session_lost(&self) -> bool {
        self.suspect || self.client.is_closed()
    }

    /// A session that still answers is kept (the lead is on it); one that
    /// ended, or does not answer, is replaced by a new one opened off this
    /// thread, collected by a later probe: the core never waits for a
    /// connection to a server that does not answer.
    fn probe(&mut self) -> Result<(), StoreError> {
        let Some(again) = self.reconnect.clone() else {
            return Ok(());
        };
        if self.attempt.is_none() {
            if !self.session_lost() && self.client.is_valid(CHECK_TIMEOUT).is_ok() {
                return Ok(());
            }
            self.suspect = true;
            self.start_attempt(again);
        }
        let Some(attempt) = &self.attempt else {
            return Err(self.disconnected());
        };
        // A server that answers connects in milliseconds: most attempts
        // are collected by the probe that started them.
        match attempt.recv_timeout(ATTEMPT_GRACE) {
            Err(mpsc::RecvTimeoutError::Timeout) => Err(self.disconnected()),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.attempt = None;
                Err(self.disconnected())
            }
            Ok(lead) => {
                self.attempt = None;
                self.install(lead?)
            }
        }
    }

    fn load_job_rows(&mut self) -> Result<Vec<JobRead>, StoreError> {
        let rows = self
            .client
            .query(
                &format!("{JOB_COLUMNS} WHERE archived_at IS NULL ORDER BY queue_key"),
                &[],
            )
            .map_err(|cause| StoreError::Postgres {
                path: self.path.clone(),
                cause,
            })?;
        rows.iter().map(|r| self.job_read(r)).collect()
    }

    fn load_archived_rows(&mut self, which: Archived<'_>) -> Result<Vec<JobRead>, StoreError> {
        let rows = match which {
            Archived::Ids(ids) => self.client.query(
                &format!("{JOB_COLUMNS} WHERE job_id = ANY($1) AND archived_at IS NOT NULL"),
                &[&ids],
            ),
            Archived::Done { content_key } => self.client.query(
                &format!(
                    "{JOB_COLUMNS} WHERE content_key = $1 AND archived_at IS NOT NULL
                     AND state = 'done' ORDER BY archived_at DESC LIMIT $2"
                ),
                &[&content_key, &MAX_ARCHIVED_PER_KEY],
            ),
            Archived::All => self.client.query(
                &format!("{JOB_COLUMNS} WHERE archived_at IS NOT NULL ORDER BY queue_key"),
                &[],
            ),
        }
        .map_err(self.err())?;
        rows.iter().map(|r| self.job_read(r)).collect()
    }

    fn archived_counts(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT state, count(*) FROM jobs WHERE archived_at IS NOT NULL GROUP BY state",
                &[],
            )
            .map_err(self.err())?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(self.err())?,
                    r.try_get(1).map_err(self.err())?,
                ))
            })
            .collect()
    }

    fn load_model_rows(&mut self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self.query_all("SELECT name, data FROM models ORDER BY name")?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(self.err())?,
                    r.try_get(1).map_err(self.err())?,
                ))
            })
            .collect()
    }

    fn load_model_records(&mut self) -> Result<Vec<RecordRead>, StoreError> {
        let rows = self.query_all("SELECT model, key, task, data FROM model_records")?;
        rows.iter()
            .map(|r| {
                Ok(RecordRead {
                    model: r.try_get(0).map_err(self.err())?,
                    key: r.try_get(1).map_err(self.err())?,
                    task: r.try_get(2).map_err(self.err())?,
                    data: r.try_get(3).map_err(self.err())?,
                })
            })
            .collect()
    }

    fn load_artifact(&mut self, run: &str, kind: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT data FROM artifacts WHERE run = $1 AND kind = $2",
                &[&run, &kind],
            )
            .map_err(|cause| StoreError::Postgres {
                path: self.path.clone(),
                cause,
            })?;
        row.map(|r| r.try_get(0).map_err(self.err())).transpose()
    }

    fn load_cost_models(&mut self) -> Result<Vec<CostModelRow>, StoreError> {
        let rows = self.query_all(
            "SELECT target, tvm, id, samples, tvm_version, updated_at, data FROM cost_models",
        )?;
        rows.iter()
            .map(|r| {
                Ok(CostModelRow {
                    target: r.try_get(0).map_err(self.err())?,
                    tvm: r.try_get(1).map_err(self.err())?,
                    id: r.try_get(2).map_err(self.err())?,
                    samples: r.try_get(3).map_err(self.err())?,
                    tvm_version: r.try_get(4).map_err(self.err())?,
                    updated_at: r.try_get(5).map_err(self.err())?,
                    data: r.try_get(6).map_err(self.err())?,
                })
            })
            .collect()
    }

    fn load_meta(&mut self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT key, value FROM meta WHERE left(key, length($1)) = $1 ORDER BY key",
                &[&prefix],
            )
            .map_err(|cause| StoreError::Postgres {
                path: self.path.clone(),
                cause,
            })?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(self.err())?,
                    r.try_get(1).map_err(self.err())?,
                ))
            })
            .collect()
    }

    fn commit(&mut self, batch: &RowBatch<'_, '_>) -> Result<(), StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        };
        if self.statements.is_none() {
            self.statements = Some(self.prepare()?);
        }
        let Some(st) = &self.statements else {
            unreachable!("prepared above");
        };
        let mut tx = self.client.transaction().map_err(err)?;
        write_batch(&mut tx, st, batch).map_err(err)?;
        tx.commit().map_err(err)
    }

    fn prune_trace(&mut self, before: Millis) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        };
        let last: Option<i64> = self
            .client
            .query_one(
                "SELECT max(seq) FROM trace WHERE at < $1",
                &[&(before.0 as i64)],
            )
            .map_err(err)?
            .get(0);
        let Some(last) = last else {
            return Ok(0);
        };
        let mut removed = 0;
        loop {
            let n = self
                .client
                .execute(
                    "DELETE FROM trace WHERE seq IN
                     (SELECT seq FROM trace WHERE seq <= $1 ORDER BY seq LIMIT 10000)",
                    &[&last],
                )
                .map_err(err)?;
            removed += n;
            if n < 10000 {
                return Ok(removed);
            }
        }
    }

    fn export_trace(
        &mut self,
        line: &mut dyn FnMut(i64, i64, &str) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let err = |cause| StoreError::Postgres {
            path: path.clone(),
            cause,
        };
        // A cursor, so that a long trace is streamed, not held in memory.
        let mut tx = self.client.transaction().map_err(err)?;
        let portal = tx
            .bind("SELECT seq, at, event FROM trace ORDER BY seq", &[])
            .map_err(err)?;
        let mut n = 0;
        loop {
            let rows = tx.query_portal(&portal, 10_000).map_err(err)?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let seq: i64 = row.try_get(0).map_err(err)?;
                let at: i64 = row.try_get(1).map_err(err)?;
                let event: &str = row.try_get(2).map_err(err)?;
                line(seq, at, event)?;
                n += 1;
            }
        }
        Ok(n)
    }
}
