//! Schema migrations, oldest first. Each works on the stored JSON as JSON
//! (`serde_json::Value`), never through today's Rust types, so that a
//! migration written now still reads what an old release wrote after those
//! types have moved on.
//!
//! Before the first change a backup copy of the whole database is written
//! beside it (`FILE.schemaN.bak`, by SQLite's `VACUUM INTO`, consistent even
//! with a WAL), and the migration itself is one transaction: a crash halfway
//! leaves the old schema, which the next start migrates again.

use std::path::Path;

use rusqlite::{params, Connection};
use serde_json::Value;

use super::sqlite::create_tables;
use super::{
    cost_models_table, row, StoreError, ARCHIVED_INDEX, MODEL_RECORDS_TABLE, SCHEMA_VERSION,
    WARM_STARTS_TABLE, WORKLOADS_TABLE,
};

/// One migration from schema `from`: the backup beside the file first (kept
/// if it is already there: an earlier try wrote it from the same file),
/// then `step` in one transaction, committed only if it all went through.
/// `step` gets the error maker that names the file and the schemas.
fn migrate(
    conn: &Connection,
    path: &Path,
    path_text: &str,
    from: i64,
    step: impl FnOnce(&dyn Fn(String) -> StoreError) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let fail = |reason: String| StoreError::Migration {
        path: path_text.to_string(),
        from,
        to: SCHEMA_VERSION,
        reason,
    };
    let backup = backup_path(path, from);
    if !backup.exists() {
        conn.execute("VACUUM INTO ?1", params![backup.to_string_lossy()])
            .map_err(|e| fail(format!("cannot write the backup {}: {e}", backup.display())))?;
    }
    tracing::info!(
        state = path_text,
        backup = %backup.display(),
        "migrating the state database from schema {from} to {SCHEMA_VERSION}"
    );
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| fail(e.to_string()))?;
    match step(&fail) {
        Ok(()) => conn
            .execute_batch("COMMIT")
            .map_err(|e| fail(e.to_string())),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Schema 1 → 2 (and on to the current schema, whose tables it creates):
/// each `jobs.data` (the scheduler's `Job` as JSON, workload
/// included) becomes a schema-2 row plus its workload (in `workloads`).
pub(super) fn from_1(conn: &Connection, path: &Path, path_text: &str) -> Result<(), StoreError> {
    migrate(conn, path, path_text, 1, |fail| {
        let sql = |e: rusqlite::Error| fail(e.to_string());
        conn.execute_batch("ALTER TABLE jobs RENAME TO jobs_v1")
            .map_err(sql)?;
        // The new `jobs` (and the version), as a new database has them.
        create_tables(conn).map_err(sql)?;
        let rows: Vec<(String, String, i64, String)> = {
            let mut stmt = conn
                .prepare("SELECT job_id, state, queue_key, data FROM jobs_v1")
                .map_err(sql)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .map_err(sql)?;
            rows.collect::<Result<_, _>>().map_err(sql)?
        };
        let mut insert = conn
            .prepare("INSERT INTO jobs (job_id, state, queue_key, data) VALUES (?1, ?2, ?3, ?4)")
            .map_err(sql)?;
        let mut insert_workload = conn
            .prepare("INSERT INTO workloads (job_id, workload) VALUES (?1, ?2)")
            .map_err(sql)?;
        for (job_id, state, queue_key, data) in rows {
            let (row, workload) = job_row_from_1(&data)
                .map_err(|reason| fail(format!("job row {job_id}: {reason}")))?;
            insert
                .execute(params![job_id, state, queue_key, row])
                .map_err(sql)?;
            insert_workload
                .execute(params![job_id, workload])
                .map_err(sql)?;
        }
        drop(insert);
        drop(insert_workload);
        conn.execute_batch("DROP TABLE jobs_v1").map_err(sql)
    })
}

/// Schema 2 → 3 (and on): two new columns of `jobs` for archived jobs
/// (`NULL` in every existing row: nothing is archived yet) and their index.
pub(super) fn from_2(conn: &Connection, path: &Path, path_text: &str) -> Result<(), StoreError> {
    migrate(conn, path, path_text, 2, |fail| {
        conn.execute_batch(&format!(
            "ALTER TABLE jobs ADD COLUMN archived_at INTEGER;
             ALTER TABLE jobs ADD COLUMN content_key TEXT;
             {ARCHIVED_INDEX};"
        ))
        .and_then(|()| workloads_apart(conn))
        .map_err(|e| fail(e.to_string()))
    })
}

/// Schema 3 → 4 (and on to the current schema).
pub(super) fn from_3(conn: &Connection, path: &Path, path_text: &str) -> Result<(), StoreError> {
    migrate(conn, path, path_text, 3, |fail| {
        workloads_apart(conn).map_err(|e| fail(e.to_string()))
    })
}

/// Schema 4 → 5 (and on): the `model_records` and `warm_starts` tables.
/// Records and warm starts stay in the rows that hold them until each run's
/// or job's next commit moves them (`Store::commit`): a finished run is read
/// as it was.
pub(super) fn from_4(conn: &Connection, path: &Path, path_text: &str) -> Result<(), StoreError> {
    migrate(conn, path, path_text, 4, |fail| {
        records_apart(conn).map_err(|e| fail(e.to_string()))
    })
}

/// Schema 5 → 6: the `cost_models` table, empty (the fleet's cost models
/// are learnt from the rounds run after the upgrade).
pub(super) fn from_5(conn: &Connection, path: &Path, path_text: &str) -> Result<(), StoreError> {
    migrate(conn, path, path_text, 5, |fail| {
        cost_models_apart(conn).map_err(|e| fail(e.to_string()))
    })
}

fn records_apart(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "{MODEL_RECORDS_TABLE};
         {WARM_STARTS_TABLE};"
    ))?;
    cost_models_apart(conn)
}

