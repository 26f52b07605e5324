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

use serde::{Deserialize, Serialize};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tvm_ffi::tvm_ffi_sys::dlpack::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLTensor};
use tvm_ffi::{AnyView, Bytes, Function, Module, NDAllocator, Tensor};

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

// ---------------------------------------------------------------------------
// The TVM runtime
// ---------------------------------------------------------------------------

/// The loaded runtime: its canonical path. The `dlopen` handle is never
/// closed, on purpose: kernels and TVM's global registry point into it.
static RUNTIME: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();

/// `dlopen`s `libtvm_runtime.so` with `RTLD_NOW | RTLD_GLOBAL` the first time
/// it is called and keeps it loaded for the life of the process. Later calls
/// with the same file (after resolving symlinks) do nothing; another file is
/// an error, since two TVM runtimes cannot live in one process.
///
/// `libtvm_runtime.so` needs `libtvm_ffi.so`, which this binary already links
/// (found through the rpath that `build.rs` embeds), so the loader reuses it.
pub fn load_tvm_runtime(path: &Path) -> Result<(), VerifyError> {
    let fail = |reason: String| VerifyError::Runtime {
        path: path.to_path_buf(),
        reason,
    };
    let canonical = path.canonicalize().map_err(|e| fail(format!("{e}")))?;
    let slot = RUNTIME.get_or_init(|| Mutex::new(None));
    let mut loaded = slot.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(existing) = loaded.as_ref() {
        if *existing == canonical {
            return Ok(());
        }
        return Err(fail(format!(
            "another TVM runtime is already loaded in this process ({})",
            existing.display()
        )));
    }
    let c_path = CString::new(canonical.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("path contains a NUL byte".into()))?;
    // SAFETY: dlopen with a valid C string; the handle is intentionally leaked
    // (never dlclose'd) so the library stays for the process lifetime.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let reason = unsafe {
            let err = libc::dlerror();
            if err.is_null() {
                "dlopen failed".to_string()
            } else {
                CStr::from_ptr(err).to_string_lossy().into_owned()
            }
        };
        return Err(fail(reason));
    }
    *loaded = Some(canonical);
    Ok(())
}

// ---------------------------------------------------------------------------
// Kernels and tensors
// ---------------------------------------------------------------------------

struct Kernel {
    /// Keeps the library loaded while `function` is used.
    module: Module,
    function: Function,
    entry: String,
}

fn load_kernel(path: &Path, entry: &str) -> Result<Kernel, VerifyError> {
    let load_err = |message: String| VerifyError::Load {
        path: path.to_path_buf(),
        message,
    };
    if !path.is_file() {
        return Err(load_err("no such file".into()));
    }
    let name = path
        .to_str()
        .ok_or_else(|| load_err("the path is not UTF-8".into()))?;
    let module = Module::load_from_file(name).map_err(|e| load_err(ffi_message(&e)))?;
    let missing = || VerifyError::MissingEntry {
        path: path.to_path_buf(),
        entry: entry.to_string(),
    };
    if !module
        .implements_function(entry, true)
        .map_err(|e| load_err(ffi_message(&e)))?
    {
        return Err(missing());
    }
    let function = module.get_function(entry).map_err(|_| missing())?;
    Ok(Kernel {
        module,
        function,
        entry: entry.to_string(),
    })
}

/// A TVM FFI error as `Kind: message` (the C++ backtrace is left out).
fn ffi_message(error: &tvm_ffi::Error) -> String {
    format!("{}: {}", error.kind(), error.message())
}

/// Element types we can fill and compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
}

impl Elem {
    fn parse(dtype: &str) -> Option<Elem> {
        Some(match dtype {
            "float16" => Elem::F16,
            "bfloat16" => Elem::BF16,
            "float32" => Elem::F32,
            "float64" => Elem::F64,
            "int8" => Elem::I8,
            "int16" => Elem::I16,
            "int32" => Elem::I32,
            "int64" => Elem::I64,
            "uint8" => Elem::U8,
            "uint16" => Elem::U16,
            "uint32" => Elem::U32,
            "uint64" => Elem::U64,
            _ => return None,
        })
    }

