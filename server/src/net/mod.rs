//! The network layer: translates WebSocket frames into core commands and back.
//!
//! Nothing here decides anything about jobs. A connection task parses frames,
//! checks what only the connection can know (the handshake, the token bound
//! to this socket, frame sizes, liveness), and forwards the rest to the core.
//! Each socket has its own task; a slow or hostile peer can only stall itself.
//!
//! Before a socket is upgraded the master checks what the HTTP request shows:
//! the `Origin` ([`origin`]) and the number of open connections
//! (`--max-connections`). Refusals are plain HTTP answers (403, 503), logged
//! with the peer's address.
//!
//! Reads never wait for long with a core that waits on a silent database
//! ([`read`]): they get the stand-in the core left, or a refusal that says
//! why, within a second (`core::StorageStatus`).

mod assets;
mod client_conn;
mod connection;
mod head_deadline;
pub mod limits;
pub mod origin;
pub mod tls;
mod upgrade;
mod worker_conn;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tracing::warn;

use crate::core::CoreHandle;
pub use connection::{Connection, Frame};
pub use head_deadline::{HeadDeadline, REQUEST_HEAD_TIMEOUT};
pub use origin::OriginPolicy;
use upgrade::WsUpgrade;

/// What the connection tasks need to know about the master's settings.
/// `Debug` redacts the admin token and the worker secret.
#[derive(Clone)]
pub struct NetConfig {
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    pub admin_token: String,
    pub public_read: bool,
    pub worker_secret: Option<String>,
    pub max_message_bytes: usize,
    pub web_dir: Option<PathBuf>,
    /// Who may open a WebSocket from a browser besides the master's own origin.
    pub origins: OriginPolicy,
    /// Workloads one `submit` may carry.
    pub max_workloads_per_upload: usize,
    /// Requests per second per client connection (0: unlimited).
    pub max_requests_per_second: u32,
    /// Messages per second per worker connection, progress excepted (0: unlimited).
    pub max_worker_messages_per_second: u32,
    /// `--max-connections`, reported by `/metrics` beside the open count.
    pub max_connections: usize,
    /// When the master started (seconds since the Unix epoch), for `/metrics`.
    pub started_at: f64,
    /// The state database (`--state`), for reading the archive of ended
    /// jobs without the core (`results` with `archived`).
    pub state: crate::store::StateLocation,
}

impl fmt::Debug for NetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetConfig")
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("admin_token", &"<redacted>")
            .field("public_read", &self.public_read)
            .field(
                "worker_secret",
                &self.worker_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("max_message_bytes", &self.max_message_bytes)
            .field("web_dir", &self.web_dir)
            .field("origins", &self.origins)
            .field("max_workloads_per_upload", &self.max_workloads_per_upload)
            .field("max_requests_per_second", &self.max_requests_per_second)
            .field(
                "max_worker_messages_per_second",
                &self.max_worker_messages_per_second,
            )
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
pub struct AppState {
    pub core: CoreHandle,
    pub config: Arc<NetConfig>,
    /// Flips to `true` when the master starts shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Held by every connection task; shutdown waits until all are dropped.
    pub alive: mpsc::Sender<()>,
    /// One permit per open WebSocket (`--max-connections`).
    pub connections: Arc<Semaphore>,
    /// Notified by an admin's `shutdown` request; `serve` then stops as on SIGTERM.
    pub stop: Arc<Notify>,
    /// Named admin tokens, kept current by the core.
    pub tokens: crate::tokens::TokenRegistry,
    /// The store's health, set by the core: while it cannot commit (full
    /// disk, database unreachable), changes are refused at once.
    pub storage: Arc<crate::core::StorageStatus>,
    /// Where connection tasks run.
    pub runtimes: Runtimes,
}

/// Workers and clients run on separate runtimes. Watching the fleet must
/// never slow the fleet: an event fanned out to a thousand dashboards wakes
/// a thousand tasks, and on a shared runtime a worker's assignment would
/// queue behind them. On its own runtime the worker's task is woken by the
/// kernel as soon as a core is free.
#[derive(Clone)]
pub struct Runtimes {
    pub workers: tokio::runtime::Handle,
    pub clients: tokio::runtime::Handle,
}

/// The WebSocket settings of every connection: the size limit, and an 8 KiB
/// read buffer instead of tungstenite's 128 KiB (zero-filled before every
/// read, and held by every idle connection).
fn socket_config(
    max_message_bytes: usize,
) -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes))
        .read_buffer_size(tunefleet_shared::protocol::WS_READ_BUFFER_BYTES)
}

pub fn router(state: AppState) -> Router {
    let web_dir = state.config.web_dir.clone();
    let router = Router::new()
        .route("/ws/worker", get(worker_upgrade))
        .route("/ws/client", get(client_upgrade))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    let router = match web_dir {
        Some(dir) if dir.join("index.html").is_file() => {
            router.fallback_service(assets::router(&dir))
        }
        _ => router.route("/", get(no_dashboard)),
    };
    router.with_state(state)
}

