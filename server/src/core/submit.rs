//! `submit`: workloads into jobs, archived ones brought back first, and the
//! report of what was new, a duplicate, a cache hit or warm-started; and
//! `import`: records that seed later submissions.

use tokio::sync::oneshot;
use tracing::info;
use tunefleet_shared::import::{ImportReport, ImportedWorkload, WorkloadKey};
use tunefleet_shared::protocol::{Millis, SubmitReport};
use tunefleet_shared::workload::Workload;

use super::{Batch, Core};
use crate::scheduler::{CachePolicy, Output};

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit(
        &mut self,
        workloads: Vec<Workload>,
        cache: CachePolicy,
        by: Option<String>,
        reply: oneshot::Sender<SubmitReport>,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        self.bring_back(workloads.iter().map(Workload::job_id), batch);
        if cache == CachePolicy::Use {
            self.bring_back_entries(&workloads, batch);
        }
        let (new_jobs, duplicates) = self.scheduler.submit_as(workloads, cache, now, out);
        if let Some(by) = &by {
            for id in &new_jobs {
                self.scheduler.note_action(id, "submit", by, now);
            }
        }
        let (mut cache_hits, mut warm_started, mut seeded) = (Vec::new(), Vec::new(), Vec::new());
        for id in &new_jobs {
            let Some(job) = self.scheduler.job(id) else {
                continue;
            };
            if job.view.cache_hit {
                cache_hits.push(id.clone());
            } else if job.view.cached_from.is_some() {
                warm_started.push(id.clone());
            }
            if job.extras.seeded > 0 {
                seeded.push(id.clone());
            }
        }
        info!(
            new = new_jobs.len(),
            duplicates = duplicates.len(),
            cache_hits = cache_hits.len(),
            warm_started = warm_started.len(),
            seeded = seeded.len(),
            "workloads submitted"
        );
        let report = SubmitReport {
            new_jobs,
            duplicates,
            cache_hits,
            warm_started,
            seeded,
        };
        batch.reply(reply, report);
    }

    /// `tunefleet import`: records kept (as `meta` rows) to seed later jobs
    /// of the same workloads; nothing is kept when an entry is not valid.
    pub(super) fn import(
        &mut self,
        workloads: Vec<ImportedWorkload>,
        keys: Vec<WorkloadKey>,
        reply: oneshot::Sender<Result<ImportReport, String>>,
        batch: &mut Batch,
    ) {
        let r = self
            .scheduler
            .import(workloads, keys)
            .map(|(report, rows)| {
                info!(
                    workloads = report.workloads_new,
                    records = report.records_new,
                    known = report.records_known,
                    keys = report.keys_new,
                    "records imported"
                );
                batch.meta.extend(rows);
                report
            });
        batch.reply(reply, r);
    }
}
