//! The numbers behind the overall progress bar: jobs by state (archived
//! ones included), the trials done as a fraction, and the time left.

use tunefleet_shared::protocol::{JobCounts, JobState, JobView, Millis};

use super::Fleet;

/// The fleet-wide numbers behind the overall progress bar.
pub fn fleet_overall(fleet: &Fleet, now: Millis) -> Overall {
    let mut o = overall(fleet.jobs(), now);
    add_archived(&mut o, fleet.archived());
    o
}

/// Jobs the master archived (`--job-retention`) are finished work: counted
/// in their state and the bar, though their rows are no longer sent.
pub(super) fn add_archived(o: &mut Overall, archived: &JobCounts) {
    if archived.total == 0 {
        return;
    }
    let held = o.counts.total as f64;
    o.counts = o.counts.plus(archived);
    // Every job in the archive is archived, whatever its `archived` says.
    o.counts.archived = archived.total;
    let c = &o.counts;
    let total = c.total as f64;
    o.percent =
        ((o.percent * held / 100.0 + archived.total as f64) / total * 100.0).clamp(0.0, 100.0);
    o.done_share = c.done as f64 / total * 100.0;
    o.failed_share = (c.failed + c.cancelled) as f64 / total * 100.0;
}

/// The overall progress bar's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overall {
    /// Jobs by state, the archived ones included (their count in
    /// `archived`): the protocol's own counts, as `status` reports them.
    pub counts: JobCounts,
    /// 0–100: finished jobs count whole, in-flight ones by their trials.
    pub percent: f64,
    /// Width shares (0–100) of done and of failed + cancelled jobs in the bar.
    pub done_share: f64,
    pub failed_share: f64,
    /// Estimated time until every open job is finished.
    pub eta_ms: Option<u64>,
}

impl Overall {
    pub fn finished(&self) -> usize {
        self.counts.done + self.counts.failed + self.counts.cancelled
    }
}

pub(super) fn trials_fraction(job: &JobView) -> f64 {
    if job.trials_total == 0 {
        0.0
    } else {
        (f64::from(job.trials_done) / f64::from(job.trials_total)).clamp(0.0, 1.0)
    }
}

/// Computes [`Overall`] for `jobs` at master time `now`.
///
/// ETA: trials still to run for the open jobs, divided by the trial rate
/// measured since the oldest open job was created (done jobs finished since
/// then count with all their trials, in-flight ones with the trials done).
pub fn overall(jobs: &[JobView], now: Millis) -> Overall {
    let mut o = Overall::default();
    let mut progress = 0.0;
    for job in jobs {
        o.counts.count(job.state, 1);
        progress += if job.state.is_terminal() {
            1.0
        } else {
            trials_fraction(job)
        };
    }
    let c = &o.counts;
    if c.total > 0 {
        let total = c.total as f64;
        o.percent = (progress / total * 100.0).clamp(0.0, 100.0);
        o.done_share = c.done as f64 / total * 100.0;
        o.failed_share = (c.failed + c.cancelled) as f64 / total * 100.0;
    }
    o.eta_ms = eta_ms(jobs, now);
    o
}

fn eta_ms(jobs: &[JobView], now: Millis) -> Option<u64> {
    let open: Vec<&JobView> = jobs.iter().filter(|j| !j.state.is_terminal()).collect();
    let window = open.iter().map(|j| j.created_at).min()?;
    let mut trials_run = 0u64;
    let mut first_start: Option<Millis> = None;
    for job in jobs {
        let counted = match job.state {
            JobState::Done => job.finished_at.is_some_and(|f| f >= window),
            s => s.is_in_flight(),
        };
        if !counted {
            continue;
        }
        trials_run += u64::from(if job.state == JobState::Done {
            job.trials_total.max(job.trials_done)
        } else {
            job.trials_done
        });
        if let Some(start) = job.started_at {
            first_start = Some(first_start.map_or(start, |f: Millis| f.min(start)));
        }
    }
    let start = first_start?.max(window);
    let elapsed = now.since(start).max(1000);
    if trials_run == 0 {
        return None;
    }
    let remaining: u64 = open
        .iter()
        .map(|j| u64::from(j.trials_total.saturating_sub(j.trials_done)))
        .sum();
    Some((remaining as f64 * elapsed as f64 / trials_run as f64).round() as u64)
}
