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

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast::{self, error::RecvError};
use tracing::{info, warn};
use tunefleet_shared::protocol::{
    close_code, ClientCommand, ClientRequest, ErrorCode, Role, ServerMessage,
};

use super::limits::{RequestLimiter, Verdict};
use super::{AppState, Connection, Frame};
use crate::core::{Published, Read};
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
    let mut ping = tokio::time::interval(state.config.heartbeat_interval);
    let mut session = Session {
        limiter: RequestLimiter::new(state.config.max_requests_per_second, Instant::now()),
        whole_views: WholeViews::new(&state),
        conn,
        state,
        role,
        who,
        client_name,
        events: None,
        last_seq: 0,
        bad_messages: 0,
        last_ping: Instant::now(),
    };
    loop {
        let flow = tokio::select! {
            frame = session.conn.recv() => session.on_frame(frame).await,
            event = next_event(&mut session.events) => session.on_events(event).await,
            _ = ping.tick() => session.on_ping().await,
            _ = shutdown.changed() => {
                let _ = session.conn.send(&ServerMessage::Shutdown { reason: "master is shutting down".into() }).await;
                session.conn.close(close_code::GOING_AWAY, "master is shutting down").await;
                return;
            }
        };
        if flow.is_break() {
            return;
        }
    }
}

/// What each step of a connection's loop says: go on, or the connection is
/// over (closed, or to be dropped).
type Flow = ControlFlow<()>;

/// One authenticated client connection and what it has asked for.
struct Session {
    conn: Connection,
    state: AppState,
    role: Role,
    /// The token's name (`admin` for the master's own).
    who: String,
    client_name: String,
    /// The event stream, once the client subscribed.
    events: Option<broadcast::Receiver<Arc<Published>>>,
    whole_views: WholeViews,
    /// The last event (or snapshot) `seq` sent: older events are skipped.
    last_seq: u64,
    /// Invalid frames in a row; too many close the connection.
    bad_messages: u32,
    limiter: RequestLimiter,
    last_ping: Instant,
}

impl Session {
    async fn on_frame(&mut self, frame: Frame) -> Flow {
        if matches!(frame, Frame::Text(_) | Frame::Binary) {
            if let Some(refused) = self.rate_limit(&frame).await {
                return refused;
            }
        }
        match frame {
            Frame::Text(text) => match serde_json::from_str::<ClientRequest>(&text) {
                Err(e) => {
                    self.bad_message(request_id(&text), format!("invalid request: {e}"))
                        .await
                }
                Ok(request) => {
                    self.bad_messages = 0;
                    self.on_request(request).await
                }
            },
            Frame::Binary => {
                self.bad_message(
                    None,
                    "binary frames are not supported; send JSON text".into(),
                )
                .await
            }
            Frame::Control => Flow::Continue(()),
            Frame::Closed { .. } | Frame::Error(_) => Flow::Break(()),
            Frame::TooBig => {
                let limit = self.conn.max_message_bytes();
                warn!("client sent a message over the {limit}-byte limit; closing");
                self.conn
                    .close(
                        close_code::TOO_BIG,
                        &format!("message over the {limit}-byte limit"),
                    )
                    .await;
                Flow::Break(())
            }
        }
    }

    /// `None` for a frame within the rate. Over it, the request is answered
    /// `rate_limited` without being executed (`Continue`: the connection
    /// goes on), and a client that keeps flooding is closed (`Break`).
    async fn rate_limit(&mut self, frame: &Frame) -> Option<Flow> {
        let verdict = self.limiter.check(Instant::now());
        if verdict == Verdict::Allow {
            return None;
        }
        let id = match frame {
            Frame::Text(text) => request_id(text),
            _ => None,
        };
        let rate = self.state.config.max_requests_per_second;
        let message = format!(
            "rate limited: this master allows {rate} requests per second per connection \
             (bursts of {}); the request was not executed, slow down",
            2 * rate
        );
        let _ = self
            .conn
            .send(&error(id, ErrorCode::RateLimited, message))
            .await;
        if verdict == Verdict::Close {
            warn!("client closed for flooding: requests far over the rate limit");
            self.conn
                .close(close_code::POLICY, "request rate limit exceeded")
                .await;
            return Some(Flow::Break(()));
        }
        Some(Flow::Continue(()))
    }

