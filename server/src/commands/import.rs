//! `tunefleet import --format metaschedule DIR`: seed the farm with records
//! a team already has.
//!
//! `DIR` is a MetaSchedule JSON database (`database_workload.json` and
//! `database_tuning_record.json`: what `tune_tir`, `tune_relax` or
//! `tunefleet export --format metaschedule` write), or a directory of them,
//! one per subdirectory (an export of several targets). A
//! `tunefleet_workloads.json` beside a database (written by `tunefleet
//! export`) tells which tunefleet workload each database line belongs to.
//!
//! The records are sent to the master, which keeps each workload's fastest
//! `MAX_IMPORTED_RECORDS` and seeds later jobs of the same workload and a
//! serving target with them (see `tunefleet_shared::import` for when a job's
//! workload is known). Every file is checked before anything is sent; a bad
//! line is named with its file and line, and nothing is imported.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tunefleet_shared::export::{METASCHEDULE_RECORD_FILE, METASCHEDULE_WORKLOAD_FILE};
use tunefleet_shared::import::{
    parse_metaschedule_database, parse_workload_keys, ImportReport, ImportedWorkload, WorkloadKey,
    WORKLOAD_KEYS_FILE,
};

use super::{emit, plural, ConnectArgs};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImportFormat {
    /// A MetaSchedule JSON database directory (or a directory of them).
    #[default]
    Metaschedule,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Input format.
    #[arg(long, value_enum, default_value_t = ImportFormat::Metaschedule)]
    pub format: ImportFormat,
    /// Print the master's report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The database directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// What was read from `DIR`.
#[derive(Debug, Default)]
pub struct ReadImport {
    pub workloads: Vec<ImportedWorkload>,
    pub keys: Vec<WorkloadKey>,
    /// Databases read (directories).
    pub databases: usize,
}

/// Most bytes of records sent in one request: well under the master's
/// default 17 MiB message limit.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;

pub async fn run(args: ImportArgs) -> anyhow::Result<()> {
    let ImportFormat::Metaschedule = args.format;
    let read = read_dir(&args.dir)?;
    let records: usize = read.workloads.iter().map(|w| w.records.len()).sum();
    let mut client = args.connect.connect().await?;
    let mut total = ImportReport::default();
    let mut keys = Some(read.keys);
    for chunk in chunks(read.workloads) {
        let report = client
            .import(chunk, keys.take().unwrap_or_default())
            .await
            .map_err(|e| args.connect.explain(e))?;
        total.workloads_new += report.workloads_new;
        total.records_new += report.records_new;
        total.records_known += report.records_known;
        total.keys_new += report.keys_new;
    }
    if let Some(keys) = keys.filter(|k| !k.is_empty()) {
        let report = client
            .import(Vec::new(), keys)
            .await
            .map_err(|e| args.connect.explain(e))?;
        total.keys_new += report.keys_new;
    }
    let _ = client.close().await;
    if args.json {
        return emit(&format!("{}\n", serde_json::to_string_pretty(&total)?));
    }
    emit(&format!(
        "imported {} of {} from {} ({} new, {} already there){}\n",
        plural(records, "record", "records"),
        plural(total.workloads_new, "new workload", "new workloads"),
        plural(read.databases, "database", "databases"),
        total.records_new,
        total.records_known,
        if total.keys_new > 0 {
            format!(
                ", {}",
                plural(total.keys_new, "workload key", "workload keys")
            )
        } else {
            String::new()
        }
    ))
}

/// Reads `dir` (a database, or a directory of databases). Blocking I/O is
/// fine: the command does nothing else meanwhile.
pub fn read_dir(dir: &Path) -> anyhow::Result<ReadImport> {
    let mut out = ReadImport::default();
    if dir.join(METASCHEDULE_WORKLOAD_FILE).is_file() {
        read_database(dir, &mut out)?;
    } else {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        let mut subdirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join(METASCHEDULE_WORKLOAD_FILE).is_file())
            .collect();
        subdirs.sort();
        for sub in subdirs {
            read_database(&sub, &mut out)?;
        }
    }
    if out.databases == 0 {
        anyhow::bail!(
            "{}: no MetaSchedule database here ({METASCHEDULE_WORKLOAD_FILE} and \
             {METASCHEDULE_RECORD_FILE}, in the directory or in its subdirectories)",
            dir.display()
        );
    }
    if out.workloads.is_empty() {
        anyhow::bail!("{}: the database holds no records", dir.display());
    }
    Ok(out)
}

fn read_database(dir: &Path, out: &mut ReadImport) -> anyhow::Result<()> {
    let read = |name: &str| -> anyhow::Result<(String, String)> {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Ok((path.display().to_string(), text))
    };
    let (workload_file, workloads) = read(METASCHEDULE_WORKLOAD_FILE)?;
    let (record_file, records) = read(METASCHEDULE_RECORD_FILE)?;
    let parsed = parse_metaschedule_database(&workloads, &workload_file, &records, &record_file)?;
    for w in parsed {
        match out.workloads.iter_mut().find(|o| o.workload == w.workload) {
            Some(o) => {
                o.absorb(w.records);
            }
            None => out.workloads.push(w),
        }
    }
    let keys_path = dir.join(WORKLOAD_KEYS_FILE);
    if keys_path.is_file() {
        let (file, text) = read(WORKLOAD_KEYS_FILE)?;
        for key in parse_workload_keys(&text, &file)? {
            if !out.keys.contains(&key) {
                out.keys.push(key);
            }
        }
    }
    out.databases += 1;
    Ok(())
}

/// Splits workloads into requests of at most [`CHUNK_BYTES`] of records
/// (a workload is never split: at most `MAX_IMPORTED_RECORDS` records).
fn chunks(workloads: Vec<ImportedWorkload>) -> Vec<Vec<ImportedWorkload>> {
    let mut out: Vec<Vec<ImportedWorkload>> = Vec::new();
    let mut size = 0;
    for w in workloads {
        let bytes = w.workload.to_string().len()
            + w.records.iter().map(|r| r.to_string().len()).sum::<usize>();
        if out.is_empty() || size + bytes > CHUNK_BYTES {
            out.push(Vec::new());
            size = 0;
        }
        size += bytes;
        if let Some(last) = out.last_mut() {
            last.push(w);
        }
    }
    out
}

#[cfg(test)]
mod tests;
