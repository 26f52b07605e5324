//! One worker's socket: handshake, token check, heartbeat, and forwarding.
//!
//! The token handed out at registration is bound to this socket: any worker
//! message whose token differs (a stolen or stale one) is refused here and
//! never reaches the scheduler. When the socket ends for any reason the core
//! is told at once, which recycles the worker's job to the front of the queue.
//!
//! [`run`] does the handshake and the registration; a registered worker's
//! socket is then a [`Handler`] (as tokio-rs/mini-redis's): one loop whose
//! `select!` waits for the next event (a frame from the worker, a message
//! the core queued for it, a held-back progress report falling due, the
//! heartbeat's check, the master's shutdown) and hands each to one method.
//! Every method returns a [`Flow`]: go on, or the connection is over and
//! why; the reason is logged and is the one the core's `WorkerLeave` gets.
//!
//! Rate: `progress` reaches the core at most once per
//! [`PROGRESS_INTERVAL`] per slot (the latest report wins; a held-back one is sent when
//! the interval is over or just before the slot's next other message), and
//! other messages beyond `--max-worker-messages-per-second` are not refused but
//! read more slowly (see [`super::limits`]).

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use tunefleet_shared::protocol::{
    close_code, ErrorCode, MasterMessage, WorkerHello, WorkerMessage, MAX_WORKER_SLOTS,
    PROTOCOL_VERSION, WORKER_SLOTS,
};
use tunefleet_shared::secrets_equal;

use super::connection::SendError;
use super::limits::{TokenBucket, PROGRESS_INTERVAL};
use super::{AppState, Connection, Frame};
use crate::core::{Change, Outbound, WorkerInput};
use crate::scheduler::{session_label, LeaveKind, ProgressReport, SessionId};

mod slots;
use slots::Slots;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive unparseable messages tolerated before the socket is closed.
const MAX_BAD_MESSAGES: u32 = 16;
const MAX_NAME_LEN: usize = 128;
/// Most messages the core queues for one worker at a time to send together
/// (an `ack` and the next `assign` come from one commit).
const MAX_MESSAGES_PER_WRITE: usize = 64;

/// What the core queued for one worker's slots, in the order it sent them.
type OutboundRx = mpsc::UnboundedReceiver<(SessionId, Outbound)>;

/// What each step of the connection's loop says: go on, or the connection
/// is over, with why (logged, and handed to the core with the leave).
type Flow = ControlFlow<String>;

/// A worker's socket from its first frame to its last: the handshake, the
/// join, then the [`Handler`]'s loop, and the core told of the leave
/// whatever ended it (the worker's close, a failed socket, silence, the
/// master's shutdown).
pub(super) async fn run(mut conn: Connection, state: AppState) {
    let _alive = state.alive.clone();
    let Some(hello) = handshake(&mut conn, &state).await else {
        return;
    };
    if state.storage.is_failing() {
        return refuse_storage(&mut conn, &state).await;
    }
    let Some(mut handler) = Handler::register(conn, state, hello).await else {
        return;
    };
    let reason = handler.run().await;
    info!(worker = %handler.name, session = %handler.session, %reason, "worker connection ended");
    leave(&handler.state, &handler.slots, handler.kind, &reason).await;
}

/// A registration while the store cannot commit (joining is a change too):
/// the error, then a close the worker answers by reconnecting later.
async fn refuse_storage(conn: &mut Connection, state: &AppState) {
    let _ = conn
        .send(&error(
            ErrorCode::StorageUnavailable,
            state.storage.refusal(),
        ))
        .await;
    conn.close(
        close_code::STORAGE_UNAVAILABLE,
        "master cannot commit its state; reconnect later",
    )
    .await;
}

/// Asks the core for one session per slot (`Change::WorkerJoin`). `None`
/// when it refused the worker or is gone: the socket is then closed with
/// the reason (4005 after the full explanation, `storage_unavailable`, or
/// going away).
async fn join(
    conn: &mut Connection,
    state: &AppState,
    hello: WorkerHello,
) -> Option<(Vec<SessionId>, usize, OutboundRx)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let joined = state
        .core
        .ask(|reply| Change::WorkerJoin {
            hello: Box::new(hello),
            tx,
            reply,
        })
        .await;
    match joined {
        Some(Ok((sessions, matching))) => Some((sessions, matching, rx)),
        Some(Err(refusal)) => {
            // A close reason holds 123 bytes; the full explanation goes first.
            let _ = conn
                .send(&error(ErrorCode::NoMatchingJobs, refusal.to_string()))
                .await;
            conn.close(
                close_code::NO_MATCHING_JOBS,
                "no open job can run on this worker's target; see the error message",
            )
            .await;
            None
        }
        None if state.storage.is_failing() => {
            refuse_storage(conn, state).await;
            None
        }
        None => {
            conn.close(close_code::GOING_AWAY, "master is shutting down")
                .await;
            None
        }
    }
}

