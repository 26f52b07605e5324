//! The client subcommands of the `tunefleet` binary, one module each (as in
//! mini-redis): `submit`, `watch`, `status`, `results`, `export`, `shutdown`.
//!
//! Each module defines a clap `XArgs` and `pub async fn run(args: XArgs)`. They
//! talk to the master only through [`crate::client::Client`], so everything
//! they do is also possible from a Rust program or a test.
//!
//! `main.rs` can either add the `XArgs` types to its own subcommand enum or
//! flatten [`ClientCli`] into it (`#[command(flatten)] Client(ClientCli)`), and
//! should turn an error into the process exit status with [`report_error`]
//! (some commands ask for a specific status through [`Exit`]).
//!
//! # Tokens
//! `--token` / `TUNEFLEET_TOKEN` is sent in the handshake by every command
//! (submit needs it; the read-only commands send it when given, so they also
//! work against a master without public read). It is never printed: clap is
//! told to hide the environment value, and [`ConnectArgs`]'s `Debug` redacts it.
//!
//! # TLS
//! `--server wss://HOST:PORT` connects over TLS. The master's certificate must
//! be signed by a public CA, or by the CA in `--ca-cert FILE` /
//! `TUNEFLEET_CA_CERT` (for a self-signed certificate, the certificate itself).

use crate::client::{Client, ClientError, ConnectOptions};
use std::fmt;
use std::path::PathBuf;
use tunefleet_shared::protocol::{ErrorCode, JobView};
// Shared with the web dashboard, which exports the same files in the browser.
pub use tunefleet_shared::export::{csv_field, csv_line, format_latency, job_gflops};

pub mod compile;
pub mod export;
pub mod import;
pub mod import_lorien;
pub mod model;
pub mod results;
pub mod shutdown;
pub mod status;
pub mod submit;
pub mod token;
pub mod watch;

/// Where the master listens by default (`tunefleet serve`'s default port).
pub const DEFAULT_SERVER: &str = "ws://127.0.0.1:18871";

/// How to reach the master; flattened into every client command.
#[derive(clap::Args, Clone)]
pub struct ConnectArgs {
    /// Master URL (base URL such as ws://HOST:PORT, or the full .../ws/client URL).
    #[arg(long, value_name = "URL", default_value = DEFAULT_SERVER, env = "TUNEFLEET_SERVER")]
    pub server: String,
    /// Access token (admin token for submit). Prefer the environment variable:
    /// command lines are visible to other users of the machine.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TUNEFLEET_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// For wss://: trust the CA certificate(s) in this PEM file (a private CA or
    /// the master's self-signed certificate) instead of the public web roots.
    #[arg(long, value_name = "PEM", env = "TUNEFLEET_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

impl fmt::Debug for ConnectArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectArgs")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl ConnectArgs {
    /// The token, if one was given and is not empty (`TUNEFLEET_TOKEN=` means none).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref().filter(|t| !t.trim().is_empty())
    }

    /// Connects and performs the handshake, with a hint about the token when
    /// the master refuses one that was not given.
    pub async fn connect(&self) -> Result<Client, anyhow::Error> {
        self.try_connect().await.map_err(|e| self.explain(e))
    }

    /// Connects and performs the handshake, keeping the [`ClientError`] (for
    /// callers that retry on [`ClientError::is_retryable`]).
    ///
    /// With several URLs (`ws://A,ws://B`: a leader and its standby), each is
    /// tried in order and the first that completes the handshake and can
    /// commit is used (a degraded one only when none can); a master that
    /// answers with a refusal (a bad token) ends the search, as the standby
    /// would say the same. When none answers, the round is tried
    /// again for up to [`FAILOVER_WAIT`]: between a leader's death and its
    /// standby binding the port (its poll interval, then loading the state)
    /// neither listens, and a command sent then should wait, not fail.
    pub async fn try_connect(&self) -> Result<Client, ClientError> {
        let urls = tunefleet_shared::server_urls(&self.server);
        let deadline = tokio::time::Instant::now() + FAILOVER_WAIT;
        let mut last = None;
        loop {
            let mut degraded = None;
            for url in &urls {
                match Client::connect_with(url, self.token(), &self.options()).await {
                    Ok(client) if urls.len() == 1 => return Ok(client),
                    Ok(mut client) => match Self::can_commit(&mut client).await {
                        true => return Ok(client),
                        false => {
                            tracing::debug!(%url, "master cannot commit (degraded), trying the next");
                            degraded.get_or_insert(client);
                        }
                    },
                    Err(e) if e.is_retryable() && urls.len() > 1 => {
                        tracing::debug!(%url, "master not reachable, trying the next: {e}");
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            // No master can commit: the first that answered still serves reads
            // (and says why it refuses changes).
            if let Some(client) = degraded {
                return Ok(client);
            }
            if urls.len() < 2 || tokio::time::Instant::now() + FAILOVER_ROUND > deadline {
                break;
            }
            tokio::time::sleep(FAILOVER_ROUND).await;
        }
        Err(last.unwrap_or_else(|| ClientError::BadUrl {
            url: self.server.clone(),
            reason: "no master URL given".into(),
        }))
    }

    /// With several URLs, whether a master that answered can commit: a
    /// leader cut off from its database still answers (reads from memory,
    /// `storage: degraded`) while its standby may already lead, and a
    /// command that changes the fleet belongs with the one that can commit.
    /// One `status` round trip, only when standbys are named.
    async fn can_commit(client: &mut Client) -> bool {
        match client.status().await {
            Ok(report) => report.storage == tunefleet_shared::protocol::StorageHealth::Ok,
            // A read refused or cut short: not a master to send changes to.
            Err(_) => false,
        }
    }

    /// The connection options given on the command line.
    pub fn options(&self) -> ConnectOptions {
        ConnectOptions {
            ca_cert: self.ca_cert.clone().filter(|p| !p.as_os_str().is_empty()),
        }
    }

    /// Turns a client error into an `anyhow::Error`, adding how to pass a
    /// token when the master wants one and none was given.
    pub fn explain(&self, err: ClientError) -> anyhow::Error {
        let auth = matches!(
            err.server_code(),
            Some(ErrorCode::Unauthorized | ErrorCode::Forbidden)
        ) || matches!(
            err,
            ClientError::Closed {
                code: tunefleet_shared::protocol::close_code::UNAUTHORIZED,
                ..
            }
        );
        if auth && self.token().is_none() && !err.to_string().contains("--token") {
            anyhow::anyhow!("{err} (no token given: pass --token or set TUNEFLEET_TOKEN)")
        } else {
            err.into()
        }
    }
}

/// How long a command given several master URLs keeps trying them when
/// none answers: longer than a standby's takeover (its `--standby-poll`,
/// 1 s by default, plus loading the state).
pub const FAILOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The pause between two rounds over the URLs.
const FAILOVER_ROUND: std::time::Duration = std::time::Duration::from_millis(200);

/// An error that asks for a specific exit status. With an empty message
/// nothing more is printed (the command already said what happened).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl Exit {
    /// Exit with `code` without printing anything more.
    pub fn silent(code: u8) -> Self {
        Exit {
            code,
            message: String::new(),
        }
    }
}

/// The exit status for a command error: [`Exit::code`] when the command asked
/// for one, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    err.downcast_ref::<Exit>().map_or(1, |e| e.code)
}

