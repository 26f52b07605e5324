//! Timing both kernels: TVM's time evaluator, or a manual loop with the same
//! rules, alternating tuned and reference rounds; the median of the means.

use std::time::{Duration, Instant};

use tvm_ffi::tvm_ffi_sys::dlpack::DLDeviceType;
use tvm_ffi::{AnyView, Bytes, Function, Tensor};

use super::kernel::{ffi_message, Kernel};
use super::{TimerKind, VerifyError, VerifyOptions};

/// Median per-call latencies of (tuned, reference), and the timer used.
pub(super) fn time_both(
    tuned: &Kernel,
    tuned_args: &[Tensor],
    reference: &Kernel,
    reference_args: &[Tensor],
    options: &VerifyOptions,
) -> Result<(f64, f64, String), VerifyError> {
    let evaluator = match options.timer {
        TimerKind::Auto => Function::get_global("runtime.RPCTimeEvaluator").ok(),
        TimerKind::Manual => None,
    };
    let rounds = options.rounds.max(1);
    let repeat = options.repeat.max(1);
    let mut tuned_samples = Vec::new();
    let mut reference_samples = Vec::new();
    let timer = if evaluator.is_some() {
        "runtime.RPCTimeEvaluator"
    } else {
        "manual"
    };
    match evaluator {
        Some(evaluator) => {
            let make = |kernel: &Kernel, which: &'static str| {
                time_evaluator(&evaluator, kernel, repeat, options.min_repeat_ms)
                    .map_err(|message| VerifyError::Timing { which, message })
            };
            // One evaluator per kernel: it remembers the call count it settled
            // on, so later rounds skip the calibration.
            let tuned_eval = make(tuned, "tuned")?;
            let reference_eval = make(reference, "reference")?;
            for _ in 0..rounds {
                tuned_samples.extend(run_evaluator(&tuned_eval, tuned_args, repeat).map_err(
                    |message| VerifyError::Timing {
                        which: "tuned",
                        message,
                    },
                )?);
                reference_samples.extend(
                    run_evaluator(&reference_eval, reference_args, repeat).map_err(|message| {
                        VerifyError::Timing {
                            which: "reference",
                            message,
                        }
                    })?,
                );
            }
        }
        None => {
            let mut tuned_timer = ManualTimer::new(options.min_repeat_ms);
            let mut reference_timer = ManualTimer::new(options.min_repeat_ms);
            for _ in 0..rounds {
                tuned_samples.extend(
                    tuned_timer
                        .run(&tuned.function, tuned_args, repeat)
                        .map_err(|message| VerifyError::Timing {
                            which: "tuned",
                            message,
                        })?,
                );
                reference_samples.extend(
                    reference_timer
                        .run(&reference.function, reference_args, repeat)
                        .map_err(|message| VerifyError::Timing {
                            which: "reference",
                            message,
                        })?,
                );
            }
        }
    }
    let tuned_latency = median(&mut tuned_samples).ok_or(VerifyError::Timing {
        which: "tuned",
        message: "no valid measurement".into(),
    })?;
    let reference_latency = median(&mut reference_samples).ok_or(VerifyError::Timing {
        which: "reference",
        message: "no valid measurement".into(),
    })?;
    Ok((tuned_latency, reference_latency, timer.to_string()))
}