    fn bytes(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::F16 | Elem::BF16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16 | Elem::F32 | Elem::F64)
    }

    fn dl_data_type(self) -> DLDataType {
        let code = match self {
            Elem::F16 | Elem::F32 | Elem::F64 => DLDataTypeCode::kDLFloat,
            Elem::BF16 => DLDataTypeCode::kDLBfloat,
            Elem::I8 | Elem::I16 | Elem::I32 | Elem::I64 => DLDataTypeCode::kDLInt,
            Elem::U8 | Elem::U16 | Elem::U32 | Elem::U64 => DLDataTypeCode::kDLUInt,
        };
        DLDataType {
            code: code as u8,
            bits: (self.bytes() * 8) as u8,
            lanes: 1,
        }
    }

    /// One pseudo-random value, little-endian bytes appended to `out`.
    fn push_random(self, rng: &mut SplitMix64, out: &mut Vec<u8>) {
        // Floats: uniform in [-1, 1).
        let x = rng.next_f64() * 2.0 - 1.0;
        let small = |range: i64, rng: &mut SplitMix64| -> i64 {
            (rng.next_u64() % (2 * range as u64 + 1)) as i64 - range
        };
        match self {
            Elem::F16 => out.extend_from_slice(&f32_to_f16_bits(x as f32).to_le_bytes()),
            Elem::BF16 => out.extend_from_slice(&f32_to_bf16_bits(x as f32).to_le_bytes()),
            Elem::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            Elem::F64 => out.extend_from_slice(&x.to_le_bytes()),
            Elem::I8 => out.extend_from_slice(&(small(2, rng) as i8).to_le_bytes()),
            Elem::I16 => out.extend_from_slice(&(small(2, rng) as i16).to_le_bytes()),
            Elem::I32 => out.extend_from_slice(&(small(8, rng) as i32).to_le_bytes()),
            Elem::I64 => out.extend_from_slice(&small(8, rng).to_le_bytes()),
            Elem::U8 => out.push((rng.next_u64() % 4) as u8),
            Elem::U16 => out.extend_from_slice(&((rng.next_u64() % 4) as u16).to_le_bytes()),
            Elem::U32 => out.extend_from_slice(&((rng.next_u64() % 4) as u32).to_le_bytes()),
            Elem::U64 => out.extend_from_slice(&(rng.next_u64() % 4).to_le_bytes()),
        }
    }

    /// The element at `bytes` (little-endian) as f64 (exact for all but
    /// 64-bit integers beyond 2^53, which are compared bitwise anyway).
    fn to_f64(self, bytes: &[u8]) -> f64 {
        let a = |n: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&bytes[..n]);
            b
        };
        match self {
            Elem::F16 => f64::from(f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))),
            Elem::BF16 => f64::from(f32::from_bits(
                u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16,
            )),
            Elem::F32 => f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::F64 => f64::from_le_bytes(a(8)),
            Elem::I8 => f64::from(bytes[0] as i8),
            Elem::I16 => f64::from(i16::from_le_bytes([bytes[0], bytes[1]])),
            Elem::I32 => f64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::I64 => i64::from_le_bytes(a(8)) as f64,
            Elem::U8 => f64::from(bytes[0]),
            Elem::U16 => f64::from(u16::from_le_bytes([bytes[0], bytes[1]])),
            Elem::U32 => f64::from(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            Elem::U64 => u64::from_le_bytes(a(8)) as f64,
        }
    }
}

