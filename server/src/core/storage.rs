//! A store that cannot commit: the batch is refused and rolled back, the
//! master serves reads from memory and refuses changes at once, and a probe
//! every second finds out when it can commit again.
//!
//! **Rollback is a reload.** A failed batch changed the scheduler, the model
//! runs, the tokens and the archive counts in memory before its commit. Rather
//! than undo each of those changes, the core reads its state back from the
//! store, which the failed transaction left as it was before the batch: the
//! same code as a start-up (`Loaded::read`), so memory after a failed batch is
//! what a restart would find. Like a restart, it ends every worker's session:
//! their sockets are closed (`STORAGE_UNAVAILABLE`), in-flight jobs go back
//! to the front of the queue without counting the attempt, and the workers
//! reconnect once the store commits again and re-send the results nobody
//! acknowledged. What the reload changed against what subscribers saw (jobs
//! requeued, workers gone) is held back and published only once the probe's
//! commit has stored it: nothing leaves before it is durable.
//!
//! Nothing is retried: a failed batch is never applied later, so a client
//! told "nothing was applied" can resubmit. While PostgreSQL cannot be read
//! either (its session is known lost: the reload would only wait for the
//! connection's timeouts), the reload waits for the probe; memory then still
//! shows the refused batch to reads (never acknowledged, and gone at the
//! reload).
//!
//! **Reads while the core waits.** A call on a database that went silent
//! waits for the connection's deadlines (seconds; `store/postgres/lead.rs`),
//! and the core thread with it. Reads must not: once the store's call has
//! lasted [`STAND_IN_AFTER`], the network layer answers `status` and
//! `/metrics` with the last figures the core left here between batches
//! (committed state, at most a second old), marked degraded, and `/healthz`
//! says 503. Changes still wait: one already sent to the core may yet be
//! committed, so it cannot be refused.
//!
//! **The lead lost.** A probe that finds another master leading the
//! PostgreSQL database (`StoreError::LeadLost`, which names it) ends the
//! core with [`CoreEnd::SteppedDown`]: `serve` closes the listener and waits
//! as that master's standby, so a leader that comes back after a partition
//! never leaves the farm without a master. Any other error no probe can
//! mend stops the process (exit 70).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{error, info, warn};
use tunefleet_shared::protocol::{
    close_code, FleetEvent, JobCounts, Millis, StatusReport, StorageHealth, StorageProblem,
};

use super::{now_ms, Batch, Core, EventText, Outbound};
use crate::cost_models::CostModels;
use crate::metrics::FleetMetrics;
use crate::models::ModelRuns;
use crate::scheduler::{Output, Scheduler, SchedulerConfig};
use crate::store::{CallClock, Store, StoreError};
use crate::tokens::{TokenBook, TokenRegistry, META_PREFIX};

/// How often a degraded store is tried again.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a store call may last before reads stop waiting for the core
/// (see the module docs): a commit of thousands of jobs takes a few hundred
/// ms; a database that went silent takes seconds to fail a call.
pub const STAND_IN_AFTER: Duration = Duration::from_millis(500);

/// How the core thread ended.
#[derive(Debug)]
pub enum CoreEnd {
    /// Shut down (a signal, an admin's `shutdown`), or every handle gone.
    Stopped,
    /// Another master leads the database now; the reason names it.
    SteppedDown(String),
}

/// What the network layer reads of the store's health, set by the core.
#[derive(Debug, Default)]
pub struct StorageStatus {
    failing: AtomicBool,
    problem: Mutex<Option<StorageProblem>>,
    /// The store's clock: whether the core is waiting on a call.
    calls: Arc<CallClock>,
    /// The last figures of committed state, for reads while the core waits.
    stand_in: Mutex<Option<StandIn>>,
}

#[derive(Debug)]
struct StandIn {
    status: StatusReport,
    metrics: FleetMetrics,
    /// The event sequence they are at, so an unchanged fleet is not counted again.
    seq: u64,
    at: Instant,
}

impl StorageStatus {
    pub(super) fn new(calls: Arc<CallClock>) -> StorageStatus {
        StorageStatus {
            calls,
            ..StorageStatus::default()
        }
    }

