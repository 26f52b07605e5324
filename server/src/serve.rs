//! `tunefleet serve`: wires the store, the core thread, the ticker and the
//! HTTP/WebSocket server together, and takes them down in order.
//!
//! Shutdown (SIGINT/SIGTERM): stop accepting, tell every connection (workers
//! get `shutdown` and requeue nothing themselves: the master puts their jobs
//! back without counting the attempt), wait for the connection tasks, then
//! stop the core, which commits its last batch before it returns. An admin
//! client's `shutdown` request takes the same path.
//!
//! Stepping down: with PostgreSQL state, a core that finds another master
//! leading the database (a standby took over while this one was cut off)
//! ends by itself (`CoreEnd::SteppedDown`). Everything it led is taken down
//! the same way, and this process goes back to waiting as a standby, port
//! unbound: it leads again when the lead is free, and never exits while no
//! one leads.
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
use tokio::sync::{broadcast, mpsc, watch, Notify, Semaphore};
use tracing::{info, warn};
use tunefleet_shared::workload::parse_workload_file;

use crate::core::{Change, Command, Core, CoreEnd, CoreHandle};
use crate::local_workers::{self, LocalFleet};
use crate::net::{self, AppState, NetConfig};
use crate::scheduler::{CachePolicy, SchedulerConfig};
use crate::store::{Standby, Store};
use tunefleet_shared::secrets_equal;

mod args;
mod process;
pub use args::{parse_duration, ServeArgs};
use process::{
    bind_listener, local_cpus, raise_open_file_limit, signalled, watch_signals, ClientRuntime,
};

/// Runs the master until a signal or an admin's `shutdown`, then takes it
/// down in order (see the module docs); a master that steps down waits as a
/// standby and leads again.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let signals = watch_signals();
    let mut checked = check(&args)?;
    // One token for the life of the process, across leads.
    let admin_token = admin_token(&args);
    let mut again = false;
    loop {
        match lead(&args, &mut checked, &admin_token, signals.clone(), again).await? {
            CoreEnd::Stopped => return Ok(()),
            CoreEnd::SteppedDown(_) => {
                info!(
                    "this master stepped down (above: where the lead went); it waits as a standby"
                );
                again = true;
            }
        }
    }
}