/// Validates the argument list; returns each argument's element type.
fn check_args(
    args: &[ArgSpec],
    outputs: &[usize],
    options: &VerifyOptions,
) -> Result<Vec<Elem>, VerifyError> {
    if args.is_empty() {
        return Err(VerifyError::BadArgs("the kernel has no arguments".into()));
    }
    if outputs.is_empty() {
        return Err(VerifyError::BadArgs("no output argument to compare".into()));
    }
    let mut elems = Vec::with_capacity(args.len());
    // Inputs exist twice (one copy per kernel), and so do outputs.
    let mut total_bytes: u128 = 0;
    for (index, arg) in args.iter().enumerate() {
        let elem = Elem::parse(&arg.dtype).ok_or_else(|| VerifyError::UnsupportedDtype {
            index,
            dtype: arg.dtype.clone(),
        })?;
        if arg.shape.iter().any(|&d| d <= 0) {
            return Err(VerifyError::BadArgs(format!(
                "argument {index} has shape {:?}; every dimension must be positive",
                arg.shape
            )));
        }
        let numel = arg
            .shape
            .iter()
            .try_fold(1u128, |acc, &d| acc.checked_mul(d as u128))
            .unwrap_or(u128::MAX);
        total_bytes = total_bytes.saturating_add(numel.saturating_mul(elem.bytes() as u128 * 2));
        elems.push(elem);
    }
    if total_bytes > u128::from(options.max_total_bytes) {
        return Err(VerifyError::BadArgs(format!(
            "the arguments need {total_bytes} bytes, more than the limit of {}",
            options.max_total_bytes
        )));
    }
    let mut seen = vec![false; args.len()];
    for &output in outputs {
        if output >= args.len() {
            return Err(VerifyError::BadArgs(format!(
                "output index {output} is out of range ({} arguments)",
                args.len()
            )));
        }
        if std::mem::replace(&mut seen[output], true) {
            return Err(VerifyError::BadArgs(format!(
                "output index {output} is listed twice"
            )));
        }
    }
    Ok(elems)
}

/// A guess at the reduction length from the shapes alone: with the two
/// largest inputs `a`, `b` and the largest output `c` (element counts),
/// `sqrt(a * b / c)`, which is exactly `k` for a matmul (`mk * kn / mn`) and
/// `in_features` for a dense layer, and about `C * sqrt(kh * kw)` for a
/// convolution (low by `sqrt(kh * kw)`); with one input, `a / c`. At least 1.
/// Callers that know the op pass [`VerifyOptions::reduction_len`] instead.
fn estimate_reduction_len(args: &[ArgSpec], outputs: &[usize]) -> u64 {
    let numel = |a: &ArgSpec| a.shape.iter().map(|&d| d.max(1) as f64).product::<f64>();
    let mut inputs: Vec<f64> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| !outputs.contains(i))
        .map(|(_, a)| numel(a))
        .collect();
    inputs.sort_by(|a, b| b.total_cmp(a));
    let output = outputs
        .iter()
        .map(|&i| numel(&args[i]))
        .fold(1.0f64, f64::max);
    let estimate = match inputs.as_slice() {
        [] => 1.0,
        [a] => a / output,
        [a, b, ..] => (a * b / output).sqrt(),
    };
    if estimate.is_finite() {
        (estimate.round() as u64).max(1)
    } else {
        1
    }
}

/// Allocates zeroed, 64-byte aligned CPU memory (the alignment TVM assumes).
/// An allocation failure leaves the data pointer null, which
/// [`make_tensors`] turns into an error before any kernel sees the tensor
/// (tvm-ffi's own `CPUNDAlloc` neither zeroes nor checks for null).
struct ZeroedCpuAlloc;

// SAFETY: alloc_data returns null or memory of the size the prototype
// describes (at least one byte), aligned to MIN_ALIGN; free_data frees it with
// the same layout and ignores null.
unsafe impl NDAllocator for ZeroedCpuAlloc {
    const MIN_ALIGN: usize = 64;

    unsafe fn alloc_data(&mut self, prototype: &DLTensor) -> *mut core::ffi::c_void {
        std::alloc::alloc_zeroed(dl_layout(prototype)).cast()
    }

    unsafe fn free_data(&mut self, tensor: &DLTensor) {
        if !tensor.data.is_null() {
            std::alloc::dealloc(tensor.data.cast(), dl_layout(tensor));
        }
    }
}

/// Layout of a compact DLTensor's data (at least one byte).
///
/// # Safety
/// `tensor.shape` must point to `tensor.ndim` dimensions.
unsafe fn dl_layout(tensor: &DLTensor) -> std::alloc::Layout {
    let dims = std::slice::from_raw_parts(tensor.shape, tensor.ndim.max(0) as usize);
    let numel: usize = dims.iter().map(|&d| d.max(0) as usize).product();
    let item = (usize::from(tensor.dtype.bits) * usize::from(tensor.dtype.lanes)).div_ceil(8);
    std::alloc::Layout::from_size_align((numel * item).max(1), ZeroedCpuAlloc::MIN_ALIGN)
        .expect("tensor layout")
}

