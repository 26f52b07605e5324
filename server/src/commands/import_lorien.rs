//! `tunefleet import-lorien FILE [--trials N] [--out FILE]`: convert a Lorien
//! workload file into our workload format.
//!
//! The conversion is [`tunefleet_shared::lorien`]'s (the same code the web app
//! can use); this command only reads the file and writes the YAML, to standard
//! output or to `--out`. Nothing is sent to a master. Problems are printed to
//! standard error, one per line with file, line and field, and the exit status
//! is 1; in that case `--out` is not written.
//!
//! `tunefleet submit` converts Lorien files the same way (with the default
//! trial budget), so `import-lorien` then `submit` of its output and `submit` of
//! the Lorien file itself create the same jobs.

use super::plural;
use anyhow::Context;
use std::path::PathBuf;
use tunefleet_shared::lorien;
use tunefleet_shared::workload::{DEFAULT_TRIALS, MAX_TRIALS};

#[derive(clap::Args, Debug)]
pub struct ImportLorienArgs {
    /// Lorien workload file (YAML whose `workload:` list holds
    /// '!!python/object:...Workload {...}' strings).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Trial budget of every converted workload.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_TRIALS,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_TRIALS))
    )]
    pub trials: u32,
    /// Write the converted YAML to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub async fn run(args: ImportLorienArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    // Blocking I/O is fine: this command does nothing else.
    let text =
        std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {file}"))?;
    let (count, yaml) = convert(&text, &file, args.trials)?;
    match &args.out {
        Some(out) => {
            std::fs::write(out, yaml).with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!(
                "converted {} from {file} to {}",
                plural(count, "Lorien workload", "Lorien workloads"),
                out.display()
            );
        }
        None => {
            super::emit(&yaml)?;
            eprintln!(
                "converted {} from {file}",
                plural(count, "Lorien workload", "Lorien workloads")
            );
        }
    }
    Ok(())
}

/// Converts the Lorien file `text` (named `file` in messages and in the
/// header comment) into our YAML: `(number of workloads, YAML text)`. The
/// error lists every problem, one per line.
pub fn convert(text: &str, file: &str, trials: u32) -> anyhow::Result<(usize, String)> {
    let workloads =
        lorien::import_lorien(text, file, trials).map_err(|errors| anyhow::anyhow!("{errors}"))?;
    Ok((
        workloads.len(),
        lorien::to_tunefleet_yaml_from(&workloads, file),
    ))
}

#[cfg(test)]
mod tests;