/// 200 `ok` while the master can commit its state; 503 with the reason
/// while it cannot, or while its database has not answered for a moment
/// (it still answers reads, but takes no changes).
async fn healthz(State(state): State<AppState>) -> Response {
    if let Some(reason) = state.storage.unhealthy() {
        let body = format!("storage degraded: {reason}\n");
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    "ok".into_response()
}

/// What a read got from the core.
pub(crate) enum Read<T> {
    Answer(T),
    /// The core has been waiting on its store this long (see [`read`]).
    Stuck(Duration),
    /// The core is gone (stopping, or its reply dropped).
    Gone,
}

/// A read command's answer; or, once the core has waited on its store for
/// `core::STAND_IN_AFTER` (a database that went silent, which takes seconds
/// to fail a call), `Stuck` at once: the caller answers from the stand-in or
/// refuses, instead of waiting with the core.
pub(crate) async fn read<T>(
    state: &AppState,
    make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> crate::core::Read,
) -> Read<T> {
    let asked = state.core.ask(make);
    tokio::pin!(asked);
    let mut check = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            answer = &mut asked => return answer.map_or(Read::Gone, Read::Answer),
            _ = check.tick() => {
                if let Some(waited) = state.storage.waiting() {
                    return Read::Stuck(waited);
                }
            }
        }
    }
}

/// Prometheus text format; open like `/healthz`: counts only, no job content.
async fn metrics(State(state): State<AppState>) -> Response {
    use crate::metrics::{render, ProcessMetrics, ServerMetrics};
    let fleet = match read(&state, |reply| crate::core::Read::Metrics { reply }).await {
        Read::Answer(fleet) => fleet,
        Read::Stuck(waited) => match state.storage.stand_in_metrics() {
            Some(fleet) => fleet,
            None => {
                let body = format!(
                    "the master's state database has not answered for {:.1} s\n",
                    waited.as_secs_f64()
                );
                return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
            }
        },
        Read::Gone => {
            return (StatusCode::SERVICE_UNAVAILABLE, "the master is stopping").into_response()
        }
    };
    let max = state.config.max_connections;
    let server = ServerMetrics {
        connections_open: max.saturating_sub(state.connections.available_permits()) as u64,
        connections_max: max as u64,
        subscribers: state.core.events.receiver_count() as u64,
        process: ProcessMetrics::read(state.config.started_at),
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&fleet, &server),
    )
        .into_response()
}

async fn no_dashboard() -> impl IntoResponse {
    Html(
        "<!doctype html><title>tunefleet</title><h1>tunefleet master</h1>\
         <p>The web dashboard is not built. Build it with <code>scripts/build-web.sh</code> \
         or point <code>--web-dir</code> at a built bundle. The WebSocket endpoints \
         <code>/ws/worker</code> and <code>/ws/client</code> are up.</p>",
    )
}

/// Checks what can be checked before the upgrade: the `Origin` and the
/// connection limit. The permit is held for the life of the connection.
fn admit(
    endpoint: &str,
    headers: &HeaderMap,
    peer: SocketAddr,
    state: &AppState,
) -> Result<OwnedSemaphorePermit, (StatusCode, String)> {
    if let Err(reason) = state.config.origins.check(headers) {
        warn!(%peer, endpoint, "{reason}");
        return Err((StatusCode::FORBIDDEN, reason));
    }
    match state.connections.clone().try_acquire_owned() {
        Ok(permit) => Ok(permit),
        Err(_) => {
            warn!(%peer, endpoint, "connection refused: --max-connections reached");
            Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "too many connections: the master's --max-connections limit is reached; retry later"
                    .into(),
            ))
        }
    }
}

async fn worker_upgrade(
    ws: WsUpgrade,
    headers: HeaderMap,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    State(state): State<AppState>,
) -> Response {
    let permit = match admit("/ws/worker", &headers, peer, &state) {
        Ok(permit) => permit,
        Err(refusal) => return refusal.into_response(),
    };
    let max = state.config.max_message_bytes;
    let runtime = state.runtimes.workers.clone();
    ws.on_upgrade(socket_config(max), &runtime, move |socket| async move {
        let _permit = permit;
        worker_conn::run(Connection::new(socket, max), state).await
    })
}

async fn client_upgrade(
    ws: WsUpgrade,
    headers: HeaderMap,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    State(state): State<AppState>,
) -> Response {
    let permit = match admit("/ws/client", &headers, peer, &state) {
        Ok(permit) => permit,
        Err(refusal) => return refusal.into_response(),
    };
    let max = state.config.max_message_bytes;
    let runtime = state.runtimes.clients.clone();
    ws.on_upgrade(socket_config(max), &runtime, move |socket| async move {
        let _permit = permit;
        client_conn::run(Connection::new(socket, max), state).await
    })
}