/// A registered worker's connection and everything its loop keeps between
/// events, with one method per event.
struct Handler {
    conn: Connection,
    state: AppState,
    /// What the core queued for this worker (acks, assigns, cancels, a close).
    outbound: OutboundRx,
    /// Which slot's session each message goes to, and the held-back progress.
    slots: Slots,
    /// The token bound to this socket: a message carrying another is refused.
    token: String,
    /// The worker's name and first session, for the logs.
    name: String,
    session: SessionId,
    /// Messages other than progress are read no faster than this allows.
    bucket: TokenBucket,
    /// Invalid frames in a row; too many close the connection.
    bad_messages: u32,
    /// Wakes the heartbeat's check ([`check_every`]).
    check: tokio::time::Interval,
    last_ping: Instant,
    shutdown: watch::Receiver<bool>,
    /// How the worker leaves: graceful (its attempt not counted) after its
    /// own normal close or the master's shutdown, lost otherwise.
    kind: LeaveKind,
}

impl Handler {
    /// Joins the core and sends `registered` with the token bound to this
    /// socket. `None` when the worker was refused (the socket closed) or the
    /// socket failed before `registered` went (the core then told of the
    /// leave at once).
    async fn register(mut conn: Connection, state: AppState, hello: WorkerHello) -> Option<Self> {
        let name = hello.name.clone();
        let (sessions, matching, outbound) = join(&mut conn, &state, hello).await?;
        let slots = Slots::new(sessions, tokio::time::Instant::now());
        let token = uuid::Uuid::new_v4().simple().to_string();
        let registered = MasterMessage::Registered {
            token: token.clone(),
            session: session_label(slots.first()),
            matching_jobs: matching,
            // The worker's own silence limit: a partition that swallows the
            // master's close leaves no other sign (docs/PROTOCOL.md, Heartbeat).
            heartbeat_timeout_ms: Some(state.config.heartbeat_timeout.as_millis() as u64),
        };
        if conn.send(&registered).await.is_err() {
            let reason = "connection lost during registration";
            leave(&state, &slots, LeaveKind::Lost, reason).await;
            return None;
        }
        // The loop's clocks (the silence limit, pings, the bucket) start now.
        let config = &state.config;
        Some(Handler {
            check: tokio::time::interval(check_every(config)),
            last_ping: Instant::now(),
            bucket: TokenBucket::per_second(config.max_worker_messages_per_second, Instant::now()),
            shutdown: state.shutdown.clone(),
            session: slots.first(),
            bad_messages: 0,
            kind: LeaveKind::Lost,
            conn,
            state,
            outbound,
            slots,
            token,
            name,
        })
    }

    /// Waits for the next event and hands it to its method, until one ends
    /// the connection; returns why.
    async fn run(&mut self) -> String {
        loop {
            let flow = tokio::select! {
                frame = self.conn.recv() => self.on_frame(frame).await,
                out = self.outbound.recv() => self.on_outbound(out).await,
                _ = sleep_until_some(self.slots.next_release()) => self.on_release_due().await,
                _ = self.check.tick() => self.on_heartbeat().await,
                _ = self.shutdown.changed() => self.on_shutdown().await,
            };
            if let ControlFlow::Break(reason) = flow {
                return reason;
            }
        }
    }

