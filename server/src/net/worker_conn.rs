//! One worker's socket: handshake, token check, heartbeat, and forwarding.
//!
//! The token handed out at registration is bound to this socket: any worker
//! message whose token differs (a stolen or stale one) is refused here and
//! never reaches the scheduler. When the socket ends for any reason the core
//! is told at once, which recycles the worker's job to the front of the queue.
//!
//! Rate: `progress` reaches the core at most once per
//! [`PROGRESS_INTERVAL`] per slot (the latest report wins; a held-back one is sent when
//! the interval is over or just before the slot's next other message), and
//! other messages beyond `--max-worker-messages-per-second` are not refused but
//! read more slowly (see [`super::limits`]).

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
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

/// A registration while the store cannot commit (joining is a change too):
/// the error, then a close the worker answers by reconnecting later.
async fn refuse_storage(mut conn: Connection, state: &AppState) {
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

pub(super) async fn run(mut conn: Connection, state: AppState) {
    let _alive = state.alive.clone();
    let Some(hello) = handshake(&mut conn, &state).await else {
        return;
    };
    if state.storage.is_failing() {
        return refuse_storage(conn, &state).await;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let name = hello.name.clone();
    let joined = state
        .core
        .ask(|reply| Change::WorkerJoin {
            hello: Box::new(hello),
            tx,
            reply,
        })
        .await;
    let (sessions, matching) = match joined {
        Some(Ok(ok)) => ok,
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
            return;
        }
        None if state.storage.is_failing() => return refuse_storage(conn, &state).await,
        None => {
            conn.close(close_code::GOING_AWAY, "master is shutting down")
                .await;
            return;
        }
    };
    let mut slots = Slots::new(sessions, tokio::time::Instant::now());
    let session = slots.first();
    let token = uuid::Uuid::new_v4().simple().to_string();
    let registered = MasterMessage::Registered {
        token: token.clone(),
        session: session_label(session),
        matching_jobs: matching,
        // The worker's own silence limit: a partition that swallows the
        // master's close leaves no other sign (docs/PROTOCOL.md, Heartbeat).
        heartbeat_timeout_ms: Some(state.config.heartbeat_timeout.as_millis() as u64),
    };
    if conn.send(&registered).await.is_err() {
        leave(
            &state,
            &slots,
            LeaveKind::Lost,
            "connection lost during registration",
        )
        .await;
        return;
    }

    let config = state.config.clone();
    let mut shutdown = state.shutdown.clone();
    // Checks liveness several times per timeout so a silent peer is caught
    // close to `heartbeat_timeout`, not up to a whole interval later.
    let check_every = config
        .heartbeat_interval
        .min(config.heartbeat_timeout / 5)
        .max(Duration::from_millis(20));
    let mut check = tokio::time::interval(check_every);
    let mut last_ping = Instant::now();
    let mut bad_messages = 0;
    let mut kind = LeaveKind::Lost;
    let mut bucket = TokenBucket::per_second(config.max_worker_messages_per_second, Instant::now());

    let reason: String = loop {
        tokio::select! {
            frame = conn.recv() => match frame {
                Frame::Text(text) => match serde_json::from_str::<WorkerMessage>(&text) {
                    Err(e) => {
                        bad_messages += 1;
                        warn!(worker = %name, %session, "unparseable message: {e}");
                        if bad_messages >= MAX_BAD_MESSAGES {
                            conn.close(close_code::POLICY, "too many invalid messages").await;
                            break "closed after too many invalid messages".into();
                        }
                        let _ = conn.send(&error(ErrorCode::BadRequest, format!("invalid message: {e}"))).await;
                    }
                    Ok(msg) => {
                        bad_messages = 0;
                        let routed = to_input(msg, &token).map(|input| (slots.route(&input), input));
                        match routed {
                            // Every slot is busy or already asking.
                            Ok((None, _)) => {}
                            Ok((Some(session), input @ WorkerInput::Progress(_))) => {
                                let now = tokio::time::Instant::now();
                                let Some(input) = slots.pace_progress(session, input, now, PROGRESS_INTERVAL) else {
                                    continue;
                                };
                                if !state.core.send(Change::Worker { session, input }).await {
                                    break "master core stopped".into();
                                }
                            }
                            Ok((Some(session), input)) => {
                                // Backpressure: over the rate, this socket is simply read later.
                                let wait = bucket.wait(Instant::now());
                                if !wait.is_zero() {
                                    tokio::time::sleep(wait).await;
                                }
                                bucket.try_take(Instant::now());
                                // A held-back progress report goes first, keeping the order.
                                if let Some(progress) = slots.take_held(session) {
                                    if !state.core.send(Change::Worker { session, input: progress }).await {
                                        break "master core stopped".into();
                                    }
                                }
                                if !state.core.send(Change::Worker { session, input }).await {
                                    break "master core stopped".into();
                                }
                            }
                            Err(reply) => {
                                warn!(worker = %name, %session, "refused: {}", describe(&reply));
                                let _ = conn.send(&reply).await;
                            }
                        }
                    }
                },
                Frame::Binary => {
                    bad_messages += 1;
                    if bad_messages >= MAX_BAD_MESSAGES {
                        conn.close(close_code::POLICY, "too many invalid messages").await;
                        break "closed after too many invalid messages".into();
                    }
                    let _ = conn.send(&error(ErrorCode::BadRequest, "binary frames are not supported; send JSON text".into())).await;
                }
                Frame::Control => {}
                Frame::Closed { code, reason } => {
                    if matches!(code, Some(close_code::NORMAL | close_code::GOING_AWAY)) {
                        kind = LeaveKind::Graceful;
                    }
                    break format!("closed by worker (code {}{}{})", code.map_or("none".into(), |c| c.to_string()),
                        if reason.is_empty() { "" } else { ": " }, reason);
                }
                Frame::TooBig => {
                    let limit = conn.max_message_bytes();
                    conn.close(close_code::TOO_BIG, &format!("message over the {limit}-byte limit")).await;
                    break format!("sent a message over the {limit}-byte limit");
                }
                Frame::Error(e) => break format!("connection error: {e}"),
            },
            out = rx.recv() => {
                let close = match out {
                    Some((session, Outbound::Msg(msg))) => match send_queued(&mut conn, session, msg, &mut rx, &mut slots).await {
                        Ok(close) => close,
                        Err(e) => break format!("send failed: {e}"),
                    },
                    Some((_, Outbound::Close { code, reason })) => Some((code, reason)),
                    None => break "master core stopped".into(),
                };
                if let Some((code, reason)) = close {
                    conn.close(code, &reason).await;
                    break reason;
                }
            },
            _ = sleep_until_some(slots.next_release()) => {
                let mut stopped = false;
                for (session, input) in slots.release_due(tokio::time::Instant::now(), PROGRESS_INTERVAL) {
                    stopped |= !state.core.send(Change::Worker { session, input }).await;
                }
                if stopped {
                    break "master core stopped".into();
                }
            },
            _ = check.tick() => {
                let silent = conn.last_seen.elapsed();
                if silent > config.heartbeat_timeout {
                    let reason = format!("heartbeat timeout: nothing received for {:.1} s", silent.as_secs_f64());
                    conn.abort(close_code::HEARTBEAT_TIMEOUT, &reason).await;
                    break reason;
                }
                if last_ping.elapsed() >= config.heartbeat_interval {
                    last_ping = Instant::now();
                    if let Err(e) = conn.ping().await {
                        break format!("ping failed: {e}");
                    }
                }
            },
            _ = shutdown.changed() => {
                kind = LeaveKind::Graceful;
                let _ = conn.send(&MasterMessage::Shutdown { reason: "master is shutting down".into() }).await;
                conn.close(close_code::GOING_AWAY, "master is shutting down").await;
                break "master is shutting down".into();
            }
        }
    };
    info!(worker = %name, %session, %reason, "worker connection ended");
    leave(&state, &slots, kind, &reason).await;
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

/// Sleeps until `at`; never wakes when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Most messages the core queues for one worker at a time to send together
/// (an `ack` and the next `assign` come from one commit).
const MAX_MESSAGES_PER_WRITE: usize = 64;

/// Sends `first` and whatever else the core has already queued for this
/// worker in one flush, so the worker reads an `ack` and the next `assign`
/// with one wake-up instead of two. A queued close ends the batch: what came
/// before it is flushed first, then the close is handed back to the caller.
async fn send_queued(
    conn: &mut Connection,
    session: SessionId,
    first: MasterMessage,
    rx: &mut mpsc::UnboundedReceiver<(SessionId, Outbound)>,
    slots: &mut Slots,
) -> Result<Option<(u16, String)>, SendError> {
    slots.sent(session, &first);
    conn.feed(&first).await?;
    let mut close = None;
    for _ in 1..MAX_MESSAGES_PER_WRITE {
        match rx.try_recv() {
            Ok((session, Outbound::Msg(msg))) => {
                slots.sent(session, &msg);
                conn.feed(&msg).await?
            }
            Ok((_, Outbound::Close { code, reason })) => {
                close = Some((code, reason));
                break;
            }
            Err(_) => break,
        }
    }
    conn.flush().await?;
    Ok(close)
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
