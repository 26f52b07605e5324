//! The tuning cache, driven through the scheduler alone: which earlier
//! results answer a new job, which only warm-start it, and which may not be
//! used at all (another effective target, `--fresh`).

use tunefleet_server::scheduler::{CachePolicy, Output, ProgressReport, Scheduler, SessionId};
use tunefleet_server::store::{Durability, Store};
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{JobResult, JobState, Lease, MasterMessage, TuningRecord};
use tunefleet_shared::target::Target;

mod common;
use common::{hello, matmul, CONFIG};

/// What a MetaSchedule worker sends: database records `[trace, secs,
/// target, args]` and the workload line they belong to.
fn result(latency: f64, trials: u32, target: &str, first: u32) -> JobResult {
    JobResult {
        best_latency_s: latency,
        gflops: None,
        records: (0..3)
            .map(|i| TuningRecord {
                latency_s: latency * (1.0 + f64::from(i)),
                record: serde_json::json!([["trace", first + i], [latency], {}, []]),
            })
            .collect(),
        trials,
        wall_time_s: 1.0,
        backend: "tvm".into(),
        tvm_version: None,
        extra: serde_json::json!({"workload": ["0x1234", "base64"]}),
        target: Some(Target::parse(target).expect("test target")),
    }
}

fn assignment(out: &[Output]) -> Option<(SessionId, String, Lease, Box<MasterMessage>)> {
    out.iter().find_map(|o| match o {
        Output::Send {
            session,
            msg: msg @ MasterMessage::Assign { job_id, lease, .. },
        } => Some((*session, job_id.clone(), *lease, Box::new(msg.clone()))),
        _ => None,
    })
}

const ZNVER3: &str = r#"{"kind":"llvm","mcpu":"znver3","num-cores":2}"#;

/// A scheduler that has tuned `matmul(8, llvm)` on a znver3 worker, and the
/// job's id. The worker (session 1) is idle again.
fn tuned_once() -> (Scheduler, String) {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    s.worker_joined(SessionId(1), &hello("w", ZNVER3), Millis(0), &mut out)
        .expect("worker joins");
    let (new, _) = s.submit(vec![matmul(8, "{kind: llvm}")], Millis(1), &mut out);
    s.request_job(SessionId(1), Millis(1), &mut out);
    let (_, job, lease, _) = assignment(&out).expect("assigned");
    assert_eq!(job, new[0]);
    s.result(
        SessionId(1),
        &job,
        lease,
        result(0.002, 8, ZNVER3, 0),
        Millis(2),
        &mut out,
    )
    .expect("result accepted");
    s.request_job(SessionId(1), Millis(3), &mut out);
    (s, job)
}

#[test]
fn a_smaller_budget_for_a_served_target_is_answered_at_once() {
    let (mut s, first) = tuned_once();
    let mut out = Vec::new();
    for target in ["{kind: llvm}", "{kind: llvm, mcpu: znver3}"] {
        let (new, dup) = s.submit(vec![matmul(4, target)], Millis(10), &mut out);
        assert_eq!((new.len(), dup.len()), (1, 0), "{target}: a new job");
        let job = &s.job(&new[0]).expect("job exists").view;
        assert_eq!(job.state, JobState::Done, "{target}");
        assert!(job.cache_hit, "{target}");
        assert_eq!(job.cached_from.as_deref(), Some(first.as_str()));
        let source = &s.job(&first).expect("source").view;
        assert_eq!(job.records, source.records);
        assert_eq!(job.best_latency_s, Some(0.002));
        assert_eq!(job.attempts, 0, "nothing ran");
    }
    assert!(assignment(&out).is_none(), "no worker was asked");
}

