//! After each command: the scheduler's outputs become events, trace lines,
//! dirty rows and sends (`collect`); after each batch, one commit, then the
//! sends, the events and the replies, in that order (`flush`).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{debug, error, warn};
use tunefleet_shared::protocol::{
    FleetEvent, JobChangeOf, JobId, JobProgress, JobView, MasterMessage, Millis, WorkerChange,
    WorkerView,
};

use super::{now_ms, Batch, Core, EventText, Outbound, Published};
use crate::scheduler::{Output, SessionId};
use crate::store::TraceJob;

/// `FleetEvent::WorkerJoined`/`WorkerUpdated` around a serialised view
/// (tested against the enum in `core/tests.rs`).
pub(super) fn worker_event_json(kind: &str, worker: &str) -> String {
    // Pushed, not `format!`ed: one allocation of the right size.
    let mut json = String::with_capacity(worker.len() + kind.len() + 24);
    json.push_str(r#"{"kind":""#);
    json.push_str(kind);
    json.push_str(r#"","worker":"#);
    json.push_str(worker);
    json.push('}');
    json
}

/// A worker's view as JSON, for its events and for snapshots.
pub(super) fn worker_json(view: &WorkerView) -> Arc<str> {
    match serde_json::to_string(view) {
        Ok(json) => json.into(),
        Err(e) => {
            error!("cannot serialise a worker view: {e}");
            "{}".into()
        }
    }
}

/// The sessions and jobs already published for one event.
#[derive(Default)]
struct Seen {
    workers: HashSet<SessionId>,
    jobs: HashSet<JobId>,
}

/// An event serialised once: the same text goes to the trace (when
/// `traced`) and to every subscriber.
fn push_event(batch: &mut Batch, now: Millis, event: &FleetEvent, traced: bool) {
    let json = serde_json::to_string(event).unwrap_or_default();
    if traced {
        batch.trace.push((now, json.clone()));
    }
    batch.events.push(EventText::Same(json));
}

impl Core {
    /// One event's outputs become events, trace lines, dirty rows and sends.
    pub(super) fn collect(&mut self, out: Vec<Output>, batch: &mut Batch) {
        let now = now_ms();
        // Views are taken now, after the whole event, so one per session or
        // job is enough: a job submitted and assigned in one event would
        // otherwise be published twice, both times as assigned.
        let mut seen = Seen::default();
        for output in out {
            match output {
                Output::JobChanged(id) => self.publish_job_changed(id, now, &mut seen, batch),
                Output::JobProgressed(id) => self.publish_progress(id, now, batch),
                Output::WorkerJoined(session) => self.publish_worker_joined(session, now, batch),
                Output::WorkerChanged(session) => {
                    self.publish_worker_changed(session, &mut seen, batch)
                }
                Output::WorkerLeft { session, reason } => {
                    self.publish_worker_left(session, reason, now, batch)
                }
                Output::Send { session, msg } => self.queue_send(session, msg, batch),
            }
        }
    }

    /// A job changed: published once per event, its row marked dirty and its
    /// lifecycle traced.
    fn publish_job_changed(&mut self, id: JobId, now: Millis, seen: &mut Seen, batch: &mut Batch) {
        let Some(job) = self.scheduler.job(&id) else {
            return;
        };
        if !seen.jobs.insert(job.id().clone()) {
            return;
        }
        // The whole view for subscribers that do not have the
        // job (or asked for whole views), a delta for the others,
        // the lifecycle for the trace (the row holds the rest);
        // none clones the view.
        let event = if self.known_jobs.contains(job.id()) {
            EventText::Change {
                full: self
                    .whole_views_wanted()
                    .then(|| job_updated_event(&job.view)),
                delta: job_changed_event(&job.view),
            }
        } else {
            self.known_jobs.insert(job.id().clone());
            EventText::Same(job_updated_event(&job.view))
        };
        batch.events.push(event);
        batch.trace.push((now, job_trace_line(job)));
        batch.dirty.push(id);
    }

    /// Only published: a progress report changes nothing a restart keeps.
    fn publish_progress(&mut self, id: JobId, now: Millis, batch: &mut Batch) {
        let Some(job) = self.scheduler.job(&id) else {
            return;
        };
        let v = &job.view;
        let event = FleetEvent::JobProgress {
            progress: JobProgress {
                job_id: id,
                trials_done: v.trials_done,
                trials_total: v.trials_total,
                best_latency_s: v.best_latency_s,
                updated_at: v.updated_at,
            },
        };
        push_event(batch, now, &event, false);
    }

    /// A worker joined: counted, its view kept for snapshots, published and
    /// traced.
    fn publish_worker_joined(&mut self, session: SessionId, now: Millis, batch: &mut Batch) {
        let Some(view) = self.scheduler.worker(session) else {
            return;
        };
        self.counters.worker_joins += 1;
        let worker = worker_json(view);
        self.worker_json
            .insert(view.session.clone(), worker.clone());
        let json = worker_event_json("worker_joined", &worker);
        batch.trace.push((now, json.clone()));
        batch.events.push(EventText::Same(json));
    }

    /// A worker changed: published once per event, not traced.
    fn publish_worker_changed(&mut self, session: SessionId, seen: &mut Seen, batch: &mut Batch) {
        let Some(view) = self.scheduler.worker(session) else {
            return;
        };
        if !seen.workers.insert(session) {
            return;
        }
        // Whole for subscribers without deltas (and kept for
        // snapshots); the rest get the job and the count (a
        // worker's `worker_joined` is always published before
        // its first change). Without such a subscriber the
        // whole view waits for the next snapshot: a busy
        // worker changes twice per job.
        let full = if self.whole_views_wanted() {
            let worker = worker_json(view);
            self.worker_json
                .insert(view.session.clone(), worker.clone());
            // Fresh: the next snapshot need not write it again.
            self.stale_worker_json.remove(&session);
            Some(worker_event_json("worker_updated", &worker))
        } else {
            self.stale_worker_json.insert(session);
            None
        };
        let change = FleetEvent::WorkerChanged {
            change: WorkerChange::of(view),
        };
        batch.events.push(EventText::Change {
            full,
            delta: serde_json::to_string(&change).unwrap_or_default(),
        });
    }

    /// A worker left: counted, forgotten, published and traced.
    fn publish_worker_left(
        &mut self,
        session: SessionId,
        reason: String,
        now: Millis,
        batch: &mut Batch,
    ) {
        self.counters.worker_leaves += 1;
        self.sessions.remove(&session);
        self.stale_worker_json.remove(&session);
        self.worker_json
            .remove(&crate::scheduler::session_label(session));
        let event = FleetEvent::WorkerLeft {
            session: crate::scheduler::session_label(session),
            reason,
        };
        push_event(batch, now, &event, true);
    }

    /// A message for a worker, sent after the commit; an assignment is
    /// counted and carries the fleet's cost model where it has one.
    fn queue_send(&mut self, session: SessionId, mut msg: MasterMessage, batch: &mut Batch) {
        if matches!(msg, MasterMessage::Assign { .. }) {
            self.counters.assignments += 1;
            self.share_cost_model(session, &mut msg);
        }
        batch.sends.push((session, Outbound::Msg(msg)));
    }

    /// Whether a change must also be written whole: some subscriber did not
    /// ask for deltas.
    fn whole_views_wanted(&self) -> bool {
        self.whole_view_subscribers.load(Ordering::Relaxed) > 0
    }

    pub(super) fn flush(&mut self, mut batch: Batch) {
        match self.commit(&mut batch) {
            Ok(()) => self.deliver(batch),
            Err(e) => self.batch_failed(batch, e),
        }
    }

    /// The batch's rows in one transaction (nothing when it changed nothing).
    /// A failure leaves the store as it was before the batch.
    pub(super) fn commit(&mut self, batch: &mut Batch) -> Result<(), crate::store::StoreError> {
        batch.dirty.sort();
        batch.dirty.dedup();
        batch.dirty_models.sort();
        batch.dirty_models.dedup();
        let now = now_ms();
        for name in std::mem::take(&mut batch.dirty_models) {
            if let Some(run) = self.models.get(&name) {
                let event = FleetEvent::ModelUpdated {
                    model: Box::new(run.view()),
                };
                let json = serde_json::to_string(&event).unwrap_or_default();
                batch.trace.push((now, json.clone()));
                batch.events.push(EventText::Same(json));
            }
            batch.models_written.push(name);
        }
        if batch.dirty.is_empty()
            && batch.trace.is_empty()
            && batch.artifacts.is_empty()
            && batch.meta.is_empty()
            && !self.store.has_pending_cost_models()
        {
            return Ok(());
        }
        let jobs: Vec<_> = batch
            .dirty
            .iter()
            .filter_map(|id| self.scheduler.job(id))
            .collect();
        let models: Vec<_> = batch
            .models_written
            .iter()
            .filter_map(|name| self.models.get(name))
            .collect();
        self.store.commit_with_meta(
            jobs.iter().copied(),
            models.iter().copied(),
            &batch.artifacts,
            &batch.trace,
            &batch.meta,
        )?;
        self.counters.commits += 1;
        Ok(())
    }

    /// After the commit: worker messages, then events, then replies and reads.
    pub(super) fn deliver(&mut self, batch: Batch) {
        // Workers first: an assignment must not queue behind a fan-out.
        for (session, msg) in batch.sends {
            match self.sessions.get(&session) {
                Some(tx) => {
                    let _ = tx.send((session, msg));
                }
                None => debug!(%session, "message for a session that is gone"),
            }
        }
        self.counters.events += batch.events.len() as u64;
        for event in batch.events {
            self.seq += 1;
            let seq = self.seq;
            let published = match event {
                EventText::Same(event) => Published {
                    seq,
                    json: Some(event_frame(seq, &event).into()),
                    delta: None,
                },
                EventText::Change { full, delta } => Published {
                    seq,
                    json: full.map(|full| event_frame(seq, &full).into()),
                    delta: Some(event_frame(seq, &delta).into()),
                },
            };
            let _ = self.events.send(Arc::new(published));
        }
        for reply in batch.replies {
            reply();
        }
        for read in batch.reads {
            self.answer(read);
        }
    }
}

/// `ServerMessage::Event { seq, event }` around a serialised event (same
/// shape; tested in `core/tests.rs`).
pub(super) fn event_frame(seq: u64, event: &str) -> String {
    let mut json = String::with_capacity(event.len() + 48);
    let _ = write!(json, r#"{{"type":"event","seq":{seq},"event":"#);
    json.push_str(event);
    json.push('}');
    json
}

/// `FleetEvent::JobChanged` as JSON, written from the borrowed view into one
/// buffer (as [`job_updated_event`]).
pub(super) fn job_changed_event(view: &JobView) -> String {
    job_event_json(
        br#"{"kind":"job_changed","change":"#,
        &JobChangeOf::new(view),
        EVENT_CAPACITY,
        &view.job_id,
    )
}

/// `FleetEvent::JobUpdated` as JSON, serialised from the borrowed view (the
/// event type owns a boxed copy; building one per change was a clone of
/// every job's records and workload).
///
/// Written straight into one buffer sized for a typical view: growing a
/// string from empty and then copying it into the envelope was most of the
/// ~9% of the core's time that went into formatting events.
pub(super) fn job_updated_event(view: &JobView) -> String {
    job_event_json(JOB_UPDATED, view, EVENT_CAPACITY, &view.job_id)
}

/// A job's event is ~0.3–1.5 KB; the envelope adds a few dozen bytes.
pub(super) const EVENT_CAPACITY: usize = 2048;

/// A job's trace line, `{"kind":"job_updated","job":TraceJob}`, written into
/// one buffer (not serialised, then copied into its envelope).
pub(super) fn job_trace_line(job: &crate::scheduler::Job) -> String {
    job_event_json(
        JOB_UPDATED,
        &TraceJob::of(job),
        TRACE_LINE_CAPACITY,
        job.id(),
    )
}

const JOB_UPDATED: &[u8] = br#"{"kind":"job_updated","job":"#;

/// `HEAD` + `JOB` + `}`, `JOB` written straight into the one buffer: the
/// event's (a view, or a change) and the trace's (a lifecycle) alike.
fn job_event_json(
    head: &[u8],
    job: &impl serde::Serialize,
    capacity: usize,
    job_id: &str,
) -> String {
    let mut text = Vec::with_capacity(capacity);
    text.extend_from_slice(head);
    if let Err(e) = serde_json::to_writer(&mut text, job) {
        warn!(job = %job_id, "job not serialisable: {e}");
    }
    text.push(b'}');
    String::from_utf8(text).unwrap_or_default()
}

/// A trace line is ~100–250 bytes (ids, names, state, an error's text).
pub(super) const TRACE_LINE_CAPACITY: usize = 256;
