//! The model-run commands: submit (the upload checked here first), list,
//! stop, and a run's artifacts (its database, its compiled library).

use tracing::info;
use tunefleet_shared::model::{ModelArtifactKind, ModelSubmission};
use tunefleet_shared::protocol::{ErrorCode, ReplyBody, ServerMessage};

use super::Asked;
use crate::core::{Change, Read};
use crate::models::ModelError;

pub(super) async fn submit(
    model: Box<ModelSubmission>,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    if let Err(message) = model.check_upload() {
        info!(model = %model.name, "model refused: {message}");
        return Err(asked.refuse(ErrorCode::InvalidWorkload, message));
    }
    let name = model.name.clone();
    let extract_job = asked
        .ask(|reply| Change::SubmitModel {
            submission: model,
            reply,
        })
        .await?
        .map_err(|e| model_error(asked, e))?;
    Ok(ReplyBody::ModelSubmitted { name, extract_job })
}

pub(super) async fn list(
    name: Option<String>,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let models = asked
        .read(|reply| Read::Models { name, reply }, |_| None)
        .await?
        .map_err(|e| model_error(asked, e))?;
    Ok(ReplyBody::Models { models })
}

pub(super) async fn stop(name: String, asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let run = name.clone();
    asked
        .ask(|reply| Change::StopModel { name: run, reply })
        .await?
        .map_err(|e| model_error(asked, e))?;
    Ok(ReplyBody::ModelStopping { name })
}

/// A run's artifact. Asked, not read (`Asked::read`): a library is loaded
/// from the store, which may itself take longer than a read waits.
pub(super) async fn artifact(
    name: String,
    artifact: ModelArtifactKind,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let run = name.clone();
    let files = asked
        .ask(|reply| Read::ModelArtifact {
            name: run,
            artifact,
            reply,
        })
        .await?
        .map_err(|message| asked.refuse(ErrorCode::NotFound, message))?;
    Ok(ReplyBody::Artifact {
        name,
        artifact,
        files,
    })
}

fn model_error(asked: &Asked<'_>, e: ModelError) -> ServerMessage {
    let code = match e {
        ModelError::Unknown(_) => ErrorCode::NotFound,
        ModelError::Finished { .. } | ModelError::Exists(_) => ErrorCode::InvalidState,
        ModelError::BadName(_) | ModelError::BadSettings(_) => ErrorCode::BadRequest,
    };
    asked.refuse(code, e.to_string())
}
