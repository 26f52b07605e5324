//! One client's socket (CLI, browser, script): hello, requests, subscription.
//!
//! Every request gets exactly one reply carrying its `id`. A subscriber gets a
//! snapshot, then every event in `seq` order. Events come from a bounded
//! broadcast channel, so the core never waits for a subscriber; a subscriber
//! that falls more than the buffer behind is sent a fresh snapshot (with the
//! current `seq`) instead of the events it missed, and carries on from there.
//!
//! Every frame after `hello` is counted against `--max-requests-per-second`
//! ([`RequestLimiter`]): over the rate a request is answered `rate_limited`
//! without being executed, and a client that keeps flooding is closed with
//! 1008. `shutdown` (admin) notifies `serve`, which stops the master as on
//! SIGTERM after the reply has gone out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast::{self, error::RecvError};
use tracing::{info, warn};
use tunefleet_shared::protocol::{
    close_code, ClientCommand, ClientRequest, ErrorCode, ServerMessage,
};

use super::limits::{RequestLimiter, Verdict};
use super::{AppState, Connection, Frame};
use crate::core::{Command, Published};
use handshake::handshake;
use requests::handle;

mod handshake;
mod requests;

const MAX_BAD_MESSAGES: u32 = 16;
/// Events written before the socket is flushed and requests are read again.
const MAX_EVENTS_PER_WRITE: usize = 256;

pub(super) async fn run(mut conn: Connection, state: AppState) {
    let _alive = state.alive.clone();
    let Some((role, client_name, who)) = handshake(&mut conn, &state).await else {
        return;
    };
    let mut shutdown = state.shutdown.clone();
    let mut events: Option<broadcast::Receiver<Arc<Published>>> = None;
    let mut whole_views = WholeViews::new(&state);
    let mut last_seq = 0u64;
    let mut bad_messages = 0;
    let mut ping = tokio::time::interval(state.config.heartbeat_interval);
    let mut last_ping = Instant::now();
    let mut limiter = RequestLimiter::new(state.config.max_requests_per_second, Instant::now());

    loop {
        tokio::select! {
            frame = conn.recv() => {
                if matches!(frame, Frame::Text(_) | Frame::Binary) {
                    let verdict = limiter.check(Instant::now());
                    if verdict != Verdict::Allow {
                        let id = match &frame {
                            Frame::Text(text) => request_id(text),
                            _ => None,
                        };
                        let rate = state.config.max_requests_per_second;
                        let message = format!(
                            "rate limited: this master allows {rate} requests per second per connection \
                             (bursts of {}); the request was not executed, slow down",
                            2 * rate
                        );
                        let _ = conn.send(&error(id, ErrorCode::RateLimited, message)).await;
                        if verdict == Verdict::Close {
                            warn!("client closed for flooding: requests far over the rate limit");
                            conn.close(close_code::POLICY, "request rate limit exceeded").await;
                            return;
                        }
                        continue;
                    }
                }
                match frame {
                    Frame::Text(text) => match serde_json::from_str::<ClientRequest>(&text) {
                        Err(e) => {
                            bad_messages += 1;
                            let id = request_id(&text);
                            let _ = conn.send(&error(id, ErrorCode::BadRequest, format!("invalid request: {e}"))).await;
                            if bad_messages >= MAX_BAD_MESSAGES {
                                conn.close(close_code::POLICY, "too many invalid requests").await;
                                return;
                            }
                        }
                        Ok(request) => {
                            bad_messages = 0;
                            let subscribe = match request.command {
                                ClientCommand::Subscribe { deltas } => Some(deltas),
                                _ => None,
                            };
                            if let Some(deltas) = subscribe {
                                // Counted before the snapshot is asked for, so every
                                // event after it is written whole if this one needs it.
                                whole_views.set(!deltas);
                            }
                            if subscribe.is_some() && events.is_none() {
                                // Subscribe before taking the snapshot so no event falls between them.
                                events = Some(state.core.events.subscribe());
                            }
                            let reply = handle(request, role, &who, &client_name, &state).await;
                            if conn.send(&reply).await.is_err() {
                                return;
                            }
                            if subscribe.is_some() && matches!(reply, ServerMessage::Reply { .. }) {
                                match send_snapshot(&mut conn, &state).await {
                                    Some(seq) => last_seq = seq,
                                    None => return,
                                }
                            }
                        }
                    },
                    Frame::Binary => {
                        bad_messages += 1;
                        let _ = conn.send(&error(None, ErrorCode::BadRequest, "binary frames are not supported; send JSON text".into())).await;
                        if bad_messages >= MAX_BAD_MESSAGES {
                            conn.close(close_code::POLICY, "too many invalid requests").await;
                            return;
                        }
                    }
                    Frame::Control => {}
                    Frame::Closed { .. } | Frame::Error(_) => return,
                    Frame::TooBig => {
                        let limit = conn.max_message_bytes();
                        warn!("client sent a message over the {limit}-byte limit; closing");
                        conn.close(close_code::TOO_BIG, &format!("message over the {limit}-byte limit")).await;
                        return;
                    }
                }
            },
            event = next_event(&mut events) => {
                // Events already waiting go out in the same write: one
                // system call for a burst instead of one per event.
                let mut next = Some(event);
                let mut fed = 0;
                while let Some(event) = next.take() {
                    match event {
                        Ok(published) => {
                            if published.seq > last_seq {
                                last_seq = published.seq;
                                let text = if whole_views.counted {
                                    published.json.as_ref()
                                } else {
                                    published.delta.as_ref().or(published.json.as_ref())
                                };
                                let Some(text) = text else {
                                    // Written as a delta only, before this subscriber
                                    // was counted: resync instead of guessing.
                                    match send_snapshot(&mut conn, &state).await {
                                        Some(seq) => last_seq = seq,
                                        None => return,
                                    }
                                    fed = 0;
                                    next = try_next_event(&mut events);
                                    continue;
                                };
                                if conn.feed_text(text.clone()).await.is_err() {
                                    return;
                                }
                                fed += 1;
                            }
                            if fed < MAX_EVENTS_PER_WRITE {
                                next = try_next_event(&mut events);
                            }
                        }
                        Err(RecvError::Lagged(missed)) => {
                            info!(missed, "subscriber fell behind; sending a fresh snapshot");
                            match send_snapshot(&mut conn, &state).await {
                                Some(seq) => last_seq = seq,
                                None => return,
                            }
                            fed = 0;
                        }
                        Err(RecvError::Closed) => {
                            conn.close(close_code::GOING_AWAY, "master is shutting down").await;
                            return;
                        }
                    }
                }
                if fed > 0 && conn.flush().await.is_err() {
                    return;
                }
            },
            _ = ping.tick() => {
                if conn.last_seen.elapsed() > state.config.heartbeat_timeout {
                    conn.abort(close_code::HEARTBEAT_TIMEOUT, "heartbeat timeout").await;
                    return;
                }
                if last_ping.elapsed() >= state.config.heartbeat_interval {
                    last_ping = Instant::now();
                    if conn.ping().await.is_err() {
                        return;
                    }
                }
            },
            _ = shutdown.changed() => {
                let _ = conn.send(&ServerMessage::Shutdown { reason: "master is shutting down".into() }).await;
                conn.close(close_code::GOING_AWAY, "master is shutting down").await;
                return;
            }
        }
    }
}

