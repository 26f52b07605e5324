//! An admin's `cancel` and `retry` of one job: the job brought back from
//! the archive if it is there, the scheduler's rule applied, and who did it
//! noted in the job's log of actions.

use tokio::sync::oneshot;
use tunefleet_shared::protocol::{JobId, Millis};

use super::{Batch, Core, JobAction};
use crate::scheduler::{CommandError, Output};

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn job_action(
        &mut self,
        job_id: JobId,
        action: JobAction,
        by: &str,
        reply: oneshot::Sender<Result<(), CommandError>>,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        self.bring_back(std::iter::once(job_id.clone()), batch);
        let r = match action {
            JobAction::Cancel => self.scheduler.cancel(&job_id, now, out),
            JobAction::Retry => self.scheduler.retry(&job_id, now, out),
        };
        if r.is_ok() {
            self.scheduler.note_action(&job_id, action.name(), by, now);
        }
        batch.reply(reply, r);
    }
}
