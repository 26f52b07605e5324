//! One request, one reply: the role checks every request passes, then each
//! command on the core (or, for reading the archive, off it).

use std::sync::Arc;

use tracing::{info, warn};
use tunefleet_shared::protocol::{
    ClientCommand, ClientRequest, ErrorCode, JobView, ReplyBody, Role, SecretText, ServerMessage,
};
use tunefleet_shared::workload::{parse_workload_file, MAX_WORKLOAD_FILE_BYTES};

use super::error;
use crate::core::Command;
use crate::models::ModelError;
use crate::net::AppState;
use crate::scheduler::{CachePolicy, CommandError};
use crate::tokens::{TokenError, MASTER_ADMIN};

pub(super) async fn handle(
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
    if request.command.changes_state() && state.storage.is_failing() {
        return storage_unavailable(id, state);
    }
    if request.command.needs_master_admin() && who != MASTER_ADMIN {
        return error(
            Some(id),
            ErrorCode::Forbidden,
            "only the master's own admin token (--admin-token) manages named tokens".into(),
        );
    }
    let core = &state.core;
    // The core drops a change's reply when its batch could not be committed.
    let gone = || {
        if state.storage.is_failing() {
            return storage_unavailable(id, state);
        }
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

/// A change refused because the store cannot commit: the cause and the
/// file (or server), and that nothing was applied.
fn storage_unavailable(id: u64, state: &AppState) -> ServerMessage {
    error(
        Some(id),
        ErrorCode::StorageUnavailable,
        state.storage.refusal(),
    )
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

fn token_error(id: u64, e: TokenError) -> ServerMessage {
    let code = match e {
        TokenError::BadName(_) => ErrorCode::BadRequest,
        TokenError::Exists(_) => ErrorCode::InvalidState,
        TokenError::Unknown(_) => ErrorCode::NotFound,
    };
    error(Some(id), code, e.to_string())
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
