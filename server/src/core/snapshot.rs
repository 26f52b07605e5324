//! Snapshots for subscribers: taken on the core as shared pointers, serialised
//! once off it, and kept while the fleet does not change.

use std::sync::Arc;

use tracing::error;
use tunefleet_shared::fleet::job_order;
use tunefleet_shared::model::ModelView;
use tunefleet_shared::protocol::{JobCounts, JobView, StorageProblem, WorkerView};

use super::{worker_json, Core};

/// See `Core::snapshot_cache`.
#[derive(Default)]
pub(super) struct SnapshotCache {
    /// Kept for as long as the seq is current, once serialised and small.
    held: Option<Arc<SharedSnapshot>>,
    shared: std::sync::Weak<SharedSnapshot>,
}

/// Snapshots up to this size are kept between subscribes; a larger one
/// (a farm with many finished jobs) would cost more memory than it saves.
pub(super) const KEEP_SNAPSHOT_BYTES: usize = 8 << 20;

impl SnapshotCache {
    pub(super) fn get(&mut self, seq: u64) -> Option<Arc<SharedSnapshot>> {
        self.trim();
        let shared = self
            .held
            .clone()
            .or_else(|| self.shared.upgrade())
            .filter(|s| s.seq == seq);
        if shared.is_none() {
            self.held = None;
        }
        shared
    }

    pub(super) fn put(&mut self, shared: &Arc<SharedSnapshot>) {
        self.held = Some(shared.clone());
        self.shared = Arc::downgrade(shared);
    }

    /// Lets go of a snapshot that turned out large once it is serialised
    /// (called on every tick too, so it is not kept for long).
    pub(super) fn trim(&mut self) {
        let large = |s: &Arc<SharedSnapshot>| {
            s.message
                .get()
                .is_some_and(|m| m.len() > KEEP_SNAPSHOT_BYTES)
        };
        if self.held.as_ref().is_some_and(large) {
            self.held = None;
        }
    }
}

/// A `snapshot` message for every subscriber that asked at `seq`. The
/// fleet is serialised once, by the first connection that sends it (off
/// the core thread), and then dropped; the text is shared.
pub struct SharedSnapshot {
    pub seq: u64,
    fleet: std::sync::Mutex<Option<SnapshotParts>>,
    message: tokio::sync::OnceCell<tokio_tungstenite::tungstenite::Utf8Bytes>,
}

impl SharedSnapshot {
    pub(super) fn new(seq: u64, fleet: SnapshotParts) -> Self {
        SharedSnapshot {
            seq,
            fleet: std::sync::Mutex::new(Some(fleet)),
            message: tokio::sync::OnceCell::new(),
        }
    }

    /// The `ServerMessage::Snapshot` text.
    pub async fn message(&self) -> tokio_tungstenite::tungstenite::Utf8Bytes {
        // The initialiser never awaits, so it cannot be cancelled between
        // taking the fleet and storing the text.
        self.message
            .get_or_init(|| async {
                let mut fleet = self
                    .fleet
                    .lock()
                    .map(|mut f| f.take().unwrap_or_default())
                    .unwrap_or_default();
                // Sorted here rather than on the core: ~20 ms with 30,000 jobs.
                fleet.jobs.sort_by(|a, b| job_order(a, b));
                snapshot_message(self.seq, &fleet).into()
            })
            .await
            .clone()
    }
}

/// The fleet as the core hands it out for a snapshot: job views shared with
/// the scheduler (in no order until [`SharedSnapshot::message`] sorts them),
/// model views, and each worker's view already serialised (kept by the core
/// as workers change), so a snapshot of 30,000 jobs and 10,000 workers is
/// pointer copies instead of deep clones and serialisations on the core.
#[derive(Default)]
pub(super) struct SnapshotParts {
    pub(super) jobs: Vec<Arc<JobView>>,
    pub(super) workers: Vec<Arc<str>>,
    pub(super) models: Vec<ModelView>,
    pub(super) archived: JobCounts,
    pub(super) storage_problem: Option<StorageProblem>,
}

/// `ServerMessage::Snapshot { seq, snapshot }` with the `FleetSnapshot`
/// written from its parts (tested against the enum in `core/tests.rs`).
pub(super) fn snapshot_message(seq: u64, fleet: &SnapshotParts) -> String {
    let (jobs, models) = match (
        serde_json::to_string(&fleet.jobs),
        serde_json::to_string(&fleet.models),
    ) {
        (Ok(jobs), Ok(models)) => (jobs, models),
        (Err(e), _) | (_, Err(e)) => {
            error!("cannot serialise the snapshot: {e}");
            ("[]".to_string(), "[]".to_string())
        }
    };
    let workers_len: usize = fleet.workers.iter().map(|w| w.len() + 1).sum();
    let mut out = String::with_capacity(jobs.len() + models.len() + workers_len + 80);
    out.push_str(r#"{"type":"snapshot","seq":"#);
    out.push_str(&seq.to_string());
    out.push_str(r#","snapshot":{"jobs":"#);
    out.push_str(&jobs);
    out.push_str(r#","workers":["#);
    for (i, worker) in fleet.workers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(worker);
    }
    out.push_str(r#"],"models":"#);
    out.push_str(&models);
    if !fleet.archived.is_empty() {
        out.push_str(r#","archived":"#);
        out.push_str(&serde_json::to_string(&fleet.archived).unwrap_or_else(|_| "{}".into()));
    }
    if let Some(problem) = &fleet.storage_problem {
        if let Ok(json) = serde_json::to_string(problem) {
            out.push_str(r#","storage_problem":"#);
            out.push_str(&json);
        }
    }
    out.push_str("}}");
    out
}

impl Core {
    /// The snapshot at the current seq: the one subscribers are still
    /// sending if there is one, so a thousand dashboards subscribing at once
    /// cost one copy of the fleet and one serialisation, not a thousand.
    pub(super) fn shared_snapshot(&mut self) -> Arc<SharedSnapshot> {
        if let Some(shared) = self.snapshot_cache.get(self.seq) {
            return shared;
        }
        for session in std::mem::take(&mut self.stale_worker_json) {
            if let Some(view) = self.scheduler.worker(session) {
                self.worker_json
                    .insert(view.session.clone(), worker_json(view));
            }
        }
        let shared = Arc::new(SharedSnapshot::new(self.seq, self.snapshot()));
        self.snapshot_cache.put(&shared);
        shared
    }

    pub(super) fn snapshot(&self) -> SnapshotParts {
        let mut workers: Vec<&WorkerView> = self.scheduler.workers().collect();
        workers.sort_by_key(|w| w.connected_at);
        SnapshotParts {
            jobs: self.scheduler.jobs().map(|j| j.view.clone()).collect(),
            workers: workers
                .into_iter()
                .map(|w| {
                    self.worker_json
                        .get(&w.session)
                        .cloned()
                        .unwrap_or_else(|| worker_json(w))
                })
                .collect(),
            models: self.models.runs().map(|r| r.view()).collect(),
            archived: self.archived.clone(),
            storage_problem: self.storage.problem(),
        }
    }
}
