//! One request, one reply: the role checks every request passes, then each
//! command on the core (or, for reading the archive, off it).

use std::sync::Arc;

use tokio::sync::oneshot;

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
    let asked = Asked {
        id,
        who,
        client_name,
        state,
    };
    let body = match check_access(&request.command, role, who, state) {
        Ok(()) => reply_body(request.command, &asked).await,
        Err((code, message)) => Err(error(Some(id), code, message)),
    };
    match body {
        Ok(body) => ServerMessage::Reply { id, body },
        Err(refused) => refused,
    }
}

/// Who asked, and where: what every command's handling needs.
struct Asked<'a> {
    id: u64,
    who: &'a str,
    client_name: &'a str,
    state: &'a AppState,
}

impl Asked<'_> {
    /// The core's answer to `make`'s command, or the refusal a dropped
    /// reply means (the core drops a change's reply when its batch could
    /// not be committed, and every reply when it stops).
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ServerMessage> {
        self.state.core.ask(make).await.ok_or_else(|| self.gone())
    }

    /// A read's answer from the core; while the core waits on a silent
    /// database, `stand_in`'s answer if it has one, else a refusal that
    /// says why (`net::read`): a read is answered within a second.
    async fn read<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
        stand_in: impl FnOnce(&crate::core::StorageStatus) -> Option<T>,
    ) -> Result<T, ServerMessage> {
        match crate::net::read(self.state, make).await {
            crate::net::Read::Answer(answer) => Ok(answer),
            crate::net::Read::Stuck(waited) => stand_in(&self.state.storage).ok_or_else(|| {
                self.refuse(
                    ErrorCode::StorageUnavailable,
                    format!(
                        "storage_unavailable: the master's state database has not answered \
                         for {:.1} s (a slow server, or a network partition); try again, or \
                         ask another master (`--server A,B`)",
                        waited.as_secs_f64()
                    ),
                )
            }),
            crate::net::Read::Gone => Err(self.gone()),
        }
    }

    /// The refusal a dropped reply means.
    fn gone(&self) -> ServerMessage {
        if self.state.storage.is_failing() {
            storage_unavailable(self.id, self.state)
        } else {
            error(
                Some(self.id),
                ErrorCode::Internal,
                "master is shutting down".into(),
            )
        }
    }

    fn refuse(&self, code: ErrorCode, message: String) -> ServerMessage {
        error(Some(self.id), code, message)
    }
}

/// The checks every request passes before its command runs: the role,
/// a named token not revoked since, the store able to commit a change, and
/// token management kept to the master's own admin token.
fn check_access(
    command: &ClientCommand,
    role: Role,
    who: &str,
    state: &AppState,
) -> Result<(), (ErrorCode, String)> {
    if command.needs_admin() && role != Role::Admin {
        return Err((
            ErrorCode::Forbidden,
            "this request needs the admin token".into(),
        ));
    }
    if command.needs_admin() && who != MASTER_ADMIN && !state.tokens.has_name(who) {
        return Err((
            ErrorCode::Unauthorized,
            format!("unauthorized: the token `{who}` was revoked"),
        ));
    }
    if command.changes_state() && state.storage.is_failing() {
        return Err((ErrorCode::StorageUnavailable, state.storage.refusal()));
    }
    if command.needs_master_admin() && who != MASTER_ADMIN {
        return Err((
            ErrorCode::Forbidden,
            "only the master's own admin token (--admin-token) manages named tokens".into(),
        ));
    }
    Ok(())
}