fn cpu() -> DLDevice {
    DLDevice::new(DLDeviceType::kDLCPU, 0)
}

/// Inputs filled from the seed (one stream per argument, so an argument's
/// data does not depend on the others'), outputs zeroed.
fn make_tensors(
    args: &[ArgSpec],
    elems: &[Elem],
    outputs: &[usize],
    seed: u64,
) -> Result<Vec<Tensor>, VerifyError> {
    let mut tensors = Vec::with_capacity(args.len());
    for (index, (arg, &elem)) in args.iter().zip(elems).enumerate() {
        let tensor = Tensor::from_nd_alloc(ZeroedCpuAlloc, &arg.shape, elem.dl_data_type(), cpu());
        let bytes = tensor.numel() * elem.bytes();
        let no_memory = || {
            VerifyError::BadArgs(format!(
                "cannot allocate {bytes} bytes for argument {index}"
            ))
        };
        if tensor.data_ptr().is_null() {
            return Err(no_memory());
        }
        if !outputs.contains(&index) {
            let mut rng =
                SplitMix64::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut data = Vec::new();
            data.try_reserve_exact(bytes).map_err(|_| no_memory())?;
            for _ in 0..tensor.numel() {
                elem.push_random(&mut rng, &mut data);
            }
            // SAFETY: the tensor owns numel * bytes bytes of compact CPU memory
            // that nothing else references yet.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    tensor.data_ptr() as *mut u8,
                    data.len(),
                );
            }
        }
        tensors.push(tensor);
    }
    Ok(tensors)
}

/// The raw bytes of a compact CPU tensor.
fn tensor_bytes(tensor: &Tensor) -> &[u8] {
    let item = (usize::from(tensor.dtype().bits) * usize::from(tensor.dtype().lanes)).div_ceil(8);
    // SAFETY: tensors made by make_tensors are compact CPU memory of numel *
    // item bytes, alive as long as `tensor`.
    unsafe { std::slice::from_raw_parts(tensor.data_ptr() as *const u8, tensor.numel() * item) }
}

