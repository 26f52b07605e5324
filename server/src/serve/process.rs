//! What `serve` asks of the process and the OS: the listening socket, the
//! open-file limit, the CPUs for local workers, the client runtime, and the
//! signals that stop it.

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::local_workers;

/// Listens with a backlog of 4,096 connections (the kernel caps it at
/// `net.core.somaxconn`) instead of tokio's 1,024: a fleet of thousands
/// reconnecting after an outage otherwise overflows the queue, and every
/// connection dropped there waits a second or more for its SYN to be resent.
pub(super) fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
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
pub(super) struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl ClientRuntime {
    pub(super) fn start() -> anyhow::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("tunefleet-clients")
            .enable_all()
            .build()
            .context("cannot start the client connections' runtime")?;
        Ok(ClientRuntime(Some(runtime)))
    }

    pub(super) fn handle(&self) -> anyhow::Result<tokio::runtime::Handle> {
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
pub(super) fn raise_open_file_limit(max_connections: usize) {
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
pub(super) fn local_cpus() -> tunefleet_shared::cpus::CpuSet {
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

/// Listens for SIGTERM and ctrl-c from the first line of [`super::run`] to its end.
/// Tokio tells a signal only to the streams that exist when it arrives, so a
/// listener made later (when the server starts serving) would miss a SIGTERM
/// sent just after "listening" was printed, and the master would never stop.
/// The streams are made here, synchronously, and the answer is kept.
pub(super) fn watch_signals() -> watch::Receiver<bool> {
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
pub(super) async fn signalled(mut signals: watch::Receiver<bool>) {
    if signals.wait_for(|stop| *stop).await.is_err() {
        // The watcher is gone without a signal: wait for other reasons to stop.
        std::future::pending::<()>().await;
    }
}
