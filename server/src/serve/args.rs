//! `serve`'s flags, their defaults and their value parsers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tunefleet_shared::workload::MAX_WORKLOADS_PER_FILE;

use crate::local_workers;
use crate::store::{Durability, StateLocation};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on (HTTP for the dashboard, WebSocket at /ws/worker and /ws/client).
    #[arg(long, default_value = "127.0.0.1:18871")]
    pub bind: SocketAddr,
    /// Where all durable state lives: a SQLite file (created if missing), or
    /// a PostgreSQL database as postgres://USER@HOST:PORT/DB (password in the
    /// URL or PGPASSWORD). Reuse it to resume after a crash. A second master
    /// on the same PostgreSQL database waits as a standby and takes over
    /// when the leader dies.
    #[arg(long, default_value = "tunefleet.db", value_parser = StateLocation::parse)]
    pub state: StateLocation,
    /// With PostgreSQL state: how often a standby tries to take the lead.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub standby_poll: Duration,
    /// Workload YAML files to submit at start (duplicates of known jobs are skipped).
    #[arg(long, num_args = 1..)]
    pub workloads: Vec<PathBuf>,
    /// Admin token for submit/cancel/retry/shutdown (and for reading, unless
    /// --public-read); generated and printed when not given. Prefer the
    /// environment variable: command lines are visible to other users.
    #[arg(long, env = "TUNEFLEET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Let clients without a token read status, results (export) and events.
    #[arg(long)]
    pub public_read: bool,
    /// Secret workers must present to register (`tunefleet-worker --worker-secret`).
    #[arg(long, env = "TUNEFLEET_WORKER_SECRET", hide_env_values = true)]
    pub worker_secret: Option<String>,
    /// How often the master pings each peer.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// A peer silent for this long is dead; its job is recycled.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub heartbeat_timeout: Duration,
    /// Recycle a job whose worker reported no progress for this long (0 = never).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub job_timeout: Duration,
    /// Attempts ending without a result before a job is marked failed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Best records kept per job.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub nbest: u32,
    /// Largest WebSocket message accepted; bigger ones close the socket with 1009.
    /// (17 MiB: a 16 MiB workload file plus its JSON envelope.)
    #[arg(long, default_value_t = 17 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// Events buffered per subscriber before it is resynced with a snapshot.
    #[arg(long, default_value_t = 4096)]
    pub event_buffer: usize,
    #[arg(long, value_enum, default_value = "normal")]
    pub durability: Durability,
    /// Directory with the built dashboard (index.html, web.js, web_bg.wasm).
    #[arg(long)]
    pub web_dir: Option<PathBuf>,
    /// A browser origin allowed to open WebSockets besides the master's own,
    /// as scheme://host or scheme://host:port (e.g. `https://dash.example.com`);
    /// repeatable; `*` allows any. Requests without an Origin header (CLI,
    /// workers, scripts) are always allowed.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Serve HTTPS/WSS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) for --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Most workloads one submitted file may hold (the file format allows 10,000).
    #[arg(long, default_value_t = MAX_WORKLOADS_PER_FILE, value_parser = workloads_per_upload)]
    pub max_workloads_per_upload: usize,
    /// Most open WebSocket connections, workers and clients together; more
    /// upgrades are answered with HTTP 503.
    #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
    pub max_connections: usize,
    /// Requests per second per client connection (bursts of twice as many);
    /// more are answered `rate_limited`, a sustained flood is closed (1008). 0: no limit.
    #[arg(long, default_value_t = 100)]
    pub max_requests_per_second: u32,
    /// Messages per second per worker connection (bursts of twice as many),
    /// progress not counted; a faster worker is read more slowly. 0: no limit.
    #[arg(long, default_value_t = 1000)]
    pub max_worker_messages_per_second: u32,
    /// Keep trace lines (the `export-trace` log of state changes) for this
    /// long, e.g. `30d`; older ones are deleted once a minute. Default: keep
    /// them all (the trace grows with jobs, never with progress reports).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub trace_retention: Option<Duration>,
    /// Keep ended jobs (done, failed, cancelled) in memory for this long
    /// after their last change, e.g. `1d`; older ones are archived: their
    /// rows stay in the state database, `results --archived`, `export` and
    /// `results --job ID` still read them, a resubmission, retry or tuning
    /// cache lookup brings them back, and `status` still counts them. A
    /// model run still going keeps its jobs. Default: keep every job in
    /// memory (the master then grows ~4 KiB per job; docs/benchmarks.md, Soak).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub job_retention: Option<Duration>,
    /// Do not share the fleet's cost model between model rounds: each round
    /// trains its cost model on its task's records alone, as before the fleet
    /// kept one per target (the cold baseline of docs/benchmarks.md). Models
    /// already stored stay, unused.
    #[arg(long)]
    pub no_cost_model_sharing: bool,
    /// Start and supervise this many workers on this machine, each pinned to
    /// its own cores (`auto`: one per 2 cores, at least one). They connect
    /// over loopback, restart with backoff when they die, and stop with the master.
    #[arg(long, value_name = "N|auto", value_parser = local_workers::parse_local_workers)]
    pub local_workers: Option<local_workers::LocalWorkers>,
    /// Extra arguments appended to every local worker's command line
    /// (e.g. '--backend sim --sim-seconds 0.2'); shell quoting applies.
    #[arg(
        long,
        value_name = "ARGS",
        default_value = "",
        requires = "local_workers",
        allow_hyphen_values = true
    )]
    pub local_worker_args: String,
    /// The worker program for --local-workers (default: tunefleet-worker
    /// beside this executable, else on PATH).
    #[arg(long, value_name = "PATH", requires = "local_workers")]
    pub local_worker_bin: Option<PathBuf>,
}

fn workloads_per_upload(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_WORKLOADS_PER_FILE).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 1 to {MAX_WORKLOADS_PER_FILE}"
        )),
    }
}

fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1".into()),
    }
}

/// Parses `250ms`, `5s`, `2m`, `1h`, `30d` or a plain number of seconds (`1.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 5s, 2m, 1h, 30d)"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ms, s, m, h or d)"
            ))
        }
    };
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("`{text}` must be a non-negative duration"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}
