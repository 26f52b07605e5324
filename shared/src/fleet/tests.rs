use super::*;
use crate::protocol::Millis;
use crate::protocol::{JobCounts, JobState, ProgressPoint, WorkerChange, MAX_HISTORY_POINTS};
use crate::target::Target;

use crate::testing::job;

fn worker(session: &str, current: Option<&str>) -> WorkerView {
    WorkerView {
        session: session.into(),
        worker_id: format!("id-{session}"),
        name: format!("w-{session}"),
        target: Target::of_kind("llvm"),
        backend: "sim".into(),
        tvm_version: None,
        current_job: current.map(str::to_owned),
        jobs_done: 0,
        connected_at: Millis(0),
        device: None,
    }
}

fn snapshot() -> FleetSnapshot {
    FleetSnapshot {
        jobs: vec![job("a", JobState::Queued), job("b", JobState::Running)],
        workers: vec![worker("s1", Some("b"))],
        models: vec![],
        archived: JobCounts::default(),
        storage_problem: None,
    }
}

fn updated(id: &str, state: JobState) -> FleetEvent {
    FleetEvent::JobUpdated {
        job: Box::new(job(id, state)),
    }
}

fn progress(id: &str, trials_done: u32, best: Option<f64>) -> FleetEvent {
    FleetEvent::JobProgress {
        progress: JobProgress {
            job_id: id.into(),
            trials_done,
            trials_total: 16,
            best_latency_s: best,
            updated_at: Millis(2),
        },
    }
}

#[test]
fn applies_a_snapshot_then_events_in_order() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(10, snapshot());
    assert_eq!(fleet.seq(), Some(10));
    assert_eq!(fleet.counts().queued, 1);
    assert_eq!(fleet.counts().running, 1);
    assert_eq!(fleet.workers_busy(), 1);
    assert_eq!(
        fleet.apply_event(11, updated("a", JobState::Done)),
        EventOutcome::Applied
    );
    assert_eq!(
        fleet.apply_event(12, updated("c", JobState::Failed)),
        EventOutcome::Applied
    );
    let left = FleetEvent::WorkerLeft {
        session: "s1".into(),
        reason: "gone".into(),
    };
    assert_eq!(fleet.apply_event(13, left), EventOutcome::Applied);
    assert_eq!(
        fleet.counts(),
        JobCounts {
            total: 3,
            queued: 0,
            running: 1,
            done: 1,
            failed: 1,
            cancelled: 0,
            archived: 0,
        }
    );
    assert!(fleet.workers().is_empty());
    assert!(!fleet.all_terminal());
    fleet.apply_event(14, updated("b", JobState::Cancelled));
    assert!(fleet.all_terminal());

    // A model run between two rounds: every job ended, more to come.
    use crate::model::ModelState;
    let run = |state| FleetEvent::ModelUpdated {
        model: Box::new(crate::testing::model_view("sq", state)),
    };
    fleet.apply_event(15, run(ModelState::Tuning));
    assert!(!fleet.all_terminal(), "the run plans more rounds");
    fleet.apply_event(16, run(ModelState::Done));
    assert!(fleet.all_terminal());
}

#[test]
fn the_store_degrades_and_recovers_through_events_and_snapshots() {
    use crate::protocol::StorageProblem;
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(1, snapshot());
    assert!(fleet.storage_problem().is_none());
    let problem = StorageProblem {
        reason: "state database /srv/fleet.db: the disk is full".into(),
        since: Millis(7),
    };
    let degraded = FleetEvent::StorageChanged {
        problem: Some(problem.clone()),
    };
    assert_eq!(fleet.apply_event(2, degraded), EventOutcome::Applied);
    assert_eq!(fleet.storage_problem(), Some(&problem));
    fleet.apply_event(3, FleetEvent::StorageChanged { problem: None });
    assert!(fleet.storage_problem().is_none());
    // A resync's snapshot says it whole.
    let mut again = snapshot();
    again.storage_problem = Some(problem.clone());
    fleet.apply_snapshot(9, again);
    assert_eq!(fleet.storage_problem(), Some(&problem));
}