    /// How long the core has waited on its store, once that is longer than
    /// [`STAND_IN_AFTER`]: reads are then answered with the stand-in.
    pub fn waiting(&self) -> Option<Duration> {
        self.calls
            .running_for()
            .filter(|waited| *waited >= STAND_IN_AFTER)
    }

    /// Why the master cannot take changes now, if it cannot: its store fails
    /// commits, or has not answered a call for a while (`/healthz`).
    pub fn unhealthy(&self) -> Option<String> {
        if self.is_failing() {
            return Some(
                self.problem()
                    .map_or_else(|| "cannot commit its state".to_string(), |p| p.reason),
            );
        }
        self.waiting().map(waiting_reason)
    }

    /// `status` as the core last left it, marked degraded by the wait.
    pub fn stand_in_status(&self) -> Option<StatusReport> {
        let waited = self.waiting()?;
        let stand_in = self.stand_in.lock().ok()?;
        let mut status = stand_in.as_ref()?.status.clone();
        status.storage = StorageHealth::Degraded;
        status.storage_problem = Some(self.problem().unwrap_or(StorageProblem {
            reason: waiting_reason(waited),
            since: now_ms().before(waited.as_millis() as u64),
        }));
        Some(status)
    }

    /// `/metrics` as the core last left it, marked degraded by the wait.
    pub fn stand_in_metrics(&self) -> Option<FleetMetrics> {
        self.waiting()?;
        let stand_in = self.stand_in.lock().ok()?;
        let mut metrics = stand_in.as_ref()?.metrics.clone();
        metrics.storage_degraded = 1;
        Some(metrics)
    }

    /// Whether the stand-in is older than a second, or not at `seq`.
    fn stand_in_stale(&self, seq: u64) -> bool {
        self.stand_in.lock().is_ok_and(|s| {
            s.as_ref()
                .is_none_or(|s| s.seq != seq && s.at.elapsed() >= PROBE_EVERY)
        })
    }

    fn keep_stand_in(&self, status: StatusReport, metrics: FleetMetrics, seq: u64) {
        if let Ok(mut stand_in) = self.stand_in.lock() {
            *stand_in = Some(StandIn {
                status,
                metrics,
                seq,
                at: Instant::now(),
            });
        }
    }

    /// True while the store cannot commit: changes are refused at once.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    pub fn problem(&self) -> Option<StorageProblem> {
        self.problem.lock().ok().and_then(|p| p.clone())
    }

    /// The error a request that needs a commit gets while the store fails.
    pub fn refusal(&self) -> String {
        let reason = self.problem().map_or_else(
            || "the master cannot commit its state".to_string(),
            |p| p.reason,
        );
        format!(
            "storage_unavailable: {reason}; nothing of this request was applied. \
             The master answers reads and takes changes again as soon as it can commit \
             (`tunefleet status` shows the store's health); resubmitting then is safe"
        )
    }

    fn fail(&self, problem: StorageProblem) {
        if let Ok(mut p) = self.problem.lock() {
            *p = Some(problem);
        }
        self.failing.store(true, Ordering::Relaxed);
    }

    fn recover(&self) {
        self.failing.store(false, Ordering::Relaxed);
        if let Ok(mut p) = self.problem.lock() {
            *p = None;
        }
    }
}

/// What a stand-in answer says while the core waits on its store.
fn waiting_reason(waited: Duration) -> String {
    format!(
        "the state database has not answered for {:.1} s (a slow server, or a network \
         partition); this answer is the master's state as last committed, and changes wait \
         until the database answers or the call times out",
        waited.as_secs_f64()
    )
}

/// The core's side of an outage.
pub(super) struct Outage {
    started: Instant,
    next_probe: Instant,
    probes: u64,
    /// Memory still holds the refused batch: the store could not be read.
    reload_pending: bool,
    /// What the reload changed (requeued jobs, workers gone): committed and
    /// published by the probe that succeeds.
    held: Batch,
}

