//! The `sim` backend: a fleet-testing tool that pretends to tune.
//!
//! It exists so the master, the scheduler, reconnects and the UI can be
//! exercised with hundreds of workers on a laptop, without TVM. It is never the
//! default backend and its numbers mean nothing.
//!
//! Behaviour:
//! - it spends the configured duration (`--sim-seconds`, may be 0) in up to ten
//!   rounds, reporting progress after each round: `trials_done` grows to the
//!   workload's `trials` and `best_latency_s` only ever decreases. With a zero
//!   duration it returns at once without reporting progress (the 100-worker
//!   benchmark uses that to measure the fleet machinery alone);
//! - the result is deterministic: it is derived from a hash of the job id
//!   the master assigned, which is the workload's content hash, so the same
//!   job gives the same latencies on every worker and every run. (Hashing the
//!   workload again here was a sixth of a zero-time worker's CPU in the
//!   100-worker benchmark.) The best latency is the time the workload's FLOPs
//!   take at 10 GFLOP/s (1 ms when the FLOPs are unknown) times a factor in
//!   `[0.5, 1.5)` taken from the hash; record `i` (best first) is `1 + 0.1 i`
//!   times slower. At most `nbest` records are returned, each with
//!   `{"sim": true, "candidate": i, "job_id": ...}` as its record.
//!
//! Test hooks, chosen by the workload's name:
//! - `sim-fail…`: the job fails at once with the error `simulated failure`;
//! - `sim-hang…`: the job never reports progress and never finishes; only
//!   cancellation (dropping the future) ends it.

use super::{Backend, JobSpec, ProgressSink, ProgressUpdate, TuneError, TuneFuture};
use std::time::{Duration, Instant};
use tunefleet_shared::protocol::{JobResult, TuningRecord};

/// Rate the synthetic latencies are based on.
const SIM_FLOPS_PER_S: f64 = 10e9;
/// Latency base when the workload's FLOPs are unknown.
const SIM_DEFAULT_LATENCY_S: f64 = 1e-3;
const MAX_ROUNDS: u32 = 10;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct SimBackend {
    duration: Duration,
}

impl SimBackend {
    /// A sim backend that spends `duration` on every job.
    pub fn new(duration: Duration) -> Self {
        SimBackend { duration }
    }

    /// The synthetic best latency of a job, independent of time spent.
    pub fn best_latency_s(job: &JobSpec) -> f64 {
        let hash = fnv1a(job.job_id.as_bytes());
        // 53 bits of the hash as a fraction in [0, 1), exactly representable.
        let unit = (hash >> 11) as f64 / (1u64 << 53) as f64;
        let base = job
            .workload
            .flops()
            .filter(|f| f.is_finite() && *f > 0.0)
            .map_or(SIM_DEFAULT_LATENCY_S, |f| f / SIM_FLOPS_PER_S);
        base * (0.5 + unit)
    }

    async fn run(&self, job: JobSpec, progress: ProgressSink) -> Result<JobResult, TuneError> {
        let started = Instant::now();
        if let tunefleet_shared::workload::Op::Model { model } = &job.workload.op {
            // Faking a model's tasks would only hide a missing TVM worker.
            return Err(TuneError::Unsupported(format!(
                "the sim backend cannot {} an ONNX model; model runs need a tvm worker",
                model.name()
            )));
        }
        let name = job.workload.name.as_str();
        if name.starts_with("sim-fail") {
            return Err(TuneError::Failed("simulated failure".into()));
        }
        if name.starts_with("sim-hang") {
            std::future::pending::<()>().await;
        }

        let trials = job.workload.trials;
        let best = Self::best_latency_s(&job);
        if !self.duration.is_zero() {
            let rounds = trials.clamp(1, MAX_ROUNDS);
            let pause = self.duration / rounds;
            for round in 1..=rounds {
                tokio::time::sleep(pause).await;
                // Converges to `best` on the last round, from 1.5x above.
                let remaining = f64::from(rounds - round) / f64::from(rounds);
                progress.report(ProgressUpdate {
                    trials_done: scale(trials, round, rounds),
                    trials_total: trials,
                    best_latency_s: Some(best * (1.0 + 0.5 * remaining)),
                });
            }
        }

        let count = job.nbest.min(trials.max(1));
        let job_id = &job.job_id;
        let records = (0..count)
            .map(|i| TuningRecord {
                latency_s: best * (1.0 + 0.1 * f64::from(i)),
                record: serde_json::json!({"sim": true, "candidate": i, "job_id": job_id}),
            })
            .collect();
        Ok(JobResult {
            best_latency_s: best,
            gflops: job.workload.flops().map(|f| f / best / 1e9),
            records,
            trials,
            wall_time_s: started.elapsed().as_secs_f64(),
            backend: self.name().to_string(),
            tvm_version: None,
            extra: serde_json::Value::Null,
            target: None,
        })
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        "sim"
    }

    fn tvm_version(&self) -> Option<String> {
        None
    }

    fn tune(&self, job: JobSpec, progress: ProgressSink) -> TuneFuture<'_> {
        Box::pin(self.run(job, progress))
    }
}

/// `total * part / whole` without overflow.
fn scale(total: u32, part: u32, whole: u32) -> u32 {
    let scaled = u64::from(total) * u64::from(part) / u64::from(whole.max(1));
    u32::try_from(scaled).unwrap_or(total)
}

/// FNV-1a: tiny, and stable across Rust versions (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests;
