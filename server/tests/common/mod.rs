//! What the scheduler-level tests share: a configuration, a workload and a
//! worker's hello.

use tunefleet_server::scheduler::SchedulerConfig;
use tunefleet_shared::protocol::{WorkerHello, PROTOCOL_VERSION};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::{parse_workload_file, Workload};

pub const CONFIG: SchedulerConfig = SchedulerConfig {
    max_attempts: 3,
    job_timeout_ms: Some(10_000),
    nbest: 5,
};

/// A 64³ matmul with this budget and target (YAML flow text).
pub fn matmul(trials: u32, target: &str) -> Workload {
    let yaml = format!(
        "workloads:\n  - name: mm-{trials}\n    op: matmul\n    shape: {{m: 64, n: 64, k: 64}}\n    \
         dtype: float32\n    target: {target}\n    trials: {trials}\n"
    );
    parse_workload_file(&yaml, "test.yaml")
        .expect("test workload parses")
        .remove(0)
}

/// A `tvm` worker's hello with this target (JSON or legacy text).
pub fn hello(name: &str, target: &str) -> WorkerHello {
    WorkerHello {
        protocol: PROTOCOL_VERSION,
        worker_id: name.into(),
        name: name.into(),
        target: Target::parse(target).expect("test target"),
        backend: "tvm".into(),
        tvm_version: None,
        secret: None,
        slots: None,
        device: None,
    }
}