    /// One frame from the worker. Only a text frame carries a message; the
    /// socket's end, error or an oversize message ends the connection.
    async fn on_frame(&mut self, frame: Frame) -> Flow {
        match frame {
            Frame::Text(text) => match serde_json::from_str::<WorkerMessage>(&text) {
                Err(e) => {
                    warn!(worker = %self.name, session = %self.session, "unparseable message: {e}");
                    self.bad_message(format!("invalid message: {e}")).await
                }
                Ok(msg) => {
                    self.bad_messages = 0;
                    self.on_message(msg).await
                }
            },
            Frame::Binary => {
                let message = "binary frames are not supported; send JSON text";
                self.bad_message(message.into()).await
            }
            Frame::Control => Flow::Continue(()),
            Frame::Closed { code, reason } => self.on_closed(code, &reason),
            Frame::TooBig => {
                let limit = self.conn.max_message_bytes();
                let reason = format!("message over the {limit}-byte limit");
                self.conn.close(close_code::TOO_BIG, &reason).await;
                Flow::Break(format!("sent a message over the {limit}-byte limit"))
            }
            Frame::Error(e) => Flow::Break(format!("connection error: {e}")),
        }
    }

    /// An invalid frame is answered `bad_request`, so a buggy worker learns
    /// why; too many in a row close the socket (a peer that only sends
    /// garbage would otherwise cost a parse per frame forever).
    async fn bad_message(&mut self, message: String) -> Flow {
        self.bad_messages += 1;
        if self.bad_messages >= MAX_BAD_MESSAGES {
            self.conn
                .close(close_code::POLICY, "too many invalid messages")
                .await;
            return Flow::Break("closed after too many invalid messages".into());
        }
        let _ = self.conn.send(&error(ErrorCode::BadRequest, message)).await;
        Flow::Continue(())
    }

    /// The worker closed the socket, or it ended. Only a normal close
    /// (1000, 1001) is a graceful leave: anything else may be a crash, and
    /// the attempt counts.
    fn on_closed(&mut self, code: Option<u16>, reason: &str) -> Flow {
        if matches!(code, Some(close_code::NORMAL | close_code::GOING_AWAY)) {
            self.kind = LeaveKind::Graceful;
        }
        let code = code.map_or("none".into(), |c| c.to_string());
        let colon = if reason.is_empty() { "" } else { ": " };
        Flow::Break(format!("closed by worker (code {code}{colon}{reason})"))
    }

    /// A parsed message: its token checked (a wrong one is answered here and
    /// never reaches the scheduler), then sent to the session of the slot it
    /// is for. A `request_job` while every slot is busy or asking is dropped.
    async fn on_message(&mut self, msg: WorkerMessage) -> Flow {
        let input = match to_input(msg, &self.token) {
            Ok(input) => input,
            Err(reply) => {
                warn!(worker = %self.name, session = %self.session, "refused: {}", describe(&reply));
                let _ = self.conn.send(&reply).await;
                return Flow::Continue(());
            }
        };
        let Some(session) = self.slots.route(&input) else {
            return Flow::Continue(());
        };
        match input {
            WorkerInput::Progress(_) => self.on_progress(session, input).await,
            input => self.forward(session, input).await,
        }
    }

    /// A progress report goes to the core at most once per
    /// [`PROGRESS_INTERVAL`] per slot: one that comes sooner is held back
    /// (the latest wins) for [`Handler::on_release_due`] or the slot's next
    /// message. It only replaces the last one, so none is lost that matters.
    async fn on_progress(&mut self, session: SessionId, progress: WorkerInput) -> Flow {
        let now = tokio::time::Instant::now();
        match self
            .slots
            .pace_progress(session, progress, now, PROGRESS_INTERVAL)
        {
            Some(progress) => self.send_to_core(session, progress).await,
            None => Flow::Continue(()),
        }
    }