/// Runs one command: its reply body, or the error message that refuses it.
async fn reply_body(command: ClientCommand, asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let (id, who) = (asked.id, asked.who.to_string());
    Ok(match command {
        ClientCommand::Hello { .. } => {
            return Err(asked.refuse(
                ErrorCode::BadRequest,
                "already said hello on this connection".into(),
            ))
        }
        ClientCommand::Subscribe { .. } => ReplyBody::Subscribed,
        ClientCommand::Status => ReplyBody::Status(
            asked
                .read(|reply| Command::Status { reply }, |s| s.stand_in_status())
                .await?,
        ),
        ClientCommand::Results { job_ids, archived } => results(job_ids, archived, asked).await?,
        ClientCommand::Submit {
            yaml,
            filename,
            fresh,
        } => submit(yaml, filename, fresh, asked).await?,
        ClientCommand::Cancel { job_id } => {
            let job = job_id.clone();
            asked
                .ask(|reply| Command::Cancel {
                    job_id: job,
                    by: who,
                    reply,
                })
                .await?
                .map_err(|e| command_error(id, e))?;
            ReplyBody::Cancelled { job_id }
        }
        ClientCommand::Retry { job_id } => {
            let job = job_id.clone();
            asked
                .ask(|reply| Command::Retry {
                    job_id: job,
                    by: who,
                    reply,
                })
                .await?
                .map_err(|e| command_error(id, e))?;
            ReplyBody::Retried { job_id }
        }
        ClientCommand::SubmitModel { model } => {
            if let Err(message) = model.check_upload() {
                info!(model = %model.name, "model refused: {message}");
                return Err(asked.refuse(ErrorCode::InvalidWorkload, message));
            }
            let name = model.name.clone();
            let extract_job = asked
                .ask(|reply| Command::SubmitModel {
                    submission: model,
                    reply,
                })
                .await?
                .map_err(|e| model_error(id, e))?;
            ReplyBody::ModelSubmitted { name, extract_job }
        }
        ClientCommand::Models { name } => {
            let models = asked
                .read(|reply| Command::Models { name, reply }, |_| None)
                .await?
                .map_err(|e| model_error(id, e))?;
            ReplyBody::Models { models }
        }
        ClientCommand::StopModel { name } => {
            let run = name.clone();
            asked
                .ask(|reply| Command::StopModel { name: run, reply })
                .await?
                .map_err(|e| model_error(id, e))?;
            ReplyBody::ModelStopping { name }
        }
        ClientCommand::CreateToken { name } => {
            let token_name = name.clone();
            let token = asked
                .ask(|reply| Command::CreateToken {
                    name: token_name,
                    reply,
                })
                .await?
                .map_err(|e| token_error(id, e))?;
            ReplyBody::TokenCreated {
                name,
                token: SecretText(token),
            }
        }
        ClientCommand::RevokeToken { name } => {
            let token_name = name.clone();
            asked
                .ask(|reply| Command::RevokeToken {
                    name: token_name,
                    reply,
                })
                .await?
                .map_err(|e| token_error(id, e))?;
            ReplyBody::TokenRevoked { name }
        }
        ClientCommand::Import { workloads, keys } => {
            let report = asked
                .ask(|reply| Command::Import {
                    workloads,
                    keys,
                    reply,
                })
                .await?
                .map_err(|e| asked.refuse(ErrorCode::BadRequest, format!("import refused: {e}")))?;
            ReplyBody::Imported(report)
        }
        ClientCommand::ListTokens => ReplyBody::Tokens {
            tokens: asked
                .read(|reply| Command::ListTokens { reply }, |_| None)
                .await?,
        },
        ClientCommand::ModelArtifact { name, artifact } => {
            let run = name.clone();
            let files = asked
                .ask(|reply| Command::ModelArtifact {
                    name: run,
                    artifact,
                    reply,
                })
                .await?
                .map_err(|message| asked.refuse(ErrorCode::NotFound, message))?;
            ReplyBody::Artifact {
                name,
                artifact,
                files,
            }
        }
        ClientCommand::Shutdown => {
            // `serve` stops accepting and tells every connection, this one
            // included, only after this task has sent the reply: the shutdown
            // notice reaches us through the same select loop.
            warn!(client = %asked.client_name, "shutdown requested by an admin client");
            asked.state.stop.notify_one();
            ReplyBody::ShuttingDown
        }
    })
}

/// `results`: the jobs the core holds, and with `archived` and no ids,
/// every archived one too, read here through a read-only connection of its
/// own, not on the core thread (which would dispatch nothing while it read
/// the whole archive).
async fn results(
    job_ids: Option<Vec<String>>,
    archived: bool,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let whole_archive = archived && job_ids.is_none();
    let jobs = asked
        .read(|reply| Command::Results { job_ids, reply }, |_| None)
        .await?;
    if !whole_archive {
        return Ok(ReplyBody::Results {
            jobs: sorted_copies(jobs),
        });
    }
    match with_archived(&asked.state.config.state, jobs).await {
        Ok(jobs) => Ok(ReplyBody::Results { jobs }),
        Err(e) => Err(asked.refuse(
            ErrorCode::Internal,
            format!("cannot read the archived jobs: {e}"),
        )),
    }
}

/// `submit`: the workload file parsed off the async threads (a large file
/// takes a while), held to the master's limits, then queued by the core.
async fn submit(
    yaml: String,
    filename: Option<String>,
    fresh: bool,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let filename = filename.unwrap_or_else(|| "upload.yaml".into());
    if yaml.len() > MAX_WORKLOAD_FILE_BYTES {
        return Err(asked.refuse(
            ErrorCode::TooLarge,
            format!(
                "{filename}: {} bytes is over the {MAX_WORKLOAD_FILE_BYTES}-byte limit for a workload file",
                yaml.len()
            ),
        ));
    }
    let name = filename.clone();
    let workloads =
        match tokio::task::spawn_blocking(move || parse_workload_file(&yaml, &name)).await {
            Ok(Ok(workloads)) => workloads,
            Ok(Err(errors)) => {
                info!(file = %filename, "submission refused: invalid workload file");
                return Err(asked.refuse(ErrorCode::InvalidWorkload, errors.to_string()));
            }
            Err(e) => return Err(asked.refuse(ErrorCode::Internal, format!("parser crashed: {e}"))),
        };
    let max = asked.state.config.max_workloads_per_upload;
    if workloads.len() > max {
        info!(file = %filename, count = workloads.len(), max, "submission refused: too many workloads");
        return Err(asked.refuse(
            ErrorCode::TooLarge,
            format!(
                "{filename}: {} workloads is over this master's limit of {max} per upload \
                 (serve --max-workloads-per-upload); split the file",
                workloads.len()
            ),
        ));
    }
    let cache = if fresh {
        CachePolicy::Bypass
    } else {
        CachePolicy::Use
    };
    let by = Some(asked.who.to_string());
    let report = asked
        .ask(|reply| Command::Submit {
            workloads,
            cache,
            by,
            reply,
        })
        .await?;
    Ok(ReplyBody::Submitted(report))
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
