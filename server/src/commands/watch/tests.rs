use super::*;
use tunefleet_shared::protocol::{FleetSnapshot, JobState};
use tunefleet_shared::testing::job;

#[test]
fn template_is_valid() {
    assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
}

#[test]
fn progress_counts_finished_jobs() {
    let mut view = FleetView::new();
    view.apply_snapshot(
        1,
        FleetSnapshot {
            jobs: vec![
                job("a", JobState::Done),
                job("b", JobState::Failed),
                job("c", JobState::Running),
                job("d", JobState::Cancelled),
            ],
            workers: vec![],
            storage_problem: None,
            models: vec![],
            archived: Default::default(),
        },
    );
    let p = Progress::of(&view);
    assert_eq!((p.finished, p.total, p.failed), (3, 4, 1));
    assert_eq!(p.plain_line(), "0 workers  75%  3/4 done, 1 failed");
    // Archived jobs (--job-retention) still count as finished work.
    let mut archived = tunefleet_shared::protocol::JobCounts::default();
    archived.count_archived(JobState::Done, 4);
    view.apply_event(
        2,
        tunefleet_shared::protocol::FleetEvent::JobsArchived {
            job_ids: vec![],
            archived,
        },
    );
    let p = Progress::of(&view);
    assert_eq!((p.finished, p.total, p.failed), (7, 8, 1));
    assert_eq!(Progress::default().percent(), 0);
}
