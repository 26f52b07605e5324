//! The scheduler driven directly, without sockets or a clock: scenario tests
//! for each rule, and a property test that throws random sequences of joins,
//! leaves, results, failures, timeouts, cancels and master restarts at it and
//! checks after every step that no job is lost, duplicated or done twice.

use std::collections::{BTreeMap, HashMap};
use tunefleet_shared::protocol::Millis;

use proptest::prelude::*;
use tunefleet_planner::scheduler::{
    Job, LeaveKind, Output, ProgressReport, Rejection, Scheduler, SchedulerConfig, SessionId,
};
use tunefleet_shared::protocol::{
    JobResult, JobState, Lease, MasterMessage, TuningRecord, WorkerHello, PROTOCOL_VERSION,
};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{parse_workload_file, Workload};

fn workloads(n: usize, pinned_every: usize) -> Vec<Workload> {
    let mut yaml = String::from("target: {kind: llvm}\ntrials: 8\nworkloads:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: mm{i}\n    op: matmul\n    shape: {{m: {}, n: 16, k: 16}}\n    dtype: float32\n",
            16 + i
        ));
        if pinned_every > 0 && i % pinned_every == 0 {
            yaml.push_str("    target: {kind: llvm, mcpu: a}\n");
        }
    }
    parse_workload_file(&yaml, "test.yaml").expect("test workloads parse")
}

fn hello(worker_id: &str, target: &str) -> WorkerHello {
    WorkerHello {
        protocol: PROTOCOL_VERSION,
        worker_id: worker_id.into(),
        name: worker_id.into(),
        target: Target::parse(target).expect("test target"),
        backend: "sim".into(),
        tvm_version: None,
        secret: None,
        slots: None,
        device: None,
    }
}

/// `name` joins as session `session` at `now` on a plain llvm target.
fn join_llvm(s: &mut Scheduler, session: u64, name: &str, now: u64, out: &mut Vec<Output>) {
    s.worker_joined(
        SessionId(session),
        &hello(name, r#"{"kind":"llvm"}"#),
        Millis(now),
        out,
    )
    .expect("a plain llvm worker joins");
}

fn result(latency: f64) -> JobResult {
    JobResult {
        best_latency_s: latency,
        gflops: None,
        records: (0..8)
            .map(|i| TuningRecord {
                latency_s: latency * (1.0 + i as f64),
                record: serde_json::json!({ "candidate": i }),
            })
            .rev()
            .collect(),
        trials: 8,
        wall_time_s: 0.1,
        backend: "sim".into(),
        tvm_version: None,
        extra: serde_json::Value::Null,
        target: None,
    }
}

fn assigned(out: &[Output]) -> Vec<(SessionId, String, Lease)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                session,
                msg: MasterMessage::Assign { job_id, lease, .. },
            } => Some((*session, job_id.clone(), *lease)),
            _ => None,
        })
        .collect()
}

const CONFIG: SchedulerConfig = SchedulerConfig {
    max_attempts: 3,
    job_timeout_ms: Some(10_000),
    nbest: 5,
};

#[test]
fn idle_worker_gets_a_job_as_soon_as_one_is_submitted() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    assert!(assigned(&out).is_empty());
    out.clear();
    let (new, dup) = s.submit(workloads(2, 0), Millis(1), &mut out);
    assert_eq!((new.len(), dup.len()), (2, 0));
    let a = assigned(&out);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1, new[0], "first submitted job goes first");
    let (_, dup) = s.submit(workloads(2, 0), Millis(2), &mut out);
    assert_eq!(dup.len(), 2, "same content is a duplicate");
}

/// A snapshot holds the views it was taken with (shared, not copied); the
/// job changing afterwards must not change what that snapshot says.
#[test]
fn a_view_held_by_a_snapshot_keeps_its_state_when_the_job_moves_on() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    let held = s.job(&ids[0]).unwrap().view.clone();
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(3), &mut out);
    let job = s.job(&ids[0]).unwrap();
    assert_eq!(job.state(), JobState::Assigned);
    assert_eq!(job.view.worker.as_deref(), Some("a"));
    assert_eq!(held.state, JobState::Queued, "the snapshot's copy moved");
    assert_eq!(held.worker, None);
    assert_eq!(held.updated_at, Millis(0));
}