/// The state a master reads from its store: at start-up, and again after a
/// failed commit.
pub(super) struct Loaded {
    pub(super) scheduler: Scheduler,
    pub(super) models: ModelRuns,
    pub(super) cost_models: CostModels,
    pub(super) archived: JobCounts,
    pub(super) tokens: TokenBook,
    /// The jobs recovery requeued (in flight when the state was stored).
    pub(super) requeued: Vec<Output>,
}

impl Loaded {
    pub(super) fn read(
        store: &mut Store,
        config: SchedulerConfig,
        registry: TokenRegistry,
        now: Millis,
    ) -> Result<Loaded, StoreError> {
        let jobs = store.load_jobs()?;
        let models = ModelRuns::recover(store.load_models()?);
        let cost_models = CostModels::restore(store.load_cost_models()?);
        let mut requeued = Vec::new();
        let mut scheduler = Scheduler::recover(config, jobs, now, &mut requeued);
        let mut archived = JobCounts::default();
        for (state, n) in store.archived_counts()? {
            archived.count_archived(state, n as isize);
        }
        let tokens = TokenBook::load(store.load_meta(META_PREFIX)?, registry);
        let mut imports = store.load_meta(crate::scheduler::IMPORT_PREFIX)?;
        imports.extend(store.load_meta(crate::scheduler::KEY_PREFIX)?);
        for (key, reason) in scheduler.restore_imports(imports) {
            tracing::warn!(%key, "skipped an unreadable import row: {reason}");
        }
        Ok(Loaded {
            scheduler,
            models,
            cost_models,
            archived,
            tokens,
            requeued,
        })
    }
}

impl Core {
    /// The store refused `batch`'s commit: nothing of it is sent (its
    /// requests' replies are dropped, which the network layer answers with
    /// `storage_unavailable`), memory is rolled back, and the master is
    /// degraded until a probe commits.
    pub(super) fn batch_failed(&mut self, batch: Batch, e: StoreError) {
        self.counters.commits_failed += 1;
        self.store.forget_failed();
        if !e.is_transient() {
            return self.give_up(e);
        }
        let refused = batch.replies.len();
        let reads = batch.reads;
        if self.outage.is_none() {
            error!(
                refused,
                "cannot commit state, so nothing of this batch was applied; refusing changes \
                 (reads are answered) and trying again every {} s: {e}",
                PROBE_EVERY.as_secs()
            );
            self.storage.fail(StorageProblem {
                reason: format!("the {e}"),
                since: now_ms(),
            });
            // Subscribers (the dashboard) are told at once: nothing of the
            // state changed, so there is nothing to commit first.
            let mut told = Batch::default();
            told.events.push(self.storage_event());
            self.deliver(told);
            self.close_workers(&e);
        } else {
            warn!(refused, "cannot commit state yet: {e}");
        }
        let now = Instant::now();
        let outage = self.outage.get_or_insert_with(|| Outage {
            started: now,
            next_probe: now + PROBE_EVERY,
            probes: 0,
            reload_pending: true,
            held: Batch::default(),
        });
        outage.reload_pending = true;
        // A lost session would only wait for its timeouts: the probe's new
        // session reads the state back.
        if !self.store.session_lost() {
            self.try_reload();
        }
        for read in reads {
            self.answer(read);
        }
    }

    /// An error no probe can mend: another master took the lead (the core
    /// ends, and `serve` waits as its standby), or anything else (the
    /// process stops, exit 70, so that nothing unsaved is acknowledged).
    fn give_up(&mut self, e: StoreError) {
        error!("{e}");
        if let StoreError::LeadLost { .. } = e {
            self.storage.fail(StorageProblem {
                reason: format!("the {e}"),
                since: now_ms(),
            });
            self.close_workers(&e);
            self.ended = Some(super::CoreEnd::SteppedDown(e.to_string()));
            return;
        }
        error!("giving up: the master stops so that nothing unsaved is acknowledged");
        std::process::exit(70);
    }