/// Counts this connection among the subscribers that want whole views
/// (`subscribe` without `deltas`) while it is one: the core writes a known
/// job's or worker's change whole only while someone counts.
struct WholeViews {
    count: Arc<AtomicUsize>,
    counted: bool,
}

impl WholeViews {
    fn new(state: &AppState) -> WholeViews {
        WholeViews {
            count: state.core.whole_view_subscribers.clone(),
            counted: false,
        }
    }

    fn set(&mut self, whole: bool) {
        if whole != self.counted {
            if whole {
                self.count.fetch_add(1, Ordering::SeqCst);
            } else {
                self.count.fetch_sub(1, Ordering::SeqCst);
            }
            self.counted = whole;
        }
    }
}

impl Drop for WholeViews {
    fn drop(&mut self) {
        self.set(false);
    }
}

async fn next_event(
    rx: &mut Option<broadcast::Receiver<Arc<Published>>>,
) -> Result<Arc<Published>, RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// An event that is already waiting, without waiting for one.
fn try_next_event(
    rx: &mut Option<broadcast::Receiver<Arc<Published>>>,
) -> Option<Result<Arc<Published>, RecvError>> {
    use broadcast::error::TryRecvError;
    match rx.as_mut()?.try_recv() {
        Ok(published) => Some(Ok(published)),
        Err(TryRecvError::Lagged(missed)) => Some(Err(RecvError::Lagged(missed))),
        Err(TryRecvError::Empty | TryRecvError::Closed) => None,
    }
}

async fn send_snapshot(conn: &mut Connection, state: &AppState) -> Option<u64> {
    let shared = state.core.ask(|reply| Command::Snapshot { reply }).await?;
    conn.send_text(shared.message().await).await.ok()?;
    Some(shared.seq)
}

/// The `id` of a request that did not parse (or was not parsed), if it has one.
fn request_id(text: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        id: Option<u64>,
    }
    serde_json::from_str::<IdOnly>(text).ok().and_then(|v| v.id)
}

fn error(id: Option<u64>, code: ErrorCode, message: String) -> ServerMessage {
    ServerMessage::Error { id, code, message }
}