#[test]
fn another_effective_target_or_fresh_is_a_miss() {
    let (mut s, _) = tuned_once();
    let mut out = Vec::new();
    let (pinned, _) = s.submit(
        vec![matmul(4, "{kind: llvm, mcpu: znver4}")],
        Millis(10),
        &mut out,
    );
    let job = &s.job(&pinned[0]).expect("job").view;
    assert_eq!(
        job.state,
        JobState::Queued,
        "znver3 records never answer znver4"
    );
    assert!(!job.cache_hit && job.cached_from.is_none());

    let (fresh, _) = s.submit_as(
        vec![matmul(6, "{kind: llvm}")],
        CachePolicy::Bypass,
        Millis(11),
        &mut out,
    );
    let job = &s.job(&fresh[0]).expect("job").view;
    assert!(!job.cache_hit && job.cached_from.is_none(), "--fresh");
    assert_ne!(job.state, JobState::Done);
}

#[test]
fn a_larger_budget_warm_starts_and_tunes_only_the_rest() {
    let (mut s, first) = tuned_once();
    let mut out = Vec::new();
    let (new, _) = s.submit(vec![matmul(20, "{kind: llvm}")], Millis(10), &mut out);
    let id = new[0].clone();
    let job = &s.job(&id).expect("job").view;
    assert!(!job.cache_hit);
    assert_eq!(job.cached_from.as_deref(), Some(first.as_str()));
    assert_eq!((job.trials_done, job.trials_total), (8, 20));

    let (session, job_id, lease, msg) = assignment(&out).expect("the idle worker gets it");
    assert_eq!(job_id, id);
    let MasterMessage::Assign {
        workload,
        warm_start,
        ..
    } = *msg
    else {
        unreachable!()
    };
    assert_eq!(workload.trials, 12, "only the 12 trials not yet tuned");
    let warm = warm_start.expect("earlier records to start from");
    assert_eq!(warm.records.len(), 3);
    assert_eq!(warm.workload, serde_json::json!(["0x1234", "base64"]));

    out.clear();
    let report = ProgressReport {
        job_id: id.clone(),
        lease,
        trials_done: 6,
        trials_total: 12,
        best_latency_s: Some(0.003),
    };
    s.progress(session, &report, Millis(11), &mut out)
        .expect("progress");
    let job = &s.job(&id).expect("job").view;
    assert_eq!((job.trials_done, job.trials_total), (14, 20));
    assert_eq!(
        job.best_latency_s,
        Some(0.002),
        "the earlier best still counts"
    );

    s.result(
        session,
        &id,
        lease,
        result(0.001, 12, ZNVER3, 100),
        Millis(12),
        &mut out,
    )
    .expect("result");
    let job = &s.job(&id).expect("job").view;
    assert_eq!(job.state, JobState::Done);
    assert_eq!(job.trials_done, 20);
    assert_eq!(job.best_latency_s, Some(0.001));
    assert_eq!(job.records.len(), 5, "nbest of old and new together");
    assert!(job
        .records
        .windows(2)
        .all(|w| w[0].latency_s <= w[1].latency_s));

    // The fuller entry now answers a budget the first could not.
    let (again, _) = s.submit(vec![matmul(16, "{kind: llvm}")], Millis(13), &mut out);
    let job = &s.job(&again[0]).expect("job").view;
    assert!(job.cache_hit);
    assert_eq!(job.cached_from.as_deref(), Some(id.as_str()));
}

/// A master restarted with `jobs` answers a smaller budget of the same
/// computation from `first`, at once.
fn answers_after_a_restart(jobs: Vec<tunefleet_server::scheduler::Job>, first: &str) {
    let mut out = Vec::new();
    let mut s = Scheduler::recover(CONFIG, jobs, Millis(100), &mut out);
    let (new, _) = s.submit(vec![matmul(2, "{kind: llvm}")], Millis(101), &mut out);
    let job = &s.job(&new[0]).expect("job").view;
    assert!(job.cache_hit);
    assert_eq!(job.cached_from.as_deref(), Some(first));
}

#[test]
fn the_cache_survives_a_restart() {
    let (s, first) = tuned_once();
    let jobs: Vec<_> = s.jobs().cloned().collect();
    answers_after_a_restart(jobs, &first);
}