/// Prints `error: ...` to stderr (unless the command asked to stay silent) and
/// returns the exit status to end the process with.
pub fn report_error(err: &anyhow::Error) -> std::process::ExitCode {
    let silent = err
        .downcast_ref::<Exit>()
        .is_some_and(|e| e.message.is_empty());
    if !silent {
        eprintln!("error: {err:#}");
    }
    std::process::ExitCode::from(exit_code(err))
}

/// The client subcommands, ready to be flattened into `main.rs`'s enum.
#[derive(clap::Subcommand, Debug)]
pub enum ClientCli {
    /// Submit workload files to the master.
    Submit(submit::SubmitArgs),
    /// Show a live progress bar until every job is finished.
    Watch(watch::WatchArgs),
    /// Print job counts and workers.
    Status(status::StatusArgs),
    /// Print tuning results as a table, JSON or CSV.
    Results(results::ResultsArgs),
    /// Write tuning results to a file.
    Export(export::ExportArgs),
    /// Compile your ONNX model, with its own weights, using a model run's
    /// records; verify it against onnxruntime and time it on this machine.
    Compile(compile::CompileArgs),
    /// Seed the farm with records a team already has (a MetaSchedule
    /// database directory; admin token).
    Import(import::ImportArgs),
    /// Convert a Lorien workload file into a tunefleet workload file.
    ImportLorien(import_lorien::ImportLorienArgs),
    /// Stop the master gracefully, as SIGTERM does (admin token).
    Shutdown(shutdown::ShutdownArgs),
    /// Stop tuning a model run: it is compiled with the records it has.
    Stop(model::StopArgs),
    /// Named admin tokens: create, revoke, list (master admin token).
    Token(token::TokenArgs),
}

impl ClientCli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            ClientCli::Submit(args) => submit::run(args).await,
            ClientCli::Watch(args) => watch::run(args).await,
            ClientCli::Status(args) => status::run(args).await,
            ClientCli::Results(args) => results::run(args).await,
            ClientCli::Export(args) => export::run(args).await,
            ClientCli::Compile(args) => compile::run(args).await,
            ClientCli::Import(args) => import::run(args).await,
            ClientCli::ImportLorien(args) => import_lorien::run(args).await,
            ClientCli::Shutdown(args) => shutdown::run(args).await,
            ClientCli::Stop(args) => model::stop(args).await,
            ClientCli::Token(args) => token::run(args).await,
        }
    }
}

/// Writes `text` to standard output. A closed pipe (`| head`) is not an
/// error: the reader has what it wanted. Other write errors are.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// The operator name of a job's workload (`matmul`, `conv2d`, ...).
pub fn job_op(job: &JobView) -> String {
    job.workload.op_name().to_string()
}

/// A short shape description of a job's workload (`m=64 n=64 k=64`).
pub fn job_shape(job: &JobView) -> String {
    job.workload.shape_summary().to_string()
}

/// Stable output order: oldest first; jobs created together (one file) keep
/// the master's order, which is the file's.
pub fn sort_jobs(jobs: &mut [JobView]) {
    jobs.sort_by_key(|job| job.created_at);
}

/// Column alignment for [`render_table`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A latency for people, or `-` where there is none yet.
pub fn latency_or_dash(latency_s: Option<f64>) -> String {
    latency_s.map_or_else(|| "-".to_string(), format_latency)
}

/// Aligned plain-text columns separated by two spaces; widths count chars, so
/// `µs` lines up.
pub fn render_table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            let (width, align) = (widths.get(i).copied().unwrap_or(0), header[i].1);
            if i > 0 {
                text.push_str("  ");
            }
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            match align {
                Align::Left => {
                    text.push_str(cell);
                    text.push_str(&pad);
                }
                Align::Right => {
                    text.push_str(&pad);
                    text.push_str(cell);
                }
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().map(|(h, _)| *h));
    for row in rows {
        line(&mut row.iter().take(header.len()).map(String::as_str));
    }
    out
}

/// `1 job` / `3 jobs`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests;
