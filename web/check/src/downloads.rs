//! The jobs card's downloads (JSON, CSV, the MetaSchedule database), made
//! here rather than in the page.
//!
//! Writing them needs serde's encoders for every job type and the export
//! code: ~26 KB of the page's module (5.5 KB brotli) that a user who only
//! watches the fleet never runs. The page asks the master for `results`
//! (archived jobs included, as `tunefleet export` does) and hands the
//! reply's text over untouched; the files come back ready to save. They are
//! made by the same `tunefleet_shared::export` functions as the CLI's, over
//! the same jobs in the same order; unlike `tunefleet export --format
//! metaschedule`, the page writes one database for all targets, not one
//! directory per target.

use serde::{Deserialize, Serialize};
use tunefleet_shared::export::{self, METASCHEDULE_RECORD_FILE, METASCHEDULE_WORKLOAD_FILE};
use tunefleet_shared::protocol::JobView;
use tunefleet_shared::tree::FromTree;

/// A file the jobs card offers for download.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Download {
    Json,
    Csv,
    Metaschedule,
}

impl Download {
    /// Each download's name, as the page's buttons and this module's entry
    /// point spell it.
    pub const NAMES: [(Download, &'static str); 3] = [
        (Download::Json, "json"),
        (Download::Csv, "csv"),
        (Download::Metaschedule, "metaschedule"),
    ];

    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(d, _)| *d == self)
            .map_or("", |(_, name)| name)
    }

    pub fn from_name(name: &str) -> Option<Download> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(d, _)| *d)
    }
}

/// One file to save.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct SavedFile {
    pub name: String,
    pub mime: String,
    pub text: String,
}

/// What a download click saves, and a line for the notice area when part of
/// the fleet was left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, FromTree)]
pub struct Files {
    pub files: Vec<SavedFile>,
    pub notice: Option<String>,
}

// Read with the shared JSON reader, like the page's frames: serde's derived
// decoders for every job type would add ~30 KB (brotli) to this module.
#[derive(FromTree)]
struct ResultsFrame {
    body: ResultsBody,
}

#[derive(FromTree)]
struct ResultsBody {
    jobs: Vec<JobView>,
}

fn file(name: &str, mime: &str, text: String) -> SavedFile {
    SavedFile {
        name: name.into(),
        mime: mime.into(),
        text,
    }
}

/// The files for `download`, from the text of the master's reply to
/// `results` (`{"type":"reply","id":…,"body":{"kind":"results","jobs":[…]}}`).
pub fn make(download: Download, results_reply: &str) -> Result<Files, String> {
    let frame: ResultsFrame = tunefleet_shared::tree::from_str(results_reply)
        .map_err(|e| format!("the master's results could not be read: {e}"))?;
    let jobs = frame.body.jobs;
    let one = |file| Files {
        files: vec![file],
        notice: None,
    };
    Ok(match download {
        Download::Json => one(file(
            "tunefleet-results.json",
            "application/json",
            export::to_json(&jobs),
        )),
        Download::Csv => one(file(
            "tunefleet-results.csv",
            "text/csv",
            export::to_csv(&jobs),
        )),
        Download::Metaschedule => {
            let db = export::metaschedule_database(&jobs).map_err(|e| e.to_string())?;
            let notice = (db.skipped > 0).then(|| {
                format!(
                    "MetaSchedule database: {} jobs exported, {} without MetaSchedule records skipped",
                    db.jobs, db.skipped
                )
            });
            Files {
                files: vec![
                    file(METASCHEDULE_WORKLOAD_FILE, "application/json", db.workloads),
                    file(METASCHEDULE_RECORD_FILE, "application/json", db.records),
                ],
                notice,
            }
        }
    })
}

#[cfg(test)]
mod tests;
