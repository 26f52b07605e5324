//! A worker connection's slots: one scheduler session per job the worker
//! may hold at once (`register`'s `slots`), and which message goes to which.
//!
//! Why sessions and not a count on one session: the scheduler's rule "one
//! job per session" (ARCHITECTURE.md, invariant 1) stays true per slot, and
//! leases, recycling and the late-result rule need no change. The worker
//! does not name its slots: every message it sends names its job, except
//! `request_job`, which goes to a slot that neither holds a job nor has
//! asked for one. The connection learns which slot holds which job from the
//! `assign`s and `cancel`s the core sends it.
//!
//! With one slot, every message goes to the one session, exactly as before
//! slots existed (a `request_job` while holding a job abandons it).

use tokio::time::Instant;
use tunefleet_shared::protocol::{JobId, MasterMessage};

use crate::core::WorkerInput;
use crate::scheduler::SessionId;

pub(super) struct Slots {
    slots: Vec<Slot>,
}

struct Slot {
    session: SessionId,
    /// The job the core last assigned to this slot and has not taken back.
    job: Option<JobId>,
    /// A `request_job` went to this slot and no `assign` answered it yet.
    asked: bool,
    /// The latest progress report not yet forwarded, and when the next may go.
    held_progress: Option<WorkerInput>,
    next_progress: Instant,
}

impl Slots {
    /// `sessions` in the order the core registered them (never empty).
    pub(super) fn new(sessions: Vec<SessionId>, now: Instant) -> Slots {
        Slots {
            slots: sessions
                .into_iter()
                .map(|session| Slot {
                    session,
                    job: None,
                    asked: false,
                    held_progress: None,
                    next_progress: now,
                })
                .collect(),
        }
    }

    /// The first slot's session: the one the worker is told and logs name.
    pub(super) fn first(&self) -> SessionId {
        self.slots
            .first()
            .map_or(SessionId::default(), |s| s.session)
    }

    pub(super) fn sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.slots.iter().map(|s| s.session)
    }

    /// The session `input` goes to; `None` for a `request_job` with every
    /// slot busy or already asking (harmless, as a repeated one is with one
    /// slot). A report goes to the slot holding its job, or to the first
    /// (a result from an earlier connection, or a job not ours: the
    /// scheduler decides).
    pub(super) fn route(&mut self, input: &WorkerInput) -> Option<SessionId> {
        let job_id = match input {
            WorkerInput::RequestJob => {
                let single = self.slots.len() == 1;
                let slot = self
                    .slots
                    .iter_mut()
                    .find(|s| single || (s.job.is_none() && !s.asked))?;
                slot.asked = true;
                return Some(slot.session);
            }
            WorkerInput::Progress(report) => &report.job_id,
            WorkerInput::Result { job_id, .. } | WorkerInput::Failed { job_id, .. } => job_id,
        };
        let holding = self
            .slots
            .iter_mut()
            .position(|s| s.job.as_ref() == Some(job_id))
            .unwrap_or(0);
        let slot = &mut self.slots[holding];
        if !matches!(input, WorkerInput::Progress(_)) && slot.job.as_ref() == Some(job_id) {
            // The report ends the slot's job (accepted or not).
            slot.job = None;
        }
        Some(slot.session)
    }

    /// Notes what the core sent `session`: an `assign` fills its slot, a
    /// `cancel` empties it (the worker then asks again).
    pub(super) fn sent(&mut self, session: SessionId, msg: &MasterMessage) {
        let Some(slot) = self.slot_mut(session) else {
            return;
        };
        match msg {
            MasterMessage::Assign { job_id, .. } => {
                slot.job = Some(job_id.clone());
                slot.asked = false;
            }
            MasterMessage::Cancel { job_id, .. } if slot.job.as_ref() == Some(job_id) => {
                slot.job = None;
            }
            _ => {}
        }
    }

    /// Holds `progress` back if its slot sent one less than the interval
    /// ago (the latest wins); otherwise it may go now and the interval
    /// restarts. Returns it when it may go.
    pub(super) fn pace_progress(
        &mut self,
        session: SessionId,
        progress: WorkerInput,
        now: Instant,
        interval: std::time::Duration,
    ) -> Option<WorkerInput> {
        let Some(slot) = self.slot_mut(session) else {
            return Some(progress);
        };
        if now < slot.next_progress {
            slot.held_progress = Some(progress);
            return None;
        }
        slot.next_progress = now + interval;
        Some(progress)
    }

    /// A held-back progress report of `session`'s slot, to send before its
    /// next other message (keeping the order).
    pub(super) fn take_held(&mut self, session: SessionId) -> Option<WorkerInput> {
        self.slot_mut(session)?.held_progress.take()
    }

    fn slot_mut(&mut self, session: SessionId) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.session == session)
    }

    /// When the earliest held-back report may go, if any is held.
    pub(super) fn next_release(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter(|s| s.held_progress.is_some())
            .map(|s| s.next_progress)
            .min()
    }

    /// The held-back reports whose interval is over, with their sessions;
    /// their intervals restart.
    pub(super) fn release_due(
        &mut self,
        now: Instant,
        interval: std::time::Duration,
    ) -> Vec<(SessionId, WorkerInput)> {
        let mut due = Vec::new();
        for slot in &mut self.slots {
            if slot.next_progress <= now {
                if let Some(progress) = slot.held_progress.take() {
                    slot.next_progress = now + interval;
                    due.push((slot.session, progress));
                }
            }
        }
        due
    }
}

#[cfg(test)]
mod tests;