    /// A request, result or failure. Over the rate it is not refused (a
    /// refused `result` would leave the worker waiting for its ack): the
    /// socket is simply read later (backpressure). The slot's held-back
    /// progress report goes first, so the core sees the worker's order.
    async fn forward(&mut self, session: SessionId, input: WorkerInput) -> Flow {
        let wait = self.bucket.wait(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        self.bucket.try_take(Instant::now());
        if let Some(progress) = self.slots.take_held(session) {
            self.send_to_core(session, progress).await?;
        }
        self.send_to_core(session, input).await
    }

    /// Hands one message to the core; the connection ends if the core is gone.
    /// (`&mut self`: the socket is `Send` but not `Sync`, and this future
    /// must be `Send` to run on the runtime's threads.)
    async fn send_to_core(&mut self, session: SessionId, input: WorkerInput) -> Flow {
        let change = Change::Worker { session, input };
        if self.state.core.send(change).await {
            Flow::Continue(())
        } else {
            Flow::Break("master core stopped".into())
        }
    }

    /// What the core queued for this worker, sent at once: a message with
    /// whatever else is queued in one flush ([`Handler::send_queued`]); a
    /// close after what came before it. The core gone ends the connection.
    async fn on_outbound(&mut self, out: Option<(SessionId, Outbound)>) -> Flow {
        let close = match out {
            Some((session, Outbound::Msg(msg))) => match self.send_queued(session, msg).await {
                Ok(close) => close,
                Err(e) => return Flow::Break(format!("send failed: {e}")),
            },
            Some((_, Outbound::Close { code, reason })) => Some((code, reason)),
            None => return Flow::Break("master core stopped".into()),
        };
        match close {
            Some((code, reason)) => {
                self.conn.close(code, &reason).await;
                Flow::Break(reason)
            }
            None => Flow::Continue(()),
        }
    }

    /// Sends `first` and whatever else the core has already queued for this
    /// worker in one flush, so the worker reads an `ack` and the next `assign`
    /// with one wake-up instead of two. A queued close ends the batch: what came
    /// before it is flushed first, then the close is handed back to the caller.
    /// Each message sent tells the slots which slot now holds which job.
    async fn send_queued(
        &mut self,
        session: SessionId,
        first: MasterMessage,
    ) -> Result<Option<(u16, String)>, SendError> {
        self.slots.sent(session, &first);
        self.conn.feed(&first).await?;
        let mut close = None;
        for _ in 1..MAX_MESSAGES_PER_WRITE {
            match self.outbound.try_recv() {
                Ok((session, Outbound::Msg(msg))) => {
                    self.slots.sent(session, &msg);
                    self.conn.feed(&msg).await?
                }
                Ok((_, Outbound::Close { code, reason })) => {
                    close = Some((code, reason));
                    break;
                }
                Err(_) => break,
            }
        }
        self.conn.flush().await?;
        Ok(close)
    }

    /// The held-back progress reports whose interval is over go to the core,
    /// so the last report of a quiet worker is not held for ever.
    async fn on_release_due(&mut self) -> Flow {
        let now = tokio::time::Instant::now();
        let mut stopped = false;
        for (session, input) in self.slots.release_due(now, PROGRESS_INTERVAL) {
            stopped |= self.send_to_core(session, input).await.is_break();
        }
        if stopped {
            return Flow::Break("master core stopped".into());
        }
        Flow::Continue(())
    }

    /// Liveness: a worker silent (no frame at all, pongs included) for
    /// `--heartbeat-timeout` is gone (a partition gives no other sign), and
    /// the socket is aborted without waiting for it; otherwise a ping every
    /// `--heartbeat-interval` gives a live worker something to answer.
    async fn on_heartbeat(&mut self) -> Flow {
        let config = &self.state.config;
        let silent = self.conn.last_seen.elapsed();
        if silent > config.heartbeat_timeout {
            let reason = format!(
                "heartbeat timeout: nothing received for {:.1} s",
                silent.as_secs_f64()
            );
            self.conn
                .abort(close_code::HEARTBEAT_TIMEOUT, &reason)
                .await;
            return Flow::Break(reason);
        }
        if self.last_ping.elapsed() >= config.heartbeat_interval {
            self.last_ping = Instant::now();
            if let Err(e) = self.conn.ping().await {
                return Flow::Break(format!("ping failed: {e}"));
            }
        }
        Flow::Continue(())
    }

    /// The master is shutting down: the worker is told, and its leave is
    /// graceful (its job's attempt is not counted against it).
    async fn on_shutdown(&mut self) -> Flow {
        self.kind = LeaveKind::Graceful;
        let reason = "master is shutting down";
        let shutdown = MasterMessage::Shutdown {
            reason: reason.into(),
        };
        let _ = self.conn.send(&shutdown).await;
        self.conn.close(close_code::GOING_AWAY, reason).await;
        Flow::Break(reason.into())
    }
}

/// Tells the core that every slot's session ended.
async fn leave(state: &AppState, slots: &Slots, kind: LeaveKind, reason: &str) {
    for session in slots.sessions() {
        let leave = Change::WorkerLeave {
            session,
            kind,
            reason: reason.to_string(),
        };
        if !state.core.send(leave).await {
            return;
        }
    }
}

/// How often the heartbeat's check runs: several times per timeout, so a
/// silent peer is caught close to `heartbeat_timeout`, not up to a whole
/// interval later.
fn check_every(config: &super::NetConfig) -> Duration {
    config
        .heartbeat_interval
        .min(config.heartbeat_timeout / 5)
        .max(Duration::from_millis(20))
}

/// Sleeps until `at`; never wakes when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Reads and checks `register`; closes the socket with a clear reason if wrong.
async fn handshake(conn: &mut Connection, state: &AppState) -> Option<WorkerHello> {
    let text = conn
        .first_text(HANDSHAKE_TIMEOUT, "register message")
        .await?;
    // Check the version before the shape: a newer worker's register may not parse.
    let version = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("protocol").and_then(|p| p.as_u64()));
    if let Some(v) = version.filter(|v| *v != u64::from(PROTOCOL_VERSION)) {
        let reason =
            format!("protocol version mismatch: master speaks {PROTOCOL_VERSION}, worker sent {v}");
        warn!("{reason}");
        conn.close(close_code::PROTOCOL_MISMATCH, &reason).await;
        return None;
    }
    let hello = match serde_json::from_str::<WorkerMessage>(&text) {
        Ok(WorkerMessage::Register(hello)) => hello,
        Ok(_) => {
            conn.close(close_code::HANDSHAKE, "first message must be register")
                .await;
            return None;
        }
        Err(e) => {
            let reason = format!("invalid register message: {e}");
            warn!("{reason}");
            conn.close(close_code::HANDSHAKE, &reason).await;
            return None;
        }
    };
    if let Some(secret) = &state.config.worker_secret {
        if !hello
            .secret
            .as_deref()
            .is_some_and(|s| secrets_equal(s, secret))
        {
            warn!(worker = %hello.name, "worker refused: missing or wrong join secret");
            conn.close(
                close_code::UNAUTHORIZED,
                "unauthorized: missing or wrong worker secret",
            )
            .await;
            return None;
        }
    }
    let bad_len = |s: &str| s.is_empty() || s.len() > MAX_NAME_LEN;
    if bad_len(&hello.name) || bad_len(&hello.worker_id) {
        conn.close(
            close_code::HANDSHAKE,
            "worker name and worker_id must be 1 to 128 bytes",
        )
        .await;
        return None;
    }
    if !WORKER_SLOTS.contains(&hello.slot_count()) {
        let reason = format!(
            "slots must be 1 to {MAX_WORKER_SLOTS}, not {}",
            hello.slot_count()
        );
        conn.close(close_code::HANDSHAKE, &reason).await;
        return None;
    }
    Some(hello)
}

