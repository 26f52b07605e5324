//! Checks a tuned kernel against an untuned reference and times both, in this
//! process, through `tvm-ffi`.
//!
//! MetaSchedule measures candidates in its own runner processes; the worker
//! does not take its word for the final number. For the best schedule the
//! tuning driver exports two shared libraries with the same signature — the
//! tuned kernel and the reference (the same PrimFunc compiled without a
//! schedule) — and [`verify_and_time`]:
//!
//! 1. loads `libtvm_runtime.so` with `RTLD_NOW | RTLD_GLOBAL`, once per
//!    process (see [`load_tvm_runtime`]): the kernels call `TVMBackend*`
//!    functions (workspace allocation, the parallel thread pool) that are
//!    resolved against the global symbol namespace when a kernel library is
//!    loaded, so without it a parallel kernel crashes;
//! 2. loads both libraries with `ffi.ModuleLoadFromFile` and looks up `entry`;
//! 3. fills the input arguments with deterministic pseudo-random data (the
//!    same for both kernels; each kernel gets its own copy) and the output
//!    arguments with zeros, runs both kernels once and compares every output
//!    element (see [`Tolerance`]). A difference beyond the tolerance is a
//!    [`VerifyError::Mismatch`], never a result;
//! 4. times both kernels with TVM's `runtime.RPCTimeEvaluator` (the code path
//!    behind `Module.time_evaluator`, run locally, no RPC involved), alternating
//!    tuned and reference rounds so that drift in machine load hits both, and
//!    reports the median of the per-call means. When that global function is
//!    not registered, a manual loop with the same rules is used.
//!
//! Input data: floats are uniform in `[-1, 1)`; signed integers in `[-2, 2]`
//! (8 and 16 bit) or `[-8, 8]` (32 and 64 bit), unsigned in `[0, 3]`, small enough
//! that sums of products do not overflow for realistic reduction lengths.
//!
//! Supported dtypes: `float16`, `bfloat16`, `float32`, `float64`,
//! `int8/16/32/64`, `uint8/16/32/64`. Anything else (vector lanes, `bool`,
//! float8, complex) is [`VerifyError::UnsupportedDtype`].
//!
//! Everything here blocks; [`VerifyRequest::run_blocking`] runs it on Tokio's
//! blocking pool.
//!
//! # Code
//! Here: the request, the options and the steps in order. The C calls
//! (runtime, kernels, tensors) are in `kernel.rs`, the element comparison in
//! `comparison.rs`, the timing in `timing.rs`, `numeric.rs` has the seeded
//! generator and half-precision conversions.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod comparison;
#[cfg(test)]
pub(crate) mod fixtures;
mod kernel;
mod numeric;
#[cfg(test)]
mod tests;
mod timing;

use comparison::compare;
pub use kernel::load_tvm_runtime;
use kernel::{call, check_args, estimate_reduction_len, load_kernel, make_tensors, tensor_bytes};
use timing::time_both;

/// One argument of the kernel, as the tuning driver describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgSpec {
    pub shape: Vec<i64>,
    /// TVM spelling: `float32`, `int8`, ...
    pub dtype: String,
}

/// How outputs are compared: an element passes when
/// `|tuned - reference| <= atol_eff + rtol * |reference|`, with
/// `atol_eff = atol * sqrt(max(1, reduction_len))`.
///
/// Why the square root: inputs are in `[-1, 1)`, so an output that sums `L`
/// products has rounding differences (from a different summation order,
/// vectorisation or FMA) that grow roughly like `eps * sqrt(L)` times the
/// size of the partial sums; a fixed `atol` would either reject correct large
/// reductions or accept real bugs in small ones. A wrong kernel is off by
/// O(1) (or more) per element, far above these bounds.
///
/// Defaults per output dtype: float32 `rtol 1e-3, atol 1e-4`; float64
/// `1e-7, 1e-9`; float16 and bfloat16 `1e-2, 1e-2`; integers exact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    /// The default tolerance for an output of this dtype.
    pub fn for_dtype(dtype: &str) -> Tolerance {
        match dtype {
            "float32" => Tolerance {
                rtol: 1e-3,
                atol: 1e-4,
            },
            "float64" => Tolerance {
                rtol: 1e-7,
                atol: 1e-9,
            },
            "float16" | "bfloat16" => Tolerance {
                rtol: 1e-2,
                atol: 1e-2,
            },
            _ => Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
        }
    }
}