#[test]
fn disconnect_recycles_the_job_to_the_front_and_it_finishes_elsewhere() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(3, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    assert_eq!(s.job(&ids[0]).unwrap().state(), JobState::Assigned);
    out.clear();
    s.worker_left(SessionId(1), LeaveKind::Lost, "killed", Millis(5), &mut out);
    let job = s.job(&ids[0]).unwrap();
    assert_eq!(job.state(), JobState::Queued);
    assert_eq!(s.queue_order()[0], ids[0], "recycled job is first in line");
    assert_eq!(job.view.errors.len(), 1);
    assert!(job.view.errors[0].message.contains("killed"));

    join_llvm(&mut s, 2, "b", 6, &mut out);
    out.clear();
    s.request_job(SessionId(2), Millis(6), &mut out);
    let a = assigned(&out);
    assert_eq!(
        (a[0].1.as_str(), a[0].2),
        (ids[0].as_str(), Lease(2)),
        "second lease"
    );
    s.result(
        SessionId(2),
        &ids[0],
        Lease(2),
        result(1e-3),
        Millis(7),
        &mut out,
    )
    .unwrap();
    let job = s.job(&ids[0]).unwrap();
    assert_eq!(job.state(), JobState::Done);
    assert_eq!(job.view.attempts, 2);
    assert_eq!(job.view.records.len(), 5, "nbest records kept");
    assert!(job
        .view
        .records
        .windows(2)
        .all(|w| w[0].latency_s <= w[1].latency_s));
    assert_eq!(job.view.best_latency_s, Some(1e-3));

    // The stored latency is the worker's verified measurement, even when the
    // tuner's own records say something else.
    let mut out = Vec::new();
    s.request_job(SessionId(2), Millis(9), &mut out);
    let (_, id, lease) = assigned(&out).pop().expect("next queued job assigned");
    let mut measured = result(1e-3);
    measured.best_latency_s = 0.9e-3;
    s.result(SessionId(2), &id, lease, measured, Millis(10), &mut out)
        .unwrap();
    let job = s.job(&id).unwrap();
    assert_eq!(job.view.best_latency_s, Some(0.9e-3));
    assert_eq!(job.view.records[0].latency_s, 1e-3);
}

#[test]
fn results_from_the_wrong_worker_or_lease_are_rejected() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    join_llvm(&mut s, 2, "b", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    assert!(matches!(
        s.result(
            SessionId(2),
            &ids[0],
            Lease(1),
            result(1e-3),
            Millis(1),
            &mut out
        ),
        Err(Rejection::NotAssigned { .. })
    ));
    assert!(matches!(
        s.result(
            SessionId(1),
            &ids[0],
            Lease(7),
            result(1e-3),
            Millis(1),
            &mut out
        ),
        Err(Rejection::NotAssigned { .. })
    ));
    assert!(matches!(
        s.result(
            SessionId(1),
            "nope",
            Lease(1),
            result(1e-3),
            Millis(1),
            &mut out
        ),
        Err(Rejection::UnknownJob(_))
    ));
    let bad = s.progress(
        SessionId(2),
        &ProgressReport {
            job_id: ids[0].clone(),
            lease: Lease(1),
            trials_done: 1,
            trials_total: 8,
            best_latency_s: Some(1.0),
        },
        Millis(1),
        &mut out,
    );
    assert!(bad.is_err());
    s.result(
        SessionId(1),
        &ids[0],
        Lease(1),
        result(1e-3),
        Millis(2),
        &mut out,
    )
    .unwrap();
    assert!(matches!(
        s.result(
            SessionId(1),
            &ids[0],
            Lease(1),
            result(1e-3),
            Millis(3),
            &mut out
        ),
        Err(Rejection::AlreadyFinished { .. })
    ));
}

