//! `tunefleet export-trace`: the state database's event log as JSON lines.
//!
//! Lorien users replayed a `--trace-file`; here the database *is* the state,
//! and the trace is kept for people who want the log itself. Reads the file
//! directly (read-only), so it works whether or not the master is running.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::store::{StateLocation, Store};

#[derive(clap::Args, Debug)]
pub struct ExportTraceArgs {
    /// The master's state: a SQLite file or a postgres:// URL (as `serve
    /// --state`). Read-only; the lead is not taken.
    #[arg(long, default_value = "tunefleet.db", value_parser = StateLocation::parse)]
    pub state: StateLocation,
    /// Output file (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: ExportTraceArgs) -> anyhow::Result<()> {
    if let StateLocation::File(path) = &args.state {
        if !path.is_file() {
            anyhow::bail!("no state database at {}", path.display());
        }
    }
    let mut store = Store::open_read_only(&args.state)?;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let n = store.export_trace(&mut out)?;
    out.flush()?;
    if args.out.is_some() {
        eprintln!("wrote {n} trace lines");
    }
    Ok(())
}