    /// Between batches, at most once a second while the fleet changes: the
    /// figures reads get while the core waits on its store.
    pub(super) fn keep_stand_in(&mut self) {
        if self.storage.stand_in_stale(self.seq) {
            let (status, metrics) = (self.status(), self.metrics());
            self.storage.keep_stand_in(status, metrics, self.seq);
        }
    }

    /// Every worker's socket is closed: its session ends with the reload,
    /// and it re-sends what was not acknowledged once it is back.
    fn close_workers(&mut self, e: &StoreError) {
        let mut reason = format!("master cannot commit its state: {e}");
        // A close reason holds 123 bytes.
        if reason.len() > 120 {
            let mut cut = 120;
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
        }
        for (session, tx) in &self.sessions {
            let close = Outbound::Close {
                code: close_code::STORAGE_UNAVAILABLE,
                reason: reason.clone(),
            };
            let _ = tx.send((*session, close));
        }
    }

    /// Reads the state back from the store (see the module's comment); on
    /// failure, memory stays as it is until the next probe.
    fn try_reload(&mut self) -> bool {
        let config = self.scheduler.config().clone();
        let loaded = match Loaded::read(&mut self.store, config, self.tokens.registry(), now_ms()) {
            Ok(loaded) => loaded,
            Err(e) => {
                warn!("cannot read the state back yet (reads show the refused batch until it can): {e}");
                return false;
            }
        };
        let sessions: Vec<_> = self.sessions.keys().copied().collect();
        self.scheduler = loaded.scheduler;
        self.models = loaded.models;
        self.cost_models = loaded.cost_models;
        self.archived = loaded.archived;
        self.tokens = loaded.tokens;
        let scheduler = &self.scheduler;
        self.known_jobs.retain(|id| scheduler.job(id).is_some());
        self.snapshot_cache = Default::default();
        let mut out = loaded.requeued;
        out.extend(sessions.into_iter().map(|session| Output::WorkerLeft {
            session,
            reason: "the master's store failed: reconnect once it commits again".into(),
        }));
        let mut held = self
            .outage
            .as_mut()
            .map(|o| std::mem::take(&mut o.held))
            .unwrap_or_default();
        self.collect(out, &mut held);
        if let Some(outage) = self.outage.as_mut() {
            outage.held = held;
            outage.reload_pending = false;
        }
        true
    }

    /// On a tick while degraded: once a second, whether the store commits
    /// again (the reload's changes, and a `meta` row, are the probe).
    pub(super) fn probe_storage(&mut self) {
        let Some(outage) = self.outage.as_mut() else {
            return;
        };
        let now = Instant::now();
        if now < outage.next_probe {
            return;
        }
        outage.next_probe = now + PROBE_EVERY;
        outage.probes += 1;
        let reload = outage.reload_pending;
        if let Err(e) = self.store.probe() {
            if !e.is_transient() {
                self.give_up(e);
            }
            return;
        }
        if reload && !self.try_reload() {
            return;
        }
        let Some(outage) = self.outage.as_mut() else {
            return;
        };
        let mut held = std::mem::take(&mut outage.held);
        held.meta
            .push(("storage_probe_at".into(), Some(now_ms().to_string())));
        if let Err(e) = self.commit(&mut held) {
            self.store.forget_failed();
            held.meta.pop();
            if let Some(outage) = self.outage.as_mut() {
                outage.held = held;
            }
            tracing::debug!("the store still cannot commit: {e}");
            return;
        }
        if let Some(outage) = self.outage.take() {
            info!(
                after_ms = outage.started.elapsed().as_millis() as u64,
                probes = outage.probes,
                "the state database takes commits again; accepting work"
            );
        }
        self.storage.recover();
        held.events.push(self.storage_event());
        self.deliver(held);
    }

    /// `storage_changed` with the store's health now.
    fn storage_event(&self) -> EventText {
        let event = FleetEvent::StorageChanged {
            problem: self.storage.problem(),
        };
        EventText::Same(serde_json::to_string(&event).unwrap_or_default())
    }

    /// Whether the store is degraded (changes are refused in `apply`).
    pub(super) fn degraded(&self) -> bool {
        self.outage.is_some()
    }
}

#[cfg(test)]
mod tests;
