//! Read-only answers: status, metrics and results.

use std::sync::Arc;

use tunefleet_shared::protocol::{
    DeviceGroup, JobCounts, JobId, JobState, JobView, StatusReport, StorageHealth, UnservedTarget,
    WorkerView,
};

use super::Core;
use crate::metrics::FleetMetrics;

/// The connected workers grouped by device and target kind (`status`'s
/// `devices`), in a stable order: most workers first, then by name.
fn device_groups(workers: &[&WorkerView]) -> Vec<DeviceGroup> {
    let mut groups: Vec<DeviceGroup> = Vec::new();
    for w in workers {
        let kind = w.target.kind().to_string();
        let arch = w
            .target
            .attrs()
            .get("arch")
            .and_then(|a| a.as_str())
            .map(str::to_string);
        // The same card model, not the same card: indices and UUIDs differ.
        let device = w.device.clone().map(|mut d| {
            d.index = None;
            d.uuid = None;
            d
        });
        let busy = usize::from(w.current_job.is_some());
        match groups
            .iter_mut()
            .find(|g| g.device == device && g.target_kind == kind && g.arch == arch)
        {
            Some(group) => {
                group.workers += 1;
                group.busy += busy;
            }
            None => groups.push(DeviceGroup {
                device,
                target_kind: kind,
                arch,
                workers: 1,
                busy,
            }),
        }
    }
    groups.sort_by(|a, b| {
        let name = |g: &DeviceGroup| {
            g.device
                .as_ref()
                .map(|d| d.name.clone())
                .unwrap_or_default()
        };
        b.workers
            .cmp(&a.workers)
            .then_with(|| name(a).cmp(&name(b)))
    });
    groups
}

impl Core {
    pub(super) fn status(&self) -> StatusReport {
        let mut jobs = JobCounts::default();
        for job in self.scheduler.jobs() {
            jobs.count(job.state(), 1);
        }
        let jobs = jobs.plus(&self.archived);
        let workers: Vec<_> = self.scheduler.workers().collect();
        StatusReport {
            jobs,
            workers: workers.len(),
            workers_busy: workers.iter().filter(|w| w.current_job.is_some()).count(),
            server_version: self.server_version.clone(),
            storage: if self.degraded() {
                StorageHealth::Degraded
            } else {
                StorageHealth::Ok
            },
            storage_problem: self.storage.problem().filter(|_| self.degraded()),
            devices: device_groups(&workers),
            unserved: self
                .scheduler
                .unserved()
                .into_iter()
                .map(|(target, jobs)| UnservedTarget {
                    target: target.clone(),
                    jobs,
                })
                .collect(),
        }
    }

    pub(super) fn metrics(&self) -> FleetMetrics {
        let mut metrics = FleetMetrics {
            jobs: JobState::ALL.iter().map(|s| (*s, 0)).collect(),
            counters: self.counters.clone(),
            storage_degraded: u64::from(self.degraded()),
            ..FleetMetrics::default()
        };
        for (state, n) in [
            (JobState::Done, self.archived.done),
            (JobState::Failed, self.archived.failed),
            (JobState::Cancelled, self.archived.cancelled),
        ] {
            *metrics.jobs.entry(state).or_default() += n as u64;
        }
        metrics.jobs_archived = self.archived.total as u64;
        for job in self.scheduler.jobs() {
            let state = job.state();
            *metrics.jobs.entry(state).or_default() += 1;
            if state == JobState::Queued {
                let target = job.view.workload.target.to_string();
                *metrics.queued_by_target.entry(target).or_default() += 1;
            }
        }
        for worker in self.scheduler.workers() {
            match worker.current_job {
                Some(_) => metrics.workers_busy += 1,
                None => metrics.workers_idle += 1,
            }
        }
        metrics.model_runs_active = self
            .models
            .runs()
            .filter(|r| !r.state.is_terminal())
            .count() as u64;
        metrics
    }

    /// `results`: the jobs held, or those named (an archived one is read
    /// back from the store, and stays archived).
    pub(super) fn results(&mut self, job_ids: Option<Vec<JobId>>) -> Vec<Arc<JobView>> {
        let Some(ids) = job_ids else {
            return self.scheduler.jobs().map(|j| Arc::clone(&j.view)).collect();
        };
        let mut views: Vec<_> = ids
            .iter()
            .filter_map(|id| self.scheduler.job(id))
            .map(|j| Arc::clone(&j.view))
            .collect();
        let archived = self.read_archived(ids.into_iter());
        views.extend(archived.into_iter().map(|job| job.view));
        views
    }
}
