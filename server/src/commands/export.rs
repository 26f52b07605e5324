//! `tunefleet export`: the data of `results`, written to a file.
//!
//! The file is written next to its final name and renamed into place, so a
//! reader (or a crash halfway) never sees a half-written export.
//!
//! `--format metaschedule --out DIR` writes the fleet's best records as a
//! MetaSchedule database: `DIR/database_workload.json` and
//! `DIR/database_tuning_record.json`, which
//! `tvm.s_tir.meta_schedule.database.JSONDatabase(work_dir=DIR)` opens, so
//! `compile_tir` (or Relax's tuned-database passes) applies the fleet's
//! schedules. Workers of the `tvm` backend report each record in
//! MetaSchedule's own JSON form and the workload in its database form; jobs
//! without those (the `sim` backend) are skipped, and said so.
//!
//! `--target T` keeps only results measured for a target that serves `T`
//! (the matching rule of `target.rs`: a record for `mcpu=znver3` is kept for
//! `--target 'llvm -mcpu=znver3'` and for plain `llvm`, never for znver4).
//! `--merge` adds to a database already in `DIR` (an earlier export, another
//! farm's, MetaSchedule's own) instead of replacing it: workloads are matched
//! by their database line, and a record already there is not written twice,
//! so exports of several runs can be merged into one directory. Beside the
//! database, `tunefleet_workloads.json` names the tunefleet workload of each
//! database line, so that `tunefleet import` of the directory seeds another
//! farm's jobs of those workloads before they first run.
//!
//! An export is everything the farm measured: the jobs archived by
//! `serve --job-retention` are read from the master's database and included.

use super::results::{fetch, to_csv, to_json};
use super::{emit, plural, ConnectArgs};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use tunefleet_shared::export::{
    metaschedule_database, workload_keys, MetascheduleDb, METASCHEDULE_RECORD_FILE,
    METASCHEDULE_WORKLOAD_FILE,
};
use tunefleet_shared::import::WORKLOAD_KEYS_FILE;
use tunefleet_shared::protocol::JobView;
use tunefleet_shared::target::Target;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportFormat {
    /// An array of job objects, as `results --format json`.
    #[default]
    Json,
    /// One row per job, as `results --format csv`.
    Csv,
    /// A MetaSchedule JSON database in the directory given by `--out`.
    Metaschedule,
    /// The compiled tuned model of `--model` (a shared library).
    Library,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    pub format: ExportFormat,
    /// Output file (`-` or absent: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Only these jobs (repeatable; several ids may follow one --job).
    #[arg(long = "job", value_name = "ID", num_args = 1..)]
    pub jobs: Vec<String>,
    /// A model run: `--format metaschedule` writes every record of its tasks,
    /// `--format library` its compiled tuned model.
    #[arg(long, value_name = "NAME", conflicts_with = "jobs")]
    pub model: Option<String>,
    /// Only results measured for a target that serves this one (JSON such as
    /// '{"kind":"llvm","mcpu":"znver3"}', or 'llvm -mcpu=znver3').
    #[arg(long, value_name = "TARGET", value_parser = parse_target)]
    pub target: Option<Target>,
    /// With --format metaschedule: add to the database already in --out DIR
    /// (records already there are kept and not written twice).
    #[arg(long)]
    pub merge: bool,
}

fn parse_target(text: &str) -> Result<Target, String> {
    Target::parse(text).map_err(|e| e.to_string())
}

/// Keeps the jobs whose effective target serves `target`.
pub fn only_target(jobs: Vec<JobView>, target: Option<&Target>) -> Vec<JobView> {
    let Some(target) = target else {
        return jobs;
    };
    jobs.into_iter()
        .filter(|job| {
            job.result
                .as_ref()
                .and_then(|r| r.target.as_ref())
                .unwrap_or(&job.workload.target)
                .serves(target)
        })
        .collect()
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    if let Some(name) = &args.model {
        return export_model(&args, name).await;
    }
    if args.format == ExportFormat::Library {
        anyhow::bail!("--format library needs --model NAME");
    }
    if args.format == ExportFormat::Metaschedule {
        return export_metaschedule(&args).await;
    }
    if args.merge {
        anyhow::bail!("--merge applies to --format metaschedule only");
    }
    export_text(&args).await
}