fn cost_models_apart(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "{};
         UPDATE meta SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version';",
        cost_models_table("BLOB")
    ))
}

/// Schema 3 → 4: each job's workload moves from `jobs.workload` to the
/// `workloads` table, in the jobs' order in the file (their rowid), and the
/// column goes (`DROP COLUMN` rewrites `jobs` without it). No value changes.
fn workloads_apart(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "{WORKLOADS_TABLE};
         INSERT INTO workloads (job_id, workload) SELECT job_id, workload FROM jobs ORDER BY rowid;
         ALTER TABLE jobs DROP COLUMN workload;"
    ))?;
    records_apart(conn)
}

/// `jobs.data` of schema 1 → (schema-2 `data`, `workload`).
pub(super) fn job_row_from_1(data: &str) -> Result<(String, String), String> {
    let mut job: Value = serde_json::from_str(data).map_err(|e| format!("not JSON: {e}"))?;
    let Some(job) = job.as_object_mut() else {
        return Err("not a JSON object".into());
    };
    let mut view = match job.remove("view") {
        Some(Value::Object(view)) => view,
        _ => return Err("no `view` object".into()),
    };
    let workload = view
        .remove("workload")
        .ok_or_else(|| "no `view.workload`".to_string())?;
    view.remove("job_id");
    // What schema 1 kept beside the view, except the queue key (a column).
    for field in ["lease", "lease_history", "last_progress_at", "extras"] {
        if let Some(value) = job.remove(field) {
            view.insert(field.into(), value);
        }
    }
    let row = Value::Object(view);
    // Checked now, with the reason, rather than at the next start.
    serde_json::from_value::<row::JobRowIn>(row.clone())
        // (The row's form is schema 2's; schema 3 only added columns.)
        .map_err(|e| format!("does not make a schema-2 row: {e}"))?;
    Ok((row.to_string(), workload.to_string()))
}

/// `fleet.db` → `fleet.db.schema1.bak`.
pub(super) fn backup_path(path: &Path, schema: i64) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".schema{schema}.bak"));
    path.with_file_name(name)
}