fn call(function: &Function, tensors: &[Tensor]) -> Result<(), String> {
    let views: Vec<AnyView<'_>> = tensors.iter().map(AnyView::from).collect();
    function
        .call_packed(&views)
        .map(drop)
        .map_err(|e| ffi_message(&e))
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

struct Comparison {
    elements: usize,
    mismatches: usize,
    /// (flat index, tuned, reference) of the first element out of tolerance.
    first_mismatch: Option<(usize, f64, f64)>,
    max_abs_error: f64,
    max_rel_error: f64,
    atol_eff: f64,
}

fn compare(
    elem: Elem,
    tuned: &[u8],
    reference: &[u8],
    tolerance: Tolerance,
    reduction_len: u64,
) -> Comparison {
    let size = elem.bytes();
    let atol_eff = if elem.is_float() {
        tolerance.atol * (reduction_len.max(1) as f64).sqrt()
    } else {
        tolerance.atol
    };
    let mut out = Comparison {
        elements: tuned.len() / size,
        mismatches: 0,
        first_mismatch: None,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        atol_eff,
    };
    for (index, (t, r)) in tuned
        .chunks_exact(size)
        .zip(reference.chunks_exact(size))
        .enumerate()
    {
        let (tv, rv) = (elem.to_f64(t), elem.to_f64(r));
        let ok = if !elem.is_float() {
            // Integers: exact, bitwise (f64 is not exact for large 64-bit values).
            t == r || (tv - rv).abs() <= atol_eff + tolerance.rtol * rv.abs()
        } else if tv.is_nan() || rv.is_nan() {
            tv.is_nan() && rv.is_nan()
        } else if tv.is_infinite() || rv.is_infinite() {
            tv == rv
        } else {
            (tv - rv).abs() <= atol_eff + tolerance.rtol * rv.abs()
        };
        let diff = if t == r { 0.0 } else { (tv - rv).abs() };
        let diff = if diff.is_nan() { f64::INFINITY } else { diff };
        out.max_abs_error = out.max_abs_error.max(diff);
        if rv.abs() > atol_eff {
            out.max_rel_error = out.max_rel_error.max(diff / rv.abs());
        }
        if !ok {
            out.mismatches += 1;
            if out.first_mismatch.is_none() {
                out.first_mismatch = Some((index, tv, rv));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------

/// Median per-call latencies of (tuned, reference), and the timer used.
fn time_both(
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
fn time_evaluator(
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
fn run_evaluator(
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
struct ManualTimer {
    min_repeat: Duration,
    number: u64,
    warmed_up: bool,
}

impl ManualTimer {
    fn new(min_repeat_ms: u32) -> Self {
        ManualTimer {
            min_repeat: Duration::from_millis(u64::from(min_repeat_ms)),
            number: 1,
            warmed_up: false,
        }
    }

    fn run(
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

fn median(samples: &mut [f64]) -> Option<f64> {
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

// ---------------------------------------------------------------------------
// Small numeric helpers
// ---------------------------------------------------------------------------

/// SplitMix64: tiny, deterministic on every platform and Rust version.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// IEEE half from f32, round to nearest even (inputs here are in [-1, 1)).
fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x007f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rounded = (m + half - 1 + ((m >> shift) & 1)) >> shift;
        return sign | rounded as u16;
    }
    let rounded = mant + 0x0fff + ((mant >> 13) & 1);
    let (e, m) = if rounded & 0x0080_0000 != 0 {
        (e + 1, 0)
    } else {
        (e, rounded >> 13)
    };
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    sign | ((e as u16) << 10) | m as u16
}

fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value = m * 2^-24.
            let value = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// bfloat16 from f32, round to nearest even.
fn f32_to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// Test kernels compiled with the venv's TVM, shared with the backend tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The Python with TVM the tests use: `TUNEFLEET_TEST_PYTHON`, else the
    /// repository's `.venv`.
    pub(crate) fn python() -> PathBuf {
        std::env::var_os("TUNEFLEET_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"))
    }

    /// Compiles `n`x`n`x`n` matmuls (`C = A·B`, entry `main`) into `dir`:
    /// for every dtype `<dtype>-reference.so` (no schedule) and
    /// `<dtype>-tuned.so` (tiled, vectorised, parallel), and for float32 also
    /// `float32-wrong.so` (computes `A·B + 1`). Returns the path of
    /// libtvm_runtime.so.
    pub(crate) fn build_matmuls(dir: &Path, n: u32, dtypes: &[&str]) -> PathBuf {
        let output = Command::new(python())
            .arg("-c")
            .arg(SCRIPT)
            .arg(dir)
            .arg(n.to_string())
            .args(dtypes)
            .output()
            .expect("run the fixture script with the venv python");
        assert!(
            output.status.success(),
            "fixture script failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        PathBuf::from(stdout.lines().last().expect("runtime path").trim())
    }

    const SCRIPT: &str = r#"
import os, sys
import tvm
import tvm.libinfo
import tvm.s_tir
from tvm import te

out, n, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def matmul(dtype, plus_one=False):
    A = te.placeholder((n, n), dtype, name="A")
    B = te.placeholder((n, n), dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    if plus_one:
        D = te.compute((n, n), lambda i, j: C[i, j] + tvm.tirx.const(1, dtype), name="D")
        return te.create_prim_func([A, B, D])
    return te.create_prim_func([A, B, C])

def build(func, name, tile=False):
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    if tile:
        sch = tvm.s_tir.Schedule(mod)
        i, j, k = sch.get_loops(sch.get_sblock("C"))
        io, ii = sch.split(i, [None, 8])
        jo, ji = sch.split(j, [None, 16])
        sch.reorder(io, jo, k, ii, ji)
        sch.vectorize(ji)
        sch.parallel(io)
        mod = sch.mod
    tvm.compile(mod, target="llvm").export_library(os.path.join(out, name))

for dtype in dtypes:
    build(matmul(dtype), dtype + "-reference.so")
    build(matmul(dtype), dtype + "-tuned.so", tile=True)
    if dtype == "float32":
        build(matmul(dtype, plus_one=True), dtype + "-wrong.so")
print(tvm.libinfo.find_libtvm_runtime())
"#;
}

#[cfg(test)]
mod tests;
