//! A worker's commands: joining (one session per slot) and what it reports.
//! A report is acknowledged only after the change it made is committed: its
//! `ack` is queued behind the batch's own outputs.

use tokio::sync::oneshot;
use tracing::{info, warn};
use tunefleet_shared::protocol::{MasterMessage, Millis, WorkerHello};

use super::{Batch, Core, Outbound, WorkerInput, WorkerTx};
use crate::scheduler::{JoinRefusal, LeaveKind, Output, Rejection, SessionId};

impl Core {
    pub(super) fn worker_join(
        &mut self,
        hello: &WorkerHello,
        tx: WorkerTx,
        reply: oneshot::Sender<Result<(Vec<SessionId>, usize), JoinRefusal>>,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        let mut joined = Vec::new();
        let mut result = Ok(0);
        // Every slot has the same target, so only the first can be refused.
        for _ in 0..hello.slot_count() {
            let session = self.next_session;
            self.next_session = self.next_session.next();
            result = self.scheduler.worker_joined(session, hello, now, out);
            if result.is_err() {
                break;
            }
            self.sessions.insert(session, tx.clone());
            joined.push(session);
        }
        match &result {
            Ok(matching) => {
                info!(session = %joined.first().copied().unwrap_or_default(), slots = joined.len(), name = %hello.name, target = %hello.target, matching, "worker joined");
                let plan = self.models.refill(now, &self.fleet());
                self.apply_plan(plan, now, out, batch);
            }
            Err(e) => warn!(name = %hello.name, "worker refused: {e}"),
        }
        batch.reply(reply, result.map(|m| (joined, m)));
    }

    /// A worker's socket ended (closed, failed, silent): its sessions end
    /// and the scheduler puts their jobs back at the front of the queue.
    pub(super) fn worker_leave(
        &mut self,
        session: SessionId,
        kind: LeaveKind,
        reason: &str,
        now: Millis,
        out: &mut Vec<Output>,
    ) {
        info!(%session, %reason, "worker left");
        self.scheduler.worker_left(session, kind, reason, now, out);
    }

    /// Applies one report or request. A result or failure is collected
    /// here, with its ack after the batch's outputs.
    pub(super) fn worker_input(
        &mut self,
        session: SessionId,
        input: WorkerInput,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        // A result or a failure names the job and lease it answers (and
        // gets an ack); a request or a progress report does not.
        let (answered, result) = match input {
            WorkerInput::RequestJob => {
                self.scheduler.request_job(session, now, out);
                (None, Ok(()))
            }
            WorkerInput::Progress(report) => {
                let r = self.scheduler.progress(session, &report, now, out);
                if let Err(e) = &r {
                    warn!(%session, "progress rejected: {e}");
                    self.push_send(batch, session, error_msg(e));
                }
                (None, Ok(()))
            }
            WorkerInput::Result {
                job_id,
                lease,
                mut result,
            } => {
                let library = self.take_library(&job_id, &mut result);
                let cost_model = self.take_cost_model(&job_id, &mut result, now);
                let r = self
                    .scheduler
                    .result(session, &job_id, lease, *result, now, out);
                if let (Ok(()), Some(artifact)) = (&r, library) {
                    batch.artifacts.push(artifact);
                }
                if let (Ok(()), Some((key, model))) = (&r, cost_model) {
                    self.offer_cost_model(&job_id, key, model);
                }
                (Some((job_id, lease)), r)
            }
            WorkerInput::Failed {
                job_id,
                lease,
                error,
            } => {
                let r = self
                    .scheduler
                    .job_failed(session, &job_id, lease, &error, now, out);
                (Some((job_id, lease)), r)
            }
        };
        if let Some((job_id, lease)) = answered {
            if let Err(e) = &result {
                warn!(%session, job = %job_id, %lease, "result rejected, not stored: {e}");
            }
            let ack = MasterMessage::Ack {
                job_id,
                lease,
                accepted: result.is_ok(),
                reason: result.err().map(|e| e.to_string()),
            };
            // The ack goes after the scheduler's own outputs so that it is
            // sent only once the change is committed.
            self.follow_models(out, now, batch);
            self.collect(std::mem::take(out), batch);
            self.push_send(batch, session, Outbound::Msg(ack));
        }
    }
}

fn error_msg(rejection: &Rejection) -> Outbound {
    use tunefleet_shared::protocol::ErrorCode;
    let code = match rejection {
        Rejection::UnknownJob(_) => ErrorCode::NotFound,
        Rejection::UnknownSession(_) | Rejection::NotAssigned { .. } => ErrorCode::NotAssigned,
        Rejection::AlreadyFinished { .. } | Rejection::Superseded { .. } => ErrorCode::InvalidState,
        Rejection::InvalidResult(_) => ErrorCode::BadRequest,
    };
    Outbound::Msg(MasterMessage::Error {
        code,
        message: rejection.to_string(),
    })
}