/// How the kernels are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// `runtime.RPCTimeEvaluator` when registered, else [`TimerKind::Manual`].
    Auto,
    /// A loop in Rust around the packed call, with the evaluator's rules.
    Manual,
}

/// Knobs of [`verify_and_time`]; [`VerifyOptions::default`] is what the TVM
/// backend uses.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyOptions {
    /// Seed of the input data.
    pub seed: u64,
    /// Length of the longest reduction behind one output element (`k` of a
    /// matmul); scales the absolute tolerance. `None`: estimated from the
    /// shapes (see `estimate_reduction_len`).
    pub reduction_len: Option<u64>,
    /// Overrides the per-dtype default tolerance for every output.
    pub tolerance: Option<Tolerance>,
    /// Timing rounds per kernel; tuned and reference rounds alternate.
    pub rounds: u32,
    /// Measurements per round. Every measurement is the mean over enough calls
    /// to last at least `min_repeat_ms`.
    pub repeat: u32,
    pub min_repeat_ms: u32,
    pub timer: TimerKind,
    /// Refuse to verify when the tensors (all copies) would take more than this.
    pub max_total_bytes: u64,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            seed: 0,
            reduction_len: None,
            tolerance: None,
            rounds: 2,
            repeat: 5,
            min_repeat_ms: 40,
            timer: TimerKind::Auto,
            max_total_bytes: 8 << 30,
        }
    }
}

/// What [`verify_and_time`] measured. Latencies are seconds per call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub tuned_latency_s: f64,
    pub reference_latency_s: f64,
    /// Largest `|tuned - reference|` over all output elements.
    pub max_abs_error: f64,
    /// Largest `|tuned - reference| / |reference|` over the output elements
    /// whose reference magnitude exceeds the effective absolute tolerance
    /// (smaller ones are judged by the absolute error alone); 0 for integers
    /// that match.
    pub max_rel_error: f64,
    /// `runtime.RPCTimeEvaluator` or `manual`.
    pub timer: String,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot load the TVM runtime {path}: {reason}")]
    Runtime { path: PathBuf, reason: String },
    #[error("cannot load kernel library {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("kernel library {path} has no function `{entry}`")]
    MissingEntry { path: PathBuf, entry: String },
    #[error("argument {index}: unsupported dtype `{dtype}` (supported: {})", SUPPORTED_DTYPES.join(", "))]
    UnsupportedDtype { index: usize, dtype: String },
    #[error("invalid kernel arguments: {0}")]
    BadArgs(String),
    #[error("running the {which} kernel failed: {message}")]
    Call {
        which: &'static str,
        message: String,
    },
    #[error(
        "the tuned kernel computes a different result than the reference: output argument \
         {output}, {mismatches} of {elements} elements out of tolerance (first at flat index \
         {index}: tuned {tuned}, reference {reference}); max abs error {max_abs_error:e}, \
         max rel error {max_rel_error:e}, allowed |d| <= {atol_eff:e} + {rtol:e}*|ref|"
    )]
    Mismatch {
        output: usize,
        index: usize,
        tuned: f64,
        reference: f64,
        mismatches: usize,
        elements: usize,
        max_abs_error: f64,
        max_rel_error: f64,
        atol_eff: f64,
        rtol: f64,
    },
    #[error("timing the {which} kernel failed: {message}")]
    Timing {
        which: &'static str,
        message: String,
    },
    #[error("verification panicked or was aborted: {0}")]
    Aborted(String),
}