    /// Answers an invalid frame; too many in a row close the connection.
    async fn bad_message(&mut self, id: Option<u64>, message: String) -> Flow {
        self.bad_messages += 1;
        let _ = self
            .conn
            .send(&error(id, ErrorCode::BadRequest, message))
            .await;
        if self.bad_messages >= MAX_BAD_MESSAGES {
            self.conn
                .close(close_code::POLICY, "too many invalid requests")
                .await;
            return Flow::Break(());
        }
        Flow::Continue(())
    }

    /// One request, one reply; a `subscribe` is followed by the snapshot.
    async fn on_request(&mut self, request: ClientRequest) -> Flow {
        let subscribe = match request.command {
            ClientCommand::Subscribe { deltas } => Some(deltas),
            _ => None,
        };
        if let Some(deltas) = subscribe {
            // Counted before the snapshot is asked for, so every event after
            // it is written whole if this one needs it.
            self.whole_views.set(!deltas);
            if self.events.is_none() {
                // Subscribe before taking the snapshot so no event falls
                // between them.
                self.events = Some(self.state.core.events.subscribe());
            }
        }
        let reply = handle(
            request,
            self.role,
            &self.who,
            &self.client_name,
            &self.state,
        )
        .await;
        if self.conn.send(&reply).await.is_err() {
            return Flow::Break(());
        }
        if subscribe.is_some() && matches!(reply, ServerMessage::Reply { .. }) {
            return self.resync().await;
        }
        Flow::Continue(())
    }

    /// A fresh snapshot, and events from its `seq` on.
    async fn resync(&mut self) -> Flow {
        match send_snapshot(&mut self.conn, &self.state).await {
            Some(seq) => {
                self.last_seq = seq;
                Flow::Continue(())
            }
            None => Flow::Break(()),
        }
    }

    /// Sends `event` and the events already waiting behind it in one write:
    /// one system call for a burst instead of one per event.
    async fn on_events(&mut self, event: Result<Arc<Published>, RecvError>) -> Flow {
        let mut next = Some(event);
        let mut fed = 0;
        while let Some(event) = next.take() {
            match event {
                Ok(published) => {
                    if published.seq > self.last_seq {
                        self.last_seq = published.seq;
                        let text = if self.whole_views.counted {
                            published.json.as_ref()
                        } else {
                            published.delta.as_ref().or(published.json.as_ref())
                        };
                        let Some(text) = text else {
                            // Written as a delta only, before this subscriber
                            // was counted: resync instead of guessing.
                            self.resync().await?;
                            fed = 0;
                            next = try_next_event(&mut self.events);
                            continue;
                        };
                        if self.conn.feed_text(text.clone()).await.is_err() {
                            return Flow::Break(());
                        }
                        fed += 1;
                    }
                    if fed < MAX_EVENTS_PER_WRITE {
                        next = try_next_event(&mut self.events);
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    info!(missed, "subscriber fell behind; sending a fresh snapshot");
                    self.resync().await?;
                    fed = 0;
                }
                Err(RecvError::Closed) => {
                    self.conn
                        .close(close_code::GOING_AWAY, "master is shutting down")
                        .await;
                    return Flow::Break(());
                }
            }
        }
        if fed > 0 && self.conn.flush().await.is_err() {
            return Flow::Break(());
        }
        Flow::Continue(())
    }

    /// The heartbeat: a peer silent too long is dropped; a ping otherwise.
    async fn on_ping(&mut self) -> Flow {
        if self.conn.last_seen.elapsed() > self.state.config.heartbeat_timeout {
            self.conn
                .abort(close_code::HEARTBEAT_TIMEOUT, "heartbeat timeout")
                .await;
            return Flow::Break(());
        }
        if self.last_ping.elapsed() >= self.state.config.heartbeat_interval {
            self.last_ping = Instant::now();
            if self.conn.ping().await.is_err() {
                return Flow::Break(());
            }
        }
        Flow::Continue(())
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
    let shared = state.core.ask(|reply| Read::Snapshot { reply }).await?;
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
