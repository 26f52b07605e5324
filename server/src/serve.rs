//! `tunefleet serve`: wires the store, the core thread, the ticker and the
//! HTTP/WebSocket server together, and takes them down in order.
//!
//! Shutdown (SIGINT/SIGTERM): stop accepting, tell every connection (workers
//! get `shutdown` and requeue nothing themselves: the master puts their jobs
//! back without counting the attempt), wait for the connection tasks, then
//! stop the core, which commits its last batch before it returns. An admin
//! client's `shutdown` request takes the same path.
//!
//! Security settings (see docs/PROTOCOL.md, "Security and limits"): admin
//! token, `--public-read`, `--worker-secret`, `--allowed-origin`, TLS
//! (`--tls-cert`/`--tls-key`), and the limits on message size, workloads per
//! upload, connections and request rates.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch, Notify, Semaphore};
use tracing::{info, warn};
use tunefleet_shared::workload::{parse_workload_file, MAX_WORKLOADS_PER_FILE};

use crate::core::{Command, Core, CoreHandle};
use crate::local_workers::{self, LocalFleet};
use crate::net::{self, AppState, NetConfig};
use crate::scheduler::{CachePolicy, SchedulerConfig};
use crate::store::{Durability, Standby, StateLocation, Store};
use tunefleet_shared::secrets_equal;

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

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let signals = watch_signals();
    if args.heartbeat_timeout <= args.heartbeat_interval {
        bail!("--heartbeat-timeout must be longer than --heartbeat-interval");
    }
    let origins = net::OriginPolicy::new(&args.allowed_origins).map_err(anyhow::Error::msg)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(net::tls::server_config(cert, key)?),
        _ => None,
    };
    let worker_secret = args.worker_secret.clone();
    if worker_secret
        .as_deref()
        .is_some_and(|s| s.trim().is_empty())
    {
        bail!("--worker-secret (TUNEFLEET_WORKER_SECRET) is set but empty");
    }
    if let (Some(secret), Some(token)) = (&worker_secret, &args.admin_token) {
        if secrets_equal(secret, token) {
            bail!("--worker-secret must differ from --admin-token: a worker must not hold the admin token");
        }
    }
    // Checked before anything binds; planned for real once the port is known.
    if let Some(count) = args.local_workers {
        local_workers::plan(
            count,
            &local_cpus(),
            "ws://127.0.0.1:0",
            &args.local_worker_args,
        )?;
    }
    // Parse start-up files first: a typo should stop us before anything binds.
    let mut initial = Vec::new();
    for path in &args.workloads {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let workloads = parse_workload_file(&text, &path.display().to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("invalid workload file {}", path.display()))?;
        initial.push((path.clone(), workloads));
    }

    let (events, _) = broadcast::channel(args.event_buffer.max(16));
    let config = SchedulerConfig {
        max_attempts: args.max_attempts,
        job_timeout_ms: (!args.job_timeout.is_zero())
            .then_some(args.job_timeout.as_millis() as u64),
        nbest: args.nbest as usize,
    };
    // Blocking work (and, for PostgreSQL, the sync client's own runtime):
    // off the async threads. A standby waits here, port unbound, until it
    // leads or is told to stop.
    let opening = {
        let (location, durability, events) = (args.state.clone(), args.durability, events.clone());
        let standby = Standby {
            poll: args.standby_poll.max(Duration::from_millis(10)),
        };
        tokio::task::spawn_blocking(move || {
            let store = Store::open_leader(&location, durability, standby, &mut || {
                info!(state = %location, "another master leads this database: waiting as its standby");
            })?;
            if location.is_postgres() {
                info!(state = %location, "this master now leads");
            }
            Core::start(config, store, events)
        })
    };
    let mut core = tokio::select! {
        opened = opening => opened.context("the start-up task failed")??,
        () = signalled(signals.clone()) => {
            info!("stopped before taking the lead");
            return Ok(());
        }
    };
    core.set_trace_retention(args.trace_retention.filter(|d| !d.is_zero()));
    core.set_job_retention(args.job_retention);
    let tokens = core.token_registry();
    let storage_failing = core.storage_failing();
    let whole_view_subscribers = core.whole_view_subscribers();
    let (command_tx, command_rx) = mpsc::channel(65536);
    let core_thread = std::thread::Builder::new()
        .name("tunefleet-core".into())
        .spawn(move || core.run(command_rx))
        .context("cannot start the core thread")?;
    let handle = CoreHandle {
        commands: command_tx,
        events,
        whole_view_subscribers,
    };

    for (path, workloads) in initial {
        let report = handle
            .ask(|reply| Command::Submit {
                workloads,
                cache: CachePolicy::Use,
                by: None,
                reply,
            })
            .await
            .context("core stopped")?;
        info!(
            file = %path.display(),
            new = report.new_jobs.len(),
            duplicates = report.duplicates.len(),
            "loaded workloads"
        );
    }

    let ticker = {
        let handle = handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(500));
            loop {
                every.tick().await;
                if handle.commands.try_send(Command::Tick).is_err() && handle.commands.is_closed() {
                    return;
                }
            }
        })
    };

    let admin_token = match args.admin_token.clone() {
        Some(t) if !t.is_empty() => t,
        _ => {
            let t = uuid::Uuid::new_v4().simple().to_string();
            println!(
                "admin token: {t}  (pass it to admin commands with --token or TUNEFLEET_TOKEN)"
            );
            t
        }
    };
    let web_dir = args.web_dir.clone().or_else(default_web_dir);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let stop = Arc::new(Notify::new());
    raise_open_file_limit(args.max_connections);
    let client_runtime = ClientRuntime::start()?;
    let state = AppState {
        core: handle.clone(),
        config: Arc::new(NetConfig {
            heartbeat_interval: args.heartbeat_interval,
            heartbeat_timeout: args.heartbeat_timeout,
            admin_token,
            public_read: args.public_read,
            worker_secret,
            max_message_bytes: args.max_message_bytes,
            web_dir,
            origins,
            max_workloads_per_upload: args.max_workloads_per_upload,
            max_requests_per_second: args.max_requests_per_second,
            max_worker_messages_per_second: args.max_worker_messages_per_second,
            max_connections: args.max_connections,
            started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            state: args.state.clone(),
        }),
        shutdown: shutdown_rx,
        alive: alive_tx,
        connections: Arc::new(Semaphore::new(args.max_connections)),
        stop: stop.clone(),
        tokens,
        storage_failing,
        runtimes: net::Runtimes {
            workers: tokio::runtime::Handle::current(),
            clients: client_runtime.handle()?,
        },
    };
    let listener =
        bind_listener(args.bind).with_context(|| format!("cannot listen on {}", args.bind))?;
    let addr = listener.local_addr()?;
    let (http, ws) = if tls.is_some() {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    // Tests and scripts wait for this line.
    println!("tunefleet master listening on {addr} (dashboard {http}://{addr}/, workers {ws}://{addr}/ws/worker)");
    info!(%addr, state = %args.state, tls = tls.is_some(), "master up");

    let local_fleet = match args.local_workers {
        Some(count) => {
            let url = local_workers::local_server_url(addr, tls.is_some());
            let specs = local_workers::plan(count, &local_cpus(), &url, &args.local_worker_args)?;
            let launch = local_workers::Launch {
                program: args
                    .local_worker_bin
                    .clone()
                    .unwrap_or_else(local_workers::default_worker_program),
                worker_secret: args.worker_secret.clone(),
                ca_cert: args.tls_cert.clone(),
            };
            info!(
                "starting {} local worker(s): {}",
                specs.len(),
                local_workers::describe(&specs, &launch.program)
            );
            Some(LocalFleet::start(specs, launch))
        }
        None => None,
    };
    let (fleet_stop_tx, fleet_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app = net::router(state).into_make_service_with_connect_info::<SocketAddr>();
    let stopping = async move {
        tokio::select! {
            _ = signalled(signals) => {}
            _ = stop.notified() => {}
        }
        info!("shutting down: closing connections");
        let _ = fleet_stop_tx.send(());
        let _ = shutdown_tx.send(true);
    };
    // Local workers start handing back their jobs as soon as shutdown begins.
    let local_fleet = local_fleet.map(|fleet| {
        tokio::spawn(async move {
            let _ = fleet_stop_rx.await;
            fleet.stop().await;
        })
    });
    match tls {
        None => {
            // Small JSON messages must not wait for delayed ACKs (a 40 ms stall
            // per exchange with Nagle's algorithm on).
            let listener =
                net::HeadDeadline::new(listener, net::REQUEST_HEAD_TIMEOUT).tap_io(|tcp| {
                    if let Err(e) = tcp.get_ref().set_nodelay(true) {
                        warn!("cannot set TCP_NODELAY: {e}");
                    }
                });
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
                .context("server error")?;
        }
        Some(config) => {
            // (TapIo only so that axum knows the peer address type.)
            let listener = net::tls::TlsListener::new(listener, config, args.max_connections)
                .context("cannot start the TLS listener")?;
            let listener =
                net::HeadDeadline::new(listener, net::REQUEST_HEAD_TIMEOUT).tap_io(|_| {});
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
                .context("server error")?;
        }
    }

    if let Some(fleet) = local_fleet {
        let _ = fleet.await;
    }
    // Every connection task holds a clone of `alive`; recv() returns None once all are gone.
    if tokio::time::timeout(Duration::from_secs(5), alive_rx.recv())
        .await
        .is_err()
    {
        warn!("some connections did not close within 5 s");
    }
    ticker.abort();
    let _ = handle.ask(|done| Command::Shutdown { done }).await;
    drop(handle);
    let _ = tokio::task::spawn_blocking(move || core_thread.join()).await;
    info!("master stopped");
    Ok(())
}

/// Listens with a backlog of 4,096 connections (the kernel caps it at
/// `net.core.somaxconn`) instead of tokio's 1,024: a fleet of thousands
/// reconnecting after an outage otherwise overflows the queue, and every
/// connection dropped there waits a second or more for its SYN to be resent.
fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// The runtime client connections run on (see [`net::Runtimes`]). Shut
/// down in the background when dropped: `serve` runs inside the main
/// runtime, where a blocking shutdown is not allowed.
struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl ClientRuntime {
    fn start() -> anyhow::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("tunefleet-clients")
            .enable_all()
            .build()
            .context("cannot start the client connections' runtime")?;
        Ok(ClientRuntime(Some(runtime)))
    }

    fn handle(&self) -> anyhow::Result<tokio::runtime::Handle> {
        self.0
            .as_ref()
            .map(|r| r.handle().clone())
            .context("client runtime already stopped")
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Each connection is an open file. Distributions start processes with a
/// soft limit of 1,024 and a hard limit far above it; a master asked for
/// more connections raises its soft limit up to the hard one (as Go and
/// nginx do) and says so if even that is too low.
fn raise_open_file_limit(max_connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    // Connections, plus the database, logs, listeners and a margin.
    let wanted = max_connections as u64 + 64;
    let mut limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= wanted {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    limit.current = Some(wanted.min(hard));
    match setrlimit(Resource::Nofile, limit) {
        Ok(()) if hard >= wanted => {
            info!(from = soft, to = wanted, "raised the open-file limit for --max-connections")
        }
        Ok(()) => warn!(
            "--max-connections {max_connections} needs {wanted} open files; the hard limit is {hard}, \
             so connections beyond about {} will fail: raise it (ulimit -Hn, LimitNOFILE= in a systemd unit)",
            hard.saturating_sub(64)
        ),
        Err(e) => warn!("cannot raise the open-file limit from {soft} for --max-connections {max_connections}: {e}"),
    }
}

/// The CPUs local workers are spread over: those this process may run on,
/// cut down to the CPU quota (cgroups) when that is smaller.
fn local_cpus() -> tunefleet_shared::cpus::CpuSet {
    let allowed = local_workers::allowed_cpus();
    let quota = std::thread::available_parallelism().map_or(1, |n| n.get());
    if quota < allowed.cpus().len() {
        if let Ok(cut) =
            tunefleet_shared::cpus::CpuSet::from_cpus(allowed.cpus()[..quota].iter().copied())
        {
            return cut;
        }
    }
    allowed
}

/// Logs to stderr, filtered by `RUST_LOG` if set, else at `default_level`
/// (the set-up the worker shares, in `tunefleet-client`).
pub fn init_logging(default_level: &str) {
    tunefleet_client::logging::init(default_level);
}

fn default_web_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::current_dir().ok().map(|d| d.join("web/dist")),
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|p| p.join("../../web/dist"))),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("index.html").is_file())
}

/// Listens for SIGTERM and ctrl-c from the first line of [`run`] to its end.
/// Tokio tells a signal only to the streams that exist when it arrives, so a
/// listener made later (when the server starts serving) would miss a SIGTERM
/// sent just after "listening" was printed, and the master would never stop.
/// The streams are made here, synchronously, and the answer is kept.
fn watch_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let streams = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        tokio::spawn(async move {
            match streams {
                (Ok(mut term), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            let _ = tx.send(true);
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(true);
    });
    rx
}

/// Resolves once a signal has come (even before this was called).
async fn signalled(mut signals: watch::Receiver<bool>) {
    if signals.wait_for(|stop| *stop).await.is_err() {
        // The watcher is gone without a signal: wait for other reasons to stop.
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests;