#[test]
fn late_result_rule() {
    // A worker process (worker_id "a") loses its connection mid-job, finishes
    // while disconnected, reconnects as a new session and re-sends.
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(2, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    s.worker_left(
        SessionId(1),
        LeaveKind::Lost,
        "network",
        Millis(1),
        &mut out,
    );
    // Still open (queued): accepted from the same process.
    join_llvm(&mut s, 3, "a", 2, &mut out);
    s.result(
        SessionId(3),
        &ids[0],
        Lease(1),
        result(1e-3),
        Millis(3),
        &mut out,
    )
    .unwrap();
    assert_eq!(s.job(&ids[0]).unwrap().state(), JobState::Done);
    assert!(!s.queue_order().contains(&ids[0]));

    // Re-assigned to another worker meanwhile: still open, the late result wins
    // and the other worker is told to stop.
    join_llvm(&mut s, 4, "c", 4, &mut out);
    s.request_job(SessionId(4), Millis(4), &mut out); // takes ids[1], lease 1
    s.worker_left(
        SessionId(4),
        LeaveKind::Lost,
        "network",
        Millis(5),
        &mut out,
    );
    join_llvm(&mut s, 5, "d", 6, &mut out);
    s.request_job(SessionId(5), Millis(6), &mut out); // ids[1], lease 2
    join_llvm(&mut s, 6, "c", 7, &mut out);
    out.clear();
    s.result(
        SessionId(6),
        &ids[1],
        Lease(1),
        result(2e-3),
        Millis(8),
        &mut out,
    )
    .unwrap();
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            session: SessionId(5),
            msg: MasterMessage::Cancel {
                lease: Lease(2),
                ..
            }
        }
    )));
    assert_eq!(s.session_job(SessionId(5)), None);
    // Another process cannot claim someone else's lease, and done stays done.
    assert!(s
        .result(
            SessionId(5),
            &ids[1],
            Lease(2),
            result(1e-3),
            Millis(9),
            &mut out
        )
        .is_err());
    assert!(s
        .result(
            SessionId(3),
            &ids[0],
            Lease(1),
            result(1e-3),
            Millis(9),
            &mut out
        )
        .is_err());
}

#[test]
fn failures_retry_until_max_attempts_then_fail_with_all_errors() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    for lease in 1..=3 {
        out.clear();
        s.request_job(SessionId(1), Millis(lease), &mut out);
        assert_eq!(assigned(&out).len(), 1, "attempt {lease} assigned");
        s.job_failed(
            SessionId(1),
            &ids[0],
            Lease(lease),
            &format!("boom {lease}"),
            Millis(lease),
            &mut out,
        )
        .unwrap();
    }
    let job = s.job(&ids[0]).unwrap();
    assert_eq!(job.state(), JobState::Failed);
    assert_eq!(job.view.errors.len(), 3);
    assert!(job.view.errors[2].message.contains("boom 3"));
    s.retry(&ids[0], Millis(10), &mut out).unwrap();
    assert_eq!(s.job(&ids[0]).unwrap().state(), JobState::Queued);
    assert!(
        s.retry(&ids[0], Millis(10), &mut out).is_err(),
        "only failed/cancelled jobs retry"
    );
}

#[test]
fn job_timeout_recycles_a_quiet_job_and_cancels_the_worker() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    s.tick(Millis(9_000), &mut out);
    assert_eq!(s.job(&ids[0]).unwrap().state(), JobState::Assigned);
    out.clear();
    s.tick(Millis(10_001), &mut out);
    assert_eq!(s.job(&ids[0]).unwrap().state(), JobState::Queued);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            session: SessionId(1),
            msg: MasterMessage::Cancel { .. }
        }
    )));
}