/// `--model NAME`: a model run's database or library. Both are files on
/// disk (`-`, standard output, cannot hold them), so `--out` is required.
async fn export_model(args: &ExportArgs, name: &str) -> anyhow::Result<()> {
    use tunefleet_shared::model::ModelArtifactKind;
    let out = args.out.as_deref().filter(|p| *p != Path::new("-"));
    let (kind, out) = match args.format {
        ExportFormat::Metaschedule => (
            ModelArtifactKind::Database,
            out.context(
                "--format metaschedule writes two files: give the directory with --out DIR",
            )?,
        ),
        ExportFormat::Library => (
            ModelArtifactKind::Library,
            out.context(
                "--format library writes a shared library: give the file with --out FILE.so",
            )?,
        ),
        other => anyhow::bail!(
            "--model exports `metaschedule` or `library`, not {other:?} (see `results --model`)"
        ),
    };
    super::model::export(&args.connect, name, kind, out).await
}

/// `--format metaschedule --out DIR`: the jobs' best records as one
/// MetaSchedule database per effective target.
async fn export_metaschedule(args: &ExportArgs) -> anyhow::Result<()> {
    let dir = args
        .out
        .as_deref()
        .filter(|p| *p != Path::new("-"))
        .context("--format metaschedule writes two files: give the directory with --out DIR")?
        .to_path_buf();
    let jobs = only_target(
        fetch(&args.connect, &args.jobs, true).await?,
        args.target.as_ref(),
    );
    // A MetaSchedule database ignores targets when it is queried
    // (apache/tvm#15549): one directory per effective target, so records
    // for one CPU are never applied on another.
    let groups = group_by_target(jobs);
    let single = groups.len() == 1;
    for (target, jobs) in &groups {
        let dir = if single {
            dir.clone()
        } else {
            dir.join(target_dir_name(target))
        };
        let db = match metaschedule_database(jobs) {
            Ok(db) if args.merge => merge_with_existing(&dir, db)?,
            Ok(db) => db,
            Err(e) if !single => {
                eprintln!("skipped target {target}: {e}");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        write_database(&dir, target, jobs, &db, args.merge)?;
    }
    Ok(())
}

/// One target's database in `dir`, each file written atomically, with the
/// workload keys beside it (added to those already there with `--merge`).
fn write_database(
    dir: &Path,
    target: &str,
    jobs: &[JobView],
    db: &MetascheduleDb,
    merge: bool,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomically(
        &dir.join(METASCHEDULE_WORKLOAD_FILE),
        db.workloads.as_bytes(),
    )?;
    write_atomically(&dir.join(METASCHEDULE_RECORD_FILE), db.records.as_bytes())?;
    let keys_path = dir.join(WORKLOAD_KEYS_FILE);
    let existing = if merge {
        read_if_present(&keys_path)?
    } else {
        String::new()
    };
    write_atomically(&keys_path, workload_keys(jobs, &existing).as_bytes())?;
    eprintln!(
        "exported {} ({}) for target {target} to {} as a MetaSchedule database{}",
        plural(db.jobs, "job", "jobs"),
        plural(db.record_count, "record", "records"),
        dir.display(),
        if db.skipped > 0 {
            format!(
                "; skipped {} without MetaSchedule records",
                plural(db.skipped, "job", "jobs")
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The other formats: one text, to `--out FILE` or standard output.
async fn export_text(args: &ExportArgs) -> anyhow::Result<()> {
    let jobs = only_target(
        fetch(&args.connect, &args.jobs, true).await?,
        args.target.as_ref(),
    );
    let text = render(args.format, &jobs)?;
    match args.out.as_deref() {
        None => emit(&text)?,
        Some(path) if path == Path::new("-") => emit(&text)?,
        Some(path) => {
            write_atomically(path, text.as_bytes())?;
            eprintln!(
                "exported {} to {}",
                plural(jobs.len(), "job", "jobs"),
                path.display()
            );
        }
    }
    Ok(())
}

/// The database in `dir` (if any) with `db`'s workloads and records added;
/// `db.record_count` becomes the number of records new to `dir`.
fn merge_with_existing(dir: &Path, db: MetascheduleDb) -> anyhow::Result<MetascheduleDb> {
    let merged = merge_databases(
        &read_if_present(&dir.join(METASCHEDULE_WORKLOAD_FILE))?,
        &read_if_present(&dir.join(METASCHEDULE_RECORD_FILE))?,
        &db,
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    Ok(merged)
}

/// A file's text, or nothing when there is no such file yet (a `--merge`
/// into a new directory).
fn read_if_present(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Pure part of `merge_with_existing`: existing database text plus `db`.
/// An error names the file and line that is not a database line.
pub fn merge_databases(
    old_workloads: &str,
    old_records: &str,
    db: &MetascheduleDb,
) -> Result<MetascheduleDb, String> {
    use serde_json::Value;
    let parse = |file: &str, n: usize, line: &str| -> Result<Value, String> {
        serde_json::from_str(line).map_err(|e| format!("{file} line {}: {e}", n + 1))
    };
    let mut workloads: Vec<String> = Vec::new();
    for (n, line) in old_workloads
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        workloads.push(parse(METASCHEDULE_WORKLOAD_FILE, n, line)?.to_string());
    }
    let mut records: Vec<(usize, String)> = Vec::new();
    for (n, line) in old_records
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let value = parse(METASCHEDULE_RECORD_FILE, n, line)?;
        let index = value[0]
            .as_u64()
            .filter(|&i| (i as usize) < workloads.len())
            .ok_or_else(|| {
                format!(
                    "{METASCHEDULE_RECORD_FILE} line {}: no workload index in 0..{}",
                    n + 1,
                    workloads.len()
                )
            })?;
        records.push((index as usize, value[1].to_string()));
    }
    let new_workloads: Vec<String> = db.workloads.lines().map(str::to_string).collect();
    let mut added = 0;
    for line in db.records.lines() {
        let value: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let Some(line) = value[0]
            .as_u64()
            .and_then(|i| new_workloads.get(i as usize))
        else {
            continue;
        };
        let line = serde_json::from_str::<Value>(line)
            .map_err(|e| e.to_string())?
            .to_string();
        let index = match workloads.iter().position(|w| *w == line) {
            Some(i) => i,
            None => {
                workloads.push(line);
                workloads.len() - 1
            }
        };
        let record = value[1].to_string();
        if !records.iter().any(|(i, r)| *i == index && *r == record) {
            records.push((index, record));
            added += 1;
        }
    }
    let mut out = MetascheduleDb {
        jobs: db.jobs,
        skipped: db.skipped,
        record_count: added,
        ..MetascheduleDb::default()
    };
    for line in workloads {
        out.workloads.push_str(&line);
        out.workloads.push('\n');
    }
    for (index, record) in records {
        out.records.push_str(&format!("[{index},{record}]\n"));
    }
    Ok(out)
}

/// Jobs grouped by the effective target their result was measured for (the
/// job's own target when the worker did not say), in target order.
pub fn group_by_target(jobs: Vec<JobView>) -> Vec<(String, Vec<JobView>)> {
    let mut groups: std::collections::BTreeMap<String, Vec<JobView>> = Default::default();
    for job in jobs {
        let target = job
            .result
            .as_ref()
            .and_then(|r| r.target.as_ref())
            .unwrap_or(&job.workload.target)
            .canonical_json();
        groups.entry(target).or_default().push(job);
    }
    groups.into_iter().collect()
}

/// `llvm-znver3-2` for `{"kind":"llvm","mcpu":"znver3","num-cores":2}`: the
/// attribute values in key order, kept to safe file-name characters.
pub fn target_dir_name(canonical: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(canonical).unwrap_or_default();
    let mut parts = vec![value["kind"].as_str().unwrap_or("target").to_string()];
    if let Some(map) = value.as_object() {
        for (k, v) in map {
            if k != "kind" {
                parts.push(match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
            }
        }
    }
    parts
        .join("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The export in `format` (single-file formats only).
pub fn render(format: ExportFormat, jobs: &[JobView]) -> anyhow::Result<String> {
    match format {
        ExportFormat::Json => to_json(jobs),
        ExportFormat::Csv => Ok(to_csv(jobs)),
        ExportFormat::Metaschedule => {
            anyhow::bail!("the metaschedule format is a directory: use --out DIR")
        }
        ExportFormat::Library => anyhow::bail!("--format library needs --model NAME"),
    }
}

/// Writes `data` to a temporary file beside `path`, then renames it over `path`.
pub fn write_atomically(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("cannot write to {}: not a file name", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("cannot write {}: {e}", path.display())
    })
}

#[cfg(test)]
mod target_tests {
    use super::*;

    #[test]
    fn directory_names_follow_the_target() {
        assert_eq!(
            target_dir_name(r#"{"kind":"llvm","mcpu":"znver3","num-cores":2}"#),
            "llvm-znver3-2"
        );
        assert_eq!(
            target_dir_name(r#"{"kind":"llvm","keys":["a b"]}"#),
            "llvm-__a_b__"
        );
    }
}

#[cfg(test)]
mod tests;
