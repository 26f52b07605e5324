//! The WebSocket upgrade, done here instead of by axum's `WebSocketUpgrade`.
//!
//! Why: axum's socket hides tungstenite's frames, and a master with a
//! thousand dashboards needs them. tungstenite copies a whole message into
//! the connection's write buffer and keeps that buffer's capacity for the
//! life of the connection, so one 2 MB snapshot (10,000 workers) left every
//! dashboard holding 2 MB of RSS. With the stream in hand, [`Connection`]
//! sends large messages as fragments of [`FRAGMENT_BYTES`] and the buffer
//! stays that small.
//!
//! It also lets the caller pick the runtime a connection runs on: workers and
//! clients get separate ones, so a fan-out to many dashboards never queues in
//! front of a worker's assignment.
//!
//! [`Connection`]: super::Connection
//! [`FRAGMENT_BYTES`]: super::connection::FRAGMENT_BYTES

use std::future::Future;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;
use tracing::debug;

/// The socket a connection task owns.
pub(super) type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A request that asked for a WebSocket (HTTP/1.1 `Upgrade: websocket`).
pub(super) struct WsUpgrade {
    key: HeaderValue,
    on_upgrade: hyper::upgrade::OnUpgrade,
}

/// Why a request could not be upgraded: the status and a plain-text reason.
pub(super) struct NotUpgradable(StatusCode, &'static str);

impl IntoResponse for NotUpgradable {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn header_is(headers: &HeaderMap, name: header::HeaderName, value: &str) -> bool {
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

fn header_lists(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

impl<S: Send + Sync> FromRequestParts<S> for WsUpgrade {
    type Rejection = NotUpgradable;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, NotUpgradable> {
        use NotUpgradable as No;
        if parts.version != Version::HTTP_11 {
            return Err(No(
                StatusCode::HTTP_VERSION_NOT_SUPPORTED,
                "WebSocket upgrades need HTTP/1.1",
            ));
        }
        if parts.method != Method::GET {
            return Err(No(
                StatusCode::METHOD_NOT_ALLOWED,
                "a WebSocket upgrade is a GET request",
            ));
        }
        if !header_lists(&parts.headers, header::CONNECTION, "upgrade")
            || !header_is(&parts.headers, header::UPGRADE, "websocket")
        {
            return Err(No(
                StatusCode::UPGRADE_REQUIRED,
                "this endpoint speaks WebSocket: send Connection: upgrade and Upgrade: websocket",
            ));
        }
        if !header_is(&parts.headers, header::SEC_WEBSOCKET_VERSION, "13") {
            return Err(No(
                StatusCode::BAD_REQUEST,
                "Sec-WebSocket-Version must be 13",
            ));
        }
        let key = parts
            .headers
            .get(header::SEC_WEBSOCKET_KEY)
            .cloned()
            .ok_or(No(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing"))?;
        let on_upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .ok_or(No(
                StatusCode::UPGRADE_REQUIRED,
                "this connection cannot be upgraded",
            ))?;
        Ok(WsUpgrade { key, on_upgrade })
    }
}

impl WsUpgrade {
    /// Answers 101 and runs `callback` with the socket on `runtime` once the
    /// client has it.
    pub(super) fn on_upgrade<C, Fut>(
        self,
        config: WebSocketConfig,
        runtime: &tokio::runtime::Handle,
        callback: C,
    ) -> Response
    where
        C: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept = derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        runtime.spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(e) => {
                    debug!("WebSocket upgrade failed: {e}");
                    return;
                }
            };
            let socket = WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                Role::Server,
                Some(config),
            )
            .await;
            callback(socket).await;
        });
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        response
    }
}
