//! The network layer: translates WebSocket frames into core commands and back.
//!
//! Nothing here decides anything about jobs. A connection task parses frames,
//! checks what only the connection can know (the handshake, the token bound
//! to this socket, frame sizes, liveness), and forwards the rest to the core.
//! Each socket has its own task; a slow or hostile peer can only stall itself.

mod client_conn;
mod connection;
mod worker_conn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use tokio::sync::{mpsc, watch};
use tower_http::services::{ServeDir, ServeFile};

use crate::core::CoreHandle;
pub use connection::{Connection, Frame};

/// What the connection tasks need to know about the master's settings.
#[derive(Clone, Debug)]
pub struct NetConfig {
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    pub admin_token: String,
    pub public_read: bool,
    pub worker_secret: Option<String>,
    pub max_message_bytes: usize,
    pub web_dir: Option<PathBuf>,
}

#[derive(Clone)]
pub struct AppState {
    pub core: CoreHandle,
    pub config: Arc<NetConfig>,
    /// Flips to `true` when the master starts shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Held by every connection task; shutdown waits until all are dropped.
    pub alive: mpsc::Sender<()>,
}

pub fn router(state: AppState) -> Router {
    let web_dir = state.config.web_dir.clone();
    let router = Router::new()
        .route("/ws/worker", get(worker_upgrade))
        .route("/ws/client", get(client_upgrade))
        .route("/healthz", get(|| async { "ok" }));
    let router = match web_dir {
        Some(dir) if dir.join("index.html").is_file() => {
            let index = dir.join("index.html");
            router.fallback_service(ServeDir::new(dir).fallback(ServeFile::new(index)))
        }
        _ => router.route("/", get(no_dashboard)),
    };
    router.with_state(state)
}

async fn no_dashboard() -> impl IntoResponse {
    Html(
        "<!doctype html><title>tunefleet</title><h1>tunefleet master</h1>\
         <p>The web dashboard is not built. Build it with <code>scripts/build-web.sh</code> \
         or point <code>--web-dir</code> at a built bundle. The WebSocket endpoints \
         <code>/ws/worker</code> and <code>/ws/client</code> are up.</p>",
    )
}

async fn worker_upgrade(ws: WebSocketUpgrade, State(state): State<AppState>) -> impl IntoResponse {
    let max = state.config.max_message_bytes;
    ws.max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| worker_conn::run(Connection::new(socket, max), state))
}

async fn client_upgrade(ws: WebSocketUpgrade, State(state): State<AppState>) -> impl IntoResponse {
    let max = state.config.max_message_bytes;
    ws.max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| client_conn::run(Connection::new(socket, max), state))
}