/// Dtypes [`verify_and_time`] can fill and compare.
pub const SUPPORTED_DTYPES: [&str; 12] = [
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64",
];

/// Everything [`verify_and_time`] needs, owned, so it can move to a blocking thread.
#[derive(Clone, Debug)]
pub struct VerifyRequest {
    pub tuned_lib: PathBuf,
    pub reference_lib: PathBuf,
    pub entry: String,
    pub args: Vec<ArgSpec>,
    pub outputs: Vec<usize>,
    pub runtime_lib: PathBuf,
    pub options: VerifyOptions,
}

impl VerifyRequest {
    /// [`verify_and_time`] on this thread.
    pub fn run(&self) -> Result<Verification, VerifyError> {
        verify_and_time(
            &self.tuned_lib,
            &self.reference_lib,
            &self.entry,
            &self.args,
            &self.outputs,
            &self.runtime_lib,
            &self.options,
        )
    }

    /// [`verify_and_time`] on Tokio's blocking pool. Dropping the future does
    /// not stop a verification that has started (a kernel call cannot be
    /// interrupted); it finishes in the background and its result is dropped.
    pub async fn run_blocking(self) -> Result<Verification, VerifyError> {
        match tokio::task::spawn_blocking(move || self.run()).await {
            Ok(result) => result,
            Err(e) => Err(VerifyError::Aborted(e.to_string())),
        }
    }
}

/// See the module docs. Blocks for the whole check and timing (typically well
/// under a second per kernel plus the timing budget:
/// `rounds * repeat * min_repeat_ms` per kernel).
pub fn verify_and_time(
    tuned_lib: &Path,
    reference_lib: &Path,
    entry: &str,
    args: &[ArgSpec],
    outputs: &[usize],
    runtime_lib: &Path,
    options: &VerifyOptions,
) -> Result<Verification, VerifyError> {
    let elems = check_args(args, outputs, options)?;
    load_tvm_runtime(runtime_lib)?;
    let tuned = load_kernel(tuned_lib, entry)?;
    let reference = load_kernel(reference_lib, entry)?;

    // Same inputs for both, separate buffers.
    let tuned_args = make_tensors(args, &elems, outputs, options.seed)?;
    let reference_args = make_tensors(args, &elems, outputs, options.seed)?;
    call(&tuned.function, &tuned_args).map_err(|message| VerifyError::Call {
        which: "tuned",
        message,
    })?;
    call(&reference.function, &reference_args).map_err(|message| VerifyError::Call {
        which: "reference",
        message,
    })?;

    let reduction_len = options
        .reduction_len
        .unwrap_or_else(|| estimate_reduction_len(args, outputs));
    let mut max_abs_error = 0.0f64;
    let mut max_rel_error = 0.0f64;
    for &output in outputs {
        let tolerance = options
            .tolerance
            .unwrap_or_else(|| Tolerance::for_dtype(&args[output].dtype));
        let cmp = compare(
            elems[output],
            tensor_bytes(&tuned_args[output]),
            tensor_bytes(&reference_args[output]),
            tolerance,
            reduction_len,
        );
        max_abs_error = max_abs_error.max(cmp.max_abs_error);
        max_rel_error = max_rel_error.max(cmp.max_rel_error);
        if let Some((index, tuned, reference)) = cmp.first_mismatch {
            return Err(VerifyError::Mismatch {
                output,
                index,
                tuned,
                reference,
                mismatches: cmp.mismatches,
                elements: cmp.elements,
                max_abs_error: cmp.max_abs_error,
                max_rel_error: cmp.max_rel_error,
                atol_eff: cmp.atol_eff,
                rtol: tolerance.rtol,
            });
        }
    }

    let (tuned_latency_s, reference_latency_s, timer) =
        time_both(&tuned, &tuned_args, &reference, &reference_args, options)?;
    Ok(Verification {
        tuned_latency_s,
        reference_latency_s,
        max_abs_error,
        max_rel_error,
        timer,
    })
}
