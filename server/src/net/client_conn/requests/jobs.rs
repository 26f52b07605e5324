//! The job commands: `submit` (parsed here, off the core), `results` (the
//! archive read here too), `cancel` and `retry`, and `import`.

use std::sync::Arc;

use tracing::info;
use tunefleet_shared::import::{ImportedWorkload, WorkloadKey};
use tunefleet_shared::protocol::{ErrorCode, JobView, ReplyBody, ServerMessage};
use tunefleet_shared::workload::{parse_workload_file, MAX_WORKLOAD_FILE_BYTES};

use super::Asked;
use crate::core::{Change, JobAction, Read};
use crate::scheduler::{CachePolicy, CommandError};

/// `submit`: the workload file parsed off the async threads (a large file
/// takes a while), held to the master's limits, then queued by the core.
pub(super) async fn submit(
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
        .ask(|reply| Change::Submit {
            workloads,
            cache,
            by,
            reply,
        })
        .await?;
    Ok(ReplyBody::Submitted(report))
}

/// `results`: the jobs the core holds, and with `archived` and no ids,
/// every archived one too, read here through a read-only connection of its
/// own, not on the core thread (which would dispatch nothing while it read
/// the whole archive).
pub(super) async fn results(
    job_ids: Option<Vec<String>>,
    archived: bool,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let whole_archive = archived && job_ids.is_none();
    let jobs = asked
        .read(|reply| Read::Results { job_ids, reply }, |_| None)
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

/// `cancel` or `retry`: the reply names the job.
pub(super) async fn act(
    job_id: String,
    action: JobAction,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let (job, by) = (job_id.clone(), asked.who.to_string());
    asked
        .ask(|reply| Change::JobAction {
            job_id: job,
            action,
            by,
            reply,
        })
        .await?
        .map_err(|e| command_error(asked, e))?;
    Ok(match action {
        JobAction::Cancel => ReplyBody::Cancelled { job_id },
        JobAction::Retry => ReplyBody::Retried { job_id },
    })
}

/// `import`: records checked and kept by the core; a refusal names the
/// entry that is not valid.
pub(super) async fn import(
    workloads: Vec<ImportedWorkload>,
    keys: Vec<WorkloadKey>,
    asked: &Asked<'_>,
) -> Result<ReplyBody, ServerMessage> {
    let report = asked
        .ask(|reply| Change::Import {
            workloads,
            keys,
            reply,
        })
        .await?
        .map_err(|e| asked.refuse(ErrorCode::BadRequest, format!("import refused: {e}")))?;
    Ok(ReplyBody::Imported(report))
}

fn command_error(asked: &Asked<'_>, e: CommandError) -> ServerMessage {
    let code = match e {
        CommandError::UnknownJob(_) => ErrorCode::NotFound,
        CommandError::InvalidState { .. } => ErrorCode::InvalidState,
    };
    asked.refuse(code, e.to_string())
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