#[test]
fn workers_only_get_jobs_their_target_serves_and_mismatches_are_refused() {
    // A mismatch is a worker of the jobs' kind that none of them can use;
    // a worker of another kind (a GPU beside CPU jobs) waits for its own.
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(2, 2), Millis(0), &mut out).0; // ids[0] pinned to mcpu a
    join_llvm(&mut s, 1, "plain", 0, &mut out);
    out.clear();
    s.request_job(SessionId(1), Millis(0), &mut out);
    assert_eq!(
        assigned(&out)[0].1,
        ids[1],
        "plain llvm worker skips the pinned job"
    );
    assert_eq!(
        s.worker_joined(
            SessionId(2),
            &hello("gpu", r#"{"kind":"cuda","arch":"sm_90"}"#),
            Millis(0),
            &mut out
        ),
        Ok(0)
    );
    let mut cuda = workloads(1, 0);
    cuda[0].target = Target::parse(r#"{"kind":"cuda","arch":"sm_90"}"#).unwrap();
    s.submit(cuda, Millis(0), &mut out);
    assert!(
        s.worker_joined(
            SessionId(4),
            &hello("ampere", r#"{"kind":"cuda","arch":"sm_80"}"#),
            Millis(0),
            &mut out
        )
        .is_err(),
        "a GPU the CUDA jobs do not want is a mismatch"
    );
    let pinned = Target::parse(r#"{"kind":"llvm","mcpu":"a"}"#).unwrap();
    assert_eq!(
        s.unserved(),
        vec![(&pinned, 1)],
        "the sm_90 job has its worker, the mcpu=a job has none yet"
    );
    let matching = s
        .worker_joined(
            SessionId(3),
            &hello("a", r#"{"kind":"llvm","mcpu":"a"}"#),
            Millis(0),
            &mut out,
        )
        .unwrap();
    assert_eq!(matching, 2);
    assert!(s.unserved().is_empty());
}

#[test]
fn restart_requeues_in_flight_jobs_without_counting_the_attempt() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(3, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    s.result(
        SessionId(1),
        &ids[0],
        Lease(1),
        result(1e-3),
        Millis(1),
        &mut out,
    )
    .unwrap();
    s.request_job(SessionId(1), Millis(2), &mut out); // ids[1] in flight
    let persisted: Vec<Job> = s.jobs().cloned().collect();
    let mut out = Vec::new();
    let r = Scheduler::recover(CONFIG, persisted, Millis(10), &mut out);
    assert_eq!(r.job(&ids[0]).unwrap().state(), JobState::Done);
    let j1 = r.job(&ids[1]).unwrap();
    assert_eq!(j1.state(), JobState::Queued);
    assert_eq!(j1.view.attempts, 0);
    assert_eq!(r.queue_order(), vec![ids[1].clone(), ids[2].clone()]);
    assert_eq!(out, vec![Output::JobChanged(ids[1].clone())]);
}

// ----- property test ----------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Join {
        slot: usize,
        pinned: bool,
    },
    Leave {
        slot: usize,
    },
    Request {
        slot: usize,
    },
    Progress {
        slot: usize,
    },
    Finish {
        slot: usize,
    },
    Fail {
        slot: usize,
    },
    /// A message for a lease this slot may not hold (stale, foreign or made up).
    Forged {
        slot: usize,
        job: usize,
        lease: Lease,
    },
    Tick {
        advance: u64,
    },
    Cancel {
        job: usize,
    },
    Retry {
        job: usize,
    },
    Restart,
    /// `--job-retention` with this window: ended jobs unchanged for it leave memory.
    Archive {
        window: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0usize..4;
    prop_oneof![
        1 => (slot.clone(), any::<bool>()).prop_map(|(slot, pinned)| Op::Join { slot, pinned }),
        1 => slot.clone().prop_map(|slot| Op::Leave { slot }),
        3 => slot.clone().prop_map(|slot| Op::Request { slot }),
        1 => slot.clone().prop_map(|slot| Op::Progress { slot }),
        3 => slot.clone().prop_map(|slot| Op::Finish { slot }),
        1 => slot.clone().prop_map(|slot| Op::Fail { slot }),
        1 => (slot, 0usize..6, 0u64..4).prop_map(|(slot, job, lease)| Op::Forged { slot, job, lease: Lease(lease) }),
        1 => (0u64..15_000).prop_map(|advance| Op::Tick { advance }),
        1 => (0usize..6).prop_map(|job| Op::Cancel { job }),
        1 => (0usize..6).prop_map(|job| Op::Retry { job }),
        1 => Just(Op::Restart),
        1 => (0u64..20).prop_map(|window| Op::Archive { window }),
    ]
}

/// Drives a scheduler like the core does, keeping a "database" of every job
/// the scheduler reported as changed.
struct Harness {
    s: Scheduler,
    ids: Vec<String>,
    now: u64,
    next_session: SessionId,
    /// slot -> live session
    sessions: HashMap<usize, SessionId>,
    /// slot -> the assignment it was last sent and has not finished
    holding: HashMap<usize, (String, Lease)>,
    persisted: BTreeMap<String, Job>,
    /// Archived jobs (out of memory; their rows stay in `persisted`).
    archived: BTreeMap<String, Job>,
    /// Jobs whose latest progress was published but not persisted.
    progressed: std::collections::HashSet<String>,
    accepted: HashMap<String, u32>,
}

impl Harness {
    fn new(n_jobs: usize) -> Self {
        let mut s = Scheduler::new(CONFIG);
        let mut out = Vec::new();
        let ids = s.submit(workloads(n_jobs, 2), Millis(0), &mut out).0;
        let mut h = Harness {
            s,
            ids,
            now: 0,
            next_session: SessionId(1),
            sessions: HashMap::new(),
            holding: HashMap::new(),
            persisted: BTreeMap::new(),
            archived: BTreeMap::new(),
            progressed: Default::default(),
            accepted: HashMap::new(),
        };
        h.absorb(out);
        h
    }

    fn absorb(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::JobChanged(id) => {
                    let job = self.s.job(&id).expect("changed job exists").clone();
                    self.progressed.remove(&id);
                    self.persisted.insert(id, job);
                }
                Output::JobProgressed(id) => {
                    let job = self.s.job(&id).expect("progressed job exists");
                    assert_eq!(
                        job.state(),
                        JobState::Running,
                        "a delta only for a running job"
                    );
                    self.progressed.insert(id);
                }
                Output::Send {
                    session,
                    msg: MasterMessage::Assign { job_id, lease, .. },
                } => {
                    let slot = self
                        .slot_of(session)
                        .expect("assign goes to a live session");
                    assert!(
                        self.holding.insert(slot, (job_id, lease)).is_none(),
                        "worker got a second job"
                    );
                }
                Output::Send {
                    session,
                    msg: MasterMessage::Cancel { job_id, lease, .. },
                } => {
                    if let Some(slot) = self.slot_of(session) {
                        if self.holding.get(&slot) == Some(&(job_id, lease)) {
                            self.holding.remove(&slot);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn slot_of(&self, session: SessionId) -> Option<usize> {
        self.sessions
            .iter()
            .find(|(_, s)| **s == session)
            .map(|(slot, _)| *slot)
    }

    fn step(&mut self, op: Op) {
        let mut out = Vec::new();
        self.now += 1;
        let now = self.now;
        match op {
            Op::Join { slot, pinned } => {
                if self.sessions.contains_key(&slot) {
                    return;
                }
                let target = if pinned {
                    r#"{"kind":"llvm","mcpu":"a"}"#
                } else {
                    r#"{"kind":"llvm"}"#
                };
                let session = self.next_session;
                self.next_session = self.next_session.next();
                if self
                    .s
                    .worker_joined(
                        session,
                        &hello(&format!("proc{slot}"), target),
                        Millis(now),
                        &mut out,
                    )
                    .is_ok()
                {
                    self.sessions.insert(slot, session);
                }
            }
            Op::Leave { slot } => {
                if let Some(session) = self.sessions.remove(&slot) {
                    // The worker process keeps its finished work to re-send (late result).
                    self.s
                        .worker_left(session, LeaveKind::Lost, "gone", Millis(now), &mut out);
                }
            }
            Op::Request { slot } => {
                if let Some(&session) = self.sessions.get(&slot) {
                    if !self.holding.contains_key(&slot) {
                        self.s.request_job(session, Millis(now), &mut out);
                    }
                }
            }
            Op::Progress { slot } => {
                if let (Some(&session), Some((job_id, lease))) =
                    (self.sessions.get(&slot), self.holding.get(&slot))
                {
                    let report = ProgressReport {
                        job_id: job_id.clone(),
                        lease: *lease,
                        trials_done: 4,
                        trials_total: 8,
                        best_latency_s: Some(0.5),
                    };
                    let _ = self.s.progress(session, &report, Millis(now), &mut out);
                }
            }
            Op::Finish { slot } => {
                if let (Some(&session), Some((job_id, lease))) =
                    (self.sessions.get(&slot), self.holding.remove(&slot))
                {
                    if self
                        .s
                        .result(session, &job_id, lease, result(1e-3), Millis(now), &mut out)
                        .is_ok()
                    {
                        *self.accepted.entry(job_id).or_default() += 1;
                    }
                }
            }
            Op::Fail { slot } => {
                if let (Some(&session), Some((job_id, lease))) =
                    (self.sessions.get(&slot), self.holding.remove(&slot))
                {
                    let _ =
                        self.s
                            .job_failed(session, &job_id, lease, "boom", Millis(now), &mut out);
                }
            }
            Op::Forged { slot, job, lease } => {
                if let (Some(&session), Some(job_id)) =
                    (self.sessions.get(&slot), self.ids.get(job))
                {
                    let legit = self.holding.get(&slot) == Some(&(job_id.clone(), lease));
                    if !legit {
                        let before = self.s.job(job_id).cloned();
                        if self
                            .s
                            .result(session, job_id, lease, result(1e-3), Millis(now), &mut out)
                            .is_ok()
                        {
                            // Only the late-result rule may accept it: same worker process.
                            let before = before.expect("job existed");
                            assert!(before
                                .lease_history
                                .iter()
                                .any(|r| r.lease == lease && r.worker_id == format!("proc{slot}")));
                            *self.accepted.entry(job_id.clone()).or_default() += 1;
                        }
                    }
                }
            }
            Op::Tick { advance } => {
                self.now += advance;
                self.s.tick(Millis(self.now), &mut out);
            }
            Op::Cancel { job } => {
                if let Some(id) = self.ids.get(job).cloned() {
                    self.bring_back(&id, &mut out);
                    let _ = self.s.cancel(&id, Millis(now), &mut out);
                }
            }
            Op::Retry { job } => {
                if let Some(id) = self.ids.get(job).cloned() {
                    self.bring_back(&id, &mut out);
                    let _ = self.s.retry(&id, Millis(now), &mut out);
                }
            }
            Op::Archive { window } => {
                for job in self
                    .s
                    .archive(Millis(now.saturating_sub(window)), &|_| false)
                {
                    assert!(job.state().is_terminal(), "only ended jobs leave");
                    assert!(job.holder.is_none());
                    self.archived.insert(job.id().clone(), *job);
                }
            }
            Op::Restart => {
                // Everything not persisted is lost; every socket is gone. The
                // archived rows are not loaded.
                let jobs: Vec<Job> = self
                    .persisted
                    .values()
                    .filter(|j| !self.archived.contains_key(j.id()))
                    .cloned()
                    .collect();
                self.s = Scheduler::recover(CONFIG, jobs, Millis(now), &mut out);
                self.progressed.clear();
                self.sessions.clear();
                self.holding.clear();
            }
        }
        self.absorb(out);
        self.check();
    }

    /// What the core does before a command that names a job: an archived
    /// one comes back, and is written (live again).
    fn bring_back(&mut self, id: &str, out: &mut Vec<Output>) {
        if let Some(job) = self.archived.remove(id) {
            assert!(self.s.restore(job), "an archived job is taken back");
            out.push(Output::JobChanged(id.to_string()));
        }
    }

    fn check(&self) {
        // The open-jobs count by target (what a joining worker is checked
        // against) is always what the jobs say.
        let mut open = std::collections::BTreeMap::<String, usize>::new();
        for job in self.s.jobs().filter(|j| !j.state().is_terminal()) {
            *open
                .entry(job.view.workload.target.canonical_json())
                .or_default() += 1;
        }
        let counted: std::collections::BTreeMap<String, usize> = self
            .s
            .open_by_target()
            .map(|(key, n)| (key.to_string(), n))
            .collect();
        assert_eq!(counted, open, "open jobs by target");
        let queue = self.s.queue_order();
        for id in &self.ids {
            if let Some(archived) = self.archived.get(id) {
                assert!(self.s.job(id).is_none(), "job {id} archived and held");
                assert!(!queue.contains(id), "archived job {id} queued");
                assert!(archived.state().is_terminal());
                let mut row = self.persisted.get(id).expect("archived row").clone();
                row.holder = None;
                assert_eq!(&row, archived, "archived job {id} is its row");
                continue;
            }
            let job = self.s.job(id).expect("a job is never lost");
            let in_queue = queue.iter().filter(|q| *q == id).count();
            assert_eq!(
                in_queue,
                usize::from(job.state() == JobState::Queued),
                "job {id} queue membership"
            );
            if job.state().is_in_flight() {
                let holder = job.holder.expect("in-flight job has a holder");
                assert_eq!(self.s.session_job(holder), Some(&(id.clone(), job.lease)));
            } else {
                assert_eq!(job.holder, None);
            }
            let accepted = self.accepted.get(id).copied().unwrap_or(0);
            assert!(accepted <= 1, "job {id} accepted {accepted} results");
            if job.state() == JobState::Done {
                assert_eq!(accepted, 1, "done only through an accepted result");
            }
            assert!(job.view.attempts <= CONFIG.max_attempts);
            // Durability: the database copy equals memory (sessions aside).
            let mut stored = self
                .persisted
                .get(id)
                .expect("every job is persisted")
                .clone();
            stored.holder = job.holder;
            // Durability: only a running job's progress may be newer in
            // memory than on disk (progress is published, never stored).
            if self.progressed.contains(id) {
                assert_eq!(job.state(), JobState::Running);
                stored.view_mut().trials_done = job.view.trials_done;
                stored.view_mut().trials_total = job.view.trials_total;
                stored.view_mut().best_latency_s = job.view.best_latency_s;
                stored.view_mut().history = job.view.history.clone();
                stored.view_mut().updated_at = job.view.updated_at;
                stored.last_progress_at = job.last_progress_at;
            }
            assert_eq!(&stored, job, "job {id} changed without being reported");
        }
        assert_eq!(
            queue.len(),
            queue.iter().collect::<std::collections::HashSet<_>>().len()
        );
        // Work conservation: nobody idles while a job it can serve waits.
        for session in self.s.idle_sessions() {
            let worker = self.s.worker(session).expect("idle session exists");
            for id in &queue {
                let job = self.s.job(id).expect("queued job exists");
                assert!(
                    !worker.target.serves(&job.view.workload.target),
                    "idle worker next to a job it serves"
                );
            }
        }
    }

    /// After the chaos: one capable worker drains everything still open.
    fn drain(&mut self) {
        let mut out = Vec::new();
        let session = 10_000;
        self.s
            .worker_joined(
                SessionId(session),
                &hello("drainer", r#"{"kind":"llvm","mcpu":"a"}"#),
                Millis(self.now),
                &mut out,
            )
            .expect("a universal worker is accepted");
        for _ in 0..100 {
            out.clear();
            self.s
                .request_job(SessionId(session), Millis(self.now), &mut out);
            let Some((_, job_id, lease)) = assigned(&out).pop() else {
                break;
            };
            self.s
                .result(
                    SessionId(session),
                    &job_id,
                    lease,
                    result(1e-3),
                    Millis(self.now),
                    &mut out,
                )
                .expect("holder's result is accepted");
            *self.accepted.entry(job_id).or_default() += 1;
        }
        // Other live sessions may still hold jobs; let them finish too.
        for (slot, (job_id, lease)) in self.holding.clone() {
            if let Some(&s) = self.sessions.get(&slot) {
                if self
                    .s
                    .result(s, &job_id, lease, result(1e-3), Millis(self.now), &mut out)
                    .is_ok()
                {
                    *self.accepted.entry(job_id).or_default() += 1;
                }
            }
        }
        for id in &self.ids {
            let job = self
                .s
                .job(id)
                .or_else(|| self.archived.get(id))
                .expect("job exists");
            assert!(job.state().is_terminal(), "job {id} left {:?}", job.state());
            assert!(self.accepted.get(id).copied().unwrap_or(0) <= 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn random_fleets_never_lose_or_duplicate_a_job(n_jobs in 1usize..6, ops in proptest::collection::vec(op(), 1..80)) {
        let mut h = Harness::new(n_jobs);
        h.check();
        for op in ops {
            h.step(op);
        }
        h.drain();
    }
}

#[test]
fn a_late_failure_does_not_end_the_run_that_replaced_it() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out); // lease 1
    s.worker_left(
        SessionId(1),
        LeaveKind::Lost,
        "network",
        Millis(1),
        &mut out,
    );
    join_llvm(&mut s, 2, "b", 2, &mut out);
    s.request_job(SessionId(2), Millis(2), &mut out); // lease 2
    join_llvm(&mut s, 3, "a", 3, &mut out);
    out.clear();
    assert!(matches!(
        s.job_failed(
            SessionId(3),
            &ids[0],
            Lease(1),
            "crashed while offline",
            Millis(4),
            &mut out
        ),
        Err(Rejection::Superseded { .. })
    ));
    assert!(out.is_empty(), "nothing changes: {out:?}");
    assert_eq!(
        s.session_job(SessionId(2)),
        Some(&(ids[0].clone(), Lease(2)))
    );
    assert_eq!(
        s.job(&ids[0]).unwrap().view.errors.len(),
        1,
        "only the loss is recorded"
    );
    // The late *result* wins, and names its worker.
    s.result(
        SessionId(3),
        &ids[0],
        Lease(1),
        result(1e-3),
        Millis(5),
        &mut out,
    )
    .unwrap();
    assert_eq!(s.job(&ids[0]).unwrap().view.worker.as_deref(), Some("a"));
}

#[test]
fn a_clean_goodbye_requeues_without_burning_an_attempt() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    s.worker_left(
        SessionId(1),
        LeaveKind::Graceful,
        "closed by worker (code 1000)",
        Millis(1),
        &mut out,
    );
    let job = s.job(&ids[0]).unwrap();
    assert_eq!((job.state(), job.view.attempts), (JobState::Queued, 0));
}

#[test]
fn progress_builds_a_bounded_curve_that_restarts_with_each_attempt() {
    let mut s = Scheduler::new(CONFIG);
    let mut out = Vec::new();
    let ids = s.submit(workloads(1, 0), Millis(0), &mut out).0;
    join_llvm(&mut s, 1, "a", 0, &mut out);
    s.request_job(SessionId(1), Millis(0), &mut out);
    for t in 1..=1000u32 {
        let report = ProgressReport {
            job_id: ids[0].clone(),
            lease: Lease(1),
            trials_done: t,
            trials_total: 1000,
            best_latency_s: Some(1.0 / f64::from(t)),
        };
        s.progress(SessionId(1), &report, Millis(u64::from(t)), &mut out)
            .unwrap();
    }
    let history = &s.job(&ids[0]).unwrap().view.history;
    assert!(history.len() <= tunefleet_shared::protocol::MAX_HISTORY_POINTS);
    assert!(
        history.len() > 100,
        "thinned, not truncated: {}",
        history.len()
    );
    assert_eq!(history.first().map(|p| p.trials), Some(1));
    assert_eq!(
        history.last().map(|p| (p.trials, p.best_latency_s)),
        Some((1000, 1e-3))
    );
    assert!(history
        .windows(2)
        .all(|w| w[0].trials < w[1].trials && w[0].best_latency_s >= w[1].best_latency_s));
    s.worker_left(
        SessionId(1),
        LeaveKind::Lost,
        "gone",
        Millis(2000),
        &mut out,
    );
    join_llvm(&mut s, 2, "b", 2001, &mut out);
    s.request_job(SessionId(2), Millis(2001), &mut out);
    let job = &s.job(&ids[0]).unwrap().view;
    assert!(job.history.is_empty() && job.best_latency_s.is_none() && job.trials_done == 0);
}