/// A job read back from its row in a real state file has no computation key
/// yet: it is computed when first asked for, equals the workload's, and the
/// job still equals the one that had it, so the cache answers exactly as
/// before.
#[test]
fn a_job_read_back_without_its_key_answers_the_same() {
    let (s, first) = tuned_once();
    let held = s.job(&first).expect("job").clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fleet.db");
    let mut store = Store::open(&path, Durability::Normal).expect("open the state file");
    store
        .commit(s.jobs(), std::iter::empty(), &[], &[])
        .expect("commit");
    drop(store);
    let jobs = Store::open(&path, Durability::Normal)
        .expect("open it again")
        .load_jobs()
        .expect("read the rows back");
    let read_back = jobs.iter().find(|j| j.id() == &first).expect("read back");
    assert_eq!(read_back, &held);
    assert_eq!(read_back.content_key(), held.view.workload.content_key());
    assert_eq!(held.content_key(), held.view.workload.content_key());
    answers_after_a_restart(jobs, &first);
}

#[test]
fn a_result_without_records_is_no_entry() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    s.worker_joined(SessionId(1), &hello("w", ZNVER3), Millis(0), &mut out)
        .expect("joins");
    s.submit(vec![matmul(8, "{kind: llvm}")], Millis(1), &mut out);
    s.request_job(SessionId(1), Millis(1), &mut out);
    let (_, job, lease, _) = assignment(&out).expect("assigned");
    let mut bare = result(0.002, 8, ZNVER3, 0);
    bare.records.clear();
    s.result(SessionId(1), &job, lease, bare, Millis(2), &mut out)
        .expect("accepted");
    let (new, _) = s.submit(vec![matmul(4, "{kind: llvm}")], Millis(3), &mut out);
    assert!(!s.job(&new[0]).expect("job").view.cache_hit);
}

#[test]
fn an_archived_entry_answers_again_once_restored() {
    let (mut s, first) = tuned_once();
    assert_eq!(s.cache_entries(), 1);
    let archived = s.archive(Millis(100), &|_| false);
    assert_eq!(archived.len(), 1, "the done job leaves memory");
    assert_eq!(s.cache_entries(), 0, "and the in-memory cache");
    let mut out = Vec::new();
    let (new, _) = s.submit(vec![matmul(4, "{kind: llvm}")], Millis(101), &mut out);
    assert!(
        !s.job(&new[0]).expect("job").view.cache_hit,
        "without it, a miss"
    );

    // What the core does first for a submission: the archived entries of
    // the computation come back.
    let mut s2 = tuned_once().0;
    let gone = s2.archive(Millis(100), &|_| false);
    for job in gone {
        assert!(s2.restore(*job));
    }
    assert_eq!(s2.cache_entries(), 1);
    let (new, _) = s2.submit(vec![matmul(4, "{kind: llvm}")], Millis(101), &mut out);
    let job = &s2.job(&new[0]).expect("job").view;
    assert!(job.cache_hit);
    assert_eq!(job.cached_from.as_deref(), Some(first.as_str()));
}

#[test]
fn a_job_a_model_run_keeps_or_one_still_recent_is_not_archived() {
    let (mut s, first) = tuned_once();
    assert!(s.archive(Millis(100), &|id| id == first).is_empty(), "kept");
    // Changed at 2: a window that reaches back before that keeps it.
    assert!(s.archive(Millis(2), &|_| false).is_empty(), "still recent");
    let gone = s.archive(Millis(3), &|_| false);
    assert_eq!(gone.len(), 1);
    let job = *gone.into_iter().next().expect("one");
    assert!(s.restore(job.clone()), "taken back");
    assert!(!s.restore(job.clone()), "never over the one held");
    let mut open = job;
    open.view_mut().state = JobState::Queued;
    open.view_mut().job_id = "0000000000000bad".into();
    assert!(!s.restore(open), "only an ended job is taken back");
}