#[test]
fn an_event_numbered_like_the_snapshot_is_already_in_it() {
    let mut fleet = Fleet::new();
    // Before any snapshot there is nothing to apply an event to.
    assert_eq!(
        fleet.apply_event(1, updated("a", JobState::Done)),
        EventOutcome::Stale
    );
    fleet.apply_snapshot(5, snapshot());
    assert_eq!(
        fleet.apply_event(4, updated("b", JobState::Queued)),
        EventOutcome::Stale
    );
    assert_eq!(
        fleet.apply_event(5, updated("b", JobState::Queued)),
        EventOutcome::Stale
    );
    assert_eq!(fleet.job("b").unwrap().state, JobState::Running);
    assert_eq!(
        fleet.apply_event(9, updated("a", JobState::Done)),
        EventOutcome::Gap {
            expected: 6,
            got: 9
        }
    );
    assert_eq!(
        fleet.job("a").unwrap().state,
        JobState::Done,
        "a gap's event is applied"
    );
    assert_eq!(fleet.seq(), Some(9));
    // A fresh snapshot replaces everything, even with a lower number.
    fleet.apply_snapshot(1, FleetSnapshot::default());
    assert!(fleet.jobs().is_empty());
    assert!(!fleet.all_terminal(), "no jobs is not 'all done'");
    assert_eq!(fleet.snapshots, 2);
}

#[test]
fn a_progress_delta_updates_the_job_and_its_curve_like_the_master() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(0, snapshot());
    fleet.apply_event(1, progress("b", 4, Some(2e-3)));
    fleet.apply_event(2, progress("b", 8, None));
    fleet.apply_event(3, progress("b", 8, Some(1e-3)));
    let b = fleet.job("b").unwrap();
    assert_eq!((b.trials_done, b.best_latency_s), (8, Some(1e-3)));
    assert_eq!(
        b.history,
        [
            ProgressPoint {
                trials: 4,
                best_latency_s: 2e-3
            },
            ProgressPoint {
                trials: 8,
                best_latency_s: 1e-3
            }
        ]
    );
    // A delta for a job the mirror has never seen changes nothing.
    let before = fleet.clone();
    assert_eq!(
        fleet.apply_event(4, progress("zz", 1, Some(1.0))),
        EventOutcome::Applied
    );
    assert_eq!(fleet.jobs(), before.jobs());
}

#[test]
fn a_long_curve_is_thinned_the_same_way_on_both_sides() {
    let mut master_side = Vec::new();
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(0, snapshot());
    for t in 1..=1000u32 {
        let best = 1.0 / f64::from(t);
        crate::protocol::record_progress_point(&mut master_side, t, best);
        fleet.apply_event(u64::from(t), progress("b", t, Some(best)));
    }
    let mirrored = &fleet.job("b").unwrap().history;
    assert_eq!(mirrored, &master_side);
    assert!(mirrored.len() <= MAX_HISTORY_POINTS);
    assert_eq!(
        mirrored.last().unwrap().trials,
        1000,
        "the latest point is kept"
    );
}

#[test]
fn jobs_stay_ordered_and_findable_whatever_order_they_arrive_in() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(0, FleetSnapshot::default());
    let mut seq = 0;
    for (name, created_at) in [("m", 5), ("z", 9), ("a", 5), ("b", 1), ("y", 9)] {
        let mut job = job(name, JobState::Queued);
        job.created_at = Millis(created_at);
        seq += 1;
        fleet.apply_event(seq, FleetEvent::JobUpdated { job: Box::new(job) });
    }
    let names: Vec<_> = fleet.jobs().iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(names, ["b", "a", "m", "y", "z"]);
    for name in names.clone() {
        assert_eq!(fleet.job(name).unwrap().job_id, name);
    }
}

fn archived(done: usize, failed: usize) -> JobCounts {
    let mut counts = JobCounts::default();
    counts.count_archived(JobState::Done, done as isize);
    counts.count_archived(JobState::Failed, failed as isize);
    counts
}

