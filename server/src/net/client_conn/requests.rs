//! One request, one reply: the role checks every request passes, then the
//! command's handler, one per command, grouped by concern: `jobs.rs`
//! (submit, results, cancel, retry, import), `models.rs`, `tokens.rs`; the
//! status and shutdown here.

use tokio::sync::oneshot;

use tracing::warn;
use tunefleet_shared::protocol::{
    ClientCommand, ClientRequest, ErrorCode, ReplyBody, Role, ServerMessage,
};

use super::error;
use crate::core::{Command, JobAction, Read};
use crate::net::AppState;
use crate::tokens::MASTER_ADMIN;

mod jobs;
mod models;
mod tokens;

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
    async fn ask<T, C: Into<Command>>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> C,
    ) -> Result<T, ServerMessage> {
        self.state.core.ask(make).await.ok_or_else(|| self.gone())
    }

    /// A read's answer from the core; while the core waits on a silent
    /// database, `stand_in`'s answer if it has one, else a refusal that
    /// says why (`net::read`): a read is answered within a second.
    async fn read<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Read,
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
    match command {
        ClientCommand::Hello { .. } => Err(asked.refuse(
            ErrorCode::BadRequest,
            "already said hello on this connection".into(),
        )),
        // The connection sends the snapshot after this reply.
        ClientCommand::Subscribe { .. } => Ok(ReplyBody::Subscribed),
        ClientCommand::Status => status(asked).await,
        ClientCommand::Results { job_ids, archived } => {
            jobs::results(job_ids, archived, asked).await
        }
        ClientCommand::Submit {
            yaml,
            filename,
            fresh,
        } => jobs::submit(yaml, filename, fresh, asked).await,
        ClientCommand::Cancel { job_id } => jobs::act(job_id, JobAction::Cancel, asked).await,
        ClientCommand::Retry { job_id } => jobs::act(job_id, JobAction::Retry, asked).await,
        ClientCommand::Import { workloads, keys } => jobs::import(workloads, keys, asked).await,
        ClientCommand::SubmitModel { model } => models::submit(model, asked).await,
        ClientCommand::Models { name } => models::list(name, asked).await,
        ClientCommand::StopModel { name } => models::stop(name, asked).await,
        ClientCommand::ModelArtifact { name, artifact } => {
            models::artifact(name, artifact, asked).await
        }
        ClientCommand::CreateToken { name } => tokens::create(name, asked).await,
        ClientCommand::RevokeToken { name } => tokens::revoke(name, asked).await,
        ClientCommand::ListTokens => tokens::list(asked).await,
        ClientCommand::Shutdown => Ok(shutdown(asked)),
    }
}

/// `status`, answered from the stand-in while the core waits on its store.
async fn status(asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let report = asked
        .read(|reply| Read::Status { reply }, |s| s.stand_in_status())
        .await?;
    Ok(ReplyBody::Status(report))
}

/// `shutdown`: `serve` stops accepting and tells every connection, this one
/// included, only after this task has sent the reply: the shutdown notice
/// reaches it through the same select loop.
fn shutdown(asked: &Asked<'_>) -> ReplyBody {
    warn!(client = %asked.client_name, "shutdown requested by an admin client");
    asked.state.stop.notify_one();
    ReplyBody::ShuttingDown
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
