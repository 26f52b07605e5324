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
use std::time::{Duration, Instant};

use tokio::sync::broadcast::{self, error::RecvError};
use tracing::{debug, info, warn};
use tunefleet_shared::protocol::{
    close_code, ClientCommand, ClientRequest, ErrorCode, JobView, ReplyBody, Role, SecretText,
    ServerMessage, PROTOCOL_VERSION,
};
use tunefleet_shared::secrets_equal;
use tunefleet_shared::workload::{parse_workload_file, MAX_WORKLOAD_FILE_BYTES};

use super::limits::{RequestLimiter, Verdict};
use super::{AppState, Connection, Frame};
use crate::core::{Command, Published};
use crate::models::ModelError;
use crate::scheduler::{CachePolicy, CommandError};
use crate::tokens::{TokenError, MASTER_ADMIN};

fn token_error(id: u64, e: TokenError) -> ServerMessage {
    let code = match e {
        TokenError::BadName(_) => ErrorCode::BadRequest,
        TokenError::Exists(_) => ErrorCode::InvalidState,
        TokenError::Unknown(_) => ErrorCode::NotFound,
    };
    error(Some(id), code, e.to_string())
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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

/// The jobs the core answered with, and every archived one. A job archived
/// between the core's answer and this read is in both: the core's copy wins.
async fn with_archived(
    location: &crate::store::StateLocation,
    held: Vec<Arc<JobView>>,
) -> Result<Vec<JobView>, String> {
    let location = location.clone();
    let archived = tokio::task::spawn_blocking(move || {
        crate::store::Store::open_read_only(&location)?.load_archived(crate::store::Archived::All)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    let ids: std::collections::HashSet<String> = held.iter().map(|j| j.job_id.clone()).collect();
    let mut jobs = held;
    jobs.extend(
        archived
            .into_iter()
            .map(|job| job.view)
            .filter(|view| !ids.contains(&view.job_id)),
    );
    Ok(sorted_copies(jobs))
}

/// The core's shared views in the protocol's order, copied here rather
/// than on the core thread.
fn sorted_copies(mut views: Vec<Arc<JobView>>) -> Vec<JobView> {
    views.sort_by(|a, b| tunefleet_shared::fleet::job_order(a, b));
    views.into_iter().map(Arc::unwrap_or_clone).collect()
}

async fn send_snapshot(conn: &mut Connection, state: &AppState) -> Option<u64> {
    let shared = state.core.ask(|reply| Command::Snapshot { reply }).await?;
    conn.send_text(shared.message().await).await.ok()?;
    Some(shared.seq)
}

/// The role, the client's self-chosen name (for the log) and who it acts as:
/// `admin` for the master's admin token, a named token's name, or empty for
/// a read-only client.
async fn handshake(conn: &mut Connection, state: &AppState) -> Option<(Role, String, String)> {
    let frame = match tokio::time::timeout(HANDSHAKE_TIMEOUT, conn.recv()).await {
        Ok(frame) => frame,
        Err(_) => {
            conn.close(close_code::HANDSHAKE, "no hello within 10 s")
                .await;
            return None;
        }
    };
    let text = match frame {
        Frame::Text(text) => text,
        Frame::TooBig => {
            conn.close(close_code::TOO_BIG, "hello message too big")
                .await;
            return None;
        }
        Frame::Closed { .. } | Frame::Error(_) => return None,
        Frame::Binary | Frame::Control => {
            conn.close(
                close_code::HANDSHAKE,
                "first message must be a JSON hello request",
            )
            .await;
            return None;
        }
    };
    let request = match serde_json::from_str::<ClientRequest>(&text) {
        Ok(request) => request,
        Err(e) => {
            let version = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("protocol").and_then(|p| p.as_u64()));
            if let Some(v) = version.filter(|v| *v != u64::from(PROTOCOL_VERSION)) {
                let reason = format!(
                    "protocol version mismatch: master speaks {PROTOCOL_VERSION}, client sent {v}"
                );
                conn.close(close_code::PROTOCOL_MISMATCH, &reason).await;
            } else {
                conn.close(close_code::HANDSHAKE, &format!("invalid hello: {e}"))
                    .await;
            }
            return None;
        }
    };
    let ClientCommand::Hello {
        protocol,
        token,
        client,
    } = request.command
    else {
        let _ = conn
            .send(&error(
                Some(request.id),
                ErrorCode::BadRequest,
                "the first request must be hello".into(),
            ))
            .await;
        conn.close(close_code::HANDSHAKE, "the first request must be hello")
            .await;
        return None;
    };
    if protocol != PROTOCOL_VERSION {
        let reason = format!(
            "protocol version mismatch: master speaks {PROTOCOL_VERSION}, client sent {protocol}"
        );
        let _ = conn
            .send(&error(
                Some(request.id),
                ErrorCode::ProtocolMismatch,
                reason.clone(),
            ))
            .await;
        conn.close(close_code::PROTOCOL_MISMATCH, &reason).await;
        return None;
    }
    let named = token.as_deref().and_then(|t| state.tokens.name_of(t));
    let (role, who) = match token {
        Some(t) if secrets_equal(&t, &state.config.admin_token) => {
            (Role::Admin, MASTER_ADMIN.to_string())
        }
        Some(_) if named.is_some() => (Role::Admin, named.unwrap_or_default()),
        Some(_) => {
            warn!(
                client = %client_name(client.as_deref()),
                "client refused: wrong token"
            );
            let reason = "unauthorized: wrong token";
            let _ = conn
                .send(&error(
                    Some(request.id),
                    ErrorCode::Unauthorized,
                    reason.into(),
                ))
                .await;
            conn.close(close_code::UNAUTHORIZED, reason).await;
            return None;
        }
        None if state.config.public_read => (Role::Read, String::new()),
        None => {
            let reason = "unauthorized: this master needs a token (--token or TUNEFLEET_TOKEN)";
            let _ = conn
                .send(&error(
                    Some(request.id),
                    ErrorCode::Unauthorized,
                    reason.into(),
                ))
                .await;
            conn.close(close_code::UNAUTHORIZED, reason).await;
            return None;
        }
    };
    debug!(
        client = %client_name(client.as_deref()),
        ?role,
        %who,
        "client connected"
    );
    let welcome = ServerMessage::Reply {
        id: request.id,
        body: ReplyBody::Welcome {
            server_version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            role,
        },
    };
    conn.send(&welcome).await.ok()?;
    Some((role, client_name(client.as_deref()), who))
}

/// The client's self-chosen name for the log: printable, at most 64 chars.
fn client_name(name: Option<&str>) -> String {
    let name: String = name
        .unwrap_or("?")
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    if name.is_empty() {
        "?".into()
    } else {
        name
    }
}

/// The `id` of a request that did not parse (or was not parsed), if it has one.
fn request_id(text: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        id: Option<u64>,
    }
    serde_json::from_str::<IdOnly>(text).ok().and_then(|v| v.id)
}

async fn handle(
    request: ClientRequest,
    role: Role,
    who: &str,
    client_name: &str,
    state: &AppState,
) -> ServerMessage {
    let id = request.id;
    if request.command.needs_admin() && role != Role::Admin {
        return error(
            Some(id),
            ErrorCode::Forbidden,
            "this request needs the admin token".into(),
        );
    }
    if request.command.needs_admin() && who != MASTER_ADMIN && !state.tokens.has_name(who) {
        return error(
            Some(id),
            ErrorCode::Unauthorized,
            format!("unauthorized: the token `{who}` was revoked"),
        );
    }
    if request.command.needs_admin()
        && state
            .storage_failing
            .load(std::sync::atomic::Ordering::Relaxed)
    {
        return error(
            Some(id),
            ErrorCode::Internal,
            "the master cannot write its state database right now (disk full?); nothing was done. \
             It accepts work again as soon as it can commit: retry later"
                .into(),
        );
    }
    if request.command.needs_master_admin() && who != MASTER_ADMIN {
        return error(
            Some(id),
            ErrorCode::Forbidden,
            "only the master's own admin token (--admin-token) manages named tokens".into(),
        );
    }
    let core = &state.core;
    let gone = || {
        error(
            Some(id),
            ErrorCode::Internal,
            "master is shutting down".into(),
        )
    };
    let body = match request.command {
        ClientCommand::Hello { .. } => {
            return error(
                Some(id),
                ErrorCode::BadRequest,
                "already said hello on this connection".into(),
            )
        }
        ClientCommand::Subscribe { .. } => ReplyBody::Subscribed,
        ClientCommand::Status => match core.ask(|reply| Command::Status { reply }).await {
            Some(report) => ReplyBody::Status(report),
            None => return gone(),
        },
        ClientCommand::Results { job_ids, archived } => {
            // Every archived job is read here, through a read-only
            // connection of its own, not on the core thread (which would
            // dispatch nothing while it read the whole archive).
            let whole_archive = archived && job_ids.is_none();
            let Some(jobs) = core.ask(|reply| Command::Results { job_ids, reply }).await else {
                return gone();
            };
            if !whole_archive {
                ReplyBody::Results {
                    jobs: sorted_copies(jobs),
                }
            } else {
                match with_archived(&state.config.state, jobs).await {
                    Ok(jobs) => ReplyBody::Results { jobs },
                    Err(e) => {
                        return error(
                            Some(id),
                            ErrorCode::Internal,
                            format!("cannot read the archived jobs: {e}"),
                        )
                    }
                }
            }
        }
        ClientCommand::Submit {
            yaml,
            filename,
            fresh,
        } => {
            let filename = filename.unwrap_or_else(|| "upload.yaml".into());
            if yaml.len() > MAX_WORKLOAD_FILE_BYTES {
                return error(
                    Some(id),
                    ErrorCode::TooLarge,
                    format!("{filename}: {} bytes is over the {MAX_WORKLOAD_FILE_BYTES}-byte limit for a workload file", yaml.len()),
                );
            }
            let name = filename.clone();
            let parsed =
                tokio::task::spawn_blocking(move || parse_workload_file(&yaml, &name)).await;
            let workloads = match parsed {
                Ok(Ok(workloads)) if workloads.len() > state.config.max_workloads_per_upload => {
                    let max = state.config.max_workloads_per_upload;
                    info!(file = %filename, count = workloads.len(), max, "submission refused: too many workloads");
                    return error(
                        Some(id),
                        ErrorCode::TooLarge,
                        format!(
                            "{filename}: {} workloads is over this master's limit of {max} per upload \
                             (serve --max-workloads-per-upload); split the file",
                            workloads.len()
                        ),
                    );
                }
                Ok(Ok(workloads)) => workloads,
                Ok(Err(errors)) => {
                    info!(file = %filename, "submission refused: invalid workload file");
                    return error(Some(id), ErrorCode::InvalidWorkload, errors.to_string());
                }
                Err(e) => {
                    return error(
                        Some(id),
                        ErrorCode::Internal,
                        format!("parser crashed: {e}"),
                    )
                }
            };
            let cache = if fresh {
                CachePolicy::Bypass
            } else {
                CachePolicy::Use
            };
            match core
                .ask(|reply| Command::Submit {
                    workloads,
                    cache,
                    by: Some(who.to_string()),
                    reply,
                })
                .await
            {
                Some(report) => ReplyBody::Submitted(report),
                None => return gone(),
            }
        }
        ClientCommand::Cancel { job_id } => {
            match core
                .ask(|reply| Command::Cancel {
                    job_id: job_id.clone(),
                    by: who.to_string(),
                    reply,
                })
                .await
            {
                Some(Ok(())) => ReplyBody::Cancelled { job_id },
                Some(Err(e)) => return command_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::Retry { job_id } => {
            match core
                .ask(|reply| Command::Retry {
                    job_id: job_id.clone(),
                    by: who.to_string(),
                    reply,
                })
                .await
            {
                Some(Ok(())) => ReplyBody::Retried { job_id },
                Some(Err(e)) => return command_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::SubmitModel { model } => {
            if let Err(message) = model.check_upload() {
                info!(model = %model.name, "model refused: {message}");
                return error(Some(id), ErrorCode::InvalidWorkload, message);
            }
            let name = model.name.clone();
            match core
                .ask(|reply| Command::SubmitModel {
                    submission: model,
                    reply,
                })
                .await
            {
                Some(Ok(extract_job)) => ReplyBody::ModelSubmitted { name, extract_job },
                Some(Err(e)) => return model_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::Models { name } => {
            match core.ask(|reply| Command::Models { name, reply }).await {
                Some(Ok(models)) => ReplyBody::Models { models },
                Some(Err(e)) => return model_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::StopModel { name } => {
            match core
                .ask(|reply| Command::StopModel {
                    name: name.clone(),
                    reply,
                })
                .await
            {
                Some(Ok(())) => ReplyBody::ModelStopping { name },
                Some(Err(e)) => return model_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::CreateToken { name } => {
            match core
                .ask(|reply| Command::CreateToken {
                    name: name.clone(),
                    reply,
                })
                .await
            {
                Some(Ok(token)) => ReplyBody::TokenCreated {
                    name,
                    token: SecretText(token),
                },
                Some(Err(e)) => return token_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::RevokeToken { name } => {
            match core
                .ask(|reply| Command::RevokeToken {
                    name: name.clone(),
                    reply,
                })
                .await
            {
                Some(Ok(())) => ReplyBody::TokenRevoked { name },
                Some(Err(e)) => return token_error(id, e),
                None => return gone(),
            }
        }
        ClientCommand::Import { workloads, keys } => {
            match core
                .ask(|reply| Command::Import {
                    workloads,
                    keys,
                    reply,
                })
                .await
            {
                Some(Ok(report)) => ReplyBody::Imported(report),
                Some(Err(e)) => {
                    return error(
                        Some(id),
                        ErrorCode::BadRequest,
                        format!("import refused: {e}"),
                    )
                }
                None => return gone(),
            }
        }
        ClientCommand::ListTokens => match core.ask(|reply| Command::ListTokens { reply }).await {
            Some(tokens) => ReplyBody::Tokens { tokens },
            None => return gone(),
        },
        ClientCommand::ModelArtifact { name, artifact } => {
            match core
                .ask(|reply| Command::ModelArtifact {
                    name: name.clone(),
                    artifact,
                    reply,
                })
                .await
            {
                Some(Ok(files)) => ReplyBody::Artifact {
                    name,
                    artifact,
                    files,
                },
                Some(Err(message)) => return error(Some(id), ErrorCode::NotFound, message),
                None => return gone(),
            }
        }
        ClientCommand::Shutdown => {
            // `serve` stops accepting and tells every connection, this one
            // included, only after this task has sent the reply: the shutdown
            // notice reaches us through the same select loop.
            warn!(client = %client_name, "shutdown requested by an admin client");
            state.stop.notify_one();
            ReplyBody::ShuttingDown
        }
    };
    ServerMessage::Reply { id, body }
}

fn model_error(id: u64, e: ModelError) -> ServerMessage {
    let code = match e {
        ModelError::Unknown(_) => ErrorCode::NotFound,
        ModelError::Finished { .. } | ModelError::Exists(_) => ErrorCode::InvalidState,
        ModelError::BadName(_) | ModelError::BadSettings(_) => ErrorCode::BadRequest,
    };
    error(Some(id), code, e.to_string())
}

fn command_error(id: u64, e: CommandError) -> ServerMessage {
    let code = match e {
        CommandError::UnknownJob(_) => ErrorCode::NotFound,
        CommandError::InvalidState { .. } => ErrorCode::InvalidState,
    };
    error(Some(id), code, e.to_string())
}

fn error(id: Option<u64>, code: ErrorCode, message: String) -> ServerMessage {
    ServerMessage::Error { id, code, message }
}