/// One lead: wait for it (as a standby), serve, and take it all down again
/// on a signal, an admin's `shutdown`, or the core stepping down.
async fn lead(
    args: &ServeArgs,
    checked: &mut Checked,
    admin_token: &str,
    signals: watch::Receiver<bool>,
    again: bool,
) -> anyhow::Result<CoreEnd> {
    let (events, _) = broadcast::channel(args.event_buffer.max(16));
    let Some(core) = open_core(args, events.clone(), signals.clone(), again).await? else {
        info!("stopped before taking the lead");
        return Ok(CoreEnd::Stopped);
    };
    let RunningCore {
        handle,
        thread: core_thread,
        tokens,
        storage,
        ended,
    } = start_core(core, events)?;
    submit_start_up_files(&handle, std::mem::take(&mut checked.initial)).await?;
    let ticker = spawn_ticker(handle.clone());

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (alive_tx, alive_rx) = mpsc::channel::<()>(1);
    let stop = Arc::new(Notify::new());
    raise_open_file_limit(args.max_connections);
    let client_runtime = ClientRuntime::start()?;
    let state = AppState {
        core: handle.clone(),
        config: Arc::new(net_config(
            args,
            admin_token.to_string(),
            checked.origins.clone(),
        )),
        shutdown: shutdown_rx,
        alive: alive_tx,
        connections: Arc::new(Semaphore::new(args.max_connections)),
        stop: stop.clone(),
        tokens,
        storage,
        runtimes: net::Runtimes {
            workers: tokio::runtime::Handle::current(),
            clients: client_runtime.handle()?,
        },
    };
    let listener =
        bind_listener(args.bind).with_context(|| format!("cannot listen on {}", args.bind))?;
    let addr = listener.local_addr()?;
    announce(addr, checked.tls.is_some(), admin_token, args);

    let local_fleet = start_local_fleet(args, addr, checked.tls.is_some())?;
    let (fleet_stop_tx, fleet_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app = net::router(state).into_make_service_with_connect_info::<SocketAddr>();
    let stopping = async move {
        tokio::select! {
            _ = signalled(signals) => info!("shutting down: closing connections"),
            _ = stop.notified() => info!("shutting down: closing connections"),
            _ = ended.notified() => info!("stepping down: closing connections and the port"),
        }
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
    serve_until(
        listener,
        app,
        checked.tls.clone(),
        args.max_connections,
        stopping,
    )
    .await?;
    wind_down(
        local_fleet,
        alive_rx,
        ticker,
        handle,
        core_thread,
        client_runtime,
    )
    .await
}

/// After the port closed: waits for the local workers and (5 s at most) the
/// connections, then stops the ticker and the core thread, in that order,
/// and says how the lead ended.
async fn wind_down(
    local_fleet: Option<tokio::task::JoinHandle<()>>,
    mut alive_rx: mpsc::Receiver<()>,
    ticker: tokio::task::JoinHandle<()>,
    handle: CoreHandle,
    core_thread: std::thread::JoinHandle<CoreEnd>,
    client_runtime: ClientRuntime,
) -> anyhow::Result<CoreEnd> {
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
    let end = tokio::task::spawn_blocking(move || core_thread.join()).await;
    drop(client_runtime);
    match end {
        Ok(Ok(CoreEnd::SteppedDown(reason))) => Ok(CoreEnd::SteppedDown(reason)),
        _ => {
            info!("master stopped");
            Ok(CoreEnd::Stopped)
        }
    }
}

/// What `check` found good in the arguments, ready to use.
struct Checked {
    origins: net::OriginPolicy,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Start-up workload files, parsed.
    initial: Vec<(PathBuf, Vec<tunefleet_shared::workload::Workload>)>,
}

/// Every setting that can be wrong, checked before anything binds or
/// opens the state: a typo stops the master with the reason, not halfway up.
fn check(args: &ServeArgs) -> anyhow::Result<Checked> {
    if args.heartbeat_timeout <= args.heartbeat_interval {
        bail!("--heartbeat-timeout must be longer than --heartbeat-interval");
    }
    let origins = net::OriginPolicy::new(&args.allowed_origins).map_err(anyhow::Error::msg)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(net::tls::server_config(cert, key)?),
        _ => None,
    };
    if let Some(secret) = &args.worker_secret {
        if secret.trim().is_empty() {
            bail!("--worker-secret (TUNEFLEET_WORKER_SECRET) is set but empty");
        }
        if args
            .admin_token
            .as_deref()
            .is_some_and(|token| secrets_equal(secret, token))
        {
            bail!("--worker-secret must differ from --admin-token: a worker must not hold the admin token");
        }
    }
    // Checked now; planned for real once the port is known.
    if let Some(count) = args.local_workers {
        local_workers::plan(
            count,
            &local_cpus(),
            "ws://127.0.0.1:0",
            &args.local_worker_args,
        )?;
    }
    let mut initial = Vec::new();
    for path in &args.workloads {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let workloads = parse_workload_file(&text, &path.display().to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("invalid workload file {}", path.display()))?;
        initial.push((path.clone(), workloads));
    }
    Ok(Checked {
        origins,
        tls,
        initial,
    })
}

/// Opens the state and reads it into a core. Blocking work (and, for
/// PostgreSQL, the sync client's own runtime) runs off the async threads.
/// A standby waits here, port unbound, until it leads; `None` when a signal
/// came first. `again` (after stepping down): a database that cannot be
/// reached is tried again every second instead of ending the process.
async fn open_core(
    args: &ServeArgs,
    events: broadcast::Sender<Arc<crate::core::Published>>,
    mut signals: watch::Receiver<bool>,
    again: bool,
) -> anyhow::Result<Option<Core>> {
    loop {
        let opened = tokio::select! {
            opened = try_open_core(args, events.clone()) => opened,
            () = signalled(signals.clone()) => return Ok(None),
        };
        match opened {
            Ok(core) => return Ok(Some(core)),
            Err(e) if again => {
                warn!("cannot wait as a standby yet ({e:#}); trying again in 1 s");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = signals.changed() => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// One try of [`open_core`].
async fn try_open_core(
    args: &ServeArgs,
    events: broadcast::Sender<Arc<crate::core::Published>>,
) -> anyhow::Result<Core> {
    let config = SchedulerConfig {
        max_attempts: args.max_attempts,
        job_timeout_ms: (!args.job_timeout.is_zero())
            .then_some(args.job_timeout.as_millis() as u64),
        nbest: args.nbest as usize,
    };
    let (location, durability) = (args.state.clone(), args.durability);
    let standby = Standby {
        poll: args.standby_poll.max(Duration::from_millis(10)),
        name: format!("tunefleet serve {}", args.bind),
    };
    let opening = tokio::task::spawn_blocking(move || {
        let store = Store::open_leader(&location, durability, standby, &mut |who| {
            info!(state = %location, "another master leads this database ({who}): waiting as its standby");
        })?;
        if location.is_postgres() {
            info!(state = %location, "this master now leads");
        }
        Core::start(config, store, events)
    });
    let mut core = opening.await.context("the start-up task failed")??;
    core.set_trace_retention(args.trace_retention.filter(|d| !d.is_zero()));
    core.set_job_retention(args.job_retention);
    core.set_cost_model_sharing(!args.no_cost_model_sharing);
    Ok(core)
}

/// The core on its own thread, and what the network layer shares of it.
struct RunningCore {
    handle: CoreHandle,
    thread: std::thread::JoinHandle<CoreEnd>,
    tokens: crate::tokens::TokenRegistry,
    storage: Arc<crate::core::StorageStatus>,
    /// Notified when the core thread ends, for whatever reason.
    ended: Arc<Notify>,
}

fn start_core(
    core: Core,
    events: broadcast::Sender<Arc<crate::core::Published>>,
) -> anyhow::Result<RunningCore> {
    let tokens = core.token_registry();
    let storage = core.storage_status();
    let whole_view_subscribers = core.whole_view_subscribers();
    let (command_tx, command_rx) = mpsc::channel(65536);
    let ended = Arc::new(Notify::new());
    let notify = ended.clone();
    let thread = std::thread::Builder::new()
        .name("tunefleet-core".into())
        .spawn(move || {
            let end = core.run(command_rx);
            notify.notify_one();
            end
        })
        .context("cannot start the core thread")?;
    Ok(RunningCore {
        handle: CoreHandle {
            commands: command_tx,
            events,
            whole_view_subscribers,
        },
        thread,
        tokens,
        storage,
        ended,
    })
}

/// `--workloads` files, submitted as a client's upload would be.
async fn submit_start_up_files(
    handle: &CoreHandle,
    initial: Vec<(PathBuf, Vec<tunefleet_shared::workload::Workload>)>,
) -> anyhow::Result<()> {
    for (path, workloads) in initial {
        let report = handle
            .ask(|reply| Change::Submit {
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
    Ok(())
}

/// The core's clock: a `Tick` every 500 ms (timeouts, heartbeats, retention).
fn spawn_ticker(handle: CoreHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            every.tick().await;
            if handle.commands.try_send(Command::Tick).is_err() && handle.commands.is_closed() {
                return;
            }
        }
    })
}

/// `--admin-token`, or a new random one, printed so that it can be used.
fn admin_token(args: &ServeArgs) -> String {
    match args.admin_token.clone() {
        Some(t) if !t.is_empty() => t,
        _ => {
            let t = uuid::Uuid::new_v4().simple().to_string();
            println!(
                "admin token: {t}  (pass it to admin commands with --token or TUNEFLEET_TOKEN)"
            );
            t
        }
    }
}

fn net_config(args: &ServeArgs, admin_token: String, origins: net::OriginPolicy) -> NetConfig {
    NetConfig {
        heartbeat_interval: args.heartbeat_interval,
        heartbeat_timeout: args.heartbeat_timeout,
        admin_token,
        public_read: args.public_read,
        worker_secret: args.worker_secret.clone(),
        max_message_bytes: args.max_message_bytes,
        web_dir: args.web_dir.clone().or_else(default_web_dir),
        origins,
        max_workloads_per_upload: args.max_workloads_per_upload,
        max_requests_per_second: args.max_requests_per_second,
        max_worker_messages_per_second: args.max_worker_messages_per_second,
        max_connections: args.max_connections,
        started_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        state: args.state.clone(),
    }
}

/// The lines users and scripts wait for: where the master listens, and the
/// dashboard link that signs in.
fn announce(addr: SocketAddr, tls: bool, admin_token: &str, args: &ServeArgs) {
    let (http, ws) = if tls {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    // Tests and scripts wait for this line.
    println!("tunefleet master listening on {addr} (dashboard {http}://{addr}/, workers {ws}://{addr}/ws/worker)");
    // The dashboard link that signs in, as Jupyter prints one: the token is
    // in the fragment, which the browser never sends (so no server log has
    // it); the page stores it and takes it out of the address bar.
    eprintln!(
        "dashboard, signed in as admin: {http}://{addr}/#token={}",
        fragment_escape(admin_token)
    );
    info!(%addr, state = %args.state, tls, "master up");
}

/// `--local-workers N`: worker processes on this machine, pinned to cores.
fn start_local_fleet(
    args: &ServeArgs,
    addr: SocketAddr,
    tls: bool,
) -> anyhow::Result<Option<LocalFleet>> {
    let Some(count) = args.local_workers else {
        return Ok(None);
    };
    let url = local_workers::local_server_url(addr, tls);
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
    Ok(Some(LocalFleet::start(specs, launch)))
}

/// Serves HTTP and WebSocket (over TLS when configured) until `stopping`.
async fn serve_until(
    listener: tokio::net::TcpListener,
    app: axum::extract::connect_info::IntoMakeServiceWithConnectInfo<axum::Router, SocketAddr>,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    stopping: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
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
                .context("server error")
        }
        Some(config) => {
            // (TapIo only so that axum knows the peer address type.)
            let listener = net::tls::TlsListener::new(listener, config, max_connections)
                .context("cannot start the TLS listener")?;
            let listener =
                net::HeadDeadline::new(listener, net::REQUEST_HEAD_TIMEOUT).tap_io(|_| {});
            axum::serve(listener, app)
                .with_graceful_shutdown(stopping)
                .await
                .context("server error")
        }
    }
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

#[cfg(test)]
mod tests;

/// `text` as it can stand in a URL's fragment: bytes other than letters,
/// digits and `-._~` as `%XX` (the dashboard decodes them). A generated
/// token is hex and passes unchanged.
fn fragment_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