#[test]
fn archived_jobs_leave_the_rows_and_stay_in_the_counts() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(1, snapshot());
    fleet.apply_event(2, updated("a", JobState::Done));
    fleet.apply_event(3, updated("c", JobState::Failed));
    assert_eq!(fleet.counts().total, 3);
    let event = FleetEvent::JobsArchived {
        job_ids: vec!["a".into(), "c".into()],
        archived: archived(1, 1),
    };
    assert_eq!(fleet.apply_event(4, event), EventOutcome::Applied);
    assert_eq!(fleet.jobs().len(), 1, "only b is held");
    assert!(fleet.job("a").is_none() && fleet.job("c").is_none());
    assert_eq!(fleet.job("b").unwrap().state, JobState::Running);
    let counts = fleet.counts();
    assert_eq!(
        (
            counts.total,
            counts.done,
            counts.failed,
            counts.running,
            counts.archived
        ),
        (3, 1, 1, 1, 2)
    );
    assert!(!fleet.all_terminal(), "b still runs");

    // One comes back (resubmitted): lower counts, then its view.
    let back = FleetEvent::JobsArchived {
        job_ids: vec![],
        archived: archived(0, 1),
    };
    fleet.apply_event(5, back);
    fleet.apply_event(6, updated("a", JobState::Done));
    assert_eq!(fleet.counts().total, 3, "not counted twice");
    assert_eq!(fleet.counts().archived, 1);

    // Everything archived: the fleet is finished, not empty.
    fleet.apply_event(7, updated("b", JobState::Done));
    fleet.apply_event(
        8,
        FleetEvent::JobsArchived {
            job_ids: vec!["a".into(), "b".into()],
            archived: archived(2, 1),
        },
    );
    assert!(fleet.jobs().is_empty());
    assert!(fleet.all_terminal());

    // A snapshot carries the archived counts.
    let mut snap = snapshot();
    snap.archived = archived(5, 0);
    fleet.apply_snapshot(9, snap);
    assert_eq!(fleet.counts().total, 7);
    assert_eq!(fleet.archived().done, 5);
}

#[test]
fn a_job_change_updates_the_job_it_names_and_keeps_its_workload() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(0, snapshot());
    let mut done = job("b", JobState::Done);
    done.workload = crate::testing::workload("other");
    done.trials_done = 16;
    done.updated_at = Millis(7);
    let change = FleetEvent::JobChanged {
        change: Box::new(crate::testing::job_change(&done)),
    };
    assert_eq!(fleet.apply_event(1, change), EventOutcome::Applied);
    let b = fleet.job("b").unwrap();
    assert_eq!(
        (b.state, b.trials_done, b.updated_at),
        (JobState::Done, 16, Millis(7))
    );
    assert_eq!(
        b.workload,
        snapshot().jobs[1].workload,
        "the workload is the one the mirror had"
    );
    // A change for a job the mirror has never seen changes nothing.
    let before = fleet.clone();
    let unknown = FleetEvent::JobChanged {
        change: Box::new(crate::testing::job_change(&job("zz", JobState::Done))),
    };
    assert_eq!(fleet.apply_event(2, unknown), EventOutcome::Applied);
    assert_eq!(fleet.jobs(), before.jobs());
}

#[test]
fn a_worker_change_updates_its_job_and_count_only() {
    let mut fleet = Fleet::new();
    fleet.apply_snapshot(0, snapshot());
    let mut busy = worker("s1", Some("a"));
    busy.jobs_done = 5;
    busy.name = "not sent".into();
    let change = FleetEvent::WorkerChanged {
        change: WorkerChange::of(&busy),
    };
    assert_eq!(fleet.apply_event(1, change), EventOutcome::Applied);
    let w = fleet.worker_by_session("s1").unwrap();
    assert_eq!((w.current_job.as_deref(), w.jobs_done), (Some("a"), 5));
    assert_eq!(w.name, "w-s1", "the rest is the view the mirror had");
    // A change for a worker the mirror does not have changes nothing.
    let before = fleet.clone();
    let unknown = FleetEvent::WorkerChanged {
        change: WorkerChange::of(&worker("s9", None)),
    };
    assert_eq!(fleet.apply_event(2, unknown), EventOutcome::Applied);
    assert_eq!(fleet.workers(), before.workers());
}
