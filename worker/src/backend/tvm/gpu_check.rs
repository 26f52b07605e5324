//! A CUDA kernel job's check: done by the driver on the GPU, read here.
//!
//! Why the driver and not this process: the in-process check
//! (`backend::verify`, tvm-ffi) loads CPU kernels and calls them with host
//! tensors. A CUDA kernel needs device memory, TVM's CUDA runtime and the
//! slot's own GPU, all of which the driver already has (it measured the
//! candidates there, with `CUDA_VISIBLE_DEVICES` naming the slot's GPU). So
//! the driver builds the best schedule and TVM's default GPU schedule of
//! the same workload (dlight), runs both on the same random inputs with
//! poisoned outputs, compares them by a norm bound that fits the dtype and
//! the reduction length, and times both (`tunefleet/_driver/cuda.py`,
//! `check_kernel`). This side trusts that `verified` for CUDA jobs only,
//! and still refuses a result without finite, positive latencies: the
//! worker never reports a latency nobody measured.

use serde::Deserialize;
use std::time::Instant;
use tunefleet_shared::protocol::JobResult;

use super::driver_output::DriverResult;
use super::{JobSpec, TuneError, TvmBackend};
use crate::backend::verify::Verification;

/// The driver's `gpu_check` (cuda.py's `check_kernel`).
#[derive(Debug, Deserialize)]
struct GpuCheck {
    verified: bool,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    outputs: Vec<OutputCheck>,
    #[serde(default)]
    tuned_latency_s: Option<f64>,
    #[serde(default)]
    untuned_latency_s: Option<f64>,
    #[serde(default)]
    timer: Option<String>,
}

#[derive(Debug, Deserialize)]
struct OutputCheck {
    ok: bool,
    output: usize,
    /// ‖tuned − reference‖₂ / ‖reference‖₂ (none for integers: exact).
    #[serde(default)]
    rel_error: Option<f64>,
    allowed: f64,
    max_abs_error: f64,
    #[serde(default)]
    non_finite_mismatch: bool,
    #[serde(default)]
    mismatches: Option<u64>,
}

impl OutputCheck {
    fn why(&self) -> String {
        if self.non_finite_mismatch {
            return format!(
                "output {} has NaN or infinite values where the reference has none (or elements it never wrote)",
                self.output
            );
        }
        match (self.rel_error, self.mismatches) {
            (Some(rel), _) => format!(
                "output {}: relative error ‖tuned − reference‖/‖reference‖ = {rel:e}, allowed {:e} (max abs error {:e})",
                self.output, self.allowed, self.max_abs_error
            ),
            (None, mismatches) => format!(
                "output {}: {} element(s) differ (integers must match exactly)",
                self.output,
                mismatches.unwrap_or(0)
            ),
        }
    }
}

fn positive(value: Option<f64>) -> Option<f64> {
    value.filter(|v| v.is_finite() && *v > 0.0)
}

/// The driver's check as a [`Verification`], or why the job fails.
fn read(value: Option<&serde_json::Value>) -> Result<(Verification, GpuCheck), TuneError> {
    let value = value.ok_or_else(|| {
        TuneError::Failed(
            "the tuning driver did not check the CUDA kernel on the GPU (no `gpu_check` in its result)"
                .into(),
        )
    })?;
    let check: GpuCheck = serde_json::from_value(value.clone())
        .map_err(|e| TuneError::Failed(format!("malformed `gpu_check` from the driver: {e}")))?;
    let device = check.device.clone().unwrap_or_else(|| "the GPU".into());
    if !check.verified || check.outputs.is_empty() {
        let why: Vec<String> = check
            .outputs
            .iter()
            .filter(|o| !o.ok)
            .map(OutputCheck::why)
            .collect();
        return Err(TuneError::Failed(format!(
            "verification of the tuned CUDA kernel failed on {device}: it does not match TVM's default GPU schedule: {}",
            if why.is_empty() { "no output was compared".into() } else { why.join("; ") }
        )));
    }
    let (Some(tuned), Some(untuned)) = (
        positive(check.tuned_latency_s),
        positive(check.untuned_latency_s),
    ) else {
        return Err(TuneError::Failed(format!(
            "the CUDA kernel was verified on {device} but not timed (no positive latency in `gpu_check`)"
        )));
    };
    let verification = Verification {
        tuned_latency_s: tuned,
        reference_latency_s: untuned,
        max_abs_error: check
            .outputs
            .iter()
            .map(|o| o.max_abs_error)
            .fold(0.0, f64::max),
        max_rel_error: check
            .outputs
            .iter()
            .filter_map(|o| o.rel_error)
            .fold(0.0, f64::max),
        timer: check
            .timer
            .clone()
            .unwrap_or_else(|| "tvm time_evaluator".into()),
    };
    Ok((verification, check))
}

impl TvmBackend {
    /// A CUDA kernel job's result from the driver's check on the GPU
    /// (module docs); `gpu_check` and the GPU's name join the result's
    /// `extra`.
    pub(super) fn cuda_job_result(
        &self,
        job: &JobSpec,
        mut driver: DriverResult,
        started: Instant,
    ) -> Result<JobResult, TuneError> {
        let raw = driver.gpu_check.take();
        let (verification, check) = read(raw.as_ref())?;
        tracing::info!(
            job_id = %job.job_id,
            device = check.device.as_deref().unwrap_or("?"),
            tuned_s = verification.tuned_latency_s,
            untuned_s = verification.reference_latency_s,
            metaschedule_s = driver.best_latency_s,
            "tuned CUDA kernel verified on the GPU"
        );
        let mut result = self.job_result(job, driver, Some(verification), started);
        if let Some(extra) = result.extra.as_object_mut() {
            extra.insert("device".into(), serde_json::json!(check.device));
            extra.insert("gpu_check".into(), raw.unwrap_or_default());
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests;
