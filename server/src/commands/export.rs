//! `tunefleet export`: the data of `results`, written to a file.
//!
//! The file is written next to its final name and renamed into place, so a
//! reader (or a crash halfway) never sees a half-written export.
//!
//! Formats are an enum so new ones slot in: the MetaSchedule database format
//! (a `database_workload.json` + `database_tuning_record.json` pair that
//! `tvm.meta_schedule.database.JSONDatabase` loads) is planned as another
//! [`ExportFormat`] variant, rendered in [`render`].

use super::results::{fetch, to_csv, to_json};
use super::{emit, plural, ConnectArgs};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use tunefleet_shared::protocol::JobView;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportFormat {
    /// An array of job objects, as `results --format json`.
    #[default]
    Json,
    /// One row per job, as `results --format csv`.
    Csv,
    // MetaSchedule database: add the variant here and its renderer in `render`.
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
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let jobs = fetch(&args.connect, &args.jobs).await?;
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

/// The export in `format`.
pub fn render(format: ExportFormat, jobs: &[JobView]) -> anyhow::Result<String> {
    match format {
        ExportFormat::Json => to_json(jobs),
        ExportFormat::Csv => Ok(to_csv(jobs)),
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
mod tests {
    use super::*;
    use crate::client::tests::job;
    use tunefleet_shared::protocol::JobState;

    #[test]
    fn render_matches_results_formats() {
        let jobs = vec![job("aa", JobState::Done)];
        assert!(render(ExportFormat::Csv, &jobs)
            .unwrap()
            .starts_with("job_id,name,op,shape,dtype,state,"));
        let json: serde_json::Value =
            serde_json::from_str(&render(ExportFormat::Json, &jobs).unwrap()).unwrap();
        assert_eq!(json[0]["job_id"], "aa");
    }

    #[test]
    fn atomic_write_replaces_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        std::fs::write(&path, "old").unwrap();
        write_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let err = write_atomically(&dir.path().join("missing/out.csv"), b"x").unwrap_err();
        assert!(err.to_string().contains("missing/out.csv"), "{err}");
    }
}