/// `runtime.RPCTimeEvaluator(mod, entry, kDLCPU, 0, number=1, repeat,
/// min_repeat_ms, limit_zero_time_iterations=100, cooldown_interval_ms=0,
/// repeats_to_cooldown=1, cache_flush_bytes=0, f_preproc="")`.
pub(super) fn time_evaluator(
    evaluator: &Function,
    kernel: &Kernel,
    repeat: u32,
    min_repeat_ms: u32,
) -> Result<Function, String> {
    let name = tvm_ffi::String::from(kernel.entry.as_str());
    let preproc = tvm_ffi::String::from("");
    let clamp = |v: u32| i64::from(v.min(i32::MAX as u32));
    let (repeat, min_repeat_ms) = (clamp(repeat), clamp(min_repeat_ms));
    let args: [AnyView<'_>; 12] = [
        AnyView::from(&kernel.module),
        AnyView::from(&name),
        AnyView::from(&(DLDeviceType::kDLCPU as i64)),
        AnyView::from(&0i64),
        AnyView::from(&1i64),
        AnyView::from(&repeat),
        AnyView::from(&min_repeat_ms),
        AnyView::from(&100i64),
        AnyView::from(&0i64),
        AnyView::from(&1i64),
        AnyView::from(&0i64),
        AnyView::from(&preproc),
    ];
    evaluator
        .call_packed(&args)
        .map_err(|e| ffi_message(&e))?
        .try_into()
        .map_err(|e: tvm_ffi::Error| ffi_message(&e))
}

/// Runs a time evaluator; returns its `repeat` per-call means in seconds.
pub(super) fn run_evaluator(
    evaluator: &Function,
    tensors: &[Tensor],
    repeat: u32,
) -> Result<Vec<f64>, String> {
    let views: Vec<AnyView<'_>> = tensors.iter().map(AnyView::from).collect();
    let result = evaluator.call_packed(&views).map_err(|e| ffi_message(&e))?;
    let blob: Bytes = result.try_into().map_err(|e: tvm_ffi::Error| {
        format!("unexpected time evaluator result: {}", ffi_message(&e))
    })?;
    let bytes = blob.as_slice();
    if bytes.len() != repeat as usize * 8 {
        return Err(format!(
            "the time evaluator returned {} bytes, expected {}",
            bytes.len(),
            repeat * 8
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect())
}

/// The evaluator's algorithm in Rust: one warm-up call, then each measurement
/// grows the call count until it lasts `min_repeat_ms`.
pub(super) struct ManualTimer {
    pub(super) min_repeat: Duration,
    pub(super) number: u64,
    pub(super) warmed_up: bool,
}

impl ManualTimer {
    pub(super) fn new(min_repeat_ms: u32) -> Self {
        ManualTimer {
            min_repeat: Duration::from_millis(u64::from(min_repeat_ms)),
            number: 1,
            warmed_up: false,
        }
    }

    pub(super) fn run(
        &mut self,
        function: &Function,
        tensors: &[Tensor],
        repeat: u32,
    ) -> Result<Vec<f64>, String> {
        let views: Vec<AnyView<'_>> = tensors.iter().map(AnyView::from).collect();
        let once = || {
            function
                .call_packed(&views)
                .map(drop)
                .map_err(|e| ffi_message(&e))
        };
        if !self.warmed_up {
            once()?;
            self.warmed_up = true;
        }
        let mut samples = Vec::with_capacity(repeat as usize);
        for _ in 0..repeat {
            let mut zero_times = 0;
            loop {
                let start = Instant::now();
                for _ in 0..self.number {
                    once()?;
                }
                let elapsed = start.elapsed();
                if elapsed.is_zero() {
                    zero_times += 1;
                }
                if elapsed >= self.min_repeat || zero_times >= 100 {
                    samples.push(elapsed.as_secs_f64() / self.number as f64);
                    break;
                }
                let per_call = elapsed.as_secs_f64() / self.number as f64;
                let needed = if per_call > 0.0 {
                    (self.min_repeat.as_secs_f64() / per_call) as u64 + 1
                } else {
                    self.number * 2
                };
                self.number = needed
                    .max((self.number as f64 * 1.618) as u64)
                    .max(self.number + 1);
            }
        }
        Ok(samples
            .into_iter()
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect())
    }
}

pub(super) fn median(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    Some(if samples.len() % 2 == 1 {
        samples[mid]
    } else {
        (samples[mid - 1] + samples[mid]) / 2.0
    })
}
