use super::*;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::protocol::{JobCounts, StorageProblem};

fn report() -> StatusReport {
    StatusReport {
        jobs: JobCounts {
            total: 10,
            queued: 2,
            running: 3,
            done: 4,
            failed: 1,
            cancelled: 0,
            archived: 0,
        },
        workers: 3,
        workers_busy: 3,
        server_version: "0.1.0".into(),
        storage: Default::default(),
        storage_problem: None,
        devices: Vec::new(),
        unserved: Vec::new(),
    }
}

#[test]
fn devices_and_targets_nobody_serves_are_shown() {
    use tunefleet_shared::device::Device;
    use tunefleet_shared::protocol::{DeviceGroup, UnservedTarget};
    use tunefleet_shared::target::Target;
    let mut report = report();
    report.devices = vec![DeviceGroup {
        device: Some(Device {
            kind: "gpu".into(),
            name: "NVIDIA H200".into(),
            memory_mib: Some(143_771),
            index: None,
            uuid: None,
        }),
        target_kind: "cuda".into(),
        arch: Some("sm_90".into()),
        workers: 8,
        busy: 6,
    }];
    report.unserved = vec![UnservedTarget {
        target: Target::parse(r#"{"kind":"llvm","mcpu":"znver4"}"#).unwrap(),
        jobs: 2,
    }];
    let text = human(&report, "ws://h:1/ws/client");
    assert!(
        text.contains("  8 × NVIDIA H200, 140 GiB (cuda sm_90), 6 busy\n"),
        "{text}"
    );
    assert!(
        text.contains(r#"waiting: 2 jobs for {"kind":"llvm","mcpu":"znver4"}: no connected worker serves that target"#),
        "{text}"
    );
    let value = serde_json::to_value(&report).unwrap();
    assert_eq!(value["devices"][0]["device"]["name"], "NVIDIA H200");
    assert_eq!(value["unserved"][0]["jobs"], 2);
}

#[test]
fn json_has_the_fields_scripts_read() {
    let value = serde_json::to_value(report()).unwrap();
    for key in ["total", "queued", "running", "done", "failed"] {
        assert!(value["jobs"][key].is_u64(), "jobs.{key}");
    }
    assert_eq!(value["workers"], 3);
}

#[test]
fn human_summary() {
    let text = human(&report(), "ws://h:1/ws/client");
    assert!(text.contains("workers: 3 (3 busy)"), "{text}");
    assert!(
        text.contains("10 jobs: 2 queued, 3 running, 4 done, 1 failed\n"),
        "{text}"
    );
}

#[test]
fn json_says_whether_the_store_commits() {
    let ok = serde_json::to_string_pretty(&report()).unwrap();
    assert!(ok.contains(r#""storage": "ok""#), "{ok}");
    assert!(!ok.contains("storage_problem"), "{ok}");
    let mut degraded = report();
    degraded.storage = StorageHealth::Degraded;
    degraded.storage_problem = Some(StorageProblem {
        reason: "the state database /d/fleet.db: database or disk is full".into(),
        since: Millis(1),
    });
    let json = serde_json::to_string_pretty(&degraded).unwrap();
    assert!(json.contains(r#""storage": "degraded""#), "{json}");
    assert!(json.contains("/d/fleet.db"), "{json}");
    let text = human(&degraded, "ws://h:1/ws/client");
    assert!(
        text.contains("storage: degraded") && text.contains("disk is full"),
        "{text}"
    );
    assert!(!human(&report(), "ws://h:1/ws/client").contains("storage"));
}