fn to_input(msg: WorkerMessage, token: &str) -> Result<WorkerInput, Box<MasterMessage>> {
    let (sent, input) = match msg {
        WorkerMessage::Register(_) => {
            return Err(Box::new(error(
                ErrorCode::BadRequest,
                "already registered on this connection".into(),
            )))
        }
        WorkerMessage::RequestJob { token } => (token, WorkerInput::RequestJob),
        WorkerMessage::Progress {
            token,
            job_id,
            lease,
            trials_done,
            trials_total,
            best_latency_s,
        } => (
            token,
            WorkerInput::Progress(ProgressReport {
                job_id,
                lease,
                trials_done,
                trials_total,
                best_latency_s,
            }),
        ),
        WorkerMessage::Result {
            token,
            job_id,
            lease,
            result,
        } => (
            token,
            WorkerInput::Result {
                job_id,
                lease,
                result: Box::new(result),
            },
        ),
        WorkerMessage::JobFailed {
            token,
            job_id,
            lease,
            error: message,
        } => (
            token,
            WorkerInput::Failed {
                job_id,
                lease,
                error: message,
            },
        ),
    };
    if secrets_equal(&sent, token) {
        Ok(input)
    } else {
        Err(Box::new(error(
            ErrorCode::StaleToken,
            "token does not belong to this connection (tokens die with their socket); message rejected".into(),
        )))
    }
}

fn error(code: ErrorCode, message: String) -> MasterMessage {
    MasterMessage::Error { code, message }
}

fn describe(msg: &MasterMessage) -> String {
    match msg {
        MasterMessage::Error { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}
