//! Builders shared by the unit tests. The workload type is still moving, so
//! tests build workloads only here, from the documented wire form.

use crate::backend::JobSpec;
use tunefleet_shared::protocol::Lease;
use tunefleet_shared::workload::Workload;

/// An `n`×`n`×`n` matmul workload with `n` trials.
pub(crate) fn workload(name: &str, n: u32) -> Workload {
    let wire = serde_json::json!({
        "name": name,
        "op": "matmul",
        "shape": {"m": n, "n": n, "k": n},
        "dtype": "float32",
        "target": {"kind": "llvm"},
        "trials": n,
    });
    serde_json::from_value(wire).expect("test workload matches the wire format")
}

pub(crate) fn job(workload: Workload, nbest: u32) -> JobSpec {
    JobSpec {
        job_id: workload.job_id(),
        lease: Lease(1),
        attempt: 1,
        workload,
        nbest,
        warm_start: None,
        tuner: Default::default(),
        model_round: false,
        cost_model: None,
    }
}
